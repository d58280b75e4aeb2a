"""Backfill benchmark: a batch frequency job over 1e8 reports, its memory over time and its throughput.

Not part of the test suite. Two steps, run under ``nice``:

    # 1. the report files, once (idempotent; a chunk already written is kept): 100 chunks of 1e6 reports
    nice -n 10 .venv/bin/python -m bench.backfill generate --users 100000000 --chunks 100 \\
        --data .cache/backfill/n1e8
    # 2. the job (a subprocess; its RSS, children included, sampled every second), then the core's
    #    estimate on the same files, streamed file by file, for an exact comparison
    nice -n 10 .venv/bin/python -m bench.backfill run --data .cache/backfill/n1e8 \\
        --json bench/results/backfill_n1e8.json --png bench/results/backfill_n1e8.png [-- BEAM ARGS]

The task is OLH, epsilon 1, d = 1024 (``bench/pipeline.py``'s), Zipf values. Chunk ``k`` holds users
``[k m, (k + 1) m)`` with event times in its own slice of one hour, written by ``pipelines.simulate``
(one file per chunk, ``chunk-KKKKK/reports-00000-of-00001.avro``), each seeded from one
``numpy.random.SeedSequence(--seed)`` child. ``truth.json`` at the top sums the chunks' true counts.

``run`` measures: wall time of the job (Python start-up included), reports/s, the counts it printed, the
RSS of the job's process tree every second (``/proc``; peak, and the peak over each tenth of the run,
which is how "flat" is judged: the last tenths are no higher than the first full ones), and that the
job's estimate equals the in-process core's (``oracle.add`` over the same decoded, validated batches)
exactly. The core pass also keeps a running maximum of nothing but its accumulator, so it, too, is flat.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TASK = {"task_id": "backfill", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024}
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR_S = 3600.0

__all__ = ["generate", "main", "run_job", "tree_rss_bytes"]


def _task():
    from ldp.task import parse_task

    return parse_task(TASK)


def generate(data: Path, users: int, chunks: int, seed: int) -> dict[str, Any]:
    """Writes ``chunks`` chunk directories of ``users / chunks`` reports each (skips complete ones)."""
    import simulator

    if users % chunks:
        raise SystemExit(f"--users ({users}) must be a multiple of --chunks ({chunks})")
    task = _task()
    data.mkdir(parents=True, exist_ok=True)
    task.save(data / "task.json")
    m = users // chunks
    seeds = np.random.SeedSequence(seed).spawn(chunks)
    counts = np.zeros(task.domain_size, dtype=np.int64)
    t0 = time.perf_counter()
    for k in range(chunks):
        out = data / f"chunk-{k:05d}"
        truth_file = out / "truth.json"
        if truth_file.is_file() and json.loads(truth_file.read_text()).get("n_users") == m:
            truth = json.loads(truth_file.read_text())
        else:
            truth = simulator.simulate_files(
                task, m, "zipf", out, seed=int(seeds[k].generate_state(1)[0]), files=1,
                start_ms=START_MS + int(round(k * HOUR_S / chunks * 1000)), duration_s=HOUR_S / chunks,
            )  # fmt: skip
        counts += np.rint(np.asarray(truth["frequencies"]) * m).astype(np.int64)
        if k % 10 == 9 or k == chunks - 1:
            print(f"[backfill] {k + 1}/{chunks} chunks, {time.perf_counter() - t0:.0f} s", flush=True)
    size = sum(os.path.getsize(p) for p in glob.glob(str(data / "chunk-*" / "reports-*.avro")))
    truth = {
        "n_users": users,
        "chunks": chunks,
        "seed": seed,
        "task": TASK,
        "counts": counts.tolist(),
        "bytes": size,
        "generate_seconds": time.perf_counter() - t0,
    }
    (data / "truth.json").write_text(json.dumps(truth) + "\n")
    print(f"[backfill] {users:,} reports in {chunks} files, {size / 1e9:.2f} GB under {data}")
    return truth


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):  # every thread's children
        try:
            with open(task) as fh:
                kids += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return kids


def tree_rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` and all its descendants, from ``/proc`` (0 once it has exited)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        todo += _children(p)
    return total


class RssSampler:
    """Samples the RSS of a process tree every ``interval`` seconds on a thread."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - self._t0, tree_rss_bytes(self.pid)))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def flatness(samples: list[tuple[float, int]], parts: int = 10) -> dict[str, Any]:
    """Peak RSS per tenth of the run (after the first, which holds the start-up)."""
    rss = [r for _, r in samples if r > 0]
    if len(rss) < parts:
        return {"peak_bytes": max(rss, default=0), "tenths_peak_bytes": []}
    chunks = np.array_split(np.asarray(rss), parts)
    peaks = [int(c.max()) for c in chunks]
    return {
        "peak_bytes": int(max(rss)),
        "tenths_peak_bytes": peaks,
        # growth from the second tenth (start-up done) to the last: flat memory means about 1.0
        "last_over_second_tenth": peaks[-1] / peaks[1] if peaks[1] else None,
    }


