"""The JSON form of a report (``docs/wire_format.md``, section 1) and its checks.

A report in the JSON form has the members of ``schemas/report.avsc`` (:data:`REPORT_JSON_FIELDS`): ``seed``
as the decimal string of its signed 64-bit reading, ``bits`` and ``client_id`` in padded standard base64,
``reals`` as numbers. :func:`report_to_json` / :func:`reports_to_json` write it; :func:`report_from_json`
maps one back to the Avro record it stands for and refuses, with the dead-letter reason of the spec
(:class:`WireFormatError`), what cannot be one. The record then goes through :mod:`wire.validate` as any.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import numpy as np

from ldp.reports import Reports

__all__ = ["REPORT_JSON_FIELDS", "WireFormatError", "report_to_json", "reports_to_json", "report_from_json"]

#: Members of a report in the JSON form: the fields of ``schemas/report.avsc``, in schema order.
REPORT_JSON_FIELDS = (
    "task_id", "schema_version", "event_time", "group", "value", "seed", "bits", "items", "reals", "client_id"
)
_PAYLOAD = {"values": "value", "seeds": "seed", "bits": "bits", "items": "items", "reals": "reals"}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_SEED_RE = re.compile(r"-?(0|[1-9][0-9]{0,18})")
_B64_RE = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


class WireFormatError(ValueError):
    """A JSON report that does not map to an Avro report record; ``reason`` is its dead-letter reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def report_to_json(record: dict[str, Any]) -> dict[str, Any]:
    """An Avro report record (``wire.records.reports_to_records``) in the JSON form: every member,
    ``seed`` as a decimal string of the signed long, ``bits`` / ``client_id`` in base64."""
    out: dict[str, Any] = {}
    for name in REPORT_JSON_FIELDS:
        v = record.get(name, 0 if name == "group" else None)
        if v is not None and name == "seed":
            v = str(int(v) - (1 << 64) if int(v) > _INT64_MAX else int(v))
        elif v is not None and name in ("bits", "client_id"):
            v = _b64(v)
        out[name] = v
    return out


def reports_to_json(
    task_id: str, reports: Reports, event_ms: Any, groups: Any = 0, *, schema_version: int = 2
) -> list[dict[str, Any]]:
    """A batch of :class:`~ldp.reports.Reports` as JSON-form reports."""
    n = len(reports)
    et = np.broadcast_to(np.asarray(event_ms, dtype=np.int64), (n,)).tolist()
    grp = np.broadcast_to(np.asarray(groups, dtype=np.int64), (n,)).tolist()
    cols: dict[str, list[Any]] = {}
    for name, member in _PAYLOAD.items():
        arr = getattr(reports, name)
        if arr is None:
            continue
        if name == "seeds":
            cols[member] = [str(s) for s in np.asarray(arr, dtype=np.uint64).view(np.int64).tolist()]
        elif name == "bits":
            cols[member] = [_b64(row.tobytes()) for row in np.ascontiguousarray(arr, dtype=np.uint8)]
        elif name == "reals":
            a = np.asarray(arr, dtype=np.float64)
            cols[member] = a.tolist() if a.ndim == 2 else [[x] for x in a.tolist()]
        else:
            cols[member] = np.asarray(arr, dtype=np.int64).tolist()
    out = []
    for i in range(n):
        rec: dict[str, Any] = dict.fromkeys(REPORT_JSON_FIELDS)
        rec.update(task_id=task_id, schema_version=schema_version, event_time=et[i], group=grp[i])
        for member, col in cols.items():
            rec[member] = col[i]
        out.append(rec)
    return out


def _from_b64(text: object, what: str, reason: str) -> bytes:
    if not isinstance(text, str) or not _B64_RE.fullmatch(text):
        raise WireFormatError(reason, f"{what} must be padded standard base64")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise WireFormatError(reason, f"{what} must be padded standard base64") from None


def _as_double(x: object) -> object:
    """A JSON integer in ``reals`` as the double it spells (``1`` is ``1.0``); anything else unchanged."""
    if type(x) is int:
        try:
            return float(x)
        except OverflowError:
            return x
    return x


def report_from_json(obj: object) -> dict[str, Any]:
    """The Avro report record a JSON-form report stands for (the validator then checks it as any record).

    Raises:
        WireFormatError: ``not_a_record`` (not an object), ``invalid_payload`` (a member the schema does
            not have, ``bits`` not base64), ``invalid_seed`` (``seed`` not a canonical decimal string of a
            signed 64-bit integer), ``invalid_client_id`` (``client_id`` not base64).
    """
    if not isinstance(obj, dict):
        raise WireFormatError("not_a_record", "a report must be a JSON object")
    extra = sorted(set(obj) - set(REPORT_JSON_FIELDS))
    if extra:
        raise WireFormatError("invalid_payload", f"unknown member(s) {', '.join(map(str, extra))[:200]}")
    rec = {name: obj.get(name) for name in REPORT_JSON_FIELDS if name in obj}
    seed = rec.get("seed")
    if seed is not None:
        if not isinstance(seed, str) or not _SEED_RE.fullmatch(seed) or seed == "-0":
            raise WireFormatError(
                "invalid_seed", "seed must be the decimal string of a signed 64-bit integer"
            )
        s = int(seed)
        if not _INT64_MIN <= s <= _INT64_MAX:
            raise WireFormatError("invalid_seed", "seed outside the signed 64-bit range")
        rec["seed"] = s
    if rec.get("bits") is not None:
        rec["bits"] = _from_b64(rec["bits"], "bits", "invalid_payload")
    if rec.get("client_id") is not None:
        rec["client_id"] = _from_b64(rec["client_id"], "client_id", "invalid_client_id")
    reals = rec.get("reals")
    if isinstance(reals, list):
        rec["reals"] = [_as_double(x) for x in reals]
    return rec
