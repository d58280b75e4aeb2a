"""The checkers of the sections every kind of task shares.

Each ``check_*`` reads one section of a task object, appends its problems to one list and returns what it
could parse; the kinds' section checkers (``ldp.kinds.<kind>.task``) use the same predicates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import ldp.hashing as _hashing
from ldp.task.base import (
    AUTO_EPSILON,
    COMMON_KEYS,
    COMMON_SCHEMA_VERSIONS,
    DEFAULT_HASH_FAMILY,
    DEFAULT_SCHEMA_VERSION,
    HASH_FAMILY_NAMES,
    MAX_DOMAIN,
    MAX_GROUPS,
    POSTPROCESS_METHODS,
    REQUIRED,
    TASK_ID_RE,
    Attribute,
    HashConfig,
    JsonObject,
    Problems,
    WindowConfig,
)
from ldp.task.fields import TASK_KINDS, TaskKind


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def whole_ms(x: float) -> bool:
    """True when ``x`` seconds is a whole number of milliseconds (event times are epoch milliseconds, so
    a window of 600.0005 s would put reports in the wrong windows)."""
    return abs(x * 1000 - round(x * 1000)) <= 1e-6


def not_whole_ms(key: str, v: object) -> str:
    return f"window.{key} must be a finite whole number of milliseconds, got {v!r}"


def as_object(raw: object, name: str, problems: Problems) -> JsonObject:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{name} must be an object, got {type(raw).__name__}")
        return {}
    return raw



def check_keys(obj: JsonObject, kind: TaskKind | None, problems: Problems) -> None:
    every = tuple(k for t in TASK_KINDS.values() for k in t.keys)
    known = COMMON_KEYS + (kind.keys if kind else every)
    for k in obj:
        if k in known:
            continue
        owner = next((t.name for t in TASK_KINDS.values() if k in t.keys), None)
        if owner is not None and kind is not None:
            problems.append(
                f"key {k!r} belongs to {owner} tasks; mechanism {obj.get('mechanism')!r} makes a {kind.name} "
                f"task (its keys: {', '.join(kind.keys)})"
            )
        else:
            problems.append(f"unknown key {k!r} (known: {', '.join(known)})")
    for k in REQUIRED:
        if k not in obj:
            problems.append(f"missing required key {k!r}")


def check_task_id(obj: JsonObject, problems: Problems) -> str:
    task_id = obj.get("task_id")
    if "task_id" in obj and not (isinstance(task_id, str) and TASK_ID_RE.match(task_id)):
        problems.append(
            f"task_id must be 1-128 characters of letters, digits, '.', '_' or '-', got {task_id!r}"
        )
    return task_id if isinstance(task_id, str) else ""


def check_mechanism(obj: JsonObject, problems: Problems) -> tuple[str | None, TaskKind | None]:
    """The mechanism name (lower case, as the registries spell it) and its kind; ``kind`` in the file
    must agree."""
    raw = obj.get("mechanism")
    name = raw if isinstance(raw, str) else None
    kinds = [k for k in TASK_KINDS.values() if name in k.mechanisms()]
    if "mechanism" in obj and not kinds:
        every = [m for k in TASK_KINDS.values() for m in k.mechanisms()]
        hint = ""
        if isinstance(raw, str) and raw.strip().lower() in every:
            hint = f" (names are lower case: {raw.strip().lower()!r})"
        problems.append(f"mechanism must be one of {', '.join(every)}, got {raw!r}{hint}")
        name = None
    declared = obj.get("kind")
    if "kind" in obj and declared not in TASK_KINDS:
        problems.append(f"kind must be one of {', '.join(TASK_KINDS)}, got {declared!r}")
        return name, kinds[0] if len(kinds) == 1 else None
    if "kind" in obj:
        if name is not None and TASK_KINDS[declared] not in kinds:
            problems.append(f"mechanism {name!r} is not a {declared} mechanism")
        return name, TASK_KINDS[declared]
    return name, kinds[0] if kinds else None


def check_epsilon(obj: JsonObject, problems: Problems, allow_auto: bool = False) -> float:
    """The task's epsilon (1.0 when missing or invalid). ``allow_auto``: the kind accepts ``"auto"`` (chosen
    for the ``anonymity`` section's central target; 1.0 is returned here and replaced later)."""
    eps = obj.get("epsilon")
    if allow_auto and eps == AUTO_EPSILON:
        return 1.0
    if "epsilon" in obj and not (is_num(eps) and 0 < eps <= 50):
        also = ' or "auto" (with anonymity.central_epsilon)' if allow_auto else ""
        problems.append(f"epsilon must be a number in (0, 50]{also}, got {eps!r}")
        return 1.0
    return float(eps) if is_num(eps) else 1.0


def check_description(obj: JsonObject, problems: Problems) -> str:
    desc = obj.get("description", "")
    if not isinstance(desc, str):
        problems.append(f"description must be a string, got {type(desc).__name__}")
        return ""
    return desc


def check_schema_version(obj: JsonObject, problems: Problems, task_kind: TaskKind | None = None) -> int:
    """The task's report schema version: one of the kind's (its ``schema_version`` field's enum and default,
    else version 2)."""
    field = task_kind.fields.get("schema_version") if task_kind is not None else None
    allowed = tuple(field.enum) if field is not None and field.enum else COMMON_SCHEMA_VERSIONS
    default = field.default if field is not None and field.default is not None else DEFAULT_SCHEMA_VERSION
    sv = obj.get("schema_version", default)
    if not is_int(sv) or sv not in allowed:
        why = (field.description if field is not None and field.description
               else "version 1 reports used the old OLH hash family: make a new task")
        problems.append(f"schema_version must be one of {allowed}, got {sv!r} ({why})")
        return int(default)  # type: ignore[arg-type]
    return int(sv)


