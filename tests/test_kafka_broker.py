"""The Kafka source against a real broker (``tools/kafka/broker.sh``, KRaft, 127.0.0.1): the broker starts
and stops by PID, ``ldp-beam simulate --output_topic kafka://...`` publishes every report, a bridge killed
with SIGKILL mid-stream and started again loses and repeats no message, a request the collector sent twice
(a retry after a timeout) is spooled once, and the streaming frequency job (DirectRunner, and Prism when
built) counts in every window exactly the reports produced for it."""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import io
import json
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
import pytest
from kafka_helpers import REPO, Broker, bridge_until, kafka_broker, read_topic, spool_messages  # noqa: F401

from tests.conftest import process_running, venv_env

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TASK = {"task_id": "kafka-test", "mechanism": "olh", "epsilon": 1.0, "domain_size": 32, "schema_version": 2}
WINDOW_S = 5
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _task_file(tmp_path: Path) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(TASK))
    return path


def _reports(value: bytes) -> list[dict]:
    return list(fastavro.reader(io.BytesIO(value)))


def _alive(pid: int) -> bool:
    return process_running(pid)


def test_the_broker_starts_and_stops_by_pid(tmp_path):
    broker = Broker(tmp_path / "run").start()
    try:
        pid = broker.pid
        assert _alive(pid)
        host, port = broker.bootstrap.rsplit(":", 1)
        assert host == "127.0.0.1"
        socket.create_connection((host, int(port)), timeout=5).close()
    finally:
        broker.stop()
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)
    assert not (tmp_path / "run" / "broker.pid").exists()


def test_simulate_publishes_every_report_to_the_topic(kafka_broker, tmp_path):  # noqa: F811
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "simulate", "--task", str(_task_file(tmp_path)), "--users",
         "1234", "--output_topic", kafka_broker.url("sim"), "--rate", "20000", "--message_size", "100",
         "--inject_bad", "1", "--seed", "3"],
        cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "published 1,234 frequency reports" in done.stderr
    messages = read_topic(kafka_broker.bootstrap, "sim", expected=10**6, timeout_s=10)
    assert messages[-1][2] == b"not avro"  # --inject_bad's undecodable message comes last
    # 13 messages of up to 100 reports, then one message per kind of bad record and the garbage one
    reports = [r for _, _, v in messages[:13] for r in _reports(v)]
    assert len(reports) == 1234 and {r["task_id"] for r in reports} == {"kafka-test"}
    assert len(messages) > 14  # the bad records' messages (one per kind of bad file) sit in between


def _publish_steadily(url: str, n_messages: int, per_s: float, stop: threading.Event) -> None:
    from transforms.kafka import KafkaPublisher

    with KafkaPublisher(url) as pub:
        for i in range(n_messages):
            if stop.is_set():
                return
            pub.send(f"message {i}".encode(), int(time.time() * 1000))
            if i % 10 == 9:
                pub.flush()
            time.sleep(1 / per_s)


def _start_bridge(url: str, spool: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "transforms.kafka", "--input_topic", url, "--spool", str(spool),
             "--group", "kill-test", "--poll_ms", "100", "--max_batch", "7"],
            cwd=REPO, env=venv_env(), stdout=fh, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _wait_files(spool: Path, at_least: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    n = 0
    while time.monotonic() < deadline:
        n = len(glob.glob(str(spool / "kill-*.avro.done")))
        if n >= at_least:
            return n
        time.sleep(0.1)
    return n


def test_a_bridge_killed_mid_stream_and_restarted_loses_and_repeats_nothing(kafka_broker, tmp_path):  # noqa: F811
    n = 300
    url, spool = kafka_broker.url("kill"), tmp_path / "spool"
    stop = threading.Event()
    producer = threading.Thread(target=_publish_steadily, args=(url, n, 30.0, stop), daemon=True)
    producer.start()
    bridge = _start_bridge(url, spool, tmp_path / "bridge.log")
    try:
        for at in (40, 150):  # two kills while the producer is still writing
            assert _wait_files(spool, at, 120) >= at, (tmp_path / "bridge.log").read_text()[-2000:]
            assert producer.is_alive()  # mid-stream
            os.kill(bridge.pid, signal.SIGKILL)  # our own child, by its PID
            bridge.wait(30)
            bridge = _start_bridge(url, spool, tmp_path / "bridge.log")
        producer.join(120)
        assert not producer.is_alive()
        assert _wait_files(spool, n, 120) == n
        bridge.send_signal(signal.SIGTERM)
        assert bridge.wait(60) == 0
    finally:
        stop.set()
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()
    produced = read_topic(kafka_broker.bootstrap, "kill", expected=n)
    assert len(produced) == n
    in_spool = spool_messages(spool, "kill")
    assert in_spool == {(p, o): hashlib.sha256(v).hexdigest() for p, o, v in produced}
    # the group's committed offset is past the last message: a later bridge starts after it
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=[kafka_broker.bootstrap], group_id="kill-test")
    try:
        assert consumer.committed(TopicPartition("kill", 0)) == n
    finally:
        consumer.close()


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def _run_streaming_job(broker: Broker, tmp_path: Path, topic: str, runner: list[str]) -> Path:
    out = tmp_path / "out"
    log = tmp_path / "job.log"
    url = broker.url(topic, spool=str(tmp_path / "spool"))
    argv = [sys.executable, "-m", "pipelines.frequency", "--task", str(_task_file(tmp_path)), "--streaming",
            "--input_topic", url, "--output", str(out), "--window_size", str(WINDOW_S), "--allowed_lateness",
            "60", "--streaming_duration", "45", "--watch_interval", "1", *runner]  # fmt: skip
    with open(log, "wb") as fh:
        job = subprocess.Popen(argv, cwd=REPO, env=venv_env(), stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while b"running on" not in log.read_bytes() and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.5)
        sim = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "simulate", "--task", str(_task_file(tmp_path)),
             "--users", "3000", "--output_topic", broker.url(topic), "--rate", "400", "--message_size", "50"],
            cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert sim.returncode == 0, sim.stderr[-2000:]
        from transforms.kafka import KafkaPublisher

        with KafkaPublisher(broker.url(topic)) as pub:  # one undecodable message: a dead letter
            pub.send(b"not avro", int(time.time() * 1000))
        assert job.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            job.kill()  # our own child, by PID
            job.wait()
    return out


