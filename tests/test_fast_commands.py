"""Commands that need no pipeline never import Apache Beam, and no command imports it for ``--help``.

Every command's ``--help``, through ``ldp-beam CMD`` and ``python -m MODULE``, runs in a fresh interpreter
with ``-X importtime`` (``PYTHONPROFILEIMPORTTIME=1``), whose stderr lists every module imported: none may
be ``apache_beam``. So do ``range-queries answer`` on a saved model, ``privacy`` on a task and ``show`` on
an output directory. The job's Beam options are still checked after parsing: an unknown flag stays a
one-line error. Wall times are measured by the benchmarks, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines import cli

#: Modules a command that runs no pipeline (and any command's --help) must not import.
BEAM = "apache_beam"

MODULES = sorted({m for m, _ in cli.commands().values()} | {"pipelines.simulate_range"})


def _ldp_beam() -> str:
    exe = Path(sys.executable).parent / "ldp-beam"
    if not exe.exists():
        pytest.fail(f"{exe} missing: the package is not installed (bash tools/ensure_venv.sh)")
    return str(exe)


def _imported(stderr: str) -> set[str]:
    """The modules named by ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _run_profiled(run_cli, *args: str, module: str | None = None) -> tuple[subprocess.CompletedProcess, set]:
    out = run_cli(*args, module=module, env={"PYTHONPROFILEIMPORTTIME": "1"}, timeout=120)
    imported = _imported(out.stderr)
    assert "pipelines.cli" in imported, out.stderr[-2000:]  # the profile was taken
    return out, imported


def _no_beam(imported: set[str]) -> None:
    beam = sorted(m for m in imported if m == BEAM or m.startswith(BEAM + "."))
    assert not beam, f"imported {len(beam)} Beam module(s), e.g. {beam[:3]}"


@pytest.mark.parametrize("name", sorted(cli.commands()))
@pytest.mark.integration
def test_ldp_beam_help_imports_no_beam_subprocess(run_cli, name):
    out, imported = _run_profiled(run_cli, _ldp_beam(), name, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(f"usage: ldp-beam {name}"), out.stdout[:200]
    _no_beam(imported)


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.integration
def test_python_m_help_imports_no_beam_subprocess(run_cli, module):
    out, imported = _run_profiled(run_cli, "--help", module=module)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(f"usage: python -m {module}"), out.stdout[:200]
    _no_beam(imported)


@pytest.mark.integration
def test_range_answer_help_imports_no_beam_subprocess(run_cli):
    out, imported = _run_profiled(run_cli, _ldp_beam(), "range-queries", "answer", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: ldp-beam range-queries answer "), out
    _no_beam(imported)


def _saved_model(tmp_path: Path) -> tuple[Path, list[dict]]:
    """OUT/models/ of a range task, as the job writes it (the models output's JSON Lines form of the
    aggregator's model row), made in this process without a pipeline; and the queries it answers."""
    from ldp.aggregate import GLOBAL_WINDOW, GroupAccumulators, accumulate, finalize_window
    from ldp.kinds.range.aggregate import MODELS, RangeAggregator
    from ldp.rangequery.queries import parse_queries
    from ldp.task import parse_task

    task = parse_task({
        "task_id": "fast-range", "mechanism": "hdg", "epsilon": 1.0, "expected_users": 2000,
        "attributes": [{"name": n, "domain_size": 8} for n in ("a", "b")],
    })  # fmt: skip
    queries = [{"a": [0, 3]}, {"a": [2, 7], "b": [1, 4]}]
    agg = RangeAggregator(task, parse_queries(queries, task.attribute_names, task.domain_sizes))
    rng = np.random.default_rng(np.random.SeedSequence(20261201))
    mech = agg.mechanism
    n = 2000
    per_group = mech.encode(rng.integers(0, 8, size=(n, 2)), rng=rng, groups=mech.assign_groups(n, rng=rng))
    accs = GroupAccumulators()
    for g, rep in per_group.items():
        accumulate(agg, accs, g, rep)
    (model,) = [r for r in finalize_window(agg, accs, GLOBAL_WINDOW) if r.output == "models"]
    models = tmp_path / "out" / "models"
    models.mkdir(parents=True)
    line = json.dumps(MODELS.to_json(model._asdict()), allow_nan=False)
    (models / "models-pane00000-00000-of-00001.jsonl").write_text(line + "\n", encoding="utf-8")
    return models, queries


@pytest.mark.integration
def test_range_answer_on_a_saved_model_imports_no_beam_subprocess(run_cli, tmp_path):
    from ldp.kinds.range.aggregate import answer_from_model_records, read_model_records

    models, queries = _saved_model(tmp_path)
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(queries), encoding="utf-8")
    out, imported = _run_profiled(
        run_cli, _ldp_beam(), "range-queries", "answer", "--model", str(models), "--queries", str(qfile)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    _no_beam(imported)
    got = [json.loads(line) for line in out.stdout.splitlines()]
    want = answer_from_model_records(read_model_records(str(models)), queries)
    assert [(r["query_index"], r["answer"], r["std"]) for r in got] == [
        (r["query_index"], r["answer"], r["std"]) for r in want
    ]


@pytest.mark.integration
def test_privacy_figures_import_no_beam_subprocess(run_cli, frequency_task_file):
    task = frequency_task_file()
    out, imported = _run_profiled(run_cli, _ldp_beam(), "privacy", "--task", str(task))
    assert out.returncode == 0 and "epsilon" in out.stdout.lower(), out.stderr[-2000:]
    _no_beam(imported)


@pytest.mark.integration
def test_show_imports_no_beam_subprocess(run_cli, tmp_path):
    from ldp.kinds.range.aggregate import answer_from_model_records, read_model_records

    models, queries = _saved_model(tmp_path)
    out_dir = models.parent
    # the answers the job writes beside its models (their JSON Lines form), from the saved model
    rows = answer_from_model_records(read_model_records(str(models)), queries)
    (out_dir / "answers-pane00000-00000-of-00001.jsonl").write_text(
        "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows), encoding="utf-8"
    )
    (out_dir / cli.OUTPUT_MARKER).write_text("{}\n", encoding="utf-8")
    out, imported = _run_profiled(run_cli, _ldp_beam(), "show", str(out_dir))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fast-range" in out.stdout
    _no_beam(imported)


@pytest.mark.integration
def test_unknown_flag_is_still_one_line_after_parsing_subprocess(run_cli, frequency_task_file, tmp_path):
    task = frequency_task_file()
    out = run_cli(
        _ldp_beam(), "frequency", "--task", str(task), "--input", str(tmp_path / "*.avro"),
        "--output", str(tmp_path / "out"), "--window-size", "600",
    )  # fmt: skip
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "unrecognized arguments: --window-size 600" in lines[0]
    assert "did you mean --window_size?" in lines[0]
    bad_beam = run_cli(
        _ldp_beam(), "frequency", "--task", str(task), "--input", str(tmp_path / "*.avro"),
        "--output", str(tmp_path / "out"), "--direct_num_workers", "two",
    )  # fmt: skip
    lines = bad_beam.stderr.strip().splitlines()
    assert bad_beam.returncode == 2 and len(lines) == 1, bad_beam.stderr
    assert "Beam pipeline option" in lines[0] and "--direct_num_workers" in lines[0]


def test_the_collectors_done_marker_is_the_watchs():
    from pipelines.collector import DONE_SUFFIX
    from transforms.io import DONE_SUFFIX as WATCHED

    assert DONE_SUFFIX == WATCHED
