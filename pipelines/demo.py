"""In-process demo of the frequency-oracle core (no Beam): simulate, perturb, aggregate, estimate.

    python -m pipelines.demo --users 1000000 --domain_size 1024 --epsilon 1 --mechanism auto \
        --dataset zipf:1.1 --postprocess norm-sub --seed 7 --top 20     (every flag optional)

(``ldp-beam demo-core`` is the same command.)

Simulates a population, perturbs every user's value with the chosen oracle (``auto``: the lowest
closed-form variance, see :func:`ldp.oracles.choose_oracle`), accumulates the reports, estimates, post-
processes, and prints the top values (truth, estimate, 95% CI) and the full-domain MSE next to the
closed-form variance. ``run_local.sh`` runs the Beam version of this job (``pipelines.demo_beam``) when it
is available.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ldp.datasets import sample_population
from ldp.oracles import MECHANISMS, make_oracle
from ldp.postprocess import Method, postprocess
from pipelines.cli import fail, job_parser, parse_job_args


def run(argv: Sequence[str] | None = None) -> dict:
    ap = job_parser(__doc__.splitlines()[0], beam_options=False)
    ap.add_argument("--users", type=int, default=1_000_000, help="number of simulated users")
    ap.add_argument("--domain_size", type=int, default=1024, help="size of the categorical domain")
    ap.add_argument("--epsilon", type=float, default=1.0, help="privacy budget per report")
    ap.add_argument(
        "--mechanism", default="auto", choices=["auto", *MECHANISMS], help="oracle (auto: lowest variance)"
    )
    ap.add_argument("--dataset", default="zipf", help="zipf[:EXPONENT], uniform or csv:PATH:COLUMN")
    ap.add_argument(
        "--postprocess", default="norm-sub", choices=[m.value for m in Method], help="post-processing method"
    )
    ap.add_argument("--seed", type=int, default=7, help="simulation seed (clients would use OS entropy)")
    ap.add_argument("--top", type=int, default=20, help="values printed, by true frequency")
    args, _ = parse_job_args(ap, argv, beam=False)

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    try:
        oracle = make_oracle(args.mechanism, args.epsilon, args.domain_size)
        values = sample_population(args.dataset, args.users, args.domain_size, rng=rng)
    except ValueError as exc:
        fail(str(exc))
    truth = np.bincount(values, minlength=args.domain_size) / len(values)
    t1 = time.perf_counter()
    reports = oracle.encode(values, rng=rng)
    t2 = time.perf_counter()
    est = oracle.estimate(oracle.add(oracle.create_accumulator(), reports))
    t3 = time.perf_counter()
    extra = {"p": oracle.p, "q": oracle.q} if args.postprocess.replace("_", "-") == "mle-apx" else {}
    post = postprocess(est.frequencies, args.postprocess, variance=est.variance, n=est.n, **extra)

    print(f"mechanism: {oracle!r} (p={oracle.p:.4f}, q={oracle.q:.4f}, {oracle.report_bits} bits/report)")
    if getattr(oracle, "choice", None):
        ranked = ", ".join(f"{r['mechanism']}={r['variance_factor']:.3f}" for r in oracle.choice)
        print(f"auto choice by n*Var (then report size within 2%): {ranked}")
    print(
        f"{args.users:,} users, d={args.domain_size}, epsilon={args.epsilon}: simulate {t1 - t0:.2f}s, "
        f"encode {t2 - t1:.2f}s, aggregate+estimate {t3 - t2:.2f}s"
    )
    lo, hi = est.ci(0.95)
    top = np.argsort(-truth, kind="stable")[: args.top]
    print(f"\n{'value':>6} {'truth':>9} {'estimate':>9} {'95% CI':>21} {args.postprocess:>10}")
    for v in top:
        ci = f"[{lo[v]:>9.5f},{hi[v]:>9.5f}]"
        print(f"{v:>6} {truth[v]:>9.5f} {est.frequencies[v]:>9.5f} {ci} {post[v]:>10.5f}")
    mse_base = float(np.mean((est.frequencies - truth) ** 2))
    mse_post = float(np.mean((post - truth) ** 2))
    theory = float(np.mean(oracle.variance(len(values), truth)))
    covered = float(np.mean((lo <= truth) & (truth <= hi)))
    print(
        f"\nfull-domain MSE (base):      {mse_base:.3e}   closed-form variance: {theory:.3e}   "
        f"ratio {mse_base / theory:.3f}"
    )
    print(f"full-domain MSE ({args.postprocess}): {mse_post:.3e}   ({mse_base / mse_post:.1f}x lower)")
    print(f"95% CI coverage over the domain: {covered:.3f}")
    return {"mse_base": mse_base, "mse_post": mse_post, "theory_variance": theory, "coverage": covered}


if __name__ == "__main__":
    run()
