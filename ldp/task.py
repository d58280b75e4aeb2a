"""The collection task: the one configuration clients and the aggregator share.

A task is a small JSON object with an id. Clients encode with it; the aggregator refuses (dead-letters)
reports that carry another task id or values outside the task's domains. Changing any privacy-relevant
parameter (mechanism, epsilon, domains, hash family) means a new ``task_id``. The JSON Schema of the file
is ``schemas/task.schema.json``, generated from this module's field declarations (:func:`task_json_schema`;
``tests/test_task_schema_model.py`` checks both agree at every declared boundary).

Keys common to every kind of task (keys not listed are an error, so typos do not pass silently)::

    {
      "task_id": "fruit-2026-11",        # required: 1-128 chars of [A-Za-z0-9._-]
      "mechanism": "olh",                # required: names the kind of task (see below)
      "epsilon": 1.0,                    # required: a number in (0, 50]
      "kind": "frequency",               # optional: must agree with the mechanism ("frequency", "range")
      "description": "",                 # optional free text
      "schema_version": 2,               # optional, default 2: report schema version clients write
      "n_groups": 1,                     # frequency: users split into this many groups (default 1);
                                         #   range: optional, must equal the method's number of groups
      "postprocess": "base",             # optional, default "base": ldp.postprocess method name
      "hash": {"family": "gf2-affine",   # optional: OLH hash family (ldp.hashing.HASH_FAMILIES; default
               "g": null},               #   "gf2-affine", "linear-gf" for old tasks) and bucket count g
      "params": {},                      # optional: further mechanism parameters (e.g. {"k": 8} for ss)
      "window": {                        # optional, defaults shown; pipeline flags override
        "size_s": null,                  #   event-time window length; null = one global window
                                         #   (window times are finite whole milliseconds)
        "period_s": null,                #   sliding period; null = fixed (tumbling) windows
        "allowed_lateness_s": 0,         #   how long after a window closes late reports still count
        "early_firing_s": null,          #   processing-time period of early (speculative) panes
        "accumulating": false            #   panes report everything so far (true) or only new data
      },
      "resolved": {                      # optional (frequency, range), written by resolve_task: what the
        "auto_candidates": [...],        #   oracles resolved to when the task was made; every load checks
        "oracles": [{"mechanism": ...}], #   this release resolves the same (else a TaskError)
        "local_epsilon": {...}           #   with a central target: the epsilon chosen for it
      }
    }

Anonymous collection (frequency and range tasks; ``docs/shuffler.md``, ``docs/shuffle_accounting.md``): an
``"anonymity"`` section (``ldp.anonymity.AnonymitySettings``: ``shuffled``, ``delta``,
``time_precision_s``, ``min_reports``, ``short_bucket``) says the reports reach the aggregator only through
the shuffler. With ``"shuffled": true`` a task is refused when its reports would carry a sender's identity
or its windows would not survive rounding: a budget with ``client_ids`` (reports carry the client's
pseudonym), a memoized mechanism (reports linkable across windows; ``memo-olh`` and ``loloha`` send the
user's hash seed in every report), a window size or period that is not a multiple of
``time_precision_s``. Two more keys set an optional **central target**:

* ``"central_epsilon": 1.0``: the central epsilon (at the section's ``delta``) every shuffled batch must
  meet; ``"expected_reports": 1000000``: the reports expected per aggregation window (range tasks: default
  ``expected_users``), at least ``min_reports``. A user hides only among the reports of its own batch (one
  bucket of ``time_precision_s``), so the target is planned per batch, at
  ``expected_reports * time_precision_s / window.size_s`` reports (``Task.expected_batch_reports``,
  ``ldp.anonymity.batch_reports``; the global window, or a window of one bucket: ``expected_reports``),
  which must also reach ``min_reports``: a daily window of 1e6 reports with hourly buckets plans at 41,666.
* ``"epsilon": "auto"`` (only with a central target): the local epsilon is the largest ``eps0`` whose
  shuffled guarantee at the expected batch size meets the target (``ldp.shuffle.local_epsilon_for_central``;
  GRR's own bound when the oracle is GRR, else the bound for any eps0-LDP randomizer), rounded down to
  0.001. The parsed task carries that number, so clients and the aggregator use the same epsilon.
* ``"epsilon": <number>`` with a central target: it must meet the target at the batch size (any
  smaller epsilon does); otherwise the task is refused, naming the largest epsilon that does.
* :func:`resolve_task` writes the number into ``epsilon`` and records ``resolved.local_epsilon``
  (``epsilon``, ``central_epsilon``, ``delta``, ``expected_reports``, ``accounting``); a load refuses a
  task whose record differs from the task or whose epsilon this release's accountant no longer certifies.

``auto`` (and a range method's per-group ``auto`` oracles) chooses only among the frozen candidates of the
task's ``schema_version`` (``ldp.oracles.AUTO_CANDIDATES``): a mechanism added to the registry never
changes what an existing task means. :func:`resolve_task` returns the task with its resolution recorded.

Kinds of task (the mechanism names come from the mechanism registries, never from a copy here):

* ``frequency`` (:class:`FrequencyTask`): a mechanism of ``ldp.oracles.MECHANISMS`` or ``auto``, plus
  ``"domain_size": 1024`` (required, an integer in [2, 2^31]) and optional value labels, either inline
  ``"labels": ["apple", "pear", ...]`` or ``"labels_file": "fruit.txt"`` (not both): exactly
  ``domain_size`` unique, non-empty strings of at most :data:`MAX_LABEL_CHARS` characters without control
  characters or surrounding whitespace, for a domain of at most :data:`MAX_LABELS` values. The file path
  is relative to the task file (:func:`load_task`; ``base_dir`` of :func:`parse_task`); it holds one
  label per line (UTF-8; trailing empty lines ignored) or a JSON list of strings. The parsed task (and
  :meth:`FrequencyTask.to_dict`) carries the labels inline. Label ``i`` names value ``i``: estimates and
  dashboards show it, and ``csv:PATH:COLUMN`` datasets may hold labels instead of integers.
  The mechanism may also be one of the memoized mechanisms of repeated collection
  (``ldp.longitudinal.memo.MEMO_MECHANISMS``: ``memo-grr``, ``rappor``, ``memo-olh``, ``loloha``; their
  ``epsilon`` is ``epsilon_inf``, ``params`` may set ``epsilon_1``, ``g``, ``permanent``). Two optional
  keys for repeated collection (``docs/longitudinal_pipeline.md``):

  - ``"budget": {...}``: the per-user budget (``ldp.longitudinal.budget.parse_budget``'s block) plus
    ``"client_ids": true|false`` (default false: reports carry the client's per-task pseudonym and the
    aggregator counts them per client and period, dead-lettering the excess as ``over_budget``; needs
    ``reports_per_period`` and ``period_s``). ``epsilon_per_report`` may be left out: it is derived from
    the mechanism (its ``epsilon``, or ``epsilon_1`` of a memoized one) and, when given, must equal it;
    ``composition`` defaults to ``"memoized"`` for memoized mechanisms (else ``"basic"``). The
    accountant's consistency checks (``ldp.longitudinal.accounting.policy_problems``) run at parse time.
  - ``"hide_participation": true`` (default false): clients send a report every window, a dummy one for
    the extra value ``domain_size`` ("no event") when they have nothing to report; the oracle's domain is
    ``domain_size + 1`` and estimates carry that value last (see :meth:`FrequencyTask.absent_value`).
* ``range`` (:class:`RangeTask`): a method of ``ldp.rangequery.registry.METHODS`` plus
  ``"attributes": [{"name": "age", "domain_size": 64}, ...]`` (required, non-empty),
  ``"expected_users": 1000000`` (required), optional ``"granularity": {"g1": 16, "g2": 4}`` (HDG / TDG) and
  ``"options": {...}`` (method options; ``params`` is an alias).

* ``batch_queries`` (:class:`BatchTask`, **central DP**, a trusted aggregator sees raw records): a strategy of
  :data:`BATCH_MECHANISMS` for the Gaussian matrix mechanism (``ldp.matrix``); ``"kind": "batch_queries"``
  is required (``lsa`` is also a range method), plus ``"attributes"`` (the public domain, at most
  :data:`MAX_BATCH_CELLS` cells), ``"delta"`` (required), ``"calibration"`` and ``"max_contributions"``.
  Its window must release each record once (no sliding windows, early firings or accumulating panes).

* ``sparse`` (:class:`ldp.sparse.task.SparseTask`): k-sparse vector means, a mechanism of
  ``ldp.sparse.mechanisms.SPARSE_MECHANISMS`` plus ``"domain_size"`` (the item universe d) and
  ``"sparsity"`` (k), optional ``"privacy"``, ``"delta"``, ``"values"``, ``"expected_users"``
  (``docs/sparse_vectors.md``).

* ``numeric`` (:class:`ldp.aggregate.numeric.NumericTask`): the mean (and quantiles) of a bounded attribute,
  a mechanism of ``ldp.numeric.MECHANISMS`` or ``auto`` with ``"kind": "numeric"`` (required), plus
  ``"attributes": [{"name": "latency_ms", "low": 0, "high": 500}]`` (one or more; several: each user
  reports ``k`` of them, optional ``"k"``) and optional ``"quantiles": [0.5, 0.9, 0.99]``
  (``docs/numeric.md``).

A new kind is one entry of the registry :mod:`ldp.kinds` (``docs/architecture.md``): its :class:`TaskKind`
(keys, mechanism names, field declarations, section checker) goes into :data:`TASK_KINDS` with the rest of
the kind (aggregator, rows, simulator).

:func:`parse_task` reports every problem at once (:class:`TaskError` lists them), not just the first:
each section of the file has its own small checker that appends messages to one list.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import ldp.hashing as _hashing
import ldp.oracles as _oracles
import ldp.postprocess as _postprocess
from ldp import anonymity as _anonymity
from ldp.longitudinal import memo as _memo
from ldp.longitudinal.budget import BudgetPolicy, parse_budget
from ldp.rangequery import registry as _range_registry

__all__ = [
    "Task",
    "FrequencyTask",
    "RangeTask",
    "BatchTask",
    "ParsedTask",
    "CollectionTask",
    "HashConfig",
    "WindowConfig",
    "Attribute",
    "CentralTarget",
    "TaskKind",
    "TASK_KINDS",
    "FREQUENCY_TASK_KIND",
    "RANGE_TASK_KIND",
    "BATCH_TASK_KIND",
    "SPARSE_TASK_KIND",
    "TaskError",
    "load_task",
    "parse_task",
    "resolve_task",
    "task_resolution",
    "shuffle_accounting",
    "AUTO_EPSILON",
    "task_json_schema",
    "Field",
    "COMMON_FIELDS",
    "SEMANTIC_CHECKS",
    "ORACLE_MECHANISMS",
    "MULTI_ATTRIBUTE_MECHANISMS",
    "BATCH_MECHANISMS",
    "BATCH_CALIBRATIONS",
    "MAX_BATCH_CELLS",
    "POSTPROCESS_METHODS",
    "HASH_FAMILY_NAMES",
    "DEFAULT_HASH_FAMILY",
    "SUPPORTED_SCHEMA_VERSIONS",
    "DEFAULT_SCHEMA_VERSION",
    "SPARSE_KEYS",
    "MAX_LABELS",
    "MAX_LABEL_CHARS",
    "MAX_LABELS_FILE_BYTES",
    "read_labels_file",
    "MEMO_MECHANISMS",
    "ABSENT_LABEL",
    "budget_summary",
]

#: Memoized mechanisms of repeated collection (``ldp.longitudinal.memo.MEMO_MECHANISMS``).
MEMO_MECHANISMS: tuple[str, ...] = tuple(_memo.MEMO_MECHANISMS)
#: 1-D frequency-oracle mechanisms (``ldp.oracles.MECHANISMS``, then the memoized ones); ``auto`` picks the
#: lowest-variance fresh one.
ORACLE_MECHANISMS: tuple[str, ...] = (*_oracles.MECHANISMS, *MEMO_MECHANISMS, "auto")
#: Label of the dummy value of a task that hides participation (appended to the task's labels).
ABSENT_LABEL = "(no event)"
#: Multi-attribute (range-query) methods (``ldp.rangequery.registry.METHODS``).
MULTI_ATTRIBUTE_MECHANISMS: tuple[str, ...] = tuple(_range_registry.METHODS)
#: Strategies of the central-DP batch-query kind (``ldp.matrix.strategies.make_strategy`` names).
BATCH_MECHANISMS: tuple[str, ...] = ("identity", "h2", "haar", "lsa", "opt")
#: Noise calibrations of the batch-query kind (``ldp.matrix.mechanism.CALIBRATIONS``; tests keep them equal).
BATCH_CALIBRATIONS: tuple[str, ...] = ("analytic", "paper", "dwork_roth")
#: Largest public domain (cells) of a batch-query task: strategies are dense (p x n) matrices.
MAX_BATCH_CELLS = 4096
#: Strategy options (``params``) each batch strategy accepts.
_BATCH_PARAMS: dict[str, tuple[str, ...]] = {"lsa": ("k_max",), "opt": ("tol", "max_iter")}
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
_COMMON_SCHEMA_VERSIONS: tuple[int, ...] = (2,)

_TASK_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_COMMON_KEYS = (
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
_REQUIRED = ("task_id", "mechanism", "epsilon")
#: The ``epsilon`` of a task whose local epsilon is chosen for its central target (``anonymity``).
AUTO_EPSILON = "auto"


def _shuffle_allowed(kind: TaskKind) -> bool:
    """Whether tasks of ``kind`` may be collected through the shuffler (the ``anonymity`` section): its
    registry entry's ``shuffle_allowed`` (:mod:`ldp.kinds`)."""
    from ldp import kinds

    return kinds.shuffle_allowed(kind.name)


