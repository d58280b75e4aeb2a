"""Repeated collection of a bounded counter: 1BitMean with alpha-point rounding and memoization (Ding,
Kulkarni and Yekhanin, NeurIPS 2017, Sec. 3), with an optional instantaneous flip.

Grid. ``[low, high]`` is cut into ``buckets`` equal buckets; the grid points are ``g_j = low + j w``,
``j = 0 .. buckets``, ``w = (high - low) / buckets``.

Client (per user and task, all permanent):

* ``alpha ~ U[0, 1)``, drawn once. A value ``x`` (clipped) at ``z = (x - low) / w = L + frac`` is rounded to
  the point ``j = L + 1`` when ``frac > alpha``, else ``j = L`` (alpha-point rounding): over ``alpha``,
  ``E[g_j] = x``, so the window's mean stays unbiased.
* one 1BitMean bit per grid point, ``b_j ~ Bern(p(u_j))`` with ``u_j = j / buckets`` and
  ``p(u) = 1 / (e^eps + 1) + u (e^eps - 1) / (e^eps + 1)``, drawn once (memoized) and reused every time
  the user's value rounds to ``g_j``.
* per report, the bit sent is ``b_j`` flipped with probability ``flip`` (``0 <= flip < 1/2``; 0 by default,
  as in the paper), fresh each time.

Real clients derive ``alpha`` and the bits from HMAC-SHA256 of their secret
(:func:`ldp.longitudinal.memo.memo_words_hmac`: label ``"seed"`` key 0 for ``alpha``, label ``"memo"`` key
``j`` for ``b_j``), so nothing is stored; the flip uses the OS CSPRNG. Simulations use the keyed SplitMix64
stand-in (:func:`ldp.longitudinal.memo.memo_words_sim`) of per-user 64-bit keys and a seeded generator.

Server. With ``P1 = flip + (1 - 2 flip) p(u_j)``, ``u_hat = ((b - flip) / (1 - 2 flip) - 1 / (e^eps + 1))
(e^eps + 1) / (e^eps - 1)`` is unbiased for ``u_j``, hence (over ``alpha``) for ``u``; the mean of a window
is ``low + (high - low) mean(u_hat)``. Its variance (:meth:`MemoizedOneBitMean.mean_variance`) adds the
rounding's ``(w / (high - low))^2 frac (1 - frac)`` to the bit's ``kappa^2 P1 (1 - P1) / (1 - 2 flip)^2``
averaged over the two points (``kappa = (e^eps + 1) / (e^eps - 1)``). Windows share the users' alpha and
bits, so estimates of different windows are correlated; each is unbiased on its own.

Cost over many windows (:func:`memoized_cost`, with :mod:`ldp.longitudinal.accounting`). The bits of
different points are independent, and a bit's distribution at two points differs by at most ``e^eps``
(binary randomized response at ``eps`` dominates it). A user whose reports used ``keys`` distinct points
spends about its values at most ``keys * eps`` (tightly: ``keys`` composed binary RR PLDs), and
``keys <= buckets + 1`` whatever the number of windows: the cost is bounded. A value constant between two
grid points uses at most two points (``2 eps``); a constant value exactly at a grid point, or one that
rounds the same way every time, one (``eps``). The *pattern* of changes is protected only by the flip:
``k`` reports of any two histories cost at most ``k ln((1 - flip) / flip)`` (infinite without a flip).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ldp.csprng import client_rng
from ldp.longitudinal.accounting import binary_rr_pld, composed_epsilon
from ldp.longitudinal.budget import DEFAULT_DELTA
from ldp.longitudinal.memo import memo_words_hmac, memo_words_sim
from ldp.numeric.mechanisms import _check_bounds, _check_epsilon, to_unit
from ldp.reports import Reports

__all__ = ["MemoizedOneBitMean", "MemoAccumulator", "memoized_cost"]

_U53 = 2.0**-53


def _uniform(words: np.ndarray) -> np.ndarray:
    return (np.asarray(words, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * _U53


@dataclasses.dataclass
class MemoAccumulator:
    """Number of reports and of 1 bits (exact integers)."""

    n: int = 0
    ones: int = 0


class MemoizedOneBitMean:
    """Memoized 1BitMean with alpha-point rounding (module docstring).

    Args:
        epsilon: the permanent bits' epsilon (``epsilon_inf``: the cost of one grid point).
        low, high: the counter's bounds.
        buckets: grid buckets (``buckets + 1`` points; the most a user can ever spend is that many eps).
        flip: instantaneous flip probability in ``[0, 1/2)``.
    """

    name = "memo-one-bit-mean"
    report_fields = ("values",)

    def __init__(self, epsilon: float, low: float, high: float, *, buckets: int = 8,
                 flip: float = 0.0) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.low, self.high = _check_bounds(low, high)
        if isinstance(buckets, bool) or int(buckets) != buckets or buckets < 1:
            raise ValueError(f"buckets must be a positive integer, got {buckets!r}")
        self.buckets = int(buckets)
        if not 0.0 <= float(flip) < 0.5:
            raise ValueError(f"flip must be in [0, 1/2), got {flip!r}")
        self.flip = float(flip)
        ee = math.exp(self.epsilon)
        self._p0, self._slope = 1.0 / (ee + 1.0), math.expm1(self.epsilon) / (ee + 1.0)

    @property
    def points(self) -> int:
        """Number of grid points (the most memoization keys of one user)."""
        return self.buckets + 1

    @property
    def epsilon_instantaneous(self) -> float:
        """Loss of one report given the memos: ``ln((1 - flip) / flip)`` (infinite without a flip)."""
        return math.inf if self.flip == 0 else math.log((1.0 - self.flip) / self.flip)

    def bit_probability(self, j: np.ndarray) -> np.ndarray:
        """``p(u_j)`` of the permanent bit of point ``j``."""
        return self._p0 + self._slope * (np.asarray(j, dtype=np.float64) / self.buckets)

    # -- client ---------------------------------------------------------------------------------------
    def round_points(self, values: Any, alpha: np.ndarray) -> np.ndarray:
        """Alpha-point rounding: the grid index of each value for the users' ``alpha``."""
        z = to_unit(values, self.low, self.high) * self.buckets
        base = np.minimum(np.floor(z), self.buckets - 1)
        return (base + (z - base > np.asarray(alpha))).astype(np.int64)

    def _report(self, j: np.ndarray, bit_u: np.ndarray, rng: np.random.Generator) -> Reports:
        bit = bit_u < self.bit_probability(j)
        if self.flip > 0:
            bit ^= rng.random(bit.shape) < self.flip
        return Reports(values=bit.astype(np.int64))

    def simulate(self, values: Any, user_keys: np.ndarray, *, rng: np.random.Generator | int,
                 task_id: str = "sim") -> Reports:
        """One report per simulated user (vectorized); ``user_keys`` (uint64) stand in for the secrets, so
        the same key gives the same alpha and bits in every window."""
        uk = np.asarray(user_keys, dtype=np.uint64)
        alpha = _uniform(memo_words_sim(uk, task_id, "seed", np.zeros(len(uk), np.int64), 1)[:, 0])
        j = self.round_points(values, alpha)
        bit_u = _uniform(memo_words_sim(uk, task_id, "memo", j, 1)[:, 0])
        return self._report(j, bit_u, np.random.default_rng(rng))

    def simulate_points(self, values: Any, user_keys: np.ndarray, *, task_id: str = "sim") -> np.ndarray:
        """The grid points simulated users round to (to count the distinct keys a user spent)."""
        uk = np.asarray(user_keys, dtype=np.uint64)
        alpha = _uniform(memo_words_sim(uk, task_id, "seed", np.zeros(len(uk), np.int64), 1)[:, 0])
        return self.round_points(values, alpha)

    def encode_client(self, value: float, secret: bytes, task_id: str, *,
                      rng: np.random.Generator | int | None = None) -> Reports:
        """A real client's report of ``value`` (HMAC-derived alpha and bit; the flip from ``rng``, the OS
        CSPRNG by default)."""
        alpha = _uniform(memo_words_hmac(secret, task_id, "seed", 0, 1))
        j = self.round_points(np.asarray([value]), alpha)
        bit_u = _uniform(memo_words_hmac(secret, task_id, "memo", int(j[0]), 1))
        return self._report(j, bit_u, client_rng(rng))

    # -- server ---------------------------------------------------------------------------------------
    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, reasons)``: ``values`` must be 0 or 1."""
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.values is None:
            reasons[:] = "missing_values"
            return np.zeros(n, dtype=bool), reasons
        v = np.asarray(reports.values)
        ok = ((v == 0) | (v == 1)) if v.dtype.kind in "iu" and v.ndim == 1 else np.zeros(n, bool)
        reasons[~ok] = "value_not_a_bit"
        return ok, reasons

    def create_accumulator(self) -> MemoAccumulator:
        return MemoAccumulator()

    def add(self, acc: MemoAccumulator, reports: Reports) -> MemoAccumulator:
        """Adds a batch (mutates and returns ``acc``); invalid reports raise ValueError."""
        ok, reasons = self.validate(reports)
        if not ok.all():
            raise ValueError(f"{int((~ok).sum())} reports are invalid (first: {reasons[~ok][0]})")
        acc.n += len(reports)
        acc.ones += int(np.asarray(reports.values).sum())
        return acc

    def merge(self, accs: list[MemoAccumulator]) -> MemoAccumulator:
        return MemoAccumulator(sum(a.n for a in accs), sum(a.ones for a in accs))

    def _u_hat(self, frac_ones: float) -> float:
        return ((frac_ones - self.flip) / (1.0 - 2.0 * self.flip) - self._p0) / self._slope

    def estimate_mean(self, acc: MemoAccumulator) -> tuple[float, float]:
        """``(mean, std)`` of the window; the std is the bit's binomial std (``kappa sqrt(P(1-P)/n)`` at
        the observed fraction), to which the rounding adds at most ``w^2 / 4`` per user."""
        if acc.n == 0:
            raise ValueError("no reports: nothing to estimate")
        f = acc.ones / acc.n
        width = self.high - self.low
        mean = self.low + width * self._u_hat(f)
        var_u = (f * (1 - f) / acc.n) / ((1 - 2 * self.flip) * self._slope) ** 2
        var_u += (1.0 / self.buckets) ** 2 / 4.0 / acc.n
        return float(mean), float(width * math.sqrt(var_u))

    def mean_variance(self, values: Any) -> float:
        """Closed-form variance of one window's mean for fixed values (over alpha, bits and flips)."""
        z = to_unit(values, self.low, self.high) * self.buckets
        base = np.minimum(np.floor(z), self.buckets - 1)
        frac = z - base
        var = np.zeros_like(z)
        k2 = (1.0 / ((1.0 - 2.0 * self.flip) * self._slope)) ** 2
        for j, w in ((base, 1.0 - frac), (base + 1.0, frac)):
            p1 = self.flip + (1.0 - 2.0 * self.flip) * self.bit_probability(j)
            var += w * k2 * p1 * (1.0 - p1)
        var += frac * (1.0 - frac) / self.buckets**2
        width = self.high - self.low
        return float(width * width * var.sum() / z.size**2)


