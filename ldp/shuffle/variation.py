"""Mechanism-specific shuffle bounds from the variation-ratio decomposition (after Wang et al., "Unified and
tight privacy amplification by shuffling", VLDB 2024), in a form that is a valid dominating pair.

A randomizer is described by ``(p, beta, q)``: ``p`` bounds the likelihood ratio of two inputs' outputs,
``beta`` their total variation, ``q`` the ratio of any input's output to any third input's
(:func:`variation_parameters`). With ``alpha = beta / (p - 1)`` and ``w = 1 - alpha (p + 1)`` the two
neighbouring outputs are ``mu0 = alpha p Q0 + alpha Q1 + w M`` and ``mu1 = alpha Q0 + alpha p Q1 + w M``
(``Q0, Q1`` the normalized positive and negative parts of ``mu0 - mu1``, disjoint), and
``alpha p (Q0 + Q1) + w M = max(mu0, mu1) <= q mu_i`` for every other user's ``mu_i``. So every other
report is, independently, a draw from ``Q0`` (label A) w.p. ``alpha p / q``, from ``Q1`` (B) w.p. the
same, from ``M`` w.p. ``w / q``, else from its own remainder; the target's report is A, B or M w.p.
``(alpha p, alpha, w)`` (world 0) or ``(alpha, alpha p, w)`` (world 1). Given the three label counts
``(a, b, m)`` nothing else depends on the world, so the shuffled multiset is post-processing of them.

Counting M is what makes the pair valid: the published two-count pair (A and B only) drops it, and is below
the exact curve of GRR on 4 values (``n = 5``, ``eps0 = 2``: at ``eps = 0.5`` the shuffled histogram of
neighbours 0/1 among three users holding 2 has ``delta = 0.34044``, the two-count pair ``0.34011``); for
GRR it equals the two-count lower bound of :mod:`ldp.shuffle.lower_bounds`, which the three-count pair
exceeds by under 1% at ``n = 1e6``.

Evaluation: ``t = a + b + m = 1 + Bin(n - 1, (1 + beta) / q)`` has the same law in both worlds and the
divergence given ``t`` is non-increasing in ``t`` (one more label from another user is post-processing),
so ``t`` is cut into blocks charged at their lowest ``t``. Given ``t``, ``S = a + b`` has the same law in
both worlds, and given ``(t, S)`` the pair is a binary one whose divergence grows with ``gamma = S c /
(2 t - S c)`` and falls with ``S`` (:func:`_terms`): ``S`` is cut into blocks charged at their largest
``gamma`` and smallest ``S``, each a closed form in two tails of ``Bin(S, 1/2)``. Blocks cut the counts'
mean +- 9.5 sd at fixed points (:data:`BLOCK_RATIO`); the mass outside is added. The terms are cached by
``(n, p, beta, q)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from scipy import special

__all__ = [
    "binom_pmf",
    "binom_cdf",
    "binom_sf",
    "VARIATION_MECHANISMS",
    "BLOCK_RATIO",
    "BLOCK_SQRT",
    "VariationParameters",
    "variation_parameters",
    "variation_delta",
    "central_epsilon_variation",
    "solve_epsilon",
]

#: mechanisms with their own ``(p, beta, q)``; ``general`` is any eps0-LDP randomizer
VARIATION_MECHANISMS = ("general", "grr", "olh", "blh", "oue", "sue", "hr", "ss")
#: the counts of labels (all, and A or B) are cut into blocks at fixed points, relative spacing
#: ``max(BLOCK_RATIO - 1, BLOCK_SQRT / sqrt(x))`` (:func:`_grid_points`)
BLOCK_RATIO = 1.004
BLOCK_SQRT = 0.25
#: relative allowance on each evaluated term for the rounding of scipy's binomial tails and the sums
ROUND_ALLOWANCE = 1e-11
#: the epsilon search stops when the bracket is below ``ABS_TOL + REL_TOL * eps`` (reported from above)
ABS_TOL = 1e-7
REL_TOL = 2e-5


def binom_pmf(k: np.ndarray | int, n: int | np.ndarray, p: float) -> np.ndarray:
    """``P[Bin(n, p) = k]`` (0 outside ``0..n``): scipy's binomial pmf (boost), through the ufunc
    ``scipy.stats.binom`` calls, so that ``scipy.stats`` (a second of start-up) is not imported."""
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    inside = (k >= 0) & (k <= n)
    kk, nn = np.where(inside, k, 0.0), np.where(inside, n, 0.0)
    pmf = getattr(special._ufuncs, "_binom_pmf", None)
    if pmf is None:  # another scipy: the public route
        from scipy import stats

        val = stats.binom.pmf(kk, nn, p)
    else:
        val = pmf(kk, nn, p)
    return np.where(inside, val, 0.0)


def binom_cdf(k: np.ndarray | int, n: int | np.ndarray, p: float) -> np.ndarray:
    """``P[Bin(n, p) <= k]`` for real ``k`` (0 below 0, 1 from ``n`` on)."""
    k, n = np.broadcast_arrays(np.floor(np.asarray(k, dtype=float)), np.asarray(n, dtype=float))
    inside = (k >= 0) & (k < n)
    val = special.bdtr(np.where(inside, k, 0.0), np.where(inside, n, 1.0).astype(np.int64), p)
    return np.where(k < 0, 0.0, np.where(inside, val, 1.0))


def binom_sf(k: np.ndarray | int, n: int | np.ndarray, p: float) -> np.ndarray:
    """``P[Bin(n, p) > k]`` for real ``k`` (1 below 0, 0 from ``n`` on)."""
    k, n = np.broadcast_arrays(np.floor(np.asarray(k, dtype=float)), np.asarray(n, dtype=float))
    inside = (k >= 0) & (k < n)
    val = special.bdtrc(np.where(inside, k, 0.0), np.where(inside, n, 1.0).astype(np.int64), p)
    return np.where(k < 0, 1.0, np.where(inside, val, 0.0))


class VariationParameters(NamedTuple):
    """``p``: max ratio between two inputs' outputs; ``beta``: their total variation (an upper bound, the
    same for every pair of inputs of the mechanisms here); ``q``: max ratio of an input's output to any
    other input's."""

    p: float
    beta: float
    q: float


