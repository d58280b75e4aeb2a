"""Renders a bench.oracles JSON file as the Markdown table used in the README.

    .venv/bin/python -m bench.table bench/results/oracles_n1e6_d1024_eps1.json
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pipelines.cli import fail, job_parser, parse_job_args


def render(records: list[dict]) -> str:
    lines = [
        "| library | mechanism | n | aggregate reports/s | encode reports/s | MSE / closed form "
        "| speed / numpy floor | ours / peer |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in records:
        if r["library"] == "numpy-floor":
            continue
        enc = f"{r['encode_reports_per_s']:,.0f}" if r.get("encode_reports_per_s") else "-"
        floor = f"{r['floor_ratio']:.2f}x" if "floor_ratio" in r else "-"
        peer = f"{r['ours_over_peer_aggregate']:,.0f}x" if "ours_over_peer_aggregate" in r else "-"
        mse = f"{r['mse_over_theory']:.3f}" if r.get("mse_over_theory") is not None else "-"
        lines.append(
            f"| {r['library']} | {r['mechanism']} | {r['n']:,} | {r['aggregate_reports_per_s']:,.0f} | {enc} "
            f"| {mse} | {floor} | {peer} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], beam_options=False)
    parser.add_argument("results", help="JSON file written by `python -m bench.oracles --json FILE`")
    ns, _ = parse_job_args(parser, argv, beam=False)
    try:
        with open(ns.results, encoding="utf-8") as fh:
            records = json.load(fh)
    except (OSError, ValueError) as exc:
        fail(f"cannot read {ns.results}: {exc}")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        fail(f"{ns.results} is not a bench.oracles result (a JSON list of records)")
    try:
        print(render(records))
    except KeyError as exc:
        fail(f"{ns.results}: a record lacks the field {exc} (not a bench.oracles result?)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
