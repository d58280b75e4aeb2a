"""Multi-dimensional range queries over LDP reports (HDG, TDG, CALM, HIO, LHIO, MSW, Uni) on Beam.

Batch job over Avro report logs (one global window unless ``--window_size``)::

    python -m pipelines.range_queries --task TASK.json --input 'DIR/*.avro' --queries Q.json --output OUT \
        [--window_size SECONDS [--window_period SECONDS]] [--runner ...]

Streaming, from a directory that receives report files (each new file matching the glob is read once;
on the DirectRunner the answers are written when the watch ends, so ``--streaming_duration`` is needed)::

    python -m pipelines.range_queries --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \
        --queries Q.json --output OUT --window_size 60 [--allowed_lateness 30] [--accumulating] \
        [--streaming_duration 600]

or from Pub/Sub (``--input_subscription projects/P/subscriptions/S`` or ``--input_topic ...``; flags as
``pipelines.frequency``, ``--early_firing`` too). Streaming answer and model files are named per window and
pane; ``OUT/counts/`` holds the read/accepted/rejected counts per processing window.

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
import types
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.common import (
    add_report_stream_flags,
    collect_counts,
    directory_streaming_on_fnapi_runner,
    parse_pipeline_args,
    read_reports,
    remove_empty_temp_dirs,
    run_job,
    runs_on_fnapi_runner,
    shared_flags,
    window_from_flags,
    write_dead_letters_and_counts,
)
from transforms.io import (
    COUNTER_NAMESPACE,
)
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
    "Multi-dimensional range queries over LDP reports on Beam (batch or --streaming from a watched "
    "directory or Pub/Sub; event-time windows). "
    "Sub-command: `answer --model OUT/models --queries Q.json` answers new queries from saved models."
)


class RangeQueryOptions(PipelineOptions):
    """Options of the range-query pipeline (plus every standard Beam option)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser = shared_flags(parser)  # --task, --input, ... are also the frequency job's flags
        parser.add_argument("--task", help="task JSON file (a multi-attribute task for this job; required)")
        add_report_stream_flags(parser)
        parser.add_argument(
            "--queries", help="JSON list of queries {attribute: [lo, hi], ...}, inclusive 0-based (required)"
        )


def _window(spec, opts):
    """The task's window defaults overridden by the window flags (``pipelines.common.window_from_flags``)."""
    return window_from_flags(spec, opts)


def build(
    p: beam.Pipeline,
    opts: RangeQueryOptions,
    spec,
    query_json,
    window,
    streaming: bool = False,
    paced_ticks: bool = False,
) -> dict[str, Any]:
    """Adds the range-query job to pipeline ``p``; returns its main PCollections.

    The sources are the frequency job's (``pipelines.frequency.build``): files matched once, a watched
    directory (``streaming``; ``paced_ticks`` for the FnApiRunner) or Pub/Sub. In streaming, answer and
    model files are named per window and pane, and per-batch counts go to ``OUT/counts/``.
    """
    read = read_reports(p, opts, spec, streaming=streaming, paced_ticks=paced_ticks)
    agg = read.records | "RangeQueries" >> RangeQueryAggregation(spec, query_json, window)
    agg["answers"] | "WriteAnswers" >> WriteRangeAnswers(opts.output, per_pane=streaming)
    agg["models"] | "WriteModels" >> WriteRangeModels(opts.output, per_pane=streaming)
    dead = write_dead_letters_and_counts(read, agg, opts, streaming=streaming)
    return {"answers": agg["answers"], "models": agg["models"], "dead_letter": dead}


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
    if any(a.split("=")[0] == "--output_topic" for a in argv):  # a frequency-job flag Beam would accept
        raise SystemExit("error: --output_topic is not supported by the range-query job")
    for flag in ("task", "queries", "output"):
        if not getattr(opts, flag):
            raise SystemExit(f"error: --{flag} is required")
    sources = [s for s in (opts.input, opts.input_subscription, opts.input_topic) if s]
    if len(sources) != 1:
        raise SystemExit("error: give exactly one of --input, --input_subscription, --input_topic")
    streaming = bool(options.view_as(StandardOptions).streaming)
    if not opts.input and not streaming:
        raise SystemExit("error: Pub/Sub input needs --streaming")
    if not opts.watch_interval > 0:
        raise SystemExit(f"error: --watch_interval must be positive, got {opts.watch_interval}")
    try:
        spec = load_range_task(opts.task)
        _, query_json = load_queries(opts.queries, spec.task)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    window = _window(spec, opts)
    directory_streaming = bool(streaming and opts.input)
    fnapi = runs_on_fnapi_runner(options)
    if directory_streaming and fnapi:
        # the frequency job's DirectRunner (FnApiRunner) adaptations; this job has no --output_topic
        flags = types.SimpleNamespace(streaming_duration=opts.streaming_duration, output_topic=None)
        window = directory_streaming_on_fnapi_runner(window, flags)
    os.makedirs(opts.output, exist_ok=True)

    p = beam.Pipeline(options=options)
    build(p, opts, spec, query_json, window, streaming, paced_ticks=fnapi)
    job = run_job(p, opts, streaming=streaming)
    result, elapsed = job.result, job.seconds
    counts, extras = collect_counts(
        job, opts.output, streaming=streaming, extra=("range_models", "range_answers")
    )
    n_models, n_answers = extras["range_models"], extras["range_answers"]
    rate = counts["read"] / elapsed if elapsed > 0 else float("nan")
    if streaming:  # the time is the watch's or the subscription's, not the work's: no rate
        print(f"{n_models} window pane model(s), {n_answers} answers in {elapsed:.1f} s", file=sys.stderr)
    else:
        print(
            f"{n_models} window model(s), {n_answers} answers in {elapsed:.1f} s ({rate:,.0f} reports/s)",
            file=sys.stderr,
        )
    if not streaming or directory_streaming:
        remove_empty_temp_dirs(opts.output)
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
        "streaming": streaming,
    }
    if not streaming:
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
