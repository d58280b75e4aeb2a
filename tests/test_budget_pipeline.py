"""Tests of the pipeline side of repeated collection: pseudonymous client ids in reports
(schemas/report.avsc, both decoders, the Pub/Sub path, dead letters), the task's budget block,
the over-budget step (transforms/budget.py) and participation hiding.

Exact tests (decoders, counts, dead letters) compare arrays for equality; the statistical ones state their
tolerance (z = 5) next to the assertion. Every random draw comes from one SeedSequence.
"""

from __future__ import annotations

import io
import json

import fastavro
import numpy as np
import pytest

import schemas
from ldp.reports import Reports
from ldp.task import parse_task
from wire.decode import MAX_CLIENT_ID_BYTES, ColumnBatch, client_id_keys, iter_report_batches, report_layout
from wire.encode import encode_report_block, write_reports
from wire.records import encode_report_container, reports_to_records
from wire.validate import ReportValidator, fast_decode_params

SEEDS = np.random.SeedSequence(20261201)


def _rng(i: int) -> np.random.Generator:
    return np.random.default_rng(SEEDS.spawn(i + 1)[i])


def _task(mech: str = "olh", d: int = 16, **kw):
    return parse_task({"task_id": f"b-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": d, **kw})


def _legacy_schema() -> dict:
    """The version 2 report schema as written before ``client_id`` was added."""
    raw = schemas.load_schema("report")
    return {**raw, "fields": [f for f in raw["fields"] if f["name"] != "client_id"]}


def _container(records, schema=None, sync_interval=1 << 20) -> bytes:
    buf = io.BytesIO()
    parsed = schemas.report_schema() if schema is None else fastavro.parse_schema(schema)
    fastavro.writer(buf, parsed, records, sync_interval=sync_interval)
    return buf.getvalue()


def _decode(task, data: bytes, fast: bool = True):
    params = {"task_id": task.task_id, **fast_decode_params(task.make_oracle())} if fast else {}
    return list(iter_report_batches(io.BytesIO(data), 1 << 20, **params))


def _validate_all(task, batches):
    v = ReportValidator(task)
    return [v.validate(b, "s", at_ms=0) for b in batches]


def _ids(rng: np.random.Generator, n: int, length: int = 32) -> np.ndarray:
    return rng.integers(0, 256, (n, length), dtype=np.uint8)


# ----------------------------------------------------------------------------------------------------
# the client_id field: schema, both decoders, old files, dead letters, Pub/Sub
# ----------------------------------------------------------------------------------------------------
def test_client_id_is_an_optional_trailing_field_of_version_2():
    raw = schemas.load_schema("report")
    field = raw["fields"][-1]
    assert field["name"] == "client_id" and field["type"] == ["null", "bytes"] and field["default"] is None
    assert raw["namespace"] == "org.ldpbeam.v2" and schemas.SCHEMA_VERSION == 2
    assert report_layout(schemas.report_schema()) is True
    assert report_layout(fastavro.parse_schema(_legacy_schema())) is False
    assert report_layout({"type": "record", "name": "X", "fields": []}) is None
    # a record without the key is written with the default (null) and read back with it
    rec = reports_to_records("t", Reports(values=np.array([1])), np.array([5]))[0]
    del rec["client_id"]
    back = list(fastavro.reader(io.BytesIO(_container([rec]))))[0]
    assert back["client_id"] is None


@pytest.mark.parametrize("mech", ["grr", "olh", "oue", "ss"])
def test_old_version_2_files_are_read_exactly(mech):
    """A file written with the version 2 schema before client_id (the legacy layout) is decoded on the fast
    path and gives the same reports and the same dead letters as the fastavro path; its reports have no
    client id (the dead letters' raw_record does not invent one)."""
    from simulator import bad_records

    task = _task(mech, d=20)
    oracle = task.make_oracle()
    rng = _rng(1)
    reps = oracle.encode(rng.integers(0, 20, 300), rng=rng)
    recs = reports_to_records(task.task_id, reps, rng.integers(0, 2**41, 300))
    bad = bad_records(task, 2, 10**12, seed=_rng(2))
    bad.pop("wrong_task")
    recs += [r for rs in bad.values() for r in rs]
    legacy = [{k: v for k, v in r.items() if k != "client_id"} for r in recs]
    data = _container(legacy, _legacy_schema(), sync_interval=3000)
    fast = _decode(task, data)
    slow = _decode(task, data, fast=False)
    assert any(isinstance(b, ColumnBatch) and not b.client_id_field for b in fast)
    fv, sv = _validate_all(task, fast), _validate_all(task, slow)
    ra = Reports.concat([x.reports for x in fv])
    rb = Reports.concat([x.reports for x in sv])
    for f in ra.fields():
        assert np.array_equal(getattr(ra, f), getattr(rb, f))
        assert np.array_equal(getattr(ra, f), getattr(reps, f))
    da = [d for x in fv for d in x.dead_letters]
    assert da == [d for x in sv for d in x.dead_letters] and len(da) == sum(map(len, bad.values()))
    assert all("client_id" not in json.loads(d["raw_record"]) for d in da)
    # the same records under the current schema: the same accepted reports
    cur = _validate_all(task, _decode(task, _container(recs, sync_interval=3000)))
    rc = Reports.concat([x.reports for x in cur])
    assert all(np.array_equal(getattr(rc, f), getattr(ra, f)) for f in ra.fields())


