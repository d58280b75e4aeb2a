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

**Resuming.** :meth:`TrieSearch.state_record` is a state as plain JSON (the publication's ``state``: the
full survivor set, each word as the hexadecimal digits of its ``prefix_bits`` bits, the estimates and stds
as exact floats, the ``round`` and the task's ``layout`` fingerprint, :func:`layout_fingerprint`), and
:meth:`TrieSearch.resume` the state back from a publication, checked (the layout, the level and its prefix
bits, the words' digits, unused bits and uniqueness, the arrays' lengths): stepping it gives exactly what
the uninterrupted search would have given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
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
from ldp.heavy_hitters.strings import StringBatch, escape_bytes, mask_prefix, total_bits

if TYPE_CHECKING:
    from ldp.heavy_hitters.pem import PEM, HeavyHitters, Level, LevelStats, PEMAccumulator

__all__ = [
    "TrieState", "TrieWindow", "TrieSearch", "prefix_records", "layout_fingerprint", "MAX_PUBLISHED_PREFIXES",
    "STATUSES", "STATE_FORMAT",
]

#: the most prefixes a window publishes (rows and the clients' file); ``survivors`` counts them all
MAX_PUBLISHED_PREFIXES = 256
#: what a window did: scored a search level, verified and published, or had no reports at its level
STATUSES = ("search", "verify", "no_reports")
#: the version of :meth:`TrieSearch.state_record`'s layout
STATE_FORMAT = 1
_HEX = re.compile(r"[0-9a-f]*")


@dataclasses.dataclass(frozen=True, eq=False)
class TrieState:
    """What one window leaves the next: ``generation`` (windows finalized so far), the scheduled ``level``,
    and the prefixes published last (``prefix_bits`` bits each; ``words`` as :mod:`ldp.heavy_hitters.strings`
    lays them out, best first, with their ``estimates`` and ``stds``). At level 0 the words are not used
    (every prefix is scored); at a later level they are the parents. ``round``: the rounds ended so far (by
    a verification window, or a search level that kept nothing)."""

    generation: int = 0
    level: int = 0
    prefix_bits: int = 0
    words: np.ndarray | None = None
    estimates: np.ndarray | None = None
    stds: np.ndarray | None = None
    round: int = 0

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

    def __init__(self, pem: PEM, context: Mapping[str, Any] | None = None) -> None:
        self.pem = pem
        self.full_bits = total_bits(pem.max_length)
        self.fingerprint = layout_fingerprint(pem, context)

    def initial_state(self) -> TrieState:
        """Before the first window: level 0, nothing published."""
        return TrieState()

    def state_record(self, state: TrieState) -> dict[str, Any]:
        """``state`` as plain JSON (module docstring): ``format``, ``layout``, ``round``, ``prefix_bits``
        and every survivor's ``words`` (hex), ``estimates`` and ``stds``, best first. The generation and
        the level are the publication's own keys."""
        n = state.survivors
        return {
            "format": STATE_FORMAT,
            "layout": self.fingerprint,
            "round": int(state.round),
            "prefix_bits": int(state.prefix_bits),
            "words": _hex_words(state.words, state.prefix_bits) if n else [],
            "estimates": [] if state.estimates is None else np.asarray(state.estimates, np.float64).tolist(),
            "stds": [] if state.stds is None else np.asarray(state.stds, np.float64).tolist(),
        }

    def resume(self, publication: Mapping[str, Any]) -> TrieState:
        """The state a publication (``generation``, ``level`` and :meth:`state_record`'s ``state``) left,
        checked against this search; :class:`ValueError` (one line) for a publication of another layout or
        with a state this search cannot step."""
        rec = publication.get("state")
        if not isinstance(rec, dict):
            raise ValueError("the publication carries no trie state (written by a release without resume?)")
        if rec.get("format") != STATE_FORMAT:
            raise ValueError(f"the trie state's format is {_short(rec.get('format'))}, not {STATE_FORMAT}")
        if rec.get("layout") != self.fingerprint:
            theirs = _short(rec.get("layout"))
            raise ValueError(f"the trie state is of another layout ({theirs}, this task's "
                             f"{self.fingerprint!r}): another task, task parameters or release")  # fmt: skip
        generation, level = publication.get("generation"), publication.get("level")
        bits, rounds = rec.get("prefix_bits"), rec.get("round")
        for name, value, low in (("generation", generation, 1), ("level", level, 0), ("prefix_bits", bits, 0),
                                 ("round", rounds, 0)):  # fmt: skip
            if not _is_int(value) or value < low:
                raise ValueError(f"the trie state's {name} is an integer >= {low}, not {_short(value)}")
        self._check_level(level, bits)
        words = _words_of_hex(rec.get("words"), bits, (self.full_bits + 63) // 64)
        n = words.shape[0]
        most = max(self.pem.candidates, self.pem.top_k)
        if n > most:
            raise ValueError(f"the trie state holds {n} prefixes, more than the {most} kept")
        if bits == 0 and n:
            raise ValueError("the trie state holds prefixes of 0 bits")
        if bits == self.full_bits and n and not StringBatch.from_words(words, self.pem.max_length)[1].all():
            raise ValueError("the trie state's full-length words are not all values a client can send")
        est, std = _floats(rec.get("estimates"), n, "estimates"), _floats(rec.get("stds"), n, "stds")
        if np.any(std < 0):
            raise ValueError("the trie state's stds must be >= 0")
        if bits == 0:
            return TrieState(generation, level, 0, None, None, None, rounds)
        return TrieState(generation, level, bits, words, est, std, rounds)

    def _check_level(self, level: int, bits: int) -> None:
        """The scheduled ``level`` exists and the survivors' ``bits`` can precede it: at a later level the
        previous level's bits; at level 0 none, the full values or any level's (a round that kept nothing)."""
        levels = self.pem.levels
        if level >= len(levels):
            raise ValueError(f"the trie state's level {level} is past the task's last, {len(levels) - 1}")
        allowed = {levels[level - 1].bits} if level else {0, self.full_bits, *(lv.bits for lv in levels)}
        if bits not in allowed:
            raise ValueError(f"the trie state's prefix_bits {bits} cannot precede level {level} "
                             f"(expected {' or '.join(map(str, sorted(allowed)))})")  # fmt: skip

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
        ended = 0 if following else 1
        new = TrieState(generation, following, lv.bits, words, f, std, state.round + ended)
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
        new = TrieState(generation, 0, self.full_bits, words, est, std, state.round + 1)
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


def layout_fingerprint(pem: PEM, context: Mapping[str, Any] | None = None) -> str:
    """A hash (32 hex digits) of what a trie state depends on: the PEM's resolved parameters (epsilon,
    ``B``, ``top_k``, candidates, search, rule, alpha, every level's bits, oracle, ``g`` and sketch) and
    ``context`` (the task's own keys, JSON values): searches that may step each other's states share it."""
    layout = {
        "epsilon": float(pem.epsilon), "max_length": int(pem.max_length), "top_k": int(pem.top_k),
        "candidates": int(pem.candidates), "search": pem.search, "rule": pem.rule, "alpha": pem.alpha,
        "levels": [dataclasses.asdict(lv) for lv in pem.levels],
    }  # fmt: skip
    text = json.dumps({"pem": layout, "context": dict(context or {})}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _short(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters (a value read from a file, in a one-line error)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: object) -> bool:
    """A JSON number (not a bool) of finite float value."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _hex_words(words: np.ndarray, bits: int) -> list[str]:
    """Each word's first ``bits`` bits as ``ceil(bits / 4)`` hexadecimal digits (the last one's unused
    bits zero)."""
    digits = (bits + 3) // 4
    raw = np.ascontiguousarray(words.astype(">u8")).view(np.uint8).reshape(words.shape[0], -1)
    return [row.tobytes().hex()[:digits] for row in raw]


def _words_of_hex(texts: object, bits: int, width: int) -> np.ndarray:
    """The words ``(n, width)`` of :func:`_hex_words`' strings, checked: digits, length, no bit set past
    ``bits``, no prefix twice."""
    if not isinstance(texts, list):
        raise ValueError("the trie state's words are a list of hexadecimal strings")
    digits = (bits + 3) // 4
    if digits > 16 * width:
        raise ValueError(f"the trie state's prefix_bits {bits} are more than the task's {64 * width}")
    for i, t in enumerate(texts):
        if not isinstance(t, str) or len(t) != digits or not _HEX.fullmatch(t):
            raise ValueError(f"the trie state's word {i} is not {digits} lower-case hexadecimal digits")
    pad = "0" * (16 * width - digits)
    raw = bytes.fromhex("".join(t + pad for t in texts))
    words = np.frombuffer(raw, dtype=">u8").reshape(len(texts), width).astype(np.uint64)
    if len(texts) and not np.array_equal(mask_prefix(words, bits), words):
        raise ValueError(f"a word of the trie state has bits set past its prefix_bits {bits}")
    if len(texts) and np.unique(words, axis=0).shape[0] != len(texts):
        raise ValueError("the trie state holds a prefix twice")
    return words


def _floats(values: object, n: int, name: str) -> np.ndarray:
    """``n`` finite numbers as float64, else ValueError naming the trie state's ``name``."""
    ok = isinstance(values, list) and len(values) == n
    ok = ok and all(_is_finite(v) for v in values)  # type: ignore[union-attr]
    if not ok:
        raise ValueError(f"the trie state's {name} are {n} finite numbers, one per word")
    return np.asarray(values, dtype=np.float64)
