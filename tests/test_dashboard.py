"""The dashboard's data shaping, store reads and Bokeh document, without a browser or a server process
(the browser tests are tests/test_dashboard_browser.py)."""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path
from statistics import NormalDist

import pytest
from bokeh.document import Document

from pipelines import dashboard
from pipelines.dashboard_app import shape
from pipelines.dashboard_app.app import SERIES_SLOTS, Dashboard
from pipelines.dashboard_app.reader import StoreError, StoreReader, parse_store_url
from pipelines.dashboard_app.simulated import LABELS, SimulatedStream, open_writer

NAN = float("nan")


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file, or a new database on the session's throw-away PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/estimates.db"
    import psycopg

    base = request.getfixturevalue("postgres_url")
    name = f"dash_unit_{os.getpid()}_{abs(hash(request.node.nodeid)) % 10**8}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return base.rsplit("/", 1)[0] + "/" + name


def _row(item: int, estimate: float | None, lo: float | None = None, hi: float | None = None, **kw):
    return {"item": item, "estimate": estimate, "ci_low": lo, "ci_high": hi, **kw}


# -- shape --------------------------------------------------------------------------------------------------
def test_noise_level_of_an_answer_is_its_own_interval():
    assert shape.noise_level(_row(0, 0.1, -0.01, 0.2)) is True
    assert shape.noise_level(_row(0, 0.1, 0.0, 0.2)) is True  # 0 on the edge is inside
    assert shape.noise_level(_row(0, 0.1, 0.01, 0.2)) is False
    assert shape.noise_level(_row(0, 0.1)) is None  # no interval: not judged


def _est(item: int, estimate: float | None, u: float | None = None, s: float | None = 0.01, **kw):
    """A stored frequency row: published estimate, per-value interval, unbiased estimate and std."""
    lo, hi = (None, None) if estimate is None else (estimate - 0.02, estimate + 0.02)
    return {"item": item, "estimate": estimate, "ci_low": lo, "ci_high": hi,
            "unbiased": estimate if u is None else u, "unbiased_std": s, **kw}  # fmt: skip


def test_top_k_is_largest_first_with_simultaneous_intervals_and_bonferroni_flags():
    z = NormalDist().inv_cdf(1 - 0.05 / (2 * 100))  # Bonferroni over d = 100: 3.48
    rows = [
        _est(0, 0.03),  # 3 std: a per-value test would flag it; over 100 values it is not shown above 0
        _est(1, 0.5),
        _est(2, 0.2, ci_includes_zero=1),  # the store's flag is not what the top-k judges by
        _est(3, 0.2),
        _est(5, None),
        _est(4, 0.01, u=None, s=None),  # no unbiased estimate stored: no interval valid after selection
    ]
    top = shape.top_k(rows, 3, {1: "red"}, domain_size=100)
    assert top["item"] == [1, 2, 3]  # 0.5, then the tie 0.2 by index
    assert top["name"] == ["red", "value 2", "value 3"]
    assert top["rank"] == [1, 2, 3]
    assert top["ci_low"][0] == pytest.approx(0.5 - z * 0.01)
    assert top["ci_high"][0] == pytest.approx(0.5 + z * 0.01)
    rule = "Bonferroni over d = 100 at 5%"
    assert top["noise"] == [f"above 0 ({rule})"] * 3 and top["above_zero"] == [1, 1, 1]
    every = shape.top_k(rows, 10, domain_size=100)
    assert every["item"] == [1, 2, 3, 0, 4]  # None estimates are not ranked
    assert every["noise"][3] == f"not shown above 0 ({rule})" and every["above_zero"][3] == 0
    assert every["color"][3] == shape.NOISE_COLOR and every["ci_low"][3] == 0.0
    assert every["noise"][4] == shape.NO_CI and math.isnan(every["ci_low"][4])
    assert every["above_zero"][4] == -1
    # the domain, not the rows the store holds, sets the rule: with d = 10**6 the 3.48-sd bar moves to 5.45
    big = shape.top_k([_est(1, 0.05), _est(2, 0.5)], 2, domain_size=10**6)
    assert big["above_zero"] == [1, 0]  # 0.05 is 5 sd: above 0 for d = 100, not for a million values
    assert shape.top_k(rows, 0)["item"] == []
    bh = shape.top_k(rows, 4, domain_size=100, rule="bh")
    assert bh["noise"][0] == "above 0 (Benjamini-Hochberg FDR 5% over d = 100)"