def test_client_ids_roundtrip_on_both_paths_and_the_numpy_encoder_is_fastavros():
    task = _task("olh")
    oracle = task.make_oracle()
    rng = _rng(3)
    n = 200
    reps = oracle.encode(rng.integers(0, 16, n), rng=rng)
    et = rng.integers(0, 2**41, n)
    ids = _ids(rng, n)
    recs = reports_to_records(task.task_id, reps, et, client_ids=ids)
    ref = _container(recs)
    # numpy encoder == fastavro, byte for byte (block bodies)
    block = encode_report_block(task.task_id, reps, et, 0, 2, ids)
    buf = io.BytesIO()
    for r in recs:
        fastavro.schemaless_writer(buf, schemas.report_schema(), r)
    assert block == buf.getvalue()
    out = io.BytesIO()
    w = fastavro.write.Writer(out, schemas.report_schema(), sync_interval=1 << 20)
    write_reports(out, w, task.task_id, reps, et, 0, 2, client_ids=ids)
    w.flush()
    back = list(fastavro.reader(io.BytesIO(out.getvalue())))
    assert [r["client_id"] for r in back] == [bytes(row) for row in ids]
    for data in (ref, out.getvalue()):
        fast = _decode(task, data)
        assert all(isinstance(b, ColumnBatch) for b in fast)
        cb = ColumnBatch.concat(fast)
        assert [cb.record(i)["client_id"] for i in range(n)] == [bytes(row) for row in ids]
        assert np.array_equal(cb.payload["client_id"][:, 0], np.full(n, 32))
        assert np.array_equal(cb.payload["client_id"][:, 1:], ids)
    # variable lengths 1..64 stay on the fast path; keys compare exactly (length included)
    var = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(1, 65, n)]
    var[0], var[1] = b"ab", b"ab\x00"  # differ only by a trailing zero byte
    recs_v = reports_to_records(task.task_id, reps, et, client_ids=var)
    fast = _decode(task, _container(recs_v))
    assert all(isinstance(b, ColumnBatch) for b in fast)
    slow = _decode(task, _container(recs_v), fast=False)
    cb = ColumnBatch.concat(fast)
    assert [cb.record(i)["client_id"] for i in range(n)] == var == [r["client_id"] for r in slow[0]]
    keys = client_id_keys(cb.payload["client_id"])
    assert keys[0] != keys[1] and len(np.unique(keys)) == len(set(var))


def test_bad_client_ids_are_dead_lettered_alike_on_both_paths():
    """An empty id and one over 64 bytes are ``invalid_client_id`` (the fast path leaves the row with the
    longer id to fastavro, counted); the dead letter keeps the id, hex-encoded and capped."""
    task = _task("grr", d=8)
    oracle = task.make_oracle()
    rng = _rng(4)
    reps = oracle.encode(rng.integers(0, 8, 6), rng=rng)
    ids = [b"\x01" * 32, b"", b"\x02" * MAX_CLIENT_ID_BYTES, b"\x03" * (MAX_CLIENT_ID_BYTES + 1), None, b"z"]
    recs = reports_to_records(task.task_id, reps, np.full(6, 10**12), client_ids=ids)
    for fast_first in (True, False):
        # one block per record: the 65-byte id's row is the only one decoded by fastavro
        batches = _decode(task, _container(recs, sync_interval=1), fast=fast_first)
        vbs = _validate_all(task, batches)
        dead = [d for vb in vbs for d in vb.dead_letters]
        assert sum(vb.n_read for vb in vbs) == 6
        assert [d["reason"] for d in dead] == ["invalid_client_id", "invalid_client_id"]
        kept = [json.loads(d["raw_record"])["client_id"] for d in dead]
        assert kept == ["", "03" * (MAX_CLIENT_ID_BYTES + 1)]
        assert sum(vb.n_accepted for vb in vbs) == 4
    fast = _decode(task, _container(recs, sync_interval=1))
    assert all(isinstance(b, ColumnBatch) for b in fast)
    assert sum(b.n_fallback for b in fast) == 1


