"""Baselines of ldp.sparse.baselines: closed-form variance (spec acceptance 8), unbiasedness, privacy
parameters, merges. Tolerances: z = 5 for means; MSE within +-10% of the closed form, which is at
least 4 standard errors of a mean of >= 4096 squared errors (sqrt(2 / 4096) = 2.2%)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp.sparse import SparseVectors
from ldp.sparse.baselines import (
    PCKV,
    Gaussian,
    Harmony,
    KFold,
    Sampling,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    duchi_bits,
)
from ldp.sparse.params import duchi_c

ROOT = np.random.SeedSequence(20261202)
_children = iter(ROOT.spawn(64))


def rng() -> np.random.Generator:
    return np.random.default_rng(next(_children))


def population(n: int, k: int, r: np.random.Generator, support: int = 1000) -> SparseVectors:
    """Each user: between k/2 and k distinct ids from [0, support), values uniform in [-1, 1]."""
    nnz = r.integers(k // 2, k + 1, n)
    keys = np.argsort(r.random((n, support)), axis=1)[:, :k]
    mask = np.arange(k)[None, :] < nnz[:, None]
    items = keys[mask].astype(np.uint64)
    vals = r.uniform(-1, 1, items.size)
    return SparseVectors(np.concatenate(([0], np.cumsum(nnz))), items, vals)


CASES = [
    ("kfold", "event", {}),
    ("kfold", "user", {}),
    ("sampling", "user", {}),
    ("harmony", "user", {}),
    ("pckv", "user", {}),
    ("gaussian", "event", {}),
    ("gaussian", "user", {"calibration": "analytic"}),
]
CLASSES = {"kfold": KFold, "sampling": Sampling, "harmony": Harmony, "pckv": PCKV, "gaussian": Gaussian}


@pytest.mark.parametrize("name,privacy,kw", CASES)
@pytest.mark.statistical
def test_baseline_mse_matches_closed_form(name, privacy, kw):
    r = rng()
    n, d, k = 5000, 4096, 8  # the relative MSE tolerance depends on the number of ids, not on n
    vec = population(n, k, r)
    mech = CLASSES[name](1.0, d, k, privacy, **kw)
    items = np.arange(d, dtype=np.uint64)
    if name == "gaussian":
        # the real dense client, chunked (n * d cells), against the closed form
        acc = mech.create_accumulator(items)
        for lo in range(0, n, 1000):
            rep, _ = mech.encode(vec.take(slice(lo, lo + 1000)), rng=r)
            mech.add(acc, rep)
        est = mech.estimate(acc)
    else:
        rep, _ = mech.encode(vec, rng=r)
        est = mech.estimate_reports(rep, items)
    err = est.mean - vec.mean_at(items)
    theory = mech.variance(vec, items)
    assert abs(err.mean()) < 5 * math.sqrt(theory.mean() / d) * 2  # x2: errors mildly correlated across ids
    ratio = (err**2).mean() / theory.mean()
    assert abs(ratio - 1) < 0.10, ratio
    owned = slice(0, 1000)
    assert abs((err[owned] ** 2).mean() / theory[owned].mean() - 1) < 4 * math.sqrt(2 / 1000) + 0.01


def test_second_moments_match_the_spec_table():
    k, eps = 64, 1.0
    c = duchi_c(eps)
    assert KFold(eps, 10**5, k, "event").second_moment() == pytest.approx(299.7, abs=0.05)
    assert KFold(eps, 10**5, k, "user").bit_epsilon == pytest.approx(eps / k)
    assert Sampling(eps, 10**5, k, "user").second_moment() == pytest.approx(19180, rel=1e-3)
    assert Gaussian(eps, 10**5, k, "user").second_moment() == pytest.approx(7188, rel=1e-3)
    assert Gaussian(eps, 10**5, k, "event").second_moment() == pytest.approx(112.3, rel=1e-3)
    assert Harmony(eps, 10**5, k, "user").second_moment() == pytest.approx(10**5 * c * c)
    p = PCKV(eps, 10**5, k, "user")
    assert p.second_moment() == pytest.approx(4 * (10**5 + k) / math.expm1(eps) ** 2, rel=0.01)
    assert KFold(eps, 10**5, k, "event").report_bits == 64 + k
    assert Sampling(eps, 10**5, k, "user").report_bits == 65
    assert Harmony(eps, 10**5, k, "user").report_bits == 18


def test_pckv_is_grr_with_the_stated_budget_split():
    for eps in (0.5, 1.0, 3.0):
        p = PCKV(eps, 5000, 16, "user")
        # key perturbation: GRR on d' keys with budget eps1 = ln(l (e^eps - 1)/2 + 1)
        assert p.a / p.bq == pytest.approx(math.exp(p.eps1))
        e2 = p.ell * math.expm1(eps) + 1
        assert p.p == pytest.approx(e2 / (e2 + 1))
        assert p.dp == 5016


def test_gaussian_calibrations():
    for eps in (0.5, 1.0, 3.0):
        for delta in (1e-5, 1e-6):
            l2 = math.sqrt(2 * 128)
            s = analytic_gaussian_sigma(eps, delta, l2)
            phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
            got = phi(l2 / (2 * s) - eps * s / l2) - math.exp(eps) * phi(-l2 / (2 * s) - eps * s / l2)
            assert got <= delta * (1 + 1e-6)
            s2 = s * (1 - 1e-4)
            worse = phi(l2 / (2 * s2) - eps * s2 / l2) - math.exp(eps) * phi(-l2 / (2 * s2) - eps * s2 / l2)
            assert worse > delta  # smallest such sigma
            assert classical_gaussian_sigma(eps, delta, l2) == pytest.approx(
                math.sqrt(2 * math.log(1.25 / delta)) * l2 / eps
            )
    with pytest.raises(ValueError):
        Gaussian(1.0, 100, 4, "event", delta=0)


def test_duchi_bits_sampler():
    r = rng()
    t = np.full(400_000, 0.4)
    b = duchi_bits(t, 1.0, r).astype(float) * duchi_c(1.0)
    assert abs(b.mean() - 0.4) < 5 * math.sqrt(duchi_c(1.0) ** 2 / t.size)


@pytest.mark.parametrize("cls", [KFold, Sampling])
def test_one_bin_table_equals_query_and_merges(cls):
    r = rng()
    n, d, k = 3000, 2048, 8
    vec = population(n, k, r, support=d)
    mech = cls(1.0, d, k, "event")
    rep, _ = mech.encode(vec, rng=r)
    t = mech.add(mech.create_accumulator(), rep)
    q = mech.add(mech.create_accumulator(np.arange(d)), rep)
    assert np.array_equal(mech.estimate(t).mean, mech.estimate(q).mean)
    halves = [mech.add(mech.create_accumulator(), rep.take(slice(a, b))) for a, b in ((0, 1234), (1234, n))]
    assert mech.merge(halves) == t


def test_harmony_and_pckv_merge_exactly():
    r = rng()
    vec = population(5000, 8, r)
    for mech in (Harmony(1.0, 2000, 8, "user"), PCKV(1.0, 2000, 8, "user")):
        rep, _ = mech.encode(vec, rng=r)
        whole = mech.add(mech.create_accumulator(), rep)
        parts = [
            mech.add(mech.create_accumulator(), rep.take(slice(a, b))) for a, b in ((0, 100), (100, 5000))
        ]
        merged = mech.merge(parts)
        assert merged.n == whole.n and np.array_equal(merged.sums, whole.sums)


def test_pckv_original_estimator_runs_and_is_clipped():
    r = rng()
    vec = population(20_000, 8, r)
    m = PCKV(2.0, 2000, 8, "user", estimator="original")
    rep, _ = m.encode(vec, rng=r)
    est = m.estimate_reports(rep, np.arange(2000))
    assert np.all(np.abs(est.mean) <= 1.0)


def test_factory_builds_every_mechanism():
    from ldp.sparse.mechanisms import SPARSE_MECHANISMS, make_sparse_mechanism

    r = rng()
    vec = population(500, 8, r)
    for name in SPARSE_MECHANISMS:
        m = make_sparse_mechanism(name, epsilon=1.0, domain_size=1000, sparsity=8, privacy="user")
        rep, st = m.encode(vec, rng=r)
        est = m.estimate(m.add(m.create_accumulator(np.arange(50)), rep))
        assert est.n == 500 and est.mean.shape == (50,) and np.all(est.std > 0)
        assert m.describe()["mechanism"] == name
    with pytest.raises(ValueError, match="unknown"):
        make_sparse_mechanism("nope", epsilon=1.0, domain_size=10, sparsity=2)
    with pytest.raises(ValueError, match="no option"):
        make_sparse_mechanism("harmony", epsilon=1.0, domain_size=10, sparsity=2, rule="paper")
    with pytest.raises(ValueError, match="no delta"):
        make_sparse_mechanism("kfold", epsilon=1.0, domain_size=10, sparsity=2, delta=1e-6)
