"""Privacy accounting for anonymous (shuffled) collection: the central (eps, delta) of one shuffled batch of
``n`` reports from an ``eps0``-LDP randomizer, its composition over windows, and the inverse (the largest
``eps0`` for a central target). numpy/scipy only; see ``docs/shuffle_accounting.md``.

Every figure is an upper bound. All but the exact binary-RR one come from an explicit *dominating pair*
``(P, Q)`` whose hockey-stick divergence ``delta(eps) = sum max(0, P - e^eps Q)`` is computed numerically;
the central epsilon is then the smallest ``eps`` on a bisection grid with ``delta(eps) <= delta`` (the
upper end of the final bracket).

Pairs:

* **general** (any ``eps0``-LDP randomizer; Feldman, McMillan, Talwar, "Hiding among the clones", FOCS
  2021): ``C ~ Bin(n - 1, e^-eps0)`` clones, ``A ~ Bin(C, 1/2)``, ``D ~ Bern(e^eps0 / (e^eps0 + 1))``,
  ``P = (A + D, C - A + 1 - D)``, ``Q = (A + 1 - D, C - A + D)``.
* **GRR on [k]** (the privacy-blanket decomposition of Balle et al., as used by Koskela et al.): every other
  user's report is uniform on ``[k]`` w.p. ``k / (e^eps0 + k - 1)``; revealing who did leaves the same pair
  with ``C ~ Bin(n - 1, 2 / (e^eps0 + k - 1))``, entered w.p. ``lambda = (e^eps0 + 1) / (e^eps0 + k - 1)``
  (otherwise the target's report falls outside the two values in question and both worlds coincide), so
  ``delta <= lambda * D_pair`` (plus ``(1 - lambda)(1 - e^eps)`` for ``eps < 0``, the exact mixture curve).
  The figure reported for GRR with ``k >= 3`` (and binary RR beyond the exact limit) is the smaller of
  this and the general bound.
* **variation ratio** (:mod:`ldp.shuffle.variation`): the three-count pair of a randomizer's ``(p, beta,
  q)`` (GRR, OLH/BLH, OUE/SUE, HR, SS, and with the general parameters any eps0-LDP randomizer, where it
  is Feldman, McMillan and Talwar's stronger-clone pair). :func:`central_epsilon_report` reports the
  smallest valid figure and names it.
* **binary RR, exact** (:func:`central_epsilon_binary_rr_exact`, the figure reported for GRR on two
  values up to :data:`BINARY_EXACT_MAX_N` reports): no dominating pair but the worst case itself. With
  ``m`` of the other ``n - 1`` users holding 1 the count of ones is ``S_m + Bern(p)`` against
  ``S_m + Bern(q)``, ``S_m = Bin(m, p) + Bin(n - 1 - m, q)``; the central epsilon is the largest over every
  ``m`` and both orders of the epsilon at which that pair's divergence is ``delta``. Every probability it
  forms is a sum of non-negative terms (scipy's binomial pmf, direct convolutions), so its relative
  rounding error is bounded; the computation allows :data:`BINARY_EXACT_REL_ERR` on each and adds every
  trimmed tail mass to the divergence, so the figure is never below the exact value.
* **binary RR, all-equal split** (:func:`central_epsilon_binary_rr_equal_split`): the split ``m = 0``
  alone, as an exact finite sum of binomial tails. A **lower bound** on the exact value (one pair of
  neighbouring datasets); within 1.4e-4 relative of the exact value on the table of
  docs/shuffle_accounting.md, but not everywhere (at small ``n`` and large ``delta`` other splits have
  up to 20% more ``delta``).

Evaluation of the clone pair: given ``C = c`` the divergence ``D_c`` has a closed form in two tails of
``Bin(c, 1/2)`` (the likelihood ratio is monotone in ``A``), and ``D_c`` is non-increasing in ``c`` (one more
clone is post-processing: add a fair coin to one coordinate). So ``c`` is cut into at most
:data:`MAX_BLOCKS` blocks, each charged ``D`` at its lowest ``c``: no truncation, an upper bound, and the
result is still the exact curve of a dominating pair (which the connect-the-dots composition needs).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import special

from ldp.shuffle.randomizers import (
    LevelledRandomizer,
    Randomizer,
    heavy_hitters_randomizer,
    numeric_randomizer,
    range_randomizer,
)
from ldp.shuffle.variation import (
    VariationParameters,
    binom_cdf,
    binom_pmf,
    binom_sf,
    solve_epsilon,
    variation_delta,
    variation_parameters,
)

__all__ = [
    "MECHANISMS",
    "MAX_BLOCKS",
    "MIN_WINDOW_REPORTS",
    "ShuffleAccountingError",
    "fmt_closed_form_applies",
    "central_epsilon_fmt_closed_form",
    "central_epsilon_fmt_numerical",
    "central_epsilon_general",
    "central_epsilon_grr",
    "central_epsilon_grr_blanket",
    "central_epsilon_binary_rr_equal_split",
    "central_epsilon_binary_rr_exact",
    "binary_rr_exact_applies",
    "BINARY_EXACT_MAX_N",
    "CentralEpsilon",
    "accounting_for_oracle",
    "accounting_for_task",
    "central_epsilon",
    "central_epsilon_report",
    "delta_curve",
    "local_epsilon_for_central",
    "compose_windows",
    "comparison_table",
    "format_table",
]

#: mechanisms the accountant knows: any eps0-LDP randomizer, GRR / k-RR (``domain_size`` = k), and the FMT
#: closed form (for comparison and the inverse)
MECHANISMS = ("general", "grr", "fmt_closed", "olh", "blh", "oue", "sue", "hr", "ss")
#: mechanisms whose ``domain_size`` is required: GRR's k, OLH's number of buckets g, SS's d
_SIZED = {"grr": "k", "olh": "the number of hash buckets g", "ss": "d"}
#: the clone count is cut into at most this many blocks (each charged its lowest count: an upper bound)
MAX_BLOCKS = 96
#: composition refuses windows with fewer shuffled reports than this (``min_reports`` overrides)
MIN_WINDOW_REPORTS = 100
#: bisection stops when the bracket is below ``EPS_ABS_TOL + EPS_REL_TOL * eps``
EPS_ABS_TOL = 1e-6
EPS_REL_TOL = 1e-5
#: connect-the-dots grid points per window on [-eps_top, eps_top] for the composition
GRID_POINTS = 200
#: exact binary RR (:func:`central_epsilon_binary_rr_exact`): computed for n up to this (0.1-0.3 s at
#: 1e4, 1-2.5 s at 1e5, growing like n^1.5); above it the blanket bound is reported
BINARY_EXACT_MAX_N = 100_000
#: ... and for delta down to this (so that no probability kept is near the floating-point underflow)
BINARY_EXACT_MIN_DELTA = 1e-200
#: relative error allowed on every probability the exact computation forms (at least 10x the bound on
#: the rounding of its convolutions and scipy's binomial pmf, see docs/shuffle_accounting.md)
BINARY_EXACT_REL_ERR = 1e-9
#: each trim of a pmf's tails may drop this fraction of delta (the dropped mass is added to the divergence)
BINARY_EXACT_TRIM = 1e-10
#: splits evaluated together
BINARY_EXACT_BLOCK = 256
#: splits of one node computed by one matrix product
_LEAF_GROUP = 16
#: its bisection stops when the bracket is below ``BINARY_EXACT_ABS_TOL + BINARY_EXACT_REL_TOL * eps``
BINARY_EXACT_ABS_TOL = 1e-9
BINARY_EXACT_REL_TOL = 1e-8


class ShuffleAccountingError(ValueError):
    """A combination of inputs for which the accountant has no sound bound (the message says why)."""


def _check(eps0: float, n: int, delta: float) -> tuple[float, int, float]:
    if not (isinstance(eps0, (int, float, np.floating, np.integer)) and math.isfinite(eps0) and eps0 > 0):
        raise ValueError(f"eps0 must be a finite number > 0, got {eps0!r}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1 (the reports shuffled together), got {n!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(eps0), int(n), float(delta)


def _domain(mechanism: str, domain_size: int | None) -> int:
    if isinstance(mechanism, Randomizer):  # a task's own randomizer: its parameters at each eps0
        return 0
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}")
    if mechanism not in _SIZED:
        return 0
    if domain_size is None or isinstance(domain_size, bool) or int(domain_size) != domain_size \
            or domain_size < 2:
        raise ValueError(f"mechanism {mechanism!r} needs an integer domain_size >= 2 ({_SIZED[mechanism]}), "
                         f"got {domain_size!r}")
    return int(domain_size)


def _variation_params(mechanism: str, eps0: float, k: int, subset_size: int | None) -> VariationParameters:
    """``(p, beta, q)`` of ``mechanism`` (``general`` for ``fmt_closed``); SS's subset size defaults to the
    oracle's (:class:`ldp.oracles.SubsetSelection`)."""
    if isinstance(mechanism, Randomizer):
        return mechanism.parameters(eps0)
    if mechanism == "ss" and subset_size is None:
        from ldp.oracles import SubsetSelection

        subset_size = SubsetSelection(eps0, k).k
    name = "general" if mechanism == "fmt_closed" else mechanism
    return variation_parameters(name, eps0, k or None, subset_size)


