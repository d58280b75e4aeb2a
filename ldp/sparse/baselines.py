"""Baselines for k-sparse vector mean estimation, each with its closed-form variance.

All take the same inputs as SVME (:class:`~ldp.sparse.vectors.SparseVectors`, cleaned the same way:
values clipped to [-1, 1], at most k non-zeros kept by random sampling) and produce
:class:`~ldp.sparse.accumulate.SparseEstimate` objects (unbiased means, closed-form std). With
``c_eps = (e^eps + 1) / (e^eps - 1)`` and ``Duchi_eps(t)`` the one-bit mechanism (``+-c_eps`` with mean
``t`` for ``t`` in [-1, 1]):

* :class:`KFold` -- k-fold repetition of the 1-sparse mechanism (the event-level strawman): one seed;
  the client's non-zeros go to uniformly random distinct slots of ``k`` (a random injection drawn
  from the client's noise stream), slot ``m`` holding ``x`` sends ``Duchi(s(x) v_x)``, every other
  slot ``Duchi(0)``; the server reads the sum of the k bits as a single bin:
  ``v_x = (1/n) sum_i s_i(x) c sum_m y_im``. Each bit uses ``eps`` at event level or ``eps / k``
  otherwise (basic composition over the k bits, any two inputs). Per-client variance ``k c^2 - v_x^2``.
  Report: 64-bit seed + k bits. Why the injection is random (event level, see :meth:`KFold.encode`):
  with the m-th item in slot m, adding an item before others shifts every later slot.
* :class:`Sampling` -- sampling + 1-sparse (the user-level strawman): slot ``u ~ U{0..k-1}``; if
  ``u < nnz`` the ``u``-th non-zero ``(x, v)`` else a dummy with ``v = 0``; one bit
  ``Duchi_eps(s(x) v)`` scaled by ``k``. Per-client variance ``k^2 c^2 - v_x^2``. Report: seed + 1 bit.
* :class:`Gaussian` -- naive dense perturbation ``v_i + N(0, sigma^2 I_d)`` with L2 sensitivity
  ``sqrt(2L)``: ``calibration="classical"`` (the paper's code: ``sigma = sqrt(2 ln(1.25/delta))
  sqrt(2L) / eps``, proven only for eps < 1; at eps >= 1 accepted only where the exact condition of
  Balle & Wang certifies its sigma, refused otherwise, e.g. eps >= 9 at delta = 1e-6) or
  ``"analytic"`` (Balle & Wang 2018, exact for every eps). Variance ``sigma^2 / n``. Report: d float32
  values. (L2 sensitivity of the cleaned vectors: a truncation swap at event level moves two entries by
  at most 1 each, ``sqrt(2) <= sqrt(2L)``.)
* :class:`Harmony` -- (Nguyen et al. 2016): a uniform coordinate ``j`` and one bit ``Duchi(v_j)``;
  ``v_j = (d c / n) sum_{i: j_i = j} bit_i``. Per-client variance ``d c^2 - v_x^2``. Report:
  ``ceil(log2 d) + 1`` bits.
* :class:`PCKV` -- PCKV-GRR (Gu et al. 2020) with ``l = k``: pad-and-sample one key-value pair
  (dummy keys ``d .. d + l - 1`` with value 0), value rounded to +-1 w.p. ``(1 +- v)/2``, the key by
  GRR on ``d' = d + l`` keys keeping it w.p. ``a``; a kept key keeps its value w.p. ``p``, a changed
  key carries a uniform +-1. ``a = (l(e^eps-1)+2)/(l(e^eps-1)+2d')``, ``p = (l(e^eps-1)+1)/(l(e^eps-1)+2)``.
  Estimator ``"unbiased"`` (default): ``v_x = l (n1 - n2) / (n a (2p - 1))``; ``"original"``: PCKV's
  frequency and mean estimates with their clipping (biased). Report: ``ceil(log2 d') + 1`` bits.
  (The key perturbation is GRR; :class:`ldp.oracles.GRR` is not reused because its accumulator is a
  d'-count table and refuses the d-sweep's 2**26 + l keys; the few lines of sampling are here.)

Where a baseline's per-client report is dense (Gaussian), :meth:`Gaussian.simulate` draws the *mean*
of the n noise vectors directly (``N(0, sigma^2 / n)`` per coordinate, exact in distribution), which is
what the experiments use at ``d = 1e5``; :meth:`Gaussian.encode` is the real client.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ldp.hashing import client_streams, public_seeds
from ldp.payload import WireSpec
from ldp.sparse.accumulate import (
    QueryAccumulator,
    SparseEstimate,
    TableAccumulator,
    add_query_sums,
    add_table_sums,
    table_sums,
)
from ldp.sparse.encode import EncodeStats, SparseReports, prepare_vectors
from ldp.sparse.hashes import DEFAULT_SPARSE_HASH, bins_signs, check_family, domain_bits
from ldp.sparse.params import SEED_BITS, VALUE_KINDS, duchi_c, neighbour_L
from ldp.sparse.vectors import SparseVectors

__all__ = [
    "KFold",
    "Sampling",
    "Gaussian",
    "Harmony",
    "PCKV",
    "ItemReports",
    "DenseReports",
    "PCKVAccumulator",
    "BASELINES",
    "duchi_bits",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
    "gaussian_delta",
]


def duchi_bits(t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Duchi's one-bit mechanism on ``t`` in [-1, 1]: +1 w.p. ``1/2 + t (e^eps-1)/(2(e^eps+1))``, else -1
    (int8). Scaled by ``c_eps`` the output is unbiased for ``t``; eps-DP for any change of ``t``."""
    e = math.exp(epsilon)
    p_plus = 0.5 + np.asarray(t) * (e - 1.0) / (2.0 * (e + 1.0))
    return np.where(rng.random(np.shape(t)) < p_plus, 1, -1).astype(np.int8)


