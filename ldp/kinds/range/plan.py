"""The range kind's plan (:mod:`ldp.plan`): the method's own answer std at the planned ``n``.

A range method's answer std (``RangeModel.answer_std``) is closed form at its estimates for some methods and
simulated (weighted update, inference) for others, so the plan runs the method once: ``min(users,``
:data:`SAMPLE_USERS` ``)`` users with values uniform over the domain, groups dealt evenly, each group's
reports encoded, accumulated and finalized by the method (:mod:`ldp.rangequery`), and the model's std of
the standard queries (per attribute the lower half of its domain; per pair of attributes the lower half of
both) scaled by ``sqrt(sample / users)`` (every std of these methods falls as ``1 / sqrt(n)``).
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import numpy as np

from ldp.plan import error_entry, nbytes

__all__ = ["predict", "standard_queries", "SAMPLE_USERS"]

#: Users the plan simulates at most (more are predicted by the 1 / sqrt(n) scaling).
SAMPLE_USERS = 200_000


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


def model_stds(task: Any, users: int, seed: int = 0) -> tuple[list[str], np.ndarray, int, Any]:
    """The method's answer std of :func:`standard_queries` for ``users`` users (module docstring):
    ``(labels, stds, sample, mechanism)``."""
    from ldp.datasets.multi import sample_records

    mech = task.make_mechanism()
    m = min(int(users), SAMPLE_USERS)
    rng = np.random.default_rng(seed)
    records = mech.check_records(sample_records("uniform", m, task.domain_sizes, rng=rng))
    groups = mech.assign_groups(m, rng=rng, balanced=True)
    model = mech.finalize(mech.accumulate(mech.encode(records, rng=rng, groups=groups)))
    labelled = standard_queries(task)
    std = model.answer_std([q for _, q in labelled])
    if std is None:
        raise ValueError(f"method {task.mechanism!r} states no answer std")
    return [lb for lb, _ in labelled], np.asarray(std, dtype=float) * math.sqrt(m / users), m, mech


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a range task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    labels, stds, m, mech = model_stds(task, users)
    how = "method's answer_std at a uniform sample" + ("" if m == users else f" of {m} users, scaled")
    errors = [error_entry(label, float(s), "fraction of users", query_type=label[:3], how=how)
              for label, s in zip(labels, stds)]
    acc_bytes = sum(nbytes(mech.create_accumulator(g)) for g in range(mech.n_groups))
    return {
        "mechanism": task.mechanism,
        "eps0": float(task.epsilon),
        "groups": int(mech.n_groups),
        "errors": errors,
        "cost": {"accumulator_bytes": acc_bytes, "cost_key": "range",
                 "values": max(acc_bytes // 8, 1)},
    }
