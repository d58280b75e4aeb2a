"""The HTTP collector (pipelines.collect, pipelines.collector): requests -> checked reports -> rolling Avro
files with ``.done`` markers, all or nothing per request, nothing of the request kept but the reports.

The fast tests run the server in a thread of this process on a free 127.0.0.1 port; the ``subprocess``
tests (integration tier) run ``python -m pipelines.collect`` and the frequency job on its output.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from conftest import venv_env

import schemas
from ldp.task import load_task
from pipelines import collect
from pipelines.collector import (
    AVRO_TYPE,
    JSON_TYPE,
    LOCK_NAME,
    Collector,
    RequestError,
    RollingAvroWriter,
    make_checker,
    report_to_json,
)
from wire.records import encode_report_container, reports_to_records

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


# ---- helpers ---------------------------------------------------------------------------------------------
class Server:
    """The collector served by a thread of this process (its own event loop); :meth:`stop` sets the stop
    event, waits for the thread and returns the final counts."""

    def __init__(self, task_path: Path, out: Path, **options: Any) -> None:
        task = load_task(task_path)
        writer_opts = {k: options.pop(k) for k in ("roll_reports", "roll_seconds") if k in options}
        self.tick_s = options.pop("tick_s", 1.0)
        self.out = out
        checker = make_checker(task)
        writer = RollingAvroWriter(out, permute=checker.shuffled, **writer_opts)
        self.collector = Collector(checker, writer, **options)
        self.port = 0
        self.stats: dict[str, Any] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the collector did not start"

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(port: int) -> None:
                self.port = port
                self._ready.set()

            self.stats = await collect.serve(
                self.collector, "127.0.0.1", 0, stop=self._stop, ready=ready, tick_s=self.tick_s
            )

        asyncio.run(main())

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}")
        finally:
            conn.close()

    def post(self, body: bytes | dict | list, content_type: str = JSON_TYPE, **headers: str):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.request("POST", "/v1/reports", data, {"Content-Type": content_type, **headers})

    def metrics(self) -> dict[str, Any]:
        status, body = self.request("GET", "/metrics")
        assert status == 200
        return body

    def stop(self) -> dict[str, Any]:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert not self._thread.is_alive() and self.stats is not None
        return self.stats


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    """``serve(task_path, **options)`` -> a running :class:`Server` writing to ``tmp_path/out``."""
    servers: list[Server] = []

    def start(task_path: Path, **options: Any) -> Server:
        server = Server(task_path, tmp_path / f"out{len(servers)}", **options)
        servers.append(server)
        return server

    yield start
    for s in servers:
        if s._thread.is_alive():
            s.stop()


def raw_exchange(port: int, data: bytes) -> tuple[int, str, bytes]:
    """Sends raw bytes on a new connection and reads until the server closes it: (status, error, bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"], got


def make_records(task_path: Path, n: int, rng: np.random.Generator, **kw: Any) -> list[dict[str, Any]]:
    """``n`` reports of the task's oracle (random values) as Avro records, event times 1 s apart."""
    task = load_task(task_path)
    oracle = task.make_oracle()
    reports = oracle.encode(rng.integers(0, task.domain_size, n), rng=rng)
    return reports_to_records(task.task_id, reports, START_MS + 1000 * np.arange(n), 0, **kw)


def read_dir(out: Path) -> list[dict[str, Any]]:
    """Every report of the finished files of ``out``, in file-name order, in the JSON form."""
    recs = []
    for path in sorted(out.glob("*.avro")):
        with open(path, "rb") as fh:
            recs += [report_to_json(r) for r in fastavro.reader(fh)]
    return recs


def as_json(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [report_to_json(r) for r in records]


@pytest.fixture
def olh_task(frequency_task_file) -> Path:
    return frequency_task_file()


# ---- accepted reports -> files ---------------------------------------------------------------------------
def test_json_and_avro_reports_are_written_as_posted(serve, olh_task, rng):
    server = serve(olh_task)
    recs = make_records(olh_task, 151, rng)
    assert server.post(as_json(recs[:1])[0]) == (200, {"accepted": 1})
    assert server.post({"reports": as_json(recs[1:101])}) == (200, {"accepted": 100})
    assert server.post(encode_report_container(recs[101:]), AVRO_TYPE) == (200, {"accepted": 50})
    body = as_json(recs[:2])
    for r in body:  # absent payload members are null, absent group is 0
        for k in ("bits", "items", "reals", "client_id", "group"):
            del r[k]
    assert server.post({"reports": body}) == (200, {"accepted": 2})
    stats = server.stop()
    assert read_dir(server.out) == as_json(recs) + as_json(recs[:2])
    assert stats["received"] == stats["accepted"] == 4 and stats["rejected"] == 0
    assert stats["reports_accepted"] == stats["reports_written"] == 153 and stats["reports_open"] == 0
    files = sorted(p for p in server.out.iterdir() if p.name != LOCK_NAME)
    avro = [p for p in files if p.suffix == ".avro"]
    assert len(avro) == stats["files_written"] == 1
    assert [p.name for p in files] == [avro[0].name, avro[0].name + ".done"]  # no temporary file left
    assert json.loads((server.out / (avro[0].name + ".done")).read_text()) == {"reports": 153}


def test_bits_items_and_client_ids_round_trip(serve, frequency_task_file, rng):
    for mech, extra in (("oue", {"domain_size": 20}), ("ss", {"domain_size": 30})):
        task = frequency_task_file(f"{mech}.json", task_id=f"t-{mech}", mechanism=mech, **extra)
        server = serve(task)
        ids = [bytes([i + 1]) * (1 + i % 64) for i in range(40)]
        recs = make_records(task, 40, rng, client_ids=ids)
        body = as_json(recs)
        if mech == "oue":
            assert all(isinstance(r["bits"], str) for r in body)
        assert server.post({"reports": body}) == (200, {"accepted": 40})
        server.stop()
        assert read_dir(server.out) == body


def test_range_task_reports_of_every_group(serve, range_task_file, tmp_path):
    """A range task's groups validate with their own oracles; the first refused report is still named."""
    from simulator import simulate_files

    task = range_task_file(expected_users=600)
    simulate_files(load_task(task), 600, None, tmp_path / "sim", seed=5, files=1)
    with open(tmp_path / "sim" / "reports-00000-of-00001.avro", "rb") as fh:
        recs = as_json(list(fastavro.reader(fh)))
    assert len({r["group"] for r in recs}) > 1
    server = serve(task, max_batch=1000)
    bad = [dict(r) for r in recs[:300]]
    bad[211] = {**bad[211], "group": load_task(task).n_groups}
    status, got = server.post({"reports": bad})
    assert (status, got["error"], got["index"]) == (422, "invalid_group", 211)
    assert server.post({"reports": recs[:300]}) == (200, {"accepted": 300})
    assert server.post({"reports": recs[300:]}) == (200, {"accepted": 300})
    server.stop()
    assert read_dir(server.out) == recs


def test_shuffled_task_drops_client_ids(serve, frequency_task_file, rng):
    task = frequency_task_file(anonymity={"shuffled": True, "min_reports": 2})
    server = serve(task)
    recs = make_records(task, 100, rng, client_ids=[b"abc"] * 100)
    assert server.post({"reports": as_json(recs)}) == (200, {"accepted": 100})
    assert server.stop()["client_ids_dropped"] == 100
    stored = read_dir(server.out)
    assert [r["client_id"] for r in stored] == [None] * 100
    hour = 3_600_000  # the task's time_precision_s: event times rounded down, the file's order permuted
    sent = [{**r, "client_id": None, "event_time": r["event_time"] // hour * hour} for r in as_json(recs)]
    assert stored != sent  # arrival order kept: probability 1/100!
    assert sorted(stored, key=json.dumps) == sorted(sent, key=json.dumps)


def test_rolls_by_count_with_complete_files_and_markers(serve, olh_task, rng):
    server = serve(olh_task, roll_reports=10)
    recs = make_records(olh_task, 20, rng)
    for k in range(5):  # 4 reports a request: a file closes once it holds >= 10, after whole requests
        assert server.post({"reports": as_json(recs[4 * k : 4 * k + 4])})[0] == 200
    stats = server.stop()
    avro = sorted(server.out.glob("*.avro"))
    sizes = [json.loads(Path(f"{p}.done").read_text())["reports"] for p in avro]
    assert sizes == [12, 8] and stats["files_written"] == 2 and stats["reports_written"] == 20
    assert read_dir(server.out) == as_json(recs)
    assert [p.name for p in server.out.glob(".*")] == [LOCK_NAME]


def test_rolls_by_time(serve, olh_task, rng):
    server = serve(olh_task, roll_seconds=0.2, tick_s=0.05)
    assert server.post({"reports": as_json(make_records(olh_task, 3, rng))})[0] == 200
    deadline = time.monotonic() + 20
    while server.metrics()["files_written"] < 1:  # the roll happens on the server's next tick
        assert time.monotonic() < deadline, "no file was closed"
        time.sleep(0.05)
    m = server.metrics()
    assert m["reports_written"] == 3 and m["reports_open"] == 0
    assert len(list(server.out.glob("*.avro.done"))) == 1
    server.stop()
    assert len(list(server.out.glob("*.avro"))) == 1  # shutdown with no open file writes nothing more


# ---- refused requests ------------------------------------------------------------------------------------
def _report(**changes: Any) -> dict[str, Any]:
    """A valid OLH report of the default test task (task_id test-freq, d = 64) in the JSON form."""
    rep = {"task_id": "test-freq", "schema_version": 2, "event_time": START_MS, "group": 0, "value": 3,
           "seed": "-6406931151052310911", "bits": None, "items": None, "reals": None,
           "client_id": None}  # fmt: skip
    rep.update(changes)
    return {k: v for k, v in rep.items() if v is not _DROP}


_DROP = object()

#: (case, body, status, error): every refused report names a dead-letter reason of wire.records.
JSON_CASES = [
    ("not json", b"{not json", 400, "bad_json"),
    ("not utf-8", b'{"task_id": "\xff"}', 400, "bad_json"),
    ("nan", b'{"reports": [NaN]}', 400, "bad_json"),
    ("top-level array", [_report()], 400, "bad_batch"),
    ("batch member", {"reports": [_report()], "extra": 1}, 400, "bad_batch"),
    ("reports not a list", {"reports": {"a": 1}}, 400, "bad_batch"),
    ("empty batch", {"reports": []}, 400, "bad_batch"),
    ("too many reports", {"reports": [_report()] * 6}, 413, "too_many_reports"),
    ("not an object", {"reports": [_report(), 7]}, 422, "not_a_record"),
    ("wrong task", _report(task_id="other"), 422, "wrong_task"),
    ("task id not a string", _report(task_id=5), 422, "wrong_task"),
    ("schema version 1", _report(schema_version=1), 422, "wrong_schema_version"),
    ("schema version 2.0", _report(schema_version=2.0), 422, "wrong_schema_version"),
    ("unknown member", _report(raw_value=3), 422, "invalid_payload"),
    ("missing event time", _report(event_time=_DROP), 422, "missing_field"),
    ("missing task id", _report(task_id=_DROP), 422, "missing_field"),
    ("event time float", _report(event_time=START_MS + 0.5), 422, "invalid_event_time"),
    ("event time 2200", _report(event_time=7_258_118_400_000), 422, "invalid_event_time"),
    ("group out of range", _report(group=1), 422, "invalid_group"),
    ("group bool", _report(group=True), 422, "invalid_group"),
    ("value float", _report(value=3.0), 422, "invalid_payload"),
    ("value missing", _report(value=None), 422, "missing_field"),
    ("value out of domain", _report(value=10**6), 422, "out_of_domain"),
    ("seed a number", _report(seed=5), 422, "invalid_seed"),
    ("seed -0", _report(seed="-0"), 422, "invalid_seed"),
    ("seed leading zero", _report(seed="07"), 422, "invalid_seed"),
    ("seed plus", _report(seed="+7"), 422, "invalid_seed"),
    ("seed beyond int64", _report(seed="9223372036854775808"), 422, "invalid_seed"),
    ("unused bits", _report(bits="AA=="), 422, "invalid_payload"),
    ("client id not base64", _report(client_id="a b"), 422, "invalid_client_id"),
    ("client id unpadded", _report(client_id="YQ"), 422, "invalid_client_id"),
    ("client id empty", _report(client_id=""), 422, "invalid_client_id"),
    ("client id too long", _report(client_id=base64.b64encode(bytes(65)).decode()), 422, "invalid_client_id"),
]


@pytest.fixture
def refusing(serve, olh_task):
    """A collector with small limits (5 reports, 4096 bytes); after the test: nothing was written."""
    server = serve(olh_task, max_batch=5, max_body_bytes=4096)
    yield server
    stats = server.stop()
    assert stats["accepted"] == 0 and stats["reports_written"] == 0 and stats["rejected"] == stats["received"]
    assert [p.name for p in server.out.iterdir()] == [LOCK_NAME]


@pytest.mark.parametrize("case,body,status,error", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_bad_json_request_is_refused_whole(refusing, case, body, status, error):
    single = isinstance(body, dict) and "reports" not in body
    bodies = [(body, 0), ({"reports": [_report(), body]}, 1)] if single else [(body, 1)]
    for payload, index in bodies:  # a single report, and the same one second in a batch
        got_status, got = refusing.post(payload)
        assert (got_status, got["error"]) == (status, error), got
        assert got["detail"] and "\n" not in got["detail"]
        if status == 422:  # a refused report: its index in the request
            assert got["index"] == index
    assert refusing.metrics()["rejected_by"][error] >= 1


def test_first_refused_report_is_named(refusing, serve, olh_task):
    batch = [_report(event_time=START_MS + i) for i in range(5)]
    batch[3] = _report(value=10**6)
    status, got = refusing.post({"reports": batch})
    assert (status, got["error"], got["index"]) == (422, "out_of_domain", 3)
    batch[4] = _report(unknown=1)  # a later member-name problem: the earlier refusal is still the first
    assert refusing.post({"reports": batch})[1]["index"] == 3
    batch[1] = _report(unknown=1)
    assert refusing.post({"reports": batch})[1] == {
        "error": "invalid_payload", "detail": "report 1: 'unknown' is not a field of the report schema",
        "index": 1,
    }  # fmt: skip
    big = serve(olh_task, max_batch=1000)
    many = [_report(event_time=START_MS + i) for i in range(1000)]
    many[777] = _report(seed="x")
    status, got = big.post({"reports": many})
    assert (status, got["error"], got["index"]) == (422, "invalid_seed", 777)
    assert "decimal string" in got["detail"]
    assert big.stop()["reports_refused"] == 1000


def test_http_level_refusals(refusing, olh_task, rng):
    good = json.dumps(_report()).encode()
    cases = [
        ({"Content-Type": "text/plain"}, good, 415, "unsupported_media_type"),
        ({}, good, 415, "unsupported_media_type"),
        ({"Content-Type": "application/json; charset=latin-1"}, good, 415, "unsupported_media_type"),
        ({"Content-Type": JSON_TYPE, "Content-Encoding": "gzip"}, good, 415, "unsupported_media_type"),
        ({"Content-Type": AVRO_TYPE}, b"not avro at all", 400, "undecodable"),
    ]
    for headers, body, status, error in cases:
        got = refusing.request("POST", "/v1/reports", body, headers)
        assert (got[0], got[1]["error"]) == (status, error), (headers, got)
    recs = make_records(olh_task, 2, rng)
    deflated = encode_report_container(recs, codec="deflate")
    assert refusing.post(deflated, AVRO_TYPE)[1]["error"] == "undecodable"
    assert refusing.post(encode_report_container(recs * 3), AVRO_TYPE)[0] == 413
    other = {**schemas.load_schema("report")}
    other["fields"] = [*other["fields"], {"name": "raw_value", "type": "long", "default": 0}]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(other), [{**r, "raw_value": 9} for r in recs])
    assert refusing.post(buf.getvalue(), AVRO_TYPE)[1] == {
        "error": "invalid_payload", "detail": "report 0: 'raw_value' is not a field of the report schema",
        "index": 0,
    }  # fmt: skip
    # too large: refused from the Content-Length before any body byte, or once a chunked body passes the limit
    head = f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: {JSON_TYPE}\r\n"
    chunk = b"%x\r\n%s\r\n" % (3000, b" " * 3000)
    for raw in ((head + "Content-Length: 5000\r\n\r\n").encode(),
                (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunk * 2):  # fmt: skip
        assert raw_exchange(refusing.port, raw)[:2] == (413, "too_large")
    assert refusing.request("GET", "/v1/reports")[0] == 405
    assert refusing.request("POST", "/healthz", b"")[0] == 405
    assert refusing.request("GET", "/v2/reports") == (404, {
        "error": "not_found",
        "detail": "no such endpoint: POST /v1/reports, GET /healthz, GET /metrics, GET /metrics/prometheus",
    })  # fmt: skip
    assert refusing.request("GET", "/healthz") == (200, {"status": "ok"})


def test_nothing_of_the_request_is_kept(serve, olh_task, rng, caplog):
    caplog.set_level(logging.DEBUG)
    server = serve(olh_task)
    marks = {"User-Agent": "agent-5f1c", "X-Forwarded-For": "203.0.113.77", "Cookie": "sid=cookie-9e2a",
             "X-Client-Note": "note-77aa"}  # fmt: skip
    recs = make_records(olh_task, 3, rng)
    assert server.post({"reports": as_json(recs)}, **marks)[0] == 200
    assert server.post(_report(task_id="elsewhere"), **marks)[0] == 422
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:  # a malformed request
        s.sendall(b"POST /v1/reports HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
        s.recv(1024)
    server.stop()
    stored = b"".join(p.read_bytes() for p in server.out.iterdir())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for needle in [*marks.values(), "127.0.0.1", "User-Agent", "elsewhere"]:
        assert needle.encode() not in stored, needle
    for needle in [*marks.values(), "127.0.0.1", "Malformed"]:
        assert needle not in logged, (needle, logged)
    assert read_dir(server.out) == as_json(recs)


# ---- failures are loud -------------------------------------------------------------------------------------
def test_failed_write_answers_503_and_keeps_nothing_of_it(tmp_path, olh_task, rng, monkeypatch):
    """A write that fails (ENOSPC injected at ``os.pwrite``, the writer's one write call) is cut back and
    answered 503; the next write succeeds; only acknowledged reports are in the files."""
    from pipelines import collector as core

    writer = RollingAvroWriter(tmp_path / "out")
    collector = Collector(make_checker(load_task(olh_task)), writer)
    recs = make_records(olh_task, 8, rng)
    body = json.dumps({"reports": as_json(recs[:4])}).encode()
    assert collector.handle(JSON_TYPE, body) == (200, {"accepted": 4})
    real = os.pwrite

    def full(fd: int, data: Any, offset: int) -> int:
        real(fd, bytes(data[:7]), offset)  # a partial block, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(core.os, "pwrite", full)
    status, answer = collector.handle(JSON_TYPE, json.dumps({"reports": as_json(recs[4:6])}).encode())
    assert (status, answer["error"]) == (503, "unavailable") and collector.failed
    assert str(tmp_path) not in answer["detail"] and ".tmp" not in answer["detail"]
    monkeypatch.setattr(core.os, "pwrite", real)
    assert collector.handle(JSON_TYPE, json.dumps({"reports": as_json(recs[6:])}).encode())[0] == 200
    assert collector.failed is None
    stats = collector.close()
    assert stats.write_errors == 1 and stats.reports_accepted == stats.reports_written == 6
    assert read_dir(tmp_path / "out") == as_json(recs[:4] + recs[6:])  # the partial block was cut off


def test_publish_failure_is_loud_and_retried(tmp_path, olh_task, rng, monkeypatch):
    writer = RollingAvroWriter(tmp_path / "out")
    collector = Collector(make_checker(load_task(olh_task)), writer)
    body = json.dumps(as_json(make_records(olh_task, 1, rng))[0]).encode()
    assert collector.handle(JSON_TYPE, body)[0] == 200
    real = os.rename

    def no_rename(src: Any, dst: Any) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "rename", no_rename)
    stats = collector.close()
    assert stats.write_errors == 1 and stats.reports_written == 0 and collector.failed
    assert "1 reports wait in it" in collector.failed
    assert list((tmp_path / "out").glob("*.avro")) == []  # no file passes for complete
    assert len(list((tmp_path / "out").glob(".collect-*.tmp"))) == 1  # the acknowledged report is durable
    monkeypatch.setattr(os, "rename", real)
    stats = collector.close()  # the next roll publishes it
    assert stats.reports_written == 1 and len(read_dir(tmp_path / "out")) == 1


def test_batch_queries_task_is_refused(write_json):
    task = write_json("b.json", {"task_id": "b", "kind": "batch_queries", "mechanism": "identity",
                                 "epsilon": 1.0, "delta": 1e-6,
                                 "attributes": [{"name": "a", "domain_size": 4}]})  # fmt: skip
    with pytest.raises(ValueError, match="central DP"):
        make_checker(load_task(task))


# ---- as a process, and the frequency job on its files (integration tier) ---------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_collector_subprocess_then_frequency_job(tmp_path, olh_task, rng, repo_root):
    out, port = tmp_path / "reports", _free_port()
    cmd = [sys.executable, "-m", "pipelines.collect", "--task", str(olh_task), "--output_dir", str(out),
           "--port", str(port), "--roll_reports", "700"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=repo_root, env=venv_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                assert conn.getresponse().status == 200
                conn.close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
                time.sleep(0.2)
        recs = make_records(olh_task, 2000, rng)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # one kept-alive connection
        for k in range(0, 1900, 100):
            conn.request("POST", "/v1/reports", json.dumps({"reports": as_json(recs[k : k + 100])}),
                         {"Content-Type": JSON_TYPE})  # fmt: skip
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read()) == {"accepted": 100}
        conn.request("POST", "/v1/reports", encode_report_container(recs[1900:]), {"Content-Type": AVRO_TYPE})
        assert conn.getresponse().read() == b'{"accepted": 100}\n'
        conn.request("POST", "/v1/reports", json.dumps(_report(task_id="x")), {"Content-Type": JSON_TYPE})
        assert conn.getresponse().status == 422
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    stats = json.loads(stdout.strip().splitlines()[-1])
    assert stats["reports_accepted"] == stats["reports_written"] == 2000 and stats["rejected_by"] == {
        "wrong_task": 1
    }
    assert stats["files_written"] == 3  # 700 + 700 + 600: closed after whole requests of 100
    assert all(Path(f"{p}.done").is_file() for p in out.glob("*.avro"))
    assert read_dir(out) == as_json(recs)
    assert "127.0.0.1:" not in stderr.replace(f"http://127.0.0.1:{port}/v1/reports", "")
    job = subprocess.run(
        [sys.executable, "-m", "pipelines.frequency", "--task", str(olh_task), "--input", f"{out}/*.avro",
         "--output", str(tmp_path / "est")],
        cwd=repo_root, env=venv_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr
    counts = json.loads((tmp_path / "est" / "counts.json").read_text())["counts"]
    assert (counts["read"], counts["accepted"], counts["rejected"]) == (2000, 2000, 0)


# ---- the JSON batch path: typed columns, the reference parser for anything else ---------------------------
def _reference(collector: Collector, body: bytes) -> bytes | RequestError:
    """What the reference path (``json.loads``, record dicts, the validator on records, fastavro) makes of
    a body: the block it writes, or its refusal."""
    from pipelines.collector import parse_json_body

    try:
        records = collector.checker.check(parse_json_body(body, collector.max_batch), json_form=True)
    except RequestError as exc:
        return exc
    return collector._encode([dict(r) for r in records])


def _fast(collector: Collector, body: bytes) -> bytes | None:
    cb = collector._json_columns(body)
    return None if cb is None else collector._encode_cb(cb)


def _agree(collector: Collector, body: bytes) -> bytes | None:
    """The fast path never accepts what the reference path refuses, and writes the same bytes."""
    fast, ref = _fast(collector, body), _reference(collector, body)
    if fast is not None:
        assert not isinstance(ref, RequestError), (body[:300], ref.body())
        assert fast == ref, body[:300]
    return fast


def _collector(tmp_path: Path, task_path: Path, name: str, **kw: Any) -> Collector:
    return Collector(make_checker(load_task(task_path)), RollingAvroWriter(tmp_path / name), **kw)


def test_column_encoder_is_fastavro_byte_for_byte(rng):
    """Random column batches (every union null or not per row, ragged bits / items, id lengths 0..5,
    integers over the whole int64 range, doubles of any exponent): the one-pass encoder writes exactly
    fastavro's bytes of the same records, with ids kept or dropped and other times."""
    from pipelines.collector import encode_columns
    from wire.decode import ColumnBatch

    schema = fastavro.parse_schema(schemas.report_schema())
    fields = ("value", "seed", "bits", "items", "reals", "client_id")
    for trial in range(200):
        n, bw, k, rw = (int(x) for x in rng.integers(1, [20, 5, 4, 4]))
        bw, k = bw - 1, k - 1
        pr = {f: rng.random(n) < 0.5 for f in fields}

        def ints(shape: Any) -> np.ndarray:
            return rng.integers(-(2**63), 2**63 - 1, shape, dtype=np.int64) >> rng.integers(0, 63, shape)

        lengths = {
            "bits": np.where(pr["bits"], rng.integers(0, bw + 1, n), 0),
            "items": np.where(pr["items"], rng.integers(0, k + 1, n), 0),
            "reals": np.where(pr["reals"], rw, 0),
        }
        bits = rng.integers(0, 256, (n, bw)).astype(np.uint8)
        bits[np.arange(bw) >= lengths["bits"][:, None]] = 0
        items = ints((n, k))
        items[np.arange(k) >= lengths["items"][:, None]] = 0
        reals = rng.normal(size=(n, rw)) * 10.0 ** rng.integers(-300, 300, (n, rw))
        ids = rng.integers(0, 256, (n, 6)).astype(np.uint8)
        ids[:, 0] = np.where(pr["client_id"], rng.integers(0, 6, n), 0)
        ids[:, 1:][np.arange(5) >= ids[:, :1]] = 0
        payload = {"value": np.where(pr["value"], ints(n), 0), "seed": np.where(pr["seed"], ints(n), 0),
                   "bits": bits, "items": items, "reals": reals if rw > 1 else reals[:, 0], "client_id": ids}
        cb = ColumnBatch("tâsk-" + "x" * int(rng.integers(0, 200)), rng.integers(0, 2**31 - 1, n),
                         rng.integers(0, 2**45, n), rng.integers(0, 2**31 - 1, n), pr, payload, True,
                         lengths)  # fmt: skip
        for keep_ids, times in ((True, cb.event_ms), (False, cb.event_ms // 7)):
            buf = io.BytesIO()
            for i in range(n):
                rec = {**cb.record(i), "event_time": int(times[i])}
                fastavro.schemaless_writer(buf, schema, rec if keep_ids else {**rec, "client_id": None})
            assert encode_columns(cb, times, client_ids=keep_ids) == buf.getvalue(), trial


def test_json_batches_take_the_column_path(tmp_path, frequency_task_file, rng, monkeypatch):
    """Regular batches of OLH, GRR, OUE (bits), SS (items), with client ids, and of a shuffled task are
    decoded, checked and written from columns (the reference parser is never called) and the files hold
    what was posted (a shuffled task: times rounded, ids dropped)."""
    from pipelines import collector as core

    def no_reference(*a: Any, **k: Any) -> None:
        raise AssertionError("the reference parser was called for a regular batch")

    monkeypatch.setattr(core, "parse_json_body", no_reference)
    cases = [("olh", {}, None), ("grr", {}, None), ("oue", {"domain_size": 20}, None),
             ("ss", {"domain_size": 30}, None), ("olh", {}, [b"id-%d" % (i % 7) for i in range(100)]),
             ("oue", {"domain_size": 20, "anonymity": {"shuffled": True, "min_reports": 2}},
              [b"abc"] * 100)]  # fmt: skip
    for k, (mech, extra, ids) in enumerate(cases):
        task = frequency_task_file(f"{k}.json", task_id=f"t-{k}", mechanism=mech, **extra)
        collector = _collector(tmp_path, task, f"out{k}")
        recs = make_records(task, 100, rng, client_ids=ids)
        body = json.dumps({"reports": as_json(recs)}).encode()
        assert collector.handle(JSON_TYPE, body) == (200, {"accepted": 100}), mech
        assert collector.handle(JSON_TYPE, json.dumps(as_json(recs[:1])[0]).encode())[0] == 200
        collector.close()
        stored = read_dir(tmp_path / f"out{k}")
        sent = as_json(recs + recs[:1])
        if "anonymity" in extra:
            hour = 3_600_000
            sent = [{**r, "client_id": None, "event_time": r["event_time"] // hour * hour} for r in sent]
            stored, sent = sorted(stored, key=json.dumps), sorted(sent, key=json.dumps)
        assert stored == sent, mech


#: Bodies that probe where a typed decoder and ``json.loads`` + the record checks could differ.
_PROBES = [
    b' \n{"reports": [%s, %s]}\t ',  # whitespace around the body
    b'{"reports": [%s], "reports": [%s]}',  # a repeated member: the last wins in both
    b'\xef\xbb\xbf{"reports": [%s, %s]}',  # a UTF-8 byte-order mark: not JSON for the reference
    b'{"reports": [%s, %s, null]}',
    b'{"reports": [%s, %s]} []',
    b'{"reports": [%s, %s], "extra": 1}',
    b'{"reports": {"a": %s, "b": %s}}',
    b'[%s, %s]',
]
_EDITS = [
    (b'"value": 3', b'"value": 3, "value": 1000000'), (b'"value": 3', b'"value": 1000000, "value": 3'),
    (b'"value": 3', b'"value": 3.0'), (b'"value": 3', b'"value": -0'), (b'"value": 3', b'"value": 3e0'),
    (b'"value": 3', b'"value": 18446744073709551616'), (b'"value": 3', b'"value": true'),
    (b'"value": 3', b'"value": null'), (b'"value": 3, ', b''),
    (b'"group": 0', b'"group": 0.0'), (b'"group": 0', b'"group": null'), (b'"group": 0, ', b''),
    (b'"seed": "-6406931151052310911"', b'"seed": "\\u002d6406931151052310911"'),
    (b'"seed": "-6406931151052310911"', b'"seed": "9223372036854775807"'),
    (b'"seed": "-6406931151052310911"', b'"seed": "-9223372036854775808"'),
    (b'"seed": "-6406931151052310911"', b'"seed": "-9223372036854775809"'),
    (b'"seed": "-6406931151052310911"', b'"seed": "-0"'),
    (b'"seed": "-6406931151052310911"', b'"seed": "6406931151052310911\\n"'),
    (b'"seed": "-6406931151052310911"', b'"seed": -6406931151052310911'),
    (b'"task_id": "test-freq"', b'"t\\u0061sk_id": "test\\u002dfreq"'),
    (b'"task_id": "test-freq"', b'"task_id": "test-freq\\ud800"'),
    (b'"task_id": "test-freq"', b'"task_id": "test-freq\x01"'),
    (b'"task_id": "test-freq"', b'"task_id": "test-fr\xffeq"'),
    (b'"event_time": 1767225600000', b'"event_time": 1767225600000.0'),
    (b'"event_time": 1767225600000', b'"event_time": 7258118400000'),
    (b'"event_time": 1767225600000', b'"event_time": -1'),
    (b'"client_id": null', b'"client_id": "AB=="'), (b'"client_id": null', b'"client_id": "YQ"'),
    (b'"client_id": null', b'"client_id": "YQ==\\n"'), (b'"client_id": null', b'"client_id": ""'),
    (b'"client_id": null', b'"client_id": "-_8="'), (b'"bits": null', b'"bits": "AA=="'),
    (b'"reals": null', b'"reals": []'), (b'"items": null', b'"items": [1]'),
    (b'"schema_version": 2', b'"schema_version": 2.0'), (b'"schema_version": 2', b'"schema_version": 3'),
    (b'}', b', "raw_value": 3}'), (b'{', b'{"nested": ' + b'[' * 900 + b']' * 900 + b', '),
]


def test_json_column_path_accepts_nothing_the_reference_refuses(tmp_path, olh_task, rng):
    """The attack on the fast path: forged bodies (repeated members, escapes, byte-order marks, lone
    surrogates, control characters, integers past int64, non-canonical base64, nesting 900 deep, wrong
    shapes) and 2,000 random byte edits of a valid batch. Wherever the column path accepts, the reference
    path accepts too and writes the same bytes; wherever the reference refuses, the collector answers its
    refusal (reason code and index)."""
    collector = _collector(tmp_path, olh_task, "out", max_batch=5)
    good = json.dumps(_report(), separators=(", ", ": ")).encode()
    accepted = 0
    for probe in _PROBES:
        accepted += _agree(collector, probe % (good, good)) is not None
    for old, new in _EDITS:
        assert old in good, old
        bad = good.replace(old, new, 1)
        for body in (bad, b'{"reports": [%s, %s]}' % (good, bad)):
            accepted += _agree(collector, body) is not None
            ref = _reference(collector, body)
            answer = collector.handle(JSON_TYPE, body)
            if isinstance(ref, bytes):
                assert answer == (200, {"accepted": 1 if body is bad else 2}), body
            else:
                assert answer == (ref.status, ref.body()), body
    assert accepted >= 5  # the valid probes and edits did take the column path
    batch = json.dumps({"reports": as_json(make_records(olh_task, 5, rng))}).encode()
    assert _agree(collector, batch) is not None
    alphabet = np.frombuffer(b'{}[]",:0123456789-.eE+ \\/u"AaQ=nul', dtype=np.uint8)
    for _ in range(2000):
        b = bytearray(batch)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(b)))
            op = int(rng.integers(0, 3))
            if op == 0:
                b[at] = int(rng.choice(alphabet))
            elif op == 1:
                del b[at]
            else:
                b.insert(at, int(rng.choice(alphabet)))
        _agree(collector, bytes(b))


def test_json_depth_bound_is_exact_without_strings(rng):
    """The two-pass bracket bound equals the exact scan on texts without strings (and 0 for none)."""
    from pipelines.collector import MAX_JSON_DEPTH, json_depth

    for _ in range(500):
        n = int(rng.integers(0, 60))
        text = bytes(rng.choice(np.frombuffer(b"[]{}0,", dtype=np.uint8), n))
        depth = deepest = 0
        for c in text:
            depth += (c in b"[{") - (c in b"]}")
            deepest = max(deepest, depth)
        got = json_depth(text)
        assert got == deepest if deepest <= MAX_JSON_DEPTH else got > MAX_JSON_DEPTH, text
    assert json_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[["}') == 1  # brackets inside a string: the exact scan
