"""Confidence intervals that describe the numbers a job publishes (Beam-free; ``docs/intervals.md``).

A frequency job publishes post-processed frequencies (``ldp.postprocess``). The closed-form standard
deviation of the oracles (``FrequencyEstimate.std``) describes the *unbiased* estimate only: around a
Norm-Sub value pinned at 0, or a top value that Norm-Sub shifted down, ``+- 1.96 std`` is not a 95%
interval. This module gives, per value, an interval for the true frequency that is valid for the method
that produced the published number, and contains that number:

``normal`` (method ``base``)
    ``f~ +- z sigma`` with ``sigma`` the oracle's Eq. 4 standard deviation at the estimate clipped to
    [0, 1] (:func:`normal_interval`). Cost O(d).

``clipped`` (``base-pos``, ``post-pos``, ``base-cut``)
    The normal interval of the unbiased estimate intersected with [0, 1], the range of any frequency
    (:func:`clipped_interval`); a value that Base-Cut set to 0 gets the lower end 0. The true frequency
    lies in [0, 1], so the intersection covers it exactly when the normal interval does, or more often;
    the published number (``max(f~, 0)``, or 0 for a cut value) lies inside. Cost O(d).

``simulated-inversion`` (``norm``, ``norm-mul``, ``norm-sub``, ``norm-cut``, ``cls``, ``mle-apx``,
``power``, ``power-ns``)
    A parametric bootstrap inverted like a Neyman construction (:func:`inversion_interval`). ``B``
    replicas of the whole unbiased vector are drawn from the estimator's closed-form noise
    (:func:`simulate_unbiased`: independent normal noise with the oracle's Eq. 4 variance per value at a
    plug-in truth, the simplex projection of the estimate, and the oracle's exact variance of the total, so
    GRR's estimates keep summing to exactly 1) and post-processed with the published method. Every method
    here preserves the order of the estimates, so in replica ``b`` the published value of a coordinate is
    a non-decreasing function ``G_b`` of its unbiased value, read off the replica's ``d`` (unbiased,
    published) pairs. For a published value ``theta``, ``U_b = G_b^{-1}(theta)`` is the unbiased value
    that would have produced it in replica ``b`` (for a value pinned at 0: the replica's threshold, the
    largest unbiased value still mapped to 0). The true frequency ``x`` is in the interval when ``theta``
    is not in either 2.5% tail of its distribution under ``x``, i.e. ``x`` between the 2.5% and 97.5%
    points of ``U_B + sigma Z`` (B a random replica, Z standard normal), taken in the normal approximation
    ``mean(U) +- z sqrt(sigma^2 + var(U))``; a value pinned at the floor 0 has no lower tail and gets the
    lower end 0. The interval is clipped to [0, 1] and extended to contain ``theta``. It corrects the
    bias of the shifted values (``U`` undoes Norm-Sub's shift) and gives zeros the range of truths that
    Norm-Sub would still have pinned. Cost: ``B`` post-processings and sorts of ``d`` values,
    O(B d log d) time and O(d) memory beyond one replica, once per pane; ``B`` =
    :func:`replica_count` (64 for d <= 32768, fewer above, ``B d`` <= 2^21), and above
    :data:`MAX_SIMULATED_DOMAIN` values the ``clipped`` interval (widened to contain the published number)
    is used instead and named ``clipped-hull``.

The simulation is seeded from the data (:func:`data_seed`, a hash of the support counts and the task), so
equal reports give equal intervals on every runner, re-run and pane replay. Coverage is measured by
``experiments/coverage.py`` (``docs/intervals.md``).

These are per-value intervals, valid for a value chosen in advance. A view that picks values by their
estimates (a top-k) shows :func:`ldp.selection.simultaneous_intervals` instead, and the rows' noise flag
``ci_includes_zero`` is the domain-wide (Bonferroni) one of :mod:`ldp.selection`. The flag's p-values
(``p_zero``) are exact where the mechanism's support count is exactly Binomial(``n``, ``q``) under
``f_v = 0`` (:func:`null_support_q`: GRR, OLH, BLH, OUE, SUE, HR, SS), normal otherwise (the memoized
mechanisms); the intervals stay normal, so a flag and its simultaneous interval can disagree near the cut.

Range answers (:func:`answer_interval`): the normal interval of the unclipped answer, intersected with
[0, 1] and extended to contain the published (clipped) answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import numpy as np

import ldp.postprocess as _pp
from ldp.selection import DEFAULT_RULE, binomial_p_values, discoveries, flag_p_values

__all__ = [
    "LEVEL",
    "CLIPPING_METHODS",
    "SIMULATED_METHODS",
    "MAX_SIMULATED_DOMAIN",
    "FrequencyIntervals",
    "z_value",
    "normal_interval",
    "clipped_interval",
    "clipped_std",
    "simulate_unbiased",
    "inversion_interval",
    "replica_count",
    "data_seed",
    "frequency_intervals",
    "null_support_q",
    "zero_p_values",
    "EXACT_NULL_MECHANISMS",
    "answer_interval",
    "ci_method_name",
]

#: Confidence level of every published interval.
LEVEL = 0.95
#: Methods whose published number is a per-value clip or cut of the unbiased one (``clipped`` intervals).
CLIPPING_METHODS = frozenset({"base-pos", "post-pos", "base-cut"})
#: Consistency methods (``simulated-inversion`` intervals).
SIMULATED_METHODS = frozenset(
    {"norm", "norm-mul", "norm-sub", "norm-cut", "cls", "mle-apx", "power", "power-ns"}
)
#: Methods whose output is never negative (their published 0 is a floor).
_FLOORED = frozenset(m.value for m in _pp.Method) - {"base", "norm"}
#: Largest domain for which the consistency methods' intervals are simulated.
MAX_SIMULATED_DOMAIN = 1 << 20
#: Most replica values (``B * d``) one simulation draws.
_REPLICA_BUDGET = 1 << 21
_MAX_REPLICAS = 64
_MIN_REPLICAS = 8

#: Oracles (``ldp.oracles``) whose support count of a value no user holds is exactly Binomial(``n``, ``q``):
#: every report of a user not holding ``v`` supports it with probability ``q`` whatever that user's value,
#: independently of the other reports. GRR (``q`` off the diagonal), OUE / SUE (the value's bit), SS (a
#: fixed-size uniform subset), HR (two Hadamard sets meet in a quarter of the outputs: ``q = 1/2``), OLH /
#: BLH (both hash families are exactly universal: ``q = 1/g`` over the per-report seed). Not the memoized
#: mechanisms (``ldp.longitudinal.memo``): a user's reports share one permanent response, so the count is
#: Binomial only at one report per user and window, which the aggregator cannot check.
EXACT_NULL_MECHANISMS = frozenset({"grr", "olh", "blh", "oue", "sue", "hr", "ss"})


def z_value(level: float = LEVEL) -> float:
    """The two-sided normal quantile ``Phi^-1(1/2 + level/2)`` (1.95996... at 95%)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def ci_method_name(method: str, d: int) -> str:
    """The ``ci_method`` of a frequency row for the post-processing ``method`` and domain ``d``."""
    if method == "base":
        return "normal"
    if method in CLIPPING_METHODS:
        return "clipped"
    if d > MAX_SIMULATED_DOMAIN:
        return "clipped-hull"
    return "simulated-inversion"


