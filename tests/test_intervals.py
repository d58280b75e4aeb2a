"""Tests of ldp.intervals: intervals valid for the published (post-processed) numbers.

Statistical checks are seeded from one SeedSequence; their tolerances are z = 5 standard deviations of the
estimate they check, stated next to each assertion.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp import intervals as iv
from ldp.oracles import make_oracle
from ldp.postprocess import norm_sub, postprocess

SEEDS = np.random.SeedSequence(20261201).spawn(8)
Z = 1.959963984540054
Z_TOL = 5.0
Z_128 = 3.546337887363537  # Phi^-1(1 - 0.05 / 256): Bonferroni over 128 values


def test_z_and_normal_interval():
    assert iv.z_value() == pytest.approx(Z, abs=1e-12)
    lo, hi = iv.normal_interval(np.array([0.1, -0.02]), np.array([0.01, 0.02]))
    np.testing.assert_allclose(lo, [0.1 - Z * 0.01, -0.02 - Z * 0.02])
    np.testing.assert_allclose(hi, [0.1 + Z * 0.01, -0.02 + Z * 0.02])
    with pytest.raises(ValueError, match="level"):
        iv.z_value(1.0)


def test_clipped_interval_contains_the_published_number_and_covers_whenever_the_normal_one_does():
    rng = np.random.default_rng(SEEDS[0])
    truth = rng.dirichlet(np.full(50, 0.3))
    sd = np.full(50, 0.02)
    for _ in range(20):
        f = truth + sd * rng.standard_normal(50)
        pub = np.maximum(f, 0.0)
        lo, hi = iv.clipped_interval(f, sd, pub)
        nlo, nhi = iv.normal_interval(f, sd)
        assert np.all((lo <= pub) & (pub <= hi)) and np.all((lo >= 0) & (hi <= 1))
        normal_covers = (nlo <= truth) & (truth <= nhi)
        assert np.all(((lo <= truth) & (truth <= hi))[normal_covers])
    # a cut value's lower end is 0 (the published 0 is inside)
    lo, _ = iv.clipped_interval(np.array([0.05]), np.array([0.01]), np.array([0.0]), cut=np.array([True]))
    assert lo[0] == 0.0


@pytest.mark.statistical
def test_clipped_std_matches_simulation():
    rng = np.random.default_rng(SEEDS[1])
    mu, s, m = np.array([-0.01, 0.0, 0.02, 0.1]), np.array([0.02, 0.02, 0.02, 0.02]), 200_000
    x = mu[:, None] + s[:, None] * rng.standard_normal((4, m))
    for cut, t, y in ((False, 0.0, np.maximum(x, 0.0)), (True, 0.03, np.where(x >= 0.03, x, 0.0))):
        got = iv.clipped_std(mu, s, t, cut=cut)
        want = y.std(axis=1)
        # the sample std of m draws has sd about std * sqrt((kurtosis - 1) / (4 m)); kurtosis <= 50 here
        tol = Z_TOL * want * math.sqrt(49 / (4 * m)) + 1e-12
        assert np.all(np.abs(got - want) <= tol), (got, want)


def test_inverse_of_a_shift_and_of_a_floor():
    u = np.linspace(-0.05, 0.3, 36)
    delta = -0.025
    g = np.maximum(u + delta, 0.0)  # Norm-Sub's per-replica map
    theta = np.array([0.0, 0.1, 0.5, 0.2])
    up = iv._inverse(u, g, theta, True, True)
    lo = iv._inverse(u, g, theta, False, True)
    # a positive published value: the unbiased value that maps to it (beyond the samples: slope 1)
    np.testing.assert_allclose(up[1:], theta[1:] - delta, atol=1e-12)
    np.testing.assert_allclose(lo[1:], theta[1:] - delta, atol=1e-12)
    # the published 0: the largest unbiased value still pinned (the threshold -delta, up to the grid step),
    # and no lower end (the floor)
    assert -delta - 0.01 <= up[0] <= -delta and lo[0] == -np.inf
    # without a floor (Norm) a value below every sample is extrapolated
    assert iv._inverse(u, u + delta, np.array([-0.2]), False, False)[0] == pytest.approx(-0.2 - delta)


@pytest.mark.statistical
def test_simulated_replicas_have_the_closed_form_variances():
    rng = np.random.default_rng(SEEDS[2])
    o = make_oracle("grr", 1.0, 8)
    n, truth = 5000, np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.1, 0.05, 0.0])
    var = o.variance(n, truth)
    total = o.variance_of_sum(n, np.arange(8), f=truth)
    assert total == pytest.approx(0.0, abs=1e-15)  # GRR's estimates sum to exactly 1
    reps = np.array([iv.simulate_unbiased(truth, var, total, rng) for _ in range(4000)])
    np.testing.assert_allclose(reps.sum(axis=1), 1.0, atol=1e-12)
    # sample variance of m draws: sd = var * sqrt(2 / m); the zero-sum projection moves each variance by
    # w_v^2 / sum w (at most 20% here: the exact GRR covariance is also of this order)
    got = reps.var(axis=0)
    shrink = var**2 / var.sum()
    assert np.all(np.abs(got - (var - shrink)) <= Z_TOL * var * math.sqrt(2 / 4000))
    o2 = make_oracle("oue", 1.0, 8)
    var2 = o2.variance(n, truth)
    total2 = o2.variance_of_sum(n, np.arange(8), f=truth)
    reps2 = np.array([iv.simulate_unbiased(truth, var2, total2, rng) for _ in range(4000)])
    sv = reps2.sum(axis=1).var()
    assert abs(sv - total2) <= Z_TOL * total2 * math.sqrt(2 / 4000)


def _trial(o, truth_p, n, rng):
    vals = rng.choice(o.d, size=n, p=truth_p)
    truth = np.bincount(vals, minlength=o.d) / n
    est = o.estimate(o.add(o.create_accumulator(), o.encode(vals, rng=rng)))
    return truth, est


def test_frequency_intervals_are_deterministic_bounded_and_contain_the_published_numbers():
    rng = np.random.default_rng(SEEDS[3])
    o = make_oracle("olh", 1.0, 128)
    p = np.arange(1, 129, dtype=float) ** -1.1
    _, est = _trial(o, p / p.sum(), 5000, rng)
    for method in ("base", "base-pos", "base-cut", "norm", "norm-sub", "norm-mul", "norm-cut", "cls",
                   "mle-apx", "power", "power-ns"):
        opts = {"p": o.p, "q": o.q} if method == "mle-apx" else {}
        pub = postprocess(est.frequencies, method, variance=est.variance, n=est.n, **opts)
        a = iv.frequency_intervals(o, est, method, pub)
        b = iv.frequency_intervals(o, est, method, pub)
        assert a.ci_method == iv.ci_method_name(method, 128)
        np.testing.assert_array_equal(a.ci_low, b.ci_low)  # seeded from the counts
        np.testing.assert_array_equal(a.std, b.std)
        assert np.all((a.ci_low <= pub + 1e-15) & (pub - 1e-15 <= a.ci_high)), method
        if method not in ("base", "norm"):  # the others publish numbers in [0, 1]
            assert np.all((a.ci_low >= 0) & (a.ci_high <= 1)), method
        np.testing.assert_array_equal(a.unbiased, est.frequencies)
        # the rows' noise flag is the domain-wide (Bonferroni over d = 128) one: z = Phi^-1(1 - 0.05/256)
        np.testing.assert_array_equal(a.ci_includes_zero, ~(est.frequencies >= Z_128 * est.std))
        assert a.replicas == (iv.replica_count(128) if method in iv.SIMULATED_METHODS else 0)
    assert iv.replica_count(1024) == 64 and iv.replica_count(1 << 16) == 32 and iv.replica_count(1 << 22) == 8
    assert iv.ci_method_name("norm-sub", iv.MAX_SIMULATED_DOMAIN + 1) == "clipped-hull"


def _zipf(d):
    p = np.arange(1, d + 1, dtype=float) ** -1.1
    return p / p.sum()


@pytest.mark.statistical
def test_published_interval_coverage_of_norm_sub_base_and_base_cut():
    """Coverage of the true frequencies over the whole domain, T = 64 seeded trials of OUE (d = 32,
    n = 4000, eps = 1, Zipf 1.1). Tolerance: the binomial standard deviation of a coverage estimate from
    N = T d = 2048 (value, trial) pairs, sqrt(c (1 - c) / N) at c = 0.95 (0.0048), times z = 5, around the
    target band [0.90, 0.98]."""
    rng = np.random.default_rng(SEEDS[4])
    o = make_oracle("oue", 1.0, 32)
    trials, hits = 64, {"base": 0, "norm-sub": 0, "base-cut": 0}
    for _ in range(trials):
        truth, est = _trial(o, _zipf(32), 4000, rng)
        for m in hits:
            pub = postprocess(est.frequencies, m, variance=est.variance, n=est.n)
            r = iv.frequency_intervals(o, est, m, pub)
            hits[m] += int(((r.ci_low <= truth) & (truth <= r.ci_high)).sum())
    n_pairs = trials * 32
    tol = Z_TOL * math.sqrt(0.95 * 0.05 / n_pairs)
    cov = {k: v / n_pairs for k, v in hits.items()}
    for m in hits:
        assert 0.90 - tol <= cov[m] <= 0.98 + tol, cov


def test_norm_sub_interval_covers_the_shifted_top_values_where_the_naive_one_does_not():
    """Norm-Sub shifts the top values down (OLH, d = 1024, n = 10000, eps = 1, Zipf 1.1): the published
    interval covers the 4 most frequent values' truths at >= 0.90 while +-1.96 std around the published
    number does not. T = 64 trials, N = 256 pairs; tolerance z = 5 binomial standard deviations at
    c = 0.95, sqrt(0.95 * 0.05 / 256) * 5 = 0.068."""
    rng = np.random.default_rng(SEEDS[5])
    o = make_oracle("olh", 1.0, 1024)
    trials, top = 64, 4
    ours = naive = 0
    for _ in range(trials):
        truth, est = _trial(o, _zipf(1024), 10_000, rng)
        pub = norm_sub(est.frequencies)
        r = iv.frequency_intervals(o, est, "norm-sub", pub)
        ours += int(((r.ci_low[:top] <= truth[:top]) & (truth[:top] <= r.ci_high[:top])).sum())
        naive += int((np.abs(pub[:top] - truth[:top]) <= Z * est.std[:top]).sum())
    n_pairs = trials * top
    tol = Z_TOL * math.sqrt(0.95 * 0.05 / n_pairs)
    assert ours / n_pairs >= 0.90 - tol, (ours, naive)
    assert naive / n_pairs < 0.90 - tol, (ours, naive)


def test_answer_interval_contains_the_clipped_answer():
    lo, hi = iv.answer_interval(np.array([0.0, 0.5, 1.0, 0.2]), np.array([0.01, 0.02, 0.01, np.nan]),
                                raw=np.array([-0.03, 0.5, 1.02, 0.2]))
    assert lo[0] == 0.0 and hi[0] == 0.0 and hi[0] >= 0.0
    np.testing.assert_allclose([lo[1], hi[1]], [0.5 - Z * 0.02, 0.5 + Z * 0.02])
    assert lo[2] == 1.0 and hi[2] == 1.0  # 1.02 -+ z 0.01 clipped: [1, 1], the published 1 inside
    assert math.isnan(lo[3]) and math.isnan(hi[3])


@pytest.mark.parametrize("method", ["hdg", "lhio", "msw"])
def test_range_std_for_every_dimension_and_method(method):
    """lambda = 3 answers (Weighted Update) and LHIO / MSW answers had no std; now every answer has one,
    reproducible from the model (seeded from its contents) and kept by its JSON form."""
    import json as _json

    from ldp.rangequery.queries import parse_queries
    from ldp.rangequery.registry import make_mechanism, model_from_dict

    rng = np.random.default_rng(SEEDS[6])
    c, n = 16, 30_000
    rec = np.clip(np.rint(rng.normal(8, 3, (n, 3))), 0, c - 1).astype(np.int64)
    opts = {"em_resolution": 2} if method == "msw" else {}  # a small EM keeps the bootstrap fast
    model = make_mechanism(method, 1.0, [c] * 3, n, **opts).fit(rec, rng=rng)
    q3 = {"a0": [2, 9], "a1": [4, 12], "a2": [0, 8]}
    qs = parse_queries([{"a0": [0, 7]}, {"a0": [2, 9], "a1": [4, 12]}, q3], ["a0", "a1", "a2"], [c] * 3)
    std = model.answer_std(qs)
    assert np.all(np.isfinite(std) & (std > 0) & (std < 0.5)), std
    again = model_from_dict(_json.loads(_json.dumps(model.to_dict())))
    np.testing.assert_array_equal(again.answer_std(qs), std)
    assert model.std_method(3) in ("simulated-wu", "simulated-wu-grid-noise-only", "bootstrap-em-noise-only")
