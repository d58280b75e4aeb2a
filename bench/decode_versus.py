"""Decoder against an earlier version of itself: the same files, the same process, alternated rounds.

Not part of the test suite. The earlier decoder is one file, ``wire/decode.py`` of a git revision,
loaded under another module name beside the current one::

    .venv/bin/python -m bench.decode_versus --rev c7bc85b --users 1000000 --rounds 5 \\
        --json bench/results/decode_versus.json

Both decoders read the same in-memory file bytes (the simulator's; OLH, GRR and OUE at d = 1024 by
default, ``--mechanism``) with the job's decode parameters; each round times one pass of each, in turn, so
a load change on a shared machine hits both. It records the median time per pass, the ratio, the load
average, and checks that the two decoders return equal columns (event times, groups, and every payload
field's presence and values, whatever the batch boundaries).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]

__all__ = ["load_revision", "main"]


def load_revision(rev: str, workdir: Path) -> ModuleType:
    """``wire/decode.py`` of git revision ``rev`` as module ``avro_fast_<rev>``."""
    try:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:wire/decode.py"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"--rev {rev}: {exc.stderr.strip() or 'git show failed'}") from None
    path = workdir / f"avro_fast_{rev}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"avro_fast_{rev}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _columns(module: ModuleType, blobs: list[bytes], params: dict[str, Any]) -> list[Any]:
    batches: list[Any] = []
    for data in blobs:
        batches.extend(module.iter_report_batches(io.BytesIO(data), **params))
    return batches


def _flat(batches: list[Any]) -> dict[str, Any]:
    """The decoded columns of a whole file set, whatever the batch boundaries: event times, groups, and per
    payload field its presence and the present rows' values (variable-length fields as per-row tuples)."""
    cols = [b for b in batches if not isinstance(b, list)]
    out: dict[str, Any] = {
        "records": [r for b in batches if isinstance(b, list) for r in b],
        "event_ms": np.concatenate([b.event_ms for b in cols]) if cols else None,
        "group": np.concatenate([b.group for b in cols]) if cols else None,
    }
    for f in cols[0].present if cols else ():
        out[f"present.{f}"] = np.concatenate([b.present[f] for b in cols])
        values: list[Any] = []
        for b in cols:
            has = b.present[f]
            if f not in b.payload or not has.any():
                continue
            v = b.payload[f][has]
            if v.ndim == 1:
                values.append(v)
            else:
                lengths = getattr(b, "lengths", {})  # earlier versions: fixed-width columns
                ln = lengths[f][has] if f in lengths else np.full(len(v), v.shape[1])
                values.append(np.array([tuple(row[:k].tolist()) for row, k in zip(v, ln)], dtype=object))
        out[f"payload.{f}"] = np.concatenate(values) if values else None
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    x, y = _flat(a), _flat(b)
    if x.keys() != y.keys():
        return False
    for k in x:
        u, v = x[k], y[k]
        if isinstance(u, np.ndarray) and isinstance(v, np.ndarray):
            if u.shape != v.shape or not all(p == q for p, q in zip(u.tolist(), v.tolist())):
                return False
        elif u != v:
            return False
    return True


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rev", required=True, help="git revision of the earlier decoder")
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--mechanism", default="olh,grr,oue", help="comma-separated frequency mechanisms")
    p.add_argument("--domain_size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", dest="json_out")
    args = p.parse_args(argv)
    if args.users < 1 or args.rounds < 1:
        p.error("--users and --rounds must be >= 1")

    import simulator
    from ldp.aggregate import make_aggregator
    from ldp.task import parse_task
    from wire import decode as avro_fast
    from wire.validate import decode_params

    command = "python -m bench.decode_versus " + " ".join(argv if argv is not None else sys.argv[1:])
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        old = load_revision(args.rev, Path(tmp))
        for mechanism in args.mechanism.split(","):
            task = parse_task({"task_id": "decode-versus", "mechanism": mechanism, "epsilon": 1.0,
                               "domain_size": args.domain_size})  # fmt: skip
            here = Path(tmp) / mechanism
            simulator.simulate_files(task, args.users, "zipf", here, seed=args.seed, files=4)
            blobs = [Path(f).read_bytes() for f in sorted(glob.glob(str(here / "reports-*.avro")))]
            params = decode_params(make_aggregator(task))
            equal = _same(_columns(avro_fast, blobs, params), _columns(old, blobs, params))
            load_start = os.getloadavg()
            times: dict[str, list[float]] = {"current": [], args.rev: []}
            for _ in range(args.rounds):
                for name, module in (("current", avro_fast), (args.rev, old)):
                    t0 = time.perf_counter()
                    _columns(module, blobs, params)
                    times[name].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) for k, v in times.items()}
            rec = {
                "mechanism": mechanism,
                "domain_size": args.domain_size,
                "n_reports": args.users,
                "bytes": sum(len(b) for b in blobs),
                "seconds": times,
                "reports_per_s": {k: args.users / v for k, v in med.items()},
                "speedup": med[args.rev] / med["current"],
                "columns_equal": equal,
                "load_avg_at_start": list(load_start),
                "load_avg_at_end": list(os.getloadavg()),
            }
            records.append(rec)
            print(
                f"decode {args.users:,} {mechanism} reports: "
                f"current {rec['reports_per_s']['current']:,.0f}/s, "
                f"{args.rev} {rec['reports_per_s'][args.rev]:,.0f}/s, speedup {rec['speedup']:.2f}x, "
                f"columns equal: {equal}, load {load_start[0]:.1f} -> {rec['load_avg_at_end'][0]:.1f}"
            )
    out = {
        "command": command,
        "rev": args.rev,
        "rounds": args.rounds,
        "load_avg_at_start": records[0]["load_avg_at_start"],
        "load_avg_at_end": records[-1]["load_avg_at_end"],
        "records": records,
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1) + "\n")
    if not all(r["columns_equal"] for r in records):
        raise SystemExit("the two decoders returned different columns")
    return out


if __name__ == "__main__":
    main()
