"""Store write retries and failure reporting, without a job: the retry loop's backoff and
bound, which errors are retried, the sink's status records and its one-line summary, and the sink
(``transforms.store.WriteToStore``) in a Beam pipeline against a locked SQLite store (released during the
retries: every pane written; held past the bound: every pane recorded as failed) and a deleted one
(never re-created). The jobs with real outages are in tests/test_store_outage.py."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

import apache_beam as beam
import psycopg
import pytest

from ldp.aggregate import WindowInfo
from ldp.kinds.frequency.aggregate import EstimateRow
from ldp.task import WindowConfig, parse_task
from store import StoreLost, StoreUnavailable, call_with_retry, is_transient, open_store
from transforms.store import StoreStatus, WriteToStore, read_store_status

TASK = parse_task({"task_id": "t-retry", "mechanism": "olh", "epsilon": 1.0, "domain_size": 4})


class _Flaky:
    def __init__(self, failures: int, exc: BaseException) -> None:
        self.failures, self.exc, self.calls = failures, exc, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return "done"


def test_retries_back_off_exponentially_and_succeed():
    slept: list[float] = []
    fn = _Flaky(4, sqlite3.OperationalError("database is locked"))
    assert call_with_retry(fn, 60, sleep=slept.append, on_retry=lambda *a: None) == "done"
    assert fn.calls == 5 and slept == [0.1, 0.2, 0.4, 0.8]


def test_the_delay_is_capped_and_the_bound_ends_the_retries():
    slept: list[float] = []
    fn = _Flaky(10**6, StoreUnavailable("store 'x' is unreachable: refused"))
    clock = [0.0]

    def sleep(s: float) -> None:  # a fake clock: the bound is on time.monotonic, so advance it for real
        slept.append(s)
        clock[0] += s
        if clock[0] > 1.0:
            raise TimeoutError("fake bound reached")

    with pytest.raises(TimeoutError):
        call_with_retry(fn, 3600, sleep=sleep, on_retry=lambda *a: None, max_delay_s=0.4)
    assert slept[:4] == [0.1, 0.2, 0.4, 0.4]  # doubling, capped at max_delay_s
    with pytest.raises(StoreUnavailable):  # a zero bound: the first error is final
        call_with_retry(_Flaky(1, StoreUnavailable("down")), 0, sleep=slept.append)


def test_only_transient_errors_are_retried():
    assert is_transient(sqlite3.OperationalError("database is locked"))
    assert is_transient(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert is_transient(StoreUnavailable("unreachable"))
    assert not is_transient(StoreLost("deleted"))
    assert not is_transient(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert not is_transient(ValueError("a bug"))
    slept: list[float] = []
    fn = _Flaky(1, StoreLost("store file 'x' was deleted while the job ran"))
    with pytest.raises(StoreLost):
        call_with_retry(fn, 60, sleep=slept.append)
    assert fn.calls == 1 and slept == []


def _write_status(directory, events):
    os.makedirs(directory, exist_ok=True)
    for i, evs in enumerate(events):
        with open(os.path.join(directory, f"{i}.jsonl"), "w") as fh:
            for kind, key, state, error, ms in evs:
                ev = {"kind": kind, "key": key, "state": state, "error": error, "ms": ms}
                fh.write(json.dumps(ev) + "\n")


def test_status_records_count_panes_once_and_in_flight_ones_as_failed(tmp_path):
    d = tmp_path / "status"
    _write_status(d, [
        [("pane", [1], "start", None, 1), ("pane", [1], "ok", None, 2),    # written
         ("pane", [2], "start", None, 3), ("pane", [2], "retrying", "locked", 4)],  # cut off while retrying
        [("pane", [1], "start", None, 5), ("pane", [1], "ok", None, 6),    # a retried bundle: once
         ("pane", [3], "start", None, 7), ("pane", [3], "failed", "down", 8),
         ("final", [9], "start", None, 9), ("final", [9], "failed", "down", 9),
         ("counts", [0], "start", None, 9), ("counts", [0], "ok", None, 9)],
    ])  # fmt: skip
    st = read_store_status(str(d))
    got = (st.panes, st.panes_written, st.failed_panes, st.failed_finals, st.failed_counts)
    assert got == (3, 1, 2, 1, 0)
    assert st.error == "down" and st.failed
    assert (st.in_flight, st.gave_up) == (1, 2)  # pane 2 still retrying; pane 3 and final 9 given up
    assert st.line() == (
        "store write failed: down; 1 of 3 panes written; 1 window(s) not marked final; rerun with --overwrite"
    )
    _write_status(tmp_path / "s2", [[("pane", [2], "start", None, 1), ("pane", [2], "retrying", "x", 2)]])
    st2 = read_store_status(str(tmp_path / "s2"))
    assert st2.failed_panes == 1 and st2.error == "the job ended before the store took every write (x)"
    assert read_store_status(str(tmp_path / "none")) == StoreStatus()


def _pane(start_s: int, pane: int = 0):
    row = EstimateRow(
        task_id=TASK.task_id, schema_version=2, group=0, window_start=start_s * 1000,
        window_end=(start_s + 10) * 1000, pane_timing="ON_TIME", pane_index=pane, is_last_pane=False,
        n_reports=100, mechanism="olh", epsilon=1.0, domain_size=4, postprocess="base",
        frequencies=[0.1, 0.2, 0.3, 0.4], std=[0.01] * 4,
    )  # fmt: skip
    return (TASK.task_id, WindowInfo(start_ms=start_s * 1000, end_ms=(start_s + 10) * 1000, pane_index=pane,
                                     pane_timing="ON_TIME"), [row])  # fmt: skip


def _run_sink(url: str, status: str, retry_s: float, run_id: str | None = "r1", n: int = 3) -> None:
    w = WindowConfig(size_s=10)
    with beam.Pipeline() as p:
        panes = p | beam.Create([_pane(10 * i) for i in range(n)])
        {"panes": panes} | WriteToStore(url, TASK, w, streaming=False, run_id=run_id, retry_s=retry_s,
                                        status_dir=status)  # fmt: skip


def _locker(db: str, release: threading.Event, locked: threading.Event) -> threading.Thread:
    def hold() -> None:
        conn = sqlite3.connect(db, timeout=5, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(120)
        conn.execute("ROLLBACK")
        conn.close()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert locked.wait(10)
    return t


def _retrying_seen(status: str) -> bool:
    for name in os.listdir(status) if os.path.isdir(status) else []:
        with open(os.path.join(status, name)) as fh:
            if any(json.loads(line)["state"] == "retrying" for line in fh if line.strip()):
                return True
    return False


def test_sink_waits_out_a_lock_released_during_its_retries(tmp_path):
    """The lock is released only once the sink has failed once and is retrying: every pane is written."""
    db, status = str(tmp_path / "e.db"), str(tmp_path / "status")
    url = f"sqlite:///{db}"
    with open_store(url, shared=False) as s:
        s.begin_run("r1", TASK.task_id)
    release, locked = threading.Event(), threading.Event()
    t = _locker(db, release, locked)

    def unlock_when_retrying() -> None:
        deadline = time.monotonic() + 60
        while not _retrying_seen(status) and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()

    threading.Thread(target=unlock_when_retrying, daemon=True).start()
    _run_sink(url, status, retry_s=4)  # one try waits a quarter of the bound on the lock
    t.join(10)
    st = read_store_status(status)
    assert _retrying_seen(status)  # the sink did meet the lock
    assert (st.panes, st.panes_written, st.failed_panes, st.failed_finals) == (3, 3, 0, 0), st
    with open_store(url, shared=False) as s:
        wins = s.windows(TASK.task_id)
        assert len(wins) == 3 and all(w["is_final"] == 1 and w["run_id"] == "r1" for w in wins)


def test_sink_records_every_pane_failed_when_the_lock_outlasts_the_bound(tmp_path):
    db, status = str(tmp_path / "e.db"), str(tmp_path / "status")
    url = f"sqlite:///{db}"
    with open_store(url, shared=False) as s:
        s.begin_run("r1", TASK.task_id)
    release, locked = threading.Event(), threading.Event()
    t = _locker(db, release, locked)
    try:
        _run_sink(url, status, retry_s=1)
    finally:
        release.set()
        t.join(10)
    st = read_store_status(status)
    assert (st.panes, st.panes_written, st.failed_panes) == (3, 0, 3)
    assert st.line().startswith("store write failed: OperationalError: database is locked; 0 of 3 panes")
    with open_store(url, shared=False) as s:
        assert s.windows(TASK.task_id) == []


def test_sink_never_recreates_a_deleted_sqlite_store(tmp_path):
    db, status = str(tmp_path / "e.db"), str(tmp_path / "status")
    url = f"sqlite:///{db}"
    with open_store(url, shared=False) as s:
        s.begin_run("r1", TASK.task_id)
    for f in os.listdir(tmp_path):
        if f.startswith("e.db"):
            os.remove(tmp_path / f)
    _run_sink(url, status, retry_s=30)  # StoreLost is not retried: no 30 s wait
    st = read_store_status(status)
    assert (st.panes_written, st.failed_panes) == (0, 3) and "does not exist" in st.error
    assert not os.path.exists(db)
    with pytest.raises(StoreLost, match="does not exist"):
        open_store(url, create=False, must_exist=True, shared=False)


def test_a_writer_notices_its_file_deleted_or_replaced(tmp_path):
    db = str(tmp_path / "e.db")
    s = open_store(db, shared=False)
    s.begin_run("r1", TASK.task_id)
    os.replace(db, db + ".moved")
    with pytest.raises(StoreLost, match="was deleted while the job ran"):
        s.heartbeat("r1")
    with open_store(db, shared=False) as other:  # a new file at the same path
        other.create_schema()
    with pytest.raises(StoreLost, match="was replaced by another file"):
        s.heartbeat("r1")
    s.close()
    fresh = open_store(db, create=False, must_exist=True, shared=False)
    with pytest.raises(StoreLost, match="no longer holds run r1"):
        fresh.check_run("r1")
    fresh.close()
