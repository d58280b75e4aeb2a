"""The column-wise report decoder (:mod:`wire.decode`) against fastavro, row by row.

Every block here is decoded both ways: ``decode_block`` (columns, with the rows it cannot read decoded by
fastavro one by one) and ``fastavro.schemaless_reader`` record by record; every row must come back equal,
and the rows left to fastavro are exactly the ones the column decoder cannot carry.
"""

from __future__ import annotations

import io

import fastavro
import numpy as np
import pytest

import schemas
from ldp.task import parse_task
from wire.decode import ColumnBatch, _fallback_schema, decode_block, iter_report_batches, zigzag_varint_bytes
from wire.records import reports_to_records
from wire.validate import ReportValidator

TID = "avro-fast"
SCHEMA = fastavro.parse_schema(schemas.report_schema())


def _rec(i: int, **payload: object) -> dict[str, object]:
    base = {"task_id": TID, "schema_version": 2, "event_time": 10**12 + i, "group": i % 3}
    base.update({f: None for f in ("value", "seed", "bits", "items", "reals", "client_id")})
    base.update(payload)
    return base


def _encode(rec: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, SCHEMA, rec)
    return buf.getvalue()


def _reference(data: bytes, n: int) -> list[dict[str, object]]:
    bio = io.BytesIO(data)
    return [fastavro.schemaless_reader(bio, _fallback_schema(True), None) for _ in range(n)]


def _check(pieces: list[bytes], **kw: object) -> ColumnBatch:
    data = b"".join(pieces)
    cb = decode_block(data, len(pieces), TID, client_id=True, **kw)
    assert cb is not None
    assert [cb.record(i) for i in range(len(cb))] == _reference(data, len(pieces))
    return cb


def test_ragged_items_and_bits_stay_column_wise():
    rng = np.random.default_rng(1)
    recs = []
    for i in range(300):
        k = int(rng.choice([4, 8, 2]))
        recs.append(_rec(i, items=sorted(rng.integers(0, 1 << 40, k).tolist())))
        nb = int(rng.choice([16, 128, 3]))
        recs.append(_rec(i, bits=rng.integers(0, 256, nb, dtype=np.uint8).tobytes()))
        recs.append(_rec(i, items=[]))
    cb = _check([_encode(r) for r in recs], items_len=8, bits_len=128)
    assert cb.n_fallback == 0
    assert cb.payload["items"].shape == (900, 8) and cb.payload["bits"].shape == (900, 128)


@pytest.mark.parametrize(
    "value",
    [0, -1, 1, 63, 64, -65, 2**55, 2**56 - 1, 2**56, 2**62, -(2**62), 2**63 - 1, -(2**63)],
)
def test_varints_of_every_length(value):
    pieces = [_encode(_rec(i, value=value, seed=-value - 1, items=[value, 0])) for i in range(5)]
    cb = _check(pieces, items_len=2)
    assert cb.n_fallback == 0
    assert cb.payload["value"].tolist() == [value] * 5


def _raw_record(payload_bytes: bytes, *, i: int = 0) -> bytes:
    """A record whose fields after ``group`` are the given bytes (value ... client_id)."""
    tid = TID.encode()
    return (
        zigzag_varint_bytes(len(tid))
        + tid
        + zigzag_varint_bytes(2)
        + zigzag_varint_bytes(10**12 + i)
        + zigzag_varint_bytes(0)
        + payload_bytes
    )


NULL5 = b"\x00" * 5  # bits, items, reals, client_id: null (after value and seed)


def test_rows_the_columns_cannot_read_go_to_fastavro_and_are_counted():
    good = [_encode(_rec(i, value=i, seed=i)) for i in range(40)]
    z = zigzag_varint_bytes
    odd = [
        # items in two array blocks (4 then 2): fastavro reads 6 items
        _raw_record(
            b"\x00\x00\x00\x02" + z(4) + b"".join(z(x) for x in (1, 2, 3, 4)) + z(2) + z(5) + z(6) + NULL5[:3]
        ),
        # items as one block with a negative count and its byte size
        _raw_record(b"\x00\x00\x00\x02" + z(-2) + z(2) + z(7) + z(8) + b"\x00\x00\x00"),
        # items longer than any group takes
        _encode(_rec(1, items=list(range(50)))),
        # bits longer than any group takes, and a client id above 64 bytes
        _encode(_rec(2, bits=bytes(300))),
        _encode(_rec(3, client_id=bytes(range(65)))),
        # reals with two doubles where one is expected
        _encode(_rec(4, reals=[1.5, 2.5])),
    ]
    pieces = good[:20] + odd + good[20:]
    cb = _check(pieces, items_len=8, bits_len=16)
    assert cb.n_fallback == len(odd)
    rows = np.flatnonzero(np.not_equal(cb.fallback, None))
    assert rows.tolist() == list(range(20, 20 + len(odd)))
    assert cb.lengths["items"][20:23].tolist() == [6, 2, 50]
    assert cb.payload["items"][20, :6].tolist() == [1, 2, 3, 4, 5, 6]


