"""The collector publishing to a Kafka topic (``ldp-beam collect --output_topic kafka://...``) against a real
broker (``tools/kafka/broker.sh``): a request is answered 200 only once the broker acknowledged its message;
while the broker is down (killed with SIGKILL, then restarted on the same data) requests are answered 503
and counted; every acknowledged report is in the topic afterwards, and none is there twice unless its
request was once refused with 503; the job's bridge spools every acknowledged report exactly once (a
repeated request dropped by its ``ldp-request`` header). Also the flag checks (one line, exit 2)."""

from __future__ import annotations

import http.client
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import fastavro
import numpy as np
import pytest
from conftest import venv_env
from kafka_helpers import Broker, bridge_until, read_topic
from test_collect import make_records
from test_collector_kill import _free_port

from transforms.kafka import BridgeStats
from wire.records import encode_report_container

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _collector(task: Path, topic_url: str, port: int, repo_root: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipelines.collect", "--task", str(task), "--output_topic", topic_url,
           "--port", str(port), "--kafka_timeout_s", "3", *extra]  # fmt: skip
    pipe = subprocess.PIPE
    proc = subprocess.Popen(cmd, cwd=repo_root, env=venv_env(), stdout=pipe, stderr=pipe, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz", headers={"Connection": "close"})
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the collector did not start")


def _post(port: int, body: bytes, key: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/reports", body=body,
                     headers={"Content-Type": "application/avro", "Idempotency-Key": key})  # fmt: skip
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _metrics(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


class _Client(threading.Thread):
    """Posts its records in batches of 25, each with its own Idempotency-Key; a 503 is retried (same key
    and body) after 0.2 s until it is answered 200. Keeps the seeds of acknowledged batches and of batches
    that were refused at least once."""

    def __init__(self, port: int, records: list[dict]) -> None:
        super().__init__(daemon=True)
        self.port, self.records = port, records
        self.acked: list[int] = []
        self.refused_once: set[int] = set()
        self.n_503 = 0
        self.errors: list[str] = []

    def run(self) -> None:
        for lo in range(0, len(self.records), 25):
            recs = self.records[lo : lo + 25]
            body, key = encode_report_container(recs), uuid.uuid4().hex
            deadline = time.monotonic() + 180
            while True:
                status, answer = _post(self.port, body, key)
                if status == 200:
                    assert answer["accepted"] == len(recs)
                    self.acked += [int(r["seed"]) for r in recs]
                    break
                if status != 503 or time.monotonic() > deadline:
                    self.errors.append(f"{status} {answer}")
                    return
                self.n_503 += 1
                self.refused_once.update(int(r["seed"]) for r in recs)
                time.sleep(0.2)
            time.sleep(0.01)


def _topic_seeds(bootstrap: str, topic: str, n_reports: int) -> list[int]:
    seeds: list[int] = []
    deadline = time.monotonic() + 60
    while len(seeds) < n_reports and time.monotonic() < deadline:
        seeds = []
        for _, _, value in read_topic(bootstrap, topic, expected=10**9, timeout_s=5):
            seeds += [int(r["seed"]) for r in fastavro.reader(io.BytesIO(value))]
    return seeds


def _bridge_seeds(broker: Broker, spool: Path) -> tuple[list[int], BridgeStats]:
    """The seeds of the reports a job's bridge spools from the topic ``collected``, read to its end."""
    n_messages = len(read_topic(broker.bootstrap, "collected", expected=10**9, timeout_s=5))
    stats = bridge_until(broker.url("collected"), spool, "collected-e2e", n_messages, 60)
    assert stats.read == n_messages, stats.line()
    seeds: list[int] = []
    for path in sorted(spool.glob("collected-*.avro")):
        with open(path, "rb") as fh:
            seeds += [int(r["seed"]) for r in fastavro.reader(fh)]
    return seeds, stats


def test_acknowledged_reports_survive_a_broker_killed_mid_stream(tmp_path, frequency_task_file, repo_root):
    task = frequency_task_file()
    broker = Broker(tmp_path / "broker").start()
    port = _free_port()
    proc = None
    try:
        rng = np.random.default_rng(32)
        clients = [_Client(port, make_records(task, 2000, rng)) for _ in range(2)]
        proc = _collector(task, broker.url("collected"), port, repo_root)
        for c in clients:
            c.start()
        while sum(len(c.acked) for c in clients) < 1000:
            time.sleep(0.05)
        os.kill(broker.pid, signal.SIGKILL)  # the broker of this test, by its PID
        killed_at = sum(len(c.acked) for c in clients)
        t0 = time.monotonic()
        while sum(c.n_503 for c in clients) < 4 and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        broker.restart()
        for c in clients:
            c.join(300)
        metrics = _metrics(port)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
        consumed = _topic_seeds(broker.bootstrap, "collected", 4000)
        spooled, bridged = _bridge_seeds(broker, tmp_path / "spool")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        broker.stop()
    assert proc.returncode == 0, stderr[-2000:]
    assert not [e for c in clients for e in c.errors]
    acked = [s for c in clients for s in c.acked]
    n_503 = sum(c.n_503 for c in clients)
    assert len(acked) == len(set(acked)) == 4000 and killed_at < 4000  # the seeds identify the reports
    # the outage was answered 503 and counted
    assert n_503 >= 4
    assert metrics["rejected_by"].get("unavailable") == n_503 == metrics["write_errors"]
    assert metrics["reports_accepted"] == metrics["reports_written"] == 4000 and metrics["files_written"] == 0
    assert json.loads(stdout.strip().splitlines()[-1])["reports_accepted"] == 4000
    # nothing acknowledged is lost; a report is there twice only if its request was once refused
    # (a message the broker took after the collector gave up waiting)
    assert not set(acked) - set(consumed)
    twice = Counter(consumed) - Counter(set(consumed))
    refused = set().union(*(c.refused_once for c in clients))
    assert set(twice) <= refused and set(consumed) == set(acked)
    # the job's bridge spools each request once: every acknowledged report exactly once, the repeats
    # (same Idempotency-Key, same body) dropped and counted
    assert Counter(spooled) == Counter(set(acked)), (Counter(spooled) - Counter(set(acked))).most_common(3)
    assert bridged.read == bridged.messages + bridged.duplicates and bridged.key_conflicts == 0
    assert bridged.duplicates * 25 == twice.total()  # each extra copy: one dropped request of 25 reports
    print(f"acknowledged {len(acked)}, 503 answers {n_503}, in the topic {len(consumed)}, "
          f"twice {twice.total()}; bridge: {bridged.line()}")  # fmt: skip


def test_a_retry_across_a_collector_restart_is_spooled_once(tmp_path, frequency_task_file, repo_root):
    """A topic-mode collector forgets its idempotency keys when it dies, so a client's retry after a
    SIGKILL puts the same request on the topic again; the job's bridge drops the repeat by its
    ``ldp-request`` header, and keeps a request that reuses the key with another body."""
    task = frequency_task_file()
    broker = Broker(tmp_path / "broker").start()
    rng = np.random.default_rng(33)
    first, other = make_records(task, 40, rng), make_records(task, 30, rng)
    body, key = encode_report_container(first), uuid.uuid4().hex
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(2):  # the same request, then a kill -9, then the retry
            port = _free_port()
            procs.append(_collector(task, broker.url("collected"), port, repo_root))
            assert _post(port, body, key) == (200, {"accepted": 40})
            os.kill(procs[-1].pid, signal.SIGKILL)
            procs[-1].wait(30)
        port = _free_port()
        procs.append(_collector(task, broker.url("collected"), port, repo_root))
        assert _post(port, encode_report_container(other), key)[0] == 200  # the key, another body
        procs[-1].send_signal(signal.SIGTERM)
        procs[-1].communicate(timeout=60)
        assert len(read_topic(broker.bootstrap, "collected", expected=3, timeout_s=30)) == 3
        spooled, bridged = _bridge_seeds(broker, tmp_path / "spool")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        broker.stop()
    assert Counter(spooled) == Counter(int(r["seed"]) for r in first + other)
    assert (bridged.read, bridged.messages, bridged.duplicates, bridged.key_conflicts) == (3, 2, 1, 1)


def test_the_output_flags_are_checked(tmp_path, frequency_task_file, repo_root):
    task = frequency_task_file()

    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "pipelines.collect", "--task", str(task), *args]
        return subprocess.run(
            argv, cwd=repo_root, env=venv_env(), capture_output=True, text=True, timeout=120
        )

    shuffled = frequency_task_file("shuffled.json", anonymity={"shuffled": True, "min_reports": 2})
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.collect", "--task", str(shuffled), "--output_topic", "kafka://127.0.0.1:1/t"],
        cwd=repo_root, env=venv_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "cannot carry a shuffled task" in done.stderr, done.stderr
    for args, message in [
        (("--output_topic", "kafka://127.0.0.1:1/t"), "no Kafka broker answers at 127.0.0.1:1"),
        ((), "exactly one of --output_dir and --output_topic"),
        (("--output_dir", str(tmp_path / "d"), "--output_topic", "kafka://127.0.0.1:1/t"), "exactly one of"),
        (("--output_topic", "http://x/t"), "--output_topic must be kafka://"),
        (
            ("--output_topic", "kafka://127.0.0.1:1/t", "--kafka_timeout_s", "0"),
            "--kafka_timeout_s must be > 0",
        ),
    ]:
        done = run(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