@pytest.mark.integration
def test_pubsub_messages_carry_client_ids():
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from ldp.kinds.frequency.aggregate import FrequencyAggregator
    from transforms.io import DecodeReportMessages

    task = _task("olh")
    oracle = task.make_oracle()
    rng = _rng(5)
    reps = oracle.encode(rng.integers(0, 16, 40), rng=rng)
    ids = _ids(rng, 40, 16)
    msg = encode_report_container(reports_to_records(task.task_id, reps, np.full(40, 10**12), client_ids=ids))
    expected = sorted(bytes(r) for r in ids)

    def ids_of(rb):
        recs = rb.records
        if isinstance(recs, ColumnBatch):
            return [recs.record(i)["client_id"] for i in range(len(recs))]
        return [r["client_id"] for r in recs]

    with TestPipeline() as p:
        out = p | beam.Create([msg]) | DecodeReportMessages("sub", FrequencyAggregator(task))
        got = out.records | beam.FlatMap(ids_of)
        assert_that(got, equal_to(expected))


# ----------------------------------------------------------------------------------------------------
# transforms.budget: the per-client count of one batch against the state (numpy)
# ----------------------------------------------------------------------------------------------------
def _brute_force(batches, limit):
    """Per-report Python reference: accept a client's first ``limit`` reports (event time order within a
    batch, batches in order)."""
    seen: dict[bytes, int] = {}
    out = []
    for ids, ev in batches:
        acc = np.zeros(len(ids), dtype=bool)
        for i in np.argsort(ev, kind="stable"):
            c = seen.get(ids[i], 0)
            acc[i] = c < limit
            seen[ids[i]] = min(c + 1, limit)
        out.append(acc)
    return out


def test_check_batch_equals_a_per_report_count():
    from transforms.budget import check_batch

    rng = _rng(6)
    limit = 3
    pool = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(1, 65, 50)]
    pool += [b"a", b"a\x00", b"\x00"]  # ids that differ only by trailing zeros stay apart
    batches = []
    for _ in range(6):
        n = int(rng.integers(0, 120))
        pick = rng.integers(0, len(pool), n)
        batches.append(([pool[i] for i in pick], rng.integers(0, 1000, n)))
    expected = _brute_force(batches, limit)
    from wire.records import client_id_column

    keys = np.zeros(0, dtype=f"V{1 + MAX_CLIENT_ID_BYTES}")
    counts = np.zeros(0, dtype=np.int64)
    for (ids, ev), exp in zip(batches, expected):
        col, _, _ = client_id_column(ids)
        accept, rank, keys, counts = check_batch(keys, counts, client_id_keys(col), ev, limit)
        assert np.array_equal(accept, exp)
        assert np.array_equal(accept, rank <= limit)
        assert np.array_equal(np.sort(keys), keys) and len(np.unique(keys)) == len(keys)
        assert counts.max(initial=0) <= limit
    seen_ids = {i for ids, _ in batches for i in ids}
    assert len(keys) == len(seen_ids)


def test_shards_spread_similar_ids():
    from transforms.budget import shard_of
    from wire.records import client_id_column

    ids = [f"user-{i}".encode() for i in range(3200)]
    col, _, _ = client_id_column(ids)
    shard = shard_of(client_id_keys(col), 32)
    counts = np.bincount(shard, minlength=32)
    # 3200 ids in 32 shards: 100 expected per shard, binomial sd ~ 9.8; z = 5 -> within [51, 149]
    assert counts.min() >= 51 and counts.max() <= 149
    assert np.array_equal(shard, shard_of(client_id_keys(col), 32))  # deterministic


# ----------------------------------------------------------------------------------------------------
# the over-budget step in a pipeline
# ----------------------------------------------------------------------------------------------------
def _id_task(limit: int = 2, period_s: float = 60.0, mech: str = "olh", **kw):
    return parse_task(
        {
            "task_id": f"ids-{mech}",
            "mechanism": mech,
            "epsilon": 1.0,
            "domain_size": 16,
            "window": {"size_s": period_s},
            "budget": {"reports_per_period": limit, "period_s": period_s, "client_ids": True},
            **kw,
        }
    )


