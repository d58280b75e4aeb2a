"""Level Selection Algorithm (LSA), Li & Miklau Program 4.1, with the incremental inverse of App. D.2.

Search space.  A *level* is a partition of the cells into axis-aligned boxes (intervals in 1-D); its
strategy rows are the block indicators.  A strategy is a stack of levels L, so every column has squared
norm |L| (column-uniform, hence minimal by Thm 3.1) and Delta_2^2 = |L|.  With M = A^T A = sum_l P_l,
P_l = sum_blocks 1_S 1_S^T, the expected total error at c = 1 is |L| * tr(G M^-1).

Greedy (reconstructed from the text, spec Sec. 2; the initial identity level makes M invertible and
makes "never worse than identity" hold by construction):

    L = [identity], M = I
    while |L| < k_max:
        start the level at the root box: M' = M + 1 1^T
        repeatedly split the box/axis/cut with the largest reduction of f' = tr(G M'^-1); stop when no
        split reduces it by more than tau * f'
        accept the level if (|L| + 1) f' < (1 - min_improvement) |L| f; otherwise try to duplicate
        the best existing level (legal reweighting, Thm 3.2); stop if that fails too

Splitting box S into S1 | S2 changes M' by U C U^T, U = [1_S1, 1_S2], C = [[0, -1], [-1, 0]] (rank 2,
C^-1 = C).  With B = M'^-1 and Y = B G B (Woodbury):

    K = C + U^T B U,   gain = tr(K^-1 U^T Y U),   B <- B - (BU) K^-1 (BU)^T,
    Y <- Y - V Q V^T,  V = [YU, BU],  Q = [[0, K^-1], [K^-1, -K^-1 (U^T Y U) K^-1]].

Every candidate (box, axis, cut) needs only the six sub-box sums u^T B u, u^T B v, v^T B v and the same
of Y; we keep them for all candidates and update them after a split from summed-area tables of BU and
YU (O(#candidates * 2^D)), computing fresh sums only for the two new boxes (O(|S|^2)).  The state is
re-inverted exactly every ``reinvert_every`` splits and at the end of each level; the largest relative
drift of the incremental f' is reported in ``info["max_drift"]`` (a drift above 1e-6 raises).

Privacy: the output is a 0/1 level strategy; with sigma = c(eps, delta) sqrt(|L|) it is (eps, delta)-DP for
add/remove-one neighbours.  Level strategies can also be run by LDP frequency oracles (one user group per
level), see docs/matrix_mechanism.md.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg

from ldp.matrix._threads import limited
from ldp.matrix.strategies import Strategy, from_levels
from ldp.matrix.workloads import Workload

__all__ = ["lsa", "LsaState"]


def _inv_spd(m: np.ndarray) -> np.ndarray:
    c = linalg.cho_factor(m, lower=True, check_finite=False)
    inv = linalg.cho_solve(c, np.eye(m.shape[0]), check_finite=False)
    return (inv + inv.T) / 2


def _partition_gram(labels: np.ndarray) -> np.ndarray:
    """P = sum over blocks of 1_S 1_S^T for a label array."""
    return (labels[:, None] == labels[None, :]).astype(float)


class LsaState:
    """The greedy split state of one level: B = M'^-1, Y = B G B, the boxes and all candidate sums."""

    def __init__(self, g: np.ndarray, dims: tuple[int, ...], m_base: np.ndarray, b_base: np.ndarray):
        self.g = g
        self.dims = dims
        self.n = g.shape[0]
        self.coords = np.indices(dims).reshape(len(dims), -1)
        self.m_base = m_base
        ones = np.ones(self.n)
        b1 = b_base @ ones
        self.b = b_base - np.outer(b1, b1) / (1.0 + ones @ b1)  # Sherman-Morrison: (M + 11^T)^-1
        self.b = (self.b + self.b.T) / 2
        self.y = self.b @ g @ self.b
        self.f = float(np.einsum("ij,ji->", g, self.b))
        self.boxes: dict[int, tuple[np.ndarray, np.ndarray]] = {0: (np.zeros(len(dims), np.int64),
                                                                    np.asarray(dims, np.int64))}
        self.next_id = 1
        self.labels = np.zeros(self.n, dtype=np.int64)
        self.splits = 0
        self.max_drift = 0.0
        self._empty_candidates()
        self._add_box_candidates(0)

    # ---------------------------------------------------------------------------------- candidates
    def _empty_candidates(self):
        d = len(self.dims)
        self.c_box = np.zeros(0, np.int64)
        self.c_axis = np.zeros(0, np.int64)
        self.c_t = np.zeros(0, np.int64)
        self.c_lo1 = np.zeros((0, d), np.int64)
        self.c_hi1 = np.zeros((0, d), np.int64)
        self.c_lo2 = np.zeros((0, d), np.int64)
        self.c_hi2 = np.zeros((0, d), np.int64)
        self.c_stats = np.zeros((0, 6))  # pB, qB, rB, pY, qY, rY

    def _cells(self, lo, hi) -> np.ndarray:
        inside = np.all((self.coords >= lo[:, None]) & (self.coords < hi[:, None]), axis=0)
        return np.flatnonzero(inside)

    def _fresh_box(self, box_id: int):
        """Candidate cuts of one box with their sub-box sums, from the current B and Y (O(D |S|^2))."""
        lo, hi = self.boxes[box_id]
        sh = tuple(int(e) for e in hi - lo)
        d = len(sh)
        idx = self._cells(lo, hi)
        out = []
        mats = [self.b[np.ix_(idx, idx)].reshape(sh + sh), self.y[np.ix_(idx, idx)].reshape(sh + sh)]
        for j in range(d):
            e = sh[j]
            if e < 2:
                continue
            others = tuple(k for k in range(d) if k != j) + tuple(d + k for k in range(d) if k != j)
            stats = []
            for mat in mats:
                t2 = mat.sum(axis=others) if others else mat
                p = np.zeros((e + 1, e + 1))
                p[1:, 1:] = t2.cumsum(0).cumsum(1)
                c = np.arange(1, e)
                pp = p[c, c]
                q = p[c, e] - pp
                r = p[e, e] - p[c, e] - p[e, c] + pp
                stats += [pp, q, r]
            t_abs = lo[j] + np.arange(1, e)
            lo1 = np.repeat(lo[None, :], e - 1, 0)
            hi1 = np.repeat(hi[None, :], e - 1, 0)
            hi1[:, j] = t_abs
            lo2 = np.repeat(lo[None, :], e - 1, 0)
            lo2[:, j] = t_abs
            hi2 = np.repeat(hi[None, :], e - 1, 0)
            out.append((np.full(e - 1, j), t_abs, lo1, hi1, lo2, hi2, np.stack(stats, 1)))
        return out

    def _add_box_candidates(self, box_id: int):
        for axis, t, lo1, hi1, lo2, hi2, st in self._fresh_box(box_id):
            self.c_box = np.concatenate([self.c_box, np.full(t.size, box_id)])
            self.c_axis = np.concatenate([self.c_axis, axis])
            self.c_t = np.concatenate([self.c_t, t])
            self.c_lo1 = np.concatenate([self.c_lo1, lo1])
            self.c_hi1 = np.concatenate([self.c_hi1, hi1])
            self.c_lo2 = np.concatenate([self.c_lo2, lo2])
            self.c_hi2 = np.concatenate([self.c_hi2, hi2])
            self.c_stats = np.concatenate([self.c_stats, st])

    def gains(self) -> np.ndarray:
        pb, qb, rb, py, qy, ry = self.c_stats.T
        det = pb * rb - (qb - 1.0) ** 2
        return (rb * py + 2.0 * (1.0 - qb) * qy + pb * ry) / det

    # --------------------------------------------------------------------------------- box sums
    def _box_sums(self, sat: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Sums of a (n, k) field over many boxes via a padded k-D summed-area table; shape (nb, k)."""
        d = len(self.dims)
        total = np.zeros((lo.shape[0], sat.shape[-1]))
        for corner in range(2**d):
            pick = [(corner >> k) & 1 for k in range(d)]
            idx = tuple(np.where(pick[k], hi[:, k], lo[:, k]) for k in range(d))
            sign = -1.0 if (d - sum(pick)) % 2 else 1.0
            total += sign * sat[idx]
        return total

    def _sat(self, field: np.ndarray) -> np.ndarray:
        k = field.shape[1]
        s = field.reshape(self.dims + (k,))
        for ax in range(len(self.dims)):
            s = s.cumsum(axis=ax)
        pad = np.zeros(tuple(d + 1 for d in self.dims) + (k,))
        pad[tuple(slice(1, None) for _ in self.dims)] = s
        return pad

    # ------------------------------------------------------------------------------------- split
    def split(self, c: int) -> float:
        """Apply candidate c (split its box); returns the exact gain used."""
        box_id = int(self.c_box[c])
        lo1, hi1, lo2, hi2 = self.c_lo1[c], self.c_hi1[c], self.c_lo2[c], self.c_hi2[c]
        i1, i2 = self._cells(lo1, hi1), self._cells(lo2, hi2)
        z = np.stack([self.b[i1].sum(0), self.b[i2].sum(0)], 1)  # B U  (B symmetric)
        yu = np.stack([self.y[i1].sum(0), self.y[i2].sum(0)], 1)
        utbu = np.array([[z[i1, 0].sum(), z[i2, 0].sum()], [z[i1, 1].sum(), z[i2, 1].sum()]])
        utyu = np.array([[yu[i1, 0].sum(), yu[i2, 0].sum()], [yu[i1, 1].sum(), yu[i2, 1].sum()]])
        utbu = (utbu + utbu.T) / 2
        utyu = (utyu + utyu.T) / 2
        k = utbu + np.array([[0.0, -1.0], [-1.0, 0.0]])
        kinv = np.linalg.inv(k)
        gain = float(np.trace(kinv @ utyu))
        # rank-2 update of B and rank-4 update of Y
        zk = z @ kinv
        self.b -= zk @ z.T
        v = np.concatenate([yu, z], 1)
        q = np.zeros((4, 4))
        q[:2, 2:] = kinv
        q[2:, :2] = kinv
        q[2:, 2:] = -kinv @ utyu @ kinv
        self.y -= (v @ q) @ v.T
        self.f -= gain
        # bookkeeping of boxes
        keep = self.c_box != box_id
        for name in ("c_box", "c_axis", "c_t", "c_lo1", "c_hi1", "c_lo2", "c_hi2", "c_stats"):
            setattr(self, name, getattr(self, name)[keep])
        del self.boxes[box_id]
        id1, id2 = self.next_id, self.next_id + 1
        self.next_id += 2
        self.boxes[id1] = (lo1.copy(), hi1.copy())
        self.boxes[id2] = (lo2.copy(), hi2.copy())
        self.labels[i1] = id1
        self.labels[i2] = id2
        # rank-k corrections of the other candidates' sums
        if self.c_box.size:
            sat = self._sat(v)
            uv = self._box_sums(sat, self.c_lo1, self.c_hi1)  # (nc, 4): u^T [YU, Z]
            vv = self._box_sums(sat, self.c_lo2, self.c_hi2)
            uz, vz = uv[:, 2:], vv[:, 2:]
            st = self.c_stats
            st[:, 0] -= np.einsum("ci,ij,cj->c", uz, kinv, uz)
            st[:, 1] -= np.einsum("ci,ij,cj->c", uz, kinv, vz)
            st[:, 2] -= np.einsum("ci,ij,cj->c", vz, kinv, vz)
            st[:, 3] -= np.einsum("ci,ij,cj->c", uv, q, uv)
            st[:, 4] -= np.einsum("ci,ij,cj->c", uv, q, vv)
            st[:, 5] -= np.einsum("ci,ij,cj->c", vv, q, vv)
        self._add_box_candidates(id1)
        self._add_box_candidates(id2)
        self.splits += 1
        return gain

    def m_current(self) -> np.ndarray:
        return self.m_base + _partition_gram(self.labels)

    def reinvert(self) -> float:
        """Exact B, Y, f from M' and fresh candidate sums; returns the relative drift of f."""
        self.b = _inv_spd(self.m_current())
        self.y = self.b @ self.g @ self.b
        f_exact = float(np.einsum("ij,ji->", self.g, self.b))
        drift = abs(self.f - f_exact) / abs(f_exact)
        self.max_drift = max(self.max_drift, drift)
        if drift > 1e-6:
            raise RuntimeError(f"LSA incremental inverse drifted by {drift:.3g} (relative); this is a bug")
        self.f = f_exact
        self._empty_candidates()
        for box_id in sorted(self.boxes):
            self._add_box_candidates(box_id)
        return drift


@limited
def lsa(workload, *, k_max: int | None = None, tau: float = 1e-12, min_improvement: float = 0.0,
        duplicate_fallback: bool = True, reinvert_every: int = 128, dims=None, bound: float | None = None,
        ) -> Strategy:
    """Level Selection Algorithm (Program 4.1) for a workload.

    Args:
        workload: a Workload (its ``dims`` give the box geometry) or a Gram matrix (then ``dims`` or 1-D).
        k_max: bound on the number of levels, identity included; default ceil(log2 n) + 2.
        tau: a level stops splitting when the best gain is <= tau * f'.
        min_improvement: a new level must lower the total error by more than this fraction.  Default 0:
            any strict improvement is kept and ``k_max`` bounds the run.  (The spec's 0.5% rule stops
            AllRange(1024) at k = 11, ratio 1.306, because level 12 gains only 0.45% while levels 13-14
            then gain 3.5%.)
        duplicate_fallback: when the greedy level is rejected, try duplicating the best existing level.
        reinvert_every: exact re-inversion period (splits).
        bound: svdb, only to record per-level ratios in ``info``.
    Returns:
        Strategy ``lsa``: unique rows, weights sqrt(multiplicity); ``levels`` = |L| (Delta_2^2);
        ``info`` holds per-level errors (c = 1), how each level was obtained, splits, max_drift.
    Cost: O(n^2) per split plus O(|S|^2) for the split box; O(n^3) per level (inverse, Y).
    """
    if isinstance(workload, Workload):
        g, dims = workload.gram, workload.dims
    else:
        g = np.asarray(workload, dtype=float)
        dims = tuple(dims) if dims is not None else (g.shape[0],)
    n = g.shape[0]
    if int(np.prod(dims)) != n:
        raise ValueError(f"dims {dims} do not match the Gram size {n}")
    if k_max is None:
        k_max = math.ceil(math.log2(max(n, 2))) + 2
    if k_max < 1:
        raise ValueError("k_max must be >= 1")
    levels = [np.arange(n)]
    m = np.eye(n)
    b = np.eye(n)
    f = float(np.trace(g))
    history = [{"k": 1, "error": f, "how": "identity", "blocks": n}]
    max_drift = 0.0
    total_splits = 0
    while len(levels) < k_max:
        state = LsaState(g, dims, m, b)
        while state.c_box.size:
            gains = state.gains()
            c = int(np.argmax(gains))
            if not gains[c] > tau * state.f:
                break
            state.split(c)
            if state.splits % reinvert_every == 0:
                state.reinvert()
        state.reinvert()
        max_drift = max(max_drift, state.max_drift)
        total_splits += state.splits
        k = len(levels)
        new_err = (k + 1) * state.f
        if new_err < (1 - min_improvement) * k * f:
            _, lab = np.unique(state.labels, return_inverse=True)
            levels.append(lab)
            m = state.m_current()
            b, f = state.b, state.f
            history.append({"k": k + 1, "error": new_err, "how": "greedy", "blocks": int(lab.max() + 1)})
            continue
        if not duplicate_fallback:
            break
        best = None
        seen = set()
        for i, lab in enumerate(levels):
            key = lab.tobytes()
            if key in seen:
                continue
            seen.add(key)
            m_dup = m + _partition_gram(lab)
            b_dup = _inv_spd(m_dup)
            f_dup = float(np.einsum("ij,ji->", g, b_dup))
            if best is None or f_dup < best[0]:
                best = (f_dup, i, m_dup, b_dup)
        f_dup, i, m_dup, b_dup = best
        if (k + 1) * f_dup < (1 - min_improvement) * k * f:
            levels.append(levels[i].copy())
            m, b, f = m_dup, b_dup, f_dup
            history.append({"k": k + 1, "error": (k + 1) * f, "how": f"duplicate of level {i + 1}",
                            "blocks": int(levels[i].max() + 1)})
            continue
        break
    if bound is not None:
        for h in history:
            h["ratio"] = h["error"] / bound
    info = {"history": history, "splits": total_splits, "max_drift": max_drift, "k_max": k_max,
            "error": len(levels) * f}
    strat = from_levels("lsa", levels, merge=True, info=info)
    return Strategy("lsa", strat.matrix, levels=len(levels), info=info, gram_matrix=m)
