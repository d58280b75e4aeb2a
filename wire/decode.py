"""Column-wise (numpy) decoding of Avro blocks of ``schemas/report.avsc`` (encoding: :mod:`wire.encode`).

``fastavro`` builds one Python dict per record (about 4-5 us per report here), which bounds a Python Beam
pipeline to ~200k reports/s on one core before any other work. Report blocks are regular, so they can be
decoded column-wise instead:

1. *Record starts.* Every record begins with the task id string (zig-zag length + UTF-8 bytes). In a block
   whose records all carry the task's id, the record starts are the occurrences of that byte pattern
   (found with numpy: the first byte, then 8-byte words of the rest at the candidates).
2. *Column decode.* From the starts, every field is decoded for all records at once: a varint from one
   8-byte word gathered per row (a second for varints of 9 or 10 bytes), union branches from their index
   byte, ``bits`` / ``items`` of any length up to the longest the task's groups accept (zero-padded
   columns plus a length per row), ``reals``, ``client_id``.
3. *Verification.* The decode is accepted only if it is exactly what a sequential decoder would produce:
   the first record starts at 0, the number of starts equals the block header's count, and each record
   ends where the next begins (the last at the end of the block). A pattern occurrence inside another
   field would break the chain.

A row the columns cannot carry (a ``bits`` / ``items`` longer than any group accepts, an array written in
several blocks, a varint of more than 64 bits, a malformed ``reals`` or ``client_id``) is decoded by
``fastavro`` from exactly its bytes (the chain delimits it) and counted (``ColumnBatch.n_fallback``; the
validate step counts ``reports_decoded_one_by_one``). A block whose starts do not chain, or whose row does
not decode, is declined: ``fastavro`` decodes it record by record instead, which also produces the dead
letters. Nothing is guessed: the fast path either reproduces the sequential decode or declines.
Consecutive small blocks (fastavro's writer makes ~16 kB blocks) are decoded as one run.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import zlib
from collections.abc import Callable, Generator, Iterator
from typing import BinaryIO, NamedTuple

import fastavro
import numpy as np
from fastavro.schema import to_parsing_canonical_form

import schemas

__all__ = [
    "ColumnBatch",
    "decode_block",
    "is_report_schema",
    "report_layout",
    "MAX_CLIENT_ID_BYTES",
    "client_id_keys",
    "zigzag_varint_bytes",
    "iter_report_batches",
    "iter_container",
    "Loss",
    "LOSS_REASONS",
    "CODECS",
    "MAX_BLOCK_BYTES",
]

_U64 = np.uint64


#: Largest pseudonymous client id (bytes) of a report (``schemas/report.avsc`` field ``client_id``).
MAX_CLIENT_ID_BYTES = 64


@functools.lru_cache(maxsize=1)
def _report_layouts() -> dict[str, bool]:
    """Canonical forms of the report writer schemas the fast path decodes -> whether records end with the
    ``client_id`` union: the current ``schemas/report.avsc`` and the version 2 schema before ``client_id``
    was added (files written then are decoded exactly; their reports have no client id)."""
    current = schemas.load_schema("report")
    legacy = {**current, "fields": [f for f in current["fields"] if f["name"] != "client_id"]}
    return {
        to_parsing_canonical_form(fastavro.parse_schema(current)): True,
        to_parsing_canonical_form(fastavro.parse_schema(legacy)): False,
    }


def report_layout(writer_schema: object) -> bool | None:
    """None when a block's writer schema is not a report schema the fast path knows; else whether its
    records carry the ``client_id`` field (True: the current schema; False: version 2 before it)."""
    try:
        return _report_layouts().get(to_parsing_canonical_form(writer_schema))
    except Exception:  # noqa: BLE001 - an unparseable schema is simply not ours
        return None


def is_report_schema(writer_schema: object) -> bool:
    """True when a block's writer schema is (canonically) ``schemas/report.avsc``, current or the version 2
    layout without ``client_id``."""
    return report_layout(writer_schema) is not None


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
        present: Avro payload field -> bool ``(n,)`` (non-null); also ``client_id``.
        payload: Avro payload field -> numpy array over all rows (zeros where null): ``value`` int64,
            ``seed`` int64 (the signed bit pattern), ``bits`` uint8 ``(n, w)`` and ``items`` int64
            ``(n, w)``, each row zero-padded to the block's longest (row ``i`` holds
            ``lengths[f][i]`` entries), ``reals`` float64 ``(n,)`` (one double per report) or ``(n, w)``
            (``reals_len`` w); ``client_id`` uint8 ``(n, 1 + w)``: column 0 the id's length, then its
            bytes zero-padded to the longest id of the block (``w`` <= :data:`MAX_CLIENT_ID_BYTES`;
            ``(n, 1)`` when none has one).
        lengths: ``bits`` (bytes), ``items`` and ``reals`` (entries) -> int64 ``(n,)``, the length of each
            present field (0 where null). A length above the padded width (a field longer than any group
            of the task accepts) has no entries in ``payload``: the validator refuses it by its length.
        fallback: None, or object ``(n,)``: the fastavro record of each row the column decoder left to
            fastavro (None for the others); :attr:`n_fallback` counts them.
    """

    task_id: str
    schema_version: np.ndarray
    event_ms: np.ndarray
    group: np.ndarray
    present: dict[str, np.ndarray]
    payload: dict[str, np.ndarray]
    #: the writer schema has the ``client_id`` field (False: version 2 before it; :meth:`record` omits it)
    client_id_field: bool = True
    lengths: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    fallback: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.event_ms)

    @property
    def n_fallback(self) -> int:
        """Rows decoded one by one by fastavro (not column-wise)."""
        return 0 if self.fallback is None else int(np.count_nonzero(np.not_equal(self.fallback, None)))

    @staticmethod
    def concat(batches: list[ColumnBatch]) -> ColumnBatch:
        """Row-wise concatenation of batches of the same task."""
        if len(batches) == 1:
            return batches[0]
        b0 = batches[0]
        fallback = None
        if any(b.fallback is not None for b in batches):
            fallback = np.concatenate(
                [np.full(len(b), None, dtype=object) if b.fallback is None else b.fallback for b in batches]
            )
        return ColumnBatch(
            b0.task_id,
            np.concatenate([b.schema_version for b in batches]),
            np.concatenate([b.event_ms for b in batches]),
            np.concatenate([b.group for b in batches]),
            {k: np.concatenate([b.present[k] for b in batches]) for k in b0.present},
            {k: _concat_payload([b.payload[k] for b in batches]) for k in b0.payload},
            b0.client_id_field,
            {k: np.concatenate([b.lengths[k] for b in batches]) for k in b0.lengths},
            fallback,
        )

    def record(self, i: int) -> dict[str, object]:
        """Row ``i`` as the dict ``fastavro`` would have produced (event_time as integer ms)."""
        if self.fallback is not None and self.fallback[i] is not None:
            return dict(self.fallback[i])
        rec: dict[str, object] = {
            "task_id": self.task_id,
            "schema_version": int(self.schema_version[i]),
            "event_time": int(self.event_ms[i]),
            "group": int(self.group[i]),
        }
        for f in ("value", "seed", "bits", "items", "reals", "client_id"):
            if f == "client_id" and not self.client_id_field:
                continue
            if f not in self.present or not self.present[f][i]:
                rec[f] = None
                continue
            v = self.payload[f][i]
            if f == "client_id":
                rec[f] = v[1 : 1 + int(v[0])].tobytes()
            elif f in ("bits", "items"):
                v = v[: int(self.lengths[f][i])] if f in self.lengths else v
                rec[f] = v.tobytes() if f == "bits" else v.tolist()
            elif f == "reals":
                rec[f] = [float(v)] if np.ndim(v) == 0 else v.tolist()
            else:
                rec[f] = int(v)
        return rec


