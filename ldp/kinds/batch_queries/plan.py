"""The batch-queries kind's plan (:mod:`ldp.plan`): the Gaussian matrix mechanism's exact query std.

Central DP: the noise does not depend on the data, so the std of each answer (a count) is the strategy's
``query_variance`` for the workload; the plan takes the identity workload (one query per cell) and the
all-cells total. Divided by ``users`` it is the std of a fraction.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp.plan import error_entry

__all__ = ["predict"]


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a batch-queries task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    from ldp.kinds.batch_queries.aggregate import BatchAggregator, parse_workload_spec

    agg = BatchAggregator(task, parse_workload_spec({"type": "identity"}, task), noise_seed=0)
    w = agg.workload.matrix(0, agg.workload.n_queries)
    std = np.sqrt(np.asarray(agg.mechanism.query_variance(w), dtype=float))
    cell = float(np.median(std))
    errors = [error_entry("one cell's count (identity workload)", cell, "records",
                          std_fraction=cell / users, strategy=task.mechanism)]
    total = np.ones((1, agg.n))
    tstd = math.sqrt(float(np.asarray(agg.mechanism.query_variance(total)).ravel()[0]))
    errors.append(error_entry("the total count", tstd, "records", std_fraction=tstd / users))
    return {
        "mechanism": task.mechanism,
        "eps0": None,
        "errors": errors,
        "cost": {"accumulator_bytes": 8 * agg.n, "cost_key": "batch_queries", "values": agg.n},
    }
