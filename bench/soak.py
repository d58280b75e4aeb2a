"""Soak benchmark: a directory-streaming frequency job fed at a sustained rate, latency and memory over time.

Not part of the test suite. On the Flink session cluster of tools/flink/cluster.sh (or any runner whose
flags follow ``--``), under ``nice``:

    bash tools/flink/cluster.sh start
    nice -n 10 .venv/bin/python -m bench.soak --seconds 600 --rate 2000 \\
        --json bench/results/soak_flink.json --png bench/results/soak_flink.png \\
        -- $(bash tools/flink/cluster.sh args) --parallelism=4

What it does:

* writes the task (OLH, epsilon 1, d = 1024) and starts ``pipelines.frequency --streaming --input
  WATCHED/*.avro`` in a subprocess (10 s event-time windows, ``--allowed_lateness 10``, accumulating
  panes, ``--watch_interval 1``, the watch bounded to the feed plus a margin, so the job ends by itself);
* once the job runs (its first count window appeared) feeds the watched directory: every second one
  report file of ``--rate`` reports whose event times are spread over the second just past (written
  under a name the glob does not match, then renamed), for ``--seconds``;
* polls the output directory every 0.25 s: the latency of a pane is the time its estimate file
  appeared minus its window's end (``window end -> pane written``), for the first pane of every window
  and for its final pane;
* samples every 5 s the resident memory (``/proc``) of the job's processes: the launching Python process,
  and, when ``--cluster_run_dir`` (default: the cluster's run dir when it has a ``cluster.env``) is given,
  the JobManager, each TaskManager, the job server and the SDK worker pool with its harness processes;
* at the end checks that every report fed is counted exactly once: the most complete pane of each
  window holds exactly the reports with event times in it (by count: sum over windows == reports fed,
  and per window == reports whose event times fall in it).

The JSON holds the settings, the per-window latencies, the memory series and a summary (latency median
/ p95 / max per tenth of the run, memory per component in the first and last full minute).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TASK = {"task_id": "soak", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024}
WINDOW_S = 10

__all__ = ["main"]

#: ``--without_late_drop``: the frequency job with ``transforms.aggregate``'s DropLate step switched off.
_WITHOUT_LATE_DROP = (
    "import sys; import transforms.aggregate as a; a.drops_late_data = lambda window, streaming: False; "
    "from pipelines import frequency; frequency.run(sys.argv[1:])"
)


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        for task in glob.glob(f"/proc/{p}/task/*/children"):  # children of every thread (Popen in a thread)
            try:
                with open(task) as fh:
                    kids += [int(c) for c in fh.read().split()]
            except OSError:
                pass
        out += kids
        todo += kids
    return out


def _tree_rss(pid: int) -> int:
    return sum(_rss(p) for p in [pid, *_descendants(pid)])


def _components(job_pid: int, run_dir: Path | None) -> dict[str, int]:
    comps = {"launcher": job_pid}
    if run_dir is not None:
        for f in sorted(run_dir.glob("*.pid")):
            try:
                comps[f.stem] = int(f.read_text().strip())
            except (OSError, ValueError):
                pass
    return comps


def _iso_ms(iso: str) -> int:
    import datetime as dt

    return int(round(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000))


class Feeder(threading.Thread):
    """Writes one report file per second into ``watched`` for ``seconds`` seconds."""

    def __init__(self, watched: Path, rate: int, seconds: float, seed: int) -> None:
        super().__init__(daemon=True)
        from ldp.task import parse_task

        self.watched, self.rate, self.seconds = watched, rate, seconds
        self.task = parse_task(TASK)
        self.oracle = self.task.make_oracle()
        self.rng = np.random.default_rng(np.random.SeedSequence(seed))
        self.event_ms: list[np.ndarray] = []
        self.files = 0
        self.behind_s = 0.0  # how far the feeder fell behind its schedule, at most

    def run(self) -> None:
        from wire.records import reports_to_records, write_report_file

        t0 = time.time()
        k = 0
        while True:
            due = t0 + k + 1
            now = time.time()
            if due - t0 > self.seconds:
                break
            if now < due:
                time.sleep(due - now)
            self.behind_s = max(self.behind_s, time.time() - due)
            end = int(time.time() * 1000)
            ev = np.sort(self.rng.integers(end - 1000, end, self.rate))
            values = self.rng.zipf(1.3, self.rate) % self.oracle.d
            reports = self.oracle.encode(values, rng=self.rng)
            part = self.watched / f".reports-{k:06d}.avro.part"
            with open(part, "wb") as fh:
                write_report_file(fh, reports_to_records(self.task.task_id, reports, ev))
            os.replace(part, self.watched / f"reports-{k:06d}.avro")
            self.event_ms.append(ev)
            self.files += 1
            k += 1


class OutputWatcher(threading.Thread):
    """Polls the job's output for new estimate files; records when each appeared."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(0.25)
        self.poll()

    def poll(self) -> None:
        now = time.time()
        for f in glob.glob(str(self.out / "estimates-*.jsonl")):
            self.seen.setdefault(f, now)


