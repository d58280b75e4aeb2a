"""Flags checked up front: window sizes and durations that are not finite, not
positive or not whole milliseconds are refused in one line (exit status 2) before anything runs."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from ldp.task import parse_task
from pipelines import frequency
from wire.records import reports_to_records, write_report_file


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


def _one_line_exit(args, capsys, runner=None, code=2) -> str:
    with pytest.raises(SystemExit) as exc:
        (runner or frequency.run)(args)
    assert exc.value.code == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_input_directory_is_a_one_line_error(job, capsys, tmp_path):
    """``--input DIR`` (a directory, not a glob of its files) ended in an IsADirectoryError traceback."""
    args = [*job[:3], str(tmp_path), *job[4:]]
    err = _one_line_exit(args, capsys)
    assert f"--input {str(tmp_path)!r} is a directory" in err and repr(str(tmp_path / "*.avro")) in err
    err = _one_line_exit([*args, "--streaming", "--streaming_duration", "5"], capsys)  # a watch of it too
    assert "is a directory" in err
    assert not (tmp_path / "out").exists()


def test_a_dangling_symlink_matched_by_the_input_glob_is_named(job, capsys, tmp_path):
    """Beam's matching skipped a symbolic link whose target is missing without a word."""
    import logging

    from transforms.io import _WarnDanglingLinks, dangling_links

    os.symlink(tmp_path / "gone.avro", tmp_path / "link.avro")
    pattern = str(tmp_path / "*.avro")
    err = _one_line_exit([*job[:3], pattern, *job[4:]], capsys)
    assert f"matches the dangling symbolic link {str(tmp_path / 'link.avro')!r}" in err
    assert dangling_links(pattern) == [(str(tmp_path / "link.avro"), str(tmp_path / "gone.avro"))]
    fn = _WarnDanglingLinks()
    fn.setup()
    with _caplog_at(logging.WARNING) as records:
        assert list(fn.process(pattern)) == [pattern] and list(fn.process(pattern)) == [pattern]
    warned = [r.getMessage() for r in records if "dangling symbolic link" in r.getMessage()]
    assert len(warned) == 1 and "link.avro" in warned[0]  # the watch warns once per link


class _caplog_at:
    """Collects the log records of the ``transforms`` loggers at ``level`` (pytest's caplog is not
    used: setup_logging of earlier job runs replaces handlers)."""

    def __init__(self, level: int) -> None:
        import logging

        self.level, self.records = level, []
        self.handler = logging.Handler(level)
        self.handler.emit = self.records.append  # type: ignore[method-assign]
        self.logger = logging.getLogger("transforms")

    def __enter__(self):
        self.old = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(self.level)
        return self.records

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.old)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--input_subscription", "projects/P/subscriptions/S"], "'P' is not a valid project id (6 to 30"),
        (["--input_subscription", "projects/my-project/topics/S"], "is not a Pub/Sub subscription path"),
        (["--input_subscription", "aggregator"], "give projects/PROJECT/subscriptions/NAME"),
        (["--input_topic", "projects/Ldp-Test/topics/t1x"], "'Ldp-Test' is not a valid project id"),
        (["--input_topic", "projects/ldp-test-/topics/reports"], "'ldp-test-' is not a valid project id"),
        (["--input_topic", "projects/ldp-test/topics/9lives"], "'9lives' is not a valid topic id"),
        (["--input_topic", "projects/ldp-test/topics/goog-x"], "'goog-x' is not a valid topic id"),
        (["--input_subscription", "projects/ldp-test/subscriptions/s"], "'s' is not a valid subscription id"),
    ],
)
def test_bad_topic_and_subscription_names_are_one_line_errors(flags, message, tmp_path, capsys):
    """A short project id (``projects/P/...``) gave a 30-line traceback from the client library."""
    task = parse_task({"task_id": "flags", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4})
    task.save(tmp_path / "task.json")
    err = _one_line_exit(["--task", str(tmp_path / "task.json"), "--streaming", *flags,
                          "--output", str(tmp_path / "out")], capsys)  # fmt: skip
    assert message in err
    assert not (tmp_path / "out").exists()


def test_bad_output_topics_are_one_line_errors(job, capsys, tmp_path):
    from pipelines import clients

    err = _one_line_exit([*job, "--output_topic", "projects/P/topics/estimates"], capsys)
    assert "--output_topic 'projects/P/topics/estimates': 'P' is not a valid project id" in err
    task = parse_task({"task_id": "c", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4,
                       "budget": {"reports_per_period": 2, "period_s": 60}})
    task.save(tmp_path / "budget.json")
    err = _one_line_exit(["--task", str(tmp_path / "budget.json"), "--output_topic", "projects/P/topics/T"],
                         capsys, clients.run)  # fmt: skip
    assert "'P' is not a valid project id" in err


