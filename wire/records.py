"""Avro report records: building them from numpy :class:`~ldp.reports.Reports`, the report container
files, dead letters, and the event-time granules of a batch (no Beam).

A record is what ``fastavro`` yields for ``schemas/report.avsc``: a dict with ``task_id``,
``schema_version``, ``event_time`` (a timezone-aware ``datetime`` or integer milliseconds), ``group`` and
the payload fields ``value``, ``seed``, ``bits``, ``items``, ``reals`` (and ``client_id``).
:func:`reports_to_records` writes them, :func:`write_report_file` / :func:`encode_report_container` put them
in an Avro container, :func:`make_dead_letter` turns a refused one into a size-capped dead letter
(``schemas/dead_letter.avsc``), and :data:`REASONS` lists every reason a report is refused for. The checks
themselves are :mod:`wire.validate`; the column-wise decoder is :mod:`wire.decode`.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import math
import time
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import fastavro
import numpy as np

import schemas
from ldp.payload import WIRE_FIELDS
from ldp.reports import Reports
from wire.decode import LOSS_REASONS, MAX_CLIENT_ID_BYTES

__all__ = [
    "PAYLOAD_FIELDS",
    "REASONS",
    "MAX_EVENT_MS",
    "reports_to_records",
    "write_report_file",
    "encode_report_container",
    "iter_record_batches",
    "decode_container",
    "make_dead_letter",
    "window_granule_ms",
    "split_by_group_and_granule",
    "now_ms",
    "RAW_BYTES_LIMIT",
    "REPORT_FIELDS",
    "DEAD_LETTER_LIMITS",
    "dead_letter_record",
    "redacted_dead_letter",
    "requires_client_ids",
    "client_id_column",
]

#: Reports field -> Avro field (:data:`ldp.payload.WIRE_FIELDS`).
PAYLOAD_FIELDS = WIRE_FIELDS

#: Every dead-letter reason the aggregator emits (the Beam counter ``rejected_<reason>`` per reason).
REASONS = (
    "undecodable",  # bytes that are not an Avro container of records
    "not_a_record",  # decoded datum that is not a record
    "wrong_schema_version",  # schema_version this code does not know
    "wrong_task",  # another task's report
    "missing_field",  # a required field absent or null
    "invalid_event_time",  # event_time of the wrong type or out of range
    "invalid_group",  # group outside [0, n_groups)
    "invalid_seed",  # hash seed of the wrong type or range
    "invalid_payload",  # payload of the wrong type / shape, or a field the mechanism does not use
    "out_of_domain",  # payload outside the mechanism's output domain
    "invalid_client_id",  # client_id that is not 1 to 64 bytes
    "missing_client_id",  # no client_id in a report of a task whose budget counts reports per client
    "over_budget",  # a client's reports beyond the task's reports per budget period (transforms.budget)
    "budget_period_closed",  # a report of a budget period whose per-client counts were released (late)
    "fine_time",  # a shuffled task's report whose event_time is not a multiple of anonymity.time_precision_s
    # parts of an input that are not records (wire.decode.LOSS_REASONS; "undecodable" above)
    *(r for r in LOSS_REASONS if r != "undecodable"),
)

#: Kept for compatibility: dead letters never hold input bytes any more (``raw_bytes`` is always null).
RAW_BYTES_LIMIT = 0

#: The report schema's fields: the only fields of a refused record a dead letter keeps.
REPORT_FIELDS = (
    "task_id", "schema_version", "event_time", "group", "value", "seed", "bits", "items", "reals", "client_id"
)

#: Size caps of a dead letter: a string field (characters), a bytes field (bytes, hex-encoded), an array
#: (entries), the whole ``raw_record`` JSON, ``detail`` and ``source`` (characters). A dead letter is at
#: most a few KiB whatever the input.
DEAD_LETTER_LIMITS = {
    "string": 256, "bytes": 256, "array": 64, "raw_record": 4096, "detail": 1024, "source": 1024
}

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
#: event times lie in [1970, 2200) (milliseconds)
MAX_EVENT_MS = int((_dt.datetime(2200, 1, 1, tzinfo=_dt.timezone.utc) - _EPOCH).total_seconds() * 1000)


def now_ms() -> int:
    """Current wall-clock time in integer milliseconds since the epoch."""
    return int(time.time() * 1000)


def _json_default(x: object) -> object:
    if isinstance(x, (bytes, bytearray)):
        return bytes(x).hex()
    if isinstance(x, _dt.datetime):
        return int((x - _EPOCH).total_seconds() * 1000) if x.tzinfo else x.isoformat()
    if isinstance(x, np.generic):
        return x.item()
    return repr(x)


def _cap_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}...[{len(text) - limit} more characters]"


def _cap_value(v: object) -> object:
    """A report field's value with strings, bytes and arrays cut to :data:`DEAD_LETTER_LIMITS`."""
    lim = DEAD_LETTER_LIMITS
    if isinstance(v, str):
        return _cap_text(v, lim["string"])
    if isinstance(v, (bytes, bytearray)):
        b = bytes(v)
        hx = b[: lim["bytes"]].hex()
        return hx if len(b) <= lim["bytes"] else f"{hx}...[{len(b) - lim['bytes']} more bytes]"
    if isinstance(v, (list, tuple)):
        head = [_cap_value(x) for x in v[: lim["array"]]]
        return head if len(v) <= lim["array"] else [*head, f"...[{len(v) - lim['array']} more entries]"]
    if isinstance(v, dict):  # a nested value where the report schema has none: its type only
        return f"<{type(v).__name__}>"
    return v