#: The central target's keys of the ``anonymity`` section (the rest are ``ldp.anonymity``'s).
_TARGET_KEYS = ("central_epsilon", "expected_reports")
#: Local epsilons chosen for a central target are rounded down to a multiple of this.
_EPSILON_STEP = 1e-3
_MAX_GROUPS = 1 << 31
_MAX_DOMAIN = 1 << 31
#: Largest domain that may carry value labels (the labels travel with the task to every worker and row).
MAX_LABELS = 1 << 16
#: Longest label (characters).
MAX_LABEL_CHARS = 256
#: Largest labels file read (bytes).
MAX_LABELS_FILE_BYTES = 8 << 20
#: Per-label problems listed before the rest are counted ("... and N more").
_MAX_LABEL_PROBLEMS = 10

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
class CentralTarget:
    """The central target of a task's ``anonymity`` section (both keys optional).

    Attributes:
        central_epsilon: the central epsilon, at ``anonymity.delta``, every shuffled batch must meet
            (None: no target; the local ``epsilon`` is then given as a number).
        expected_reports: the reports expected per aggregation window (range tasks: default
            ``expected_users``); the target is met at the batch size it implies
            (:attr:`Task.expected_batch_reports`); the guarantee achieved is reported from the ``n`` of
            each batch actually shuffled (``pipelines.window_privacy``).
    """

    central_epsilon: float | None = None
    expected_reports: int | None = None

    def to_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {}
        if self.central_epsilon is not None:
            out["central_epsilon"] = self.central_epsilon
        if self.expected_reports is not None:
            out["expected_reports"] = self.expected_reports
        return out


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
    #: the ``anonymity`` section (frequency and range tasks; ``None``: reports are not shuffled)
    anonymity: _anonymity.AnonymitySettings | None = None
    #: the section's central target (``None``: neither ``central_epsilon`` nor ``expected_reports``)
    central_target: CentralTarget | None = None

    @property
    def is_multi_attribute(self) -> bool:
        """True for range-query tasks."""
        return self.kind == RangeTask.kind

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
        if given is None and isinstance(self, RangeTask):
            return self.expected_users
        return given

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

    def make_oracle(self) -> _oracles.FrequencyOracle:
        raise ValueError(f"task {self.task_id!r}: mechanism {self.mechanism!r} is not a frequency oracle")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FrequencyTask(Task):
    """A 1-D frequency-estimation task: one value in ``[0, domain_size)`` per user."""

    kind: ClassVar[str] = "frequency"
    domain_size: int
    #: ``labels[i]`` names value ``i`` (``None``: values are shown as numbers); with ``hide_participation``
    #: the last one is :data:`ABSENT_LABEL`, the dummy value's.
    labels: tuple[str, ...] | None = None
    #: the per-user budget of repeated collection (``None``: none declared)
    budget: BudgetPolicy | None = None
    #: reports carry pseudonymous client ids and the aggregator counts them per budget period
    budget_client_ids: bool = False
    #: clients report every window, the dummy value :meth:`absent_value` when they have nothing to report
    hide_participation: bool = False

    @property
    def requires_client_ids(self) -> bool:
        return self.budget is not None and self.budget_client_ids

    @property
    def is_memoized(self) -> bool:
        """True for the memoized mechanisms (``ldp.longitudinal.memo``)."""
        return self.mechanism in MEMO_MECHANISMS

    @property
    def oracle_domain_size(self) -> int:
        """The oracle's domain: ``domain_size``, plus the dummy value when participation is hidden."""
        return self.domain_size + (1 if self.hide_participation else 0)

    def absent_value(self) -> int | None:
        """The dummy value clients report when they have nothing to report (``domain_size``), or None when
        the task does not hide participation."""
        return self.domain_size if self.hide_participation else None

    def label(self, value: int) -> str:
        """The name of ``value``: its label, else the number as text."""
        return self.labels[value] if self.labels is not None else str(value)

    def oracle_params(self) -> dict[str, object]:
        """Keyword arguments for ``ldp.oracles.make_oracle`` beyond name, epsilon and domain."""
        out = dict(self.params)
        if self.hash.g is not None:
            out["g"] = self.hash.g
        if self.mechanism == "olh":
            out["family"] = self.hash.family
        return out

    def make_oracle(self) -> _oracles.FrequencyOracle:
        """The task's frequency oracle (``ldp.oracles.make_oracle``, or ``ldp.longitudinal.memo`` for the
        memoized mechanisms) over :attr:`oracle_domain_size`. ``auto`` resolves deterministically among the
        frozen candidates of the task's ``schema_version`` (``ldp.oracles.AUTO_CANDIDATES``): clients and the
        aggregator call this same method, so they build the same oracle whatever their release."""
        d = self.oracle_domain_size
        params = self.oracle_params()
        if self.is_memoized:
            return _memo.make_memo_oracle(self.mechanism, self.epsilon, d, **params)
        if self.mechanism == "auto" and not params:
            oracle, table = _oracles.choose_oracle(self.epsilon, d, schema_version=self.schema_version)
            oracle.choice = table
            return oracle
        return _oracles.make_oracle(self.mechanism, self.epsilon, d, **params)

    def to_dict(self) -> dict[str, object]:
        out = {**self._common_dict(), "domain_size": self.domain_size}
        if self.labels is not None:
            out["labels"] = list(self.labels[: self.domain_size])
        if self.budget is not None:
            out["budget"] = {**self.budget.to_dict(), "client_ids": self.budget_client_ids}
        if self.hide_participation:
            out["hide_participation"] = True
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class RangeTask(Task):
    """A multi-dimensional range-query task (Yang et al., VLDB 2021): one record of ``attributes`` per user.

    ``n_groups`` is the method's number of user groups (computed when the task is parsed).
    """

    kind: ClassVar[str] = "range"
    attributes: tuple[Attribute, ...]
    expected_users: int
    granularity: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        return tuple(a.domain_size for a in self.attributes)

    @property
    def options(self) -> dict[str, object]:
        """The method options: ``params`` (alias ``options`` in the file) plus ``granularity``."""
        return {**self.params, **self.granularity}

    def make_mechanism(self) -> _range_registry.RangeMechanism:
        """The mechanism this task describes (``ldp.rangequery.registry.make_mechanism``)."""
        return _range_registry.make_mechanism(
            self.mechanism, self.epsilon, self.domain_sizes, self.expected_users, **self.options
        )

    def to_dict(self) -> dict[str, object]:
        out = self._common_dict()
        out["attributes"] = [dataclasses.asdict(a) for a in self.attributes]
        out["expected_users"] = self.expected_users
        if self.granularity:
            out["granularity"] = dict(self.granularity)
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchTask(Task):
    """A batch of linear (range) queries answered by the Gaussian matrix mechanism -- **central DP**.

    A trusted aggregator counts the users' raw records per cell of the public product domain
    ``attributes`` (one record per user, at most ``max_contributions``), then adds Gaussian noise once per
    window through the strategy ``mechanism`` with (``epsilon``, ``delta``) and the ``calibration``.
    These records are *not* LDP reports. ``params`` holds strategy options (lsa: ``k_max``; opt:
    ``tol``, ``max_iter``).
    """

    kind: ClassVar[str] = "batch_queries"
    attributes: tuple[Attribute, ...]
    delta: float
    calibration: str = "analytic"
    max_contributions: int = 1

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        return tuple(a.domain_size for a in self.attributes)

    @property
    def n_cells(self) -> int:
        return math.prod(self.domain_sizes)

    def to_dict(self) -> dict[str, object]:
        out = self._common_dict()
        out["attributes"] = [dataclasses.asdict(a) for a in self.attributes]
        out["delta"] = self.delta
        out["calibration"] = self.calibration
        out["max_contributions"] = self.max_contributions
        return out


