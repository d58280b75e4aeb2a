"""The Bokeh document of the dashboard: one :class:`Dashboard` per browser session.

A periodic callback (every ``refresh`` seconds) asks the store for a cheap change token of the selected task
(:meth:`~pipelines.dashboard_app.reader.StoreReader.change_token`); only when it changed (or the user
changed a selection) does it read the rows again, and then only the data sources whose contents changed
are replaced, so the browser redraws just those plots. Nothing reloads the page.

Stable handles for tests and scripts (Bokeh ``name``\\ s; the same names, dashed, as CSS classes ``ldp-...``):
``status`` (one status line; ``data-state`` of its span is ``waiting``, ``live`` or ``error``),
``task_select``, ``view_select``, ``k_select``, ``series_items``, ``topk_plot`` / ``topk_source`` /
``topk_table``, ``series_plot``, ``windows_plot`` / ``windows_source`` / ``windows_table``, ``counts_plot`` /
``counts_source``, ``reasons_table`` / ``reasons_source``, ``latency_plot`` / ``latency_source`` /
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
import numbers
import time
from collections.abc import Callable, Sequence
from typing import Any

from bokeh.core.properties import value
from bokeh.document import Document
from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource,
    DataTable,
    DatetimeTickFormatter,
    Div,
    FactorRange,
    HoverTool,
    LegendItem,
    MultiChoice,
    NumberFormatter,
    Select,
    TableColumn,
    Whisker,
)
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from pipelines.dashboard_app import shape
from pipelines.dashboard_app.reader import StoreError, StoreReader

__all__ = ["Dashboard", "SERIES_SLOTS"]

_LOG = logging.getLogger(__name__)

#: How many values (or queries) the time-series plot can show at once.
SERIES_SLOTS = 8
#: Quantiles the numeric panel draws (the table lists every stored one).
QUANTILE_SLOTS = 8
#: The output of numeric tasks (``ldp.aggregate.numeric.flatten_numeric``): item 0 the mean, 1 + i quantile i.
NUMERIC_OUTPUT = "numeric"
#: Outputs whose rows are frequency-like estimates (top-k by value); the others are query answers.
ESTIMATE_OUTPUTS = ("estimates", "sparse")
K_CHOICES = ("5", "10", "20", "50")

_CSS = """
<style>
.ldp-h { font-family: sans-serif; }
table.ldp { border-collapse: collapse; font: 12px sans-serif; }
table.ldp th, table.ldp td { border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }
table.ldp td.name, table.ldp th.name { text-align: left; }
table.ldp tr.noise td { color: #888; }
table.ldp td.worst { color: #b00020; }
</style>
"""
#: The status and freshness lines' styles (each Div renders in its own shadow root).
_STATE_CSS = """<style>
span.ldp-state { font: 13px sans-serif; }
span.ldp-state[data-state=error], span.ldp-state[data-state=stale], span.ldp-state[data-state=failed],
span.ldp-state[data-partial='1'] { color: #b00020; font-weight: bold; }
span.ldp-state[data-state=waiting] { color: #a06000; }
</style>"""


def _named(model: Any, name: str) -> Any:
    model.name = name
    if hasattr(model, "css_classes"):
        model.css_classes = [f"ldp-{name.replace('_', '-')}"]
    return model


def _fmt(value: object, digits: int = 4, spec: str | None = None) -> str:
    """A stored number as HTML text: ``-`` for None or NaN, ``spec`` (default ``.{digits}f``) for a
    number, anything else (a store holding what the project did not write) escaped as text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return format(value, f".{digits}f" if spec is None else spec)
    return shape.html_text(value)


def _comparable(data: dict[str, list[Any]]) -> str:
    """A text that is equal for equal data (NaN != NaN, so compare texts, not lists)."""
    return repr(
        sorted(
            (k, [None if isinstance(v, float) and math.isnan(v) else v for v in vals])
            for k, vals in data.items()
        )
    )


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
        self.header = Div(
            text=_CSS + f"<h2 class='ldp-h'>ldp-beam live dashboard</h2><span class='ldp-h'>store: "
            f"<code>{shape.html_text(_display_url(self.store_url))}</code></span>",
            sizing_mode="stretch_width",
        )
        self.status = _named(Div(text="", sizing_mode="stretch_width"), "status")
        self.freshness = _named(Div(text="", sizing_mode="stretch_width"), "freshness")
        self.task_select = _named(Select(title="task", options=[], width=260), "task_select")
        self.view_select = _named(Select(title="output / group", options=[], width=200), "view_select")
        k_value = str(top_k) if str(top_k) in K_CHOICES else K_CHOICES[1]
        choices = list(K_CHOICES) if k_value in K_CHOICES else [*K_CHOICES, str(top_k)]
        self.k_select = _named(Select(title="top k", options=choices, value=k_value, width=90), "k_select")
        self.series_items = _named(
            MultiChoice(
                title=f"values (or queries) in the time series (up to {SERIES_SLOTS})",
                options=[],
                value=[],
                max_items=SERIES_SLOTS,
                width=520,
            ),
            "series_items",
        )
        for widget in (self.task_select, self.view_select, self.k_select):
            widget.on_change("value", self._on_selection)
        self.series_items.on_change("value", self._on_selection)
        self.budget = _named(Div(text="", visible=False, sizing_mode="stretch_width"), "budget")

        # top-k with 95% whiskers
        self.topk_source = _named(ColumnDataSource(shape.top_k([], 0)), "topk_source")
        self.topk_plot = _named(
            figure(
                x_range=FactorRange(factors=[" "]),
                height=340,
                sizing_mode="stretch_width",
                title="current window: top values, published estimate with 95% interval",
                toolbar_location="right",
                tools="save,reset",
            ),
            "topk_plot",
        )
        self.topk_plot.vbar(
            x="name", top="estimate", width=0.7, source=self.topk_source, color="color", legend_field="noise"
        )
        self.topk_plot.add_layout(
            Whisker(
                source=self.topk_source,
                base="name",
                lower="ci_low",
                upper="ci_high",
                line_width=1.5,
                level="overlay",
            )
        )
        # invisible ends of the whiskers, so the y range covers the intervals (annotations do not count)
        self.topk_plot.scatter(x="name", y="ci_high", source=self.topk_source, alpha=0, size=1)
        self.topk_plot.scatter(x="name", y="ci_low", source=self.topk_source, alpha=0, size=1)
        self.topk_plot.add_tools(
            HoverTool(
                tooltips=[
                    ("value", "@name (#@item)"),
                    ("estimate", "@estimate{0.0000}"),
                    ("interval", "[@ci_low{0.0000}, @ci_high{0.0000}] (see the table's note)"),
                    ("", "@noise"),
                    ("method", "@method"),
                ]
            )
        )
        self.topk_plot.xaxis.major_label_orientation = 0.6
        self.topk_plot.yaxis.axis_label = "estimate"
        self.topk_plot.add_layout(self.topk_plot.legend[0], "right")  # beside the bars, never over them
        self.topk_table = _named(Div(text="", sizing_mode="stretch_width"), "topk_table")

        # series with CI bands
        self.series_plot = _named(
            figure(
                x_axis_type="datetime",
                height=300,
                sizing_mode="stretch_width",
                title="chosen values across windows (x: window end), 95% band",
                tools="pan,wheel_zoom,save,reset",
            ),
            "series_plot",
        )
        self.series_sources: list[ColumnDataSource] = []
        self.series_items_legend: list[LegendItem] = []
        self.series_whiskers: list[Whisker] = []
        self.series_bands: list[Any] = []
        empty = {
            "x": [],
            "window_start": [],
            "estimate": [],
            "lower": [],
            "upper": [],
            "timing": [],
            "final": [],
        }
        for i in range(SERIES_SLOTS):
            src = _named(ColumnDataSource(dict(empty)), f"series_source_{i}")
            color = Category10_10[i % 10]
            band = self.series_plot.varea(
                x="x", y1="lower", y2="upper", source=src, fill_color=color, fill_alpha=0.18
            )
            line = self.series_plot.line(x="x", y="estimate", source=src, color=color, line_width=2)
            dots = self.series_plot.scatter(x="x", y="estimate", source=src, color=color, size=5)
            whisker = Whisker(
                source=src, base="x", lower="lower", upper="upper", line_color=color, visible=False
            )
            self.series_plot.add_layout(whisker)
            self.series_sources.append(src)
            self.series_whiskers.append(whisker)
            self.series_bands.append(band)
            self.series_items_legend.append(
                LegendItem(label=value(f"slot {i}"), renderers=[line, dots, band], visible=False)
            )
        self.series_plot.add_layout(self._legend(self.series_items_legend), "right")
        self.series_plot.yaxis.axis_label = "estimate"

        self._build_numeric()

        # windows: n_reports and pane timing
        self.windows_source = _named(ColumnDataSource(shape.windows_columns([])), "windows_source")
        self.windows_plot = _named(
            figure(
                x_axis_type="datetime",
                height=240,
                sizing_mode="stretch_width",
                title="reports per window, coloured by the timing of its latest pane (outlined: final)",
                tools="pan,wheel_zoom,save,reset",
            ),
            "windows_plot",
        )
        self.windows_plot.vbar(
            x="x",
            top="n_reports",
            width="width",
            source=self.windows_source,
            color="color",
            legend_field="timing",
            line_color="line",
            line_width=2,
        )
        self.windows_plot.add_tools(
            HoverTool(
                tooltips=[
                    ("window", "@window"),
                    ("n_reports", "@n_reports"),
                    ("latest pane", "#@pane_index @timing"),
                    ("", "@final"),
                    ("latency", "@latency_s{0.00} s"),
                ]
            )
        )
        self.windows_plot.yaxis.axis_label = "n_reports"
        self.windows_table = _named(
            DataTable(
                source=self.windows_source,
                height=200,
                sizing_mode="stretch_width",
                index_position=None,
                reorderable=False,
                columns=[
                    TableColumn(field="window", title="window", width=300),
                    TableColumn(field="n_reports", title="n_reports", width=90),
                    TableColumn(field="pane_index", title="latest pane", width=90),
                    TableColumn(field="timing", title="timing", width=90),
                    TableColumn(field="final", title="final", width=70),
                    TableColumn(
                        field="latency_s",
                        title="latency of latest pane (s)",
                        width=170,
                        formatter=NumberFormatter(format="0.00"),
                    ),
                    TableColumn(field="last_written", title="written (UTC)", width=200),
                ],
            ),
            "windows_table",
        )

        # counts and dead letters
        self.counts_source = _named(ColumnDataSource(shape.counts_columns([])), "counts_source")
        self.counts_plot = _named(
            figure(
                x_axis_type="datetime",
                height=240,
                sizing_mode="stretch_width",
                title="reports read per counts window: accepted, rejected (dead letters), late-dropped",
                tools="pan,wheel_zoom,save,reset",
            ),
            "counts_plot",
        )
        self.counts_plot.vbar_stack(
            ["accepted", "rejected", "late_dropped"],
            x="x",
            width="width",
            source=self.counts_source,
            color=["#4c72b0", "#c44e52", "#dd8452"],
            legend_label=["accepted", "rejected", "late dropped"],
        )
        self.counts_plot.scatter(
            x="x", y="read", source=self.counts_source, color="black", size=6, legend_label="read"
        )
        self.counts_plot.add_tools(
            HoverTool(
                tooltips=[
                    ("window", "@window"),
                    ("read", "@read"),
                    ("accepted", "@accepted"),
                    ("rejected", "@rejected"),
                    ("late dropped", "@late_dropped"),
                    ("lost", "@lost"),
                ]
            )
        )
        self.counts_plot.legend.location = "top_left"
        self.reasons_source = _named(ColumnDataSource(shape.reasons_columns([])), "reasons_source")
        self.reasons_table = _named(
            DataTable(
                source=self.reasons_source,
                height=160,
                sizing_mode="stretch_width",
                index_position=None,
                reorderable=False,
                columns=[
                    TableColumn(field="window", title="window", width=300),
                    TableColumn(field="reason", title="dead-letter reason", width=250),
                    TableColumn(field="count", title="count", width=100),
                ],
            ),
            "reasons_table",
        )

        # latency
        self.latency_source = _named(ColumnDataSource(shape.latency_columns([])), "latency_source")
        self.latency_plot = _named(
            figure(
                x_axis_type="datetime",
                height=240,
                sizing_mode="stretch_width",
                title="pane latency: written_ms - window_end (s), per pane",
                tools="pan,wheel_zoom,save,reset",
            ),
            "latency_plot",
        )
        self.latency_plot.scatter(
            x="x", y="latency_s", source=self.latency_source, color="color", size=7, legend_field="timing"
        )
        self.latency_plot.add_tools(
            HoverTool(tooltips=[("pane", "#@pane_index @timing"), ("latency", "@latency_s{0.00} s")])
        )
        self.latency_plot.yaxis.axis_label = "seconds after window end"
        self.latency_summary = _named(Div(text=""), "latency_summary")

        for fig in (self.series_plot, self.windows_plot, self.counts_plot, self.latency_plot):
            fig.xaxis.formatter = DatetimeTickFormatter(
                seconds="%H:%M:%S", minsec="%H:%M:%S", minutes="%H:%M", hours="%H:%M"
            )
        self.layout = column(
            self.header,
            self.status,
            self.freshness,
            row(self.task_select, self.view_select, self.k_select),
            self.budget,
            self.numeric_plot,
            self.numeric_table,
            self.topk_plot,
            self.topk_table,
            self.series_items,
            self.series_plot,
            self.windows_plot,
            self.windows_table,
            self.counts_plot,
            self.reasons_table,
            self.latency_plot,
            self.latency_summary,
            sizing_mode="stretch_width",
            name="dashboard",
        )

    def _build_numeric(self) -> None:
        """The numeric panel (shown for output ``numeric`` only): the mean with its 95% band across windows,
        the quantiles as a fan (a line and a band each) and the newest window's figures in a table."""
        empty = shape.numeric_columns([], [0])[0]
        self.numeric_mean_source = _named(ColumnDataSource(dict(empty)), "numeric_mean_source")
        self.numeric_plot = _named(
            figure(
                x_axis_type="datetime",
                height=320,
                sizing_mode="stretch_width",
                title="numeric: mean and quantiles across windows (x: window end), 95% bands",
                tools="pan,wheel_zoom,save,reset",
                visible=False,
            ),
            "numeric_plot",
        )
        band = self.numeric_plot.varea(
            x="x",
            y1="lower",
            y2="upper",
            source=self.numeric_mean_source,
            fill_color="black",
            fill_alpha=0.15,
        )
        line = self.numeric_plot.line(
            x="x", y="estimate", source=self.numeric_mean_source, color="black", line_width=2.5
        )
        dots = self.numeric_plot.scatter(
            x="x", y="estimate", source=self.numeric_mean_source, color="black", size=6
        )
        self.numeric_legend_items = [LegendItem(label=value("mean"), renderers=[line, dots, band])]
        self.numeric_quantile_sources: list[ColumnDataSource] = []
        for i in range(QUANTILE_SLOTS):
            src = _named(ColumnDataSource(dict(empty)), f"numeric_q_source_{i}")
            color = Category10_10[i % 10]
            q_band = self.numeric_plot.varea(
                x="x", y1="lower", y2="upper", source=src, fill_color=color, fill_alpha=0.12
            )
            q_line = self.numeric_plot.line(
                x="x", y="estimate", source=src, color=color, line_width=1.5, line_dash="dashed"
            )
            self.numeric_quantile_sources.append(src)
            self.numeric_legend_items.append(
                LegendItem(label=value(f"quantile {i}"), renderers=[q_line, q_band], visible=False)
            )
        self.numeric_plot.add_tools(
            HoverTool(
                renderers=[dots],
                tooltips=[
                    ("mean", "@estimate{0.0000}"),
                    ("95% CI", "[@lower{0.0000}, @upper{0.0000}]"),
                    ("pane", "@timing"),
                ],
            )
        )
        self.numeric_plot.add_layout(self._legend(self.numeric_legend_items), "right")
        self.numeric_plot.yaxis.axis_label = "value"
        self.numeric_table = _named(Div(text="", visible=False, sizing_mode="stretch_width"), "numeric_table")

    def _update_numeric(
        self,
        task_id: str,
        task: dict[str, Any],
        grp: int,
        rows: Sequence[dict[str, Any]],
        current: dict[str, Any] | None,
        partial: bool,
        oldest_end: int,
    ) -> None:
        """Fills the numeric panel from the task's ``numeric`` rows (``rows``: the current window's)."""
        assert self.reader is not None
        attribute = shape.numeric_attribute(task.get("task_json"), grp)
        items = sorted({int(r["item"]) for r in rows} | {0})
        history = self.reader.item_rows(task_id, NUMERIC_OUTPUT, grp, items, oldest_end)
        cols = shape.numeric_columns(history, items)
        self._set_data("numeric_mean", self.numeric_mean_source, cols[0])
        labels = {int(r["item"]): str(r.get("label") or f"item {int(r['item'])}") for r in history}
        labels.update({int(r["item"]): str(r.get("label") or f"item {int(r['item'])}") for r in rows})
        quantiles = [i for i in items if i > 0]
        for slot in range(QUANTILE_SLOTS):
            legend = self.numeric_legend_items[1 + slot]
            src = self.numeric_quantile_sources[slot]
            if slot < len(quantiles):
                item = quantiles[slot]
                self._set_data(f"numeric_q{slot}", src, cols[item])
                label = labels.get(item, f"item {item}")
                if legend.label != value(label):
                    legend.label = value(label)
                legend.visible = True
                for renderer in legend.renderers:
                    renderer.visible = True
            else:
                self._set_data(f"numeric_q{slot}", src, shape.numeric_columns([], [0])[0])
                legend.visible = False
                for renderer in legend.renderers:
                    renderer.visible = False
        title = f"numeric {attribute}: mean and quantiles across windows (x: window end), 95% bands"
        if partial:
            title = f"PARTIAL (EARLY pane, window still open): {title}"
        if self.numeric_plot.title.text != title:
            self.numeric_plot.title.text = title
        table = _numeric_html(attribute, rows, current, partial, len(quantiles) > QUANTILE_SLOTS)
        if self.numeric_table.text != table:
            self.numeric_table.text = table

    @staticmethod
    def _legend(items: list[LegendItem]) -> Any:
        from bokeh.models import Legend

        return Legend(items=items, location="top_left", click_policy="hide")

    # -- state ----------------------------------------------------------------------------------------
    def _set_status(self, state: str, text: str, partial: bool = False) -> None:
        markup = _STATE_CSS + (
            f"<span class='ldp-state' data-state='{state}' data-partial='{int(partial)}'>"
            f"{shape.html_text(text)}</span>"
        )
        if self.status.text != markup:
            self.status.text = markup

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
        assert self.reader is not None
        reader = self.reader
        summary = shape.parse_json(task.get("summary_json"))
        summary = summary if isinstance(summary, dict) else {}
        self._summary = summary
        labels = shape.labels_from_summary(summary)
        self._update_budget(summary, task.get("task_json"))

        # the job's counts come first: they show before any estimate (e.g. every report dead-lettered)
        counts = shape.latest_counts(reader.counts(task_id, self.max_windows))
        windows = reader.windows(task_id, self.max_windows)
        span = None
        if windows and any(int(w["window_end"]) > 0 for w in windows):
            span = (min(int(w["window_start"]) for w in windows), max(int(w["window_end"]) for w in windows))
        self._set_data("counts", self.counts_source, shape.counts_columns(counts, span))
        self._set_data("reasons", self.reasons_source, shape.reasons_columns(counts))
        if not windows:
            so_far = ""
            if counts:
                read = sum(int(c.get("read") or 0) for c in counts)
                rejected = sum(int(c.get("rejected") or 0) for c in counts)
                so_far = f" ({read} reports read, {rejected} rejected so far; see the counts below)"
            self._set_status("waiting", f"task {task_id}: waiting for the first pane{so_far}")
            return
        oldest_end = min(int(w["window_end"]) for w in windows)

        views = [f"{out}, group {grp}" for out, grp in reader.outputs(task_id)]
        if list(self.view_select.options) != views:
            self.view_select.options = views
        if self.view_select.value not in views:
            preferred = [v for v in views if v.split(",")[0] in ESTIMATE_OUTPUTS]
            self.view_select.value = (preferred or views or [""])[0]
        self.view_select.visible = len(views) > 1
        output, grp = _parse_view(self.view_select.value)

        # the current window: the newest window that has rows of this view
        rows: list[dict[str, Any]] = []
        current: dict[str, Any] | None = None
        for win in windows:  # newest first
            rows = reader.window_rows(task_id, output, grp, int(win["window_start"]), int(win["window_end"]))
            if rows:
                current = win
                break
        k = int(self.k_select.value or K_CHOICES[1])
        is_estimate = output in ESTIMATE_OUTPUTS
        d = shape.domain_size(task.get("task_json"))
        if is_estimate:
            top = shape.top_k(rows, k, labels, domain_size=d, simultaneous=output == "estimates")
        else:
            test_zero = output != NUMERIC_OUTPUT or shape.zero_inside(task.get("task_json"), grp)
            top = shape.answers_columns(rows, k, test_zero=test_zero)
        if self._set_data("topk", self.topk_source, top):
            self.topk_plot.x_range.factors = list(top["name"]) or [" "]
        noun = "values" if is_estimate else "queries"
        # the shown rows are a partial window's when they come from an EARLY pane of an open window
        partial = bool(rows) and shape.is_partial(rows[0].get("pane_timing"), rows[0].get("is_final"))
        if current is not None:
            what = shape.format_window(int(current["window_start"]), int(current["window_end"]))
            if output == "estimates":
                title = (
                    f"current window {what}: top {k} {noun}, published estimate with simultaneous 95% "
                    "interval over the domain (valid after the selection)"
                )
            elif is_estimate:
                title = f"current window {what}: top {k} {noun}, estimate with per-value 95% interval"
            else:
                title = f"current window {what}: {noun} {_span(top['item'])}, answer with 95% interval"
            if partial:
                title = f"PARTIAL (EARLY pane, window still open): {title}"
        else:
            title = f"no {output} rows yet"
        if self.topk_plot.title.text != title:
            self.topk_plot.title.text = title
        table = _topk_html(top, rows[0] if rows else None, is_estimate, simultaneous=output == "estimates")
        if self.topk_table.text != table:
            self.topk_table.text = table
        is_numeric = output == NUMERIC_OUTPUT
        self.numeric_plot.visible = is_numeric
        self.numeric_table.visible = is_numeric
        if is_numeric:
            self._update_numeric(task_id, task, grp, rows, current, partial, oldest_end)

        # the series: chosen items (first time per task and view: the current top 5 / first 5 queries)
        all_items = sorted({int(r["item"]) for r in rows})
        names = {
            int(r["item"]): (
                shape.value_name(int(r["item"]), r.get("label"), labels)
                if is_estimate
                else f"#{int(r['item'])}: "
                + shape.query_text(shape.parse_json(r.get("extra_json")), int(r["item"]))
            )
            for r in rows
        }
        # Choices.js (the MultiChoice) renders option labels as HTML: escaped, they show as text
        options = [(str(i), shape.html_text(names[i])) for i in all_items]
        if [tuple(o) for o in self.series_items.options] != options:
            self.series_items.options = options
        series_key = f"{task_id}|{output}|{grp}"
        if self.series_task != series_key:
            self.series_task = series_key
            self.series_items.value = [str(i) for i in top["item"][:5]]
        chosen = [int(v) for v in self.series_items.value][:SERIES_SLOTS]
        series = shape.series_columns(
            reader.item_rows(task_id, output, grp, chosen, oldest_end),
            chosen,
            domain_size=(d or len(rows)) if output == "estimates" else None,
        )
        for slot in range(SERIES_SLOTS):
            legend = self.series_items_legend[slot]
            if slot < len(chosen):
                item = chosen[slot]
                self._set_data(f"series{slot}", self.series_sources[slot], series[item])
                label = names.get(item, f"value {item}" if is_estimate else f"query {item}")
                if self._legend_labels.get(slot) != label:
                    self._legend_labels[slot] = label
                    legend.label = value(label)
                legend.visible = True
                for renderer in legend.renderers:
                    renderer.visible = True
            else:
                self._set_data(f"series{slot}", self.series_sources[slot], shape.series_columns([], [0])[0])
                legend.visible = False
            self.series_whiskers[slot].visible = (slot < len(chosen)) and not is_estimate
        self.series_plot.title.text = (
            "chosen values across windows (x: window end), published estimate with simultaneous 95% band "
            "over the domain"
            if output == "estimates"
            else "chosen values across windows (x: window end), published estimate with per-value 95% band"
            if is_estimate
            else "chosen queries across windows (x: window end), answer with 95% error bars"
        )

        # windows, panes, counts; late panes that changed nothing and a backfill's panes are told apart
        panes = [
            p for p in reader.panes(task_id, oldest_end) if p["output"] == output and int(p["grp"]) == grp
        ]
        win_cfg = shape.window_config(summary)
        run = shape.run_state(summary)
        candidates = shape.late_candidates(panes)
        numbers = reader.pane_numbers(task_id, [k for pair in candidates for k in pair]) if candidates else {}
        unchanged = shape.unchanged_panes(candidates, numbers, bool(win_cfg.get("accumulating")))
        backfill_s = shape.backfill_bound_s(summary)
        batch = run is not None and run.get("streaming") is False
        live, same, back = shape.split_panes(panes, unchanged, backfill_s, batch)
        effective = shape.effective_panes(panes, unchanged)
        live_keys = {shape.pane_key(p) for p in live}
        latest_live = [p for p in effective.values() if shape.pane_key(p) in live_keys]
        wins = shape.windows_columns(windows, shape.latest_pane_latency(latest_live), effective)
        self._set_data("windows", self.windows_source, wins)
        lat = shape.latency_columns(live)
        self._set_data("latency", self.latency_source, lat)
        summ = shape.latency_summary(lat["latency_s"], lat["timing"])
        lat_text = _latency_text(summ, len(same), len(back), backfill_s, batch)
        if self.latency_summary.text != lat_text:
            self.latency_summary.text = lat_text

        if current is not None:
            final = "final" if current.get("is_final") else "not final"
            shown = effective.get((int(current["window_start"]), int(current["window_end"])), {})
            pane_index = shown.get("pane_index", current.get("last_pane_index"))
            timing = shown.get("pane_timing", current.get("last_pane_timing"))
            head = (
                "PARTIAL window (EARLY pane: the window is still open, its numbers will change); "
                if partial
                else ""
            )
            self._set_status(
                "live",
                f"{head}task {task_id}: current window "
                f"{shape.format_window(int(current['window_start']), int(current['window_end']))}"
                f", pane #{pane_index} {timing} ({final}), "
                f"n_reports {current.get('n_reports')}; {len(windows)} window(s); page updated "
                f"{time.strftime('%H:%M:%S', time.gmtime(self.clock()))} UTC",
                partial=partial,
            )
        else:
            self._set_status("waiting", f"task {task_id}: waiting for the first pane of {output}")

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
        markup = _STATE_CSS + f"<span class='ldp-state' data-state='{state}'>{shape.html_text(text)}</span>"
        if self.freshness.text != markup:
            self.freshness.text = markup

    def _update_budget(self, summary: dict[str, Any], task_json: str | None) -> None:
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
        spent = ""
        rows = shape.spent_rows(entries)
        if rows:
            cells = "".join(
                f"<tr><td class='name'>{shape.html_text(r['figure'])}</td>"
                f"<td>{'-' if r['windows'] is None else shape.html_text(r['windows'])}</td>"
                f"<td>{_fmt(r['basic'], 4)}</td><td>{_fmt(r['tight'], 4)}</td>"
                f"<td class='worst'>{_fmt(r['worst_basic'], 4)}</td>"
                f"<td class='worst'>{_fmt(r['worst_tight'], 4)}</td></tr>"
                for r in rows
            )
            spent = (
                "<table class='ldp' id='budget-spent'><tr><th class='name'>privacy loss spent</th>"
                "<th>reports</th><th>basic composition</th><th>tight (accountant)</th>"
                "<th>worst case, any history: basic</th><th>worst case: tight</th></tr>"
                f"{cells}</table>"
            )
        body = "".join(
            f"<tr><td class='name'>{shape.html_text(k)}</td><td>{shape.html_text(v)}</td></tr>"
            for k, v in items
        )
        text = (
            "<b class='ldp-h'>privacy budget and accounting</b> "
            f"<span class='ldp-h' id='budget-origin'>(from {shape.html_text(origin)})</span>"
            f"{_guarantees_table(summary)}{spent}"
            "<details><summary class='ldp-h'>all figures</summary><table class='ldp' id='budget-table'>"
            f"<tr><th class='name'>figure</th><th>value</th></tr>{body}</table></details>"
        )
        if self.budget.text != _CSS + text:
            self.budget.text = _CSS + text
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


def _yes_no(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _verified_text(r: dict[str, Any]) -> str:
    """``verified / batches`` of a window, with the reason codes of those that did not verify (escaped)."""
    if r.get("batches_verified") is None or r.get("batches") is None:
        return "-"
    text = f"{r['batches_verified']} / {r['batches']}"
    if r.get("unverified"):
        text += " (" + ", ".join(f"{code} {n}" for code, n in r["unverified"].items()) + ")"
    return shape.html_text(text)


def _guarantees_table(summary: dict[str, Any]) -> str:
    """The central and the local guarantee of each (newest) window and the ``n`` the central one rests on
    (``shape.guarantee_rows``), as an HTML table; "" when the summary has none."""
    rows, older = shape.guarantee_rows(summary)
    if not rows:
        return ""
    cells = []
    for r in rows:
        n = _fmt(r["n"], spec=",")
        delta = _fmt(r["central_delta"], spec="g")
        cells.append(
            f"<tr><td class='name'>{shape.html_text(r['window'])}</td><td>{n}</td>"
            f"<td>{_fmt(r['central_epsilon'], 4)}</td><td>{delta}</td><td>{_fmt(r['local_epsilon'], 4)}</td>"
            f"<td>{_yes_no(r['through_shuffler'])}</td><td>{_yes_no(r['times_rounded'])}</td>"
            f"<td>{_yes_no(r['no_client_ids'])}</td><td>{_verified_text(r)}</td>"
            f"<td class='name'>{shape.html_text(r['method'] or r['why'] or '')}</td></tr>"
        )
    more = f"<span class='ldp-h'>({older} older window(s) not shown)</span>" if older else ""
    return (
        "<table class='ldp' id='privacy-guarantees'><tr><th class='name'>window</th>"
        "<th>n shuffled together (smallest batch)</th><th>central epsilon (worst batch)</th>"
        "<th>central delta</th><th>local epsilon</th>"
        "<th>through a shuffler</th><th>times rounded</th><th>no client ids</th>"
        "<th>batches verified (reasons not)</th>"
        "<th class='name'>method (or why no central guarantee)</th></tr>"
        f"{''.join(cells)}</table>{more}"
    )


def _latency_text(summ: dict[str, Any], n_same: int, n_back: int, backfill_s: float, batch: bool) -> str:
    """The line under the latency plot: the live panes' figures and what was left out, and why."""
    if batch:
        return (
            "<span class='ldp-h' data-latency='batch'>latency not shown: a batch run (its panes are written "
            "when it processes old reports, so written_ms - window_end is not a live latency)</span>"
        )
    text = (
        "window end to pane in the store, live panes written after their window closed (ON_TIME, LATE): "
        f"n = {summ['n']}, median {_fmt(summ['median_s'], 2)} s, max {_fmt(summ['max_s'], 2)} s"
    )
    left = []
    if n_same:
        left.append(f"{n_same} LATE pane(s) that changed nothing (same reports, same numbers)")
    if n_back:
        left.append(
            f"{n_back} backfill pane(s) (written more than {backfill_s:g} s after their window ended: "
            "event times far older than processing times)"
        )
    if left:
        text += "; not drawn or counted: " + ", ".join(left)
    return f"<span class='ldp-h' data-latency='live'>{text}</span>"


def _span(items: Sequence[int]) -> str:
    """``0-3`` for the query indexes shown (``-`` when none)."""
    return f"{min(items)}-{max(items)}" if items else "-"


def _parse_view(view: str | None) -> tuple[str, int]:
    if not view or ", group " not in view:
        return "estimates", 0
    out, grp = view.split(", group ", 1)
    return out, int(grp)


def _topk_html(
    top: dict[str, list[Any]], first: dict[str, Any] | None, is_estimate: bool, *, simultaneous: bool = False
) -> str:
    """The top-k as an HTML table (``id='topk-table'``; one ``tr`` per value with ``data-item`` and
    ``data-above-zero``: 1 flagged, 0 not, -1 not judged)."""
    if not top["item"]:
        return _CSS + "<span class='ldp-h'>no rows in the current window yet</span>"
    low, high = ("sim. 95% low", "sim. 95% high") if simultaneous else ("95% low", "95% high")
    head = (
        "<tr><th>rank</th><th class='name'>"
        + ("value" if is_estimate else "query")
        + f"</th><th>index</th><th>estimate</th><th>{low}</th><th>{high}</th><th "
        "class='name'>vs 0</th></tr>"
    )
    body = []
    for i in range(len(top["item"])):
        above = int(top["above_zero"][i])
        body.append(
            f"<tr class='{'value' if above == 1 else 'noise'}' data-item='{shape.html_text(top['item'][i])}' "
            f"data-above-zero='{above}'>"
            f"<td>{top['rank'][i]}</td><td class='name'>{shape.html_text(str(top['name'][i]))}</td>"
            f"<td>{shape.html_text(top['item'][i])}</td><td class='estimate'>{_fmt(top['estimate'][i])}</td>"
            f"<td>{_fmt(top['ci_low'][i])}</td><td>{_fmt(top['ci_high'][i])}</td>"
            f"<td class='name'>{shape.html_text(top['noise'][i])}</td></tr>"
        )
    method = shape.html_text(str(first.get("method") or "")) if first else ""
    if simultaneous:
        note = (
            "intervals: simultaneous 95% over the whole domain (Bonferroni, from the store's unbiased "
            "estimate and its std), valid for the values shown although they were picked as the largest; "
            "'above 0' follows the rule named in the column, over the whole domain"
        )
    else:
        note = "intervals are the store's ci_low / ci_high (95%, per value), drawn as whiskers"
    return (
        _CSS + f"<table class='ldp' id='topk-table' data-method='{method}'>{head}{''.join(body)}</table>"
        f"<span class='ldp-h' style='font-size:11px'>method: {method}; {note}</span>"
    )


def _numeric_html(
    attribute: str,
    rows: Sequence[dict[str, Any]],
    current: dict[str, Any] | None,
    partial: bool,
    clipped: bool,
) -> str:
    """The newest window's numeric figures as an HTML table (``id='numeric-table'``, one ``tr`` per stored
    number with ``data-item``; ``data-partial='1'`` on the table while the window's pane is EARLY)."""
    name = shape.html_text(attribute)
    if not rows or current is None:
        return _CSS + f"<span class='ldp-h'>no numeric rows of {name} yet</span>"
    what = shape.html_text(shape.format_window(int(current["window_start"]), int(current["window_end"])))
    head = (
        f"<b class='ldp-h'>{'PARTIAL (EARLY pane, window still open): ' if partial else ''}"
        f"{name}, window {what}, n_reports {shape.html_text(rows[0].get('n_reports'))}</b>"
    )
    body = "".join(
        f"<tr data-item='{int(r['item'])}'><td class='name'>{shape.html_text(r.get('label'))}</td>"
        f"<td class='estimate'>{_fmt(r.get('estimate'))}</td><td>{_fmt(r.get('std'))}</td>"
        f"<td>{_fmt(r.get('ci_low'))}</td><td>{_fmt(r.get('ci_high'))}</td></tr>"
        for r in sorted(rows, key=lambda r: int(r["item"]))
    )
    more = (
        f"<span class='ldp-h' style='font-size:11px'>the plot draws the first {QUANTILE_SLOTS} "
        "quantiles</span>"
        if clipped
        else ""
    )
    return (
        _CSS + head + f"<table class='ldp' id='numeric-table' data-partial='{int(partial)}'>"
        "<tr><th class='name'>figure</th><th>estimate</th><th>std</th><th>95% low</th><th>95% high</th></tr>"
        f"{body}</table>{more}"
    )


def _display_url(url: str) -> str:
    from pipelines.dashboard_app.reader import _redact

    return _redact(url)
