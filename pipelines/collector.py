"""The HTTP collector's core, without a web framework and without Beam: request bodies -> checked report
records -> durable rolling Avro report files in a directory the aggregation jobs read (docs/collector.md).

:class:`Collector` takes one request body (JSON or Avro) and returns the HTTP status and JSON answer;
:mod:`pipelines.collect` is the web server around it. The steps:

1. :func:`json_columns` / :func:`parse_json_body` / :func:`parse_avro_body`: the body -> report columns
   or records. JSON follows the JSON form of docs/wire_format.md (``seed`` a decimal string, ``bits`` and
   ``client_id`` base64), its nesting measured before parsing; a well-typed batch is decoded by msgspec
   straight into a :class:`~wire.decode.ColumnBatch`, validated on the columns and written with
   :func:`encode_columns`; any other body goes through :func:`parse_json_body` (the reference, which names
   the refusal). An Avro body is walked with every declared count and length checked against
   the bytes left and ``max_batch`` before anything is allocated, then decoded column-wise
   (:class:`~wire.decode.ColumnBatch`) or by fastavro from exactly each block's bytes.
2. :class:`ReportChecker`: the project's validator (:class:`wire.validate.TaskReportValidator`, the
   same checks as the aggregation jobs) plus the two the Avro decoder makes for files. All or nothing: one
   refused report refuses the request (422), naming the first refused report; nothing of it is written.
3. :class:`RollingAvroWriter`: the request's block is appended to the open hidden ``.tmp`` file and its
   line (byte range, count, key and body digests) to the file's block ledger; the request is answered 200
   only after an ``fsync`` of both covers it (group commit). Files are published (rename, ``.done``
   marker) after ``roll_reports`` reports or ``roll_seconds`` seconds; a shuffled task's file is first
   rewritten in a CSPRNG-drawn order. At start, :meth:`RollingAvroWriter.adopt` publishes the prefix of
   what a killed process left whose blocks are whole and recorded in the ledger, so a block survives a
   crash only together with its idempotency key.
4. Retries and senders: :class:`IdempotencyKeys` (an ``Idempotency-Key`` repeat is answered without a
   second write, exactly once across restarts), :class:`SenderAuth` (optional client tokens; distinct
   senders per file in the metadata key :data:`SENDERS_KEY`), :class:`PrometheusMetrics`.

Nothing of a request other than its report fields is kept: no address, no header, no receive time (an
idempotency key only as a digest, for its window).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime as _dt
import errno
import fcntl
import hashlib
import hmac
import io
import json
import logging
import operator
import os
import re
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import fastavro
import fastavro.write
import msgspec
import numpy as np

import schemas
from ldp.task import Task
from wire.durable import fsync_dir
from wire.records import REPORT_FIELDS
from wire.validate import TaskReportValidator

#: The marker a finished file gets, ``transforms.io.DONE_SUFFIX`` (that module imports Beam, which the
#: collector never needs; tests/test_fast_commands.py keeps the two equal).
DONE_SUFFIX = ".done"

__all__ = [
    "AVRO_TYPE",
    "JSON_TYPE",
    "Collector",
    "CollectorStats",
    "ReportChecker",
    "RequestError",
    "RollingAvroWriter",
    "WriteError",
    "make_checker",
    "parse_avro_body",
    "parse_json_body",
    "report_to_json",
]

_LOG = logging.getLogger(__name__)

JSON_TYPE = "application/json"
AVRO_TYPE = "application/avro"
#: Prefix of the finished report files (``collect-<UTC start>-<run>-<seq>.avro``) and of the open one.
FILE_PREFIX = "collect-"
TMP_PREFIX = ".collect-"
TMP_SUFFIX = ".avro.tmp"

_FIELDS = frozenset(REPORT_FIELDS)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# a signed 64-bit decimal: optional '-', no '+', no leading zeros; "-0" is refused separately
_SEED_RE = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class RequestError(Exception):
    """A refused request: HTTP ``status``, a machine-readable ``error`` (a dead-letter reason of
    :data:`wire.records.REASONS` for a refused report, else a request-level code), a one-line
    ``detail`` and, for a refused report, its ``index`` in the request."""

    def __init__(self, status: int, error: str, detail: str, index: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.index = index

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "detail": self.detail}
        if self.index is not None:
            out["index"] = self.index
        return out


class WriteError(Exception):
    """Appending to, syncing or publishing a report file failed (the disk, not the request);
    ``transient``: it may succeed later (a full disk, exhausted descriptors)."""

    def __init__(self, detail: str, transient: bool = False) -> None:
        super().__init__(detail)
        self.transient = transient


# ------------------------------------------------------------------------------------------------------------
# bodies -> records
# ------------------------------------------------------------------------------------------------------------
def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or infinity)")


def _b64(text: object) -> object:
    """Standard, padded base64 -> bytes; anything else unchanged (the validator refuses it)."""
    if type(text) is not str:
        return text
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text


def _seed(text: object) -> object:
    """A signed 64-bit decimal string -> int; anything else (a JSON number too) -> a value the validator
    refuses as ``invalid_seed``."""
    if text is None:
        return None
    if type(text) is str and _SEED_RE.fullmatch(text) and text != "-0":
        v = int(text)
        if _INT64_MIN <= v <= _INT64_MAX:
            return v
    return _NOT_A_SEED


class _NotASeed:
    """Stands for a ``seed`` that is not a decimal string of a signed 64-bit integer."""

    def __repr__(self) -> str:
        return "<not a signed 64-bit decimal string>"


_NOT_A_SEED = _NotASeed()


def _reals(v: object) -> object:
    """A list of JSON numbers -> floats (``1`` and ``1.0`` are the same); anything else unchanged."""
    if type(v) is not list:
        return v
    if not all(type(x) is float or type(x) is int for x in v):
        return v
    try:
        return [float(x) for x in v]
    except OverflowError:  # an integer beyond the range of a double
        return v


def _json_record(obj: dict[str, Any]) -> dict[str, Any]:
    """One JSON report -> its Avro record (every field; ``group`` 0 when absent); members outside the
    report schema are kept so that :class:`ReportChecker` can refuse them."""
    rec = dict(obj)
    rec.setdefault("group", 0)
    for name in ("task_id", "schema_version", "event_time", "value", "items"):
        rec.setdefault(name, None)
    rec["seed"] = _seed(obj.get("seed"))
    rec["bits"] = _b64(obj.get("bits"))
    rec["client_id"] = _b64(obj.get("client_id"))
    rec["reals"] = _reals(obj.get("reals"))
    return rec


def parse_json_body(body: bytes, max_batch: int) -> list[object]:
    """A JSON body (one report object or ``{"reports": [...]}``) -> its records, unchecked: a report that
    is not an object stays as it is (the checker refuses it, ``not_a_record``).

    Raises :class:`RequestError`: not UTF-8 JSON (400 ``bad_json``), a batch of the wrong shape or empty
    (400 ``bad_batch``), more than ``max_batch`` reports (413 ``too_many_reports``)."""
    depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise RequestError(400, "bad_json", f"the body nests {depth} levels deep; at most {MAX_JSON_DEPTH}")
    try:
        obj = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        detail = f"the body is not UTF-8: {exc.reason} at byte {exc.start}"
        raise RequestError(400, "bad_json", detail) from exc
    except json.JSONDecodeError as exc:
        raise RequestError(
            400, "bad_json", f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise RequestError(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
    if isinstance(obj, dict) and "reports" in obj:
        if set(obj) != {"reports"}:
            other = sorted(k for k in obj if k != "reports")[0]
            detail = f"a batch object has only the member 'reports', not {other!r}"
            raise RequestError(400, "bad_batch", detail)
        reports = obj["reports"]
        if not isinstance(reports, list):
            raise RequestError(400, "bad_batch", "'reports' must be an array of report objects")
    elif isinstance(obj, dict):
        reports = [obj]
    else:
        raise RequestError(400, "bad_batch", 'the body must be a report object or {"reports": [...]}')
    if not reports:
        raise RequestError(400, "bad_batch", "the batch holds no report")
    if len(reports) > max_batch:
        detail = f"{len(reports)} reports in one request; at most {max_batch}"
        raise RequestError(413, "too_many_reports", detail)
    return [_json_record(r) if type(r) is dict else r for r in reports]


# ------------------------------------------------------------------------------------------------------------
# JSON batches as columns (the fast path; the parsing above stays the reference for every refusal)
# ------------------------------------------------------------------------------------------------------------
#: A ``seed`` of the JSON form: the decimal string of a signed 64-bit integer, no ``+``, no leading zeros,
#: no ``-0`` (the range is checked on conversion).
_JsonSeed = Annotated[str, msgspec.Meta(pattern=r"^(?:0|-?[1-9][0-9]{0,18})\Z")]


class _JsonReport(msgspec.Struct, forbid_unknown_fields=True):
    """One report of the JSON form, typed by ``schemas/report.avsc``: msgspec checks every type in C
    (``bits`` and ``client_id`` standard padded base64; no unknown member; no ``null`` where the schema has
    no null branch)."""

    task_id: str
    schema_version: int
    event_time: int
    group: int = 0
    value: int | None = None
    seed: _JsonSeed | None = None
    bits: bytes | None = None
    items: list[int] | None = None
    reals: list[float] | None = None
    client_id: bytes | None = None


class _JsonBatch(msgspec.Struct, forbid_unknown_fields=True):
    reports: list[_JsonReport]


_JSON_BATCH = msgspec.json.Decoder(_JsonBatch)
_JSON_ONE = msgspec.json.Decoder(_JsonReport)
_JSON_COLUMNS = (
    "task_id", "schema_version", "event_time", "group", "value", "seed", "bits", "items", "reals", "client_id"
)  # fmt: skip
_ROWS = operator.attrgetter(*_JSON_COLUMNS)


def _uniform(col: tuple[Any, ...]) -> bool | None:
    """True: every entry present; False: none; None: some are null (the reference path decides)."""
    nulls = col.count(None)
    return True if nulls == 0 else False if nulls == len(col) else None


def _ragged_width(col: tuple[Any, ...]) -> int | None:
    """The common length of the entries (bytes or lists), None when they differ."""
    widths = set(map(len, col))
    return widths.pop() if len(widths) == 1 else None


def json_columns(body: bytes, task_id: str, decode: dict[str, Any], max_batch: int) -> Any:
    """A JSON body -> a :class:`~wire.decode.ColumnBatch` without a dict per report, or None when
    the body is anything but a well-typed batch of regular reports; None is no verdict: the reference path
    (:func:`parse_json_body`, the validator on records) then answers, with the refusal's reason code.

    The body is decoded by msgspec into typed structs (:class:`_JsonReport`), transposed into columns in C
    (``operator.attrgetter`` and ``zip``) and converted to numpy arrays column by column. Declined here:
    malformed or mistyped JSON, an empty batch or one of more than ``max_batch`` reports, another task id,
    an integer outside int64, a field null in some reports only, ``bits`` / ``items`` / ``reals`` /
    ``client_id`` of different lengths within the batch or longer than the task's (``decode``:
    :func:`wire.validate.decode_params`)."""
    from wire.decode import ColumnBatch

    reports = _json_reports(body)
    n = len(reports) if reports is not None else 0
    if n == 0 or n > max_batch:
        return None
    tid, sv, et, grp, value, seed, bits, items, reals, cid = zip(*map(_ROWS, reports))
    if tid.count(task_id) != n:
        return None
    cols = _JsonColumns(n)
    try:
        sv_a, et_a, grp_a = (np.array(c, dtype=np.int64) for c in (sv, et, grp))
        cols.add_integers(value=value, seed=seed)
        cols.add_lists(bits, items, decode)
        cols.add_reals(reals, decode.get("reals_len"))
        cols.add_client_ids(cid)
    except (OverflowError, ValueError, _Decline):  # an integer outside int64, or a batch declined
        return None
    return ColumnBatch(task_id, sv_a, et_a, grp_a, cols.present, cols.payload, True, cols.lengths)


def _json_reports(body: bytes) -> list[Any] | None:
    """The body's reports as typed structs (a batch object or one report object); None: malformed."""
    try:
        try:
            return _JSON_BATCH.decode(body).reports
        except msgspec.ValidationError:  # one report object (it has no member 'reports')
            return [_JSON_ONE.decode(body)]
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