def _positive_int(x: object, what: str, low: int) -> int:
    if x is None or isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {x!r}")
    return int(x)


def variation_parameters(mechanism: str, eps0: float, domain_size: int | None = None,
                         subset_size: int | None = None) -> VariationParameters:
    """``(p, beta, q)`` of an ``eps0``-LDP mechanism; ``p = q = e^eps0`` for all of them. ``beta``:

    * ``general`` (any randomizer): ``(e - 1) / (e + 1)``, the largest total variation at ratio ``e``;
    * ``grr`` on ``[k]`` (``domain_size = k``): ``(e - 1) / (e + k - 1)``;
    * ``olh`` with ``g`` buckets (``domain_size = g``), ``blh`` (``g = 2``): GRR on ``[g]`` for the seed
      where the two values' buckets differ, ``(e - 1) / (e + g - 1)`` (no credit for collisions);
    * ``oue``: ``(e - 1) / (2 (e + 1))``; ``sue`` (basic RAPPOR): ``(e^(eps0/2) - 1) / (e^(eps0/2) + 1)``;
    * ``hr`` (symmetric Hadamard response, half-size sets meeting in a quarter): ``(e - 1) / (2 (e + 1))``;
    * ``ss``, ``subset_size`` of ``domain_size`` values: ``(e - 1)(d - k)/(d - 1) / (e + (d - k)/k)``.
    """
    if mechanism not in VARIATION_MECHANISMS:
        known = ", ".join(VARIATION_MECHANISMS)
        raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {known}")
    e = math.exp(eps0)
    em1 = math.expm1(eps0)
    if mechanism == "general":
        beta = math.tanh(eps0 / 2.0)
    elif mechanism == "grr":
        beta = em1 / (e + _positive_int(domain_size, "grr domain_size", 2) - 1.0)
    elif mechanism in ("olh", "blh"):
        g = 2 if mechanism == "blh" else _positive_int(domain_size, "olh domain_size (buckets g)", 2)
        beta = em1 / (e + g - 1.0)
    elif mechanism in ("oue", "hr"):
        beta = 0.5 * math.tanh(eps0 / 2.0)
    elif mechanism == "sue":
        beta = math.tanh(eps0 / 4.0)
    else:
        d = _positive_int(domain_size, "ss domain_size", 2)
        k = _positive_int(subset_size, "ss subset_size", 1)
        if k >= d:
            raise ValueError(f"ss subset_size must be below domain_size {d}, got {k}")
        beta = em1 * (d - k) / (d - 1.0) / (e + (d - k) / k)
    return VariationParameters(e, min(beta, math.tanh(eps0 / 2.0)), e)


@functools.lru_cache(maxsize=1)
def _grid_points() -> np.ndarray:
    """The fixed block grid: integers ``x_j`` up to ``1e12`` spaced by ``max(BLOCK_RATIO - 1,
    BLOCK_SQRT / sqrt(x))`` relative (every integer at the bottom)."""
    points, x = [], 1.0
    while x < 1e12:
        points.append(math.ceil(x))
        x = max(x * (1.0 + max(BLOCK_RATIO - 1.0, BLOCK_SQRT / math.sqrt(x))), math.ceil(x) + 1.0)
    return np.unique(np.asarray(points, dtype=np.int64))


