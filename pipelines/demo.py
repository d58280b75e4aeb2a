"""In-process demo of the frequency-oracle core (no Beam): simulate, perturb, aggregate, estimate.

    python -m pipelines.demo --users 1000000 --domain_size 1024 --epsilon 1 --mechanism auto \
        --dataset zipf:1.1 --postprocess norm-sub --seed 7 --top 20     (every flag optional)

(``ldp-beam demo-core`` is the same command.)

Simulates a population, perturbs every user's value with the chosen oracle (``auto``: the lowest
closed-form variance, see :func:`ldp.oracles.choose_oracle`), accumulates the reports, estimates, post-
processes, and prints the top values (truth, the unbiased estimate with its normal 95% CI, the published
post-processed estimate with the 95% interval valid for it, ``ldp.intervals``; ``*`` marks a value whose
unbiased CI contains 0, i.e. noise level), the full-domain MSE next to the closed-form variance and both
intervals' coverage of the truth. ``--labels_file FILE`` (one label per line, or a JSON list; the task
file's ``labels_file`` format) names the values and lets a ``csv:PATH:COLUMN`` column hold the labels.
``run_local.sh`` runs the Beam version of this job (``pipelines.demo_beam``) when it is available.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp.datasets import sample_population
from ldp.intervals import frequency_intervals
from ldp.oracles import MECHANISMS, make_oracle
from ldp.postprocess import Method, postprocess
from ldp.task import TaskError, read_labels_file
from pipelines.cli import fail, job_parser, parse_job_args


def parser() -> argparse.ArgumentParser:
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
    ap.add_argument("--labels_file", help="value labels, one per line or a JSON list (domain_size of them)")
    return ap


def _oracle_and_population(
    args: argparse.Namespace, rng: np.random.Generator
) -> tuple[Any, np.ndarray, list[str] | None]:
    """The oracle, the simulated values and their labels (None: numbered); a bad flag is one line, exit 2."""
    if args.users < 1:
        fail(f"--users must be >= 1, got {args.users}")
    if args.top < 0:
        fail(f"--top must be >= 0, got {args.top}")
    labels = None
    try:
        if args.labels_file:
            labels = read_labels_file(args.labels_file, args.domain_size)
        oracle = make_oracle(args.mechanism, args.epsilon, args.domain_size)
        values = sample_population(args.dataset, args.users, args.domain_size, rng=rng, labels=labels)
    except TaskError as exc:
        fail(exc.one_line())
    except ValueError as exc:
        fail(str(exc))
    return oracle, values, labels


def _print_oracle(oracle: Any, args: argparse.Namespace, seconds: tuple[float, float, float]) -> None:
    print(f"mechanism: {oracle!r} (p={oracle.p:.4f}, q={oracle.q:.4f}, {oracle.report_bits} bits/report)")
    if getattr(oracle, "choice", None):
        ranked = ", ".join(f"{r['mechanism']}={r['variance_factor']:.3f}" for r in oracle.choice)
        print(f"auto choice by n*Var (then report size within 2%): {ranked}")
    simulate, encode, estimate = seconds
    print(
        f"{args.users:,} users, d={args.domain_size}, epsilon={args.epsilon}: simulate {simulate:.2f}s, "
        f"encode {encode:.2f}s, aggregate+estimate {estimate:.2f}s"
    )


def _print_top(
    args: argparse.Namespace, labels: list[str] | None, truth: np.ndarray, est: Any, post: np.ndarray, iv: Any
) -> None:
    """The ``--top`` values by true frequency: truth, estimate and published value, with intervals."""
    lo, hi = est.ci(0.95)
    top = np.argsort(-truth, kind="stable")[: args.top]
    width = max([6] + [len(lab) for lab in (labels or ())]) if labels else 6
    pp = args.postprocess
    print(
        f"\n{'value':>{width}} {'truth':>9} {'estimate':>9} {'95% CI':>21}  {pp:>9} "
        f"{'95% interval (' + iv.ci_method + ')':>21}"
    )
    for v in top:
        name = (labels[v] if labels else str(v)) + ("*" if iv.ci_includes_zero[v] else " ")
        ci = f"[{lo[v]:>9.5f},{hi[v]:>9.5f}]"
        pci = f"[{iv.ci_low[v]:>9.5f},{iv.ci_high[v]:>9.5f}]"
        print(f"{name:>{width + 1}}{truth[v]:>9.5f} {est.frequencies[v]:>9.5f} {ci}  {post[v]:>9.5f} {pci}")
    print("(* not shown above 0: Bonferroni over the domain at 5%, ldp.selection)")


def _accuracy(
    args: argparse.Namespace, oracle: Any, n: int, truth: np.ndarray, est: Any, post: np.ndarray, iv: Any
) -> dict:
    """Full-domain MSE against the closed-form variance and both intervals' coverage (printed, returned)."""
    lo, hi = est.ci(0.95)
    mse_base = float(np.mean((est.frequencies - truth) ** 2))
    mse_post = float(np.mean((post - truth) ** 2))
    theory = float(np.mean(oracle.variance(n, truth)))
    covered = float(np.mean((lo <= truth) & (truth <= hi)))
    covered_pub = float(np.mean((iv.ci_low <= truth) & (truth <= iv.ci_high)))
    print(
        f"\nfull-domain MSE (base):      {mse_base:.3e}   closed-form variance: {theory:.3e}   "
        f"ratio {mse_base / theory:.3f}"
    )
    print(f"full-domain MSE ({args.postprocess}): {mse_post:.3e}   ({mse_base / mse_post:.1f}x lower)")
    print(f"95% coverage over the domain: {covered:.3f} (unbiased CI), {covered_pub:.3f} (published)")
    return {
        "mse_base": mse_base,
        "mse_post": mse_post,
        "theory_variance": theory,
        "coverage": covered,
        "coverage_published": covered_pub,
        "ci_method": iv.ci_method,
    }


def run(argv: Sequence[str] | None = None) -> dict:
    args, _ = parse_job_args(parser(), argv, beam=False)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    oracle, values, labels = _oracle_and_population(args, rng)
    truth = np.bincount(values, minlength=args.domain_size) / len(values)
    t1 = time.perf_counter()
    reports = oracle.encode(values, rng=rng)
    t2 = time.perf_counter()
    est = oracle.estimate(oracle.add(oracle.create_accumulator(), reports))
    t3 = time.perf_counter()
    extra = {"p": oracle.p, "q": oracle.q} if args.postprocess.replace("_", "-") == "mle-apx" else {}
    post = postprocess(est.frequencies, args.postprocess, variance=est.variance, n=est.n, **extra)
    _print_oracle(oracle, args, (t1 - t0, t2 - t1, t3 - t2))
    iv = frequency_intervals(oracle, est, args.postprocess.replace("_", "-"), post)
    _print_top(args, labels, truth, est, post, iv)
    return _accuracy(args, oracle, len(values), truth, est, post, iv)


if __name__ == "__main__":
    run()
