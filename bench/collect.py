"""Load on the HTTP collector (pipelines.collect; docs/collector.md): reports/s and latency of single-report
and batch requests, on 127.0.0.1 only (not part of the test suite).

    nice -n 10 .venv/bin/python -m bench.collect --requests 2000 --concurrency 8 --time_limit 120 \\
        --json bench/results/collect.json

Starts ``python -m pipelines.collect`` as a child process (its own session, stopped by PID with SIGTERM)
on a free 127.0.0.1 port, writing into a temporary directory (removed afterwards), for an OLH task of
d = 1024. Then, per mode, a fixed count of requests (``--requests``) is sent by a fixed number of client
threads (``--concurrency``), each on one kept-alive connection, until all are answered or the time
limit (``--time_limit`` seconds for the whole run) passes:

* ``json_single``: one report per request (JSON);
* ``json_batch100``: 100 reports per request (``{"reports": [...]}``);
* ``avro_batch100``: 100 reports per request (an Avro object container).

Reported per mode: requests and reports answered 200, wall seconds, requests/s, reports/s, and the
median and 99th percentile of the request latency (send to answer, milliseconds, measured by the client).
The collector's own summary (reports written = reports accepted) is checked at the end. The client
threads share one interpreter: on a small machine the client is part of what is measured.

``--rounds R`` (default 1) alternates, R times, the collector with a *bare* Tornado server (``--bare``,
the same process set-up) that only parses each body (``json.loads``; an Avro body's records with
fastavro) and answers ``{"accepted": n}``: no checks, no file, no fsync. The ratio of the collector's
reports/s to the bare server's, per mode, is the median over the rounds (``ratio_to_bare``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp.task import parse_task
from pipelines.collector import report_to_json
from wire.records import encode_report_container, reports_to_records

REPO = Path(__file__).resolve().parent.parent
TASK = {"task_id": "bench-collect", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024}
START_MS = 1_767_225_600_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bodies(n_reports: int, seed: int) -> list[dict[str, Any]]:
    task = parse_task(TASK)
    rng = np.random.default_rng(seed)
    reports = task.make_oracle().encode(rng.integers(0, 1024, n_reports), rng=rng)
    return reports_to_records(task.task_id, reports, START_MS + np.arange(n_reports), 0)


def _wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the collector did not start")
        time.sleep(0.2)


def _load(port: int, bodies: list[bytes], content_type: str, concurrency: int, deadline: float) -> dict:
    """Sends every body once from ``concurrency`` threads (one connection each); latencies in seconds."""
    lock = threading.Lock()
    next_i = [0]
    lat: list[float] = []
    errors: dict[str, int] = {}

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        try:
            while time.monotonic() < deadline:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= len(bodies):
                    break
                t0 = time.perf_counter()
                conn.request("POST", "/v1/reports", bodies[i], {"Content-Type": content_type})
                resp = conn.getresponse()
                resp.read()
                dt = time.perf_counter() - t0
                if resp.status == 200:
                    mine.append(dt)
                else:
                    with lock:
                        errors[str(resp.status)] = errors.get(str(resp.status), 0) + 1
        finally:
            conn.close()
            with lock:
                lat.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"seconds": time.perf_counter() - t0, "latencies": lat, "errors": errors}


def _bare(port: int) -> None:
    """The bare server of ``--rounds``: parses the body, answers the count; nothing else."""
    import asyncio
    import io

    import fastavro
    import tornado.web

    class Reports(tornado.web.RequestHandler):
        def post(self) -> None:
            body = self.request.body
            if self.request.headers.get("Content-Type") == "application/avro":
                n = sum(1 for _ in fastavro.reader(io.BytesIO(body)))
            else:
                obj = json.loads(body)
                n = len(obj["reports"]) if "reports" in obj else 1
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"accepted": n}) + "\n")

    class Health(tornado.web.RequestHandler):
        def get(self) -> None:
            self.finish("{}")

    async def main() -> None:
        app = tornado.web.Application([(r"/v1/reports", Reports), (r"/healthz", Health)],
                                      log_function=lambda h: None)  # fmt: skip
        app.listen(port, "127.0.0.1")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        print(json.dumps({"bare": True}), flush=True)

    asyncio.run(main())


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=1, help="collector / bare server alternations (0: no bare)")
    ap.add_argument("--requests", type=int, default=2000, help="requests per mode")
    ap.add_argument("--concurrency", type=int, default=8, help="client threads (one connection each)")
    ap.add_argument("--time_limit", type=float, default=120.0, help="seconds for the whole run, at most")
    ap.add_argument("--seed", type=int, default=7, help="seed of the simulated reports")
    ap.add_argument("--json", help="write the results here")
    return ap


def _modes(n: int, seed: int) -> list[tuple[str, str, list[bytes], int]]:
    """The request bodies of every mode: (name, content type, bodies, reports per request)."""
    singles = _bodies(n, seed)
    batch = _bodies(100 * n, seed + 1)
    return [
        ("json_single", "application/json", [json.dumps(report_to_json(r)).encode() for r in singles], 1),
        ("json_batch100", "application/json",
         [json.dumps({"reports": [report_to_json(r) for r in batch[100 * i : 100 * i + 100]]}).encode()
          for i in range(n)], 100),
        ("avro_batch100", "application/avro",
         [encode_report_container(batch[100 * i : 100 * i + 100]) for i in range(n)], 100),
    ]  # fmt: skip


def _start_server(server: str, port: int, tmp: str, rnd: int, env: dict[str, str]) -> subprocess.Popen:
    """Starts the collector (writing into ``tmp``) or the bare server on ``port``, in its own session."""
    if server == "collector":
        out_dir = Path(tmp) / f"reports-{rnd}"
        cmd = [
            sys.executable, "-m", "pipelines.collect", "--task", str(Path(tmp) / "task.json"),
            "--output_dir", str(out_dir), "--port", str(port), "--log_level", "WARNING",
        ]  # fmt: skip
    else:
        cmd = [sys.executable, "-m", "bench.collect", "--bare", str(port)]
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _mode_row(server: str, rnd: int, name: str, per: int, n_bodies: int, r: dict) -> dict[str, Any]:
    """One result row: counts, rates and latency percentiles (ms) of the requests answered 200."""
    lat = np.asarray(r["latencies"]) * 1000
    ok = len(lat)
    return {
        "server": server, "round": rnd, "mode": name, "reports_per_request": per,
        "requests": ok, "reports": ok * per, "seconds": round(r["seconds"], 2),
        "requests_per_s": round(ok / r["seconds"]),
        "reports_per_s": round(ok * per / r["seconds"]),
        "p50_ms": round(float(np.percentile(lat, 50)), 2) if ok else None,
        "p99_ms": round(float(np.percentile(lat, 99)), 2) if ok else None,
        "errors": r["errors"], "complete": ok == n_bodies,
    }  # fmt: skip


def _load_modes(
    server: str, rnd: int, port: int, modes: list, ns: argparse.Namespace, deadline: float, rows: list
) -> int:
    """Sends every mode's bodies to the server on ``port``; appends and prints a row per mode.

    Returns the count of reports the server answered 200."""
    sent_reports = 0
    for name, ctype, bodies, per in modes:
        r = _load(port, bodies, ctype, ns.concurrency, deadline)
        row = _mode_row(server, rnd, name, per, len(bodies), r)
        sent_reports += row["reports"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return sent_reports


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    """Stops the server with SIGTERM (SIGKILL after 60 s); its stdout and stderr."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _run_rounds(ns: argparse.Namespace, modes: list, tmp: str, results: list, bare_rows: list) -> dict | None:
    """Alternates the collector and the bare server over the rounds; the collector's last summary, or
    None (after printing its exit and stderr) when it failed or wrote other than the reports accepted."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    deadline = time.monotonic() + ns.time_limit
    summary = None
    for rnd in range(max(1, ns.rounds)):
        for server in ("collector", "bare") if ns.rounds else ("collector",):
            port = _free_port()
            proc = _start_server(server, port, tmp, rnd, env)
            sent_reports = 0
            try:
                _wait_ready(port, proc)
                rows = results if server == "collector" else bare_rows
                sent_reports = _load_modes(server, rnd, port, modes, ns, deadline, rows)
            finally:
                stdout, stderr = _stop(proc)
            if server == "collector":
                summary = json.loads(stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
                if summary is None or summary["reports_written"] != sent_reports:
                    print(f"collector exit {proc.returncode}: {stderr.strip()[-2000:]}", file=sys.stderr)
                    return None
    return summary


def _ratios(modes: list, results: list[dict[str, Any]], bare_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per mode, the median over the rounds of the collector's reports/s over the bare server's."""
    ratios = {}
    for name, _, _, _ in modes:
        per_round = [
            c["reports_per_s"] / b["reports_per_s"]
            for c in results for b in bare_rows
            if c["mode"] == b["mode"] == name and c["round"] == b["round"] and b["reports_per_s"]
        ]  # fmt: skip
        if per_round:
            ratios[name] = round(float(np.median(per_round)), 3)
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    ns = ap.parse_args(argv)
    if ns.bare is not None:
        _bare(ns.bare)
        return 0
    if ns.requests < 1 or ns.concurrency < 1 or not ns.time_limit > 0:
        ap.error("--requests and --concurrency must be >= 1, --time_limit > 0")
    modes = _modes(ns.requests, ns.seed)
    tmp = tempfile.mkdtemp(prefix="ldp-bench-collect-")
    (Path(tmp) / "task.json").write_text(json.dumps(TASK))
    results: list[dict[str, Any]] = []
    bare_rows: list[dict[str, Any]] = []
    try:
        summary = _run_rounds(ns, modes, tmp, results, bare_rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if summary is None:
        return 1
    ratios = _ratios(modes, results, bare_rows)
    if ratios:
        print(json.dumps({"ratio_to_bare": ratios}), flush=True)
    out = {
        "command": "python -m bench.collect " + " ".join(sys.argv[1:] if argv is None else argv),
        "task": TASK,
        "concurrency": ns.concurrency,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.system()},
        "collector_summary": summary,
        "modes": results,
        "bare_modes": bare_rows,
        "ratio_to_bare": ratios,
    }
    if ns.json:
        Path(ns.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
