"""Read benchmark: report decoding against the disk read floor and fastavro, on the same files.

    .venv/bin/python -m bench.decode --users 1000000,5000000 --range_users 300000,1000000 --job \\
        --alternate 3 --json bench/results/decode.json

For each data set (a frequency task, ``--mechanism`` default ``auto``, d = ``--domain_size``, at each
``--users``; an HDG range task over ``--attributes`` attributes of domain ``--range_domain`` at each
``--range_users``), simulated once into a work directory (``pipelines.simulate.simulate_files``), it
measures, best of ``--repeat`` (files in the page cache):

* ``read_floor_reports_per_s``: reading the files' bytes (``open().read()``), nothing else;
* ``decode_reports_per_s``: :func:`wire.decode.iter_report_batches` with the job's decode
  parameters (:func:`wire.validate.decode_params`), the rows decoded column-wise
  (``column_rows``) and those decoded one by one by fastavro (``one_by_one_rows``: whole blocks the
  column decoder declined, plus rows it left to fastavro);
* ``decode_validate_reports_per_s``: the same plus :class:`wire.validate.TaskReportValidator`;
* ``fastavro_reports_per_s``: ``fastavro.reader`` over the same files, record by record;
* ``job_s`` / ``job_reports_per_s`` (``--job``): the job end to end on the DirectRunner
  (``pipelines.frequency.run`` / ``pipelines.range_queries.run`` in this process, imports excluded), and
  its counter ``ldp/reports_decoded_one_by_one`` (``reports_decoded_one_by_one``);
* ``--alternate R``: then the jobs of each kind in turn, R rounds (a, b, a, b, ...), and the ratio of the
  median time per report of the largest size to the smallest (``per_report_ratio``; issue 23's done-when:
  HDG at 1e6 within 1.5x of 3e5), one record per kind with ``"alternated": true``.

Every record carries the 1-minute load average before and after (a shared 2-core machine); the file holds
the command, the load averages at start and end and the ``records``.
"""

from __future__ import annotations

import argparse
import glob
import io
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

__all__ = ["main", "measure"]


