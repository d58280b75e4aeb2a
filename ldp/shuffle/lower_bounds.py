"""Exact privacy curves of shuffled reports for chosen neighbouring datasets: lower bounds that no valid
central epsilon may undercut, and the references the accountant's bounds are tested against.

* :func:`two_count_delta` / :func:`two_count_lower_bound`: GRR on ``[k]`` (``k >= 3``), the target holds
  ``a`` or ``b`` while the other ``n - 1`` users all hold a third value; anyone can read the counts of ``a``
  and ``b`` off the shuffled multiset, and that pair of counts has an exactly computable curve (a direct
  sum over both counts, no threshold argument).
* :func:`histogram_delta`: a randomizer given as a channel matrix (input value x output), ``n`` users; the
  exact divergence of the shuffled output (its histogram) for neighbours ``x0`` / ``x1``, in both
  directions, maximized over every split of the other users' values (exhaustive: small ``n`` only).
* :func:`three_count_delta`: the three-count pair of :mod:`ldp.shuffle.variation` summed directly.
* :func:`grr_channel`, :func:`olh_channel`: channels for GRR and for OLH with the complete hash family
  ``[d] -> [g]`` (a report's set of supported values is a sufficient statistic: its output cell).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

__all__ = [
    "two_count_delta",
    "two_count_lower_bound",
    "grr_channel",
    "olh_channel",
    "histogram_delta",
    "epsilon_at",
    "three_count_delta",
]


@functools.lru_cache(maxsize=16)
def _two_count_pair(eps0: float, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Both worlds' probabilities of the counts ``(count of a, count of a or b)`` (flattened)."""
    e = math.exp(eps0)
    hi_p, lo_p = e / (e + k - 1.0), 1.0 / (e + k - 1.0)
    m = n - 1
    mean, sd = m * 2.0 * lo_p, math.sqrt(m * 2.0 * lo_p * (1.0 - 2.0 * lo_p))
    t = np.arange(max(1, int(mean - 12 * sd - 10)), min(m, int(mean + 12 * sd + 10)) + 2)  # others + target
    half = 6.0 * math.sqrt(t[-1]) + 10.0  # Bin(t, 1/2) beyond t/2 +- 12 sd is left out
    a = np.arange(max(0, int(t[0] / 2 - half)), int(t[-1] / 2 + half) + 1)
    pi_t = stats.binom.pmf(t, m, 2.0 * lo_p)[:, None]  # the others give t labels a or b
    pi_t1 = stats.binom.pmf(t - 1, m, 2.0 * lo_p)[:, None]  # the others give t - 1, the target one
    half_t = stats.binom.pmf(a[None, :], t[:, None], 0.5)
    half_t1_a = stats.binom.pmf(a[None, :] - 1, t[:, None] - 1, 0.5)  # the target's report is a
    half_t1_b = stats.binom.pmf(a[None, :], t[:, None] - 1, 0.5)  # the target's report is b
    rest = 1.0 - hi_p - lo_p
    p0 = hi_p * pi_t1 * half_t1_a + lo_p * pi_t1 * half_t1_b + rest * pi_t * half_t
    p1 = lo_p * pi_t1 * half_t1_a + hi_p * pi_t1 * half_t1_b + rest * pi_t * half_t
    keep = (p0 > 0) | (p1 > 0)
    return p0[keep], p1[keep]


def two_count_delta(eps: Sequence[float] | np.ndarray, eps0: float, n: int, k: int) -> np.ndarray:
    """Exact ``delta(eps)`` of the counts of ``a`` and ``b`` among ``n`` shuffled GRR reports on ``[k]``: the
    target holds ``a`` (world 0) or ``b`` (world 1), every other user a third value (the pair is symmetric:
    one direction). The others' count of ``a`` or ``b`` is summed over its mean +- 12 sd, each split of it
    over +- 12 sd: terms left out only lower the figure."""
    if k < 3:
        raise ValueError(f"the two-count dataset needs a third value: k >= 3, got {k}")
    p0, p1 = _two_count_pair(float(eps0), int(n), int(k))
    return np.asarray([float(np.maximum(p0 - math.exp(x) * p1, 0.0).sum()) for x in np.atleast_1d(eps)])


def epsilon_at(curve: Callable[[np.ndarray], np.ndarray], delta: float, hi: float,
               tol: float = 1e-7) -> float:
    """For a lower-bound curve: the largest ``eps`` in ``[0, hi]`` found with ``curve(eps) > delta`` (to
    ``tol + 1e-5 eps``, from below), 0 when none; the true epsilon at ``delta`` is above it."""
    lo = 0.0
    if float(curve(np.array([0.0]))[0]) <= delta * (1.0 + 1e-9):
        return 0.0
    while hi - lo > tol + 1e-5 * lo:
        mid = 0.5 * (lo + hi)
        if float(curve(np.array([mid]))[0]) > delta * (1.0 + 1e-9):
            lo = mid
        else:
            hi = mid
    return lo


def two_count_lower_bound(eps0: float, n: int, delta: float, k: int) -> float:
    """The epsilon at ``delta`` of :func:`two_count_delta`, from below: a lower bound on the central epsilon
    of ``n`` shuffled GRR reports on ``[k]``."""
    return epsilon_at(lambda e: two_count_delta(e, eps0, n, k), delta, eps0)


def grr_channel(eps0: float, k: int) -> np.ndarray:
    """GRR on ``[k]``: row ``x`` is the output distribution of input ``x``."""
    e = math.exp(eps0)
    out = np.full((k, k), 1.0 / (e + k - 1.0))
    np.fill_diagonal(out, e / (e + k - 1.0))
    return out