def check_n_groups(obj: JsonObject, problems: Problems) -> int:
    ng = obj.get("n_groups", 1)
    if not (is_int(ng) and 1 <= ng <= MAX_GROUPS):
        problems.append(f"n_groups must be an integer in [1, 2^31], got {ng!r}")
        return 1
    return int(ng)


def check_postprocess(obj: JsonObject, problems: Problems) -> str:
    pp = obj.get("postprocess", "base")
    if pp not in POSTPROCESS_METHODS:
        key = pp.strip().lower().replace("_", "-") if isinstance(pp, str) else None
        hint = f" (spelled {key!r} in a task file)" if key in POSTPROCESS_METHODS else ""
        problems.append(f"postprocess must be one of {', '.join(POSTPROCESS_METHODS)}, got {pp!r}{hint}")
        return "base"
    return str(pp)


def check_hash(obj: JsonObject, mechanism: str | None, problems: Problems) -> HashConfig:
    raw = as_object(obj.get("hash"), "hash", problems)
    for k in raw:
        if k not in ("g", "family"):
            problems.append(f"hash: unknown key {k!r} (known: family, g)")
    family = raw.get("family")
    family = DEFAULT_HASH_FAMILY if family is None else family
    if family not in HASH_FAMILY_NAMES:
        problems.append(f"hash.family must be one of {', '.join(HASH_FAMILY_NAMES)}, got {family!r}")
        family = DEFAULT_HASH_FAMILY
    g = raw.get("g")
    if g is not None and not (is_int(g) and g >= 2):
        problems.append(f"hash.g must be an integer >= 2 or null, got {g!r}")
        g = None
    if g is not None and mechanism not in (None, "olh"):
        problems.append(f"hash.g applies to mechanism 'olh' only, not {mechanism!r}")
    if g is not None:
        msg = _hashing.HASH_FAMILIES[str(family)].check(int(g))
        if msg:
            problems.append(f"hash.g: {msg}")
    return HashConfig(family=str(family), g=None if g is None else int(g))


def check_params(obj: JsonObject, problems: Problems) -> dict[str, object]:
    return dict(as_object(obj.get("params"), "params", problems))


def check_window(raw: object, problems: Problems) -> WindowConfig:
    raw = as_object(raw, "window", problems)
    known = [f.name for f in dataclasses.fields(WindowConfig)]
    for k in raw:
        if k not in known:
            problems.append(f"window: unknown key {k!r} (known: {', '.join(sorted(known))})")
    vals: dict[str, float | None] = {}
    for k in ("size_s", "period_s", "early_firing_s"):
        v = raw.get(k)
        if v is not None and not (is_num(v) and v > 0):
            problems.append(f"window.{k} must be a positive number or null, got {v!r}")
            v = None
        elif v is not None and not whole_ms(v):
            problems.append(not_whole_ms(k, v))
            v = None
        vals[k] = None if v is None else float(v)
    lat = raw.get("allowed_lateness_s", 0)
    if not (is_num(lat) and lat >= 0):
        problems.append(f"window.allowed_lateness_s must be a number >= 0, got {lat!r}")
        lat = 0
    elif not whole_ms(lat):
        problems.append(not_whole_ms("allowed_lateness_s", lat))
        lat = 0
    acc = raw.get("accumulating", False)
    if not isinstance(acc, bool):
        problems.append(f"window.accumulating must be true or false, got {acc!r}")
        acc = False
    if vals["period_s"] is not None:
        if vals["size_s"] is None:
            problems.append("window.period_s needs window.size_s")
        elif vals["period_s"] > vals["size_s"]:
            problems.append(
                f"window.period_s ({vals['period_s']}) must not exceed window.size_s ({vals['size_s']})"
            )
    return WindowConfig(allowed_lateness_s=float(lat), accumulating=acc, **vals)


def check_attributes(raw: object, problems: Problems) -> tuple[Attribute, ...]:
    if not isinstance(raw, list):
        problems.append(f"attributes must be a list, got {type(raw).__name__}")
        return ()
    if not raw:
        problems.append("attributes must be a non-empty list")
    out: list[Attribute] = []
    seen: set[str] = set()
    for i, a in enumerate(raw):
        if not isinstance(a, Mapping):
            problems.append(f"attributes[{i}] must be an object with name and domain_size")
            continue
        extra = set(a) - {"name", "domain_size"}
        if extra:
            problems.append(f"attributes[{i}]: unknown key(s) {sorted(extra)}")
        name, d = a.get("name"), a.get("domain_size")
        ok = True
        if not isinstance(name, str) or not name:
            problems.append(f"attributes[{i}].name must be a non-empty string, got {name!r}")
            ok = False
        elif name in seen:
            problems.append(f"attributes[{i}].name {name!r} is repeated")
            ok = False
        if not (is_int(d) and 2 <= d <= MAX_DOMAIN):
            problems.append(f"attributes[{i}].domain_size must be an integer in [2, 2^31], got {d!r}")
            ok = False
        if ok:
            seen.add(name)
            out.append(Attribute(name, int(d)))
    return tuple(out)


def require(obj: JsonObject, keys: Sequence[str], mechanism: str, problems: Problems) -> bool:
    missing = [k for k in keys if k not in obj]
    for k in missing:
        problems.append(f"missing {k!r} (required by mechanism {mechanism!r})")
    return not missing
