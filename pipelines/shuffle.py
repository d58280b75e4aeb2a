"""The shuffler job: raw reports in, anonymous permuted batches per time bucket out (docs/shuffler.md).

Batch, over Avro report files::

    python -m pipelines.shuffle --task TASK.json --input 'DIR/*.avro' --output OUT

Streaming, from a watched directory (each new complete file read once) or Pub/Sub::

    python -m pipelines.shuffle --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \
        --streaming_duration 600 --output OUT --runner=PrismRunner [--allowed_lateness 30]
    python -m pipelines.shuffle --task TASK.json --streaming \
        --input_subscription projects/P/subscriptions/S --output OUT

The task needs an ``anonymity`` section with ``"shuffled": true`` (``ldp.anonymity``). Outputs:
``OUT/batches/batch-<task>-<start>-<end>-paneNNNNN.avro`` (report schema; one file per bucket, read by
the aggregation jobs unchanged), ``OUT/batches.jsonl`` (one line per batch: file, task_id, bucket, n; for a
heavy-hitters task also ``group_n``, the reports per level, signed in the batch's header),
``OUT/dead_letter/*.avro`` (reason, source and size only) and ``OUT/counts.json``. The job prints
``read = forwarded + already_published + withheld + dead_lettered``.

Restarts: the output keeps the shuffler's state (``OUT/state/``: the task it belongs to, a lock, one ledger
entry per published batch). Run again on the same ``--output`` and the job resumes: published batches are
never deleted or rewritten, and the reports of a published bucket read again are counted
``already_published``; the previous run's counts and dead letters move to ``OUT/runs/<time>/``.
``--overwrite`` is refused once a batch is published.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ldp.aggregate import Aggregator, make_aggregator
from ldp.anonymity import AnonymitySettings, window_problems
from ldp.task import ParsedTask, TaskError, WindowConfig, parse_task
from pipelines.cli import (
    add_input_flags,
    add_metrics_flags,
    fail,
    job_parser,
    parse_job_args,
    prepare_output,
    sigterm_unwinds,
)
from pipelines.job import _check_sources, _run, closed_window_counts, read_reports
from wire.records import requires_client_ids

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.runner import PipelineResult

    from transforms.prometheus import MetricsEndpoint
    from transforms.runners import RunnerPlan

#: Default of ``--memory_mb`` (the same as ``transforms.shuffle.DEFAULT_MEMORY_MB``; no Beam import here).
DEFAULT_MEMORY_MB = 256
#: Sub-directory of the shuffler's state in its output (``transforms.shuffle.STATE_SUBDIR``).
STATE_SUBDIR = "state"

__all__ = ["parser", "run", "load_shuffled_task", "accounting"]

_LOG = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    """The job's flags (plus every Beam pipeline option)."""
    p = job_parser(__doc__.split("\n")[0])
    _add_source_flags(p)
    _add_batch_flags(p)
    _add_streaming_flags(p)
    _add_reporting_flags(p)
    return p


def _add_source_flags(p: argparse.ArgumentParser) -> None:
    """The task and where its reports come from (files or Pub/Sub)."""
    p.add_argument("--task", required=True, help="collection task JSON file (with an anonymity section)")
    add_input_flags(p)
    p.add_argument("--input_subscription", help="Pub/Sub subscription projects/P/subscriptions/S")
    p.add_argument("--input_topic", help="Pub/Sub topic projects/P/topics/T (a temporary subscription)")
    p.add_argument(
        "--timestamp_attribute", help="Pub/Sub attribute holding the message time (ms or RFC 3339)"
    )


def _add_batch_flags(p: argparse.ArgumentParser) -> None:
    """Where the shuffled batches go, the key that signs them and the memory a bucket is permuted in."""
    p.add_argument("--output", required=True, help="output directory")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="clear an earlier run's --output first; refused once a batch is published there (published "
        "batches are never deleted: run again on the same --output to resume, or choose a new one)",
    )
    p.add_argument(
        "--shuffle_key",
        metavar="FILE",
        help="REQUIRED: the key file (mode 0600; `python -m ldp.shuffle.provenance new-key FILE` writes one) "
        "under which each batch is signed (Avro metadata ldp.shuffle.tag); give the aggregation jobs the "
        "same "
        "file, they make a central claim only for batches that verify",
    )
    p.add_argument(
        "--memory_mb",
        type=int,
        default=DEFAULT_MEMORY_MB,
        help="MiB of report columns held in memory while a bucket is permuted; a larger bucket is permuted "
        f"from its spill files in units of at most this (default {DEFAULT_MEMORY_MB})",
    )