def memoized_cost(mech: MemoizedOneBitMean, windows: int, *, keys: int | None = None,
                  delta: float = DEFAULT_DELTA) -> dict[str, Any]:
    """What a user spends after ``windows`` reports (one per window), with ``dp_accounting`` PLDs.

    Args:
        mech: the mechanism.
        windows: reports made.
        keys: distinct grid points the reports used (default: the worst case ``min(windows, points)``).
        delta: delta of the tight figures.

    Returns:
        ``values`` {``basic = min(keys, points) eps``, ``tight``: that many composed binary-RR PLDs at
        delta}: bounded by ``points * eps`` however many windows; ``any_history`` {``basic``, ``tight``}:
        ``windows`` instantaneous flips (infinite without a flip); ``fresh_equivalent``: ``windows`` fresh
        1BitMean reports at eps; ``max_keys`` (``points``).
    """
    if isinstance(windows, bool) or int(windows) != windows or windows < 0:
        raise ValueError(f"windows must be an integer >= 0, got {windows!r}")
    k = int(windows)
    m = min(k, mech.points) if keys is None else int(keys)
    if not (0 <= m <= k and (m >= 1 or k == 0)):
        raise ValueError(f"need 1 <= keys <= windows (or both 0), got keys = {keys}, windows = {windows}")
    m = min(m, mech.points)
    eps = mech.epsilon
    out: dict[str, Any] = {"windows": k, "keys": m, "max_keys": mech.points, "delta": delta,
                           "epsilon_inf": eps, "epsilon_instantaneous": mech.epsilon_instantaneous}
    out["values"] = {"basic": m * eps, "tight": min(m * eps, composed_epsilon(binary_rr_pld(eps), m, delta))}
    e_inst = mech.epsilon_instantaneous
    if k == 0:
        out["any_history"] = {"basic": 0.0, "tight": 0.0}
    elif math.isinf(e_inst):
        out["any_history"] = {"basic": math.inf, "tight": math.inf}
    else:
        out["any_history"] = {"basic": k * e_inst,
                              "tight": min(k * e_inst, composed_epsilon(binary_rr_pld(e_inst), k, delta))}
    out["fresh_equivalent"] = {"basic": k * eps,
                               "tight": min(k * eps, composed_epsilon(binary_rr_pld(eps), k, delta))}
    return out
