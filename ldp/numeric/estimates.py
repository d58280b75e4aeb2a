"""Per-window estimates of a numeric attribute: mean (two intervals), variance, histogram and quantiles.

Targets. Every interval is for the window's users: the mean (variance, quantiles) of their clipped values,
the randomness being the mechanism's. Notation as in :mod:`ldp.numeric.mechanisms` (``t`` in ``[-1, 1]``,
``y`` the unbiased per-report output, ``half = (high - low) / 2``).

Mean. ``mean = low + half (mean(y) + 1)``, unbiased; it may fall outside ``[low, high]`` at small ``n``
(it is not clipped; the intervals are). ``mean_std = half sqrt(V / n)`` with ``V`` the mechanism's
estimate of ``mean_i Var[y | t_i]`` (:meth:`~ldp.numeric.mechanisms.NumericMechanism.
conditional_variance_estimate`: unbiased for PM, HM, Laplace, Square Wave; the sample variance, which is
conservative, for Duchi and 1BitMean); with ``moments = 2`` (the users split between two reports) the
sample variance of the first half, which also carries the spread added by the random split.

* ``mean_ci_low / mean_ci_high``: ``mean +- 1.96 mean_std`` intersected with ``[low, high]``. For the
  two-point mechanisms (Duchi, 1BitMean, Hybrid at ``alpha = 0``: every output is ``+-C``) the mean is an
  affine map of the fraction ``f`` of ``+C`` outputs, and the interval is the Wilson score interval of
  ``f`` mapped through it: the normal interval of a proportion under-covers at small ``n`` (0.923 at
  ``n = 40``, eps 0.5, values at the bounds, where Wilson gives about 0.95). The sum of the outputs is
  Poisson-binomial, whose variance is at most the binomial one at the mean ``f``, so Wilson's binomial
  variance is conservative there.
* ``mean_bound_low / mean_bound_high``: valid at every ``n``, from Bernstein's inequality for independent
  outputs with ``|y - E y| <= R`` (``R = max |y| + 1``, the mechanism's bounded output range) and variance
  at most ``sigma^2 = max_t Var[y | t]`` (closed form, nothing estimated): each tail ``exp(-n s^2 /
  (2 sigma^2 + 2 R s / 3)) = 0.025``, so ``s = (2RL/3 + sqrt((2RL/3)^2 + 8 n sigma^2 L)) / (2n)`` with
  ``L = ln 40``. Laplace's output is unbounded: there the Chernoff bound of the mean of ``n`` Laplace
  variables, ``min_lambda exp(-n (lambda s + ln(1 - lambda^2 beta^2)))``, is solved for ``s``. Intersected
  with ``[low, high]``.

Variance (``moments = 2``). ``m1 = E[u]`` and ``m2 = E[u^2]`` from the two halves, ``var = (high - low)^2
(m2 - m1^2)`` (clipped to ``[0, (high - low)^2 / 4]``, the largest variance on the interval), std by the
delta method ``(high - low)^2 sqrt(Var m2 + 4 m1^2 Var m1)`` (the halves are independent), normal interval.
Square Wave: the variance of the estimated distribution (no interval).

Distribution and quantiles (``square-wave``). EM or EMS (:func:`ldp.square_wave.em_estimate`) over the
mechanism's sub-bins gives ``f``; the histogram is ``f`` summed to ``bins`` equal bins of ``[low, high]``; a
quantile ``q`` is where the piecewise-linear CDF reaches ``q``. Interval: a parametric bootstrap from the
estimate. ``B`` replicas of the output-bin counts are drawn from ``Multinomial(n, M f)`` (``M`` the exact
transition matrix), re-estimated with the same EM(S) and stopping rule (all replicas in one loop whose
products with ``M`` take linear time, :class:`ldp.square_wave.SWOperator`), and give quantiles ``theta*_b``
with standard deviation ``sd*`` and bias ``b* = mean(theta*) - theta``. The smoothing of EMS biases the
estimate, and the replicas see only part of that bias because they start from an estimate that is already
smooth. On lognormal data at eps = 1 and n = 1e6 the median's real error was about 5.5 ``sd*`` against
``b*`` of about 2.8 ``sd*``. The interval is therefore symmetric and allows twice the bias the replicas
show: ``theta +- (z sd* + 2 |b*| + w / 2)``, with ``w / 2`` half a bin (the CDF is known only at bin
resolution). This is a measured rule, not a theorem. The replicas are seeded from the data
(``ldp.intervals.data_seed`` of the counts), so equal reports give equal intervals. Coverage is measured in
``experiments/numeric.py`` (``docs/numeric.md``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp.intervals import data_seed, z_value
from ldp.numeric.mechanisms import NumericAccumulator, NumericMechanism, SquareWaveNumeric
from ldp.square_wave import SWOperator, em_estimate, em_estimate_batch

__all__ = [
    "DEFAULT_QUANTILES",
    "DEFAULT_REPLICAS",
    "NumericEstimate",
    "QuantileEstimate",
    "estimate",
    "bernstein_halfwidth",
    "laplace_chernoff_halfwidth",
    "quantiles_from_cdf",
]

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
#: bootstrap replicas of the quantile intervals
DEFAULT_REPLICAS = 32
#: the quantile interval allows, on either side, this multiple of the bias the bootstrap replicas show
BIAS_ALLOWANCE = 2.0
LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class QuantileEstimate:
    """One requested quantile: ``q`` in (0, 1), the estimated value and its interval."""

    q: float
    value: float
    ci_low: float
    ci_high: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class NumericEstimate:
    """The estimates of one attribute in one window (see the module docstring for each method).

    ``variance*`` are None without a second moment (``moments = 1``, not Square Wave); ``histogram`` and
    ``bin_edges`` are None except for Square Wave; ``quantiles`` is then empty.
    """

    attribute: str
    mechanism: str
    epsilon: float
    n: int
    mean: float
    mean_std: float
    mean_ci_low: float
    mean_ci_high: float
    mean_bound_low: float
    mean_bound_high: float
    variance: float | None = None
    variance_std: float | None = None
    variance_ci_low: float | None = None
    variance_ci_high: float | None = None
    quantiles: tuple[QuantileEstimate, ...] = ()
    histogram: np.ndarray | None = None
    bin_edges: np.ndarray | None = None
    em_iterations: int | None = None
    em_converged: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists for arrays), e.g. for a result row or JSON."""
        out = dataclasses.asdict(self)
        out["quantiles"] = [q.to_dict() for q in self.quantiles]
        for k in ("histogram", "bin_edges"):
            out[k] = None if out[k] is None else [float(v) for v in out[k]]
        return out