#: A parsed task: one of the variants of :class:`Task`.
ParsedTask = FrequencyTask | RangeTask | BatchTask
#: The name older code uses for a parsed task.
CollectionTask = Task


# ------------------------------------------------------------------------------------------------------------
# small predicates
# ------------------------------------------------------------------------------------------------------------


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _whole_ms(x: float) -> bool:
    """True when ``x`` seconds is a whole number of milliseconds (event times are epoch milliseconds, so
    a window of 600.0005 s would put reports in the wrong windows)."""
    return abs(x * 1000 - round(x * 1000)) <= 1e-6


def _not_whole_ms(key: str, v: object) -> str:
    return f"window.{key} must be a finite whole number of milliseconds, got {v!r}"


def _as_object(raw: object, name: str, problems: Problems) -> JsonObject:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{name} must be an object, got {type(raw).__name__}")
        return {}
    return raw


# ------------------------------------------------------------------------------------------------------------
# section checkers: each appends its problems and returns what it could parse
# ------------------------------------------------------------------------------------------------------------


def _check_keys(obj: JsonObject, kind: TaskKind | None, problems: Problems) -> None:
    every = tuple(k for t in TASK_KINDS.values() for k in t.keys)
    known = _COMMON_KEYS + (kind.keys if kind else every)
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
    for k in _REQUIRED:
        if k not in obj:
            problems.append(f"missing required key {k!r}")


def _check_task_id(obj: JsonObject, problems: Problems) -> str:
    task_id = obj.get("task_id")
    if "task_id" in obj and not (isinstance(task_id, str) and _TASK_ID_RE.match(task_id)):
        problems.append(
            f"task_id must be 1-128 characters of letters, digits, '.', '_' or '-', got {task_id!r}"
        )
    return task_id if isinstance(task_id, str) else ""


def _check_mechanism(obj: JsonObject, problems: Problems) -> tuple[str | None, TaskKind | None]:
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


def _check_epsilon(obj: JsonObject, problems: Problems, allow_auto: bool = False) -> float:
    """The task's epsilon (1.0 when missing or invalid). ``allow_auto``: the kind accepts ``"auto"`` (chosen
    for the ``anonymity`` section's central target; 1.0 is returned here and replaced later)."""
    eps = obj.get("epsilon")
    if allow_auto and eps == AUTO_EPSILON:
        return 1.0
    if "epsilon" in obj and not (_is_num(eps) and 0 < eps <= 50):
        also = ' or "auto" (with anonymity.central_epsilon)' if allow_auto else ""
        problems.append(f"epsilon must be a number in (0, 50]{also}, got {eps!r}")
        return 1.0
    return float(eps) if _is_num(eps) else 1.0


def _check_description(obj: JsonObject, problems: Problems) -> str:
    desc = obj.get("description", "")
    if not isinstance(desc, str):
        problems.append(f"description must be a string, got {type(desc).__name__}")
        return ""
    return desc


def _check_schema_version(obj: JsonObject, problems: Problems, task_kind: TaskKind | None = None) -> int:
    """The task's report schema version: one of the kind's (its ``schema_version`` field's enum and default,
    else version 2)."""
    field = task_kind.fields.get("schema_version") if task_kind is not None else None
    allowed = tuple(field.enum) if field is not None and field.enum else _COMMON_SCHEMA_VERSIONS
    default = field.default if field is not None and field.default is not None else DEFAULT_SCHEMA_VERSION
    sv = obj.get("schema_version", default)
    if not _is_int(sv) or sv not in allowed:
        why = (field.description if field is not None and field.description
               else "version 1 reports used the old OLH hash family: make a new task")
        problems.append(f"schema_version must be one of {allowed}, got {sv!r} ({why})")
        return int(default)  # type: ignore[arg-type]
    return int(sv)


def _check_n_groups(obj: JsonObject, problems: Problems) -> int:
    ng = obj.get("n_groups", 1)
    if not (_is_int(ng) and 1 <= ng <= _MAX_GROUPS):
        problems.append(f"n_groups must be an integer in [1, 2^31], got {ng!r}")
        return 1
    return int(ng)


def _check_postprocess(obj: JsonObject, problems: Problems) -> str:
    pp = obj.get("postprocess", "base")
    if pp not in POSTPROCESS_METHODS:
        key = pp.strip().lower().replace("_", "-") if isinstance(pp, str) else None
        hint = f" (spelled {key!r} in a task file)" if key in POSTPROCESS_METHODS else ""
        problems.append(f"postprocess must be one of {', '.join(POSTPROCESS_METHODS)}, got {pp!r}{hint}")
        return "base"
    return str(pp)


def _check_hash(obj: JsonObject, mechanism: str | None, problems: Problems) -> HashConfig:
    raw = _as_object(obj.get("hash"), "hash", problems)
    for k in raw:
        if k not in ("g", "family"):
            problems.append(f"hash: unknown key {k!r} (known: family, g)")
    family = raw.get("family")
    family = DEFAULT_HASH_FAMILY if family is None else family
    if family not in HASH_FAMILY_NAMES:
        problems.append(f"hash.family must be one of {', '.join(HASH_FAMILY_NAMES)}, got {family!r}")
        family = DEFAULT_HASH_FAMILY
    g = raw.get("g")
    if g is not None and not (_is_int(g) and g >= 2):
        problems.append(f"hash.g must be an integer >= 2 or null, got {g!r}")
        g = None
    if g is not None and mechanism not in (None, "olh"):
        problems.append(f"hash.g applies to mechanism 'olh' only, not {mechanism!r}")
    if g is not None:
        msg = _hashing.HASH_FAMILIES[str(family)].check(int(g))
        if msg:
            problems.append(f"hash.g: {msg}")
    return HashConfig(family=str(family), g=None if g is None else int(g))


def _check_params(obj: JsonObject, problems: Problems) -> dict[str, object]:
    return dict(_as_object(obj.get("params"), "params", problems))


def _check_window(raw: object, problems: Problems) -> WindowConfig:
    raw = _as_object(raw, "window", problems)
    known = [f.name for f in dataclasses.fields(WindowConfig)]
    for k in raw:
        if k not in known:
            problems.append(f"window: unknown key {k!r} (known: {', '.join(sorted(known))})")
    vals: dict[str, float | None] = {}
    for k in ("size_s", "period_s", "early_firing_s"):
        v = raw.get(k)
        if v is not None and not (_is_num(v) and v > 0):
            problems.append(f"window.{k} must be a positive number or null, got {v!r}")
            v = None
        elif v is not None and not _whole_ms(v):
            problems.append(_not_whole_ms(k, v))
            v = None
        vals[k] = None if v is None else float(v)
    lat = raw.get("allowed_lateness_s", 0)
    if not (_is_num(lat) and lat >= 0):
        problems.append(f"window.allowed_lateness_s must be a number >= 0, got {lat!r}")
        lat = 0
    elif not _whole_ms(lat):
        problems.append(_not_whole_ms("allowed_lateness_s", lat))
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