class _Decline(Exception):
    """A batch the column path leaves to the reference path (no verdict)."""


class _JsonColumns:
    """The payload columns of ``n`` JSON reports, in :class:`~wire.decode.ColumnBatch` form."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.present: dict[str, np.ndarray] = {}
        self.payload: dict[str, np.ndarray] = {}
        self.lengths: dict[str, np.ndarray] = {}
        self._yes, self._no = np.ones(n, dtype=bool), np.zeros(n, dtype=bool)

    def _presence(self, name: str, col: tuple[Any, ...]) -> bool:
        """Records whether field ``name`` is in every report (True) or in none (False); else declines."""
        has = _uniform(col)
        if has is None:
            raise _Decline(name)
        self.present[name] = self._yes if has else self._no
        return has

    def _width(self, col: tuple[Any, ...], has: bool) -> int:
        """The entries' common length (0 when absent); declines ragged entries."""
        w = _ragged_width(col) if has else 0
        if w is None:
            raise _Decline("ragged")
        return w

    def add_integers(self, **cols: tuple[Any, ...]) -> None:
        n = self.n
        for name, col in cols.items():
            has = self._presence(name, col)
            self.payload[name] = np.array(col, dtype=np.int64) if has else np.zeros(n, dtype=np.int64)

    def add_lists(self, bits: tuple[Any, ...], items: tuple[Any, ...], decode: dict[str, Any]) -> None:
        """``bits`` (bytes) and ``items`` (integer lists), no longer than the task's lengths."""
        n = self.n
        for name, col, cap, dtype in (
            ("bits", bits, decode.get("bits_len"), np.uint8),
            ("items", items, decode.get("items_len"), np.int64),
        ):
            has = self._presence(name, col)
            w = self._width(col, has)
            if has and w > (cap or 0):
                raise _Decline(name)
            self.lengths[name] = np.full(n, w if has else 0, dtype=np.int64)
            if name == "bits":
                self.payload[name] = np.frombuffer(b"".join(col), dtype=np.uint8).reshape(n, w) if has else (
                    np.zeros((n, 0), dtype=np.uint8))  # fmt: skip
            else:
                self.payload[name] = (
                    np.array(col, dtype=dtype).reshape(n, w) if has else np.zeros((n, 0), dtype)
                )

    def add_reals(self, reals: tuple[Any, ...], want: int | None) -> None:
        """``reals`` of exactly the task's length (one scalar when the task gives none)."""
        n = self.n
        has = self._presence("reals", reals)
        w = self._width(reals, has)
        if has and w != (1 if want is None else want):
            raise _Decline("reals")
        self.lengths["reals"] = np.full(n, w if has else 0, dtype=np.int64)
        shape = (n,) if want is None else (n, want)
        self.payload["reals"] = np.array(reals, dtype=np.float64).reshape(shape) if has else np.zeros(shape)

    def add_client_ids(self, cid: tuple[Any, ...]) -> None:
        """Client ids as rows of (length, bytes...)."""
        from wire.decode import MAX_CLIENT_ID_BYTES

        n = self.n
        has = self._presence("client_id", cid)
        w = self._width(cid, has)
        if w > MAX_CLIENT_ID_BYTES:
            raise _Decline("client_id")
        ids = np.zeros((n, 1 + w), dtype=np.uint8)
        if has:
            ids[:, 0] = w
            ids[:, 1:] = np.frombuffer(b"".join(cid), dtype=np.uint8).reshape(n, w)
        self.payload["client_id"] = ids


# ---- the column encoder of a request's block -----------------------------------------------------------
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_TEN = np.arange(10)


def _varints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints of an int64 matrix ``(n, m)``: ``(bytes (n, m, 10) uint8, lengths (n, m))``."""
    u = (x.view(np.uint64) << np.uint64(1)) ^ (x >> 63).view(np.uint64)
    lens = np.searchsorted(_VARINT_LIMITS, u, side="right") + 1
    mat = ((u[..., None] >> _SHIFTS) & np.uint64(0x7F)).astype(np.uint8)
    mat[_TEN < (lens - 1)[..., None]] |= 0x80
    return mat, lens


def _gather(pieces: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """The rows' pieces ``(matrix (n, w), lengths (n,))`` side by side, each cut to its row's length, in row
    order: one boolean gather over the matrices set side by side (a few numpy calls whatever the batch)."""
    mats = np.concatenate([m for m, _ in pieces], axis=1)
    widths = [m.shape[1] for m, _ in pieces]
    piece = np.repeat(np.arange(len(pieces)), widths)  # the piece of each column of ``mats``
    offset = np.arange(mats.shape[1]) - np.repeat(np.cumsum(widths) - widths, widths)
    lens = np.stack([ln for _, ln in pieces], axis=1)
    return mats[offset < lens[:, piece]].tobytes()


def encode_columns(cb: Any, event_ms: np.ndarray, *, client_ids: bool = True) -> bytes:
    """The Avro binary encoding (``schemas/report.avsc``, one block's data) of every row of a
    :class:`~wire.decode.ColumnBatch`, byte-identical to fastavro's of :meth:`ColumnBatch.record`,
    with ``event_ms`` as the times; ``client_ids=False`` writes every ``client_id`` as null. Per-row
    lengths of ``bits`` / ``items`` / ``reals`` / ``client_id`` are honoured; rows must all be in the
    columns (no fastavro fallback rows). Every varint of the batch is computed in one pass."""
    n = len(cb)
    if cb.n_fallback:
        raise ValueError("a ColumnBatch with fastavro fallback rows is not encoded column-wise")
    pr, pay = cb.present, cb.payload
    on_ids = pr["client_id"] & client_ids
    ids = pay["client_id"]
    ln = {f: np.where(pr[f], cb.lengths[f], 0) for f in ("bits", "items", "reals")}
    ln["client_id"] = np.where(on_ids, ids[:, 0], 0).astype(np.int64)
    items = pay["items"].reshape(n, -1)
    k = items.shape[1]
    # the varints, by column: header, value, seed, the four lengths, then the items
    ints = np.empty((n, 9 + k), dtype=np.int64)
    ints[:, 0], ints[:, 1], ints[:, 2] = cb.schema_version, event_ms, cb.group
    ints[:, 3], ints[:, 4] = pay["value"], pay["seed"]
    ints[:, 5], ints[:, 6], ints[:, 7], ints[:, 8] = ln["bits"], ln["items"], ln["reals"], ln["client_id"]
    ints[:, 9:] = items
    on = np.ones((n, 9 + k), dtype=bool)
    on[:, 3], on[:, 4], on[:, 5], on[:, 8] = pr["value"], pr["seed"], pr["bits"], on_ids
    on[:, 6], on[:, 7] = ln["items"] > 0, ln["reals"] > 0  # an empty array is its end marker alone
    on[:, 9:] = np.arange(k) < ln["items"][:, None]
    mat, lens = _varints(ints)
    lens = np.where(on, lens, 0)
    tid = cb.task_id.encode("utf-8")
    head = _avro_long(len(tid)) + tid
    branch = np.stack([pr["value"], pr["seed"], pr["bits"], pr["items"], pr["reals"], on_ids], axis=1)
    branch = branch.astype(np.uint8) * 2  # a union's index: 0 null, 1 the value (a one-byte varint)
    one = np.ones(n, dtype=np.int64)

    def vint(j: int) -> tuple[np.ndarray, np.ndarray]:
        return mat[:, j], lens[:, j]

    def br(j: int) -> tuple[np.ndarray, np.ndarray]:
        return branch[:, j : j + 1], one

    def end_of(f: str) -> tuple[np.ndarray, np.ndarray]:  # an array's end marker, after its branch 1
        return np.zeros((n, 1), dtype=np.uint8), pr[f].astype(np.int64)

    reals = np.ascontiguousarray(pay["reals"].reshape(n, -1), dtype="<f8").view(np.uint8)
    pieces = [
        (np.frombuffer(head * n, dtype=np.uint8).reshape(n, len(head)), np.full(n, len(head))),
        vint(0), vint(1), vint(2),
        br(0), vint(3), br(1), vint(4),
        br(2), vint(5), (pay["bits"], ln["bits"]),
        br(3), vint(6), *(vint(9 + j) for j in range(k)), end_of("items"),
        br(4), vint(7), (reals, 8 * ln["reals"]), end_of("reals"),
        br(5), vint(8), (ids[:, 1:], ln["client_id"]),
    ]  # fmt: skip
    return _gather(pieces)

#: Deepest JSON nesting a body may have (a batch of reports is 3 deep: object, array, object, array).
MAX_JSON_DEPTH = 16
#: The fewest bytes one report record of ``schemas/report.avsc`` takes (an empty task id, three one-byte
#: longs and the null branch of each union but ``client_id``): a block declaring more records than its
#: bytes can hold is refused before anything is decoded.
MIN_RECORD_BYTES = 9
#: Bounds of an Avro body's header: metadata entries and the writer schema's size.
MAX_METADATA_ENTRIES = 16
MAX_SCHEMA_BYTES = 1 << 16
_MAGIC = b"Obj\x01"
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
# opening brackets -> +1, closing ones -> -1 (as int8), applied to the brackets alone
_STEPS = bytes.maketrans(b"[{]}", bytes([1, 1, 255, 255]))


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, strings ignored. A vectorized bracket count
    first (an upper bound: brackets inside strings count too; two C passes over the body and a cumulative
    sum over its brackets); the exact scan runs only when it exceeds :data:`MAX_JSON_DEPTH`."""
    steps = np.frombuffer(body.translate(_STEPS, _NOT_BRACKETS), dtype=np.int8)
    bound = int(np.cumsum(steps, dtype=np.int64).max()) if len(steps) else 0
    if bound <= MAX_JSON_DEPTH:
        return max(bound, 0)
    depth = deepest = 0
    in_str = escaped = False
    for c in body:
        if in_str:
            if escaped:
                escaped = False
            elif c == 0x5C:
                escaped = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif c in (0x5D, 0x7D):
            depth -= 1
    return deepest


class _Cursor:
    """Reads an in-memory Avro container with every length checked against the bytes left."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def long(self, what: str) -> int:
        shift = acc = 0
        for k in range(10):
            if self.pos >= len(self.data):
                raise _undecodable(f"the body ends inside {what}")
            b = self.data[self.pos]
            self.pos += 1
            acc |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (acc >> 1) ^ -(acc & 1)
            if k == 9:
                break
        raise _undecodable(f"{what} is a varint of more than 64 bits")

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.left():
            raise _undecodable(f"{what} declares {n} bytes; {self.left()} are left in the body")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


#: a Python object's repr (``<_io.BytesIO object at 0x7f...>``) inside a decoder's message: process internals
_OBJECT_REPR = re.compile(r"<[A-Za-z_][\w.]* object at 0x[0-9a-fA-F]+>")


def _undecodable(detail: str) -> RequestError:
    """A 400 ``undecodable``; object reprs in the decoder's message become ``<stream>`` (the answer is the
    same for the same body, and shows the client nothing of the process)."""
    detail = _OBJECT_REPR.sub("<stream>", detail)
    return RequestError(400, "undecodable", f"the body is not an Avro object container: {detail}")


@dataclasses.dataclass
class AvroBody:
    """An Avro body, walked and decoded: ``records`` (a :class:`~wire.decode.ColumnBatch` when
    every block decodes column-wise, else record dicts), the report count, and the blocks' raw bytes
    (``raw``: the concatenated block data, re-usable as is when the writer schema is the current report
    schema, ``current``)."""

    records: Any
    count: int
    raw: bytes
    current: bool


def _writer_schema_problem(schema: object) -> str:
    """Why a writer schema that is not the report schema is refused (the first foreign field, if any)."""
    if isinstance(schema, dict) and schema.get("type") == "record" and isinstance(schema.get("fields"), list):
        names = [f.get("name") for f in schema["fields"] if isinstance(f, dict)]
        extra = [n for n in names if n not in _FIELDS]
        if extra:
            return f"report 0: {extra[0]!r} is not a field of the report schema"
    return "report 0: the writer schema is not schemas/report.avsc (version 2, with or without client_id)"


def _container_metadata(body: bytes) -> tuple[dict[str, bytes], _Cursor]:
    """The header's metadata map of an Avro container, and a cursor at the sync marker that follows it."""
    if body[:4] != _MAGIC:
        raise _undecodable("no 'Obj\\x01' magic")
    cur = _Cursor(body)
    cur.pos = 4
    meta: dict[str, bytes] = {}
    while True:
        n = cur.long("the metadata count")
        if n == 0:
            break
        if n < 0:
            n = -n
            cur.long("the metadata block size")
        if len(meta) + n > MAX_METADATA_ENTRIES or 2 * n > cur.left():
            raise _undecodable(f"the header declares {n} metadata entries")
        for _ in range(n):
            key = cur.take(cur.long("a metadata key length"), "a metadata key")
            meta[key.decode("utf-8", "replace")] = cur.take(cur.long("a metadata value length"), "a value")
    return meta, cur


