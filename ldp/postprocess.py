"""Post-processing of LDP frequency estimates for consistency.

Implements every method of Wang, Lopuhaä-Zwakenberg, Li, Škorić and Li, *Locally Differentially Private
Frequency Estimation with Consistency* (NDSS 2020):

=============  ==========================================================  ===========  ==========
method         what it does                                                 non-neg.     sums to 1
=============  ==========================================================  ===========  ==========
``base``       the unbiased oracle estimate, unchanged                      no           no
``base-pos``   clip negative estimates to 0                                 yes          no
``post-pos``   clip each *query answer* to 0                                yes          no
``base-cut``   zero every estimate below T = Phi^-1(1 - alpha/d) sigma      yes          no
               (Eq. 8, alpha = 2)
``norm``       add one constant so the sum is 1                             no           yes
``norm-mul``   clip negatives, then scale to sum 1                          yes          yes
``norm-sub``   max(f + delta, 0) with the delta that makes the sum 1        yes          yes
``norm-cut``   keep the largest estimates while their sum stays <= 1        yes          <= 1
``cls``        constrained least squares, KKT active set (Appendix A)       yes          yes
``mle-apx``    approximate constrained MLE (Eq. 10-11, Appendix B)          yes          yes
``power``      posterior mean under a fitted power-law prior (Eq. 12)       yes          no
``power-ns``   Power followed by Norm-Sub                                   yes          yes
=============  ==========================================================  ===========  ==========

Every function takes the vector of unbiased estimates ``f~`` (shape ``(d,)``, frequencies, i.e. the
``FrequencyEstimate.frequencies`` of :mod:`ldp.oracles`) and returns a new ``float64`` array; inputs are never
modified. ``variance`` is the per-value variance of ``f~`` without the ``f_v`` term (paper Eq. 6; the oracle's
``FrequencyEstimate.variance``), a scalar or a ``(d,)`` array.

All methods preserve the (weak) order of the estimates, as the paper notes after Table I: if
``f~_a <= f~_b`` then ``f'_a <= f'_b``. Ties are handled deterministically (tied inputs give tied outputs).

The paper's parts are cited by name and equation number (the available text has no section numbers).
Use :func:`postprocess` to dispatch by name and :func:`recommend` for the paper's guideline.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

__all__ = [
    "METHODS_NEEDING_VARIANCE",
    "Method",
    "answer_set_queries",
    "base",
    "base_cut",
    "base_cut_threshold",
    "base_pos",
    "cls",
    "fit_power_law",
    "mle_apx",
    "norm",
    "norm_cut",
    "norm_mul",
    "norm_sub",
    "post_pos",
    "postprocess",
    "power",
    "power_ns",
    "recommend",
]


class Method(str, enum.Enum):
    """Names of the post-processing methods (the paper's names, lower-case)."""

    BASE = "base"
    BASE_POS = "base-pos"
    POST_POS = "post-pos"
    BASE_CUT = "base-cut"
    NORM = "norm"
    NORM_MUL = "norm-mul"
    NORM_SUB = "norm-sub"
    NORM_CUT = "norm-cut"
    CLS = "cls"
    MLE_APX = "mle-apx"
    POWER = "power"
    POWER_NS = "power-ns"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


#: Methods for which :func:`postprocess` requires ``variance``.
METHODS_NEEDING_VARIANCE = frozenset({Method.BASE_CUT, Method.POWER, Method.POWER_NS})


# ----------------------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------------------


def _as_estimates(estimates: np.ndarray | Sequence[float]) -> np.ndarray:
    f = np.array(estimates, dtype=np.float64, copy=True)
    if f.ndim != 1:
        raise ValueError(f"estimates must be a 1-D array of per-value frequencies, got shape {f.shape}")
    if f.size < 1:
        raise ValueError("estimates must contain at least one value")
    if not np.all(np.isfinite(f)):
        raise ValueError("estimates must be finite (no NaN or inf)")
    return f


def _as_std(variance: float | np.ndarray | None, d: int, method: str) -> np.ndarray:
    """Return the per-value standard deviation as a ``(d,)`` array, validating ``variance``."""
    if variance is None:
        raise ValueError(
            f"method {method!r} needs the oracle's per-value variance (e.g. FrequencyEstimate.variance); "
            "pass variance=..."
        )
    var = np.asarray(variance, dtype=np.float64)
    if var.ndim == 0:
        var = np.full(d, float(var))
    elif var.shape != (d,):
        raise ValueError(f"variance must be a scalar or have shape ({d},), got shape {var.shape}")
    if not np.all(np.isfinite(var)) or np.any(var <= 0):
        raise ValueError("variance must be finite and strictly positive")
    return np.sqrt(var)


# ----------------------------------------------------------------------------------------------------------
# enforcing non-negativity only (paper: "enforcing non-negativity")
# ----------------------------------------------------------------------------------------------------------


def base(estimates: np.ndarray) -> np.ndarray:
    """Base: the oracle's unbiased estimates unchanged, ``f~_v = (c_v/n - q)/(p - q)`` (Eq. 3)."""
    return _as_estimates(estimates)


def base_pos(estimates: np.ndarray) -> np.ndarray:
    """Base-Pos: convert every negative estimate to 0 (paper: "enforcing non-negativity").

    Each single-value answer is at least as accurate as Base, but the method adds a positive bias that
    accumulates in set queries.
    """
    return np.maximum(_as_estimates(estimates), 0.0)


def answer_set_queries(
    values: np.ndarray, subsets: np.ndarray | Sequence[Sequence[int]], *, clip: bool = False
) -> np.ndarray:
    """Answer subset-sum queries ``f_A = sum_{v in A} f'_v`` from (post-processed) per-value estimates.

    Args:
        values: ``(d,)`` per-value frequencies (the output of any method).
        subsets: either a boolean/0-1 matrix of shape ``(m, d)`` (row ``i`` marks the members of query ``i``)
            or a sequence of ``m`` index sequences.
        clip: apply Post-Pos (paper: "enforcing non-negativity"): replace each negative *answer* by 0.

    Returns:
        ``(m,)`` array of answers.
    """
    f = _as_estimates(values)
    d = f.size
    if isinstance(subsets, np.ndarray) and subsets.ndim == 2:
        if subsets.shape[1] != d:
            raise ValueError(f"query mask must have {d} columns, got shape {subsets.shape}")
        mask = subsets.astype(np.float64)
    else:
        rows = list(subsets)
        mask = np.zeros((len(rows), d), dtype=np.float64)
        for i, idx in enumerate(rows):
            idx = np.asarray(idx, dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= d):
                raise ValueError(f"query {i} has an index outside [0, {d})")
            mask[i, idx] = 1.0
    answers = mask @ f
    return np.maximum(answers, 0.0) if clip else answers


def post_pos(
    estimates: np.ndarray, subsets: np.ndarray | Sequence[Sequence[int]] | None = None
) -> np.ndarray:
    """Post-Pos: keep Base, clip each query *answer* at 0 (paper: "enforcing non-negativity").

    Post-Pos does not post-process the distribution. With ``subsets=None`` the queries are the ``d`` single
    values, for which Post-Pos equals Base-Pos (as the paper notes); with ``subsets`` it returns the clipped
    answers of those set queries (see :func:`answer_set_queries`). Answers are not additive: the answer for
    ``A u B`` may differ from the sum of the answers for disjoint ``A`` and ``B``.
    """
    f = _as_estimates(estimates)
    if subsets is None:
        return np.maximum(f, 0.0)
    return answer_set_queries(f, subsets, clip=True)


def base_cut_threshold(d: int, variance: float | np.ndarray, *, alpha: float = 2.0) -> float | np.ndarray:
    """Threshold of Base-Cut, Eq. (8): ``T = Phi^{-1}(1 - alpha/d) * sigma``.

    Args:
        d: domain size.
        variance: per-value variance of the estimates without the ``f_v`` term (Eq. 6); scalar or ``(d,)``.
        alpha: expected number of false positives among values of (near) zero frequency; the paper
            recommends ``alpha = 2``. Must be positive; when ``alpha/d >= 1/2`` the threshold is
            0 (Base-Cut then equals Base-Pos).

    Returns:
        ``T`` (scalar if ``variance`` is a scalar, else a ``(d,)`` array).
    """
    if not (isinstance(d, (int, np.integer)) and d >= 1):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if not (np.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"alpha must be a positive number, got {alpha!r}")
    # Tiny domains (alpha/d >= 1/2, e.g. d <= 4 with alpha = 2) would give T <= 0 (or -inf); T is floored at
    # 0 so Base-Cut always removes negative estimates, as the paper states it does (it then equals Base-Pos).
    z = max(NormalDist().inv_cdf(1.0 - alpha / d), 0.0) if alpha / d < 0.5 else 0.0
    if np.ndim(variance) == 0:
        return z * float(_as_std(variance, d, "base-cut")[0])
    return z * _as_std(variance, d, "base-cut")


def base_cut(estimates: np.ndarray, variance: float | np.ndarray, *, alpha: float = 2.0) -> np.ndarray:
    """Base-Cut: set every estimate strictly below ``T`` (Eq. 8) to 0, keep the others.

    Estimates above ``T`` are unlikely (probability ``<= alpha/d`` each) to come from a zero-frequency value.
    The paper's recommended method for single-value queries (its closing guideline).
    """
    f = _as_estimates(estimates)
    t = base_cut_threshold(f.size, variance, alpha=alpha)
    return np.where(f < t, 0.0, f)


# ----------------------------------------------------------------------------------------------------------
# enforcing sum-to-one (paper: normalization, CLS and MLE)
# ----------------------------------------------------------------------------------------------------------


def norm(estimates: np.ndarray) -> np.ndarray:
    """Norm: add the same ``delta = (1 - sum f~)/d`` to every estimate so that they sum to 1.

    Unbiased; does not enforce non-negativity. A no-op for oracles whose estimates already sum to 1 (GRR).
    """
    f = _as_estimates(estimates)
    return f + (1.0 - f.sum()) / f.size


def norm_mul(estimates: np.ndarray) -> np.ndarray:
    """Norm-Mul: clip negatives to 0, then multiply by ``gamma`` so the sum is 1.

    Solves ``sum_v max(gamma f~_v, 0) = 1``. When no estimate is positive the equation has no solution; the
    function then returns the uniform distribution ``1/d`` (a deterministic, documented fallback).
    """
    f = np.maximum(_as_estimates(estimates), 0.0)
    total = f.sum()
    if total <= 0.0:
        return np.full(f.size, 1.0 / f.size)
    return f / total


def _norm_sub_delta(f: np.ndarray, total: float = 1.0) -> float:
    """The ``delta`` of Norm-Sub: ``sum_v max(f_v + delta, 0) = total``, by sorting (O(d log d))."""
    u = np.sort(f)[::-1]
    m = np.arange(1, u.size + 1)
    deltas = (total - np.cumsum(u)) / m
    # KKT (Appendix A): D1 is the top-rho prefix, rho = largest m with u_m + delta_m > 0. The condition holds
    # for m = 1 (u_1 + total - u_1 = total > 0) and, for the sorted vector, exactly on a prefix.
    rho = int(np.flatnonzero(u + deltas > 0.0)[-1])
    return float(deltas[rho])


def norm_sub(estimates: np.ndarray) -> np.ndarray:
    """Norm-Sub: ``f'_v = max(f~_v + delta, 0)`` with ``delta`` such that ``sum_v f'_v = 1``.

    Computed by sorting (O(d log d)): with ``u`` sorted decreasingly and ``S_m`` its prefix sums,
    ``delta = (1 - S_rho)/rho`` where ``rho`` is the largest ``m`` with ``u_m + (1 - S_m)/m > 0``. This is the
    Euclidean projection onto the probability simplex, i.e. the solution of CLS (Appendix A),
    and the paper's recommended consistency step (also used after Power in PowerNS).
    """
    f = _as_estimates(estimates)
    return np.maximum(f + _norm_sub_delta(f), 0.0)


def norm_cut(estimates: np.ndarray) -> np.ndarray:
    """Norm-Cut: zero the negative and small estimates so that the total does not exceed 1.

    Exactly the paper's definition: if ``sum_v max(f~_v, 0) <= 1`` only the negative estimates become 0.
    Otherwise let ``theta`` be the smallest (positive) threshold with ``sum_{v: f~_v >= theta} f~_v <= 1``;
    estimates ``>= theta`` are kept unchanged and the others become 0. Computed by sorting: the kept set is
    the longest prefix of the decreasingly sorted estimates, ending at a boundary between distinct values
    (tied estimates are kept or cut together), whose sum is ``<= 1``. The result is non-negative and sums to
    at most 1 (typically slightly less). If the largest estimate alone exceeds 1, everything is cut to 0.

    Note: no rescaling is applied afterwards, as in the paper's text.
    """
    f = _as_estimates(estimates)
    pos = np.maximum(f, 0.0)
    if pos.sum() <= 1.0:
        return pos
    u = np.sort(f)[::-1]
    csum = np.cumsum(u)
    # a prefix of length m is admissible iff it ends between distinct values and its sum is <= 1
    boundary = np.ones(u.size, dtype=bool)
    boundary[:-1] = u[:-1] > u[1:]
    ok = boundary & (csum <= 1.0) & (u > 0.0)
    if not ok.any():
        return np.zeros_like(f)
    theta = u[int(np.flatnonzero(ok)[-1])]
    return np.where(f >= theta, f, 0.0)


def cls(estimates: np.ndarray, *, max_iter: int | None = None) -> np.ndarray:
    """CLS: ``argmin ||f' - f~||_2`` s.t. ``f' >= 0``, ``sum f' = 1`` by the KKT active set.

    Follows the paper's Appendix A solution literally: start with ``D1 = D``; repeatedly set
    ``f'_v = f~_v - (sum_{D1} f~ - 1)/|D1|`` on ``D1`` and move the values with ``f'_v <= 0`` to ``D0``
    (``f'_v = 0``) until no value leaves ``D1`` (at most ``d`` passes, usually a handful). This is an
    independent algorithm from the sorting in :func:`norm_sub`; the two give the same answer (the paper:
    "Norm-Sub is the solution to CLS"), which the tests check.
    """
    f = _as_estimates(estimates)
    active = np.ones(f.size, dtype=bool)
    for _ in range(max_iter or f.size):
        delta = (1.0 - f[active].sum()) / active.sum()
        new_active = active & (f + delta > 0.0)
        if not new_active.any():  # cannot happen in exact arithmetic; keep the largest values
            new_active = active & (f == f[active].max())
        if np.array_equal(new_active, active):
            break
        active = new_active
    delta = (1.0 - f[active].sum()) / active.sum()
    return np.where(active, f + delta, 0.0)


def mle_apx(estimates: np.ndarray, *, p: float, q: float) -> np.ndarray:
    """MLE-Apx: approximate constrained maximum-likelihood estimate (Eq. 10-11, Appendix B).

    Model (Eq. 5/10): ``f~_v ~ N(f'_v, sigma'_v^2)`` with the *general* variance of Eq. (4),
    ``sigma'_v^2 ∝ a + b f'_v``, ``a = q(1-q)``, ``b = (p-q)(1-p-q)``. The KKT conditions with the variance
    treated as fixed at the solution give, on the support ``D1`` (``f'_v = 0`` on ``D0``),

        ``f'_v = (g f~_v - a x) / (g + b x)``,  ``x = g (sum_{D1} f~_v - 1) / (|D1| a + b)``,  ``g = p - q``,

    i.e. ``f'_v = gamma f~_v + delta`` (the paper's Eq. 11 with ``x`` of the opposite sign), a hybrid of
    Norm-Mul and Norm-Sub. ``D1`` is the largest top prefix of the sorted estimates whose smallest member
    stays positive (found by sorting). With ``b = 0`` (``p + q = 1``, e.g. GRR on ``d = 2``) it is exactly
    Norm-Sub; for OLH ``gamma ~ 1`` and the two are very close, as the paper reports.

    Args:
        estimates: ``(d,)`` unbiased estimates.
        p, q: the oracle's support probabilities (``oracle.p``, ``oracle.q``), ``0 <= q < p <= 1``.
    """
    f = _as_estimates(estimates)
    if not (0.0 <= q < p <= 1.0):
        raise ValueError(f"need 0 <= q < p <= 1, got p={p!r}, q={q!r}")
    g = p - q
    a = q * (1.0 - q)
    b = g * (1.0 - p - q)
    u = np.sort(f)[::-1]
    m = np.arange(1, u.size + 1, dtype=np.float64)
    denom_x = m * a + b
    with np.errstate(divide="ignore", invalid="ignore"):
        x = g * (np.cumsum(u) - 1.0) / denom_x
        den = g + b * x
        smallest = (g * u - a * x) / den
    boundary = np.ones(u.size, dtype=bool)  # D1 takes tied estimates together
    boundary[:-1] = u[:-1] > u[1:]
    ok = boundary & (denom_x > 0) & (den > 0) & (smallest > 0.0)
    if not ok.any():
        # degenerate parameters (a = 0 and b <= 0 for every prefix): fall back to Norm-Sub, the b -> 0 limit
        return norm_sub(f)
    k = int(np.flatnonzero(ok)[-1])
    theta = u[k]
    out = (g * f - a * x[k]) / den[k]
    return np.where(f >= theta, np.maximum(out, 0.0), 0.0)


# ----------------------------------------------------------------------------------------------------------
# Power and PowerNS (Eq. 12)
# ----------------------------------------------------------------------------------------------------------


def _power_cells(x_min: float, x_max: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Cell edges on ``[x_min, x_max]``: geometric (ratio 1.1) up to ``4 * step``, then ``step`` wide.

    Returns the edges and a representative point per cell (geometric mean / midpoint) at which the Gaussian
    likelihood is evaluated; cells are narrow compared with ``sigma = 4 * step`` everywhere.
    """
    x_max = max(x_max, 2.0 * x_min)
    geo_end = min(4.0 * step, x_max)
    n_geo = max(1, int(np.ceil(np.log(geo_end / x_min) / np.log(1.1)))) if geo_end > x_min else 0
    geo = np.geomspace(x_min, geo_end, n_geo + 1) if n_geo else np.array([x_min])
    if x_max > geo_end:
        n_lin = max(1, int(np.ceil((x_max - geo_end) / step)))
        edges = np.concatenate([geo, np.linspace(geo_end, x_max, n_lin + 1)[1:]])
    else:
        edges = geo
    reps = np.where(edges[1:] <= geo_end, np.sqrt(edges[:-1] * edges[1:]), 0.5 * (edges[:-1] + edges[1:]))
    return edges, reps


def _power_primitive(edges: np.ndarray, k: float) -> np.ndarray:
    """``int x^(-k) dx`` evaluated at the edges (an antiderivative, up to a constant)."""
    if abs(k - 1.0) < 1e-9:
        return np.log(edges)
    return edges ** (1.0 - k) / (1.0 - k)


def _power_masses(edges: np.ndarray, exponent: float) -> np.ndarray:
    """Prior mass of each cell for the density ``∝ x^(-exponent)`` on ``[edges[0], edges[-1]]``."""
    mass = np.abs(np.diff(_power_primitive(edges, exponent)))
    total = mass.sum()
    return mass / total if total > 0 else np.full(mass.size, 1.0 / mass.size)


def _power_first_moments(edges: np.ndarray, exponent: float) -> np.ndarray:
    """``int_cell x Pr[x] dx`` for each cell (normalised like :func:`_power_masses`)."""
    total = np.abs(np.diff(_power_primitive(edges, exponent))).sum()
    mom = np.abs(np.diff(_power_primitive(edges, exponent - 1.0)))
    return mom / total


#: float64 kernel entries materialised at once (64 MiB); larger kernels are applied in row chunks
_KERNEL_CELLS = 1 << 23
#: tabulation step of the posterior under a constant sigma, in units of sigma
_GRID_STEP = 1.0 / 64


class _PowerKernel:
    """The Gaussian likelihood ``N(t; x_j, sigma)`` of points ``t`` against the prior cells ``x_j``, rows
    scaled to max 1 (a per-row factor: it cancels in the posterior mean and only shifts the marginal
    log-likelihood by a constant in the exponent ``s``).

    With one ``sigma`` for every value, every quantity Power needs (posterior mean, marginal likelihood)
    is a function of the estimate alone, so it is tabulated on the lattice ``min f + i h``,
    ``h = sigma / 64``, at the lattice points next to some estimate only (at most ``4 d``, far fewer when
    estimates cluster, as they do near 0), and read at each estimate by cubic Lagrange interpolation
    through its four surrounding lattice points (error O(h^4)). Work is O(d + points x cells) and memory
    O(d + min(points, budget / cells) x cells), instead of a dense ``d x cells`` kernel. With per-value
    sigmas (or when the lattice would need as many points as there are estimates) the points are the
    estimates themselves. The kernel is applied in row chunks of at most :data:`_KERNEL_CELLS` entries.
    """

    def __init__(self, f: np.ndarray, sigma: np.ndarray, reps: np.ndarray) -> None:
        self.f = f
        self.reps = reps
        self.grid = False
        if np.all(sigma == sigma[0]) and f.size > 4:
            lo, h = float(f.min()), _GRID_STEP * float(sigma[0])
            size = max(4, int(np.ceil((float(f.max()) - lo) / h)) + 2)
            pos = (f - lo) / h
            base = np.clip(np.floor(pos).astype(np.int64), 1, size - 3)
            need = np.unique(base[:, None] + np.arange(-1, 3)[None, :])
            if need.size < f.size:
                self.grid = True
                self.points = lo + need * h
                self._where = np.searchsorted(need, base[:, None] + np.arange(-1, 3)[None, :])  # (d, 4)
                t = pos - base
                self._weights = np.stack(
                    [-t * (t - 1) * (t - 2) / 6, (t + 1) * (t - 1) * (t - 2) / 2,
                     -(t + 1) * t * (t - 2) / 2, (t + 1) * t * (t - 1) / 6], axis=1)
        if not self.grid:
            self.points = f
            self.sigma = sigma
        else:
            self.sigma = np.full(self.points.size, float(sigma[0]))
        self.step = max(1, _KERNEL_CELLS // max(1, reps.size))
        self._cache = self._rows(0, self.points.size) if self.points.size <= self.step else None

    def _rows(self, a: int, b: int) -> np.ndarray:
        z = (self.points[a:b, None] - self.reps[None, :]) / self.sigma[a:b, None]
        logk = -0.5 * z * z
        logk -= logk.max(axis=1, keepdims=True)
        return np.exp(logk)

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """``K @ vectors`` for ``vectors`` of shape ``(cells, c)``: ``(points, c)``."""
        if self._cache is not None:
            return self._cache @ vectors
        out = np.empty((self.points.size, vectors.shape[1]))
        for a in range(0, self.points.size, self.step):
            b = min(a + self.step, self.points.size)
            out[a:b] = self._rows(a, b) @ vectors
        return out

    def at_estimates(self, y: np.ndarray) -> np.ndarray:
        """Values tabulated at the points, read at every estimate: ``(d,)``."""
        if not self.grid:
            return y
        return np.einsum("dk,dk->d", self._weights, y[self._where])


def _x_min(n: int | None, sigma: np.ndarray) -> float:
    if n is not None and (int(n) != n or n < 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return 1.0 / n if n else float(sigma.min()) / 1000.0


def _power_setup(
    f: np.ndarray, sigma: np.ndarray, x_min: float
) -> tuple[np.ndarray, np.ndarray, _PowerKernel]:
    x_max = min(1.0, float(f.max() + 8.0 * sigma.max()))
    edges, reps = _power_cells(x_min, x_max, float(sigma.min()) / 4.0)
    return edges, reps, _PowerKernel(f, sigma, reps)


def _fit_exponent(
    f: np.ndarray,
    x_min: float,
    edges: np.ndarray,
    kern: _PowerKernel,
    fit: str,
    bounds: tuple[float, float],
) -> float:
    lo, hi = bounds
    if not (0.0 <= lo < hi):
        raise ValueError(f"bounds must satisfy 0 <= lo < hi, got {bounds!r}")
    if fit == "moment":
        target = float(np.clip(f.mean(), x_min * 1.0001, 0.5))
        grid = np.geomspace(x_min, 1.0, 2001)
        mid_pts = np.sqrt(grid[:-1] * grid[1:])
        # the prior mean decreases monotonically in s: bisection
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            if float(_power_masses(grid, mid) @ mid_pts) > target:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)
    if fit != "mle":
        raise ValueError(f"fit must be 'mle' or 'moment', got {fit!r}")

    def neg_loglik(s: float) -> float:
        marg = kern.apply(_power_masses(edges, s)[:, None])[:, 0]
        return -float(np.sum(kern.at_estimates(np.log(np.maximum(marg, 1e-300)))))

    from scipy.optimize import minimize_scalar  # ~0.8 s to import: only the fits that need it pay

    res = minimize_scalar(neg_loglik, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3})
    return float(res.x)


def fit_power_law(
    estimates: np.ndarray,
    variance: float | np.ndarray,
    *,
    n: int | None = None,
    fit: str = "mle",
    bounds: tuple[float, float] = (0.05, 6.0),
) -> float:
    """Fit the exponent ``s`` of the power-law prior ``Pr[x] ∝ x^(-s)`` on ``[x_min, 1]``.

    ``x_min = 1/n`` (the smallest non-zero frequency among ``n`` users); without ``n`` it is
    ``sigma_min/1000``. The paper only says the prior's parameters are "fitted from the estimation f~".

    Args:
        estimates: ``(d,)`` unbiased estimates.
        variance: the oracle's per-value variance (Eq. 6), scalar or ``(d,)``.
        n: number of reports.
        fit: ``"mle"`` (default) maximises the marginal likelihood of the estimates,
            ``prod_v int Pr[x] N(f~_v; x, sigma_v) dx`` (empirical Bayes); ``"moment"`` matches the prior
            mean to the mean of the estimates (the approach of the authors' published code; since the
            estimates sum to about 1 it depends on ``n`` and ``d`` only, not on the shape of the data).
        bounds: search interval for ``s``.
    """
    f = _as_estimates(estimates)
    sigma = _as_std(variance, f.size, "power")
    x_min = _x_min(n, sigma)
    edges, _, kern = _power_setup(f, sigma, x_min)
    return _fit_exponent(f, x_min, edges, kern, fit, bounds)


def power(
    estimates: np.ndarray,
    variance: float | np.ndarray,
    *,
    n: int | None = None,
    exponent: float | None = None,
    fit: str = "mle",
) -> np.ndarray:
    """Power: posterior mean of each frequency under a fitted power-law prior (Eq. 12).

    For each value, ``f'_v = E[x | f~_v] = int x Pr[x] phi((f~_v - x)/sigma_v) dx / int Pr[x]
    phi((f~_v - x)/sigma_v) dx`` over the prior's support ``[x_min, 1]`` (``x_min = 1/n``), with
    ``Pr[x] ∝ x^(-s)`` (``s`` fitted by :func:`fit_power_law` unless ``exponent`` is given) and ``sigma_v``
    the oracle's standard deviation (Eq. 6/7). This minimises the expected squared error of each value
    separately (the method of Jia and Gong, the paper's [17]); Eq. (12) is the posterior mean, not the MAP.
    The integrals are evaluated on cells that are geometric (ratio 1.1) below ``sigma`` and ``sigma/4`` wide
    above: the prior's mass and first moment are integrated exactly per cell and the Gaussian, which varies
    little within a cell, is taken at the cell's centre. With one sigma for all values (the oracles' Eq. 6
    variance) the posterior mean is a function of the estimate alone: it is tabulated on a lattice spaced
    ``sigma / 64`` next to the estimates and read by cubic interpolation, so memory is
    O(d + lattice x cells) in bounded chunks (see :class:`_PowerKernel`; the interpolation error against
    the dense evaluation is about 1e-7 sigma, below 1e-6 sigma in the tests).

    The output is non-negative and order-preserving but does not sum to 1; see :func:`power_ns`.
    """
    f = _as_estimates(estimates)
    sigma = _as_std(variance, f.size, "power")
    x_min = _x_min(n, sigma)
    edges, reps, kern = _power_setup(f, sigma, x_min)
    if exponent is None:
        s = _fit_exponent(f, x_min, edges, kern, fit, (0.05, 6.0))
    else:
        s = float(exponent)
        if not np.isfinite(s):
            raise ValueError(f"exponent must be finite, got {exponent!r}")
    nd = kern.apply(np.stack([_power_first_moments(edges, s), _power_masses(edges, s)], axis=1))
    post = nd[:, 0] / np.maximum(nd[:, 1], 1e-300)
    return np.clip(kern.at_estimates(post), 0.0, 1.0)


def power_ns(
    estimates: np.ndarray,
    variance: float | np.ndarray,
    *,
    n: int | None = None,
    exponent: float | None = None,
    fit: str = "mle",
) -> np.ndarray:
    """PowerNS: Power (Eq. 12) then Norm-Sub, giving consistent estimates.

    The paper's choice for set-value queries (its closing guideline).
    """
    return norm_sub(power(estimates, variance, n=n, exponent=exponent, fit=fit))


# ----------------------------------------------------------------------------------------------------------
# dispatcher and guideline
# ----------------------------------------------------------------------------------------------------------


def _as_method(method: Method | str) -> Method:
    if isinstance(method, Method):
        return method
    if isinstance(method, str):
        key = method.strip().lower().replace("_", "-")
        try:
            return Method(key)
        except ValueError:
            pass
    valid = ", ".join(m.value for m in Method)
    raise ValueError(f"unknown post-processing method {method!r}; valid: {valid}")


def postprocess(
    estimates: np.ndarray,
    method: Method | str,
    *,
    variance: float | np.ndarray | None = None,
    n: int | None = None,
    **options: object,
) -> np.ndarray:
    """Apply one post-processing method by name.

    Args:
        estimates: ``(d,)`` unbiased frequency estimates (``FrequencyEstimate.frequencies``).
        method: a :class:`Method` or its string value (``"norm-sub"``; ``"norm_sub"`` is accepted too).
        variance: per-value variance without the ``f_v`` term (``FrequencyEstimate.variance``); required by
            ``base-cut``, ``power`` and ``power-ns``.
        n: number of reports; used by ``power``/``power-ns`` for the prior's lower end ``1/n``.
        **options: method-specific keywords: ``alpha`` (base-cut, default 2), ``p`` and ``q`` (mle-apx,
            required: ``oracle.p``, ``oracle.q``), ``exponent`` and ``fit`` (power, power-ns), ``subsets``
            (post-pos: answer these set queries instead of the single values).

    Returns:
        A new ``float64`` array (for ``post-pos`` with ``subsets``: one clipped answer per query).

    Raises:
        ValueError: unknown method, missing ``variance``/``p``/``q``, unexpected options or bad inputs.
    """
    m = _as_method(method)
    _check_options(m, options, variance)
    plain = _PLAIN_METHODS.get(m)
    if plain is not None:
        return plain(estimates)
    return _apply_with_options(m, estimates, variance, n, options)


#: Methods that take the estimates alone.
_PLAIN_METHODS: dict[Method, Callable[[np.ndarray], np.ndarray]] = {
    Method.BASE: base,
    Method.BASE_POS: base_pos,
    Method.NORM: norm,
    Method.NORM_MUL: norm_mul,
    Method.NORM_SUB: norm_sub,
    Method.NORM_CUT: norm_cut,
    Method.CLS: cls,
}

#: The keyword options each method accepts (none for the others).
_METHOD_OPTIONS: dict[Method, set[str]] = {
    Method.BASE_CUT: {"alpha"},
    Method.MLE_APX: {"p", "q"},
    Method.POWER: {"exponent", "fit"},
    Method.POWER_NS: {"exponent", "fit"},
    Method.POST_POS: {"subsets"},
}


def _check_options(m: Method, options: dict[str, object], variance: float | np.ndarray | None) -> None:
    """Refuses options the method does not take and a missing variance where the method needs one."""
    allowed = _METHOD_OPTIONS.get(m, set())
    extra = set(options) - allowed
    if extra:
        raise ValueError(
            f"unexpected option(s) {sorted(extra)} for method {m.value!r}; allowed: {sorted(allowed)}"
        )
    if m in METHODS_NEEDING_VARIANCE and variance is None:
        raise ValueError(f"method {m.value!r} needs variance= (the oracle's per-value variance)")


def _apply_with_options(
    m: Method,
    estimates: np.ndarray,
    variance: float | np.ndarray | None,
    n: int | None,
    options: dict[str, object],
) -> np.ndarray:
    """post-pos, base-cut, mle-apx, power and power-ns, with their options."""
    if m is Method.POST_POS:
        return post_pos(estimates, options.get("subsets"))  # type: ignore[arg-type]
    if m is Method.BASE_CUT:
        return base_cut(estimates, variance, alpha=float(options.get("alpha", 2.0)))  # type: ignore[arg-type]
    if m is Method.MLE_APX:
        if "p" not in options or "q" not in options:
            raise ValueError("method 'mle-apx' needs the oracle's p= and q=")
        return mle_apx(estimates, p=float(options["p"]), q=float(options["q"]))  # type: ignore[arg-type]
    fn = power if m is Method.POWER else power_ns
    return fn(
        estimates,
        variance,  # type: ignore[arg-type]
        n=n,
        exponent=options.get("exponent"),  # type: ignore[arg-type]
        fit=str(options.get("fit", "mle")),
    )


_GUIDELINE = {
    "single": Method.BASE_CUT,
    "single-value": Method.BASE_CUT,
    "value": Method.BASE_CUT,
    "full-domain": Method.BASE_CUT,
    "frequent": Method.NORM,
    "frequent-values": Method.NORM,
    "top-k": Method.NORM,
    "topk": Method.NORM,
    "heavy-hitters": Method.NORM,
    "set": Method.POWER_NS,
    "set-value": Method.POWER_NS,
    "subset": Method.POWER_NS,
    "range": Method.POWER_NS,
}


def recommend(query: str) -> Method:
    """The paper's closing guideline for choosing a post-processing method.

    * single-value queries (``"single"``, ``"value"``, ``"full-domain"``): **Base-Cut** — when many values
      have low frequency, zeroing low estimates helps most.
    * frequent values (``"frequent"``, ``"top-k"``, ``"heavy-hitters"``): **Norm** — the paper says "when
      frequent values are desired, use Norm": Base would also do, Norm reduces variance by using the
      sum-to-one property; neither changes any value dramatically. (In its top-k figure the cut methods lose
      accuracy as ``k`` grows past ~10 at ``eps = 1``; Norm-Sub/Norm-Mul bias the largest values downward.)
    * set-value queries (``"set"``, ``"subset"``, ``"range"``): **PowerNS** — or pick a method on a synthetic
      dataset processed with Norm-Sub, as the paper also suggests.

    Raises:
        ValueError: for an unknown query kind.
    """
    key = str(query).strip().lower().replace("_", "-").replace(" ", "-")
    if key not in _GUIDELINE:
        raise ValueError(f"unknown query kind {query!r}; use one of {sorted(_GUIDELINE)}")
    return _GUIDELINE[key]