@dataclasses.dataclass(frozen=True)
class _Shape:
    domain_size: int
    sparsity: int
    values: str


@dataclasses.dataclass
class ItemReports:
    """One (item or key, +-1 bit) per report (Harmony, PCKV)."""

    items: np.ndarray
    bits: np.ndarray

    def __len__(self) -> int:
        return int(len(self.items))

    def take(self, index) -> ItemReports:
        return ItemReports(self.items[index], self.bits[index])


@dataclasses.dataclass
class DenseReports:
    """Dense float32 vectors (Gaussian)."""

    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def take(self, index) -> DenseReports:
        return DenseReports(self.values[index])


class _Baseline:
    name = "baseline"

    def __init__(
        self,
        epsilon: float,
        domain_size: int,
        sparsity: int,
        privacy: str | int = "user",
        values: str = "real",
    ) -> None:
        eps = float(epsilon)
        if not math.isfinite(eps) or eps <= 0 or eps > 50:
            raise ValueError(f"epsilon must be a positive number <= 50, got {epsilon!r}")
        if values not in VALUE_KINDS:
            raise ValueError(f"values must be one of {VALUE_KINDS}, got {values!r}")
        self.epsilon, self.d, self.k = eps, int(domain_size), int(sparsity)
        if self.k < 1 or self.d < 2 or self.d > 1 << 63:
            raise ValueError("need sparsity >= 1 and 2 <= domain_size <= 2**63")
        self.privacy, self.values = privacy, values
        self.L = neighbour_L(privacy, self.k, values)
        self._shape = _Shape(self.d, self.k, values)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, d={self.d}, k={self.k}, privacy={self.privacy!r})"
        )

    def _prepare(self, vectors: SparseVectors, rng: np.random.Generator) -> tuple[SparseVectors, EncodeStats]:
        return prepare_vectors(vectors, self._shape, rng)

    def create_accumulator(self, items: np.ndarray | None = None):
        """Sums over a query set (``None``: all of ``[0, d)``)."""
        if items is None:
            if self.d > 1 << 27:
                raise ValueError(
                    f"d = {self.d} is too large for a whole-vector accumulator; give a query set"
                )
            items = np.arange(self.d, dtype=np.uint64)
        items = np.asarray(items, dtype=np.uint64)
        if items.size and items.max() >= np.uint64(self.d):
            raise ValueError(f"query items must lie in [0, {self.d})")
        return QueryAccumulator(items)

    def merge(self, accumulators: Sequence):
        accs = list(accumulators)
        out = accs[0].copy()
        for o in accs[1:]:
            if type(o) is not type(out):
                raise ValueError("cannot merge accumulators of different kinds")
            if isinstance(out, QueryAccumulator):
                if not np.array_equal(out.items, o.items):
                    raise ValueError("cannot merge accumulators over different query sets")
                out.sums = out.sums + o.sums
            else:
                out.table += o.table
            out.n += o.n
        return out

    def second_moment(self) -> float:
        """Per-client second moment of a never-owned coordinate (variance * n)."""
        raise NotImplementedError

    def predicted_variance(self, n: int, mean_sq: np.ndarray | float = 0.0) -> np.ndarray:
        return (self.second_moment() - np.asarray(mean_sq, dtype=float)) / n

    def variance(self, vectors: SparseVectors, items: np.ndarray) -> np.ndarray:
        """Closed-form per-coordinate variance on the (cleaned) data."""
        return self.predicted_variance(vectors.n, vectors.mean_sq_at(items))

    def _estimate(self, items, sums, n) -> SparseEstimate:
        mean = self.unit * sums / n if n else np.full(len(items), np.nan)
        var = np.broadcast_to(self.predicted_variance(max(n, 1)), np.shape(items)).astype(float)
        return SparseEstimate(np.asarray(items, dtype=np.uint64), mean, var, n)

    def estimate_reports(self, reports, items: np.ndarray | None = None) -> SparseEstimate:
        return self.estimate(self.add(self.create_accumulator(items), reports))

    def describe(self) -> dict:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "domain_size": self.d,
            "sparsity": self.k,
            "privacy": self.privacy,
            "values": self.values,
            "L": self.L,
            "report_bits": self.report_bits,
        }


