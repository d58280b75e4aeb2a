"""Benchmark of the batch frequency pipeline against in-process floors (not part of the test suite).

    .venv/bin/python -m bench.pipeline --users 1000000 --domain_size 1024 --json OUT.json --streaming_latency

Beam options are passed on to the measured pipeline run, e.g. ``--direct_running_mode=multi_processing
--direct_num_workers=2``.

Measures, on the same simulated reports (one task, ``--mechanism`` default ``auto``, epsilon 1):

* ``pipeline_reports_per_s``: ``pipelines.frequency.run`` end to end on the DirectRunner from the Avro
  files (match, read, decode, validate, combine, finalize, write JSON Lines + Avro, counters), wall clock
  from the call to its return (Python start-up and imports excluded);
* ``core_reports_per_s``: the core alone, ``oracle.add`` over the in-memory reports + ``oracle.estimate``;
* ``inprocess_reports_per_s``: the same job without Beam, single-threaded: read + column decode +
  validate + accumulate + estimate (the plain-numpy floor of the whole job);
* ``fastavro_reports_per_s``: the peer library decoding the same files record by record (what a Python
  pipeline that used ``fastavro`` per record would be bound by);
* ``ratio`` = pipeline / core, and the pipeline relative to the other two.

The pipeline's estimates are checked to equal the in-process estimates exactly (``identical``).
With ``--streaming_latency`` it also starts the Pub/Sub emulator and measures, for 2-second windows, the
delay from the end of each window to the arrival of its first estimate on the output topic.
"""

from __future__ import annotations

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

from pipelines.cli import job_parser, parse_job_args

__all__ = ["main", "measure_batch", "measure_streaming_latency"]


def _time(fn, *args, **kw) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def _run_pipeline(workdir: Path, beam_args: list[str]) -> tuple[float, dict, dict]:
    """``pipelines.frequency.run`` end to end on the simulated files: seconds, summary, first estimate row."""
    from pipelines import frequency

    argv = [
        "--task",
        str(workdir / "task.json"),
        "--input",
        str(workdir / "in" / "reports-*.avro"),
        "--output",
        str(workdir / "out"),
        *beam_args,
    ]
    t_pipe, summary = _time(frequency.run, argv)
    with open(glob.glob(str(workdir / "out" / "estimates-*.jsonl"))[0]) as fh:
        pipe_est = json.loads(fh.readline())
    return t_pipe, summary, pipe_est


def _inprocess_job(task, oracle, paths: list[str]) -> tuple[Any, Any]:
    """The job without Beam (column decode, validate, accumulate, estimate): the estimate and the reports."""
    from ldp.reports import Reports
    from wire.decode import iter_report_batches
    from wire.validate import ReportValidator, fast_decode_params

    v = ReportValidator(task, oracle)
    acc = oracle.create_accumulator()
    kept = []
    for p in paths:
        with open(p, "rb") as fh:
            for b in iter_report_batches(fh, 1 << 15, task_id=task.task_id, **fast_decode_params(oracle)):
                vb = v.validate(b, p)
                oracle.add(acc, vb.reports)
                kept.append(vb.reports)
    return oracle.estimate(acc), Reports.concat(kept)


def _core_job(oracle, reports) -> Any:
    """The core alone: every in-memory report added to a fresh accumulator, then estimated."""
    acc = oracle.add(oracle.create_accumulator(), reports)
    return oracle.estimate(acc)


def _fastavro_count(paths: list[str]) -> int:
    """The peer library decoding every record of the files; the number of records."""
    import fastavro

    k = 0
    for p in paths:
        with open(p, "rb") as fh:
            for _ in fastavro.reader(fh):
                k += 1
    return k


