"""Markdown tables (MAE per method and epsilon) from experiments.range_queries JSON results.

    .venv/bin/python -m experiments.summarize_range experiments/results/range_*lambda*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def table(records: list[dict]) -> str:
    eps = sorted({r["epsilon"] for r in records})
    methods = list(dict.fromkeys(r["method"] for r in records))
    lines = ["| method | " + " | ".join(f"eps={e:g}" for e in eps) + " |", "| --- |" + " ---: |" * len(eps)]
    for m in methods:
        by_eps = {r["epsilon"]: r["mae"] for r in records if r["method"] == m}
        cells = [f"{by_eps[e]:.4f}" if e in by_eps else "-" for e in eps]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.summarize_range", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    ap.add_argument("paths", nargs="+", help="JSON files written by experiments.range_queries --json")
    return ap


def _workload(r: dict) -> str:
    if r.get("omega") is not None:
        return f"omega = {r['omega']:g} per attribute"
    if r.get("volume") is not None:
        return f"total volume {r['volume']:g}"
    return "volume ?"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    for p in args.paths:
        recs = [r for r in json.loads(Path(p).read_text()) if "mae" in r and "g1" not in r]
        if not recs:
            continue
        r0 = recs[0]
        print(
            f"**{Path(p).stem}**: dataset {r0['dataset']}, lambda = {r0['lambda']}, {_workload(r0)}, "
            f"n = {r0.get('users', '?'):,}, MAE over {r0.get('queries', '?')} queries "
            f"x {r0.get('trials', '?')} trials\n"
        )
        print(table(recs))
        print()


if __name__ == "__main__":
    main()
