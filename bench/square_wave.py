"""Square-wave finalize benchmark: the numeric kind's EM(S) estimate with its bootstrapped quantile intervals.

    .venv/bin/python -m bench.square_wave --users 1000000 --epsilon 0.5,1,2 --data lognormal,bimodal \\
        [--quantiles 0.5,0.9,0.99] [--repeat 3] [--json OUT.json]

For each data set and epsilon it encodes ``--users`` clipped values with ``square-wave`` (``ldp.numeric``,
the task's defaults: 512 bins), accumulates them once, and times :func:`ldp.numeric.estimate` (best of
``--repeat``): ``finalize_s`` with the quantiles (the point EM plus the bootstrap replicas of their
intervals, what the aggregator's finalize runs per attribute and window), ``point_s`` without them (the
point EM alone). ``--dense`` runs the same EM with the dense transition matrix instead of its linear-time
products (``ldp.square_wave.SWOperator``), for a comparison under the same load. Times are wall clock and
CPU time of this process (``*_cpu_s``: the EM runs on one thread, so on a shared machine the CPU time is the
steadier figure). It prints one line per case and the true quantiles of the clipped values beside the
estimates and intervals, so a faster finalize that stops covering shows at once. Each record carries the
1-minute load average before and after (a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from ldp.numeric import estimate, make_numeric_mechanism

LOW, HIGH = 0.0, 100.0

#: value models on [LOW, HIGH] (clipped): a skewed one, a flat one and a two-peaked one
DATA: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "lognormal": lambda rng, n: rng.lognormal(3.0, 0.6, n),
    "uniform": lambda rng, n: rng.uniform(LOW, HIGH, n),
    "bimodal": lambda rng, n: np.where(rng.random(n) < 0.3, rng.normal(20, 4, n), rng.normal(70, 8, n)),
}


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> list[str]:
    names = [x for x in text.split(",") if x]
    bad = [x for x in names if x not in DATA]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown data {bad or text!r}; known: {', '.join(DATA)}")
    return names


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """The best wall-clock and CPU seconds of ``repeat`` calls, and the last result."""
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def run_case(data: str, epsilon: float, users: int, quantiles: Sequence[float], repeat: int,
             seed: int, dense: bool = False) -> dict[str, object]:
    """One data set at one epsilon: timings, estimates, intervals and the truth."""
    rng = np.random.default_rng(seed)
    values = np.clip(DATA[data](rng, users), LOW, HIGH)
    mech = make_numeric_mechanism("square-wave", epsilon, LOW, HIGH)
    if dense:
        mech.sw.em_matrix = mech.sw.matrix  # type: ignore[method-assign]
    acc = mech.add(mech.create_accumulator(), mech.encode(values, rng=rng))
    load = os.getloadavg()[0]
    point_s, point_cpu_s, _ = _best(lambda: estimate(mech, acc, quantiles=()), repeat)
    finalize_s, finalize_cpu_s, est = _best(lambda: estimate(mech, acc, quantiles=quantiles), repeat)
    truth = np.quantile(values, quantiles)
    return {
        "data": data, "epsilon": epsilon, "users": users, "dense": dense, "point_s": round(point_s, 3),
        "point_cpu_s": round(point_cpu_s, 3), "finalize_s": round(finalize_s, 3),
        "finalize_cpu_s": round(finalize_cpu_s, 3), "em_iterations": est.em_iterations,  # type: ignore[attr-defined]
        "quantiles": [{**q.to_dict(), "truth": float(t), "covered": bool(q.ci_low <= t <= q.ci_high)}
                      for q, t in zip(est.quantiles, truth)],  # type: ignore[attr-defined]
        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.square_wave", description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=1_000_000, help="reports per case (default 1e6)")
    ap.add_argument("--epsilon", type=_floats, default=[0.5, 1.0, 2.0], help="epsilons (default 0.5,1,2)")
    ap.add_argument("--data", type=_names, default=list(DATA), help=f"value models ({', '.join(DATA)})")
    ap.add_argument("--quantiles", type=_floats, default=[0.5, 0.9, 0.99], help="default 0.5,0.9,0.99")
    ap.add_argument("--repeat", type=int, default=3, help="timings per case; the best is kept (default 3)")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--dense", action="store_true", help="dense matrix products (as before SWOperator)")
    ap.add_argument("--json", help="write the records here")
    ns = ap.parse_args(argv)
    if ns.users < 1 or ns.repeat < 1:
        ap.error("--users and --repeat must be positive")
    records = []
    for data in ns.data:
        for eps in ns.epsilon:
            rec = run_case(data, eps, ns.users, ns.quantiles, ns.repeat, ns.seed, ns.dense)
            records.append(rec)
            qs = "  ".join(f"q{q['q']:g} {q['value']:.2f} [{q['ci_low']:.2f}, {q['ci_high']:.2f}] "
                           f"true {q['truth']:.2f}{'' if q['covered'] else ' MISSED'}"
                           for q in rec["quantiles"])  # type: ignore[union-attr]
            print(f"{data:9s} eps {eps:<4g} n {ns.users:,}: finalize {rec['finalize_s']:.2f} s "
                  f"(CPU {rec['finalize_cpu_s']:.2f} s; point EM {rec['point_s']:.2f} s, "
                  f"{rec['em_iterations']} it)  {qs}", flush=True)
    if ns.json:
        command = " ".join(["python -m bench.square_wave", *sys.argv[1:]])
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump({"command": command, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
