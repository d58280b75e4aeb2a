"""Method registry and the multi-attribute collection task.

``make_mechanism(name, epsilon, domain_sizes, n_users, **options)`` builds any range-query mechanism by
name. HDG, TDG, CALM and Uni live in this package's ``grids``, ``calm`` and ``uni`` modules; HIO, LHIO and
MSW in ``hio``, ``lhio`` and ``msw`` (imported lazily, on first use).

The task (see ``docs/range_queries.md``)::

    {"task_id": "t1", "mechanism": "hdg", "epsilon": 1.0,
     "attributes": [{"name": "age", "domain_size": 64}, ...],
     "expected_users": 1000000,
     "granularity": {"g1": 16, "g2": 4},      # optional, HDG / TDG only
     "options": {...}}                        # optional, method options (e.g. {"oracle": "auto"})

The keys of the general collection task of ``ldp.task`` that do not affect the mechanism (``description``,
``schema_version``, ``window``, ``postprocess``, ``hash``) are accepted and ignored, ``params`` is an alias
of ``options`` and ``n_groups``, if present, must equal the method's number of groups.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ldp.rangequery.base import RangeMechanism

__all__ = ["METHODS", "load_method", "make_mechanism", "RangeTask", "parse_task", "mechanism_from_task"]

_METHODS: dict[str, tuple[str, str]] = {
    "hdg": ("ldp.rangequery.grids", "HDGMechanism"),
    "tdg": ("ldp.rangequery.grids", "TDGMechanism"),
    "calm": ("ldp.rangequery.calm", "CALMMechanism"),
    "uni": ("ldp.rangequery.uni", "UniMechanism"),
    "hio": ("ldp.rangequery.hio", "HIOMechanism"),
    "lhio": ("ldp.rangequery.lhio", "LHIOMechanism"),
    "msw": ("ldp.rangequery.msw", "MSWMechanism"),
}

#: every method name ``make_mechanism`` accepts
METHODS: tuple[str, ...] = tuple(_METHODS)


def load_method(name: str) -> type[RangeMechanism]:
    """The mechanism class of a method name (imports its module, which also registers its model class)."""
    key = str(name).lower()
    if key not in _METHODS:
        raise ValueError(f"unknown range-query method {name!r}; choose one of {list(METHODS)}")
    module, cls = _METHODS[key]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - only while a module is missing
        raise ValueError(f"range-query method {key!r} is not available ({exc})") from exc
    return getattr(mod, cls)


def make_mechanism(
    name: str, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any
) -> RangeMechanism:
    """Builds a range-query mechanism by name (``hdg tdg calm uni hio lhio msw``)."""
    return load_method(name)(epsilon, domain_sizes, n_users, **options)


@dataclass(frozen=True)
class RangeTask:
    """A validated multi-attribute collection task (what clients and the aggregator share)."""

    task_id: str
    mechanism: str
    epsilon: float
    attribute_names: tuple[str, ...]
    domain_sizes: tuple[int, ...]
    expected_users: int
    options: Mapping[str, Any] = field(default_factory=dict)

    def make_mechanism(self) -> RangeMechanism:
        """The mechanism this task describes."""
        return make_mechanism(
            self.mechanism, self.epsilon, self.domain_sizes, self.expected_users, **dict(self.options)
        )

    def to_json(self) -> dict[str, Any]:
        """The task-file form."""
        opts = dict(self.options)
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "attributes": [
                {"name": n, "domain_size": c} for n, c in zip(self.attribute_names, self.domain_sizes)
            ],
            "expected_users": self.expected_users,
        }
        gran = {k: opts.pop(k) for k in ("g1", "g2") if k in opts}
        if gran:
            out["granularity"] = gran
        if opts:
            out["options"] = opts
        return out


def parse_task(obj: Mapping[str, Any]) -> RangeTask:
    """Validates a multi-attribute task dict (clear ValueError on any problem)."""
    if not isinstance(obj, Mapping):
        raise ValueError("a task must be a JSON object")
    allowed = {"task_id", "mechanism", "epsilon", "attributes", "expected_users", "granularity", "options"}
    # keys of the general collection task (ldp.task) that do not change the mechanism: accepted, unused here
    allowed |= {"description", "schema_version", "window", "params", "n_groups", "postprocess", "hash"}
    extra = set(obj) - allowed
    if extra:
        raise ValueError(f"unknown task field(s) {sorted(extra)}; allowed: {sorted(allowed)}")
    for key in ("task_id", "mechanism", "epsilon", "attributes", "expected_users"):
        if key not in obj:
            raise ValueError(f"task is missing {key!r}")
    task_id = obj["task_id"]
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("task_id must be a non-empty string")
    mech = str(obj["mechanism"]).lower()
    if mech not in _METHODS:
        raise ValueError(
            f"task {task_id}: unknown mechanism {obj['mechanism']!r}; choose one of {list(METHODS)}"
        )
    eps = obj["epsilon"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"task {task_id}: epsilon must be a positive number, got {eps!r}")
    attrs = obj["attributes"]
    if not isinstance(attrs, list) or not attrs:
        raise ValueError(f"task {task_id}: attributes must be a non-empty list")
    names, sizes = [], []
    for i, a in enumerate(attrs):
        if not isinstance(a, Mapping) or set(a) != {"name", "domain_size"}:
            raise ValueError(f"task {task_id}: attribute {i} must be {{'name', 'domain_size'}}, got {a!r}")
        name, c = a["name"], a["domain_size"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"task {task_id}: attribute {i} needs a non-empty string name")
        if isinstance(c, bool) or not isinstance(c, int) or c < 2:
            raise ValueError(f"task {task_id}: attribute {name!r} domain_size must be an integer >= 2")
        names.append(name)
        sizes.append(c)
    if len(set(names)) != len(names):
        raise ValueError(f"task {task_id}: duplicate attribute names {names}")
    n = obj["expected_users"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"task {task_id}: expected_users must be a positive integer")
    options = dict(obj.get("params") or {})
    options.update(obj.get("options") or {})
    if "granularity" in obj:
        gran = obj["granularity"]
        if mech not in ("hdg", "tdg"):
            raise ValueError(f"task {task_id}: granularity applies to hdg/tdg only, not {mech}")
        if not isinstance(gran, Mapping) or not set(gran) <= {"g1", "g2"}:
            raise ValueError(f"task {task_id}: granularity must be an object with g1 and/or g2")
        options.update(gran)
    task = RangeTask(task_id, mech, float(eps), tuple(names), tuple(sizes), n, options)
    try:
        mechanism = task.make_mechanism()  # validates the options against the method
    except ValueError as exc:
        raise ValueError(f"task {task_id}: {exc}") from None
    if "n_groups" in obj and obj["n_groups"] != mechanism.n_groups:
        raise ValueError(
            f"task {task_id}: n_groups {obj['n_groups']!r} does not match "
            f"{mech}'s {mechanism.n_groups} groups"
        )
    return task


def mechanism_from_task(obj: Mapping[str, Any] | RangeTask) -> RangeMechanism:
    """Parses a task (if needed) and builds its mechanism."""
    task = obj if isinstance(obj, RangeTask) else parse_task(obj)
    return task.make_mechanism()


def _task_validator(obj: Mapping[str, Any], problems: list[str]) -> None:
    """``ldp.task`` hook: a multi-attribute task is valid when :func:`parse_task` accepts it."""
    try:
        parse_task(obj)
    except ValueError as exc:
        problems.append(str(exc))


def _register_task_checks() -> None:
    from ldp.task import register_mechanism

    for name in _METHODS:
        register_mechanism(name, _task_validator)


_register_task_checks()
