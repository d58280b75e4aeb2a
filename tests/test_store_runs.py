"""Runs in the latest-state store: each job's run (``ldp_runs``: id, task, status,
heartbeat), a second live run of a task refused (unless asked for; a stale heartbeat counts as dead),
counts per run, the schema migration from version 1, and the batch job's run id, summary and refusal
(one line, exit status 2). The store tests run on SQLite and PostgreSQL (``store_url`` of test_store)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from test_pipeline_frequency import _fails  # one-line CLI errors, exit status 2
from test_store import store_url  # noqa: F401 - the SQLite / PostgreSQL fixture
from test_store_sink import _args, _frequency_setup

from pipelines import frequency
from store import SCHEMA_VERSION, RunConflict, StoreError, StoreLost, now_ms, open_store


@pytest.fixture
def store(store_url: str):  # noqa: F811
    s = open_store(store_url, shared=False)
    yield s
    s.close()


class TestRuns:
    def test_a_second_live_run_of_a_task_is_refused(self, store):
        assert store.begin_run("r1", "t", streaming=True, output="/o") == []
        with pytest.raises(RunConflict, match=r"task 't' already has a live run r1 .*allow_concurrent"):
            store.begin_run("r2", "t")
        assert store.run("r2") is None
        assert store.begin_run("r3", "other-task") == []  # another task: no conflict
        assert [r["run_id"] for r in store.live_runs("t")] == ["r1"]
        store.end_run("r1", "ended", panes_written=4, failed_panes=0, summary={"counts": {"read": 3}})
        assert store.begin_run("r2", "t") == []  # the first one ended
        r1 = store.run("r1")
        assert (r1["status"], r1["panes_written"], r1["summary"], r1["streaming"]) == (
            "ended", 4, {"counts": {"read": 3}}, 1
        )  # fmt: skip
        assert r1["ended_ms"] >= r1["started_ms"]

    def test_a_run_with_a_stale_heartbeat_is_dead(self, store):
        store.begin_run("old", "t")
        with store._b.transaction() as cur:  # its launcher stopped beating 10 minutes ago
            cur.execute("UPDATE ldp_runs SET heartbeat_ms = ? WHERE run_id = 'old'", (now_ms() - 600_000,))
        assert store.live_runs("t") == []
        assert store.begin_run("new", "t") == []
        assert store.run("old")["status"] == "dead"
        before = store.run("new")["heartbeat_ms"]
        store.heartbeat("new")
        assert store.run("new")["heartbeat_ms"] >= before

    def test_concurrent_runs_when_allowed_keep_their_counts_apart(self, store):
        store.begin_run("a", "t")
        others = store.begin_run("b", "t", allow_concurrent=True)
        assert [o["run_id"] for o in others] == ["a"]
        store.write_counts("t", 0, 60_000, {"read": 10, "accepted": 10}, run_id="a", written_ms=1)
        store.write_counts("t", 0, 60_000, {"read": 7, "accepted": 5}, run_id="b", written_ms=2)
        assert [(c["run_id"], c["read"]) for c in store.counts("t")] == [("b", 7)]  # the latest run's
        assert [(c["run_id"], c["read"]) for c in store.counts("t", run_id="a")] == [("a", 10)]
        assert store.counts("nothing") == []

    def test_a_store_without_the_run_is_lost(self, store):
        with pytest.raises(StoreLost, match="no longer holds run gone"):
            store.check_run("gone")
        with pytest.raises(ValueError):
            store.end_run("x", "live")


#: The version-1 layout of the tables version 2 changed (ldp_meta, ldp_panes, ldp_windows, ldp_counts).
_V1 = (
    "CREATE TABLE ldp_meta (key TEXT PRIMARY KEY, value TEXT)",
    "INSERT INTO ldp_meta VALUES ('schema_version', '1')",
    "CREATE TABLE ldp_panes (task_id TEXT NOT NULL, output TEXT NOT NULL, "
    "window_start BIGINT NOT NULL, window_end BIGINT NOT NULL, grp BIGINT NOT NULL, "
    "pane_index INTEGER NOT NULL, pane_timing TEXT NOT NULL, is_final SMALLINT NOT NULL, "
    "n_reports BIGINT NULL, written_ms BIGINT NOT NULL, n_items BIGINT NULL, stored_items BIGINT NULL, "
    "extra_json TEXT NULL, PRIMARY KEY (task_id, output, window_start, window_end, grp, pane_index))",
    "CREATE TABLE ldp_windows (task_id TEXT NOT NULL, window_start BIGINT NOT NULL, "
    "window_end BIGINT NOT NULL, last_pane_index INTEGER NOT NULL, last_pane_timing TEXT NOT NULL, "
    "is_final SMALLINT NOT NULL, n_reports BIGINT NULL, first_written_ms BIGINT NOT NULL, "
    "last_written_ms BIGINT NOT NULL, final_ms BIGINT NULL, "
    "PRIMARY KEY (task_id, window_start, window_end))",
    "CREATE TABLE ldp_counts (task_id TEXT NOT NULL, window_start BIGINT NOT NULL, "
    "window_end BIGINT NOT NULL, read BIGINT NOT NULL, accepted BIGINT NOT NULL, "
    "rejected BIGINT NOT NULL, lost BIGINT NOT NULL, late_dropped BIGINT NOT NULL, reasons_json TEXT, "
    "written_ms BIGINT NOT NULL, PRIMARY KEY (task_id, window_start, window_end))",
    "INSERT INTO ldp_windows VALUES ('t', 0, 60000, 1, 'ON_TIME', 1, 500, 10, 20, 30)",
    "INSERT INTO ldp_counts VALUES ('t', 0, 60000, 510, 500, 10, 0, 0, '{\"bad\": 10}', 40)",
)


def test_a_version_1_store_is_migrated_in_place(store_url):  # noqa: F811
    if store_url.startswith("sqlite"):
        conn = sqlite3.connect(store_url[len("sqlite:///") :])
        for stmt in _V1:
            conn.execute(stmt)
        conn.commit()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            for stmt in _V1:
                conn.execute(stmt)
    s = open_store(store_url, shared=False)
    assert s._b.query("SELECT value FROM ldp_meta") == [{"value": SCHEMA_VERSION}]
    (c,) = s.counts("t")
    assert (c["run_id"], c["read"], c["accepted"], c["reasons"]) == ("", 510, 500, {"bad": 10})
    (w,) = s.windows("t")
    assert (w["is_final"], w["n_reports"], w["run_id"]) == (1, 500, None)
    s.begin_run("r", "t")  # the new tables are there
    s.write_counts("t", 0, 60_000, {"read": 1, "accepted": 1, "rejected": 0}, run_id="r")
    assert len(s._b.query("SELECT * FROM ldp_counts")) == 2
    s.close()
    with open_store(store_url, shared=False) as again:  # idempotent
        assert len(again.counts("t", run_id="")) == 1


def test_a_store_of_a_newer_version_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/e.db"
    with open_store(url, shared=False) as s, s._b.transaction() as cur:
        cur.execute("UPDATE ldp_meta SET value = '4' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"holds schema version '4'; this code writes '3'"):
        open_store(url, shared=False)


# ------------------------------------------------------------------------------------------------------------
# the batch job's run
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_batch_job_records_its_run_and_refuses_a_second_live_run(tmp_path, capsys):
    _frequency_setup(tmp_path, users=2_000)
    url = f"sqlite:///{tmp_path}/e.db"
    summary = frequency.run(_args(tmp_path, "out", "--store", url))
    err = capsys.readouterr().err
    run_id = summary["run_id"]
    assert f"run: {run_id}" in err and summary["store_failed_panes"] == 0
    assert summary["store"]["panes"] == summary["store"]["panes_written"] == 1
    assert json.loads((tmp_path / "out" / "counts.json").read_text())["run_id"] == run_id
    assert not (tmp_path / "out" / ".store_status").exists()  # removed after a run that wrote everything
    s = open_store(url, shared=False)
    (run,) = s.runs("store-e2e")
    got = (run["run_id"], run["status"], run["panes_written"], run["failed_panes"])
    assert got == (run_id, "ended", 1, 0)
    assert s.run(run_id)["summary"]["counts"] == summary["counts"]
    assert {c["run_id"] for c in s.counts("store-e2e")} == {run_id}
    assert s.windows("store-e2e")[0]["run_id"] == run_id
    # another job of the task is live on the store: a second one is refused before anything is written
    s.begin_run("live-elsewhere", "store-e2e")
    line = _fails(capsys, _args(tmp_path, "out2", "--store", url), r"--store: task 'store-e2e' already has a "
                  r"live run live-elsewhere .*--store_allow_concurrent_runs")  # fmt: skip
    assert "live-elsewhere" in line and not (tmp_path / "out2").exists()
    # ... unless asked for: its counts are its own
    second = frequency.run(_args(tmp_path, "out3", "--store", url, "--store_allow_concurrent_runs"))
    assert second["run_id"] != run_id
    assert [c["run_id"] for c in s.counts("store-e2e")] == [second["run_id"]]
    assert [c["read"] for c in s.counts("store-e2e", run_id=run_id)] == [summary["counts"]["read"]]
    assert s.run("live-elsewhere")["status"] == "live" and s.run(second["run_id"])["status"] == "ended"
    s.close()


def test_store_retry_flag_is_checked_up_front(tmp_path, capsys):
    _frequency_setup(tmp_path, users=500)
    _fails(capsys, _args(tmp_path, "o1", "--store", "x.db", "--store_retry_s", "-1"), r"--store_retry_s")
    _fails(capsys, _args(tmp_path, "o2", "--store", "x.db", "--store_retry_s", "inf"), r"--store_retry_s")
