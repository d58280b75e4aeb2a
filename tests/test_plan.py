"""``ldp.plan`` and ``ldp-beam plan``: every kind's plan, its figures against the closed forms and the
accountant they come from, the central target, the command's output and one-line errors, and no Beam.
The predictions against simulation are ``tests/test_plan_simulation.py``."""

from __future__ import annotations

import json
import math
import re
import sys

import pytest

import ldp.kinds
import ldp.shuffle
from ldp import plan as P
from ldp.selection import simultaneous_z
from ldp.task import parse_task
from pipelines import plan as cli_plan

FREQ = {"task_id": "fruit", "mechanism": "auto", "epsilon": 1.0, "domain_size": 1024}
RANGE = {"task_id": "r", "mechanism": "hdg", "epsilon": 1.0,
         "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 8}],
         "expected_users": 100_000}
NUMERIC_SW = {"task_id": "n", "kind": "numeric", "mechanism": "square-wave", "epsilon": 1.0,
              "attributes": [{"name": "x", "low": 0, "high": 10}], "quantiles": [0.5, 0.9],
              "params": {"bins": 64}}


BUILT_IN = ("frequency", "range", "batch_queries", "sparse", "numeric")


@pytest.fixture(autouse=True)
def _quick_range_plans(monkeypatch):
    """Range plans simulate collections for about 4 s; these tests need the shape, not the precision."""
    from ldp.kinds.range import plan as range_plan

    monkeypatch.setattr(range_plan, "PLAN_SECONDS", 0.2)


def test_every_registered_kind_is_planned_from_its_entry():
    for kind in ldp.kinds.KINDS.values():
        if kind.plan is None:  # a kind registered without a plan piece is refused in one line
            assert kind.name not in BUILT_IN and kind.example is not None, kind.name
            with pytest.raises(P.PlanError, match="has no plan piece"):
                P.plan_task(parse_task(dict(kind.example)), 10_000)
            continue
        task = parse_task(dict(kind.example))
        plan = P.plan_task(task, 10_000, 3)
        assert plan["kind"] == kind.name and plan["windows"] == 3 and plan["errors"], kind.name
        for e in plan["errors"]:
            assert e["std"] > 0 and math.isfinite(e["std"]), (kind.name, e)
            normal = pytest.approx(1.959964 * e["std"], rel=1e-5)
            assert e["half_width_95"] == normal or "quantile" in e["statistic"]
        c = plan["cost"]
        assert c["memory_bytes"] >= c["accumulator_bytes"] >= 0 and c["seconds"] > 0, kind.name
        assert json.loads(json.dumps(plan)) == plan  # plain JSON


def test_frequency_std_is_the_oracles_closed_form_per_group():
    task = parse_task({**FREQ, "n_groups": 4})
    plan = P.plan_task(task, 1_000_000)
    oracle = task.make_oracle()
    e = plan["errors"][0]
    assert plan["chosen_mechanism"] == oracle.name == "olh" and plan["eps0"] == 1.0
    assert e["reports_per_group"] == 250_000
    assert e["std"] == pytest.approx(math.sqrt(oracle.variance(250_000)), rel=1e-12)
    assert e["std_max"] >= e["std"]
    assert e["simultaneous_half_width_95"] == pytest.approx(simultaneous_z(1024) * e["std"])


@pytest.mark.parametrize("mechanism,eps", [("grr", 8.0), ("olh", 1.0), ("oue", 0.5)])
def test_the_smallest_flagged_frequency_sits_at_the_bonferroni_threshold(mechanism, eps):
    task = parse_task({**FREQ, "mechanism": mechanism, "epsilon": eps, "domain_size": 64})
    plan = P.plan_task(task, 100_000)
    det, oracle = plan["detection"], task.make_oracle()
    f = det["frequency_flagged_half_the_time"]
    # the rows flag by the exact binomial test: the cut is the smallest support count c with
    # 2 P[S >= c] <= 0.05 / 64 under Binomial(n, q), and at f the mean count is c - 1/2
    from scipy.stats import binom

    n, p, q = 100_000, oracle.p, oracle.q
    mean = n * (q + f * (p - q))
    cut = round(mean + 0.5)
    assert mean + 0.5 == pytest.approx(cut, abs=1e-6) and det["test"] == "exact binomial"
    assert 2 * binom.sf(cut - 1, n, q) <= 0.05 / 64 < 2 * binom.sf(cut - 2, n, q)
    f80 = det["frequency_flagged_80pct"]
    assert f80 - f == pytest.approx(0.841621 * math.sqrt(oracle.variance(100_000, f80)), rel=1e-5)
    bh = P.plan_task(task, 100_000, rule="bh")["detection"]
    assert bh["rule"] == "bh" and bh["bound"].startswith("upper bound")


def test_a_central_target_plans_the_shuffled_task_and_its_accounting():
    obj = P.with_target(FREQ, 1_000_000, 1.0, 1e-9)
    assert obj["epsilon"] == "auto" and obj["anonymity"]["central_epsilon"] == 1.0
    assert obj["anonymity"]["expected_reports"] == 1_000_000 and FREQ["epsilon"] == 1.0  # a copy
    task = parse_task(obj)
    plan = P.plan_task(task, 1_000_000, 4)
    pr = plan["privacy"]
    assert pr["shuffled"] and pr["batch_reports"] == 1_000_000 and pr["delta"] == 1e-9
    assert pr["central_epsilon_per_batch"] <= 1.0 + 1e-6
    acc, k = ldp.shuffle.accounting_for_task(task)
    want = ldp.shuffle.central_epsilon_report(task.epsilon, 1_000_000, 1e-9, acc, k)
    assert pr["central_epsilon_per_batch"] == want.epsilon and pr["method"] == want.method
    comp = ldp.shuffle.compose_windows(task.epsilon, 1_000_000, 1e-9, windows=4, mechanism=acc, domain_size=k)
    assert pr["central_epsilon_composed"] == comp["tight"]
    assert plan["eps0"] == task.epsilon > 1.0  # amplification: a larger local epsilon than the target
    assert P.with_target(FREQ, 10, None, None) == FREQ
    with pytest.raises(P.PlanError, match="shuffled task"):
        P.with_target(FREQ, 10, None, 1e-9)


