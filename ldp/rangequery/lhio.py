"""LHIO, Low-dimensional HIO (Yang et al., VLDB 2021, Section 3.3).

For every attribute pair ``(j, k)`` the aggregator runs HIO on the two attributes alone: the 2-D hierarchy
of pair ``(j, k)`` has the 2-dim levels ``(l_j, l_k)``, and users are split uniformly over all pairs and all
their 2-dim levels (``C(d, 2) (h + 1)^2`` groups in the paper; the all-root level, whose single cell has
frequency 1 by definition, is not collected here, see :mod:`ldp.rangequery.hio`). Each user reports its cell
at the full epsilon with the oracle of option ``oracle``: ``"auto"`` (default) picks per level
(:func:`ldp.rangequery.grids.group_oracle_for`: GRR or SS on the small levels, OLH on the large ones),
``"olh"`` is the paper's (GF(2) affine family). The constrained inference below weighs every level
equally, which is exactly least squares only when all levels have the same per-cell variance; with
``auto`` they differ, yet the reproduction measured ``auto`` as accurate as ``"olh"`` within noise
(Gaussian rho 0.8, omega 0.5, 3 trials of 200 queries: MAE 0.276 / 0.161 / 0.114 / 0.081 / 0.066 against
0.271 / 0.170 / 0.115 / 0.088 / 0.069 at eps 0.2 .. 1.0, lambda = 2; equal within 0.01 at lambda = 4).

Post-processing, as the paper describes it ("its details are omitted due to space limitation", so the
following is our reading):

1. Consistency within a 2-D hierarchy: Hay et al.'s constrained inference
   (:func:`ldp.rangequery.hio.tree_constrained_inference`) "performed twice, starting with the first and the
   second attribute": first along attribute ``j`` (for every level and node of ``k``, the nodes of ``j``
   across its levels form a tree), then along attribute ``k``. The second pass is the same linear map on every
   ``(l_j, node)`` slice, so it keeps the sums along ``j`` established by the first pass: afterwards every
   cell equals the sum of its children in both directions, and the whole hierarchy is determined by its finest
   level, a ``c_j x c_k`` table. The all-root cell enters the first pass as an observation equal to 1.
2. Consistency among hierarchies: CALM's overall consistency (weighted average of the 1-D marginals every pair
   table gives of an attribute, differences spread evenly; :func:`ldp.rangequery.consistency.make_consistent`)
   on the finest tables. It is linear, so it keeps every hierarchy internally consistent. Before it, each
   finest table is shifted evenly to the known total 1 (the inferred root is only close to 1); with equal
   totals, making a later attribute consistent does not undo an earlier one (Qardaji et al. 2014).

   Norm-Sub is *not* applied by default (option ``norm_sub``): on a ``64 x 64`` finest table estimated from
   ``n / 225`` users the cell noise is so large that Norm-Sub moves almost all mass onto the largest noise
   peaks, mostly in the many low-density cells: measured on the correlated Gaussian set (d = 6, c = 64,
   n = 10^6, 200 2-D queries of volume 0.5) it turns a 2-D MAE of 0.072 into 0.36 at eps = 1 (0.032 -> 0.36
   at eps = 2). The paper speaks only of "the overall consistency in CALM" for this step. With
   ``norm_sub=True`` the CALM post-processing (:func:`ldp.rangequery.consistency.post_process`: Norm-Sub and
   consistency alternated, ending with Norm-Sub) is run instead.

2-D answers are sums over the finest table (2-D prefix sums, O(1) per query), which equal the sums of the
consistent hierarchy's decomposition nodes; lambda-D answers (lambda > 2) combine the C(lambda, 2) pairwise
answers by Weighted Update (Algorithm 2), 1-D answers use a pair table's marginal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp.rangequery.base import PairwiseRangeModel, RangeMechanism, attribute_pairs, register_model
from ldp.rangequery.consistency import Table, make_consistent, post_process
from ldp.rangequery.grids import check_max_report_bits, check_oracle_name, group_oracle_for
from ldp.rangequery.hio import Hierarchy, _check_branching, tree_constrained_inference
from ldp.rangequery.queries import AnswerPostprocessing, clip_option

__all__ = ["LHIOMechanism", "LHIOModel", "hierarchy_2d_inference"]


def hierarchy_2d_inference(est: Sequence[Sequence[np.ndarray]], hj: Hierarchy, hk: Hierarchy) -> np.ndarray:
    """Constrained inference on a 2-D hierarchy, twice (along ``j`` then along ``k``).

    Args:
        est: ``est[lj][lk]`` noisy frequencies of the cells of 2-dim level ``(lj, lk)``, shape
            ``(hj.sizes[lj], hk.sizes[lk])``.
        hj: hierarchy of the first attribute.
        hk: hierarchy of the second attribute.

    Returns:
        The consistent finest table ``(hj.c, hk.c)``; every coarser level of the consistent hierarchy is its
        block sums.
    """
    grid = [[np.asarray(est[lj][lk], dtype=np.float64) for lk in range(hk.h + 1)] for lj in range(hj.h + 1)]
    for lk in range(hk.h + 1):  # pass 1: along attribute j
        col = tree_constrained_inference([grid[lj][lk] for lj in range(hj.h + 1)], hj)
        for lj in range(hj.h + 1):
            grid[lj][lk] = col[lj]
    for lj in range(hj.h + 1):  # pass 2: along attribute k
        row = tree_constrained_inference([grid[lj][lk].T for lk in range(hk.h + 1)], hk)
        for lk in range(hk.h + 1):
            grid[lj][lk] = row[lk].T
    return grid[hj.h][hk.h]


class LHIOMechanism(RangeMechanism):
    """LHIO: a 2-D hierarchy per attribute pair, constrained inference twice, CALM-style consistency.

    Options:
        branching: hierarchy fan-out ``b`` (default 5).
        oracle: ``"auto"`` (default: per level, :func:`ldp.rangequery.grids.group_oracle_for`) or a frequency
            oracle name for :func:`ldp.oracles.make_oracle` (``"olh"`` is the paper's).
        max_report_bits: report budget of ``auto`` (default 256).
        consistency: run the cross-pair consistency step (default True).
        norm_sub: alternate it with Norm-Sub, CALM's full post-processing (default False, see above).
        consistency_rounds: maximal rounds of :func:`~ldp.rangequery.consistency.post_process` (default 10).
        clip: clip answers to [0, 1] (default True, see :class:`ldp.rangequery.queries.AnswerPostprocessing`).
    """

    name = "lhio"
    OPTIONS = frozenset(
        {"branching", "oracle", "max_report_bits", "consistency", "norm_sub", "consistency_rounds", "clip"}
    )

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        if self.n_attributes < 2:
            raise ValueError("LHIO needs at least two attributes")
        self.branching = _check_branching(options.get("branching", 5))
        self.oracle_name = str(options.get("oracle", "auto")).lower()
        self.max_report_bits = check_max_report_bits(options)
        self.consistency = bool(options.get("consistency", True))
        self.clip = clip_option(options)
        self.norm_sub = bool(options.get("norm_sub", False))
        self.consistency_rounds = int(options.get("consistency_rounds", 10))
        if self.consistency_rounds < 1:
            raise ValueError("consistency_rounds must be >= 1")
        check_oracle_name(self.oracle_name)
        self.hierarchies = tuple(Hierarchy(c, self.branching) for c in self.domain_sizes)
        self.pairs = attribute_pairs(self.n_attributes)
        groups = []
        for p, (j, k) in enumerate(self.pairs):
            for lj in range(self.hierarchies[j].h + 1):
                for lk in range(self.hierarchies[k].h + 1):
                    if lj or lk:
                        groups.append((p, lj, lk))
        if not groups:
            raise ValueError("LHIO needs domain sizes >= 2")
        self._groups: tuple[tuple[int, int, int], ...] = tuple(groups)
        self._oracles: dict[int, Any] = {}

    @property
    def n_groups(self) -> int:
        return len(self._groups)

    def group_info(self, group: int) -> tuple[int, int, int, int]:
        """``(j, k, l_j, l_k)`` of a group."""
        p, lj, lk = self._groups[self._check_group(group)]
        j, k = self.pairs[p]
        return j, k, lj, lk

    def group_label(self, group: int) -> str:
        j, k, lj, lk = self.group_info(group)
        return f"{j}-{k}:L{lj}-{lk}"

    def group_shape(self, group: int) -> tuple[int, int]:
        j, k, lj, lk = self.group_info(group)
        return self.hierarchies[j].sizes[lj], self.hierarchies[k].sizes[lk]

    def group_oracle(self, group: int) -> Any:
        dom = math.prod(self.group_shape(group))
        if dom not in self._oracles:
            self._oracles[dom] = group_oracle_for(
                self.oracle_name, self.epsilon, dom, max_report_bits=self.max_report_bits
            )
        return self._oracles[dom]

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        j, k, lj, lk = self.group_info(group)
        nj = self.hierarchies[j].node_of(records[:, j], lj)
        nk = self.hierarchies[k].node_of(records[:, k], lk)
        return (nj * self.hierarchies[k].sizes[lk] + nk).astype(np.int64)

    def finalize(self, accumulators: Mapping[int, Any]) -> LHIOModel:
        est: dict[int, list[list[np.ndarray | None]]] = {}
        for p, (j, k) in enumerate(self.pairs):
            hj, hk = self.hierarchies[j], self.hierarchies[k]
            grid: list[list[np.ndarray | None]] = [[None] * (hk.h + 1) for _ in range(hj.h + 1)]
            grid[0][0] = np.ones((1, 1))
            est[p] = grid
        n_total = 0
        var0 = {
            p: np.zeros((self.hierarchies[j].h + 1, self.hierarchies[k].h + 1))
            for p, (j, k) in enumerate(self.pairs)
        }
        for g in range(self.n_groups):
            p, lj, lk = self._groups[g]
            j, k = self.pairs[p]
            shape = self.group_shape(g)
            acc = accumulators.get(g)
            var0[p][lj, lk] = math.inf
            if acc is not None and acc.n > 0:
                n_total += int(acc.n)
                var0[p][lj, lk] = float(self.group_oracle(g).variance(int(acc.n)))
                f = self.group_oracle(g).estimate(acc).frequencies.reshape(shape)
            else:  # no reports: uniform share of each cell
                hj, hk = self.hierarchies[j], self.hierarchies[k]
                lo_j, hi_j = hj.node_bounds(lj)
                lo_k, hi_k = hk.node_bounds(lk)
                f = np.outer((hi_j - lo_j + 1) / hj.c, (hi_k - lo_k + 1) / hk.c)
            est[p][lj][lk] = f
        tables = []
        for p, (j, k) in enumerate(self.pairs):
            fine = hierarchy_2d_inference(est[p], self.hierarchies[j], self.hierarchies[k])
            fine += (1.0 - fine.sum()) / fine.size  # the known total, so later consistency steps commute
            tables.append(Table((j, k), fine, np.ones(fine.shape, dtype=bool), 1.0))
        if self.norm_sub:
            post_process(tables, self.n_attributes, max_rounds=self.consistency_rounds)
        elif self.consistency:
            make_consistent(tables, self.n_attributes)
        model = LHIOModel(
            self.domain_sizes,
            n_total,
            {pair: t.values for pair, t in zip(self.pairs, tables)},
            branching=self.branching,
            level_var0={pair: var0[p] for p, pair in enumerate(self.pairs)},
        )
        model.clip = self.clip
        return model


#: Most cells (replicas x table cells) of the simulated noise tables of one pair (:meth:`answer_2d_std`).
_NOISE_CELLS = 1 << 22


@register_model("lhio")
class LHIOModel(AnswerPostprocessing, PairwiseRangeModel):
    """Consistent finest ``c_j x c_k`` table per attribute pair; 2-D answers by prefix sums.

    ``level_var0[(j, k)]`` (optional, with ``branching``): the per-cell Eq. 6 variance of each 2-dim
    level's estimates (``(h_j + 1, h_k + 1)``; 0 for the all-root level, inf for a level without reports),
    which :meth:`answer_2d_std` carries through the constrained inference.
    """

    def __init__(
        self,
        domain_sizes: Sequence[int],
        n_users: int,
        tables: Mapping[tuple[int, int], np.ndarray],
        *,
        branching: int | None = None,
        level_var0: Mapping[tuple[int, int], np.ndarray] | None = None,
    ) -> None:
        super().__init__(domain_sizes, n_users)
        self.branching = None if branching is None else int(branching)
        self.level_var0 = {
            (int(j), int(k)): np.asarray(v, dtype=np.float64) for (j, k), v in (level_var0 or {}).items()
        }
        self._noise: dict[tuple[int, int], np.ndarray | None] = {}
        self.tables = {(int(j), int(k)): np.asarray(t, dtype=np.float64) for (j, k), t in tables.items()}
        self._prefix = {}
        for (j, k), t in self.tables.items():
            if t.shape != (self.domain_sizes[j], self.domain_sizes[k]):
                raise ValueError(f"table of pair {(j, k)} has shape {t.shape}")
            pre = np.zeros((t.shape[0] + 1, t.shape[1] + 1))
            pre[1:, 1:] = t.cumsum(axis=0).cumsum(axis=1)
            self._prefix[(j, k)] = pre

    def answer_2d(self, j, k, lo_j, hi_j, lo_k, hi_k) -> np.ndarray:
        pre = self._prefix[(j, k)]
        lo_j, hi_j = np.asarray(lo_j), np.asarray(hi_j) + 1
        lo_k, hi_k = np.asarray(lo_k), np.asarray(hi_k) + 1
        return pre[hi_j, hi_k] - pre[lo_j, hi_k] - pre[hi_j, lo_k] + pre[lo_j, lo_k]

    def _noise_prefix(self, j: int, k: int) -> np.ndarray | None:
        """``(B, c_j + 1, c_k + 1)`` prefix sums of ``B`` simulated noise tables of pair ``(j, k)``, or None
        (no level variances, or a level without reports)."""
        if (j, k) in self._noise:
            return self._noise[(j, k)]
        from ldp.intervals import data_seed

        v0 = self.level_var0.get((j, k))
        out = None
        if v0 is not None and self.branching is not None and np.all(np.isfinite(v0)):
            hj = Hierarchy(self.domain_sizes[j], self.branching)
            hk = Hierarchy(self.domain_sizes[k], self.branching)
            cells = hj.c * hk.c
            reps = int(max(8, min(32, _NOISE_CELLS // cells)))
            rng = np.random.default_rng(data_seed(self.tables[(j, k)], v0))
            out = np.zeros((reps, hj.c + 1, hk.c + 1))
            for b in range(reps):
                noise = [
                    [
                        math.sqrt(v0[lj, lk]) * rng.standard_normal((hj.sizes[lj], hk.sizes[lk]))
                        for lk in range(hk.h + 1)
                    ]
                    for lj in range(hj.h + 1)
                ]
                fine = hierarchy_2d_inference(noise, hj, hk)
                fine -= fine.sum() / fine.size  # the shift to the known total, linear part
                out[b, 1:, 1:] = fine.cumsum(axis=0).cumsum(axis=1)
        self._noise[(j, k)] = out
        return out

    def answer_2d_std(self, j, k, lo_j, hi_j, lo_k, hi_k) -> np.ndarray | None:
        """Noise std of 2-D answers, simulated: ``B`` tables of the levels' Eq. 6 noise (independent cells,
        the oracles' ``O(f)`` terms and covariances dropped) through the same constrained inference and
        shift to the total as the model's tables, then the query's rectangle sum; the std across the
        replicas (seeded from the table, so the same model gives the same std). The cross-pair
        consistency step is not simulated: it averages every marginal over the pairs that share an
        attribute, which lowers the variance, so this std overstates it (measured in
        ``experiments/coverage.py``). inf where a level had no reports; None for models without level
        variances (saved before they were recorded)."""
        if (j, k) in self.level_var0 and not np.all(np.isfinite(self.level_var0[(j, k)])):
            return np.full(len(np.atleast_1d(lo_j)), np.inf)
        pre = self._noise_prefix(j, k)
        if pre is None:
            return None
        lo_j, hi_j = np.asarray(lo_j), np.asarray(hi_j) + 1
        lo_k, hi_k = np.asarray(lo_k), np.asarray(hi_k) + 1
        rect = pre[:, hi_j, hi_k] - pre[:, lo_j, hi_k] - pre[:, hi_j, lo_k] + pre[:, lo_j, lo_k]
        return rect.std(axis=0, ddof=1)

    def std_method(self, lam: int) -> str:
        return "simulated-inference" if lam <= 2 else "simulated-wu"

    def _payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tables": [{"pair": [j, k], "values": t.tolist()} for (j, k), t in self.tables.items()]
        }
        if self.branching is not None and self.level_var0:
            out["branching"] = self.branching
            out["level_var0"] = [
                {"pair": [j, k], "var0": [[x if math.isfinite(x) else None for x in r] for r in v.tolist()]}
                for (j, k), v in self.level_var0.items()
            ]
        return out

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> LHIOModel:
        tables = {tuple(e["pair"]): np.asarray(e["values"]) for e in d["tables"]}
        var0 = {
            tuple(e["pair"]): np.array(
                [[math.inf if x is None else float(x) for x in row] for row in e["var0"]], dtype=np.float64
            )
            for e in d.get("level_var0", [])
        }
        return cls(
            d["domain_sizes"], d["n_users"], tables, branching=d.get("branching"), level_var0=var0 or None
        )._restore_options(d)
