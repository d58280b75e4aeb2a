"""End-to-end tests of pipelines.range_queries: simulate_range -> Beam (DirectRunner) -> answers.

* identical numbers: the pipeline's answers (and stds) equal ``mechanism.finalize`` over the same reports
  accumulated in memory, exactly, in the global window and per event-time window;
* accuracy (the issue's done-criterion, 200,000 users, HDG, 3 attributes of domain 16): answers are within
  the error the method predicts of the true answers of the simulated records;
* the saved window models answer queries through ``answer`` exactly as the job did;
* bad records (another task, unknown schema version, group out of range, payload outside the group
  oracle's domain, missing or foreign payload fields, an undecodable file) are dead-lettered with their
  reason and counted, read = accepted + rejected; bad queries stop the job before it starts, naming the
  query;
* streaming from a watched directory (a file moved in while the job runs): the last pane of every window
  equals the core over exactly its reports, and the closed count windows add up.
"""

from __future__ import annotations

import glob
import json
import os
import re

import fastavro
import numpy as np
import pytest

import simulator
from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window
from ldp.kinds.range.aggregate import RangeAggregator
from ldp.rangequery.queries import RangeQuery, parse_queries, random_queries, true_answers
from ldp.reports import Reports
from ldp.task import parse_task
from pipelines import range_queries, simulate_range
from transforms.aggregate import GroupReports, TaskCombineFn
from wire.encode import encode_report_block
from wire.records import PAYLOAD_FIELDS

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SEEDS = np.random.SeedSequence(20261130).spawn(4)
NAMES = ("age", "income", "score")


def _task(tmp_path, mech, users, task_id=None, options=None):
    obj = {
        "task_id": task_id or f"rq-{mech}",
        "mechanism": mech,
        "epsilon": 1.0,
        "attributes": [{"name": n, "domain_size": 16} for n in NAMES],
        "expected_users": users,
    }
    if options:
        obj["options"] = options
    (tmp_path / "task.json").write_text(json.dumps(obj))
    return parse_task(obj)


def _write_queries(tmp_path, queries, name="q.json"):
    path = tmp_path / name
    path.write_text(json.dumps([q.to_json(NAMES) for q in queries]))
    return path


def _args(tmp_path, out, queries="q.json", *extra):
    return [
        "--task",
        str(tmp_path / "task.json"),
        "--input",
        str(tmp_path / "in" / "*.avro"),
        "--queries",
        str(tmp_path / queries),
        "--output",
        str(tmp_path / out),
        *extra,
    ]


def _fails(capsys, fn, argv, pattern):
    """``fn(argv)`` exits with status 2 and one stderr line matching ``pattern``."""
    with pytest.raises(SystemExit) as ei:
        fn(argv)
    assert ei.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and re.search(pattern, err[0]), err


def _jsonl(pattern):
    rows = []
    for f in sorted(glob.glob(str(pattern))):
        with open(f) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return sorted(rows, key=lambda r: (r["window_start"] or "", r["query_index"]))


def _core_reports(mech, in_dir):
    """``(groups, event_ms, {group: Reports})`` of the simulated report files, read with plain fastavro."""
    recs = []
    for f in sorted(glob.glob(os.path.join(in_dir, "reports-*.avro"))):
        with open(f, "rb") as fh:
            recs += list(fastavro.reader(fh))
    groups = np.array([r["group"] for r in recs], dtype=np.int64)
    times = np.array([int(r["event_time"].timestamp() * 1000) for r in recs], dtype=np.int64)
    per_group = {}
    for g in np.unique(groups).tolist():
        rows = [r for r, gg in zip(recs, groups) if gg == g]
        fields = {}
        for f in getattr(mech.group_oracle(g), "report_fields", ("values",)):
            vals = [r[PAYLOAD_FIELDS[f]] for r in rows]
            if f == "bits":
                fields[f] = np.frombuffer(b"".join(vals), dtype=np.uint8).reshape(len(rows), -1)
            elif f == "reals":
                fields[f] = np.array([v[0] for v in vals], dtype=np.float64)
            else:
                col = np.array(vals, dtype=np.int64)
                fields[f] = col.view(np.uint64) if f == "seeds" else col
        per_group[g] = Reports(**fields)
    return groups, times, per_group


