"""experiments.longitudinal end to end on a small population: the record fields, the
budget figures against their definitions, and the plot."""

from __future__ import annotations

import json

import pytest

from experiments import longitudinal as exp


def test_small_run_writes_records_with_the_required_fields(tmp_path):
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    exp.main(["--users", "3000", "--windows", "4", "--epsilon", "1", "--change_rate", "0.5",
              "--methods", "fresh,memo-olh,loloha,rappor", "--json", str(out), "--plot", str(png)])
    doc = json.loads(out.read_text())
    recs = doc["records"]
    assert {r["method"] for r in recs} == {"fresh", "memo-olh", "loloha", "rappor"}
    assert len(recs) == 4 * 4 and png.stat().st_size > 0
    for r in recs:
        for k in ("method", "window", "mse", "epsilon_spent", "epsilon_spent_basic", "mse_theory"):
            assert k in r
        assert r["epsilon_spent"] <= r["epsilon_spent_basic"] * (1 + 1e-9)
    by = {(r["method"], r["window"]): r for r in recs}
    for t in range(4):
        assert by["fresh", t]["epsilon_spent_basic"] == pytest.approx(t + 1)
        assert by["loloha", t]["epsilon_spent"] <= 2 * 1.0 * (1 + 1e-9)  # g = 2 at eps 1, alpha 0.5
        assert by["loloha", t]["keys_max"] <= 2
        assert by["memo-olh", t]["keys_max"] <= t + 1
    assert by["memo-olh", 0]["epsilon_spent"] == pytest.approx(1.0, abs=2e-3)  # e_inf after one window
    spent = [by["fresh", t]["epsilon_spent"] for t in range(4)]
    assert spent == sorted(spent)
    assert doc["config"]["drift"] == {"change_rate": 0.5, "zipf": 1.1, "shift": 1}
    assert doc["methods"]["loloha"]["g"] == 2


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        exp.main(["--methods", "fresh,nope", "--json", str(tmp_path / "x.json")])
    assert "unknown --methods" in capsys.readouterr().err
