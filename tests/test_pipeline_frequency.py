"""End-to-end tests of pipelines.frequency (batch, directory streaming): simulate -> pipeline -> outputs.

* identical numbers: the pipeline's estimates equal the in-memory core's on the same reports, exactly;
* bad records of every kind are dead-lettered with reasons and counted: read = accepted + rejected;
* windowed batch mode, the multi_processing DirectRunner and the portable runner (embedded job server,
  LOOPBACK workers) give the same numbers;
* streaming from a watched directory (files appearing while the job runs) gives the core's numbers for
  every closed window, and dead-letters and counts the bad records;
* statistics (the issue's done-criterion, at a smaller n): the full-domain MSE of ``base`` matches the
  closed-form variance and ``norm-sub`` is several times lower.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import fastavro
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import simulator
from ldp.reports import Reports
from ldp.task import parse_task
from pipelines import frequency, job
from transforms.runners import runs_on_fnapi_runner
from wire.validate import ReportValidator

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _setup(tmp_path, users=20_000, d=64, mech="olh", inject_bad=2, seed=3, duration=600.0):
    task = parse_task({"task_id": f"e2e-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": d})
    (tmp_path / "task.json").write_text(task.to_json())
    truth = simulator.simulate_files(
        task,
        users,
        "zipf",
        tmp_path / "in",
        seed=seed,
        files=3,
        start_ms=T0,
        duration_s=duration,
        inject_bad=inject_bad,
    )
    return task, truth


def _args(tmp_path, out, *extra):
    return [
        "--task",
        str(tmp_path / "task.json"),
        "--input",
        str(tmp_path / "in" / "*.avro"),
        "--output",
        str(tmp_path / out),
        *extra,
    ]


def _fails(capsys, argv, pattern):
    """``frequency.run(argv)`` exits with status 2 and one stderr line matching ``pattern``."""
    with pytest.raises(SystemExit) as ei:
        frequency.run(argv)
    assert ei.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and re.search(pattern, err[0]), err
    return err[0]


def _estimates(out_dir):
    rows = []
    for f in sorted(glob.glob(os.path.join(out_dir, "estimates-*.jsonl"))):
        with open(f) as fh:
            rows += [json.loads(line) for line in fh]
    return sorted(rows, key=lambda r: (r["group"], r["window_start"] or ""))


def _core_reports(task, in_dir):
    """All valid reports of the input files with their event times, through the same validator."""
    v = ReportValidator(task)
    reps, times = [], []
    for f in sorted(glob.glob(os.path.join(in_dir, "reports-*.avro"))):
        with open(f, "rb") as fh:
            vb = v.validate(list(fastavro.reader(fh)))
        reps.append(vb.reports)
        times.append(vb.event_ms)
    return Reports.concat(reps), np.concatenate(times)


def test_batch_end_to_end_dead_letters_and_identical_numbers(tmp_path):
    task, truth = _setup(tmp_path)
    summary = frequency.run(_args(tmp_path, "out"))
    bad = truth["bad_records"]
    c = summary["counts"]
    assert c["read"] == 20_000 + sum(bad.values())
    assert c["accepted"] == 20_000 and c["rejected"] == sum(bad.values())
    assert c["read"] == c["accepted"] + c["rejected"]
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    assert json.loads((tmp_path / "out" / "counts.json").read_text())["counts"] == c
    # dead letters: one Avro record per refused input, with its reason
    dl = []
    for f in glob.glob(str(tmp_path / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    reasons = {}
    for r in dl:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    assert reasons == bad
    # an undecodable file is named, sized and hashed, never copied (the dead-letter privacy contract)
    assert all(r["raw_bytes"] is None and "sha256" in r["detail"] for r in dl if r["reason"] == "undecodable")
    # estimates: equal to the core on the same reports (exactly), JSON == Avro
    (est,) = _estimates(tmp_path / "out")
    oracle = task.make_oracle()
    reports, _ = _core_reports(task, tmp_path / "in")
    core = oracle.estimate_reports(reports)
    assert est["n_reports"] == 20_000 and est["window_start"] is None
    assert est["frequencies"] == core.frequencies.tolist() and est["std"] == core.std.tolist()
    (avro_file,) = glob.glob(str(tmp_path / "out" / "estimates-*.avro"))
    with open(avro_file, "rb") as fh:
        (arec,) = list(fastavro.reader(fh))
    assert arec["frequencies"] == est["frequencies"] and arec["n_reports"] == est["n_reports"]
    assert not [p for p in os.listdir(tmp_path / "out") if p.startswith(".temp")]


@pytest.mark.integration
def test_windowed_batch_and_multi_processing_and_portable(tmp_path):
    task, _ = _setup(tmp_path, users=12_000, inject_bad=0, duration=600.0)
    oracle = task.make_oracle()
    reports, times = _core_reports(task, tmp_path / "in")
    runs = {
        "direct": [],
        "mp": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        "portable": ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
    }
    for name, extra in runs.items():
        s = frequency.run(_args(tmp_path, name, "--window_size", "240", "--postprocess", "norm-sub", *extra))
        assert s["counts"]["read"] == s["counts"]["accepted"] == 12_000, name
        rows = _estimates(tmp_path / name)
        assert [r["window_start"] for r in rows] == [
            "2026-01-01T00:00:00.000Z",
            "2026-01-01T00:04:00.000Z",
            "2026-01-01T00:08:00.000Z",
        ], name
        assert sum(r["n_reports"] for r in rows) == 12_000
        from ldp.postprocess import postprocess

        for r, lo in zip(rows, (0, 240_000, 480_000)):
            sel = (times >= T0 + lo) & (times < T0 + lo + 240_000)
            est = oracle.estimate_reports(reports.take(sel))
            want = postprocess(est.frequencies, "norm-sub", variance=est.variance, n=est.n)
            assert r["n_reports"] == int(sel.sum()) and r["frequencies"] == want.tolist(), name
            assert r["postprocess"] == "norm-sub" and r["window_end"] is not None


@pytest.mark.statistical
def test_statistics_base_matches_closed_form_and_norm_sub_is_better(tmp_path):
    """OLH, eps = 1, d = 1024, n = 100,000 Zipf users.

    The full-domain MSE of the unbiased estimates, divided by the mean closed-form variance
    (Eq. 4 at the true frequencies), has relative standard error about sqrt(2/d) = 0.044 (d nearly
    independent errors), so 5 standard errors give [0.78, 1.22]. Norm-Sub must cut the MSE at least 3x
    (it is about 7x at this n; the bound leaves room for the randomness of one run).
    """
    task, truth = _setup(tmp_path, users=100_000, d=1024, inject_bad=0, seed=2026)
    oracle = task.make_oracle()
    f_true = np.array(truth["frequencies"])
    closed = float(np.mean(oracle.variance(100_000, f_true)))
    mse = {}
    for method in ("base", "norm-sub"):
        frequency.run(_args(tmp_path, method, "--postprocess", method))
        (est,) = _estimates(tmp_path / method)
        mse[method] = float(np.mean((np.array(est["frequencies"]) - f_true) ** 2))
    tol = 5 * np.sqrt(2 / 1024)
    assert abs(mse["base"] / closed - 1) < tol, mse
    assert mse["base"] / mse["norm-sub"] > 3, mse


@pytest.mark.integration
def test_cli_help_and_bad_arguments(tmp_path, capsys):
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.frequency", "--help"], capture_output=True, text=True, check=True
    )
    for flag in ("--task", "--input_subscription", "--window_size", "--early_firing", "--postprocess"):
        assert flag in out.stdout
    assert "(default: 10.0)" in out.stdout  # defaults are shown
    (tmp_path / "bad.json").write_text('{"task_id": "x", "mechanism": "zzz", "epsilon": 0}')
    line = _fails(
        capsys,
        ["--task", str(tmp_path / "bad.json"), "--input", "x", "--output", str(tmp_path / "o")],
        "mechanism must be one of .*; epsilon must be",
    )
    assert "bad.json" in line  # every problem, on one line, naming the file
    (tmp_path / "ok.json").write_text('{"task_id": "x", "mechanism": "grr", "epsilon": 1, "domain_size": 4}')
    ok = ["--task", str(tmp_path / "ok.json")]
    _fails(capsys, [*ok, "--output", str(tmp_path / "o")], "exactly one of --input")
    _fails(
        capsys,
        [*ok, "--input_topic", "projects/p/topics/t", "--output", str(tmp_path / "o")],
        "needs --streaming",
    )
    _fails(
        capsys,
        ["--input", "x", "--output", str(tmp_path / "o")],
        "the following arguments are required: --task",
    )


@pytest.mark.integration
def test_unknown_flag_is_an_error_before_anything_runs(tmp_path):
    """``--window-size 600`` (a dash for an underscore) is refused, not dropped: exit 2, one line."""
    (tmp_path / "ok.json").write_text('{"task_id": "x", "mechanism": "grr", "epsilon": 1, "domain_size": 4}')
    cmd = [sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "ok.json")]
    cmd += ["--input", str(tmp_path / "*.avro"), "--output", str(tmp_path / "o"), "--window-size", "600"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--window-size" in errors[0] and "did you mean --window_size" in errors[0]
    assert not (tmp_path / "o").exists()


def test_range_task_refused_in_one_line_before_the_pipeline(tmp_path, capsys):
    task = {
        "task_id": "rq-demo",
        "mechanism": "hdg",
        "epsilon": 1.0,
        "attributes": [{"name": "a", "domain_size": 8}, {"name": "b", "domain_size": 8}],
        "expected_users": 100,
    }
    (tmp_path / "range.json").write_text(json.dumps(task))
    argv = ["--task", str(tmp_path / "range.json"), "--input", str(tmp_path / "*.avro")]
    _fails(
        capsys, [*argv, "--output", str(tmp_path / "o")], "'rq-demo' is a range task .*not a frequency task"
    )
    assert not (tmp_path / "o").exists()


def test_empty_input_glob_is_an_error_unless_allowed(tmp_path, capsys):
    (tmp_path / "ok.json").write_text('{"task_id": "x", "mechanism": "grr", "epsilon": 1, "domain_size": 4}')
    argv = ["--task", str(tmp_path / "ok.json"), "--input", str(tmp_path / "nothing" / "*.avro")]
    _fails(capsys, [*argv, "--output", str(tmp_path / "o")], "matches no file")
    summary = frequency.run([*argv, "--output", str(tmp_path / "o"), "--allow_empty_input"])
    assert summary["counts"]["read"] == 0 and summary["panes_written"] == {"estimates": 0}


@pytest.mark.integration
def test_rerun_into_the_same_output_is_refused_unless_overwrite(tmp_path, capsys):
    """A second run into OUT would mix its windows with the first's: refused; --overwrite replaces them."""
    _setup(tmp_path, users=3_000, d=16, inject_bad=0, duration=600.0)
    first = frequency.run(_args(tmp_path, "out", "--window_size", "300"))
    assert first["panes_written"] == {"estimates": 2}
    err = capsys.readouterr().err
    assert f"output: {tmp_path / 'out'}" in err and "estimates: 2 window(s), 2 pane(s)" in err
    _fails(capsys, _args(tmp_path, "out"), "is not empty .*--overwrite")
    again = frequency.run(_args(tmp_path, "out", "--overwrite"))  # one global window now
    assert again["panes_written"] == {"estimates": 1}
    assert [r["window_start"] for r in _estimates(tmp_path / "out")] == [None]


