"""Privacy accounting for anonymous (shuffled) collection: the central (eps, delta) of one shuffled batch of
``n`` reports from an ``eps0``-LDP randomizer, its composition over windows, and the inverse (the largest
``eps0`` for a central target). numpy/scipy only; see ``docs/shuffle_accounting.md``.

Every figure is an upper bound obtained from an explicit *dominating pair* ``(P, Q)`` whose hockey-stick
divergence ``delta(eps) = sum max(0, P - e^eps Q)`` is computed numerically; the central epsilon is then the
smallest ``eps`` on a bisection grid with ``delta(eps) <= delta`` (the upper end of the final bracket).

Pairs:

* **general** (any ``eps0``-LDP randomizer; Feldman, McMillan, Talwar, "Hiding among the clones", FOCS
  2021): ``C ~ Bin(n - 1, e^-eps0)`` clones, ``A ~ Bin(C, 1/2)``, ``D ~ Bern(e^eps0 / (e^eps0 + 1))``,
  ``P = (A + D, C - A + 1 - D)``, ``Q = (A + 1 - D, C - A + D)``.
* **GRR on [k]** (the privacy-blanket decomposition of Balle et al., as used by Koskela et al.): every other
  user's report is uniform on ``[k]`` w.p. ``k / (e^eps0 + k - 1)``; revealing who did leaves the same pair
  with ``C ~ Bin(n - 1, 2 / (e^eps0 + k - 1))``, entered w.p. ``lambda = (e^eps0 + 1) / (e^eps0 + k - 1)``
  (otherwise the target's report falls outside the two values in question and both worlds coincide), so
  ``delta <= lambda * D_pair`` (plus ``(1 - lambda)(1 - e^eps)`` for ``eps < 0``, the exact mixture curve).
  The figure reported for GRR (any ``k >= 2``) is the smaller of this and the general bound.
* **binary RR, all-equal split** (:func:`central_epsilon_binary_rr_equal_split`): with the ``n - 1``
  others all holding the same bit the count of ones is ``Bin(n - 1, q) + Bern(p or q)`` and ``delta`` is
  an exact finite sum (both directions, binomial tails). This is the exact curve of *one* pair of
  neighbouring datasets, so a **lower bound** on the exact worst case; exhaustive checks over every split of
  the others' bits find it to be the worst split at ``n = 1000``, ``delta = 1e-6``, but not everywhere (at
  small ``n`` and large ``delta`` other splits are worse by up to 20%). It is reported beside the bounds,
  never as the guarantee.

Evaluation of the clone pair: given ``C = c`` the divergence ``D_c`` has a closed form in two tails of
``Bin(c, 1/2)`` (the likelihood ratio is monotone in ``A``), and ``D_c`` is non-increasing in ``c`` (one more
clone is post-processing: add a fair coin to one coordinate). So ``c`` is cut into at most
:data:`MAX_BLOCKS` blocks, each charged ``D`` at its lowest ``c``: no truncation, an upper bound, and the
result is still the exact curve of a dominating pair (which the connect-the-dots composition needs).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf as _pld_pmf
from dp_accounting.pld import privacy_loss_distribution as _pld
from scipy import special, stats

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
    "central_epsilon",
    "delta_curve",
    "local_epsilon_for_central",
    "compose_windows",
    "comparison_table",
    "format_table",
]

#: mechanisms the accountant knows: any eps0-LDP randomizer, GRR / k-RR (``domain_size`` = k), and the FMT
#: closed form (for comparison and the inverse)
MECHANISMS = ("general", "grr", "fmt_closed")
#: the clone count is cut into at most this many blocks (each charged its lowest count: an upper bound)
MAX_BLOCKS = 96
#: composition refuses windows with fewer shuffled reports than this (``min_reports`` overrides)
MIN_WINDOW_REPORTS = 100
#: bisection stops when the bracket is below ``EPS_ABS_TOL + EPS_REL_TOL * eps``
EPS_ABS_TOL = 1e-6
EPS_REL_TOL = 1e-5
#: connect-the-dots grid points per window on [-eps_top, eps_top] for the composition
GRID_POINTS = 200


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
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}")
    if mechanism != "grr":
        return 0
    if domain_size is None or isinstance(domain_size, bool) or int(domain_size) != domain_size \
            or domain_size < 2:
        raise ValueError(f"mechanism 'grr' needs an integer domain_size >= 2, got {domain_size!r}")
    return int(domain_size)


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
    below = stats.binom.cdf(starts - 1, m, clone_prob)  # P[C < start]
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


# --------------------------------------------------------------------------------------------- central eps

def _bisect_epsilon(delta_fn: Callable[[np.ndarray], np.ndarray], delta: float, hi: float) -> float:
    """Smallest ``eps`` in ``[0, hi]`` (to the tolerance, from above) with ``delta_fn(eps) <= delta``; ``hi``
    must satisfy it. ``delta_fn`` is non-increasing."""
    if float(delta_fn(np.array([0.0]))[0]) <= delta:
        return 0.0
    lo = 0.0
    while hi - lo > EPS_ABS_TOL + EPS_REL_TOL * hi:
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
    """The exact epsilon at ``delta`` of binary RR when the other ``n - 1`` users hold the same bit: a lower
    bound on the exact worst case over the others' bits (module docstring), not a guarantee."""
    eps0, n, delta = _check(eps0, n, delta)
    return _bisect_epsilon(lambda e: _binary_rr_delta(e, eps0, n), delta, eps0)


