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

from ldp.hashing import LinearHash, seed_words, splitmix64
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
def test_unbiased_and_variance_matches_closed_form(name):
    d, n, trials, eps = 16, 4000, 250, 1.0
    idx = NAMES.index(name)
    rng = _rng(1, idx)
    oracle = make_oracle(name, eps, d)
    values = _population(d, n, rng)
    truth = np.bincount(values, minlength=d) / n
    var = oracle.variance(n, truth)  # Eq. 4 at the true frequencies
    errs = np.empty((trials, d))
    reports = oracle.encode(np.tile(values, trials), rng=rng)
    for t in range(trials):
        est = oracle.estimate_reports(reports.take(slice(t * n, (t + 1) * n)))
        errs[t] = est.frequencies - truth
    se = np.sqrt(var / trials)
    assert np.all(np.abs(errs.mean(axis=0)) < 5 * se), (errs.mean(axis=0) / se).round(2)
    ratio = np.mean(errs**2 / var)
    tol = 5 * math.sqrt(2 / (trials * d))  # = 0.112
    assert abs(ratio - 1) < tol, ratio


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
# epsilon-LDP audit
# ------------------------------------------------------------------------------------------------
def _buckets(oracle, reports: Reports, v1: int, v2: int) -> np.ndarray:
    """A function of the output only (post-processing), fine enough to expose a leak."""
    if reports.bits is not None:
        bits = np.unpackbits(reports.bits, axis=1, count=oracle.d, bitorder="little")
        return bits @ (1 << np.arange(oracle.d))
    if reports.items is not None:
        items = np.sort(reports.items.astype(np.int64), axis=1)
        return items @ (oracle.d ** np.arange(items.shape[1]))
    if reports.seeds is not None:  # OLH: which of v1, v2 the report supports, and whether they collide
        h1 = oracle.hash.hash(reports.seeds, np.full(len(reports), v1))
        h2 = oracle.hash.hash(reports.seeds, np.full(len(reports), v2))
        return 4 * (h1 == h2) + 2 * (reports.values == h1) + (reports.values == h2)
    return reports.values


def _audit(oracle, v1: int, v2: int, n: int, rng, level: float = 1e-6) -> float:
    """Largest Clopper-Pearson-conservative ratio P[y|v1]/P[y|v2] over output buckets (both ways)."""
    b1 = _buckets(oracle, oracle.encode(np.full(n, v1), rng=rng), v1, v2)
    b2 = _buckets(oracle, oracle.encode(np.full(n, v2), rng=rng), v1, v2)
    keys = np.union1d(b1, b2)
    c1 = np.array([(b1 == k).sum() for k in keys])
    c2 = np.array([(b2 == k).sum() for k in keys])
    worst = 0.0
    for a, b in ((c1, c2), (c2, c1)):
        lower = np.where(a > 0, stats.beta.ppf(level, np.maximum(a, 1), n - a + 1), 0.0)
        upper = stats.beta.ppf(1 - level, b + 1, np.maximum(n - b, 1))
        worst = max(worst, float(np.max(lower / upper)))
    return worst


@pytest.mark.parametrize("name", NAMES)
def test_epsilon_ldp_audit(name):
    eps, d, n = 1.0, 4, 200_000
    oracle = make_oracle(name, eps, d)
    ratio = _audit(oracle, 0, 3, n, _rng(3, NAMES.index(name)))
    assert ratio <= math.exp(eps), ratio


def test_audit_catches_a_leaky_encoder():
    """Negative control: GRR whose p was computed for 2.5 * eps must fail the eps audit."""
    eps = 1.0
    leaky = GRR(eps, 4)
    honest_p = leaky.p
    leaky.p = GRR(2.5 * eps, 4).p
    assert leaky.p > honest_p
    assert _audit(leaky, 0, 3, 200_000, _rng(4)) > math.exp(eps)


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


@pytest.mark.parametrize("g,d", [(2, 37), (4, 100), (8, 64), (3, 50), (5, 30), (9, 40), (53, 200)])
def test_olh_support_counts_exact(g, d):
    """The Fourier-domain accumulator returns exactly the brute-force support counts."""
    rng = _rng(6, g, d)
    o = OLH(1.0, d, g=g, family="gf2-affine" if g & (g - 1) == 0 else "linear-gf")
    r = o.encode(rng.integers(0, d, 400), rng=rng)
    counts = o.support_counts(o.add(o.create_accumulator(), r))
    brute = np.array([(o.hash.hash(r.seeds, np.full(len(r), v)) == r.values).sum() for v in range(d)])
    np.testing.assert_array_equal(counts, brute)


def test_hadamard_support_counts_exact():
    rng = _rng(7)
    o = HadamardResponse(1.0, 20)
    r = o.encode(rng.integers(0, 20, 500), rng=rng)
    counts = o.support_counts(o.add(o.create_accumulator(), r))
    w = np.arange(1, 21)
    brute = [(np.bitwise_count((r.values & wv).astype(np.uint64)) % 2 == 0).sum() for wv in w]
    np.testing.assert_array_equal(counts, brute)


# ------------------------------------------------------------------------------------------------
# hash family
# ------------------------------------------------------------------------------------------------
def test_linear_hash_is_universal():
    """P[h(v) = h(v')] = 1/g for v != v': over N seeds, the collision count is Binomial(N, 1/g)."""
    rng = _rng(8)
    N = 200_000
    for p, k, d in [(2, 2, 1024), (3, 1, 100), (5, 1, 30)]:
        lh = LinearHash(d, p, k)
        seeds = rng.integers(0, 2**63, size=N).astype(np.uint64)
        for v1, v2 in [(0, 1), (3, d - 1), (d // 2, d // 2 + p)]:
            coll = (lh.hash(seeds, np.full(N, v1)) == lh.hash(seeds, np.full(N, v2))).sum()
            g = p**k
            sd = math.sqrt(N * (1 / g) * (1 - 1 / g))
            assert abs(coll - N / g) < 5 * sd, (p, k, v1, v2, coll)
        h = lh.hash(seeds, np.full(N, 7 % d))
        counts = np.bincount(h, minlength=lh.g)
        assert stats.chisquare(counts).pvalue > 1e-6


def test_splitmix_is_deterministic_and_known():
    # splitmix64 of 0 * GOLDEN + GOLDEN (first output of the stream seeded at 0) is a published value
    assert int(seed_words(np.array([0], dtype=np.uint64), 1)[0, 0]) == 0xE220A8397B1DCDAF
    x = np.arange(5, dtype=np.uint64)
    np.testing.assert_array_equal(splitmix64(x), splitmix64(x.copy()))


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
    ss = SubsetSelection(1.0, 10, k=3)
    ok, why = ss.validate(Reports(items=np.array([[0, 1, 2], [1, 1, 2], [0, 1, 10]])))
    assert ok.tolist() == [True, False, False]


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
