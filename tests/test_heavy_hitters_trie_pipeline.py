"""The heavy_hitters kind's trie mode through a live streaming job: ``ldp-beam heavy-hitters --streaming
--trie_dir DIR`` on Prism over a watched directory, fed one file per window by the simulator with
``--trie DIR`` (each file's clients report at the level the job published last). One round: level 0,
level 1, the verification level; the store holds each window's trie rows (prefix bits growing) and the
verification window's heavy hitters. Also the job's one-line errors (--trie_dir, no event-time window),
and a batch job restarted after two windows: it resumes the trie from its newest publication (the third
window's row equals the uninterrupted run's) or, with --overwrite, starts afresh."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ldp.aggregate import from_iso
from ldp.task import load_task
from pipelines.live import ChildJob
from simulator import simulate_files
from store import open_store
from transforms.runners import find_prism_binary
from wire.publication import read_latest

pytestmark = [pytest.mark.integration]

#: max_length 3: search levels 0 and 1, then the verification level (a round of three windows).
TASK = {"task_id": "trie-words", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0,
        "max_length": 3, "top_k": 10, "mode": "trie"}  # fmt: skip
WINDOW_S = 6
#: "foo" 30%, "bar" 20%, "baz" 10% of 20,000 users, the rest random 3-letter strings (each below 0.1%):
#: at eps 4 every window's 20,000 reports sit at one level, so the three stand far above any null prefix.
TOP = ("foo", "bar", "baz")


def _words_csv(tmp_path: Path) -> str:
    path = tmp_path / "words.csv"
    rng = np.random.default_rng(30)
    pick = rng.choice(4, size=20_000, p=[0.3, 0.2, 0.1, 0.4])
    other = ["".join(w) for w in rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=(20_000, 3))]
    words = [TOP[k] if k < 3 else other[i] for i, k in enumerate(pick)]
    path.write_text("word\n" + "\n".join(words) + "\n", encoding="utf-8")
    return f"csv:{path}:word"


def _task_file(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps({**TASK, **extra}), encoding="utf-8")
    return path


def _wait(what: str, cond, job: ChildJob, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while not cond():
        assert job.running(), f"the job stopped while waiting for {what}:\n{job.tail(40)}"
        assert time.time() < deadline, f"no {what} after {timeout_s} s:\n{job.tail(40)}"
        time.sleep(0.1)


def _generation(pub: Path) -> int:
    latest = read_latest(pub, task_id=TASK["task_id"])
    return 0 if latest is None else int(latest["generation"])


def _feed_window(task, dataset: str, pub: Path, incoming: Path, k: int) -> dict:
    """One file of the dataset's users, event times in the next second of the current window (the next
    window when too little of this one is left), at the level the job published last."""
    now_ms = int(time.time() * 1000) + 300
    window_end = (now_ms // (WINDOW_S * 1000) + 1) * WINDOW_S * 1000
    if window_end - now_ms < 1500:
        time.sleep((window_end - now_ms + 300) / 1000)
        now_ms = int(time.time() * 1000) + 300
    truth = simulate_files(task, None, dataset, incoming.parent / f"sim{k}", seed=40 + k, files=1,
                           start_ms=now_ms, duration_s=1.0, trie_dir=pub)  # fmt: skip
    (incoming.parent / f"sim{k}" / "reports-00000-of-00001.avro").rename(incoming / f"w{k}.avro")
    return truth


def _stored(db: Path) -> tuple[list[dict], list[dict]]:
    """Per stored window (oldest first) its current rows and panes; the run's counts windows."""
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        out = []
        for w in sorted(store.windows(TASK["task_id"]), key=lambda w: w["window_start"]):
            bounds = (TASK["task_id"], w["window_start"], w["window_end"])
            out.append({"window": w, "rows": store.current(*bounds), "panes": store.panes(*bounds)})
        counts = store.counts(TASK["task_id"])
    finally:
        store.close()
    return out, counts