def _add_streaming_flags(p: argparse.ArgumentParser) -> None:
    """How a streaming job reads, closes its buckets and stops."""
    p.add_argument(
        "--require_done_marker",
        action="store_true",
        help="streaming from --input: read a file only once its PATH.done marker exists (never at a pause "
        "of its writer; a file without a marker is never read)",
    )
    p.add_argument(
        "--streaming", action="store_true", help="streaming job: watch --input for new files, or read Pub/Sub"
    )
    p.add_argument(
        "--watch_interval", type=float, default=10.0, help="streaming from --input: seconds between matches"
    )
    p.add_argument(
        "--watermark_lag",
        type=float,
        help="streaming from --input: seconds the watermark runs behind the wall clock "
        "(default: 2 x --watch_interval + 1)",
    )
    p.add_argument(
        "--allowed_lateness",
        type=float,
        help="streaming: seconds after a bucket's end during which its reports are still shuffled into it; "
        "the bucket is emitted once, at its end plus this (default: the task's window.allowed_lateness_s)",
    )
    p.add_argument(
        "--streaming_duration",
        type=float,
        default=0.0,
        help="streaming: stop reading after this many seconds; every bucket then closes (published or "
        "withheld) and the job ends DONE with its counts (a watched directory; Pub/Sub on the "
        "DirectRunner: the read stops, later messages stay in the subscription); 0 runs until interrupted",
    )


def _add_reporting_flags(p: argparse.ArgumentParser) -> None:
    """Read batch size, metrics, dead-letter and counts windows, and the tests' seeded permutation."""
    p.add_argument("--batch_size", type=int, default=1 << 15, help="records per batch read from files")
    add_metrics_flags(p)
    p.add_argument(
        "--dead_letter_window", type=float, default=60.0, help="streaming: seconds of dead letters per file"
    )
    p.add_argument(
        "--counts_window", type=float, default=60.0, help="streaming: seconds per OUT/counts/ line"
    )
    p.add_argument(
        "--test_shuffle_seed",
        type=int,
        help="TESTS ONLY: permute with a seeded numpy generator (reproducible, so NOT anonymous) instead of "
        "the operating system's CSPRNG",
    )


def load_shuffled_task(path: str) -> tuple[ParsedTask, AnonymitySettings]:
    """The task file's task and its ``anonymity`` settings (one-line errors, exit status 2): the section
    must exist with ``shuffled`` true, and the task's window must be a multiple of the precision."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"{path}: cannot read task file: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        fail(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    if not isinstance(obj, dict):
        fail(f"{path}: a task must be a JSON object")
    problems: list[str] = []
    task = None
    try:
        task = parse_task(obj, source=path, base_dir=Path(path).parent)
    except TaskError as exc:
        problems += exc.problems
    settings = None if task is None else task.anonymity
    if task is not None and settings is None:
        problems.append("the task has no anonymity section")
    if settings is not None and not settings.shuffled:
        problems.append("anonymity.shuffled is false: the task is not collected through the shuffler")
    if task is not None and settings is not None:
        problems += window_problems(settings, task.window.size_s, task.window.period_s)
        if requires_client_ids(task):
            problems.append(
                "the task's budget counts reports per client id, which the shuffler removes: a shuffled task "
                "cannot have a server-enforced per-client budget"
            )
    if problems or task is None or settings is None:
        fail(f"{path}: " + "; ".join(problems or ["the task could not be parsed"]))
    return task, settings


def accounting(counts: dict[str, int]) -> dict[str, int]:
    """``read``, ``forwarded``, ``withheld`` (short buckets + buckets of too few distinct senders + late),
    ``dead_lettered`` (refused inputs) and their parts, from the job's counters or count lines."""
    few = int(counts.get("shuffle_few_senders", 0))
    out = {
        "read": int(counts.get("read", 0)),
        "forwarded": int(counts.get("shuffle_forwarded", 0)),
        "withheld": int(counts.get("shuffle_withheld", 0)) + few + int(counts.get("late_dropped", 0)),
        "withheld_short": int(counts.get("shuffle_withheld", 0)),
        "withheld_few_senders": few,
        "withheld_few_senders_buckets": int(counts.get("shuffle_few_senders_buckets", 0)),
        "withheld_late": int(counts.get("late_dropped", 0)),
        "withheld_buckets": int(counts.get("shuffle_withheld_buckets", 0)),
        "already_published": int(counts.get("already_published", 0)),
        "batches": int(counts.get("shuffle_batches", 0)),
        "dead_lettered": int(counts.get("rejected", 0)),
    }
    for k, v in sorted(counts.items()):
        if k.startswith("rejected_") and v:
            out["dead_lettered_" + k[len("rejected_") :]] = int(v)
        elif k.startswith("lost_") and v:
            out[k] = int(v)
    return out


