"""Store outages end to end: jobs whose store goes away while they run.

* PostgreSQL, streaming (a watched directory on the DirectRunner's FnApiRunner): the server is stopped
  (immediate shutdown) as soon as the job has begun its run, and started again 3 s after the sink's first
  failed write; the job ends with every window in the store, final, equal to its estimate files.
* PostgreSQL, streaming and batch: the server stays down; the job exits 1 with the one-line summary.
* SQLite, streaming: the file is deleted after the run began: exit 1, and no new file.

Each test runs the job in a subprocess (exit status and stderr as an operator sees them). The PostgreSQL
tests use a server of their own (:class:`RestartablePostgres`: initdb in a temporary directory, 127.0.0.1,
runuser nobody when root, stopped by PID), not the session's shared one, since they stop it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import POSTGRES_BIN_DEFAULT, REPO_ROOT, venv_env

import simulator
from ldp.aggregate import from_iso
from ldp.task import parse_task
from store import open_store
from wire.records import now_ms

pytestmark = pytest.mark.integration  # every test runs a job in a subprocess

TASK_ID = "outage"
#: The one line a job prints when a store write failed for good.
FAILURE_LINE = r"error: store write failed: .*; \d+ of \d+ panes written; .*rerun with --overwrite"


class RestartablePostgres:
    """A PostgreSQL 15 server on a fixed 127.0.0.1 port that can be stopped and started again."""

    def __init__(self) -> None:
        bindir = Path(os.environ.get("LDP_PG_BIN", POSTGRES_BIN_DEFAULT))
        self.initdb, self.postgres = bindir / "initdb", bindir / "postgres"
        if not (self.initdb.is_file() and self.postgres.is_file()):
            self._unavailable(f"no PostgreSQL server binaries in {bindir} (set LDP_PG_BIN)")
        self.tmp = tempfile.mkdtemp(prefix="ldp-pg-outage-")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            import pwd

            runuser = shutil.which("runuser")
            if runuser is None:
                self._unavailable("running as root and no runuser to start PostgreSQL as nobody")
            nobody = pwd.getpwnam("nobody")
            os.chown(self.tmp, nobody.pw_uid, nobody.pw_gid)
            self.as_user = [runuser, "-u", "nobody", "--"]
        self.data = os.path.join(self.tmp, "data")
        init = subprocess.run(
            [*self.as_user, str(self.initdb), "-D", self.data, "-U", "ldp", "--auth=trust", "-E", "UTF8",
             "--no-sync"], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if init.returncode != 0:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._unavailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-200:]}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://ldp@127.0.0.1:{self.port}/postgres"
        self.proc: subprocess.Popen | None = None
        self.log = open(os.path.join(self.tmp, "postgres.log"), "ab")  # noqa: SIM115 - closed in close()

    @staticmethod
    def _unavailable(reason: str) -> None:
        if os.environ.get("LDP_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"LDP_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)

    def start(self) -> None:
        import psycopg

        self.proc = subprocess.Popen(
            [*self.as_user, str(self.postgres), "-D", self.data, "-h", "127.0.0.1", "-p", str(self.port),
             "-k", self.tmp, "-c", "fsync=off", "-c", "full_page_writes=off"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start within 60 s; see {self.log.name}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Immediate shutdown (SIGQUIT to the postmaster: every connection is cut, like a crash)."""
        if self.proc is None:
            return
        pid_file = os.path.join(self.data, "postmaster.pid")
        if os.path.exists(pid_file):
            with open(pid_file, encoding="utf-8") as fh:
                pid = int(fh.readline().strip())
            try:
                os.kill(pid, signal.SIGQUIT)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture
def pg():
    server = RestartablePostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