def _panes(seen: dict[str, float]) -> list[dict[str, Any]]:
    panes = []
    for f, t in seen.items():
        try:
            with open(f) as fh:
                rows = [json.loads(line) for line in fh if line.strip()]
        except OSError:
            continue
        for r in rows:
            if r.get("window_end"):
                end = _iso_ms(r["window_end"])
                panes.append(
                    {
                        "window_end_ms": end,
                        "pane_index": r.get("pane_index"),
                        "pane_timing": r.get("pane_timing"),
                        "n_reports": r["n_reports"],
                        "seen": t,
                        "latency_s": t - end / 1000.0,
                    }
                )
    return panes


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


class MemorySampler(threading.Thread):
    """Samples every 5 s the resident memory of each component's process tree, seconds since ``t_start``."""

    def __init__(self, job_pid: int, run_dir: Path | None, t_start: float) -> None:
        super().__init__(daemon=True)
        self.job_pid, self.run_dir, self.t_start = job_pid, run_dir, t_start
        self.rows: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            row: dict[str, Any] = {"t": time.time() - self.t_start}
            for name, pid in _components(self.job_pid, self.run_dir).items():
                row[name] = _tree_rss(pid)
            self.rows.append(row)
            self.stop.wait(5.0)


@dataclass
class SoakRun:
    """What one run observed: the job's command and exit code, its clock marks, the feeder, the panes
    seen (file -> when it appeared) and the memory series."""

    cmd: list[str]
    rc: int
    t_start: float
    t_feed: float
    t_fed: float
    t_end: float
    feeder: Feeder
    seen: dict[str, float]
    memory: list[dict[str, Any]]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="how long to feed (default 600)")
    ap.add_argument("--rate", type=int, default=2000, help="reports per second (default 2000)")
    ap.add_argument("--seed", type=int, default=2026_12_01)
    ap.add_argument("--workdir", type=Path, default=REPO / ".cache" / "soak", help="inputs and outputs")
    ap.add_argument("--cluster_run_dir", type=Path, help="Flink run dir (default .cache/flink/cluster)")
    ap.add_argument("--no_cluster_memory", action="store_true", help="sample only the launching process")
    ap.add_argument(
        "--without_late_drop",
        action="store_true",
        help="diagnostic: run the job with transforms.lateness's DropLate step switched off (in 2026-12-01's "
        "tree that step holds the watermark after the first window on Flink and Prism; docs/load.md)",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--png", type=Path)
    return ap


def _split_beam_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """The benchmark's own arguments and the runner's (those after ``--``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _cluster_run_dir(ns: argparse.Namespace) -> Path | None:
    """The Flink run dir whose processes are sampled too, when it has a ``cluster.env``."""
    if ns.no_cluster_memory:
        return None
    cand = ns.cluster_run_dir or REPO / ".cache" / "flink" / "cluster"
    return cand if (cand / "cluster.env").is_file() else None


def _job_command(ns: argparse.Namespace, work: Path, beam_args: list[str]) -> list[str]:
    """The streaming frequency job over ``work/in``, writing ``work/out``, watching a little past the feed."""
    margin = 60.0
    launch = ["-m", "pipelines.frequency"]
    if ns.without_late_drop:
        launch = ["-c", _WITHOUT_LATE_DROP]
    return [
        sys.executable, *launch, "--task", str(work / "task.json"), "--streaming",
        "--input", str(work / "in" / "*.avro"), "--output", str(work / "out"), "--watch_interval", "1",
        "--window_size", str(WINDOW_S), "--allowed_lateness", "10", "--accumulating",
        "--counts_window", "30", "--streaming_duration", str(ns.seconds + margin), *beam_args,
    ]  # fmt: skip


def _wait_job_running(proc: subprocess.Popen, out: Path, t_start: float) -> None:
    """Waits until the job's first count window appears (its source ticks), at most 45 s after launch."""
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if glob.glob(str(out / "counts" / "counts-*.jsonl")) or time.time() - t_start > 45:
            break
        time.sleep(0.5)


def _run_soak(ns: argparse.Namespace, beam_args: list[str], run_dir: Path | None) -> SoakRun:
    """Starts the job in a fresh work dir, feeds it for ``--seconds`` and waits for it to end."""
    work = ns.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    watched, out = work / "in", work / "out"
    watched.mkdir(parents=True)
    (work / "task.json").write_text(json.dumps(TASK))
    cmd = _job_command(ns, work, beam_args)
    with open(work / "job.log", "wb") as log:
        t_start = time.time()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        sampler = MemorySampler(proc.pid, run_dir, t_start)
        sampler.start()
        watcher = OutputWatcher(out)
        watcher.start()
        _wait_job_running(proc, out, t_start)
        t_feed = time.time()
        feeder = Feeder(watched, ns.rate, ns.seconds, ns.seed)
        feeder.start()
        feeder.join()
        t_fed = time.time()
        rc = proc.wait()
        t_end = time.time()
        sampler.stop.set()
        watcher.stop.set()
        watcher.join()
        sampler.join()
    return SoakRun(cmd, rc, t_start, t_feed, t_fed, t_end, feeder, watcher.seen, sampler.rows)


def _expected_per_window(ev: np.ndarray) -> dict[int, int]:
    """Window end (ms) -> the count of reports fed with event times in that window."""
    want = {}
    for s, c in zip(*np.unique((ev // (WINDOW_S * 1000)) * WINDOW_S * 1000, return_counts=True)):
        want[int(s) + WINDOW_S * 1000] = int(c)
    return want


def _first_and_final(panes: list[dict[str, Any]]) -> tuple[dict[int, dict], dict[int, dict]]:
    """Per window end: the pane seen first, and the most complete pane (the most reports)."""
    final: dict[int, dict[str, Any]] = {}
    first: dict[int, dict[str, Any]] = {}
    for p in panes:
        e = p["window_end_ms"]
        if e not in final or p["n_reports"] > final[e]["n_reports"]:
            final[e] = p
        if e not in first or p["seen"] < first[e]["seen"]:
            first[e] = p
    return first, final


def _by_tenth(lat: list[float]) -> list[dict[str, float | None]]:
    """Median, p95 and max latency per tenth of the windows, in order."""
    tenths = []
    for part in np.array_split(np.arange(len(lat)), 10):
        xs = [lat[i] for i in part]
        if xs:
            tenths.append({"median_s": _pct(xs, 50), "p95_s": _pct(xs, 95), "max_s": max(xs)})
    return tenths


def _latency_stats(xs: list[float]) -> dict[str, float | None]:
    return {"median": _pct(xs, 50), "p95": _pct(xs, 95), "max": max(xs, default=None)}


def _memory_summary(run: SoakRun) -> dict[str, dict[str, float | None]]:
    """Per component: mean RSS (MiB) over the first and the last minute of the feed, and the peak."""
    memory = run.memory
    t_feed, t_fed = run.t_feed - run.t_start, run.t_fed - run.t_start
    comps = sorted({k for row in memory for k in row if k != "t"})
    feed_rows = [r for r in memory if t_feed <= r["t"] <= t_fed]
    mem_summary = {}
    for c in comps:
        first_min = [r.get(c, 0) for r in feed_rows if r["t"] <= t_feed + 60]
        last_min = [r.get(c, 0) for r in feed_rows if r["t"] >= t_fed - 60]
        mem_summary[c] = {
            "first_minute_mean_mib": float(np.mean(first_min)) / 2**20 if first_min else None,
            "last_minute_mean_mib": float(np.mean(last_min)) / 2**20 if last_min else None,
            "peak_mib": max(r.get(c, 0) for r in memory) / 2**20,
        }
    return mem_summary


def _window_rows(first: dict, final: dict, want: dict[int, int]) -> list[dict[str, Any]]:
    return [
        {
            "window_end_ms": e,
            "first_latency_s": first[e]["latency_s"],
            "first_timing": first[e]["pane_timing"],
            "final_latency_s": final[e]["latency_s"],
            "n_reports": final[e]["n_reports"],
            "expected": want.get(e, 0),
        }
        for e in sorted(first)
    ]


def _result(
    ns: argparse.Namespace, beam_args: list[str], run: SoakRun
) -> tuple[dict[str, Any], list, list, list]:
    """The JSON result of a run, with the windows that ended during the feed and their latencies."""
    first, final = _first_and_final(_panes(run.seen))
    feeder = run.feeder
    ev = np.concatenate(feeder.event_ms) if feeder.event_ms else np.zeros(0, np.int64)
    want = _expected_per_window(ev)
    exact = {e: final.get(e, {}).get("n_reports") == c for e, c in want.items()}
    wins = sorted(e for e in first if run.t_feed * 1000 < e <= run.t_fed * 1000)
    lat_first = [first[e]["latency_s"] for e in wins]
    lat_final = [final[e]["latency_s"] for e in wins]
    mem_summary = _memory_summary(run)
    res: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "command": " ".join(run.cmd),
        "beam_args": beam_args,
        "without_late_drop": ns.without_late_drop,
        "exit_code": run.rc,
        "seconds_fed": run.t_fed - run.t_feed,
        "rate_reports_per_s": ns.rate,
        "window_s": WINDOW_S,
        "files_fed": feeder.files,
        "feeder_max_behind_s": feeder.behind_s,
        "reports_fed": int(len(ev)),
        "reports_counted_in_final_panes": int(sum(p["n_reports"] for p in final.values())),
        "windows_expected": len(want),
        "windows_exact": int(sum(exact.values())),
        "all_windows_exact": bool(exact) and all(exact.values()),
        "job_start_to_feed_s": run.t_feed - run.t_start,
        "feed_end_to_job_end_s": run.t_end - run.t_fed,
        "latency_first_pane_s": _latency_stats(lat_first),
        "latency_final_pane_s": _latency_stats(lat_final),
        "latency_first_pane_by_tenth": _by_tenth(lat_first),
        "memory": mem_summary,
        "memory_total_first_minute_mib": sum(v["first_minute_mean_mib"] or 0 for v in mem_summary.values()),
        "memory_total_last_minute_mib": sum(v["last_minute_mean_mib"] or 0 for v in mem_summary.values()),
        "windows": _window_rows(first, final, want),
        "memory_series": run.memory,
        "t_feed": run.t_feed - run.t_start,
        "t_fed": run.t_fed - run.t_start,
    }
    return res, wins, lat_first, lat_final


def _print_summary(res: dict[str, Any]) -> None:
    lat = res["latency_first_pane_s"]
    print(
        f"soak: fed {res['reports_fed']:,} reports over {res['seconds_fed']:.0f} s in {res['files_fed']} "
        f"files; counted {res['reports_counted_in_final_panes']:,}; windows exact {res['windows_exact']}/"
        f"{res['windows_expected']}; latency first pane median {lat['median']} s p95 {lat['p95']} s; "
        f"memory total {res['memory_total_first_minute_mib']:.0f} MiB (first minute) -> "
        f"{res['memory_total_last_minute_mib']:.0f} MiB (last minute); exit {res['exit_code']}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv, beam_args = _split_beam_args(sys.argv[1:] if argv is None else list(argv))
    ns = _parser().parse_args(argv)
    run = _run_soak(ns, beam_args, _cluster_run_dir(ns))
    res, wins, lat_first, lat_final = _result(ns, beam_args, run)
    _print_summary(res)
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(res, indent=1) + "\n")
    if ns.png:
        _plot(ns.png, res, wins, lat_first, lat_final, run.t_start)
    return res


def _plot(png: Path, res: dict[str, Any], wins, lat_first, lat_final, t_start: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    x = [e / 1000.0 - t_start for e in wins]
    a1.plot(x, lat_first, ".", label="first pane")
    a1.plot(x, lat_final, ".", label="final pane", alpha=0.6)
    a1.set_ylabel("window end -> pane written (s)")
    a1.set_ylim(bottom=0)
    a1.legend()
    a1.set_title(
        f"soak: {res['rate_reports_per_s']} reports/s for {res['seconds_fed']:.0f} s, "
        f"{res['window_s']} s windows"
    )
    mem = res["memory_series"]
    t = [r["t"] for r in mem]
    for c in sorted({k for r in mem for k in r if k != "t"}):
        a2.plot(t, [r.get(c, 0) / 2**20 for r in mem], label=c)
    a2.axvspan(res["t_feed"], res["t_fed"], color="0.9", zorder=0)
    a2.set_xlabel("seconds since the job was launched (grey: feeding)")
    a2.set_ylabel("RSS (MiB)")
    a2.set_ylim(bottom=0)
    a2.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
