"""Linear-query workloads, represented by their Gram matrix G = W^T W (Li & Miklau, Sec. 2-3).

Everything the matrix mechanism needs about a workload W (m x n) is G = W^T W (n x n): the total
error ``tr(G (A^T A)^+)``, the SVD bound and the strategy optimisers use nothing else, and two
workloads with equal Grams are equivalent (Sec. 3.1).  This module builds G in closed form for the
workloads of the paper, without materialising W (m is n(n+1)/2 for all ranges, 2^n for all
predicates), and builds the explicit W for small sizes (tests, answering).

Cells are indexed row-major over a product domain ``dims`` (``x.reshape(dims)``).  A range is a box
``[lo, hi)`` (half-open, per dimension).  No privacy guarantee is involved here: workloads are public.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import reduce

import numpy as np
from scipy import sparse

__all__ = [
    "Workload",
    "allrange",
    "allrange_gram",
    "allrange_matrix",
    "prefix",
    "prefix_gram",
    "prefix_matrix",
    "allpredicate",
    "allpredicate_gram",
    "allpredicate_matrix",
    "marginals",
    "marginals_matrix",
    "range_marginals",
    "range_marginals_matrix",
    "range_set",
    "range_set_gram",
    "range_set_matrix",
    "all_ranges_1d",
    "sample_ranges",
    "coverage_ranges",
    "coverage_groups",
    "drop_dead_cells",
    "compress_ranges_1d",
    "parse_workload",
]


@dataclass(frozen=True)
class Workload:
    """A workload by its Gram matrix.

    Attributes:
        name: human-readable spec, e.g. ``"allrange:32x32"``.
        dims: the product domain; ``n = prod(dims)`` cells, row-major.
        gram: G = W^T W, shape (n, n), symmetric positive semi-definite.
        n_queries: m, the number of rows of W.
        factors: for Kronecker workloads W = W_1 (x) ... (x) W_k, the factor Grams (G = (x)_i G_i);
            svdb and the optimum are multiplicative over them (Sec. 5 of the spec).
        ranges: for explicit range sets, the boxes as ``(lo, hi)`` integer arrays of shape (m, k).
    """

    name: str
    dims: tuple[int, ...]
    gram: np.ndarray
    n_queries: int
    factors: tuple[np.ndarray, ...] | None = None
    ranges: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return int(np.prod(self.dims))

    def matrix(self) -> np.ndarray:
        """The explicit W (m x n) for range sets, AllRange, Prefix; raises if that is not stored/cheap."""
        if self.ranges is not None:
            return range_set_matrix(self.dims, *self.ranges).toarray()
        kind = self.name.split(":")[0]
        if kind == "allrange":
            return allrange_matrix(self.dims)
        if kind == "prefix" and len(self.dims) == 1:
            return prefix_matrix(self.dims[0])
        raise ValueError(f"workload {self.name!r} has no explicit matrix here; build it with *_matrix()")


def _check_dims(dims) -> tuple[int, ...]:
    if isinstance(dims, (int, np.integer)):
        dims = (int(dims),)
    dims = tuple(int(d) for d in dims)
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"domain sizes must be positive integers, got {dims}")
    return dims


def _kron_all(mats) -> np.ndarray:
    return reduce(np.kron, mats)


# ----------------------------------------------------------------------------------------------- ranges
def allrange_gram(n: int) -> np.ndarray:
    """Gram of all n(n+1)/2 ranges over [0, n): G_ij = (min(i,j)+1)(n - max(i,j)), shape (n, n).

    Cells i and j are both covered by the ranges [a, b) with a <= min(i,j) and b > max(i,j).
    """
    i = np.arange(n)
    return ((np.minimum.outer(i, i) + 1) * (n - np.maximum.outer(i, i))).astype(float)


def all_ranges_1d(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All n(n+1)/2 ranges [a, b) of [0, n), as (a, b) arrays, ordered by a then b."""
    a, b = np.triu_indices(n + 1, k=1)
    return a, b


def allrange_matrix(dims) -> np.ndarray:
    """Explicit AllRange W over a product domain: Kronecker product of the 1-D range matrices."""
    dims = _check_dims(dims)
    mats = []
    for d in dims:
        a, b = all_ranges_1d(d)
        cells = np.arange(d)
        mats.append(((cells >= a[:, None]) & (cells < b[:, None])).astype(float))
    return _kron_all(mats)


