"""The SVME client: sparse vector -> (public seed, b discretised noisy bins). O(k + b) per client.

Per client (Zhou et al., S&P 2022, Algorithm 1, restated in the spec):

1. clean the input: values clipped to [-1, 1] (real) or checked to be 0/1 (binary), zeros dropped,
   at most ``k`` non-zeros kept by uniform random sampling (the privacy proof assumes both; every
   clip and truncation is counted in :class:`EncodeStats`);
2. a 64-bit public seed from the OS CSPRNG (or a dedicated seed generator in simulations);
3. bin sums ``C_j = sum_{x: h(x) = j} s(x) v_x`` over the client's non-zero items only;
4. optional clip of every bin to ``[-eta, eta]``;
5. noise on *every* bin: Laplace(Delta/eps) then truncation to [-R, R] and unbiased stochastic
   rounding to the grid; discrete Laplace for integer bins; or Duchi's one bit per bin.

Everything is vectorised over a batch of clients; nothing is O(d).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ldp.hashing import client_streams, public_seeds
from ldp.sparse.hashes import bins_signs
from ldp.sparse.params import SparseParams
from ldp.sparse.vectors import SparseVectors

__all__ = [
    "SparseReports",
    "EncodeStats",
    "prepare_vectors",
    "encode",
    "bin_sums",
    "stochastic_round",
    "discrete_laplace",
]


@dataclasses.dataclass
class SparseReports:
    """A batch of SVME reports.

    Attributes:
        seeds: uint64 ``(n,)`` public hash seeds.
        codes: int64 ``(n, b)`` discretised bins (value = code * ``params.code_scale``).
    """

    seeds: np.ndarray
    codes: np.ndarray

    def __post_init__(self) -> None:
        self.seeds = np.asarray(self.seeds, dtype=np.uint64).reshape(-1)
        self.codes = np.asarray(self.codes, dtype=np.int64)
        if self.codes.ndim != 2 or self.codes.shape[0] != self.seeds.shape[0]:
            raise ValueError(f"codes must have shape (n, b) with n = {self.seeds.shape[0]}")

    def __len__(self) -> int:
        return int(self.seeds.shape[0])

    def take(self, index: np.ndarray | slice) -> SparseReports:
        """Rows selected by an index array, boolean mask or slice."""
        return SparseReports(self.seeds[index], self.codes[index])

    @staticmethod
    def concat(batches: Sequence[SparseReports]) -> SparseReports:
        """Concatenation (all batches must have the same b)."""
        batches = list(batches)
        if not batches:
            raise ValueError("nothing to concatenate")
        return SparseReports(
            np.concatenate([b.seeds for b in batches]), np.concatenate([b.codes for b in batches])
        )


@dataclasses.dataclass
class EncodeStats:
    """What input cleaning did to a batch (counts, so a caller can report them).

    Attributes:
        users: clients encoded.
        nonzeros_in: non-zero entries received.
        nonzeros_kept: non-zero entries encoded.
        truncated_users: clients with more than k non-zeros (truncated by random sampling).
        dropped_items: entries removed by truncation.
        clipped_values: real values outside [-1, 1] clipped to the interval.
        zero_values: explicit zero entries dropped (they are not non-zeros).
    """

    users: int = 0
    nonzeros_in: int = 0
    nonzeros_kept: int = 0
    truncated_users: int = 0
    dropped_items: int = 0
    clipped_values: int = 0
    zero_values: int = 0

    def merge(self, other: EncodeStats) -> EncodeStats:
        """Field-wise sum."""
        names = [f.name for f in dataclasses.fields(self)]
        return EncodeStats(*(getattr(self, x) + getattr(other, x) for x in names))


def prepare_vectors(
    vectors: SparseVectors, params: SparseParams, rng: np.random.Generator
) -> tuple[SparseVectors, EncodeStats]:
    """Checks ids, clips values, drops zeros and truncates every client to ``k`` non-zeros.

    Raises:
        ValueError: an item id outside ``[0, d)``, a repeated item within one client, or a binary
            round with values other than 0/1.
    """
    d, k = params.domain_size, params.sparsity
    items, values = vectors.items, vectors.values.copy()
    stats = EncodeStats(users=vectors.n)
    user = vectors.user_index()
    _check_items(vectors, user, d)
    if params.values == "binary":
        ok = (values == 0.0) | (values == 1.0)
        if not ok.all():
            j = int(np.argmin(ok))
            raise ValueError(f"client {user[j]}: binary rounds take values 0 or 1, got {values[j]}")
    else:
        out = np.abs(values) > 1.0
        stats.clipped_values = int(out.sum())
        np.clip(values, -1.0, 1.0, out=values)
    nz = values != 0.0
    stats.zero_values = int((~nz).sum())
    stats.nonzeros_in = int(nz.sum())
    user, items, values = user[nz], items[nz], values[nz]
    counts = np.bincount(user, minlength=vectors.n)
    over = counts > k
    if over.any():
        stats.truncated_users = int(over.sum())
        keep = _random_k_subsets(user, counts, k, rng)
        stats.dropped_items = int((~keep).sum())
        user, items, values = user[keep], items[keep], values[keep]
        counts = np.bincount(user, minlength=vectors.n)
    stats.nonzeros_kept = int(user.size)
    indptr = np.concatenate(([0], np.cumsum(counts)))
    return SparseVectors(indptr, items, values), stats


def _check_items(vectors: SparseVectors, user: np.ndarray, d: int) -> None:
    """Refuses an item id outside ``[0, d)`` and an item repeated within one client (ValueError)."""
    items = vectors.items
    if not items.size:
        return
    if vectors.max_item() >= d:
        bad = int(np.argmax(items >= np.uint64(d)))
        raise ValueError(f"client {user[bad]}: item id {int(items[bad])} outside [0, {d})")
    span = int(items.max()) + 1
    if vectors.n * span < 1 << 62:  # one int64 key: much faster than a two-key lexsort
        key = user * span + items.astype(np.int64)
        key.sort()
        if not np.any(key[1:] == key[:-1]):
            return
    order = np.lexsort((items, user))
    dup = (user[order][1:] == user[order][:-1]) & (items[order][1:] == items[order][:-1])
    if dup.any():
        j = order[1:][dup][0]
        raise ValueError(f"client {user[j]}: item {int(items[j])} appears more than once")


def _random_k_subsets(user: np.ndarray, counts: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """The entries kept (a mask): a uniform random k-subset of each over-full client's entries, every entry
    of the others (``user`` sorted, ``counts`` its entries per client)."""
    key = rng.random(user.size)  # rank each client's entries by a random key
    order = np.lexsort((key, user))
    starts = np.concatenate(([0], np.cumsum(counts)))[:-1]
    rank = np.arange(user.size) - starts[user[order]]
    keep = np.zeros(user.size, dtype=bool)
    keep[order[rank < k]] = True
    return keep


def stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unbiased rounding to integers: ``floor(x) + Bernoulli(frac(x))`` (int64)."""
    f = np.floor(x)
    return (f + (rng.random(x.shape) < (x - f))).astype(np.int64)


