"""Statistical and structural tests of the frequency oracles.

Tolerances (see DESIGN.md, "Correctness is statistical"):
* mean error: over T trials the mean error of value v has standard error sqrt(Var_v / T); we assert
  |mean| < 5 SE for every v (false-failure rate about 6e-7 per value, ~1e-4 for the whole file).
* variance: sum over trials and values of err^2 / Var_v (Eq. 4 at the true f) has mean 1 and relative
  standard error about sqrt(2 / (T d)) for near-independent errors; we assert it lies in
  1 +- 5 sqrt(2 / (T d)).
* eps-LDP audit: one-sided Clopper-Pearson bounds at level 1e-6 per output bucket; fail only when the
  ratio most favourable to the mechanism exceeds e^eps.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from scipy import stats

from ldp.oracles import (
    BLH,
    GRR,
    MECHANISMS,
    OLH,
    OUE,
    SUE,
    HadamardResponse,
    SubsetSelection,
    choose_oracle,
    default_olh_buckets,
    make_oracle,
    olh_buckets,
)
from ldp.reports import Reports

ROOT = np.random.SeedSequence(20261130)
NAMES = sorted(MECHANISMS)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(ROOT.entropy, spawn_key=key))


def _population(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Skewed population with some zero-frequency values."""
    w = 1.0 / np.arange(1, d + 1) ** 1.2
    w[d // 2 :: 3] = 0.0
    return rng.choice(d, size=n, p=w / w.sum())


# ------------------------------------------------------------------------------------------------
# exact parameters
# ------------------------------------------------------------------------------------------------
def test_exact_support_probabilities():
    eps, d = 1.3, 50
    e = math.exp(eps)
    assert GRR(eps, d).p == pytest.approx(e / (e + d - 1), rel=1e-15)
    assert GRR(eps, d).q == pytest.approx(1 / (e + d - 1), rel=1e-15)
    olh = OLH(eps, d)
    assert olh.g == 4  # e^1.3 + 1 = 4.67: of the powers of two around it, 4 has the lower variance
    assert olh.p == pytest.approx(e / (e + 3)) and olh.q == 0.25
    assert BLH(eps, d).g == 2 and BLH(eps, d).q == 0.5
    assert OUE(eps, d).p == 0.5 and OUE(eps, d).q == pytest.approx(1 / (e + 1))
    s = math.exp(eps / 2)
    assert SUE(eps, d).p == pytest.approx(s / (s + 1)) and SUE(eps, d).q == pytest.approx(1 / (s + 1))
    hr = HadamardResponse(eps, d)
    assert hr.K == 64 and hr.p == pytest.approx(e / (e + 1)) and hr.q == 0.5
    ss = SubsetSelection(eps, d, k=12)
    z = 12 * e + d - 12
    assert ss.p == pytest.approx(12 * e / z)
    assert ss.q == pytest.approx((12 * e * 11 / (d - 1) + (d - 12) * 12 / (d - 1)) / z)
    # the likelihood-ratio bounds that the privacy proofs use equal e^eps
    for o in (olh, BLH(eps, d)):
        assert o.p / ((1 - o.p) / (o.g - 1)) == pytest.approx(e)  # GRR on [g]
    assert hr.p / (1 - hr.p) == pytest.approx(e)
    for o in (OUE(eps, d), SUE(eps, d)):
        assert o.p * (1 - o.q) / ((1 - o.p) * o.q) == pytest.approx(e)


def test_olh_buckets_closed_form():
    # gf2-affine: the power of two around e^eps + 1 with the lower variance, capped at floor(log2 d) bits
    assert olh_buckets(1.0, 1024) == 4  # e + 1 = 3.72
    assert olh_buckets(0.5, 1024) == 2  # 2.65: Var(2) = 16.7 < Var(4) = 17.1
    assert olh_buckets(2.0, 1024) == 8
    assert olh_buckets(3.0, 1024) == 16  # 21.1
    assert olh_buckets(4.0, 1024) == 64  # 55.6
    assert olh_buckets(8.0, 4096) == 4096
    assert olh_buckets(20.0, 64) == 64 and olh_buckets(20.0, 100) == 64
    # the legacy family keeps its former defaults, so old tasks decode with the g they used
    assert olh_buckets(3.0, 1024, "linear-gf") == 23  # round(21.09) = 21 is not a prime power
    assert olh_buckets(4.0, 1024, "linear-gf") == 53
    assert olh_buckets(10.0, 6, "linear-gf") == 5
    with pytest.warns(DeprecationWarning):
        assert default_olh_buckets(3.0, 1024) == 16


# ------------------------------------------------------------------------------------------------
# unbiasedness and variance
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.statistical
def test_unbiased_and_variance_matches_closed_form(name):
    d, n, trials, eps = 16, 4000, 250, 1.0
    idx = NAMES.index(name)
    rng = _rng(1, idx)
    oracle = make_oracle(name, eps, d)
    values = _population(d, n, rng)
    truth = np.bincount(values, minlength=d) / n
    var = oracle.variance(n, truth)  # Eq. 4 at the true frequencies
    errs = np.empty((trials, d))
    covered = np.empty((trials, d), dtype=bool)
    reports = oracle.encode(np.tile(values, trials), rng=rng)
    for t in range(trials):
        est = oracle.estimate_reports(reports.take(slice(t * n, (t + 1) * n)))
        errs[t] = est.frequencies - truth
        lo, hi = est.ci(0.9)
        covered[t] = (lo <= truth) & (truth <= hi)
    se = np.sqrt(var / trials)
    assert np.all(np.abs(errs.mean(axis=0)) < 5 * se), (errs.mean(axis=0) / se).round(2)
    ratio = np.mean(errs**2 / var)
    tol = 5 * math.sqrt(2 / (trials * d))  # = 0.112
    assert abs(ratio - 1) < tol, ratio
    # CI coverage: 4000 nominal-90% intervals (n = 4000 reports: the normal approximation holds);
    # binomial SE sqrt(0.9 * 0.1 / 4000) = 0.0047, tolerance 5 SE = 0.024
    cov_tol = 5 * math.sqrt(0.9 * 0.1 / covered.size)
    assert abs(covered.mean() - 0.9) < cov_tol, covered.mean()


def test_estimate_fields_and_ci():
    rng = _rng(2)
    o = GRR(2.0, 8)
    vals = rng.integers(0, 8, 5000)
    est = o.estimate_reports(o.encode(vals, rng=rng))
    assert est.n == 5000 and est.frequencies.shape == (8,)
    assert np.allclose(est.variance, o.variance(5000))
    lo, hi = est.ci(0.95)
    assert np.allclose(hi - lo, 2 * 1.959963984540054 * est.std)
    assert np.allclose(est.frequencies.sum(), 1.0)  # GRR estimates always sum to one
    empty = o.estimate(o.create_accumulator())
    assert empty.n == 0 and np.isnan(empty.frequencies).all()
    with pytest.raises(ValueError):
        est.ci(1.5)


# ------------------------------------------------------------------------------------------------
# epsilon-LDP audit on the wire format
# ------------------------------------------------------------------------------------------------
def _wire_keys(oracle, reports: Reports, v1: int, v2: int) -> np.ndarray:
    """One integer per report naming its wire output exactly (order included), except for OLH, whose
    64-bit seed makes every output unique: there the key is a function of the output only (post-
    processing preserves eps-LDP), fine enough to expose a leak: which of v1, v2 the report supports
    and whether they collide."""
    if reports.bits is not None:
        bits = np.unpackbits(reports.bits, axis=1, count=oracle.d, bitorder="little").astype(np.int64)
        return bits @ (1 << np.arange(oracle.d))
    if reports.items is not None:  # the ordered tuple as it travels: NOT sorted here
        items = reports.items.astype(np.int64)
        return items @ (oracle.d ** np.arange(items.shape[1]))
    if reports.seeds is not None:
        h1 = oracle.hash.hash(reports.seeds, np.full(len(reports), v1))
        h2 = oracle.hash.hash(reports.seeds, np.full(len(reports), v2))
        return 4 * (h1 == h2) + 2 * (reports.values == h1) + (reports.values == h2)
    return reports.values


def _worst_ratio(k1: np.ndarray, k2: np.ndarray, level: float = 1e-6) -> float:
    """Largest Clopper-Pearson-conservative ratio P[y|v1]/P[y|v2] over outputs y (both ways)."""
    n1, n2 = len(k1), len(k2)
    keys = np.union1d(k1, k2)
    c1 = np.bincount(np.searchsorted(keys, k1), minlength=len(keys))
    c2 = np.bincount(np.searchsorted(keys, k2), minlength=len(keys))
    worst = 0.0
    for a, na, b, nb in ((c1, n1, c2, n2), (c2, n2, c1, n1)):
        lower = np.where(a > 0, stats.beta.ppf(level, np.maximum(a, 1), na - a + 1), 0.0)
        upper = stats.beta.ppf(1 - level, b + 1, np.maximum(nb - b, 1))
        worst = max(worst, float(np.max(lower / upper)))
    return worst


def _audit(oracle, v1: int, v2: int, n: int, rng, level: float = 1e-6) -> float:
    k1 = _wire_keys(oracle, oracle.encode(np.full(n, v1), rng=rng), v1, v2)
    k2 = _wire_keys(oracle, oracle.encode(np.full(n, v2), rng=rng), v1, v2)
    return _worst_ratio(k1, k2, level)


AUDIT_CONFIGS = [(1.0, 4), (1.0, 8), (2.0, 5), (0.5, 6)]


@pytest.mark.parametrize("eps,d", AUDIT_CONFIGS)
@pytest.mark.parametrize("name", NAMES)
def test_epsilon_ldp_audit_on_wire_output(name, eps, d):
    oracle = make_oracle(name, eps, d)
    ratio = _audit(oracle, 0, d - 1, 100_000, _rng(3, NAMES.index(name), AUDIT_CONFIGS.index((eps, d))))
    assert ratio <= math.exp(eps), ratio


@pytest.mark.parametrize("eps,d,k", [(1.0, 8, 2), (0.5, 6, 2), (0.5, 8, 3), (2.0, 16, 2)])
def test_subset_selection_audit_with_k_at_least_2(eps, d, k):
    """The ordered tuple as it travels, at configurations where SS reports k >= 2 items (the default k)."""
    oracle = SubsetSelection(eps, d)
    assert oracle.k == k
    rng = _rng(9, d, k)
    for v1, v2 in ((0, d - 1), (1, 2)):
        ratio = _audit(oracle, v1, v2, 200_000, rng)
        assert ratio <= math.exp(eps), (v1, v2, ratio)


def test_audit_catches_a_leak_of_one_and_a_half_e_eps():
    """Negative control: GRR whose likelihood ratio is 1.5 e^eps (p computed for eps + ln 1.5) fails."""
    eps, d = 1.0, 4
    leaky = GRR(eps, d)
    leaky.p = GRR(eps + math.log(1.5), d).p
    assert leaky.p / ((1 - leaky.p) / (d - 1)) == pytest.approx(1.5 * math.exp(eps))
    assert _audit(leaky, 0, 3, 100_000, _rng(4)) > math.exp(eps)


def test_audit_catches_the_ordered_subset_leak():
    """Negative control: the former SS encoder (true value always in the last slot, unsorted) fails the
    wire audit at eps = 1, d = 8 (k = 2), although its *set* is eps-LDP."""
    eps, d = 1.0, 8
    o = SubsetSelection(eps, d)
    rng = _rng(10)

    def leaky_encode(v: int, n: int) -> np.ndarray:
        sorted_items = o.encode(np.full(n, v), rng=rng).items.astype(np.int64)
        has = (sorted_items == v).any(axis=1)
        other = np.where(sorted_items[:, 0] == v, sorted_items[:, 1], sorted_items[:, 0])
        out = sorted_items.copy()
        out[has] = np.stack([other[has], np.full(has.sum(), v)], axis=1)  # value moved to the last slot
        return out @ (d ** np.arange(2))

    assert _worst_ratio(leaky_encode(0, 100_000), leaky_encode(7, 100_000)) > math.exp(eps)


def test_subset_selection_wire_format_is_sorted_and_validated():
    o = SubsetSelection(1.0, 64)
    r = o.encode(_rng(11).integers(0, 64, 2000), rng=_rng(12))
    assert np.all(np.diff(r.items.astype(np.int64), axis=1) > 0)  # strictly ascending
    ok, _ = o.validate(r)
    assert ok.all()
    ss = SubsetSelection(1.0, 10, k=3)
    ok, why = ss.validate(Reports(items=np.array([[0, 1, 2], [2, 1, 0], [1, 1, 2], [0, 3, 1], [0, 1, 10]])))
    assert ok.tolist() == [True, False, False, False, False]
    assert why[1] == "items not sorted ascending" and why[3] == "items not sorted ascending"
    assert why[2] == "duplicate items"
    assert "outside" in why[4]


# ------------------------------------------------------------------------------------------------
# accumulator laws
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_merge_shards_equals_one_pass_and_pickles(name):
    rng = _rng(5, NAMES.index(name))
    o = make_oracle(name, 1.5, 40)
    reports = o.encode(rng.integers(0, 40, 3000), rng=rng)
    whole = o.add(o.create_accumulator(), reports)
    cuts = np.sort(rng.choice(np.arange(1, 3000), size=6, replace=False))
    bounds = np.concatenate([[0], cuts, [3000]])
    pairs = zip(bounds[:-1], bounds[1:])
    shards = [o.add(o.create_accumulator(), reports.take(slice(a, b))) for a, b in pairs]
    for order in (range(len(shards)), reversed(range(len(shards))), rng.permutation(len(shards))):
        merged = o.merge([shards[i] for i in order])
        assert merged == whole
    # nested merges
    assert o.merge([o.merge(shards[:3]), o.merge(shards[3:])]) == whole
    assert o.merge([]) == o.create_accumulator()
    assert pickle.loads(pickle.dumps(whole)) == whole
    clone = pickle.loads(pickle.dumps(o))
    np.testing.assert_array_equal(clone.estimate(whole).frequencies, o.estimate(whole).frequencies)
    # the statistic's size does not grow with the number of reports
    assert whole.counts.shape == o.create_accumulator().counts.shape


@pytest.mark.parametrize(
    "g,d",
    [(2, 37), (4, 100), (8, 64), (3, 50), (5, 30), (9, 40), (53, 200), (64, 100), (1024, 1024), (256, 300)],
)
def test_olh_support_counts_exact(g, d):
    """The Fourier-domain accumulator returns exactly the brute-force support counts."""
    rng = _rng(6, g, d)
    o = OLH(1.0, d, g=g, family="gf2-affine" if g & (g - 1) == 0 else "linear-gf")
    r = o.encode(rng.integers(0, d, 400), rng=rng)
    counts = o.support_counts(o.add(o.create_accumulator(), r))
    brute = np.array([(o.hash.hash(r.seeds, np.full(len(r), v)) == r.values).sum() for v in range(d)])
    np.testing.assert_array_equal(counts, brute)


@pytest.mark.parametrize("eps,d", [(4.0, 1024), (6.0, 1 << 12), (8.0, 300)])
def test_olh_fourier_and_value_domain_paths_agree(eps, d):
    """Both accumulators of the gf2-affine family (Fourier table, value-domain support sets) give the same
    support counts; at g close to 2^m many systems M x = y xor b are rank-deficient or inconsistent."""
    rng = _rng(26, int(eps), d)
    o = OLH(eps, d)
    r = o.encode(rng.integers(0, d, 3000), rng=rng)
    counts = {}
    for direct in (False, True):
        o.direct = direct
        counts[direct] = o.support_counts(o.add(o.create_accumulator(), r))
    np.testing.assert_array_equal(counts[False], counts[True])


def test_hadamard_support_counts_exact():
    rng = _rng(7)
    o = HadamardResponse(1.0, 20)
    r = o.encode(rng.integers(0, 20, 500), rng=rng)
    counts = o.support_counts(o.add(o.create_accumulator(), r))
    w = np.arange(1, 21)
    brute = [(np.bitwise_count((r.values & wv).astype(np.uint64)) % 2 == 0).sum() for wv in w]
    np.testing.assert_array_equal(counts, brute)


# ------------------------------------------------------------------------------------------------
# input validation and server-side report checks
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [[0, 8], [-1], [1.5], [float("nan")], [True]])
def test_bad_values_raise(bad):
    with pytest.raises(ValueError):
        GRR(1.0, 8).encode(np.array(bad))


