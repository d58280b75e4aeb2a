"""Numeric telemetry (``ldp/numeric``): mean MSE against the closed forms, quantile error, interval coverage.

Three parts, every number through the real code path (``encode`` -> accumulator -> ``estimate``, except
the MSE part, which averages the decoded outputs of ``T`` encodings at once, the same arithmetic):

* ``mse``: for every mechanism, eps in {0.5, 1, 2, 4} and n in {1e3, 1e4, 1e5}, the empirical MSE of the
  mean over ``T`` trials on one fixed population (``12 Beta(2, 5) - 0.5`` clipped into ``[0, 10]``), the
  closed form ``mean_variance`` and their ratio with its standard error ``std(err^2) / mean / sqrt(T)``;
  plus the worst-case variances ``max_t Var[y | t]`` the paper compares.
* ``quantiles``: Square Wave (EMS, 512 bins, 32 bootstrap replicas) on lognormal(0, 1) values over
  ``[0, 20]``, n = 1e6, eps = 1 (30 repetitions) and eps in {0.5, 2, 4} (10 each): rank error
  ``F_n(q_hat) - q`` of the median, p90 and p99, absolute error against the exact quantile, and how
  often the interval holds the exact quantile.
* ``coverage``: the normal interval and the every-n bound of the mean, n = 500, 1000 trials, each with a
  new population: ``normal`` (t spread 0.3) and ``uniform`` (t spread 0.58, where Duchi's and 1BitMean's
  non-identifiable variance is over-stated most).

Usage (about 10 minutes on a loaded 2-core machine)::

    nice -n 10 .venv/bin/python -m experiments.numeric --json experiments/results/numeric.json \\
        --plot experiments/results/numeric.png

writes the JSON, the PNG and the tables into the write-up next to the JSON (``numeric.md``, between its
table markers; the prose around them is kept); ``--from_json``
redraws the plot and tables of a finished run; ``--only mse|quantiles|coverage`` runs one part.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp.numeric import MECHANISMS, estimate, make_numeric_mechanism

NAMES = ("duchi", "one-bit-mean", "piecewise", "hybrid", "laplace", "square-wave")
EPSILONS = (0.5, 1.0, 2.0, 4.0)
#: (population, n, trials) of the MSE part: T n = 2e6 reports per setting
MSE_SIZES = (("beta", 1_000, 2_000), ("beta", 10_000, 200), ("beta", 100_000, 20), ("edges", 10_000, 200))
LOW, HIGH = 0.0, 10.0
QUANTILES = (0.5, 0.9, 0.99)
#: (eps, repetitions) of the quantile part at n = 1e6
QUANTILE_SETTINGS = ((1.0, 30), (0.5, 10), (2.0, 10), (4.0, 10))
COVERAGE_N, COVERAGE_TRIALS = 500, 1000


def mse_part(rng: np.random.Generator, scale: float) -> list[dict[str, Any]]:
    out = []
    for population, n, trials in MSE_SIZES:
        trials = max(4, int(trials * scale))
        if population == "beta":
            x = 12.0 * rng.beta(2.0, 5.0, size=n) - 0.5
        else:  # half the users at each bound: t = -1 or 1, the worst case of every mechanism but Duchi's
            x = np.where(np.arange(n) % 2 == 0, LOW, HIGH)
        truth = float(np.clip(x, LOW, HIGH).mean())
        for name in NAMES:
            for eps in EPSILONS:
                mech = make_numeric_mechanism(name, eps, LOW, HIGH)
                half = 0.5 * (HIGH - LOW)
                est = np.empty(trials)
                chunk = max(1, 2_000_000 // n)
                for s in range(0, trials, chunk):
                    k = min(chunk, trials - s)
                    y, _ = mech.decode(mech.encode(np.tile(x, k), rng=rng))
                    est[s:s + k] = LOW + half * (y.reshape(k, n).mean(axis=1) + 1.0)
                sq = (est - truth) ** 2
                closed = mech.mean_variance(x)
                out.append({"part": "mse", "population": population, "mechanism": name, "epsilon": eps,
                            "n": n, "trials": trials,
                            "mse": float(sq.mean()), "closed_form": closed,
                            "ratio": float(sq.mean() / closed),
                            "ratio_se": float(sq.std() / sq.mean() / math.sqrt(trials)),
                            "worst_case_variance_t": mech.worst_case_variance()})
                print(f"mse {population} {name:13s} eps {eps:3.1f} n {n:6d}: "
                      f"ratio {out[-1]['ratio']:.3f}", flush=True)
    return out


def quantile_part(rng: np.random.Generator, scale: float) -> list[dict[str, Any]]:
    out = []
    n = 1_000_000
    for eps, reps in QUANTILE_SETTINGS:
        reps = max(2, int(reps * scale))
        mech = make_numeric_mechanism("square-wave", eps, 0.0, 20.0)
        for r in range(reps):
            x = np.clip(rng.lognormal(0.0, 1.0, size=n), 0.0, 20.0)
            acc = mech.add(mech.create_accumulator(), mech.encode(x, rng=rng))
            t0 = time.time()
            e = estimate(mech, acc, quantiles=QUANTILES)
            ms = 1000 * (time.time() - t0)
            xs = np.sort(x)
            for q in e.quantiles:
                exact = float(np.quantile(xs, q.q))
                out.append({"part": "quantiles", "epsilon": eps, "n": n, "rep": r, "q": q.q, "exact": exact,
                            "value": q.value, "ci_low": q.ci_low, "ci_high": q.ci_high,
                            "rank_error": float(np.searchsorted(xs, q.value) / n - q.q),
                            "abs_error": abs(q.value - exact),
                            "covered": bool(q.ci_low <= exact <= q.ci_high),
                            "ms": ms, "em_iterations": e.em_iterations, "mean": e.mean,
                            "mean_exact": float(x.mean()), "variance": e.variance,
                            "variance_exact": float(x.var())})
            print(f"quantiles eps {eps} rep {r}: "
                  + ", ".join(f"{o['q']}: {o['rank_error']:+.4f}{'' if o['covered'] else ' (miss)'}"
                              for o in out[-len(QUANTILES):]), flush=True)
    return out


def coverage_part(rng: np.random.Generator, scale: float) -> list[dict[str, Any]]:
    out = []
    trials, n = max(10, int(COVERAGE_TRIALS * scale)), COVERAGE_N
    for population in ("normal", "uniform"):
        for name in NAMES:
            for eps in EPSILONS:
                mech = make_numeric_mechanism(name, eps, LOW, HIGH)
                if population == "normal":
                    x = np.clip(rng.normal(4.0, 1.5, size=(trials, n)), LOW, HIGH)
                else:
                    x = rng.uniform(LOW, HIGH, size=(trials, n))
                reports = mech.encode(x.reshape(-1), rng=rng)
                hit = hit_b = 0
                width = width_b = 0.0
                for i in range(trials):
                    acc = mech.add(mech.create_accumulator(), reports.take(slice(i * n, (i + 1) * n)))
                    e = estimate(mech, acc, distribution=False)
                    truth = x[i].mean()
                    hit += e.mean_ci_low <= truth <= e.mean_ci_high
                    hit_b += e.mean_bound_low <= truth <= e.mean_bound_high
                    width += e.mean_ci_high - e.mean_ci_low
                    width_b += e.mean_bound_high - e.mean_bound_low
                c = hit / trials
                out.append({"part": "coverage", "population": population, "mechanism": name, "epsilon": eps,
                            "n": n, "trials": trials, "coverage": c, "se": math.sqrt(c * (1 - c) / trials),
                            "width": width / trials, "bound_coverage": hit_b / trials,
                            "bound_width": width_b / trials})
                print(f"coverage {population} {name:13s} eps {eps}: {c:.3f} bound {hit_b / trials:.3f}",
                      flush=True)
    return out


def markdown(records: list[dict[str, Any]]) -> str:
    lines = []
    mse = [r for r in records if r["part"] == "mse"]
    if mse:
        lines += ["Mean MSE / closed form (`mean_variance`), fixed population on [0, 10] (`beta`: "
                  "12 Beta(2, 5) - 0.5, clipped; `edges`: half at each bound); +- is 1 SE "
                  "(`std(err^2) / mean / sqrt(T)`):", "",
                  "| mechanism | population | n (T) | " + " | ".join(f"eps {e:g}" for e in EPSILONS) + " |",
                  "| --- | --- | --- |" + " --- |" * len(EPSILONS)]
        for name in NAMES:
            for pop, n, _ in MSE_SIZES:
                rows = {r["epsilon"]: r for r in mse
                        if r["mechanism"] == name and r["n"] == n and r["population"] == pop}
                if rows:
                    t = next(iter(rows.values()))["trials"]
                    lines.append(f"| {name} | {pop} | {n} ({t}) | " + " | ".join(
                        f"{rows[e]['ratio']:.3f} +- {rows[e]['ratio_se']:.3f}" for e in EPSILONS if e in rows)
                        + " |")
        lines += ["", "Closed-form worst-case variance of one report, `max_t Var[y | t]` on [-1, 1] "
                  "(the paper's comparison), and the empirical MSE at n = 10,000 on `beta` / `edges` "
                  "(values' units):", "",
                  "| mechanism | " + " | ".join(f"eps {e:g}" for e in EPSILONS) + " |",
                  "| --- |" + " --- |" * len(EPSILONS)]
        for name in NAMES:
            rows = {(r["epsilon"], r["population"]): r for r in mse if r["mechanism"] == name
                    and r["n"] == 10_000}
            if (EPSILONS[0], "beta") in rows and (EPSILONS[0], "edges") in rows:
                lines.append(f"| {name} | " + " | ".join(
                    f"{rows[e, 'beta']['worst_case_variance_t']:.3f} ({rows[e, 'beta']['mse']:.2e} / "
                    f"{rows[e, 'edges']['mse']:.2e})" for e in EPSILONS) + " |")
    qr = [r for r in records if r["part"] == "quantiles"]
    if qr:
        lines += ["", "Square Wave quantiles (EMS, 512 bins, 32 replicas), lognormal(0, 1) on [0, 20], "
                  "n = 1e6; rank error `F_n(q_hat) - q`:", "",
                  "| eps | q | reps | mean rank error | max abs rank error | mean abs error | coverage "
                  "| mean width | ms / estimate |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for eps, _ in QUANTILE_SETTINGS:
            for q in QUANTILES:
                rows = [r for r in qr if r["epsilon"] == eps and r["q"] == q]
                if rows:
                    re = np.array([r["rank_error"] for r in rows])
                    lines.append(
                        f"| {eps:g} | {q:g} | {len(rows)} | {re.mean():+.4f} | {np.abs(re).max():.4f} | "
                        f"{np.mean([r['abs_error'] for r in rows]):.4f} | "
                        f"{np.mean([r['covered'] for r in rows]):.2f} | "
                        f"{np.mean([r['ci_high'] - r['ci_low'] for r in rows]):.3f} | "
                        f"{np.mean([r['ms'] for r in rows]):.0f} |")
    cr = [r for r in records if r["part"] == "coverage"]
    if cr:
        lines += ["", f"Mean interval coverage, n = {COVERAGE_N}, new population per trial; normal interval "
                  "(+- 1 binomial SE) and, in brackets, the every-n bound:", "",
                  "| population | mechanism | " + " | ".join(f"eps {e:g}" for e in EPSILONS) + " |",
                  "| --- | --- |" + " --- |" * len(EPSILONS)]
        for pop in ("normal", "uniform"):
            for name in NAMES:
                rows = {r["epsilon"]: r for r in cr if r["population"] == pop and r["mechanism"] == name}
                if rows:
                    lines.append(f"| {pop} | {name} | " + " | ".join(
                        f"{rows[e]['coverage']:.3f} +- {rows[e]['se']:.3f} ({rows[e]['bound_coverage']:.3f})"
                        for e in EPSILONS if e in rows) + " |")
    return "\n".join(lines) + "\n"


TABLES_BEGIN, TABLES_END = "<!-- tables: experiments/numeric.py -->", "<!-- /tables -->"


def write_markdown(records: list[dict[str, Any]], path: Path) -> None:
    """Writes the tables into ``path`` between :data:`TABLES_BEGIN` and :data:`TABLES_END`, keeping the
    write-up around them (a new file gets the markers and the tables only)."""
    block = f"{TABLES_BEGIN}\n\n{markdown(records)}\n{TABLES_END}"
    text = path.read_text() if path.exists() else ""
    if TABLES_BEGIN in text and TABLES_END in text:
        head, rest = text.split(TABLES_BEGIN, 1)
        text = head + block + rest.split(TABLES_END, 1)[1]
    else:
        text = (text.rstrip() + "\n\n" if text else "") + block + "\n"
    path.write_text(text)


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax = axes[0]
    mse = [r for r in records if r["part"] == "mse" and r["n"] == 10_000]
    for i, name in enumerate(NAMES):
        color = None
        for pop, style in (("beta", "-"), ("edges", "--")):
            rows = sorted((r for r in mse if r["mechanism"] == name and r["population"] == pop),
                          key=lambda r: r["epsilon"])
            if rows:
                eps = [r["epsilon"] for r in rows]
                line = ax.plot(eps, [r["closed_form"] for r in rows], style, color=color,
                               label=name if pop == "beta" else None)[0]
                color = line.get_color()
                ax.plot(eps, [r["mse"] for r in rows], "o" if pop == "beta" else "s", color=color,
                        ms=4 + i % 2 * 2, mfc="none" if pop == "edges" else color)
    ax.set_yscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("MSE of the mean (n = 10,000, values on [0, 10])")
    ax.set_title("mean MSE: markers measured, lines closed form\n(solid: beta population, dashed: edges)",
                 fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[1]
    qr = [r for r in records if r["part"] == "quantiles" and r["epsilon"] == 1.0]
    for j, q in enumerate(QUANTILES):
        rows = [r for r in qr if r["q"] == q]
        if rows:
            ax.errorbar([r["rep"] + 0.25 * j for r in rows], [r["rank_error"] for r in rows], fmt="o", ms=3,
                        label=f"q = {q:g}")
    ax.axhspan(-0.03, 0.03, color="0.9", zorder=0)
    ax.set_xlabel("repetition (n = 1e6, eps = 1, lognormal)")
    ax.set_ylabel("rank error F_n(q_hat) - q")
    ax.set_title("Square Wave quantiles (band: +-0.03)")
    ax.legend(fontsize=7)
    ax = axes[2]
    cr = [r for r in records if r["part"] == "coverage" and r["population"] == "normal"]
    width = 0.8 / len(EPSILONS)
    for k, eps in enumerate(EPSILONS):
        rows = {r["mechanism"]: r for r in cr if r["epsilon"] == eps}
        xs = [i + k * width for i, n in enumerate(NAMES) if n in rows]
        ax.bar(xs, [rows[n]["coverage"] for n in NAMES if n in rows], width=width,
               yerr=[2 * rows[n]["se"] for n in NAMES if n in rows], label=f"eps {eps:g}")
    ax.axhline(0.95, color="k", lw=0.8)
    ax.axhspan(0.93, 0.97, color="0.9", zorder=0)
    ax.set_ylim(0.85, 1.0)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(NAMES))], NAMES, rotation=20, fontsize=8)
    ax.set_ylabel(f"coverage of the 95% mean interval (n = {COVERAGE_N})")
    ax.set_title("mean interval coverage (+- 2 SE)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="experiments/results/numeric.json")
    ap.add_argument("--plot", default="experiments/results/numeric.png")
    ap.add_argument("--seed", type=int, default=20261221)
    ap.add_argument("--trial_scale", type=float, default=1.0, help="multiply every trial / repetition count")
    ap.add_argument("--only", choices=["mse", "quantiles", "coverage"], help="run one part")
    ap.add_argument("--from_json", help="only redraw the plot and tables of this finished run")
    args = ap.parse_args(argv)
    if args.from_json:
        records = json.loads(Path(args.from_json).read_text())["records"]
        plot(records, Path(args.plot))
        write_markdown(records, Path(args.from_json).with_suffix(".md"))
        return records
    seeds = np.random.SeedSequence(args.seed).spawn(3)
    parts = {"mse": mse_part, "quantiles": quantile_part, "coverage": coverage_part}
    records: list[dict[str, Any]] = []
    t0 = time.time()
    for (name, fn), ss in zip(parts.items(), seeds):
        if args.only in (None, name):
            records += fn(np.random.default_rng(ss), args.trial_scale)
    meta = {"seed": args.seed, "trial_scale": args.trial_scale, "seconds": time.time() - t0,
            "mechanisms": sorted(MECHANISMS), "low": LOW, "high": HIGH}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    if args.plot:
        plot(records, Path(args.plot))
    write_markdown(records, Path(args.json).with_suffix(".md"))
    print(f"wrote {args.json} ({len(records)} records, {meta['seconds']:.0f} s)")
    return records


if __name__ == "__main__":
    main()
