"""Window-end-to-pane latency of the live local paths (docs/live.md; not part of the test suite).

    .venv/bin/python -m bench.live_latency --source directory --runner prism --seconds 90
    .venv/bin/python -m bench.live_latency --source pubsub --runner direct --seconds 90
    .venv/bin/python -m bench.live_latency --source directory --runner flink --seconds 90
    .venv/bin/python -m bench.live_latency --source directory --runner direct --seconds 60

Runs ``pipelines.frequency --streaming`` as a child process (its own process group, stopped by PID) while
simulated clients feed it ``--rate`` reports/s with event time = now: one Avro file per second moved into
a watched directory (``--source directory``), or Pub/Sub messages to the emulator (``--source pubsub``,
started on 127.0.0.1 and stopped by PID). A watcher polls ``OUT/estimates-*.jsonl`` every 0.2 s and
records when each (window, pane) file first appears.

Per window whose end falls inside the measured period (``--seconds``, after the job's first pane and
``--warmup`` s more): the latency of its on-time
pane (the first pane at or after the window's end that is not EARLY; a LATE pane counts when the on-time
pane was empty) = first seen - window end; the latency of its first complete pane (panes accumulate: the
first with all of the window's reports); and how many EARLY panes appeared before the end. The summary
(median, max) and every window go to ``bench/results/live_latency_<source>_<runner>.json`` (``--json``).
The poll adds up to 0.2 s; the windows' ends are the wall clock (event time = feed time).

Runner arguments: ``direct`` none (the DirectRunner: FnApiRunner for a directory, which needs
``--streaming_duration`` and emits at the end; BundleBasedDirectRunner for Pub/Sub); ``prism``
``--runner=PrismRunner`` (the binary of ``tools/prism/get_prism.sh``); ``flink`` the embedded Flink
mini-cluster with the jar of ``tools/flink/get_job_server.sh``, ``--parallelism=2``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ldp.task import Task, parse_task
from pipelines.cli import fail, job_parser, parse_job_args
from pipelines.live import ChildJob, FileFeeder, PaneWatcher, PubSubFeeder, latency_summary

__all__ = ["main", "measure"]

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "ldp-live"


def _runner_args(runner: str) -> list[str]:
    if runner == "direct":
        return []
    if runner == "prism":
        return ["--runner=PrismRunner"]
    if runner == "flink":
        jar = subprocess.run(
            ["bash", str(ROOT / "tools" / "flink" / "get_job_server.sh")], capture_output=True, text=True,
            check=True,
        ).stdout.strip().splitlines()[-1]  # fmt: skip
        return [
            "--runner=FlinkRunner", "--flink_master=[local]", f"--flink_job_server_jar={jar}",
            "--environment_type=LOOPBACK", "--parallelism=2",
        ]  # fmt: skip
    raise ValueError(f"unknown runner {runner!r}")


def _job_command(
    workdir: Path, out: Path, runner: str, window_s: int, early_s: int, lateness_s: int, extra_args: list[str]
) -> list[str]:
    """The streaming frequency job's command line, before its input arguments."""
    return [
        sys.executable, "-m", "pipelines.frequency", "--task", str(workdir / "task.json"), "--streaming",
        "--output", str(out), "--window_size", str(window_s), "--early_firing", str(early_s),
        "--allowed_lateness", str(lateness_s), "--accumulating", "--counts_window", str(window_s),
        "--dead_letter_window", str(window_s), *_runner_args(runner), *extra_args,
    ]  # fmt: skip


def _start_pubsub(workdir: Path, env: dict[str, str]) -> tuple[Any, str, str]:
    """Start the emulator, point this process and ``env`` at it, create the topic and subscription."""
    from google.cloud import pubsub_v1

    from pipelines.pubsub_emulator import PubSubEmulator

    emulator = PubSubEmulator(project=PROJECT, log_path=str(workdir / "emulator.log")).start()
    os.environ["PUBSUB_EMULATOR_HOST"] = env["PUBSUB_EMULATOR_HOST"] = emulator.host
    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = pub.topic_path(PROJECT, "reports")
    subscription = sub.subscription_path(PROJECT, "aggregator")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    return emulator, topic, subscription


