"""Helpers shared by the runnable pipelines: option parsing with a useful ``--help``, task loading,
window configuration from flags, time parsing."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import glob
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions

from ldp.task import CollectionTask, TaskError, WindowConfig, load_task
from transforms.frequency import WindowedCounts, format_counts, job_counts
from transforms.io import (
    DecodeReportMessages,
    ReadReportFiles,
    WatchReportFiles,
    WriteCounts,
    WriteDeadLetters,
)
from transforms.records import PAYLOAD_FIELDS

__all__ = [
    "parse_pipeline_args",
    "load_task_or_exit",
    "window_from_flags",
    "parse_iso8601_ms",
    "shared_flags",
    "add_report_stream_flags",
    "read_reports",
    "run_job",
    "write_dead_letters_and_counts",
    "JobRun",
    "collect_counts",
    "remove_empty_temp_dirs",
    "PubSubEmulator",
]


def shared_flags(parser):
    """Lets several ``PipelineOptions`` subclasses declare the same flag (``--task``, ``--input``, ...).

    Beam builds one argument parser from *every* ``PipelineOptions`` subclass imported in the process, so
    two pipelines that both define ``--task`` make each other fail with "conflicting option string" as
    soon as both modules are imported (a test run, a launcher). With argparse's ``resolve`` handler the
    later declaration replaces the earlier one; the flags share their destination name, so every view
    reads the same value. Call it first in ``_add_argparse_args``.
    """
    parser.conflict_handler = "resolve"
    for group in getattr(parser, "_action_groups", ()):  # argparse checks conflicts per argument group
        group.conflict_handler = "resolve"
    return parser


def add_report_stream_flags(parser) -> None:
    """The input, output, window and streaming flags every report-aggregating pipeline shares, declared
    once so that the pipelines (whose options Beam merges into one parser) always agree on them."""
    parser.add_argument(
        "--input",
        help="glob of Avro report files, e.g. 'DIR/*.avro' (batch: read once; --streaming: watched for "
        "new files)",
    )
    parser.add_argument(
        "--watch_interval",
        type=float,
        default=10.0,
        help="streaming from --input: seconds between matches of the glob (default 10)",
    )
    parser.add_argument("--input_subscription", help="Pub/Sub subscription projects/P/subscriptions/S")
    parser.add_argument("--input_topic", help="Pub/Sub topic projects/P/topics/T (a temporary subscription)")
    parser.add_argument(
        "--timestamp_attribute", help="Pub/Sub attribute holding the message time (ms or RFC 3339)"
    )
    parser.add_argument("--output", help="output directory (required)")
    parser.add_argument("--window_size", type=float, help="event-time window length in seconds")
    parser.add_argument("--window_period", type=float, help="sliding-window period in seconds")
    parser.add_argument("--allowed_lateness", type=float, help="seconds late reports still count")
    parser.add_argument(
        "--early_firing", type=float, help="streaming: early panes every so many processing seconds"
    )
    parser.add_argument("--accumulating", action="store_true", help="cumulative panes")
    parser.add_argument("--batch_size", type=int, default=1 << 15, help="records per batch read from files")
    parser.add_argument(
        "--counts_window",
        type=float,
        default=60.0,
        help="streaming: seconds per OUT/counts/ line of read/accepted/rejected counts (default 60)",
    )
    parser.add_argument(
        "--dead_letter_window",
        type=float,
        default=60.0,
        help="streaming: seconds of dead letters per OUT/dead_letter/ file (default 60)",
    )
    parser.add_argument(
        "--streaming_duration",
        type=float,
        default=0.0,
        help="streaming: stop after this many seconds; 0 runs until interrupted. Pub/Sub: the job is "
        "cancelled; --input: the watch stops, every window closes and the job finishes by itself",
    )


def read_reports(p: Any, opts: Any, task: Any, *, streaming: bool, paced_ticks: bool = False) -> Any:
    """The report source of an aggregation pipeline, from the shared flags: ``--input`` files read once
    (batch) or watched (``streaming``; ``paced_ticks`` for the FnApiRunner), else Pub/Sub
    (``--input_subscription`` / ``--input_topic``). Returns the reader's outputs (``records``,
    ``dead_letter``, ``counts``)."""
    if opts.input and streaming:
        duration = opts.streaming_duration if opts.streaming_duration > 0 else None
        return p | "Read" >> WatchReportFiles(
            opts.input, opts.watch_interval, opts.batch_size, task, duration_s=duration, paced=paced_ticks
        )
    if opts.input:
        return p | "Read" >> ReadReportFiles(opts.input, opts.batch_size, task)
    source = opts.input_subscription or opts.input_topic
    messages = p | "ReadPubSub" >> beam.io.ReadFromPubSub(
        subscription=opts.input_subscription,
        topic=None if opts.input_subscription else opts.input_topic,
        timestamp_attribute=opts.timestamp_attribute,
    )
    return messages | "Read" >> DecodeReportMessages(source, task)


@dataclasses.dataclass
class JobRun:
    """A finished pipeline run: Beam's result, its wall time, and the count files that were already in
    ``OUT/counts/`` before it started (an earlier run's; never added to this run's totals)."""

    result: Any
    seconds: float
    stale_counts: frozenset[str] = frozenset()


def _count_files(output: str) -> list[str]:
    return glob.glob(os.path.join(output, "counts", "counts-*.jsonl"))


def write_dead_letters_and_counts(read: Any, agg: Any, opts: Any, *, streaming: bool) -> Any:
    """Writes the dead letters of the reader and the aggregation (``OUT/dead_letter/``) and, in streaming,
    the per-window read/accepted/rejected counts (``OUT/counts/``). Returns the dead-letter PCollection."""
    dead = (read.dead_letter, agg["dead_letter"]) | "AllDeadLetters" >> beam.Flatten()
    dead | "WriteDeadLetters" >> WriteDeadLetters(
        opts.output, streaming=streaming, window_s=opts.dead_letter_window
    )
    if streaming:
        (
            (read.counts, agg["counts"])
            | "AllCounts" >> beam.Flatten()
            | "CountsPerWindow" >> WindowedCounts(opts.counts_window)
            | "WriteCounts" >> WriteCounts(opts.output)
        )
    return dead


def run_job(p: Any, opts: Any, *, streaming: bool) -> JobRun:
    """Runs an aggregation pipeline: a Pub/Sub job with ``--streaming_duration`` is cancelled after that many
    seconds; any other job (batch, directory watch) runs to its end."""
    stale = frozenset(_count_files(opts.output))
    t0 = time.perf_counter()
    result = p.run()
    if streaming and opts.streaming_duration > 0 and not opts.input:
        deadline = time.time() + opts.streaming_duration
        while time.time() < deadline:
            time.sleep(0.5)
        result.cancel()
    else:
        result.wait_until_finish()
    return JobRun(result, time.perf_counter() - t0, stale)


def collect_counts(
    run: JobRun, output: str, *, streaming: bool, extra: Sequence[str] = ()
) -> tuple[dict[str, int], dict[str, int]]:
    """Read / accepted / rejected counts of a finished job, printed to stderr, and the ``extra`` counters.

    Batch: Beam's counters (exact on every runner). Streaming: the sum of the closed count windows under
    ``OUT/counts/`` (the DirectRunner's streaming counters are incomplete), with Beam's printed beside it.
    """
    try:
        counts = job_counts(run.result)
    except RecursionError as exc:  # the FnApiRunner's metrics of a very long watch (many bundles)
        print(f"warning: Beam counters unavailable ({exc}); using the count windows", file=sys.stderr)
        counts = {"read": 0, "accepted": 0, "rejected": 0}
    extras = {k: counts.pop(k, 0) for k in extra}
    if streaming:
        closed = closed_window_counts(output, exclude=run.stale_counts)
        print(f"closed count windows: {format_counts(closed)}", file=sys.stderr)
        print(
            f"Beam counters (incomplete on the DirectRunner with Pub/Sub): {format_counts(counts)}",
            file=sys.stderr,
        )
        return closed, extras
    print(format_counts(counts), file=sys.stderr)
    return counts, extras


def remove_empty_temp_dirs(output: str, subdirs: Sequence[str] = ("dead_letter", "models", "counts")) -> None:
    """``fileio`` leaves its emptied ``.temp*`` directories behind; remove them (never non-empty ones)."""
    for parent in (output, *(os.path.join(output, d) for d in subdirs)):
        if os.path.isdir(parent):
            for name in os.listdir(parent):
                path = os.path.join(parent, name)
                if name.startswith(".temp") and os.path.isdir(path) and not os.listdir(path):
                    os.rmdir(path)


def parse_pipeline_args(
    argv: Sequence[str] | None, options_cls: type, description: str, prog: str | None = None
) -> tuple[Any, Any]:
    """Parses ``argv`` into Beam ``PipelineOptions`` plus the view ``options_cls``.

    ``-h``/``--help`` prints the pipeline's own options (and a pointer to the Beam ones) and exits.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog="Any Apache Beam pipeline option is accepted as well, e.g. --runner=DirectRunner, "
        "--direct_running_mode=multi_processing --direct_num_workers=2, --runner=PortableRunner "
        "--job_endpoint=embed --environment_type=LOOPBACK, --runner=FlinkRunner, --runner=DataflowRunner "
        "--setup_file=./setup.py ...",
    )
    options_cls._add_argparse_args(parser)
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        raise SystemExit(0)
    options = PipelineOptions(argv)
    return options, options.view_as(options_cls)


