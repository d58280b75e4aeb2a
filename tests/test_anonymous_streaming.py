"""Anonymous collection, streaming, end to end on the DirectRunner (FnApiRunner, paced watch):

simulated clients of a shuffled frequency task write one report file per 60 s bucket into a watched
directory while the shuffler streams over it -> the shuffler's batch files -> the frequency job streaming
over the shuffler's batch directory with ``--store sqlite:///...`` -> the dashboard document built from
the store. It checks the two accountings (shuffler: read = forwarded + withheld + dead-lettered; job:
read = accepted + rejected), that every stored window is final and equals the job's last-pane estimate
files, that the per-window central guarantee is the one of its smallest batch (``OUT/batches.jsonl``),
its batches summing to the window's accepted reports, in the job summary and in the store's run summary,
and that the dashboard's privacy panel shows the central and local epsilon of each window. The shuffler
and the job share one ``--shuffle_key``.

The shuffler writes no ``.done`` markers: it writes each batch file under a ``.part`` name the glob does
not match and links it to its name, so the job watches its batch directory without
``--require_done_marker``.
Integration tier: the test's name says ``watched_directory`` (and it carries the marker).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import threading
import time
from pathlib import Path

import fastavro
import pytest

import simulator
from ldp.aggregate import from_iso
from ldp.anonymity import shuffle_accounting
from ldp.shuffle import central_epsilon_report
from ldp.shuffle.provenance import new_key_file
from ldp.task import parse_task
from pipelines import frequency, shuffle
from store import open_store

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PRECISION_S = 60
WINDOW_S = 120  # two buckets per window
BUCKETS = 6  # three windows
PER_BUCKET = 300  # every bucket forwarded (min_reports 200)
SHORT = 40  # one more bucket, an hour later, below min_reports: withheld
TASK = {
    "task_id": "anon-stream",
    "mechanism": "olh",
    "epsilon": 2.0,
    "domain_size": 16,
    "anonymity": {"shuffled": True, "time_precision_s": PRECISION_S, "min_reports": 200, "delta": 1e-6},
    "window": {"size_s": WINDOW_S},
}
STREAM = ["--streaming", "--watch_interval", "1"]


def _jsonl(pattern: str) -> list[dict]:
    rows: list[dict] = []
    for f in sorted(glob.glob(pattern)):
        with open(f, encoding="utf-8") as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


class _Clients(threading.Thread):
    """Writes bucket k's simulated reports (``PER_BUCKET`` of them, times inside the bucket; bucket 0 also
    the simulator's bad records and undecodable file) at about k x ``gap_s`` seconds after it starts: each
    file is written in a staging directory and moved into the watched one whole."""

    def __init__(self, task, base: Path, gap_s: float) -> None:
        super().__init__(daemon=True)
        self.task, self.base, self.gap_s = task, base, gap_s
        self.error: BaseException | None = None
        self.written: list[str] = []

    def write(self, k: int, users: int, start_ms: int, inject_bad: int = 0) -> None:
        stage = self.base / "stage" / str(k)
        simulator.simulate_files(self.task, users, "zipf", stage, seed=100 + k, files=1, start_ms=start_ms,
                                duration_s=float(PRECISION_S), inject_bad=inject_bad)  # fmt: skip
        for name in sorted(os.listdir(stage)):
            if name.endswith(".avro"):
                dest = self.base / "in" / f"b{k:02d}-{name}"
                os.replace(stage / name, dest)
                self.written.append(str(dest))
        shutil.rmtree(stage)

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            for k in range(1, BUCKETS + 1):  # buckets 1 ... BUCKETS - 1, then the short one
                time.sleep(max(0.0, t0 + k * self.gap_s - time.monotonic()))
                if k < BUCKETS:
                    self.write(k, PER_BUCKET, T0 + k * PRECISION_S * 1000)
                else:
                    self.write(k, SHORT, T0 + 3_600_000)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    base = tmp_path_factory.mktemp("anon-stream")
    (base / "task.json").write_text(json.dumps(TASK))
    (base / "in").mkdir()
    new_key_file(base / "shuffle.key")
    key = ["--shuffle_key", str(base / "shuffle.key")]
    task = parse_task(TASK)
    clients = _Clients(task, base, gap_s=0.5)
    clients.write(0, PER_BUCKET, T0, inject_bad=1)  # the first file is there when the watch starts
    clients.start()
    # the streaming shuffler from a watched directory runs on Prism (refused on the DirectRunner)
    shuffled = shuffle.run(["--task", str(base / "task.json"), *STREAM, "--streaming_duration", "8",
                            "--runner=PrismRunner", "--input", str(base / "in" / "*.avro"),
                            "--output", str(base / "out"), *key])  # fmt: skip
    clients.join(timeout=30)
    assert clients.error is None, clients.error
    url = f"sqlite:///{base}/estimates.db"
    job = frequency.run(["--task", str(base / "task.json"), *STREAM, "--streaming_duration", "5",
                         "--input", str(base / "out" / "batches" / "*.avro"), "--output", str(base / "est"),
                         "--store", url, *key])  # fmt: skip
    return {"base": base, "task": task, "shuffled": shuffled, "job": job, "url": url,
            "inputs": len(clients.written)}  # fmt: skip


@pytest.mark.integration
@pytest.mark.prism
def test_streaming_watched_directory_chain_clients_shuffler_job_store_dashboard(chain):
    from bokeh.document import Document

    from pipelines.dashboard_app.app import Dashboard

    base, task = chain["base"], chain["task"]
    # the buckets' files, the short bucket's (the last one moved in) and the simulator's three bad files
    assert chain["inputs"] == BUCKETS + 1 + 3

    # the shuffler: every report read is forwarded, withheld or dead-lettered; the full buckets forwarded
    s = chain["shuffled"]
    c = s["counts"]
    assert s["balanced"] is True and s["streaming"] is True
    assert c["read"] == c["forwarded"] + c["withheld"] + c["dead_lettered"]
    assert c["forwarded"] == BUCKETS * PER_BUCKET and c["dead_lettered"] > 0
    assert (c["withheld_short"], c["withheld_buckets"], c["withheld_late"]) == (SHORT, 1, 0)  # all read
    manifest = _jsonl(str(base / "out" / "batches.jsonl"))
    assert len(manifest) == s["batches"] == BUCKETS
    starts = sorted(e["bucket_start_ms"] for e in manifest)
    assert starts == [T0 + k * PRECISION_S * 1000 for k in range(BUCKETS)]
    assert all(e["n"] == PER_BUCKET for e in manifest)
    for e in manifest:  # the manifest says what each batch file's Avro header says
        with open(base / "out" / "batches" / os.path.basename(e["file"]), "rb") as fh:
            meta = fastavro.reader(fh).metadata
        assert (int(meta["ldp.shuffle.n"]), int(meta["ldp.shuffle.bucket_start_ms"])) == (
            e["n"], e["bucket_start_ms"])  # fmt: skip

    # the job: read = accepted + rejected; it reads exactly the forwarded reports
    job = chain["job"]
    jc = job["counts"]
    assert jc["read"] == jc["accepted"] + jc["rejected"]
    assert jc["read"] == jc["accepted"] == c["forwarded"] and jc.get("late_dropped", 0) == 0

    # the store: every window final and equal to the job's last-pane estimate files, exactly
    files = [r for r in _jsonl(str(base / "est" / "estimates-*.jsonl")) if r["is_last_pane"]]
    windows = {(from_iso(r["window_start"]), from_iso(r["window_end"])): r for r in files}
    assert len(files) == len(windows) == BUCKETS // 2  # buckets 0-1, 2-3, 4-5
    store = open_store(chain["url"], create=False)
    stored = store.windows(task.task_id)
    assert {(w["window_start"], w["window_end"]) for w in stored} == set(windows)
    assert all(w["is_final"] == 1 and w["final_ms"] is not None for w in stored)
    for (start, end), rec in windows.items():
        cur = store.current(task.task_id, start, end)
        assert [r["item"] for r in cur] == list(range(16))
        assert [r["estimate"] for r in cur] == rec["frequencies"]
        assert [r["std"] for r in cur] == rec["std"]
        assert {(r["is_final"], r["n_reports"]) for r in cur} == {(1, rec["n_reports"])}

    # the central guarantee per window: the worst of its batches, each at its own n (the smallest n);
    # the window's accepted reports are the sum of its batches' n
    def batch_ns(start_ms: int, end_ms: int) -> list[int]:
        return [e["n"] for e in manifest if start_ms <= e["bucket_start_ms"] < end_ms]

    accounting, k = shuffle_accounting(task)
    run_id = store.runs(task.task_id)[0]["run_id"]
    run_summary = store.run(run_id)["summary"]
    for summary in (job, run_summary):
        acct = summary["privacy_accounting"]["windows"]
        assert len(acct) == BUCKETS // 2
        for w in acct:
            start, end = from_iso(w["window_start"]), from_iso(w["window_end"])
            ns = batch_ns(start, end)
            assert sum(ns) == w["reports_in_batches"] == windows[(start, end)]["n_reports"] == w["accepted"]
            assert w["n"] == min(ns) and w["batches"] == len(ns) == 2
            expect = central_epsilon_report(2.0, min(ns), 1e-6, accounting, k)
            assert w["central_epsilon"] == pytest.approx(expect.epsilon) and expect.method in w["method"]
            assert w["central_epsilon"] < w["local_epsilon"] == 2.0 and w["why_no_central"] is None
            assert all(v is True for v in w["preconditions"].values())
    store.close()

    # the dashboard's privacy panel: n, central and local epsilon of each window
    dash = Dashboard(Document(), chain["url"])
    dash.poll()
    text = dash.budget.text
    assert dash.budget.visible and "id='privacy-guarantees'" in text
    for w in job["privacy_accounting"]["windows"]:
        assert f"<td>{w['n']:,}</td><td>{w['central_epsilon']:.4f}</td><td>1e-06</td><td>2.0000</td>" in text
