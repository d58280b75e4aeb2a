"""The per-report hash of a prefix: linear hashing modulo the Mersenne prime ``p = 2**61 - 1``.

At a level with parent length ``m`` and extension width ``w``, a prefix ``x`` is a *parent part* (its
first ``m`` bits, as ``K = ceil(m / 32)`` pieces ``x_1 .. x_K`` of 32 bits) and an *extension* ``e``
(the ``w`` bits after them, ``w <= 32``). A report's seed ``s`` gives ``K + 3`` keys, word ``i`` of
:func:`ldp.hashing.seed_words` reduced modulo ``p``: ``a_1 .. a_K, b, c, d``. The report's hash is

    h_s(x) = (A(x) + E(e)) mod g,   A(x) = ((a_1 x_1 + .. + a_K x_K + b) mod p) mod g,
                                     E(e) = ((c e + d) mod p) mod g.

For two distinct prefixes the parts that differ give, over uniform keys, a uniform pair of field elements
(the difference ``sum a_i (x_i - x'_i)`` or ``c (e - e')`` is uniform and independent of ``b`` or
``d``), so ``P[h_s(x) = h_s(x')] = 1/g`` up to ``O(1/p)``: the family is universal, which is what makes the
OLH estimate unbiased. The additive split is what makes aggregation cheap: the support of ``(P, e)``
is ``E(e) = y - A(P) (mod g)``, a join on one of ``g`` keys (:func:`ldp.heavy_hitters.pem.support_product`).

Products of a key (below ``2**61``) and a 32-bit piece are split into 32-bit halves so that every
partial product fits in a ``uint64``: ``a x = a_hi x 2**32 + a_lo x`` with ``2**61 = 1 (mod p)``.
"""

from __future__ import annotations

import numpy as np

from ldp.hashing import seed_words

__all__ = ["PRIME", "level_keys", "mulmod", "reduce", "parent_hash", "extension_hash",
           "own_hash"]

PRIME = (1 << 61) - 1
_P = np.uint64(PRIME)
_S61 = np.uint64(61)
_S32 = np.uint64(32)
_S29 = np.uint64(29)
_M29 = np.uint64((1 << 29) - 1)
_M32 = np.uint64(0xFFFFFFFF)


def reduce(x: np.ndarray) -> np.ndarray:
    """``x mod p`` for ``uint64`` values (any ``x < 2**64``)."""
    x = (x & _P) + (x >> _S61)
    return np.where(x >= _P, x - _P, x)


def _fold(x: np.ndarray) -> np.ndarray:
    """A value congruent to ``x`` modulo ``p`` and below ``2**61 + 8``."""
    return (x & _P) + (x >> _S61)


def mulmod(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``a x`` folded below ``2**61 + 8`` (congruent modulo ``p``); ``a < p``, ``x < 2**32``, broadcast."""
    with np.errstate(over="ignore"):
        lo = (a & _M32) * x  # < 2**64
        hi = (a >> _S32) * x  # < 2**61
        return _fold(_fold(lo) + (hi >> _S29) + ((hi & _M29) << _S32))


def level_keys(seeds: np.ndarray, pieces: int) -> np.ndarray:
    """The keys of each seed at a level whose parent part has ``pieces`` 32-bit pieces: ``(n, pieces + 3)``
    field elements ``a_1 .. a_K, b, c, d``."""
    return seed_words(np.asarray(seeds, dtype=np.uint64), pieces + 3) % _P


def parent_hash(keys: np.ndarray, parents: np.ndarray, g: int) -> np.ndarray:
    """``A(P)`` for every report and parent: keys ``(n, K + 3)``, parents ``(m, K)`` pieces -> ``(n, m)``."""
    k = parents.shape[1]
    acc = np.broadcast_to(keys[:, k : k + 1], (keys.shape[0], parents.shape[0])).copy()
    for i in range(k):
        acc = _fold(acc + mulmod(keys[:, i : i + 1], parents[None, :, i]))
    return reduce(acc) % np.uint64(g)


def extension_hash(keys: np.ndarray, extensions: np.ndarray, g: int) -> np.ndarray:
    """``E(e)`` for every report and extension: keys ``(n, K + 3)``, extensions ``(E,)`` -> ``(n, E)``."""
    c, d = keys[:, -2:-1], keys[:, -1:]
    return reduce(mulmod(c, extensions[None, :]) + d) % np.uint64(g)


def own_hash(keys: np.ndarray, parts: np.ndarray, ext: np.ndarray, g: int) -> np.ndarray:
    """``h_s(x)`` of each report's own prefix: keys ``(n, K + 3)``, parent pieces ``(n, K)``, extensions
    ``(n,)`` -> buckets ``(n,)``."""
    k = parts.shape[1]
    acc = keys[:, k].copy()
    for i in range(k):
        acc = _fold(acc + mulmod(keys[:, i], parts[:, i]))
    g64 = np.uint64(g)
    a = reduce(acc) % g64
    e = reduce(mulmod(keys[:, -2], ext) + keys[:, -1]) % g64
    return (a + e) % g64
