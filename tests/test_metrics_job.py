"""The jobs' Prometheus endpoint (``--metrics_port``, transforms/prometheus.py).

Fast: the collector's families and labels (every reason code of the job at zero from the first scrape;
no label but ``pipeline``, ``task_id``, ``reason``, ``output``, ``state``), counters that never go down
while polled and become the final counts exactly, the endpoint on 127.0.0.1 only.

Integration: a batch job over reports of two tasks, bad groups and a file that is not Avro, with client
ids and a task id that would be telling in a label: the scraped counters equal ``OUT/counts.json``
exactly, and nothing the clients sent (a client id, a value) appears on the endpoint. The streaming runs
(Pub/Sub emulator, watched directories on the DirectRunner and Prism) are in tests/test_endings.py, with
the helpers of this module.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ldp.task import parse_task
from transforms.prometheus import (
    DISTRIBUTIONS,
    JOB_COUNTERS,
    SHUFFLE_COUNTERS,
    JobMetrics,
    MetricsEndpoint,
    job_reasons,
    start_job_metrics,
)
from wire.records import REASONS, reports_to_records, write_report_file

REPO = Path(__file__).resolve().parents[1]
#: The labels a series may carry (none holds a client, an address or a reported value).
ALLOWED_LABELS = {"pipeline", "task_id", "reason", "output", "state"}
#: counts.json key -> metric (the reasons: ldp_job_reports_rejected_by_reason_total{reason}).
COUNT_METRICS = {
    "read": "ldp_job_reports_read_total",
    "accepted": "ldp_job_reports_accepted_total",
    "rejected": "ldp_job_reports_rejected_total",
    "late_dropped": "ldp_job_reports_late_total",
    "lost_records": "ldp_job_lost_records_total",
    "lost_blocks": "ldp_job_lost_blocks_total",
    "lost_bytes": "ldp_job_lost_bytes_total",
}


# ------------------------------------------------------------------------------------------ helpers


def scrape(url: str, timeout: float = 5.0) -> tuple[str, dict[tuple[str, tuple], float]]:
    """The endpoint's text and its samples ``{(name, sorted label items): value}``."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode()
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def by_name(samples: dict, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def one(samples: dict, name: str) -> float:
    values = list(by_name(samples, name).values())
    assert len(values) == 1, (name, values)
    return values[0]


def assert_labels_safe(samples: dict) -> None:
    for (name, labels) in samples:
        assert {k for k, _ in labels} <= ALLOWED_LABELS, (name, labels)


def assert_metrics_equal_counts(samples: dict, counts: dict[str, int]) -> None:
    """Every count of ``counts.json`` equals its counter; every reason counter is the count's (0 when
    the job counted none of that reason), and the reasons add up to ``rejected``."""
    assert_labels_safe(samples)
    for key, metric in COUNT_METRICS.items():
        assert one(samples, metric) == counts.get(key, 0), (metric, counts)
    reasons = {dict(labels)["reason"]: v for labels, v in
               by_name(samples, "ldp_job_reports_rejected_by_reason_total").items()}
    for key, v in counts.items():
        if key.startswith("rejected_"):
            assert reasons[key[len("rejected_"):]] == v, key
    for reason, v in reasons.items():
        assert v == counts.get(f"rejected_{reason}", 0), reason
    assert sum(reasons.values()) == counts["rejected"]
    assert set(job_reasons()) <= set(reasons)  # every code the job can emit, zeros included


class ScrapedJob:
    """A job run in a child process with ``--metrics_port 0``: its endpoint's address (from the line it
    prints) and every scrape taken while it ran, until its counters are final."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115 - the child's output while it runs
        self.proc = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.STDOUT, cwd=REPO,
                                     env=env or {**os.environ})  # fmt: skip
        self.url: str | None = None
        self.scrapes: list[dict] = []

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_url(self, timeout: float = 120) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"^metrics: (http://127\.0\.0\.1:\d+/metrics)$", self.text(), re.M)
            if m:
                self.url = m.group(1)
                return self.url
            time.sleep(0.1)
        raise AssertionError(f"no metrics address printed:\n{self.text()[-3000:]}")

    def scrape_until_final(self, timeout: float = 300, every: float = 0.3) -> dict:
        """Scrapes until ``ldp_job_final_counts`` is 1 (within ``--metrics_linger``); returns that scrape."""
        url = self.url or self.wait_for_url()
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                _text, samples = scrape(url)
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(every)
                continue
            self.scrapes.append(samples)
            if one(samples, "ldp_job_final_counts") == 1:
                return samples
            time.sleep(every)
        raise AssertionError(f"no final counts scraped:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()  # our own child, by PID
                self.proc.wait()
            self._fh.close()


# ------------------------------------------------------------------------------------------ fast


def _metrics(**kw) -> JobMetrics:
    return JobMetrics(pipeline="frequency", task_id="t", reasons=job_reasons(), outputs=["estimates"], **kw)


def _samples(m: JobMetrics) -> dict:
    out = {}
    for fam in m.collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_reason_is_there_at_zero_and_labels_carry_nothing_else():
    s = _samples(_metrics())
    assert_labels_safe(s)
    reasons = by_name(s, "ldp_job_reports_rejected_by_reason_total")
    assert {dict(k)["reason"] for k in reasons} == set(job_reasons()) >= set(REASONS)
    assert set(reasons.values()) == {0.0}
    for spec in JOB_COUNTERS:
        assert one(s, spec.metric + "_total") == 0
    for spec in DISTRIBUTIONS:
        assert one(s, spec.metric + "_count") == 0 and one(s, spec.metric + "_max") == 0
    assert one(s, "ldp_job_final_counts") == 0
    state = {dict(k)["state"]: v for k, v in by_name(s, "ldp_job_state").items()}
    assert state["STARTING"] == 1 and sum(state.values()) == 1


def test_polled_counters_never_go_down_and_the_final_counts_replace_them():
    m = _metrics()
    m.observe({"read": 100, "accepted": 90, "rejected": 10, "rejected_wrong_task": 10, "estimates_rows": 2},
              {"pane_latency_ms": {"count": 2, "sum": 3000, "max": 2000}}, state="RUNNING")
    m.observe({"read": 40, "accepted": 40, "rejected": 0}, state="PipelineState.RUNNING")  # a stale poll
    s = _samples(m)
    assert one(s, "ldp_job_reports_read_total") == 100 and one(s, "ldp_job_reports_rejected_total") == 10
    assert one(s, "ldp_job_pane_latency_seconds_sum") == 3.0
    assert one(s, "ldp_job_pane_latency_seconds_max") == 2
    assert by_name(s, "ldp_job_rows_total") == {(("output", "estimates"), ("pipeline", "frequency"),
                                                 ("task_id", "t")): 2.0}
    final = {"read": 95, "accepted": 95, "rejected": 0}  # the job's own counts, e.g. closed count windows
    m.finish(final, state="DONE")
    m.observe({"read": 1000}, state="RUNNING")  # a poll after the end changes nothing
    s = _samples(m)
    assert_metrics_equal_counts(s, final)
    assert one(s, "ldp_job_final_counts") == 1
    assert {dict(k)["state"] for k, v in by_name(s, "ldp_job_state").items() if v == 1} == {"DONE"}


def test_shuffler_counters_and_an_unknown_reason():
    m = JobMetrics(pipeline="shuffle", task_id="t", reasons=("fine_time",),
                   counters=JOB_COUNTERS[:3] + SHUFFLE_COUNTERS)  # fmt: skip
    m.observe({"shuffle_withheld": 7, "shuffle_withheld_buckets": 2, "rejected_new_reason": 1})
    s = _samples(m)
    assert one(s, "ldp_job_reports_withheld_total") == 7 and one(s, "ldp_job_short_buckets_total") == 2
    by_reason = by_name(s, "ldp_job_reports_rejected_by_reason_total")
    assert {dict(k)["reason"]: v for k, v in by_reason.items()} == {"fine_time": 0, "new_reason": 1}


def test_the_endpoint_listens_on_loopback_only_and_serves_its_own_registry():
    with start_job_metrics(0, pipeline="frequency", task_id="t", outputs=["estimates"]) as ep:
        assert ep.url.startswith("http://127.0.0.1:") and ep.port > 0
        assert ep._httpd.server_address[0] == "127.0.0.1"
        text, s = scrape(ep.url)
        assert "python_gc" not in text and "process_cpu" not in text  # not the process's default registry
        assert one(s, "ldp_job_reports_read_total") == 0
        ep.finish({"read": 3, "accepted": 3, "rejected": 0}, state="DONE")
        assert one(scrape(ep.url)[1], "ldp_job_reports_read_total") == 3
    with pytest.raises(ValueError):
        MetricsEndpoint(_metrics(), 70000)


# ------------------------------------------------------------------------------------------ integration

CLIENT_IDS = [f"client-{k:04d}-secret" for k in range(50)]


def _reports(tmp_path: Path) -> tuple[Path, int]:
    """Two Avro files of task ``m`` (with client ids), some of them refused, and one file of garbage."""
    task = parse_task({"task_id": "m", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})
    task.save(tmp_path / "task.json")
    rng = np.random.default_rng(np.random.SeedSequence(2026_12_07))
    inp = tmp_path / "in"
    inp.mkdir()
    n = 0
    for f in range(2):
        reps = task.make_oracle().encode(rng.integers(0, 8, 500), rng=rng)
        recs = reports_to_records("m", reps, np.full(500, 1_796_000_000_000 + f))
        recs = [{**r, "client_id": CLIENT_IDS[i % 50].encode()} for i, r in enumerate(recs)]
        recs[:7] = [{**r, "group": 5} for r in recs[:7]]
        recs[7:10] = [{**r, "task_id": "other"} for r in recs[7:10]]
        buf = io.BytesIO()
        write_report_file(buf, recs)
        (inp / f"r{f}.avro").write_bytes(buf.getvalue())
        n += 500
    (inp / "garbage.avro").write_bytes(b"not an avro file at all " * 4)
    return inp, n


@pytest.mark.integration
def test_batch_counters_equal_counts_json(tmp_path):
    inp, n = _reports(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"),
           "--input", str(inp / "*.avro"), "--output", str(out), "--metrics_port", "0",
           "--metrics_linger", "20"]  # fmt: skip
    job = ScrapedJob(cmd, tmp_path / "job.log")
    final = job.scrape_until_final()
    text, _ = scrape(job.url)  # type: ignore[arg-type]
    job.proc.terminate()  # the linger is over for us: our own child, by PID
    job.finish()
    counts = json.loads((out / "counts.json").read_text())
    assert counts["state"].endswith("DONE") and counts["windows_final"] is True
    c = counts["counts"]
    assert c["read"] == n + 1 and c["rejected_invalid_group"] == 14 and c["rejected_wrong_task"] == 6
    assert c["rejected_undecodable"] == 1
    assert_metrics_equal_counts(final, c)
    assert one(final, "ldp_job_panes_total") == 1
    assert sum(by_name(final, "ldp_job_rows_total").values()) == 1
    assert one(final, "ldp_job_finalize_seconds_count") == 1
    for secret in ("client-0001-secret", "other", "127.0.0.1:"):  # no client, task of a report, address
        assert secret not in text
