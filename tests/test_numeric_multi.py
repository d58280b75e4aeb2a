"""Several attributes in one numeric task: sample-k-of-m (ldp.numeric.multi) through the task model, the
aggregator, the rows, the store, the simulator, the batch job, its dead letters and ``ldp-beam show``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import fastavro
import numpy as np
import pytest

from ldp import task as T
from ldp.aggregate import GLOBAL_WINDOW, GroupAccumulators, accumulate, finalize_window, make_aggregator
from ldp.kinds import flatten_rows
from ldp.kinds.numeric.aggregate import NumericEstimateRow
from ldp.kinds.numeric.population import sample_columns
from ldp.kinds.numeric.task import NumericTask
from ldp.numeric.multi import MultiNumeric, default_k
from ldp.payload import Refusal
from ldp.reports import Reports

ATTRS = [
    {"name": "latency_ms", "low": 0, "high": 500},
    {"name": "battery", "low": 0, "high": 100},
    {"name": "temp_c", "low": -20, "high": 60},
]
TASK = {"task_id": "multi-1", "kind": "numeric", "mechanism": "hybrid", "epsilon": 4.0, "attributes": ATTRS,
        "k": 2}


def _task(**change: object) -> NumericTask:
    obj = {k: v for k, v in {**TASK, **change}.items() if v is not None}
    task = T.parse_task(obj)
    assert isinstance(task, NumericTask)
    return task


# ------------------------------------------------------------------------------------------------ the task
def test_the_task_takes_several_attributes_and_an_optional_k():
    task = _task()
    assert task.is_multi and task.per_report == 2 and [a.name for a in task.attributes] == [
        "latency_ms", "battery", "temp_c"]  # fmt: skip
    mech = task.make_mechanism()
    assert isinstance(mech, MultiNumeric) and mech.k == 2 and all(m.epsilon == 2.0 for m in mech.mechs)
    assert T.parse_task(task.to_dict()) == task  # round trip, k kept
    dflt = _task(k=None, epsilon=8.0)
    assert dflt.k is None and dflt.per_report == default_k(8.0, 3) == 3
    assert "k" not in dflt.to_dict()
    one = _task(attributes=ATTRS[:1], k=None)
    assert not one.is_multi and type(one.make_mechanism()).__name__ != "MultiNumeric"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"k": 4}, "k must be at most the number of attributes (3), got 4"),
        ({"k": 0}, "k must be an integer in [1, 32]"),
        ({"attributes": [ATTRS[0], {**ATTRS[1], "name": "latency_ms"}]},
         "attributes[1].name 'latency_ms' is repeated"),
        ({"attributes": [ATTRS[0], {**ATTRS[1], "low": 100}]}, "attributes[1]: low must be below high"),
        ({"attributes": [ATTRS[0]] * 0}, "attributes must be a list of 1 to 32"),
        ({"mechanism": "memo-one-bit-mean"}, "memo-one-bit-mean counts one attribute"),
        ({"params": {"moments": 2}}, "moments must be 1"),
    ],
)
def test_bad_multi_attribute_tasks_are_refused_with_the_reason(change, message):
    with pytest.raises(T.TaskError) as ei:
        _task(**change)
    assert message in ei.value.one_line()


# ------------------------------------------------------------------------------------------------ the core
def _closed_form_var(mech, t: np.ndarray, n_j: float, n: int) -> float:
    """Variance of one attribute's mean (value scale) over ``n`` users of whom ``n_j`` report it: the
    mechanism's noise ``mean_i Var[y | t_i] / n_j`` plus the sampling of the reporting users (a simple
    random sample of ``n_j`` of ``n`` given ``n_j``: ``S_t^2 (1/n_j - 1/n)``), times ``(h/2)^2``."""
    half = 0.5 * (mech.high - mech.low)
    noise = float(np.mean(mech.variance(t))) / n_j
    sampling = float(np.var(t, ddof=1)) * (1.0 / n_j - 1.0 / n)
    return half * half * (noise + sampling)


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "eps"), [("hybrid", 4.0), ("one-bit-mean", 1.0)])
def test_per_attribute_means_are_unbiased_with_the_closed_form_variance(name, eps, rng):
    """T = 400 trials of n = 1500 users with fixed values, m = 3, k = 2. Per attribute: the average
    estimate is within 4.5 SE of the truth (SE = sqrt(V / T), V the closed form of
    :func:`_closed_form_var`), and the empirical variance over V within 1 +- 4.5 sqrt(2 / (T - 1)) (the SE
    of a sample variance of near-normal estimates)."""
    bounds = [(a["low"], a["high"]) for a in ATTRS]
    multi = MultiNumeric(name, eps, bounds, k=2)
    n, trials = 1500, 400
    x = np.column_stack([rng.lognormal(4.5, 0.8, n), rng.uniform(0, 100, n), rng.normal(20, 10, n)])
    lows, highs = np.array(bounds, dtype=float).T
    truth = np.clip(x, lows, highs).mean(axis=0)
    reps = multi.encode(np.tile(x, (trials, 1)), rng=rng)
    est = np.empty((trials, 3))
    for i in range(trials):
        acc = multi.add(multi.create_accumulator(), reps.take(slice(i * n, (i + 1) * n)))
        est[i] = [e.mean for e in multi.estimate(acc)]
    tol = 4.5 * math.sqrt(2.0 / (trials - 1))
    for j, mech in enumerate(multi.mechs):
        t = 2.0 * (np.clip(x[:, j], lows[j], highs[j]) - lows[j]) / (highs[j] - lows[j]) - 1.0
        v = _closed_form_var(mech, t, n * 2 / 3, n)
        assert abs(est[:, j].mean() - truth[j]) < 4.5 * math.sqrt(v / trials), (j, est[:, j].mean(), truth[j])
        assert abs(est[:, j].var(ddof=1) / v - 1.0) < tol, (j, est[:, j].var(ddof=1) / v)


@pytest.mark.parametrize("name", ["hybrid", "one-bit-mean"])
def test_bad_reports_are_refused_with_a_reason_code(name, rng):
    multi = MultiNumeric(name, 2.0, [(0, 1)] * 3, k=2)
    good = multi.encode(rng.uniform(0, 1, (4, 3)), rng=rng)
    assert multi.validate(good)[0].all()
    out = multi.field
    wrong_count = Reports(items=np.array([[0, 1, 2]] * 4), **{out: getattr(good, out)})
    ok, why = multi.validate(wrong_count)
    assert not ok.any() and {(r.code, r.detail) for r in why} == {("invalid_payload", "bad_shape")}
    items = good.items.copy()
    items[0] = [0, 3]  # index m
    items[1] = [1, 1]  # repeated
    ok, why = multi.validate(Reports(items=items, **{out: getattr(good, out)}))
    assert ok.tolist() == [False, False, True, True]
    assert (why[0].code, why[0].detail) == ("out_of_domain", "item_out_of_range")
    assert (why[1].code, why[1].detail) == ("invalid_payload", "bad_items")
    assert all(isinstance(r, Refusal) for r in why[:2])
    if name == "one-bit-mean":
        ok, why = multi.validate(Reports(items=good.items, values=np.array([0, 1, 3, 4])))
        assert ok.tolist() == [True, True, True, False] and why[3].code == "invalid_payload"
    else:
        reals = good.reals.copy()
        reals[2, 1] = 1e6
        ok, why = multi.validate(Reports(items=good.items, reals=reals))
        assert ok.tolist() == [True, True, False, True] and why[2].code == "invalid_payload"
    spec = multi.payload
    assert spec.field("items").width == 2 and spec.field("items").high == 2


# ------------------------------------------------------------------------------------ aggregator and store
def test_the_aggregator_gives_one_row_per_attribute_and_the_store_one_series_each(rng):
    task = _task()
    agg = make_aggregator(task)
    mech = task.make_mechanism()
    x = np.column_stack([rng.uniform(0, 500, 3000), rng.uniform(0, 100, 3000), rng.uniform(-20, 60, 3000)])
    reports = mech.encode(x, rng=rng)
    half = accumulate(agg, GroupAccumulators(), 0, reports.take(slice(0, 1000)))
    whole = accumulate(agg, half, 0, reports.take(slice(1000, None)))
    rows = finalize_window(agg, whole, GLOBAL_WINDOW)
    assert [type(r) for r in rows] == [NumericEstimateRow] * 3
    assert [(r.attribute, r.attribute_index) for r in rows] == [
        ("latency_ms", 0), ("battery", 1), ("temp_c", 2)]  # fmt: skip
    ests = mech.estimate(mech.add(mech.create_accumulator(), reports))
    for r, e in zip(rows, ests):  # the same integer accumulators: equality
        assert (r.mean, r.mean_std, r.n_reports, r.epsilon) == (e.mean, e.mean_std, e.n, 2.0)
        assert r.mean_ci_low <= r.mean <= r.mean_ci_high and r.quantiles == []
    panes = flatten_rows(rows)
    assert [(p.output, p.grp, p.extra["attribute"]) for p in panes] == [
        ("numeric", 0, "latency_ms"), ("numeric", 1, "battery"), ("numeric", 2, "temp_c")]  # fmt: skip
    assert [p.items[0].estimate for p in panes] == [r.mean for r in rows]


def test_an_attribute_without_reports_gives_no_row(rng):
    task = _task(k=1)
    agg = make_aggregator(task)
    outputs = task.make_mechanism().encode(np.ones((2, 3)), rng=rng).reals  # any attribute's range
    reports = Reports(items=np.array([[0], [2]]), reals=outputs)
    rows = finalize_window(agg, accumulate(agg, GroupAccumulators(), 0, reports), GLOBAL_WINDOW)
    assert [r.attribute_index for r in rows] == [0, 2]


def test_square_wave_gives_each_attribute_its_quantiles(rng):
    task = _task(mechanism="square-wave", quantiles=[0.5], params={"bins": 64})
    agg = make_aggregator(task, replicas=4)
    mech = task.make_mechanism()
    x = np.column_stack([rng.uniform(0, 500, 4000), rng.uniform(0, 100, 4000), rng.uniform(-20, 60, 4000)])
    acc = accumulate(agg, GroupAccumulators(), 0, mech.encode(x, rng=rng))
    rows = finalize_window(agg, acc, GLOBAL_WINDOW)
    assert [len(r.quantiles) for r in rows] == [1, 1, 1]
    assert [len(p.items) for p in flatten_rows(rows)] == [2, 2, 2]


def test_the_simulators_columns_come_from_one_spec_or_one_per_attribute(rng):
    x = sample_columns("uniform:0:1", 3, 100, rng)
    assert x.shape == (100, 3) and not np.array_equal(x[:, 0], x[:, 1])
    y = sample_columns("normal:5:0;uniform:2:3", 2, 50, rng)
    assert (y[:, 0] == 5.0).all() and ((y[:, 1] >= 2) & (y[:, 1] <= 3)).all()
    with pytest.raises(ValueError, match="2 specs for 3 attributes"):
        sample_columns("normal;normal", 3, 10, rng)


# ------------------------------------------------------------------------------------------- the batch job
def _reports_of(paths: list[Path]) -> Reports:
    items, reals = [], []
    for p in paths:
        with open(p, "rb") as fh:
            for r in fastavro.reader(fh):
                items.append(r["items"])
                reals.append(r["reals"])
    return Reports(items=np.array(items, dtype=np.int64), reals=np.array(reals, dtype=np.float64))


def test_a_batch_job_on_three_attributes_stores_one_series_each_and_dead_letters_bad_reports(tmp_path):
    from pipelines import show
    from pipelines.numeric import run
    from simulator import simulate_files
    from store import open_store

    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(TASK))
    task = T.load_task(task_file)
    sim = tmp_path / "sim"
    truth = simulate_files(task, 6000, "lognormal:4.5:0.8;uniform:0:100;normal:20:10", sim, seed=5, files=2,
                           inject_bad=3)
    bad = truth["bad_records"]
    # a wrong number of attributes (items of k + 1 entries) and an index out of range are among them
    assert bad["invalid_payload"] > 0 and bad["out_of_domain"] > 0
    db = tmp_path / "store.db"
    out = tmp_path / "out"
    summary = run(["--task", str(task_file), "--input", str(sim / "*.avro"), "--output", str(out),
                   "--store", f"sqlite:///{db}"])
    counts = summary["counts"]
    assert counts["accepted"] == 6000
    for reason, n in bad.items():
        assert counts[f"rejected_{reason}"] == n, (reason, counts)
    dead = []
    for p in (tmp_path / "out" / "dead_letter").glob("*.avro"):
        with open(p, "rb") as fh:
            dead += list(fastavro.reader(fh))
    details = {(d["reason"], d["detail"]) for d in dead}
    assert ("out_of_domain", "item_out_of_range") in details  # an attribute index of m
    assert ("invalid_payload", "items must be a list of 2 integers") in details, details  # k + 1 of them
    (path,) = (tmp_path / "out").glob("estimates-*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["attribute"], r["attribute_index"]) for r in rows] == [
        ("latency_ms", 0), ("battery", 1), ("temp_c", 2)]  # fmt: skip
    mech = task.make_mechanism()
    ests = mech.estimate(mech.add(mech.create_accumulator(), _reports_of(sorted(sim.glob("reports-*.avro")))))
    for r, e, t in zip(rows, ests, truth["attributes"]):
        assert (r["mean"], r["mean_std"], r["n_reports"]) == (e.mean, e.mean_std, e.n)  # exact
        assert abs(r["mean"] - t["mean"]) < 5 * r["mean_std"]  # 5 of the row's own std
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        got = store._b.query(
            "SELECT grp, label, estimate FROM ldp_current WHERE task_id = ? AND output = 'numeric' "
            "ORDER BY grp",
            ("multi-1",),
        )
    finally:
        store.close()
    assert got == [{"grp": j, "label": "mean", "estimate": rows[j]["mean"]} for j in range(3)]
    shown = show.collect(str(tmp_path / "out"))
    tables = shown["windows"][0]["tables"]
    assert [t["about"]["attribute"] for t in tables] == ["latency_ms", "battery", "temp_c"]
    assert [t["rows"][0]["value"] for t in tables] == [r["mean"] for r in rows]
    text = show.render(shown)
    assert all(f"attribute {name}" in text for name in ("latency_ms", "battery", "temp_c")), text


def test_uniform_without_parameters_spans_each_attributes_bounds(rng):
    """``uniform`` alone draws each attribute from its own ``[low, high]``; parameters override."""
    x = sample_columns("uniform", 2, 2000, rng, bounds=[(0.0, 5000.0), (10.0, 20.0)])
    assert x[:, 0].min() >= 0 and x[:, 0].max() <= 5000 and x[:, 0].max() > 4000
    assert x[:, 1].min() >= 10 and x[:, 1].max() <= 20
    y = sample_columns("uniform:0:1", 2, 100, rng, bounds=[(0.0, 5000.0), (10.0, 20.0)])
    assert y.max() <= 1
