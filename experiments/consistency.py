"""Reproduce the NDSS 2020 consistency evaluation (Wang et al., Figs. 4, 9, 10) on Zipf data.

For each epsilon and trial: ``n`` users with values drawn once from a Zipf distribution over ``d`` values
(``Pr[v] ∝ (v+1)^-s``, default ``s = 1.5``) perturb their values with the real frequency oracle
(:func:`ldp.oracles.make_oracle`: encode -> create_accumulator/add -> estimate); every post-processing method
of :mod:`ldp.postprocess` is applied to the same estimates, and three errors are measured against the
empirical frequencies of the population (the paper's metrics, evaluation metrics):

* ``full_domain_mse``: ``(1/d) sum_v (f_v - f'_v)^2``;
* ``topk_mse``: the same over the ``k`` values with the highest *true* frequency (default ``k = 32``, the
  largest ``k`` of the paper's Fig. 10; the oracle and the methods do not know which they are);
* ``set_query_mse``: ``Q`` random subsets per trial, each of ``rho% * d`` distinct values drawn uniformly
  without replacement (the paper's ``D_{s rho}``; default ``rho = 10``, ``Q = 200``); error of the subset
  sum ``sum_{v in A} f'_v`` (Post-Pos clips each subset answer at 0 instead of the per-value estimates).

Records (JSON list): ``method, epsilon, metric, value`` (mean over trials), ``stderr`` (standard error of
that mean over trials), ``n, d, trials, mechanism, zipf_s, k, rho, set_queries, seed``.

Usage::

    .venv/bin/python -m experiments.consistency --users 1000000 --domain_size 1024 --epsilons 0.2,0.5,1,2,4 \
        --trials 50 --json experiments/results/consistency.json --plot experiments/results/consistency.png
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from ldp import postprocess as pp
from ldp.datasets import sample_population
from ldp.oracles import make_oracle
from ldp.postprocess import Method
from pipelines.cli import job_parser, parse_job_args

METRICS = ("full_domain_mse", "topk_mse", "set_query_mse")


def random_subsets(rng: np.random.Generator, d: int, size: int, count: int) -> np.ndarray:
    """``count`` boolean masks, each with ``size`` distinct members drawn uniformly without replacement."""
    keys = rng.random((count, d))
    idx = np.argpartition(keys, size - 1, axis=1)[:, :size]
    mask = np.zeros((count, d), dtype=bool)
    np.put_along_axis(mask, idx, True, axis=1)
    return mask


def apply_all(est, oracle, *, alpha: float) -> dict[Method, np.ndarray]:
    """Every method's per-value output for one FrequencyEstimate (Power is computed once for PowerNS)."""
    f, var, n = est.frequencies, est.variance, est.n
    out: dict[Method, np.ndarray] = {}
    for m in Method:
        if m is Method.POWER_NS:
            continue
        opts: dict = {}
        if m is Method.MLE_APX:
            opts = {"p": oracle.p, "q": oracle.q}
        elif m is Method.BASE_CUT:
            opts = {"alpha": alpha}
        out[m] = pp.postprocess(f, m, variance=var, n=n, **opts)
    out[Method.POWER_NS] = pp.norm_sub(out[Method.POWER])  # == pp.power_ns(f, var, n=n), by definition
    return out


def run(
    *,
    n: int,
    d: int,
    epsilons: list[float],
    trials: int,
    mechanism: str = "olh",
    seed: int = 0,
    zipf_s: float = 1.5,
    k: int = 32,
    rho: float = 10.0,
    set_queries: int = 200,
    alpha: float = 2.0,
    log=sys.stderr,
) -> list[dict]:
    """Run the evaluation; returns the list of records (see the module docstring)."""
    if trials < 1 or n < 1 or d < 2:
        raise ValueError("need trials >= 1, n >= 1, d >= 2")
    if not 1 <= k <= d:
        raise ValueError(f"k must be in [1, d], got {k}")
    size = int(round(rho / 100.0 * d))
    if not 1 <= size <= d:
        raise ValueError(f"rho = {rho}% of d = {d} gives an empty or oversized subset")
    ss = np.random.SeedSequence(seed)
    data_ss, *eps_ss = ss.spawn(1 + len(epsilons))
    values = sample_population(f"zipf:{zipf_s}", n, d, rng=np.random.default_rng(data_ss))
    truth = np.bincount(values, minlength=d) / n
    topk = np.argsort(-truth, kind="stable")[:k]
    records: list[dict] = []
    for eps, e_ss in zip(epsilons, eps_ss):
        oracle = make_oracle(mechanism, eps, d)
        errs = {(m, metric): [] for m in Method for metric in METRICS}
        t0 = time.perf_counter()
        for t_ss in e_ss.spawn(trials):
            rng = np.random.default_rng(t_ss)
            acc = oracle.add(oracle.create_accumulator(), oracle.encode(values, rng=rng))
            est = oracle.estimate(acc)
            masks = random_subsets(rng, d, size, set_queries).astype(np.float64)
            set_truth = masks @ truth
            for m, fp in apply_all(est, oracle, alpha=alpha).items():
                errs[(m, "full_domain_mse")].append(float(np.mean((fp - truth) ** 2)))
                errs[(m, "topk_mse")].append(float(np.mean((fp[topk] - truth[topk]) ** 2)))
                ans = masks @ (est.frequencies if m is Method.POST_POS else fp)
                if m is Method.POST_POS:
                    ans = np.maximum(ans, 0.0)
                errs[(m, "set_query_mse")].append(float(np.mean((ans - set_truth) ** 2)))
        elapsed = time.perf_counter() - t0
        print(f"[consistency] eps={eps:g}: {trials} trials in {elapsed:.1f}s", file=log, flush=True)
        for (m, metric), vals in errs.items():
            arr = np.asarray(vals)
            records.append(
                {
                    "method": m.value,
                    "epsilon": float(eps),
                    "metric": metric,
                    "value": float(arr.mean()),
                    "stderr": float(arr.std(ddof=1) / np.sqrt(arr.size)) if arr.size > 1 else None,
                    "n": int(n),
                    "d": int(d),
                    "trials": int(trials),
                    "mechanism": mechanism,
                    "zipf_s": float(zipf_s),
                    "k": int(k),
                    "rho": float(rho),
                    "set_size": size,
                    "set_queries": int(set_queries),
                    "alpha": float(alpha),
                    "seed": int(seed),
                }
            )
    return records


