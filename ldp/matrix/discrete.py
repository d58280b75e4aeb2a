"""The matrix mechanism with exact discrete Gaussian noise on integer measurements (central DP).

Every strategy is measured through an *integer* matrix B (p x n) with integer row weights c_i:

* integer strategies (identity, Haar's +-1 rows, 0/1 hierarchies): B = A, c_i = 1;
* merged level strategies (H_b, LSA: rows sqrt(c_i) * b_i with b_i in {0, 1}^n, Thm 3.2): B_i = b_i and
  the weight c_i = number of merged duplicates;
* any other real strategy (OPT, Kronecker products of weighted rows, ...): B = round(s A) with s a power of
  two (``2^quantize_bits / max|A|``, rounded down to a power of two) and c_i = 1; B itself is then the
  strategy, with its own exact sensitivity.

The released measurements are m = B x + z with z_i ~ N_Z(0, sigma^2 / c_i) (:mod:`ldp.dgauss`), exact
integers, so the mechanism is rho-zCDP with rho = k^2 S / (2 sigma^2), S = max_j sum_i c_i B_ij^2 computed in
integers (add/remove-one-record neighbours, k = ``max_contributions``; a user's k records move the query by
at most k times one record's column, triangle inequality). Everything after m -- the least-squares
estimate x_hat = A_c^+ (sqrt(c) * m) with A_c = diag(sqrt c) B, the answers W x_hat, their std -- is
post-processing in floating point and costs no privacy.

sigma^2 is a dyadic rational: the smallest multiple of 2^-32 (relative to the scale) at or above the value
the calibration asks for, so the sampler is exact and the noise is never below the calibration's.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ldp import dgauss
from ldp.matrix._threads import blas_limit
from ldp.matrix.mechanism import CALIBRATIONS, _LeastSquares, _paper_c
from ldp.matrix.strategies import Strategy

__all__ = [
    "IntegerStrategy",
    "integer_strategy",
    "DiscreteGaussianMatrixMechanism",
    "check_calibration",
    "QUANTIZE_BITS",
]

#: Bits of the quantised entries of a real strategy (the largest |B_ij| is in [2^(bits-1), 2^bits]).
QUANTIZE_BITS = 16
_INT_LIMIT = 1 << 62


@dataclass(frozen=True)
class IntegerStrategy:
    """A strategy as integers: ``b`` (int64, p x n), row weights ``c`` (int64 >= 1), and ``scale`` s
    (B ~ s A for a quantised real strategy, else 1). ``matrix`` is A_c = diag(sqrt c) B (float), the
    matrix the least squares runs on."""

    name: str
    b: np.ndarray
    c: np.ndarray
    scale: float = 1.0
    kind: str = "exact"  # exact | weighted | quantised
    matrix: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "matrix", np.sqrt(self.c.astype(np.float64))[:, None] * self.b)

    @property
    def sensitivity2(self) -> int:
        """S = max_j sum_i c_i B_ij^2, exactly (Python integers when int64 could overflow)."""
        bmax = int(np.abs(self.b).max()) if self.b.size else 0
        if bmax * bmax * int(self.c.max()) * self.b.shape[0] < _INT_LIMIT:
            return int(np.max(self.c @ (self.b * self.b)))
        cols = [sum(int(ci) * int(v) * int(v) for ci, v in zip(self.c, col)) for col in self.b.T]
        return max(cols)

    def digest(self) -> bytes:
        """SHA-256 of B and c (the noise context names the exact measurement)."""
        h = hashlib.sha256(b"ldp-integer-strategy-v1")
        h.update(np.asarray(self.b.shape, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.b, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.c, dtype="<i8").tobytes())
        return h.digest()


def _is_integer(a: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(a)) and np.all(a == np.round(a)) and np.abs(a).max() < 2**52)


def integer_strategy(strategy: Strategy, *, quantize_bits: int = QUANTIZE_BITS) -> IntegerStrategy:
    """The integer form of a strategy (see the module docstring): exact, weighted 0/1 rows, or quantised."""
    a = np.asarray(strategy.matrix, dtype=np.float64)
    if a.ndim != 2 or a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError("a strategy must be a finite, non-empty 2-D matrix")
    p = a.shape[0]
    if _is_integer(a):
        return IntegerStrategy(strategy.name, a.astype(np.int64), np.ones(p, dtype=np.int64))
    peak = np.abs(a).max(axis=1)
    c = np.round(peak**2)
    if np.all(c >= 1) and np.all(c < 2**31):
        b = a / np.sqrt(c)[:, None]
        near = np.all(np.abs(c - peak**2) <= 1e-9 * c)
        if near and np.all(np.abs(b - np.round(b)) <= 1e-9):
            return IntegerStrategy(strategy.name, np.round(b).astype(np.int64), c.astype(np.int64),
                                   kind="weighted")  # fmt: skip
    top = float(np.abs(a).max())
    s = 2.0 ** (quantize_bits - math.ceil(math.log2(top)))
    b = np.round(a * s).astype(np.int64)
    keep = np.any(b != 0, axis=1)  # rows rounded to zero measure nothing
    return IntegerStrategy(strategy.name, b[keep], np.ones(int(keep.sum()), dtype=np.int64), scale=s,
                           kind="quantised")  # fmt: skip


def _dyadic_up(x: float, bits: int = 32) -> Fraction:
    """The smallest multiple of 2^(e - bits) at or above x (e: x's binary exponent), as a Fraction."""
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"sigma^2 must be positive and finite, got {x}")
    e = math.frexp(x)[1]
    unit = Fraction(2) ** (e - bits)
    return math.ceil(Fraction(x) / unit) * unit


