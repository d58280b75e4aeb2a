"""LSA: range queries under LDP with user groups chosen by the Level Selection Algorithm and answered by
generalized least squares (spec ``matrix_mechanism.md`` Sec. 6(b)). Meant for 1-D and
2-D tasks; with more attributes it runs box-LSA over a grid of at most ``max_cells`` cells in total, which
leaves each attribute only a few cells (e.g. 4 per attribute for 4 attributes): use HDG there.

**Local DP.** Every user reports once, at the full epsilon, through a frequency oracle: group ``g``
reports the block of its record in one public partition ``P_g`` of the cells. Everything after the oracles
is post-processing.

Design.

* Cells: the domain of each attribute is cut into at most ``max_cells`` cells in total (option, default
  256: 1-D ``min(c, 256)`` intervals, 2-D ``min(c_t, 16)`` per attribute) of equal width ``w_t =
  ceil(c_t / g_t)`` (the last may be narrower), because LSA and GLS work with dense ``n x n`` matrices.
* Partitions: :func:`ldp.matrix.lsa.lsa` for the AllRange workload over the cells (``k_max`` option,
  default ``ceil(log2 n) + 2`` levels, the identity level included) returns a stack of partitions into
  intervals / boxes; each level (duplicates included, so a level of multiplicity r gets r groups and r
  times the users, the Thm 3.2 weights) is one user group. Users are split uniformly over the groups as in
  every range method. LSA's objective is the GLS error of these groups with the f-free OLH variance
  (spec 6(b): the same objective), so it chooses which partitions the groups report and how many users
  each gets. The partitions depend only on the public domain and options (LSA is deterministic), so
  clients and aggregator compute the same ones.
* Oracle per group (option ``oracle``): ``auto`` (default) takes GRR when the level has fewer than
  ``3 e^eps + 2`` blocks and OLH otherwise (Wang et al.'s rule), or force ``olh`` / ``grr``.
* Finalize: :class:`ldp.matrix.gls.GLS` over the groups' block estimates with weights ``N_g / V_g``
  (``N_g`` the group's actual reports, ``V_g`` its oracle's f-free variance factor) and the public user
  count as the constraint ``1^T f = 1`` (frequency scale). The model holds ``f_hat`` over the cells and
  its covariance ``L Sigma L^T`` with ``Sigma`` the exact block covariance at the (clipped) estimated
  block frequencies: OLH's per-block variance (blocks uncorrelated under the pairwise independent GF(2)
  family), GRR's full covariance for fixed user values (negative between blocks).
* Answers: ``w f_hat`` with ``w`` the fraction of each cell inside the query (a query cutting a cell
  assumes values uniform inside it) and ``answer_std = sqrt(w Cov w^T)``. The std is exact for the linear
  estimator at the estimated frequencies; it is the variance only, not the within-cell bias of a query that
  cuts cells (zero when the cells are single values, as in 1-D up to 256 values).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp.matrix.gls import GLS, LevelGroup
from ldp.matrix.lsa import lsa
from ldp.matrix.workloads import allrange
from ldp.oracles import make_oracle
from ldp.rangequery.base import RangeMechanism, RangeModel, register_model
from ldp.rangequery.queries import AnswerPostprocessing, RangeQuery, clip_option

__all__ = ["LSAMechanism", "LSAModel", "lsa_levels", "cell_grid"]

DEFAULT_MAX_CELLS = 256
_ORACLES = ("auto", "olh", "grr")


def cell_grid(domain_sizes: Sequence[int], max_cells: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(cells per attribute, cell width per attribute)`` with at most ``max_cells`` cells in total."""
    k = len(domain_sizes)
    per = max(1, int(math.floor(max_cells ** (1.0 / k) + 1e-9)))
    widths = tuple(math.ceil(c / min(c, per)) for c in domain_sizes)
    cells = tuple(math.ceil(c / w) for c, w in zip(domain_sizes, widths))
    return cells, widths


