"""The store across a job's restart (store, transforms.store): what a run killed with SIGKILL leaves
and what the next run on the same store does with it.

* A killed run is dead at once: a live run whose launching process has ended (same kernel boot and pid
  namespace, no process with its pid and start time, or a zombie) no longer blocks the next run; a run on
  another machine (or whose process still runs, or a pid reused by a later process) is judged as before.
  The identities are forged: a pid that does not exist, the test's own pid with another start time, another
  boot id.
* A restarted run's panes of a window replace the killed run's whole (every output and group, a group only
  the killed run had included), at indexes after the killed run's; retries are idempotent; a window the
  killed run made final is closed to later runs (nothing written, counted ``panes_after_final``).

Every test runs on SQLite and, marked ``postgres``, on a throw-away PostgreSQL 15 (tests/test_store.py's
``store_url`` fixture).
"""

from __future__ import annotations

import json
import os

import pytest
from test_store import _est, store_url  # noqa: F401 - the fixture, parametrized over both databases

from store import RunConflict, WindowFinal, open_store
from store.store import _proc_stat, _this_kernel, process_gone, process_identity
from transforms.store import read_store_status


def _set_proc(s, run_id: str, proc: str | None) -> None:
    with s._b.transaction() as cur:
        cur.execute("UPDATE ldp_runs SET proc = ? WHERE run_id = ?", (proc, run_id))


def _status(s, run_id: str) -> str:
    return s.run(run_id)["status"]


def _unused_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def test_process_identity_names_this_process_and_judges_forgeries():
    me = process_identity()
    assert me is not None and me.startswith(_this_kernel() + f"/{os.getpid()}/")
    assert process_gone(me) is False
    start = _proc_stat(os.getpid())[1]
    assert process_gone(f"{_this_kernel()}/{os.getpid()}/{start + 1}") is True  # the pid, reused later
    assert process_gone(f"{_this_kernel()}/{_unused_pid()}/{start}") is True  # ended (SIGKILL or not)
    other_boot = "00000000-0000-0000-0000-000000000000/" + _this_kernel().split("/")[1]
    assert process_gone(f"{other_boot}/{_unused_pid()}/1") is False  # another machine: cannot tell
    for bad in (None, "", "garbage", f"{_this_kernel()}/x/y"):
        assert process_gone(bad) is False


def test_a_run_whose_process_ended_is_dead_at_once(store_url):  # noqa: F811
    with open_store(store_url, shared=False) as s:
        s.begin_run("killed", "t")
        _set_proc(s, "killed", f"{_this_kernel()}/{_unused_pid()}/12345")  # its process is gone
        assert s.live_runs("t") == []  # read only: not marked yet
        assert _status(s, "killed") == "live"
        assert s.begin_run("restarted", "t") == []  # no conflict, heartbeat only seconds old
        assert _status(s, "killed") == "dead" and _status(s, "restarted") == "live"
        assert s.run("restarted")["proc"] == process_identity()


def test_a_run_whose_process_runs_or_cannot_be_judged_still_blocks(store_url):  # noqa: F811
    with open_store(store_url, shared=False) as s:
        s.begin_run("alive", "t")  # this very process: alive
        with pytest.raises(RunConflict, match=r"already has a live run alive"):
            s.begin_run("second", "t")
        other = "00000000-0000-0000-0000-000000000000/1/1/1"  # another machine's process
        _set_proc(s, "alive", other)
        with pytest.raises(RunConflict):
            s.begin_run("second", "t")
        _set_proc(s, "alive", None)  # a run recorded before the column existed: the heartbeat decides
        with pytest.raises(RunConflict):
            s.begin_run("second", "t")
        assert [r["run_id"] for r in s.live_runs("t")] == ["alive"]


def _current(s, start: int = 0) -> list[tuple]:
    return [
        (r["grp"], r["item"], r["n_reports"], r["pane_index"])
        for r in s._b.query(
            "SELECT grp, item, n_reports, pane_index FROM ldp_current WHERE window_start = ? "
            "ORDER BY grp, item",
            (start,),
        )
    ]


def _window(s, start: int = 0) -> dict:
    (w,) = s._b.query("SELECT * FROM ldp_windows WHERE window_start = ?", (start,))
    return w


