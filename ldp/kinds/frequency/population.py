"""The frequency kind's simulated population: values from ``ldp.datasets`` (``zipf[:S]``, ``uniform``,
``csv:PATH:COLUMN``), encoded by the task's oracle in batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ldp.datasets import iter_population
from ldp.kinds.frequency.task import FrequencyTask
from ldp.kinds.population import BadTemplate, Chunk, Population
from ldp.task import Task

__all__ = ["frequency_population", "frequency_template"]


class _FrequencyPopulation:
    """Users of a frequency task, generated in numpy batches of ``batch_size`` (memory stays bounded)."""

    def __init__(
        self, task: FrequencyTask, users: int, dataset: str, ss: np.random.SeedSequence, batch_size: int
    ) -> None:
        self.task, self.n_users, self.dataset, self.batch_size = task, users, dataset, batch_size
        self.oracle = task.make_oracle()
        self.r_val, self.r_enc, self.time_rng, self.r_grp, self.bad_rng = (
            np.random.default_rng(s) for s in ss.spawn(5)
        )
        self.counts = np.zeros(self.oracle.d, dtype=np.int64)

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Chunk]]:
        d, n_groups = self.oracle.d, self.task.n_groups
        done = 0
        batches = iter_population(
            self.dataset, self.n_users, d, batch_size=self.batch_size, rng=self.r_val, labels=self.task.labels
        )
        for values in batches:
            m = len(values)
            self.counts += np.bincount(values, minlength=d)
            reports = self.oracle.encode(values, rng=self.r_enc)
            groups = self.r_grp.integers(0, n_groups, m) if n_groups > 1 else np.zeros(m, np.int64)
            k = int(np.searchsorted(bounds, done, side="right")) - 1
            while k < len(bounds) - 1 and bounds[k] < done + m:
                lo, hi = max(int(bounds[k]), done), min(int(bounds[k + 1]), done + m)
                if lo < hi:
                    rows = slice(lo - done, hi - done)
                    yield k, Chunk(slice(lo, hi), reports.take(rows), groups[rows])
                k += 1
            done += m

    def truth(self) -> dict[str, Any]:
        return {"mechanism": self.oracle.name, "frequencies": (self.counts / self.n_users).tolist()}

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


def frequency_population(
    task: Task, users: int, dataset: str, ss: np.random.SeedSequence, *, batch_size: int, assignment: str
) -> Population:
    assert isinstance(task, FrequencyTask)
    return _FrequencyPopulation(task, users, dataset, ss, batch_size)


def frequency_template(task: Task) -> BadTemplate:
    """The task's oracle and group 0."""
    oracle = task.make_oracle()
    return oracle, 0, lambda k, rng: oracle.encode(rng.integers(0, oracle.d, k), rng=rng)
