"""Multi-dimensional range queries over LDP reports (HDG, TDG, CALM, HIO, LHIO, MSW, Uni) on Beam.

Batch job over Avro report logs (one global window unless ``--window_size``)::

    python -m pipelines.range_queries --task TASK.json --input 'DIR/*.avro' --queries Q.json --output OUT \
        [--window_size SECONDS [--window_period SECONDS]] [--runner ...]

Answer new queries from the saved models, without the reports (prints JSON lines)::

    python -m pipelines.range_queries answer --model 'OUT/models/models-*.jsonl' --queries Q.json

Outputs: ``OUT/answers-*.jsonl`` (one JSON object per window, pane and query: ``window_start``,
``window_end``, ``query``, ``answer``, ``std``, ``task_id``, ``method``, ``n_reports`` ...), the same
records as ``OUT/answers-*.avro`` (``schemas/range_answer.avsc``), the finalized model of each window in
``OUT/models/models-*.jsonl`` / ``.avro`` (``schemas/range_model.avsc``), refused reports in
``OUT/dead_letter/*.avro`` and ``OUT/counts.json``. The job prints ``reports read=N accepted=A
rejected=R``; ``read == accepted + rejected`` always. Queries are checked before the job starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.common import parse_pipeline_args, shared_flags
from transforms.frequency import format_counts, job_counts
from transforms.io import COUNTER_NAMESPACE, ReadReportFiles, WriteDeadLetters
from transforms.range_queries import (
    RangeQueryAggregation,
    WriteRangeAnswers,
    WriteRangeModels,
    answer_from_model_records,
    load_queries,
    load_range_task,
    read_model_records,
)

__all__ = ["RangeQueryOptions", "build", "run", "run_answer"]

_DESCRIPTION = (
    "Multi-dimensional range queries over LDP reports on Beam (batch, event-time windows). "
    "Sub-command: `answer --model OUT/models --queries Q.json` answers new queries from saved models."
)


class RangeQueryOptions(PipelineOptions):
    """Options of the range-query pipeline (plus every standard Beam option)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser = shared_flags(parser)  # --task, --input, ... are also the frequency job's flags
        parser.add_argument("--task", help="multi-attribute task JSON file (required)")
        parser.add_argument("--input", help="glob of Avro report files, e.g. 'DIR/*.avro' (required)")
        parser.add_argument(
            "--queries", help="JSON list of queries {attribute: [lo, hi], ...}, inclusive 0-based (required)"
        )
        parser.add_argument("--output", help="output directory (required)")
        parser.add_argument("--window_size", type=float, help="event-time window length in seconds")
        parser.add_argument("--window_period", type=float, help="sliding-window period in seconds")
        parser.add_argument("--allowed_lateness", type=float, help="seconds late reports still count")
        parser.add_argument(
            "--batch_size", type=int, default=1 << 15, help="records per batch read from files"
        )


def _window(spec, opts):
    w = spec.window
    changes = {}
    for flag, field in (
        ("window_size", "size_s"),
        ("window_period", "period_s"),
        ("allowed_lateness", "allowed_lateness_s"),
    ):
        v = getattr(opts, flag, None)
        if v is not None:
            if v < 0 or (v == 0 and field != "allowed_lateness_s"):
                raise SystemExit(f"error: --{flag} must be positive, got {v}")
            changes[field] = float(v)
    w = dataclasses.replace(w, **changes)
    if w.period_s is not None and (w.size_s is None or w.period_s > w.size_s):
        raise SystemExit("error: --window_period needs --window_size >= the period")
    return w


def build(p: beam.Pipeline, opts: RangeQueryOptions, spec, query_json, window) -> dict[str, Any]:
    """Adds the range-query job to pipeline ``p``; returns its main PCollections."""
    read = p | "Read" >> ReadReportFiles(opts.input, opts.batch_size, spec)
    agg = read.records | "RangeQueries" >> RangeQueryAggregation(spec, query_json, window)
    dead = (read.dead_letter, agg["dead_letter"]) | "AllDeadLetters" >> beam.Flatten()
    agg["answers"] | "WriteAnswers" >> WriteRangeAnswers(opts.output)
    agg["models"] | "WriteModels" >> WriteRangeModels(opts.output)
    dead | "WriteDeadLetters" >> WriteDeadLetters(opts.output)
    return {"answers": agg["answers"], "models": agg["models"], "dead_letter": dead}


