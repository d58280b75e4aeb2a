"""Frequency-oracle benchmark: our oracles vs a plain-numpy floor and vs peer libraries, in one run.

    .venv/bin/python -m bench.oracles --users 1000000 --domain_size 1024 --epsilon 1 --json OUT.json [--peers]
        [--olh_sweep 0.5,1,2,4,8] [--set_sum_trials 150]

Records (a JSON list), one per (library, mechanism):

* ``aggregate_reports_per_s``: reports / (accumulate + estimate) seconds, after encoding;
* ``encode_reports_per_s``: reports / client-encoding seconds (``None`` for the floor);
* ``mse``: full-domain mean squared error of the estimated frequencies;
* ``theory_variance``: the closed-form variance (Eq. 4 of Wang et al., NDSS 2020) averaged over the
  domain at the true frequencies;
* for ours, ``floor_ratio`` = our aggregation rate / the numpy floor's on the same reports, where the
  floor is the least work any aggregator must do on that input: ``np.bincount`` of the reported values
  (GRR, HR, SS items), or the column sums of the unpacked bit matrix (OUE, SUE).

With ``--peers`` the same inputs go to pure-ldp 1.2.0 and multi-freq-ldpy 0.2.5 (GRR and OLH) in a
separate virtual environment (``.cache/peers-venv``, created on first use: the peers need ``xxhash<4``,
scikit-learn and statsmodels, which we keep out of our dependencies). They run per-report Python, so
they get the first ``--peer_n`` values of the same population; their rates are per second as ours.

With ``--set_sum_trials T`` the variance of a sum of 64 OLH estimates over T runs (5,000 users each, d from
``--domain_size``) is compared with theory at eps = 3 and 4, for the gf2-affine and the legacy linear-gf
family (``library = "ours-set-sum"``; written to ``--set_sum_json``, apart from the rate records).

With ``--olh_sweep EPS,...`` OLH is also measured at each of those epsilons with its default ``g``
(``ldp.oracles.olh_buckets``, the 3-wise independent ``gf2-affine`` family), on the same users and domain:
records with ``library = "ours-olh-sweep"`` holding the rates, ``g``, and ``variance_cost`` = the per-value
variance of the chosen power of two over the variance at the real-valued optimum ``g* = e^eps + 1``, minus 1
(closed form, Eq. 6). The last sweep record also holds ``worst_variance_cost_by_epsilon_range``: the
largest such cost over epsilon ranges (closed form, uncapped domain).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ldp.datasets import sample_population
from ldp.oracles import MECHANISMS, OLH, make_oracle, olh_buckets, olh_variance_factor
from pipelines.cli import add_population_flags, fail, job_parser, parse_job_args

ROOT = Path(__file__).resolve().parents[1]
PEER_VENV = ROOT / ".cache" / "peers-venv"
PEER_PACKAGES = [
    "pure-ldp==1.2.0",
    "multi-freq-ldpy==0.2.5",
    "xxhash<4",
    "scikit-learn",
    "statsmodels",
    "numpy",
]


def _timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _floor(name: str, reports, d: int):
    """The numpy floor for an oracle's input, or None when there is no meaningful one."""
    if name in ("grr", "hr"):
        size = int(reports.values.max()) + 1
        return lambda: np.bincount(reports.values, minlength=size)
    if name == "ss":
        return lambda: np.bincount(reports.items.ravel(), minlength=d)
    if name in ("oue", "sue"):
        step = 1 << 14

        def colsum():
            out = np.zeros(d, dtype=np.int64)
            for s in range(0, len(reports.bits), step):
                out += np.unpackbits(reports.bits[s : s + step], axis=1, count=d, bitorder="little").sum(
                    axis=0, dtype=np.int64
                )
            return out

        return colsum
    return None