def _input_args(
    source: str, runner: str, workdir: Path, env: dict[str, str], *, bounded_s: float, watch_interval_s: float
) -> tuple[list[str], Any, str | None]:
    """The job's input arguments for ``source``: ``(arguments, emulator or None, topic or None)``."""
    if source == "directory":
        incoming = workdir / "incoming"
        incoming.mkdir()
        args = ["--input", str(incoming / "*.avro"), "--watch_interval", str(watch_interval_s)]
        if runner == "direct":  # the FnApiRunner needs a bounded watch (it emits when the watch ends)
            args += ["--streaming_duration", str(bounded_s)]
        return args, None, None
    emulator, topic, subscription = _start_pubsub(workdir, env)
    return ["--input_subscription", subscription, "--timestamp_attribute", "event_time"], emulator, topic


def _wait_until_running(job: ChildJob, out: Path) -> None:
    """Wait (at most 2 min) for the job's output directory, so that start-up is not measured."""
    deadline = time.time() + 120
    while not (out / ".ldp-beam-output.json").exists() and job.running() and time.time() < deadline:
        time.sleep(0.2)
    if not job.running():
        raise RuntimeError(f"the job exited with status {job.proc.returncode}:\n{job.tail()}")


def _measured_window_ends(
    job: ChildJob,
    watcher: PaneWatcher,
    *,
    t_start: float,
    seconds: float,
    warmup_s: float,
    window_s: int,
    bounded: bool,
) -> list[int]:
    """Warm up, feed for the measured period, then wait for the on-time panes of the windows ending in it.

    Returns those windows' ends (ms). A bounded job's panes come when its watch ends, so it has no
    first-pane warm-up and a longer wait.
    """
    # warm-up: until the job has written its first pane (a Flink job starts processing well after
    # it was submitted), then warmup_s seconds; the measured windows start after that
    while not bounded and not watcher.panes and job.running() and time.time() < t_start + 300:
        time.sleep(0.2)
    t_measure = time.time() + warmup_s
    t_feed_end = t_measure + seconds
    while time.time() < t_feed_end and job.running():
        time.sleep(0.5)
    ends = range(int(t_measure // window_s + 1) * window_s, int(t_feed_end), window_s)
    ends_ms = [e * 1000 for e in ends]
    limit = time.time() + 60 + (seconds if bounded else 0)  # at most a minute more (unbounded)
    while time.time() < limit and job.running():
        got = {p.window_end_ms for p in watcher.panes if p.pane_timing != "EARLY"}
        if all(e in got for e in ends_ms):
            break
        time.sleep(0.5)
    return ends_ms


def _start_feeder(task: Task, target: Path | str, rate: float, budget_s: float) -> FileFeeder | PubSubFeeder:
    """Start feeding ``rate`` reports/s: Avro files into a directory, or messages to a Pub/Sub topic."""
    if isinstance(target, Path):
        feeder: FileFeeder | PubSubFeeder = FileFeeder(task, target, rate=rate, duration_s=budget_s, seed=7)
    else:
        feeder = PubSubFeeder(task, target, rate=rate, duration_s=budget_s, seed=7)
    feeder.start()
    return feeder


def measure(
    source: str,
    runner: str,
    *,
    seconds: float,
    window_s: int,
    early_s: int,
    lateness_s: int,
    rate: float,
    watch_interval_s: float,
    warmup_s: float,
    workdir: Path,
    extra_args: list[str],
) -> dict[str, Any]:
    """One run; returns the summary (see the module docstring)."""
    task = parse_task(
        {"task_id": "live-latency", "mechanism": "olh", "epsilon": 1.0, "domain_size": 64},
        source="live latency task",
    )
    task.save(workdir / "task.json")
    out = workdir / "out"
    cmd = _job_command(workdir, out, runner, window_s, early_s, lateness_s, extra_args)
    env = dict(os.environ)
    inputs, emulator, topic = _input_args(
        source, runner, workdir, env, bounded_s=seconds + warmup_s + 5, watch_interval_s=watch_interval_s
    )
    cmd += inputs
    job = ChildJob(cmd, workdir / "job.log", env=env)
    watcher = PaneWatcher(out).start()
    feeder = None
    bounded = source == "directory" and runner == "direct"  # its panes come when the watch ends
    try:
        _wait_until_running(job, out)
        t_start = time.time()
        budget = seconds + warmup_s + 330  # the longest warm-up; the feeding stops at the measured end
        feeder = _start_feeder(task, workdir / "incoming" if source == "directory" else topic, rate, budget)
        ends_ms = _measured_window_ends(
            job, watcher, t_start=t_start, seconds=seconds, warmup_s=warmup_s, window_s=window_s,
            bounded=bounded,
        )  # fmt: skip
        feeder.end_reports()  # Pub/Sub: keep-alive messages from now on (the watermark moves)
        if bounded:
            job.wait(120)  # the bounded watch ends by itself and writes every window
    finally:
        if feeder is not None:
            feeder.stop()
        code = job.stop()
        watcher.stop()
        if emulator is not None:
            emulator.stop()
    return {
        "source": source,
        "runner": runner,
        "command": " ".join(cmd),
        "seconds": seconds,
        "warmup_s": warmup_s,
        "window_s": window_s,
        "early_firing_s": early_s,
        "allowed_lateness_s": lateness_s,
        "watch_interval_s": watch_interval_s if source == "directory" else None,
        "rate_reports_per_s": rate,
        "reports_fed": feeder.sent if feeder else 0,
        "job_exit": code,
        "panes_seen": len(watcher.panes),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, load {os.getloadavg()[0]:.1f}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **latency_summary(watcher.panes, ends_ms),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = job_parser(__doc__.splitlines()[0])
    ap.add_argument("--source", choices=("directory", "pubsub"), default="directory")
    ap.add_argument("--runner", choices=("direct", "prism", "flink"), default="prism")
    ap.add_argument("--seconds", type=float, default=90.0, help="seconds of feeding measured (after warm-up)")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of feeding not measured")
    ap.add_argument("--window_size", type=int, default=10, help="window length (s)")
    ap.add_argument("--early_firing", type=int, default=2, help="early panes every so many seconds")
    ap.add_argument("--allowed_lateness", type=int, default=5, help="allowed lateness (s)")
    ap.add_argument("--rate", type=float, default=2000.0, help="reports per second fed")
    ap.add_argument("--watch_interval", type=float, default=1.0, help="directory: seconds between matches")
    ap.add_argument("--json", help="result file (default bench/results/live_latency_<source>_<runner>.json)")
    ap.add_argument("--keep", help="keep the work directory here (default: a temporary one, removed)")
    ns, _ = parse_job_args(ap, argv)
    if ns.source == "pubsub" and ns.runner != "direct":
        fail("Pub/Sub input runs on the DirectRunner only here (Prism and the portable Flink runner lack "
             "Python's Pub/Sub source)")
    work = Path(ns.keep) if ns.keep else Path(tempfile.mkdtemp(prefix="live-latency-"))
    if ns.keep and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        res = measure(
            ns.source, ns.runner, seconds=ns.seconds, window_s=ns.window_size, early_s=ns.early_firing,
            lateness_s=ns.allowed_lateness, rate=ns.rate, watch_interval_s=ns.watch_interval,
            warmup_s=ns.warmup, workdir=work, extra_args=ns.beam_args,
        )  # fmt: skip
    finally:
        if not ns.keep:
            shutil.rmtree(work, ignore_errors=True)
    path = Path(ns.json or ROOT / "bench" / "results" / f"live_latency_{ns.source}_{ns.runner}.json")
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(
        f"{ns.source} on {ns.runner}: {res['with_on_time_pane']}/{res['windows']} windows with an on-time "
        f"pane; window end -> pane median {res['on_time_latency_s_median']} s, max "
        f"{res['on_time_latency_s_max']} s; complete pane median {res['complete_latency_s_median']} s, max "
        f"{res['complete_latency_s_max']} s; early panes per window (median) "
        f"{res['early_panes_per_window_median']}; job exit {res['job_exit']}; {path}"
    )
    return res


if __name__ == "__main__":
    main()
