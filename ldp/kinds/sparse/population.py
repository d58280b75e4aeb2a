"""The sparse kind's simulated population: one k-sparse vector per client (``ldp.datasets.sparse``),
encoded in chunks by the task's mechanism.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ldp.datasets.sparse import sample_sparse
from ldp.kinds.population import MAX_TRUTH_DOMAIN, BadTemplate, Chunk, Population
from ldp.kinds.sparse.aggregate import SparseValidator, encode_population, to_reports
from ldp.reports import Reports
from ldp.sparse.vectors import SparseVectors
from ldp.task import Task

__all__ = ["sparse_population", "sparse_template"]


class _SparsePopulation:
    """Clients of a sparse-vector task: one k-sparse vector each (:func:`ldp.datasets.sparse.sample_sparse`;
    ``users`` None for ``csv:`` data: every client of the file), encoded in chunks
    (:func:`ldp.kinds.sparse.aggregate.encode_population`, one spawned stream per block)."""

    def __init__(self, task: Any, users: int | None, dataset: str, ss: np.random.SeedSequence) -> None:
        self.task, self.dataset = task, dataset
        r_vec, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in ss.spawn(3))
        self._ss_reports = ss.spawn(1)[0]
        vec = sample_sparse(dataset, users, task.domain_size, task.sparsity, r_vec)
        if task.values == "binary":  # a binary round: every non-zero coordinate is a 1
            vec = SparseVectors(vec.indptr, vec.items, np.ones_like(vec.values))
        self.vectors, self.n_users = vec, int(vec.n)
        self.mech = task.make_mechanism()
        self.stats: Any = None

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Chunk]]:
        streams = self._ss_reports.spawn(len(bounds) - 1)
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo >= hi:
                continue
            part = self.vectors.take(slice(lo, hi))
            start = lo
            for reports, stats in encode_population(self.mech, part, rng=streams[k]):
                self.stats = stats if self.stats is None else self.stats.merge(stats)
                yield k, Chunk(slice(start, start + len(reports)), reports, 0)
                start += len(reports)

    def truth(self) -> dict[str, Any]:
        """The true mean vector of the clients' vectors (values clipped to [-1, 1] as the encoder does)."""
        import dataclasses as _dc

        vec, d = self.vectors, self.task.domain_size
        vals = np.clip(vec.values, -1.0, 1.0)
        out: dict[str, Any] = {
            "mechanism": self.task.mechanism,
            "domain_size": d,
            "sparsity": self.task.sparsity,
            "privacy": self.task.privacy,
            "report_bits": int(self.mech.report_bits),
            "encode_stats": None if self.stats is None else _dc.asdict(self.stats),
        }
        if d <= MAX_TRUTH_DOMAIN:
            total = np.bincount(vec.items.astype(np.int64), weights=vals, minlength=d)
            out["mean"] = (total / self.n_users).tolist()
        else:  # too long for JSON: the support of the mean and its values
            items, inv = np.unique(vec.items, return_inverse=True)
            total = np.bincount(inv, weights=vals, minlength=len(items))
            out["mean_items"] = items.tolist()
            out["mean_values"] = (total / self.n_users).tolist()
        return out

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


def sparse_population(
    task: Task,
    users: int | None,
    dataset: str,
    ss: np.random.SeedSequence,
    *,
    batch_size: int,
    assignment: str,
) -> Population:
    return _SparsePopulation(task, users, dataset, ss)


def sparse_template(task: Task) -> BadTemplate:
    """The sparse mechanism's validator and reports of empty vectors."""
    mech = task.make_mechanism()  # type: ignore[attr-defined]
    validator = SparseValidator(mech)

    def encode(k: int, rng: np.random.Generator) -> Reports:
        empty = SparseVectors(np.zeros(k + 1, np.int64), np.zeros(0, np.uint64), np.zeros(0))
        return to_reports(mech, mech.encode(empty, rng=rng)[0])

    return validator, 0, encode
