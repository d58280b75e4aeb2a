"""The exact discrete Gaussian sampler (ldp.dgauss): distributions, closed forms, accounting, the PRF
stream and the noise key.

Distribution tests compare T draws with the exact pmf by a chi-square test over cells with an expected
count >= 5 (the tails pooled); the threshold is the chi-square quantile at 1 - 1e-6 for its degrees of
freedom, so a correct sampler fails one with probability 1e-6. Moments: z = 5 of their standard errors,
computed from the exact pmf (mean: sqrt(V / T); variance: sqrt((mu_4 - V^2) / T)).
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldp import dgauss
from ldp.matrix.mechanism import gaussian_delta

Z = 5.0
ALPHA = 1e-6


def _stream(label: str) -> dgauss.PrfStream:
    return dgauss.PrfStream(b"test-key-" + b"0" * 23, label.encode())


def _chi_square(draws: np.ndarray, support: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """(statistic, threshold) over the support cells with expected count >= 5, plus one pooled rest cell."""
    t = draws.size
    exp = probs * t
    keep = exp >= 5
    obs = np.array([np.sum(draws == v) for v in support[keep]], dtype=float)
    rest_obs, rest_exp = t - obs.sum(), t - exp[keep].sum()
    stat = float(np.sum((obs - exp[keep]) ** 2 / exp[keep]))
    df = int(keep.sum()) - 1
    if rest_exp >= 5:
        stat += (rest_obs - rest_exp) ** 2 / rest_exp
        df += 1
    return stat, float(stats.chi2.ppf(1 - ALPHA, df))


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(5, 2), Fraction(30)])
@pytest.mark.statistical
def test_discrete_gaussian_matches_its_pmf(sigma2):
    t = 20_000
    draws = dgauss.sample(sigma2, t, _stream(f"dg {sigma2}"))
    s2 = float(sigma2)
    support = np.arange(-int(12 * math.sqrt(s2)) - 3, int(12 * math.sqrt(s2)) + 4)
    probs = dgauss.pmf(support, sigma2)
    stat, limit = _chi_square(draws, support, probs)
    assert stat <= limit, (stat, limit)
    v = dgauss.variance(sigma2)
    mu4 = float(np.sum(support.astype(float) ** 4 * probs))
    assert abs(draws.mean()) <= Z * math.sqrt(v / t)
    assert abs(np.mean(draws.astype(float) ** 2) - v) <= Z * math.sqrt((mu4 - v * v) / t)  # mean 0 known


def test_variance_closed_form():
    """Var N_Z(0, s^2) = sum x^2 p(x): below s^2 (visibly so for s < 1); the theta-function form used from
    s^2 = 1 on agrees with the direct sum (to float rounding of the sums, 1e-12 relative)."""
    assert dgauss.variance(Fraction(1, 4)) < 0.25 * 0.9
    assert dgauss.variance(0.999) < 0.999
    for s2 in (0.999, 1.0, 2.5, 4.0, 10.0, 64.0):
        x = np.arange(-400, 401, dtype=float)
        w = np.exp(-(x**2) / (2 * s2))
        assert dgauss.variance(s2) == pytest.approx(float((x**2 * w).sum() / w.sum()), rel=1e-12)
        assert dgauss.variance(s2) <= s2
    q = math.exp(-2 * math.pi**2)
    assert abs(dgauss.variance(1.0) - (1 - 8 * math.pi**2 * q)) < 1e-12  # 1 - 2.1e-7, first order in q
    assert dgauss.variance(2.0**40) == 2.0**40


@pytest.mark.statistical
def test_bernoulli_exp_and_discrete_laplace_are_exact():
    """Bernoulli(exp(-7/3)) (the gamma > 1 path) within z = 5 of its binomial standard error, and the
    discrete Laplace of scale 3 against its pmf (chi-square at 1e-6)."""
    src = _stream("bern")
    t = 40_000
    p = math.exp(-7 / 3)
    hits = sum(dgauss.bernoulli_exp(7, 3, src) for _ in range(t))
    assert abs(hits / t - p) <= Z * math.sqrt(p * (1 - p) / t)
    assert dgauss.bernoulli_exp(0, 5, src) is True
    draws = np.array([dgauss.discrete_laplace(3, src) for _ in range(t)])
    support = np.arange(-60, 61)
    probs = np.exp(-np.abs(support) / 3)
    probs /= np.sum(np.exp(-np.abs(np.arange(-400, 401)) / 3))
    stat, limit = _chi_square(draws, support, probs)
    assert stat <= limit, (stat, limit)
    with pytest.raises(ValueError):
        dgauss.bernoulli_exp(-1, 2, src)
    with pytest.raises(ValueError):
        dgauss.discrete_laplace(0, src)


def test_os_random_source():
    """The OS CSPRNG path: mean and variance of N_Z(0, 100) within z = 5 of their standard errors
    (Var ~ 100, mu_4 ~ 3e4)."""
    t = 10_000
    draws = dgauss.sample(Fraction(100), t, dgauss.OsRandom()).astype(float)
    assert abs(draws.mean()) <= Z * math.sqrt(100 / t)
    assert abs(np.mean(draws**2) - 100) <= Z * math.sqrt((3 * 100**2 - 100**2) / t)


def test_prf_stream_is_deterministic_and_context_separated():
    a = [_stream("ctx").randbelow(1000) for _ in range(1)]
    s1, s2, s3 = _stream("ctx"), _stream("ctx"), _stream("other")
    x1 = [s1.randbelow(1 << 70) for _ in range(5000)]  # crosses a 64 KiB block
    assert x1 == [s2.randbelow(1 << 70) for _ in range(5000)]
    assert x1 != [s3.randbelow(1 << 70) for _ in range(5000)]
    assert a[0] < 1000 and all(0 <= v < 1 << 70 for v in x1)
    k2 = dgauss.PrfStream(b"another-key-" + b"1" * 20, b"ctx")
    assert [k2.randbelow(1 << 70) for _ in range(10)] != x1[:10]
    # uniformity of randbelow(6) over 60,000 draws: chi-square at 1e-6, 5 degrees of freedom
    u = np.array([s1.randbelow(6) for _ in range(60_000)])
    stat, limit = _chi_square(u, np.arange(6), np.full(6, 1 / 6))
    assert stat <= limit
    with pytest.raises(ValueError):
        dgauss.PrfStream(b"short", b"")


def test_zcdp_conversion_is_valid_and_calibrates():
    """rho-zCDP => (eps, delta): the conversion is never below the exact delta of the continuous
    Gaussian with the same rho (which is rho-zCDP, so any valid conversion bounds it), and zcdp_rho /
    zcdp_epsilon invert it."""
    for sigma in (0.4, 1.0, 3.0, 10.0, 40.0):
        rho = 1 / (2 * sigma**2)
        for eps in (0.05, 0.5, 1.0, 4.0, 16.0):
            assert dgauss.zcdp_delta(rho, eps) >= gaussian_delta(sigma, eps) * (1 - 1e-9)
    for eps, delta in ((0.1, 1e-6), (1.0, 1e-6), (9.73, 1e-6), (16.0, 1e-6), (1.0, 1e-10)):
        rho = dgauss.zcdp_rho(eps, delta)
        assert dgauss.zcdp_delta(rho, eps) <= delta
        assert dgauss.zcdp_delta(rho * (1 + 1e-6), eps) > delta
        assert dgauss.zcdp_epsilon(rho, delta) == pytest.approx(eps, rel=1e-8)
    assert dgauss.zcdp_delta(0.0, 1.0) == 0.0
    with pytest.raises(ValueError):
        dgauss.zcdp_rho(0.0, 1e-6)


def test_noise_key_file(tmp_path):
    path = tmp_path / "noise.key"
    key = dgauss.load_or_create_key(path)
    assert len(key) == dgauss.NOISE_KEY_BYTES and path.stat().st_mode & 0o777 == 0o600
    assert dgauss.load_or_create_key(path) == key
    assert dgauss.load_or_create_key(tmp_path / "other.key") != key
    os.chmod(path, 0o640)
    with pytest.raises(ValueError, match="readable by group or others"):
        dgauss.load_or_create_key(path)
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 5)
    os.chmod(short, 0o600)
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        dgauss.load_or_create_key(short)
    with pytest.raises(ValueError, match="cannot create"):
        dgauss.load_or_create_key(tmp_path / "missing-dir" / "k")