@pytest.mark.prism
def test_a_live_trie_round_grows_the_trie_and_publishes_the_heavy_hitters(tmp_path: Path) -> None:
    if find_prism_binary() is None:
        pytest.skip("no Prism binary (bash tools/prism/get_prism.sh builds it; docs/live.md)")
    task_file = _task_file(tmp_path)
    task = load_task(task_file)
    dataset = _words_csv(tmp_path)
    incoming, out, pub, db = tmp_path / "in", tmp_path / "out", tmp_path / "pub", tmp_path / "store.db"
    incoming.mkdir()
    cmd = [
        sys.executable, "-m", "pipelines.job", "heavy_hitters", "--task", str(task_file), "--streaming",
        "--input", str(incoming / "*.avro"), "--watch_interval", "0.5", "--output", str(out),
        "--window_size", str(WINDOW_S), "--counts_window", str(WINDOW_S), "--trie_dir", str(pub),
        "--store", f"sqlite:///{db}", "--runner=PrismRunner", "--streaming_duration", "150",
    ]  # fmt: skip
    job = ChildJob(cmd, tmp_path / "job.log")
    sent = 0
    try:
        _wait("job start", lambda: (out / ".ldp-beam-output.json").exists(), job, 60)
        for k in range(task.n_groups):  # level 0, level 1, verification: each after the last publication
            truth = _feed_window(task, dataset, pub, incoming, k)
            assert truth["trie_levels"] == [k], truth["trie_levels"]
            sent += truth["n_users"]
            _wait(f"publication {k + 1}", lambda k=k: _generation(pub) >= k + 1, job, 40)

        def stored() -> bool:
            windows, counts = _stored(db)
            return len(windows) == task.n_groups and sum(c["accepted"] for c in counts) == sent

        _wait("the store's rows and counts", stored, job, 30)
    finally:
        job.stop()
    windows, counts = _stored(db)
    assert sum(c["read"] for c in counts) == sum(c["accepted"] + c["rejected"] for c in counts) == sent
    bits = []
    for k, w in enumerate(windows):
        (trie,) = [p for p in w["panes"] if p["output"] == "heavy_hitters_trie"]
        assert trie["grp"] == k and trie["n_reports"] == 20_000, trie  # group = the level scored
        extra = trie["extra"]
        assert extra["generation"] == k + 1 and extra["stale_reports"] == 0, extra
        assert extra["status"] == ("verify" if k == task.n_groups - 1 else "search"), extra
        prefixes = [r for r in w["rows"] if r["output"] == "heavy_hitters_trie"]
        assert prefixes and {r["grp"] for r in prefixes} == {k}
        bits.append(extra["prefix_bits"])
    assert bits[0] < bits[1] <= bits[2], bits  # the trie grows to the full values
    found = {r["label"] for r in windows[-1]["rows"] if r["output"] == "heavy_hitters"}
    assert set(TOP) <= found, found
    latest = read_latest(pub, task_id=TASK["task_id"])
    assert latest["generation"] == task.n_groups and latest["level"] == 0  # a new round next
    assert set(TOP) <= {p["value"] for p in latest["prefixes"]}


@pytest.mark.parametrize(
    "extra, flags, message",
    [
        ({"mode": "one_window"}, ["--trie_dir", "pub"], "--trie_dir needs a task in trie mode"),
        ({}, ["--trie_dir", "file/sub"], "cannot be created"),
        ({}, ["--trie_dir", "old"], "cannot resume the trie: a publication of task None, not of task"),
        ({}, ["--trie_start", "fresh"], "--trie_start fresh needs --trie_dir"),
        ({}, ["--streaming", "--early_firing", "2", "--streaming_duration", "3"], "needs event-time windows"),
    ],
)
def test_trie_job_errors_are_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch, extra, flags,
                                                 message) -> None:  # fmt: skip
    from pipelines import cli

    (tmp_path / "file").write_text("x")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "latest.json").write_text('{"generation": 4}')
    (tmp_path / "in.avro").write_bytes(b"")
    task_file = _task_file(tmp_path, **extra)
    flags = [str(tmp_path / f) if f in ("pub", "file/sub", "old") else f for f in flags]
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with pytest.raises(SystemExit) as e:
        cli.main(["heavy-hitters", "--task", str(task_file), "--input", str(tmp_path / "in.avro"),
                  "--output", str(tmp_path / "out"), *flags])  # fmt: skip
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


