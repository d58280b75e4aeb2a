"""The live dashboard demo, end to end on 127.0.0.1 (``./run_local.sh dashboard``).

    python -m pipelines.dashboard_demo [--minutes 4] [--source auto|directory|pubsub] [--rate 2000]
        [--window_size 20] [--early_firing 5] [--allowed_lateness 10] [--workdir out/dashboard]
        [--store sqlite:///out/dashboard/estimates.db] [--port 5006] [--exit_when_done]

Starts, each as a child process group stopped by PID on exit or Ctrl-C (and nothing else):

1. the report source: a watched directory ``WORKDIR/incoming/`` on Prism (``--source directory``; the
   default when ``tools/prism/get_prism.sh`` has built the binary), or the Pub/Sub emulator on the
   DirectRunner (``--source pubsub``; the default otherwise). docs/live.md compares the two;
2. the streaming frequency job (``pipelines.frequency --streaming``) with ``--store`` (the latest-state
   store, SQLite by default), short event-time windows, early panes and accumulating panes;
3. the dashboard (``python -m pipelines.dashboard --store ...``), whose URL it prints;
4. simulated clients (a labelled Zipf population) feeding ``--rate`` reports/s for ``--minutes``:
   one Avro file a second into the directory, or Pub/Sub messages (``pipelines.simulate.publish``).

The first window appears on the page about one window length plus a few seconds after the start (early
panes within ``--early_firing`` seconds of its first reports). Once the feeding ends the job and the
dashboard keep running until Ctrl-C, or, with ``--exit_when_done``, until every window in the store is
final and together they hold every report fed; it then prints the windows, their report counts and the
window-end-to-pane latency the store recorded.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ldp.task import TaskError, parse_task
from pipelines.cli import fail, job_parser, parse_job_args
from pipelines.live import ChildJob, FileFeeder, PubSubFeeder
from pipelines.pubsub_emulator import PubSubEmulator

__all__ = ["run", "DEMO_LABELS"]

PROJECT = "ldp-dashboard"

#: Value labels of the demo task (a Zipf population: the first labels are the most frequent).
DEMO_LABELS = (
    "apple", "banana", "cherry", "grape", "mango", "orange", "pear", "plum", "kiwi", "lemon", "lime",
    "peach", "apricot", "fig", "guava", "papaya", "melon", "date", "quince", "lychee", "olive", "damson",
    "medlar", "sloe", "rowan", "elder", "bilberry", "cloudberry", "gooseberry", "currant", "tamarind",
    "yuzu",
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    ap = job_parser(__doc__.splitlines()[0], beam_options=False)
    ap.add_argument("--minutes", type=float, default=4.0, help="minutes of simulated clients feeding reports")
    ap.add_argument(
        "--source",
        choices=("auto", "directory", "pubsub"),
        default="auto",
        help="auto: a watched directory on Prism when its binary is built, else Pub/Sub on the DirectRunner",
    )
    ap.add_argument("--rate", type=float, default=2000.0, help="reports per second fed")
    ap.add_argument("--window_size", type=int, default=20, help="event-time window length (s)")
    ap.add_argument("--early_firing", type=int, default=5, help="early panes every so many seconds")
    ap.add_argument("--allowed_lateness", type=int, default=10, help="seconds late reports still count")
    ap.add_argument("--epsilon", type=float, default=1.0, help="privacy budget per report")
    ap.add_argument("--mechanism", default="olh", help="frequency oracle")
    ap.add_argument("--dataset", default="zipf:1.3", help="population: zipf[:EXPONENT] or uniform")
    ap.add_argument("--seed", type=int, help="simulation seed (default: OS entropy)")
    ap.add_argument("--workdir", default="out/dashboard", help="the demo's directory (replaced on every run)")
    ap.add_argument("--store", help="store URL (default: sqlite:///WORKDIR/estimates.db)")
    ap.add_argument("--port", type=int, default=5006, help="dashboard port (0: any free port)")
    ap.add_argument("--address", default="127.0.0.1", help="dashboard address")
    ap.add_argument(
        "--exit_when_done",
        action="store_true",
        help="stop everything once every window in the store is final and they hold every report fed "
        "(default: run until Ctrl-C)",
    )
    ap.add_argument("--timeout", type=float, default=0.0, help="stop after so many seconds in all (0: none)")
    return ap


def _free_port(address: str, port: int) -> int:
    from pipelines.dashboard import check_port

    try:
        return check_port(address, port)
    except OSError as exc:
        fail(str(exc))


def _choose_source(source: str) -> str:
    from transforms.runners import find_prism_binary  # imports Beam: not to build the parser

    if source == "auto":
        if find_prism_binary() is not None:
            return "directory"
        if PubSubEmulator.available():
            return "pubsub"
        fail("no live local path here: build Prism (bash tools/prism/get_prism.sh) or install the Pub/Sub "
             "emulator (gcloud components install pubsub-emulator); docs/live.md")
    if source == "directory" and find_prism_binary() is None:
        fail("--source directory runs live on Prism: build it with bash tools/prism/get_prism.sh "
             "(docs/live.md)")
    if source == "pubsub" and not PubSubEmulator.available():
        fail(f"--source pubsub needs the Pub/Sub emulator at {PubSubEmulator.DEFAULT_BINARY} "
             "(or PUBSUB_EMULATOR_BIN)")
    return source


def _wait_http(url: str, proc: ChildJob, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.running():
        try:
            with urllib.request.urlopen(url, timeout=20) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def _store_status(url: str, task_id: str) -> dict[str, Any]:
    """The fed windows the store has: count, how many are final, their reports, and the latency of each
    window's first pane at or after its end that is not EARLY (written_ms - window_end)."""
    from store import open_store

    try:
        store = open_store(url, create=False, shared=False)
    except Exception:  # noqa: BLE001 - not created yet (the job creates it as it starts)
        return {"windows": 0, "final": 0}
    try:
        windows = store.windows(task_id, limit=10_000)
        panes = store.pane_latencies(task_id, last_windows=10_000)
    except Exception:  # noqa: BLE001 - tables not there yet
        return {"windows": 0, "final": 0}
    finally:
        store.close()
    first: dict[tuple[int, int], int] = {}
    for p in panes:
        key = (int(p["window_start"]), int(p["window_end"]))
        if p["pane_timing"] != "EARLY" and p["latency_ms"] is not None and key not in first:
            first[key] = int(p["latency_ms"])
    return {
        "windows": len(windows),
        "final": sum(1 for w in windows if w["is_final"]),
        "all_windows": sorted((int(w["window_start"]), int(w["window_end"])) for w in windows),
        "final_windows": sorted(
            (int(w["window_start"]), int(w["window_end"])) for w in windows if w["is_final"]
        ),
        "reports": sum(int(w["n_reports"] or 0) for w in windows),
        "latency_ms": sorted(first.values()),
    }


