"""Numeric LDP mechanisms on a bounded attribute ``[low, high]``: encoders, fixed-size accumulators and the
closed-form variance of each mean estimate.

A client clips its value ``x`` into ``[low, high]`` and maps it to ``t = 2 (x - low) / (high - low) - 1``
in ``[-1, 1]``. Every mean mechanism outputs a number ``y`` with ``E[y | t] = t`` (unbiased) and
``Var[y | t] = A + B t^2`` (closed form; :meth:`NumericMechanism.variance`). The aggregator's estimate of
the mean of ``t`` over ``n`` reports is ``mean(y)``, with variance ``(A + B mean(t_i^2)) / n`` over the
mechanism's randomness for the fixed values of the window's users (:meth:`NumericMechanism.mean_variance`).

Clipping. The estimated mean is that of the *clipped* values ``min(max(x, low), high)``: values above
``high`` count as ``high`` and values below ``low`` as ``low``, so a heavy tail beyond the bounds biases
the mean toward the interior by ``E[(x - high)^+] - E[(low - x)^+]``. Nothing is dropped.

Mechanisms (``MECHANISMS``; the wire field each uses):

``duchi`` (``reals``)
    Duchi, Jordan and Wainwright's one-dimensional randomizer, as restated by Wang et al. (ICDE 2019,
    Sec. III-A, Algorithm 1): ``y = +-C`` with ``C = (e^eps + 1) / (e^eps - 1)`` and
    ``P[y = C] = 1/2 + t (e^eps - 1) / (2 (e^eps + 1))``; ``Var[y | t] = C^2 - t^2``.
``piecewise`` (``reals``)
    The Piecewise Mechanism (Wang et al., Sec. III-B, Algorithm 2): ``C = (e^{eps/2} + 1) / (e^{eps/2} - 1)``,
    ``l(t) = (C + 1) t / 2 - (C - 1) / 2``, ``r(t) = l(t) + C - 1``; ``y`` is uniform on ``[l, r]`` with
    probability ``e^{eps/2} / (e^{eps/2} + 1)``, else uniform on ``[-C, l) U (r, C]``. The two densities are
    ``(e^eps - e^{eps/2}) / (2 e^{eps/2} + 2)`` and ``e^{-eps}`` times that; ``Var[y | t] =
    t^2 / (e^{eps/2} - 1) + (e^{eps/2} + 3) / (3 (e^{eps/2} - 1)^2)`` (the PM variance lemma).
``hybrid`` (``reals``)
    The Hybrid Mechanism (Wang et al., Sec. III-C): with probability ``alpha`` the Piecewise Mechanism at
    ``eps``, else Duchi's at ``eps``; ``alpha = 1 - e^{-eps/2}`` for ``eps > eps* = 0.61`` and 0 below
    (the paper's choice minimizing the worst-case variance). Both parts are unbiased, so
    ``Var[y | t] = alpha Var_PM(t) + (1 - alpha) Var_Duchi(t)``.
``laplace`` (``reals``)
    ``y = t + Lap(2 / eps)`` (sensitivity 2 on ``[-1, 1]``); ``Var = 8 / eps^2``. Baseline.
``one-bit-mean`` (``values``: 0 or 1)
    1BitMean (Ding, Kulkarni and Yekhanin, NeurIPS 2017, Sec. 2.1): with ``u = (t + 1) / 2`` in ``[0, 1]``,
    the bit is 1 with probability ``1 / (e^eps + 1) + u (e^eps - 1) / (e^eps + 1)``; the server maps it to
    ``y = 2 (b (e^eps + 1) - 1) / (e^eps - 1) - 1``. This bit has exactly the distribution of Duchi's sign
    (same variance, ``C^2 - t^2``); the wire form is one bit instead of a double.
``square-wave`` (``reals``)
    Square Wave (:mod:`ldp.square_wave`) on ``u = (t + 1) / 2``: the report feeds the EM(S) distribution
    estimate (histogram, quantiles; :mod:`ldp.numeric.estimates`) and, linearly, an unbiased mean:
    ``E[y | u] = q (1 + 2b) / 2 + 2 b (p - q) u`` (integrate the SW density), so
    ``u_hat = (y - q (1 + 2b) / 2) / (2 b (p - q))``, with ``E[y^2 | u] = q ((1 + b)^3 + b^3) / 3 +
    (p - q)(2 b u^2 + 2 b^3 / 3)``.

``auto`` picks, at the task's epsilon, the candidate of :data:`AUTO_CANDIDATES` (a frozen tuple, so a task
means the same thing forever) with the lowest worst-case variance ``max_t Var[y | t]``; the first listed
wins ties (``one-bit-mean`` over ``hybrid`` when ``alpha = 0``: the same distribution in one bit). None of
those estimates quantiles: a task that states quantiles resolves ``auto`` among the quantile candidates of
its schema version instead (:data:`AUTO_QUANTILE_CANDIDATES`, :func:`resolve_auto`; version 3:
``square-wave``), and a version with none is refused.

Second moment. With ``moments=2`` each client reports, chosen by a fair coin independent of its value,
either ``t`` or ``t2 = 2 u^2 - 1`` (the slot travels in ``values``: 0 first moment, 1 second); the coin
reveals nothing, so the report is eps-LDP. The aggregator estimates ``E[u]`` and ``E[u^2]`` from the two
halves and the variance of the values as ``(high - low)^2 (E[u^2] - E[u]^2)``.

Accumulators. The server rounds each ``y`` (and ``y^2``) to a multiple of ``2^-24`` (far below any
mechanism's noise) and keeps the integer sums as Python integers, so merging is exact integer addition in
any order: merged shards equal one pass bit for bit.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp.csprng import client_rng
from ldp.numeric.grid import (
    INPUT_GRID,
    SlidingWindow,
    UniformFn,
    block_geometric_for,
    exp_lower,
    restrict,
    rng_uniform,
    round_to_grid,
    rounding_variance,
    sliding_window_for,
    two_point_for,
)
from ldp.payload import PayloadField, PayloadSpec, Refusal, WireSpec
from ldp.reports import Reports
from ldp.square_wave import SquareWave

__all__ = [
    "MECHANISMS",
    "AUTO_CANDIDATES",
    "FIXED_POINT_BITS",
    "NumericAccumulator",
    "NumericMechanism",
    "Duchi",
    "Piecewise",
    "Hybrid",
    "LaplaceMean",
    "OneBitMean",
    "SquareWaveNumeric",
    "HYBRID_EPS_STAR",
    "make_numeric_mechanism",
    "choose_numeric_mechanism",
    "AUTO_QUANTILE_CANDIDATES",
    "QUANTILE_MECHANISMS",
    "resolve_auto",
    "to_unit",
]

#: ``y`` and ``y^2`` are summed as integers in units of ``2^-FIXED_POINT_BITS``
FIXED_POINT_BITS = 24
_SCALE = float(1 << FIXED_POINT_BITS)
#: largest ``|y|`` an accumulator accepts (its square in fixed point stays below 2^62)
_MAX_ABS_OUTPUT = float(1 << 18)
#: Laplace reports beyond ``1 + LAPLACE_TAIL * scale`` are refused (probability ``e^-60`` per report)
LAPLACE_TAIL = 60.0
#: the threshold of the Hybrid Mechanism (Wang et al., Sec. III-C)
HYBRID_EPS_STAR = 0.61
MAX_EPSILON = 100.0
MIN_EPSILON = 1e-3


def _check_epsilon(epsilon: Any) -> float:
    if isinstance(epsilon, bool):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}")
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}") from None
    if not (math.isfinite(eps) and MIN_EPSILON <= eps <= MAX_EPSILON):
        raise ValueError(f"epsilon must be in [{MIN_EPSILON:g}, {MAX_EPSILON:g}], got {epsilon!r}")
    return eps


def _check_bounds(low: Any, high: Any) -> tuple[float, float]:
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        raise ValueError(f"low and high must be numbers, got {low!r}, {high!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"need finite low < high, got low = {low!r}, high = {high!r}")
    return lo, hi


def to_unit(values: Any, low: float, high: float) -> np.ndarray:
    """Clips client values into ``[low, high]`` and maps them to ``u`` in ``[0, 1]``.

    Raises:
        ValueError: a non-numeric or non-finite value (naming the first one); NaN is never clipped.
    """
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.dtype.kind not in "iuf" or arr.dtype.kind == "b":
        raise ValueError(f"values must be real numbers, got dtype {arr.dtype}")
    x = arr.astype(np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"value {x[i]!r} at index {i} is not finite")
    return (np.clip(x, low, high) - low) / (high - low)


def _split(k: np.ndarray) -> tuple[int, int]:
    """Exact sum of int64 terms below 2^62 in magnitude: sums of the high and low 31-bit halves."""
    hi = k >> 31
    lo = k & ((1 << 31) - 1)
    return int(hi.sum()), int(lo.sum())


def _exact_sum(k: np.ndarray) -> int:
    hi, lo = _split(k)
    return (hi << 31) + lo


@dataclasses.dataclass
class NumericAccumulator:
    """Fixed-size sufficient statistics of a batch of numeric reports.

    Attributes:
        n: reports per slot (slot 0: first moment; slot 1: second moment when ``moments = 2``).
        total: per slot, the sum of the reports' ``y`` in units of ``2^-24`` (Python integers: exact).
        total_sq: per slot, the sum of ``y^2`` in the same units.
        counts: Square Wave output-bin counts (``square-wave`` only), int64.
    """

    n: list[int]
    total: list[int]
    total_sq: list[int]
    counts: np.ndarray | None = None

    def moments(self, slot: int = 0) -> tuple[int, float, float]:
        """``(n, mean of y, mean of y^2)`` of one slot (NaN means when the slot is empty)."""
        n = self.n[slot]
        if n == 0:
            return 0, math.nan, math.nan
        return n, self.total[slot] / _SCALE / n, self.total_sq[slot] / _SCALE / n


class NumericMechanism(abc.ABC):
    """One numeric mechanism on ``[low, high]`` at ``epsilon`` (see the module docstring).

    Args:
        epsilon: privacy budget of one report.
        low, high: the attribute's bounds; clients clip into them.
        moments: 1 (mean) or 2 (the clients split between ``t`` and ``2 u^2 - 1``, for the variance).
    """

    name: str = ""
    #: wire fields of a report (``values`` carries the slot when ``moments = 2``)
    report_fields: tuple[str, ...] = ("reals",)

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.low, self.high = _check_bounds(low, high)
        if moments not in (1, 2) or isinstance(moments, bool):
            raise ValueError(f"moments must be 1 or 2, got {moments!r}")
        self.moments = int(moments)
        if self.moments == 2 and "values" not in self.report_fields:
            self.report_fields = (*self.report_fields, "values")
        lo, hi = self.output_range
        if max(abs(lo), abs(hi)) > _MAX_ABS_OUTPUT:
            raise ValueError(f"{self.name} at epsilon {self.epsilon:g} has outputs up to {max(-lo, hi):.3g}, "
                             f"beyond the accumulator's {_MAX_ABS_OUTPUT:g}")

    # -- closed forms ---------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def variance_poly(self) -> tuple[float, float, float]:
        """``(A, B, D)`` with ``Var[y | t] = A + B t^2 + D t`` (``D = 0`` except for Square Wave)."""

    @property
    @abc.abstractmethod
    def output_range(self) -> tuple[float, float]:
        """Range of the unbiased per-report output ``y`` (t scale); wide, not infinite, for Laplace."""

    def variance(self, t: Any) -> np.ndarray:
        """``Var[y | t]`` for ``t`` in ``[-1, 1]`` (t scale): ``A + B t^2 + D t`` at the grid points plus the
        input rounding's ``(B + 1) (2 / N)^2 f (1 - f)`` (:func:`ldp.numeric.grid.rounding_variance`)."""
        a, b, d = self.variance_poly
        t = np.asarray(t, dtype=np.float64)
        return a + b * t * t + d * t + (b + 1.0) * rounding_variance(t, INPUT_GRID)

    def worst_case_variance(self) -> float:
        """``max over t in [-1, 1]`` of ``Var[y | t]`` (t scale)."""
        a, b, d = self.variance_poly
        points = np.array([-1.0, 1.0] + ([min(max(-d / (2.0 * b), -1.0), 1.0)] if b < 0 else []))
        return float(np.max(a + b * points * points + d * points) + max(b + 1.0, 0.0) / INPUT_GRID**2)

    def mean_variance(self, values: Any) -> float:
        """Closed-form variance of the mean estimate (in the values' units) over the mechanism's randomness,
        for the fixed clipped values of ``n`` users all reporting the first moment:
        ``((high - low) / 2)^2 mean_i Var[y | t_i] / n``."""
        t = 2.0 * to_unit(values, self.low, self.high) - 1.0
        half = 0.5 * (self.high - self.low)
        return float(half * half * np.mean(self.variance(t)) / t.size)

    def conditional_variance_estimate(self, mean_y: float, mean_y2: float) -> float:
        """Estimate of ``mean_i Var[y | t_i]`` from a slot's moments (t scale).

        ``E[y^2 | t] = A + D t + (B + 1) t^2``, so with ``mean(t)`` estimated by ``mean(y)`` and ``mean(t^2)``
        by ``(mean(y^2) - A - D mean(y)) / (B + 1)`` the estimate is unbiased when ``B > -1`` (clipped to the
        range of ``Var[y | t]``). When ``B = -1`` (Duchi, 1BitMean, Hybrid at ``alpha = 0``: the output's
        distribution depends on ``t`` only through its mean) ``mean(t^2)`` is not identifiable; the sample
        variance ``mean(y^2) - mean(y)^2`` is used, which over-estimates by the spread of the window's ``t``
        (conservative).
        """
        a, b, d = self.variance_poly
        if b + 1.0 > 1e-9:
            mean_t2 = min(max((mean_y2 - a - d * mean_y) / (b + 1.0), 0.0), 1.0)
            est = a + b * mean_t2 + d * min(max(mean_y, -1.0), 1.0)
            grid = self.variance(np.linspace(-1.0, 1.0, 201))
            return float(min(max(est, grid.min()), grid.max()))
        return float(max(mean_y2 - mean_y * mean_y, 0.0))

    # -- client ---------------------------------------------------------------------------------------
    @abc.abstractmethod
    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        """The integer messages (int64) of ``t`` in ``[-1, 1]``: the input rounded to the grid, then the
        exact sampler (:mod:`ldp.numeric.grid`); ``uniform`` is the only randomness."""

    @abc.abstractmethod
    def message_range(self) -> tuple[int, int]:
        """``(lowest, highest)`` message a client sends (the validator refuses anything else)."""

    @abc.abstractmethod
    def output_of(self, m: np.ndarray) -> np.ndarray:
        """The server's unbiased output ``y`` (t scale) of messages ``m``: ``E[y | t] = t``."""

    def perturb(self, t: np.ndarray, rng: np.random.Generator) -> Reports:
        """Randomizes ``t`` in ``[-1, 1]`` (vectorized): the messages as integer-valued doubles in ``reals``
        (exact: ``|m| < 2^53``)."""
        return Reports(reals=self.messages(t, rng_uniform(rng)).astype(np.float64))

    def encode(self, values: Any, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Clips, maps to ``[-1, 1]`` and randomizes each value; one report per value.

        Args:
            values: real values, shape ``(n,)``.
            rng: ``None`` (a real client: the OS CSPRNG) or a seed / generator (simulations).

        Returns:
            :class:`~ldp.reports.Reports` with :attr:`report_fields` set.
        """
        rng = client_rng(rng)
        u = to_unit(values, self.low, self.high)
        if self.moments == 1:
            return self.perturb(2.0 * u - 1.0, rng)
        slot = (rng.random(u.shape) < 0.5).astype(np.int64)
        t = np.where(slot == 1, 2.0 * u * u - 1.0, 2.0 * u - 1.0)
        rep = self.perturb(t, rng)
        return dataclasses.replace(rep, values=slot if rep.values is None else rep.values * 2 + slot)

    # -- server ---------------------------------------------------------------------------------------
    def decode(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """``(y, slot)`` of valid reports: the unbiased output in t scale and the moment slot."""
        y = self.output_of(np.asarray(reports.reals, dtype=np.float64).astype(np.int64))
        slot = np.zeros(len(y), np.int64) if self.moments == 1 else np.asarray(reports.values, np.int64)
        return y, slot

    def _check_payload(self, reports: Reports, ok: np.ndarray, reasons: np.ndarray) -> None:
        """Checks of the ``reals`` field: exactly an integer message in :meth:`message_range`."""
        _grid_payload(reports, ok, reasons, *self.message_range())

    @property
    def payload(self) -> PayloadSpec:
        """The declared report fields (:mod:`ldp.payload`): ``reals`` one double in the wire range
        (:meth:`_reals_bounds`), ``values`` the moment slot (0 or 1); a value outside either is
        ``invalid_payload``."""
        fields = []
        if "reals" in self.report_fields:
            lo, hi = self._reals_bounds()
            fields.append(PayloadField("reals", "float64", low=lo, high=hi, outside="invalid_payload"))
        if "values" in self.report_fields:
            top = self._values_top()
            fields.append(PayloadField("values", "int64", low=0, high=top, outside="invalid_payload"))
        return PayloadSpec(tuple(fields))

    def _reals_bounds(self) -> tuple[float, float]:
        """Bounds of the ``reals`` a client sends: the message range."""
        lo, hi = self.message_range()
        return float(lo), float(hi)

    def _values_top(self) -> int:
        """Largest ``values`` entry a client sends (default: the moment slot, 1)."""
        return 1

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """Server-side report checks.

        Returns:
            ``(ok, reasons)``: a boolean mask and, per refused report, a :class:`~ldp.payload.Refusal`
            whose detail is the mechanism's own code (``missing_<field>``, ``reals_not_float``,
            ``reals_out_of_range``, ``value_not_a_bit``, ``bad_slot``, ...; the dead-letter code is
            ``invalid_payload``, ``missing_field`` for a missing field); ``None`` for accepted reports.
        """
        n = len(reports)
        ok = np.ones(n, dtype=bool)
        reasons = np.full(n, None, dtype=object)
        missing = [f for f in self.report_fields if getattr(reports, f) is None]
        if missing:
            ok[:] = False
            reasons[:] = Refusal("missing_field", f"missing_{missing[0]}")
            return ok, reasons
        if self.moments == 2 and self.name != OneBitMean.name:
            s = np.asarray(reports.values)
            bad = (s.dtype.kind not in "iu") | ((s != 0) & (s != 1)) if s.ndim == 1 else np.ones(n, bool)
            reasons[bad & ok] = Refusal("invalid_payload", "bad_slot")
            ok &= ~bad
        self._check_payload(reports, ok, reasons)
        return ok, reasons

    def create_accumulator(self) -> NumericAccumulator:
        """An empty accumulator."""
        m = self.moments
        return NumericAccumulator([0] * m, [0] * m, [0] * m)

    def add(self, acc: NumericAccumulator, reports: Reports) -> NumericAccumulator:
        """Adds a batch of reports (mutates and returns ``acc``). Invalid reports raise ValueError naming
        the first reason: :meth:`validate` them first (the pipeline dead-letters them)."""
        if len(reports) == 0:
            return acc
        ok, reasons = self.validate(reports)
        if not ok.all():
            raise ValueError(f"{int((~ok).sum())} {self.name} reports are invalid "
                             f"(first: {reasons[~ok][0]}); validate() them first")
        y, slot = self.decode(reports)
        k1 = np.rint(y * _SCALE).astype(np.int64)
        k2 = np.rint(y * y * _SCALE).astype(np.int64)
        for s in range(self.moments):
            sel = slot == s
            acc.n[s] += int(sel.sum())
            acc.total[s] += _exact_sum(k1[sel])
            acc.total_sq[s] += _exact_sum(k2[sel])
        self._add_extra(acc, reports)
        return acc

    def _add_extra(self, acc: NumericAccumulator, reports: Reports) -> None:  # noqa: B027 - optional hook
        """Mechanism-specific statistics (Square Wave's histogram); nothing by default."""

    def merge(self, accs: Sequence[NumericAccumulator]) -> NumericAccumulator:
        """A new accumulator holding the sum of ``accs`` (exact)."""
        out = self.create_accumulator()
        for a in accs:
            for s in range(self.moments):
                out.n[s] += a.n[s]
                out.total[s] += a.total[s]
                out.total_sq[s] += a.total_sq[s]
            if a.counts is not None:
                out.counts = a.counts.copy() if out.counts is None else out.counts + a.counts
        return out

    def estimate(self, acc: NumericAccumulator, **kwargs: Any):
        """The window's :class:`~ldp.numeric.estimates.NumericEstimate` (see :func:`ldp.numeric.estimates.
        estimate`)."""
        from ldp.numeric.estimates import estimate

        return estimate(self, acc, **kwargs)

    def describe(self) -> dict[str, Any]:
        """The mechanism's parameters as plain data."""
        a, b, d = self.variance_poly
        lo, hi = self.output_range
        return {"mechanism": self.name, "epsilon": self.epsilon, "low": self.low, "high": self.high,
                "moments": self.moments, "report_fields": list(self.report_fields),
                "variance_a": a, "variance_b": b, "variance_d": d, "output_low": lo, "output_high": hi}


def _grid_payload(reports: Reports, ok: np.ndarray, reasons: np.ndarray, low: int, high: int) -> None:
    """Refuses ``reals`` that are not exactly an integer message in ``[low, high]``: not float
    (``reals_not_float``), NaN, infinite, fractional or negative zero (``reals_off_grid``), or outside
    (``reals_out_of_range``)."""
    y = np.asarray(reports.reals)
    if y.ndim != 1 or y.dtype.kind != "f":
        ok[:] = False
        reasons[:] = Refusal("invalid_payload", "reals_not_float")
        return
    y = y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        off = ~np.isfinite(y) | (np.floor(y) != y) | ((y == 0.0) & np.signbit(y))
        outside = ~off & ((y < low) | (y > high))
    reasons[off & ok] = Refusal("invalid_payload", "reals_off_grid")
    ok &= ~off
    reasons[outside & ok] = Refusal("invalid_payload", "reals_out_of_range")
    ok &= ~outside


def _window_affine(win: SlidingWindow) -> tuple[float, float, tuple[float, float, float]]:
    """``(a, k, (A, B, D))``: ``y = (m - a) k - 1`` is unbiased for ``t_j`` and ``Var[y | t_j] = A + B t_j^2 +
    D t_j`` (exact rationals rounded once)."""
    alpha, beta, (c0, c1, c2) = win.moments()
    n = win.n_steps
    k = 2 / (beta * n)
    f = k * k
    big_a = f * (c0 + c1 * n / 2 + c2 * n * n / 4)
    big_b = f * c2 * n * n / 4
    big_d = f * (c1 * n / 2 + c2 * n * n / 2)
    return float(alpha), float(k), (float(big_a), float(big_b), float(big_d))


class Duchi(NumericMechanism):
    """Duchi et al.'s one-dimensional randomizer (Wang et al. 2019, Algorithm 1) on the grid.

    Message ``m`` in ``{0, 1}`` from :class:`~ldp.numeric.grid.TwoPoint`: ``P[m = 1 | j] = (T0 + j d) / S``
    with ``(T0 + N d) / T0 <= L <= e^eps`` (``L`` = :func:`~ldp.numeric.grid.exp_lower`), so eps-LDP holds
    exactly for every pair of grid inputs and message. The server's ``y = C (2 m - 1)``, ``C = 1 + 2 T0 /
    (N d)`` (``(e^eps + 1) / (e^eps - 1)`` to 1e-15), has ``E[y | t] = t`` and ``Var[y | t] = C^2 - t^2``:
    the rounding adds nothing (a two-point law with mean ``t``)."""

    name = "duchi"
    wire = WireSpec("real", "numeric", "encode_numeric_duchi")

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1) -> None:
        self.grid = two_point_for(exp_lower(_check_epsilon(epsilon)))
        self._c = float(self.grid.c)
        super().__init__(epsilon, low, high, moments=moments)

    @property
    def c(self) -> float:
        return self._c

    @property
    def variance_poly(self) -> tuple[float, float, float]:
        return self.c**2, -1.0, 0.0

    @property
    def output_range(self) -> tuple[float, float]:
        return -self.c, self.c

    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        return self.grid.sample(round_to_grid(t, self.grid.n_steps, uniform), uniform)

    def message_range(self) -> tuple[int, int]:
        return 0, 1

    def output_of(self, m: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(m) == 1, self.c, -self.c)


