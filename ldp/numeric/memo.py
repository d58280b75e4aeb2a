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
from ldp.intervals import z_value
from ldp.longitudinal.budget import DEFAULT_DELTA
from ldp.longitudinal.memo import memo_words_hmac, memo_words_sim
from ldp.numeric.estimates import LEVEL, NumericEstimate, bernstein_halfwidth
from ldp.numeric.mechanisms import _check_bounds, _check_epsilon, to_unit
from ldp.payload import PayloadField, PayloadSpec, Refusal, WireSpec
from ldp.reports import Reports

__all__ = ["MEMO_NAME", "MemoizedOneBitMean", "MemoAccumulator", "memoized_cost", "memoized_window_costs"]

#: the name in a numeric task (``"mechanism": "memo-one-bit-mean"``); never a candidate of ``auto``
MEMO_NAME = "memo-one-bit-mean"

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

    name = MEMO_NAME
    wire = WireSpec(
        "real", reason="no byte procedure yet: its permanent bits come from the secret's HMAC, specified for "
        "the categorical memoized oracles only"
    )
    report_fields = ("values",)
    #: one report per user and window, first moment only
    moments = 1
    #: repeated collection: the budget ledger charges per grid point (``ldp.longitudinal``), not per report
    memoized = True

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

    @property
    def epsilon_inf(self) -> float:
        """Loss of any number of reports of one grid point (= ``epsilon``): the cost of one memo key."""
        return self.epsilon

    @property
    def max_memo_keys(self) -> int:
        """The most permanent bits one user can hold (the grid points)."""
        return self.points

    @property
    def epsilon_1(self) -> float:
        """Loss of one report from a fresh user: ``P[bit = 1]`` lies in ``[P1(0), P1(1)]`` with
        ``P1(u) = flip + (1 - 2 flip) p(u)`` whatever the value and ``alpha``, and ``1 - P1(0) = P1(1)``,
        so ``ln(P1(1) / P1(0))`` (``epsilon`` without a flip)."""
        lo = self.flip + (1.0 - 2.0 * self.flip) * self._p0
        return math.log((1.0 - lo) / lo)

    def guarantees(self) -> dict[str, float | int]:
        """The guarantees as plain data (as :meth:`ldp.longitudinal.memo.MemoizedOracle.guarantees`)."""
        return {"epsilon_1": self.epsilon_1, "epsilon_inf": self.epsilon_inf,
                "epsilon_instantaneous": self.epsilon_instantaneous, "max_memo_keys": self.max_memo_keys,
                "epsilon_inf_any_changes": self.max_memo_keys * self.epsilon_inf}

    def describe(self) -> dict[str, Any]:
        """The parameters as plain data (the client's state file pins them per task id)."""
        return {"mechanism": self.name, "epsilon": self.epsilon, "low": self.low, "high": self.high,
                "buckets": self.buckets, "flip": self.flip, **self.guarantees()}

    @property
    def unit_output_range(self) -> tuple[float, float]:
        """Range of the per-report unbiased ``u_hat`` (u scale)."""
        return self._u_hat(0.0), self._u_hat(1.0)

    def worst_case_unit_variance(self) -> float:
        """An upper bound of ``Var[u_hat]`` of one report over values, alpha, bits and flips (u scale):
        ``kappa^2 / (4 (1 - 2 flip)^2)`` for the bit (``P1 (1 - P1) <= 1/4``) plus ``1 / (4 buckets^2)``
        for the rounding."""
        k2 = (1.0 / ((1.0 - 2.0 * self.flip) * self._slope)) ** 2
        return 0.25 * k2 + 0.25 / self.buckets**2

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

    def simulate_memo_keys(self, values: Any, user_keys: np.ndarray, *, task_id: str = "sim") -> np.ndarray:
        """The memoization keys (grid points) of simulated users, as
        :meth:`ldp.longitudinal.memo.MemoizedOracle.simulate_memo_keys`."""
        return self.simulate_points(values, user_keys, task_id=task_id)

    def encode(self, values: Any, *, rng: np.random.Generator | int | None = None) -> Reports:
        """One report each from *fresh, independent* users (alpha and bits drawn from ``rng``, the OS
        CSPRNG for None): the one-report distribution. Repeated collection goes through
        :meth:`client_report` (real clients) or :meth:`simulate` (simulations)."""
        r = client_rng(rng)
        n = to_unit(values, self.low, self.high).size
        j = self.round_points(values, r.random(n))
        return self._report(j, r.random(n), r)

    def client_memo_key(self, secret: bytes, task_id: str, value: float) -> int:
        """The grid point a real user's value rounds to (its HMAC-derived alpha): the key the budget
        ledger charges, found without drawing a report."""
        alpha = _uniform(memo_words_hmac(secret, task_id, "seed", 0, 1))
        return int(self.round_points(np.asarray([value], dtype=np.float64), alpha)[0])

    def client_report(self, secret: bytes, task_id: str, value: float, *,
                      rng: np.random.Generator | int | None = None) -> tuple[Reports, int]:
        """``(report, grid point)`` of a real user (HMAC-derived alpha and bit; the flip from ``rng``, the
        OS CSPRNG by default); :class:`ldp.longitudinal.client.Client` wraps it with the budget."""
        j = self.client_memo_key(secret, task_id, value)
        bit_u = _uniform(memo_words_hmac(secret, task_id, "memo", j, 1))
        return self._report(np.asarray([j], dtype=np.int64), bit_u, client_rng(rng)), j

    def encode_client(self, value: float, secret: bytes, task_id: str, *,
                      rng: np.random.Generator | int | None = None) -> Reports:
        """A real client's report of ``value`` (:meth:`client_report` without the key)."""
        return self.client_report(secret, task_id, value, rng=rng)[0]

    # -- server ---------------------------------------------------------------------------------------
    #: one bit per report (:mod:`ldp.payload`)
    payload = PayloadSpec((PayloadField("values", "int64", low=0, high=1, outside="invalid_payload"),))

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, reasons)``: ``values`` must be 0 or 1."""
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.values is None:
            reasons[:] = Refusal("missing_field", "missing_values")
            return np.zeros(n, dtype=bool), reasons
        v = np.asarray(reports.values)
        ok = ((v == 0) | (v == 1)) if v.dtype.kind in "iu" and v.ndim == 1 else np.zeros(n, bool)
        reasons[~ok] = Refusal("invalid_payload", "value_not_a_bit")
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

    def estimate(self, acc: MemoAccumulator, *, attribute: str = "value", quantiles: Any = (),
                 level: float = LEVEL, **_: Any) -> NumericEstimate:
        """The window's :class:`~ldp.numeric.estimates.NumericEstimate`: the mean and std of
        :meth:`estimate_mean`, the normal interval and the interval valid at every n (Bernstein with
        :meth:`worst_case_unit_variance` and the range of ``u_hat``), both intersected with ``[low, high]``;
        no variance, histogram or quantiles (``quantiles`` is ignored).

        Raises:
            ValueError: an empty window.
        """
        mean, std = self.estimate_mean(acc)
        width = self.high - self.low
        z = z_value(level)
        lo_u, hi_u = self.unit_output_range
        bound = width * bernstein_halfwidth(acc.n, self.worst_case_unit_variance(), hi_u - lo_u, level)

        def clip(a: float) -> float:
            return float(min(max(a, self.low), self.high))

        return NumericEstimate(
            attribute=attribute, mechanism=self.name, epsilon=self.epsilon, n=int(acc.n), mean=mean,
            mean_std=std, mean_ci_low=clip(mean - z * std), mean_ci_high=clip(mean + z * std),
            mean_bound_low=clip(mean - bound), mean_bound_high=clip(mean + bound))

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
    from ldp.longitudinal.accounting import binary_rr_pld, composed_epsilon  # dp_accounting: a second

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


def memoized_window_costs(mech: MemoizedOneBitMean, windows: int, *,
                          delta: float = DEFAULT_DELTA) -> list[dict[str, Any]]:
    """The cost after each of ``windows`` windows (one report per window, worst case over the values):
    entry ``k - 1`` is :func:`memoized_cost` after ``k`` reports, its ``values`` figures (``basic``, and
    ``tight``: composed once per distinct ``min(k, points)``) and the basic any-history figure (the tight
    one composes ``k`` PLDs per window: :func:`memoized_cost` gives it for the last window)."""
    from ldp.longitudinal.accounting import binary_rr_pld, composed_epsilon

    eps, e_inst = mech.epsilon, mech.epsilon_instantaneous
    tight: dict[int, float] = {}
    out = []
    for k in range(1, int(windows) + 1):
        m = min(k, mech.points)
        if m not in tight:
            tight[m] = min(m * eps, composed_epsilon(binary_rr_pld(eps), m, delta))
        out.append({"reports": k, "keys": m, "values_basic": m * eps, "values_tight": tight[m],
                    "any_history_basic": math.inf if math.isinf(e_inst) else k * e_inst,
                    "fresh_equivalent_basic": k * eps})
    return out
