"""``python -m pipelines.privacy`` (``ldp-beam privacy``): the local guarantee, and the central one per window
and over windows for a shuffled task, each with its method; one-line errors; no Beam."""

from __future__ import annotations

import json
import re
import sys

import pytest

import ldp.shuffle
from ldp import task as T
from pipelines import cli, privacy

OLH = {"task_id": "p", "mechanism": "olh", "epsilon": 2.0, "domain_size": 1024}
TARGET = {"central_epsilon": 1.0, "expected_reports": 1_000_000}


def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as ei:
        privacy.run(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(pattern, err[0]), err


def test_a_shuffled_task_reports_its_central_guarantee(write_json, tmp_path, capsys):
    task = write_json("t.json", {**OLH, "anonymity": {"delta": 1e-8, "min_reports": 1000}})
    out = tmp_path / "p.json"
    r = privacy.run(["--task", str(task), "--users", "100000", "--windows", "12", "--json", str(out)])
    text = capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(r))
    for key in ("local_epsilon", "central_epsilon", "central_delta", "windows", "central_epsilon_composed",
                "method"):  # fmt: skip
        assert saved[key] is not None, key
    assert saved["local_epsilon"] == 2.0 and saved["windows"] == 12 and saved["central_delta"] == 1e-8
    assert saved["accounting"] == "olh" and saved["domain_size"] == 8  # OLH's own bound, its g at eps 2
    assert saved["central_epsilon"] == ldp.shuffle.central_epsilon(2.0, 100_000, 1e-8, "olh", 8)
    assert saved["central_epsilon"] < 0.8 * ldp.shuffle.central_epsilon(2.0, 100_000, 1e-8)  # 0.0331, 0.0437
    comp = ldp.shuffle.compose_windows(2.0, 100_000, 1e-8, windows=12, mechanism="olh", domain_size=8)
    assert saved["central_epsilon_composed"] == comp["tight"]
    assert saved["central_epsilon_composed_basic"] == comp["basic"]
    assert saved["central_epsilon"] < saved["central_epsilon_composed"] <= comp["basic"] < 12 * 2.0
    assert set(saved["method"]) == {"local", "central", "composed", "composed_basic"}
    assert saved["method"]["central"].startswith("variation_ratio (olh, g = 8, beta = ")
    assert "PLD" in saved["method"]["composed"]
    assert "12 window(s)" in text and "(tight)" in text and "(basic)" in text and "variation_ratio" in text
    # --delta overrides the section's
    lower = privacy.run(["--task", str(task), "--users", "100000", "--delta", "1e-12"])
    assert lower["central_delta"] == 1e-12 and lower["central_epsilon"] > saved["central_epsilon"]


def test_grr_is_accounted_with_its_own_bound_and_the_target_is_reported(write_json, capsys):
    raw = {**OLH, "mechanism": "grr", "epsilon": "auto", "anonymity": TARGET}
    task = write_json("t.json", T.resolve_task(raw))
    r = privacy.run(["--task", str(task)])  # --users defaults to the expected reports
    assert r["users"] == 1_000_000 and r["accounting"] == "grr" and r["domain_size"] == 1024
    want = ldp.shuffle.central_epsilon(r["local_epsilon"], 1_000_000, 1e-9, "grr", 1024)
    assert r["central_epsilon"] == want
    assert r["central_epsilon"] <= 1.0 and r["target"]["met_at_users"] is True
    assert r["method"]["central"].startswith("variation_ratio (grr, k = 1024, beta = ")
    fewer = privacy.run(["--task", str(task), "--users", "100000"])  # the n actually shuffled decides
    assert fewer["central_epsilon"] > 1.0 and fewer["target"]["met_at_users"] is False
    assert "NOT met at this n" in capsys.readouterr().out


def test_a_task_without_anonymity_has_no_central_guarantee(write_json, tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = ["--task", str(write_json("t.json", OLH)), "--users", "1000", "--windows", "3", "--json", str(out)]
    privacy.run(argv)
    assert privacy.NOT_SHUFFLED in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["local_epsilon"] == 2.0 and saved["local"]["composed"] == 6.0
    assert saved["central_epsilon"] is None and saved["central_epsilon_composed"] is None
    assert saved["method"]["central"] == privacy.NOT_SHUFFLED


def test_memoized_mechanisms_report_epsilon_1_and_epsilon_inf(write_json, capsys):
    memo = {**OLH, "mechanism": "memo-grr", "domain_size": 8, "params": {"epsilon_1": 1.0}}
    task = write_json("t.json", memo)
    r = privacy.run(["--task", str(task), "--windows", "20"])
    g = T.load_task(task).make_oracle().guarantees()
    assert r["local"]["epsilon_1"] == pytest.approx(g["epsilon_1"]) and r["local"]["epsilon_inf"] == 2.0
    assert r["local"]["composed_constant_value"] == 2.0 and r["local"]["composed_changing_value"] == 16.0
    text = capsys.readouterr().out
    assert "epsilon_1 = " in text and "epsilon_inf = 2" in text and privacy.NOT_SHUFFLED in text


def test_errors_are_one_line(write_json, tmp_path, capsys):
    shuffled = write_json("s.json", {**OLH, "anonymity": {}})
    s = ["--task", str(shuffled)]
    _fails(capsys, [*s, "--users", "999"], r"below the task's anonymity.min_reports \(1000\)")
    _fails(capsys, s, "--users is required")
    _fails(capsys, [*s, "--users", "5000", "--windows", "0"], "--windows must be >= 1")
    _fails(capsys, [*s, "--users", "5000", "--delta", "1.5"], r"--delta must be in \(0, 1\)")
    bad = write_json("b.json", {**OLH, "anonymity": {"min_reports": 1}})
    _fails(capsys, ["--task", str(bad), "--users", "5000"], "anonymity.min_reports must be an integer >= 2")
    _fails(capsys, ["--task", str(tmp_path / "missing.json")], "cannot read task file")
    _fails(capsys, ["--task", str(shuffled), "--runner", "DirectRunner"], "unrecognized arguments")
    _fails(capsys, ["--task", str(shuffled), "--users", "5000", "--json", str(tmp_path / "no" / "p.json")],
           "cannot write")  # fmt: skip


def test_ldp_beam_privacy_is_registered():
    assert cli.COMMANDS["privacy"][0] == "pipelines.privacy"


@pytest.mark.integration
def test_subprocess_help_and_a_run_import_no_beam(run_cli, write_json):
    task = write_json("t.json", {**OLH, "anonymity": {}})
    code = (
        "import sys\n"
        "from pipelines import privacy\n"
        "try:\n"
        "    privacy.run(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
        "help_beam = 'apache_beam' in sys.modules\n"
        f"privacy.run(['--task', {str(task)!r}, '--users', '10000', '--windows', '4'])\n"
        "print('BEAM', help_beam, 'apache_beam' in sys.modules)\n"
    )
    p = run_cli(sys.executable, "-c", code)
    assert p.returncode == 0, p.stderr
    assert "BEAM False False" in p.stdout and "4 window(s)" in p.stdout
