"""Phase 2 of TDG/HDG (Yang et al., VLDB 2021, Section 4.2): non-negativity and cross-grid consistency.

A :class:`Table` is one grid (or marginal): an array with one axis per attribute it covers, a mask of the
cells that hold at least one real value (cells made only of padding values are structurally zero and stay
0), and the variance ``var0`` of one cell's estimate.

* Non-negativity step: Norm-Sub (Wang et al. 2020) of every table over its valid cells
  (:func:`ldp.postprocess.norm_sub`).
* Consistency step, attribute by attribute: all tables covering attribute ``a`` are summed onto the
  coarsest granularity ``h`` they share on ``a`` (the paper's ``g2`` bins); bin ``j`` of table ``i`` is
  ``P_i(a, j)`` with ``|S_i(j)|`` contributing cells. The consistent value is the variance-optimal weighted
  average ``P(a, j) = sum_i w_i P_i(a, j) / sum_i w_i`` with ``w_i = 1 / (|S_i(j)| var0_i)`` (the paper's
  ``theta_i`` proportional to ``1/|S_i|`` when all groups have the same population; using the actual
  per-table ``var0`` extends it to unequal groups and oracles), and every cell of ``S_i(j)`` gets
  ``(P(a, j) - P_i(a, j)) / |S_i(j)|`` added. Later attributes do not break earlier ones (Qardaji et al.
  2014).
* :func:`post_process` alternates the two steps and ends with non-negativity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldp.postprocess import norm_sub

__all__ = ["Table", "norm_sub_table", "make_consistent", "max_inconsistency", "post_process"]


@dataclass
class Table:
    """One grid/marginal.

    Attributes:
        attrs: attribute indices of the axes, ascending.
        values: float64 array, one axis per attribute (cells of that attribute's granularity).
        valid: bool mask of the same shape: cells holding at least one real (non-padding) value.
        var0: variance of one cell's estimate (np.inf when the group had no report: weight 0).
    """

    attrs: tuple[int, ...]
    values: np.ndarray
    valid: np.ndarray
    var0: float

    def axis(self, a: int) -> int:
        return self.attrs.index(a)


def norm_sub_table(t: Table) -> None:
    """Norm-Sub over the valid cells of ``t`` in place (invalid cells set to 0)."""
    v = np.zeros_like(t.values)
    v[t.valid] = norm_sub(t.values[t.valid])
    t.values = v


def _coarse(arr: np.ndarray, axis: int, h: int) -> np.ndarray:
    """Sums ``arr`` over every axis but ``axis`` and groups that axis into ``h`` equal bins -> (h,)."""
    other = tuple(i for i in range(arr.ndim) if i != axis)
    m = arr.sum(axis=other) if other else arr
    return m.reshape(h, -1).sum(axis=1)


def _marginals(tables: list[Table], a: int) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
    """Coarsest shared granularity h on ``a`` and each table's (P_i(a, .), |S_i(.)|) at that level."""
    h = min(t.values.shape[t.axis(a)] for t in tables)
    ps = [_coarse(t.values, t.axis(a), h) for t in tables]
    ss = [_coarse(t.valid.astype(np.float64), t.axis(a), h) for t in tables]
    return h, ps, ss


def make_consistent(tables: list[Table], n_attributes: int) -> None:
    """Consistency step over all attributes, in place (see the module docstring)."""
    for a in range(n_attributes):
        cover = [t for t in tables if a in t.attrs]
        if len(cover) < 2:
            continue
        h, ps, ss = _marginals(cover, a)
        p = np.array(ps)  # (T, h)
        s = np.array(ss)
        var0 = np.array([t.var0 for t in cover])[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where((s > 0) & np.isfinite(var0), 1.0 / (s * var0), 0.0)
        wsum = w.sum(axis=0)
        # Bins where no table has a finite weight (all groups empty): plain average of the tables with cells.
        fallback = wsum <= 0
        if fallback.any():
            w[:, fallback] = (s[:, fallback] > 0).astype(np.float64)
            wsum = w.sum(axis=0)
        target = np.divide((w * p).sum(axis=0), wsum, out=np.zeros(h), where=wsum > 0)
        for i, t in enumerate(cover):
            ax = t.axis(a)
            g = t.values.shape[ax]
            delta = np.divide(target - p[i], s[i], out=np.zeros(h), where=s[i] > 0)
            per_cell = np.repeat(delta, g // h)
            shape = [1] * t.values.ndim
            shape[ax] = g
            t.values = t.values + per_cell.reshape(shape) * t.valid


def max_inconsistency(tables: list[Table], n_attributes: int) -> float:
    """Largest absolute difference between two tables' marginals on a shared attribute (at level h)."""
    worst = 0.0
    for a in range(n_attributes):
        cover = [t for t in tables if a in t.attrs]
        if len(cover) < 2:
            continue
        _, ps, _ = _marginals(cover, a)
        p = np.array(ps)
        worst = max(worst, float((p.max(axis=0) - p.min(axis=0)).max()))
    return worst


def post_process(tables: list[Table], n_attributes: int, *, max_rounds: int = 10, tol: float = 0.0) -> int:
    """Phase 2: alternates Norm-Sub and consistency, ending with Norm-Sub (in place).

    Each round is Norm-Sub of every table then the consistency step; after ``max_rounds`` rounds, or as
    soon as the tables are non-negative and consistent within ``tol`` before a round, a final Norm-Sub
    makes every table non-negative and sum to 1.

    Returns:
        Number of consistency rounds run.
    """
    rounds = 0
    for _ in range(max_rounds):
        for t in tables:
            norm_sub_table(t)
        if rounds and max_inconsistency(tables, n_attributes) <= tol:
            break
        make_consistent(tables, n_attributes)
        rounds += 1
    for t in tables:
        norm_sub_table(t)
    return rounds