class Piecewise(NumericMechanism):
    """The Piecewise Mechanism (Wang et al. 2019, Algorithm 2) on the grid: a
    :class:`~ldp.numeric.grid.SlidingWindow` of ``w ~ N s e^{-eps/2}`` cells (PM's centre ``C - 1`` of its
    range ``2 C``) over ``M = N s + w`` cells, ``h / l <= L <= e^eps``.

    eps-LDP: every ``P[m | j]`` is ``h / S`` or ``l / S``, so every ratio is at most ``h / l <= e^eps``,
    checked on the integers. Unbiased: ``E[m | j] = alpha + beta j`` exactly, ``y = (m - alpha) k - 1``.
    ``Var[y | t] = A + B t^2 + (B + 1) (2 / N)^2 f (1 - f)`` (``A``, ``B`` exact from the window; the last
    term is the input rounding, at most ``(B + 1) 2^-32``); within 0.1% of the continuous PM's
    ``t^2 / (e^{eps/2} - 1) + (e^{eps/2} + 3) / (3 (e^{eps/2} - 1)^2)`` at eps 0.1 to 10."""

    name = "piecewise"
    wire = WireSpec("real", "numeric", "encode_numeric_piecewise")

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1) -> None:
        eps = _check_epsilon(epsilon)
        self.grid = sliding_window_for(exp_lower(eps), math.exp(-eps / 2.0))
        self._a, self._k, self._poly = _window_affine(self.grid)
        super().__init__(epsilon, low, high, moments=moments)

    @property
    def c(self) -> float:
        return 1.0 / math.tanh(self.epsilon / 4.0)  # the continuous PM's C, for reference

    @property
    def variance_poly(self) -> tuple[float, float, float]:
        return self._poly

    @property
    def output_range(self) -> tuple[float, float]:
        return (0 - self._a) * self._k - 1.0, (self.grid.cells - 1 - self._a) * self._k - 1.0

    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        return self.grid.sample(round_to_grid(t, self.grid.n_steps, uniform), uniform)

    def message_range(self) -> tuple[int, int]:
        return 0, self.grid.cells - 1

    def output_of(self, m: np.ndarray) -> np.ndarray:
        return (np.asarray(m, dtype=np.float64) - self._a) * self._k - 1.0