@pytest.mark.parametrize("eps", [0, -1, float("nan"), float("inf"), "x"])
def test_bad_epsilon_raises(eps):
    with pytest.raises(ValueError, match="epsilon"):
        make_oracle("olh", eps, 8)


@pytest.mark.parametrize("d", [1, 0, 2.5, True])
def test_bad_domain_raises(d):
    with pytest.raises(ValueError, match="domain_size"):
        make_oracle("grr", 1.0, d)


def test_bad_names_and_params_raise():
    with pytest.raises(ValueError, match="unknown mechanism"):
        make_oracle("rappor2", 1.0, 8)
    with pytest.raises(ValueError, match="power of two"):
        OLH(1.0, 8, g=6)
    with pytest.raises(ValueError, match="prime power"):
        OLH(1.0, 8, g=6, family="linear-gf")
    with pytest.raises(ValueError, match="unknown hash family"):
        OLH(1.0, 8, family="md5")
    with pytest.raises(ValueError, match="k must be"):
        SubsetSelection(1.0, 8, k=8)
    with pytest.raises(ValueError, match="bad parameters"):
        make_oracle("grr", 1.0, 8, g=3)


def test_validate_flags_bad_reports():
    o = OLH(1.0, 32)
    r = Reports(values=np.array([0, 3, 4, -1]), seeds=np.arange(4, dtype=np.uint64))
    ok, why = o.validate(r)
    assert ok.tolist() == [True, True, False, False]
    assert "bucket outside" in why[2]
    ok, why = o.validate(Reports(values=np.array([1])))
    assert not ok[0] and "missing field" in why[0]
    ue = OUE(1.0, 10)
    bits = np.zeros((2, 2), dtype=np.uint8)
    bits[1, 1] = 0b1000_0000  # bit 15 > d
    ok, why = ue.validate(Reports(bits=bits))
    assert ok.tolist() == [True, False] and "padding" in why[1]