def _report_writer_schema(meta: dict[str, bytes]) -> tuple[Any, Any]:
    """The parsed writer schema and its report layout; refuses a codec other than null or another schema."""
    from wire.decode import report_layout

    codec = meta.get("avro.codec", b"null")
    if codec != b"null":
        name = codec.decode("utf-8", "replace")
        detail = f"Avro codec {name!r}: the collector takes uncompressed (null) containers only"
        raise RequestError(400, "undecodable", detail)
    text = meta.get("avro.schema")
    if text is None or len(text) > MAX_SCHEMA_BYTES or json_depth(text) > MAX_JSON_DEPTH:
        raise _undecodable("no writer schema, or one too large or too deeply nested")
    try:
        schema_obj = json.loads(text)
        parsed = fastavro.parse_schema(schema_obj)
    except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on a bad schema
        raise _undecodable(f"the writer schema does not parse: {exc}") from exc
    layout = report_layout(parsed)
    if layout is None:
        raise RequestError(422, "invalid_payload", _writer_schema_problem(schema_obj), 0)
    return parsed, layout


def _container_blocks(cur: _Cursor, max_batch: int) -> tuple[list[tuple[int, bytes]], int]:
    """The (record count, bytes) of every block after the sync marker, and the total count; each count and
    size is checked against ``max_batch`` and the bytes left before the block is taken."""
    sync = cur.take(16, "the sync marker")
    blocks: list[tuple[int, bytes]] = []
    total = 0
    while cur.left():
        count = cur.long("a block count")
        size = cur.long("a block size")
        if count < 1 or size < 0:
            raise _undecodable(f"a block declares {count} records of {size} bytes")
        total += count
        if total > max_batch:
            raise RequestError(413, "too_many_reports", f"more than {max_batch} reports in one request")
        if count * MIN_RECORD_BYTES > size:
            raise _undecodable(f"a block declares {count} records in {size} bytes")
        data = cur.take(size, "a block")
        if cur.take(16, "a sync marker") != sync:
            raise _undecodable("a block does not end with the header's sync marker")
        blocks.append((count, data))
    if not blocks:
        raise RequestError(400, "bad_batch", "the container holds no report")
    return blocks, total


def _column_batches(blocks: list[tuple[int, bytes]], task_id: str, decode: dict[str, Any] | None,
                    layout: Any) -> list[Any]:
    """Every block decoded column-wise, or ``[]`` when the column decoder declines any of them."""
    from wire.decode import decode_block

    kw = {k: v for k, v in (decode or {}).items() if k in ("bits_len", "items_len", "reals_len")}
    cbs: list[Any] = []
    for count, data in blocks:
        cb = decode_block(data, count, task_id, client_id=layout, **kw)
        if cb is None or cb.n_fallback:
            return []
        cbs.append(cb)
    return cbs


def _fastavro_records(blocks: list[tuple[int, bytes]], parsed: Any) -> list[object]:
    """Every block's records read by fastavro from exactly its bytes, with ``client_id`` defaulted and an
    aware ``event_time`` as epoch milliseconds."""
    records: list[object] = []
    for count, data in blocks:
        fo = io.BytesIO(data)
        try:
            for _ in range(count):
                records.append(fastavro.schemaless_reader(fo, parsed, None))
        except Exception as exc:  # noqa: BLE001
            raise _undecodable(f"a record does not decode: {exc}") from exc
        if fo.tell() != len(data):
            raise _undecodable("a block holds bytes after its declared records")
    for rec in records:
        if type(rec) is not dict:
            continue
        rec.setdefault("client_id", None)
        et = rec["event_time"]
        if isinstance(et, _dt.datetime) and et.tzinfo is not None:
            rec["event_time"] = round((et - _EPOCH).total_seconds() * 1000)
    return records


def parse_avro_body(
    body: bytes, max_batch: int, *, task_id: str | None = None, decode: dict[str, Any] | None = None
) -> AvroBody:
    """An Avro object container body (codec ``null``, writer schema ``schemas/report.avsc``) -> its reports.

    Work is bounded by the body, never by what it declares: the header's metadata count and lengths, each
    block's record count (against ``max_batch`` and against its byte size, :data:`MIN_RECORD_BYTES` per
    record) and byte size are checked before anything is read or allocated; blocks are then decoded
    column-wise (:func:`wire.decode.decode_block`, ``task_id`` and ``decode``: the task's
    lengths) or, when that declines, by fastavro from exactly the block's bytes.

    Raises :class:`RequestError`: not a container, another codec, a count or length past the bytes
    (400 ``undecodable``), more than ``max_batch`` reports (413 ``too_many_reports``), a writer schema
    other than the report schema (422 ``invalid_payload``), no report (400 ``bad_batch``)."""
    from wire.decode import ColumnBatch

    meta, cur = _container_metadata(body)
    parsed, layout = _report_writer_schema(meta)
    blocks, total = _container_blocks(cur, max_batch)
    cbs = [] if task_id is None else _column_batches(blocks, task_id, decode, layout)
    raw = b"".join(d for _, d in blocks)
    if cbs:
        return AvroBody(ColumnBatch.concat(cbs), total, raw, layout)
    return AvroBody(_fastavro_records(blocks, parsed), total, raw, layout)


def report_to_json(record: dict[str, Any]) -> dict[str, Any]:
    """An Avro report record -> its JSON form (docs/wire_format.md): the inverse of the JSON parsing."""
    out = dict(record)
    et = out.get("event_time")
    if isinstance(et, _dt.datetime):
        out["event_time"] = round((et - _EPOCH).total_seconds() * 1000)
    if out.get("seed") is not None:
        out["seed"] = str(int(out["seed"]))
    for name in ("bits", "client_id"):
        if out.get(name) is not None:
            out[name] = base64.b64encode(out[name]).decode("ascii")
    return out


# ------------------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------------------
def _shape_problem(rec: object) -> tuple[str, str] | None:
    """The checks the Avro decoder of a report file makes and the validator does not: member names and the
    type of ``schema_version``."""
    if type(rec) is not dict:
        return None  # the validator: not_a_record
    if not rec.keys() <= _FIELDS:
        extra = sorted(k for k in rec if k not in _FIELDS)[0]
        return "invalid_payload", f"{extra!r} is not a field of the report schema"
    sv = rec.get("schema_version")
    if sv is not None and type(sv) is not int:
        return "wrong_schema_version", "schema_version must be an integer"
    return None


#: What a refusal's detail adds, for a report sent in the JSON form, when it names one of these fields.
_JSON_HINTS = {
    "seed": ' (JSON: the decimal string of the signed 64-bit seed, e.g. "-42")',
    "bits": " (JSON: standard padded base64)",
    "client_id": " (JSON: standard padded base64)",
}


