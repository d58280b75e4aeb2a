"""Tests of the range-query baselines HIO, LHIO and MSW (Yang et al., VLDB 2021, Section 3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp.rangequery.base import model_from_dict
from ldp.rangequery.hio import Hierarchy, HIOMechanism, tree_constrained_inference
from ldp.rangequery.lhio import LHIOMechanism, hierarchy_2d_inference
from ldp.rangequery.msw import MSWMechanism
from ldp.rangequery.queries import RangeQuery, random_queries, true_answers
from ldp.rangequery.registry import make_mechanism

SS = np.random.SeedSequence(3072021)
SEEDS = SS.spawn(16)


def _correlated(n, d, c, rho, rng):
    cov = rho * np.ones((d, d)) + (1 - rho) * np.eye(d)
    x = rng.multivariate_normal(np.zeros(d), cov, n)
    return np.clip(np.floor((x + 3) / 6 * c), 0, c - 1).astype(np.int64)


def _uni(queries, sizes):
    return np.array([q.volume(sizes) for q in queries])


# ---- hierarchy ---------------------------------------------------------------------------------------------


def test_hierarchy_sizes():
    assert Hierarchy(64, 5).h == 3 and Hierarchy(64, 5).sizes == (1, 3, 13, 64)
    assert Hierarchy(125, 5).sizes == (1, 5, 25, 125)
    assert Hierarchy(1, 5).sizes == (1,)
    assert Hierarchy(8, 2).sizes == (1, 2, 4, 8)


def test_decompose_hand_cases():
    h = Hierarchy(64, 5)
    assert h.decompose(0, 63) == [(0, 0)]
    assert h.decompose(25, 49) == [(1, 1)]
    assert h.decompose(60, 63) == [(2, 12)]  # the partial last node of level 2
    assert h.decompose(50, 63) == [(1, 2)]  # the partial last node of level 1
    assert h.decompose(3, 47) == [(2, i) for i in range(1, 9)] + [(3, 3), (3, 4), (3, 45), (3, 46), (3, 47)]
    assert h.decompose(7, 7) == [(3, 7)]
    with pytest.raises(ValueError):
        h.decompose(5, 64)


def _min_cover_size(h: Hierarchy, lo: int, hi: int) -> int:
    """Brute force: fewest hierarchy nodes whose disjoint union is [lo, hi] (dynamic programming)."""
    nodes = []
    for lv in range(h.h + 1):
        a, b = h.node_bounds(lv)
        nodes += list(zip(a.tolist(), b.tolist()))
    best = {lo: 0}
    for start in range(lo, hi + 1):
        if start not in best:
            continue
        for a, b in nodes:
            if a == start and b <= hi:
                best[b + 1] = min(best.get(b + 1, 10**9), best[start] + 1)
    return best[hi + 1]


@pytest.mark.parametrize("c, b", [(7, 2), (25, 5), (30, 3), (64, 5)])
def test_decompose_exact_cover_and_minimal(c, b):
    h = Hierarchy(c, b)
    for lo in range(c):
        for hi in range(lo, c):
            nodes = h.decompose(lo, hi)
            covered = []
            for lv, i in nodes:
                a, z = h.node_bounds(lv)
                covered += range(a[i], z[i] + 1)
            assert sorted(covered) == list(range(lo, hi + 1))
            if c <= 30 and (lo + hi) % 3 == 0:  # subsample the brute force
                assert len(nodes) == _min_cover_size(h, lo, hi)


# ---- constrained inference ---------------------------------------------------------------------------------


def _tree_matrix(h: Hierarchy) -> np.ndarray:
    """Node-by-leaf 0/1 matrix: row of node = its leaves, levels stacked root first."""
    rows = []
    for lv in range(h.h + 1):
        a, z = h.node_bounds(lv)
        for i in range(len(a)):
            r = np.zeros(h.c)
            r[a[i] : z[i] + 1] = 1
            rows.append(r)
    return np.array(rows)


@pytest.mark.parametrize("c, b", [(4, 2), (5, 2), (9, 3), (13, 5)])
def test_constrained_inference_is_least_squares(c, b):
    # Hand-checkable reference: ordinary least squares over the leaves, x_node ~ A theta (equal variances).
    h = Hierarchy(c, b)
    rng = np.random.default_rng(SEEDS[0])
    levels = [rng.normal(size=m) for m in h.sizes]
    out = tree_constrained_inference(levels, h)
    a = _tree_matrix(h)
    theta = np.linalg.lstsq(a, np.concatenate(levels), rcond=None)[0]
    np.testing.assert_allclose(out[-1], theta, atol=1e-10)
    for lv in range(h.h):  # parent = sum of children after inference
        kids = np.add.reduceat(out[lv + 1], np.arange(h.sizes[lv]) * b)
        np.testing.assert_allclose(out[lv], kids, atol=1e-12)


def test_constrained_inference_hand_case():
    # b = 2, c = 4: root 1.0, level 1 (0.6, 0.2), leaves (0.3, 0.1, 0.2, 0.3).
    # Bottom-up z: level 1 = (2/3 x + 1/3 S) = (2/3*0.6 + 1/3*0.4, 2/3*0.2 + 1/3*0.5) = (0.5333.., 0.3);
    # var(level 1) = 2/3; root z = (1.0 + 0.8333../(4/3)) / (1 + 1/(4/3)) = 0.92857...
    # Top-down: level 1 gets (0.92857 - 0.83333)/2 each -> (0.58095, 0.34762); leaves split their parent's
    # surplus equally: (0.58095 - 0.4)/2 = 0.090476 -> (0.390476, 0.190476);
    # (0.34762 - 0.5)/2 = -0.07619 -> (0.12381, 0.22381).
    h = Hierarchy(4, 2)
    levels = [np.array([1.0]), np.array([0.6, 0.2]), np.array([0.3, 0.1, 0.2, 0.3])]
    out = tree_constrained_inference(levels, h)
    np.testing.assert_allclose(out[0], [0.9285714285714286])
    np.testing.assert_allclose(out[1], [0.5809523809523809, 0.3476190476190476])
    np.testing.assert_allclose(out[2], [0.3904761904761905, 0.1904761904761905, 0.1238095238095238,
                                        0.2238095238095238])


@pytest.mark.statistical
def test_constrained_inference_reduces_variance():
    # 2,000 seeded trials of unit-variance noise on every node of the b=5, c=125 hierarchy. Range sums over
    # all 1-D intervals of length 40 from the raw hierarchy (decomposition) vs from the inferred leaves.
    # Least squares is the BLUE, so its MSE must be lower; with 2,000 trials the MSE estimates have relative
    # SE about sqrt(2/2000) ~ 3%, so requiring a 20% reduction cannot flake if the expected gain (~2x) holds.
    h = Hierarchy(125, 5)
    rng = np.random.default_rng(SEEDS[1])
    trials = 2000
    truth = [np.zeros((m, trials)) for m in h.sizes]
    noisy = [t + rng.normal(size=t.shape) for t in truth]
    inferred = tree_constrained_inference(noisy, h)
    err_raw, err_ci = [], []
    for lo in range(0, 85, 7):
        hi = lo + 39
        raw = sum(noisy[lv][i] for lv, i in h.decompose(lo, hi))
        err_raw.append(np.mean(raw**2))
        err_ci.append(np.mean(inferred[-1][lo : hi + 1].sum(axis=0) ** 2))
    assert np.mean(err_ci) < 0.8 * np.mean(err_raw)


def test_2d_inference_consistent_and_exact_on_truth():
    hj, hk = Hierarchy(7, 2), Hierarchy(5, 3)
    rng = np.random.default_rng(SEEDS[2])
    fine = rng.random((7, 5))
    fine /= fine.sum()

    def level_tables(f):
        out = []
        for lj in range(hj.h + 1):
            row = []
            for lk in range(hk.h + 1):
                t = np.add.reduceat(f, hj.node_bounds(lj)[0], axis=0)
                row.append(np.add.reduceat(t, hk.node_bounds(lk)[0], axis=1))
            out.append(row)
        return out

    exact = level_tables(fine)
    np.testing.assert_allclose(hierarchy_2d_inference(exact, hj, hk), fine, atol=1e-12)
    noisy = [[t + rng.normal(scale=0.05, size=t.shape) for t in row] for row in exact]
    est = hierarchy_2d_inference(noisy, hj, hk)
    assert est.shape == (7, 5)


# ---- mechanisms --------------------------------------------------------------------------------------------


def test_group_counts():
    assert HIOMechanism(1.0, [64] * 3, 1000).n_groups == 4**3 - 1
    assert HIOMechanism(1.0, [8, 8], 1000, branching=2).n_groups == 4**2 - 1
    assert LHIOMechanism(1.0, [64] * 4, 1000).n_groups == 6 * (4**2 - 1)
    assert MSWMechanism(1.0, [64] * 4, 1000).n_groups == 4
    with pytest.raises(ValueError):
        HIOMechanism(1.0, [8, 8], 1000, branching=1)
    with pytest.raises(ValueError):
        LHIOMechanism(1.0, [8, 8], 1000, colour="red")


@pytest.mark.statistical
def test_hio_answers_within_closed_form_std():
    # HIO's answer is a sum of unbiased OLH cell estimates: error / answer_std ~ N(0, ~1). 40 queries,
    # all must be within 5 standard deviations (false-failure probability ~ 40 * 6e-7).
    d, c, n = 3, 8, 120_000
    rng = np.random.default_rng(SEEDS[3])
    rec = _correlated(n, d, c, 0.6, rng)
    mech = HIOMechanism(2.0, [c] * d, n, branching=2)
    model = mech.fit(rec, rng=rng)
    qs = random_queries([c] * d, 20, 2, 0.5, rng=rng) + random_queries([c] * d, 20, 3, 0.3, rng=rng)
    ans, std = model.answer(qs), model.answer_std(qs)
    assert np.all(np.isfinite(std)) and np.all(std > 0)
    z = (ans - true_answers(rec, qs)) / std
    assert np.max(np.abs(z)) < 5
    # the full-domain query is exactly 1 (the all-root cell is known)
    assert model.answer([RangeQuery(((0, 0, c - 1),))])[0] == 1.0


@pytest.mark.parametrize("eps", [2.0, 0.7])
def test_hio_lazy_path_equals_dense_path(eps):
    # Same reports, every group dense (OLH, its transform table) vs every group lazy (support counts from the
    # stored reports): the same unbiased estimator, so identical answers. Both use the GF(2) affine family
    # (g = 8 at eps = 2, g = 2 at eps = 0.7).
    d, c, n = 3, 8, 20_000
    rng = np.random.default_rng(SEEDS[4])
    rec = _correlated(n, d, c, 0.5, rng)
    dense = HIOMechanism(eps, [c] * d, n, branching=2, dense_limit=10**6, oracle="olh")
    lazy = HIOMechanism(eps, [c] * d, n, branching=2, dense_limit=1)
    assert dense.group_oracle(dense.n_groups - 1).hash.p == 2
    assert dense.group_oracle(dense.n_groups - 1).g == lazy.group_oracle(lazy.n_groups - 1).g
    groups = dense.assign_groups(n, rng=1, balanced=True)
    reports = dense.encode(rec, rng=2, groups=groups)
    m_dense = dense.finalize(dense.accumulate(reports))
    m_lazy = lazy.finalize(lazy.accumulate(reports))
    qs = random_queries([c] * d, 15, 2, 0.4, rng=3)
    np.testing.assert_allclose(m_lazy.answer(qs), m_dense.answer(qs), atol=1e-9)
    # lazy accumulators merge by concatenation
    g = 5
    parts = [lazy.add(g, lazy.create_accumulator(g), reports[g].take(slice(i, None, 2))) for i in (0, 1)]
    assert lazy.merge(g, parts).n == len(reports[g])
    # model round trip (both paths)
    for m in (m_dense, m_lazy):
        again = model_from_dict(json.loads(json.dumps(m.to_dict())))
        np.testing.assert_allclose(again.answer(qs), m.answer(qs), atol=1e-12)


def test_lhio_beats_uniform_and_roundtrips():
    # Correlated Gaussian (rho = 0.8), d = 3, c = 16, n = 150,000, eps = 2. Measured 2-D MAE ~0.02-0.03 vs
    # Uni ~0.2; we require MAE < 0.35 x Uni (generous, but a broken hierarchy or inference lands near Uni).
    d, c, n = 3, 16, 150_000
    rng = np.random.default_rng(SEEDS[5])
    rec = _correlated(n, d, c, 0.8, rng)
    model = make_mechanism("lhio", 2.0, [c] * d, n).fit(rec, rng=rng)
    qs = random_queries([c] * d, 60, 2, 0.5, rng=rng)
    truth = true_answers(rec, qs)
    mae = np.abs(model.answer(qs) - truth).mean()
    assert mae < 0.35 * np.abs(_uni(qs, [c] * d) - truth).mean()
    # the pair tables are consistent on every shared attribute after the consistency step
    m01, m02 = model.tables[(0, 1)].sum(axis=1), model.tables[(0, 2)].sum(axis=1)
    np.testing.assert_allclose(m01, m02, atol=1e-9)
    q3 = random_queries([c] * d, 10, 3, 0.5, rng=rng)
    a3 = model.answer(q3)
    assert np.all((a3 >= 0) & (a3 <= 1))
    again = model_from_dict(json.loads(json.dumps(model.to_dict())))
    np.testing.assert_allclose(again.answer(qs + q3), model.answer(qs + q3), atol=1e-12)


def test_msw_on_independent_data():
    # Independent attributes (MSW's product assumption holds): 2-D and 3-D answers. Measured MAE ~0.005 vs
    # Uni ~0.15; we require MAE < 0.2 x Uni.
    d, c, n = 3, 32, 150_000
    rng = np.random.default_rng(SEEDS[6])
    rec = np.clip(np.rint(rng.normal(12, 5, (n, d))), 0, c - 1).astype(np.int64)
    model = make_mechanism("msw", 2.0, [c] * d, n).fit(rec, rng=rng)
    qs = random_queries([c] * d, 40, 2, 0.3, rng=rng) + random_queries([c] * d, 40, 3, 0.3, rng=rng)
    truth = true_answers(rec, qs)
    mae = np.abs(model.answer(qs) - truth).mean()
    assert mae < 0.2 * np.abs(_uni(qs, [c] * d) - truth).mean()
    std = model.answer_std(qs)  # a parametric bootstrap of the EM(S) estimates (seeded from the model)
    assert np.all(np.isfinite(std) & (std > 0))
    again = model_from_dict(json.loads(json.dumps(model.to_dict())))
    np.testing.assert_allclose(again.answer(qs), model.answer(qs), atol=1e-12)
    np.testing.assert_array_equal(again.answer_std(qs), std)


def test_msw_reports_are_square_wave_grid_messages():
    mech = MSWMechanism(1.0, [16, 16], 100)
    rec = np.array([[0, 15]] * 50)
    reps = mech.encode(rec, rng=0)
    top = mech.group_oracle(0).grid.cells - 1
    for r in reps.values():
        assert r.reals is not None and r.reals.dtype == np.float64
        assert np.all((r.reals >= 0) & (r.reals <= top) & (r.reals == np.floor(r.reals)))
    assert math.isclose(mech.group_oracle(1).epsilon, 1.0)


_MSW_TASK = {"task_id": "r-msw", "kind": "range", "mechanism": "msw", "epsilon": 1.0, "expected_users": 1000,
             "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 16}]}


def test_msw_tasks_are_version_3_and_version_2_is_retired():
    from ldp.task import TaskError, parse_task, resolve_task

    assert parse_task(_MSW_TASK).schema_version == 3
    assert parse_task({**_MSW_TASK, "schema_version": 3}).schema_version == 3
    with pytest.raises(TaskError, match="float_reals_retired"):
        parse_task({**_MSW_TASK, "schema_version": 2})
    for method in ("hdg", "tdg", "calm", "hio", "lhio", "uni", "lsa"):  # categorical reports: version 2
        task = {**_MSW_TASK, "mechanism": method}
        assert parse_task(task).schema_version == 2
        with pytest.raises(TaskError, match="version 3 is msw's integer grid wire"):
            parse_task({**task, "schema_version": 3})
    # a resolved MSW task parses again (its groups' oracles are the grid Square Wave)
    again = parse_task(resolve_task(parse_task(_MSW_TASK)))
    assert again.schema_version == 3 and again.resolved["oracles"][0]["mechanism"] == "sw"


def test_msw_version_2_and_off_grid_reports_are_dead_lettered():
    from ldp.aggregate import make_aggregator
    from ldp.task import parse_task
    from wire.records import reports_to_records
    from wire.validate import TaskReportValidator

    task = parse_task(_MSW_TASK)
    mech = task.make_mechanism()
    good = mech.group_oracle(0).encode(np.arange(6, dtype=np.int64), rng=5)
    t = np.full(6, 1_700_000_000_000)
    recs = reports_to_records(task.task_id, good, t, 0, schema_version=3)
    old = reports_to_records(task.task_id, good, t, 0, schema_version=2)
    top = float(mech.group_oracle(0).grid.cells - 1)
    forged = [dict(recs[0], reals=[v]) for v in (0.5, -0.0, top + 1, -1.0)]
    out = TaskReportValidator(make_aggregator(task)).validate(recs + old + forged)
    assert out.n_accepted == 6
    assert out.reason_counts == {"wrong_schema_version": 6, "invalid_payload": 4}
    details = [d["detail"] for d in out.dead_letters if d["reason"] == "invalid_payload"]
    assert details == ["reals_off_grid", "reals_off_grid", "reals_out_of_range", "reals_out_of_range"]


@pytest.mark.statistical
def test_2d_inference_reduces_variance():
    # 200 seeded trials of unit-variance noise on every cell of every 2-dim level of a 25 x 25 hierarchy
    # (b = 5). 2-D range sums from the raw hierarchy (cross product of the decompositions, as HIO answers) vs
    # from the inferred finest table. Measured gain ~6x (MSE 3.1 vs 18); the MSE over 200 trials x 9 queries
    # has relative SE well under 10%, so "at least 25% lower" cannot flake while a no-op inference fails.
    hj = hk = Hierarchy(25, 5)
    rng = np.random.default_rng(SEEDS[7])
    boxes = [(lo, lo + 14) for lo in (0, 4, 10)]
    err_raw, err_ci = [], []
    for _ in range(200):
        noisy = [[rng.normal(size=(hj.sizes[a], hk.sizes[b])) for b in range(3)] for a in range(3)]
        fine = hierarchy_2d_inference(noisy, hj, hk)
        for lo_j, hi_j in boxes:
            for lo_k, hi_k in boxes:
                nodes_j, nodes_k = hj.decompose(lo_j, hi_j), hk.decompose(lo_k, hi_k)
                raw = sum(noisy[a][b][i, k] for a, i in nodes_j for b, k in nodes_k)
                err_raw.append(raw**2)
                err_ci.append(fine[lo_j : hi_j + 1, lo_k : hi_k + 1].sum() ** 2)
    assert np.mean(err_ci) < 0.75 * np.mean(err_raw)


@pytest.mark.parametrize("eps", [0.7, 2.0])
def test_stored_reports_olh_matches_oracle_olh(eps):
    # The lazy-group encoder must be OLH: same p, q, g and hash as ldp.oracles.OLH on the same domain. Its
    # draws are made in the same order as OLH's, so with the same seed the reports are identical (if the core
    # OLH ever changes its draw order this comparison must become a distributional one).
    from ldp.oracles import OLH, olh_buckets
    from ldp.rangequery.hio import StoredReportsOLH

    lazy, ref = StoredReportsOLH(eps, 500), OLH(eps, 500)
    assert (lazy.g, lazy.p, lazy.q) == (ref.g, ref.p, ref.q)
    assert lazy.family.name == ref.family.name == "gf2-affine"
    for dom in (2, 3, 5, 6):  # small domains: the same capped g
        assert StoredReportsOLH(eps, dom).g == OLH(eps, dom).g
    # a domain whose OLH table would be refused is fine here (the accumulator is the reports)
    big = StoredReportsOLH(eps, 64**6)
    assert big.g == olh_buckets(eps, 64**6) and big.accumulator_cells == 0
    vals = np.random.default_rng(SEEDS[8]).integers(0, 500, 3000)
    a, b = lazy.encode(vals, rng=11), ref.encode(vals, rng=11)
    np.testing.assert_array_equal(a.seeds, b.seeds)
    np.testing.assert_array_equal(a.values, b.values)
    ok, _ = lazy.validate(a)
    assert ok.all()
    assert lazy.variance(1000) == pytest.approx(ref.variance(1000))


@pytest.mark.parametrize("p,k", [(2, 3), (3, 1), (5, 2)])
def test_olh_support_matches_brute_force(p, k):
    # Both code paths of olh_support (binary masks; digit dot products for legacy GF(p) hashes, p > 2) count
    # the reports whose hash of the cell equals their bucket.
    from ldp.hashing import LinearHash
    from ldp.rangequery.hio import olh_support

    rng = np.random.default_rng(SEEDS[9])
    hsh = LinearHash(300, p, k)
    seeds = rng.integers(0, 2**63, 400, dtype=np.uint64)
    ys = rng.integers(0, hsh.g, 400)
    cells = np.array([0, 1, 7, 150, 299])
    want = [np.count_nonzero(hsh.hash(seeds, np.full(400, v)) == ys) for v in cells]
    np.testing.assert_array_equal(olh_support(hsh, seeds, ys, cells), want)
