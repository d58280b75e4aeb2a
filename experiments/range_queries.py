"""Reproduction of the range-query comparison of Yang et al. (VLDB 2021), Section 6.

    .venv/bin/python -m experiments.range_queries --dataset gaussian:0.8 --users 1000000 --attributes 6 \
        --domain_size 64 --epsilons 0.2,0.6,1.0 --lambda 2 --omega 0.5 --queries 200 \
        --methods hdg,tdg,calm,lhio,hio,msw,uni --trials 3 --json OUT.json [--plot OUT.png]

For every trial: draw a population from the dataset spec (``ldp.datasets.multi``), draw ``--queries`` random
lambda-D range queries (``ldp.rangequery.queries.random_queries``), and for every method and epsilon run the
whole mechanism (group assignment, client perturbation, accumulation, finalize) and record the mean
absolute error (MAE) of its answers against the true answers. Writes a JSON list of records with
``method``, ``epsilon``, ``lambda``, ``dataset``, ``mae`` (mean over trials), ``mae_se`` (standard error
over trials) and the setup.

The workload: ``--omega W`` gives each queried attribute an interval of ``W`` of its domain (the paper's
dimensional query volume omega; a query covers ``W ** lambda`` of the domain); ``--volume V`` instead fixes
the total volume (each attribute gets ``V ** (1 / lambda)`` of its domain). Give one of them; without
either the paper's ``--omega 0.5`` is used.

``--granularity_sweep`` instead runs HDG at epsilon values for every power-of-two pair (g1, g2) and
reports, per epsilon, the guideline's MAE next to the best pair's (the paper's guideline check).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from ldp.datasets.multi import sample_records
from ldp.rangequery.queries import random_queries, true_answers
from ldp.rangequery.registry import make_mechanism

ALL_METHODS = ("hdg", "tdg", "calm", "lhio", "hio", "msw", "uni")


def parse_method_spec(spec: str) -> tuple[str, dict]:
    """``"msw@em_resolution=1,x=0.5"`` -> ``("msw", {"em_resolution": 1, "x": 0.5})`` (method variants)."""
    name, _, rest = spec.partition("@")
    options: dict = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"bad method option {item!r} in {spec!r}: expected KEY=VALUE")
        low = raw.lower()
        if low in ("true", "false"):
            options[key] = low == "true"
        else:
            try:
                options[key] = int(raw)
            except ValueError:
                try:
                    options[key] = float(raw)
                except ValueError:
                    options[key] = raw
    return name.strip(), options


def split_methods(text: str) -> list[str]:
    """``--methods``: separated by ';' when any ';' or variant ('@') is present, else by ','."""
    sep = ";" if (";" in text or "@" in text) else ","
    return [m.strip() for m in text.split(sep) if m.strip()]


def _child(seq: np.random.SeedSequence, *key: int) -> np.random.Generator:
    """A generator for one (method, epsilon, ...) cell, reproducible from the run's seed."""
    return np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, *key)))


def _trials(args, sizes):
    """Per trial: a fresh population, query workload, true answers and the seed for the mechanisms."""
    for t, trial_seed in enumerate(np.random.SeedSequence(args.seed).spawn(args.trials)):
        data_rng, query_rng, mech_seed = trial_seed.spawn(3)
        records = sample_records(args.dataset, args.users, sizes, rng=np.random.default_rng(data_rng))
        queries = random_queries(
            sizes, args.queries, args.lam, args.volume, omega=args.omega, rng=np.random.default_rng(query_rng)
        )
        yield t, records, queries, true_answers(records, queries), mech_seed


def _mae(model, queries, truth) -> float:
    return float(np.mean(np.abs(np.asarray(model.answer(queries)) - truth)))


def run_comparison(args) -> list[dict]:
    sizes = [args.domain_size] * args.attributes
    methods = split_methods(args.methods)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    maes: dict[tuple[str, float], list[float]] = {}
    secs: dict[tuple[str, float], float] = {}
    for t, records, queries, truth, mech_seed in _trials(args, sizes):
        for i, method in enumerate(methods):
            for j, eps in enumerate(epsilons):
                rng = _child(mech_seed, i, j)
                t0 = time.perf_counter()
                name, options = parse_method_spec(method)
                mech = make_mechanism(name, eps, sizes, args.users, **options)
                mae = _mae(mech.fit(records, rng=rng), queries, truth)
                dt = time.perf_counter() - t0
                maes.setdefault((method, eps), []).append(mae)
                secs[(method, eps)] = secs.get((method, eps), 0.0) + dt
                print(f"trial {t} {method:>5} eps={eps:<4} mae={mae:.5f} ({dt:.1f}s)", flush=True)
    out = []
    for (method, eps), vals in maes.items():
        out.append(
            {
                "method": method,
                "epsilon": eps,
                "lambda": args.lam,
                "dataset": args.dataset,
                "mae": float(np.mean(vals)),
                "mae_se": float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else None,
                "trials": len(vals),
                "users": args.users,
                "attributes": args.attributes,
                "domain": args.domain_size,
                "volume": args.volume,
                "omega": args.omega,
                "total_volume": args.volume if args.omega is None else args.omega**args.lam,
                "queries": args.queries,
                "seconds_per_trial": secs[(method, eps)] / len(vals),
            }
        )
    return out


