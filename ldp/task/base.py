"""The common task model: the fields, types and checks every kind of task shares.

:class:`Task` holds the keys every kind has; each kind's task class (``ldp.kinds.<kind>.task``) adds its
own. :class:`AttributeTask` is the base of the kinds over a public product domain of named attributes.
The section checkers here (``check_*``) append their problems to one list, so a :class:`TaskError` lists
every problem of a task at once.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import ldp.hashing as _hashing
import ldp.postprocess as _postprocess
from ldp import anonymity as _anonymity
from ldp.anonymity import CentralTarget

__all__ = [
    "Task",
    "AttributeTask",
    "ParsedTask",
    "CollectionTask",
    "HashConfig",
    "WindowConfig",
    "Attribute",
    "TaskError",
    "Problems",
    "JsonObject",
    "AUTO_EPSILON",
    "POSTPROCESS_METHODS",
    "HASH_FAMILY_NAMES",
    "DEFAULT_HASH_FAMILY",
    "SUPPORTED_SCHEMA_VERSIONS",
    "DEFAULT_SCHEMA_VERSION",
    "COMMON_SCHEMA_VERSIONS",
    "COMMON_KEYS",
    "REQUIRED",
    "MAX_GROUPS",
    "MAX_DOMAIN",
    "TASK_ID_RE",
]

#: Post-processing methods of ``ldp.postprocess`` (Wang et al., NDSS 2020).
POSTPROCESS_METHODS: tuple[str, ...] = tuple(m.value for m in _postprocess.Method)
#: OLH hash families (``ldp.hashing.HASH_FAMILIES``); ``linear-gf`` is kept for tasks made before v2.
HASH_FAMILY_NAMES: tuple[str, ...] = tuple(_hashing.HASH_FAMILIES)
DEFAULT_HASH_FAMILY: str = _hashing.DEFAULT_HASH_FAMILY
#: Report schema versions this code reads. ``ldp`` imports no other package, so this mirrors
#: ``schemas.SUPPORTED_SCHEMA_VERSIONS`` (a test keeps the two equal). Version 1 reports (the old OLH hash
#: family, unsorted Subset Selection items) are refused, never mixed with version 2 ones. Version 3 is the
#: numeric kind's integer grid wire (``docs/wire_format.md``, section 7): a kind narrows the versions it
#: takes and its default through its ``schema_version`` field (numeric: 3 only; the others: 2).
SUPPORTED_SCHEMA_VERSIONS: tuple[int, ...] = (2, 3)
DEFAULT_SCHEMA_VERSION = 2
#: the versions a kind takes unless its ``fields`` narrow ``schema_version``
COMMON_SCHEMA_VERSIONS: tuple[int, ...] = (2,)

TASK_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
#: The keys every kind of task has.
COMMON_KEYS = (
    "task_id",
    "mechanism",
    "epsilon",
    "kind",
    "description",
    "schema_version",
    "n_groups",
    "postprocess",
    "hash",
    "params",
    "window",
    "resolved",
)
REQUIRED = ("task_id", "mechanism", "epsilon")
#: The ``epsilon`` of a task whose local epsilon is chosen for its central target (``anonymity``).
AUTO_EPSILON = "auto"
MAX_GROUPS = 1 << 31
MAX_DOMAIN = 1 << 31

Problems = list[str]
JsonObject = Mapping[str, object]


class TaskError(ValueError):
    """A task file or object with one or more problems; ``problems`` lists all of them."""

    def __init__(self, problems: Sequence[str], source: str = "task") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n{lines}")

    def one_line(self) -> str:
        """The problems on one line (for command-line errors)."""
        return f"{self.source}: " + "; ".join(self.problems)


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """Event-time windowing defaults of a task (pipeline flags override them).

    Attributes:
        size_s: window length in seconds; ``None`` means one global window.
        period_s: sliding period in seconds (``None``: fixed windows); must not exceed ``size_s``.
        allowed_lateness_s: seconds after the end of a window during which late reports still update it.
        early_firing_s: processing-time period of early panes (dashboards); ``None``: no early panes.
        accumulating: each pane holds everything so far (cumulative view) instead of only new reports.
    """

    size_s: float | None = None
    period_s: float | None = None
    allowed_lateness_s: float = 0.0
    early_firing_s: float | None = None
    accumulating: bool = False

    def to_dict(self) -> dict[str, float | bool | None]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class HashConfig:
    """The OLH hash of a task: the family (``ldp.hashing.HASH_FAMILIES``) and the bucket count ``g``."""

    family: str = DEFAULT_HASH_FAMILY
    g: int | None = None

    def to_dict(self) -> dict[str, str | int | None]:
        return {"family": self.family, "g": self.g}



@dataclasses.dataclass(frozen=True)
class Attribute:
    """One attribute of a multi-attribute task: a name and a domain ``[0, domain_size)``."""

    name: str
    domain_size: int



@dataclasses.dataclass(frozen=True, kw_only=True)
class Task:
    """Fields every kind of task has. Build tasks with :func:`parse_task` / :func:`load_task`.

    Frozen and free of numpy, so it pickles cheaply to Beam workers.
    """

    kind: ClassVar[str] = ""
    task_id: str
    mechanism: str
    epsilon: float
    description: str = ""
    schema_version: int = DEFAULT_SCHEMA_VERSION
    n_groups: int = 1
    postprocess: str = "base"
    hash: HashConfig = dataclasses.field(default_factory=HashConfig)
    params: Mapping[str, object] = dataclasses.field(default_factory=dict)
    window: WindowConfig = dataclasses.field(default_factory=WindowConfig)
    #: what the task's oracles resolved to when it was made (:func:`resolve_task`); ``parse_task`` checks
    #: that this release resolves them the same way (``None``: not recorded)
    resolved: Mapping[str, object] | None = None
    #: the ``anonymity`` section (the kinds that may be shuffled; ``None``: reports are not shuffled)
    anonymity: _anonymity.AnonymitySettings | None = None
    #: the section's central target (``None``: neither ``central_epsilon`` nor ``expected_reports``)
    central_target: CentralTarget | None = None

    @property
    def is_multi_attribute(self) -> bool:
        """True for range-query tasks."""
        return self.kind == "range"

    @property
    def is_memoized(self) -> bool:
        """True when reports repeat a memoized response window after window (linkable; never shuffled)."""
        return False

    @property
    def requires_client_ids(self) -> bool:
        """True when reports must carry a client id (the budget's ``client_ids``; frequency tasks only)."""
        return False

    @property
    def shuffled(self) -> bool:
        """True when the reports reach the aggregator only through the shuffler (``anonymity.shuffled``)."""
        return self.anonymity is not None and self.anonymity.shuffled

    @property
    def expected_reports(self) -> int | None:
        """The reports expected per shuffled window (``anonymity.expected_reports``; range tasks: default
        ``expected_users``), None when unknown or the task has no ``anonymity`` section."""
        if self.anonymity is None:
            return None
        given = None if self.central_target is None else self.central_target.expected_reports
        return self.default_expected_reports() if given is None else given

    def default_expected_reports(self) -> int | None:
        """The reports per window when the ``anonymity`` section does not say (range: ``expected_users``)."""
        return None

    @property
    def expected_batch_reports(self) -> int | None:
        """The reports expected per shuffled batch (one bucket of ``anonymity.time_precision_s``), the ``n``
        a central target is planned at: :attr:`expected_reports` spread over the window's buckets
        (:func:`ldp.anonymity.batch_reports`). None when :attr:`expected_reports` is."""
        n = self.expected_reports
        if n is None or self.anonymity is None:
            return None
        return _anonymity.batch_reports(n, self.window.size_s, self.anonymity.time_precision_s)

    def _common_dict(self) -> dict[str, object]:
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "description": self.description,
            "schema_version": self.schema_version,
            "n_groups": self.n_groups,
            "postprocess": self.postprocess,
            "hash": self.hash.to_dict(),
            "params": dict(self.params),
            "window": self.window.to_dict(),
            **({} if self.anonymity is None else {"anonymity": self._anonymity_dict()}),
            **({} if self.resolved is None else {"resolved": json.loads(json.dumps(self.resolved))}),
        }

    def _anonymity_dict(self) -> dict[str, object]:
        assert self.anonymity is not None
        target = {} if self.central_target is None else self.central_target.to_dict()
        return {**self.anonymity.to_json(), **target}

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict; ``parse_task(task.to_dict()) == task``."""
        return self._common_dict()

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    def make_oracle(self) -> Any:
        raise ValueError(f"task {self.task_id!r}: mechanism {self.mechanism!r} is not a frequency oracle")

    def grr_domain(self) -> int | None:
        """The domain ``k`` when the task's oracle is GRR on ``[k]`` (shuffled accounting uses GRR's own
        bound then); None for every other oracle."""
        return None

    def oracle_resolution(self) -> tuple[int, list[dict[str, object]]] | None:
        """What the task's frequency oracles resolve to: the schema version whose frozen ``auto``
        candidates apply and each oracle's spec (``ldp.rangequery.registry.oracle_spec``), group 0 first;
        None for kinds without frequency oracles (:func:`ldp.task.task_resolution`)."""
        return None



@dataclasses.dataclass(frozen=True, kw_only=True)
class AttributeTask(Task):
    """A task over a public product domain of named attributes (range and batch-query tasks)."""

    attributes: tuple[Attribute, ...]

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        return tuple(a.domain_size for a in self.attributes)

    def _attributes_dict(self) -> dict[str, object]:
        return {**self._common_dict(), "attributes": [dataclasses.asdict(a) for a in self.attributes]}


#: A parsed task: one of the kinds' subclasses of :class:`Task`.
ParsedTask = Task
#: The name older code uses for a parsed task.
CollectionTask = Task
