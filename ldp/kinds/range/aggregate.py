"""The aggregator of range-query tasks (HDG, TDG, CALM, HIO, LHIO, MSW, Uni; Yang et al., VLDB 2021).

* validation: group ``g``'s oracle (``mechanism.group_oracle(g)``; Uni's groups carry no payload and
  must report ``value`` 0, :class:`NoPayloadOracle`);
* accumulate: the mechanism's per-group accumulators (``create_accumulator(g)``, ``add(g, acc, reports)``,
  ``merge(g, accs)``);
* finalize: ``mechanism.finalize`` once per window and pane over all groups (estimates, Norm-Sub,
  consistency, response matrices ...), then one :class:`AnswerRow` per query of the job
  (``schemas/range_answer.avsc``) and one :class:`ModelRow` (``schemas/range_model.avsc``) holding the
  model, which answers new queries later (:func:`answer_from_model_records`). Every answer carries its std
  and a 95% interval valid for the published (clipped) answer (:func:`ldp.intervals.answer_interval`,
  ``docs/intervals.md``); answers and models carry the per-group report counts, so a window in which some
  group had no reports (its part of the model is a uniform guess) is flagged (``empty_groups``).
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ldp.aggregate import (
    OutputSpec,
    Record,
    ResultRow,
    TaskAggregator,
    ValidationOracle,
    WindowInfo,
    from_iso,
    iso_ms,
    json_record,
    json_safe,
)
from ldp.intervals import answer_interval
from ldp.kinds.range.task import RangeTask
from ldp.rangequery.base import FORMAT_VERSION, RangeModel
from ldp.rangequery.queries import RangeQuery, parse_queries
from ldp.rangequery.registry import model_from_dict
from ldp.rangequery.uni import NoPayloadOracle
from ldp.reports import Reports
from ldp.rows import pane_header
from ldp.task import parse_task

__all__ = [
    "MODEL_FILE_VERSION",
    "AnswerRow",
    "ModelRow",
    "ANSWERS",
    "MODELS",
    "NoPayloadOracle",
    "RangeAggregator",
    "load_queries",
    "answer_rows",
    "group_report_counts",
    "model_row",
    "model_json",
    "answer_from_model_records",
    "read_model_records",
]

#: Version of the model-record JSON wrapper written under ``OUT/models/`` (the model itself carries the
#: ``format_version`` of ``ldp.rangequery``).
MODEL_FILE_VERSION = 1


class AnswerRow(NamedTuple):
    """One query's answer in one window and pane (the fields of ``schemas/range_answer.avsc``).

    ``answer`` is the published (clipped to [0, 1] unless the task says otherwise) answer, ``std`` the
    standard deviation of the unclipped answer (how: ``ci_method``), ``ci_low`` / ``ci_high`` a 95%
    interval for the true answer containing the published one (None where the std is unknown or a group
    behind the model had no reports), ``group_reports`` the reports of each user group and
    ``empty_groups`` how many groups had none. The fields after ``model_format_version`` have defaults.
    """

    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    query_index: int
    query: dict[str, list[int]]
    answer: float
    std: float | None
    method: str
    n_reports: int
    model_format_version: int
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str | None = None
    group_reports: list[int] | None = None
    empty_groups: int | None = None
    is_last_pane: bool = True
    mechanism: str | None = None
    #: the row type (``schemas/range_answer.avsc``): readers dispatch on it (``ldp.kinds.row_kind``)
    row_schema: str | None = "range_answer"
    output = "answers"


class ModelRow(NamedTuple):
    """The finalized model of one window and pane (the fields of ``schemas/range_model.avsc``);
    ``group_reports`` / ``empty_groups`` as in :class:`AnswerRow` (defaults: rows written before them)."""

    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    method: str
    n_reports: int
    format_version: int
    task_json: str
    model_json: str
    group_reports: list[int] | None = None
    empty_groups: int | None = None
    is_last_pane: bool = True
    mechanism: str | None = None
    #: the row type (``schemas/range_model.avsc``): readers dispatch on it (``ldp.kinds.row_kind``)
    row_schema: str | None = "range_model"
    output = "models"


def _dumps(obj: object) -> str:
    return json.dumps(json_safe(obj), allow_nan=False)


def model_json(rec: Record) -> Record:
    """JSON Lines form of a model record (``OUT/models/models-*.jsonl``): task and model as objects."""
    return {
        "model_file_version": MODEL_FILE_VERSION,
        "task_id": rec["task_id"],
        "schema_version": rec["schema_version"],
        "window_start": iso_ms(rec["window_start"]),  # type: ignore[arg-type]
        "window_end": iso_ms(rec["window_end"]),  # type: ignore[arg-type]
        "pane_timing": rec["pane_timing"],
        "pane_index": rec["pane_index"],
        "method": rec["method"],
        "n_reports": rec["n_reports"],
        "format_version": rec["format_version"],
        "task": json.loads(str(rec["task_json"])),
        "model": json.loads(str(rec["model_json"])),
        "group_reports": rec.get("group_reports"),
        "empty_groups": rec.get("empty_groups"),
        "is_last_pane": rec.get("is_last_pane", True),
        "mechanism": rec.get("mechanism") or rec["method"],
    }


ANSWERS = OutputSpec("answers", "range_answer", "", "answers", None)
MODELS = OutputSpec("models", "range_model", "models", "models", model_json)


def load_queries(path: str | Path, task: RangeTask) -> list[RangeQuery]:
    """Reads a query file (JSON list of ``{attribute: [lo, hi]}``) for a task.

    Raises:
        ValueError: naming the file and the query (index and content) for any bad query.
    """
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    try:
        queries = parse_queries(obj, task.attribute_names, task.domain_sizes)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not queries:
        raise ValueError(f"{path}: the query list is empty")
    return queries


def group_report_counts(n_groups: int, accs: Mapping[int, object]) -> list[int]:
    """Reports per group (0 for a group without an accumulator); accumulators have ``n`` (or ``["n"]``)."""
    out = [0] * int(n_groups)
    for g, acc in accs.items():
        n = getattr(acc, "n", None)
        if n is None and isinstance(acc, Mapping):
            n = acc.get("n", 0)
        if 0 <= int(g) < n_groups:
            out[int(g)] = int(n or 0)
    return out


def _answer_intervals(
    model: RangeModel,
    queries: Sequence[RangeQuery],
    published: np.ndarray,
    raw: np.ndarray,
    empty: int | None,
) -> tuple[list[float | None], list[float | None], list[float | None], list[str | None]]:
    """Per query: the std (None where unknown), the 95% interval around the unclipped answer and its
    ``ci_method`` (None without an interval: no std, or a window with an ``empty`` group)."""
    nones: list[None] = [None] * len(queries)
    stds: list[float | None] = list(nones)
    lows: list[float | None] = list(nones)
    highs: list[float | None] = list(nones)
    methods: list[str | None] = list(nones)
    std = model.answer_std(queries)
    if std is None:
        return stds, lows, highs, methods
    sd = np.asarray(std, dtype=np.float64)
    stds = [float(s) if math.isfinite(s) else None for s in sd.tolist()]
    if empty:
        sd = np.full_like(sd, np.nan)
    lo, hi = answer_interval(published, np.where(np.isfinite(sd), sd, np.nan), raw)
    std_method = getattr(model, "std_method", None)
    for i, q in enumerate(queries):
        if math.isfinite(lo[i]) and math.isfinite(hi[i]):
            lows[i], highs[i] = float(lo[i]), float(hi[i])
            how = std_method(q.dimension) if callable(std_method) else "closed-form"
            methods[i] = f"normal-clipped:{how}"
    return stds, lows, highs, methods


def answer_rows(
    task: RangeTask,
    model: RangeModel,
    queries: Sequence[RangeQuery],
    window: WindowInfo,
    group_reports: Sequence[int] | None = None,
) -> list[AnswerRow]:
    """One :class:`AnswerRow` per query: ``model.answer`` / ``model.answer_std`` and the interval of
    :func:`ldp.intervals.answer_interval` around the unclipped answer (``ci_method``: ``normal-clipped``
    plus how the std was made: ``closed-form``, ``simulated-wu`` (lambda > 2), ``simulated-inference``
    (LHIO), ``bootstrap-em`` (MSW)). A window with an empty group gets no interval (the group's part of
    the model is a guess; its std is inf where the method tracks it)."""
    published = np.asarray(model.answer(queries), dtype=np.float64)
    try:
        raw = np.asarray(model.answer(queries, clip=False), dtype=np.float64)  # type: ignore[call-arg]
    except TypeError:
        raw = published
    gr = None if group_reports is None else [int(x) for x in group_reports]
    empty = None if gr is None else sum(1 for x in gr if x == 0)
    stds, lows, highs, methods = _answer_intervals(model, queries, published, raw, empty)
    names = task.attribute_names
    header = pane_header(task, window, row_schema="range_answer")
    return [
        AnswerRow(
            **header,  # type: ignore[arg-type]
            query_index=i,
            query={k: [int(v[0]), int(v[1])] for k, v in q.to_json(names).items()},
            answer=float(a),
            std=s,
            method=task.mechanism,
            n_reports=int(model.n_users),
            model_format_version=FORMAT_VERSION,
            ci_low=lows[i],
            ci_high=highs[i],
            ci_method=methods[i],
            group_reports=gr,
            empty_groups=empty,
        )
        for i, (q, a, s) in enumerate(zip(queries, published.tolist(), stds))
    ]


def model_row(
    task: RangeTask, model: RangeModel, window: WindowInfo, group_reports: Sequence[int] | None = None
) -> ModelRow:
    """The :class:`ModelRow` of one window and pane: task and model as JSON text."""
    d = model.to_dict()
    gr = None if group_reports is None else [int(x) for x in group_reports]
    return ModelRow(
        **pane_header(task, window, row_schema="range_model"),  # type: ignore[arg-type]
        method=task.mechanism,
        n_reports=int(model.n_users),
        format_version=int(d.get("format_version", FORMAT_VERSION)),
        task_json=json.dumps(task.to_dict(), sort_keys=True),
        model_json=_dumps(d),
        group_reports=gr,
        empty_groups=None if gr is None else sum(1 for x in gr if x == 0),
    )


class RangeAggregator(TaskAggregator):
    """:class:`ldp.aggregate.Aggregator` of a :class:`~ldp.kinds.range.task.RangeTask` answering ``queries``.

    The mechanism is built lazily and not pickled (workers rebuild it from the small task).
    """

    kind = "range"
    outputs = (ANSWERS, MODELS)
    uniform_oracle = False

    def __init__(self, task: RangeTask, queries: Sequence[RangeQuery] = ()) -> None:
        super().__init__(task)
        self.queries = list(queries)

    def validation_oracle(self, group: int) -> ValidationOracle:
        o = self.mechanism.group_oracle(group)
        if hasattr(o, "report_fields") and hasattr(o, "validate"):
            return o
        return NoPayloadOracle()

    def create_accumulator(self, group: int) -> object:
        return self.mechanism.create_accumulator(group)

    def add(self, group: int, acc: object, reports: Reports) -> object:
        return self.mechanism.add(group, acc, reports)

    def merge(self, group: int, accs: Sequence[object]) -> object:
        return self.mechanism.merge(group, accs)

    def finalize(self, accs: Mapping[int, object], window: WindowInfo) -> list[ResultRow]:
        """``mechanism.finalize`` once for all groups, then the model row and one answer row per query."""
        model = self.mechanism.finalize(accs)
        counts = group_report_counts(self.mechanism.n_groups, accs)
        rows: list[ResultRow] = [model_row(self.task, model, window, counts)]
        if self.queries:
            rows.extend(answer_rows(self.task, model, self.queries, window, counts))
        return rows


def answer_from_model_records(
    models: Sequence[Mapping[str, object]], query_obj: Sequence[Mapping[str, Sequence[int]]]
) -> list[Record]:
    """Answers queries (the query-file JSON) with saved models (their JSON Lines form); JSON-form answer
    records like the job's.

    Raises:
        ValueError: naming the query for a bad query (checked against each model's task).
    """
    out: list[Record] = []
    for rec in models:
        task = parse_task(rec["task"], source="model record", kind="range")
        queries = parse_queries(query_obj, task.attribute_names, task.domain_sizes)
        model = model_from_dict(rec["model"])  # type: ignore[arg-type]
        window = WindowInfo(
            start_ms=from_iso(rec.get("window_start")),  # type: ignore[arg-type]
            end_ms=from_iso(rec.get("window_end")),  # type: ignore[arg-type]
            pane_timing=str(rec.get("pane_timing", "UNKNOWN")),
            pane_index=int(rec.get("pane_index", 0)),  # type: ignore[arg-type]
        )
        counts = rec.get("group_reports")
        rows = answer_rows(task, model, queries, window, counts)  # type: ignore[arg-type]
        out.extend(json_record(r._asdict()) for r in rows)
    return out


def read_model_records(pattern: str) -> list[Record]:
    """Model records (their JSON Lines form) from ``.jsonl`` / ``.json`` / ``.avro`` files matching a path
    or glob; a directory means its ``models-*.jsonl`` files (e.g. ``OUT/models``). Local files only.

    Raises:
        ValueError: no file matches, or a line is not a model record of a supported version.
    """
    if os.path.isdir(pattern):
        pattern = os.path.join(pattern, "models-*.jsonl")
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise ValueError(f"no model file matches {pattern!r}")
    out: list[Record] = []
    for path in paths:
        if path.endswith(".avro"):
            import fastavro

            with open(path, "rb") as fh:
                out.extend(model_json(r) for r in fastavro.reader(fh))
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
