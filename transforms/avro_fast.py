"""Vectorized (numpy) decoding and encoding of Avro blocks written with ``schemas/report.avsc``.

``fastavro`` builds one Python dict per record (about 4-5 us per report here), which bounds a Python Beam
pipeline to ~200k reports/s on one core before any other work. Report blocks are regular, so they can be
decoded column-wise instead:

1. *Record starts.* Every record begins with the task id string (zig-zag length + UTF-8 bytes). In a block
   whose records all carry the task's id, the record starts are the occurrences of that byte pattern.
2. *Column decode.* From the starts, every field is decoded for all records at once: varints by gathering
   up to 10 bytes per record, union branches from their index byte, bytes/arrays of the expected length.
3. *Verification.* The decode is accepted only if it is exactly what a sequential decoder would produce:
   the first record starts at 0, each record ends where the next begins, the last ends at the end of the
   block, the number of records equals the block header's count, every varint terminates and every union
   index and length is the expected one. A pattern occurrence inside another field would break the chain.

A block that fails a check (another task's reports, unexpected lengths, a foreign writer schema, ...)
returns ``None`` and is decoded by ``fastavro`` record by record instead, which also produces the dead
letters. Nothing is guessed: the fast path either reproduces the sequential decode or declines.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import fastavro.write
import numpy as np
from fastavro.schema import to_parsing_canonical_form

import schemas
from ldp.reports import Reports

__all__ = [
    "ColumnBatch",
    "decode_block",
    "is_report_schema",
    "zigzag_varint_bytes",
    "iter_report_batches",
    "encode_report_block",
    "append_block",
    "write_reports",
]

_AR10 = np.arange(10, dtype=np.int64)
_SHIFTS = (7 * np.arange(10)).astype(np.uint64)
_PAD = 16
_U64 = np.uint64


@functools.lru_cache(maxsize=1)
def _report_canonical() -> str:
    return to_parsing_canonical_form(schemas.report_schema())


def is_report_schema(writer_schema: object) -> bool:
    """True when a block's writer schema is (canonically) ``schemas/report.avsc``."""
    try:
        return to_parsing_canonical_form(writer_schema) == _report_canonical()
    except Exception:  # noqa: BLE001 - an unparseable schema is simply not ours
        return False


def zigzag_varint_bytes(x: int) -> bytes:
    """Avro's encoding of a long (zig-zag, then base-128 varint)."""
    u = (x << 1) ^ (x >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@dataclasses.dataclass
class ColumnBatch:
    """Report records of one block as columns (all rows carry ``task_id``).

    Attributes:
        task_id: the task id every row carries.
        schema_version, event_ms, group: int64 ``(n,)``.
        present: Avro payload field -> bool ``(n,)`` (non-null).
        payload: Avro payload field -> numpy array over all rows (zeros where null): ``value`` int64,
            ``seed`` int64 (the signed bit pattern), ``bits`` uint8 ``(n, nbytes)``, ``items`` int64
            ``(n, k)``, ``reals`` float64 ``(n,)``.
    """

    task_id: str
    schema_version: np.ndarray
    event_ms: np.ndarray
    group: np.ndarray
    present: dict[str, np.ndarray]
    payload: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.event_ms)

    @staticmethod
    def concat(batches: list[ColumnBatch]) -> ColumnBatch:
        """Row-wise concatenation of batches of the same task."""
        if len(batches) == 1:
            return batches[0]
        b0 = batches[0]
        return ColumnBatch(
            b0.task_id,
            np.concatenate([b.schema_version for b in batches]),
            np.concatenate([b.event_ms for b in batches]),
            np.concatenate([b.group for b in batches]),
            {k: np.concatenate([b.present[k] for b in batches]) for k in b0.present},
            {k: np.concatenate([b.payload[k] for b in batches]) for k in b0.payload},
        )

    def record(self, i: int) -> dict[str, object]:
        """Row ``i`` as the dict ``fastavro`` would have produced (event_time as integer ms)."""
        rec: dict[str, object] = {
            "task_id": self.task_id,
            "schema_version": int(self.schema_version[i]),
            "event_time": int(self.event_ms[i]),
            "group": int(self.group[i]),
        }
        for f in ("value", "seed", "bits", "items", "reals"):
            if f in self.present and self.present[f][i]:
                v = self.payload[f][i]
                rec[f] = (
                    v.tobytes()
                    if f == "bits"
                    else v.tolist()
                    if f == "items"
                    else [float(v)]
                    if f == "reals"
                    else int(v)
                )
            else:
                rec[f] = None
        return rec


