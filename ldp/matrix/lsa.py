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
        # integer columns: box id, axis, cut, lo1, hi1, lo2, hi2 (d each); S1 = [lo1, hi1), S2 = [lo2, hi2)
        self.c_int = np.zeros((0, 3 + 4 * d), np.int64)
        self.c_stats = np.zeros((0, 6))  # pB, qB, rB, pY, qY, rY

    @property
    def c_box(self) -> np.ndarray:
        return self.c_int[:, 0]

    @property
    def c_axis(self) -> np.ndarray:
        return self.c_int[:, 1]

    @property
    def c_t(self) -> np.ndarray:
        return self.c_int[:, 2]

    def _corners(self):
        d = len(self.dims)
        c = self.c_int[:, 3:]
        return c[:, :d], c[:, d : 2 * d], c[:, 2 * d : 3 * d], c[:, 3 * d :]

    def _cells(self, lo, hi):
        """Flat indices of a box, row-major (a slice in 1-D)."""
        if len(self.dims) == 1:
            return slice(int(lo[0]), int(hi[0]))
        grids = np.meshgrid(*[np.arange(a, b) for a, b in zip(lo, hi)], indexing="ij")
        return np.ravel_multi_index(grids, self.dims).ravel()

    def _block(self, mat: np.ndarray, idx) -> np.ndarray:
        return mat[idx, idx] if isinstance(idx, slice) else mat[np.ix_(idx, idx)]

    def _fresh_1d(self, box_id: int):
        """1-D fast path of :meth:`_fresh_box` (fewer array operations; same numbers)."""
        lo, hi = self.boxes[box_id]
        a, b = int(lo[0]), int(hi[0])
        e = b - a
        if e < 2:
            return [], []
        p = np.stack((self.b[a:b, a:b], self.y[a:b, a:b])).cumsum(1).cumsum(2)  # inclusive prefix sums
        d = np.arange(e - 1)
        pp = p[:, d, d]
        row = p[:, d, e - 1]
        col = p[:, e - 1, d]
        q = row - pp
        r = p[:, e - 1, e - 1][:, None] - row - col + pp
        t = a + 1 + d
        ints = np.empty((e - 1, 7), np.int64)
        ints[:, 0] = box_id
        ints[:, 1] = 0
        ints[:, 2] = t
        ints[:, 3] = a
        ints[:, 4] = t
        ints[:, 5] = t
        ints[:, 6] = b
        return [ints], [np.stack((pp[0], q[0], r[0], pp[1], q[1], r[1]), 1)]

    def _fresh_box(self, box_id: int):
        """Candidate cuts of one box with their sub-box sums, from the current B and Y (O(D |S|^2))."""
        if len(self.dims) == 1:
            return self._fresh_1d(box_id)
        lo, hi = self.boxes[box_id]
        sh = tuple(int(e) for e in hi - lo)
        d = len(sh)
        idx = self._cells(lo, hi)
        both = np.stack([self._block(self.b, idx), self._block(self.y, idx)]).reshape((2,) + sh + sh)
        ints, stats = [], []
        for j in range(d):
            e = sh[j]
            if e < 2:
                continue
            others = tuple(1 + k for k in range(d) if k != j) + tuple(1 + d + k for k in range(d) if k != j)
            t2 = both.sum(axis=others) if others else both  # (2, e, e)
            p = np.zeros((2, e + 1, e + 1))
            p[:, 1:, 1:] = t2.cumsum(1).cumsum(2)
            c = np.arange(1, e)
            pp = p[:, c, c]
            q = p[:, c, e] - pp
            r = p[:, e, e][:, None] - p[:, c, e] - p[:, e, c] + pp
            stats.append(np.stack([pp[0], q[0], r[0], pp[1], q[1], r[1]], 1))
            t_abs = lo[j] + c
            block = np.empty((e - 1, 3 + 4 * d), np.int64)
            block[:, 0] = box_id
            block[:, 1] = j
            block[:, 2] = t_abs
            block[:, 3 : 3 + d] = lo
            block[:, 3 + d : 3 + 2 * d] = hi
            block[:, 3 + d + j] = t_abs
            block[:, 3 + 2 * d : 3 + 3 * d] = lo
            block[:, 3 + 2 * d + j] = t_abs
            block[:, 3 + 3 * d :] = hi
            ints.append(block)
        return ints, stats

    def _add_box_candidates(self, *box_ids: int):
        ints, stats = [self.c_int], [self.c_stats]
        for box_id in box_ids:
            i, st = self._fresh_box(box_id)
            ints += i
            stats += st
        self.c_int = np.concatenate(ints)
        self.c_stats = np.concatenate(stats)

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
        lo1, hi1, lo2, hi2 = (a[c] for a in self._corners())
        i1, i2 = self._cells(lo1, hi1), self._cells(lo2, hi2)
        u = np.zeros((2, self.n))
        u[0, i1] = 1.0
        u[1, i2] = 1.0
        z = (u @ self.b).T  # B U, (n, 2) (B symmetric)
        yu = (u @ self.y).T
        utbu = u @ z
        utyu = u @ yu
        utbu = (utbu + utbu.T) / 2
        utyu = (utyu + utyu.T) / 2
        k00, k01, k11 = utbu[0, 0], utbu[0, 1] - 1.0, utbu[1, 1]
        det = k00 * k11 - k01 * k01
        kinv = np.array([[k11, -k01], [-k01, k00]]) / det
        gain = float((kinv * utyu).sum())
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
        self.c_int = self.c_int[keep]
        self.c_stats = self.c_stats[keep]
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
            c_lo1, c_hi1, c_lo2, c_hi2 = self._corners()
            uv = self._box_sums(sat, c_lo1, c_hi1)  # (nc, 4): u^T [YU, Z]
            vv = self._box_sums(sat, c_lo2, c_hi2)
            uz, vz = uv[:, 2:], vv[:, 2:]
            st = self.c_stats
            st[:, 0] -= np.einsum("ci,ij,cj->c", uz, kinv, uz)
            st[:, 1] -= np.einsum("ci,ij,cj->c", uz, kinv, vz)
            st[:, 2] -= np.einsum("ci,ij,cj->c", vz, kinv, vz)
            st[:, 3] -= np.einsum("ci,ij,cj->c", uv, q, uv)
            st[:, 4] -= np.einsum("ci,ij,cj->c", uv, q, vv)
            st[:, 5] -= np.einsum("ci,ij,cj->c", vv, q, vv)
        self._add_box_candidates(id1, id2)
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
        self._add_box_candidates(*sorted(self.boxes))
        return drift