def test_auto_choice_prefers_compact_reports_at_equal_variance():
    o, table = choose_oracle(1.0, 1024)
    assert o.name == "olh"
    best = table[0]["variance_factor"]
    assert o.variance(1) <= best * 1.02
    o, _ = choose_oracle(4.0, 8)
    assert o.name == "grr"  # d - 2 < 3 e^eps: direct encoding wins
    assert make_oracle("auto", 1.0, 1024).choice[0]["mechanism"] in MECHANISMS


def test_report_bits():
    assert GRR(1.0, 1024).report_bits == 10
    assert OLH(1.0, 1024).report_bits == 66
    assert OUE(1.0, 1024).report_bits == 1024
    assert HadamardResponse(1.0, 1024).report_bits == 11


def test_olh_default_g_is_capped_by_the_domain():
    assert OLH(10.0, 4).g == 4
    assert OLH(10.0, 6).g == 4
    assert OLH(10.0, 1024).g == 1024  # 22027 would be pointless: capped at the largest power of two <= d
    assert OLH(4.0, 10**6).accumulator_cells == 2 * 2**20  # gf2-affine: 2 * 2^m cells whatever g
    with pytest.raises(ValueError, match="MAX_ACCUMULATOR_CELLS"):
        OLH(4.0, 10**6, family="linear-gf")  # g = 53 over a million values: a 418M-cell table