def central_epsilon_grr(eps0: float, n: int, delta: float, domain_size: int) -> float:
    """Central epsilon of ``n`` shuffled GRR reports on ``[domain_size]``: the smaller of the blanket and the
    general bounds."""
    eps0, n, delta = _check(eps0, n, delta)
    k = _domain("grr", domain_size)
    return min(central_epsilon_grr_blanket(eps0, n, delta, k), central_epsilon_general(eps0, n, delta))


def central_epsilon(eps0: float, n: int, delta: float, mechanism: str = "general",
                    domain_size: int | None = None) -> float:
    """Dispatch on ``mechanism`` (:data:`MECHANISMS`)."""
    k = _domain(mechanism, domain_size)
    if mechanism == "grr":
        return central_epsilon_grr(eps0, n, delta, k)
    if mechanism == "fmt_closed":
        return central_epsilon_fmt_closed_form(eps0, n, delta)
    return central_epsilon_general(eps0, n, delta)


def delta_curve(eps: Sequence[float] | np.ndarray, eps0: float, n: int, mechanism: str = "general",
                domain_size: int | None = None) -> np.ndarray:
    """``delta(eps)`` of the pair the accountant uses (upper bounds; any sign of ``eps``). For
    ``mechanism="grr"`` this is the blanket pair; ``mechanism="binary_equal_split"`` gives the all-equal
    binary-RR pair (the larger of its two directions; a lower bound, see the module docstring)."""
    eps0, n, _ = _check(eps0, n, 0.5)
    grid = np.asarray(eps, dtype=float)
    if mechanism == "binary_equal_split":
        return _binary_rr_delta(grid, eps0, n)
    k = _domain(mechanism, domain_size)
    if mechanism == "grr":
        return _blanket_delta(grid, eps0, n, k)
    if mechanism == "fmt_closed":
        raise ValueError("the closed form is a single (eps, delta) statement, not a curve")
    return _general_delta(grid, eps0, n)


# ----------------------------------------------------------------------------------------------- the inverse

def local_epsilon_for_central(target_eps: float, delta: float, n: int, mechanism: str = "general",
                              domain_size: int | None = None, eps0_max: float = 30.0) -> float:
    """The largest ``eps0`` (to the bisection tolerance, from below) whose central guarantee over ``n``
    shuffled reports meets ``(target_eps, delta)``. Bisection on ``eps0``: each step asks whether the pair's
    ``delta(target_eps)`` is within ``delta`` (or the closed form's epsilon within ``target_eps``), which is
    monotone in ``eps0``. At least ``target_eps`` (no amplification claimed), at most ``eps0_max``."""
    if not (math.isfinite(target_eps) and target_eps > 0):
        raise ValueError(f"target_eps must be a finite number > 0, got {target_eps!r}")
    _check(1.0, n, delta)
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
        if mechanism == "grr":
            return float(_blanket_delta(e, eps0, n, k)[0]) <= delta
        return False

    lo, hi = float(target_eps), float(eps0_max)
    if meets(hi):
        return hi
    while hi - lo > EPS_ABS_TOL + EPS_REL_TOL * lo:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


# ----------------------------------------------------------------------------------------------- composition

def _window_curve_fn(eps0: float, n: int, mechanism: str, k: int) -> tuple[Callable[[np.ndarray], Any], bool]:
    """``eps grid -> (delta_remove, delta_add)`` of the window's dominating pair, and whether it is
    symmetric. For GRR the pair (blanket or general) with the smaller one-window epsilon at the
    composition's delta is chosen by :func:`_window_pair`; ``mechanism`` is ``general`` or ``blanket``
    (``binary`` is the all-equal binary-RR pair, used by the tests' lower bound only)."""
    if mechanism == "binary":
        return (lambda e: _binary_rr_deltas(e, eps0, n)), False
    if mechanism == "blanket":
        return (lambda e: (_blanket_delta(e, eps0, n, k),) * 2), True
    return (lambda e: (_general_delta(e, eps0, n),) * 2), True


