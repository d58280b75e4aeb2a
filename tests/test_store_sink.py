"""The store sink (transforms.store.WriteToStore) in pipelines: a TestStream with early, on-time and late
panes (the final flag set once the watermark passes the window's end plus the allowed lateness, after the
last pane), the batch frequency and range jobs with ``--store`` (final store rows equal the estimate files
exactly, counts equal the summary), and the up-front flag checks (one line, exit status 2)."""

from __future__ import annotations

import glob
import json
import os
import socket

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue
from test_pipeline_frequency import _fails  # one-line CLI errors, exit status 2

import simulator
from ldp.aggregate import WindowInfo, from_iso
from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.reports import Reports
from ldp.task import WindowConfig, parse_task
from pipelines import frequency
from store import open_store
from transforms.aggregate import Aggregate
from transforms.counts import WindowedCounts
from transforms.io import DecodeReportMessages
from transforms.store import WriteToStore
from wire.records import encode_report_container, reports_to_records

SEEDS = np.random.SeedSequence(2026_12_01_10)
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _rng(i: int) -> np.random.Generator:
    return np.random.default_rng(SEEDS.spawn(i + 1)[i])


def _message(task, oracle, rng, n, event_s):
    reports = oracle.encode(rng.integers(0, oracle.d, n), rng=rng)
    recs = reports_to_records(task.task_id, reports, np.full(n, int(event_s * 1000)), 0)
    return encode_report_container(recs), reports


def _expected(task, oracle, batches):
    agg = FrequencyAggregator(task)
    acc = oracle.add(oracle.create_accumulator(), Reports.concat(batches))
    (row,) = agg.finalize({0: acc}, WindowInfo())
    return row


def _streaming():
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    return opts


def test_teststream_early_on_time_and_late_panes_then_final(tmp_path):
    """Window [0,10) (lateness 20 s, accumulating): an early pane (50 reports), the on-time pane, a late
    pane (+7); the watermark then passes 30 s and the window is final, after its last pane was written.
    Window [10,20): early and on-time panes, final when the input ends."""
    task = parse_task({"task_id": "t-sink", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16})
    oracle = task.make_oracle()
    rng = _rng(0)
    a, ra = _message(task, oracle, rng, 50, 1)
    b, rb = _message(task, oracle, rng, 30, 12)
    late, rl = _message(task, oracle, rng, 7, 5)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(a, 1), TimestampedValue(b, 12)])
        .advance_processing_time(6)
        .advance_watermark_to(15)
        .add_elements([TimestampedValue(late, 5)])
        .advance_watermark_to(40)
        .advance_watermark_to_infinity()
    )
    w = WindowConfig(size_s=10, allowed_lateness_s=20, early_firing_s=5, accumulating=True)
    url = f"sqlite:///{tmp_path}/e.db"
    agg = FrequencyAggregator(task)
    with TestPipeline(options=_streaming()) as p:
        dec = p | stream | DecodeReportMessages("stream", agg)
        out = dec.records | Aggregate(agg, w)
        counts = out["counts"] | WindowedCounts(10)
        {"panes": out["panes"], "counts": counts} | WriteToStore(url, task, w, streaming=True)
    s = open_store(url)
    panes = s.panes("t-sink", 0, 10_000)
    assert [(p["pane_index"], p["pane_timing"], p["n_reports"]) for p in panes] == [
        (0, "EARLY", 50),
        (1, "ON_TIME", 50),
        (2, "LATE", 57),
    ]
    assert [p["is_final"] for p in panes] == [0, 0, 1]  # the last pane of the final window
    (w1,) = [x for x in s.windows("t-sink") if x["window_start"] == 0]
    assert w1["is_final"] == 1 and w1["last_pane_index"] == 2 and w1["n_reports"] == 57
    assert w1["final_ms"] >= max(p["written_ms"] for p in panes)  # set after the last pane, not before
    cur = s.current("t-sink", 0, 10_000)
    want = _expected(task, oracle, [ra, rl])
    assert [r["estimate"] for r in cur] == want.frequencies and [r["std"] for r in cur] == want.std
    assert {(r["pane_index"], r["pane_timing"], r["is_final"], r["n_reports"]) for r in cur} == {
        (2, "LATE", 1, 57)
    }
    hist = s.history("t-sink", 0, 10_000)
    assert [r["estimate"] for r in hist if r["pane_index"] == 0] == _expected(task, oracle, [ra]).frequencies
    panes2 = s.panes("t-sink", 10_000, 20_000)
    assert [(p["pane_timing"], p["n_reports"]) for p in panes2] == [("EARLY", 30), ("ON_TIME", 30)]
    assert s.windows("t-sink")[0]["is_final"] == 1
    assert [r["estimate"] for r in s.current("t-sink", 10_000, 20_000)] == _expected(
        task, oracle, [rb]
    ).frequencies
    counts = s.counts("t-sink")
    assert sum(c["read"] for c in counts) == sum(c["accepted"] for c in counts) == 87


# ------------------------------------------------------------------------------------------------------------
# batch jobs with --store
# ------------------------------------------------------------------------------------------------------------


def _frequency_setup(tmp_path, users=6_000, d=64, postprocess="base"):
    task = parse_task(
        {
            "task_id": "store-e2e",
            "mechanism": "olh",
            "epsilon": 1.0,
            "domain_size": d,
            "postprocess": postprocess,
        }
    )
    (tmp_path / "task.json").write_text(task.to_json())
    simulator.simulate_files(
        task, users, "zipf", tmp_path / "in", seed=4, files=3, start_ms=T0, duration_s=600.0, inject_bad=2
    )
    return task


def _args(tmp_path, out, *extra):
    return ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"), "--output",
            str(tmp_path / out), *extra]  # fmt: skip


