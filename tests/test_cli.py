"""Tests of the command-line convention (pipelines.cli) and the ``ldp-beam`` entry point."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

import ldp
from pipelines import cli


def _parser():
    p = cli.job_parser("a test job")
    cli.add_population_flags(p, users=1000)
    cli.add_input_flags(p)
    cli.add_output_flags(p, required=False)
    p.add_argument("--window_size", type=float, help="window length in seconds")
    p.add_argument("--mode", required=True, choices=["a", "b"], help="a required flag")
    return p


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err  # one line, no usage dump, no traceback
    return err


def test_help_shows_defaults_required_flags_and_the_beam_pointer(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_job_args(_parser(), ["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--users USERS" in text and "(default: 1000)" in text and "(default: INFO)" in text
    assert "--mode {a,b}" in text and "[--mode" not in text  # a required flag is shown as required
    assert "(default: None)" not in text and "(default: False)" not in text  # unset flags: no noise
    assert "Apache Beam pipeline option" in text


def test_job_flags_and_beam_options_are_split():
    ns, options = cli.parse_job_args(
        _parser(),
        ["--mode", "a", "--users", "5", "--runner=DirectRunner", "--direct_num_workers", "2", "--streaming"],
        setup_log=False,
    )
    assert ns.users == 5 and ns.mode == "a" and ns.seed == 0 and ns.domain_size is None
    assert options.view_as(StandardOptions).runner == "DirectRunner"
    assert options.view_as(StandardOptions).streaming is True
    assert options.view_as(DirectOptions).direct_num_workers == 2
    assert ns.beam_args == ["--runner=DirectRunner", "--direct_num_workers", "2", "--streaming"]


def test_a_flag_both_declare_reaches_both():
    p = cli.job_parser("x")
    p.add_argument("--streaming", action="store_true", help="streaming mode")
    ns, options = cli.parse_job_args(p, ["--streaming"], setup_log=False)
    assert ns.streaming is True and options.view_as(StandardOptions).streaming is True


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--mode", "a", "--window-size", "600"], "--window-size 600 .*did you mean --window_size"),
        (["--mode", "a", "--usrs", "3"], "unrecognized arguments: --usrs 3.*did you mean --users"),
        (["--mode", "a", "--n", "3"], "did you mean --users"),
        (["--mode", "a", "--runer=DirectRunner"], "unrecognized arguments: --runer=DirectRunner.*--runner"),
        (["--mode", "a", "stray"], "unrecognized arguments: stray"),
        (["--users", "3"], "the following arguments are required: --mode"),
        (["--mode", "c"], "invalid choice: 'c'"),
        (["--mode", "a", "--users", "x"], "argument --users: invalid int value: 'x'"),
        (["--mode", "a", "--direct_num_workers", "x"], "Beam pipeline option: argument --direct_num_workers"),
    ],
)
def test_bad_flags_are_one_line_errors_with_exit_2(capsys, argv, pattern):
    with pytest.raises(SystemExit) as exc:
        cli.parse_job_args(_parser(), argv, setup_log=False)
    assert exc.value.code == 2
    err = _error_line(capsys)
    assert re.search(pattern, err), err
    assert "error:" in err and "--help" in err


def test_commands_without_a_pipeline_refuse_beam_flags(capsys):
    p = cli.job_parser("no pipeline", beam_options=False)
    p.add_argument("--users", type=int, default=1, help="users")
    ns, options = cli.parse_job_args(p, ["--users", "4"], beam=False, setup_log=False)
    assert ns.users == 4 and options is None
    with pytest.raises(SystemExit, match="2"):
        cli.parse_job_args(p, ["--runner=DirectRunner"], beam=False, setup_log=False)
    assert "unrecognized arguments: --runner=DirectRunner" in _error_line(capsys)


def test_beam_option_parser_knows_beams_flags_only():
    flags = {s for a in cli.beam_option_parser()._actions for s in a.option_strings}
    for flag in ("--runner", "--streaming", "--direct_running_mode", "--job_endpoint", "--flink_master",
                 "--environment_type", "--setup_file", "--project", "--temp_location", "--experiments"):
        assert flag in flags, flag  # fmt: skip
    assert "--task" not in flags and "--window_size" not in flags  # nothing of ours


def test_require_inputs(tmp_path, capsys):
    (tmp_path / "b.avro").write_bytes(b"x")
    (tmp_path / "a.avro").write_bytes(b"x")
    assert [Path(p).name for p in cli.require_inputs(str(tmp_path / "*.avro"))] == ["a.avro", "b.avro"]
    assert cli.require_inputs(str(tmp_path / "none-*.avro"), allow_empty=True) == []
    with pytest.raises(SystemExit) as exc:
        cli.require_inputs(str(tmp_path / "none-*.avro"))
    assert exc.value.code == 2 and "matches no file" in _error_line(capsys)
    with pytest.raises(SystemExit, match="2"):
        cli.require_inputs(None)
    assert "--input is required" in _error_line(capsys)


def test_prepare_output(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.prepare_output(str(out)) == str(out) and (out / cli.OUTPUT_MARKER).is_file()
    cli.prepare_output(str(out))  # only the marker (an earlier run that wrote nothing): nothing to mix with
    (out / "estimates-0.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit, match="2"):
        cli.prepare_output(str(out))
    err = _error_line(capsys)
    assert "is not empty (2 entries, e.g. 'estimates-0.jsonl')" in err
    assert (out / "estimates-0.jsonl").exists()
    (out / "sub").mkdir()
    cli.prepare_output(str(out), overwrite=True)  # an earlier job's output: cleared
    capsys.readouterr()  # (a warning is logged when logging is set up)
    assert sorted(os.listdir(out)) == [cli.OUTPUT_MARKER]
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff")
    with pytest.raises(SystemExit, match="2"):
        cli.prepare_output(str(other), overwrite=True)
    assert "not written by an ldp-beam job" in _error_line(capsys) and (other / "cat.jpg").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit, match="2"):
        cli.prepare_output(str(tmp_path / "file"))
    assert "not a directory" in _error_line(capsys)
    empty = tmp_path / "empty"
    empty.mkdir()
    cli.prepare_output(str(empty))  # an existing empty directory is fine


def test_setup_logging_levels():
    try:
        cli.setup_logging("debug")
        assert logging.getLogger("pipelines").level == logging.DEBUG
        assert logging.getLogger().level == logging.DEBUG
        cli.setup_logging("INFO")
        assert logging.getLogger("pipelines").getEffectiveLevel() == logging.INFO
        assert logging.getLogger("transforms.io").getEffectiveLevel() == logging.INFO
        assert logging.getLogger("apache_beam.runners").getEffectiveLevel() == logging.WARNING  # quiet Beam
        with pytest.raises(ValueError, match="unknown log level"):
            cli.setup_logging("LOUD")
    finally:
        cli.setup_logging("WARNING")


def test_setup_logging_output(capsys):
    try:
        logging.basicConfig()  # what Beam's PipelineOptions does: a plain stderr handler on the root
        cli.setup_logging("INFO")
        cli.setup_logging("INFO")  # idempotent: one handler of ours
        logging.getLogger("pipelines.job").info("job started")
        logging.getLogger("apache_beam.runners.direct").info("runner internals")
        logging.getLogger("apache_beam.io").warning("a Beam warning")
        lines = capsys.readouterr().err.splitlines()
        assert [ln.split(" ", 1)[1] for ln in lines] == [
            "INFO pipelines.job: job started",
            "WARNING apache_beam.io: a Beam warning",
        ], lines
        assert all(re.match(r"\d\d:\d\d:\d\d ", ln) for ln in lines)
    finally:
        cli.setup_logging("WARNING")


def test_every_command_module_has_run():
    for name, (module, summary) in cli.commands().items():
        assert callable(importlib.import_module(module).run), name
        assert summary


def test_main_dispatch_in_process(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in cli.commands())
    assert cli.main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"ldp-beam {ldp.__version__}"
    with pytest.raises(SystemExit, match="2"):
        cli.main(["simulat"])
    assert "unknown command 'simulat'; did you mean simulate?" in _error_line(capsys)


# ---- through real processes (integration tier) ------------------------------------------------------------


def _ldp_beam() -> str:
    exe = Path(sys.executable).parent / "ldp-beam"
    if not exe.exists():
        pytest.fail(f"{exe} missing: the package is not installed (bash tools/ensure_venv.sh)")
    return str(exe)


@pytest.mark.integration
def test_entry_point_lists_and_runs_commands_subprocess(run_cli, tmp_path, range_task_file):
    out = run_cli(_ldp_beam(), "--help")
    assert out.returncode == 0 and all(name in out.stdout for name in cli.commands()), out
    for name in cli.commands():
        sub = run_cli(_ldp_beam(), name, "--help")
        assert sub.returncode == 0 and f"usage: ldp-beam {name}" in sub.stdout, (name, sub.stderr)
        assert sub.stderr == "", (name, sub.stderr)  # no import-time warnings, nothing else
    task = range_task_file(expected_users=2000)
    sim = [_ldp_beam(), "simulate", "--task", str(task)]
    ran = run_cli(*sim, "--users", "2000", "--output", str(tmp_path / "r"))
    assert ran.returncode == 0, ran.stderr
    assert "wrote 2,000 range reports" in ran.stderr and (tmp_path / "r" / "truth_records.npy").is_file()
    bad = run_cli(*sim, "--users", "5", "--output", str(tmp_path / "x"), "--window-size", "600")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith("ldp-beam simulate: error: unrecognized arguments: --window-size 600")


@pytest.mark.integration
def test_python_m_modules_subprocess(run_cli):
    for module in [m for m, _ in cli.commands().values()] + ["pipelines.simulate_range", "bench.table",
                                                          "bench.pipeline", "experiments.consistency"]:
        out = run_cli("--help", module=module)
        assert out.returncode == 0 and f"usage: python -m {module}" in out.stdout, (module, out.stderr)
        assert out.stderr == "", (module, out.stderr)  # fmt: skip


@pytest.mark.integration
def test_no_import_time_warnings_subprocess(run_cli):
    out = run_cli(sys.executable, "-c", "import apache_beam, apache_beam.io.gcp.pubsub; import pipelines.cli")
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_installed_version_is_ldp_version():
    if shutil.which("ldp-beam", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("ldp-beam is not installed in this environment (bash tools/ensure_venv.sh)")
    assert importlib.metadata.version("ldp-beam") == ldp.__version__


def test_range_answer_subcommand_names_itself(capsys, monkeypatch):
    from pipelines import range_queries

    monkeypatch.setattr(sys, "argv", ["ldp-beam range-queries"])
    with pytest.raises(SystemExit):
        range_queries.run(["answer", "--help"])
    assert capsys.readouterr().out.startswith("usage: ldp-beam range-queries answer ")


# ---- operator output: runner names, caveats where they apply, windows in wall-clock form -------------------


def test_window_labels_are_utc_wall_clock():
    from transforms.progress import window_label

    start = 1_796_119_200_000  # 2026-12-01T10:00:00Z
    assert window_label(start, start + 600_000) == "2026-12-01T10:00:00Z..10:10:00Z"
    assert window_label(start + 250, start + 600_000) == "2026-12-01T10:00:00.250Z..10:10:00Z"
    assert window_label("2026-12-01T23:50:00.000Z", "2026-12-02T00:00:00.000Z") == (
        "2026-12-01T23:50:00Z..2026-12-02T00:00:00Z"  # the end's date when it is another day
    )
    assert window_label(iso := "2026-12-01T10:00:00.000Z", iso) == "2026-12-01T10:00:00Z..10:00:00Z"
    assert window_label(None, None) == "global window"
    assert window_label(0, 0) == "global window"  # the store's key of the global window
    assert window_label(0, 600_000) == "1970-01-01T00:00:00Z..00:10:00Z"  # a real window at the epoch
    from apache_beam.transforms.window import GlobalWindow

    g = GlobalWindow()
    assert window_label(g.start.micros // 1000, g.max_timestamp().micros // 1000) == "global window"
    assert window_label(5, 10**16) == "[5, 10000000000000000) ms"  # no date: the raw bounds, said so


def test_runner_label_is_the_runner_as_named():
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.runners import DirectRunnerWithoutPrism, plan_runner, runner_label

    assert runner_label(PipelineOptions([])) == "DirectRunner"  # Beam's default, by its public name
    flink = "apache_beam.runners.portability.flink_runner.FlinkRunner"
    for typed in ("direct", "DirectRunner", "FlinkRunner", flink):
        assert runner_label(PipelineOptions([f"--runner={typed}"])) == typed
    opts = PipelineOptions([])
    opts.view_as(StandardOptions).runner = DirectRunnerWithoutPrism()
    assert runner_label(opts) == "DirectRunner"
    from ldp.task import WindowConfig

    plan = plan_runner(PipelineOptions([]), WindowConfig(), streaming=False, files=True)
    assert isinstance(plan.runner, DirectRunnerWithoutPrism)  # what runs; the log names the DirectRunner


def test_streaming_counters_caveat_only_for_pubsub_on_the_direct_runner(caplog, monkeypatch, tmp_path):
    from pipelines import job
    from transforms import counts

    monkeypatch.setattr(counts, "job_counts", lambda result: {"read": 3, "accepted": 3, "rejected": 0})
    with caplog.at_level(logging.INFO, logger="pipelines.job"):
        job._counts(object(), str(tmp_path), True)  # a watched directory (or any other runner)
        job._counts(object(), str(tmp_path), True, pubsub_on_direct=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "pipelines.job"]
    assert len(lines) == 2 and all(ln.startswith("Beam counters") for ln in lines), lines
    assert "Pub/Sub" not in lines[0]
    assert "incomplete on the DirectRunner with Pub/Sub" in lines[1]


def _freq_reports(tmp_path: Path, window: dict | None) -> tuple[Path, Path]:
    from pipelines import simulate

    obj = {"task_id": "ops-freq", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16}
    if window is not None:
        obj["window"] = window
    task = tmp_path / "task.json"
    task.write_text(json.dumps(obj), encoding="utf-8")
    simulate.run(["--task", str(task), "--users", "600", "--seed", "3", "--output", str(tmp_path / "in"),
                  "--files", "2", "--start", "2026-12-01T10:00:00Z", "--duration", "1200",
                  "--log_level", "WARNING"])  # fmt: skip
    return task, tmp_path / "in"


def _job_output(caplog, capsys, argv: list[str]) -> tuple[list[str], str]:
    from pipelines import frequency

    capsys.readouterr()
    with caplog.at_level(logging.INFO):
        frequency.run(argv)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(("pipelines", "transforms"))]
    return lines, capsys.readouterr().err


def test_job_log_names_the_runner_and_windows_in_wall_clock_form(caplog, capsys, tmp_path):
    task, reports = _freq_reports(tmp_path, {"size_s": 600})
    lines, err = _job_output(caplog, capsys, [
        "--task", str(task), "--input", str(reports / "*.avro"), "--output", str(tmp_path / "out"),
        "--store", str(tmp_path / "store.db"), "--progress_interval", "0",
    ])  # fmt: skip
    text = "\n".join(lines)
    assert "running on DirectRunner" in lines and "WithoutPrism" not in text + err
    w0, w1 = "2026-12-01T10:00:00Z..10:10:00Z", "2026-12-01T10:10:00Z..10:20:00Z"
    for w in (w0, w1):
        assert any(ln.startswith(f"finalized ops-freq {w} pane 0 (ON_TIME): ") for ln in lines), text
        assert f"store: ops-freq {w} is final" in lines, text
    assert f"estimates: 2 window(s), 2 pane(s): {w0}, {w1}" in err
    # no window in raw milliseconds or in the store's [0, 0) form, no Pub/Sub caveat in a file job
    assert not re.search(r"\[\d+, \d+\)", text + err) and "Pub/Sub" not in text, text


def test_job_log_names_the_global_window(caplog, capsys, tmp_path):
    task, reports = _freq_reports(tmp_path, None)
    lines, err = _job_output(caplog, capsys, [
        "--task", str(task), "--input", str(reports / "*.avro"), "--output", str(tmp_path / "out"),
        "--store", str(tmp_path / "store.db"), "--progress_interval", "0", "--runner=direct",
    ])  # fmt: skip
    text = "\n".join(lines)
    assert "running on direct" in lines, text  # as typed
    finalized = "finalized ops-freq global window pane 0 (ON_TIME): 600 reports"
    assert any(ln.startswith(finalized) for ln in lines), text
    assert "store: ops-freq global window is final" in lines, text
    assert "estimates: 1 window(s), 1 pane(s): global window" in err
    assert "[0, 0)" not in text + err


@pytest.mark.integration
def test_watched_directory_job_shows_no_pubsub_caveat(caplog, capsys, tmp_path):
    task, reports = _freq_reports(tmp_path, {"size_s": 600})
    lines, _err = _job_output(caplog, capsys, [
        "--task", str(task), "--streaming", "--input", str(reports / "*.avro"), "--watch_interval", "1",
        "--streaming_duration", "4", "--output", str(tmp_path / "out"), "--progress_interval", "0",
    ])  # fmt: skip
    text = "\n".join(lines)
    assert "running on DirectRunner" in lines, text
    (counters,) = [ln for ln in lines if ln.startswith("Beam counters")]
    assert "Pub/Sub" not in text, text
    assert "reports read=600" in counters


# ------------------------------------------------------------------------------------------------------------
# SIGTERM: a job unwinds (its store run failed, its child processes stopped by the exit handlers)
# ------------------------------------------------------------------------------------------------------------

_SIGTERM_SCRIPT = """
import atexit, sys, threading, time
from pipelines.cli import sigterm_unwinds
atexit.register(lambda: print("exit handlers ran", flush=True))
if sys.argv[1] == "held":  # a thread that is not a daemon: the interpreter would wait for it forever
    threading.Thread(target=time.sleep, args=(600,)).start()
