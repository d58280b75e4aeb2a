"""The level search over sketch levels (:mod:`ldp.heavy_hitters.sketch`).

A direct first level scores all ``2**l_1`` prefixes at once (its bucket counts are the estimates). A
hashed level scores the survivors of the previous level extended by every value of its new bits, in
chunks of about ``CHUNK`` candidates; at the level that reaches the full length only bit strings a
client could send are scored (each byte string with every length its trailing zero bytes allow). The
row hash is linear in disjoint bit ranges, so a candidate's hash is its parent's sum plus its
extension's (plus its length trailer's): candidates are formed as words only when kept.

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
    rows, lengths = _length_runs(_last_byte(words, max_length), max_length)
    raw = words.astype(">u8").view(np.uint8).reshape(words.shape[0], -1)[:, :max_length]
    return StringBatch(raw[rows], lengths, max_length).words()


def _last_byte(words: np.ndarray, max_length: int) -> np.ndarray:
    """The position just past each row's last non-zero byte among its first ``B`` (0 if none)."""
    raw = words.astype(">u8").view(np.uint8).reshape(words.shape[0], -1)[:, :max_length]
    nonzero = raw != 0
    return np.where(nonzero.any(axis=1), max_length - np.argmax(nonzero[:, ::-1], axis=1), 0)


def _length_runs(last: np.ndarray, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """For rows whose bytes end at ``last``: each row index once per valid length, and that length."""
    reps = max_length - last + 1
    rows = np.repeat(np.arange(last.size), reps)
    starts = np.repeat(np.cumsum(reps) - reps, reps)
    return rows, (last[rows] + (np.arange(rows.size) - starts)).astype(np.int64)


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
    """The ``keep`` best candidates of a hashed level and their scores (chunks of parents). A candidate
    is a parent, an extension and (at the full length) a length trailer, of disjoint bits: it is scored
    from their hash sums (:func:`score_grid`) and formed as words only when kept."""
    if lv.sketch.direct:
        return _shortlist_words(lv, table, nj, parents, keep, max_length)
    grid = _Grid(lv, parents.shape[1], max_length)
    per = max(1, CHUNK >> grid.ext_bits)
    best_w: np.ndarray | None = None
    best_f = np.zeros(0)
    for s in range(0, parents.shape[0], per):
        f, found = grid.score(table, nj, parents[s : s + per], keep)
        words = found if best_w is None else np.concatenate([best_w, found])
        f = f if best_w is None else np.concatenate([best_f, f])
        top = _top(f, keep)
        best_w, best_f = words[top], f[top]
    return best_w, best_f


class _Grid:
    """A hashed level's extensions (and, at the full length, length trailers) with their row sums."""

    def __init__(self, lv: Level, width: int, max_length: int) -> None:
        from ldp.heavy_hitters.search import _grid

        self.spec, self.max_length = lv.sketch, max_length
        self.ext_bits = min(lv.bits, 8 * max_length) - lv.parent_bits
        self.ext = _grid(np.zeros((1, width), dtype=np.uint64), lv.parent_bits, self.ext_bits)
        self.ext_sums = self.spec.row_sums(self.ext, offset=False)
        self.full = lv.bits == total_bits(max_length)
        if self.full:
            zeros = np.zeros((max_length + 1, max_length), dtype=np.uint8)
            self.trailers = StringBatch(zeros, np.arange(max_length + 1), max_length).words()
            self.trailer_sums = self.spec.row_sums(self.trailers, offset=False)
            self.ext_last = _last_byte(self.ext, max_length)

    def score(
        self, table: np.ndarray, nj: int, chunk: np.ndarray, keep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``keep`` best candidates of ``chunk``'s parents: their scores and words."""
        sums = self.spec.row_sums(chunk)
        e = self.ext.shape[0]
        if not self.full:
            f = score_grid(self.spec, table, nj, sums, self.ext_sums)
            top = _top(f, keep)
            return f[top], chunk[top // e] | self.ext[top % e]
        last = np.maximum.outer(_last_byte(chunk, self.max_length), self.ext_last).ravel()
        rows, lengths = _length_runs(last, self.max_length)
        f = score_grid(self.spec, table, nj, sums, self.ext_sums, (rows, self.trailer_sums, lengths))
        top = _top(f, keep)
        g = rows[top]
        return f[top], chunk[g // e] | self.ext[g % e] | self.trailers[lengths[top]]


def _shortlist_words(lv: Level, table: np.ndarray, nj: int, parents: np.ndarray, keep: int, max_length: int):
    """:func:`_shortlist` of a direct level: every candidate formed as words, then scored."""
    per = max(1, CHUNK >> max(0, min(lv.bits, 8 * max_length) - lv.parent_bits))
    best_w: np.ndarray | None = None
    best_f = np.zeros(0)
    for s in range(0, parents.shape[0], per):
        cands = _expand(lv, parents[s : s + per], max_length)
        f = score(lv.sketch, table, nj, cands)
        top = _top(f, keep)
        words = cands[top] if best_w is None else np.concatenate([best_w, cands[top]])
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