def measure_batch(
    n: int,
    d: int,
    epsilon: float,
    mechanism: str,
    files: int,
    workdir: Path,
    beam_args: list[str],
    seed: int = 1,
) -> dict[str, Any]:
    """Simulate ``n`` reports; time the pipeline and the three in-process floors on them."""
    import simulator
    from ldp.task import parse_task

    task = parse_task({"task_id": "bench", "mechanism": mechanism, "epsilon": epsilon, "domain_size": d})
    task.save(workdir / "task.json")
    oracle = task.make_oracle()
    t_sim, _ = _time(simulator.simulate_files, task, n, "zipf", workdir / "in", seed=seed, files=files)
    paths = sorted(glob.glob(str(workdir / "in" / "reports-*.avro")))
    size = sum(os.path.getsize(p) for p in paths)
    t_pipe, summary, pipe_est = _run_pipeline(workdir, beam_args)
    t_inproc, (est_inproc, reports) = _time(_inprocess_job, task, oracle, paths)
    t_core, est_core = _time(_core_job, oracle, reports)
    t_peer, k = _time(_fastavro_count, paths)
    assert k == n
    identical = (
        pipe_est["frequencies"] == est_core.frequencies.tolist() == est_inproc.frequencies.tolist()
    ) and pipe_est["n_reports"] == n
    return {
        "n": n,
        "d": d,
        "epsilon": epsilon,
        "mechanism": oracle.name,
        "files": files,
        "input_bytes": size,
        "beam_args": beam_args,
        "simulate_seconds": t_sim,
        "pipeline_seconds": t_pipe,
        "pipeline_reports_per_s": n / t_pipe,
        "core_seconds": t_core,
        "core_reports_per_s": n / t_core,
        "ratio": (n / t_pipe) / (n / t_core),
        "inprocess_seconds": t_inproc,
        "inprocess_reports_per_s": n / t_inproc,
        "pipeline_vs_inprocess": t_inproc / t_pipe,
        "fastavro_seconds": t_peer,
        "fastavro_reports_per_s": n / t_peer,
        "pipeline_vs_fastavro_decode_only": t_peer / t_pipe,
        "counts": summary["counts"],
        "identical": bool(identical),
        "target_reports_per_s": 200_000,
        "meets_target": n / t_pipe >= 200_000,
    }


