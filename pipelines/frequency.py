"""Frequency estimation over LDP reports, batch (Avro files) or streaming (a watched directory or Pub/Sub).

Batch backfill over report logs (one global window unless ``--window_size``)::

    python -m pipelines.frequency --task TASK.json --input 'DIR/*.avro' --output OUT [--postprocess norm-sub]

Streaming from a directory that receives report files (each new file matching the glob is read once)::

    python -m pipelines.frequency --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \
        --output OUT --window_size 60 [--allowed_lateness 30] [--accumulating] [--streaming_duration 600]

Streaming dashboard from Pub/Sub (event-time windows, early panes, allowed lateness)::

    python -m pipelines.frequency --task TASK.json --streaming \
        --input_subscription projects/P/subscriptions/S --output OUT --window_size 60 \
        [--window_period 10] [--early_firing 5] [--allowed_lateness 30] [--accumulating] \
        [--output_topic projects/P/topics/ESTIMATES] [--streaming_duration 300]

Outputs: ``OUT/estimates-*.jsonl`` (one JSON object per window, pane and group), the same records as
``OUT/estimates-*.avro`` (``schemas/estimate.avsc``), refused reports in ``OUT/dead_letter/*.avro``
(``schemas/dead_letter.avsc``), and in batch mode ``OUT/counts.json``. The job prints
``reports read=N accepted=A rejected=R`` at the end; ``read == accepted + rejected`` always.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from ldp.task import POSTPROCESS_METHODS
from pipelines.common import (
    add_report_stream_flags,
    collect_counts,
    directory_streaming_on_fnapi_runner,
    load_task_or_exit,
    parse_pipeline_args,
    read_reports,
    remove_empty_temp_dirs,
    run_job,
    runs_on_fnapi_runner,
    shared_flags,
    window_from_flags,
    write_dead_letters_and_counts,
)
from transforms.combine import record_to_json
from transforms.frequency import FrequencyAggregation
from transforms.io import (
    WriteEstimates,
)

__all__ = ["FrequencyOptions", "build", "run"]


class FrequencyOptions(PipelineOptions):
    """Options of the frequency pipeline (plus every standard Beam option)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser = shared_flags(parser)
        parser.add_argument("--task", help="collection task JSON file (required)")
        add_report_stream_flags(parser)
        parser.add_argument(
            "--output_topic", help="also publish estimate JSON to this Pub/Sub topic (streaming)"
        )
        parser.add_argument(
            "--postprocess", choices=POSTPROCESS_METHODS, help="post-processing method (default: the task's)"
        )


def build(
    p: beam.Pipeline,
    opts: FrequencyOptions,
    task,
    window,
    method: str,
    streaming: bool,
    paced_ticks: bool = False,
) -> dict[str, Any]:
    """Adds the frequency job to pipeline ``p``; returns its main PCollections.

    ``paced_ticks``: the directory watch sleeps until each tick is due (for the FnApiRunner, which
    ignores the delays a deferred splittable DoFn asks for; see :class:`transforms.io.Ticks`).
    """
    read = read_reports(p, opts, task, streaming=streaming, paced_ticks=paced_ticks)
    agg = read.records | "Aggregate" >> FrequencyAggregation(task, window, method)
    agg["estimates"] | "Write" >> WriteEstimates(opts.output)
    dead = write_dead_letters_and_counts(read, agg, opts, streaming=streaming)
    if opts.output_topic:
        (
            agg["estimates"]
            | "ToPubSubJson"
            >> beam.Map(lambda r: json.dumps(record_to_json(r), allow_nan=False).encode("utf-8"))
            | "Publish" >> beam.io.WriteToPubSub(opts.output_topic)
        )
    return {"estimates": agg["estimates"], "dead_letter": dead}


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the job; returns ``{"counts": {...}, "output": OUT, "state": ...}``."""
    options, opts = parse_pipeline_args(
        argv, FrequencyOptions, __doc__.split("\n")[0], prog="python -m pipelines.frequency"
    )
    task = load_task_or_exit(opts.task)
    sources = [s for s in (opts.input, opts.input_subscription, opts.input_topic) if s]
    if len(sources) != 1:
        raise SystemExit("error: give exactly one of --input, --input_subscription, --input_topic")
    if not opts.output:
        raise SystemExit("error: --output is required")
    streaming = bool(options.view_as(StandardOptions).streaming)
    if not opts.input and not streaming:
        raise SystemExit("error: Pub/Sub input needs --streaming")
    window = window_from_flags(task, opts)
    if not opts.watch_interval > 0:
        raise SystemExit(f"error: --watch_interval must be positive, got {opts.watch_interval}")
    directory_streaming = bool(streaming and opts.input)
    fnapi = runs_on_fnapi_runner(options)
    if directory_streaming and fnapi:
        window = directory_streaming_on_fnapi_runner(window, opts)
    method = opts.postprocess or task.postprocess
    os.makedirs(opts.output, exist_ok=True)

    p = beam.Pipeline(options=options)
    build(p, opts, task, window, method, streaming, paced_ticks=fnapi)
    job = run_job(p, opts, streaming=streaming)
    result, elapsed = job.result, job.seconds
    counts, _ = collect_counts(job, opts.output, streaming=streaming)
    summary = {
        "counts": counts,
        "output": opts.output,
        "state": str(result.state),
        "seconds": elapsed,
        "mechanism": task.make_oracle().name,
        "postprocess": method,
        "task_id": task.task_id,
    }
    if not streaming or directory_streaming:
        remove_empty_temp_dirs(opts.output)
    if not streaming:
        with open(os.path.join(opts.output, "counts.json"), "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    return summary


if __name__ == "__main__":
    run()
