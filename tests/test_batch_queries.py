"""Batch queries with the Gaussian matrix mechanism (central DP): task kind, aggregator, job, simulator.

Statistical tolerances are z = 5 from the stated standard errors; every generator comes from one
SeedSequence.
"""

from __future__ import annotations

import glob
import json
import re

import fastavro
import numpy as np
import pytest

import schemas
from ldp.aggregate import GLOBAL_WINDOW, GroupAccumulators, WindowInfo, accumulate, finalize_window
from ldp.aggregate.batch import (
    PRIVACY_MODEL,
    BatchAggregator,
    CellValidator,
    OsNormal,
    noise_rng,
    parse_workload_spec,
)
from ldp.matrix.mechanism import CALIBRATIONS, GaussianMatrixMechanism
from ldp.matrix.strategies import make_strategy
from ldp.matrix.workloads import allrange, range_set_matrix
from ldp.reports import Reports
from ldp.task import BATCH_CALIBRATIONS, TaskError, parse_task
from pipelines import batch_queries, simulate

SEEDS = np.random.SeedSequence(20261201).spawn(6)
Z = 5.0


def _obj(**kw):
    base = {
        "task_id": "bq-1",
        "kind": "batch_queries",
        "mechanism": "h2",
        "epsilon": 1.0,
        "delta": 1e-6,
        "attributes": [{"name": "age", "domain_size": 16}],
    }
    base.update(kw)
    return base