def allrange(dims) -> Workload:
    """All range queries over a product domain: G = (x)_i AllRange(d_i) (row-major cells)."""
    dims = _check_dims(dims)
    factors = tuple(allrange_gram(d) for d in dims)
    m = int(np.prod([d * (d + 1) // 2 for d in dims]))
    name = "allrange:" + "x".join(map(str, dims))
    return Workload(name, dims, _kron_all(factors), m, factors=factors if len(dims) > 1 else None)


def prefix_gram(n: int) -> np.ndarray:
    """Gram of the n prefix ranges [0, b): G_ij = n - max(i, j)."""
    i = np.arange(n)
    return (n - np.maximum.outer(i, i)).astype(float)


def prefix_matrix(n: int) -> np.ndarray:
    """Explicit prefix workload: row b-1 is the indicator of [0, b)."""
    return np.tril(np.ones((n, n)))


def prefix(n: int) -> Workload:
    (n,) = _check_dims(n)
    return Workload(f"prefix:{n}", (n,), prefix_gram(n), n)


# ------------------------------------------------------------------------------------------- predicates
def allpredicate_gram(n: int) -> np.ndarray:
    """Gram of all 2^n predicates (subsets of cells): G = 2^(n-2) (I + J).

    A pair i != j lies together in 2^(n-2) subsets, a single cell in 2^(n-1).
    """
    return 2.0 ** (n - 2) * (np.eye(n) + np.ones((n, n)))


def allpredicate_matrix(n: int) -> np.ndarray:
    """Explicit 2^n x n matrix of all subset indicators (small n only)."""
    if n > 16:
        raise ValueError("explicit AllPredicate is 2^n x n; use allpredicate_gram for n > 16")
    codes = np.arange(2**n)
    return ((codes[:, None] >> np.arange(n)) & 1).astype(float)


def allpredicate(n: int) -> Workload:
    (n,) = _check_dims(n)
    return Workload(f"allpredicate:{n}", (n,), allpredicate_gram(n), 2**n)


# -------------------------------------------------------------------------------------------- marginals
def _subsets(d: int, k: int):
    if not 0 <= k <= d:
        raise ValueError(f"k must be in [0, {d}], got {k}")
    return list(itertools.combinations(range(d), k))


def marginals(dims, k: int) -> Workload:
    """All k-way marginals over a product domain: G = sum_{|S|=k} (x)_i (I if i in S else J).

    A marginal on attribute set S is the vector of counts of each combination of values of S; its
    query matrix is (x)_i (I if i in S else 1^T), so its Gram is (x)_i (I or J).
    """
    dims = _check_dims(dims)
    g = np.zeros((int(np.prod(dims)),) * 2)
    m = 0
    for s in _subsets(len(dims), k):
        g += _kron_all([np.eye(d) if i in s else np.ones((d, d)) for i, d in enumerate(dims)])
        m += int(np.prod([dims[i] for i in s]))
    return Workload(f"marginals{k}:" + "x".join(map(str, dims)), dims, g, m)


def marginals_matrix(dims, k: int) -> np.ndarray:
    dims = _check_dims(dims)
    rows = []
    for s in _subsets(len(dims), k):
        rows.append(_kron_all([np.eye(d) if i in s else np.ones((1, d)) for i, d in enumerate(dims)]))
    return np.vstack(rows)


def range_marginals(dims, subsets) -> Workload:
    """All ranges over each marginal S in ``subsets``: G = sum_S (x)_i (AllRange(d_i) if i in S else J).

    ``range_marginals((d, d), [(0,), (1,)])`` is the paper's "ranges over a pair of 1-way marginals"
    (Fig 3(c)): G = G_R (x) J + J (x) G_R.
    """
    dims = _check_dims(dims)
    subsets = [tuple(sorted(int(i) for i in s)) for s in subsets]
    g = np.zeros((int(np.prod(dims)),) * 2)
    m = 0
    for s in subsets:
        if any(not 0 <= i < len(dims) for i in s):
            raise ValueError(f"marginal {s} out of range for {len(dims)} attributes")
        g += _kron_all([allrange_gram(d) if i in s else np.ones((d, d)) for i, d in enumerate(dims)])
        m += int(np.prod([dims[i] * (dims[i] + 1) // 2 for i in s]))
    tag = "+".join("".join(map(str, s)) for s in subsets)
    return Workload(f"rangemarginals[{tag}]:" + "x".join(map(str, dims)), dims, g, m)


def range_marginals_matrix(dims, subsets) -> np.ndarray:
    dims = _check_dims(dims)
    rows = []
    for s in subsets:
        parts = []
        for i, d in enumerate(dims):
            parts.append(allrange_matrix((d,)) if i in s else np.ones((1, d)))
        rows.append(_kron_all(parts))
    return np.vstack(rows)


# ------------------------------------------------------------------------------------ explicit range sets
def _check_boxes(dims, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if lo.ndim == 1:
        lo, hi = lo[:, None], hi.reshape(-1, 1)
    if lo.shape != hi.shape or lo.shape[1] != len(dims):
        raise ValueError(f"ranges must be (m, {len(dims)}) arrays of lo and hi, got {lo.shape}, {hi.shape}")
    if np.any(lo < 0) or np.any(hi > np.asarray(dims)) or np.any(hi <= lo):
        raise ValueError("every range needs 0 <= lo < hi <= dims (half-open, non-empty)")
    return lo, hi


def range_set_matrix(dims, lo, hi) -> sparse.csr_matrix:
    """Sparse 0/1 matrix (m x n) of the boxes [lo, hi) over a product domain (row-major cells)."""
    dims = _check_dims(dims)
    lo, hi = _check_boxes(dims, lo, hi)
    # cell-by-cell membership via per-dimension masks, processed in chunks of queries
    coords = np.indices(dims).reshape(len(dims), -1)
    rows, cols = [], []
    step = max(1, 2_000_000 // max(1, coords.shape[1]))
    for s in range(0, lo.shape[0], step):
        inside = np.ones((min(step, lo.shape[0] - s), coords.shape[1]), dtype=bool)
        for k in range(len(dims)):
            c = coords[k][None, :]
            inside &= (c >= lo[s : s + step, k : k + 1]) & (c < hi[s : s + step, k : k + 1])
        r, c = np.nonzero(inside)
        rows.append(r + s)
        cols.append(c)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    return sparse.csr_matrix((np.ones(r.size), (r, c)), shape=(lo.shape[0], coords.shape[1]))


def range_set_gram(dims, lo, hi) -> np.ndarray:
    """Gram sum_r 1_r 1_r^T of a set of boxes.

    1-D: a 2-D difference array (+1 at (a,a), (b,b); -1 at (a,b), (b,a)) and two cumulative sums,
    O(m + n^2).  k-D: the sparse indicator matrix R and R^T R.
    """
    dims = _check_dims(dims)
    lo, hi = _check_boxes(dims, lo, hi)
    if len(dims) == 1:
        n = dims[0]
        a, b = lo[:, 0], hi[:, 0]
        diff = np.zeros((n + 1, n + 1))
        np.add.at(diff, (a, a), 1.0)
        np.add.at(diff, (b, b), 1.0)
        np.add.at(diff, (a, b), -1.0)
        np.add.at(diff, (b, a), -1.0)
        return diff.cumsum(0).cumsum(1)[:n, :n]
    r = range_set_matrix(dims, lo, hi)
    return (r.T @ r).toarray()


def range_set(dims, lo, hi, *, name: str = "ranges") -> Workload:
    """A workload of explicit boxes [lo, hi); duplicates count twice (they are rows of W)."""
    dims = _check_dims(dims)
    lo, hi = _check_boxes(dims, lo, hi)
    return Workload(f"{name}:" + "x".join(map(str, dims)), dims, range_set_gram(dims, lo, hi), lo.shape[0],
                    ranges=(lo, hi))


def _decode_range_index(idx: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Map indices in [0, d(d+1)/2) to the ranges [a, b) of all_ranges_1d(d) (same order)."""
    a, b = all_ranges_1d(d)
    return a[idx], b[idx]


def sample_ranges(dims, size: int, *, rng: np.random.Generator, bias: float | None = None):
    """Sample ``size`` distinct ranges of the AllRange workload over ``dims`` (Fig 2).

    ``bias=None``: uniform over all m ranges, without replacement.  ``bias=lam``: the "biased" sampling
    (the paper's footnote is self-contradictory; this is the spec's reading, tagged [L]): P(range) is
    proportional to exp(-lam * dist), dist = the smallest distance, relative to the dimension's size,
    from the domain centre to an edge of the range.  Returns (lo, hi) arrays of shape (size, k).
    """
    dims = _check_dims(dims)
    sizes = [d * (d + 1) // 2 for d in dims]
    m = int(np.prod(sizes))
    if not 0 < size <= m:
        raise ValueError(f"size must be in [1, {m}], got {size}")
    per_dim = [all_ranges_1d(d) for d in dims]
    if bias is None:
        idx = rng.choice(m, size=size, replace=False)
    else:
        dist = np.full(m, np.inf)
        for k, (d, (a, b)) in enumerate(zip(dims, per_dim)):
            c = d / 2.0
            dk = np.minimum(np.abs(a - c), np.abs(b - c)) / d
            shape = [1] * len(dims)
            shape[k] = -1
            dist = np.minimum(dist.reshape(sizes), dk.reshape(shape)).ravel()
        w = np.exp(-bias * (dist - dist.min()))
        idx = rng.choice(m, size=size, replace=False, p=w / w.sum())
    sub = np.unravel_index(idx, sizes)
    lo = np.stack([per_dim[k][0][sub[k]] for k in range(len(dims))], axis=1)
    hi = np.stack([per_dim[k][1][sub[k]] for k in range(len(dims))], axis=1)
    return lo, hi


def coverage_ranges(n: int, size: int, coverage: float, *, rng: np.random.Generator):
    """Random 1-D ranges with average coverage ``coverage`` (fraction of the domain), Fig 3(b).

    The paper does not give its generator; ours (spec Sec. 4, [L]): length ~ U[0.5, 1.5] * coverage * n
    rounded and clipped to [1, n], start uniform among the positions where the range fits.  For
    ``coverage >= 0.99`` the length is uniform on the integers [ceil(0.99 n), n] instead.
    Returns (lo, hi) of shape (size,).
    """
    if not 0 < coverage <= 1:
        raise ValueError("coverage must be in (0, 1]")
    if coverage >= 0.99:
        length = rng.integers(int(np.ceil(0.99 * n)), n + 1, size=size)
    else:
        length = np.clip(np.rint(rng.uniform(0.5, 1.5, size) * coverage * n), 1, n).astype(np.int64)
    start = rng.integers(0, n - length + 1)
    return start, start + length


def coverage_groups(lo, hi, n: int, edges) -> list[np.ndarray]:
    """Group 1-D ranges by coverage (length / n) into the bins [edges[i], edges[i+1]); index arrays."""
    cov = (np.asarray(hi) - np.asarray(lo)) / n
    edges = np.asarray(edges, dtype=float)
    which = np.digitize(cov, edges) - 1
    return [np.flatnonzero(which == i) for i in range(len(edges) - 1)]


# ------------------------------------------------------------------------------------------ utilities
def drop_dead_cells(gram: np.ndarray, *, tol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Remove cells no query touches (zero diagonal of G, i.e. zero columns of W).

    Dead cells do not change W x but make the SVD bound and the optimisers degenerate, so they must be
    dropped before any computation (spec Sec. 1).  Returns (G restricted to live cells, live mask).
    """
    live = np.diag(gram) > tol
    return gram[np.ix_(live, live)], live


def compress_ranges_1d(n: int, lo, hi) -> tuple[int, np.ndarray, np.ndarray]:
    """Drop the cells no 1-D range covers and re-index the ranges on the live cells.

    Ranges stay contiguous (a dead cell lies inside no range).  Returns (n_live, lo', hi').
    """
    lo = np.asarray(lo, np.int64).ravel()
    hi = np.asarray(hi, np.int64).ravel()
    cover = np.zeros(n + 1, np.int64)
    np.add.at(cover, lo, 1)
    np.add.at(cover, hi, -1)
    live = np.cumsum(cover)[:n] > 0
    new = np.cumsum(live) - 1
    return int(live.sum()), new[lo], new[hi - 1] + 1


def parse_workload(spec: str) -> Workload:
    """Parse ``kind:dims`` such as ``allrange:512``, ``allrange:16x8x8``, ``prefix:256``,
    ``allpredicate:8``, ``marginals2:4x4x4``, ``rangemarginals:32x32`` (ranges over each 1-way marginal)."""
    try:
        kind, arg = spec.split(":", 1)
        dims = tuple(int(t) for t in arg.lower().split("x"))
    except ValueError:
        raise ValueError(f"bad workload spec {spec!r}; expected e.g. allrange:32x32") from None
    if kind == "allrange":
        return allrange(dims)
    if kind == "prefix" and len(dims) == 1:
        return prefix(dims[0])
    if kind == "allpredicate" and len(dims) == 1:
        return allpredicate(dims[0])
    if kind.startswith("marginals") and kind[9:].isdigit():
        return marginals(dims, int(kind[9:]))
    if kind == "rangemarginals":
        return range_marginals(dims, [(i,) for i in range(len(dims))])
    raise ValueError(f"unknown workload kind {kind!r} in {spec!r}")
