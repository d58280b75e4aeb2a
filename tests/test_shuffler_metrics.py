"""The shuffler's Prometheus endpoint (``--metrics_port``) serves the numbers of its ``OUT/counts.json``.

A batch run over two full buckets, a short bucket, reports refused for a bad group or another task, and a
file that is not Avro, with client ids on the records: every counter of the scrape taken once the counts
are final equals its entry in ``counts.json`` (``read = forwarded + already_published + withheld +
dead_lettered``, each reason of the dead letters), and nothing a client sent (a client id, a task id of a
report) appears on the endpoint. The helpers of tests/test_metrics_job.py run and scrape the job;
:func:`assert_shuffler_metrics_equal_counts` is also used by tests/test_shuffler_pubsub.py.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ldp.shuffle.provenance import new_key_file
from ldp.task import parse_task
from tests.test_metrics_job import ScrapedJob, assert_labels_safe, by_name, one, scrape
from transforms.prometheus import job_reasons
from wire.records import reports_to_records, write_report_file

pytestmark = [pytest.mark.integration]

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PRECISION_S = 600
MIN_REPORTS = 200
ANONYMITY = {"shuffled": True, "time_precision_s": PRECISION_S, "min_reports": MIN_REPORTS}
TASK = {"task_id": "shuffle-metrics", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8,
        "anonymity": ANONYMITY}

#: counts.json ``counts`` key (pipelines.shuffle.accounting) -> the endpoint's counter.
SHUFFLE_COUNT_METRICS = {
    "read": "ldp_job_reports_read_total",
    "dead_lettered": "ldp_job_reports_rejected_total",
    "forwarded": "ldp_job_reports_forwarded_total",
    "batches": "ldp_job_batches_total",
    "withheld_buckets": "ldp_job_short_buckets_total",
    "withheld_late": "ldp_job_reports_late_total",
    "already_published": "ldp_job_reports_already_published_total",
    "withheld_short": "ldp_job_reports_withheld_total",
    "withheld_few_senders": "ldp_job_reports_withheld_few_senders_total",
    "withheld_few_senders_buckets": "ldp_job_few_senders_buckets_total",
}


def assert_shuffler_metrics_equal_counts(samples: dict, acct: dict[str, int]) -> None:
    """Every count of the shuffler's ``counts.json`` equals its counter; every reason counter is the
    count's (0 when no report was refused for it) and the reasons add up to ``dead_lettered``."""
    assert_labels_safe(samples)
    for key, metric in SHUFFLE_COUNT_METRICS.items():
        assert one(samples, metric) == acct.get(key, 0), (metric, acct)
    assert acct["withheld"] == acct["withheld_short"] + acct["withheld_few_senders"] + acct["withheld_late"]
    reasons = {dict(labels)["reason"]: v for labels, v in
               by_name(samples, "ldp_job_reports_rejected_by_reason_total").items()}  # fmt: skip
    for key, v in acct.items():
        if key.startswith("dead_lettered_"):
            assert reasons[key[len("dead_lettered_") :]] == v, key
    for reason, v in reasons.items():
        assert v == acct.get(f"dead_lettered_{reason}", 0), reason
    assert sum(reasons.values()) == acct["dead_lettered"]
    assert set(job_reasons()) <= set(reasons)  # every code, zeros included
    assert acct["read"] == acct["forwarded"] + acct["already_published"] + acct["withheld"] + acct[
        "dead_lettered"
    ]


def _inputs(base: Path) -> dict[str, int]:
    """Report files: buckets of 300 and 250 reports, a short bucket of 50, 7 reports with a bad group and
    4 of another task (all with client ids), and a file that is not Avro. Returns what was written."""
    task = parse_task(TASK)
    rng = np.random.default_rng(np.random.SeedSequence(2026_12_08_1))
    inp = base / "in"
    inp.mkdir()
    sizes = {0: 300, 1: 250, 2: 50}
    for k, n in sizes.items():
        reps = task.make_oracle().encode(rng.integers(0, 8, n), rng=rng)
        times = T0 + k * PRECISION_S * 1000 + rng.integers(0, PRECISION_S * 1000, n)
        recs = reports_to_records(TASK["task_id"], reps, times)
        recs = [{**r, "client_id": f"client-{i:04d}-secret".encode()} for i, r in enumerate(recs)]
        if k == 0:
            recs[:7] = [{**r, "group": 5} for r in recs[:7]]
            recs[7:11] = [{**r, "task_id": "other-task-secret"} for r in recs[7:11]]
        buf = io.BytesIO()
        write_report_file(buf, recs)
        (inp / f"bucket{k}.avro").write_bytes(buf.getvalue())
    (inp / "garbage.avro").write_bytes(b"not an avro file at all " * 4)
    return {"reports": sum(sizes.values()), "bad_group": 7, "other_task": 4}


def test_batch_counters_equal_the_shufflers_counts_json(tmp_path):
    wrote = _inputs(tmp_path)
    (tmp_path / "task.json").write_text(json.dumps(TASK))
    key = tmp_path / "shuffle.key"
    new_key_file(str(key))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipelines.shuffle", "--task", str(tmp_path / "task.json"),
           "--input", str(tmp_path / "in" / "*.avro"), "--output", str(out), "--shuffle_key", str(key),
           "--metrics_port", "0", "--metrics_linger", "20"]  # fmt: skip
    job = ScrapedJob(cmd, tmp_path / "job.log")
    final = job.scrape_until_final()
    text, _ = scrape(job.url)  # type: ignore[arg-type]
    job.proc.terminate()  # the linger is over for us: our own child, by PID
    job.finish()
    summary = json.loads((out / "counts.json").read_text())
    assert summary["state"].endswith("DONE") and summary["balanced"] is True, job.text()[-3000:]
    acct = summary["counts"]
    # what the inputs hold, independently of the job: 600 records and one undecodable file
    assert acct["read"] == wrote["reports"] + 1
    assert acct["dead_lettered_invalid_group"] == wrote["bad_group"]
    assert acct["dead_lettered_wrong_task"] == wrote["other_task"]
    assert acct["dead_lettered_undecodable"] == 1
    assert acct["forwarded"] == 300 - 11 + 250 and acct["batches"] == 2
    assert acct["withheld_short"] == 50 and acct["withheld_buckets"] == 1
    assert_shuffler_metrics_equal_counts(final, acct)
    state = {dict(k)["state"]: v for k, v in by_name(final, "ldp_job_state").items()}
    assert state["DONE"] == 1
    for secret in ("client-0001-secret", "other-task-secret", "127.0.0.1:"):
        assert secret not in text
