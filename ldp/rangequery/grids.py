"""TDG and HDG: grid-based multi-dimensional range queries (Yang et al., VLDB 2021, Sections 4 and 5).

Phase 1 (grids). TDG splits users into C(d, 2) groups, one per attribute pair (a_j, a_k); a user of that
group reports, with a frequency oracle over the ``g2 x g2`` cells at the full epsilon, the 2-D cell of grid
G(j,k) its ``(v_j, v_k)`` falls in. HDG adds d groups for 1-D grids G(j) of ``g1`` cells (d + C(d, 2)
groups).

The oracle of each grid (option ``oracle``) is by default ``"auto"`` (:func:`group_oracle_for`): per
grid, the lowest-variance oracle for that grid's number of cells among the candidates of
:func:`ldp.oracles.choose_oracle` whose report has at most ``max_report_bits`` bits (default 256), Hadamard
Response excluded; so small grids get GRR where it is better than OLH (a 4-cell grid at eps = 1: variance
factor 1.6 against OLH's 3.7) and large ones OLH with the 3-wise independent GF(2) hash family or Subset
Selection. ``oracle="olh"`` is the paper-literal choice; any ``ldp.oracles`` name is accepted. Every
variance the model reports uses the oracle each grid actually ran
(:meth:`ldp.oracles.FrequencyOracle.variance_of_sum`, with that oracle's covariances).

Granularities follow the paper's guideline (Section 5), with ``n/m`` users per group::

    g1 = cbrt(n1 (e^eps - 1)^2 alpha1^2 / (2 m1 e^eps))
    g2 = sqrt(2 alpha2 (e^eps - 1) sqrt(n2 / (m2 e^eps)))

``alpha1 = 0.7``, ``alpha2 = 0.03``; each value is rounded to the closest power of two (nearest in linear
distance; ties go up), raised to at least 2 (a one-cell grid carries no information; this only matters for
tiny populations) and capped at the attribute's (padded) domain size. Options ``g1``/``g2`` override.

Phase 2 (post-processing, :mod:`ldp.rangequery.consistency`): Norm-Sub per grid and cross-grid consistency
per attribute with variance-optimal weights, alternated, ending with Norm-Sub.

Phase 3 (answers). HDG builds, for every pair, the response matrix M(j,k) over the ``c_j x c_k`` values by
Weighted Update (Algorithm 1, :func:`ldp.rangequery.weighted_update.response_matrices`) from G(j), G(k),
G(j,k), to the threshold 1/n. A 2-D query sums the grid cells it fully contains and, for partially covered
cells, the entries of M inside the query; TDG uses the uniform guess inside partial cells instead (which is
the same computation with M replaced by each cell's frequency spread evenly over its values). Both are
O(1) per query with 2-D prefix sums. lambda-D queries (lambda >= 3) combine the C(lambda, 2) 2-D answers by
Weighted Update (Algorithm 2).

Domain sizes need not be powers of two: each attribute is padded to ``c'`` = the next power of two. Cells
made only of padding values are known to be empty: their estimates are set to 0 and excluded from Norm-Sub
and consistency, the response matrix starts at 0 on padding values (so it stays 0), and the uniform guess
spreads a cell over its real values only. With power-of-two domains all of this is exactly the paper.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp.oracles import AUTO_VARIANCE_TOLERANCE, MECHANISMS, make_oracle
from ldp.rangequery.base import PairwiseRangeModel, RangeMechanism, attribute_pairs, register_model
from ldp.rangequery.consistency import Table, post_process
from ldp.rangequery.queries import AnswerPostprocessing, clip_option
from ldp.rangequery.weighted_update import response_matrices

__all__ = [
    "ALPHA1",
    "ALPHA2",
    "closest_power_of_two",
    "guideline_granularity",
    "GridSpec",
    "TDGMechanism",
    "HDGMechanism",
    "GridModel",
    "TDGModel",
    "HDGModel",
    "RANGE_AUTO_MAX_REPORT_BITS",
    "group_oracle_for",
    "check_oracle_name",
    "oracle_spec",
    "oracle_from_spec",
    "weighted_sum_variance",
]

ALPHA1 = 0.7
ALPHA2 = 0.03


def closest_power_of_two(x: float) -> int:
    """Power of two nearest to ``x`` (linear distance, ties up); 1 for ``x <= 1``."""
    if not math.isfinite(x) or x <= 1:
        return 1
    lo = 1 << int(math.floor(math.log2(x)))
    hi = lo * 2
    return lo if x - lo < hi - x else hi


def guideline_granularity(
    epsilon: float, users_per_group: float, dim: int, *, alpha1: float = ALPHA1, alpha2: float = ALPHA2
) -> float:
    """The guideline's real-valued granularity (Section 5) for a 1-D (``dim=1``) or 2-D grid.

    Args:
        epsilon: privacy budget.
        users_per_group: ``n_i / m_i``, users reporting one grid.
        dim: 1 for ``g1``, 2 for ``g2``.
    """
    e = math.exp(epsilon)
    if dim == 1:
        return (users_per_group * (e - 1) ** 2 * alpha1**2 / (2 * e)) ** (1.0 / 3.0)
    if dim == 2:
        return math.sqrt(2 * alpha2 * (e - 1) * math.sqrt(users_per_group / e))
    raise ValueError("dim must be 1 or 2")


def _check_power_of_two(name: str, g: Any) -> int:
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 2 or (int(g) & (int(g) - 1)):
        raise ValueError(f"{name} must be a power of two >= 2, got {g!r}")
    return int(g)


@dataclass(frozen=True)
class GridSpec:
    """One grid: the attributes it covers and its number of cells on each (a power of two <= c')."""

    attrs: tuple[int, ...]
    gran: tuple[int, ...]
    block: tuple[int, ...]  # padded values per cell on each attribute (c' / g)

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.gran))

    @property
    def label(self) -> str:
        return f"{len(self.attrs)}d:" + ",".join(map(str, self.attrs))


