"""Strategy matrices for the matrix mechanism: identity, hierarchical H_b, Haar wavelet (Kronecker in k-D).

A strategy A (p x n) is measured with Gaussian noise of scale c * Delta_2(A), Delta_2(A) = max_j |A e_j|_2
(add/remove-one-tuple neighbours; (eps, delta)-DP with c from ``ldp.matrix.mechanism``).  Level strategies
(stacks of partitions of the cells) are column-uniform and hence minimal (Thm 3.1), with Delta_2^2 = number of
levels; duplicate rows act as weights (Thm 3.2) and are merged into sqrt(count) * row.

LSA lives in ``ldp.matrix.lsa`` and the certified optimum in ``ldp.matrix.opt``; all return ``Strategy``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce

import numpy as np

__all__ = [
    "Strategy",
    "identity",
    "hierarchical",
    "haar",
    "kron",
    "from_levels",
    "level_labels_hierarchical",
    "merge_duplicate_rows",
    "make_strategy",
]


@dataclass(frozen=True)
class Strategy:
    """A strategy matrix with what the analysis needs.

    Attributes:
        name: label (``identity``, ``h2``, ``haar``, ``lsa``, ``opt``, ...).
        matrix: A, shape (p, n).
        levels: number of partition levels for level strategies (Delta_2^2 = levels), else None.
        info: solver diagnostics (LSA per-level errors, OPT duality gap, ...), JSON-friendly.
        gram_matrix: A^T A when the builder already knows it (saves an O(p n^2) product).
    """

    name: str
    matrix: np.ndarray
    levels: int | None = None
    info: dict = field(default_factory=dict)
    gram_matrix: np.ndarray | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return self.matrix.shape[1]

    def gram(self) -> np.ndarray:
        """A^T A, shape (n, n)."""
        if self.gram_matrix is not None:
            return self.gram_matrix
        return self.matrix.T @ self.matrix

    def sensitivity(self) -> float:
        """L2 sensitivity Delta_2(A) = max column L2 norm (add/remove-one neighbours)."""
        if self.gram_matrix is not None:
            return float(np.sqrt(np.max(np.diag(self.gram_matrix))))
        return float(np.sqrt(np.max(np.sum(self.matrix**2, axis=0))))

    def sensitivity_l1(self) -> float:
        """L1 sensitivity Delta_1(A) = max column L1 norm (the Laplace variant only)."""
        return float(np.max(np.sum(np.abs(self.matrix), axis=0)))

    def sensitivity_replace(self) -> float:
        """Replace-one sensitivity max_{u,v} |A(e_u - e_v)|_2 (exact, O(n^2 p) via the Gram)."""
        g = self.gram()
        d = np.diag(g)
        return float(np.sqrt(max(0.0, np.max(d[:, None] + d[None, :] - 2 * g))))


def identity(n: int) -> Strategy:
    """The identity strategy I_n: one level of singletons, Delta_2 = 1."""
    return Strategy("identity", np.eye(n), levels=1, gram_matrix=np.eye(n))


def _split_sizes(size: int, b: int) -> list[int]:
    q, r = divmod(size, b)
    return [q + (1 if i < r else 0) for i in range(b) if q + (1 if i < r else 0) > 0]


def level_labels_hierarchical(n: int, b: int, *, root: bool = True) -> list[np.ndarray]:
    """Partitions of a b-ary tree over [0, n): each block split into b near-equal parts, to singletons.

    Returns a list of label arrays (length n, block ids) from the root (or its children if not ``root``)
    down to the leaves.
    """
    if b < 2:
        raise ValueError("branching b must be >= 2")
    blocks = [(0, n)]
    out = []
    while True:
        lab = np.empty(n, dtype=np.int64)
        for k, (a, e) in enumerate(blocks):
            lab[a:e] = k
        out.append(lab)
        if all(e - a == 1 for a, e in blocks):
            break
        nxt = []
        for a, e in blocks:
            s = a
            for size in _split_sizes(e - a, b):
                nxt.append((s, s + size))
                s += size
        blocks = nxt
    return out if root else out[1:]


def from_levels(
    name: str, labels: list[np.ndarray], *, merge: bool = True, info: dict | None = None
) -> Strategy:
    """A level strategy: the stacked 0/1 block-indicator rows of each partition.

    Args:
        labels: one array per level, length n, the block id of each cell.
        merge: merge identical rows into sqrt(count) * row (Thm 3.2, same A^T A and sensitivity).
    Delta_2^2 = len(labels) (every cell lies in exactly one block per level).
    """
    rows = []
    for lab in labels:
        lab = np.asarray(lab)
        _, inv = np.unique(lab, return_inverse=True)
        ind = np.zeros((inv.max() + 1, lab.size))
        ind[inv, np.arange(lab.size)] = 1.0
        rows.append(ind)
    a = np.vstack(rows)
    if merge:
        a = merge_duplicate_rows(a)
    return Strategy(name, a, levels=len(labels), info=info or {})


def merge_duplicate_rows(a: np.ndarray) -> np.ndarray:
    """Replace each group of identical rows r (count c) by sqrt(c) * r (Thm 3.2)."""
    uniq, counts = np.unique(a, axis=0, return_counts=True)
    return uniq * np.sqrt(counts)[:, None]


def _h_1d(n: int, b: int, root: bool) -> np.ndarray:
    return from_levels("h", level_labels_hierarchical(n, b, root=root), merge=True).matrix


def _haar_1d(n: int) -> np.ndarray:
    """Unnormalised Haar (Privelet) rows over [0, n): the total, then +1/-1 halves of each dyadic block.

    For n not a power of two the halves are floor/ceil splits (a generalised Haar basis, still
    invertible; no longer column-uniform).
    """
    rows = [np.ones(n)]
    blocks = [(0, n)]
    while blocks:
        nxt = []
        for a, e in blocks:
            if e - a < 2:
                continue
            mid = a + (e - a + 1) // 2
            r = np.zeros(n)
            r[a:mid] = 1.0
            r[mid:e] = -1.0
            rows.append(r)
            nxt += [(a, mid), (mid, e)]
        blocks = nxt
    return np.vstack(rows)


def kron(name: str, mats) -> Strategy:
    """Kronecker product of per-dimension strategy matrices (row-major cells)."""
    mats = list(mats)
    return Strategy(name, reduce(np.kron, mats))


def hierarchical(dims, b: int = 2, *, root: bool = True) -> Strategy:
    """Hierarchical H_b (Hay et al.): all levels of a b-ary tree, unit weights, Delta_2^2 = #levels.

    In k-D: the Kronecker product of the 1-D trees (Delta_2^2 = product of the level counts).
    """
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    name = f"h{b}" + ("" if root else "-noroot")
    if len(dims) == 1:
        labels = level_labels_hierarchical(dims[0], b, root=root)
        return from_levels(name, labels)
    s = kron(name, [_h_1d(d, b, root) for d in dims])
    levels = int(np.prod([len(level_labels_hierarchical(d, b, root=root)) for d in dims]))
    return Strategy(name, s.matrix, levels=levels)  # a stack of product partitions


def haar(dims) -> Strategy:
    """Haar wavelet strategy (Privelet): 1-D Haar rows, Kronecker product in k-D (as ektelo's Wavelet).

    For n = 2^h, Delta_2^2 = h + 1 and Y^T Y = 2I + sum of the interior dyadic levels.
    """
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    return kron("haar", [_haar_1d(d) for d in dims])


def make_strategy(name: str, workload, **kw) -> Strategy:
    """Build a strategy by name for a workload: identity, h2 / h<b>, haar, lsa, opt, or lsa-kron (the
    Kronecker product of 1-D LSA strategies of a product workload's factors; Delta_2^2 = product of the
    factors' level counts)."""
    dims = workload.dims
    n = workload.n
    if name == "identity":
        return identity(n)
    if name == "haar":
        return haar(dims)
    if name.startswith("h") and name[1:].isdigit():
        return hierarchical(dims, int(name[1:]))
    if name == "lsa":
        from ldp.matrix.lsa import lsa

        return lsa(workload, **kw)
    if name == "opt":
        from ldp.matrix.opt import opt

        return opt(workload, **kw)
    if name == "lsa-kron":
        from ldp.matrix.lsa import lsa

        if workload.factors is None:
            raise ValueError("lsa-kron needs a Kronecker (product-domain) workload")
        parts = [lsa(f, **kw) for f in workload.factors]
        s = kron("lsa-kron", [p.matrix for p in parts])
        return Strategy("lsa-kron", s.matrix, levels=int(np.prod([p.levels for p in parts])),
                        info={"factor_levels": [p.levels for p in parts]})
    raise ValueError(f"unknown strategy {name!r}; known: identity, h<b>, haar, lsa, lsa-kron, opt")
