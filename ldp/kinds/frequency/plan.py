"""The frequency kind's plan (:mod:`ldp.plan`): the oracle's closed-form variance at the planned ``n``.

Each group of a task estimates from its own reports, so ``n = users / n_groups``. The estimate of a value
of true frequency ``f`` has variance ``(q (1 - q) + f (p - q) (1 - p - q)) / (n (p - q)^2)`` (the oracle's
Eq. 4, :meth:`ldp.oracles.FrequencyOracle.variance`); the plan gives it at ``f = 0`` (the noise floor every
rare value sees, the one the flags are judged against) and its largest value over ``f`` in [0, 1].
"""

from __future__ import annotations

import math
from typing import Any

from ldp.intervals import null_support_q
from ldp.plan import error_entry, smallest_flagged
from ldp.selection import simultaneous_z

__all__ = ["predict", "frequency_std"]


def frequency_std(oracle: Any, n: int, f: float = 0.0) -> float:
    """The std of one value's unbiased estimate from ``n`` reports at true frequency ``f``."""
    return math.sqrt(float(oracle.variance(int(n), f)))


def _null_law(oracle: Any, n: int) -> tuple[int, float, float] | None:
    """``(n, p, q)`` when a value's support count is exactly binomial (the rows' flags then use the exact
    test, :func:`ldp.intervals.null_support_q`); None otherwise (normal flags)."""
    q = null_support_q(oracle)
    return None if q is None else (int(n), float(oracle.p), q)


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
        "detection": lambda rule: {**smallest_flagged(base, slope, d, rule, null_law=_null_law(oracle, n)),
                                   "domain_size": d,
                                   "reports_per_group": n},
        "cost": {"accumulator_bytes": int(oracle.accumulator_bytes) * groups, "cost_key": oracle.name,
                 "values": d * groups, "extra_bytes": 8 * 80 * d},
    }


#: At least this many negative estimates before a window is judged against its plan.
MIN_NEGATIVES = 20
#: The rule a window is flagged by (``expected_vs_observed``), as the dashboard states it.
FLAG_RULE = (
    "observed = RMS of the unbiased estimates below 0 (noise on values of small true frequency; for a "
    "value of frequency 0 it is the std itself); flagged above plan when observed / predicted > 1.25 + "
    "3 / sqrt(2 m) (m estimates below 0, at least 20), below plan when < 0.5"
)


def observed_spread(unbiased: Any) -> tuple[float | None, int]:
    """``(RMS of the negative estimates, how many)`` of one row's unbiased estimates (None: none)."""
    import numpy as np

    u = np.asarray([x for x in unbiased if x is not None], dtype=float)
    neg = u[np.isfinite(u) & (u < 0)]
    return (float(np.sqrt(np.mean(neg**2))) if neg.size else None), int(neg.size)


def expected_vs_observed(task: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per result row (window, pane, group) of a frequency job: the plan's std at the row's ``n_reports``
    (:func:`frequency_std`, f = 0) beside the observed spread (:func:`observed_spread`), their ratio and a
    flag under :data:`FLAG_RULE` (a wrong mechanism parameter, forged or duplicated reports, or an n
    that is not the reports' show as noise far from the plan)."""
    oracle = task.make_oracle()
    out = []
    for r in rows:
        n, unbiased = r.get("n_reports"), r.get("unbiased")
        if not isinstance(n, int) or n < 1 or not unbiased:
            continue
        predicted = frequency_std(oracle, n)
        observed, m = observed_spread(unbiased)
        ratio = None if observed is None else observed / predicted
        flag = None
        if ratio is not None and m >= MIN_NEGATIVES:
            if ratio > 1.25 + 3.0 / math.sqrt(2.0 * m):
                flag = "above plan"
            elif ratio < 0.5:
                flag = "below plan"
        out.append({"window_start": r.get("window_start"), "window_end": r.get("window_end"),
                    "pane_index": r.get("pane_index"), "group": r.get("group"), "n_reports": n,
                    "predicted_std": predicted, "observed_std": observed, "negatives": m,
                    "ratio": ratio, "judged": m >= MIN_NEGATIVES, "flag": flag})
    return {"statistic": "frequency of one value (f = 0)", "rule": FLAG_RULE, "windows": out}
