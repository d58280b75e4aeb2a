"""Longitudinal reproduction: fresh OLH against memoized OLH, LOLOHA and RAPPOR over windows.

    .venv/bin/python -m experiments.longitudinal --users 100000 --windows 30 --epsilon 1 \\
        --json OUT.json [--plot OUT.png]

One simulated population, shared by every method, reports once per window for ``--windows`` windows.

Drift model (``--change_rate r``, ``--zipf s``, ``--shift k``): the population's target distribution in
window ``t`` is a Zipf(``s``) law over the ``d`` values whose ranks are rotated by ``k * t`` positions
(value ``(j + k t) mod d`` has the ``j``-th largest weight), so popularity moves through the domain. In
window 0 every user draws its value from the window-0 law; at the start of each later window every user
independently, with probability ``r``, redraws its value from that window's law (it may draw the same value
again), otherwise keeps it. Users are the same across windows and methods; each method gets its own
independent noise (seeded children of one ``SeedSequence``).

Methods (``--methods``; ``epsilon`` = ``--epsilon``, ``e_1 = --alpha * epsilon``):

* ``fresh``: OLH at ``epsilon`` per report, a fresh report every window;
* ``fresh-e1``: OLH at ``e_1`` per report (the same one-report loss as the memoized methods);
* ``memo-olh``: :class:`ldp.longitudinal.memo.MemoOLH`, ``epsilon_inf = epsilon``, ``epsilon_1 = e_1``;
* ``loloha``: :class:`ldp.longitudinal.memo.LOLOHA`, same budgets, ``g`` = ``--loloha_g`` (default: the
  variance-optimal power of two, :func:`ldp.longitudinal.memo.lh_buckets`; at eps = 1, alpha = 0.5 it is 2,
  i.e. BiLOLOHA);
* ``bi-loloha``: LOLOHA with ``g = 2`` (the smallest longitudinal budget, ``2 * epsilon``);
* ``rappor``: :class:`ldp.longitudinal.memo.RAPPOR` (one-hot, symmetric permanent and instantaneous flips);
* ``memo-grr``: :class:`ldp.longitudinal.memo.MemoGRR` (L-GRR).

Records (one per method and window): ``method``, ``window``, ``mse`` (mean over the ``d`` values of the
squared error of the unbiased estimates, averaged over ``--trials``), ``mse_theory`` (the closed-form
variance averaged over the values: the expected MSE), ``epsilon_spent`` (the tight per-user privacy loss
after that window, at ``--delta``, for the population's worst user: fresh methods compose the window's
reports, memoized ones the permanent responses of the user's distinct memoization keys, capped by the
any-history figure; see ``docs/longitudinal.md``), ``epsilon_spent_basic`` (basic composition),
``epsilon_spent_median`` (the median user), ``epsilon_any_history`` (tight; protects when values changed
too), ``keys_max`` / ``keys_mean`` (distinct memoization keys per user so far; fresh: reports).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp.longitudinal.accounting import (
    any_history_epsilon,
    composed_epsilon,
    instantaneous_pld,
    report_pld,
    values_epsilon,
)
from ldp.longitudinal.memo import LOLOHA, RAPPOR, MemoGRR, MemoizedOracle, MemoOLH
from ldp.oracles import OLH, FrequencyOracle
from pipelines.cli import job_parser, parse_job_args

METHODS = ("fresh", "fresh-e1", "memo-olh", "loloha", "bi-loloha", "rappor", "memo-grr")
DEFAULT_METHODS = "fresh,fresh-e1,memo-olh,loloha,rappor,memo-grr"


def target_law(d: int, zipf: float, shift: int, window: int) -> np.ndarray:
    """The drift model's law in ``window``: Zipf(``zipf``) weights rotated by ``shift * window``."""
    w = 1.0 / np.arange(1, d + 1) ** zipf
    w /= w.sum()
    return np.roll(w, (shift * window) % d)


