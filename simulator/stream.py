"""A live stream of report files for a watched directory, at a given rate (``ldp-beam simulate --follow``).

Simulated clients of any kind report at ``rate`` reports per second; every ``file_reports`` reports make
one Avro file, written when its last report is due (file ``j`` at ``start + (reports up to j) / rate``,
monotonic clock; a writer that falls behind writes the late files at once), with event times spread evenly
over the wall-clock span since the previous file (a shuffled task's rounded down, as its clients send
them). Each file is written under a hidden temporary name, synced, linked into place under a name no
other file has (``reports-<run>-<seq>.avro``, ``<run>`` the UTC start time) and only then given its
``PATH.done`` marker: a job reading the directory with ``--require_done_marker`` (or without it) never sees
half a file.

The stream ends when ``duration_s`` seconds have passed (no file due later is written), when ``users``
reports were written, or when :class:`Stop` is requested (a signal, :func:`stop_on_signals`): a file
being written is finished with its marker first, a file not yet due is not written. Users are drawn in
segments of about :data:`SEGMENT_REPORTS` (each segment a fresh population from the run's seed
sequence), so memory stays bounded however long the stream runs. No ``truth.json``: a stream has no end
at which the truth is known.

A trie-mode heavy_hitters task's clients report at the level of the newest publication in ``trie_dir``
(level 0 without one), read when each file is written, after its wait (:func:`trie_file_batches`: the
file's users are drawn and encoded then), so a file follows the publication of the window before it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import fastavro
import numpy as np

import schemas
from ldp.reports import Reports
from ldp.task import Task
from simulator.population import TrieLevels, client_times, dataset_defines_users, make_population
from wire.encode import write_reports

__all__ = [
    "DONE_SUFFIX",
    "SEGMENT_REPORTS",
    "Clock",
    "FileBatch",
    "LazyFileBatch",
    "FollowPlan",
    "FollowSummary",
    "Stop",
    "file_batches",
    "trie_file_batches",
    "follow",
    "spread_ms",
    "stop_on_signals",
    "write_done_file",
]

#: The marker written next to a finished report file (``f.avro`` -> ``f.avro.done``); the watched-directory
#: source (``transforms.io.DONE_SUFFIX``) reads the same convention.
DONE_SUFFIX = ".done"
#: Users drawn per population segment (rounded up to whole files).
SEGMENT_REPORTS = 1 << 16
_STOP_POLL_S = 0.05


class Clock(Protocol):
    """What the stream reads of time: ``time.time``, ``time.monotonic`` and ``time.sleep``."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class Stop:
    """A request to stop the stream. :meth:`request` only assigns an attribute, so a signal handler may
    call it at any point of the main thread; :meth:`wait` sleeps in short slices and wakes on a request."""

    def __init__(self, clock: Clock = time) -> None:
        self.reason: str | None = None
        self._clock = clock

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def is_set(self) -> bool:
        return self.reason is not None

    def wait(self, seconds: float) -> bool:
        """Sleeps up to ``seconds``; True as soon as a stop is requested (also when already requested)."""
        deadline = self._clock.monotonic() + max(0.0, seconds)
        while not self.is_set():
            left = deadline - self._clock.monotonic()
            if left <= 0:
                break
            self._clock.sleep(min(_STOP_POLL_S, left))
        return self.is_set()


