"""Coverage of the published intervals (``ldp.intervals``, ``docs/intervals.md``) over many seeded trials.

Frequency tasks: in each trial ``n`` users draw values from Zipf(1.1) over ``d`` values, encode them with
the real oracle (``encode -> accumulate -> estimate``), and every measured post-processing method publishes
its numbers with :func:`ldp.intervals.frequency_intervals` -- the function the frequency job's finalize
calls (``ldp.kinds.frequency.aggregate``), so the rows of a batch or streaming job carry these same intervals.
Coverage is the fraction of (value, trial) pairs whose interval holds the true frequency of the trial's
population, over the whole domain, and separately over the 10 most frequent values and the rest. For
comparison, ``naive``: ``+- 1.96 std`` of the unbiased estimate around the published Norm-Sub number
(what the estimate rows invited before). Range tasks: correlated Gaussian records (rho 0.8; rho 0 for one
MSW setting, MSW assumes independent attributes), random queries of lambda = 1, 2, 3 (omega 0.5), the
answer rows' intervals (``ldp.kinds.range.aggregate.answer_rows``) against the true answers.

Standard errors: ``se_binomial`` = sqrt(c (1 - c) / N) for N pairs (as if independent), ``se_trials``
= the standard deviation of the per-trial coverage over sqrt(trials) (honest under the correlation of
values within a trial). Costs: the mean wall time of the interval computation per pane (per model for
range answers), measured in this run.

Usage (about 15 minutes on a loaded 2-core machine at the defaults)::

    nice -n 10 .venv/bin/python -m experiments.coverage --json experiments/results/coverage.json \
        --plot experiments/results/coverage.png

writes the JSON, the PNG and the tables as Markdown next to the JSON (``coverage.md``). ``--from_json``
redraws the plot and tables from a finished run; ``--only frequency|range`` runs one part.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp import intervals as iv
from ldp.aggregate import WindowInfo
from ldp.datasets.multi import gaussian_records
from ldp.kinds.range.aggregate import answer_rows, group_report_counts
from ldp.oracles import make_oracle
from ldp.postprocess import postprocess
from ldp.rangequery.queries import random_queries, true_answers
from ldp.rangequery.registry import make_mechanism
from ldp.task import parse_task

Z = iv.z_value()

#: (name, mechanism, d, n, epsilon, methods, trials)
FREQUENCY_SETTINGS: list[tuple[str, str, int, int, float, tuple[str, ...], int]] = [
    ("olh-d1024-n100k", "olh", 1024, 100_000, 1.0,
     ("base", "base-pos", "base-cut", "norm", "norm-sub", "norm-mul", "cls", "mle-apx"), 100),
    ("olh-d1024-n3k", "olh", 1024, 3_000, 1.0, ("base", "base-cut", "norm-sub", "power-ns"), 60),
    ("grr-d16-n10k", "grr", 16, 10_000, 1.0, ("base", "base-cut", "norm-sub", "norm-mul"), 200),
    ("oue-d64-n10k", "oue", 64, 10_000, 2.0, ("base", "base-pos", "norm-sub", "cls"), 150),
]

#: (name, method, attribute domain c, n, epsilon, trials, options)
RANGE_SETTINGS: list[tuple[str, str, int, int, float, int, float, dict[str, Any]]] = [
    ("hio-c16-n100k", "hio", 16, 100_000, 1.0, 20, 0.8, {}),
    ("lhio-c16-n100k", "lhio", 16, 100_000, 1.0, 20, 0.8, {}),
    ("hdg-c32-n100k", "hdg", 32, 100_000, 1.0, 20, 0.8, {}),
    ("msw-c32-n100k-indep", "msw", 32, 100_000, 1.0, 10, 0.0, {}),
    ("msw-c32-n100k", "msw", 32, 100_000, 1.0, 6, 0.8, {}),
]


def _zipf(d: int) -> np.ndarray:
    p = np.arange(1, d + 1, dtype=float) ** -1.1
    return p / p.sum()


def _summary(hits: np.ndarray, width: np.ndarray) -> dict[str, float]:
    """hits: (trials, items) bool; width: (trials, items)."""
    n = hits.size
    c = float(hits.mean())
    per_trial = hits.mean(axis=1)
    return {
        "coverage": c,
        "se_binomial": float(np.sqrt(max(c * (1 - c), 1e-12) / n)),
        "se_trials": float(per_trial.std(ddof=1) / np.sqrt(len(per_trial))) if len(per_trial) > 1 else 0.0,
        "pairs": int(n),
        "mean_width": float(width.mean()),
    }


def frequency_coverage(setting, ss: np.random.SeedSequence) -> list[dict[str, Any]]:
    name, mech, d, n, eps, methods, trials = setting
    o = make_oracle(mech, eps, d)
    p = _zipf(d)
    top = np.argsort(-p, kind="stable")[:10]
    rest = np.setdiff1d(np.arange(d), top)
    hits = {m: np.zeros((trials, d), bool) for m in (*methods, "naive")}
    widths = {m: np.zeros((trials, d)) for m in hits}
    secs = {m: 0.0 for m in methods}
    reps = {m: 0 for m in methods}
    kinds = {}
    for t, child in enumerate(ss.spawn(trials)):
        rng = np.random.default_rng(child)
        vals = rng.choice(d, size=n, p=p)
        truth = np.bincount(vals, minlength=d) / n
        est = o.estimate(o.add(o.create_accumulator(), o.encode(vals, rng=rng)))
        for m in methods:
            opts = {"p": o.p, "q": o.q} if m == "mle-apx" else {}
            pub = postprocess(est.frequencies, m, variance=est.variance, n=est.n, **opts)
            t0 = time.perf_counter()
            r = iv.frequency_intervals(o, est, m, pub)
            secs[m] += time.perf_counter() - t0
            reps[m], kinds[m] = r.replicas, r.ci_method
            hits[m][t] = (r.ci_low <= truth) & (truth <= r.ci_high)
            widths[m][t] = r.ci_high - r.ci_low
            if m == "norm-sub":
                hits["naive"][t] = np.abs(pub - truth) <= Z * est.std
                widths["naive"][t] = 2 * Z * est.std
    out = []
    for m in hits:
        rec = {
            "kind": "frequency", "setting": name, "mechanism": mech, "d": d, "n": n, "epsilon": eps,
            "trials": trials, "method": m if m != "naive" else "norm-sub (naive +-1.96 std)",
            "ci_method": kinds.get(m, "naive"), "replicas": reps.get(m, 0),
            "ms_per_pane": 1000 * secs[m] / trials if m in secs else None,
            "domain": _summary(hits[m], widths[m]),
            "top10": _summary(hits[m][:, top], widths[m][:, top]),
            "rest": _summary(hits[m][:, rest], widths[m][:, rest]),
        }
        out.append(rec)
        print(f"{name:18s} {rec['method']:28s} coverage {rec['domain']['coverage']:.4f} "
              f"(top10 {rec['top10']['coverage']:.3f}, rest {rec['rest']['coverage']:.3f}) "
              f"width {rec['domain']['mean_width']:.4f}"
              + (f" {rec['ms_per_pane']:.1f} ms/pane" if rec["ms_per_pane"] is not None else ""), flush=True)
    return out


def range_coverage(setting, ss: np.random.SeedSequence) -> list[dict[str, Any]]:
    name, method, c, n, eps, trials, rho, opts = setting
    d = 3
    names = ["a0", "a1", "a2"]
    task = parse_task({"task_id": "cov", "mechanism": method, "epsilon": eps, "expected_users": n,
                       "attributes": [{"name": a, "domain_size": c} for a in names], "options": opts})
    rng_q = np.random.default_rng(ss.spawn(1)[0])
    queries = {lam: random_queries([c] * d, 40, lam, omega=0.5, rng=rng_q) for lam in (1, 2, 3)}
    allq = [q for lam in (1, 2, 3) for q in queries[lam]]
    lam_of = np.array([lam for lam in (1, 2, 3) for _ in queries[lam]])
    hits = np.zeros((trials, len(allq)), bool)
    width = np.zeros((trials, len(allq)))
    has_ci = np.zeros((trials, len(allq)), bool)
    secs = 0.0
    ci_methods: set[str] = set()
    for t, child in enumerate(ss.spawn(trials)):
        rng = np.random.default_rng(child)
        rec = gaussian_records(n, d, c, rho=rho, rng=rng)
        mech = make_mechanism(method, eps, [c] * d, n, **opts)
        groups = mech.assign_groups(n, rng=rng, balanced=True)
        accs = mech.accumulate(mech.encode(rec, rng=rng, groups=groups))
        model = mech.finalize(accs)
        truth = true_answers(rec, allq)
        t0 = time.perf_counter()
        rows = answer_rows(task, model, allq, WindowInfo(), group_report_counts(mech.n_groups, accs))
        secs += time.perf_counter() - t0
        lo = np.array([np.nan if r.ci_low is None else r.ci_low for r in rows])
        hi = np.array([np.nan if r.ci_high is None else r.ci_high for r in rows])
        has_ci[t] = np.isfinite(lo)
        hits[t] = (lo <= truth) & (truth <= hi)
        width[t] = np.where(has_ci[t], hi - lo, 0.0)
        ci_methods |= {r.ci_method for r in rows if r.ci_method}
    out = []
    for lam in (1, 2, 3):
        sel = lam_of == lam
        rec = {
            "kind": "range", "setting": name, "method": method, "c": c, "attributes": d, "n": n, "rho": rho,
            "epsilon": eps, "trials": trials, "lambda": lam, "queries": int(sel.sum()), "omega": 0.5,
            "ci_methods": sorted(ci_methods), "answers_with_interval": float(has_ci[:, sel].mean()),
            "ms_per_model": 1000 * secs / trials, **_summary(hits[:, sel], width[:, sel]),
        }
        out.append(rec)
        print(f"{name:18s} lambda={lam} coverage {rec['coverage']:.4f} width {rec['mean_width']:.4f} "
              f"({rec['ms_per_model']:.0f} ms/model for all {len(allq)} answers)", flush=True)
    return out


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    freq = [r for r in records if r["kind"] == "frequency"]
    rng_ = [r for r in records if r["kind"] == "range"]
    fig, axes = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [3, 1]})
    ax = axes[0]
    labels = [f"{r['setting']}\n{r['method']}" for r in freq]
    y = np.arange(len(freq))
    for key, mk, col in (("domain", "o", "k"), ("top10", "^", "tab:red"), ("rest", "s", "tab:blue")):
        ax.errorbar([r[key]["coverage"] for r in freq], y, xerr=[2 * r[key]["se_trials"] for r in freq],
                    fmt=mk, color=col, label=key, ms=4, capsize=2)
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    for x in (0.9, 0.98):
        ax.axvline(x, color="gray", ls="--", lw=0.8)
    ax.axvline(0.95, color="gray", lw=0.8)
    ax.set_xlabel("coverage of the true frequency (95% intervals; +-2 se over trials)")
    ax.set_xlim(0.5, 1.0)
    ax.legend(loc="lower left", fontsize=7)
    ax.set_title("frequency estimates: published interval coverage")
    ax = axes[1]
    y = np.arange(len(rng_))
    ax.errorbar([r["coverage"] for r in rng_], y, xerr=[2 * r["se_trials"] for r in rng_], fmt="o", color="k",
                ms=4, capsize=2)
    ax.set_yticks(y, [f"{r['setting']} lambda={r['lambda']}" for r in rng_], fontsize=6)
    ax.invert_yaxis()
    for x in (0.9, 0.98):
        ax.axvline(x, color="gray", ls="--", lw=0.8)
    ax.axvline(0.95, color="gray", lw=0.8)
    ax.set_xlim(0.0, 1.0)
    ax.set_title("range answers\n(HDG, MSW lambda >= 2: noise-only std)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(records: list[dict[str, Any]]) -> str:
    """The coverage tables (``experiments/results/coverage.md``, quoted in ``docs/intervals.md``)."""
    lines = [
        "Frequency tasks (Zipf 1.1; coverage of the true frequencies over the whole domain, then over the",
        "10 most frequent values and the rest; +- is 2 se over trials; width = mean interval width):",
        "",
        "| setting | method | ci_method | B | coverage (domain) | top 10 | rest | width | ms/pane |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        if r["kind"] != "frequency":
            continue
        ms = "" if r["ms_per_pane"] is None else f"{r['ms_per_pane']:.1f}"
        dom = r["domain"]
        lines.append(
            f"| {r['setting']} (T={r['trials']}) | {r['method']} | {r['ci_method']} | {r['replicas'] or ''} "
            f"| {dom['coverage']:.4f} +- {2 * dom['se_trials']:.4f} | {r['top10']['coverage']:.3f} "
            f"| {r['rest']['coverage']:.3f} | {dom['mean_width']:.4f} | {ms} |"
        )
    lines += [
        "",
        "Range answers (3 attributes, Gaussian records, 40 random queries per lambda with omega 0.5):",
        "",
        "| setting | rho | lambda | coverage | with an interval | width | ms/model (120 answers) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        if r["kind"] != "range":
            continue
        rho = r.get("rho", 0.8)
        lines.append(
            f"| {r['setting']} (T={r['trials']}) | {rho} | {r['lambda']} | {r['coverage']:.3f} +- "
            f"{2 * r['se_trials']:.3f} | {r['answers_with_interval']:.2f} | {r['mean_width']:.4f} "
            f"| {r['ms_per_model']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="experiments/results/coverage.json")
    ap.add_argument("--plot", default="experiments/results/coverage.png")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--trial_scale", type=float, default=1.0, help="multiply every setting's trial count")
    ap.add_argument("--only", choices=["frequency", "range"], help="run one part")
    ap.add_argument("--from_json", help="only redraw the plot and tables of this finished run")
    args = ap.parse_args(argv)
    if args.from_json:
        records = json.loads(Path(args.from_json).read_text())["records"]
        plot(records, Path(args.plot))
        Path(args.from_json).with_suffix(".md").write_text(markdown(records))
        return records
    ss_freq, ss_range = np.random.SeedSequence(args.seed).spawn(2)
    records: list[dict[str, Any]] = []
    t0 = time.time()
    if args.only in (None, "frequency"):
        for setting, child in zip(FREQUENCY_SETTINGS, ss_freq.spawn(len(FREQUENCY_SETTINGS))):
            s = (*setting[:-1], max(2, int(setting[-1] * args.trial_scale)))
            records += frequency_coverage(s, child)
    if args.only in (None, "range"):
        for setting, child in zip(RANGE_SETTINGS, ss_range.spawn(len(RANGE_SETTINGS))):
            s = (*setting[:5], max(2, int(setting[5] * args.trial_scale)), *setting[6:])
            records += range_coverage(s, child)
    meta = {"seed": args.seed, "trial_scale": args.trial_scale, "seconds": time.time() - t0,
            "level": iv.LEVEL, "target": [0.9, 0.98]}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    if args.plot:
        plot(records, Path(args.plot))
    Path(args.json).with_suffix(".md").write_text(markdown(records))
    print(f"wrote {args.json} ({len(records)} records, {meta['seconds']:.0f} s)")
    return records


if __name__ == "__main__":
    main()
