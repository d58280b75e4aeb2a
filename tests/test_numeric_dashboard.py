"""The dashboard's numeric panel (pipelines.dashboard_app.app): a store holding a numeric task's rows over
several windows, written by ``store`` from the aggregator's own rows, read back into the Bokeh document
without a browser."""

from __future__ import annotations

import json
from pathlib import Path

from bokeh.document import Document

from ldp import task as T
from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window, make_aggregator
from ldp.kinds.numeric.aggregate import NumericEstimateRow
from pipelines.dashboard_app import shape
from pipelines.dashboard_app.app import Dashboard
from pipelines.dashboard_app.simulated import HOSTILE_TEXTS, SimulatedStream, open_writer
from store import open_store

WINDOW_MS = 60_000


def _task(name: str) -> dict:
    return {
        "task_id": "lat-dash",
        "kind": "numeric",
        "mechanism": "square-wave",
        "epsilon": 1.0,
        "params": {"bins": 64},
        "attributes": [{"name": name, "low": 0, "high": 500}],
        "quantiles": [0.5, 0.9, 0.99],
    }


def _rows(task_obj: dict, rng, windows: int) -> list[NumericEstimateRow]:
    """One row per window: the aggregator's finalize over fresh reports (the last window an EARLY pane)."""
    task = T.parse_task(task_obj)
    agg = make_aggregator(task, replicas=4)
    mech = task.make_mechanism()
    out = []
    for w in range(windows):
        reports = mech.encode(rng.lognormal(4.0 + 0.2 * w, 0.8, 3000), rng=rng)
        acc = accumulate(agg, GroupAccumulators(), 0, reports)
        timing = "EARLY" if w == windows - 1 else "ON_TIME"
        info = WindowInfo(w * WINDOW_MS, (w + 1) * WINDOW_MS, timing, 0, timing != "EARLY")
        (row,) = finalize_window(agg, acc, info)
        out.append(row)
    return out


def _store(tmp_path: Path, task_obj: dict, rows: list[NumericEstimateRow]) -> str:
    url = f"sqlite:///{tmp_path}/numeric.db"
    store = open_store(url, shared=False)
    try:
        store.write_task(
            task_obj["task_id"], kind="numeric", mechanism="square-wave", epsilon=1.0,
            task_json=json.dumps(task_obj),
        )  # fmt: skip
        for row in rows:
            start, end = row.window_start, row.window_end
            store.write_pane(task_obj["task_id"], start, end, 0, row.pane_timing, [row], written_ms=end + 500)
            if row.pane_timing != "EARLY":
                store.mark_final(task_obj["task_id"], start, end, final_ms=end + 1000)
    finally:
        store.close()
    return url


def test_numeric_panel_holds_the_stored_mean_and_quantiles_of_every_window(tmp_path, rng):
    task_obj = _task("latency_ms")
    rows = _rows(task_obj, rng, 3)
    assert all(len(r.quantiles) == 3 for r in rows)
    dash = Dashboard(Document(), _store(tmp_path, task_obj, rows), clock=lambda: 200.0)
    assert dash.view_select.value == "numeric, group 0"
    assert dash.numeric_plot.visible and dash.numeric_table.visible
    mean = dash.numeric_mean_source.data
    assert list(mean["x"]) == [r.window_end for r in rows]
    assert list(mean["estimate"]) == [r.mean for r in rows]
    assert list(mean["lower"]) == [r.mean_ci_low for r in rows]
    assert list(mean["upper"]) == [r.mean_ci_high for r in rows]
    assert list(mean["partial"]) == [0, 0, 1]  # the newest window is an EARLY pane, not final
    for i in range(3):
        q = dash.numeric_quantile_sources[i].data
        assert list(q["estimate"]) == [r.quantiles[i]["value"] for r in rows]
        assert list(q["lower"]) == [r.quantiles[i]["ci_low"] for r in rows]
        assert list(q["upper"]) == [r.quantiles[i]["ci_high"] for r in rows]
        legend = dash.numeric_legend_items[1 + i]
        assert legend.visible and legend.label.value == f"latency_ms: q{rows[0].quantiles[i]['q']:g}"
    assert dash.numeric_legend_items[0].label.value == "latency_ms: mean"
    assert all(not src.data["x"] for src in dash.numeric_quantile_sources[3:])
    assert not any(item.visible for item in dash.numeric_legend_items[4:])
    # the table: the newest window's figures, exactly as stored (4 decimals), marked partial
    table = dash.numeric_table.text
    newest = rows[-1]
    assert "data-partial='1'" in table and "PARTIAL" in table
    assert f"<td class='estimate'>{newest.mean:.4f}</td>" in table
    assert f"<td>{newest.mean_ci_low:.4f}</td><td>{newest.mean_ci_high:.4f}</td>" in table
    for i, q in enumerate(newest.quantiles):
        assert f"<tr data-item='{1 + i}'><td class='name'>latency_ms: q{q['q']:g}</td>" in table
        assert f"<td class='estimate'>{q['value']:.4f}</td>" in table
    assert dash.numeric_plot.title.text.startswith("PARTIAL (EARLY pane")
    # the figures are named by attribute and statistic everywhere: top-k panel, its table, the series box
    names = ["latency_ms: mean", *(f"latency_ms: q{q['q']:g}" for q in newest.quantiles)]
    assert dash.topk_source.data["name"] == names
    assert [label for _, label in dash.series_items.options] == names
    assert "query" not in dash.topk_table.text and "<th class='name'>figure</th>" in dash.topk_table.text
    assert "data-partial='1'" in dash.status.text


def test_numeric_panel_escapes_a_hostile_attribute_name_and_hides_for_other_outputs(tmp_path, rng):
    hostile = HOSTILE_TEXTS[0]
    task_obj = _task(hostile)
    rows = _rows(task_obj, rng, 2)
    dash = Dashboard(Document(), _store(tmp_path, task_obj, rows), clock=lambda: 200.0)
    table = dash.numeric_table.text
    assert hostile not in table and shape.html_text(hostile) in table
    assert "<img" not in table
    assert hostile in dash.numeric_plot.title.text  # a Bokeh title is drawn as text, never parsed
    assert list(dash.numeric_mean_source.data["estimate"]) == [r.mean for r in rows]
    # a frequency task in the same store: the numeric panel hides, the top-k panel shows its values
    url = f"sqlite:///{tmp_path}/numeric.db"
    writer = open_writer(url)
    stream = SimulatedStream(users_per_window=400)
    writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
    stream.write_window(writer, 0)
    writer.close()
    dash.task_select.value = stream.task_id
    assert dash.view_select.value == "estimates, group 0"
    assert not dash.numeric_plot.visible and not dash.numeric_table.visible
    assert dash.topk_source.data["item"]


def test_numeric_attribute_names_the_selected_series():
    """The store files attribute ``i`` of a several-attribute task under group ``i``: the panel's title names
    the attribute of the group shown."""
    task_json = json.dumps({"attributes": [{"name": "load_ms"}, {"name": "battery"}]})
    assert shape.numeric_attribute(task_json, 0) == "load_ms"
    assert shape.numeric_attribute(task_json, 1) == "battery"
    assert shape.numeric_attribute(task_json, 2) == "value"
    assert shape.numeric_attribute("not json", 0) == "value"
