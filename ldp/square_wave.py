"""Square Wave (SW): 1-D numerical distribution estimation under LDP, with EM and the EMS smoothing step.

Square Wave (Li, Wang, Lopuhaä-Zwakenberg, Li and Škorić, *Estimating Numerical Distributions under
Local Differential Privacy*, SIGMOD 2020) perturbs a value ``v`` in ``[0, 1]`` into ``y`` in
``[-b, 1 + b]`` with the density

    p = e^eps / (2 b e^eps + 1)   when |y - v| <= b,
    q = 1 / (2 b e^eps + 1)       otherwise,

where the closeness threshold is ``b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))``
(Yang et al., VLDB 2021, Section 3.4, restated in ``/work/shared/seeds/README.md``). ``p / q = e^eps``
and ``2 b p + q = 1``, so every output density ratio between two inputs is at most ``e^eps``: eps-LDP.

The aggregator discretizes the output range into ``n_out`` equal bins and keeps only the bin counts, a
fixed-size and mergeable accumulator. Estimation runs Expectation Maximization over the ``c`` input bins
with the transition matrix ``M[j, i] = P(y in output bin j | input bin i)`` (computed exactly from the
piecewise-constant density); the EMS variant of the SW paper applies a binomial smoothing ``(1, 2, 1) / 4``
after every EM step. There is no closed-form variance for the EM estimate.

Integer inputs. A client value ``x`` in ``[0, c)`` is mapped to ``[0, 1]`` either uniformly within its
bin, ``v = (x + U) / c`` with ``U ~ U[0, 1)`` (``input_mode="uniform"``, the default: it matches the SW
paper's continuous model), or at the bin centre, ``v = (x + 1/2) / c`` (``input_mode="center"``:
deterministic). Both satisfy eps-LDP because the SW guarantee holds for every pair of real inputs.

EM resolution. The EM runs over ``c * em_resolution`` equal sub-bins of ``[0, 1]`` (the SW paper treats
values as continuous and discretizes them finely) and the result is summed back to the ``c`` values. The
EMS kernel blurs by one sub-bin per iteration, so on a coarse grid (``c = 64``) at small eps it
over-smooths badly: measured on N(32, 8) with 166,667 reports, the mean error of length-45 range sums at
eps = 0.2 is 0.19 with resolution 1 and 0.06 with resolution 4 (0.024 vs 0.005 at eps = 1). The default
resolution is ``ceil(256 / c)`` (at least 1). The matrix of a sub-bin averages the density over the
sub-bin, exactly (uniform input; for ``input_mode="center"`` with resolution 1 the matrix is the exact one
for the centre).

The wire form (:class:`SquareWaveGrid`, report schema version 3). :class:`SquareWave` and
:func:`perturb_unit` are the continuous model: a double computed in floating point reveals its input
through its low bits, so it is never sent. A client sends an **integer message** instead, drawn by the exact
sliding-window sampler of :mod:`ldp.numeric.grid` (Square Wave's discrete form): the value ``x`` in
``[0, c)`` becomes one of ``P = c K`` input positions, ``j = x K + k`` (``input_mode="uniform"``: ``k``
a uniform integer in ``[0, K)``; ``"center"``: ``k = K // 2``), whose point in ``[0, 1]`` is
``(j + 1/2) / P``; the message ``m`` in ``[0, M)`` is the sliding window's cell, ``P[m | j] = h / S``
inside the window ``[j s, j s + w)`` (``w ~ 2 b P s``, SW's ``[v - b, v + b]``) and ``l / S`` elsewhere,
with ``h / l <= exp_lower(eps) <= e^eps``. Every probability is an exact rational, so eps-LDP holds for
every pair of inputs and every message exactly (the position draw is a mixture of rows). The aggregator
bins messages into ``output_bins`` contiguous runs of cells and runs EM(S) on the transition matrix of
that discrete distribution (integer cell counts, one rounding to double).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

from ldp.csprng import client_rng
from ldp.payload import PayloadField, PayloadSpec, Refusal, refuse
from ldp.reports import Reports

if TYPE_CHECKING:  # ldp.numeric imports this module: the grid is imported where it is used
    from ldp.numeric.grid import SlidingWindow

__all__ = [
    "InputMode",
    "SquareWave",
    "SquareWaveGrid",
    "GRID_POSITIONS",
    "SWAccumulator",
    "SWEstimate",
    "sw_closeness",
    "sw_densities",
    "perturb_unit",
    "transition_matrix",
    "em_estimate",
    "em_estimate_batch",
    "SWOperator",
]


class InputMode(str, enum.Enum):
    """How an integer value in ``[0, c)`` is placed in ``[0, 1]`` before perturbation."""

    CENTER = "center"
    UNIFORM = "uniform"


def sw_closeness(epsilon: float) -> float:
    """The closeness threshold ``b`` of Square Wave (SW paper Eq. for b; VLDB 2021 Section 3.4).

    Args:
        epsilon: privacy budget (> 0).

    Returns:
        ``b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))``.
    """
    eps = float(epsilon)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    if eps > 700:
        raise ValueError(f"epsilon {epsilon} is too large for Square Wave's closed forms (e^eps overflows)")
    if eps < 1e-4:
        # numerator ~ eps^2 / 2 and denominator ~ eps^2 as eps -> 0: the limit is 1/2, and the exact
        # expression loses precision to cancellation below about 1e-4.
        return 0.5
    ee = math.exp(eps)
    return (eps * ee - ee + 1.0) / (2.0 * ee * (math.expm1(eps) - eps))


def sw_densities(epsilon: float) -> tuple[float, float, float]:
    """Returns ``(b, p, q)``: closeness threshold and the two output densities of Square Wave."""
    b = sw_closeness(epsilon)
    ee = math.exp(float(epsilon))
    p = ee / (2.0 * b * ee + 1.0)
    q = 1.0 / (2.0 * b * ee + 1.0)
    return b, p, q


def perturb_unit(
    v: np.ndarray, epsilon: float, *, rng: np.random.Generator | int | None = None
) -> np.ndarray:
    """Square Wave perturbation of values in ``[0, 1]`` (vectorized).

    With probability ``2 b p`` the output is uniform on ``[v - b, v + b]``; otherwise it is uniform on the
    rest of ``[-b, 1 + b]``, which has length 1 and is sampled as ``u - b`` if ``u < v`` else ``u + b``
    for ``u ~ U[0, 1)``.

    Args:
        v: float array of values in ``[0, 1]``.
        epsilon: privacy budget.
        rng: generator or seed (the OS CSPRNG, :mod:`ldp.csprng`, when None).

    Returns:
        float64 array of outputs in ``[-b, 1 + b]``.
    """
    rng = client_rng(rng)
    v = np.asarray(v, dtype=np.float64)
    if v.size and (not np.all(np.isfinite(v)) or v.min() < 0.0 or v.max() > 1.0):
        raise ValueError("Square Wave inputs must lie in [0, 1]")
    b, p, _ = sw_densities(epsilon)
    near = rng.random(v.shape) < 2.0 * b * p
    u = rng.random(v.shape)
    y_near = v + (2.0 * u - 1.0) * b
    y_far = np.where(u < v, u - b, u + b)
    return np.where(near, y_near, y_far)


def _h2(x: np.ndarray) -> np.ndarray:
    """Second antiderivative of the unit step: ``max(x, 0)^2 / 2``."""
    x = np.maximum(x, 0.0)
    return 0.5 * x * x


def transition_matrix(
    epsilon: float, domain_size: int, output_bins: int, input_mode: InputMode | str = InputMode.UNIFORM
) -> np.ndarray:
    """Exact ``M[j, i] = P(y in output bin j | input bin i)`` for the discretized Square Wave.

    ``P(y in [a1, a2] | v) = q (a2 - a1) + (p - q) |[a1, a2] ∩ [v - b, v + b]|``. For
    ``input_mode="uniform"`` the overlap length is averaged over ``v ~ U[u0, u1]``: the average equals the
    area of the rectangle ``[a1, a2] x [u0, u1]`` inside the band ``|t - v| <= b`` divided by ``u1 - u0``,
    and that area is ``phi(b) - phi(-b)`` with
    ``phi(s) = H2(s-a1+u1) - H2(s-a2+u1) - H2(s-a1+u0) + H2(s-a2+u0)``, ``H2(x) = max(x, 0)^2 / 2``.

    Args:
        epsilon: privacy budget.
        domain_size: number of equal input bins of ``[0, 1]``.
        output_bins: number of equal output bins over ``[-b, 1 + b]``.
        input_mode: ``"center"`` (input at each bin centre) or ``"uniform"`` (uniform within the bin).

    Returns:
        float64 array ``(output_bins, domain_size)``; each column sums to 1.
    """
    mode = InputMode(input_mode)
    c, m = int(domain_size), int(output_bins)
    if c < 1 or m < 1:
        raise ValueError("domain_size and output_bins must be >= 1")
    b, p, q = sw_densities(epsilon)
    edges = np.linspace(-b, 1.0 + b, m + 1)
    a1, a2 = edges[:-1, None], edges[1:, None]
    if mode is InputMode.CENTER:
        v = (np.arange(c) + 0.5)[None, :] / c
        overlap = np.clip(np.minimum(a2, v + b) - np.maximum(a1, v - b), 0.0, None)
    else:
        u0 = np.arange(c)[None, :] / c
        u1 = (np.arange(c) + 1.0)[None, :] / c

        def phi(s: float) -> np.ndarray:
            return _h2(s - a1 + u1) - _h2(s - a2 + u1) - _h2(s - a1 + u0) + _h2(s - a2 + u0)

        overlap = (phi(b) - phi(-b)) * c
    mat = q * (a2 - a1) + (p - q) * overlap
    return mat / mat.sum(axis=0, keepdims=True)  # removes float round-off only (columns sum to 1)


class SWOperator:
    """The products of :func:`transition_matrix` (``input_mode="uniform"``) without the matrix: ``M @ f``
    and ``M.T @ r`` in ``O(c + n_out)`` per column instead of ``O(c n_out)``, equal to the dense products
    up to float round-off (below ``1e-11`` relative).

    Forward: with ``g`` the density that spreads ``f_i`` uniformly over input bin ``i`` and ``Gamma`` the
    second antiderivative of ``g``, the band part of output bin ``[a1, a2]`` is
    ``int_{a1}^{a2} (G(t + b) - G(t - b)) dt = Gamma(a2 + b) - Gamma(a1 + b) - Gamma(a2 - b) +
    Gamma(a1 - b)``. Backward: with ``rho`` the step function equal to ``r_j`` on output bin ``j`` and ``Pi``
    its second antiderivative, the band part of input bin ``[u0, u1]`` is ``c (Pi(u1 + b) - Pi(u0 + b) -
    Pi(u1 - b) + Pi(u0 - b))``. Both add ``q`` times the bin width times the total. Columns are batched:
    ``forward`` maps ``(c, B)`` to ``(n_out, B)``, ``backward`` ``(n_out, B)`` to ``(c, B)`` (or vectors
    to vectors), the running sums going down the rows, B columns at a time."""

    def __init__(self, epsilon: float, domain_size: int, output_bins: int) -> None:
        b, p, q = sw_densities(epsilon)
        self.shape = (int(output_bins), int(domain_size))
        m, c = self.shape
        self._band, self._q = p - q, q
        self._out_width = (1.0 + 2.0 * b) / m
        in_edges, out_edges = np.arange(c + 1) / c, np.linspace(-b, 1.0 + b, m + 1)
        # each product evaluates a second antiderivative at fixed points (the other side's edges shifted
        # by +b and -b, one after the other): their bins, computed once
        self._fwd = (np.diff(in_edges), _at(in_edges, np.concatenate([out_edges + b, out_edges - b])))
        self._back = (np.diff(out_edges), _at(out_edges, np.concatenate([in_edges + b, in_edges - b])))

    def forward(self, f: np.ndarray) -> np.ndarray:
        """``M @ f`` for input-bin masses ``f`` (a vector or one column each)."""
        f = np.asarray(f, dtype=np.float64)
        cols = f.reshape(f.shape[0], -1)
        h = _second_antiderivative(cols * self.shape[1], *self._fwd)
        n = self.shape[0] + 1
        band = np.diff(h[:n], axis=0) - np.diff(h[n:], axis=0)
        out = self._q * self._out_width * cols.sum(axis=0) + self._band * band
        return out.reshape((self.shape[0], *f.shape[1:]))

    def backward(self, r: np.ndarray) -> np.ndarray:
        """``M.T @ r`` for ``r`` over the output bins (a vector or one column each)."""
        r = np.asarray(r, dtype=np.float64)
        cols = r.reshape(r.shape[0], -1)
        h = _second_antiderivative(cols, *self._back)
        n = self.shape[1] + 1
        band = (np.diff(h[:n], axis=0) - np.diff(h[n:], axis=0)) * self.shape[1]
        out = self._q * self._out_width * cols.sum(axis=0) + self._band * band
        return out.reshape((self.shape[1], *r.shape[1:]))


def _at(edges: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where the points ``x`` fall among ``edges``: each point's bin ``k`` (clipped to the first and last),
    its offset ``d`` inside the bin (0 before the first edge, at most the bin's width), ``d^2 / 2``, and its
    distance beyond the last edge (0 elsewhere); the offsets as columns, to scale rows."""
    width = np.diff(edges)
    k = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(width) - 1)
    dx = np.clip(x - edges[k], 0.0, None)
    inside = np.minimum(dx, width[k])
    beyond = (dx - inside) * (k == len(width) - 1)
    return k, inside[:, None], 0.5 * inside[:, None] ** 2, beyond[:, None]


