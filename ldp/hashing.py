"""Vectorized, seeded hash families over integers.

Nothing here hashes strings: every hash is integer arithmetic on ``numpy.uint64`` arrays, so a batch
of a million reports is hashed with a handful of array operations.

Two building blocks:

* :func:`splitmix64` / :func:`seed_words`: the SplitMix64 finaliser (Steele, Lea and Flood, 2014) used
  as a counter-based generator. Word ``j`` of seed ``s`` is ``splitmix64(s + (j + 1) * GOLDEN)``. It is
  the expansion that turns a 64-bit per-report seed into the parameters of that report's hash function.
  It is deterministic and public: the seed is not a secret, it is part of the report.

* :class:`LinearHash`: the hash family the OLH oracle uses. A value ``v`` in ``[0, d)`` is written as
  its ``m`` base-``p`` digits ``x`` (``p`` prime, ``p**m >= d``); a hash function is a uniformly random
  ``k x m`` matrix ``M`` and vector ``b`` over the field GF(p), and ``h(v) = M x + b`` is read as an
  integer in ``[0, g)`` with ``g = p**k``. For two distinct values the difference of their digit
  vectors is non-zero, so ``P[h(v) = h(v')] = 1/g`` *exactly* over the choice of ``M``: the family is
  universal, which is all the OLH estimator needs to be unbiased. Its support sets
  ``{v : M x + b = y}`` are cosets of a subgroup, whose indicator has only ``g`` non-zero Fourier
  coefficients; that is what lets the OLH accumulator add a report in O(g) work instead of O(d)
  (see :class:`ldp.oracles.OLH`).

Digits are drawn from SplitMix64 words reduced modulo ``p``; for ``p = 2`` each word supplies a
whole ``m``-bit row. The modulo bias is below ``p / 2**64`` (at most about 1e-17 for the primes used).
"""

from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

