"""A ``--runner`` typo on any Beam job of ``ldp-beam`` is a one-line error naming the valid runners (exit
status 2), found while the flags are parsed (``pipelines.cli.runner_problem``): before the task is read, so
no file the flags name needs to exist, and before anything is written."""

from __future__ import annotations

import pytest

from pipelines.cli import main

#: every command that builds a Beam pipeline, with the flags its parser requires besides the runner
JOBS: dict[str, list[str]] = {
    "frequency": [],
    "range-queries": ["--queries", "q.json"],
    "batch-queries": ["--workload", "w.json"],
    "sparse-mean": [],
    "numeric": [],
    "shuffle": [],
}
COMMON = ["--task", "task.json", "--input", "reports/*.avro", "--output", "out"]


def _one_line_exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    return err


@pytest.mark.parametrize("command", [*JOBS, "demo"])
def test_a_runner_typo_on_every_job_is_one_line_naming_the_runners(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = [] if command == "demo" else [*COMMON, *JOBS[command]]
    err = _one_line_exit([command, *flags, "--runner=DirectRuner"], capsys)
    assert err.startswith(f"ldp-beam {command}: error: --runner='DirectRuner' is not a Beam runner")
    assert "did you mean --runner=DirectRunner?" in err
    for runner in ("DirectRunner", "PrismRunner", "FlinkRunner", "DataflowRunner"):
        assert runner in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["numeric", "shuffle"])
def test_a_runner_module_path_that_does_not_import_is_one_line(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _one_line_exit([command, *COMMON, "--runner", "apache_beam.runners.no_such.Runner"], capsys)
    assert "--runner='apache_beam.runners.no_such.Runner': its module cannot be imported" in err
