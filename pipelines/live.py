"""Building blocks of the live local path (docs/live.md): feeding reports to a streaming job while it runs,
starting the job and its runner as a child process group, and watching the panes it writes.

Used by ``pipelines.dashboard_demo`` (``./run_local.sh dashboard``) and ``bench.live_latency``.

* :class:`FileFeeder` writes one Avro report file every ``file_interval_s`` seconds into a watched
  directory (event time = the time of writing; written as ``.part`` and renamed, the watched-directory
  contract of docs/pipelines.md);
* :class:`PubSubFeeder` publishes the same population to a Pub/Sub topic (``pipelines.simulate.publish``,
  event time = publish time, carried in the ``event_time`` attribute);
* :class:`ChildJob` runs a command in its own process group (the job and whatever runner processes it
  starts: the Prism binary, a Flink job server) and stops that group, and nothing else;
* :class:`PaneWatcher` records when each ``(window, pane)`` of ``OUT/estimates-*.jsonl`` first appears
  (fileio writes a pane to a temporary file and renames it, so a visible file is complete).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp.task import Task
from pipelines.simulate import publish
from simulator import make_population, parse_iso8601_ms
from wire.records import encode_report_container, reports_to_records, write_report_file

__all__ = ["FileFeeder", "PubSubFeeder", "ChildJob", "PaneWatcher", "Pane", "latency_summary"]


class _Feeder:
    """A daemon thread feeding reports until :meth:`stop` or ``duration_s`` (counts in ``sent``)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._end = threading.Event()
        #: set once the last report was sent (a Pub/Sub feeder then sends keep-alive messages)
        self.reports_done = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def start(self) -> _Feeder:
        self._thread = threading.Thread(target=self._guarded, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the owner (``error``)
            self.error = exc
        finally:
            self.reports_done.set()
            self.finished.set()

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._end.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def end_reports(self) -> None:
        """Stops sending reports now (a Pub/Sub feeder goes on with its keep-alive messages until
        :meth:`stop`)."""
        self._end.set()


class FileFeeder(_Feeder):
    """Writes ``rate`` reports/s of ``task``'s simulated clients as one Avro file every ``file_interval_s``
    seconds into ``directory`` (``part-NNNNNN.avro``, event time = now), for ``duration_s`` seconds."""

    def __init__(
        self,
        task: Task,
        directory: str | Path,
        *,
        rate: float,
        duration_s: float,
        file_interval_s: float = 1.0,
        dataset: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if rate <= 0 or duration_s <= 0 or file_interval_s <= 0:
            raise ValueError("rate, duration and file interval must be positive")
        self.task, self.directory = task, Path(directory)
        self.rate, self.duration_s, self.file_interval_s = rate, duration_s, file_interval_s
        self.dataset, self.seed = dataset, seed
        self.files = 0

    def _run(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        per_file = max(1, int(round(self.rate * self.file_interval_s)))
        n_files = max(1, int(round(self.duration_s / self.file_interval_s)))
        pop = make_population(self.task, per_file * n_files, self.dataset, seed=self.seed)
        bounds = np.arange(0, per_file * (n_files + 1), per_file, dtype=np.int64)
        t0 = time.time()
        for k, chunk in pop.chunks(bounds):
            wait = t0 + k * self.file_interval_s - time.time()
            if wait > 0 and self._end.wait(wait):
                return
            if self._end.is_set():
                return
            n = len(chunk.reports)
            now = int(time.time() * 1000)
            recs = reports_to_records(
                self.task.task_id, chunk.reports, np.full(n, now), chunk.groups,
                schema_version=self.task.schema_version,
            )  # fmt: skip
            final = self.directory / f"part-{k:06d}.avro"
            tmp = self.directory / f".part-{k:06d}.avro.part"
            with open(tmp, "wb") as fh:
                write_report_file(fh, recs)
            os.replace(tmp, final)  # the watch never sees a half-written file
            self.sent += n
            self.files += 1


class PubSubFeeder(_Feeder):
    """Publishes ``rate`` reports/s of ``task``'s simulated clients to ``topic`` for ``duration_s`` seconds
    or until :meth:`end_reports` (``pipelines.simulate.publish``; ``PUBSUB_EMULATOR_HOST`` must be set),
    then an empty keep-alive message every second until stopped (so a DirectRunner job's Pub/Sub
    watermark keeps moving and its last windows close)."""

    def __init__(
        self,
        task: Task,
        topic: str,
        *,
        rate: float,
        duration_s: float,
        message_size: int = 1000,
        dataset: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if rate <= 0 or duration_s <= 0:
            raise ValueError("rate and duration must be positive")
        self.task, self.topic, self.rate, self.duration_s = task, topic, rate, duration_s
        self.message_size, self.dataset, self.seed = message_size, dataset, seed

    def _run(self) -> None:
        from google.cloud import pubsub_v1

        users = max(1, int(self.rate * self.duration_s))
        clock = _EndableClock(self._end)
        try:
            publish(
                self.task, users, self.dataset, self.topic, seed=self.seed, rate=self.rate,
                message_size=self.message_size, clock=clock,
            )  # fmt: skip
            self.sent = users
        except _EndOfReports:  # ended early: the reports of the messages published so far
            self.sent = min(users, int(self.rate * (time.time() - clock.t0)))
        self.reports_done.set()
        publisher = pubsub_v1.PublisherClient()
        empty = encode_report_container([])
        while not self._stop.wait(1.0):
            publisher.publish(self.topic, empty, event_time=str(int(time.time() * 1000))).result(timeout=60)


class _EndOfReports(Exception):
    pass


class _EndableClock:
    """``time``-like clock for ``simulate.publish`` whose ``sleep`` raises :class:`_EndOfReports` once
    ``end`` is set (the publisher paces every message with it)."""

    def __init__(self, end: threading.Event) -> None:
        self.end = end
        self.t0 = time.time()

    @staticmethod
    def time() -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if self.end.wait(max(0.0, seconds)):
            raise _EndOfReports


class ChildJob:
    """A command run in its own session (process group), output to ``log_path``; :meth:`stop` sends
    SIGINT, then SIGTERM, then SIGKILL to that group only."""

    def __init__(self, cmd: Sequence[str], log_path: str | Path, env: dict[str, str] | None = None) -> None:
        self.cmd = list(cmd)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - the child's stdout/stderr while it runs
        self.proc = subprocess.Popen(
            self.cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )  # fmt: skip
        self.pid = self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 15.0) -> int | None:
        """Stops the child's process group (by the child's PID, which is the group id)."""
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            self.wait(wait)
        try:  # runner processes the job left behind in its group (a Prism or Java child)
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()
        return self.proc.poll()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclasses.dataclass(frozen=True)
class Pane:
    """One pane file seen: window bounds (epoch ms), pane index and timing, reports, when first seen."""

    window_start_ms: int
    window_end_ms: int
    pane_index: int
    pane_timing: str
    n_reports: int
    seen_s: float
    path: str

    @property
    def latency_s(self) -> float:
        """Seconds from the window's end to the pane's appearance (negative for early panes)."""
        return self.seen_s - self.window_end_ms / 1000.0


class PaneWatcher:
    """Polls ``output``'s ``estimates-*.jsonl`` every ``poll_s`` seconds in a daemon thread and records the
    first time each pane file is seen (``panes``: list of :class:`Pane`, in order of appearance)."""

    def __init__(self, output: str | Path, poll_s: float = 0.2, prefix: str = "estimates") -> None:
        self.pattern = os.path.join(str(output), f"{prefix}-*.jsonl")
        self.poll_s = poll_s
        self.panes: list[Pane] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="PaneWatcher", daemon=True)
        self.on_pane: Callable[[Pane], None] | None = None

    def start(self) -> PaneWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.scan()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.scan()

    def scan(self) -> None:
        now = time.time()
        for path in sorted(glob.glob(self.pattern)):
            if path in self._seen:
                continue
            self._seen.add(path)
            pane = _read_pane(path, now)
            if pane is not None:
                self.panes.append(pane)
                if self.on_pane is not None:
                    self.on_pane(pane)


def _read_pane(path: str, seen_s: float) -> Pane | None:
    n = 0
    first: dict[str, Any] | None = None
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                first = first or rec
                n += int(rec.get("n_reports", 0))
    if first is None or first.get("window_end") is None:
        return None  # the global window has no end to measure from
    return Pane(
        parse_iso8601_ms(first["window_start"]), parse_iso8601_ms(first["window_end"]),
        int(first.get("pane_index", 0)), str(first.get("pane_timing", "UNKNOWN")), n, seen_s, path,
    )  # fmt: skip


def latency_summary(panes: Sequence[Pane], window_ends_ms: Sequence[int] | None = None) -> dict[str, Any]:
    """Per window: the first pane at or after its end that is not EARLY (its on-time pane; a LATE pane when
    the on-time one was empty or dropped) and its latency; the first pane holding all of the window's
    reports (accumulating panes: the most reports of any of its panes) and its latency; the early panes
    seen before the end.

    ``window_ends_ms``: the windows to summarize (default: every window seen). A window among them with
    no such pane counts in ``missing``."""
    by_window: dict[int, list[Pane]] = {}
    for p in panes:
        by_window.setdefault(p.window_end_ms, []).append(p)
    ends = sorted(by_window) if window_ends_ms is None else sorted(window_ends_ms)
    rows, lat, missing, full = [], [], [], []
    for end in ends:
        ps = sorted(by_window.get(end, []), key=lambda p: p.seen_s)
        early = [p for p in ps if p.pane_timing == "EARLY"]
        on_time = next((p for p in ps if p.pane_timing != "EARLY"), None)
        most = max((p.n_reports for p in ps), default=0)
        complete = next((p for p in ps if p.n_reports == most), None)
        row = {
            "window_end_ms": end,
            "panes": len(ps),
            "early_panes": len(early),
            "early_before_end": sum(1 for p in early if p.latency_s < 0),
            "first_pane_latency_s": round(ps[0].latency_s, 3) if ps else None,
            "on_time_latency_s": None if on_time is None else round(on_time.latency_s, 3),
            "on_time_timing": None if on_time is None else on_time.pane_timing,
            "complete_latency_s": None if complete is None else round(complete.latency_s, 3),
            "n_reports": most,
        }
        rows.append(row)
        if complete is not None:
            full.append(complete.latency_s)
        if on_time is None:
            missing.append(end)
        else:
            lat.append(on_time.latency_s)
    lat_sorted = sorted(lat)
    return {
        "windows": len(ends),
        "with_on_time_pane": len(lat),
        "missing": len(missing),
        "on_time_latency_s_median": round(float(np.median(lat_sorted)), 3) if lat else None,
        "on_time_latency_s_max": round(max(lat_sorted), 3) if lat else None,
        "on_time_latency_s_min": round(min(lat_sorted), 3) if lat else None,
        "complete_latency_s_median": round(float(np.median(full)), 3) if full else None,
        "complete_latency_s_max": round(max(full), 3) if full else None,
        "early_panes_per_window_median": (
            float(np.median([r["early_before_end"] for r in rows])) if rows else None
        ),
        "per_window": rows,
    }