def test_sparse_top_k_keeps_the_rows_intervals_and_says_they_are_per_value():
    rows = [{"item": 7, "estimate": 0.4, "ci_low": 0.1, "ci_high": 0.7},
            {"item": 9, "estimate": 0.2, "ci_low": -0.1, "ci_high": 0.5}]  # fmt: skip
    top = shape.top_k(rows, 2, simultaneous=False)
    assert top["ci_low"] == [0.1, -0.1] and top["above_zero"] == [1, 0]
    assert all(shape.PER_VALUE in n for n in top["noise"])


def test_numeric_figures_are_tested_against_0_only_inside_the_range():
    latency = json.dumps({"attributes": [{"name": "load_ms", "low": 0, "high": 5000}]})
    temperature = json.dumps({"attributes": [{"name": "t", "low": -20, "high": 40}]})
    assert not shape.zero_inside(latency) and shape.zero_inside(temperature)
    assert not shape.zero_inside(None) and not shape.zero_inside("{}")
    assert not shape.zero_inside(temperature, 3)
    mean = [{"item": 0, "estimate": 805.0, "ci_low": 790.0, "ci_high": 820.0, "label": "mean"}]
    cols = shape.answers_columns(mean, 5, test_zero=False)
    assert cols["noise"] == [shape.NO_ZERO_TEST] and cols["above_zero"] == [-1]
    assert shape.SIGNAL not in cols["noise"]
    assert shape.answers_columns(mean, 5)["noise"] == [shape.SIGNAL]  # a range that holds 0: tested


def test_top_k_names_are_unique_for_the_category_axis():
    rows = [_row(0, 0.3, label="same"), _row(1, 0.2, label="same"), _row(2, 0.1, label="other")]
    assert shape.top_k(rows, 3)["name"] == ["same (#0)", "same (#1)", "other"]


def test_labels_from_summary_accepts_lists_and_both_mappings():
    assert shape.labels_from_summary({"labels": ["a", None, "c"]}) == {0: "a", 2: "c"}
    assert shape.labels_from_summary({"labels": {"0": "a", "5": "f"}}) == {0: "a", 5: "f"}
    assert shape.labels_from_summary({"labels": {"a": 0, "f": 5}}) == {0: "a", 5: "f"}
    assert shape.labels_from_summary({"task": {"labels": ["x"]}}) == {0: "x"}
    assert shape.labels_from_summary(None) == {} == shape.labels_from_summary({"labels": 3})
    assert shape.value_name(2, None, {2: "blue"}) == "blue"
    assert shape.value_name(2, "row label", {2: "blue"}) == "row label"
    assert shape.value_name(7, None, {}) == "value 7"


def test_current_window_is_the_latest_end_then_latest_start():
    windows = [
        {"window_start": 0, "window_end": 60},
        {"window_start": 60, "window_end": 120},
        {"window_start": 90, "window_end": 120},  # sliding: same end, later start
    ]
    assert shape.current_window(windows) == (90, 120)
    assert shape.current_window([]) is None
    assert shape.current_window([{"window_start": 0, "window_end": 0}]) == (0, 0)


def test_latency_is_written_minus_window_end_and_the_global_window_has_none():
    panes = [
        {
            "window_start": 0,
            "window_end": 60_000,
            "pane_index": 0,
            "pane_timing": "EARLY",
            "written_ms": 30_000,
        },
        {
            "window_start": 0,
            "window_end": 60_000,
            "pane_index": 1,
            "pane_timing": "ON_TIME",
            "written_ms": 61_500,
        },
        {
            "window_start": 0,
            "window_end": 60_000,
            "pane_index": 2,
            "pane_timing": "LATE",
            "written_ms": 72_000,
        },
        {
            "window_start": 60_000,
            "window_end": 120_000,
            "pane_index": 0,
            "pane_timing": "ON_TIME",
            "written_ms": 122_500,
        },
        {"window_start": 0, "window_end": 0, "pane_index": 0, "pane_timing": "ON_TIME", "written_ms": 5},
    ]
    lat = shape.latency_columns(panes)
    assert lat["latency_s"] == [-30.0, 1.5, 12.0, 2.5]
    assert lat["timing"] == ["EARLY", "ON_TIME", "LATE", "ON_TIME"]
    assert lat["color"][0] == shape.TIMING_COLORS["EARLY"]
    # the summary covers panes written after their window closed (EARLY ones are not latencies)
    assert shape.latency_summary(lat["latency_s"], lat["timing"]) == {"n": 3, "median_s": 2.5, "max_s": 12.0}
    assert shape.latency_summary([1.0, 3.0]) == {"n": 2, "median_s": 2.0, "max_s": 3.0}
    assert shape.latency_summary([], [])["median_s"] is None
    assert shape.latest_pane_latency(panes) == {(0, 60_000): 12.0, (60_000, 120_000): 2.5}