def _second_antiderivative(weights: np.ndarray, width: np.ndarray,
                           points: tuple[np.ndarray, ...]) -> np.ndarray:
    """``H(x) = int_{e_0}^x int_{e_0}^t h`` at the :func:`_at` points, for each column of ``weights``:
    ``h`` is the step function of height ``weights[k]`` on bin ``k`` (widths ``width``), zero before the
    first edge and after the last (where the first antiderivative stays at its total)."""
    k, inside, half_sq, beyond = points
    w = width[:, None]
    mass = weights * w
    first = np.zeros((width.size + 1, weights.shape[1]))
    np.cumsum(mass, axis=0, out=first[1:])
    second = np.zeros_like(first)
    np.cumsum((first[:-1] + 0.5 * mass) * w, axis=0, out=second[1:])
    out = second[k]
    out += first[k] * inside
    out += weights[k] * half_sq
    out += first[-1] * beyond
    return out


def _smooth(f: np.ndarray) -> np.ndarray:
    """Binomial smoothing ``(1, 2, 1) / 4`` of the EMS step down the first axis (the bins; columns are
    distributions); at the two ends the kernel ``(2, 1) / 3``."""
    if f.shape[0] < 3:
        return f
    out = np.empty_like(f)
    out[1:-1] = 0.25 * f[:-2] + 0.5 * f[1:-1] + 0.25 * f[2:]
    out[0] = (2.0 * f[0] + f[1]) / 3.0
    out[-1] = (2.0 * f[-1] + f[-2]) / 3.0
    return out