def _variation_method(mechanism: str, k: int, params: VariationParameters) -> str:
    what = {"grr": f"grr, k = {k}", "olh": f"olh, g = {k}", "ss": f"ss, d = {k}"}.get(mechanism, mechanism)
    return f"variation_ratio ({what}, beta = {params.beta:.6g})"


# ----------------------------------------------------------------------------------------------- closed form

def fmt_closed_form_applies(eps0: float, n: int, delta: float) -> bool:
    """The closed form's condition ``eps0 <= ln(n / (16 ln(4 / delta)))``."""
    eps0, n, delta = _check(eps0, n, delta)
    bound = n / (16.0 * math.log(4.0 / delta))
    return bound > 1.0 and eps0 <= math.log(bound)


def central_epsilon_fmt_closed_form(eps0: float, n: int, delta: float) -> float:
    """FMT's closed form (as restated in ``shared/specs/anonymous_collection.md``):
    ``ln(1 + (1 - e^-eps0) / (1 + e^-(eps0 + e')) (a + c))`` with ``a = 8 sqrt(e^eps0 ln(4/delta) / n)``,
    ``c = 8 e^eps0 / n``, ``e' = ln(1 + a + c)``; ``inf`` where its condition does not hold."""
    eps0, n, delta = _check(eps0, n, delta)
    if not fmt_closed_form_applies(eps0, n, delta):
        return math.inf
    a = 8.0 * math.sqrt(math.exp(eps0) * math.log(4.0 / delta) / n)
    c = 8.0 * math.exp(eps0) / n
    e1 = math.log1p(a + c)
    return math.log1p((1.0 - math.exp(-eps0)) / (1.0 + math.exp(-(eps0 + e1))) * (a + c))


# ------------------------------------------------------------------------------------------------ clone pair

def _binom_sf(k: np.ndarray, n: np.ndarray | float, p: float) -> np.ndarray:
    """``P[Bin(n, p) > k]`` for any real ``k`` (1 below 0, 0 from ``n`` on)."""
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    inside = (k >= 0) & (k < n)
    val = special.bdtrc(np.where(inside, k, 0.0), np.where(inside, n, 1.0).astype(np.int64), p)
    return np.where(k < 0, 1.0, np.where(inside, val, 0.0))


def _binom_cdf(k: np.ndarray, n: float, p: float) -> np.ndarray:
    """``P[Bin(n, p) <= k]`` for any real ``k`` (0 below 0, 1 from ``n`` on)."""
    k, nn = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    inside = (k >= 0) & (k < nn)
    val = special.bdtr(np.where(inside, k, 0.0), np.where(inside, nn, 1.0).astype(np.int64), p)
    return np.where(k < 0, 0.0, np.where(inside, val, 1.0))


