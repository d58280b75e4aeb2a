"""Renders a bench.oracles JSON file as the Markdown table used in the README.

.venv/bin/python -m bench.table bench/results/oracles_n1e6_d1024_eps1.json
"""

from __future__ import annotations

import json
import sys


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


if __name__ == "__main__":
    print(render(json.load(open(sys.argv[1]))))