@pytest.mark.integration
def test_log_level(tmp_path):
    _setup(tmp_path, users=500, d=8, inject_bad=0)
    base = [sys.executable, "-m", "pipelines.frequency", *_args(tmp_path, "a")]
    res = subprocess.run(base, capture_output=True, text=True, check=True)
    assert "INFO pipelines.job: frequency job: task e2e-olh" in res.stderr
    quiet = [sys.executable, "-m", "pipelines.frequency", *_args(tmp_path, "b"), "--log_level", "WARNING"]
    res = subprocess.run(quiet, capture_output=True, text=True, check=True)
    assert "INFO" not in res.stderr and "reports read=500" in res.stderr


@pytest.mark.integration
def test_demo_beam_runs(tmp_path, capsys):
    from pipelines import demo_beam

    out = demo_beam.run(
        [
            "--users",
            "20000",
            "--domain_size",
            "64",
            "--workdir",
            str(tmp_path),
            "--top",
            "5",
            "--inject_bad",
            "1",
            "--files",
            "2",
        ]
    )
    text = capsys.readouterr().out
    assert "full-domain MSE (base)" in text and "95% CI" in text and "norm-sub" in text
    c = out["counts"]
    assert (
        c["accepted"] == 20_000
        and c["read"] == c["accepted"] + c["rejected"]
        and c["rejected_undecodable"] == 1
    )
    assert out["mse_norm-sub"] < out["mse_base"]


