"""Frequency estimation over LDP reports on Beam (any oracle of ``ldp.oracles``), batch or streaming.

Batch, over Avro report files (one global window unless the task or ``--window_size`` says otherwise)::

    python -m pipelines.frequency --task TASK.json --input 'DIR/*.avro' --output OUT \
        [--window_size SECONDS [--window_period SECONDS]] [--postprocess norm-sub] [--runner ...]

Streaming, from a watched directory (each new file matching the glob is read once) or Pub/Sub::

    python -m pipelines.frequency --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \
        --output OUT --window_size 60 [--allowed_lateness 30] [--accumulating] [--streaming_duration 600]
    python -m pipelines.frequency --task TASK.json --streaming \
        --input_subscription projects/P/subscriptions/S --output OUT --window_size 60 [--early_firing 10] \
        [--output_topic projects/P/topics/EST]

Outputs (``docs/pipelines.md``): ``OUT/estimates-<window>-paneNNNNN-*.jsonl`` and ``.avro``
(``schemas/estimate.avsc``; one file per window and pane, per group one row), refused reports in
``OUT/dead_letter/*.avro``, and ``OUT/counts.json`` (batch) or ``OUT/counts/`` (streaming). The job prints
``reports read=N accepted=A rejected=R``, the output path and the windows written.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ldp.kinds.frequency.aggregate import (
    DEFAULT_JSONL_MAX_VALUES,
    EstimateRow,
    FrequencyAggregator,
    estimate_json,
)
from ldp.kinds.frequency.task import FrequencyTask
from ldp.task import POSTPROCESS_METHODS
from pipelines.cli import job_parser
from pipelines.job import Job, add_job_flags, run_job

if TYPE_CHECKING:  # Beam is imported when the job runs, not to build its parser
    from apache_beam.pvalue import PCollection

__all__ = ["parser", "run"]


def parser() -> argparse.ArgumentParser:
    """The job's flags (plus every Beam pipeline option)."""
    p = job_parser(__doc__.split("\n")[0])
    add_job_flags(p)
    p.add_argument(
        "--postprocess", choices=POSTPROCESS_METHODS, help="post-processing method (default: the task's)"
    )
    p.add_argument(
        "--output_topic", help="streaming: also publish each estimate row as JSON to this Pub/Sub topic"
    )
    return p


def _aggregator(ns: argparse.Namespace, task: FrequencyTask) -> FrequencyAggregator:
    return FrequencyAggregator(task, ns.postprocess)


def _to_pubsub(row: EstimateRow, max_values: int = DEFAULT_JSONL_MAX_VALUES) -> bytes:
    """The row's JSON Lines form (at most ``max_values`` values, as in the files): a Pub/Sub message holds
    at most 10 MB, and a whole row at d = 2^18 is about 38 MB."""
    return json.dumps(estimate_json(row._asdict(), max_values), allow_nan=False).encode("utf-8")


def _publish(ns: argparse.Namespace, outputs: dict[str, PCollection]) -> None:
    if ns.output_topic:
        import apache_beam as beam

        rows = outputs["estimates"]
        cap = getattr(ns, "jsonl_max_values", DEFAULT_JSONL_MAX_VALUES)
        messages = rows | "ToPubSubJson" >> beam.Map(_to_pubsub, cap)
        messages | "Publish" >> beam.io.WriteToPubSub(ns.output_topic)


JOB = Job(kind="frequency", make_aggregator=_aggregator, extra_steps=_publish, output_topic="output_topic")


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the job; returns its summary (``counts``, ``output``, ``panes_written``, ...)."""
    return run_job(JOB, parser(), argv)


if __name__ == "__main__":
    run()
