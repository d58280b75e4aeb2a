"""The HTTP collector's core, without a web framework and without Beam: request bodies -> checked report
records -> rolling Avro report files in a directory the aggregation jobs read (docs/collector.md).

:class:`Collector` takes one request body (JSON or Avro) and returns the HTTP status and JSON answer;
:mod:`pipelines.collect` is the web server around it. The steps:

1. :func:`parse_json_body` / :func:`parse_avro_body`: the body -> report records (the Avro form of
   ``schemas/report.avsc``), following the JSON form of docs/wire_format.md (``seed`` a decimal string,
   ``bits`` and ``client_id`` base64). A body that is not JSON, or a batch object of the wrong shape, is a
   :class:`RequestError` (400); a value that does not convert stays as it was, so the validator refuses
   it for the reason the wire format names.
2. :class:`ReportChecker`: the project's validator (:class:`transforms.records.TaskReportValidator`, the
   same checks as the aggregation jobs) plus the two the Avro decoder makes for files (member names, the
   type of ``schema_version``). All or nothing: one refused report refuses the request (422), naming the
   first refused report, its reason and detail; nothing of it is written.
3. :class:`RollingAvroWriter`: the accepted reports of a request are one Avro block appended to an open
   hidden temporary file; a file is closed (fsync, rename to ``collect-*.avro``, fsync of the directory,
   then the ``.done`` marker) after ``roll_reports`` reports or ``roll_seconds`` seconds, and on shutdown.

Nothing of a request other than its report fields is kept: no address, no header, no receive time.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import io
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastavro
import fastavro.write

import schemas
from ldp.task import Task
from transforms.records import REPORT_FIELDS, TaskReportValidator

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
    :data:`transforms.records.REASONS` for a refused report, else a request-level code), a one-line
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
    """Appending to or closing a report file failed (the disk, not the request)."""


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
        raise RequestError(400, "bad_batch", "the body must be a report object or {\"reports\": [...]}")
    if not reports:
        raise RequestError(400, "bad_batch", "the batch holds no report")
    if len(reports) > max_batch:
        detail = f"{len(reports)} reports in one request; at most {max_batch}"
        raise RequestError(413, "too_many_reports", detail)
    return [_json_record(r) if type(r) is dict else r for r in reports]


def parse_avro_body(body: bytes, max_batch: int) -> list[object]:
    """An Avro object container body (codec ``null``) -> its records. A writer schema that is not a
    record, or whose fields are not report fields, refuses every report (the checker names the first).

    Raises :class:`RequestError`: not an Avro container, or another codec (400 ``undecodable``), more than
    ``max_batch`` records (413 ``too_many_reports``)."""
    try:
        reader = fastavro.reader(io.BytesIO(body))
        codec = reader.metadata.get("avro.codec", "null")
        if codec != "null":
            detail = f"Avro codec {codec!r}: the collector takes uncompressed (null) containers only"
            raise RequestError(400, "undecodable", detail)
        records: list[object] = []
        for rec in reader:
            records.append(rec)
            if len(records) > max_batch:
                raise RequestError(413, "too_many_reports", f"more than {max_batch} reports in one request")
    except RequestError:
        raise
    except Exception as exc:  # fastavro raises many kinds on bytes that are not a container
        raise RequestError(400, "undecodable", f"the body is not an Avro object container: {exc}") from exc
    if not records:
        raise RequestError(400, "bad_batch", "the container holds no report")
    for rec in records:
        if type(rec) is not dict:
            continue
        for name in REPORT_FIELDS:  # a writer schema without some fields: the report schema's defaults
            rec.setdefault(name, 0 if name == "group" else None)
        et = rec["event_time"]
        if isinstance(et, _dt.datetime) and et.tzinfo is not None:
            rec["event_time"] = round((et - _EPOCH).total_seconds() * 1000)
    return records


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
    "seed": " (JSON: the decimal string of the signed 64-bit seed, e.g. \"-42\")",
    "bits": " (JSON: standard padded base64)",
    "client_id": " (JSON: standard padded base64)",
}


class ReportChecker:
    """Checks a request's records against a task, all or nothing (see the module docstring).

    ``drop_client_ids``: client ids are removed from accepted records (a task collected through the
    shuffler, ``anonymity.shuffled``: the aggregator never sees them).
    """

    def __init__(self, validator: TaskReportValidator, *, drop_client_ids: bool = False) -> None:
        self.validator = validator
        self.task = validator.task
        self.drop_client_ids = drop_client_ids

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

    def check(self, records: list[object], *, json_form: bool = False) -> list[dict[str, Any]]:
        """The records, every one accepted, ready to write; else raises :class:`RequestError` (422) for the
        first refused one (``json_form``: the details say how the JSON form spells the field)."""
        shape = next(((i, p) for i, r in enumerate(records) if (p := _shape_problem(r)) is not None), None)
        head = records if shape is None else records[: shape[0]]
        if head and self._refused(head):
            raise self._first_refused(head, json_form)
        if shape is not None:
            i, (reason, detail) = shape
            raise RequestError(422, reason, f"report {i}: {detail}", i)
        out: list[dict[str, Any]] = records  # type: ignore[assignment]  # all dicts: the validator passed them
        if self.drop_client_ids:
            for rec in out:
                rec["client_id"] = None
        return out


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
    # a shuffled task's reports go on to the shuffler, which rounds their times: no fine_time check here
    return ReportChecker(
        TaskReportValidator(make_aggregator(task), rounded_times=not shuffled), drop_client_ids=shuffled
    )


# ------------------------------------------------------------------------------------------------------------
# rolling Avro files
# ------------------------------------------------------------------------------------------------------------
def _avro_long(n: int) -> bytes:
    """Avro's zig-zag varint encoding of a long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RollingAvroWriter:
    """Report records -> ``DIR/collect-<UTC start>-<run>-<seq>.avro`` files (``schemas/report.avsc``,
    codec null), each with its ``.done`` marker, complete files only (see the module docstring).

    :meth:`append` encodes all the records of a request in memory first and appends them as one Avro block,
    so a request is in a file whole or not at all; :meth:`roll` closes the open file (nothing happens
    without one). A failed write raises :class:`WriteError`: the open file is cut back to its last
    whole block when that is possible.
    """

    def __init__(
        self, directory: str | Path, *, roll_reports: int = 100_000, roll_seconds: float = 60.0
    ) -> None:
        if roll_reports < 1:
            raise ValueError(f"roll_reports must be >= 1, got {roll_reports}")
        if not roll_seconds > 0:
            raise ValueError(f"roll_seconds must be > 0, got {roll_seconds}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.roll_reports = int(roll_reports)
        self.roll_seconds = float(roll_seconds)
        self.schema = schemas.report_schema()
        self.run_id = secrets.token_hex(4)
        self._seq = 0
        self._fh: io.BufferedWriter | None = None
        self._tmp: Path | None = None
        self._final: Path | None = None
        self._sync = b""
        self._opened = 0.0
        self.open_reports = 0
        self.written_reports = 0
        self.written_files: list[str] = []

    def leftovers(self) -> list[str]:
        """Temporary files of earlier runs that never closed (killed): never read by a job."""
        return sorted(p.name for p in self.directory.glob(f"{TMP_PREFIX}*{TMP_SUFFIX}") if p != self._tmp)

    def _open(self) -> None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        while True:
            name = f"{FILE_PREFIX}{stamp}-{self.run_id}-{self._seq:06d}"
            self._seq += 1
            final = self.directory / f"{name}.avro"
            if not final.exists():
                break
        tmp = self.directory / f"{TMP_PREFIX}{name[len(FILE_PREFIX):]}{TMP_SUFFIX}"
        self._sync = os.urandom(16)
        header = io.BytesIO()
        fastavro.write.Writer(header, self.schema, codec="null", sync_marker=self._sync)
        try:
            fh = open(tmp, "xb")  # noqa: SIM115 - closed by roll()
            fh.write(header.getvalue())
            fh.flush()
        except OSError as exc:
            raise WriteError(f"cannot create {tmp}: {exc}") from exc
        self._fh, self._tmp, self._final = fh, tmp, final
        self._opened = time.monotonic()
        self.open_reports = 0

    def encode_block(self, records: Sequence[dict[str, Any]]) -> bytes:
        """One Avro container block (count, size, data, sync marker) of ``records``; raises ``ValueError``
        (fastavro's message) when a record does not fit the report schema."""
        buf = io.BytesIO()
        for rec in records:
            fastavro.schemaless_writer(buf, self.schema, rec)
        data = buf.getvalue()
        return _avro_long(len(records)) + _avro_long(len(data)) + data

    def append(self, records: Sequence[dict[str, Any]], block: bytes | None = None) -> None:
        """Appends ``records`` (encoded as :meth:`encode_block` unless ``block`` is given) to the open file,
        opening one when none is; rolls when the file holds ``roll_reports`` reports."""
        if not records:
            return
        if block is None:
            block = self.encode_block(records)
        if self._fh is None:
            self._open()
        assert self._fh is not None
        start = self._fh.tell()
        try:
            self._fh.write(block + self._sync)
            self._fh.flush()
        except OSError as exc:
            self._cut(start)
            raise WriteError(f"cannot append to {self._tmp}: {exc}") from exc
        self.open_reports += len(records)
        if self.open_reports >= self.roll_reports:
            self.roll()

    def _cut(self, size: int) -> None:
        try:
            assert self._fh is not None
            self._fh.truncate(size)
            self._fh.seek(size)
        except (OSError, ValueError):
            _LOG.error("cannot cut %s back to its last whole block", self._tmp)

    def due(self) -> bool:
        """True when the open file is ``roll_seconds`` old."""
        return self._fh is not None and time.monotonic() - self._opened >= self.roll_seconds

    def roll(self) -> str | None:
        """Closes the open file: fsync, rename to its final name, fsync of the directory, ``.done`` marker
        (fsynced too). Returns the final path (None when no file was open)."""
        if self._fh is None:
            return None
        fh, tmp, final, n = self._fh, self._tmp, self._final, self.open_reports
        assert tmp is not None and final is not None
        self._fh = self._tmp = self._final = None
        self.open_reports = 0
        try:
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            os.rename(tmp, final)
            _fsync_dir(self.directory)
            marker = final.with_name(final.name + DONE_SUFFIX)
            with open(marker, "x", encoding="utf-8") as mh:
                mh.write(json.dumps({"reports": n}) + "\n")
                mh.flush()
                os.fsync(mh.fileno())
            _fsync_dir(self.directory)
        except OSError as exc:
            raise WriteError(f"cannot close {tmp} as {final.name}: {exc} ({n} reports not written)") from exc
        self.written_reports += n
        self.written_files.append(str(final))
        _LOG.info("wrote %s (%d reports)", final.name, n)
        return str(final)


# ------------------------------------------------------------------------------------------------------------
# the collector
# ------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class CollectorStats:
    """The collector's counts. Requests: ``received`` = ``accepted`` + ``rejected``, ``rejected_by`` per
    error. Reports: ``reports_accepted`` (in accepted requests) = ``reports_written`` (in closed files) +
    ``reports_open`` (in the open file), and ``reports_refused`` (in refused requests whose reports were
    counted)."""

    received: int = 0
    accepted: int = 0
    rejected: int = 0
    rejected_by: dict[str, int] = dataclasses.field(default_factory=dict)
    reports_accepted: int = 0
    reports_refused: int = 0
    reports_written: int = 0
    reports_open: int = 0
    files_written: int = 0
    client_ids_dropped: int = 0
    write_errors: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "rejected_by": dict(sorted(self.rejected_by.items()))}


