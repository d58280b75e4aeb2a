"""``--watch_ticks=flink`` without a cluster: the flags checked up front (one-line errors), the ticks'
payload, and the drain's protocol against a fake Flink REST API and a fake clock (no sleeping, no timing).
The real thing -- the Java ticks on the session cluster, checkpoints, failover, drain -- is
tests/test_flink_cluster.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_pipeline_frequency import _fails

from transforms.flink_ticks import FlinkRest, FlinkRestError, FlinkTicks, run_draining

BEAM_JOB = "BeamApp-root-1201-abcd_0f1e2d3c-aaaa-bbbb"


class FakeRest(FlinkRest):
    """Flink's REST API as a script: job states over (fake) time, drain requests and savepoint states."""

    def __init__(
        self, clock: list[float], states: list[tuple[float, str]], savepoints: list[tuple[str, Any]]
    ):
        super().__init__("127.0.0.1:1")
        self.clock, self.states, self.savepoints = clock, states, list(savepoints)
        self.drains: list[tuple[float, str, str | None]] = []
        self.tasks_at = 0.0  # when the last task (SDK harness up) runs

    def _state(self) -> str | None:
        now = self.clock[0]
        current = None
        for t, st in self.states:
            if t <= now:
                current = st
        return current

    def _call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        st = self._state()
        if path == "/jobs/overview":
            jobs = [{"jid": "other", "name": "someone-else", "state": "RUNNING", "start-time": 5}]
            if st is not None:
                jobs.append({"jid": "j1", "name": BEAM_JOB.rsplit("_", 1)[0], "state": st, "start-time": 1})
            return {"jobs": jobs}
        if path == "/jobs/j1":
            task = st if self.clock[0] >= self.tasks_at or st != "RUNNING" else "DEPLOYING"
            return {"vertices": [{"status": "FINISHED"}, {"status": task or "CREATED"}]}
        if path == "/jobs/j1/stop":
            assert body is not None and body["drain"] is True
            self.drains.append((self.clock[0], st or "", body.get("targetDirectory")))
            return {"request-id": f"t{len(self.drains)}"}
        if path.startswith("/jobs/j1/savepoints/"):
            status, failure = self.savepoints.pop(0)
            if status == "COMPLETED" and failure is None:
                self.states.append((self.clock[0], "FINISHED"))
            return {"status": {"id": status}, "operation": {"failure-cause": failure} if failure else {}}
        raise AssertionError(f"unexpected call {path}")


class FakeResult:
    def __init__(self) -> None:
        self.waited = False

    def wait_until_finish(self, duration: int | None = None) -> str:
        self.waited = True
        return "DONE"


def _drive(rest: FakeRest, clock: list[float], duration: float, **kw) -> FakeResult:
    def sleep(s: float) -> None:
        clock[0] += max(s, 1e-3)

    result = FakeResult()
    run_draining(result, BEAM_JOB, rest, duration, sleep=sleep, clock=lambda: clock[0], **kw)
    return result


def test_the_drain_comes_a_duration_after_the_job_first_runs():
    clock = [0.0]
    rest = FakeRest(clock, [(3.0, "CREATED"), (7.0, "RUNNING")], [("IN_PROGRESS", None), ("COMPLETED", None)])
    result = _drive(rest, clock, 60.0, savepoint_dir="file:///sp")
    assert len(rest.drains) == 1
    t, state, target = rest.drains[0]
    assert 67.0 <= t < 67.6 and state == "RUNNING" and target == "file:///sp"  # 60 s after RUNNING at 7 s
    assert result.waited


def test_the_duration_starts_once_every_task_runs():
    clock = [0.0]
    rest = FakeRest(clock, [(2.0, "RUNNING")], [("COMPLETED", None)])
    rest.tasks_at = 12.0  # the job is RUNNING at 2 s, its SDK harnesses are up at 12 s
    _drive(rest, clock, 10.0)
    assert 22.0 <= rest.drains[0][0] < 22.6


