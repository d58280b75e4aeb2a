"""The browser demo, end to end on 127.0.0.1 (``./run_local.sh browser``).

    python -m pipelines.browser_demo [--workdir out/browser] [--port 8080] [--dashboard_port 5006]
        [--mechanism grr] [--epsilon 2] [--window_size 10] [--early_firing 2] [--allowed_lateness 10]
        [--store sqlite:///out/browser/estimates.db] [--client_dir clients/typescript] [--timeout 0]

Starts, each as a child process group stopped by PID on Ctrl-C (and nothing else):

1. the streaming frequency job (``pipelines.frequency --streaming``) on Prism over ``WORKDIR/incoming/``
   (``--require_done_marker``: a file is read once its collector has closed it), with ``--store``, short
   event-time windows, early panes and accumulating panes;
2. the HTTP collector (``pipelines.collect``) writing into ``WORKDIR/incoming/`` (a file a second) and
   serving the browser demo page of the built TypeScript client (``--demo_page``) from the same origin;
3. the dashboard (``pipelines.dashboard --store ...``).

It prints the page's and the dashboard's URLs. On the page a person picks a value, or sends N simulated
browser clients; each report is encoded in the browser (WebCrypto randomness) and posted to the collector.
A window shows on the dashboard a few seconds after it ends. Ctrl-C (or ``--timeout``) stops the
dashboard, the collector (which closes its open file) and the job, then prints the collector's counts and
the store's windows.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ldp.task import TaskError, parse_task
from pipelines.cli import fail, job_parser, parse_job_args
from pipelines.live import ChildJob
from transforms.runners import find_prism_binary

__all__ = ["BROWSER_LABELS", "TASK_ID", "collector_metrics", "run", "store_summary"]

REPO_ROOT = Path(__file__).resolve().parents[1]
TASK_ID = "browser-demo"
#: The values a person picks from on the page.
BROWSER_LABELS = ("red", "orange", "yellow", "green", "blue", "indigo", "violet", "black")
_MARKER = ".ldp-browser-demo"


def _parser() -> argparse.ArgumentParser:
    ap = job_parser(__doc__.splitlines()[0], beam_options=False)
    ap.add_argument("--workdir", default="out/browser", help="the demo's directory (replaced on every run)")
    ap.add_argument("--port", type=int, default=8080, help="collector and demo page port (0: any free port)")
    ap.add_argument("--dashboard_port", type=int, default=5006, help="dashboard port (0: any free port)")
    ap.add_argument("--mechanism", default="grr", help="frequency oracle of the demo task")
    ap.add_argument("--epsilon", type=float, default=2.0, help="privacy budget per report")
    ap.add_argument("--window_size", type=int, default=10, help="event-time window length (s)")
    ap.add_argument("--early_firing", type=int, default=2, help="early panes every so many seconds")
    ap.add_argument("--allowed_lateness", type=int, default=10, help="seconds late reports still count")
    ap.add_argument("--store", help="store URL (default: sqlite:///WORKDIR/estimates.db)")
    ap.add_argument(
        "--client_dir",
        default=str(REPO_ROOT / "clients" / "typescript"),
        help="the built TypeScript client package (npm ci && npm run build)",
    )
    ap.add_argument("--timeout", type=float, default=0.0, help="stop after so many seconds (0: at Ctrl-C)")
    return ap


def collector_metrics(base_url: str) -> dict[str, Any]:
    """The collector's ``GET /metrics``."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=10) as resp:
        return json.loads(resp.read())


def store_summary(url: str, task_id: str = TASK_ID) -> dict[str, Any]:
    """What the store holds of the task: its windows (latest first: bounds, ``n_reports``, ``is_final``,
    last pane) and the sums of the latest run's counts (``read``, ``accepted``, ``rejected``, ``lost``,
    ``late_dropped``); empty before the job has created the store."""
    from store import open_store

    empty: dict[str, Any] = {"windows": [], "counts": {}}
    try:
        store = open_store(url, create=False, shared=False)
    except Exception:  # noqa: BLE001 - not created yet (the job creates it as it starts)
        return empty
    try:
        windows = store.windows(task_id, limit=10_000)
        counts = store.counts(task_id, limit=10_000)
    except Exception:  # noqa: BLE001 - tables not there yet
        return empty
    finally:
        store.close()
    keys = ("read", "accepted", "rejected", "lost", "late_dropped")
    return {
        "windows": [
            {k: w[k] for k in ("window_start", "window_end", "n_reports", "is_final", "last_pane_timing")}
            for w in windows
        ],
        "counts": {k: sum(int(c[k]) for c in counts) for k in keys} if counts else {},
    }