# ------------------------------------------------------------------------------------------------
# set queries: the variance of a sum of estimates, covariances included
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.statistical
def test_set_sum_variance_matches_closed_form(name):
    """Var(sum_{v in S} f_v) over T trials vs ``variance_of_sum`` at the true frequencies.

    The squared error of the sum over T independent trials has mean Var and relative SE sqrt(2 / T) for a
    near-normal sum (n = 1000 reports); T = 1000 gives tolerance 5 sqrt(2 / 1000) = 0.22. S = [0, 64) of
    d = 128 holds most of the population, so the O(f) terms (HR's correlated rows, GRR's negative
    correlation, SS's hypergeometric terms) matter.
    """
    d, n, T, eps = 128, 1000, 1000, 1.0
    rng = _rng(20, NAMES.index(name))
    o = make_oracle(name, eps, d)
    values = _population(d, n, rng)
    truth = np.bincount(values, minlength=d) / n
    S = np.arange(64)
    reports = o.encode(np.tile(values, T), rng=rng)
    errs = np.empty(T)
    for t in range(T):
        est = o.estimate_reports(reports.take(slice(t * n, (t + 1) * n)))
        errs[t] = est.frequencies[S].sum() - truth[S].sum()
    theory = o.variance_of_sum(n, S, truth)
    assert abs(errs.mean()) < 5 * math.sqrt(theory / T)
    ratio = float(np.mean(errs**2) / theory)
    assert abs(ratio - 1) < 5 * math.sqrt(2 / T), ratio
    if name in ("grr", "hr"):
        # their covariances are not negligible: the naive sum of per-value variances is far off
        naive = float(o.variance(n, truth)[S].sum())
        assert abs(np.mean(errs**2) / naive - 1) > 5 * math.sqrt(2 / T), name