def plot(records: list[dict], path: str | Path) -> None:
    """One panel per metric: MSE vs epsilon (log y), one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(6.2 * len(METRICS), 5.2))
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "v", "D", "x", "+", "*", "P", "<", ">", "h"]
    colors = [plt.get_cmap("tab20")(i) for i in range(0, 20, 2)] + ["black", "goldenrod"]
    r0 = records[0]
    for ax, metric in zip(axes, METRICS):
        for i, m in enumerate(Method):
            rows = sorted((r for r in records if r["metric"] == metric and r["method"] == m.value),
                          key=lambda r: r["epsilon"])
            if not rows:
                continue
            ax.plot([r["epsilon"] for r in rows], [r["value"] for r in rows], label=m.value,
                    linestyle=styles[i % len(styles)], marker=markers[i % len(markers)], markersize=5,
                    color=colors[i % len(colors)])
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_ylabel("MSE")
        extra = {"topk_mse": f" (k={r0['k']})", "set_query_mse": f" (rho={r0['rho']:g}%)"}.get(metric, "")
        ax.set_title(metric + extra)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8, ncol=2)
    fig.suptitle(
        f"{r0['mechanism'].upper()}, Zipf s={r0['zipf_s']:g}, n={r0['n']}, d={r0['d']}, {r0['trials']} trials"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(records: list[dict]) -> str:
    eps = sorted({r["epsilon"] for r in records})
    lines = []
    for metric in METRICS:
        lines.append(f"\n{metric}")
        lines.append("method".ljust(10) + "".join(f"{'eps=' + format(e, 'g'):>12}" for e in eps))
        for m in Method:
            vals = {
                r["epsilon"]: r["value"] for r in records if r["metric"] == metric and r["method"] == m.value
            }
            lines.append(m.value.ljust(10) + "".join(f"{vals[e]:12.3e}" for e in eps))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = job_parser(__doc__.split("\n\n")[0], beam_options=False)
    ap.add_argument("--users", type=int, default=1_000_000, help="number of simulated users per trial")
    ap.add_argument("--domain_size", type=int, default=1024, help="size of the categorical domain")
    ap.add_argument("--epsilons", default="0.2,0.5,1,2,4", help="comma-separated privacy budgets")
    ap.add_argument("--trials", type=int, default=5, help="independent trials per epsilon")
    ap.add_argument("--json", required=True, help="output JSON path")
    ap.add_argument("--plot", default=None, help="output PNG path")
    ap.add_argument("--seed", type=int, default=0, help="entropy of the run's numpy SeedSequence")
    ap.add_argument("--mechanism", default="olh", help="frequency oracle (ldp.oracles.make_oracle name)")
    ap.add_argument("--zipf_exponent", type=float, default=1.5, help="Zipf exponent s of the population")
    ap.add_argument("--k", type=int, default=32, help="top-k size")
    ap.add_argument("--rho", type=float, default=10.0, help="set size in percent of the domain")
    ap.add_argument("--set_queries", type=int, default=200, help="random subsets per trial")
    ap.add_argument("--alpha", type=float, default=2.0, help="Base-Cut alpha")
    args, _ = parse_job_args(ap, argv, beam=False)
    try:
        epsilons = [float(x) for x in args.epsilons.split(",") if x.strip()]
    except ValueError:
        ap.error(f"bad --epsilons {args.epsilons!r}")
    if not epsilons:
        ap.error("--epsilons is empty")
    t0 = time.perf_counter()
    records = run(
        n=args.users, d=args.domain_size, epsilons=epsilons, trials=args.trials, mechanism=args.mechanism,
        seed=args.seed, zipf_s=args.zipf_exponent, k=args.k, rho=args.rho, set_queries=args.set_queries,
        alpha=args.alpha,
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(records, indent=1) + "\n")
    if args.plot:
        plot(records, args.plot)
    print(_table(records))
    print(f"\n[consistency] total {time.perf_counter() - t0:.1f}s -> {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