class Hybrid(NumericMechanism):
    """The Hybrid Mechanism (Wang et al. 2019, Sec. III-C) on the grid: with probability ``alpha`` (exactly
    ``T_alpha / 2^62``, a uniform integer below ``T_alpha``) the grid Piecewise message ``m`` in ``[0, M)``,
    else the grid Duchi message sent as ``M + m'`` (``M`` for ``-C``, ``M + 1`` for ``+C``).

    eps-LDP: the coin does not depend on the value and the two parts' messages are disjoint, so each
    message's ratio is its part's, at most ``e^eps``. ``Var[y | t] = alpha Var_PM + (1 - alpha) Var_Duchi``
    (both unbiased; the rounding term is ``(B + 1) (2 / N)^2 f (1 - f)`` with the mixture's ``B``)."""

    name = "hybrid"
    wire = WireSpec("real", "numeric", "encode_numeric_hybrid")

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1) -> None:
        self._pm = Piecewise(epsilon, low, high)
        self._duchi = Duchi(epsilon, low, high)
        eps = _check_epsilon(epsilon)
        nominal = -math.expm1(-eps / 2.0) if eps > HYBRID_EPS_STAR else 0.0
        self.alpha_threshold = int(round(nominal * (1 << 62)))
        super().__init__(epsilon, low, high, moments=moments)

    @property
    def alpha(self) -> float:
        """``P[Piecewise] = T_alpha / 2^62`` (``1 - e^{-eps/2}`` above eps* = 0.61, else 0)."""
        return self.alpha_threshold / float(1 << 62)

    @property
    def variance_poly(self) -> tuple[float, float, float]:
        (ap, bp, dp), (ad, bd, _) = self._pm.variance_poly, self._duchi.variance_poly
        a = self.alpha
        return a * ap + (1 - a) * ad, a * bp + (1 - a) * bd, a * dp

    @property
    def output_range(self) -> tuple[float, float]:
        lo, hi = self._pm.output_range
        return min(lo, -self._duchi.c), max(hi, self._duchi.c)

    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        """The coin, then the Duchi message of the reports without Piecewise, then the Piecewise ones."""
        t = np.asarray(t, dtype=np.float64)
        cells = self._pm.grid.cells
        use_pm = (uniform(1 << 62, np.arange(t.size)) < self.alpha_threshold if self.alpha_threshold
                  else np.zeros(t.size, bool))
        pm, du = np.flatnonzero(use_pm), np.flatnonzero(~use_pm)
        out = np.empty(t.size, dtype=np.int64)
        out[du] = self._duchi.messages(t[du], restrict(uniform, du)) + cells
        out[pm] = self._pm.messages(t[pm], restrict(uniform, pm))
        return out

    def message_range(self) -> tuple[int, int]:
        return 0, self._pm.grid.cells + 1

    def output_of(self, m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, dtype=np.int64)
        cells = self._pm.grid.cells
        return np.where(m >= cells, self._duchi.output_of(m - cells), self._pm.output_of(m))


