"""A task means the same thing forever: ``auto`` (frequency tasks, and the per-group oracles of range
methods) resolves among the frozen candidates of the task's schema version, and ``resolve_task`` records
the resolution, which every later load checks."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import ldp.oracles
from ldp import task as T
from ldp.aggregate import make_aggregator
from ldp.kinds.frequency.task import FrequencyTask
from ldp.kinds.range.task import RangeTask
from ldp.rangequery import registry

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = (0.1, 0.5, 1.0, 2.0, 4.0, 8.0)
DOMAINS = (2, 3, 8, 64, 1000, 1 << 14, 1 << 20)
ATTRS = [{"name": "a", "domain_size": 64}, {"name": "b", "domain_size": 16}]


class _Better(ldp.oracles.GRR):
    """A fake oracle that beats every candidate on variance and on every cost ``auto`` compares."""

    name = "better"

    def variance(self, n, f=None):
        return 1e-9 / max(int(n), 1)

    @property
    def report_bits(self) -> int:
        return 1

    @property
    def add_cells_per_report(self) -> int:
        return 1

    @property
    def accumulator_bytes(self) -> int:
        return 8

    @property
    def finalize_ops(self) -> int:
        return 1


def _repo_tasks() -> list[dict]:
    """Every task object in the repository: the JSON task files (and task blocks of JSON results) under
    tests/, docs/, experiments/, pipelines/, bench/, the ```json task blocks of the README and docs, and
    the task tables of tests/test_schemas.py."""
    found: list[dict] = []

    def walk(o: object) -> None:
        if isinstance(o, dict):
            if "task_id" in o and "mechanism" in o:
                found.append(o)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for top in ("tests", "docs", "experiments", "pipelines", "bench"):
        for path in sorted((ROOT / top).rglob("*.json")):
            try:
                walk(json.loads(path.read_text(encoding="utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```json\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S):
            try:
                walk(json.loads(block))
            except json.JSONDecodeError:
                continue
    spec = importlib.util.spec_from_file_location("_schema_tasks", ROOT / "tests" / "test_schemas.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    found += mod.VALID_TASKS
    out = []
    for obj in found:
        try:
            out.append(T.parse_task(obj))
        except T.TaskError:
            continue  # example fragments of invalid tasks
    return out


def _grid_tasks() -> list[T.Task]:
    out: list[T.Task] = []
    for eps in EPSILONS:
        for d in DOMAINS:
            out.append(T.parse_task({"task_id": "g", "mechanism": "auto", "epsilon": eps, "domain_size": d}))
        for method in registry.METHODS:
            out.append(
                T.parse_task(
                    {
                        "task_id": "r",
                        "mechanism": method,
                        "epsilon": eps,
                        "attributes": ATTRS,
                        "expected_users": 100_000,
                    }
                )
            )
    return out


def _resolutions(tasks: list[T.Task]) -> list[object]:
    return [T.task_resolution(t) for t in tasks]


def test_adding_an_oracle_leaves_every_task_resolved_the_same(monkeypatch):
    tasks = _repo_tasks()
    assert len(tasks) >= 20 and any(t.mechanism == "auto" for t in tasks)  # the repository's own tasks
    tasks += _grid_tasks()
    before = _resolutions(tasks)
    monkeypatch.setitem(ldp.oracles.MECHANISMS, "better", _Better)
    assert _resolutions(tasks) == before
    # ... and the fake is one auto would take, had its candidates not been frozen
    monkeypatch.setitem(ldp.oracles.AUTO_CANDIDATES, 2, (*ldp.oracles.AUTO_CANDIDATES[2], "better"))
    changed = [t for t, b in zip(tasks, before) if T.task_resolution(t) != b]
    assert any(isinstance(t, FrequencyTask) for t in changed)
    assert any(isinstance(t, RangeTask) for t in changed)


def test_auto_candidates_cover_every_supported_version():
    for v in T.SUPPORTED_SCHEMA_VERSIONS:
        names = ldp.oracles.auto_candidates(v)
        assert names and set(names) <= set(ldp.oracles.MECHANISMS)
        assert [r["mechanism"] for r in ldp.oracles.choose_oracle(1.0, 64, schema_version=v)[1]] != []
    with pytest.raises(ValueError, match="no candidate list for schema version 1"):
        ldp.oracles.auto_candidates(1)


def test_a_removed_candidate_is_an_error_not_a_new_choice():
    registered = dict(ldp.oracles.MECHANISMS)
    del ldp.oracles.MECHANISMS["oue"]
    try:
        missing = r"candidates \['oue'\] of schema version 2 are not in MECHANISMS"
        with pytest.raises(ValueError, match=missing):
            ldp.oracles.choose_oracle(1.0, 64)
    finally:  # in registration order again (monkeypatch.delitem would put it back last)
        ldp.oracles.MECHANISMS.clear()
        ldp.oracles.MECHANISMS.update(registered)


def test_resolve_task_records_and_every_load_checks(tmp_path):
    raw = {"task_id": "a", "mechanism": "auto", "epsilon": 1.0, "domain_size": 1024, "n_groups": 3}
    out = T.resolve_task(raw)
    assert out["mechanism"] == "auto"
    assert out["resolved"] == {
        "auto_candidates": list(ldp.oracles.AUTO_CANDIDATES[2]),
        "oracles": [{"mechanism": "olh", "domain_size": 1024, "family": "gf2-affine", "g": 4}],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(out))
    t = T.load_task(path)
    assert t.resolved == out["resolved"] and T.parse_task(t.to_dict()) == t
    assert T.resolve_task(t) == out == t.to_dict()
    wrong = {**out, "resolved": {**out["resolved"], "oracles": [{"mechanism": "oue", "domain_size": 1024}]}}
    with pytest.raises(
        T.TaskError, match=r"resolved.oracles\[0\]: the task records .*'oue'.* resolves .*'olh'"
    ):
        T.parse_task(wrong)
    with pytest.raises(T.TaskError, match="auto_candidates"):
        T.parse_task({**out, "resolved": {**out["resolved"], "auto_candidates": ["grr", "olh"]}})
    with pytest.raises(T.TaskError, match="an object with auto_candidates, oracles and"):
        T.parse_task({**out, "resolved": {"oracles": []}})


def test_range_groups_are_recorded_per_group():
    out = T.resolve_task(
        {"task_id": "r", "mechanism": "hio", "epsilon": 1.0, "attributes": ATTRS, "expected_users": 100_000}
    )
    specs = out["resolved"]["oracles"]
    assert len(specs) == out["n_groups"] > 1 and len({s["mechanism"] for s in specs}) > 1
    assert T.parse_task(out).resolved == out["resolved"]
    specs[1] = {**specs[1], "mechanism": "olh"}
    with pytest.raises(T.TaskError, match=r"resolved.oracles\[1\]"):
        T.parse_task(out)


def test_resolved_is_refused_where_nothing_resolves():
    batch = {
        "task_id": "b",
        "kind": "batch_queries",
        "mechanism": "identity",
        "epsilon": 1.0,
        "attributes": ATTRS[1:],
        "delta": 1e-6,
    }
    assert "resolved" not in T.resolve_task(batch)
    with pytest.raises(T.TaskError, match="resolved applies to frequency and range tasks"):
        T.parse_task({**batch, "resolved": {"auto_candidates": [], "oracles": []}})


def test_clients_and_aggregator_share_one_resolution():
    for eps in EPSILONS:
        for d in DOMAINS:
            t = T.parse_task({"task_id": "g", "mechanism": "auto", "epsilon": eps, "domain_size": d})
            client = registry.oracle_spec(t.make_oracle())  # what pipelines.simulate / clients encode with
            server = registry.oracle_spec(make_aggregator(t).validation_oracle(0))
            assert client == server == T.task_resolution(t)["oracles"][0]
