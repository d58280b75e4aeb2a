"""One aggregation job for every kind of task: flags, checks, the pipeline, the run and its summary.

A job module (``pipelines.frequency``, ``pipelines.range_queries``, ...) declares its own flags, says which
kind of task it takes and how to build the task's :class:`~ldp.aggregate.Aggregator` from the flags, and
calls :func:`run_job`; any registered kind's job is :func:`kind_job` (its flags from the kind's entry),
run by :func:`run` (``python -m pipelines.job KIND``, the ``ldp-beam`` command of a kind without a module):

1. flags: ``pipelines.cli`` (the job's flags with ``parse_known_args``, the rest must be Beam options;
   unknown flags are errors); the shared flags are :func:`add_job_flags`;
2. checks before anything runs, each a one-line error with exit status 2: the task (every problem, and
   the kind: a range task given to the frequency job is refused), exactly one source, ``--input``
   matching at least one file (batch; unless ``--allow_empty_input``), the window flags, the runner's
   limits (:mod:`transforms.runners`), and the output directory (a non-empty one is refused unless
   ``--overwrite``, so re-runs never mix window sizes or panes);
3. the pipeline: source (:func:`read_reports`) -> :class:`transforms.aggregate.Aggregate` -> one
   :class:`transforms.io.WriteResults` per output of the aggregator, dead letters and (streaming) counts;
4. the summary: the run id, counts (``read = accepted + rejected``), the output path and the windows
   written, the privacy figures per window (``privacy_accounting``: local, and central from the
   shuffler's n when the input came through it, :mod:`pipelines.window_privacy`), the plan's std beside
   each window's observed spread (``expected_vs_observed``, :func:`pipelines.plan.observed_from_output`),
   also saved as ``OUT/counts.json`` (batch); with ``--store``, what the store took
   (``store_failed_panes``): a write that failed even after ``--store_retry_s`` of retries fails the job
   with exit status 1 and one line (docs/store.md, "Outages").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ldp.aggregate import Aggregator, OutputSpec
from ldp.task import ParsedTask, TaskError, WindowConfig, budget_summary, load_task
from pipelines.cli import (
    add_input_flags,
    add_metrics_flags,
    add_output_flags,
    check_input_pattern,
    check_pubsub_path,
    fail,
    parse_job_args,
    prepare_output,
    require_inputs,
    sigterm_unwinds,
)

# Beam and the transforms are imported by the functions that build and run a pipeline, so that a job
# module's parser (and its --help) loads neither.
if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.pvalue import PCollection
    from apache_beam.runners.runner import PipelineResult

    from transforms.store import JobStore

__all__ = [
    "Job",
    "add_job_flags",
    "load_task_or_exit",
    "window_from_flags",
    "read_reports",
    "build_pipeline",
    "run_job",
    "kind_job",
    "add_kind_options",
    "run",
    "closed_window_counts",
    "windows_written",
]

_LOG = logging.getLogger(__name__)

#: Builds the job's aggregator from its parsed flags and task (raise ValueError for a bad job input).
MakeAggregator = Callable[[argparse.Namespace, ParsedTask], Aggregator]
#: Adds job-specific steps after the aggregation (e.g. publishing estimates); gets the outputs.
ExtraSteps = Callable[[argparse.Namespace, dict[str, "PCollection"]], None]


@dataclasses.dataclass(frozen=True)
class Job:
    """What a job module tells :func:`run_job`.

    Attributes:
        kind: the kind of task it takes (``ldp.task.TASK_KINDS``).
        make_aggregator: flags and task -> aggregator.
        extra_steps: optional steps on the aggregation outputs.
        output_topic: name of the job's flag that publishes to Pub/Sub (None: it has none).
    """

    kind: str
    make_aggregator: MakeAggregator
    extra_steps: ExtraSteps | None = None
    output_topic: str | None = None


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """The task, source, window, streaming and output flags every aggregation job has."""
    parser.add_argument("--task", required=True, help="collection task JSON file")
    add_input_flags(parser)
    parser.add_argument("--input_subscription", help="Pub/Sub subscription projects/P/subscriptions/S")
    parser.add_argument(
        "--input_topic",
        help="Pub/Sub topic projects/P/topics/T (a temporary subscription), or a Kafka topic "
        "kafka://HOST:PORT/TOPIC[?group=G&spool=DIR] (read through a watched spool: docs/kafka.md)",
    )
    parser.add_argument(
        "--timestamp_attribute", help="Pub/Sub attribute holding the message time (ms or RFC 3339)"
    )
    add_output_flags(parser)
    from pipelines.window_privacy import add_shuffle_key_flag

    add_shuffle_key_flag(parser)
    _add_watch_flags(parser)
    _add_window_flags(parser)
    add_metrics_flags(parser)


def _add_watch_flags(parser: argparse.ArgumentParser) -> None:
    """``--streaming`` and how a streaming job watches ``--input`` (interval, done markers, watermark lag,
    the ticks' clock on Flink)."""
    parser.add_argument(
        "--streaming", action="store_true", help="streaming job: watch --input for new files, or read Pub/Sub"
    )
    parser.add_argument(
        "--watch_interval",
        type=float,
        default=10.0,
        help="streaming from --input: seconds between matches of the glob",
    )
    parser.add_argument(
        "--require_done_marker",
        action="store_true",
        help="streaming from --input: read a file only once its PATH.done marker exists (never at a pause "
        "of its writer; a file without a marker is never read)",
    )
    parser.add_argument(
        "--watermark_lag",
        type=float,
        help="streaming from --input: seconds the watermark runs behind the wall clock, so a window closes "
        "once the files written before its end are read (default: 2 x --watch_interval + 1)",
    )
    parser.add_argument(
        "--watch_ticks",
        choices=("impulse", "flink"),
        default="impulse",
        help="streaming from --input: the watch's clock. impulse: Beam's PeriodicImpulse (every runner); "
        "flink: a Java source the Flink runner checkpoints (needs --ticks_expansion_service and "
        "--flink_master; the job is drained after --streaming_duration; docs/flink.md, 'Failover')",
    )
    parser.add_argument(
        "--ticks_expansion_service",
        help="--watch_ticks=flink: HOST:PORT of the expansion service serving the ticks "
        "(tools/flink/cluster.sh starts one; `cluster.sh args` prints the flags)",
    )
    parser.add_argument(
        "--flink_savepoint_dir",
        help="--watch_ticks=flink: the drain's savepoint directory (default: the cluster's "
        "state.savepoints.dir)",
    )


def _add_window_flags(parser: argparse.ArgumentParser) -> None:
    """The window and trigger flags (each defaults to the task's ``window``), batch size, the counts' and
    dead letters' windows, progress lines and ``--streaming_duration``."""
    parser.add_argument(
        "--window_size",
        type=float,
        help="event-time window length in seconds (default: the task's; none: one global window)",
    )
    parser.add_argument(
        "--window_period", type=float, help="sliding-window period in seconds (default: the task's)"
    )
    parser.add_argument(
        "--allowed_lateness", type=float, help="seconds late reports still count (default: the task's)"
    )
    parser.add_argument(
        "--early_firing", type=float, help="streaming: early panes every so many processing seconds"
    )
    parser.add_argument("--accumulating", action="store_true", help="cumulative panes (default: the task's)")
    parser.add_argument("--batch_size", type=int, default=1 << 15, help="records per batch read from files")
    parser.add_argument(
        "--counts_window", type=float, default=60.0, help="streaming: seconds per OUT/counts/ line"
    )
    parser.add_argument(
        "--dead_letter_window",
        type=float,
        default=60.0,
        help="streaming: seconds of dead letters per OUT/dead_letter/ file",
    )
    parser.add_argument(
        "--progress_interval",
        type=float,
        default=30.0,
        help="seconds between progress lines (files and reports read, reports/s, panes written, windows "
        "closed) at --log_level INFO; 0: none",
    )
    parser.add_argument(
        "--streaming_duration",
        type=float,
        default=0.0,
        help="streaming: stop reading after this many seconds, then every window closes and the job "
        "finishes by itself (DONE, with its counts and OUT/counts.json; Pub/Sub on a runner other than the "
        "DirectRunner is cancelled instead); 0 runs until interrupted",
    )


def load_task_or_exit(path: str | None, kind: str | None = None) -> ParsedTask:
    """Loads a task file; one line listing every problem (or the wrong kind) and exit status 2."""
    if not path:
        fail("--task TASK.json is required")
    try:
        return load_task(path, kind=kind)
    except TaskError as exc:
        fail(exc.one_line())


def window_from_flags(window: WindowConfig, ns: argparse.Namespace) -> WindowConfig:
    """The task's window defaults overridden by ``--window_size``, ``--window_period``,
    ``--allowed_lateness``, ``--early_firing``, ``--accumulating`` (one-line error when inconsistent)."""
    changes: dict[str, float | bool] = {}
    for flag, field in (
        ("window_size", "size_s"),
        ("window_period", "period_s"),
        ("allowed_lateness", "allowed_lateness_s"),
        ("early_firing", "early_firing_s"),
    ):
        v = getattr(ns, flag, None)
        if v is not None:
            if not math.isfinite(v):
                fail(f"--{flag} must be a finite number of seconds, got {v}")
            if v < 0 or (v == 0 and field != "allowed_lateness_s"):
                fail(f"--{flag} must be positive, got {v}")
            if abs(v * 1000 - round(v * 1000)) > 1e-6:
                fail(f"--{flag} must be a whole number of milliseconds, got {v}")
            changes[field] = float(v)
    if getattr(ns, "accumulating", False):
        changes["accumulating"] = True
    w = dataclasses.replace(window, **changes)
    for flag, field in (("window_size", "size_s"), ("window_period", "period_s"),
                        ("allowed_lateness", "allowed_lateness_s"), ("early_firing", "early_firing_s")):
        v = getattr(w, field)
        if v is not None and field not in changes and not _whole_ms(v):  # the task file's value
            fail(f"the task's window.{field} must be a finite whole number of milliseconds, got {v} "
                 f"(--{flag} overrides it)")
    if w.period_s is not None and (w.size_s is None or w.period_s > w.size_s):
        fail("--window_period needs --window_size >= the period")
    return w


def _whole_ms(v: float) -> bool:
    return math.isfinite(v) and abs(v * 1000 - round(v * 1000)) <= 1e-6


def read_reports(p: beam.Pipeline, ns: argparse.Namespace, agg: Aggregator, *, streaming: bool, paced: bool):
    """The report source from the flags: ``--input`` files read once (batch) or watched (``streaming``;
    ``paced`` for the FnApiRunner), else Pub/Sub. Returns the reader's outputs (``records``,
    ``dead_letter``, ``counts``)."""
    import apache_beam as beam

    from pipelines.pubsub_emulator import allow_large_messages
    from transforms.io import DecodeReportMessages, ReadReportFiles, WatchReportFiles

    if ns.input and streaming:
        duration = ns.streaming_duration if ns.streaming_duration > 0 else None
        return p | "Read" >> WatchReportFiles(
            ns.input, ns.watch_interval, ns.batch_size, agg, duration_s=duration, paced=paced,
            watermark_lag_s=getattr(ns, "watermark_lag", None),
            ticks_expansion_service=_flink_ticks(ns),
            require_done_marker=getattr(ns, "require_done_marker", False),
        )  # fmt: skip
    if ns.input:
        return p | "Read" >> ReadReportFiles(ns.input, ns.batch_size, agg)
    allow_large_messages()  # the emulator's channels: messages up to Pub/Sub's 10 MB, not gRPC's 4 MiB
    # the time attribute is parsed per message by the decoder (a bad one is that message's dead letter),
    # not by the source (where it fails every pull that contains the message)
    messages = p | "ReadPubSub" >> beam.io.ReadFromPubSub(
        subscription=ns.input_subscription,
        topic=None if ns.input_subscription else ns.input_topic,
        with_attributes=bool(ns.timestamp_attribute),
    )
    source = ns.input_subscription or ns.input_topic
    return messages | "Read" >> DecodeReportMessages(source, agg, timestamp_attribute=ns.timestamp_attribute)


def build_pipeline(
    p: beam.Pipeline,
    ns: argparse.Namespace,
    agg: Aggregator,
    window: WindowConfig,
    *,
    streaming: bool,
    paced: bool = False,
    store: JobStore | None = None,
) -> dict[str, PCollection]:
    """Adds the job to ``p``: read -> aggregate -> write every output, dead letters and counts (and the
    latest-state store with ``--store``; ``store``: the job's run, its retry bound and status directory)."""
    import apache_beam as beam

    from transforms.aggregate import Aggregate
    from transforms.counts import PaneLatency, WindowedCounts
    from transforms.io import WriteCounts, WriteDeadLetters, WriteResults
    from transforms.store import DEFAULT_RETRY_S, WriteToStore

    read = read_reports(p, ns, agg, streaming=streaming, paced=paced)
    # the FnApiRunner's watch (paced) never drops late data and may fire timers before pending input
    out = read.records | "Aggregate" >> Aggregate(agg, window, drop_late=not paced)
    for spec in agg.outputs:
        out[spec.name] | f"Write_{spec.name}" >> WriteResults(
            ns.output, spec, task_id=agg.task.task_id, jsonl_max_values=getattr(ns, "jsonl_max_values", 4096)
        )
    dead = (read.dead_letter, out["dead_letter"]) | "AllDeadLetters" >> beam.Flatten()
    dead | "WriteDeadLetters" >> WriteDeadLetters(
        ns.output, streaming=streaming, window_s=ns.dead_letter_window, task_id=agg.task.task_id
    )
    counts = (read.counts, out["counts"]) | "AllCounts" >> beam.Flatten()
    if streaming:
        out["panes"] | "PaneLatency" >> beam.ParDo(PaneLatency())
        counts = counts | "CountsPerWindow" >> WindowedCounts(ns.counts_window, task_id=agg.task.task_id)
        counts | "WriteCounts" >> WriteCounts(ns.output, task_id=agg.task.task_id)
    if getattr(ns, "store", None):  # the latest-state store (transforms.store; checked by run_job)
        # central DP (raw records): the exact counts are not published
        private = getattr(agg, "raw_records", False)
        {"panes": out["panes"], **({} if private else {"counts": counts})} | "Store" >> WriteToStore(
            ns.store, agg.task, window, streaming=streaming, max_items=ns.store_max_items,
            run_id=None if store is None else store.run_id,
            retry_s=getattr(ns, "store_retry_s", DEFAULT_RETRY_S),
            status_dir=None if store is None else store.status_dir,
        )  # fmt: skip
    out["dead_letter"] = dead
    return out


def _check_sources(ns: argparse.Namespace, streaming: bool) -> None:
    sources = [f for f in ("input", "input_subscription", "input_topic") if getattr(ns, f)]
    if len(sources) != 1:
        fail("give exactly one of --input, --input_subscription, --input_topic")
    from pipelines.window_privacy import check_shuffle_key

    check_shuffle_key(ns)  # a key file others may read, or missing: one line, exit 2
    if not ns.input and not streaming:
        fail("Pub/Sub input (--input_subscription / --input_topic) needs --streaming")
    check_pubsub_path(getattr(ns, "input_subscription", None), "subscription", flag="--input_subscription")
    check_pubsub_path(getattr(ns, "input_topic", None), "topic", flag="--input_topic")
    if not ns.input:  # no emulator and no credentials: refused here, not after a run that read nothing
        check_pubsub_access("--input_subscription" if ns.input_subscription else "--input_topic")
    v = getattr(ns, "progress_interval", 30.0)
    if not (math.isfinite(v) and v >= 0):
        fail(f"--progress_interval must be a finite number of seconds >= 0 (0: none), got {v}")
    lag = getattr(ns, "watermark_lag", None)
    if lag is not None and not (math.isfinite(lag) and lag >= 0):
        fail(f"--watermark_lag must be a finite number of seconds >= 0, got {lag}")
    for flag in ("watch_interval", "counts_window", "dead_letter_window"):
        v = getattr(ns, flag, None)
        if v is not None and not (math.isfinite(v) and v > 0):
            fail(f"--{flag} must be positive (a finite number of seconds), got {v}")
    v = getattr(ns, "streaming_duration", 0.0)
    if not (math.isfinite(v) and v >= 0):
        fail(f"--streaming_duration must be a finite number of seconds >= 0 (0: until interrupted), got {v}")
    if getattr(ns, "require_done_marker", False) and not (ns.input and streaming):
        fail("--require_done_marker is for a watched directory (--streaming --input GLOB)")
    if ns.input and not streaming:
        require_inputs(ns.input, ns.allow_empty_input)
    elif ns.input:  # a watched directory may still be empty when the job starts
        check_input_pattern(ns.input)
        from transforms.io import dangling_links

        for link, target in dangling_links(ns.input):
            _LOG.warning("--input %r matches the dangling symbolic link %r -> %r: its target does not exist, "
                         "it is not read", ns.input, link, target)  # fmt: skip


def check_pubsub_access(flag: str) -> None:
    """One line and exit status 2 when a job given ``flag`` (a Pub/Sub source or sink) could not reach
    Pub/Sub: neither ``PUBSUB_EMULATOR_HOST`` nor Google credentials (no network call;
    :func:`pipelines.pubsub_emulator.pubsub_access_problem`)."""
    from pipelines.pubsub_emulator import pubsub_access_problem

    why = pubsub_access_problem()
    if why is not None:
        fail(f"{flag}: {why}")


def check_streaming_window(window: WindowConfig, streaming: bool) -> None:
    """A streaming job needs panes that fire: an event-time window size, or early firings of the one
    global window. Without either, Beam refuses the job's grouping while the pipeline is built (a long
    ``GroupByKey cannot be applied to an unbounded PCollection`` traceback); here it is one line (the
    runner's own limits, e.g. the DirectRunner's watch without early firings, are
    :func:`transforms.runners.plan_runner`'s)."""
    if not streaming or window.size_s is not None or window.early_firing_s is not None:
        return
    fail("a streaming job needs a window: give --window_size SECONDS (or the task's window.size_s), or "
         "--early_firing SECONDS for repeated panes of one global window")


def _flink_ticks(ns: argparse.Namespace) -> str | None:
    """The ticks' expansion service when the watch takes its clock from Flink (else None)."""
    if getattr(ns, "watch_ticks", "impulse") != "flink":
        return None
    return ns.ticks_expansion_service


def _check_flink_ticks(ns: argparse.Namespace, options: PipelineOptions, streaming: bool) -> str | None:
    """``--watch_ticks=flink`` on a watched directory: the Flink REST address to drain the job through
    (None without the flag or without a watch: batch and Pub/Sub jobs ignore it, as they do
    ``--watch_interval``); one-line errors for a runner, expansion service or master that cannot do it."""
    if getattr(ns, "watch_ticks", "impulse") != "flink":
        for flag in ("ticks_expansion_service", "flink_savepoint_dir"):
            if getattr(ns, flag, None):
                fail(f"--{flag} needs --watch_ticks=flink")
        return None
    if not (streaming and ns.input):  # like --watch_interval, the watch's flags mean nothing without a watch
        return None
    from apache_beam.options.pipeline_options import FlinkRunnerOptions, StandardOptions

    runner = str(options.view_as(StandardOptions).runner or "")
    if runner.rsplit(".", 1)[-1] not in ("FlinkRunner", "PortableRunner"):
        fail(f"--watch_ticks=flink needs --runner=FlinkRunner or PortableRunner (a Flink job server), "
             f"got {runner or 'the default runner'}")  # fmt: skip
    if not ns.ticks_expansion_service or ":" not in ns.ticks_expansion_service:
        fail("--watch_ticks=flink needs --ticks_expansion_service=HOST:PORT (tools/flink/cluster.sh args)")
    master = options.view_as(FlinkRunnerOptions).flink_master
    if not master or master.startswith("["):
        fail(f"--watch_ticks=flink needs --flink_master=HOST:PORT, the cluster's REST address (the job is "
             f"drained through it), got {master!r}")  # fmt: skip
    return master


def _count_files(output: str) -> list[str]:
    return glob.glob(os.path.join(output, "counts", "counts-*.jsonl"))


def closed_window_counts(output: str, exclude: Sequence[str] | frozenset[str] = ()) -> dict[str, int]:
    """Sums ``OUT/counts/counts-*.jsonl`` (the count windows a streaming job has closed), leaving out the
    files in ``exclude``. A window (``window_start_ms``, ``window_end_ms``) written more than once -- the
    file sink is at-least-once: after a restore from a checkpoint a runner writes it again -- is counted
    once (its copy with the most reports read)."""
    total: dict[str, int] = {"read": 0, "accepted": 0, "rejected": 0}
    skip = set(exclude)
    rows: list[dict[str, int]] = []
    by_window: dict[tuple[int, int], dict[str, int]] = {}
    for path in (f for f in _count_files(output) if f not in skip):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                if "window_start_ms" not in r or "window_end_ms" not in r:
                    rows.append(r)
                    continue
                key = (int(r["window_start_ms"]), int(r["window_end_ms"]))
                if key not in by_window or int(r.get("read", 0)) > int(by_window[key].get("read", 0)):
                    by_window[key] = r
    for r in (*rows, *by_window.values()):
        for k, v in r.items():
            if not k.startswith("window_"):
                total[k] = total.get(k, 0) + int(v)
    return total


def windows_written(output: str, spec: OutputSpec) -> list[tuple[str | None, str | None, int]]:
    """``(window_start, window_end, pane_index)`` of every pane of ``spec`` rows in ``output`` (sorted)."""
    base = os.path.join(output, spec.subdir) if spec.subdir else output
    seen: set[tuple[str | None, str | None, int]] = set()
    for path in glob.glob(os.path.join(base, f"{spec.prefix}-*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    seen.add((r.get("window_start"), r.get("window_end"), int(r.get("pane_index", 0))))
    return sorted(seen, key=lambda w: (w[0] or "", w[1] or "", w[2]))


def _remove_empty_temp_dirs(output: str, specs: Sequence[OutputSpec]) -> None:
    """``fileio`` leaves its emptied ``.temp*`` directories behind; remove them (never non-empty ones)."""
    subdirs = {"dead_letter", "counts", *(s.subdir for s in specs if s.subdir)}
    for parent in (output, *(os.path.join(output, d) for d in subdirs)):
        if os.path.isdir(parent):
            for name in os.listdir(parent):
                path = os.path.join(parent, name)
                if name.startswith(".temp") and os.path.isdir(path) and not os.listdir(path):
                    os.rmdir(path)


def _run(
    p: beam.Pipeline,
    ns: argparse.Namespace,
    streaming: bool,
    flink_rest: str | None = None,
    stop_early: Callable[[], bool] | None = None,
    *,
    bounded_pubsub: str | None = None,
    on_start: Callable[[PipelineResult], None] | None = None,
) -> tuple[PipelineResult, float]:
    """Runs the pipeline to its end. ``bounded_pubsub``: the Pub/Sub subscription or topic whose read
    ends after ``--streaming_duration`` (the DirectRunner; :func:`transforms.runners.bound_pubsub_read`),
    so the job finishes by itself with every window closed. ``on_start``: called with the running job's
    result (the metrics endpoint polls it)."""
    t0 = time.perf_counter()
    if bounded_pubsub is not None:
        from transforms.runners import bound_pubsub_read, unbound_pubsub_read

        bound_pubsub_read(bounded_pubsub, time.time() + ns.streaming_duration)
        try:
            result = p.run()
            if on_start is not None:
                on_start(result)
            _wait_until_finish(result, stop_early)
        finally:
            unbound_pubsub_read(bounded_pubsub)
        return result, time.perf_counter() - t0
    result = p.run()
    if on_start is not None:
        on_start(result)
    if flink_rest is not None:  # the Flink ticks never end: the job is drained after the duration
        from transforms.flink_ticks import FlinkRest, FlinkRestError, run_draining

        job_id = str(getattr(result, "_job_id", ""))
        if ns.streaming_duration > 0 and job_id:
            try:
                run_draining(result, job_id, FlinkRest(flink_rest), ns.streaming_duration,
                             savepoint_dir=getattr(ns, "flink_savepoint_dir", None))  # fmt: skip
            except FlinkRestError as exc:
                with contextlib.suppress(Exception):
                    result.cancel()
                fail(f"--watch_ticks=flink: {exc}")
        else:
            result.wait_until_finish()
    elif streaming and ns.streaming_duration > 0 and not ns.input:
        deadline = time.time() + ns.streaming_duration
        while time.time() < deadline:
            time.sleep(0.5)
            if stop_early is not None and stop_early():  # a store write failed: the job will fail
                _LOG.error("a store write failed: cancelling the job before --streaming_duration ends")
                break
        result.cancel()
    else:
        result.wait_until_finish()
    return result, time.perf_counter() - t0


def _wait_until_finish(result: PipelineResult, stop_early: Callable[[], bool] | None) -> None:
    """Waits for a job that ends by itself; cancels it when ``stop_early()`` turns true (a store write
    gave up: the job will fail anyway). A pipeline error is raised here, as ``wait_until_finish`` would."""
    import threading

    failure: list[BaseException] = []

    def wait() -> None:
        try:
            result.wait_until_finish()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    waiter = threading.Thread(target=wait, name="ldp-wait-until-finish", daemon=True)
    waiter.start()
    while waiter.is_alive():
        waiter.join(0.5)
        if waiter.is_alive() and stop_early is not None and stop_early():
            _LOG.error("a store write failed: cancelling the job before --streaming_duration ends")
            result.cancel()
            waiter.join(30)
            break
    if failure:
        raise failure[0]


def _counts(
    result: PipelineResult, output: str, streaming: bool, *, pubsub_on_direct: bool = False
) -> dict[str, int]:
    """The job's counts: Beam's counters (batch), or the closed count windows (streaming; the counters
    are logged beside them, with the DirectRunner's caveat when it read Pub/Sub)."""
    from transforms.counts import format_counts, job_counts

    try:
        counts = job_counts(result)
    except RecursionError as exc:  # the FnApiRunner's metrics of a very long watch (many bundles)
        _LOG.warning("Beam counters unavailable (%s); using the count windows", exc)
        counts = {"read": 0, "accepted": 0, "rejected": 0}
    if not streaming:
        return counts
    closed = closed_window_counts(output)
    caveat = " (incomplete on the DirectRunner with Pub/Sub)" if pubsub_on_direct else ""
    _LOG.info("Beam counters%s: %s (the job's counts below are its closed count windows)", caveat,
              format_counts(counts))  # fmt: skip
    return {
        **{k: v for k, v in counts.items() if not k.startswith(("read", "accepted", "rejected"))},
        **closed,
    }


@dataclasses.dataclass
class _JobRun:
    """One run of :func:`run_job`, filled in step by step: the flags, the checked task and its aggregator,
    the runner's plan, the store and the metrics endpoint, then the pipeline's result."""

    job: Job
    ns: argparse.Namespace
    options: PipelineOptions
    streaming: bool
    task: ParsedTask
    agg: Aggregator
    window: WindowConfig
    kafka_bridge: Any = None
    bridge_stats: dict[str, Any] | None = None  # the Kafka bridge's counts once it stopped
    flink_rest: str | None = None
    plan: Any = None  # transforms.runners.RunnerPlan, once planned
    store: JobStore | None = None
    endpoint: Any = None
    run_id: str = ""
    result: PipelineResult | None = None
    seconds: float = 0.0
    bounded_pubsub: str | None = None


def run_job(job: Job, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> dict[str, object]:
    """Parses the flags, checks everything, runs the job and returns (and prints) its summary: the steps
    below, each failing in one line (exit status 2) before anything is created, except the last two."""
    ns, options = parse_job_args(parser, argv)
    with sigterm_unwinds():
        run = _check_job(job, ns, options)
        _plan_runner(run)
        _open_outputs(run)
        _execute(run)
        summary, written = _summary(run)
        _finish(run, summary, written)
    return summary


def _check_job(job: Job, ns: argparse.Namespace, options: PipelineOptions) -> _JobRun:
    """The task and its kind, the sources (a Kafka topic's bridge started), the output topic, Flink's
    ticks, the window flags and the aggregator (every group's oracle built, so an accumulator that cannot
    fit is refused here, with the limit named, not per file later)."""
    from apache_beam.options.pipeline_options import StandardOptions

    from transforms.kafka import KafkaSourceError, open_kafka_source
    from wire.validate import decode_params

    streaming = bool(options.view_as(StandardOptions).streaming)
    task = load_task_or_exit(ns.task, job.kind)
    try:  # --input_topic kafka://...: a bridge (started by _execute) fills a spool the job watches
        kafka_bridge = open_kafka_source(ns, streaming, task.task_id)
    except KafkaSourceError as exc:
        fail(str(exc))
    _check_sources(ns, streaming)
    if job.output_topic:
        check_pubsub_path(getattr(ns, job.output_topic, None), "topic", flag=f"--{job.output_topic}")
        if getattr(ns, job.output_topic, None):
            check_pubsub_access(f"--{job.output_topic}")
    flink_rest = _check_flink_ticks(ns, options, streaming)
    window = window_from_flags(task.window, ns)
    check_streaming_window(window, streaming)
    try:
        agg = job.make_aggregator(ns, task)
        decode_params(agg)  # ldp.oracles.MAX_ACCUMULATOR_CELLS: the oracles' size guard
    except (ValueError, MemoryError, OverflowError) as exc:
        fail(f"{ns.task}: the task cannot run: {exc}")
    if streaming and window.size_s is None and getattr(agg, "window_sequence", lambda: None)() is not None:
        # windows stepped in order (transforms.sequence) on the global window: its one pane never comes
        fail(f"{ns.task}: the task's windows are finalized one after the other, so a streaming job needs "
             "event-time windows: give --window_size SECONDS (or the task's window.size_s)")  # fmt: skip
    return _JobRun(job, ns, options, streaming, task, agg, window, kafka_bridge=kafka_bridge,
                   flink_rest=flink_rest)  # fmt: skip


def _plan_runner(run: _JobRun) -> None:
    """The runner's limits and adaptations (:mod:`transforms.runners`; the window may change), then the
    ``--store`` flags and another live run of the task on the store, refused before ``--overwrite``
    clears anything."""
    from transforms.runners import RunnerLimitation, plan_runner
    from transforms.store import DEFAULT_RETRY_S, StoreError, check_live_runs, check_store_flags

    ns = run.ns
    try:
        run.plan = plan_runner(
            run.options, run.window, streaming=run.streaming, files=bool(ns.input),
            streaming_duration_s=ns.streaming_duration,
            output_topic=getattr(ns, run.job.output_topic or "", None),
        )  # fmt: skip
    except RunnerLimitation as exc:
        fail(str(exc))
    run.window = run.plan.window
    try:
        check_store_flags(getattr(ns, "store", None), getattr(ns, "store_max_items", 1),
                          getattr(ns, "store_retry_s", DEFAULT_RETRY_S))  # fmt: skip
        check_live_runs(getattr(ns, "store", None), run.task.task_id,
                        getattr(ns, "store_allow_concurrent_runs", False))  # fmt: skip
    except StoreError as exc:
        fail(f"--store: {exc}")


def _open_outputs(run: _JobRun) -> None:
    """The metrics endpoint (a taken port: one line, before anything else), the output directory and the
    store's run (a file that cannot be created, an unreachable server, a live run: one line each)."""
    from transforms.store import DEFAULT_RETRY_S, StoreError, open_job_store

    ns, task = run.ns, run.task
    run.endpoint = _start_metrics(ns, run.job, task, run.agg)
    try:
        prepare_output(ns.output, ns.overwrite)
    except OSError as exc:  # a parent that is a file, a read-only or missing mount, no permission, ...
        fail(f"--output {ns.output!r} cannot be created: {exc.strerror or exc}")
    run.run_id = str(uuid.uuid4())
    try:
        run.store = open_job_store(
            getattr(ns, "store", None), task, run.window, run_id=run.run_id,
            allow_concurrent=getattr(ns, "store_allow_concurrent_runs", False),
            retry_s=getattr(ns, "store_retry_s", DEFAULT_RETRY_S), output=ns.output, streaming=run.streaming,
        )  # fmt: skip
    except StoreError as exc:
        fail(f"--store: {exc}")
    _LOG.info("run %s", run.run_id)
    _LOG.info("%s job: task %s (%s, %d group(s)), window %s, %s, output %s", run.job.kind, task.task_id,
              task.mechanism, task.n_groups, _describe(run.window), "streaming" if run.streaming else "batch",
              ns.output)  # fmt: skip


def _execute(run: _JobRun) -> None:
    """Builds the pipeline and runs it to its end; a failure or an interrupt marks the store's run aborted
    and stops the metrics endpoint before it propagates."""
    import apache_beam as beam

    from transforms.progress import configure as configure_progress
    from transforms.progress import progress
    from transforms.runners import runner_label
    from transforms.store import read_store_status

    ns, store, endpoint, plan = run.ns, run.store, run.endpoint, run.plan
    if run.kafka_bridge is not None:  # every check passed: the topic's messages start filling the spool
        run.kafka_bridge.start()
    p = beam.Pipeline(runner=plan.runner, options=run.options)
    outputs = build_pipeline(p, ns, run.agg, run.window, streaming=run.streaming, paced=plan.paced,
                             store=store)
    if run.job.extra_steps is not None:
        run.job.extra_steps(ns, outputs)
    _LOG.info("running on %s", runner_label(run.options))
    configure_progress(ns.progress_interval)
    stop_early = None if store is None else (lambda: read_store_status(store.status_dir).gave_up > 0)
    if run.streaming and not ns.input and ns.streaming_duration > 0 and plan.name == "direct":
        run.bounded_pubsub = ns.input_subscription or ns.input_topic  # the read ends; the job ends DONE
    try:
        run.result, run.seconds = _run(p, ns, run.streaming, run.flink_rest, stop_early,
                                       bounded_pubsub=run.bounded_pubsub,
                                       on_start=None if endpoint is None else endpoint.watch)  # fmt: skip
    except BaseException:
        if store is not None:  # the run failed (a pipeline error, an interrupt): say so in ldp_runs
            store.abort("the pipeline failed or was interrupted")
        if endpoint is not None:
            endpoint.stop()
        raise
    if run.kafka_bridge is not None:
        run.kafka_bridge.stop()
        run.bridge_stats = run.kafka_bridge.stats()
        if run.bridge_stats is not None:
            from transforms.kafka import BridgeStats

            _LOG.info("Kafka bridge: %s", BridgeStats.from_doc(run.bridge_stats).line())
    if endpoint is not None:  # from here on the job's thread alone reads the result's metrics
        endpoint.stop_watching()
    if ns.progress_interval > 0:
        progress().maybe_log(force=True)
    _LOG.info("job ended: %s after %.1f s", run.result.state, run.seconds)


def _summary(run: _JobRun) -> tuple[dict[str, object], dict[str, list]]:
    """The job's summary (counts, rows and panes written per output, finalize times, whether every window
    is final, the budget and the per-window privacy accounting) and the windows written per output."""
    from transforms.counts import job_distribution

    ns, task, agg, result = run.ns, run.task, run.agg, run.result
    pubsub_on_direct = not ns.input and run.plan.name == "direct" and run.bounded_pubsub is None
    counts = _counts(result, ns.output, run.streaming, pubsub_on_direct=pubsub_on_direct)
    if not run.streaming or ns.input:
        _remove_empty_temp_dirs(ns.output, agg.outputs)
    written = {spec.name: windows_written(ns.output, spec) for spec in agg.outputs}
    summary: dict[str, object] = {
        "run_id": run.run_id, "output": ns.output, "state": str(result.state), "seconds": run.seconds,
        "streaming": run.streaming, "task_id": task.task_id, "kind": task.kind, "mechanism": task.mechanism,
        "n_groups": task.n_groups, "window": dataclasses.asdict(run.window),
        "counts": {
            k: v
            for k, v in counts.items()
            if k in ("read", "accepted", "rejected", "late_dropped") or k.startswith(("rejected_", "lost_"))
        },
        "rows": {spec.name: counts.get(f"{spec.name}_rows", 0) for spec in agg.outputs},
        "panes_written": {name: len(w) for name, w in written.items()},
        "finalize_ms": job_distribution(result, "finalize_ms"),
        # DONE: the watermark reached the end of time, so the latest pane written of every window is its
        # final one (a window with allowed lateness ends without a pane flagged is_last_pane when no late
        # report came); CANCELLED / FAILED: open windows were never finalized
        "windows_final": str(result.state).rsplit(".", 1)[-1] == "DONE",
    }  # fmt: skip
    if run.bridge_stats is not None:  # the topic -> spool hop: read = messages (spooled) + duplicates
        summary["kafka_bridge"] = run.bridge_stats
    budget = _budget(task)  # the policy and the accountant's figures (basic and tight)
    if budget is not None:
        summary["budget"] = budget
    privacy = _privacy_accounting(task, ns, written, summary["counts"], agg, run.window)  # type: ignore[arg-type]
    if privacy is not None:  # per window: local, and central from the shuffler's n (pipelines.window_privacy)
        summary["privacy_accounting"] = privacy
    if agg.outputs:  # the plan's std beside each window's observed spread (pipelines.plan, ldp.plan)
        from pipelines.plan import observed_from_output

        check = observed_from_output(task, ns.output, agg.outputs[0])
        if check is not None:
            summary["expected_vs_observed"] = check
    return summary, written


def _finish(run: _JobRun, summary: dict[str, object], written: dict[str, list]) -> None:
    """Prints the summary, records it in the store's run and in ``OUT/counts.json``, hands the counters to
    the metrics endpoint, and fails (exit status 1) when the store lost panes or nothing was accepted."""
    ns, store, endpoint = run.ns, run.store, run.endpoint
    status = None
    if store is not None:  # what the sink wrote, from its status files (counters are not reliable)
        status = store.status(settle_s=10.0 if run.streaming else 0.0)
        summary["store_failed_panes"] = status.failed_panes
        summary["store"] = {**dataclasses.asdict(status), "retry_s": store.retry_s}
    _print_summary(summary, written)
    if getattr(run.agg, "raw_records", False):  # central DP: exact counts of raw records stay private
        summary["counts_private"] = "exact counts of raw records: not differentially private, not to publish"
    if store is not None and status is not None:
        private = "counts_private" in summary
        published = {k: v for k, v in summary.items() if k != "counts"} if private else summary
        store.finish(run.task, run.window, published, status)
    with open(os.path.join(ns.output, "counts.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
    if endpoint is not None:  # the endpoint's counters become counts.json's, then it lingers and stops
        endpoint.finish(summary["counts"], state=summary["state"], result=run.result)  # type: ignore[arg-type]
        endpoint.linger(ns.metrics_linger)
        endpoint.stop()
    if status is not None and status.failed:
        fail(status.line(), code=1)
    why = accepted_nothing(summary["counts"], streaming=run.streaming,
                           allow_empty=bool(getattr(ns, "allow_empty_input", False)))  # fmt: skip
    if why is not None:
        fail(why, code=1)


def _start_metrics(ns: argparse.Namespace, job: Job, task: ParsedTask, agg: Aggregator):
    """The job's Prometheus endpoint (``--metrics_port``; None without it), listening before the job
    runs; its address is printed. A port that cannot be bound is a one-line error, exit status 2."""
    port = getattr(ns, "metrics_port", None)
    if port is None:
        if getattr(ns, "metrics_linger", 0.0):
            fail("--metrics_linger needs --metrics_port")
        return None
    from transforms.prometheus import job_reasons, start_job_metrics

    try:
        outputs = [o.name for o in agg.outputs]
        endpoint = start_job_metrics(port, pipeline=_command_name(job), task_id=task.task_id,
                                     reasons=job_reasons(), outputs=outputs)  # fmt: skip
    except OSError as exc:
        fail(f"--metrics_port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror or exc})")
    print(f"metrics: {endpoint.url}", file=sys.stderr, flush=True)
    _LOG.info("metrics: Prometheus endpoint at %s", endpoint.url)
    return endpoint


def _command_name(job: Job) -> str:
    """The ``pipeline`` label: the ``ldp-beam`` command of the job's kind (``range-queries``, ...)."""
    from ldp.kinds import KINDS

    entry = KINDS.get(job.kind)
    return entry.command_name if entry is not None else job.kind


#: argparse ``type`` of each :class:`ldp.kinds.JobOption` type (``bool`` is a switch).
_OPTION_TYPES: dict[str, Callable[[str], Any]] = {"str": str, "int": int, "float": float, "path": str}


def add_kind_options(parser: argparse.ArgumentParser, options: Sequence[Any]) -> None:
    """A flag ``--<name>`` per job option a kind declares as data (``ldp.kinds.JobOption``)."""
    for opt in options:
        flag = f"--{opt.name}"
        if opt.type == "bool":
            parser.add_argument(flag, action="store_true", help=opt.help)
            continue
        extra: dict[str, Any] = {"choices": list(opt.choices)} if opt.choices else {}
        parser.add_argument(flag, type=_OPTION_TYPES[opt.type], default=opt.default, required=opt.required,
                            metavar="PATH" if opt.type == "path" else None, help=opt.help, **extra)


def kind_job(kind: str, *, prog: str | None = None) -> tuple[Job, argparse.ArgumentParser]:
    """The job and parser of a registered kind (``ldp.kinds``): the shared flags plus a flag per
    ``job_options`` entry, its aggregator from ``make_job_aggregator(ns, task)``.
    ``run_job(*kind_job(k), argv)`` runs it.

    Raises:
        ValueError: no such kind is registered (one line naming the registered ones).
    """
    from ldp.kinds import get
    from pipelines.cli import job_parser

    entry = get(kind)
    parser = job_parser(entry.description or f"the {entry.name} kind's aggregation over reports", prog=prog)
    add_job_flags(parser)
    add_kind_options(parser, entry.job_options)
    return Job(kind=entry.name, make_aggregator=entry.make_job_aggregator), parser


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """The aggregation job of any registered kind: ``python -m pipelines.job KIND [flags]`` (and the
    ``ldp-beam`` command of a kind without a job module of its own). Returns the job's summary."""
    from ldp.kinds import KINDS
    from pipelines.cli import job_parser

    args = list(sys.argv[1:] if argv is None else argv)
    under_cli = bool(sys.argv) and sys.argv[0].startswith("ldp-beam")
    if args and args[0] in ("-h", "--help"):
        usage = job_parser("The aggregation job of a registered kind of task: KIND [the kind's flags]",
                           beam_options=False)
        usage.add_argument("kind", choices=list(KINDS), help="the kind of task (KIND --help: its flags)")
        usage.parse_args(["--help"])
    prog = "python -m pipelines.job"
    if not args or args[0].startswith("-"):
        fail(f"give the kind of task first ({', '.join(KINDS)}), then its flags (see {prog} --help)", 2, prog)
    kind, rest = args[0], args[1:]
    try:
        job, parser = kind_job(kind, prog=None if under_cli else f"{prog} {kind}")
    except ValueError as exc:
        fail(str(exc), 2, prog)
    return run_job(job, parser, rest)


def accepted_nothing(counts: dict, *, streaming: bool, allow_empty: bool = False) -> str | None:
    """Why a finished job that accepted no report fails (one line), or None when it accepted some.

    Reports read and none accepted: the top rejection reasons with their counts. None read: a batch job's
    inputs held no report (unless ``allow_empty``); a streaming job that received nothing is not an error
    (its source may simply have been quiet)."""
    read, accepted = int(counts.get("read", 0)), int(counts.get("accepted", 0))
    if accepted > 0:
        return None
    if read == 0:
        if streaming or allow_empty:
            return None
        return "accepted no report: the input files hold none (read 0)"
    rejected = {k[len("rejected_") :]: int(v) for k, v in counts.items() if k.startswith("rejected_")}
    reasons = sorted(((n, r) for r, n in rejected.items() if n > 0), key=lambda t: (-t[0], t[1]))
    shown = ", ".join(f"{reason} {n:,}" for n, reason in reasons[:3])
    more = f", {len(reasons) - 3} more reason(s)" if len(reasons) > 3 else ""
    return (f"accepted none of the {read:,} reports read; rejected: {shown or 'no reason counted'}{more} "
            "(see the dead letters in OUTPUT/dead_letter/)")


def _describe(w: WindowConfig) -> str:
    if w.size_s is None:
        return "global"
    kind = f"sliding {w.size_s:g} s every {w.period_s:g} s" if w.period_s else f"fixed {w.size_s:g} s"
    return kind + (", accumulating" if w.accumulating else "")


def _budget(task: ParsedTask) -> dict[str, object] | None:
    try:
        return budget_summary(task)
    except (ValueError, ArithmeticError) as exc:  # the figures are informative: never fail a finished job
        _LOG.warning("budget figures unavailable: %s", exc)
        return None


def _privacy_accounting(
    task: ParsedTask,
    ns: argparse.Namespace,
    written: dict[str, list[tuple[str | None, str | None, int]]],
    counts: dict[str, int],
    agg: Aggregator,
    window: WindowConfig,
) -> dict[str, object] | None:
    """:func:`pipelines.window_privacy.job_privacy` of the run (None for central-DP tasks, whose
    aggregator sees raw records, or when the figures cannot be computed: never fails a finished job)."""
    if getattr(agg, "raw_records", False) or not agg.outputs:
        return None
    from pipelines.window_privacy import job_privacy

    spec = agg.outputs[0]
    try:
        return job_privacy(task, ns.input, written.get(spec.name, []), counts, ns.output, spec,
                           window.accumulating, getattr(ns, "shuffle_key", None))  # fmt: skip
    except (ValueError, OSError, ArithmeticError) as exc:
        _LOG.warning("privacy figures per window unavailable: %s", exc)
        return None


def _privacy_line(privacy: dict[str, object]) -> str:
    windows = privacy.get("windows") or []
    claimed = [w for w in windows if w.get("central_epsilon") is not None]  # type: ignore[union-attr]
    local = privacy["local"]["epsilon"]  # type: ignore[index]
    text = f"privacy: local epsilon {local:g} per report"
    if claimed:
        eps = [float(w["central_epsilon"]) for w in claimed]
        ns_ = [int(w["n"]) for w in claimed]
        text += (
            f"; central (shuffled) epsilon {min(eps):.4g}..{max(eps):.4g} at delta "
            f"{privacy['central_delta']:g} in {len(claimed)} window(s), n {min(ns_):,}..{max(ns_):,}"
        )
    rest = [w for w in windows if w.get("central_epsilon") is None]  # type: ignore[union-attr]
    if rest:
        text += f"; {len(rest)} window(s) without a central guarantee ({rest[0]['why_no_central']})"
    return text


def _budget_line(budget: dict[str, object]) -> str:
    pol = budget["policy"]
    g = budget.get("guarantees") or {}
    shown = [(k, v) for k, v in g.items() if k.startswith("epsilon") and isinstance(v, float)]
    eps = ", ".join(f"{k} = {v:.4g}" for k, v in shown)
    text = f"budget: {pol['epsilon_per_report']:g} per report ({eps}), {pol['composition']} composition"
    per = budget.get("per_period")
    if isinstance(per, dict):
        text += (
            f"; a full period ({pol['reports_per_period']} reports per {pol['period_s']:g} s): "
            f"basic {per['basic']:.4g}, tight {per['tight']:.4g} at delta {per['delta']:g}"
        )
    return text + f"; enforced by the {budget['enforced_by']}"


def _print_summary(
    summary: dict[str, object], written: dict[str, list[tuple[str | None, str | None, int]]]
) -> None:
    from transforms.counts import format_counts
    from transforms.progress import window_label

    print(f"run: {summary['run_id']}", file=sys.stderr)
    print(format_counts(summary["counts"]), file=sys.stderr)  # type: ignore[arg-type]
    if isinstance(summary.get("budget"), dict):
        print(_budget_line(summary["budget"]), file=sys.stderr)  # type: ignore[arg-type]
    if isinstance(summary.get("privacy_accounting"), dict):
        print(_privacy_line(summary["privacy_accounting"]), file=sys.stderr)  # type: ignore[arg-type]
    print(f"output: {summary['output']}", file=sys.stderr)
    if summary.get("streaming"):
        state = str(summary["state"]).rsplit(".", 1)[-1]
        print("windows: every window closed; the last pane written of each is final" if summary.get(
            "windows_final") else f"windows: the job ended {state}; windows still open were not finalized",
            file=sys.stderr)  # fmt: skip
    for name, panes in written.items():
        windows = sorted({(s, e) for s, e, _ in panes}, key=lambda w: (w[0] or "", w[1] or ""))
        shown = ", ".join(window_label(s, e) for s, e in windows[:3])
        more = f", ... ({len(windows) - 3} more)" if len(windows) > 3 else ""
        print(f"{name}: {len(windows)} window(s), {len(panes)} pane(s): {shown}{more}", file=sys.stderr)


if __name__ == "__main__":
    run()
