"""The collection task: the one configuration clients and the aggregator share.

A task is a small JSON object with an id. Clients encode with it; the aggregator refuses (dead-letters)
reports that carry another task id or values outside the task's domain. Changing any privacy-relevant
parameter (mechanism, epsilon, domain, hash parameters) means a new ``task_id``.

Format (keys not listed are an error, so typos do not pass silently)::

    {
      "task_id": "fruit-2026-11",        # required: 1-128 chars of [A-Za-z0-9._-]
      "mechanism": "olh",                # required: grr olh blh oue sue hr ss auto (1-D frequency oracles)
      "epsilon": 1.0,                    # required: > 0
      "domain_size": 1024,               # required for 1-D mechanisms: integer >= 2
      "description": "",                 # optional free text
      "schema_version": 1,               # optional, default 1: report schema clients write
      "n_groups": 1,                     # optional, default 1: users are split into this many groups
      "postprocess": "base",             # optional, default "base": ldp.postprocess method name
      "hash": {"g": null},               # optional: OLH bucket count g (prime power),
                                         #   default round(e^eps + 1) moved to a prime power
      "params": {},                      # optional: further mechanism parameters (e.g. {"k": 8} for ss)
      "window": {                        # optional, defaults shown; pipeline flags override
        "size_s": null,                  #   event-time window length; null = one global window
        "period_s": null,                #   sliding period; null = fixed (tumbling) windows
        "allowed_lateness_s": 0,         #   how long after a window closes late reports still count
        "early_firing_s": null,          #   processing-time period of early (speculative) panes
        "accumulating": false            #   panes report everything so far (true) or only new data
      },
      "attributes": []                   # multi-attribute tasks (range queries): [{"name", "domain_size"}]
    }

Loading reports every problem at once (:class:`TaskError` lists them), not just the first.

Extension for multi-attribute tasks: mechanisms ``hdg tdg calm hio lhio msw uni`` take an ``attributes``
list instead of ``domain_size``. Their specific checks are registered with :func:`register_mechanism`
by the modules that implement them; until then only the generic attribute checks run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CollectionTask",
    "WindowConfig",
    "Attribute",
    "TaskError",
    "load_task",
    "parse_task",
    "register_mechanism",
    "ORACLE_MECHANISMS",
    "MULTI_ATTRIBUTE_MECHANISMS",
    "SUPPORTED_SCHEMA_VERSIONS",
    "POSTPROCESS_METHODS",
]

#: 1-D frequency-oracle mechanisms (``ldp.oracles``); ``auto`` picks the lowest-variance one.
ORACLE_MECHANISMS = ("grr", "olh", "blh", "oue", "sue", "hr", "ss", "auto")
#: Multi-attribute (range-query) mechanisms; validated by validators registered later.
MULTI_ATTRIBUTE_MECHANISMS = ("hdg", "tdg", "calm", "hio", "lhio", "msw", "uni")
#: Report schema versions this code can read (kept here because ``ldp`` imports no other package).
SUPPORTED_SCHEMA_VERSIONS = (1,)
#: Post-processing methods of ``ldp.postprocess`` (Wang et al., NDSS 2020).
POSTPROCESS_METHODS = (
    "base",
    "base-pos",
    "post-pos",
    "base-cut",
    "norm",
    "norm-mul",
    "norm-sub",
    "norm-cut",
    "cls",
    "mle-apx",
    "power",
    "power-ns",
)

_TASK_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_TOP_KEYS = (
    "task_id",
    "mechanism",
    "epsilon",
    "domain_size",
    "description",
    "schema_version",
    "n_groups",
    "postprocess",
    "hash",
    "params",
    "window",
    "attributes",
    # multi-attribute (range-query) tasks; validated by ldp.rangequery.registry
    "expected_users",
    "granularity",
    "options",
)
_MAX_GROUPS = 1 << 31


class TaskError(ValueError):
    """A task file or object with one or more problems; ``problems`` lists all of them."""

    def __init__(self, problems: list[str], source: str = "task") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n{lines}")


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """Event-time windowing defaults of a task (pipeline flags override them).

    Attributes:
        size_s: window length in seconds; ``None`` means one global window.
        period_s: sliding period in seconds (``None``: fixed windows); must divide into ``size_s``.
        allowed_lateness_s: seconds after the end of a window during which late reports still update it.
        early_firing_s: processing-time period of early panes (dashboards); ``None``: no early panes.
        accumulating: each pane holds everything so far (cumulative view) instead of only new reports.
    """

    size_s: float | None = None
    period_s: float | None = None
    allowed_lateness_s: float = 0.0
    early_firing_s: float | None = None
    accumulating: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Attribute:
    """One attribute of a multi-attribute task: a name and a domain ``[0, domain_size)``."""

    name: str
    domain_size: int


# mechanism -> validator(raw task dict, problems list); validators append messages, never raise.
_VALIDATORS: dict[str, Callable[[Mapping[str, Any], list[str]], None]] = {}


def register_mechanism(name: str, validator: Callable[[Mapping[str, Any], list[str]], None]) -> None:
    """Registers (or replaces) the task checks of a mechanism.

    Used by the modules of multi-attribute mechanisms (HDG, TDG, ...): ``validator(task_dict, problems)``
    appends a message to ``problems`` for every problem it finds in the raw task dict.
    """
    _VALIDATORS[str(name).lower()] = validator


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclasses.dataclass(frozen=True)
class CollectionTask:
    """A validated collection task (see the module docstring for the JSON format).

    Build one with :func:`parse_task` / :func:`load_task` (which check everything) rather than the
    constructor. Frozen and hashable-free of numpy, so it pickles cheaply to Beam workers.
    """

    task_id: str
    mechanism: str
    epsilon: float
    domain_size: int | None = None
    description: str = ""
    schema_version: int = 1
    n_groups: int = 1
    postprocess: str = "base"
    hash: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    window: WindowConfig = dataclasses.field(default_factory=WindowConfig)
    attributes: tuple[Attribute, ...] = ()

    @property
    def is_multi_attribute(self) -> bool:
        """True for range-query tasks (``attributes`` instead of ``domain_size``)."""
        return self.mechanism in MULTI_ATTRIBUTE_MECHANISMS

    def oracle_params(self) -> dict[str, Any]:
        """Keyword arguments for ``ldp.oracles.make_oracle`` beyond name, epsilon and domain."""
        out = dict(self.params)
        if self.hash.get("g") is not None:
            out["g"] = self.hash["g"]
        return out

    def make_oracle(self) -> Any:
        """The task's frequency oracle (``ldp.oracles.make_oracle``); ``auto`` resolves deterministically."""
        from ldp.oracles import make_oracle

        if self.is_multi_attribute:
            raise ValueError(f"task {self.task_id!r}: mechanism {self.mechanism!r} is not a frequency oracle")
        return make_oracle(self.mechanism, self.epsilon, self.domain_size, **self.oracle_params())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict; ``parse_task(task.to_dict()) == task``."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
        }
        if self.domain_size is not None:
            out["domain_size"] = self.domain_size
        out.update(
            description=self.description,
            schema_version=self.schema_version,
            n_groups=self.n_groups,
            postprocess=self.postprocess,
            hash=dict(self.hash),
            params=dict(self.params),
            window=self.window.to_dict(),
        )
        if self.attributes:
            out["attributes"] = [dataclasses.asdict(a) for a in self.attributes]
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")


