"""The collector as a process, killed and starved (integration tier): four clients post Avro batches
through the Python client (:func:`pipelines.clients.post_reports`: idempotency key, retries with backoff)
while the collector is killed with SIGKILL and restarted on the same port and directory; afterwards the
published files hold exactly the acknowledged reports, each once (by OLH seed): a block written but not
answered when the process died is either kept with its key (the retry is answered as a duplicate) or cut
at adoption (the retry writes it). And a collector whose connections are all
held by idle clients refuses more at its cap and serves again by itself once the idle ones time out."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import fastavro
import numpy as np
import pytest
from conftest import venv_env
from test_collect import make_records

from pipelines.clients import CollectorRefused, post_reports
from wire.records import encode_report_container

pytestmark = [pytest.mark.integration]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(task: Path, out: Path, port: int, repo_root: Path, *extra: str, **popen) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipelines.collect", "--task", str(task), "--output_dir", str(out),
           "--port", str(port), *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=repo_root, env=venv_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **popen)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz", headers={"Connection": "close"})  # no place held afterwards
            ok = conn.getresponse().status == 200
            conn.close()
            if ok:
                return proc
        except OSError:
            pass
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the collector did not start"
        time.sleep(0.1)


def _seeds(out: Path) -> list[int]:
    seeds = []
    for p in sorted(out.glob("collect-*.avro")):
        assert Path(f"{p}.done").is_file()
        with open(p, "rb") as fh:
            seeds += [r["seed"] for r in fastavro.reader(fh)]
    return seeds


def test_every_acknowledged_report_survives_kill_9_and_restarts(tmp_path, frequency_task_file, repo_root):
    task = frequency_task_file()
    out, port = tmp_path / "reports", _free_port()
    rng = np.random.default_rng(7)
    per_client, batch = 3000, 25
    records = [make_records(task, per_client, rng) for _ in range(4)]
    acked: list[list[int]] = [[] for _ in range(4)]
    errors: list[str] = []
    url = f"http://127.0.0.1:{port}/v1/reports"

    def client(i: int) -> None:
        for lo in range(0, per_client, batch):
            recs = records[i][lo : lo + batch]
            try:
                got = post_reports(url, encode_report_container(recs), retries=60, backoff_s=0.05,
                                   max_backoff_s=0.5, timeout_s=10)  # fmt: skip
            except CollectorRefused as exc:
                errors.append(str(exc))
                continue
            assert got["accepted"] == len(recs)
            acked[i] += [int(r["seed"]) for r in recs]

    proc = _start(task, out, port, repo_root, "--roll_reports", "400", "--roll_seconds", "0.5")
    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    kills, open_at_kill, logs = 0, 0, []
    try:
        # killed mid-stream at random moments while the clients post (at least three times, at most eight),
        # restarted on the same port and directory
        while kills < 8 and (kills < 3 or any(t.is_alive() for t in threads)):
            time.sleep(rng.uniform(0.3, 0.9))
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            kills += 1
            open_at_kill += bool(list(out.glob(".collect-*.avro.tmp")))
            logs.append(proc.stderr.read() if proc.stderr else "")
            time.sleep(0.2)
            proc = _start(task, out, port, repo_root, "--roll_reports", "400", "--roll_seconds", "0.5")
        for t in threads:
            t.join(300)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert not errors, errors[:3]
    n_acked = sum(len(a) for a in acked)
    stored = _seeds(out)
    all_acked = [s for a in acked for s in a]
    assert len(set(all_acked)) == n_acked == 4 * per_client  # the seeds identify the reports
    missing = set(all_acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged reports are in no published file"
    extra = Counter(stored) - Counter(all_acked)
    assert not extra, f"{sum(extra.values())} reports in the files beyond the acknowledged ones, each once"
    assert len(stored) == n_acked
    assert not list(out.glob(".collect-*.avro.tmp"))  # every unfinished file was adopted...
    assert not list(out.glob(".collect-*.keys"))  # ...and its block ledger retired
    adoptions = [line for log in [*logs, stderr] for line in log.splitlines() if "adopted" in line]
    assert len(adoptions) <= kills  # a kill right after a roll leaves nothing to adopt
    assert open_at_kill >= 1  # at least one kill found an unfinished file to adopt
    print(f"kills={kills} (unfinished file at {open_at_kill}) acknowledged={n_acked} in files={len(stored)}",
          *adoptions, sep="\n")  # fmt: skip


def test_idle_connections_at_the_cap_are_refused_then_freed_by_the_idle_timeout(
    tmp_path, frequency_task_file, repo_root
):
    task = frequency_task_file()
    out, port = tmp_path / "reports", _free_port()
    import resource

    def low_limit() -> None:  # 64 descriptors: the cap by default is then 64 - 64 -> 1; set it explicitly
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

    proc = _start(task, out, port, repo_root, "--max_connections", "20", "--idle_timeout_s", "2",
                  preexec_fn=low_limit)  # fmt: skip
    time.sleep(0.5)  # the start's health check has left its place (else one idle connection is refused)
    idle = []
    try:
        for _ in range(20):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = extra.recv(4096)
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After" in head
        extra.close()
        # more than the descriptor limit of connection attempts: all refused at the cap, none breaks it
        for _ in range(120):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.close()
            except OSError:
                pass
        time.sleep(3.0)  # the idle timeout (2 s) closes the held connections: the collector recovers alone
        rng = np.random.default_rng(3)
        body = encode_report_container(make_records(task, 10, rng))
        assert post_reports(f"http://127.0.0.1:{port}/v1/reports", body, retries=0)["accepted"] == 10
        for s in idle:
            assert s.recv(1) == b""  # closed by the collector
    finally:
        for s in idle:
            s.close()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert len(_seeds(out)) == 10
    assert os.path.exists(out)
