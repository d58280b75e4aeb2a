"""HIO: the d-dimensional hierarchy of Wang et al. (SIGMOD 2019), as described by Yang et al. (VLDB 2021,
Section 3.2), plus the 1-D hierarchy tools LHIO reuses (interval decomposition, Hay et al.'s constrained
inference).

1-D hierarchy. Attribute ``a`` with domain ``c`` gets a ``b``-ary hierarchy (``branching`` b, default 5, the
optimum found by Wang et al.) with ``h = ceil(log_b c)`` below the root: level ``l`` (0 = root) has nodes of
``b^(h-l)`` consecutive values. Instead of padding ``c`` up to ``b^h`` we keep only the nodes that contain at
least one real value, ``m_l = ceil(c / b^(h-l))`` of them (the last node of a level may be partial); padded
values would have zero frequency anyway and would only enlarge the oracles' domains.

d-dim hierarchy. A d-dim level is a tuple ``(l_1, ..., l_d)``; its cells are the products of one node per
attribute, ``prod_a m_{a, l_a}`` of them. Users are split uniformly over the d-dim levels and report their
cell of their level at the full epsilon, with the oracle of option ``oracle`` (default ``"auto"``: per group,
:func:`ldp.oracles.make_oracle`'s choice for the group's number of cells, e.g. GRR on the small levels;
``"olh"`` is the paper's). The all-root level ``(0, ..., 0)`` has a single cell whose
frequency is 1 by definition, so no group collects it: there are ``prod_a (h_a + 1) - 1`` groups (the paper's
``(h + 1)^d`` less this one).

Answering. Each queried interval is decomposed into the least number of hierarchy nodes (greedy: take the
unaligned nodes at both ends of a level, go up one level); attributes the query does not constrain use the
root. The answer is the sum of the estimated frequencies of all cells in the cross product of the
per-attribute node sets (each cell belongs to one d-dim level, i.e. one group). Groups are independent, so
the variance of the answer is the sum over the groups it touches of the variance of the group's set sum,
computed with the oracle that group ran, covariances included
(:meth:`ldp.oracles.FrequencyOracle.variance_of_sum` at the group's estimated frequencies; GRR's cells are
negatively correlated, OLH's uncorrelated under the 3-wise independent GF(2) family), which
:meth:`HIOModel.answer_std` reports. Lazy groups use the OLH closed form with the ``O(f)`` terms dropped,
``cells * q (1 - q) / (n (p - q)^2)``.

Accumulators. A d-dim level with ``D`` cells needs an OLH statistic of about ``2 D`` integers; for ``d = 6``,
``c = 64`` the finest level has ``64^6`` cells, far beyond memory. Groups whose domain is at most
``dense_limit`` (default 4096) use the oracle's fixed-size accumulator and are estimated once at finalize;
larger groups keep their reports (seed and bucket; a group has about ``n / prod(h_a + 1)`` of them, 244 for
``n = 10^6``, ``d = 6``, ``c = 64``) and the support counts of exactly the cells a query needs are computed
from the reports at answer time (the "lazy" path; the group's oracle is a :class:`StoredReportsOLH`, OLH
with a :class:`ReportStore` accumulator, so the generic per-group accumulate code works for every group).
This is the only accumulator in the range-query package whose size grows with the number of reports.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp.hashing import DEFAULT_HASH_FAMILY, LinearHash
from ldp.oracles import OLH
from ldp.rangequery.base import RangeMechanism, RangeModel, register_model
from ldp.rangequery.grids import (
    check_max_report_bits,
    check_oracle_name,
    group_oracle_for,
    oracle_from_spec,
    oracle_spec,
)
from ldp.rangequery.queries import AnswerPostprocessing, RangeQuery, clip_option
from ldp.reports import Reports

__all__ = [
    "Hierarchy",
    "tree_constrained_inference",
    "olh_support",
    "ReportStore",
    "StoredReportsOLH",
    "HIOMechanism",
    "HIOModel",
]


# ------------------------------------------------------------------------------------------------------------
# 1-D hierarchy
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hierarchy:
    """A ``b``-ary hierarchy of intervals over ``[0, c)`` restricted to nodes holding real values.

    Attributes:
        c: domain size.
        b: branching factor (>= 2).
        h: number of levels below the root, ``ceil(log_b c)`` (0 when ``c == 1``).
        sizes: ``m_l = ceil(c / b^(h-l))`` nodes at level ``l = 0 .. h``.
    """

    c: int
    b: int

    def __post_init__(self) -> None:
        if int(self.c) < 1:
            raise ValueError(f"domain size must be >= 1, got {self.c}")
        if int(self.b) < 2:
            raise ValueError(f"branching factor must be >= 2, got {self.b}")

    @functools.cached_property
    def h(self) -> int:
        h, span = 0, 1
        while span < self.c:
            span *= self.b
            h += 1
        return h

    @functools.cached_property
    def sizes(self) -> tuple[int, ...]:
        h = self.h
        return tuple(-(-self.c // self.b ** (h - lv)) for lv in range(h + 1))

    def node_width(self, level: int) -> int:
        """Number of leaf values a (full) node of ``level`` covers: ``b^(h - level)``."""
        return self.b ** (self.h - level)

    def node_of(self, values: np.ndarray, level: int) -> np.ndarray:
        """Index of the node of ``level`` containing each value."""
        return np.asarray(values, dtype=np.int64) // self.node_width(level)

    def node_bounds(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Inclusive value ranges ``(lo, hi)`` of the nodes of ``level`` (clipped to ``[0, c)``)."""
        w = self.node_width(level)
        lo = np.arange(self.sizes[level], dtype=np.int64) * w
        return lo, np.minimum(lo + w, self.c) - 1

    def decompose(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The least set of nodes whose union is ``[lo, hi]`` (inclusive), as ``(level, index)`` pairs.

        Greedy bottom-up: at each level, nodes at the left end that do not start a parent and nodes at the
        right end that do not end a parent (the last node of a level always ends its parent) are taken;
        the remaining aligned range moves up one level.
        """
        lo, hi = int(lo), int(hi)
        if not 0 <= lo <= hi < self.c:
            raise ValueError(f"interval [{lo}, {hi}] outside [0, {self.c - 1}]")
        sizes = self.sizes
        out: list[tuple[int, int]] = []
        level, left, right = self.h, lo, hi + 1  # right exclusive
        while left < right:
            if level == 0:
                out.append((0, 0))
                break
            while left < right and left % self.b:
                out.append((level, left))
                left += 1
            while left < right and right % self.b and right != sizes[level]:
                right -= 1
                out.append((level, right))
            if left >= right:
                break
            left //= self.b
            right = sizes[level - 1] if right == sizes[level] else right // self.b
            level -= 1
        return sorted(out)


def _children_starts(h: Hierarchy, level: int) -> np.ndarray:
    """Start index (at ``level + 1``) of the children of every node of ``level``."""
    return np.arange(h.sizes[level], dtype=np.int64) * h.b


def tree_constrained_inference(levels: Sequence[np.ndarray], hier: Hierarchy) -> list[np.ndarray]:
    """Hay et al.'s (VLDB 2010) constrained inference on a hierarchy, along axis 0, batched over axis 1+.

    Least-squares consistent estimates from independent equal-variance noisy counts of every node. Hay's
    closed form assumes a complete ``b``-ary tree; the same two passes with variances tracked per node give
    the least-squares solution on any tree (here the last node of a level may have fewer children):

    * bottom-up: ``z[v] = x[v]`` at the leaves (variance 1); at an inner node, ``z[v]`` is the
      inverse-variance average of ``x[v]`` (variance 1) and the sum ``S`` of its children's ``z``
      (variance ``V`` = sum of theirs): ``z = (x + S / V) / (1 + 1 / V)``, variance ``1 / (1 + 1 / V)``.
      For a complete tree this is Hay's ``(b^l - b^(l-1)) / (b^l - 1) x + (b^(l-1) - 1) / (b^l - 1) S``.
    * top-down: ``x_bar[root] = z[root]``; each child gets ``z[u] + var[u] / V (x_bar[parent] - S)``, i.e. the
      parent's surplus shared in proportion to the children's variances (``1 / b`` each in Hay's case).

    Args:
        levels: ``levels[l]`` has shape ``(m_l, ...)``: noisy counts of the nodes of level ``l``, any batch
            axes after the first.
        hier: the hierarchy (gives ``m_l`` and ``b``).

    Returns:
        Consistent counts, same shapes: every node equals the sum of its children.
    """
    hh = hier.h
    if len(levels) != hh + 1:
        raise ValueError(f"expected {hh + 1} levels, got {len(levels)}")
    x = [np.asarray(a, dtype=np.float64) for a in levels]
    for lv, a in enumerate(x):
        if a.shape[0] != hier.sizes[lv]:
            raise ValueError(f"level {lv} has {a.shape[0]} nodes, expected {hier.sizes[lv]}")
    z: list[np.ndarray] = [np.empty(0)] * (hh + 1)
    var: list[np.ndarray] = [np.empty(0)] * (hh + 1)
    csum: list[np.ndarray] = [np.empty(0)] * (hh + 1)
    vsum: list[np.ndarray] = [np.empty(0)] * (hh + 1)
    z[hh] = x[hh]
    var[hh] = np.ones(hier.sizes[hh])
    for lv in range(hh - 1, -1, -1):
        starts = _children_starts(hier, lv)
        csum[lv] = np.add.reduceat(z[lv + 1], starts, axis=0)
        vsum[lv] = np.add.reduceat(var[lv + 1], starts)
        wv = (1.0 / vsum[lv]).reshape((-1,) + (1,) * (x[lv].ndim - 1))
        z[lv] = (x[lv] + csum[lv] * wv) / (1.0 + wv)
        var[lv] = 1.0 / (1.0 + 1.0 / vsum[lv])
    out = [z[0].copy()]
    for lv in range(1, hh + 1):
        parent = np.arange(hier.sizes[lv]) // hier.b
        surplus = (out[lv - 1] - csum[lv - 1])[parent]
        share = (var[lv] / vsum[lv - 1][parent]).reshape((-1,) + (1,) * (x[lv].ndim - 1))
        out.append(z[lv] + share * surplus)
    return out


# ------------------------------------------------------------------------------------------------------------
# OLH support counts of chosen cells (the lazy path)
# ------------------------------------------------------------------------------------------------------------

_PAIR_BUDGET = 1 << 22  # (report, cell) pairs hashed per chunk


def olh_support(hsh: LinearHash, seeds: np.ndarray, ys: np.ndarray, cells: np.ndarray,
                rows: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Support counts ``c_v = #{reports i : H_i(v) = y_i}`` of the given cells only.

    Same hash as :meth:`ldp.hashing.LinearHash.hash` (so the same as the OLH oracle of that domain), evaluated
    on the (report x cell) product in chunks.

    Args:
        hsh: the oracle's hash family.
        seeds: uint64 ``(n,)`` report seeds.
        ys: int64 ``(n,)`` reported buckets.
        cells: int64 ``(C,)`` values.
        rows: optional precomputed ``hsh.rows(seeds)``.

    Returns:
        float64 ``(C,)``.
    """
    cells = np.asarray(cells, dtype=np.int64).reshape(-1)
    n = len(ys)
    out = np.zeros(len(cells))
    if n == 0 or len(cells) == 0:
        return out
    if rows is None:
        rows = hsh.rows(np.asarray(seeds, dtype=np.uint64))
    ys = np.asarray(ys, dtype=np.int64)
    step = max(1, _PAIR_BUDGET // (n * hsh.k))
    if hsh.p == 2:
        # h(v) = y  <=>  for every output bit j: parity(row_j & v) == bit j of (y XOR b).
        mrows, b = rows
        target = ys ^ b
        want = [((target >> j) & 1).astype(np.uint8)[:, None] for j in range(hsh.k)]
        one = np.uint8(1)
        for s in range(0, len(cells), step):
            x = cells[s : s + step].astype(np.uint64)[None, :]
            match = (np.bitwise_count(mrows[:, 0, None] & x) & one) == want[0]
            for j in range(1, hsh.k):
                match &= (np.bitwise_count(mrows[:, j, None] & x) & one) == want[j]
            out[s : s + step] = np.count_nonzero(match, axis=0)
        return out
    # h(v) = y  <=>  for every output digit j: (M_j . digits(v) + b_j) mod p == digit j of y. The dot products
    # are small integers (< m p^2), exact in float64, so they go through a BLAS matrix product.
    # Float mod is slow, so the residue is read from a lookup table; the product uses einsum's own loop rather
    # than BLAS, whose threads stall on a loaded machine for these thin matrices (measured 12 ms vs 1.5 ms).
    M, b = rows
    pp = hsh.p
    top = hsh.m * (pp - 1) ** 2
    ftype = np.float32 if top < 2**24 else np.float64
    mf = M.reshape(n * hsh.k, hsh.m).astype(ftype)
    ydig = (ys[:, None] // (pp ** np.arange(hsh.k, dtype=np.int64))[None, :]) % pp
    want = ((ydig - b) % pp).reshape(n * hsh.k, 1).astype(np.uint8)  # M_j . x must be this mod p
    lut = (np.arange(top + 1) % pp).astype(np.uint8)
    for s in range(0, len(cells), step):
        dig_t = np.ascontiguousarray(hsh.digits(cells[s : s + step]).T.astype(ftype))  # (m, C)
        dots = np.einsum("nm,mc->nc", mf, dig_t, optimize=False).astype(np.intp)  # exact small integers
        ok = np.take(lut, dots) == want
        out[s : s + step] = np.count_nonzero(ok.reshape(n, hsh.k, -1).all(axis=1), axis=0)
    return out


@dataclass
class ReportStore:
    """Accumulator of a lazy (huge-domain) OLH group: the reports themselves (seed, bucket)."""

    seeds: np.ndarray
    values: np.ndarray

    @property
    def n(self) -> int:
        return len(self.values)

    @staticmethod
    def empty() -> ReportStore:
        return ReportStore(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))


class StoredReportsOLH(OLH):
    """OLH over a huge domain whose accumulator is the list of reports (:class:`ReportStore`).

    Everything but the accumulator is :class:`ldp.oracles.OLH`'s (this is a subclass): the client encoder,
    the hash family (default ``gf2-affine``, 3-wise independent), the bucket count ``g`` (default
    :func:`ldp.oracles.olh_buckets` for the domain), ``p``, ``q``, the validation, ``variance`` and
    ``variance_of_sum``. Only the accumulator differs: ``OLH`` keeps a transform table of about ``2 d``
    integers and refuses domains where it would exceed ``ldp.oracles.MAX_ACCUMULATOR_CELLS``, while this one
    keeps the reports and computes the support counts of exactly the cells a query needs
    (:meth:`support`). The generic per-group accumulate code of
    :class:`~ldp.rangequery.base.RangeMechanism` (and Beam CombineFns over it) works unchanged.
    """

    def __init__(
        self, epsilon: float, domain_size: int, g: int | None = None, family: str = DEFAULT_HASH_FAMILY
    ) -> None:
        super().__init__(epsilon, domain_size, g=g, family=family)

    def _check_size(self) -> None:
        """No table to bound: the accumulator is the reports (a group has ``n / groups`` of them)."""

    @property
    def accumulator_cells(self) -> int:
        return 0

    def estimate(self, acc: Any) -> Any:
        raise ValueError(
            "StoredReportsOLH has no all-values estimate (the domain is too large); use support(acc, cells)"
        )

    def create_accumulator(self) -> ReportStore:
        return ReportStore.empty()

    def add(self, acc: ReportStore, reports: Reports) -> ReportStore:
        if len(reports) == 0:
            return acc
        return ReportStore(
            np.concatenate([acc.seeds, np.asarray(reports.seeds).astype(np.uint64)]),
            np.concatenate([acc.values, np.asarray(reports.values, dtype=np.int64)]),
        )

    def merge(self, accumulators: Sequence[ReportStore]) -> ReportStore:
        accs = list(accumulators)
        if not accs:
            return ReportStore.empty()
        return ReportStore(np.concatenate([a.seeds for a in accs]), np.concatenate([a.values for a in accs]))

    def support(self, acc: ReportStore, cells: np.ndarray) -> np.ndarray:
        """Support counts of the given cells (see :func:`olh_support`)."""
        return olh_support(self.hash, acc.seeds, acc.values, cells)


# ------------------------------------------------------------------------------------------------------------
# mechanism
# ------------------------------------------------------------------------------------------------------------


def _check_branching(b: Any) -> int:
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or int(b) < 2:
        raise ValueError(f"branching must be an integer >= 2, got {b!r}")
    return int(b)


class HIOMechanism(RangeMechanism):
    """HIO (Wang et al. 2019; Yang et al. 2021 Section 3.2): one group per d-dim level of the hierarchy.

    Options:
        branching: hierarchy fan-out ``b`` (default 5).
        max_report_bits: report budget of ``auto`` (default 256).
        oracle: frequency oracle of the groups with a dense accumulator, ``"auto"`` (default: per group) or
            any name of :func:`ldp.oracles.make_oracle` (``"olh"`` is the paper's); lazy groups always use
            OLH (:class:`StoredReportsOLH`).
        dense_limit: largest group domain (number of cells) with a dense accumulator (default 4096).
        clip: clip answers to [0, 1] (default True, see :class:`ldp.rangequery.queries.AnswerPostprocessing`).
    """

    name = "hio"
    OPTIONS = frozenset({"branching", "oracle", "max_report_bits", "dense_limit", "clip"})

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        self.branching = _check_branching(options.get("branching", 5))
        self.oracle_name = str(options.get("oracle", "auto")).lower()
        self.max_report_bits = check_max_report_bits(options)
        self.dense_limit = int(options.get("dense_limit", 4096))
        self.clip = clip_option(options)
        if self.dense_limit < 1:
            raise ValueError("dense_limit must be >= 1")
        self.hierarchies = tuple(Hierarchy(c, self.branching) for c in self.domain_sizes)
        self.level_counts = tuple(h.h + 1 for h in self.hierarchies)
        total = math.prod(self.level_counts)
        if total < 2:
            raise ValueError("HIO needs at least one attribute with domain size >= 2")
        self._n_groups = total - 1
        biggest = math.prod(h.sizes[-1] for h in self.hierarchies)
        if biggest >= 2**62:
            raise ValueError(f"HIO's finest level has {biggest} cells; more than 2^62 is not supported")
        check_oracle_name(self.oracle_name)
        self._oracles: dict[tuple[int, bool], Any] = {}
        levels = np.array(np.unravel_index(np.arange(1, total), self.level_counts)).T  # (groups, d)
        self._levels = [tuple(int(x) for x in row) for row in levels]
        self._shapes = [tuple(h.sizes[lv] for h, lv in zip(self.hierarchies, row)) for row in self._levels]
        self._domains = [math.prod(s) for s in self._shapes]

    # ---- groups -------------------------------------------------------------------------------------------
    @property
    def n_groups(self) -> int:
        return self._n_groups

    def levels_of(self, group: int) -> tuple[int, ...]:
        """The d-dim level ``(l_1, ..., l_d)`` of a group."""
        return self._levels[self._check_group(group)]

    def group_label(self, group: int) -> str:
        return "L" + "-".join(str(x) for x in self.levels_of(group))

    def group_shape(self, group: int) -> tuple[int, ...]:
        """Number of nodes per attribute at the group's level (the group's cell array shape)."""
        return self._shapes[self._check_group(group)]

    def group_domain(self, group: int) -> int:
        return self._domains[self._check_group(group)]

    def is_dense(self, group: int) -> bool:
        return self.group_domain(group) <= self.dense_limit

    def group_oracle(self, group: int) -> Any:
        dom = self.group_domain(group)
        dense = dom <= self.dense_limit
        key = (dom, dense)
        if key not in self._oracles:
            if dense:
                self._oracles[key] = group_oracle_for(
                    self.oracle_name, self.epsilon, dom, max_report_bits=self.max_report_bits
                )
            else:
                self._oracles[key] = StoredReportsOLH(self.epsilon, dom)
        return self._oracles[key]

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        levels = self.levels_of(group)
        shape = self.group_shape(group)
        idx = tuple(h.node_of(records[:, a], lv) for a, (h, lv) in enumerate(zip(self.hierarchies, levels)))
        return np.ravel_multi_index(idx, shape).astype(np.int64)

    # ---- finalize ------------------------------------------------------------------------------------------
    def finalize(self, accumulators: Mapping[int, Any]) -> HIOModel:
        dense: dict[int, tuple[np.ndarray, float, int]] = {}
        lazy: dict[int, ReportStore] = {}
        specs: dict[int, dict[str, Any]] = {}
        n_total = 0
        for g in range(self.n_groups):
            acc = accumulators.get(g)
            if acc is None:
                acc = self.create_accumulator(g)
            n_total += int(acc.n)
            if self.is_dense(g):
                if acc.n == 0:
                    continue
                oracle = self.group_oracle(g)
                est = oracle.estimate(acc)
                dense[g] = (est.frequencies, float(oracle.variance(acc.n)), int(acc.n))
                specs[g] = oracle_spec(oracle)
            elif acc.n:
                lazy[g] = acc
                specs[g] = oracle_spec(self.group_oracle(g))
        model = HIOModel(
            self.domain_sizes,
            n_total,
            epsilon=self.epsilon,
            branching=self.branching,
            dense=dense,
            lazy=lazy,
            oracles=specs,
        )
        model.clip = self.clip
        return model


# ------------------------------------------------------------------------------------------------------------
# model
# ------------------------------------------------------------------------------------------------------------


@register_model("hio")
class HIOModel(AnswerPostprocessing, RangeModel):
    """Finalized HIO: per-group cell frequencies (dense groups) or reports (lazy groups).

    A group without reports contributes the uniform guess for its cells (their share of the domain), with
    infinite variance (``answer_std`` is then inf).
    """

    def __init__(
        self,
        domain_sizes: Sequence[int],
        n_users: int,
        *,
        epsilon: float,
        branching: int,
        dense: Mapping[int, tuple[np.ndarray, float, int]],
        lazy: Mapping[int, ReportStore],
        oracles: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(domain_sizes, n_users)
        self.epsilon = float(epsilon)
        self.branching = int(branching)
        self.hierarchies = tuple(Hierarchy(c, self.branching) for c in self.domain_sizes)
        self.level_counts = tuple(h.h + 1 for h in self.hierarchies)
        self.dense = {
            int(g): (np.asarray(f, dtype=np.float64), float(v), int(n)) for g, (f, v, n) in dense.items()
        }
        self.lazy = {int(g): s for g, s in lazy.items()}
        self.oracle_specs = {int(g): dict(s) for g, s in (oracles or {}).items()}
        self._olh: dict[int, StoredReportsOLH] = {}
        self._dense_oracles: dict[int, Any] = {}
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _shape(self, levels: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(h.sizes[lv] for h, lv in zip(self.hierarchies, levels))

    def _uniform_share(self, levels: tuple[int, ...], idx: Sequence[np.ndarray]) -> np.ndarray:
        """Fraction of the domain inside each cell (broadcast product over attributes)."""
        share = np.ones(1)
        for a, (h, lv) in enumerate(zip(self.hierarchies, levels)):
            lo, hi = h.node_bounds(lv)
            share = np.multiply.outer(share, (hi[idx[a]] - lo[idx[a]] + 1) / h.c)
        return share.reshape(-1)

    def _group_sum(
        self, levels: tuple[int, ...], idx: Sequence[np.ndarray], want_var: bool
    ) -> tuple[float, float]:
        """(sum of estimated frequencies, variance) over the cross product of node indices ``idx``; with
        ``want_var`` only the variance is computed (the sum is 0), else only the sum (the variance is 0)."""
        g = int(np.ravel_multi_index(levels, self.level_counts)) - 1
        shape = self._shape(levels)
        mesh = np.ix_(*[np.asarray(i, dtype=np.int64) for i in idx])
        cells = np.ravel_multi_index(mesh, shape).reshape(-1)
        n_cells = len(cells)
        if g in self.dense:
            f, var0, n = self.dense[g]
            if not want_var:
                return float(f[cells].sum()), 0.0
            spec = self.oracle_specs.get(g)
            if spec is None:  # a model saved without its oracles: independent cells
                return 0.0, n_cells * var0
            if g not in self._dense_oracles:
                self._dense_oracles[g] = oracle_from_spec(spec, self.epsilon, math.prod(shape))
            var = self._dense_oracles[g].variance_of_sum(n, cells, np.clip(f, 0.0, 1.0))
            return 0.0, float(var)
        if g in self.lazy:
            store = self.lazy[g]
            dom = math.prod(shape)
            oracle = self._olh.get(g)
            if oracle is None:
                spec = self.oracle_specs.get(g, {})
                oracle = self._olh[g] = StoredReportsOLH(
                    self.epsilon, dom, g=spec.get("g"), family=spec.get("family", DEFAULT_HASH_FAMILY)
                )
            if want_var:
                return 0.0, n_cells * float(oracle.variance(store.n))
            if g not in self._rows:
                self._rows[g] = oracle.hash.rows(store.seeds)
            sup = olh_support(oracle.hash, store.seeds, store.values, cells, rows=self._rows[g]).sum()
            n = store.n
            est = (sup / n - n_cells * oracle.q) / (oracle.p - oracle.q)
            return float(est), 0.0
        return (0.0, math.inf) if want_var else (float(self._uniform_share(levels, idx).sum()), 0.0)

    def _answer_one(self, q: RangeQuery, want_var: bool = False) -> tuple[float, float]:
        """(answer, 0) or, with ``want_var``, (0, variance) of one query."""
        per_attr: list[dict[int, np.ndarray]] = []
        ivs = {a: (lo, hi) for a, lo, hi in q.intervals}
        for a, h in enumerate(self.hierarchies):
            if a in ivs:
                nodes = h.decompose(*ivs[a])
                by_level: dict[int, list[int]] = {}
                for lv, i in nodes:
                    by_level.setdefault(lv, []).append(i)
                per_attr.append({lv: np.array(ix, dtype=np.int64) for lv, ix in by_level.items()})
            else:
                per_attr.append({0: np.zeros(1, dtype=np.int64)})
        total, var = 0.0, 0.0
        for levels in itertools.product(*[sorted(d) for d in per_attr]):
            if not any(levels):
                total += 0.0 if want_var else 1.0  # the all-root cell: frequency 1 exactly
                continue
            s, v = self._group_sum(levels, [per_attr[a][lv] for a, lv in enumerate(levels)], want_var)
            total += s
            var += v
        return total, var

    def _raw_answer(self, queries: list[RangeQuery]) -> np.ndarray:
        return np.array([self._answer_one(q)[0] for q in queries], dtype=np.float64)

    def _raw_answer_std(self, queries: list[RangeQuery]) -> np.ndarray:
        """Closed-form standard deviation: ``sqrt(sum over cells of the variance of its group's oracle)``."""
        return np.sqrt(np.array([self._answer_one(q, want_var=True)[1] for q in queries], dtype=np.float64))

    def _payload(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "branching": self.branching,
            "dense": {
                str(g): {"frequencies": f.tolist(), "var0": v, "n": n} for g, (f, v, n) in self.dense.items()
            },
            "lazy": {
                str(g): {"seeds": [str(int(x)) for x in s.seeds], "values": s.values.tolist()}
                for g, s in self.lazy.items()
            },
            "oracles": {str(g): s for g, s in self.oracle_specs.items()},
        }

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> HIOModel:
        dense = {int(g): (np.asarray(v["frequencies"]), v["var0"], v["n"]) for g, v in d["dense"].items()}
        lazy = {
            int(g): ReportStore(
                np.array([int(x) for x in v["seeds"]], dtype=np.uint64),
                np.asarray(v["values"], dtype=np.int64),
            )
            for g, v in d["lazy"].items()
        }
        oracles = {int(g): s for g, s in d.get("oracles", {}).items()}
        model = cls(d["domain_sizes"], d["n_users"], epsilon=d["epsilon"], branching=d["branching"],
                    dense=dense, lazy=lazy, oracles=oracles)
        return model._restore_options(d)