def test_windows_columns_newest_first_with_timing_and_final():
    windows = [
        {
            "window_start": 0,
            "window_end": 60_000,
            "last_pane_index": 2,
            "last_pane_timing": "LATE",
            "is_final": 1,
            "n_reports": 3060,
            "last_written_ms": 72_000,
        },
        {
            "window_start": 60_000,
            "window_end": 120_000,
            "last_pane_index": 0,
            "last_pane_timing": "EARLY",
            "is_final": 0,
            "n_reports": 1500,
            "last_written_ms": 90_000,
        },
    ]
    cols = shape.windows_columns(windows, {(0, 60_000): 12.0})
    assert cols["window_end"] == [120_000, 60_000]
    assert cols["final"] == ["open", "final"]
    assert cols["timing"] == ["EARLY", "LATE"]
    assert cols["line"] == [shape.TIMING_COLORS["EARLY"], "black"]
    assert cols["n_reports"] == [1500, 3060]
    assert math.isnan(cols["latency_s"][0]) and cols["latency_s"][1] == 12.0
    assert cols["x"] == [90_000.0, 30_000.0]


def test_counts_and_reasons_columns():
    counts = [
        {
            "window_start": 60,
            "window_end": 120,
            "read": 110,
            "accepted": 100,
            "rejected": 8,
            "late_dropped": 2,
            "lost": 0,
            "reasons_json": json.dumps({"value_out_of_domain": 5, "wrong_task_id": 3}),
        },
        {
            "window_start": 0,
            "window_end": 60,
            "read": 50,
            "accepted": 49,
            "rejected": 1,
            "late_dropped": 0,
            "lost": 0,
            "reasons_json": json.dumps({"wrong_task_id": 1}),
        },
        {
            "window_start": 120,
            "window_end": 180,
            "read": 7,
            "accepted": 7,
            "rejected": 0,
            "late_dropped": 0,
            "lost": 0,
            "reasons_json": None,
        },
    ]
    cols = shape.counts_columns(counts)
    assert cols["window_end"] == [60, 120, 180]  # oldest first
    assert cols["read"] == [50, 110, 7] and cols["dead_letters"] == [1, 8, 0]
    reasons = shape.reasons_columns(counts)
    # totals over the shown windows first (by count), then each window's reasons, newest window first
    assert list(zip(reasons["window"], reasons["reason"], reasons["count"]))[:2] == [
        ("all shown windows", "value_out_of_domain", 5),
        ("all shown windows", "wrong_task_id", 4),
    ]
    assert reasons["count"][2:] == [5, 3, 1]
    assert shape.reasons_columns(counts, max_windows=1)["count"] == []  # the newest has no dead letters
    batch = [
        {
            "window_start": 0,
            "window_end": 0,
            "read": 9,
            "accepted": 9,
            "rejected": 0,
            "late_dropped": 0,
            "lost": 0,
            "reasons_json": "{}",
        }
    ]
    spread = shape.counts_columns(batch, (60_000, 180_000))  # a batch run's counts across its windows
    assert spread["x"] == [120_000.0] and spread["width"] == [108_000.0]
    assert spread["window"] == ["whole run (global window)"]


