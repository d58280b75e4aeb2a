"""Workload separation (Li & Miklau, Sec. 4.3): optimise per sub-workload, answer with one joint solve.

For W = [W_1 C_1; ...; W_t C_t], where C_i (n_i x n) aggregates the full cell vector onto a small domain
(e.g. marginal i) and W_i is a workload there:

1. find a strategy A_i for G_i = W_i^T W_i on the small domain (LSA or OPT; cheap);
2. stack A = [w_1 A_1 C_1 / Delta(A_1); ...] with the (eps, delta) budget weights w_i proportional to
   E_i^(1/4), sum_i w_i^2 = 1, E_i = Delta(A_i)^2 tr(G_i (A_i^T A_i)^+); then Delta_2(A) <= 1 and the
   separate-estimation error is (sum_i sqrt(E_i))^2;
3. answer with **one joint least-squares solve** x_hat = A^+ y over the full domain, which recovers
   information the sub-workloads share (such as the total) and is never worse than separate estimation.

The joint error Delta_2(A)^2 tr(G (A^T A)^+) is computed in an orthonormal basis Q of rowspace(A)
(rank r << n): tr(G M^+) = tr(Q^T G Q (Q^T M Q)^-1), O(n^2 r), so nothing n x n is inverted.

Privacy: A is an ordinary strategy; the Gaussian mechanism with sigma = c(eps, delta) Delta_2(A) is
(eps, delta)-DP for add/remove neighbours (central DP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce

import numpy as np
from scipy import linalg

from ldp.matrix._threads import limited
from ldp.matrix.bounds import NotSupportedError, expected_error
from ldp.matrix.strategies import Strategy
from ldp.matrix.workloads import allrange_gram

__all__ = ["Part", "marginal_parts", "separate", "joint_error", "SeparationResult"]


@dataclass(frozen=True)
class Part:
    """One sub-workload: aggregation C (n_i x n) and the Gram G_i (n_i x n_i) on the small domain."""

    aggregation: np.ndarray
    gram: np.ndarray
    dims: tuple[int, ...]
    name: str = ""


@dataclass(frozen=True)
class SeparationResult:
    strategy: Strategy
    part_errors: list[float]
    weights: list[float]
    separate_error: float  # (sum sqrt(E_i))^2, the separate-estimation upper bound
    joint_error: float  # Delta_2(A)^2 tr(G (A^T A)^+), one joint least-squares solve


def _marginal_matrix(dims: tuple[int, ...], subset: tuple[int, ...]) -> np.ndarray:
    return reduce(np.kron, [np.eye(d) if i in subset else np.ones((1, d)) for i, d in enumerate(dims)])


def marginal_parts(dims, subsets, *, gram_fn: Callable[[int], np.ndarray] = allrange_gram) -> list[Part]:
    """Parts for "a workload on each marginal S": C_S = the marginal, G_S = (x)_{i in S} gram_fn(d_i).

    With the default ``gram_fn`` this is the range-marginal workload of ``workloads.range_marginals``.
    """
    dims = tuple(int(d) for d in dims)
    parts = []
    for s in subsets:
        s = tuple(sorted(s))
        g = reduce(np.kron, [gram_fn(dims[i]) for i in s])
        parts.append(Part(_marginal_matrix(dims, s), g, tuple(dims[i] for i in s), name="".join(map(str, s))))
    return parts


@limited
def joint_error(gram: np.ndarray, a: np.ndarray) -> float:
    """Delta_2(A)^2 tr(G (A^T A)^+) through an orthonormal basis of rowspace(A) (A is p x n, p small)."""
    # rowspace basis from the small p x p Gram A A^T = U S^2 U^T: V = A^T U / S
    lam, u = linalg.eigh(a @ a.T, check_finite=False)
    keep = lam > 1e-10 * lam.max()  # structural rank deficiency only; eigenvalues are s^2
    q = (a.T @ u[:, keep]) / np.sqrt(lam[keep])  # (n, r), orthonormal columns
    gr = q.T @ gram @ q
    outside = np.trace(gram) - np.trace(gr)
    if outside > 1e-8 * max(np.trace(gram), 1e-300):
        raise NotSupportedError("the stacked strategy does not support the workload")
    mr = (a @ q).T @ (a @ q)
    sens2 = float(np.max(np.sum(a * a, axis=0)))
    c = linalg.cho_factor(mr, lower=True, check_finite=False)
    return float(sens2 * np.trace(linalg.cho_solve(c, gr, check_finite=False)))


@limited
def separate(parts: Sequence[Part], optimizer: Callable, *, full_gram: np.ndarray | None = None
             ) -> SeparationResult:
    """Workload separation.

    Args:
        parts: the sub-workloads (aggregations all over the same n cells).
        optimizer: strategy builder ``optimizer(gram, dims) -> Strategy`` for a part (e.g.
            ``lambda g, d: lsa(g, dims=d)`` or ``lambda g, d: opt(g)``).
        full_gram: G of the full workload, sum_i C_i^T G_i C_i if omitted.
    Returns:
        SeparationResult with the stacked strategy (Delta_2 <= 1), per-part errors E_i, weights, the
        separate-estimation error (sum sqrt E_i)^2 and the joint least-squares error.
    """
    if not parts:
        raise ValueError("no parts")
    n = parts[0].aggregation.shape[1]
    strategies, errors = [], []
    cache: dict[tuple, tuple[Strategy, float]] = {}  # parts with equal Grams share one optimisation
    for p in parts:
        if p.aggregation.shape != (p.gram.shape[0], n):
            raise ValueError(f"part {p.name!r}: aggregation must be ({p.gram.shape[0]}, {n})")
        key = (p.dims, p.gram.tobytes())
        if key not in cache:
            s = optimizer(p.gram, p.dims)
            cache[key] = (s, expected_error(p.gram, s))
        strategies.append(cache[key][0])
        errors.append(cache[key][1])
    e = np.asarray(errors)
    w = e**0.25
    w /= np.sqrt(np.sum(w**2))
    blocks = [wi * (s.matrix / s.sensitivity()) @ p.aggregation for wi, s, p in zip(w, strategies, parts)]
    a = np.vstack(blocks)
    g = full_gram if full_gram is not None else sum(p.aggregation.T @ p.gram @ p.aggregation for p in parts)
    joint = joint_error(g, a)
    strat = Strategy("separated", a, info={"parts": [p.name for p in parts], "part_errors": errors,
                                           "weights": w.tolist()})
    return SeparationResult(strat, errors, w.tolist(), float(np.sum(np.sqrt(e)) ** 2), joint)
