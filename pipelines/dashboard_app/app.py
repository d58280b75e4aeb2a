"""The Bokeh document of the dashboard: one :class:`Dashboard` per browser session.

A periodic callback (every ``refresh`` seconds) asks the store for a cheap change token of the selected task
(:meth:`~pipelines.dashboard_app.reader.StoreReader.change_token`); only when it changed (or the user
changed a selection) does it read the rows again and re-render every panel from them, in named steps
(:meth:`Dashboard._refresh`). A data source is replaced only when its contents changed, so the browser
redraws just those plots; the tables are HTML the server renders from the same columns, so a table can
never lag behind its plot. Nothing reloads the page.

Stable handles for tests and scripts (Bokeh ``name``\\ s; the same names, dashed, as CSS classes ``ldp-...``):
``status`` (one status line; ``data-state`` of its span is ``waiting``, ``live`` or ``error``),
``task_select``, ``view_select``, ``k_select``, ``series_items``, ``topk_plot`` / ``topk_source`` /
``topk_table``, ``series_plot``, ``windows_plot`` / ``windows_source`` / ``windows_table``, ``counts_plot`` /
``counts_source`` / ``counts_note``, ``reasons_table``, ``latency_plot`` / ``latency_source`` /
``latency_summary``, ``numeric_plot`` / ``numeric_mean_source`` / ``numeric_q_source_<i>`` / ``numeric_table``
(numeric tasks only), ``budget``, ``freshness`` (the newest pane's age and the run; ``data-state`` ``none``,
``fresh``, ``stale``, ``ended`` or ``failed``).

Every text from the store reaches HTML through :func:`~pipelines.dashboard_app.shape.html_text`
(docs/dashboard.md, "Text from the store is shown as text").
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bokeh.core.properties import value
from bokeh.document import Document
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, Div, MultiChoice, Select

from pipelines.dashboard_app import markup, panels, shape
from pipelines.dashboard_app.heavy_hitters import HH_OUTPUT, TRIE_OUTPUT, HeavyHittersPanel, string_label
from pipelines.dashboard_app.panels import QUANTILE_SLOTS, SERIES_SLOTS, named
from pipelines.dashboard_app.reader import StoreError, StoreReader

__all__ = ["Dashboard", "SERIES_SLOTS"]

_LOG = logging.getLogger(__name__)

#: The output of numeric tasks (``flatten_numeric``): item 0 the mean, 1 + i quantile i.
NUMERIC_OUTPUT = "numeric"
#: Outputs whose rows are frequency-like estimates (top-k by value); the others are query answers.
ESTIMATE_OUTPUTS = ("estimates", "sparse", HH_OUTPUT, TRIE_OUTPUT)
K_CHOICES = ("5", "10", "20", "50")


def _comparable(data: dict[str, list[Any]]) -> str:
    """A text that is equal for equal data (NaN != NaN, so compare texts, not lists)."""
    return repr(
        sorted(
            (k, [None if isinstance(v, float) and math.isnan(v) else v for v in vals])
            for k, vals in data.items()
        )
    )


@dataclass
class _View:
    """What one refresh shows: the task, the output and group, the current window and its rows."""

    task_id: str
    task: dict[str, Any]
    summary: dict[str, Any]
    windows: list[dict[str, Any]]
    output: str = "estimates"
    grp: int = 0
    rows: list[dict[str, Any]] | None = None
    current: dict[str, Any] | None = None
    partial: bool = False

    @property
    def oldest_end(self) -> int:
        return min((int(w["window_end"]) for w in self.windows), default=0)

    @property
    def is_estimate(self) -> bool:
        return self.output in ESTIMATE_OUTPUTS

    @property
    def window_ms(self) -> int:
        """The newest window's length (ms), 0 for the global window or none."""
        if not self.windows:
            return 0
        w = self.windows[0]
        return max(int(w["window_end"]) - int(w["window_start"]), 0)