def _real_per_cell(c: int, g: int, block: int) -> np.ndarray:
    """Number of real (non-padding) values in each of the ``g`` cells of an attribute of size ``c``."""
    starts = np.arange(g) * block
    return np.clip(c - starts, 0, block).astype(np.int64)


class _GridMechanism(RangeMechanism):
    """Shared Phase 1/2 machinery of TDG, HDG and CALM."""

    OPTIONS = frozenset(
        {"g1", "g2", "alpha1", "alpha2", "oracle", "max_report_bits", "max_post_rounds", "wu_threshold",
         "wu_max_iter", "clip"}
    )
    has_1d = False

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        if self.n_attributes < 2:
            raise ValueError(f"{self.name} needs at least two attributes")
        if min(self.domain_sizes) < 2:
            raise ValueError(f"{self.name} needs domain sizes >= 2, got {list(self.domain_sizes)}")
        self.alpha1 = float(options.get("alpha1", ALPHA1))
        self.alpha2 = float(options.get("alpha2", ALPHA2))
        if self.alpha1 <= 0 or self.alpha2 <= 0:
            raise ValueError("alpha1 and alpha2 must be positive")
        self.oracle_name = str(options.get("oracle", "auto")).lower()
        self.max_report_bits = check_max_report_bits(options)
        self.max_post_rounds = int(options.get("max_post_rounds", 10))
        if self.max_post_rounds < 1:
            raise ValueError("max_post_rounds must be >= 1")
        self.wu_threshold = options.get("wu_threshold")
        self.wu_max_iter = int(options.get("wu_max_iter", 1000))
        self.clip = clip_option(options)
        self.g1, self.g2 = self._granularities(options)
        self.specs: list[GridSpec] = []
        if self.has_1d:
            for t in range(self.n_attributes):
                g = min(self.g1, self.padded_sizes[t])
                self.specs.append(GridSpec((t,), (g,), (self.padded_sizes[t] // g,)))
        for j, k in attribute_pairs(self.n_attributes):
            gj, gk = min(self.g2, self.padded_sizes[j]), min(self.g2, self.padded_sizes[k])
            self.specs.append(
                GridSpec((j, k), (gj, gk), (self.padded_sizes[j] // gj, self.padded_sizes[k] // gk))
            )
        self._oracles: dict[int, Any] = {}
        check_oracle_name(self.oracle_name)

    # ---- parameters ----------------------------------------------------------------------------------------

    def _granularities(self, options: Mapping[str, Any]) -> tuple[int, int]:
        per_group = self.n_users / self.n_groups
        c_max = max(self.padded_sizes)
        if "g1" in options:
            g1 = _check_power_of_two("g1", options["g1"])
        else:
            g1 = min(
                max(
                    closest_power_of_two(
                        guideline_granularity(self.epsilon, per_group, 1, alpha1=self.alpha1)
                    ),
                    2,
                ),
                c_max,
            )
        if "g2" in options:
            g2 = _check_power_of_two("g2", options["g2"])
        else:
            g2 = min(
                max(
                    closest_power_of_two(
                        guideline_granularity(self.epsilon, per_group, 2, alpha2=self.alpha2)
                    ),
                    2,
                ),
                c_max,
            )
        return g1, g2

    @property
    def n_groups(self) -> int:
        d = self.n_attributes
        return d * (d - 1) // 2 + (d if self.has_1d else 0)

    def group_label(self, group: int) -> str:
        return self.specs[self._check_group(group)].label

    def group_oracle(self, group: int) -> Any:
        spec = self.specs[self._check_group(group)]
        n_cells = spec.n_cells
        if n_cells not in self._oracles:
            self._oracles[n_cells] = group_oracle_for(
                self.oracle_name, self.epsilon, n_cells, max_report_bits=self.max_report_bits
            )
        return self._oracles[n_cells]

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        """Cell index of each record in grid ``group`` (row-major over the grid's attributes)."""
        spec = self.specs[self._check_group(group)]
        records = np.asarray(records, dtype=np.int64)
        cell = np.zeros(len(records), dtype=np.int64)
        for a, g, b in zip(spec.attrs, spec.gran, spec.block):
            cell = cell * g + records[:, a] // b
        return cell

    def valid_mask(self, spec: GridSpec) -> np.ndarray:
        """Cells of ``spec`` holding at least one real value."""
        mask = np.ones((), dtype=bool)
        for a, g, b in zip(spec.attrs, spec.gran, spec.block):
            m = _real_per_cell(self.domain_sizes[a], g, b) > 0
            mask = np.multiply.outer(mask, m)
        return mask

    # ---- finalize ------------------------------------------------------------------------------------------

    def grid_oracles(self) -> list[dict[str, Any]]:
        """Per grid (in group order): the oracle it runs, as :func:`oracle_spec` data."""
        return [oracle_spec(self.group_oracle(g)) for g in range(self.n_groups)]

    def _tables(self, accumulators: Mapping[int, Any]) -> tuple[list[Table], int]:
        """Estimates of every grid as consistency tables, and the total number of reports."""
        tables = []
        total = 0
        self._last_counts = []
        for g, spec in enumerate(self.specs):
            oracle = self.group_oracle(g)
            acc = accumulators.get(g)
            if acc is None:
                acc = oracle.create_accumulator()
            est = oracle.estimate(acc)
            total += int(est.n)
            self._last_counts.append(int(est.n))
            valid = self.valid_mask(spec)
            if est.n == 0:
                values = valid / valid.sum()
                var0 = math.inf
            else:
                values = np.asarray(est.frequencies, dtype=np.float64).reshape(spec.gran) * valid
                var0 = float(np.mean(est.variance))
            tables.append(Table(spec.attrs, values.astype(np.float64), valid, var0))
        return tables, total

    def postprocessed_tables(self, accumulators: Mapping[int, Any]) -> tuple[list[Table], int, int]:
        """Phases 1-2: estimated grids after Norm-Sub/consistency; also total reports and rounds run."""
        tables, total = self._tables(accumulators)
        tol = 1.0 / max(total, 1)
        rounds = post_process(tables, self.n_attributes, max_rounds=self.max_post_rounds, tol=tol)
        return tables, total, rounds


class TDGMechanism(_GridMechanism):
    """Two-Dimensional Grid (Section 4): C(d, 2) 2-D grids of g2 x g2 cells; uniform guess in partial cells.

    Options: ``g2`` (power of two, overrides the guideline), ``alpha2``, ``oracle`` (default ``"auto"``,
    ``"olh"`` is the paper's),
    ``max_post_rounds`` (Norm-Sub/consistency rounds, default 10), ``wu_threshold`` (Algorithm 2, default
    1/n), ``wu_max_iter``, ``group_salt``. ``g1``/``alpha1`` are accepted and ignored (no 1-D grids).
    """

    name = "tdg"

    def finalize(self, accumulators: Mapping[int, Any]) -> TDGModel:
        tables, total, rounds = self.postprocessed_tables(accumulators)
        return TDGModel(
            self.domain_sizes,
            total,
            pairs=[t.attrs for t in tables],
            grids=[t.values for t in tables],
            var0=[t.var0 for t in tables],
            info={"epsilon": self.epsilon, "oracle": self.oracle_name, "g2": self.g2, "post_rounds": rounds},
            wu_threshold=self.wu_threshold,
            wu_max_iter=self.wu_max_iter,
            clip=self.clip,
            epsilon=self.epsilon,
            oracles=self.grid_oracles(),
            counts=list(self._last_counts),
        )


class HDGMechanism(_GridMechanism):
    """Hybrid-Dimensional Grid (Section 4): d 1-D grids (g1 cells) + C(d, 2) 2-D grids + response matrices.

    Options: ``g1``, ``g2`` (powers of two, override the guideline), ``alpha1``, ``alpha2``, ``oracle``
    (default ``"auto"``, ``"olh"`` is the paper's), ``max_post_rounds`` (default 10), ``wu_threshold``
    (Algorithms 1 and 2, default 1/n), ``wu_max_iter`` (default 1000 sweeps), ``clip``, ``group_salt``.
    """

    name = "hdg"
    has_1d = True

    def finalize(self, accumulators: Mapping[int, Any]) -> HDGModel:
        tables, total, rounds = self.postprocessed_tables(accumulators)
        d = self.n_attributes
        one_d = {t.attrs[0]: t.values for t in tables[:d]}
        two_d = tables[d:]
        thr = float(self.wu_threshold) if self.wu_threshold is not None else 1.0 / max(total, 1)
        matrices: list[np.ndarray] = [None] * len(two_d)  # type: ignore[list-item]
        sweeps = np.zeros(len(two_d), dtype=np.int64)
        # Batch the pairs that share shapes (all of them when the attributes share a domain size).
        groups: dict[tuple, list[int]] = {}
        for i, t in enumerate(two_d):
            j, k = t.attrs
            key = (
                self.domain_sizes[j],
                self.domain_sizes[k],
                self.padded_sizes[j],
                self.padded_sizes[k],
                one_d[j].shape[0],
                one_d[k].shape[0],
                t.values.shape,
            )
            groups.setdefault(key, []).append(i)
        for (cj, ck, pj, pk, _, _, _), idx in groups.items():
            init = np.zeros((pj, pk))
            init[:cj, :ck] = 1.0 / (cj * ck)
            m, sw = response_matrices(
                np.broadcast_to(init, (len(idx), pj, pk)),
                np.stack([one_d[two_d[i].attrs[0]] for i in idx]),
                np.stack([one_d[two_d[i].attrs[1]] for i in idx]),
                np.stack([two_d[i].values for i in idx]),
                threshold=thr,
                max_iter=self.wu_max_iter,
            )
            for n_, i in enumerate(idx):
                matrices[i] = m[n_, :cj, :ck]
                sweeps[i] = sw[n_]
        return HDGModel(
            self.domain_sizes,
            total,
            pairs=[t.attrs for t in two_d],
            grids=[t.values for t in two_d],
            var0=[t.var0 for t in two_d],
            matrices=matrices,
            grids_1d=[one_d[t] for t in range(d)],
            var0_1d=[tables[t].var0 for t in range(d)],
            info={
                "epsilon": self.epsilon,
                "oracle": self.oracle_name,
                "g1": self.g1,
                "g2": self.g2,
                "post_rounds": rounds,
                "wu_sweeps": sweeps.tolist(),
            },
            wu_threshold=self.wu_threshold,
            wu_max_iter=self.wu_max_iter,
            clip=self.clip,
            epsilon=self.epsilon,
            oracles=self.grid_oracles()[d:],
            counts=self._last_counts[d:],
        )


# ------------------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------------------


def _prefix2(a: np.ndarray) -> np.ndarray:
    """(R+1, C+1) zero-padded 2-D cumulative sums."""
    out = np.zeros((a.shape[0] + 1, a.shape[1] + 1))
    out[1:, 1:] = a.cumsum(axis=0).cumsum(axis=1)
    return out


def _rect(pref: np.ndarray, r0: np.ndarray, r1: np.ndarray, c0: np.ndarray, c1: np.ndarray) -> np.ndarray:
    """Sums over inclusive index rectangles [r0, r1] x [c0, c1] (empty where r0 > r1 or c0 > c1)."""
    rows, cols = pref.shape[0] - 1, pref.shape[1] - 1
    empty = (r0 > r1) | (c0 > c1)
    r0, c0 = np.clip(r0, 0, rows), np.clip(c0, 0, cols)
    r1, c1 = np.clip(r1, -1, rows - 1), np.clip(c1, -1, cols - 1)
    s = pref[r1 + 1, c1 + 1] - pref[r0, c1 + 1] - pref[r1 + 1, c0] + pref[r0, c0]
    return np.where(empty, 0.0, s)


def _json_float(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _from_json_float(x: float | None) -> float:
    return math.inf if x is None else float(x)


class GridModel(AnswerPostprocessing, PairwiseRangeModel):
    """Answers from 2-D grids plus a value-level matrix per pair used inside partially covered cells.

    Args:
        domain_sizes: real domain sizes.
        n_users: reports behind the model.
        pairs: (j, k) of each 2-D grid.
        grids: post-processed cell frequencies of each pair, (g_j, g_k) over the padded domain.
        var0: variance of one cell's estimate in each grid (before post-processing).
        matrices: value-level (c_j, c_k) matrices; None = uniform guess inside cells (TDG).
        info: JSON-able diagnostics and parameters.
    """

    def __init__(
        self,
        domain_sizes: Sequence[int],
        n_users: int,
        *,
        pairs: Sequence[tuple[int, int]],
        grids: Sequence[np.ndarray],
        var0: Sequence[float],
        matrices: Sequence[np.ndarray] | None = None,
        info: Mapping[str, Any] | None = None,
        wu_threshold: float | None = None,
        wu_max_iter: int = 1000,
        clip: bool = True,
        epsilon: float | None = None,
        oracles: Sequence[Mapping[str, Any]] | None = None,
        counts: Sequence[int] | None = None,
    ) -> None:
        super().__init__(domain_sizes, n_users)
        self.clip = bool(clip)
        self.epsilon = None if epsilon is None else float(epsilon)
        self.oracle_specs = None if oracles is None else [dict(o) for o in oracles]
        self.counts = None if counts is None else [int(c) for c in counts]
        if self.oracle_specs is not None and (
            self.epsilon is None or self.counts is None or len(self.oracle_specs) != len(pairs)
            or len(self.counts) != len(pairs)
        ):
            raise ValueError("oracles needs epsilon and counts, one entry per 2-D grid")
        self._oracle_cache: dict[int, Any] = {}
        self.pairs = [tuple(int(a) for a in p) for p in pairs]
        self.grids = [np.asarray(g, dtype=np.float64) for g in grids]
        self.var0 = [float(v) for v in var0]
        self.info = dict(info or {})
        self.wu_threshold = None if wu_threshold is None else float(wu_threshold)
        self.wu_max_iter = int(wu_max_iter)
        self._index = {p: i for i, p in enumerate(self.pairs)}
        self.matrices: list[np.ndarray] = []
        self._blocks: list[tuple[int, int]] = []
        for (j, k), grid in zip(self.pairs, self.grids):
            cj, ck = self.domain_sizes[j], self.domain_sizes[k]
            bj = _next_pow2(cj) // grid.shape[0]
            bk = _next_pow2(ck) // grid.shape[1]
            self._blocks.append((bj, bk))
        if matrices is None:
            for grid, (bj, bk), (j, k) in zip(self.grids, self._blocks, self.pairs):
                self.matrices.append(
                    self._uniform_matrix(grid, bj, bk, self.domain_sizes[j], self.domain_sizes[k])
                )
        else:
            self.matrices = [np.asarray(m, dtype=np.float64) for m in matrices]
        self._pm = [_prefix2(m) for m in self.matrices]
        self._pg = [_prefix2(g) for g in self.grids]

    @staticmethod
    def _uniform_matrix(grid: np.ndarray, bj: int, bk: int, cj: int, ck: int) -> np.ndarray:
        """Each cell's frequency spread evenly over its real values (the uniform guess, TDG)."""
        rj = _real_per_cell(cj, grid.shape[0], bj)
        rk = _real_per_cell(ck, grid.shape[1], bk)
        per_value = np.divide(
            grid, np.multiply.outer(rj, rk), out=np.zeros_like(grid), where=np.multiply.outer(rj, rk) > 0
        )
        return np.repeat(np.repeat(per_value, bj, axis=0), bk, axis=1)[:cj, :ck]

    def _pair(self, j: int, k: int) -> int:
        try:
            return self._index[(j, k)]
        except KeyError:
            raise ValueError(f"the model has no grid for attribute pair ({j}, {k})") from None

    @staticmethod
    def _inner(lo: np.ndarray, hi: np.ndarray, b: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Cells [i0, i1] fully inside [lo, hi] on one attribute (real values only)."""
        i0 = (lo + b - 1) // b
        i1 = np.where(hi >= c - 1, (c + b - 1) // b - 1, (hi + 1) // b - 1)
        return i0, i1

    def answer_2d(self, j, k, lo_j, hi_j, lo_k, hi_k):
        """Whole cells from the grid, partial cells from the matrix (HDG) or uniform guess (TDG)."""
        p = self._pair(j, k)
        bj, bk = self._blocks[p]
        cj, ck = self.domain_sizes[j], self.domain_sizes[k]
        lo_j, hi_j, lo_k, hi_k = (np.asarray(x, dtype=np.int64) for x in (lo_j, hi_j, lo_k, hi_k))
        pm, pg = self._pm[p], self._pg[p]
        total = _rect(pm, lo_j, hi_j, lo_k, hi_k)
        i0, i1 = self._inner(lo_j, hi_j, bj, cj)
        k0, k1 = self._inner(lo_k, hi_k, bk, ck)
        inner_m = _rect(
            pm, i0 * bj, np.minimum((i1 + 1) * bj, cj) - 1, k0 * bk, np.minimum((k1 + 1) * bk, ck) - 1
        )
        inner_g = _rect(pg, i0, i1, k0, k1)
        return total - inner_m + inner_g

    @staticmethod
    def _phi2(lo: np.ndarray, hi: np.ndarray, b: int, c: int, g: int) -> np.ndarray:
        """Sum over cells of (covered real values / real values in the cell)^2, per query."""
        starts = np.arange(g) * b
        real = np.clip(c - starts, 0, b)
        ends = starts + real - 1
        cover = np.clip(
            np.minimum(hi[:, None], ends[None, :]) - np.maximum(lo[:, None], starts[None, :]) + 1, 0, None
        )
        phi = np.divide(cover, real[None, :], out=np.zeros(cover.shape), where=real[None, :] > 0)
        return (phi**2).sum(axis=1)

    @staticmethod
    def _phi(lo: np.ndarray, hi: np.ndarray, b: int, c: int, g: int) -> np.ndarray:
        """(Q, g): fraction of each cell's real values inside [lo, hi], per query."""
        starts = np.arange(g) * b
        real = np.clip(c - starts, 0, b)
        ends = starts + real - 1
        cover = np.clip(
            np.minimum(hi[:, None], ends[None, :]) - np.maximum(lo[:, None], starts[None, :]) + 1, 0, None
        )
        return np.divide(cover, real[None, :], out=np.zeros(cover.shape), where=real[None, :] > 0)

    def _grid_oracle(self, p: int) -> Any:
        if p not in self._oracle_cache:
            assert self.oracle_specs is not None and self.epsilon is not None
            self._oracle_cache[p] = oracle_from_spec(self.oracle_specs[p], self.epsilon, self.grids[p].size)
        return self._oracle_cache[p]

    def answer_2d_std(self, j, k, lo_j, hi_j, lo_k, hi_k):
        """Noise std of the uniform-guess answer from the raw (pre-post-processing) cell estimates.

        The answer is ``sum_s phi_s f_s`` with ``phi_s`` the fraction of cell ``s`` the query covers (1 for
        whole cells). Its variance is computed with the oracle the grid ran (covariances included, e.g.
        GRR's negative ones; :func:`weighted_sum_variance`), at the grid's post-processed frequencies and
        the grid's number of reports: the exact perturbation-noise standard deviation of the uniform-guess
        answer computed from the unbiased cells (Section 5's noise error). It ignores the non-uniformity
        error and is an approximation for HDG's partial cells and for post-processed answers. Models saved
        without their grids' oracles (older JSON) use ``sqrt(var0 * sum_s phi_s^2)``.
        """
        p = self._pair(j, k)
        bj, bk = self._blocks[p]
        gj, gk = self.grids[p].shape
        lo_j, hi_j, lo_k, hi_k = (np.asarray(x, dtype=np.int64) for x in (lo_j, hi_j, lo_k, hi_k))
        if self.oracle_specs is None or not self.counts[p]:  # type: ignore[index]
            s = self._phi2(lo_j, hi_j, bj, self.domain_sizes[j], gj) * self._phi2(
                lo_k, hi_k, bk, self.domain_sizes[k], gk
            )
            return np.sqrt(self.var0[p] * s)
        oracle = self._grid_oracle(p)
        n = self.counts[p]  # type: ignore[index]
        f = np.clip(self.grids[p].reshape(-1), 0.0, 1.0)
        phj = self._phi(lo_j, hi_j, bj, self.domain_sizes[j], gj)
        phk = self._phi(lo_k, hi_k, bk, self.domain_sizes[k], gk)
        out = np.empty(len(lo_j))
        for i in range(len(lo_j)):
            out[i] = weighted_sum_variance(oracle, n, np.multiply.outer(phj[i], phk[i]).reshape(-1), f)
        return np.sqrt(out)

    def std_method(self, lam: int) -> str:
        """The std is the grids' perturbation noise only: the non-uniformity (within-cell) error of the
        response matrices / uniform guess is not in it (``docs/intervals.md`` measures what that costs)."""
        return "grid-noise-only" if lam <= 2 else "simulated-wu-grid-noise-only"

    # ---- serialization -------------------------------------------------------------------------------------

    def _payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "info": self.info,
            "wu_threshold": self.wu_threshold,
            "wu_max_iter": self.wu_max_iter,
            "grids_2d": [
                {"attributes": list(p), "cells": g.tolist(), "var0": _json_float(v)}
                for p, g, v in zip(self.pairs, self.grids, self.var0)
            ],
        }
        if self.oracle_specs is not None:
            out["epsilon"] = self.epsilon
            for e, spec, n in zip(out["grids_2d"], self.oracle_specs, self.counts):  # type: ignore[arg-type]
                e["oracle"] = spec
                e["n"] = n
        return out

    @classmethod
    def _common_from_dict(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        g2 = d["grids_2d"]
        return dict(
            pairs=[tuple(e["attributes"]) for e in g2],
            grids=[np.asarray(e["cells"], dtype=np.float64) for e in g2],
            var0=[_from_json_float(e["var0"]) for e in g2],
            info=d.get("info", {}),
            wu_threshold=d.get("wu_threshold"),
            wu_max_iter=d.get("wu_max_iter", 1000),
            clip=bool(d.get("clip", True)),
            epsilon=d.get("epsilon"),
            oracles=[e["oracle"] for e in g2] if all("oracle" in e for e in g2) and g2 else None,
            counts=[e["n"] for e in g2] if all("n" in e for e in g2) and g2 else None,
        )


#: default report budget of a range group's ``auto`` oracle (bits per report)
RANGE_AUTO_MAX_REPORT_BITS = 256


def group_oracle_for(
    name: str, epsilon: float, cells: int, *, max_report_bits: int = RANGE_AUTO_MAX_REPORT_BITS
) -> Any:
    """The frequency oracle of one range-query group of ``cells`` cells.

    ``name`` other than ``"auto"``: ``make_oracle(name, epsilon, cells)``. ``"auto"``: from the candidate
    table of :func:`ldp.oracles.choose_oracle` (every mechanism built with its defaults; unbuildable ones
    skipped), keep those whose report has at most ``max_report_bits`` bits, Hadamard Response excluded;
    among those within :data:`ldp.oracles.AUTO_VARIANCE_TOLERANCE` (2%) of the lowest variance take the
    smallest report (OLH first on ties). When ``choose_oracle``'s own pick meets the constraints this is the
    same rule. Why the two constraints:

    * a range task has many groups of up to ``c^2`` cells, and every user of a group pays its report: at
      eps = 0.4-0.8 the plain rule picks OUE (4,096-bit reports, 4,096 accumulator increments per report)
      for a 64 x 64 marginal to gain 4% of variance over OLH's 65-bit report;
    * Hadamard Response ties OLH on per-value variance, but the variance of its *range* sums depends on how
      the range aligns with the Hadamard structure (``variance_of_sum`` with the users' frequencies: up to
      1.34x OLH's on 64 x 64 rectangles at eps = 1, Gaussian data), while OLH's (GF(2) family), GRR's and
      SS's do not favour particular sets.
    """
    if name != "auto":
        return make_oracle(name, epsilon, cells)
    first = make_oracle("auto", epsilon, cells)
    rows = [
        r for r in first.choice
        if r["report_bits"] is not None and math.isfinite(r["variance_factor"]) and r["mechanism"] != "hr"
        and r["report_bits"] <= max_report_bits
    ]
    if not rows:  # nothing fits the budget: the plain choice
        return first
    best = min(r["variance_factor"] for r in rows)
    eligible = [r for r in rows if r["variance_factor"] <= best * (1 + AUTO_VARIANCE_TOLERANCE)]
    pick = min(eligible, key=lambda r: (r["report_bits"], r["mechanism"] != "olh", r["variance_factor"]))
    if pick["mechanism"] == first.name:
        return first
    return make_oracle(pick["mechanism"], epsilon, cells)


def check_max_report_bits(options: Mapping[str, Any]) -> int:
    """The ``max_report_bits`` option (default :data:`RANGE_AUTO_MAX_REPORT_BITS`), an integer >= 1."""
    v = options.get("max_report_bits", RANGE_AUTO_MAX_REPORT_BITS)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"max_report_bits must be a positive integer, got {v!r}")
    return int(v)


def check_oracle_name(name: str) -> None:
    """Raises ValueError unless ``name`` is ``auto`` or an ``ldp.oracles`` mechanism name."""
    if name != "auto" and name not in MECHANISMS:
        raise ValueError(f"unknown oracle {name!r}; choose one of {sorted(MECHANISMS) + ['auto']}")


def oracle_spec(oracle: Any) -> dict[str, Any]:
    """What rebuilds a group's oracle (with :func:`oracle_from_spec`): its name and non-default parameters
    (OLH/BLH: ``g`` and the hash ``family``; SS: ``k``)."""
    spec: dict[str, Any] = {"mechanism": oracle.name}
    if oracle.name == "olh":
        spec["g"] = int(oracle.g)
    if oracle.name in ("olh", "blh") and hasattr(oracle, "family"):
        spec["family"] = oracle.family.name
    if oracle.name == "ss":
        spec["k"] = int(oracle.k)
    return spec


def oracle_from_spec(spec: Mapping[str, Any], epsilon: float, domain_size: int) -> Any:
    """The oracle an :func:`oracle_spec` describes."""
    params = {k: v for k, v in spec.items() if k != "mechanism"}
    return make_oracle(str(spec["mechanism"]), epsilon, domain_size, **params)


def weighted_sum_variance(oracle: Any, n: int, weights: np.ndarray, f: np.ndarray | None = None) -> float:
    """Variance of ``sum_v w_v f_hat_v`` for an oracle's estimates from ``n`` reports, covariances included.

    The oracle gives the variance of *set* sums (:meth:`ldp.oracles.FrequencyOracle.variance_of_sum`). With
    the weights taking the distinct non-zero values ``w_1 .. w_m`` on the disjoint sets ``S_1 .. S_m``,
    ``Var = sum_i w_i^2 V(S_i) + sum_{i<j} w_i w_j (V(S_i u S_j) - V(S_i) - V(S_j))`` (each pair's
    covariance from the variance of the union), exact for any oracle. A 2-D range query over a grid has at
    most 9 distinct weights (1 inside, the fractions of the partially covered first and last row / column).
    """
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    levels = np.unique(w[w != 0])
    if levels.size == 0:
        return 0.0
    sets = [w == lv for lv in levels]
    v = [oracle.variance_of_sum(n, s, f) for s in sets]
    total = sum(lv * lv * vi for lv, vi in zip(levels, v))
    for a in range(len(levels)):
        for b in range(a + 1, len(levels)):
            cov2 = oracle.variance_of_sum(n, sets[a] | sets[b], f) - v[a] - v[b]
            total += levels[a] * levels[b] * cov2
    return float(max(total, 0.0))


def _next_pow2(c: int) -> int:
    return 1 << (int(c) - 1).bit_length()


@register_model("tdg")
class TDGModel(GridModel):
    """TDG's model: 2-D grids with the uniform guess in partially covered cells."""

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> TDGModel:
        return cls(d["domain_sizes"], d["n_users"], **cls._common_from_dict(d))


@register_model("hdg")
class HDGModel(GridModel):
    """HDG's model: 2-D grids, 1-D grids and the response matrices (Algorithm 1)."""

    def __init__(self, domain_sizes, n_users, *, grids_1d=(), var0_1d=(), **kw) -> None:
        super().__init__(domain_sizes, n_users, **kw)
        self.grids_1d = [np.asarray(g, dtype=np.float64) for g in grids_1d]
        self.var0_1d = [float(v) for v in var0_1d]

    def _payload(self) -> dict[str, Any]:
        out = super()._payload()
        for e, m in zip(out["grids_2d"], self.matrices):
            e["response_matrix"] = m.tolist()
        out["grids_1d"] = [
            {"attribute": t, "cells": g.tolist(), "var0": _json_float(v)}
            for t, (g, v) in enumerate(zip(self.grids_1d, self.var0_1d))
        ]
        return out

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> HDGModel:
        kw = cls._common_from_dict(d)
        kw["matrices"] = [np.asarray(e["response_matrix"], dtype=np.float64) for e in d["grids_2d"]]
        g1 = d.get("grids_1d", [])
        return cls(
            d["domain_sizes"],
            d["n_users"],
            grids_1d=[e["cells"] for e in g1],
            var0_1d=[_from_json_float(e["var0"]) for e in g1],
            **kw,
        )