def _jsonl(pattern):
    rows = []
    for f in sorted(glob.glob(pattern)):
        with open(f) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


@pytest.mark.parametrize("window", [None, "240"])
def test_batch_frequency_job_final_store_rows_equal_its_estimate_files(tmp_path, window):
    _frequency_setup(tmp_path, postprocess="norm-sub")
    url = f"sqlite:///{tmp_path}/out/estimates.db"
    extra = ["--window_size", window] if window else []
    summary = frequency.run(_args(tmp_path, "out", "--store", url, *extra))
    files = _jsonl(str(tmp_path / "out" / "estimates-*.jsonl"))
    s = open_store(url)
    wins = s.windows("store-e2e")
    assert len(wins) == len(files) == (1 if window is None else 3)
    assert all(w["is_final"] == 1 and w["final_ms"] is not None for w in wins)
    for rec in files:
        start, end = from_iso(rec["window_start"]), from_iso(rec["window_end"])
        cur = s.current("store-e2e", start, end)
        assert [r["item"] for r in cur] == list(range(64))
        assert [r["estimate"] for r in cur] == rec["frequencies"]  # exactly
        assert [r["std"] for r in cur] == rec["std"]
        assert {(r["n_reports"], r["method"], r["is_final"], r["pane_index"]) for r in cur} == {
            (rec["n_reports"], "norm-sub", 1, rec["pane_index"])
        }
    (c,) = s.counts("store-e2e")
    assert (c["window_start"], c["window_end"]) == (0, 0)
    sc = summary["counts"]
    assert (c["read"], c["accepted"], c["rejected"], c["late_dropped"]) == (
        sc["read"], sc["accepted"], sc["rejected"], 0
    )  # fmt: skip
    assert c["reasons"] == {
        k[len("rejected_") :]: v for k, v in sc.items() if k.startswith("rejected_") and v
    }
    task_row = s.task("store-e2e")
    assert task_row["kind"] == "frequency" and task_row["task"]["task_id"] == "store-e2e"
    assert task_row["summary"]["run"]["counts"] == sc and task_row["summary"]["postprocess"] == "norm-sub"


def test_batch_job_store_caps_a_large_domain(tmp_path):
    _frequency_setup(tmp_path, users=3_000, d=300)
    url = f"sqlite:///{tmp_path}/e.db"
    frequency.run(_args(tmp_path, "out", "--store", url, "--store_max_items", "20"))
    (rec,) = _jsonl(str(tmp_path / "out" / "estimates-*.jsonl"))
    s = open_store(url)
    cur = s.current("store-e2e", 0, 0)
    top = sorted(np.argsort(-np.asarray(rec["frequencies"]), kind="stable")[:20].tolist())
    assert [r["item"] for r in cur] == top
    assert [r["estimate"] for r in cur] == [rec["frequencies"][i] for i in top]
    (pane,) = s.panes("store-e2e", 0, 0)
    assert (pane["n_items"], pane["stored_items"]) == (300, 20)


def test_batch_range_job_stores_one_row_per_query(tmp_path):
    import simulator
    from ldp.rangequery.queries import random_queries
    from pipelines import range_queries

    names = ("age", "income", "score")
    obj = {"task_id": "store-range", "mechanism": "hdg", "epsilon": 1.0, "expected_users": 4_000,
           "attributes": [{"name": n, "domain_size": 16} for n in names]}  # fmt: skip
    (tmp_path / "task.json").write_text(json.dumps(obj))
    task = parse_task(obj)
    simulator.simulate_files(
        task, 4_000, "gaussian:0.5", tmp_path / "in", seed=5, files=2, start_ms=T0, duration_s=600.0
    )
    queries = random_queries([16] * 3, 5, 2, 0.3, rng=_rng(1))
    (tmp_path / "q.json").write_text(json.dumps([q.to_json(names) for q in queries]))
    url = f"sqlite:///{tmp_path}/e.db"
    range_queries.run(_args(tmp_path, "out", "--queries", str(tmp_path / "q.json"), "--store", url))
    answers = sorted(_jsonl(str(tmp_path / "out" / "answers-*.jsonl")), key=lambda r: r["query_index"])
    assert len(answers) == 5
    s = open_store(url)
    cur = s.current("store-range", 0, 0)
    assert [(r["output"], r["item"]) for r in cur] == [("answers", a["query_index"]) for a in answers]
    assert [r["estimate"] for r in cur] == [a["answer"] for a in answers]
    assert [r["std"] for r in cur] == [a["std"] for a in answers]
    assert [r["extra"]["query"] for r in cur] == [a["query"] for a in answers]
    assert {(r["is_final"], r["method"], r["n_reports"]) for r in cur} == {
        (1, "hdg", answers[0]["n_reports"])
    }
    assert s.windows("store-range")[0]["n_reports"] == 4_000


def test_store_flags_are_checked_up_front(tmp_path, capsys):
    _frequency_setup(tmp_path, users=500)
    _fails(capsys, _args(tmp_path, "o1", "--store", "mysql://u:pw@h/db"), r"--store: .*unsupported scheme")
    assert not os.path.exists(tmp_path / "o1")  # refused before anything was created
    _fails(capsys, _args(tmp_path, "o2", "--store", "x.db", "--store_max_items", "0"), r"--store_max_items")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = _fails(
        capsys, _args(tmp_path, "o3", "--store", f"postgresql://ldp:pw@127.0.0.1:{port}/db"), r"unreachable"
    )
    assert ":pw@" not in line
    (tmp_path / "afile").write_text("x")
    _fails(capsys, _args(tmp_path, "o4", "--store", str(tmp_path / "afile" / "e.db")), r"cannot be opened")
