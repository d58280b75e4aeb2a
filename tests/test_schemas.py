"""Tests of the package's Avro schemas (schemas/*.avsc)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import fastavro
import pytest

import schemas

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_schema_parses_with_namespace(name):
    raw = schemas.load_schema(name)
    assert raw["namespace"] == schemas.NAMESPACE == f"org.ldpbeam.v{schemas.SCHEMA_VERSION}"
    parsed = schemas.parsed_schema(name)
    assert parsed["name"].startswith(schemas.NAMESPACE + ".")
    assert schemas.load_schema(name) is not raw  # fresh copies, the cache is not handed out for mutation


def test_every_shipped_schema_parses():
    names = schemas.available_schemas()
    assert set(schemas.SCHEMA_NAMES) <= set(names)
    for name in names:  # schemas added by later jobs are checked too
        assert schemas.parsed_schema(name)["type"] == "record"


def test_unknown_schema_name():
    with pytest.raises(ValueError, match="unknown schema"):
        schemas.load_schema("nope")


def test_report_schema_covers_every_payload_field():
    names = [f["name"] for f in schemas.load_schema("report")["fields"]]
    assert names[:4] == ["task_id", "schema_version", "event_time", "group"]
    assert set(names[4:-1]) == {"value", "seed", "bits", "items", "reals"}
    assert names[-1] == "client_id"  # optional, appended with a default (schema version 2)
    et = next(f for f in schemas.load_schema("report")["fields"] if f["name"] == "event_time")
    assert et["type"]["logicalType"] == "timestamp-millis"


def test_report_roundtrip_and_validation():
    rec = {
        "task_id": "t",
        "schema_version": 2,
        "event_time": 1_700_000_000_123,
        "group": 3,
        "value": 2,
        "seed": -(1 << 63),
        "bits": b"\x01\x02",
        "items": [1, 2],
        "reals": [0.25],
    }
    schemas.validate_record("report", rec)
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), [rec])
    back = list(fastavro.reader(io.BytesIO(buf.getvalue())))[0]
    assert back["seed"] == -(1 << 63) and back["bits"] == b"\x01\x02" and back["reals"] == [0.25]
    assert int(back["event_time"].timestamp() * 1000) == 1_700_000_000_123
    with pytest.raises(ValueError, match="does not match"):
        schemas.validate_record("report", {**rec, "seed": 1 << 63})  # not a signed 64-bit long


def test_estimate_and_dead_letter_records_validate():
    est = {
        "task_id": "t",
        "schema_version": 2,
        "group": 0,
        "window_start": None,
        "window_end": None,
        "pane_timing": "ON_TIME",
        "pane_index": 0,
        "is_last_pane": True,
        "n_reports": 10,
        "mechanism": "olh",
        "epsilon": 1.0,
        "domain_size": 2,
        "postprocess": "base",
        "frequencies": [0.5, 0.5],
        "std": [0.1, 0.1],
    }
    schemas.validate_record("estimate", est)
    dl = {
        "reason": "undecodable",
        "detail": None,
        "source": "f.avro",
        "task_id": None,
        "raw_record": None,
        "raw_bytes": b"\x00",
        "dead_letter_time": 0,
    }
    schemas.validate_record("dead_letter", dl)
    with pytest.raises(ValueError, match="does not match schema 'dead_letter'"):
        schemas.validate_record("dead_letter", {**dl, "reason": None})


# ------------------------------------------------------------------------------------------------------------
# the task file's JSON Schema (schemas/task.schema.json)
# ------------------------------------------------------------------------------------------------------------

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _type_ok(x, t):
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool)
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return isinstance(x, _TYPES[t])


def _errors(x, s, root, path="$"):
    """The subset of JSON Schema 2020-12 that task.schema.json uses, checked structurally (no dependency on
    the ``jsonschema`` package; when it is installed the test below also runs it)."""
    if "$ref" in s:
        s = root["$defs"][s["$ref"].split("/")[-1]]
    out = []
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_type_ok(x, t) for t in types):
            return [f"{path}: {x!r} is not of type {types}"]
    if "enum" in s and x not in s["enum"]:
        out.append(f"{path}: {x!r} not in enum")
    if "const" in s and x != s["const"]:
        out.append(f"{path}: {x!r} != {s['const']!r}")
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if "minimum" in s and x < s["minimum"]:
            out.append(f"{path}: {x} < minimum")
        if "maximum" in s and x > s["maximum"]:
            out.append(f"{path}: {x} > maximum")
        if "exclusiveMinimum" in s and x <= s["exclusiveMinimum"]:
            out.append(f"{path}: {x} <= exclusiveMinimum")
    if isinstance(x, str):
        if "pattern" in s and not re.search(s["pattern"], x):
            out.append(f"{path}: {x!r} does not match {s['pattern']}")
        if "minLength" in s and len(x) < s["minLength"]:
            out.append(f"{path}: too short")
    if isinstance(x, list):
        if "minItems" in s and len(x) < s["minItems"]:
            out.append(f"{path}: fewer than {s['minItems']} items")
        for i, item in enumerate(x):
            if "items" in s:
                out += _errors(item, s["items"], root, f"{path}[{i}]")
    if isinstance(x, dict):
        for k in s.get("required", ()):
            if k not in x:
                out.append(f"{path}: missing {k!r}")
        props = s.get("properties", {})
        for k, v in x.items():
            if k in props:
                out += _errors(v, props[k], root, f"{path}.{k}")
            elif s.get("additionalProperties") is False:
                out.append(f"{path}: unexpected {k!r}")
    for sub in s.get("allOf", ()):
        out += _errors(x, sub, root, path)
    if "anyOf" in s and all(_errors(x, sub, root, path) for sub in s["anyOf"]):
        out.append(f"{path}: matches none of anyOf")
    if "oneOf" in s and sum(not _errors(x, sub, root, path) for sub in s["oneOf"]) != 1:
        out.append(f"{path}: does not match exactly one of oneOf")
    if "not" in s and not _errors(x, s["not"], root, path):
        out.append(f"{path}: matches a forbidden schema")
    if "if" in s and not _errors(x, s["if"], root, path):
        out += _errors(x, s.get("then", {}), root, path)
    return out


def _doc_tasks():
    """Every JSON task object in the README and docs (```json blocks with task_id and mechanism)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```json\n(.*?)```", text, flags=re.S):
            try:
                obj = json.loads(block)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "task_id" in obj and "mechanism" in obj:
                out.append(pytest.param(obj, id=f"{path.name}:{obj['task_id']}"))
    return out


_ATTRS = [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 100}]
VALID_TASKS = [
    {"task_id": "f1", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024},
    {
        "task_id": "f2",
        "kind": "frequency",
        "mechanism": "olh",
        "epsilon": 2,
        "domain_size": 64,
        "hash": {"family": "linear-gf", "g": 3},
        "n_groups": 4,
        "postprocess": "norm-sub",
        "window": {"size_s": 60, "period_s": 30, "allowed_lateness_s": 10, "accumulating": True},
        "schema_version": 2,
        "description": "every optional key",
    },
    {"task_id": "f3", "mechanism": "ss", "epsilon": 1.0, "domain_size": 64, "params": {"k": 5}},
    {"task_id": "r1", "mechanism": "hdg", "epsilon": 1.0, "attributes": _ATTRS, "expected_users": 1000},
    {
        "task_id": "r2",
        "mechanism": "tdg",
        "epsilon": 0.5,
        "attributes": _ATTRS,
        "expected_users": 10_000,
        "granularity": {"g1": 16, "g2": 4},
        "options": {"oracle": "oue"},
        "window": {"size_s": 600},
    },
    {"task_id": "r3", "mechanism": "msw", "epsilon": 1.0, "attributes": _ATTRS, "expected_users": 50},
]
_F = VALID_TASKS[0]
_S = {"task_id": "s1", "mechanism": "svme", "epsilon": 1.0, "domain_size": 1 << 40, "sparsity": 8}
VALID_TASKS += [
    _S,
    {**_S, "task_id": "s2", "kind": "sparse", "privacy": 4, "values": "binary", "expected_users": 1000},
    {**_S, "task_id": "s3", "mechanism": "gaussian", "privacy": "event", "delta": 1e-6, "domain_size": 64},
]
_R = VALID_TASKS[3]
VALID_TASKS += [
    {"task_id": "f4", "mechanism": "grr", "epsilon": 1.0, "domain_size": 3, "labels": ["a", "pear", "fig"]},
    {"task_id": "f5", "mechanism": "auto", "epsilon": 0.5, "domain_size": 100, "n_groups": 2},
    {"task_id": "r4", "mechanism": "hio", "epsilon": 2.0, "attributes": _ATTRS, "expected_users": 10_000},
]
INVALID_TASKS = {
    "bad task_id": {**_F, "task_id": "rq demo!"},
    "unknown key": {**_F, "colour": "red"},
    "unknown mechanism": {**_F, "mechanism": "nope"},
    "epsilon 0": {**_F, "epsilon": 0},
    "epsilon too large": {**_F, "epsilon": 51},
    "schema_version 1": {**_F, "schema_version": 1},
    "hash family": {**_F, "hash": {"family": "md5"}},
    "frequency without domain_size": {k: v for k, v in _F.items() if k != "domain_size"},
    "frequency with attributes": {**_F, "attributes": _ATTRS},
    "range without expected_users": {k: v for k, v in _R.items() if k != "expected_users"},
    "range with domain_size": {**_R, "domain_size": 4},
    "range with empty attributes": {**_R, "attributes": []},
    "attribute domain 1": {**_R, "attributes": [{"name": "a", "domain_size": 1}]},
    "window key": {**_F, "window": {"size": 60}},
    "negative window": {**_F, "window": {"size_s": -1}},
    "kind mismatch": {**_R, "kind": "frequency"},
    "missing epsilon": {k: v for k, v in _F.items() if k != "epsilon"},
    "postprocess": {**_F, "postprocess": "magic"},
    "sparse without sparsity": {"task_id": "s", "mechanism": "svme", "epsilon": 1.0, "domain_size": 100},
    "sparse privacy": {**_S, "privacy": "all"},
    "frequency with sparsity": {**_F, "sparsity": 4},
    "frequency domain beyond 2^31": {**_F, "domain_size": 1 << 40},
    "empty label": {**_F, "domain_size": 2, "labels": ["a", ""]},
    "label with surrounding space": {**_F, "domain_size": 2, "labels": ["a", " b"]},
    "labels and labels_file": {**_F, "domain_size": 2, "labels": ["a", "b"], "labels_file": "l.txt"},
    "range with labels": {**_R, "labels": ["a", "b"]},
}


def test_task_schema_lists_are_the_registries():
    from ldp import task as T
    from ldp.kinds.frequency.task import ORACLE_MECHANISMS
    from ldp.sparse.mechanisms import SPARSE_MECHANISMS
    from ldp.task.base import COMMON_KEYS

    s = schemas.task_schema()
    props = s["properties"]
    every = [m for k in T.TASK_KINDS.values() for m in k.mechanisms()]  # the registered kinds (ldp.kinds)
    assert props["mechanism"]["enum"] == list(dict.fromkeys(every))  # 'lsa': range method and strategy
    assert T.TASK_KINDS["sparse"].mechanisms() == tuple(SPARSE_MECHANISMS)
    assert props["kind"]["enum"] == list(T.TASK_KINDS)
    branches = {b["then"]["properties"]["kind"]["const"]: b["then"]["properties"] for b in s["allOf"]}
    for kind, p in branches.items():
        # every post-processing method, or the one a kind declares it takes (heavy_hitters: base)
        assert p["postprocess"]["enum"] == {"heavy_hitters": ["base"]}.get(kind, list(T.POSTPROCESS_METHODS))
        assert set(p["hash"]["properties"]["family"]["enum"]) - {None} == set(T.HASH_FAMILY_NAMES)
        # each kind's versions (numeric: 3, the integer grid wire; range: 2, or 3 for msw; the others 2), all
        # of them supported
        assert p["schema_version"]["enum"] == {"numeric": [3], "range": [2, 3]}.get(kind, [2])
        assert set(p["schema_version"]["enum"]) <= set(schemas.SUPPORTED_SCHEMA_VERSIONS)
        assert set(p) == set(COMMON_KEYS) | set(T.TASK_KINDS[kind].keys)
        assert set(p["window"]["properties"]) == {f.name for f in dataclasses.fields(T.WindowConfig)}
    assert branches["frequency"]["mechanism"]["enum"] == list(ORACLE_MECHANISMS)


def test_supported_versions_agree_with_the_task_model():
    from ldp import task as T

    assert schemas.SUPPORTED_SCHEMA_VERSIONS == T.SUPPORTED_SCHEMA_VERSIONS == (schemas.SCHEMA_VERSION, 3)
    assert T.DEFAULT_SCHEMA_VERSION == schemas.SCHEMA_VERSION == 2


@pytest.mark.parametrize("obj", [pytest.param(t, id=t["task_id"]) for t in VALID_TASKS] + _doc_tasks())
def test_task_schema_accepts_valid_tasks(obj):
    from ldp import task as T

    assert _errors(obj, schemas.task_schema(), schemas.task_schema()) == []
    parsed = T.parse_task(obj)  # the reference validator agrees
    assert _errors(parsed.to_dict(), schemas.task_schema(), schemas.task_schema()) == []


@pytest.mark.parametrize("name", sorted(INVALID_TASKS))
def test_task_schema_rejects_bad_tasks(name):
    from ldp import task as T

    obj = INVALID_TASKS[name]
    assert _errors(obj, schemas.task_schema(), schemas.task_schema()), name
    with pytest.raises(T.TaskError, match=r"problem\(s\)"):
        T.parse_task(obj)


def test_task_schema_with_jsonschema_when_installed():
    jsonschema = pytest.importorskip("jsonschema")
    s = schemas.task_schema()
    jsonschema.Draft202012Validator.check_schema(s)
    v = jsonschema.Draft202012Validator(s)
    for obj in VALID_TASKS:
        assert list(v.iter_errors(obj)) == []
    for obj in INVALID_TASKS.values():
        assert list(v.iter_errors(obj))