__all__ = [
    "GOLDEN",
    "splitmix64",
    "seed_words",
    "random_seeds",
    "hash_ids",
    "LinearHash",
    "is_prime",
    "prime_power",
]


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser applied elementwise (wrapping uint64 arithmetic).

    Args:
        x: array of any shape; converted to ``uint64``.

    Returns:
        ``uint64`` array of the same shape.
    """
    z = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z ^= z >> _S30
        z *= _M1
        z ^= z >> _S27
        z *= _M2
        z ^= z >> _S31
    return z


def seed_words(seeds: np.ndarray, count: int, *, offset: int = 0) -> np.ndarray:
    """Expands each 64-bit seed into ``count`` pseudo-random 64-bit words.

    Word ``j`` of seed ``s`` is ``splitmix64(s + (offset + j + 1) * GOLDEN)`` (mod 2**64).

    Args:
        seeds: ``uint64`` array of shape ``(n,)``.
        count: number of words per seed.
        offset: index of the first word (lets callers draw disjoint word streams).

    Returns:
        ``uint64`` array of shape ``(n, count)``.
    """
    seeds = np.asarray(seeds, dtype=np.uint64)
    steps = (np.arange(offset + 1, offset + count + 1, dtype=np.uint64) * GOLDEN).astype(np.uint64)
    with np.errstate(over="ignore"):
        state = seeds[:, None] + steps[None, :]
    return splitmix64(state)


def random_seeds(n: int, *, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """Draws ``n`` uniform 64-bit seeds from ``rng`` (OS entropy when ``rng`` is None)."""
    rng = np.random.default_rng(rng)
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def hash_ids(ids: np.ndarray, salt: int = 0) -> np.ndarray:
    """Deterministic 64-bit hash of integer user ids (e.g. for assigning users to groups).

    Args:
        ids: integer array (any shape); negative ids are reinterpreted as uint64.
        salt: a task-specific integer so that different tasks assign users independently.

    Returns:
        ``uint64`` array of the same shape.
    """
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise ValueError("hash_ids expects integer ids")
    x = ids.astype(np.int64).view(np.uint64) if ids.dtype.kind == "i" else ids.astype(np.uint64)
    with np.errstate(over="ignore"):
        return splitmix64(x ^ splitmix64(np.uint64(salt % 2**64) + GOLDEN))


def is_prime(n: int) -> bool:
    """True if ``n`` is a prime (trial division; ``n`` is small here)."""
    if n < 2:
        return False
    if n < 4:
        return True
    if n % 2 == 0:
        return False
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def prime_power(g: int) -> tuple[int, int] | None:
    """Returns ``(p, k)`` with ``g == p**k`` and ``p`` prime, or None when ``g`` is not a prime power."""
    if g < 2:
        return None
    for p in range(2, g + 1):
        if g % p == 0:
            if not is_prime(p):
                return None
            k, rest = 0, g
            while rest % p == 0:
                rest //= p
                k += 1
            return (p, k) if rest == 1 else None
    return None


class LinearHash:
    """Universal hash family ``h(v) = M x(v) + b`` over GF(p), mapping ``[0, d)`` onto ``[0, p**k)``.

    Args:
        d: domain size (values are integers in ``[0, d)``).
        p: a prime.
        k: output digits; the number of buckets is ``g = p**k``.

    Attributes:
        m: digits per value (smallest ``m`` with ``p**m >= d``).
        size: ``p**m``, the padded domain the hash is defined on.
        g: number of buckets.
    """

    def __init__(self, d: int, p: int, k: int) -> None:
        if not is_prime(p):
            raise ValueError(f"LinearHash needs a prime p, got {p}")
        if k < 1:
            raise ValueError(f"LinearHash needs k >= 1, got {k}")
        self.d, self.p, self.k = int(d), int(p), int(k)
        m = 1
        while p**m < d:
            m += 1
        self.m = m
        self.size = p**m
        self.g = p**k
        if p == 2 and m > 63:
            raise ValueError("domain too large for the binary linear hash (d > 2**63)")

    # -- parameters -------------------------------------------------------------------------------
    def rows(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Hash parameters of each seed.

        Returns:
            For ``p == 2``: ``(rows, b)`` with ``rows`` uint64 ``(n, k)`` bit masks of ``m`` bits (row j
            of M) and ``b`` int64 ``(n,)`` the ``k`` offset bits packed as an integer.
            For ``p > 2``: ``(M, b)`` with ``M`` int64 ``(n, k, m)`` and ``b`` int64 ``(n, k)`` digits.
        """
        seeds = np.asarray(seeds, dtype=np.uint64)
        n = seeds.shape[0]
        if self.p == 2:
            words = seed_words(seeds, self.k + 1)
            mask = np.uint64((1 << self.m) - 1)
            rows = words[:, : self.k] & mask
            b = (words[:, self.k] & np.uint64(self.g - 1)).astype(np.int64)
            return rows, b
        words = seed_words(seeds, self.k * self.m + self.k)
        digits = (words % np.uint64(self.p)).astype(np.int64)
        M = digits[:, : self.k * self.m].reshape(n, self.k, self.m)
        b = digits[:, self.k * self.m :]
        return M, b

    def digits(self, values: np.ndarray) -> np.ndarray:
        """Base-p digits of ``values``: int64 ``(n, m)``, least significant first."""
        values = np.asarray(values, dtype=np.int64)
        powers = self.p ** np.arange(self.m, dtype=np.int64)
        return (values[:, None] // powers[None, :]) % self.p

    def hash(self, seeds: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``h_seed(value)`` for paired arrays of seeds and values, as integers in ``[0, g)``."""
        values = np.asarray(values, dtype=np.int64)
        if self.p == 2:
            rows, b = self.rows(seeds)
            x = values.astype(np.uint64)
            bits = (np.bitwise_count(rows & x[:, None]) & np.uint8(1)).astype(np.int64)
            out = (bits << np.arange(self.k, dtype=np.int64)[None, :]).sum(axis=1)
            return out ^ b
        M, b = self.rows(seeds)
        h = (np.einsum("nkm,nm->nk", M, self.digits(values)) + b) % self.p
        return h @ (self.p ** np.arange(self.k, dtype=np.int64))
