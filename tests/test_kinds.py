"""The registry of kinds of task (ldp.kinds): one entry per kind, the pane header of every row type, and a
toy kind, declared only here, run end to end through the simulator, a batch job and the store."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import schemas
from ldp import kinds
from ldp import task as T
from ldp.aggregate import PANE_HEADER, OutputSpec, WindowInfo, pane_header
from ldp.reports import Reports
from ldp.store.flatten import FlatItem, FlatPane, flatten_rows

# ------------------------------------------------------------------------------------------------------------
# the toy kind: the mean of one bit by randomized response (every piece lives in this module)
# ------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyTask(T.Task):
    kind = "toy"
    share: float = 0.3  # the simulated share of ones

    @property
    def p(self) -> float:
        """Probability a client reports its own bit."""
        return math.exp(self.epsilon) / (1.0 + math.exp(self.epsilon))


def _toy_build(obj: Mapping[str, Any], common: dict[str, Any], problems: list[str]) -> ToyTask | None:
    share = obj.get("share", 0.3)
    if obj.get("kind") != "toy":
        problems.append('toy tasks must say "kind": "toy"')
    if not (isinstance(share, float) and 0 <= share <= 1):
        problems.append(f"share must be a number in [0, 1], got {share!r}")
    return None if problems else ToyTask(share=share, **common)


class ToyRow(NamedTuple):
    """The fields of schemas/numeric_estimate.avsc (a toy needs no schema of its own)."""

    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    is_last_pane: bool
    mechanism: str
    attribute: str
    epsilon: float
    low: float
    high: float
    n_reports: int
    mean: float
    mean_std: float
    mean_ci_low: float
    mean_ci_high: float
    mean_bound_low: float
    mean_bound_high: float
    quantiles: list[dict[str, float]]
    output = "estimates"


class _ToyValidator:
    name = "toy-rr"
    report_fields = ("values",)
    d = 2  # values in [0, d): the bad-record variants send d

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        v = np.asarray(reports.values)
        ok = (v == 0) | (v == 1)
        return ok, np.where(ok, None, "not_a_bit").astype(object)


class ToyAggregator:
    outputs = (OutputSpec("estimates", "numeric_estimate", "", "estimates", None),)
    uniform_oracle = True

    def __init__(self, task: ToyTask) -> None:
        self.task = task

    def validation_oracle(self, group: int) -> _ToyValidator:
        return _ToyValidator()

    def create_accumulator(self, group: int) -> list[int]:
        return [0, 0]

    def add(self, group: int, acc: list[int], reports: Reports) -> list[int]:
        return [acc[0] + len(reports), acc[1] + int(np.sum(reports.values))]

    def merge(self, group: int, accs: Sequence[list[int]]) -> list[int]:
        return [sum(a[0] for a in accs), sum(a[1] for a in accs)]

    def finalize(self, accs: Mapping[int, list[int]], window: WindowInfo) -> list[ToyRow]:
        n, ones = accs[0]
        p = self.task.p
        mean = (ones / n - (1 - p)) / (2 * p - 1)
        std = math.sqrt((ones / n) * (1 - ones / n) / n) / (2 * p - 1)
        return [
            ToyRow(
                **pane_header(self.task, window),
                attribute="bit", epsilon=self.task.epsilon, low=0.0, high=1.0, n_reports=n, mean=mean,
                mean_std=std, mean_ci_low=mean - 1.96 * std, mean_ci_high=mean + 1.96 * std,
                mean_bound_low=0.0, mean_bound_high=1.0, quantiles=[],
            )  # fmt: skip
        ]


def _toy_flatten(rows: Sequence[ToyRow], max_items: int, labels: Any) -> list[FlatPane]:
    return [
        FlatPane(
            "toy", 0, r.mechanism, r.n_reports, 1,
            [FlatItem(0, "mean", r.mean, r.mean_std, r.mean_ci_low, r.mean_ci_high, None, None, 0, None)], {},
        )  # fmt: skip
        for r in rows
    ]


class _ToyPopulation:
    def __init__(self, task: ToyTask, users: int, ss: np.random.SeedSequence) -> None:
        self.task, self.n_users, self.dataset = task, users, "bernoulli"
        r_val, r_enc, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in ss.spawn(4))
        self.bits = (r_val.random(users) < task.share).astype(np.int64)
        keep = r_enc.random(users) < task.p
        self.reports = Reports(values=np.where(keep, self.bits, 1 - self.bits))

    def chunks(self, bounds: np.ndarray):
        from ldp.populations import Chunk

        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo < hi:
                yield k, Chunk(slice(lo, hi), self.reports.take(slice(lo, hi)), 0)

    def truth(self) -> dict[str, Any]:
        return {"mechanism": "toy-rr", "mean": float(self.bits.mean())}

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


TOY = kinds.Kind(
    "toy",
    T.TaskKind("toy", lambda: ("toy-rr",), ("share",), _toy_build, fields={"share": T.Field(("number",))}),
    aggregator=ToyAggregator,
    rows=(kinds.RowKind(ToyRow, "numeric_estimate", "toy", _toy_flatten),),
    population=lambda task, users, dataset, ss, **_: _ToyPopulation(task, users, ss),
    default_dataset="bernoulli",
    bad_template=lambda task: (_ToyValidator(), 0, lambda k, rng: Reports(values=np.zeros(k, np.int64))),
    description="toy bit means",
)
TOY_TASK = {"task_id": "toy-1", "kind": "toy", "mechanism": "toy-rr", "epsilon": 1.0, "share": 0.3}


@pytest.fixture
def toy():
    kinds.register(TOY)  # the one registration call
    try:
        yield TOY
    finally:
        kinds.unregister("toy")


def test_a_toy_kind_runs_through_the_simulator_a_batch_job_and_the_store(toy, tmp_path):
    from ldp.store import open_store
    from pipelines.job import kind_job, run_job
    from pipelines.simulate import simulate_files

    task_file = tmp_path / "toy.json"
    task_file.write_text(json.dumps(TOY_TASK))
    task = T.load_task(task_file)
    assert isinstance(task, ToyTask)
    truth = simulate_files(task, 4000, None, tmp_path / "sim", seed=5, files=2, inject_bad=1)
    assert truth["kind"] == "toy" and truth["bad_records"]
    db = tmp_path / "store.db"
    summary = run_job(
        *kind_job("toy"),
        ["--task", str(task_file), "--input", str(tmp_path / "sim" / "*.avro"), "--output",
         str(tmp_path / "out"), "--store", f"sqlite:///{db}"],
    )  # fmt: skip
    assert summary["counts"]["accepted"] == 4000
    assert summary["counts"]["rejected"] == sum(truth["bad_records"].values())
    (line,) = (tmp_path / "out").glob("estimates-*.jsonl").__next__().read_text().splitlines()
    row = json.loads(line)
    assert set(PANE_HEADER) <= set(row) and row["mechanism"] == "toy-rr" and row["n_reports"] == 4000
    # RR at eps 1: std of the mean = sqrt(f(1-f)/n) / (2p-1) ~ 0.017; 5 std
    assert abs(row["mean"] - truth["mean"]) < 5 * row["mean_std"]
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        got = store._b.query("SELECT output, item, label, estimate FROM ldp_current WHERE task_id = 'toy-1'")
    finally:
        store.close()
    assert got == [{"output": "toy", "item": 0, "label": "mean", "estimate": row["mean"]}]


def test_the_store_refuses_rows_no_kind_declares(toy):
    class Stray(NamedTuple):
        task_id: str
        value: float

    with pytest.raises(ValueError, match="no registered kind of task declares rows of type Stray"):
        flatten_rows([Stray("t", 1.0)])
    # a registered kind's rows are stored (the toy's flattener runs)
    row = ToyAggregator(T.parse_task(TOY_TASK)).finalize({0: [100, 60]}, WindowInfo())[0]  # type: ignore[arg-type]
    (pane,) = flatten_rows([row])
    assert pane.output == "toy" and pane.items[0].estimate == row.mean


def test_registration_refuses_rows_the_store_cannot_flatten():
    bad = dataclasses.replace(TOY, rows=(kinds.RowKind(ToyRow, "numeric_estimate", None),))
    with pytest.raises(ValueError, match="the store cannot flatten it"):
        kinds.register(bad)
    no_flatten = dataclasses.replace(TOY, rows=(kinds.RowKind(ToyRow, "numeric_estimate", "toy"),))
    with pytest.raises(ValueError, match="has no flatten function"):
        kinds.register(no_flatten)
    with pytest.raises(ValueError, match="declares no row types"):
        kinds.register(dataclasses.replace(TOY, rows=()))
    with pytest.raises(ValueError, match="a kind of that name is registered"):
        kinds.register(kinds.KINDS["frequency"])
    assert "toy" not in kinds.KINDS and "toy" not in T.TASK_KINDS


def test_every_kind_has_one_entry_read_by_the_task_model_the_aggregator_and_the_simulator():
    from ldp.aggregate import make_aggregator
    from pipelines.simulate import make_population

    assert list(T.TASK_KINDS) == list(kinds.KINDS)
    for name, k in kinds.KINDS.items():
        assert T.TASK_KINDS[name] is k.task
        assert k.example is not None, name
        task = T.parse_task(k.example)
        assert task.kind == name
        if name not in ("range", "batch_queries"):  # those need their job's queries / workload
            agg = make_aggregator(task)
            assert agg.task is task
        if name != "sparse":  # sparse populations are large by default (supersparse)
            assert make_population(task, 50, seed=1).n_users == 50


@pytest.mark.parametrize("rk", kinds.row_kinds(), ids=lambda rk: rk.row_class.__name__)
def test_every_row_type_and_its_avro_schema_carry_the_pane_header(rk):
    fields = rk.row_class._fields
    assert fields[: len(PANE_HEADER)] == PANE_HEADER or set(PANE_HEADER) <= set(fields)
    avro = [f["name"] for f in schemas.load_schema(rk.schema)["fields"]]
    missing = [h for h in PANE_HEADER if h not in avro]
    assert not missing, f"{rk.schema}.avsc lacks {missing}"
    assert set(fields) == set(avro), f"{rk.row_class.__name__} and {rk.schema}.avsc differ"
