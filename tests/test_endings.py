"""Bounded streaming runs end the way they say: ``--streaming_duration`` stops the reading, every window
closes, the job ends ``DONE`` with its real counts in ``OUT/counts.json``, ``show`` calls its windows
final, and the job's Prometheus counters (``--metrics_port``) equal ``counts.json``.

* Pub/Sub (the emulator, the DirectRunner): it used to end ``CANCELLED`` with ``read=0``, no
  ``counts.json`` and every window "not final". Reports, garbage and another task's reports are published
  while it runs; every one of them published before the end is counted, the Beam counters agree with
  the count windows (they used to hold the first bundle only), the run ends within seconds of its
  duration (a pull used to hold it 30 s more), and the endpoint showed the counts while the job ran.
* A watched directory on the DirectRunner and on Prism, with allowed lateness (no pane is flagged last:
  ``show`` knows the windows are final from ``counts.json``): the same ending and the same equality.

The one-line refusals before a job starts (no emulator and no credentials, no window, a runner typo)
are in tests/test_hostile_flags.py.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ldp.task import parse_task
from pipelines.live import FileFeeder
from pipelines.pubsub_emulator import PubSubEmulator
from tests.conftest import process_running
from tests.test_metrics_job import ScrapedJob, assert_metrics_equal_counts, one, scrape
from wire.records import encode_report_container, reports_to_records

pytestmark = [pytest.mark.integration]

PROJECT = "ldp-endings"
WINDOW_S = 2


def _beam_counters(log: str) -> dict[str, int]:
    m = re.search(r"Beam counters(?: \([^)]*\))?: reports read=(\d+) accepted=(\d+) rejected=(\d+)", log)
    assert m, log[-3000:]
    return {"read": int(m.group(1)), "accepted": int(m.group(2)), "rejected": int(m.group(3))}


def _assert_ended_done(out: Path, log: str, *, duration: float) -> dict:
    m = re.search(r"job ended: (\S+) after ([\d.]+) s", log)
    assert m and m.group(1).endswith("DONE"), log[-3000:]
    # the reading stops at the duration and the windows close at once (a Pub/Sub pull used to wait 30 s)
    assert float(m.group(2)) < duration + 15, m.group(0)
    summary = json.loads((out / "counts.json").read_text())
    assert summary["state"].endswith("DONE") and summary["streaming"] is True
    assert summary["windows_final"] is True
    c = summary["counts"]
    assert c["read"] == c["accepted"] + c["rejected"] > 0
    assert "windows: every window closed; the last pane written of each is final" in log
    return summary


def _assert_show_calls_windows_final(out: Path) -> None:
    import subprocess

    shown = subprocess.run([sys.executable, "-m", "pipelines.show", str(out), "--window", "all", "--json"],
                           capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    windows = json.loads(shown.stdout)["windows"]
    assert windows and all(t["final"] is True for w in windows for t in w["tables"]), shown.stdout[:2000]


@pytest.mark.pubsub
@pytest.mark.skipif(not PubSubEmulator.available(), reason="Pub/Sub emulator binary not installed")
def test_a_bounded_pubsub_run_ends_done_with_its_counts(emulator, tmp_path):
    from google.cloud import pubsub_v1

    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic, subscription = pub.topic_path(PROJECT, "reports"), sub.subscription_path(PROJECT, "agg")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    task = parse_task({"task_id": "ending", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})
    task.save(tmp_path / "task.json")
    other = parse_task({"task_id": "another", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})
    out, duration = tmp_path / "out", 30.0
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"), "--streaming",
        "--input_subscription", subscription, "--output", str(out), "--window_size", str(WINDOW_S),
        "--streaming_duration", str(duration), "--counts_window", "60", "--metrics_port", "0",
        "--metrics_linger", "30",
    ]  # fmt: skip
    t0 = time.time()
    job = ScrapedJob(cmd, tmp_path / "job.log", env=emulator.env())
    url = job.wait_for_url()
    rng = np.random.default_rng(np.random.SeedSequence(2026_12_07_2))
    sent = garbage = foreign = 0
    polled_live = False
    # publish from now until well before the job's end (its duration starts later than t0)
    while time.time() < t0 + duration - 6:
        now = int(time.time() * 1000)
        reps = task.make_oracle().encode(rng.integers(0, 8, 40), rng=rng)
        pub.publish(topic, encode_report_container(reports_to_records("ending", reps, np.full(40, now))))
        sent += 40
        if sent % 400 == 0:
            pub.publish(topic, b"garbage, not Avro")
            garbage += 1
            reps = other.make_oracle().encode(rng.integers(0, 8, 5), rng=rng)
            pub.publish(topic, encode_report_container(reports_to_records("another", reps, np.full(5, now))))
            foreign += 5
        _text, s = scrape(url)
        polled_live |= one(s, "ldp_job_final_counts") == 0 and one(s, "ldp_job_reports_read_total") > 0
        time.sleep(0.1)
    final = job.scrape_until_final()
    job.proc.terminate()  # the linger is over for us: our own child, by PID
    job.finish()
    log = job.text()
    summary = _assert_ended_done(out, log, duration=duration)
    c = summary["counts"]
    # every message published before the end was read: reports, garbage (1 each), the other task's
    assert c["read"] == sent + garbage + foreign, (c, sent, garbage, foreign)
    assert c["rejected_undecodable"] == garbage and c["rejected_wrong_task"] == foreign
    assert c["accepted"] == sent
    assert _beam_counters(log) == {k: c[k] for k in ("read", "accepted", "rejected")}
    assert_metrics_equal_counts(final, c)
    assert polled_live, "the endpoint never showed the running job's counts"
    assert one(final, "ldp_job_pane_latency_seconds_count") >= 1
    rows = [json.loads(line) for f in out.glob("estimates-*.jsonl") for line in f.read_text().splitlines()]
    assert rows and all(r["is_last_pane"] for r in rows)
    # at most the accepted reports not dropped as late: the DirectRunner may still drop a batch for a
    # window no earlier batch opened, uncounted (transforms/lateness.py, "Limits")
    assert 0 < sum(r["n_reports"] for r in rows) <= sent - c.get("late_dropped", 0)
    _assert_show_calls_windows_final(out)


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie waiting for its reaper counts as gone)."""
    return {pid for pid in pids if process_running(pid)}


