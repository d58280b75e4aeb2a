"""Fuzz harness of report files: hypothesis mutates valid containers (truncate, flip
bits, splice two files, change block counts, grow fields, mix writer schemas) and the reader must never
crash, and account for everything:

* every record that decodes is accepted or rejected (``read = accepted + rejected``);
* records accepted + rejected + declared by lost blocks equal the records written, or else a named loss
  with lost bytes says where the difference went (a damaged block header can hide how many records it
  held, never that something was lost);
* no dead letter holds a byte of a field that is not a report field (the writer's extra client fields
  carry a marker that must never appear in the dead-letter output).

Bounded examples, derandomized (the same cases on every run); both decode paths on every example.
"""

from __future__ import annotations

import io
import json

import fastavro
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import schemas  # noqa: E402
from ldp.task import parse_task  # noqa: E402
from wire.decode import LOSS_REASONS, Loss, iter_report_batches, zigzag_varint_bytes  # noqa: E402
from wire.records import reports_to_records  # noqa: E402
from wire.validate import ReportValidator, fast_decode_params  # noqa: E402

TASK = parse_task({"task_id": "fuzz", "mechanism": "olh", "epsilon": 1.0, "domain_size": 32})
MARKER = "ZZ-SECRET-CLIENT-FIELD-ZZ"
N = 600


def _schema_with_client_field():
    s = json.loads(json.dumps(schemas.report_schema()))
    s["name"] = "ClientReport"
    s["fields"] = [*s["fields"], {"name": "raw_value", "type": "string"}]
    return s


def _base_records() -> list[dict[str, object]]:
    rng = np.random.default_rng(np.random.SeedSequence(20261203))
    reps = TASK.make_oracle().encode(rng.integers(0, 32, N), rng=rng)
    return reports_to_records(TASK.task_id, reps, rng.integers(10**12, 2 * 10**12, N))


BASE = _base_records()


def _write(records, *, foreign: bool, codec: str, sync_interval: int) -> bytes:
    schema = _schema_with_client_field() if foreign else schemas.report_schema()
    if foreign:
        records = [dict(r, raw_value=f"{MARKER}-{i}") for i, r in enumerate(records)]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records, codec=codec, sync_interval=sync_interval)
    return buf.getvalue()


def _declared(data: bytes) -> int:
    """Records the clean container declares."""
    return sum(b.num_records for b in fastavro.block_reader(io.BytesIO(data)))


def _declared_if_valid(data: bytes) -> int | None:
    """Records a container declares when fastavro reads it as a valid file, else None."""
    try:
        return _declared(data)
    except Exception:  # noqa: BLE001 - any decoding error means "not a valid container"
        return None


def _read(data: bytes, fast: bool):
    v = ReportValidator(TASK)
    params = {"task_id": TASK.task_id, **fast_decode_params(v.oracle)} if fast else {}
    losses: list[Loss] = []
    accepted = rejected = 0
    dead = []
    for batch in iter_report_batches(io.BytesIO(data), 1 << 12, losses=losses, **params):
        vb = v.validate(batch, "fuzz", at_ms=0)
        assert vb.n_read == vb.n_accepted + len(vb.dead_letters) == len(batch)
        accepted += vb.n_accepted
        rejected += len(vb.dead_letters)
        dead += vb.dead_letters
    return accepted, rejected, losses, dead