class _OneBin(_Baseline):
    """Shared server for KFold and Sampling: seeds + codes whose sum is read as one bin."""

    def __init__(self, *args, hash_family: str = DEFAULT_SPARSE_HASH, **kw) -> None:
        super().__init__(*args, **kw)
        check_family(hash_family, 1, self.d)
        self.hash_family = hash_family

    def create_accumulator(self, items: np.ndarray | None = None):
        if items is None and self.hash_family == "gf2-affine" and domain_bits(self.d) <= 27:
            return TableAccumulator(domain_bits(self.d))
        return super().create_accumulator(items)

    def add(self, acc, reports: SparseReports):
        if reports.codes.size and np.abs(reports.codes).max() > 1:
            raise ValueError("one-bit reports must carry +-1 codes")
        col = reports.codes.sum(axis=1, keepdims=True)
        acc.n += len(reports)
        if isinstance(acc, TableAccumulator):
            add_table_sums(acc, reports.seeds, col)
        else:
            add_query_sums(acc, reports.seeds, col, self.hash_family, 1, self.d)
        return acc

    def estimate(self, acc) -> SparseEstimate:
        if isinstance(acc, TableAccumulator):
            items, sums = table_sums(acc, 1, self.d)
        else:
            items, sums = acc.items, acc.sums
        return self._estimate(items, sums, acc.n)

    def _signed_values(self, vec: SparseVectors, seeds: np.ndarray) -> np.ndarray:
        _, s = bins_signs(self.hash_family, seeds[vec.user_index()], vec.items, 1, self.d)
        return s * vec.values


