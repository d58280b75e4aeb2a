"""SVME aggregation: fixed-size mergeable accumulators and the estimator with closed-form variance.

The estimate of item ``x`` is ``v_x = (1/n) sum_i s_i(x) B_{i, h_i(x)}`` over all ``n`` reports.

Two accumulators, both integer (reports are integer codes), so merges are exact and order-free:

* :class:`QueryAccumulator` -- a known query set ``Q`` (``q`` item ids, any universe up to ``2**63``,
  any hash family): ``q`` integer sums; ``add`` costs ``O(q)`` hash evaluations per report.
* :class:`TableAccumulator` -- the whole vector, ``gf2-affine`` hashes only: with
  ``h(x) = M x + c`` and ``s(x) = (-1)^(<a, x> + e)`` the indicator of ``h(x) = j`` is
  ``2**-r sum_u (-1)^(<u, c + j> + <M^T u, x>)``, so a report's contribution to *every* ``x`` is

      s(x) B_{h(x)} = 2**-r sum_u (-1)^e Bhat_u (-1)^(<a + M^T u, x>),
      Bhat_u = sum_j B_j (-1)^(<u, c + j>)   (a b-point Walsh-Hadamard transform of the bins),

  i.e. ``b`` Walsh functions of ``x``. A report adds ``(-1)^e Bhat_u`` to cell ``a ^ M^T u`` of a
  ``2**m`` table (``m = ceil(log2 d)``), ``O(b log b)`` work; one Walsh-Hadamard transform of the table
  at finalize gives ``b * sum_i s_i(x) code_i[h_i(x)]`` for every ``x`` at once (exact integers), at
  position ``pi(x)`` (``x`` above stands for the permuted id ``pi(x)``, see
  :func:`ldp.sparse.hashes.item_bits`).

Besides the bin sums both keep ``n`` and ``sum_i sum_j code_ij^2``: since ``E[sum_j C_j^2] = ||v||^2``
(cross terms have random signs), ``(1/n) sum_ij B_ij^2 - b * noise variance`` is an unbiased estimate
of the mean squared norm, which is what the per-coordinate variance needs. Per-coordinate variance
(ideal or pairwise-independent hashes, no clipping):

    Var[v_x] = (1/n^2) sum_i [ (||v_i||^2 - v_{i,x}^2) / b + noise variance per bin ]

(Duchi bins: ``(1/n^2) sum_i [ (eta c_eps)^2 - mu_{i,x}^2 ]``). The std reported with every estimate
plugs the estimated mean norm into the first form and drops the ``v_{i,x}^2`` term (it is at most
``1/b`` against the noise term, and dropping it errs on the safe side).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from ldp.payload import Refusal, WireSpec, refuse
from ldp.sparse.encode import EncodeStats, SparseReports, encode
from ldp.sparse.hashes import bins_signs, domain_bits, gf2_params, item_bits
from ldp.sparse.params import SparseParams
from ldp.sparse.vectors import SparseVectors

__all__ = [
    "QueryAccumulator",
    "TableAccumulator",
    "SparseEstimate",
    "SVME",
    "walsh_hadamard",
    "MAX_TABLE_BITS",
    "linf_bound",
    "add_query_sums",
    "add_table_sums",
    "table_sums",
]

#: largest whole-vector table: 2**27 int64 cells (1 GiB)
MAX_TABLE_BITS = 27
_CELLS_PER_CHUNK = 1 << 22


def walsh_hadamard(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform along ``axis`` (length a power of two; exact for ints)."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    shape = x.shape
    n = shape[-1]
    if n & (n - 1):
        raise ValueError(f"Walsh-Hadamard length must be a power of two, got {n}")
    y = x.reshape(-1, n).copy()
    h = 1
    while h < n:
        y = y.reshape(y.shape[0], -1, 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack((a + b, a - b), axis=2)
        h *= 2
    return np.moveaxis(y.reshape(shape), -1, axis)


def linf_bound(std: np.ndarray, level: float = 0.95) -> float:
    """Predicted L-inf error bound at ``level`` over the given coordinates (Gaussian tails, union bound)."""
    std = np.asarray(std)
    if std.size == 0:
        return 0.0
    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / (2.0 * std.size))
    return float(z * std.max())


@dataclasses.dataclass
class QueryAccumulator:
    """Sums over a known query set: ``n``, ``sums[q]`` (int64), ``sumsq`` (int)."""

    items: np.ndarray
    n: int = 0
    sums: np.ndarray | None = None
    sumsq: int = 0

    def __post_init__(self) -> None:
        self.items = np.asarray(self.items, dtype=np.uint64).reshape(-1)
        if self.sums is None:
            self.sums = np.zeros(self.items.size, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return int(self.sums.nbytes + self.items.nbytes + 16)

    def copy(self) -> QueryAccumulator:
        return QueryAccumulator(self.items.copy(), self.n, self.sums.copy(), self.sumsq)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, QueryAccumulator)
            and self.n == other.n
            and self.sumsq == other.sumsq
            and np.array_equal(self.items, other.items)
            and np.array_equal(self.sums, other.sums)
        )


@dataclasses.dataclass
class TableAccumulator:
    """Whole-vector accumulator (gf2-affine): ``n``, ``table[2**m]`` (int64), ``sumsq`` (int)."""

    m: int
    n: int = 0
    table: np.ndarray | None = None
    sumsq: int = 0

    def __post_init__(self) -> None:
        if self.table is None:
            self.table = np.zeros(1 << self.m, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes + 16)

    def copy(self) -> TableAccumulator:
        return TableAccumulator(self.m, self.n, self.table.copy(), self.sumsq)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TableAccumulator)
            and self.m == other.m
            and self.n == other.n
            and self.sumsq == other.sumsq
            and np.array_equal(self.table, other.table)
        )


@dataclasses.dataclass
class SparseEstimate:
    """Estimated means with their standard deviations.

    Attributes:
        items: uint64 ``(q,)`` item ids.
        mean: the estimates (not clipped to [-1, 1]; see :meth:`clipped`): unbiased when
            ``shrinkage == 0``.
        variance: closed-form per-coordinate variance (plug-in, see the module docstring).
        n: number of reports.
        mean_norm2: estimated mean squared L2 norm of the clients' (clipped) bin vectors, or None.
        shrinkage: ``q`` of :func:`ldp.sparse.params.clip_shrinkage` when the bins' clip can bind: each
            holder's contribution to ``E[mean]`` lies between ``(1 - q) v`` and ``v``, so
            ``|E[mean] - true mean| <= q`` and (with ``P + N <= 1``, the means of the positive and
            negative parts) the true mean lies in ``[(E[mean] - q/2) / (1 - q/2), (E[mean] + q/2) /
            (1 - q/2)]``.
    """

    items: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    n: int
    mean_norm2: float | None = None
    shrinkage: float = 0.0

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.variance)

    @property
    def unbiased(self) -> bool:
        """Whether ``mean`` is unbiased (no binding clip)."""
        return self.shrinkage == 0.0

    def linf_bound(self, level: float = 0.95) -> float:
        """The L-inf error over these items at ``level``: the Gaussian-tail bound of the noise plus the
        clipping bias bound ``shrinkage`` (0 when unbiased)."""
        return linf_bound(self.std, level) + float(self.shrinkage) if self.items.size else 0.0

    def interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Per-coordinate interval for the true mean: ``mean +- z std`` when unbiased; with a binding
        clip the normal interval of ``E[mean]`` mapped through the shrinkage bound (class docstring),
        intersected with [-1, 1]."""
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
        half = z * np.asarray(self.std, dtype=np.float64)
        m = np.asarray(self.mean, dtype=np.float64)
        g = float(self.shrinkage) / 2.0
        if g == 0.0:
            return m - half, m + half
        # every true mean lies in [-1, 1], so the intersection covers whenever the interval does
        lo, hi = (m - half - g) / (1.0 - g), (m + half + g) / (1.0 - g)
        return np.clip(lo, -1.0, 1.0), np.clip(hi, -1.0, 1.0)

    def clipped(self) -> np.ndarray:
        """The estimates clipped to [-1, 1] (post-processing; what the paper's code reports)."""
        return np.clip(self.mean, -1.0, 1.0)

    def top(self, count: int) -> SparseEstimate:
        """The ``count`` items with the largest ``|mean|``."""
        idx = np.argsort(-np.abs(self.mean), kind="stable")[:count]
        return SparseEstimate(
            self.items[idx], self.mean[idx], self.variance[idx], self.n, self.mean_norm2, self.shrinkage
        )


