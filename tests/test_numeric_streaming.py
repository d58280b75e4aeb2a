"""The numeric job in streaming mode (pipelines.numeric --streaming over a watched directory, DirectRunner)
with fixed windows and a SQLite store: every window reaches the store, final, with the numbers of the job's
estimate files, and each equals the core's estimate over that window's reports."""

from __future__ import annotations

import glob
import json
import shutil
import threading
import time
from pathlib import Path

import fastavro
import numpy as np
import pytest

from ldp import task as T
from ldp.aggregate import from_iso
from ldp.reports import Reports
from store import open_store

WINDOW_MS = 2000
TASK = {
    "task_id": "lat-stream",
    "kind": "numeric",
    "mechanism": "square-wave",
    "epsilon": 1.0,
    "params": {"bins": 64},
    "attributes": [{"name": "latency_ms", "low": 0, "high": 500}],
    "quantiles": [0.5, 0.9],
}


def _drop(src: str, watched: Path, name: str) -> None:
    """Moves a whole file into the watched directory (written aside, then renamed)."""
    shutil.copy(src, watched / f"{name}.tmp")
    (watched / f"{name}.tmp").rename(watched / name)


def _reports(stage: Path) -> tuple[np.ndarray, np.ndarray]:
    reals, times = [], []
    for path in sorted(stage.glob("reports-*.avro")):
        with open(path, "rb") as fh:
            for rec in fastavro.reader(fh):
                reals.append(rec["reals"][0])
                when = rec["event_time"]  # timestamp-millis: a datetime
                times.append(when if isinstance(when, int) else round(when.timestamp() * 1000))
    return np.asarray(reals, dtype=np.float64), np.asarray(times, dtype=np.int64)


@pytest.mark.integration
def test_numeric_streaming_watched_directory_writes_every_window_final_to_the_store(tmp_path):
    import simulator
    from pipelines import numeric
    from wire.records import now_ms

    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(TASK))
    task = T.load_task(task_file)
    stage, watched, out = tmp_path / "stage", tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    start = (now_ms() // WINDOW_MS) * WINDOW_MS
    simulator.simulate_files(
        task, 6000, "lognormal:4:0.8", stage, seed=20261201, files=2, start_ms=start, duration_s=4.0
    )
    files = sorted(glob.glob(str(stage / "reports-*.avro")))
    _drop(files[0], watched, "a.avro")

    def later() -> None:
        time.sleep(1.0)
        _drop(files[1], watched, "b.avro")

    mover = threading.Thread(target=later, daemon=True)
    mover.start()
    db = tmp_path / "store.db"
    summary = numeric.run(
        ["--task", str(task_file), "--streaming", "--input", str(watched / "*.avro"), "--output", str(out),
         "--watch_interval", "0.5", "--streaming_duration", "4", "--window_size", "2",
         "--allowed_lateness", "60", "--accumulating", "--store", f"sqlite:///{db}"]
    )  # fmt: skip
    mover.join()
    assert "DONE" in summary["state"]
    c = summary["counts"]
    assert c["read"] == c["accepted"] == 6000 and c.get("rejected", 0) == 0

    # the job's files: per window, its last pane (the most complete one, accumulating)
    rows = [json.loads(x) for f in sorted(glob.glob(str(out / "estimates-*.jsonl"))) for x in open(f)]
    last: dict[int, dict] = {}
    for row in rows:
        ws = from_iso(row["window_start"])
        if ws not in last or row["pane_index"] > last[ws]["pane_index"]:
            last[ws] = row
    assert len(last) >= 2 and sum(r["n_reports"] for r in last.values()) == 6000
    # ON_TIME panes within the allowed lateness are not the last ones Beam could fire; the store marks
    # each window final when the job's watermark passes its end plus the lateness (here: the job's end)
    assert all(r["pane_timing"] == "ON_TIME" for r in last.values())

    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        windows = store._b.query(
            "SELECT window_start, window_end, is_final, n_reports FROM ldp_windows WHERE task_id = ? "
            "ORDER BY window_start",
            (TASK["task_id"],),
        )
        current = store._b.query(
            "SELECT window_start, item, label, estimate, std, ci_low, ci_high, is_final FROM ldp_current "
            "WHERE task_id = ? AND output = 'numeric' AND grp = 0 ORDER BY window_start, item",
            (TASK["task_id"],),
        )
    finally:
        store.close()
    assert [w["window_start"] for w in windows] == sorted(last)
    assert all(w["is_final"] == 1 for w in windows)
    assert [w["n_reports"] for w in windows] == [last[ws]["n_reports"] for ws in sorted(last)]
    assert all(r["is_final"] == 1 for r in current)

    reals, times = _reports(stage)
    mech = task.make_mechanism()
    for ws in sorted(last):
        row = last[ws]
        assert from_iso(row["window_end"]) - ws == WINDOW_MS
        stored = [r for r in current if r["window_start"] == ws]
        assert [r["item"] for r in stored] == [0, 1, 2]
        assert [r["label"] for r in stored] == ["mean", "q0.5", "q0.9"]
        mean = stored[0]
        assert (mean["estimate"], mean["std"]) == (row["mean"], row["mean_std"])
        assert (mean["ci_low"], mean["ci_high"]) == (row["mean_ci_low"], row["mean_ci_high"])
        for s, q in zip(stored[1:], row["quantiles"], strict=True):
            assert (s["estimate"], s["ci_low"], s["ci_high"]) == (q["value"], q["ci_low"], q["ci_high"])
        # the core over the window's reports: exact integer accumulators, so equality, not closeness
        inside = (times >= ws) & (times < ws + WINDOW_MS)
        acc = mech.add(mech.create_accumulator(), Reports(reals=reals[inside]))
        est = mech.estimate(acc, attribute="latency_ms", quantiles=task.quantiles)
        assert row["n_reports"] == int(inside.sum())
        assert row["mean"] == est.mean and row["mean_std"] == est.mean_std
        assert [q["value"] for q in row["quantiles"]] == [q.value for q in est.quantiles]