def _check_window(raw: Any, problems: list[str]) -> WindowConfig:
    if raw is None:
        return WindowConfig()
    if not isinstance(raw, Mapping):
        problems.append(f"window must be an object, got {type(raw).__name__}")
        return WindowConfig()
    known = {f.name for f in dataclasses.fields(WindowConfig)}
    for k in raw:
        if k not in known:
            problems.append(f"window: unknown key {k!r} (known: {', '.join(sorted(known))})")
    vals: dict[str, Any] = {}
    for k in ("size_s", "period_s", "early_firing_s"):
        v = raw.get(k)
        if v is not None and not (_is_num(v) and v > 0):
            problems.append(f"window.{k} must be a positive number or null, got {v!r}")
            v = None
        vals[k] = None if v is None else float(v)
    lat = raw.get("allowed_lateness_s", 0)
    if not (_is_num(lat) and lat >= 0):
        problems.append(f"window.allowed_lateness_s must be a number >= 0, got {lat!r}")
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


def _check_attributes(raw: Any, problems: list[str]) -> tuple[Attribute, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"attributes must be a list, got {type(raw).__name__}")
        return ()
    out, seen = [], set()
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
        if not (_is_int(d) and d >= 2):
            problems.append(f"attributes[{i}].domain_size must be an integer >= 2, got {d!r}")
            ok = False
        if ok:
            seen.add(name)
            out.append(Attribute(name, int(d)))
    return tuple(out)


def _check_multi_attribute(raw: Mapping[str, Any], problems: list[str]) -> None:
    """Generic checks of range-query tasks; mechanism specifics come from registered validators."""
    if not raw.get("attributes"):
        problems.append(f"mechanism {raw.get('mechanism')!r} needs a non-empty 'attributes' list")