def _drop_in(src, dst_dir):
    """Copies a staged file into the watched directory atomically: first under a name the glob does not
    match, then renamed (a watcher must never see a half-written file)."""
    name = os.path.basename(src)
    shutil.copy(src, os.path.join(dst_dir, "." + name + ".part"))
    os.replace(os.path.join(dst_dir, "." + name + ".part"), os.path.join(dst_dir, name))


def _final_panes(out_dir):
    """The most complete pane per (group, window): in accumulating mode every later pane holds every
    earlier one's reports, so it is the one with the most reports."""
    final = {}
    for r in _estimates(out_dir):
        k = (r["group"], r["window_start"])
        if k not in final or r["n_reports"] > final[k]["n_reports"]:
            final[k] = r
    return final


def _ms_iso(iso):
    import datetime as dt

    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def assert_windows_equal_core(task, stage_dir, out_dir, window_ms, n_users):
    """The most complete pane of every (group, window) equals the core's estimate of the same reports
    (those of ``stage_dir/reports-*.avro`` with event times in the window), bit for bit."""
    oracle = task.make_oracle()
    v = ReportValidator(task)
    batches = []
    for f in sorted(glob.glob(os.path.join(stage_dir, "reports-*.avro"))):
        with open(f, "rb") as fh:
            batches.append(v.validate(list(fastavro.reader(fh))))
    reports = Reports.concat([b.reports for b in batches])
    times = np.concatenate([b.event_ms for b in batches])
    groups = np.concatenate([b.groups for b in batches])
    starts = (times // window_ms) * window_ms
    final = _final_panes(out_dir)
    assert {(g, _ms_iso(ws)) for g, ws in final} == {(int(g), int(s)) for g, s in zip(groups, starts)}
    for (g, ws), rec in final.items():
        sel = (groups == g) & (starts == _ms_iso(ws))
        core = oracle.estimate_reports(reports.take(sel))
        assert rec["n_reports"] == int(sel.sum()) == core.n
        assert rec["frequencies"] == core.frequencies.tolist() and rec["std"] == core.std.tolist()
        assert _ms_iso(rec["window_end"]) == _ms_iso(ws) + window_ms
    assert sum(r["n_reports"] for r in final.values()) == n_users


@pytest.mark.integration
def test_streaming_from_a_watched_directory_equals_core(tmp_path):
    """``--streaming --input DIR/*.avro``: files appear while the job runs and each is read once.

    Reports carry event times over 6 s from now (2 s windows, two user groups); the watch stops 5 s
    after the job starts, every window closes and the job finishes by itself. The most complete pane of
    every window and group must equal the core's estimate of exactly the reports with event times in it
    (a report lost, or a file read twice, breaks that), and the bad records of every kind must be
    dead-lettered and counted.
    """
    import threading

    from wire.records import now_ms

    task = parse_task(
        {"task_id": "dir-stream", "mechanism": "olh", "epsilon": 1.0, "domain_size": 64, "n_groups": 2}
    )
    (tmp_path / "task.json").write_text(task.to_json())
    stage, watched = tmp_path / "stage", tmp_path / "in"
    watched.mkdir()
    start = (now_ms() // 2000) * 2000
    truth = simulator.simulate_files(
        task, 20_000, "zipf", stage, seed=11, files=3, start_ms=start, duration_s=6.0, inject_bad=1
    )
    staged = sorted(glob.glob(str(stage / "reports-*.avro")))
    for f in [staged[0], *glob.glob(str(stage / "bad-*.avro")), str(stage / "garbage.avro")]:
        _drop_in(f, watched)  # present when the job starts

    def later():  # the other two report files appear while the job runs
        for f in staged[1:]:
            time.sleep(1.0)
            _drop_in(f, watched)

    mover = threading.Thread(target=later, daemon=True)
    mover.start()
    summary = frequency.run(
        [
            "--task", str(tmp_path / "task.json"), "--streaming", "--input", str(watched / "*.avro"),
            "--output", str(tmp_path / "out"), "--watch_interval", "0.5", "--streaming_duration", "5",
            "--window_size", "2", "--allowed_lateness", "60", "--accumulating", "--counts_window", "5",
        ]
    )  # fmt: skip
    mover.join()
    assert "DONE" in summary["state"]  # the watch ended and the job finished by itself
    bad = truth["bad_records"]
    c = summary["counts"]  # summed closed count windows
    assert c["read"] == 20_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    assert c["accepted"] == 20_000
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    dl = []
    for f in glob.glob(str(tmp_path / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    assert sorted(r["reason"] for r in dl) == sorted(r for r, k in bad.items() for _ in range(k))
    assert_windows_equal_core(task, stage, tmp_path / "out", 2000, 20_000)


def test_directory_streaming_argument_checks(tmp_path, capsys):
    (tmp_path / "ok.json").write_text('{"task_id": "x", "mechanism": "grr", "epsilon": 1, "domain_size": 4}')
    base = ["--task", str(tmp_path / "ok.json"), "--streaming", "--input", str(tmp_path / "*.avro")]
    base += ["--output", str(tmp_path / "out")]
    _fails(capsys, base, "a streaming job needs a window")
    base += ["--window_size", "60"]
    _fails(capsys, base, "give --streaming_duration")  # the DirectRunner would never emit a window
    _fails(
        capsys,
        [*base, "--streaming_duration", "1", "--watch_interval", "0"],
        "--watch_interval must be positive",
    )
    _fails(
        capsys,
        [*base, "--streaming_duration", "1", "--output_topic", "projects/p/topics/t"],
        "--output_topic",
    )
    assert runs_on_fnapi_runner(PipelineOptions([]))
    assert runs_on_fnapi_runner(PipelineOptions(["--runner=DirectRunner"]))
    assert runs_on_fnapi_runner(PipelineOptions(["--runner=PortableRunner", "--job_endpoint=embed"]))
    assert not runs_on_fnapi_runner(PipelineOptions(["--runner=FlinkRunner"]))
    assert not runs_on_fnapi_runner(PipelineOptions(["--runner=PortableRunner", "--job_endpoint=h:1"]))


def test_closed_window_counts_can_leave_out_files(tmp_path):
    """The closed count windows are summed per file (jobs refuse a non-empty output, so a job's OUT/counts
    holds only its own; ``exclude`` leaves out files the caller names)."""
    counts_dir = tmp_path / "counts"
    counts_dir.mkdir()
    old = counts_dir / "counts-earlier-run.jsonl"
    old.write_text(json.dumps({"window_start": "x", "read": 7, "accepted": 7, "rejected": 0}) + "\n")
    stale = frozenset(job._count_files(str(tmp_path)))
    new = counts_dir / "counts-this-run.jsonl"
    new.write_text(json.dumps({"window_start": "y", "read": 5, "accepted": 4, "rejected": 1}) + "\n")
    assert job.closed_window_counts(str(tmp_path)) == {"read": 12, "accepted": 11, "rejected": 1}
    mine = job.closed_window_counts(str(tmp_path), exclude=stale)
    assert mine == {"read": 5, "accepted": 4, "rejected": 1}