def _check_flags(ns: argparse.Namespace, streaming: bool) -> None:
    _check_sources(ns, streaming)
    lateness = ns.allowed_lateness
    if lateness is not None and not (math.isfinite(lateness) and lateness >= 0):
        fail(f"--allowed_lateness must be a finite number of seconds >= 0, got {lateness}")
    if lateness is not None and abs(lateness * 1000 - round(lateness * 1000)) > 1e-6:
        fail(f"--allowed_lateness must be a whole number of milliseconds, got {lateness}")
    if ns.batch_size < 1:
        fail(f"--batch_size must be >= 1, got {ns.batch_size}")
    if ns.memory_mb < 1:
        fail(f"--memory_mb must be >= 1, got {ns.memory_mb}")
    if "://" in ns.output:
        fail(f"--output {ns.output!r}: the shuffler publishes to a local directory (atomic, fsynced renames)")


def load_shuffle_key(ns: argparse.Namespace) -> bytes:
    """The ``--shuffle_key`` (required): one-line error, exit status 2, when missing or unusable."""
    from ldp.shuffle.provenance import ProvenanceError, load_key

    if not ns.shuffle_key:
        fail(
            "--shuffle_key FILE is required: the shuffler signs every batch so that the aggregation jobs "
            "can tell its batches from other files (create one with: python -m ldp.shuffle.provenance "
            "new-key FILE)"
        )
    try:
        return load_key(ns.shuffle_key)
    except ProvenanceError as exc:
        fail(f"--shuffle_key: {exc.detail} ({exc.reason})")


def _state(task: ParsedTask, settings: AnonymitySettings) -> dict[str, object]:
    return {"task_id": task.task_id, "time_precision_s": int(settings.time_precision_s),
            "min_reports": int(settings.min_reports)}  # fmt: skip


def _published_count(output: str) -> int:
    d = os.path.join(output, "batches")
    return (
        sum(1 for n in os.listdir(d) if n.startswith("batch-") and n.endswith(".avro"))
        if os.path.isdir(d)
        else 0
    )


def prepare_shuffle_output(ns: argparse.Namespace, task: ParsedTask, settings: AnonymitySettings) -> bool:
    """Makes ``--output`` ready; returns True when the run resumes an earlier run's output.

    An output with the shuffler's state is resumed when it belongs to the same task and settings (else
    one-line error); ``--overwrite`` is refused when it holds a published batch. Anything else goes
    through :func:`pipelines.cli.prepare_output` (a new or empty directory, or ``--overwrite``)."""
    out = ns.output
    state_file = os.path.join(out, STATE_SUBDIR, "shuffler.json")
    published = _published_count(out) if os.path.isdir(out) else 0
    if ns.overwrite and published:
        fail(
            f"--overwrite: {out!r} holds {published} published batch(es), which are never deleted; run "
            f"again without --overwrite to resume there, or choose a new --output"
        )
    if os.path.isfile(state_file):
        try:
            with open(state_file, encoding="utf-8") as fh:
                prior = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            fail(f"--output {out!r}: cannot read the shuffler's state {state_file}: {exc}")
        want = _state(task, settings)
        if {k: prior.get(k) for k in want} != want:
            diff = ", ".join(
                f"{k} {prior.get(k)!r} (now {v!r})" for k, v in want.items() if prior.get(k) != v
            )
            fail(f"--output {out!r} is the shuffler output of another task or settings: {diff}")
        if not ns.overwrite:
            return True
    elif published:
        fail(f"--output {out!r} holds batches but no shuffler state ({state_file}); choose a new --output")
    prepare_output(out, ns.overwrite)
    from transforms.shuffle import atomic_write

    os.makedirs(os.path.join(out, STATE_SUBDIR), exist_ok=True)
    atomic_write(state_file, json.dumps(_state(task, settings), sort_keys=True).encode("utf-8"))
    return False


