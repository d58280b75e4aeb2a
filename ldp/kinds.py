"""The registry of kinds of task: one entry per kind holds everything the stack dispatches on.

A :class:`Kind` names, for one kind of task,

* ``task``: its section of the task model (:class:`ldp.task.TaskKind`: keys, mechanism names, field
  declarations for the JSON Schema, section checker);
* ``aggregator``: ``(task, **job) -> Aggregator`` (:mod:`ldp.aggregate`), and for the shared job
  (``pipelines.job``) ``job_flags(parser)`` (its extra flags) and ``job_aggregator(ns, task)``;
* ``rows``: one :class:`RowKind` per result row type: its class, Avro schema, store output and store
  flattener (``(rows, max_items, labels) -> [FlatPane]``, :mod:`ldp.store.flatten`), or why it is not
  stored;
* the simulator's pieces (``pipelines.simulate``): ``population(task, users, dataset, seed_sequence, *,
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
* ``show``: how ``ldp-beam show`` reads and prints the rows of a kind registered outside the project (a
  :func:`ref` to a ``pipelines.show.ShowSpec``); the built-in kinds' pieces live in ``pipelines.show_kinds``
  (``BUILT_IN``, by kind name), so ``ldp`` names nothing of ``pipelines``;
* ``central_privacy(task, windows)``: the central-DP figures ``ldp-beam privacy`` prints for a kind without
  ``ldp_reports`` (``central_epsilon``, ``central_delta``, ``central_epsilon_composed``, ``method``).

Pieces are callables; :func:`ref` names one as ``"module:attribute"`` and imports it on first call, so
this module imports no kind's module until the kind is used, and nothing here imports Beam. Adding a kind
is its own module(s) plus one :func:`register` call (the built-in ones are at the end of this file);
:func:`register` refuses an entry whose rows the store cannot flatten (each row type has a store output
and a flattener, or says why it is not stored).

Every row type carries the pane header :data:`ldp.aggregate.PANE_HEADER` (window, pane, task, schema
version, mechanism); ``tests/test_kinds.py`` checks each registered row class and Avro schema.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ldp import task as _task

__all__ = [
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
        matches: recognises rows of other classes with this type's fields (older rows); None: the class only.
    """

    row: Any
    schema: str
    store_output: str | None
    flatten: Callable[[Sequence[Any], int, Sequence[str] | None], list[Any]] | None = None
    not_stored: str = ""
    matches: Callable[[object], bool] | None = None

    @property
    def row_class(self) -> type:
        return _resolve(self.row)


@dataclasses.dataclass(frozen=True)
class Kind:
    """Everything the stack dispatches on for one kind of task (see the module docstring)."""

    name: str
    task: _task.TaskKind
    aggregator: Callable[..., Any]
    rows: tuple[RowKind, ...]
    population: Callable[..., Any] | None = None
    default_dataset: str | None = None
    datasets: str = ""
    assignments: tuple[str, ...] = ("random",)
    users_from_dataset: tuple[str, ...] = ()
    bad_template: Callable[[Any], tuple[Any, int, Callable[..., Any]]] | None = None
    job_flags: Callable[[argparse.ArgumentParser], None] | None = None
    job_aggregator: Callable[[argparse.Namespace, Any], Any] | None = None
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
    #: how ``ldp-beam show`` prints its rows: a :func:`ref` to a ``pipelines.show.ShowSpec`` (None: it cannot)
    show: Any = None
    #: ``(task, windows) -> figures``: the central-DP accounting of ``ldp-beam privacy`` (kinds without
    #: ``ldp_reports``)
    central_privacy: Callable[[Any, int], Mapping[str, Any]] | None = None
    #: mechanisms the standing adversarial audit (``tests/audit``) does not run, each with the reason
    #: (``"*"``: the whole kind); any other mechanism of a kind with ``ldp_reports`` must pass it
    audit_exempt: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def make_example_aggregator(self, task: Any) -> Any:
        """An aggregator of a task like :attr:`example`: ``example_aggregator(task)``, else
        ``aggregator(task)``."""
        if self.example_aggregator is not None:
            return self.example_aggregator(task)
        return self.aggregator(task)

    def make_job_aggregator(self, ns: argparse.Namespace, task: Any) -> Any:
        """The aggregator of the shared job: ``job_aggregator(ns, task)``, else ``aggregator(task)``."""
        if self.job_aggregator is not None:
            return self.job_aggregator(ns, task)
        return self.aggregator(task)


