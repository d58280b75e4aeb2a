"""Tests of ldp.aggregate: the aggregator protocol, the task accumulator and the two aggregators (no Beam).

Everything is exact: the task accumulator is a sum of integer statistics, so shards merged in any order
equal one pass, and finalize over them equals the mechanism's own finalize / the oracle's estimate.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import schemas
from ldp.aggregate import (
    GLOBAL_WINDOW,
    GroupAccumulators,
    ValidationOracle,
    WindowInfo,
    accumulate,
    finalize_window,
    json_record,
    make_aggregator,
    merge_all,
)
from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.kinds.range.aggregate import NoPayloadOracle, RangeAggregator, answer_from_model_records, model_json
from ldp.rangequery.queries import parse_queries
from ldp.task import parse_task

SEEDS = np.random.SeedSequence(20261201).spawn(4)
NAMES = ("a", "b", "c")


def _freq(mech="olh", d=32, **kw):
    return parse_task({"task_id": f"f-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": d, **kw})


def _range(mech="hdg", **kw):
    obj = {
        "task_id": f"r-{mech}",
        "mechanism": mech,
        "epsilon": 1.0,
        "attributes": [{"name": n, "domain_size": 8} for n in NAMES],
        "expected_users": 2000,
        **kw,
    }
    return parse_task(obj)


QUERIES = [{"a": [0, 3]}, {"a": [1, 6], "b": [2, 5]}, {"a": [0, 7], "b": [3, 3], "c": [0, 4]}]


def _protocol_ok(agg):
    for attr in ("task", "outputs", "uniform_oracle"):
        assert hasattr(agg, attr), attr
    for m in ("validation_oracle", "create_accumulator", "add", "merge", "finalize"):
        assert callable(getattr(agg, m)), m
    for g in range(min(agg.task.n_groups, 8)):
        assert isinstance(agg.validation_oracle(g), ValidationOracle)


def test_both_aggregators_implement_the_protocol():
    f = make_aggregator(_freq(n_groups=3), postprocess="norm-sub")
    r = make_aggregator(_range(), queries=parse_queries(QUERIES, NAMES, [8] * 3))
    assert isinstance(f, FrequencyAggregator) and f.method == "norm-sub" and f.uniform_oracle
    assert isinstance(r, RangeAggregator) and not r.uniform_oracle
    _protocol_ok(f)
    _protocol_ok(r)
    assert [o.name for o in f.outputs] == ["estimates"]
    assert [o.name for o in r.outputs] == ["answers", "models"]
    assert isinstance(NoPayloadOracle(), ValidationOracle)
    with pytest.raises(ValueError, match="is a range task, not a frequency task"):
        FrequencyAggregator(_range())
    with pytest.raises(ValueError, match="is a frequency task, not a range task"):
        RangeAggregator(_freq())
    with pytest.raises(ValueError, match="unknown post-processing method"):
        FrequencyAggregator(_freq(), "magic")


def _reports_by_group(agg, n, rng):
    """{group: Reports} of n simulated users (range: the mechanism's encode; frequency: 3 groups)."""
    if agg.task.kind == "range":
        mech = agg.mechanism
        return mech.encode(rng.integers(0, 8, size=(n, 3)), rng=rng, groups=mech.assign_groups(n, rng=rng))
    o = agg.oracle
    groups = rng.integers(0, agg.task.n_groups, n)
    values = rng.integers(0, o.d, n)
    return {int(g): o.encode(values[groups == g], rng=rng) for g in np.unique(groups)}


@pytest.mark.parametrize("kind", ["frequency", "range"])
def test_shards_merged_in_any_order_equal_one_pass(kind):
    rng = np.random.default_rng(SEEDS[0])
    agg = FrequencyAggregator(_freq(n_groups=3)) if kind == "frequency" else RangeAggregator(_range())
    per_group = _reports_by_group(agg, 3000, rng)
    one = GroupAccumulators()
    for g, rep in per_group.items():
        accumulate(agg, one, g, rep)
    shards = [GroupAccumulators() for _ in range(4)]
    for g, rep in per_group.items():
        for i in range(4):
            accumulate(agg, shards[i], g, rep.take(slice(i, None, 4)))
    merged = merge_all(agg, [merge_all(agg, shards[2:]), GroupAccumulators(), merge_all(agg, shards[:2])])
    assert merged.counts == one.counts and merged.n_reports == 3000
    rows_one = finalize_window(agg, one)
    rows_merged = finalize_window(agg, merged)
    assert [r._asdict() for r in rows_merged] == [r._asdict() for r in rows_one]
    assert merge_all(agg, []) == GroupAccumulators() and finalize_window(agg, GroupAccumulators()) == []


def test_frequency_finalize_equals_the_oracle_per_group():
    from ldp.intervals import frequency_intervals
    from ldp.postprocess import postprocess
    from ldp.selection import simultaneous_z

    rng = np.random.default_rng(SEEDS[1])
    agg = FrequencyAggregator(_freq("oue", d=16, n_groups=2), "norm-sub")
    per_group = _reports_by_group(agg, 2000, rng)
    accs = GroupAccumulators()
    for g, rep in per_group.items():
        accumulate(agg, accs, g, rep)
    w = WindowInfo(1000, 2000, "LATE", 3, False)
    rows = finalize_window(agg, accs, w)
    assert [r.group for r in rows] == sorted(per_group)
    for row in rows:
        est = agg.oracle.estimate_reports(per_group[row.group])
        want = postprocess(est.frequencies, "norm-sub", variance=est.variance, n=est.n)
        assert row.frequencies == want.tolist() and row.n_reports == est.n
        assert row.unbiased == est.frequencies.tolist() and row.unbiased_std == est.std.tolist()
        iv = frequency_intervals(agg.oracle, est, "norm-sub", want)  # seeded from the counts: reproducible
        assert row.std == iv.std.tolist() and row.ci_method == "simulated-inversion"
        assert row.ci_low == iv.ci_low.tolist() and row.ci_high == iv.ci_high.tolist()
        assert all(lo <= f <= hi for lo, f, hi in zip(row.ci_low, row.frequencies, row.ci_high))
        z_d = simultaneous_z(16)  # Bonferroni over the domain: Phi^-1(1 - 0.05 / (2 d))
        pairs = zip(row.unbiased, row.unbiased_std)
        assert row.ci_includes_zero == [not (u > 0 and u >= z_d * s) for u, s in pairs]
        assert row.labels is None
        assert (row.window_start, row.window_end, row.pane_timing, row.pane_index, row.is_last_pane) == (
            1000,
            2000,
            "LATE",
            3,
            False,
        )
        schemas.validate_record("estimate", row._asdict())  # the row is the Avro record


def test_range_finalize_equals_the_mechanism():
    rng = np.random.default_rng(SEEDS[2])
    queries = parse_queries(QUERIES, NAMES, [8] * 3)
    agg = RangeAggregator(_range("tdg"), queries)
    per_group = _reports_by_group(agg, 2000, rng)
    accs = GroupAccumulators()
    for g, rep in per_group.items():
        accumulate(agg, accs, g, rep)
    rows = finalize_window(agg, accs, GLOBAL_WINDOW)
    models = [r for r in rows if r.output == "models"]
    answers = [r for r in rows if r.output == "answers"]
    mech = agg.mechanism
    model = mech.finalize({g: mech.add(g, mech.create_accumulator(g), rep) for g, rep in per_group.items()})
    assert [r.answer for r in answers] == model.answer(queries).tolist()
    assert [r.query for r in answers] == QUERIES and [r.query_index for r in answers] == [0, 1, 2]
    assert len(models) == 1 and models[0].n_reports == 2000
    for r in rows:
        schemas.validate_record("range_answer" if r.output == "answers" else "range_model", r._asdict())
    # the model row (its JSON Lines form) answers the same queries later
    again = answer_from_model_records([model_json(models[0]._asdict())], QUERIES)
    assert [a["answer"] for a in again] == [r.answer for r in answers]
    # error bars valid for the published (clipped) answer, and the groups' report counts
    counts = [len(per_group[g]) if g in per_group else 0 for g in range(mech.n_groups)]
    assert models[0].group_reports == counts and models[0].empty_groups == counts.count(0)
    raw = model.answer(queries, clip=False)
    for r, u in zip(answers, raw):
        assert r.group_reports == counts and r.empty_groups == 0
        assert r.ci_method.startswith("normal-clipped:") and r.ci_low <= r.answer <= r.ci_high
        assert r.ci_low == max(0.0, min(u - 1.959963984540054 * r.std, r.answer)) or r.ci_low == 0.0
    assert [a["ci_low"] for a in again] == [r.ci_low for r in answers]
    # a window in which a group had no reports is flagged and its answers get no interval
    accs2 = GroupAccumulators()
    for g, rep in per_group.items():
        if g != 0:
            accumulate(agg, accs2, g, rep)
    rows2 = finalize_window(agg, accs2, GLOBAL_WINDOW)
    assert all(r.empty_groups == 1 and r.group_reports[0] == 0 for r in rows2)
    assert all(r.ci_low is None for r in rows2 if r.output == "answers")


def test_task_accumulator_is_sparse():
    """A task with 2^31 groups: adding a batch touches its group only (no per-group preallocation)."""
    agg = FrequencyAggregator(_freq("grr", d=4, n_groups=1 << 31))
    rep = agg.oracle.encode(np.array([0, 1, 2, 3]), rng=0)
    accs = accumulate(agg, GroupAccumulators(), (1 << 31) - 1, rep)
    assert list(accs.accs) == [(1 << 31) - 1] and accs.n_reports == 4
    (row,) = finalize_window(agg, accs)
    assert row.group == (1 << 31) - 1


def test_aggregators_pickle_without_their_oracles():
    f = FrequencyAggregator(_freq())
    r = RangeAggregator(_range())
    assert f.oracle is not None and r.mechanism is not None  # built (and cached)
    assert f._mech is not None and r._mech is not None
    f2, r2 = pickle.loads(pickle.dumps(f)), pickle.loads(pickle.dumps(r))
    assert f2._mech is None and r2._mech is None
    assert f2.oracle.name == f.oracle.name and r2.mechanism.n_groups == r.mechanism.n_groups


def test_json_record_is_strict_json():
    rec = {"window_start": 0, "window_end": 60_000, "std": [1.0, math.nan], "answer": math.inf}
    js = json_record(rec)
    assert js == {
        "window_start": "1970-01-01T00:00:00.000Z",
        "window_end": "1970-01-01T00:01:00.000Z",
        "std": [1.0, None],
        "answer": None,
    }
    assert json_record({"window_start": None, "window_end": None}) == {
        "window_start": None,
        "window_end": None,
    }