def test_series_columns_follow_windows_and_keep_missing_intervals_as_gaps():
    rows = [
        {
            "item": 1,
            "window_start": 60,
            "window_end": 120,
            "estimate": 0.2,
            "ci_low": 0.1,
            "ci_high": 0.3,
            "pane_timing": "ON_TIME",
            "is_final": 1,
        },
        {
            "item": 1,
            "window_start": 0,
            "window_end": 60,
            "estimate": 0.1,
            "ci_low": None,
            "ci_high": None,
            "pane_timing": "LATE",
            "is_final": 0,
        },
        {"item": 2, "window_start": 0, "window_end": 60, "estimate": 0.3, "ci_low": 0.2, "ci_high": 0.4},
        {"item": 9, "window_start": 0, "window_end": 60, "estimate": 0.9},
    ]
    series = shape.series_columns(rows, [1, 2, 5])
    assert series[1]["x"] == [60, 120] and series[1]["estimate"] == [0.1, 0.2]
    assert math.isnan(series[1]["lower"][0]) and series[1]["upper"][1] == 0.3
    assert series[1]["final"] == [0, 1]
    assert series[2]["x"] == [60] and series[5]["x"] == []
    assert 9 not in series


def test_answers_columns_and_query_text():
    rows = [
        {
            "item": 1,
            "estimate": 0.25,
            "ci_low": 0.2,
            "ci_high": 0.3,
            "extra_json": json.dumps({"query": {"age": [20, 29], "income": [0, 3]}}),
        },
        {"item": 0, "estimate": 0.01, "ci_low": -0.02, "ci_high": 0.04, "extra_json": None},
    ]
    cols = shape.answers_columns(rows, 5)
    assert cols["item"] == [0, 1]  # by query index, not by answer
    assert cols["name"] == ["#0: query 0", "#1: age in [20, 29], income in [0, 3]"]
    assert cols["noise"] == [shape.NOISE_CI, shape.SIGNAL]
    assert cols["above_zero"] == [0, 1]
    assert shape.query_text({"age": [1, 2]}, 3) == "age in [1, 2]"
    assert shape.query_text("not a mapping", 3) == "query 3"


def test_budget_items_pick_the_accounting_figures_of_a_summary():
    summary = {
        "task_id": "t",
        "labels": ["a"],
        "budget": {"epsilon_per_report": 1.0, "reports_per_period": 24},
        "accounting": {"basic": {"epsilon": 24.0}, "tight": {"epsilon": 9.123456789, "delta": 1e-9}},
    }
    items = dict(shape.budget_items(summary))
    assert items == {
        "budget.epsilon_per_report": "1",
        "budget.reports_per_period": "24",
        "accounting.basic.epsilon": "24",
        "accounting.tight.epsilon": "9.12346",
        "accounting.tight.delta": "1e-09",
    }
    nested = {"budget": {"basic": 3.0, "tight": 2.5, "any_history": {"basic": 3.0, "tight": 2.9}}, "x": {}}
    assert shape.composition_pairs(nested) == [("budget", 3.0, 2.5), ("budget.any_history", 3.0, 2.9)]
    assert shape.composition_pairs(summary) == []  # no {basic: number, tight: number} pair in it
    assert shape.budget_items({"task_id": "t", "labels": []}) == []
    assert shape.budget_items(None) == []


def test_format_window_and_ms():
    assert shape.format_window(0, 0) == "whole run (global window)"
    assert shape.format_window(1_795_000_000_000, 1_795_000_060_000) == "[2026-11-18 11:06:40, 11:07:40) UTC"
    assert shape.format_ms(1_795_000_000_250) == "2026-11-18 11:06:40.250"
    assert shape.format_ms(None) == "-"


# -- reader -------------------------------------------------------------------------------------------------
def test_parse_store_url_forms_and_errors(tmp_path: Path):
    assert parse_store_url("sqlite:///out/e.db").target == "out/e.db"
    assert parse_store_url("sqlite:////abs/e.db").target == "/abs/e.db"
    assert parse_store_url(str(tmp_path / "e.db")).kind == "sqlite"
    assert parse_store_url("postgresql://u@127.0.0.1:5432/db").kind == "postgresql"
    for bad, words in (
        ("", "empty"),
        ("sqlite://e.db", "sqlite:///PATH"),
        ("mysql://h/db", "unsupported scheme"),
    ):
        with pytest.raises(StoreError, match=words):
            parse_store_url(bad)


