"""The matrix mechanism (Li & Miklau, Sec. 2.2): answer a workload W through a strategy A.

    y = A x + z,   x_hat = A^+ y  (least squares),   answers = W x_hat.

**Central DP.**  x is the exact vector of cell counts, so this runs at a *trusted aggregator* that sees
every user's record (one record per user, cells from a public domain).  It is not local DP.

Gaussian variant ((eps, delta)-DP, the paper's): z ~ N(0, sigma^2 I_p), sigma = c(eps, delta) * Delta_2(A),
Delta_2(A) = max column L2 norm (add/remove-one-tuple neighbours; ``neighbours="replace"`` uses
max_{u,v} |A(e_u - e_v)|_2).  Per-query variance sigma^2 * w (A^T A)^+ w^T, total
c^2 Delta_2^2 tr(G (A^T A)^+).
The calibration c is pluggable (``CALIBRATIONS``):

* ``paper``:      c = sqrt(2 ln(2/delta)) / eps (Li & Miklau), refused above ``paper_max_epsilon(delta)``
  (9.73 at delta 1e-6), where the exact Gaussian profile shows it is not (eps, delta)-DP;
* ``dwork_roth``: c = sqrt(2 ln(1.25/delta)) / eps, valid only for eps < 1;
* ``analytic``:   the smallest c for which N(0, c^2) is (eps, delta)-DP at unit sensitivity (Balle & Wang,
  ICML 2018, Thm 8), found by bracketing on the exact privacy profile; valid for every eps > 0.

Laplace variant (**marked as such**: eps-DP, z_i ~ Laplace(Delta_1(A)/eps), Delta_1 = max column L1 norm).
The error formula still holds (variance 2 Delta_1^2/eps^2 * w (A^T A)^+ w^T), but Thms 3.1/3.2 fail under L1:
column-uniform strategies need not be minimal and merging duplicate rows changes Delta_1, and
(2/eps^2) svdb is a valid but not a tight lower bound.

Randomness: ``rng`` is keyword-only; left as None it is ``numpy.random.default_rng()`` seeded from OS
entropy.  The continuous samplers are numpy's floating-point ones, for simulation and experiments only
(floating-point noise is distinguishable, Mironov 2012); releases use
``ldp.matrix.discrete.DiscreteGaussianMatrixMechanism`` (exact discrete Gaussian on integer measurements).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, special

from ldp.matrix._threads import blas_limit, limited
from ldp.matrix.bounds import NotSupportedError
from ldp.matrix.strategies import Strategy

__all__ = [
    "CALIBRATIONS",
    "paper_calibration",
    "paper_max_epsilon",
    "dwork_roth_calibration",
    "analytic_gaussian_calibration",
    "gaussian_delta",
    "GaussianMatrixMechanism",
    "LaplaceMatrixMechanism",
]


def _check_eps_delta(epsilon: float, delta: float) -> None:
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def _paper_c(epsilon: float, delta: float) -> float:
    return math.sqrt(2.0 * math.log(2.0 / delta)) / epsilon


def paper_max_epsilon(delta: float) -> float:
    """The largest epsilon at which the paper's constant is (eps, delta)-DP by the exact Gaussian profile
    (:func:`gaussian_delta`; bisection, rounded down): 9.73 at delta = 1e-6."""
    lo, hi = 1e-3, 1.0
    while gaussian_delta(_paper_c(hi, delta), hi) <= delta:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_delta(_paper_c(mid, delta), mid) <= delta else (lo, mid)
    return lo


def paper_calibration(epsilon: float, delta: float) -> float:
    """c = sqrt(2 ln(2/delta)) / eps, the paper's constant (sigma = c * Delta_2).

    Raises:
        ValueError: where the constant is not (eps, delta)-DP (exact Gaussian profile), naming the bound
        (:func:`paper_max_epsilon`).
    """
    _check_eps_delta(epsilon, delta)
    c = _paper_c(epsilon, delta)
    if gaussian_delta(c, epsilon) > delta:
        raise ValueError(
            f"the paper's Gaussian calibration is not ({epsilon:g}, {delta:g})-DP: it is valid only for "
            f"epsilon <= {paper_max_epsilon(delta):.4g} at delta {delta:g}; use 'analytic'"
        )
    return c


def dwork_roth_calibration(epsilon: float, delta: float) -> float:
    """c = sqrt(2 ln(1.25/delta)) / eps (Dwork & Roth, Thm A.1); only proven for eps < 1."""
    _check_eps_delta(epsilon, delta)
    if epsilon >= 1:
        raise ValueError("the Dwork-Roth Gaussian calibration is only valid for epsilon < 1; use 'analytic'")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def gaussian_delta(sigma: float, epsilon: float) -> float:
    """Exact delta(eps) of N(0, sigma^2) noise at unit L2 sensitivity (Balle & Wang, Thm 8):
    Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma)."""
    a = 0.5 / sigma
    b = epsilon * sigma
    return float(special.ndtr(a - b) - math.exp(epsilon + special.log_ndtr(-a - b)))


def analytic_gaussian_calibration(epsilon: float, delta: float) -> float:
    """Smallest c with gaussian_delta(c, eps) <= delta (analytic Gaussian mechanism); sigma = c * Delta_2."""
    _check_eps_delta(epsilon, delta)
    lo, hi = 1e-6, 1.0
    while gaussian_delta(hi, epsilon) > delta:
        hi *= 2.0
    while gaussian_delta(lo, epsilon) <= delta:
        lo /= 2.0
    c = optimize.brentq(lambda s: gaussian_delta(s, epsilon) - delta, lo, hi, xtol=1e-14, rtol=1e-13)
    # brentq brackets the root; step to the side that certainly satisfies the constraint
    while gaussian_delta(c, epsilon) > delta:
        c *= 1 + 1e-12
    return float(c)


CALIBRATIONS: dict[str, Callable[[float, float], float]] = {
    "analytic": analytic_gaussian_calibration,
    "paper": paper_calibration,
    "dwork_roth": dwork_roth_calibration,
}


class _LeastSquares:
    """x_hat = A^+ y and w (A^T A)^+ w^T through one SVD of A (rank-deficient A allowed)."""

    def __init__(self, a: np.ndarray, rtol: float = 1e-10):
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        keep = s > rtol * s.max()
        self.u, self.s, self.vt = u[:, keep], s[keep], vt[keep]

    def solve(self, y: np.ndarray) -> np.ndarray:
        return self.vt.T @ ((self.u.T @ y) / self.s[:, None] if y.ndim == 2 else (self.u.T @ y) / self.s)

    def quad(self, w) -> np.ndarray:
        wv = np.asarray(w @ self.vt.T)
        wn2 = np.asarray(w.multiply(w).sum(axis=1)).ravel() if hasattr(w, "multiply") else np.sum(w * w, 1)
        resid = wn2 - np.sum(wv * wv, axis=1)
        if np.any(resid > 1e-8 * np.maximum(wn2, 1.0)):
            raise NotSupportedError("some query lies outside rowspace(A); the strategy does not support W")
        return np.sum((wv / self.s) ** 2, axis=1)


class _MatrixMechanism:
    def __init__(self, strategy: Strategy):
        if not isinstance(strategy, Strategy):
            raise TypeError("strategy must be an ldp.matrix.strategies.Strategy")
        self.strategy = strategy
        self.a = strategy.matrix
        self.n = self.a.shape[1]
        with blas_limit():
            self._ls = _LeastSquares(self.a)

    def _check_x(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if x.ndim != 1 or x.size != self.n:
            raise ValueError(f"x must be a vector of {self.n} cell counts, got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("x has non-finite entries")
        return x

    def _noise(self, p: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def measure(self, x, *, rng: np.random.Generator | None = None) -> np.ndarray:
        """Noisy strategy answers y = A x + z, shape (p,).  This is the only privacy-relevant step."""
        x = self._check_x(x)
        rng = np.random.default_rng() if rng is None else rng
        return self.a @ x + self._noise(self.a.shape[0], rng)

    def estimate(self, y) -> np.ndarray:
        """Least-squares estimate x_hat = A^+ y, shape (n,) (post-processing, no privacy cost)."""
        with blas_limit():
            return self._ls.solve(np.asarray(y, dtype=float))

    def query_variance(self, w) -> np.ndarray:
        """Variance of each answer w x_hat: noise_var * w (A^T A)^+ w^T, shape (m,)."""
        with blas_limit():
            return self.noise_variance * self._ls.quad(w)

    def answer(self, x, w, *, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Answers W x_hat and their standard deviations (unbiased; std does not depend on x)."""
        y = self.measure(x, rng=rng)
        xh = self.estimate(y)
        return np.asarray(w @ xh).ravel(), np.sqrt(self.query_variance(w))