class LaplaceMean(NumericMechanism):
    """A geometric staircase in place of ``t + Lap(2 / eps)``: :class:`~ldp.numeric.grid.BlockGeometric`,
    ``m = j + N Z + V`` with ``Z`` two-sided geometric (``rho = T / 2^62 >= e^{-eps}``) and ``V`` uniform on
    ``[0, N)``; ``y = 2 (m - (N - 1) / 2) / N - 1``.

    eps-LDP: between any two grid inputs the block index of ``m - j`` moves by at most one, so every ratio
    is at most ``1 / rho <= e^eps`` (checked on the integers). ``Var[y | t] = 4 (2 rho / (1 - rho)^2 + (1 -
    N^-2) / 12) + (2 / N)^2 f (1 - f)``: below Laplace's ``8 / eps^2`` (1.78 against 2.0 at eps 2).
    Reports with ``|Z|`` beyond ``max_block`` (probability below ``e^-60``) are refused. The client draws
    ``2 / (1 - rho)`` uniform integers per report on average (about ``2 / eps`` at small eps)."""

    name = "laplace"
    wire = WireSpec("real", "numeric", "encode_numeric_laplace")

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1) -> None:
        self.grid = block_geometric_for(exp_lower(_check_epsilon(epsilon)))
        super().__init__(epsilon, low, high, moments=moments)

    @property
    def variance_poly(self) -> tuple[float, float, float]:
        rho, n = float(self.grid.rho), self.grid.n_steps
        return 4.0 * (2.0 * rho / (1.0 - rho) ** 2 + (1.0 - 1.0 / n / n) / 12.0), 0.0, 0.0

    def message_range(self) -> tuple[int, int]:
        n, z = self.grid.n_steps, self.grid.max_block(LAPLACE_TAIL)
        return -z * n, (z + 2) * n - 1

    @property
    def output_range(self) -> tuple[float, float]:
        lo, hi = self.message_range()
        return float(self.output_of(np.array([lo]))[0]), float(self.output_of(np.array([hi]))[0])

    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        return self.grid.sample(round_to_grid(t, self.grid.n_steps, uniform), uniform)

    def output_of(self, m: np.ndarray) -> np.ndarray:
        n = self.grid.n_steps
        return 2.0 * (np.asarray(m, dtype=np.float64) - 0.5 * (n - 1)) / n - 1.0