def lock_output(output: str) -> object:
    """Holds ``OUT/state/lock`` (flock) for the run; a second shuffler on the output: one line, exit 2."""
    fh = open(os.path.join(output, STATE_SUBDIR, "lock"), "a+b")  # noqa: SIM115 - held for the run
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        fail(f"--output {output!r} is in use by another shuffler (OUT/state/lock is held)")
    return fh


def archive_previous_run(output: str) -> str | None:
    """Moves an earlier run's ``counts/``, ``dead_letter/`` and ``counts.json`` to ``OUT/runs/<time>/``
    (so this run's counts are its own); returns that directory (None if there was nothing)."""
    names = [n for n in ("counts", "dead_letter", "counts.json") if os.path.exists(os.path.join(output, n))]
    if not names:
        return None
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    dest = os.path.join(output, "runs", stamp)
    os.makedirs(dest)
    for n in names:
        os.rename(os.path.join(output, n), os.path.join(dest, n))
    return dest


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the shuffler; returns (and prints) its summary (``counts``, ``batches``, ``output``, ...).
    SIGTERM unwinds it (:func:`pipelines.cli.sigterm_unwinds`)."""
    ns, options = parse_job_args(parser(), argv)
    with sigterm_unwinds():
        return _run_shuffler(ns, options)


def _run_shuffler(ns: argparse.Namespace, options: PipelineOptions) -> dict[str, object]:
    # Beam and its transforms are imported once the flags are parsed (not for --help)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions

    streaming = bool(options.view_as(StandardOptions).streaming)
    task, settings = load_shuffled_task(ns.task)
    _check_flags(ns, streaming)
    key = load_shuffle_key(ns)
    agg, plan, lateness = _plan_job(ns, options, task, settings, streaming)
    resumed, lock, published = _open_output(ns, task, settings)
    run_id = f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S.%fZ}-{os.getpid()}"
    _LOG.info(
        "shuffler: task %s (%s, %d group(s)), precision %d s, min_reports %d, %s, output %s",
        task.task_id, task.mechanism, task.n_groups, settings.time_precision_s, settings.min_reports,
        f"streaming (lateness {lateness:g} s)" if streaming else "batch", ns.output,
    )  # fmt: skip
    if ns.test_shuffle_seed is not None:
        _LOG.warning("--test_shuffle_seed: the permutation is reproducible; the output is NOT anonymous")
    p = beam.Pipeline(runner=plan.runner, options=options)
    _build_pipeline(p, ns, agg, task, settings, plan, streaming=streaming, run_id=run_id,
                    published=published, key=key)  # fmt: skip
    endpoint = _start_metrics(ns, task.task_id)
    result, seconds = _run_pipeline(p, ns, plan, streaming, endpoint)
    raw = _final_counts(result, ns.output, streaming, direct=plan.name == "direct")
    summary = _summarize(ns, task, settings, plan, result, seconds, raw, streaming=streaming,
                         resumed=resumed, run_id=run_id)  # fmt: skip
    _write_summary(ns.output, summary)
    lock.close()
    if endpoint is not None:  # the final counts: those of counts.json
        endpoint.finish(raw, state=str(result.state).rsplit(".", 1)[-1], result=None if streaming else result)
        endpoint.linger(ns.metrics_linger)
        endpoint.stop()
    return summary


def _plan_job(
    ns: argparse.Namespace,
    options: PipelineOptions,
    task: ParsedTask,
    settings: AnonymitySettings,
    streaming: bool,
) -> tuple[Aggregator, RunnerPlan, float]:
    """The task's aggregator, the runner's plan for the shuffler's buckets and the allowed lateness (s);
    a task or runner the shuffler cannot use: one-line error, exit status 2."""
    from transforms.runners import RunnerLimitation, plan_runner
    from wire.validate import decode_params

    lateness = task.window.allowed_lateness_s if ns.allowed_lateness is None else float(ns.allowed_lateness)
    try:
        agg: Aggregator = make_aggregator(task)
        decode_params(agg)
    except (ValueError, TypeError, MemoryError, OverflowError) as exc:
        fail(f"{ns.task}: the task cannot be shuffled: {exc}")
    window = WindowConfig(size_s=float(settings.time_precision_s), allowed_lateness_s=lateness)
    try:
        plan = plan_runner(
            options, window, streaming=streaming, files=bool(ns.input),
            streaming_duration_s=ns.streaming_duration,
        )  # fmt: skip
    except RunnerLimitation as exc:
        fail(str(exc))
    if streaming and ns.input and plan.paced:
        # The FnApiRunner runs a streaming job stage by stage: a bucket's event-time timer fires with the
        # bundle of the bucket's first file, long before the bucket's end, so the rest of the bucket
        # would be withheld as late.
        fail("the streaming shuffler from a watched directory does not run on the DirectRunner (its "
             "FnApiRunner fires a bucket's timer before the bucket closes, publishing part of it): run it "
             "on Prism (--runner=PrismRunner; bash tools/prism/get_prism.sh) or Flink, or shuffle the "
             "files in batch (without --streaming)")
    return agg, plan, lateness


def _open_output(
    ns: argparse.Namespace, task: ParsedTask, settings: AnonymitySettings
) -> tuple[bool, object, dict[int, dict[str, int] | None]]:
    """Prepares ``--output`` for this run and locks it: returns whether the run resumes an earlier one,
    the held lock and the buckets published earlier (a failure: one-line error, exit status 2)."""
    from transforms.shuffle import BATCH_SUBDIR, clear_spill, published_buckets

    try:
        resumed = prepare_shuffle_output(ns, task, settings)
        os.makedirs(os.path.join(ns.output, BATCH_SUBDIR), exist_ok=True)
        lock = lock_output(ns.output)
        cleared = clear_spill(ns.output)
        archived = archive_previous_run(ns.output) if resumed else None
        published = published_buckets(ns.output, task.task_id)
    except OSError as exc:
        fail(f"--output {ns.output!r} cannot be prepared: {exc.strerror or exc}")
    if resumed:
        _LOG.info(
            "shuffler: resuming on %s: %d bucket(s) published earlier (never rewritten), %d leftover "
            "spill/temporary file(s) removed, the previous run's counts moved to %s",
            ns.output, len(published), cleared, archived,
        )  # fmt: skip
    return resumed, lock, published


def _build_pipeline(
    p: beam.Pipeline,
    ns: argparse.Namespace,
    agg: Aggregator,
    task: ParsedTask,
    settings: AnonymitySettings,
    plan: RunnerPlan,
    *,
    streaming: bool,
    run_id: str,
    published: dict[int, dict[str, int] | None],
    key: bytes,
) -> None:
    """Adds the shuffler's steps to ``p``: read, validate, shuffle and publish per bucket, the dead letters
    (without report content) and, streaming, the count windows."""
    import apache_beam as beam

    from ldp.shuffle.levels import accounted_per_group
    from transforms.counts import WindowedCounts
    from transforms.io import WriteCounts, WriteDeadLetters
    from transforms.shuffle import ScrubDeadLetters, Shuffle, SourcedValidateFn

    read = read_reports(p, ns, agg, streaming=streaming, paced=plan.paced)
    validate = SourcedValidateFn(
        agg, settings.precision_ms, rounded_times=False
    )  # it rounds the times itself
    v = read.records | "Validate" >> beam.ParDo(validate).with_outputs(
        "dead_letter", "counts", main="reports"
    )
    reports, dead, counts = v.reports, [read.dead_letter, v.dead_letter], [read.counts, v.counts]
    out = reports | "Shuffle" >> Shuffle(
        task.task_id, task.schema_version, settings, ns.output, streaming=streaming,
        allowed_lateness_s=plan.window.allowed_lateness_s, test_seed=ns.test_shuffle_seed,
        run_id=run_id, memory_bytes=ns.memory_mb << 20, published=published, key=key,
        group_counts=accounted_per_group(task),
    )  # fmt: skip
    dead.append(out["dead_letter"])
    counts.append(out["counts"])
    scrub = ScrubDeadLetters(task_id=task.task_id)
    all_dead = tuple(dead) | "AllDeadLetters" >> beam.Flatten() | "NoContent" >> scrub
    all_dead | "WriteDeadLetters" >> WriteDeadLetters(
        ns.output, streaming=streaming, window_s=ns.dead_letter_window, task_id=task.task_id
    )
    if streaming:
        all_counts = tuple(counts) | "AllCounts" >> beam.Flatten()
        per_window = all_counts | "CountsPerWindow" >> WindowedCounts(ns.counts_window, task_id=task.task_id)
        per_window | "WriteCounts" >> WriteCounts(ns.output, task_id=task.task_id)


def _run_pipeline(
    p: beam.Pipeline,
    ns: argparse.Namespace,
    plan: RunnerPlan,
    streaming: bool,
    endpoint: MetricsEndpoint | None,
) -> tuple[PipelineResult, float]:
    """Runs ``p`` to its end (the metrics endpoint, if any, watches it); returns its result and seconds."""
    # Pub/Sub with --streaming_duration on the DirectRunner: the read stops at the deadline, every bucket
    # closes and the job ends DONE by itself (transforms.runners.bound_pubsub_read), as the jobs' do
    bounded_pubsub = None
    if streaming and not ns.input and ns.streaming_duration > 0 and plan.name == "direct":
        bounded_pubsub = ns.input_subscription or ns.input_topic
    try:
        result, seconds = _run(p, ns, streaming, bounded_pubsub=bounded_pubsub,
                               on_start=None if endpoint is None else endpoint.watch)  # fmt: skip
    except BaseException:
        if endpoint is not None:
            endpoint.stop()
        raise
    if endpoint is not None:  # from here on this thread alone reads the result's metrics
        endpoint.stop_watching()
    _LOG.info("shuffler ended: %s after %.1f s", result.state, seconds)
    return result, seconds


def _summarize(
    ns: argparse.Namespace,
    task: ParsedTask,
    settings: AnonymitySettings,
    plan: RunnerPlan,
    result: PipelineResult,
    seconds: float,
    raw: dict[str, int],
    *,
    streaming: bool,
    resumed: bool,
    run_id: str,
) -> dict[str, object]:
    """Writes the batch manifest and returns the run's summary (the contents of ``counts.json``); logs an
    error when the accounting does not balance and prints the accounting to stderr."""
    from transforms.shuffle import batch_manifest, clear_spill, write_manifest

    clear_spill(ns.output)  # late chunks' leftovers, if any
    entries = batch_manifest(ns.output)
    write_manifest(ns.output, entries)
    acct = accounting(raw)
    mine = _batches_of_run(ns.output, entries, run_id)
    in_files = sum(int(e["n"]) for e in mine)
    balanced = acct["read"] == (
        acct["forwarded"] + acct["already_published"] + acct["withheld"] + acct["dead_lettered"]
    )
    if in_files != acct["forwarded"]:
        _LOG.error("the batch files hold %d reports, %d counted as forwarded", in_files, acct["forwarded"])
    if not balanced:
        _LOG.error("accounting does not balance: %s", acct)
    summary: dict[str, object] = {
        "output": ns.output,
        "state": str(result.state),
        "seconds": seconds,
        "streaming": streaming,
        "task_id": task.task_id,
        "kind": task.kind,
        "mechanism": task.mechanism,
        "anonymity": settings.to_json(),
        "allowed_lateness_s": plan.window.allowed_lateness_s if streaming else None,
        "counts": acct,
        "balanced": bool(balanced and in_files == acct["forwarded"]),
        "batches": len(entries),
        "batches_this_run": len(mine),
        "resumed": resumed,
        "run_id": run_id,
        "batch_sizes": {"min": min((int(e["n"]) for e in entries), default=0),
                        "max": max((int(e["n"]) for e in entries), default=0)},
    }  # fmt: skip
    _print_accounting(ns.output, acct, balanced=bool(summary["balanced"]), mine=len(mine), total=len(entries))
    return summary


def _batches_of_run(output: str, entries: list[dict[str, object]], run_id: str) -> list[dict[str, object]]:
    """The manifest entries of the batches this run (``run_id``) published, by their ledger entries."""
    from transforms.shuffle import ledger_entry

    return [
        e
        for e in entries
        if (ledger_entry(output, os.path.basename(str(e["file"]))) or {}).get("run_id") == run_id
    ]


def _print_accounting(output: str, acct: dict[str, int], *, balanced: bool, mine: int, total: int) -> None:
    """Prints the run's accounting (``read = forwarded + ...``), its batches and the output to stderr."""
    from transforms.shuffle import BATCH_SUBDIR

    print(
        f"reports read={acct['read']} = forwarded={acct['forwarded']} + already_published="
        f"{acct['already_published']} + withheld={acct['withheld']} "
        f"(short buckets {acct['withheld_short']} in {acct['withheld_buckets']} bucket(s), few senders "
        f"{acct['withheld_few_senders']} in {acct['withheld_few_senders_buckets']} bucket(s), late "
        f"{acct['withheld_late']}) + dead_lettered={acct['dead_lettered']}"
        + ("" if balanced else "  [DOES NOT BALANCE]"),
        file=sys.stderr,
    )
    print(
        f"batches: {mine} published by this run, {total} file(s) in {os.path.join(output, BATCH_SUBDIR)}",
        file=sys.stderr,
    )
    print(f"output: {output}", file=sys.stderr)


