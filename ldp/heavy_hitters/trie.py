"""PEM across windows (the heavy_hitters kind's ``trie`` mode): one level per window, the survivors carried.

In one-window mode every window splits its users over all levels and runs the whole search. In trie mode
every client of a window reports at one level, the *scheduled* level, and the aggregator carries the
search from window to window: the schedule is level 0, 1, ..., the last search level, the verification
level, then level 0 again (a new *round*). A window

* at a search level scores the previous window's survivors extended by the level's new bits (all prefixes
  at level 0) against its reports, with the one-window search's own code
  (:func:`ldp.heavy_hitters.sketch_search.sketch_level`; the ``olh`` search's join), and keeps the best
  ``candidates``: the new survivors, published best first;
* at the verification level estimates the survivors (full values) exactly from its reports and publishes
  the heavy hitters by the one-window rule (:func:`ldp.heavy_hitters.search.verify_survivors`: the test at
  ``alpha``, the ``top_k`` largest, 95% intervals); the next window starts a new round;
* without reports at the scheduled level keeps the state: the same level is scheduled again.

Every report of a window feeds the level it was made at; a report at another level than the scheduled one
(a client that read an old publication) is counted as *stale* and not used. A client's report depends only
on its value, its level and its own randomness, never on the published survivors (the aggregator extends
them), so each report is eps-LDP as in one-window mode. Estimates are frequencies among the window's users
at the level (all of them report there): a search level's with the sketch's OLH standard deviation
(without the other values sharing a hashed bucket, :mod:`ldp.heavy_hitters.sketch`), the verification
level's exact.

:class:`TrieSearch` is Beam-free and its :class:`TrieState` picklable: the aggregation stack calls
:meth:`TrieSearch.step` once per window, in order of window start.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from ldp.heavy_hitters.search import (
    _candidates,
    _keep,
    _publish,
    level_estimates,
    level_stats,
    level_support,
    verify_survivors,
)
from ldp.heavy_hitters.sketch_search import sketch_level
from ldp.heavy_hitters.strings import StringBatch, escape_bytes, total_bits

if TYPE_CHECKING:
    from ldp.heavy_hitters.pem import PEM, HeavyHitters, Level, LevelStats, PEMAccumulator

__all__ = ["TrieState", "TrieWindow", "TrieSearch", "prefix_records", "MAX_PUBLISHED_PREFIXES", "STATUSES"]

#: the most prefixes a window publishes (rows and the clients' file); ``survivors`` counts them all
MAX_PUBLISHED_PREFIXES = 256
#: what a window did: scored a search level, verified and published, or had no reports at its level
STATUSES = ("search", "verify", "no_reports")


@dataclasses.dataclass(frozen=True, eq=False)
class TrieState:
    """What one window leaves the next: ``generation`` (windows finalized so far), the scheduled ``level``,
    and the prefixes published last (``prefix_bits`` bits each; ``words`` as :mod:`ldp.heavy_hitters.strings`
    lays them out, best first, with their ``estimates`` and ``stds``). At level 0 the words are not used
    (every prefix is scored); at a later level they are the parents."""

    generation: int = 0
    level: int = 0
    prefix_bits: int = 0
    words: np.ndarray | None = None
    estimates: np.ndarray | None = None
    stds: np.ndarray | None = None

    @property
    def survivors(self) -> int:
        return 0 if self.words is None else int(self.words.shape[0])


@dataclasses.dataclass(frozen=True, eq=False)
class TrieWindow:
    """One window's outcome: the ``level`` it scored (``status``, :data:`STATUSES`), its reports there and
    stale ones elsewhere, the level's statistics, the prefixes it publishes (``state.words`` of the new
    state) and, at the verification level, the heavy hitters."""

    level: int
    status: str
    reports: int
    stale: int
    stats: tuple[LevelStats, ...]
    hitters: HeavyHitters | None


class TrieSearch:
    """The trie-mode search of one task's :class:`~ldp.heavy_hitters.PEM` (module docstring)."""

    def __init__(self, pem: PEM) -> None:
        self.pem = pem
        self.full_bits = total_bits(pem.max_length)

    def initial_state(self) -> TrieState:
        """Before the first window: level 0, nothing published."""
        return TrieState()

    def step(self, state: TrieState, acc: PEMAccumulator, stale: int = 0) -> tuple[TrieState, TrieWindow]:
        """The next state and the outcome of one window whose reports are ``acc``; reports at another level
        than ``state.level`` (in ``acc``, plus ``stale`` counted elsewhere) are counted, not used."""
        j = self.pem.check_level(state.level)
        counts = acc.counts()
        nj = counts[j]
        stale = int(stale) + sum(counts) - nj
        lv = self.pem.levels[j]
        generation = state.generation + 1
        if nj == 0:
            stats = (level_stats(lv, 0, 0, 0),)
            kept = dataclasses.replace(state, generation=generation)
            return kept, TrieWindow(j, "no_reports", 0, stale, stats, None)
        if lv.index == len(self.pem.levels) - 1:
            return self._publish(state, lv, acc, generation, stale)
        return self._search(state, lv, acc, generation, stale)

    def _search(self, state: TrieState, lv: Level, acc: PEMAccumulator, generation: int, stale: int
                ) -> tuple[TrieState, TrieWindow]:
        """A search level: the survivors extended and scored, the best ``candidates`` kept."""
        pem = self.pem
        width = (self.full_bits + 63) // 64
        parents = None if lv.index == 0 else state.words
        if lv.index > 0 and parents is None:
            parents = np.zeros((0, width), dtype=np.uint64)
        if lv.sketch is not None:
            sketch = acc.sketches[lv.index]
            nj = sketch.n
            if parents is not None and parents.shape[0] == 0:
                words, f, scored = parents, np.zeros(0), 0
            else:
                words, f, scored = sketch_level(lv, sketch, parents, pem.candidates, pem.max_length)
            order = np.argsort(-f, kind="stable")
            words, f = words[order], f[order]
            std = _sketch_std(lv, f, nj)
        else:
            seeds, y = acc.level(lv.index)
            nj = seeds.size
            grid_parents, cands = _candidates(pem, lv, parents)
            f, std = level_estimates(level_support(lv, seeds, y, grid_parents, cands), nj, nj, lv)
            kept = _keep(f, cands, pem.candidates, lv.bits == self.full_bits, pem.max_length)
            words, f, std, scored = cands[kept], f[kept], std[kept], int(cands.shape[0])
        stats = (level_stats(lv, nj, scored, words.shape[0]),)
        following = lv.index + 1 if words.shape[0] else 0  # nothing survived: a new round
        new = TrieState(generation, following, lv.bits, words, f, std)
        return new, TrieWindow(lv.index, "search", nj, stale, stats, None)

    def _publish(self, state: TrieState, lv: Level, acc: PEMAccumulator, generation: int, stale: int
                 ) -> tuple[TrieState, TrieWindow]:
        """The last level: the heavy hitters by the one-window rule; the next window starts a new round."""
        pem = self.pem
        seeds, y = acc.level(lv.index)
        nj = seeds.size
        stats: list[LevelStats] = []
        if lv.verify and state.survivors == 0:
            from ldp.heavy_hitters.pem import HeavyHitters

            stats.append(level_stats(lv, nj, 0, 0))
            hitters = HeavyHitters(nj, (), tuple(stats), 0, None)
        elif lv.verify:
            hitters = verify_survivors(pem, lv, seeds, y, state.words, nj, stats)
        else:  # the olh search without verification: its last level's grid
            parents, cands = _candidates(pem, lv, None if lv.index == 0 else state.words)
            f, std = level_estimates(level_support(lv, seeds, y, parents, cands), nj, nj, lv)
            hitters = _publish(pem, lv, cands, f, std, nj, stats, nj)
        words = _value_words(pem, [h.value for h in hitters.hitters])
        est = np.array([h.estimate for h in hitters.hitters], dtype=np.float64)
        std = np.array([h.std for h in hitters.hitters], dtype=np.float64)
        new = TrieState(generation, 0, self.full_bits, words, est, std)
        return new, TrieWindow(lv.index, "verify", nj, stale, tuple(stats), hitters)


