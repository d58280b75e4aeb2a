"""The level search over sketch levels (:mod:`ldp.heavy_hitters.sketch`).

A direct first level scores all ``2**l_1`` prefixes at once (its bucket counts are the estimates). A
hashed level scores the survivors of the previous level extended by every value of its new bits, in
chunks of about ``CHUNK`` candidates; at the level that reaches the full length only bit strings a
client could send are formed (each byte string with every length its trailing zero bytes allow).

**Peeling.** A hashed level's bucket also holds the other values hashed there. A candidate that shares
a bucket with a very frequent value in one row scores about that value's frequency over ``k``, which
can beat a real value of frequency near the threshold. So the ``SHORTLIST`` times ``candidates`` best
candidates are re-scored after the contributions of the clearly frequent ones (estimate at least
``PEEL_Z`` null standard deviations) are taken out of the buckets (each keeps its own); two rounds,
the second with the first's estimates. Peeling only lowers the scores of the other candidates, so the
best ``candidates`` after it are inside the shortlist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ldp.heavy_hitters.sketch import bucket_counts, null_std, score, score_grid
from ldp.heavy_hitters.strings import StringBatch, total_bits

if TYPE_CHECKING:
    from ldp.heavy_hitters.pem import Level
    from ldp.heavy_hitters.sketch import SketchAccumulator

__all__ = ["sketch_level", "complete_lengths"]

CHUNK = 1 << 21
SHORTLIST = 4
PEEL_Z = (8.0, 5.0)


def complete_lengths(words: np.ndarray, max_length: int) -> np.ndarray:
    """Every valid value with the given bytes: each row (its trailer bits zero) once per length from
    its last non-zero byte's position to ``B``."""
    raw = words.astype(">u8").view(np.uint8).reshape(words.shape[0], -1)[:, :max_length]
    nonzero = raw != 0
    last = np.where(nonzero.any(axis=1), max_length - np.argmax(nonzero[:, ::-1], axis=1), 0)
    reps = max_length - last + 1
    rows = np.repeat(np.arange(words.shape[0]), reps)
    starts = np.repeat(np.cumsum(reps) - reps, reps)
    lengths = last[rows] + (np.arange(rows.size) - starts)
    batch = StringBatch(raw[rows], lengths.astype(np.int64), max_length)
    return batch.words()


def _top(f: np.ndarray, count: int) -> np.ndarray:
    if f.size <= count:
        return np.arange(f.size)
    return np.argpartition(-f, count - 1)[:count]


def _expand(lv: Level, parents: np.ndarray, max_length: int) -> np.ndarray:
    from ldp.heavy_hitters.search import _grid

    byte_bits = 8 * max_length
    grid = _grid(parents, lv.parent_bits, min(lv.bits, byte_bits) - lv.parent_bits)
    if lv.bits == total_bits(max_length):
        grid = complete_lengths(grid, max_length)
    return grid


def _shortlist(lv: Level, table: np.ndarray, nj: int, parents: np.ndarray, keep: int, max_length: int):
    """The ``keep`` best candidates of a hashed level and their scores (chunks of parents). Below the
    full length a candidate is a parent and an extension of disjoint bits, scored from their hash sums
    (:func:`score_grid`) and formed as words only when kept."""
    from ldp.heavy_hitters.search import _grid

    spec = lv.sketch
    ext_bits = min(lv.bits, 8 * max_length) - lv.parent_bits
    per = max(1, CHUNK >> max(0, ext_bits))
    linear = not spec.direct and lv.bits < total_bits(max_length)
    if linear:
        ext = _grid(np.zeros((1, parents.shape[1]), dtype=np.uint64), lv.parent_bits, ext_bits)
        ext_sums = spec.row_sums(ext, offset=False)
    best_w: np.ndarray | None = None
    best_f = np.zeros(0)
    for s in range(0, parents.shape[0], per):
        chunk = parents[s : s + per]
        if linear:
            f = score_grid(spec, table, nj, spec.row_sums(chunk), ext_sums)
            top = _top(f, keep)
            found = chunk[top // ext.shape[0]] | ext[top % ext.shape[0]]
        else:
            cands = _expand(lv, chunk, max_length)
            f = score(spec, table, nj, cands)
            top = _top(f, keep)
            found = cands[top]
        words = found if best_w is None else np.concatenate([best_w, found])
        f = f[top] if best_w is None else np.concatenate([best_f, f[top]])
        top = _top(f, keep)
        best_w, best_f = words[top], f[top]
    return best_w, best_f


def _peel(lv: Level, table: np.ndarray, counts: np.ndarray, nj: int, words: np.ndarray, f: np.ndarray):
    """Scores of the shortlist after the clearly frequent candidates' contributions leave the buckets."""
    spec = lv.sketch
    sd = null_std(spec, nj)
    m, rows = spec.m, spec.rows
    idx = np.arange(words.shape[0])
    buckets = spec.row_buckets(words)
    current = f
    for z in PEEL_Z:
        known = current >= z * sd
        peeled = table.copy()
        for r in range(rows):
            np.subtract.at(peeled[r], buckets[r][known], counts[r] * current[known])
        total = np.zeros(idx.size)
        for r in range(rows):
            total += peeled[r, buckets[r]] + np.where(known, counts[r] * current, 0.0)
        current = m / (m - 1) * (total / max(1, nj) - 1.0 / m)
    return current


def sketch_level(
    lv: Level, acc: SketchAccumulator, parents: np.ndarray | None, keep: int, max_length: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``keep`` best prefixes of a sketch level (words, estimates) and the number scored."""
    table = bucket_counts(acc)
    nj = acc.n
    width = (total_bits(max_length) + 63) // 64
    if parents is None:  # the first level, direct: every prefix
        f = table[0] / max(1, nj)
        top = _top(f, keep)
        words = np.zeros((top.size, width), dtype=np.uint64)
        words[:, 0] = top.astype(np.uint64) << np.uint64(64 - lv.bits)
        if lv.bits == total_bits(max_length):
            ok = StringBatch.from_words(words, max_length)[1]
            words, top = words[ok], top[ok]
        return words, f[top], f.size
    scored = parents.shape[0] << max(0, min(lv.bits, 8 * max_length) - lv.parent_bits)
    words, f = _shortlist(lv, table, nj, parents, SHORTLIST * keep, max_length)
    if not lv.sketch.direct:
        f = _peel(lv, table, acc.counts.astype(np.float64), nj, words, f)
    top = _top(f, keep)
    return words[top], f[top], scored