def _client_batches(task, rng, sends, start_ms=0, period_ms=60_000):
    """One record list per client group: ``sends[c] = (period 0 reports, period 1 reports)``; each
    client's reports are in one batch (so which ones are first is decided within a batch)."""
    oracle = task.make_oracle()
    out, per_client = [], {}
    for c, counts in enumerate(sends):
        cid = bytes([c + 1]) * 32
        recs = []
        for period, k in enumerate(counts):
            if not k:
                continue
            et = start_ms + period * period_ms + np.sort(rng.integers(0, period_ms, k))
            reps = oracle.encode(rng.integers(0, 16, k), rng=rng)
            recs += reports_to_records(task.task_id, reps, et, client_ids=[cid] * k)
            per_client[(cid, period)] = (reps, et)
        out.append(recs)
    return out, per_client


def test_over_budget_reports_are_dead_lettered_and_counted():
    """Clients send 1..5 reports per period (limit 2): each client's first two (by event time) count, the
    rest are ``over_budget`` dead letters with the client id; reports without an id are
    ``missing_client_id``; read = accepted + rejected over the count dicts; the estimates equal the core's
    over exactly the accepted reports."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window
    from ldp.kinds.frequency.aggregate import FrequencyAggregator
    from transforms.aggregate import Aggregate
    from wire.validate import RecordBatch

    task = _id_task()
    agg = FrequencyAggregator(task)
    rng = _rng(10)
    sends = [(1, 0), (2, 1), (3, 2), (5, 4), (0, 3), (4, 0)]
    batches, per_client = _client_batches(task, rng, sends)
    oracle = task.make_oracle()
    anon = reports_to_records(task.task_id, oracle.encode(np.array([1, 2]), rng=rng), np.array([5, 6]))
    batches[0] += anon
    # one batch decoded column-wise (fast path), the others as fastavro dicts
    elements = [RecordBatch("fast", ColumnBatch.concat(_decode(task, _container(batches[0]))))]
    elements += [RecordBatch(f"slow{i}", b) for i, b in enumerate(batches[1:])]
    limit = 2
    over = sum(max(0, k - limit) for c in sends for k in c)
    n_all = sum(map(len, batches))
    # the core over exactly the accepted reports, window by window (window = period here)
    expected = []
    for period in (0, 1):
        acc = GroupAccumulators()
        for (_cid, per), (reps, _et) in sorted(per_client.items()):
            if per == period:
                acc = accumulate(agg, acc, 0, reps.take(slice(0, limit)))
        info = WindowInfo(period * 60_000, (period + 1) * 60_000, "ON_TIME", 0, True)
        rows = finalize_window(agg, acc, info)
        expected += [(r.window_start, r.n_reports, tuple(r.frequencies)) for r in rows]
    with TestPipeline() as p:
        out = p | beam.Create(elements) | Aggregate(agg)
        rows = out["estimates"] | beam.Map(lambda r: (r.window_start, r.n_reports, tuple(r.frequencies)))
        assert_that(rows, equal_to(expected), label="estimates")
        reasons = out["dead_letter"] | beam.Map(lambda d: d["reason"])
        assert_that(
            reasons, equal_to(["over_budget"] * over + ["missing_client_id"] * 2), label="reasons"
        )
        ids = (
            out["dead_letter"]
            | beam.Filter(lambda d: d["reason"] == "over_budget")
            | beam.Map(lambda d: json.loads(d["raw_record"])["client_id"][:2])
        )
        expected_ids = [bytes([c + 1]).hex() for c, s in enumerate(sends) for k in s for _ in range(k - 2)]
        assert_that(ids, equal_to(expected_ids), label="ids")

        def total(counts):
            out_: dict = {}
            for c in counts:
                for k, v in c.items():
                    out_[k] = out_.get(k, 0) + v
            return [(out_["read"], out_["accepted"], out_["rejected"], out_.get("rejected_over_budget", 0))]

        sums = out["counts"] | beam.combiners.ToList() | beam.FlatMap(total)
        assert_that(sums, equal_to([(n_all, n_all - over - 2, over + 2, over)]), label="counts")


def test_a_late_report_of_a_closed_budget_period_is_dead_lettered():
    """After the watermark passes a period's end plus the allowed lateness, the counts of the period's
    shards are released and a report for such a shard is ``budget_period_closed`` (it cannot be checked),
    not accepted as a first report."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms.window import TimestampedValue

    from ldp.kinds.frequency.aggregate import FrequencyAggregator
    from transforms.aggregate import Aggregate
    from wire.validate import RecordBatch

    task = _id_task(limit=1, period_s=10.0)
    agg = FrequencyAggregator(task)
    oracle = task.make_oracle()
    rng = _rng(11)

    def batch(name, ids, times):
        reps = oracle.encode(rng.integers(0, 16, len(ids)), rng=rng)
        return RecordBatch(name, reports_to_records(task.task_id, reps, np.array(times), client_ids=ids))

    first = batch("a", [b"u1", b"u1", b"u2"], [1000, 2000, 3000])  # u1's second: over budget
    late = batch("b", [b"u1"], [4000])  # period [0, 10 s) of u1's shard closed by then
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(first, 3)])
        .advance_watermark_to(30)
        .add_elements([TimestampedValue(late, 30)])
        .advance_watermark_to_infinity()
    )
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with TestPipeline(options=opts) as p:
        out = p | stream | Aggregate(agg)
        assert_that(
            out["dead_letter"] | beam.Map(lambda d: d["reason"]),
            equal_to(["over_budget", "budget_period_closed"]),
            label="reasons",
        )