def test_valid_pubsub_names_pass():
    from pipelines.cli import check_pubsub_path

    good = [
        ("projects/ldp-test/topics/reports", "topic"),
        ("projects/a12345/subscriptions/agg.v2", "subscription"),
        ("projects/" + "a" * 30 + "/topics/T~x+%", "topic"),
    ]
    for value, kind in good:
        check_pubsub_path(value, kind, flag="--x")  # returns, does not exit


def test_a_job_that_accepts_nothing_fails_naming_the_rejections(job, capsys, tmp_path):
    """Every report of another task: the job ran, accepted 0 of them and exited 0 without a word."""
    rng = np.random.default_rng(np.random.SeedSequence(20261207))
    other = parse_task({"task_id": "another-task", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4})
    reps = other.make_oracle().encode(rng.integers(0, 4, 25), rng=rng)
    recs = reports_to_records(other.task_id, reps, np.full(25, 10**12))
    recs[:3] = [{**r, "task_id": "flags", "group": 7} for r in recs[:3]]  # 3 of this task, invalid group
    buf = io.BytesIO()
    write_report_file(buf, recs)
    (tmp_path / "r.avro").write_bytes(buf.getvalue())
    with pytest.raises(SystemExit) as exc:
        frequency.run(job)
    assert exc.value.code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: accepted none of the 25 reports read; rejected: wrong_task 22, invalid_group 3" in last
    assert json.loads((tmp_path / "out" / "counts.json").read_text())["counts"]["accepted"] == 0


# ------------------------------------------------------------------ endings: refused before the job starts


@pytest.fixture()
def no_pubsub_access(monkeypatch, tmp_path):
    """No emulator, no credentials variable, an empty gcloud configuration, not Compute Engine."""
    import pipelines.pubsub_emulator as pe

    for var in ("PUBSUB_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setattr(pe, "_GCE_PRODUCT_NAME_FILE", str(tmp_path / "no-dmi"))
    return tmp_path


def _pubsub_job(tmp_path, *flags):
    task = parse_task({"task_id": "flags", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4,
                       "window": {"size_s": 60}})
    task.save(tmp_path / "task.json")
    return ["--task", str(tmp_path / "task.json"), "--streaming", "--output", str(tmp_path / "out"), *flags]


@pytest.mark.parametrize("source", [["--input_subscription", "projects/ldp-test/subscriptions/agg"],
                                    ["--input_topic", "projects/ldp-test/topics/reports"]])
def test_pubsub_without_emulator_or_credentials_is_refused_before_the_job(no_pubsub_access, source, capsys):
    """It printed credential tracebacks, ran, reported read=0 and exited 0."""
    import time

    t0 = time.perf_counter()
    err = _one_line_exit(_pubsub_job(no_pubsub_access, *source, "--streaming_duration", "5"), capsys)
    assert time.perf_counter() - t0 < 10  # refused at once: no pipeline, no 3 s metadata-server retries
    assert f"{source[0]}: Pub/Sub without PUBSUB_EMULATOR_HOST and without Google credentials" in err
    assert "export PUBSUB_EMULATOR_HOST" in err
    assert not (no_pubsub_access / "out").exists()


def test_an_output_topic_without_pubsub_access_is_refused(job, no_pubsub_access, capsys):
    err = _one_line_exit([*job, "--output_topic", "projects/ldp-test/topics/estimates"], capsys)
    assert "--output_topic: Pub/Sub without PUBSUB_EMULATOR_HOST" in err
    assert not (no_pubsub_access / "out").exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PUBSUB_EMULATOR_HOST": ""}, "PUBSUB_EMULATOR_HOST='' is not HOST:PORT"),
        ({"PUBSUB_EMULATOR_HOST": "localhost"}, "PUBSUB_EMULATOR_HOST='localhost' is not HOST:PORT"),
        ({"PUBSUB_EMULATOR_HOST": "127.0.0.1:99999"}, "is not HOST:PORT"),
        ({"PUBSUB_EMULATOR_HOST": "127.0.0.1:8085 --x"}, "is not HOST:PORT"),
        ({"GOOGLE_APPLICATION_CREDENTIALS": "/no/such/key.json"}, "'/no/such/key.json' is not a readable"),
    ],
)
def test_forged_pubsub_environments_are_refused(no_pubsub_access, monkeypatch, env, message, capsys):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    err = _one_line_exit(_pubsub_job(no_pubsub_access, "--input_subscription",
                                     "projects/ldp-test/subscriptions/agg", "--streaming_duration", "5"),
                         capsys)  # fmt: skip
    assert message in err


