"""Heavy hitters in the shuffled mode at a central target, against pure local DP.

    nice -n 5 .venv/bin/python -m experiments.heavy_hitters_shuffled \
        --json experiments/results/heavy_hitters_shuffled.json \
        --plot experiments/results/heavy_hitters_shuffled.png [--seeds 2] [--n 1000000]

Population (``bench.heavy_hitters.zipf_population``): Zipf(``--zipf``) over ``--strings`` random
``--bytes``-byte strings, ``--n`` users. The task is the kind's default layout (``top_k`` ``--top_k``)
with ``"epsilon": "auto"`` under the central target ``(--central_epsilon, --delta)`` for one shuffled batch
of all ``n`` reports: the task model picks ``eps0``, the largest local epsilon at which every level meets
the target at its planned count (``ldp.shuffle.levels``). Three arms per seed, on the same users:

* ``shuffled``: the reports at ``eps0``, permuted with the shuffler's CSPRNG permutation
  (``ldp.anonymity.secure_permutation``), counted per level, given the central figure of those real
  counts (:func:`ldp.shuffle.central_epsilon_report` with ``group_counts``: the largest level's), then
  aggregated;
* ``ldp_eps0``: the same reports unpermuted (pure LDP at ``eps0``: local guarantee ``eps0`` only); the
  aggregate is order-free, so its rows must equal the shuffled arm's (checked, ``identical``);
* ``ldp_target``: fresh reports at the local epsilon equal to the central target (pure LDP at 1).

Scores (``bench.heavy_hitters.score``): recall of the strings at or above ``--heavy`` (0.2%), precision
counting reported strings at or above ``--useful`` (0.1%), F1, coverage of the reported 95% intervals,
and recall per band of true frequency (``experiments.heavy_hitters.recall_by_band``).
``--summarize JSON`` prints the write-up's table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ARMS = ("shuffled", "ldp_eps0", "ldp_target")
SCORES = ("recall", "precision", "f1", "coverage")


def make_task(args: argparse.Namespace) -> Any:
    """The heavy_hitters task with ``"epsilon": "auto"`` under the central target (one batch of ``n``)."""
    from ldp.task import parse_task

    return parse_task({
        "task_id": "hh-shuffled", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": "auto",
        "max_length": args.bytes, "top_k": args.top_k, "expected_users": args.n,
        "anonymity": {"shuffled": True, "central_epsilon": args.central_epsilon, "delta": args.delta,
                      "min_reports": 1000, "time_precision_s": 3600},
    })


def _scored(pem: Any, reports: Any, truth: dict[bytes, float], args: argparse.Namespace) -> tuple[dict, Any]:
    from bench.heavy_hitters import score
    from experiments.heavy_hitters import recall_by_band

    t0, c0 = time.perf_counter(), time.process_time()
    result = pem.estimate(pem.add(pem.create_accumulator(), reports))
    row = score(result, truth, args.heavy, args.useful)
    row.update(recall_by_band=recall_by_band(result, truth, args.heavy),
               estimate_s=time.perf_counter() - t0, estimate_cpu_s=time.process_time() - c0)
    return row, result


def _rows_of(result: Any) -> list[tuple[bytes, float, float]]:
    return [(h.value, float(h.estimate), float(h.std)) for h in result.hitters]


def shuffled_claim(task: Any, reports: Any) -> dict[str, Any]:
    """The central figure of one batch of ``reports`` at its real level counts (what the job claims)."""
    from ldp.anonymity import shuffle_accounting
    from ldp.shuffle import central_epsilon_report
    from ldp.shuffle.levels import central_epsilon_levels

    accounting, _ = shuffle_accounting(task)
    counts = {int(g): int(c) for g, c in zip(*np.unique(reports.level, return_counts=True))}
    rep = central_epsilon_report(task.epsilon, len(reports), task.anonymity.delta, accounting,
                                 group_counts=counts)
    return {"central_epsilon": float(rep.epsilon), "central_delta": task.anonymity.delta,
            "levels": central_epsilon_levels(task.epsilon, counts, task.anonymity.delta, accounting),
            "planned": accounting.planned_counts(len(reports), task.epsilon)}


def run_seed(task: Any, args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    """The three arms on one population (module docstring)."""
    import dataclasses

    from bench.heavy_hitters import zipf_population
    from ldp.anonymity import secure_permutation
    from ldp.heavy_hitters.pem import HHReports

    rng = np.random.default_rng([seed, args.bytes, int(args.zipf * 100), args.n])
    batch, truth = zipf_population(args.n, args.strings, args.bytes, args.zipf, rng)
    common = {"seed": seed, "n": args.n, "zipf": args.zipf, "bytes": args.bytes}
    pem = task.make_mechanism()
    reports = pem.encode(batch, rng=np.random.default_rng([seed, 1]))
    perm = secure_permutation(len(reports))
    shuffled = HHReports(reports.level[perm], reports.seed[perm], reports.y[perm])
    claim = shuffled_claim(task, shuffled)
    row_s, res_s = _scored(pem, shuffled, truth, args)
    row_l, res_l = _scored(pem, reports, truth, args)
    target = dataclasses.replace(task, epsilon=float(args.central_epsilon)).make_mechanism()
    row_t, _ = _scored(target, target.encode(batch, rng=np.random.default_rng([seed, 2])), truth, args)
    return [
        {**common, **row_s, "arm": "shuffled", "local_epsilon": task.epsilon, **claim},
        {**common, **row_l, "arm": "ldp_eps0", "local_epsilon": task.epsilon, "central_epsilon": task.epsilon,
         "identical": _rows_of(res_l) == _rows_of(res_s)},
        {**common, **row_t, "arm": "ldp_target", "local_epsilon": float(args.central_epsilon),
         "central_epsilon": float(args.central_epsilon)},
    ]


def summary_table(result: dict[str, Any]) -> list[str]:
    """Means over seeds per arm (the write-up's table)."""
    lines = ["| arm | local eps | central eps (delta 1e-9) | recall | precision | F1 | coverage | reported "
             "| seeds |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm in ARMS:
        rows = [r for r in result["records"] if r["arm"] == arm]
        if not rows:
            continue
        mean = {k: float(np.mean([r[k] for r in rows])) for k in (*SCORES, "reported", "central_epsilon")}
        lines.append(f"| {arm} | {rows[0]['local_epsilon']:.3f} | {mean['central_epsilon']:.4f} | "
                     f"{mean['recall']:.3f} | {mean['precision']:.3f} | {mean['f1']:.3f} | "
                     f"{mean['coverage']:.3f} | {mean['reported']:.1f} | {len(rows)} |")
    return lines


def plot(result: dict[str, Any], path: str | Path) -> None:
    """Recall, precision, F1 and coverage per arm: the mean as a bar, each seed as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.4))
    width = 0.26
    target, eps0 = result["setup"]["central_epsilon"], result["eps0"]
    labels = {"shuffled": f"shuffled (local {eps0:.2f}, central {target:g})",
              "ldp_eps0": f"pure LDP at eps0 = {eps0:.2f}", "ldp_target": f"pure LDP at eps = {target:g}"}
    for i, arm in enumerate(ARMS):
        rows = [r for r in result["records"] if r["arm"] == arm]
        x = np.arange(len(SCORES)) + (i - 1) * width
        ax.bar(x, [np.mean([r[k] for r in rows]) for k in SCORES], width, label=labels[arm])
        for j, k in enumerate(SCORES):
            ax.plot([x[j]] * len(rows), [r[k] for r in rows], "k.", markersize=3)
    ax.set_xticks(np.arange(len(SCORES)), SCORES)
    ax.set_ylim(0, 1.05)
    s = result["setup"]
    ax.set_title(f"heavy hitters, Zipf({s['zipf']:g}) over {s['strings']:,} random {s['bytes']}-byte "
                 f"strings, n = {s['n']:,}", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="output JSON (rewritten after every seed)")
    ap.add_argument("--plot", help="output PNG")
    ap.add_argument("--n", type=int, default=1_000_000, help="users (one shuffled batch)")
    ap.add_argument("--central_epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--strings", type=int, default=100_000)
    ap.add_argument("--bytes", type=int, default=6)
    ap.add_argument("--top_k", type=int, default=64)
    ap.add_argument("--heavy", type=float, default=0.002, help="recall counts strings at or above this")
    ap.add_argument("--useful", type=float, default=0.001, help="precision counts strings at or above this")
    ap.add_argument("--seeds", type=int, default=2)
    args, extra = ap.parse_known_args(argv)
    problems = [f"unknown arguments {' '.join(extra)}"] if extra else []
    if args.seeds < 1 or args.n < 2000 or args.strings < 1 or not 1 <= args.bytes <= 8:
        problems.append("need --seeds >= 1, --n >= 2000, --strings >= 1 and --bytes in [1, 8]")
    if not (0 < args.central_epsilon <= 50 and 0 < args.delta <= 1e-3):
        problems.append("need --central_epsilon in (0, 50] and --delta in (0, 1e-3]")
    if problems:
        print(f"experiments.heavy_hitters_shuffled: {'; '.join(problems)}", file=sys.stderr)
        raise SystemExit(2)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    t0 = time.perf_counter()
    setup = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    words = argv if argv is not None else sys.argv[1:]
    setup["command"] = "python -m experiments.heavy_hitters_shuffled " + " ".join(words)
    task = make_task(args)
    result: dict[str, Any] = {"setup": setup, "eps0": task.epsilon, "eps0_s": time.perf_counter() - t0,
                              "layout": repr(task.make_mechanism()), "records": [], "complete": False,
                              "load_avg_start": os.getloadavg()[0]}
    for seed in range(args.seeds):
        for row in run_seed(task, args, seed):
            print(f"seed {seed} {row['arm']:>10}: recall {row['recall']:.3f} precision "
                  f"{row['precision']:.3f} f1 {row['f1']:.3f} coverage {row['coverage']:.3f} central "
                  f"{row['central_epsilon']:.4f}", file=sys.stderr, flush=True)
            result["records"].append(row)
        result["seconds"] = time.perf_counter() - t0
        Path(args.json).write_text(json.dumps(result, indent=1, default=_json) + "\n", encoding="utf-8")
    result.update(complete=True, load_avg_end=os.getloadavg()[0], seconds=time.perf_counter() - t0)
    Path(args.json).write_text(json.dumps(result, indent=1, default=_json) + "\n", encoding="utf-8")
    if args.plot:
        plot(result, args.plot)
    return result


def _json(x: object) -> object:
    if isinstance(x, bytes):
        return x.hex()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON: {type(x).__name__}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        print("\n".join(summary_table(json.loads(Path(sys.argv[2]).read_text(encoding="utf-8")))))
        sys.exit(0)
    main()