def _concat_payload(cols: list[np.ndarray]) -> np.ndarray:
    """Row-wise concatenation; 2-D columns are zero-padded to the widest block's."""
    if cols[0].ndim == 1:
        return np.concatenate(cols)
    w = max(c.shape[1] for c in cols)
    return np.concatenate([c if c.shape[1] == w else np.pad(c, ((0, 0), (0, w - c.shape[1]))) for c in cols])


def client_id_keys(ids: np.ndarray) -> np.ndarray:
    """Fixed-width keys of a ``client_id`` column (``(n, 1 + w)``: length, then bytes): a ``(n,)`` array of
    ``numpy.void`` of 1 + :data:`MAX_CLIENT_ID_BYTES` bytes, equal exactly when the ids are (length
    included, so ids differing only by trailing zero bytes stay apart); sortable, usable with
    ``numpy.unique`` / ``searchsorted``."""
    ids = np.asarray(ids, dtype=np.uint8)
    w = 1 + MAX_CLIENT_ID_BYTES
    if ids.ndim != 2 or ids.shape[1] > w:
        raise ValueError(f"client id column must be (n, <= {w}) uint8, got shape {ids.shape}")
    full = np.zeros((len(ids), w), dtype=np.uint8)
    full[:, : ids.shape[1]] = ids
    return full.view(f"V{w}").reshape(-1)


_HIGH_BITS = _U64(0x8080808080808080)
_LOW7 = _U64(0x7F7F7F7F7F7F7F7F)
#: zero bytes after a block's data: positions of rows that cannot be read column-wise may run past the
#: block's end for a few fields before the rows are dropped from the column decode
_PAD = 256
#: ``bits`` / ``items`` / ``reals`` decoded column-wise when the task declares no size for them (rows with
#: more go through fastavro one by one: the validator refuses them, and their dead letters hold them)
_UNDECLARED_LEN = 0