def test_a_failover_does_not_restart_the_duration_and_the_drain_waits_for_the_restarted_job():
    clock = [0.0]
    states = [(1.0, "RUNNING"), (20.0, "RESTARTING"), (61.0, "RESTARTING"), (75.0, "RUNNING")]
    rest = FakeRest(clock, states, [("COMPLETED", None)])
    _drive(rest, clock, 30.0)
    t, state, _ = rest.drains[0]
    assert state == "RUNNING" and 75.0 <= t < 75.6  # due at 31 s, sent once the job runs again


def test_a_failed_savepoint_is_retried():
    clock = [0.0]
    rest = FakeRest(
        clock, [(0.0, "RUNNING")], [("COMPLETED", "java.lang.Exception: task failed"), ("COMPLETED", None)]
    )
    _drive(rest, clock, 5.0)
    assert len(rest.drains) == 2


def test_a_job_that_never_runs_is_an_error_naming_it():
    clock = [0.0]
    rest = FakeRest(clock, [], [])
    with pytest.raises(FlinkRestError, match="was not running after 20 s"):
        _drive(rest, clock, 5.0, start_timeout_s=20.0)


def test_a_job_that_ended_by_itself_is_not_drained():
    clock = [0.0]
    rest = FakeRest(clock, [(0.0, "FAILED")], [])
    result = _drive(rest, clock, 5.0)
    assert rest.drains == [] and result.waited


def test_an_embedded_mini_cluster_has_no_rest_endpoint():
    with pytest.raises(FlinkRestError, match="no REST endpoint"):
        FlinkRest("[local]")


def test_an_unreachable_rest_endpoint_is_one_clear_error():
    with pytest.raises(FlinkRestError, match="unreachable"):
        FlinkRest("127.0.0.1:1", timeout_s=2).job_for(BEAM_JOB)


def test_ticks_payload_and_bad_arguments():
    t = FlinkTicks(1.5, 4.0, "127.0.0.1:9")
    assert (t.period_ms, t.lag_ms) == (1500, 4000)
    with pytest.raises(ValueError, match="at least 1 ms"):
        FlinkTicks(0.0001, 0, "127.0.0.1:9")
    with pytest.raises(ValueError, match="lag must be >= 0"):
        FlinkTicks(1, -1, "127.0.0.1:9")
    with pytest.raises(ValueError, match="HOST:PORT"):
        FlinkTicks(1, 0, "nowhere")


# ------------------------------------------------------------------------------------------------------------
# the flags, checked before anything is built
# ------------------------------------------------------------------------------------------------------------


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    task = {"task_id": "t", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4}
    (tmp_path / "task.json").write_text(json.dumps(task))
    return ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"),
            "--output", str(tmp_path / "out"), *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--streaming", "--watch_ticks=flink"), "needs --runner=FlinkRunner or PortableRunner"),
        (
            (
                "--streaming",
                "--watch_ticks=flink",
                "--runner=PortableRunner",
                "--flink_master=127.0.0.1:8081",
            ),
            "needs --ticks_expansion_service=HOST:PORT",
        ),
        (
            ("--streaming", "--watch_ticks=flink", "--runner=FlinkRunner", "--ticks_expansion_service=h:1"),
            "needs --flink_master=HOST:PORT",
        ),
        (
            ("--streaming", "--ticks_expansion_service=h:1"),
            "--ticks_expansion_service needs --watch_ticks=flink",
        ),
        (("--streaming", "--flink_savepoint_dir=/x"), "--flink_savepoint_dir needs --watch_ticks=flink"),
        (("--streaming", "--watch_ticks=fast"), "invalid choice: 'fast'"),
    ],
)
def test_watch_ticks_flags_are_checked_up_front(tmp_path, capsys, extra, message):
    _fails(capsys, _argv(tmp_path, *extra), re.escape(message))
    assert not (tmp_path / "out").exists()  # refused before anything was created
