"""A tiny run of ``experiments.shuffle`` (the full run is in experiments/results/shuffle.md)."""

from __future__ import annotations

import json

import ldp.shuffle
from experiments import shuffle as X


def test_grid():
    assert X.grid(10_000_000) == [10**4, 10**5, 10**6, 10**7]
    assert X.grid(3_000_000) == [10**4, 10**5, 10**6, 3_000_000]
    assert X.grid(2000) == [2000]


def test_smoke_run_writes_the_records_and_the_accountant_table(tmp_path):
    out = tmp_path / "s.json"
    X.main(["--users", "2000", "--trials", "1", "--table_n", "1000", "--json", str(out)])
    r = json.loads(out.read_text())
    recs = {x["mechanism"]: x for x in r["records"]}
    assert set(recs) == {"olh", "grr", "auto", "hdg"}
    for x in recs.values():
        for key in ("n", "central_epsilon", "central_delta", "local_epsilon", "mse", "mse_pure_ldp"):
            assert x[key] is not None, key
        assert x["n"] == 2000 and x["central_epsilon"] == 1.0 and x["central_delta"] == 1e-9
        # eps0 is the task model's choice for the target, and the accountant certifies it at n
        assert x["local_epsilon"] > 1.0 and x["central_epsilon_achieved"] <= 1.0
    # each task is accounted by its own mechanism's bound (`accounting`), never looser than the general bound
    # every eps0-LDP randomizer has, and eps0 is the largest that meets the target: the achieved figure sits
    # just under it (bisection tolerance and the task model's rounding of eps0 down to 0.001)
    general = ldp.shuffle.local_epsilon_for_central(1.0, 1e-9, 2000)
    assert recs["olh"]["accounting"] == "olh" and recs["grr"]["accounting"] == "grr"
    for m in ("olh", "grr"):
        assert recs[m]["local_epsilon"] >= general - 1e-3
        assert recs[m]["central_epsilon_achieved"] > 0.99
    rows = r["accountant"]["spec_grid"]
    assert [(row["n"], row["eps0"]) for row in rows] == [(1000, e) for e in (0.5, 1.0, 2.0, 4.0)]
    one = rows[1]  # the spec's cross-check values at n = 1e3, eps0 = 1, delta = 1e-6: 0.650 / 0.182
    assert abs(one["fmt_closed_form"] - 0.650) < 1e-3 and abs(one["general"] - 0.182) < 1e-3
    assert one["binary_rr_equal_split_lower"] <= one["binary_rr_exact"] <= one["binary_rr_blanket"]
