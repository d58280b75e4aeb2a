"""Integration test of the streaming frequency pipeline against the real Pub/Sub emulator.

The emulator (``cloud-pubsub-emulator`` of the Google Cloud SDK, Java) is started on 127.0.0.1 at a
free port and stopped by PID; the test is skipped only when its binary is missing.

The pipeline runs as ``python -m pipelines.frequency --streaming`` in a subprocess on the DirectRunner
with 2-second event-time windows, accumulating panes and 30 s of allowed lateness, and publishes its
estimates to an output topic. The DirectRunner's Pub/Sub watermark is the wall clock of its last pull,
so the test asserts only on windows that are closed: windows that ended well before the last main
report was published (keep-alive reports of another group keep the watermark moving afterwards). For
each such window, the last pane must hold exactly the reports published with event times in the window
and its frequencies must equal the in-memory core's estimate of those reports, bit for bit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time

import fastavro
import numpy as np
import pytest

from ldp.reports import Reports
from ldp.task import parse_task
from pipelines.pubsub_emulator import PubSubEmulator
from wire.records import encode_report_container, reports_to_records

pytestmark = [
    pytest.mark.integration,
    pytest.mark.pubsub,
    pytest.mark.skipif(not PubSubEmulator.available(), reason="Pub/Sub emulator binary not installed"),
]

PROJECT = "ldp-test"
WINDOW_S = 2


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_streaming_pipeline_on_emulator(emulator, tmp_path):
    from google.cloud import pubsub_v1

    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic, out_topic = pub.topic_path(PROJECT, "reports"), pub.topic_path(PROJECT, "estimates")
    subscription = sub.subscription_path(PROJECT, "aggregator")
    out_sub = sub.subscription_path(PROJECT, "dashboard")
    pub.create_topic(name=topic)
    pub.create_topic(name=out_topic)
    sub.create_subscription(name=subscription, topic=topic)
    sub.create_subscription(name=out_sub, topic=out_topic)

    task = parse_task(
        {"task_id": "stream", "mechanism": "olh", "epsilon": 1.0, "domain_size": 32, "n_groups": 2}
    )
    task.save(tmp_path / "task.json")
    oracle = task.make_oracle()
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"), "--streaming",
        "--input_subscription", subscription, "--output", str(out), "--output_topic", out_topic,
        "--window_size", str(WINDOW_S), "--allowed_lateness", "30", "--accumulating",
        "--streaming_duration", "18", "--counts_window", "3", "--dead_letter_window", "3",
    ]  # fmt: skip
    log = open(tmp_path / "pipeline.log", "wb")
    proc = subprocess.Popen(cmd, env=emulator.env(), stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd())
    rng = np.random.default_rng(np.random.SeedSequence(99_2026))
    sent: list[tuple[int, Reports]] = []
    try:
        time.sleep(4)
        pub.publish(topic, b"garbage, not Avro").result()  # early, so that its windows close
        end_main = time.time() + 9
        while time.time() < end_main:  # group 0: the reports the assertions are about
            now = int(time.time() * 1000)
            reports = oracle.encode(rng.integers(0, 32, 40), rng=rng)
            pub.publish(
                topic, encode_report_container(reports_to_records("stream", reports, np.full(40, now), 0))
            )
            sent.append((now, reports))
            time.sleep(0.2)
        last_main = sent[-1][0]
        deadline = time.time() + 90
        while proc.poll() is None and time.time() < deadline:  # group 1: keep the watermark moving
            now = int(time.time() * 1000)
            ka = oracle.encode(np.zeros(5, dtype=np.int64), rng=rng)
            pub.publish(topic, encode_report_container(reports_to_records("stream", ka, np.full(5, now), 1)))
            time.sleep(0.5)
        assert proc.poll() is not None, "streaming pipeline did not stop after --streaming_duration"
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by PID
            proc.wait()
        log.close()
    assert proc.returncode == 0, (tmp_path / "pipeline.log").read_text()[-3000:]

    estimates = []
    for _ in range(20):
        resp = sub.pull(subscription=out_sub, max_messages=1000, timeout=5)
        if not resp.received_messages:
            break
        estimates += [json.loads(m.message.data) for m in resp.received_messages]
        sub.acknowledge(subscription=out_sub, ack_ids=[m.ack_id for m in resp.received_messages])
    last_pane = {}
    for e in estimates:
        if e["group"] != 0:
            continue
        k = e["window_start"]
        if k not in last_pane or e["pane_index"] > last_pane[k]["pane_index"]:
            last_pane[k] = e
    times = np.array([t for t, _ in sent])
    closed = [k for k in last_pane if _ms(last_pane[k]["window_end"]) <= last_main - 2 * WINDOW_S * 1000]
    assert len(closed) >= 2, (sorted(last_pane), last_main)
    for k in closed:
        e = last_pane[k]
        lo, hi = _ms(e["window_start"]), _ms(e["window_end"])
        batch = [r for t, r in sent if lo <= t < hi]
        assert e["n_reports"] == sum(len(r) for r in batch) == int(((times >= lo) & (times < hi)).sum()) * 40
        core = oracle.estimate_reports(Reports.concat(batch))
        assert e["frequencies"] == core.frequencies.tolist()
        assert e["mechanism"] == "olh" and e["task_id"] == "stream"
    # the same estimates were also written as JSON Lines files, one per window and pane
    assert any(name.startswith("estimates-") and name.endswith(".jsonl") for name in os.listdir(out))
    # counts per closed processing window: consistent, and the garbage message counted as undecodable
    lines = []
    for name in os.listdir(out / "counts"):
        if name.endswith(".jsonl"):
            lines += [json.loads(x) for x in (out / "counts" / name).read_text().splitlines()]
    assert lines and all(c["read"] == c["accepted"] + c["rejected"] for c in lines)
    assert sum(c.get("rejected_undecodable", 0) for c in lines) == 1
    assert sum(c["accepted"] for c in lines) >= sum(len(r) for t, r in sent if t < last_main - 6000)
    dead = []
    for name in os.listdir(out / "dead_letter"):
        if name.endswith(".avro"):
            with open(out / "dead_letter" / name, "rb") as fh:
                dead += list(fastavro.reader(fh))
    # the garbage message is identified by its size and hash, its bytes are not kept
    garbage = hashlib.sha256(b"garbage, not Avro").hexdigest()
    assert [(d["reason"], d["raw_bytes"]) for d in dead] == [("undecodable", None)]
    assert f"input of 17 bytes, sha256 {garbage}" in dead[0]["detail"]
