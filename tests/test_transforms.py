"""Tests of transforms/: record conversion and validation, the CombineFn, and the Beam composites
(TestPipeline + assert_that, TestStream with windows, late data, early firings and empty panes).

Everything here is exact, not statistical: the pipeline must give the same numbers as the in-memory core
(``oracle.estimate`` over the same reports), so the assertions compare lists of floats for equality.
"""

from __future__ import annotations

import io
import os

import apache_beam as beam
import fastavro
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from ldp.aggregate import GroupAccumulators, WindowInfo, json_record
from ldp.kinds.frequency.aggregate import EstimateRow, FrequencyAggregator
from ldp.reports import Reports
from ldp.task import WindowConfig, parse_task
from simulator import bad_records, bad_records_other_schema
from transforms.aggregate import Aggregate, GroupReports, TaskCombineFn, WindowReports
from transforms.io import DecodeReportMessages
from wire.records import (
    REASONS,
    decode_container,
    encode_report_container,
    reports_to_records,
    split_by_group_and_granule,
    window_granule_ms,
)
from wire.validate import ReportValidator

SEEDS = np.random.SeedSequence(20261130)
MECHS = ("grr", "olh", "blh", "oue", "sue", "hr", "ss")


def _task(mech: str = "olh", d: int = 16, **kw):
    return parse_task({"task_id": f"t-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": d, **kw})


def _rng(i: int) -> np.random.Generator:
    return np.random.default_rng(SEEDS.spawn(i + 1)[i])


def _same_reports(a: Reports, b: Reports) -> bool:
    return a.fields() == b.fields() and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in a.fields())


# ----------------------------------------------------------------------------------------------------
# records: encode -> Avro -> decode -> validate gives back the same reports, for every oracle
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mech", MECHS)
def test_roundtrip_every_mechanism(mech):
    task = _task(mech, d=20)
    oracle = task.make_oracle()
    rng = _rng(0)
    reports = oracle.encode(rng.integers(0, 20, 300), rng=rng)
    recs = reports_to_records(task.task_id, reports, np.arange(300) + 1_700_000_000_000, 0)
    decoded = decode_container(encode_report_container(recs))
    vb = ReportValidator(task).validate(decoded, "mem")
    assert vb.dead_letters == [] and vb.n_accepted == 300 == vb.n_read
    assert _same_reports(vb.reports, reports)
    assert np.array_equal(vb.event_ms, np.arange(300) + 1_700_000_000_000)
    # identical numbers: the estimate from the decoded reports equals the core's
    e1 = oracle.estimate_reports(vb.reports)
    e2 = oracle.estimate_reports(reports)
    assert np.array_equal(e1.frequencies, e2.frequencies)


@pytest.mark.parametrize("mech", ["olh", "oue", "ss", "grr"])
def test_dead_letter_every_kind(mech):
    """Every kind of bad record is refused with the expected reason; accepted + rejected = read."""
    task = _task(mech, d=20, n_groups=2)
    oracle = task.make_oracle()
    rng = _rng(1)
    good = reports_to_records(
        task.task_id, oracle.encode(rng.integers(0, 20, 50), rng=rng), np.full(50, 10**12), 1
    )
    bad = bad_records(task, 2, 10**12, seed=_rng(2))
    schema, other = bad_records_other_schema(task, 2, 10**12)
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [r for rs in other.values() for r in rs])
    other_decoded = list(fastavro.reader(io.BytesIO(buf.getvalue())))
    records = good + [r for rs in bad.values() for r in rs] + other_decoded + ["not a dict"]
    vb = ReportValidator(task).validate(records, "mixed")
    expected = {}
    for src in (bad, other):
        for reason, rs in src.items():
            expected[reason] = expected.get(reason, 0) + len(rs)
    expected["not_a_record"] = 1
    assert vb.reason_counts == expected
    assert vb.n_accepted == 50 and vb.n_accepted + len(vb.dead_letters) == vb.n_read == len(records)
    assert set(vb.reason_counts) <= set(REASONS)
    for dl in vb.dead_letters:
        assert dl["reason"] in REASONS and dl["source"] == "mixed"
        # a datum that is not a record keeps nothing of itself (it may be anything, e.g. a raw value)
        assert (dl["raw_record"] is None) == (dl["reason"] == "not_a_record")
    # every dead letter conforms to the dead-letter schema
    import schemas

    for dl in vb.dead_letters:
        schemas.validate_record("dead_letter", dl)


