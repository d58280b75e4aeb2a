"""Batch queries with the discrete Gaussian matrix mechanism (central DP): task kind, aggregator, job,
simulator, the floating-point distinguisher, reruns, dead letters and the store.

Statistical tolerances are z = 5 from the stated standard errors; every generator comes from one
SeedSequence, every noise stream from a seeded (public) PRF key.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import sqlite3

import fastavro
import numpy as np
import pytest

import schemas
import simulator
from ldp.aggregate import GLOBAL_WINDOW, GroupAccumulators, WindowInfo, accumulate, finalize_window
from ldp.dgauss import PrfStream
from ldp.kinds.batch_queries.aggregate import (
    PRIVACY_MODEL,
    BatchAggregator,
    CellValidator,
    noise_context,
    parse_workload_spec,
    seed_key,
)
from ldp.kinds.batch_queries.task import BATCH_CALIBRATIONS
from ldp.matrix.discrete import DiscreteGaussianMatrixMechanism
from ldp.matrix.mechanism import CALIBRATIONS
from ldp.matrix.strategies import make_strategy
from ldp.matrix.workloads import allrange, range_set_matrix
from ldp.reports import Reports
from ldp.task import TaskError, parse_task
from pipelines import batch_queries

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


def _stream(seed, task, workload, mech, window, counts):
    """The seeded noise stream the aggregator uses for one pane (the job with ``--noise_seed``)."""
    return PrfStream(seed_key(seed), noise_context(task, workload, mech, window, np.asarray(counts)))


def test_noise_streams_are_keyed_on_window_pane_and_counts():
    task = parse_task(_obj(mechanism="identity", attributes=[{"name": "age", "domain_size": 8}]))
    agg = BatchAggregator(task, parse_workload_spec({"type": "identity"}, task), noise_seed=3)
    counts = np.arange(8, dtype=np.int64)
    w1 = WindowInfo(start_ms=0, end_ms=60_000)
    w2 = WindowInfo(start_ms=60_000, end_ms=120_000)

    def noise(window, c):
        return agg.answer_counts(c, agg.noise_stream(window, c))[0] - c

    base = noise(w1, counts)
    assert np.array_equal(base, noise(w1, counts))  # a retry or rerun: the same release
    assert not np.array_equal(base, noise(w2, counts))
    assert not np.array_equal(base, noise(GLOBAL_WINDOW, counts))
    assert not np.array_equal(base, noise(WindowInfo(start_ms=0, end_ms=60_000, pane_index=1), counts))
    other = counts.copy()
    other[5] += 1
    assert not np.array_equal(base, noise(w1, other))  # other counts: independent noise
    keyed = BatchAggregator(task, agg.workload, noise_key=b"k" * 32)
    assert keyed.noise_source_name == "discrete_gaussian/keyed_prf"
    assert not np.array_equal(base, keyed.answer_counts(counts, keyed.noise_stream(w1, counts))[0] - counts)
    assert np.all(base == np.round(base))  # identity: the answers are the integer measurements


@pytest.mark.statistical
def test_std_matches_monte_carlo_error():
    """Discrete Gaussian draws on AllRange(16) through H2: the per-query variance of the answers and the
    total squared error against the aggregator's std.

    S = W A^+ diag(v) A^+T W^T, v_i the exact variance of each row's discrete Gaussian noise (slightly
    below sigma^2). Per query, the sample variance of T errors has relative standard error sqrt(2 / T)
    (the errors are sums of discrete Gaussians of sigma ~ 10, kurtosis 3 to 1e-30); the total squared error
    sum_q e_q^2 has mean tr(S) and relative standard error sqrt(2 tr(S^2) / T) / tr(S). Tolerance: z = 5.
    """
    t_draws = 3000
    task = parse_task(_obj())
    agg = BatchAggregator(task, parse_workload_spec({"type": "allrange"}, task))
    counts = np.random.default_rng(SEEDS[1]).integers(0, 500, 16)
    w = agg.workload.matrix().toarray()
    truth = w @ counts
    src = PrfStream(seed_key(int(SEEDS[2].generate_state(1)[0])), b"monte carlo")
    errs = np.empty((t_draws, w.shape[0]))
    for i in range(t_draws):
        ans, std = agg.answer_counts(counts, src)
        errs[i] = ans - truth
    mech = agg.mechanism
    lmat = np.linalg.pinv(mech.a)
    s = w @ (lmat * mech.row_variance) @ lmat.T @ w.T
    np.testing.assert_allclose(std**2, np.diag(s), rtol=1e-9)
    assert np.all(mech.row_variance <= float(mech.sigma2))  # N_Z(0, s^2) has variance <= s^2
    per_query = (errs**2).mean(axis=0) / std**2
    assert np.max(np.abs(per_query - 1)) <= Z * np.sqrt(2.0 / t_draws), np.max(np.abs(per_query - 1))
    sse = (errs**2).sum(axis=1)
    rse = np.sqrt(2 * np.trace(s @ s) / t_draws) / np.trace(s)
    assert abs(sse.mean() / np.trace(s) - 1) <= Z * rse
    assert np.all(np.abs(errs.mean(axis=0)) <= Z * std / np.sqrt(t_draws))  # unbiased


# ------------------------------------------------------------------------------ floating-point distinguisher


def _cp_bounds(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (each at confidence 1 - alpha) of a binomial proportion."""
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def _log_ratio_lower_bound(t0: np.ndarray, t1: np.ndarray, alpha: float = 1e-6) -> float:
    """The largest lower bound on |ln P0[T] / P1[T]| over T and not-T, both directions (Clopper-Pearson at
    1e-6 per bound): what the statistic proves about the privacy loss."""
    best = -math.inf
    for a0, a1 in ((t0, t1), (~t0, ~t1), (t1, t0), (~t1, ~t0)):
        lo, _ = _cp_bounds(int(a0.sum()), a0.size, alpha)
        _, hi = _cp_bounds(int(a1.sum()), a1.size, alpha)
        if lo > 0:
            best = max(best, math.log(lo / hi))
    return best