def _gram_and_dims(workload, dims) -> tuple[np.ndarray, tuple[int, ...]]:
    """The Gram matrix and box geometry of a Workload, or of a Gram matrix with ``dims`` (1-D default)."""
    if isinstance(workload, Workload):
        g, dims = workload.gram, workload.dims
    else:
        g = np.asarray(workload, dtype=float)
        dims = tuple(dims) if dims is not None else (g.shape[0],)
    if int(np.prod(dims)) != g.shape[0]:
        raise ValueError(f"dims {dims} do not match the Gram size {g.shape[0]}")
    return g, dims


def _greedy_level(g: np.ndarray, dims: tuple[int, ...], m: np.ndarray, b: np.ndarray, tau: float,
                  reinvert_every: int) -> LsaState:
    """Grow one level from the root box by best-gain splits until no split gains more than tau * f'."""
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
    return state


def _best_duplicate(g: np.ndarray, levels: list[np.ndarray], m: np.ndarray
                    ) -> tuple[float, int, np.ndarray, np.ndarray]:
    """The existing level whose repetition gives the lowest tr(G M^-1): (f, index, M, M^-1)."""
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
    return best


def _lsa_strategy(levels: list[np.ndarray], m: np.ndarray, f: float, history: list[dict], *,
                  total_splits: int, max_drift: float, k_max: int, bound: float | None) -> Strategy:
    """The merged level strategy with its ``info`` (per-level history, ratios to ``bound`` if given)."""
    if bound is not None:
        for h in history:
            h["ratio"] = h["error"] / bound
    info = {"history": history, "splits": total_splits, "max_drift": max_drift, "k_max": k_max,
            "error": len(levels) * f, "level_labels": [lab.copy() for lab in levels]}
    strat = from_levels("lsa", levels, merge=True, info=info)
    return Strategy("lsa", strat.matrix, levels=len(levels), info=info, gram_matrix=m)


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
        ``info`` holds per-level errors (c = 1), how each level was obtained, splits, max_drift and
        ``level_labels`` (one block-id array per level, duplicates repeated; not JSON).
    Cost: O(n^2) per split plus O(|S|^2) for the split box; O(n^3) per level (inverse, Y).
    """
    g, dims = _gram_and_dims(workload, dims)
    n = g.shape[0]
    if k_max is None:
        k_max = math.ceil(math.log2(max(n, 2))) + 2
    if k_max < 1:
        raise ValueError("k_max must be >= 1")
    levels = [np.arange(n)]
    m, b, f = np.eye(n), np.eye(n), float(np.trace(g))
    history = [{"k": 1, "error": f, "how": "identity", "blocks": n}]
    max_drift, total_splits = 0.0, 0
    while len(levels) < k_max:
        state = _greedy_level(g, dims, m, b, tau, reinvert_every)
        max_drift = max(max_drift, state.max_drift)
        total_splits += state.splits
        k = len(levels)
        if (k + 1) * state.f < (1 - min_improvement) * k * f:
            _, lab = np.unique(state.labels, return_inverse=True)
            levels.append(lab)
            m, b, f = state.m_current(), state.b, state.f
            history.append({"k": k + 1, "error": (k + 1) * f, "how": "greedy", "blocks": int(lab.max() + 1)})
            continue
        if not duplicate_fallback:
            break
        f_dup, i, m_dup, b_dup = _best_duplicate(g, levels, m)
        if not (k + 1) * f_dup < (1 - min_improvement) * k * f:
            break
        levels.append(levels[i].copy())
        m, b, f = m_dup, b_dup, f_dup
        history.append({"k": k + 1, "error": (k + 1) * f, "how": f"duplicate of level {i + 1}",
                        "blocks": int(levels[i].max() + 1)})
    return _lsa_strategy(levels, m, f, history, total_splits=total_splits, max_drift=max_drift,
                         k_max=k_max, bound=bound)
