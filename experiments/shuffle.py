"""Shuffled LDP against pure LDP at the same central guarantee (the anonymous-collection issue).

    .venv/bin/python -m experiments.shuffle --users 10000000 --central_epsilon 1 --delta 1e-9 \
        --domain_size 1024 --trials 3 --json experiments/results/shuffle.json \
        --plot experiments/results/shuffle.png

For every ``n`` of the grid (powers of ten from 10^4 up to ``--users``) and every mechanism, the local
epsilon ``eps0`` is the one the task model chooses for the central target (``"epsilon": "auto"`` with
``anonymity.central_epsilon`` = ``--central_epsilon``, ``delta``, ``expected_reports = n``:
``ldp.task`` -> ``ldp.shuffle.local_epsilon_for_central``), and the same task without the section, at
``epsilon = --central_epsilon``, is the pure-LDP baseline (the same central guarantee, since an eps-LDP
report is eps-DP for the analyst, with delta = 0). Both run the real mechanisms through the numpy core:

* frequency (``olh``, ``grr``, ``auto``; d = ``--domain_size``): ``oracle.encode`` -> ``add`` ->
  ``estimate`` over ``n`` users drawn from Zipf(1.1); ``mse`` is the mean over the d values of the squared
  error of the (unprocessed) estimate against the population's empirical frequencies, averaged over
  trials; ``mse_theory`` the oracle's closed-form variance at the true frequencies (its mean over values);
* range (``hdg``, 2 attributes of 64 values, the range code's ``mechanism.fit``): ``mse`` over 200
  random 2-D range queries (omega = 0.5) against the true answers.

No sufficient-statistics shortcut: every report is encoded and aggregated, n = 10^7 included.

Records (``records`` of the JSON): ``mechanism``, ``kind``, ``n``, ``central_epsilon``, ``central_delta``
(the target), ``local_epsilon`` (the chosen eps0), ``central_epsilon_achieved`` (the accountant's figure
for ``n`` shuffled reports at eps0, with ``accounting`` and ``method``), ``oracle`` (what the mechanism
resolves to at eps0) and ``pure_oracle`` (at the central epsilon), ``mse``, ``mse_pure_ldp``, ``ratio``
(``mse_pure_ldp / mse``), their standard errors over trials, ``trials``, seconds. ``accountant`` holds the
accountant table: per ``(n, eps0)`` the FMT closed form, the general bound the accountant uses, GRR's
blanket bound on two values, the exact binary-RR value (n <= ``ldp.shuffle.BINARY_EXACT_MAX_N``) and the
all-equal-split lower bound; at delta = 1e-6 (the spec's cross-check grid) and at the run's delta for the
chosen eps0.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp.anonymity import shuffle_accounting
from ldp.datasets import sample_population
from ldp.datasets.multi import sample_records
from ldp.rangequery.queries import random_queries, true_answers
from ldp.rangequery.registry import group_oracle_specs
from ldp.shuffle import accountant as S
from ldp.task import parse_task
from pipelines.cli import job_parser, parse_job_args

FREQUENCY_MECHANISMS = ("olh", "grr", "auto")
RANGE_MECHANISMS = ("hdg",)
RANGE_SIZES = (64, 64)
RANGE_QUERIES = 200
ZIPF = "zipf:1.1"


def grid(users: int) -> list[int]:
    """Powers of ten from 10^4 up to ``users``, and ``users`` itself."""
    if users < 10_000:
        return [int(users)]
    out = [10**k for k in range(4, int(math.log10(users) + 1e-9) + 1)]
    return out if out[-1] == users else [*out, int(users)]


def _task(mechanism: str, n: int, target: float, delta: float, d: int, shuffled: bool) -> Any:
    """The task this run measures: eps0 chosen for the target at ``n`` (shuffled), or epsilon = target."""
    if mechanism in RANGE_MECHANISMS:
        attrs = [{"name": f"a{i}", "domain_size": s} for i, s in enumerate(RANGE_SIZES)]
        obj: dict[str, Any] = {"task_id": "x", "mechanism": mechanism, "attributes": attrs}
        obj["expected_users"] = n
    else:
        obj = {"task_id": "x", "mechanism": mechanism, "domain_size": d}
    if not shuffled:
        return parse_task({**obj, "epsilon": target})
    section = {"delta": delta, "central_epsilon": target, "expected_reports": n, "min_reports": min(n, 1000)}
    return parse_task({**obj, "epsilon": "auto", "anonymity": section})


def _frequency_mse(task: Any, values: np.ndarray, truth: np.ndarray, rng: np.random.Generator) -> float:
    oracle = task.make_oracle()
    est = oracle.estimate(oracle.add(oracle.create_accumulator(), oracle.encode(values, rng=rng)))
    return float(np.mean((np.asarray(est.frequencies) - truth) ** 2))


def _range_mse(
    task: Any, records: np.ndarray, queries: Any, truth: np.ndarray, rng: np.random.Generator
) -> float:
    model = task.make_mechanism().fit(records, rng=rng)
    return float(np.mean((np.asarray(model.answer(queries)) - truth) ** 2))


def _oracle_name(task: Any) -> str:
    """The oracle a task resolves to (range: its groups' oracles)."""
    if task.kind == "range":
        specs = group_oracle_specs(task.make_mechanism())
        return "+".join(sorted({str(spec.get("mechanism")) for spec in specs}))
    return str(task.make_oracle().name)


def _mean_se(vals: list[float]) -> tuple[float, float | None]:
    a = np.asarray(vals)
    return float(a.mean()), (float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else None)


def measure(
    ns: list[int], target: float, delta: float, d: int, trials: int, seed: int, log: Any = sys.stderr
) -> list[dict[str, Any]]:
    """One record per (mechanism, n): see the module docstring."""
    per_n = np.random.SeedSequence(seed).spawn(len(ns))
    out: list[dict[str, Any]] = []
    for i, n in enumerate(ns):
        tasks = {
            m: (_task(m, n, target, delta, d, True), _task(m, n, target, delta, d, False))
            for m in (*FREQUENCY_MECHANISMS, *RANGE_MECHANISMS)
        }
        errs: dict[tuple[str, bool], list[float]] = {(m, s): [] for m in tasks for s in (True, False)}
        secs: dict[str, float] = {m: 0.0 for m in tasks}
        truth = np.zeros(d)
        for t_ss in per_n[i].spawn(trials):
            data_ss, records_ss, query_ss, mech_ss = t_ss.spawn(4)
            mech_rngs = mech_ss.spawn(2 * len(tasks))
            values = sample_population(ZIPF, n, d, rng=np.random.default_rng(data_ss))
            truth = np.bincount(values, minlength=d) / n
            records = sample_records("gaussian:0.8", n, RANGE_SIZES, rng=np.random.default_rng(records_ss))
            q_rng = np.random.default_rng(query_ss)
            queries = random_queries(RANGE_SIZES, RANGE_QUERIES, 2, omega=0.5, rng=q_rng)
            answers = true_answers(records, queries)
            for j, (m, pair) in enumerate(tasks.items()):
                for k, (shuffled, task) in enumerate(zip((True, False), pair)):
                    rng = np.random.default_rng(mech_rngs[2 * j + k])
                    t0 = time.perf_counter()
                    if m in RANGE_MECHANISMS:
                        mse = _range_mse(task, records, queries, answers, rng)
                    else:
                        mse = _frequency_mse(task, values, truth, rng)
                    secs[m] += time.perf_counter() - t0
                    errs[(m, shuffled)].append(mse)
        for m, (shuffled_task, pure_task) in tasks.items():
            accounting, k = shuffle_accounting(shuffled_task)
            achieved = S.central_epsilon_report(shuffled_task.epsilon, n, delta, accounting, k)
            mse, mse_se = _mean_se(errs[(m, True)])
            pure, pure_se = _mean_se(errs[(m, False)])
            rec: dict[str, Any] = {
                "mechanism": m,
                "kind": shuffled_task.kind,
                "n": int(n),
                "central_epsilon": float(target),
                "central_delta": float(delta),
                "local_epsilon": float(shuffled_task.epsilon),
                "central_epsilon_achieved": float(achieved.epsilon),
                "accounting": accounting,
                "method": achieved.method,
                "oracle": _oracle_name(shuffled_task),
                "pure_oracle": _oracle_name(pure_task),
                "mse": mse,
                "mse_se": mse_se,
                "mse_pure_ldp": pure,
                "mse_pure_ldp_se": pure_se,
                "ratio": pure / mse if mse > 0 else math.inf,
                "trials": int(trials),
                "seconds": secs[m],
            }
            if m not in RANGE_MECHANISMS:
                # the closed-form variance at the last trial's frequencies, averaged over the values
                rec["mse_theory"] = float(np.mean(shuffled_task.make_oracle().variance(n, truth)))
                rec["mse_pure_ldp_theory"] = float(np.mean(pure_task.make_oracle().variance(n, truth)))
                rec["domain_size"] = int(d)
            else:
                rec["domain_sizes"] = list(RANGE_SIZES)
                rec["queries"] = RANGE_QUERIES
            out.append(rec)
            print(
                f"[shuffle] n={n:>9,} {m:>4}: eps0={rec['local_epsilon']:.3f} ({rec['oracle']}) "
                f"mse={mse:.3e} pure={pure:.3e} ratio={rec['ratio']:.0f} ({secs[m]:.1f}s)",
                file=log,
                flush=True,
            )
    return out


def accountant_table(
    ns: list[int], eps0s: list[float], delta: float, exact_max_n: int = 10_000
) -> list[dict[str, Any]]:
    """Per (n, eps0): the FMT closed form, the general bound, GRR's blanket bound on two values, the exact
    binary-RR value (None above ``exact_max_n`` or where the accountant does not compute it) and the
    all-equal-split lower bound."""
    rows = []
    for n in ns:
        for eps0 in eps0s:
            closed = S.central_epsilon_fmt_closed_form(eps0, n, delta)
            exact = None
            if n <= exact_max_n and S.binary_rr_exact_applies(n, delta):
                exact = S.central_epsilon_binary_rr_exact(eps0, n, delta)
            rows.append(
                {
                    "n": int(n),
                    "eps0": float(eps0),
                    "delta": float(delta),
                    "fmt_closed_form": None if math.isinf(closed) else float(closed),
                    "general": float(S.central_epsilon_general(eps0, n, delta)),
                    "binary_rr_blanket": float(S.central_epsilon_grr_blanket(eps0, n, delta, 2)),
                    "binary_rr_exact": exact,
                    "binary_rr_equal_split_lower": float(
                        S.central_epsilon_binary_rr_equal_split(eps0, n, delta)
                    ),
                }
            )
    return rows


def plot(result: dict[str, Any], path: str | Path) -> None:
    """Left: MSE against n, shuffled (solid) and pure LDP (dashed) per mechanism. Right: the ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = result["records"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.5, 5))
    colors = {"olh": "tab:blue", "grr": "tab:orange", "auto": "tab:green", "hdg": "tab:red"}
    for m in (*FREQUENCY_MECHANISMS, *RANGE_MECHANISMS):
        rows = sorted((r for r in recs if r["mechanism"] == m), key=lambda r: r["n"])
        if not rows:
            continue
        n = [r["n"] for r in rows]
        label = m + (" (range queries)" if m in RANGE_MECHANISMS else "")
        ax.plot(n, [r["mse"] for r in rows], "-o", color=colors[m], label=f"{label}, shuffled (eps0 chosen)")
        ax.plot(n, [r["mse_pure_ldp"] for r in rows], "--s", color=colors[m], alpha=0.7,
                label=f"{label}, pure LDP")  # fmt: skip
        ax2.plot(n, [r["ratio"] for r in rows], "-o", color=colors[m], label=label)
    for a in (ax, ax2):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("n (reports shuffled together)")
        a.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("MSE")
    ax2.set_ylabel("MSE pure LDP / MSE shuffled")
    ax2.axhline(300, color="grey", linestyle=":", label="300x")
    r0 = recs[0]
    ax.set_title(f"same central (eps, delta) = ({r0['central_epsilon']:g}, {r0['central_delta']:g})")
    ax2.set_title("gain of shuffling")
    ax.legend(fontsize=7)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = job_parser(__doc__.split("\n\n")[0], beam_options=False)
    ap.add_argument("--users", type=int, default=10_000_000, help="largest n of the grid (from 10^4)")
    ap.add_argument("--central_epsilon", type=float, default=1.0, help="central target epsilon")
    ap.add_argument("--delta", type=float, default=1e-9, help="central target delta")
    ap.add_argument("--domain_size", type=int, default=1024, help="frequency domain size")
    ap.add_argument("--trials", type=int, default=3, help="trials per n")
    ap.add_argument("--seed", type=int, default=0, help="entropy of the run's numpy SeedSequence")
    ap.add_argument("--json", required=True, help="output JSON path")
    ap.add_argument("--plot", help="output PNG path")
    ap.add_argument(
        "--table_n", default="1000,10000,100000,1000000", help="n of the accountant table (comma-separated)"
    )
    args, _ = parse_job_args(ap, argv, beam=False)
    if args.users < 1000 or args.trials < 1 or args.domain_size < 2:
        ap.error("need --users >= 1000, --trials >= 1, --domain_size >= 2")
    if not (0 < args.delta < 1e-3 + 1e-18 and 0 < args.central_epsilon <= 50):
        ap.error("need --delta in (0, 1e-3] and --central_epsilon in (0, 50]")
    t0 = time.perf_counter()
    ns = grid(args.users)
    records = measure(ns, args.central_epsilon, args.delta, args.domain_size, args.trials, args.seed)
    table_n = [int(float(x)) for x in args.table_n.split(",") if x]
    chosen = [(r["n"], r["local_epsilon"]) for r in records if r["mechanism"] == "olh"]
    result = {
        "setup": {
            "users": args.users,
            "grid": ns,
            "central_epsilon": args.central_epsilon,
            "delta": args.delta,
            "domain_size": args.domain_size,
            "trials": args.trials,
            "seed": args.seed,
            "frequency_data": ZIPF,
            "range_data": "gaussian:0.8",
            "range_domain_sizes": list(RANGE_SIZES),
            "range_queries": RANGE_QUERIES,
            "command": "python -m experiments.shuffle "
            + " ".join(argv if argv is not None else sys.argv[1:]),
        },
        "records": records,
        "accountant": {
            "spec_grid": accountant_table(table_n, [0.5, 1.0, 2.0, 4.0], 1e-6),
            "chosen_olh": [row for n, e in chosen for row in accountant_table([n], [e], args.delta)],
        },
        "seconds": time.perf_counter() - t0,
    }
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.plot:
        plot(result, args.plot)
    return result


if __name__ == "__main__":
    main()
