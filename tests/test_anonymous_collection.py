"""Anonymous collection end to end: the pieces that connect the clients, the shuffler and the aggregator.

* the aggregator's validator dead-letters a shuffled task's report whose time is finer than the precision
  (``fine_time``), on both decode paths; the shuffler's own validation does not (it rounds);
* the clients of a shuffled task round their times and send no client id; the simulator rounds too;
* the longitudinal client refuses a second report in one window (fixed, sliding, global);
* the job's summary gives each window the worst central guarantee of its batches (each at its own n),
  and none for plain files;
* simulated clients -> shuffler -> frequency job -> store -> dashboard document: nothing in the
  aggregator's input identifies a client or carries a fine time, a short bucket is withheld and counted,
  and the central and local guarantees are shown.
"""

from __future__ import annotations

import glob
import io
import json
import os
from pathlib import Path

import fastavro
import numpy as np
import pytest

import simulator
from ldp.anonymity import shuffle_accounting
from ldp.longitudinal.client import Client, ShuffledCollection, WindowReportRefused
from ldp.shuffle import central_epsilon_report
from ldp.task import parse_task
from pipelines.window_privacy import ONE_REPORT_PER_WINDOW, window_privacy
from wire.records import REASONS, reports_to_records
from wire.validate import ReportValidator, TaskReportValidator

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PRECISION_S = 600
BASE = {"task_id": "anon-olh", "mechanism": "olh", "epsilon": 2.0, "domain_size": 16}
ANON = {"shuffled": True, "time_precision_s": PRECISION_S, "min_reports": 200, "delta": 1e-6}


def _task(**extra):
    return parse_task({**BASE, "anonymity": ANON, **extra})