@functools.lru_cache(maxsize=256)
def _clone_blocks(n: int, clone_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """``(lowest count of each block, probability of the block)`` for ``C ~ Bin(n - 1, clone_prob)``: blocks
    cover ``0 .. n - 1``; the body (the mean +- 9.5 standard deviations) is cut at
    ``mean + 9.5 sd sign(u) u^2`` for ``u`` even in ``[-1, 1]`` (finest near the mean), below it
    one block charged at ``c = 0``, above it the last block (charged at its own start: ``D_c`` falls with
    ``c``)."""
    m = n - 1
    if m == 0:
        return np.zeros(1), np.ones(1)
    mean, sd = m * clone_prob, math.sqrt(m * clone_prob * (1.0 - clone_prob))
    lo = max(0, int(math.floor(mean - 9.5 * sd - 10.0)))
    hi = min(m, max(lo, int(math.ceil(mean + 9.5 * sd + 10.0))))
    u = np.linspace(-1.0, 1.0, MAX_BLOCKS)
    edges = mean + sd * 9.5 * np.sign(u) * u**2  # denser near the mean, where the weight is
    body = np.unique(np.clip(np.round(edges), lo, hi).astype(np.int64))
    starts = body if body[0] == 0 else np.concatenate([[0], body])
    below = binom_cdf(starts - 1, m, clone_prob)  # P[C < start]
    weights = np.diff(np.concatenate([below, [1.0]]))
    return starts.astype(float), np.maximum(weights, 0.0)


def _clone_pair_delta(eps: np.ndarray, eps0: float, n: int, clone_prob: float) -> np.ndarray:
    """Upper bound on the hockey-stick divergence of the clone pair at each ``eps`` (any sign)."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    c, w = _clone_blocks(n, float(clone_prob))
    e0 = math.exp(eps0)
    big = np.exp(np.minimum(eps, eps0))[:, None]  # D = 0 for eps >= eps0
    w1, w0 = e0 / (e0 + 1.0), 1.0 / (e0 + 1.0)
    # P/Q at (a, c) is (e0 a + c + 1 - a) / (e0 (c + 1 - a) + a), increasing in a: > E iff a >= t
    t = np.floor((c[None, :] + 1.0) * (big * e0 - 1.0) / ((e0 - 1.0) * (big + 1.0))) + 1.0
    cc = np.broadcast_to(c[None, :], t.shape)
    sf_1 = _binom_sf(t - 2.0, cc, 0.5)  # P[A >= t - 1]
    sf_0 = _binom_sf(t - 1.0, cc, 0.5)  # P[A >= t]
    d_c = np.maximum((w1 - big * w0) * sf_1 + (w0 - big * w1) * sf_0, 0.0)
    out = d_c @ w
    return np.where(eps >= eps0, 0.0, np.minimum(out, 1.0))


def _general_delta(eps: np.ndarray, eps0: float, n: int) -> np.ndarray:
    return _clone_pair_delta(eps, eps0, n, math.exp(-eps0))


def _blanket_delta(eps: np.ndarray, eps0: float, n: int, k: int) -> np.ndarray:
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    e0 = math.exp(eps0)
    lam = (e0 + 1.0) / (e0 + k - 1.0)
    pair = _clone_pair_delta(eps, eps0, n, 2.0 / (e0 + k - 1.0))
    return np.minimum(lam * pair + (1.0 - lam) * np.maximum(0.0, -np.expm1(eps)), 1.0)


# ------------------------------------------------------------------------------------------------- binary RR

def _binary_rr_deltas(eps: np.ndarray, eps0: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(D(P || Q), D(Q || P))``: ``P = S + Bern(p)``, ``Q = S + Bern(q)``, ``S ~ Bin(n - 1, q)``."""
    eps = np.atleast_1d(np.asarray(eps, dtype=float))
    e0 = math.exp(eps0)
    p, q = e0 / (e0 + 1.0), 1.0 / (e0 + 1.0)
    m = float(n - 1)
    big = np.exp(eps)
    alpha = p - big * q  # D(P||Q) = sum_k [alpha f(k-1) - beta f(k)]_+ with f the pmf of S
    beta = big * p - q
    trivial = 1.0 - big  # every term positive (beta <= 0)
    ok = (beta > 0) & (alpha > 0)
    g = np.where(ok, beta / np.where(ok, alpha, 1.0), 1.0)
    # f(k-1)/f(k) = k p / ((m - k + 1) q) > g  iff  k > g q (m + 1) / (p + g q)
    t = np.floor(g * q * (m + 1.0) / (p + g * q)) + 1.0
    forward = alpha * _binom_sf(t - 2.0, m, q) - beta * _binom_sf(t - 1.0, m, q)
    # f(k)/f(k-1) > g  iff  k < q (m + 1) / (p g + q)
    u = np.ceil(q * (m + 1.0) / (p * g + q)) - 1.0
    backward = alpha * _binom_cdf(u, m, q) - beta * _binom_cdf(u - 1.0, m, q)
    d_pq = np.where(alpha <= 0, 0.0, np.where(ok, np.maximum(forward, 0.0), trivial))
    d_qp = np.where(alpha <= 0, 0.0, np.where(ok, np.maximum(backward, 0.0), trivial))
    return np.minimum(d_pq, 1.0), np.minimum(d_qp, 1.0)


def _binary_rr_delta(eps: np.ndarray, eps0: float, n: int) -> np.ndarray:
    d_pq, d_qp = _binary_rr_deltas(eps, eps0, n)
    return np.maximum(d_pq, d_qp)


# ------------------------------------------------------------------------------------- binary RR, exact

def _trim(a: np.ndarray, budget: float) -> tuple[np.ndarray, float]:
    """Drop the longest head and tail of the non-negative ``a`` whose masses are each at most ``budget / 2``;
    returns the rest and the dropped mass (as summed in floating point)."""
    half = 0.5 * budget
    head = np.cumsum(a)
    tail = np.cumsum(a[::-1])
    i = int(np.searchsorted(head, half, side="right"))
    j = int(np.searchsorted(tail, half, side="right"))
    if i + j >= len(a):  # the budget covers almost everything (cannot happen for budget < 1/2)
        return a, 0.0
    dropped = (float(head[i - 1]) if i else 0.0) + (float(tail[j - 1]) if j else 0.0)
    return a[i:len(a) - j], dropped


def _binom_trimmed(s: int, prob: float, budget: float) -> tuple[np.ndarray, float]:
    """The pmf of ``Bin(s, prob)`` on its mean +- (40 sd + 30), trimmed (:func:`_trim`), and the mass
    outside what is returned (the two tails beyond the window from scipy's binomial cdf, plus the trim)."""
    mean, sd = s * prob, math.sqrt(s * prob * (1.0 - prob))
    lo = max(0, int(math.floor(mean - 40.0 * sd - 30.0)))
    hi = min(s, int(math.ceil(mean + 40.0 * sd + 30.0)))
    outside = (float(binom_cdf(lo - 1, s, prob)) if lo > 0 else 0.0) + \
        (float(binom_sf(hi, s, prob)) if hi < s else 0.0)
    pmf, trimmed = _trim(binom_pmf(np.arange(lo, hi + 1), s, prob), budget)
    return pmf, outside + trimmed


def _binary_rr_split_pmfs(eps0: float, n: int, budget: float) -> Iterator[tuple[np.ndarray, float]]:
    """For ``m = 0, 1, ..., (n - 1) // 2`` in order: the pmf of ``S_m = Bin(m, p) + Bin(n - 1 - m, q)``
    (trimmed, its position dropped: the divergences do not depend on it) and an upper bound on the mass
    trimmed from it.

    Divide and conquer over ``m``: a node ``[lo, hi]`` holds the pmf of the ``lo`` users who hold 1 and the
    ``n - 1 - hi`` users who hold 0 for every ``m`` in it; its left half adds ``hi - mid`` zeros, its right
    half ``mid + 1 - lo`` ones; a node of at most ``_LEAF_GROUP`` splits convolves its pmf with each split's
    remaining ``Bin(i, p) + Bin(size - 1 - i, q)`` in one matrix product. Every step is a direct
    convolution of non-negative arrays (each entry has a relative rounding error of at most
    ``len * 2**-53``), the tree's steps followed by a trim of at most ``budget`` mass."""
    e0 = math.exp(eps0)
    p, q = e0 / (e0 + 1.0), 1.0 / (e0 + 1.0)
    cache: dict[tuple[int, bool], tuple[np.ndarray, float]] = {}

    def binom(s: int, ones: bool) -> tuple[np.ndarray, float]:
        key = (s, ones)
        if key not in cache:
            cache[key] = _binom_trimmed(s, p if ones else q, budget)
        return cache[key]

    def grow(h: np.ndarray, lost: float, s: int, ones: bool) -> tuple[np.ndarray, float]:
        b, lost_b = binom(s, ones)
        out, lost_c = _trim(np.convolve(h, b), budget)
        return out, lost + lost_b + lost_c

    @functools.lru_cache(maxsize=8)
    def kernels(size: int) -> np.ndarray:
        """Column ``i``: the pmf of ``Bin(i, p) + Bin(size - 1 - i, q)`` (full support)."""
        out = np.empty((size, size))
        for i in range(size):
            out[:, i] = np.convolve(binom_pmf(np.arange(i + 1), i, p),
                                    binom_pmf(np.arange(size - i), size - 1 - i, q))
        return out

    top = (n - 1) // 2
    root, lost = binom(n - 1 - top, False)
    stack = [(0, top, root, lost)]
    while stack:
        lo, hi, h, lost = stack.pop()
        if hi - lo < _LEAF_GROUP:  # the node's splits at once: row k of `window` is h(k), h(k-1), ...
            size = hi - lo + 1
            padded = np.concatenate([np.zeros(size - 1), h, np.zeros(size - 1)])
            window = np.lib.stride_tricks.sliding_window_view(padded, size)[:, ::-1]
            for row in (window @ kernels(size)).T:
                yield row, lost
            continue
        mid = (lo + hi) // 2
        stack.append((mid + 1, hi, *grow(h, lost, mid + 1 - lo, True)))
        stack.append((lo, mid, *grow(h, lost, hi - mid, False)))  # popped first: m increases


def _split_blocks(eps0: float, n: int, delta: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The split pmfs of :func:`_binary_rr_split_pmfs` in blocks: ``(rows, lost)``, each row zero-padded
    (at least one zero on each side)."""
    rows: list[np.ndarray] = []
    losses: list[float] = []

    def pack() -> tuple[np.ndarray, np.ndarray]:
        out = np.zeros((len(rows), max(len(r) for r in rows) + 2))
        for i, r in enumerate(rows):
            out[i, 1:1 + len(r)] = r
        return out, np.asarray(losses)

    for h, lost in _binary_rr_split_pmfs(eps0, n, delta * BINARY_EXACT_TRIM):
        rows.append(h)
        losses.append(lost)
        if len(rows) == BINARY_EXACT_BLOCK:
            yield pack()
            rows, losses = [], []
    if rows:
        yield pack()


def _split_deltas(rows: np.ndarray, lost: np.ndarray, eps: np.ndarray, eps0: float) -> np.ndarray:
    """Upper bounds, shape ``(len(eps), len(rows))``, on ``max(D(P_m || Q_m), D(Q_m || P_m))`` at each
    ``eps >= 0``, ``P_m = S_m + Bern(p)``, ``Q_m = S_m + Bern(q)``: with ``f`` the pmf of ``S_m``,
    ``D(P || Q) = sum_k [a f(k-1) - b f(k)]_+`` and ``D(Q || P) = sum_k [a f(k) - b f(k-1)]_+``,
    ``a = p - e^eps q``, ``b = e^eps p - q``. Every computed probability may be off by the relative error
    ``r`` = :data:`BINARY_EXACT_REL_ERR`, so ``a`` is raised and ``b`` lowered by ``r (p + e^eps q)`` and
    ``r (e^eps p + q)`` (which also covers their own rounding), the sum is scaled by ``1 + r``, and the
    trimmed mass ``lost`` is added (it can add at most ``a * lost``)."""
    e0 = math.exp(eps0)
    p, q = e0 / (e0 + 1.0), 1.0 / (e0 + 1.0)
    r = BINARY_EXACT_REL_ERR
    big = np.exp(np.asarray(eps, dtype=float))[:, None, None]
    a = (p - big * q) + r * (p + big * q)
    b = (big * p - q) - r * (big * p + q)
    prev, here = rows[None, :, :-1], rows[None, :, 1:]
    forward = np.maximum(a * prev - b * here, 0.0).sum(axis=-1)
    backward = np.maximum(a * here - b * prev, 0.0).sum(axis=-1)
    return (1.0 + r) * (np.maximum(forward, backward) + np.maximum(a[:, :, 0], 0.0) * lost[None, :])


def _exact_tolerance(eps: float) -> float:
    return BINARY_EXACT_ABS_TOL + BINARY_EXACT_REL_TOL * eps


def _check_exact(eps0: float, n: int, delta: float) -> None:
    if not binary_rr_exact_applies(n, delta):
        raise ValueError(f"the exact binary-RR computation takes n <= {BINARY_EXACT_MAX_N:,} and delta >= "
                         f"{BINARY_EXACT_MIN_DELTA:g}, got n = {n}, delta = {delta:g}")


def binary_rr_exact_applies(n: int, delta: float) -> bool:
    """Whether :func:`central_epsilon_binary_rr_exact` is computed for these ``n`` and ``delta``."""
    return int(n) <= BINARY_EXACT_MAX_N and delta >= BINARY_EXACT_MIN_DELTA


def central_epsilon_binary_rr_exact(eps0: float, n: int, delta: float) -> float:
    """The exact central epsilon at ``delta`` of ``n`` shuffled binary randomized-response reports (GRR on
    two values), from above: the largest over every split ``m`` of the other ``n - 1`` users' bits and both
    orders of the neighbouring pair of the epsilon at which the count's hockey-stick divergence is
    ``delta``. Within ``1e-9 + 1e-8 eps`` (the bisection) plus the effect of the rounding and trimming
    allowances (a relative ``1e-9`` on ``delta``'s scale, see :func:`_split_deltas`) of the exact value;
    never below it. ``n <= BINARY_EXACT_MAX_N``.

    Splits ``m`` and ``n - 1 - m`` are mirror images (flip every bit), so ``m <= (n - 1) / 2`` with both
    orders covers all. Splits are taken in blocks; a block's rows whose divergence is within ``delta`` at
    the epsilon found so far are dropped, the others bisected (all of them, no assumption on which ``m`` is
    worst)."""
    eps0, n, delta = _check(eps0, n, delta)
    _check_exact(eps0, n, delta)
    found = 0.0  # every split seen so far has delta(found) <= delta (vacuous at the start)
    for rows, lost in _split_blocks(eps0, n, delta):
        over = _split_deltas(rows, lost, np.array([found]), eps0)[0] > delta
        if not over.any():
            continue
        rows, lost = rows[over], lost[over]
        lo, hi = found, eps0  # eps0-LDP per report: every split's divergence is 0 at eps0
        while hi - lo > _exact_tolerance(hi):
            grid = np.linspace(lo, hi, 9)[1:-1]
            d = _split_deltas(rows, lost, grid, eps0)
            ok = (d <= delta).all(axis=1)
            first = int(np.argmax(ok)) if ok.any() else len(grid)
            if first > 0:
                lo = float(grid[first - 1])
                keep = d[first - 1] > delta  # the rest are within delta at lo, hence at every eps >= lo
                rows, lost = rows[keep], lost[keep]
            if first < len(grid):
                hi = float(grid[first])
        found = hi
    return found


def _one_split(eps0: float, n: int, delta: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ``m`` alone, as one padded row and its lost mass (a direct convolution of the two trimmed
    binomials)."""
    e0 = math.exp(eps0)
    p, q = e0 / (e0 + 1.0), 1.0 / (e0 + 1.0)
    budget = delta * BINARY_EXACT_TRIM
    a, lost_a = _binom_trimmed(m, p, budget)
    b, lost_b = _binom_trimmed(n - 1 - m, q, budget)
    f, lost_f = _trim(np.convolve(a, b), budget)
    return np.concatenate([[0.0], f, [0.0]])[None, :], np.array([lost_a + lost_b + lost_f])


def _binary_rr_exact_failing(eps0: float, n: int, delta: float, eps: float) -> int | None:
    """A split ``m`` whose divergence at ``eps`` exceeds ``delta`` (the worst of the first block that has
    one), or ``None`` when every split is within ``delta``."""
    e = np.array([float(eps)])
    first = 0
    for rows, lost in _split_blocks(eps0, n, delta):
        d = _split_deltas(rows, lost, e, eps0)[0]
        if (d > delta).any():
            return first + int(np.argmax(d))
        first += len(rows)
    return None


def _largest_meeting(meets: Callable[[float], bool], lo: float, hi: float) -> float:
    """Largest ``x`` in ``[lo, hi]`` (to the tolerance, from below) with ``meets(x)``, for ``meets``
    monotone (true up to a point) and true at ``lo``."""
    if meets(hi):
        return hi
    while hi - lo > EPS_ABS_TOL + EPS_REL_TOL * lo:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


def _binary_rr_exact_inverse(target_eps: float, delta: float, n: int, lo: float, hi: float) -> float:
    """The largest ``eps0`` in ``[lo, hi]`` (``lo`` known to meet it) at which every split's divergence at
    ``target_eps`` is within ``delta``. A working set of splits (the all-equal one first) is bisected on
    ``eps0`` split by split; the result is checked against every split, and the worst split that fails
    it joins the set, until one passes."""
    working = [0]  # the latest first: it is the likeliest to fail

    def meets(eps0: float) -> bool:
        e = np.array([float(target_eps)])
        return all(bool(_split_deltas(*_one_split(eps0, n, delta, m), e, eps0)[0, 0] <= delta)
                   for m in working)

    while True:
        x = _largest_meeting(meets, lo, hi)
        failing = None if x <= lo else _binary_rr_exact_failing(x, n, delta, target_eps)
        if failing is None:
            return x
        working.insert(0, failing)
        hi = x


# --------------------------------------------------------------------------------------------- central eps

def _bisect_epsilon(delta_fn: Callable[[np.ndarray], np.ndarray], delta: float, hi: float,
                    abs_tol: float = EPS_ABS_TOL, rel_tol: float = EPS_REL_TOL) -> float:
    """Smallest ``eps`` in ``[0, hi]`` (to the tolerance, from above) with ``delta_fn(eps) <= delta``; ``hi``
    must satisfy it. ``delta_fn`` is non-increasing."""
    if float(delta_fn(np.array([0.0]))[0]) <= delta:
        return 0.0
    lo = 0.0
    while hi - lo > abs_tol + rel_tol * hi:
        grid = np.linspace(lo, hi, 9)[1:-1]  # seven points a round: one vectorized call
        ok = delta_fn(grid) <= delta
        first = int(np.argmax(ok)) if ok.any() else len(grid)
        hi = float(grid[first]) if first < len(grid) else hi
        lo = float(grid[first - 1]) if first > 0 else lo
    return hi


def central_epsilon_fmt_numerical(eps0: float, n: int, delta: float) -> float:
    """FMT's numerical bound alone: the hockey-stick divergence of the clone pair, bisected on ``eps``."""
    eps0, n, delta = _check(eps0, n, delta)
    return _bisect_epsilon(lambda e: _general_delta(e, eps0, n), delta, eps0)


def central_epsilon_general(eps0: float, n: int, delta: float) -> float:
    """Central epsilon at ``delta`` of ``n`` shuffled reports of *any* ``eps0``-LDP randomizer: the smallest
    of FMT's numerical bound, their closed form (where it applies) and ``eps0``."""
    eps0, n, delta = _check(eps0, n, delta)
    return min(eps0, central_epsilon_fmt_numerical(eps0, n, delta),
               central_epsilon_fmt_closed_form(eps0, n, delta))


def central_epsilon_grr_blanket(eps0: float, n: int, delta: float, domain_size: int) -> float:
    """The privacy-blanket bound for GRR on ``[domain_size]`` (proved for every ``domain_size >= 2``)."""
    eps0, n, delta = _check(eps0, n, delta)
    k = _domain("grr", domain_size)
    return _bisect_epsilon(lambda e: _blanket_delta(e, eps0, n, k), delta, eps0)


def central_epsilon_binary_rr_equal_split(eps0: float, n: int, delta: float) -> float:
    """The exact epsilon at ``delta`` of binary RR when the other ``n - 1`` users hold the same bit (to the
    exact figure's bracket, from above): a lower bound on the exact worst case over the others' bits
    (module docstring), not a guarantee."""
    eps0, n, delta = _check(eps0, n, delta)
    return _bisect_epsilon(lambda e: _binary_rr_delta(e, eps0, n), delta, eps0, BINARY_EXACT_ABS_TOL,
                           BINARY_EXACT_REL_TOL)


class CentralEpsilon(NamedTuple):
    """A reported central epsilon and the method it comes from: ``binary_rr_exact``, ``variation_ratio
    (<mechanism and its beta>)``, ``grr_blanket``, ``general`` or ``fmt_closed_form``; for binary RR a
    fallback says so in brackets (``variation_ratio (...) (binary exact not computed: n > 100000)``)."""

    epsilon: float
    method: str


def _variation_epsilon(eps0: float, n: int, delta: float, params: VariationParameters) -> float:
    return solve_epsilon(lambda e: float(variation_delta([e], n, params)[0]), delta, eps0)


def _variation_candidates(eps0: float, n: int, delta: float, mechanism: str, k: int,
                          subset_size: int | None) -> list[CentralEpsilon]:
    """The three-count pair's figure with the mechanism's parameters and with the general ones (the latter
    is Feldman, McMillan and Talwar's stronger-clone pair, valid for any eps0-LDP randomizer)."""
    out = []
    for name in dict.fromkeys([mechanism if mechanism != "fmt_closed" else "general", "general"]):
        params = _variation_params(name, eps0, k if name == mechanism else 0, subset_size)
        out.append(CentralEpsilon(_variation_epsilon(eps0, n, delta, params),
                                  _variation_method(name, k, params)))
    return out


def _grr_report(eps0: float, n: int, delta: float, k: int) -> CentralEpsilon:
    if k == 2 and binary_rr_exact_applies(n, delta):
        return CentralEpsilon(central_epsilon_binary_rr_exact(eps0, n, delta), "binary_rr_exact")
    candidates = [CentralEpsilon(central_epsilon_general(eps0, n, delta), "general"),
                  CentralEpsilon(central_epsilon_grr_blanket(eps0, n, delta, k), "grr_blanket"),
                  *_variation_candidates(eps0, n, delta, "grr", k, None)]
    out = min(candidates, key=lambda c: c.epsilon)
    if k == 2:
        why = f"n > {BINARY_EXACT_MAX_N}" if n > BINARY_EXACT_MAX_N else f"delta < {BINARY_EXACT_MIN_DELTA:g}"
        out = out._replace(method=f"{out.method} (binary exact not computed: {why})")
    return out


def central_epsilon_grr(eps0: float, n: int, delta: float, domain_size: int) -> float:
    """Central epsilon of ``n`` shuffled GRR reports on ``[domain_size]``. For two values (binary RR) with
    ``n <= BINARY_EXACT_MAX_N``: the exact value (:func:`central_epsilon_binary_rr_exact`); otherwise the
    smallest of the variation-ratio, blanket and general bounds."""
    eps0, n, delta = _check(eps0, n, delta)
    return _grr_report(eps0, n, delta, _domain("grr", domain_size)).epsilon


def accounting_for_oracle(oracle: Any) -> tuple[str, int | None]:
    """``(mechanism, domain_size)`` for :func:`central_epsilon_report` from a frequency oracle
    (``ldp.oracles``): ``("grr", d)``, ``("olh", g)``, ``("blh" | "oue" | "sue" | "hr", None)``, ``("ss",
    d)`` when its subset size is the default one, else ``("general", None)`` (any eps0-LDP randomizer)."""
    name = getattr(oracle, "name", "")
    if name == "grr":
        return "grr", int(oracle.d)
    if name == "olh":
        return "olh", int(oracle.g)
    if name in ("blh", "oue", "sue", "hr"):
        return name, None
    if name == "ss":
        from ldp.oracles import SubsetSelection

        if SubsetSelection(oracle.epsilon, oracle.d).k == oracle.k:
            return "ss", int(oracle.d)
    return "general", None


def accounting_for_task(task: Any) -> tuple[str, int | None]:
    """``(mechanism, domain_size)`` for :func:`central_epsilon_report` from a task (``ldp.task``): a
    frequency task's oracle (:func:`accounting_for_oracle`; a memoized mechanism's reports are linkable
    across windows, so only the general figure of one report is given); a range task's per-report
    randomizer (a group drawn at random, its oracle) and a numeric task's grid sampler (one attribute per
    report) as a :class:`~ldp.shuffle.randomizers.Randomizer`; a heavy-hitters task's levels as a
    :class:`~ldp.shuffle.randomizers.LevelledRandomizer` (one bound per level); else ``("general", None)``.
    Raises ``ValueError`` when the task's oracle cannot be built."""
    if getattr(task, "is_memoized", False):
        return "general", None
    kind = getattr(task, "kind", None)
    if kind == "frequency":
        return accounting_for_oracle(task.make_oracle())
    found = _TASK_RANDOMIZERS[kind](task) if kind in _TASK_RANDOMIZERS else None
    return (found, None) if found is not None else ("general", None)


#: a task's per-report randomizer by its kind (``ldp.shuffle.randomizers``)
_TASK_RANDOMIZERS: dict[str, Callable[[Any], str | None]] = {
    "range": range_randomizer,
    "numeric": numeric_randomizer,
    "heavy_hitters": heavy_hitters_randomizer,
}


def central_epsilon_report(eps0: float, n: int, delta: float, mechanism: str = "general",
                           domain_size: int | None = None, subset_size: int | None = None,
                           group_counts: Mapping[int, int] | Sequence[int] | None = None) -> CentralEpsilon:
    """:func:`central_epsilon` with the method that gave it (:class:`CentralEpsilon`): the smallest of the
    valid figures: exact binary RR where it is computed; else the variation-ratio figure with the
    mechanism's parameters and with the general ones, GRR's blanket figure, and the general figure
    (FMT numerical and closed form). ``fmt_closed`` is the closed form alone. A
    :class:`~ldp.shuffle.randomizers.LevelledRandomizer` is accounted per level (:mod:`ldp.shuffle.levels`:
    the largest level figure, at ``group_counts``, the batch's reports per group, else the plan's split of
    ``n``); other mechanisms ignore ``group_counts``."""
    eps0, n, delta = _check(eps0, n, delta)
    if isinstance(mechanism, LevelledRandomizer):
        from ldp.shuffle.levels import levelled_report

        return CentralEpsilon(*levelled_report(eps0, n, delta, mechanism, group_counts))
    k = _domain(mechanism, domain_size)
    if mechanism == "grr":
        return _grr_report(eps0, n, delta, k)
    if mechanism == "fmt_closed":
        return CentralEpsilon(central_epsilon_fmt_closed_form(eps0, n, delta), "fmt_closed_form")
    candidates = [CentralEpsilon(central_epsilon_general(eps0, n, delta), "general"),
                  *_variation_candidates(eps0, n, delta, mechanism, k, subset_size)]
    return min(candidates, key=lambda c: c.epsilon)


def central_epsilon(eps0: float, n: int, delta: float, mechanism: str = "general",
                    domain_size: int | None = None, subset_size: int | None = None) -> float:
    """Dispatch on ``mechanism`` (:data:`MECHANISMS`; ``domain_size`` is GRR's k, OLH's number of buckets
    g, SS's d; ``subset_size`` SS's k); :func:`central_epsilon_report` also names the method."""
    return central_epsilon_report(eps0, n, delta, mechanism, domain_size, subset_size).epsilon


def delta_curve(eps: Sequence[float] | np.ndarray, eps0: float, n: int, mechanism: str = "general",
                domain_size: int | None = None, subset_size: int | None = None) -> np.ndarray:
    """``delta(eps)`` upper bounds (any sign of ``eps``) on the privacy curve of ``n`` shuffled reports: at
    each ``eps`` the smallest of the curves of the dominating pairs :func:`central_epsilon_report` and the
    inverse use for ``mechanism``: FMT's clone pair and the three-count variation-ratio pair with the general
    parameters for every mechanism, with the mechanism's own parameters too, and GRR's blanket pair. (A
    window of a composition uses one of them, :func:`compose_windows`.) ``mechanism="binary_equal_split"``
    gives the all-equal binary-RR pair (the larger of its two directions; a lower bound, see the module
    docstring)."""
    eps0, n, _ = _check(eps0, n, 0.5)
    grid = np.asarray(eps, dtype=float)
    if isinstance(mechanism, LevelledRandomizer):
        from ldp.shuffle.levels import levelled_delta_curve

        return levelled_delta_curve(grid, eps0, n, mechanism)
    if mechanism == "binary_equal_split":
        return _binary_rr_delta(grid, eps0, n)
    k = _domain(mechanism, domain_size)
    if mechanism == "fmt_closed":
        raise ValueError("the closed form is a single (eps, delta) statement, not a curve")
    out = np.minimum(_general_delta(grid, eps0, n),
                     variation_delta(grid, n, variation_parameters("general", eps0)))
    if mechanism != "general":
        out = np.minimum(out, variation_delta(grid, n, _variation_params(mechanism, eps0, k, subset_size)))
    if mechanism == "grr":
        out = np.minimum(out, _blanket_delta(grid, eps0, n, k))
    return out


# ----------------------------------------------------------------------------------------------- the inverse

def local_epsilon_for_central(target_eps: float, delta: float, n: int, mechanism: str = "general",
                              domain_size: int | None = None, eps0_max: float = 30.0,
                              subset_size: int | None = None) -> float:
    """The largest ``eps0`` (to the bisection tolerance, from below) whose central guarantee over ``n``
    shuffled reports meets ``(target_eps, delta)``. Bisection on ``eps0``: each step asks whether the pair's
    ``delta(target_eps)`` is within ``delta`` (the pairs of :func:`central_epsilon_report`, the three-count
    variation-ratio ones included, or the closed form's epsilon within ``target_eps``; for binary RR up to
    ``BINARY_EXACT_MAX_N`` reports, whether every split's is), which is monotone in ``eps0``.
    At least ``target_eps`` (no amplification claimed), at most ``eps0_max``."""
    if not (math.isfinite(target_eps) and target_eps > 0):
        raise ValueError(f"target_eps must be a finite number > 0, got {target_eps!r}")
    _check(1.0, n, delta)
    if isinstance(mechanism, LevelledRandomizer):
        from ldp.shuffle.levels import levelled_local_epsilon

        return levelled_local_epsilon(float(target_eps), delta, int(n), mechanism, eps0_max)
    k = _domain(mechanism, domain_size)
    n = int(n)

    def meets(eps0: float) -> bool:
        if eps0 <= target_eps:
            return True
        closed = central_epsilon_fmt_closed_form(eps0, n, delta) <= target_eps
        if mechanism == "fmt_closed":
            return closed
        e = np.array([float(target_eps)])
        if closed or float(_general_delta(e, eps0, n)[0]) <= delta:
            return True
        for name in dict.fromkeys([mechanism, "general"]):
            try:
                params = _variation_params(name, eps0, k if name == mechanism else 0, subset_size)
            except ValueError:  # the randomizer cannot be built at eps0 (an SS subset, a grid sampler)
                continue
            if float(variation_delta(e, n, params)[0]) <= delta:
                return True
        return mechanism == "grr" and float(_blanket_delta(e, eps0, n, k)[0]) <= delta

    proved = _largest_meeting(meets, float(target_eps), float(eps0_max))
    if mechanism == "grr" and k == 2 and binary_rr_exact_applies(n, delta):
        return _binary_rr_exact_inverse(target_eps, delta, n, proved, float(eps0_max))
    return proved


# ----------------------------------------------------------------------------------------------- composition

def _window_curve_fn(eps0: float, n: int, mechanism: str, k: int,
                     vparams: dict[str, VariationParameters] | None = None
                     ) -> tuple[Callable[[np.ndarray], Any], bool]:
    """``eps grid -> (delta_remove, delta_add)`` of the window's dominating pair, and whether it is
    symmetric. The pair with the smallest one-window epsilon at the composition's delta is chosen by
    :func:`_window_pair`: ``general`` (FMT's clone pair), ``blanket`` (GRR), ``variation_ratio`` or
    ``variation_ratio_general`` (the three-count pair with the mechanism's or the general parameters,
    ``vparams``); ``binary`` is the all-equal binary-RR pair, used by the tests' lower bound only."""
    if mechanism == "binary":
        return (lambda e: _binary_rr_deltas(e, eps0, n)), False
    if mechanism == "blanket":
        return (lambda e: (_blanket_delta(e, eps0, n, k),) * 2), True
    if vparams is not None and mechanism in vparams:
        params = vparams[mechanism]
        return (lambda e: (variation_delta(e, n, params),) * 2), True
    return (lambda e: (_general_delta(e, eps0, n),) * 2), True


def _window_pairs(eps0: float, mechanism: str, k: int,
                  subset_size: int | None) -> dict[str, VariationParameters]:
    """The three-count pairs a window may use, by name."""
    out = {"variation_ratio_general": variation_parameters("general", eps0)}
    if mechanism not in ("general", "fmt_closed"):
        out["variation_ratio"] = _variation_params(mechanism, eps0, k, subset_size)
    return out


def _window_pair(eps0: float, n: int, delta: float, mechanism: str, k: int,
                 vparams: dict[str, VariationParameters]) -> tuple[str, float]:
    """The pair used for a window and its one-window epsilon at ``delta`` (the smallest)."""
    found = {"general": central_epsilon_fmt_numerical(eps0, n, delta)}
    if mechanism == "grr":
        found["blanket"] = central_epsilon_grr_blanket(eps0, n, delta, k)
    for name, params in vparams.items():
        found[name] = _variation_epsilon(eps0, n, delta, params)
    best = min(found, key=lambda name: found[name])
    return best, found[best]


def compose_windows(eps0: float, reports_per_window: int | Sequence[int], delta: float,
                    windows: int | None = None, mechanism: str = "general", domain_size: int | None = None,
                    memoized: bool = False, reports_per_user_per_window: int = 1,
                    min_reports: int = MIN_WINDOW_REPORTS, subset_size: int | None = None) -> dict[str, Any]:
    """A user who sends one fresh ``eps0``-LDP report in each of ``W`` shuffled windows.

    ``reports_per_window`` is the number of reports shuffled together in each window (one integer for
    ``windows`` equal windows, or one per window). Returns ``windows``, ``delta``, ``per_window`` (each
    window's central epsilon at ``delta / W``), ``basic`` (their sum, at total ``delta``: basic composition),
    ``tight`` (dp-accounting's PLD composition of the windows' dominating pairs, each discretized
    pessimistically with connect-the-dots from its exact curve, at ``delta``; never above ``basic``),
    ``local_basic`` (``W * eps0``, no shuffling) and ``pairs`` (the pair used per window).

    Raises :class:`ShuffleAccountingError` where no sound bound is available here: memoized reports (linkable
    across windows by their value, so the windows are not independent shuffles of fresh reports), more than
    one report per user in a window (the pairs assume one), or a window with fewer than ``min_reports``
    reports.
    """
    if memoized:
        raise ShuffleAccountingError(
            "memoized (longitudinal) reports are linkable across windows by their value: no shuffle "
            "amplification bound here covers them; account them with ldp.longitudinal.accounting")
    if reports_per_user_per_window != 1:
        raise ShuffleAccountingError(
            f"{reports_per_user_per_window} reports per user in a window: the shuffle bounds assume one "
            "report per user per window")
    if isinstance(reports_per_window, (int, np.integer)):
        if windows is None:
            raise ValueError("windows is required when reports_per_window is one number")
        ns = [int(reports_per_window)] * int(windows)
    else:
        ns = [int(x) for x in reports_per_window]
        if windows is not None and windows != len(ns):
            raise ValueError(f"windows = {windows} but {len(ns)} window sizes were given")
    if not ns:
        raise ValueError("need at least one window")
    small = [x for x in ns if x < min_reports]
    if small:
        raise ShuffleAccountingError(
            f"a window of {min(small)} shuffled reports is below the minimum of {min_reports}: no shuffled "
            "guarantee is reported for it")
    eps0, _, delta = _check(eps0, ns[0], delta)
    if isinstance(mechanism, LevelledRandomizer):
        from ldp.shuffle.levels import levelled_composition

        return levelled_composition(eps0, ns, delta, mechanism)
    k = _domain(mechanism, domain_size)
    if mechanism == "fmt_closed":
        raise ValueError("composition needs a privacy curve: use a mechanism other than 'fmt_closed'")
    w = len(ns)
    vparams = _window_pairs(eps0, mechanism, k, subset_size)
    pairs: dict[int, tuple[str, float]] = {
        x: _window_pair(eps0, x, delta / w, mechanism, k, vparams) for x in set(ns)}
    per_window = [pairs[x][1] for x in ns]
    basic = float(sum(per_window))
    # one window: its own figure is already the tightest this accountant has (PLD of one curve is no lower)
    tight = basic if w == 1 else min(basic, _pld_epsilon(eps0, ns, delta, pairs, k, vparams))
    return {"windows": w, "delta": delta, "eps0": eps0, "mechanism": mechanism, "reports": ns,
            "per_window": per_window, "basic": basic, "tight": tight, "local_basic": w * eps0,
            "pairs": [pairs[x][0] for x in ns]}


def _pld_epsilon(eps0: float, ns: list[int], delta: float, pairs: dict[int, tuple[str, float]],
                 k: int, vparams: dict[str, VariationParameters] | None = None) -> float:
    """PLD composition: each window's curve on a common grid ``h * integers`` within ``[-top, top]``,
    ``top`` its epsilon at ``delta * 1e-4 / W`` (the curve beyond goes to the infinite-loss mass)."""
    # dp-accounting pulls in most of scipy (about 5 s of start-up on a loaded machine): imported only
    # when windows are composed, not by the one-window figures of the jobs and `ldp-beam privacy`.
    from dp_accounting.pld import pld_pmf as _pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as _pld

    w = len(ns)
    tiny = max(delta * 1e-4 / w, 1e-300)
    tops = {x: max(min(eps0, _bisect_epsilon(
        lambda e, x=x: np.maximum(*_window_curve_fn(eps0, x, pairs[x][0], k, vparams)[0](e)), tiny, eps0)),
        1e-6)
        for x in pairs}
    h = min(2.0 * t / GRID_POINTS for t in tops.values())
    plds = {}
    for x, top in tops.items():
        fn, symmetric = _window_curve_fn(eps0, x, pairs[x][0], k, vparams)
        r = int(math.ceil(top / h))
        rounded = np.arange(-r, r + 1)
        d_remove, d_add = fn(rounded * h)
        pmfs = [_pld_pmf.create_pmf_pessimistic_connect_dots(h, rounded, np.minimum.accumulate(
            np.clip(d, 0.0, 1.0))) for d in ((d_remove,) if symmetric else (d_remove, d_add))]
        plds[x] = _pld.PrivacyLossDistribution(*pmfs)
    total = None
    counts: dict[int, int] = {}
    for x in ns:
        counts[x] = counts.get(x, 0) + 1
    for x, m in counts.items():
        part = plds[x] if m == 1 else plds[x].self_compose(m)
        total = part if total is None else total.compose(part)
    assert total is not None
    return float(total.get_epsilon_for_delta(delta))


# ---------------------------------------------------------------------------------------------- the tables

def comparison_table(ns: Sequence[int] = (1_000, 10_000, 100_000, 1_000_000),
                     eps0s: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
                     delta: float = 1e-6) -> list[dict[str, Any]]:
    """One row per ``(n, eps0)`` at ``delta``: the closed form, FMT's numerical bound, the general figure,
    the binary-RR blanket bound, the exact binary-RR value (``nan`` above ``BINARY_EXACT_MAX_N``), the
    all-equal-split figure (a lower bound) and the binary-RR figure reported with its method."""
    rows = []
    for n in ns:
        for eps0 in eps0s:
            reported = central_epsilon_report(eps0, n, delta, "grr", 2)
            exact = reported.epsilon if reported.method == "binary_rr_exact" else math.nan
            rows.append({
                "n": int(n), "eps0": float(eps0),
                "closed_form": central_epsilon_fmt_closed_form(eps0, n, delta),
                "fmt_numerical": central_epsilon_fmt_numerical(eps0, n, delta),
                "general": central_epsilon_general(eps0, n, delta),
                "binary_blanket": central_epsilon_grr_blanket(eps0, n, delta, 2),
                "binary_exact": exact,
                "binary_equal_split": central_epsilon_binary_rr_equal_split(eps0, n, delta),
                "binary_reported": reported.epsilon,
                "binary_method": reported.method,
            })
    return rows


def format_table(rows: list[dict[str, Any]], delta: float) -> str:
    """The rows of :func:`comparison_table` as a Markdown table."""
    head = ("| n | eps0 | FMT closed form | FMT numerical (= general) | binary RR blanket (upper) "
            "| binary RR exact | binary RR equal split (lower) | blanket / exact | binary RR reported |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    lines = [f"delta = {delta:g}", "", head]
    for r in rows:
        cf = "n/a" if math.isinf(r["closed_form"]) else f"{r['closed_form']:.4f}"
        exact, blanket = r["binary_exact"], r["binary_blanket"]
        ex, ratio = ("n/a", "n/a") if math.isnan(exact) else (f"{exact:.4f}", f"{blanket / exact:.2f}")
        method = r["binary_method"].split(" ", 1)
        used = {"binary_rr_exact": "exact", "grr_blanket": "blanket", "general": "general"}[method[0]]
        reported = f"{r['binary_reported']:.4f} ({used}{', fallback' if len(method) > 1 else ''})"
        lines.append(f"| {r['n']:,} | {r['eps0']:g} | {cf} | {r['general']:.4f} | {blanket:.4f} | {ex} | "
                     f"{r['binary_equal_split']:.4f} | {ratio} | {reported} |")
    return "\n".join(lines)


#: the rows of :func:`mechanism_table`: (mechanism, domain_size, eps0)
MECHANISM_ROWS = (("grr", 1024, 1.0), ("grr", 1024, 4.0), ("olh", 56, 4.0), ("general", None, 1.0),
                  ("general", None, 8.0), ("oue", None, 2.0), ("sue", None, 2.0), ("hr", None, 2.0),
                  ("ss", 64, 2.0), ("blh", None, 1.0))


def mechanism_table(n: int = 1_000_000, delta: float = 1e-9,
                    rows: Sequence[tuple[str, int | None, float]] = MECHANISM_ROWS) -> list[dict[str, Any]]:
    """Per mechanism: the figure reported before the variation-ratio pairs (GRR: the smaller of the blanket
    and the general figure; the others: the general figure), the figure reported now with its method and
    the seconds it took, and for GRR on ``k >= 3`` values the two-count lower bound
    (:mod:`ldp.shuffle.lower_bounds`)."""
    import time

    from ldp.shuffle.lower_bounds import two_count_lower_bound

    out = []
    for mech, size, eps0 in rows:
        before = central_epsilon_general(eps0, n, delta)
        if mech == "grr":
            before = min(before, central_epsilon_grr_blanket(eps0, n, delta, int(size or 2)))
        start = time.perf_counter()
        now = central_epsilon_report(eps0, n, delta, mech, size)
        took = time.perf_counter() - start
        lower = two_count_lower_bound(eps0, n, delta, int(size)) if mech == "grr" and (size or 0) >= 3 \
            else math.nan
        out.append({"mechanism": mech, "domain_size": size, "eps0": eps0, "before": before,
                    "now": now.epsilon, "method": now.method.split(" (")[0], "seconds": took, "lower": lower})
    return out


def format_mechanism_table(rows: list[dict[str, Any]], n: int, delta: float) -> str:
    """The rows of :func:`mechanism_table` as a Markdown table."""
    lines = [f"n = {n:,} per batch, delta = {delta:g}", "",
             "| mechanism | eps0 | before | now | method | now / before | two-count lower bound | seconds |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        size = {"grr": "k", "olh": "g", "ss": "d"}.get(r["mechanism"])
        name = r["mechanism"] + (f" ({size} = {r['domain_size']})" if size else "")
        low = "-" if math.isnan(r["lower"]) else f"{r['lower']:.6f}"
        lines.append(f"| {name} | {r['eps0']:g} | {r['before']:.6f} | {r['now']:.6f} | {r['method']} | "
                     f"{r['now'] / r['before']:.3f} | {low} | {r['seconds']:.3f} |")
    return "\n".join(lines)