# ----------------------------------------------------------------------------------------------------
# participation hiding: dummies are one more value, estimated like the others
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mech", ["grr", "oue", "olh"])
@pytest.mark.statistical
def test_hidden_participation_estimates_are_unbiased(mech):
    """Clients with nothing to report send the dummy value d. Over T = 300 trials of n = 2000 clients
    (60% participating, Zipf values), the mean error of every value's estimate (the absent one included)
    is within z = 5 standard errors sqrt(Var / T) of 0, Var the oracle's closed form (Eq. 4 at the true
    fractions); the empirical MSE
    over the T trials and d + 1 values is within 1 +- 5 * sqrt(2 / (T (d + 1))) of the closed form (about
    +-0.29 for d + 1 = 6); split_absent's participating fraction is 1 - the absent estimate."""
    from ldp.participation import split_absent

    task = parse_task({"task_id": "hide", "mechanism": mech, "epsilon": 1.0, "domain_size": 5,
                       "hide_participation": True})
    oracle = task.make_oracle()
    d1 = oracle.d
    assert d1 == 6 and task.absent_value() == 5
    rng = _rng(20)
    n, trials = 2000, 300
    present = rng.random(n) < 0.6
    p = 1.0 / np.arange(1, 6) ** 1.1
    values = np.where(present, rng.choice(5, size=n, p=p / p.sum()), task.absent_value())
    truth = np.bincount(values, minlength=d1) / n
    var = np.asarray(oracle.variance(n, truth), dtype=np.float64)  # Eq. 4 at the true fractions
    errs = []
    for _ in range(trials):
        acc = oracle.add(oracle.create_accumulator(), oracle.encode(values, rng=rng))
        est = oracle.estimate(acc)
        errs.append(np.asarray(est.frequencies) - truth)
    errs = np.array(errs)
    se = np.sqrt(var / trials)
    assert np.all(np.abs(errs.mean(axis=0)) < 5 * se)
    ratio = float((errs**2).mean() / var.mean())
    assert abs(ratio - 1) < 5 * np.sqrt(2 / (trials * d1))
    split = split_absent(np.asarray(est.frequencies), n)
    assert split.present == pytest.approx(1 - est.frequencies[-1]) and len(split.all_clients) == 5
    assert np.allclose(split.counts, np.asarray(est.frequencies[:-1]) * n)
    assert np.allclose(split.among_present * split.present, split.all_clients)


