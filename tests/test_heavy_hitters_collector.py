"""Heavy-hitters reports through the HTTP collector: ``ldp-beam collect`` on a heavy_hitters task takes the
reports of ``wire.client.make_client_encoder`` (Avro and JSON bodies) and of the TypeScript ``PemClient``
under Node (JSON, ``postReports``), refuses bad ones (a level out of range, ``y >= g``, a foreign task) with
the reason and counts them; a streaming ``ldp-beam heavy-hitters`` watching the collector's directory
(``--require_done_marker``) stores each window's frequent strings, the TypeScript clients' own string
among them, and the dashboard's heavy-hitters panel lists each window's strings.

The fast test runs the collector core in this process; the end-to-end test (integration, ``node``) runs
the collector, the job and Node as commands (about 25 s).
"""

from __future__ import annotations

import asyncio
import html
import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from bokeh.document import Document
from conftest import venv_env

from ldp.task import load_task
from pipelines import collect
from pipelines.collector import (
    AVRO_TYPE,
    JSON_TYPE,
    Collector,
    RollingAvroWriter,
    make_checker,
    report_to_json,
)
from pipelines.dashboard_app.app import Dashboard
from store import open_store
from wire.client import client_params_document, make_client_encoder
from wire.records import encode_report_container, reports_to_records

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TASK = {"task_id": "hh-collect", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0, "max_length": 3,
        "top_k": 10}

#: The Python clients' strings and counts (24,000 users) and the TypeScript clients' (8,000): "ts!" only
#: from Node. With eps 4 (g = 64) the verification level holds 0.6 / 2.6 of the 32,000 reports (about
#: 7,400), so a string's estimate has sd <= 0.004 (OLH variance 0.076 per report plus the level's
#: sampling): the four strings at >= 9% stand more than 20 sd above the publication cut (about 4 sd), and
#: each of the search levels keeps 2,048 prefixes, far more than the strings sent: missing one has
#: probability below 1e-20.
PY_STRINGS = {"cat": 9_000, "dog": 6_000, "<b>": 4_000}
PY_TAIL = 5_000  # one user each of 5,000 random 3-byte strings
TS_STRINGS = {"ts!": 5_000, "cat": 3_000}