def discrete_laplace(scale_param: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Two-sided geometric noise: ``P[Z = z] proportional to p**|z|`` with ``p = scale_param`` (int64).

    The difference of two i.i.d. geometric variables on {0, 1, ...}; variance ``2p / (1-p)^2``.
    """
    q = 1.0 - scale_param
    return (rng.geometric(q, size=shape) - rng.geometric(q, size=shape)).astype(np.int64)


def bin_sums(params: SparseParams, vectors: SparseVectors, seeds: np.ndarray) -> np.ndarray:
    """``C``: float64 ``(n, b)``, before clipping and noise (touches only the non-zero entries)."""
    n, b = vectors.n, params.bins
    user = vectors.user_index()
    h, s = bins_signs(params.hash_family, seeds[user], vectors.items, b, params.domain_size)
    sums = np.bincount(user * b + h, weights=s * vectors.values, minlength=n * b)
    return sums.astype(np.float64, copy=False).reshape(n, b)  # bincount gives int64 when there are no entries


def encode(
    params: SparseParams,
    vectors: SparseVectors,
    *,
    rng: np.random.Generator | np.random.SeedSequence | int | None = None,
) -> tuple[SparseReports, EncodeStats]:
    """Encodes a batch of clients.

    Args:
        params: the round's parameters.
        vectors: one sparse vector per client (clients with no entries send pure-noise reports).
        rng: ``None`` (a real client): noise from OS entropy, seeds from the OS CSPRNG. An int or
            SeedSequence (simulation): independent noise and seed streams spawned from it. A
            Generator: it draws the noise; seeds come from a spawned child (see
            :func:`ldp.hashing.client_streams`).

    Returns:
        The reports and the cleaning counts.
    """
    perturb, seed_rng = client_streams(rng)
    clean, stats = prepare_vectors(vectors, params, perturb)
    n, b = clean.n, params.bins
    seeds = public_seeds(n, seed_rng)
    C = bin_sums(params, clean, seeds)
    if params.eta is not None:
        np.clip(C, -params.eta, params.eta, out=C)
    if params.noise == "duchi":
        e = math.exp(params.epsilon)
        p_plus = 0.5 + (C / params.eta) * (e - 1.0) / (2.0 * (e + 1.0))
        codes = np.where(perturb.random((n, b)) < p_plus, 1, -1).astype(np.int64)
    elif params.noise == "discrete-laplace":
        p = math.exp(-params.epsilon / params.Delta)
        R = int(params.max_code)
        codes = np.clip(np.rint(C).astype(np.int64) + discrete_laplace(p, (n, b), perturb), -R, R)
    else:
        B = C + perturb.laplace(0.0, params.scale, size=(n, b))
        np.clip(B, -params.trunc, params.trunc, out=B)
        codes = np.clip(stochastic_round(B / params.grid, perturb), -params.max_code, params.max_code)
    return SparseReports(seeds, codes), stats
