"""Output benchmark: the time to write one frequency pane of a large domain (not a unit test).

    .venv/bin/python -m bench.output --domain_size 262144 --json bench/results/output_d262144.json

One task (OUE, epsilon 1, d = ``--domain_size``), one group, one pane of ``--users`` reports: the support
counts are drawn from a seeded generator (a Zipf population through OUE's flip probabilities), so the
pane's estimate row is that of a real ``FrequencyAggregator.finalize`` (post-processing ``base``, every
error-bar field set). It measures, alternating the compared runs ``--repeat`` times in this process:

* ``finalize_s``: the aggregator's finalize of the pane;
* ``legacy_sink_s``: what the writer did before the compact output, in process: every value in JSON
  Lines (``json_record`` + ``json.dumps``) and the record through ``fastavro``'s writer, both to files;
* ``sink_s``: the same row through today's sinks of ``transforms.io`` (record form, JSON Lines sink,
  Avro sink), in process;
* ``pipeline_pane_write_s``: the DirectRunner: a DoFn that makes the row (as the job's finalize does) then
  ``WriteResults``, for the large row, minus the same pipeline for a d = 16 row (the fixed cost of a
  pipeline run) and minus the time to make the row in process (``make_row_s``), medians;

plus the files' sizes and a check that they hold the row: the Avro record read back equals the row
exactly, and every value of the JSON Lines row equals the row's at its index. Each result carries the
1-minute load average before and after (a shared 2-core machine). The file (``--json``) holds ``runs``,
one per ``--label`` (``--keep_runs`` keeps the file's runs of other labels, e.g. one measured on an
older writer).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "pane_row"]


def pane_row(d: int, n: int, seed: int):
    """``(aggregator, row, finalize_s)``: the estimate row of one pane of ``n`` reports at domain ``d``."""
    from ldp.aggregate import WindowInfo, make_aggregator
    from ldp.oracles import SupportAccumulator
    from ldp.task import parse_task

    spec = {"task_id": "bench-output", "mechanism": "oue", "epsilon": 1.0, "domain_size": d}
    task = parse_task({**spec, "postprocess": "base"})
    agg = make_aggregator(task)
    o = agg.oracle
    rng = np.random.default_rng(seed)
    hist = np.bincount(rng.zipf(1.3, n) % d, minlength=d)
    counts = rng.binomial(hist, o.p) + rng.binomial(n - hist, o.q)
    acc = SupportAccumulator(counts.astype(np.int64), n)
    window = WindowInfo(1_764_000_000_000, 1_764_000_600_000, "ON_TIME", 0, True)
    t0 = time.perf_counter()
    rows = agg.finalize({0: acc}, window)
    return agg, rows[0], time.perf_counter() - t0


def _legacy_sink(row, out: Path) -> None:
    import fastavro

    import schemas
    from ldp.aggregate import json_record

    rec = row._asdict()
    with open(out / "legacy.jsonl", "w", encoding="utf-8") as fh:
        fh.write(json.dumps(json_record(rec), allow_nan=False) + "\n")
    with open(out / "legacy.avro", "wb") as fh:
        w = fastavro.write.Writer(fh, schemas.parsed_schema("estimate"))
        w.write(rec)
        w.flush()


def _sink(row, out: Path, spec, kw: dict[str, Any]) -> None:
    """The row through the sinks ``WriteResults`` uses, in process (no Beam pipeline)."""
    from transforms.io import result_sinks

    to_record, sinks = result_sinks(spec, **kw)
    rec = to_record(row)
    for suffix, sink in sinks.items():
        with open(out / f"sink{suffix}", "wb") as fh:
            sink.open(fh)
            sink.write(rec)
            sink.flush()


def _row_of(args: tuple[int, int, int]):
    return pane_row(*args)[1]


def _pipeline(row_args: tuple[int, int, int], out: Path, spec, kw: dict[str, Any]) -> float:
    """A DirectRunner run that makes the row in a DoFn (as the job's finalize does: a large element never
    travels in the pipeline's graph) and writes it with ``WriteResults``; its wall clock."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.io import WriteResults

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
        rows = p | beam.Create([row_args], reshuffle=False) | "Finalize" >> beam.Map(_row_of)
        _ = rows | WriteResults(str(out), spec, **kw)
    return time.perf_counter() - t0


def _check(row, out: Path) -> dict[str, Any]:
    """The written files against the row: Avro equal exactly; JSON Lines values equal at their index."""
    import fastavro

    from ldp.aggregate import json_safe

    (avro,) = glob.glob(str(out / "*.avro"))
    (jsonl,) = glob.glob(str(out / "*.jsonl"))
    with open(avro, "rb") as fh:
        (back,) = list(fastavro.reader(fh))
    rec = row._asdict()
    same = np.array_equal
    avro_equal = all(
        same(np.asarray(back[k]), np.asarray(v), equal_nan=True) if isinstance(v, list) else back[k] == v
        for k, v in rec.items()
        if k not in ("window_start", "window_end")
    )
    with open(jsonl, encoding="utf-8") as fh:
        (line,) = [json.loads(x) for x in fh if x.strip()]
    idx = line.get("values", list(range(len(rec["frequencies"]))))
    jsonl_equal = all(
        line[k] == json_safe([rec[k][i] for i in idx])
        for k in ("frequencies", "std", "unbiased", "unbiased_std", "ci_low", "ci_high", "ci_includes_zero")
    )
    return {
        "avro_bytes": os.path.getsize(avro),
        "jsonl_bytes": os.path.getsize(jsonl),
        "jsonl_values": len(idx),
        "avro_equal": bool(avro_equal),
        "jsonl_equal": bool(jsonl_equal),
    }


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from ldp.kinds.frequency.aggregate import ESTIMATES

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    agg, row, t_fin = pane_row(args.domain_size, args.users, args.seed)
    t_make = time.perf_counter() - t0
    kw: dict[str, Any] = {} if args.jsonl_max_values is None else {"jsonl_max_values": args.jsonl_max_values}
    names = ("legacy_sink_s", "sink_s", "pipeline_big_s", "pipeline_small_s")
    times: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(args.repeat):  # alternated: each repeat runs every variant once
        t0 = time.perf_counter()
        _legacy_sink(row, workdir)
        times["legacy_sink_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _sink(row, workdir, ESTIMATES, kw)
        times["sink_s"].append(time.perf_counter() - t0)
        if args.pipeline:
            small_args = (16, 10_000, args.seed)
            times["pipeline_small_s"].append(_pipeline(small_args, workdir / "small", ESTIMATES, kw))
            big_args = (args.domain_size, args.users, args.seed)
            times["pipeline_big_s"].append(_pipeline(big_args, workdir / "big", ESTIMATES, kw))
    rec: dict[str, Any] = {
        "domain_size": args.domain_size,
        "users": args.users,
        "mechanism": "oue",
        "jsonl_max_values": args.jsonl_max_values,
        "finalize_s": t_fin,
        "make_row_s": t_make,
        "repeat": args.repeat,
    }
    for k, v in times.items():
        if v:
            rec[k] = statistics.median(v)
            rec[k.replace("_s", "_all_s")] = v
    if args.pipeline:
        rec["pipeline_pane_write_s"] = rec["pipeline_big_s"] - rec["pipeline_small_s"] - t_make
        rec.update(_check(row, workdir / "big"))
    rec["legacy_jsonl_bytes"] = os.path.getsize(workdir / "legacy.jsonl")
    rec["legacy_avro_bytes"] = os.path.getsize(workdir / "legacy.avro")
    rec["load_avg_1m"] = [load0, os.getloadavg()[0]]
    rec["machine"] = {
        "python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()
    }  # fmt: skip
    return rec


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain_size", type=int, default=1 << 18)
    ap.add_argument("--users", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jsonl_max_values", type=int, default=None, help="the writer's flag (default: its own)")
    ap.add_argument("--no_pipeline", dest="pipeline", action="store_false", help="in-process sinks only")
    ap.add_argument("--label", default=None, help="a name for this run in the JSON (e.g. before / after)")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--keep_runs", action="store_true", help="keep the --json file's runs of other labels")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-output-"))
    try:
        rec = measure(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec["label"] = args.label
    rec["command"] = " ".join([".venv/bin/python -m bench.output", *(sys.argv[1:] if argv is None else argv)])
    print(json.dumps({k: v for k, v in rec.items() if not k.endswith("_all_s") and k != "machine"}, indent=1))
    if args.json_out:
        out = Path(args.json_out)
        runs = []
        if args.keep_runs and out.exists():  # the runs of other labels (e.g. "before", on the older writer)
            runs = [r for r in json.loads(out.read_text()).get("runs", []) if r.get("label") != args.label]
        runs.append(rec)
        doc = {  # every run's command, in order, and its 1-minute load average at start and end
            "command": " && ".join(r["command"] for r in runs),
            "load_avg_1m": [x for r in runs for x in r["load_avg_1m"]],
            "runs": runs,
        }
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return rec


if __name__ == "__main__":
    main()