def _check_args(ns: argparse.Namespace) -> None:
    """Fails on a non-positive --minutes / --rate or a --window_size / --early_firing under one second."""
    for flag in ("minutes", "rate"):
        if not getattr(ns, flag) > 0:
            fail(f"--{flag} must be positive")
    for flag in ("window_size", "early_firing"):
        if getattr(ns, flag) < 1:
            fail(f"--{flag} must be a whole number of seconds >= 1")


def _prepare_workdir(workdir: str) -> Path:
    """The demo's directory, emptied (only when an earlier demo made it, or it is empty) and marked."""
    work = Path(workdir).resolve()
    if work.exists():
        marker = work / ".ldp-dashboard-demo"
        if any(work.iterdir()) and not marker.exists():
            fail(f"--workdir {work} is not empty and not an earlier demo's: choose another")
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / ".ldp-dashboard-demo").write_text("the dashboard demo's directory, replaced on every run\n")
    return work


def _demo_task(ns: argparse.Namespace, work: Path) -> Any:
    """The demo's frequency task over :data:`DEMO_LABELS`, saved as ``WORKDIR/task.json``."""
    try:
        task = parse_task(
            {"task_id": "dashboard-demo", "mechanism": ns.mechanism, "epsilon": ns.epsilon,
             "domain_size": len(DEMO_LABELS), "labels": list(DEMO_LABELS)},
            source="demo task", kind="frequency",
        )  # fmt: skip
    except TaskError as exc:
        fail(exc.one_line())
    task.save(work / "task.json")
    return task