@pytest.mark.parametrize("eps", [3.0, 4.0])
@pytest.mark.statistical
def test_olh_default_g_set_query_variance(eps):
    """The set-sum check: sum of 64 estimates, default g (16 at eps 3, 64 at eps 4: gf2-affine), 150 trials.

    The prime-g linear family gave 5.7x / 18x theory here. With 150 trials the ratio's relative SE is
    sqrt(2 / 150) = 0.115; the issue's acceptance band [0.55, 1.6] is -3.9 / +5.2 SE.
    """
    d, n, T = 1024, 5000, 150
    rng = _rng(21, int(eps))
    o = OLH(eps, d)
    assert o.family.name == "gf2-affine" and o.g == {3.0: 16, 4.0: 64}[eps]
    values = _population(d, n, rng)
    truth = np.bincount(values, minlength=d) / n
    S = np.arange(64)
    reports = o.encode(np.tile(values, T), rng=rng)
    errs = np.array([
        o.estimate_reports(reports.take(slice(t * n, (t + 1) * n))).frequencies[S].sum() - truth[S].sum()
        for t in range(T)
    ])
    ratio = float(np.mean(errs**2) / o.variance_of_sum(n, S, truth))
    assert 0.55 <= ratio <= 1.6, ratio


def test_legacy_prime_family_set_variance_is_refused_not_faked():
    o = OLH(3.0, 1024, family="linear-gf")
    assert o.g == 23 and o.describe()["hash"] == "linear-gf"
    with pytest.raises(ValueError, match="not 3-wise independent"):
        o.variance_of_sum(1000, np.arange(64))
    assert OLH(1.0, 64, g=4, family="linear-gf").variance_of_sum(1000, [1, 2]) > 0  # p = 2: same as gf2