#: BLAS threads used by the EM iterations. Their matrix products are small (at most a few hundred x a few
#: hundred, thousands of times in a row), so a multi-threaded BLAS only synchronizes: on a busy 2-core
#: machine MSW's finalize took 26.6 s with the default threads and 2.3 s with one.
EM_BLAS_THREADS = 1


#: what the EM multiplies by: a dense transition matrix or its :class:`SWOperator`
EMMatrix = np.ndarray | SWOperator
_Product = Callable[[np.ndarray], np.ndarray]


def _products(matrix: EMMatrix) -> tuple[_Product, _Product]:
    """``(F -> M @ F, R -> M.T @ R)`` of a dense matrix or an :class:`SWOperator`."""
    if isinstance(matrix, SWOperator):
        return matrix.forward, matrix.backward
    mat = np.asarray(matrix, dtype=np.float64)
    return (lambda f: mat @ f), (lambda r: mat.T @ r)


def _em(
    counts: np.ndarray,
    matrix: EMMatrix,
    *,
    smoothing: bool,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The EM(S) loop over the rows of ``counts`` at once (:func:`em_estimate_batch`), without the thread
    limit. The histograms are the columns of the working arrays. Per iteration two products: the E/M
    step's back-projection ``M.T @ (w / pred)`` and the prediction ``M @ F``, which serves both this step's
    log-likelihood and the next step's E step; a histogram that meets the stopping rule is frozen and
    dropped from the products."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.float64))
    forward, backward = _products(matrix)
    n_rows, c = counts.shape[0], matrix.shape[1]
    f = np.full((n_rows, c), 1.0 / c)
    iters = np.zeros(n_rows, dtype=np.int64)
    conv = np.zeros(n_rows, dtype=bool)
    total = counts.sum(axis=1)
    conv[total <= 0] = True
    active = np.flatnonzero(~conv)
    if active.size == 0:
        return f, iters, conv
    w = np.ascontiguousarray((counts[active] / total[active, None]).T)
    cur = np.full((c, active.size), 1.0 / c)
    pred = forward(cur)
    old_ll = np.full(active.size, -np.inf)
    for it in range(1, max_iter + 1):
        cur = cur * backward(w / pred)
        if smoothing:
            cur = _smooth(cur)
        cur /= cur.sum(axis=0)
        pred = forward(cur)
        ll = (w * np.log(pred)).sum(axis=0)
        done = ll - old_ll < tol
        old_ll = ll
        if done.any():
            f[active[done]] = cur[:, done].T
            iters[active[done]] = it
            conv[active[done]] = True
            keep = ~done
            active, old_ll = active[keep], old_ll[keep]
            cur, w, pred = cur[:, keep], w[:, keep], pred[:, keep]
            if active.size == 0:
                break
    if active.size:
        f[active] = cur.T
        iters[active] = max_iter
    return f, iters, conv


def em_estimate(
    counts: np.ndarray,
    matrix: EMMatrix,
    *,
    smoothing: bool = True,
    tol: float = 1e-6,
    max_iter: int = 10_000,
) -> tuple[np.ndarray, int, bool]:
    """EM (optionally EMS) for the input distribution given output-bin counts (SW paper, Section 5).

    One iteration: ``f_i <- f_i * sum_j (n_j / N) M[j, i] / (M f)_j`` (E and M steps together), then, for
    EMS, the binomial smoothing, then renormalisation. Stops when the log-likelihood per report
    ``sum_j (n_j / N) log (M f)_j`` improves by less than ``tol`` between iterations (EMS is not
    guaranteed monotone, so a decrease also stops it), or after ``max_iter`` iterations. Runs with at most
    :data:`EM_BLAS_THREADS` BLAS threads (``threadpoolctl``; the caller's limits are restored after).

    Args:
        counts: output-bin counts ``(n_out,)``.
        matrix: ``(n_out, c)`` transition matrix from :func:`transition_matrix`, or its
            :class:`SWOperator` (the same products without the matrix).
        smoothing: apply the EMS smoothing step.
        tol: convergence threshold on the per-report log-likelihood improvement.
        max_iter: iteration cap.

    Returns:
        ``(f, iterations, converged)`` with ``f`` the estimated distribution over the ``c`` input bins.
    """
    f, it, conv = em_estimate_batch(counts, matrix, smoothing=smoothing, tol=tol, max_iter=max_iter)
    return f[0], int(it[0]), bool(conv[0])


def em_estimate_batch(
    counts: np.ndarray,
    matrix: EMMatrix,
    *,
    smoothing: bool = True,
    tol: float = 1e-6,
    max_iter: int = 10_000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`em_estimate` for several histograms with the same matrix at once (rows of ``counts``).

    Each row follows the iteration of :func:`em_estimate` (the same loop: one row is a batch of one) and is
    frozen once it meets its stopping rule. Same BLAS thread limit as :func:`em_estimate`.

    Returns:
        ``(F, iterations, converged)``: ``F`` is ``(B, c)``, the others ``(B,)``.
    """
    with threadpool_limits(limits=EM_BLAS_THREADS, user_api="blas"):
        return _em(counts, matrix, smoothing=smoothing, tol=tol, max_iter=max_iter)


@dataclasses.dataclass
class SWAccumulator:
    """Fixed-size sufficient statistic: counts of reports per output bin."""

    counts: np.ndarray
    n: int = 0


@dataclasses.dataclass(frozen=True)
class SWEstimate:
    """Result of :meth:`SquareWave.estimate`.

    Attributes:
        distribution: estimated distribution over the ``c`` input values (non-negative, sums to 1).
        n: number of reports.
        iterations: EM iterations run.
        converged: whether the tolerance was reached before ``max_iter``.
    """

    distribution: np.ndarray
    n: int
    iterations: int
    converged: bool

    def range_sum(self, lo: int, hi: int) -> float:
        """Estimated fraction of users with value in ``[lo, hi]`` (inclusive)."""
        return float(self.distribution[lo : hi + 1].sum())


class SquareWave:
    """Square Wave over the integer domain ``[0, c)``: client encoder, accumulator and EM(S) estimator.

    Args:
        epsilon: privacy budget (> 0).
        domain_size: ``c``, number of integer input values.
        input_mode: ``"uniform"`` (default) or ``"center"``; see the module docstring.
        em_resolution: EM sub-bins per input value; default ``max(1, ceil(256 / c))``.
        output_bins: number of equal output bins over ``[-b, 1 + b]``; default
            ``ceil(R (1 + 2 b))`` with ``R = c * em_resolution``, so output bins are about as wide as
            the EM sub-bins.
        smoothing: EMS (True, default) or plain EM.
        tol: EM convergence threshold on the per-report log-likelihood improvement.
        max_iter: EM iteration cap.
    """

    name = "sw"

    def spec(self) -> dict[str, Any]:
        """What identifies this oracle in a task's ``resolved`` block: ``mechanism`` and ``domain_size``."""
        return {"mechanism": self.name, "domain_size": int(self.d)}
    report_fields = ("reals",)
    report_bits = 64

    def __init__(
        self,
        epsilon: float,
        domain_size: int,
        *,
        input_mode: InputMode | str = InputMode.UNIFORM,
        em_resolution: int | None = None,
        output_bins: int | None = None,
        smoothing: bool = True,
        tol: float = 1e-8,
        max_iter: int = 10_000,
    ) -> None:
        self.b, self.p, self.q = sw_densities(epsilon)
        self.epsilon = float(epsilon)
        if int(domain_size) != domain_size or domain_size < 1:
            raise ValueError(f"domain_size must be a positive integer, got {domain_size}")
        self.d = int(domain_size)
        if em_resolution is None:
            em_resolution = max(1, math.ceil(256 / self.d))
        if int(em_resolution) != em_resolution or em_resolution < 1:
            raise ValueError(f"em_resolution must be a positive integer, got {em_resolution}")
        self.em_resolution = int(em_resolution)
        if output_bins is None:
            output_bins = int(math.ceil(self.d * self.em_resolution * (1.0 + 2.0 * self.b)))
        if int(output_bins) < 1:
            raise ValueError(f"output_bins must be >= 1, got {output_bins}")
        self.output_bins = int(output_bins)
        self.input_mode = InputMode(input_mode)
        if not tol > 0:
            raise ValueError("tol must be > 0")
        if int(max_iter) < 1:
            raise ValueError("max_iter must be >= 1")
        self.smoothing = bool(smoothing)
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self._matrix: np.ndarray | None = None

    # -- client ---------------------------------------------------------------------------------------
    def to_unit(self, values: np.ndarray, *, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """Maps integer values in ``[0, c)`` to ``[0, 1]`` according to ``input_mode``."""
        values = np.asarray(values)
        if values.dtype.kind not in "iu":
            raise ValueError("Square Wave encodes integer values in [0, c)")
        if values.size and (values.min() < 0 or values.max() >= self.d):
            raise ValueError(f"values must lie in [0, {self.d})")
        if self.input_mode is InputMode.CENTER:
            return (values.astype(np.float64) + 0.5) / self.d
        rng = client_rng(rng)
        return (values.astype(np.float64) + rng.random(values.shape)) / self.d

    def encode(self, values: np.ndarray, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Perturbs integer values in ``[0, c)``; the reports use the ``reals`` field."""
        rng = client_rng(rng)
        return Reports(reals=perturb_unit(self.to_unit(values, rng=rng), self.epsilon, rng=rng))

    def encode_one(self, value: int, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Perturbs one user's value (the on-device call); a batch of one report."""
        return self.encode(np.asarray([value]), rng=rng)

    def describe(self) -> dict:
        """The mechanism's parameters as plain data."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "domain_size": self.d,
            "b": self.b,
            "p": self.p,
            "q": self.q,
            "input_mode": self.input_mode.value,
            "em_resolution": self.em_resolution,
            "output_bins": self.output_bins,
            "smoothing": self.smoothing,
            "report_bits": self.report_bits,
        }

    # -- server ---------------------------------------------------------------------------------------
    @property
    def edges(self) -> np.ndarray:
        """Output bin edges, ``output_bins + 1`` points from ``-b`` to ``1 + b``."""
        return np.linspace(-self.b, 1.0 + self.b, self.output_bins + 1)

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """Server-side checks: a report must carry a finite real in ``[-b, 1 + b]``.

        Returns:
            ``(ok_mask, reasons)`` as in the oracle API.
        """
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.reals is None:
            reasons[:] = Refusal("missing_field", "missing reals")
            return np.zeros(n, dtype=bool), reasons
        y = np.asarray(reports.reals, dtype=np.float64)
        slack = 1e-9
        ok = np.isfinite(y) & (y >= -self.b - slack) & (y <= 1.0 + self.b + slack)
        refuse(reasons, ~ok, "out_of_domain", f"real outside [-b, 1+b] = [{-self.b:.6g}, {1 + self.b:.6g}]")
        return ok, reasons

    @property
    def payload(self) -> PayloadSpec:
        """One double in ``[-b, 1 + b]`` per report (:mod:`ldp.payload`)."""
        return PayloadSpec((PayloadField("reals", "float64", low=-self.b, high=1.0 + self.b),))

    def bin_index(self, reals: np.ndarray) -> np.ndarray:
        """Output-bin index of each report value (values at the range ends go to the end bins)."""
        y = np.asarray(reals, dtype=np.float64)
        idx = np.floor((y + self.b) / (1.0 + 2.0 * self.b) * self.output_bins).astype(np.int64)
        return np.clip(idx, 0, self.output_bins - 1)

    def create_accumulator(self) -> SWAccumulator:
        """An empty accumulator (zero counts)."""
        return SWAccumulator(np.zeros(self.output_bins, dtype=np.int64), 0)

    def add(self, acc: SWAccumulator, reports: Reports) -> SWAccumulator:
        """Adds a batch of reports (mutates and returns ``acc``). Invalid reports raise ValueError."""
        if len(reports) == 0:
            return acc
        ok, _ = self.validate(reports)
        if not ok.all():
            raise ValueError(f"{int((~ok).sum())} Square Wave reports are invalid; validate() them first")
        acc.counts += np.bincount(self.bin_index(reports.reals), minlength=self.output_bins)
        acc.n += len(reports)
        return acc

    def merge(self, accs: Sequence[SWAccumulator]) -> SWAccumulator:
        """A new accumulator holding the sum of ``accs``."""
        out = self.create_accumulator()
        for a in accs:
            out.counts += a.counts
            out.n += a.n
        return out

    def matrix(self) -> np.ndarray:
        """The ``(output_bins, c * em_resolution)`` transition matrix of the EM sub-bins (cached)."""
        if self._matrix is None:
            mode = self.input_mode if self.em_resolution == 1 else InputMode.UNIFORM
            bins = self.d * self.em_resolution
            self._matrix = transition_matrix(self.epsilon, bins, self.output_bins, mode)
        return self._matrix

    def em_matrix(self) -> EMMatrix:
        """What the EM multiplies by: for uniform sub-bins (``input_mode="uniform"`` or
        ``em_resolution > 1``) the :class:`SWOperator` of :meth:`matrix`, the same products in linear
        time; else :meth:`matrix` itself."""
        if self.input_mode is InputMode.CENTER and self.em_resolution == 1:
            return self.matrix()
        return SWOperator(self.epsilon, self.d * self.em_resolution, self.output_bins)

    def estimate(self, acc: SWAccumulator) -> SWEstimate:
        """EM(S) estimate of the distribution over ``[0, c)`` from an accumulator."""
        f, it, conv = em_estimate(
            acc.counts, self.em_matrix(), smoothing=self.smoothing, tol=self.tol, max_iter=self.max_iter
        )
        dist = f.reshape(self.d, self.em_resolution).sum(axis=1)
        return SWEstimate(distribution=dist, n=int(acc.n), iterations=it, converged=conv)

    def estimate_many(self, accs: Sequence[SWAccumulator]) -> list[SWEstimate]:
        """EM(S) estimates of several accumulators of this mechanism in one batched run (same results as
        :meth:`estimate` up to float round-off)."""
        if not accs:
            return []
        f, it, conv = em_estimate_batch(
            np.array([a.counts for a in accs]), self.em_matrix(), smoothing=self.smoothing, tol=self.tol,
            max_iter=self.max_iter,
        )
        dist = f.reshape(len(accs), self.d, self.em_resolution).sum(axis=2)
        return [
            SWEstimate(distribution=dist[i], n=int(a.n), iterations=int(it[i]), converged=bool(conv[i]))
            for i, a in enumerate(accs)
        ]

    def config_key(self) -> tuple:
        """Parameters that determine the estimator (equal keys can share :meth:`estimate_many`)."""
        return (self.epsilon, self.d, self.em_resolution, self.output_bins, self.input_mode, self.smoothing,
                self.tol, self.max_iter)

    def estimate_reports(self, reports: Reports) -> SWEstimate:
        """Shortcut: accumulate one batch and estimate."""
        return self.estimate(self.add(self.create_accumulator(), reports))


#: input positions ``P = c K`` of :class:`SquareWaveGrid` at least (``K`` a multiple of ``em_resolution``):
#: positions far finer than the EM sub-bins, so the uniform placement inside a bin costs nothing measurable
GRID_POSITIONS = 2048


class SquareWaveGrid(SquareWave):
    """Square Wave's wire form: integer messages from the exact sliding-window sampler (module docstring).

    Same parameters and estimator as :class:`SquareWave`, plus ``positions`` (``K``, input positions per
    value; default the smallest multiple of ``em_resolution`` with ``c K >= GRID_POSITIONS``). A report
    carries its message ``m`` as an integer-valued double in ``reals`` (``m < 2^53``: exact); the
    validator refuses anything else (``reals_off_grid``, ``reals_out_of_range``). The output bins are
    ``output_bins`` (at most ``M``) runs of cells, bin ``(m * output_bins) // M``, and :meth:`matrix` is
    ``P(message in output bin | EM sub-bin)`` of the discrete distribution: for ``input_mode="uniform"``
    (or any mode with ``em_resolution > 1``) the average over the sub-bin's positions, for ``"center"``
    at resolution 1 the centre position's row.
    """

    def __init__(
        self,
        epsilon: float,
        domain_size: int,
        *,
        input_mode: InputMode | str = InputMode.UNIFORM,
        em_resolution: int | None = None,
        output_bins: int | None = None,
        smoothing: bool = True,
        tol: float = 1e-8,
        max_iter: int = 10_000,
        positions: int | None = None,
    ) -> None:
        from ldp.numeric.grid import exp_lower, sliding_window_for

        super().__init__(epsilon, domain_size, input_mode=input_mode, em_resolution=em_resolution,
                         output_bins=output_bins, smoothing=smoothing, tol=tol, max_iter=max_iter)
        res = self.em_resolution
        if positions is None:
            positions = res * max(1, math.ceil(GRID_POSITIONS / (self.d * res)))
        if int(positions) != positions or positions < 1 or positions % res:
            raise ValueError(f"positions must be a positive multiple of em_resolution {res}, got {positions}")
        self.positions = int(positions)
        n_pos = self.d * self.positions
        if n_pos < 2:
            raise ValueError("Square Wave's grid needs two input positions (domain_size * positions)")
        self.grid: SlidingWindow = sliding_window_for(
            exp_lower(self.epsilon), 2.0 * self.b * n_pos / (n_pos - 1), n_steps=n_pos - 1
        )
        self.output_bins = min(self.output_bins, self.grid.cells)

    # -- client ---------------------------------------------------------------------------------------
    def input_positions(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The input grid index ``j = x K + k`` of each integer value (``k`` uniform in ``[0, K)`` by an
        integer draw, or ``K // 2`` for ``input_mode="center"``)."""
        values = np.asarray(values)
        if values.dtype.kind not in "iu":
            raise ValueError("Square Wave encodes integer values in [0, c)")
        if values.size and (values.min() < 0 or values.max() >= self.d):
            raise ValueError(f"values must lie in [0, {self.d})")
        base = values.astype(np.int64).reshape(-1) * self.positions
        if self.input_mode is InputMode.CENTER or self.positions == 1:
            return base + self.positions // 2
        return base + rng.integers(0, self.positions, size=base.size, dtype=np.int64)

    def messages(self, values: np.ndarray, *, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """The integer messages (int64) of integer values in ``[0, c)``."""
        from ldp.numeric.grid import rng_uniform

        rng = client_rng(rng)
        return self.grid.sample(self.input_positions(values, rng), rng_uniform(rng))

    def encode(self, values: np.ndarray, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Randomizes integer values in ``[0, c)``: each message as an integer-valued double in ``reals``."""
        return Reports(reals=self.messages(values, rng=rng).astype(np.float64))

    # -- server ---------------------------------------------------------------------------------------
    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """A report must carry exactly one integer message in ``[0, M)``: a float array (else
        ``reals_not_float``), finite, whole and not ``-0.0`` (else ``reals_off_grid``), in range (else
        ``reals_out_of_range``); dead-letter code ``invalid_payload`` (``missing_field`` without ``reals``).

        Returns:
            ``(ok_mask, reasons)`` as in the oracle API.
        """
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.reals is None:
            reasons[:] = Refusal("missing_field", "missing reals")
            return np.zeros(n, dtype=bool), reasons
        y = np.asarray(reports.reals)
        if y.ndim != 1 or y.dtype.kind != "f":
            reasons[:] = Refusal("invalid_payload", "reals_not_float")
            return np.zeros(n, dtype=bool), reasons
        y = y.astype(np.float64)
        with np.errstate(invalid="ignore"):
            off = ~np.isfinite(y) | (np.floor(y) != y) | ((y == 0.0) & np.signbit(y))
            outside = ~off & ((y < 0) | (y > self.grid.cells - 1))
        refuse(reasons, off, "invalid_payload", "reals_off_grid")
        refuse(reasons, outside, "invalid_payload", "reals_out_of_range")
        return ~(off | outside), reasons

    @property
    def payload(self) -> PayloadSpec:
        """One integer-valued double in ``[0, M - 1]`` per report (:mod:`ldp.payload`)."""
        return PayloadSpec((PayloadField("reals", "float64", low=0.0, high=float(self.grid.cells - 1),
                                         outside="invalid_payload"),))

    def bin_index(self, reals: np.ndarray) -> np.ndarray:
        """Output bin of each message: ``(m * output_bins) // M`` (cells ``[ceil(i M / n), ceil((i + 1) M /
        n))`` form bin ``i``)."""
        m = np.asarray(reals, dtype=np.float64).astype(np.int64)
        return (m * self.output_bins) // self.grid.cells

    def bin_edges(self) -> np.ndarray:
        """The ``output_bins + 1`` cell edges of the output bins (int64)."""
        i = np.arange(self.output_bins + 1, dtype=np.int64)
        return -((-i * self.grid.cells) // self.output_bins)

    def matrix(self) -> np.ndarray:
        """The exact ``(output_bins, c * em_resolution)`` transition matrix of the discrete distribution
        (cached): ``P[bin i | position j] = (l |bin i| + (h - l) |bin i ∩ window(j)|) / S``, integer cell
        counts averaged over the sub-bin's positions, then divided once in floating point."""
        if self._matrix is None:
            g = self.grid
            edges = self.bin_edges()
            lo, hi = edges[:-1], edges[1:]
            subs = self.d * self.em_resolution
            per_sub = self.positions // self.em_resolution
            centre = self.input_mode is InputMode.CENTER and self.em_resolution == 1
            mat = np.empty((self.output_bins, subs))
            size = (hi - lo).astype(np.float64)
            chunk = max(1, (1 << 22) // max(1, self.output_bins * (1 if centre else per_sub)))
            for s0 in range(0, subs, chunk):
                s1 = min(subs, s0 + chunk)
                if centre:
                    pos = np.arange(s0, s1, dtype=np.int64) * self.positions + self.positions // 2
                else:
                    pos = np.arange(s0 * per_sub, s1 * per_sub, dtype=np.int64)
                start = pos[:, None] * g.step
                overlap = np.minimum(hi[None, :], start + g.width) - np.maximum(lo[None, :], start)
                overlap = np.clip(overlap, 0, None)
                if not centre:
                    overlap = overlap.reshape(s1 - s0, per_sub, self.output_bins).sum(axis=1)
                    mean_overlap = overlap / per_sub
                else:
                    mean_overlap = overlap.astype(np.float64)
                mat[:, s0:s1] = ((g.low * size[None, :] + (g.high - g.low) * mean_overlap) / g.total).T
            self._matrix = mat
        return self._matrix

    def em_matrix(self) -> np.ndarray:
        """The grid's exact discrete :meth:`matrix` (no closed-form products)."""
        return self.matrix()

    def describe(self) -> dict:
        out = super().describe()
        g = self.grid
        out.update(positions=self.positions, grid={"n_steps": g.n_steps, "step": g.step, "width": g.width,
                                                   "high": g.high, "low": g.low, "cells": g.cells})
        return out

    def config_key(self) -> tuple:
        return (*super().config_key(), self.positions)
