"""Tests of ldp.task: the collection-task format, defaults and all-problems-at-once validation."""

from __future__ import annotations

import json

import pytest

from ldp import task as T


def test_minimal_task_defaults_and_roundtrip(tmp_path):
    t = T.parse_task({"task_id": "a", "mechanism": "OLH", "epsilon": 1, "domain_size": 1024})
    assert (t.mechanism, t.epsilon, t.domain_size) == ("olh", 1.0, 1024)
    assert t.schema_version == 1 and t.n_groups == 1 and t.postprocess == "base"
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
            "postprocess": "norm_sub",
            "window": {"size_s": 60, "period_s": 10, "accumulating": True},
        }
    )
    assert t.postprocess == "norm-sub" and t.window.period_s == 10.0
    assert t.make_oracle().name in T.ORACLE_MECHANISMS
    t2 = T.parse_task(
        {"task_id": "b", "mechanism": "olh", "epsilon": 2.0, "domain_size": 64, "hash": {"g": 8}}
    )
    assert t2.make_oracle().g == 8
    t3 = T.parse_task(
        {"task_id": "c", "mechanism": "ss", "epsilon": 1.0, "domain_size": 64, "params": {"k": 5}}
    )
    assert t3.make_oracle().k == 5


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
    }
    with pytest.raises(T.TaskError) as ei:
        T.parse_task(bad)
    msgs = "\n".join(ei.value.problems)
    for needle in (
        "task_id",
        "mechanism",
        "epsilon",
        "domain_size",
        "n_groups",
        "postprocess",
        "window.size_s",
        "window.accumulating",
        "window: unknown key 'bogus'",
        "unknown key 'colour'",
        "schema_version",
    ):
        assert needle in msgs, needle
    assert len(ei.value.problems) >= 11
    assert str(ei.value).count("\n  - ") == len(ei.value.problems)


def test_missing_required_keys_and_oracle_parameters():
    with pytest.raises(T.TaskError) as ei:
        T.parse_task({})
    assert sorted(p for p in ei.value.problems) == sorted(
        f"missing required key {k!r}" for k in ("task_id", "mechanism", "epsilon")
    )
    with pytest.raises(T.TaskError, match="domain_size"):
        T.parse_task({"task_id": "a", "mechanism": "grr", "epsilon": 1.0})
    with pytest.raises(T.TaskError, match="prime power"):
        T.parse_task(
            {"task_id": "a", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16, "hash": {"g": 6}}
        )
    with pytest.raises(T.TaskError, match="'olh' only"):
        T.parse_task(
            {"task_id": "a", "mechanism": "grr", "epsilon": 1.0, "domain_size": 16, "hash": {"g": 4}}
        )


def test_load_task_file_errors(tmp_path):
    with pytest.raises(T.TaskError, match="cannot read"):
        T.load_task(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text('{"task_id": "a",\n "epsilon": }')
    with pytest.raises(T.TaskError, match="line 2"):
        T.load_task(p)


def test_multi_attribute_extension_point():
    base = {"task_id": "r", "mechanism": "hdg", "epsilon": 1.0}
    with pytest.raises(T.TaskError, match="attributes"):
        T.parse_task(base)
    attrs = [{"name": "age", "domain_size": 64}, {"name": "income", "domain_size": 64}]
    # the range-query registry checks the rest (expected_users is required for the granularity guideline)
    with pytest.raises(T.TaskError, match="expected_users"):
        T.parse_task({**base, "attributes": attrs})
    t = T.parse_task({**base, "attributes": attrs, "params": {"g1": 8}, "expected_users": 1000})
    assert t.is_multi_attribute and [a.name for a in t.attributes] == ["age", "income"]
    with pytest.raises(ValueError, match="not a frequency oracle"):
        t.make_oracle()
    with pytest.raises(T.TaskError, match="repeated"):
        T.parse_task({**base, "attributes": attrs + [{"name": "age", "domain_size": 4}]})
    with pytest.raises(T.TaskError, match="multi-attribute"):
        T.parse_task(
            {"task_id": "x", "mechanism": "olh", "epsilon": 1.0, "domain_size": 4, "attributes": attrs}
        )

    def check(raw, problems):
        if "g1" not in raw.get("params", {}):
            problems.append("hdg needs params.g1")

    old = T._VALIDATORS.get("hdg")
    T.register_mechanism("hdg", check)
    try:
        with pytest.raises(T.TaskError, match="hdg needs params.g1"):
            T.parse_task({**base, "attributes": attrs})
        assert T.parse_task({**base, "attributes": attrs, "params": {"g1": 8}}).params == {"g1": 8}
    finally:
        T._VALIDATORS.pop("hdg", None)
        if old is not None:
            T._VALIDATORS["hdg"] = old


def test_json_format_documented_keys_are_the_accepted_keys():
    doc = T.__doc__
    for k in (
        "task_id",
        "mechanism",
        "epsilon",
        "domain_size",
        "n_groups",
        "postprocess",
        "hash",
        "params",
        "window",
        "attributes",
        "schema_version",
        "description",
    ):
        assert f'"{k}"' in doc, k
    json.dumps(T.parse_task({"task_id": "a", "mechanism": "grr", "epsilon": 1, "domain_size": 3}).to_dict())