@pytest.mark.parametrize(
    "runner",
    [
        pytest.param([], id="direct"),
        pytest.param(["--runner=PrismRunner"], id="prism", marks=[pytest.mark.prism]),
    ],
)
def test_the_streaming_frequency_job_counts_every_window_as_produced(kafka_broker, tmp_path, runner):  # noqa: F811
    topic = f"job-{len(runner)}"
    out = _run_streaming_job(kafka_broker, tmp_path, topic, runner)
    produced: Counter[int] = Counter()
    for _, _, value in read_topic(kafka_broker.bootstrap, topic, expected=10**6, timeout_s=10):
        if value == b"not avro":
            continue
        for r in _reports(value):
            ms = (r["event_time"] - EPOCH) // dt.timedelta(milliseconds=1)
            produced[ms // (WINDOW_S * 1000) * WINDOW_S * 1000] += 1
    last: dict[int, dict] = {}
    for path in glob.glob(str(out / "estimates-*.jsonl")):
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            start = _ms(row["window_start"])
            if start not in last or row["pane_index"] > last[start]["pane_index"]:
                last[start] = row
    counted = {start: row["n_reports"] for start, row in last.items()}
    assert sum(produced.values()) >= 3000
    assert counted == {k: v for k, v in produced.items() if v}
    summary = json.loads((out / "counts.json").read_text())
    assert summary["windows_final"] is True
    assert summary["counts"]["rejected_undecodable"] == 1  # the garbage message: a dead letter
    bridged = summary["kafka_bridge"]  # the topic -> spool hop: every message read, spooled once
    n_messages = len(read_topic(kafka_broker.bootstrap, topic, expected=10**6, timeout_s=10))
    assert bridged["read"] == bridged["messages"] == n_messages and bridged["duplicates"] == 0
    dead = glob.glob(str(out / "dead_letter" / "*.avro"))
    assert dead


def test_a_request_retried_after_a_timeout_is_spooled_once(kafka_broker, tmp_path):  # noqa: F811
    from pipelines.collect_topic import TopicWriter
    from pipelines.collector import IdempotencyKeys

    url, spool = kafka_broker.url("retry"), tmp_path / "spool"
    writer = TopicWriter(url, timeout_s=30)
    key, other = IdempotencyKeys.digest("request-0001"), IdempotencyKeys.digest("request-0002")
    body = IdempotencyKeys.digest(b"the request body")
    try:
        # the ambiguous produce: the broker took the first copy, the client retried with the same key
        # and body; another request between them, and the retry the partition's last message
        for k, data in ((key, b"first"), (other, b"second"), (key, b"first")):
            writer.commit_sync(writer.append(data=data, count=1, key=k, body=body))
        stats = bridge_until(url, spool, "retry", 3, 45)
        assert (stats.read, stats.messages, stats.duplicates) == (3, 2, 1)
        assert sorted(spool_messages(spool, "retry")) == [(0, 0), (0, 1)]
        assert "0 0 " in (spool / ".requests-retry").read_text()
        # the same group again: resumes past the dropped repeat (its offset was committed)
        assert bridge_until(url, spool, "retry", 1, 3).read == 0
        # a group without a committed offset resumes at the spool's end: it reads the repeat once more and
        # drops it again from the journal, then spools the next message (an unkeyed one: kept)
        writer.commit_sync(writer.append(data=b"first", count=1, key=None, body=body))
        again = bridge_until(url, spool, "retry-2", 2, 45)
        assert (again.read, again.messages, again.duplicates) == (2, 1, 1)
        assert sorted(spool_messages(spool, "retry")) == [(0, 0), (0, 1), (0, 3)]
    finally:
        writer.close()
