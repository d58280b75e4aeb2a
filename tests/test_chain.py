"""The collection chain under kill -9 (issue 28, "acknowledged means counted"): clients -> collector ->
streaming shuffler -> streaming frequency job -> SQLite store, on 127.0.0.1, each component a child process
in its own process group, each killed with SIGKILL and restarted in turn while the clients post.

Four clients post OLH reports (event times of the moment, rounded to the task's 10 s buckets) in Avro
requests of 50 with an ``Idempotency-Key`` each and retries (:mod:`tests.chain_helpers`); every seventh
request is posted a second time with its key. The collector is killed once a file is published; the
shuffler once a batch is published (and restarted on the same ``--output``: it resumes from its ledger);
the job once it runs on the shuffler's batches (and restarted on the same store: the killed run must not
block it, and it recomputes every window from the batch files). Then the clients stop, the collector is
stopped with SIGTERM, and the shuffler and the job end by their ``--streaming_duration`` (the DirectRunner:
the job's panes come when its watch ends).

Asserted, report by report where the reports carry an identity (an OLH report's seed): every request
acknowledged with 200 is in exactly one finished collector file and exactly one shuffled batch (repeats
removed by the idempotency keys), batches published before the shuffler's kill are never rewritten, and
the store's final windows hold exactly the acknowledged reports: per window, the report count and the
estimates the aggregator computes in memory from the acknowledged reports of that window. Each component
balances its own counts: collector requests received = accepted + duplicates + rejected and reports
accepted = written; shuffler read = forwarded + already published + withheld + dead-lettered (with nothing
withheld or dead-lettered); job read = accepted + rejected (nothing rejected).

Integration tier (processes, about two to three minutes on two cores).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import socket
import time
from collections import Counter
from pathlib import Path

import fastavro
import numpy as np
import pytest

from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window, make_aggregator
from ldp.shuffle.provenance import new_key_file
from ldp.task import parse_task
from store import open_store
from tests.chain_helpers import Clients, Component, python_cmd, wait_healthy

pytestmark = [pytest.mark.integration]

PRECISION_S = 10  # the shuffler's buckets
WINDOW_S = 20  # the job's windows: two buckets
CLIENTS, REQUESTS, PER_REQUEST, GAP_S = 4, 40, 50, 1.0  # 8,000 reports over about 40 s
SHUFFLER_LATENESS_S = 15  # longer than the shuffler's restart, so no bucket is closed while it is down
TASK = {
    "task_id": "chain-olh",
    "mechanism": "olh",
    "epsilon": 2.0,
    "domain_size": 8,
    "anonymity": {"shuffled": True, "time_precision_s": PRECISION_S, "min_reports": 100, "delta": 1e-6},
    "window": {"size_s": WINDOW_S},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seeds(paths) -> Counter:
    out: Counter = Counter()
    for p in paths:
        with open(p, "rb") as fh:
            out.update(int(r["seed"]) for r in fastavro.reader(fh))
    return out


def _batch_stats(out: Path) -> dict[str, tuple[int, int, str]]:
    res = {}
    for p in sorted(glob.glob(str(out / "batches" / "batch-*.avro"))):
        st = os.stat(p)
        digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
        res[os.path.basename(p)] = (st.st_ino, st.st_mtime_ns, digest)
    return res


def _last_json_line(text: str) -> dict:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON summary line in: {text[-2000:]}")


def _panes(url: str) -> int:
    path = url[len("sqlite:///") :]
    if not os.path.exists(path):
        return 0
    try:
        with open_store(url, create=False, shared=False) as st:
            return len(st._b.query("SELECT pane_index FROM ldp_panes"))
    except Exception:  # noqa: BLE001 - not created yet, or locked for a moment
        return 0


def _until(deadline: float, pred, step: float = 0.3) -> bool:
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


# The chain runs on Prism: the streaming shuffler from a watched directory is refused on the DirectRunner
# (its FnApiRunner fires a bucket's timer with the bucket's first file; tests/test_shuffler_restart.py).
@pytest.mark.prism
def test_chain_survives_kill_9_of_every_component_and_counts_each_acknowledged_report_once(tmp_path: Path):
    base = tmp_path
    beam_runner = ["--runner=PrismRunner"]
    (base / "task.json").write_text(json.dumps(TASK))
    task = parse_task(TASK)
    key = base / "shuffle.key"
    new_key_file(key)
    port = _free_port()
    reports, shuffled, est = base / "reports", base / "shuffled", base / "est"
    store_url = f"sqlite:///{base}/estimates.db"

    def shuffler_cmd(duration: float) -> list[str]:
        return python_cmd(
            "pipelines.shuffle", "--task", str(base / "task.json"), "--streaming",
            "--input", str(reports / "*.avro"), "--require_done_marker", "--watch_interval", "1",
            "--streaming_duration", f"{duration:.0f}", "--allowed_lateness", str(SHUFFLER_LATENESS_S),
            "--output", str(shuffled), "--shuffle_key", str(key), *beam_runner,
        )  # fmt: skip

    def job_cmd(duration: float) -> list[str]:
        return python_cmd(
            "pipelines.frequency", "--task", str(base / "task.json"), "--streaming",
            "--input", str(shuffled / "batches" / "*.avro"), "--watch_interval", "1",
            "--streaming_duration", f"{duration:.0f}", "--accumulating", "--allowed_lateness", "60",
            "--output", str(est), "--overwrite", "--store", store_url, "--shuffle_key", str(key),
            "--progress_interval", "5", *beam_runner,
        )  # fmt: skip

    collector = Component("collector", python_cmd(
        "pipelines.collect", "--task", str(base / "task.json"), "--output_dir", str(reports),
        "--port", str(port), "--roll_seconds", "1", "--max_batch", str(PER_REQUEST),
    ), base)  # fmt: skip
    shuffler = Component("shuffler", shuffler_cmd(600), base)
    job = Component("job", job_cmd(600), base)
    components = (collector, shuffler, job)
    clients = Clients(task, f"http://127.0.0.1:{port}/v1/reports", n=CLIENTS, requests=REQUESTS,
                      per_request=PER_REQUEST, gap_s=GAP_S, precision_s=PRECISION_S, seed=28)  # fmt: skip
    events: list[str] = []
    try:
        collector.start()
        wait_healthy(port, collector)
        shuffler.start()
        job.start()
        for c, ready in ((shuffler, "shuffler: task"), (job, "running on")):
            assert c.wait_for_log(ready, 120), f"{c.name} did not start: {c.log()[-3000:]}"
        t0 = time.monotonic()
        post_end = t0 + REQUESTS * GAP_S
        clients.start()

        # 1. the collector, once it has published a file
        assert _until(t0 + 20, lambda: bool(glob.glob(str(reports / "collect-*.avro.done")))), "no file"
        time.sleep(1.5)
        collector.kill9()
        events.append(f"{time.monotonic() - t0:.1f} s: collector killed")
        collector.start()
        wait_healthy(port, collector)
        events.append(f"{time.monotonic() - t0:.1f} s: collector back")

        # 2. the shuffler, once it has published a batch
        published = _until(post_end - 8, lambda: bool(_batch_stats(shuffled)))
        assert published, f"the shuffler published no batch in time: {shuffler.log()[-3000:]}"
        shuffler.kill9()
        before = _batch_stats(shuffled)
        events.append(f"{time.monotonic() - t0:.1f} s: shuffler killed after {len(before)} batch(es)")
        shuffler_end = post_end + 12
        shuffler.start(shuffler_cmd(max(20.0, shuffler_end - time.monotonic())))

        # 3. the job, once it has written a pane to the store (the restarted run must replace the killed
        # run's windows, not add to them)
        assert _until(post_end + 30, lambda: _panes(store_url) > 0), f"no pane: {job.log()[-3000:]}"
        events.append(f"{time.monotonic() - t0:.1f} s: {_panes(store_url)} pane(s) in the store")
        job.kill9()
        events.append(f"{time.monotonic() - t0:.1f} s: job killed")
        job.start(job_cmd(max(30.0, shuffler_end + 30 - time.monotonic())))

        clients.join(REQUESTS * GAP_S + 120)
        events.append(f"{time.monotonic() - t0:.1f} s: clients done")
        assert collector.stop() == 0, collector.log()[-3000:]
        assert shuffler.wait(240) == 0, shuffler.log()[-5000:]
        events.append(f"{time.monotonic() - t0:.1f} s: shuffler ended")
        assert job.wait(240) == 0, job.log()[-5000:]
        events.append(f"{time.monotonic() - t0:.1f} s: job ended")
    finally:
        for c in components:
            c.cleanup()
    print("\n".join(events))

    # -- clients: every request acknowledged, every repeat answered as a duplicate ----------------------
    assert clients.failed == [], clients.failed
    acked = clients.acked
    assert len(acked) == CLIENTS * REQUESTS
    assert clients.duplicates == CLIENTS * (REQUESTS // 7)
    want = Counter(int(s) for a in acked for s in a.seeds)
    n_acked = CLIENTS * REQUESTS * PER_REQUEST
    assert sum(want.values()) == n_acked

    # -- collector: its last run balances; every acknowledged report in exactly one finished file --------
    summary = _last_json_line(collector.log())
    assert summary["received"] == summary["accepted"] + summary.get("duplicates", 0) + summary["rejected"]
    assert summary["reports_accepted"] == summary["reports_written"] and summary["reports_open"] == 0
    files = sorted(glob.glob(str(reports / "collect-*.avro")))
    assert all(os.path.exists(f + ".done") for f in files)
    assert not glob.glob(str(reports / "*.tmp")) and not glob.glob(str(reports / ".*.tmp"))
    assert _seeds(files) == want, "the collector's files do not hold exactly the acknowledged reports"

    # -- shuffler: nothing published was rewritten; every acknowledged report in exactly one batch -------
    after = _batch_stats(shuffled)
    assert {name: after[name] for name in before} == before, "a batch published before the kill changed"
    s = json.loads((shuffled / "counts.json").read_text())
    c = s["counts"]
    assert s["balanced"] is True
    assert c["read"] == c["forwarded"] + c.get("already_published", 0) + c["withheld"] + c["dead_lettered"]
    logs = [shuffler.log(k) for k in range(shuffler.started)]
    published = [ln for text in logs for ln in text.splitlines() if "transforms.shuffle: published" in ln]
    assert (c["withheld"], c["dead_lettered"]) == (0, 0), (
        f"the shuffler withheld {c['withheld']} acknowledged report(s) ({c['withheld_late']} late, "
        f"{c['withheld_short']} in short buckets) and dead-lettered {c['dead_lettered']}; its publications: "
        + "; ".join(published)
    )
    batches = sorted(glob.glob(str(shuffled / "batches" / "batch-*.avro")))
    assert _seeds(batches) == want, "the shuffled batches do not hold exactly the acknowledged reports"

    # -- job: its last run read every batch whole and balances ---------------------------------------------
    j = json.loads((est / "counts.json").read_text())
    jc = j["counts"]
    assert jc["read"] == jc["accepted"] + jc["rejected"] and jc["rejected"] == 0, jc
    assert jc["accepted"] == n_acked, jc

    # -- store: every window final, holding exactly the acknowledged reports of its time -----------------
    agg = make_aggregator(task)
    per_window: dict[int, GroupAccumulators] = {}
    counts: Counter = Counter()
    for a in acked:
        w = a.event_ms // (WINDOW_S * 1000) * WINDOW_S * 1000
        per_window[w] = accumulate(agg, per_window.get(w, GroupAccumulators()), 0, a.reports)
        counts[w] += len(a.seeds)
    with open_store(store_url, create=False, shared=False) as st:
        windows = {w["window_start"]: w for w in st.windows(task.task_id, limit=1000)}
        assert sorted(windows) == sorted(counts)
        for start, w in windows.items():
            assert w["is_final"] == 1, w
            assert w["n_reports"] == counts[start], (start, w["n_reports"], counts[start])
            (row,) = finalize_window(agg, per_window[start], WindowInfo(start, start + WINDOW_S * 1000))
            cur = st.current(task.task_id, start, start + WINDOW_S * 1000)
            got = sorted((r["item"], r["estimate"]) for r in cur if r["output"] == "estimates")
            np.testing.assert_allclose([e for _, e in got], row.frequencies, rtol=0, atol=1e-12)
        runs = {r["run_id"]: r["status"] for r in st.runs(task.task_id)}
    assert sorted(runs.values()) == ["dead", "ended"], runs  # the killed run, dead; the last one, ended