def _sketch_std(lv: Level, f: np.ndarray, nj: int) -> np.ndarray:
    """The sketch estimate's standard deviation at frequency ``f`` among ``nj`` reports, without the other
    values sharing a hashed bucket (:mod:`ldp.heavy_hitters.sketch`)."""
    spec = lv.sketch
    assert spec is not None
    p, q = spec.p, spec.q
    c = 1.0 if spec.direct else spec.m / (spec.m - 1)
    fc = np.clip(f, 0.0, 1.0)
    return c * np.sqrt((q * (1 - q) + fc * (p * (1 - p) - q * (1 - q))) / (max(1, nj) * (p - q) ** 2))


def _value_words(pem: PEM, values: list[bytes]) -> np.ndarray:
    width = (total_bits(pem.max_length) + 63) // 64
    if not values:
        return np.zeros((0, width), dtype=np.uint64)
    from ldp.heavy_hitters.strings import encode_strings

    return encode_strings(values, pem.max_length).words()


def prefix_records(state: TrieState, max_length: int, limit: int = MAX_PUBLISHED_PREFIXES
                   ) -> list[dict[str, Any]]:
    """The published prefixes of ``state``, best first, at most ``limit``: ``{value, hex, estimate, std}``.

    ``hex`` is the prefix's ``prefix_bits`` bits in hexadecimal (the last digit's unused bits zero);
    ``value`` its text (:func:`~ldp.heavy_hitters.strings.escape_bytes`): at full length the value itself,
    else the prefix's complete bytes without trailing zero bytes (a zero byte there is most often the
    padding of a shorter value; ``hex`` is exact)."""
    if state.words is None or state.prefix_bits == 0:
        return []
    words = state.words[:limit]
    bits = state.prefix_bits
    digits = (bits + 3) // 4
    raw = words.astype(">u8").view(np.uint8).reshape(words.shape[0], -1)
    if bits == total_bits(max_length):
        values, _ = StringBatch.from_words(words, max_length)
        texts = [escape_bytes(bytes(values.data[i, : values.lengths[i]])) for i in range(words.shape[0])]
    else:
        texts = [escape_bytes(bytes(r[: bits // 8]).rstrip(b"\0")) for r in raw]
    est = state.estimates if state.estimates is not None else np.zeros(words.shape[0])
    std = state.stds if state.stds is not None else np.zeros(words.shape[0])
    return [
        {"value": texts[i], "hex": raw[i].tobytes().hex()[:digits], "estimate": float(est[i]),
         "std": float(std[i])}
        for i in range(words.shape[0])
    ]
