"""The shuffler never unpublishes: restarts, reruns, kill -9, and the guards around its output.

* a batch rerun on the same output skips every published bucket (no file rewritten: inode, mtime and
  sha256 unchanged), counts the re-read reports ``already_published``, and publishes only buckets that
  were short before and are full now; an input added later to a published bucket is withheld as late;
* ``--overwrite`` is refused over published batches, an output of another task is refused, and a second
  shuffler on a locked output is refused (one line, exit 2);
* the streaming shuffler killed with SIGKILL mid-run and restarted on the same output: every batch
  published before the kill is untouched and every report is in exactly one batch.

Whole job runs and processes: integration tier.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import fastavro
import pytest

import simulator
from ldp.shuffle.provenance import new_key_file
from ldp.task import parse_task
from pipelines import shuffle
from tests.conftest import REPO_ROOT, venv_env

pytestmark = [pytest.mark.integration]

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PRECISION_S = 60
MIN_REPORTS = 100
TASK = {
    "task_id": "restart-olh",
    "mechanism": "olh",
    "epsilon": 2.0,
    "domain_size": 16,
    "anonymity": {"shuffled": True, "time_precision_s": PRECISION_S, "min_reports": MIN_REPORTS},
}


def _bucket_file(base: Path, k: int, users: int, seed: int, name: str | None = None) -> Path:
    """``users`` simulated reports inside bucket ``k``, written to ``base/stage`` (not watched)."""
    stage = base / "stage" / f"{k}-{seed}"
    simulator.simulate_files(parse_task(TASK), users, "zipf", stage, seed=seed, files=1,
                            start_ms=T0 + k * PRECISION_S * 1000, duration_s=float(PRECISION_S))  # fmt: skip
    src = stage / "reports-00000-of-00001.avro"
    return src if name is None else src.rename(stage / name)


def _seeds(paths) -> Counter:
    out: Counter = Counter()
    for p in paths:
        with open(p, "rb") as fh:
            out.update(r["seed"] for r in fastavro.reader(fh))
    return out


def _stats(out: Path) -> dict[str, tuple[int, int, str]]:
    """Each published batch: (inode, mtime in ns, sha256 of its bytes)."""
    res = {}
    for p in sorted(glob.glob(str(out / "batches" / "batch-*.avro"))):
        st = os.stat(p)
        res[os.path.basename(p)] = (
            st.st_ino,
            st.st_mtime_ns,
            hashlib.sha256(Path(p).read_bytes()).hexdigest(),
        )
    return res


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "task.json").write_text(json.dumps(TASK))
    (tmp_path / "in").mkdir()
    new_key_file(tmp_path / "shuffle.key")
    return tmp_path


def _run(base: Path, *extra: str) -> dict:
    return shuffle.run(["--task", str(base / "task.json"), "--input", str(base / "in" / "*.avro"),
                        "--output", str(base / "out"), "--shuffle_key", str(base / "shuffle.key"),
                        *extra])  # fmt: skip


def test_batch_rerun_skips_published_buckets_and_never_rewrites(base: Path):
    for k in range(3):
        os.replace(_bucket_file(base, k, 300, 10 + k), base / "in" / f"b{k}.avro")
    os.replace(_bucket_file(base, 3, 60, 20), base / "in" / "b3-first.avro")  # short: withheld
    first = _run(base)
    assert (first["counts"]["forwarded"], first["counts"]["withheld_short"], first["batches"]) == (900, 60, 3)
    before = _stats(base / "out")

    # the same inputs again: everything already published, nothing written
    again = _run(base)
    c = again["counts"]
    assert (c["forwarded"], c["already_published"], c["withheld_short"]) == (0, 900, 60)
    assert again["balanced"] is True and again["resumed"] is True and again["batches_this_run"] == 0
    assert _stats(base / "out") == before
    assert len(glob.glob(str(base / "out" / "runs" / "*" / "counts.json"))) == 1  # the first run's, kept

    # more inputs: the short bucket fills up and is published; a late file of a published bucket is withheld
    os.replace(_bucket_file(base, 3, 60, 21), base / "in" / "b3-second.avro")
    os.replace(_bucket_file(base, 0, 50, 22), base / "in" / "b0-late.avro")
    third = _run(base)
    c = third["counts"]
    assert (c["forwarded"], c["already_published"], c["withheld_late"], c["withheld_short"]) == (
        120,
        900,
        50,
        0,
    )
    assert third["balanced"] is True and third["batches"] == 4 and third["batches_this_run"] == 1
    after = _stats(base / "out")
    assert {k: after[k] for k in before} == before
    inputs = [p for p in glob.glob(str(base / "in" / "*.avro")) if not p.endswith("b0-late.avro")]
    assert _seeds(glob.glob(str(base / "out" / "batches" / "*.avro"))) == _seeds(inputs)
    manifest = [json.loads(x) for x in (base / "out" / "batches.jsonl").read_text().splitlines()]
    assert sorted(m["n"] for m in manifest) == [120, 300, 300, 300]


def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as ei:
        shuffle.run(argv)
    assert ei.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and re.search(pattern, err[0]), err


def test_overwrite_another_task_and_a_second_shuffler_are_refused(base: Path, capsys):
    os.replace(_bucket_file(base, 0, 300, 1), base / "in" / "b0.avro")
    _run(base)
    before = _stats(base / "out")
    args = [
        "--task",
        str(base / "task.json"),
        "--input",
        str(base / "in" / "*.avro"),
        "--output",
        str(base / "out"),
        "--shuffle_key",
        str(base / "shuffle.key"),
    ]
    _fails(capsys, [*args, "--overwrite"], r"holds 1 published batch\(es\), which are never deleted")
    other = {**TASK, "anonymity": {**TASK["anonymity"], "min_reports": 50}}
    (base / "other.json").write_text(json.dumps(other))
    _fails(
        capsys, ["--task", str(base / "other.json"), *args[2:]], r"another task or settings: min_reports 100"
    )
    with open(base / "out" / "state" / "lock", "a+b") as held:  # a shuffler running on the output
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        _fails(capsys, args, r"in use by another shuffler")
    _fails(capsys, [*args, "--output", "gs://bucket/out"], r"local directory")
    assert _stats(base / "out") == before


def _shuffler(base: Path, duration: float) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipelines.shuffle", "--task", str(base / "task.json"), "--streaming",
           "--input", str(base / "in" / "*.avro"), "--require_done_marker", "--watch_interval", "1",
           "--streaming_duration", str(duration), "--output", str(base / "out"),
           "--shuffle_key", str(base / "shuffle.key"), "--runner=PrismRunner"]  # fmt: skip
    log = open(base / f"shuffler-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 - closed by the process' end
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=venv_env(), stdout=log, stderr=subprocess.STDOUT)


def _publish(path: Path, dest: Path) -> None:
    os.replace(path, dest)
    (dest.parent / (dest.name + ".done")).touch()


def test_streaming_shuffler_from_a_directory_is_refused_on_the_direct_runner(base: Path, capsys):
    """The DirectRunner's FnApiRunner fires a bucket's timer with the bundle of the bucket's first file:
    the streaming shuffler from a watched directory would publish part of a bucket, so it is refused."""
    argv = ["--task", str(base / "task.json"), "--streaming", "--input", str(base / "in" / "*.avro"),
            "--streaming_duration", "5", "--output", str(base / "out"),
            "--shuffle_key", str(base / "shuffle.key")]  # fmt: skip
    _fails(capsys, argv, r"does not run on the DirectRunner .* run it on Prism")
    _fails(capsys, [*argv, "--runner=DirectRunner"], r"does not run on the DirectRunner")
    assert not (base / "out" / "batches").exists()


@pytest.mark.prism
def test_streaming_shuffler_killed_mid_run_resumes_without_rewriting_or_duplicating(base: Path):
    """Six buckets of 300 reports arrive one file at a time (with done markers). The shuffler is killed
    with SIGKILL once at least two batches are out and while files are still arriving; a file also
    arrives while it is down. Restarted on the same output, it publishes the remaining buckets: the
    earlier batches keep their inode, mtime and bytes, and every report is in exactly one batch."""
    files = [_bucket_file(base, k, 300, 40 + k) for k in range(6)]
    proc = _shuffler(base, 120)
    try:
        _publish(files[0], base / "in" / "b0.avro")
        k, deadline = 1, time.monotonic() + 90
        while time.monotonic() < deadline:
            out = glob.glob(str(base / "out" / "batches" / "batch-*.avro"))
            if len(out) >= 2 and k >= 3:
                break
            if k < 5 and len(out) >= k - 1:
                _publish(files[k], base / "in" / f"b{k}.avro")
                k += 1
            time.sleep(0.3)
        if k < 4:  # a file read but whose bucket is maybe not yet published
            _publish(files[k], base / "in" / f"b{k}.avro")
            k += 1
        time.sleep(1.5)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _stats(base / "out")
    assert 2 <= len(before) < 6
    n_before = 300 * len(before)
    while k < 6:  # arrive while the shuffler is down
        _publish(files[k], base / "in" / f"b{k}.avro")
        k += 1

    proc = _shuffler(base, 12)
    assert proc.wait(timeout=180) == 0, (base / "out").as_posix()
    summary = json.loads((base / "out" / "counts.json").read_text())
    c = summary["counts"]
    assert summary["resumed"] is True and summary["balanced"] is True
    assert c["read"] == 1800 and c["already_published"] == n_before and c["forwarded"] == 1800 - n_before
    assert c["withheld"] == 0 and c["dead_lettered"] == 0
    after = _stats(base / "out")
    assert len(after) == 6 and {name: after[name] for name in before} == before  # nothing rewritten
    batches = glob.glob(str(base / "out" / "batches" / "*.avro"))
    assert _seeds(batches) == _seeds(glob.glob(str(base / "in" / "*.avro")))  # each report exactly once
    assert sum(_seeds(batches).values()) == 1800
    assert not glob.glob(str(base / "out" / "batches" / ".tmp-*"))
    assert not os.path.exists(base / "out" / "state" / "spill")