def _check_attributes(raw: object, problems: Problems) -> tuple[Attribute, ...]:
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
        if not (_is_int(d) and 2 <= d <= _MAX_DOMAIN):
            problems.append(f"attributes[{i}].domain_size must be an integer in [2, 2^31], got {d!r}")
            ok = False
        if ok:
            seen.add(name)
            out.append(Attribute(name, int(d)))
    return tuple(out)


def _require(obj: JsonObject, keys: Sequence[str], mechanism: str, problems: Problems) -> bool:
    missing = [k for k in keys if k not in obj]
    for k in missing:
        problems.append(f"missing {k!r} (required by mechanism {mechanism!r})")
    return not missing


# ------------------------------------------------------------------------------------------------------------
# kinds
# ------------------------------------------------------------------------------------------------------------


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _check_labels(
    raw: object,
    d: object,
    problems: Problems,
    where: str = "labels",
    item: Callable[[int], str] | None = None,
) -> tuple[str, ...] | None:
    """Value labels: a list of ``domain_size`` unique, non-empty strings (see the module docstring).

    ``where`` names the source in messages (``labels`` or the labels file), ``item(i)`` one entry of it.
    Per-label problems beyond :data:`_MAX_LABEL_PROBLEMS` are counted, not listed.
    """
    item = item or (lambda i: f"{where}[{i}]")
    if not isinstance(raw, list):
        problems.append(f"{where} must be a list of strings, got {type(raw).__name__}")
        return None
    if len(raw) > MAX_LABELS:
        problems.append(f"{where} has {len(raw)} entries; a labelled domain has at most {MAX_LABELS} values")
        return None
    ok = True
    if _is_int(d) and d > MAX_LABELS:
        problems.append(f"labels need domain_size <= {MAX_LABELS}, got {d}")
        ok = False
    elif _is_int(d) and len(raw) != d:
        problems.append(f"{where} has {len(raw)} entries but domain_size is {d} (one label per value)")
        ok = False
    found: Problems = []
    first: dict[str, int] = {}
    for i, lab in enumerate(raw):
        if not isinstance(lab, str):
            found.append(f"{item(i)} must be a string, got {type(lab).__name__} {lab!r}")
        elif not lab.strip():
            found.append(f"{item(i)} is empty")
        elif len(lab) > MAX_LABEL_CHARS:
            found.append(f"{item(i)} has {len(lab)} characters (at most {MAX_LABEL_CHARS})")
        elif _CONTROL_RE.search(lab):
            found.append(f"{item(i)} {lab!r} holds a control character")
        elif lab != lab.strip():
            found.append(f"{item(i)} {lab!r} has leading or trailing whitespace")
        elif lab in first:
            found.append(f"{item(i)} {lab!r} repeats {item(first[lab])} (labels must be unique)")
        else:
            first[lab] = i
    problems.extend(found[:_MAX_LABEL_PROBLEMS])
    if len(found) > _MAX_LABEL_PROBLEMS:
        problems.append(f"{where}: ... and {len(found) - _MAX_LABEL_PROBLEMS} more label problem(s)")
    return tuple(raw) if ok and not found else None


def _labels_from_file(raw: object, d: object, base_dir: Path, problems: Problems) -> tuple[str, ...] | None:
    """The labels of a ``labels_file``: one per line (UTF-8, trailing empty lines ignored) or a JSON list."""
    if not isinstance(raw, str) or not raw.strip():
        problems.append(f"labels_file must be a non-empty path string, got {raw!r}")
        return None
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    where = f"labels_file {raw!r}"
    try:
        size = path.stat().st_size
        if size > MAX_LABELS_FILE_BYTES:
            problems.append(f"{where} is {size} bytes; at most {MAX_LABELS_FILE_BYTES} are read")
            return None
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        problems.append(f"{where}: cannot read {str(path)!r}: {exc.strerror or exc}")
        return None
    except UnicodeDecodeError as exc:
        problems.append(f"{where} is not UTF-8 text: {exc.reason} at byte {exc.start}")
        return None
    text = text.removeprefix("\ufeff")
    if text.lstrip().startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(
                f"{where}: not a valid JSON list: {exc.msg} at line {exc.lineno} column {exc.colno}"
            )
            return None
        return _check_labels(parsed, d, problems, where)
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return _check_labels(lines, d, problems, where, lambda i: f"{where} line {i + 1}")


def _frequency_task(
    obj: JsonObject, common: dict[str, object], problems: Problems, base_dir: Path = Path(".")
) -> FrequencyTask | None:
    mech = str(common["mechanism"])
    d = obj.get("domain_size")
    _require(obj, ("domain_size",), mech, problems)
    if "domain_size" in obj and not (_is_int(d) and 2 <= d <= _MAX_DOMAIN):
        problems.append(f"domain_size must be an integer in [2, 2^31], got {d!r}")
    common["n_groups"] = _check_n_groups(obj, problems)
    labels: tuple[str, ...] | None = None
    if "labels" in obj and "labels_file" in obj:
        problems.append("give labels or labels_file, not both")
    elif "labels_file" in obj:
        labels = _labels_from_file(obj["labels_file"], d, base_dir, problems)
    elif obj.get("labels") is not None:
        labels = _check_labels(obj["labels"], d, problems)
    hide = obj.get("hide_participation", False)
    if not isinstance(hide, bool):
        problems.append(f"hide_participation must be true or false, got {hide!r}")
        hide = False
    if hide and _is_int(d) and d >= _MAX_DOMAIN:
        problems.append(f"hide_participation needs domain_size < 2^31 (one more value), got {d}")
    if problems:
        return None
    if hide and labels is not None:
        if ABSENT_LABEL in labels:
            problems.append(f"labels: {ABSENT_LABEL!r} names the dummy value of hide_participation")
            return None
        labels = (*labels, ABSENT_LABEL)
    task = FrequencyTask(domain_size=int(d), labels=labels, hide_participation=hide, **common)
    try:  # the oracle is the final judge of mechanism parameters (e.g. g not a prime power)
        oracle = task.make_oracle()
    except (ValueError, ArithmeticError) as exc:  # ArithmeticError: a formula at an extreme epsilon
        where = "ldp.longitudinal.memo" if task.is_memoized else "ldp.oracles"
        problems.append(f"mechanism parameters rejected by {where}: {exc}")
        return None
    if obj.get("budget") is not None:
        policy, client_ids = _check_budget(obj["budget"], oracle, problems)
        if policy is None:
            return None
        task = dataclasses.replace(task, budget=policy, budget_client_ids=client_ids)
    return task


def _check_budget(
    raw: object, oracle: _oracles.FrequencyOracle, problems: Problems
) -> tuple[BudgetPolicy | None, bool]:
    """The ``budget`` block (``ldp.longitudinal.budget.parse_budget`` plus ``client_ids``; see the module
    docstring): every problem listed, the policy checked against the task's oracle."""
    if not isinstance(raw, Mapping):
        problems.append(f"budget must be an object, got {type(raw).__name__}")
        return None, False
    block = dict(raw)
    ids = block.pop("client_ids", False)
    if not isinstance(ids, bool):
        problems.append(f"budget.client_ids must be true or false, got {ids!r}")
        ids = False
    memoized = isinstance(oracle, _memo.MemoizedOracle)
    per_report = float(oracle.epsilon_1 if memoized else oracle.epsilon)
    block.setdefault("epsilon_per_report", per_report)
    block.setdefault("composition", "memoized" if memoized else "basic")
    n = len(problems)
    try:
        policy = parse_budget(block)
    except ValueError as exc:
        text = str(exc).removeprefix("budget: ")
        problems.extend(f"budget: {p}" for p in text.split("; "))
        return None, False
    from ldp.longitudinal.accounting import policy_problems  # dp-accounting: loaded for budgets only

    problems.extend(policy_problems(policy, oracle))
    if ids:
        if policy.period_s is None:
            problems.append(
                "budget.client_ids needs reports_per_period and period_s: the aggregator counts reports per "
                "client and period (a lifetime cap is enforced by the clients only)"
            )
        elif not _whole_ms(policy.period_s):
            problems.append(f"budget.period_s must be a whole number of milliseconds, got {policy.period_s}")
    return (policy if len(problems) == n else None), ids


def budget_summary(task: Task, windows: int | None = None) -> dict[str, object] | None:
    """The privacy figures of a task with a budget, for the job's summary, the store and the dashboard
    (None without a budget): ``policy`` (with ``client_ids``), the mechanism's ``guarantees`` (``epsilon``;
    ``epsilon_1`` / ``epsilon_inf`` of a memoized mechanism), and the accountant's basic next to tight
    composition (``ldp.longitudinal.accounting.budget_summary``) after ``per_period`` reports (one full
    budget period: ``reports_per_period`` windows), after ``windows`` reports when given, and at the
    lifetime cap (``lifetime``, when the policy bounds the number of reports)."""
    policy = getattr(task, "budget", None)
    if policy is None:
        return None
    own = getattr(task, "budget_figures", None)  # a kind with its own accounting (numeric: the memo counter)
    if callable(own):
        return own(windows)
    from ldp.longitudinal.accounting import budget_summary as _summary

    oracle = task.make_oracle()
    out: dict[str, object] = {
        "policy": {**policy.to_dict(), "client_ids": bool(getattr(task, "budget_client_ids", False))},
        "enforced_by": "clients and aggregator (per client id and period)"
        if task.requires_client_ids
        else "clients",
    }
    first = None
    for name, k in (
        ("per_period", policy.reports_per_period),
        ("after_windows", windows),
    ):
        if k is not None:
            fig = _summary(policy, oracle, int(k))
            out[name] = fig
            first = first or fig
    life = _summary(policy, oracle, 1)
    allowed = life.get("reports_allowed", {}).get("lifetime")
    if allowed is not None and 0 < int(allowed) <= 1_000_000:
        out["lifetime"] = _summary(policy, oracle, int(allowed))
    out["guarantees"] = (first or life).get("guarantees")
    return out