def _watch_run(tmp_path: Path, runner: list[str]) -> None:
    task = parse_task({"task_id": "ending-dir", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16})
    task.save(tmp_path / "task.json")
    incoming, out, duration = tmp_path / "in", tmp_path / "out", 24.0
    incoming.mkdir()
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"), "--streaming",
        "--input", str(incoming / "*.avro"), "--watch_interval", "1", "--output", str(out),
        "--window_size", "4", "--allowed_lateness", "30", "--streaming_duration", str(duration),
        "--counts_window", "4", "--metrics_port", "0", "--metrics_linger", "30", *runner,
    ]  # fmt: skip
    job = ScrapedJob(cmd, tmp_path / "job.log")
    job.wait_for_url()
    (incoming / "garbage.avro").write_bytes(b"\x00not avro" * 10)
    feeder = FileFeeder(task, incoming, rate=200, duration_s=8, file_interval_s=1.0, seed=7).start()
    children: set[int] = set()
    try:
        assert feeder.finished.wait(120) and feeder.error is None, feeder.error
        final = job.scrape_until_final()
        children = _descendants(job.proc.pid)  # Prism: its job server (lingering: metrics linger)
    finally:
        feeder.stop()
        job.proc.terminate()  # our own child, by PID
        status = job.finish()
    log = job.text()
    # SIGTERM unwinds the job: its exit handlers stop what it started (no Prism server left behind)
    assert status == 143 and "SIGTERM: stopping the job" in log, (status, log[-2000:])
    assert children or "--runner=PrismRunner" not in runner  # Prism's job server is the job's child
    deadline = time.monotonic() + 15
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(children), f"left running after the job's SIGTERM: {sorted(_alive(children))}"
    summary = _assert_ended_done(out, log, duration=duration)
    c = summary["counts"]
    assert c["read"] == feeder.sent + 1 and c["accepted"] == feeder.sent and c["rejected_undecodable"] == 1
    assert_metrics_equal_counts(final, c)
    # with allowed lateness, a window's on-time pane is not flagged last and no later pane comes: the
    # rows cannot say they are final, the DONE ending (counts.json windows_final) does, and show reads it
    _assert_show_calls_windows_final(out)


def test_a_watched_directory_on_the_direct_runner_ends_done(tmp_path):
    _watch_run(tmp_path, [])


@pytest.mark.prism
def test_a_watched_directory_on_prism_ends_done(tmp_path):
    _watch_run(tmp_path, ["--runner=PrismRunner"])
