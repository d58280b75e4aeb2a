"""The range-query reproduction driver and its summary tool: CLI convention and the workload flags."""

from __future__ import annotations

import json

import pytest

from experiments import range_queries, summarize_range


def test_cli_rejects_unknown_and_conflicting_flags(capsys):
    with pytest.raises(SystemExit):
        range_queries.main(["--domain", "64"])  # old name (and prefix of --domain_size): an error
    assert "unrecognized arguments: --domain" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        range_queries.main(["--omega", "0.5", "--volume", "0.5"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        range_queries.main(["--omega", "1.5"])
    with pytest.raises(SystemExit):
        range_queries.main(["--methods", "hdg@nope=1"])
    assert "unknown option" in capsys.readouterr().err


def test_omega_workload_end_to_end(tmp_path, capsys):
    out = tmp_path / "r.json"
    recs = range_queries.main([
        "--users", "4000", "--attributes", "3", "--domain_size", "16", "--epsilons", "1", "--lambda", "2",
        "--omega", "0.5", "--queries", "10", "--trials", "2", "--methods", "hdg;calm@norm_sub=false;uni",
        "--json", str(out),
    ])
    assert {r["method"] for r in recs} == {"hdg", "calm@norm_sub=false", "uni"}
    assert all(r["omega"] == 0.5 and r["total_volume"] == 0.25 and r["volume"] is None for r in recs)
    assert json.loads(out.read_text()) == recs
    uni = next(r for r in recs if r["method"] == "uni")
    assert 0 < uni["mae"] < 0.5
    summarize_range.main([str(out)])
    assert "omega = 0.5 per attribute" in capsys.readouterr().out