@pytest.mark.parametrize("name", NAMES)
def test_variance_of_sum_reduces_to_per_value_variance(name):
    o = make_oracle(name, 1.3, 40)
    f = _rng(22).dirichlet(np.ones(40))
    per = o.variance(500, f)
    for v in (0, 17, 39):
        assert o.variance_of_sum(500, [v], f) == pytest.approx(per[v], rel=1e-12)
        assert o.variance_of_sum(500, [v]) == pytest.approx(o.variance(500), rel=1e-12)
    mask = np.zeros(40, dtype=bool)
    mask[[3, 5]] = True
    assert o.variance_of_sum(500, mask, f) == pytest.approx(o.variance_of_sum(500, [5, 3], f))
    with pytest.raises(ValueError, match="repeated"):
        o.variance_of_sum(500, [1, 1])


def test_variance_of_sum_closed_forms():
    f = _rng(23).dirichlet(np.ones(30))
    # SS with k = 1 is GRR
    assert SubsetSelection(1.0, 30, k=1).variance_of_sum(100, np.arange(7), f) == pytest.approx(
        GRR(1.0, 30).variance_of_sum(100, np.arange(7), f), rel=1e-12
    )
    # GRR and SS estimates over the whole domain sum to exactly 1 (every report supports 1 or k values)
    assert GRR(1.0, 30).variance_of_sum(100, np.arange(30), f) == pytest.approx(0, abs=1e-15)
    assert SubsetSelection(1.0, 30, k=5).variance_of_sum(100, np.arange(30), f) == pytest.approx(0, abs=1e-15)
    # OUE / OLH: independent support indicators: the per-value variances add up
    for o in (OUE(1.0, 30), OLH(1.0, 30)):
        assert o.variance_of_sum(100, np.arange(10), f) == pytest.approx(o.variance(100, f)[:10].sum())
    # GRR: negatively correlated estimates: below the sum at f = 0
    g = GRR(1.0, 30)
    assert g.variance_of_sum(100, np.arange(10)) < 10 * g.variance(100)