def _best(fn, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _task(kind: str, n: int, args: argparse.Namespace):
    from ldp.task import parse_task

    if kind == "frequency":
        return parse_task(
            {
                "task_id": "bench-freq",
                "mechanism": args.mechanism,
                "epsilon": 1.0,
                "domain_size": args.domain_size,
            }
        )
    attrs = [{"name": f"a{i}", "domain_size": args.range_domain} for i in range(args.attributes)]
    return parse_task(
        {
            "task_id": "bench-range",
            "mechanism": "hdg",
            "epsilon": 1.0,
            "attributes": attrs,
            "expected_users": n,
        }
    )


def measure(kind: str, n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import fastavro

    import simulator
    from ldp.aggregate import make_aggregator
    from wire.decode import ColumnBatch, iter_report_batches
    from wire.validate import TaskReportValidator, decode_params

    task = _task(kind, n, args)
    here = workdir / f"{kind}-{n}"
    here.mkdir(parents=True, exist_ok=True)
    task.save(here / "task.json")
    dataset = "zipf" if kind == "frequency" else "gaussian:0.5"
    t_sim, _ = _best(
        lambda: simulator.simulate_files(task, n, dataset, here / "in", seed=args.seed, files=4), 1
    )
    paths = sorted(glob.glob(str(here / "in" / "reports-*.avro")))
    agg = make_aggregator(task)
    params = decode_params(agg)
    load0 = os.getloadavg()[0]

    def read_floor() -> int:
        total = 0
        for p in paths:
            with open(p, "rb") as fh:
                total += len(fh.read())
        return total

    def decode(validate: bool) -> dict[str, int]:
        v = TaskReportValidator(agg) if validate else None
        out = {"rows": 0, "column_rows": 0, "one_by_one_rows": 0, "accepted": 0}
        for p in paths:
            with open(p, "rb") as fh:
                data = fh.read()
            for b in iter_report_batches(io.BytesIO(data), args.batch_size, **params):
                out["rows"] += len(b)
                fall = b.n_fallback if isinstance(b, ColumnBatch) else len(b)
                out["one_by_one_rows"] += fall
                out["column_rows"] += len(b) - fall
                if v is not None:
                    out["accepted"] += v.validate(b, p, at_ms=0).n_accepted
        return out

    def peer() -> int:
        count = 0
        for p in paths:
            with open(p, "rb") as fh:
                for _ in fastavro.reader(fh):
                    count += 1
        return count

    t_floor, size = _best(read_floor, args.repeat)
    t_dec, dec = _best(lambda: decode(False), args.repeat)
    t_val, val = _best(lambda: decode(True), args.repeat)
    rec: dict[str, Any] = {
        "kind": kind,
        "n": n,
        "mechanism": task.mechanism,
        "n_groups": task.n_groups,
        "bytes": size,
        "simulate_s": t_sim,
        "read_floor_reports_per_s": n / t_floor,
        "decode_reports_per_s": n / t_dec,
        "decode_validate_reports_per_s": n / t_val,
        "decode_s_per_report": t_dec / n,
        **{k: dec[k] for k in ("column_rows", "one_by_one_rows")},
        "accepted": val["accepted"],
    }
    if n <= args.fastavro_max:
        t_peer, count = _best(peer, 1)
        assert count == n
        rec["fastavro_reports_per_s"] = n / t_peer
    if args.job:
        rec.update(_job(kind, task, here))
    rec["load_avg_1m"] = [load0, os.getloadavg()[0]]
    return rec


def _job(kind: str, task, here: Path) -> dict[str, Any]:
    argv = ["--task", str(here / "task.json"), "--input", str(here / "in" / "reports-*.avro"), "--output"]
    argv.append(str(here / "out"))
    from pipelines import job as pipelines_job
    from transforms.counts import job_counts

    if kind == "frequency":
        from pipelines import frequency as job
    else:
        from pipelines import range_queries as job

        names = [a["name"] if isinstance(a, dict) else a.name for a in task.attributes][:2]
        (here / "q.json").write_text(json.dumps([{names[0]: [0, 7], names[1]: [2, 9]}]))
        argv += ["--queries", str(here / "q.json")]
    shutil.rmtree(here / "out", ignore_errors=True)
    results = []
    run = pipelines_job._run

    def keep_result(*a, **kw):  # the job's PipelineResult, for the counters its summary leaves out
        out = run(*a, **kw)
        results.append(out[0])
        return out

    pipelines_job._run = keep_result
    try:
        t0 = time.perf_counter()
        job.run(argv)
        t = time.perf_counter() - t0
    finally:
        pipelines_job._run = run
    summary = json.loads((here / "out" / "counts.json").read_text())
    read = int(summary["counts"]["read"])
    counters = job_counts(results[0]) if results else {}
    return {
        "job_s": t,
        "job_reports_per_s": read / t,
        "job_s_per_report": t / read,
        "job_run_seconds": summary.get("seconds"),  # the job's own clock: from pipeline start to done
        "job_counts": summary["counts"],
        # ldp/reports_decoded_one_by_one; None: the counter was never reported
        "reports_decoded_one_by_one": counters.get("reports_decoded_one_by_one"),
    }


def alternate(sizes: list[tuple[str, int]], rounds: int, args: argparse.Namespace, workdir: Path) -> list:
    """The jobs of each kind run in turn, ``rounds`` times (a, b, a, b, ...: a shared machine's load falls
    on every size alike): per size the job seconds of each round, the median time per report, the
    one-by-one counter of every run and the load average; per kind the ratio of the median time per
    report of its largest size to its smallest (``per_report_ratio``)."""
    out = []
    for kind in dict.fromkeys(k for k, _ in sizes):
        ns = [n for k, n in sizes if k == kind]
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in ns}
        load0 = os.getloadavg()[0]
        for _ in range(rounds):
            for n in ns:
                here = workdir / f"{kind}-{n}"
                runs[n].append(_job(kind, _task(kind, n, args), here))
        per = {n: statistics.median(r["job_s_per_report"] for r in runs[n]) for n in ns}
        rec: dict[str, Any] = {
            "kind": kind,
            "rounds": rounds,
            "sizes": ns,
            "job_s": {str(n): [r["job_s"] for r in runs[n]] for n in ns},
            "median_s_per_report": {str(n): per[n] for n in ns},
            "reports_decoded_one_by_one": {
                str(n): [r["reports_decoded_one_by_one"] for r in runs[n]] for n in ns
            },
            "load_avg_1m": [load0, os.getloadavg()[0]],
        }
        if len(ns) > 1:
            rec["per_report_ratio"] = per[max(ns)] / per[min(ns)]
        print(
            f"{kind:9s} alternated x{rounds}: "
            + "  ".join(f"n={n:,} {per[n] * 1e6:.2f} us/report" for n in ns)
            + f"  ratio {rec.get('per_report_ratio', float('nan')):.2f}  one-by-one "
            f"{rec['reports_decoded_one_by_one']}  load {rec['load_avg_1m']}",
            flush=True,
        )
        out.append(rec)
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs the benchmark; the JSON (``--json``) holds ``command``, the load average at start and end
    (1, 5, 15 min) and ``records`` (what this returns)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", default="1000000", help="comma-separated frequency-task sizes ('' for none)")
    ap.add_argument("--range_users", default="300000,1000000", help="comma-separated range-task sizes")
    ap.add_argument("--mechanism", default="auto")
    ap.add_argument("--domain_size", type=int, default=1024)
    ap.add_argument("--attributes", type=int, default=5)
    ap.add_argument("--range_domain", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=1 << 15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fastavro_max", type=int, default=1_000_000, help="largest n decoded with fastavro too")
    ap.add_argument("--job", action="store_true", help="also run the job end to end on the DirectRunner")
    ap.add_argument(
        "--alternate",
        type=int,
        default=0,
        metavar="R",
        help="then run the jobs of each kind in turn, R rounds (compares time per report across sizes)",
    )
    ap.add_argument("--workdir", default=None, help="keep the simulated files here (default: a temp dir)")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args(argv)
    sizes = [("frequency", int(x)) for x in args.users.split(",") if x]
    sizes += [("range", int(x)) for x in args.range_users.split(",") if x]
    tmp = None if args.workdir else tempfile.mkdtemp(prefix="bench-decode-")
    workdir = Path(args.workdir or tmp)
    records: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
        "command": " ".join([".venv/bin/python -m bench.decode", *(sys.argv[1:] if argv is None else argv)]),
        "load_avg_at_start": list(os.getloadavg()),
        "records": records,
    }

    def save() -> None:
        if args.json_out:
            end = {"load_avg_at_end": list(os.getloadavg())}
            Path(args.json_out).write_text(json.dumps({**doc, **end}, indent=1))

    try:
        for kind, n in sizes:
            rec = measure(kind, n, args, workdir)
            rec["machine"] = {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            }
            records.append(rec)
            print(
                f"{kind:9s} n={n:>9,} decode {rec['decode_reports_per_s']:>12,.0f}/s  +validate "
                f"{rec['decode_validate_reports_per_s']:>12,.0f}/s  "
                f"floor {rec['read_floor_reports_per_s']:>14,.0f}/s  "
                f"fastavro {rec.get('fastavro_reports_per_s', float('nan')):>10,.0f}/s  column rows "
                f"{rec['column_rows']:,} one-by-one {rec['one_by_one_rows']:,}  load {rec['load_avg_1m']}",
                flush=True,
            )
            save()
        if args.alternate > 0:
            for rec in alternate(sizes, args.alternate, args, workdir):
                records.append({"alternated": True, **rec})
            save()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return records


if __name__ == "__main__":
    main()