#: The registered kinds by name, in registration order.
KINDS: dict[str, Kind] = {}
_BY_CLASS: dict[type, RowKind] = {}


def _problems(kind: Kind, replace: bool) -> list[str]:
    out: list[str] = []
    if not isinstance(kind.task, _task.TaskKind):
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
    takes_anonymity = isinstance(kind.task, _task.TaskKind) and "anonymity" in kind.task.keys
    if kind.shuffle_allowed and not kind.ldp_reports:
        out.append("shuffle_allowed needs ldp_reports (the shuffler amplifies local randomizers)")
    if kind.shuffle_allowed and not takes_anonymity:
        out.append("shuffle_allowed needs 'anonymity' among its task section's keys")
    if takes_anonymity and not kind.shuffle_allowed:
        out.append("its task section takes 'anonymity' but the kind does not declare shuffle_allowed")
    if kind.typescript_client and not kind.ldp_reports:
        out.append("typescript_client needs ldp_reports (the client sends randomized reports)")
    for name in (
        "population", "bad_template", "job_flags", "job_aggregator", "example_aggregator", "central_privacy"
    ):
        v = getattr(kind, name)
        if v is not None and not callable(v):
            out.append(f"{name} must be callable")
    if kind.population is not None and not kind.default_dataset:
        out.append("a population needs a default_dataset")
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
    _task.TASK_KINDS._set(kind.task)
    _BY_CLASS.clear()
    return kind


def unregister(name: str) -> None:
    """Removes a kind (tests that register a toy kind)."""
    KINDS.pop(name, None)
    _task.TASK_KINDS._remove(name)
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


def row_kind(row: object) -> RowKind:
    """The registered row type of a result row: by class, else the first type whose ``matches`` accepts it.

    Raises:
        ValueError: no registered kind declares rows like it.
    """
    if not _BY_CLASS:
        for rk in row_kinds():
            _BY_CLASS.setdefault(rk.row_class, rk)
    for cls in type(row).__mro__:
        rk = _BY_CLASS.get(cls)
        if rk is not None:
            return rk
    for rk in row_kinds():
        if rk.matches is not None and rk.matches(row):
            return rk
    raise ValueError(
        f"no registered kind of task declares rows of type {type(row).__name__} (ldp.kinds.register): "
        "they cannot be stored"
    )


# ------------------------------------------------------------------------------------------------------------
# the built-in kinds
# ------------------------------------------------------------------------------------------------------------


def _has(*names: str) -> Callable[[object], bool]:
    return lambda row: all(hasattr(row, n) for n in names)


def _answer_row(row: object) -> bool:
    return hasattr(row, "answer") and hasattr(row, "query_index") and not hasattr(row, "strategy")


