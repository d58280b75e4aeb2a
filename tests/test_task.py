"""Tests of ldp.task: one task model for every kind, defaults, and all-problems-at-once validation."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ldp.hashing
import ldp.oracles
import ldp.postprocess
from ldp import task as T
from ldp.kinds import KINDS
from ldp.kinds.frequency.task import ORACLE_MECHANISMS, FrequencyTask
from ldp.kinds.range.task import MULTI_ATTRIBUTE_MECHANISMS, RangeTask
from ldp.rangequery import registry
from ldp.task.base import COMMON_KEYS

ROOT = Path(__file__).resolve().parents[1]
ATTRS = [{"name": "age", "domain_size": 64}, {"name": "income", "domain_size": 64}]
RANGE = {"task_id": "r", "mechanism": "hdg", "epsilon": 1.0, "attributes": ATTRS, "expected_users": 1000}


def test_minimal_task_defaults_and_roundtrip(tmp_path):
    with pytest.raises(T.TaskError, match=r"got 'OLH' \(names are lower case: 'olh'\)"):  # as the schema says
        T.parse_task({"task_id": "a", "mechanism": "OLH", "epsilon": 1, "domain_size": 1024})
    t = T.parse_task({"task_id": "a", "mechanism": "olh", "epsilon": 1, "domain_size": 1024})
    assert isinstance(t, FrequencyTask) and isinstance(t, T.CollectionTask) and t.kind == "frequency"
    assert (t.mechanism, t.epsilon, t.domain_size) == ("olh", 1.0, 1024)
    assert t.schema_version == 2 and t.n_groups == 1 and t.postprocess == "base"
    assert t.hash == T.HashConfig("gf2-affine", None)
    assert t.window == T.WindowConfig() and t.window.size_s is None and not t.window.accumulating
    assert T.parse_task(t.to_dict()) == t
    p = tmp_path / "t.json"
    t.save(p)
    assert T.load_task(p) == t
    assert t.make_oracle().name == "olh"


def test_auto_and_params():
    t = T.parse_task(
        {
            "task_id": "a",
            "mechanism": "auto",
            "epsilon": 1.0,
            "domain_size": 1024,
            "postprocess": "norm-sub",
            "window": {"size_s": 60, "period_s": 10, "accumulating": True},
        }
    )
    assert t.postprocess == "norm-sub" and t.window.period_s == 10.0
    with pytest.raises(T.TaskError, match=r"got 'norm_sub' \(spelled 'norm-sub' in a task file\)"):
        T.parse_task(
            {"task_id": "a", "mechanism": "grr", "epsilon": 1, "domain_size": 4, "postprocess": "norm_sub"}
        )
    assert t.make_oracle().name in ORACLE_MECHANISMS
    t2 = T.parse_task(
        {"task_id": "b", "mechanism": "olh", "epsilon": 2.0, "domain_size": 64, "hash": {"g": 8}}
    )
    assert t2.make_oracle().g == 8
    t3 = T.parse_task(
        {"task_id": "c", "mechanism": "ss", "epsilon": 1.0, "domain_size": 64, "params": {"k": 5}}
    )
    assert t3.make_oracle().k == 5


def test_name_lists_come_from_the_registries():
    from ldp.longitudinal.memo import MEMO_MECHANISMS

    assert ORACLE_MECHANISMS == (*ldp.oracles.MECHANISMS, *MEMO_MECHANISMS, "auto")
    assert MULTI_ATTRIBUTE_MECHANISMS == tuple(registry.METHODS)
    assert T.POSTPROCESS_METHODS == tuple(m.value for m in ldp.postprocess.Method)
    assert T.HASH_FAMILY_NAMES == tuple(ldp.hashing.HASH_FAMILIES)
    assert {"gf2-affine", "linear-gf"} <= set(T.HASH_FAMILY_NAMES)
    assert list(T.TASK_KINDS) == list(KINDS)  # the registry's kinds, each with its task section
    assert {"frequency", "range", "batch_queries", "sparse", "numeric"} <= set(KINDS)


def test_every_problem_reported_at_once():
    bad = {
        "task_id": "has space",
        "mechanism": "nope",
        "epsilon": -1,
        "domain_size": 1,
        "n_groups": 0,
        "postprocess": "magic",
        "window": {"size_s": -5, "accumulating": "yes", "bogus": 1},
        "colour": "red",
        "schema_version": 9,
        "hash": {"family": "md5"},
    }
    with pytest.raises(T.TaskError, match=r"problem\(s\)") as ei:
        T.parse_task(bad)
    msgs = "\n".join(ei.value.problems)
    for needle in (
        "task_id",
        "mechanism",
        "epsilon",
        "postprocess",
        "window.size_s",
        "window.accumulating",
        "window: unknown key 'bogus'",
        "unknown key 'colour'",
        "schema_version",
        "hash.family",
    ):
        assert needle in msgs, needle
    assert len(ei.value.problems) >= 10
    assert str(ei.value).count("\n  - ") == len(ei.value.problems)
    # a known mechanism: the kind's own sections are checked in the same pass
    with pytest.raises(T.TaskError, match=r"problem\(s\)") as ei:
        T.parse_task({**bad, "mechanism": "grr"})
    msgs = "\n".join(ei.value.problems)
    for needle in ("domain_size must be", "n_groups must be", "task_id", "epsilon", "postprocess"):
        assert needle in msgs, needle


def test_missing_required_keys_and_oracle_parameters():
    with pytest.raises(T.TaskError, match=r"problem\(s\)") as ei:
        T.parse_task({})
    assert sorted(p for p in ei.value.problems) == sorted(
        f"missing required key {k!r}" for k in ("task_id", "mechanism", "epsilon")
    )
    with pytest.raises(T.TaskError, match="missing 'domain_size' \\(required by mechanism 'grr'\\)"):
        T.parse_task({"task_id": "a", "mechanism": "grr", "epsilon": 1.0})
    with pytest.raises(T.TaskError, match="prime power"):
        T.parse_task(
            {
                "task_id": "a",
                "mechanism": "olh",
                "epsilon": 1.0,
                "domain_size": 16,
                "hash": {"family": "linear-gf", "g": 6},
            }
        )
    with pytest.raises(T.TaskError, match="power of two"):
        T.parse_task(
            {"task_id": "a", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16, "hash": {"g": 6}}
        )
    with pytest.raises(T.TaskError, match="'olh' only"):
        T.parse_task(
            {"task_id": "a", "mechanism": "grr", "epsilon": 1.0, "domain_size": 16, "hash": {"g": 4}}
        )
    with pytest.raises(T.TaskError, match="rejected by ldp.oracles"):
        T.parse_task(
            {"task_id": "a", "mechanism": "grr", "epsilon": 1.0, "domain_size": 16, "params": {"k": 2}}
        )


def test_hash_family_default_and_legacy():
    base = {"task_id": "a", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16}
    assert T.parse_task(base).hash.family == "gf2-affine"
    legacy = T.parse_task({**base, "hash": {"family": "linear-gf", "g": 3}})
    assert legacy.hash == T.HashConfig("linear-gf", 3)
    assert T.parse_task(legacy.to_dict()) == legacy
    with pytest.raises(T.TaskError, match="hash.family must be one of gf2-affine, linear-gf"):
        T.parse_task({**base, "hash": {"family": "sha1"}})


def test_schema_version_1_is_refused():
    with pytest.raises(T.TaskError, match=r"schema_version must be one of \(2,\), got 1"):
        T.parse_task(
            {"task_id": "a", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4, "schema_version": 1}
        )


def test_load_task_file_errors(tmp_path):
    with pytest.raises(T.TaskError, match="cannot read"):
        T.load_task(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text('{"task_id": "a",\n "epsilon": }')
    with pytest.raises(T.TaskError, match="line 2"):
        T.load_task(p)


def test_range_task_variant():
    t = T.parse_task({**RANGE, "granularity": {"g1": 8}, "options": {"oracle": "oue"}})
    assert isinstance(t, RangeTask) and t.kind == "range" and t.is_multi_attribute
    assert t.attribute_names == ("age", "income") and t.domain_sizes == (64, 64)
    assert t.options == {"oracle": "oue", "g1": 8}
    mech = t.make_mechanism()
    assert t.n_groups == mech.n_groups == 3 and mech.g1 == 8
    assert T.parse_task(t.to_dict()) == t
    assert T.parse_task({**RANGE, "params": {"g1": 8}}).options == {"g1": 8}  # params: alias of options
    with pytest.raises(ValueError, match="not a frequency oracle"):
        t.make_oracle()


def test_range_task_problems_all_at_once():
    bad = {
        "task_id": "rq demo!",
        "mechanism": "calm",
        "epsilon": 0,
        "attributes": ATTRS + [{"name": "age", "domain_size": 1}],
        "granularity": {"g1": 8},
        "domain_size": 4,
    }
    with pytest.raises(T.TaskError, match=r"problem\(s\)") as ei:
        T.parse_task(bad)
    msgs = "\n".join(ei.value.problems)
    for needle in (
        "task_id must be",
        "epsilon must be",
        "attributes[2].name 'age' is repeated",
        "attributes[2].domain_size",
        "missing 'expected_users' (required by mechanism 'calm')",
        "granularity applies to hdg/tdg only",
        "key 'domain_size' belongs to frequency tasks",
    ):
        assert needle in msgs, needle
    with pytest.raises(T.TaskError, match="n_groups 5 does not match hdg's 3 groups"):
        T.parse_task({**RANGE, "n_groups": 5})
    with pytest.raises(T.TaskError, match="power of two"):
        T.parse_task({**RANGE, "granularity": {"g1": 10}})
    with pytest.raises(T.TaskError, match="unknown option"):
        T.parse_task({**RANGE, "options": {"bogus": 1}})
    with pytest.raises(T.TaskError, match="key 'attributes' belongs to range tasks"):
        T.parse_task(
            {"task_id": "x", "mechanism": "olh", "epsilon": 1.0, "domain_size": 4, "attributes": ATTRS}
        )


def test_one_validator_for_both_kinds():
    """The same task_id rule, with the same message, for frequency and range tasks."""
    freq = {"task_id": "rq demo!", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4}
    rng = {**RANGE, "task_id": "rq demo!"}
    messages = []
    for obj in (freq, rng):
        with pytest.raises(T.TaskError, match=r"problem\(s\)") as ei:
            T.parse_task(obj)
        messages.append(ei.value.problems)
    assert (
        messages[0]
        == messages[1]
        == ["task_id must be 1-128 characters of letters, digits, '.', '_' or '-', got 'rq demo!'"]
    )


def test_kind_is_checked(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(RANGE))
    with pytest.raises(T.TaskError, match="'r' is a range task \\('hdg'\\), not a frequency task"):
        T.load_task(p, kind="frequency")
    assert T.load_task(p, kind="range").kind == "range"
    with pytest.raises(T.TaskError, match="mechanism 'hdg' is not a frequency mechanism"):
        T.parse_task({**RANGE, "kind": "frequency"})
    with pytest.raises(T.TaskError, match="kind must be one of frequency, range, batch_queries, sparse"):
        T.parse_task({**RANGE, "kind": "histogram"})
    with pytest.raises(T.TaskError, match="mechanism 'hdg' is not a sparse mechanism"):
        T.parse_task({**RANGE, "kind": "sparse"})
    assert T.parse_task({**RANGE, "kind": "range"}).kind == "range"


def test_task_error_one_line():
    with pytest.raises(T.TaskError, match=r"problem\(s\)") as ei:
        T.parse_task({"task_id": "a"}, source="t.json")
    line = ei.value.one_line()
    assert "\n" not in line and line.startswith("t.json: missing required key")


def test_json_format_documented_keys_are_the_accepted_keys():
    """The common keys are documented in ldp.task, each kind's own in its kind's task module."""
    for k in COMMON_KEYS:
        assert f'"{k}"' in T.__doc__, k
    for name, kind in T.TASK_KINDS.items():
        doc = importlib.import_module(f"ldp.kinds.{name}.task").__doc__
        for k in kind.keys:
            assert f'"{k}"' in doc, (name, k)
    json.dumps(T.parse_task({"task_id": "a", "mechanism": "grr", "epsilon": 1, "domain_size": 3}).to_dict())
    json.dumps(T.parse_task(RANGE).to_dict())


def _imports(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names, at any depth (functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.integration
def test_no_import_cycle_between_task_and_range_registry():
    """ldp.task -> registry -> base, one way: neither base nor the registry import ldp.task, and base
    does not import the registry, not even inside a function."""
    base = _imports(ROOT / "ldp" / "rangequery" / "base.py")
    reg = _imports(ROOT / "ldp" / "rangequery" / "registry.py")
    assert not any(m.startswith("ldp.task") for m in base | reg)
    assert not any("registry" in m for m in base)
    # importing the task model first, or the registry first, both work in a fresh interpreter
    for first in ("ldp.task", "ldp.rangequery.registry", "ldp.rangequery.base"):
        code = f"import {first}; import ldp.task as t; print(len(t.TASK_KINDS['range'].mechanisms()))"
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "8"


def test_the_task_model_reaches_kinds_only_through_the_registry_of_sections():
    """No module of ldp.task imports a kind or the registry (not even inside a function, nor by a string):
    parse_task finds a kind's section in TASK_KINDS, which ldp.kinds.register fills. Only the package's
    __init__ imports the registry, last, so that importing ldp.task registers the built-in kinds."""
    for path in sorted((ROOT / "ldp" / "task").glob("*.py")):
        if path.name == "__init__.py":
            continue
        names = _imports(path)
        assert not any(m.startswith("ldp.kinds") for m in names), path.name
        strings = [n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        assert not any(v.startswith(("ldp.kinds", "ldp/kinds")) for v in strings), path.name
    init = _imports(ROOT / "ldp" / "task" / "__init__.py")
    assert {m for m in init if m.startswith("ldp.kinds")} == {"ldp.kinds"}
    # every kind's task module imports the common model, never the other way round
    for name in T.TASK_KINDS:
        assert not any(m.startswith("ldp.kinds.") for m in _imports(ROOT / "ldp" / "kinds" / name / "task.py")
                       if not m.startswith(f"ldp.kinds.{name}"))


FREQ = {"task_id": "fruit", "mechanism": "grr", "epsilon": 1.0, "domain_size": 3}


def test_inline_labels_roundtrip_and_name_values(tmp_path):
    t = T.parse_task({**FREQ, "labels": ["apple", "pear", "fig"]})
    assert t.labels == ("apple", "pear", "fig") and t.label(1) == "pear"
    assert T.parse_task(t.to_dict()) == t and t.to_dict()["labels"] == ["apple", "pear", "fig"]
    t.save(tmp_path / "t.json")
    assert T.load_task(tmp_path / "t.json") == t
    plain = T.parse_task(FREQ)
    assert plain.labels is None and plain.label(2) == "2" and "labels" not in plain.to_dict()


def test_labels_file_lines_or_json_relative_to_the_task_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fruit.txt").write_text("apple\r\npear\nfig\n\n", encoding="utf-8")
    (tmp_path / "fruit.json").write_text('["apple", "pear", "fig"]', encoding="utf-8")
    for name, ref in (("a.json", "sub/fruit.txt"), ("b.json", "fruit.json")):
        (tmp_path / name).write_text(json.dumps({**FREQ, "labels_file": ref}), encoding="utf-8")
        t = T.load_task(tmp_path / name)
        assert t.labels == ("apple", "pear", "fig")
        assert "labels_file" not in t.to_dict() and T.parse_task(t.to_dict()) == t  # carried inline
    t = T.parse_task({**FREQ, "labels_file": "sub/fruit.txt"}, base_dir=tmp_path)
    assert t.labels == ("apple", "pear", "fig")


def test_every_label_problem_is_listed(tmp_path):
    with pytest.raises(T.TaskError) as ei:
        T.parse_task({**FREQ, "domain_size": 6, "labels": ["a", "", " b", "a", 7, "x\ny"]})
    msgs = ei.value.problems
    for needle in (
        "labels[1] is empty",
        "labels[2] ' b' has leading or trailing whitespace",
        "labels[3] 'a' repeats labels[0]",
        "labels[4] must be a string, got int 7",
        "labels[5] 'x\\ny' holds a control character",
    ):
        assert any(needle in m for m in msgs), (needle, msgs)
    with pytest.raises(T.TaskError, match=r"labels has 2 entries but domain_size is 3"):
        T.parse_task({**FREQ, "labels": ["a", "b"]})
    with pytest.raises(T.TaskError, match=r"at most 256"):
        T.parse_task({**FREQ, "labels": ["a", "b", "c" * 257]})
    with pytest.raises(T.TaskError, match=r"labels need domain_size <= 65536"):
        T.parse_task({**FREQ, "domain_size": 1 << 17, "labels": ["a", "b"]})
    with pytest.raises(T.TaskError, match="labels must be a list of strings"):
        T.parse_task({**FREQ, "labels": "apple,pear,fig"})
    with pytest.raises(T.TaskError, match="give labels or labels_file, not both"):
        T.parse_task({**FREQ, "labels": ["a", "b", "c"], "labels_file": "x.txt"})
    many = [""] * 40
    with pytest.raises(T.TaskError) as ei:
        T.parse_task({**FREQ, "domain_size": 40, "labels": many})
    assert len(ei.value.problems) == 11 and "30 more label problem(s)" in ei.value.problems[-1]
    with pytest.raises(T.TaskError, match="key 'labels' belongs to frequency tasks"):
        T.parse_task({**RANGE, "labels": ["a", "b"]})


def test_labels_file_problems(tmp_path):
    (tmp_path / "l.txt").write_text("apple\n\nfig\napple\n", encoding="utf-8")
    (tmp_path / "t.json").write_text(json.dumps({**FREQ, "domain_size": 4, "labels_file": "l.txt"}))
    with pytest.raises(T.TaskError) as ei:
        T.load_task(tmp_path / "t.json")
    assert ei.value.problems == [
        "labels_file 'l.txt' line 2 is empty",
        "labels_file 'l.txt' line 4 'apple' repeats labels_file 'l.txt' line 1 (labels must be unique)",
    ]
    with pytest.raises(T.TaskError, match="labels_file 'missing.txt': cannot read"):
        T.parse_task({**FREQ, "labels_file": "missing.txt"}, base_dir=tmp_path)
    (tmp_path / "bad.json").write_text('["a", "b",', encoding="utf-8")
    with pytest.raises(T.TaskError, match="not a valid JSON list"):
        T.parse_task({**FREQ, "labels_file": "bad.json"}, base_dir=tmp_path)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\npear\nfig\n")
    with pytest.raises(T.TaskError, match="is not UTF-8 text"):
        T.parse_task({**FREQ, "labels_file": "latin1.txt"}, base_dir=tmp_path)
    (tmp_path / "big.txt").write_bytes(b"x" * (T.MAX_LABELS_FILE_BYTES + 1))
    with pytest.raises(T.TaskError, match="at most 8388608 are read"):
        T.parse_task({**FREQ, "labels_file": "big.txt"}, base_dir=tmp_path)


def test_window_times_must_be_whole_milliseconds():
    """600.0005 s is not a whole number of milliseconds: event times are epoch ms, so the windows would be
    wrong. Whole-millisecond values pass, fractional seconds included."""
    ok = T.parse_task({**FREQ, "window": {"size_s": 0.5, "period_s": 0.25, "allowed_lateness_s": 1.001}})
    assert ok.window.size_s == 0.5 and ok.window.allowed_lateness_s == 1.001
    with pytest.raises(T.TaskError) as ei:
        T.parse_task(
            {
                **FREQ,
                "window": {
                    "size_s": 600.0005,
                    "period_s": 1e-4,
                    "allowed_lateness_s": 0.0001,
                    "early_firing_s": 2.00001,
                },
            }
        )
    assert sorted(ei.value.problems) == sorted(
        f"window.{k} must be a finite whole number of milliseconds, got {v!r}"
        for k, v in (
            ("size_s", 600.0005),
            ("period_s", 1e-4),
            ("allowed_lateness_s", 0.0001),
            ("early_firing_s", 2.00001),
        )
    )


def test_read_labels_file(tmp_path):
    (tmp_path / "l.txt").write_text("a\nb\nc\n", encoding="utf-8")
    assert T.read_labels_file(tmp_path / "l.txt") == ("a", "b", "c")
    assert T.read_labels_file(tmp_path / "l.txt", 3) == ("a", "b", "c")
    with pytest.raises(T.TaskError, match="has 3 entries but domain_size is 4"):
        T.read_labels_file(tmp_path / "l.txt", 4)


# ----------------------------------------------------------------------------------------------------
# the budget block and the memoized mechanisms
# ----------------------------------------------------------------------------------------------------
def _budget_task(mech: str = "olh", **budget):
    return T.parse_task(
        {"task_id": f"budget-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": 16, "budget": budget}
    )


def test_budget_block_parses_derives_and_round_trips():
    import math

    from ldp.longitudinal.budget import BudgetPolicy

    t = _budget_task(reports_per_period=24, period_s=86400, total_epsilon=100, client_ids=True)
    assert isinstance(t.budget, BudgetPolicy) and t.requires_client_ids
    assert t.budget.epsilon_per_report == 1.0 and t.budget.composition == "basic"  # derived from the task
    assert T.parse_task(t.to_dict()) == t and t.to_dict()["budget"]["client_ids"] is True
    m = _budget_task("loloha", reports_per_period=24, period_s=86400)
    oracle = m.make_oracle()
    assert m.is_memoized and oracle.name == "loloha" and not m.requires_client_ids
    assert m.budget.composition == "memoized"
    assert math.isclose(m.budget.epsilon_per_report, oracle.epsilon_1) and oracle.epsilon_inf == 1.0
    assert T.parse_task(m.to_dict()) == m
    plain = T.parse_task({"task_id": "x", "mechanism": "olh", "epsilon": 1.0, "domain_size": 4})
    assert plain.budget is None and not plain.requires_client_ids and "budget" not in plain.to_dict()


@pytest.mark.parametrize(
    "budget, message",
    [
        ({"epsilon_per_report": 0.5, "reports_per_period": 2, "period_s": 60}, "must equal the mechanism's"),
        ({"reports_per_period": 2}, "go together"),
        ({"total_epsilon": 5, "client_ids": True}, "client_ids needs reports_per_period"),
        ({"reports_per_period": 2, "period_s": 0.0005, "client_ids": True}, "whole number of milliseconds"),
        ({"reports_per_period": 2, "period_s": 60, "client_ids": "yes"}, "client_ids must be true or false"),
        ({"reports_per_period": 2, "period_s": 60, "composition": "memoized"}, "needs a memoized mechanism"),
        ({"reports_per_period": 2, "period_s": 60, "colour": 1}, "unknown key 'colour'"),
        ([], "budget must be an object"),
    ],
)
def test_bad_budget_blocks_are_refused_with_every_problem(budget, message):
    import re

    with pytest.raises(T.TaskError, match=re.escape(message)):
        T.parse_task({"task_id": "b", "mechanism": "olh", "epsilon": 1.0, "domain_size": 8, "budget": budget})


def test_memoized_mechanisms_are_frequency_mechanisms():
    from ldp.longitudinal.memo import MEMO_MECHANISMS

    for name in MEMO_MECHANISMS:
        t = T.parse_task({"task_id": "m", "mechanism": name, "epsilon": 2.0, "domain_size": 8})
        assert t.kind == "frequency" and t.make_oracle().name == name
    with pytest.raises(T.TaskError, match="rejected by ldp.longitudinal.memo"):
        T.parse_task({"task_id": "m", "mechanism": "loloha", "epsilon": 2.0, "domain_size": 8,
                    "params": {"epsilon_1": 3.0}})


def test_hide_participation_adds_the_absent_value():
    t = T.parse_task({"task_id": "h", "mechanism": "grr", "epsilon": 1.0, "domain_size": 3,
                    "labels": ["a", "b", "c"], "hide_participation": True})
    assert t.make_oracle().d == 4 and t.absent_value() == 3 and t.labels[-1] == "(no event)"
    assert t.to_dict()["labels"] == ["a", "b", "c"] and T.parse_task(t.to_dict()) == t
    with pytest.raises(T.TaskError, match="hide_participation must be true or false"):
        T.parse_task({"task_id": "h", "mechanism": "grr", "epsilon": 1.0, "domain_size": 3,
                    "hide_participation": 1})