# ------------------------------------------------------------------------------------------------------------
# anonymous collection: the anonymity section and its central target
# ------------------------------------------------------------------------------------------------------------


def _check_anonymity(
    raw: object, problems: Problems
) -> tuple[_anonymity.AnonymitySettings | None, CentralTarget | None]:
    """The ``anonymity`` section: ``ldp.anonymity``'s keys (:func:`ldp.anonymity.check_anonymity`) and the
    central target's (``central_epsilon``, ``expected_reports``). ``(None, None)`` without a section or
    with problems."""
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        problems.append(f"anonymity must be an object, got {type(raw).__name__}")
        return None, None
    n = len(problems)
    known = tuple(f.name for f in dataclasses.fields(_anonymity.AnonymitySettings))
    for k in raw:
        if k not in known and k not in _TARGET_KEYS:
            problems.append(f"anonymity: unknown key {k!r} (known: {', '.join((*known, *_TARGET_KEYS))})")
    settings, _ = _anonymity.check_anonymity({k: v for k, v in raw.items() if k in known}, problems)
    eps = raw.get("central_epsilon")
    if "central_epsilon" in raw and not (_is_num(eps) and 0 < eps <= 50):
        problems.append(f"anonymity.central_epsilon must be a number in (0, 50], got {eps!r}")
    reports = raw.get("expected_reports")
    if "expected_reports" in raw and not (_is_int(reports) and reports >= 2):
        problems.append(f"anonymity.expected_reports must be an integer >= 2, got {reports!r}")
    if len(problems) > n or settings is None:
        return None, None
    if "central_epsilon" not in raw and "expected_reports" not in raw:
        return settings, None
    return settings, CentralTarget(
        central_epsilon=None if eps is None else float(eps),
        expected_reports=None if reports is None else int(reports),
    )


def _target_reports(
    obj: JsonObject,
    kind: str,
    settings: _anonymity.AnonymitySettings,
    target: CentralTarget | None,
    problems: Problems,
) -> int | None:
    """The reports expected per shuffled window (``expected_reports``; range: default ``expected_users``),
    checked against the section: at least ``min_reports``, and given when there is a central target."""
    n = None if target is None else target.expected_reports
    where = "anonymity.expected_reports"
    if n is None and kind == RangeTask.kind and _is_int(obj.get("expected_users")):
        n, where = int(obj["expected_users"]), "expected_users"  # type: ignore[call-overload]
    has_target = target is not None and target.central_epsilon is not None
    if has_target and not settings.shuffled:
        problems.append(
            "anonymity.central_epsilon applies to shuffled tasks only (anonymity.shuffled is false)"
        )
    if has_target and n is None:
        problems.append(
            "anonymity.central_epsilon needs anonymity.expected_reports: the reports shuffled together per "
            "window, at which the local epsilon meets the target"
        )
    if n is not None and n < settings.min_reports and (has_target or where != "expected_users"):
        problems.append(
            f"{where} ({n}) is below anonymity.min_reports ({settings.min_reports}): the shuffler would "
            "withhold every batch"
        )
    return n


def _round_down_epsilon(eps: float, floor: float) -> float:
    """``eps`` rounded down to a multiple of :data:`_EPSILON_STEP`, never below ``floor``."""
    down = math.floor(eps / _EPSILON_STEP + 1e-9) * _EPSILON_STEP
    down = float(f"{down:.6f}")  # the multiple itself, without binary noise
    return down if floor <= down <= eps else eps


def shuffle_accounting(task: Task) -> tuple[str, int | None]:
    """How the shuffled reports of ``task`` are accounted (``ldp.shuffle.accountant``'s ``mechanism`` and
    ``domain_size``): ``("grr", k)`` when the task's oracle is GRR on ``[k]`` (its blanket bound, or the
    general one when tighter), else ``("general", None)``: the bound for any eps0-LDP randomizer (OLH, the
    unary and Hadamard oracles, a range method's per-group oracles)."""
    if isinstance(task, FrequencyTask) and not task.is_memoized:
        try:
            if task.make_oracle().name == "grr":
                return "grr", task.oracle_domain_size
        except (ValueError, ArithmeticError):
            pass
    return "general", None


def _meets_target(eps0: float, target: float, delta: float, n: int, accounting: str, k: int | None) -> bool:
    """Whether ``n`` shuffled ``eps0``-LDP reports meet ``(target, delta)``, by the accountant's public
    functions: the tests of its inverse (``ldp.shuffle.local_epsilon_for_central``: a dominating pair's
    ``delta(target)`` within ``delta``, or the closed form's epsilon within the target), then the central
    epsilon it reports (which also covers figures without a curve, e.g. exact binary randomized response)."""
    from ldp.shuffle import central_epsilon, central_epsilon_fmt_closed_form, delta_curve

    if eps0 <= target:
        return True
    if central_epsilon_fmt_closed_form(eps0, n, delta) <= target:
        return True
    if float(delta_curve([target], eps0, n)[0]) <= delta:
        return True
    if accounting == "grr" and float(delta_curve([target], eps0, n, "grr", k)[0]) <= delta:
        return True
    return central_epsilon(eps0, n, delta, accounting, k) <= target


def _largest_local_epsilon(target: float, delta: float, n: int, accounting: str, k: int | None) -> float:
    """The largest local epsilon meeting ``(target, delta)`` at ``n``, rounded down to 0.001."""
    from ldp.shuffle import local_epsilon_for_central

    return _round_down_epsilon(local_epsilon_for_central(target, delta, n, accounting, k), target)


def _epsilon_for_target(
    obj: JsonObject,
    common: dict[str, object],
    kind: str,
    settings: _anonymity.AnonymitySettings,
    target: float,
    n: int,
) -> float:
    """``epsilon: "auto"``: the largest local epsilon whose shuffled guarantee at ``n`` meets the target.
    A GRR task uses GRR's bound; an ``auto`` oracle that resolves to GRR at GRR's figure uses it too (the
    oracle is GRR there, so the bound applies); every other task uses the general bound."""
    general = _largest_local_epsilon(target, settings.delta, n, "general", None)
    d = obj.get("domain_size")
    mech = common["mechanism"]
    if kind != FrequencyTask.kind or mech not in ("grr", "auto") or not (_is_int(d) and 2 <= d < _MAX_DOMAIN):
        return general
    hide = obj.get("hide_participation") is True
    k = int(d) + (1 if hide else 0)  # type: ignore[call-overload]
    grr = _largest_local_epsilon(target, settings.delta, n, "grr", k)
    if mech == "grr":
        return grr
    probe = FrequencyTask(domain_size=int(d), hide_participation=hide, **{**common, "epsilon": grr})  # type: ignore[arg-type]
    return grr if shuffle_accounting(probe)[0] == "grr" else general


def _batch_target_reports(
    n: int | None,
    window: WindowConfig,
    settings: _anonymity.AnonymitySettings,
    target: CentralTarget | None,
    problems: Problems,
) -> int | None:
    """The reports expected per shuffled batch (:func:`ldp.anonymity.batch_reports` of the window's
    ``n``): a user hides only among its own batch, so a central target is planned and checked there; with
    a target, at least ``min_reports`` (else the shuffler would withhold the batches it is planned for)."""
    if n is None or not isinstance(window, WindowConfig):
        return n
    per_batch = _anonymity.batch_reports(n, window.size_s, settings.time_precision_s)
    has_target = target is not None and target.central_epsilon is not None
    if has_target and per_batch != n and per_batch < settings.min_reports:
        problems.append(
            f"anonymity.expected_reports ({n} per {window.size_s:g} s window) gives {per_batch} reports per "
            f"{settings.time_precision_s} s batch, below anonymity.min_reports ({settings.min_reports}): the "
            "shuffler would withhold the batches the target is planned for"
        )
    return per_batch


def _check_shuffled_task(task: Task, n: int | None, problems: Problems) -> None:
    """What a shuffled task must not do (its reports would identify a sender, or rounding would move them
    between windows), and its epsilon against the central target."""
    settings = task.anonymity
    if settings is None or not settings.shuffled:
        return
    problems.extend(_anonymity.window_problems(settings, task.window.size_s, task.window.period_s))
    if task.requires_client_ids:
        problems.append(
            "anonymity: budget.client_ids makes every report carry the client's pseudonymous id, which "
            "identifies its sender and which the shuffler removes: a shuffled task cannot have a "
            "server-enforced per-client budget (set budget.client_ids false: the clients enforce it)"
        )
    if isinstance(task, FrequencyTask) and task.is_memoized:
        problems.append(
            f"anonymity: mechanism {task.mechanism!r} is memoized: its reports are linkable across windows "
            "(memo-olh and loloha send the user's hash seed in every report, the others repeat the memoized "
            "response), so shuffling hides no sender and no amplification bound covers them: use a fresh "
            "mechanism"
        )
    target = None if task.central_target is None else task.central_target.central_epsilon
    if target is None or n is None or problems:
        return
    accounting, k = shuffle_accounting(task)
    if not _meets_target(task.epsilon, target, settings.delta, n, accounting, k):
        best = _largest_local_epsilon(target, settings.delta, n, accounting, k)
        problems.append(
            f"epsilon {task.epsilon:g} does not meet anonymity.central_epsilon {target:g} (delta "
            f"{settings.delta:g}) at {n} reports per shuffled batch ({accounting} bound): the largest local "
            f'epsilon that does is {best:g} (or write "epsilon": "auto")'
        )


