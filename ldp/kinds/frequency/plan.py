"""The frequency kind's plan (:mod:`ldp.plan`): the oracle's closed-form variance at the planned ``n``.

Each group of a task estimates from its own reports, so ``n = users / n_groups``. The estimate of a value
of true frequency ``f`` has variance ``(q (1 - q) + f (p - q) (1 - p - q)) / (n (p - q)^2)`` (the oracle's
Eq. 4, :meth:`ldp.oracles.FrequencyOracle.variance`); the plan gives it at ``f = 0`` (the noise floor every
rare value sees, the one the flags are judged against) and its largest value over ``f`` in [0, 1].
"""

from __future__ import annotations

import math
from typing import Any

from ldp.plan import error_entry, smallest_flagged
from ldp.selection import simultaneous_z

__all__ = ["predict", "frequency_std"]


def frequency_std(oracle: Any, n: int, f: float = 0.0) -> float:
    """The std of one value's unbiased estimate from ``n`` reports at true frequency ``f``."""
    return math.sqrt(float(oracle.variance(int(n), f)))


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a frequency task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    oracle = task.make_oracle()
    groups = int(task.n_groups)
    n = max(users // groups, 1)
    d = int(oracle.d)
    std0 = frequency_std(oracle, n)
    std_max = max(std0, frequency_std(oracle, n, 1.0))
    base = float(oracle.variance(n))
    slope = float(oracle.variance(n, 1.0)) - base
    params = {k: v for k, v in oracle.spec().items() if k not in ("mechanism", "domain_size")}
    error = error_entry(
        "frequency of one value (f = 0)", std0, "fraction of users",
        std_max=std_max,
        simultaneous_half_width_95=simultaneous_z(d) * std0,
        reports_per_group=n,
        groups=groups,
        domain_size=d,
        post_processing=task.postprocess,
        note="std of the unbiased estimate; the published (post-processed) number's interval is "
             "ldp.intervals'",
    )
    return {
        "mechanism": oracle.name,
        "mechanism_params": params,
        "eps0": float(oracle.epsilon),
        "errors": [error],
        "detection": lambda rule: {**smallest_flagged(base, slope, d, rule), "domain_size": d,
                                   "reports_per_group": n},
        "cost": {"accumulator_bytes": int(oracle.accumulator_bytes) * groups, "cost_key": oracle.name,
                 "values": d * groups, "extra_bytes": 8 * 80 * d},
    }
