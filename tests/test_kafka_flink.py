"""The Kafka failover gate on the Flink session cluster: a streaming frequency job reads a topic through the
Kafka bridge while a producer writes to it at a steady rate, TaskManager 1 is killed with SIGKILL mid-window
and started again, and every window's count in the store equals what was produced: no loss, no duplicate.

The cluster (``tools/flink/cluster.sh``) and its helpers come from ``tests/test_flink_cluster.py``, the
broker (``tools/kafka/broker.sh``) from ``tests/kafka_helpers.py``. The job is launched in this process
(``frequency.run``), so the bridge is this process's child and writes its spool under pytest's tmp, which
every TaskManager of the local cluster reads. The guarantee chain under test: the bridge commits offsets
only after a message's file is durable, the watch's state (files read) is restored with the checkpoint,
and the store replaces a window's pane rather than adding to it.
"""

from __future__ import annotations

import contextlib
import glob
import io
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest

pytest.importorskip("apache_beam")

from flink_helpers import hang_guard, olh_task  # noqa: E402
from kafka_helpers import Broker, kafka_broker, read_topic, spool_messages  # noqa: E402,F401
from test_flink_cluster import (  # noqa: E402,F401
    FAILOVER_FLAGS,
    HANG_TIMEOUT_S,
    PARALLELISM,
    Cluster,
    _all_tasks_running,
    _completed_checkpoints,
    _kill_taskmanager,
    _restarts,
    _slots_used,
    _unique_counts,
    _wait_for,
    _wait_until_job,
    cluster,
)
from test_pipeline_frequency import assert_windows_equal_core  # noqa: E402

import simulator  # noqa: E402
from pipelines import frequency  # noqa: E402
from store import open_store  # noqa: E402
from wire.records import now_ms  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.flink, pytest.mark.kafka, pytest.mark.failover]

WINDOW_S = 4
PER_MESSAGE = 400  # reports per message, one message a second
RUN_S = 200  # --streaming_duration: the watch of the spool. The kill comes about 30 s in; the recovery and
# 10 more messages must finish before the drain (12.5 s quiet; once, on a loaded machine, not within 120 s)
SEEDS = np.random.SeedSequence(2026_12_07_05)