def _core_model(mech, per_group, keep=None):
    """``mechanism.finalize`` over the reports (optionally only rows ``keep[g]`` of each group)."""
    accs = {}
    for g, rep in per_group.items():
        rep = rep if keep is None else rep.take(keep[g])
        if len(rep):
            accs[g] = mech.add(g, mech.create_accumulator(g), rep)
    return mech.finalize(accs)


def _aligned_queries(block, rng, n):
    """Queries whose intervals are unions of whole grid cells (cell width ``block``)."""
    out = []
    cells = 16 // block
    for i in range(n):
        lam = 1 + i % 2
        attrs = sorted(rng.choice(3, size=lam, replace=False).tolist())
        ivs = {}
        for a in attrs:
            lo, hi = sorted(rng.integers(0, cells, size=2).tolist())
            ivs[a] = (lo * block, (hi + 1) * block - 1)
        out.append(RangeQuery.from_mapping(ivs))
    return out


@pytest.fixture(scope="module")
def hdg_run(tmp_path_factory):
    """200,000 users, HDG, gaussian:0.5, with bad records; the pipeline run once in the global window."""
    tmp_path = tmp_path_factory.mktemp("hdg")
    users = 200_000
    task = _task(tmp_path, "hdg", users)
    truth = simulator.simulate_files(
        task,
        users,
        "gaussian:0.5",
        tmp_path / "in",
        seed=int(SEEDS[0].generate_state(1)[0]),
        files=3,
        start_ms=T0,
        duration_s=3600.0,
        inject_bad=2,
    )
    mech = task.make_mechanism()
    g2 = next(s.gran[0] for s in mech.specs if len(s.attrs) == 2)  # 2-D grids: g2 x g2 cells
    block = 16 // g2
    rng = np.random.default_rng(SEEDS[1])
    aligned = _aligned_queries(block, rng, 40)
    rand2 = random_queries([16] * 3, 20, 2, 0.3, rng=rng)
    rand3 = random_queries([16] * 3, 10, 3, 0.4, rng=rng)
    queries = aligned + rand2 + rand3
    _write_queries(tmp_path, queries)
    summary = range_queries.run(_args(tmp_path, "out"))
    return {
        "tmp": tmp_path,
        "task": task,
        "mech": mech,
        "truth": truth,
        "summary": summary,
        "queries": queries,
        "n_aligned": len(aligned),
        "block": block,
    }