def test_reader_waits_for_the_file_and_the_tables_then_reads_what_was_written(tmp_path: Path):
    with pytest.raises(StoreError, match="does not exist"):
        StoreReader(str(tmp_path / "missing" / "e.db"))
    url = f"sqlite:///{tmp_path}/e.db"
    reader = StoreReader(url)
    assert not reader.ready()  # no file yet
    assert not (tmp_path / "e.db").exists()  # the reader never creates the store
    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=500)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    assert reader.ready()
    token0 = reader.change_token(stream.task_id)
    stream.write_window(writer, 0)
    token1 = reader.change_token(stream.task_id)
    assert token1 != token0
    assert reader.change_token(stream.task_id) == token1  # stable while nothing is written
    assert [t["task_id"] for t in reader.tasks()] == [stream.task_id]
    (win,) = reader.windows(stream.task_id, 10)
    assert (win["window_start"], win["window_end"]) == stream.window(0)
    assert win["is_final"] == 1 and win["last_pane_timing"] == "ON_TIME"
    rows = reader.window_rows(stream.task_id, "estimates", 0, *stream.window(0))
    assert [r["item"] for r in rows] == list(range(len(LABELS)))
    assert rows[0]["label"] == LABELS[0] and rows[0]["pane_index"] == 1
    assert reader.outputs(stream.task_id) == [("estimates", 0)]
    assert len(reader.panes(stream.task_id, 0)) == 2
    assert reader.counts(stream.task_id, 5)[0]["accepted"] == 500
    writer.close()
    # the file is replaced (a new run in the same place): the reader follows it, never the old inode
    for suffix in ("", "-wal", "-shm"):
        if (tmp_path / f"e.db{suffix}").exists():
            (tmp_path / f"e.db{suffix}").unlink()
    assert not reader.ready()
    writer = open_writer(url)
    writer.write_task("another", "frequency", "grr", 1.0, {})
    assert reader.ready() and [t["task_id"] for t in reader.tasks()] == ["another"]
    writer.close()
    reader.close()


def test_reader_reads_the_project_store_writer(tmp_path: Path):
    """The dashboard's queries against the tables ``store`` creates and writes (the job's writer)."""
    import store as store_mod

    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=400)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    stream.write_window(writer, 0)
    stream.write_window(writer, 1)
    reader = StoreReader(url)
    assert reader.ready()
    win = reader.windows(stream.task_id, 10)
    assert [(w["window_start"], w["window_end"]) for w in win] == [stream.window(1), stream.window(0)]
    ours = shape.top_k(reader.window_rows(stream.task_id, "estimates", 0, *stream.window(1)), 5)
    theirs = store_mod.open_store(url, shared=False).current(
        stream.task_id, *stream.window(1), output="estimates", grp=0, top_k=5
    )
    assert ours["item"] == [r["item"] for r in theirs]
    assert ours["estimate"] == [r["estimate"] for r in theirs]
    reasons = json.loads(reader.counts(stream.task_id, 1)[0]["reasons_json"])
    assert reasons["wrong_task_id"] == 2
    writer.close()
    reader.close()


# -- the Bokeh document -------------------------------------------------------------------------------------
def _dashboard(url: str, **kw) -> tuple[Dashboard, Document]:
    doc = Document()
    return Dashboard(doc, url, **kw), doc


