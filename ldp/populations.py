"""Simulated populations of clients, one per built-in kind of task (numpy only, no Beam).

A population makes the users' values (``ldp.datasets``, ``ldp.datasets.multi``, ``ldp.datasets.sparse``)
and their reports (the task's oracle or mechanism ``encode``) and yields them in :class:`Chunk`\\ s of report
blocks; ``pipelines.simulate`` writes or publishes them. Each kind's registry entry (:mod:`ldp.kinds`)
names its population factory (``(task, users, dataset, seed_sequence, *, batch_size, assignment)``) and
its bad-record template (:func:`frequency_template` ...: ``(validator, group, encode(k, rng))``, the
valid reports the dead-letter demonstration spoils).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from ldp.datasets import iter_population
from ldp.datasets.multi import sample_records
from ldp.reports import Reports
from ldp.task import FrequencyTask, RangeTask, Task

__all__ = [
    "Chunk",
    "Population",
    "BadTemplate",
    "RECORDS_FILE",
    "MAX_TRUTH_DOMAIN",
    "frequency_population",
    "range_population",
    "batch_population",
    "sparse_population",
    "frequency_template",
    "range_template",
    "batch_template",
    "sparse_template",
]

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


def _records_dtype(domain_sizes: Sequence[int]) -> np.dtype:
    top = max(domain_sizes) - 1
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


class _RangePopulation:
    """Users of a range-query task: all records, groups and per-group reports generated up front."""

    def __init__(
        self, task: RangeTask, users: int, dataset: str, ss: np.random.SeedSequence, assignment: str
    ) -> None:
        self.task, self.n_users, self.dataset, self.assignment = task, users, dataset, assignment
        self.mech = mech = task.make_mechanism()
        r_rec, r_grp, r_enc, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in ss.spawn(5))
        names = task.attribute_names
        records = sample_records(dataset, users, task.domain_sizes, attribute_names=names, rng=r_rec)
        self.records = mech.check_records(records)
        if assignment == "balanced":
            self.groups = mech.assign_groups(users, rng=r_grp, balanced=True)
        elif assignment == "user_id":
            self.groups = mech.assign_groups(users, user_ids=np.arange(users, dtype=np.int64))
        else:
            self.groups = mech.assign_groups(users, rng=r_grp)
        self.reports = mech.encode(self.records, rng=r_enc, groups=self.groups)
        # row of each user inside its group's Reports (rows are in increasing user index per group)
        order = np.argsort(self.groups, kind="stable")
        starts = np.searchsorted(self.groups[order], np.arange(mech.n_groups + 1))
        self.pos = np.empty(users, dtype=np.int64)
        self.pos[order] = np.arange(users) - np.repeat(starts[:-1], np.diff(starts))

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Chunk]]:
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            gk = self.groups[lo:hi]
            order = np.argsort(gk, kind="stable")  # one chunk (and Avro block run) per group
            present, first = np.unique(gk[order], return_index=True)
            for g, a, b in zip(present.tolist(), first.tolist(), [*first[1:].tolist(), hi - lo]):
                u = lo + order[a:b]
                yield k, Chunk(u, self.reports[g].take(self.pos[u]), g)

    def truth(self) -> dict[str, Any]:
        mech = self.mech
        return {
            "mechanism": self.task.mechanism,
            "attributes": [{"name": a.name, "domain_size": a.domain_size} for a in self.task.attributes],
            "assignment": self.assignment,
            "n_groups": mech.n_groups,
            "group_sizes": np.bincount(self.groups, minlength=mech.n_groups).tolist(),
        }

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        np.save(out / RECORDS_FILE, self.records.astype(_records_dtype(self.task.domain_sizes)))
        return {"records_file": RECORDS_FILE}


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
        np.save(out / RECORDS_FILE, self.records.astype(_records_dtype(self.task.domain_sizes)))
        return {"records_file": RECORDS_FILE}


class _SparsePopulation:
    """Clients of a sparse-vector task: one k-sparse vector each (:func:`ldp.datasets.sparse.sample_sparse`;
    ``users`` None for ``csv:`` data: every client of the file), encoded in chunks
    (:func:`ldp.sparse.aggregate.encode_population`, one spawned stream per block)."""

    def __init__(self, task: Any, users: int | None, dataset: str, ss: np.random.SeedSequence) -> None:
        from ldp.datasets.sparse import sample_sparse
        from ldp.sparse.vectors import SparseVectors

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
        from ldp.sparse.aggregate import encode_population

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


# ------------------------------------------------------------------------------------------------------------
# the registry's factories: (task, users, dataset, seed sequence, *, batch_size, assignment) -> Population
# ------------------------------------------------------------------------------------------------------------


def frequency_population(
    task: Task, users: int, dataset: str, ss: np.random.SeedSequence, *, batch_size: int, assignment: str
) -> Population:
    assert isinstance(task, FrequencyTask)
    return _FrequencyPopulation(task, users, dataset, ss, batch_size)


def range_population(
    task: Task, users: int, dataset: str, ss: np.random.SeedSequence, *, batch_size: int, assignment: str
) -> Population:
    assert isinstance(task, RangeTask)
    return _RangePopulation(task, users, dataset, ss, assignment)


def batch_population(
    task: Task, users: int, dataset: str, ss: np.random.SeedSequence, *, batch_size: int, assignment: str
) -> Population:
    return _BatchPopulation(task, users, dataset, ss)


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


# ------------------------------------------------------------------------------------------------------------
# bad-record templates: one group's validator and valid reports of it
# ------------------------------------------------------------------------------------------------------------


def frequency_template(task: Task) -> BadTemplate:
    """The task's oracle and group 0."""
    oracle = task.make_oracle()
    return oracle, 0, lambda k, rng: oracle.encode(rng.integers(0, oracle.d, k), rng=rng)


def range_template(task: Task) -> BadTemplate:
    """The method's last group and its oracle."""
    assert isinstance(task, RangeTask)
    mech = task.make_mechanism()
    g = mech.n_groups - 1
    oracle = mech.group_oracle(g)

    def encode(k: int, rng: np.random.Generator) -> Reports:
        return oracle.encode(mech.project(g, np.zeros((k, mech.n_attributes), np.int64)), rng=rng)

    return oracle, g, encode


def batch_template(task: Task) -> BadTemplate:
    """The cell validator (central DP: raw cells, no oracle)."""
    from ldp.aggregate.batch import CellValidator

    cells = CellValidator(task)  # type: ignore[arg-type]
    return cells, 0, lambda k, rng: Reports(items=np.zeros((k, cells.k), np.int64))


def sparse_template(task: Task) -> BadTemplate:
    """The sparse mechanism's validator and reports of empty vectors."""
    from ldp.sparse.aggregate import SparseValidator, to_reports
    from ldp.sparse.vectors import SparseVectors

    mech = task.make_mechanism()  # type: ignore[attr-defined]
    validator = SparseValidator(mech)

    def encode(k: int, rng: np.random.Generator) -> Reports:
        empty = SparseVectors(np.zeros(k + 1, np.int64), np.zeros(0, np.uint64), np.zeros(0))
        return to_reports(mech, mech.encode(empty, rng=rng)[0])

    return validator, 0, encode
