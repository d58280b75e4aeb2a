"""Numpy encoding of report blocks (``schemas/report.avsc``): the client and simulator side of the wire.

``fastavro`` writes one record at a time (about 7 us a report); :func:`encode_report_block` builds the
Avro binary encoding of a whole batch column by column instead: each field becomes a matrix of bytes and a
length per report (zig-zag varints, union branch bytes, doubles, client ids), assembled report by report
into one block, byte-identical to fastavro's. :func:`write_reports` appends such blocks to a container
opened with fastavro's writer, and falls back to record-by-record writing for payloads the block encoder
does not handle (``bits``, ``items``). The inverse is :mod:`wire.decode`.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO

import fastavro.write
import numpy as np

from ldp.reports import Reports
from wire.decode import MAX_CLIENT_ID_BYTES
from wire.records import reports_to_records

__all__ = ["encode_report_block", "append_block", "write_reports"]

_U64 = np.uint64


def _zigzag(x: np.ndarray) -> np.ndarray:
    """Avro's zig-zag map of int64 values to uint64."""
    x = np.asarray(x, dtype=np.int64)
    return (x.view(_U64) << _U64(1)) ^ (x >> 63).view(_U64)


def _varints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints of int64 values: ``(bytes (n, 10) uint8, lengths (n,))``."""
    u = _zigzag(x)
    lens = np.ones(len(u), dtype=np.int64)
    for k in range(1, 10):
        lens += u >= _U64(1 << (7 * k))
    shifts = (7 * np.arange(10)).astype(_U64)
    mat = ((u[:, None] >> shifts[None, :]) & _U64(0x7F)).astype(np.uint8)
    mat[np.arange(10)[None, :] < (lens - 1)[:, None]] |= 0x80
    return mat, lens


def _const(b: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.broadcast_to(np.frombuffer(b, dtype=np.uint8), (n, len(b))), np.full(n, len(b), np.int64)


def _assemble(pieces: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """Concatenates per-record byte pieces ``(matrix (n, w), lengths (n,))`` record by record."""
    n = len(pieces[0][1])
    total = np.zeros(n, dtype=np.int64)
    for _, ln in pieces:
        total += ln
    start = np.concatenate([[0], np.cumsum(total)[:-1]])
    out = np.zeros(int(total.sum()), dtype=np.uint8)
    pos = start.copy()
    for mat, ln in pieces:
        for k in range(mat.shape[1]):
            rows = np.flatnonzero(ln > k) if not (ln > k).all() else slice(None)
            out[pos[rows] + k] = mat[rows, k]
        pos += ln
    return out.tobytes()


def _client_id_matrix(client_ids: object, n: int) -> np.ndarray | None:
    """Fixed-length client ids as uint8 ``(n, L)`` (1 <= L <= MAX_CLIENT_ID_BYTES), None for no ids."""
    if client_ids is None:
        return None
    ids = np.asarray(client_ids, dtype=np.uint8)
    if ids.ndim != 2 or len(ids) != n or not 1 <= ids.shape[1] <= MAX_CLIENT_ID_BYTES:
        raise ValueError(
            f"client_ids must be a uint8 array of shape ({n}, L) with 1 <= L <= {MAX_CLIENT_ID_BYTES}, "
            f"got {ids.shape}"
        )
    return np.ascontiguousarray(ids)


def encode_report_block(
    task_id: str,
    reports: Reports,
    event_ms: np.ndarray,
    group: int | np.ndarray,
    schema_version: int,
    client_ids: np.ndarray | None = None,
) -> bytes | None:
    """The Avro binary encoding of a batch of reports (``schemas/report.avsc`` field order), or None
    when the payload has a field this encoder does not handle (``bits``, ``items``: use fastavro).
    ``group`` is one group for all reports or one per report; ``client_ids`` None (no ids) or uint8
    ``(n, L)``: one id of L bytes per report. Byte-identical to fastavro's encoding."""
    n = len(event_ms)
    ids = _client_id_matrix(client_ids, n)
    fields = reports.fields()
    if any(f in fields for f in ("bits", "items")):
        return None
    tid = task_id.encode("utf-8")
    m, ln = _varints(np.array([len(tid)]))
    prefix = bytes(m[0, : ln[0]])
    pieces = [_const(prefix + tid, n)]
    pieces.append(_varints(np.full(n, schema_version)))
    pieces.append(_varints(event_ms))
    pieces.append(_varints(np.broadcast_to(np.asarray(group, dtype=np.int64), (n,))))
    one = _const(b"\x02", n)
    null = _const(b"\x00", n)
    for name in ("values", "seeds"):
        arr = getattr(reports, name)
        if arr is None:
            pieces.append(null)
        else:
            pieces.append(one)
            a = np.asarray(arr)
            pieces.append(_varints(a.view(np.int64) if a.dtype == np.uint64 else a.astype(np.int64)))
    pieces += [null, null]  # bits, items
    if reports.reals is None:
        pieces.append(null)
    elif np.ndim(reports.reals) == 2:  # (n, w): union branch 1, one array block of w doubles, the marker
        w = int(np.shape(reports.reals)[1])
        pieces.append(one)
        if w:
            m, ln = _varints(np.array([w]))
            pieces.append(_const(bytes(m[0, : ln[0]]), n))
            dbl = np.ascontiguousarray(np.asarray(reports.reals, dtype="<f8")).view(np.uint8)
            dbl = dbl.reshape(n, 8 * w)
            pieces.append((dbl, np.full(n, 8 * w, np.int64)))
        pieces.append(null)
    else:  # union branch 1, an array block of one double, the end-of-array marker
        pieces.append(_const(b"\x02\x02", n))
        dbl = np.ascontiguousarray(np.asarray(reports.reals, dtype="<f8")).view(np.uint8).reshape(n, 8)
        pieces.append((dbl, np.full(n, 8, np.int64)))
        pieces.append(null)
    if ids is None:  # client_id
        pieces.append(null)
    else:
        m, ln = _varints(np.array([ids.shape[1]]))
        pieces.append(_const(b"\x02" + bytes(m[0, : ln[0]]), n))
        pieces.append((ids, np.full(n, ids.shape[1], np.int64)))
    return _assemble(pieces)


