"""Tests of ldp.square_wave: exact densities, eps-LDP audit, encoder law, accumulator, EM(S) recovery; the
integer grid wire (SquareWaveGrid): exact eps-LDP in rationals, exact matrix, validator, no float tell."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import beta

from ldp.numeric.grid import exp_lower
from ldp.reports import Reports
from ldp.square_wave import (
    SquareWave,
    SquareWaveGrid,
    SWOperator,
    em_estimate,
    em_estimate_batch,
    perturb_unit,
    sw_closeness,
    sw_densities,
    transition_matrix,
)

SS = np.random.SeedSequence(20210704)
SEEDS = SS.spawn(16)
EPSILONS = [0.1, 0.5, 1.0, 2.0, 5.0]


@pytest.mark.parametrize("eps", EPSILONS)
def test_exact_densities(eps):
    b, p, q = sw_densities(eps)
    ee = math.exp(eps)
    assert b == pytest.approx((eps * ee - ee + 1) / (2 * ee * (ee - 1 - eps)), rel=1e-12)
    assert p / q == pytest.approx(ee, rel=1e-12)  # density ratio is exactly e^eps
    assert 2 * b * p + q * 1.0 == pytest.approx(1.0, rel=1e-12)  # total mass over [-b, 1+b]
    assert 0 < b <= 0.5


def test_closeness_small_epsilon_limit():
    # b -> 1/2 as eps -> 0 (numerator and denominator both ~ eps^2 / 2 * 2).
    assert sw_closeness(1e-6) == 0.5
    assert sw_closeness(1e-3) == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ValueError):
        sw_closeness(0.0)


@pytest.mark.parametrize("mode", ["center", "uniform"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_matrix_columns_and_exact_ratio(mode, eps):
    m = transition_matrix(eps, 16, 40, mode)
    np.testing.assert_allclose(m.sum(axis=0), 1.0, rtol=1e-12)
    # Any output bin's probability under two inputs differs by at most e^eps (exact, not sampled).
    ratio = m.max(axis=1) / m.min(axis=1)
    assert ratio.max() <= math.exp(eps) * (1 + 1e-12)


def test_empirical_ldp_audit():
    # Inputs at the two ends of [0, 1] are the most distinguishable. Output bucketed in 8 equal bins;
    # one-sided Clopper-Pearson bounds at level 1e-6: fail if even lower(P[y|v1]) / upper(P[y|v2]) > e^eps.
    eps, n_draw = 1.0, 200_000
    b, _, _ = sw_densities(eps)
    rng = np.random.default_rng(SEEDS[0])
    y1 = perturb_unit(np.zeros(n_draw), eps, rng=rng)
    y2 = perturb_unit(np.ones(n_draw), eps, rng=rng)
    edges = np.linspace(-b, 1 + b, 9)
    c1 = np.histogram(y1, edges)[0]
    c2 = np.histogram(y2, edges)[0]
    alpha = 1e-6
    for a, bb in ((c1, c2), (c2, c1)):
        lower = beta.ppf(alpha, a, n_draw - a + 1)
        upper = beta.ppf(1 - alpha, bb + 1, n_draw - bb)
        assert np.all(lower / upper <= math.exp(eps))
    # and the audit is not vacuous: the point ratio of the end bins is close to e^eps
    assert (c1[0] / c2[0]) > 0.9 * math.exp(eps)


@pytest.mark.parametrize("mode", ["center", "uniform"])
@pytest.mark.statistical
def test_encoder_follows_transition_matrix(mode):
    # For a fixed input value, output-bin counts ~ Binomial(N, M[j, x]); each bin within 5 standard errors.
    eps, c, n_draw = 1.0, 8, 100_000
    sw = SquareWave(eps, c, input_mode=mode, em_resolution=1, output_bins=20)
    rng = np.random.default_rng(SEEDS[1])
    for x in (0, 3, 7):
        rep = sw.encode(np.full(n_draw, x), rng=rng)
        counts = np.bincount(sw.bin_index(rep.reals), minlength=sw.output_bins)
        expected = n_draw * sw.matrix()[:, x]
        se = np.sqrt(n_draw * sw.matrix()[:, x] * (1 - sw.matrix()[:, x]))
        assert np.all(np.abs(counts - expected) < 5 * se + 1e-9)


def test_accumulator_merge_equals_single_pass_and_validation():
    sw = SquareWave(1.0, 16)
    rng = np.random.default_rng(SEEDS[2])
    rep = sw.encode(rng.integers(0, 16, 5000), rng=rng)
    whole = sw.add(sw.create_accumulator(), rep)
    parts = [sw.add(sw.create_accumulator(), rep.take(slice(i, i + 1000))) for i in range(0, 5000, 1000)]
    merged = sw.merge(parts)
    assert merged.n == whole.n == 5000
    np.testing.assert_array_equal(merged.counts, whole.counts)
    ok, reasons = sw.validate(Reports(reals=np.array([0.5, 2.0, np.nan, -sw.b])))
    assert ok.tolist() == [True, False, False, True]
    assert reasons[1] is not None
    with pytest.raises(ValueError):
        sw.add(sw.create_accumulator(), Reports(reals=np.array([5.0])))
    with pytest.raises(ValueError):
        sw.encode(np.array([16]))
    with pytest.raises(ValueError):
        sw.encode(np.array([0.5]))


def test_em_noiseless_recovers_input():
    # With the exact expected output histogram (N -> infinity), plain EM converges to the true input.
    c = 16
    f = np.exp(-0.5 * ((np.arange(c) - 6) / 2.5) ** 2)
    f /= f.sum()
    m = transition_matrix(2.0, c, 48, "center")
    est, _, _ = em_estimate(1e6 * (m @ f), m, smoothing=False, tol=1e-14, max_iter=50_000)
    assert np.abs(est - f).sum() < 0.02


@pytest.mark.parametrize("eps, bound", [(1.0, 0.05), (2.0, 0.02)])
@pytest.mark.statistical
def test_ems_recovers_known_distribution(eps, bound):
    # 300,000 reports of a two-bump distribution on c = 32. The EM(S) estimate is biased (smoothing), so no
    # closed-form variance applies; we assert the Kolmogorov distance (max CDF error) is below ``bound``.
    # Measured over seeds: 0.017-0.023 at eps = 1 and 0.004-0.008 at eps = 2; the uniform guess has distance
    # 0.18 here, so the bounds are meaningful.
    c, n = 32, 300_000
    rng = np.random.default_rng(SEEDS[3 + int(eps)])
    x = np.where(rng.random(n) < 0.6, rng.normal(8, 2.5, n), rng.normal(22, 3, n))
    x = np.clip(np.rint(x), 0, c - 1).astype(np.int64)
    truth = np.bincount(x, minlength=c) / n
    sw = SquareWave(eps, c)
    est = sw.estimate_reports(sw.encode(x, rng=rng))
    assert est.converged and est.n == n
    assert est.distribution.min() >= 0 and est.distribution.sum() == pytest.approx(1.0)
    ks = np.abs(np.cumsum(est.distribution) - np.cumsum(truth)).max()
    ks_uniform = np.abs(np.cumsum(np.full(c, 1 / c)) - np.cumsum(truth)).max()
    assert ks_uniform > 0.15
    assert ks < bound, ks


def test_batched_em_matches_single_runs():
    # estimate_many runs the EM of several histograms at once; each row must follow the single-run iteration
    # (same iteration count, same estimate up to float round-off). The third accumulator is empty (uniform).
    sw = SquareWave(0.5, 16)
    rng = np.random.default_rng(SEEDS[6])
    accs = [
        sw.add(sw.create_accumulator(), sw.encode(rng.integers(0, 16, 20_000), rng=rng)),
        sw.add(sw.create_accumulator(), sw.encode(np.clip(rng.poisson(4, 30_000), 0, 15), rng=rng)),
        sw.create_accumulator(),
    ]
    many = sw.estimate_many(accs)
    for acc, est in zip(accs, many):
        one = sw.estimate(acc)
        assert est.iterations == one.iterations and est.converged == one.converged
        np.testing.assert_allclose(est.distribution, one.distribution, atol=1e-9)


def test_parameter_validation():
    with pytest.raises(ValueError):
        SquareWave(1.0, 0)
    with pytest.raises(ValueError):
        SquareWave(-1.0, 8)
    with pytest.raises(ValueError):
        SquareWave(1.0, 8, input_mode="middle")
    with pytest.raises(ValueError):
        SquareWave(1.0, 8, em_resolution=0)
    with pytest.raises(ValueError):
        perturb_unit(np.array([1.5]), 1.0)


@pytest.mark.parametrize(("eps", "c", "m"), [(1.0, 512, 775), (0.1, 64, 97), (5.0, 300, 333), (0.5, 10, 17),
                                           (1.0, 1, 3)])
def test_the_operator_equals_the_dense_matrix_products(eps, c, m):
    """SWOperator's linear-time products equal those of transition_matrix (uniform input) up to round-off,
    for vectors and for batches of columns."""
    mat, op = transition_matrix(eps, c, m, "uniform"), SWOperator(eps, c, m)
    rng = np.random.default_rng(SEEDS[14])
    f, r = rng.random((c, 5)), rng.random((m, 5))
    assert op.shape == mat.shape
    np.testing.assert_allclose(op.forward(f), mat @ f, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(op.backward(r), mat.T @ r, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(op.forward(f[:, 0]), mat @ f[:, 0], rtol=1e-10, atol=1e-14)


def test_em_with_the_operator_matches_the_dense_em():
    """The EM (one histogram and a batch) gives the same estimate, iterations and stopping with the operator
    as with the dense matrix; SquareWave's estimator uses the operator, SquareWaveGrid its exact matrix."""
    mech = SquareWave(1.0, 128)
    rng = np.random.default_rng(SEEDS[13])
    acc = mech.add(mech.create_accumulator(), mech.encode(rng.binomial(127, 0.3, 50_000), rng=rng))
    dense, it_d, _ = em_estimate(acc.counts, mech.matrix(), tol=1e-8)
    fast, it_f, conv = em_estimate(acc.counts, mech.em_matrix(), tol=1e-8)
    assert isinstance(mech.em_matrix(), SWOperator) and conv
    assert it_f == it_d and np.abs(fast - dense).max() < 1e-9
    batch = np.stack([acc.counts, acc.counts[::-1]])
    f_d, i_d, _ = em_estimate_batch(batch, mech.matrix(), tol=1e-8)
    f_f, i_f, _ = em_estimate_batch(batch, mech.em_matrix(), tol=1e-8)
    assert (i_d == i_f).all() and np.abs(f_d - f_f).max() < 1e-9 and np.abs(f_f[0] - fast).max() < 1e-12
    assert isinstance(SquareWaveGrid(1.0, 16).em_matrix(), np.ndarray)


