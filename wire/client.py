"""What a client of a task encodes with, and the byte procedure's parameters it reads.

:func:`make_client_encoder` turns a task into a :class:`ClientEncoder`: the mechanism its devices encode
with, the type of the value they hold, how many memoization keys a user can charge, and the parameters of
the mechanism's byte procedure (``docs/wire_format.md``, section 5). It dispatches through the wire specs
the mechanisms declare beside their payloads (:class:`ldp.payload.WireSpec`): the kind's mechanisms say what
a client encodes (``inputs``: one category, one real, a sparse vector, a record, a string) and which
byte procedure gives the parameters, so no caller compares kind names.

``python -m wire.client TASK.json [--out FILE]`` writes :func:`client_params_document`, the parameters
(the thresholds as exact integers) a client reads with the task file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from ldp.payload import declared_wire
from ldp.reports import Reports
from wire.registry import kind_inputs
from wire.vectors import (
    WIRE_VECTORS_VERSION,
    memo_wire_params,
    numeric_wire_params,
    pem_wire_params,
    sparse_wire_params,
    wire_params,
)

__all__ = ["ClientEncoder", "StringEncoder", "make_client_encoder", "client_wire_params",
           "client_params_document", "published_level"]

#: byte procedure (:data:`ldp.payload.WIRE_PROCEDURES`) -> the parameters of a mechanism of it
_PARAMS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "frequency": wire_params,
    "memo": memo_wire_params,
    "numeric": numeric_wire_params,
    "sparse": sparse_wire_params,
    "heavy_hitters": pem_wire_params,
}


class ClientEncoder:
    """A task's client side: :attr:`mechanism` (what devices encode with), :attr:`value_type` (the type of
    one user's value), :attr:`memo_keys` and :meth:`wire_params`."""

    #: what a client encodes (:data:`ldp.payload.WIRE_INPUTS`)
    inputs: ClassVar[str] = ""
    value_type: ClassVar[type | None] = None

    def __init__(self, task: Any) -> None:
        self.task = task
        self.mechanism = self._build(task)

    def _build(self, task: Any) -> Any:
        return task.make_mechanism()

    def encode(self, values: Any, rng: np.random.Generator | None = None) -> Reports:
        """Reports of ``values`` (one per user) through the mechanism's own ``encode``."""
        out = self.mechanism.encode(values, rng=rng)
        return out[0] if isinstance(out, tuple) else out

    @property
    def memoized(self) -> bool:
        """The mechanism memoizes a permanent response per user (repeated collection)."""
        return bool(getattr(self.mechanism, "memoized", False))

    @property
    def memo_keys(self) -> int:
        """How many memoization keys one user can charge: the values of ``[0, d)`` and the absent value."""
        return int(self.mechanism.d) + 1

    def wire_params(self) -> dict[str, Any]:
        """The parameters a client runs the mechanism's byte procedure with (its ``T_*`` thresholds as
        exact integers; a client reads them rather than recomputing them with its own ``exp`` / ``log``).

        Raises:
            ValueError: the mechanism has no byte procedure (the reason it declares).
        """
        spec = declared_wire(self.mechanism)
        name = getattr(self.mechanism, "name", type(self.mechanism).__name__)
        if spec is None:
            raise ValueError(f"task {self.task.task_id!r}: mechanism {name} declares no wire spec")
        if spec.procedure is None:
            tid = self.task.task_id
            raise ValueError(f"task {tid!r}: {name} has no client byte procedure ({spec.reason})")
        return _PARAMS[spec.procedure](self.mechanism)


class CategoricalEncoder(ClientEncoder):
    """One value of ``[0, domain_size)`` per user, through the task's frequency (or memoized) oracle."""

    inputs = "categorical"
    value_type = int

    def _build(self, task: Any) -> Any:
        return task.make_oracle()

    @property
    def memoized(self) -> bool:
        return declared_wire(self.mechanism) is not None and declared_wire(self.mechanism).procedure == "memo"


class RealEncoder(ClientEncoder):
    """One bounded real per user (or one per attribute), through the task's numeric mechanism."""

    inputs = "real"
    value_type = float

    @property
    def memo_keys(self) -> int:
        """The memoized counter's grid points (0 for a mechanism without memoization)."""
        return int(getattr(self.mechanism, "points", 0)) if self.memoized else 0