def append_block(fh: BinaryIO, writer: fastavro.write.Writer, data: bytes, count: int, codec: str) -> None:
    """Appends one block (count, size, data, sync marker) after ``writer``'s header."""
    if codec == "deflate":
        c = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        data = c.compress(data) + c.flush()
    m, ln = _varints(np.array([count, len(data)]))
    fh.write(bytes(m[0, : ln[0]]) + bytes(m[1, : ln[1]]) + data + writer.sync_marker)


def write_reports(
    fh: BinaryIO,
    writer: fastavro.write.Writer,
    task_id: str,
    reports: Reports,
    event_ms: np.ndarray,
    group: int | np.ndarray,
    schema_version: int,
    codec: str = "null",
    block_records: int = 1 << 15,
    client_ids: np.ndarray | None = None,
) -> None:
    """Appends reports to an Avro container opened with ``fastavro.write.Writer(fh, report schema)`` in
    blocks of ``block_records``: numpy-encoded when :func:`encode_report_block` handles the payload, else
    record by record through ``writer``. ``client_ids``: None or uint8 ``(n, L)`` (one id per report)."""
    n = len(event_ms)
    groups = np.broadcast_to(np.asarray(group, dtype=np.int64), (n,))
    ids = _client_id_matrix(client_ids, n)
    for lo in range(0, n, block_records):
        hi = min(n, lo + block_records)
        batch = reports.take(slice(lo, hi))
        sub = None if ids is None else ids[lo:hi]
        data = encode_report_block(task_id, batch, event_ms[lo:hi], groups[lo:hi], schema_version, sub)
        writer.flush()
        if data is not None:
            append_block(fh, writer, data, hi - lo, codec)
        else:
            recs = reports_to_records(
                task_id, batch, event_ms[lo:hi], groups[lo:hi], schema_version=schema_version, client_ids=sub
            )
            for r in recs:
                writer.write(r)
            writer.flush()