def _range_schema_version(obj: JsonObject, common: dict[str, object], problems: Problems) -> None:
    """A range task's report schema version is its method's (``ldp.rangequery.registry.schema_version``:
    msw 3, the integer grid wire; the others 2); absent, it defaults to the method's."""
    mech = str(common["mechanism"])
    if mech not in _range_registry.METHODS:
        return  # not a range method: refused by the mechanism check
    want = _range_registry.schema_version(mech)
    if "schema_version" not in obj:
        common["schema_version"] = want
        return
    sv = obj["schema_version"]
    if sv == want or not _is_int(sv) or sv not in _RANGE_SCHEMA_VERSIONS:
        return  # equal, or already refused by the field's check
    if want == 3:
        problems.append(
            f"schema_version {sv} is retired for {mech} (float_reals_retired: version 2 sent floating-point "
            "Square Wave reals that leak the input; version 3 sends integer grid messages): make a new task "
            "with schema_version 3"
        )
    else:
        problems.append(f"schema_version must be {want} for {mech} (version 3 is msw's integer grid wire)")


def _range_task(obj: JsonObject, common: dict[str, object], problems: Problems) -> RangeTask | None:
    mech = str(common["mechanism"])
    _range_schema_version(obj, common, problems)
    _require(obj, ("attributes", "expected_users"), mech, problems)
    attributes = _check_attributes(obj["attributes"], problems) if "attributes" in obj else ()
    n = obj.get("expected_users")
    if "expected_users" in obj and not (_is_int(n) and n >= 1):
        problems.append(f"expected_users must be a positive integer, got {n!r}")
    options = _as_object(obj.get("options"), "options", problems)
    common["params"] = {**dict(common["params"]), **options}  # type: ignore[arg-type]
    gran = _as_object(obj.get("granularity"), "granularity", problems)
    if gran and mech not in ("hdg", "tdg"):
        problems.append(f"granularity applies to hdg/tdg only, not {mech}")
    if not set(gran) <= {"g1", "g2"}:
        problems.append(f"granularity must be an object with g1 and/or g2, got keys {sorted(gran)}")
    if problems:
        return None
    probe = RangeTask(
        attributes=attributes, expected_users=int(n), granularity=dict(gran), n_groups=1, **common
    )
    try:  # the method is the final judge of its options (e.g. a granularity that is not a power of two)
        n_groups = probe.make_mechanism().n_groups
    except (ValueError, ArithmeticError) as exc:
        problems.append(f"mechanism options rejected by ldp.rangequery ({mech}): {exc}")
        return None
    if "n_groups" in obj and not (_is_int(obj["n_groups"]) and obj["n_groups"] == n_groups):
        problems.append(f"n_groups {obj['n_groups']!r} does not match {mech}'s {n_groups} groups")
        return None
    return dataclasses.replace(probe, n_groups=n_groups)


def _batch_task(obj: JsonObject, common: dict[str, object], problems: Problems) -> BatchTask | None:
    mech = str(common["mechanism"])
    if obj.get("kind") != BatchTask.kind:
        problems.append('batch-query tasks must say "kind": "batch_queries" (central DP, raw records)')
    _require(obj, ("attributes", "delta"), mech, problems)
    attributes = _check_attributes(obj["attributes"], problems) if "attributes" in obj else ()
    cells = math.prod(a.domain_size for a in attributes) if attributes else 0
    if cells > MAX_BATCH_CELLS:
        problems.append(f"the domain has {cells} cells; batch-query tasks allow at most {MAX_BATCH_CELLS}")
    delta = obj.get("delta")
    if "delta" in obj and not (_is_num(delta) and 0 < delta < 1):
        problems.append(f"delta must be a number in (0, 1), got {delta!r}")
    cal = obj.get("calibration", "analytic")
    if cal not in BATCH_CALIBRATIONS:
        problems.append(f"calibration must be one of {', '.join(BATCH_CALIBRATIONS)}, got {cal!r}")
    elif cal == "dwork_roth" and float(common["epsilon"]) >= 1:  # type: ignore[arg-type]
        problems.append("calibration 'dwork_roth' is only valid for epsilon < 1 (use 'analytic')")
    k = obj.get("max_contributions", 1)
    if not (_is_int(k) and 1 <= k <= 1_000_000):
        problems.append(f"max_contributions must be an integer in [1, 10^6], got {k!r}")
    if "n_groups" in obj and not (_is_int(obj["n_groups"]) and obj["n_groups"] == 1):
        problems.append(f"batch-query tasks have one group, got n_groups {obj['n_groups']!r}")
    allowed = _BATCH_PARAMS.get(mech, ())
    for key in common["params"]:  # type: ignore[union-attr]
        if key not in allowed:
            problems.append(
                f"params: unknown key {key!r} for strategy {mech!r} (known: {', '.join(allowed) or 'none'})"
            )
    window = common["window"]
    assert isinstance(window, WindowConfig)
    if window.period_s is not None or window.early_firing_s is not None or window.accumulating:
        problems.append(
            "batch-query windows must release each record once: no window.period_s, early_firing_s "
            "or accumulating (every extra release of the same records spends privacy again)"
        )
    if problems:
        return None
    return BatchTask(
        attributes=attributes,
        delta=float(delta),  # type: ignore[arg-type]
        calibration=str(cal),
        max_contributions=int(k),  # type: ignore[arg-type]
        n_groups=1,
        **{**common, "params": dict(common["params"])},  # type: ignore[arg-type]
    )


#: The sparse-vector kind's own keys (``ldp.sparse.task``: the kind's type and checker live there).
SPARSE_KEYS: tuple[str, ...] = ("domain_size", "sparsity", "privacy", "delta", "values", "expected_users")


def _sparse_mechanisms() -> tuple[str, ...]:
    from ldp.sparse.mechanisms import SPARSE_MECHANISMS  # imported on first use: ldp.sparse imports us

    return tuple(SPARSE_MECHANISMS)


def _sparse_task(obj: JsonObject, common: dict[str, object], problems: Problems) -> Task | None:
    from ldp.sparse.task import build_sparse_task

    return build_sparse_task(obj, common, problems)


# ------------------------------------------------------------------------------------------------------------
# the declared fields: the JSON Schema (schemas/task.schema.json) is generated from them
# ------------------------------------------------------------------------------------------------------------


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


def _f(*types: str, **kw: object) -> Field:
    return Field(tuple(types), **kw)  # type: ignore[arg-type]


_NULLABLE_POSITIVE = _f("number", "null", exclusive_minimum=0)
_WINDOW_FIELDS: dict[str, Field] = {
    "size_s": _NULLABLE_POSITIVE,
    "period_s": _NULLABLE_POSITIVE,
    "allowed_lateness_s": _f("number", minimum=0),
    "early_firing_s": _NULLABLE_POSITIVE,
    "accumulating": _f("boolean"),
}
_ATTRIBUTES = _f(
    "array",
    min_items=1,
    items=_f(
        "object",
        properties={
            "name": _f("string", min_length=1),
            "domain_size": _f("integer", minimum=2, maximum=_MAX_DOMAIN),
        },
        required=("name", "domain_size"),
    ),
    description="the public attributes, each with a domain [0, domain_size); names unique",
)

#: The keys every kind of task has (a kind's :attr:`TaskKind.fields` may narrow them).
COMMON_FIELDS: dict[str, Field] = {
    "task_id": _f(
        "string", pattern=_TASK_ID_RE.pattern, description="1-128 letters, digits, '.', '_' or '-'"
    ),
    "mechanism": _f("string", description="a mechanism of the task's kind (lower case)"),
    "epsilon": _f("number", exclusive_minimum=0, maximum=50),
    "kind": _f("string", description="the kind of task; default: the first kind that has the mechanism"),
    "description": _f("string"),
    "schema_version": _f("integer", enum=_COMMON_SCHEMA_VERSIONS, default=DEFAULT_SCHEMA_VERSION),
    "n_groups": _f("integer", minimum=1, maximum=_MAX_GROUPS),
    "postprocess": _f("string", enum=POSTPROCESS_METHODS, default="base"),
    "hash": _f(
        "object",
        "null",
        properties={
            "family": _f("string", "null", enum=(*HASH_FAMILY_NAMES, None), default=DEFAULT_HASH_FAMILY),
            "g": _f("integer", "null", minimum=2),
        },
        description="the OLH hash family and bucket count",
    ),
    "params": _f("object", "null", description="further mechanism parameters"),
    "window": _f("object", "null", properties=_WINDOW_FIELDS, description="event-time window defaults"),
    "resolved": _f(
        "object",
        "null",
        properties={
            "auto_candidates": _f("array", items=_f("string")),
            "oracles": _f("array", items=_f("object")),
            "local_epsilon": _f(
                "object",
                properties={
                    "epsilon": _f("number"),
                    "central_epsilon": _f("number"),
                    "delta": _f("number"),
                    "expected_reports": _f("integer"),
                    "accounting": _f("string", enum=("general", "grr")),
                },
                required=("epsilon", "central_epsilon", "delta", "expected_reports", "accounting"),
            ),
        },
        required=("auto_candidates", "oracles"),
        description="written by ldp.task.resolve_task: what the oracles resolved to; checked on every load",
    ),
}

