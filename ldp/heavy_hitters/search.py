"""The aggregator's level-by-level search of :class:`ldp.heavy_hitters.pem.PEM`.

Each level: build the candidates (all prefixes of the first level, else the survivors extended by every
value of the level's new bits), count their support against all the level's reports in blocks, turn the
counts into estimates and standard deviations, and keep the best ``candidates`` (at full length, only
bit strings a client could send: length at most ``B`` and zero bytes after it). The verification level
(or, without one, the last level) gives the published estimates.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ldp.heavy_hitters.mersenne import extension_hash, level_keys, parent_hash
from ldp.heavy_hitters.sketch import full_matrices, full_support
from ldp.heavy_hitters.sketch_search import sketch_level
from ldp.heavy_hitters.strings import StringBatch, bit_field, half_words, total_bits
from ldp.selection import binomial_p_values, discoveries, flag_p_values

if TYPE_CHECKING:
    from ldp.heavy_hitters.pem import PEM, HeavyHitters, Level, LevelStats, PEMAccumulator

__all__ = ["run_levels", "level_support", "level_estimates", "verify_survivors", "level_stats"]

BLOCK_WORK = 1 << 23  # matching triples (or pairs) per block of reports


def _grid(parents: np.ndarray, ext_start: int, ext_bits: int) -> np.ndarray:
    """All candidates ``parent | extension``, parent-major: ``(m, W)`` words -> ``(m * 2**ext_bits, W)``."""
    ext = np.arange(1 << ext_bits, dtype=np.uint64)
    out = np.repeat(parents, ext.size, axis=0)
    vals = np.tile(ext, parents.shape[0])
    k, off = divmod(ext_start, 64)
    end = off + ext_bits
    if end <= 64:
        out[:, k] |= vals << np.uint64(64 - end)
    else:
        out[:, k] |= vals >> np.uint64(end - 64)
        out[:, k + 1] |= vals << np.uint64(128 - end)
    return out


def _product_support(lv: Level, seeds: np.ndarray, y: np.ndarray, parents: np.ndarray) -> np.ndarray:
    from ldp.heavy_hitters.pem import support_product

    pieces = half_words(parents, lv.parent_bits)
    ext = np.arange(1 << lv.extension_bits, dtype=np.uint64)
    m, e = pieces.shape[0], ext.size
    block = max(64, int(BLOCK_WORK * lv.g // max(1, m * e)), BLOCK_WORK // max(m, e) // 4)
    total = np.zeros((m, e), dtype=np.int64)
    for s in range(0, seeds.size, block):
        keys = level_keys(seeds[s : s + block], pieces.shape[1])
        hp = parent_hash(keys, pieces, lv.g)
        he = extension_hash(keys, ext, lv.g)
        total += support_product(hp, he, y[s : s + block], lv.g)
    return total.ravel()


def _list_support(lv: Level, seeds: np.ndarray, y: np.ndarray, cands: np.ndarray) -> np.ndarray:
    pieces, pinv = np.unique(half_words(cands, lv.parent_bits), axis=0, return_inverse=True)
    ext, einv = np.unique(bit_field(cands, lv.parent_bits, lv.extension_bits), return_inverse=True)
    pinv, einv = pinv.ravel(), einv.ravel()
    g = np.uint64(lv.g)
    total = np.zeros(cands.shape[0], dtype=np.int64)
    block = max(64, BLOCK_WORK // max(1, cands.shape[0]))
    for s in range(0, seeds.size, block):
        keys = level_keys(seeds[s : s + block], pieces.shape[1])
        hp = parent_hash(keys, pieces, lv.g)
        he = extension_hash(keys, ext, lv.g)
        total += np.count_nonzero((hp[:, pinv] + he[:, einv]) % g == y[s : s + block, None], axis=0)
    return total


def level_support(
    lv: Level, seeds: np.ndarray, y: np.ndarray, parents: np.ndarray | None, cands: np.ndarray
) -> np.ndarray:
    """Support counts of ``cands`` at level ``lv``; ``parents`` given when ``cands`` is their full grid."""
    if lv.oracle == "gf2":
        s, c = full_matrices(seeds, lv.g.bit_length() - 1, lv.bits)
        return full_support(s, c, y, cands)
    if lv.oracle == "grr":
        return np.bincount(y.astype(np.int64), minlength=lv.g)[: cands.shape[0]].astype(np.int64)
    if parents is not None:
        return _product_support(lv, seeds, y, parents)
    return _list_support(lv, seeds, y, cands)


def level_estimates(support: np.ndarray, nj: int, n: int, lv: Level) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies among all ``n`` users and their standard deviations (module docstring of ``pem``)."""
    p, q = lv.p, lv.q
    f = (support / nj - q) / (p - q)
    fc = np.clip(f, 0.0, 1.0)
    var = (fc * p * (1 - p) + (1 - fc) * q * (1 - q)) / (nj * (p - q) ** 2)
    if n > 1:
        var = var + fc * (1 - fc) * (n - nj) / ((n - 1) * nj)
    return f, np.sqrt(var)


def _keep(f: np.ndarray, cands: np.ndarray, count: int, full: bool, max_length: int) -> np.ndarray:
    """The indices of the ``count`` largest estimates (ties: the smaller candidate first)."""
    idx = np.arange(f.size)
    if full:
        idx = idx[StringBatch.from_words(cands, max_length)[1]]
    order = np.argsort(-f[idx], kind="stable")
    return idx[order[:count]]