def bench_ours(values: np.ndarray, d: int, epsilon: float, mechanisms, seed: int, repeat: int) -> list[dict]:
    n = len(values)
    truth = np.bincount(values, minlength=d) / n
    records = []
    for i, name in enumerate(mechanisms):
        oracle = make_oracle(name, epsilon, d)
        rng = np.random.default_rng([seed, i])
        t_enc, reports = _timed(lambda o=oracle, r=rng: o.encode(values, rng=r))

        def aggregate(o=oracle, reps=reports):
            return o.estimate(o.add(o.create_accumulator(), reps))

        t_agg, est = _timed(aggregate, repeat)
        rec = {
            "library": "ours",
            "mechanism": name,
            "n": n,
            "d": d,
            "epsilon": epsilon,
            "aggregate_reports_per_s": n / t_agg,
            "encode_reports_per_s": n / t_enc,
            "mse": float(np.mean((est.frequencies - truth) ** 2)),
            "theory_variance": float(np.mean(oracle.variance(n, truth))),
            "report_bits": oracle.report_bits,
            "accumulator_bytes": oracle.create_accumulator().nbytes,
            "params": {
                k: v for k, v in oracle.describe().items() if k not in ("mechanism", "epsilon", "domain_size")
            },
        }
        rec["mse_over_theory"] = rec["mse"] / rec["theory_variance"]
        floor = _floor(name, reports, d)
        if floor is not None:
            t_floor, _ = _timed(floor, repeat)
            records.append(
                {
                    "library": "numpy-floor",
                    "mechanism": name,
                    "n": n,
                    "d": d,
                    "epsilon": epsilon,
                    "aggregate_reports_per_s": n / t_floor,
                    "encode_reports_per_s": None,
                    "mse": None,
                    "theory_variance": None,
                }
            )
            rec["floor_ratio"] = rec["aggregate_reports_per_s"] / records[-1]["aggregate_reports_per_s"]
        records.append(rec)
        print(_fmt(rec), flush=True)
    return records


def _olh_cost(epsilon: float, g: int) -> float:
    """Per-value variance of OLH with ``g`` buckets over the real-valued optimum's, minus 1."""
    best = 4 * math.exp(epsilon) / math.expm1(epsilon) ** 2
    return olh_variance_factor(epsilon, g) / best - 1


def bench_olh_sweep(values: np.ndarray, d: int, epsilons, seed: int, repeat: int) -> list[dict]:
    """OLH with its default g at each epsilon (the same users): throughput, g and variance cost."""
    n = len(values)
    truth = np.bincount(values, minlength=d) / n
    records = []
    for i, eps in enumerate(epsilons):
        o = OLH(eps, d)
        rng = np.random.default_rng([seed, 100 + i])
        t_enc, reports = _timed(lambda o=o, r=rng: o.encode(values, rng=r))

        def aggregate(o=o, reps=reports):
            return o.estimate(o.add(o.create_accumulator(), reps))

        t_agg, est = _timed(aggregate, repeat)
        rec = {
            "library": "ours-olh-sweep",
            "mechanism": "olh",
            "n": n,
            "d": d,
            "epsilon": eps,
            "g": o.g,
            "hash": o.family.name,
            "g_real_optimum": math.exp(eps) + 1,
            "variance_cost": _olh_cost(eps, o.g),
            "aggregate_reports_per_s": n / t_agg,
            "encode_reports_per_s": n / t_enc,
            "mse": float(np.mean((est.frequencies - truth) ** 2)),
            "theory_variance": float(np.mean(o.variance(n, truth))),
            "accumulator_bytes": o.accumulator_bytes,
        }
        rec["mse_over_theory"] = rec["mse"] / rec["theory_variance"]
        records.append(rec)
        print(
            f"  olh eps={eps:g} g={o.g} agg/s={rec['aggregate_reports_per_s']:,.0f} "
            f"enc/s={rec['encode_reports_per_s']:,.0f} variance cost={100 * rec['variance_cost']:.2f}% "
            f"mse/theory={rec['mse_over_theory']:.3f}",
            flush=True,
        )
    ranges = [(0.1, 0.5), (0.5, 1.3), (1.3, 20.0), (2.0, 20.0)]
    worst = {}
    for lo, hi in ranges:
        grid = np.arange(lo, hi, 0.0005)
        costs = np.array([_olh_cost(e, olh_buckets(e, 1 << 62)) for e in grid])
        j = int(np.argmax(costs))
        worst[f"{lo:g}-{hi:g}"] = {"max_variance_cost": float(costs[j]), "at_epsilon": float(grid[j])}
    if records:
        records[-1]["worst_variance_cost_by_epsilon_range"] = worst
    for k, v in worst.items():
        print(f"  olh variance cost, eps in [{k}]: max {100 * v['max_variance_cost']:.2f}% "
              f"at eps = {v['at_epsilon']:.4f}")
    return records