class ReportChecker:
    """Checks a request's records against a task, all or nothing (see the module docstring).

    ``shuffled`` (a task collected through the shuffler, ``anonymity.shuffled``): the collector drops client
    ids, rounds event times down to ``time_precision_s`` (``precision_ms``) and permutes each file.
    """

    def __init__(
        self,
        validator: TaskReportValidator,
        *,
        drop_client_ids: bool = False,
        precision_ms: int | None = None,
    ) -> None:
        self.validator = validator
        self.task = validator.task
        self.drop_client_ids = drop_client_ids
        self.precision_ms = precision_ms
        self.last: Any = None  # the last checked batch's columns (a uniform task's ValidatedBatch)
        from wire.validate import decode_params

        self.decode = decode_params(validator.aggregator)

    @property
    def shuffled(self) -> bool:
        return self.drop_client_ids

    def _refused(self, records: Sequence[object]) -> bool:
        return bool(self.validator.validate(list(records), "collector").dead_letters)

    def _first_refused(self, records: Sequence[object], json_form: bool) -> RequestError:
        """The first refused record of ``records`` (which hold one): a bisection over prefixes (a record's
        verdict does not depend on the others), then its reason from validating it alone."""
        lo, hi = 0, len(records)  # records[:lo] all pass; records[:hi] hold a refused one
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._refused(records[:mid]):
                hi = mid
            else:
                lo = mid
        dead = self.validator.validate([records[lo]], "collector").dead_letters[0]
        detail = str(dead["detail"])
        if json_form:
            detail += next((hint for field, hint in _JSON_HINTS.items() if detail.startswith(field)), "")
        return RequestError(422, str(dead["reason"]), f"report {lo}: {detail}", lo)

    def passes(self, cb: Any) -> bool:
        """True when every row of a :class:`~wire.decode.ColumnBatch` passes the validator (a
        refusal is named by the reference path, :meth:`check`)."""
        if self.validator.aggregator.uniform_oracle:
            return not self.validator._validator(0).validate(cb, "collector").dead_letters
        return not self.validator.validate(cb, "collector").dead_letters

    def check_columns(self, cb: Any) -> None:
        """A :class:`~wire.decode.ColumnBatch` passes whole, else :class:`RequestError` (422) for
        its first refused report (found from the rows as records, refusals only)."""
        if self.validator.validate(cb, "collector").dead_letters:
            self.check([cb.record(i) for i in range(len(cb))])
            raise AssertionError("the column and record validations disagree")  # pragma: no cover

    def check(self, records: list[object], *, json_form: bool = False) -> list[dict[str, Any]]:
        """The records, every one accepted; else raises :class:`RequestError` (422) for the first refused
        one (``json_form``: the details say how the JSON form spells the field)."""
        shape = next(((i, p) for i, r in enumerate(records) if (p := _shape_problem(r)) is not None), None)
        head = records if shape is None else records[: shape[0]]
        self.last = None
        if head and shape is None and self.validator.aggregator.uniform_oracle:
            vb = self.validator._validator(0).validate(list(head), "collector")
            if not vb.dead_letters:
                self.last = vb  # the accepted reports as columns: what the collector encodes
                return records  # type: ignore[return-value]
        if head and self._refused(head):
            raise self._first_refused(head, json_form)
        if shape is not None:
            i, (reason, detail) = shape
            raise RequestError(422, reason, f"report {i}: {detail}", i)
        return records  # type: ignore[return-value]  # all dicts: the validator passed them


def make_checker(task: Task) -> ReportChecker:
    """The checker of a task of any kind whose devices send LDP reports (``ldp.kinds.Kind.ldp_reports``).
    A central-DP kind (raw records at a trusted aggregator, e.g. ``batch_queries``) is refused with
    ``ValueError``."""
    from ldp.aggregate import make_aggregator
    from ldp.kinds import kind_of

    if not kind_of(task).ldp_reports:
        raise ValueError(
            f"task {task.task_id!r} is a {task.kind} task (central DP: raw records); the collector takes "
            "LDP reports only"
        )
    shuffled = bool(getattr(task, "shuffled", False))
    # a shuffled task's reports: the collector rounds their times itself, so no fine_time check here
    precision = int(task.anonymity.time_precision_s) * 1000 if shuffled else None
    return ReportChecker(
        TaskReportValidator(make_aggregator(task), rounded_times=not shuffled),
        drop_client_ids=shuffled,
        precision_ms=precision,
    )


# ------------------------------------------------------------------------------------------------------------
# rolling Avro files, durable before the answer
# ------------------------------------------------------------------------------------------------------------
#: ``errno`` values of a write that may succeed later (disk or quota full, descriptors exhausted).
TRANSIENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM}
)
#: Avro file metadata key of an authenticating collector's files: the distinct senders (tokens) of the
#: file's reports, a zero-padded decimal (docs/collector.md). Absent when no authentication is configured.
SENDERS_KEY = "ldp.collector.distinct_senders"
_SENDERS_WIDTH = 12
#: Avro file metadata key beside :data:`SENDERS_KEY`: the file's senders as sorted keyed digests, each the
#: first :data:`SENDER_DIGEST_BYTES` bytes of HMAC-SHA256(collector secret, sender) in hex, concatenated. A
#: shuffler unions them over the files of a bucket (distinct senders per bucket). Absent when the senders
#: are unknown (no authentication; a file adopted after a kill).
SENDERS_LIST_KEY = "ldp.collector.senders"
SENDER_DIGEST_BYTES = 8
#: The collector's secret for :data:`SENDERS_LIST_KEY` (mode 0600, created once, in the output directory).
SENDERS_SECRET = ".collect-senders.key"
#: Records per block of a permuted file.
_PERMUTED_BLOCK = 4096
LOCK_NAME = ".collect.lock"


def _avro_long(n: int) -> bytes:
    """Avro's zig-zag varint encoding of a long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


class _Segment:
    """One open report file: its descriptor, size, the durable (fsynced) prefix and the reports in it."""

    def __init__(self, stem: str, tmp: Path, final: Path, fd: int, sync: bytes, header: int,
                 senders_at: int | None, kfd: int | None = None) -> None:  # fmt: skip
        self.stem, self.tmp, self.final, self.fd, self.sync = stem, tmp, final, fd, sync
        self.ledger = _ledger_path(tmp)
        self.kfd = kfd  # the block ledger's descriptor (None for an adopted file: nothing is appended)
        self.size = header
        self.committed = 0
        self.marks: list[tuple[int, int]] = [(header, 0)]  # (end offset, reports up to it)
        self.kmarks: list[tuple[int, int]] = [(header, 0)]  # (end offset, ledger size up to it)
        self.senders: set[bytes] = set()
        self.pending_senders: list[tuple[int, bytes]] = []
        self.senders_at = senders_at
        self.generation = 0
        self.opened = time.monotonic()
        self.syncing: Any = None
        self.lock = threading.Lock()  # one publication at a time (a worker thread, or close())
        self.published = False

    @property
    def reports(self) -> int:
        return self.marks[-1][1]

    def reports_to(self, offset: int) -> int:
        return next(n for end, n in reversed(self.marks) if end <= offset)


@dataclasses.dataclass
class Ticket:
    """What :meth:`RollingAvroWriter.append` wrote: acknowledged once the segment is durable to ``end``."""

    segment: _Segment
    end: int
    count: int
    generation: int


@dataclasses.dataclass
class Adopted:
    """What :meth:`RollingAvroWriter.adopt` found of earlier processes."""

    files: int = 0
    reports: int = 0
    garbage_bytes: int = 0
    removed: int = 0
    markers: int = 0
    cut_blocks: int = 0  # whole blocks cut because the ledger does not record them (never acknowledged)
    cut_reports: int = 0
    keys: int = 0  # idempotency keys of kept blocks, recorded in the key journal


LEDGER_SUFFIX = ".keys"


def _remove_leftover(tmp: Path, ledger: Path, out: Adopted) -> None:
    """Removes an adopted ``.tmp`` file and its ledger (counted as removed)."""
    tmp.unlink()
    ledger.unlink(missing_ok=True)
    out.removed += 1


def _ledger_path(tmp: Path) -> Path:
    """The block ledger beside an open report file: ``.collect-<stem>.keys``."""
    return tmp.with_name(tmp.name[: -len(TMP_SUFFIX)] + LEDGER_SUFFIX)


@dataclasses.dataclass(frozen=True)
class LedgerEntry:
    """One block of an open report file as its ledger records it: the block's byte range
    ``[start, end)``, its report count, the receive time and, for a request with an ``Idempotency-Key``,
    the digests of the key and of the body (None without a key)."""

    start: int
    end: int
    count: int
    time: float
    key: bytes | None
    body: bytes | None

    def line(self) -> bytes:
        k = "-" if self.key is None else self.key.hex()
        b = "-" if self.body is None else self.body.hex()
        return f"{self.start} {self.end} {self.count} {self.time:.3f} {k} {b}\n".encode()


def read_ledger(path: Path) -> list[LedgerEntry]:
    """The whole lines of a block ledger (a torn last line, or any malformed one, is skipped)."""
    try:
        text = path.read_bytes().decode("ascii", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.split("\n")[:-1]:  # the part after the last newline is torn
        parts = line.split(" ")
        if len(parts) != 6:
            continue
        try:
            key = None if parts[4] == "-" else bytes.fromhex(parts[4])
            body = None if parts[5] == "-" else bytes.fromhex(parts[5])
            out.append(LedgerEntry(int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3]), key, body))
        except ValueError:
            continue
    return out


def senders_secret(directory: Path) -> bytes:
    """The collector's secret for sender digests, ``DIR/.collect-senders.key`` (32 bytes from
    ``os.urandom``, mode 0600), created when missing. Raises ``ValueError`` for a file others may read or
    a short one."""
    path = directory / SENDERS_SECRET
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if os.stat(path).st_mode & 0o077:
            raise ValueError(
                f"{path}: the senders' secret must be readable by its owner only (chmod 600)"
            ) from None
        key = path.read_bytes()
        if len(key) < 32:
            raise ValueError(f"{path}: the senders' secret must hold at least 32 bytes") from None
        return key
    try:
        _pwrite_all(fd, os.urandom(32), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(directory)
    return path.read_bytes()


def sender_listing(secret: bytes, senders: set[bytes]) -> str:
    """:data:`SENDERS_LIST_KEY`'s value: the sorted hex digests of ``senders`` (no token, no sender id)."""
    n = SENDER_DIGEST_BYTES
    return "".join(sorted(hmac.new(secret, s, hashlib.sha256).digest()[:n].hex() for s in senders))


def _header_bytes(
    schema: Any, sync: bytes, senders: bool, listing: str | None = None
) -> tuple[bytes, int | None]:
    buf = io.BytesIO()
    meta = {SENDERS_KEY: "0" * _SENDERS_WIDTH} if senders else None
    if meta is not None and listing is not None:
        meta[SENDERS_LIST_KEY] = listing
    fastavro.write.Writer(buf, schema, codec="null", sync_marker=sync, metadata=meta)
    head = buf.getvalue()
    if not senders:
        return head, None
    key = SENDERS_KEY.encode()
    at = head.index(key) + len(key) + len(_avro_long(_SENDERS_WIDTH))
    return head, at


