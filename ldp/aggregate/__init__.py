"""The aggregator protocol: what every kind of task gives the aggregation stack (Beam-free).

A collection task splits its users into ``n_groups`` groups (one group for a plain frequency task, one per
grid / marginal / hierarchy level for the range-query methods). Each group has

* a **validation oracle** (:class:`ValidationOracle`): its declared ``payload`` (report fields, types,
  lengths, bounds; :mod:`ldp.payload`) and ``validate(reports)``, the domain checks of that group's
  reports, whose refusals carry reason codes;
* a fixed-size, mergeable **accumulator**: :meth:`Aggregator.create_accumulator`, :meth:`Aggregator.add`
  (a numpy :class:`~ldp.reports.Reports` batch, never one report) and :meth:`Aggregator.merge`.

and the task has one **finalize** over all groups of a window (:meth:`Aggregator.finalize`), which turns
``{group: accumulator}`` into typed result rows (``NamedTuple``\\ s whose fields are those of an Avro schema
in ``schemas/``, see :class:`ResultRow`); :attr:`Aggregator.outputs` says where each kind of row goes.

:class:`GroupAccumulators` is the accumulator of a whole task: the tuple of its groups' accumulators,
stored sparsely (a group without reports has none), in the manner of Beam's ``TupleCombineFn`` and
PipelineDP's ``CompoundCombiner``. :func:`accumulate` and :func:`merge_all` drive it in memory; the Beam
stack drives the same functions, so a pipeline and an in-memory call give
identical numbers for the same reports.

Implementations: each kind's ``ldp.kinds.<kind>.aggregate`` (``FrequencyAggregator``,
``RangeAggregator``, ``BatchAggregator`` (central DP), ``SparseAggregator``, ``NumericAggregator``);
:func:`make_aggregator` picks one for a parsed task from its kind's entry in the registry :mod:`ldp.kinds`.
They build on :class:`TaskAggregator` (the kind check, the lazily built mechanism, its accumulator).

A kind whose windows depend on each other (the heavy_hitters kind's trie mode: each window's survivors
decide what the next window's clients report) gives a :class:`WindowSequence` through
:meth:`TaskAggregator.window_sequence`: the stack then finalizes the windows one after the other, in order of
window start, through ``sequence.step`` instead of ``finalize``, carrying a picklable state between them and
publishing what ``step`` returns for the clients.
A new kind of task is a new kind package and one registry entry, not a new pipeline stack. Every row
carries the pane header (:data:`ldp.rows.PANE_HEADER`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np

from ldp.payload import PayloadSpec
from ldp.reports import Reports
from ldp.task import Task

__all__ = [
    "Record",
    "ValidationOracle",
    "ResultRow",
    "OutputSpec",
    "WindowInfo",
    "GLOBAL_WINDOW",
    "Aggregator",
    "WindowSequence",
    "TaskAggregator",
    "GroupAccumulators",
    "accumulate",
    "merge_all",
    "finalize_window",
    "make_aggregator",
    "json_safe",
    "json_record",
    "iso_ms",
    "from_iso",
]

#: One output record: the fields of an Avro schema in ``schemas/`` (JSON-able values, bytes for bytes).
Record = dict[str, object]
Acc = TypeVar("Acc")


@runtime_checkable
class ValidationOracle(Protocol):
    """The payload checks of one group's reports (``ldp.oracles`` oracles implement it).

    ``payload`` declares the report fields, their types, lengths and bounds (:mod:`ldp.payload`): the
    validator's column checks and the simulator's bad reports read it. ``validate`` makes the domain
    checks on the numpy batch.
    """

    name: str
    payload: PayloadSpec

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, reasons)``: a bool mask and an object array holding a :class:`~ldp.payload.Refusal`
        (a reason code of :data:`~ldp.payload.ORACLE_REASONS` and a detail) per refused report, None
        where ok."""
        ...


class ResultRow(Protocol):
    """A typed result row: a ``NamedTuple`` whose fields are an Avro schema's, plus the class attribute
    ``output`` naming its :class:`OutputSpec`."""

    output: ClassVar[str]

    def _asdict(self) -> dict[str, object]: ...