def test_credentials_a_directory_is_not_a_key_file(no_pubsub_access, monkeypatch):
    from pipelines.pubsub_emulator import pubsub_access_problem

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(no_pubsub_access))
    assert "is not a readable file" in pubsub_access_problem()


def test_credentials_that_exist_pass_the_check(no_pubsub_access, monkeypatch):
    """The emulator, a key file, gcloud's application-default file or a Compute Engine machine: each
    passes (the client library then authenticates); nothing is asked over the network."""
    import pipelines.pubsub_emulator as pe

    assert pe.pubsub_access_problem() is not None
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "[::1]:8085")
    assert pe.pubsub_access_problem() is None
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST")
    key = no_pubsub_access / "key.json"
    key.write_text("{}")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    assert pe.pubsub_access_problem() is None
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    (no_pubsub_access / "gcloud").mkdir()
    (no_pubsub_access / "gcloud" / "application_default_credentials.json").write_text("{}")
    assert pe.pubsub_access_problem() is None
    (no_pubsub_access / "gcloud" / "application_default_credentials.json").unlink()
    (no_pubsub_access / "no-dmi").write_text("Google Compute Engine\n")
    assert pe.pubsub_access_problem() is None


def test_a_streaming_job_without_a_window_is_one_line(tmp_path, capsys, monkeypatch):
    """It ended in a 97-line GroupByKey traceback."""
    task = parse_task({"task_id": "flags", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4})
    task.save(tmp_path / "task.json")
    base = ["--task", str(tmp_path / "task.json"), "--output", str(tmp_path / "out"), "--streaming"]
    watch = [*base, "--input", str(tmp_path / "*.avro"), "--streaming_duration", "5"]
    err = _one_line_exit(watch, capsys)
    assert "a streaming job needs a window: give --window_size SECONDS" in err
    err = _one_line_exit([*watch, "--early_firing", "2"], capsys)  # the DirectRunner's watch drops them
    assert "has no early firings" in err and "--window_size" in err
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")  # refused before anything connects
    err = _one_line_exit([*base, "--input_subscription", "projects/ldp-test/subscriptions/agg"], capsys)
    assert "a streaming job needs a window" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("runner", "message"),
    [
        ("DirectRuner", "--runner='DirectRuner' is not a Beam runner; did you mean --runner=DirectRunner?"),
        ("prism", None),
        ("FlinkRuner", "did you mean --runner=FlinkRunner?"),
        ("Flonk", "is not a Beam runner"),
        ("apache_beam.runners.no_such.Runner", "its module cannot be imported"),
        ("apache_beam.runners.runner.PipelineState", "has no PipelineRunner class 'PipelineState'"),
    ],
)
def test_a_runner_typo_is_one_line(job, runner, message, capsys):
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.cli import runner_problem

    if message is None:  # Beam's own spelling rules: any case, with or without "Runner"
        assert runner_problem(PipelineOptions([f"--runner={runner}"])) is None
        return
    err = _one_line_exit([*job, f"--runner={runner}"], capsys)
    assert message in err
    for good in ("DirectRunner", "direct", "PrismRunner",
                 "apache_beam.runners.direct.direct_runner.DirectRunner"):
        assert runner_problem(PipelineOptions([f"--runner={good}"])) is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metrics_port", "-1"], "--metrics_port: must be a TCP port 0..65535"),
        (["--metrics_port", "65536"], "--metrics_port: must be a TCP port 0..65535"),
        (["--metrics_port", "http"], "--metrics_port: must be a TCP port"),
        (["--metrics_port", "0", "--metrics_linger", "nan"], "--metrics_linger: must be a finite number"),
        (["--metrics_linger", "5"], "--metrics_linger needs --metrics_port"),
    ],
)
def test_bad_metrics_flags_are_one_line(job, flags, message, capsys, tmp_path):
    err = _one_line_exit([*job, *flags], capsys)
    assert message in err
    assert not (tmp_path / "out").exists()


def test_a_metrics_port_in_use_is_one_line(job, capsys, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        err = _one_line_exit([*job, "--metrics_port", str(port)], capsys)
    assert f"--metrics_port {port}: cannot listen on 127.0.0.1:{port}" in err
    assert not (tmp_path / "out").exists()
