"""A kind that ships is its package plus one registration line.

The test writes a toy kind as a package of its own, ``toy_bit`` (the share of users holding a bit, by
one-bit randomized response: task section, aggregator, row and its Avro schema, store flattener, simulated
population and ``KIND``), into a temporary directory on ``sys.path``, registers it with one line, and
shows that nothing else has to be touched: the task JSON Schema and ``parse_task`` know it, the wire
registry walks its mechanism, the simulator writes its reports, the store flattens its rows, ``ldp-beam
--help`` lists its command, ``ldp-beam show`` prints its rows, the docs table generator lists it and a
batch job runs through the generic job entry point (DirectRunner; integration tier). It is unregistered
afterwards.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

from ldp import kinds
from ldp import task as T

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------------------------------
# the package, file by file
# ------------------------------------------------------------------------------------------------------------

_INIT = '''
"""The toy_bit kind: the share of users holding a bit, by one-bit randomized response."""

from ldp.kinds import JobOption, Kind, RowKind, ref
from toy_bit.task import TOY_TASK_KIND

KIND = Kind(
    "toy_bit",
    TOY_TASK_KIND,
    aggregator=ref("toy_bit.aggregate:ToyAggregator"),
    rows=(
        RowKind(
            ref("toy_bit.aggregate:ToyRow"),
            "toy_bit_estimate",
            "toy_bit",
            ref("toy_bit.flatten:flatten_toy"),
            avro=ref("toy_bit.aggregate:ROW_SCHEMA"),
        ),
    ),
    command="toy-bit",
    description="the share of users holding a bit (one-bit randomized response)",
    job_options=(JobOption("clip", "bool", help="clip the estimated share to [0, 1]"),),
    job_aggregator=ref("toy_bit.aggregate:job_aggregator"),
    mechanism_registries={"toy_bit": ref("toy_bit.aggregate:MECHANISMS")},
    population=ref("toy_bit.population:toy_population"),
    default_dataset="bernoulli",
    datasets="bernoulli (the task's share of ones)",
    bad_template=ref("toy_bit.population:toy_template"),
    example={"task_id": "t", "kind": "toy_bit", "mechanism": "toy-rr", "epsilon": 1.0},
)
'''

_TASK = '''
"""The toy_bit task: the common keys plus ``share``, the simulated share of ones."""

import dataclasses
import math

from ldp import task as T


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyTask(T.Task):
    kind = "toy_bit"
    share: float = 0.3

    @property
    def p(self) -> float:
        """Probability a client reports its own bit."""
        return math.exp(self.epsilon) / (1.0 + math.exp(self.epsilon))


def _build(obj, common, problems):
    share = obj.get("share", 0.3)
    if obj.get("kind") != "toy_bit":
        problems.append('toy_bit tasks must say "kind": "toy_bit"')
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        problems.append(f"share must be a number in [0, 1], got {share!r}")
    return None if problems else ToyTask(share=float(share), **common)


TOY_TASK_KIND = T.TaskKind(
    "toy_bit", lambda: ("toy-rr",), ("share",), _build,
    fields={"share": T.Field(("number",), minimum=0, maximum=1)},
    required=("kind",),
)
'''

_AGGREGATE = '''
"""The toy_bit aggregator, its row and the row's Avro schema."""

import math
from typing import NamedTuple

import numpy as np

from ldp.aggregate import OutputSpec
from ldp.payload import PayloadField, PayloadSpec, Refusal, WireSpec
from ldp.rows import PANE_HEADER_TYPES, pane_header

_NULLABLE = {"window_start", "window_end", "row_schema"}
ROW_SCHEMA = {
    "type": "record", "name": "ToyBitEstimate", "namespace": "org.ldpbeam.v2",
    "fields": [
        {"name": n, "type": ["null", t], "default": None} if n in _NULLABLE else {"name": n, "type": t}
        for n, t in PANE_HEADER_TYPES.items()
    ] + [{"name": n, "type": "double"} for n in ("epsilon", "share", "share_std")]
    + [{"name": "n_reports", "type": "long"}],
}