class OutputSpec(NamedTuple):
    """Where one kind of result row is written.

    Attributes:
        name: the rows' ``output`` (``"estimates"``, ``"answers"``, ``"models"``).
        schema: Avro schema of the rows (``schemas/<schema>.avsc``).
        subdir: directory under the job's output (``""``: the output itself).
        prefix: file name prefix (``OUT/<subdir>/<prefix>-<window>-paneNNNNN-...``).
        to_json: the JSON Lines form of a record beyond :func:`json_record` (None: just that).
        top_json: ``(record, max_values) -> record``: the JSON Lines form holding at most ``max_values``
            of the row's values (the writer's ``--jsonl_max_values``; None: rows are written whole).
    """

    name: str
    schema: str
    subdir: str
    prefix: str
    to_json: Callable[[Record], Record] | None = None
    top_json: Callable[[Record, int], Record] | None = None


class WindowInfo(NamedTuple):
    """The event-time window and pane a finalize runs for (milliseconds; ``None`` bounds: global)."""

    start_ms: int | None = None
    end_ms: int | None = None
    pane_timing: str = "UNKNOWN"  # EARLY, ON_TIME, LATE, UNKNOWN
    pane_index: int = 0
    is_last_pane: bool = True


GLOBAL_WINDOW = WindowInfo()


class Aggregator(Protocol[Acc]):
    """What the aggregation stack needs from a kind of task (see the module docstring).

    Attributes:
        task: the parsed task (``task_id``, ``schema_version``, ``n_groups`` are read by the validator).
        outputs: the kinds of result row :meth:`finalize` produces.
        uniform_oracle: every group validates with ``validation_oracle(0)`` (frequency tasks), so a batch
            is validated in one pass instead of once per group present.
    """

    task: Task
    outputs: tuple[OutputSpec, ...]
    uniform_oracle: bool

    def validation_oracle(self, group: int) -> ValidationOracle: ...

    def create_accumulator(self, group: int) -> Acc: ...

    def add(self, group: int, acc: Acc, reports: Reports) -> Acc: ...

    def merge(self, group: int, accs: Sequence[Acc]) -> Acc: ...

    def finalize(self, accs: Mapping[int, Acc], window: WindowInfo) -> list[ResultRow]:
        """All post-processing of one window and pane: ``{group: accumulator}`` (groups with at least one
        report) -> result rows."""
        ...


class WindowSequence(Protocol):
    """Finalizes windows IN ORDER OF WINDOW START, carrying a state from one window to the next.

    The stack calls :meth:`initial_state` once per task, then :meth:`step` once per finalized window (only
    its on-time or batch pane) with the state the previous step returned. ``step`` returns the new state,
    the window's result rows (written like ``finalize``'s) and a publication: a JSON-able dict (keys
    ``task_id``, ``generation`` (windows finalized so far, from 1), ``level`` (what the next window's
    clients report at), ``window_end`` (ms or None), plus the kind's own) or None (nothing to publish).

    A sequence resumed from an earlier run's publication may carry ``resumed_window_end`` (ms): the stack
    then treats every window ending at or before it as already stepped (late, dropped), so a replay cannot
    fork the state (:func:`transforms.sequence.resumed_closed` reads it with a default of None).
    """

    def initial_state(self) -> Any:
        """The state before the first window (picklable)."""
        ...

    def step(
        self, state: Any, accs: Mapping[int, Any], window: WindowInfo
    ) -> tuple[Any, list[ResultRow], Mapping[str, Any] | None]:
        """``(new state, the window's rows, the publication or None)`` of one window's
        ``{group: accumulator}`` (groups with reports)."""
        ...


class TaskAggregator:
    """What the built-in aggregators share: the task, refused unless it is of the class's ``kind``, and its
    mechanism (:meth:`build_mechanism`: ``task.make_mechanism()`` unless overridden), built on first use
    and left out of the pickle (workers rebuild it from the small task). Accumulators are the mechanism's
    own, the same for every group, unless a subclass says otherwise."""

    kind: ClassVar[str]

    def __init__(self, task: Task) -> None:
        if getattr(task, "kind", None) != self.kind:
            raise ValueError(f"task {task.task_id!r} is a {task.kind} task, not a {self.kind} task")
        self.task = task
        self._mech: Any = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_mech": None}

    def build_mechanism(self) -> Any:
        return self.task.make_mechanism()  # type: ignore[attr-defined]

    @property
    def mechanism(self) -> Any:
        if self._mech is None:
            self._mech = self.build_mechanism()
        return self._mech

    def create_accumulator(self, group: int) -> Any:
        return self.mechanism.create_accumulator()

    def add(self, group: int, acc: Any, reports: Reports) -> Any:
        return self.mechanism.add(acc, reports)

    def merge(self, group: int, accs: Sequence[Any]) -> Any:
        return self.mechanism.merge(list(accs))

    def window_sequence(self) -> WindowSequence | None:
        """The ordered finalize of a task whose windows depend on each other (:class:`WindowSequence`);
        None (the default): every window is finalized on its own by ``finalize``."""
        return None