def test_document_waits_then_shows_the_current_window_and_follows_new_windows(store_url: str):
    url = store_url
    dash, doc = _dashboard(url, top_k=5)
    assert doc.get_model_by_name("topk_source") is dash.topk_source
    assert "data-state='waiting'" in dash.status.text and "no tables yet" in dash.status.text

    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=2000)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    dash.poll()
    assert "waiting for the first pane" in dash.status.text
    # counts before any estimate (every report dead-lettered so far) show while the page waits
    writer.write_counts(
        stream.task_id,
        (0, 60_000),
        read=5,
        accepted=0,
        rejected=5,
        late_dropped=0,
        reasons={"wrong_task_id": 5},
        written_ms=61_000,
    )
    dash.poll()
    assert "5 reports read, 5 rejected so far" in dash.status.text
    assert dash.counts_source.data["rejected"] == [5] and dash.reasons["count"] == [5, 5]
    stream.write_window(writer, 0)
    refreshes = []
    real_refresh = dash._refresh
    dash._refresh = lambda *a: (refreshes.append(a[0]), real_refresh(*a))[1]
    dash.poll()
    assert refreshes == [stream.task_id]  # one read of the rows, however many selectors the poll set
    assert "data-state='live'" in dash.status.text
    reader = StoreReader(url)
    rows = reader.window_rows(stream.task_id, "estimates", 0, *stream.window(0))
    expected = shape.top_k(rows, 5, dict(enumerate(LABELS)))
    assert dash.topk_source.data["item"] == expected["item"]
    assert dash.topk_source.data["estimate"] == expected["estimate"]
    assert dash.topk_source.data["ci_high"] == expected["ci_high"]
    assert list(dash.topk_plot.x_range.factors) == expected["name"]
    assert "id='topk-table'" in dash.topk_table.text and expected["name"][0] in dash.topk_table.text
    # the time series follow the current top 5 at first
    assert dash.series_items.value == [str(i) for i in expected["item"]]
    assert len(dash.series_sources[0].data["x"]) == 1
    assert dash.series_items_legend[0].visible and not dash.series_items_legend[SERIES_SLOTS - 1].visible

    # nothing new: no source is replaced
    before = dash.topk_source.data
    dash.poll()
    assert dash.topk_source.data is before

    # the next window closes: the page's sources follow without a new session
    stream.write_window(writer, 1)
    dash.poll()
    rows1 = reader.window_rows(stream.task_id, "estimates", 0, *stream.window(1))
    assert dash.topk_source.data["estimate"] == shape.top_k(rows1, 5)["estimate"]
    assert shape.format_window(*stream.window(1)) in dash.status.text
    assert len(dash.series_sources[0].data["x"]) == 2
    assert dash.windows_source.data["window_end"] == [stream.window(1)[1], stream.window(0)[1]]
    # window 1 has a LATE pane at +12 s (see SimulatedStream.panes): the latency plot has every pane
    assert sorted(dash.latency_source.data["latency_s"]) == [-30.0, -30.0, 1.5, 1.9, 12.0]
    assert "median 1.90 s" in dash.latency_summary.text and "max 12.00 s" in dash.latency_summary.text
    assert dash.counts_source.data["accepted"] == [0, 2000, 2040]
    assert "value_out_of_domain" in dash.reasons["reason"]
    assert not dash.budget.visible  # this summary has no budget figures

    # the user's choices are kept: k and the series values
    dash.k_select.value = "10"
    assert len(dash.topk_source.data["item"]) == 10
    dash.series_items.value = ["31"]
    assert dash.series_items_legend[0].visible and not dash.series_items_legend[1].visible
    assert dash.series_sources[0].data["estimate"] == [
        r["estimate"]
        for w in (0, 1)
        for r in reader.window_rows(stream.task_id, "estimates", 0, *stream.window(w))
        if r["item"] == 31
    ]
    writer.close()
    reader.close()


def test_document_shows_range_answers_and_budget_figures(store_url: str):
    url = store_url
    writer = open_writer(url)
    summary = {"labels": None, "budget": {"windows": 30, "basic": 30.0, "tight": 11.5}}
    writer.write_task("ranges", "range", "hdg", 1.0, summary)
    for w in range(3):
        window = (w * 60_000, (w + 1) * 60_000)
        items = [
            {
                "item": q,
                "estimate": 0.1 * (q + 1) + 0.01 * w,
                "std": 0.01,
                "ci_low": 0.1 * (q + 1) - 0.02,
                "ci_high": 0.1 * (q + 1) + 0.02 + 0.01 * w,
                "extra_json": json.dumps({"query": {"age": [q, q + 3]}}),
            }
            for q in range(4)
        ]
        writer.write_pane(
            items,
            task_id="ranges",
            output="answers",
            window=window,
            grp=0,
            pane_index=0,
            timing="ON_TIME",
            n_reports=1000,
            written_ms=window[1] + 800,
            method="hdg",
        )
    dash, _ = _dashboard(url)
    assert dash.topk_source.data["item"] == [0, 1, 2, 3]
    assert dash.topk_source.data["name"][1] == "#1: age in [1, 4]"
    assert dash.topk_source.data["estimate"][3] == pytest.approx(0.42)
    assert dash.series_whiskers[0].visible  # answers over time get error bars
    assert dash.series_sources[0].data["x"] == [60_000, 120_000, 180_000]
    assert dash.budget.visible and "id='budget-spent'" in dash.budget.text
    assert "<td>11.5000</td><td>30.0000</td></tr>" in dash.budget.text  # tight next to basic
    assert "data-key='budget.windows'" in dash.budget.text and "budget · reports" in dash.budget.text
    assert dash.latency_summary.text.count("median 0.80 s") == 1
    writer.close()


