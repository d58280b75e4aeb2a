"""Batch linear queries with the Gaussian matrix mechanism on Beam -- CENTRAL DP (a trusted aggregator).

**Not local DP.** The input records are the users' raw cell values (Avro files in the layout of
``schemas/report.avsc`` with ``items`` = one coordinate per attribute of the task's public domain); the job
counts them per cell, draws the Gaussian noise once per window and pane, and answers the workload with
least squares through the task's strategy (identity, h2, haar, lsa, opt)::

    python -m pipelines.batch_queries --task TASK.json --input 'DIR/*.avro' --workload W.json --output OUT \
        [--window_size SECONDS] [--noise_seed N] [--runner ...]

One record per user (at most the task's ``max_contributions``): the job cannot check it (records carry no
user id), so deduplicate upstream. The noise comes from the OS CSPRNG; ``--noise_seed`` makes it
reproducible for tests and simulations only (the rows then say ``noise_source: seeded ...``: not private).

Outputs (``docs/matrix_mechanism.md``): ``OUT/answers-<window>-paneNNNNN-*.jsonl`` and ``.avro`` (one row
per window, pane and query; ``schemas/batch_answer.avsc``), refused records in ``OUT/dead_letter/*.avro``
and ``OUT/counts.json``. The counts and the job's log lines hold exact record counts: they are the trusted
operator's, not differentially private, and must not be published with the answers.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ldp.aggregate.batch import BatchAggregator, load_workload
from ldp.task import BatchTask
from pipelines.cli import job_parser
from pipelines.job import Job, add_job_flags, run_job

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
        help="TESTS AND SIMULATION ONLY: seed the noise (answers are then not private); default: OS CSPRNG",
    )
    return p


def _aggregator(ns: argparse.Namespace, task: BatchTask) -> BatchAggregator:
    if ns.early_firing is not None or ns.accumulating or ns.window_period is not None:
        raise ValueError(
            "batch-query jobs release each record once: --early_firing, --accumulating and --window_period "
            "would release the same records again"
        )
    return BatchAggregator(task, load_workload(ns.workload, task), noise_seed=ns.noise_seed)


JOB = Job(kind="batch_queries", make_aggregator=_aggregator)


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the job; returns its summary (``counts``, ``output``, ``panes_written``, ...)."""
    return run_job(JOB, parser(), argv)


if __name__ == "__main__":
    run()