@contextlib.contextmanager
def stop_on_signals(stop: Stop) -> Iterator[Stop]:
    """Within the block, SIGINT (Ctrl-C) and SIGTERM request ``stop`` instead of ending the process; the
    previous handlers are restored afterwards (main thread only, as Python's signal module requires)."""

    def handler(signum: int, _frame: Any) -> None:
        stop.request(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@dataclass(frozen=True)
class FollowPlan:
    """The pace of a stream: ``rate`` reports per second, ``file_reports`` per file, ending after
    ``duration_s`` seconds and/or ``users`` reports (None: no such bound)."""

    rate: float
    file_reports: int
    duration_s: float | None = None
    users: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate must be a positive number of reports per second, got {self.rate}")
        if self.file_reports < 1:
            raise ValueError(f"file_reports must be >= 1, got {self.file_reports}")
        if self.users is not None and self.users < 1:
            raise ValueError(f"users must be >= 1, got {self.users}")
        if self.duration_s is not None:
            if not (math.isfinite(self.duration_s) and self.duration_s > 0):
                raise ValueError(f"duration must be > 0 seconds, got {self.duration_s}")
            if self.duration_s < self.file_seconds:
                raise ValueError(
                    f"duration {self.duration_s:g} s is shorter than one file's span "
                    f"({self.file_seconds:g} s: {self.file_reports} reports per file at {self.rate:g} "
                    "reports/s); no file would be written"
                )

    @property
    def file_seconds(self) -> float:
        """The span of one full file."""
        return self.file_reports / self.rate

    def due_s(self, reports: int) -> float:
        """Seconds after the start at which the file ending with report number ``reports`` is due."""
        return reports / self.rate

    def in_time(self, reports: int) -> bool:
        """Whether a file ending with report number ``reports`` falls within the duration."""
        return self.duration_s is None or self.due_s(reports) <= self.duration_s + 1e-9


@dataclass
class FileBatch:
    """The reports of one file: ``n`` reports in ``(reports, groups, positions)`` chunks, ``positions``
    indexing the file's ``n`` event times."""

    n: int = 0
    chunks: list[tuple[Reports, int | np.ndarray, np.ndarray]] = field(default_factory=list)


_Chunks = list[tuple[Reports, int | np.ndarray, np.ndarray]]


class LazyFileBatch:
    """A file of ``n`` reports whose chunks are made when first read (:attr:`chunks`): a trie-mode
    client's level is the one published when its file is written."""

    def __init__(self, n: int, make: Callable[[], _Chunks]) -> None:
        self.n = n
        self._make = make
        self._chunks: _Chunks | None = None

    @property
    def chunks(self) -> _Chunks:
        if self._chunks is None:
            self._chunks = self._make()
        return self._chunks


def _positions(users: slice | np.ndarray, base: int) -> np.ndarray:
    if isinstance(users, slice):
        return np.arange(users.start - base, users.stop - base, dtype=np.int64)
    return np.asarray(users, dtype=np.int64) - base


def file_batches(
    task: Task,
    plan: FollowPlan,
    dataset: str | None,
    seed: int | None,
    *,
    assignment: str = "random",
    batch_size: int = 1 << 18,
) -> Iterator[FileBatch]:
    """The stream's files, in order: populations of about :data:`SEGMENT_REPORTS` users (fresh seeds from
    ``seed``'s sequence) cut into files of ``plan.file_reports``; ends after ``plan.users`` reports, or
    after the dataset's own users when it defines them (sparse ``csv:`` data), else never."""
    for pop in _segments(task, plan, dataset, seed, batch_size=batch_size, assignment=assignment):
        bounds = _file_bounds(pop, plan)
        batch, current = FileBatch(), 0
        for k, chunk in pop.chunks(bounds):
            if k != current:
                yield batch
                batch, current = FileBatch(), k
            batch.chunks.append((chunk.reports, chunk.groups, _positions(chunk.users, int(bounds[k]))))
            batch.n = int(bounds[k + 1] - bounds[k])
        if batch.chunks:
            yield batch


def _segments(task: Task, plan: FollowPlan, dataset: str | None, seed: int | None, **population: Any
              ) -> Iterator[Any]:
    """The stream's populations, in order: about :data:`SEGMENT_REPORTS` users each (a whole number of
    files; fresh seeds from ``seed``'s sequence) until ``plan.users``, or the dataset's own users when it
    defines them, else without end. ``population``: :func:`make_population`'s keyword options."""
    root = np.random.SeedSequence(seed)
    segment = plan.file_reports * max(1, math.ceil(SEGMENT_REPORTS / plan.file_reports))
    own_users = plan.users is None and dataset_defines_users(task, dataset)
    left = plan.users
    while left is None or left > 0:
        size = None if own_users else (segment if left is None else min(segment, left))
        pop = make_population(task, size, dataset, seed=root.spawn(1)[0], **population)
        yield pop
        if own_users:
            return
        if left is not None:
            left -= pop.n_users


def _file_bounds(pop: Any, plan: FollowPlan) -> np.ndarray:
    """The first user of each file of ``pop`` and its end."""
    return np.append(np.arange(0, pop.n_users, plan.file_reports, dtype=np.int64), pop.n_users)


def trie_file_batches(task: Task, plan: FollowPlan, dataset: str | None, seed: int | None,
                      levels: TrieLevels) -> Iterator[LazyFileBatch]:
    """The stream's files for a trie-mode task, as :func:`file_batches` cuts them, each encoded when it is
    written at the level ``levels`` reads then (the population's blocks are the files)."""
    for pop in _segments(task, plan, dataset, seed, batch_size=plan.file_reports):
        pop.level_of = levels  # the heavy_hitters population's hook
        bounds = _file_bounds(pop, plan)
        blocks = pop.chunks(bounds)
        for k in range(len(bounds) - 1):
            make = functools.partial(_next_file, blocks, k, int(bounds[k]))
            yield LazyFileBatch(int(bounds[k + 1] - bounds[k]), make)


def _next_file(blocks: Iterator[tuple[int, Any]], k: int, base: int) -> _Chunks:
    got, chunk = next(blocks)  # one block per file: the population's batch_size is the file's
    assert got == k, "the files are written in order"
    return [(chunk.reports, chunk.groups, _positions(chunk.users, base))]


def spread_ms(start_ms: int, end_ms: int, n: int) -> np.ndarray:
    """``n`` sorted event times spread evenly over ``[start_ms, end_ms)`` (all ``start_ms`` when the span
    is empty)."""
    span = max(0, int(end_ms) - int(start_ms))
    return int(start_ms) + (np.arange(n, dtype=np.int64) * span) // max(n, 1)


def write_done_file(
    out: Path, name: str, task: Task, batch: FileBatch | LazyFileBatch, event_ms: np.ndarray,
    codec: str = "null",
) -> Path:
    """Writes one report file: a hidden temporary file, synced, hard-linked to ``out/name`` (refusing to
    replace an existing file), then the ``name.done`` marker. Returns the file's path."""
    final = out / name
    tmp = out / f".{name}.part"
    with open(tmp, "wb") as fh:
        writer = fastavro.write.Writer(fh, schemas.report_schema(), codec=codec, sync_interval=1 << 20)
        for reports, groups, pos in batch.chunks:
            write_reports(
                fh, writer, task.task_id, reports, event_ms[pos], groups, task.schema_version, codec
            )
        writer.flush()
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise FileExistsError(f"{final} exists: another writer uses the same file names in {out}") from None
    finally:
        tmp.unlink()
    with open(str(final) + DONE_SUFFIX, "xb") as marker:
        os.fsync(marker.fileno())
    return final


@dataclass
class FollowSummary:
    """What a stream wrote and why it ended (``reason``: ``duration``, ``users``, or the stop request's,
    e.g. ``SIGTERM``)."""

    output: str
    files: int = 0
    reports: int = 0
    seconds: float = 0.0
    reason: str = ""
    last_file: str | None = None
    #: trie mode: files written per level
    trie_levels: dict[int, int] | None = None

    def line(self, task: Task) -> str:
        rate = self.reports / self.seconds if self.seconds > 0 else 0.0
        levels = ""
        if self.trie_levels is not None:
            per = ", ".join(f"{k}: {v}" for k, v in sorted(self.trie_levels.items()))
            levels = f"; files per trie level {per}"
        return (
            f"follow: wrote {self.files:,} files, {self.reports:,} {task.kind} reports ({task.mechanism}) to "
            f"{self.output} in {self.seconds:.1f} s ({rate:,.0f} reports/s); ended by {self.reason}{levels}"
        )


def _run_id(wall_s: float) -> str:
    return dt.datetime.fromtimestamp(wall_s, dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def follow(
    task: Task,
    output: str | Path,
    plan: FollowPlan,
    *,
    dataset: str | None = None,
    seed: int | None = None,
    assignment: str = "random",
    codec: str = "null",
    stop: Stop | None = None,
    clock: Clock = time,
    trie_dir: str | Path | None = None,
) -> FollowSummary:
    """Writes the stream of ``plan`` into ``output`` (created when missing; files already there are left
    alone) until it ends; returns what it wrote. A trie-mode task's files are encoded at the level
    published in ``trie_dir`` when each is written (level 0 without one)."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    stop = stop or Stop(clock)
    t0, prev_ms = clock.monotonic(), int(clock.time() * 1000)
    run = _run_id(prev_ms / 1000)
    summary = FollowSummary(str(out), reason="users")
    batches: Iterator[FileBatch] | Iterator[LazyFileBatch]
    levels = None
    if trie_dir is not None or getattr(task, "mode", None) == "trie":
        levels = TrieLevels(task, trie_dir, per_block=False)
        batches = trie_file_batches(task, plan, dataset, seed, levels)
    else:
        batches = file_batches(task, plan, dataset, seed, assignment=assignment)
    for batch in batches:
        due = plan.due_s(summary.reports + batch.n)
        if not plan.in_time(summary.reports + batch.n):
            summary.reason = "duration"
            break
        if stop.wait(t0 + due - clock.monotonic()):
            break
        now_ms = int(clock.time() * 1000)
        times = client_times(task, spread_ms(prev_ms, now_ms, batch.n))
        name = f"reports-{run}-{summary.files:06d}.avro"
        summary.last_file = str(write_done_file(out, name, task, batch, times, codec))
        summary.files, summary.reports, prev_ms = summary.files + 1, summary.reports + batch.n, now_ms
        if stop.is_set():
            break
    if stop.is_set():
        summary.reason = stop.reason or "stop"
    if levels is not None:
        summary.trie_levels = dict(levels.used)
    summary.seconds = clock.monotonic() - t0
    return summary
