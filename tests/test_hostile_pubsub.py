"""Pub/Sub poison messages on the emulator: a message larger than 4 MiB, garbage,
and messages whose ``--timestamp_attribute`` is missing or does not parse are each dead-lettered with
a reason and acked; nothing stalls the pull: every good report sent is accepted and the job ends by
itself (exit status 0). Skipped without the emulator binary (``gcloud beta emulators pubsub``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import fastavro
import numpy as np
import pytest

from ldp.task import parse_task
from pipelines.pubsub_emulator import PubSubEmulator
from wire.records import encode_report_container, reports_to_records

pytestmark = [
    pytest.mark.integration,
    pytest.mark.pubsub,
    pytest.mark.skipif(not PubSubEmulator.available(), reason="Pub/Sub emulator binary not installed"),
]

PROJECT = "ldp-hostile"


def test_poison_messages_are_dead_lettered_and_nothing_stalls(emulator, tmp_path):
    from google.cloud import pubsub_v1

    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = pub.topic_path(PROJECT, "reports")
    subscription = sub.subscription_path(PROJECT, "aggregator")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    task = parse_task({"task_id": "poison", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})
    task.save(tmp_path / "task.json")
    oracle = task.make_oracle()
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"), "--streaming",
        "--input_subscription", subscription, "--output", str(out), "--timestamp_attribute", "ts",
        "--window_size", "2", "--streaming_duration", "14", "--counts_window", "2",
        "--dead_letter_window", "2",
    ]  # fmt: skip
    log = open(tmp_path / "pipeline.log", "wb")
    proc = subprocess.Popen(cmd, env=emulator.env(), stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd())
    rng = np.random.default_rng(np.random.SeedSequence(20261205))
    big = os.urandom(5 << 20)  # over gRPC's default 4 MiB, under Pub/Sub's 10 MB
    sent = 0
    try:
        time.sleep(4)
        now = str(int(time.time() * 1000))
        pub.publish(topic, big, ts=now).result()
        pub.publish(topic, b"garbage, not Avro", ts=now).result()
        reps = oracle.encode(rng.integers(0, 8, 10), rng=rng)
        good = encode_report_container(reports_to_records("poison", reps, np.full(10, int(now))))
        pub.publish(topic, good, ts="yesterday at noon").result()
        pub.publish(topic, good).result()  # no ts attribute
        end = time.time() + 6
        while time.time() < end:
            now_ms = int(time.time() * 1000)
            reps = oracle.encode(rng.integers(0, 8, 20), rng=rng)
            data = encode_report_container(reports_to_records("poison", reps, np.full(20, now_ms)))
            pub.publish(topic, data, ts=str(now_ms)).result()
            sent += 20
            time.sleep(0.2)
        deadline = time.time() + 90
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        assert proc.poll() is not None, "the job did not stop after --streaming_duration"
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by PID
            proc.wait()
        log.close()
    assert proc.returncode == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    dead = []
    for name in os.listdir(out / "dead_letter"):
        if name.endswith(".avro"):
            with open(out / "dead_letter" / name, "rb") as fh:
                dead += list(fastavro.reader(fh))
    reasons = sorted(d["reason"] for d in dead)
    assert reasons == ["invalid_timestamp_attribute"] * 2 + ["undecodable"] * 2, reasons
    big_id = f"input of {len(big)} bytes, sha256 {hashlib.sha256(big).hexdigest()}"
    assert any(big_id in d["detail"] for d in dead) and all(d["raw_bytes"] is None for d in dead)
    lines = []
    for name in os.listdir(out / "counts"):
        if name.endswith(".jsonl"):
            lines += [json.loads(x) for x in (out / "counts" / name).read_text().splitlines()]
    assert all(c["read"] == c["accepted"] + c["rejected"] for c in lines)
    assert sum(c.get("rejected_invalid_timestamp_attribute", 0) for c in lines) == 2
    # every good report published before the last closed counts window was accepted (none stalled)
    assert sum(c["accepted"] for c in lines) >= sent // 2 > 0