def _task_file(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / ("hh-trie.json" if extra else "hh.json")
    path.write_text(json.dumps({**TASK, **extra}), encoding="utf-8")
    return path


def _py_records(task: Any, values: list[Any], rng: np.random.Generator, start_ms: int = START_MS
                ) -> list[dict]:  # fmt: skip
    """Reports of ``values`` from the Python client encoder, event times spread over 9 s from
    ``start_ms``, as Avro records."""
    reports, levels = make_client_encoder(task).encode_grouped(values, rng=rng)
    n = len(values)
    return reports_to_records(task.task_id, reports, start_ms + np.arange(n) * 9000 // n, levels)


def _bad_reports(task: Any, good: dict) -> list[tuple[str, dict]]:
    """``(reason, record)``: a level out of range, ``y = g`` of the report's level, a foreign task."""
    g = {lv["level"]: lv["g"] for lv in client_params_document(task)["params"]["levels"]}[good["group"]]
    return [("invalid_group", {**good, "group": task.n_groups}), ("out_of_domain", {**good, "value": g}),
            ("wrong_task", {**good, "task_id": "another-task"})]


def test_collector_refuses_bad_heavy_hitters_reports_with_the_reason_and_counts_them(tmp_path, rng):
    task_file = _task_file(tmp_path)
    task = load_task(task_file)
    collector = Collector(make_checker(task), RollingAvroWriter(tmp_path / "out"))
    good = _py_records(task, ["cat", "dog", "", "\u00e9t"] * 25, rng)
    assert collector.handle(AVRO_TYPE, encode_report_container(good[:50])) == (200, {"accepted": 50})
    body = json.dumps({"reports": [report_to_json(r) for r in good[50:]]}).encode()
    assert collector.handle(JSON_TYPE, body) == (200, {"accepted": 50})
    for reason, bad in _bad_reports(task, good[7]):
        for media, data in ((JSON_TYPE, json.dumps(report_to_json(bad)).encode()),
                            (AVRO_TYPE, encode_report_container([bad]))):  # fmt: skip
            status, answer = collector.handle(media, data)
            assert status == 422 and answer["error"] == reason and answer["index"] == 0, answer
    # a bad report inside a batch: the request is refused whole, naming it
    mixed = [*good[:37], _bad_reports(task, good[37])[1][1], *good[38:60]]
    status, answer = collector.handle(AVRO_TYPE, encode_report_container(mixed))
    assert (status, answer["error"], answer["index"]) == (422, "out_of_domain", 37)
    assert answer["detail"].startswith("report 37: value outside [0, ")
    stats = collector.close().to_json()
    assert stats["reports_accepted"] == stats["reports_written"] == 100
    assert stats["rejected_by"] == {"invalid_group": 2, "out_of_domain": 3, "wrong_task": 2}
    assert stats["reports_refused"] == 6 + len(mixed)


def test_shuffled_heavy_hitters_task_keeps_the_reports_without_times_or_client_ids(tmp_path, rng):
    """A shuffled task (``anonymity.shuffled``): the files hold every report (level, seed, y), their times
    rounded down to the hour, no client id."""
    task = load_task(_task_file(tmp_path, anonymity={"shuffled": True, "time_precision_s": 3600}))
    checker = make_checker(task)
    assert checker.shuffled
    collector = Collector(checker, RollingAvroWriter(tmp_path / "out", permute=True))
    recs = _py_records(task, ["cat", "dog"] * 100, rng, START_MS + 1_234_567)
    recs = [{**r, "client_id": b"device-%d" % i} for i, r in enumerate(recs)]
    assert collector.handle(AVRO_TYPE, encode_report_container(recs[:100]))[0] == 200
    body = json.dumps({"reports": [report_to_json(r) for r in recs[100:]]}).encode()
    assert collector.handle(JSON_TYPE, body)[0] == 200
    collector.close()
    got = []
    for path in sorted((tmp_path / "out").glob("*.avro")):
        with open(path, "rb") as fh:
            got += list(fastavro.reader(fh))
    assert sorted((r["group"], r["seed"], r["value"]) for r in got) == sorted(
        (r["group"], r["seed"], r["value"]) for r in recs)
    hour = (START_MS + 1_234_567) // 3_600_000 * 3_600_000
    assert {(int(r["event_time"].timestamp() * 1000), r["client_id"]) for r in got} == {(hour, None)}


#: Node: ``PemClient`` reports of the given ``[[string, count], ...]`` posted 100 a request with
#: ``postReports``; then a string longer than max_length (refused by the client) and one tampered report
#: (``value`` = its level's g: refused by the collector). Prints what happened as one JSON line.
NODE_SCRIPT = r"""
import { readFileSync } from "node:fs";
const [, , pkg, taskFile, wireFile, url, plan, start] = process.argv;
const { PemClient, postReports } = await import(`${pkg}/dist/src/index.js`);
const task = JSON.parse(readFileSync(taskFile, "utf-8"));
const wire = JSON.parse(readFileSync(wireFile, "utf-8"));
const client = PemClient.fromTask(task, { wire });
const values = JSON.parse(plan).flatMap(([v, n]) => Array(n).fill(v));
let accepted = 0;
for (let i = 0; i < values.length; i += 100) {
  const batch = values.slice(i, i + 100).map((v, j) =>
    client.encode(v, { eventTime: Number(start) + Math.floor(((i + j) * 9000) / values.length) }));
  accepted += (await postReports(url, batch)).accepted;
}
let tooLong = null;
try { client.encode("x".repeat(task.max_length + 1)); } catch (e) { tooLong = e.message; }
const bad = client.encode(values[0], { eventTime: Number(start) });
bad.value = client.params.levels[bad.group].g;
let refused = null;
try {
  await postReports(url, [bad], { retries: 0 });
} catch (e) {
  refused = { status: e.status, error: e.error, detail: e.detail };
}
console.log(JSON.stringify({ accepted, tooLong, refused }));
"""


def _need_node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm  # the node marker skips (or fails) the test without them
    sources = [*PACKAGE.glob("src/*.ts"), PACKAGE / "tsconfig.json", PACKAGE / "package-lock.json"]
    built = PACKAGE / "dist" / "src" / "index.js"
    if not built.is_file() or any(p.stat().st_mtime > built.stat().st_mtime for p in sources):
        steps = [] if (PACKAGE / "node_modules" / "typescript").is_dir() else [[npm, "ci", "--no-audit"]]
        for cmd in [*steps, [npm, "run", "build"]]:
            proc = subprocess.run(cmd, cwd=PACKAGE, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return node


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            assert conn.getresponse().status == 200
            conn.close()
            return
        except OSError:
            assert proc.poll() is None, proc.stderr and proc.stderr.read()
            assert time.monotonic() < deadline, "the collector did not start"
            time.sleep(0.2)
            time.sleep(0.2)


def _post(conn: http.client.HTTPConnection, media: str, body: bytes) -> tuple[int, dict]:
    conn.request("POST", "/v1/reports", body, {"Content-Type": media})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def _post_python(port: int, task: Any, rng: np.random.Generator, start_ms: int) -> dict[str, int]:
    """The Python clients' reports (Avro bodies of 1,000, then JSON bodies of 100) and the three bad
    reports; returns the refusals' reasons by count."""
    values: list[Any] = [v for v, n in PY_STRINGS.items() for _ in range(n)]
    values += [bytes(b) for b in rng.integers(0, 256, (PY_TAIL, 3), dtype=np.uint8)]
    recs = _py_records(task, [values[i] for i in rng.permutation(len(values))], rng, start_ms)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    half = len(recs) // 2
    for k in range(0, half, 1000):
        assert _post(conn, AVRO_TYPE, encode_report_container(recs[k:k + 1000]))[0] == 200
    for k in range(half, len(recs), 100):
        batch = {"reports": [report_to_json(r) for r in recs[k:k + 100]]}
        answer = _post(conn, JSON_TYPE, json.dumps(batch).encode())
        assert answer == (200, {"accepted": len(batch["reports"])})
    refused: dict[str, int] = {}
    for reason, bad in _bad_reports(task, recs[0]):
        status, answer = _post(conn, JSON_TYPE, json.dumps(report_to_json(bad)).encode())
        assert (status, answer["error"]) == (422, reason), answer
        refused[reason] = refused.get(reason, 0) + 1
    conn.close()
    return refused


def _post_node(node: str, tmp_path: Path, task_file: Path, port: int, start_ms: int) -> dict[str, Any]:
    """The TypeScript clients' reports (:data:`NODE_SCRIPT`); returns what the script printed."""
    task = load_task(task_file)
    wire_file = tmp_path / "hh.wire.json"
    wire_file.write_text(json.dumps(client_params_document(task)), encoding="utf-8")
    script = tmp_path / "post.mjs"
    script.write_text(NODE_SCRIPT, encoding="utf-8")
    plan = json.dumps([[v, n] for v, n in TS_STRINGS.items()])
    ran = subprocess.run([node, str(script), str(PACKAGE), str(task_file), str(wire_file),
                          f"http://127.0.0.1:{port}/v1/reports", plan, str(start_ms)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """``python -m pipelines.cli ARGS`` in the background, stderr to ``log``."""
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=venv_env(),
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True)  # fmt: skip


def _check_window(items: list[dict], truth: dict[str, int], n: int) -> None:
    """Every string of ``truth`` (its count among the window's ``n`` reports) is among the window's stored
    strings, its estimate within 5 std of its frequency."""
    stored = {i["label"]: i for i in items}
    for value, count in truth.items():
        assert value in stored, (value, list(stored))
        assert abs(stored[value]["estimate"] - count / n) < 5 * stored[value]["std"], (value, count / n)


@pytest.mark.integration
@pytest.mark.node
def test_streaming_job_watches_the_collectors_files_and_finds_each_windows_heavy_hitters(tmp_path, rng):
    """Window 0: the Python clients (posted before the job starts); window 1: the TypeScript clients
    (posted while the streaming job watches the directory). Each window's strings reach the store. The
    windows end before the job's watermark reaches them on a slow machine: 600 s of allowed lateness keep
    their reports (the end of the watch closes every window)."""
    node = _need_node()
    task_file = _task_file(tmp_path)
    task = load_task(task_file)
    out, port, db = tmp_path / "reports", _free_port(), tmp_path / "store.db"
    now = int(time.time() * 1000) // 10_000 * 10_000
    collector = _start(["collect", "--task", str(task_file), "--output_dir", str(out), "--port", str(port),
                        "--max_batch", "1000", "--roll_seconds", "1"], tmp_path / "collect.log")
    job = None
    try:
        _wait_healthy(collector, port)
        refused = _post_python(port, task, rng, now - 20_000)
        job = _start(["heavy-hitters", "--task", str(task_file), "--streaming", "--input", f"{out}/*.avro",
                      "--require_done_marker", "--output", str(tmp_path / "est"), "--window_size", "10",
                      "--allowed_lateness", "600", "--watch_interval", "0.5", "--streaming_duration", "15",
                      "--store", f"sqlite:///{db}"], tmp_path / "job.log")  # fmt: skip
        ts = _post_node(node, tmp_path, task_file, port, now - 10_000)
    finally:
        collector.send_signal(signal.SIGTERM)
        stdout, _ = collector.communicate(timeout=60)
        if job is not None:
            job.wait(timeout=240)
    assert collector.returncode == 0, (tmp_path / "collect.log").read_text()
    assert job is not None and job.returncode == 0, (tmp_path / "job.log").read_text()[-3000:]
    assert ts["accepted"] == sum(TS_STRINGS.values())
    b = TASK["max_length"]
    assert ts["tooLong"] == f"a value of {b + 1} bytes, more than max_length {b}"  # refused by the client
    assert ts["refused"]["status"] == 422 and ts["refused"]["error"] == "out_of_domain", ts
    n = sum(PY_STRINGS.values()) + PY_TAIL + sum(TS_STRINGS.values())
    stats = json.loads(stdout.strip().splitlines()[-1])
    assert stats["reports_accepted"] == stats["reports_written"] == n
    assert stats["rejected_by"] == {**refused, "out_of_domain": refused["out_of_domain"] + 1}
    assert stats["reports_refused"] == 4
    counts = json.loads((tmp_path / "est" / "counts.json").read_text())["counts"]
    assert (counts["read"], counts["accepted"], counts["rejected"]) == (n, n, 0)
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        windows = sorted(store.windows(TASK["task_id"]), key=lambda w: w["window_start"])
        stored = [store.current(TASK["task_id"], w["window_start"], w["window_end"]) for w in windows]
    finally:
        store.close()
    assert [w["window_start"] for w in windows] == [now - 20_000, now - 10_000]
    assert [w["n_reports"] for w in windows] == [sum(PY_STRINGS.values()) + PY_TAIL, sum(TS_STRINGS.values())]
    assert all(w["is_final"] == 1 for w in windows)
    _check_window(stored[0], PY_STRINGS, windows[0]["n_reports"])
    _check_window(stored[1], TS_STRINGS, windows[1]["n_reports"])
    # the dashboard's heavy-hitters panel over the store: each window's strings, best first
    dash = Dashboard(Document(), f"sqlite:///{db}")
    for w, items in zip(windows, stored, strict=True):
        dash.hh.window_select.value = f"{w['window_start']}:{w['window_end']}"
        table = dash.hh.table.text
        assert f"data-window-end='{w['window_end']}'" in table
        best = sorted(items, key=lambda i: (-i["estimate"], i["label"]))
        cells = [table.index(f"<code>{html.escape(i['label'])}</code>") for i in best]
        assert cells == sorted(cells), [i["label"] for i in best]


# ---- what a device fetches: its client parameters and, in trie mode, the published level -----------------
class _Served:
    """``pipelines.collect.serve`` in a thread of this process on a free port (``trie_dir``, ``origins``)."""

    def __init__(self, task: Any, out: Path, **options: Any) -> None:
        self.collector = Collector(make_checker(task), RollingAvroWriter(out))
        self.port = 0
        ready = threading.Event()

        def main() -> None:
            async def run() -> None:
                self.loop, self.stop_event = asyncio.get_running_loop(), asyncio.Event()

                def up(port: int) -> None:
                    self.port = port
                    ready.set()

                await collect.serve(self.collector, "127.0.0.1", 0, stop=self.stop_event, ready=up, **options)

            asyncio.run(run())

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        assert ready.wait(10), "the collector did not start"

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, Any], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read()), resp.headers
        finally:
            conn.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(30)


def test_collector_serves_client_params_and_the_newest_publication(tmp_path, range_task_file):
    from wire.publication import write_publication

    task = load_task(_task_file(tmp_path, mode="trie"))
    trie_dir = tmp_path / "trie"
    served = _Served(task, tmp_path / "out", trie_dir=str(trie_dir), origins=["https://app.example"])
    try:
        status, body, headers = served.get("/v1/client_params", Origin="https://app.example")
        assert (status, body) == (200, client_params_document(task))
        assert headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert "Access-Control-Allow-Origin" not in served.get("/v1/client_params", Origin="https://x.example")[2]
        status, body, _ = served.get("/v1/publication")
        assert (status, body["error"]) == (404, "no_publication") and "report at level 0" in body["detail"]
        publication = {"task_id": task.task_id, "generation": 1, "level": 1, "window_end": START_MS,
                       "status": "search", "prefix_bits": 22, "survivors": 3, "prefixes": [],
                       "state": {"words": ["ab" * 8] * 3}}  # fmt: skip
        write_publication(trie_dir, publication)
        status, body, _ = served.get("/v1/publication")
        assert status == 200 and body["level"] == 1 and body["generation"] == 1
        assert "state" not in body and body["prefixes"] == []  # the job's resume state is not served
        (trie_dir / "latest.json").write_text("{not json", encoding="utf-8")
        status, body, headers = served.get("/v1/publication")
        assert (status, body["error"], headers["Retry-After"]) == (503, "unavailable", "5")
        assert str(trie_dir) not in body["detail"]  # no path in an answer
    finally:
        served.stop()
    other = _Served(load_task(range_task_file()), tmp_path / "out2")  # no byte procedure, no --trie_dir
    try:
        status, body, _ = other.get("/v1/client_params")
        assert (status, body["error"]) == (404, "no_client_params")
        assert other.get("/v1/publication")[1]["error"] == "not_found"
    finally:
        other.stop()


def test_trie_dir_needs_a_trie_mode_task(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        collect.run(["--task", str(_task_file(tmp_path)), "--output_dir", str(tmp_path / "o"),
                     "--trie_dir", str(tmp_path / "t")])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trie_dir needs a heavy_hitters task in trie mode" in err[0]


#: Node, a trie-mode device: fetches the client parameters and the newest publication from the collector,
#: encodes ``count`` reports of ``value`` at the published level (0 before one) and posts them.
NODE_TRIE_SCRIPT = r"""
import { readFileSync } from "node:fs";
const [, , pkg, taskFile, base, value, count] = process.argv;
const { PemClient, postReports, publishedLevel } = await import(`${pkg}/dist/src/index.js`);
const get = async (path) => { const r = await fetch(base + path); return [r.status, await r.json()]; };
const task = JSON.parse(readFileSync(taskFile, "utf-8"));
const [, wire] = await get("/v1/client_params");
const client = PemClient.fromTask(task, { wire });
const [status, publication] = await get("/v1/publication");
if (status !== 200 && publication.error !== "no_publication") throw new Error(JSON.stringify(publication));
const level = publishedLevel(status === 200 ? publication : null, client);
const reports = Array.from({ length: Number(count) }, () => client.encode(value, { level }));
const answer = await postReports(`${base}/v1/reports`, reports);
console.log(JSON.stringify({ level, accepted: answer.accepted }));
"""


@pytest.mark.integration
@pytest.mark.node
def test_trie_mode_typescript_clients_report_at_the_level_the_collector_serves(tmp_path):
    from wire.publication import write_publication

    node = _need_node()
    task_file = _task_file(tmp_path, mode="trie")
    task = load_task(task_file)
    out, trie_dir, port = tmp_path / "reports", tmp_path / "trie", _free_port()
    script = tmp_path / "trie.mjs"
    script.write_text(NODE_TRIE_SCRIPT, encoding="utf-8")
    collector = _start(["collect", "--task", str(task_file), "--output_dir", str(out), "--port", str(port),
                        "--trie_dir", str(trie_dir)], tmp_path / "collect.log")  # fmt: skip
    runs = []
    try:
        _wait_healthy(collector, port)
        for generation in (0, 1):
            if generation:  # the job published its first window: the next clients report at level 2
                write_publication(trie_dir, {"task_id": task.task_id, "generation": 1, "level": 2,
                                             "window_end": START_MS})  # fmt: skip
            ran = subprocess.run([node, str(script), str(PACKAGE), str(task_file), f"http://127.0.0.1:{port}",
                                  "cat", "100"], capture_output=True, text=True, timeout=120)  # fmt: skip
            assert ran.returncode == 0, ran.stderr
            runs.append(json.loads(ran.stdout.strip().splitlines()[-1]))
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.communicate(timeout=60)
    assert runs == [{"level": 0, "accepted": 100}, {"level": 2, "accepted": 100}]
    groups = []
    for path in sorted(out.glob("*.avro")):
        with open(path, "rb") as fh:
            groups += [r["group"] for r in fastavro.reader(fh)]
    assert groups == [0] * 100 + [2] * 100