class _Buf:
    """A block's bytes followed by :data:`_PAD` zero bytes, as bytes and as the little-endian uint64 word
    starting at every byte offset (a strided view: ``u64[p]`` gathers 8 bytes at each position ``p``)."""

    def __init__(self, data: bytes) -> None:
        self.size = len(data)
        self.u8 = np.frombuffer(data + b"\x00" * _PAD, dtype=np.uint8)
        self.u64 = np.ndarray((len(self.u8) - 7,), dtype="<u8", buffer=self.u8, strides=(1,))

    def clamp(self, p: np.ndarray, odd: np.ndarray, rows: np.ndarray | slice = slice(None)) -> None:
        """Rows ``rows`` whose position ``p`` ran past the block are marked ``odd`` (left to fastavro) and
        set back to the block's end, so that later gathers stay inside the padding."""
        over = p > self.size
        if over.any():
            odd[np.flatnonzero(over) if isinstance(rows, slice) else rows[over]] = True
            p[over] = self.size

    def at(self, p: np.ndarray, ln: np.ndarray, w: int) -> np.ndarray:
        """The ``ln`` bytes at ``p`` of each row, zero-padded to ``w``: uint8 ``(len(p), w)``.

        Gathers 8 bytes at a time through the strided ``u64`` view (an ``(n, ceil(w / 8))`` index, not
        ``(n, w)``), byte by byte only where a row's last word would run past the padding."""
        words = -(-w // 8)
        if len(p) and int(p.max()) + 8 * words <= len(self.u64) + 7:
            wide = self.u64[p[:, None] + 8 * np.arange(words)]
            out = np.ascontiguousarray(wide.view(np.uint8)[:, :w])
        else:
            idx = p[:, None] + np.arange(w)
            if len(p) and int(p.max()) + w > len(self.u8):
                np.minimum(idx, len(self.u8) - 1, out=idx)
            out = self.u8[idx]
        if len(p) and int(ln.min()) < w:
            out *= np.arange(w)[None, :] < ln[:, None]
        return out


def _compact7(v: np.ndarray, tmp: np.ndarray) -> None:
    """Packs, in place, the 7-bit groups of the 8 bytes of each word (high bits already clear) into 56
    bits; ``tmp`` is scratch of the same shape."""
    for shift, keep, moved in (
        (1, 0x007F007F007F007F, 0x3F803F803F803F80),
        (2, 0x00003FFF00003FFF, 0x0FFFC0000FFFC000),
        (4, 0x000000000FFFFFFF, 0x00FFFFFFF0000000),
    ):
        np.right_shift(v, _U64(shift), out=tmp)
        tmp &= _U64(moved)
        v &= _U64(keep)
        v |= tmp


def _varint(b: _Buf, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Zig-zag varints at positions ``p``: (values int64, new positions, rows that are not a varint of at
    most 64 bits, or None when there are none).

    One 8-byte word gathered per row: the lowest clear high bit ends the varint, the bytes up to it are
    kept and their 7-bit groups packed; rows running past 8 bytes read a second word (bytes 8 and 9).
    A varint longer than 10 bytes, or a 10th byte above 1 (more than 64 bits), is flagged: such a row is
    decoded by fastavro, whose reading is the reference. The arithmetic is in place on a few arrays."""
    if len(p) == 0:
        return np.zeros(0, np.int64), p, None
    first = b.u8[p]
    if int(first.max()) < 0x80:  # all one byte: the common case for small ints and union indexes
        u = first.astype(np.int64)
        return (u >> 1) ^ -(u & 1), p + 1, None
    u = b.u64[p]
    low = np.invert(u)
    low &= _HIGH_BITS
    tmp = np.negative(low)
    low &= tmp  # the terminating byte's high bit (0: longer than 8 bytes)
    np.left_shift(low, _U64(1), out=tmp)
    tmp -= _U64(1)  # bytes up to the terminator (all 8 when low is bit 63 or 0)
    u &= tmp
    u &= _LOW7
    _compact7(u, tmp)
    low -= _U64(1)
    ln = np.bitwise_count(low)
    ln >>= 3
    ln = ln.astype(np.int64)
    ln += 1
    bad = None
    is_long = ln == 9
    if is_long.any():
        rows: np.ndarray | slice = slice(None) if is_long.all() else np.flatnonzero(is_long)
        hi = b.u64[p[rows] + 8]  # bytes 8 and 9 of the varint in the low 16 bits
        ten = hi >> _U64(7)
        ten &= _U64(1)  # byte 8 continues: 10 bytes
        top = hi >> _U64(1)
        top &= hi
        top &= _U64(0x80)  # bit 0 of byte 9 (bit 63 of the value), only when byte 8 continues
        top |= hi & _U64(0x7F)
        top <<= _U64(56)
        if isinstance(rows, slice):
            u |= top
        else:
            u[rows] |= top
        ln[rows] += ten.astype(np.int64)
        hi &= _U64(0xFE00)  # byte 9 above 1 (more than 64 bits, or a continuation) when ten
        hi *= ten
        if hi.any():
            bad = np.zeros(len(p), dtype=bool)
            bad[rows] = hi != 0
    np.bitwise_and(u, _U64(1), out=tmp)
    np.negative(tmp, out=tmp)
    u >>= _U64(1)
    u ^= tmp
    ln += p
    return u.view(np.int64), ln, bad


def _union(b: _Buf, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union branch of ``["null", X]`` at ``p``: (has value, new positions, rows with another index)."""
    x = b.u8[p]
    has = x == 2
    return has, p + 1, ~has & (x != 0)


def _record_starts(b: _Buf, prefix: bytes) -> np.ndarray:
    """Every offset of the block where ``prefix`` occurs (overlapping occurrences included)."""
    last = b.size - len(prefix)
    if last < 0:
        return np.zeros(0, dtype=np.int64)
    cand = np.flatnonzero(b.u8[: last + 1] == prefix[0])
    for j in range(1, len(prefix), 8):
        part = prefix[j : j + 8]
        if not len(cand):
            break
        word = _U64(int.from_bytes(part, "little"))
        mask = _U64((1 << (8 * len(part))) - 1)
        cand = cand[(b.u64[cand + j] & mask) == word]
    return cand


@functools.lru_cache(maxsize=2)
def _fallback_schema(client_id: bool) -> object:
    """fastavro's parse (no logical types) of the report layout, for the rows decoded one by one."""
    current = schemas.load_schema("report")
    if not client_id:
        current = {**current, "fields": [f for f in current["fields"] if f["name"] != "client_id"]}
    return fastavro.parse_schema(_strip_logical_types(current))


_I64 = (-(1 << 63), (1 << 63) - 1)


def _is_i64(x: object) -> bool:
    return type(x) is int and _I64[0] <= x <= _I64[1]


class _Columns:
    """The columns of one block under construction (see :class:`ColumnBatch` for their meaning)."""

    def __init__(self, n: int, reals_len: int | None) -> None:
        self.present = {f: np.zeros(n, dtype=bool) for f in ("value", "seed", "bits", "items", "reals")}
        self.payload: dict[str, np.ndarray] = {
            "value": np.zeros(n, dtype=np.int64),
            "seed": np.zeros(n, dtype=np.int64),
            "bits": np.zeros((n, 0), dtype=np.uint8),
            "items": np.zeros((n, 0), dtype=np.int64),
            "reals": np.zeros(n if reals_len is None else (n, reals_len), dtype=np.float64),
            "client_id": np.zeros((n, 1), dtype=np.uint8),
        }
        self.present["client_id"] = np.zeros(n, dtype=bool)
        self.lengths = {f: np.zeros(n, dtype=np.int64) for f in ("bits", "items", "reals")}

    def widen(self, name: str, w: int) -> None:
        col = self.payload[name]
        if col.shape[1] < w:
            self.payload[name] = np.pad(col, ((0, 0), (0, w - col.shape[1])))


def _flag(odd: np.ndarray, rows: np.ndarray | slice, bad: np.ndarray | None) -> None:
    """Marks for fastavro the ``rows`` (indices, or every row as a slice) where ``bad`` is set."""
    if bad is None:
        return
    if isinstance(rows, slice):
        odd[bad] = True
    else:
        odd[rows[bad]] = True


_EVERYONE = slice(None)


def _open_union(
    b: _Buf, p: np.ndarray, odd: np.ndarray, cols: _Columns, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The branch of field ``name``'s ``["null", X]`` union at ``p``, marked in ``cols.present``: (new
    positions, the rows holding a value that are still read column-wise)."""
    has, p, bad = _union(b, p)
    _flag(odd, _EVERYONE, bad)
    cols.present[name] = has
    return p, np.flatnonzero(has & ~odd)


def _lengths(
    b: _Buf, p: np.ndarray, rows: np.ndarray, odd: np.ndarray, cap: int, *, of_bytes: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The length (or count) varint at ``p[rows]``, of at most ``cap`` (``of_bytes``: that many bytes
    inside the block): (the rows where it is so, their lengths, their positions after the varint); the
    other rows are marked ``odd``."""
    ln, pv, bad = _varint(b, p[rows])
    wrong = (ln < 0) | (ln > cap)
    if of_bytes:
        wrong |= pv + ln > b.size
    if bad is not None:
        wrong |= bad
    _flag(odd, rows, wrong)
    keep = ~wrong
    return rows[keep], ln[keep], pv[keep]


def _chained_starts(
    b: _Buf, prefix: bytes, n: int, splits: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """(start, end) offsets of the ``n`` records, or None when the ``prefix`` occurrences are not them.

    The occurrences must number ``n``, the first at 0, and one must be at every offset of ``splits``.
    """
    starts = _record_starts(b, prefix)
    if len(starts) != n or n == 0 or starts[0] != 0:
        return None
    if splits is not None and len(splits) and not np.array_equal(starts[splits[:, 0]], splits[:, 1]):
        return None
    ends = np.empty(n, dtype=np.int64)
    ends[:-1] = starts[1:]
    ends[-1] = b.size
    return starts, ends


def _read_longs(
    b: _Buf, p: np.ndarray, odd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``schema_version``, ``event_time`` and ``group`` longs at ``p``: (sv, et, grp, new positions)."""
    sv, p, bad = _varint(b, p)
    _flag(odd, _EVERYONE, bad)
    et, p, bad = _varint(b, p)
    _flag(odd, _EVERYONE, bad)
    grp, p, bad = _varint(b, p)
    _flag(odd, _EVERYONE, bad)
    return sv, et, grp, p


def _read_value_seed(b: _Buf, p: np.ndarray, odd: np.ndarray, cols: _Columns) -> np.ndarray:
    """The ``value`` and ``seed`` unions (``["null", "long"]``) into ``cols``; returns the new positions."""
    for f in ("value", "seed"):
        has, p, bad = _union(b, p)
        _flag(odd, _EVERYONE, bad)
        cols.present[f] = has
        if has.any():
            rows = _EVERYONE if has.all() else np.flatnonzero(has)
            v, pv, bad = _varint(b, p[rows])
            _flag(odd, rows, bad)
            cols.payload[f][rows] = v
            p[rows] = pv
    return p


def _read_bits(b: _Buf, p: np.ndarray, odd: np.ndarray, cols: _Columns, cap: int) -> np.ndarray:
    """The ``bits`` union (``["null", "bytes"]``, at most ``cap`` bytes) into ``cols``; returns the new
    positions (clamped to the block)."""
    p, rows = _open_union(b, p, odd, cols, "bits")
    if len(rows):
        rows, ln, pv = _lengths(b, p, rows, odd, cap, of_bytes=True)
        w = int(ln.max()) if len(ln) else 0
        if w:
            cols.widen("bits", w)
            cols.payload["bits"][rows] = b.at(pv, ln, w)
        cols.lengths["bits"][rows] = ln
        p[rows] = pv + ln
    b.clamp(p, odd)
    return p


def _read_items(b: _Buf, p: np.ndarray, odd: np.ndarray, cols: _Columns, cap: int) -> np.ndarray:
    """The ``items`` union (``["null", array<long>]``) into ``cols``; returns the new positions (clamped).

    The columns read one array block of 1..``cap`` entries then the 0 terminator, or just the 0; a row
    with another array block is left to fastavro.
    """
    p, rows = _open_union(b, p, odd, cols, "items")
    if len(rows):
        rows, cnt, q = _lengths(b, p, rows, odd, cap, of_bytes=False)
        w = int(cnt.max()) if len(cnt) else 0
        local = np.zeros((len(rows), w), dtype=np.int64)
        broken = np.zeros(len(rows), dtype=bool)
        for j in range(w):
            act = np.flatnonzero(cnt > j)
            if len(act) == len(rows):
                v, q, bad = _varint(b, q)
                local[:, j] = v
            else:
                v, qa, bad = _varint(b, q[act])
                local[act, j] = v
                q[act] = qa
            if bad is not None:
                broken[act[bad]] = True
            b.clamp(q, broken)
        nonempty = cnt > 0
        broken |= nonempty & (b.u8[q] != 0)  # another array block follows: fastavro reads it
        q = q + nonempty
        _flag(odd, rows, broken)
        if w:
            cols.widen("items", w)
            cols.payload["items"][rows] = local
        cols.lengths["items"][rows] = cnt
        p[rows] = q
    b.clamp(p, odd)
    return p


def _read_reals(b: _Buf, p: np.ndarray, odd: np.ndarray, cols: _Columns, reals_len: int | None) -> np.ndarray:
    """The ``reals`` union (``["null", array<double>]``) into ``cols``; returns the new positions.

    The columns read one array block of one double (``reals_len`` None) or of ``reals_len`` doubles, then
    the 0 terminator; any other row is left to fastavro.
    """
    p, rows = _open_union(b, p, odd, cols, "reals")
    if len(rows):
        q = p[rows]
        if reals_len is None:
            ok = (b.u8[q] == 2) & (b.u8[q + 9] == 0) & (q + 10 <= b.size)
            good = rows[ok]
            cols.payload["reals"][good] = b.u64[q[ok] + 1].view("<f8")
            cols.lengths["reals"][good] = 1
            p[good] = q[ok] + 10
        else:
            ok, pr, out = _decode_reals(b, q, reals_len)
            good = rows[ok]
            cols.payload["reals"][good] = out
            cols.lengths["reals"][good] = reals_len
            p[good] = pr
        _flag(odd, rows, ~ok)
    return p


def _read_client_id(b: _Buf, p: np.ndarray, odd: np.ndarray, cols: _Columns) -> np.ndarray:
    """The ``client_id`` union (``["null", "bytes"]`` of 0..:data:`MAX_CLIENT_ID_BYTES` bytes; the
    validator judges a length of 0) into ``cols`` as ``(n, 1 + w)`` rows (length, bytes); returns the new
    positions."""
    p, rows = _open_union(b, p, odd, cols, "client_id")
    if len(rows):
        rows, ln, pv = _lengths(b, p, rows, odd, MAX_CLIENT_ID_BYTES, of_bytes=True)
        w = int(ln.max()) if len(ln) else 0
        out = np.zeros((len(p), 1 + w), dtype=np.uint8)
        out[rows, 0] = ln
        out[rows, 1:] = b.at(pv, ln, w)
        p[rows] = pv + ln
        cols.payload["client_id"] = out
    return p


def decode_block(
    data: bytes,
    num_records: int,
    task_id: str,
    *,
    bits_len: int | None = None,
    items_len: int | None = None,
    reals_len: int | None = None,
    client_id: bool = False,
    splits: np.ndarray | None = None,
) -> ColumnBatch | None:
    """Decodes one block's records (writer schema = report v2) or returns None (see the module doc).

    Rows are read column-wise; a row the column decoder cannot read (a field longer than the task
    declares, an array written in several blocks, a varint of more than 64 bits, ...) is decoded by
    fastavro from its bytes (which the record-start chain delimits) and counted in
    :attr:`ColumnBatch.n_fallback`. The block is declined (None) when the record starts do not chain or a
    row does not decode.

    Args:
        data: the block's decompressed bytes.
        num_records: the block header's record count.
        task_id: the expected task id (the record-start pattern).
        bits_len: the longest ``bits`` (bytes) any group of the task accepts (None: none does).
        items_len: the longest ``items`` any group accepts (None: none does).
        reals_len: expected length w of ``reals`` where present, decoded as ``(n, w)`` (sparse vectors);
            None: one double per report, decoded as ``(n,)``.
        client_id: the records end with the ``client_id`` union (the current schema; False: the version 2
            layout before it). An id longer than :data:`MAX_CLIENT_ID_BYTES` is read by fastavro.
        splits: for the bytes of consecutive blocks decoded as one, ``(k, 2)`` pairs (record index, byte
            offset) where each later block starts: a record start must be there, or the run is declined.
    """
    tid = task_id.encode("utf-8")
    prefix = zigzag_varint_bytes(len(tid)) + tid
    b = _Buf(data)
    chain = _chained_starts(b, prefix, num_records, splits)
    if chain is None:
        return None
    starts, ends = chain
    caps = {"bits": bits_len or _UNDECLARED_LEN, "items": items_len or _UNDECLARED_LEN}
    odd = np.zeros(num_records, dtype=bool)  # rows left to fastavro
    sv, et, grp, p = _read_longs(b, starts + len(prefix), odd)
    cols = _Columns(num_records, reals_len)
    p = _read_payload(b, p, odd, cols, caps, reals_len, client_id)
    # the chain: each record ends where the next starts, the last at the end of the block
    odd |= p != ends
    fallback = None
    if odd.any():
        rows = np.flatnonzero(odd)
        fallback = _decode_rows(data, starts, ends, rows, task_id, cols, caps, client_id, sv, et, grp)
        if fallback is None:
            return None
    return ColumnBatch(task_id, sv, et, grp, cols.present, cols.payload, client_id, cols.lengths, fallback)


def _read_payload(
    b: _Buf,
    p: np.ndarray,
    odd: np.ndarray,
    cols: _Columns,
    caps: dict[str, int],
    reals_len: int | None,
    client_id: bool,
) -> np.ndarray:
    """The fields after ``group`` (the payload unions, then ``client_id`` when the layout has it) into
    ``cols``; returns the positions where the records end."""
    p = _read_value_seed(b, p, odd, cols)
    p = _read_bits(b, p, odd, cols, caps["bits"])
    p = _read_items(b, p, odd, cols, caps["items"])
    p = _read_reals(b, p, odd, cols, reals_len)
    if client_id:
        p = _read_client_id(b, p, odd, cols)
    return p


def _decode_rows(
    data: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    task_id: str,
    cols: _Columns,
    caps: dict[str, int],
    client_id: bool,
    sv: np.ndarray,
    et: np.ndarray,
    grp: np.ndarray,
) -> np.ndarray | None:
    """Decodes ``rows`` one by one with fastavro, each from exactly its bytes, into the columns and an
    object array of their records (None elsewhere). ``bits`` / ``items`` longer than ``caps`` (what no
    group accepts) keep only their length in the columns; the validator refuses them by it. None when a
    row does not decode to exactly its bytes, or holds integers the columns cannot carry (the block is
    then declined)."""
    recs = _fallback_records(data, starts, ends, rows, task_id, client_id)
    if recs is None:
        return None
    _widen_for(cols, [rec for _, rec in recs], caps, client_id)
    fallback = np.full(len(sv), None, dtype=object)
    for i, rec in recs:
        fallback[i] = rec
        sv[i], et[i], grp[i] = rec["schema_version"], rec["event_time"], rec["group"]
        _put_row(cols, i, rec, caps, client_id)
    return fallback


def _fallback_records(
    data: bytes, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, task_id: str, client_id: bool
) -> list[tuple[int, dict]] | None:
    """``(row, fastavro record)`` of each of ``rows``, decoded from exactly its bytes; None when one does
    not decode to exactly them, carries another task id, or holds an integer outside int64."""
    schema = _fallback_schema(client_id)
    recs = []
    for i in rows.tolist():
        s, e = int(starts[i]), int(ends[i])
        bio = io.BytesIO(data[s:e])
        try:
            rec = fastavro.schemaless_reader(bio, schema, None, handle_unicode_errors="replace")
        except Exception:  # noqa: BLE001 - the record path reports where the block stops decoding
            return None
        if bio.tell() != e - s or rec.get("task_id") != task_id:
            return None
        if not all(_is_i64(rec[f]) for f in ("schema_version", "event_time", "group")):
            return None
        if any(rec[f] is not None and not _is_i64(rec[f]) for f in ("value", "seed")):
            return None
        items = rec.get("items")
        if items is not None and not all(_is_i64(x) for x in items):
            return None
        recs.append((i, rec))
    return recs


def _widen_for(cols: _Columns, recs: list[dict], caps: dict[str, int], client_id: bool) -> None:
    """Widens the ``bits`` / ``items`` columns to the longest of ``recs`` within ``caps``, and the
    ``client_id`` column to their longest id of at most :data:`MAX_CLIENT_ID_BYTES`."""
    for f in caps:
        cols.widen(f, max((len(r[f]) for r in recs if r[f] is not None and len(r[f]) <= caps[f]), default=0))
    if client_id:
        w = max((len(r["client_id"]) for r in recs if r["client_id"] is not None), default=0)
        w = min(w, MAX_CLIENT_ID_BYTES)
        ids = cols.payload["client_id"]
        if w + 1 > ids.shape[1]:
            cols.payload["client_id"] = np.pad(ids, ((0, 0), (0, w + 1 - ids.shape[1])))


def _put_row(cols: _Columns, i: int, rec: dict, caps: dict[str, int], client_id: bool) -> None:
    """Row ``i`` of the payload columns from its fastavro record (see :func:`_decode_rows`)."""
    for f in ("value", "seed"):
        cols.present[f][i] = rec[f] is not None
        cols.payload[f][i] = 0 if rec[f] is None else rec[f]
    for f in ("bits", "items", "reals"):
        v = rec[f]
        cols.present[f][i] = v is not None
        cols.lengths[f][i] = 0 if v is None else len(v)
        if f in caps:
            cols.payload[f][i] = 0
            if v and len(v) <= caps[f]:
                cols.payload[f][i, : len(v)] = np.frombuffer(v, np.uint8) if f == "bits" else v
    v = rec["reals"]
    reals = cols.payload["reals"]
    if reals.ndim == 1:
        reals[i] = v[0] if v is not None and len(v) == 1 else 0.0
    else:
        reals[i] = v if v is not None and len(v) == reals.shape[1] else 0.0
    if client_id:
        v = rec["client_id"]
        ids = cols.payload["client_id"]
        cols.present["client_id"][i] = v is not None
        ids[i] = 0
        if v is not None and len(v) <= MAX_CLIENT_ID_BYTES:
            ids[i, 0] = len(v)
            ids[i, 1 : 1 + len(v)] = np.frombuffer(v, np.uint8)
        # a longer id keeps length 0 and is present: the validator refuses it (invalid_client_id)


def _decode_reals(b: _Buf, p: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``reals`` arrays of exactly ``w`` doubles at ``p`` (one block of w, then the 0 terminator; w = 0:
    just the terminator): (well-formed rows, their new positions, their values ``(ok rows, w)``)."""
    if w == 0:
        ok = b.u8[p] == 0
        return ok, p[ok] + 1, np.zeros((int(ok.sum()), 0), dtype=np.float64)
    cnt, q, bad = _varint(b, p)
    end = np.minimum(q + 8 * w, b.size)  # the terminator's position, inside the block
    ok = (cnt == w) & (q + 8 * w < b.size) & (b.u8[end] == 0)
    if bad is not None:
        ok &= ~bad
    q = q[ok]
    out = np.empty((len(q), w), dtype=np.float64)
    step = max(1, (1 << 22) // (8 * w))  # rows per gather: a bounded index array whatever w is
    at = np.arange(8 * w)
    for lo in range(0, len(q), step):
        raw = b.u8[q[lo : lo + step, None] + at]
        out[lo : lo + step] = np.ascontiguousarray(raw).view("<f8")
    return ok, q + 8 * w + 1, out


# ------------------------------------------------------------------------------------------------------------
# The container reader: every byte is either decoded or accounted as lost (a Loss), never silently dropped
# ------------------------------------------------------------------------------------------------------------

#: Codecs this reader decompresses (``snappy`` needs ``cramjam``, ``zstandard`` the ``zstandard`` package;
#: both are runtime dependencies).
CODECS = ("null", "deflate", "snappy", "zstandard", "bzip2", "xz")

#: Largest block (compressed or decompressed) the reader accepts; a header claiming more is a loss.
MAX_BLOCK_BYTES = 256 << 20

#: Smallest encoding of one report record (1-byte task-id length, version, event time, group, 5 unions).
_MIN_REPORT_BYTES = 9

_MAGIC = b"Obj\x01"
_SYNC = 16
_CHUNK = 1 << 20

#: Loss reasons (dead letters and ``rejected_<reason>`` / ``lost_<reason>`` counts).
LOSS_REASONS = (
    "undecodable",  # not an Avro object container at all (bad magic / header / schema)
    "truncated",  # the input ends inside a block (or its sync marker)
    "bad_sync",  # a block not followed by the sync marker (corrupt framing): skipped to the next marker
    "bad_block_header",  # negative or impossible record count / size in a block header
    "corrupt_block",  # a block whose compressed data does not decompress (or fails its checksum)
    "unsupported_codec",  # a codec this reader does not know
    "undecodable_records",  # records of a block after the first one that does not decode
    "trailing_bytes",  # bytes left in a block after its declared number of records
    "oversized_message",  # a Pub/Sub message larger than the reader accepts (transforms.io)
    "invalid_timestamp_attribute",  # a Pub/Sub message whose time attribute is missing or unparseable
    "changed_after_read",  # a watched file that changed after it was read (transforms.io)
)


@dataclasses.dataclass(frozen=True)
class Loss:
    """Part of an input that cannot be read as records: why, where, and how much.

    Attributes:
        reason: one of :data:`LOSS_REASONS`.
        detail: human-readable detail (never input bytes).
        offset: byte offset in the input where the lost part starts.
        lost_bytes: bytes of the input that were not decoded into records.
        lost_blocks: Avro blocks not decoded (0 for a part of a block).
        lost_records: records the lost blocks' headers declared (0 when no header can be trusted).
    """

    reason: str
    detail: str
    offset: int
    lost_bytes: int
    lost_blocks: int = 0
    lost_records: int = 0


def _block_loss(reason: str, detail: str, offset: int, end: int, records: int = 0) -> Loss:
    """The :class:`Loss` of the one block at ``offset`` .. ``end`` of the input (``records``: the count its
    header declared, 0 when that cannot be trusted)."""
    return Loss(reason, detail, offset, end - offset, 1, records)


class _Stream:
    """A read-only byte stream with position tracking and push-back (for resynchronization)."""

    def __init__(self, fo: BinaryIO) -> None:
        self.fo = fo
        self.pos = 0
        self._back = b""
        self.recorded: bytearray | None = None  # bytes read since record() (for a look-ahead)

    def record(self) -> None:
        self.recorded = bytearray()

    def read(self, n: int) -> bytes:
        out = b""
        if self._back:
            out, self._back = self._back[:n], self._back[n:]
        while len(out) < n:
            chunk = self.fo.read(min(n - len(out), MAX_BLOCK_BYTES))
            if not chunk:
                break
            out += chunk
        self.pos += len(out)
        if self.recorded is not None:
            self.recorded += out
        return out

    def unread(self, data: bytes) -> None:
        self._back = data + self._back
        self.pos -= len(data)

    def read_long(self) -> int | None:
        """A zig-zag varint; None at the end of the input (or inside the varint: the bytes are consumed)."""
        u = shift = 0
        for _ in range(10):
            b = self.read(1)
            if not b:
                return None
            u |= (b[0] & 0x7F) << shift
            shift += 7
            if not b[0] & 0x80:
                u &= (1 << 64) - 1
                return (u >> 1) ^ -(u & 1)
        raise ValueError("varint longer than 10 bytes")

    def skip_to(self, marker: bytes) -> bool:
        """Consumes bytes up to and including the next ``marker``; False if the input ends first."""
        tail = b""
        while True:
            chunk = self.read(_CHUNK)
            if not chunk:
                return False
            hay = tail + chunk
            i = hay.find(marker)
            if i >= 0:
                self.unread(hay[i + len(marker) :])
                return True
            tail = hay[-(len(marker) - 1) :]

    def drain(self) -> int:
        """Consumes the rest of the input; its length."""
        n = 0
        while True:
            chunk = self.read(_CHUNK)
            if not chunk:
                return n
            n += len(chunk)


def _next_block_is_framed(s: _Stream, sync: bytes) -> bool:
    """After a block whose sync marker is wrong: True when the bytes that follow are a whole block ending
    in the right marker (only the marker was damaged: resume there); the stream is left where it was."""
    s.record()
    try:
        count, size = s.read_long(), s.read_long()
        ok = (
            count is not None
            and size is not None
            and count > 0
            and 0 < size <= MAX_BLOCK_BYTES
            and len(s.read(size)) == size
            and s.read(_SYNC) == sync
        )
    except ValueError:
        ok = False
    look = bytes(s.recorded or b"")
    s.recorded = None
    s.unread(look)
    if ok:  # resume at the next block: skip_to must find nothing to skip
        s.unread(sync)
    return ok


def _strip_logical_types(schema: object) -> object:
    """The schema without ``logicalType`` annotations: values decode as their base type (a timestamp beyond
    year 9999 is an integer to refuse, not an ``OverflowError`` that stops the block)."""
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(s) for s in schema]
    return schema


def _event_time_unit(schema: object) -> int:
    """Divisor turning the writer's ``event_time`` field into milliseconds (1000 for timestamp-micros)."""
    if isinstance(schema, dict):
        for f in schema.get("fields", []) or []:
            if isinstance(f, dict) and f.get("name") == "event_time":
                t = f.get("type")
                if isinstance(t, dict) and str(t.get("logicalType", "")).endswith("timestamp-micros"):
                    return 1000
    return 1


def _decompressor(codec: str):
    """``data -> bytes`` for a codec (raises ValueError on corrupt data or more than MAX_BLOCK_BYTES)."""
    if codec == "null":
        return lambda data: data
    if codec == "deflate":

        def inflate(data: bytes) -> bytes:
            d = zlib.decompressobj(-15)
            out = d.decompress(data, MAX_BLOCK_BYTES)
            if d.unconsumed_tail:
                raise ValueError(f"block inflates to more than {MAX_BLOCK_BYTES} bytes")
            return out

        return inflate
    if codec == "snappy":
        import binascii

        import cramjam

        def unsnap(data: bytes) -> bytes:
            if len(data) < 4:
                raise ValueError("snappy block shorter than its CRC")
            if cramjam.snappy.decompress_raw_len(data[:-4]) > MAX_BLOCK_BYTES:
                raise ValueError(f"block decompresses to more than {MAX_BLOCK_BYTES} bytes")
            out = bytes(cramjam.snappy.decompress_raw(data[:-4]))
            if binascii.crc32(out) & 0xFFFFFFFF != int.from_bytes(data[-4:], "big"):
                raise ValueError("snappy block fails its CRC-32 check")
            return out

        return unsnap
    if codec == "zstandard":
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        return lambda data: dctx.decompress(data, max_output_size=MAX_BLOCK_BYTES)
    if codec in ("bzip2", "xz"):
        import bz2
        import lzma

        def unpack(data: bytes) -> bytes:
            d = bz2.BZ2Decompressor() if codec == "bzip2" else lzma.LZMADecompressor()
            out = d.decompress(data, MAX_BLOCK_BYTES)
            if not d.eof:
                raise ValueError("compressed block is incomplete or larger than the limit")
            return out

        return unpack
    return None


class _Header(NamedTuple):
    schema: object  # the writer schema (JSON)
    parsed: object  # fastavro's parse of it without logical types
    codec: str
    sync: bytes
    is_report: bool
    et_unit: int
    client_id: bool = False  # the report layout ends with client_id (the current schema)


def _read_header(s: _Stream) -> _Header:
    if s.read(4) != _MAGIC:
        raise ValueError("not an Avro object container (bad magic)")
    meta: dict[str, bytes] = {}
    while True:
        count = s.read_long()
        if count is None:
            raise ValueError("header ends inside its metadata")
        if count == 0:
            break
        if count < 0:
            count = -count
            s.read_long()
        if count > 1024:
            raise ValueError(f"header declares {count} metadata entries")
        for _ in range(count):
            kl = s.read_long()
            if kl is None or not 0 <= kl <= 1024:
                raise ValueError("bad metadata key")
            key = s.read(kl).decode("utf-8", "replace")
            vl = s.read_long()
            if vl is None or not 0 <= vl <= (16 << 20):
                raise ValueError("bad metadata value")
            val = s.read(vl)
            if len(val) != vl:
                raise ValueError("header ends inside its metadata")
            meta[key] = val
    sync = s.read(_SYNC)
    if len(sync) != _SYNC:
        raise ValueError("header ends before its sync marker")
    if "avro.schema" not in meta:
        raise ValueError("header has no avro.schema")
    import json

    schema = json.loads(meta["avro.schema"].decode("utf-8"))
    parsed = fastavro.parse_schema(_strip_logical_types(schema))
    codec = meta.get("avro.codec", b"null").decode("utf-8", "replace") or "null"
    layout = report_layout(schema)
    return _Header(schema, parsed, codec, sync, layout is not None, _event_time_unit(schema), bool(layout))


def _decode_records(
    data: bytes, count: int, header: _Header, offset: int
) -> tuple[list[object], Loss | None]:
    """Records of one block decoded one by one (the fallback path); a record that does not decode ends the
    block: the records before it are kept and the rest is a :class:`Loss`."""
    import fastavro

    bio = io.BytesIO(data)
    out: list[object] = []
    size = len(data)
    start = 0
    try:
        # every record of a schema with a non-empty encoding takes at least one byte
        while len(out) < count and start < size:
            out.append(fastavro.schemaless_reader(bio, header.parsed, None, handle_unicode_errors="replace"))
            if bio.tell() == start or bio.tell() > size:  # zero-byte records, or read past the block
                out.pop()
                raise ValueError("records of zero bytes" if bio.tell() == start else "block data ends")
            start = bio.tell()
    except Exception as exc:  # noqa: BLE001 - any decoding failure of a record: the rest of the block is lost
        detail = (
            f"record {len(out)} of {count} does not decode ({type(exc).__name__}: {str(exc)[:200]}); "
            "the rest of the block is lost"
        )
        loss = Loss("undecodable_records", detail, offset, size - start, 0, count - len(out))
        return _to_ms(out, header), loss
    if len(out) < count:
        detail = f"block declares {count} records but its {size} bytes hold {len(out)}"
        return _to_ms(out, header), Loss("bad_block_header", detail, offset, 0, 0, count - len(out))
    if start < size:
        detail = f"{size - start} bytes after the block's {count} declared records"
        return _to_ms(out, header), Loss("trailing_bytes", detail, offset, size - start)
    return _to_ms(out, header), None


def _to_ms(records: list[object], header: _Header) -> list[object]:
    if header.et_unit != 1:
        for r in records:
            if type(r) is dict and type(r.get("event_time")) is int:
                r["event_time"] //= header.et_unit
    return records


#: consecutive small blocks are decoded column-wise together, up to this many bytes (fastavro's writer
#: makes blocks of about 16 kB: a hundred reports with a ``bits`` payload)
_COALESCE_BYTES = 1 << 20


class _Block(NamedTuple):
    """A block whose records are to be decoded: its decompressed bytes, count and offset in the input."""

    raw: bytes
    count: int
    offset: int
    header: _Header


def iter_container(
    fo: BinaryIO,
    *,
    task_id: str | None = None,
    bits_len: int | None = None,
    items_len: int | None = None,
    reals_len: int | None = None,
) -> Iterator[ColumnBatch | list[object] | Loss]:
    """Every block of an Avro container as a :class:`ColumnBatch` (fast path), a list of records (fallback)
    or a :class:`Loss`; the input's bytes are all accounted for: header + decoded blocks + lost bytes.
    Consecutive blocks of the fast path may come as one :class:`ColumnBatch` (records never span blocks,
    so their bytes decode as one run; when that run does not decode, each block is decoded alone).

    Raises only what reading ``fo`` raises (``OSError``, ``MemoryError``: the runner retries those).
    """
    kw = {"bits_len": bits_len, "items_len": items_len, "reals_len": reals_len}
    pending: list[_Block] = []
    size = 0

    def flush() -> Iterator[ColumnBatch | list[object] | Loss]:
        if len(pending) > 1:
            counts = np.cumsum([x.count for x in pending])
            offsets = np.cumsum([len(x.raw) for x in pending])
            data = b"".join(x.raw for x in pending)
            h = pending[0].header
            splits = np.stack([counts[:-1], offsets[:-1]], axis=1)
            cb = decode_block(data, int(counts[-1]), task_id, client_id=h.client_id, splits=splits, **kw)
            if cb is not None:
                yield cb
                return
        for x in pending:
            cb = None
            if task_id is not None and x.header.is_report:
                cb = decode_block(x.raw, x.count, task_id, client_id=x.header.client_id, **kw)
            if cb is not None:
                yield cb
                continue
            recs, loss = _decode_records(x.raw, x.count, x.header, x.offset)
            if recs:
                yield recs
            if loss is not None:
                yield loss

    for item in _container_blocks(fo):
        if isinstance(item, _Block) and item.header.is_report and task_id is not None:
            pending.append(item)
            size += len(item.raw)
            if size < _COALESCE_BYTES:
                continue
        elif isinstance(item, _Block):
            pending.append(item)
        yield from flush()
        pending.clear()
        size = 0
        if isinstance(item, Loss):
            yield item
    yield from flush()


def _read_block_header(
    s: _Stream, header: _Header, offset: int
) -> Generator[Loss, None, tuple[int, int] | bool]:
    """Reads the (count, size) header of the block at ``offset``, yielding the :class:`Loss` of a bad one.

    Returns (count, size), or True after a bad header skipped to the next sync marker (read on), or False
    at the end of the input.
    """
    try:
        count = s.read_long()
        if count is None:
            if s.pos > offset:
                yield _block_loss("truncated", "the input ends inside a block header", offset, s.pos)
            return False
        size = s.read_long()
    except ValueError:
        size = -1
        count = 0
    if size is None:
        yield _block_loss("truncated", "the input ends inside a block header", offset, s.pos, max(count, 0))
        return False
    if size < 0 or count < 0 or size > MAX_BLOCK_BYTES or (count > 0 and size == 0):
        found = s.skip_to(header.sync)
        detail = f"block header declares {count} records in {size} bytes; skipped to the next sync marker"
        yield _block_loss("bad_block_header", detail, offset, s.pos)
        return found
    return count, size


def _read_block_body(
    s: _Stream, header: _Header, offset: int, count: int, size: int, min_rec: int
) -> Generator[Loss, None, bytes | bool]:
    """Reads the ``size`` bytes of the block at ``offset`` and its sync marker, yielding the :class:`Loss`
    of a truncated or unsynced block.

    Returns the block's (compressed) bytes, or True after a bad sync marker skipped to the next one (read
    on), or False at the end of the input.
    """
    data = s.read(size)
    if len(data) < size:
        detail = f"the input ends inside a block ({len(data)} of {size} bytes)"
        yield _block_loss("truncated", detail, offset, s.pos, count)
        return False
    sync = s.read(_SYNC)
    if sync != header.sync:
        if len(sync) < _SYNC:
            yield _block_loss("truncated", "the input ends inside a sync marker", offset, s.pos, count)
            return False
        if not _next_block_is_framed(s, header.sync):
            # the size may be wrong too: look for the next marker from the end of this block's header
            s.unread(data + sync)
        found = s.skip_to(header.sync)
        detail = f"block of {count} records not followed by the sync marker; skipped to the next one"
        yield _block_loss("bad_sync", detail, offset, s.pos, count if 0 <= count * min_rec <= size else 0)
        return found
    return data


def _unpack_block(
    data: bytes,
    count: int,
    offset: int,
    end: int,
    header: _Header,
    decompress: Callable[[bytes], bytes] | None,
    min_rec: int,
) -> _Block | Loss | None:
    """The :class:`_Block` of a well-framed block's bytes ``data`` (at ``offset`` .. ``end`` of the input),
    or the :class:`Loss` of one that does not decompress or cannot hold its records, or None for an empty
    block of no bytes."""
    if count == 0:
        if data:
            return Loss("trailing_bytes", f"block of 0 records holds {len(data)} bytes", offset, len(data))
        return None
    if decompress is None:
        detail = f"codec {header.codec!r} is not supported ({', '.join(CODECS)})"
        return _block_loss("unsupported_codec", detail, offset, end, count)
    try:
        raw = decompress(data)
    except Exception as exc:  # noqa: BLE001 - zlib / cramjam / zstandard errors: the block is lost
        if isinstance(exc, MemoryError):
            raise
        detail = f"{header.codec} block does not decompress ({type(exc).__name__}: {str(exc)[:200]})"
        return _block_loss("corrupt_block", detail, offset, end, count)
    if count * min_rec > len(raw):
        detail = f"block declares {count} records in {len(raw)} bytes"
        return _block_loss("bad_block_header", detail, offset, end)
    return _Block(raw, count, offset, header)


def _container_blocks(fo: BinaryIO) -> Iterator[_Block | Loss]:
    """The blocks of an Avro container, decompressed, and the :class:`Loss` of what is not a block."""
    s = _Stream(fo)
    try:
        header = _read_header(s)
    except Exception as exc:  # noqa: BLE001 - bad magic / metadata / schema (fastavro's schema errors vary)
        if isinstance(exc, (OSError, MemoryError)):
            raise
        yield Loss("undecodable", f"{type(exc).__name__}: {str(exc)[:200]}", 0, s.pos + s.drain())
        return
    decompress = _decompressor(header.codec)
    min_rec = _MIN_REPORT_BYTES if header.is_report else 1
    while True:
        offset = s.pos
        head = yield from _read_block_header(s, header, offset)
        if head is False:
            return
        if head is True:
            continue
        count, size = head
        data = yield from _read_block_body(s, header, offset, count, size, min_rec)
        if data is False:
            return
        if data is True:
            continue
        item = _unpack_block(data, count, offset, s.pos, header, decompress, min_rec)
        if item is not None:
            yield item


def iter_report_batches(
    fo: BinaryIO,
    batch_size: int = 1 << 15,
    *,
    task_id: str | None = None,
    bits_len: int | None = None,
    items_len: int | None = None,
    reals_len: int | None = None,
    losses: list[Loss] | None = None,
) -> Iterator[ColumnBatch | list[object]]:
    """Yields the reports of an Avro container as :class:`ColumnBatch` (fast path) or lists of record dicts.

    Blocks are decoded column-wise when the writer schema is the report schema and ``task_id`` is given
    and the block passes :func:`decode_block`'s checks; other blocks are decoded record by record with
    ``fastavro`` (logical types off: ``event_time`` is an integer). Consecutive batches of one kind are
    merged up to about ``batch_size`` rows.

    Parts that cannot be read as records (see :data:`LOSS_REASONS`) are appended to ``losses`` as
    :class:`Loss` items; without a ``losses`` list the first one raises ``ValueError`` (after the batches
    before it). Reading errors of ``fo`` itself (``OSError``) propagate.
    """
    cols: list[ColumnBatch] = []
    recs: list[object] = []
    n_cols = 0
    for item in iter_container(
        fo, task_id=task_id, bits_len=bits_len, items_len=items_len, reals_len=reals_len
    ):
        if isinstance(item, Loss):
            if losses is None:
                if cols:
                    yield ColumnBatch.concat(cols)
                if recs:
                    yield recs
                raise ValueError(f"{item.reason} at byte {item.offset}: {item.detail}")
            losses.append(item)
        elif isinstance(item, ColumnBatch):
            if recs:
                yield recs
                recs = []
            cols.append(item)
            n_cols += len(item)
            if n_cols >= batch_size:
                yield ColumnBatch.concat(cols)
                cols, n_cols = [], 0
        else:
            if cols:
                yield ColumnBatch.concat(cols)
                cols, n_cols = [], 0
            recs.extend(item)
            if len(recs) >= batch_size:
                yield recs
                recs = []
    if cols:
        yield ColumnBatch.concat(cols)
    if recs:
        yield recs