def _grid(lo: int, hi: int) -> np.ndarray:
    """``lo`` and the points of the fixed grid (:func:`_grid_points`) in ``(lo, hi]``. The grid does not move
    with the parameters, so the figure has no jumps from blocks re-cut by rounding as ``eps0`` changes
    (the inverse bisects on ``eps0``)."""
    points = _grid_points()
    inside = points[np.searchsorted(points, lo, side="right"):np.searchsorted(points, hi, side="right")]
    return np.concatenate([[lo], inside]).astype(np.int64)


def _blocks(m: int, prob: float) -> tuple[np.ndarray, np.ndarray]:
    """``(lowest value, probability)`` of each block of ``Bin(m, prob)``: the body (mean +- 9.5 sd) cut on
    :func:`_grid`, one block from 0 below it, the last to ``m``."""
    if m == 0 or prob <= 0.0:
        return np.zeros(1), np.ones(1)
    mean, sd = m * prob, math.sqrt(m * prob * max(1.0 - prob, 0.0))
    lo = max(0, int(math.floor(mean - 9.5 * sd - 10.0)))
    hi = min(m, max(lo, int(math.ceil(mean + 9.5 * sd + 10.0))))
    body = _grid(lo, hi)
    starts = body if body[0] == 0 else np.concatenate([[0], body])
    below = binom_cdf(starts - 1, m, prob)
    return starts.astype(float), np.maximum(np.diff(np.concatenate([below, [1.0]])), 0.0)


class _Terms(NamedTuple):
    weight: np.ndarray  # probability charged to each (block of t, block of S) cell
    gamma: np.ndarray  # the cell's largest gamma
    size: np.ndarray  # the cell's smallest S (at least 1)
    outside: float  # mass of the S tails left out (added to every divergence)


@functools.lru_cache(maxsize=128)
def _terms(n: int, p: float, beta: float, q: float) -> _Terms:
    """The eps-independent cells of the pair for ``n`` reports (module docstring).

    Given ``t`` labels, world 0 puts ``Bin(t, ab)(S) Bin(S, 1/2)(a) (1 + beta)(t - S c + a c) / t`` on
    ``(a, S)`` (``c = 1 - 1/p``, ``ab`` the chance that a label is A or B), so ``S`` has the same law in
    both worlds and, given ``(t, S)``, ``a`` is ``X + Bern(1/2 + gamma / 2)`` in world 0 and
    ``X + Bern(1/2 - gamma / 2)`` in world 1, ``X ~ Bin(S - 1, 1/2)``, ``gamma = S c / (2 t - S c)``.
    That divergence grows with ``gamma`` (a smaller one is a mixture with a world-free draw) and falls
    with ``S`` (one more fair coin is post-processing), so a block of ``S`` is charged at its largest
    ``gamma`` and smallest ``S``; a block of ``t`` at its lowest ``t``."""
    alpha = beta / (p - 1.0)
    c = 1.0 - 1.0 / p
    rho = min(1.0, (1.0 + beta) / q)  # another report is labelled A, B or M
    ab = min(1.0, 2.0 * alpha * p / (1.0 + beta))  # a label is A or B
    starts, probs = _blocks(n - 1, rho)
    weights, gammas, sizes, outside = [], [], [], 0.0
    for first, pb in zip(starts, probs):
        if pb <= 0.0:
            continue
        t = int(first) + 1
        mean, sd = t * ab, math.sqrt(t * ab * (1.0 - ab))
        lo = max(0, int(math.floor(mean - 9.5 * sd - 10.0)))
        hi = min(t, int(math.ceil(mean + 9.5 * sd + 10.0)))
        s = np.arange(lo, hi + 1)
        mass = binom_pmf(s, t, ab) * (1.0 + beta) * (t - 0.5 * c * s) / t  # P(S | t)
        tail = (float(binom_cdf(lo - 1, t, ab)) if lo > 0 else 0.0) + \
            (float(binom_sf(hi, t, ab)) if hi < t else 0.0)
        outside += pb * (1.0 + beta) * tail
        cut = _grid(lo, hi)
        top = np.concatenate([cut[1:] - 1, [hi]]).astype(float)
        weights.append(pb * np.add.reduceat(mass, cut - lo))
        gammas.append(np.minimum(top * c / (2.0 * t - top * c), 1.0))
        sizes.append(np.maximum(cut, 1).astype(float))
    return _Terms(np.concatenate(weights), np.concatenate(gammas), np.concatenate(sizes), outside)