def test_a_restarted_run_replaces_the_killed_runs_window_whole(store_url):  # noqa: F811
    with open_store(store_url, shared=False) as s:
        s.begin_run("a", "t")
        # the killed run: two accumulating panes of window 0 (groups 0 and 1), one pane of window 60 s
        s.write_pane("t", 0, 60_000, 0, "EARLY", [_est([0.5, 0.5], n=100), _est([0.1, 0.9], group=1, n=40)],
                     run_id="a")  # fmt: skip
        s.write_pane("t", 0, 60_000, 1, "ON_TIME", [_est([0.4, 0.6], n=150)], run_id="a")
        s.write_pane("t", 60_000, 120_000, 0, "ON_TIME", [_est([0.3, 0.7], start=60_000, end=120_000)],
                     run_id="a")  # fmt: skip
        assert s.mark_final("t", 60_000, 120_000)
        assert _current(s) == [(0, 0, 150, 1), (0, 1, 150, 1), (1, 0, 40, 0), (1, 1, 40, 0)]

        s.begin_run("b", "t", allow_concurrent=True)
        # the restarted run recomputes window 0 from every input: its first pane is pane 0 of ITS run
        s.write_pane("t", 0, 60_000, 0, "EARLY", [_est([0.45, 0.55], n=120)], run_id="b")
        assert _current(s) == [(0, 0, 120, 2), (0, 1, 120, 2)]  # group 1 (only run a had it) is gone
        w = _window(s)
        assert (w["last_pane_index"], w["n_reports"], w["run_id"], w["is_final"]) == (2, 120, "b", 0)
        (pane,) = s._b.query("SELECT extra_json, run_id FROM ldp_panes WHERE pane_index = 2")
        assert json.loads(pane["extra_json"])["run_pane_index"] == 0 and pane["run_id"] == "b"
        again = s._b.query("SELECT * FROM ldp_history ORDER BY pane_index, grp, item")
        s.write_pane("t", 0, 60_000, 0, "EARLY", [_est([0.45, 0.55], n=120)], run_id="b")  # a retried bundle
        assert s._b.query("SELECT * FROM ldp_history ORDER BY pane_index, grp, item") == again
        s.write_pane("t", 0, 60_000, 1, "ON_TIME", [_est([0.42, 0.58], n=190)], run_id="b")
        assert _current(s) == [(0, 0, 190, 3), (0, 1, 190, 3)]
        panes = s._b.query("SELECT pane_index, grp, run_id FROM ldp_panes WHERE window_start = 0 "
                           "ORDER BY pane_index, grp")  # fmt: skip
        assert [(p["pane_index"], p["grp"], p["run_id"]) for p in panes] == [
            (0, 0, "a"), (0, 1, "a"), (1, 0, "a"), (2, 0, "b"), (3, 0, "b")
        ]  # fmt: skip - both runs' panes kept in the history

        # the window run a made final is closed to run b: nothing of the pane is written
        before = s._b.query("SELECT * FROM ldp_current WHERE window_start = 60000 ORDER BY item")
        with pytest.raises(WindowFinal, match=r"made final by run a"):
            s.write_pane("t", 60_000, 120_000, 0, "ON_TIME",
                         [_est([0.9, 0.1], start=60_000, end=120_000, n=5)], run_id="b")  # fmt: skip
        assert s._b.query("SELECT * FROM ldp_current WHERE window_start = 60000 ORDER BY item") == before
        assert len(s._b.query("SELECT * FROM ldp_panes WHERE window_start = 60000")) == 1

        # a third run comes after both
        s.begin_run("c", "t", allow_concurrent=True)
        s.write_pane("t", 0, 60_000, 0, "ON_TIME", [_est([0.4, 0.6], n=200)], run_id="c")
        assert _current(s) == [(0, 0, 200, 4), (0, 1, 200, 4)]
        assert s.mark_final("t", 0, 60_000) and _window(s)["is_final"] == 1


def test_writes_without_a_run_keep_the_pane_index(store_url):  # noqa: F811
    with open_store(store_url, shared=False) as s:
        s.write_pane("t", 0, 60_000, 3, "ON_TIME", [_est([0.5, 0.5])])
        s.write_pane("t", 0, 60_000, 1, "EARLY", [_est([0.2, 0.8])])  # older: history only
        assert _current(s) == [(0, 0, 1000, 3), (0, 1, 1000, 3)]


def test_the_status_counts_panes_after_final(tmp_path):
    d = tmp_path / "status"
    d.mkdir()
    events = [
        {"kind": "pane", "key": ["t", 0, 60000, 0], "state": "start"},
        {"kind": "pane", "key": ["t", 0, 60000, 0], "state": "ok"},
        {"kind": "pane_after_final", "key": ["t", 0, 60000, 0], "state": "ok", "error": "closed"},
    ]
    (d / "1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    st = read_store_status(str(d))
    assert (st.panes, st.panes_written, st.panes_after_final, st.failed) == (1, 1, 1, False)