class SparseEncoder(ClientEncoder):
    """A sparse vector per user, through the task's sparse-vector mechanism."""

    inputs = "sparse"

    def encode(self, values: Any, rng: np.random.Generator | None = None) -> Reports:
        return self.mechanism.encode(values, rng=rng)[0]

    @property
    def memo_keys(self) -> int:
        return 0


class RecordEncoder(ClientEncoder):
    """A record of attribute values per user, through the task's range mechanism (one group each)."""

    inputs = "records"

    @property
    def memo_keys(self) -> int:
        return 0


class StringEncoder(ClientEncoder):
    """One string (or bytes) of at most the task's ``max_length`` bytes per user, through the task's PEM;
    each report's level travels as its group (:meth:`encode_grouped`). A trie-mode task's clients report at
    the level the last publication names (:func:`published_level`; level 0 before the first)."""

    inputs = "strings"
    value_type = str

    def encode(self, values: Any, rng: np.random.Generator | None = None) -> Reports:
        raise ValueError(f"task {self.task.task_id!r}: a heavy-hitters report's level is its group: "
                         "use encode_grouped")

    def encode_grouped(
        self, values: Any, rng: np.random.Generator | None = None, level: int | None = None
    ) -> tuple[Reports, np.ndarray]:
        """``(reports, groups)``: each value's report (``value`` = ``y``, ``seed``) and its level (the
        task's ``truncate`` applies). One-window mode: a random level per report (``level`` must be None);
        trie mode: every report at ``level`` (None: level 0, what a client without a publication sends).

        Raises:
            ValueError: a level outside the task's levels, or a level for a one-window task."""
        trie = getattr(self.task, "mode", "one_window") == "trie"
        if level is not None and not trie:
            raise ValueError(f"task {self.task.task_id!r}: a one-window task's clients draw their level at "
                             "random; a level applies to trie-mode tasks")
        if trie:
            level = self.mechanism.check_level(0 if level is None else level)
        out = self.mechanism.encode(values, rng=rng, truncate=bool(self.task.truncate), level=level)
        y = np.asarray(out.y, np.uint64).astype(np.int64)
        reports = Reports(values=y, seeds=np.asarray(out.seed, np.uint64))
        return reports, np.asarray(out.level).astype(np.int64)

    @property
    def memo_keys(self) -> int:
        return 0


_ENCODERS: dict[str, type[ClientEncoder]] = {
    cls.inputs: cls for cls in (CategoricalEncoder, RealEncoder, SparseEncoder, RecordEncoder, StringEncoder)
}


def make_client_encoder(task: Any) -> ClientEncoder:
    """The client side of ``task``, chosen by what its kind's mechanisms declare they encode.

    Raises:
        ValueError: a kind whose devices send no reports (central DP) or whose mechanisms declare no inputs.
    """
    inputs = kind_inputs(task.kind)
    if inputs is None:
        raise ValueError(f"task {task.task_id!r}: {task.kind} tasks have no device client (no registered "
                         "mechanism declares what a client encodes)")
    return _ENCODERS[inputs](task)


def published_level(task: Any, directory: str | None) -> int:
    """The level a trie-mode client of ``task`` reports at: the ``level`` of the newest publication in
    ``directory`` (:func:`wire.publication.read_latest`), 0 when there is none yet.

    Raises:
        ValueError: a malformed publication, another task's, or a level the task does not have.
    """
    from wire.publication import read_latest

    if directory is None:
        return 0
    latest = read_latest(directory, task.task_id)
    if latest is None:
        return 0
    levels = int(task.n_groups)
    level = latest.get("level")
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < levels:
        raise ValueError(f"{directory}: the publication's level {level!r} is not a level of task "
                         f"{task.task_id!r} (0 to {levels - 1})")
    return level


def client_wire_params(task: Any) -> dict[str, Any]:
    """The parameters a client of ``task`` runs the byte procedure with (:meth:`ClientEncoder.wire_params`).

    Raises:
        ValueError: a task without a client byte procedure (range or batch queries, several attributes).
    """
    return make_client_encoder(task).wire_params()


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