def _job_command(py: str, ns: argparse.Namespace, work: Path, store: str) -> list[str]:
    """The streaming frequency job's command line, without its input arguments."""
    return [
        py, "-m", "pipelines.frequency", "--task", str(work / "task.json"), "--streaming",
        "--output", str(work / "out"), "--store", store,
        "--window_size", str(ns.window_size), "--early_firing", str(ns.early_firing),
        "--allowed_lateness", str(ns.allowed_lateness), "--accumulating",
        "--counts_window", str(ns.window_size), "--dead_letter_window", str(ns.window_size),
        "--progress_interval", "30", "--log_level", ns.log_level,
    ]  # fmt: skip


def _start_pubsub(work: Path, started: list[Any], env: dict[str, str]) -> tuple[str, str]:
    """Starts the Pub/Sub emulator (appended to ``started``), points ``env`` and this process at it and
    creates the reports topic and the job's subscription; returns (topic path, subscription path)."""
    emulator = PubSubEmulator(project=PROJECT, log_path=str(work / "emulator.log")).start()
    started.append(emulator)
    env["PUBSUB_EMULATOR_HOST"] = os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
    print(f"[dashboard demo] Pub/Sub emulator on {emulator.host} (pid {emulator.proc.pid})",
          flush=True)  # fmt: skip
    from google.cloud import pubsub_v1

    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = pub.topic_path(PROJECT, "reports")
    subscription = sub.subscription_path(PROJECT, "aggregator")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    return topic, subscription


def _start_job(
    job_cmd: list[str], source: str, work: Path, env: dict[str, str], started: list[Any]
) -> ChildJob:
    """Starts the streaming job (appended to ``started``) and waits up to 120 s for its output marker;
    raises RuntimeError when it exited."""
    job = ChildJob(job_cmd, work / "job.log", env=env)
    started.append(job)
    runner = "Prism" if source == "directory" else "DirectRunner"
    print(f"[dashboard demo] streaming job on {runner} (pid {job.pid}), log {work / 'job.log'}",
          flush=True)  # fmt: skip
    deadline = time.time() + 120
    marker = work / "out" / ".ldp-beam-output.json"
    while not marker.exists() and job.running() and time.time() < deadline:
        time.sleep(0.2)
    if not job.running():
        raise RuntimeError(f"the streaming job exited with status {job.proc.returncode}:\n{job.tail()}")
    return job


def _start_dashboard(
    py: str, ns: argparse.Namespace, store: str, port: int, task_id: str, work: Path, env: dict[str, str],
    started: list[Any],
) -> tuple[ChildJob, str]:
    """Starts the dashboard (appended to ``started``) and waits up to 120 s for it to answer; returns it
    and its URL; raises RuntimeError when it did not answer."""
    dash_cmd = [py, "-m", "pipelines.dashboard", "--store", store, "--port", str(port),
                "--address", ns.address, "--task", task_id, "--log_level", ns.log_level]  # fmt: skip
    dash = ChildJob(dash_cmd, work / "dashboard.log", env=env)
    started.append(dash)
    host = f"[{ns.address}]" if ":" in ns.address else ns.address
    url = f"http://{host}:{port}/"
    if not _wait_http(url, dash, 120):
        raise RuntimeError(f"the dashboard did not answer at {url}:\n{dash.tail()}")
    return dash, url


def _make_feeder(source: str, task: Any, work: Path, topic: str | None, ns: argparse.Namespace) -> Any:
    """The simulated clients (not started): Avro files into ``WORKDIR/incoming`` or Pub/Sub messages."""
    seconds = ns.minutes * 60.0
    if source == "directory":
        return FileFeeder(task, work / "incoming", rate=ns.rate, duration_s=seconds, dataset=ns.dataset,
                          seed=ns.seed)  # fmt: skip
    return PubSubFeeder(task, topic, rate=ns.rate, duration_s=seconds, dataset=ns.dataset,
                        seed=ns.seed)  # fmt: skip