def _window_pair(eps0: float, n: int, delta: float, mechanism: str, k: int) -> tuple[str, float]:
    """The pair used for a window and its one-window epsilon at ``delta``."""
    if mechanism == "general":
        return "general", central_epsilon_fmt_numerical(eps0, n, delta)
    blanket = central_epsilon_grr_blanket(eps0, n, delta, k)
    general = central_epsilon_fmt_numerical(eps0, n, delta)
    return ("blanket", blanket) if blanket <= general else ("general", general)


def compose_windows(eps0: float, reports_per_window: int | Sequence[int], delta: float,
                    windows: int | None = None, mechanism: str = "general", domain_size: int | None = None,
                    memoized: bool = False, reports_per_user_per_window: int = 1,
                    min_reports: int = MIN_WINDOW_REPORTS) -> dict[str, Any]:
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
    k = _domain(mechanism, domain_size)
    if mechanism == "fmt_closed":
        raise ValueError("composition needs a privacy curve: use mechanism 'general' or 'grr'")
    w = len(ns)
    pairs: dict[int, tuple[str, float]] = {x: _window_pair(eps0, x, delta / w, mechanism, k) for x in set(ns)}
    per_window = [pairs[x][1] for x in ns]
    basic = float(sum(per_window))
    tight = min(basic, _pld_epsilon(eps0, ns, delta, pairs, k))
    return {"windows": w, "delta": delta, "eps0": eps0, "mechanism": mechanism, "reports": ns,
            "per_window": per_window, "basic": basic, "tight": tight, "local_basic": w * eps0,
            "pairs": [pairs[x][0] for x in ns]}


def _pld_epsilon(eps0: float, ns: list[int], delta: float, pairs: dict[int, tuple[str, float]],
                 k: int) -> float:
    """PLD composition: each window's curve on a common grid ``h * integers`` within ``[-top, top]``,
    ``top`` its epsilon at ``delta * 1e-4 / W`` (the curve beyond goes to the infinite-loss mass)."""
    w = len(ns)
    tiny = max(delta * 1e-4 / w, 1e-300)
    tops = {x: max(min(eps0, _bisect_epsilon(
        lambda e, x=x: np.maximum(*_window_curve_fn(eps0, x, pairs[x][0], k)[0](e)), tiny, eps0)), 1e-6)
        for x in pairs}
    h = min(2.0 * t / GRID_POINTS for t in tops.values())
    plds = {}
    for x, top in tops.items():
        fn, symmetric = _window_curve_fn(eps0, x, pairs[x][0], k)
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
    """One row per ``(n, eps0)``: the closed form, FMT's numerical bound, the general figure, the binary-RR
    blanket bound (an upper bound) and the binary-RR all-equal-split figure (a lower bound), at ``delta``."""
    rows = []
    for n in ns:
        for eps0 in eps0s:
            rows.append({
                "n": int(n), "eps0": float(eps0),
                "closed_form": central_epsilon_fmt_closed_form(eps0, n, delta),
                "fmt_numerical": central_epsilon_fmt_numerical(eps0, n, delta),
                "general": central_epsilon_general(eps0, n, delta),
                "binary_blanket": central_epsilon_grr_blanket(eps0, n, delta, 2),
                "binary_equal_split": central_epsilon_binary_rr_equal_split(eps0, n, delta),
            })
    return rows


def format_table(rows: list[dict[str, Any]], delta: float) -> str:
    """The rows of :func:`comparison_table` as a Markdown table."""
    head = ("| n | eps0 | FMT closed form | FMT numerical (= general) | binary RR blanket (upper) "
            "| binary RR equal split (lower) | blanket / equal split |\n|---:|---:|---:|---:|---:|---:|---:|")
    lines = [f"delta = {delta:g}", "", head]
    for r in rows:
        cf = "n/a" if math.isinf(r["closed_form"]) else f"{r['closed_form']:.4f}"
        ratio = r["binary_blanket"] / r["binary_equal_split"]
        lines.append(f"| {r['n']:,} | {r['eps0']:g} | {cf} | {r['general']:.4f} | "
                     f"{r['binary_blanket']:.4f} | {r['binary_equal_split']:.4f} | {ratio:.2f} |")
    return "\n".join(lines)

