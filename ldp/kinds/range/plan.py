"""The range kind's plan (:mod:`ldp.plan`): the error of the method's published answers, simulated.

A range method's published answer goes through Norm-Sub, consistency steps and (some methods) weighted
update or inference, which shrink its error well below the std the method states for it
(``RangeModel.answer_std``, a closed form before those steps: on uniform data 1.3-1.8x the true error for
HDG and TDG, 6-8.5x for CALM). No closed form gives the published answer's error, so the plan measures it:
:data:`RUNS` collections of ``min(users,`` :data:`SAMPLE_USERS` ``)`` users with records uniform over the
domain, groups dealt evenly, each encoded, accumulated and finalized by the method (:mod:`ldp.rangequery`),
and the RMS error of the standard queries (per attribute the lower half of its domain; per pair of
attributes, at most 10, the lower halves of both) against the collection's own truth, pooled over the
queries of one shape (the same constrained domain sizes). Above :data:`SAMPLE_USERS` users the figure is
scaled by ``sqrt(sample / users)`` (and marked so). The method's stated std is given beside it
(``stated_std``, the one the job's rows carry).
"""

from __future__ import annotations

import math
import time
from itertools import combinations
from typing import Any

import numpy as np

from ldp.plan import error_entry, nbytes

__all__ = ["predict", "standard_queries", "simulated_errors", "SAMPLE_USERS", "RUNS"]

#: Users of one simulated collection at most (more are predicted by the 1 / sqrt(n) scaling).
SAMPLE_USERS = 50_000
#: Simulated collections at most (with 4 attributes, 256 errors pooled per 1-D shape: a Monte Carlo error
#: of the std about 4.4%), fewer when one takes long (:data:`PLAN_SECONDS`), at least :data:`MIN_RUNS`.
RUNS = 64
MIN_RUNS = 4
#: The time the plan spends simulating, about (a method's first collection sets the count).
PLAN_SECONDS = 4.0


def standard_queries(task: Any) -> list[tuple[str, Any]]:
    """``(label, RangeQuery)``: per attribute ``[0, d/2 - 1]``; per pair both halves (at most 10 pairs)."""
    from ldp.rangequery.queries import RangeQuery

    dims, names = task.domain_sizes, task.attribute_names
    out = [(f"1-D: {names[a]} in lower half", RangeQuery(((a, 0, max(dims[a] // 2 - 1, 0)),)))
           for a in range(len(dims))]
    for a, b in list(combinations(range(len(dims)), 2))[:10]:
        q = RangeQuery(((a, 0, max(dims[a] // 2 - 1, 0)), (b, 0, max(dims[b] // 2 - 1, 0))))
        out.append((f"2-D: {names[a]} and {names[b]} in lower halves", q))
    return out


def _truth(records: np.ndarray, queries: list[Any]) -> np.ndarray:
    inside = [np.all([(records[:, a] >= lo) & (records[:, a] <= hi) for a, lo, hi in q.intervals], axis=0)
              for q in queries]
    return np.asarray([float(np.mean(x)) for x in inside])


def simulated_errors(task: Any, users: int, runs: int = RUNS, seed: int = 0,
                     seconds: float | None = None) -> tuple[np.ndarray, list[Any]]:
    """``(errors, stated)``: the published answers' errors of :func:`standard_queries`, ``(runs,
    queries)``, over ``runs`` collections of ``users`` users with uniform records (``seconds``: fewer
    when the first collection shows they would take longer, at least :data:`MIN_RUNS`), and the method's
    stated std of the last one (None where it states none)."""
    from ldp.datasets.multi import sample_records

    mech = task.make_mechanism()
    queries = [q for _, q in standard_queries(task)]
    rng = np.random.default_rng(seed)
    errors = np.empty((runs, len(queries)))
    stated: Any = None
    start = time.perf_counter()
    for r in range(runs):
        if r == 1 and seconds is not None:
            runs = max(MIN_RUNS, min(runs, int(seconds / max(time.perf_counter() - start, 1e-9))))
            errors = errors[:runs]
        if r >= runs:
            break
        records = mech.check_records(sample_records("uniform", int(users), task.domain_sizes, rng=rng))
        groups = mech.assign_groups(int(users), rng=rng, balanced=True)
        model = mech.finalize(mech.accumulate(mech.encode(records, rng=rng, groups=groups)))
        errors[r] = np.asarray(model.answer(queries), dtype=float) - _truth(records, queries)
        stated = model.answer_std(queries)
    return errors, [None if stated is None or not math.isfinite(s) else float(s)
                    for s in (stated if stated is not None else [None] * len(queries))]


def pooled_std(task: Any, errors: np.ndarray) -> np.ndarray:
    """Each query's RMS error pooled over the queries of its shape (their constrained domain sizes)."""
    dims = task.domain_sizes
    shapes = [tuple(dims[a] for a, _, _ in q.intervals) for _, q in standard_queries(task)]
    out = np.empty(len(shapes))
    for shape in set(shapes):
        cols = [i for i, s in enumerate(shapes) if s == shape]
        out[cols] = math.sqrt(float(np.mean(errors[:, cols] ** 2)))
    return out


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a range task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    m = min(int(users), SAMPLE_USERS)
    errors, stated = simulated_errors(task, m, seconds=PLAN_SECONDS)
    stds = pooled_std(task, errors) * math.sqrt(m / users)
    runs = errors.shape[0]
    how = f"simulated: {runs} collections of {m:,} uniform users" + ("" if m == users else ", scaled")
    labelled = standard_queries(task)
    shapes = [tuple(task.domain_sizes[a] for a, _, _ in q.intervals) for _, q in labelled]
    out = [error_entry(label, float(s), "fraction of users", how=how,
                       mc_error=1.0 / math.sqrt(2.0 * max(runs * shapes.count(shape) - 1, 1)),
                       stated_std=None if st is None else st * math.sqrt(m / users))
           for (label, _), shape, s, st in zip(labelled, shapes, stds, stated)]
    mech = task.make_mechanism()
    acc_bytes = sum(nbytes(mech.create_accumulator(g)) for g in range(mech.n_groups))
    return {
        "mechanism": task.mechanism,
        "eps0": float(task.epsilon),
        "groups": int(mech.n_groups),
        "errors": out,
        "cost": {"accumulator_bytes": acc_bytes, "cost_key": "range", "values": max(acc_bytes // 8, 1)},
    }