def run_granularity_sweep(args) -> list[dict]:
    """HDG at every power-of-two (g1, g2) with g2 <= g1 <= c vs the guideline's choice."""
    sizes = [args.domain_size] * args.attributes
    epsilons = [float(e) for e in args.epsilons.split(",")]
    pows = [2**k for k in range(1, int(math.log2(args.domain_size)) + 1)]
    out = []
    for t, records, queries, truth, mech_seed in _trials(args, sizes):
        for j, eps in enumerate(epsilons):
            guide = make_mechanism("hdg", eps, sizes, args.users)
            g1g, g2g = guide.g1, guide.g2
            for g1 in pows:
                for g2 in pows:
                    if g2 > g1:
                        continue
                    rng = _child(mech_seed, j, g1, g2)
                    mech = make_mechanism("hdg", eps, sizes, args.users, g1=g1, g2=g2)
                    mae = _mae(mech.fit(records, rng=rng), queries, truth)
                    out.append(
                        {
                            "method": f"hdg[g1={g1},g2={g2}]",
                            "g1": g1,
                            "g2": g2,
                            "guideline": (g1, g2) == (g1g, g2g),
                            "epsilon": eps,
                            "lambda": args.lam,
                            "dataset": args.dataset,
                            "trial": t,
                            "mae": mae,
                        }
                    )
                    print(f"trial {t} eps={eps} g1={g1:>3} g2={g2:>3} mae={mae:.5f}", flush=True)
    # per (eps): mean over trials, guideline vs best
    summary = []
    for eps in epsilons:
        rows = [r for r in out if r["epsilon"] == eps]
        by_pair: dict[tuple[int, int], list[float]] = {}
        for r in rows:
            by_pair.setdefault((r["g1"], r["g2"]), []).append(r["mae"])
        means = {k: float(np.mean(v)) for k, v in by_pair.items()}
        best = min(means, key=means.get)
        guide = next((r["g1"], r["g2"]) for r in rows if r["guideline"])
        summary.append(
            {
                "method": "hdg-guideline-check",
                "epsilon": eps,
                "lambda": args.lam,
                "dataset": args.dataset,
                "guideline": list(guide),
                "guideline_mae": means[guide],
                "best": list(best),
                "best_mae": means[best],
                "ratio": means[guide] / means[best],
            }
        )
        print(f"eps={eps}: guideline {guide} mae={means[guide]:.5f}; best {best} mae={means[best]:.5f}; "
              f"ratio {means[guide] / means[best]:.2f}")
    return out + summary


def plot(records: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    methods = list(dict.fromkeys(r["method"] for r in records))
    for m in methods:
        rows = sorted((r for r in records if r["method"] == m), key=lambda r: r["epsilon"])
        ax.plot([r["epsilon"] for r in rows], [r["mae"] for r in rows], marker="o", label=m.upper())
    ax.set_yscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("MAE")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _unit_interval(text: str) -> float:
    x = float(text)
    if not 0.0 < x <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return x


def _positive_int(text: str) -> int:
    x = int(text)
    if x < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return x


def _epsilons(text: str) -> str:
    try:
        vals = [float(e) for e in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals or any(not math.isfinite(e) or e <= 0 for e in vals):
        raise argparse.ArgumentTypeError(f"epsilons must be positive, got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.range_queries", description=__doc__, formatter_class=_Formatter,
        allow_abbrev=False,
    )
    ap.add_argument("--dataset", default="gaussian", help="gaussian[:RHO], laplace[:RHO], uniform, csv:PATH")
    ap.add_argument("--users", type=_positive_int, default=1_000_000, help="n, users per trial")
    ap.add_argument("--attributes", type=_positive_int, default=6, help="d")
    ap.add_argument("--domain_size", type=_positive_int, default=64, help="c, domain size of every attribute")
    ap.add_argument("--epsilons", type=_epsilons, default="0.2,0.4,0.6,0.8,1.0", help="comma-separated")
    ap.add_argument("--lambda", dest="lam", type=_positive_int, default=2, help="query dimension")
    work = ap.add_mutually_exclusive_group()
    work.add_argument("--omega", type=_unit_interval, default=None,
                      help="dimensional query volume: each queried attribute spans this fraction of its "
                      "domain (the paper's parameter; 0.5 when neither --omega nor --volume is given)")
    work.add_argument("--volume", type=_unit_interval, default=None,
                      help="total query volume (each attribute spans volume^(1/lambda) of its domain)")
    ap.add_argument("--queries", type=_positive_int, default=200, help="queries per trial")
    ap.add_argument(
        "--methods",
        default=",".join(ALL_METHODS),
        help="comma-separated methods; variants as METHOD@KEY=VALUE[,KEY=VALUE] separated by ';' "
        "(e.g. 'hdg;msw@em_resolution=1')",
    )
    ap.add_argument("--trials", type=_positive_int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="root of the run's numpy SeedSequence")
    ap.add_argument("--granularity_sweep", action="store_true", help="HDG (g1, g2) sweep vs the guideline")
    ap.add_argument("--json", dest="json_out", help="write the records to this JSON file")
    ap.add_argument("--plot", help="write a PNG plot of MAE vs epsilon")
    return ap


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)
    if args.omega is None and args.volume is None:
        args.omega = 0.5
    if args.lam > args.attributes:
        build_parser().error(f"--lambda {args.lam} exceeds --attributes {args.attributes}")
    for spec in split_methods(args.methods):
        try:
            name, options = parse_method_spec(spec)
            make_mechanism(name, 1.0, [max(args.domain_size, 2)] * max(args.attributes, 2), args.users,
                           **options)
        except ValueError as exc:
            build_parser().error(f"--methods {spec!r}: {exc}")
    records = run_granularity_sweep(args) if args.granularity_sweep else run_comparison(args)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(records, indent=1) + "\n")
    if args.plot and not args.granularity_sweep:
        work = f"omega={args.omega}" if args.omega is not None else f"volume={args.volume}"
        plot(records, args.plot, f"{args.dataset}, n={args.users:,}, d={args.attributes}, "
             f"c={args.domain_size}, lambda={args.lam}, {work}")
    return records


if __name__ == "__main__":
    main()
