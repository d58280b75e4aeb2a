"""Tests of TDG, HDG, CALM and Uni (ldp.rangequery.grids / calm / uni / registry / base)."""

import json
import math

import numpy as np
import pytest

from ldp.rangequery import make_mechanism, model_from_dict, random_queries, true_answers
from ldp.rangequery.base import attribute_pairs, hash_user_ids, next_power_of_two
from ldp.rangequery.grids import HDGModel, TDGModel, closest_power_of_two, guideline_granularity
from ldp.rangequery.queries import RangeQuery
from ldp.task import parse_task

SEED = np.random.SeedSequence(2021_0901)
_SEEDS = iter(SEED.spawn(64))


def rng():
    return np.random.default_rng(next(_SEEDS))


def _records(n, sizes, g):
    """Correlated small population: attribute t = (shared + own noise) folded into [0, c_t)."""
    shared = g.integers(0, 1000, n)
    cols = [((shared + g.integers(0, 300, n)) * c // 1300) for c in sizes]
    return np.stack(cols, axis=1).astype(np.int64)


# ---- granularity guideline ----


def test_closest_power_of_two():
    assert [closest_power_of_two(x) for x in (0.3, 1, 1.4, 2.9, 3.1, 5.9, 6.0, 6.1, 23.3, 100)] == [
        1,
        1,
        1,
        2,
        4,
        4,
        8,
        8,
        16,
        128,
    ]
    assert next_power_of_two(1) == 1 and next_power_of_two(10) == 16 and next_power_of_two(64) == 64


def test_guideline_paper_setting():
    # d = 6, n = 1e6, eps = 1: HDG has 6 + 15 = 21 groups of n/21 users.
    e = math.e
    per = 1e6 / 21
    g1 = (per * (e - 1) ** 2 * 0.7**2 / (2 * e)) ** (1 / 3)
    g2 = math.sqrt(2 * 0.03 * (e - 1) * math.sqrt(per / e))
    assert guideline_granularity(1.0, per, 1) == pytest.approx(g1)
    assert guideline_granularity(1.0, per, 2) == pytest.approx(g2)
    hdg = make_mechanism("hdg", 1.0, [64] * 6, 1_000_000)
    assert (hdg.g1, hdg.g2) == (closest_power_of_two(g1), closest_power_of_two(g2)) == (16, 4)
    assert hdg.n_groups == 21
    tdg = make_mechanism("tdg", 1.0, [64] * 6, 1_000_000)
    assert tdg.n_groups == 15 and tdg.g2 == closest_power_of_two(guideline_granularity(1.0, 1e6 / 15, 2))
    # capped at c, overridable
    big = make_mechanism("hdg", 8.0, [8] * 3, 10_000_000)
    assert big.g1 == 8 and big.g2 == 8
    o = make_mechanism("hdg", 1.0, [64] * 3, 1000, g1=32, g2=2)
    assert (o.g1, o.g2) == (32, 2)
    with pytest.raises(ValueError, match="power of two"):
        make_mechanism("hdg", 1.0, [64] * 3, 1000, g1=12)
    with pytest.raises(ValueError, match="unknown option"):
        make_mechanism("tdg", 1.0, [64] * 3, 1000, granularity=4)
    with pytest.raises(ValueError, match="unknown range-query method"):
        make_mechanism("nope", 1.0, [64] * 3, 1000)


# ---- groups and projection ----


def test_groups_and_projection_hand_made():
    hdg = make_mechanism("hdg", 1.0, [8, 8, 6], 1000, g1=4, g2=2)
    assert hdg.n_groups == 3 + 3
    assert [hdg.group_label(g) for g in range(6)] == ["1d:0", "1d:1", "1d:2", "2d:0,1", "2d:0,2", "2d:1,2"]
    rec = np.array([[0, 7, 5], [3, 4, 0], [7, 0, 2]])
    np.testing.assert_array_equal(hdg.project(0, rec), [0, 1, 3])  # 8 values / 4 cells: v // 2
    np.testing.assert_array_equal(hdg.project(2, rec), [2, 0, 1])  # c = 6 padded to 8
    np.testing.assert_array_equal(hdg.project(3, rec), [0 * 2 + 1, 0 * 2 + 1, 1 * 2 + 0])  # v // 4 per axis
    assert hdg.group_oracle(3).d == 4 and hdg.group_oracle(0).d == 4
    # padded cells: attribute 2 has 6 real values, so with g1 = 4 its last cell (values 6, 7) is empty
    assert hdg.valid_mask(hdg.specs[2]).tolist() == [True, True, True, False]


def test_assign_groups_modes():
    mech = make_mechanism("tdg", 1.0, [16] * 4, 1000)
    m = mech.n_groups
    g = mech.assign_groups(1003, rng=rng(), balanced=True)
    counts = np.bincount(g, minlength=m)
    assert counts.max() - counts.min() <= 1
    ids = np.arange(100_000)
    a = mech.assign_groups(len(ids), user_ids=ids)
    np.testing.assert_array_equal(a, mech.assign_groups(len(ids), user_ids=ids))
    assert a.min() >= 0 and a.max() < m
    # uniform: chi-square with m - 1 = 5 d.o.f.; 5-sigma-ish bound (P[chi2_5 > 40] ~ 1.5e-7)
    expected = len(ids) / m
    chi2 = ((np.bincount(a, minlength=m) - expected) ** 2 / expected).sum()
    assert chi2 < 40
    # salted: a different task gets a different assignment; string ids hash deterministically
    other = make_mechanism("tdg", 1.0, [16] * 4, 1000, group_salt=99).assign_groups(len(ids), user_ids=ids)
    assert np.mean(other == a) < 0.3
    s = hash_user_ids(["alice", "bob", "alice"], 7)
    assert s[0] == s[2] != s[1]
    r = mech.assign_groups(50_000, rng=rng())
    assert r.min() >= 0 and r.max() < m


def test_check_records():
    mech = make_mechanism("hdg", 1.0, [4, 5], 100)
    with pytest.raises(ValueError, match="shape"):
        mech.encode(np.zeros((3, 3), int), rng=0)
    with pytest.raises(ValueError, match="record 1: value 5 of attribute 1"):
        mech.encode(np.array([[0, 0], [1, 5]]), rng=0)


# ---- answering: hand-made models ----


def test_tdg_uniform_guess_hand_made():
    # one pair, c = 4, g2 = 2: cells of 2 x 2 values
    grid = np.array([[0.4, 0.1], [0.2, 0.3]])
    m = TDGModel([4, 4], 100, pairs=[(0, 1)], grids=[grid], var0=[0.01])
    q = [
        RangeQuery(((0, 0, 1), (1, 0, 1))),  # whole cell (0, 0)
        RangeQuery(((0, 0, 0), (1, 0, 1))),  # half of cell (0, 0)
        RangeQuery(((0, 1, 2), (1, 1, 2))),  # a quarter of each of the four cells
        RangeQuery(((0, 0, 3),)),  # 1-D, whole domain
        RangeQuery(((1, 2, 3),)),  # 1-D: second column of cells
    ]
    np.testing.assert_allclose(m.answer(q), [0.4, 0.2, 0.25, 1.0, 0.4])
    # std: whole cell -> sqrt(var0); half a cell -> sqrt(var0 / 4); four quarter cells -> sqrt(4 var0 / 16)
    np.testing.assert_allclose(m.answer_std(q)[:3], [0.1, 0.05, 0.05])


def test_tdg_uniform_guess_with_padding():
    # c = 3 padded to 4, g2 = 2: cell 1 of each axis holds the single real value 2
    grid = np.array([[0.4, 0.1], [0.2, 0.3]])
    m = TDGModel([3, 3], 100, pairs=[(0, 1)], grids=[grid], var0=[0.01])
    q = [RangeQuery(((0, 2, 2), (1, 2, 2))), RangeQuery(((0, 0, 0), (1, 2, 2))), RangeQuery(((0, 0, 2),))]
    np.testing.assert_allclose(m.answer(q), [0.3, 0.05, 1.0])


def test_hdg_partial_cells_use_response_matrix():
    # c = 4, g2 = 2; the response matrix puts all of cell (0, 0)'s mass on value (0, 0)
    grid = np.array([[0.4, 0.1], [0.2, 0.3]])
    mat = np.array([[0.4, 0, 0.05, 0.05], [0, 0, 0, 0], [0.1, 0, 0.1, 0.1], [0.1, 0, 0.05, 0.05]])
    m = HDGModel([4, 4], 100, pairs=[(0, 1)], grids=[grid], var0=[0.01], matrices=[mat])
    q = [
        RangeQuery(((0, 0, 0), (1, 0, 1))),  # partial cell (0,0): M[0, 0:2] = 0.4
        RangeQuery(((0, 1, 1), (1, 0, 1))),  # partial: M[1, 0:2] = 0
        RangeQuery(((0, 0, 3), (1, 0, 1))),  # whole cells (0,0), (1,0) from the grid: 0.6
        RangeQuery(((0, 0, 2), (1, 0, 3))),  # whole (0,0), (0,1) = 0.5 + row 2 of M = 0.3
    ]
    np.testing.assert_allclose(m.answer(q), [0.4, 0.0, 0.6, 0.8])


# ---- end to end ----


@pytest.mark.parametrize("method", ["hdg", "tdg", "calm", "uni"])
def test_fit_answer_and_serialization_roundtrip(method):
    sizes = [10, 16, 7]
    g = rng()
    rec = _records(20_000, sizes, g)
    mech = make_mechanism(method, 2.0, sizes, len(rec))
    model = mech.fit(rec, rng=g)
    qs = []
    for lam in (1, 2, 3):
        qs += random_queries(sizes, 20, lam, 0.3, rng=g)
    qs.append(RangeQuery(((0, 0, 9), (1, 0, 15), (2, 0, 6))))
    ans = model.answer(qs)
    assert ans.shape == (len(qs),) and np.all(np.isfinite(ans))
    assert np.all(ans >= -1e-9) and np.all(ans <= 1 + 1e-9)
    assert ans[-1] == pytest.approx(1.0, abs=1e-6)
    d = json.loads(json.dumps(model.to_dict()))
    assert d["format_version"] == 1 and d["method"] == method
    again = model_from_dict(d)
    np.testing.assert_allclose(again.answer(qs), ans, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="query 0"):
        model.answer([RangeQuery(((0, 0, 10),))])
    with pytest.raises(ValueError, match="format_version"):
        model_from_dict({**d, "format_version": 2})


def test_hdg_response_matrices_match_grids():
    sizes = [16, 16, 16]
    g = rng()
    rec = _records(30_000, sizes, g)
    mech = make_mechanism("hdg", 2.0, sizes, len(rec), g1=8, g2=4)
    model = mech.fit(rec, rng=g)
    assert all(s < mech.wu_max_iter for s in model.info["wu_sweeps"])
    for (j, k), grid, m in zip(model.pairs, model.grids, model.matrices):
        # the last constraint of a sweep is the 2-D grid: matched up to the 1/n threshold
        np.testing.assert_allclose(m.reshape(4, 4, 4, 4).sum(axis=(1, 3)), grid, atol=2 / len(rec))
        # the 1-D grids match up to the small inconsistency the final Norm-Sub leaves
        np.testing.assert_allclose(m.sum(axis=1).reshape(8, 2).sum(axis=1), model.grids_1d[j], atol=0.01)
        np.testing.assert_allclose(m.sum(axis=0).reshape(8, 2).sum(axis=1), model.grids_1d[k], atol=0.01)


def test_sharded_accumulation_equals_single_pass():
    sizes = [8, 8, 8]
    g = rng()
    rec = _records(5000, sizes, g)
    mech = make_mechanism("hdg", 1.0, sizes, len(rec))
    groups = mech.assign_groups(len(rec), user_ids=np.arange(len(rec)))
    reports = mech.encode(rec, rng=g, groups=groups)
    one = mech.finalize(mech.accumulate(reports))
    accs = {}
    for grp, r in reports.items():
        half = len(r) // 2
        a1 = mech.add(grp, mech.create_accumulator(grp), r.take(slice(0, half)))
        a2 = mech.add(grp, mech.create_accumulator(grp), r.take(slice(half, None)))
        accs[grp] = mech.merge(grp, [a1, a2])
    two = mech.finalize(accs)
    qs = random_queries(sizes, 30, 2, 0.4, rng=g)
    np.testing.assert_array_equal(one.answer(qs), two.answer(qs))


@pytest.mark.statistical
def test_raw_grid_estimates_unbiased_with_closed_form_variance():
    # Phase 1 only: each 2-D grid's unbiased estimates over T trials (same records, fresh groups and noise).
    # Error = oracle noise (closed-form var0 per cell) + sampling of the group out of the population:
    # f_s (1 - f_s) (m - 1) / (n - 1) (paper, Section 5). Mean error within 5 SE per cell on average, and the
    # MSE ratio within 1 +- 5 sqrt(2 / (T * cells)) (cells treated as independent).
    sizes = [8, 8, 8]
    g = rng()
    n, T = 6000, 40
    rec = _records(n, sizes, g)
    mech = make_mechanism("tdg", 1.0, sizes, n, g2=4)
    m = mech.n_groups
    truth = [np.bincount(mech.project(grp, rec), minlength=16) / n for grp in range(m)]
    errs, var_pred = [], []
    for _ in range(T):
        groups = mech.assign_groups(n, rng=g, balanced=True)
        tables, _ = mech._tables(mech.accumulate(mech.encode(rec, rng=g, groups=groups)))
        errs.append(np.concatenate([t.values.ravel() - truth[i] for i, t in enumerate(tables)]))
        var_pred.append(
            np.concatenate(
                [
                    np.full(16, t.var0) + truth[i] * (1 - truth[i]) * (m - 1) / (n - 1)
                    for i, t in enumerate(tables)
                ]
            )
        )
    errs = np.array(errs)
    var_pred = np.mean(var_pred, axis=0)
    z = errs.mean(axis=0) / np.sqrt(var_pred / T)
    # the per-cell z scores are ~N(0, 1): their mean over 48 cells has SE 1/sqrt(48); bound 5 SE
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    ratio = (errs**2).mean() / var_pred.mean()
    assert abs(ratio - 1) < 5 * np.sqrt(2 / (T * errs.shape[1]))


def test_hdg_accuracy_on_cell_aligned_queries():
    # Whole-cell 2-D queries have no non-uniformity error. On a population whose cells are all far from 0,
    # Norm-Sub does not clip, so Phases 2-3 are linear and unbiased and consistency only lowers the
    # variance: the answer's error std is at most answer_std (the raw closed form, plus the sampling term).
    # Over T trials: |mean error| < 5 sd / sqrt(T) and MSE < sd^2 (1 + 5 sqrt(2 / T)).
    sizes = [16, 16, 16]
    g = rng()
    n, T = 40_000, 30
    rec = np.stack([g.integers(0, 16, n) for _ in sizes], axis=1)
    rec[: n // 4, 1] = rec[: n // 4, 0]  # some correlation between attributes 0 and 1
    mech = make_mechanism("hdg", 3.0, sizes, n, g1=8, g2=4)
    qs = [RangeQuery(((0, 0, 7), (1, 4, 11))), RangeQuery(((0, 4, 15), (2, 0, 3))), RangeQuery(((1, 8, 11),))]
    truth = true_answers(rec, qs)
    answers, stds = [], []
    for _ in range(T):
        model = mech.fit(rec, rng=g)
        answers.append(model.answer(qs))
        stds.append(model.answer_std(qs))
    err = np.array(answers) - truth
    m = mech.n_groups
    sd = np.sqrt(np.mean(np.array(stds) ** 2, axis=0) + truth * (1 - truth) * (m - 1) / (n - 1))
    assert np.all(np.abs(err.mean(axis=0)) < 5 * sd / np.sqrt(T))
    assert np.all((err**2).mean(axis=0) < sd**2 * (1 + 5 * np.sqrt(2 / T)))


def test_calm_is_full_resolution_and_sums():
    sizes = [6, 8]
    g = rng()
    rec = _records(4000, sizes, g)
    mech = make_mechanism("calm", 1.0, sizes, len(rec))
    assert mech.n_groups == 1 and mech.specs[0].gran == (8, 8)
    model = mech.fit(rec, rng=g)
    q = RangeQuery(((0, 1, 4), (1, 2, 6)))
    assert model.answer([q])[0] == pytest.approx(model.grids[0][1:5, 2:7].sum())


def test_uni_answers_volume():
    mech = make_mechanism("uni", 1.0, [10, 20], 10)
    model = mech.fit(np.zeros((10, 2), int), rng=0)
    assert model.n_users == 10
    q = RangeQuery(((0, 0, 4), (1, 5, 9)))
    assert model.answer([q])[0] == pytest.approx(0.5 * 0.25)


def test_parse_task():
    task = parse_task(
        {
            "task_id": "t1",
            "mechanism": "hdg",
            "epsilon": 1.0,
            "attributes": [{"name": "age", "domain_size": 64}, {"name": "income", "domain_size": 100}],
            "expected_users": 1_000_000,
            "granularity": {"g1": 16, "g2": 4},
        }
    )
    mech = task.make_mechanism()
    assert (mech.g1, mech.g2, mech.padded_sizes) == (16, 4, (64, 128))
    assert parse_task(task.to_dict()) == task
    with pytest.raises(ValueError, match="granularity applies"):
        parse_task({**task.to_dict(), "mechanism": "calm"})
    with pytest.raises(ValueError, match="missing 'expected_users'"):
        parse_task({k: v for k, v in task.to_dict().items() if k != "expected_users"})
    with pytest.raises(ValueError, match="power of two"):
        parse_task({**task.to_dict(), "granularity": {"g1": 10}})
    assert len(attribute_pairs(4)) == 6


def test_encode_one_client_call():
    mech = make_mechanism("hdg", 1.0, [8, 8, 8], 1000)
    g1, r1 = mech.encode_one([1, 2, 3], user_id=12345, rng=rng())
    g2, _ = mech.encode_one([1, 2, 3], user_id=12345, rng=rng())
    assert g1 == g2 == int(mech.assign_groups(1, user_ids=[12345])[0])
    assert len(r1) == 1
    ok, _ = mech.group_oracle(g1).validate(r1)
    assert ok.all()
    with pytest.raises(ValueError, match="outside"):
        mech.encode_one([1, 2, 8], rng=0)


def test_parse_task_accepts_collection_task_keys():
    raw = {
        "task_id": "t2",
        "mechanism": "tdg",
        "epsilon": 0.5,
        "description": "x",
        "schema_version": 2,
        "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 16}],
        "expected_users": 10_000,
        "params": {"oracle": "auto"},
        "n_groups": 1,
    }
    assert parse_task(raw).make_mechanism().oracle_name == "auto"
    with pytest.raises(ValueError, match="n_groups 3 does not match"):
        parse_task({**raw, "n_groups": 3})
    with pytest.raises(ValueError, match="unknown option"):
        parse_task({**raw, "params": {"bogus": 1}})


def test_encode_rows_follow_record_order_within_group():
    # replace the oracle by the identity so the reports show the projected cells themselves
    from ldp.reports import Reports

    class Identity:
        def encode(self, values, *, rng=None):
            return Reports(values=np.asarray(values))

    mech = make_mechanism("tdg", 1.0, [4, 4, 4], 100, g2=2)
    mech._oracles = {4: Identity()}
    rec = np.array([[0, 0, 0], [3, 3, 3], [0, 3, 1], [2, 1, 0], [1, 2, 3]])
    groups = np.array([0, 1, 0, 2, 0])
    reports = mech.encode(rec, rng=rng(), groups=groups)
    assert sorted(reports) == [0, 1, 2]
    # group 0 = pair (0, 1): records 0, 2, 4 -> cells (0,0)=0, (0,1)=1, (0,1)=1
    assert reports[0].values.tolist() == [0, 1, 1]
    assert reports[1].values.tolist() == [3]  # pair (0, 2), record 1: (1, 1)
    assert reports[2].values.tolist() == [0]  # pair (1, 2), record 3: values (1, 0) -> cell (0, 0)


@pytest.mark.parametrize("method", ["hdg", "tdg", "calm"])
def test_finalize_with_missing_groups(method):
    sizes = [8, 8, 8]
    g = rng()
    rec = _records(3000, sizes, g)
    mech = make_mechanism(method, 1.0, sizes, len(rec))
    empty = mech.finalize({})
    q = [RangeQuery(((0, 0, 3), (1, 0, 7))), RangeQuery(((0, 0, 7), (1, 0, 7), (2, 0, 7)))]
    # no reports at all: uniform grids
    np.testing.assert_allclose(empty.answer(q), [0.5, 1.0], atol=1e-6)
    assert empty.answer([]).shape == (0,)
    accs = mech.accumulate(mech.encode(rec, rng=g))
    del accs[0]
    model = mech.finalize(accs)
    assert np.all(np.isfinite(model.answer(q)))
    d = json.loads(json.dumps(model.to_dict()))
    first = d["grids_1d"][0] if method == "hdg" else d["grids_2d"][0]  # group 0's grid
    assert first["var0"] is None