class ToyRow(NamedTuple):
    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    is_last_pane: bool
    mechanism: str
    epsilon: float
    share: float
    share_std: float
    n_reports: int
    row_schema: str = "toy_bit_estimate"
    output = "estimates"


class ToyRR:
    """The one-bit randomized response: a report is the bit, kept with probability p."""

    name = "toy-rr"
    report_fields = ("values",)
    payload = PayloadSpec((PayloadField("values", "int64", low=0, high=1),))
    wire = WireSpec("categorical", reason="a test kind's mechanism: no device runs it")

    def validate(self, reports):
        v = np.asarray(reports.values)
        ok = (v == 0) | (v == 1)
        reasons = np.full(len(v), None, dtype=object)
        reasons[~ok] = Refusal("out_of_domain", "not_a_bit")
        return ok, reasons


MECHANISMS = {"toy-rr": ToyRR}


class ToyAggregator:
    outputs = (OutputSpec("estimates", "toy_bit_estimate", "", "estimates", None),)
    uniform_oracle = True

    def __init__(self, task, clip=False):
        self.task, self.clip = task, clip

    def validation_oracle(self, group):
        return ToyRR()

    def create_accumulator(self, group):
        return [0, 0]

    def add(self, group, acc, reports):
        return [acc[0] + len(reports), acc[1] + int(np.sum(reports.values))]

    def merge(self, group, accs):
        return [sum(a[0] for a in accs), sum(a[1] for a in accs)]

    def finalize(self, accs, window):
        n, ones = accs[0]
        p = self.task.p
        share = (ones / n - (1 - p)) / (2 * p - 1)
        if self.clip:
            share = min(max(share, 0.0), 1.0)
        std = math.sqrt((ones / n) * (1 - ones / n) / n) / (2 * p - 1)
        header = pane_header(self.task, window, row_schema="toy_bit_estimate")
        return [ToyRow(**header, epsilon=self.task.epsilon, share=share, share_std=std, n_reports=n)]


def job_aggregator(options, task):
    return ToyAggregator(task, clip=options.clip)
'''

_FLATTEN = '''
"""The toy_bit rows in the store: output ``toy_bit``, one item, the share."""

from ldp.rows import FlatItem, FlatPane


def flatten_toy(rows, max_items, labels):
    return [
        FlatPane("toy_bit", 0, r.mechanism, r.n_reports, 1,
                 [FlatItem(0, "share", r.share, r.share_std, None, None, None, None, 0, None)], {})
        for r in rows
    ]
'''

_POPULATION = '''
"""Simulated toy_bit clients: a Bernoulli(share) bit each, reported by randomized response."""

import numpy as np

from ldp.kinds.population import Chunk
from ldp.reports import Reports
from toy_bit.aggregate import ToyRR


class ToyPopulation:
    def __init__(self, task, users, seed_sequence):
        self.task, self.n_users, self.dataset = task, users, "bernoulli"
        r_val, r_enc, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in seed_sequence.spawn(4))
        self.bits = (r_val.random(users) < task.share).astype(np.int64)
        keep = r_enc.random(users) < task.p
        self.reports = Reports(values=np.where(keep, self.bits, 1 - self.bits))

    def chunks(self, bounds):
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo < hi:
                yield k, Chunk(slice(lo, hi), self.reports.take(slice(lo, hi)), 0)

    def truth(self):
        return {"mechanism": "toy-rr", "share": float(self.bits.mean())}

    def write_truth_files(self, out):
        return {}


def toy_population(task, users, dataset, seed_sequence, **_):
    if users is None:
        raise ValueError("the toy_bit population needs a number of users")
    return ToyPopulation(task, users, seed_sequence)


def toy_template(task):
    return ToyRR(), 0, lambda k, rng: Reports(values=np.zeros(k, np.int64))