def _records(task, event_ms: np.ndarray, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    reps = task.make_oracle().encode(rng.integers(0, 16, len(event_ms)), rng=rng)
    return reports_to_records(task.task_id, reps, np.asarray(event_ms, dtype=np.int64))


# -- fine_time --------------------------------------------------------------------------------------------
def test_fine_time_is_a_reason_and_refuses_unrounded_times_on_both_decode_paths():
    from wire.decode import iter_report_batches
    from wire.records import write_report_file
    from wire.validate import fast_decode_params

    assert "fine_time" in REASONS
    task = _task()
    times = T0 + np.array([0, 1, PRECISION_S * 1000, PRECISION_S * 1000 + 999, 2 * PRECISION_S * 1000])
    recs = _records(task, times)
    v = ReportValidator(task)
    slow = v.validate(recs, "s", at_ms=0)
    buf = io.BytesIO()
    write_report_file(buf, recs)
    batches = list(iter_report_batches(io.BytesIO(buf.getvalue()), 1 << 20, task_id=task.task_id,
                                       **fast_decode_params(task.make_oracle())))  # fmt: skip
    from wire.decode import ColumnBatch

    assert all(isinstance(b, ColumnBatch) for b in batches)
    fast = [v.validate(b, "s", at_ms=0) for b in batches]
    for vb in (slow, *fast):
        assert vb.reason_counts == {"fine_time": 2}
        assert vb.event_ms.tolist() == [T0, T0 + PRECISION_S * 1000, T0 + 2 * PRECISION_S * 1000]
        assert {d["reason"] for d in vb.dead_letters} == {"fine_time"}
        assert all("time_precision_s (600 s)" in d["detail"] for d in vb.dead_letters)
    # a task that is not shuffled takes any time; the shuffler's validation (rounded_times=False) too
    plain = parse_task(BASE)
    assert ReportValidator(plain).validate(recs).n_accepted == 5
    from ldp.aggregate import make_aggregator

    assert TaskReportValidator(make_aggregator(task), rounded_times=False).validate(recs).n_accepted == 5
    assert TaskReportValidator(make_aggregator(task)).validate(recs).reason_counts == {"fine_time": 2}


# -- clients ----------------------------------------------------------------------------------------------
def test_shuffled_collection_rounds_down_and_knows_its_windows():
    rule = ShuffledCollection.of_task(_task(window={"size_s": 3600}))
    assert rule == ShuffledCollection(PRECISION_S, 3600.0, None)
    assert ShuffledCollection.of_task(parse_task(BASE)) is None
    t = np.array([T0, T0 + 1, T0 + 599_999, T0 + 600_000, 5])
    assert rule.round_ms(t).tolist() == [T0, T0, T0, T0 + 600_000, 0]
    assert rule.round_s(T0 / 1000 + 599.9) == T0 / 1000
    h = 3_600_000
    assert rule.same_window(T0, T0 + h - 1) and not rule.same_window(T0 + h - 1, T0 + h)
    sliding = ShuffledCollection(PRECISION_S, 3600.0, 1200.0)  # windows [k 1200 s, k 1200 s + 3600 s)
    assert sliding.same_window(T0, T0 + h - 1) and sliding.same_window(T0 + 1_200_000, T0 + 1_200_000 + h - 1)
    assert not sliding.same_window(T0 + 1_199_999, T0 + 1_200_000 + h)
    assert ShuffledCollection(PRECISION_S).same_window(0, 10**12)  # the global window: one report in all


def test_longitudinal_client_rounds_and_refuses_a_second_report_in_a_window(tmp_path: Path):
    task = _task(window={"size_s": 3600})
    rule = ShuffledCollection.of_task(task)
    policy = parse_task({**BASE, "budget": {"epsilon_per_report": 2.0, "total_epsilon": 10.0}}).budget
    client = Client.create(tmp_path / "c.json")
    oracle = task.make_oracle()
    t0 = T0 / 1000 + 7.25  # 00:00:07.25
    client.report(task.task_id, oracle, policy, 3, now_s=t0, rng=1, shuffled=rule)
    assert client.ledger_state(task.task_id).last_time_s == T0 / 1000  # only the rounded time is kept
    with pytest.raises(WindowReportRefused, match="one report per user per window") as exc:
        client.report(task.task_id, oracle, policy, 3, now_s=t0 + 3000, rng=2, shuffled=rule)
    assert exc.value.limit == "one_report_per_window"
    assert client.ledger_state(task.task_id).reports == 1  # nothing charged
    client.report(task.task_id, oracle, policy, 4, now_s=t0 + 3600, rng=3, shuffled=rule)  # the next window
    assert client.ledger_state(task.task_id).reports == 2


def test_simulated_clients_of_a_shuffled_task_round_and_send_no_id(tmp_path: Path):
    from pipelines.clients import ClientPopulation, write_window

    budget = {"epsilon_per_report": 2.0, "reports_per_period": 5, "period_s": 86400}
    task = _task(window={"size_s": 3600}, budget=budget)
    for state_dir in (None, tmp_path / "states"):
        pop = ClientPopulation(task, 30, state_dir=state_dir, seed=3, noise_seed=4)
        batch = pop.window(0, T0, T0 + 3_600_000)
        assert len(batch.event_ms) == 30 and batch.client_ids is None
        assert np.all(batch.event_ms % (PRECISION_S * 1000) == 0)
        # the same users again inside the same hour: each client refuses (one report per window)
        again, ok = pop.backend.report(np.arange(30), np.zeros(30, dtype=np.int64),
                                       np.full(30, T0 + 3_000_000), np.random.default_rng(5))  # fmt: skip
        assert not ok.any() and len(again) == 0
    path = write_window(batch, task, tmp_path / "out")
    with open(path, "rb") as fh:
        recs = list(fastavro.reader(fh))
    assert all(r["client_id"] is None for r in recs)
    # the plain task's clients keep their ids and fine times
    plain_pop = ClientPopulation(parse_task({**BASE, "budget": budget}), 30, seed=3, noise_seed=4)
    plain = plain_pop.window(0, T0, T0 + 3_600_000)
    assert plain.client_ids is not None and np.any(plain.event_ms % (PRECISION_S * 1000) != 0)


def test_simulator_rounds_a_shuffled_tasks_times(tmp_path: Path):
    task = _task()
    simulator.simulate_files(task, 500, "zipf", tmp_path, seed=1, files=1, start_ms=T0 + 123, duration_s=1800)
    with open(tmp_path / "reports-00000-of-00001.avro", "rb") as fh:
        times = np.array([r["event_time"] for r in fastavro.reader(fh, return_record_name=False)])
    ms = np.array([t if isinstance(t, int) else round(t.timestamp() * 1000) for t in times])
    buckets = set(np.unique(ms).tolist())  # 1800 s from T0 + 0.123 s: three buckets, a fourth rarely
    assert {T0, T0 + 600_000, T0 + 1_200_000} <= buckets <= {T0, T0 + 600_000, T0 + 1_200_000, T0 + 1_800_000}
    plain = simulator.client_times(parse_task(BASE), np.array([T0 + 5]))
    assert plain.tolist() == [T0 + 5]


# -- the job summary's figures ----------------------------------------------------------------------------
def _batch(start_ms: int, n: int, task_id: str = "anon-olh", precision: int = PRECISION_S) -> dict:
    return {"task_id": task_id, "bucket_start_ms": start_ms, "bucket_end_ms": start_ms + precision * 1000,
            "n": n, "time_precision_s": precision, "min_reports": 200, "file": "x", "path": "x",
            "verified": True, "provenance": None}  # fmt: skip


def _iso(ms: int) -> str:
    from ldp.aggregate import iso_ms

    return iso_ms(ms)


def test_window_privacy_claims_the_worst_batch_and_nothing_for_plain_files():
    task = _task(window={"size_s": 1800})
    w = 1_800_000
    windows = [(_iso(T0), _iso(T0 + w)), (_iso(T0 + w), _iso(T0 + 2 * w))]
    batches = [_batch(T0, 400), _batch(T0 + 600_000, 500), _batch(T0 + 1_200_000, 300), _batch(T0 + w, 150)]
    out = window_privacy(task, windows, batches, [], accepted={windows[0]: 1200})
    first, second = out["windows"]
    accounting, k = shuffle_accounting(task)
    expect = central_epsilon_report(2.0, 300, 1e-6, accounting, k)  # the smallest of its three batches
    assert first["n"] == 300 and first["reports_in_batches"] == 1200 and first["batches"] == 3
    assert first["central_epsilon"] == pytest.approx(expect.epsilon) and expect.method in first["method"]
    assert first["central_epsilon"] > central_epsilon_report(2.0, 1200, 1e-6, accounting, k).epsilon
    assert first["central_epsilon"] < first["local_epsilon"] == 2.0
    assert first["preconditions"] == {"through_shuffler": True, "authenticated": True, "times_rounded": True,
                                      "no_client_ids": True, "min_reports": True,
                                      "accepted_within_n": True}  # fmt: skip
    assert out["one_report_per_user_per_window"] == ONE_REPORT_PER_WINDOW
    # the second window's only batch is below min_reports: no claim, and it says why
    assert second["central_epsilon"] is None and "min_reports" in second["why_no_central"]
    # one plain file among the inputs: no window is claimed (its reports could be in any)
    mixed = window_privacy(task, windows, batches, ["/in/plain.avro"])
    assert [x["central_epsilon"] for x in mixed["windows"]] == [None, None]
    assert "without the shuffler's metadata" in mixed["windows"][0]["why_no_central"]
    assert mixed["windows"][0]["local_epsilon"] == 2.0
    # more accepted reports than the batches hold, a straddling batch, Pub/Sub, an unshuffled task
    assert window_privacy(task, windows[:1], batches, [], accepted={windows[0]: 1201})["windows"][0][
        "why_no_central"] == "the window accepted more reports than its batches hold"  # fmt: skip
    straddle = window_privacy(task, windows[:1], [_batch(T0 + 1_500_000, 900, precision=600)], [])
    assert "straddle" in straddle["windows"][0]["why_no_central"]
    assert window_privacy(task, windows, [], [], source="pubsub")["windows"][0]["central_epsilon"] is None
    spent = window_privacy(task, windows[:1], batches, [], budget_s=0.0)["windows"][0]  # no time left
    assert spent["central_epsilon"] is None and "--users 300" in spent["why_no_central"]
    plain = window_privacy(parse_task(BASE), windows, batches, [])
    assert plain["windows"][0]["why_no_central"].startswith("the task is not shuffled")


# -- end to end (three DirectRunner jobs, about 20 s: the integration tier) ------------------------------
USERS = 1800  # over 1800 s: three buckets of about 600 reports
SHORT = 30  # a bucket an hour later that closes short (withheld)


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """Simulated clients of a shuffled task (one file's with client ids and fine times) -> the shuffler
    -> the frequency job (with a store); and the same job over the clients' files unshuffled."""
    from pipelines import frequency, shuffle
    from wire.records import write_report_file

    base = tmp_path_factory.mktemp("anon")
    task_obj = {**BASE, "anonymity": ANON, "window": {"size_s": 1800}}
    (base / "task.json").write_text(json.dumps(task_obj))
    task = parse_task(task_obj)
    simulator.simulate_files(task, USERS, "zipf", base / "in", seed=21, files=2, start_ms=T0, duration_s=1800)
    simulator.simulate_files(task, SHORT, "zipf", base / "short", seed=22, files=1, start_ms=T0 + 3_600_000,
                            duration_s=60.0)  # fmt: skip
    os.rename(base / "short" / "reports-00000-of-00001.avro", base / "in" / "short.avro")
    legacy = base / "in" / "reports-00000-of-00002.avro"  # clients that send ids and fine times anyway
    with open(legacy, "rb") as fh:
        recs = list(fastavro.reader(fh))
    rng = np.random.default_rng(23)
    for r in recs:
        r["client_id"] = rng.bytes(32)
        r["event_time"] = round(r["event_time"].timestamp() * 1000) + 1234
    with open(legacy, "wb") as fh:
        write_report_file(fh, recs)
    from ldp.shuffle.provenance import new_key_file

    key = str(base / "shuffle.key")
    new_key_file(key)
    shuffled = shuffle.run(["--task", str(base / "task.json"), "--input", str(base / "in" / "*.avro"),
                            "--output", str(base / "out"), "--shuffle_key", key])  # fmt: skip
    url = f"sqlite:///{base}/estimates.db"
    batches = str(base / "out" / "batches" / "*.avro")
    job = frequency.run(["--task", str(base / "task.json"), "--input", batches,
                         "--output", str(base / "est"), "--store", url, "--shuffle_key", key])  # fmt: skip
    raw = frequency.run(["--task", str(base / "task.json"), "--input", str(base / "in" / "*.avro"),
                         "--output", str(base / "est_raw")])  # fmt: skip
    return {"base": base, "task": task, "shuffled": shuffled, "job": job, "raw": raw, "url": url,
            "legacy": len(recs)}  # fmt: skip


@pytest.mark.integration
def test_end_to_end_the_aggregators_input_identifies_no_one_and_is_coarse(e2e):
    files = sorted(glob.glob(str(e2e["base"] / "out" / "batches" / "*.avro")))
    assert len(files) == 3
    for f in files:
        with open(f, "rb") as fh:
            reader = fastavro.reader(fh)
            recs = list(reader)
        assert all(r.get("client_id") is None for r in recs)
        times = {round(r["event_time"].timestamp() * 1000) for r in recs}
        assert len(times) == 1 and times.pop() % (PRECISION_S * 1000) == 0
        assert int(reader.metadata["ldp.shuffle.n"]) == len(recs)


@pytest.mark.integration
def test_end_to_end_short_bucket_withheld_and_counted(e2e):
    s = e2e["shuffled"]
    assert s["balanced"] and s["batches"] == 3
    c = s["counts"]
    assert c["read"] == USERS + SHORT and c["forwarded"] == USERS
    assert c["withheld_short"] == SHORT and c["withheld_buckets"] == 1 and c["dead_lettered"] == 0
    reasons = []
    for f in glob.glob(str(e2e["base"] / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            reasons += [d["reason"] for d in fastavro.reader(fh)]
    assert reasons == ["short_bucket"]
    job = e2e["job"]
    assert job["counts"]["read"] == job["counts"]["accepted"] == USERS  # the short bucket never arrives
    windows = job["privacy_accounting"]["windows"]
    assert [w["window_start"] for w in windows] == [_iso(T0)]


@pytest.mark.integration
def test_end_to_end_summary_store_and_dashboard_show_both_guarantees(e2e):
    from bokeh.document import Document

    from pipelines.dashboard_app.app import Dashboard

    job = e2e["job"]
    (w,) = job["privacy_accounting"]["windows"]
    accounting, k = shuffle_accounting(e2e["task"])
    smallest = min(b["n"] for b in w["per_batch"])
    assert w["n"] == smallest and w["reports_in_batches"] == USERS and w["batches"] == 3
    assert w["accepted"] == USERS and all(b["verified"] for b in w["per_batch"])
    expect = central_epsilon_report(2.0, smallest, 1e-6, accounting, k)  # the worst of its three batches
    assert w["central_epsilon"] == pytest.approx(expect.epsilon) and expect.method in w["method"]
    assert w["central_epsilon"] < w["local_epsilon"] == 2.0 and w["why_no_central"] is None
    assert all(v is True for v in w["preconditions"].values())
    with open(e2e["base"] / "est" / "counts.json", encoding="utf-8") as fh:
        stored = json.load(fh)["privacy_accounting"]
    assert stored["windows"][0]["n"] == smallest and stored["provenance"]["batches_verified"] == 3
    # the same reports read from the clients' files: the local guarantee only
    raw_w = e2e["raw"]["privacy_accounting"]["windows"][0]  # (and the short bucket's window)
    assert raw_w["central_epsilon"] is None and raw_w["local_epsilon"] == 2.0 and raw_w["n"] is None
    assert raw_w["preconditions"]["through_shuffler"] is False
    assert e2e["raw"]["counts"]["rejected_fine_time"] == e2e["legacy"] > 0  # the aggregator refuses them
    assert e2e["raw"]["privacy_accounting"]["fine_time_rejected"] == e2e["legacy"]
    # the store's run summary and the dashboard's privacy panel
    dash = Dashboard(Document(), e2e["url"])
    dash.poll()
    assert dash.budget.visible and "id='privacy-guarantees'" in dash.budget.text
    text = dash.budget.text
    assert f"<td>{smallest:,}</td><td>{w['central_epsilon']:.4f}</td><td>1e-06</td><td>2.0000</td>" in text
    assert "<td>yes</td><td>yes</td><td>yes</td><td>3 / 3</td>" in text  # batches verified
