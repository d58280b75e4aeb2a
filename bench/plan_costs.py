"""Calibration of ``ldp.plan.COSTS``: the aggregator's per-report and per-value costs the planner uses.

    .venv/bin/python -m bench.plan_costs --json bench/results/plan_costs.json

For each frequency oracle (d = 1024, eps = 1; OUE and SUE also at d = 4096 for their per-value slope) and
each other kind's example task, simulated reports (``simulator.make_population``) go through the kind's
aggregator as the Beam combiner drives it: ``validation_oracle(g).validate`` then ``add``, in batches of
8,192; ``add_us_per_report`` is the median over ``--repeat`` runs of that time per report. For the
frequency kind ``finalize_us_per_value`` is one ``finalize`` (estimate, post-processing ``norm-sub``,
intervals) per value of the domain at d = 4096 and 65,536. The runner's own cost per report comes from
``bench/results/pipeline_n1e6_d1024.json`` (``pipeline_seconds`` minus ``core_seconds``, per report).
Every record carries the load average (a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from ldp.aggregate import GLOBAL_WINDOW
from ldp.kinds import KINDS
from ldp.task import parse_task

BATCH = 8192


def _chunks(task: Any, users: int, seed: int) -> list[tuple[int, Any]]:
    """``(group, reports)`` batches of a simulated population of ``users``."""
    from simulator.population import make_population

    pop = make_population(task, users, seed=seed)
    bounds = np.unique(np.arange(0, users + BATCH, BATCH).clip(max=users))
    out = []
    for _, chunk in pop.chunks(bounds):
        if isinstance(chunk.groups, (int, np.integer)):
            out.append((int(chunk.groups), chunk.reports))
            continue
        for g in np.unique(chunk.groups):
            out.append((int(g), chunk.reports.take(np.flatnonzero(chunk.groups == g))))
    return out


def add_cost(task: Any, users: int, repeat: int) -> float:
    """Median seconds per report of validate + add through the task's aggregator."""
    kind = KINDS[task.kind]
    agg = kind.make_example_aggregator(task)
    chunks = _chunks(task, users, seed=1)
    times = []
    for _ in range(repeat):
        accs: dict[int, Any] = {}
        t0 = time.perf_counter()
        for g, reports in chunks:
            ok, _ = agg.validation_oracle(g).validate(reports)
            acc = accs.get(g)
            if acc is None:
                acc = accs[g] = agg.create_accumulator(g)
            accs[g] = agg.add(g, acc, reports.take(np.flatnonzero(ok)))
        times.append((time.perf_counter() - t0) / users)
    return statistics.median(times)


def finalize_cost(d: int, repeat: int) -> float:
    """Median seconds per value of one frequency finalize (OLH, norm-sub, intervals)."""
    task = parse_task({"task_id": "cost", "mechanism": "olh", "epsilon": 1.0, "domain_size": d,
                       "postprocess": "norm-sub"})
    agg = KINDS["frequency"].aggregator(task)
    acc = agg.create_accumulator(0)
    for g, reports in _chunks(task, 20_000, seed=2):
        acc = agg.add(g, acc, reports)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        agg.finalize({0: acc}, GLOBAL_WINDOW)
        times.append((time.perf_counter() - t0) / d)
    return statistics.median(times)


def runner_cost() -> float | None:
    path = os.path.join(os.path.dirname(__file__), "results", "pipeline_n1e6_d1024.json")
    try:
        r = json.loads(open(path, encoding="utf-8").read())
    except (OSError, ValueError):
        return None
    return (r["pipeline_seconds"] - r["core_seconds"]) / r["n"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=200_000, help="reports per measurement")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is kept)")
    p.add_argument("--json", metavar="OUT", help="write the records to this file")
    ns = p.parse_args(argv)
    if ns.users < BATCH or ns.repeat < 1:
        p.error(f"--users must be >= {BATCH} and --repeat >= 1")
    load = os.getloadavg()[0]
    add: dict[str, float] = {}
    for mech in ("grr", "olh", "blh", "oue", "sue", "hr", "ss"):
        task = parse_task({"task_id": "cost", "mechanism": mech, "epsilon": 1.0, "domain_size": 1024})
        add[mech] = 1e6 * add_cost(task, ns.users, ns.repeat)
    slope = {}
    for mech in ("oue", "sue"):
        task = parse_task({"task_id": "cost", "mechanism": mech, "epsilon": 1.0, "domain_size": 4096})
        slope[mech] = (1e6 * add_cost(task, ns.users // 4, ns.repeat) - add[mech]) / (4096 - 1024)
    for name, kind in KINDS.items():
        if name != "frequency" and kind.example is not None:
            add[name] = 1e6 * add_cost(parse_task(dict(kind.example)), ns.users // 4, ns.repeat)
    fin = {str(d): 1e6 * finalize_cost(d, ns.repeat) for d in (4096, 65536)}
    runner = runner_cost()
    args = sys.argv[1:] if argv is None else argv
    out = {"command": "python -m bench.plan_costs " + " ".join(args), "load_avg_1m_start": load,
           "load_avg_1m_end": os.getloadavg()[0], "add_us_per_report": add,
           "oue_sue_us_per_report_per_value": slope, "finalize_us_per_value": fin,
           "runner_us_per_report": None if runner is None else 1e6 * runner}
    print(json.dumps(out, indent=2))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return out


if __name__ == "__main__":
    main()