def load_task_or_exit(path: str | None) -> CollectionTask:
    """Loads a task file; prints every problem and exits with status 2 when it is invalid."""
    if not path:
        print("error: --task TASK.json is required", file=sys.stderr)
        raise SystemExit(2)
    try:
        return load_task(path)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def window_from_flags(task: CollectionTask, ns) -> WindowConfig:
    """The task's window defaults overridden by ``--window_size``, ``--window_period``,
    ``--allowed_lateness``, ``--early_firing``, ``--accumulating`` when given."""
    w = task.window
    changes = {}
    for flag, field in (
        ("window_size", "size_s"),
        ("window_period", "period_s"),
        ("allowed_lateness", "allowed_lateness_s"),
        ("early_firing", "early_firing_s"),
    ):
        v = getattr(ns, flag, None)
        if v is not None:
            if v < 0 or (v == 0 and field != "allowed_lateness_s"):
                raise SystemExit(f"error: --{flag} must be positive, got {v}")
            changes[field] = float(v)
    if getattr(ns, "accumulating", False):
        changes["accumulating"] = True
    w = dataclasses.replace(w, **changes)
    if w.period_s is not None and (w.size_s is None or w.period_s > w.size_s):
        raise SystemExit("error: --window_period needs --window_size >= the period")
    return w


