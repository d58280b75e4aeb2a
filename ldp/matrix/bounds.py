"""Error of a strategy and the SVD lower bound (Li & Miklau, Sec. 2.3 and Thm 3.3).

For a strategy A (p x n) supporting W, the (eps, delta) matrix mechanism answers W x_hat with
x_hat = A^+ (A x + z), z ~ N(0, sigma^2 I), sigma = c(eps, delta) * Delta_2(A).  Its error is

    Err_A(w) = c^2 Delta_2(A)^2 * w (A^T A)^+ w^T                    (per query w)
    Err_A(W) = c^2 Delta_2(A)^2 * tr(G (A^T A)^+),   G = W^T W       (total squared error)

and no strategy beats c^2 * svdb(W), svdb(W) = (sum_i sqrt(lambda_i(G)))^2 / n (Thm 3.3).  Every
function here returns the c-free part (c = 1), so ratios to svdb do not depend on eps or delta.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from ldp.matrix._threads import limited
from ldp.matrix.workloads import Workload, drop_dead_cells

__all__ = ["svdb", "gram_of", "pinv_psd", "expected_error", "per_query_error", "error_ratio",
           "NotSupportedError"]


class NotSupportedError(ValueError):
    """The strategy does not support the workload: rowspace(W) is not inside rowspace(A)."""


def gram_of(workload) -> np.ndarray:
    """G from a Workload or an (n, n) array."""
    g = workload.gram if isinstance(workload, Workload) else np.asarray(workload, dtype=float)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"a Gram matrix must be square, got shape {g.shape}")
    return g


@limited
def svdb(workload) -> float:
    """SVD bound (Thm 3.3, c = 1): (sum_i sqrt(lambda_i(G)))^2 / n.

    Args:
        workload: a Workload (Kronecker factors are used when present: the bound is multiplicative,
            because the eigenvalues of a Kronecker product are the products of the factors') or an
            (n, n) Gram matrix.
    Returns:
        The bound as a float; the total error of any (eps, delta) strategy is >= c^2 times it.
    Cells no query touches are dropped first (spec Sec. 1): with them n would be too large and the
    bound needlessly loose.  It stays valid for strategies over the full domain, since knowing the dead
    cells exactly could only lower the variance of the live ones.
    Cost O(n^3) (one symmetric eigenvalue solve), O(sum n_i^3) with factors.
    """
    if isinstance(workload, Workload) and workload.factors is not None:
        return float(np.prod([svdb(f) for f in workload.factors]))
    g = drop_dead_cells(gram_of(workload))[0]
    lam = np.clip(linalg.eigvalsh(g, check_finite=False), 0.0, None)
    return float(np.sum(np.sqrt(lam)) ** 2 / g.shape[0])


def pinv_psd(m: np.ndarray, *, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Pseudo-inverse of a symmetric PSD matrix and an orthonormal basis of its null space.

    Tries a Cholesky inverse first (full rank, the common case); falls back to an eigendecomposition
    with eigenvalues below ``rtol * max`` treated as zero.  Returns (M^+, N) with N of shape (n, r0).
    """
    n = m.shape[0]
    try:
        c = linalg.cho_factor(m, lower=True, check_finite=False)
        inv = linalg.cho_solve(c, np.eye(n), check_finite=False)
        return (inv + inv.T) / 2, np.zeros((n, 0))
    except linalg.LinAlgError:
        pass
    lam, v = linalg.eigh(m, check_finite=False)
    keep = lam > rtol * max(lam.max(), 0.0)
    vk = v[:, keep]
    return (vk / lam[keep]) @ vk.T, v[:, ~keep]


def _check_support(g: np.ndarray, null: np.ndarray, *, rtol: float = 1e-8) -> None:
    if null.shape[1] == 0:
        return
    leak = np.linalg.norm(null.T @ g @ null)
    if leak > rtol * max(np.linalg.norm(g), 1e-300):
        raise NotSupportedError(
            "strategy does not support the workload: rowspace(W) leaves rowspace(A) "
            f"(|N^T G N| = {leak:.3g})")


@limited
def expected_error(workload, strategy) -> float:
    """Total expected squared error at c = 1: Delta_2(A)^2 tr(G (A^T A)^+).

    Args:
        workload: Workload or Gram (n, n).
        strategy: a ``Strategy`` (its ``gram()`` and ``sensitivity()`` are used) supporting W.
    Raises:
        NotSupportedError if rowspace(W) is not inside rowspace(A).
    """
    g = gram_of(workload)
    minv, null = pinv_psd(strategy.gram())
    _check_support(g, null)
    return float(strategy.sensitivity() ** 2 * np.einsum("ij,ji->", g, minv))


@limited
def per_query_error(w_matrix, strategy) -> np.ndarray:
    """Per-query expected squared error at c = 1: Delta_2(A)^2 * w (A^T A)^+ w^T for each row w.

    Args:
        w_matrix: W, shape (m, n), dense or scipy sparse.
    Returns:
        shape (m,) array; multiply by c(eps, delta)^2 for the mechanism's variance.
    """
    minv, null = pinv_psd(strategy.gram())
    wm = w_matrix @ minv
    wm = np.asarray(wm)
    if hasattr(w_matrix, "multiply"):
        quad = np.asarray(w_matrix.multiply(wm).sum(axis=1)).ravel()
    else:
        quad = np.einsum("ij,ij->i", w_matrix, wm)
    if null.shape[1]:
        resid = np.asarray(w_matrix @ null)
        if np.abs(resid).max() > 1e-8 * max(1.0, float(np.abs(quad).max())):
            raise NotSupportedError("some query lies outside rowspace(A)")
    return strategy.sensitivity() ** 2 * quad


def error_ratio(workload, strategy, *, bound: float | None = None) -> float:
    """Expected total error / svdb (free of eps and delta); >= 1 for every strategy."""
    b = svdb(workload) if bound is None else bound
    return expected_error(workload, strategy) / b