def test_em_runs_with_one_blas_thread(monkeypatch):
    """The EM iterations run under a BLAS thread limit of 1, and the caller's limits are restored."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import ldp.square_wave as sw

    seen: list[list[int]] = []
    real = sw._em  # the one EM loop behind em_estimate and em_estimate_batch

    def spy(*a, **k):
        seen.append([i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"])
        return real(*a, **k)

    monkeypatch.setattr(sw, "_em", spy)
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    mech = SquareWave(1.0, 16)
    rng = np.random.default_rng(SEEDS[15])
    acc = mech.add(mech.create_accumulator(), mech.encode(rng.integers(0, 16, 2000), rng=rng))
    mech.estimate(acc)
    mech.estimate_many([acc, acc])
    assert len(seen) == 2
    assert before, "numpy's BLAS is not visible to threadpoolctl"
    assert all(threads == [1] * len(before) for threads in seen)
    assert [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"] == before


# ------------------------------------------------------------------------------------------------
# the wire form: integer grid messages (SquareWaveGrid, report schema version 3)
# ------------------------------------------------------------------------------------------------
def _exact_rows(sw: SquareWaveGrid) -> list[list[Fraction]]:
    """``P[m | x]`` of every value ``x`` and message ``m`` as exact rationals: the average of the sliding
    window's rows (``SlidingWindow.pmf``) over the value's input positions."""
    k = sw.positions
    ks = [k // 2] if sw.input_mode.value == "center" else range(k)
    rows = []
    for x in range(sw.d):
        pmfs = [sw.grid.pmf(x * k + j) for j in ks]
        rows.append([sum(col, Fraction(0)) / len(pmfs) for col in zip(*pmfs)])
    return rows


@pytest.mark.parametrize("mode", ["uniform", "center"])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 5.0])
def test_grid_is_exactly_eps_ldp_for_every_input_pair_and_message(mode, eps):
    # A small grid (c = 4 values, 3 positions each), every message, every ordered pair of inputs, in
    # rationals: P[m | x] <= L P[m | x'] with L = exp_lower(eps) <= e^eps, so the bound is exact.
    sw = SquareWaveGrid(eps, 4, input_mode=mode, em_resolution=1, positions=3)
    rows = _exact_rows(sw)
    assert all(sum(r) == 1 for r in rows)
    bound = exp_lower(eps)
    assert float(bound) <= math.exp(eps) * (1 + 1e-15) and sw.grid.ratio() <= bound  # L: e^eps to 2^-64
    worst = max(a / b for r1 in rows for r2 in rows for a, b in zip(r1, r2))
    assert worst <= bound
    # not vacuous: some message is in the window of (one position of) one value and of none of another's, so
    # the ratio reaches h / l (centre), at least (h / l + 2) / 3 (a mixture of 3 positions)
    assert worst == sw.grid.ratio() if mode == "center" else worst >= (sw.grid.ratio() + 2) / 3


@pytest.mark.parametrize("mode", ["uniform", "center"])
def test_grid_matrix_is_the_exact_discrete_distribution(mode):
    # The EM matrix against rationals: P[bin i | x] = sum of P[m | x] over the bin's cells (one rounding).
    sw = SquareWaveGrid(1.0, 4, input_mode=mode, em_resolution=1, positions=3, output_bins=7)
    rows = _exact_rows(sw)
    edges = sw.bin_edges()
    exact = np.array([[float(sum(rows[x][edges[i]:edges[i + 1]])) for x in range(sw.d)]
                      for i in range(sw.output_bins)])
    np.testing.assert_allclose(sw.matrix(), exact, rtol=1e-14, atol=0)
    m = np.arange(sw.grid.cells)
    assert np.all((edges[sw.bin_index(m.astype(np.float64))] <= m) & (m < edges[sw.bin_index(m) + 1]))
    big = SquareWaveGrid(1.0, 64)  # the default configuration: columns sum to 1 up to rounding
    np.testing.assert_allclose(big.matrix().sum(axis=0), 1.0, rtol=1e-12)
    assert big.matrix().shape == (big.output_bins, 64 * big.em_resolution)


@pytest.mark.parametrize("mode", ["center", "uniform"])
@pytest.mark.statistical
def test_grid_encoder_follows_its_matrix(mode):
    # For a fixed value, output-bin counts ~ Binomial(N, M[j, x]); each bin within 5 standard errors
    # (over 3 x 20 bins, a false failure has probability below 1e-4).
    eps, c, n_draw = 1.0, 8, 100_000
    sw = SquareWaveGrid(eps, c, input_mode=mode, em_resolution=1, output_bins=20)
    rng = np.random.default_rng(SEEDS[8])
    for x in (0, 3, 7):
        rep = sw.encode(np.full(n_draw, x), rng=rng)
        assert np.array_equal(rep.reals, np.floor(rep.reals))
        counts = np.bincount(sw.bin_index(rep.reals), minlength=sw.output_bins)
        p = sw.matrix()[:, x]
        assert np.all(np.abs(counts - n_draw * p) < 5 * np.sqrt(n_draw * p * (1 - p)))


def test_grid_validator_refuses_off_grid_reals_with_reasons():
    sw = SquareWaveGrid(1.0, 16)
    top = float(sw.grid.cells - 1)
    reals = np.array([0.0, top, 12.0, 12.5, -0.0, np.nan, np.inf, -1.0, top + 1, 0.25])
    ok, reasons = sw.validate(Reports(reals=reals))
    assert ok.tolist() == [True, True, True] + [False] * 7
    details = [r.detail for r in reasons[3:]]
    assert details == ["reals_off_grid"] * 4 + ["reals_out_of_range"] * 2 + ["reals_off_grid"]
    assert {r.code for r in reasons[3:]} == {"invalid_payload"}
    ok, reasons = sw.validate(Reports(reals=np.array([3, 4])))  # integers, not the wire's doubles
    assert not ok.any() and reasons[0].detail == "reals_not_float"
    assert sw.validate(Reports(values=np.array([1])))[1][0].code == "missing_field"
    with pytest.raises(ValueError, match="invalid"):
        sw.add(sw.create_accumulator(), Reports(reals=np.array([0.5])))
    spec = sw.payload.fields[0]
    assert (spec.low, spec.high, spec.outside) == (0.0, top, "invalid_payload")
    with pytest.raises(ValueError, match="positions"):
        SquareWaveGrid(1.0, 16, positions=3)  # not a multiple of em_resolution (16)


def test_grid_messages_carry_no_float_tell():
    # The attack of issue 27 on the old float reals: the binary exponent and trailing zero bits of each
    # double. Every message is a whole number below 2^53, so its bits are a function of the integer message
    # alone; at the ends of the domain the two inputs' (exponent, trailing zeros) cells stay within e^eps.
    eps, n = 1.0, 100_000
    sw = SquareWaveGrid(eps, 16)
    rng = np.random.default_rng(SEEDS[9])
    a = sw.encode(np.zeros(n, dtype=np.int64), rng=rng).reals
    b = sw.encode(np.full(n, 15, dtype=np.int64), rng=rng).reals

    def cells(y):
        m = y.astype(np.int64)
        low = m & -m
        tz = np.where(m == 0, 64, np.log2(np.where(low == 0, 1, low)).astype(np.int64))
        return np.frexp(y)[1] * 100 + tz

    ca, cb = cells(a), cells(b)
    keys = np.union1d(ca, cb)
    na = np.array([(ca == k).sum() for k in keys])
    nb = np.array([(cb == k).sum() for k in keys])
    big = (na > 2000) & (nb > 2000)  # cells with enough reports for a ratio: standard error under 3%
    assert big.sum() > 5
    assert np.all(np.abs(np.log(na[big] / nb[big])) < eps)  # ratio of cells: at most e^eps (+ noise << 0.3)
