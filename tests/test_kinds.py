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
from ldp.aggregate import OutputSpec, WindowInfo
from ldp.kinds import flatten_rows
from ldp.payload import PayloadField, PayloadSpec, Refusal
from ldp.reports import Reports
from ldp.rows import PANE_HEADER, PANE_HEADER_TYPES, FlatItem, FlatPane, pane_header
from pipelines import show

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
    row_schema: str
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
    payload = PayloadSpec((PayloadField("values", "int64", low=0, high=1),))  # the bad-record variants too

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        v = np.asarray(reports.values)
        ok = (v == 0) | (v == 1)
        reasons = np.full(len(v), None, dtype=object)
        reasons[~ok] = Refusal("out_of_domain", "not_a_bit")
        return ok, reasons


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
                **pane_header(self.task, window, row_schema="numeric_estimate"),
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
        from ldp.kinds.population import Chunk

        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo < hi:
                yield k, Chunk(slice(lo, hi), self.reports.take(slice(lo, hi)), 0)

    def truth(self) -> dict[str, Any]:
        return {"mechanism": "toy-rr", "mean": float(self.bits.mean())}

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


def _toy_show_text(t: dict[str, Any]) -> show.TableText:
    cells = [[show.fmt(e["mean"]), show.fmt(e["std"])] for e in t["rows"]]
    return ["share of ones", "std"], cells, [True, True], "the toy's bit mean"


def _toy_show_tables(rows: Sequence[dict[str, Any]], top: int, batch: bool) -> list[dict[str, Any]]:
    return [
        {
            "group": None, **show.pane_of(r, batch), "n_reports": r["n_reports"],
            "about": {"mechanism": r["mechanism"]}, "shown": 1, "of": 1,
            "rows": [{"mean": show.number(r["mean"]), "std": show.number(r["mean_std"])}],
        }  # fmt: skip
        for r in show.latest_panes(rows, "attribute").values()
    ]


# a richer printer than the generic one, registered by the command line's side (pipelines.show) by kind name;
# the toy's rows have the numeric kind's fields: OUT/counts.json naming the kind tells them apart
TOY_SHOW = show.ShowSpec(
    fields={"n_reports": (int,), "mean": (float,), "mean_std": (float,)},
    matches=lambda row: row.get("mechanism") == "toy-rr",
    tables=_toy_show_tables,
    text=_toy_show_text,
)

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
    from pipelines.job import kind_job, run_job
    from simulator import simulate_files
    from store import open_store

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

    with pytest.raises(ValueError, match="of type Stray has no row_schema field"):
        flatten_rows([Stray("t", 1.0)])
    with pytest.raises(ValueError, match="no registered kind of task declares rows of schema 'stray'"):
        flatten_rows([Stray("t", 1.0)], schema="stray")
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
    from simulator import make_population

    assert list(T.TASK_KINDS) == list(kinds.KINDS)
    for name, k in kinds.KINDS.items():
        assert T.TASK_KINDS[name] is k.task
        assert k.example is not None, name
        task = T.parse_task(k.example)
        assert task.kind == name
        agg = k.make_example_aggregator(task)
        assert agg.task is task
        if k.example_aggregator is None:
            assert type(make_aggregator(task)) is type(agg)
        if k.population is not None:
            assert make_population(task, 50, seed=1).n_users == 50


def _example_rows(kind: kinds.Kind, users: int, seed: int) -> list[Any]:
    """The rows of one global window over a simulated population of the kind's example task."""
    from ldp.aggregate import GroupAccumulators, accumulate, finalize_window
    from simulator import make_population

    task = T.parse_task(kind.example)
    agg = kind.make_example_aggregator(task)
    pop = make_population(task, users, seed=seed)
    accs = GroupAccumulators()
    for _, chunk in pop.chunks(np.array([0, pop.n_users])):
        groups = np.broadcast_to(np.asarray(chunk.groups), (len(chunk.reports),))
        for g in np.unique(groups).tolist():
            accumulate(agg, accs, g, chunk.reports.take(np.flatnonzero(groups == g)))
    return finalize_window(agg, accs)


