"""The batch-query kind's simulated population (central DP): each user's raw record
(``ldp.datasets.multi``), sent as ``items``; not an LDP report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ldp.datasets.multi import sample_records
from ldp.kinds.batch_queries.aggregate import CellValidator
from ldp.kinds.population import RECORDS_FILE, BadTemplate, Chunk, Population, records_dtype
from ldp.reports import Reports
from ldp.task import Task

__all__ = ["batch_population", "batch_template"]


class _BatchPopulation:
    """Users of a batch-query task (CENTRAL DP): each user's *raw* record, written as ``items`` (one
    coordinate per attribute); these are not LDP reports, the trusted aggregator adds the noise."""

    def __init__(self, task: Any, users: int, dataset: str, ss: np.random.SeedSequence) -> None:
        self.task, self.n_users, self.dataset = task, users, dataset
        r_rec, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in ss.spawn(3))
        names = task.attribute_names
        recs = sample_records(dataset, users, task.domain_sizes, attribute_names=names, rng=r_rec)
        self.records = np.asarray(recs, dtype=np.int64)

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Chunk]]:
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo < hi:
                yield k, Chunk(slice(lo, hi), Reports(items=self.records[lo:hi]), 0)

    def truth(self) -> dict[str, Any]:
        cells = np.ravel_multi_index(tuple(self.records.T), self.task.domain_sizes)
        counts = np.bincount(cells, minlength=self.task.n_cells)
        return {
            "mechanism": self.task.mechanism,
            "privacy_model": "central-dp (raw records for a trusted aggregator)",
            "attributes": [{"name": a.name, "domain_size": a.domain_size} for a in self.task.attributes],
            "cell_counts": counts.tolist(),
        }

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        np.save(out / RECORDS_FILE, self.records.astype(records_dtype(self.task.domain_sizes)))
        return {"records_file": RECORDS_FILE}


def batch_population(
    task: Task, users: int, dataset: str, ss: np.random.SeedSequence, *, batch_size: int, assignment: str
) -> Population:
    return _BatchPopulation(task, users, dataset, ss)


def batch_template(task: Task) -> BadTemplate:
    """The cell validator (central DP: raw cells, no oracle)."""
    cells = CellValidator(task)  # type: ignore[arg-type]
    return cells, 0, lambda k, rng: Reports(items=np.zeros((k, cells.k), np.int64))