def test_undecodable_message_is_dead_lettered():
    with TestPipeline() as p:
        out = p | beam.Create([b"\x00garbage", b""]) | DecodeReportMessages("sub")
        assert_that(
            out.dead_letter | beam.Map(lambda d: (d["reason"], d["source"])),
            equal_to([("undecodable", "sub")] * 2),
            label="dead",
        )
        assert_that(out.records, equal_to([]), label="none")


def test_granules_and_split():
    assert window_granule_ms(None) is None
    assert window_granule_ms(60) == 60_000
    assert window_granule_ms(60, 25) == 5_000
    groups = np.array([0, 1, 0, 0, 1])
    ev = np.array([1_000, 1_500, 9_999, 10_000, 12_000])
    parts = split_by_group_and_granule(groups, ev, 10_000)
    got = sorted((g, ts, tuple(rows)) for g, ts, rows in parts)
    assert got == [(0, 9_999, (0, 2)), (0, 10_000, (3,)), (1, 1_500, (1,)), (1, 12_000, (4,))]
    assert [tuple(r) for _, _, r in split_by_group_and_granule(groups[:1], ev[:1], None)] == [(0,)]


# ----------------------------------------------------------------------------------------------------
# CombineFn: shard merges without a pipeline
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mech", MECHS)
def test_combinefn_shard_merge_equals_one_pass(mech):
    task = _task(mech, d=33, n_groups=2)
    agg = FrequencyAggregator(task)
    oracle = agg.oracle
    rng = _rng(3)
    reports = oracle.encode(rng.integers(0, 33, 1000), rng=rng)
    fn = TaskCombineFn(agg)
    cuts = [0, 1, 170, 500, 501, 1000]
    shards = []
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        acc = fn.create_accumulator()
        acc = fn.add_input(acc, GroupReports(i % 2, reports.take(slice(a, b))))
        shards.append(acc)
    merged = fn.merge_accumulators(
        [fn.merge_accumulators(shards[:2]), fn.merge_accumulators(shards[2:]), fn.merge_accumulators([])]
    )
    out = fn.extract_output(merged)
    rows0 = np.concatenate(
        [np.arange(a, b) for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])) if i % 2 == 0]
    )
    rows1 = np.setdiff1d(np.arange(1000), rows0)
    for g, rows in ((0, rows0), (1, rows1)):
        assert out.accs[g] == oracle.add(oracle.create_accumulator(), reports.take(rows))
        assert out.counts[g] == len(rows)
    assert fn.merge_accumulators([]) == GroupAccumulators()
    # the fn pickles without its cached oracle and still works
    import pickle

    fn2 = pickle.loads(pickle.dumps(fn))
    assert fn2.aggregator._mech is None
    one = fn2.add_inputs(fn2.create_accumulator(), [GroupReports(0, reports)])
    assert one.accs[0] == oracle.add(oracle.create_accumulator(), reports) and one.counts == {0: 1000}


# ----------------------------------------------------------------------------------------------------
# Beam composites
# ----------------------------------------------------------------------------------------------------
def _message(task, oracle, rng, n, event_s, group=0):
    reports = oracle.encode(rng.integers(0, oracle.d, n), rng=rng)
    recs = reports_to_records(task.task_id, reports, np.full(n, int(event_s * 1000)), group)
    return encode_report_container(recs), reports


def _expected(task, oracle, batches, method="base", group=0):
    """The in-memory core's row for these reports: oracle.add, then the aggregator's finalize."""
    agg = FrequencyAggregator(task, method)
    acc = oracle.add(oracle.create_accumulator(), Reports.concat(batches))
    (row,) = agg.finalize({group: acc}, WindowInfo())
    return row


def _key(r: EstimateRow):
    return (r.group, r.window_start, r.pane_timing, r.n_reports, tuple(r.frequencies))


