"""Tests of ldp.postprocess (NDSS 2020 consistency methods).

Deterministic checks (hand-computed small vectors, invariants, equivalences) plus one integration check with
the real OLH oracle. Randomised inputs are drawn from one SeedSequence so failures reproduce.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize
from scipy.stats import norm as normal

from ldp import postprocess as pp
from ldp.postprocess import Method

SEED = np.random.SeedSequence(20200223)
RNGS = [np.random.default_rng(s) for s in SEED.spawn(10)]

# OLH parameters at eps = 1 (g = 4): p = e/(e + 3), q = 1/4
E1 = float(np.e)
OLH_P, OLH_Q = E1 / (E1 + 3.0), 0.25


def zipf_like_estimates(rng: np.random.Generator, d: int = 256, sigma: float = 0.01) -> np.ndarray:
    r = np.arange(1, d + 1, dtype=float)
    f = r**-1.5
    f /= f.sum()
    return f + rng.normal(0.0, sigma, d)


def norm_sub_bisection(f: np.ndarray) -> np.ndarray:
    """Slow reference: find delta with sum(max(f + delta, 0)) = 1 by 200 bisection steps."""
    lo, hi = -f.max(), 1.0 - f.min()  # sum at lo is 0 (<1), at hi >= 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(f + mid, 0.0).sum() < 1.0:
            lo = mid
        else:
            hi = mid
    return np.maximum(f + 0.5 * (lo + hi), 0.0)


def mle_apx_reference(f: np.ndarray, p: float, q: float) -> np.ndarray:
    """Slow reference for MLE-Apx: repeated passes, dropping values that become negative (Appendix B)."""
    g, a, b = p - q, q * (1 - q), (p - q) * (1 - p - q)
    active = np.ones(f.size, dtype=bool)
    while True:
        x = g * (f[active].sum() - 1.0) / (active.sum() * a + b)
        out = np.where(active, (g * f - a * x) / (g + b * x), 0.0)
        neg = active & (out <= 0)
        if not neg.any():
            return out
        active &= ~neg


# ----------------------------------------------------------------------------------------------------------
# hand-computed small cases
# ----------------------------------------------------------------------------------------------------------

F4 = np.array([0.5, 0.3, 0.1, -0.1])  # sums to 0.8


def test_base_and_base_pos_hand():
    np.testing.assert_array_equal(pp.base(F4), F4)
    np.testing.assert_array_equal(pp.base_pos(F4), [0.5, 0.3, 0.1, 0.0])


def test_post_pos_single_values_equal_base_pos_and_clips_set_answers():
    np.testing.assert_array_equal(pp.post_pos(F4), pp.base_pos(F4))
    f = np.array([0.3, -0.2, -0.15, 0.05])
    # {1,2} -> -0.35 -> 0 ; {0,1} -> 0.1 ; {3} -> 0.05 ; {1} -> 0
    ans = pp.post_pos(f, [[1, 2], [0, 1], [3], [1]])
    np.testing.assert_allclose(ans, [0.0, 0.1, 0.05, 0.0])
    # answers are not additive: {1} + {2} clipped separately vs {1,2}
    masks = np.array([[0, 1, 0, 0], [0, 0, 1, 0], [0, 1, 1, 0]], dtype=bool)
    one, two, both = pp.answer_set_queries(f, masks, clip=True)
    assert one + two == 0.0 and both == 0.0
    np.testing.assert_allclose(pp.answer_set_queries(f, masks), [-0.2, -0.15, -0.35])


def test_norm_hand():
    np.testing.assert_allclose(pp.norm(F4), [0.55, 0.35, 0.15, -0.05])


def test_norm_mul_hand():
    np.testing.assert_allclose(pp.norm_mul(F4), [5 / 9, 3 / 9, 1 / 9, 0.0])


def test_norm_sub_hand():
    # delta over all 4 is 0.05 -> -0.05 < 0, drop; over top 3: (1 - 0.9)/3
    np.testing.assert_allclose(pp.norm_sub(F4), [0.5 + 1 / 30, 0.3 + 1 / 30, 0.1 + 1 / 30, 0.0])
    # everything negative: projection of (-0.1, -0.3) onto the simplex is (0.6, 0.4)
    np.testing.assert_allclose(pp.norm_sub([-0.1, -0.3]), [0.6, 0.4])
    np.testing.assert_allclose(pp.norm_sub([-0.1, -2.0]), [1.0, 0.0])
    # ties: equal inputs give equal outputs
    np.testing.assert_allclose(pp.norm_sub([0.2, 0.2, 0.2]), [1 / 3] * 3)
    np.testing.assert_allclose(pp.norm_sub([0.9, 0.9, -0.5]), [0.5, 0.5, 0.0])


def test_norm_cut_hand():
    # sum of positives 0.9 <= 1: only the negative becomes 0
    np.testing.assert_allclose(pp.norm_cut(F4), [0.5, 0.3, 0.1, 0.0])
    # sum of positives 1.2 > 1: cumulative sums 0.6, 0.9, 1.1 -> keep the top two unchanged
    np.testing.assert_allclose(pp.norm_cut([0.3, 0.6, 0.1, 0.2, -0.2]), [0.3, 0.6, 0.0, 0.0, 0.0])
    # ties are kept or cut together: {0.5}, then {0.3, 0.3} would give 1.1 > 1
    np.testing.assert_allclose(pp.norm_cut([0.3, 0.5, 0.3, 0.1]), [0.0, 0.5, 0.0, 0.0])
    # the largest estimate alone exceeds 1: theta above it, everything cut
    np.testing.assert_allclose(pp.norm_cut([1.2, 0.1]), [0.0, 0.0])
    np.testing.assert_allclose(pp.norm_cut([-0.2, -0.1]), [0.0, 0.0])


def test_base_cut_threshold_value():
    # Eq. (8) with alpha = 2, d = 1024: Phi^-1(1 - 2/1024) = 2.8856349124267573 (scipy.stats.norm.ppf)
    assert pp.base_cut_threshold(1024, 0.01**2) == pytest.approx(2.8856349124267573 * 0.01, rel=1e-12)
    # d = 40, alpha = 2: Phi^-1(0.95) = 1.6448536269514722
    assert pp.base_cut_threshold(40, 4.0) == pytest.approx(1.6448536269514722 * 2.0, rel=1e-12)
    assert pp.base_cut_threshold(1024, 1e-4, alpha=0.05) == pytest.approx(
        normal.ppf(1 - 0.05 / 1024) * 1e-2, rel=1e-9
    )
    t = pp.base_cut_threshold(4, np.array([1.0, 4.0, 9.0, 16.0]), alpha=1.0)
    np.testing.assert_allclose(t, normal.ppf(0.75) * np.array([1.0, 2.0, 3.0, 4.0]), rtol=1e-12)
    # tiny domains: alpha/d >= 1/2 floors T at 0 (d = 2, alpha = 2 would be Phi^-1(0) = -inf)
    assert pp.base_cut_threshold(2, 0.01) == 0.0
    assert pp.base_cut_threshold(4, 0.01) == 0.0
    np.testing.assert_array_equal(pp.base_cut([0.7, -0.3], 0.01), [0.7, 0.0])


def test_base_cut_hand():
    d, sigma = 40, 0.1  # T = 0.16448...
    f = np.zeros(d)
    f[:4] = [0.5, 0.17, 0.16, -0.3]
    out = pp.base_cut(f, sigma**2)
    expected = np.zeros(d)
    expected[:2] = [0.5, 0.17]
    np.testing.assert_array_equal(out, expected)
    # an estimate exactly at T is kept (only values strictly below T are cut)
    t = pp.base_cut_threshold(d, sigma**2)
    f[5] = t
    assert pp.base_cut(f, sigma**2)[5] == t


def test_cls_hand_and_mle_apx_hand():
    np.testing.assert_allclose(pp.cls(F4), pp.norm_sub(F4), atol=1e-15)
    # p = 1/2, q = 1/4: g = 1/4, a = 3/16, b = 1/16. D1 = top two:
    # x = g (1.2 - 1)/(2a + b) = 0.05/0.4375, f' = (g f - a x)/(g + b x) = (43/72, 29/72, 0)
    np.testing.assert_allclose(pp.mle_apx([0.7, 0.5, -0.1], p=0.5, q=0.25), [43 / 72, 29 / 72, 0.0])


# ----------------------------------------------------------------------------------------------------------
# equivalences stated in the paper
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trial", range(20))
def test_norm_sub_equals_bisection_reference_and_cls(trial):
    rng = RNGS[0] if trial < 10 else RNGS[1]
    d = int(rng.integers(2, 400))
    f = rng.normal(0.0, rng.uniform(0.001, 0.3), d) + rng.dirichlet(np.ones(d) * 0.3)
    if trial % 5 == 0:
        f = np.round(f, 2)  # many ties
    ref = norm_sub_bisection(f)
    np.testing.assert_allclose(pp.norm_sub(f), ref, atol=1e-12)
    np.testing.assert_allclose(pp.cls(f), pp.norm_sub(f), atol=1e-12)


def test_cls_is_the_constrained_least_squares_optimum():
    """Compare with a generic QP solver (SLSQP) on small random problems."""
    rng = RNGS[2]
    for _ in range(5):
        d = 8
        f = rng.normal(0.1, 0.3, d)
        res = optimize.minimize(
            lambda x, f=f: np.sum((x - f) ** 2),
            np.full(d, 1.0 / d),
            jac=lambda x, f=f: 2 * (x - f),
            bounds=[(0.0, None)] * d,
            constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1.0, "jac": lambda x: np.ones(x.size)}],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert res.success
        np.testing.assert_allclose(pp.cls(f), res.x, atol=1e-6)


def test_mle_apx_exactly_norm_sub_when_b_is_zero():
    # p + q = 1 (e.g. GRR with d = 2): the f_v-term of the variance vanishes and MLE-Apx == CLS == Norm-Sub
    rng = RNGS[3]
    for _ in range(10):
        f = rng.normal(0.0, 0.2, 50)
        np.testing.assert_allclose(pp.mle_apx(f, p=0.7, q=0.3), pp.norm_sub(f), atol=1e-12)


def test_mle_apx_matches_reference_and_is_close_to_norm_sub_for_olh():
    """MLE-Apx discussion: gamma ~ 1 for OLH, so MLE-Apx and Norm-Sub are very close."""
    rng = RNGS[4]
    g, a, b = OLH_P - OLH_Q, OLH_Q * (1 - OLH_Q), (OLH_P - OLH_Q) * (1 - OLH_P - OLH_Q)
    for _ in range(10):
        f = zipf_like_estimates(rng, d=512, sigma=0.003)
        out = pp.mle_apx(f, p=OLH_P, q=OLH_Q)
        np.testing.assert_allclose(out, mle_apx_reference(f, OLH_P, OLH_Q), atol=1e-12)
        assert out.sum() == pytest.approx(1.0, abs=1e-12)
        # KKT stationarity: residual proportional to the Eq. 4 variance a + b f' on the support
        on = out > 0
        ratio = g * (f[on] - out[on]) / (a + b * out[on])
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9, atol=1e-12)
        # close to Norm-Sub: gamma = g/(g + b x) is within 1e-3 of 1 here, so the differences (largest for the
        # largest value, ~3e-4) stay well below the noise level sigma = 0.003
        assert np.max(np.abs(out - pp.norm_sub(f))) < 0.2 * 0.003


# ----------------------------------------------------------------------------------------------------------
# invariants
# ----------------------------------------------------------------------------------------------------------

ALL_METHODS = list(Method)
NON_NEG = {m for m in Method if m not in (Method.BASE, Method.NORM)}
SUM_ONE = {Method.NORM, Method.NORM_MUL, Method.NORM_SUB, Method.CLS, Method.MLE_APX, Method.POWER_NS}


def run(method: Method, f: np.ndarray, var: float, n: int | None = 10**5) -> np.ndarray:
    extra = {"p": OLH_P, "q": OLH_Q} if method is Method.MLE_APX else {}
    return pp.postprocess(f, method, variance=var, n=n, **extra)


@pytest.mark.parametrize("method", ALL_METHODS, ids=lambda m: m.value)
def test_invariants(method):
    rng = RNGS[5]
    sigma = 0.01
    cases = [zipf_like_estimates(rng, d=256, sigma=sigma) for _ in range(3)]
    cases.append(np.array([0.7, -0.3]))  # d = 2
    cases.append(np.full(6, -0.05))  # all negative, all tied
    cases.append(np.array([0.4, 0.4, 0.1, 0.1, -0.2, 0.4]))  # ties
    for f in cases:
        out = run(method, f, sigma**2)
        assert out.shape == f.shape and out.dtype == np.float64
        assert np.all(np.isfinite(out))
        if method in NON_NEG:
            assert out.min() >= 0.0
        if method in SUM_ONE:
            assert out.sum() == pytest.approx(1.0, abs=1e-9)
        if method is Method.NORM_CUT:
            assert out.sum() <= 1.0 + 1e-12
        # weak order preservation (Table I discussion): f_a <= f_b  =>  f'_a <= f'_b
        order = np.argsort(f, kind="stable")
        assert np.all(np.diff(out[order]) >= -1e-12)
        # tied inputs give tied outputs
        for val in np.unique(f):
            assert np.ptp(out[f == val]) <= 1e-12
        # deterministic and pure
        before = f.copy()
        np.testing.assert_array_equal(run(method, f, sigma**2), out)
        np.testing.assert_array_equal(f, before)


def test_all_negative_and_degenerate_cases():
    f = np.array([-0.1, -0.3, -0.2])
    np.testing.assert_allclose(pp.norm_mul(f), [1 / 3] * 3)  # documented fallback: uniform
    np.testing.assert_array_equal(pp.base_pos(f), 0.0)
    np.testing.assert_array_equal(pp.norm_cut(f), 0.0)
    np.testing.assert_array_equal(pp.base_cut(f, 0.01), 0.0)
    np.testing.assert_allclose(pp.norm_sub(f), pp.cls(f))
    np.testing.assert_allclose(pp.norm_sub(f), norm_sub_bisection(f), atol=1e-12)
    np.testing.assert_allclose(pp.norm_sub([5.0]), [1.0])


# ----------------------------------------------------------------------------------------------------------
# Power / PowerNS
# ----------------------------------------------------------------------------------------------------------


def test_power_matches_direct_integration_of_eq_12():
    n, s, sigma = 1000, 1.5, 0.05
    x_min = 1.0 / n
    f = np.array([-0.08, 0.0, 0.02, 0.1, 0.3, 0.95, 1.2])
    got = pp.power(f, sigma**2, n=n, exponent=s)
    for fv, gv in zip(f, got):
        def dens(x, k, fv=fv):
            return x**k * x**-s * np.exp(-0.5 * ((fv - x) / sigma) ** 2)

        pts = [x_min * 10, 0.01, max(x_min, min(fv, 1.0))]
        num = integrate.quad(dens, x_min, 1.0, args=(1,), points=pts, limit=500)[0]
        den = integrate.quad(dens, x_min, 1.0, args=(0,), points=pts, limit=500)[0]
        assert gv == pytest.approx(num / den, rel=2e-3, abs=1e-6)  # observed <= 1.1e-3


def _dense_power(f, sigma, n, s):
    """The former dense evaluation of Eq. 12: a d x cells Gaussian kernel (the reference)."""
    x_min = 1.0 / n
    x_max = min(1.0, float(f.max() + 8.0 * sigma))
    edges, reps = pp._power_cells(x_min, x_max, sigma / 4.0)
    z = (f[:, None] - reps[None, :]) / sigma
    logk = -0.5 * z * z
    kern = np.exp(logk - logk.max(axis=1, keepdims=True))
    num = kern @ pp._power_first_moments(edges, s)
    den = kern @ pp._power_masses(edges, s)
    return np.clip(num / den, 0.0, 1.0), kern, edges


@pytest.mark.parametrize("d,sigma,n", [(2000, 0.004, 10**6), (3000, 0.002, 10**4), (400, 0.05, 1000)])
def test_tabulated_power_matches_the_dense_kernel(d, sigma, n):
    """Constant sigma: the posterior mean is tabulated (lattice sigma / 64, cubic interpolation) instead of
    a dense d x cells kernel. Observed error <= 8e-8 sigma; asserted 1e-6 sigma. The fitted exponent (MLE of
    the tabulated marginal likelihood) agrees with the dense fit to 1e-6 (observed 2e-9)."""
    rng = RNGS[8]
    r = np.arange(1, d + 1, dtype=float)
    truth = r**-1.2 / np.sum(r**-1.2)
    f = truth + rng.normal(0.0, sigma, d)
    kern = pp._PowerKernel(f, np.full(d, sigma), pp._power_cells(1.0 / n, 0.5, sigma / 4)[1])
    assert kern.grid and kern.points.size < d  # tabulated, not one kernel row per value
    s = pp.fit_power_law(f, sigma**2, n=n)
    dense, dk, edges = _dense_power(f, sigma, n, s)
    np.testing.assert_allclose(pp.power(f, sigma**2, n=n, exponent=s), dense, rtol=0, atol=1e-6 * sigma)

    def dense_nll(e):
        return -np.sum(np.log(np.maximum(dk @ pp._power_masses(edges, e), 1e-300)))

    opts = {"xatol": 1e-3}
    s_dense = optimize.minimize_scalar(dense_nll, bounds=(0.05, 6.0), method="bounded", options=opts).x
    assert s == pytest.approx(s_dense, abs=1e-6)


def test_power_kernel_memory_is_bounded_by_the_lattice_not_d():
    """d = 2^18 estimates clustered near 0 (sigma = 2e-4, as OLH with n = 1e8): the tabulated points are far
    fewer than d and every kernel chunk holds at most _KERNEL_CELLS entries."""
    d, sigma = 1 << 18, 2e-4
    rng = RNGS[9]
    r = np.arange(1, d + 1, dtype=float)
    f = r**-1.2 / np.sum(r**-1.2) + rng.normal(0.0, sigma, d)
    _, reps, kern = pp._power_setup(f, np.full(d, sigma), 1e-8)
    assert kern.points.size < d / 20
    assert kern.step * reps.size <= pp._KERNEL_CELLS
    out = pp.power_ns(f, sigma**2, n=10**8)
    assert out.shape == (d,) and abs(out.sum() - 1) < 1e-9


def test_power_fit_recovers_exponent():
    """Frequencies drawn from the power-law prior (s = 1.7 on [1e-4, 1]) plus N(0, sigma) noise."""
    rng = RNGS[6]
    s_true, x_min, d, sigma = 1.7, 1e-4, 3000, 0.002
    u = rng.uniform(size=d)
    # inverse CDF of x^-s on [x_min, 1]
    x = (x_min ** (1 - s_true) + u * (1.0 - x_min ** (1 - s_true))) ** (1 / (1 - s_true))
    f = x + rng.normal(0.0, sigma, d)
    s_hat = pp.fit_power_law(f, sigma**2, n=10_000)
    # with d = 3000 the fitted exponent's spread over 10 seeds was 0.022 (mean 1.704): 0.15 is ~7 of them
    assert abs(s_hat - s_true) < 0.15
    s_mom = pp.fit_power_law(f, sigma**2, n=10_000, fit="moment")
    assert 0.05 < s_mom < 6.0


def test_power_ns_is_norm_sub_of_power_and_improves_on_base():
    rng = RNGS[7]
    d, sigma = 512, 0.004
    r = np.arange(1, d + 1, dtype=float)
    truth = r**-1.5 / np.sum(r**-1.5)
    mse = {m: 0.0 for m in (Method.BASE, Method.POWER, Method.POWER_NS)}
    for _ in range(5):
        f = truth + rng.normal(0.0, sigma, d)
        pw = pp.power(f, sigma**2, n=10**6)
        np.testing.assert_allclose(pp.power_ns(f, sigma**2, n=10**6), pp.norm_sub(pw))
        mse[Method.BASE] += np.mean((f - truth) ** 2)
        mse[Method.POWER] += np.mean((pw - truth) ** 2)
        mse[Method.POWER_NS] += np.mean((pp.norm_sub(pw) - truth) ** 2)
    # Base has MSE sigma^2 = 1.6e-5 per value; the power-law prior shrinks the ~500 near-zero values:
    # Base/Power was 10.8 on another seed. Assert a conservative 3x.
    assert mse[Method.POWER] < mse[Method.BASE] / 3
    assert mse[Method.POWER_NS] < mse[Method.BASE] / 3


# ----------------------------------------------------------------------------------------------------------
# dispatcher, guideline, bad input
# ----------------------------------------------------------------------------------------------------------


def test_dispatcher_accepts_enum_and_strings():
    f = F4
    np.testing.assert_array_equal(pp.postprocess(f, Method.NORM_SUB), pp.norm_sub(f))
    np.testing.assert_array_equal(pp.postprocess(f, "norm-sub"), pp.norm_sub(f))
    np.testing.assert_array_equal(pp.postprocess(f, "NORM_SUB"), pp.norm_sub(f))
    np.testing.assert_array_equal(pp.postprocess(f, "base-cut", variance=1e-4, alpha=1.0),
                                  pp.base_cut(f, 1e-4, alpha=1.0))
    np.testing.assert_allclose(pp.postprocess(f, "post-pos", subsets=[[0, 3]]), [0.4])
    assert {m.value for m in Method} == {
        "base", "base-pos", "post-pos", "base-cut", "norm", "norm-mul", "norm-sub", "norm-cut", "cls",
        "mle-apx", "power", "power-ns",
    }


@pytest.mark.parametrize(
    "call",
    [
        lambda: pp.postprocess(F4, "norm-subtract"),
        lambda: pp.postprocess(F4, 3),
        lambda: pp.postprocess(F4, "base-cut"),
        lambda: pp.postprocess(F4, "power"),
        lambda: pp.postprocess(F4, "power-ns", n=100),
        lambda: pp.postprocess(F4, "mle-apx"),
        lambda: pp.postprocess(F4, "mle-apx", p=0.2, q=0.5),
        lambda: pp.postprocess(F4, "norm", alpha=2),
        lambda: pp.postprocess(np.ones((2, 2)), "norm"),
        lambda: pp.postprocess([], "norm"),
        lambda: pp.postprocess([0.1, np.nan], "norm"),
        lambda: pp.postprocess([0.1, np.inf], "base"),
        lambda: pp.base_cut(F4, -1.0),
        lambda: pp.base_cut(F4, np.ones(3)),
        lambda: pp.base_cut(F4, 0.01, alpha=-1.0),
        lambda: pp.base_cut(F4, 0.01, alpha=0.0),
        lambda: pp.power(F4, 0.01, n=0),
        lambda: pp.power(F4, 0.01, fit="bayes"),
        lambda: pp.answer_set_queries(F4, [[0, 4]]),
        lambda: pp.answer_set_queries(F4, np.ones((2, 3), dtype=bool)),
        lambda: pp.recommend("histogram-of-everything"),
    ],
)
def test_bad_inputs_raise(call):
    with pytest.raises(ValueError):
        call()


def test_recommend_follows_guideline():
    assert pp.recommend("single") is Method.BASE_CUT
    assert pp.recommend("single value") is Method.BASE_CUT
    assert pp.recommend("top-k") is Method.NORM
    assert pp.recommend("frequent") is Method.NORM
    assert pp.recommend("set") is Method.POWER_NS
    assert pp.recommend("Subset") is Method.POWER_NS


def test_with_real_olh_oracle():
    """Integration: the oracle's FrequencyEstimate feeds every method; Norm-Sub beats Base on Zipf data.

    n = 20000, d = 256, eps = 1 (OLH, g = 4): sigma^2 = 4e/(n(e-1)^2) ~ 1.8e-4 is Base's per-value MSE,
    while 247 of the 256 Zipf(1.5) values have f_v < sigma and Norm-Sub sets most of them to ~0. Over 30
    repetitions of this 4-run average the ratio Base/Norm-Sub had min 5.8, median 7.0; we assert > 3.
    """
    oracles = pytest.importorskip("ldp.oracles")
    rng = np.random.default_rng(SEED.spawn(1)[0])
    d, n = 256, 20_000
    r = np.arange(1, d + 1, dtype=float)
    truth = r**-1.5 / np.sum(r**-1.5)
    values = rng.choice(d, size=n, p=truth)
    f_true = np.bincount(values, minlength=d) / n
    oracle = oracles.make_oracle("olh", 1.0, d)
    mse_base = mse_ns = 0.0
    for _ in range(4):
        est = oracle.estimate_reports(oracle.encode(values, rng=rng))
        for m in Method:
            extra = {"p": oracle.p, "q": oracle.q} if m is Method.MLE_APX else {}
            out = pp.postprocess(est.frequencies, m, variance=est.variance, n=est.n, **extra)
            assert out.shape == (d,) and np.all(np.isfinite(out))
        mse_base += np.mean((est.frequencies - f_true) ** 2)
        mse_ns += np.mean((pp.norm_sub(est.frequencies) - f_true) ** 2)
    assert mse_ns * 3.0 < mse_base