def run_job(data: Path, out: Path, beam_args: list[str]) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(data / "task.json"),
        "--input", str(data / "chunk-*" / "reports-*.avro"), "--output", str(out), *beam_args,
    ]  # fmt: skip
    log = out.parent / f"{out.name}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
        with RssSampler(proc.pid) as sampler:
            rc = proc.wait()
    wall = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"job failed (exit {rc}); log: {log}")
    summary = json.loads((out / "counts.json").read_text())
    counts = summary.get("counts", summary)
    (est_file,) = glob.glob(str(out / "estimates-*.jsonl"))
    with open(est_file) as fh:
        est = json.loads(fh.readline())
    return {
        "command": cmd,
        "wall_seconds": wall,
        "counts": counts,
        "estimate": est,
        "rss_samples": sampler.samples,
        "log": str(log),
    }


def core_estimate(data: Path) -> tuple[Any, int, float, list[tuple[float, int]]]:
    """The core's estimate over the same files, one decoded batch at a time (this process's RSS too)."""
    from wire.decode import iter_report_batches
    from wire.validate import ReportValidator, fast_decode_params

    task = _task()
    oracle = task.make_oracle()
    v = ReportValidator(task, oracle)
    acc = oracle.create_accumulator()
    n = 0
    t0 = time.monotonic()
    with RssSampler(os.getpid()) as sampler:
        for p in sorted(glob.glob(str(data / "chunk-*" / "reports-*.avro"))):
            with open(p, "rb") as fh:
                for b in iter_report_batches(fh, 1 << 15, task_id=task.task_id, **fast_decode_params(oracle)):
                    vb = v.validate(b, p)
                    oracle.add(acc, vb.reports)
                    n += len(vb.reports)
    return oracle.estimate(acc), n, time.monotonic() - t0, sampler.samples


def _plot(png: Path, job: dict[str, Any], core_samples: list[tuple[float, int]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    t, r = zip(*job["rss_samples"]) if job["rss_samples"] else ((), ())
    ax.plot(t, [x / 2**20 for x in r], label="backfill job (process tree)")
    if core_samples:
        t2, r2 = zip(*core_samples)
        ax.plot(t2, [x / 2**20 for x in r2], label="in-process core pass", alpha=0.7)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the report files (once)")
    g.add_argument("--users", type=int, default=100_000_000)
    g.add_argument("--chunks", type=int, default=100)
    g.add_argument("--seed", type=int, default=2026_12_01)
    g.add_argument("--data", type=Path, default=REPO / ".cache" / "backfill" / "n1e8")
    r = sub.add_parser("run", help="run the backfill job and the core on the files")
    r.add_argument("--data", type=Path, default=REPO / ".cache" / "backfill" / "n1e8")
    r.add_argument("--out", type=Path, help="job output (default: DATA/../out-<name>)")
    r.add_argument("--json", type=Path, help="write the results here")
    r.add_argument("--png", type=Path, help="plot RSS over time here")
    r.add_argument("--skip_core", action="store_true", help="do not run the in-process core comparison")
    argv = sys.argv[1:] if argv is None else list(argv)
    beam_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, beam_args = argv[:i], argv[i + 1 :]
    ns = ap.parse_args(argv)
    if ns.cmd == "generate":
        generate(ns.data.resolve(), ns.users, ns.chunks, ns.seed)
        return None

    data = ns.data.resolve()
    truth = json.loads((data / "truth.json").read_text())
    out = (ns.out or data.parent / f"out-{data.name}").resolve()
    if out.exists():
        import shutil

        shutil.rmtree(out)
    load0 = os.getloadavg()
    job = run_job(data, out, beam_args)
    n = truth["n_users"]
    res: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_at_start": load0},
        "n_reports": n,
        "input_bytes": truth["bytes"],
        "files": truth["chunks"],
        "task": TASK,
        "beam_args": beam_args,
        "command": " ".join(job["command"]),
        "wall_seconds": job["wall_seconds"],
        "reports_per_s": n / job["wall_seconds"],
        "counts": job["counts"],
        "rss": flatness(job["rss_samples"]),
        "rss_samples": job["rss_samples"],
        "load_avg_at_end": os.getloadavg(),
    }
    est = job["estimate"]
    freq = np.asarray(est["frequencies"])
    std = np.asarray(est["std"])
    true_f = np.asarray(truth["counts"]) / n
    z = np.abs(freq - true_f) / std
    res["max_abs_z_vs_truth"] = float(z.max())
    core_samples: list[tuple[float, int]] = []
    if not ns.skip_core:
        core, n_core, t_core, core_samples = core_estimate(data)
        res["core"] = {
            "n": n_core,
            "seconds": t_core,
            "reports_per_s": n_core / t_core,
            "rss": flatness(core_samples),
        }
        res["identical_to_core"] = bool(
            est["n_reports"] == n_core == n and est["frequencies"] == core.frequencies.tolist()
        )
    print(
        f"backfill: {n:,} reports, {truth['bytes'] / 1e9:.2f} GB, {job['wall_seconds']:.0f} s, "
        f"{res['reports_per_s']:,.0f} reports/s; counts {job['counts']}; peak RSS "
        f"{res['rss']['peak_bytes'] / 2**20:.0f} MiB, tenths "
        f"{[p >> 20 for p in res['rss']['tenths_peak_bytes']]} MiB; identical to core: "
        f"{res.get('identical_to_core')}; max |z| vs truth {res['max_abs_z_vs_truth']:.2f}"
    )
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(res, indent=1) + "\n")
    if ns.png:
        _plot(ns.png, job, core_samples, f"backfill of {n:.0e} reports: RSS over time")
    return res


if __name__ == "__main__":
    main()