@pytest.mark.integration
def test_hdg_counts_and_dead_letters(hdg_run):
    c = hdg_run["summary"]["counts"]
    bad = hdg_run["truth"]["bad_records"]
    assert c["read"] == 200_000 + sum(bad.values())
    assert c["accepted"] == 200_000 and c["rejected"] == sum(bad.values())
    assert c["read"] == c["accepted"] + c["rejected"]
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    assert set(bad) >= {"wrong_task", "invalid_group", "out_of_domain", "missing_field", "invalid_payload"}
    dl = []
    for f in glob.glob(str(hdg_run["tmp"] / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    reasons = {}
    for r in dl:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    assert reasons == bad
    assert all(r["detail"] for r in dl)
    saved = json.loads((hdg_run["tmp"] / "out" / "counts.json").read_text())
    assert saved["counts"] == c and saved["rows"]["models"] == 1 and saved["panes_written"]["models"] == 1
    assert not [p for p in os.listdir(hdg_run["tmp"] / "out") if p.startswith(".temp")]


@pytest.mark.integration
def test_hdg_answers_equal_core_exactly_and_avro(hdg_run):
    mech, queries = hdg_run["mech"], hdg_run["queries"]
    rows = _jsonl(hdg_run["tmp"] / "out" / "answers-*.jsonl")
    assert [r["query_index"] for r in rows] == list(range(len(queries)))
    _, _, per_group = _core_reports(mech, hdg_run["tmp"] / "in")
    model = _core_model(mech, per_group)
    core = model.answer(queries)
    core_std = model.answer_std(queries)
    assert [r["answer"] for r in rows] == core.tolist()
    assert [r["std"] for r in rows] == [None if np.isnan(s) else s for s in core_std.tolist()]
    assert all(r["window_start"] is None and r["n_reports"] == 200_000 and r["method"] == "hdg" for r in rows)
    assert [r["query"] for r in rows] == [q.to_json(NAMES) for q in queries]
    # the Avro answers are the same records
    (avro_file,) = glob.glob(str(hdg_run["tmp"] / "out" / "answers-*.avro"))
    with open(avro_file, "rb") as fh:
        arecs = sorted(fastavro.reader(fh), key=lambda r: r["query_index"])
    assert [r["answer"] for r in arecs] == core.tolist()
    assert [r["query"] for r in arecs] == [r["query"] for r in rows]


@pytest.mark.integration
def test_hdg_accuracy_within_predicted_error(hdg_run):
    """Aligned queries (whole cells of the 2-D grids) have no non-uniformity error, so their error is the
    grid estimate's noise: ``answer_std = sqrt(k var0)`` for k cells (OLH cell variance var0 of the group's
    m users), plus the sampling error of answering for the population from one random group,
    ``f (1 - f) / m``. With ``sigma = sqrt(std^2 + f (1 - f) / m)`` every error must be below 5 sigma
    (false-failure rate 6e-7 per query). Norm-Sub and consistency only reduce the noise, so the RMS of
    ``err / sigma`` over the 40 queries must stay below ``1 + 5 sqrt(2 / 40) = 2.1`` (the relative standard
    error of an empirical variance over 40 terms is sqrt(2/40)); a wrong grid or group mix-up gives errors
    of 0.1-0.5, i.e. 5-20 sigma."""
    queries, n_al = hdg_run["queries"], hdg_run["n_aligned"]
    rows = _jsonl(hdg_run["tmp"] / "out" / "answers-*.jsonl")
    _, records = simulator.load_truth_records(hdg_run["tmp"] / "in")
    assert records.shape == (200_000, 3)
    truth = true_answers(records, queries)
    ans = np.array([r["answer"] for r in rows])
    std = np.array([np.nan if r["std"] is None else r["std"] for r in rows])
    m = 200_000 / hdg_run["mech"].n_groups
    sigma = np.sqrt(std[:n_al] ** 2 + truth[:n_al] * (1 - truth[:n_al]) / m)
    z = (ans[:n_al] - truth[:n_al]) / sigma
    assert np.all(np.isfinite(std[:n_al]))
    assert np.all(np.abs(z) < 5), z
    assert np.sqrt(np.mean(z**2)) < 1 + 5 * np.sqrt(2 / n_al)
    # every query (partial cells, lambda = 3): MAE about 0.02-0.03 here against 0.23 for the uniform guess
    err = np.abs(ans - truth)
    uni = np.abs(np.array([q.volume([16] * 3) for q in queries]) - truth)
    assert err.mean() < 0.25 * uni.mean(), (err.mean(), uni.mean())


@pytest.mark.integration
def test_hdg_models_answer_new_queries(hdg_run, capsys):
    tmp, task = hdg_run["tmp"], hdg_run["task"]
    rows = _jsonl(tmp / "out" / "answers-*.jsonl")
    out = range_queries.run(
        ["answer", "--model", str(tmp / "out" / "models"), "--queries", str(tmp / "q.json")]
    )
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out["answers"] == rows and printed == rows
    # the Avro copy of the model answers the same
    (avro_model,) = glob.glob(str(tmp / "out" / "models" / "models-*.avro"))
    via_avro = range_queries.run_answer(["--model", avro_model, "--queries", str(tmp / "q.json")])
    assert via_avro == rows
    # new queries: equal to the in-memory core model
    new = random_queries(task.domain_sizes, 15, 2, 0.6, rng=np.random.default_rng(SEEDS[2]))
    _write_queries(tmp, new, "new.json")
    got = range_queries.run_answer(
        ["--model", str(tmp / "out" / "models"), "--queries", str(tmp / "new.json")]
    )
    _, _, per_group = _core_reports(hdg_run["mech"], tmp / "in")
    assert [r["answer"] for r in got] == _core_model(hdg_run["mech"], per_group).answer(new).tolist()
    # a bad query for the answer sub-command names it
    (tmp / "bad.json").write_text(json.dumps([{"age": [0, 3]}, {"height": [0, 1]}]))
    answer = ["--model", str(tmp / "out" / "models"), "--queries", str(tmp / "bad.json")]
    _fails(capsys, range_queries.run_answer, answer, r"query 1 .*height")


@pytest.mark.parametrize(
    "bad, pattern",
    [
        ([{"age": [0, 3]}, {"height": [0, 1]}], r"query 1 .*unknown attribute 'height'"),
        ([{"age": [5, 2]}], r"query 0 .*lo > hi"),
        ([{"age": [0, 3]}, {"age": [0, 3], "score": [10, 16]}], r"query 1 .*outside the domain"),
        ([{}], r"query 0 .*constrains no attribute"),
    ],
)
def test_bad_queries_stop_before_the_job(tmp_path, capsys, bad, pattern):
    _task(tmp_path, "hdg", 1000)
    (tmp_path / "q.json").write_text(json.dumps(bad))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "r.avro").write_bytes(b"")
    _fails(capsys, range_queries.run, _args(tmp_path, "out"), pattern)
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_windowed_tdg_equals_core_per_window(tmp_path):
    """Two event-time windows: each window's answers equal finalize over that window's reports."""
    task = _task(tmp_path, "tdg", 20_000)
    simulator.simulate_files(
        task,
        20_000,
        "laplace:0.6",
        tmp_path / "in",
        seed=int(SEEDS[3].generate_state(1)[0]),
        files=2,
        start_ms=T0,
        duration_s=1200.0,
        assignment="balanced",
    )
    queries = random_queries(task.domain_sizes, 12, 2, 0.5, rng=np.random.default_rng(SEEDS[3]))
    queries += [
        RangeQuery.from_mapping({0: (0, 7)}),
        RangeQuery.from_mapping({0: (2, 9), 1: (0, 15), 2: (3, 3)}),
    ]
    _write_queries(tmp_path, queries)
    summary = range_queries.run(_args(tmp_path, "out", "q.json", "--window_size", "600"))
    assert summary["counts"]["read"] == summary["counts"]["accepted"] == 20_000
    assert summary["rows"]["models"] == 2 == summary["panes_written"]["models"]
    rows = _jsonl(tmp_path / "out" / "answers-*.jsonl")
    mech = task.make_mechanism()
    groups, times, per_group = _core_reports(mech, tmp_path / "in")
    starts = sorted({r["window_start"] for r in rows})
    assert starts == ["2026-01-01T00:00:00.000Z", "2026-01-01T00:10:00.000Z"]
    total = 0
    for w, start in enumerate(starts):
        lo, hi = T0 + w * 600_000, T0 + (w + 1) * 600_000
        keep = {g: np.flatnonzero((times[groups == g] >= lo) & (times[groups == g] < hi)) for g in per_group}
        model = _core_model(mech, per_group, keep)
        got = [r for r in rows if r["window_start"] == start]
        assert [r["answer"] for r in got] == model.answer(queries).tolist()
        assert all(r["n_reports"] == model.n_users for r in got)
        total += model.n_users
    assert total == 20_000
    models = range_queries.run_answer(
        ["--model", str(tmp_path / "out" / "models"), "--queries", str(tmp_path / "q.json")]
    )
    assert sorted(models, key=lambda r: (r["window_start"], r["query_index"])) == rows


def test_combine_fn_shard_merge_equals_one_pass():
    """The task CombineFn: shards of several groups merged in any order == one pass, per group."""
    task = parse_task(
        {
            "task_id": "cf",
            "mechanism": "hdg",
            "epsilon": 1.0,
            "attributes": [{"name": n, "domain_size": 16} for n in NAMES],
            "expected_users": 5000,
        }
    )
    agg = RangeAggregator(task)
    mech = agg.mechanism
    rng = np.random.default_rng(SEEDS[0])
    records = rng.integers(0, 16, size=(5000, 3))
    reports = mech.encode(records, rng=rng, groups=mech.assign_groups(5000, rng=rng, balanced=True))
    fn = TaskCombineFn(agg)
    shards = []
    for i in range(3):
        acc = fn.create_accumulator()
        for g in (1, 3, 5):
            acc = fn.add_input(acc, GroupReports(g, reports[g].take(slice(i, None, 3))))
        shards.append(acc)
    merged = fn.merge_accumulators([shards[2], GroupAccumulators(), shards[0], shards[1]])
    for g in (1, 3, 5):
        one = mech.add(g, mech.create_accumulator(g), reports[g])
        assert merged.accs[g] == one and merged.counts[g] == len(reports[g])
    assert set(merged.accs) == {1, 3, 5} and fn.merge_accumulators([]) == GroupAccumulators()
    # pickled (as Beam ships it) the aggregator rebuilds the mechanism lazily
    import pickle

    fn2 = pickle.loads(pickle.dumps(fn))
    assert fn2.aggregator._mech is None
    again = fn2.add_input(fn2.create_accumulator(), GroupReports(3, reports[3]))
    assert again.accs[3] == mech.add(3, mech.create_accumulator(3), reports[3])
    assert parse_queries([{"age": [0, 1]}], NAMES, [16] * 3)[0].dimension == 1


# ------------------------------------------------------------------------------------------------------------
# the range composite on literal reports (TestPipeline / TestStream), like the frequency composite's tests
# ------------------------------------------------------------------------------------------------------------


def _literal_setup(mech_name="hdg", n=600, seed=3):
    task = parse_task(
        {
            "task_id": f"lit-{mech_name}",
            "mechanism": mech_name,
            "epsilon": 1.0,
            "attributes": [{"name": n_, "domain_size": 8} for n_ in NAMES],
            "expected_users": n,
        }
    )
    queries = parse_queries(
        [
            {"age": [0, 3]},
            {"age": [2, 7], "income": [1, 4]},
            {"age": [0, 7], "income": [3, 3], "score": [0, 5]},
        ],
        NAMES,
        [8] * 3,
    )
    agg = RangeAggregator(task, queries)
    rng = np.random.default_rng(SEEDS[3].spawn(seed + 1)[seed])
    return task, agg, rng


def _literal_message(task, agg, rng, n, event_s):
    """An Avro container of ``n`` users' reports (all groups) at ``event_s``; and ``{group: Reports}``."""
    from wire.records import encode_report_container, reports_to_records

    mech = agg.mechanism
    records = rng.integers(0, 8, size=(n, 3))
    groups = mech.assign_groups(n, rng=rng)
    per_group = mech.encode(records, rng=rng, groups=groups)
    recs = []
    for g, rep in per_group.items():
        recs += reports_to_records(task.task_id, rep, np.full(len(rep), int(event_s * 1000)), g)
    return encode_report_container(recs), per_group


def _core_rows(agg, parts, window):
    """``finalize_window`` in memory over the union of ``parts`` (lists of ``{group: Reports}``)."""
    accs = GroupAccumulators()
    for per_group in parts:
        for g, rep in sorted(per_group.items()):
            accumulate(agg, accs, g, rep)
    return finalize_window(agg, accs, window)


def _answer_key(row):
    return (row.window_start, row.pane_timing, row.query_index, row.n_reports, row.answer, row.std)


def test_range_composite_equals_core_global_window():
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.aggregate import Aggregate
    from transforms.io import DecodeReportMessages

    task, agg, rng = _literal_setup()
    m1, p1 = _literal_message(task, agg, rng, 400, 100)
    m2, p2 = _literal_message(task, agg, rng, 300, 200)
    want = _core_rows(agg, [p1, p2], WindowInfo(pane_timing="ON_TIME"))
    want_answers = [_answer_key(r) for r in want if r.output == "answers"]
    want_models = [r.model_json for r in want if r.output == "models"]
    assert len(want_answers) == 3 and len(want_models) == 1
    with TestPipeline() as p:
        dec = p | beam.Create([m1, m2]) | DecodeReportMessages("mem", agg)
        out = dec.records | Aggregate(agg)
        assert_that(out["answers"] | beam.Map(_answer_key), equal_to(want_answers), label="answers")
        assert_that(out["models"] | beam.Map(lambda r: r.model_json), equal_to(want_models), label="models")
        assert_that(out["dead_letter"], equal_to([]), label="no dead letters")


@pytest.mark.parametrize("accumulating", [True, False])
def test_range_teststream_windows_late_pane_exact(accumulating):
    """Fixed windows of 10 s, a late batch within the allowed lateness: the on-time pane is finalize over
    the on-time reports; the late pane over all of them (accumulating) or over the late ones only
    (discarding). One combine per task and window holds every group, so no pane is guessed at."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms.window import TimestampedValue

    from ldp.task import WindowConfig
    from transforms.aggregate import Aggregate
    from transforms.io import DecodeReportMessages

    task, agg, rng = _literal_setup("tdg", seed=4)
    a, pa = _literal_message(task, agg, rng, 300, 2)
    b, pb = _literal_message(task, agg, rng, 200, 14)
    late, pl = _literal_message(task, agg, rng, 100, 5)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(a, 2), TimestampedValue(b, 14)])
        .advance_watermark_to(30)
        .add_elements([TimestampedValue(late, 5)])
        .advance_watermark_to_infinity()
    )
    w = WindowConfig(size_s=10, allowed_lateness_s=60, accumulating=accumulating)
    want = []
    for start, timing, parts in (
        (0, "ON_TIME", [pa]),
        (10_000, "ON_TIME", [pb]),
        (0, "LATE", [pa, pl] if accumulating else [pl]),
    ):
        rows = _core_rows(agg, parts, WindowInfo(start, start + 10_000, timing))
        want += [_answer_key(r) for r in rows if r.output == "answers"]
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with TestPipeline(options=opts) as p:
        dec = p | stream | DecodeReportMessages("stream", agg)
        out = dec.records | Aggregate(agg, w)
        assert_that(out["answers"] | beam.Map(_answer_key), equal_to(want))


@pytest.mark.parametrize(
    "mech, options",
    [("msw", None), ("lhio", None), ("hdg", {"oracle": "oue"}), ("uni", None)],
)
@pytest.mark.integration
def test_other_payloads_equal_core(tmp_path, mech, options):
    """Square Wave reals (MSW), LHIO's many groups, unary-encoding bits of per-group lengths and Uni's empty
    payload: validated per group, combined and finalized exactly as in memory; bad records dead-lettered."""
    task = _task(tmp_path, mech, 6000, options=options)
    truth = simulator.simulate_files(
        task, 6000, "gaussian:0.3", tmp_path / "in", seed=11, files=2, start_ms=T0, inject_bad=1
    )
    queries = random_queries(task.domain_sizes, 6, 2, 0.5, rng=np.random.default_rng(5))
    _write_queries(tmp_path, queries)
    summary = range_queries.run(_args(tmp_path, "out"))
    c = summary["counts"]
    assert c["accepted"] == 6000 and c["rejected"] == sum(truth["bad_records"].values())
    assert c["read"] == c["accepted"] + c["rejected"]
    mech_obj = task.make_mechanism()
    _, _, per_group = _core_reports(mech_obj, tmp_path / "in")
    rows = _jsonl(tmp_path / "out" / "answers-*.jsonl")
    assert [r["answer"] for r in rows] == _core_model(mech_obj, per_group).answer(queries).tolist()


def test_vectorized_avro_blocks_equal_fastavro():
    """The simulator's numpy block encoder writes exactly fastavro's bytes for the report schema."""
    import io

    import schemas
    from wire.records import reports_to_records

    rng = np.random.default_rng(SEEDS[2])
    n = 500
    cases = [
        Reports(values=rng.integers(0, 5, n), seeds=rng.integers(0, 2**64 - 1, n, dtype=np.uint64)),
        Reports(reals=rng.normal(size=n)),
        Reports(values=np.zeros(n, np.int64)),
    ]
    for rep in cases:
        ev = T0 + rng.integers(0, 3_600_000, n)
        for tid in ("t", "x" * 70):
            buf = io.BytesIO()
            w = fastavro.write.Writer(buf, schemas.report_schema(), sync_interval=1 << 30)
            for r in reports_to_records(tid, rep, ev, 7):
                w.write(r)
            w.flush()
            buf.seek(0)
            block = next(fastavro.block_reader(buf))
            sv = schemas.SCHEMA_VERSION
            assert encode_report_block(tid, rep, ev, 7, sv) == block.bytes_.getvalue()
            # one group per report (the 1-D simulator's case) encodes the same
            assert encode_report_block(tid, rep, ev, np.full(n, 7), sv) == block.bytes_.getvalue()
    bits = Reports(bits=np.zeros((3, 2), np.uint8))
    assert encode_report_block("t", bits, np.full(3, T0), 0, 1) is None


@pytest.mark.integration
def test_streaming_from_a_watched_directory_equals_core(tmp_path):
    """``--streaming --input DIR/*.avro`` (DirectRunner): one report file, the bad records and an undecodable
    file are there when the job starts, the second report file is moved in while it runs. Reports carry
    event times over 6 s from now (2 s windows, HDG's 6 groups); the watch stops 4 s after the job starts,
    every window closes and the job finishes by itself. The last pane of every window (answers and model)
    must equal ``mechanism.finalize`` over exactly the reports with event times in it, and the closed
    count windows must add up: read = accepted + rejected, with every bad record's reason."""
    import shutil
    import threading
    import time

    from wire.records import now_ms

    task = _task(tmp_path, "hdg", 20_000, task_id="rq-stream")
    stage, watched = tmp_path / "stage", tmp_path / "in"
    watched.mkdir()
    start = (now_ms() // 2000) * 2000
    truth = simulator.simulate_files(
        task, 20_000, "gaussian:0.5", stage, seed=17, files=2, start_ms=start, duration_s=6.0, inject_bad=1
    )
    queries = random_queries(task.domain_sizes, 8, 2, 0.5, rng=np.random.default_rng(SEEDS[0]))
    queries.append(RangeQuery.from_mapping({0: (2, 9), 1: (0, 15), 2: (3, 3)}))
    _write_queries(tmp_path, queries)
    staged = sorted(glob.glob(str(stage / "reports-*.avro")))

    def drop_in(src):  # atomically: copied under a name the glob does not match, then renamed
        part = watched / ("." + os.path.basename(src) + ".part")
        shutil.copy(src, part)
        os.replace(part, watched / os.path.basename(src))

    for f in [staged[0], *glob.glob(str(stage / "bad-*.avro")), str(stage / "garbage.avro")]:
        drop_in(f)
    mover = threading.Thread(target=lambda: (time.sleep(2.5), drop_in(staged[1])), daemon=True)
    mover.start()
    summary = range_queries.run(
        [
            "--task", str(tmp_path / "task.json"), "--streaming", "--input", str(watched / "*.avro"),
            "--queries", str(tmp_path / "q.json"), "--output", str(tmp_path / "out"),
            "--watch_interval", "0.5", "--streaming_duration", "4", "--window_size", "2",
            "--allowed_lateness", "60", "--accumulating", "--counts_window", "5",
        ]
    )  # fmt: skip
    mover.join()
    assert "DONE" in summary["state"]  # the watch ended and the job finished by itself
    bad = truth["bad_records"]
    c = summary["counts"]  # summed closed count windows (OUT/counts/)
    assert c["read"] == 20_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    assert c["accepted"] == 20_000
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    # every answer / model file holds one window's pane; the last pane of each window equals the core
    for pattern in ("answers-*.jsonl", "models/models-*.jsonl"):
        for f in glob.glob(str(tmp_path / "out" / pattern)):
            with open(f) as fh:
                recs = [json.loads(line) for line in fh if line.strip()]
            assert len({(r["window_start"], r["pane_index"]) for r in recs}) == 1, f
            assert f"pane{recs[0]['pane_index']:05d}" in os.path.basename(f)
    rows = _jsonl(tmp_path / "out" / "answers-*.jsonl")
    last = {}
    for r in rows:
        last[r["window_start"]] = max(last.get(r["window_start"], -1), r["pane_index"])
    mech = task.make_mechanism()
    groups, times, per_group = _core_reports(mech, stage)
    want_starts = sorted({int(s) for s in (times // 2000) * 2000})
    got_starts = sorted(last)
    assert [_iso_ms(s) for s in got_starts] == want_starts
    from_models = {
        (m["window_start"], m["pane_index"], m["query_index"]): m["answer"] for m in range_queries.run_answer(
            ["--model", str(tmp_path / "out" / "models"), "--queries", str(tmp_path / "q.json")]
        )
    }  # fmt: skip
    total = 0
    for ws in got_starts:
        lo = _iso_ms(ws)
        in_window = (times >= lo) & (times < lo + 2000)
        keep = {g: np.flatnonzero(in_window[groups == g]) for g in per_group}
        model = _core_model(mech, per_group, keep)
        got = [r for r in rows if r["window_start"] == ws and r["pane_index"] == last[ws]]
        assert [r["query_index"] for r in got] == list(range(len(queries)))
        assert [r["answer"] for r in got] == model.answer(queries).tolist()
        want_std = [None if np.isnan(s) else s for s in model.answer_std(queries).tolist()]
        assert [r["std"] for r in got] == want_std
        assert all(r["n_reports"] == model.n_users for r in got)
        # the saved model of that pane answers the same
        assert [from_models[(ws, last[ws], r["query_index"])] for r in got] == [r["answer"] for r in got]
        total += model.n_users
    assert total == 20_000
    dl = []
    for f in glob.glob(str(tmp_path / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    assert sorted(r["reason"] for r in dl) == sorted(r for r, k in bad.items() for _ in range(k))


def _iso_ms(iso):
    import datetime as dt

    return int(round(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000))


def test_streaming_argument_checks(tmp_path, capsys):
    _task(tmp_path, "hdg", 1000)
    _write_queries(tmp_path, [RangeQuery.from_mapping({0: (0, 3)})])
    base = ["--task", str(tmp_path / "task.json"), "--queries", str(tmp_path / "q.json")]
    base += ["--output", str(tmp_path / "out")]
    watch = [*base, "--streaming", "--window_size", "60", "--input", str(tmp_path / "in" / "*.avro")]
    run = range_queries.run
    _fails(capsys, run, watch, "give --streaming_duration")  # the DirectRunner would never emit a window
    _fails(capsys, run, [*watch, "--streaming_duration", "1", "--watch_interval", "0"], "--watch_interval")
    _fails(capsys, run, [*base, "--input_subscription", "projects/p/subscriptions/s"], "needs --streaming")
    _fails(capsys, run, [*watch, "--input_topic", "projects/p/topics/t"], "exactly one")
    out_topic = [*watch, "--streaming_duration", "1", "--output_topic", "projects/p/topics/t"]
    _fails(capsys, run, out_topic, "unrecognized arguments: --output_topic")  # a frequency-job flag
    assert not (tmp_path / "out").exists()


BAD_ID = re.escape("task_id must be 1-128 characters of letters, digits, '.', '_' or '-', got 'rq demo!'")


def _bad_id_job(tmp_path):
    """A range task with the task_id "rq demo!", a query file and one (empty) input file."""
    obj = {
        "task_id": "rq demo!",
        "mechanism": "hdg",
        "epsilon": 1.0,
        "attributes": [{"name": n, "domain_size": 16} for n in NAMES],
        "expected_users": 100,
    }
    (tmp_path / "task.json").write_text(json.dumps(obj))
    _write_queries(tmp_path, [RangeQuery.from_mapping({0: (0, 3)})])
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "r.avro").write_bytes(b"")


def test_task_errors_and_wrong_kind_in_one_line(tmp_path, capsys):
    """The range job uses the one strict task validator: "rq demo!" fails with the frequency job's
    message; a frequency task is refused before the pipeline starts."""
    _bad_id_job(tmp_path)
    _fails(capsys, range_queries.run, _args(tmp_path, "out"), BAD_ID)
    (tmp_path / "task.json").write_text(
        json.dumps({"task_id": "f", "mechanism": "grr", "epsilon": 1, "domain_size": 4})
    )
    _fails(capsys, range_queries.run, _args(tmp_path, "out"), "'f' is a frequency task .*not a range task")
    assert not (tmp_path / "out").exists()


def test_simulator_and_pipeline_share_the_strict_validator(tmp_path, capsys):
    """The range simulator refuses "rq demo!" with the very message the range pipeline gives."""
    _bad_id_job(tmp_path)
    sim = ["--task", str(tmp_path / "task.json"), "--users", "10", "--output", str(tmp_path / "sim")]
    _fails(capsys, simulate_range.run, sim, BAD_ID)
    _fails(capsys, range_queries.run, _args(tmp_path, "out"), BAD_ID)
