"""The shuffler against the frequency job on the same reports: wall time and peak memory, alternated runs.

Not part of the test suite::

    .venv/bin/python -m bench.shuffle --users 3000000 --rounds 2 --json bench/results/shuffle.json

The simulator writes ``--users`` reports of a shuffled OLH task (d = 1024) whose times all fall in one
bucket (``time_precision_s`` 3600: the worst case for the shuffler's memory); then each round runs, in
turn, ``python -m pipelines.shuffle`` and ``python -m pipelines.frequency`` (window = the bucket) over those
files, each in a fresh process on the DirectRunner, and records its wall time and peak resident memory
(``ru_maxrss`` of that child, from ``os.wait4``). Alternating puts a load change of a shared machine on
both. It prints the medians and the ratios shuffle / job, and checks that the shuffler forwarded every
report in one batch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

__all__ = ["main", "timed"]


def timed(cmd: list[str], log: Path) -> tuple[float, float]:
    """Runs ``cmd``; returns (seconds, peak RSS in MiB). A failure raises with the log's tail."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} exited {proc.returncode}:\n{log.read_text()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024.0  # Linux: KiB


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=3_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--memory_mb", type=int, help="the shuffler's --memory_mb (default: its own)")
    p.add_argument("--workdir", help="keep the files here (default: a temporary directory, removed)")
    p.add_argument("--json", help="write the figures to this file")
    ns = p.parse_args(argv)
    if ns.users < 1000 or ns.rounds < 1:
        p.error("--users >= 1000 and --rounds >= 1")
    work = Path(ns.workdir or tempfile.mkdtemp(prefix="bench-shuffle-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        task = {"task_id": "bench-shuffle", "mechanism": "olh", "epsilon": 2.0, "domain_size": 1024,
                "anonymity": {"shuffled": True, "time_precision_s": 3600, "min_reports": 1000}}  # fmt: skip
        (work / "task.json").write_text(json.dumps(task))
        py = sys.executable
        if not (work / "in").is_dir():
            subprocess.run(
                [py, "-m", "pipelines.simulate", "--task", str(work / "task.json"), "--users", str(ns.users),
                 "--seed", "1", "--start", "2026-01-01T00:00:00Z", "--duration", "3599",
                 "--output", str(work / "in"), "--overwrite"],
                cwd=REPO, check=True, capture_output=True,
            )  # fmt: skip
        if not (work / "shuffle.key").exists():
            from ldp.shuffle.provenance import new_key_file

            new_key_file(work / "shuffle.key")
        inp = str(work / "in" / "*.avro")
        extra = [] if ns.memory_mb is None else ["--memory_mb", str(ns.memory_mb)]
        shuffle_cmd = [py, "-m", "pipelines.shuffle", "--task", str(work / "task.json"), "--input", inp,
                       "--output", str(work / "shuffled"), "--shuffle_key", str(work / "shuffle.key"),
                       *extra]  # fmt: skip
        job_cmd = [py, "-m", "pipelines.frequency", "--task", str(work / "task.json"), "--input", inp,
                   "--window_size", "3600", "--output", str(work / "est")]  # fmt: skip
        runs: dict[str, list[tuple[float, float]]] = {"shuffle": [], "job": []}
        for r in range(ns.rounds):
            for name, cmd, out in (("shuffle", shuffle_cmd, "shuffled"), ("job", job_cmd, "est")):
                shutil.rmtree(work / out, ignore_errors=True)
                runs[name].append(timed(cmd, work / f"{name}-{r}.log"))
                print(f"round {r} {name}: {runs[name][-1][0]:.1f} s, {runs[name][-1][1]:.0f} MiB", flush=True)
            counts = json.loads((work / "shuffled" / "counts.json").read_text())["counts"]
            if (counts["forwarded"], counts["batches"]) != (ns.users, 1):
                raise SystemExit(f"the shuffler did not forward every report in one batch: {counts}")
        med = {
            k: (statistics.median(s for s, _ in v), statistics.median(m for _, m in v))
            for k, v in runs.items()
        }
        res = {
            "users": ns.users,
            "rounds": ns.rounds,
            "memory_mb": ns.memory_mb,
            "load_average": os.getloadavg(),
            "runs": {k: [{"seconds": s, "peak_mib": m} for s, m in v] for k, v in runs.items()},
            "median_seconds": {k: v[0] for k, v in med.items()},
            "median_peak_mib": {k: v[1] for k, v in med.items()},
            "time_ratio": med["shuffle"][0] / med["job"][0],
            "memory_ratio": med["shuffle"][1] / med["job"][1],
        }
        print(
            f"shuffle {med['shuffle'][0]:.1f} s / {med['shuffle'][1]:.0f} MiB; job {med['job'][0]:.1f} s / "
            f"{med['job'][1]:.0f} MiB; ratios: time {res['time_ratio']:.2f}x, "
            f"memory {res['memory_ratio']:.2f}x"
        )
        if ns.json:
            Path(ns.json).write_text(json.dumps(res, indent=2) + "\n")
        return res
    finally:
        if not ns.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
