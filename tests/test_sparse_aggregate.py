"""The sparse task kind and its aggregator on the shared protocol (ldp.aggregate): in-memory shards equal
one pass equal the core, validation reasons, task parsing."""

from __future__ import annotations

import numpy as np
import pytest

from ldp.aggregate import GroupAccumulators, accumulate, finalize_window, make_aggregator, merge_all
from ldp.kinds.sparse.aggregate import SparseAggregator, from_reports, to_reports
from ldp.kinds.sparse.task import SparseTask
from ldp.reports import Reports
from ldp.sparse import SparseVectors
from ldp.task import TASK_KINDS, TaskError, parse_task

ROOT = np.random.SeedSequence(20261204)
_children = iter(ROOT.spawn(32))


def rng() -> np.random.Generator:
    return np.random.default_rng(next(_children))


@pytest.fixture
def sparse_kind():
    assert "sparse" in TASK_KINDS  # built in: registered with ldp.kinds
    yield


def population(n, k, r, support=500):
    keys = np.argpartition(r.random((n, support)), k, axis=1)[:, :k]
    return SparseVectors(np.arange(n + 1) * k, keys.ravel().astype(np.uint64), r.uniform(-1, 1, n * k))


def _task(mech, **kw):
    obj = {
        "task_id": "sv-1",
        "mechanism": mech,
        "epsilon": 1.0,
        "domain_size": 2048,
        "sparsity": 8,
        "privacy": "event" if mech in ("svme", "kfold") else "user",
        **kw,
    }
    return parse_task(obj)


@pytest.mark.parametrize("mech", ["svme", "kfold", "sampling", "gaussian", "harmony", "pckv"])
def test_shards_equal_one_pass_equal_core(sparse_kind, mech):
    r = rng()
    task = _task(mech)
    assert isinstance(task, SparseTask) and task.kind == "sparse"
    assert parse_task(task.to_dict()) == task
    agg = SparseAggregator(task)
    m = agg.mechanism
    vec = population(3000, 8, r)
    native, _ = m.encode(vec, rng=r)
    reports = to_reports(m, native)
    ok, reasons = agg.validation_oracle(0).validate(reports)
    assert ok.all(), reasons[~ok][:3]
    parts = []
    for lo, hi in ((0, 700), (700, 2000), (2000, 3000)):
        parts.append(accumulate(agg, GroupAccumulators(), 0, reports.take(slice(lo, hi))))
    merged = merge_all(agg, parts)
    one = accumulate(agg, GroupAccumulators(), 0, reports)
    (row,) = finalize_window(agg, merged)
    (row1,) = finalize_window(agg, one)
    core = m.estimate(m.add(m.create_accumulator(), from_reports(m, reports)))
    assert row.n_reports == 3000 and row.items == list(range(2048))
    assert row.mean == row1.mean == core.mean.tolist()
    assert row.std == core.std.tolist() and row.linf_bound_95 == core.linf_bound(0.95)


def test_query_items_and_validation_reasons(sparse_kind):
    r = rng()
    task = _task("svme")
    agg = SparseAggregator(task, items=[0, 5, 7])
    m = agg.mechanism
    native, _ = m.encode(population(200, 8, r), rng=r)
    rep = to_reports(m, native)
    (row,) = finalize_window(agg, accumulate(agg, GroupAccumulators(), 0, rep))
    assert row.items == [0, 5, 7] and len(row.mean) == len(row.std) == 3
    bad = Reports(seeds=rep.seeds[:4], reals=rep.reals[:4].copy())
    bad.reals[1, 0] = 0.5
    bad.reals[2, 0] = m.params.max_code + 1
    bad.reals[3, 0] = np.nan
    ok, reasons = agg.validation_oracle(0).validate(bad)
    assert list(ok) == [True, False, False, False]
    assert "integers" in reasons[1] and "outside" in reasons[2] and "non-finite" in reasons[3]
    wrong_b = Reports(seeds=rep.seeds[:2], reals=rep.reals[:2, :1])
    assert not agg.validation_oracle(0).validate(wrong_b)[0].any()
    missing = Reports(reals=rep.reals[:2])
    assert "missing" in agg.validation_oracle(0).validate(missing)[1][0]
    hagg = SparseAggregator(_task("harmony"))
    hrep = Reports(values=np.array([3, 5000]), reals=np.array([[1.0], [1.0]]))
    ok, reasons = hagg.validation_oracle(0).validate(hrep)
    assert list(ok) == [True, False] and "outside" in reasons[1]


def test_task_problems(sparse_kind):
    with pytest.raises(TaskError, match="sparsity"):
        parse_task({"task_id": "x", "mechanism": "svme", "epsilon": 1.0, "domain_size": 10})
    with pytest.raises(TaskError, match="rejected by ldp.sparse"):
        parse_task(
            {
                "task_id": "x",
                "mechanism": "svme",
                "epsilon": 1.0,
                "domain_size": 10,
                "sparsity": 2,
                "params": {"bins": 3},
            }
        )
    with pytest.raises(TaskError, match="privacy"):
        parse_task(
            {
                "task_id": "x",
                "mechanism": "kfold",
                "epsilon": 1.0,
                "domain_size": 10,
                "sparsity": 2,
                "privacy": "all",
            }
        )
    with pytest.raises(ValueError, match="whole-vector"):
        SparseAggregator(_task("svme", params={"hash_family": "mix64"}))  # no table for mix64: give items


def test_sparse_kind_is_built_in():
    assert "sparse" in TASK_KINDS
    task = parse_task({"task_id": "x", "mechanism": "svme", "epsilon": 1.0, "domain_size": 16, "sparsity": 2})
    assert task.kind == "sparse"
    assert isinstance(make_aggregator(task), SparseAggregator)
    assert make_aggregator(task, items=[1, 3]).items.tolist() == [1, 3]
    with pytest.raises(TaskError, match="belongs to sparse tasks"):
        parse_task({"task_id": "x", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16, "sparsity": 2})


def test_encode_population_chunks(sparse_kind):
    r = rng()
    agg = SparseAggregator(_task("svme"))
    m = agg.mechanism
    vec = population(2500, 8, r)
    from ldp.kinds.sparse.aggregate import encode_population

    into = GroupAccumulators()
    total = 0
    for reports, stats in encode_population(m, vec, rng=np.random.SeedSequence(5), chunk=1000):
        assert agg.validation_oracle(0).validate(reports)[0].all()
        accumulate(agg, into, 0, reports)
        total += stats.users
    assert total == 2500 and into.n_reports == 2500
    again = GroupAccumulators()
    for reports, _ in encode_population(m, vec, rng=np.random.SeedSequence(5), chunk=1000):
        accumulate(agg, again, 0, reports)
    assert finalize_window(agg, into)[0].mean == finalize_window(agg, again)[0].mean  # reproducible
    with pytest.raises(ValueError):
        next(encode_population(m, vec, chunk=0))
