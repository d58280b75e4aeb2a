"""Multi-dimensional range queries over LDP reports (HDG, TDG, CALM, HIO, LHIO, MSW, Uni) on Beam.

Batch, over Avro report files (one global window unless the task or ``--window_size`` says otherwise)::

    python -m pipelines.range_queries --task TASK.json --input 'DIR/*.avro' --queries Q.json --output OUT \
        [--window_size SECONDS [--window_period SECONDS]] [--runner ...]

Streaming, from a watched directory or Pub/Sub (the flags of ``pipelines.frequency``)::

    python -m pipelines.range_queries --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \
        --queries Q.json --output OUT --window_size 60 [--accumulating] [--streaming_duration 600]

Answer new queries from the saved window models, without the reports (prints JSON lines)::

    python -m pipelines.range_queries answer --model 'OUT/models/models-*.jsonl' --queries Q.json

Outputs (``docs/range_pipeline.md``): ``OUT/answers-<window>-paneNNNNN-*.jsonl`` / ``.avro`` (one row per
window, pane and query; ``schemas/range_answer.avsc``), the window models under ``OUT/models/``
(``schemas/range_model.avsc``), refused reports in ``OUT/dead_letter/*.avro`` and ``OUT/counts.json``.
Queries are checked before the job starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ldp.aggregate import Record
from ldp.kinds.range.aggregate import (
    RangeAggregator,
    answer_from_model_records,
    load_queries,
    read_model_records,
)
from ldp.kinds.range.task import RangeTask
from pipelines.cli import fail, job_parser, parse_job_args
from pipelines.job import Job, add_job_flags, run_job

__all__ = ["parser", "answer_parser", "run", "run_answer"]


def parser() -> argparse.ArgumentParser:
    """The job's flags (plus every Beam pipeline option)."""
    p = job_parser(
        __doc__.split("\n")[0],
        epilog="Sub-command: `answer --model OUT/models --queries Q.json` answers queries from saved models.",
    )
    add_job_flags(p)
    p.add_argument(
        "--queries", required=True, help="JSON list of queries {attribute: [lo, hi], ...}, inclusive"
    )
    return p


def answer_parser() -> argparse.ArgumentParser:
    base = parser().prog  # `ldp-beam range-queries` or `python -m pipelines.range_queries`
    p = job_parser(
        "Answer range queries from saved window models (OUT/models/), without the reports.",
        prog=f"{base} answer",
        beam_options=False,
    )
    p.add_argument("--model", required=True, help="model file(s): a .jsonl/.avro path, a glob, or OUT/models")
    p.add_argument("--queries", required=True, help="JSON list of queries {attribute: [lo, hi], ...}")
    return p


def _aggregator(ns: argparse.Namespace, task: RangeTask) -> RangeAggregator:
    return RangeAggregator(task, load_queries(ns.queries, task))


JOB = Job(kind="range", make_aggregator=_aggregator)


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the job (or the ``answer`` sub-command); returns its summary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "answer":
        return {"answers": run_answer(argv[1:])}
    return run_job(JOB, parser(), argv)


def run_answer(argv: Sequence[str]) -> list[Record]:
    """``answer --model M --queries Q.json``: prints one JSON line per model and query; returns them."""
    ns, _ = parse_job_args(answer_parser(), argv, beam=False)
    try:
        with open(ns.queries, encoding="utf-8") as fh:
            query_obj = json.load(fh)
        out = answer_from_model_records(read_model_records(ns.model), query_obj)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    for rec in out:
        print(json.dumps(rec, allow_nan=False))
    return out


if __name__ == "__main__":
    run()