def test_pipeline_equals_core_global_window_two_groups():
    task = _task("olh", d=16, n_groups=2)
    oracle = task.make_oracle()
    rng = _rng(4)
    m1, r1 = _message(task, oracle, rng, 400, 100, group=0)
    m2, r2 = _message(task, oracle, rng, 300, 200, group=1)
    m3, r3 = _message(task, oracle, rng, 200, 300, group=0)
    want = [
        _expected(task, oracle, [r1, r3], "norm-sub", group=0),
        _expected(task, oracle, [r2], "norm-sub", group=1),
    ]
    with TestPipeline() as p:
        dec = p | beam.Create([m1, m2, m3]) | DecodeReportMessages("mem")
        out = dec.records | Aggregate(FrequencyAggregator(task, "norm-sub"), WindowConfig())
        want_keys = [(g, ws, "ON_TIME", n, f) for g, ws, _, n, f in map(_key, want)]
        assert_that(out["estimates"] | beam.Map(_key), equal_to(want_keys))
        assert_that(out["dead_letter"], equal_to([]), label="no dead letters")


def _streaming_options():
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    return opts


def test_teststream_fixed_windows_late_data_early_firings_empty_panes():
    """Window [0,10): an early pane (50 reports), an empty on-time pane (no record), a late pane (7);
    window [10,20): an early pane (30); reports later than the allowed lateness are dropped by Beam."""
    task = _task("olh", d=16)
    oracle = task.make_oracle()
    rng = _rng(5)
    a, ra = _message(task, oracle, rng, 50, 1)
    b, rb = _message(task, oracle, rng, 30, 12)
    late, rl = _message(task, oracle, rng, 7, 5)
    too_late, _ = _message(task, oracle, rng, 9, 6)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(a, 1), TimestampedValue(b, 12)])
        .advance_processing_time(6)
        .advance_watermark_to(15)
        .add_elements([TimestampedValue(late, 5)])
        .advance_watermark_to(40)
        .add_elements([TimestampedValue(too_late, 6)])
        .advance_watermark_to_infinity()
    )
    w = WindowConfig(size_s=10, allowed_lateness_s=20, early_firing_s=5, accumulating=False)
    want = [
        (0, 0, "EARLY", 50, tuple(_expected(task, oracle, [ra]).frequencies)),
        (0, 10_000, "EARLY", 30, tuple(_expected(task, oracle, [rb]).frequencies)),
        (0, 0, "LATE", 7, tuple(_expected(task, oracle, [rl]).frequencies)),
    ]
    agg = FrequencyAggregator(task)
    with TestPipeline(options=_streaming_options()) as p:
        dec = p | stream | DecodeReportMessages("stream", agg)
        out = dec.records | Aggregate(agg, w)
        assert_that(out["estimates"] | beam.Map(_key), equal_to(want))


def test_teststream_accumulating_sliding_windows():
    """Sliding windows of 10 s every 5 s, accumulating: the late pane holds on-time + late reports."""
    task = _task("grr", d=8)
    oracle = task.make_oracle()
    rng = _rng(6)
    a, ra = _message(task, oracle, rng, 40, 7)  # windows [0,10) and [5,15)
    late, rl = _message(task, oracle, rng, 5, 8)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(a, 7)])
        .advance_watermark_to(20)
        .add_elements([TimestampedValue(late, 8)])
        .advance_watermark_to_infinity()
    )
    w = WindowConfig(size_s=10, period_s=5, allowed_lateness_s=30, accumulating=True)
    want = []
    for start in (0, 5_000):
        want.append((0, start, "ON_TIME", 40, tuple(_expected(task, oracle, [ra]).frequencies)))
        want.append((0, start, "LATE", 45, tuple(_expected(task, oracle, [ra, rl]).frequencies)))
    with TestPipeline(options=_streaming_options()) as p:
        dec = p | stream | DecodeReportMessages("stream")
        out = dec.records | Aggregate(FrequencyAggregator(task), w)
        assert_that(out["estimates"] | beam.Map(_key), equal_to(want))