def _sf_half(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``P[Bin(n, 1/2) > k]`` for real ``k`` and integer ``n >= 0`` (1 below 0, 0 from ``n`` on)."""
    k, n = np.broadcast_arrays(k, n)
    inside = (k >= 0) & (k < n)
    val = special.bdtrc(np.where(inside, k, 0.0), np.where(inside, n, 1.0).astype(np.int64), 0.5)
    return np.where(k < 0, 1.0, np.where(inside, val, 0.0))


def variation_delta(eps: Sequence[float] | np.ndarray, n: int, params: VariationParameters) -> np.ndarray:
    """Upper bound on the hockey-stick divergence at each ``eps`` (any sign) of ``n`` shuffled reports of a
    randomizer with these parameters: the three-count pair's, both directions (it is symmetric).

    Per cell, with ``M = S``: world 0 minus ``e^eps`` world 1 at ``a`` is ``Bin(M, 1/2)(a)`` times
    ``(1 - gamma)(1 - e^eps) - 2 gamma e^eps + 2 gamma (1 + e^eps) a / M``, positive above a threshold:
    two tails of ``Bin(M, 1/2)`` and ``Bin(M - 1, 1/2)``."""
    grid = np.atleast_1d(np.asarray(eps, dtype=float))
    p, beta, q = params
    terms = _terms(int(n), float(p), float(beta), float(q))
    e_eps = np.exp(grid)[:, None]
    g, m = terms.gamma[None, :], terms.size[None, :]
    const = (1.0 - g) * (1.0 - e_eps) - 2.0 * g * e_eps
    slope = 2.0 * g * (1.0 + e_eps) / m
    first = np.floor(-const / np.where(slope > 0, slope, 1.0)) + 1.0  # smallest a with a positive term
    upper = _sf_half(first - 1.0, m)  # P[Bin(M, 1/2) >= first]
    upper_1 = _sf_half(first - 2.0, m - 1.0)  # P[Bin(M - 1, 1/2) >= first - 1]
    part = np.where(slope > 0, const * upper + slope * 0.5 * m * upper_1, np.maximum(const, 0.0))
    scale = np.abs(const) * upper + slope * 0.5 * m * upper_1
    value = np.maximum(part, 0.0) @ terms.weight + ROUND_ALLOWANCE * (scale @ terms.weight)
    return np.minimum(value + terms.outside, 1.0)


def solve_epsilon(delta_fn: Callable[[float], float], delta: float, hi: float) -> float:
    """Smallest ``eps`` in ``[0, hi]`` with ``delta_fn(eps) <= delta`` for a non-increasing ``delta_fn``,
    from above (the returned ``eps`` satisfies it), to ``ABS_TOL + REL_TOL * eps``: bisection on ``log eps``
    down to a factor of 2, then regula falsi on ``log delta_fn`` with the Illinois step (about ten
    evaluations)."""
    hi = float(hi)
    f_hi = delta_fn(hi)
    if f_hi > delta:
        return hi
    lo, f_lo = 0.0, math.inf
    probe = hi
    while probe > ABS_TOL and lo == 0.0:  # geometric search for a failing point below hi
        probe *= 1e-2 if hi / probe < 1e4 else 1e-1
        f = delta_fn(probe)
        if f <= delta:
            hi, f_hi = probe, f
        else:
            lo, f_lo = probe, f
    if lo == 0.0:
        return hi if delta_fn(0.0) > delta else 0.0
    while hi / lo > 2.0:
        mid = math.sqrt(lo * hi)
        f = delta_fn(mid)
        if f <= delta:
            hi, f_hi = mid, f
        else:
            lo, f_lo = mid, f
    target = math.log(delta)
    g_lo, g_hi = math.log(max(f_lo, 1e-300)) - target, math.log(max(f_hi, 1e-300)) - target
    side = 0
    while hi - lo > ABS_TOL + REL_TOL * hi:
        x = hi - g_hi * (hi - lo) / (g_hi - g_lo) if g_lo > 0 > g_hi or g_lo > 0 >= g_hi else 0.5 * (lo + hi)
        x = min(max(x, lo + 0.02 * (hi - lo)), hi - 0.02 * (hi - lo))
        f = delta_fn(x)
        g = math.log(max(f, 1e-300)) - target
        if f <= delta:
            hi, g_hi = x, g
            if side == 1:
                g_lo *= 0.5
            side = 1
        else:
            lo, g_lo = x, g
            if side == -1:
                g_hi *= 0.5
            side = -1
    return hi


def central_epsilon_variation(eps0: float, n: int, delta: float, mechanism: str = "general",
                              domain_size: int | None = None, subset_size: int | None = None) -> float:
    """Central epsilon at ``delta`` of ``n`` shuffled reports of ``mechanism`` from the three-count pair
    (at most ``eps0``)."""
    params = variation_parameters(mechanism, eps0, domain_size, subset_size)
    return solve_epsilon(lambda e: float(variation_delta([e], n, params)[0]), delta, eps0)