def make_method(name: str, epsilon: float, alpha: float, d: int, loloha_g: int | None) -> FrequencyOracle:
    e1 = alpha * epsilon
    if name == "fresh":
        return OLH(epsilon, d)
    if name == "fresh-e1":
        return OLH(e1, d)
    if name == "memo-olh":
        return MemoOLH(epsilon, d, epsilon_1=e1)
    if name == "loloha":
        return LOLOHA(epsilon, d, epsilon_1=e1, g=loloha_g)
    if name == "bi-loloha":
        return LOLOHA(epsilon, d, epsilon_1=e1, g=2)
    if name == "rappor":
        return RAPPOR(epsilon, d, epsilon_1=e1)
    if name == "memo-grr":
        return MemoGRR(epsilon, d, epsilon_1=e1)
    raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")


class _Accountant:
    """Cached tight figures of one method (each composition is computed once)."""

    def __init__(self, oracle: FrequencyOracle, delta: float) -> None:
        self.o, self.delta = oracle, delta
        self.memo = isinstance(oracle, MemoizedOracle)
        self._report = None if self.memo else report_pld(oracle)
        self._fresh: dict[int, float] = {}
        self._values: dict[int, dict[str, float]] = {}
        self._any: dict[int, dict[str, float]] = {}

    def fresh(self, k: int) -> float:
        if k not in self._fresh:
            self._fresh[k] = min(k * self.o.epsilon, composed_epsilon(self._report, k, self.delta))
        return self._fresh[k]

    def memoized(self, reports: int, keys: int) -> dict[str, float]:
        """As :func:`ldp.longitudinal.accounting.memoized_epsilon`, from cached pieces."""
        if keys not in self._values:
            self._values[keys] = values_epsilon(self.o, keys, self.delta)
        if reports not in self._any:
            self._any[reports] = any_history_epsilon(self.o, reports, self.delta)
        v, a = self._values[keys], self._any[reports]
        return {"basic": min(v["basic"], a["basic"]), "tight": min(v["tight"], a["tight"]),
                "basic_any_history": a["basic"], "tight_any_history": a["tight"]}


def run(*, users: int, windows: int, epsilon: float, alpha: float, d: int, methods: list[str],
        trials: int, seed: int, change_rate: float, zipf: float, shift: int, delta: float,
        loloha_g: int | None, log=print) -> tuple[list[dict], dict[str, Any]]:
    """Runs the reproduction; returns ``(records, methods' descriptions)``."""
    oracles = {m: make_method(m, epsilon, alpha, d, loloha_g) for m in methods}
    accountants = {m: _Accountant(o, delta) for m, o in oracles.items()}
    root = np.random.SeedSequence(seed)
    pop_ss, *method_ss = root.spawn(1 + len(methods))
    sq = {m: np.zeros(windows) for m in methods}
    theory = {m: np.zeros(windows) for m in methods}
    keys_max = {m: np.zeros(windows, dtype=np.int64) for m in methods}
    keys_med = {m: np.zeros(windows) for m in methods}
    keys_mean = {m: np.zeros(windows) for m in methods}
    for trial in range(trials):
        pop_rng = np.random.default_rng(pop_ss.spawn(1)[0])
        user_keys = pop_rng.integers(0, 2**64, size=users, dtype=np.uint64)
        rngs = {m: np.random.default_rng(ss.spawn(1)[0]) for m, ss in zip(methods, method_ss)}
        seen = {m: np.zeros((users, getattr(o, "max_memo_keys", d)), dtype=bool)
                for m, o in oracles.items() if isinstance(o, MemoizedOracle)}
        vals = pop_rng.choice(d, size=users, p=target_law(d, zipf, shift, 0))
        for t in range(windows):
            if t:
                move = pop_rng.random(users) < change_rate
                vals[move] = pop_rng.choice(d, size=int(move.sum()), p=target_law(d, zipf, shift, t))
            truth = np.bincount(vals, minlength=d) / users
            for m, o in oracles.items():
                t0 = time.perf_counter()
                if isinstance(o, MemoizedOracle):
                    reports = o.simulate(vals, user_keys, rng=rngs[m], task_id=f"longitudinal-{trial}")
                    k = o.simulate_memo_keys(vals, user_keys, task_id=f"longitudinal-{trial}")
                    seen[m][np.arange(users), k] = True
                    count = seen[m].sum(axis=1)
                    keys_max[m][t] = max(keys_max[m][t], int(count.max()))
                    keys_med[m][t] += float(np.median(count)) / trials
                    keys_mean[m][t] += float(count.mean()) / trials
                else:
                    reports = o.encode(vals, rng=rngs[m])
                    keys_max[m][t] = t + 1
                    keys_med[m][t] += (t + 1) / trials
                    keys_mean[m][t] += (t + 1) / trials
                est = o.estimate_reports(reports)
                sq[m][t] += float(np.mean((est.frequencies - truth) ** 2)) / trials
                theory[m][t] += float(np.mean(o.variance(users, truth))) / trials
                if t == 0 and trial == 0:
                    log(f"  {m}: window 0 in {time.perf_counter() - t0:.2f} s")
        log(f"trial {trial + 1}/{trials} done")
    records: list[dict] = []
    for m, o in oracles.items():
        acc = accountants[m]
        for t in range(windows):
            k = t + 1
            if acc.memo:
                worst = acc.memoized(k, int(keys_max[m][t]))
                med = acc.memoized(k, max(1, int(round(keys_med[m][t]))))
                spent, basic, median = worst["tight"], worst["basic"], med["tight"]
                any_history = worst["tight_any_history"]
            else:
                spent = median = any_history = acc.fresh(k)
                basic = k * o.epsilon
            records.append({
                "method": m, "window": t, "mse": sq[m][t], "mse_theory": theory[m][t],
                "mse_ratio": sq[m][t] / theory[m][t],
                "epsilon_spent": spent, "epsilon_spent_basic": basic, "epsilon_spent_median": median,
                "epsilon_any_history": any_history,
                "keys_max": int(keys_max[m][t]), "keys_mean": keys_mean[m][t],
            })
    described = {}
    for m, o in oracles.items():
        desc = {k: v for k, v in o.describe().items() if isinstance(v, (int, float, str, bool))}
        if isinstance(o, MemoizedOracle):
            inst = instantaneous_pld(o)
            desc["instantaneous_pld"] = inst is not None
        described[m] = desc
    return records, described