@functools.lru_cache(maxsize=32)
def lsa_levels(cell_dims: tuple[int, ...], k_max: int | None) -> tuple[np.ndarray, ...]:
    """LSA's partitions of the cells for AllRange over ``cell_dims`` (block ids 0..B-1 per level, duplicates
    repeated, levels of one block dropped: the public user count already fixes them). Cached."""
    strategy = lsa(allrange(cell_dims), k_max=k_max)
    out = []
    for lab in strategy.info["level_labels"]:
        _, inv = np.unique(np.asarray(lab), return_inverse=True)
        if inv.max() >= 1:
            inv = inv.astype(np.int64)
            inv.setflags(write=False)
            out.append(inv)
    return tuple(out)


def _grr_cov(oracle: Any, n: int, f: np.ndarray) -> np.ndarray:
    """Exact covariance of GRR's estimates from ``n`` users with fixed values of frequencies ``f``: the
    count of block i sums independent indicators with probability p (the user's block) or q, so
    ``Var = (f_i p(1-p) + (1-f_i) q(1-q)) / (n (p-q)^2)`` and, for i != j,
    ``Cov = -(q^2 + q (p-q)(f_i + f_j)) / (n (p-q)^2)``."""
    p, q = float(oracle.p), float(oracle.q)
    cov = -(q * q + q * (p - q) * (f[:, None] + f[None, :]))
    np.fill_diagonal(cov, f * p * (1 - p) + (1 - f) * q * (1 - q))
    return cov / (n * (p - q) ** 2)