def olh_channel(eps0: float, d: int, g: int) -> np.ndarray:
    """OLH on ``[d]`` with ``g`` buckets and the complete hash family (every ``[d] -> [g]``, uniform): output
    cell ``s`` (a bit mask) is the set ``{v : h(v) = y}`` of values the report supports. A cell with
    ``|s|`` values arises from ``g (g - 1)^(d - |s|)`` pairs ``(h, y)``, each w.p. ``g^-d`` times GRR's
    ``e / (e + g - 1)`` when it supports the input, else ``1 / (e + g - 1)``."""
    e = math.exp(eps0)
    cells = np.arange(1 << d)
    size = np.array([bin(int(s)).count("1") for s in cells])
    count = g * (g - 1.0) ** (d - size) / float(g) ** d
    supports = ((cells[None, :] >> np.arange(d)[:, None]) & 1).astype(bool)
    return count[None, :] * np.where(supports, e, 1.0) / (e + g - 1.0)


def _states(cells: int, total: int) -> list[tuple[int, ...]]:
    """Every histogram of ``total`` outputs over ``cells`` outputs, in a fixed order."""
    return [tuple(np.bincount(np.asarray(c, dtype=int), minlength=cells))
            for c in itertools.combinations_with_replacement(range(cells), total)]


def histogram_delta(channel: np.ndarray, n: int, eps: Sequence[float] | np.ndarray, x0: int = 0,
                    x1: int = 1) -> np.ndarray:
    """Exact ``delta(eps)`` of the shuffled output of ``n`` users of ``channel``, neighbours ``x0`` / ``x1``
    (the target's value), maximized over both directions and every split of the other ``n - 1`` users'
    values. Exhaustive: the histograms of ``n`` outputs number ``C(n + cells - 1, n)``."""
    values, cells = channel.shape
    levels = [_states(cells, s) for s in range(n + 1)]
    index = [{h: i for i, h in enumerate(level)} for level in levels]
    shift = []  # shift[s][y]: the index at level s + 1 of each level-s histogram plus one output y
    for s in range(n):
        moves = np.empty((cells, len(levels[s])), dtype=np.int64)
        for i, h in enumerate(levels[s]):
            for y in range(cells):
                moves[y, i] = index[s + 1][h[:y] + (h[y] + 1,) + h[y + 1:]]
        shift.append(moves)

    def add(dist: np.ndarray, s: int, row: np.ndarray) -> np.ndarray:
        out = np.zeros(len(levels[s + 1]))
        for y in range(cells):
            np.add.at(out, shift[s][y], dist * row[y])
        return out

    grid = np.exp(np.atleast_1d(np.asarray(eps, dtype=float)))[:, None]
    worst = np.zeros(grid.shape[0])
    # depth-first over the others' values: value v takes 0.. of the users left; prefixes are shared
    stack: list[tuple[int, int, np.ndarray]] = [(0, 0, np.ones(1))]
    while stack:
        v, placed, dist = stack.pop()
        if v == values - 1 or placed == n - 1:
            for _ in range(n - 1 - placed):
                dist, placed = add(dist, placed, channel[values - 1]), placed + 1
            p0, p1 = add(dist, n - 1, channel[x0]), add(dist, n - 1, channel[x1])
            both = np.maximum(np.maximum(p0 - grid * p1, 0.0).sum(axis=1),
                              np.maximum(p1 - grid * p0, 0.0).sum(axis=1))
            worst = np.maximum(worst, both)
            continue
        stack.append((v + 1, placed, dist))
        for _ in range(n - 1 - placed):
            dist, placed = add(dist, placed, channel[v]), placed + 1
            stack.append((v + 1, placed, dist))
    return worst


def three_count_delta(eps: Sequence[float] | np.ndarray, n: int, p: float, beta: float, q: float,
                      cut: int = 60) -> np.ndarray:
    """The exact ``delta(eps)`` (from below: cells left out only lower it) of the three-count pair of
    :mod:`ldp.shuffle.variation` for ``n`` users, by a direct sum over the label counts ``(a, b, m)``
    (``a, b`` up to ``cut``): the reference the blocked evaluation is checked against, and how the pair's
    growth in ``beta`` is checked (small ``n`` only)."""
    alpha = beta / (p - 1.0)
    w = 1.0 - alpha * (p + 1.0)
    rho, m_ = min(1.0, (1.0 + beta) / q), n - 1
    ab = 2.0 * alpha * p / q / rho
    top = min(m_, int(m_ * rho + 12.0 * math.sqrt(m_ * rho) + 20))
    pt = stats.binom.pmf(np.arange(top + 1), m_, rho)
    f = np.zeros((cut + 1, cut + 1, top + 1))  # the others' counts of A, B and M labels
    for t in range(top + 1):
        for s in range(min(t, 2 * cut) + 1):
            a = np.arange(s + 1)
            mass = pt[t] * stats.binom.pmf(s, t, ab) * stats.binom.pmf(a, s, 0.5)
            ok = (a <= cut) & (s - a <= cut)
            f[a[ok], s - a[ok], t - s] += mass[ok]

    def shift(da: int, db: int, dm: int) -> np.ndarray:
        g = np.zeros((cut + 2, cut + 2, top + 2))
        g[da:da + cut + 1, db:db + cut + 1, dm:dm + top + 1] = f
        return g

    with_a, with_b, with_m = shift(1, 0, 0), shift(0, 1, 0), shift(0, 0, 1)
    p0 = alpha * p * with_a + alpha * with_b + w * with_m
    p1 = alpha * with_a + alpha * p * with_b + w * with_m
    return np.asarray([float(np.maximum(p0 - math.exp(x) * p1, 0.0).sum()) for x in np.atleast_1d(eps)])