def normal_interval(
    estimate: np.ndarray, std: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """``estimate +- z std``: the normal-approximation interval of an unbiased estimate."""
    e = np.asarray(estimate, dtype=np.float64)
    half = z_value(level) * np.asarray(std, dtype=np.float64)
    return e - half, e + half


def clipped_interval(
    unbiased: np.ndarray,
    std: np.ndarray,
    published: np.ndarray,
    *,
    cut: np.ndarray | None = None,
    level: float = LEVEL,
) -> tuple[np.ndarray, np.ndarray]:
    """The normal interval of ``unbiased`` intersected with [0, 1], extended to contain ``published``.

    ``cut`` marks values a cut method set to 0 whatever their unbiased estimate: their lower end is 0.
    Since every true frequency lies in [0, 1], the interval covers the truth whenever the normal one does.
    """
    lo, hi = normal_interval(unbiased, std, level)
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    if cut is not None:
        lo = np.where(cut, 0.0, lo)
    pub = np.asarray(published, dtype=np.float64)
    return np.minimum(lo, pub), np.maximum(hi, pub)


def clipped_std(
    mean: np.ndarray, std: np.ndarray, threshold: float | np.ndarray = 0.0, *, cut: bool = False
) -> np.ndarray:
    """Standard deviation of ``max(X, 0)`` (``cut=False``) or ``X 1[X >= threshold]`` (``cut=True``) for
    ``X ~ N(mean, std^2)``: the spread of a clipped or cut published number (closed form)."""
    mu = np.asarray(mean, dtype=np.float64)
    s = np.maximum(np.asarray(std, dtype=np.float64), 1e-300)
    t = np.broadcast_to(np.asarray(threshold if cut else 0.0, dtype=np.float64), mu.shape)
    # imported at first use: scipy.special costs 0.2 s of start-up in every process that imports this module
    from scipy.special import ndtr

    a = (t - mu) / s
    tail = ndtr(-a)
    dens = np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)
    m1 = mu * tail + s * dens
    m2 = (mu * mu + s * s) * tail + s * (mu + t) * dens
    return np.sqrt(np.maximum(m2 - m1 * m1, 0.0))


