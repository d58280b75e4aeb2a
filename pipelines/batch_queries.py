"""Batch linear queries with the matrix mechanism on Beam -- CENTRAL DP (a trusted aggregator).

**Not local DP.** The input records are the users' raw cell values (Avro files in the layout of
``schemas/report.avsc`` with ``items`` = one coordinate per attribute of the task's public domain); the job
counts them per cell, measures the task's strategy (identity, h2, haar, lsa, opt) in integers with exact
discrete Gaussian noise once per window and pane, and answers the workload with least squares::

    python -m pipelines.batch_queries --task TASK.json --input 'DIR/*.avro' --workload W.json --output OUT \
        [--window_size SECONDS] [--noise_key_file KEY] [--noise_seed N] [--runner ...]

One record per user (at most the task's ``max_contributions``): the job cannot check it (records carry no
user id), so deduplicate upstream. Each pane's noise is a PRF stream of the secret noise key
(``--noise_key_file``, default ``TASK.json.noise_key``, created mode 0600 on first use) and of the pane's
task, window, pane index and exact counts: a retry or rerun over the same counts republishes the same
release. ``--noise_seed`` replaces the key by a public one, for tests and simulations only (the rows then
say ``noise_source: seeded ...``: not private).

Outputs (``docs/matrix_mechanism.md``): ``OUT/answers-<window>-paneNNNNN-*.jsonl`` and ``.avro`` (one row
per window, pane and query; ``schemas/batch_answer.avsc``), refused records in ``OUT/dead_letter/*.avro``
(reason and size only, never the record) and ``OUT/counts.json``. The counts and the job's log lines hold
exact record counts: they are the trusted operator's, not differentially private; ``counts.json`` says so
and ``--store`` gets none of them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipelines.cli import job_parser
from pipelines.job import Job, add_job_flags, run_job

if TYPE_CHECKING:  # the aggregator's modules are imported when the job runs, not to build its parser
    from ldp.kinds.batch_queries.aggregate import BatchAggregator
    from ldp.kinds.batch_queries.task import BatchTask

__all__ = ["parser", "run"]


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def parser() -> argparse.ArgumentParser:
    """The job's flags (plus every Beam pipeline option)."""
    p = job_parser(__doc__.split("\n")[0])
    add_job_flags(p)
    p.add_argument(
        "--workload",
        required=True,
        help='workload JSON: {"type": "allrange"|"prefix"|"identity"} or {"type": "ranges", "ranges": '
        "[{attribute: [lo, hi]}, ...]} (inclusive)",
    )
    p.add_argument(
        "--noise_seed",
        type=_seed,
        help="TESTS AND SIMULATION ONLY: seed the noise (answers are then not private)",
    )
    p.add_argument(
        "--noise_key_file",
        help="the trusted aggregator's secret noise key (32 bytes, created mode 0600 if absent); "
        "default: the task file's path + '.noise_key'",
    )
    return p


def _aggregator(ns: argparse.Namespace, task: BatchTask) -> BatchAggregator:
    from ldp.dgauss import load_or_create_key
    from ldp.kinds.batch_queries.aggregate import BatchAggregator, load_workload

    if ns.early_firing is not None or ns.accumulating or ns.window_period is not None:
        raise ValueError(
            "batch-query jobs release each record once: --early_firing, --accumulating and --window_period "
            "would release the same records again"
        )
    workload = load_workload(ns.workload, task)
    if ns.noise_seed is not None:
        if ns.noise_key_file is not None:
            raise ValueError("give --noise_key_file or --noise_seed, not both")
        return BatchAggregator(task, workload, noise_seed=ns.noise_seed)
    key = load_or_create_key(ns.noise_key_file or f"{ns.task}.noise_key")
    return BatchAggregator(task, workload, noise_key=key)


JOB = Job(kind="batch_queries", make_aggregator=_aggregator)


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the job; returns its summary (``counts``, ``output``, ``panes_written``, ...)."""
    return run_job(JOB, parser(), argv)


if __name__ == "__main__":
    run()
