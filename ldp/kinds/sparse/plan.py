"""The sparse kind's plan (:mod:`ldp.plan`): each mechanism's closed-form per-coordinate variance.

Every sparse mechanism states ``Var[v_x]`` for ``n`` reports (``predicted_variance``); the plan takes it at
a coordinate no user holds (``mean_sq = 0``; SVME at its worst-case mean squared norm ``k``), the noise
floor of the estimated mean vector, and the half-width that holds over all ``d`` coordinates together
(Bonferroni, :func:`ldp.selection.simultaneous_z`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp.plan import error_entry, nbytes
from ldp.selection import simultaneous_z

__all__ = ["predict", "coordinate_std"]


def coordinate_std(mech: Any, n: int) -> float:
    """The std of one coordinate's mean estimate from ``n`` reports (a coordinate no user holds)."""
    return math.sqrt(float(np.max(mech.predicted_variance(int(n)))))


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a sparse task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    mech = task.make_mechanism()
    std = coordinate_std(mech, users)
    d = int(task.domain_size)
    error = error_entry("one coordinate of the mean vector", std, "value units ([-1, 1] per coordinate)",
                        simultaneous_half_width_95=simultaneous_z(d) * std, domain_size=d,
                        assumption="a coordinate no user holds")
    try:
        acc_bytes = nbytes(mech.create_accumulator())
    except (ValueError, MemoryError):
        acc_bytes = 0
    return {
        "mechanism": task.mechanism,
        "eps0": float(task.epsilon),
        "errors": [error],
        "cost": {"accumulator_bytes": acc_bytes, "cost_key": "sparse", "values": d},
    }
