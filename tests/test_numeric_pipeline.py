"""The numeric kind through the registry: task, simulator, batch job, JSON Lines rows and the store
(ldp.kinds.numeric, pipelines.numeric)."""

from __future__ import annotations

import json
from pathlib import Path

import fastavro
import numpy as np
import pytest

from ldp import task as T
from ldp.aggregate import GLOBAL_WINDOW, GroupAccumulators, accumulate, finalize_window, make_aggregator
from ldp.kinds import flatten_rows
from ldp.kinds.numeric.aggregate import NumericEstimateRow
from ldp.kinds.numeric.population import sample_values
from ldp.kinds.numeric.task import NumericTask
from ldp.reports import Reports

TASK = {
    "task_id": "lat-1",
    "kind": "numeric",
    "mechanism": "hybrid",
    "epsilon": 1.0,
    "attributes": [{"name": "latency_ms", "low": 0, "high": 500}],
    "quantiles": [0.5, 0.9, 0.99],
}


def _reports_of(paths: list[Path]) -> Reports:
    reals = []
    for p in paths:
        with open(p, "rb") as fh:
            reals += [r["reals"][0] for r in fastavro.reader(fh)]
    return Reports(reals=np.array(reals, dtype=np.float64))


def test_simulate_job_rows_equal_the_core_estimate_and_the_store_holds_them(tmp_path):
    from pipelines.numeric import run
    from simulator import simulate_files
    from store import open_store

    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(TASK))
    task = T.load_task(task_file)
    assert isinstance(task, NumericTask)
    truth = simulate_files(task, 20_000, "lognormal:4:1", tmp_path / "sim", seed=11, files=2)
    db = tmp_path / "store.db"
    summary = run(
        ["--task", str(task_file), "--input", str(tmp_path / "sim" / "reports-*.avro"), "--output",
         str(tmp_path / "out"), "--store", f"sqlite:///{db}"]
    )  # fmt: skip
    assert summary["counts"]["accepted"] == 20_000
    (path,) = (tmp_path / "out").glob("estimates-*.jsonl")
    (row,) = [json.loads(line) for line in path.read_text().splitlines()]
    # the core on the same reports: exact integer accumulators, so equality, not closeness
    mech = task.make_mechanism()
    reports = _reports_of(sorted((tmp_path / "sim").glob("reports-*.avro")))
    est = mech.estimate(mech.add(mech.create_accumulator(), reports), attribute="latency_ms")
    assert row["mean"] == est.mean and row["mean_std"] == est.mean_std
    assert (row["mean_ci_low"], row["mean_ci_high"]) == (est.mean_ci_low, est.mean_ci_high)
    assert row["attribute"] == "latency_ms" and row["n_reports"] == 20_000 and row["quantiles"] == []
    assert row["mechanism"] == "hybrid" and row["is_last_pane"] is True
    # hybrid at eps 1 over [0, 500]: the row's own std (~3.7); 5 std
    assert abs(row["mean"] - truth["mean"]) < 5 * row["mean_std"]
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        got = store._b.query(
            "SELECT output, grp, item, label, estimate, std, ci_low, ci_high FROM ldp_current "
            "WHERE task_id = ?",
            ("lat-1",),
        )
    finally:
        store.close()
    assert got == [
        {"output": "numeric", "grp": 0, "item": 0, "label": "mean", "estimate": row["mean"],
         "std": row["mean_std"], "ci_low": row["mean_ci_low"], "ci_high": row["mean_ci_high"]}
    ]  # fmt: skip


def test_square_wave_rows_carry_quantiles_and_the_store_keeps_each(rng):
    task = T.parse_task({**TASK, "mechanism": "square-wave", "params": {"bins": 64}})
    agg = make_aggregator(task, replicas=4)
    mech = task.make_mechanism()
    reports = mech.encode(rng.lognormal(4.0, 1.0, 4000), rng=rng)
    ok, _ = agg.validation_oracle(0).validate(reports)
    assert ok.all()
    acc = accumulate(agg, GroupAccumulators(), 0, reports)
    (row,) = finalize_window(agg, acc, GLOBAL_WINDOW)
    assert isinstance(row, NumericEstimateRow)
    assert [q["q"] for q in row.quantiles] == [0.5, 0.9, 0.99]
    assert all(q["ci_low"] <= q["value"] <= q["ci_high"] for q in row.quantiles)
    (pane,) = flatten_rows([row])
    assert pane.output == "numeric" and [i.label for i in pane.items] == ["mean", "q0.5", "q0.9", "q0.99"]
    assert [i.estimate for i in pane.items[1:]] == [q["value"] for q in row.quantiles]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": None}, 'must say "kind": "numeric"'),
        ({"attributes": [{"name": "x", "low": 5, "high": 5}]}, "low must be below high"),
        ({"attributes": [{"name": "x", "low": 0, "high": 1}, {"name": "x", "low": 1, "high": 2}]},
         "is repeated"),
        ({"quantiles": [0.5, 1.0]}, "quantiles must be a list of numbers in (0, 1)"),
        ({"params": {"bins": 8}}, "mechanism parameters rejected by ldp.numeric"),
        ({"mechanism": "grr"}, "is not a numeric mechanism"),
    ],
)
def test_bad_numeric_tasks_are_refused_with_the_reason(change, message):
    obj = {k: v for k, v in {**TASK, **change}.items() if v is not None}
    with pytest.raises(T.TaskError) as ei:
        T.parse_task(obj)
    assert message in ei.value.one_line()


def test_datasets(tmp_path, rng):
    assert sample_values("normal:10:2", 5, rng).shape == (5,)
    assert np.all(sample_values("uniform:1:2", 100, rng) >= 1)
    assert np.all(sample_values("lognormal", 100, rng) > 0)
    csv = tmp_path / "v.csv"
    csv.write_text("id,latency\n1,3.5\n2,7\n3,11.25\n")
    assert sample_values(f"csv:{csv}:latency", None, rng).tolist() == [3.5, 7.0, 11.25]
    for spec, why in (
        ("gamma", "unknown numeric dataset"),
        ("normal:1", "two finite parameters"),
        (f"csv:{csv}:nope", "no column 'nope'"),
        (f"csv:{csv}:id", "3 rows, 9 users"),
    ):
        with pytest.raises(ValueError, match=why):
            sample_values(spec, 9, rng)


def test_csv_data_defines_its_users_in_the_simulator(tmp_path):
    from simulator import make_population

    csv = tmp_path / "v.csv"
    csv.write_text("latency\n" + "\n".join(str(x) for x in range(40)) + "\n")
    pop = make_population(T.parse_task(TASK), None, f"csv:{csv}:latency", seed=1)
    assert pop.n_users == 40 and pop.truth()["mean"] == pytest.approx(19.5)
    with pytest.raises(ValueError, match="needs a number of users"):
        make_population(T.parse_task(TASK), None, "normal", seed=1)


def test_the_command_and_module_are_registered():
    from pipelines.cli import commands
    from pipelines.numeric import parser

    assert commands()["numeric"][0] == "pipelines.numeric"
    flags = parser().parse_known_args(["--task", "t.json", "--input", "x", "--output", "o"])[0]
    assert flags.task == "t.json"