class DiscreteGaussianMatrixMechanism:
    """The matrix mechanism with exact discrete Gaussian noise (central DP; module docstring).

    Args:
        strategy: a ``Strategy`` (A, p x n); measured through :func:`integer_strategy`.
        epsilon, delta: the (eps, delta)-DP target.
        calibration: ``analytic`` (default): the largest rho whose zCDP conversion (CKS Cor. 13) meets
            (eps, delta), sigma^2 = k^2 S / (2 rho). ``paper`` / ``dwork_roth``: sigma = c(eps, delta) * k *
            Delta_2 with the continuous constant, accepted only where the discrete accounting proves
            (eps, delta) for it (else ValueError naming the largest such epsilon).
        max_contributions: k, the most records of one user (enforced upstream).
    Attributes: ``sigma2`` (Fraction, in units of B), ``rho`` (exact zCDP of one release), ``sigma``
    (float, in units of the strategy A: sqrt(sigma2) / scale), ``row_variance`` (the noise variance of each
    row of A_c: c_i Var N_Z(0, sigma2 / c_i)).
    """

    def __init__(self, strategy: Strategy, epsilon: float, delta: float, *, calibration: str = "analytic",
                 max_contributions: int = 1, quantize_bits: int = QUANTIZE_BITS) -> None:  # fmt: skip
        if not isinstance(strategy, Strategy):
            raise TypeError("strategy must be an ldp.matrix.strategies.Strategy")
        if int(max_contributions) != max_contributions or max_contributions < 1:
            raise ValueError(f"max_contributions must be a positive integer, got {max_contributions}")
        self.strategy = strategy
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.calibration = calibration
        self.max_contributions = k = int(max_contributions)
        self.istrategy = ist = integer_strategy(strategy, quantize_bits=quantize_bits)
        self.a = ist.matrix
        self.n = self.a.shape[1]
        s2 = ist.sensitivity2
        self.sensitivity2 = k * k * s2  # user-level, in units of B
        c2 = check_calibration(calibration, self.epsilon, self.delta)
        want = c2 * self.sensitivity2
        self.sigma2 = _dyadic_up(want * (1 + 1e-12))
        self.rho = Fraction(self.sensitivity2) / (2 * self.sigma2)
        if dgauss.zcdp_delta(float(self.rho), self.epsilon) > self.delta * (1 + 1e-6):
            raise AssertionError("discrete Gaussian calibration check failed")  # pragma: no cover
        self.row_sigma2 = {int(ci): self.sigma2 / int(ci) for ci in np.unique(ist.c)}
        row_var = {ci: ci * dgauss.variance(v) for ci, v in self.row_sigma2.items()}
        self.row_variance = np.array([row_var[int(ci)] for ci in ist.c]) / ist.scale**2
        self.sigma = math.sqrt(float(self.sigma2)) / ist.scale
        self.sensitivity = math.sqrt(self.sensitivity2) / ist.scale
        self.uniform_rows = bool(np.all(self.row_variance == self.row_variance[0]))
        with blas_limit():
            self._ls = _LeastSquares(self.a / ist.scale)

    # ---- the release ---------------------------------------------------------------------------------------
    def measure(self, x, src: dgauss.RandomSource) -> np.ndarray:
        """m = B x + z (int64, exact): the only privacy-relevant step. ``x``: integer cell counts."""
        x = np.asarray(x)
        if x.ndim != 1 or x.size != self.n:
            raise ValueError(f"x must be a vector of {self.n} cell counts, got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.integer):
            if not np.all(np.isfinite(x)) or np.any(x != np.round(x)):
                raise ValueError("the discrete mechanism measures integer counts")
            x = x.astype(np.int64)
        b = self.istrategy.b
        if int(np.abs(b).max()) * int(np.abs(x).sum()) >= _INT_LIMIT:
            raise ValueError("counts too large for exact int64 measurement")
        exact = b @ x.astype(np.int64)
        c = self.istrategy.c
        z = np.empty(len(c), dtype=np.int64)
        for i, ci in enumerate(c.tolist()):  # rows in order: the stream's draws follow the row order
            z[i] = dgauss.discrete_gaussian(self.row_sigma2[ci], src)
        return exact + z

    def estimate(self, m) -> np.ndarray:
        """x_hat = A^+ y with y = sqrt(c) m / scale (post-processing)."""
        ist = self.istrategy
        y = np.sqrt(ist.c.astype(np.float64)) * np.asarray(m, dtype=np.float64) / ist.scale
        with blas_limit():
            return self._ls.solve(y)

    def query_variance(self, w) -> np.ndarray:
        """Exact variance of each answer w x_hat: sum_i v_i (w A^+)_i^2 (v_i = ``row_variance``)."""
        with blas_limit():
            if self.uniform_rows:
                return self.row_variance[0] * self._ls.quad(w)
            self._ls.quad(w)  # support check
            ls = self._ls
            r = (np.asarray(w @ ls.vt.T) / ls.s) @ ls.u.T
            return (r * r) @ self.row_variance

    def answer(self, x, w, src: dgauss.RandomSource) -> tuple[np.ndarray, np.ndarray]:
        """Answers W x_hat and their std (one release)."""
        xh = self.estimate(self.measure(x, src))
        return np.asarray(w @ xh).ravel(), np.sqrt(self.query_variance(w))

    def expected_total_error(self, gram: np.ndarray) -> float:
        """tr(G Cov(x_hat)) for a workload Gram G."""
        ls = self._ls
        lmat = ls.vt.T @ (ls.u / ls.s).T  # A^+ (n x p)
        cov = (lmat * self.row_variance) @ lmat.T
        return float(np.einsum("ij,ji->", gram, cov))

    def digest(self) -> bytes:
        """SHA-256 of the exact measurement: B, c and sigma^2."""
        h = hashlib.sha256(self.istrategy.digest())
        h.update(f"{self.sigma2.numerator}/{self.sigma2.denominator}".encode())
        return h.digest()


def check_calibration(calibration: str, epsilon: float, delta: float) -> float:
    """c^2 = sigma^2 / Delta^2 of a calibration for the discrete Gaussian (independent of the strategy).

    ``analytic``: 1 / (2 rho), rho = :func:`ldp.dgauss.zcdp_rho` (valid for every epsilon). ``paper`` /
    ``dwork_roth``: the continuous constant squared, accepted only where rho = 1 / (2 c^2) meets the
    discrete accounting.

    Raises:
        ValueError: naming the calibration and the largest epsilon at which it is valid at this delta.
    """
    target = dgauss.zcdp_rho(epsilon, delta)
    if calibration == "analytic":
        return 1.0 / (2.0 * target)
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r}; known: {sorted(CALIBRATIONS)}")
    c = _constant(calibration, epsilon, delta)
    if 1.0 / (2.0 * c * c) > target:
        bound = _max_epsilon(calibration, delta)
        raise ValueError(
            f"calibration {calibration!r} is not ({epsilon:g}, {delta:g})-DP for the discrete Gaussian: the "
            f"accounting proves it only for epsilon <= {bound:.4g} at delta {delta:g} (use 'analytic', "
            "valid for every epsilon)"
        )
    return c * c


def _constant(calibration: str, epsilon: float, delta: float) -> float:
    """The continuous calibration's constant c (the paper's unchecked: the discrete accounting judges it)."""
    return _paper_c(epsilon, delta) if calibration == "paper" else CALIBRATIONS[calibration](epsilon, delta)


def _max_epsilon(calibration: str, delta: float) -> float:
    """The largest epsilon at which ``calibration``'s sigma = c(eps, delta) Delta is (eps, delta)-DP by the
    discrete accounting (bisection; the ratio rho(eps) / rho_target(eps) is increasing in eps)."""

    def ok(eps: float) -> bool:
        try:
            c = _constant(calibration, eps, delta)
        except ValueError:
            return False
        return 1.0 / (2 * c * c) <= dgauss.zcdp_rho(eps, delta)

    lo, hi = 1e-6, 1.0
    if not ok(lo):
        return 0.0
    while ok(hi) and hi < 1e6:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
