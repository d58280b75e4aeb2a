"""The range kind's simulated population: multi-attribute records (``ldp.datasets.multi``), the method's
user groups and per-group reports, generated up front.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ldp.datasets.multi import sample_records
from ldp.kinds.population import RECORDS_FILE, BadTemplate, Chunk, Population, records_dtype
from ldp.kinds.range.task import RangeTask
from ldp.reports import Reports
from ldp.task import Task

__all__ = ["range_population", "range_template"]


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
        np.save(out / RECORDS_FILE, self.records.astype(records_dtype(self.task.domain_sizes)))
        return {"records_file": RECORDS_FILE}


def range_population(
    task: Task, users: int, dataset: str, ss: np.random.SeedSequence, *, batch_size: int, assignment: str
) -> Population:
    assert isinstance(task, RangeTask)
    return _RangePopulation(task, users, dataset, ss, assignment)


def range_template(task: Task) -> BadTemplate:
    """The method's last group and its oracle."""
    assert isinstance(task, RangeTask)
    mech = task.make_mechanism()
    g = mech.n_groups - 1
    oracle = mech.group_oracle(g)

    def encode(k: int, rng: np.random.Generator) -> Reports:
        return oracle.encode(mech.project(g, np.zeros((k, mech.n_attributes), np.int64)), rng=rng)

    return oracle, g, encode
