"""Heavy hitters (PEM): accuracy at the issue's point and time per million reports.

    .venv/bin/python -m bench.heavy_hitters                 # n = 1e6, eps = 4, one seed
    .venv/bin/python -m bench.heavy_hitters --seeds 10 --n 1000000

Population: Zipf(``--zipf``) over ``--strings`` random ``--bytes``-byte strings, ``n`` users drawn from it.
Prints the wall time per million reports of the encode and the estimate (the fold into the sketches, then
the search and verification), the process CPU time per million of each of the three, recall of the
strings with true frequency at least ``--heavy`` (0.2%), precision counting reported strings with true
frequency at least ``--useful`` (0.1%), and the share of reported strings whose 95% interval covers the truth.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from ldp.heavy_hitters import PEM, StringBatch


def zipf_population(
    n: int, strings: int, nbytes: int, exponent: float, rng: np.random.Generator
) -> tuple[StringBatch, dict[bytes, float]]:
    """``n`` users holding Zipf-distributed random strings, shuffled; and each string's true frequency."""
    raw = np.unique(rng.integers(0, 256, size=(strings, nbytes), dtype=np.uint8), axis=0)
    raw = raw[rng.permutation(raw.shape[0])]
    weights = np.arange(1, raw.shape[0] + 1, dtype=np.float64) ** -exponent
    counts = rng.multinomial(n, weights / weights.sum())
    rows = np.repeat(np.arange(raw.shape[0]), counts)
    rows = rows[rng.permutation(rows.size)]
    batch = StringBatch(raw[rows], np.full(rows.size, nbytes, dtype=np.int64), nbytes)
    truth = {bytes(raw[i]): counts[i] / n for i in np.flatnonzero(counts)}
    return batch, truth


def score(result, truth: dict[bytes, float], heavy: float, useful: float) -> dict[str, float]:
    """Recall of the heavy strings, precision against the useful ones, interval coverage, F1."""
    reported = [h.value for h in result.hitters]
    heavy_set = {v for v, f in truth.items() if f >= heavy}
    hits = sum(1 for v in reported if v in heavy_set)
    recall = hits / len(heavy_set) if heavy_set else 1.0
    precision = sum(1 for v in reported if truth.get(v, 0.0) >= useful) / len(reported) if reported else 1.0
    covered = [h.ci_low <= truth.get(h.value, 0.0) <= h.ci_high for h in result.hitters]
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "recall": recall,
        "precision": precision,
        "f1": f1,
        "coverage": float(np.mean(covered)) if covered else 1.0,
        "reported": len(reported),
        "heavy": len(heavy_set),
    }


def run_once(args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    batch, truth = zipf_population(args.n, args.strings, args.bytes, args.zipf, rng)
    weights = [float(w) for w in args.level_weights.split(",")] if args.level_weights else None
    pem = PEM(
        args.epsilon, args.bytes, top_k=args.top_k, expected_n=args.n, search=args.search,
        candidates=args.candidates, level_weights=weights, rule=args.rule,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    reports = pem.encode(batch, rng=np.random.default_rng([seed, 1]))
    t1, c1 = time.perf_counter(), time.process_time()
    acc = pem.add(pem.create_accumulator(), reports)
    t2, c2 = time.perf_counter(), time.process_time()
    result = pem.estimate(acc)
    t3, c3 = time.perf_counter(), time.process_time()
    row = score(result, truth, args.heavy, args.useful)
    per = 1e6 / args.n
    row.update(seed=seed, encode_s_per_million=(t1 - t0) * per, estimate_s_per_million=(t3 - t1) * per)
    row.update(fold_s_per_million=(t2 - t1) * per, encode_cpu_s_per_million=(c1 - c0) * per)
    row.update(fold_cpu_s_per_million=(c2 - c1) * per, search_cpu_s_per_million=(c3 - c2) * per)
    row["layout"] = repr(pem)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--strings", type=int, default=100_000)
    ap.add_argument("--bytes", type=int, default=6)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--top_k", type=int, default=64)
    ap.add_argument("--heavy", type=float, default=0.002)
    ap.add_argument("--useful", type=float, default=0.001)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--search", choices=("auto", "sketch", "olh"), default="auto")
    ap.add_argument("--candidates", type=int, default=None, help="kept per level (default: auto)")
    ap.add_argument("--level_weights", default="", help="comma-separated share per level (default: auto)")
    ap.add_argument("--rule", choices=("bh", "bonferroni"), default="bh")
    args, extra = ap.parse_known_args(argv)
    if extra:
        print(f"error: unknown arguments {' '.join(extra)}", file=sys.stderr)
        return 2
    rows = [run_once(args, s) for s in range(args.seeds)]
    for row in rows:
        print(json.dumps(row))
    keys = ("recall", "precision", "f1", "coverage", "encode_s_per_million", "estimate_s_per_million",
            "encode_cpu_s_per_million", "fold_cpu_s_per_million", "search_cpu_s_per_million")
    print(json.dumps({"mean": {k: float(np.mean([r[k] for r in rows])) for k in keys}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