def _watch(
    ns: argparse.Namespace, job: ChildJob, dash: ChildJob, feeder: Any, store: str, task_id: str, t0: float,
    t_feed: float,
) -> None:
    """Checks once a second that the job, the dashboard and the clients are alive (RuntimeError if not),
    prints the store's progress every 15 s, and returns at --timeout or, with --exit_when_done, once
    every window in the store is final and together they hold every report fed."""
    last_print = 0.0
    while True:
        time.sleep(1.0)
        for child in (job, dash):
            if not child.running():
                raise RuntimeError(
                    f"{child.cmd[2]} exited with status {child.proc.returncode}:\n{child.tail()}"
                )
        if feeder.error is not None:
            raise RuntimeError(f"the simulated clients failed: {feeder.error}")
        now = time.time()
        if ns.timeout and now - t0 > ns.timeout:
            print("[dashboard demo] --timeout reached", flush=True)
            return
        feeding = not feeder.reports_done.is_set()
        if now - last_print >= 15:
            st = _store_status(store, task_id)
            print(f"[dashboard demo] {'feeding' if feeding else 'fed'} {int(now - t_feed)} s: "
                  f"{st['windows']} window(s) in the store, {st['final']} final", flush=True)  # fmt: skip
            last_print = now
        if not feeding and ns.exit_when_done:
            # done: every window in the store is final and together they hold every report fed
            st = _store_status(store, task_id)
            if st["windows"] and st["final"] == st["windows"] and st.get("reports") == feeder.sent:
                print("[dashboard demo] every fed window is final in the store", flush=True)
                return


def _print_summary(st: dict[str, Any], store: str, work: Path) -> None:
    """Prints the store's windows, reports and window-end-to-pane latency at the end."""
    lat = st.get("latency_ms") or []
    summary = (
        f"{st['windows']} window(s) in the store ({st['final']} final, {st.get('reports', 0):,} reports)"
        + (f"; window end -> on-time pane in the store: median {statistics.median(lat) / 1000:.2f} s, max "
           f"{max(lat) / 1000:.2f} s" if lat else "")  # fmt: skip
    )
    print(f"[dashboard demo] {summary}; store {store}; logs in {work}/", flush=True)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the demo (see the module docstring); returns the store's status at the end."""
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    _check_args(ns)
    source = _choose_source(ns.source)
    work = _prepare_workdir(ns.workdir)
    store = ns.store or f"sqlite:///{work / 'estimates.db'}"
    task = _demo_task(ns, work)
    port = _free_port(ns.address, ns.port)
    py = sys.executable
    env = dict(os.environ)
    started: list[Any] = []  # stopped in reverse order
    feeder = None
    t0 = time.time()

    def stop_all(*_: object) -> None:
        if feeder is not None:
            feeder.stop()
        for child in reversed(started):
            child.stop()
        started.clear()

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_signal)
    try:
        job_cmd = _job_command(py, ns, work, store)
        topic = None
        if source == "directory":
            (work / "incoming").mkdir()
            job_cmd += ["--input", str(work / "incoming" / "*.avro"), "--watch_interval", "1",
                        "--runner=PrismRunner"]  # fmt: skip
        else:
            topic, subscription = _start_pubsub(work, started, env)
            job_cmd += ["--input_subscription", subscription, "--timestamp_attribute", "event_time"]
        job = _start_job(job_cmd, source, work, env, started)
        dash, url = _start_dashboard(py, ns, store, port, task.task_id, work, env, started)
        feeder = _make_feeder(source, task, work, topic, ns)
        feeder.start()
        t_feed = time.time()
        print(f"[dashboard demo] dashboard (pid {dash.pid}): {url}", flush=True)
        print(f"[dashboard demo] {ns.rate:,.0f} reports/s for {ns.minutes:g} min, {ns.window_size} s "
              "windows, "
              f"early panes every {ns.early_firing} s; the first window closes in about "
              f"{ns.window_size + 5} s. Ctrl-C stops everything.", flush=True)  # fmt: skip
        _watch(ns, job, dash, feeder, store, task.task_id, t0, t_feed)
    except KeyboardInterrupt:
        print("\n[dashboard demo] stopping", flush=True)
    finally:
        signal.signal(signal.SIGTERM, old)
        stop_all()
    st = _store_status(store, task.task_id)
    _print_summary(st, store, work)
    fed = feeder.sent if feeder is not None else 0
    return {**st, "store": store, "source": source, "url": f"http://{ns.address}:{port}/", "fed": fed}

if __name__ == "__main__":
    run()