def _assert_stored(kind: kinds.Kind, db: Path) -> None:
    """Each row type the kind declares stored is in the store after one pane; its unstored ones are not."""
    from store import open_store

    rows = _example_rows(kind, 2000, seed=11)  # enough for the heavy hitters example to publish a string
    made = {type(r) for r in rows}
    for rk in kind.rows:
        assert rk.row_class in made, f"{kind.name}: the example made no {rk.row_class.__name__}"
    task = T.parse_task(kind.example)
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        store.write_task(task.task_id, kind=kind.name, mechanism=task.mechanism, epsilon=1.0, task_json=None)
        written = store.write_pane(task.task_id, None, None, 0, "ON_TIME", rows)
        got = store._b.query(
            "SELECT output, COUNT(*) AS n FROM ldp_current WHERE task_id = ? GROUP BY output", (task.task_id,)
        )
    finally:
        store.close()
    by_output = {r["output"]: r["n"] for r in got}
    stored = {rk.store_output for rk in kind.rows if rk.store_output is not None}
    assert set(by_output) == stored, f"{kind.name}: declared {sorted(stored)}, stored {sorted(by_output)}"
    assert all(n > 0 for n in by_output.values()) and sum(by_output.values()) == written


@pytest.mark.parametrize("name", [n for n, k in kinds.KINDS.items() if k.population is not None])
def test_every_kinds_rows_reach_the_store(name, tmp_path):
    _assert_stored(kinds.KINDS[name], tmp_path / "store.db")


def test_the_store_check_fails_when_a_kinds_rows_are_not_stored(tmp_path):
    freq = kinds.KINDS["frequency"]
    (rk,) = freq.rows
    dropped = dataclasses.replace(freq, rows=(dataclasses.replace(rk, flatten=lambda rows, m, labels: []),))
    kinds.register(dropped, replace=True)
    try:
        with pytest.raises(AssertionError, match="declared \\['estimates'\\], stored \\[\\]"):
            _assert_stored(dropped, tmp_path / "store.db")
    finally:
        kinds.register(freq, replace=True)


def test_capabilities_are_read_through_the_registry():
    builtin = {n: (k.ldp_reports, k.shuffle_allowed, k.typescript_client) for n, k in kinds.KINDS.items()}
    assert builtin["frequency"] == (True, True, True)
    assert builtin["range"] == (True, True, False)
    assert builtin["batch_queries"] == (False, False, False)
    for name, k in kinds.KINDS.items():
        assert kinds.shuffle_allowed(name) is k.shuffle_allowed
        assert ("anonymity" in k.task.keys) is k.shuffle_allowed, name
    assert not kinds.shuffle_allowed("no-such-kind")


_SHUFFLED = {"shuffled": True, "min_reports": 10, "central_epsilon": 1.0, "expected_reports": 100000}


def _toy_with(**caps: Any) -> kinds.Kind:
    section = dataclasses.replace(TOY.task, keys=(*TOY.task.keys, "anonymity"))
    return dataclasses.replace(TOY, task=section, **caps)


def test_the_task_model_takes_an_anonymity_section_for_a_kind_that_declares_shuffle_allowed():
    kinds.register(_toy_with(shuffle_allowed=True))
    try:
        task = T.parse_task({**TOY_TASK, "epsilon": "auto", "anonymity": _SHUFFLED})
        assert task.shuffled and task.epsilon > 1.0  # the local epsilon chosen for central epsilon 1
    finally:
        kinds.unregister("toy")
    kinds.register(TOY)  # no shuffle_allowed: the section is an unknown key and "auto" no epsilon
    try:
        with pytest.raises(T.TaskError) as err:
            T.parse_task({**TOY_TASK, "epsilon": "auto", "anonymity": _SHUFFLED})
        assert "anonymity" in str(err.value) and "epsilon" in str(err.value)
    finally:
        kinds.unregister("toy")


