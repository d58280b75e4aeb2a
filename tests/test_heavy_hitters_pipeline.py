"""The heavy_hitters kind through the jobs: the simulator's report files, the generic job entry point
``ldp-beam heavy-hitters`` (DirectRunner) in batch and streaming over a watched directory, the rows
(JSON Lines and Avro), the store and ``ldp-beam show``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import fastavro
import numpy as np
import pytest

from ldp.task import load_task
from simulator import simulate_files
from store import open_store

pytestmark = [pytest.mark.integration]

#: Zipf(1.5) over 200 random 3-byte strings: the four most frequent hold about 41%, 15%, 8% and 5% of the
#: users. At eps 4 (g = 64) with 40,000 users a level holds at least 9,000 reports, so a 5% string stands
#: at least 15 null standard deviations (sd <= 0.0029) above the level's cut (the 2048-th of 2**22 null
#: prefixes, about 3.3 sd; the publication rule's cut at most about 4 sd): missing one has probability
#: below 1e-20, so recall of these four is certain.
TASK = {"task_id": "words", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0, "max_length": 3,
        "top_k": 10}
DATASET = "zipf-strings:1.5:200"
FREQUENT = 0.05


def _task_file(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps({**TASK, **extra}), encoding="utf-8")
    return path


def _jsonl(out: Path) -> list[dict]:
    rows = []
    for f in sorted(out.glob("estimates-*.jsonl")):
        rows += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows


def _found(row: dict, truth: dict, threshold: float) -> None:
    """Every true string at or above ``threshold`` is published, its estimate within 5 std of its truth."""
    published = {h["value"]: h for h in row["heavy_hitters"]}
    frequent = [t for t in truth["heavy_hitters"] if t["frequency"] >= threshold]
    assert frequent, truth["heavy_hitters"][:5]
    for t in frequent:
        assert t["value"] in published, (t, list(published))
        h = published[t["value"]]
        assert abs(h["estimate"] - t["frequency"]) < 5 * h["std"], (t, h)
    estimates = [h["estimate"] for h in row["heavy_hitters"]]
    assert estimates == sorted(estimates, reverse=True)


def test_a_batch_job_finds_the_frequent_strings(tmp_path: Path, capsys, monkeypatch) -> None:
    from pipelines import cli, show

    task_file = _task_file(tmp_path)
    truth = simulate_files(load_task(task_file), 40_000, DATASET, tmp_path / "sim", seed=3, files=3,
                           inject_bad=1)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cli.main names the command in sys.argv
    db = tmp_path / "store.db"
    assert cli.main(["heavy-hitters", "--task", str(task_file), "--input", str(tmp_path / "sim" / "*.avro"),
                     "--output", str(tmp_path / "out"), "--store", f"sqlite:///{db}"]) == 0
    summary = json.loads((tmp_path / "out" / "counts.json").read_text())
    assert summary["kind"] == "heavy_hitters" and summary["counts"]["accepted"] == 40_000
    assert summary["counts"]["rejected"] == sum(truth["bad_records"].values())
    (row,) = _jsonl(tmp_path / "out")
    assert row["row_schema"] == "heavy_hitters_estimate" and row["n_reports"] == 40_000
    assert sum(lv["reports"] for lv in row["levels"]) == 40_000
    _found(row, truth, FREQUENT)
    (avro,) = (tmp_path / "out").glob("estimates-*.avro")
    with open(avro, "rb") as fh:
        (record,) = list(fastavro.reader(fh))
    assert record["heavy_hitters"] == row["heavy_hitters"]
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        got = store._b.query("SELECT label, estimate FROM ldp_current WHERE task_id = 'words' "
                             "ORDER BY estimate DESC")
    finally:
        store.close()
    assert [(g["label"], g["estimate"]) for g in got] == [(h["value"], h["estimate"])
                                                          for h in row["heavy_hitters"]]
    capsys.readouterr()
    assert show.run([str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "published strings by estimated frequency" in text
    assert row["heavy_hitters"][0]["value"] in text


def test_a_streaming_job_over_a_watched_directory_stores_each_windows_strings(tmp_path: Path,
                                                                              monkeypatch) -> None:
    """Two 10-second windows of reports, written before the job starts watching the directory; the store
    holds both windows, final, each with its own frequent strings."""
    from pipelines import cli

    task_file = _task_file(tmp_path)
    task = load_task(task_file)
    now = int(time.time() * 1000) // 10_000 * 10_000
    truths = []
    (tmp_path / "in").mkdir()
    for w in range(2):  # the same users' strings (a CSV file), fresh reports
        truths.append(simulate_files(task, None, _words_csv(tmp_path), tmp_path / f"sim{w}", seed=10 + w,
                                     files=1, start_ms=now - 20_000 + 10_000 * w, duration_s=9.0))
        (tmp_path / f"sim{w}" / "reports-00000-of-00001.avro").rename(tmp_path / "in" / f"w{w}.avro")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    db = tmp_path / "store.db"
    assert cli.main(["heavy-hitters", "--task", str(task_file), "--streaming", "--input",
                     str(tmp_path / "in" / "*.avro"), "--output", str(tmp_path / "out"),
                     "--window_size", "10", "--allowed_lateness", "60", "--watch_interval", "0.5",
                     "--streaming_duration", "6", "--store", f"sqlite:///{db}"]) == 0
    rows = _jsonl(tmp_path / "out")
    by_window: dict[int, dict] = {}
    for r in rows:  # the latest pane of each window
        if r["window_start"] not in by_window or r["pane_index"] > by_window[r["window_start"]]["pane_index"]:
            by_window[r["window_start"]] = r
    assert len(by_window) == 2
    for (_, row), truth in zip(sorted(by_window.items()), truths):
        assert row["n_reports"] == 40_000
        _found(row, truth, FREQUENT)
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        windows = store.windows("words")
        stored = {w["window_start"]: store.current("words", w["window_start"], w["window_end"])
                  for w in windows}
    finally:
        store.close()
    assert len(windows) == 2 and all(w["is_final"] == 1 for w in windows)
    for (_, row), (_, items) in zip(sorted(by_window.items()), sorted(stored.items())):
        items = sorted(items, key=lambda i: -i["estimate"])
        assert [i["label"] for i in items] == [h["value"] for h in row["heavy_hitters"]]
    top = [{i["item"] for i in items if i["label"] == "foo"} for items in stored.values()]
    assert len(top[0]) == 1 and top[0] == top[1]  # the most frequent string: one item in both windows



def _words_csv(tmp_path: Path) -> str:
    """``csv:PATH:word``: 40,000 rows, "foo" 30%, "bar" 20%, "baz" 10%, the rest random 3-letter strings
    (each far below 5%)."""
    path = tmp_path / "words.csv"
    if not path.exists():
        rng = np.random.default_rng(4)
        pick = rng.choice(4, size=40_000, p=[0.3, 0.2, 0.1, 0.4])
        other = ["".join(w) for w in rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=(40_000, 3))]
        words = [("foo", "bar", "baz")[k] if k < 3 else other[i] for i, k in enumerate(pick)]
        path.write_text("word\n" + "\n".join(words) + "\n", encoding="utf-8")
    return f"csv:{path}:word"
