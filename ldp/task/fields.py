"""The declared fields of the task file and the JSON Schema generated from them.

Each key is declared once, as a :class:`Field`: the common ones in :data:`COMMON_FIELDS`, a kind's own in
its :class:`TaskKind` section (``fields``). :func:`task_json_schema` generates ``schemas/task.schema.json``
from :data:`COMMON_FIELDS` and the sections registered in :data:`TASK_KINDS` (``python -m ldp.task
--schema``); :data:`SEMANTIC_CHECKS` lists what ``parse_task`` checks beyond what a JSON Schema can say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

from ldp import anonymity as _anonymity
from ldp.task.base import (
    AUTO_EPSILON,
    COMMON_SCHEMA_VERSIONS,
    DEFAULT_HASH_FAMILY,
    DEFAULT_SCHEMA_VERSION,
    HASH_FAMILY_NAMES,
    MAX_DOMAIN,
    MAX_GROUPS,
    POSTPROCESS_METHODS,
    REQUIRED,
    TASK_ID_RE,
    Task,
)

__all__ = [
    "Field",
    "declare",
    "COMMON_FIELDS",
    "WINDOW_FIELDS",
    "ATTRIBUTES",
    "BUDGET",
    "HASH_WITHOUT_G",
    "NO_RESOLUTION",
    "EPSILON_OR_AUTO",
    "ANONYMITY",
    "SEMANTIC_CHECKS",
    "TaskKind",
    "TASK_KINDS",
    "task_json_schema",
]


@dataclasses.dataclass(frozen=True)
class Field:
    """What a key of the task file may hold, as far as a JSON Schema can say it.

    Each kind of task declares its keys in one table (:data:`COMMON_FIELDS` plus
    :attr:`TaskKind.fields`); :func:`task_json_schema` generates the task file's JSON Schema from the
    tables and ``tests/test_task_schema_model.py`` checks, at the boundaries and just past them, that
    :func:`parse_task` accepts exactly what the declarations accept, apart from the checks a JSON Schema
    cannot make (:data:`SEMANTIC_CHECKS`).
    """

    type: tuple[str, ...]
    enum: tuple[object, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    items: Field | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False
    properties: Mapping[str, Field] | None = None
    required: tuple[str, ...] = ()
    any_of: tuple[Field, ...] = ()
    default: object = dataclasses.field(default=None, compare=False)
    description: str = dataclasses.field(default="", compare=False)

    def json_schema(self) -> dict[str, object]:
        """This declaration as JSON Schema (draft 2020-12)."""
        out: dict[str, object] = {}
        if self.type:
            out["type"] = self.type[0] if len(self.type) == 1 else list(self.type)
        for key, value in (
            ("enum", None if self.enum is None else list(self.enum)),
            ("minimum", self.minimum),
            ("maximum", self.maximum),
            ("exclusiveMinimum", self.exclusive_minimum),
            ("exclusiveMaximum", self.exclusive_maximum),
            ("pattern", self.pattern),
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("items", None if self.items is None else self.items.json_schema()),
            ("minItems", self.min_items),
            ("maxItems", self.max_items),
        ):
            if value is not None:
                out[key] = value
        if self.unique_items:
            out["uniqueItems"] = True
        if self.properties is not None:
            out["properties"] = {k: f.json_schema() for k, f in self.properties.items()}
            out["additionalProperties"] = False
        if self.required:
            out["required"] = list(self.required)
        if self.any_of:
            out["anyOf"] = [f.json_schema() for f in self.any_of]
        if self.default is not None:
            out["default"] = self.default
        if self.description:
            out["description"] = self.description
        return out


def declare(*types: str, **kw: object) -> Field:
    """A :class:`Field` of the JSON types ``types`` (keyword arguments: its other attributes)."""
    return Field(tuple(types), **kw)  # type: ignore[arg-type]


NULLABLE_POSITIVE = declare("number", "null", exclusive_minimum=0)
WINDOW_FIELDS: dict[str, Field] = {
    "size_s": NULLABLE_POSITIVE,
    "period_s": NULLABLE_POSITIVE,
    "allowed_lateness_s": declare("number", minimum=0),
    "early_firing_s": NULLABLE_POSITIVE,
    "accumulating": declare("boolean"),
}
ATTRIBUTES = declare(
    "array",
    min_items=1,
    items=declare(
        "object",
        properties={
            "name": declare("string", min_length=1),
            "domain_size": declare("integer", minimum=2, maximum=MAX_DOMAIN),
        },
        required=("name", "domain_size"),
    ),
    description="the public attributes, each with a domain [0, domain_size); names unique",
)

#: The keys every kind of task has (a kind's :attr:`TaskKind.fields` may narrow them).
COMMON_FIELDS: dict[str, Field] = {
    "task_id": declare(
        "string", pattern=TASK_ID_RE.pattern, description="1-128 letters, digits, '.', '_' or '-'"
    ),
    "mechanism": declare("string", description="a mechanism of the task's kind (lower case)"),
    "epsilon": declare("number", exclusive_minimum=0, maximum=50),
    "kind": declare("string", description="the kind of task; default: the first kind that has the mechanism"),
    "description": declare("string"),
    "schema_version": declare("integer", enum=COMMON_SCHEMA_VERSIONS, default=DEFAULT_SCHEMA_VERSION),
    "n_groups": declare("integer", minimum=1, maximum=MAX_GROUPS),
    "postprocess": declare("string", enum=POSTPROCESS_METHODS, default="base"),
    "hash": declare(
        "object",
        "null",
        properties={
            "family": declare("string", "null", enum=(*HASH_FAMILY_NAMES, None), default=DEFAULT_HASH_FAMILY),
            "g": declare("integer", "null", minimum=2),
        },
        description="the OLH hash family and bucket count",
    ),
    "params": declare("object", "null", description="further mechanism parameters"),
    "window": declare("object", "null", properties=WINDOW_FIELDS, description="event-time window defaults"),
    "resolved": declare(
        "object",
        "null",
        properties={
            "auto_candidates": declare("array", items=declare("string")),
            "oracles": declare("array", items=declare("object")),
            "local_epsilon": declare(
                "object",
                properties={
                    "epsilon": declare("number"),
                    "central_epsilon": declare("number"),
                    "delta": declare("number"),
                    "expected_reports": declare("integer"),
                    "accounting": declare(
                        "string", min_length=1,
                        description="the shuffle accountant's bound (ldp.anonymity.shuffle_accounting)",
                    ),
                },
                required=("epsilon", "central_epsilon", "delta", "expected_reports", "accounting"),
            ),
        },
        required=("auto_candidates", "oracles"),
        description="written by ldp.task.resolve_task: what the oracles resolved to; checked on every load",
    ),
}

#: the ``hash`` of kinds without OLH: a family may be named (it is unused), ``g`` may not
HASH_WITHOUT_G = dataclasses.replace(
    COMMON_FIELDS["hash"],
    properties={**(COMMON_FIELDS["hash"].properties or {}), "g": declare("null")},
    description="no OLH here: hash.g must be null",
)
NO_RESOLUTION = declare("null", description="nothing resolves in this kind")
#: the epsilon of the kinds that may be shuffled: a number, or "auto" for the anonymity section's target
EPSILON_OR_AUTO = Field(
    (),
    any_of=(COMMON_FIELDS["epsilon"], declare("string", enum=(AUTO_EPSILON,))),
    description='the local epsilon; "auto": the largest meeting anonymity.central_epsilon',
)
ANONYMITY = declare(
    "object",
    "null",
    properties={
        "shuffled": declare("boolean", default=True),
        "delta": declare("number", exclusive_minimum=0, maximum=_anonymity.MAX_DELTA, default=1e-9),
        "time_precision_s": declare(
            "integer",
            minimum=1,
            maximum=_anonymity.MAX_TIME_PRECISION_S,
            default=3600,
            description="divides a day or is a whole number of days",
        ),
        "min_reports": declare("integer", minimum=2, default=1000),
        "short_bucket": declare("string", enum=_anonymity.SHORT_BUCKET_POLICIES, default="withhold"),
        "central_epsilon": declare(
            "number", exclusive_minimum=0, maximum=50, description="central target, at delta, per window"
        ),
        "expected_reports": declare("integer", minimum=2, description="reports shuffled together per window"),
    },
    description="anonymous collection through the shuffler (ldp.anonymity; docs/shuffler.md)",
)

#: the per-user budget of repeated collection (``ldp.task.budget``; the frequency and numeric kinds)
BUDGET = declare(
    "object",
    "null",
    properties={
        "epsilon_per_report": declare("number", exclusive_minimum=0, maximum=100),
        "reports_per_period": declare("integer", "null", minimum=1),
        "period_s": declare("number", "null", exclusive_minimum=0),
        "total_epsilon": declare("number", "null", exclusive_minimum=0, maximum=1e6),
        "composition": declare("string", enum=("basic", "memoized", "pld")),
        "delta": declare("number", exclusive_minimum=0, maximum=1e-3),
        "client_ids": declare("boolean", default=False),
    },
    description="the per-user budget of repeated collection (ldp.longitudinal.budget.parse_budget)",
)

#: What :func:`parse_task` checks beyond the declared fields (a JSON Schema cannot say these).
SEMANTIC_CHECKS: tuple[str, ...] = (
    "the mechanism's own parameter checks (ldp.oracles, ldp.rangequery, ldp.sparse, ldp.longitudinal.memo)",
    "window times in whole milliseconds; window.period_s <= window.size_s",
    "hash.g for mechanism olh only (the frequency kind), and the hash family's own check of g",
    "labels: exactly domain_size of them (domain_size <= 65536); labels_file readable, same rules",
    "the budget against the mechanism (ldp.longitudinal.accounting)",
    "a range method's n_groups, attributes and granularity (powers of two, hdg / tdg only)",
    "a range task's schema_version is its method's (msw 3, float_reals_retired at 2; the others 2)",
    "a batch_queries domain of at most 4096 cells, its strategy's params, dwork_roth only below epsilon 1",
    "unique attribute names",
    "resolved equal to what this release resolves",
    "anonymity: time_precision_s divides a day or is whole days; window size_s / period_s multiples of it",
    "anonymity (shuffled): no budget.client_ids, no memoized mechanism",
    "anonymity: central_epsilon needs expected_reports (range: expected_users) and shuffled true; "
    "expected_reports >= min_reports; a numeric epsilon must meet the central target",
    'epsilon "auto" only with anonymity.central_epsilon',
    "numeric: an attribute's low below its high; k at most the number of attributes; the mechanism's own "
    "checks (ldp.numeric)",
)





@dataclasses.dataclass(frozen=True)
class TaskKind:
    """One kind of task: its mechanism names, its own top-level keys and the checker of those keys.

    ``build(raw, common, problems)`` receives the parsed common fields (``task_id``, ``mechanism``, ...),
    appends its problems and returns the task (``None`` when there are problems). A kind whose keys name
    files (``labels_file``) sets ``uses_base_dir``: ``build`` then also gets ``base_dir=`` (the directory
    relative paths are resolved against).

    ``fields`` declares its keys (and any common key it narrows, e.g. ``n_groups``) for the JSON Schema,
    ``required`` its required keys, ``exclusive`` the sets of keys it refuses together.
    """

    name: str
    mechanisms: Callable[[], tuple[str, ...]]
    keys: tuple[str, ...]
    build: Callable[..., Task | None]
    uses_base_dir: bool = False
    fields: Mapping[str, Field] = dataclasses.field(default_factory=dict)
    required: tuple[str, ...] = ()
    exclusive: tuple[tuple[str, ...], ...] = ()
    #: a key of the kind's own whose value is the reports expected per shuffled window when the
    #: ``anonymity`` section gives no ``expected_reports`` (range: ``expected_users``)
    expected_reports_key: str | None = None



class _TaskKinds(Mapping[str, TaskKind]):
    """The task sections of the registered kinds, in registration order (:data:`TASK_KINDS`).

    Filled by :func:`ldp.kinds.register` (the task model never imports a kind: it finds each one here).
    """

    def __init__(self) -> None:
        self._kinds: dict[str, TaskKind] = {}

    def __getitem__(self, name: str) -> TaskKind:
        return self._kinds[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._kinds))

    def __len__(self) -> int:
        return len(self._kinds)

    def _set(self, kind: TaskKind) -> None:
        self._kinds[kind.name] = kind

    def _remove(self, name: str) -> None:
        self._kinds.pop(name, None)


#: Kinds of task by name (their task sections); ``ldp.kinds.register`` adds a kind.
TASK_KINDS = _TaskKinds()


def task_json_schema() -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of the task file, generated from the declared fields
    (:data:`COMMON_FIELDS`, each kind's :attr:`TaskKind.fields`) and :data:`TASK_KINDS`; it is
    ``schemas/task.schema.json`` (``python -m ldp.task --schema > schemas/task.schema.json``).

    A task's kind is its ``kind``, else the first kind (in :data:`TASK_KINDS` order) that has its
    mechanism; each kind's branch lists every key it allows.
    """
    kinds = list(TASK_KINDS.values())
    branches: list[dict[str, object]] = []
    for i, k in enumerate(kinds):
        earlier = {m for e in kinds[:i] for m in e.mechanisms()}
        first = [m for m in k.mechanisms() if m not in earlier]
        select: list[dict[str, object]] = [{"required": ["kind"], "properties": {"kind": {"const": k.name}}}]
        if first:
            select.append(
                {
                    "not": {"required": ["kind"]},
                    "required": ["mechanism"],
                    "properties": {"mechanism": {"enum": first}},
                }
            )
        props = {name: f.json_schema() for name, f in {**COMMON_FIELDS, **k.fields}.items()}
        props["mechanism"] = {**props["mechanism"], "enum": list(k.mechanisms())}
        props["kind"] = {**props["kind"], "const": k.name}
        then: dict[str, object] = {
            "properties": props,
            "additionalProperties": False,
            "required": list(dict.fromkeys((*REQUIRED, *k.required))),
        }
        if k.exclusive:
            then["not"] = {"anyOf": [{"required": list(keys)} for keys in k.exclusive]}
        branches.append({"if": {"anyOf": select}, "then": then})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "ldp-beam/task.schema.json",
        "title": "ldp-beam collection task",
        "description": (
            "The task file clients and the aggregator share. Generated from the declarations of ldp.task "
            "(python -m ldp.task --schema); ldp.task.parse_task also checks: "
            + "; ".join(SEMANTIC_CHECKS)
            + "."
        ),
        "type": "object",
        "required": list(REQUIRED),
        "properties": {
            "mechanism": {
                "type": "string",
                "enum": list(dict.fromkeys(m for k in kinds for m in k.mechanisms())),
            },
            "kind": {"type": "string", "enum": list(TASK_KINDS)},
        },
        "allOf": branches,
    }