def bernstein_halfwidth(n: int, sigma2: float, r: float, level: float = LEVEL) -> float:
    """Half-width ``s`` of the two-sided Bernstein interval of a mean of ``n`` independent variables with
    variance at most ``sigma2`` and ``|X - E X| <= r``: each tail
    ``exp(-n s^2 / (2 sigma2 + 2 r s / 3)) = (1 - level) / 2``."""
    if n < 1:
        return math.inf
    big_l = math.log(2.0 / (1.0 - level))
    a = 2.0 * r * big_l / 3.0
    return (a + math.sqrt(a * a + 8.0 * n * sigma2 * big_l)) / (2.0 * n)


def laplace_chernoff_halfwidth(n: int, beta: float, level: float = LEVEL) -> float:
    """Half-width ``s`` with ``P[|mean of n Lap(beta)| >= s] <= 1 - level`` from the Chernoff bound
    ``P[mean >= s] <= exp(-n (lambda s + ln(1 - lambda^2 beta^2)))`` at its best
    ``lambda = (sqrt(beta^2 + s^2) - beta) / (s beta)``."""
    if n < 1:
        return math.inf
    target = math.log((1.0 - level) / 2.0) / n

    def log_bound(s: float) -> float:
        lam = (math.sqrt(beta * beta + s * s) - beta) / (s * beta)
        return -(lam * s + math.log1p(-(lam * beta) ** 2)) - target

    hi = beta
    while log_bound(hi) > 0:
        hi *= 2.0
    from scipy.optimize import brentq  # imported on use: scipy.optimize costs ~0.4 s at start-up

    return float(brentq(log_bound, 1e-12 * beta, hi, xtol=1e-12 * beta))


def _mean_bound(mech: NumericMechanism, n: int, level: float) -> float:
    """Half-width (t scale) of the mean interval that is valid at every ``n``."""
    lo, hi = mech.output_range  # every grid output is bounded (Laplace's by the refused e^-60 tail)
    return bernstein_halfwidth(n, mech.worst_case_variance(), max(abs(lo), abs(hi)) + 1.0, level)


