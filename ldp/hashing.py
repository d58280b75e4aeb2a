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

Named families (:data:`HASH_FAMILIES`; the name travels in the task so that reports are always decoded
with the family that encoded them):

* ``"gf2-affine"`` (default, :class:`GF2AffineHash`): ``h(v) = M x(v) + b`` over GF(2), ``x(v)`` the
  ``m`` bits of ``v``, ``g = 2**k``. It is **3-wise independent**: for distinct ``v1, v2, v3`` the
  differences ``x2 - x1`` and ``x3 - x1`` are distinct non-zero GF(2) vectors, hence linearly
  independent, so ``(M(x2 - x1), M(x3 - x1))`` is uniform on ``GF(2)^k x GF(2)^k`` and, with ``b``
  uniform, ``(h(v1), h(v2), h(v3))`` is uniform on ``[g]^3``. Then the support indicators of different
  values are pairwise uncorrelated given the reporting user's value, and the variance of a sum of OLH
  estimates over a set is the sum of the per-value variances up to ``O(f)`` terms.
* ``"linear-gf"`` (legacy, :class:`LinearHash` over GF(p), ``g = p**k`` any prime power): universal,
  but for ``p > 2`` three collinear digit vectors (e.g. ``v, v + 1, v + 2``) hash in arithmetic
  progression, so ``P[h(0) = h(1) = h(2)] = 1/g`` instead of ``1/g**2``: per-value estimates are
  unbiased with the right variance, but set and range sums are far noisier than their nominal
  variance. Kept only to decode reports encoded under it. For ``p = 2`` it is the same function as
  ``"gf2-affine"`` (same seed expansion).

Public seeds (:func:`public_seeds`) come from the operating system's CSPRNG, never from the generator
that draws a report's perturbation noise: a seed is published with the report, and raw outputs of a
PCG64 generator let an observer reconstruct its state, hence the noise of every other report it drew.
Simulations that need reproducible seeds pass an explicitly seeded generator, derived by
:func:`client_streams` as a *spawned child* of the caller's ``SeedSequence``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from ldp.csprng import secure_rng

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