def _old_os_normal(rng: np.random.Generator, scale: float, size: int) -> np.ndarray:
    """The former floating-point sampler (negative control): scale * ndtri((k + 0.5) 2^-53)."""
    from scipy import special

    bits = rng.integers(0, 1 << 53, size=size, dtype=np.uint64)
    return scale * special.ndtri((bits.astype(np.float64) + 0.5) * 2.0**-53)


def _old_sampler_can_produce(a: np.ndarray, x: float, scale: float) -> np.ndarray:
    """Whether fl(x + z) == a for some z = scale * ndtri((k + 0.5) 2^-53) the old sampler can draw (k near
    the inverse of a; the inverse CDF is monotone, so a window of k's around it suffices)."""
    from scipy import special

    k0 = np.floor(special.ndtr((a - x) / scale) * 2.0**53 - 0.5)
    hit = np.zeros(a.shape, dtype=bool)
    for dk in range(-64, 65):
        k = np.clip(k0 + dk, 0, 2.0**53 - 1)
        hit |= (x + scale * special.ndtri((k + 0.5) * 2.0**-53)) == a
    return hit


def _statistics(a: np.ndarray, scale: float) -> dict[str, np.ndarray]:
    """Binary test statistics of published values ``a`` (float64): the floating-point side channels."""
    bits = a.view(np.uint64)
    return {
        "old_sampler_from_0": _old_sampler_can_produce(a, 0.0, scale),
        "integer": a == np.round(a),
        "mantissa_lsb": (bits & np.uint64(1)) == 1,
        "mantissa_low8_zero": (bits & np.uint64(0xFF)) == 0,
        "frac_below_half": (a - np.floor(a)) < 0.5,
    }


EPS_DISTINGUISH = 0.1


