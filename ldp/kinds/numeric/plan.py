"""The numeric kind's plan (:mod:`ldp.plan`): the mean's closed-form std and Square Wave's quantiles.

An attribute is carried by ``users k / m`` reports (sample-k-of-m, each at ``epsilon / k``). The mean of
``n`` reports has variance ``(high - low)^2 / 4 * mean_t Var[y | t] / n`` (:meth:`NumericMechanism.variance`
on the unit scale ``t`` in [-1, 1]): the plan gives it for values spread uniformly over ``[low, high]``
(``std``) and at the worst value (``std_worst``, the mechanism's worst-case variance).

Quantiles (``square-wave``): Square Wave's EM estimate has no closed form, so the plan takes the
estimator's own parametric bootstrap (the one its intervals use) at the planned ``n`` and values uniform
over ``[low, high]``: :data:`REPLICAS` report histograms drawn from the mechanism's output distribution,
each run through EM, the quantiles' std over them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp.plan import error_entry

__all__ = ["predict", "mean_stds", "quantile_stds", "REPLICAS"]

#: Bootstrap replicas of the quantile prediction (the std's relative Monte Carlo error is about
#: ``1 / sqrt(2 * REPLICAS)``, 9%; a few seconds at the default 512 bins and n = 1e5).
REPLICAS = 64


def mean_stds(mech: Any, n: int) -> tuple[float, float]:
    """``(std for values uniform over [low, high], worst-case std)`` of the mean of ``n`` reports."""
    half = 0.5 * (mech.high - mech.low)
    grid = np.linspace(-1.0, 1.0, 2001)
    uniform = float(np.mean(mech.variance(grid)))
    worst = max(float(mech.worst_case_variance()), float(np.max(mech.variance(grid))))
    return half * math.sqrt(uniform / n), half * math.sqrt(worst / n)


def quantile_stds(mech: Any, n: int, quantiles: tuple[float, ...], seed: int = 0,
                  replicas: int = REPLICAS) -> tuple[np.ndarray, float]:
    """The std of each quantile estimate from ``n`` Square Wave reports of uniform values (``replicas``
    bootstrap histograms), and the half-width of one histogram bin (the published intervals add it)."""
    from ldp.numeric.estimates import quantiles_from_cdf
    from ldp.square_wave import SWOperator, em_estimate_batch

    sw = mech.sw
    mat = sw.em_matrix()
    fine = sw.d * sw.em_resolution
    truth = np.full(fine, 1.0 / fine)
    probs = mat.forward(truth) if isinstance(mat, SWOperator) else mat @ truth
    probs = np.clip(probs, 0.0, None)
    probs = probs / probs.sum()
    rng = np.random.default_rng(seed)
    boot = rng.multinomial(int(n), probs, size=replicas)
    f_b, _, _ = em_estimate_batch(boot, mat, smoothing=sw.smoothing, tol=sw.tol, max_iter=sw.max_iter)
    cdf = np.concatenate([np.zeros((replicas, 1)), np.cumsum(f_b, axis=1)], axis=1)
    cdf[:, -1] = 1.0
    edges = np.linspace(mech.low, mech.high, fine + 1)
    theta = quantiles_from_cdf(cdf, edges, quantiles)
    return theta.std(axis=0, ddof=1), 0.5 * (mech.high - mech.low) / sw.d


def _attribute_errors(task: Any, mech: Any, name: str, n: int) -> list[dict[str, Any]]:
    if not hasattr(mech, "variance"):  # the memoized counter: its bound over values, rounding and flips
        worst = (mech.high - mech.low) * math.sqrt(mech.worst_case_unit_variance() / n)
        return [error_entry(f"{name}: mean", worst, "attribute's units", std_worst=worst, reports=n,
                            assumption="an upper bound over values (one report per user per window)")]
    std, worst = mean_stds(mech, n)
    out = [error_entry(f"{name}: mean", std, "attribute's units", std_worst=worst, reports=n,
                       assumption="values uniform over [low, high]; std_worst at the worst value")]
    if getattr(mech, "sw", None) is not None and task.quantiles:
        sds, half_bin = quantile_stds(mech, n, tuple(task.quantiles))
        for q, sd in zip(task.quantiles, sds):
            entry = error_entry(f"{name}: quantile {q:g}", float(sd), "attribute's units", reports=n,
                                assumption="values uniform over [low, high]; parametric bootstrap of EM "
                                           f"({REPLICAS} replicas)")
            entry["half_width_95"] += half_bin
            out.append(entry)
    return out


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a numeric task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    from ldp.plan import nbytes

    mech = task.make_mechanism()
    m = len(task.attributes)
    if task.is_multi:
        k = int(mech.k)
        n = max(int(users * k // m), 1)
        pairs = list(zip(mech.names, mech.mechs))
    else:
        n = users
        pairs = [(task.attributes[0].name, mech)]
    errors = [e for name, one in pairs for e in _attribute_errors(task, one, name, n)]
    first = pairs[0][1]
    return {
        "mechanism": first.name,
        "eps0": float(task.epsilon),
        "epsilon_per_attribute": float(first.epsilon),
        "errors": errors,
        "cost": {"accumulator_bytes": nbytes(mech.create_accumulator()), "cost_key": "numeric",
                 "values": sum(getattr(getattr(one, "sw", None), "d", 1) for _, one in pairs)},
    }