def _candidates(pem: PEM, lv: Level, survivors: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
    if lv.verify:
        return None, survivors
    if survivors is None:
        width = (total_bits(pem.max_length) + 63) // 64
        survivors = _grid(np.zeros((1, width), dtype=np.uint64), 0, lv.parent_bits)
    return survivors, _grid(survivors, lv.parent_bits, lv.extension_bits)


def run_levels(pem: PEM, acc: PEMAccumulator) -> HeavyHitters:
    """The search and the published estimates (see the module docstring)."""
    from ldp.heavy_hitters.pem import HeavyHitters

    n, full_bits = acc.n, total_bits(pem.max_length)
    stats: list[LevelStats] = []
    survivors: np.ndarray | None = None
    last = pem.levels[-1].index
    for lv in pem.levels:
        if lv.sketch is not None:
            sk = acc.sketches[lv.index]
            if sk.n == 0 or (survivors is not None and survivors.shape[0] == 0):
                stats.append(_stats(lv, sk.n, 0, 0))
                return HeavyHitters(n, (), tuple(stats), 0, None)
            survivors, _, scored = sketch_level(lv, sk, survivors, pem.candidates, pem.max_length)
            stats.append(_stats(lv, sk.n, scored, survivors.shape[0]))
            continue
        seeds, y = acc.level(lv.index)
        parents, cands = _candidates(pem, lv, survivors)
        if seeds.size == 0 or cands.shape[0] == 0:
            stats.append(_stats(lv, seeds.size, cands.shape[0], 0))
            return HeavyHitters(n, (), tuple(stats), 0, None)
        if lv.verify:
            return verify_survivors(pem, lv, seeds, y, cands, n, stats)
        f, std = level_estimates(level_support(lv, seeds, y, parents, cands), seeds.size, n, lv)
        full = lv.bits == full_bits
        if lv.index == last:
            return _publish(pem, lv, cands, f, std, seeds.size, stats, n)
        kept = _keep(f, cands, pem.candidates, full, pem.max_length)
        stats.append(_stats(lv, seeds.size, cands.shape[0], kept.size))
        survivors = cands[kept]
    raise AssertionError("unreachable: the last level publishes")


def verify_survivors(
    pem: PEM, lv: Level, seeds: np.ndarray, y: np.ndarray, survivors: np.ndarray, n: int,
    stats: list[LevelStats],
) -> HeavyHitters:
    """The published heavy hitters: the verification level's reports (``seeds``, ``y``) estimate the full
    values ``survivors`` exactly (frequencies among ``n`` users), then the publication rule; ``stats``
    (the search levels' statistics) gets the verification level's appended."""
    f, std = level_estimates(level_support(lv, seeds, y, None, survivors), seeds.size, n, lv)
    return _publish(pem, lv, survivors, f, std, seeds.size, stats, n)


def level_stats(lv: Level, reports: int, candidates: int, kept: int) -> LevelStats:
    """One level's :class:`~ldp.heavy_hitters.pem.LevelStats`."""
    return _stats(lv, reports, candidates, kept)


def _stats(lv: Level, reports: int, candidates: int, kept: int):
    from ldp.heavy_hitters.pem import LevelStats

    return LevelStats(lv.index, lv.bits, lv.oracle, lv.g, int(reports), int(candidates), int(kept), lv.verify)


def exact_p_values(f: np.ndarray, nj: int, lv: Level) -> np.ndarray:
    """Two-sided p-values of ``f = 0`` from a level's support counts, ``min(1, 2 P[S >= s])``.

    A user who does not hold the candidate supports it with probability exactly ``q`` (OLH: the hash is
    pairwise independent, so ``p / g + (1 - p) (1 - 1/g) / (g - 1) = 1/g``; GRR: ``q``), independently of
    the others, and the candidates are fixed before this level's reports are read (they come from other
    users). So under ``f = 0`` the support count ``S`` is Binomial(``n_j``, ``q``), whose upper tail at a
    few hundred reports is several times heavier than the normal approximation's. Doubled to match the
    two-sided normal p-values of :func:`ldp.selection.p_values`; 1 for a non-positive estimate.
    """
    return binomial_p_values(nj * (np.asarray(f, dtype=np.float64) * (lv.p - lv.q) + lv.q), nj, lv.q)


def _publish(
    pem: PEM, lv: Level, cands: np.ndarray, f: np.ndarray, std: np.ndarray, nj: int, stats: list, n: int
) -> HeavyHitters:
    """The reported values: a one-sided test against frequency 0 (Bonferroni over the tested values),
    then the ``top_k`` largest estimates, in descending order."""
    from ldp.heavy_hitters.pem import Z95, HeavyHitter, HeavyHitters

    values, valid = StringBatch.from_words(cands, pem.max_length)
    idx = np.flatnonzero(valid)
    z_cut = None
    if pem.alpha is not None and idx.size:
        null_sd = math.sqrt(lv.q * (1 - lv.q) / (nj * (lv.p - lv.q) ** 2))
        if lv.sketch is None:  # support counts: the exact binomial tail under f = 0
            flags = flag_p_values(exact_p_values(f[idx], nj, lv), idx.size, pem.rule, pem.alpha)
            flags &= f[idx] > 0
        else:
            flags = discoveries(f[idx], np.full(idx.size, null_sd), idx.size, pem.rule, pem.alpha)
        kept = f[idx][flags]
        z_cut = float(kept.min() / null_sd) if kept.size else None
        idx = idx[flags]
    idx = idx[f[idx] > 0]
    idx = idx[np.argsort(-f[idx], kind="stable")][: pem.top_k]
    rows = tuple(
        HeavyHitter(
            bytes(values.data[i, : values.lengths[i]]),
            float(f[i]),
            float(std[i]),
            float(f[i] - Z95 * std[i]),
            float(f[i] + Z95 * std[i]),
        )
        for i in idx
    )
    stats.append(_stats(lv, nj, cands.shape[0], len(rows)))
    return HeavyHitters(n, rows, tuple(stats), int(valid.sum()), z_cut)