#: the ``hash`` of kinds without OLH: a family may be named (it is unused), ``g`` may not
_HASH_WITHOUT_G = dataclasses.replace(
    COMMON_FIELDS["hash"],
    properties={**(COMMON_FIELDS["hash"].properties or {}), "g": _f("null")},
    description="no OLH here: hash.g must be null",
)
_NO_RESOLUTION = _f("null", description="nothing resolves in this kind")
#: the epsilon of the kinds that may be shuffled: a number, or "auto" for the anonymity section's target
_EPSILON_OR_AUTO = Field(
    (),
    any_of=(COMMON_FIELDS["epsilon"], _f("string", enum=(AUTO_EPSILON,))),
    description='the local epsilon; "auto": the largest meeting anonymity.central_epsilon',
)
_ANONYMITY = _f(
    "object",
    "null",
    properties={
        "shuffled": _f("boolean", default=True),
        "delta": _f("number", exclusive_minimum=0, maximum=_anonymity.MAX_DELTA, default=1e-9),
        "time_precision_s": _f(
            "integer",
            minimum=1,
            maximum=_anonymity.MAX_TIME_PRECISION_S,
            default=3600,
            description="divides a day or is a whole number of days",
        ),
        "min_reports": _f("integer", minimum=2, default=1000),
        "short_bucket": _f("string", enum=_anonymity.SHORT_BUCKET_POLICIES, default="withhold"),
        "central_epsilon": _f(
            "number", exclusive_minimum=0, maximum=50, description="central target, at delta, per window"
        ),
        "expected_reports": _f("integer", minimum=2, description="reports shuffled together per window"),
    },
    description="anonymous collection through the shuffler (ldp.anonymity; docs/shuffler.md)",
)

_FREQUENCY_FIELDS: dict[str, Field] = {
    "domain_size": _f("integer", minimum=2, maximum=_MAX_DOMAIN),
    "labels": _f(
        "array",
        "null",
        min_items=2,
        max_items=MAX_LABELS,
        unique_items=True,
        items=_f("string", min_length=1, max_length=MAX_LABEL_CHARS, pattern=r"^\S(.*\S)?$"),
        description="one label per value (domain_size of them); label i names value i",
    ),
    "labels_file": _f("string", pattern=r"\S", description="a labels file, relative to the task file"),
    "budget": _f(
        "object",
        "null",
        properties={
            "epsilon_per_report": _f("number", exclusive_minimum=0, maximum=100),
            "reports_per_period": _f("integer", "null", minimum=1),
            "period_s": _f("number", "null", exclusive_minimum=0),
            "total_epsilon": _f("number", "null", exclusive_minimum=0, maximum=1e6),
            "composition": _f("string", enum=("basic", "memoized", "pld")),
            "delta": _f("number", exclusive_minimum=0, maximum=1e-3),
            "client_ids": _f("boolean", default=False),
        },
        description="the per-user budget of repeated collection (ldp.longitudinal.budget.parse_budget)",
    ),
    "hide_participation": _f("boolean", default=False),
    "epsilon": _EPSILON_OR_AUTO,
    "anonymity": _ANONYMITY,
}
#: range tasks take version 2 (categorical reports) or 3 (msw: integer grid messages), the method's own
_RANGE_SCHEMA_VERSIONS: tuple[int, ...] = (2, 3)
_RANGE_FIELDS: dict[str, Field] = {
    "schema_version": _f(
        "integer",
        enum=_RANGE_SCHEMA_VERSIONS,
        description="the method's: 3 for msw (integer grid messages, docs/wire_format.md section 7; its "
        "version 2 float reals are retired, float_reals_retired), 2 for the others; default the method's",
    ),
    "attributes": _ATTRIBUTES,
    "expected_users": _f("integer", minimum=1),
    "granularity": _f(
        "object",
        "null",
        properties={"g1": _f("integer", minimum=2), "g2": _f("integer", minimum=2)},
        description="hdg / tdg: grid granularities (powers of two)",
    ),
    "options": _f("object", "null", description="method options (params is an alias)"),
    "hash": _HASH_WITHOUT_G,
    "epsilon": _EPSILON_OR_AUTO,
    "anonymity": _ANONYMITY,
}
_BATCH_FIELDS: dict[str, Field] = {
    "attributes": _ATTRIBUTES,
    "delta": _f("number", exclusive_minimum=0, exclusive_maximum=1),
    "calibration": _f("string", enum=BATCH_CALIBRATIONS, default="analytic"),
    "max_contributions": _f("integer", minimum=1, maximum=1_000_000, default=1),
    "n_groups": _f("integer", enum=(1,)),
    "hash": _HASH_WITHOUT_G,
    "resolved": _NO_RESOLUTION,
    "window": _f(
        "object",
        "null",
        properties={
            **_WINDOW_FIELDS,
            "period_s": _f("null"),
            "early_firing_s": _f("null"),
            "accumulating": _f("boolean", enum=(False,)),
        },
        description="each record is released once: no sliding windows, early firings or accumulating panes",
    ),
}
_SPARSE_FIELDS: dict[str, Field] = {
    "domain_size": _f("integer", minimum=2, maximum=(1 << 63) - 1),
    "sparsity": _f("integer", minimum=1),
    "privacy": Field(
        (), any_of=(_f("string", enum=("event", "user")), _f("integer", minimum=1)), default="user"
    ),
    "delta": _f("number", "null", minimum=0, exclusive_maximum=1),
    "values": _f("string", enum=("real", "binary"), default="real"),
    "expected_users": _f("integer", minimum=2, default=100_000),
    "n_groups": _f("integer", enum=(1,)),
    "hash": _HASH_WITHOUT_G,
    "resolved": _NO_RESOLUTION,
}

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


#: The task sections of the built-in kinds; ``ldp.kinds`` registers them (with the rest of each kind).
FREQUENCY_TASK_KIND = TaskKind(
    "frequency",
    lambda: ORACLE_MECHANISMS,
    ("domain_size", "labels", "labels_file", "budget", "hide_participation", "anonymity"),
    _frequency_task,
    uses_base_dir=True,
    fields=_FREQUENCY_FIELDS,
    required=("domain_size",),
    exclusive=(("labels", "labels_file"),),
)
RANGE_TASK_KIND = TaskKind(
    "range",
    lambda: MULTI_ATTRIBUTE_MECHANISMS,
    ("attributes", "expected_users", "granularity", "options", "anonymity"),
    _range_task,
    fields=_RANGE_FIELDS,
    required=("attributes", "expected_users"),
)
BATCH_TASK_KIND = TaskKind(
    "batch_queries",
    lambda: BATCH_MECHANISMS,
    ("attributes", "delta", "calibration", "max_contributions"),
    _batch_task,
    fields=_BATCH_FIELDS,
    required=("kind", "attributes", "delta"),
)
SPARSE_TASK_KIND = TaskKind(
    "sparse",
    _sparse_mechanisms,
    SPARSE_KEYS,
    _sparse_task,
    fields=_SPARSE_FIELDS,
    required=("domain_size", "sparsity"),
)


class _TaskKinds(Mapping[str, TaskKind]):
    """The task sections of the registered kinds, in registration order (:data:`TASK_KINDS`).

    Filled by :func:`ldp.kinds.register`; the first read imports :mod:`ldp.kinds`, which registers every
    built-in kind, so the task model sees the same kinds as the rest of the stack.
    """

    def __init__(self) -> None:
        self._kinds: dict[str, TaskKind] = {}
        self._loaded = False

    def _load(self) -> dict[str, TaskKind]:
        if not self._loaded:
            self._loaded = True
            import ldp.kinds  # noqa: F401  (registers the built-in kinds)
        return self._kinds

    def __getitem__(self, name: str) -> TaskKind:
        return self._load()[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._load()))

    def __len__(self) -> int:
        return len(self._load())

    def setdefault(self, name: str, kind: TaskKind) -> TaskKind:
        """The registered section of ``name`` (``kind`` only when none is: older callers' idempotent
        registration; a kind registers through :func:`ldp.kinds.register`)."""
        return self._load().setdefault(name, kind)

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
            "required": list(dict.fromkeys((*_REQUIRED, *k.required))),
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
        "required": list(_REQUIRED),
        "properties": {
            "mechanism": {
                "type": "string",
                "enum": list(dict.fromkeys(m for k in kinds for m in k.mechanisms())),
            },
            "kind": {"type": "string", "enum": list(TASK_KINDS)},
        },
        "allOf": branches,
    }


# ------------------------------------------------------------------------------------------------------------
# entry points
# ------------------------------------------------------------------------------------------------------------


def read_labels_file(path: str | Path, domain_size: int | None = None) -> tuple[str, ...]:
    """Value labels from a file in the ``labels_file`` format (one per line, or a JSON list), checked like a
    task's (``domain_size`` None: any count up to :data:`MAX_LABELS`).

    Raises:
        TaskError: listing every problem.
    """
    p = Path(path)
    problems: Problems = []
    labels = _labels_from_file(str(p.resolve()), domain_size, Path("."), problems)
    if problems or labels is None:
        raise TaskError(problems or ["no labels"], str(p))
    return labels