@pytest.mark.statistical
def test_fp_distinguisher_flags_the_old_float_sampler():
    """Negative control: the former path (identity strategy, answer fl(x + z), z from the inverse-CDF
    sampler) at eps = 0.1 is flagged: a count of 0 always gives a value the sampler can produce."""
    from ldp.matrix.mechanism import analytic_gaussian_calibration

    scale = analytic_gaussian_calibration(EPS_DISTINGUISH, 1e-6)
    rng = np.random.default_rng(SEEDS[4])
    n = 600
    a0 = 0.0 + _old_os_normal(rng, scale, n)
    a1 = 1.0 + _old_os_normal(rng, scale, n)
    t0, t1 = _statistics(a0, scale)["old_sampler_from_0"], _statistics(a1, scale)["old_sampler_from_0"]
    assert t0.all() and t1.mean() < 0.5
    assert _log_ratio_lower_bound(t0, t1) > EPS_DISTINGUISH


@pytest.mark.parametrize("strategy", ["identity", "h2", "haar", "lsa", "opt"])
@pytest.mark.statistical
def test_fp_distinguisher_finds_nothing_in_the_job_answers(strategy):
    """Neighbouring datasets (cell 3 holds 0 or 1 records, the rest equal), 600 releases each through the
    aggregator at eps = 0.1: no statistic of the published answers of the singleton query [3, 3] and of
    the total separates them beyond eps (Clopper-Pearson lower bound on the log-ratio, 1e-6 per bound)."""
    obj = _obj(task_id=f"fp-{strategy}", mechanism=strategy, epsilon=EPS_DISTINGUISH,
               attributes=[{"name": "age", "domain_size": 8}])  # fmt: skip
    task = parse_task(obj)
    workload = parse_workload_spec({"type": "allrange"}, task)
    agg = BatchAggregator(task, workload)
    single = int(np.flatnonzero((workload.lo[:, 0] == 3) & (workload.hi[:, 0] == 4))[0])
    total = int(np.flatnonzero((workload.lo[:, 0] == 0) & (workload.hi[:, 0] == 8))[0])
    base = np.array([5, 0, 2, 0, 7, 1, 0, 3], dtype=np.int64)
    key = seed_key(int(SEEDS[5].generate_state(1)[0]))
    n = 600
    published = {}
    for d in (0, 1):
        counts = base.copy()
        counts[3] = d
        src = PrfStream(key, f"{strategy} dataset {d}".encode())
        published[d] = np.array([agg.answer_counts(counts, src)[0][[single, total]] for _ in range(n)])
    scale = agg.mechanism.sigma
    worst = {}
    for q in range(2):
        s0, s1 = _statistics(published[0][:, q], scale), _statistics(published[1][:, q], scale)
        for name in s0:
            worst[(q, name)] = _log_ratio_lower_bound(s0[name], s1[name])
    assert max(worst.values()) <= EPS_DISTINGUISH, worst


# --------------------------------------------------------------------------------------- the job, end to end


@pytest.fixture(scope="module")
def allrange_run(tmp_path_factory):
    """AllRange(64) through LSA: 50,000 simulated users with bad records, the job with a noise seed."""
    tmp = tmp_path_factory.mktemp("bq")
    obj = _obj(task_id="bq-e2e", mechanism="lsa", attributes=[{"name": "age", "domain_size": 64}])
    (tmp / "task.json").write_text(json.dumps(obj))
    (tmp / "w.json").write_text(json.dumps({"type": "allrange", "shape": [64]}))
    task = parse_task(obj)
    truth = simulator.simulate_files(
        task, 50_000, "gaussian", tmp / "in", seed=int(SEEDS[3].generate_state(1)[0]), files=3, inject_bad=2
    )
    argv = ["--task", str(tmp / "task.json"), "--input", str(tmp / "in" / "*.avro"), "--workload",
            str(tmp / "w.json"), "--output", str(tmp / "out"), "--noise_seed", "11",
            "--store", f"sqlite:///{tmp / 'store.db'}"]  # fmt: skip
    summary = batch_queries.run(argv)
    rows = []
    for f in sorted(glob.glob(str(tmp / "out" / "answers-*.jsonl"))):
        rows += [json.loads(line) for line in open(f)]
    rows.sort(key=lambda r: r["query_index"])
    return {"tmp": tmp, "task": task, "truth": truth, "summary": summary, "rows": rows, "argv": argv}