def quantiles_from_cdf(cdf: np.ndarray, edges: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """Quantiles of a piecewise-linear CDF given at ``edges`` (``cdf[0] = 0``, ``cdf[-1] = 1``); works on
    ``(B, len(edges))`` arrays too (one row per distribution)."""
    cdf = np.atleast_2d(cdf)
    out = np.empty((cdf.shape[0], len(qs)))
    for j, q in enumerate(qs):
        k = np.argmax(cdf >= q, axis=1)  # first edge at or above q (k >= 1 since cdf[:, 0] = 0 < q)
        k = np.maximum(k, 1)
        c0 = cdf[np.arange(len(k)), k - 1]
        c1 = cdf[np.arange(len(k)), k]
        frac = np.where(c1 > c0, (q - c0) / np.where(c1 > c0, c1 - c0, 1.0), 0.5)
        out[:, j] = edges[k - 1] + np.clip(frac, 0.0, 1.0) * (edges[k] - edges[k - 1])
    return out


def _check_quantiles(qs: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(q) for q in qs)
    if any(not (0.0 < q < 1.0) for q in out):
        raise ValueError(f"quantiles must lie in (0, 1), got {list(qs)}")
    return out


def _distribution(mech: SquareWaveNumeric, acc: NumericAccumulator, qs: tuple[float, ...],
                  replicas: int, level: float) -> dict[str, Any]:
    sw = mech.sw
    counts = np.asarray(acc.counts, dtype=np.int64)
    n = int(counts.sum())
    mat = sw.em_matrix()
    f_fine, iters, conv = em_estimate(counts, mat, smoothing=sw.smoothing, tol=sw.tol, max_iter=sw.max_iter)
    fine_edges = np.linspace(mech.low, mech.high, f_fine.size + 1)
    hist = f_fine.reshape(sw.d, sw.em_resolution).sum(axis=1)
    edges = np.linspace(mech.low, mech.high, sw.d + 1)
    cdf = np.concatenate([[0.0], np.cumsum(f_fine)])
    cdf[-1] = 1.0
    theta = quantiles_from_cdf(cdf, fine_edges, qs)[0]
    centres = 0.5 * (fine_edges[:-1] + fine_edges[1:])
    mean_d = float(f_fine @ centres)
    var_d = float(f_fine @ (centres - mean_d) ** 2 + (fine_edges[1] - fine_edges[0]) ** 2 / 12.0)
    out: dict[str, Any] = {"histogram": hist, "bin_edges": edges, "em_iterations": int(iters),
                           "em_converged": bool(conv), "variance": var_d, "quantiles": ()}
    if not qs:
        return out
    rng = np.random.default_rng(data_seed("numeric-quantiles", counts, mech.describe()["sw"], qs, replicas))
    probs = mat.forward(f_fine) if isinstance(mat, SWOperator) else mat @ f_fine
    probs = probs / probs.sum()
    boot = rng.multinomial(n, probs, size=replicas)
    f_b, _, _ = em_estimate_batch(boot, mat, smoothing=sw.smoothing, tol=sw.tol, max_iter=sw.max_iter)
    cdf_b = np.concatenate([np.zeros((replicas, 1)), np.cumsum(f_b, axis=1)], axis=1)
    cdf_b[:, -1] = 1.0
    theta_b = quantiles_from_cdf(cdf_b, fine_edges, qs)
    sd_b = theta_b.std(axis=0, ddof=1)
    bias_b = np.abs(theta_b.mean(axis=0) - theta)
    half = z_value(level) * sd_b + BIAS_ALLOWANCE * bias_b + 0.5 * (edges[1] - edges[0])
    ci_lo = np.clip(theta - half, mech.low, mech.high)
    ci_hi = np.clip(theta + half, mech.low, mech.high)
    out["quantiles"] = tuple(QuantileEstimate(q, float(v), float(lo), float(hi))
                             for q, v, lo, hi in zip(qs, theta, ci_lo, ci_hi))
    return out


def _mean_fields(mech: NumericMechanism, n0: int, my: float, v: float, level: float) -> dict[str, float]:
    """The mean, its std, its interval (normal; Wilson for two-point outputs) and its every-n bound, from
    the first-moment reports' count ``n0``, mean output ``my`` and variance estimate ``v``."""
    z = z_value(level)
    half = 0.5 * (mech.high - mech.low)
    mean = mech.low + half * (my + 1.0)
    std = half * math.sqrt(v / n0)
    bound = half * _mean_bound(mech, n0, level)

    def clip(a: float) -> float:
        return float(min(max(a, mech.low), mech.high))

    ci_low, ci_high = mean - z * std, mean + z * std
    a_poly, b_poly, _ = mech.variance_poly
    if b_poly + 1.0 <= 1e-9:  # two-point outputs +-C: the Wilson interval of the fraction of +C
        c = math.sqrt(a_poly)  # Var[y | t] = C^2 - t^2
        f = min(max(0.5 * (my / c + 1.0), 0.0), 1.0)
        z2n = z * z / n0
        centre = (f + 0.5 * z2n) / (1.0 + z2n)
        w = z / (1.0 + z2n) * math.sqrt(f * (1.0 - f) / n0 + 0.25 * z2n / n0)
        ci_low = mech.low + half * (c * (2.0 * (centre - w) - 1.0) + 1.0)
        ci_high = mech.low + half * (c * (2.0 * (centre + w) - 1.0) + 1.0)
    return dict(mean=float(mean), mean_std=float(std), mean_ci_low=clip(ci_low), mean_ci_high=clip(ci_high),
                mean_bound_low=clip(mean - bound), mean_bound_high=clip(mean + bound))


def _variance_fields(mech: NumericMechanism, acc: NumericAccumulator, n0: int, my: float, v: float,
                     level: float) -> dict[str, float]:
    """``moments = 2``: the variance from the two halves with its delta-method std and normal interval,
    clipped to ``[0, (high - low)^2 / 4]`` (none when the second half has fewer than 2 reports)."""
    n1, m1y, m1y2 = acc.moments(1)
    if n1 < 2:
        return {}
    z, width = z_value(level), mech.high - mech.low
    v1 = max(m1y2 - m1y * m1y, 0.0) * n1 / (n1 - 1)
    m1, m2 = 0.5 * (my + 1.0), 0.5 * (m1y + 1.0)
    var_m1, var_m2 = v / (4.0 * n0), v1 / (4.0 * n1)
    var = width * width * (m2 - m1 * m1)
    vstd = width * width * math.sqrt(var_m2 + 4.0 * m1 * m1 * var_m1)
    top = width * width / 4.0
    return dict(variance=float(min(max(var, 0.0), top)), variance_std=float(vstd),
                variance_ci_low=float(min(max(var - z * vstd, 0.0), top)),
                variance_ci_high=float(min(max(var + z * vstd, 0.0), top)))


def estimate(mech: NumericMechanism, acc: NumericAccumulator, *, attribute: str = "value",
             quantiles: Sequence[float] = DEFAULT_QUANTILES, replicas: int = DEFAULT_REPLICAS,
             level: float = LEVEL, distribution: bool = True) -> NumericEstimate:
    """The window's estimate from an accumulator of ``mech`` (module docstring).

    Args:
        mech: the mechanism the reports were made with.
        acc: its accumulator over the window.
        attribute: the attribute's name (carried into the estimate).
        quantiles: quantiles to estimate (Square Wave only; others return none).
        replicas: bootstrap replicas of the quantile intervals.
        level: confidence level of every interval.
        distribution: run Square Wave's EM (histogram, variance, quantiles); False gives the mean only.

    Raises:
        ValueError: an empty window, or bad quantiles.
    """
    qs = _check_quantiles(quantiles)
    n0, my, my2 = acc.moments(0)
    if n0 == 0:
        raise ValueError(f"no first-moment reports for attribute {attribute!r}: nothing to estimate")
    if mech.moments == 1:
        v = mech.conditional_variance_estimate(my, my2)
    else:
        v = max(my2 - my * my, 0.0) * n0 / max(n0 - 1, 1)
    fields: dict[str, Any] = dict(attribute=attribute, mechanism=mech.name, epsilon=mech.epsilon,
                                  n=int(sum(acc.n)), **_mean_fields(mech, n0, my, v, level))  # fmt: skip
    if mech.moments == 2:
        fields.update(_variance_fields(mech, acc, n0, my, v, level))
    if isinstance(mech, SquareWaveNumeric) and distribution:
        fields.update(_distribution(mech, acc, qs, int(replicas), level))
    return NumericEstimate(**fields)