# ------------------------------------------------------------------------- a restarted batch job resumes


def _window_file(task, directory: Path, k: int, level: int) -> None:
    """Window ``k`` (``[60 k, 60 k + 60)`` s): 6,000 users of the words dataset, at ``level``."""
    from ldp.kinds.heavy_hitters.aggregate import encode_values
    from wire.records import encode_report_container, reports_to_records

    rng = np.random.default_rng(70 + k)
    pick = rng.choice(4, size=6_000, p=[0.3, 0.2, 0.1, 0.4])
    other = ["".join(w) for w in rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=(6_000, 3))]
    values = [TOP[j] if j < 3 else other[i] for i, j in enumerate(pick)]
    reports, groups = encode_values(task, values, rng=rng, level=level)
    records = reports_to_records(task.task_id, reports, np.full(6_000, 60_000 * k + 1_000), groups)
    directory.mkdir(exist_ok=True)
    (directory / f"w{k}.avro").write_bytes(encode_report_container(records))


def _run_job(tmp_path: Path, monkeypatch, inputs: str, out: str, *flags: str) -> dict[int, dict]:
    """One batch job of the trie task over ``inputs`` (a glob under ``tmp_path``); its rows by window."""
    from pipelines import cli

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    cli.main(["heavy-hitters", "--task", str(tmp_path / "task.json"), "--input", str(tmp_path / inputs),
              "--output", str(tmp_path / out), "--window_size", "60", "--trie_dir", str(tmp_path / "pub"),
              "--log_level", "WARNING", *flags])  # fmt: skip
    rows = [json.loads(line) for f in sorted((tmp_path / out).glob("estimates-*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    return {from_iso(r["window_start"]) // 60_000: r for r in rows}


def test_a_restarted_batch_job_resumes_the_trie_or_starts_afresh(tmp_path: Path, monkeypatch, caplog) -> None:
    task = load_task(_task_file(tmp_path))
    for k in range(3):  # level 0, level 1, the verification level: a round without a restart
        _window_file(task, tmp_path / ("first" if k < 2 else "second"), k, level=k)
    (tmp_path / "all").mkdir()
    for f in [*(tmp_path / "first").iterdir(), *(tmp_path / "second").iterdir()]:
        (tmp_path / "all" / f.name).write_bytes(f.read_bytes())

    whole = _run_job(tmp_path, monkeypatch, "all/*.avro", "whole")
    assert [whole[k]["trie"]["status"] for k in range(3)] == ["search", "search", "verify"]
    assert set(TOP) <= {h["value"] for h in whole[2]["heavy_hitters"]}
    shutil.rmtree(tmp_path / "pub")

    first = _run_job(tmp_path, monkeypatch, "first/*.avro", "run1")  # then the job is stopped
    assert first == {k: whole[k] for k in range(2)}
    assert read_latest(tmp_path / "pub", TASK["task_id"])["level"] == 2
    # restarted over every file: windows 0 and 1 are late (already stepped), window 2 resumes
    caplog.clear()
    second = _run_job(tmp_path, monkeypatch, "all/*.avro", "run2")
    assert second == {2: whole[2]}
    late = [r for r in caplog.records if "came after the window was stepped" in r.getMessage()]
    windows = sorted(re.search(r"T(\S+) pane", r.getMessage()).group(1) for r in late)
    assert windows == ["00:00:00Z..00:01:00Z", "00:01:00Z..00:02:00Z"], late
    latest = read_latest(tmp_path / "pub", TASK["task_id"])
    assert latest["generation"] == 3 and latest["round"] == 1 and latest["level"] == 0

    # --overwrite (the same output directory): the publications removed, the trie afresh at level 0, so
    # window 2's reports at level 2 are stale
    fresh = _run_job(tmp_path, monkeypatch, "second/*.avro", "run2", "--overwrite")
    assert fresh[2]["trie"]["status"] == "no_reports" and fresh[2]["trie"]["stale_reports"] == 6_000
    assert sorted(p.name for p in (tmp_path / "pub").iterdir()) == ["generation-000001.json", "latest.json"]
