"""Exact integer-grid samplers behind the numeric mechanisms' wire (schema version 3).

A report must carry nothing but the message the privacy proof is about. Computing an output in floating
point and sending the double leaks the input through the double's low bits (``z - 1`` with ``z`` in
``[2, 3)`` is always on the ``2^-51`` grid). So every numeric mechanism here sends an **integer message**
``m`` whose probabilities given the input are exact rationals, drawn only by comparing uniform integers
with integer thresholds:

1. **Input grid.** ``t`` in ``[-1, 1]`` is rounded at random to ``j`` in ``{0, ..., N}`` (``t_j = 2 j / N -
   1``): ``j = floor(p) + 1[U < p - floor(p)]`` with ``p = N (t + 1) / 2``, so ``E[t_j] = t`` and
   ``Var[t_j] = (2 / N)^2 f (1 - f)``, ``f = p - floor(p)``. Any distribution over ``j`` is a mixture of the
   mechanism's rows ``P[. | j]``, so the rounding's own float arithmetic cannot weaken eps-LDP; it only
   has to be unbiased. A mechanism with ``Var[y | t_j] = A + B t_j^2 + D t_j`` then has
   ``Var[y | t] = A + B t^2 + D t + (B + 1) (2 / N)^2 f (1 - f)`` (at most ``(B + 1) / N^2``).
2. **Message.** ``m`` is drawn from one uniform integer ``U`` in ``[0, S)`` (or a sequence of them), by
   integer comparisons and divisions only (:class:`SlidingWindow`, :class:`TwoPoint`,
   :class:`BlockGeometric`). Every ``P[m | j]`` is a rational with the integer numerator and denominator
   held by the sampler, and the likelihood ratio bound is checked on those integers against
   :func:`exp_lower`, a rational lower bound of ``e^eps`` (a partial sum of its Taylor series), so
   ``P[m | j] <= e^eps P[m | j']`` holds exactly, not up to rounding.
3. **Server.** ``E[m | j]`` is affine in ``j`` for every sampler, so the server's ``y = 2 (m - a) / (b N) -
   1`` (floating point is harmless there) has ``E[y | t] = t``: the estimates are unbiased.

``uniform(m, idx)`` is the only source of randomness: an exact uniform integer on ``[0, m)`` for each
index of ``idx`` (``Generator.integers`` in a client, a word stream's masked rejection in the
conformance vectors).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

__all__ = [
    "INPUT_GRID",
    "UniformFn",
    "rng_uniform",
    "restrict",
    "exp_lower",
    "round_to_grid",
    "rounding_variance",
    "SlidingWindow",
    "TwoPoint",
    "BlockGeometric",
    "sliding_window_for",
    "two_point_for",
    "block_geometric_for",
]

#: ``N``: input grid steps of ``[-1, 1]`` (``2^16``: the rounding adds at most ``(B + 1) 2^-32`` variance)
INPUT_GRID = 1 << 16
#: largest denominator ``S`` of a sampler (uniform integers below ``2^62`` fit int64 arithmetic)
_MAX_S = 1 << 62
_TWO53 = 1 << 53

#: ``uniform(m, idx)``: an exact uniform integer on ``[0, m)`` (int64) for each entry of ``idx``
UniformFn = Callable[[int, np.ndarray], np.ndarray]


def rng_uniform(rng: np.random.Generator) -> UniformFn:
    """:data:`UniformFn` of a numpy ``Generator`` (``integers`` with a scalar bound: exact, vectorized)."""

    def draw(m: int, idx: np.ndarray) -> np.ndarray:
        if m == 1:
            return np.zeros(len(idx), dtype=np.int64)
        return rng.integers(0, m, size=len(idx), dtype=np.int64)

    return draw


def restrict(uniform: UniformFn, rows: np.ndarray) -> UniformFn:
    """``uniform`` seen from a subset: index ``i`` of the subset draws for ``rows[i]`` (a report keeps its
    own word stream in the conformance vectors)."""
    rows = np.asarray(rows, dtype=np.int64)
    return lambda m, idx: uniform(m, rows[np.asarray(idx, dtype=np.int64)])


def exp_lower(x: float | Fraction) -> Fraction:
    """A rational ``L <= e^x`` for ``x >= 0``, within ``2^-64`` relative (the Taylor series' partial sum,
    every term positive, rounded down to a multiple of ``2^-64``)."""
    fx = Fraction(x)
    if fx < 0:
        raise ValueError(f"exp_lower needs x >= 0, got {x!r}")
    total, term, k = Fraction(1), Fraction(1), 0
    while True:
        k += 1
        term = term * fx / k
        total += term
        if k > fx and term * (1 << 70) < total:
            break
    return Fraction(math.floor(total * (1 << 64)), 1 << 64)


def round_to_grid(t: np.ndarray, n_steps: int, uniform: UniformFn) -> np.ndarray:
    """Unbiased randomized rounding of ``t`` in ``[-1, 1]`` to ``j`` in ``[0, N]`` (int64), one uniform
    53-bit integer per value: ``j = floor(p) + 1[U 2^-53 < p - floor(p)]``, ``p = N (t + 1) / 2``."""
    p = np.clip((np.asarray(t, dtype=np.float64) + 1.0) * (0.5 * n_steps), 0.0, float(n_steps))
    base = np.floor(p)
    u = uniform(_TWO53, np.arange(p.size)).astype(np.float64) * 2.0**-53
    return (base + (u < p - base)).astype(np.int64)


def rounding_variance(t: np.ndarray | float, n_steps: int) -> np.ndarray:
    """``Var[t_j] = (2 / N)^2 f (1 - f)`` of :func:`round_to_grid` at ``t`` (``f`` the fractional part)."""
    p = (np.asarray(t, dtype=np.float64) + 1.0) * (0.5 * n_steps)
    f = p - np.floor(p)
    return (2.0 / n_steps) ** 2 * f * (1.0 - f)


@dataclasses.dataclass(frozen=True)
class SlidingWindow:
    """A window of ``w`` cells sliding ``s`` cells per input step over ``M = N s + w`` cells.

    ``P[m | j] = h / S`` for ``j s <= m < j s + w`` and ``l / S`` elsewhere, ``S = w h + (M - w) l``. The
    likelihood ratio of any message between any two inputs is at most ``h / l``. Sampling: ``U`` uniform on
    ``[0, S)``; with ``a = j s l``, ``m = U // l`` if ``U < a``, ``j s + (U - a) // h`` if ``U < a + w h``,
    else ``j s + w + (U - a - w h) // l``. ``E[m | j] = alpha + beta j`` and ``Var[m | j]`` is quadratic in
    ``j`` (:meth:`moments`, exact).
    """

    n_steps: int
    step: int
    width: int
    high: int
    low: int

    def __post_init__(self) -> None:
        if min(self.n_steps, self.step, self.width, self.high, self.low) < 1:
            raise ValueError(f"sliding window parameters must be positive integers: {self}")
        if self.total >= _MAX_S:
            raise ValueError(f"sliding window denominator {self.total} is not below 2^62")

    @property
    def cells(self) -> int:
        """``M``: messages ``0 .. M - 1``."""
        return self.n_steps * self.step + self.width

    @property
    def total(self) -> int:
        """``S = w h + (M - w) l``."""
        return self.width * self.high + (self.cells - self.width) * self.low

    def ratio(self) -> Fraction:
        """The largest likelihood ratio, ``h / l``."""
        return Fraction(self.high, self.low)

    def sample(self, j: np.ndarray, uniform: UniformFn) -> np.ndarray:
        j = np.asarray(j, dtype=np.int64)
        u = uniform(self.total, np.arange(j.size))
        start = j * self.step
        a = start * self.low
        b = a + self.width * self.high
        inside = start + (u - a) // self.high
        after = start + self.width + (u - b) // self.low
        return np.where(u < a, u // self.low, np.where(u < b, inside, after))

    def pmf(self, j: int) -> list[Fraction]:
        """``P[m | j]`` for ``m = 0 .. M - 1``, exactly."""
        lo, hi = j * self.step, j * self.step + self.width
        return [Fraction(self.high if lo <= m < hi else self.low, self.total) for m in range(self.cells)]

    def moments(self) -> tuple[Fraction, Fraction, tuple[Fraction, Fraction, Fraction]]:
        """``(alpha, beta, (c0, c1, c2))``: ``E[m | j] = alpha + beta j``, ``Var[m | j] = c0 + c1 j +
        c2 j^2``."""
        n_, s, w, h, lo = self.n_steps, self.step, self.width, self.high, self.low
        m_, tot = self.cells, self.total
        del n_
        alpha = Fraction(lo * m_ * (m_ - 1) // 2 + (h - lo) * w * (w - 1) // 2, tot)
        beta = Fraction((h - lo) * w * s, tot)
        q_m = Fraction((m_ - 1) * m_ * (2 * m_ - 1), 6)
        q_w = Fraction((w - 1) * w * (2 * w - 1), 6)
        c2 = Fraction((h - lo) * w * s * s, tot) - beta * beta
        c1 = Fraction((h - lo) * s * w * (w - 1), tot) - 2 * alpha * beta
        c0 = (lo * q_m + (h - lo) * q_w) / tot - alpha * alpha
        return alpha, beta, (c0, c1, c2)


@dataclasses.dataclass(frozen=True)
class TwoPoint:
    """``m`` in ``{0, 1}`` with ``P[m = 1 | j] = (T0 + j d) / S``, ``S = 2 T0 + N d`` (symmetric).

    The ratio of either message between any two inputs is at most ``(T0 + N d) / T0``. One uniform integer on
    ``[0, S)`` compared with ``T0 + j d``."""

    n_steps: int
    base: int
    slope: int

    def __post_init__(self) -> None:
        if min(self.n_steps, self.base, self.slope) < 1 or self.total >= _MAX_S:
            raise ValueError(f"two-point parameters must be positive, with S below 2^62: {self}")

    @property
    def total(self) -> int:
        return 2 * self.base + self.n_steps * self.slope

    def ratio(self) -> Fraction:
        return Fraction(self.base + self.n_steps * self.slope, self.base)

    def sample(self, j: np.ndarray, uniform: UniformFn) -> np.ndarray:
        j = np.asarray(j, dtype=np.int64)
        u = uniform(self.total, np.arange(j.size))
        return (u < self.base + j * self.slope).astype(np.int64)

    def pmf(self, j: int) -> list[Fraction]:
        p1 = Fraction(self.base + j * self.slope, self.total)
        return [1 - p1, p1]

    @property
    def c(self) -> Fraction:
        """``C = 1 + 2 T0 / (N d)``: ``y = +-C`` for ``m = 1 / 0`` has ``E[y | j] = t_j``."""
        return 1 + Fraction(2 * self.base, self.n_steps * self.slope)


@dataclasses.dataclass(frozen=True)
class BlockGeometric:
    """``m = j + N (G1 - G2) + V``: ``G1, G2`` geometric (``P[G = g] = (1 - rho) rho^g``, ``rho = T / 2^62``,
    each a run of uniform integers below ``T``), ``V`` uniform on ``[0, N)``.

    With ``Z = G1 - G2`` (``P[Z = z] = (1 - rho) / (1 + rho) rho^|z|``), ``P[m | j] = P[Z = floor((m - j) /
    N)] / N``. Inputs ``j, j'`` in ``[0, N]`` shift ``m - j`` by at most ``N``, so the block index moves by at
    most one and ``|z|`` by at most one: the ratio is at most ``1 / rho``. ``E[m | j] = j + (N - 1) / 2``,
    ``Var[m | j] = N^2 2 rho / (1 - rho)^2 + (N^2 - 1) / 12``. Messages are unbounded integers; the
    validator refuses ``|Z|`` beyond :meth:`max_block` (probability below ``e^-60``)."""

    n_steps: int
    threshold: int

    def __post_init__(self) -> None:
        if self.n_steps < 1 or not 0 < self.threshold < _MAX_S:
            raise ValueError(f"block geometric parameters out of range: {self}")

    @property
    def rho(self) -> Fraction:
        return Fraction(self.threshold, _MAX_S)

    def ratio(self) -> Fraction:
        return 1 / self.rho

    def max_block(self, tail: float = 60.0) -> int:
        """``Z_max``: ``P[|Z| > Z_max] = 2 rho^(Z_max + 1) / (1 + rho) <= e^-tail``."""
        return int(math.ceil(tail / -math.log(float(self.rho))))

    def _geometric(self, n: int, uniform: UniformFn) -> np.ndarray:
        g = np.zeros(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            hit = uniform(_MAX_S, todo) < self.threshold
            todo = todo[hit]
            g[todo] += 1
        return g

    def sample(self, j: np.ndarray, uniform: UniformFn) -> np.ndarray:
        j = np.asarray(j, dtype=np.int64)
        z = self._geometric(j.size, uniform) - self._geometric(j.size, uniform)
        v = uniform(self.n_steps, np.arange(j.size))
        return j + self.n_steps * z + v

    def pmf_at(self, j: int, m: int) -> Fraction:
        rho = self.rho
        z = abs((m - j) // self.n_steps)
        return (1 - rho) / (1 + rho) * rho**z / self.n_steps


def sliding_window_for(ratio: Fraction, centre_fraction: float, n_steps: int = INPUT_GRID,
                       min_width: int = 16) -> SlidingWindow:
    """The finest sliding window with likelihood ratio ``h / l <= ratio`` and ``w / (N s)`` close to
    ``centre_fraction`` (``s`` grows until ``w >= min_width`` when the fraction is small), with ``S`` below
    ``2^62``: ``l`` as large as fits and ``h = floor(l ratio)``."""
    step = min(1 << 20, max(1, math.ceil(min_width / (centre_fraction * n_steps))))
    width = max(1, round(centre_fraction * n_steps * step))
    cells = n_steps * step + width
    r = Fraction(ratio)
    if r < 1:
        raise ValueError(f"ratio {float(r)} below 1")
    # S = w h + (M - w) l <= l (w r + M - w) < 2^62
    low = max(1, math.floor(Fraction(_MAX_S - 1) / (width * r + cells - width)))
    high = min(math.floor(low * r), (_MAX_S - 1 - (cells - width) * low) // width)
    return SlidingWindow(n_steps, step, width, high, low)


def two_point_for(ratio: Fraction, n_steps: int = INPUT_GRID) -> TwoPoint:
    """The symmetric :class:`TwoPoint` with ``(T0 + N d) / T0 <= ratio`` (``T0 = ceil(N d / (ratio - 1))``)
    and ``S`` just below ``2^61``."""
    r = Fraction(ratio)
    if r <= 1:
        raise ValueError(f"ratio {float(r)} must exceed 1")
    slope = max(1, math.floor(Fraction(1 << 61) / (n_steps * (1 + 2 / (r - 1)))))
    base = max(1, math.ceil(Fraction(n_steps * slope) / (r - 1)))
    return TwoPoint(n_steps, base, slope)


def block_geometric_for(ratio: Fraction, n_steps: int = INPUT_GRID) -> BlockGeometric:
    """The :class:`BlockGeometric` with ``1 / rho <= ratio``: ``T = ceil(2^62 / ratio)``."""
    r = Fraction(ratio)
    if r <= 1:
        raise ValueError(f"ratio {float(r)} must exceed 1")
    return BlockGeometric(n_steps, math.ceil(Fraction(_MAX_S) / r))
