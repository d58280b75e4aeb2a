"""The heavy_hitters kind's simulated population: one string per user, reported through the task's PEM.

Datasets:

* ``zipf-strings[:S[:M]]`` (default ``1.1:100000``): ``M`` distinct random strings of exactly
  ``max_length`` bytes over ``[a-z0-9]`` (fewer when ``36**max_length`` is smaller), drawn from the run's
  seed, user values Zipf(``S``) over them;
* ``csv:PATH:COLUMN``: every row's cell of ``COLUMN`` (a CSV file with a header row), as UTF-8 text; the
  number of users is the rows' (``--users N``: the first ``N``). A cell longer than ``max_length`` bytes is
  refused naming its row, unless the task says ``truncate``.

The truth (``truth.json``) holds the number of distinct values and every value of true frequency at least
:data:`TRUTH_MIN_FREQUENCY` (at most :data:`TRUTH_MAX_VALUES`, by descending frequency), each printed as
the rows print them (:func:`ldp.heavy_hitters.strings.escape_bytes`).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ldp.heavy_hitters.strings import StringBatch, encode_strings, escape_bytes
from ldp.kinds.heavy_hitters.aggregate import LevelValidator, encode_values
from ldp.kinds.heavy_hitters.task import HeavyHittersTask
from ldp.kinds.population import BadTemplate, Chunk, Population
from ldp.reports import Reports
from ldp.task import Task

__all__ = ["heavy_hitters_population", "heavy_hitters_template", "zipf_strings", "csv_strings",
           "TRUTH_MIN_FREQUENCY", "TRUTH_MAX_VALUES"]

ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
DEFAULT_EXPONENT = 1.1
DEFAULT_SUPPORT = 100_000
TRUTH_MIN_FREQUENCY = 1e-4
TRUTH_MAX_VALUES = 10_000


def _zipf_spec(dataset: str) -> tuple[float, int]:
    parts = dataset.split(":")[1:]
    if len(parts) > 2:
        raise ValueError(f"dataset {dataset!r}: expected zipf-strings[:S[:M]]")
    try:
        s = float(parts[0]) if parts and parts[0] else DEFAULT_EXPONENT
        m = int(parts[1]) if len(parts) > 1 else DEFAULT_SUPPORT
    except ValueError:
        raise ValueError(f"dataset {dataset!r}: S must be a number and M an integer") from None
    if not (np.isfinite(s) and s > 0) or m < 1:
        raise ValueError(f"dataset {dataset!r}: S must be > 0 and M >= 1")
    return s, m


def zipf_strings(max_length: int, support: int, rng: np.random.Generator) -> StringBatch:
    """``support`` distinct random strings of ``max_length`` bytes over ``[a-z0-9]`` (all of them when
    there are no more than ``support``), in a random order."""
    possible = ALPHABET.size ** max_length if max_length < 12 else None
    if possible is not None and possible <= support:
        idx = np.arange(possible)
        digits = (idx[:, None] // ALPHABET.size ** np.arange(max_length)[None, :]) % ALPHABET.size
        data = ALPHABET[digits]
        data = data[rng.permutation(possible)]
    else:
        data = np.zeros((0, max_length), dtype=np.uint8)
        while data.shape[0] < support:
            more = ALPHABET[rng.integers(0, ALPHABET.size, size=(2 * support, max_length))]
            data = np.unique(np.concatenate([data, more]), axis=0)
        data = data[rng.permutation(data.shape[0])[:support]]
    return StringBatch(np.ascontiguousarray(data, dtype=np.uint8),
                       np.full(data.shape[0], max_length, dtype=np.int64), max_length)


def csv_strings(dataset: str, max_length: int, truncate: bool) -> StringBatch:
    """Every row's cell of the ``PATH:COLUMN`` of a ``csv:`` spec.

    Raises:
        ValueError: an unreadable file, a missing column, no rows, or a cell longer than ``max_length``
            bytes without ``truncate`` (naming its row).
    """
    path, sep, column = dataset.partition(":")[2].rpartition(":")
    if not sep or not path or not column:
        raise ValueError(f"dataset {dataset!r}: expected csv:PATH:COLUMN")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if column not in (reader.fieldnames or ()):
                raise ValueError(f"dataset {dataset!r}: no column {column!r} (has {reader.fieldnames})")
            cells = [row[column] or "" for row in reader]
    except OSError as exc:
        raise ValueError(f"dataset {dataset!r}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset {dataset!r}: {path} is not UTF-8 ({exc.reason})") from None
    if not cells:
        raise ValueError(f"dataset {dataset!r}: no rows")
    if not truncate:
        long = next((i for i, c in enumerate(cells) if len(c.encode("utf-8")) > max_length), None)
        if long is not None:
            size = len(cells[long].encode("utf-8"))
            raise ValueError(f"dataset {dataset!r}: row {long + 2} has {size} bytes, more than the task's "
                             f"max_length {max_length} (or set \"truncate\": true in the task)")
    return encode_strings(cells, max_length, truncate=truncate)


def _level_zero(block: int) -> int:
    return 0


class _StringPopulation:
    """Users of a heavy_hitters task: a value index per user into a table of distinct strings."""

    def __init__(self, task: HeavyHittersTask, users: int | None, dataset: str, ss: np.random.SeedSequence,
                 batch_size: int) -> None:
        self.task, self.dataset, self.batch_size = task, dataset, batch_size
        #: trie mode: block ``k``'s clients report at ``level_of(k)``, called when the block is encoded
        #: (default level 0, what clients without a publication send; the simulator's ``--trie`` sets it)
        self.level_of: Callable[[int], int] | None = _level_zero if task.mode == "trie" else None
        _, self.r_val, self.r_enc, self.time_rng, self.bad_rng = (
            np.random.default_rng(s) for s in ss.spawn(5)
        )
        # the strings depend on the run's entropy only: every segment of a stream (a child of the run's
        # seed sequence) draws the same table (for a fresh sequence, the same as its own first child)
        r_table = np.random.default_rng(np.random.SeedSequence(ss.entropy).spawn(1)[0])
        name = dataset.partition(":")[0]
        if name == "zipf-strings":
            if users is None:
                raise ValueError(f"dataset {dataset!r} needs a number of users (only csv: data defines them)")
            s, m = _zipf_spec(dataset)
            self.table = zipf_strings(task.max_length, m, r_table)
            w = 1.0 / np.arange(1, len(self.table) + 1, dtype=np.float64) ** s
            self.probs: np.ndarray | None = w / w.sum()
            self.rows: np.ndarray | None = None
            self.n_users = int(users)
        elif name == "csv":
            batch = csv_strings(dataset, task.max_length, task.truncate)
            table, inverse = np.unique(batch.words(), axis=0, return_inverse=True)
            self.table = StringBatch.from_words(table, task.max_length)[0]
            self.rows = inverse.ravel().astype(np.int64)
            if users is not None:
                if users > self.rows.size:
                    raise ValueError(f"dataset {dataset!r}: {self.rows.size} rows, {users} users asked for")
                self.rows = self.rows[:users]
            self.probs = None
            self.n_users = int(self.rows.size)
        else:
            raise ValueError(f"unknown heavy_hitters dataset {dataset!r}: zipf-strings[:S[:M]] or "
                             "csv:PATH:COLUMN")
        self.counts = np.zeros(len(self.table), dtype=np.int64)

    def _values(self, lo: int, hi: int) -> np.ndarray:
        if self.rows is not None:
            return self.rows[lo:hi]
        assert self.probs is not None
        return self.r_val.choice(self.probs.size, size=hi - lo, p=self.probs)

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Chunk]]:
        for start in range(0, self.n_users, self.batch_size):
            stop = min(self.n_users, start + self.batch_size)
            idx = self._values(start, stop)
            self.counts += np.bincount(idx, minlength=self.counts.size)
            batch = StringBatch(self.table.data[idx], self.table.lengths[idx], self.task.max_length)
            if self.level_of is None:
                reports, groups = encode_values(self.task, batch, self.r_enc)
            k = int(np.searchsorted(bounds, start, side="right")) - 1
            while k < len(bounds) - 1 and bounds[k] < stop:
                lo, hi = max(int(bounds[k]), start), min(int(bounds[k + 1]), stop)
                if lo < hi:
                    rows = slice(lo - start, hi - start)
                    if self.level_of is None:
                        yield k, Chunk(slice(lo, hi), reports.take(rows), groups[rows])
                    else:  # trie mode: the block's level, read when the block is encoded
                        part = StringBatch(batch.data[rows], batch.lengths[rows], batch.max_length)
                        r, g = encode_values(self.task, part, self.r_enc, level=self.level_of(k))
                        yield k, Chunk(slice(lo, hi), r, g)
                k += 1

    def truth(self) -> dict[str, Any]:
        freq = self.counts / max(1, self.n_users)
        order = np.argsort(-freq, kind="stable")
        order = order[freq[order] >= TRUTH_MIN_FREQUENCY][:TRUTH_MAX_VALUES]
        values = self.table.values()
        return {
            "mechanism": "pem",
            "distinct": int(np.count_nonzero(self.counts)),
            "min_frequency": TRUTH_MIN_FREQUENCY,
            "heavy_hitters": [{"value": escape_bytes(values[i]), "frequency": float(freq[i])} for i in order],
        }

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


def heavy_hitters_population(task: Task, users: int | None, dataset: str, ss: np.random.SeedSequence, *,
                             batch_size: int, assignment: str) -> Population:
    assert isinstance(task, HeavyHittersTask)
    return _StringPopulation(task, users, dataset, ss, batch_size)


def heavy_hitters_template(task: Task) -> BadTemplate:
    """Level 0's validator and well-formed level-0 reports (an output of the level's range and a random
    seed: what a report of any value looks like to anyone without it)."""
    assert isinstance(task, HeavyHittersTask)
    level = task.make_mechanism().levels[0]

    def encode(k: int, rng: np.random.Generator) -> Reports:
        return Reports(values=rng.integers(0, level.g, k).astype(np.int64),
                       seeds=rng.integers(0, 2**63, k, dtype=np.uint64))

    return LevelValidator(level), 0, encode