def parse_task(obj: Any, *, source: str = "task") -> CollectionTask:
    """Validates a task given as a dict (parsed JSON) and returns the :class:`CollectionTask`.

    Raises:
        TaskError: listing every problem found.
    """
    problems: list[str] = []
    if not isinstance(obj, Mapping):
        raise TaskError([f"a task must be a JSON object, got {type(obj).__name__}"], source)
    for k in obj:
        if k not in _TOP_KEYS:
            problems.append(f"unknown key {k!r} (known: {', '.join(_TOP_KEYS)})")
    for k in ("task_id", "mechanism", "epsilon"):
        if k not in obj:
            problems.append(f"missing required key {k!r}")

    task_id = obj.get("task_id")
    if "task_id" in obj and not (isinstance(task_id, str) and _TASK_ID_RE.match(task_id)):
        problems.append(
            f"task_id must be 1-128 characters of letters, digits, '.', '_' or '-', got {task_id!r}"
        )

    mech_raw = obj.get("mechanism")
    mechanism = mech_raw.lower() if isinstance(mech_raw, str) else None
    if "mechanism" in obj and mechanism not in ORACLE_MECHANISMS + MULTI_ATTRIBUTE_MECHANISMS:
        problems.append(
            f"mechanism must be one of {', '.join(ORACLE_MECHANISMS + MULTI_ATTRIBUTE_MECHANISMS)}, "
            f"got {mech_raw!r}"
        )
        mechanism = None
    multi = mechanism in MULTI_ATTRIBUTE_MECHANISMS

    eps = obj.get("epsilon")
    if "epsilon" in obj and not (_is_num(eps) and 0 < eps <= 50):
        problems.append(f"epsilon must be a number in (0, 50], got {eps!r}")

    d = obj.get("domain_size")
    if mechanism is not None and not multi and "domain_size" not in obj:
        problems.append(f"missing required key 'domain_size' (mechanism {mechanism!r})")
    if d is not None and not (_is_int(d) and 2 <= d <= 1 << 31):
        problems.append(f"domain_size must be an integer in [2, 2^31], got {d!r}")

    desc = obj.get("description", "")
    if not isinstance(desc, str):
        problems.append(f"description must be a string, got {type(desc).__name__}")
    sv = obj.get("schema_version", 1)
    if sv not in SUPPORTED_SCHEMA_VERSIONS or not _is_int(sv):
        problems.append(f"schema_version must be one of {SUPPORTED_SCHEMA_VERSIONS}, got {sv!r}")
    ng = obj.get("n_groups", 1)
    if not (_is_int(ng) and 1 <= ng <= _MAX_GROUPS):
        problems.append(f"n_groups must be an integer in [1, 2^31], got {ng!r}")
    pp = obj.get("postprocess", "base")
    pp_key = pp.strip().lower().replace("_", "-") if isinstance(pp, str) else pp
    if pp_key not in POSTPROCESS_METHODS:
        problems.append(f"postprocess must be one of {', '.join(POSTPROCESS_METHODS)}, got {pp!r}")

    hsh = obj.get("hash", {}) or {}
    if not isinstance(hsh, Mapping):
        problems.append(f"hash must be an object, got {type(hsh).__name__}")
        hsh = {}
    for k in hsh:
        if k not in ("g", "family"):
            problems.append(f"hash: unknown key {k!r} (known: g, family)")
    if hsh.get("family", "linear-gf") != "linear-gf":
        problems.append(
            f"hash.family must be 'linear-gf' (the only family of ldp.hashing), got {hsh.get('family')!r}"
        )
    g = hsh.get("g")
    if g is not None and not (_is_int(g) and g >= 2):
        problems.append(f"hash.g must be an integer >= 2 or null, got {g!r}")
    if g is not None and mechanism not in (None, "olh"):
        problems.append(f"hash.g applies to mechanism 'olh' only, not {mechanism!r}")
    params = obj.get("params", {}) or {}
    if not isinstance(params, Mapping):
        problems.append(f"params must be an object, got {type(params).__name__}")
        params = {}

    window = _check_window(obj.get("window"), problems)
    attributes = _check_attributes(obj.get("attributes"), problems)
    if attributes and mechanism is not None and not multi:
        problems.append(f"attributes are for multi-attribute mechanisms, not {mechanism!r}; use domain_size")

    if multi:
        _check_multi_attribute(obj, problems)
        if mechanism not in _VALIDATORS:
            import ldp.rangequery.registry  # noqa: F401  (registers the range-query task checks)
        validator = _VALIDATORS.get(mechanism)
        if validator is not None:
            validator(obj, problems)

    if not problems:
        task = CollectionTask(
            task_id=task_id,
            mechanism=mechanism,
            epsilon=float(eps),
            domain_size=None if d is None else int(d),
            description=desc,
            schema_version=int(sv),
            n_groups=int(ng),
            postprocess=pp_key,
            hash={k: v for k, v in hsh.items() if v is not None},
            params=dict(params),
            window=window,
            attributes=attributes,
        )
        if not multi:
            try:  # the oracle is the final judge of mechanism parameters (e.g. g not a prime power)
                task.make_oracle()
            except ValueError as exc:
                problems.append(f"mechanism parameters rejected by ldp.oracles: {exc}")
        if not problems:
            return task
    raise TaskError(problems, source)


def load_task(path: str | Path) -> CollectionTask:
    """Reads and validates a task JSON file.

    Raises:
        TaskError: the file cannot be read, is not JSON, or the task has problems (all listed).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskError([f"cannot read task file: {exc}"], str(p)) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskError(
            [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"], str(p)
        ) from None
    return parse_task(obj, source=str(p))