@pytest.mark.integration
def test_job_answers_equal_the_core_exactly(allrange_run):
    task, rows = allrange_run["task"], allrange_run["rows"]
    counts = np.asarray(allrange_run["truth"]["cell_counts"], dtype=float)
    assert counts.sum() == 50_000
    wl = allrange((64,))
    mech = DiscreteGaussianMatrixMechanism(make_strategy("lsa", wl), 1.0, 1e-6, calibration="analytic")
    a, b = np.triu_indices(65, k=1)
    w = range_set_matrix((64,), a[:, None], b[:, None])
    workload = parse_workload_spec({"type": "allrange", "shape": [64]}, task)
    counts = counts.astype(np.int64)
    ans, std = mech.answer(counts, w, _stream(11, task, workload, mech, GLOBAL_WINDOW, counts))
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


@pytest.mark.integration
def test_job_answers_are_within_their_std(allrange_run):
    """Each standardized error is N(0, 1); over 2080 queries |z| > 6 has probability < 2080 * 2e-9."""
    rows = allrange_run["rows"]
    counts = np.asarray(allrange_run["truth"]["cell_counts"])
    csum = np.concatenate([[0], np.cumsum(counts)])
    z = [
        (r["answer"] - (csum[r["query"]["age"][1] + 1] - csum[r["query"]["age"][0]])) / r["std"] for r in rows
    ]
    assert np.max(np.abs(z)) <= 6.0


@pytest.mark.integration
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


