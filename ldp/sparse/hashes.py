"""Per-report bin and sign hashes ``h: items -> [b]``, ``s: items -> {-1, +1}`` for sparse vectors.

Every report carries a 64-bit public seed; the hash family named in the round's parameters turns
(seed, item id) into a bin and a sign, identically on the client and on the server. Families
(:data:`SPARSE_HASHES`, versioned by name):

* ``"gf2-affine"`` (default): ``h(x) = M u + c`` and ``s(x) = (-1)^(<a, u> + e)`` over GF(2), where
  ``u = pi(x)`` is the item id passed through a fixed public bijection ``pi`` of ``[0, 2**m)``
  (:func:`item_bits`, ``m = ceil(log2 d)``; multiply-by-odd and xor-shift rounds, non-linear over
  GF(2)), ``b = 2**r`` bins, ``M`` an ``r x m`` bit matrix, ``a`` an
  ``m``-bit mask, ``c`` ``r`` bits and ``e`` one bit, all drawn from SplitMix64 words of the seed
  (:func:`ldp.hashing.seed_words`), ``a`` from a word independent of ``M``. For distinct ``x, y``:
  ``P[h(x) = h(y)] = 2**-r = 1/b`` exactly and ``E[s(x) s(y) | M, c] = 0``, so the per-coordinate
  variance is exactly the random-oracle one. Signs are 3-wise but not 4-wise independent
  (``pi(x) ^ pi(y) ^ pi(z) ^ pi(w) = 0`` forces ``s(x)s(y)s(z)s(w) = 1`` and makes the collisions of
  ``(x, y)`` and ``(z, w)`` the same event), which matters for sums of estimates over item sets, not for
  single coordinates. Without ``pi`` such quadruples are everywhere in structured sets (a block of
  consecutive ids against supports of small ids: ``x ^ y`` takes few values), and the variance of a
  block sum comes out well above the random-oracle value; ``pi`` scatters them, leaving about
  ``|A|^2 |supp|^2 / 2**m`` coincidences instead (measured in ``tests/test_sparse.py``).
  Its point: a report's contribution ``s(x) B[h(x)]`` is a
  combination of ``b`` Walsh functions of ``x``, which is what the fixed-size whole-vector
  accumulator (:class:`ldp.sparse.accumulate.TableAccumulator`) uses.
* ``"mix64"``: ``z = splitmix64(seed ^ splitmix64(x ^ tag))`` with one tag for the bin and one for the
  sign; bin = ``((z >> 32) * b) >> 32`` (multiply-shift, no modulo bias), sign = top bit. A fast
  random-oracle heuristic (what the paper's code does, with a stronger mixer and 64-bit seeds); any
  ``b``. No structure to exploit: decoding the whole vector costs ``n * d`` hash evaluations.
* ``"blake2b"``: keyed BLAKE2b-128 of the item id with the seed as key: a PRF, as the (eps, delta)
  sensitivity rule needs (its delta is then over the hash choice, computational). Python per pair:
  slow, used only when that rule is active.

Privacy with the deterministic sensitivity rules (Delta = L, clipping) holds for *any* family; only the
(eps, delta) rule ``Delta = 3 sqrt(b L ln(2b/delta))`` depends on the hash behaving like a random
function.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ldp.hashing import seed_words, splitmix64

__all__ = ["SPARSE_HASHES", "DEFAULT_SPARSE_HASH", "domain_bits", "bins_signs", "gf2_params", "item_bits"]

SPARSE_HASHES = ("gf2-affine", "mix64", "blake2b")
DEFAULT_SPARSE_HASH = "gf2-affine"

_TAG_BIN = np.uint64(0x6A09E667F3BCC909)
_TAG_SIGN = np.uint64(0xBB67AE8584CAA73B)
_S32, _S63 = np.uint64(32), np.uint64(63)


def domain_bits(d: int) -> int:
    """``m = ceil(log2 d)`` (at least 1): the bits an item id in ``[0, d)`` needs."""
    return max(1, (int(d) - 1).bit_length())


_PI_MULT = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xD6E8FEB86659FD93),
    np.uint64(0xC2B2AE3D27D4EB4F),
)


def item_bits(items: np.ndarray, m: int) -> np.ndarray:
    """``pi(x)``: the fixed public bijection of ``[0, 2**m)`` the gf2-affine family hashes (uint64).

    Three rounds of ``x = (x * odd) mod 2**m`` then ``x ^= x >> ceil(m/2)``; each step is a bijection
    of ``[0, 2**m)``, and the carries of the multiplications make ``pi`` non-linear over GF(2).
    """
    mask = np.uint64((1 << m) - 1)
    shift = np.uint64((m + 1) // 2)
    x = np.asarray(items, dtype=np.uint64) & mask
    with np.errstate(over="ignore"):
        for c in _PI_MULT:
            x = (x * c) & mask
            x = x ^ (x >> shift)
    return x


def gf2_params(seeds: np.ndarray, r: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gf2-affine parameters of each seed.

    Returns:
        ``(rows, a, c, e)``: ``rows`` uint64 ``(n, r)`` (row ``j`` of ``M`` as an ``m``-bit mask), ``a``
        uint64 ``(n,)`` the sign mask, ``c`` int64 ``(n,)`` the ``r`` offset bits, ``e`` int64 ``(n,)``
        the sign offset bit.
    """
    seeds = np.asarray(seeds, dtype=np.uint64).reshape(-1)
    words = seed_words(seeds, r + 2)
    mask = np.uint64((1 << m) - 1)
    rows = words[:, :r] & mask
    a = words[:, r] & mask
    last = words[:, r + 1]
    c = (last & np.uint64((1 << r) - 1)).astype(np.int64)
    e = (last >> _S63).astype(np.int64)
    return rows, a, c, e