def _inputs(tmp_path: Path, *, now: bool) -> None:
    task = parse_task({"task_id": TASK_ID, "mechanism": "olh", "epsilon": 1.0, "domain_size": 32})
    (tmp_path / "task.json").write_text(task.to_json())
    start = (now_ms() // 2000) * 2000 if now else 1_767_225_600_000
    simulator.simulate_files(task, 6_000, "zipf", tmp_path / "in", seed=7, files=3, start_ms=start,
                            duration_s=6.0 if now else 600.0)  # fmt: skip


def _job(tmp_path: Path, store: str, *, streaming: bool, retry_s: float) -> subprocess.Popen:
    args = [sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"),
            "--input", str(tmp_path / "in" / "*.avro"), "--output", str(tmp_path / "out"),
            "--store", store, "--store_retry_s", str(retry_s), "--log_level", "WARNING"]  # fmt: skip
    if streaming:
        args += ["--streaming", "--window_size", "2", "--watch_interval", "0.5", "--streaming_duration", "3"]
    else:
        args += ["--window_size", "120"]
    return subprocess.Popen(args, cwd=str(REPO_ROOT), env=venv_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


class _Lines(threading.Thread):
    """Collects a process's stderr lines; ``wait_for(text)`` blocks until one contains ``text``."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.lines, self.cond = stream, [], threading.Condition()
        self.start()

    def run(self) -> None:
        for line in self.stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, *texts: str, timeout: float) -> bool:
        """Until a line holds every one of ``texts``."""
        with self.cond:
            return self.cond.wait_for(
                lambda: any(all(t in x for t in texts) for x in self.lines), timeout=timeout
            )


def _wait_for_run(url: str, timeout: float = 60.0) -> None:
    """Until the job has begun its run in the store (``ldp_runs`` has a row, and then ``ldp_tasks``: the
    last write of the job's start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open_store(url, create=False, shared=False, must_exist=True) as s:
                if s.runs(TASK_ID) and s.task(TASK_ID) is not None:
                    return
        except Exception:  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.05)
    raise AssertionError("the job never began its run in the store")


def _estimate_files(out: Path) -> list[dict]:
    rows = []
    for f in sorted(glob.glob(str(out / "estimates-*.jsonl"))):
        with open(f) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


@pytest.mark.postgres
def test_streaming_job_survives_a_postgres_restart(tmp_path, pg):
    """The server is down from just after the run began until 3 s after the sink's first failed write:
    the retries (60 s bound) carry every pane through; every window is in the store, final, and equal to
    its estimate file (exactly: the same floats)."""
    _inputs(tmp_path, now=True)
    proc = _job(tmp_path, pg.url, streaming=True, retry_s=60)
    lines = _Lines(proc.stderr)
    try:
        _wait_for_run(pg.url)
        pg.stop()
        assert lines.wait_for("store: pane", "failed (try 1)", timeout=90), "\n".join(lines.lines)
        time.sleep(3.0)
        pg.start()
        assert proc.wait(timeout=120) == 0, "\n".join(lines.lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines.join(timeout=10)
    files = _estimate_files(tmp_path / "out")
    assert len(files) >= 3  # 6 s of reports in 2 s windows
    with open_store(pg.url, create=False, shared=False) as s:
        wins = s.windows(TASK_ID)
        assert len(wins) == len(files)
        assert all(w["is_final"] == 1 for w in wins)
        for rec in files:
            cur = s.current(TASK_ID, from_iso(rec["window_start"]), from_iso(rec["window_end"]))
            assert [r["estimate"] for r in cur] == rec["frequencies"]
            assert {(r["n_reports"], r["is_final"]) for r in cur} == {(rec["n_reports"], 1)}
        (run,) = s.runs(TASK_ID)
        assert (run["status"], run["panes_written"], run["failed_panes"]) == ("ended", len(files), 0)
        assert sum(c["accepted"] for c in s.counts(TASK_ID)) == 6_000


@pytest.mark.postgres
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "batch"])
def test_a_permanent_postgres_outage_fails_the_job_in_one_line(tmp_path, pg, streaming):
    _inputs(tmp_path, now=streaming)
    proc = _job(tmp_path, pg.url, streaming=streaming, retry_s=2)
    try:
        _wait_for_run(pg.url)
        pg.stop()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    errors = [x for x in err.splitlines() if "error:" in x]
    assert len(errors) == 1, err
    line = errors[0]
    assert re.search(FAILURE_LINE, line), line
    assert "0 of " in line and "unreachable" in line
    summary = json.loads((tmp_path / "out" / "counts.json").read_text()) if not streaming else None
    if summary is not None:
        assert summary["store_failed_panes"] == summary["store"]["panes"] > 0
    pg.start()
    with open_store(pg.url, create=False, shared=False) as s:
        (run,) = s.runs(TASK_ID)
        assert run["status"] == "live"  # its end could not be recorded; the heartbeat stopped: dead soon


def test_streaming_job_whose_sqlite_store_is_deleted_fails(tmp_path):
    _inputs(tmp_path, now=True)
    db = tmp_path / "store" / "e.db"
    proc = _job(tmp_path, f"sqlite:///{db}", streaming=True, retry_s=60)
    try:
        _wait_for_run(f"sqlite:///{db}")
        for f in glob.glob(str(db) + "*"):
            os.remove(f)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    errors = [x for x in err.splitlines() if "error:" in x]
    assert len(errors) == 1, err
    line = errors[0]
    assert "store write failed: store file" in line and "was deleted while the job ran" in line, line
    assert "0 of " in line
    assert not db.exists()  # never silently re-created
