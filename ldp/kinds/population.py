"""What every kind's simulated population gives the simulator (numpy only, no Beam).

A population (``ldp.kinds.<kind>.population``) makes the users' values (:mod:`ldp.datasets`) and their
reports (the task's oracle or mechanism ``encode``) and yields them in :class:`Chunk`\\ s of report blocks,
which the simulator writes or publishes. Each kind's registry entry (:mod:`ldp.kinds`) names its
population factory (``(task, users, dataset, seed_sequence, *, batch_size, assignment)``) and its
bad-record template (:data:`BadTemplate`: ``(validator, group, encode(k, rng))``, the valid reports the
dead-letter demonstration spoils).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from ldp.reports import Reports
from ldp.task import Task

__all__ = ["Chunk", "Population", "BadTemplate", "RECORDS_FILE", "MAX_TRUTH_DOMAIN", "records_dtype"]

RECORDS_FILE = "truth_records.npy"
#: Largest universe d for which truth.json holds the whole true mean vector (else only its support).
MAX_TRUTH_DOMAIN = 1_000_000
#: ``(validator, group, encode(k, rng) -> Reports)``: valid reports of one group, for bad-record variants.
BadTemplate = tuple[Any, int, Callable[[int, np.random.Generator], Reports]]


class Chunk(NamedTuple):
    """Reports of some users of one block (a file, a message): ``users`` indexes the population (a slice
    or increasing indices; it selects the users' event times), ``groups`` is one group or one per user."""

    users: slice | np.ndarray
    reports: Reports
    groups: int | np.ndarray


class Population(Protocol):
    """A simulated population of one task's clients (see :func:`make_population`)."""

    task: Task
    n_users: int
    time_rng: np.random.Generator
    bad_rng: np.random.Generator

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Chunk]]:
        """``(block k, chunk)`` for the users ``[bounds[k], bounds[k + 1])`` of every block, in user order."""
        ...

    def truth(self) -> dict[str, Any]:
        """The ground truth (valid once :meth:`chunks` has been consumed)."""
        ...

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        """Writes any ground truth beyond ``truth.json``; returns the entries to add to it."""
        ...


def records_dtype(domain_sizes: Sequence[int]) -> np.dtype:
    """The smallest unsigned integer type that holds every value of the domains (truth record files)."""
    top = max(domain_sizes) - 1
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)