try:
    with sigterm_unwinds(grace_s=float(sys.argv[2])):
        print("ready", flush=True)
        time.sleep(120)
finally:
    print("unwound", flush=True)
"""


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["plain", "held"])
def test_sigterm_unwinds_the_job_and_runs_its_exit_handlers(mode):
    """SIGTERM raises SystemExit(143) in the main thread: ``finally`` blocks and exit handlers run (Beam's
    job servers and the Kafka bridge are stopped there); a thread that holds the exit is cut after the
    grace period, still after the exit handlers; a second SIGTERM is ignored."""
    import signal
    import subprocess
    import time

    from conftest import venv_env

    grace = 2.0
    proc = subprocess.Popen([sys.executable, "-c", _SIGTERM_SCRIPT, mode, str(grace)], env=venv_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # our own child, by PID
        time.sleep(0.2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # ignored: the first one is being handled
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert out.splitlines() == ["unwound", "exit handlers ran"], (out, err)
    assert "SIGTERM: stopping the job" in err
    if mode == "held":  # cut after the grace period, not waited for
        assert "still running 2 s after SIGTERM" in err and grace <= took < grace + 10
    else:
        assert "still running" not in err and took < grace


def test_sigterm_unwinds_changes_nothing_off_the_main_thread_or_over_a_handler():
    import signal
    import threading

    seen: list[object] = []

    def in_thread() -> None:
        with cli.sigterm_unwinds():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    th = threading.Thread(target=in_thread)
    th.start()
    th.join()
    assert seen == [before]
    with cli.sigterm_unwinds():
        inside = signal.getsignal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before  # restored
    if before is signal.SIG_DFL:
        assert callable(inside) and inside is not before

    def mine(signum, frame):  # noqa: ARG001
        return None

    signal.signal(signal.SIGTERM, mine)
    try:
        with cli.sigterm_unwinds():
            assert signal.getsignal(signal.SIGTERM) is mine  # a handler already set is kept
    finally:
        signal.signal(signal.SIGTERM, before)
