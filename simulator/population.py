"""The simulated clients of a task: its kind's population, event times and the truth files.

:func:`make_population` finds the population of any registered kind through the registry
(``ldp.kinds``: ``population``, ``default_dataset``, ``assignments``, ``users_from_dataset``); the
populations themselves (values, groups, reports) belong to the kinds. Event times are milliseconds since
the epoch; a shuffled task's clients round theirs down (:func:`client_times`).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ldp.kinds import kind_of
from ldp.task import Task

if TYPE_CHECKING:  # the kinds' population protocol (annotations only)
    from ldp.kinds.population import Population

__all__ = [
    "ASSIGNMENTS",
    "DEFAULT_START",
    "base_truth",
    "client_times",
    "event_times",
    "load_truth_records",
    "make_population",
    "parse_iso8601_ms",
    "sample_group",
    "TrieLevels",
]

DEFAULT_START = "2026-01-01T00:00:00Z"
ASSIGNMENTS = ("random", "balanced", "user_id")


def parse_iso8601_ms(text: str) -> int:
    """ISO-8601 time (``Z`` or offset; naive means UTC) -> milliseconds since the epoch."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(round(t.timestamp() * 1000))


def make_population(
    task: Task,
    users: int | None,
    dataset: str | None = None,
    *,
    seed: int | np.random.SeedSequence | None = None,
    batch_size: int = 1 << 18,
    assignment: str = "random",
) -> Population:
    """The simulated clients of ``task`` (any registered kind: its ``population``, ``ldp.kinds``).
    ``dataset`` None: the kind's default (zipf for frequency tasks, gaussian for range tasks, ...).
    ``seed``: the run's SeedSequence entropy (None: OS). ``users`` None: only for datasets that define
    their users (the kind's ``users_from_dataset``, e.g. sparse ``csv:`` data)."""
    kind = kind_of(task)
    if kind.population is None:
        raise ValueError(f"task {task.task_id!r}: no simulator for {task.kind!r} tasks")
    dataset = dataset or kind.default_dataset
    if dataset is None:
        raise ValueError(f"task {task.task_id!r}: the {task.kind} kind names no default dataset")
    if users is None and not dataset_defines_users(task, dataset):
        raise ValueError(f"a {task.kind} task needs a number of users (--users)")
    if users is not None and users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    if assignment not in kind.assignments:
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")
        allowed = ", ".join(kind.assignments)
        raise ValueError(f"assignment {assignment!r} applies to range tasks ({task.kind} tasks: {allowed})")
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return kind.population(task, users, dataset, ss, batch_size=batch_size, assignment=assignment)


def dataset_defines_users(task: Task, dataset: str | None) -> bool:
    """Whether ``dataset`` fixes the number of users of ``task`` (its kind's ``users_from_dataset``
    prefix, e.g. sparse ``csv:`` data: one user per row)."""
    own = kind_of(task).users_from_dataset
    return bool(own and (dataset or "").startswith(own))


def load_truth_records(directory: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    """``(truth dict, records int64 array (n, d))`` of a range task's simulation directory."""
    d = Path(directory)
    truth = json.loads((d / "truth.json").read_text(encoding="utf-8"))
    if "records_file" not in truth:
        raise ValueError(f"{d}: not a range-task simulation (truth.json has no records_file)")
    return truth, np.load(d / truth["records_file"]).astype(np.int64)


def event_times(rng: np.random.Generator, n: int, start_ms: int, duration_s: float) -> np.ndarray:
    """``n`` sorted event times drawn uniformly from ``[start_ms, start_ms + duration_s)``."""
    return np.sort(start_ms + np.floor(rng.random(n) * duration_s * 1000).astype(np.int64))


def client_times(task: Task, event_ms: np.ndarray) -> np.ndarray:
    """The event times a client of ``task`` puts in its reports: a shuffled task's
    (``anonymity.shuffled``) rounded down to ``anonymity.time_precision_s``, any other's unchanged."""
    settings = getattr(task, "anonymity", None)
    if settings is None or not settings.shuffled:
        return event_ms
    return settings.round_ms(event_ms)


def base_truth(task: Task, pop: Population, dataset: str | None, seed: Any) -> dict[str, Any]:
    """The entries of ``truth.json`` every kind shares (task, kind, users, dataset, seed)."""
    return {
        "task_id": task.task_id,
        "kind": task.kind,
        "n_users": int(pop.n_users),
        "dataset": getattr(pop, "dataset", dataset),
        "seed": seed if not isinstance(seed, np.random.SeedSequence) else None,
    }


class TrieLevels:
    """The level a trie-mode task's simulated clients report at, read from the publication directory
    (:func:`wire.client.published_level`; level 0 without a publication, or without a directory) each time
    a block of clients is encoded: once per block when ``per_block`` (a file of a batch simulation, which
    may be encoded in pieces), else at every call (a stream, one call per file). :attr:`used` counts the
    blocks per level.

    Raises:
        ValueError: a task that is not in trie mode (its clients draw their levels at random).
    """

    def __init__(self, task: Task, directory: str | Path | None, *, per_block: bool = True) -> None:
        if getattr(task, "mode", None) != "trie":
            raise ValueError(f"task {task.task_id!r} is not a trie-mode task (\"mode\": \"trie\"): its "
                             "clients draw their levels at random, no publication applies")
        self.task, self.directory, self.per_block = task, directory, per_block
        self.blocks: dict[int, int] = {}
        self.used: dict[int, int] = {}

    def __call__(self, block: int) -> int:
        from wire.client import published_level

        if self.per_block and block in self.blocks:
            return self.blocks[block]
        level = published_level(self.task, None if self.directory is None else str(self.directory))
        self.blocks[block] = level
        self.used[level] = self.used.get(level, 0) + 1
        return level


def sample_group(task: Task) -> tuple[Any, int, Any]:
    """``(oracle, group, encode(k, rng) -> Reports)`` of one group of the task, for bad-record templates
    (the kind's ``bad_template``, ``ldp.kinds``)."""
    kind = kind_of(task)
    if kind.bad_template is None:
        raise ValueError(f"task {task.task_id!r}: {task.kind} tasks have no bad-record template")
    return kind.bad_template(task)