class KFold(_OneBin):
    """k-fold repetition of the 1-sparse mechanism (see the module docstring)."""

    name = "kfold"
    wire = WireSpec("sparse", "sparse", "encode_sparse_kfold")

    @property
    def bit_epsilon(self) -> float:
        """Budget of each of the k bits: eps at event level (one neighbouring change moves one slot's
        distribution, see :meth:`encode`), else eps/k."""
        one_item = self.privacy == "event" or (self.values == "binary" and self.L == 1)
        return self.epsilon if one_item else self.epsilon / self.k

    @property
    def unit(self) -> float:
        return duchi_c(self.bit_epsilon)

    @property
    def report_bits(self) -> int:
        return SEED_BITS + self.k

    def second_moment(self) -> float:
        return self.k * duchi_c(self.bit_epsilon) ** 2

    def encode(self, vectors: SparseVectors, *, rng=None) -> tuple[SparseReports, EncodeStats]:
        """One report per client: the public seed and k Duchi bits, the client's (cleaned) non-zeros in
        a uniformly random injection into the k slots.

        Event-level privacy (each bit at ``eps``), for a fixed public seed (it is data-independent):
        given the slot assignment the bits are independent, slot ``j`` is ``Duchi_eps(t_j)`` with
        ``t_j`` in [-1, 1], and one slot's ``t_j`` changing costs at most ``e^eps``. Couple the two
        neighbours' randomness so that the ``t`` vectors differ in one slot; every output's probability
        is then an average of pairs of products within a factor ``e^eps``, so is the average:

        * a value change of ``x``: the same injection; only slot ``sigma(x)`` differs.
        * ``v' = v + {x}`` (no truncation, ``|S| < k``): restricted to ``S`` a uniform injection for
          ``v'`` is a uniform injection for ``v``, and ``sigma'(x)`` is a uniform free slot, which in
          ``v``'s report carries ``Duchi(0)``: one slot differs.
        * ``v' = v + {x}`` with truncation (``|S| >= k``): the cleaned ``v'`` drops ``x`` with
          probability ``(|S| + 1 - k) / (|S| + 1)`` (then it is distributed as the cleaned ``v``) or
          keeps ``x`` and a uniform (k-1)-subset ``R`` of ``S``; couple with ``v``'s subset ``R + {y}``,
          ``y`` uniform outside ``R``, and put ``x`` in ``y``'s slot: one slot differs.

        Removing an item is the same pair read backwards. Beyond event level every bit has ``eps/k``
        and any two inputs are within ``e^eps`` whatever the slots.
        """
        perturb, seed_rng = client_streams(rng)
        vec, st = self._prepare(vectors, perturb)
        n = vec.n
        seeds = public_seeds(n, seed_rng)
        t = np.zeros((n, self.k))
        rank = np.arange(vec.items.size) - np.repeat(vec.indptr[:-1], vec.nnz)
        # the first nnz entries of a uniform permutation of the k slots: a uniform injection
        perm = np.argsort(perturb.random((n, self.k)), axis=1)
        user = vec.user_index()
        t[user, perm[user, rank]] = self._signed_values(vec, seeds)
        return SparseReports(seeds, duchi_bits(t, self.bit_epsilon, perturb)), st


