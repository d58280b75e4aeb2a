"""Watched directories: a file is read once and only when complete (a ``.done``
marker, or size and modification time unchanged for a tick); one that changes after it was read is a
counted ``changed_after_read`` loss. The DoFn is driven tick by tick with its per-path state, so the
test is exact (no timing)."""

from __future__ import annotations

import io
import os
import time

import numpy as np
import pytest
from apache_beam.io.filesystem import FileMetadata
from apache_beam.pvalue import TaggedOutput

from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import parse_task
from transforms.io import DONE_SUFFIX, _ReadCompleteFiles
from wire.records import reports_to_records, write_report_file
from wire.validate import RecordBatch

TASK = parse_task({"task_id": "watch", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})


class _State:
    def __init__(self) -> None:
        self.value = None

    def read(self):
        return self.value

    def write(self, v) -> None:
        self.value = v


def _report_bytes(n: int) -> bytes:
    rng = np.random.default_rng(np.random.SeedSequence(20261204))
    reps = TASK.make_oracle().encode(rng.integers(0, 8, n), rng=rng)
    buf = io.BytesIO()
    write_report_file(buf, reports_to_records(TASK.task_id, reps, np.full(n, 10**12)), sync_interval=2000)
    return buf.getvalue()


def _tick(fn, state, path) -> tuple[int, list[dict]]:
    st = os.stat(path)
    meta = FileMetadata(path, st.st_size, last_updated_in_seconds=st.st_mtime)
    out = list(fn.process((path, meta), file=state))
    n = sum(len(o.records) for o in out if isinstance(o, RecordBatch))
    dead = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "dead_letter"]
    return n, dead


def _fn(interval_s: float = 3600.0, require_done: bool = False) -> _ReadCompleteFiles:
    fn = _ReadCompleteFiles(1 << 20, FrequencyAggregator(TASK), interval_s, require_done)
    fn.setup()
    return fn