@dataclasses.dataclass
class GroupAccumulators:
    """The accumulator of a whole task: ``{group: accumulator}`` and ``{group: reports added}``.

    A sparse tuple indexed by group: only groups that received reports hold an accumulator, so adding a
    batch costs the same whatever ``n_groups`` is. Mutated in place by :func:`accumulate` and
    :func:`merge_all` (Beam allows a CombineFn to mutate its first accumulator).
    """

    accs: dict[int, object] = dataclasses.field(default_factory=dict)
    counts: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def n_reports(self) -> int:
        return sum(self.counts.values())


def accumulate(agg: Aggregator, into: GroupAccumulators, group: int, reports: Reports) -> GroupAccumulators:
    """Adds one batch of ``group``'s reports to a task accumulator (returns it)."""
    acc = into.accs.get(group)
    if acc is None:
        acc = agg.create_accumulator(group)
    into.accs[group] = agg.add(group, acc, reports)
    into.counts[group] = into.counts.get(group, 0) + len(reports)
    return into


def merge_all(agg: Aggregator, parts: Iterable[GroupAccumulators]) -> GroupAccumulators:
    """Merges task accumulators group by group (``agg.merge`` per group present in several parts)."""
    parts = list(parts)
    if not parts:
        return GroupAccumulators()
    out = parts[0]
    by_group: dict[int, list[object]] = {}
    for part in parts[1:]:
        for g, acc in part.accs.items():
            by_group.setdefault(g, []).append(acc)
            out.counts[g] = out.counts.get(g, 0) + part.counts[g]
    for g, accs in by_group.items():
        if g in out.accs:
            accs = [out.accs[g], *accs]
        out.accs[g] = accs[0] if len(accs) == 1 else agg.merge(g, accs)
    return out


def finalize_window(
    agg: Aggregator, accs: GroupAccumulators, window: WindowInfo = GLOBAL_WINDOW
) -> list[ResultRow]:
    """``agg.finalize`` over the groups with reports (none: no rows)."""
    present = {g: a for g, a in accs.accs.items() if accs.counts.get(g, 0) > 0}
    if not present:
        return []
    return agg.finalize(dict(sorted(present.items())), window)


def make_aggregator(task: Task, **job: object) -> Aggregator:
    """The aggregator of a parsed task, from its kind's registry entry (``ldp.kinds``); ``job`` holds the
    job's own parameters (frequency: ``postprocess``; range: ``queries``; batch_queries: ``workload``,
    ``noise_seed``; sparse: ``items``)."""
    from ldp.kinds import make_aggregator as _make

    return _make(task, **job)


# ------------------------------------------------------------------------------------------------------------
# JSON Lines form of records (shared by every output)
# ------------------------------------------------------------------------------------------------------------


def iso_ms(ms: int | None) -> str | None:
    """Milliseconds since the epoch -> ISO-8601 UTC with milliseconds and ``Z`` (None stays None)."""
    if ms is None:
        return None
    import datetime as _dt

    t = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_safe(x: object) -> object:
    """Replaces non-finite floats by None, recursively (so every line is strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def from_iso(text: str | None) -> int | None:
    """Inverse of :func:`iso_ms`."""
    if text is None:
        return None
    import datetime as _dt

    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(round(t.timestamp() * 1000))


def json_record(rec: Record) -> Record:
    """The JSON Lines form of any output record: ``window_start`` / ``window_end`` as ISO-8601 UTC strings
    (null: the global window), non-finite floats as null."""
    out = {k: json_safe(v) for k, v in rec.items()}
    for k in ("window_start", "window_end"):
        if k in rec:
            out[k] = iso_ms(rec[k])  # type: ignore[arg-type]
    return out
