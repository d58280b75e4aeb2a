"""A dashboard that tells the truth: the budget of every job, stale data, late panes that
changed nothing, backfills and partial windows. The Bokeh document over a SQLite store written through the
project's writers (``store``; the job's task row through ``transforms.store.register_task``), with a
fixed page clock."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from bokeh.document import Document

from ldp.task import budget_summary, parse_task
from pipelines.dashboard_app import shape
from pipelines.dashboard_app.app import Dashboard
from pipelines.dashboard_app.simulated import SimulatedStream, open_writer
from store import open_store

NOW_MS = 1_800_000_000_000


def _budget_task() -> Any:
    return parse_task(
        {
            "task_id": "memo",
            "mechanism": "memo-olh",
            "epsilon": 1.0,
            "domain_size": 16,
            "window": {"size_s": 60},
            "budget": {"reports_per_period": 4, "period_s": 240},
        }
    )


def _dashboard(url: str, now_ms: int = NOW_MS, **kw: Any) -> Dashboard:
    return Dashboard(Document(), url, clock=lambda: now_ms / 1000.0, **kw)


def _window(writer: Any, task_id: str, window: tuple[int, int], panes: list[tuple[str, int, int, float]]):
    """Writes panes ``(timing, n_reports, written_ms, shift of every estimate)`` of one window."""
    for index, (timing, n, written, shift) in enumerate(panes):
        rows = [
            {"item": i, "estimate": 0.5 - 0.1 * i + shift, "std": 0.01, "ci_low": 0.48 - 0.1 * i + shift,
             "ci_high": 0.52 - 0.1 * i + shift}
            for i in range(4)
        ]  # fmt: skip
        writer.write_pane(
            rows, task_id=task_id, output="estimates", window=window, grp=0, pane_index=index,
            timing=timing, n_reports=n, written_ms=written,
        )  # fmt: skip


# -- (a) the budget panel reads the summary of every job ---------------------------------------------------
def test_budget_of_an_ended_job_is_read_from_its_run_summary_with_the_worst_case(tmp_path: Path):
    from transforms.store import register_task

    task = _budget_task()
    url = f"sqlite:///{tmp_path}/e.db"
    store = open_store(url, shared=False)
    figures = budget_summary(task)
    # what pipelines.job.run_job writes when a job ends: the task summary with the run summary under "run"
    register_task(store, task, task.window, run={"state": "DONE", "streaming": False, "budget": figures})
    store.close()
    writer = open_writer(url)
    _window(writer, task.task_id, (NOW_MS - 120_000, NOW_MS - 60_000), [("ON_TIME", 100, NOW_MS - 59_000, 0)])
    writer.close()
    dash = _dashboard(url)
    assert dash.budget.visible
    text = dash.budget.text
    assert "(from the job&#x27;s summary)" in text
    per = figures["per_period"]
    # the per-period figure (memoized: a constant value) and beside it the worst case over any history
    # the guaranteed (worst-case) figures lead, under a human label; the summary's key stays in data-key
    row = (
        f"<tr data-key='run.budget.per_period'><td class='name'>budget · per period</td><td>4</td>"
        f"<td class='worst'>{per['any_history']['tight']:.4f}</td>"
        f"<td class='worst'>{per['any_history']['basic']:.4f}</td>"
        f"<td>{per['tight']:.4f}</td><td>{per['basic']:.4f}</td></tr>"
    )
    assert row in text, text
    assert per["any_history"]["tight"] > per["tight"] + 1  # the two differ for this mechanism
    spent = text.split("id='budget-spent'")[1].split("</table>")[0]
    assert "data-key='run.budget.per_period.any_history'" not in spent  # beside, not again
    assert "run.budget" not in spent.replace("data-key='run.budget", "")  # no raw key is shown
    assert "if the value changes at every report" in spent and "changing_values" not in spent.replace(
        "data-key='run.budget.per_period.changing_values'", ""
    )
    # the headline leads with the guaranteed figure, then the best case
    headline = text.split("id='budget-headline'>")[1].split("</p>")[0]
    worst, best = f"{per['any_history']['tight']:.4f}", f"{per['tight']:.4f}"
    assert headline.index(worst) < headline.index(best) and "guaranteed" in headline, headline


def test_budget_of_a_running_job_is_the_tasks_policy_figures(tmp_path: Path):
    from transforms.store import register_task

    task = _budget_task()
    url = f"sqlite:///{tmp_path}/e.db"
    store = open_store(url, shared=False)
    register_task(store, task, task.window)  # what a streaming job writes when it starts: no run summary
    store.close()
    writer = open_writer(url)
    _window(writer, task.task_id, (NOW_MS - 120_000, NOW_MS - 60_000), [("ON_TIME", 100, NOW_MS - 59_000, 0)])
    writer.close()
    dash = _dashboard(url)
    assert dash.budget.visible
    assert "computed from the task&#x27;s budget policy" in dash.budget.text
    per = budget_summary(task)["per_period"]
    assert f"<td class='worst'>{per['any_history']['tight']:.4f}</td>" in dash.budget.text
    assert "<td class='name'>budget · per period</td><td>4</td>" in dash.budget.text


def test_spent_rows_put_the_figure_sets_first_and_the_worst_case_beside():
    entries = shape.budget_entries(
        {
            "labels": ["a"],
            "run": {"state": "DONE", "budget": {"policy": {"x": 1}, "lifetime": {"windows": 9, "basic": 9.0,
                    "tight": 5.0, "any_history": {"basic": 9.0, "tight": 6.0}},
                    "per_period": {"windows": 2, "basic": 2.0, "tight": 1.9}}},
        }
    )  # fmt: skip
    assert list(entries) == ["run.budget"]
    rows = shape.spent_rows(entries)
    assert [r["figure"] for r in rows] == ["run.budget.per_period", "run.budget.lifetime"]
    assert rows[0]["worst_basic"] is None  # the entry gives no worst case: none is made up
    assert (rows[1]["worst_basic"], rows[1]["worst_tight"], rows[1]["windows"]) == (9.0, 6.0, 9)


# -- (b) the newest pane's age and a stale flag ------------------------------------------------------------
def test_freshness_says_the_age_and_flags_stale_data_unless_the_job_ended():
    assert shape.stale_bound_s({"window": {"size_s": 60, "allowed_lateness_s": 30}}) == 180.0
    assert shape.stale_bound_s({}) == shape.DEFAULT_STALE_S
    assert shape.stale_bound_s({"window": {"size_s": 60}}, 10) == 10.0
    assert shape.freshness(None, NOW_MS, 60) == ("none", "no pane written yet")
    state, text = shape.freshness(NOW_MS - 12_000, NOW_MS, 60)
    assert state == "fresh" and text.startswith("newest pane 12 s ago")
    state, text = shape.freshness(NOW_MS - 600_000, NOW_MS, 60)
    assert state == "stale" and text.startswith("STALE: newest pane 10 min ago") and "60 s bound" in text
    state, text = shape.freshness(NOW_MS - 600_000, NOW_MS, 60, {"state": "DONE"})
    assert state == "ended" and "the job ended (DONE)" in text


def test_freshness_follows_the_runs_status_and_heartbeat():
    run = {"run_id": "r1", "status": "live", "heartbeat_ms": NOW_MS - 5_000}
    state, text = shape.freshness(NOW_MS - 10_000, NOW_MS, 60, None, run)
    assert state == "fresh" and text.endswith("run r1 live (heartbeat 5 s ago)")
    state, text = shape.freshness(NOW_MS - 100_000, NOW_MS, 60, None, run)
    assert state == "stale" and "while run r1 live (heartbeat 5 s ago): no reports arriving?" in text
    dead = {**run, "heartbeat_ms": NOW_MS - 200_000}  # beyond the store's 90 s rule
    state, text = shape.freshness(NOW_MS - 10_000, NOW_MS, 60, None, dead)
    assert state == "stale" and "run r1 is not alive, its last heartbeat 3 min ago" in text
    assert shape.freshness(None, NOW_MS, 60, None, {**run, "status": "dead"})[0] == "stale"
    state, text = shape.freshness(NOW_MS - 10_000, NOW_MS, 60, None, {**run, "status": "ended"})
    assert state == "ended" and "run r1 ended" in text
    failed = {**run, "status": "failed", "error": "store lost"}
    assert shape.freshness(NOW_MS, NOW_MS, 60, None, failed) == (
        "failed",
        f"newest pane 0 s ago ({shape.format_ms(NOW_MS)} UTC); run r1 FAILED: store lost",
    )


def test_document_shows_the_latest_run_and_its_end(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    now = int(time.time() * 1000)
    writer.write_task("t", "frequency", "grr", 1.0, {"window": {"size_s": 60}})
    writer.begin_run("run-1", "t")
    _window(writer, "t", (now - 70_000, now - 10_000), [("ON_TIME", 100, now - 9_000, 0.0)])
    dash = Dashboard(Document(), url)  # the real clock: the store's heartbeat is the real clock's
    assert "data-state='fresh'" in dash.freshness.text and "run run-1 live (heartbeat" in dash.freshness.text
    writer.store.end_run("run-1", "failed", error="a pane could not be written")
    writer.close()
    dash.poll()
    assert "data-state='failed'" in dash.freshness.text
    assert "run run-1 FAILED: a pane could not be written" in dash.freshness.text


def test_document_flags_stale_data_and_keeps_the_age_current(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=300, start_ms=NOW_MS - 600_000)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    stream.write_window(writer, 0)  # newest pane: window end + 1.5 s = NOW - 538.5 s
    writer.close()
    newest = NOW_MS - 600_000 + 60_000 + 1_500
    clock = {"ms": newest + 20_000}
    dash = Dashboard(Document(), url, clock=lambda: clock["ms"] / 1000.0)
    assert "data-state='fresh'" in dash.freshness.text and "newest pane 20 s ago" in dash.freshness.text
    clock["ms"] = newest + 200_000  # bound: 2 x 60 s + 60 s lateness + 30 s = 210 s
    dash.poll()  # nothing new in the store: the age still moves on
    assert "newest pane 3 min ago" in dash.freshness.text and "data-state='fresh'" in dash.freshness.text
    clock["ms"] = newest + 211_000
    dash.poll()
    assert "data-state='stale'" in dash.freshness.text and "STALE" in dash.freshness.text
    dash = Dashboard(Document(), url, clock=lambda: clock["ms"] / 1000.0, stale_after=5000)
    assert "data-state='fresh'" in dash.freshness.text


# -- (c) late panes that changed nothing; backfills --------------------------------------------------------
def test_a_late_pane_that_changed_nothing_is_not_late_and_not_in_the_latency(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    writer.write_task("t", "frequency", "grr", 1.0, {"window": {"size_s": 60, "allowed_lateness_s": 120}})
    w0, w1 = (NOW_MS - 180_000, NOW_MS - 120_000), (NOW_MS - 120_000, NOW_MS - 60_000)
    # w0: ON_TIME, then a LATE pane with the same reports and numbers (a re-firing that changed nothing)
    _window(writer, "t", w0, [("ON_TIME", 100, w0[1] + 2_000, 0.0), ("LATE", 100, w0[1] + 50_000, 0.0)])
    # w1: ON_TIME, then a LATE pane with new reports: a real late pane
    _window(writer, "t", w1, [("ON_TIME", 100, w1[1] + 3_000, 0.0), ("LATE", 110, w1[1] + 40_000, 0.01)])
    writer.close()
    dash = _dashboard(url)
    wins = dash.windows_source.data
    assert wins["window_end"] == [w1[1], w0[1]]
    assert wins["timing"] == ["LATE", "ON_TIME"] and wins["pane_index"] == [1, 0]
    assert wins["latency_s"] == [40.0, 2.0]
    lat = dash.latency_source.data
    assert sorted(lat["latency_s"]) == [2.0, 3.0, 40.0]  # the unchanged pane's 50 s is not drawn
    assert "n = 3, median 3.00 s, max 40.00 s" in dash.latency_summary.text
    assert "1 LATE pane(s) that changed nothing" in dash.latency_summary.text
    # candidates are the LATE panes with the previous pane's report count; the numbers decide
    panes = [
        {"output": "e", "grp": 0, "window_start": 0, "window_end": 9, "pane_index": 0,
         "pane_timing": "ON_TIME", "n_reports": 5},
        {"output": "e", "grp": 0, "window_start": 0, "window_end": 9, "pane_index": 1,
         "pane_timing": "LATE", "n_reports": 5},
    ]  # fmt: skip
    cands = shape.late_candidates(panes)
    assert cands == [(("e", 0, 0, 9, 1), ("e", 0, 0, 9, 0))]
    assert shape.unchanged_panes(cands, {}, accumulating=False) == set()  # no history, discarding: new data
    assert shape.unchanged_panes(cands, {}, accumulating=True) == {("e", 0, 0, 9, 1)}
    other = {("e", 0, 0, 9, 1): [(0, 0.2)], ("e", 0, 0, 9, 0): [(0, 0.1)]}
    assert shape.unchanged_panes(cands, other, accumulating=True) == set()  # the numbers changed


def test_backfill_latency_is_left_out_and_labelled(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    writer.write_task("t", "frequency", "grr", 1.0, {"window": {"size_s": 60, "allowed_lateness_s": 0}})
    old = (NOW_MS - 3 * 86_400_000, NOW_MS - 3 * 86_400_000 + 60_000)  # three days old, written now
    recent = (NOW_MS - 70_000, NOW_MS - 10_000)
    _window(writer, "t", old, [("ON_TIME", 100, NOW_MS - 20_000, 0.0)])
    _window(writer, "t", recent, [("ON_TIME", 100, NOW_MS - 8_000, 0.0)])
    writer.close()
    dash = _dashboard(url)
    assert dash.latency_source.data["latency_s"] == [2.0]
    text = dash.latency_summary.text
    assert "n = 1" in text and "1 backfill pane(s) (written more than 660 s after their window ended" in text
    assert math.isnan(dash.windows_source.data["latency_s"][1])  # the old window's: not a live latency

    # a batch run (its run summary says so): no latency at all, and the page says why
    store = open_store(url, shared=False)
    run = {"state": "DONE", "streaming": False}
    store.write_task("t", kind="frequency", mechanism="grr", epsilon=1.0, task_json=json.dumps({}),
                     summary={"window": {"size_s": 60}, "run": run})  # fmt: skip
    store.close()
    dash.poll()
    assert dash.latency_source.data["latency_s"] == []
    assert "latency not shown: a batch run" in dash.latency_summary.text
    assert "the job ended (DONE)" in dash.freshness.text


# -- (d) partial windows -----------------------------------------------------------------------------------
def test_an_early_pane_is_marked_partial_in_the_headline(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    writer.write_task("t", "frequency", "grr", 1.0, {"window": {"size_s": 60, "early_firing_s": 10}})
    window = (NOW_MS - 30_000, NOW_MS + 30_000)  # still open
    _window(writer, "t", window, [("EARLY", 50, NOW_MS - 1_000, 0.0)])
    dash = _dashboard(url)
    assert "data-partial='1'" in dash.status.text and "PARTIAL window (EARLY pane" in dash.status.text
    assert dash.topk_plot.title.text.startswith("PARTIAL (EARLY pane, window still open)")
    later = NOW_MS + 32_000
    writer.write_pane(
        [{"item": 0, "estimate": 0.4, "ci_low": 0.3, "ci_high": 0.5}], task_id="t", output="estimates",
        window=window, grp=0, pane_index=1, timing="ON_TIME", n_reports=100, written_ms=later,
    )  # fmt: skip
    writer.close()
    dash.poll()
    assert "data-partial='0'" in dash.status.text and "PARTIAL" not in dash.status.text
    assert not dash.topk_plot.title.text.startswith("PARTIAL")


@pytest.mark.parametrize(
    "timing,final,partial", [("EARLY", 0, True), ("EARLY", 1, False), ("LATE", 0, False)]
)
def test_is_partial(timing: str, final: int, partial: bool):
    assert shape.is_partial(timing, final) is partial


def test_stale_after_flag_is_checked(capsys):
    from pipelines import dashboard

    with pytest.raises(SystemExit) as exc:
        dashboard.run(["--store", "x.db", "--stale_after", "0"])
    assert exc.value.code == 2 and "--stale_after" in capsys.readouterr().err


def test_counts_of_several_runs_show_the_newest_per_window():
    rows = [
        {"window_start": 0, "window_end": 60, "read": 5, "written_ms": 100, "run_id": "a"},
        {"window_start": 0, "window_end": 60, "read": 7, "written_ms": 900, "run_id": "b"},
        {"window_start": 60, "window_end": 120, "read": 3, "written_ms": 500, "run_id": "a"},
    ]
    assert [(r["window_end"], r["read"]) for r in shape.latest_counts(rows)] == [(120, 3), (60, 7)]


def test_a_single_window_store_gets_wall_clock_time_axes(tmp_path: Path):
    """One window: every time plot spans twice the window (not a few ms around one x) and every tick
    format BokehJS may pick is wall-clock time, never an offset in micro- or milliseconds."""
    from pipelines.dashboard_app.panels import WALL_CLOCK

    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=500)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    stream.write_window(writer, 0)
    writer.close()
    dash = _dashboard(url)
    assert len(dash.series_sources[0].data["x"]) == 1
    for fig in dash.time_plots:
        assert fig.x_range.default_span == 2 * stream.window_s * 1000, fig.name
        formatter = fig.xaxis[0].formatter
        for scale, spec in WALL_CLOCK.items():
            assert getattr(formatter, scale) == spec and "us" not in spec and "%f" not in spec
        assert formatter.context is None


def test_counts_and_windows_agree_or_the_difference_is_on_the_page(tmp_path: Path):
    """Counts windows are cut by arrival time, estimate windows by event time: with the same bounds and
    the same totals the note says they agree; a report counted in the next counts window is named."""
    url = f"sqlite:///{tmp_path}/e.db"
    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=500)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    for index in range(2):
        stream.write_window(writer, index)
    dash = _dashboard(url)
    assert "data-agree='1'" in dash.counts_note.text and "same boundaries" in dash.counts_note.text
    assert "<td class=''>500</td><td class='name'>" in dash.windows_table.text  # accepted beside n_reports
    # 40 more reports counted in window 1's counts window than its panes hold: the difference is named
    window, n_reports = stream.window(1), dash.windows_source.data["n_reports"][0]
    writer.write_counts(stream.task_id, window, read=n_reports + 40, accepted=n_reports + 40, rejected=0,
                        late_dropped=0, reasons={}, written_ms=window[1] + 90_000)  # fmt: skip
    writer.close()
    dash.poll()
    note = dash.counts_note.text
    assert "data-agree='0'" in note and "a difference of +40" in note and "arrives after" in note, note
    assert f"<td class=''>{n_reports + 40:,}</td><td class='name'>" in dash.windows_table.text