def test_record_json_form_is_strict_json():
    task = _task("grr", d=4)
    oracle = task.make_oracle()
    rec = _expected(task, oracle, [oracle.encode(np.array([0, 1, 2, 3]), rng=0)])._asdict()
    rec["std"][0] = float("nan")
    js = json_record(rec)
    assert js["std"][0] is None
    assert js["window_start"] is None and len(js["frequencies"]) == 4 == len(js["std"])
    import json

    json.dumps(js, allow_nan=False)


# ----------------------------------------------------------------------------------------------------
# the column-wise Avro decoder reproduces fastavro exactly, or declines
# ----------------------------------------------------------------------------------------------------
def _container(records, sync_interval=1 << 20):
    buf = io.BytesIO()
    fastavro.writer(buf, schemas_report(), records, sync_interval=sync_interval)
    return buf.getvalue()


def schemas_report():
    import schemas

    return schemas.report_schema()


def _both_paths(task, data):
    from wire.decode import iter_report_batches
    from wire.validate import fast_decode_params

    v = ReportValidator(task)
    fast = list(
        iter_report_batches(
            io.BytesIO(data), 1 << 20, task_id=task.task_id, **fast_decode_params(task.make_oracle())
        )
    )
    slow = list(iter_report_batches(io.BytesIO(data), 1 << 20))
    return [v.validate(b, "s", at_ms=0) for b in fast], [v.validate(b, "s", at_ms=0) for b in slow], fast


@pytest.mark.parametrize("mech", MECHS)
def test_fast_decoder_equals_fastavro(mech):
    task = _task(mech, d=20, n_groups=3)
    oracle = task.make_oracle()
    rng = _rng(7)
    reps = oracle.encode(rng.integers(0, 20, 500), rng=rng)
    recs = reports_to_records(task.task_id, reps, rng.integers(0, 2**41, 500), rng.integers(0, 3, 500))
    # same-task bad records (wrong version, group, domain, missing / unexpected fields) stay on the fast path
    bad = bad_records(task, 3, 10**12, seed=_rng(8))
    bad.pop("wrong_task")
    recs += [r for rs in bad.values() for r in rs]
    fast_vb, slow_vb, fast_batches = _both_paths(task, _container(recs, sync_interval=4000))
    from wire.decode import ColumnBatch

    used = set(oracle.report_fields)
    # every block stays column-wise; only rows with a bits / items payload longer than the mechanism
    # takes (any, when it takes none) are decoded by fastavro, one by one, and counted
    nb = (oracle.d + 7) // 8 if "bits" in used else 0
    k = int(getattr(oracle, "k", 0)) if "items" in used else 0
    too_long = sum(
        (r["bits"] is not None and len(r["bits"]) > nb) or (r["items"] is not None and len(r["items"]) > k)
        for r in recs
    )
    assert all(isinstance(b, ColumnBatch) for b in fast_batches)
    assert sum(b.n_fallback for b in fast_batches) == too_long
    clean_vb, _, clean = _both_paths(task, _container(recs[:500], sync_interval=4000))
    assert len(clean) >= 1 and all(isinstance(b, ColumnBatch) for b in clean)  # good reports: always fast
    assert _same_reports(Reports.concat([x.reports for x in clean_vb]), reps)
    for a, b in ((fast_vb, slow_vb),):
        assert sum(x.n_read for x in a) == sum(x.n_read for x in b) == len(recs)
        ra = Reports.concat([x.reports for x in a])
        rb = Reports.concat([x.reports for x in b])
        assert _same_reports(ra, rb) and _same_reports(ra, reps)
        assert np.array_equal(
            np.concatenate([x.event_ms for x in a]), np.concatenate([x.event_ms for x in b])
        )
        assert np.array_equal(np.concatenate([x.groups for x in a]), np.concatenate([x.groups for x in b]))
        assert [d for x in a for d in x.dead_letters] == [d for x in b for d in x.dead_letters]
    assert sum((x.reason_counts.get(k, 0) for x in fast_vb for k in bad), 0) == sum(map(len, bad.values()))