@st.composite
def mutated_files(draw):
    """(bytes, records written, True: untouched / "truncated": cut somewhere / False: damaged)."""
    n = draw(st.integers(1, N))
    recs = [dict(r) for r in BASE[:n]]
    grow = draw(st.booleans())
    if grow:  # grow fields: a long task id, an oversized payload, a poison event time
        for i in draw(st.lists(st.integers(0, n - 1), max_size=4)):
            kind = draw(st.sampled_from(["task_id", "value", "event_time"]))
            if kind == "task_id":
                recs[i]["task_id"] = "t" * draw(st.integers(100, 20_000))
            elif kind == "value":
                recs[i]["value"] = (1 << 62) + i
            else:
                recs[i]["event_time"] = 253402300800000 + draw(st.integers(0, 10**9))
    foreign = draw(st.booleans())
    codec = draw(st.sampled_from(["null", "deflate", "snappy"]))
    interval = draw(st.sampled_from([500, 4000, 1 << 20]))
    data = _write(recs, foreign=foreign, codec=codec, sync_interval=interval)
    written = n
    intact: bool | str = True
    op = draw(st.sampled_from(["none", "truncate", "flip", "splice", "count", "mix"]))
    if op == "truncate":
        cut = draw(st.integers(0, len(data)))
        # what the reader can know of a cut file: the blocks that start before the cut, except one cut
        # inside its record count (a partial varint)
        written = sum(
            b.num_records
            for b in fastavro.block_reader(io.BytesIO(data))
            if b.offset + len(zigzag_varint_bytes(b.num_records)) <= cut
        )
        data = data[:cut]
        intact = "truncated"
    elif op == "flip":
        b = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] ^= 1 << draw(st.integers(0, 7))
        data = bytes(b)
        intact = False
    elif op == "splice":  # the tail of another file glued after a cut
        other = _write(BASE[:200], foreign=not foreign, codec="null", sync_interval=1000)
        data = data[: draw(st.integers(0, len(data)))] + other[draw(st.integers(0, len(other))) :]
        intact = False
    elif op == "count":  # rewrite one block's record count
        blocks = list(fastavro.block_reader(io.BytesIO(data)))
        blk = draw(st.sampled_from(blocks))
        old = zigzag_varint_bytes(blk.num_records)
        new = zigzag_varint_bytes(draw(st.integers(-5, blk.num_records * 3 + 5)))
        data = data[: blk.offset] + new + data[blk.offset + len(old) :]
        intact = False
    elif op == "mix":  # a second container (other schema) appended whole: its header is not a block
        data = data + _write(BASE[:50], foreign=not foreign, codec="null", sync_interval=1 << 20)
        intact = False
    return data, written, intact


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_files())
def test_mutated_report_files_are_accounted(case):
    data, written, intact = case
    for fast in (True, False):
        accepted, rejected, losses, dead = _read(data, fast)
        assert all(x.reason in LOSS_REASONS and x.lost_bytes >= 0 and x.lost_records >= 0 for x in losses)
        lost_records = sum(x.lost_records for x in losses)
        got = (accepted, rejected, lost_records, written, losses)
        if intact is True:
            assert losses == [] and accepted + rejected == written, got
        elif intact == "truncated" and not any(x.reason == "undecodable" for x in losses):
            # a cut file (header intact): every record is read or declared by the one truncated block
            assert accepted + rejected + lost_records == written, got
            assert [x.reason for x in losses] in ([], ["truncated"]), got
        elif accepted + rejected + lost_records != written:
            # a damaged header can hide a count, never a loss: a named loss says where it went, unless
            # the damage left another valid container (a splice that kept a whole file), read whole
            assert losses or accepted + rejected == _declared_if_valid(data), got
        blob = io.BytesIO()
        fastavro.writer(blob, schemas.parsed_schema("dead_letter"), dead)
        text = blob.getvalue()
        assert MARKER.encode() not in text and b"raw_value" not in text
        assert all(d["raw_bytes"] is None for d in dead)
        assert all(len(d["raw_record"] or "") <= 8192 for d in dead)


def test_truncation_at_every_block_boundary_is_exact():
    """A file cut exactly at a block boundary is a valid shorter file: its records are all read (a
    watcher must not read a file before it is complete: see the watched-directory contract)."""
    data = _write(BASE, foreign=False, codec="null", sync_interval=2000)
    blocks = list(fastavro.block_reader(io.BytesIO(data)))
    ends = [b.offset for b in blocks[1:]] + [len(data)]
    total = 0
    for b, end in zip(blocks, ends):
        total += b.num_records
        for fast in (True, False):
            accepted, rejected, losses, _ = _read(data[:end], fast)
            assert (accepted + rejected, losses) == (total, [])
            accepted, rejected, losses, _ = _read(data[: end - 1], fast)
            assert [x.reason for x in losses] == ["truncated"]
            assert accepted + rejected + losses[0].lost_records == total