# ------------------------------------------------------------------------------------------------
# epsilon range, construction cost and size guards
# ------------------------------------------------------------------------------------------------
def test_auto_builds_at_epsilon_20_and_records_skips():
    o = make_oracle("auto", 20.0, 64)  # was 40+ s (prime-power search before the domain cap)
    assert o.name in MECHANISMS
    statuses = {r["mechanism"]: r["status"] for r in o.choice}
    assert list(statuses.values()).count("chosen") == 1
    for name in NAMES:  # every candidate builds in O(1) or is skipped with the reason
        try:
            make_oracle(name, 20.0, 64)
        except ValueError as exc:
            assert statuses[name].startswith("skipped:") and str(exc) in statuses[name]
    # at eps = 22.5, d = 2 only the oracles whose samplers stay exact remain
    o = make_oracle("auto", 22.5, 2)
    skipped = [r["mechanism"] for r in o.choice if r["status"].startswith("skipped")]
    assert "grr" in skipped and "sue" not in skipped
    assert o.name not in skipped


def test_auto_skips_an_unbuildable_olh_instead_of_failing():
    # the former default OLH at eps = 4, d = 2^20 (g = 53) needed a 418M-cell table and made auto raise
    o = make_oracle("auto", 4.0, 1 << 20)
    assert o.name in MECHANISMS
    assert o.accumulator_cells <= 1 << 26


@pytest.mark.parametrize("name", NAMES)
def test_large_epsilon_is_refused_with_the_accepted_bound(name):
    d = 64
    cls = MECHANISMS[name]
    with pytest.raises(ValueError, match="too large") as info:
        cls(60.0, d)
    bound = float(str(info.value).rsplit("epsilon <= ", 1)[1])
    cls(bound, d)  # the stated bound is accepted ...
    with pytest.raises(ValueError, match="too large"):
        cls(bound * 1.01, d)  # ... and just above it is refused


@pytest.mark.parametrize("name", NAMES)
def test_tiny_epsilon_is_refused_with_the_accepted_bound(name):
    d = 1000
    cls = MECHANISMS[name]
    with pytest.raises(ValueError, match="too small") as info:
        cls(1e-12, d)
    bound = float(str(info.value).rsplit("epsilon >= ", 1)[1])
    o = cls(bound, d)
    assert o.gap >= 2.0**-32 and np.isfinite(o.variance(10))
    with pytest.raises(ValueError, match="too small"):
        cls(bound * 0.99, d)


def test_p_minus_q_uses_expm1():
    o = GRR(1e-6, 2)
    assert o.gap == pytest.approx(math.expm1(1e-6) / (math.exp(1e-6) + 1), rel=1e-12)
    assert o.gap > 0 and o.p - o.q != 0


@pytest.mark.parametrize(
    "build",
    [
        lambda: GRR(1.0, 1 << 27),
        lambda: OUE(1.0, 1 << 27),
        lambda: SUE(1.0, 1 << 27),
        lambda: HadamardResponse(1.0, 1 << 26),
        lambda: SubsetSelection(1.0, 1 << 27, k=1),
        lambda: OLH(1.0, 1 << 27),
        lambda: OLH(4.0, 10**6, family="linear-gf"),
    ],
)
def test_accumulator_size_guard(build):
    with pytest.raises(ValueError, match=r"MAX_ACCUMULATOR_CELLS = 67,108,864 cells \(512 MiB\)"):
        build()


def test_olh_at_epsilon_8_on_4096_values_aggregates():
    d, n = 4096, 4000
    o = OLH(8.0, d)
    assert o.g == 4096 and o.direct and o.accumulator_cells == 4096  # value-domain support counts
    rng = _rng(24)
    values = _population(d, n, rng)
    truth = np.bincount(values, minlength=d) / n
    est = o.estimate_reports(o.encode(values, rng=rng))
    z = (est.frequencies - truth) / np.sqrt(o.variance(n, truth))
    # d = 4096 near-independent standardized errors: mean within 5 / sqrt(d), mean square within 1 +- 5 sd
    assert abs(z.mean()) < 5 / math.sqrt(d)
    assert abs(np.mean(z**2) - 1) < 5 * np.std(z**2) / math.sqrt(d)


