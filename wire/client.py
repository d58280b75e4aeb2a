"""What a client of a task runs: its byte procedure's parameters (``docs/wire_format.md``, section 5).

``python -m wire.client TASK.json [--out FILE]`` writes :func:`client_params_document`, the parameters
(the thresholds as exact integers) a client reads with the task file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.longitudinal.memo import MemoizedOracle
from wire.vectors import (
    WIRE_VECTORS_VERSION,
    memo_wire_params,
    numeric_wire_params,
    sparse_wire_params,
    wire_params,
)

__all__ = ["client_wire_params", "client_params_document"]


def client_wire_params(task: Any) -> dict[str, Any]:
    """The parameters a client of ``task`` runs the byte procedure with: :func:`wire_params` (frequency
    oracles), :func:`memo_wire_params` (memoized), :func:`numeric_wire_params` or
    :func:`sparse_wire_params`. Its ``T_*`` integers are the thresholds, exactly; a client reads them
    rather than recomputing them through its own ``exp`` and ``log``.

    Raises:
        ValueError: a kind of task without a byte procedure (range queries, batch queries).
    """
    kind = getattr(task, "kind", None)
    if kind == "sparse":
        return sparse_wire_params(task.make_mechanism())
    if kind == "numeric":
        if getattr(task, "is_multi", False):
            raise ValueError(f"task {task.task_id!r}: numeric tasks of several attributes have no client "
                             "byte procedure yet (docs/wire_format.md, section 7)")
        return numeric_wire_params(task.make_mechanism())
    if kind != "frequency":
        raise ValueError(f"task {task.task_id!r}: {kind} tasks have no client byte procedure")
    oracle = task.make_oracle()
    return memo_wire_params(oracle) if isinstance(oracle, MemoizedOracle) else wire_params(oracle)


def client_params_document(task: Any) -> dict[str, Any]:
    """``{"task_id", "vectors_version", "params"}``: what ``python -m wire.client TASK.json`` writes, to be
    served with the task file (the TypeScript client's ``{wire}`` option)."""
    params = client_wire_params(task)
    return {"task_id": task.task_id, "vectors_version": WIRE_VECTORS_VERSION, "params": params}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wire.client TASK.json [--out FILE]``: the task's client parameters as JSON."""
    import argparse
    import json
    import sys

    from ldp.task import TaskError, load_task

    ap = argparse.ArgumentParser(prog="python -m wire.client", description=main.__doc__)
    ap.add_argument("task", help="the task file")
    ap.add_argument("--out", help="write here instead of standard output")
    args = ap.parse_args(argv)
    try:
        doc = client_params_document(load_task(args.task))
    except (OSError, TaskError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