def task_resolution(task: Task) -> dict[str, object] | None:
    """What a task's oracles resolve to (``None`` for kinds without frequency oracles: batch queries,
    sparse vectors): ``auto_candidates``, the frozen ``auto`` candidates of its ``schema_version``
    (``ldp.oracles.AUTO_CANDIDATES``), and ``oracles``, the ``ldp.rangequery.registry.oracle_spec`` of its
    oracle (frequency: one entry, every group's) or of each group's oracle, group 0 first (range: the
    per-group ``auto`` choices); with a central target (``anonymity.central_epsilon``) also
    ``local_epsilon``: the task's epsilon, the target, ``delta``, ``expected_reports`` and the
    ``accounting`` (:func:`shuffle_accounting`)."""
    if isinstance(task, FrequencyTask):
        oracles = [_range_registry.oracle_spec(task.make_oracle())]
    elif isinstance(task, RangeTask):
        oracles = _range_registry.group_oracle_specs(task.make_mechanism())
    else:
        return None
    # the per-group ``auto`` oracles of range methods choose among the candidates of version 2 whatever
    # the wire version (msw's version 3 changes its Square Wave messages, not any frequency oracle)
    cand_version = task.schema_version if isinstance(task, FrequencyTask) else _oracles.AUTO_SCHEMA_VERSION
    out: dict[str, object] = {
        "auto_candidates": list(_oracles.auto_candidates(cand_version)),
        "oracles": oracles,
    }
    target = None if task.central_target is None else task.central_target.central_epsilon
    if task.shuffled and target is not None and task.anonymity is not None:
        accounting, _ = shuffle_accounting(task)
        out["local_epsilon"] = {
            "epsilon": task.epsilon,
            "central_epsilon": target,
            "delta": task.anonymity.delta,
            "expected_reports": task.expected_reports,
            "accounting": accounting,
        }
    return out


def resolve_task(task: Task | JsonObject) -> dict[str, object]:
    """The task (parsed, or an object :func:`parse_task` accepts) as a JSON-ready dict with its resolution
    recorded under ``resolved`` (:func:`task_resolution`): write this when a task is made, so every
    client and aggregator that loads it checks it resolves the same oracles.

    Raises:
        TaskError: the object is not a valid task.
    """
    parsed = task if isinstance(task, Task) else parse_task(task)
    out = parsed.to_dict()
    res = task_resolution(parsed)
    if res is not None:
        out["resolved"] = res
    return out


def _check_resolved(raw: object, task: Task, problems: Problems) -> dict[str, object] | None:
    """A recorded ``resolved`` block (:func:`resolve_task`) must be what this release resolves."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not (
        {"auto_candidates", "oracles"} <= set(raw) <= {"auto_candidates", "oracles", "local_epsilon"}
    ):
        problems.append(
            "resolved must be an object with auto_candidates, oracles and (with a central target) "
            "local_epsilon (ldp.task.resolve_task)"
        )
        return None
    now = task_resolution(task)
    if now is None:
        problems.append(f"resolved applies to frequency and range tasks, not {task.kind} tasks")
        return None
    rec = {"auto_candidates": raw["auto_candidates"], "oracles": raw["oracles"]}
    if "local_epsilon" in raw:
        rec["local_epsilon"] = raw["local_epsilon"]
    if rec.get("local_epsilon") != now.get("local_epsilon"):
        problems.append(
            f"resolved.local_epsilon: the task records {rec.get('local_epsilon')!r} but it resolves to "
            f"{now.get('local_epsilon')!r} (the epsilon chosen for the central target must be the one "
            "clients use: resolve the task again with ldp.task.resolve_task, or make a new task)"
        )
    if rec["auto_candidates"] != now["auto_candidates"]:
        problems.append(
            f"resolved.auto_candidates {rec['auto_candidates']!r} are not schema version "
            f"{task.schema_version}'s {now['auto_candidates']!r}"
        )
    mine, theirs = now["oracles"], rec["oracles"]
    assert isinstance(mine, list)
    if not isinstance(theirs, list) or len(theirs) != len(mine):
        n = len(theirs) if isinstance(theirs, list) else type(theirs).__name__
        problems.append(f"resolved.oracles records {n} oracle(s), the task has {len(mine)}")
        return None
    bad = [i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b]
    for i in bad[:3]:
        problems.append(
            f"resolved.oracles[{i}]: the task records {theirs[i]!r} but this release resolves {mine[i]!r} "
            "(clients and the aggregator would encode and decode differently: name the oracle explicitly "
            "or make a new task)"
        )
    if len(bad) > 3:
        problems.append(f"resolved.oracles: ... and {len(bad) - 3} more group(s) resolve differently")
    return None if bad or len(problems) else json.loads(json.dumps(rec))


def parse_task(
    obj: object, *, source: str = "task", kind: str | None = None, base_dir: str | Path | None = None
) -> ParsedTask:
    """Validates a task given as a dict (parsed JSON) and returns the parsed task.

    Args:
        obj: the task object.
        source: what to call it in error messages (a file name).
        kind: if given, the task must be of this kind (e.g. ``"range"`` for the range-query job).
        base_dir: the directory a relative ``labels_file`` is read from (default: the current directory;
            :func:`load_task` passes the task file's directory).

    Raises:
        TaskError: listing every problem found.
    """
    if not isinstance(obj, Mapping):
        raise TaskError([f"a task must be a JSON object, got {type(obj).__name__}"], source)
    problems: Problems = []
    mechanism, task_kind = _check_mechanism(obj, problems)
    _check_keys(obj, task_kind, problems)
    anonymous = task_kind is not None and _shuffle_allowed(task_kind)
    common: dict[str, object] = {
        "task_id": _check_task_id(obj, problems),
        "mechanism": mechanism,
        "epsilon": _check_epsilon(obj, problems, allow_auto=anonymous),
        "description": _check_description(obj, problems),
        "schema_version": _check_schema_version(obj, problems, task_kind),
        "postprocess": _check_postprocess(obj, problems),
        "hash": _check_hash(obj, mechanism, problems),
        "params": _check_params(obj, problems),
        "window": _check_window(obj.get("window"), problems),
    }
    settings, target, n = None, None, None
    if anonymous and task_kind is not None:
        settings, target = _check_anonymity(obj.get("anonymity"), problems)
        if settings is not None:
            n = _target_reports(obj, task_kind.name, settings, target, problems)
            n = _batch_target_reports(n, common["window"], settings, target, problems)  # type: ignore[arg-type]
    goal = None if target is None else target.central_epsilon
    auto_epsilon = anonymous and obj.get("epsilon") == AUTO_EPSILON
    if auto_epsilon and goal is None and "anonymity" not in obj:
        problems.append('epsilon "auto" needs an anonymity section with central_epsilon and expected_reports')
    elif auto_epsilon and goal is None and settings is not None:
        problems.append('epsilon "auto" needs anonymity.central_epsilon (the target it is chosen for)')
    task = None
    if task_kind is not None and mechanism is not None:
        if auto_epsilon and settings is not None and goal is not None and n is not None and not problems:
            common["epsilon"] = _epsilon_for_target(obj, common, task_kind.name, settings, goal, n)
        extra = {"base_dir": Path(base_dir or ".")} if task_kind.uses_base_dir else {}
        task = task_kind.build(obj, common, problems, **extra)
    if task is not None and settings is not None:
        task = dataclasses.replace(task, anonymity=settings, central_target=target)
        _check_shuffled_task(task, n, problems)
    if task is not None and not problems and obj.get("resolved") is not None:
        resolved = _check_resolved(obj["resolved"], task, problems)
        if resolved is not None:
            task = dataclasses.replace(task, resolved=resolved)
    if task is None or problems:
        raise TaskError(problems or ["the task could not be parsed"], source)
    if kind is not None and task.kind != kind:
        raise TaskError(
            [f"task {task.task_id!r} is a {task.kind} task ({task.mechanism!r}), not a {kind} task"],
            source,
        )
    return task


def load_task(path: str | Path, *, kind: str | None = None) -> ParsedTask:
    """Reads and validates a task JSON file (``kind``: as :func:`parse_task`).

    Raises:
        TaskError: the file cannot be read, is not JSON, or the task has problems (all listed).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskError([f"cannot read task file: {exc.strerror or exc}"], str(p)) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskError(
            [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"], str(p)
        ) from None
    return parse_task(obj, source=str(p), kind=kind, base_dir=p.parent)


if __name__ == "__main__":
    # python -m ldp.task --schema          prints the task file's JSON Schema (schemas/task.schema.json)
    # python -m ldp.task --resolve TASK    prints the task with its resolution recorded (resolve_task)
    import sys

    from ldp import task as _model  # the imported module (its registries), not this __main__ copy

    args = sys.argv[1:]
    if args == ["--schema"]:
        print(json.dumps(_model.task_json_schema(), indent=2))
    elif len(args) == 2 and args[0] == "--resolve":
        try:
            print(json.dumps(_model.resolve_task(_model.load_task(args[1])), indent=2))
        except _model.TaskError as exc:
            sys.exit(f"error: {exc.one_line()}")
    else:
        sys.exit("usage: python -m ldp.task --schema | --resolve TASK.json")