def summary(records: list[dict], windows: int) -> list[dict]:
    """The last window of each method, with its MSE and budget against ``fresh``."""
    last = {r["method"]: r for r in records if r["window"] == windows - 1}
    ref = last.get("fresh")
    out = []
    for r in last.values():
        row = {k: r[k] for k in ("method", "mse", "mse_theory", "epsilon_spent", "epsilon_spent_basic",
                                 "epsilon_spent_median", "epsilon_any_history", "keys_max")}
        if ref is not None:
            row["mse_vs_fresh"] = r["mse_theory"] / ref["mse_theory"]
            row["budget_saving_vs_fresh"] = ref["epsilon_spent"] / r["epsilon_spent"]
        out.append(row)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| method | MSE (last window) | theory | eps spent (tight) | basic | any history | keys | "
             "MSE / fresh | saving vs fresh |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['mse']:.3g} | {r['mse_theory']:.3g} | {r['epsilon_spent']:.3g} | "
            f"{r['epsilon_spent_basic']:.3g} | {r['epsilon_any_history']:.4g} | {r['keys_max']} | "
            f"{r.get('mse_vs_fresh', math.nan):.2f} | {r.get('budget_saving_vs_fresh', math.nan):.1f} |"
        )
    return "\n".join(lines)


def plot(records: list[dict], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in METHODS if any(r["method"] == m for r in records)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    for i, m in enumerate(methods):
        rs = sorted((r for r in records if r["method"] == m), key=lambda r: r["window"])
        w = [r["window"] + 1 for r in rs]
        c = f"C{i}"
        axes[0].plot(w, [r["mse"] for r in rs], color=c, marker="o", ms=2, label=m)
        axes[0].plot(w, [r["mse_theory"] for r in rs], color=c, ls=":", lw=1)
        axes[1].plot(w, [r["epsilon_spent"] for r in rs], color=c, marker="o", ms=2, label=f"{m} (tight)")
        axes[1].plot(w, [r["epsilon_spent_basic"] for r in rs], color=c, ls="--", lw=1)
        axes[2].plot(w, [r["epsilon_spent_median"] for r in rs], color=c, marker="o", ms=2, label=m)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("window")
    axes[0].set_ylabel("MSE per window (dotted: closed form)")
    axes[0].legend(fontsize=7)
    axes[1].set_yscale("log")
    axes[1].set_xlabel("window")
    axes[1].set_ylabel("epsilon spent by the worst user (dashed: basic)")
    axes[1].legend(fontsize=7)
    axes[2].set_yscale("log")
    axes[2].set_xlabel("window")
    axes[2].set_ylabel("epsilon spent by the median user (tight)")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = job_parser(__doc__.split("\n\n")[0], beam_options=False)
    ap.add_argument("--users", type=int, default=100_000, help="simulated users (the same in every window)")
    ap.add_argument("--windows", type=int, default=30, help="windows; every user reports once per window")
    ap.add_argument("--epsilon", type=float, default=1.0, help="fresh: per report; memoized: epsilon_inf")
    ap.add_argument("--alpha", type=float, default=0.5,
                    help="epsilon_1 = alpha * epsilon (memoized, fresh-e1)")
    ap.add_argument("--domain_size", type=int, default=100, help="d")
    ap.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma-separated, from: {', '.join(METHODS)}")
    ap.add_argument("--trials", type=int, default=1, help="independent repetitions (fresh population)")
    ap.add_argument("--seed", type=int, default=0, help="entropy of the run's numpy SeedSequence")
    ap.add_argument("--change_rate", type=float, default=0.1, help="P[a user redraws its value] per window")
    ap.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the target law")
    ap.add_argument("--shift", type=int, default=1, help="rank rotation of the target law per window")
    ap.add_argument("--delta", type=float, default=1e-9, help="delta of the tight figures")
    ap.add_argument("--loloha_g", type=int, default=None, help="LOLOHA buckets (default: variance-optimal)")
    ap.add_argument("--json", required=True, help="output JSON path")
    ap.add_argument("--plot", default=None, help="output PNG path")
    ap.add_argument("--title", default="", help="plot title")
    args, _ = parse_job_args(ap, argv, beam=False)
    raw = list(sys.argv[1:] if argv is None else argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        ap.error(f"unknown --methods {bad}; known: {', '.join(METHODS)}")
    if args.users < 2 or args.windows < 1 or args.trials < 1:
        ap.error("--users must be >= 2, --windows and --trials >= 1")
    if not 0 <= args.change_rate <= 1:
        ap.error("--change_rate must be in [0, 1]")
    if not 0 < args.alpha <= 1:
        ap.error("--alpha must be in (0, 1]")
    if not 0 < args.delta < 1:
        ap.error("--delta must be in (0, 1)")
    t0 = time.perf_counter()
    try:
        records, described = run(
            users=args.users, windows=args.windows, epsilon=args.epsilon, alpha=args.alpha,
            d=args.domain_size, methods=methods, trials=args.trials, seed=args.seed,
            change_rate=args.change_rate, zipf=args.zipf, shift=args.shift, delta=args.delta,
            loloha_g=args.loloha_g,
        )
    except ValueError as exc:
        ap.error(str(exc))
    wall = time.perf_counter() - t0
    rows = summary(records, args.windows)
    out = {
        "command": "python -m experiments.longitudinal " + " ".join(raw),
        "wall_seconds": wall,
        "config": {"users": args.users, "windows": args.windows, "epsilon": args.epsilon, "alpha": args.alpha,
                   "epsilon_1": args.alpha * args.epsilon, "domain_size": args.domain_size,
                   "trials": args.trials, "seed": args.seed, "delta": args.delta,
                   "drift": {"change_rate": args.change_rate, "zipf": args.zipf, "shift": args.shift}},
        "methods": described,
        "summary": rows,
        "records": records,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(records, args.plot, args.title or (
            f"n = {args.users:,}, d = {args.domain_size}, eps = {args.epsilon:g}, "
            f"e_1 = {args.alpha * args.epsilon:g}, change rate {args.change_rate:g}/window"))
    print(table(rows))
    print(f"wall {wall:.1f} s")
    return records


if __name__ == "__main__":
    main()
