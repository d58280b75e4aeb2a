"""The (eps, delta)-optimal strategy with a certified primal-dual gap (beyond the paper; spec Sec. 1).

Problem 2.1 of Li & Miklau -- minimise Delta_2(A)^2 tr(G (A^T A)^+) -- is, with X = A^T A scaled to
max_i X_ii = 1, the convex problem

    OPT(G) = min { tr(G X^-1) : X > 0, diag(X) <= 1 }.

Its Lagrange dual is OPT(G) = max_{mu in simplex} T(mu)^2, T(mu) = tr (D_mu^1/2 G D_mu^1/2)^1/2, and the SVD
bound of Thm 3.3 is exactly the dual value at the uniform mu = 1/n.  For a given mu, with
H = D_mu^1/2 G D_mu^1/2, the strategy X = D_mu^-1/2 H^1/2 D_mu^-1/2 has error max_i X_ii * T(mu).  So every
iterate gives a strategy (an upper bound) and a certified lower bound; we iterate the fixed point
mu <- diag(H^1/2) / T(mu) (at the optimum every X_ii is equal), over-relaxed as exponentiated-gradient ascent
with an adaptive step, until (primal - dual) / dual <= tol.  Each iteration is one symmetric
eigendecomposition, O(n^3).

Kronecker workloads (AllRange on a product domain) are solved per factor: OPT(G_1 (x) G_2) =
OPT(G_1) OPT(G_2), with the Kronecker strategy attaining it (primal and dual both multiply).

Privacy: the returned A is used with sigma = c(eps, delta) * Delta_2(A); (eps, delta)-DP for add/remove
neighbours as for every strategy.  Its rows are real and signed, so it cannot be run by LDP frequency oracles.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
from scipy import linalg

from ldp.matrix._threads import limited
from ldp.matrix.strategies import Strategy
from ldp.matrix.workloads import Workload, drop_dead_cells

__all__ = ["opt", "opt_gram", "gram_root"]


def _sqrt_h(g: np.ndarray, mu: np.ndarray):
    s = np.sqrt(mu)
    h = g * s[:, None] * s[None, :]
    lam, v = linalg.eigh(h, driver="evd", check_finite=False)
    # eigenvalues at rounding level are exact zeros of a rank-deficient G; their square roots (1e-7
    # relative) would swamp the dual value, so they are zeroed
    lam = np.where(lam > 1e-12 * lam[-1], lam, 0.0)
    r = np.sqrt(lam)
    diag = (v * v) @ r  # diag(H^1/2)
    return r, v, diag


def opt_gram(g: np.ndarray, *, tol: float = 1e-7, max_iter: int = 2000):
    """Solve min tr(G X^-1) s.t. diag X <= 1 for one Gram matrix (no dead cells).

    The dual objective T(mu) has gradient dT/dmu_i = X_ii / 2, so the update
    mu_i <- mu_i (X_ii / T)^beta (normalised) is exponentiated-gradient ascent on the simplex; beta = 1 is
    the plain fixed point mu <- diag(H^1/2) / T.  beta grows by 1.5x after every accepted step; a step
    with beta > 1 that lowers the dual value is undone and replaced by a plain (beta = 1) step.

    Args:
        g: G = W^T W, shape (n, n), with a positive diagonal.
        tol: stop when (primal - dual) / dual <= tol (best primal, best dual over the iterates).
    Returns:
        dict with ``matrix`` (A, n x n, A^T A = X), ``gram`` (X), ``primal`` (error of A at c = 1),
        ``dual`` (certified lower bound T(mu)^2), ``gap``, ``iterations``, ``mu``.
    """
    n = g.shape[0]
    if np.any(np.diag(g) <= 0):
        raise ValueError("G has dead cells (zero diagonal); drop them first (workloads.drop_dead_cells)")
    mu = np.full(n, 1.0 / n)
    best = None
    best_dual = -np.inf
    beta = 1.0
    prev = None  # (mu, dual, xdiag/T) of the last accepted iterate
    it = 0
    while it < max_iter:
        it += 1
        r, v, diag = _sqrt_h(g, mu)
        t = r.sum()
        dual = t * t
        xdiag = diag / mu
        primal = xdiag.max() * t
        if best is None or primal < best["primal"]:
            best = {"primal": primal, "mu": mu, "r": r, "v": v}
        best_dual = max(best_dual, dual)
        gap = (best["primal"] - best_dual) / best_dual
        if gap <= tol:
            break
        if prev is not None and beta > 1.0 and dual < prev[1]:
            beta = 1.0  # the over-relaxed step lowered the dual: redo a plain fixed-point step from there
            mu_base, _, ratio = prev
        else:
            if prev is not None:
                beta = min(beta * 1.5, 64.0)
            prev = (mu, dual, xdiag / t)
            mu_base, ratio = mu, xdiag / t
        logm = np.log(mu_base) + beta * np.log(ratio)
        mu = np.exp(logm - logm.max())
        mu /= mu.sum()
    r, v, mu_b = best["r"], best["v"], best["mu"]
    inv_s = 1.0 / np.sqrt(mu_b)
    a = (v * np.sqrt(r)) @ v.T * inv_s[None, :]  # H^1/4 D^-1/2, so A^T A = D^-1/2 H^1/2 D^-1/2
    x = ((v * r) @ v.T) * inv_s[:, None] * inv_s[None, :]
    return {"matrix": a, "gram": (x + x.T) / 2, "primal": float(best["primal"]), "dual": float(best_dual),
            "gap": float((best["primal"] - best_dual) / best_dual), "iterations": it, "mu": mu_b}


@limited
def opt(workload, *, tol: float = 1e-7, max_iter: int = 2000) -> Strategy:
    """The certified near-optimal (eps, delta) strategy for a workload.

    Args:
        workload: a Workload (Kronecker factors solved separately) or a Gram matrix (n, n).
        tol: relative primal-dual gap at which to stop; ``info["gap"]`` certifies
            Err(A) <= (1 + gap) * OPT.
    Returns:
        Strategy ``opt`` with ``info`` = {primal, dual, gap, iterations} (errors at c = 1).
        Cells no query touches get zero columns.
    """
    if isinstance(workload, Workload) and workload.factors is not None:
        for f in workload.factors:
            if not np.all(np.diag(f) > 0):
                raise ValueError("Kronecker factor with dead cells; pass the dense Gram instead")
        parts = [opt_gram(f, tol=tol / len(workload.factors), max_iter=max_iter) for f in workload.factors]
        primal = float(np.prod([p["primal"] for p in parts]))
        dual = float(np.prod([p["dual"] for p in parts]))
        info = {"primal": primal, "dual": dual, "gap": (primal - dual) / dual,
                "iterations": [p["iterations"] for p in parts], "kronecker": True}
        return Strategy("opt", reduce(np.kron, [p["matrix"] for p in parts]), info=info,
                        gram_matrix=reduce(np.kron, [p["gram"] for p in parts]))
    g = workload.gram if isinstance(workload, Workload) else np.asarray(workload, dtype=float)
    g_live, live = drop_dead_cells(g)
    res = opt_gram(g_live, tol=tol, max_iter=max_iter)
    n = g.shape[0]
    a = np.zeros((res["matrix"].shape[0], n))
    a[:, live] = res["matrix"]
    x = np.zeros((n, n))
    x[np.ix_(live, live)] = res["gram"]
    info = {k: res[k] for k in ("primal", "dual", "gap", "iterations")}
    info["dead_cells"] = int(n - live.sum())
    return Strategy("opt", a, info=info, gram_matrix=x if live.all() else None)


@limited
def gram_root(workload) -> Strategy:
    """The SVD-bound strategy A = G^1/4 (A^T A = G^1/2), optimal iff diag(G^1/2) is constant (App C).

    Rank-deficient G gives a rank-deficient A that still supports W (rowspace(G^1/4) = rowspace(W)).
    """
    g = workload.gram if isinstance(workload, Workload) else np.asarray(workload, dtype=float)
    lam, v = linalg.eigh(g, check_finite=False)
    lam = np.clip(lam, 0.0, None)
    keep = lam > 1e-12 * lam.max()
    a = (v[:, keep] * lam[keep] ** 0.25) @ v[:, keep].T
    return Strategy("gram_root", a)