class GaussianMatrixMechanism(_MatrixMechanism):
    """(eps, delta)-DP Gaussian matrix mechanism (central DP; see the module docstring).

    Args:
        strategy: A (p x n); must support the workloads it is asked to answer.
        epsilon, delta: the privacy parameters.
        calibration: ``analytic`` (default, tightest), ``paper`` or ``dwork_roth``, or a callable
            (eps, delta) -> c.
        neighbours: ``add_remove`` (default) or ``replace``.
        max_contributions: k, the most records one user may contribute (the caller must enforce it);
            the user-level sensitivity is then at most k * Delta_2(A) (triangle inequality).
    Attributes: ``c``, ``sensitivity``, ``sigma`` = c * sensitivity, ``noise_variance`` = sigma^2.
    """

    def __init__(self, strategy: Strategy, epsilon: float, delta: float, *, calibration="analytic",
                 neighbours: str = "add_remove", max_contributions: int = 1):
        super().__init__(strategy)
        cal = CALIBRATIONS.get(calibration) if isinstance(calibration, str) else calibration
        if cal is None:
            raise ValueError(f"unknown calibration {calibration!r}; known: {sorted(CALIBRATIONS)}")
        if neighbours not in ("add_remove", "replace"):
            raise ValueError("neighbours must be 'add_remove' or 'replace'")
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.calibration = (calibration if isinstance(calibration, str)
                            else getattr(calibration, "__name__", "custom"))
        self.c = float(cal(epsilon, delta))
        if int(max_contributions) != max_contributions or max_contributions < 1:
            raise ValueError(f"max_contributions must be a positive integer, got {max_contributions}")
        self.max_contributions = int(max_contributions)
        self.sensitivity = self.max_contributions * (strategy.sensitivity() if neighbours == "add_remove"
                                                     else strategy.sensitivity_replace())
        self.sigma = self.c * self.sensitivity
        self.noise_variance = self.sigma**2

    def _noise(self, p, rng):
        return rng.normal(0.0, self.sigma, size=p)

    @limited
    def expected_total_error(self, gram: np.ndarray) -> float:
        """sigma^2 tr(G (A^T A)^+) for a workload Gram G."""
        vs = self._ls.vt.T / self._ls.s
        return float(self.noise_variance * np.einsum("ij,ij->", gram @ vs, vs))


class LaplaceMatrixMechanism(_MatrixMechanism):
    """LAPLACE VARIANT, eps-DP: z_i ~ Laplace(Delta_1(A) / eps).

    Thms 3.1 and 3.2 do not hold under L1 sensitivity (e.g. [[1, 1], [1, -1]] is column-uniform but has
    twice the identity's error; merging rows a, a into sqrt(2) a lowers Delta_1), so strategies chosen for
    the Gaussian variant (LSA, OPT) are not optimal here and svdb is not tight.
    """

    def __init__(self, strategy: Strategy, epsilon: float):
        super().__init__(strategy)
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
        self.epsilon = float(epsilon)
        self.sensitivity = strategy.sensitivity_l1()
        self.scale = self.sensitivity / self.epsilon
        self.noise_variance = 2.0 * self.scale**2

    def _noise(self, p, rng):
        return rng.laplace(0.0, self.scale, size=p)