__all__ = [
    "GOLDEN",
    "splitmix64",
    "seed_words",
    "random_seeds",
    "public_seeds",
    "client_streams",
    "hash_ids",
    "LinearHash",
    "GF2AffineHash",
    "HashFamily",
    "HASH_FAMILIES",
    "DEFAULT_HASH_FAMILY",
    "LEGACY_HASH_FAMILY",
    "hash_family",
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


def public_seeds(n: int, seed_rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` uniform 64-bit public hash seeds.

    Args:
        n: number of seeds.
        seed_rng: ``None`` (what a real client uses): the operating system's CSPRNG (``os.urandom``).
            A generator: a *dedicated* seed generator for reproducible simulations, e.g. the second
            element of :func:`client_streams`. Never pass the generator that draws perturbation noise:
            its raw outputs, published as seeds, would reveal its state.

    Returns:
        ``uint64`` array of shape ``(n,)``.
    """
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if seed_rng is None:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()
    return seed_rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def random_seeds(n: int, *, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """Deprecated name of :func:`public_seeds` (``rng`` must be a dedicated seed generator, never the
    perturbation generator; ``None`` = OS CSPRNG). Integers and SeedSequences seed a fresh generator."""
    if rng is None or isinstance(rng, np.random.Generator):
        return public_seeds(n, rng)
    return public_seeds(n, np.random.default_rng(rng))


def client_streams(
    rng: np.random.Generator | np.random.SeedSequence | int | None,
) -> tuple[np.random.Generator, np.random.Generator | None]:
    """Splits a client's randomness into ``(perturbation generator, seed generator)``.

    * ``None``: perturbation from the OS CSPRNG (:func:`ldp.csprng.secure_rng`); seed generator
      ``None``, so :func:`public_seeds` reads the OS CSPRNG directly (what a real device does).
    * an ``int`` or ``SeedSequence`` (simulation): two children spawned from it, one per stream, so
      runs are reproducible and the seed stream is not the perturbation stream.
    * a ``Generator``: it draws the perturbation noise itself; the seed generator is ``rng.spawn(1)[0]``,
      a child of its ``SeedSequence`` (independent by SeedSequence hashing, never derived from its
      outputs; every call spawns a new child, so repeated calls get fresh seeds). A generator without
      a seed sequence gets OS CSPRNG seeds.
    """
    if rng is None:
        return secure_rng(), None
    if isinstance(rng, np.random.Generator):
        try:
            return rng, rng.spawn(1)[0]
        except (TypeError, ValueError, AttributeError):
            return rng, None
    ss = rng if isinstance(rng, np.random.SeedSequence) else np.random.SeedSequence(rng)
    perturb, seeds = ss.spawn(2)
    return np.random.default_rng(perturb), np.random.default_rng(seeds)


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
    """Returns ``(p, k)`` with ``g == p**k`` and ``p`` prime, or None when ``g`` is not a prime power.

    Trial division by the smallest prime factor: O(sqrt(g)) at worst.
    """
    g = int(g)
    if g < 2:
        return None
    p = 0
    if g % 2 == 0:
        p = 2
    else:
        f = 3
        while f * f <= g:
            if g % f == 0:
                p = f
                break
            f += 2
        if p == 0:
            return (g, 1)  # g is prime
    k, rest = 0, g
    while rest % p == 0:
        rest //= p
        k += 1
    return (p, k) if rest == 1 else None


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


class GF2AffineHash(LinearHash):
    """The ``"gf2-affine"`` family: ``h(v) = M x(v) + b`` over GF(2) onto ``g = 2**k`` buckets.

    3-wise independent (see the module docstring), so OLH set and range sums have the variance the
    closed form says. The same function as ``LinearHash(d, 2, k)``: ``rows(seeds)`` gives ``(rows, b)``
    with ``rows`` uint64 ``(n, k)`` masks of ``m`` bits and ``b`` int64 ``(n,)``.

    Args:
        d: domain size.
        k: output bits, ``1 <= k <= 63``.
    """

    family = "gf2-affine"

    def __init__(self, d: int, k: int) -> None:
        if not 1 <= int(k) <= 63:
            raise ValueError(f"gf2-affine needs 1 <= k <= 63 output bits, got {k}")
        super().__init__(d, 2, k)


@dataclasses.dataclass(frozen=True)
class HashFamily:
    """A named hash family for OLH.

    Attributes:
        name: the name stored in tasks and oracle descriptions.
        three_wise_independent: whether support indicators of distinct values are 3-wise independent
            (set and range sums then have variance sum-of-per-value-variances).
        make: ``make(d, g)`` -> hash object with ``hash(seeds, values)``, ``rows(seeds)``, ``digits``,
            ``p``, ``k``, ``m``, ``size``, ``g``.
        check: ``check(g)`` -> None, or a short message saying why ``g`` is not allowed.
    """

    name: str
    three_wise_independent: bool
    make: Callable[[int, int], LinearHash]
    check: Callable[[int], str | None]


def _gf2_check(g: int) -> str | None:
    if g < 2 or g & (g - 1) or g > 1 << 63:
        return f"g = {g} is not a power of two in [2, 2**63]; the gf2-affine family needs g = 2**k"
    return None


def _gf2_make(d: int, g: int) -> LinearHash:
    msg = _gf2_check(g)
    if msg:
        raise ValueError(msg)
    return GF2AffineHash(d, g.bit_length() - 1)


def _lin_check(g: int) -> str | None:
    if prime_power(g) is None:
        return f"g = {g} is not a prime power; the linear-gf family needs g = p**k with p prime"
    return None


def _lin_make(d: int, g: int) -> LinearHash:
    pk = prime_power(g)
    if pk is None:
        raise ValueError(_lin_check(g))
    return LinearHash(d, pk[0], pk[1])


#: the named OLH hash families; the name is part of the task (and of ``OLH.describe()``)
HASH_FAMILIES: dict[str, HashFamily] = {
    "gf2-affine": HashFamily("gf2-affine", True, _gf2_make, _gf2_check),
    "linear-gf": HashFamily("linear-gf", False, _lin_make, _lin_check),
}
DEFAULT_HASH_FAMILY = "gf2-affine"
LEGACY_HASH_FAMILY = "linear-gf"


def hash_family(name: str) -> HashFamily:
    """The :class:`HashFamily` called ``name``; a clear error naming the known families otherwise."""
    try:
        return HASH_FAMILIES[str(name)]
    except KeyError:
        raise ValueError(f"unknown hash family {name!r}; known: {sorted(HASH_FAMILIES)}") from None