_Walk = tuple[int, int, bytes, list[tuple[int, int]], int | None, list[tuple[int, int, int]]]


def _walk(data: bytes, parsed: Any) -> _Walk:
    """The valid prefix of a report file: ``(end, reports, sync, record spans, senders offset, blocks)``,
    ``blocks`` as ``(start, end, count)`` byte ranges. Every block is decoded record by record; the walk
    stops at the first block that does not frame or decode."""
    cur = _Cursor(data)
    if data[:4] != _MAGIC:
        return 0, 0, b"", [], None, []
    cur.pos = 4
    try:
        while (n := cur.long("meta")) != 0:
            if n < 0:
                n = -n
                cur.long("meta size")
            for _ in range(n):
                cur.take(cur.long("key"), "key")
                cur.take(cur.long("value"), "value")
        sync = cur.take(16, "sync")
    except RequestError:
        return 0, 0, b"", [], None, []
    key = SENDERS_KEY.encode()
    at = data.find(key, 0, cur.pos)
    senders_at = None if at < 0 else at + len(key) + len(_avro_long(_SENDERS_WIDTH))
    end, total, spans, blocks = cur.pos, 0, [], []
    while cur.left():
        try:
            count, size = cur.long("count"), cur.long("size")
            if count < 1 or count * MIN_RECORD_BYTES > size:
                break
            start = cur.pos
            block = cur.take(size, "block")
            if cur.take(16, "sync") != sync:
                break
            fo = io.BytesIO(block)
            rows = []
            for _ in range(count):
                a = fo.tell()
                fastavro.schemaless_reader(fo, parsed, None)
                rows.append((start + a, start + fo.tell()))
            if fo.tell() != size:
                break
        except Exception:  # noqa: BLE001 - a torn block: the valid prefix ends before it
            break
        spans.extend(rows)
        total += count
        blocks.append((end, cur.pos, count))
        end = cur.pos
    return end, total, sync, spans, senders_at, blocks