def bench_set_sum(d: int, trials: int, seed: int, epsilons=(3.0, 4.0), users: int = 5000) -> list[dict]:
    """Variance of a sum of 64 OLH estimates (values 0..63) over ``trials`` independent runs of ``users``
    reports, divided by the sum of the per-value closed-form variances (= ``variance_of_sum`` for the
    3-wise independent family), for the default gf2-affine family and the legacy prime-g family."""
    records = []
    for eps in epsilons:
        for family in ("gf2-affine", "linear-gf"):
            rng = np.random.default_rng([seed, 200, int(eps * 10)])
            o = OLH(eps, d, family=family)
            w = 1.0 / np.arange(1, d + 1) ** 1.2
            values = rng.choice(d, size=users, p=w / w.sum())
            truth = np.bincount(values, minlength=d) / users
            S = np.arange(min(64, d))
            reports = o.encode(np.tile(values, trials), rng=rng)
            errs = np.array([
                o.estimate_reports(reports.take(slice(t * users, (t + 1) * users))).frequencies[S].sum()
                - truth[S].sum()
                for t in range(trials)
            ])
            theory = float(o.variance(users, truth)[S].sum())
            rec = {"library": "ours-set-sum", "mechanism": "olh", "n": users, "d": d, "epsilon": eps,
                   "g": o.g, "hash": family, "trials": trials, "set_size": len(S),
                   "set_sum_variance_over_theory": float(np.mean(errs**2) / theory),
                   "relative_se": math.sqrt(2 / trials)}
            records.append(rec)
            print(f"  set-sum eps={eps:g} {family} g={o.g}: variance / theory = "
                  f"{rec['set_sum_variance_over_theory']:.3f} (rel. SE {rec['relative_se']:.3f})", flush=True)
    return records


def ensure_peer_venv() -> Path:
    """Creates ``.cache/peers-venv`` with the peer libraries on first use; returns its python."""
    py = PEER_VENV / "bin" / "python"
    stamp = PEER_VENV / ".ready"
    if not stamp.exists():
        print(f"[bench] creating {PEER_VENV} with {' '.join(PEER_PACKAGES)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
        stamp.write_text("ok\n")
    return py


def bench_peers(values: np.ndarray, d: int, epsilon: float, peer_n: int) -> list[dict]:
    py = ensure_peer_venv()
    sub = values[:peer_n]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "values.npy")
        np.save(path, sub)
        out = subprocess.run(
            [str(py), str(ROOT / "bench" / "_peer_runner.py"), path, str(d), str(epsilon)],
            check=True,
            capture_output=True,
            text=True,
        )
    records = json.loads(out.stdout)
    truth = np.bincount(sub, minlength=d) / len(sub)
    for rec in records:
        est = np.asarray(rec.pop("estimate"))
        rec["mse"] = float(np.mean((est - truth) ** 2))
        oracle = make_oracle(rec["mechanism"], epsilon, d)
        rec["theory_variance"] = float(np.mean(oracle.variance(len(sub), truth)))
        rec["mse_over_theory"] = rec["mse"] / rec["theory_variance"]
        print(_fmt(rec), flush=True)
    return records