def test_a_varint_beyond_64_bits_is_left_to_fastavro():
    big = b"\xff" * 9 + b"\x7f"  # 10 bytes, the last above 1: more than 64 bits
    data = _raw_record(b"\x02" + big + b"\x00" + NULL5[:4])
    cb = decode_block(data + data, 2, TID, client_id=True)
    ref = _reference(data + data, 2)
    if cb is None:  # fastavro's value does not fit int64: the block is declined
        assert not -(2**63) <= ref[0]["value"] < 2**63
    else:
        assert [cb.record(i) for i in range(2)] == ref and cb.n_fallback == 2


def test_broken_chain_is_declined():
    pieces = [_encode(_rec(i, value=i)) for i in range(10)]
    data = b"".join(pieces)
    assert decode_block(data, 10, TID, client_id=True) is not None
    assert decode_block(data[:-1], 10, TID, client_id=True) is None
    assert decode_block(data, 11, TID, client_id=True) is None
    cut = pieces[3][:-2]  # a record that ends early: fastavro cannot read it from its bytes
    assert decode_block(b"".join(pieces[:3] + [cut] + pieces[4:]), 10, TID, client_id=True) is None


def test_validator_refuses_ragged_rows_like_the_record_path():
    task = parse_task({"task_id": TID, "mechanism": "ss", "epsilon": 1.0, "domain_size": 64})
    oracle = task.make_oracle()
    k = int(oracle.k)
    rng = np.random.default_rng(3)
    reps = oracle.encode(rng.integers(0, 64, 200), rng=rng)
    recs = reports_to_records(TID, reps, np.full(200, 10**12))
    recs[5]["items"] = recs[5]["items"][:-1]  # shorter than k: read column-wise, refused by length
    recs[9]["items"] = list(range(k + 3))  # longer than any group takes: fastavro row
    recs[11]["bits"] = b"\x01"  # a field SS does not use
    buf = io.BytesIO()
    fastavro.writer(buf, SCHEMA, recs, sync_interval=1 << 20)
    data = buf.getvalue()
    fast = list(iter_report_batches(io.BytesIO(data), 1 << 20, task_id=TID, items_len=k))
    slow = list(iter_report_batches(io.BytesIO(data), 1 << 20))
    assert all(isinstance(b, ColumnBatch) for b in fast) and sum(b.n_fallback for b in fast) == 2
    v = ReportValidator(task)
    a = [v.validate(b, "s", at_ms=0) for b in fast]
    b = [v.validate(x, "s", at_ms=0) for x in slow]
    assert [d for x in a for d in x.dead_letters] == [d for x in b for d in x.dead_letters]
    assert sum(x.n_accepted for x in a) == sum(x.n_accepted for x in b) == 197
    np.testing.assert_array_equal(
        np.concatenate([x.reports.items for x in a]), np.concatenate([x.reports.items for x in b])
    )


def test_small_blocks_are_decoded_together_and_exactly():
    recs = [_rec(i, value=i, seed=-i, items=[i, i + 1]) for i in range(2000)]
    buf = io.BytesIO()
    fastavro.writer(buf, SCHEMA, recs, sync_interval=500)  # many small blocks
    data = buf.getvalue()
    assert len(list(fastavro.block_reader(io.BytesIO(data)))) > 20
    fast = list(iter_report_batches(io.BytesIO(data), 1 << 20, task_id=TID, items_len=2))
    assert len(fast) == 1 and isinstance(fast[0], ColumnBatch) and fast[0].n_fallback == 0
    ref = list(fastavro.reader(io.BytesIO(data)))
    for r in ref:
        r["event_time"] = int(r["event_time"].timestamp() * 1000 + 0.5)
    assert [fast[0].record(i) for i in range(len(ref))] == ref
