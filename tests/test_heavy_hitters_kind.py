"""The heavy_hitters kind (``ldp.kinds.heavy_hitters``): its task, report checks, level accumulators, rows,
store form, ``ldp-beam show`` table and simulated population, in memory (the jobs:
``tests/test_heavy_hitters_pipeline.py``)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import fastavro
import numpy as np
import pytest

import schemas
from ldp import kinds
from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window, json_record, merge_all
from ldp.heavy_hitters.sketch import walsh_dtype
from ldp.heavy_hitters.strings import escape_bytes, is_escaped_text, unescape_text
from ldp.kinds.heavy_hitters.aggregate import HeavyHittersAggregator, LevelAccumulator, pem_reports
from ldp.kinds.heavy_hitters.flatten import string_item
from ldp.reports import Reports
from ldp.task import TaskError, parse_task, task_json_schema

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier

BASE = {"task_id": "hh", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0, "max_length": 3}


def _task(**extra: object):
    return parse_task({**BASE, **extra})


# ------------------------------------------------------------------------------------------------ the task


def test_a_task_takes_the_cores_parameters_and_round_trips() -> None:
    task = _task()
    pem = task.make_mechanism()
    assert task.kind == "heavy_hitters" and task.top_k == 20 and not task.truncate
    assert task.n_groups == len(pem.levels) == 3  # 22 bits, 26 bits (the length trailer), verification
    assert [lv.bits for lv in pem.levels] == [22, 26, 26] and pem.levels[-1].verify
    assert pem.search == "sketch" and pem.candidates == 2048 and pem.rule == "bh" and pem.alpha == 0.05
    assert "n_groups" not in task.to_dict() and parse_task(task.to_dict()) == task
    auto = _task(mechanism="auto", params={"candidates": 64, "rule": "bonferroni", "alpha": None})
    assert auto.resolved_mechanism == "pem" and auto.make_mechanism().candidates == 64
    assert auto.make_mechanism().alpha is None and auto.make_mechanism().rule == "bonferroni"
    olh = _task(params={"search": "olh"}, expected_users=100_000)
    assert olh.make_mechanism().search == "olh" and olh.n_groups == len(olh.make_mechanism().levels)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_length": None}, "missing 'max_length'"),
        ({"max_length": 0}, r"max_length must be an integer in \[1, 1024\], got 0"),
        ({"max_length": 1025}, r"max_length must be an integer in \[1, 1024\]"),
        ({"top_k": 0}, r"top_k must be an integer in \[1, 100000\], got 0"),
        ({"truncate": "yes"}, "truncate must be true or false"),
        ({"n_groups": 3}, "n_groups is derived from the levels"),
        ({"postprocess": "norm-sub"}, "postprocess must be 'base'"),
        ({"epsilon": 25}, r"epsilon"),
        ({"expected_users": 0}, r"expected_users must be an integer in \[1, "),
        ({"params": {"levels": 3}}, "params: unknown key 'levels'"),
        ({"params": {"first_bits": 23}}, r"params.first_bits must be an integer in \[1, 22\], got 23"),
        ({"params": {"search": "trie"}}, "params.search must be one of auto, sketch, olh"),
        ({"params": {"alpha": 1}}, r"params.alpha must be a number in \(0, 1\) or null"),
        ({"max_length": 1, "params": {"first_bits": 9}}, r"first_bits must be in \[1, 8\]"),
    ],
)
def test_a_bad_task_is_refused_with_its_reason(change: dict, message: str) -> None:
    raw = {**BASE, **change}
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(TaskError, match=message):
        parse_task(raw)


def test_every_problem_is_listed_at_once_and_the_schema_knows_the_kind() -> None:
    with pytest.raises(TaskError) as err:
        parse_task({**BASE, "top_k": -1, "truncate": 1, "n_groups": 2})
    text = str(err.value)
    assert "top_k" in text and "truncate" in text and "n_groups" in text
    generated = task_json_schema()
    assert generated == schemas.task_schema()  # schemas/task.schema.json is regenerated
    assert '"const": "heavy_hitters"' in json.dumps(generated)


# ------------------------------------------------------------------------------------ reports and levels


def test_a_levels_validator_takes_its_range_and_refuses_the_rest() -> None:
    agg = HeavyHittersAggregator(_task())
    oracle = agg.validation_oracle(0)
    g = agg.mechanism.levels[0].g
    assert [f.name for f in oracle.payload.fields] == ["values", "seeds"]
    assert oracle.payload.field("values").high == g - 1
    batch = Reports(values=np.array([0, g - 1, g, -1]), seeds=np.arange(4, dtype=np.uint64))
    ok, reasons = oracle.validate(batch)
    assert ok.tolist() == [True, True, False, False]
    assert [getattr(r, "code", None) for r in reasons] == [None, None, "out_of_domain", "out_of_domain"]


def test_walsh_arrays_take_the_smallest_type_that_cannot_overflow() -> None:
    # |W| <= reports * g
    assert walsh_dtype(511, 64) == np.int16 and walsh_dtype(512, 64) == np.int32
    assert walsh_dtype((2**31 - 1) // 64, 64) == np.int32 and walsh_dtype(2**31 // 64 + 1, 64) == np.int64
    task = _task()
    level = task.make_mechanism().levels[0]
    acc = LevelAccumulator(level)
    rng = np.random.default_rng(0)
    acc.add(rng.integers(0, 2**63, 500, dtype=np.uint64), rng.integers(0, level.g, 500))
    assert acc.sketch is None and acc.pending == 500  # 5 KB of reports, not the 8 MB int16 array
    assert len(pickle.dumps(acc)) < 20_000
    assert acc.fold().walsh.dtype == np.int16
    more = LevelAccumulator(level)
    more.add(rng.integers(0, 2**63, 100, dtype=np.uint64), rng.integers(0, level.g, 100))
    acc.absorb(more)
    assert acc.n == 600 and acc.fold().walsh.dtype == np.int32  # 600 * 64 > 32767: widened before adding


def _values(n: int, rng: np.random.Generator) -> list[bytes]:
    common = [b"ab", b"\xff\xfe", b"\x1b[", b"zz"]
    freq = [0.3, 0.2, 0.15, 0.1]
    pick = rng.choice(len(common) + 1, size=n, p=[*freq, 1 - sum(freq)])
    rare = rng.integers(97, 123, size=(n, 3), dtype=np.uint8)
    return [common[k] if k < len(common) else bytes(rare[i]) for i, k in enumerate(pick)]


def _accumulate(agg: HeavyHittersAggregator, reports: Reports, groups: np.ndarray) -> GroupAccumulators:
    accs = GroupAccumulators()
    for g in np.unique(groups).tolist():
        accumulate(agg, accs, g, reports.take(np.flatnonzero(groups == g)))
    return accs


def test_merging_in_any_order_and_folding_give_the_cores_exact_result() -> None:
    """Accumulators of three parts merged in two orders, one part folded into its Walsh array first, give the
    rows of the core's own accumulator over all reports, exactly; the strings found are the frequent ones,
    the non-UTF-8 and control bytes escaped. (eps 4, 30,000 reports: each string of frequency >= 10% is
    over 15 null standard deviations at every level, so its recall is certain.)"""
    task = _task(top_k=10)
    pem = task.make_mechanism()
    rng = np.random.default_rng(5)
    core = pem.encode(_values(30_000, rng), rng=rng)
    reports, groups = pem_reports(core)
    agg = HeavyHittersAggregator(task)
    parts = [slice(0, 7_000), slice(7_000, 19_000), slice(19_000, 30_000)]

    def merged(order: list[int], fold: bool) -> list:
        accs = [_accumulate(agg, reports.take(parts[i]), groups[parts[i]]) for i in order]
        if fold:
            accs[0].accs[0].fold()
        return finalize_window(agg, merge_all(agg, accs), WindowInfo(0, 60_000, "ON_TIME", 0, True))

    (a,), (b,) = merged([0, 1, 2], False), merged([2, 0, 1], True)
    want = pem.estimate(pem.add(pem.create_accumulator(), core))
    assert a == b and a.n_reports == want.n == 30_000
    assert [h["value"] for h in a.heavy_hitters] == [escape_bytes(h.value) for h in want.hitters]
    assert [h["estimate"] for h in a.heavy_hitters] == [h.estimate for h in want.hitters]
    found = [h["value"] for h in a.heavy_hitters]
    assert found[:4] == ["ab", "\\xff\\xfe", "\\x1b[", "zz"]
    assert [unescape_text(v) for v in found[:4]] == [b"ab", b"\xff\xfe", b"\x1b[", b"zz"]
    assert a.row_schema == "heavy_hitters_estimate" and a.window_end == 60_000 and a.mechanism == "pem"
    assert [lv["reports"] for lv in a.levels] == np.bincount(groups, minlength=3).tolist()
    estimates = [h["estimate"] for h in a.heavy_hitters]
    assert estimates == sorted(estimates, reverse=True)
    for h in a.heavy_hitters:
        assert h["ci_low"] < h["estimate"] < h["ci_high"]


def test_a_window_without_reports_gives_no_row_and_one_level_alone_an_empty_row() -> None:
    task = _task()
    agg = HeavyHittersAggregator(task)
    assert finalize_window(agg, GroupAccumulators()) == []
    rng = np.random.default_rng(1)
    reports, groups = pem_reports(task.make_mechanism().encode([b"ab"] * 300, rng=rng))
    only0 = _accumulate(agg, reports.take(np.flatnonzero(groups == 0)), groups[groups == 0])
    (row,) = finalize_window(agg, only0)
    assert row.heavy_hitters == [] and row.levels[0]["reports"] == int(np.sum(groups == 0))


# ------------------------------------------------------------------------------ rows, store, show, files


def _row(top_k: int = 5):
    task = _task(top_k=top_k)
    rng = np.random.default_rng(2)
    reports, groups = pem_reports(task.make_mechanism().encode(_values(20_000, rng), rng=rng))
    agg = HeavyHittersAggregator(task)
    window = WindowInfo(0, 60_000, "ON_TIME", 0, True)
    (row,) = finalize_window(agg, _accumulate(agg, reports, groups), window)
    return task, row


def test_rows_fit_their_avro_schema_and_the_store_keeps_each_string(tmp_path: Path) -> None:
    from store import open_store

    task, row = _row()
    schema = fastavro.parse_schema(schemas.load_schema("heavy_hitters_estimate"))
    with open(tmp_path / "rows.avro", "wb") as fh:
        fastavro.writer(fh, schema, [row._asdict()])
    with open(tmp_path / "rows.avro", "rb") as fh:
        (back,) = list(fastavro.reader(fh))
    assert back["heavy_hitters"] == row.heavy_hitters and back["levels"] == row.levels
    (pane,) = kinds.flatten_rows([row], max_items=2)
    assert pane.output == "heavy_hitters" and pane.n_items == len(row.heavy_hitters) and len(pane.items) == 2
    assert [i.label for i in pane.items] == [h["value"] for h in row.heavy_hitters[:2]]
    assert [i.item for i in pane.items] == [string_item(h["value"]) for h in row.heavy_hitters[:2]]
    assert string_item("ab") == string_item("ab") != string_item("ab ") and string_item("ab") < 2**52
    db = open_store(f"sqlite:///{tmp_path / 'store.db'}", shared=False)
    try:
        db.write_task(task.task_id, kind="heavy_hitters", mechanism="pem", epsilon=4.0, task_json=None)
        assert db.write_pane(task.task_id, 0, 60_000, 0, "ON_TIME", [row]) == len(row.heavy_hitters)
        got = db._b.query("SELECT item, label, estimate FROM ldp_current WHERE task_id = 'hh' "
                          "ORDER BY estimate DESC")
    finally:
        db.close()
    want = [(string_item(h["value"]), h["value"], h["estimate"]) for h in row.heavy_hitters]
    assert [(g["item"], g["label"], g["estimate"]) for g in got] == want  # one item per string, stable


def test_show_prints_the_strings_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipelines import show

    _, row = _row(top_k=4)
    out = tmp_path / "out"
    out.mkdir()
    line = json.dumps(json_record(row._asdict()))
    (out / "estimates-pane00000-00000-of-00001.jsonl").write_text(line + "\n")
    counts = {"read": 20_000, "accepted": 20_000, "rejected": 0}
    summary = {"kind": "heavy_hitters", "streaming": False, "counts": counts}
    (out / "counts.json").write_text(json.dumps(summary))
    assert show.run([str(out)]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and " \\x1b[ " in text and " \\xff\\xfe " in text
    assert "published strings by estimated frequency" in text
    lines = [ln.split() for ln in text.splitlines() if ln.strip().startswith("1 ")]
    assert lines and lines[0][1] == "ab"


def test_escaping_is_unambiguous() -> None:
    values = (b"", b"a\\x41", b"\\", b"\xc3\xa9t\xc3\xa9", b"\x00\x7f\xc2\x85", b"\xed\xa0\x80", b"\xff",
              "a\u202eb\u200b".encode())  # a bidirectional override and a zero-width space
    for value in values:
        text = escape_bytes(value)
        assert unescape_text(text) == value and text.isprintable() and is_escaped_text(text)
    assert escape_bytes("a\u202eb".encode()) == "a\\xe2\\x80\\xaeb"
    assert not is_escaped_text("a\x1b") and not is_escaped_text("a\\q") and is_escaped_text("été")
    assert escape_bytes(b"a\\x41") != escape_bytes(b"aA")
    with pytest.raises(ValueError, match="stray backslash"):
        unescape_text("a\\q")


# ------------------------------------------------------------------------------------------ populations


def test_the_zipf_population_is_seeded_and_its_truth_is_the_values_it_drew() -> None:
    from simulator import make_population

    task = _task()
    pops = [make_population(task, 5_000, "zipf-strings:1.2:300", seed=9) for _ in range(2)]
    chunks = [[c for _, c in p.chunks(np.array([0, 2_000, 5_000]))] for p in pops]
    assert all(np.array_equal(a.reports.seeds, b.reports.seeds) for a, b in zip(*chunks))
    truth = pops[0].truth()
    top = truth["heavy_hitters"]
    assert truth["mechanism"] == "pem" and truth["distinct"] <= 300 and len(top[0]["value"]) == 3
    assert [t["frequency"] for t in top] == sorted((t["frequency"] for t in top), reverse=True)
    assert abs(sum(t["frequency"] for t in top) - 1.0) < 1e-9  # every drawn value is above 1e-4
    assert sum(len(c.reports) for c in chunks[0]) == 5_000


def test_a_csv_population_takes_one_string_per_row_and_refuses_a_long_one(tmp_path: Path) -> None:
    from simulator import make_population

    path = tmp_path / "words.csv"
    path.write_text("word,n\nfoo,1\nbar,2\nfoo,3\nlonger,4\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"row 5 has 6 bytes, more than the task's max_length 3"):
        make_population(_task(), None, f"csv:{path}:word", seed=1)
    pop = make_population(_task(truncate=True), None, f"csv:{path}:word", seed=1)
    assert pop.n_users == 4
    list(pop.chunks(np.array([0, 4])))
    assert {t["value"]: t["frequency"] for t in pop.truth()["heavy_hitters"]} == {"foo": 0.5, "bar": 0.25,
                                                                                  "lon": 0.25}
    with pytest.raises(ValueError, match="no column 'name'"):
        make_population(_task(), None, f"csv:{path}:name", seed=1)
    with pytest.raises(ValueError, match="zipf-strings"):
        make_population(_task(), 10, "zipf:1.1", seed=1)
    with pytest.raises(ValueError, match="S must be > 0"):
        make_population(_task(), 10, "zipf-strings:-1", seed=1)


# ------------------------------------------------------------------------------------------------ the plan


def test_the_plan_gives_the_verification_std_the_smallest_frequency_found_and_the_memory() -> None:
    from ldp.plan import plan_task

    task = _task(max_length=6, top_k=64)
    pem = task.make_mechanism()
    plan = plan_task(task, 1_000_000)
    (err,) = plan["errors"]
    n_v = int(1_000_000 * pem.weights[-1])
    lv = pem.levels[-1]
    assert err["std"] == pytest.approx((lv.q * (1 - lv.q) / (n_v * (lv.p - lv.q) ** 2)) ** 0.5)
    assert err["reports_per_level"][-1] == n_v and sum(err["reports_per_level"]) <= 1_000_000
    det = plan["detection"]
    assert 0 < det["frequency_kept_by_every_search_level_half_the_time"] < det[
        "frequency_kept_by_every_search_level_80pct"] < 0.01
    small = plan_task(task, 100_000)["detection"]
    assert small["frequency_kept_by_every_search_level_half_the_time"] > det[
        "frequency_kept_by_every_search_level_half_the_time"]
    # three sketch levels of 4 Mi buckets in int32 (n * g > 32767) plus the verification reports
    assert 3 * 4 * 2**20 * 4 <= plan["cost"]["accumulator_bytes"] < 3 * 4 * 2**20 * 4 + 12 * n_v
