"""The dashboard's Bokeh models, one builder per panel: plots, their data sources and legends.

Nothing here reads the store or holds state; :class:`pipelines.dashboard_app.app.Dashboard` builds the
panels once per session and fills their sources on every poll. Every model a test or script looks up has a
stable Bokeh ``name`` and the CSS class ``ldp-<name with dashes>`` (:func:`named`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bokeh.core.properties import value
from bokeh.models import (
    ColumnDataSource,
    DatetimeTickFormatter,
    FactorRange,
    HoverTool,
    Legend,
    LegendItem,
    Whisker,
)
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from pipelines.dashboard_app import shape

__all__ = [
    "NumericPanel",
    "SeriesPanel",
    "WALL_CLOCK",
    "counts_plot",
    "latency_plot",
    "named",
    "numeric_panel",
    "series_panel",
    "topk_plot",
    "windows_plot",
]

#: How many values (or queries) the time-series plot can show at once.
SERIES_SLOTS = 8
#: Quantiles the numeric panel draws (the table lists every stored one).
QUANTILE_SLOTS = 8
#: Tick formats of every time axis, at every scale BokehJS may pick: wall-clock time (UTC), never an
#: offset in micro- or milliseconds.
WALL_CLOCK = {
    "microseconds": "%H:%M:%S.%3N",
    "milliseconds": "%H:%M:%S.%3N",
    "seconds": "%H:%M:%S",
    "minsec": "%H:%M:%S",
    "minutes": "%H:%M",
    "hourmin": "%H:%M",
    "hours": "%H:%M",
    "days": "%m-%d %H:%M",
    "months": "%Y-%m-%d",
    "years": "%Y-%m-%d",
}
#: A time plot's x span when its data has a single x (one window): this many ms, until a poll sets it to
#: twice the task's window.
DEFAULT_SPAN_MS = 120_000


def named(model: Any, name: str) -> Any:
    """Gives ``model`` its stable ``name`` and the CSS class ``ldp-<name with dashes>``."""
    model.name = name
    if hasattr(model, "css_classes"):
        model.css_classes = [f"ldp-{name.replace('_', '-')}"]
    return model


def _time_figure(name: str, title: str, height: int, **kw: Any) -> Any:
    """A plot with a wall-clock x axis (UTC) and a sensible span for a single x."""
    fig = named(
        figure(
            x_axis_type="datetime",
            height=height,
            sizing_mode="stretch_width",
            title=title,
            tools="pan,wheel_zoom,save,reset",
            **kw,
        ),
        name,
    )
    fig.xaxis.formatter = DatetimeTickFormatter(**WALL_CLOCK, context=None)
    fig.x_range.default_span = DEFAULT_SPAN_MS
    return fig


def _hover(fig: Any, *tooltips: tuple[str, str], **kw: Any) -> None:
    """Adds a hover tool showing ``tooltips`` (label, Bokeh field template) to ``fig``."""
    fig.add_tools(HoverTool(tooltips=list(tooltips), **kw))


def legend(items: list[LegendItem]) -> Legend:
    return Legend(items=items, location="top_left", click_policy="hide")


def topk_plot(source: ColumnDataSource) -> Any:
    """The current window's top values (or first queries): bars with 95% whiskers."""
    fig = named(
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
    fig.vbar(x="name", top="estimate", width=0.7, source=source, color="color", legend_field="noise")
    fig.add_layout(
        Whisker(source=source, base="name", lower="ci_low", upper="ci_high", line_width=1.5, level="overlay")
    )
    # invisible ends of the whiskers, so the y range covers the intervals (annotations do not count)
    fig.scatter(x="name", y="ci_high", source=source, alpha=0, size=1)
    fig.scatter(x="name", y="ci_low", source=source, alpha=0, size=1)
    _hover(
        fig,
        ("value", "@name (#@item)"),
        ("estimate", "@estimate{0.0000}"),
        ("interval", "[@ci_low{0.0000}, @ci_high{0.0000}] (see the table's note)"),
        ("", "@noise"),
        ("method", "@method"),
    )
    fig.xaxis.major_label_orientation = 0.6
    fig.yaxis.axis_label = "estimate"
    fig.add_layout(fig.legend[0], "right")  # beside the bars, never over them
    return fig


@dataclass
class SeriesPanel:
    """The chosen values across windows: one source, band, line and whisker per slot."""

    plot: Any
    sources: list[ColumnDataSource] = field(default_factory=list)
    legend_items: list[LegendItem] = field(default_factory=list)
    whiskers: list[Whisker] = field(default_factory=list)


def series_panel() -> SeriesPanel:
    panel = SeriesPanel(
        _time_figure("series_plot", "chosen values across windows (x: window end), 95% band", 300)
    )
    for i in range(SERIES_SLOTS):
        src = named(ColumnDataSource(shape.series_columns([], [0])[0]), f"series_source_{i}")
        color = Category10_10[i % 10]
        band = panel.plot.varea(x="x", y1="lower", y2="upper", source=src, fill_color=color, fill_alpha=0.18)
        line = panel.plot.line(x="x", y="estimate", source=src, color=color, line_width=2)
        dots = panel.plot.scatter(x="x", y="estimate", source=src, color=color, size=5)
        whisker = Whisker(source=src, base="x", lower="lower", upper="upper", line_color=color, visible=False)
        panel.plot.add_layout(whisker)
        panel.sources.append(src)
        panel.whiskers.append(whisker)
        panel.legend_items.append(
            LegendItem(label=value(f"slot {i}"), renderers=[line, dots, band], visible=False)
        )
    panel.plot.add_layout(legend(panel.legend_items), "right")
    panel.plot.yaxis.axis_label = "estimate"
    panel.plot.xaxis.axis_label = "window end (UTC)"
    return panel


@dataclass
class NumericPanel:
    """A numeric task's mean (black, with its band) and quantiles (dashed, a band each) across windows."""

    plot: Any
    mean_source: ColumnDataSource
    quantile_sources: list[ColumnDataSource] = field(default_factory=list)
    legend_items: list[LegendItem] = field(default_factory=list)


def numeric_panel() -> NumericPanel:
    empty = shape.numeric_columns([], [0])[0]
    plot = _time_figure(
        "numeric_plot", "numeric: mean and quantiles across windows (x: window end), 95% bands", 320,
        visible=False,
    )  # fmt: skip
    panel = NumericPanel(plot, named(ColumnDataSource(dict(empty)), "numeric_mean_source"))
    src = panel.mean_source
    band = plot.varea(x="x", y1="lower", y2="upper", source=src, fill_color="black", fill_alpha=0.15)
    line = plot.line(x="x", y="estimate", source=src, color="black", line_width=2.5)
    dots = plot.scatter(x="x", y="estimate", source=src, color="black", size=6)
    panel.legend_items.append(LegendItem(label=value("mean"), renderers=[line, dots, band]))
    for i in range(QUANTILE_SLOTS):
        q_src = named(ColumnDataSource(dict(empty)), f"numeric_q_source_{i}")
        color = Category10_10[i % 10]
        q_band = plot.varea(x="x", y1="lower", y2="upper", source=q_src, fill_color=color, fill_alpha=0.12)
        q_line = plot.line(x="x", y="estimate", source=q_src, color=color, line_width=1.5, line_dash="dashed")
        panel.quantile_sources.append(q_src)
        panel.legend_items.append(
            LegendItem(label=value(f"quantile {i}"), renderers=[q_line, q_band], visible=False)
        )
    _hover(
        plot,
        ("mean", "@estimate{0.0000}"),
        ("95% CI", "[@lower{0.0000}, @upper{0.0000}]"),
        ("pane", "@timing"),
        renderers=[dots],
    )
    plot.add_layout(legend(panel.legend_items), "right")
    plot.yaxis.axis_label = "value"
    plot.xaxis.axis_label = "window end (UTC)"
    return panel


def windows_plot(source: ColumnDataSource) -> Any:
    """``n_reports`` of each window's latest pane, coloured by its timing, final windows outlined."""
    fig = _time_figure(
        "windows_plot",
        "reports per window (event time), coloured by the timing of its latest pane (outlined: final)",
        240,
    )
    fig.vbar(
        x="x", top="n_reports", width="width", source=source, color="color", legend_field="timing",
        line_color="line", line_width=2,
    )  # fmt: skip
    _hover(
        fig,
        ("window", "@window"),
        ("n_reports", "@n_reports"),
        ("latest pane", "#@pane_index @timing"),
        ("", "@final"),
        ("latency", "@latency_s{0.00} s"),
    )
    fig.yaxis.axis_label = "n_reports"
    return fig


def counts_plot(source: ColumnDataSource) -> Any:
    """The job's counts per counts window: accepted, rejected and late-dropped stacked, read as a dot."""
    fig = _time_figure(
        "counts_plot",
        "reports read per counts window (arrival time): accepted, rejected (dead letters), late-dropped",
        240,
    )
    fig.vbar_stack(
        ["accepted", "rejected", "late_dropped"], x="x", width="width", source=source,
        color=["#4c72b0", "#c44e52", "#dd8452"], legend_label=["accepted", "rejected", "late dropped"],
    )  # fmt: skip
    fig.scatter(x="x", y="read", source=source, color="black", size=6, legend_label="read")
    _hover(
        fig,
        ("window", "@window"),
        ("read", "@read"),
        ("accepted", "@accepted"),
        ("rejected", "@rejected"),
        ("late dropped", "@late_dropped"),
        ("lost", "@lost"),
    )
    fig.legend.location = "top_left"
    return fig


def latency_plot(source: ColumnDataSource) -> Any:
    """One dot per live pane: ``written_ms - window_end`` in seconds, coloured by timing."""
    fig = _time_figure("latency_plot", "pane latency: written_ms - window_end (s), per pane", 240)
    fig.scatter(x="x", y="latency_s", source=source, color="color", size=7, legend_field="timing")
    _hover(fig, ("pane", "#@pane_index @timing"), ("latency", "@latency_s{0.00} s"))
    fig.yaxis.axis_label = "seconds after window end"
    fig.xaxis.axis_label = "window end (UTC)"
    return fig