def _schema_errors(obj):
    """Errors of ``obj`` against schemas/task.schema.json: jsonschema when installed, else the structural
    checker of tests/test_schemas.py."""
    try:
        import jsonschema
    except ImportError:
        import importlib.util
        from pathlib import Path

        spec = importlib.util.spec_from_file_location(
            "_schema_checks", Path(__file__).with_name("test_schemas.py")
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        s = schemas.task_schema()
        return mod._errors(obj, s, s)
    return list(jsonschema.Draft202012Validator(schemas.task_schema()).iter_errors(obj))


# ---------------------------------------------------------------------------------------------------- task


def test_task_parses_and_round_trips():
    t = parse_task(_obj(mechanism="lsa", params={"k_max": 4}, max_contributions=2, calibration="paper"))
    assert t.kind == "batch_queries" and t.domain_sizes == (16,) and t.n_cells == 16 and t.n_groups == 1
    assert parse_task(t.to_dict()) == t
    assert BATCH_CALIBRATIONS == tuple(sorted(CALIBRATIONS, key=list(BATCH_CALIBRATIONS).index))
    assert set(BATCH_CALIBRATIONS) == set(CALIBRATIONS)


def test_task_lists_every_problem_at_once():
    bad = _obj(
        kind="batch_queries",
        delta=2.0,
        calibration="magic",
        max_contributions=0,
        n_groups=3,
        params={"k_max": 3},
        window={"size_s": 60, "accumulating": True},
        attributes=[{"name": "a", "domain_size": 128}, {"name": "b", "domain_size": 64}],
    )
    with pytest.raises(TaskError, match=r"problem\(s\)") as ei:
        parse_task(bad)
    text = "\n".join(ei.value.problems)
    for pattern in (
        "delta must be",
        "calibration must be",
        "max_contributions",
        "one group",
        "unknown key 'k_max' for strategy 'h2'",
        "release each record once",
        "8192 cells",
    ):
        assert pattern in text, (pattern, text)
    assert len(ei.value.problems) == 7


def test_kind_is_required():
    with pytest.raises(TaskError, match='must say "kind": "batch_queries"'):
        parse_task({k: v for k, v in _obj().items() if k != "kind"})
    with pytest.raises(TaskError, match="only valid for epsilon < 1"):
        parse_task(_obj(calibration="dwork_roth"))


def test_json_schema_agrees():
    good = [_obj(), _obj(mechanism="lsa", params={"k_max": 4}), _obj(mechanism="opt", window={"size_s": 60})]
    for obj in good:
        assert _schema_errors(obj) == []
        assert _schema_errors(parse_task(obj).to_dict()) == []
    for obj in (
        {k: v for k, v in _obj().items() if k != "kind"},
        {k: v for k, v in _obj().items() if k != "delta"},
        _obj(delta=0),
        _obj(calibration="magic"),
        _obj(window={"size_s": 60, "accumulating": True}),
        _obj(domain_size=16),
    ):
        assert _schema_errors(obj), obj
        with pytest.raises(TaskError, match=r"problem\(s\)"):
            parse_task(obj)


# ---------------------------------------------------------------------------------------------- workloads


def test_workload_specs_and_errors():
    t = parse_task(_obj(attributes=[{"name": "a", "domain_size": 4}, {"name": "b", "domain_size": 3}]))
    w = parse_workload_spec({"type": "allrange"}, t)
    explicit = allrange((4, 3)).matrix()
    assert np.array_equal(w.matrix().toarray(), explicit)  # same rows, same order as the core's W
    np.testing.assert_allclose(w.workload.gram, explicit.T @ explicit)
    r = parse_workload_spec({"type": "ranges", "ranges": [{"a": [1, 2]}, {"a": [0, 3], "b": [2, 2]}]}, t)
    assert r.lo.tolist() == [[1, 0], [0, 2]] and r.hi.tolist() == [[3, 3], [4, 3]]
    assert parse_workload_spec({"type": "identity"}, t).n_queries == 12
    for spec, pattern in [
        ({"type": "prefix"}, "1-D domain"),
        ({"type": "allrange", "shape": [4]}, "not the task's domain"),
        ({"type": "cubes"}, "workload type must be one of"),
        ({"type": "allrange", "extra": 1}, "unknown workload key"),
        ({"type": "ranges", "ranges": [{"c": [0, 1]}]}, "c"),
        ({"type": "ranges", "ranges": []}, "non-empty list"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            parse_workload_spec(spec, t)
    lsa_task = parse_task(_obj(mechanism="lsa"))
    with pytest.raises(ValueError, match="every cell covered"):
        BatchAggregator(
            lsa_task, parse_workload_spec({"type": "ranges", "ranges": [{"age": [0, 3]}]}, lsa_task)
        )


def test_validator_names_the_attribute():
    t = parse_task(_obj(attributes=[{"name": "a", "domain_size": 4}, {"name": "b", "domain_size": 3}]))
    v = CellValidator(t)
    ok, why = v.validate(Reports(items=np.array([[0, 0], [3, 2], [4, 0], [1, 3], [-1, 5]])))
    assert ok.tolist() == [True, True, False, False, False]
    assert (
        why[2] == "value of attribute 'a' outside [0, 3]"
        and why[3] == "value of attribute 'b' outside [0, 2]"
    )
    assert why[4].startswith("value of attribute 'a'")
    ok, why = v.validate(Reports(items=np.zeros((2, 1), np.int64)))
    assert not ok.any() and "2 coordinate(s)" in why[0]


# ---------------------------------------------------------------------------------------- aggregator core


def test_accumulator_is_exact_and_mergeable():
    t = parse_task(_obj(attributes=[{"name": "a", "domain_size": 4}, {"name": "b", "domain_size": 3}]))
    agg = BatchAggregator(t, parse_workload_spec({"type": "allrange"}, t), noise_seed=7)
    rng = np.random.default_rng(SEEDS[0])
    recs = np.stack([rng.integers(0, 4, 1000), rng.integers(0, 3, 1000)], axis=1)
    parts = [
        accumulate(agg, GroupAccumulators(), 0, Reports(items=recs[s : s + 250])) for s in range(0, 1000, 250)
    ]
    merged = agg.merge(0, [p.accs[0] for p in parts])
    truth = np.bincount(recs[:, 0] * 3 + recs[:, 1], minlength=12)
    assert merged.dtype == np.int64 and np.array_equal(merged, truth)
    one = accumulate(agg, GroupAccumulators(), 0, Reports(items=recs))
    a = finalize_window(agg, one)
    b = agg.finalize({0: merged}, GLOBAL_WINDOW)
    assert a == b  # same counts, same seeded draw


def test_noise_sources():
    w1 = WindowInfo(start_ms=0, end_ms=60_000)
    w2 = WindowInfo(start_ms=60_000, end_ms=120_000)
    assert noise_rng(3, w1).normal(size=4).tolist() == noise_rng(3, w1).normal(size=4).tolist()
    assert noise_rng(3, w1).normal(size=4).tolist() != noise_rng(3, w2).normal(size=4).tolist()
    assert noise_rng(3, GLOBAL_WINDOW).normal(size=4).tolist() != noise_rng(3, w1).normal(size=4).tolist()
    # OS CSPRNG normals: mean and variance within z = 5 of their standard errors (1/sqrt(T), sqrt(2/T))
    t = 200_000
    z = OsNormal().normal(0.0, 2.0, size=t) / 2.0
    assert abs(z.mean()) <= Z / np.sqrt(t)
    assert abs(z.var() - 1.0) <= Z * np.sqrt(2.0 / t)


def test_std_matches_monte_carlo_error():
    """Seeded noise draws on AllRange(16) through H2: the per-query variance of the answers and the total
    squared error against the aggregator's std.

    Per query, the sample variance of T Gaussian errors has relative standard error sqrt(2 / T); the total
    squared error sum_q e_q^2 has mean tr(S) and relative standard error sqrt(2 tr(S^2) / T) / tr(S),
    S = sigma^2 W (A^T A)^+ W^T (the answers' covariance). Tolerance: z = 5 of those.
    """
    t_draws = 3000
    task = parse_task(_obj())
    agg = BatchAggregator(task, parse_workload_spec({"type": "allrange"}, task))
    counts = np.random.default_rng(SEEDS[1]).integers(0, 500, 16)
    w = agg.workload.matrix().toarray()
    truth = w @ counts
    rng = np.random.default_rng(SEEDS[2])
    errs = np.empty((t_draws, w.shape[0]))
    for i in range(t_draws):
        ans, std = agg.answer_counts(counts, rng)
        errs[i] = ans - truth
    pinv = np.linalg.pinv(agg.strategy.matrix.T @ agg.strategy.matrix)
    s = agg.mechanism.noise_variance * (w @ pinv @ w.T)
    np.testing.assert_allclose(std**2, np.diag(s), rtol=1e-9)
    per_query = (errs**2).mean(axis=0) / std**2
    assert np.max(np.abs(per_query - 1)) <= Z * np.sqrt(2.0 / t_draws), np.max(np.abs(per_query - 1))
    sse = (errs**2).sum(axis=1)
    rse = np.sqrt(2 * np.trace(s @ s) / t_draws) / np.trace(s)
    assert abs(sse.mean() / np.trace(s) - 1) <= Z * rse
    assert np.all(np.abs(errs.mean(axis=0)) <= Z * std / np.sqrt(t_draws))  # unbiased


# --------------------------------------------------------------------------------------- the job, end to end


@pytest.fixture(scope="module")
def allrange_run(tmp_path_factory):
    """AllRange(64) through LSA: 50,000 simulated users with bad records, the job with a noise seed."""
    tmp = tmp_path_factory.mktemp("bq")
    obj = _obj(task_id="bq-e2e", mechanism="lsa", attributes=[{"name": "age", "domain_size": 64}])
    (tmp / "task.json").write_text(json.dumps(obj))
    (tmp / "w.json").write_text(json.dumps({"type": "allrange", "shape": [64]}))
    task = parse_task(obj)
    truth = simulate.simulate_files(
        task, 50_000, "gaussian", tmp / "in", seed=int(SEEDS[3].generate_state(1)[0]), files=3, inject_bad=2
    )
    argv = ["--task", str(tmp / "task.json"), "--input", str(tmp / "in" / "*.avro"), "--workload",
            str(tmp / "w.json"), "--output", str(tmp / "out"), "--noise_seed", "11"]  # fmt: skip
    summary = batch_queries.run(argv)
    rows = []
    for f in sorted(glob.glob(str(tmp / "out" / "answers-*.jsonl"))):
        rows += [json.loads(line) for line in open(f)]
    rows.sort(key=lambda r: r["query_index"])
    return {"tmp": tmp, "task": task, "truth": truth, "summary": summary, "rows": rows, "argv": argv}


def test_job_answers_equal_the_core_exactly(allrange_run):
    task, rows = allrange_run["task"], allrange_run["rows"]
    counts = np.asarray(allrange_run["truth"]["cell_counts"], dtype=float)
    assert counts.sum() == 50_000
    wl = allrange((64,))
    mech = GaussianMatrixMechanism(make_strategy("lsa", wl), 1.0, 1e-6, calibration="analytic")
    a, b = np.triu_indices(65, k=1)
    w = range_set_matrix((64,), a[:, None], b[:, None])
    ans, std = mech.answer(counts, w, rng=noise_rng(11, GLOBAL_WINDOW))
    assert len(rows) == 2080 and [r["query_index"] for r in rows] == list(range(2080))
    assert [r["answer"] for r in rows] == ans.tolist()
    assert [r["std"] for r in rows] == std.tolist()
    assert [r["query"]["age"] for r in rows] == [[int(x), int(y) - 1] for x, y in zip(a, b)]
    assert {r["privacy_model"] for r in rows} == {PRIVACY_MODEL}
    assert {r["noise_source"] for r in rows} == {"seeded (simulation only, not private)"}
    assert {r["noise_sigma"] for r in rows} == {mech.sigma}
    (avro_file,) = glob.glob(str(allrange_run["tmp"] / "out" / "answers-*.avro"))
    with open(avro_file, "rb") as fh:
        arecs = sorted(fastavro.reader(fh), key=lambda r: r["query_index"])
    assert [r["answer"] for r in arecs] == ans.tolist() and [r["std"] for r in arecs] == std.tolist()
    assert task.mechanism == "lsa"


def test_job_answers_are_within_their_std(allrange_run):
    """Each standardized error is N(0, 1); over 2080 queries |z| > 6 has probability < 2080 * 2e-9."""
    rows = allrange_run["rows"]
    counts = np.asarray(allrange_run["truth"]["cell_counts"])
    csum = np.concatenate([[0], np.cumsum(counts)])
    z = [
        (r["answer"] - (csum[r["query"]["age"][1] + 1] - csum[r["query"]["age"][0]])) / r["std"] for r in rows
    ]
    assert np.max(np.abs(z)) <= 6.0


def test_job_dead_letters_with_reasons(allrange_run):
    c = allrange_run["summary"]["counts"]
    bad = allrange_run["truth"]["bad_records"]
    assert (
        c["accepted"] == 50_000
        and c["rejected"] == sum(bad.values())
        and c["read"] == c["accepted"] + c["rejected"]
    )
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    assert {"wrong_task", "out_of_domain", "missing_field", "invalid_payload"} <= set(bad)
    dl = []
    for f in glob.glob(str(allrange_run["tmp"] / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    reasons: dict[str, int] = {}
    for r in dl:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    assert reasons == bad and all(r["detail"] for r in dl)
    assert any("attribute 'age' outside [0, 63]" in r["detail"] for r in dl if r["reason"] == "out_of_domain")


def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as ei:
        batch_queries.run(argv)
    assert ei.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and re.search(pattern, err[0]), err


def test_job_refuses_bad_inputs(allrange_run, capsys, tmp_path):
    argv = [a if a != str(allrange_run["tmp"] / "out") else str(tmp_path / "o") for a in allrange_run["argv"]]
    _fails(capsys, [*argv, "--accumulating"], "release each record once")
    bad_w = tmp_path / "bad.json"
    bad_w.write_text(json.dumps({"type": "prefix", "shape": [32]}))
    i = argv.index("--workload")
    _fails(capsys, [*argv[: i + 1], str(bad_w), *argv[i + 2 :]], "not the task's domain")
    _fails(capsys, [*argv[:-1], "-3"], "noise_seed")
    freq = tmp_path / "f.json"
    freq.write_text(json.dumps({"task_id": "f", "mechanism": "olh", "epsilon": 1.0, "domain_size": 8}))
    _fails(capsys, ["--task", str(freq), *argv[2:]], "not a batch_queries task")


def test_windowed_job_draws_noise_per_window(tmp_path):
    """Two event-time windows: each window's answers are the core's on that window's counts with that
    window's seeded draw (noise_rng of the window start), so windows never share a noise draw."""
    t0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    obj = _obj(task_id="bq-win", mechanism="h2", attributes=[{"name": "age", "domain_size": 16}])
    (tmp_path / "task.json").write_text(json.dumps(obj))
    (tmp_path / "w.json").write_text(json.dumps({"type": "prefix"}))
    task = parse_task(obj)
    simulate.simulate_files(
        task, 4000, "uniform", tmp_path / "in", seed=9, files=2, start_ms=t0, duration_s=7200
    )
    argv = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"), "--workload",
            str(tmp_path / "w.json"), "--output", str(tmp_path / "out"), "--noise_seed", "5",
            "--window_size", "3600"]  # fmt: skip
    batch_queries.run(argv)
    recs = []
    for f in sorted(glob.glob(str(tmp_path / "in" / "reports-*.avro"))):
        with open(f, "rb") as fh:
            recs += list(fastavro.reader(fh))
    times = np.array([int(r["event_time"].timestamp() * 1000) for r in recs])
    cells = np.array([r["items"][0] for r in recs])
    mech = GaussianMatrixMechanism(make_strategy("h2", allrange((16,))), 1.0, 1e-6)
    w = range_set_matrix((16,), np.zeros((16, 1), int), np.arange(1, 17)[:, None])
    for k in range(2):
        start, end = t0 + k * 3_600_000, t0 + (k + 1) * 3_600_000
        (path,) = glob.glob(str(tmp_path / "out" / f"answers-2026-01-01T{k:02d}:00:00-*.jsonl"))
        rows = sorted((json.loads(line) for line in open(path)), key=lambda r: r["query_index"])
        counts = np.bincount(cells[(times >= start) & (times < end)], minlength=16).astype(float)
        ans, std = mech.answer(counts, w, rng=noise_rng(5, WindowInfo(start_ms=start, end_ms=end)))
        assert [r["answer"] for r in rows] == ans.tolist() and [r["std"] for r in rows] == std.tolist()
        assert rows[0]["window_start"].startswith(f"2026-01-01T{k:02d}:00:00")


def test_product_domain_job_with_opt_and_explicit_ranges(tmp_path):
    """A 2-D domain (items = two coordinates) through the job with the OPT strategy and an explicit range
    list; answers equal the core's on the simulated counts with the same seeded draw."""
    attrs = [{"name": "a", "domain_size": 6}, {"name": "b", "domain_size": 5}]
    obj = _obj(task_id="bq-2d", mechanism="opt", attributes=attrs, calibration="paper", max_contributions=2)
    (tmp_path / "task.json").write_text(json.dumps(obj))
    ranges = [{"a": [0, 5], "b": [0, 0]}, {"a": [1, 3]}, {"b": [2, 4]}, {"a": [5, 5], "b": [4, 4]}]
    ranges += [{"a": [i, i], "b": [j, j]} for i in range(6) for j in range(5)]  # every cell covered
    (tmp_path / "w.json").write_text(json.dumps({"type": "ranges", "ranges": ranges}))
    task = parse_task(obj)
    truth = simulate.simulate_files(task, 3000, "gaussian", tmp_path / "in", seed=4, files=2, inject_bad=1)
    argv = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"), "--workload",
            str(tmp_path / "w.json"), "--output", str(tmp_path / "out"), "--noise_seed", "3"]  # fmt: skip
    summary = batch_queries.run(argv)
    assert summary["counts"]["accepted"] == 3000
    (path,) = glob.glob(str(tmp_path / "out" / "answers-*.jsonl"))
    rows = sorted((json.loads(line) for line in open(path)), key=lambda r: r["query_index"])
    wl = parse_workload_spec({"type": "ranges", "ranges": ranges}, task)
    mech = GaussianMatrixMechanism(make_strategy("opt", wl.workload), 1.0, 1e-6, calibration="paper",
                                   max_contributions=2)  # fmt: skip
    counts = np.asarray(truth["cell_counts"], dtype=float)
    ans, std = mech.answer(counts, wl.matrix(), rng=noise_rng(3, GLOBAL_WINDOW))
    assert [r["answer"] for r in rows] == ans.tolist() and [r["std"] for r in rows] == std.tolist()
    assert rows[1]["query"] == {"a": [1, 3], "b": [0, 4]} and rows[0]["max_contributions"] == 2
    assert rows[0]["noise_sigma"] == mech.sigma == 2 * mech.c * mech.strategy.sensitivity()