def parse_iso8601_ms(text: str) -> int:
    """ISO-8601 time (``Z`` or offset; naive means UTC) -> milliseconds since the epoch."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(round(t.timestamp() * 1000))


class PubSubEmulator:
    """Starts the Google Cloud Pub/Sub emulator on 127.0.0.1 (a free port) and stops it by PID.

    Use as a context manager; ``host`` is the value for ``PUBSUB_EMULATOR_HOST``. The emulator runs in its
    own process group, which :meth:`stop` terminates (and nothing else).
    """

    DEFAULT_BINARY = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"

    def __init__(
        self, binary: str | None = None, project: str = "ldp-demo", log_path: str | None = None
    ) -> None:
        import os

        self.binary = binary or os.environ.get("PUBSUB_EMULATOR_BIN", self.DEFAULT_BINARY)
        self.project = project
        self.log_path = log_path
        self.proc = None
        self.host = None

    @classmethod
    def available(cls, binary: str | None = None) -> bool:
        import os

        b = binary or os.environ.get("PUBSUB_EMULATOR_BIN", cls.DEFAULT_BINARY)
        return os.path.isfile(b) and os.access(b, os.X_OK)

    def start(self, timeout_s: float = 60.0) -> PubSubEmulator:
        import os
        import socket
        import subprocess
        import time

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(self.log_path or os.devnull, "wb")  # noqa: SIM115 - kept open for the child
        self.proc = subprocess.Popen(
            [self.binary, "--host=127.0.0.1", f"--port={port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.host = f"127.0.0.1:{port}"
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Pub/Sub emulator exited with status {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Pub/Sub emulator did not listen on {self.host} within {timeout_s} s")

    def stop(self) -> None:
        import os
        import signal

        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group the emulator's own launcher created
                self.proc.wait(timeout=10)
            except (ProcessLookupError, PermissionError):
                pass
            except Exception:  # noqa: BLE001 - still running: force it
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def env(self) -> dict[str, str]:
        """A copy of ``os.environ`` with ``PUBSUB_EMULATOR_HOST`` set."""
        import os

        return {**os.environ, "PUBSUB_EMULATOR_HOST": self.host}

    def __enter__(self) -> PubSubEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bad_report_variants(
    good: Sequence[dict[str, Any]], *, task_id: str, schema_version: int, n_groups: int, oracle: Any
) -> dict[str, list[dict[str, Any]]]:
    """Every kind of bad report the report schema can carry, made from valid records ``good`` of one
    group, keyed by the dead-letter reason the aggregator must give (simulators' ``--inject_bad``).

    Kinds: another task, an unknown schema version, a group outside ``[0, n_groups)``, each payload
    field the oracle uses missing, payloads outside the oracle's output domain, and a payload field the
    oracle does not use.
    """
    out: dict[str, list[dict[str, Any]]] = {}

    def variant(reason: str, **changes: Any) -> None:
        out.setdefault(reason, []).extend({**r, **changes} for r in good)

    variant("wrong_task", task_id=task_id + "-other")
    variant("wrong_schema_version", schema_version=schema_version + 1)
    variant("invalid_group", group=n_groups)
    used = tuple(getattr(oracle, "report_fields", ("values",)))
    for field in used:
        variant("missing_field", **{PAYLOAD_FIELDS[field]: None})
    if "values" in used:
        top = getattr(oracle, "g", None) or getattr(oracle, "K", None) or getattr(oracle, "d", None) or 1
        variant("out_of_domain", value=int(top))
    if "bits" in used:
        variant("invalid_payload", bits=bytes(int(getattr(oracle, "nbytes", 1)) + 1))  # one byte too long
    if "items" in used:
        variant("out_of_domain", items=[oracle.d] * int(getattr(oracle, "k", 1)))
    if "reals" in used:
        variant("out_of_domain", reals=[1.0e6])
    unused = [name for field, name in PAYLOAD_FIELDS.items() if field not in used]
    example = {"value": 1, "seed": 1, "bits": b"\x01", "items": [0], "reals": [0.5]}
    variant("invalid_payload", **{unused[0]: example[unused[0]]})
    return out


def runs_on_fnapi_runner(options: PipelineOptions) -> bool:
    """True when the job will run on Beam's in-process FnApiRunner: the DirectRunner (the default runner,
    in any of its spellings and running modes) for a job without Pub/Sub, or the PortableRunner with
    ``--job_endpoint=embed``."""
    runner = options.view_as(StandardOptions).runner
    name = "direct" if runner is None else runner if isinstance(runner, str) else type(runner).__name__
    name = name.lower().removesuffix("runner")
    if name in ("direct", "switchingdirect"):
        return True
    return name == "portable" and options.view_as(PortableOptions).job_endpoint == "embed"


def directory_streaming_on_fnapi_runner(window: WindowConfig, opts: Any) -> WindowConfig:
    """Adapts a directory-streaming job to the FnApiRunner (the DirectRunner's engine for it here).

    The FnApiRunner has no processing-time triggers (early firings would crash it) and runs a streaming
    job stage by stage: windows are emitted only once the watch has ended. So early firings are dropped
    (with a warning) and a watch duration is required.
    """
    if opts.streaming_duration <= 0:
        raise SystemExit(
            "error: streaming from --input on the DirectRunner (FnApiRunner) emits estimates only when the "
            "watch ends: give --streaming_duration SECONDS (or run on Flink, see docs/flink.md)"
        )
    if opts.output_topic:
        raise SystemExit(
            "error: --output_topic with streaming from --input is not supported on the DirectRunner "
            "(its Pub/Sub sink needs the runner that cannot run the directory watch)"
        )
    if window.early_firing_s is not None:
        print(
            "warning: directory streaming on the DirectRunner (FnApiRunner) has no processing-time "
            "triggers; ignoring early firings",
            file=sys.stderr,
        )
        window = dataclasses.replace(window, early_firing_s=None)
    return window


def closed_window_counts(output: str, exclude: Sequence[str] | frozenset[str] = ()) -> dict[str, int]:
    """Sums ``OUT/counts/counts-*.jsonl`` (the count windows a streaming job has closed), leaving out the
    files in ``exclude`` (an earlier run's)."""
    total: dict[str, int] = {"read": 0, "accepted": 0, "rejected": 0}
    skip = set(exclude)
    for path in (f for f in _count_files(output) if f not in skip):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                for k, v in json.loads(line).items():
                    if not k.startswith("window_"):
                        total[k] = total.get(k, 0) + int(v)
    return total
