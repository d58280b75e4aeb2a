"""Beam composites of the multi-dimensional range-query job (Yang et al., VLDB 2021, on Beam).

The job follows the three pieces of every mechanism (``docs/range_queries.md``):

``Validate``  record batches (from :class:`transforms.io.ReadReportFiles`) -> timestamped
              ``((task_id, group), (group, Reports))`` plus dead letters. Each record is checked against
              the task (schema version, task id, event time, ``group`` in ``[0, n_groups)``) and its payload
              against *its group's* oracle (``oracle.validate``), by the shared
              :class:`transforms.records.ReportValidator` run once per group present in the batch.
              Counters ``ldp/reports_read``, ``ldp/reports_accepted``, ``ldp/reports_rejected`` and
              ``ldp/rejected_<reason>`` (the frequency job's names, so ``job_counts`` reads both).
``Window``    event-time windows (:class:`transforms.frequency.WindowReports`).
``Combine``   :class:`RangeGroupCombineFn` per ``(task_id, group)``: a thin adapter over the mechanism's
              per-group accumulators (``create_accumulator(g)``, ``add(g, acc, reports)``,
              ``merge(g, accs)``), fed with numpy Reports batches, never single reports.
``Gather``    all groups' accumulators of a window under one key (the task id), ``GroupByKey``.
``Finalize``  :class:`FinalizeRangeWindow`: ``mechanism.finalize`` once per window and pane (estimates,
              Norm-Sub, consistency, response matrices), then the query answers and the model record.

Because the accumulators are exact integer statistics, the pipeline's answers equal an in-memory
``mechanism.finalize`` over the same reports bit for bit.

Outputs (see ``docs/range_pipeline.md``): answers as JSON Lines and Avro (``schemas/range_answer.avsc``),
models as JSON Lines and Avro (``schemas/range_model.avsc``) under ``OUT/models/``; the model JSON lines
answer new queries with :func:`answer_from_model_records`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import glob
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
from apache_beam.io import fileio
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as bw

import schemas
from ldp.rangequery.base import FORMAT_VERSION, RangeMechanism, RangeModel, model_from_dict
from ldp.rangequery.queries import RangeQuery, parse_queries
from ldp.reports import Reports
from ldp.task import RangeTask, WindowConfig, load_task, parse_task
from transforms.frequency import WindowReports
from transforms.io import COUNTER_NAMESPACE
from transforms.records import REASONS, ReportValidator, split_by_group_and_granule, window_granule_ms

__all__ = [
    "MODEL_FILE_VERSION",
    "RangeTaskSpec",
    "load_range_task",
    "load_queries",
    "validation_oracle",
    "RangeValidated",
    "RangeReportValidator",
    "RangeGroupCombineFn",
    "FinalizeRangeWindow",
    "ValidateRangeReports",
    "RangeQueryAggregation",
    "WriteRangeAnswers",
    "WriteRangeModels",
    "answer_records",
    "model_record",
    "answer_to_json",
    "model_to_json",
    "answer_from_model_records",
    "read_model_records",
    "range_schema",
]

#: Version of the model-record wrapper written under ``OUT/models/`` (the model itself carries
#: ``format_version`` of ``ldp.rangequery``).
MODEL_FILE_VERSION = 1

_PANE_TIMING = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}


# ------------------------------------------------------------------------------------------------------------
# schemas of this job (files in the schemas package, loaded here: schemas.SCHEMA_NAMES lists only the
# frequency job's three)
# ------------------------------------------------------------------------------------------------------------


@functools.cache
def range_schema(name: str) -> dict[str, Any]:
    """Parsed ``schemas/<name>.avsc`` (``range_answer`` or ``range_model``; cached, do not mutate)."""
    if name not in ("range_answer", "range_model"):
        raise ValueError(f"unknown range-query schema {name!r}")
    text = resources.files(schemas).joinpath(f"{name}.avsc").read_text(encoding="utf-8")
    return fastavro.parse_schema(json.loads(text))


# ------------------------------------------------------------------------------------------------------------
# task and queries
# ------------------------------------------------------------------------------------------------------------


class RangeTaskSpec:
    """A range task as the shared report readers and validators see it.

    :class:`transforms.records.ReportValidator` and :class:`transforms.io.ReadReportFiles` take a task with
    ``task_id``, ``schema_version``, ``n_groups`` and ``make_oracle()``; this adapter provides them for a
    :class:`ldp.rangequery.registry.RangeTask` (``make_oracle`` returns a view of the payload fields shared
    by all groups, used only to pick the fast column decoder's parameters). It pickles as the task alone;
    the mechanism is rebuilt lazily on each worker.

    Args:
        task: the parsed range task.
        window: window defaults (the task file's optional ``window`` object).
        schema_version: report schema version the clients write.
    """

    def __init__(
        self,
        task: RangeTask,
        window: WindowConfig | None = None,
        schema_version: int = schemas.SCHEMA_VERSION,
    ) -> None:
        self.task = task
        self.window = window or WindowConfig()
        self.schema_version = int(schema_version)
        self._mech: RangeMechanism | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "window": self.window,
            "schema_version": self.schema_version,
            "_mech": None,
        }

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def mechanism(self) -> RangeMechanism:
        if self._mech is None:
            self._mech = self.task.make_mechanism()
        return self._mech

    @property
    def n_groups(self) -> int:
        return self.mechanism.n_groups

    @property
    def method(self) -> str:
        return self.task.mechanism

    def make_oracle(self) -> Any:
        """Payload view for :func:`transforms.records.fast_decode_params` (see the class docstring)."""
        return _FastDecodeView(self.mechanism)


def load_range_task(path: str) -> RangeTaskSpec:
    """Reads a range task file (``ldp.task.load_task(path, kind="range")``)."""
    task = load_task(path, kind="range")
    return RangeTaskSpec(task, task.window, task.schema_version)


def load_queries(path: str, task: RangeTask) -> tuple[list[RangeQuery], list[dict[str, list[int]]]]:
    """Reads a query file (JSON list of ``{attribute: [lo, hi]}``) for a task.

    Returns:
        ``(queries, canonical JSON forms)``.

    Raises:
        ValueError: naming the file and the query (index and content) for any bad query.
    """
    with open(path, encoding="utf-8") as fh:
        try:
            obj = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON: {exc}") from None
    try:
        queries = parse_queries(obj, task.attribute_names, task.domain_sizes)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not queries:
        raise ValueError(f"{path}: the query list is empty")
    return queries, [q.to_json(task.attribute_names) for q in queries]


# ------------------------------------------------------------------------------------------------------------
# validation: the shared ReportValidator once per group, each with its group's oracle
# ------------------------------------------------------------------------------------------------------------


class _NoPayloadOracle:
    """Validation view of a group whose reports carry no information (Uni): ``value`` must be 0."""

    name = "none"
    report_fields = ("values",)
    d = 1

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.values is None:
            reasons[:] = "missing field(s) values for none"
            return np.zeros(n, dtype=bool), reasons
        bad = np.asarray(reports.values) != 0
        reasons[bad] = "value outside [0, 1)"
        return ~bad, reasons


def validation_oracle(mech: RangeMechanism, group: int) -> Any:
    """The object whose ``report_fields`` / ``validate`` check the payload of ``group``'s reports."""
    o = mech.group_oracle(group)
    if hasattr(o, "report_fields") and hasattr(o, "validate"):
        return o
    return _NoPayloadOracle()


class _FastDecodeView:
    """Payload fields of all groups; ``bits`` / ``items`` only when every group using them agrees on size."""

    name = "range"

    def __init__(self, mech: RangeMechanism) -> None:
        fields: set[str] = set()
        bits_d: set[int] = set()
        items_k: set[int] = set()
        for g in range(mech.n_groups):
            o = validation_oracle(mech, g)
            fields |= set(o.report_fields)
            if "bits" in o.report_fields:
                bits_d.add(int(o.d))
            if "items" in o.report_fields:
                items_k.add(int(o.k))
        if len(bits_d) == 1:
            self.d = bits_d.pop()
        else:
            fields.discard("bits")  # sizes differ: the fast decoder declines such blocks (fastavro path)
        if len(items_k) == 1:
            self.k = items_k.pop()
        else:
            fields.discard("items")
        self.report_fields = tuple(sorted(fields))


@dataclasses.dataclass
class RangeValidated:
    """Validation result of one batch.

    Attributes:
        parts: ``(group, Reports, event_ms)`` of the accepted reports, one entry per group present.
        dead_letters: one dead-letter dict per refused record.
        reason_counts: refused records per reason.
        n_read: input records (= accepted + refused).
    """

    parts: list[tuple[int, Reports, np.ndarray]]
    dead_letters: list[dict[str, Any]]
    reason_counts: dict[str, int]
    n_read: int

    @property
    def n_accepted(self) -> int:
        return sum(len(t) for _, _, t in self.parts)


def _take_columns(cb: Any, rows: np.ndarray) -> Any:
    """Rows of a :class:`transforms.avro_fast.ColumnBatch` (any dataclass of row-aligned arrays/dicts)."""
    changes = {}
    for f in dataclasses.fields(cb):
        v = getattr(cb, f.name)
        if isinstance(v, np.ndarray):
            changes[f.name] = v[rows]
        elif isinstance(v, dict):
            changes[f.name] = {k: a[rows] for k, a in v.items()}
    return dataclasses.replace(cb, **changes)


class RangeReportValidator:
    """Validates report records of a range task: task checks, ``group`` range, then the group's oracle.

    The records of one batch are partitioned by their ``group`` field; each valid group's records go
    through a :class:`transforms.records.ReportValidator` built with that group's oracle, and records whose
    group is missing-typed or out of range go through group 0's, which refuses them (``invalid_group``, or
    an earlier reason: the first failing check names the reason).
    """

    def __init__(self, spec: RangeTaskSpec) -> None:
        self.spec = spec
        self._validators: dict[int, ReportValidator] = {}

    def _validator(self, group: int) -> ReportValidator:
        v = self._validators.get(group)
        if v is None:
            v = ReportValidator(self.spec, oracle=validation_oracle(self.spec.mechanism, group))
            self._validators[group] = v
        return v

    def validate(self, records: Any, source: str = "", *, at_ms: int | None = None) -> RangeValidated:
        """``records``: a list of record dicts or a ColumnBatch (see :mod:`transforms.avro_fast`)."""
        m = self.spec.n_groups
        is_list = isinstance(records, (list, tuple))
        n = len(records)
        if is_list:
            grp = np.fromiter(
                (
                    g if type(g) is int and 0 <= g < m else -1
                    for g in (r.get("group", 0) if type(r) is dict else None for r in records)
                ),
                dtype=np.int64,
                count=n,
            )
        else:
            grp = np.where((records.group >= 0) & (records.group < m), records.group, -1).astype(np.int64)
        parts: list[tuple[int, Reports, np.ndarray]] = []
        dead: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        uniq = np.unique(grp)
        for g in uniq.tolist():
            if len(uniq) == 1:
                sub = records
            else:
                rows = np.flatnonzero(grp == g)
                sub = [records[i] for i in rows] if is_list else _take_columns(records, rows)
            vb = self._validator(max(g, 0)).validate(sub, source, at_ms=at_ms)
            dead.extend(vb.dead_letters)
            for k, c in vb.reason_counts.items():
                counts[k] = counts.get(k, 0) + c
            if vb.n_accepted:
                # accepted rows all carry group g (a record with another group cannot pass g's checks)
                assert g >= 0 and bool(np.all(vb.groups == g)), "validator accepted a foreign group"
                parts.append((int(g), vb.reports, vb.event_ms))
        return RangeValidated(parts, dead, counts, n)


class _ValidateRangeFn(beam.DoFn):
    def __init__(self, spec: RangeTaskSpec, granule_ms: int | None) -> None:
        self.spec = spec
        self.granule_ms = granule_ms
        self._validator: RangeReportValidator | None = None
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.accepted = Metrics.counter(COUNTER_NAMESPACE, "reports_accepted")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.per_reason = {r: Metrics.counter(COUNTER_NAMESPACE, f"rejected_{r}") for r in REASONS}

    def setup(self) -> None:
        self._validator = RangeReportValidator(self.spec)

    def process(self, element):
        source, records = element
        if self._validator is None:
            self.setup()
        vr = self._validator.validate(records, source)
        self.read.inc(vr.n_read)
        self.accepted.inc(vr.n_accepted)
        self.rejected.inc(len(vr.dead_letters))
        for reason, c in vr.reason_counts.items():
            counter = self.per_reason.get(reason) or Metrics.counter(COUNTER_NAMESPACE, f"rejected_{reason}")
            counter.inc(c)
        for dl in vr.dead_letters:
            yield beam.pvalue.TaggedOutput("dead_letter", dl)
        counts = {"read": vr.n_read, "accepted": vr.n_accepted, "rejected": len(vr.dead_letters)}
        counts.update({f"rejected_{k}": v for k, v in vr.reason_counts.items()})
        yield beam.pvalue.TaggedOutput("counts", counts)
        tid = self.spec.task_id
        for g, reports, event_ms in vr.parts:
            groups = np.full(len(event_ms), g, dtype=np.int64)
            for _, ts_ms, rows in split_by_group_and_granule(groups, event_ms, self.granule_ms):
                batch = reports if len(rows) == len(reports) else reports.take(rows)
                yield bw.TimestampedValue(((tid, g), (g, batch)), ts_ms / 1000.0)


class ValidateRangeReports(beam.PTransform):
    """Record batches -> ``((task_id, group), (group, Reports))`` by event time (main ``reports``), plus
    ``dead_letter`` and per-batch ``counts`` outputs.

    Each output batch holds one group's reports whose event times fall into one window granule, so
    assigning the batch to windows by its timestamp is exact for every report in it.
    """

    def __init__(self, spec: RangeTaskSpec, window: WindowConfig) -> None:
        super().__init__()
        self.spec = spec
        self.granule_ms = window_granule_ms(window.size_s, window.period_s)

    def expand(self, batches):
        return batches | "Check" >> beam.ParDo(_ValidateRangeFn(self.spec, self.granule_ms)).with_outputs(
            "dead_letter", "counts", main="reports"
        )


# ------------------------------------------------------------------------------------------------------------
# combine per group, finalize per window
# ------------------------------------------------------------------------------------------------------------


class RangeGroupCombineFn(beam.CombineFn):
    """``CombineFn`` over ``(group, Reports)`` batches of one key ``(task_id, group)``.

    The accumulator is ``None`` (nothing yet) or ``(group, acc, n)`` with ``acc`` the mechanism's
    fixed-size accumulator of that group (``RangeMechanism.create_accumulator / add / merge``) and ``n`` the
    number of reports in it; a CombineFn does not see its key, so the group travels with the values.
    Merging an empty list (the DirectRunner does on empty panes) gives ``None``, which
    :class:`FinalizeRangeWindow` skips.
    """

    def __init__(self, spec: RangeTaskSpec) -> None:
        super().__init__()
        self.spec = spec

    def create_accumulator(self) -> Any:
        return None

    def add_input(self, accumulator: Any, element: tuple[int, Reports]) -> Any:
        g, reports = element
        mech = self.spec.mechanism
        if accumulator is None:
            accumulator = (g, mech.create_accumulator(g), 0)
        elif accumulator[0] != g:
            raise ValueError(f"reports of group {g} combined under group {accumulator[0]}")
        return (g, mech.add(g, accumulator[1], reports), accumulator[2] + len(reports))

    def add_inputs(self, accumulator: Any, elements: Iterable[tuple[int, Reports]]) -> Any:
        for e in elements:
            accumulator = self.add_input(accumulator, e)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        accs = [a for a in accumulators if a is not None]
        if not accs:
            return None
        g = accs[0][0]
        if any(a[0] != g for a in accs):
            raise ValueError(f"cannot merge accumulators of groups {sorted({a[0] for a in accs})}")
        if len(accs) == 1:
            return accs[0]
        return (g, self.spec.mechanism.merge(g, [a[1] for a in accs]), sum(a[2] for a in accs))

    def extract_output(self, accumulator: Any) -> Any:
        return accumulator

    def compact(self, accumulator: Any) -> Any:
        return accumulator


def _ms(ts: Any) -> int:
    return int(ts.micros // 1000)


def _window_ms(window: Any) -> tuple[int | None, int | None]:
    if window is None or not hasattr(window, "start") or isinstance(window, bw.GlobalWindow):
        return None, None
    return _ms(window.start), _ms(window.end)


def _pane(pane: Any) -> tuple[str, int]:
    if pane is None:
        return "UNKNOWN", 0
    return _PANE_TIMING.get(int(pane.timing), "UNKNOWN"), int(pane.index)


def answer_records(
    task: RangeTask,
    model: RangeModel,
    queries: Sequence[RangeQuery],
    query_json: Sequence[Mapping[str, Sequence[int]]],
    *,
    window_start: int | None = None,
    window_end: int | None = None,
    pane_timing: str = "UNKNOWN",
    pane_index: int = 0,
) -> list[dict[str, Any]]:
    """One answer record (``schemas/range_answer.avsc``) per query: ``model.answer`` / ``answer_std``."""
    answers = np.asarray(model.answer(queries), dtype=np.float64)
    std = model.answer_std(queries)
    stds: list[float | None] = [None] * len(queries)
    if std is not None:
        stds = [float(s) if math.isfinite(s) else None for s in np.asarray(std, dtype=np.float64).tolist()]
    out = []
    for i, (a, s) in enumerate(zip(answers.tolist(), stds)):
        out.append(
            {
                "task_id": task.task_id,
                "schema_version": schemas.SCHEMA_VERSION,
                "window_start": window_start,
                "window_end": window_end,
                "pane_timing": pane_timing,
                "pane_index": int(pane_index),
                "query_index": i,
                "query": {k: [int(v[0]), int(v[1])] for k, v in query_json[i].items()},
                "answer": float(a),
                "std": s,
                "method": task.mechanism,
                "n_reports": int(model.n_users),
                "model_format_version": FORMAT_VERSION,
            }
        )
    return out


def _finite(x: Any) -> Any:
    """Replaces non-finite floats by None, recursively (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _dumps(obj: Any) -> str:
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), allow_nan=False)


def model_record(
    task: RangeTask,
    model: RangeModel,
    *,
    window_start: int | None = None,
    window_end: int | None = None,
    pane_timing: str = "UNKNOWN",
    pane_index: int = 0,
) -> dict[str, Any]:
    """The model of one window and pane (``schemas/range_model.avsc``): task and model as JSON text."""
    d = model.to_dict()
    return {
        "task_id": task.task_id,
        "schema_version": schemas.SCHEMA_VERSION,
        "window_start": window_start,
        "window_end": window_end,
        "pane_timing": pane_timing,
        "pane_index": int(pane_index),
        "method": task.mechanism,
        "n_reports": int(model.n_users),
        "format_version": int(d.get("format_version", FORMAT_VERSION)),
        "task_json": json.dumps(task.to_dict(), sort_keys=True),
        "model_json": _dumps(d),
    }


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    t = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _from_iso(text: str | None) -> int | None:
    if text is None:
        return None
    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(round(t.timestamp() * 1000))


def answer_to_json(rec: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Lines form of an answer record: window bounds as ISO-8601 UTC strings (null: global window)."""
    out = dict(rec)
    out["window_start"] = _iso(rec["window_start"])
    out["window_end"] = _iso(rec["window_end"])
    return out


def model_to_json(rec: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Lines form of a model record (``OUT/models/models-*.jsonl``): task and model as objects."""
    return {
        "model_file_version": MODEL_FILE_VERSION,
        "task_id": rec["task_id"],
        "schema_version": rec["schema_version"],
        "window_start": _iso(rec["window_start"]),
        "window_end": _iso(rec["window_end"]),
        "pane_timing": rec["pane_timing"],
        "pane_index": rec["pane_index"],
        "method": rec["method"],
        "n_reports": rec["n_reports"],
        "format_version": rec["format_version"],
        "task": json.loads(rec["task_json"]),
        "model": json.loads(rec["model_json"]),
    }


def _group_accumulators(mech: RangeMechanism, items: Iterable[Any], accumulating: bool) -> dict[int, Any]:
    """``{group: acc}`` of one ``Gather`` pane from its ``(group, acc[, combine pane index, n reports])``
    items.

    In batch a window has one pane and one accumulator per group (merged anyway if several). In
    streaming the per-group ``Combine`` fires once per pane and ``Gather`` (a second ``GroupByKey`` with
    the continuation trigger and the same accumulation mode) collects those outputs: discarding panes
    carry only new deltas, which add up; accumulating panes re-deliver every earlier ``Combine`` pane of
    the group next to its latest, cumulative one, so only the latest counts: the highest pane index, then
    (runners that do not carry pane info report index 0 for every pane) the most reports.
    """
    by_group: dict[int, Any] = {}
    rank: dict[int, tuple[int, int]] = {}
    for item in items:
        if item is None:
            continue
        g, acc = item[0], item[1]
        r = (int(item[2]) if len(item) > 2 else 0, int(item[3]) if len(item) > 3 else 0)
        if g not in by_group:
            by_group[g], rank[g] = acc, r
        elif accumulating:
            if r > rank[g]:  # equal rank: the same cumulative pane fired again; keep one
                by_group[g], rank[g] = acc, r
        else:
            by_group[g] = mech.merge(g, [by_group[g], acc])
    return by_group


class _KeyByTask(beam.DoFn):
    """``((task_id, group), (group, acc, n))`` -> ``(task_id, (group, acc, Combine pane index, n))``."""

    def process(self, kv, pane=beam.DoFn.PaneInfoParam):
        (task_id, _group), value = kv
        g, acc = value[0], value[1]
        n = int(value[2]) if len(value) > 2 else 0
        yield task_id, (g, acc, 0 if pane is None else int(pane.index), n)


class FinalizeRangeWindow(beam.DoFn):
    """``(task_id, [(group, acc[, combine pane index, n]), ...])`` of one window and pane -> answer records
    (main) and one model record (``models``): ``mechanism.finalize`` runs once here for all groups.

    Groups without reports in the window are finalized as empty (each method's documented fallback).
    ``accumulating``: the window's panes are cumulative (streaming ``--accumulating``); per group only the
    latest ``Combine`` pane is used (see :func:`_group_accumulators`).
    """

    def __init__(
        self,
        spec: RangeTaskSpec,
        query_json: Sequence[Mapping[str, Sequence[int]]],
        accumulating: bool = False,
    ) -> None:
        self.spec = spec
        self.query_json = [dict(q) for q in query_json]
        self.accumulating = bool(accumulating)
        self._queries: list[RangeQuery] | None = None
        self.models = Metrics.counter(COUNTER_NAMESPACE, "range_models")
        self.n_answers = Metrics.counter(COUNTER_NAMESPACE, "range_answers")
        self.finalize_ms = Metrics.distribution(COUNTER_NAMESPACE, "range_finalize_ms")

    def setup(self) -> None:
        t = self.spec.task
        self._queries = parse_queries(self.query_json, t.attribute_names, t.domain_sizes)

    def process(self, element, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        import time

        if self._queries is None:
            self.setup()
        _task_id, group_accs = element
        mech = self.spec.mechanism
        by_group = _group_accumulators(mech, group_accs, self.accumulating)
        if not by_group:
            return
        t0 = time.perf_counter()
        model = mech.finalize(by_group)
        self.finalize_ms.update(int((time.perf_counter() - t0) * 1000))
        ws, we = _window_ms(window)
        timing, index = _pane(pane)
        meta = {"window_start": ws, "window_end": we, "pane_timing": timing, "pane_index": index}
        self.models.inc()
        yield beam.pvalue.TaggedOutput("models", model_record(self.spec.task, model, **meta))
        recs = answer_records(self.spec.task, model, self._queries, self.query_json, **meta)
        self.n_answers.inc(len(recs))
        yield from recs


class RangeQueryAggregation(beam.PTransform):
    """Record batches -> ``{"answers", "models", "dead_letter", "counts"}``.

    ``Validate`` -> ``Window`` -> ``Combine`` (per task and group) -> ``Gather`` (per task, i.e. per window)
    -> ``Finalize``; see the module docstring.
    """

    def __init__(
        self,
        spec: RangeTaskSpec,
        query_json: Sequence[Mapping[str, Sequence[int]]],
        window: WindowConfig | None = None,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.query_json = list(query_json)
        self.window = spec.window if window is None else window

    def expand(self, batches):
        v = batches | "Validate" >> ValidateRangeReports(self.spec, self.window)
        finalized = (
            v.reports
            | "Window" >> WindowReports(self.window)
            | "Combine" >> beam.CombinePerKey(RangeGroupCombineFn(self.spec))
            | "DropEmpty" >> beam.Filter(lambda kv: kv[1] is not None)
            | "KeyByTask" >> beam.ParDo(_KeyByTask())
            | "Gather" >> beam.GroupByKey()
            | "Finalize"
            >> beam.ParDo(
                FinalizeRangeWindow(self.spec, self.query_json, accumulating=self.window.accumulating)
            ).with_outputs("models", main="answers")
        )
        return {
            "answers": finalized.answers,
            "models": finalized.models,
            "dead_letter": v.dead_letter,
            "counts": v.counts,
        }


# ------------------------------------------------------------------------------------------------------------
# writing
# ------------------------------------------------------------------------------------------------------------


class _RangeAvroSink(fileio.FileSink):
    """``fileio`` sink writing dicts as an Avro object container with one of this job's schemas."""

    def __init__(self, schema_name: str) -> None:
        self.schema_name = schema_name
        self._writer = None

    def open(self, fh) -> None:
        self._writer = fastavro.write.Writer(fh, range_schema(self.schema_name))

    def write(self, record) -> None:
        self._writer.write(record)

    def flush(self) -> None:
        self._writer.flush()


def _sink_fn(schema_name: str):
    return lambda _destination: _RangeAvroSink(schema_name)


class _JsonLinesSink(fileio.TextSink):
    """``fileio`` sink writing records as JSON lines (``to_json`` then strict JSON)."""

    def __init__(self, to_json: Any) -> None:
        self.to_json = to_json

    def write(self, record) -> None:
        super().write(_dumps(self.to_json(record)))


def _pane_destination(rec: Mapping[str, Any]) -> str:
    return f"pane{int(rec['pane_index']):05d}"


def _pane_file_naming(prefix: str, suffix: str):
    """``PREFIX-<start>-<end>-paneNNNNN-SSSSS-of-NNNNN<suffix>`` (no window part for the global window):
    the destination is the record's pane (``fileio``'s own naming leaves the pane out in Beam 2.77)."""

    def _inner(window, pane, shard_index, total_shards, compression, destination):
        parts = [prefix]
        if window is not None and not isinstance(window, bw.GlobalWindow):
            parts += [window.start.to_utc_datetime().isoformat(), window.end.to_utc_datetime().isoformat()]
        parts.append(str(destination))
        parts.append(f"{int(shard_index or 0):05d}-of-{int(total_shards or 1):05d}")
        return "-".join(parts) + suffix + (f".{compression}" if compression else "")

    return _inner


class _WriteJsonAndAvro(beam.PTransform):
    def __init__(
        self, path: str, prefix: str, schema_name: str, to_json: Any, per_pane: bool = False
    ) -> None:
        super().__init__()
        self.path = path
        self.prefix = prefix
        self.schema_name = schema_name
        self.to_json = to_json
        self.per_pane = per_pane

    def expand(self, records):
        to_json = self.to_json
        if self.per_pane:
            jsonl = records | "WriteJson" >> fileio.WriteToFiles(
                path=self.path,
                file_naming=_pane_file_naming(self.prefix, ".jsonl"),
                destination=_pane_destination,
                sink=lambda _dest: _JsonLinesSink(to_json),
                shards=1,
            )
            avro = records | "WriteAvro" >> fileio.WriteToFiles(
                path=self.path,
                file_naming=_pane_file_naming(self.prefix, ".avro"),
                destination=_pane_destination,
                sink=_sink_fn(self.schema_name),
                shards=1,
            )
            return {"jsonl": jsonl, "avro": avro}
        jsonl = (
            records
            | "ToJson" >> beam.Map(lambda r: _dumps(to_json(r)))
            | "WriteJson"
            >> fileio.WriteToFiles(
                path=self.path, file_naming=fileio.default_file_naming(self.prefix, ".jsonl"), shards=1
            )
        )
        avro = records | "WriteAvro" >> fileio.WriteToFiles(
            path=self.path,
            file_naming=fileio.default_file_naming(self.prefix, ".avro"),
            sink=_sink_fn(self.schema_name),
            shards=1,
        )
        return {"jsonl": jsonl, "avro": avro}


class WriteRangeAnswers(_WriteJsonAndAvro):
    """Answer records -> ``OUT/answers-*.jsonl`` and ``OUT/answers-*.avro`` (a file each per window).

    ``per_pane`` (streaming): one file per window *and pane*, ``answers-<start>-<end>-paneNNNNN-...``,
    so later panes never replace earlier ones.
    """

    def __init__(self, output_dir: str, per_pane: bool = False) -> None:
        super().__init__(output_dir, "answers", "range_answer", answer_to_json, per_pane)


class WriteRangeModels(_WriteJsonAndAvro):
    """Model records -> ``OUT/models/models-*.jsonl`` and ``OUT/models/models-*.avro`` (``per_pane``: as
    :class:`WriteRangeAnswers`)."""

    def __init__(self, output_dir: str, per_pane: bool = False) -> None:
        super().__init__(
            os.path.join(output_dir, "models"), "models", "range_model", model_to_json, per_pane
        )


# ------------------------------------------------------------------------------------------------------------
# answering new queries from saved models
# ------------------------------------------------------------------------------------------------------------


def read_model_records(pattern: str) -> list[dict[str, Any]]:
    """Model records (JSON form) from ``.jsonl`` / ``.json`` / ``.avro`` files matching a path or glob.

    A directory means its ``models-*.jsonl`` files (e.g. ``OUT/models``).
    """
    if os.path.isdir(pattern):
        pattern = os.path.join(pattern, "models-*.jsonl")
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise ValueError(f"no model file matches {pattern!r}")
    out: list[dict[str, Any]] = []
    for path in paths:
        if path.endswith(".avro"):
            with open(path, "rb") as fh:
                out.extend(model_to_json(r) for r in fastavro.reader(fh))
            continue
        with open(path, encoding="utf-8") as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{ln}: not JSON: {exc}") from None
                if not isinstance(rec, dict) or "model" not in rec or "task" not in rec:
                    raise ValueError(f"{path}:{ln}: not a model record (needs 'task' and 'model')")
                if rec.get("model_file_version", MODEL_FILE_VERSION) != MODEL_FILE_VERSION:
                    raise ValueError(
                        f"{path}:{ln}: model_file_version {rec.get('model_file_version')!r} is not "
                        f"supported (this code reads {MODEL_FILE_VERSION})"
                    )
                out.append(rec)
    out.sort(key=lambda r: (r["task_id"], r.get("window_start") or "", r.get("pane_index", 0)))
    return out


def answer_from_model_records(
    models: Sequence[Mapping[str, Any]], query_obj: Sequence[Mapping[str, Sequence[int]]]
) -> list[dict[str, Any]]:
    """Answers queries (the query-file JSON) with saved models; JSON-form answer records, like the job's.

    Raises:
        ValueError: naming the query for a bad query (checked against each model's task).
    """
    out: list[dict[str, Any]] = []
    for rec in models:
        task = parse_task(rec["task"])
        queries = parse_queries(query_obj, task.attribute_names, task.domain_sizes)
        qjson = [q.to_json(task.attribute_names) for q in queries]
        model = model_from_dict(rec["model"])
        recs = answer_records(
            task,
            model,
            queries,
            qjson,
            window_start=_from_iso(rec.get("window_start")),
            window_end=_from_iso(rec.get("window_end")),
            pane_timing=rec.get("pane_timing", "UNKNOWN"),
            pane_index=rec.get("pane_index", 0),
        )
        out.extend(answer_to_json(r) for r in recs)
    return out
