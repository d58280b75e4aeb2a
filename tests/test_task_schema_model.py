"""The task file's JSON Schema is the task model's: ``schemas/task.schema.json`` is generated from the
declarations of ``ldp.task`` (``COMMON_FIELDS``, each kind's ``fields``), and a fuzz over every declared
field, at its boundaries and just past them, asserts that the schema and ``ldp.task.parse_task`` accept and
refuse the same tasks. Each check is also shown to fail when one side changes alone."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from pathlib import Path

import jsonschema

import schemas
from ldp import task as T
from ldp.kinds import KINDS
from ldp.kinds.batch_queries.task import BATCH_CALIBRATIONS
from ldp.task import parse as parse_module
from ldp.task.base import COMMON_KEYS, COMMON_SCHEMA_VERSIONS, REQUIRED

ROOT = Path(__file__).resolve().parents[1]
#: one valid task per kind (its registry entry's example), chosen so that no check beyond the declared
#: fields refuses a probe
BASES: dict[str, dict] = {name: dict(k.example or {}) for name, k in KINDS.items()}
_MECH = "mechanism parameters rejected by ldp.oracles"
_AUTO = 'epsilon "auto" needs'
#: where parse_task may refuse what the schema accepts, for a check a JSON Schema cannot make
#: (ldp.task.SEMANTIC_CHECKS): (kind, key) -> the fragments one of which its message must hold. A probe
#: refused for any other reason, or accepted by parse_task and refused by the schema, is a difference.
SEMANTIC: dict[tuple[str, str], tuple[str, ...]] = {
    ("frequency", "epsilon"): (_MECH, _AUTO),  # GRR's sampler at the extremes of (0, 50]; "auto"
    ("range", "epsilon"): (_AUTO,),
    ("heavy_hitters", "epsilon"): (_AUTO,),
    # a central target without expected_reports, expected_reports below min_reports, a target not met
    ("frequency", "anonymity"): ("anonymity.",),
    ("range", "anonymity"): ("anonymity.",),
    ("heavy_hitters", "anonymity"): ("anonymity.",),
    ("frequency", "domain_size"): (_MECH,),  # an accumulator above ldp.oracles.MAX_ACCUMULATOR_CELLS
    ("frequency", "hash"): ("hash.g applies to mechanism 'olh' only",),
    ("frequency", "labels_file"): ("cannot read",),
    ("frequency", "budget"): ("budget: ",),
    **{
        (k, "window"): ("window.period_s needs window.size_s",)
        for k in KINDS
    },
    **{(k, "resolved"): ("resolved.",) for k in ("frequency", "range")},
    ("range", "n_groups"): ("does not match hdg's 3 groups",),
    ("range", "attributes"): ("is repeated", "hdg needs at least two attributes"),
    ("range", "granularity"): ("must be a power of two",),
    ("range", "schema_version"): ("version 3 is msw's integer grid wire",),  # the example is hdg
    ("batch_queries", "attributes"): ("is repeated",),
    ("numeric", "attributes"): ("low must be below high", "is repeated"),
    ("numeric", "k"): ("k must be at most the number of attributes",),
    ("numeric", "epsilon"): ("mechanism parameters rejected by ldp.numeric",),
    ("numeric", "budget"): ("budget: ",),
}
_TYPE_SAMPLES = {
    "string": "x",
    "integer": 3,
    "number": 2.5,
    "boolean": True,
    "null": None,
    "object": {},
    "array": [],
}


def _validator(schema: dict | None = None) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema or schemas.task_schema())


def _parse_ok(obj: dict) -> tuple[bool, str]:
    try:
        T.parse_task(obj)
    except T.TaskError as exc:
        return False, exc.one_line()
    return True, ""


def _sample(f: T.Field, i: int = 0) -> object:
    """A valid value of a declaration (``i`` varies strings, for unique items)."""
    if f.any_of:
        return _sample(f.any_of[0], i)
    if f.enum is not None:
        return f.enum[0]
    t = f.type[0]
    if t in ("integer", "number"):
        lo = (
            f.minimum
            if f.minimum is not None
            else (f.exclusive_minimum + 1 if f.exclusive_minimum is not None else 1)
        )
        return int(lo) if t == "integer" else float(lo)
    if t == "string":
        return f"v{i}"
    if t == "array":
        return [_sample(f.items, j) if f.items else j for j in range(f.min_items or 0)]
    if t == "object":
        return {k: _sample(f.properties[k]) for k in f.required} if f.properties else {}
    return {"boolean": False, "null": None}[t]


def _num_probes(f: T.Field) -> Iterator[object]:
    integer = f.type[0] == "integer"

    def past(x: float, up: bool) -> object:
        return (int(x) + (1 if up else -1)) if integer else math.nextafter(x, math.inf if up else -math.inf)

    for bound, up in ((f.minimum, False), (f.maximum, True)):
        if bound is not None:
            yield int(bound) if integer else float(bound)
            yield past(bound, up)
    for bound, up in ((f.exclusive_minimum, True), (f.exclusive_maximum, False)):
        if bound is not None:
            yield int(bound) if integer else float(bound)
            yield past(bound, up)
    yield 0
    yield -1


def _probes(f: T.Field) -> Iterator[object]:
    """Values at and past every declared boundary of ``f``, of every JSON type, and for nested objects and
    arrays the probes of their members (the other members valid)."""
    for t, v in _TYPE_SAMPLES.items():
        if t not in f.type and not (t == "integer" and "number" in f.type):
            yield copy.deepcopy(v)
    for alt in f.any_of:
        yield from _probes(alt)
    if f.enum is not None:
        yield from f.enum
        yield "nope" if "string" in f.type else 99
        if isinstance(f.enum[-1], str):
            yield f.enum[-1].upper()
            yield f" {f.enum[-1]}"
    if {"integer", "number"} & set(f.type) and f.enum is None:
        yield from _num_probes(f)
    if "string" in f.type and f.enum is None:
        yield from ("", " ", "a", "a b", " a", "a-b.c_9", "\t")
        for n in (f.min_length, f.max_length, 128):
            if n is not None:
                yield "a" * n
                yield "a" * (n + 1)
                if n > 1:
                    yield "a" * (n - 1)
    if "array" in f.type:
        item = f.items
        for n in {
            f.min_items or 0,
            max((f.min_items or 0) - 1, 0),
            1,
            2,
            *(() if f.max_items is None else (f.max_items, f.max_items + 1)),
        }:
            yield [_sample(item, j) if item else j for j in range(n)]
        if item is not None:
            rest = [_sample(item, j) for j in range(1, max(f.min_items or 1, 2))]
            for v in _probes(item):
                yield [v, *rest]
            if f.unique_items:
                yield [_sample(item, 0), _sample(item, 0)]
    if "object" in f.type and f.properties is not None:
        base = _sample(f)
        yield {**base, "zz": 1}
        for k in f.required:
            yield {kk: vv for kk, vv in base.items() if kk != k}
        for k, sub in f.properties.items():
            for v in _probes(sub):
                yield {**base, k: v}


def _cases(only: str | None = None) -> Iterator[tuple[str, str, dict]]:
    """(kind, key, task): every declared key of every kind (or only key ``only``), probed; plus every
    declared key left out and an unknown key."""
    for name, kind in T.TASK_KINDS.items():
        base = BASES[name]
        fields = {**T.COMMON_FIELDS, **kind.fields}
        for key, f in fields.items():
            if only is not None and key != only:
                continue
            if key in ("mechanism", "kind"):
                values: list[object] = [*kind.mechanisms(), *T.TASK_KINDS, "nope", "OLH", 1, None]
            else:
                values = list(_probes(f))
            for v in values:
                obj = {**copy.deepcopy(base), key: v}
                if key == "labels" and isinstance(v, list) and 2 <= len(v) <= T.MAX_LABELS:
                    obj["domain_size"] = len(v)  # one label per value: a check beyond the schema
                yield name, key, obj
            yield name, key, {k: v for k, v in base.items() if k != key}
        yield name, "colour", {**base, "colour": "red"}


def _disagreements(validator: jsonschema.Draft202012Validator, only: str | None = None) -> list[str]:
    out = []
    for name, key, obj in _cases(only):
        schema_ok = validator.is_valid(obj)
        parse_ok, why = _parse_ok(obj)
        if schema_ok == parse_ok:
            continue
        value = json.dumps(obj.get(key, "<absent>"))[:80]
        if schema_ok and any(frag in why for frag in SEMANTIC.get((name, key), ())):
            continue
        out.append(
            f"{name}.{key} = {value}: schema {'accepts' if schema_ok else 'refuses'}, "
            f"parse_task {'accepts' if parse_ok else 'refuses'} {why[:200]}"
        )
    return out


# ------------------------------------------------------------------------------------------------------------


def test_schema_file_is_generated_from_the_model():
    assert schemas.task_schema() == T.task_json_schema(), (
        "schemas/task.schema.json is stale: python -m ldp.task --schema > schemas/task.schema.json"
    )
    jsonschema.Draft202012Validator.check_schema(schemas.task_schema())


def test_the_generated_schema_names_the_models_keys_and_registries():
    s = T.task_json_schema()
    branches = {b["then"]["properties"]["kind"]["const"]: b["then"] for b in s["allOf"]}
    assert list(branches) == list(T.TASK_KINDS)
    for name, kind in T.TASK_KINDS.items():
        then = branches[name]
        assert set(then["properties"]) == set(COMMON_KEYS) | set(kind.keys)  # parse_task's known keys
        assert set(kind.fields) - set(COMMON_KEYS) == set(kind.keys)
        assert then["properties"]["mechanism"]["enum"] == list(kind.mechanisms())
        assert set(REQUIRED) <= set(then["required"])
    assert branches["frequency"]["properties"]["postprocess"]["enum"] == list(T.POSTPROCESS_METHODS)
    assert branches["range"]["properties"]["schema_version"]["enum"] == [2, 3]  # the method's (msw: 3)
    assert branches["numeric"]["properties"]["schema_version"]["enum"] == [3]  # the integer grid wire
    assert set(COMMON_SCHEMA_VERSIONS) | {3} == set(T.SUPPORTED_SCHEMA_VERSIONS)
    family = branches["frequency"]["properties"]["hash"]["properties"]["family"]["enum"]
    assert family == [*T.HASH_FAMILY_NAMES, None]
    assert branches["batch_queries"]["properties"]["calibration"]["enum"] == list(BATCH_CALIBRATIONS)


def test_schema_and_parse_task_agree_at_every_declared_boundary():
    n = sum(1 for _ in _cases())
    assert n > 500  # the probes really cover the declarations
    assert _disagreements(_validator()) == []


def test_the_fuzz_catches_a_schema_changed_alone():
    s = schemas.task_schema()
    freq = next(b for b in s["allOf"] if b["then"]["properties"]["kind"]["const"] == "frequency")
    freq["then"]["properties"]["epsilon"]["anyOf"][0]["maximum"] = 60  # the number, not "auto"
    found = _disagreements(_validator(s), "epsilon")
    assert found == [
        "frequency.epsilon = 50.00000000000001: schema accepts, parse_task refuses "
        'task: epsilon must be a number in (0, 50] or "auto" (with anonymity.central_epsilon), '
        "got 50.00000000000001"
    ]
    assert s != T.task_json_schema()  # and the generated-file check fails too


def test_the_fuzz_catches_parse_task_changed_alone(monkeypatch):
    def unbounded(obj, problems, allow_auto=False):  # parse_task's epsilon check without its upper bound
        eps = obj.get("epsilon", 1.0)
        if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0):
            problems.append(f"epsilon must be a positive number, got {eps!r}")
            return 1.0
        return float(eps)

    monkeypatch.setattr(parse_module, "check_epsilon", unbounded)
    found = _disagreements(_validator(), "epsilon")
    assert "range.epsilon = 50.00000000000001: schema refuses, parse_task accepts " in found, found


def test_a_declaration_changed_alone_is_caught(monkeypatch):
    import dataclasses

    tighter = dataclasses.replace(T.COMMON_FIELDS["epsilon"], maximum=40)
    monkeypatch.setitem(T.COMMON_FIELDS, "epsilon", tighter)
    assert schemas.task_schema() != T.task_json_schema()  # the file no longer matches the model
    found = _disagreements(_validator(T.task_json_schema()), "epsilon")
    # the kinds that also take "auto" wrap the common declaration as it was when ldp.task was imported
    assert "batch_queries.epsilon = 40.00000000000001: schema refuses, parse_task accepts " in found, found
