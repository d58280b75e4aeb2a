"""Generalized least squares over LDP level / grid estimates (spec ``matrix_mechanism.md`` Sec. 6(b)).

**LDP, not central DP.**  Users are split into groups g (fractions p_g, N_g users); group g reports the
block of its value in a public partition P_g of the cells through a frequency oracle at the full eps, so
every user is eps-LDP by the oracle alone.  Everything here is post-processing of the oracles' unbiased block
frequency estimates y_g (frequency scale, f = x / N), so it costs no privacy.

Model: y = A f + e, A = the stacked block indicators of all groups, Cov(e) = Sigma = blockdiag(Sigma_g).
With the f-free oracle variance, Sigma_g = (V_g / N_g) I (OLH: V = q(1-q)/(p-q)^2, blocks uncorrelated
under a 3-wise independent hash family).  The GLS estimate

    M = A^T Sigma^-1 A = sum_g (N_g / V_g) P_g^T P_g,     f_tilde = M^-1 A^T Sigma^-1 y,

is unbiased and the BLUE for queries in rowspace(A) under that Sigma.  The public user count is imposed as
the linear constraint 1^T f = 1 (frequency scale):

    f_hat = f_tilde + M^-1 1 (1 - 1^T f_tilde) / (1^T M^-1 1)  =  L y + c,
    L = (I - M^-1 1 1^T / (1^T M^-1 1)) M^-1 A^T Sigma^-1,     c = M^-1 1 / (1^T M^-1 1),

which makes a root level unnecessary.  Cov(f_hat) = L Sigma_true L^T for any true block covariance
(the sandwich; :meth:`GLS.covariance`), so the predicted error of a query w is w L Sigma_true L^T w^T.

With equal V_g, M is exactly the LSA objective's M with level multiplicities proportional to N_g, so an
LSA strategy says which partitions the user groups should report and how many users each gets
(:func:`groups_from_lsa`).  Caveats (spec Sec. 6(b)): the f-dependent variance term and within-level
correlations (GRR) are not in the default Sigma, so the f-free error is approximate (use the sandwich
with the exact block variances to predict); non-negativity or Norm-Sub after GLS make the estimator
non-linear and void the formula; a rank-deficient M (coarse grids only) gives the pseudo-inverse
solution, whose error formula is the variance only (bias from within-block uniformity is data-dependent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldp.matrix._threads import limited
from ldp.matrix.bounds import pinv_psd

__all__ = ["LevelGroup", "GLS", "groups_from_lsa", "oracle_block_variances", "dyadic_decomposition"]


@dataclass(frozen=True)
class LevelGroup:
    """One user group: the partition it reports and its noise.

    Attributes:
        labels: (n,) block id (0 .. B-1) of every cell.
        users: N_g, the group's number of reports.
        variance: V_g, the f-free variance factor of one block estimate (block variance = V_g / N_g),
            scalar or per block (B,); e.g. ``oracle.variance(1)`` of the group's oracle.
    """

    labels: np.ndarray
    users: int
    variance: float | np.ndarray

    @property
    def blocks(self) -> int:
        return int(np.max(self.labels)) + 1


def _indicator(labels: np.ndarray) -> np.ndarray:
    b = int(labels.max()) + 1
    ind = np.zeros((b, labels.size))
    ind[labels, np.arange(labels.size)] = 1.0
    return ind


class GLS:
    """GLS (with the public-total constraint) over the block estimates of level groups.

    Args:
        groups: the groups; every ``labels`` has the same length n (cells).
        total: the public constraint 1^T f = total (1 on the frequency scale); None for plain GLS.
    Raises:
        ValueError for inconsistent groups or non-positive users / variances.
    Shapes: ``estimate`` takes one (B_g,) array per group and returns f_hat (n,).
    """

    @limited
    def __init__(self, groups: Sequence[LevelGroup], *, total: float | None = 1.0):
        if not groups:
            raise ValueError("no groups")
        n = int(np.asarray(groups[0].labels).size)
        blocks, weights = [], []
        for i, g in enumerate(groups):
            lab = np.asarray(g.labels, dtype=np.int64)
            if lab.shape != (n,) or lab.min() < 0:
                raise ValueError(f"group {i}: labels must be a length-{n} array of block ids >= 0")
            if len(np.unique(lab)) != lab.max() + 1:
                raise ValueError(f"group {i}: block ids must be 0 .. B-1 without gaps")
            if g.users <= 0:
                raise ValueError(f"group {i}: users must be positive")
            v = np.broadcast_to(np.asarray(g.variance, dtype=float), (lab.max() + 1,))
            if np.any(v <= 0):
                raise ValueError(f"group {i}: variances must be positive")
            blocks.append(_indicator(lab))
            weights.append(g.users / v)
        self.groups = list(groups)
        self.n = n
        self.a = np.vstack(blocks)
        self.sizes = [b.shape[0] for b in blocks]
        self.w = np.concatenate(weights)  # Sigma^-1 diagonal
        m = (self.a.T * self.w) @ self.a
        minv, null = pinv_psd(m)
        self.rank_deficient = null.shape[1] > 0
        base = minv @ (self.a.T * self.w)  # (n, P)
        self.total = total
        if total is None:
            self.l, self.c = base, np.zeros(n)
        else:
            u = minv @ np.ones(n)
            s = float(np.ones(n) @ u)
            self.l = base - np.outer(u, np.ones(n) @ base) / s
            self.c = u * (total / s)
        self.m_inv = minv

    def _stack(self, per_group: Sequence[np.ndarray]) -> np.ndarray:
        if len(per_group) != len(self.groups):
            raise ValueError(f"need one estimate array per group ({len(self.groups)}), got {len(per_group)}")
        for i, (y, b) in enumerate(zip(per_group, self.sizes)):
            if np.shape(y) != (b,):
                raise ValueError(f"group {i}: expected {b} block estimates, got shape {np.shape(y)}")
        return np.concatenate([np.asarray(y, dtype=float) for y in per_group])

    def estimate(self, block_estimates: Sequence[np.ndarray]) -> np.ndarray:
        """f_hat = L y + c, shape (n,) (unbiased; sums to ``total`` when constrained)."""
        return self.l @ self._stack(block_estimates) + self.c

    def covariance(self, block_covariances: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """Cov(f_hat) = L Sigma L^T, (n, n).

        ``block_covariances``: per group either (B_g,) block variances (blocks uncorrelated, e.g. OLH with a
        3-wise independent family and fixed user values) or a (B_g, B_g) covariance (e.g. with the
        multinomial term of users drawn i.i.d.); groups are independent.  Default: the f-free model V_g/N_g.
        """
        if block_covariances is None:
            return (self.l * (1.0 / self.w)) @ self.l.T
        if len(block_covariances) != len(self.groups):
            raise ValueError(f"need one covariance per group ({len(self.groups)})")
        out = np.zeros((self.n, self.n))
        start = 0
        for i, (cov, b) in enumerate(zip(block_covariances, self.sizes)):
            cov = np.asarray(cov, dtype=float)
            lg = self.l[:, start : start + b]
            if cov.shape == (b,):
                out += (lg * cov) @ lg.T
            elif cov.shape == (b, b):
                out += lg @ cov @ lg.T
            else:
                raise ValueError(f"group {i}: covariance must be ({b},) or ({b}, {b}), got {cov.shape}")
            start += b
        return out

    def query_variance(self, w, block_covariances: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """Predicted variance of each query w f_hat, shape (m,) (dense or sparse W)."""
        cov = self.covariance(block_covariances)
        wc = np.asarray(w @ cov)
        if hasattr(w, "multiply"):
            return np.asarray(w.multiply(wc).sum(axis=1)).ravel()
        return np.einsum("ij,ij->i", w, wc)

    def total_error(self, gram: np.ndarray, block_covariances: Sequence[np.ndarray] | None = None) -> float:
        """Predicted sum of squared errors of a workload, tr(G Cov(f_hat))."""
        return float(np.einsum("ij,ji->", gram, self.covariance(block_covariances)))


def groups_from_lsa(strategy, users: int, variance: float) -> list[LevelGroup]:
    """User groups from an LSA strategy: one group per distinct level, users proportional to its
    multiplicity (Thm 3.2 weights = group shares).  ``strategy.info['level_labels']`` holds the levels.
    """
    labels = strategy.info.get("level_labels")
    if labels is None:
        raise ValueError("strategy has no level labels (build it with ldp.matrix.lsa.lsa)")
    keys: dict[bytes, list] = {}
    for lab in labels:
        lab = np.asarray(lab)
        keys.setdefault(lab.tobytes(), [lab, 0])[1] += 1
    total_mult = sum(c for _, c in keys.values())
    out = []
    for lab, count in keys.values():
        _, inv = np.unique(lab, return_inverse=True)
        out.append(LevelGroup(inv, max(1, round(users * count / total_mult)), variance))
    return out


def oracle_block_variances(oracle, users: int, block_frequencies: np.ndarray, *, iid: bool = False
                           ) -> np.ndarray:
    """Exact covariance of one group's block estimates at the true block frequencies F.

    Fixed user values (``iid=False``): the oracle's Eq. 4 per block, (q(1-q) + F(p-q)(1-p-q)) / (N (p-q)^2),
    blocks uncorrelated (OLH with a 3-wise independent family); returns (B,).  Users drawn i.i.d. from F
    (``iid=True``): plus the multinomial term (diag(F) - F F^T) / N; returns (B, B).
    """
    f = np.asarray(block_frequencies, dtype=float)
    var = np.asarray(oracle.variance(users, f), dtype=float)
    if not iid:
        return var
    return np.diag(var) + (np.diag(f) - np.outer(f, f)) / users


def dyadic_decomposition(n: int, lo, hi, *, root: bool = False) -> np.ndarray:
    """The baseline without inference: each range [a, b) as the sum of its maximal dyadic blocks.

    Columns are the stacked blocks of the binary levels of ``strategies.level_labels_hierarchical(n, 2,
    root=root)`` (level l has 2^l blocks of n / 2^l cells; n a power of two).  Returns R (m, #blocks) with
    R @ A = W, so R y answers the ranges from the block estimates y directly (Hay et al.'s canonical
    decomposition, no consistency step).
    """
    h = int(round(np.log2(n)))
    if 2**h != n:
        raise ValueError("dyadic_decomposition needs n a power of two")
    first = 0 if root else 1
    offsets = np.concatenate([[0], np.cumsum([2**lev for lev in range(first, h + 1)])])
    lo = np.asarray(lo, np.int64).ravel()
    hi = np.asarray(hi, np.int64).ravel()
    r = np.zeros((lo.size, int(offsets[-1])))
    for row, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        stack = [(0, 0)]
        while stack:
            lev, idx = stack.pop()
            size = n >> lev
            s, e = idx * size, (idx + 1) * size
            if e <= a or s >= b:
                continue
            if a <= s and e <= b and lev >= first:
                r[row, offsets[lev - first] + idx] = 1.0
                continue
            stack += [(lev + 1, 2 * idx), (lev + 1, 2 * idx + 1)]
    return r