# ------------------------------------------------------------------------------------------------
# add: scatter path for small batches, bincount for large ones
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_small_and_large_batches_give_the_same_accumulator(name):
    o = make_oracle(name, 2.0, 300)
    rng = _rng(25, NAMES.index(name))
    reports = o.encode(rng.integers(0, 300, 5000), rng=rng)
    whole = o.add(o.create_accumulator(), reports)  # one large batch: bincount
    acc = o.create_accumulator()
    for i in range(0, 40):  # one-report batches: scatter-add
        o.add(acc, reports.take(slice(i, i + 1)))
    o.add(acc, reports.take(slice(40, None)))
    assert acc == whole


def _olh_table_reference(o: OLH, seeds: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The OLH Fourier table (``p = 2``, ``k > 1``) from the explicit ``(n, g)`` index matrix: for every
    report and every ``s`` in GF(2)^k, one count at ``u | r << m`` (``u = M^T s``, ``r = <s, b xor y>``)."""
    hsh = o.hash
    rows, b = hsh.rows(seeds)
    z = b ^ ys
    idx = np.zeros((len(ys), o.g), dtype=np.int64)
    for j in range(hsh.k):
        h = 1 << j
        w = rows[:, j].astype(np.int64) | (((z >> j) & 1) << hsh.m)
        np.bitwise_xor(idx[:, :h], w[:, None], out=idx[:, h : 2 * h])
    return np.bincount(idx.reshape(-1), minlength=2 * hsh.size).reshape(2, hsh.size)


@pytest.mark.parametrize(
    ("eps", "d", "g"), [(4.0, 1024, None), (3.0, 1024, None), (1.0, 300, 4), (2.0, 37, 8)]
)
def test_olh_fourier_table_equals_the_index_matrix_count(eps, d, g):
    o = OLH(eps, d, g=g)
    assert o.hash.k > 1 and not o.direct  # the Fourier table path
    rng = _rng(26, d, o.g)
    n = 70_000  # more than one chunk of the accumulation loop for every g here
    seeds = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    ys = rng.integers(0, o.g, n)
    reports = Reports(seeds=seeds, values=ys)
    acc = o.add(o.create_accumulator(), reports)
    np.testing.assert_array_equal(acc.counts, _olh_table_reference(o, seeds, ys))
    assert acc.counts.dtype == np.int64 and acc.n == n
    small = o.create_accumulator()  # tiny batches take the scatter-add path: the same table
    for i in range(0, 30, 3):
        o.add(small, reports.take(slice(i, i + 3)))
    np.testing.assert_array_equal(small.counts, _olh_table_reference(o, seeds[:30], ys[:30]))


# ------------------------------------------------------------------------------------------------
# client randomness
# ------------------------------------------------------------------------------------------------
def test_olh_seeds_are_not_outputs_of_the_perturbation_stream():
    o = OLH(1.0, 100)
    vals = np.arange(50) % 100
    a = o.encode(vals, rng=7)
    b = o.encode(vals, rng=7)
    np.testing.assert_array_equal(a.seeds, b.seeds)  # explicit seed: reproducible
    np.testing.assert_array_equal(a.values, b.values)
    raw = np.random.default_rng(7).integers(0, np.iinfo(np.uint64).max, 50, dtype=np.uint64, endpoint=True)
    assert not np.isin(a.seeds, raw).any()  # not the raw stream of the caller's generator
    g = np.random.default_rng(8)
    r1, r2 = o.encode(vals, rng=g), o.encode(vals, rng=g)  # one generator, two calls: fresh seeds
    assert not np.isin(r1.seeds, r2.seeds).any()
    assert g.bit_generator.seed_seq.n_children_spawned == 2  # seeds came from spawned children
    c, d = o.encode(vals), o.encode(vals)  # real clients: OS CSPRNG
    assert not np.isin(c.seeds, d.seeds).any()