def _parity(x: np.ndarray) -> np.ndarray:
    return (np.bitwise_count(x) & np.uint8(1)).astype(np.int64)


def bins_signs(
    family: str, seeds: np.ndarray, items: np.ndarray, b: int, d: int
) -> tuple[np.ndarray, np.ndarray]:
    """Bins and signs of items under per-report seeds.

    Args:
        family: one of :data:`SPARSE_HASHES`.
        seeds: uint64 ``(n,)``.
        items: uint64 ``(n,)`` (one item per seed) or ``(n, q)`` / ``(1, q)`` (items per seed).
        b: number of bins (a power of two for ``gf2-affine``).
        d: domain size (item ids lie in ``[0, d)``; sets ``m`` for ``gf2-affine``).

    Returns:
        ``(h, s)`` with the broadcast shape of ``items``: ``h`` int64 in ``[0, b)``, ``s`` int8 in {-1, +1}.
    """
    seeds = np.asarray(seeds, dtype=np.uint64)
    items = np.asarray(items, dtype=np.uint64)
    two_d = items.ndim == 2
    if family == "gf2-affine":
        r = int(b).bit_length() - 1
        if 1 << r != b:
            raise ValueError(f"gf2-affine needs a power-of-two number of bins, got b = {b}")
        m = domain_bits(d)
        rows, a, c, e = gf2_params(seeds, r, m)
        if two_d:
            x = item_bits(items, m)
            sgn = _parity(a[:, None] & x) ^ e[:, None]
            h = np.broadcast_to(c[:, None], np.broadcast_shapes(x.shape, (seeds.size, 1))).copy()
            for j in range(r):
                h ^= _parity(rows[:, j : j + 1] & x) << j
        else:
            x = item_bits(items, m)
            sgn = _parity(a & x) ^ e
            h = c.copy()
            for j in range(r):
                h ^= _parity(rows[:, j] & x) << j
        return h, (1 - 2 * sgn).astype(np.int8)
    if family == "mix64":
        s2 = seeds[:, None] if two_d else seeds
        with np.errstate(over="ignore"):
            zb = splitmix64(s2 ^ splitmix64(items ^ _TAG_BIN))
            zs = splitmix64(s2 ^ splitmix64(items ^ _TAG_SIGN))
            h = (((zb >> _S32) * np.uint64(b)) >> _S32).astype(np.int64)
        return h, (1 - 2 * (zs >> _S63).astype(np.int64)).astype(np.int8)
    if family == "blake2b":
        shape = np.broadcast_shapes(items.shape, (seeds.size, 1)) if two_d else items.shape
        it = np.broadcast_to(items, shape)
        sd = np.broadcast_to(seeds[:, None], shape) if two_d else seeds
        h = np.empty(shape, dtype=np.int64)
        s = np.empty(shape, dtype=np.int8)
        for idx in np.ndindex(shape):
            dig = hashlib.blake2b(
                int(it[idx]).to_bytes(8, "little"), key=int(sd[idx]).to_bytes(8, "little"), digest_size=16
            ).digest()
            z = int.from_bytes(dig[:8], "little")
            h[idx] = ((z >> 32) * b) >> 32
            s[idx] = 1 - 2 * (dig[8] & 1)
        return h, s
    raise ValueError(f"unknown sparse hash family {family!r}; known: {list(SPARSE_HASHES)}")


def check_family(family: str, b: int, d: int) -> None:
    """Raises ValueError when ``family`` cannot hash ``[0, d)`` into ``b`` bins."""
    if family not in SPARSE_HASHES:
        raise ValueError(f"unknown sparse hash family {family!r}; known: {list(SPARSE_HASHES)}")
    if family == "gf2-affine" and (b < 1 or b & (b - 1)):
        raise ValueError(f"gf2-affine needs a power-of-two number of bins, got b = {b}")
    if d < 1 or d > 1 << 63:
        raise ValueError(f"domain size must lie in [1, 2**63], got {d}")
    if b < 1 or b > 1 << 20:
        raise ValueError(f"number of bins must lie in [1, 2**20], got {b}")
    if family == "gf2-affine" and math.log2(b) > 63:
        raise ValueError("too many bins")
