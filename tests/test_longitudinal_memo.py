"""Memoized oracles: closed forms of the composed probabilities and guarantees, the
FrequencyOracle protocol, stability of the permanent responses, and per-window unbiasedness.

Tolerances (DESIGN.md): mean error of each value over T windows' worth of independent populations has
standard error sqrt(Var_v / T) from the closed form at (p*, q*); we assert |mean| < 5 SE. The variance ratio
sum(err^2 / Var_v) / (T d) has relative standard error sqrt(2 / (T d)); we assert it lies in 1 +- 5 of those.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp.longitudinal.memo import (
    LOLOHA,
    MEMO_MECHANISMS,
    RAPPOR,
    MemoGRR,
    MemoOLH,
    lh_buckets,
    make_memo_oracle,
    memo_words_hmac,
)
from ldp.oracles import GRR, OLH, OUE

ROOT = np.random.SeedSequence(20261201)
NAMES = sorted(MEMO_MECHANISMS)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(ROOT.entropy, spawn_key=key))


def _keys(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 2**64, size=n, dtype=np.uint64)


@pytest.mark.parametrize("eps,eps1,d", [(1.0, 0.5, 16), (2.0, 0.6, 5), (0.5, 0.4, 64), (3.0, 3.0, 8)])
def test_memo_grr_closed_forms(eps, eps1, d):
    o = MemoGRR(eps, d, epsilon_1=eps1)
    e = math.exp(eps)
    assert o.perm_p == pytest.approx(e / (e + d - 1), rel=1e-14)
    assert o.perm_q == pytest.approx(1 / (e + d - 1))
    p1, q1, p2, q2 = o.perm_p, o.perm_q, o.inst_p, o.inst_q
    assert o.p == pytest.approx(p1 * p2 + (1 - p1) * q2, rel=1e-14)
    assert o.q == pytest.approx(q1 * p2 + (1 - q1) * q2, rel=1e-14)
    assert o.p + (d - 1) * o.q == pytest.approx(1.0, rel=1e-14)
    assert o.gap == pytest.approx(o.p - o.q, rel=1e-12)
    assert o.epsilon_1 == pytest.approx(eps1, rel=1e-12)  # ln(p*/q*)
    assert o.epsilon_inf == eps
    if eps1 < eps:
        assert o.epsilon_instantaneous == pytest.approx(math.log(p2 / q2), rel=1e-12)
        assert o.epsilon_instantaneous > eps1
    else:  # no instantaneous randomization: every report is the memo
        assert math.isinf(o.epsilon_instantaneous) and (p2, q2) == (1.0, 0.0)
    assert o.max_memo_keys == d and o.epsilon_after_changes(3) == min(4, d) * eps


@pytest.mark.parametrize("eps,eps1,d,g", [(1.0, 0.5, 100, 2), (2.0, 1.0, 64, None), (4.0, 1.0, 1000, None)])
def test_local_hashing_closed_forms(eps, eps1, d, g):
    for cls in (MemoOLH, LOLOHA):
        o = cls(eps, d, epsilon_1=eps1, g=g)
        gg = o.g
        assert gg == (g or lh_buckets(eps, eps1, d))
        e = math.exp(eps)
        assert o.perm_p == pytest.approx(e / (e + gg - 1)) and o.q == 1.0 / gg
        assert o.p == pytest.approx(o.perm_p * o.inst_p + (1 - o.perm_p) * o.inst_q, rel=1e-14)
        assert o.gap == pytest.approx(o.p - 1.0 / gg, rel=1e-12)
        q_other = o.perm_q * o.inst_p + (1 - o.perm_q) * o.inst_q
        assert o.epsilon_1 == pytest.approx(eps1, rel=1e-12)
        assert math.log(o.p / q_other) == pytest.approx(eps1, rel=1e-12)
        assert o.epsilon_instantaneous == pytest.approx(math.log(o.inst_p / o.inst_q), rel=1e-12)
    assert LOLOHA(eps, d, epsilon_1=eps1, g=g).max_memo_keys == (g or lh_buckets(eps, eps1, d))
    assert MemoOLH(eps, d, epsilon_1=eps1, g=g).max_memo_keys == d


def test_lh_buckets_minimises_the_composed_variance():
    for eps, eps1, d in ((1.0, 0.5, 100), (4.0, 2.0, 1024), (6.0, 1.0, 4096)):
        g = lh_buckets(eps, eps1, d)
        best = LOLOHA(eps, d, epsilon_1=eps1, g=g).variance(1)
        for k in range(1, d.bit_length()):
            assert LOLOHA(eps, d, epsilon_1=eps1, g=1 << k).variance(1) >= best * (1 - 1e-12)


@pytest.mark.parametrize("permanent", ["sue", "oue"])
@pytest.mark.parametrize("eps,eps1,d", [(1.0, 0.5, 16), (2.0, 1.5, 8), (4.0, 1.0, 32)])
def test_rappor_closed_forms(permanent, eps, eps1, d):
    o = RAPPOR(eps, d, epsilon_1=eps1, permanent=permanent)
    if permanent == "sue":
        h = math.exp(eps / 2)
        assert o.perm_p == pytest.approx(h / (h + 1)) and o.perm_q == pytest.approx(1 / (h + 1))
    else:
        assert o.perm_p == 0.5 and o.perm_q == pytest.approx(1 / (math.exp(eps) + 1))
    p1, q1, s = o.perm_p, o.perm_q, o.inst_p
    assert o.inst_q == pytest.approx(1 - s)
    # e_inf: the permanent unary randomization of two one-hot vectors (two differing bits)
    assert math.log(p1 * (1 - q1) / ((1 - p1) * q1)) == pytest.approx(eps, rel=1e-12) and o.epsilon_inf == eps
    assert o.p == pytest.approx(p1 * s + (1 - p1) * (1 - s))
    assert o.q == pytest.approx(q1 * s + (1 - q1) * (1 - s))
    assert o.epsilon_1 == pytest.approx(eps1, rel=1e-9)
    assert o.gap == pytest.approx(o.p - o.q, rel=1e-12)
    assert o.epsilon_instantaneous == pytest.approx(d * math.log(s / (1 - s)), rel=1e-12)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="epsilon_1"):
        MemoGRR(1.0, 8, epsilon_1=1.5)
    with pytest.raises(ValueError, match="epsilon_1"):
        LOLOHA(1.0, 8, epsilon_1=0.0)
    with pytest.raises(ValueError, match="permanent"):
        RAPPOR(1.0, 8, permanent="xyz")
    with pytest.raises(ValueError, match="unknown memoized"):
        make_memo_oracle("memo-xyz", 1.0, 8)
    with pytest.raises(ValueError, match="bad parameters"):
        make_memo_oracle("memo-grr", 1.0, 8, g=4)
    with pytest.raises(ValueError, match="power of two"):
        LOLOHA(1.0, 8, g=3)
    with pytest.raises(ValueError, match="16 bytes"):
        memo_words_hmac(b"short", "t", "memo", 1, 2)


def test_wire_format_and_accumulator_are_the_base_oracles():
    assert MemoGRR(1.0, 10).report_fields == GRR(1.0, 10).report_fields == ("values",)
    assert RAPPOR(1.0, 10).report_fields == OUE(1.0, 10).report_fields == ("bits",)
    assert LOLOHA(1.0, 10, g=4).report_fields == OLH(1.0, 10, g=4).report_fields == ("seeds", "values")
    for name in NAMES:
        o = make_memo_oracle(name, 1.0, 10)
        assert o.create_accumulator().counts.shape == o.base.create_accumulator().counts.shape
        d = o.describe()
        for k in ("epsilon_1", "epsilon_inf", "epsilon_instantaneous", "max_memo_keys", "mechanism"):
            assert k in d
        assert d["mechanism"] == name


@pytest.mark.parametrize("name", NAMES)
def test_client_memo_is_stable_and_validates(name):
    o = make_memo_oracle(name, 1.0, 12, epsilon_1=1.0)  # no instantaneous stage: the report is the memo
    secret = bytes(range(32))
    first = [o.client_report(secret, "task-a", v) for v in range(12)]
    for v in range(12):
        again, key = o.client_report(secret, "task-a", v)
        assert key == first[v][1]
        for f in again.fields():
            assert np.array_equal(getattr(again, f), getattr(first[v][0], f))
        ok, _ = o.validate(again)
        assert ok.all()
    # the simulation path maps PRF words to memos the same way: equal words, equal memo
    words = memo_words_hmac(secret, "task-a", "memo", 3, o.words_per_memo)[None, :]
    seeds = None
    if o.uses_seed:
        seeds = o.seeds_from_words(memo_words_hmac(secret, "task-a", "seed", 0, 1)[None, :])
        assert first[3][0].seeds[0] == seeds[0]
    key = first[3][1]
    words = memo_words_hmac(secret, "task-a", "memo", key, o.words_per_memo)[None, :]
    memo = o.memo_from_words(np.asarray([key]), words, seeds)
    rep = o.instantaneous(memo, np.random.default_rng(0), seeds)
    for f in rep.fields():
        assert np.array_equal(getattr(rep, f), getattr(first[3][0], f))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.statistical
def test_windowed_estimates_from_memoized_reports_are_unbiased(name):
    """Each window's estimate from memoized reports is unbiased with the closed-form variance at (p*, q*).

    T = 200 independent trials (fresh user keys, i.e. fresh secrets, each trial), W = 3 windows per trial
    over one population whose values drift (10% of users redraw their value each window), n = 3000 users.
    Windows of one trial share memos (correlated), trials are independent: for each window w and value v
    the mean error over trials has SE sqrt(Var_v / T) (5 SE asserted), and sum(err^2 / Var) / (T d) has
    relative SE sqrt(2 / (T d)) = 0.035 (d = 8; 5 of those = 0.177 asserted) per window.
    """
    d, n, T, W = 8, 3000, 200, 3
    rng = _rng(1, NAMES.index(name))
    o = make_memo_oracle(name, 1.0, d, epsilon_1=0.5)
    p0 = np.arange(1, d + 1) / (d * (d + 1) / 2)
    errs = np.empty((W, T, d))
    vars_ = np.empty((W, T, d))
    for t in range(T):
        keys = _keys(n, rng)
        vals = rng.choice(d, size=n, p=p0)
        for w in range(W):
            if w:
                move = rng.random(n) < 0.1
                vals[move] = rng.integers(0, d, int(move.sum()))
            truth = np.bincount(vals, minlength=d) / n
            est = o.estimate_reports(o.simulate(vals, keys, rng=rng))
            errs[w, t] = est.frequencies - truth
            vars_[w, t] = o.variance(n, truth)
    for w in range(W):
        se = np.sqrt(vars_[w].mean(axis=0) / T)
        assert np.all(np.abs(errs[w].mean(axis=0)) < 5 * se), (w, errs[w].mean(axis=0) / se)
        ratio = float(np.mean(errs[w] ** 2 / vars_[w]))
        assert abs(ratio - 1) < 5 * math.sqrt(2 / (T * d)), (w, ratio)


def test_one_memoized_report_is_a_fresh_report_at_epsilon_1():
    """Two GRR stages compose to GRR at epsilon_1, two symmetric flips to SUE at epsilon_1, OUE flips then
    symmetric ones to OUE at epsilon_1: the composed (p*, q*), hence the per-window variance, equal the
    fresh oracle's at epsilon_1 (docs/longitudinal.md)."""
    from ldp.oracles import SUE

    for eps, eps1, d in ((1.0, 0.5, 100), (4.0, 2.0, 100), (2.0, 0.3, 7)):
        pairs = [(MemoGRR(eps, d, epsilon_1=eps1), GRR(eps1, d))]
        lo = LOLOHA(eps, d, epsilon_1=eps1)
        pairs.append((lo, OLH(eps1, d, g=lo.g)))
        pairs.append((MemoOLH(eps, d, epsilon_1=eps1, g=lo.g), OLH(eps1, d, g=lo.g)))
        pairs.append((RAPPOR(eps, d, epsilon_1=eps1), SUE(eps1, d)))
        for memo, fresh in pairs:
            assert memo.p == pytest.approx(fresh.p, rel=1e-9) and memo.q == pytest.approx(fresh.q, rel=1e-9)
            assert memo.variance(1000) == pytest.approx(fresh.variance(1000), rel=1e-8)
        # with p1 = 1/2 the composed p* stays 1/2 whatever s: the OUE variant composes to OUE at epsilon_1
        oue = RAPPOR(eps, d, epsilon_1=eps1, permanent="oue")
        assert oue.p == 0.5 and oue.q == pytest.approx(OUE(eps1, d).q, rel=1e-9)
