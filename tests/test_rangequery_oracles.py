"""Per-grid and per-level oracle choice of range mechanisms, the chosen oracles' variances, large epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp.datasets.multi import sample_records
from ldp.oracles import make_oracle, olh_buckets
from ldp.rangequery.grids import group_oracle_for, weighted_sum_variance
from ldp.rangequery.queries import RangeQuery, random_queries, true_answers
from ldp.rangequery.registry import make_mechanism

SS = np.random.SeedSequence(20261201)
KEYS = [c.spawn_key for c in SS.spawn(8)]


def _rng(i: int, *extra: int) -> np.random.Generator:
    """Fresh generator for child ``i`` of SS (optionally a grandchild ``extra``), reproducible on reuse."""
    return np.random.default_rng(np.random.SeedSequence(SS.entropy, spawn_key=(*KEYS[i], *extra)))


def test_grids_choose_oracle_per_grid():
    # eps = 1, n = 20,000, d = 4: the guideline gives g2 = 2 (4-cell 2-D grids) and g1 = 8.
    mech = make_mechanism("hdg", 1.0, [64] * 4, 20_000)
    assert (mech.g1, mech.g2) == (8, 2)
    for g, spec in enumerate(mech.specs):
        want = group_oracle_for("auto", 1.0, spec.n_cells)
        assert mech.group_oracle(g).name == want.name
    four = mech.group_oracle(mech.n_groups - 1)
    olh4 = make_oracle("olh", 1.0, 4)
    assert four.name == "grr" and four.variance(1) < 0.5 * olh4.variance(1)  # GRR 2x better on 4 cells
    # the paper-literal choice: OLH everywhere, GF(2) family, g from olh_buckets
    lit = make_mechanism("hdg", 1.0, [64] * 4, 20_000, oracle="olh")
    for g, spec in enumerate(lit.specs):
        o = lit.group_oracle(g)
        assert o.name == "olh" and o.family.name == "gf2-affine" and o.g == olh_buckets(1.0, spec.n_cells)
    with pytest.raises(ValueError, match="unknown oracle"):
        make_mechanism("tdg", 1.0, [64] * 4, 20_000, oracle="nope")


@pytest.mark.parametrize("method", ["lhio", "hio"])
def test_hierarchies_choose_oracle_per_level(method):
    mech = make_mechanism(method, 1.0, [16] * 3, 10_000, branching=2, oracle="auto")
    for g in range(mech.n_groups):
        dom = math.prod(mech.group_shape(g))
        if method == "hio" and not mech.is_dense(g):
            assert mech.group_oracle(g).name == "olh"
        else:
            assert mech.group_oracle(g).name == group_oracle_for("auto", 1.0, dom).name
    names = {mech.group_oracle(g).name for g in range(mech.n_groups)}
    assert "grr" in names  # the 2- and 4-cell levels
    default = make_mechanism(method, 1.0, [16] * 3, 10_000, branching=2)
    assert {default.group_oracle(g).name for g in range(default.n_groups)} == names  # auto is the default
    lit = make_mechanism(method, 1.0, [16] * 3, 10_000, branching=2, oracle="olh")
    assert {lit.group_oracle(g).name for g in range(lit.n_groups)} == {"olh"}


def test_grid_answer_std_uses_the_grids_oracle():
    # TDG's noise std is the weighted set-sum variance of the oracle the grid ran (GRR here: 4-cell grids),
    # with its covariances, at the grid's frequencies and number of reports.
    sizes, n = [16, 16, 16], 6_000
    rec = sample_records("gaussian:0.5", n, sizes, rng=_rng(0))
    mech = make_mechanism("tdg", 1.0, sizes, n, g2=4)
    model = mech.fit(rec, rng=_rng(1))
    q = RangeQuery(((0, 2, 9), (1, 0, 7)))  # rows: cell 0 half, cell 1 whole, cell 2 half; cols: 0, 1 whole
    p = model.pairs.index((0, 1))
    oracle = mech.group_oracle(p)
    w = np.multiply.outer([0.5, 1.0, 0.5, 0.0], [1.0, 1.0, 0.0, 0.0]).reshape(-1)
    want = weighted_sum_variance(oracle, model.counts[p], w, np.clip(model.grids[p].reshape(-1), 0, 1))
    assert model.answer_std([q])[0] == pytest.approx(math.sqrt(want), rel=1e-12)
    # whole cells only: exactly the oracle's set-sum variance
    q2 = RangeQuery(((0, 0, 7), (1, 4, 15)))
    mask = np.zeros((4, 4), dtype=bool)
    mask[:2, 1:] = True
    v = oracle.variance_of_sum(model.counts[p], mask.reshape(-1), np.clip(model.grids[p].reshape(-1), 0, 1))
    assert model.answer_std([q2])[0] == pytest.approx(math.sqrt(v), rel=1e-12)


def test_weighted_sum_variance_matches_brute_force():
    # For GRR the variance of sum_v w_v f_v is Var(w_Y) / (n (p - q)^2) averaged over users: brute force.
    o = make_oracle("grr", 1.0, 6)
    f = np.array([0.3, 0.1, 0.2, 0.05, 0.15, 0.2])
    w = np.array([1.0, 0.5, 0.5, 0.0, 1.0, 0.25])
    num = 0.0
    for u in range(6):
        probs = np.full(6, o.q)
        probs[u] = o.p
        num += f[u] * (probs @ w**2 - (probs @ w) ** 2)
    assert weighted_sum_variance(o, 100, w, f) == pytest.approx(num / (100 * (o.p - o.q) ** 2), rel=1e-12)


@pytest.mark.statistical
def test_hio_answer_std_matches_empirical_std():
    """HIO's answers are linear in its groups' estimates (no post-processing), so answer_std is the exact
    perturbation-noise std given the users' groups, up to evaluating the O(f) terms at the estimated
    frequencies. With the group assignment fixed and T = 1500 seeded perturbations the sample variance of
    near-normal answers has relative standard deviation sqrt(2 / (T - 1)) = 0.0365, so each query's ratio of
    sample variance to the mean predicted variance must lie within 1 +- 5 x 0.0365 (z = 5). The levels run
    GRR (2 and 4 cells) and SS (8 to 64 cells), whose cell estimates are correlated: with the sum of the
    per-cell variances instead (covariances ignored) the ratios measured 0.91 to 1.31 (the last query 1.31),
    with the set-sum variances 0.95 to 1.03."""
    sizes, n, trials = [8, 8], 3_000, 1_500
    rec = sample_records("gaussian:0.8", n, sizes, rng=_rng(2))
    mech = make_mechanism("hio", 1.0, sizes, n, branching=2, clip=False)
    assert {mech.group_oracle(g).name for g in range(mech.n_groups)} >= {"grr"}
    groups = mech.assign_groups(n, rng=_rng(3), balanced=True)
    qs = [
        RangeQuery(((0, 1, 4), (1, 2, 6))),
        RangeQuery(((0, 0, 3),)),
        RangeQuery(((0, 2, 5), (1, 0, 3))),
        RangeQuery(((1, 3, 3),)),
        RangeQuery(((0, 4, 7), (1, 4, 7))),
    ]
    ans, var = np.empty((trials, len(qs))), np.empty((trials, len(qs)))
    for t in range(trials):
        model = mech.finalize(mech.accumulate(mech.encode(rec, rng=_rng(4, t), groups=groups)))
        ans[t] = model.answer(qs)
        var[t] = model.answer_std(qs) ** 2
    ratio = ans.var(axis=0, ddof=1) / var.mean(axis=0)
    tol = 5 * math.sqrt(2 / (trials - 1))
    assert np.all(np.abs(ratio - 1) < tol), ratio


@pytest.mark.parametrize("method", ["calm", "lhio", "hio"])
@pytest.mark.parametrize("oracle", ["auto", "olh"])
def test_large_epsilon_on_64_value_attributes(method, oracle):
    """eps = 8 on three attributes of 64 values (the 64 x 64 marginals have 4096 cells): construction,
    encoding, accumulation, finalize and answers, with every accumulator small (OLH's GF(2) table is
    2 x 4096 int64 cells; GRR's 4096)."""
    sizes, n = [64, 64, 64], 3_000
    rec = sample_records("gaussian:0.8", n, sizes, rng=_rng(5))
    mech = make_mechanism(method, 8.0, sizes, n, oracle=oracle)
    for g in range(mech.n_groups):
        if method != "hio" or mech.is_dense(g):
            assert mech.group_oracle(g).accumulator_bytes <= 1 << 20
    model = mech.fit(rec, rng=_rng(6))
    qs = random_queries(sizes, 30, 2, omega=0.5, rng=_rng(7))
    ans = model.answer(qs)
    assert np.all(np.isfinite(ans)) and ans.min() >= 0 and ans.max() <= 1
    truth = true_answers(rec, qs)
    uni = np.array([q.volume(sizes) for q in qs])
    assert np.mean(np.abs(ans - truth)) < np.mean(np.abs(uni - truth))


def test_range_auto_keeps_reports_small_and_skips_hadamard():
    # at eps = 0.4 the plain auto takes OUE (4096-bit reports) for a 64 x 64 marginal; range auto takes OLH
    assert make_oracle("auto", 0.4, 4096).name == "oue"
    o = group_oracle_for("auto", 0.4, 4096)
    assert o.name == "olh" and o.report_bits <= 256
    assert make_oracle("auto", 0.2, 4096).name == "hr"
    assert group_oracle_for("auto", 0.2, 4096).name == "olh"
    # a bigger budget lets OUE through; explicit names are taken as they are
    assert group_oracle_for("auto", 0.4, 4096, max_report_bits=1 << 13).name == "oue"
    assert group_oracle_for("hr", 0.2, 4096).name == "hr"
    assert group_oracle_for("auto", 1.0, 4).name == "grr"
    with pytest.raises(ValueError, match="max_report_bits"):
        make_mechanism("calm", 1.0, [16, 16], 1000, max_report_bits=0)
