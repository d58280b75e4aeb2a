"""Harness of the chain test (tests/test_chain.py): components as child processes stopped by PID, and
clients that count what the collector acknowledged.

* :class:`Component` -- one command in its own process group (``start_new_session``), its output in a log
  file; :meth:`Component.kill9` sends SIGKILL to the group (a Beam job's workers and runner die with it),
  :meth:`Component.stop` SIGTERM to the process; nothing is ever stopped by name.
* :class:`Clients` -- threads that each post Avro requests of a shuffled task's reports, with event times
  of the moment (rounded down to the task's ``time_precision_s``), through :func:`pipelines.clients.
  post_reports` (an ``Idempotency-Key`` per request, retries with backoff). Every request acknowledged
  with 200 is kept (its key, reports and time); some are sent a second time with the same key on purpose
  (a client that lost the answer), and the answer must say ``duplicate``.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import REPO_ROOT, venv_env


class Component:
    """One command run as a child process in its own process group; output in ``log_dir/NAME-K.log``."""

    def __init__(self, name: str, cmd: list[str], log_dir: Path) -> None:
        self.name, self.cmd, self.log_dir = name, cmd, log_dir
        self.proc: subprocess.Popen | None = None
        self.logs: list[Path] = []
        self.started = 0

    def start(self, cmd: list[str] | None = None) -> Component:
        if cmd is not None:
            self.cmd = cmd
        self.started += 1
        log = self.log_dir / f"{self.name}-{self.started}.log"
        self.logs.append(log)
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                self.cmd, cwd=REPO_ROOT, env=venv_env(), stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL to the whole process group, then reaps the process."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM to the process; its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def log(self, k: int = -1) -> str:
        return self.logs[k].read_text(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            if not self.alive():
                return False
            time.sleep(0.2)
        return False

    def cleanup(self) -> None:
        """Kills what is still running (the test's finally)."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()


def python_cmd(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def wait_healthy(port: int, comp: Component, timeout_s: float = 60) -> None:
    """Until the collector on ``port`` answers ``GET /healthz`` with 200 (fails when it exits)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
            if ok:
                return
        except OSError:
            pass
        assert comp.alive(), f"{comp.name} exited: {comp.log()[-2000:]}"
        assert time.monotonic() < deadline, f"{comp.name} did not become healthy"
        time.sleep(0.1)


@dataclass
class Acked:
    """One acknowledged request: its key, its reports' event time (ms, rounded) and OLH seeds, and the
    oracle's reports (for the expected estimates)."""

    key: str
    event_ms: int
    seeds: np.ndarray
    reports: Any


@dataclass
class ClientLog:
    acked: list[Acked] = field(default_factory=list)
    duplicates_acked: int = 0
    failed: list[str] = field(default_factory=list)


class Clients:
    """``n`` client threads, each posting ``requests`` Avro requests of ``per_request`` reports, one every
    ``gap_s`` seconds, event time now rounded down to ``precision_s``; every ``repeat_every``-th request is
    sent again with the same key after its answer."""

    def __init__(self, task: Any, url: str, *, n: int, requests: int, per_request: int, gap_s: float,
                 precision_s: int, seed: int, repeat_every: int = 7) -> None:  # fmt: skip
        self.task, self.url = task, url
        self.n, self.requests, self.per_request, self.gap_s = n, requests, per_request, gap_s
        self.precision_ms = precision_s * 1000
        self.repeat_every = repeat_every
        self.seeds = np.random.SeedSequence(seed).spawn(n)
        self.logs = [ClientLog() for _ in range(n)]
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout_s: float) -> None:
        for t in self.threads:
            t.join(timeout=timeout_s)
            assert not t.is_alive(), "a client is still posting"

    def _run(self, i: int) -> None:
        from pipelines.clients import CollectorRefused, post_reports
        from wire.records import encode_report_container, reports_to_records

        rng = np.random.default_rng(self.seeds[i])
        oracle = self.task.make_oracle()
        log = self.logs[i]
        t0 = time.monotonic()
        for k in range(self.requests):
            time.sleep(max(0.0, t0 + k * self.gap_s - time.monotonic()))
            values = rng.integers(0, self.task.domain_size, self.per_request)
            reports = oracle.encode(values, rng=rng)
            event = int(time.time() * 1000) // self.precision_ms * self.precision_ms
            recs = reports_to_records(self.task.task_id, reports, np.full(self.per_request, event), 0,
                                      schema_version=self.task.schema_version)  # fmt: skip
            body = encode_report_container(recs)
            key = os.urandom(16).hex()
            retry = {"retries": 14, "backoff_s": 0.2, "max_backoff_s": 2.0, "timeout_s": 10.0}
            try:
                answer = post_reports(self.url, body, key=key, **retry)
            except CollectorRefused as exc:  # not acknowledged: its reports may or may not be written
                log.failed.append(f"request {k}: {exc}")
                continue
            assert answer["accepted"] == self.per_request, answer
            log.acked.append(Acked(key, event, np.array([r["seed"] for r in recs]), reports))
            if k % self.repeat_every == self.repeat_every - 1:  # the answer "lost": the same request again
                try:
                    again = post_reports(self.url, body, key=key, **retry)
                    if again.get("duplicate") and again["accepted"] == self.per_request:
                        log.duplicates_acked += 1
                    else:
                        log.failed.append(f"request {k} repeated with its key: answered {again}")
                except CollectorRefused as exc:
                    log.failed.append(f"request {k} repeated: {exc}")

    @property
    def acked(self) -> list[Acked]:
        return [a for log in self.logs for a in log.acked]

    @property
    def failed(self) -> list[str]:
        return [f for log in self.logs for f in log.failed]

    @property
    def duplicates(self) -> int:
        return sum(log.duplicates_acked for log in self.logs)