def test_registration_refuses_contradictory_capabilities():
    with pytest.raises(ValueError, match="does not declare shuffle_allowed"):
        kinds.register(_toy_with())
    with pytest.raises(ValueError, match="needs 'anonymity' among its task section's keys"):
        kinds.register(dataclasses.replace(TOY, shuffle_allowed=True))
    with pytest.raises(ValueError, match="shuffle_allowed needs ldp_reports"):
        kinds.register(_toy_with(shuffle_allowed=True, ldp_reports=False))
    with pytest.raises(ValueError, match="typescript_client needs ldp_reports"):
        kinds.register(dataclasses.replace(TOY, typescript_client=True, ldp_reports=False))
    assert "toy" not in kinds.KINDS


def test_the_collector_refuses_a_kind_without_ldp_reports_and_takes_one_with_them():
    from pipelines.collector import make_checker

    kinds.register(dataclasses.replace(TOY, ldp_reports=False))
    try:
        with pytest.raises(ValueError, match="is a toy task .central DP: raw records.; the collector takes"):
            make_checker(T.parse_task(TOY_TASK))
    finally:
        kinds.unregister("toy")
    kinds.register(TOY)
    try:
        assert make_checker(T.parse_task(TOY_TASK)) is not None
    finally:
        kinds.unregister("toy")


@pytest.mark.parametrize("rk", kinds.row_kinds(), ids=lambda rk: rk.row_class.__name__)
def test_every_row_type_and_its_avro_schema_carry_the_pane_header(rk):
    fields = rk.row_class._fields
    assert set(PANE_HEADER) <= set(fields)
    avro = {f["name"]: f for f in schemas.load_schema(rk.schema)["fields"]}
    missing = [h for h in PANE_HEADER if h not in avro]
    assert not missing, f"{rk.schema}.avsc lacks {missing}"
    assert set(fields) == set(avro), f"{rk.row_class.__name__} and {rk.schema}.avsc differ"
    # the row names its type; files written before the field read it as null
    assert rk.row_class._field_defaults.get("row_schema") == rk.schema
    assert avro["row_schema"]["type"] == ["null", "string"] and avro["row_schema"]["default"] is None


def _base_type(t: Any) -> Any:
    """An Avro field type without its null branch (older files read the header's added fields as null)."""
    branches = [b for b in t if b != "null"] if isinstance(t, list) else [t]
    assert len(branches) == 1, t
    return branches[0]


def test_the_pane_header_is_one_declaration_every_row_schema_follows():
    row_schemas = sorted(
        p.stem for p in Path(schemas.__file__).parent.glob("*.avsc")
        if "window_start" in {f["name"] for f in schemas.load_schema(p.stem)["fields"]}
    )  # fmt: skip
    assert row_schemas == sorted({rk.schema for rk in kinds.row_kinds()}), "a row schema no kind declares"
    assert tuple(PANE_HEADER_TYPES) == PANE_HEADER
    for name in row_schemas:
        fields = {f["name"]: f for f in schemas.load_schema(name)["fields"]}
        got = {h: _base_type(fields[h]["type"]) for h in PANE_HEADER}
        assert got == PANE_HEADER_TYPES, name


def test_rows_are_dispatched_by_their_row_schema_or_their_files_schema():
    """A row of another class (a record read from a file) is the type its row_schema names; an older one
    without the field, the type of the file's schema; with neither, a one-line refusal naming the field."""
    est = {"row_schema": "estimate", "group": 0, "n_reports": 10, "mechanism": "grr", "frequencies": [0.5],
           "std": [0.1]}  # fmt: skip
    assert kinds.row_kind(est) is kinds.KINDS["frequency"].rows[0]

    class OldAnswer(NamedTuple):  # an answer row of a file written before row_schema
        query_index: int
        query: dict[str, list[int]]
        answer: float
        std: float
        method: str

    old = OldAnswer(0, {"a": [0, 3]}, 0.25, 0.01, "hdg")
    (pane,) = flatten_rows([old], schema="range_answer")
    assert pane.output == "answers" and pane.items[0].estimate == 0.25
    with pytest.raises(ValueError, match=r"^a result row of type OldAnswer has no row_schema field") as ei:
        flatten_rows([old])
    assert "\n" not in str(ei.value)