class Collector:
    """One task's collector: :meth:`handle` answers a POST of reports, :meth:`tick` rolls a file that is
    due, :meth:`close` closes the open file. Single-threaded (the web server's event loop calls it)."""

    def __init__(
        self,
        checker: ReportChecker,
        writer: RollingAvroWriter,
        *,
        max_body_bytes: int = 1 << 20,
        max_batch: int = 1000,
    ) -> None:
        self.checker = checker
        self.writer = writer
        self.max_body_bytes = int(max_body_bytes)
        self.max_batch = int(max_batch)
        self.stats = CollectorStats()
        self.failed: str | None = None  # set by a failed write: later requests get 503

    def refuse(self, error: RequestError, n_reports: int = 0) -> tuple[int, dict[str, Any]]:
        """Counts a refused request (``n_reports``: its reports, when known) and returns its answer."""
        s = self.stats
        s.received += 1
        s.rejected += 1
        s.rejected_by[error.error] = s.rejected_by.get(error.error, 0) + 1
        s.reports_refused += n_reports
        return error.status, error.body()

    def handle(self, media_type: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """``media_type``: :data:`JSON_TYPE` or :data:`AVRO_TYPE` (the server refuses others with 415).
        Returns ``(status, JSON answer)``: 200 ``{"accepted": n}``, or the refusal."""
        if self.failed is not None:
            return self.refuse(RequestError(503, "unavailable", f"the collector cannot write: {self.failed}"))
        if len(body) > self.max_body_bytes:
            return self.refuse(
                RequestError(413, "too_large", f"body of {len(body)} bytes; at most {self.max_body_bytes}")
            )
        records: list[object] = []
        try:
            parse = parse_json_body if media_type == JSON_TYPE else parse_avro_body
            records = parse(body, self.max_batch)
            accepted = self.checker.check(records, json_form=media_type == JSON_TYPE)
            try:
                block = self.writer.encode_block(accepted)
            except (ValueError, TypeError, OverflowError) as exc:  # not expected once the validator passed
                detail = f"a report does not fit the report schema: {exc}"
                raise RequestError(422, "invalid_payload", detail) from exc
        except RequestError as exc:
            return self.refuse(exc, len(records))
        try:
            self.writer.append(accepted, block)
        except WriteError as exc:
            return self._write_failed(exc, len(accepted))
        s = self.stats
        s.received += 1
        s.accepted += 1
        s.reports_accepted += len(accepted)
        if self.checker.drop_client_ids:
            s.client_ids_dropped += len(accepted)
        self._sync_counts()
        return 200, {"accepted": len(accepted)}

    def _write_failed(self, exc: WriteError, n: int) -> tuple[int, dict[str, Any]]:
        _LOG.error("%s", exc)
        self.failed = str(exc)
        self.stats.write_errors += 1
        return self.refuse(RequestError(500, "write_failed", "the reports could not be written"), n)

    def _sync_counts(self) -> None:
        self.stats.reports_written = self.writer.written_reports
        self.stats.reports_open = self.writer.open_reports
        self.stats.files_written = len(self.writer.written_files)

    def tick(self) -> None:
        """Rolls the open file when it is due (the server calls this about once a second)."""
        if self.writer.due():
            self.roll()

    def roll(self) -> None:
        try:
            self.writer.roll()
        except WriteError as exc:
            _LOG.error("%s", exc)
            self.failed = str(exc)
            self.stats.write_errors += 1
        self._sync_counts()

    def close(self) -> CollectorStats:
        """Closes the open file; returns the final counts."""
        self.roll()
        return self.stats