def test_document_reports_a_bad_store_in_its_status_line(tmp_path: Path):
    dash, _ = _dashboard("mysql://h/db")
    assert "data-state='error'" in dash.status.text and "unsupported scheme" in dash.status.text
    dash, _ = _dashboard(f"sqlite:///{tmp_path}/nowhere/e.db")
    assert "does not exist" in dash.status.text


# -- the command --------------------------------------------------------------------------------------------
def test_command_refuses_a_bad_store_and_a_taken_port_in_one_line(tmp_path: Path, capsys):
    for args, words in (
        (["--store", "mysql://h/db"], "unsupported scheme"),
        (["--store", f"sqlite:///{tmp_path}/nowhere/e.db"], "does not exist"),
        (["--store", f"{tmp_path}/e.db", "--refresh", "0"], "--refresh"),
        (["--store", f"{tmp_path}/e.db", "--port", "70000"], "--port"),
    ):
        with pytest.raises(SystemExit) as exc:
            dashboard.run(args)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match="already in use"):
            dashboard.check_port("127.0.0.1", port)
        with pytest.raises(SystemExit):
            dashboard.run(["--store", f"{tmp_path}/e.db", "--port", str(port)])
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"port {port} on 127.0.0.1 is already in use" in err
    assert dashboard.check_port("127.0.0.1", 0) > 0


@pytest.mark.statistical
def test_readme_apps_example_top20_on_the_page_flags_no_zero_and_covers(tmp_path: Path):
    """The page's top 20 of the README's apps example (200,000 Zipf(1.5) users, OLH, epsilon 1, d = 1024,
    Norm-Sub, ``--seed 1``), rows as the job writes them to the store: no value of true frequency 0 is
    flagged, every whisker (simultaneous 95% over the domain) covers its truth, and the legend names the
    rule. (The per-value intervals of the same 20 values miss 9 of them: tests/test_selection.py.)"""
    import numpy as np

    from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window
    from ldp.kinds.frequency.aggregate import FrequencyAggregator
    from ldp.task import parse_task
    from simulator import make_population

    task = parse_task({"task_id": "apps-2026-12", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024,
                       "postprocess": "norm-sub"})  # fmt: skip
    pop = make_population(task, 200_000, "zipf:1.5", seed=1)
    agg = FrequencyAggregator(task)
    accs = GroupAccumulators()
    for _, chunk in pop.chunks(np.array([0, 200_000])):
        accumulate(agg, accs, 0, chunk.reports)
    (row,) = finalize_window(agg, accs, WindowInfo(0, 60_000, "ON_TIME", 0, True))
    truth = pop.counts / 200_000
    url = f"sqlite:///{tmp_path}/apps.db"
    writer = open_writer(url)
    writer.write_task(task.task_id, "frequency", "olh", 1.0, {"domain_size": 1024})
    items = [
        {"item": v, "estimate": row.frequencies[v], "std": row.std[v], "ci_low": row.ci_low[v],
         "ci_high": row.ci_high[v], "unbiased": row.unbiased[v], "unbiased_std": row.unbiased_std[v],
         "ci_includes_zero": int(row.ci_includes_zero[v]), "method": "norm-sub"}
        for v in range(1024)
    ]  # fmt: skip
    writer.write_pane(items, task_id=task.task_id, output="estimates", window=(0, 60_000), grp=0,
                      pane_index=0, timing="ON_TIME", n_reports=200_000, written_ms=61_000)  # fmt: skip
    dash, _ = _dashboard(url, top_k=20)
    dash.poll()
    top = dash.topk_source.data
    assert len(top["item"]) == 20
    flagged = [v for v, a in zip(top["item"], top["above_zero"], strict=True) if a == 1]
    assert len(flagged) >= 5 and not [v for v in flagged if truth[v] == 0]
    shown = zip(top["item"], top["ci_low"], top["ci_high"], strict=True)
    assert all(lo <= truth[v] <= hi for v, lo, hi in shown)
    assert set(top["noise"]) <= {"above 0 (Bonferroni over d = 1,024 at 5%)",
                                 "not shown above 0 (Bonferroni over d = 1,024 at 5%)"}  # fmt: skip
    assert "simultaneous 95%" in dash.topk_plot.title.text and "sim. 95% low" in dash.topk_table.text
    per_value_miss = sum(not (row.ci_low[v] <= truth[v] <= row.ci_high[v]) for v in top["item"])
    assert per_value_miss >= 5  # what the page used to draw
    writer.close()