class Sampling(_OneBin):
    """Sampling + 1-sparse (see the module docstring)."""

    name = "sampling"
    wire = WireSpec("sparse", "sparse", "encode_sparse_sampling")

    @property
    def unit(self) -> float:
        return self.k * duchi_c(self.epsilon)

    @property
    def report_bits(self) -> int:
        return SEED_BITS + 1

    def second_moment(self) -> float:
        return (self.k * duchi_c(self.epsilon)) ** 2

    def encode(self, vectors: SparseVectors, *, rng=None) -> tuple[SparseReports, EncodeStats]:
        perturb, seed_rng = client_streams(rng)
        vec, st = self._prepare(vectors, perturb)
        n = vec.n
        seeds = public_seeds(n, seed_rng)
        u = perturb.integers(0, self.k, n)
        real = u < vec.nnz
        t = np.zeros(n)
        pos = vec.indptr[:-1][real] + u[real]
        sv = self._signed_values(vec, seeds)
        t[real] = sv[pos]
        return SparseReports(seeds, duchi_bits(t, self.epsilon, perturb)[:, None]), st


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def classical_gaussian_sigma(epsilon: float, delta: float, l2: float) -> float:
    """``sqrt(2 ln(1.25/delta)) * l2 / eps`` (Dwork & Roth 2014, Theorem A.1; proven for eps < 1 only)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * l2 / epsilon


def gaussian_delta(epsilon: float, sigma: float, l2: float) -> float:
    """The exact delta of the Gaussian mechanism with noise ``sigma`` and L2 sensitivity ``l2`` at
    ``epsilon``: ``Phi(l2/(2s) - eps s/l2) - e^eps Phi(-l2/(2s) - eps s/l2)`` (Balle & Wang, ICML 2018,
    Theorem 8: necessary and sufficient)."""
    a, b = l2 / (2 * sigma), epsilon * sigma / l2
    return _phi(a - b) - math.exp(epsilon) * _phi(-a - b)


def analytic_gaussian_sigma(epsilon: float, delta: float, l2: float) -> float:
    """Smallest sigma with :func:`gaussian_delta` ``<= delta`` (Balle & Wang, ICML 2018, Theorem 8), by
    bisection to 1e-10 relative."""

    def dlt(s: float) -> float:
        return gaussian_delta(epsilon, s, l2)

    lo, hi = 1e-6 * l2, l2
    while dlt(hi) > delta:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if dlt(mid) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * hi:
            break
    return hi


class Gaussian(_Baseline):
    """Naive dense Gaussian perturbation (see the module docstring)."""

    name = "gaussian"
    wire = WireSpec("sparse", "sparse", "encode_sparse_gaussian")

    def __init__(self, *args, delta: float = 1e-6, calibration: str = "classical", **kw) -> None:
        super().__init__(*args, **kw)
        if not 0 < delta < 1:
            raise ValueError(f"the Gaussian mechanism needs 0 < delta < 1, got {delta}")
        if calibration not in ("classical", "analytic"):
            raise ValueError(f"calibration must be 'classical' or 'analytic', got {calibration!r}")
        self.delta, self.calibration = float(delta), calibration
        l2 = math.sqrt(2.0 * self.L)
        f = classical_gaussian_sigma if calibration == "classical" else analytic_gaussian_sigma
        self.sigma = f(self.epsilon, self.delta, l2)
        if calibration == "classical" and self.epsilon >= 1.0:
            # the textbook bound is proven for eps < 1; beyond, accept its sigma only where the exact
            # condition certifies it
            got = gaussian_delta(self.epsilon, self.sigma, l2)
            if got > self.delta * (1 + 1e-9):
                raise ValueError(
                    f"calibration 'classical' (sigma = sqrt(2 ln(1.25/delta)) Delta_2/eps, Dwork & Roth "
                    f"2014 Thm A.1, proven for eps < 1) is not ({self.epsilon:g}, {self.delta:g})-DP here: "
                    f"the exact condition of Balle & Wang 2018 (Thm 8) gives delta = {got:.3g}; "
                    "use calibration 'analytic'"
                )
        self.unit = 1.0

    @property
    def report_bits(self) -> int:
        return 32 * self.d

    def second_moment(self) -> float:
        return self.sigma**2

    def predicted_variance(self, n: int, mean_sq=0.0) -> np.ndarray:
        return np.broadcast_to(self.sigma**2 / n, np.shape(mean_sq)).astype(float)

    def encode(self, vectors: SparseVectors, *, rng=None) -> tuple[DenseReports, EncodeStats]:
        """The real client: a dense float32 d-vector per user (refused above 5e7 cells per call)."""
        perturb, _ = client_streams(rng)
        vec, st = self._prepare(vectors, perturb)
        if vec.n * self.d > 5 * 10**7:
            raise ValueError(
                "Gaussian reports are dense: encode at most 5e7 cells per call (chunk the users)"
            )
        out = perturb.normal(0.0, self.sigma, (vec.n, self.d))
        out[vec.user_index(), vec.items.astype(np.int64)] += vec.values
        return DenseReports(out.astype(np.float32)), st

    def add(self, acc: QueryAccumulator, reports: DenseReports):
        if acc.sums.dtype != np.float64:
            acc.sums = acc.sums.astype(np.float64)
        acc.sums = acc.sums + reports.values[:, acc.items.astype(np.int64)].sum(axis=0, dtype=np.float64)
        acc.n += len(reports)
        return acc

    def estimate(self, acc) -> SparseEstimate:
        return self._estimate(acc.items, acc.sums, acc.n)

    def simulate(self, vectors: SparseVectors, items: np.ndarray, rng: np.random.Generator) -> SparseEstimate:
        """The estimate the n dense reports would give, drawn directly: ``mean + N(0, sigma^2 / n)``."""
        n = vectors.n
        items = np.asarray(items, dtype=np.uint64)
        mean = vectors.mean_at(items) + rng.normal(0.0, self.sigma / math.sqrt(n), items.size)
        return SparseEstimate(items, mean, self.predicted_variance(n, np.zeros(items.size)), n)


@dataclasses.dataclass
class PCKVAccumulator(QueryAccumulator):
    """PCKV sums over the query items: ``sums = n1 - n2`` and ``pos = n1`` (reports with key x and bit +1)."""

    pos: np.ndarray | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pos is None:
            self.pos = np.zeros(self.items.size, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return int(super().nbytes + self.pos.nbytes)

    def copy(self) -> PCKVAccumulator:
        return PCKVAccumulator(self.items.copy(), self.n, self.sums.copy(), 0, self.pos.copy())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PCKVAccumulator)
            and super().__eq__(other)
            and np.array_equal(self.pos, other.pos)
        )


class _ItemBit(_Baseline):
    def add(self, acc: QueryAccumulator, reports: ItemReports):
        acc.n += len(reports)
        order = np.argsort(acc.items)
        srt = acc.items[order]
        it = np.asarray(reports.items, dtype=np.uint64)
        pos = np.searchsorted(srt, it)
        posc = np.minimum(pos, max(srt.size - 1, 0))
        hit = (pos < srt.size) & (srt[posc] == it)
        acc.sums += np.bincount(
            order[posc[hit]], weights=reports.bits[hit].astype(np.float64), minlength=srt.size
        ).astype(np.int64)
        return acc

    def estimate(self, acc) -> SparseEstimate:
        return self._estimate(acc.items, acc.sums, acc.n)


class Harmony(_ItemBit):
    """Harmony (see the module docstring)."""

    name = "harmony"
    wire = WireSpec("sparse", "sparse", "encode_sparse_harmony")

    @property
    def unit(self) -> float:
        return self.d * duchi_c(self.epsilon)

    @property
    def report_bits(self) -> int:
        return domain_bits(self.d) + 1

    def second_moment(self) -> float:
        return self.d * duchi_c(self.epsilon) ** 2

    def encode(self, vectors: SparseVectors, *, rng=None) -> tuple[ItemReports, EncodeStats]:
        perturb, _ = client_streams(rng)
        vec, st = self._prepare(vectors, perturb)
        j = perturb.integers(0, self.d, vec.n, dtype=np.uint64)
        # v_{i, j_i}: look j up among the user's entries
        user = vec.user_index()
        hit = vec.items == j[user]
        t = np.zeros(vec.n)
        t[user[hit]] = vec.values[hit]
        return ItemReports(j, duchi_bits(t, self.epsilon, perturb)), st


class PCKV(_ItemBit):
    """PCKV-GRR with ``l = k`` (see the module docstring)."""

    name = "pckv"
    wire = WireSpec("sparse", "sparse", "encode_sparse_pckv")

    def __init__(self, *args, estimator: str = "unbiased", **kw) -> None:
        super().__init__(*args, **kw)
        if estimator not in ("unbiased", "original"):
            raise ValueError(f"estimator must be 'unbiased' or 'original', got {estimator!r}")
        self.estimator = estimator
        self.ell = self.k
        self.dp = self.d + self.ell
        x = self.ell * math.expm1(self.epsilon)
        self.a = (x + 2.0) / (x + 2.0 * self.dp)
        self.p = (x + 1.0) / (x + 2.0)
        self.bq = (1.0 - self.a) / (self.dp - 1)
        self.eps1 = math.log(x / 2.0 + 1.0)
        self.unit = self.ell / (self.a * (2 * self.p - 1))

    @property
    def report_bits(self) -> int:
        return domain_bits(self.dp) + 1

    def second_moment(self) -> float:
        return self.unit**2 * self.bq

    def predicted_variance(self, n: int, mean_sq=0.0, owners=0.0) -> np.ndarray:
        """``owners`` = fraction of users holding x. A holder samples x w.p. 1/l and keeps it w.p. a, or
        samples another key (w.p. 1 - 1/l) that GRR turns into x w.p. b_q; anyone else reports x w.p. b_q."""
        owners = np.asarray(owners, dtype=float)
        pk = self.bq + owners * (self.a - self.bq) / self.ell
        return (self.unit**2 * pk - np.asarray(mean_sq, dtype=float)) / n

    def variance(self, vectors: SparseVectors, items: np.ndarray) -> np.ndarray:
        items = np.asarray(items, dtype=np.uint64)
        owners = SparseVectors(vectors.indptr, vectors.items, np.ones(vectors.items.size)).mean_at(items)
        return self.predicted_variance(vectors.n, vectors.mean_sq_at(items), owners)

    def encode(self, vectors: SparseVectors, *, rng=None) -> tuple[ItemReports, EncodeStats]:
        perturb, _ = client_streams(rng)
        vec, st = self._prepare(vectors, perturb)
        n = vec.n
        u = perturb.integers(0, self.ell, n)
        real = u < vec.nnz
        key = (self.d + perturb.integers(0, self.ell, n)).astype(np.uint64)
        val = np.zeros(n)
        pos = vec.indptr[:-1][real] + u[real]
        key[real] = vec.items[pos]
        val[real] = vec.values[pos]
        bit = np.where(perturb.random(n) < (1.0 + val) / 2.0, 1, -1)
        keep = perturb.random(n) < self.a
        other = perturb.integers(0, self.dp - 1, n, dtype=np.uint64)
        other += (other >= key).astype(np.uint64)
        out_key = np.where(keep, key, other)
        keep_val = perturb.random(n) < self.p
        rand_bit = np.where(perturb.random(n) < 0.5, 1, -1)
        out_bit = np.where(keep, np.where(keep_val, bit, -bit), rand_bit).astype(np.int8)
        return ItemReports(out_key, out_bit), st

    def create_accumulator(self, items: np.ndarray | None = None) -> PCKVAccumulator:
        base = super().create_accumulator(items)
        return PCKVAccumulator(base.items)

    def add(self, acc: PCKVAccumulator, reports: ItemReports):
        super().add(acc, reports)  # sums = n1 - n2
        plus = reports.bits > 0
        tmp = QueryAccumulator(acc.items)
        _ItemBit.add(self, tmp, ItemReports(reports.items[plus], np.ones(int(plus.sum()), np.int8)))
        acc.pos += tmp.sums  # n1
        return acc

    def merge(self, accumulators: Sequence) -> PCKVAccumulator:
        accs = list(accumulators)
        out = accs[0].copy()
        for o in accs[1:]:
            if not np.array_equal(out.items, o.items):
                raise ValueError("cannot merge accumulators over different query sets")
            out.sums += o.sums
            out.pos += o.pos
            out.n += o.n
        return out

    def estimate(self, acc) -> SparseEstimate:
        if acc.n == 0:
            return self._estimate(acc.items, acc.sums, acc.n)
        n = acc.n
        if self.estimator == "unbiased":
            # plug-in std: the holders' fraction from the key counts (n1 + n2), clipped to [0, 1]
            count = 2 * acc.pos - acc.sums
            owners = np.clip((count / n - self.bq) / (self.a - self.bq) * self.ell, 0.0, 1.0)
            var = np.maximum(self.predicted_variance(n, 0.0, owners), 0.0)
            return SparseEstimate(acc.items, self.unit * acc.sums / n, var, n)
        n1 = acc.pos.astype(float)
        n2 = n1 - acc.sums  # sums = n1 - n2
        a, p, bq, ell = self.a, self.p, self.bq, self.ell
        f = ((n1 + n2) / n - bq) * ell / (a - bq)
        f = np.clip(f, 1.0 / n, 1.0)
        A = np.array([[a * p - bq / 2, a * (1 - p) - bq / 2], [a * (1 - p) - bq / 2, a * p - bq / 2]])
        rhs = np.stack((n1 - n * bq / 2, n2 - n * bq / 2))
        sol = np.linalg.solve(A, rhs) * ell / n  # fractions of users with (x, +1) and (x, -1)
        cap = f
        m1 = np.clip(sol[0], 1.0 / n, cap)
        m2 = np.clip(sol[1], 1.0 / n, cap)
        m = np.clip((m1 - m2) / (m1 + m2), -1.0, 1.0)
        var = np.broadcast_to(self.predicted_variance(n), acc.items.shape).astype(float)
        return SparseEstimate(acc.items, f * m, var, n)


BASELINES = {"kfold": KFold, "sampling": Sampling, "gaussian": Gaussian, "harmony": Harmony, "pckv": PCKV}
