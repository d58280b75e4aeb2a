"""k-sparse vector mean estimation over LDP reports (SVME and its baselines) on Beam, batch or streaming.

Batch, over Avro report files (one global window unless the task or ``--window_size`` says otherwise)::

    python -m pipelines.sparse_mean --task TASK.json --input 'DIR/*.avro' --output OUT \
        [--items ITEMS.json] [--window_size SECONDS [--window_period SECONDS]] [--runner ...]

Streaming, from a watched directory or Pub/Sub (the flags of ``pipelines.frequency``)::

    python -m pipelines.sparse_mean --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \
        --output OUT --window_size 60 [--allowed_lateness 30] [--accumulating] [--streaming_duration 600]

The task is a sparse task (``"kind": "sparse"``, mechanism svme, kfold, sampling, gaussian, harmony or
pckv; ``docs/sparse_vectors.md``). Without ``--items`` every coordinate 0..d-1 is estimated through the
fixed-size whole-vector accumulator (seeded mechanisms need the task's default ``gf2-affine`` hashes and
d <= 2**27); ``--items`` names a query set (a JSON list of item ids, or ``{"items": [...]}``; ids up to
2**63 - 1) and the accumulator holds only those.

Outputs (``docs/pipelines.md``): ``OUT/estimates-<window>-paneNNNNN-*.jsonl`` and ``.avro``
(``schemas/sparse_estimate.avsc``; one row per window and pane: ``n_reports``, ``items``, ``mean``,
``std`` and ``linf_bound_95``), refused reports in ``OUT/dead_letter/*.avro`` with their reasons, and
``OUT/counts.json`` (batch) or ``OUT/counts/`` (streaming), where read = accepted + rejected.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pipelines.cli import job_parser
from pipelines.job import Job, add_job_flags, run_job

if TYPE_CHECKING:  # the aggregator's modules are imported when the job runs, not to build its parser
    from ldp.kinds.sparse.aggregate import SparseAggregator
    from ldp.kinds.sparse.task import SparseTask

__all__ = ["parser", "run", "load_items"]

#: Largest query set ``--items`` may name (the accumulator holds one sum per item).
MAX_ITEMS = 1 << 24


def parser() -> argparse.ArgumentParser:
    """The job's flags (plus every Beam pipeline option)."""
    p = job_parser(__doc__.split("\n")[0])
    add_job_flags(p)
    p.add_argument(
        "--items",
        help='query set: JSON list of item ids in [0, d), or {"items": [...]} (default: every coordinate)',
    )
    return p


def load_items(path: str, task: SparseTask) -> np.ndarray:
    """The item ids of a query-set file, checked against the task (ValueError: what is wrong)."""
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except OSError as exc:
        raise ValueError(f"--items {path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"--items {path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if isinstance(obj, dict):
        extra = set(obj) - {"items"}
        if extra or "items" not in obj:
            raise ValueError(f'--items {path}: expected a list or {{"items": [...]}}, got keys {sorted(obj)}')
        obj = obj["items"]
    if not isinstance(obj, list) or not obj:
        raise ValueError(f"--items {path}: expected a non-empty list of item ids")
    if len(obj) > MAX_ITEMS:
        raise ValueError(f"--items {path}: {len(obj)} items; at most {MAX_ITEMS}")
    d = task.domain_size
    bad = [x for x in obj if not (type(x) is int and 0 <= x < d)]
    if bad:
        raise ValueError(
            f"--items {path}: {len(bad)} id(s) are not integers in [0, {d}) (the task's domain_size), "
            f"e.g. {bad[0]!r}"
        )
    items = np.array(obj, dtype=np.uint64)
    uniq, counts = np.unique(items, return_counts=True)
    if len(uniq) < len(items):
        raise ValueError(f"--items {path}: item {int(uniq[counts > 1][0])} is repeated")
    return items


def _aggregator(ns: argparse.Namespace, task: SparseTask) -> SparseAggregator:
    from ldp.kinds.sparse.aggregate import SparseAggregator

    items = None if ns.items is None else load_items(ns.items, task)
    return SparseAggregator(task, items=items)


JOB = Job(kind="sparse", make_aggregator=_aggregator)


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the job; returns its summary (``counts``, ``output``, ``panes_written``, ...)."""
    return run_job(JOB, parser(), argv)


if __name__ == "__main__":
    run()
