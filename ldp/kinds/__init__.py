"""The registry of kinds of task: one entry per kind holds everything the stack dispatches on.

A :class:`Kind` names, for one kind of task,

* ``task``: its section of the task model (:class:`ldp.task.TaskKind`: keys, mechanism names, field
  declarations for the JSON Schema, section checker);
* ``aggregator``: ``(task, **job) -> Aggregator`` (:mod:`ldp.aggregate`), and for the shared aggregation
  job its ``command`` name, its extra options as data (``job_options``, :class:`JobOption`: name, type,
  default, help; the command line turns them into flags) and ``job_aggregator(options, task)``;
* ``rows``: one :class:`RowKind` per result row type: its class, Avro schema (a file of ``schemas/`` or
  the schema itself, ``avro``), store output and store flattener (``(rows, max_items, labels) ->
  [FlatPane]``, :mod:`ldp.rows`), or why it is not stored;
* ``mechanism_registries``: registry name -> ``{mechanism name: class}`` (or a :func:`ref` to the mapping,
  or to a function returning it): the mechanisms its devices encode, whose wire specs :mod:`wire.registry`
  walks (empty: no device reports);
* the simulator's pieces: ``population(task, users, dataset, seed_sequence, *,
  batch_size, assignment)``, ``default_dataset``, ``datasets`` (help text), ``assignments``,
  ``users_from_dataset`` and ``bad_template(task)`` (valid reports of one group, for the bad-record
  variants).
* its capabilities, read through the registry wherever the stack treats kinds differently:
  ``ldp_reports`` (devices send locally randomized reports; False for central DP, where a trusted
  aggregator receives raw records: the collector refuses such tasks and ``ldp-beam privacy`` accounts
  them centrally), ``shuffle_allowed`` (reports may go through the shuffler: the task model accepts an
  ``anonymity`` section and ``epsilon: "auto"``; the kind's task section must then list ``anonymity``
  among its keys) and ``typescript_client`` (the TypeScript client encodes its reports: the collector's
  ``--demo_page``);
* ``example`` (a small valid task) and ``example_aggregator(task)`` (an aggregator of it, for kinds whose
  aggregator needs a job's inputs such as queries or a workload; tests run every kind through it);
* ``central_privacy(task, windows)``: the central-DP figures ``ldp-beam privacy`` prints for a kind without
  ``ldp_reports`` (``central_epsilon``, ``central_delta``, ``central_epsilon_composed``, ``method``);
* ``plan(task, users, windows)``: the kind's predicted errors, eps0 and window costs (``ldp-beam plan``,
  :mod:`ldp.plan`; each built-in kind's ``plan.predict``).

Nothing here names a module above ``ldp``: the command line (``pipelines``) finds its own pieces for a
kind (a job module, a richer ``ldp-beam show`` printer) by the kind's name, and prints any other kind's
rows from their fields. ``python -m ldp.kinds --table`` prints the table of registered kinds that
``docs/architecture.md`` carries.

Pieces are callables; :func:`ref` names one as ``"module:attribute"`` and imports it on first call, so
registering a kind imports only its task section, and nothing here imports Beam. Each built-in kind is a
package, ``ldp/kinds/<name>/``: ``task`` (its task class and section), ``aggregate`` (aggregator and
rows), ``flatten`` (store form), ``population`` (simulated clients) and ``KIND`` in its ``__init__``;
the registrations are the last lines of this file. Adding a kind is its package plus one
:func:`register` call; :func:`register` refuses an entry whose rows the store cannot flatten (each row
type has a store output and a flattener, or says why it is not stored).

Every row type carries the pane header :data:`ldp.rows.PANE_HEADER` (window, pane, task, schema version,
mechanism, ``row_schema``); :func:`row_kind` and :func:`flatten_rows` dispatch a row on its class, else
on the ``row_schema`` it names, else on the schema of the file it was read from (older files).
``tests/test_kinds.py`` checks each registered row class and Avro schema.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ldp.rows import DEFAULT_MAX_ITEMS, FlatPane, row_schema_of
from ldp.task.fields import TASK_KINDS, TaskKind

__all__ = [
    "JobOption",
    "Kind",
    "RowKind",
    "KINDS",
    "ref",
    "resolve_ref",
    "register",
    "unregister",
    "get",
    "kind_of",
    "make_aggregator",
    "row_kind",
    "row_kinds",
    "shuffle_allowed",
    "flatten_rows",
    "row_output",
    "mechanism_registries",
    "declared_avro",
    "kinds_table",
]


class _Ref:
    """A callable standing for ``module:attribute``, imported on first use."""

    def __init__(self, path: str) -> None:
        module, sep, attr = path.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"a reference is 'module:attribute', got {path!r}")
        self.path = path
        self._target: Any = None

    def resolve(self) -> Any:
        if self._target is None:
            module, _, attr = self.path.partition(":")
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            self._target = obj
        return self._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"ref({self.path!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_Ref, (self.path,))


def ref(path: str) -> Any:
    """``"module:attribute"`` as a callable that imports it on first call (or :func:`resolve_ref`)."""
    return _Ref(path)


def resolve_ref(obj: Any) -> Any:
    """What a piece stands for: the imported target of a :func:`ref`, else the piece itself."""
    return obj.resolve() if isinstance(obj, _Ref) else obj


_resolve = resolve_ref


@dataclasses.dataclass(frozen=True, eq=False)
class RowKind:
    """One result row type of a kind.

    Attributes:
        row: the row class (a ``NamedTuple`` whose fields are ``schema``'s), or a :func:`ref` to it.
        schema: its Avro schema (``schemas/<schema>.avsc``).
        store_output: the store's ``output`` of its numbers; None: not stored (``not_stored`` says why).
        flatten: ``(rows, max_items, labels) -> [FlatPane]``, the rows of one pane of this type.
        not_stored: why the rows are not stored (required when ``store_output`` is None).
        avro: the Avro schema itself (a dict, or a :func:`ref` to one) for a kind that ships it in its own
            package; None: ``schemas/<schema>.avsc``.

    Rows name their type in the pane header's ``row_schema`` (``schema``): :func:`row_kind` dispatches on
    it for a row of another class (a record read from a file, a test's row).
    """

    row: Any
    schema: str
    store_output: str | None
    flatten: Callable[[Sequence[Any], int, Sequence[str] | None], list[Any]] | None = None
    not_stored: str = ""
    avro: Any = None

    @property
    def row_class(self) -> type:
        return _resolve(self.row)


#: :attr:`JobOption.type` names and what a flag's text becomes.
OPTION_TYPES = ("str", "int", "float", "bool", "path")


@dataclasses.dataclass(frozen=True)
class JobOption:
    """One extra option of a kind's aggregation job, declared as data (the command line makes it a flag
    ``--<name>``; the job's aggregator reads it as ``options.<name>``).

    Attributes:
        name: the option's name (lowercase, digits and underscores: the flag is ``--<name>``).
        type: one of :data:`OPTION_TYPES` (``bool``: an off-by-default switch; ``path``: a file name).
        default: its value when not given (None: unset).
        help: one sentence on what it does.
        required: the job refuses to run without it.
        choices: the values it may take (empty: any of its type).
    """

    name: str
    type: str = "str"
    default: Any = None
    help: str = ""
    required: bool = False
    choices: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class Kind:
    """Everything the stack dispatches on for one kind of task (see the module docstring)."""

    name: str
    task: TaskKind
    aggregator: Callable[..., Any]
    rows: tuple[RowKind, ...]
    #: its ``ldp-beam`` command (None: the name, underscores as hyphens)
    command: str | None = None
    population: Callable[..., Any] | None = None
    default_dataset: str | None = None
    datasets: str = ""
    assignments: tuple[str, ...] = ("random",)
    users_from_dataset: tuple[str, ...] = ()
    bad_template: Callable[[Any], tuple[Any, int, Callable[..., Any]]] | None = None
    #: the extra options of its aggregation job, beyond the shared ones
    job_options: tuple[JobOption, ...] = ()
    #: ``(options, task) -> Aggregator`` for the job (``options.<name>`` per :attr:`job_options`)
    job_aggregator: Callable[[Any, Any], Any] | None = None
    description: str = ""
    #: a small valid task of the kind (tests probe the task model around it)
    example: Mapping[str, object] | None = None
    #: ``(task) -> Aggregator`` for :attr:`example` (None: ``aggregator(task)`` needs nothing more)
    example_aggregator: Callable[[Any], Any] | None = None
    #: devices send locally randomized reports (False: central DP, raw records at a trusted aggregator)
    ldp_reports: bool = True
    #: reports may be collected through the shuffler (the task's ``anonymity`` section)
    shuffle_allowed: bool = False
    #: the TypeScript client (``clients/typescript``) encodes reports of this kind
    typescript_client: bool = False
    #: registry name -> ``{mechanism name: class}`` its devices encode (a mapping, or a :func:`ref` to one or
    #: to a function returning one; :mod:`wire.registry`)
    mechanism_registries: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: ``(task, windows) -> figures``: the central-DP accounting of ``ldp-beam privacy`` (kinds without
    #: ``ldp_reports``)
    central_privacy: Callable[[Any, int], Mapping[str, Any]] | None = None
    #: mechanisms the standing adversarial audit (``tests/audit``) does not run, each with the reason
    #: (``"*"``: the whole kind); any other mechanism of a kind with ``ldp_reports`` must pass it
    audit_exempt: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: ``(task, users, windows) -> prediction``: the errors, eps0 and costs ``ldp-beam plan`` reports
    #: (``ldp.plan``; the kind's ``plan.predict``); None: the kind cannot be planned
    plan: Callable[[Any, int, int], Mapping[str, Any]] | None = None

    def make_example_aggregator(self, task: Any) -> Any:
        """An aggregator of a task like :attr:`example`: ``example_aggregator(task)``, else
        ``aggregator(task)``."""
        if self.example_aggregator is not None:
            return self.example_aggregator(task)
        return self.aggregator(task)

    def make_job_aggregator(self, options: Any, task: Any) -> Any:
        """The aggregator of the shared job: ``job_aggregator(options, task)``, else ``aggregator(task)``."""
        if self.job_aggregator is not None:
            return self.job_aggregator(options, task)
        return self.aggregator(task)

    @property
    def command_name(self) -> str:
        """Its ``ldp-beam`` command: :attr:`command`, else the name with hyphens for underscores."""
        return self.command or self.name.replace("_", "-")


#: The registered kinds by name, in registration order.
KINDS: dict[str, Kind] = {}
_BY_CLASS: dict[type, RowKind] = {}


def _problems(kind: Kind, replace: bool) -> list[str]:
    out: list[str] = []
    if not isinstance(kind.task, TaskKind):
        out.append(f"task must be an ldp.task.TaskKind, got {type(kind.task).__name__}")
    elif kind.task.name != kind.name:
        out.append(f"its task section is named {kind.task.name!r}")
    if kind.name in KINDS and not replace:
        out.append("a kind of that name is registered (unregister it first)")
    if not callable(kind.aggregator):
        out.append("aggregator must be callable: (task, **job) -> Aggregator")
    if not kind.rows:
        out.append("it declares no row types: its results could not be written or stored")
    for i, rk in enumerate(kind.rows):
        what = f"rows[{i}] ({getattr(rk.row, 'path', getattr(rk.row, '__name__', rk.row))})"
        if not isinstance(rk, RowKind):
            out.append(f"{what} must be an ldp.kinds.RowKind")
        elif rk.store_output is None and not rk.not_stored:
            out.append(f"{what}: the store cannot flatten it (give store_output and flatten, or not_stored)")
        elif rk.store_output is not None and not callable(rk.flatten):
            out.append(f"{what}: store output {rk.store_output!r} has no flatten function")
        elif not rk.schema:
            out.append(f"{what}: no Avro schema")
    takes_anonymity = isinstance(kind.task, TaskKind) and "anonymity" in kind.task.keys
    if kind.shuffle_allowed and not kind.ldp_reports:
        out.append("shuffle_allowed needs ldp_reports (the shuffler amplifies local randomizers)")
    if kind.shuffle_allowed and not takes_anonymity:
        out.append("shuffle_allowed needs 'anonymity' among its task section's keys")
    if takes_anonymity and not kind.shuffle_allowed:
        out.append("its task section takes 'anonymity' but the kind does not declare shuffle_allowed")
    if kind.typescript_client and not kind.ldp_reports:
        out.append("typescript_client needs ldp_reports (the client sends randomized reports)")
    out += _entry_problems(kind)
    for name in ("population", "bad_template", "job_aggregator", "example_aggregator", "central_privacy",
                 "plan"):
        v = getattr(kind, name)
        if v is not None and not callable(v):
            out.append(f"{name} must be callable")
    if kind.population is not None and not kind.default_dataset:
        out.append("a population needs a default_dataset")
    return out


_COMMAND_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
_OPTION_RE = re.compile(r"[a-z][a-z0-9_]*")


def _entry_problems(kind: Kind) -> list[str]:
    """What is wrong with an entry's command, job options and mechanism registries."""
    out: list[str] = []
    command = kind.command_name
    if not _COMMAND_RE.fullmatch(command):
        out.append(f"command {command!r} is not lowercase words joined by hyphens")
    taken = next((k.name for k in KINDS.values() if k.name != kind.name and k.command_name == command), None)
    if taken is not None:
        out.append(f"command {command!r} is the {taken} kind's")
    seen: set[str] = set()
    for opt in kind.job_options:
        if not isinstance(opt, JobOption):
            out.append(f"job option {opt!r} must be an ldp.kinds.JobOption")
            continue
        if not _OPTION_RE.fullmatch(opt.name) or opt.name in seen:
            out.append(f"job option {opt.name!r}: a name of lowercase letters, digits and '_', used once")
        seen.add(opt.name)
        if opt.type not in OPTION_TYPES:
            out.append(f"job option {opt.name!r}: type {opt.type!r} is not one of {', '.join(OPTION_TYPES)}")
        if not opt.help:
            out.append(f"job option {opt.name!r} has no help")
    if kind.mechanism_registries and not kind.ldp_reports:
        out.append("mechanism_registries needs ldp_reports (a central-DP kind's devices encode nothing)")
    return out


def register(kind: Kind, *, replace: bool = False) -> Kind:
    """Adds a kind to the registry (and its task section to :data:`ldp.task.TASK_KINDS`).

    Raises:
        ValueError: listing what is wrong with the entry (e.g. a row type the store cannot flatten).
    """
    problems = _problems(kind, replace)
    if problems:
        raise ValueError(f"kind {kind.name!r} cannot be registered: " + "; ".join(problems))
    KINDS[kind.name] = kind
    TASK_KINDS._set(kind.task)
    _BY_CLASS.clear()
    return kind


def unregister(name: str) -> None:
    """Removes a kind (tests that register a toy kind)."""
    KINDS.pop(name, None)
    TASK_KINDS._remove(name)
    _BY_CLASS.clear()


def get(name: str) -> Kind:
    """The registered kind ``name``.

    Raises:
        ValueError: no such kind (one line, naming the registered ones).
    """
    kind = KINDS.get(name)
    if kind is None:
        raise ValueError(f"no {name!r} kind of task is registered (known: {', '.join(KINDS)})")
    return kind


def kind_of(task: Any) -> Kind:
    """The registry entry of a parsed task."""
    return get(task.kind)


def make_aggregator(task: Any, **job: Any) -> Any:
    """The aggregator of a parsed task (its kind's ``aggregator(task, **job)``)."""
    return kind_of(task).aggregator(task, **job)


def shuffle_allowed(name: str) -> bool:
    """Whether tasks of the registered kind ``name`` may be collected through the shuffler (False for an
    unknown kind)."""
    kind = KINDS.get(name)
    return kind is not None and kind.shuffle_allowed


def row_kinds() -> list[RowKind]:
    """Every registered row type, kinds in registration order."""
    return [rk for k in KINDS.values() for rk in k.rows]


def row_kind(row: object, schema: str | None = None) -> RowKind:
    """The registered row type of a result row: by its class, else by the ``row_schema`` it carries, else
    by ``schema``, the Avro record name of the container it was read from (rows of older files have no
    ``row_schema``); the first registered kind declaring that schema.

    Raises:
        ValueError: one line: the row has neither a registered class nor a ``row_schema`` (and no
            ``schema`` is known), or no registered kind declares its schema.
    """
    if not _BY_CLASS:
        for rk in row_kinds():
            _BY_CLASS.setdefault(rk.row_class, rk)
    for cls in type(row).__mro__:
        rk = _BY_CLASS.get(cls)
        if rk is not None:
            return rk
    name = row_schema_of(row) or schema
    if name is None:
        raise ValueError(
            f"a result row of type {type(row).__name__} has no row_schema field (the Avro record name of its "
            "row type) and its file's schema is not known: it cannot be stored"
        )
    found = next((rk for rk in row_kinds() if rk.schema == name), None)
    if found is None:
        raise ValueError(
            f"no registered kind of task declares rows of schema {name!r} (ldp.kinds.register): they cannot "
            "be stored"
        )
    return found


def flatten_rows(
    rows: Iterable[Any],
    max_items: int = DEFAULT_MAX_ITEMS,
    labels: Sequence[str] | None = None,
    schema: str | None = None,
) -> list[FlatPane]:
    """The store form of one pane's result rows: the panes of each row type's flattener (its kind's
    registry entry, ``ldp.kinds``), row types in the order they first appear.

    Args:
        rows: the result rows of one task, window and pane (any mix of outputs; rows their kind declares
            unstored, as range models, are skipped).
        max_items: the cap on numbers stored per (output, group) (see the module docstring).
        labels: value labels of the task, used when a row carries none (``labels[i]`` names value ``i``).
        schema: the Avro record name of the file the rows were read from, for rows without ``row_schema``
            (:func:`row_kind`).

    Raises:
        ValueError: ``max_items`` < 1, a row whose vectors disagree in length, or a row of a type no
            registered kind declares (never dropped silently).
    """
    if max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")
    by_kind: dict[Any, list[Any]] = {}
    for row in rows:
        rk = row_kind(row, schema)
        if rk.store_output is not None:
            by_kind.setdefault(rk, []).append(row)
    panes: list[FlatPane] = []
    for rk, rs in by_kind.items():
        assert rk.flatten is not None  # checked at registration
        panes.extend(rk.flatten(rs, max_items, labels))
    return panes


def mechanism_registries(kind: Kind) -> dict[str, Mapping[str, type]]:
    """The kind's mechanism registries, each resolved: registry name -> ``{mechanism name: class}``."""
    out: dict[str, Mapping[str, type]] = {}
    for name, piece in kind.mechanism_registries.items():
        found = _resolve(piece)
        out[name] = found() if callable(found) and not isinstance(found, Mapping) else found
    return out


def declared_avro(schema: str) -> dict[str, Any] | None:
    """The Avro schema a registered kind ships with its rows of schema name ``schema`` (:attr:`RowKind.avro`),
    as a fresh dict; None when no registered kind ships one (the schema is a file of ``schemas/``)."""
    for rk in row_kinds():
        if rk.schema == schema and rk.avro is not None:
            found = _resolve(rk.avro)
            return copy.deepcopy(dict(found() if callable(found) else found))
    return None


def row_output(row: Any) -> str | None:
    """The store output of a result row (None: its kind declares it is not stored, as range models).

    Raises:
        ValueError: no registered kind has this row type (``ldp.kinds``): its rows would be lost.
    """
    return row_kind(row).store_output


def _package(kind: Kind) -> str:
    """The package a kind's task section comes from (``ldp.kinds.numeric`` for ``...numeric.task``)."""
    module = getattr(kind.task.build, "__module__", None) or "?"
    head, _, last = module.rpartition(".")
    return head if head and last in ("task", "tasks") else module


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def kinds_table() -> str:
    """The registered kinds as a Markdown table (``python -m ldp.kinds --table``; ``docs/architecture.md``
    carries it between ``<!-- kinds-table -->`` markers, and a test keeps the two equal)."""
    lines = [
        "| kind | package | `ldp-beam` command | mechanisms | rows (Avro schema: store output) | reports |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS.values():
        rows = ", ".join(f"`{rk.schema}`: {rk.store_output or 'not stored'}" for rk in kind.rows)
        reports = "local DP" + (", shuffled" if kind.shuffle_allowed else "") if kind.ldp_reports else (
            "none (central DP)"
        )
        cells = [f"`{kind.name}`", f"`{_package(kind)}`", f"`{kind.command_name}`",
                 ", ".join(kind.task.mechanisms()), rows, reports]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------------
# the built-in kinds: one package each (ldp/kinds/<name>/), registered in this order
# ------------------------------------------------------------------------------------------------------------


def _builtin(name: str) -> Kind:
    return register(importlib.import_module(f"ldp.kinds.{name}").KIND)


_builtin("frequency")
_builtin("range")
_builtin("batch_queries")
_builtin("sparse")
_builtin("numeric")
_builtin("heavy_hitters")