def _toy_output(tmp_path: Path) -> tuple[Path, ToyRow]:
    """A job output of one toy pane, written by hand as the job writes it (a result line, counts.json)."""
    row = ToyAggregator(T.parse_task(TOY_TASK)).finalize({0: [1000, 640]}, WindowInfo())[0]  # type: ignore[arg-type]
    out = tmp_path / "toy-out"
    out.mkdir()
    (out / "estimates-pane00000-00000-of-00001.jsonl").write_text(json.dumps(row._asdict()) + "\n")
    counts = {"read": 1000, "accepted": 1000, "rejected": 0}
    (out / "counts.json").write_text(json.dumps({"kind": "toy", "streaming": False, "counts": counts}))
    return out, row


def test_ldp_beam_show_prints_a_registered_kind_through_its_own_show_piece(toy, tmp_path, capsys):
    out, row = _toy_output(tmp_path)
    show.register_show("toy", TOY_SHOW)
    try:
        assert show.run([str(out)]) == 0
        text = capsys.readouterr().out
        assert show.run([str(out), "--json"]) == 0
        content = json.loads(capsys.readouterr().out)
    finally:
        show.unregister_show("toy")
    assert text.startswith(f"{out}: toy task toy-1, 1 window(s) written\n")
    assert "the toy's bit mean" in text and "share of ones" in text
    assert f"{row.mean:.6g}" in text and "1,000 reports" in text
    assert content["kind"] == "toy"
    (table,) = content["windows"][0]["tables"]
    assert table["rows"] == [{"mean": row.mean, "std": row.mean_std}] and table["final"] is True


def test_ldp_beam_show_prints_a_kind_without_a_show_piece_from_its_row_fields(toy, tmp_path, capsys):
    out, row = _toy_output(tmp_path)
    assert show.run([str(out), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{out}: toy task toy-1, 1 window(s) written\n")
    assert "1,000 reports" in text and "the row's fields" in text
    lines = text.splitlines()
    header = lines.index(next(ln for ln in lines if ln.split()[:2] == ["field", "value"]))
    fields = [ln.split()[0] for ln in lines[header + 2 :] if ln.startswith("    ") and ln.split()]
    # the row class's fields in order, beyond the pane header and the report count (shown above the table)
    assert fields[:4] == ["attribute", "epsilon", "low", "high"], fields
    assert f"mean                {row.mean:.6g}".split() in [ln.split() for ln in lines]
    assert "quantiles           []".split() in [ln.split() for ln in lines]


def test_ldp_beam_privacy_reads_central_figures_from_the_registry():
    from pipelines.privacy import privacy_report

    central = dataclasses.replace(TOY, ldp_reports=False)
    kinds.register(central)
    try:
        with pytest.raises(ValueError, match="raw records. and its kind declares no central_privacy"):
            privacy_report(T.parse_task(TOY_TASK), None, windows=2)
    finally:
        kinds.unregister("toy")
    figures = {"central_epsilon": 0.7, "central_delta": 1e-7, "method": {"central": "the toy's own"}}
    kinds.register(dataclasses.replace(central, central_privacy=lambda task, windows: figures))
    try:
        report = privacy_report(T.parse_task(TOY_TASK), None, windows=2)
    finally:
        kinds.unregister("toy")
    assert report["local"] is None and report["central_epsilon"] == 0.7
    assert report["method"] == {"central": "the toy's own"}


def test_the_docs_table_of_kinds_is_the_generators():
    """docs/architecture.md carries ``python -m ldp.kinds --table`` between its kinds-table markers."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    start, end = "<!-- kinds-table -->\n", "<!-- /kinds-table -->"
    assert start in doc and end in doc
    shown = doc[doc.index(start) + len(start) : doc.index(end)]
    assert shown == kinds.kinds_table(), "regenerate it: python -m ldp.kinds --table"