def measure_streaming_latency(
    workdir: Path, seconds: float = 16.0, window_s: int = 2, rate: float = 2000.0
) -> dict[str, Any]:
    """Window end -> first estimate on the output topic, Pub/Sub emulator + DirectRunner streaming."""
    import subprocess
    import threading

    from google.cloud import pubsub_v1

    from ldp.task import parse_task
    from pipelines.pubsub_emulator import PubSubEmulator
    from wire.records import encode_report_container, reports_to_records

    task = parse_task({"task_id": "latency", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024})
    task.save(workdir / "latency-task.json")
    oracle = task.make_oracle()
    with PubSubEmulator(log_path=str(workdir / "emulator.log")) as emu:
        os.environ["PUBSUB_EMULATOR_HOST"] = emu.host
        pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        topic, out_topic = pub.topic_path("ldp-bench", "reports"), pub.topic_path("ldp-bench", "estimates")
        in_sub = sub.subscription_path("ldp-bench", "agg")
        out_sub = sub.subscription_path("ldp-bench", "dash")
        for t in (topic, out_topic):
            pub.create_topic(name=t)
        sub.create_subscription(name=in_sub, topic=topic)
        sub.create_subscription(name=out_sub, topic=out_topic)
        cmd = [
            sys.executable,
            "-m",
            "pipelines.frequency",
            "--task",
            str(workdir / "latency-task.json"),
            "--streaming",
            "--input_subscription",
            in_sub,
            "--output",
            str(workdir / "stream-out"),
            "--output_topic",
            out_topic,
            "--window_size",
            str(window_s),
            "--streaming_duration",
            str(seconds + 8),
        ]
        log = open(workdir / "stream-pipeline.log", "wb")
        proc = subprocess.Popen(cmd, env=emu.env(), stdout=log, stderr=subprocess.STDOUT)
        arrivals: dict[str, float] = {}
        stop = threading.Event()

        def listen():
            while not stop.is_set():
                resp = sub.pull(subscription=out_sub, max_messages=100, timeout=2)
                now = time.time()
                for m in resp.received_messages:
                    e = json.loads(m.message.data)
                    arrivals.setdefault(e["window_end"], now)
                if resp.received_messages:
                    sub.acknowledge(subscription=out_sub, ack_ids=[m.ack_id for m in resp.received_messages])

        th = threading.Thread(target=listen, daemon=True)
        th.start()
        rng = np.random.default_rng(5)
        time.sleep(5)
        t_end = time.time() + seconds
        per_msg = max(1, int(rate / 10))
        while time.time() < t_end:
            now = int(time.time() * 1000)
            r = oracle.encode(rng.integers(0, 1024, per_msg), rng=rng)
            pub.publish(
                topic, encode_report_container(reports_to_records("latency", r, np.full(per_msg, now)))
            )
            time.sleep(0.1)
        while proc.poll() is None:
            r = oracle.encode(rng.integers(0, 1024, 10), rng=rng)
            now = int(time.time() * 1000)
            pub.publish(topic, encode_report_container(reports_to_records("latency", r, np.full(10, now))))
            time.sleep(0.5)
        stop.set()
        th.join(timeout=10)
        log.close()
    from datetime import datetime

    lat = sorted(
        t - datetime.fromisoformat(k.replace("Z", "+00:00")).timestamp() for k, t in arrivals.items()
    )
    return {
        "window_s": window_s,
        "rate_reports_per_s": rate,
        "windows": len(lat),
        "latency_s_median": statistics.median(lat) if lat else None,
        "latency_s_max": max(lat) if lat else None,
        "latency_s_all": lat,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = job_parser(__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1_000_000, help="number of simulated users (reports)")
    ap.add_argument("--domain_size", type=int, default=1024, help="size of the categorical domain")
    ap.add_argument("--epsilon", type=float, default=1.0, help="privacy budget per report")
    ap.add_argument("--mechanism", default="auto", help="frequency oracle (auto: the lowest variance)")
    ap.add_argument("--files", type=int, default=4, help="number of Avro report files")
    ap.add_argument("--seed", type=int, default=1, help="simulation seed")
    ap.add_argument("--workdir", help="keep inputs and outputs here (default: a temporary directory)")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--streaming_latency", action="store_true", help="also measure latency on the emulator")
    ns, _ = parse_job_args(ap, argv)
    beam_args = ns.beam_args
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        work = Path(ns.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        res = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_avg_1m": os.getloadavg()[0],
            }
        }
        if ns.workdir:  # the benchmark's own subdirectories of --workdir, from an earlier run
            for sub in ("in", "out"):
                shutil.rmtree(work / sub, ignore_errors=True)
        batch = measure_batch(
            ns.users, ns.domain_size, ns.epsilon, ns.mechanism, ns.files, work, beam_args, ns.seed
        )
        res.update(batch)
        if ns.streaming_latency:
            res["streaming"] = measure_streaming_latency(work)
    lines = [
        f"n={res['n']} d={res['d']} mechanism={res['mechanism']} files={res['files']} beam_args={beam_args}",
        f"pipeline   {res['pipeline_reports_per_s']:>12,.0f} reports/s ({res['pipeline_seconds']:.2f} s)"
        f"  target 200,000: {'met' if res['meets_target'] else 'NOT met'}",
        f"core       {res['core_reports_per_s']:>12,.0f} reports/s  ratio pipeline/core = {res['ratio']:.3f}",
        f"in-process {res['inprocess_reports_per_s']:>12,.0f} reports/s  pipeline/in-process = "
        f"{res['pipeline_vs_inprocess']:.2f}",
        f"fastavro   {res['fastavro_reports_per_s']:>12,.0f} reports/s (decode only)  pipeline/fastavro = "
        f"{res['pipeline_vs_fastavro_decode_only']:.2f}",
        f"identical estimates: {res['identical']}; counts {res['counts']['read']} read, "
        f"{res['counts']['accepted']} accepted, {res['counts']['rejected']} rejected",
    ]
    if "streaming" in res:
        s = res["streaming"]
        lines.append(
            f"streaming latency (window end -> first estimate): median {s['latency_s_median']} s, "
            f"max {s['latency_s_max']} s over {s['windows']} windows"
        )
    print("\n".join(lines))
    if ns.json:
        Path(ns.json).write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
