"""The LDP ``lsa`` range mechanism: LSA-chosen user groups, GLS with the public user count, 1-D and 2-D.

Statistical tolerances are z = 5 of the stated standard errors; generators come from one SeedSequence.
"""

from __future__ import annotations

import glob
import json

import fastavro
import numpy as np
import pytest

import simulator
from ldp.matrix.lsa import lsa
from ldp.matrix.workloads import allrange
from ldp.rangequery.lsa import LSAMechanism, LSAModel, cell_grid, lsa_levels
from ldp.rangequery.queries import RangeQuery, random_queries, true_answers
from ldp.rangequery.registry import METHODS, make_mechanism, model_from_dict
from ldp.reports import Reports
from ldp.task import TaskError, parse_task
from pipelines import range_queries

SEEDS = np.random.SeedSequence(20261202).spawn(6)
Z = 5.0


def test_registered_and_levels_are_lsa_partitions():
    assert "lsa" in METHODS
    m = make_mechanism("lsa", 1.0, [64], 10_000)
    assert isinstance(m, LSAMechanism) and m.cell_dims == (64,) and m.widths == (1,)
    s = lsa(allrange((64,)))
    assert m.n_groups == s.levels  # one group per level, duplicates included (none here has one block)
    for g, lab in enumerate(s.info["level_labels"]):
        _, inv = np.unique(lab, return_inverse=True)
        assert np.array_equal(m.levels[g], inv)
    assert m.levels[0].tolist() == list(range(64))  # LSA's identity level
    for g in range(m.n_groups):
        b = m.blocks(g)
        assert m.group_oracle(g).name == ("grr" if b < 3 * np.e + 2 else "olh")
    assert lsa_levels((64,), None) is lsa_levels((64,), None)  # cached: clients and server agree cheaply