def _wait_for_line(child: ChildJob, pattern: str, timeout_s: float) -> re.Match[str]:
    """The first line of the child's log matching ``pattern``; a RuntimeError when the child exits or
    ``timeout_s`` passes first."""
    regex = re.compile(pattern)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            text = child.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        match = regex.search(text)
        if match:
            return match
        if not child.running():
            break
        time.sleep(0.2)
    status = child.proc.poll()
    raise RuntimeError(f"{child.cmd[2]} did not print {pattern!r} (status {status}):\n{child.tail()}")


def _status_line(base: str, store: str) -> str:
    try:
        m = collector_metrics(base)
        col = (f"collector: {m['received']} request(s) ({m['accepted']} accepted, {m['rejected']} refused), "
               f"{m['reports_accepted']} report(s) accepted, {m['reports_written']} in {m['files_written']} "
               "closed file(s)")  # fmt: skip
    except OSError as exc:
        col = f"collector: no answer ({exc})"
    windows = store_summary(store)["windows"]
    final = sum(1 for w in windows if w["is_final"])
    reports = sum(int(w["n_reports"] or 0) for w in windows)
    return f"{col}; store: {len(windows)} window(s), {final} final, {reports} report(s)"


def _check_args(ns: argparse.Namespace) -> Path:
    """Refuses a bad flag, a missing Prism binary or an unbuilt client in one line (exit 2); returns the
    client's directory."""
    for flag in ("window_size", "early_firing"):
        if getattr(ns, flag) < 1:
            fail(f"--{flag} must be a whole number of seconds >= 1")
    if ns.allowed_lateness < 0:
        fail("--allowed_lateness must be >= 0")
    for flag in ("port", "dashboard_port"):
        if not 0 <= getattr(ns, flag) <= 65535:
            fail(f"--{flag} must be in [0, 65535]")
    if find_prism_binary() is None:
        fail("the browser demo's job runs live on Prism: build it with bash tools/prism/get_prism.sh "
             "(docs/live.md)")  # fmt: skip
    client = Path(ns.client_dir).resolve()
    if not (client / "dist" / "demo" / "demo.js").is_file():
        fail(f"the TypeScript client is not built: cd {client} && npm ci && npm run build")
    return client


def _prepare_workdir(workdir: str) -> Path:
    """The demo's directory, emptied (only when it is an earlier browser demo's), with ``incoming/``."""
    work = Path(workdir).resolve()
    if work.exists():
        if any(work.iterdir()) and not (work / _MARKER).exists():
            fail(f"--workdir {work} is not empty and not an earlier browser demo's: choose another")
        shutil.rmtree(work)
    (work / "incoming").mkdir(parents=True)
    (work / _MARKER).write_text("the browser demo's directory, replaced on every run\n")
    return work


def _save_task(ns: argparse.Namespace, work: Path) -> Path:
    """The demo's frequency task over :data:`BROWSER_LABELS`, saved as ``WORKDIR/task.json``."""
    try:
        task = parse_task(
            {"task_id": TASK_ID, "mechanism": ns.mechanism, "epsilon": ns.epsilon,
             "domain_size": len(BROWSER_LABELS), "labels": list(BROWSER_LABELS),
             "description": "the browser demo: a colour picked in the page"},
            source="browser demo task", kind="frequency",
        )  # fmt: skip
    except TaskError as exc:
        fail(exc.one_line())
    task_path = work / "task.json"
    task.save(task_path)
    return task_path


def _start_job(ns: argparse.Namespace, work: Path, task_path: Path, store: str) -> ChildJob:
    """The streaming job on Prism over ``WORKDIR/incoming/``; waits up to 120 s for its output marker."""
    window = str(ns.window_size)
    job = ChildJob([
        sys.executable, "-m", "pipelines.frequency", "--task", str(task_path), "--streaming",
        "--input", str(work / "incoming" / "*.avro"), "--require_done_marker", "--watch_interval", "1",
        "--output", str(work / "out"), "--store", store, "--window_size", window,
        "--early_firing", str(ns.early_firing), "--allowed_lateness", str(ns.allowed_lateness),
        "--accumulating", "--counts_window", window, "--dead_letter_window", window,
        "--progress_interval", "30", "--runner=PrismRunner", "--log_level", ns.log_level,
    ], work / "job.log")  # fmt: skip
    print(f"[browser demo] streaming job on Prism (pid {job.pid}), log {work / 'job.log'}", flush=True)
    deadline, output_marker = time.time() + 120, work / "out" / ".ldp-beam-output.json"
    while not output_marker.exists() and job.running() and time.time() < deadline:
        time.sleep(0.2)
    if not job.running():
        raise RuntimeError(f"the streaming job exited with status {job.proc.returncode}:\n{job.tail()}")
    return job