class LSAMechanism(RangeMechanism):
    """Range queries through LSA-chosen user groups and GLS (see the module docstring); 1-D and 2-D tasks
    (more attributes: a coarse box grid).

    Options: ``max_cells`` (default 256), ``k_max`` (LSA's level bound, identity included; default
    ``ceil(log2 n) + 2``), ``oracle`` (``auto``, ``olh``, ``grr``), ``clip`` (answers clipped to [0, 1]).
    """

    name = "lsa"
    OPTIONS = frozenset({"max_cells", "k_max", "oracle", "clip"})

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        max_cells = options.get("max_cells", DEFAULT_MAX_CELLS)
        if (
            isinstance(max_cells, bool)
            or not isinstance(max_cells, (int, np.integer))
            or not 4 <= max_cells <= 1024
        ):
            raise ValueError(f"max_cells must be an integer in [4, 1024], got {max_cells!r}")
        k_max = options.get("k_max")
        if k_max is not None and (
            isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 2
        ):
            raise ValueError(f"k_max must be an integer >= 2 or null, got {k_max!r}")
        self.oracle_name = str(options.get("oracle", "auto")).lower()
        if self.oracle_name not in _ORACLES:
            raise ValueError(f"oracle must be one of {', '.join(_ORACLES)}, got {options.get('oracle')!r}")
        self.clip = clip_option(options)
        self.max_cells = int(max_cells)
        self.k_max = None if k_max is None else int(k_max)
        self.cell_dims, self.widths = cell_grid(self.domain_sizes, self.max_cells)
        if math.prod(self.cell_dims) < 2:
            raise ValueError("lsa needs a domain of at least two values")
        self.levels = lsa_levels(self.cell_dims, self.k_max)
        self._oracles: dict[int, Any] = {}

    @property
    def n_groups(self) -> int:
        return len(self.levels)

    def blocks(self, group: int) -> int:
        return int(self.levels[self._check_group(group)].max()) + 1

    def group_label(self, group: int) -> str:
        return f"L{group}-{self.blocks(group)}"

    def group_oracle(self, group: int) -> Any:
        b = self.blocks(group)
        if b not in self._oracles:
            name = self.oracle_name
            if name == "auto":
                name = "grr" if b < 3 * math.exp(self.epsilon) + 2 else "olh"
            self._oracles[b] = make_oracle(name, self.epsilon, b)
        return self._oracles[b]

    def cells_of(self, records: np.ndarray) -> np.ndarray:
        """Row-major cell index of each record (n, d)."""
        coords = tuple(np.asarray(records[:, t], dtype=np.int64) // w for t, w in enumerate(self.widths))
        return np.ravel_multi_index(coords, self.cell_dims).astype(np.int64)

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        return self.levels[self._check_group(group)][self.cells_of(records)]

    def finalize(self, accumulators: Mapping[int, Any]) -> LSAModel:
        groups: list[LevelGroup] = []
        estimates: list[np.ndarray] = []
        covs: list[np.ndarray] = []
        n_total = 0
        for g in range(self.n_groups):
            acc = accumulators.get(g)
            if acc is None or int(acc.n) == 0:
                continue
            oracle = self.group_oracle(g)
            n_g = int(acc.n)
            n_total += n_g
            f = np.asarray(oracle.estimate(acc).frequencies, dtype=np.float64)
            groups.append(LevelGroup(self.levels[g], n_g, float(oracle.variance(1))))
            estimates.append(f)
            fc = np.clip(f, 0.0, 1.0)
            if oracle.name == "grr":
                covs.append(_grr_cov(oracle, n_g, fc))
            else:
                covs.append(np.asarray(oracle.variance(n_g, fc), dtype=np.float64))
        n = math.prod(self.cell_dims)
        if not groups:
            # no reports: values uniform over the domain (each cell's share of the values)
            sizes = [np.minimum(np.arange(1, g + 1) * w, c) - np.arange(g) * w
                     for c, w, g in zip(self.domain_sizes, self.widths, self.cell_dims)]  # fmt: skip
            vol = sizes[0] if len(sizes) == 1 else np.outer(sizes[0], sizes[1]).ravel()
            f_hat, cov = vol / vol.sum(), np.zeros((n, n))
        else:
            gls = GLS(groups, total=1.0)
            f_hat, cov = gls.estimate(estimates), gls.covariance(covs)
        model = LSAModel(
            self.domain_sizes, n_total, cell_dims=self.cell_dims, widths=self.widths, f_hat=f_hat, cov=cov
        )
        model.clip = self.clip
        return model


@register_model("lsa")
class LSAModel(AnswerPostprocessing, RangeModel):
    """``f_hat`` over the cells and its covariance; answers ``w f_hat`` with ``std = sqrt(w Cov w^T)``."""

    def __init__(
        self,
        domain_sizes: Sequence[int],
        n_users: int,
        *,
        cell_dims: Sequence[int],
        widths: Sequence[int],
        f_hat: np.ndarray,
        cov: np.ndarray,
    ) -> None:
        super().__init__(domain_sizes, n_users)
        self.cell_dims = tuple(int(c) for c in cell_dims)
        self.widths = tuple(int(w) for w in widths)
        self.f_hat = np.asarray(f_hat, dtype=np.float64)
        self.cov = np.asarray(cov, dtype=np.float64)

    def weights(self, queries: Sequence[RangeQuery]) -> np.ndarray:
        """(Q, n): the fraction of each cell inside each query (values uniform inside a cell)."""
        per_attr = []
        for t, (c, w, g) in enumerate(zip(self.domain_sizes, self.widths, self.cell_dims)):
            start = np.arange(g) * w
            stop = np.minimum(start + w, c)  # exclusive
            lo = np.zeros(len(queries), dtype=np.int64)
            hi = np.full(len(queries), c, dtype=np.int64)
            for i, q in enumerate(queries):
                for a, lo_a, hi_a in q.intervals:
                    if a == t:
                        lo[i], hi[i] = lo_a, hi_a + 1
            overlap = np.clip(np.minimum(hi[:, None], stop) - np.maximum(lo[:, None], start), 0, None)
            per_attr.append(overlap / (stop - start))
        out = per_attr[0]
        for nxt in per_attr[1:]:  # row-major cells: the last attribute varies fastest
            out = np.einsum("qi,qj->qij", out, nxt).reshape(len(queries), -1)
        return out

    def _raw_answer(self, queries: list[RangeQuery]) -> np.ndarray:
        return self.weights(queries) @ self.f_hat

    def _raw_answer_std(self, queries: list[RangeQuery]) -> np.ndarray:
        w = self.weights(queries)
        return np.sqrt(np.maximum(np.einsum("qi,ij,qj->q", w, self.cov, w), 0.0))

    def _payload(self) -> dict[str, Any]:
        return {
            "cell_dims": list(self.cell_dims),
            "widths": list(self.widths),
            "f_hat": self.f_hat.tolist(),
            "cov": self.cov.tolist(),
        }

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> LSAModel:
        model = cls(
            d["domain_sizes"],
            d.get("n_users", 0),
            cell_dims=d["cell_dims"],
            widths=d["widths"],
            f_hat=np.asarray(d["f_hat"], dtype=np.float64),
            cov=np.asarray(d["cov"], dtype=np.float64),
        )
        return model._restore_options(d)
