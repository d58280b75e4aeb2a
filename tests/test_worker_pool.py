"""tools/flink/worker_pool.py: harness processes are kept per task-manager connection, because the task
managers' worker ids collide (each counts its own: both ask for ``4-1``). Driven without gRPC or real
processes: a fake ``Popen`` and a fake call context carrying the peer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker import worker_pool_main

SPEC = importlib.util.spec_from_file_location(
    "ldp_worker_pool", Path(__file__).resolve().parents[1] / "tools" / "flink" / "worker_pool.py"
)
worker_pool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(worker_pool)


class FakeProc:
    count = 0

    def __init__(self, command, **_kw) -> None:
        FakeProc.count += 1
        self.pid = FakeProc.count
        self.command = command

    def poll(self):
        return None


class Ctx:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@pytest.fixture
def pool(monkeypatch):
    killed: list[int] = []
    monkeypatch.setattr(worker_pool_main.subprocess, "Popen", FakeProc)
    monkeypatch.setattr(worker_pool, "kill_process_gracefully", lambda proc: killed.append(proc.pid))
    p = worker_pool.PerConnectionWorkerPool(use_process=True, state_cache_size=0)
    p.killed = killed
    return p


def _start(pool, worker_id: str, peer: str, control: str) -> int:
    req = beam_fn_api_pb2.StartWorkerRequest(worker_id=worker_id)
    req.control_endpoint.url = control
    assert not pool.StartWorker(req, Ctx(peer)).error
    return max(p.pid for p in pool.processes())


def _stop(pool, worker_id: str, peer: str) -> None:
    pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id=worker_id), Ctx(peer))


def test_two_task_managers_with_the_same_worker_id_each_stop_their_own(pool):
    a = _start(pool, "4-1", "ipv4:127.0.0.1:50001", "localhost:45869")
    b = _start(pool, "4-1", "ipv4:127.0.0.1:50002", "localhost:42695")
    assert len(pool.processes()) == 2  # Beam's servicer would have forgotten the first
    _stop(pool, "4-1", "ipv4:127.0.0.1:50002")
    assert pool.killed == [b]  # not task manager A's harness, still running its stage
    _stop(pool, "4-1", "ipv4:127.0.0.1:50001")
    assert pool.killed == [b, a] and pool.processes() == []


def test_a_stop_over_a_new_connection_stops_the_only_process_of_that_id(pool):
    a = _start(pool, "5-1", "ipv4:127.0.0.1:50001", "localhost:1")
    _stop(pool, "5-1", "ipv4:127.0.0.1:59999")
    assert pool.killed == [a]


def test_an_ambiguous_stop_stops_nothing(pool):
    _start(pool, "6-1", "ipv4:127.0.0.1:50001", "localhost:1")
    _start(pool, "6-1", "ipv4:127.0.0.1:50002", "localhost:2")
    _stop(pool, "6-1", "ipv4:127.0.0.1:59999")
    assert pool.killed == [] and len(pool.processes()) == 2
    _stop(pool, "7-7", "ipv4:127.0.0.1:50001")  # an id never started: nothing
    assert pool.killed == []
