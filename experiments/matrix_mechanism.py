"""Reproduction of Li & Miklau, "Efficient Batch Query Answering Under Differential Privacy".

Every number is a ratio: expected total error of a strategy / the SVD bound, both at c = 1, so eps, delta
and the data do not enter (the (eps, delta) constant c^2 multiplies both).  Outputs:

* ``records``: one row per (workload, strategy) with ``ratio``, ``svdb``, ``levels``, ``seconds``;
* ``fig1``: LSA ratio against the number of levels k on AllRange(512);
* ``fig2``: complexity of sampled range workloads, (svdb(S)/|S|) / (svdb(all)/m), uniform and biased;
* ``fig3b``: random 1-D ranges grouped by coverage, each strategy's ratio;
* ``fig3c``: workload separation on ranges over both 1-way marginals of d x d: time and ratios;
* ``montecarlo``: the closed-form error against 20,000 Gaussian draws (AllRange(64));
* ``hdmm``: our certified OPT against HDMM's published Gaussian OPT_0 ratios;
* ``ldp_gls``: (LDP, not central DP) GLS over OLH level estimates, predicted against simulated error, for
  HIO-like binary levels and for the partitions LSA chooses.

    python -m experiments.matrix_mechanism --workloads allrange:512,allrange:1024,allrange:32x32,\\
        allrange:16x8x8,allrange:4x4x4x4x4 --strategies identity,h2,haar,lsa,opt \\
        --json OUT.json --plot OUT.png

Heavy: run under ``nice -n 10``; the full default run takes a few minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import numpy as np

from ldp.matrix import workloads as wl
from ldp.matrix.bounds import error_ratio, expected_error, svdb
from ldp.matrix.lsa import lsa
from ldp.matrix.mechanism import GaussianMatrixMechanism
from ldp.matrix.opt import opt
from ldp.matrix.separation import marginal_parts, separate
from ldp.matrix.strategies import haar, hierarchical, identity, make_strategy

FIGURES = ("fig1", "fig2", "fig3b", "fig3c", "montecarlo", "hdmm", "ldp_gls")
#: HDMM's published Gaussian OPT_0 / svdb (their journal CSVs, quoted in the spec Sec. 5 / 7.10)
HDMM_ANCHORS = {"allrange:128": 1.020, "allrange:256": 1.018, "allrange:512": 1.017, "allrange:1024": 1.044,
                "prefix:256": 1.046, "prefix:512": 1.046, "prefix:1024": 1.110}
FIG3B_COVERAGES = (0.01, 0.1, 0.5, 0.9, 0.99)


def _timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t


# ----------------------------------------------------------------------------------------- main table
def run_table(specs: list[str], strategies: list[str], *, lsa_k_max: int | None) -> list[dict]:
    records = []
    for spec in specs:
        work = wl.parse_workload(spec)
        bound, t_b = _timed(svdb, work)
        print(f"{spec}: svdb {bound:.1f} ({t_b:.2f} s)", flush=True)
        for name in strategies:
            if name == "lsa-kron" and work.factors is None:
                continue  # 1-D: the same as lsa
            kw = {"k_max": lsa_k_max} if name in ("lsa", "lsa-kron") else {}
            if name == "lsa":
                kw["bound"] = bound
            strat, t_s = _timed(make_strategy, name, work, **kw)
            ratio, t_e = _timed(error_ratio, work, strat, bound=bound)
            rec = {"workload": spec, "strategy": name, "ratio": round(ratio, 6), "svdb": bound,
                   "levels": strat.levels, "sensitivity2": round(strat.sensitivity() ** 2, 6),
                   "seconds": round(t_s + t_e, 3), "strategy_seconds": round(t_s, 3)}
            if name == "opt":
                rec["gap"] = strat.info["gap"]
                rec["dual_ratio"] = strat.info["dual"] / bound
            if name == "lsa":
                rec["history"] = [{"k": h["k"], "ratio": round(h["ratio"], 6), "how": h["how"],
                                   "blocks": h["blocks"]} for h in strat.info["history"]]
                rec["k_max"] = strat.info["k_max"]
                rec["max_drift"] = strat.info["max_drift"]
            records.append(rec)
            print(f"  {name:9s} ratio {ratio:8.4f}  levels {strat.levels}  {t_s + t_e:7.2f} s", flush=True)
    return records


# ---------------------------------------------------------------------------------------------- Fig 1
def run_fig1(n: int, k_max: int) -> dict:
    work = wl.allrange(n)
    bound = svdb(work)
    strat, secs = _timed(lsa, work, k_max=k_max, bound=bound)
    hist = [{"k": h["k"], "ratio": round(h["ratio"], 6), "how": h["how"]} for h in strat.info["history"]]
    print(f"fig1: AllRange({n}) LSA to k={strat.levels}: " + ", ".join(f"{h['ratio']:.3f}" for h in hist),
          flush=True)
    return {"n": n, "k_max": k_max, "history": hist, "seconds": round(secs, 2),
            "splits": strat.info["splits"]}


# ---------------------------------------------------------------------------------------------- Fig 2
FIG2_DOMAINS = ((1024,), (32, 32), (16, 8, 8), (4,) * 5, (2,) * 10)


def run_fig2(sizes: list[int], bias: float, seed: np.random.SeedSequence) -> list[dict]:
    out = []
    seeds = iter(seed.spawn(len(FIG2_DOMAINS) * len(sizes) * 2))
    for dims in FIG2_DOMAINS:
        full = wl.allrange(dims)
        ref = svdb(full) / full.n_queries
        for mode in ("uniform", "biased"):
            for size in sizes:
                rng = np.random.default_rng(next(seeds))
                size_eff = min(size, full.n_queries)
                (lo, hi), t_sample = _timed(wl.sample_ranges, dims, size_eff, rng=rng,
                                            bias=None if mode == "uniform" else bias)
                sub = wl.range_set(dims, lo, hi)
                metric = svdb(sub) / size_eff / ref
                out.append({"domain": "x".join(map(str, dims)), "mode": mode, "size": size_eff,
                            "fraction": round(size_eff / full.n_queries, 5), "metric": round(metric, 5)})
                print(f"fig2: {out[-1]}", flush=True)
    return out


# --------------------------------------------------------------------------------------------- Fig 3b
def run_fig3b(n: int, m: int, lsa_k_max: int, seed: np.random.SeedSequence) -> list[dict]:
    out = []
    for cov, s in zip(FIG3B_COVERAGES, seed.spawn(len(FIG3B_COVERAGES))):
        rng = np.random.default_rng(s)
        lo, hi = wl.coverage_ranges(n, m, cov, rng=rng)
        n_live, lo_c, hi_c = wl.compress_ranges_1d(n, lo, hi)
        work = wl.range_set(n_live, lo_c, hi_c, name=f"cov{cov}")
        bound = svdb(work)
        row = {"coverage": cov, "n_live": n_live, "queries": m,
               "mean_coverage": round(float(np.mean(hi - lo) / n), 4)}
        builders = {"identity": lambda nl, _w: identity(nl), "haar": lambda nl, _w: haar(nl),
                    "h2": lambda nl, _w: hierarchical(nl, 2), "lsa": lambda _nl, w: lsa(w, k_max=lsa_k_max),
                    "opt": lambda _nl, w: opt(w)}
        for name, build in builders.items():
            strat = build(n_live, work)
            row[name] = round(error_ratio(work, strat, bound=bound), 4)
            if name == "opt":
                row["opt_gap"] = strat.info["gap"]
        out.append(row)
        print(f"fig3b: {row}", flush=True)
    return out


# --------------------------------------------------------------------------------------------- Fig 3c
def run_fig3c(ds: list[int], *, full_opt_max: int = 16) -> list[dict]:
    out = []
    for d in ds:
        subsets = [(0,), (1,)]
        work = wl.range_marginals((d, d), subsets)
        bound = svdb(work)
        full, t_full = _timed(lsa, work)
        sep, t_sep = _timed(separate, marginal_parts((d, d), subsets), lambda g, dims: lsa(g, dims=dims),
                            full_gram=work.gram)
        sep_opt, t_sep_opt = _timed(separate, marginal_parts((d, d), subsets), lambda g, dims: opt(g),
                                    full_gram=work.gram)
        row = {"d": d, "cells": d * d, "full_lsa_ratio": round(expected_error(work, full) / bound, 4),
               "full_lsa_seconds": round(t_full, 3), "full_lsa_levels": full.levels,
               "separated_lsa_joint_ratio": round(sep.joint_error / bound, 4),
               "separated_lsa_separate_ratio": round(sep.separate_error / bound, 4),
               "separated_lsa_seconds": round(t_sep, 4),
               "speedup": round(t_full / t_sep, 1),
               "separated_opt_joint_ratio": round(sep_opt.joint_error / bound, 4),
               "separated_opt_separate_ratio": round(sep_opt.separate_error / bound, 4),
               "separated_opt_seconds": round(t_sep_opt, 4)}
        if d <= full_opt_max:
            jo, t_jo = _timed(opt, work)
            row["joint_opt_ratio"] = round(jo.info["primal"] / bound, 4)
            row["joint_opt_gap"] = jo.info["gap"]
            row["joint_opt_seconds"] = round(t_jo, 2)
        out.append(row)
        print(f"fig3c: {row}", flush=True)
    return out


# ---------------------------------------------------------------------------------------- LDP GLS (2b)
def _ldp_trials(levels, shares, users, eps, f, trials, rng):
    """Simulate ``trials`` rounds: group g (users * share) draws values i.i.d. from f and reports its block
    of partition ``levels[g]`` with OLH; returns the GLS, its exact block covariances, and the errors."""
    from ldp.matrix.gls import GLS, LevelGroup, oracle_block_variances
    from ldp.oracles import OLH

    oracles = [OLH(eps, int(lab.max()) + 1) for lab in levels]
    sizes = [max(1, round(users * s)) for s in shares]
    gls = GLS([LevelGroup(lab, ng, o.variance(1)) for lab, o, ng in zip(levels, oracles, sizes)])
    covs = [oracle_block_variances(o, ng, np.bincount(lab, weights=f), iid=True)
            for lab, o, ng in zip(levels, oracles, sizes)]
    errs = np.empty((trials, f.size))
    for t in range(trials):
        ys = []
        for lab, o, ng in zip(levels, oracles, sizes):
            v = rng.choice(f.size, ng, p=f)
            ys.append(o.estimate_reports(o.encode(lab[v], rng=rng)).frequencies)
        errs[t] = gls.estimate(ys) - f
    return gls, covs, errs


def run_ldp_gls(n: int, users: int, eps: float, trials: int, seed: np.random.SeedSequence) -> list[dict]:
    """Spec 7.8: GLS with the public total over HIO-like binary levels (no root, equal groups, OLH),
    predicted MSE (sandwich with the exact block covariances) against simulation; and the same for the
    partitions and group shares LSA chooses for AllRange(n).  This is LDP (eps-LDP per user, the oracle's);
    errors are on the frequency scale, summed over all n(n+1)/2 ranges."""
    from ldp.matrix.strategies import level_labels_hierarchical

    x = np.arange(n)
    f = np.exp(-(((x - 0.3 * n) / (0.2 * n)) ** 2)) + 0.05
    f /= f.sum()
    g = wl.allrange_gram(n)
    out = []
    binary = level_labels_hierarchical(n, 2, root=False)
    strat = lsa(wl.allrange(n))
    lsa_levels, lsa_counts = [], []
    for lab in strat.info["level_labels"]:
        for i, seen in enumerate(lsa_levels):
            if np.array_equal(seen, lab):
                lsa_counts[i] += 1
                break
        else:
            lsa_levels.append(np.unique(lab, return_inverse=True)[1])
            lsa_counts.append(1)
    designs = [("hio-binary-noroot", binary, [1 / len(binary)] * len(binary)),
               ("lsa", lsa_levels, [c / sum(lsa_counts) for c in lsa_counts])]
    for (name, levels, shares), s in zip(designs, seed.spawn(len(designs))):
        rng = np.random.default_rng(s)
        (gls, covs, errs), secs = _timed(_ldp_trials, levels, shares, users, eps, f, trials, rng)
        c = gls.covariance(covs)
        pred = float(np.trace(g @ c))
        gc = g @ c
        rse = math.sqrt(2 * np.trace(gc @ gc) / trials) / np.trace(gc)
        sse = np.einsum("ti,ti->t", errs @ g, errs)
        se = np.sqrt(np.diag(c) / trials)
        row = {"design": name, "groups": len(levels), "users": users, "epsilon": eps, "trials": trials,
               "simulated_sse": float(sse.mean()), "predicted_sse": pred,
               "simulated_over_predicted": round(float(sse.mean() / pred), 4), "rse": round(float(rse), 4),
               "f_free_over_predicted": round(gls.total_error(g) / pred, 4),
               "max_abs_mean_error_in_se": round(float(np.max(np.abs(errs.mean(0)) / se)), 2),
               "seconds": round(secs, 1)}
        if name == "hio-binary-noroot":
            from ldp.matrix.gls import dyadic_decomposition

            lo, hi = wl.all_ranges_1d(n)
            r = dyadic_decomposition(n, lo, hi)
            sigma = np.zeros((r.shape[1],) * 2)
            start = 0
            for cov in covs:
                sigma[start : start + cov.shape[0], start : start + cov.shape[0]] = cov
                start += cov.shape[0]
            canon = float(np.einsum("ij,jk,ik->", r, sigma, r))
            row["canonical_decomposition_sse"] = canon
            row["gls_over_canonical"] = round(pred / canon, 4)
        out.append(row)
        print(f"ldp_gls: {row}", flush=True)
    return out


# ------------------------------------------------------------------------------------------ HDMM anchor
def run_hdmm_anchor() -> list[dict]:
    """Our certified OPT against HDMM's published Gaussian OPT_0 ratios on the same workloads."""
    out = []
    for spec, theirs in HDMM_ANCHORS.items():
        work = wl.parse_workload(spec)
        bound = svdb(work)
        s, secs = _timed(opt, work)
        row = {"workload": spec, "opt_ratio": round(s.info["primal"] / bound, 5), "gap": s.info["gap"],
               "hdmm_opt0_ratio": theirs, "seconds": round(secs, 2)}
        out.append(row)
        print(f"hdmm: {row}", flush=True)
    return out


# ----------------------------------------------------------------------------------------- Monte Carlo
def run_montecarlo(n: int, draws: int, seed: np.random.SeedSequence) -> list[dict]:
    """SSE_t = z_t^T S z_t, S = (W A^+)^T (W A^+): E = sigma^2 tr S; the mean of T draws has relative
    standard error RSE = sqrt(2 tr S^2 / T) / tr S."""
    w = wl.allrange_matrix((n,))
    gram = w.T @ w
    out = []
    for (name, strat), s in zip((("h2", hierarchical(n, 2)), ("haar", haar(n)), ("identity", identity(n))),
                                seed.spawn(3)):
        rng = np.random.default_rng(s)
        mech = GaussianMatrixMechanism(strat, 1.0, 1e-6)
        x = rng.integers(0, 1000, size=n).astype(float)
        a = strat.matrix
        y = (a @ x)[:, None] + rng.normal(0.0, mech.sigma, size=(a.shape[0], draws))
        err = mech.estimate(y) - x[:, None]
        sse = np.einsum("it,it->t", gram @ err, err)
        closed = mech.expected_total_error(gram)
        wa = w @ np.linalg.pinv(a)
        sm = wa.T @ wa
        rse = math.sqrt(2 * np.trace(sm @ sm) / draws) / np.trace(sm)
        per_q = np.einsum("ij,jk,ik->i", w, err @ err.T / draws, w) / mech.query_variance(w)
        row = {"strategy": name, "n": n, "draws": draws,
               "mean_sse_over_closed_minus_1": float(sse.mean() / closed - 1), "rse": float(rse),
               "deviation_in_rse": float((sse.mean() / closed - 1) / rse),
               "per_query_max_abs_dev": float(np.max(np.abs(per_q - 1)))}
        out.append(row)
        print(f"montecarlo: {row}", flush=True)
    return out


# --------------------------------------------------------------------------------------------------- plot
def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    ax = axes[0, 0]
    recs = result["records"]
    works = list(dict.fromkeys(r["workload"] for r in recs))
    strats = list(dict.fromkeys(r["strategy"] for r in recs))
    width = 0.8 / max(1, len(strats))
    for j, s in enumerate(strats):
        vals = [next((r["ratio"] for r in recs if r["workload"] == w and r["strategy"] == s), np.nan)
                for w in works]
        ax.bar(np.arange(len(works)) + j * width, vals, width, label=s)
    ax.set_xticks(np.arange(len(works)) + width * (len(strats) - 1) / 2)
    ax.set_xticklabels([w.replace("allrange:", "") for w in works], rotation=20)
    ax.set_yscale("log")
    ax.axhline(1, color="k", lw=0.8)
    ax.set_ylabel("error / SVD bound")
    ax.set_title("Fig 3(a): AllRange, error / svdb")
    ax.legend(fontsize=8)
    if "fig1" in result:
        ax = axes[0, 1]
        h = result["fig1"]["history"]
        ax.plot([x["k"] for x in h], [x["ratio"] for x in h], "o-")
        ax.set_yscale("log")
        ax.set_xlabel("levels k")
        ax.set_ylabel("error / svdb")
        ax.set_title(f"Fig 1: LSA on AllRange({result['fig1']['n']})")
        ax.grid(alpha=0.3)
    if "fig2" in result:
        ax = axes[0, 2]
        for dom in dict.fromkeys(r["domain"] for r in result["fig2"]):
            for mode, ls in (("uniform", "-"), ("biased", "--")):
                rows = [r for r in result["fig2"] if r["domain"] == dom and r["mode"] == mode]
                ax.plot([r["size"] for r in rows], [r["metric"] for r in rows], ls, marker="o",
                        label=f"{dom} {mode}")
        ax.set_xscale("log")
        ax.axhline(1, color="k", lw=0.8)
        ax.set_xlabel("sampled queries |S|")
        ax.set_ylabel("(svdb(S)/|S|) / (svdb(all)/m)")
        ax.set_title("Fig 2: complexity of sampled workloads")
        ax.legend(fontsize=6, ncol=2)
    if "fig3b" in result:
        ax = axes[1, 0]
        rows = result["fig3b"]
        for s in ("identity", "haar", "h2", "lsa", "opt"):
            ax.plot([r["coverage"] for r in rows], [r[s] for r in rows], "o-", label=s)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("average coverage")
        ax.set_ylabel("error / svdb")
        ax.set_title("Fig 3(b): random ranges by coverage (n=256)")
        ax.legend(fontsize=8)
    if "fig3c" in result:
        ax = axes[1, 1]
        rows = result["fig3c"]
        ds = [r["d"] for r in rows]
        ax.plot(ds, [r["full_lsa_seconds"] for r in rows], "o-", label="full-domain LSA")
        ax.plot(ds, [r["separated_lsa_seconds"] for r in rows], "s-", label="separated LSA")
        ax.plot(ds, [r["separated_opt_seconds"] for r in rows], "^-", label="separated OPT")
        ax.set_yscale("log")
        ax.set_xlabel("d (domain d x d)")
        ax.set_ylabel("seconds")
        ax.set_title("Fig 3(c): separation (ranges over both 1-way marginals)")
        ax.legend(fontsize=8)
    if "montecarlo" in result:
        ax = axes[1, 2]
        rows = result["montecarlo"]
        ax.bar([r["strategy"] for r in rows], [r["deviation_in_rse"] for r in rows])
        ax.axhline(5, color="r", lw=0.8)
        ax.axhline(-5, color="r", lw=0.8)
        ax.set_ylabel("(mean SSE / closed form - 1) / RSE")
        ax.set_title("Monte Carlo check, AllRange(64), T = 20,000")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---------------------------------------------------------------------------------------------------- CLI
def _csv(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _ints(text: str) -> list[int]:
    try:
        vals = [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError("values must be positive")
    return vals


def _figures(text: str) -> list[str]:
    if text == "none":
        return []
    items = _csv(text)
    bad = [f for f in items if f not in FIGURES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown figures {bad}; choose from {', '.join(FIGURES)} or none")
    return items


def _workloads(text: str) -> list[str]:
    items = _csv(text)
    for spec in items:
        try:
            wl.parse_workload(spec)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return items


def _strategies(text: str) -> list[str]:
    items = _csv(text)
    for s in items:
        if not (s in ("identity", "haar", "lsa", "opt", "lsa-kron") or (s[0] == "h" and s[1:].isdigit())):
            raise argparse.ArgumentTypeError(f"unknown strategy {s!r}")
    return items


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.matrix_mechanism", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--workloads", type=_workloads,
                    default="allrange:512,allrange:1024,allrange:32x32,allrange:16x8x8,allrange:4x4x4x4x4",
                    help="comma-separated kind:dims (allrange, prefix, allpredicate, marginals<k>, "
                    "rangemarginals)")
    ap.add_argument("--strategies", type=_strategies, default="identity,h2,haar,lsa,opt",
                    help="identity, h<b>, haar, lsa, opt, lsa-kron")
    ap.add_argument("--lsa_k_max", type=int, default=14, help="LSA level bound in the main table")
    ap.add_argument("--figures", type=_figures, default=",".join(FIGURES),
                    help=f"which extra experiments to run: {', '.join(FIGURES)} or none")
    ap.add_argument("--fig1_n", type=int, default=512)
    ap.add_argument("--fig1_k_max", type=int, default=25)
    ap.add_argument("--fig2_sizes", type=_ints, default="100,1000,10000")
    ap.add_argument("--fig2_bias", type=float, default=10.0,
                    help="lambda of the biased sampling, P ~ exp(-lambda * relative distance to the centre)")
    ap.add_argument("--fig3b_n", type=int, default=256)
    ap.add_argument("--fig3b_queries", type=int, default=2000)
    ap.add_argument("--fig3b_lsa_k_max", type=int, default=12)
    ap.add_argument("--fig3c_d", type=_ints, default="8,16,32")
    ap.add_argument("--mc_n", type=int, default=64)
    ap.add_argument("--mc_draws", type=int, default=20000)
    ap.add_argument("--gls_n", type=int, default=64, help="ldp_gls: domain size")
    ap.add_argument("--gls_users", type=int, default=100_000, help="ldp_gls: users per trial")
    ap.add_argument("--gls_epsilon", type=float, default=1.0)
    ap.add_argument("--gls_trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0, help="root of the run's numpy SeedSequence")
    ap.add_argument("--json", dest="json_out", help="write all results to this JSON file")
    ap.add_argument("--plot", help="write a PNG with every figure")
    return ap


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    root = np.random.SeedSequence(args.seed)
    s_fig2, s_fig3b, s_mc, s_gls = root.spawn(4)
    t0 = time.perf_counter()
    result: dict = {"config": {k: v for k, v in vars(args).items()},
                    "platform": {"python": sys.version.split()[0], "machine": platform.machine(),
                                 "numpy": np.__version__}}
    result["records"] = run_table(args.workloads, args.strategies, lsa_k_max=args.lsa_k_max)
    if "fig1" in args.figures:
        result["fig1"] = run_fig1(args.fig1_n, args.fig1_k_max)
    if "fig2" in args.figures:
        result["fig2"] = run_fig2(args.fig2_sizes, args.fig2_bias, s_fig2)
    if "fig3b" in args.figures:
        result["fig3b"] = run_fig3b(args.fig3b_n, args.fig3b_queries, args.fig3b_lsa_k_max, s_fig3b)
    if "fig3c" in args.figures:
        result["fig3c"] = run_fig3c(args.fig3c_d)
    if "montecarlo" in args.figures:
        result["montecarlo"] = run_montecarlo(args.mc_n, args.mc_draws, s_mc)
    if "ldp_gls" in args.figures:
        result["ldp_gls"] = run_ldp_gls(args.gls_n, args.gls_users, args.gls_epsilon, args.gls_trials, s_gls)
    if "hdmm" in args.figures:
        result["hdmm"] = run_hdmm_anchor()
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(result, fh, indent=1)
    if args.plot:
        plot(result, args.plot)
    return result


if __name__ == "__main__":
    main()
