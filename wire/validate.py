"""Server-side checks of report records against a task (no Beam): the validator of the wire spec's
section 4 (``docs/wire_format.md``).

:class:`ReportValidator` checks records against a task and one oracle; :class:`TaskReportValidator` checks
them against a task's :class:`~ldp.aggregate.Aggregator`, with each group's validation oracle, and returns
the accepted reports split by group and event-time granule (:class:`GroupBatch`). Records come as
``fastavro`` record dicts or as a :class:`~wire.decode.ColumnBatch`; both go through the same checks,
column-wise. :func:`decode_params` gives the column decoder the payload lengths a task's groups declare.
The Beam DoFns of :mod:`transforms.aggregate` and :mod:`transforms.io` are thin wrappers around these.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ldp import anonymity as _anonymity
from ldp.aggregate import Aggregator, ValidationOracle
from ldp.payload import PayloadField, PayloadSpec, Refusal
from ldp.reports import Reports
from ldp.task import CollectionTask
from wire.decode import MAX_CLIENT_ID_BYTES, ColumnBatch
from wire.records import (
    MAX_EVENT_MS,
    PAYLOAD_FIELDS,
    client_id_column,
    make_dead_letter,
    now_ms,
    redacted_dead_letter,
    requires_client_ids,
    split_by_group_and_granule,
)

__all__ = [
    "RawRecords",
    "ValidatedBatch",
    "ReportValidator",
    "RecordBatch",
    "GroupBatch",
    "TaskBatch",
    "TaskReportValidator",
    "decode_params",
    "validate_records",
    "fast_decode_params",
    "declared_payload",
]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

#: Records as a source hands them over: column-wise (fast path) or the items ``fastavro`` decoded (record
#: dicts, or anything else a foreign writer put there: unvalidated input).
RawRecords = ColumnBatch | list[object]

@dataclasses.dataclass
class ValidatedBatch:
    """Result of validating a list of records.

    Attributes:
        reports: the accepted reports (fields of the task's mechanism only).
        event_ms: int64 event time of each accepted report (milliseconds since the epoch).
        groups: int64 group of each accepted report.
        dead_letters: one dead-letter dict per refused record.
        reason_counts: refused records per reason.
        n_read: number of input records (= ``len(reports) + len(dead_letters)``).
        client_ids: the accepted reports' client ids (uint8 ``(n, 1 + w)``: length, then the bytes) when
            the task requires them (:func:`requires_client_ids`), else None.
    """

    reports: Reports
    event_ms: np.ndarray
    groups: np.ndarray
    dead_letters: list[dict[str, object]]
    reason_counts: dict[str, int]
    n_read: int
    client_ids: np.ndarray | None = None

    @property
    def n_accepted(self) -> int:
        return len(self.event_ms)



_CLIENT_ID_DETAIL = f"client_id must be 1 to {MAX_CLIENT_ID_BYTES} bytes"
_MISSING_ID_DETAIL = "the task's budget counts reports per client: client_id is required"


class _Header(NamedTuple):
    """The report-schema checks of a batch, as row masks in check order (see :class:`ReportValidator`)."""

    not_record: np.ndarray | None
    sv_missing: np.ndarray | None
    sv_wrong: np.ndarray
    tid_missing: np.ndarray | None
    tid_wrong: np.ndarray
    et_missing: np.ndarray | None
    et_bad: np.ndarray
    event_ms: np.ndarray
    group_bad: np.ndarray
    groups: np.ndarray
    ids: np.ndarray
    id_present: np.ndarray
    id_valid: np.ndarray


class _Column(NamedTuple):
    """One payload field over the rows still alive: the numpy column (zeros where bad) and the masks of
    rows where it is absent, of the wrong type or length, or has entries outside int64."""

    values: np.ndarray
    missing: np.ndarray
    invalid: np.ndarray
    outside: np.ndarray | None = None


class _RecordView:
    """Record dicts (``fastavro`` output, or anything a foreign writer put there) as columns."""

    def __init__(self, records: Sequence[object], validator: ReportValidator) -> None:
        self.records = records
        n = len(records)
        self.is_dict = np.fromiter((type(r) is dict for r in records), dtype=bool, count=n)
        self.recs = [r if d else {} for r, d in zip(records, self.is_dict)]
        self.v = validator

    def __len__(self) -> int:
        return len(self.recs)

    def record(self, i: int) -> object:
        return self.records[i]

    def header(self) -> _Header:
        task, recs, n = self.v.task, self.recs, len(self.recs)
        sv = [r.get("schema_version") for r in recs]
        sv_none = np.fromiter((v is None for v in sv), bool, count=n)
        sv_bad = np.fromiter((v != task.schema_version for v in sv), bool, count=n) & ~sv_none
        tid = np.array([r.get("task_id") for r in recs] + [0], dtype=object)[:n]
        tid_none = np.equal(tid, None)
        et = [r.get("event_time") for r in recs]
        et_none = np.fromiter((v is None for v in et), bool, count=n)
        if set(map(type, et)) <= {int, type(None)}:
            event_ms, bad = _int_column([0 if v is None else v for v in et], 0, MAX_EVENT_MS - 1)
        else:
            event_ms = np.zeros(n, dtype=np.int64)
            bad = np.zeros(n, dtype=bool)
            for i, v in enumerate(et):
                if isinstance(v, _dt.datetime) and v.tzinfo is not None:
                    event_ms[i] = round(v.timestamp() * 1000)
                elif type(v) is int:
                    event_ms[i] = v if _INT64_MIN <= v <= _INT64_MAX else -1
                elif v is not None:
                    bad[i] = True
            bad |= (event_ms < 0) | (event_ms >= MAX_EVENT_MS)
        groups, gbad = _int_column([r.get("group", 0) for r in recs], 0, task.n_groups - 1)
        ids, present, valid = client_id_column([r.get("client_id") for r in recs])
        return _Header(
            ~self.is_dict, sv_none, sv_bad, tid_none, (tid != task.task_id) & ~tid_none, et_none,
            bad & ~et_none, event_ms, gbad, groups, ids, present, valid,
        )  # fmt: skip

    def present(self, avro: str) -> np.ndarray:
        return np.fromiter((r.get(avro) is not None for r in self.recs), bool, count=len(self.recs))

    def column(self, f: PayloadField, alive: np.ndarray) -> _Column:
        sub = [self.recs[i] for i in alive] if len(alive) < len(self.recs) else self.recs
        wire = f.wire
        return _record_column(f, [r.get(wire) for r in sub])


class _BatchView:
    """A :class:`~wire.decode.ColumnBatch` (already typed by the report schema)."""

    def __init__(self, cb: ColumnBatch, validator: ReportValidator) -> None:
        self.cb = cb
        self.v = validator
        self.record = cb.record

    def __len__(self) -> int:
        return len(self.cb)

    def header(self) -> _Header:
        cb, task, n = self.cb, self.v.task, len(self.cb)
        ids = cb.payload.get("client_id")
        if ids is None:  # a ColumnBatch built without the client_id column: no ids
            ids = np.zeros((n, 1), dtype=np.uint8)
        present = cb.present.get("client_id", np.zeros(n, dtype=bool))
        return _Header(
            None, None, cb.schema_version != task.schema_version, None,
            np.full(n, cb.task_id != task.task_id), None, (cb.event_ms < 0) | (cb.event_ms >= MAX_EVENT_MS),
            cb.event_ms, (cb.group < 0) | (cb.group >= task.n_groups), cb.group, ids, present,
            ~present | (ids[:, 0] > 0),
        )  # fmt: skip

    def present(self, avro: str) -> np.ndarray:
        return self.cb.present[avro]

    def column(self, f: PayloadField, alive: np.ndarray) -> _Column:
        cb, avro = self.cb, f.wire
        missing = ~cb.present[avro][alive]
        col = cb.payload[avro][alive]
        invalid = np.zeros(len(alive), dtype=bool)
        width = 1 if f.length is None else f.width
        if avro in cb.lengths:
            invalid = ~missing & (cb.lengths[avro][alive] != width)
        if f.length is not None and col.ndim == 2:
            col = _fit_width(col, width)
        if f.dtype == "float64":
            finite = np.isfinite(col) if col.ndim == 1 else np.isfinite(col).all(axis=1)
            invalid |= ~missing & ~finite
        return _Column(col.view(np.uint64) if f.dtype == "uint64" else col, missing, invalid)


def _int_column(col: list[object], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Python integers as int64 and the mask of entries that are not integers in ``[lo, hi]``."""
    n = len(col)
    if set(map(type, col)) <= {int}:
        try:
            a = np.fromiter(col, dtype=np.int64, count=n)
            return a, (a < lo) | (a > hi)
        except OverflowError:
            pass
    bad = np.fromiter((type(v) is not int or v < lo or v > hi for v in col), dtype=bool, count=n)
    a = np.fromiter((0 if b else v for v, b in zip(col, bad)), dtype=np.int64, count=n)
    return a, bad


def _record_column(f: PayloadField, col: list[object]) -> _Column:
    """One payload field of record dicts as its numpy column, by the field's dtype and length."""
    n = len(col)
    missing = np.fromiter((v is None for v in col), dtype=bool, count=n)
    if f.name == "bits":
        nb = f.width
        ok = np.fromiter((isinstance(v, (bytes, bytearray)) and len(v) == nb for v in col), bool, count=n)
        fill = bytes(nb)
        buf = b"".join(v if o else fill for v, o in zip(col, ok))
        return _Column(np.frombuffer(buf, dtype=np.uint8).reshape(n, nb), missing, ~ok & ~missing)
    if f.dtype in ("int64", "uint64") and f.length is None:
        a, bad = _int_column([0 if v is None else v for v in col], _INT64_MIN, _INT64_MAX)
        return _Column(a.view(np.uint64) if f.dtype == "uint64" else a, missing, bad & ~missing)
    if f.dtype == "int64":
        k = f.width
        ok = np.fromiter(
            (isinstance(v, list) and len(v) == k and set(map(type, v)) <= {int} for v in col), bool, count=n
        )
        fill = [0] * k
        outside = np.zeros(n, dtype=bool)
        try:
            arr = np.array([v if o else fill for v, o in zip(col, ok)], dtype=np.int64).reshape(n, k)
        except OverflowError:
            arr = np.zeros((n, k), dtype=np.int64)
            for i in np.flatnonzero(ok):
                try:
                    arr[i] = col[i]
                except OverflowError:
                    outside[i] = True
        return _Column(arr, missing, ~ok & ~missing, outside)
    if f.length is None:  # one double
        ok = np.fromiter(
            (isinstance(v, list) and len(v) == 1 and isinstance(v[0], float) for v in col), bool, count=n
        )
        w = 1
    else:
        w = f.width
        ok = np.fromiter(
            (isinstance(v, list) and len(v) == w and set(map(type, v)) <= {float} for v in col), bool, count=n
        )
    out = np.zeros((n, w), dtype=np.float64)
    good = np.flatnonzero(ok)
    if len(good):
        out[good] = np.array([col[i] for i in good], dtype=np.float64).reshape(len(good), w)
        finite = np.isfinite(out[good]).all(axis=1)
        ok[good[~finite]] = False
        out[good[~finite]] = 0.0
    return _Column(out[:, 0] if f.length is None else out, missing, ~ok & ~missing)


def _payload_texts(f: PayloadField) -> tuple[str, str]:
    """``(wrong type or length, outside int64)`` details of a field's refusals."""
    if f.name == "bits":
        return f"bits must be {f.width} bytes", ""
    if f.length is None and f.dtype != "float64":
        return f"{f.wire} is not a 64-bit integer", ""
    if f.dtype == "int64":
        return f"{f.wire} must be a list of {f.width} integers", f"{f.wire} outside int64"
    if f.length is None:
        return f"{f.wire} must hold one finite double", ""
    return f"{f.wire} must hold {f.width} finite doubles", ""


def declared_payload(oracle: ValidationOracle) -> PayloadSpec:
    """The oracle's :class:`~ldp.payload.PayloadSpec` (a clear error when it declares none, or a field the
    validator cannot check)."""
    spec = getattr(oracle, "payload", None)
    if not isinstance(spec, PayloadSpec):
        raise TypeError(
            f"oracle {getattr(oracle, 'name', type(oracle).__name__)!r} declares no payload "
            "(a ldp.payload.PayloadSpec attribute `payload`)"
        )
    for f in spec.fields:
        if isinstance(f.length, tuple):
            raise ValueError(
                f"oracle {oracle.name!r}: {f.name} has a variable length (the validator checks fixed ones)"
            )
    return spec


class ReportValidator:
    """Validates report records against a task and its oracle (server side).

    Checks, in order (the first failing check names the reason): the record is a dict; known
    ``schema_version``; ``task_id`` equals the task's; ``event_time`` present and in range; ``group`` in
    ``[0, n_groups)`` (absent means 0, the schema default); ``client_id`` null or 1 to 64 bytes, and present
    when the task requires ids (:func:`requires_client_ids`); the payload fields the oracle does not declare
    null; each declared field (``oracle.payload``, :mod:`ldp.payload`) present and of its type and length
    (doubles finite), with the field's reason code; for a shuffled task (``anonymity.shuffled``)
    ``event_time`` a multiple of ``anonymity.time_precision_s`` (``fine_time``); and finally
    ``oracle.validate`` on the numpy batch (domain checks), whose refusals carry their reason code.
    Record dicts and column batches go through the same checks. ``rounded_times=False`` skips the
    ``fine_time`` check (the shuffler, which rounds the times itself, reads the clients' reports).
    """

    def __init__(
        self,
        task: CollectionTask,
        oracle: ValidationOracle | None = None,
        *,
        redact_records: bool = False,
        rounded_times: bool = True,
    ) -> None:
        self.task = task
        self.redact_records = redact_records  # raw records (central DP): dead letters keep only the size
        self.oracle = task.make_oracle() if oracle is None else oracle
        self.spec = declared_payload(self.oracle)
        self.fields = self.spec.names
        self.unused = self.spec.unused
        self.require_ids = requires_client_ids(task)
        settings = getattr(task, "anonymity", None)
        shuffled = rounded_times and settings is not None and settings.shuffled
        self.time_precision_s: int | None = int(settings.time_precision_s) if shuffled else None
        self._fine_detail = (
            f"event_time must be a multiple of anonymity.time_precision_s ({self.time_precision_s} s): "
            "the shuffler rounds every time"
        )

    def validate(self, records: RawRecords, source: str = "", *, at_ms: int | None = None) -> ValidatedBatch:
        """Splits ``records`` (a list of record dicts, or a :class:`~wire.decode.ColumnBatch`)
        into accepted reports and dead letters (see the class docstring)."""
        is_list = isinstance(records, (list, tuple))
        view = _RecordView(records, self) if is_list else _BatchView(records, self)
        n = len(view)
        reason = np.full(n, None, dtype=object)
        detail = np.full(n, None, dtype=object)
        idx = np.arange(n)
        task = self.task

        def mark(mask: np.ndarray | None, why: str, text: str) -> None:
            if mask is not None:
                _mark(reason, detail, idx[mask], why, text)

        h = view.header()
        mark(h.not_record, "not_a_record", "decoded datum is not a record")
        mark(h.sv_missing, "missing_field", "schema_version is null or absent")
        mark(h.sv_wrong, "wrong_schema_version", f"expected schema_version {task.schema_version}")
        mark(h.tid_missing, "missing_field", "task_id is null or absent")
        mark(h.tid_wrong, "wrong_task", f"report is not for task {task.task_id!r}")
        mark(h.et_missing, "missing_field", "event_time is null or absent")
        mark(h.et_bad, "invalid_event_time", "event_time must be a timestamp in [1970, 2200)")
        mark(h.group_bad, "invalid_group", f"group must be an integer in [0, {task.n_groups})")
        mark(h.id_present & ~h.id_valid, "invalid_client_id", _CLIENT_ID_DETAIL)
        if self.require_ids:
            mark(~h.id_present, "missing_client_id", _MISSING_ID_DETAIL)
        for name in self.unused:
            avro = PAYLOAD_FIELDS[name]
            text = f"field {avro} is not used by mechanism {self.oracle.name}"
            mark(view.present(avro), "invalid_payload", text)
        alive = np.flatnonzero(np.equal(reason, None))
        payload: dict[str, np.ndarray] = {}
        if len(alive):
            for f in self.spec.fields:  # field by field, missing before malformed
                col = view.column(f, alive)
                wrong, beyond = _payload_texts(f)
                _mark(reason, detail, alive[col.missing], "missing_field", f"{f.wire} is null or absent")
                _mark(reason, detail, alive[col.invalid], f.invalid, wrong)
                if col.outside is not None:
                    _mark(reason, detail, alive[col.outside], f.outside, beyond)
                payload[f.name] = col.values
        return self._finish(reason, detail, alive, payload, h, view.record, source, at_ms)

    def _finish(self, reason, detail, alive, payload, h: _Header, get_record, source, at_ms):
        """Runs ``oracle.validate`` on the rows still alive and assembles the :class:`ValidatedBatch`."""
        n = len(reason)
        event_ms, groups, ids = h.event_ms, h.groups, h.ids
        if len(alive) and self.time_precision_s is not None:
            fine = ~_anonymity.is_rounded(np.asarray(event_ms)[alive], self.time_precision_s)
            _mark(reason, detail, alive[fine], "fine_time", self._fine_detail)
        if len(alive):
            ok_sub = np.equal(reason[alive], None)
            if ok_sub.any():
                cand = Reports(**{k: v[ok_sub] for k, v in payload.items()})
                ok_o, refusals = self.oracle.validate(cand)
                rows = alive[ok_sub]
                refused = np.flatnonzero(~np.asarray(ok_o, dtype=bool))
                for i in refused.tolist():
                    r = refusals[i]
                    if not isinstance(r, Refusal):
                        name = self.oracle.name
                        raise TypeError(f"oracle {name!r} refused a report with {r!r}, not a Refusal")
                    if reason[rows[i]] is None:
                        reason[rows[i]] = r.code
                        detail[rows[i]] = str(r)
        accepted = np.equal(reason, None)
        if len(alive):
            acc_alive = accepted[alive]
            reports = Reports(**{k: v[acc_alive] for k, v in payload.items()})
        else:
            reports = _empty(self.spec)
        dead, counts = [], {}
        when = now_ms() if at_ms is None else at_ms
        for i in np.flatnonzero(~accepted):
            r = str(reason[i])
            counts[r] = counts.get(r, 0) + 1
            dl = make_dead_letter(r, source, detail=detail[i], record=get_record(i), at_ms=when)
            dead.append(redacted_dead_letter(dl) if self.redact_records else dl)
        return ValidatedBatch(
            reports=reports,
            event_ms=event_ms[accepted],
            groups=groups[accepted],
            dead_letters=dead,
            reason_counts=counts,
            n_read=n,
            client_ids=ids[accepted] if self.require_ids and ids is not None else None,
        )

    def validate_columns(
        self, cb: ColumnBatch, source: str = "", *, at_ms: int | None = None
    ) -> ValidatedBatch:
        """:meth:`validate` of a :class:`~wire.decode.ColumnBatch`."""
        return self.validate(cb, source, at_ms=at_ms)


def _fit_width(col: np.ndarray, w: int) -> np.ndarray:
    """A zero-padded ``(n, width)`` column cut (or padded) to ``w`` columns (every row kept holds ``w``)."""
    if col.shape[1] >= w:
        return col[:, :w]
    return np.pad(col, ((0, 0), (0, w - col.shape[1])))


def _empty(spec: PayloadSpec) -> Reports:
    """No reports, with the declared fields' types and widths."""
    out = {}
    for f in spec.fields:
        shape = (0,) if f.length is None else (0, f.width)
        out[f.name] = np.zeros(shape, dtype=np.dtype(f.dtype))
    return Reports(**out)


def _mark(reason: np.ndarray, detail: np.ndarray, rows: np.ndarray, why: str, text: str | None) -> None:
    """Sets the reason of ``rows`` that have none yet (the first failing check wins)."""
    if len(rows) == 0:
        return
    rows = rows[np.equal(reason[rows], None)]
    reason[rows] = why
    detail[rows] = text


def validate_records(task: CollectionTask, records: Sequence[object], source: str = "") -> ValidatedBatch:
    """One-shot :meth:`ReportValidator.validate`."""
    return ReportValidator(task).validate(records, source)



def fast_decode_params(oracle: ValidationOracle) -> dict[str, object]:
    """Keyword arguments of :func:`wire.decode.iter_report_batches` for an oracle's payload."""
    return _decode_lengths([declared_payload(oracle)])


def _decode_lengths(specs: Sequence[PayloadSpec]) -> dict[str, object]:
    """The column decoder's lengths for the payloads of all groups: the longest ``bits`` and ``items``
    any group declares (each group's validator then refuses the lengths it does not take; longer ones are
    left to fastavro), and the ``reals`` width when every group declares the same (else one double)."""
    bits = [f.width for s in specs if (f := s.field("bits")) is not None]
    items = [f.width for s in specs if (f := s.field("items")) is not None]
    reals = {None if f.length is None else f.width for s in specs if (f := s.field("reals")) is not None}
    return {
        "bits_len": max(bits) if bits else None,
        "items_len": max(items) if items else None,
        "reals_len": reals.pop() if len(reals) == 1 else None,
    }



# ---------------------------------------------------------------------------------------------------
# Validation against a task's aggregator (every kind of task)
# ---------------------------------------------------------------------------------------------------
class RecordBatch(NamedTuple):
    """What a source emits: where the records came from and the records, decoded column-wise
    (:class:`~wire.decode.ColumnBatch`) or as ``fastavro`` record dicts."""

    source: str
    records: RawRecords


class GroupBatch(NamedTuple):
    """Accepted reports of one group whose event times fall into one window granule.

    ``timestamp_ms`` is the latest event time of the batch (any time in the granule maps to the same
    windows, so timestamping the whole batch with it assigns every report to its windows exactly).
    ``event_ms`` and ``client_ids`` (uint8 ``(n, 1 + w)``) are set when the task requires client ids
    (the budget step, :mod:`transforms.budget`, counts reports per client and period), else None.
    """

    group: int
    timestamp_ms: int
    reports: Reports
    event_ms: np.ndarray | None = None
    client_ids: np.ndarray | None = None


@dataclasses.dataclass
class TaskBatch:
    """Validation result of one record batch against a task.

    Attributes:
        parts: the accepted reports, one :class:`GroupBatch` per group and granule present.
        dead_letters: one dead-letter dict per refused record.
        reason_counts: refused records per reason.
        n_read: input records (= accepted + refused).
        n_record_decoded: input records decoded one by one by fastavro rather than column-wise (a list
            batch: all; a ColumnBatch: its :attr:`~wire.decode.ColumnBatch.n_fallback`).
    """

    parts: list[GroupBatch]
    dead_letters: list[dict[str, object]]
    reason_counts: dict[str, int]
    n_read: int
    n_record_decoded: int = 0

    @property
    def n_accepted(self) -> int:
        return sum(len(p.reports) for p in self.parts)

    def counts(self) -> dict[str, int]:
        """``read``, ``accepted``, ``rejected`` and ``rejected_<reason>`` of this batch."""
        out = {"read": self.n_read, "accepted": self.n_accepted, "rejected": len(self.dead_letters)}
        out.update({f"rejected_{k}": v for k, v in self.reason_counts.items()})
        return out


def _take_columns(cb: ColumnBatch, rows: np.ndarray) -> ColumnBatch:
    """Rows of a :class:`wire.decode.ColumnBatch` (a dataclass of row-aligned arrays / dicts)."""
    changes = {}
    for f in dataclasses.fields(cb):
        v = getattr(cb, f.name)
        if isinstance(v, np.ndarray):
            changes[f.name] = v[rows]
        elif isinstance(v, dict):
            changes[f.name] = {k: a[rows] for k, a in v.items()}
    return dataclasses.replace(cb, **changes)


def _parts(
    groups: np.ndarray,
    event_ms: np.ndarray,
    reports: Reports,
    granule_ms: int | None,
    client_ids: np.ndarray | None = None,
) -> list[GroupBatch]:
    out = []
    for g, ts, rows in split_by_group_and_granule(groups, event_ms, granule_ms):
        part = reports if len(rows) == len(reports) else reports.take(rows)
        if client_ids is None:
            out.append(GroupBatch(g, ts, part))
        else:
            out.append(GroupBatch(g, ts, part, event_ms[rows], client_ids[rows]))
    return out


class TaskReportValidator:
    """Validates report records of any task through its :class:`~ldp.aggregate.Aggregator`.

    The checks are :class:`ReportValidator`'s (task id, schema version, event time, ``group`` in
    ``[0, n_groups)``, payload fields, then the oracle's ``validate``). When the aggregator's groups share
    one oracle (``uniform_oracle``) a batch is validated in one pass; otherwise its records are partitioned
    by ``group`` and each partition is validated with its group's oracle (records whose group is out of
    range or not an integer go through group 0's validator, which refuses them with ``invalid_group``
    or an earlier reason).
    """

    def __init__(self, aggregator: Aggregator, *, rounded_times: bool = True) -> None:
        self.aggregator = aggregator
        self.task = aggregator.task
        self.rounded_times = rounded_times  # ReportValidator's fine_time check
        self._validators: dict[int, ReportValidator] = {}

    def _validator(self, group: int) -> ReportValidator:
        v = self._validators.get(group)
        if v is None:
            v = ReportValidator(
                self.task,
                oracle=self.aggregator.validation_oracle(group),
                redact_records=bool(getattr(self.aggregator, "raw_records", False)),
                rounded_times=self.rounded_times,
            )
            self._validators[group] = v
        return v

    def validate(
        self,
        records: RawRecords,
        source: str = "",
        *,
        granule_ms: int | None = None,
        at_ms: int | None = None,
    ) -> TaskBatch:
        """``records``: a list of record dicts or a ColumnBatch (:mod:`wire.decode`)."""
        is_list = isinstance(records, (list, tuple))
        one_by_one = len(records) if is_list else records.n_fallback
        if self.aggregator.uniform_oracle:
            vb = self._validator(0).validate(records, source, at_ms=at_ms)
            parts = _parts(vb.groups, vb.event_ms, vb.reports, granule_ms, vb.client_ids)
            return TaskBatch(parts, vb.dead_letters, vb.reason_counts, vb.n_read, one_by_one)
        m = self.task.n_groups
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
        parts: list[GroupBatch] = []
        dead: list[dict[str, object]] = []
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
                if g < 0 or not bool(np.all(vb.groups == g)):
                    raise AssertionError(f"the validator of group {g} accepted another group's report")
                parts.extend(_parts(vb.groups, vb.event_ms, vb.reports, granule_ms, vb.client_ids))
        return TaskBatch(parts, dead, counts, n, one_by_one)


def decode_params(aggregator: Aggregator | None) -> dict[str, object]:
    """Keyword arguments of :func:`wire.decode.iter_report_batches` for a task's reports
    (``{}``: no task, decode with fastavro only)."""
    if aggregator is None:
        return {}
    groups = 1 if aggregator.uniform_oracle else aggregator.task.n_groups
    specs = [declared_payload(aggregator.validation_oracle(g)) for g in range(groups)]
    return {"task_id": aggregator.task.task_id, **_decode_lengths(specs)}