def _range_example_aggregator(task: Any) -> Any:
    """A range task's aggregator answering one query: the lower half of the first attribute."""
    from ldp.aggregate.range import RangeAggregator
    from ldp.rangequery.queries import parse_queries

    half = max(task.domain_sizes[0] // 2 - 1, 0)
    queries = parse_queries([{task.attribute_names[0]: [0, half]}], task.attribute_names, task.domain_sizes)
    return RangeAggregator(task, queries)


def _batch_example_aggregator(task: Any) -> Any:
    """A batch task's aggregator of the identity workload, its noise seeded (answers not private)."""
    from ldp.aggregate.batch import BatchAggregator, parse_workload_spec

    return BatchAggregator(task, parse_workload_spec({"type": "identity"}, task), noise_seed=0)


def _batch_central_privacy(task: Any, windows: int) -> dict[str, Any]:
    """A batch task's central-DP figures: one Gaussian matrix-mechanism release per window, composed by
    basic composition."""
    return {
        "central_epsilon": task.epsilon,
        "central_delta": task.delta * windows if windows > 1 else task.delta,
        "central_epsilon_composed": task.epsilon * windows,
        "central_epsilon_composed_basic": task.epsilon * windows,
        "method": {
            "local": "none: the aggregator sees raw records (central DP)",
            "central": "Gaussian matrix mechanism, one release per window (central DP)",
            "composed": "basic composition: windows * epsilon at windows * delta",
        },
    }


_FLATTEN = "ldp.store.flatten:"
_POP = "ldp.populations:"

register(
    Kind(
        "frequency",
        _task.FREQUENCY_TASK_KIND,
        aggregator=ref("ldp.aggregate.frequency:FrequencyAggregator"),
        rows=(
            RowKind(
                ref("ldp.aggregate.frequency:EstimateRow"),
                "estimate",
                "estimates",
                ref(_FLATTEN + "flatten_estimates"),
                matches=_has("frequencies"),
            ),
        ),
        population=ref(_POP + "frequency_population"),
        default_dataset="zipf",
        datasets="zipf[:EXPONENT], uniform, csv:PATH:COLUMN",
        bad_template=ref(_POP + "frequency_template"),
        description="frequency estimation (one value in [0, domain_size) per user)",
        shuffle_allowed=True,
        typescript_client=True,
        example={"task_id": "f", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4},
    )
)
register(
    Kind(
        "range",
        _task.RANGE_TASK_KIND,
        aggregator=ref("ldp.aggregate.range:RangeAggregator"),
        rows=(
            RowKind(
                ref("ldp.aggregate.range:ModelRow"),
                "range_model",
                None,
                not_stored="a window's model publishes no number (OUT/models keeps it)",
                matches=_has("model_json"),
            ),
            RowKind(
                ref("ldp.aggregate.range:AnswerRow"),
                "range_answer",
                "answers",
                ref(_FLATTEN + "flatten_answers"),
                matches=_answer_row,
            ),
        ),
        population=ref(_POP + "range_population"),
        default_dataset="gaussian",
        datasets="gaussian[:RHO], laplace[:RHO], uniform, csv:PATH",
        assignments=("random", "balanced", "user_id"),
        bad_template=ref(_POP + "range_template"),
        description="multi-dimensional range queries",
        shuffle_allowed=True,
        example_aggregator=_range_example_aggregator,
        example={
            "task_id": "r",
            "mechanism": "hdg",
            "epsilon": 1.0,
            "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 8}],
            "expected_users": 1000,
        },
    )
)
register(
    Kind(
        "batch_queries",
        _task.BATCH_TASK_KIND,
        aggregator=ref("ldp.aggregate.batch:BatchAggregator"),
        rows=(
            RowKind(
                ref("ldp.aggregate.batch:BatchAnswerRow"),
                "batch_answer",
                "batch",
                ref(_FLATTEN + "flatten_batch"),
                matches=_has("answer", "strategy"),
            ),
        ),
        population=ref(_POP + "batch_population"),
        default_dataset="gaussian",
        datasets="gaussian[:RHO], laplace[:RHO], uniform, csv:PATH",
        bad_template=ref(_POP + "batch_template"),
        description="batch linear queries (CENTRAL DP: raw records at a trusted aggregator)",
        ldp_reports=False,
        central_privacy=_batch_central_privacy,
        example_aggregator=_batch_example_aggregator,
        example={
            "task_id": "b",
            "kind": "batch_queries",
            "mechanism": "identity",
            "epsilon": 0.5,
            "attributes": [{"name": "a", "domain_size": 16}],
            "delta": 1e-6,
        },
    )
)
register(
    Kind(
        "sparse",
        _task.SPARSE_TASK_KIND,
        aggregator=ref("ldp.sparse.aggregate:SparseAggregator"),
        rows=(
            RowKind(
                ref("ldp.sparse.aggregate:SparseEstimateRow"),
                "sparse_estimate",
                "sparse",
                ref(_FLATTEN + "flatten_sparse"),
                matches=_has("mean", "items"),
            ),
        ),
        population=ref(_POP + "sparse_population"),
        default_dataset="supersparse",
        datasets="supersparse, zipf-sparse[:S], csv:PATH (header user_id,item,value)",
        users_from_dataset=("csv:",),
        bad_template=ref(_POP + "sparse_template"),
        description="k-sparse vector means",
        example={"task_id": "s", "mechanism": "svme", "epsilon": 1.0, "domain_size": 1000, "sparsity": 4},
    )
)
register(ref("ldp.aggregate.numeric:numeric_kind")())