class RollingAvroWriter:
    """Report blocks -> ``DIR/collect-<UTC start>-<run>-<seq>.avro`` files (``schemas/report.avsc``, codec
    null), each published with its ``.done`` marker (see the module docstring).

    :meth:`append` writes a request's block to the open hidden ``.tmp`` file and returns a
    :class:`Ticket`; the request may be acknowledged once :meth:`commit` (group commit: one ``fsync`` in a
    worker thread for every request waiting) or :meth:`commit_sync` made it durable. A failed write or
    ``fsync`` cuts the file back to its durable prefix and raises :class:`WriteError` for every request
    past it (``transient``: a full disk, exhausted descriptors). ``permute`` (shuffled tasks): a file is
    published with its records in a CSPRNG-drawn order. ``senders``: files carry :data:`SENDERS_KEY`.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        roll_reports: int = 100_000,
        roll_seconds: float = 60.0,
        permute: bool = False,
        senders: bool = False,
        keys: IdempotencyKeys | None = None,
    ) -> None:
        if roll_reports < 1:
            raise ValueError(f"roll_reports must be >= 1, got {roll_reports}")
        if not roll_seconds > 0:
            raise ValueError(f"roll_seconds must be > 0, got {roll_seconds}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock)
            raise ValueError(f"{self.directory} is in use by another collector (its lock is held)") from exc
        self.roll_reports = int(roll_reports)
        self.roll_seconds = float(roll_seconds)
        self.permute = permute
        self.senders = senders
        self.keys = keys  # where a published file's idempotency keys are recorded (the key journal)
        self._senders_secret = senders_secret(self.directory) if senders else None
        self.schema = schemas.report_schema()
        self.run_id = secrets.token_hex(4)
        self._seq = 0
        self._seg: _Segment | None = None
        self.unfinished: list[_Segment] = []
        self.written_reports = 0
        self.written_files: list[str] = []
        self.sync_seconds: list[float] = []  # fsync durations not yet read by the metrics

    # ---- opening and appending -------------------------------------------------------------------------
    @property
    def open_reports(self) -> int:
        return (0 if self._seg is None else self._seg.reports) + sum(s.reports for s in self.unfinished)

    def _open(self) -> _Segment:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        while True:
            stem = f"{stamp}-{self.run_id}-{self._seq:06d}"
            self._seq += 1
            final = self.directory / f"{FILE_PREFIX}{stem}.avro"
            if not final.exists():
                break
        tmp = self.directory / f"{TMP_PREFIX}{stem}{TMP_SUFFIX}"
        ledger = _ledger_path(tmp)
        sync = os.urandom(16)
        header, senders_at = _header_bytes(self.schema, sync, self.senders)
        fd = kfd = -1
        try:  # the ledger first: a .tmp file without one can only come from an older collector
            kfd = os.open(ledger, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            _pwrite_all(fd, header, 0)
            os.fsync(fd)
            fsync_dir(self.directory)  # the names are durable before any block is acknowledged
        except OSError as exc:
            for d, path in ((fd, tmp), (kfd, ledger)):
                if d >= 0:
                    os.close(d)
                    path.unlink(missing_ok=True)
            raise WriteError(
                f"cannot create a report file: {exc.strerror}", exc.errno in TRANSIENT_ERRNOS
            ) from exc
        seg = _Segment(stem, tmp, final, fd, sync, len(header), senders_at, kfd)
        seg.committed = len(header)
        return seg

    def encode_block(self, records: Sequence[dict[str, Any]]) -> bytes:
        """The Avro binary encoding of ``records`` (one block's data); raises ``ValueError`` (fastavro's
        message) when a record does not fit the report schema."""
        buf = io.BytesIO()
        for rec in records:
            fastavro.schemaless_writer(buf, self.schema, rec)
        return buf.getvalue()

    def append(self, records: Sequence[dict[str, Any]] | None = None, data: bytes | None = None,
               count: int | None = None, sender: bytes | None = None, key: bytes | None = None,
               body: bytes | None = None) -> Ticket | None:  # fmt: skip
        """Writes one block (``records``, or their encoding ``data`` of ``count`` records) to the open file,
        opening one when none is, then its ledger line (byte range, count, and the digests ``key`` and
        ``body`` of a request's ``Idempotency-Key`` and body). Not durable yet: see :meth:`commit`. Raises
        :class:`WriteError` (the file and its ledger are cut back to where the block started)."""
        if data is None:
            if not records:
                return None
            data, count = self.encode_block(records), len(records)
        assert count is not None and count > 0
        if self._seg is None:
            self._seg = self._open()
        seg = self._seg
        blob = _avro_long(count) + _avro_long(len(data)) + data + seg.sync
        start = seg.size
        line = LedgerEntry(start, start + len(blob), count, time.time(), key, body).line()
        kstart = seg.kmarks[-1][1]
        try:
            _pwrite_all(seg.fd, blob, start)
            assert seg.kfd is not None
            _pwrite_all(seg.kfd, line, kstart)
        except OSError as exc:
            self._cut(seg, start)
            raise WriteError(f"cannot append a block: {exc.strerror}", exc.errno in TRANSIENT_ERRNOS) from exc
        seg.size += len(blob)
        seg.marks.append((seg.size, seg.reports + count))
        seg.kmarks.append((seg.size, kstart + len(line)))
        if sender is not None and sender not in seg.senders:
            seg.pending_senders.append((seg.size, sender))
        return Ticket(seg, seg.size, count, seg.generation)

    def _cut(self, seg: _Segment, size: int) -> None:
        """Cuts ``seg`` back to ``size`` bytes (a failed write or fsync); later tickets are void."""
        try:
            os.ftruncate(seg.fd, size)
        except OSError:
            _LOG.error("cannot cut a report file back to its last durable block")
        seg.kmarks = [m for m in seg.kmarks if m[0] <= size]
        if seg.kfd is not None:
            try:  # a ledger line past the cut would name bytes that are gone (adoption ignores it anyway)
                os.ftruncate(seg.kfd, seg.kmarks[-1][1])
            except OSError:
                _LOG.error("cannot cut a block ledger back to its last durable block")
        seg.size = size
        seg.marks = [m for m in seg.marks if m[0] <= size]
        seg.pending_senders = [p for p in seg.pending_senders if p[0] <= size]
        seg.generation += 1

    def _synced(self, seg: _Segment, target: int) -> None:
        seg.committed = max(seg.committed, target)
        keep = []
        for end, sender in seg.pending_senders:
            (seg.senders.add(sender) if end <= seg.committed else keep.append((end, sender)))
        seg.pending_senders = keep

    def _fsync(self, seg: _Segment) -> None:
        """The file, then its ledger: a block is acknowledged only once both are durable."""
        t0 = time.perf_counter()
        os.fsync(seg.fd)
        if seg.kfd is not None:
            os.fsync(seg.kfd)
        self.sync_seconds.append(time.perf_counter() - t0)

    def _check(self, t: Ticket) -> bool:
        """True when ``t`` is durable; raises :class:`WriteError` when its block was cut."""
        seg = t.segment
        if t.generation != seg.generation and t.end > seg.committed:
            raise WriteError("the block was cut after a failed write", True)
        return seg.committed >= t.end

    def commit_sync(self, t: Ticket) -> None:
        """Makes ``t`` durable now (fsync in this thread)."""
        if self._check(t):
            return
        seg = t.segment
        target = seg.size
        try:
            self._fsync(seg)
        except OSError as exc:
            self._cut(seg, seg.committed)
            raise WriteError(f"fsync failed: {exc.strerror}", exc.errno in TRANSIENT_ERRNOS) from exc
        self._synced(seg, target)

    async def commit(self, t: Ticket) -> None:
        """Waits until ``t`` is durable: requests waiting together share one fsync (group commit), run in a
        worker thread so the event loop goes on parsing and appending."""
        seg = t.segment
        while not self._check(t):
            if seg.syncing is None:
                seg.syncing = asyncio.ensure_future(self._sync_task(seg))
            fut = seg.syncing
            try:
                await asyncio.shield(fut)
            except WriteError:
                self._check(t)  # raises when t was cut; else (an earlier block failed) try again
                if seg.committed < t.end and t.generation != seg.generation:
                    raise

    async def _sync_task(self, seg: _Segment) -> None:
        target = seg.size
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._fsync, seg)
        except OSError as exc:
            self._cut(seg, seg.committed)
            raise WriteError(f"fsync failed: {exc.strerror}", exc.errno in TRANSIENT_ERRNOS) from exc
        finally:
            seg.syncing = None
        self._synced(seg, target)

    # ---- rolling and publishing ------------------------------------------------------------------------
    def full(self) -> bool:
        return self._seg is not None and self._seg.reports >= self.roll_reports

    def due(self) -> bool:
        """True when the open file is ``roll_seconds`` old, or an earlier file waits to be published."""
        return bool(self.unfinished) or (
            self._seg is not None and time.monotonic() - self._seg.opened >= self.roll_seconds
        )

    def _detach(self) -> list[_Segment]:
        if self._seg is not None:
            self.unfinished.append(self._seg)
            self._seg = None
        return list(self.unfinished)

    def roll(self) -> str | None:
        """Publishes the open file (and any earlier one not yet published) now; returns the last path."""
        last = None
        for seg in self._detach():
            self.commit_sync(Ticket(seg, seg.size, 0, seg.generation))
            last = self._publish(seg)
        return last

    async def roll_async(self) -> None:
        """:meth:`roll` with the fsyncs and the rewrite in a worker thread."""
        loop = asyncio.get_running_loop()
        for seg in self._detach():
            await self.commit(Ticket(seg, seg.size, 0, seg.generation))
            await loop.run_in_executor(None, self._publish, seg)

    def _publish(self, seg: _Segment) -> str:
        """fsync, (permute), rename to the final name, fsync of the directory, ``.done`` marker. On failure
        the segment stays in :attr:`unfinished` (its acknowledged reports are durable in the ``.tmp``
        file) and is tried again at the next roll."""
        with seg.lock:
            if seg.published:
                return str(seg.final)
            out = self._publish_locked(seg)
            seg.published = True
            return out

    def _publish_locked(self, seg: _Segment) -> str:
        n = seg.reports_to(seg.committed)
        try:
            if seg.size > seg.committed:  # never acknowledged: not published either
                os.ftruncate(seg.fd, seg.committed)
                seg.size = seg.committed
            if seg.senders_at is not None:
                _pwrite_all(seg.fd, b"%0*d" % (_SENDERS_WIDTH, len(seg.senders)), seg.senders_at)
            os.fsync(seg.fd)
            if self.keys is not None:  # the keys outlive the ledger: durable in the journal first
                self.keys.record([e for e in read_ledger(seg.ledger) if e.end <= seg.committed])
            rewrite = self.permute or seg.senders_at is not None  # the senders' list goes in the header
            if rewrite:
                self._permuted_copy(seg)
            else:
                os.rename(seg.tmp, seg.final)
            fsync_dir(self.directory)
            _write_marker(seg.final, n)
            if rewrite:
                seg.tmp.unlink()
            seg.ledger.unlink(missing_ok=True)
            fsync_dir(self.directory)
        except OSError as exc:
            raise WriteError(f"cannot publish a report file ({n} reports wait in it): {exc.strerror}",
                             exc.errno in TRANSIENT_ERRNOS) from exc  # fmt: skip
        os.close(seg.fd)
        if seg.kfd is not None:
            os.close(seg.kfd)
            seg.kfd = None
        self.unfinished.remove(seg)
        self.written_reports += n
        self.written_files.append(str(seg.final))
        _LOG.info("wrote %s (%d reports)", seg.final.name, n)
        return str(seg.final)

    def _permuted_copy(self, seg: _Segment) -> None:
        """Writes ``seg``'s records (in a CSPRNG-drawn order when the writer permutes) to ``.perm`` beside
        it under a header with the senders' list when they are known, then renames that to the final name
        (the ``.tmp`` file stays until the marker is written)."""
        from ldp.anonymity import secure_permutation

        data = os.pread(seg.fd, seg.committed, 0)
        end, total, _, spans, senders_at, _ = _walk(data, self.schema)
        if end != seg.committed:
            raise OSError(errno.EIO, f"the file does not read back whole ({end} of {seg.committed} bytes)")
        sync = os.urandom(16)
        listing = None  # an adopted file's senders are unknown (seg.senders_at is None): no list
        if seg.senders_at is not None and self._senders_secret is not None:
            listing = sender_listing(self._senders_secret, seg.senders)
        header, at = _header_bytes(self.schema, sync, senders_at is not None, listing)
        if at is not None and senders_at is not None:
            header = (
                header[:at] + data[senders_at : senders_at + _SENDERS_WIDTH] + header[at + _SENDERS_WIDTH :]
            )
        order = secure_permutation(total) if self.permute else np.arange(total)
        parts = [header]
        for lo in range(0, total, _PERMUTED_BLOCK):
            rows = [data[spans[i][0] : spans[i][1]] for i in order[lo : lo + _PERMUTED_BLOCK]]
            body = b"".join(rows)
            parts.append(_avro_long(len(rows)) + _avro_long(len(body)) + body + sync)
        perm = seg.tmp.with_name(seg.tmp.name + ".perm")
        fd = os.open(perm, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _pwrite_all(fd, b"".join(parts), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(perm, seg.final)

    # ---- what earlier processes left ---------------------------------------------------------------------
    def leftovers(self) -> list[str]:
        """Temporary files not being written by this writer (an earlier process was killed)."""
        mine = {s.tmp for s in self.unfinished} | ({self._seg.tmp} if self._seg else set())
        return sorted(p.name for p in self.directory.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}") if p not in mine)

    def adopt(self) -> Adopted:
        """Publishes what killed processes left. Of each ``.tmp`` file, the longest prefix of whole blocks
        that decode *and* that its ledger records (the same byte range and count) is kept: the keys of those
        blocks go into :attr:`keys` (the journal, durably) and the file is published like a rolled one.
        Everything after the prefix is cut and counted: torn bytes, and whole blocks the ledger does not
        record (never acknowledged: an acknowledgement waits for the ledger's fsync, which covers every
        earlier line, so no acknowledged block follows an unrecorded one). A ``.tmp`` file without a ledger
        (an older collector) keeps its whole valid prefix. A ``.tmp`` file whose final file exists (killed
        while publishing a permuted copy) is removed, as is a ledger whose file is gone (its keys were
        recorded before the rename); a final file without its ``.done`` marker gets one. Call before
        serving (the directory's lock keeps other collectors out)."""
        out = Adopted()
        for perm in self.directory.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}.perm"):
            perm.unlink()
        for name in self.leftovers():
            self._adopt_leftover(name, out)
        for ledger in self.directory.glob(f"{TMP_PREFIX}*{LEDGER_SUFFIX}"):
            if not ledger.with_name(ledger.name[: -len(LEDGER_SUFFIX)] + TMP_SUFFIX).exists():
                ledger.unlink()
        for final in self.directory.glob(f"{FILE_PREFIX}*.avro"):
            self._mark_published(final, out)
        if out.files or out.removed or out.garbage_bytes or out.markers:
            _LOG.warning(
                "adopted what an earlier collector left: %d reports published in %d files (%d idempotency "
                "keys kept), %d bytes cut (%d unacknowledged blocks of %d reports among them), %d leftover "
                "files removed, %d markers written", out.reports, out.files, out.keys, out.garbage_bytes,
                out.cut_blocks, out.cut_reports, out.removed, out.markers,
            )  # fmt: skip
        self.written_reports = 0
        self.written_files = []
        return out

    def _mark_published(self, final: Path, out: Adopted) -> None:
        """Writes the ``.done`` marker of a published file that has none."""
        if not final.with_name(final.name + DONE_SUFFIX).exists():
            _write_marker(final, _walk(final.read_bytes(), self.schema)[1])
            out.markers += 1

    def _adopt_leftover(self, name: str, out: Adopted) -> None:
        """One ``.tmp`` file of a killed process: removed when already published or nothing is kept, else
        cut to its recorded prefix and published (see :meth:`adopt`)."""
        tmp = self.directory / name
        ledger = _ledger_path(tmp)
        stem = name[len(TMP_PREFIX) : -len(TMP_SUFFIX)]
        final = self.directory / f"{FILE_PREFIX}{stem}.avro"
        if final.exists():
            self._mark_published(final, out)
            _remove_leftover(tmp, ledger, out)
            return
        data = tmp.read_bytes()
        valid, _, sync, _, _, blocks = _walk(data, self.schema)
        end, total = self._recorded_prefix(ledger, blocks, valid, out)
        out.garbage_bytes += len(data) - end
        if total == 0:
            _remove_leftover(tmp, ledger, out)
            return
        fd = os.open(tmp, os.O_RDWR | os.O_CLOEXEC)
        os.ftruncate(fd, end)
        seg = _Segment(stem, tmp, final, fd, sync, end, None)  # senders unknown: the count stays 0
        seg.committed = end
        seg.marks = [(end, total)]
        self.unfinished.append(seg)
        self._publish(seg)  # records the kept blocks' keys before the rename
        out.files += 1
        out.reports += total

    def _recorded_prefix(
        self, ledger: Path, blocks: list[tuple[int, int, int]], valid: int, out: Adopted
    ) -> tuple[int, int]:
        """``(end, reports)`` of the blocks to keep of an unfinished file (see :meth:`adopt`)."""
        if not ledger.exists():
            return valid, sum(c for _, _, c in blocks)
        recorded = {e.start: e for e in read_ledger(ledger)}
        end, total = (blocks[0][0] if blocks else valid), 0
        for i, (start, stop, count) in enumerate(blocks):
            e = recorded.get(start)
            if e is None or e.end != stop or e.count != count:
                out.cut_blocks += len(blocks) - i
                out.cut_reports += sum(c for _, _, c in blocks[i:])
                break
            end, total = stop, total + count
            out.keys += e.key is not None
        return end, total

    def close(self) -> None:
        os.close(self._lock)


def _write_marker(final: Path, n: int) -> None:
    marker = final.with_name(final.name + DONE_SUFFIX)
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        _pwrite_all(fd, (json.dumps({"reports": n}) + "\n").encode(), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(final.parent)


# ------------------------------------------------------------------------------------------------------------
# retries, senders, metrics
# ------------------------------------------------------------------------------------------------------------
_KEY_RE = re.compile(r"[A-Za-z0-9._:-]{8,128}")
KEYS_JOURNAL = ".collect-keys.log"


class IdempotencyKeys:
    """The ``Idempotency-Key`` of every acknowledged request of the last ``window_s`` seconds, at most
    ``max_keys`` of them (the oldest forgotten first): SHA-256 digests of the key and of the body, and the
    report count, about 150 bytes each in memory.

    Durable records: while a request's block is in an open file, its key is in that file's block ledger
    (written with the block, fsynced before the answer); when the file is published, :meth:`record` appends
    the file's keys to ``journal`` and fsyncs it before the ledger goes. A restarted collector reads the
    journal back (and :meth:`RollingAvroWriter.adopt` adds the keys of the blocks it keeps); the journal is
    rewritten compacted at start and when it holds twice ``max_keys`` lines."""

    def __init__(self, journal: Path | None, *, window_s: float = 86_400.0, max_keys: int = 200_000) -> None:
        self.window_s = float(window_s)
        self.max_keys = int(max_keys)
        self.journal = journal
        self.keys: dict[bytes, tuple[float, bytes, int]] = {}
        self.evicted = 0
        self._lines = 0
        self._lock = threading.Lock()  # record() runs in a publishing worker thread
        if journal is not None and journal.exists():
            now = time.time()
            for line in journal.read_text(encoding="ascii", errors="replace").splitlines():
                parts = line.split()
                try:
                    t, key, body, n = (
                        float(parts[0]),
                        bytes.fromhex(parts[1]),
                        bytes.fromhex(parts[2]),
                        int(parts[3]),
                    )
                except (ValueError, IndexError):
                    continue  # a torn last line
                if now - t < self.window_s:
                    self.keys[key] = (t, body, n)
            self._trim(now)
            try:
                self._rewrite()
            except OSError as exc:
                _LOG.warning("cannot rewrite the idempotency journal: %s", exc.strerror)

    @staticmethod
    def digest(text: str | bytes) -> bytes:
        data = text.encode() if isinstance(text, str) else text
        return hashlib.sha256(data).digest()[:16]

    def get(self, key: bytes) -> tuple[float, bytes, int] | None:
        hit = self.keys.get(key)
        if hit is not None and time.time() - hit[0] >= self.window_s:
            return None
        return hit

    def add(self, key: bytes, body: bytes, n: int) -> None:
        """Remembers an acknowledged request's key in memory (its block ledger holds it durably)."""
        with self._lock:
            now = time.time()
            self.keys[key] = (now, body, n)
            self._trim(now)

    def record(self, entries: Sequence[LedgerEntry]) -> None:
        """Makes the keys of ``entries`` (blocks of a file being published) durable in the journal and
        known in memory. Raises ``OSError`` when the journal cannot be written or fsynced (the file is then
        not published: its ledger still holds the keys)."""
        now = time.time()
        lines = []
        with self._lock:
            for e in entries:
                if e.key is None or e.body is None or now - e.time >= self.window_s:
                    continue
                self.keys.setdefault(e.key, (e.time, e.body, e.count))
                lines.append(f"{e.time:.3f} {e.key.hex()} {e.body.hex()} {e.count}\n")
            self._trim(now)
            if self.journal is None or not lines:
                return
            text = "".join(lines)
            fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                _pwrite_all_append(fd, text.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self._lines += len(lines)
            if self._lines > 2 * self.max_keys:
                self._rewrite()

    def _trim(self, now: float) -> None:
        for k in list(self.keys):
            t = self.keys[k][0]
            if len(self.keys) <= self.max_keys and now - t < self.window_s:
                break
            del self.keys[k]
            self.evicted += 1

    def _rewrite(self) -> None:
        """The journal rewritten from memory (fsynced, then renamed over the old one)."""
        if self.journal is None:
            return
        tmp = self.journal.with_name(self.journal.name + ".new")
        text = "".join(f"{t:.3f} {k.hex()} {b.hex()} {n}\n" for k, (t, b, n) in self.keys.items())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _pwrite_all(fd, text.encode("ascii"), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.journal)
        fsync_dir(self.journal.parent)
        self._lines = len(self.keys)


def _pwrite_all_append(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class SenderAuth:
    """Client authentication: ``Authorization: Bearer <token>`` on every POST of reports.

    Two forms: a token list file (:meth:`from_token_file`: one token of at least 16 characters a line,
    ``#`` comments; kept as SHA-256 digests), or HMAC-signed tokens (:meth:`from_hmac_key`: a key file
    readable by its owner only; a token is ``<sender id>.<hex HMAC-SHA256(key, sender id)>``, made by
    :func:`issue_token`). :meth:`sender` returns a 16-byte digest standing for the sender: what the
    collector counts (distinct senders per file, :data:`SENDERS_KEY`); no token is ever written."""

    def __init__(self, *, digests: frozenset[bytes] | None = None, key: bytes | None = None) -> None:
        self.digests = digests
        self.key = key

    @classmethod
    def from_token_file(cls, path: str | Path) -> SenderAuth:
        tokens = [t.strip() for t in Path(path).read_text(encoding="utf-8").splitlines()]
        tokens = [t for t in tokens if t and not t.startswith("#")]
        short = [i for i, t in enumerate(tokens) if len(t) < 16 or any(c.isspace() for c in t)]
        if not tokens or short:
            raise ValueError(
                f"{path}: one token of at least 16 non-blank characters a line (none, or a short one)"
            )
        return cls(digests=frozenset(IdempotencyKeys.digest("ldp-sender/v1\0" + t) for t in tokens))

    @classmethod
    def from_hmac_key(cls, path: str | Path) -> SenderAuth:
        st = os.stat(path)
        if st.st_mode & 0o077:
            raise ValueError(f"{path}: the token key must be readable by its owner only (chmod 600)")
        key = Path(path).read_bytes().strip()
        if len(key) < 32:
            raise ValueError(f"{path}: the token key must hold at least 32 bytes")
        return cls(key=key)

    def sender(self, authorization: str | None) -> bytes:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise RequestError(401, "unauthorized", "an Authorization: Bearer <token> header is required")
        if self.digests is not None:
            d = IdempotencyKeys.digest("ldp-sender/v1\0" + token)
            if d in self.digests:
                return d
        elif self.key is not None:
            sid, _, mac = token.rpartition(".")
            want = hmac.new(self.key, sid.encode(), hashlib.sha256).hexdigest()
            if sid and hmac.compare_digest(mac, want):
                return IdempotencyKeys.digest("ldp-sender/v1\0" + sid)
        raise RequestError(401, "unauthorized", "the token is not valid")


def issue_token(key: bytes, sender_id: str) -> str:
    """An HMAC-signed client token for ``sender_id`` (``[A-Za-z0-9_-]``, 1 to 64 characters)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", sender_id):
        raise ValueError("a sender id is 1 to 64 characters of [A-Za-z0-9_-]")
    return f"{sender_id}.{hmac.new(key.strip(), sender_id.encode(), hashlib.sha256).hexdigest()}"


#: Every request-level refusal, with its status (the metrics' label values, initialised at zero).
REQUEST_ERRORS = {
    "bad_json": 400, "bad_batch": 400, "undecodable": 400, "bad_idempotency_key": 400, "unauthorized": 401,
    "not_found": 404, "method_not_allowed": 405, "too_large": 413, "too_many_reports": 413,
    "unsupported_media_type": 415, "idempotency_key_reused": 422, "unavailable": 503,
}  # fmt: skip


class PrometheusMetrics:
    """The collector's Prometheus metrics, in a registry of its own (``GET /metrics/prometheus``). No
    label carries a client, an address or a value: only status codes, reason codes and outcomes."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        from wire.records import REASONS

        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "ldp_collector_requests", "POST requests of reports by answer", ["status", "reason"], registry=r
        )
        self.reports = Counter(
            "ldp_collector_reports", "reports in requests by outcome", ["outcome"], registry=r
        )
        self.rejected = Counter(
            "ldp_collector_reports_rejected", "reports in refused requests by reason", ["reason"], registry=r
        )
        self.bytes = Counter("ldp_collector_request_bytes", "bytes of request bodies received", registry=r)
        self.duration = Histogram(
            "ldp_collector_request_duration_seconds",
            "time from a full body to the answer",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.durable = Histogram(
            "ldp_collector_durable_write_seconds",
            "fsync duration of a group commit",
            registry=r,
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
        )
        self.write_errors = Counter(
            "ldp_collector_write_errors", "failed writes, fsyncs or publications", ["kind"], registry=r
        )
        self.files = Counter("ldp_collector_files_published", "report files published", registry=r)
        self.written = Counter("ldp_collector_reports_published", "reports in published files", registry=r)
        self.open_reports = Gauge(
            "ldp_collector_reports_open", "durable reports not yet in a published file", registry=r
        )
        self.connections = Gauge("ldp_collector_connections", "open client connections", registry=r)
        self.refused_connections = Counter(
            "ldp_collector_connections_refused", "connections closed at the cap", registry=r
        )
        self.keys = Gauge("ldp_collector_idempotency_keys", "idempotency keys remembered", registry=r)
        for reason in (*REQUEST_ERRORS, *REASONS):
            self.rejected.labels(reason)
        for reason, status in REQUEST_ERRORS.items():
            self.requests.labels(str(status), reason)
        for reason in REASONS:
            self.requests.labels("422", reason)
        for status, reason in (("200", "accepted"), ("200", "duplicate")):
            self.requests.labels(status, reason)
        for outcome in ("accepted", "refused", "duplicate"):
            self.reports.labels(outcome)
        for kind in ("append", "fsync", "publish"):
            self.write_errors.labels(kind)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


# ------------------------------------------------------------------------------------------------------------
# the collector
# ------------------------------------------------------------------------------------------------------------
#: Default most reports in one request: well below the shuffler's default ``min_reports`` (1,000), so no
#: single request fills a bucket.
DEFAULT_MAX_BATCH = 100


@dataclasses.dataclass
class CollectorStats:
    """The collector's counts. Requests: ``received`` = ``accepted`` + ``duplicates`` + ``rejected``,
    ``rejected_by`` per error. Reports: ``reports_accepted`` (durable, acknowledged) = ``reports_written``
    (published files) + ``reports_open`` (durable, not yet published); ``reports_refused`` (in refused
    requests whose reports were counted); ``reports_duplicate`` (repeats answered without writing)."""

    received: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    rejected_by: dict[str, int] = dataclasses.field(default_factory=dict)
    reports_accepted: int = 0
    reports_refused: int = 0
    reports_duplicate: int = 0
    reports_written: int = 0
    reports_open: int = 0
    files_written: int = 0
    client_ids_dropped: int = 0
    write_errors: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "rejected_by": dict(sorted(self.rejected_by.items()))}


@dataclasses.dataclass
class _Work:
    data: bytes
    count: int
    sender: bytes | None
    key: bytes | None
    body: bytes


class Collector:
    """One task's collector: :meth:`handle` / :meth:`handle_async` answer a POST of reports (200 only once
    its reports are durable), :meth:`tick` publishes a file that is due, :meth:`close` publishes the open
    file. Single-threaded (the web server's event loop calls it); fsyncs run in worker threads."""

    def __init__(
        self,
        checker: ReportChecker,
        writer: RollingAvroWriter,
        *,
        max_body_bytes: int = 1 << 20,
        max_batch: int = DEFAULT_MAX_BATCH,
        auth: SenderAuth | None = None,
        keys: IdempotencyKeys | None = None,
        retry_after_s: int = 5,
    ) -> None:
        self.checker = checker
        self.writer = writer
        self.max_body_bytes = int(max_body_bytes)
        self.max_batch = int(max_batch)
        self.auth = auth
        self.keys = keys if keys is not None else (writer.keys or IdempotencyKeys(None))
        if writer.keys is None:
            writer.keys = self.keys  # a published file's keys go to the journal
        self.retry_after_s = int(retry_after_s)
        self.stats = CollectorStats()
        self.prom = PrometheusMetrics()
        self.failed: str | None = None  # the last write failure, cleared by the next durable write
        self._pending: dict[bytes, Any] = {}
        self._roll_task: Any = None
        self._published = 0
        self._written = 0
        self._n = 0

    # ---- counting ----------------------------------------------------------------------------------------
    def refuse(self, error: RequestError, n_reports: int = 0) -> tuple[int, dict[str, Any]]:
        """Counts a refused request (``n_reports``: its reports, when known) and returns its answer."""
        s = self.stats
        s.received += 1
        s.rejected += 1
        s.rejected_by[error.error] = s.rejected_by.get(error.error, 0) + 1
        s.reports_refused += n_reports
        self.prom.requests.labels(str(error.status), error.error).inc()
        self.prom.reports.labels("refused").inc(n_reports)
        self.prom.rejected.labels(error.error).inc(n_reports)
        return error.status, error.body()

    def _accepted(self, n: int) -> tuple[int, dict[str, Any]]:
        s = self.stats
        s.received += 1
        s.accepted += 1
        s.reports_accepted += n
        if self.checker.drop_client_ids:
            s.client_ids_dropped += n
        self.prom.requests.labels("200", "accepted").inc()
        self.prom.reports.labels("accepted").inc(n)
        self.failed = None
        self._sync_counts()
        return 200, {"accepted": n}

    def _duplicate(self, n: int) -> tuple[int, dict[str, Any]]:
        s = self.stats
        s.received += 1
        s.duplicates += 1
        s.reports_duplicate += n
        self.prom.requests.labels("200", "duplicate").inc()
        self.prom.reports.labels("duplicate").inc(n)
        return 200, {"accepted": n, "duplicate": True}

    def _write_failed(self, exc: WriteError, n: int, kind: str) -> tuple[int, dict[str, Any]]:
        _LOG.error("%s", exc)
        self.failed = str(exc)
        self.stats.write_errors += 1
        self.prom.write_errors.labels(kind).inc()
        detail = "the reports could not be stored durably (nothing of this request is kept); retry later"
        return self.refuse(RequestError(503, "unavailable", detail), n)

    def _sync_counts(self) -> None:
        w = self.writer
        self.stats.reports_written = w.written_reports
        self.stats.reports_open = w.open_reports
        self.stats.files_written = len(w.written_files)
        new = len(w.written_files) - self._published
        if new > 0:
            self.prom.files.inc(new)
            self._published = len(w.written_files)
        self.prom.written.inc(max(0, w.written_reports - self._written))
        self._written = max(self._written, w.written_reports)
        self.prom.open_reports.set(self.stats.reports_open)
        self.prom.keys.set(len(self.keys.keys))
        while w.sync_seconds:
            self.prom.durable.observe(w.sync_seconds.pop())

    # ---- one request ---------------------------------------------------------------------------------------
    def _prepare(self, media_type: str, body: bytes, key: str | None, authorization: str | None) -> _Work:
        """Everything before the write: limits, sender, key, parse, checks, the block to append."""
        self.prom.bytes.inc(len(body))
        if len(body) > self.max_body_bytes:
            raise RequestError(413, "too_large", f"body of {len(body)} bytes; at most {self.max_body_bytes}")
        sender = None if self.auth is None else self.auth.sender(authorization)
        kd = None
        if key is not None:
            if not _KEY_RE.fullmatch(key):
                raise RequestError(400, "bad_idempotency_key", "Idempotency-Key: 8 to 128 of [A-Za-z0-9._:-]")
            kd = IdempotencyKeys.digest(key)
        bd = IdempotencyKeys.digest(body)
        c = self.checker
        if media_type == JSON_TYPE:
            cb = self._json_columns(body)
            if cb is not None:  # a well-typed batch that passes whole: written from its columns
                self._n = len(cb)
                return _Work(self._encode_cb(cb), len(cb), sender, kd, bd)
            records = parse_json_body(body, self.max_batch)  # the reference path: it names any refusal
            self._n = len(records)
            accepted = c.check(records, json_form=True)
            data = self._encode_columns(c.last, accepted)
            return _Work(self._encode(accepted) if data is None else data, len(accepted), sender, kd, bd)
        parsed = parse_avro_body(body, self.max_batch, task_id=c.task.task_id, decode=c.decode)
        self._n = parsed.count
        if isinstance(parsed.records, list):
            accepted = c.check(parsed.records)
        else:
            c.check_columns(parsed.records)
            if parsed.current and not c.shuffled:  # the blocks as posted: already the file's encoding
                return _Work(parsed.raw, parsed.count, sender, kd, bd)
            return _Work(self._encode_cb(parsed.records), parsed.count, sender, kd, bd)
        return _Work(self._encode(accepted), len(accepted), sender, kd, bd)

    def _json_columns(self, body: bytes) -> Any:
        """The body's reports as columns when it is a well-typed batch that passes whole
        (:func:`json_columns`, then the validator on the columns); None otherwise (the reference path
        answers)."""
        c = self.checker
        if json_depth(body) > MAX_JSON_DEPTH:
            return None
        cb = json_columns(body, c.task.task_id, c.decode, self.max_batch)
        return cb if cb is not None and c.passes(cb) else None

    def _encode_cb(self, cb: Any) -> bytes:
        """The block of an accepted :class:`~wire.decode.ColumnBatch` (:func:`encode_columns`); a
        shuffled task's times rounded down to its precision and its client ids dropped."""
        c = self.checker
        event_ms = cb.event_ms
        if c.shuffled and c.precision_ms:
            event_ms = event_ms - event_ms % c.precision_ms
        return encode_columns(cb, event_ms, client_ids=not c.shuffled)

    def _encode_columns(self, vb: Any, records: list[dict[str, Any]]) -> bytes | None:
        """The block from the validator's columns (numpy, ``wire.encode.encode_report_block``), or
        None when the columns do not carry everything to write (client ids, ``bits`` / ``items``)."""
        from wire.encode import encode_report_block

        c = self.checker
        if vb is None or len(vb.event_ms) != len(records) or vb.client_ids is not None:
            return None
        if not c.shuffled and any(r.get("client_id") is not None for r in records):
            return None
        event_ms = vb.event_ms
        if c.shuffled and c.precision_ms:
            event_ms = event_ms - event_ms % c.precision_ms
        return encode_report_block(c.task.task_id, vb.reports, event_ms, vb.groups, c.task.schema_version)

    def _encode(self, records: list[dict[str, Any]]) -> bytes:
        c = self.checker
        if c.shuffled:
            p = c.precision_ms
            for rec in records:
                rec["client_id"] = None
                if p:
                    rec["event_time"] = int(rec["event_time"]) - int(rec["event_time"]) % p
        try:
            return self.writer.encode_block(records)
        except (ValueError, TypeError, OverflowError) as exc:  # not expected once the validator passed
            raise RequestError(
                422, "invalid_payload", f"a report does not fit the report schema: {exc}"
            ) from exc

    def _admit(self, media_type: str, body: bytes, key: str | None, authorization: str | None) -> Any:
        """A :class:`_Work`, or the answer (a refusal or a repeat)."""
        self._n = 0
        try:
            work = self._prepare(media_type, body, key, authorization)
        except RequestError as exc:
            return self.refuse(exc, self._n)
        if work.key is not None:
            hit = self.keys.get(work.key)
            if hit is not None:
                if hit[1] != work.body:
                    detail = "this Idempotency-Key was used with another body"
                    return self.refuse(RequestError(422, "idempotency_key_reused", detail), work.count)
                return self._duplicate(hit[2])
        return work

    def handle(self, media_type: str, body: bytes, *, key: str | None = None,
               authorization: str | None = None) -> tuple[int, dict[str, Any]]:  # fmt: skip
        """``media_type``: :data:`JSON_TYPE` or :data:`AVRO_TYPE` (the server refuses others with 415).
        Returns ``(status, JSON answer)``: 200 ``{"accepted": n}`` once durable, or the refusal."""
        work = self._admit(media_type, body, key, authorization)
        if not isinstance(work, _Work):
            return work
        try:
            t = self.writer.append(
                data=work.data, count=work.count, sender=work.sender, key=work.key, body=work.body
            )
            assert t is not None
            self.writer.commit_sync(t)
        except WriteError as exc:
            return self._write_failed(exc, work.count, "append")
        return self._done(work)

    def _done(self, work: _Work) -> tuple[int, dict[str, Any]]:
        if work.key is not None:
            self.keys.add(work.key, work.body, work.count)
        if self.writer.full():
            self.roll()
        return self._accepted(work.count)

    async def handle_async(self, media_type: str, body: bytes, *, key: str | None = None,
                           authorization: str | None = None) -> tuple[int, dict[str, Any]]:  # fmt: skip
        """:meth:`handle` with group commit; a repeat of a request still being written waits for it."""
        pending = None if key is None else self._pending.get(IdempotencyKeys.digest(key))
        if pending is not None:
            await asyncio.wait([pending])
        work = self._admit(media_type, body, key, authorization)
        if not isinstance(work, _Work):
            return work
        done = asyncio.get_running_loop().create_future()
        if work.key is not None:
            self._pending[work.key] = done
        try:
            try:
                t = self.writer.append(
                    data=work.data, count=work.count, sender=work.sender, key=work.key, body=work.body
                )
                assert t is not None
            except WriteError as exc:
                return self._write_failed(exc, work.count, "append")
            try:
                await self.writer.commit(t)
            except WriteError as exc:
                return self._write_failed(exc, work.count, "fsync")
            if work.key is not None:
                self.keys.add(work.key, work.body, work.count)
            if self.writer.full():
                self._start_roll()
            return self._accepted(work.count)
        finally:
            if work.key is not None:
                self._pending.pop(work.key, None)
            done.set_result(None)

    # ---- files ---------------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Publishes the open file when it is due (synchronous; the server uses :meth:`tick_async`)."""
        if self.writer.due():
            self.roll()

    def _start_roll(self) -> None:
        """Starts a roll in the background unless one is running (it publishes every detached file)."""
        if self._roll_task is None or self._roll_task.done():
            self._roll_task = asyncio.ensure_future(self.roll_async())

    async def tick_async(self) -> None:
        if self.writer.due():
            self._start_roll()

    async def drain(self) -> None:
        """Waits for a background roll (before :meth:`close`)."""
        if self._roll_task is not None:
            await asyncio.wait([self._roll_task])

    def roll(self) -> None:
        try:
            self.writer.roll()
        except WriteError as exc:
            self._roll_failed(exc)
        self._sync_counts()

    async def roll_async(self) -> None:
        try:
            await self.writer.roll_async()
        except WriteError as exc:
            self._roll_failed(exc)
        self._sync_counts()

    def _roll_failed(self, exc: WriteError) -> None:
        _LOG.error("%s", exc)
        self.failed = str(exc)
        self.stats.write_errors += 1
        self.prom.write_errors.labels("publish").inc()

    def close(self) -> CollectorStats:
        """Publishes the open file; returns the final counts."""
        self.roll()
        return self.stats
