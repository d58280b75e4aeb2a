"""The planner's frequency predictions against simulation through the numpy core, over a grid.

    .venv/bin/python -m bench.plan_check --json bench/results/plan_check.json

At each point of d in {16, 256, 4096, 65536} x eps in {0.5, 1, 2, 4, 8} x n in {1e4, 1e5, 1e6, 1e7} the
task is ``auto``'s, the plan's std (``ldp.plan.plan_task``, a value of frequency 0) is compared with the
RMS estimate of the zero-frequency values over runs of the task's own oracle (``encode``, ``add``,
``estimate``): users on the first :data:`HOT` values, ``d - 4`` samples per run, runs repeated to
:data:`SAMPLES` (relative Monte Carlo error of the std at most 1.25%). A value's estimate is linear in its
support count, a sum of ``n`` independent reports, so where ``runs x n`` reports would take more than
:data:`POINT_SECONDS` the point is simulated at ``n_sim < n`` reports and scaled by ``sqrt(n_sim / n)``
(``scaled``); :data:`FULL_POINTS` always run at their full ``n``. ``tests/test_plan_simulation.py`` runs the
same grid and asserts every ratio within 10%.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from ldp.plan import plan_task
from ldp.task import parse_task

#: Estimates pooled per point (relative Monte Carlo error of the std about 1.25%).
SAMPLES = 3200
#: Wall-time budget of one frequency grid point's encoding (beyond the floor of :data:`MIN_REPORTS`).
POINT_SECONDS = 0.25
MIN_REPORTS = 2000
HOT = 4
#: Points simulated at their full ``n`` whatever their cost: GRR and OLH at n = 1e7.
FULL_POINTS = {(4096, 8.0, 10_000_000), (65536, 1.0, 10_000_000)}

DOMAINS = (16, 256, 4096, 65536)
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
USERS = (10_000, 100_000, 1_000_000, 10_000_000)


def mc_error(m: int) -> float:
    """Relative standard error of a std estimated from ``m`` normal samples."""
    return 1.0 / math.sqrt(2.0 * (m - 1))


def _per_report_seconds(oracle: Any, rng: np.random.Generator) -> float:
    values = np.zeros(4000, dtype=np.int64)
    t0 = time.perf_counter()
    oracle.estimate(oracle.add(oracle.create_accumulator(), oracle.encode(values, rng=rng)))
    return (time.perf_counter() - t0) / values.size


def _zero_value_errors(oracle: Any, n: int, runs: int, rng: np.random.Generator) -> np.ndarray:
    """The estimates of the zero-frequency values over ``runs`` runs of ``n`` reports (users on the
    first :data:`HOT` values, equally)."""
    values = np.arange(n, dtype=np.int64) % HOT
    out = []
    for _ in range(runs):
        est = oracle.estimate(oracle.add(oracle.create_accumulator(), oracle.encode(values, rng=rng)))
        out.append(est.frequencies[HOT:])
    return np.concatenate(out)


def simulate_frequency_point(d: int, eps: float, n: int, seed: int) -> dict[str, Any]:
    task = parse_task({"task_id": "grid", "mechanism": "auto", "epsilon": eps, "domain_size": d})
    predicted = plan_task(task, n)["errors"][0]["std"]
    oracle = task.make_oracle()
    rng = np.random.default_rng(seed)
    runs = math.ceil(SAMPLES / (d - HOT))
    per_report = _per_report_seconds(oracle, rng)
    n_sim = int(min(n, max(MIN_REPORTS, POINT_SECONDS / (per_report * runs))))
    if (d, eps, n) in FULL_POINTS:
        n_sim = n
    errors = _zero_value_errors(oracle, n_sim, runs, rng)
    simulated = float(np.sqrt(np.mean(errors**2))) * math.sqrt(n_sim / n)  # true value 0: RMS = std
    return {"d": d, "eps": eps, "n": n, "mechanism": oracle.name, "predicted": predicted,
            "simulated": simulated, "ratio": simulated / predicted, "samples": int(errors.size),
            "n_sim": n_sim, "scaled": n_sim < n}




def grid() -> list[dict[str, Any]]:
    """Every point of the grid (module docstring), seeded by its position."""
    rows = []
    for i, d in enumerate(DOMAINS):
        for j, eps in enumerate(EPSILONS):
            for k, n in enumerate(USERS):
                rows.append(simulate_frequency_point(d, eps, n, seed=1000 * i + 100 * j + k))
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="OUT", help="write the points to this file")
    ns = p.parse_args(argv)
    load, t0 = os.getloadavg()[0], time.perf_counter()
    rows = grid()
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1.0))
    for r in rows:
        print(f"d {r['d']:>6} eps {r['eps']:>3} n {r['n']:>9,} {r['mechanism']:>4}: "
              f"predicted {r['predicted']:.4g} simulated {r['simulated']:.4g} ratio {r['ratio']:.4f}"
              f"{' (scaled)' if r['scaled'] else ''}")
    print(f"worst ratio {worst['ratio']:.4f}; {time.perf_counter() - t0:.0f} s")
    if ns.json:
        out = {"command": "python -m bench.plan_check " + " ".join(sys.argv[1:] if argv is None else argv),
               "load_avg_1m_start": load, "load_avg_1m_end": os.getloadavg()[0], "samples": SAMPLES,
               "worst_ratio": worst["ratio"], "points": rows}
        with open(ns.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return rows


if __name__ == "__main__":
    main()