def test_fast_decoder_declines_foreign_blocks():
    from wire.decode import ColumnBatch, decode_block, zigzag_varint_bytes

    task = _task("olh", d=16)
    oracle = task.make_oracle()
    rng = _rng(9)
    good = reports_to_records(
        task.task_id, oracle.encode(rng.integers(0, 16, 50), rng=rng), np.full(50, 10**12)
    )
    other = [{**good[0], "task_id": "someone-else"}]
    fast_vb, slow_vb, batches = _both_paths(task, _container(good[:25] + other + good[25:]))
    assert not any(isinstance(b, ColumnBatch) for b in batches)  # declined: fastavro decoded the block
    assert [x.reason_counts for x in fast_vb] == [{"wrong_task": 1}]
    # a block whose bytes do not chain (truncated) is declined, not misread
    data = b"".join(
        zigzag_varint_bytes(len(task.task_id))
        + task.task_id.encode()
        + b"\x02\x02\x00\x02\x02\x02\x04\x00\x00\x00"
        for _ in range(3)
    )
    assert decode_block(data, 3, task.task_id) is not None
    assert decode_block(data[:-1], 3, task.task_id) is None
    assert decode_block(data, 4, task.task_id) is None
    assert decode_block(data, 3, "other") is None
    assert [zigzag_varint_bytes(x) for x in (0, -1, 1, 64, -(1 << 63))] == [
        b"\x00",
        b"\x01",
        b"\x02",
        b"\x80\x01",
        b"\xff" * 9 + b"\x01",
    ]


def test_read_report_files_truncated_file_keeps_earlier_blocks(tmp_path):
    """A file cut inside its third block: the first two blocks' reports are read, the cut block is one
    ``truncated`` dead letter at its offset (its bytes and declared records counted as lost), and a
    wholly foreign file is one ``undecodable`` dead letter."""
    from transforms.io import ReadReportFiles

    task = _task("olh", d=16)
    oracle = task.make_oracle()
    rng = _rng(10)
    recs = reports_to_records(
        task.task_id, oracle.encode(rng.integers(0, 16, 3000), rng=rng), np.full(3000, 10**12)
    )
    data = _container(recs, sync_interval=20_000)
    blocks = list(fastavro.block_reader(io.BytesIO(data)))
    assert len(blocks) >= 3
    first_two = blocks[0].num_records + blocks[1].num_records
    cut = blocks[2].offset + 40
    (tmp_path / "a.avro").write_bytes(data[:cut])
    (tmp_path / "b.avro").write_bytes(b"PK\x03\x04 not avro at all")
    with TestPipeline() as p:
        out = p | ReadReportFiles(
            str(tmp_path / "*.avro"), batch_size=1 << 20, aggregator=FrequencyAggregator(task)
        )
        assert_that(
            out.records | beam.Map(lambda e: len(e[1])) | beam.CombineGlobally(sum),
            equal_to([first_two]),
            label="records",
        )
        assert_that(
            out.dead_letter | beam.Map(lambda d: (d["reason"], os.path.basename(d["source"]))),
            equal_to([("truncated", f"a.avro@{blocks[2].offset}"), ("undecodable", "b.avro")]),
            label="dead",
        )
        lost = out.counts | beam.Map(lambda c: (c.get("lost_records", 0), c.get("lost_bytes", 0)))
        assert_that(
            lost | beam.CombineGlobally(lambda xs: tuple(map(sum, zip(*xs))) or (0, 0)),
            equal_to([(blocks[2].num_records, cut - blocks[2].offset + len(b"PK\x03\x04 not avro at all"))]),
            label="lost",
        )


def test_batch_job_ignores_early_firings(tmp_path):
    """A task's early_firing_s is a streaming feature: a bounded (batch) job must run, with final panes."""
    cfg = WindowConfig(size_s=60.0, early_firing_s=10.0, allowed_lateness_s=30.0)
    with TestPipeline() as p:
        out = (
            p
            | beam.Create([("k", 1), ("k", 2), ("k", 3)])
            | beam.Map(lambda kv: beam.window.TimestampedValue(kv, 5))
            | WindowReports(cfg)
            | beam.CombinePerKey(sum)
        )
        assert_that(out, equal_to([("k", 6)]), label="one final pane")