class OneBitMean(NumericMechanism):
    """1BitMean (Ding et al. 2017): one bit per report in ``values`` (with ``moments = 2`` the value is
    ``2 bit + slot``), drawn as the grid Duchi message (:class:`~ldp.numeric.grid.TwoPoint`:
    ``P[b = 1 | j]`` an exact rational, ratios at most ``e^eps`` on the integers)."""

    name = "one-bit-mean"
    wire = WireSpec("real", "numeric", "encode_numeric_one-bit-mean")
    report_fields = ("values",)

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1) -> None:
        self.grid = two_point_for(exp_lower(_check_epsilon(epsilon)))
        self._c = float(self.grid.c)
        super().__init__(epsilon, low, high, moments=moments)

    @property
    def c(self) -> float:
        return self._c

    @property
    def variance_poly(self) -> tuple[float, float, float]:
        return self.c**2, -1.0, 0.0

    @property
    def output_range(self) -> tuple[float, float]:
        return -self.c, self.c

    def bit_probability(self, u: np.ndarray) -> np.ndarray:
        """``P[b = 1 | u]`` at a grid point ``u = j / N``: ``(T0 + j d) / S`` (about ``1 / (e^eps + 1) + u
        (e^eps - 1) / (e^eps + 1)``, Ding et al.)."""
        g = self.grid
        return (g.base + np.asarray(u, dtype=np.float64) * g.n_steps * g.slope) / g.total

    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        return self.grid.sample(round_to_grid(t, self.grid.n_steps, uniform), uniform)

    def message_range(self) -> tuple[int, int]:
        return 0, 1

    def output_of(self, m: np.ndarray) -> np.ndarray:
        return self.bit_to_output(m)

    def perturb(self, t: np.ndarray, rng: np.random.Generator) -> Reports:
        return Reports(values=self.messages(t, rng_uniform(rng)))

    def bit_to_output(self, bit: np.ndarray) -> np.ndarray:
        """``+C`` for 1 and ``-C`` for 0."""
        return np.where(np.asarray(bit) == 1, self.c, -self.c)

    def decode(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        v = np.asarray(reports.values, dtype=np.int64)
        if self.moments == 1:
            return self.bit_to_output(v), np.zeros(len(v), np.int64)
        return self.bit_to_output(v >> 1), v & 1

    def _values_top(self) -> int:
        return 1 if self.moments == 1 else 3

    def _check_payload(self, reports: Reports, ok: np.ndarray, reasons: np.ndarray) -> None:
        v = np.asarray(reports.values)
        top = 2 if self.moments == 1 else 4
        bad = (v < 0) | (v >= top) if v.dtype.kind in "iu" and v.ndim == 1 else np.ones(len(reports), bool)
        why = "value_not_a_bit" if self.moments == 1 else "value_not_bit_and_slot"
        reasons[bad & ok] = Refusal("invalid_payload", why)
        ok &= ~bad


class SquareWaveNumeric(NumericMechanism):
    """Square Wave (:mod:`ldp.square_wave`) on the grid: a :class:`~ldp.numeric.grid.SlidingWindow` whose
    window is ``w ~ 2 b N s`` cells (SW's ``[u - b, u + b]``) over ``M = N s + w`` cells, ``h / l <= L <=
    e^eps``; ``u_j = j / N``. eps-LDP as for Piecewise (every ratio at most ``h / l``).

    The mean is the window's exact affine map (unbiased; ``Var[y | t]`` quadratic, plus the rounding term).
    The histogram bins each message at its cell centre ``v = -b' + (m + 1/2) / (N s)``, ``b' = w / (2 N s)``
    (``|b' - b| <= 1 / (2 N s)``), into the SW output bins, and EM(S) runs on SW's continuous transition
    matrix; only ``moments = 1``.

    Args:
        bins: number of equal bins of ``[low, high]`` in the histogram (EM runs on ``bins * em_resolution``
            sub-bins, :class:`ldp.square_wave.SquareWave`).
        smoothing: EMS (default) or plain EM.
    """

    name = "square-wave"
    wire = WireSpec("real", "numeric", "encode_numeric_square-wave")

    def __init__(self, epsilon: float, low: float = 0.0, high: float = 1.0, *, moments: int = 1,
                 bins: int = 512, em_resolution: int | None = None, smoothing: bool = True,
                 tol: float = 1e-8, max_iter: int = 10_000) -> None:
        if moments != 1:
            raise ValueError("square-wave estimates the variance from its distribution: moments must be 1")
        eps = _check_epsilon(epsilon)
        self.sw = SquareWave(eps, int(bins), em_resolution=em_resolution,
                             smoothing=smoothing, tol=tol, max_iter=max_iter)
        self.grid = sliding_window_for(exp_lower(eps), min(2.0 * self.sw.b, 1.0))
        self._a, self._k, self._poly = _window_affine(self.grid)
        g = self.grid
        self._cell = 1.0 / (g.n_steps * g.step)
        self._b_grid = g.width * self._cell / 2.0
        super().__init__(epsilon, low, high, moments=1)

    @property
    def bins(self) -> int:
        return self.sw.d

    @property
    def variance_poly(self) -> tuple[float, float, float]:
        return self._poly

    @property
    def output_range(self) -> tuple[float, float]:
        return (0 - self._a) * self._k - 1.0, (self.grid.cells - 1 - self._a) * self._k - 1.0

    def messages(self, t: np.ndarray, uniform: UniformFn) -> np.ndarray:
        t = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        return self.grid.sample(round_to_grid(t, self.grid.n_steps, uniform), uniform)

    def message_range(self) -> tuple[int, int]:
        return 0, self.grid.cells - 1

    def output_of(self, m: np.ndarray) -> np.ndarray:
        return (np.asarray(m, dtype=np.float64) - self._a) * self._k - 1.0

    def sw_value(self, m: np.ndarray) -> np.ndarray:
        """The SW coordinate of a message, clipped into ``[-b, 1 + b]``: ``-b' + (m + 1/2) / (N s)``."""
        v = -self._b_grid + (np.asarray(m, dtype=np.float64) + 0.5) * self._cell
        return np.clip(v, -self.sw.b, 1.0 + self.sw.b)

    def create_accumulator(self) -> NumericAccumulator:
        acc = super().create_accumulator()
        acc.counts = np.zeros(self.sw.output_bins, dtype=np.int64)
        return acc

    def _add_extra(self, acc: NumericAccumulator, reports: Reports) -> None:
        v = self.sw_value(np.asarray(reports.reals))
        acc.counts += np.bincount(self.sw.bin_index(v), minlength=self.sw.output_bins)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(bins=self.bins, sw=self.sw.describe())
        return out


#: name -> class; ``auto`` resolves to one of :data:`AUTO_CANDIDATES`
MECHANISMS: dict[str, type[NumericMechanism]] = {
    cls.name: cls for cls in (Duchi, Piecewise, Hybrid, LaplaceMean, OneBitMean, SquareWaveNumeric)
}
#: the frozen candidates of ``auto``, in tie-breaking order (never edit: add a new tuple for a new version)
AUTO_CANDIDATES: tuple[str, ...] = ("one-bit-mean", "hybrid", "piecewise", "duchi", "laplace")


def choose_numeric_mechanism(epsilon: float, candidates: Sequence[str] = AUTO_CANDIDATES) -> str:
    """The candidate with the lowest worst-case mean variance at ``epsilon`` (first wins within 1e-9)."""
    scores = [MECHANISMS[c](epsilon).worst_case_variance() for c in candidates]
    best = min(scores)
    return next(c for c, s in zip(candidates, scores) if s <= best * (1 + 1e-9))


#: the mechanisms that estimate a distribution, hence quantiles (:mod:`ldp.numeric.estimates`)
QUANTILE_MECHANISMS: frozenset[str] = frozenset({SquareWaveNumeric.name})
#: the frozen candidates of ``auto`` for a task that states quantiles, per task ``schema_version`` (never
#: edit a version's tuple: a task must resolve to the same mechanism on every release)
AUTO_QUANTILE_CANDIDATES: dict[int, tuple[str, ...]] = {3: ("square-wave",)}


def resolve_auto(epsilon: float, *, quantiles: bool, schema_version: int) -> str:
    """The mechanism ``auto`` stands for in a task: without stated quantiles ``"auto"`` itself (resolved
    at the attribute's epsilon by :func:`choose_numeric_mechanism`, as before quantiles counted); with
    them the first of :data:`AUTO_QUANTILE_CANDIDATES` of the task's ``schema_version``.

    Raises:
        ValueError: quantiles stated and the version has no candidate that estimates them (one line).
    """
    if not quantiles:
        return "auto"
    candidates = [c for c in AUTO_QUANTILE_CANDIDATES.get(schema_version, ()) if c in QUANTILE_MECHANISMS]
    if not candidates:
        raise ValueError(
            f"'auto' at schema_version {schema_version} has no candidate that estimates quantiles (its "
            f"candidates {list(AUTO_CANDIDATES)} give the mean only): name square-wave, or drop quantiles"
        )
    return candidates[0]


def make_numeric_mechanism(name: str, epsilon: float, low: float = 0.0, high: float = 1.0,
                           **params: Any) -> NumericMechanism:
    """Builds a mechanism by name (:data:`MECHANISMS` or ``auto``).

    Args:
        name: mechanism name (exact, lower case).
        epsilon: privacy budget of one report.
        low, high: the attribute's bounds.
        **params: ``moments`` (1 or 2; not for ``square-wave``), and for ``square-wave`` ``bins``,
            ``em_resolution``, ``smoothing``, ``tol``, ``max_iter``.

    Raises:
        ValueError: unknown name or parameter, bad epsilon or bounds (one line).
    """
    if name == "auto":
        name = choose_numeric_mechanism(epsilon)
    cls = MECHANISMS.get(name)
    if cls is None:
        known = [*sorted(MECHANISMS), "auto"]
        raise ValueError(f"unknown numeric mechanism {name!r}; expected one of {known}")
    allowed = {"moments"} | ({"bins", "em_resolution", "smoothing", "tol", "max_iter"} if cls is
                             SquareWaveNumeric else set())
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for {name}; allowed: {sorted(allowed)}")
    return cls(epsilon, low, high, **params)