def _remove_empty_temp_dirs(output: str) -> None:
    """``fileio`` leaves emptied ``.temp*`` directories behind; remove them (never non-empty ones)."""
    for parent in (output, os.path.join(output, "dead_letter"), os.path.join(output, "models")):
        if os.path.isdir(parent):
            for name in os.listdir(parent):
                path = os.path.join(parent, name)
                if name.startswith(".temp") and os.path.isdir(path) and not os.listdir(path):
                    os.rmdir(path)


def _finalize_ms(result: Any) -> dict[str, Any] | None:
    try:
        res = result.metrics().query(
            MetricsFilter().with_namespace(COUNTER_NAMESPACE).with_name("range_finalize_ms")
        )
        for d in res["distributions"]:
            v = d.committed or d.attempted
            if v is not None and v.count:
                return {"count": v.count, "sum_ms": v.sum, "max_ms": v.max}
    except Exception:  # noqa: BLE001 - metrics are informative only
        return None
    return None


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the job (or the ``answer`` sub-command); returns a summary dict."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "answer":
        return {"answers": run_answer(argv[1:])}
    options, opts = parse_pipeline_args(argv, RangeQueryOptions, _DESCRIPTION)
    for flag in ("task", "input", "queries", "output"):
        if not getattr(opts, flag):
            raise SystemExit(f"error: --{flag} is required")
    if options.view_as(StandardOptions).streaming:
        raise SystemExit("error: the range-query job runs in batch mode (windowed by event time)")
    try:
        spec = load_range_task(opts.task)
        _, query_json = load_queries(opts.queries, spec.task)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    window = _window(spec, opts)
    os.makedirs(opts.output, exist_ok=True)

    p = beam.Pipeline(options=options)
    build(p, opts, spec, query_json, window)
    t0 = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    elapsed = time.perf_counter() - t0
    counts = job_counts(result)
    n_models = counts.pop("range_models", 0)
    n_answers = counts.pop("range_answers", 0)
    print(format_counts(counts), file=sys.stderr)
    rate = counts["read"] / elapsed if elapsed > 0 else float("nan")
    print(
        f"{n_models} window model(s), {n_answers} answers in {elapsed:.1f} s ({rate:,.0f} reports/s)",
        file=sys.stderr,
    )
    _remove_empty_temp_dirs(opts.output)
    summary = {
        "counts": counts,
        "output": opts.output,
        "state": str(result.state),
        "seconds": elapsed,
        "reports_per_s": rate,
        "task_id": spec.task_id,
        "method": spec.method,
        "n_groups": spec.n_groups,
        "n_queries": len(query_json),
        "n_models": n_models,
        "n_answers": n_answers,
        "window": dataclasses.asdict(window),
        "finalize": _finalize_ms(result),
    }
    with open(os.path.join(opts.output, "counts.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
    return summary


def run_answer(argv: Sequence[str]) -> list[dict[str, Any]]:
    """``answer --model M --queries Q.json``: prints one JSON line per model and query; returns them."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.range_queries answer",
        description="Answer range queries from saved window models (OUT/models/), without the reports.",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="model file(s): a .jsonl/.avro path, a glob, or the OUT/models directory",
    )
    parser.add_argument("--queries", required=True, help="JSON list of queries {attribute: [lo, hi], ...}")
    ns = parser.parse_args(list(argv))
    try:
        models = read_model_records(ns.model)
        with open(ns.queries, encoding="utf-8") as fh:
            query_obj = json.load(fh)
        out = answer_from_model_records(models, query_obj)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    for rec in out:
        print(json.dumps(rec, allow_nan=False))
    return out


if __name__ == "__main__":
    run()