def test_cells_and_options():
    assert cell_grid((64, 64), 256) == ((16, 16), (4, 4))
    assert cell_grid((100,), 256) == ((100,), (1,))
    assert cell_grid((1000,), 256) == ((250,), (4,))
    m = make_mechanism("lsa", 1.0, [30, 64], 10_000, max_cells=64, k_max=4, oracle="olh")
    assert m.cell_dims == (8, 8) and m.widths == (4, 8) and m.n_groups <= 4
    assert {m.group_oracle(g).name for g in range(m.n_groups)} == {"olh"}
    recs = np.array([[0, 0], [29, 63], [4, 8]])
    assert m.cells_of(recs).tolist() == [0, 63, 9]
    for opts, pattern in [
        ({"max_cells": 2}, "max_cells"),
        ({"k_max": 1}, "k_max"),
        ({"oracle": "oue"}, "oracle must be one of"),
        ({"granularity": 4}, "unknown option"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            make_mechanism("lsa", 1.0, [16], 100, **opts)
    m3 = make_mechanism("lsa", 1.0, [8, 8, 8], 100)  # more attributes: a coarse box grid (at most 6 per axis)
    assert m3.cell_dims == (4, 4, 4) and m3.widths == (2, 2, 2)


def test_task_kind_of_lsa():
    obj = {"task_id": "rq-lsa", "mechanism": "lsa", "epsilon": 1.0, "expected_users": 1000,
           "attributes": [{"name": "a", "domain_size": 32}]}  # fmt: skip
    t = parse_task(obj)
    assert t.kind == "range" and t.n_groups == t.make_mechanism().n_groups
    # without "kind", 'lsa' is the range method; batch keys say where they belong
    with pytest.raises(TaskError, match="belongs to batch_queries tasks"):
        parse_task({**obj, "delta": 1e-6})
    batch = parse_task({**{k: v for k, v in obj.items() if k != "expected_users"}, "kind": "batch_queries",
                        "delta": 1e-6})  # fmt: skip
    assert batch.kind == "batch_queries"


def _fixed_population(rng, n, sizes):
    """Records drawn once (fixed user values; the repetitions redraw only the LDP noise and the groups)."""
    cols = [np.clip(np.round(rng.normal(c / 2, c / 5, n)), 0, c - 1) for c in sizes]
    return np.stack(cols, axis=1).astype(np.int64)


@pytest.mark.parametrize("sizes", [(16,), (8, 8)])
@pytest.mark.statistical
def test_gls_unbiased_and_std_matches_monte_carlo(sizes):
    """T repetitions over a fixed population: every answer's mean error is within z = 5 standard errors
    (std / sqrt(T)), and the total squared error of the queries matches the predicted one,
    sum_q Var_q = tr(S), within z = 5 of its relative standard error sqrt(2 tr(S^2) / T) / tr(S), S the
    queries' predicted covariance (from the first repetition's model; the prediction uses the estimated
    block frequencies, whose effect on S is O(1/sqrt(N)), far below the RSE here))."""
    t_reps, n = 800, 20_000
    rng = np.random.default_rng(SEEDS[0])
    recs = _fixed_population(rng, n, sizes)
    if len(sizes) == 1:
        queries = [
            RangeQuery(((0, lo, hi),)) for lo, hi in [(0, 3), (2, 9), (5, 5), (4, 15), (0, 14), (7, 12)]
        ]
    else:
        queries = random_queries(list(sizes), 12, 2, 0.5, rng=rng)
    truth = true_answers(recs, queries)
    m = make_mechanism("lsa", 1.0, sizes, n)
    errs = np.empty((t_reps, len(queries)))
    model0 = None
    for i in range(t_reps):
        model = m.fit(recs, rng=rng)
        model0 = model0 or model
        errs[i] = model.answer(queries, clip=False) - truth
    w = model0.weights(queries)
    s = w @ model0.cov @ w.T
    sd = np.sqrt(np.diag(s))
    assert np.all(np.abs(errs.mean(axis=0)) <= Z * sd / np.sqrt(t_reps)), errs.mean(axis=0) / sd
    rse = np.sqrt(2 * np.trace(s @ s) / t_reps) / np.trace(s)
    ratio = (errs**2).sum(axis=1).mean() / np.trace(s)
    assert abs(ratio - 1) <= Z * rse, (ratio, rse)  # seen: 1.028 (16,) and 0.949 (8, 8), RSE 0.025
    np.testing.assert_allclose(model0.answer_std(queries), sd, rtol=1e-12)


def test_public_total_and_model_round_trip():
    rng = np.random.default_rng(SEEDS[1])
    m = make_mechanism("lsa", 0.8, [40, 24], 30_000)
    recs = _fixed_population(rng, 30_000, (40, 24))
    model = m.fit(recs, rng=rng)
    assert abs(model.f_hat.sum() - 1) < 1e-12 and model.n_users == 30_000
    full = RangeQuery(((0, 0, 39), (1, 0, 23)))
    assert model.answer([full]).tolist() == [1.0] and model.answer_std([full]).tolist() == [0.0]
    qs = random_queries([40, 24], 30, 2, 0.4, rng=rng) + random_queries([40, 24], 10, 1, 0.3, rng=rng)
    back = model_from_dict(json.loads(json.dumps(model.to_dict())))
    assert isinstance(back, LSAModel)
    assert back.answer(qs).tolist() == model.answer(qs).tolist()
    assert back.answer_std(qs).tolist() == model.answer_std(qs).tolist()
    empty = m.finalize({})
    assert empty.answer([RangeQuery(((0, 0, 19),))]).tolist() == [0.5]


def test_through_the_range_pipeline_unchanged(tmp_path):
    """Simulated reports -> pipelines.range_queries with "mechanism": "lsa"; the answers equal the core's
    finalize over the same reports (read back with fastavro) exactly."""
    attrs = [{"name": "age", "domain_size": 32}, {"name": "income", "domain_size": 16}]
    obj = {
        "task_id": "rq-lsa-e2e",
        "mechanism": "lsa",
        "epsilon": 1.0,
        "expected_users": 30_000,
        "attributes": attrs,
    }
    (tmp_path / "task.json").write_text(json.dumps(obj))
    task = parse_task(obj)
    simulator.simulate_files(task, 30_000, "gaussian", tmp_path / "in", seed=5, files=2, inject_bad=1)
    queries = random_queries([32, 16], 25, 2, 0.5, rng=np.random.default_rng(SEEDS[2]))
    (tmp_path / "q.json").write_text(json.dumps([q.to_json(task.attribute_names) for q in queries]))
    argv = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"),
            "--queries", str(tmp_path / "q.json"), "--output", str(tmp_path / "out")]  # fmt: skip
    summary = range_queries.run(argv)
    assert summary["counts"]["accepted"] == 30_000 and summary["counts"]["rejected"] > 0
    rows = []
    for f in glob.glob(str(tmp_path / "out" / "answers-*.jsonl")):
        rows += [json.loads(line) for line in open(f)]
    rows.sort(key=lambda r: r["query_index"])
    mech = task.make_mechanism()
    recs = []
    for f in sorted(glob.glob(str(tmp_path / "in" / "reports-*.avro"))):
        with open(f, "rb") as fh:
            recs += list(fastavro.reader(fh))
    accs = {}
    for g in range(mech.n_groups):
        mine = [r for r in recs if r["group"] == g]
        fields = {"values": np.array([r["value"] for r in mine], dtype=np.int64)}
        if mech.group_oracle(g).name == "olh":
            fields["seeds"] = np.array([r["seed"] for r in mine], dtype=np.int64).view(np.uint64)
        accs[g] = mech.add(g, mech.create_accumulator(g), Reports(**fields))
    model = mech.finalize(accs)
    assert [r["answer"] for r in rows] == model.answer(queries).tolist()
    assert [r["std"] for r in rows] == model.answer_std(queries).tolist()
    assert {r["method"] for r in rows} == {"lsa"} and {r["n_reports"] for r in rows} == {30_000}