def _write_summary(output: str, summary: dict[str, object]) -> None:
    """Writes the summary to ``OUT/counts.json`` (atomically)."""
    from transforms.shuffle import atomic_write

    atomic_write(os.path.join(output, "counts.json"), json.dumps(summary, indent=2).encode("utf-8"))


def _final_counts(result: object, output: str, streaming: bool, *, direct: bool) -> dict[str, int]:
    """The run's counters. Batch: Beam's. Streaming: the closed count windows, except for a run that
    ended DONE on the DirectRunner, whose Beam counters are complete (``transforms.runners``:
    ``fresh_direct_metrics``), while the count windows miss what the buckets closed at the end of the
    input emitted: their timers fire once the watermark has jumped to the end of time, and the DirectRunner
    drops those counts as late (the last bucket's batch was missing from them)."""
    from transforms.counts import format_counts, job_counts

    if not streaming:
        return job_counts(result)
    closed = closed_window_counts(output)
    if not (direct and str(getattr(result, "state", "")).rsplit(".", 1)[-1] == "DONE"):
        return closed
    try:
        beam_counts = job_counts(result)
    except RecursionError as exc:  # the FnApiRunner's metrics of a very long watch (many bundles)
        _LOG.warning("Beam counters unavailable (%s); using the count windows", exc)
        return closed
    if beam_counts != closed:
        _LOG.info("count windows: %s; Beam counters (the job's counts below): %s", format_counts(closed),
                  format_counts(beam_counts))  # fmt: skip
    return beam_counts