def _varint(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Zig-zag varints at positions ``p``: (values int64, new positions, all well-formed)."""
    if len(p) == 0:
        return np.zeros(0, np.int64), p, True
    first = buf[p]
    if not (first & 0x80).any():  # all one byte: the common case for small ints and union indexes
        u = first.astype(np.int64)
        return (u >> 1) ^ -(u & 1), p + 1, True
    w = buf[p[:, None] + _AR10]
    term = (w & 0x80) == 0
    ok = bool(term.any(axis=1).all())
    ln = term.argmax(axis=1) + 1
    parts = (w & 0x7F).astype(np.uint64) << _SHIFTS
    parts[_AR10[None, :] >= ln[:, None]] = 0
    u = np.bitwise_or.reduce(parts, axis=1)
    v = (u >> np.uint64(1)) ^ (np.uint64(0) - (u & np.uint64(1)))
    return v.view(np.int64), p + ln, ok


def _union(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Union branch of ``["null", X]`` at ``p``: (has value, new positions, well-formed)."""
    b = buf[p]
    ok = bool(((b == 0) | (b == 2)).all())
    return b == 2, p + 1, ok


def decode_block(
    data: bytes, num_records: int, task_id: str, *, bits_len: int | None = None, items_len: int | None = None
) -> ColumnBatch | None:
    """Decodes one block's records (writer schema = report v1) or returns None (see the module doc).

    Args:
        data: the block's decompressed bytes.
        num_records: the block header's record count.
        task_id: the expected task id (the record-start pattern).
        bits_len: expected byte length of ``bits`` where present (None: any present ``bits`` declines).
        items_len: expected length of ``items`` where present (None: any present ``items`` declines).
    """
    tid = task_id.encode("utf-8")
    prefix = zigzag_varint_bytes(len(tid)) + tid
    starts = np.fromiter((m.start() for m in re.finditer(re.escape(prefix), data)), dtype=np.int64)
    n = num_records
    if len(starts) != n or n == 0 or starts[0] != 0:
        return None
    buf = np.frombuffer(data + b"\x00" * _PAD, dtype=np.uint8)
    p = starts + len(prefix)
    ok_all = True
    sv, p, ok = _varint(buf, p)
    ok_all &= ok
    et, p, ok = _varint(buf, p)
    ok_all &= ok
    grp, p, ok = _varint(buf, p)
    ok_all &= ok
    present: dict[str, np.ndarray] = {}
    payload: dict[str, np.ndarray] = {
        "bits": np.zeros((n, bits_len or 0), dtype=np.uint8),
        "items": np.zeros((n, items_len or 0), dtype=np.int64),
        "reals": np.zeros(n, dtype=np.float64),
    }
    for f in ("value", "seed"):
        has, p, ok = _union(buf, p)
        ok_all &= ok
        vals = np.zeros(n, dtype=np.int64)
        if has.any():
            v, pv, ok = _varint(buf, p[has])
            ok_all &= ok
            vals[has] = v
            p[has] = pv
        present[f], payload[f] = has, vals
    # bits: ["null", "bytes"]
    has, p, ok = _union(buf, p)
    ok_all &= ok
    present["bits"] = has
    if has.any():
        if bits_len is None:
            return None
        ln, pv, ok = _varint(buf, p[has])
        if not ok or not (ln == bits_len).all():
            return None
        out = np.zeros((n, bits_len), dtype=np.uint8)
        out[has] = buf[pv[:, None] + np.arange(bits_len)]
        p[has] = pv + bits_len
        payload["bits"] = out
    # items: ["null", array<long>] as one block of exactly items_len entries then the 0 terminator
    has, p, ok = _union(buf, p)
    ok_all &= ok
    present["items"] = has
    if has.any():
        if items_len is None:
            return None
        cnt, q, ok = _varint(buf, p[has])
        if not ok or not (cnt == items_len).all():
            return None
        cols = []
        for _ in range(items_len):
            v, q, ok = _varint(buf, q)
            ok_all &= ok
            cols.append(v)
        if not (buf[q] == 0).all():
            return None
        out = np.zeros((n, items_len), dtype=np.int64)
        out[has] = np.stack(cols, axis=1) if cols else np.zeros((int(has.sum()), 0), np.int64)
        p[has] = q + 1
        payload["items"] = out
    # reals: ["null", array<double>] as one block of one double then the 0 terminator
    has, p, ok = _union(buf, p)
    ok_all &= ok
    present["reals"] = has
    if has.any():
        q = p[has]
        if not ((buf[q] == 2) & (buf[q + 9] == 0)).all():
            return None
        raw = buf[(q + 1)[:, None] + np.arange(8)].copy()
        out = np.zeros(n, dtype=np.float64)
        out[has] = raw.view("<f8").reshape(-1)
        p[has] = q + 10
        payload["reals"] = out
    if not ok_all:
        return None
    # the chain: each record ends where the next starts, the last at the end of the block
    if not (np.array_equal(p[:-1], starts[1:]) and p[-1] == len(data)):
        return None
    return ColumnBatch(task_id, sv, et, grp, present, payload)


def iter_report_batches(
    fo: BinaryIO,
    batch_size: int = 1 << 15,
    *,
    task_id: str | None = None,
    bits_len: int | None = None,
    items_len: int | None = None,
) -> Iterator[ColumnBatch | list[object]]:
    """Yields the reports of an Avro container as :class:`ColumnBatch` (fast path) or lists of record dicts.

    Blocks are decoded column-wise when the writer schema is the report schema and ``task_id`` is given
    and the block passes :func:`decode_block`'s checks; other blocks go through ``fastavro``. Consecutive
    batches of one kind are merged up to about ``batch_size`` rows. Raises what ``fastavro`` raises on
    corrupt input (after yielding the batches before the corruption).
    """
    import fastavro

    cols: list[ColumnBatch] = []
    recs: list[object] = []
    n_cols = 0
    fast: bool | None = None
    error: Exception | None = None
    try:
        for block in fastavro.block_reader(fo):
            if fast is None:
                fast = task_id is not None and is_report_schema(block.writer_schema)
            cb = None
            if fast:
                cb = decode_block(
                    block.bytes_.getvalue(),
                    block.num_records,
                    task_id,
                    bits_len=bits_len,
                    items_len=items_len,
                )
            if cb is not None:
                if recs:
                    yield recs
                    recs = []
                cols.append(cb)
                n_cols += len(cb)
                if n_cols >= batch_size:
                    yield ColumnBatch.concat(cols)
                    cols, n_cols = [], 0
            else:
                if cols:
                    yield ColumnBatch.concat(cols)
                    cols, n_cols = [], 0
                block.bytes_.seek(0)
                recs.extend(block)
                if len(recs) >= batch_size:
                    yield recs
                    recs = []
    except Exception as exc:  # noqa: BLE001 - re-raised below, after the batches decoded so far
        error = exc
    if cols:
        yield ColumnBatch.concat(cols)
    if recs:
        yield recs
    if error is not None:
        raise error


# ------------------------------------------------------------------------------------------------------------
# Encoding: the inverse, for simulators (fastavro's per-record write costs ~7 us a report)
# ------------------------------------------------------------------------------------------------------------


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


def encode_report_block(
    task_id: str, reports: Reports, event_ms: np.ndarray, group: int | np.ndarray, schema_version: int
) -> bytes | None:
    """The Avro binary encoding of a batch of reports (``schemas/report.avsc`` field order), or None
    when the payload has a field this encoder does not handle (``bits``, ``items``: use fastavro).
    ``group`` is one group for all reports or one per report. Byte-identical to fastavro's encoding."""
    n = len(event_ms)
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
    else:  # union branch 1, an array block of one double, the end-of-array marker
        pieces.append(_const(b"\x02\x02", n))
        dbl = np.ascontiguousarray(np.asarray(reports.reals, dtype="<f8")).view(np.uint8).reshape(n, 8)
        pieces.append((dbl, np.full(n, 8, np.int64)))
        pieces.append(null)
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
) -> None:
    """Appends reports to an Avro container opened with ``fastavro.write.Writer(fh, report schema)`` in
    blocks of ``block_records``: numpy-encoded when :func:`encode_report_block` handles the payload, else
    record by record through ``writer``."""
    from transforms.records import reports_to_records  # records imports this module

    n = len(event_ms)
    groups = np.broadcast_to(np.asarray(group, dtype=np.int64), (n,))
    for lo in range(0, n, block_records):
        hi = min(n, lo + block_records)
        batch = reports.take(slice(lo, hi))
        data = encode_report_block(task_id, batch, event_ms[lo:hi], groups[lo:hi], schema_version)
        writer.flush()
        if data is not None:
            append_block(fh, writer, data, hi - lo, codec)
        else:
            for r in reports_to_records(task_id, batch, event_ms[lo:hi], groups[lo:hi]):
                writer.write(r)
            writer.flush()