def add_query_sums(
    acc: QueryAccumulator, seeds: np.ndarray, codes: np.ndarray, family: str, b: int, d: int
) -> None:
    """``acc.sums[x] += sum_i s_i(x) codes[i, h_i(x)]`` for the query items (chunked, vectorised)."""
    q = acc.items.size
    if q == 0 or len(seeds) == 0:
        return
    step = max(1, _CELLS_PER_CHUNK // q)
    items = acc.items[None, :]
    for lo in range(0, len(seeds), step):
        sd, cd = seeds[lo : lo + step], codes[lo : lo + step]
        h, s = bins_signs(family, sd, items, b, d)
        contrib = s * cd[:, :1] if b == 1 else s * np.take_along_axis(cd, h, axis=1)
        acc.sums += contrib.sum(axis=0, dtype=np.int64)


def add_table_sums(acc: TableAccumulator, seeds: np.ndarray, codes: np.ndarray) -> None:
    """Adds gf2-affine reports to the Walsh table: ``O(b log b)`` per report (module docstring)."""
    b = codes.shape[1]
    r = b.bit_length() - 1
    u = np.arange(b, dtype=np.uint64)
    step = max(1, (1 << 16) // b)
    for lo in range(0, len(seeds), step):
        sd, cd = seeds[lo : lo + step], codes[lo : lo + step]
        rows, a, c, e = gf2_params(sd, r, acc.m)
        bhat = walsh_hadamard(cd, axis=1) if b > 1 else cd.astype(np.int64, copy=True)
        # (-1)^(<u, c> + e): the offset c permutes the bins, e flips the sign
        par = (np.bitwise_count(u[None, :] & c.astype(np.uint64)[:, None]) & np.uint8(1)).astype(np.int64)
        bhat *= 1 - 2 * (par ^ e[:, None])
        idx = a[:, None]
        for j in range(r):
            idx = np.concatenate((idx, idx ^ rows[:, j : j + 1]), axis=1)
        # float64 bincount is exact here: every partial sum is an integer far below 2**53
        acc.table += np.rint(
            np.bincount(idx.ravel().astype(np.int64), weights=bhat.ravel(), minlength=acc.table.size)
        ).astype(np.int64)


def table_sums(acc: TableAccumulator, b: int, d: int, items: np.ndarray | None = None):
    """``(items, sum_i s_i(x) code_i[h_i(x)])`` from a Walsh table (one transform, exact integers)."""
    full = walsh_hadamard(acc.table)
    if b > 1:
        full = full // b  # exact: every entry is b times an integer
    if items is None:
        items = np.arange(d, dtype=np.uint64)
    items = np.asarray(items, dtype=np.uint64)
    return items, full[item_bits(items, acc.m).astype(np.int64)]


class SVME:
    """Sparse vector mean estimation (Zhou et al., S&P 2022): client, accumulators, estimator.

    Args:
        params: from :func:`ldp.sparse.params.choose_params`.
    """

    name = "svme"
    wire = WireSpec("sparse", "sparse", "encode_sparse_svme")

    def __init__(self, params: SparseParams) -> None:
        self.params = params

    def __repr__(self) -> str:
        p = self.params
        return f"SVME(b={p.bins}, Delta={p.Delta:g}, eta={p.eta}, noise={p.noise!r}, hash={p.hash_family!r})"

    # -- client ------------------------------------------------------------------------------------
    def encode(self, vectors: SparseVectors, *, rng=None) -> tuple[SparseReports, EncodeStats]:
        """See :func:`ldp.sparse.encode.encode`."""
        return encode(self.params, vectors, rng=rng)

    @property
    def report_bits(self) -> int:
        return self.params.report_bits

    # -- validation --------------------------------------------------------------------------------
    def validate(self, reports: SparseReports) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, reasons)``: a boolean mask and an object array with ``None`` or the reason per report."""
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.codes.shape[1] != self.params.bins:
            why = f"report has {reports.codes.shape[1]} bins, the round uses {self.params.bins}"
            reasons[:] = Refusal("invalid_payload", why)
            return np.zeros(n, dtype=bool), reasons
        c = reports.codes
        if self.params.noise == "duchi":
            bad = ~np.all((c == 1) | (c == -1), axis=1)
            refuse(reasons, bad, "invalid_payload", "Duchi bins must be +1 or -1")
        else:
            bad = np.any(np.abs(c) > self.params.max_code, axis=1)
            top = self.params.max_code
            refuse(reasons, bad, "out_of_domain", f"bin code outside [-{top}, {top}]")
        return np.equal(reasons, None), reasons

    def _check(self, reports: SparseReports) -> None:
        ok, reasons = self.validate(reports)
        if not ok.all():
            raise ValueError(f"invalid report {int(np.argmin(ok))}: {reasons[~ok][0]}")

    # -- accumulators ------------------------------------------------------------------------------
    def create_accumulator(self, items: np.ndarray | None = None) -> QueryAccumulator | TableAccumulator:
        """A :class:`QueryAccumulator` over ``items``, or (``items=None``) the whole-vector table.

        Raises:
            ValueError: ``items=None`` with a hash family other than gf2-affine, or a table above
                ``2**MAX_TABLE_BITS`` cells (give the query set instead).
        """
        p = self.params
        if items is not None:
            items = np.asarray(items)
            if items.dtype.kind not in "iu":
                raise ValueError("query items must be integer ids")
            d_ = np.uint64(p.domain_size)
            bad = items.size and (items.min() < 0 or items.astype(np.uint64).max() >= d_)
            if bad:
                raise ValueError(f"query items must lie in [0, {p.domain_size})")
            return QueryAccumulator(items)
        if p.hash_family != "gf2-affine":
            raise ValueError(
                "the whole-vector accumulator needs the gf2-affine hash family "
                f"(round uses {p.hash_family!r}); "
                "give a query set"
            )
        m = domain_bits(p.domain_size)
        if m > MAX_TABLE_BITS:
            raise ValueError(
                f"a whole-vector table for d = {p.domain_size} needs 2**{m} cells "
                f"(limit 2**{MAX_TABLE_BITS}); "
                "give a query set"
            )
        return TableAccumulator(m)

    def add(self, acc, reports: SparseReports):
        """Adds a batch of (valid) reports in place and returns ``acc``."""
        self._check(reports)
        n = len(reports)
        if n == 0:
            return acc
        acc.n += n
        acc.sumsq += int(np.einsum("ij,ij->", reports.codes, reports.codes, dtype=np.int64))
        if isinstance(acc, QueryAccumulator):
            self._add_query(acc, reports)
        else:
            self._add_table(acc, reports)
        return acc

    def _add_query(self, acc: QueryAccumulator, reports: SparseReports) -> None:
        p = self.params
        add_query_sums(acc, reports.seeds, reports.codes, p.hash_family, p.bins, p.domain_size)

    def _add_table(self, acc: TableAccumulator, reports: SparseReports) -> None:
        add_table_sums(acc, reports.seeds, reports.codes)

    def merge(self, accumulators: Sequence):
        """Elementwise sum of accumulators of the same kind and query set (a new object)."""
        accs = list(accumulators)
        if not accs:
            raise ValueError("nothing to merge")
        out = accs[0].copy()
        for other in accs[1:]:
            if type(other) is not type(out):
                raise ValueError("cannot merge a query-set accumulator with a whole-vector table")
            if isinstance(out, QueryAccumulator):
                if not np.array_equal(out.items, other.items):
                    raise ValueError("cannot merge accumulators over different query sets")
                out.sums += other.sums
            else:
                if out.m != other.m:
                    raise ValueError("cannot merge tables of different sizes")
                out.table += other.table
            out.n += other.n
            out.sumsq += other.sumsq
        return out

    # -- estimates ---------------------------------------------------------------------------------
    def raw_sums(self, acc, items: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(items, sum_i s_i(x) code_i[h_i(x)])`` from an accumulator (exact integers)."""
        if isinstance(acc, QueryAccumulator):
            return acc.items, acc.sums.copy()
        return table_sums(acc, self.params.bins, self.params.domain_size, items)

    def mean_norm2(self, n: int, sumsq: int) -> float | None:
        """Unbiased estimate of the clients' mean squared bin-vector norm (None for Duchi)."""
        p = self.params
        if p.noise == "duchi" or n == 0:
            return None
        m2 = p.code_scale**2 * sumsq / n - p.bins * p.bin_noise_variance()
        return float(min(max(m2, 0.0), float(p.sparsity)))

    def predicted_variance(self, n: int, mean_norm2: float | None = None, mean_sq: np.ndarray | float = 0.0):
        """Closed-form ``Var[v_x]`` for ``n`` reports, mean squared norm ``mean_norm2`` (default k) and
        ``mean_sq = (1/n) sum_i v_{i,x}^2``."""
        p = self.params
        if n <= 0:
            return np.full(np.shape(mean_sq), np.inf)
        if p.noise == "duchi":
            return (p.duchi_second_moment() - np.asarray(mean_sq, dtype=float)) / n
        m2 = float(p.sparsity) if mean_norm2 is None else mean_norm2
        return ((m2 - np.asarray(mean_sq, dtype=float)) / p.bins + p.bin_noise_variance()) / n

    def estimate(self, acc, items: np.ndarray | None = None) -> SparseEstimate:
        """Estimates (with std) for the accumulator's items (query set) or ``items`` / all of ``[0, d)``."""
        ids, sums = self.raw_sums(acc, items)
        n = acc.n
        mean = self.params.code_scale * sums / n if n else np.full(ids.size, np.nan)
        m2 = self.mean_norm2(n, acc.sumsq)
        var = np.broadcast_to(self.predicted_variance(n, m2), ids.shape).astype(float)
        return SparseEstimate(ids, mean, var, n, m2, self.params.shrinkage)

    def estimate_reports(self, reports: SparseReports, items: np.ndarray | None = None) -> SparseEstimate:
        """Convenience: one accumulator over ``reports``."""
        acc = self.add(self.create_accumulator(items), reports)
        return self.estimate(acc)

    # -- theory ------------------------------------------------------------------------------------
    def variance(self, vectors: SparseVectors, items: np.ndarray) -> np.ndarray:
        """Closed-form per-coordinate variance on the actual (cleaned) data: ideal hashes, no clipping
        bias (for Duchi, ``mu_{i,x}`` is approximated by ``v_{i,x}``)."""
        k = self.params.sparsity
        if np.any(vectors.nnz > k):
            raise ValueError("variance() needs vectors with at most k non-zeros (clean them first)")
        vec = SparseVectors(vectors.indptr, vectors.items, np.clip(vectors.values, -1.0, 1.0))
        m2 = float(vec.norms2().mean()) if vec.n else 0.0
        return self.predicted_variance(vec.n, m2, vec.mean_sq_at(items))

    def describe(self) -> dict:
        return {"mechanism": self.name, **self.params.describe()}

    # -- brute force (the floor a whole-vector decode is compared with) ------------------------------
    def brute_force(self, reports: SparseReports, items: np.ndarray | None = None) -> SparseEstimate:
        """``v_x`` by evaluating every report's hash at every item: ``n * q`` hash evaluations."""
        if items is None:
            items = np.arange(self.params.domain_size, dtype=np.uint64)
        return self.estimate_reports(reports, items)


def encoded_bytes(params: SparseParams, n: int) -> int:
    """Bytes of ``n`` packed reports."""
    return math.ceil(n * params.report_bits / 8)