def dead_letter_record(record: object) -> str | None:
    """The ``raw_record`` of a refused record: its report-schema fields only (unknown writer fields such as
    a client's raw value are never kept), each value size-capped, as JSON (bytes hex-encoded); None for a
    datum that is not a record."""
    if not isinstance(record, dict):
        return None
    kept = {k: _cap_value(record[k]) for k in REPORT_FIELDS if k in record}
    try:
        text = json.dumps(kept, default=_json_default, sort_keys=True)
    except (TypeError, ValueError):
        cut = DEAD_LETTER_LIMITS["string"]
        text = json.dumps({k: repr(v)[:cut] for k, v in kept.items()}, sort_keys=True)
    return _cap_text(text, DEAD_LETTER_LIMITS["raw_record"])


def make_dead_letter(
    reason: str,
    source: str,
    *,
    detail: str | None = None,
    record: object = None,
    at_ms: int | None = None,
) -> dict[str, object]:
    """A dead-letter record (``schemas/dead_letter.avsc``) under the privacy contract of the dead-letter
    output (docs/pipelines.md): only report-schema fields of ``record`` (see :func:`dead_letter_record`),
    never input bytes (``raw_bytes`` is null), every field size-capped (:data:`DEAD_LETTER_LIMITS`)."""
    task_id = record.get("task_id") if isinstance(record, dict) else None
    return {
        "reason": reason,
        "detail": None if detail is None else _cap_text(str(detail), DEAD_LETTER_LIMITS["detail"]),
        "source": _cap_text(str(source), DEAD_LETTER_LIMITS["source"]),
        "task_id": _cap_text(task_id, DEAD_LETTER_LIMITS["string"]) if isinstance(task_id, str) else None,
        "raw_record": dead_letter_record(record),
        "raw_bytes": None,
        "dead_letter_time": now_ms() if at_ms is None else int(at_ms),
    }


def redacted_dead_letter(dead: dict[str, object]) -> dict[str, object]:
    """A dead letter whose record is a user's raw value (a central-DP task, the aggregator's
    ``raw_records``): ``raw_record`` keeps only the size of the record's capped JSON; reason, detail,
    source and task id stay."""
    raw = dead.get("raw_record")
    size = None if raw is None else len(str(raw))
    return {**dead, "raw_record": json.dumps({"redacted": "raw record of a central-DP task", "chars": size})}



def requires_client_ids(task: object) -> bool:
    """True when the task's budget counts reports per pseudonymous client id (``task.requires_client_ids``;
    tasks without a budget, or whose budget is enforced by the clients only, do not)."""
    return bool(getattr(task, "requires_client_ids", False))


