"""``./run_local.sh dashboard`` end to end, headless (integration): ``python -m pipelines.dashboard_demo``
starts the live path (a watched directory on Prism when its binary is built, else the Pub/Sub emulator on the
DirectRunner), the streaming job with ``--store``, the dashboard and the simulated clients, prints the
dashboard's URL, and with ``--exit_when_done`` stops every process it started once the fed windows are
final in the store and hold every report fed.

Checked: the URL is printed and served while the demo runs (HTTP 200 with the Bokeh page), every fed
window is final in the store, the final windows hold exactly the reports fed with event times in them
(the clients feed ``rate`` reports/s, one file or message batch at a time, so the sum over windows is the
total fed), the store's latency figures exist, and no process of the demo is left running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from pipelines.pubsub_emulator import PubSubEmulator
from store import open_store
from tests.conftest import process_running
from transforms.runners import find_prism_binary

pytestmark = pytest.mark.integration


def _source() -> str:
    if find_prism_binary() is not None:
        return "directory"
    if PubSubEmulator.available():
        return "pubsub"
    pytest.skip("no live local path: no Prism binary (tools/prism/get_prism.sh), no Pub/Sub emulator")


def _alive(pid: int) -> bool:
    return process_running(pid)


def test_dashboard_demo_headless_writes_final_windows(tmp_path, repo_root):
    source = _source()
    work = tmp_path / "dash"
    cmd = [
        sys.executable, "-m", "pipelines.dashboard_demo", "--source", source, "--minutes", "0.4",
        "--rate", "500", "--window_size", "4", "--early_firing", "1", "--allowed_lateness", "2",
        "--workdir", str(work), "--port", "0", "--exit_when_done", "--timeout", "180", "--seed", "5",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=repo_root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    url = None
    pids: list[int] = []
    page = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            pids += [int(p) for p in re.findall(r"\(pid (\d+)\)", line)]
            m = re.search(r"dashboard \(pid \d+\): (http://\S+)", line)
            if m and url is None:
                url = m.group(1)
                with urllib.request.urlopen(url, timeout=60) as resp:
                    assert resp.status == 200
                    page = resp.read().decode("utf-8", "replace")
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    out = "".join(lines)
    assert code == 0, out[-4000:]
    assert url is not None and url.startswith("http://127.0.0.1:"), out[-2000:]
    assert "Bokeh" in page or "bokeh" in page
    assert len(pids) >= 2  # the job and the dashboard (and the emulator for Pub/Sub)
    deadline = time.time() + 30
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "a process of the demo is still running"

    with open_store(f"sqlite:///{work / 'estimates.db'}", create=False, shared=False) as store:
        (task,) = store.tasks()
        assert task["task_id"] == "dashboard-demo" and task["task"]["labels"][0] == "apple"
        windows = store.windows("dashboard-demo", limit=1000)
        final = [w for w in windows if w["is_final"]]
        assert all(w["window_end"] - w["window_start"] == 4000 for w in windows)
        latencies = store.pane_latencies("dashboard-demo", last_windows=1000)
    assert "final" in out and "window end -> on-time pane in the store: median" in out, out[-2000:]
    # every window the clients fed is final (the demo exits only then), and together they hold every
    # report fed: 0.4 min at 500 reports/s, minus none
    assert final and len(final) == len(windows), (
        f"{len(final)} of {len(windows)} windows final: the watermark stopped reaching the store's final "
        f"timers (docs/live.md)\n{out[-3000:]}"
    )
    assert sum(int(w["n_reports"]) for w in final) == int(0.4 * 60 * 500)
    assert any(p["pane_timing"] == "EARLY" for p in latencies)