class Dashboard:
    """Builds the page into ``doc`` and keeps it current.

    Args:
        doc: the session's Bokeh document.
        store_url: the store to read (``sqlite:///...`` or ``postgresql://...``).
        task: the task to show first (default: the first task the store holds).
        refresh: seconds between polls of the store.
        top_k: values shown in the top-k plot at first (the page has a selector).
        max_windows: newest windows the series, window, count and latency plots cover.
        reader_factory: how to open the store (tests pass a fake).
        stale_after: seconds after which the newest pane is stale (default: from the task's window,
            :func:`~pipelines.dashboard_app.shape.stale_bound_s`).
        clock: the page's clock, epoch seconds (tests pass a fixed one).
    """

    def __init__(
        self,
        doc: Document,
        store_url: str,
        *,
        task: str | None = None,
        refresh: float = 1.0,
        top_k: int = 10,
        max_windows: int = 60,
        reader_factory: Callable[[str], StoreReader] = StoreReader,
        stale_after: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.doc = doc
        self.store_url = store_url
        self.wanted_task = task
        self.max_windows = int(max_windows)
        self.reader_factory = reader_factory
        self.stale_after = stale_after
        self.clock = clock
        self._summary: dict[str, Any] = {}
        self.reader: StoreReader | None = None
        self.token: tuple[Any, ...] | None = None
        self.series_task: str | None = None
        self.reasons: dict[str, list[Any]] = shape.reasons_columns([])
        self._wins: dict[str, list[Any]] = shape.windows_columns([])
        self._last: dict[str, str] = {}
        self._legend_labels: dict[int, str] = {}
        self._polling = False
        self._task_budgets: dict[str, dict[str, Any] | None] = {}
        self._build(top_k)
        doc.title = "ldp-beam dashboard"
        doc.add_root(self.layout)
        self.poll()
        doc.add_periodic_callback(self.poll, max(int(refresh * 1000), 100))

    # -- layout ---------------------------------------------------------------------------------------
    def _build(self, top_k: int) -> None:
        """Every panel, top to bottom, and the page's layout."""
        self._build_controls(top_k)
        self.topk_source = named(ColumnDataSource(shape.top_k([], 0)), "topk_source")
        self.topk_plot = panels.topk_plot(self.topk_source)
        self.topk_table = named(Div(text="", sizing_mode="stretch_width"), "topk_table")
        series = panels.series_panel()
        self.series_plot, self.series_sources = series.plot, series.sources
        self.series_items_legend, self.series_whiskers = series.legend_items, series.whiskers
        numeric = panels.numeric_panel()
        self.numeric_plot, self.numeric_mean_source = numeric.plot, numeric.mean_source
        self.numeric_quantile_sources = numeric.quantile_sources
        self.numeric_legend_items = numeric.legend_items
        self.numeric_table = named(Div(text="", visible=False, sizing_mode="stretch_width"), "numeric_table")
        self.hh = HeavyHittersPanel()
        self.hh.window_select.on_change("value", self._on_selection)
        self._build_windows_and_counts()
        self.latency_source = named(ColumnDataSource(shape.latency_columns([])), "latency_source")
        self.latency_plot = panels.latency_plot(self.latency_source)
        self.latency_summary = named(Div(text=""), "latency_summary")
        self.time_plots = (self.series_plot, self.numeric_plot, self.hh.plot, self.windows_plot,
                           self.counts_plot, self.latency_plot)  # fmt: skip
        self.layout = column(
            self.header, self.status, self.freshness, row(self.task_select, self.view_select, self.k_select),
            self.budget, self.numeric_plot, self.numeric_table, self.hh.layout, self.topk_plot,
            self.topk_table, self.series_items, self.series_plot, self.windows_plot, self.windows_table,
            self.counts_plot, self.counts_note, self.reasons_table, self.latency_plot, self.latency_summary,
            sizing_mode="stretch_width", name="dashboard",
        )  # fmt: skip

    def _build_controls(self, top_k: int) -> None:
        """The header, the status and freshness lines, the selectors and the budget panel."""
        self.header = Div(
            text=markup.CSS + "<h2 class='ldp-h'>ldp-beam live dashboard</h2><span class='ldp-h'>store: "
            f"<code>{shape.html_text(_display_url(self.store_url))}</code></span>",
            sizing_mode="stretch_width",
        )
        self.status = named(Div(text="", sizing_mode="stretch_width"), "status")
        self.freshness = named(Div(text="", sizing_mode="stretch_width"), "freshness")
        self.task_select = named(Select(title="task", options=[], width=260), "task_select")
        self.view_select = named(Select(title="output / group", options=[], width=200), "view_select")
        k_value = str(top_k) if str(top_k) in K_CHOICES else K_CHOICES[1]
        self.k_select = named(
            Select(title="top k", options=list(K_CHOICES), value=k_value, width=90), "k_select"
        )
        self.series_items = named(
            MultiChoice(
                title=f"values (or queries) in the time series (up to {SERIES_SLOTS})",
                options=[],
                value=[],
                max_items=SERIES_SLOTS,
                width=520,
            ),
            "series_items",
        )
        for widget in (self.task_select, self.view_select, self.k_select, self.series_items):
            widget.on_change("value", self._on_selection)
        self.budget = named(Div(text="", visible=False, sizing_mode="stretch_width"), "budget")

    def _build_windows_and_counts(self) -> None:
        """The windows plot and table, the counts plot, its note and the dead-letter reasons table."""
        self.windows_source = named(ColumnDataSource(shape.windows_columns([])), "windows_source")
        self.windows_plot = panels.windows_plot(self.windows_source)
        self.windows_table = named(Div(text="", sizing_mode="stretch_width"), "windows_table")
        self.counts_source = named(ColumnDataSource(shape.counts_columns([])), "counts_source")
        self.counts_plot = panels.counts_plot(self.counts_source)
        self.counts_note = named(Div(text="", sizing_mode="stretch_width"), "counts_note")
        self.reasons_table = named(Div(text="", sizing_mode="stretch_width"), "reasons_table")

    # -- state ----------------------------------------------------------------------------------------
    def _set_status(self, state: str, text: str, partial: bool = False) -> None:
        self._set_text(self.status, markup.state_markup(state, text, partial))

    @staticmethod
    def _set_text(div: Div, text: str) -> None:
        if div.text != text:
            div.text = text

    def _set_data(self, key: str, source: ColumnDataSource, data: dict[str, list[Any]]) -> bool:
        """Replaces ``source.data`` when (and only when) it differs from what was set last."""
        text = _comparable(data)
        if self._last.get(key) == text:
            return False
        self._last[key] = text
        source.data = data
        return True

    def _on_selection(self, attr: str, old: Any, new: Any) -> None:
        if self._polling:  # the poll itself set a selector (first task, view, series): no nested poll
            return
        self.token = None  # read again now, so the page follows the click
        self.poll()

    # -- polling --------------------------------------------------------------------------------------
    def poll(self) -> None:
        """One poll: open the store if needed, and redraw what changed. Errors become the status line."""
        self._polling = True
        try:
            self._poll()
        finally:
            self._polling = False

    def _poll(self) -> None:
        try:
            if self.reader is None:
                self.reader = self.reader_factory(self.store_url)
            if not self.reader.ready():
                self._set_status("waiting", "waiting for the first pane: the store has no tables yet")
                self.freshness.text = ""
                return
            tasks = self.reader.tasks()
            if not tasks:
                self._set_status("waiting", "waiting for the first pane: the store holds no task yet")
                self.freshness.text = ""
                return
            self._update_tasks(tasks)
            task_id = self.task_select.value
            token = (
                task_id,
                self.view_select.value,
                self.k_select.value,
                tuple(self.series_items.value),
                self.hh.window_select.value,
                *self.reader.change_token(task_id),
            )
            if token != self.token:
                self._refresh(task_id, next(t for t in tasks if t["task_id"] == task_id))
                self.token = token
            self._update_freshness(task_id)
        except StoreError as exc:
            self._set_status("error", f"store error: {exc} (retrying every poll)")
            if self.reader is not None:
                self.reader.close()
            self.reader = None
            self.token = None
        except Exception as exc:  # keep the session alive; the log has the traceback
            _LOG.exception("dashboard poll failed")
            self._set_status("error", f"dashboard error: {type(exc).__name__}: {exc}")
            self.token = None

    def _update_tasks(self, tasks: Sequence[dict[str, Any]]) -> None:
        ids = [t["task_id"] for t in tasks]
        if list(self.task_select.options) != ids:
            self.task_select.options = ids
        if self.task_select.value not in ids:
            wanted = self.wanted_task if self.wanted_task in ids else ids[0]
            self.task_select.value = wanted

    def _refresh(self, task_id: str, task: dict[str, Any]) -> None:
        """Re-renders every panel from the store's current state of ``task_id``, in order: budget, counts,
        view, current window, top-k, numeric panel, series, windows and latency, counts note, status."""
        assert self.reader is not None
        summary = shape.parse_json(task.get("summary_json"))
        summary = summary if isinstance(summary, dict) else {}
        self._summary = summary
        self._update_budget(summary, task.get("task_json"))
        counts = shape.latest_counts(self.reader.counts(task_id, self.max_windows))
        view = _View(task_id, task, summary, self.reader.windows(task_id, self.max_windows))
        counts_cols = self._refresh_counts(view, counts)
        self._set_time_span(view)
        self._select_view(view)
        self._read_current(view)
        top = self._refresh_topk(view)
        self.numeric_plot.visible = self.numeric_table.visible = view.output == NUMERIC_OUTPUT
        if view.output == NUMERIC_OUTPUT:
            self._refresh_numeric(view)
        if view.output in (HH_OUTPUT, TRIE_OUTPUT):
            self.hh.refresh(self.reader, view.task_id, view.oldest_end)
        else:
            self.hh.show(False)
        self._refresh_series(view, top)
        effective = self._refresh_windows_and_latency(view)
        self._set_text(self.counts_note, markup.counts_note(shape.counts_vs_windows(counts_cols, self._wins)))
        if view.windows:
            self._refresh_status(view, effective)
        else:  # counts (e.g. every report dead-lettered) show before any estimate
            self._set_status("waiting", f"task {task_id}: waiting for the first pane{_so_far(counts)}")

    # -- refresh steps --------------------------------------------------------------------------------
    def _refresh_counts(self, view: _View, counts: list[dict[str, Any]]) -> dict[str, list[Any]]:
        """The counts plot and the dead-letter reasons; they show before any estimate (e.g. every report
        dead-lettered). A batch run's whole-run counts are drawn across the windows it estimated."""
        span = None
        if view.windows and any(int(w["window_end"]) > 0 for w in view.windows):
            span = (min(int(w["window_start"]) for w in view.windows),
                    max(int(w["window_end"]) for w in view.windows))  # fmt: skip
        cols = shape.counts_columns(counts, span)
        self._set_data("counts", self.counts_source, cols)
        self.reasons = shape.reasons_columns(counts)
        self._set_text(self.reasons_table, markup.reasons_html(self.reasons))
        return cols

    def _set_time_span(self, view: _View) -> None:
        """A single x (one window) spans twice the task's window on every time plot, not a few ms."""
        span = 2 * view.window_ms if view.window_ms > 0 else panels.DEFAULT_SPAN_MS
        for fig in self.time_plots:
            if fig.x_range.default_span != span:
                fig.x_range.default_span = span

    def _select_view(self, view: _View) -> None:
        """The output and group shown: the user's choice, else the first estimate output."""
        assert self.reader is not None
        views = [f"{out}, group {grp}" for out, grp in self.reader.outputs(view.task_id)]
        if list(self.view_select.options) != views:
            self.view_select.options = views
        if self.view_select.value not in views:
            preferred = [v for v in views if v.split(",")[0] in ESTIMATE_OUTPUTS]
            self.view_select.value = (preferred or views or [""])[0]
        self.view_select.visible = len(views) > 1
        view.output, view.grp = _parse_view(self.view_select.value)

    def _read_current(self, view: _View) -> None:
        """The current window: the newest window that has rows of the view, and those rows."""
        assert self.reader is not None
        view.rows, view.current = [], None
        for win in view.windows:  # newest first
            rows = self.reader.window_rows(
                view.task_id, view.output, view.grp, int(win["window_start"]), int(win["window_end"])
            )
            if rows:
                view.rows, view.current = rows, win
                break
        if view.output in (HH_OUTPUT, TRIE_OUTPUT):  # strings (and prefixes) are named by their text, quoted
            view.rows = [{**r, "label": string_label(r.get("label"))} for r in view.rows]
        # the shown rows are a partial window's when they come from an EARLY pane of an open window
        view.partial = bool(view.rows) and shape.is_partial(
            view.rows[0].get("pane_timing"), view.rows[0].get("is_final")
        )

    def _names(self, view: _View) -> dict[int, str]:
        """The display name of every item of the current rows: value labels, query texts, or a numeric
        task's ``attribute: statistic``."""
        rows = view.rows or []
        if view.output == NUMERIC_OUTPUT:
            attribute = shape.numeric_attribute(view.task.get("task_json"), view.grp)
            return {
                int(r["item"]): shape.numeric_name(attribute, int(r["item"]), r.get("label")) for r in rows
            }
        if view.is_estimate:
            labels = shape.labels_from_summary(view.summary)
            return {int(r["item"]): shape.value_name(int(r["item"]), r.get("label"), labels) for r in rows}
        return {
            int(r["item"]): f"#{int(r['item'])}: "
            + shape.query_text(shape.parse_json(r.get("extra_json")), int(r["item"]))
            for r in rows
        }

    def _refresh_topk(self, view: _View) -> dict[str, list[Any]]:
        """The current window's top values (or first queries / figures): plot, title and table."""
        rows = view.rows or []
        k = int(self.k_select.value or K_CHOICES[1])
        task_json = view.task.get("task_json")
        if view.is_estimate:
            top = shape.top_k(
                rows,
                k,
                shape.labels_from_summary(view.summary),
                domain_size=shape.domain_size(task_json),
                simultaneous=view.output == "estimates",
            )
        else:
            test_zero = view.output != NUMERIC_OUTPUT or shape.zero_inside(task_json, view.grp)
            names = self._names(view) if view.output == NUMERIC_OUTPUT else None
            top = shape.answers_columns(rows, k, test_zero=test_zero, names=names)  # fmt: skip
        if self._set_data("topk", self.topk_source, top):
            self.topk_plot.x_range.factors = list(top["name"]) or [" "]
        self.topk_plot.title.text = _topk_title(view, k, top["item"])
        noun = "value" if view.is_estimate else ("figure" if view.output == NUMERIC_OUTPUT else "query")
        table = markup.topk_html(
            top, rows[0] if rows else None, noun, simultaneous=view.output == "estimates"
        )
        self._set_text(self.topk_table, table)
        return top

    def _refresh_numeric(self, view: _View) -> None:
        """The numeric panel: the mean and quantiles of every window, named ``attribute: statistic``."""
        assert self.reader is not None
        rows = view.rows or []
        attribute = shape.numeric_attribute(view.task.get("task_json"), view.grp)
        items = sorted({int(r["item"]) for r in rows} | {0})
        history = self.reader.item_rows(view.task_id, NUMERIC_OUTPUT, view.grp, items, view.oldest_end)
        cols = shape.numeric_columns(history, items)
        self._set_data("numeric_mean", self.numeric_mean_source, cols[0])
        names = {int(r["item"]): shape.numeric_name(attribute, int(r["item"]), r.get("label"))
                 for r in [*history, *rows]}  # fmt: skip
        self._set_legend(self.numeric_legend_items[0], names.get(0, f"{attribute}: mean"))
        quantiles = [i for i in items if i > 0]
        for slot in range(QUANTILE_SLOTS):
            legend, src = self.numeric_legend_items[1 + slot], self.numeric_quantile_sources[slot]
            shown = slot < len(quantiles)
            data = cols[quantiles[slot]] if shown else shape.numeric_columns([], [0])[0]
            self._set_data(f"numeric_q{slot}", src, data)
            if shown:
                self._set_legend(
                    legend, names.get(quantiles[slot], f"{attribute}: quantile {quantiles[slot]}")
                )
            legend.visible = shown
            for renderer in legend.renderers:
                renderer.visible = shown
        title = f"numeric {attribute}: mean and quantiles across windows (x: window end), 95% bands"
        self.numeric_plot.title.text = (
            f"PARTIAL (EARLY pane, window still open): {title}" if view.partial else title
        )
        self._set_text(
            self.numeric_table,
            markup.numeric_html(attribute, rows, view.current, view.partial, len(quantiles) > QUANTILE_SLOTS),
        )

    @staticmethod
    def _set_legend(legend: Any, label: str) -> None:
        if legend.label != value(label):
            legend.label = value(label)

    def _refresh_series(self, view: _View, top: dict[str, list[Any]]) -> None:
        """The chosen items across windows (first time per task and view: the current top 5 / first 5)."""
        assert self.reader is not None
        rows = view.rows or []
        names = self._names(view)
        # Choices.js (the MultiChoice) renders option labels as HTML: escaped, they show as text
        options = [(str(i), shape.html_text(names[i])) for i in sorted(names)]
        if [tuple(o) for o in self.series_items.options] != options:
            self.series_items.options = options
        series_key = f"{view.task_id}|{view.output}|{view.grp}"
        if self.series_task != series_key:  # a new task or view: its current top 5, once it has rows
            self.series_items.value = [str(i) for i in top["item"][:5]]
            self.series_task = series_key if top["item"] else None
        chosen = [int(v) for v in self.series_items.value][:SERIES_SLOTS]
        d = shape.domain_size(view.task.get("task_json"))
        series = shape.series_columns(
            self.reader.item_rows(view.task_id, view.output, view.grp, chosen, view.oldest_end),
            chosen,
            domain_size=(d or len(rows)) if view.output == "estimates" else None,
        )
        fallback = "value" if view.is_estimate else "query"
        for slot in range(SERIES_SLOTS):
            legend = self.series_items_legend[slot]
            shown = slot < len(chosen)
            data = series[chosen[slot]] if shown else shape.series_columns([], [0])[0]
            self._set_data(f"series{slot}", self.series_sources[slot], data)
            if shown:
                label = names.get(chosen[slot], f"{fallback} {chosen[slot]}")
                if self._legend_labels.get(slot) != label:
                    self._legend_labels[slot] = label
                    legend.label = value(label)
                for renderer in legend.renderers:
                    renderer.visible = True
            legend.visible = shown
            self.series_whiskers[slot].visible = shown and not view.is_estimate
        self.series_plot.title.text = _series_title(view.output, view.is_estimate)

    def _refresh_windows_and_latency(self, view: _View) -> dict[tuple[int, int], dict[str, Any]]:
        """The windows plot and table and the latency plot; late panes that changed nothing and a
        backfill's panes are told apart. Returns each window's effective pane."""
        assert self.reader is not None
        panes = [
            p for p in self.reader.panes(view.task_id, view.oldest_end)
            if p["output"] == view.output and int(p["grp"]) == view.grp
        ]  # fmt: skip
        win_cfg = shape.window_config(view.summary)
        run = shape.run_state(view.summary)
        candidates = shape.late_candidates(panes)
        numbers = (
            self.reader.pane_numbers(view.task_id, [k for pair in candidates for k in pair])
            if candidates
            else {}
        )
        unchanged = shape.unchanged_panes(candidates, numbers, bool(win_cfg.get("accumulating")))
        backfill_s = shape.backfill_bound_s(view.summary)
        batch = run is not None and run.get("streaming") is False
        live, same, back = shape.split_panes(panes, unchanged, backfill_s, batch)
        effective = shape.effective_panes(panes, unchanged)
        live_keys = {shape.pane_key(p) for p in live}
        latest_live = [p for p in effective.values() if shape.pane_key(p) in live_keys]
        self._wins = shape.windows_columns(view.windows, shape.latest_pane_latency(latest_live), effective)
        self._set_data("windows", self.windows_source, self._wins)
        self._update_windows_table()
        lat = shape.latency_columns(live)
        self._set_data("latency", self.latency_source, lat)
        summ = shape.latency_summary(lat["latency_s"], lat["timing"])
        self._set_text(
            self.latency_summary, markup.latency_text(summ, len(same), len(back), backfill_s, batch)
        )
        return effective

    def _update_windows_table(self) -> None:
        """The windows table: the windows' columns plus what the counts window of the same bounds
        accepted (NaN where there is none)."""
        counted = shape.counts_vs_windows(self.counts_source.data, self._wins)["accepted_by_window"]
        keys = zip(self._wins["window_start"], self._wins["window_end"], strict=True)
        extra = [float(counted[k]) if k in counted else float("nan") for k in keys]
        self._set_text(self.windows_table, markup.windows_html({**self._wins, "counted": extra}))

    def _refresh_status(self, view: _View, effective: dict[tuple[int, int], dict[str, Any]]) -> None:
        """The status line: the current window, its shown pane and whether it is final."""
        current = view.current
        if current is None:
            self._set_status("waiting", f"task {view.task_id}: waiting for the first pane of {view.output}")
            return
        final = "final" if current.get("is_final") else "not final"
        shown = effective.get((int(current["window_start"]), int(current["window_end"])), {})
        pane_index = shown.get("pane_index", current.get("last_pane_index"))
        timing = shown.get("pane_timing", current.get("last_pane_timing"))
        head = "PARTIAL window (EARLY pane: the window is still open, its numbers will change); "
        self._set_status(
            "live",
            f"{head if view.partial else ''}task {view.task_id}: current window "
            f"{shape.format_window(int(current['window_start']), int(current['window_end']))}"
            f", pane #{pane_index} {timing} ({final}), "
            f"n_reports {current.get('n_reports')}; {len(view.windows)} window(s); page updated "
            f"{time.strftime('%H:%M:%S', time.gmtime(self.clock()))} UTC",
            partial=view.partial,
        )

    def _update_freshness(self, task_id: str) -> None:
        """The freshness line, every poll: the newest pane's age, stale past the bound."""
        assert self.reader is not None
        bound = shape.stale_bound_s(self._summary, self.stale_after)
        newest = self.reader.newest_pane_ms(task_id)
        state, text = shape.freshness(
            newest,
            int(self.clock() * 1000),
            bound,
            shape.run_state(self._summary),
            self.reader.latest_run(task_id),
        )
        self._set_text(self.freshness, markup.state_markup(state, text))

    def _update_budget(self, summary: dict[str, Any], task_json: str | None) -> None:
        """The budget panel: the job's summary, or while a job runs without one, the task's own policy."""
        entries = shape.budget_entries(summary)
        origin = "the job's summary"
        if not entries:  # a running job has written no run summary yet: the task's own policy, if any
            derived = self._task_budget(task_json)
            if derived:
                entries = {"budget": derived}
                origin = (
                    "computed from the task's budget policy (ldp.task.budget_summary), as the job does; "
                    "the job writes its own figures when it ends"
                )
        items = shape.budget_items(entries)
        if not items:
            self.budget.visible = False
            return
        self._set_text(self.budget, markup.budget_html(summary, shape.spent_rows(entries), items, origin))
        self.budget.visible = True

    def _task_budget(self, task_json: str | None) -> dict[str, Any] | None:
        """``ldp.task.budget_summary`` of the stored task (None without a budget or a readable task),
        computed once per task text."""
        if not task_json:
            return None
        if task_json not in self._task_budgets:
            from ldp.task import TaskError, budget_summary, parse_task

            try:
                figures = budget_summary(parse_task(json.loads(task_json)))
            except (TaskError, ValueError, TypeError, ArithmeticError) as exc:
                _LOG.warning("no budget figures from the stored task: %s", exc)
                figures = None
            self._task_budgets = {task_json: figures}  # one task shown at a time: keep the last only
        return self._task_budgets[task_json]


def _so_far(counts: Sequence[dict[str, Any]]) -> str:
    """`` (N reports read, M rejected so far; ...)`` while a task has counts but no window yet."""
    if not counts:
        return ""
    read = sum(int(c.get("read") or 0) for c in counts)
    rejected = sum(int(c.get("rejected") or 0) for c in counts)
    return f" ({read} reports read, {rejected} rejected so far; see the counts below)"


def _topk_title(view: _View, k: int, items: Sequence[int]) -> str:
    if view.current is None:
        return f"no {view.output} rows yet"
    what = shape.format_window(int(view.current["window_start"]), int(view.current["window_end"]))
    if view.output == "estimates":
        title = (
            f"current window {what}: top {k} values, published estimate with simultaneous 95% "
            "interval over the domain (valid after the selection)"
        )
    elif view.is_estimate:
        title = f"current window {what}: top {k} values, estimate with per-value 95% interval"
    elif view.output == NUMERIC_OUTPUT:
        title = f"current window {what}: mean and quantiles, each with its 95% interval"
    else:
        title = f"current window {what}: queries {_span(items)}, answer with 95% interval"
    return f"PARTIAL (EARLY pane, window still open): {title}" if view.partial else title


def _series_title(output: str, is_estimate: bool) -> str:
    if output == "estimates":
        return (
            "chosen values across windows (x: window end), published estimate with simultaneous 95% band "
            "over the domain"
        )
    if is_estimate:
        return "chosen values across windows (x: window end), published estimate with per-value 95% band"
    return "chosen queries across windows (x: window end), answer with 95% error bars"


def _span(items: Sequence[int]) -> str:
    """``0-3`` for the query indexes shown (``-`` when none)."""
    return f"{min(items)}-{max(items)}" if items else "-"


def _parse_view(view: str | None) -> tuple[str, int]:
    if not view or ", group " not in view:
        return "estimates", 0
    out, grp = view.split(", group ", 1)
    return out, int(grp)


def _display_url(url: str) -> str:
    from pipelines.dashboard_app.reader import _redact

    return _redact(url)