def _start_metrics(ns: argparse.Namespace, task_id: str):
    """The shuffler's Prometheus endpoint (``--metrics_port``; None without it): the aggregation jobs'
    counters plus the shuffler's (``transforms.prometheus.SHUFFLE_COUNTERS``, ``already_published``)."""
    if ns.metrics_port is None:
        if ns.metrics_linger:
            fail("--metrics_linger needs --metrics_port")
        return None
    from transforms.prometheus import (
        JOB_COUNTERS,
        SHUFFLE_COUNTERS,
        CounterSpec,
        job_reasons,
        start_job_metrics,
    )

    already = CounterSpec(
        "ldp_job_reports_already_published", "already_published",
        "Reports read again for a bucket an earlier run published (restarts).",
    )  # fmt: skip
    few = (
        CounterSpec("ldp_job_reports_withheld_few_senders", "shuffle_few_senders",
                    "Reports withheld in buckets from fewer distinct senders than min_reports."),
        CounterSpec("ldp_job_few_senders_buckets", "shuffle_few_senders_buckets",
                    "Buckets withheld for fewer distinct senders than min_reports."),
    )  # fmt: skip
    counters = (*JOB_COUNTERS, *SHUFFLE_COUNTERS, already, *few)
    try:
        endpoint = start_job_metrics(ns.metrics_port, pipeline="shuffle", task_id=task_id,
                                     reasons=job_reasons(), counters=counters)  # fmt: skip
    except OSError as exc:
        fail(f"--metrics_port {ns.metrics_port}: cannot listen ({exc.strerror or exc})")
    print(f"metrics: {endpoint.url}", file=sys.stderr, flush=True)
    return endpoint


if __name__ == "__main__":
    run()
