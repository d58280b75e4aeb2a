"""Flags checked up front (issue 12, item 4): window sizes and durations that are not finite, not
positive or not whole milliseconds are refused in one line (exit status 2) before anything runs."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from ldp.task import parse_task
from pipelines import frequency
from transforms.records import reports_to_records, write_report_file


@pytest.fixture()
def job(tmp_path):
    task = parse_task({"task_id": "flags", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4})
    task.save(tmp_path / "task.json")
    rng = np.random.default_rng(np.random.SeedSequence(20261202))
    reps = task.make_oracle().encode(rng.integers(0, 4, 10), rng=rng)
    buf = io.BytesIO()
    write_report_file(buf, reports_to_records(task.task_id, reps, np.full(10, 10**12)))
    (tmp_path / "r.avro").write_bytes(buf.getvalue())
    return ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "r.avro"),
            "--output", str(tmp_path / "out")]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--window_size", "600.0005"], "--window_size must be a whole number of milliseconds, got 600.0005"),
        (["--window_size", "nan"], "--window_size must be a finite number of seconds, got nan"),
        (["--window_size", "inf"], "--window_size must be a finite number of seconds, got inf"),
        (["--window_size", "60", "--window_period", "0.0001"], "--window_period must be a whole number"),
        (["--allowed_lateness=-inf"], "--allowed_lateness must be a finite number of seconds"),
        (["--streaming_duration", "nan"], "--streaming_duration must be a finite number of seconds >= 0"),
        (["--watch_interval", "inf"], "--watch_interval must be positive (a finite number of seconds)"),
        (["--counts_window", "nan"], "--counts_window must be positive (a finite number of seconds)"),
    ],
)
def test_bad_time_flags_are_one_line_errors(job, flags, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        frequency.run([*job, *flags])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists()


def test_whole_millisecond_window_sizes_pass(job, tmp_path):
    summary = frequency.run([*job, "--window_size", "0.001"])
    assert summary["counts"]["accepted"] == 10


def test_an_output_that_cannot_be_created_is_a_one_line_error(job, capsys, tmp_path):
    (tmp_path / "afile").write_text("x")
    for out, why in ((tmp_path / "afile" / "out", "Not a directory"), ("/proc/no/such/out", "No such file")):
        args = [*job[:-1], str(out)]
        with pytest.raises(SystemExit) as exc:
            frequency.run(args)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"--output {str(out)!r} cannot be created: {why}" in err


def test_a_task_window_that_is_not_whole_milliseconds_is_refused(job, capsys, tmp_path):
    """The task file's window size is checked like the flag (600.0005 s put reports in wrong windows)."""
    spec = {"task_id": "flags", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4,
            "window": {"size_s": 600.0005}}
    (tmp_path / "task.json").write_text(json.dumps(spec))  # refused by the task model (ldp.task) at load
    with pytest.raises(SystemExit) as exc:
        frequency.run(job)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "window.size_s must be a finite whole number of milliseconds" in err


def test_a_task_whose_accumulator_cannot_fit_is_refused_at_load(tmp_path, capsys):
    """LHIO over three 2^20 domains: its group oracles would need more than the oracles' size limit;
    refused before the job runs, in one line naming the limit (it used to fail in the workers)."""
    from pipelines import range_queries

    attrs = [{"name": n, "domain_size": 1 << 20} for n in "abc"]
    spec = {"task_id": "big", "kind": "range", "mechanism": "lhio", "epsilon": 1.0, "attributes": attrs,
            "expected_users": 1_000_000}
    (tmp_path / "task.json").write_text(json.dumps(spec))
    (tmp_path / "q.json").write_text('[{"a": [0, 7]}]')
    (tmp_path / "r.avro").write_bytes(b"x")
    with pytest.raises(SystemExit) as exc:
        range_queries.run(["--task", str(tmp_path / "task.json"), "--queries", str(tmp_path / "q.json"),
                           "--input", str(tmp_path / "r.avro"), "--output", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the task cannot run" in err
    assert "MAX_ACCUMULATOR_CELLS = 67,108,864 cells" in err
    assert not (tmp_path / "out").exists()
