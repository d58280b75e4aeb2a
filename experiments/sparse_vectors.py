"""Reproduction of Zhou et al. (S&P 2022), k-sparse vector mean estimation: SVME vs every baseline.

    .venv/bin/python -m experiments.sparse_vectors --users 100000 --domain_size 100000 --sparsity 64 \\
        --epsilons 1 --privacy user,event --methods svme,kfold,sampling,gaussian,harmony,pckv \\
        --trials 10 --json OUT.json [--plot OUT.png]

(The issue writes ``--domain``; the project's flag is ``--domain_size``.) ``--sparsity``,
``--domain_size`` and ``--epsilons`` take comma-separated lists: the k-, d- and eps-sweeps of the
paper's figures are the same command with a list. Every trial draws a fresh population (one per
(k, d, trial), shared by all methods, budgets and privacy levels of that trial) and fresh client
randomness: the means are over real independent trials (the reference code scores one estimate ten
times).

Metrics over the query set Q (``--query``: ``first2k`` = the first 2k coordinates, the paper's choice
for ``supersparse``; ``all`` = every coordinate, its choice for ``zipf-sparse``; ``auto`` picks by
dataset): ``linf`` = max |v_hat - v_bar|, ``mse`` = mean (v_hat - v_bar)^2 after clipping the
estimates to [-1, 1] as the paper's code does; ``linf_raw`` / ``mse_raw`` before clipping;
``theory_mse`` = the closed-form variance averaged over Q (exact for unclipped unbiased estimates);
``mean_std2`` = the average squared std the estimator reported with its estimates (so
``mse_raw / mean_std2`` says whether the error bars describe the error). SVME records also carry
``linf_all`` / ``mse_all`` over all d coordinates (from the whole-vector accumulator) when d allows.
``lb_rate`` is the lower-bound rate (event: sqrt(ln d / n)/eps; user: sqrt(k ln(d/k)/n)/eps) and
``linf_over_rate`` = linf / lb_rate ("ratio to the rate", not a certificate: constants are unknown).

Methods: ``svme`` (paper parameter rule), ``svme-theory`` (theory rule: unbiased clip, balancing b),
``kfold``, ``sampling``, ``gaussian`` (the paper's classical calibration), ``gaussian-analytic``,
``harmony``, ``pckv`` (unbiased estimator, dummy keys outside the domain), ``pckv-original`` (PCKV's own
clipped estimator). The Gaussian's n dense reports are simulated by drawing their mean directly
(exact in distribution; ``ldp.sparse.baselines.Gaussian.simulate``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from ldp.datasets.sparse import parse_sparse_dataset, sample_sparse
from ldp.sparse import SVME, choose_params
from ldp.sparse.baselines import PCKV, Gaussian, Harmony, KFold, Sampling
from ldp.sparse.hashes import SPARSE_HASHES
from pipelines.cli import job_parser, parse_job_args

METHODS = (
    "svme",
    "svme-theory",
    "kfold",
    "sampling",
    "gaussian",
    "gaussian-analytic",
    "harmony",
    "pckv",
    "pckv-original",
)
STRAWMAN = {"event": "kfold", "user": "sampling"}
PAPER_BYTES_NOTE = "paper mode: 5-byte seed + float32 per bin/value (Harmony/PCKV: the code's 8 bytes)"
_CHUNK = 20_000
_ALL_D_LIMIT = 1 << 22


def lower_bound_rate(privacy, n: int, d: int, k: int, epsilon: float) -> float | None:
    """The lower-bound rate LB0 of the spec (Sec. 5)."""
    if privacy == "event":
        return math.sqrt(math.log(d) / n) / epsilon
    if privacy == "user":
        return math.sqrt(k * math.log(max(d / k, 1.0 + 1e-12)) / n) / epsilon
    return None


def make_method(name: str, eps: float, d: int, k: int, privacy, n: int, delta: float, hash_family: str):
    if name == "svme":
        return SVME(choose_params(eps, d, k, privacy, delta=delta, expected_users=n, hash_family=hash_family))
    if name == "svme-theory":
        return SVME(
            choose_params(
                eps, d, k, privacy, delta=delta, expected_users=n, hash_family=hash_family, rule="theory"
            )
        )
    if name == "kfold":
        return KFold(eps, d, k, privacy, hash_family=hash_family)
    if name == "sampling":
        return Sampling(eps, d, k, privacy, hash_family=hash_family)
    if name == "gaussian":
        return Gaussian(eps, d, k, privacy, delta=delta)
    if name == "gaussian-analytic":
        return Gaussian(eps, d, k, privacy, delta=delta, calibration="analytic")
    if name == "harmony":
        return Harmony(eps, d, k, privacy)
    if name == "pckv":
        return PCKV(eps, d, k, privacy)
    if name == "pckv-original":
        return PCKV(eps, d, k, privacy, estimator="original")
    raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")


def paper_bytes(name: str, mech) -> int:
    """Report size as the paper counts it (5-byte seed, float32 values; the code's 8 B for 1-item ones)."""
    if name.startswith("svme"):
        return 5 + 4 * mech.params.bins
    if name == "kfold":
        return 5 + 4 * mech.k
    if name == "sampling":
        return 9
    if name.startswith("gaussian"):
        return 4 * mech.d
    return 8


def report_bytes(mech) -> int:
    return -(-int(mech.report_bits) // 8)


def run_method(mech, vec, items, rng, want_all: bool):
    """One trial of one method: ``(estimate over items, whole-vector estimate or None)``."""
    if isinstance(mech, Gaussian):
        return mech.simulate(vec, items, rng), None
    d = mech.params.domain_size if isinstance(mech, SVME) else mech.d
    whole = items.size == d and np.array_equal(items, np.arange(d, dtype=np.uint64))
    acc = mech.create_accumulator(None if whole else items)  # all of [0, d): the whole-vector table
    table = None
    if want_all and isinstance(mech, SVME) and mech.params.hash_family == "gf2-affine":
        table = mech.create_accumulator(None)
    for lo in range(0, vec.n, _CHUNK):
        rep, _ = mech.encode(vec.take(slice(lo, lo + _CHUNK)), rng=rng)
        mech.add(acc, rep)
        if table is not None:
            mech.add(table, rep)
    return mech.estimate(acc), (mech.estimate(table) if table is not None else None)


def query_items(query: str, d: int, k: int) -> np.ndarray:
    """The query set Q of ``--query`` (``first2k``, ``all`` or an integer m) over the domain [0, d)."""
    if query == "first2k":
        return np.arange(min(2 * k, d), dtype=np.uint64)
    if query == "all":
        if d > _ALL_D_LIMIT:
            raise ValueError(f"--query all needs d <= {_ALL_D_LIMIT}")
        return np.arange(d, dtype=np.uint64)
    return np.arange(min(int(query), d), dtype=np.uint64)


def score_trial(mech, est, whole, vec, items, truth, truth_all, secs: float) -> dict:
    """The per-trial metrics of one method's estimate (see the module docstring)."""
    raw = est.mean - truth
    clip = np.clip(est.mean, -1, 1) - truth
    rec = {
        "linf": float(np.abs(clip).max()),
        "mse": float((clip**2).mean()),
        "linf_raw": float(np.abs(raw).max()),
        "mse_raw": float((raw**2).mean()),
        "theory_mse": float(np.mean(mech.variance(vec, items))),
        "mean_std2": float(np.mean(est.variance)),
        "seconds": secs,
    }
    if whole is not None:
        e_all = np.clip(whole.mean, -1, 1) - truth_all
        rec["linf_all"] = float(np.abs(e_all).max())
        rec["mse_all"] = float((e_all**2).mean())
    return rec


def describe_cell(name: str, mech, n: int, items: np.ndarray, priv) -> dict:
    """What a (method, privacy, eps, k, d) cell reports besides its metrics (taken from its first trial)."""
    return {
        "bytes_per_report": report_bytes(mech),
        "paper_bytes_per_report": paper_bytes(name, mech),
        "config": mech.describe(),
        "users": n,
        "query_size": int(items.size),
        "privacy_value": priv,
    }


def run_trial(
    ss: np.random.SeedSequence,
    *,
    d: int,
    k: int,
    users: int | None,
    dataset: str,
    query: str,
    epsilons: list[float],
    privacies: list,
    methods: list[str],
    delta: float,
    hash_family: str,
    cells: dict[tuple, list[dict]],
    meta: dict[tuple, dict],
) -> tuple[float, int, float]:
    """One trial of every (eps, privacy, method) on one fresh population; adds its records to ``cells``.

    Returns ``(seconds spent drawing the data, n, mean non-zeros per user)``.
    """
    data_ss, mech_ss = ss.spawn(2)
    t0 = time.perf_counter()
    vec = sample_sparse(dataset, users, d, k, np.random.default_rng(data_ss))
    n = vec.n
    items = query_items(query, d, k)
    truth = vec.mean_at(items)
    want_all = d <= _ALL_D_LIMIT and query != "all"
    truth_all = vec.mean_vector(d) if want_all else None
    gen_s = time.perf_counter() - t0
    streams = iter(mech_ss.spawn(len(epsilons) * len(privacies) * len(methods)))
    for eps in epsilons:
        for priv in privacies:
            for name in methods:
                rng = np.random.default_rng(next(streams))
                t1 = time.perf_counter()
                mech = make_method(name, eps, d, k, priv, n, delta, hash_family)
                est, whole = run_method(mech, vec, items, rng, want_all)
                secs = time.perf_counter() - t1
                key = (name, str(priv), eps, k, d)
                cells.setdefault(key, []).append(
                    score_trial(mech, est, whole, vec, items, truth, truth_all, secs)
                )
                if key not in meta:
                    meta[key] = describe_cell(name, mech, n, items, priv)
    return gen_s, n, vec.nnz.mean()


def summarise_cell(key: tuple, recs: list[dict], m: dict, common: dict) -> dict:
    """One output record: a cell's trial means, standard deviations and per-trial values."""
    name, _, eps, k, d = key
    out = {
        "method": name,
        "privacy": m["privacy_value"],
        "epsilon": eps,
        "sparsity": k,
        "domain": d,
        "users": m["users"],
        "dataset": common["dataset"],
        "query": common["query"],
        "query_size": m["query_size"],
        "trials": len(recs),
        "delta": common["delta"],
        "hash_family": common["hash_family"],
    }
    for f in recs[0]:
        vals = np.array([r[f] for r in recs])
        out[f] = float(vals.mean())
        if f != "seconds":
            out[f + "_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
            out[f + "_trials"] = [float(v) for v in vals]
    lb = lower_bound_rate(out["privacy"], out["users"], d, k, eps)
    out["lb_rate"] = lb
    out["linf_over_rate"] = out["linf"] / lb if lb else None
    out["bytes_per_report"] = m["bytes_per_report"]
    out["paper_bytes_per_report"] = m["paper_bytes_per_report"]
    out["config"] = m["config"]
    return out


def run(
    *,
    users: int | None,
    domains: list[int],
    sparsities: list[int],
    epsilons: list[float],
    privacies: list,
    methods: list[str],
    trials: int,
    seed: int,
    dataset: str = "supersparse",
    query: str = "auto",
    delta: float = 1e-6,
    hash_family: str = "gf2-affine",
    log=print,
) -> list[dict]:
    kind, _ = parse_sparse_dataset(dataset)
    if query == "auto":
        query = "first2k" if kind == "supersparse" else "all"
    cells: dict[tuple, list[dict]] = {}
    meta: dict[tuple, dict] = {}
    for d in domains:
        for k in sparsities:
            for t in range(trials):
                # one stream per (d, k, trial): the same population whatever else the run sweeps
                ss = np.random.SeedSequence([seed, d % (1 << 32), d >> 32, k, t])
                gen_s, n, nnz = run_trial(
                    ss, d=d, k=k, users=users, dataset=dataset, query=query, epsilons=epsilons,
                    privacies=privacies, methods=methods, delta=delta, hash_family=hash_family,
                    cells=cells, meta=meta,
                )  # fmt: skip
                log(f"d={d} k={k} trial {t + 1}/{trials}: data {gen_s:.1f}s, n={n}, nnz/user={nnz:.1f}")
    common = {"dataset": dataset, "query": query, "delta": delta, "hash_family": hash_family}
    return [summarise_cell(key, recs, meta[key], common) for key, recs in cells.items()]


def ratios(records: list[dict]) -> list[dict]:
    """strawman / SVME (k-fold for event level, sampling for user level) per configuration."""
    idx = {(r["method"], str(r["privacy"]), r["epsilon"], r["sparsity"], r["domain"]): r for r in records}
    out = []
    for (name, priv, eps, k, d), r in idx.items():
        if name != "svme" or priv not in STRAWMAN:
            continue
        s = idx.get((STRAWMAN[priv], priv, eps, k, d))
        if s is None:
            continue
        out.append(
            {
                "privacy": priv,
                "epsilon": eps,
                "sparsity": k,
                "domain": d,
                "strawman": STRAWMAN[priv],
                "linf_ratio": s["linf"] / r["linf"],
                "mse_ratio": s["mse"] / r["mse"],
            }
        )
    return out


def table(records: list[dict]) -> str:
    lines = [
        "| method | privacy | eps | k | d | L-inf | MSE | MSE raw / theory | MSE raw / mean std^2 | "
        "L-inf / rate | bytes (ours / paper) |",
        "|" + "---|" * 11,
    ]
    for r in sorted(
        records,
        key=lambda r: (
            str(r["privacy"]),
            r["epsilon"],
            r["sparsity"],
            r["domain"],
            METHODS.index(r["method"]),
        ),
    ):
        lr = f"{r['linf_over_rate']:.2f}" if r["linf_over_rate"] else "-"
        lines.append(
            f"| {r['method']} | {r['privacy']} | {r['epsilon']:g} | {r['sparsity']} | {r['domain']} | "
            f"{r['linf']:.4g} ± {r['linf_sd']:.2g} | {r['mse']:.4g} ± {r['mse_sd']:.2g} | "
            f"{r['mse_raw'] / r['theory_mse']:.3f} | {r['mse_raw'] / r['mean_std2']:.3f} | {lr} | "
            f"{r['bytes_per_report']} / {r['paper_bytes_per_report']} |"
        )
    rat = ratios(records)
    if rat:
        lines += ["", "| privacy | eps | k | d | strawman | L-inf ratio | MSE ratio |", "|" + "---|" * 7]
        for x in rat:
            lines.append(
                f"| {x['privacy']} | {x['epsilon']:g} | {x['sparsity']} | {x['domain']} | "
                f"{x['strawman']} | {x['linf_ratio']:.2f} | {x['mse_ratio']:.2f} |"
            )
    return "\n".join(lines)


def plot(records: list[dict], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if all(isinstance(r["privacy"], int) for r in records):  # an L-sweep: one row, x = L
        records = [{**r, "L": r["privacy"], "privacy": "L-neighbouring"} for r in records]
        varying = ["L"]
    else:
        varying = [f for f in ("epsilon", "sparsity", "domain") if len({r[f] for r in records}) > 1]
    privs = sorted({str(r["privacy"]) for r in records})
    fig, axes = plt.subplots(len(privs), 2, figsize=(11, 3.8 * len(privs)), squeeze=False)
    for i, pv in enumerate(privs):
        rs = [r for r in records if str(r["privacy"]) == pv]
        methods = [m for m in METHODS if any(r["method"] == m for r in rs)]
        for j, metric in enumerate(("linf", "mse")):
            ax = axes[i][j]
            if varying:
                f = varying[0]
                for m in methods:
                    pts = sorted((r[f], r[metric], r[metric + "_sd"]) for r in rs if r["method"] == m)
                    xs, ys, sd = zip(*pts)
                    ax.errorbar(xs, ys, yerr=sd, marker="o", ms=3, capsize=2, label=m)
                ax.set_xlabel(f)
                if f in ("domain", "sparsity"):
                    ax.set_xscale("log", base=2)
            else:
                vals = [next(r for r in rs if r["method"] == m) for m in methods]
                ax.bar(
                    range(len(methods)),
                    [v[metric] for v in vals],
                    yerr=[v[metric + "_sd"] for v in vals],
                    color=[f"C{k}" for k in range(len(methods))],
                )
                ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right", fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("L-inf" if metric == "linf" else "MSE")
            level = pv if pv == "L-neighbouring" else f"{pv}-level"
            ax.set_title(f"{level}: {'L-inf' if metric == 'linf' else 'MSE'}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
            if varying and i == 0 and j == 1:
                ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ints(s: str, flag: str, ap) -> list[int]:
    try:
        out = [int(float(x)) for x in s.split(",") if x.strip()]
    except ValueError:
        ap.error(f"bad {flag} {s!r}")
    if not out or min(out) < 1:
        ap.error(f"{flag} needs positive integers, got {s!r}")
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = job_parser(__doc__.split("\n\n")[0], beam_options=False)
    ap.add_argument("--users", type=int, default=100_000, help="number of simulated users (csv: optional)")
    ap.add_argument(
        "--domain_size", default="100000", help="item universe d (comma-separated list for a d-sweep)"
    )
    ap.add_argument("--seed", type=int, default=0, help="entropy of the run's numpy SeedSequence")
    ap.add_argument("--sparsity", default="64", help="k (comma-separated list for a k-sweep)")
    ap.add_argument("--epsilons", default="1", help="comma-separated privacy budgets")
    ap.add_argument("--privacy", default="user,event", help="comma-separated: event, user or integers L")
    ap.add_argument(
        "--methods",
        default="svme,kfold,sampling,gaussian,harmony,pckv",
        help=f"comma-separated, from: {', '.join(METHODS)}",
    )
    ap.add_argument("--trials", type=int, default=10, help="independent trials (fresh data and noise)")
    ap.add_argument("--dataset", default="supersparse", help="supersparse, zipf-sparse[:S] or csv:PATH")
    ap.add_argument("--query", default="auto", help="first2k, all, an integer m (first m ids) or auto")
    ap.add_argument(
        "--delta", type=float, default=1e-6, help="delta of the Gaussian and of SVME's (eps, delta) rule"
    )
    ap.add_argument(
        "--hash_family", default="gf2-affine", choices=SPARSE_HASHES, help="SVME/k-fold/sampling hash"
    )
    ap.add_argument("--json", required=True, help="output JSON path")
    ap.add_argument("--plot", default=None, help="output PNG path")
    ap.add_argument("--title", default="", help="plot title")
    args, _ = parse_job_args(ap, argv, beam=False)
    domains = _ints(args.domain_size, "--domain_size", ap)
    raw = list(sys.argv[1:] if argv is None else argv)
    sparsities = _ints(args.sparsity, "--sparsity", ap)
    try:
        epsilons = [float(x) for x in args.epsilons.split(",") if x.strip()]
    except ValueError:
        ap.error(f"bad --epsilons {args.epsilons!r}")
    privacies = []
    for p in args.privacy.split(","):
        p = p.strip()
        if p in ("event", "user"):
            privacies.append(p)
        elif p.isdigit() and int(p) >= 1:
            privacies.append(int(p))
        else:
            ap.error(f"bad --privacy entry {p!r} (event, user or a positive integer L)")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        ap.error(f"unknown --methods {bad}; known: {', '.join(METHODS)}")
    if args.trials < 1:
        ap.error("--trials must be >= 1")
    try:
        parse_sparse_dataset(args.dataset)
    except ValueError as exc:
        ap.error(str(exc))
    users = args.users
    if args.dataset.startswith("csv:") and "--users" not in " ".join(raw):
        users = None
    t0 = time.perf_counter()
    records = run(
        users=users,
        domains=domains,
        sparsities=sparsities,
        epsilons=epsilons,
        privacies=privacies,
        methods=methods,
        trials=args.trials,
        seed=args.seed,
        dataset=args.dataset,
        query=args.query,
        delta=args.delta,
        hash_family=args.hash_family,
    )
    wall = time.perf_counter() - t0
    out = {
        "command": "python -m experiments.sparse_vectors " + " ".join(raw),
        "wall_seconds": wall,
        "records": records,
        "ratios": ratios(records),
        "paper_bytes_note": PAPER_BYTES_NOTE,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(records, args.plot, args.title)
    print(table(records))
    print(f"wall {wall:.1f} s")
    return records


if __name__ == "__main__":
    main()