def _fmt(rec: dict) -> str:
    ratio = f" floor_ratio={rec['floor_ratio']:.2f}" if "floor_ratio" in rec else ""
    enc = rec.get("encode_reports_per_s")
    enc_s = f"{enc:,.0f}" if enc else "-"
    return (
        f"{rec['library']:>21} {rec['mechanism']:>4} n={rec['n']:>8} "
        f"agg/s={rec['aggregate_reports_per_s']:>14,.0f} "
        f"enc/s={enc_s:>12} mse/theory={rec.get('mse_over_theory', float('nan')):.3f}{ratio}"
    )


def _epsilons(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"--olh_sweep must be comma-separated numbers, got {text!r}")
    if not out or any(not (e > 0) for e in out):
        fail(f"--olh_sweep needs positive epsilons, got {text!r}")
    return out


def main(argv=None) -> list[dict]:
    ap = job_parser(__doc__.splitlines()[0], beam_options=False)
    add_population_flags(ap, users=1_000_000, domain_size=1024, seed=1)
    ap.add_argument("--epsilon", type=float, default=1.0, help="privacy budget of the main comparison")
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS), help="comma-separated mechanisms")
    ap.add_argument("--zipf", type=float, default=1.5, help="Zipf exponent of the population")
    ap.add_argument("--repeat", type=int, default=3, help="aggregation timings: best of this many")
    ap.add_argument("--json", dest="json_out", help="write the records here")
    ap.add_argument("--peers", action="store_true", help="also measure pure-ldp and multi-freq-ldpy")
    ap.add_argument("--peer_n", type=int, default=5000, help="reports given to each peer")
    ap.add_argument("--olh_sweep", default="", help="also run OLH at these comma-separated epsilons")
    ap.add_argument("--set_sum_trials", type=int, default=0,
                    help="also measure OLH set-sum variance / theory at eps 3 and 4 over this many trials")
    ap.add_argument("--set_sum_json", help="write the set-sum records here (a separate file: no rates)")
    args, _ = parse_job_args(ap, argv, beam=False)
    args.n, args.d = args.users, args.domain_size
    if args.n < 1 or args.d < 2:
        fail(f"need --users >= 1 and --domain_size >= 2, got {args.n} and {args.d}")
    unknown = sorted({m.strip() for m in args.mechanisms.split(",") if m.strip()} - set(MECHANISMS))
    if unknown:
        fail(f"unknown mechanisms {unknown}; choose from {sorted(MECHANISMS)}")
    sweep = _epsilons(args.olh_sweep) if args.olh_sweep else []
    values = sample_population(f"zipf:{args.zipf}", args.n, args.d, rng=np.random.default_rng(args.seed))
    mechs = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    records = bench_ours(values, args.d, args.epsilon, mechs, args.seed, args.repeat)
    if args.peers:
        peers = bench_peers(values, args.d, args.epsilon, args.peer_n)
        records += peers
        ours = {r["mechanism"]: r for r in records if r["library"] == "ours"}
        for r in peers:
            if r["mechanism"] in ours:
                r["ours_over_peer_aggregate"] = (
                    ours[r["mechanism"]]["aggregate_reports_per_s"] / r["aggregate_reports_per_s"]
                )
                ratio = r["ours_over_peer_aggregate"]
                print(f"  ours/{r['library']} {r['mechanism']}: {ratio:,.0f}x aggregate")
    if sweep:
        records += bench_olh_sweep(values, args.d, sweep, args.seed, args.repeat)
    if args.set_sum_trials:
        set_sum = bench_set_sum(args.d, args.set_sum_trials, args.seed)
        if args.set_sum_json:
            Path(args.set_sum_json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.set_sum_json).write_text(json.dumps(set_sum, indent=1) + "\n")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(records, indent=1) + "\n")
    return records


if __name__ == "__main__":
    main()