class _Producer(threading.Thread):
    """Publishes one message of ``PER_MESSAGE`` fresh reports (event times: the second it is sent) every
    ``period_s`` until :attr:`stop` is set or ``deadline`` (monotonic) passes; keeps each message's
    reports as ``stage/reports-NNNNN.avro`` (the truth the windows are compared with)."""

    def __init__(self, url: str, task: Any, stage: Path, deadline: float, period_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.url, self.task, self.stage, self.deadline, self.period_s = url, task, stage, deadline, period_s
        self.stop = threading.Event()
        self.sent = 0
        self.error: str | None = None

    def _message(self, i: int, seed: int) -> bytes:
        tmp = self.stage / f"msg-{i:05d}"
        simulator.simulate_files(self.task, PER_MESSAGE, "zipf", tmp, seed=seed, files=1, start_ms=now_ms(),
                                 duration_s=0.5)  # fmt: skip
        (path,) = glob.glob(str(tmp / "reports-*.avro"))
        body = Path(path).read_bytes()
        Path(path).rename(self.stage / f"reports-{i:05d}.avro")
        return body

    def run(self) -> None:
        from transforms.kafka import KafkaPublisher

        seeds = [int(s.generate_state(1)[0]) for s in SEEDS.spawn(400)]
        try:
            with KafkaPublisher(self.url) as pub:
                nxt = time.monotonic()
                while not self.stop.is_set() and time.monotonic() < self.deadline and self.sent < len(seeds):
                    pub.send(self._message(self.sent, seeds[self.sent]), now_ms())
                    pub.flush()  # acknowledged (acks=all) before it counts as produced
                    self.sent += 1
                    nxt += self.period_s
                    time.sleep(max(0.0, nxt - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = repr(exc)


def _chaos(cl: Cluster, out: Path, producer: _Producer, log: dict[str, Any]) -> None:
    """Once a checkpoint has completed and the first count window is out: SIGKILL TaskManager 1 between
    two messages, wait for the restart from the checkpoint, start TaskManager 1 again, let the producer
    send 10 more messages, then stop it."""
    try:
        log["job"] = jid = _wait_until_job(cl)
        producer.deadline = time.monotonic() + RUN_S - 30  # the watch drains RUN_S s after the job runs
        _wait_for(lambda: _completed_checkpoints(cl, jid) >= 1, 120, "a checkpoint while the watch runs")
        _wait_for(lambda: glob.glob(str(out / "counts" / "counts-*.jsonl")), 240, "the first count window")
        time.sleep(0.5)  # mid-window: the producer sends every second into 4 s windows
        log["checkpoints_before_kill"] = _completed_checkpoints(cl, jid)
        log["tm1_slots_used"] = _slots_used(cl, "tm-1")
        log["sent_before_kill"] = producer.sent
        killed = _kill_taskmanager(cl, jid, 1)
        cl.sh("start-tm", "1")
        _wait_for(lambda: _all_tasks_running(cl, jid), 240, "the restarted job's tasks to run")
        log["recovered_s"] = round(time.time() - killed, 1)
        log["sent_at_recovery"] = at = producer.sent
        _wait_for(lambda: producer.sent >= at + 10 or not producer.is_alive(), 60, "10 messages more")
    except Exception as exc:  # noqa: BLE001 - reported by the test
        log["error"] = repr(exc)
    finally:
        producer.stop.set()


def _store_windows(url: str, task_id: str) -> dict[int, dict[str, Any]]:
    with open_store(url, create=False, shared=False, must_exist=True) as s:
        return {int(w["window_start"]): w for w in s.windows(task_id, limit=10_000)}


def _produced_per_window(bootstrap: str, topic: str, n_messages: int) -> Counter[int]:
    per: Counter[int] = Counter()
    for _, _, value in read_topic(bootstrap, topic, expected=n_messages):
        for r in fastavro.reader(io.BytesIO(value)):
            ms = int(r["event_time"].timestamp() * 1000)
            per[ms // (WINDOW_S * 1000) * WINDOW_S * 1000] += 1
    return per


def test_kafka_failover_taskmanager_killed_mid_window(
    cluster: Cluster,  # noqa: F811
    kafka_broker: Broker,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Every window in the store final, with as many reports as were produced with event times in it
    (counted from the topic itself), its estimate equal to the core's over exactly those reports; the
    spool holds each message once; the job restarted from a checkpoint."""
    task = olh_task("kafka-failover")
    (tmp_path / "task.json").write_text(task.to_json())
    stage, out, spool = tmp_path / "stage", tmp_path / "out", tmp_path / "spool"
    stage.mkdir()
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    topic = "failover"
    producer = _Producer(kafka_broker.url(topic), task, stage, time.monotonic() + HANG_TIMEOUT_S)
    log: dict[str, Any] = {}
    chaos = threading.Thread(target=_chaos, args=(cluster, out, producer, log), daemon=True)
    args = [
        "--task", str(tmp_path / "task.json"), "--streaming",
        "--input_topic", kafka_broker.url(topic, spool=str(spool), group="failover"),
        "--output", str(out), "--store", store_url, "--watch_interval", "1",
        "--streaming_duration", str(RUN_S),
        "--window_size", str(WINDOW_S), "--allowed_lateness", "600", "--accumulating",
        "--counts_window", str(WINDOW_S), "--dead_letter_window", "5",
        *cluster.args, PARALLELISM, *FAILOVER_FLAGS,
    ]  # fmt: skip
    producer.start()
    chaos.start()
    try:
        with hang_guard(HANG_TIMEOUT_S):
            summary = frequency.run(args)
    finally:
        producer.stop.set()
        producer.join(60)
        chaos.join(60)
        with contextlib.suppress(Exception):  # the cluster whole again for any later test
            cluster.sh("start-tm", "1")
    assert producer.error is None, producer.error
    assert "error" not in log, f"chaos: {log.get('error')} ({log})"
    assert log["tm1_slots_used"] > 0, log  # the killed TaskManager ran part of the job
    assert log["sent_before_kill"] < log["sent_at_recovery"] < producer.sent, log  # produced throughout
    assert "DONE" in summary["state"]
    jid = log["job"]
    assert _restarts(cluster, jid) >= 1
    assert cluster.get(f"/jobs/{jid}/checkpoints")["counts"]["restored"] >= 1
    n = producer.sent * PER_MESSAGE
    # the spool: every message of the topic once, byte for byte
    produced_msgs = read_topic(kafka_broker.bootstrap, topic, expected=producer.sent)
    assert len(produced_msgs) == producer.sent
    assert len(spool_messages(spool, topic)) == producer.sent
    # the store: every window final, its count what was produced in it
    produced = _produced_per_window(kafka_broker.bootstrap, topic, producer.sent)
    stored = _store_windows(store_url, task.task_id)
    assert {k: w["n_reports"] for k, w in stored.items()} == dict(produced), log
    assert all(w["is_final"] for w in stored.values())
    # the files: each count window counted once adds up to n; each window's estimate equals the core's
    c = _unique_counts(out)
    assert c["read"] == c["accepted"] == n and c["rejected"] == 0
    assert c.get("late_dropped", 0) == 0
    assert_windows_equal_core(task, stage, out, WINDOW_S * 1000, n)
    print(f"kafka failover: {log}, {producer.sent} messages, {n} reports, {len(stored)} windows")
