"""A sketch frequency oracle for one PEM level: OLH over ``m = 2**d`` buckets with a GF(2)-linear hash,
aggregated by a fast Walsh-Hadamard transform, so that scoring ``C`` candidates costs ``O(C k)``
whatever the number of reports.

**Buckets.** A level's prefixes have ``l`` bits. When ``l <= d`` (a *direct* level) the bucket is the
prefix itself and there is one row. Otherwise the level has ``k`` rows; a report's row ``r`` is a
word of its public seed modulo ``k`` (independent of the value), and the bucket is ``h_r(x)``, the
vector multiply-shift hash (Dietzfelbinger 1996) of the prefix's 32-bit pieces ``x_i``:
``h_r(x) = ((sum_i a_ri x_i + b_r) mod 2**64) >> (64 - d)``, strongly universal for ``d <= 32``. Its
keys are public, drawn from the level's ``key_seed``.

**Report.** The report's seed also gives a ``t x d`` bit matrix ``S`` and a ``t``-bit offset ``c``;
``H(b) = S b xor c`` (over GF(2)) maps a bucket into ``[g]``, ``g = 2**t``. For ``b != b'``,
``H(b) xor H(b') = S (b xor b')`` is uniform, so ``P[H(b) = H(b')] = 1/g`` exactly and ``(H(b), H(b'))``
is uniform on ``[g]**2``: the hash is pairwise independent, all OLH needs. The client sends
``y = H(b)`` with probability ``p = e**eps / (e**eps + g - 1)``, else one of the other ``g - 1`` values
uniformly: randomized response over ``[g]`` on a function of the value, given a seed drawn without it,
so every report is eps-LDP (``P[y | v] / P[y | v'] <= p (g - 1) / (1 - p) = e**eps``).

**Aggregation.** Writing ``[H(b) = y] = 2**-t sum_z (-1)**(z . (S b xor c xor y))`` and
``z . S b = (S^T z) . b``, the support of every bucket of a row is
``N(b) = #{reports with H(b) = y} = 2**-t WHT(W)[b]`` with ``W[u] = sum (-1)**(z . (c xor y))`` over the
row's reports and all ``z`` with ``S^T z = u``: ``g`` additions per report (``np.bincount``) and one
transform of ``d 2**d`` operations per row. ``W`` (``k x m`` integers) is the mergeable accumulator.

**Estimates.** Row ``r`` holds ``n_r`` reports; ``T_r(b) = (N_r(b) - n_r q) / (p - q)``, ``q = 1/g``, is
the unbiased OLH count of the row's users whose bucket is ``b`` (Wang et al., USENIX Security 2017).
With ``n_L = sum_r n_r`` a direct level estimates ``f(x) = sum_r T_r(x) / n_L``; a hashed level
``f(x) = m/(m-1) (sum_r T_r(h_r(x)) / n_L - 1/m)``, unbiased over the draw of the keys because a bucket
holds ``x`` and, besides, each other value with probability ``1/m``. Variance, for a value of
frequency ``f`` among the level's users:

    Var f(x) = c**2 [q (1 - q) + f (p (1 - p) - q (1 - q))] / (n_L (p - q)**2) + c**2 V / k,
    V = sum_{x' != x} f(x')**2 (1 - 1/m) / m,   c = m / (m - 1) (hashed) or 1, V = 0 (direct),

the first term OLH's (the support count of ``n_L`` independent reports), the second the buckets' other
values, averaged over ``k`` independent row hashes (rows of equal size). The level search only ranks
with these numbers; the published estimates come from the verification group's exact OLH.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ldp.hashing import seed_words
from ldp.heavy_hitters.strings import bit_field, half_words

__all__ = [
    "SketchSpec", "SketchAccumulator", "fwht", "gf2_hash", "walsh_keys", "walsh_add", "bucket_counts",
    "score", "score_buckets", "score_grid", "null_std", "full_matrices", "full_hash", "full_support",
    "walsh_dtype",
]

ROW_WORD = 64  # seed word streams: the row, then the matrix and offset
MATRIX_WORD = 65
FOLD_TERMS = 1 << 22  # (report, z) terms per histogram of walsh_add
VERIFY_REPORTS = 4096  # reports per block of full_support


@dataclasses.dataclass(frozen=True)
class SketchSpec:
    """One sketch level: prefixes of ``bits`` bits, ``2**d`` buckets in ``rows`` rows, ``g = 2**t``."""

    bits: int
    d: int
    rows: int
    t: int
    epsilon: float
    key_seed: int

    def __post_init__(self) -> None:
        if not 1 <= self.d <= 32 or not 1 <= self.t <= 16 or self.rows < 1:
            raise ValueError(f"bad sketch shape d={self.d} t={self.t} rows={self.rows}")
        if self.direct and self.rows != 1:
            raise ValueError("a direct sketch level has one row")

    @property
    def direct(self) -> bool:
        return self.bits <= self.d

    @property
    def m(self) -> int:
        return 1 << self.d

    @property
    def g(self) -> int:
        return 1 << self.t

    @property
    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.g - 1)

    @property
    def q(self) -> float:
        return 1.0 / self.g

    def keys(self) -> np.ndarray:
        """The public row keys ``(rows, pieces + 1)``: ``a_r1 .. a_rK, b_r``."""
        pieces = (self.bits + 31) // 32
        base = np.array([self.key_seed], dtype=np.uint64)
        return seed_words(base, self.rows * (pieces + 1)).reshape(self.rows, pieces + 1)

    def row_of(self, seeds: np.ndarray) -> np.ndarray:
        if self.rows == 1:
            return np.zeros(np.asarray(seeds).shape[0], dtype=np.int64)
        return (seed_words(seeds, 1, offset=ROW_WORD)[:, 0] % np.uint64(self.rows)).astype(np.int64)

    def matrices(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each report's ``S`` as ``t`` rows of ``d`` bits ``(n, t)`` and its offset ``c`` ``(n,)``."""
        w = seed_words(seeds, self.t + 1, offset=MATRIX_WORD)
        s = w[:, : self.t] & np.uint64(self.m - 1)
        return s, w[:, self.t] & np.uint64(self.g - 1)

    def buckets(self, words: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The bucket of each prefix (``words`` bit strings, masked or not) in its row ``rows``."""
        if self.direct:
            return bit_field(words, 0, self.bits)
        keys = self.keys()[rows]
        pieces = half_words(words, self.bits)
        with np.errstate(over="ignore"):
            acc = keys[:, -1].copy()
            for i in range(pieces.shape[1]):
                acc += keys[:, i] * pieces[:, i]
        return acc >> np.uint64(64 - self.d)

    def row_sums(self, words: np.ndarray, *, offset: bool = True) -> np.ndarray:
        """A hashed level's ``sum_i a_ri x_i (+ b_r) mod 2**64`` of each prefix in every row, ``(rows, n)``
        ``uint64``: the hash before its shift. Linear in the pieces, so a prefix made of two disjoint bit
        ranges sums the two ranges' sums (one of them with the offset)."""
        keys = self.keys()
        pieces = np.ascontiguousarray(half_words(words, self.bits).T)
        out = np.empty((self.rows, pieces.shape[1]), dtype=np.uint64)
        term = np.empty(pieces.shape[1], dtype=np.uint64)
        for r in range(self.rows):
            out[r] = keys[r, -1] if offset else 0
            for i in range(pieces.shape[0]):
                np.multiply(pieces[i], keys[r, i], out=term)
                out[r] += term
        return out

    def row_buckets(self, words: np.ndarray) -> np.ndarray:
        """The bucket of each prefix in every row, ``(rows, n)`` ``int64``: :meth:`buckets` with the
        prefix's pieces cut once and each row's keys as scalars."""
        if self.direct:
            return bit_field(words, 0, self.bits).astype(np.int64)[None, :]
        return self.shift(self.row_sums(words))

    def shift(self, sums: np.ndarray) -> np.ndarray:
        """Buckets (``int64``) from :meth:`row_sums`."""
        return (sums >> np.uint64(64 - self.d)).astype(np.int64)


def gf2_hash(s: np.ndarray, c: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``H(b) = S b xor c``: bit ``i`` is the parity of ``S_i & b``; ``s`` ``(n, t)``, ``b`` ``(n,)``."""
    bits = np.bitwise_count(s & b[:, None]) & np.uint8(1)
    weights = np.uint64(1) << np.arange(s.shape[1], dtype=np.uint64)
    return (bits.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64) ^ c


def walsh_dtype(reports: int, g: int) -> np.dtype:
    """The smallest signed integer type that holds ``W`` after ``reports`` reports: each adds ``g`` terms of
    +-1, so ``|W[u]| <= reports * g`` (``int16``, ``int32``, else ``int64``)."""
    bound = int(reports) * int(g)
    for t in (np.int16, np.int32):
        if bound <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


class SketchAccumulator:
    """``W`` (``rows x 2**d`` Walsh coefficients; ``int64``, or ``dtype`` when the caller bounds the reports
    with :func:`walsh_dtype`) and the reports per row; ``merge`` adds."""

    def __init__(self, spec: SketchSpec, dtype: np.dtype | type = np.int64) -> None:
        self.spec = spec
        self.walsh = np.zeros((spec.rows, spec.m), dtype=dtype)
        self.counts = np.zeros(spec.rows, dtype=np.int64)

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def merge(self, other: SketchAccumulator) -> None:
        if other.spec != self.spec:
            raise ValueError("sketches of different levels cannot be merged")
        self.walsh += other.walsh
        self.counts += other.counts

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SketchAccumulator)
            and other.spec == self.spec
            and np.array_equal(other.walsh, self.walsh)
            and np.array_equal(other.counts, self.counts)
        )


def walsh_keys(spec: SketchSpec, seeds: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``2 S^T z + (z . (c xor y) mod 2)`` for every ``z`` in ``[g]`` (rows) and report (columns), ``int64``:
    the Walsh index and the sign bit of each of the report's ``g`` terms. Row ``z`` with its top set bit
    ``i`` is row ``z - 2**i`` xor the report's ``(S_i, v_i)``, so the table is ``t`` doublings."""
    s, c = spec.matrices(seeds)
    v = (c ^ y).astype(np.int64)
    keys = np.empty((spec.g, seeds.size), dtype=np.int64)
    keys[0] = 0
    h = 1
    for i in range(spec.t):
        step = (s[:, i].astype(np.int64) << 1) | ((v >> i) & 1)
        np.bitwise_xor(keys[:h], step, out=keys[h : 2 * h])
        h *= 2
    return keys


def walsh_add(acc: SketchAccumulator, seeds: np.ndarray, y: np.ndarray) -> None:
    """Adds reports to ``W`` (module docstring): for each report and each ``z`` in ``[g]``, ``+-1`` at
    ``S^T z`` of its row, the sign ``(-1)**(z . (c xor y))``. Row by row, a histogram of
    :func:`walsh_keys` (``2 m`` bins: index and sign) in blocks of ``FOLD_TERMS`` terms gives the row's
    ``+1`` and ``-1`` counts per index; exact integers, so any split or order gives the same ``W``."""
    spec = acc.spec
    seeds = np.asarray(seeds, dtype=np.uint64)
    y = np.asarray(y, dtype=np.uint64)
    rows = spec.row_of(seeds)
    block = max(1, FOLD_TERMS // spec.g)
    for r in range(spec.rows):
        mine = rows == r
        sr, yr = (seeds, y) if mine.all() else (seeds[mine], y[mine])
        if sr.size == 0:
            continue
        signs = np.zeros(2 * spec.m, dtype=np.int64)
        for s0 in range(0, sr.size, block):
            keys = walsh_keys(spec, sr[s0 : s0 + block], yr[s0 : s0 + block])
            signs += np.bincount(keys.ravel(), minlength=2 * spec.m)
        pairs = signs.reshape(spec.m, 2)
        acc.walsh[r] += (pairs[:, 0] - pairs[:, 1]).astype(acc.walsh.dtype)
    acc.counts += np.bincount(rows, minlength=spec.rows)


def fwht(a: np.ndarray) -> np.ndarray:
    """The Walsh-Hadamard transform along the last axis (length a power of two), unnormalized, in
    ``int64``: one butterfly stage per bit, between two buffers."""
    cur = np.array(a, dtype=np.int64, copy=True)
    nxt = np.empty_like(cur)
    lead, m = cur.shape[:-1], cur.shape[-1]
    h = 1
    while h < m:
        shape = (*lead, m // (2 * h), 2, h)
        v, w = cur.reshape(shape), nxt.reshape(shape)
        np.add(v[..., 0, :], v[..., 1, :], out=w[..., 0, :])
        np.subtract(v[..., 0, :], v[..., 1, :], out=w[..., 1, :])
        cur, nxt = nxt, cur
        h *= 2
    return cur


def bucket_counts(acc: SketchAccumulator) -> np.ndarray:
    """``T_r(b)``, the unbiased count of each row's users per bucket (``rows x 2**d``, float64)."""
    spec = acc.spec
    support = fwht(acc.walsh) / spec.g
    return (support - acc.counts[:, None] * spec.q) / (spec.p - spec.q)


def score(spec: SketchSpec, table: np.ndarray, n_level: int, words: np.ndarray) -> np.ndarray:
    """The frequency estimate of each candidate prefix (module docstring) from ``bucket_counts``."""
    return score_buckets(spec, table, n_level, spec.row_buckets(words))


def score_buckets(spec: SketchSpec, table: np.ndarray, n_level: int, buckets: np.ndarray) -> np.ndarray:
    """:func:`score` of candidates given their buckets (:meth:`SketchSpec.row_buckets`)."""
    if spec.direct:
        return np.take(table[0], buckets[0]) / max(1, int(n_level))
    total = np.zeros(buckets.shape[1], dtype=np.float64)
    for r in range(spec.rows):
        total += np.take(table[r], buckets[r])
    return _hashed_estimate(spec, total, n_level)


def score_grid(
    spec: SketchSpec,
    table: np.ndarray,
    n_level: int,
    parent_sums: np.ndarray,
    ext_sums: np.ndarray,
    tails: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """:func:`score` of every prefix ``parent | extension`` of a hashed level (parent-major) from the
    parents' :meth:`SketchSpec.row_sums` (with the offset) and the extensions' (without): the pieces of
    disjoint bit ranges add, so each candidate's hash is one addition away. With ``tails`` =
    ``(grid, tail_sums, tail)`` the candidates are grid prefix ``grid[i]`` with further disjoint bits, the
    ``tail[i]``-th column of ``tail_sums`` (``(rows, T)`` sums without the offset)."""
    size = parent_sums.shape[1] * ext_sums.shape[1] if tails is None else tails[0].size
    total = np.zeros(size, dtype=np.float64)
    for r in range(spec.rows):
        sums = np.add.outer(parent_sums[r], ext_sums[r]).ravel()
        if tails is not None:
            grid, tail_sums, tail = tails
            sums = sums[grid] + tail_sums[r, tail]
        total += np.take(table[r], spec.shift(sums))
    return _hashed_estimate(spec, total, n_level)


def _hashed_estimate(spec: SketchSpec, total: np.ndarray, n_level: int) -> np.ndarray:
    m = spec.m
    return m / (m - 1) * (total / max(1, int(n_level)) - 1.0 / m)


def null_std(spec: SketchSpec, n_level: int) -> float:
    """The standard deviation of a value held by nobody, without the buckets' other values."""
    c = 1.0 if spec.direct else spec.m / (spec.m - 1)
    return c * math.sqrt(spec.q * (1 - spec.q) / (max(1, n_level) * (spec.p - spec.q) ** 2))


def full_matrices(seeds: np.ndarray, t: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The verification level's hash ``H(x) = S x xor c`` over whole bit strings of ``bits`` bits:
    ``S`` as ``(n, t, W)`` words (bits past ``bits`` cleared) and ``c`` ``(n,)`` below ``2**t``."""
    width = (bits + 63) // 64
    w = seed_words(seeds, t * width + 1, offset=MATRIX_WORD)
    s = w[:, : t * width].reshape(-1, t, width).copy()
    rest = bits - 64 * (width - 1)
    if rest < 64:
        s[:, :, -1] &= np.uint64(((1 << rest) - 1) << (64 - rest))
    return s, w[:, -1] & np.uint64((1 << t) - 1)


def full_hash(s: np.ndarray, c: np.ndarray, words: np.ndarray) -> np.ndarray:
    """``H(x)`` of each report's own value: ``s`` ``(n, t, W)``, ``words`` ``(n, W)``."""
    parity = np.bitwise_count(s & words[:, None, :]).sum(axis=2) & 1
    weights = np.uint64(1) << np.arange(s.shape[1], dtype=np.uint64)
    return (parity.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64) ^ c


def _parity_tables(cands: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """For each byte position some candidate uses: the table ``(256, ceil(C / 64))`` whose row ``a`` has
    bit ``c`` set when ``a & (candidate c's byte)`` has odd parity (candidates packed 64 to a word)."""
    count, width = cands.shape
    packed = np.zeros((-(-count // 64) * 64, width * 8), dtype=np.uint8)
    packed[:count] = np.ascontiguousarray(cands).view(np.uint8).reshape(count, width * 8)
    used = np.flatnonzero(packed.any(axis=0))
    a = np.arange(256, dtype=np.uint8)[:, None]
    tables = [
        np.packbits(np.bitwise_count(a & packed[None, :, b]) & np.uint8(1), axis=1, bitorder="little")
        .view(np.uint64)
        for b in used
    ]
    return used, tables


def full_support(s: np.ndarray, c: np.ndarray, y: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """Support counts ``#{reports with H(x) = y}`` of every candidate ``x`` (``cands`` ``(C, W)``).

    Bit-sliced: the parity of ``S_i & x`` is the xor over bytes of the parity of ``S_i``'s byte and
    ``x``'s byte, so per report and hash bit ``i`` one table row per byte position gives that bit for 64
    candidates at once; a candidate misses the report when any bit differs from ``c xor y``. About
    ``t * 8 W * C / 64`` word operations per report, in blocks of ``VERIFY_REPORTS`` reports."""
    count = cands.shape[0]
    t, width = s.shape[1], s.shape[2]
    used, tables = _parity_tables(cands)
    words = -(-count // 64)
    v = c ^ y
    total = np.zeros(words * 64, dtype=np.int64)
    for s0 in range(0, y.size, VERIFY_REPORTS):
        sb = np.ascontiguousarray(s[s0 : s0 + VERIFY_REPORTS]).view(np.uint8).reshape(-1, t, width * 8)
        vb = v[s0 : s0 + VERIFY_REPORTS]
        miss = np.zeros((sb.shape[0], words), dtype=np.uint64)
        for i in range(t):
            bit = np.zeros((sb.shape[0], words), dtype=np.uint64)
            bit -= ((vb >> np.uint64(i)) & np.uint64(1))[:, None]  # all ones where y's bit i is 1
            for b, table in zip(used, tables):
                bit ^= np.take(table, sb[:, i, b], axis=0)
            miss |= bit
        hits = np.unpackbits(miss.view(np.uint8), axis=1, bitorder="little")
        total += sb.shape[0] - hits.sum(axis=0, dtype=np.int64)
    return total[:count]