def replica_count(d: int) -> int:
    """Replicas ``B`` of the simulated intervals for ``d`` values: ``B d <= 2^21`` within 8 <= B <= 64."""
    return int(max(_MIN_REPLICAS, min(_MAX_REPLICAS, _REPLICA_BUDGET // max(int(d), 1))))


def data_seed(*parts: object) -> np.random.SeedSequence:
    """A SeedSequence from a hash of ``parts`` (arrays by their bytes): the same data, the same draws."""
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(str(p.dtype).encode() + str(p.shape).encode())
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(repr(p).encode("utf-8"))
        h.update(b"\x00")
    return np.random.SeedSequence(int.from_bytes(h.digest(), "little"))


def simulate_unbiased(
    truth: np.ndarray,
    variance: np.ndarray,
    total_variance: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """One replica of the unbiased estimate around ``truth``: ``truth + X`` with ``X`` normal, independent
    per value with variances ``variance``, corrected along the variance-weighted direction so that the
    total ``sum X`` has variance ``total_variance`` (0 for GRR, whose estimates sum to exactly 1).

    With ``w = variance``, ``Y ~ N(0, diag w)`` and ``s = sum Y``: ``X = Y - w s k / sum w`` with
    ``k = 1 - sqrt(total_variance / sum w)``, so ``Var(sum X) = total_variance`` and each ``Var(X_v)``
    moves by ``O(w_v^2 / sum w)``. The oracles' estimates are correlated across values only through such a
    common term (GRR, SS: a fixed total; the others nearly uncorrelated), so this matches the variances and
    the total's variance of the closed forms.
    """
    w = np.asarray(variance, dtype=np.float64)
    y = rng.standard_normal(w.size) * np.sqrt(w)
    sw = float(w.sum())
    if sw > 0:
        k = 1.0 - np.sqrt(max(float(total_variance), 0.0) / sw)
        y -= w * (float(y.sum()) * k / sw)
    return np.asarray(truth, dtype=np.float64) + y


def _inverse(u: np.ndarray, g: np.ndarray, theta: np.ndarray, upper: bool, floored: bool) -> np.ndarray:
    """``G^{-1}(theta)`` of the non-decreasing map sampled at ``(u, g)`` (both sorted by ``u``).

    ``upper``: ``sup {u : G(u) <= theta}``, else ``inf {u : G(u) >= theta}`` (-inf for ``theta <= 0`` when
    ``G`` has the floor 0). Linear between samples, slope 1 beyond the sampled range.
    """
    d = u.size
    out = np.empty(theta.size)
    if upper:
        i = np.searchsorted(g, theta, side="right") - 1  # last sample with g <= theta
        below, above = i < 0, i >= d - 1
    else:
        i = np.searchsorted(g, theta, side="left")  # first sample with g >= theta
        below, above = i <= 0, i >= d
    out[below] = u[0] - (g[0] - theta[below])
    out[above] = u[-1] + (theta[above] - g[-1])
    mid = ~(below | above)
    a = i[mid] if upper else i[mid] - 1  # g[a] <= theta (<) g[a + 1], so the span is positive
    ga, gb = g[a], g[a + 1]
    frac = (theta[mid] - ga) / (gb - ga)
    out[mid] = u[a] + np.clip(frac, 0.0, 1.0) * (u[a + 1] - u[a])
    if floored and not upper:
        out[theta <= 0.0] = -np.inf
    return out


def inversion_interval(
    published: np.ndarray,
    sigma: np.ndarray,
    replicas: Callable[[], tuple[np.ndarray, np.ndarray]],
    n_replicas: int,
    *,
    floored: bool,
    level: float = LEVEL,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The simulated-inversion interval of published values (see the module docstring).

    Args:
        published: ``(d,)`` the published numbers ``theta``.
        sigma: ``(d,)`` standard deviation of each unbiased estimate (the noise of ``x`` in the inversion).
        replicas: called ``n_replicas`` times; returns one replica's ``(unbiased, published)`` vectors.
        n_replicas: ``B``.
        floored: the method's output is never negative (a published 0 has no lower tail).
        level: confidence level.

    Returns:
        ``(low, high, std)``: the interval (clipped to [0, 1], containing ``published``) and the standard
        deviation of the published numbers across the replicas.
    """
    theta = np.asarray(published, dtype=np.float64)
    sums = _ReplicaSums(theta.size)
    for _ in range(n_replicas):
        u, g = replicas()
        sums.add(u, g, theta, floored)
    return sums.interval(float(n_replicas), sigma, theta, level)


class _ReplicaSums:
    """Running sums over the replicas of the inversion: of the upper and lower inverses (the lower over
    the replicas where it is finite, with a count of those where it is not) and of the published values."""

    def __init__(self, d: int) -> None:
        self.s_hi, self.ss_hi = np.zeros(d), np.zeros(d)
        self.s_lo, self.ss_lo = np.zeros(d), np.zeros(d)
        self.n_lo, self.n_inf = np.zeros(d), np.zeros(d)
        self.s_g, self.ss_g = np.zeros(d), np.zeros(d)

    def add(self, u: np.ndarray, g: np.ndarray, theta: np.ndarray, floored: bool) -> None:
        """One replica's unbiased ``u`` and published ``g``, inverted at ``theta``."""
        self.s_g += g
        self.ss_g += g * g
        order = np.argsort(u, kind="stable")
        us = u[order]
        gs = np.maximum.accumulate(g[order])  # order-preserving methods; guards round-off only
        hi = _inverse(us, gs, theta, True, floored)
        lo = _inverse(us, gs, theta, False, floored)
        self.s_hi += hi
        self.ss_hi += hi * hi
        fin = np.isfinite(lo)
        lo0 = np.where(fin, lo, 0.0)
        self.s_lo += lo0
        self.ss_lo += lo0 * lo0
        self.n_lo += fin
        self.n_inf += ~fin

    def interval(
        self, b: float, sigma: np.ndarray, theta: np.ndarray, level: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(low, high, std)`` of :func:`inversion_interval` from the sums of ``b`` replicas."""
        z = z_value(level)
        alpha = 1.0 - level
        m_hi = self.s_hi / b
        v_hi = np.maximum(self.ss_hi / b - m_hi * m_hi, 0.0)
        n_lo = self.n_lo
        with np.errstate(invalid="ignore", divide="ignore"):
            m_lo = np.where(n_lo > 0, self.s_lo / np.maximum(n_lo, 1), 0.0)
            v_lo = np.where(n_lo > 0, np.maximum(self.ss_lo / np.maximum(n_lo, 1) - m_lo * m_lo, 0.0), 0.0)
        sig2 = np.asarray(sigma, dtype=np.float64) ** 2
        high = m_hi + z * np.sqrt(sig2 + v_hi)
        low = m_lo - z * np.sqrt(sig2 + v_lo)
        # at the floor in enough replicas: no lower tail
        low = np.where(self.n_inf / b >= alpha / 2.0, 0.0, low)
        low = np.minimum(np.clip(low, 0.0, 1.0), theta)
        high = np.maximum(np.clip(high, 0.0, 1.0), theta)
        m_g = self.s_g / b
        std = np.sqrt(np.maximum(self.ss_g / b - m_g * m_g, 0.0))
        return low, high, std


@dataclasses.dataclass(frozen=True)
class FrequencyIntervals:
    """Everything a frequency row publishes about one group's values (``schemas/estimate.avsc``).

    Attributes:
        published: the post-processed frequencies.
        std: standard deviation of the published numbers' estimator: the closed form of the unbiased
            estimate (``base``), of the clipped / cut normal (clipping methods), or across the simulated
            replicas (consistency methods). It describes their spread, not their bias: never make an
            interval from it; use ``ci_low`` / ``ci_high``.
        ci_low, ci_high: the interval for the true frequency (level :data:`LEVEL`), containing the
            published number.
        ci_method: ``normal``, ``clipped``, ``simulated-inversion`` or ``clipped-hull``.
        unbiased, unbiased_std: the base estimate and its closed-form (Eq. 4) standard deviation.
        ci_includes_zero: noise level over the domain: not flagged above 0 by Bonferroni over the ``d``
            values at 5% (:mod:`ldp.selection`), from ``p_zero`` when it is given, else from the normal
            p-value (the unbiased estimate's simultaneous interval contains 0); False flags a value whose
            frequency is shown to be above 0 with a family-wise error rate of 5% over the whole domain.
        p_zero: the exact two-sided p-value of ``f_v = 0`` per value (:func:`zero_p_values`), None where
            the mechanism's null law is not exact.
        replicas: simulation replicas used (0: closed form).
    """

    published: np.ndarray
    std: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    ci_method: str
    unbiased: np.ndarray
    unbiased_std: np.ndarray
    ci_includes_zero: np.ndarray
    replicas: int = 0
    p_zero: np.ndarray | None = None


def null_support_q(oracle: Any) -> float | None:
    """The probability ``q`` with which a report supports a value its user does not hold, when the
    support count of a value of frequency 0 is exactly Binomial(``n``, ``q``) (:data:`EXACT_NULL_MECHANISMS`);
    None for any other oracle (its flags use the normal p-values)."""
    if getattr(oracle, "name", None) not in EXACT_NULL_MECHANISMS:
        return None
    q = float(oracle.q)
    return q if 0.0 < q < 1.0 else None


def zero_p_values(oracle: Any, estimate: Any) -> np.ndarray | None:
    """Per value, the exact two-sided p-value of ``f_v = 0`` from its support count
    (:func:`ldp.selection.binomial_p_values`), or None where the oracle's null law is not exact
    (:func:`null_support_q`) or there are no reports."""
    q = null_support_q(oracle)
    n = int(getattr(estimate, "n", 0) or 0)
    if q is None or n < 1:
        return None
    return binomial_p_values(np.asarray(estimate.support_counts, dtype=np.float64), n, q)


def frequency_intervals(
    oracle: Any,
    estimate: Any,
    method: str,
    published: np.ndarray,
    *,
    seed: np.random.SeedSequence | None = None,
    n_replicas: int | None = None,
    level: float = LEVEL,
) -> FrequencyIntervals:
    """The intervals of one group's published frequencies.

    Args:
        oracle: the ``ldp.oracles`` oracle (``variance``, ``variance_of_sum``, ``p``, ``q``).
        estimate: its ``FrequencyEstimate`` (``frequencies``, ``variance``, ``variance_with_f``, ``n``).
        method: the post-processing method that produced ``published``.
        published: ``(d,)`` the published numbers.
        seed: seed of the simulation (default: :func:`data_seed` of the support counts and the method).
        n_replicas: replicas of the simulation (default :func:`replica_count`).
        level: confidence level.
    """
    f = np.asarray(estimate.frequencies, dtype=np.float64)
    d = f.size
    sd = np.sqrt(np.asarray(estimate.variance_with_f, dtype=np.float64))
    pub = np.asarray(published, dtype=np.float64)
    ulo, uhi = normal_interval(f, sd, level)
    # over the whole domain (ldp.selection): a per-value 95% test would flag ~5% of the values whose true
    # frequency is 0; the row's flag is the Bonferroni one, from the exact p-values where the null law is
    # exact (at small n q the normal tail, with the std at the estimate, misstates the error rate either
    # way, docs/intervals.md), else the simultaneous interval of f~ contains 0
    p0 = zero_p_values(oracle, estimate)
    if p0 is None:
        zero = ~discoveries(f, sd, d, DEFAULT_RULE, 1.0 - level)
    else:
        zero = ~(flag_p_values(p0, d, DEFAULT_RULE, 1.0 - level) & (f > 0))
    kind = ci_method_name(method, d)
    common = dict(
        unbiased=f, unbiased_std=sd, ci_includes_zero=zero, ci_method=kind, published=pub, p_zero=p0
    )
    if kind == "normal":
        return FrequencyIntervals(std=sd, ci_low=ulo, ci_high=uhi, **common)
    if kind == "clipped":
        std, lo, hi = _clipped_intervals(estimate, method, f, sd, pub, level)
        return FrequencyIntervals(std=std, ci_low=lo, ci_high=hi, **common)
    if kind == "clipped-hull":
        lo, hi = clipped_interval(f, sd, pub, level=level)
        return FrequencyIntervals(std=sd, ci_low=lo, ci_high=hi, **common)
    b = int(n_replicas) if n_replicas is not None else replica_count(d)
    lo, hi, std = _simulated_intervals(oracle, estimate, method, pub, seed, b, level)
    return FrequencyIntervals(std=std, ci_low=lo, ci_high=hi, replicas=b, **common)


def _clipped_intervals(
    estimate: Any, method: str, f: np.ndarray, sd: np.ndarray, pub: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(std, low, high)`` of a clipping method (base-cut: below its threshold the value is cut to 0)."""
    cut = None
    if method == "base-cut":
        t = _pp.base_cut_threshold(f.size, estimate.variance)
        cut = f < t
        std = clipped_std(np.clip(f, 0.0, 1.0), sd, t, cut=True)
    else:
        std = clipped_std(np.clip(f, 0.0, 1.0), sd)
    lo, hi = clipped_interval(f, sd, pub, cut=cut, level=level)
    return std, lo, hi


def _simulated_intervals(
    oracle: Any,
    estimate: Any,
    method: str,
    pub: np.ndarray,
    seed: np.random.SeedSequence | None,
    b: int,
    level: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(low, high, std)`` of a consistency method: the inversion over ``b`` replicas simulated around
    the norm-sub projection of the unbiased estimate."""
    f = np.asarray(estimate.frequencies, dtype=np.float64)
    n = int(estimate.n)
    truth = _pp.norm_sub(f)
    var = np.maximum(np.asarray(oracle.variance(n, truth), dtype=np.float64), 1e-300)
    total = float(oracle.variance_of_sum(n, np.arange(f.size), f=truth))
    if seed is None:
        seed = data_seed(np.asarray(estimate.support_counts), method, n, getattr(oracle, "name", ""))
    rng = np.random.default_rng(seed)
    opts: dict[str, object] = {}
    if method == "mle-apx":
        opts = {"p": float(oracle.p), "q": float(oracle.q)}
    variance0 = estimate.variance

    def one() -> tuple[np.ndarray, np.ndarray]:
        u = simulate_unbiased(truth, var, total, rng)
        return u, np.asarray(_pp.postprocess(u, method, variance=variance0, n=n, **opts), dtype=np.float64)

    return inversion_interval(pub, np.sqrt(var), one, b, floored=method in _FLOORED, level=level)


def answer_interval(
    answer: np.ndarray, std: np.ndarray, raw: np.ndarray | None = None, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Range answers: the normal interval of the unclipped answer ``raw`` (default ``answer``) with its
    ``std``, intersected with [0, 1] and extended to contain the published ``answer``; NaN where the std
    is unknown."""
    a = np.asarray(answer, dtype=np.float64)
    r = a if raw is None else np.asarray(raw, dtype=np.float64)
    lo, hi = normal_interval(r, std, level)
    lo = np.minimum(np.clip(lo, 0.0, 1.0), a)
    hi = np.maximum(np.clip(hi, 0.0, 1.0), a)
    bad = ~np.isfinite(np.asarray(std, dtype=np.float64))
    lo[bad] = np.nan
    hi[bad] = np.nan
    return lo, hi