def test_a_file_caught_mid_write_is_read_once_complete(tmp_path):
    data = _report_bytes(5000)
    path = str(tmp_path / "r.avro")
    fn, state = _fn(), _State()
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 5])  # a prefix: a valid container of fewer blocks
    assert _tick(fn, state, path) == (0, [])  # first sight: not yet known to be stable
    with open(path, "ab") as fh:
        fh.write(data[len(data) // 5 :])
    now = time.time()
    os.utime(path, (now + 1, now + 1))  # a new mtime, as a writer's next write gives
    assert _tick(fn, state, path) == (0, [])  # it grew: still being written
    assert _tick(fn, state, path) == (5000, [])  # stable for a tick: read, all of it
    assert _tick(fn, state, path) == (0, [])  # and never again


def test_done_marker_reads_at_first_sight(tmp_path):
    path = str(tmp_path / "r.avro")
    with open(path, "wb") as fh:
        fh.write(_report_bytes(300))
    open(path + DONE_SUFFIX, "wb").close()
    assert _tick(_fn(), _State(), path) == (300, [])


def test_a_file_untouched_for_an_interval_is_read_at_first_sight(tmp_path):
    path = str(tmp_path / "r.avro")
    with open(path, "wb") as fh:
        fh.write(_report_bytes(300))
    old = time.time() - 7200
    os.utime(path, (old, old))
    assert _tick(_fn(3600.0), _State(), path) == (300, [])


def test_a_file_changed_after_it_was_read_is_counted_not_reread(tmp_path):
    path = str(tmp_path / "r.avro")
    data = _report_bytes(300)
    with open(path, "wb") as fh:
        fh.write(data)
    open(path + DONE_SUFFIX, "wb").close()
    fn, state = _fn(), _State()
    assert _tick(fn, state, path)[0] == 300
    with open(path, "ab") as fh:
        fh.write(b"x" * 100)
    now = time.time()
    os.utime(path, (now + 5, now + 5))
    n, dead = _tick(fn, state, path)
    assert n == 0 and [d["reason"] for d in dead] == ["changed_after_read"]
    assert "lost 100 bytes" in dead[0]["detail"]
    assert _tick(fn, state, path) == (0, [])  # counted once


def test_a_stale_match_from_an_older_tick_is_ignored(tmp_path):
    """Parallel ticks (the Flink ticks' source at parallelism > 1) race through the shuffle: a match made
    by an older tick, mid-write, can arrive after a newer tick's match of the complete file was read. It
    is stale -- neither a change after the read nor a reason to wait -- and the file is read exactly once."""
    from apache_beam.utils.timestamp import Timestamp

    data = _report_bytes(2000)
    path = str(tmp_path / "r.avro")
    with open(path, "wb") as fh:
        fh.write(data)
    st = os.stat(path)
    full = FileMetadata(path, st.st_size, last_updated_in_seconds=st.st_mtime)
    partial = FileMetadata(path, st.st_size // 3, last_updated_in_seconds=st.st_mtime - 1)
    fn, state = _fn(), _State()

    def tick(meta, t):
        out = list(fn.process((path, meta), file=state, ts=Timestamp(t)))
        n = sum(len(o.records) for o in out if isinstance(o, RecordBatch))
        return n, [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "dead_letter"]

    assert tick(full, 11) == (0, [])  # first sight of the complete file
    assert tick(partial, 10) == (0, [])  # older tick, mid-write view: ignored, the state keeps tick 11
    assert tick(full, 12) == (2000, [])  # stable since tick 11: read
    assert tick(partial, 10) == (0, [])  # stale again after the read: no changed_after_read
    n, dead = tick(FileMetadata(path, st.st_size + 5, last_updated_in_seconds=st.st_mtime + 9), 13)
    assert n == 0 and [d["reason"] for d in dead] == ["changed_after_read"]  # a real change still counts


def test_with_require_done_marker_a_writer_that_pauses_mid_file_is_read_only_once_done(tmp_path):
    """A writer pauses mid-file for several ticks (size and time unchanged, and older than the interval):
    the default watch would read the prefix; with ``require_done`` nothing is read until ``.done``."""
    data = _report_bytes(3000)
    path = str(tmp_path / "r.avro")
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 2])  # a prefix: a valid container of fewer blocks
    old = time.time() - 7200
    os.utime(path, (old, old))  # the pause outlasts the interval
    fn, state = _fn(1.0, require_done=True), _State()
    for _ in range(4):
        assert _tick(fn, state, path) == (0, [])  # stable, old: still not read
    assert _tick(_fn(1.0), _State(), path)[0] < 3000  # the default watch reads the prefix at the pause
    with open(path, "ab") as fh:
        fh.write(data[len(data) // 2 :])
    assert _tick(fn, state, path) == (0, [])  # complete but no marker yet
    open(path + DONE_SUFFIX, "wb").close()
    assert _tick(fn, state, path) == (3000, [])  # the marker: read, all of it
    assert _tick(fn, state, path) == (0, [])  # once


def test_a_marker_written_after_the_ticks_match_reads_the_whole_file_without_a_false_change(tmp_path):
    """The tick matched the file mid-write; the writer finished it and wrote its marker before the match
    was processed: the whole file is read, and the next tick's (final) size is not a change."""
    data = _report_bytes(2000)
    path = str(tmp_path / "r.avro")
    with open(path, "wb") as fh:
        fh.write(data)
    st = os.stat(path)
    early = FileMetadata(path, st.st_size // 3, last_updated_in_seconds=st.st_mtime - 1)
    open(path + DONE_SUFFIX, "wb").close()
    for require_done in (False, True):
        fn, state = _fn(require_done=require_done), _State()
        out = list(fn.process((path, early), file=state))
        assert sum(len(o.records) for o in out if isinstance(o, RecordBatch)) == 2000
        assert _tick(fn, state, path) == (0, [])  # no changed_after_read


@pytest.mark.integration
def test_watched_directory_with_require_done_marker_reads_a_pausing_writer_whole(tmp_path):
    """End to end: a writer writes half a file, pauses for many watch intervals, finishes it and writes
    its marker; the streaming job with ``--require_done_marker`` accepts every one of its 3,000 reports
    (the default watch reads the file at the pause: about half of them)."""
    import threading

    from pipelines import frequency
    from wire.records import now_ms

    task = parse_task({"task_id": "watch", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8,
                       "window": {"size_s": 3600}})
    task.save(tmp_path / "task.json")
    rng = np.random.default_rng(np.random.SeedSequence(20261206))
    reps = task.make_oracle().encode(rng.integers(0, 8, 3000), rng=rng)
    buf = io.BytesIO()
    records = reports_to_records(task.task_id, reps, np.full(3000, now_ms()))
    write_report_file(buf, records, sync_interval=2000)
    data = buf.getvalue()
    incoming = tmp_path / "in"
    incoming.mkdir()
    path = incoming / "r.avro"

    def writer() -> None:
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            time.sleep(5.0)  # ten watch intervals
            fh.write(data[len(data) // 2 :])
        open(str(path) + DONE_SUFFIX, "wb").close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        summary = frequency.run([
            "--task", str(tmp_path / "task.json"), "--streaming", "--input", str(incoming / "*.avro"),
            "--output", str(tmp_path / "out"), "--watch_interval", "0.5", "--streaming_duration", "10",
            "--allowed_lateness", "3600", "--require_done_marker",
        ])  # fmt: skip
    finally:
        thread.join()
    c = summary["counts"]
    assert c["read"] == c["accepted"] == 3000 and c.get("rejected", 0) == 0


def test_require_done_marker_without_a_watched_directory_is_a_one_line_error(tmp_path, capsys):
    from pipelines import frequency

    TASK.save(tmp_path / "task.json")
    (tmp_path / "r.avro").write_bytes(_report_bytes(10))
    with pytest.raises(SystemExit) as exc:
        frequency.run(["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "r.avro"),
                       "--output", str(tmp_path / "out"), "--require_done_marker"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--require_done_marker is for a watched directory" in err