def _start_collector(work: Path, task_path: Path, port: int, client: Path) -> ChildJob:
    """The collector writing ``WORKDIR/incoming/`` (a file a second) and serving the demo page."""
    collector = ChildJob([
        sys.executable, "-m", "pipelines.collect", "--task", str(task_path),
        "--output_dir", str(work / "incoming"), "--host", "127.0.0.1", "--port", str(port),
        "--roll_seconds", "1", "--demo_page", str(client), "--log_level", "INFO",
    ], work / "collector.log")  # fmt: skip
    return collector


def _start_dashboard(ns: argparse.Namespace, work: Path, store: str) -> ChildJob:
    """The dashboard on ``--dashboard_port``, showing the demo task."""
    dash = ChildJob([
        sys.executable, "-m", "pipelines.dashboard", "--store", store, "--port", str(ns.dashboard_port),
        "--address", "127.0.0.1", "--task", TASK_ID, "--refresh", "1", "--log_level", ns.log_level,
    ], work / "dashboard.log")  # fmt: skip
    return dash


def _watch(ns: argparse.Namespace, started: Sequence[ChildJob], base: str, store: str) -> None:
    """Until ``--timeout`` (or Ctrl-C): checks every second that every child runs, prints the collector's
    and the store's figures every 15 s. A child that exited is a RuntimeError."""
    t0 = last_print = time.time()
    while True:
        time.sleep(1.0)
        for child in started:
            if not child.running():
                raise RuntimeError(f"{child.cmd[2]} exited with status {child.proc.returncode}:\n"
                                   f"{child.tail()}")  # fmt: skip
        now = time.time()
        if ns.timeout and now - t0 > ns.timeout:
            print("[browser demo] --timeout reached", flush=True)
            return
        if now - last_print >= 15:
            print(f"[browser demo] {_status_line(base, store)}", flush=True)
            last_print = now


def _start_all(
    ns: argparse.Namespace, work: Path, task_path: Path, store: str, client: Path, started: list[ChildJob]
) -> str:
    """Starts the job, the collector and the dashboard (each appended to ``started`` as it starts, so a
    failure stops those already running) and prints their URLs; returns the page's base URL."""
    started.append(_start_job(ns, work, task_path, store))
    collector = _start_collector(work, task_path, ns.port, client)
    started.append(collector)
    base = _wait_for_line(collector, r"browser demo: (http://\S+)", 60).group(1)
    print(f"[browser demo] collector (pid {collector.pid}) writing {work / 'incoming'}", flush=True)
    dash = _start_dashboard(ns, work, store)
    started.append(dash)
    dash_url = _wait_for_line(dash, r"dashboard: (http://\S+)", 120).group(1)
    print(f"[browser demo] dashboard (pid {dash.pid}): {dash_url}", flush=True)
    print(f"[browser demo] page: {base} (pick a colour, or send N simulated browser clients)",
          flush=True)  # fmt: skip
    print(f"[browser demo] collector metrics: {base}metrics; {ns.window_size} s windows: early panes "
          f"every {ns.early_firing} s, the on-time pane about 3 s after a window ends, final "
          f"{ns.allowed_lateness} s later. Ctrl-C stops everything.", flush=True)  # fmt: skip
    return base


def _final_counts(started: Sequence[ChildJob]) -> dict[str, Any]:
    """The collector's last JSON line (its final counts, printed when it stops); {} when it did not
    start or printed none."""
    collector = next((c for c in started if "pipelines.collect" in c.cmd), None)
    if collector is None:
        return {}
    log = collector.log_path.read_text(errors="replace").splitlines()
    lines = [ln for ln in log if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the demo (see the module docstring); returns the collector's final counts and the store's
    summary."""
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    client = _check_args(ns)
    work = _prepare_workdir(ns.workdir)
    store = ns.store or f"sqlite:///{work / 'estimates.db'}"
    task_path = _save_task(ns, work)
    started: list[ChildJob] = []  # stopped in reverse order

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_signal)
    try:
        base = _start_all(ns, work, task_path, store, client, started)
        _watch(ns, started, base, store)
    except KeyboardInterrupt:
        print("\n[browser demo] stopping", flush=True)
    finally:
        signal.signal(signal.SIGTERM, old)
        for child in reversed(started):
            child.stop()
    final = _final_counts(started)
    summary = store_summary(store)
    print(f"[browser demo] collector's final counts: {json.dumps(final)}", flush=True)
    print(f"[browser demo] store {store}: {json.dumps(summary)}; logs in {work}/", flush=True)
    return {"collector": final, "store": store, **summary}


if __name__ == "__main__":
    run()