def test_range_and_numeric_plans_name_their_statistics():
    r = P.plan_task(parse_task(RANGE), 50_000)
    labels = [e["statistic"] for e in r["errors"]]
    assert labels == ["1-D: a in lower half", "1-D: b in lower half", "2-D: a and b in lower halves"]
    assert r["groups"] >= 3 and all("scaled" not in e["how"] for e in r["errors"])  # 50,000 simulated
    n = P.plan_task(parse_task(NUMERIC_SW), 100_000)
    assert [e["statistic"] for e in n["errors"]] == ["x: mean", "x: quantile 0.5", "x: quantile 0.9"]
    mean = n["errors"][0]
    assert mean["std"] <= mean["std_worst"] and 0 < mean["std"] < 10


def test_bad_users_or_windows_are_refused():
    task = parse_task(FREQ)
    for users, windows in ((1, 1), (10, 0), (True, 1), (10.5, 1)):
        with pytest.raises(P.PlanError):
            P.plan_task(task, users, windows)  # type: ignore[arg-type]


def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as ei:
        cli_plan.run(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(pattern, err[0]), err


def test_the_command_prints_and_writes_the_plan(write_json, tmp_path, capsys):
    task = write_json("t.json", FREQ)
    out = tmp_path / "plan.json"
    plan = cli_plan.run([str(task), "--users", "1000000", "--windows", "24", "--json", str(out)])
    text = capsys.readouterr().out
    assert json.loads(out.read_text()) == json.loads(json.dumps(plan))
    assert "mechanism: olh, eps0 = 1" in text and "smallest flagged frequency (Bonferroni" in text
    assert "one window: accumulators" in text and "24 window(s)" in text
    shuffled = cli_plan.run([str(task), "--users", "1000000", "--central_epsilon", "1", "--delta", "1e-9"])
    assert shuffled["privacy"]["shuffled"] and "central epsilon" in capsys.readouterr().out


def test_the_command_prints_a_trie_tasks_schedule(write_json, capsys):
    task = write_json("hh.json", {"task_id": "w", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0,
                                  "max_length": 6, "mode": "trie"})
    plan = cli_plan.run([str(task), "--users", "250000", "--windows", "8"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("trie mode:"))
    per_round = plan["trie"]["windows_per_round"]
    assert f"{per_round} windows a round" in line and "(verification)" in line
    assert f"all 250,000 users of its window; {8 // per_round} full round(s)" in line


def test_the_command_refuses_bad_input_in_one_line(write_json, tmp_path, capsys):
    task = write_json("t.json", FREQ)
    _fails(capsys, [str(task), "--users", "1"], r"--users must be >= 2")
    _fails(capsys, [str(task), "--users", "10", "--windows", "0"], r"--windows must be >= 1")
    _fails(capsys, [str(task), "--users", "10", "--central_epsilon", "0"], r"--central_epsilon must be")
    _fails(capsys, [str(task), "--users", "10", "--delta", "0.5"], r"--delta must be")
    _fails(capsys, [str(task), "--users", "10", "--delta", "1e-9"], r"applies to a shuffled task")
    _fails(capsys, [str(task), "--users", "10", "--bogus"], r"unrecognized arguments: --bogus")
    _fails(capsys, [str(tmp_path / "none.json"), "--users", "10"], r"cannot read task file")
    bad = write_json("bad.json", {**FREQ, "domain_size": 1})
    _fails(capsys, [str(bad), "--users", "10"], r"domain_size")
    (tmp_path / "x.json").write_text("{", encoding="utf-8")
    _fails(capsys, [str(tmp_path / "x.json"), "--users", "10"], r"not valid JSON")
    _fails(capsys, [str(task), "--users", "10", "--json", str(tmp_path / "no" / "p.json")], r"cannot write")


BLOCK_BEAM = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "apache_beam" or name.startswith("apache_beam."):
            raise ImportError("apache_beam is blocked in this test")
sys.meta_path.insert(0, _Block())
from pipelines import plan
plan.run(sys.argv[1:])
assert not any(m.startswith("apache_beam") for m in sys.modules)
"""


@pytest.mark.integration
def test_plan_runs_with_apache_beam_blocked_subprocess(run_cli, write_json):
    for i, obj in enumerate((FREQ, RANGE, NUMERIC_SW, dict(ldp.kinds.get("sparse").example),
                             dict(ldp.kinds.get("batch_queries").example))):
        task = write_json(f"t{i}.json", obj)
        out = run_cli(sys.executable, "-c", BLOCK_BEAM, str(task), "--users", "20000", timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "predicted error" in out.stdout


def test_every_mechanism_of_the_closed_form_kinds_is_planned():
    """Frequency (memoized ones included), numeric (the memoized counter included) and sparse."""
    for name in ("frequency", "numeric", "sparse"):
        kind = ldp.kinds.get(name)
        for mech in kind.task.mechanisms():
            obj = {**kind.example, "mechanism": mech}
            if mech == "square-wave":
                obj["params"] = {"bins": 32}
            plan = P.plan_task(parse_task(obj), 20_000)
            assert plan["errors"] and all(0 < e["std"] < math.inf for e in plan["errors"]), (name, mech)
