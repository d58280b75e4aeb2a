"""Benchmark of the range-query core.

For d attributes of domain c and n users (default d = 6, c = 64, n = 1,000,000, epsilon = 1, correlated
Gaussian data) it times, per method:

* client encode (all users, vectorized) and server accumulation (all groups);
* ``finalize``: estimates of all grids, Norm-Sub + consistency and, for HDG, the C(d, 2) response matrices
  (target <= 2 s);
* 10,000 random 2-D queries (target <= 1 s) and 1,000 random lambda = 4 queries (target <= 5 s);

and the answers' MAE against the exact answers as a sanity check. The floor is a plain-numpy pass that
computes the exact answers of the same 2-D queries from the raw records.

    python -m bench.range_queries --json OUT.json [--users N --attributes D --domain_size C --methods hdg,tdg]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

from ldp.datasets.multi import gaussian_records
from ldp.rangequery import make_mechanism, random_queries, true_answers

TARGETS = {"finalize_s": 2.0, "queries_2d_s": 1.0, "queries_4d_s": 5.0}


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def run(users: int, d: int, c: int, epsilon: float, methods: list[str], seed: int, n2: int, n4: int) -> dict:
    ss = np.random.SeedSequence(seed)
    data_seed, q_seed, *run_seeds = ss.spawn(2 + len(methods))
    records = gaussian_records(users, d, c, rho=0.5, rng=np.random.default_rng(data_seed))
    qrng = np.random.default_rng(q_seed)
    q2 = random_queries([c] * d, n2, 2, 0.5, rng=qrng)
    q4 = random_queries([c] * d, n4, min(4, d), 0.5, rng=qrng)
    _, floor_s = _timed(true_answers, records, q2[:1000])
    truth2 = true_answers(records, q2[:500])
    truth4 = true_answers(records, q4[:200])
    results = []
    for method, rs in zip(methods, run_seeds):
        g = np.random.default_rng(rs)
        mech = make_mechanism(method, epsilon, [c] * d, users)
        groups = mech.assign_groups(users, rng=g, balanced=True)
        reports, enc_s = _timed(mech.encode, records, rng=g, groups=groups)
        accs, acc_s = _timed(mech.accumulate, reports)
        model, fin_s = _timed(mech.finalize, accs)
        a2, t2 = _timed(model.answer, q2)
        a4, t4 = _timed(model.answer, q4)
        row = {
            "method": method,
            "groups": mech.n_groups,
            "encode_s": round(enc_s, 4),
            "accumulate_s": round(acc_s, 4),
            "finalize_s": round(fin_s, 4),
            "queries_2d": len(q2),
            "queries_2d_s": round(t2, 4),
            "queries_4d": len(q4),
            "queries_4d_s": round(t4, 4),
            "mae_2d": round(float(np.abs(a2[: len(truth2)] - truth2).mean()), 5),
            "mae_4d": round(float(np.abs(a4[: len(truth4)] - truth4).mean()), 5),
            "model_json_bytes": len(json.dumps(model.to_dict())),
        }
        info = getattr(model, "info", None)
        if info:
            row["info"] = {k: v for k, v in info.items() if k != "wu_sweeps"}
            if "wu_sweeps" in info:
                row["info"]["wu_sweeps_max"] = int(max(info["wu_sweeps"]))
        row["within_targets"] = all(row[k] <= v for k, v in TARGETS.items())
        results.append(row)
        print(
            f"{method:5s} groups={row['groups']:3d} encode={enc_s:6.2f}s accumulate={acc_s:6.2f}s "
            f"finalize={fin_s:6.3f}s 2-D x{len(q2)}={t2:6.3f}s 4-D x{len(q4)}={t4:6.3f}s "
            f"MAE2={row['mae_2d']:.4f} MAE4={row['mae_4d']:.4f}",
            flush=True,
        )
    return {
        "benchmark": "range_queries",
        "users": users,
        "attributes": d,
        "domain": c,
        "epsilon": epsilon,
        "dataset": "gaussian:0.5",
        "targets": TARGETS,
        "floor_exact_1000_2d_queries_on_raw_records_s": round(floor_s, 4),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "machine": platform.machine(),
        "results": results,
    }


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _positive_int(text: str) -> int:
    x = int(text)
    if x < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return x


def _epsilons(text: str) -> list[float]:
    try:
        vals = [float(e) for e in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(e <= 0 or e != e for e in vals):
        raise argparse.ArgumentTypeError(f"epsilons must be positive, got {text!r}")
    return vals


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.range_queries", description=__doc__,
                                 formatter_class=_Formatter, allow_abbrev=False)
    ap.add_argument("--users", type=_positive_int, default=1_000_000, help="n")
    ap.add_argument("--attributes", type=_positive_int, default=6, help="d")
    ap.add_argument("--domain_size", type=_positive_int, default=64, help="c, domain size of every attribute")
    ap.add_argument("--epsilons", type=_epsilons, default=[1.0], help="comma-separated; one run per value")
    ap.add_argument("--methods", default="hdg,tdg,calm,uni", help="comma-separated method names")
    ap.add_argument("--queries_2d", type=_positive_int, default=10_000)
    ap.add_argument("--queries_4d", type=_positive_int, default=1_000)
    ap.add_argument("--trials", type=_positive_int, default=1, help="repetitions (fresh seeds) per epsilon")
    ap.add_argument("--seed", type=int, default=2021, help="root of the numpy SeedSequence")
    ap.add_argument("--json", help="write the results here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    runs = []
    seeds = np.random.SeedSequence(args.seed).generate_state(len(args.epsilons) * args.trials)
    for i, eps in enumerate(args.epsilons):
        for t in range(args.trials):
            single = len(args.epsilons) == 1 and args.trials == 1
            seed = args.seed if single else int(seeds[i * args.trials + t])
            runs.append(run(args.users, args.attributes, args.domain_size, eps, methods, seed,
                            args.queries_2d, args.queries_4d))
    out = runs[0] if len(runs) == 1 else {"benchmark": "range_queries", "runs": runs}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    ok = all(r["within_targets"] for rr in runs for r in rr["results"] if r["method"] in ("hdg", "tdg"))
    print("targets met (hdg, tdg):", ok)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