# ----------------------------------------------------------------------------------------------------
# end to end through the jobs
# ----------------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_streaming_budget_end_to_end_watched_directory(tmp_path):
    """40 users with state files report every 2 s window for 6 windows under a budget of 2 reports per 6 s
    period (a short "day"): each well-configured client refuses its third window of every period; two
    misconfigured clients send 3 reports every window without a ledger. The streaming job (watched
    directory) dead-letters exactly their excess as over_budget (3 x 3 - 2 = 7 per client and period),
    keeps read = accepted + rejected, puts every accepted report in its window's estimates, and its
    summary carries the budget's accounting (basic and tight composition over a period)."""
    import glob

    from pipelines import frequency
    from pipelines.clients import ClientPopulation, iter_windows, write_window
    from wire.records import now_ms

    period_ms, window_ms = 6000, 2000
    task = parse_task(
        {
            "task_id": "e2e-budget", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16,
            "window": {"size_s": 2},
            "budget": {"reports_per_period": 2, "period_s": 6, "total_epsilon": 10, "client_ids": True},
        }
    )  # fmt: skip
    (tmp_path / "task.json").write_text(task.to_json())
    pop = ClientPopulation(
        task, 40, state_dir=tmp_path / "states", seed=7, drift=0.3, misconfigured=2, misconfigured_reports=3
    )
    start = (now_ms() // period_ms + 1) * period_ms  # a period boundary just ahead
    truths = []
    for batch in iter_windows(pop, 6, start, window_ms):
        write_window(batch, task, tmp_path / "in")
        truths.append(batch.truth)
    assert [t["refused"] for t in truths] == [0, 0, 38, 0, 0, 38]  # the clients refuse past their budget
    assert all(t["misconfigured_reports"] == 6 for t in truths)
    sent = sum(t["reports"] for t in truths)
    summary = frequency.run(
        [
            "--task", str(tmp_path / "task.json"), "--streaming", "--input", str(tmp_path / "in" / "*.avro"),
            "--output", str(tmp_path / "out"), "--watch_interval", "0.5", "--streaming_duration", "4",
            "--allowed_lateness", "60", "--counts_window", "60",
        ]
    )  # fmt: skip
    over = 2 * 2 * (3 * 3 - 2)
    c = summary["counts"]
    assert c["read"] == sent == c["accepted"] + c["rejected"]
    assert c["rejected"] == c["rejected_over_budget"] == over
    dl = []
    for f in glob.glob(str(tmp_path / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    assert [r["reason"] for r in dl] == ["over_budget"] * over
    mis_ids = {bytes(pop.client_ids[u]).hex() for u in (0, 1)}
    assert {json.loads(r["raw_record"])["client_id"] for r in dl} == mis_ids
    rows = []
    for f in glob.glob(str(tmp_path / "out" / "estimates-*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    per_window = {}
    for r in rows:  # discarding panes: the window's reports are the sum over its panes
        per_window[r["window_start"]] = per_window.get(r["window_start"], 0) + r["n_reports"]
    assert sum(per_window.values()) == c["accepted"] == sent - over
    budget = summary["budget"]
    assert budget["policy"]["client_ids"] is True and budget["per_period"]["windows"] == 2
    assert budget["per_period"]["basic"] == 2.0 and budget["per_period"]["tight"] <= 2.0


def test_batch_job_over_budget_and_budget_summary(tmp_path, capsys):
    """The same clients' files through the batch job: over_budget dead letters for the misconfigured
    clients' excess only, read = accepted + rejected, and counts.json / the console carry the budget's
    figures (one report per window of a period: basic 2 x eps, tight <= basic)."""
    from pipelines import frequency
    from pipelines.clients import ClientPopulation, iter_windows, write_window

    task = parse_task(
        {
            "task_id": "batch-budget", "mechanism": "memo-olh", "epsilon": 1.0, "domain_size": 16,
            "window": {"size_s": 2},
            "budget": {"reports_per_period": 2, "period_s": 6, "client_ids": True},
        }
    )  # fmt: skip
    (tmp_path / "task.json").write_text(task.to_json())
    pop = ClientPopulation(task, 30, seed=8, misconfigured=1, misconfigured_reports=2)
    sent = 0
    for batch in iter_windows(pop, 3, 1_800_000_000_000, 2000):  # one 6 s period
        write_window(batch, task, tmp_path / "in")
        sent += batch.truth["reports"]
    summary = frequency.run(
        ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"),
         "--output", str(tmp_path / "out")]
    )  # fmt: skip
    c = summary["counts"]
    assert c["read"] == sent == c["accepted"] + c["rejected"] and c["rejected_over_budget"] == 3 * 2 - 2
    saved = json.loads((tmp_path / "out" / "counts.json").read_text())
    b = saved["budget"]
    assert b["policy"]["composition"] == "memoized" and b["guarantees"]["epsilon_inf"] == 1.0
    assert b["per_period"]["constant_value"]["tight"] <= b["per_period"]["fresh_equivalent"]["basic"]
    assert "budget: " in capsys.readouterr().err