@pytest.mark.integration
def test_job_dead_letters_keep_no_raw_record(allrange_run):
    """Central DP: a refused record (of this task or of another) keeps its reason and size, never its
    fields."""
    dl = []
    for f in glob.glob(str(allrange_run["tmp"] / "out" / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            dl += list(fastavro.reader(fh))
    assert dl and {r["reason"] for r in dl} >= {"wrong_task", "out_of_domain"}
    for r in dl:
        assert r["raw_bytes"] is None
        if r["raw_record"] is not None:
            kept = json.loads(r["raw_record"])
            assert set(kept) == {"redacted", "chars"}, kept
            assert kept["chars"] is None or kept["chars"] > 0


@pytest.mark.integration
def test_job_publishes_no_exact_counts_to_the_store(allrange_run):
    """Central DP: the store (and so the dashboard) gets the noisy answers, never the exact record counts;
    OUT/counts.json keeps them for the operator, labelled as not for publication."""
    db = sqlite3.connect(str(allrange_run["tmp"] / "store.db"))
    try:
        assert db.execute("SELECT COUNT(*) FROM ldp_counts").fetchone()[0] == 0
        (summary_json,) = db.execute("SELECT summary_json FROM ldp_tasks WHERE task_id = 'bq-e2e'").fetchone()
        assert db.execute("SELECT COUNT(*) FROM ldp_current WHERE task_id = 'bq-e2e'").fetchone()[0] == 2080
        runs = [r[0] for r in db.execute("SELECT summary_json FROM ldp_runs") if r[0]]
    finally:
        db.close()
    run = json.loads(summary_json).get("run", {})
    assert "counts" not in run and "counts" not in json.loads(summary_json)
    assert "50000" not in summary_json  # the accepted count appears nowhere
    assert runs and all("counts" not in json.loads(r) and "50000" not in r for r in runs)
    local = json.loads((allrange_run["tmp"] / "out" / "counts.json").read_text())
    assert local["counts"]["accepted"] == 50_000 and "not to publish" in local["counts_private"]


def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as ei:
        batch_queries.run(argv)
    assert ei.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and re.search(pattern, err[0]), err


@pytest.mark.integration
def test_job_refuses_bad_inputs(allrange_run, capsys, tmp_path):
    argv = [a if a != str(allrange_run["tmp"] / "out") else str(tmp_path / "o") for a in allrange_run["argv"]]
    argv = argv[: argv.index("--store")]  # ends with --noise_seed 11
    _fails(capsys, [*argv, "--accumulating"], "release each record once")
    bad_w = tmp_path / "bad.json"
    bad_w.write_text(json.dumps({"type": "prefix", "shape": [32]}))
    i = argv.index("--workload")
    _fails(capsys, [*argv[: i + 1], str(bad_w), *argv[i + 2 :]], "not the task's domain")
    _fails(capsys, [*argv[:-1], "-3"], "noise_seed")
    _fails(capsys, [*argv, "--noise_key_file", str(tmp_path / "k")], "--noise_key_file or --noise_seed")
    paper16 = tmp_path / "paper16.json"
    paper16.write_text(json.dumps({**allrange_run["task"].to_dict(), "epsilon": 16.0, "calibration": "paper"},
                                  indent=None))  # fmt: skip
    _fails(capsys, ["--task", str(paper16), *argv[2:]], r"calibration 'paper' is not \(16, 1e-06\)-DP.*6\.7")
    freq = tmp_path / "f.json"
    freq.write_text(json.dumps({"task_id": "f", "mechanism": "olh", "epsilon": 1.0, "domain_size": 8}))
    _fails(capsys, ["--task", str(freq), *argv[2:]], "not a batch_queries task")


@pytest.mark.integration
def test_windowed_job_draws_noise_per_window(tmp_path):
    """Two event-time windows: each window's answers are the core's on that window's counts with that
    window's seeded stream (keyed on the window), so windows never share a noise draw."""
    t0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    obj = _obj(task_id="bq-win", mechanism="h2", attributes=[{"name": "age", "domain_size": 16}])
    (tmp_path / "task.json").write_text(json.dumps(obj))
    (tmp_path / "w.json").write_text(json.dumps({"type": "prefix"}))
    task = parse_task(obj)
    simulator.simulate_files(
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
    mech = DiscreteGaussianMatrixMechanism(make_strategy("h2", allrange((16,))), 1.0, 1e-6)
    workload = parse_workload_spec({"type": "prefix"}, task)
    w = range_set_matrix((16,), np.zeros((16, 1), int), np.arange(1, 17)[:, None])
    for k in range(2):
        start, end = t0 + k * 3_600_000, t0 + (k + 1) * 3_600_000
        (path,) = glob.glob(str(tmp_path / "out" / f"answers-2026-01-01T{k:02d}:00:00-*.jsonl"))
        rows = sorted((json.loads(line) for line in open(path)), key=lambda r: r["query_index"])
        counts = np.bincount(cells[(times >= start) & (times < end)], minlength=16).astype(np.int64)
        window = WindowInfo(start_ms=start, end_ms=end)
        ans, std = mech.answer(counts, w, _stream(5, task, workload, mech, window, counts))
        assert [r["answer"] for r in rows] == ans.tolist() and [r["std"] for r in rows] == std.tolist()
        assert rows[0]["window_start"].startswith(f"2026-01-01T{k:02d}:00:00")


@pytest.mark.integration
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
    truth = simulator.simulate_files(task, 3000, "gaussian", tmp_path / "in", seed=4, files=2, inject_bad=1)
    argv = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"), "--workload",
            str(tmp_path / "w.json"), "--output", str(tmp_path / "out"), "--noise_seed", "3"]  # fmt: skip
    summary = batch_queries.run(argv)
    assert summary["counts"]["accepted"] == 3000
    (path,) = glob.glob(str(tmp_path / "out" / "answers-*.jsonl"))
    rows = sorted((json.loads(line) for line in open(path)), key=lambda r: r["query_index"])
    wl = parse_workload_spec({"type": "ranges", "ranges": ranges}, task)
    mech = DiscreteGaussianMatrixMechanism(make_strategy("opt", wl.workload), 1.0, 1e-6, calibration="paper",
                                           max_contributions=2)  # fmt: skip
    counts = np.asarray(truth["cell_counts"], dtype=np.int64)
    ans, std = mech.answer(counts, wl.matrix(), _stream(3, task, wl, mech, GLOBAL_WINDOW, counts))
    assert [r["answer"] for r in rows] == ans.tolist() and [r["std"] for r in rows] == std.tolist()
    assert rows[1]["query"] == {"a": [1, 3], "b": [0, 4]} and rows[0]["max_contributions"] == 2
    assert mech.istrategy.kind == "quantised"  # OPT's real rows, measured as B = round(2^k A)
    # sigma = 2 * c * Delta_2(B) / scale (paper's c), up to B's rounding and sigma^2 rounded up to 2^-32
    c = CALIBRATIONS["paper"](1.0, 1e-6)
    assert rows[0]["noise_sigma"] == mech.sigma
    assert 0 <= mech.sigma / (c * mech.sensitivity) - 1 <= 1e-9  # mech.sensitivity: k Delta_2(B) / scale
    assert abs(mech.sensitivity / (2 * mech.strategy.sensitivity()) - 1) <= 1e-3


@pytest.mark.integration
def test_rerun_republishes_the_same_release(tmp_path):
    """A rerun (or a retry after kill -9) over the same records with the same noise key writes the
    identical answers; one more record is a new release with independent noise. The key file is created
    next to the task, mode 0600, on first use."""
    obj = _obj(task_id="bq-rerun", mechanism="h2", attributes=[{"name": "age", "domain_size": 16}])
    task_path = tmp_path / "task.json"
    task_path.write_text(json.dumps(obj))
    (tmp_path / "w.json").write_text(json.dumps({"type": "prefix"}))
    task = parse_task(obj)
    truth = simulator.simulate_files(task, 2000, "uniform", tmp_path / "in", seed=21, files=2)

    def run(inputs: str, out: str) -> list[float]:
        w = str(tmp_path / "w.json")
        batch_queries.run(["--task", str(task_path), "--input", inputs, "--workload", w, "--output",
                           str(tmp_path / out), "--overwrite"])  # fmt: skip
        (path,) = glob.glob(str(tmp_path / out / "answers-*.jsonl"))
        rows = sorted((json.loads(line) for line in open(path)), key=lambda r: r["query_index"])
        assert {r["noise_source"] for r in rows} == {"discrete_gaussian/keyed_prf"}
        return [r["answer"] for r in rows]

    first = run(str(tmp_path / "in" / "*.avro"), "a")
    key = tmp_path / "task.json.noise_key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32
    assert run(str(tmp_path / "in" / "*.avro"), "a") == first  # the same output directory, overwritten
    # one more record in cell 0: every prefix moves by exactly 1 under the same noise; it must not
    extra = tmp_path / "in" / "zz-extra.avro"
    recs = [{"task_id": "bq-rerun", "schema_version": 2, "event_time": 1_767_225_600_000, "group": 0,
             "items": [0]}]  # fmt: skip
    with open(extra, "wb") as fh:
        fastavro.writer(fh, fastavro.parse_schema(schemas.report_schema()), recs)
    more = run(str(tmp_path / "in" / "*.avro"), "c")
    shift = np.asarray(more) - np.asarray(first)
    assert not np.allclose(shift, 1.0)
    csum = np.cumsum(truth["cell_counts"])
    assert np.all(np.abs(np.asarray(first) - csum) < 8 * 30)  # sanity: answers near the truth (sigma ~ 10)
    os.chmod(key, 0o644)
    with pytest.raises(SystemExit):
        run(str(tmp_path / "in" / "*.avro"), "d")  # a key readable by others is refused