def client_id_column(values: Sequence[object]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``client_id`` values of record dicts as ``(column uint8 (n, 1 + 64), present, valid)``: column 0
    the length, then the bytes; ``valid`` is bytes of 1 to :data:`MAX_CLIENT_ID_BYTES` (invalid rows are
    zero)."""
    n = len(values)
    present = np.fromiter((v is not None for v in values), bool, count=n)
    valid = np.fromiter(
        (type(v) is bytes and 1 <= len(v) <= MAX_CLIENT_ID_BYTES for v in values), bool, count=n
    )
    col = np.zeros((n, 1 + MAX_CLIENT_ID_BYTES), dtype=np.uint8)
    for i in np.flatnonzero(valid).tolist():
        v = values[i]
        col[i, 0] = len(v)
        col[i, 1 : 1 + len(v)] = np.frombuffer(v, dtype=np.uint8)
    return col, present, valid




# ---------------------------------------------------------------------------------------------------
# Writing reports (clients / simulator)
# ---------------------------------------------------------------------------------------------------
def reports_to_records(
    task_id: str,
    reports: Reports,
    event_ms: np.ndarray,
    groups: np.ndarray | int = 0,
    *,
    schema_version: int = schemas.SCHEMA_VERSION,
    client_ids: Sequence[bytes] | np.ndarray | None = None,
) -> list[dict[str, object]]:
    """Avro report records for a batch (uint64 seeds are stored as their int64 bit pattern).

    ``client_ids``: None (no ids), one ``bytes`` per report, or uint8 ``(n, L)`` (one L-byte id per report).
    """
    n = len(reports)
    et = np.asarray(event_ms, dtype=np.int64).tolist()
    grp = (np.broadcast_to(np.asarray(groups, dtype=np.int64), (n,))).tolist()
    cols: dict[str, list[object]] = {}
    for name, avro in PAYLOAD_FIELDS.items():
        arr = getattr(reports, name)
        if arr is None:
            continue
        if name == "seeds":
            cols[avro] = np.asarray(arr, dtype=np.uint64).view(np.int64).tolist()
        elif name == "bits":
            a = np.ascontiguousarray(arr, dtype=np.uint8)
            cols[avro] = [row.tobytes() for row in a]
        elif name == "reals" and np.ndim(arr) == 2:  # (n, w): w doubles per report
            cols[avro] = np.asarray(arr, dtype=np.float64).tolist()
        elif name == "reals":
            cols[avro] = [[x] for x in np.asarray(arr, dtype=np.float64).tolist()]
        else:
            cols[avro] = np.asarray(arr, dtype=np.int64).tolist()
    base = {
        "task_id": task_id,
        "schema_version": schema_version,
        "value": None,
        "seed": None,
        "bits": None,
        "items": None,
        "reals": None,
        "client_id": None,
    }
    if client_ids is not None:
        if isinstance(client_ids, np.ndarray):
            cols["client_id"] = [row.tobytes() for row in np.ascontiguousarray(client_ids, dtype=np.uint8)]
        else:
            cols["client_id"] = list(client_ids)
        if len(cols["client_id"]) != n:
            raise ValueError(f"{len(cols['client_id'])} client ids for {n} reports")
    names = list(cols)
    out = []
    for row in zip(et, grp, *[cols[k] for k in names]):
        rec = dict(base)
        rec["event_time"] = row[0]
        rec["group"] = row[1]
        for k, v in zip(names, row[2:]):
            rec[k] = v
        out.append(rec)
    return out


def write_report_file(
    fo: BinaryIO, records: Sequence[dict[str, object]], *, codec: str = "null", sync_interval: int = 1 << 20
) -> None:
    """Writes records as an Avro object container (large blocks: fewer, bigger batches downstream)."""
    fastavro.writer(fo, schemas.report_schema(), records, codec=codec, sync_interval=sync_interval)


def encode_report_container(records: Sequence[dict[str, object]], *, codec: str = "null") -> bytes:
    """Records as one Avro object container in memory (a Pub/Sub message body)."""
    buf = io.BytesIO()
    write_report_file(buf, records, codec=codec)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------
def iter_record_batches(fo: BinaryIO, batch_size: int = 1 << 15) -> Iterator[list[dict[str, object]]]:
    """Yields the records of an Avro container in lists of about ``batch_size`` (whole blocks).

    Raises whatever ``fastavro`` raises on a corrupt or non-Avro input; records of the blocks before the
    corruption have been yielded by then.
    """
    pending: list[dict[str, object]] = []
    for block in fastavro.block_reader(fo):
        pending.extend(block)
        if len(pending) >= batch_size:
            yield pending
            pending = []
    if pending:
        yield pending


def decode_container(data: bytes) -> list[object]:
    """All records of an in-memory Avro container (raises on undecodable bytes)."""
    return list(fastavro.reader(io.BytesIO(data)))



# ---------------------------------------------------------------------------------------------------
# Event-time granules
# ---------------------------------------------------------------------------------------------------
def window_granule_ms(size_s: float | None, period_s: float | None = None) -> int | None:
    """Largest time step such that all reports in one step fall into the same set of windows.

    Fixed windows of ``size``: the size; sliding windows: ``gcd(size, period)``; global window: ``None``.
    """
    if size_s is None:
        return None
    size = int(round(size_s * 1000))
    if period_s is None:
        return size
    return math.gcd(size, int(round(period_s * 1000)))


def split_by_group_and_granule(
    groups: np.ndarray, event_ms: np.ndarray, granule_ms: int | None
) -> list[tuple[int, int, np.ndarray]]:
    """Partitions rows by (group, event-time granule).

    Returns:
        ``(group, timestamp_ms, rows)`` per part, where ``timestamp_ms`` is the latest event time in the
        part (any time in the granule maps to the same windows; the latest keeps watermarks honest).
    """
    n = len(groups)
    if n == 0:
        return []
    gran = np.zeros(n, dtype=np.int64) if granule_ms is None else event_ms // granule_ms
    if groups.min() == groups.max() and gran.min() == gran.max():
        return [(int(groups[0]), int(event_ms.max()), np.arange(n))]
    key = np.stack([groups, gran])
    uniq, inv = np.unique(key, axis=1, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.flatnonzero(np.diff(inv[order])) + 1
    out = []
    for rows in np.split(order, bounds):
        out.append((int(groups[rows[0]]), int(event_ms[rows].max()), rows))
    return out
