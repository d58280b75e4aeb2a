"""Hostile input at the decoder: per-record isolation, accounted loss, codecs,
interoperability with the official ``avro`` library, and the privacy contract of the dead letters.

Every test reads the same bytes on both decode paths: the column-wise numpy decoder (``task_id`` given:
report blocks of the task) and the ``fastavro`` fallback (no task: every block record by record), and
checks the accounting exactly: records accepted + records rejected + records declared by lost blocks =
records written, with every loss named and its bytes counted.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os

import apache_beam as beam
import fastavro
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import schemas
from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import parse_task
from transforms.io import ReadReportFiles, loss_counts
from wire.decode import LOSS_REASONS, Loss, iter_report_batches
from wire.encode import write_reports
from wire.records import DEAD_LETTER_LIMITS, REASONS, REPORT_FIELDS, make_dead_letter, reports_to_records
from wire.validate import ReportValidator, fast_decode_params

SEEDS = np.random.SeedSequence(20261201)
#: 1 ms after 9999-12-31T23:59:59.999Z: fastavro's timestamp-millis conversion overflows on it
POISON_MS = 253402300800000 + 1
EVENT_MS = 1_700_000_000_000


def _rng(i: int) -> np.random.Generator:
    return np.random.default_rng(SEEDS.spawn(i + 1)[i])


def _task(mech: str = "olh", d: int = 16):
    return parse_task({"task_id": f"t-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": d})


def _records(task, n: int, seed: int) -> list[dict[str, object]]:
    rng = _rng(seed)
    reps = task.make_oracle().encode(rng.integers(0, task.domain_size, n), rng=rng)
    return reports_to_records(task.task_id, reps, np.full(n, EVENT_MS))


def _container(records, schema=None, **kw) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema or schemas.report_schema()), records, **kw)
    return buf.getvalue()


def read_both(task, data: bytes) -> dict[str, dict[str, object]]:
    """Both decode paths over ``data``: accepted count, rejected reasons, losses, dead letters."""
    v = ReportValidator(task)
    out = {}
    fast = {"task_id": task.task_id, **fast_decode_params(v.oracle)}
    for path, params in (("numpy", fast), ("fastavro", {})):
        losses: list[Loss] = []
        acc, rejected, dead = 0, {}, []
        for batch in iter_report_batches(io.BytesIO(data), 1 << 20, losses=losses, **params):
            vb = v.validate(batch, "src", at_ms=0)
            acc += vb.n_accepted
            for k, c in vb.reason_counts.items():
                rejected[k] = rejected.get(k, 0) + c
            dead += vb.dead_letters
        out[path] = {"accepted": acc, "rejected": rejected, "losses": losses, "dead": dead}
    return out


def _lost_records(res) -> int:
    return sum(x.lost_records for x in res["losses"])


# ------------------------------------------------------------------------------------------------
# 1. per-record isolation
# ------------------------------------------------------------------------------------------------
def test_poison_event_time_next_to_another_tasks_record_costs_two_records():
    """3,002 records in one block: a report with event_time beyond year 9999 and one of another task
    cost exactly those two records on both paths (the issue's run gave 1,500 accepted)."""
    task = _task()
    recs = _records(task, 3000, 1)
    poison = dict(recs[0], event_time=POISON_MS)
    other = dict(recs[1], task_id="another-task")
    recs = recs[:1500] + [poison, other] + recs[1500:]
    data = _container(recs, sync_interval=1 << 24)
    assert len(list(fastavro.block_reader(io.BytesIO(data)))) == 1
    for path, res in read_both(task, data).items():
        assert res["accepted"] == 3000, path
        assert res["rejected"] == {"invalid_event_time": 1, "wrong_task": 1}, path
        assert res["losses"] == [], path


def test_event_time_2200_is_refused_on_both_paths():
    """The documented range is [1970, 2200): 2200-01-01T00:00:00Z itself is refused."""
    task = _task()
    recs = _records(task, 4, 2)
    recs[0]["event_time"] = 7258118400000
    recs[1]["event_time"] = 7258118400000 - 1
    for path, res in read_both(task, _container(recs)).items():
        assert res["accepted"] == 3 and res["rejected"] == {"invalid_event_time": 1}, path


# ------------------------------------------------------------------------------------------------
# 1. accounted loss: truncation, sync markers, block headers, corrupt compressed data
# ------------------------------------------------------------------------------------------------
def _blocks(data: bytes):
    return list(fastavro.block_reader(io.BytesIO(data)))


def _layout(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, record count, end offset incl. the sync marker) of every block of a clean container."""
    out = []
    bs = _blocks(data)
    for i, b in enumerate(bs):
        end = bs[i + 1].offset if i + 1 < len(bs) else len(data)
        out.append((b.offset, b.num_records, end))
    return out


@pytest.fixture(scope="module")
def clean():
    task = _task()
    recs = _records(task, 5000, 3)
    data = _container(recs, sync_interval=8000)
    lay = _layout(data)
    assert len(lay) >= 5
    return task, data, lay


def test_cut_inside_a_block_is_counted(clean):
    task, data, lay = clean
    off, cnt, end = lay[2]
    cut = off + (end - off) // 2
    for path, res in read_both(task, data[:cut]).items():
        assert res["accepted"] == lay[0][1] + lay[1][1], path
        assert [(x.reason, x.offset, x.lost_bytes, x.lost_blocks, x.lost_records) for x in res["losses"]] == [
            ("truncated", off, cut - off, 1, cnt)
        ], path


def test_cut_inside_a_sync_marker_is_counted(clean):
    task, data, lay = clean
    off, cnt, end = lay[1]
    for path, res in read_both(task, data[: end - 5]).items():
        assert res["accepted"] == lay[0][1], path
        assert [(x.reason, x.lost_records) for x in res["losses"]] == [("truncated", cnt)], path


def test_bad_sync_marker_loses_one_block_and_resynchronizes(clean):
    task, data, lay = clean
    off, cnt, end = lay[1]
    bad = bytearray(data)
    bad[end - 3] ^= 0xFF  # the sync marker after block 1
    for path, res in read_both(task, bytes(bad)).items():
        assert res["accepted"] == 5000 - cnt, path
        (loss,) = res["losses"]
        got = (loss.reason, loss.offset, loss.lost_bytes, loss.lost_records)
        assert got == ("bad_sync", off, end - off, cnt), path


def test_crafted_block_counts_are_accounted(clean):
    """A block header declaring more records than the block holds, or fewer: the records that decode
    are read, the difference is a named loss (declared records or trailing bytes), never silent."""
    task, data, lay = clean
    off, cnt, _ = lay[0]
    blk = _blocks(data)[0]
    count_len = len(fastavro_varint(cnt))
    cases = ((cnt + 7, "bad_block_header"), (cnt - 7, "trailing_bytes"), (-3, "bad_block_header"))
    for fake, reason in cases:
        mutated = data[:off] + fastavro_varint(fake) + data[off + count_len :]
        for path, res in read_both(task, mutated).items():
            reasons = [x.reason for x in res["losses"]]
            assert reasons == [reason], (fake, path, reasons)
            got = res["accepted"] + sum(res["rejected"].values())
            if fake > cnt:
                assert got == 5000 and _lost_records(res) == 7, path
            elif fake > 0:
                assert got == 5000 - 7 and res["losses"][0].lost_bytes > 0, path
            else:  # an impossible header: the block is skipped to the next sync marker
                # (the fake count's varint is one byte shorter than the real one)
                assert got == 5000 - cnt and res["losses"][0].lost_bytes >= blk.size - 1, path


def fastavro_varint(x: int) -> bytes:
    from wire.decode import zigzag_varint_bytes

    return zigzag_varint_bytes(x)


def test_corrupt_deflate_block_is_counted():
    task = _task()
    recs = _records(task, 3000, 4)
    data = _container(recs, codec="deflate", sync_interval=8000)
    lay = _layout(data)
    off, cnt, end = lay[1]
    bad = bytearray(data)
    for i in range(off + 6, off + 40):
        bad[i] ^= 0x5A
    for path, res in read_both(task, bytes(bad)).items():
        kept = res["accepted"] + sum(res["rejected"].values())
        assert kept + _lost_records(res) >= 3000 - cnt, path
        assert {x.reason for x in res["losses"]} <= {"corrupt_block", "undecodable_records", "trailing_bytes"}
        assert res["losses"] and sum(x.lost_bytes for x in res["losses"]) > 0, path


def test_not_an_avro_file_is_one_counted_loss():
    task = _task()
    for path, res in read_both(task, b"user,value\n1,42\n").items():
        assert res["accepted"] == 0 and res["rejected"] == {}
        assert [(x.reason, x.lost_bytes) for x in res["losses"]] == [("undecodable", 16)], path


def test_loss_counts_and_reasons():
    c = loss_counts(Loss("truncated", "cut", 10, 99, 1, 7))
    assert c == {
        "read": 1, "accepted": 0, "rejected": 1, "rejected_truncated": 1,
        "lost_bytes": 99, "lost_blocks": 1, "lost_records": 7,
    }
    assert set(LOSS_REASONS) <= set(REASONS)


# ------------------------------------------------------------------------------------------------
# 4. codecs and interoperability
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["null", "deflate", "snappy", "zstandard"])
def test_codecs_read_exactly_on_both_paths(codec):
    """A Java/Spark-style container (large blocks, snappy: Spark's default) and every supported codec
    (zstandard written by the ``avro`` library: fastavro writes it only with ``backports.zstd``)."""
    task = _task("oue", d=40)
    recs = _records(task, 4000, 5)
    if codec == "zstandard":
        data = _avro_container(recs, codec, sync_interval=1 << 22)
    else:
        data = _container(recs, codec=codec, sync_interval=1 << 22)
    for path, res in read_both(task, data).items():
        assert (res["accepted"], res["rejected"], res["losses"]) == (4000, {}, []), (codec, path)


def test_snappy_block_with_a_bad_crc_is_a_corrupt_block():
    task = _task()
    data = bytearray(_container(_records(task, 500, 6), codec="snappy"))
    (blk,) = _blocks(bytes(data))
    data[-17] ^= 0x01  # last CRC byte, just before the sync marker
    for path, res in read_both(task, bytes(data)).items():
        assert [(x.reason, x.lost_records) for x in res["losses"]] == [("corrupt_block", 500)], path


def _avro_schema(name: str):
    import avro.schema

    with open(os.path.join(os.path.dirname(schemas.__file__), f"{name}.avsc"), encoding="utf-8") as fh:
        return avro.schema.parse(fh.read())


def _avro_container(recs, codec: str, sync_interval: int | None = None) -> bytes:
    """Records written by the official ``avro`` library (its timestamp-millis takes datetimes)."""
    import datetime as dt

    import avro.datafile
    import avro.io

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    buf = io.BytesIO()
    default = avro.datafile.SYNC_INTERVAL
    avro.datafile.SYNC_INTERVAL = sync_interval or default  # larger blocks: a Java/Spark-style writer
    try:
        w = avro.datafile.DataFileWriter(buf, avro.io.DatumWriter(), _avro_schema("report"), codec=codec)
        for r in recs:
            w.append(dict(r, event_time=epoch + dt.timedelta(milliseconds=r["event_time"])))
        w.flush()
    finally:
        avro.datafile.SYNC_INTERVAL = default
    return buf.getvalue()


def test_avsc_files_parse_with_the_official_avro_library():
    import avro.schema

    paths = sorted(glob.glob(os.path.join(os.path.dirname(schemas.__file__), "*.avsc")))
    assert len(paths) >= 5
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            parsed = avro.schema.parse(fh.read())
        assert isinstance(parsed, avro.schema.RecordSchema), p


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_files_written_by_the_avro_library_are_read_exactly(codec):

    task = _task("olh", d=64)
    recs = _records(task, 2000, 7)
    data = _avro_container(recs, codec)
    ref = ReportValidator(task).validate(recs, "ref", at_ms=0)
    for path, res in read_both(task, data).items():
        assert (res["accepted"], res["rejected"], res["losses"]) == (2000, {}, []), path
    # and the reports themselves are those written
    got = []
    params = fast_decode_params(task.make_oracle())
    for b in iter_report_batches(io.BytesIO(data), 1 << 20, task_id=task.task_id, **params):
        got.append(ReportValidator(task).validate(b, "x", at_ms=0).reports)
    assert np.array_equal(np.concatenate([g.values for g in got]), ref.reports.values)
    assert np.array_equal(np.concatenate([g.seeds for g in got]), ref.reports.seeds)


def test_our_files_are_read_by_the_avro_library():
    import avro.datafile
    import avro.io

    task = _task("olh", d=64)
    rng = _rng(8)
    reps = task.make_oracle().encode(rng.integers(0, 64, 3000), rng=rng)
    ev = rng.integers(0, 2**41, 3000)
    for codec in ("null", "deflate"):
        buf = io.BytesIO()
        writer = fastavro.write.Writer(buf, schemas.parsed_schema("report"), codec=codec)
        write_reports(buf, writer, task.task_id, reps, ev, 0, 2, codec=codec, block_records=1000)
        writer.flush()
        buf.seek(0)
        got = list(avro.datafile.DataFileReader(buf, avro.io.DatumReader()))
        assert [r["value"] for r in got] == reps.values.tolist()
        assert [r["seed"] for r in got] == reps.seeds.view(np.int64).tolist()


# ------------------------------------------------------------------------------------------------
# 2. dead letters: report fields only, never input bytes, size-capped
# ------------------------------------------------------------------------------------------------
SECRET = 987654321987
SECRET_TEXT = "alice@example.org;salary=123456"


def _schema_with_client_fields():
    s = json.loads(json.dumps(schemas.report_schema()))
    s["name"] = "ClientReport"
    s["fields"] = s["fields"] + [
        {"name": "raw_value", "type": "long"},
        {"name": "note", "type": "string"},
    ]
    return s


def test_dead_letters_never_hold_unknown_writer_fields():
    task = _task()
    recs = _records(task, 30, 9)
    recs = [dict(r, raw_value=SECRET, note=SECRET_TEXT) for r in recs]
    recs[3]["task_id"] = "another-task"
    recs[4]["group"] = 9
    data = _container(recs, _schema_with_client_fields())
    for path, res in read_both(task, data).items():
        assert res["accepted"] == 28 and res["rejected"] == {"wrong_task": 1, "invalid_group": 1}, path
        blob = _dead_letter_file(res["dead"])
        assert str(SECRET).encode() not in blob and SECRET_TEXT.encode() not in blob, path
        assert b"raw_value" not in blob and b"note" not in blob, path
        for d in res["dead"]:
            assert set(json.loads(d["raw_record"])) <= set(REPORT_FIELDS), path


def _dead_letter_file(dead) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.parsed_schema("dead_letter"), dead)
    return buf.getvalue()


def test_twenty_oversized_records_give_small_dead_letters():
    """20 records with a 2 MiB task id (and 2 MiB payloads): the dead letters stay under 2 MB in all."""
    task = _task("oue", d=16)
    recs = _records(task, 20, 10)
    big = "x" * (2 << 20)
    for i, r in enumerate(recs):
        r["task_id"] = big if i % 2 else task.task_id
        if not i % 2:
            r["bits"] = b"\xff" * (2 << 20)
    data = _container(recs)
    for path, res in read_both(task, data).items():
        assert res["accepted"] == 0 and sum(res["rejected"].values()) == 20, path
        blob = _dead_letter_file(res["dead"])
        assert len(blob) < 2_000_000, (path, len(blob))
        assert all(len(_dead_letter_file([d])) < 8 * 1024 for d in res["dead"]), path


def test_make_dead_letter_caps_every_field():
    d = make_dead_letter(
        "wrong_task", "s" * 10**6, detail="d" * 10**6,
        record={"task_id": "t" * 10**6, "items": list(range(10**5)), "raw_value": 1},
    )
    assert len(d["source"]) < 2 * DEAD_LETTER_LIMITS["source"]
    assert len(d["detail"]) < 2 * DEAD_LETTER_LIMITS["detail"]
    assert len(d["task_id"]) < 2 * DEAD_LETTER_LIMITS["string"]
    assert len(d["raw_record"]) < 2 * DEAD_LETTER_LIMITS["raw_record"]
    assert d["raw_bytes"] is None and "raw_value" not in d["raw_record"]


def test_files_that_are_not_reports_are_named_sized_hashed_never_copied(tmp_path):
    """A CSV export and the simulator's raw ``truth_records.npy`` matching the glob: one dead letter each
    with the name, size and sha256, and none of their bytes."""
    task = _task()
    csv = b"user_id,raw_value\n1,%d\n2,%d\n" % (SECRET, SECRET + 1)
    buf = io.BytesIO()
    np.save(buf, np.array([SECRET, SECRET + 2], dtype=np.int64))
    npy = buf.getvalue()
    (tmp_path / "export.csv.avro").write_bytes(csv)
    (tmp_path / "truth_records.npy.avro").write_bytes(npy)
    (tmp_path / "good.avro").write_bytes(_container(_records(task, 100, 11)))
    with TestPipeline() as p:
        out = p | ReadReportFiles(str(tmp_path / "*.avro"), aggregator=FrequencyAggregator(task))
        assert_that(
            out.dead_letter
            | beam.Map(lambda d: (os.path.basename(d["source"]), d["reason"], d["raw_bytes"], d["raw_record"],
                                  d["detail"].split(": ")[0])),
            equal_to([
                ("export.csv.avro", "undecodable", None, None,
                 f"input of {len(csv)} bytes, sha256 {hashlib.sha256(csv).hexdigest()}"),
                ("truth_records.npy.avro", "undecodable", None, None,
                 f"input of {len(npy)} bytes, sha256 {hashlib.sha256(npy).hexdigest()}"),
            ]),
        )
        assert_that(
            out.records | beam.Map(lambda e: len(e[1])) | beam.CombineGlobally(sum),
            equal_to([100]),
            label="n",
        )



def test_batch_job_reports_the_loss_of_a_cut_file(tmp_path, capsys):
    """End to end: a file cut inside its third block and a CSV matching the glob; the job's summary and
    counts.json carry the truncated block's declared records and the bytes lost."""
    from pipelines import frequency

    task = _task()
    task.save(tmp_path / "task.json")
    data = _container(_records(task, 3000, 12), sync_interval=20_000)
    lay = _layout(data)
    off, cnt, end = lay[2]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.avro").write_bytes(data[: off + 40])
    (tmp_path / "in" / "b.avro").write_bytes(b"user,raw_value\n1,2\n")
    summary = frequency.run([
        "--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"),
        "--output", str(tmp_path / "out"),
    ])
    c = summary["counts"]
    assert c["accepted"] == lay[0][1] + lay[1][1]
    assert (c["rejected_truncated"], c["rejected_undecodable"], c["lost_records"]) == (1, 1, cnt)
    assert c["lost_bytes"] == 40 + len(b"user,raw_value\n1,2\n") and c["lost_blocks"] == 1
    assert json.loads((tmp_path / "out" / "counts.json").read_text())["counts"] == c
    assert f"lost records={cnt}, blocks=1" in capsys.readouterr().err


def test_poison_record_in_a_pubsub_message_costs_that_record():
    """The same 3,002-record case as one Pub/Sub message body (the issue: the whole message was lost)."""
    from transforms.io import _DecodeMessage

    task = _task()
    recs = _records(task, 3000, 14)
    recs = [*recs[:10], dict(recs[0], event_time=POISON_MS), dict(recs[1], task_id="another"), *recs[10:]]
    fn = _DecodeMessage("sub", FrequencyAggregator(task))
    fn.setup()
    out = list(fn.process(_container(recs)))
    assert all(not hasattr(o, "tag") for o in out)  # no loss: every record decoded
    v = ReportValidator(task)
    vbs = [v.validate(o.records, "sub", at_ms=0) for o in out]
    assert sum(vb.n_accepted for vb in vbs) == 3000
    assert sorted(d["reason"] for vb in vbs for d in vb.dead_letters) == ["invalid_event_time", "wrong_task"]


class _FailingFile(io.BytesIO):
    def read(self, n=-1):
        if self.tell() > 3000:
            raise OSError(5, "Input/output error")
        return super().read(n)


def test_io_errors_propagate_for_the_runner_to_retry():
    """A read error of the file system is not data: it is raised (the runner retries the bundle), after
    the batches before it, never turned into a dead letter."""
    task = _task()
    data = _container(_records(task, 3000, 15), sync_interval=2000)
    losses: list[Loss] = []
    with pytest.raises(OSError, match="Input/output error"):
        for _ in iter_report_batches(_FailingFile(data), 1, losses=losses, task_id=task.task_id):
            pass
    assert losses == []