'''

PACKAGE = {
    "__init__.py": _INIT,
    "task.py": _TASK,
    "aggregate.py": _AGGREGATE,
    "flatten.py": _FLATTEN,
    "population.py": _POPULATION,
}
TOY_TASK = {"task_id": "toy-1", "kind": "toy_bit", "mechanism": "toy-rr", "epsilon": 1.0, "share": 0.3}


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kinds.Kind]:
    """The toy_bit package on ``sys.path``, registered; unregistered (and forgotten) afterwards."""
    where = tmp_path_factory.mktemp("toy_kind")
    (where / "toy_bit").mkdir()
    for name, text in PACKAGE.items():
        (where / "toy_bit" / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    sys.path.insert(0, str(where))
    try:
        kinds.register(importlib.import_module("toy_bit").KIND)  # the one registration line
        yield kinds.KINDS["toy_bit"]
    finally:
        kinds.unregister("toy_bit")
        sys.path.remove(str(where))
        for module in [m for m in sys.modules if m == "toy_bit" or m.startswith("toy_bit.")]:
            del sys.modules[module]
    assert "toy_bit" not in kinds.KINDS and "toy_bit" not in T.TASK_KINDS


def _task_file(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "toy.json"
    path.write_text(json.dumps({**TOY_TASK, **extra}), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------------
# the fast tier
# ------------------------------------------------------------------------------------------------------------


def test_nothing_outside_the_package_names_it() -> None:
    """The project's code, schemas and docs never mention the toy: all it reaches, it reaches through the
    registry."""
    found = []
    for top in ("ldp", "wire", "store", "simulator", "transforms", "pipelines", "schemas", "docs"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".avsc", ".json", ".md") and "toy_bit" in path.read_text("utf-8"):
                found.append(str(path.relative_to(ROOT)))
    assert not found


def test_the_task_schema_and_parse_task_know_it(toy: kinds.Kind) -> None:
    schema = T.task_json_schema()
    text = json.dumps(schema)
    assert '"const": "toy_bit"' in text and '"share"' in text
    task = T.parse_task(TOY_TASK)
    assert type(task).__name__ == "ToyTask" and task.kind == "toy_bit" and task.share == 0.3
    with pytest.raises(T.TaskError, match=r"share must be a number in \[0, 1\], got 2"):
        T.parse_task({**TOY_TASK, "share": 2})


def test_the_wire_registry_walks_its_mechanism(toy: kinds.Kind) -> None:
    from wire.registry import kind_registries, registered_mechanisms, wire_problems

    assert kind_registries()["toy_bit"] == ("toy_bit",)
    mine = [r for r in registered_mechanisms() if r.registry == "toy_bit"]
    assert [r.name for r in mine] == ["toy-rr"] and mine[0].wire is not None
    assert wire_problems(entries=mine) == []


def test_the_simulator_writes_its_reports_and_the_store_flattens_its_rows(toy: kinds.Kind, tmp_path) -> None:
    from ldp.aggregate import WindowInfo
    from simulator import simulate_files
    from store import open_store

    task = T.load_task(_task_file(tmp_path))
    truth = simulate_files(task, 3000, None, tmp_path / "sim", seed=3, files=2, inject_bad=1)
    assert truth["kind"] == "toy_bit" and truth["bad_records"]
    records = []
    for path in sorted((tmp_path / "sim").glob("*.avro")):
        with open(path, "rb") as fh, contextlib.suppress(ValueError):  # (the injected corrupt file)
            records += list(fastavro.reader(fh))
    assert sum(r["task_id"] == "toy-1" and r["value"] in (0, 1) for r in records) >= 3000
    (row,) = toy.aggregator(task).finalize({0: [1000, 600]}, WindowInfo())
    (pane,) = kinds.flatten_rows([row])
    assert pane.output == "toy_bit" and pane.items[0].estimate == row.share
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", shared=False)
    try:
        store.write_task("toy-1", kind="toy_bit", mechanism="toy-rr", epsilon=1.0, task_json=None)
        assert store.write_pane("toy-1", None, None, 0, "ON_TIME", [row]) == 1
        got = store._b.query("SELECT output, label, estimate FROM ldp_current WHERE task_id = 'toy-1'")
    finally:
        store.close()
    assert got == [{"output": "toy_bit", "label": "share", "estimate": row.share}]


def test_ldp_beam_help_lists_its_command_and_the_docs_table_lists_it(toy: kinds.Kind, capsys,
                                                                     monkeypatch) -> None:
    from pipelines import cli

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cli.main names the command in sys.argv

    assert cli.main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(ln.split()[:1] == ["toy-bit"] and toy.description in ln for ln in lines), lines
    assert cli.commands()["toy-bit"] == (cli.GENERIC_JOB, toy.description)
    with pytest.raises(SystemExit) as exc:
        cli.main(["toy-bit", "--help"])
    assert exc.value.code == 0
    assert "--clip" in capsys.readouterr().out
    table = kinds.kinds_table().splitlines()
    assert any(ln.startswith("| `toy_bit` | `toy_bit` | `toy-bit` | toy-rr |") for ln in table), table


def test_ldp_beam_show_prints_its_rows(toy: kinds.Kind, tmp_path, capsys) -> None:
    from ldp.aggregate import WindowInfo
    from pipelines import show

    (row,) = toy.aggregator(T.parse_task(TOY_TASK)).finalize({0: [1000, 640]}, WindowInfo())
    out = tmp_path / "out"
    out.mkdir()
    (out / "estimates-pane00000-00000-of-00001.jsonl").write_text(json.dumps(row._asdict()) + "\n")
    counts = {"read": 1000, "accepted": 1000, "rejected": 0}
    (out / "counts.json").write_text(json.dumps({"kind": "toy_bit", "streaming": False, "counts": counts}))
    assert show.run([str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{out}: toy_bit task toy-1, 1 window(s) written\n")
    cells = [ln.split() for ln in text.splitlines() if ln.startswith("    ")]
    fields = {c[0]: c[1] for c in cells if len(c) > 1}
    assert fields["share"] == f"{row.share:.6g}" and fields["epsilon"] == "1" and "1,000 reports" in text


# ------------------------------------------------------------------------------------------------------------
# the integration tier: a batch job through the generic entry point
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_batch_job_runs_through_the_generic_job_entry_point(toy: kinds.Kind, tmp_path, capsys,
                                                              monkeypatch) -> None:
    from pipelines import cli, show
    from simulator import simulate_files
    from store import open_store

    task_file = _task_file(tmp_path)
    task = T.load_task(task_file)
    truth = simulate_files(task, 4000, None, tmp_path / "sim", seed=5, files=2, inject_bad=1)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # cli.main names the command in sys.argv
    db = tmp_path / "store.db"
    assert cli.main(["toy-bit", "--task", str(task_file), "--input", str(tmp_path / "sim" / "*.avro"),
                     "--output", str(tmp_path / "out"), "--store", f"sqlite:///{db}", "--clip"]) == 0
    summary = json.loads((tmp_path / "out" / "counts.json").read_text())
    assert summary["kind"] == "toy_bit" and summary["counts"]["accepted"] == 4000
    assert summary["counts"]["rejected"] == sum(truth["bad_records"].values())
    (line,) = next((tmp_path / "out").glob("estimates-*.jsonl")).read_text().splitlines()
    row = json.loads(line)
    assert row["row_schema"] == "toy_bit_estimate" and row["n_reports"] == 4000
    # RR at eps 1: std of the share = sqrt(f(1-f)/n) / (2p-1) ~ 0.017; 5 std
    assert abs(row["share"] - truth["share"]) < 5 * row["share_std"] and 0 <= row["share"] <= 1
    (avro,) = (tmp_path / "out").glob("estimates-*.avro")
    with open(avro, "rb") as fh:
        (record,) = list(fastavro.reader(fh))
    assert record["share"] == row["share"]
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        got = store._b.query("SELECT output, label, estimate FROM ldp_current WHERE task_id = 'toy-1'")
    finally:
        store.close()
    assert got == [{"output": "toy_bit", "label": "share", "estimate": row["share"]}]
    capsys.readouterr()
    assert show.run([str(tmp_path / "out")]) == 0
    cells = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("    ")]
    assert ["share", f"{row['share']:.6g}"] in cells
