"""The heavy-hitters panel: the strings a ``heavy_hitters`` task published, per window and across windows.

Shown for the store outputs ``heavy_hitters`` (``ldp.kinds.heavy_hitters.flatten``: group 0, one item per
published string, its label the string as the row prints it, ``\\xNN`` for a byte that is not UTF-8 or an
unprintable character) and ``heavy_hitters_trie``. It holds:

* ``hh_window_select``: the window whose strings the table lists (``latest``, the default, follows the
  newest window with a heavy-hitters pane);
* ``hh_table`` (``#hh-table``): that window's published strings, best first, each with its estimate (the
  frequency among all the window's users), std and 95% interval as stored, one ``tr[data-item]`` per string;
  above it the window, its reports and the publication rule, below it the level statistics
  (``#hh-levels``);
* ``hh_series_plot`` (``hh_series_source_0`` ... ``_7``): the table's top strings across windows (x: window
  end) with their 95% bands, labelled by the strings; a window where a string was not published is a gap;
* the trie view of a ``trie``-mode task (store output ``heavy_hitters_trie``, group = the level a window
  scored; shown when the task has such panes): ``hh_trie_plot`` (``hh_trie_source``), the prefix bits each
  window scored (the trie growing, round after round), and ``hh_trie_table`` (``#hh-trie-table``), the
  surviving prefixes of the newest window. In trie mode only a verification window publishes strings: the
  window selector names each window's step, ``latest`` follows the newest verification window and the
  series cover the verification windows.

Every string is user text: it reaches HTML only through :func:`~pipelines.dashboard_app.shape.html_text`
(in a ``<code>`` cell that keeps its spaces); legends, titles and hover tooltips are drawn by BokehJS as text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bokeh.core.properties import value
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, Div, LegendItem, Select
from bokeh.palettes import Category10_10

from pipelines.dashboard_app import markup, shape
from pipelines.dashboard_app.panels import SERIES_SLOTS, _hover, _time_figure, legend, named

__all__ = [
    "HH_OUTPUT",
    "LATEST",
    "TRIE_OUTPUT",
    "HeavyHittersPanel",
    "hh_series",
    "hh_table_columns",
    "hh_table_html",
    "hh_windows",
    "string_label",
    "trie_growth_columns",
    "trie_table_html",
]

#: The store output of heavy-hitters rows.
HH_OUTPUT = "heavy_hitters"
#: The store output of a trie-mode window's surviving prefixes (group = the level it scored).
TRIE_OUTPUT = "heavy_hitters_trie"
#: Colours of a trie window's step.
TRIE_COLORS = {"search": "#1f77b4", "verify": "#2ca02c", "no_reports": "#999999"}
#: The window selector's value that follows the newest window.
LATEST = "latest"
Row = Mapping[str, Any]
Columns = dict[str, list[Any]]
_NAN = float("nan")
_TABLE_COLUMNS = ("rank", "item", "value", "estimate", "std", "ci_low", "ci_high")
_LEVEL_COLUMNS = (("level", "level"), ("bits", "prefix bits"), ("oracle", "oracle"), ("g", "g"),
                  ("reports", "reports"), ("candidates", "candidates scored"), ("kept", "kept"))  # fmt: skip
_CSS = """<style>
table.ldp td.hh code { white-space: pre; background: #f3f3f3; padding: 0 3px; font-size: 12px; }
span.hh-note { color: #777; font: 11px sans-serif; }
</style>"""


# -- shaping (pure) ---------------------------------------------------------------------------------------
def string_label(label: Any) -> str:
    """A published string as a legend, hover or option shows it: in double quotes, so the empty string and
    leading or trailing spaces are visible (``"cat"``, ``""``)."""
    return f'"{"" if label is None else label}"'


def _window_key(row: Row) -> tuple[int, int]:
    return int(row["window_start"]), int(row["window_end"])


def hh_windows(panes: Iterable[Row], any_group: bool = False) -> list[Row]:
    """The newest pane of each window of the output, newest window first (``StoreReader.output_panes``
    rows of group 0, or of any group: a trie window has one, its level)."""
    out: dict[tuple[int, int], Row] = {}
    for p in panes:
        key = _window_key(p)
        if int(p.get("grp") or 0) != 0 and not any_group:
            continue
        if key not in out or int(p["pane_index"]) > int(out[key]["pane_index"]):
            out[key] = p
    return [out[k] for k in sorted(out, key=lambda k: (k[1], k[0]), reverse=True)]


def _num(x: Any) -> float:
    try:
        return _NAN if x is None else float(x)
    except (TypeError, ValueError):
        return _NAN


def _best_first(row: Row) -> tuple[float, str]:
    """Descending estimate (a row without one last), then the string."""
    est = _num(row.get("estimate"))
    return (math.inf if math.isnan(est) else -est, str(row.get("label") or ""))


def hh_table_columns(rows: Iterable[Row]) -> Columns:
    """One window's stored strings, best first (descending estimate; ties by string): ``rank``, ``item``,
    ``value`` (the string), ``estimate``, ``std``, ``ci_low``, ``ci_high``."""
    ordered = sorted(rows, key=_best_first)
    cols: Columns = {k: [] for k in _TABLE_COLUMNS}
    for rank, r in enumerate(ordered, start=1):
        cols["rank"].append(rank)
        cols["item"].append(int(r["item"]))
        cols["value"].append("" if r.get("label") is None else str(r["label"]))
        for key in ("estimate", "std", "ci_low", "ci_high"):
            cols[key].append(_num(r.get(key)))
    return cols


def hh_series(rows: Iterable[Row], items: Sequence[int], window_ends: Sequence[int]) -> dict[int, Columns]:
    """Per chosen item, one point per window end of ``window_ends`` (ascending): ``x``, ``estimate``,
    ``lower`` / ``upper`` (the stored 95% interval), ``name`` (the quoted string), ``published`` (0/1);
    NaN where the window did not publish the string, so the line breaks there."""
    by_key = {(int(r["item"]), int(r["window_end"])): r for r in rows}
    names = {int(r["item"]): string_label(r.get("label")) for r in rows}
    out: dict[int, Columns] = {}
    for item in items:
        cols: Columns = {k: [] for k in ("x", "estimate", "lower", "upper", "name", "published")}
        for end in sorted(window_ends):
            r = by_key.get((int(item), int(end)))
            cols["x"].append(int(end))
            cols["estimate"].append(_NAN if r is None else _num(r.get("estimate")))
            cols["lower"].append(_NAN if r is None else _num(r.get("ci_low")))
            cols["upper"].append(_NAN if r is None else _num(r.get("ci_high")))
            cols["name"].append(names.get(int(item), ""))
            cols["published"].append(int(r is not None))
        out[int(item)] = cols
    return out


# -- markup -----------------------------------------------------------------------------------------------
def _string_cell(text: str) -> str:
    if text == "":
        return "<td class='name hh'><code></code> <span class='hh-note'>(the empty string)</span></td>"
    return f"<td class='name hh'><code>{shape.html_text(text)}</code></td>"


def _item_tag(item: Any) -> str:
    """``(#item)``: tells apart prefixes that print alike (an integer, never text from the store)."""
    return f"(#{int(item)})"


def _heading(pane: Row, extra: Mapping[str, Any], shown: int) -> str:
    """The line above the table: the window, its reports, what was published and by which rule."""
    window = shape.format_window(int(pane["window_start"]), int(pane["window_end"]))
    partial = shape.is_partial(pane.get("pane_timing"), pane.get("is_final"))
    published = pane.get("n_items")
    alpha = extra.get("alpha")
    rule = (f"{extra.get('rule')} at alpha {alpha}" if alpha is not None
            else "no test: the top_k largest")  # fmt: skip
    final = "final" if pane.get("is_final") else "not final"
    text = (
        f"{'PARTIAL (EARLY pane, window still open): ' if partial else ''}heavy hitters of window {window}: "
        f"{published if published is not None else shown} string(s) published of {extra.get('tested', '-')} "
        f"tested (rule {rule}; top_k {extra.get('top_k', '-')}), n_reports {pane.get('n_reports')}, "
        f"pane #{pane.get('pane_index')} {pane.get('pane_timing')} ({final})"
    )
    return f"<b class='ldp-h' data-partial='{int(partial)}'>{shape.html_text(text)}</b>"


def _level_cell(x: Any) -> str:
    """A level statistic: an integer with thousands separators, anything else escaped as text."""
    if isinstance(x, int) and not isinstance(x, bool):
        return markup.fmt(x, spec=",")
    return shape.html_text(x)


def _levels_html(levels: Any) -> str:
    """The level statistics of the row (``#hh-levels``), folded; "" without them."""
    if not isinstance(levels, list) or not levels:
        return ""
    head = "".join(f"<th>{title}</th>" for _, title in _LEVEL_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{_level_cell(lv.get(k))}</td>" for k, _ in _LEVEL_COLUMNS) + "</tr>"
        for lv in levels
        if isinstance(lv, Mapping)
    )
    return (
        "<details><summary class='ldp-h' style='font-size:12px'>levels of the search (the last verifies the "
        f"survivors with fresh users)</summary><table class='ldp' id='hh-levels'><tr>{head}</tr>{body}"
        "</table></details>"
    )


def hh_table_html(cols: Mapping[str, list[Any]], pane: Row | None, extra: Mapping[str, Any]) -> str:
    """The window's published strings (``#hh-table``, best first, one ``tr[data-item][data-rank]`` per
    string), its heading, a note on the figures and the level statistics."""
    if pane is None:
        return markup.CSS + "<span class='ldp-h'>no heavy-hitters pane yet</span>"
    head = markup.CSS + _CSS + _heading(pane, extra, len(cols["item"]))
    levels = _levels_html(extra.get("levels"))
    if not cols["item"]:
        return f"{head}<p class='ldp-h'>no string passed the publication rule in this window</p>{levels}"
    body = "".join(
        f"<tr data-item='{int(cols['item'][i])}' data-rank='{int(cols['rank'][i])}'>"
        f"<td>{int(cols['rank'][i])}</td>{_string_cell(cols['value'][i])}"
        f"<td class='estimate'>{markup.fmt(cols['estimate'][i])}</td>"
        f"<td>{markup.fmt(cols['std'][i])}</td><td>{markup.fmt(cols['ci_low'][i])}</td>"
        f"<td>{markup.fmt(cols['ci_high'][i])}</td></tr>"
        for i in range(len(cols["item"]))
    )
    stored, published = pane.get("stored_items"), pane.get("n_items")
    capped = (
        f" The store keeps the first {stored} of the {published} published strings."
        if stored is not None and published is not None and int(stored) < int(published)
        else ""
    )
    note = (
        "estimate: the string's frequency among all the window's users; 95% interval per string, as stored "
        "(from the verification level's own users). Strings are shown as UTF-8 text, \\xNN for a byte "
        "that is not UTF-8 or an unprintable character, \\\\ for a backslash." + capped
    )
    return (
        f"{head}<table class='ldp' id='hh-table' data-window-start='{int(pane['window_start'])}' "
        f"data-window-end='{int(pane['window_end'])}'><tr><th>rank</th><th class='name'>string</th>"
        f"<th>estimate</th><th>std</th><th>95% low</th><th>95% high</th></tr>{body}</table>"
        f"<span class='hh-note'>{shape.html_text(note)}</span>{levels}"
    )


# -- the trie view ----------------------------------------------------------------------------------------
def trie_step(pane: Row) -> dict[str, Any]:
    """A trie window's step (its pane's ``extra``: ``generation``, ``level``, ``status``, ``prefix_bits``,
    ``reports_at_level``, ``stale_reports``, ``survivors``); ``{}`` when unreadable."""
    extra = shape.parse_json(pane.get("extra_json"))
    return dict(extra) if isinstance(extra, Mapping) else {}


def trie_growth_columns(panes: Sequence[Row]) -> Columns:
    """The trie windows oldest first: ``x`` (window end), ``prefix_bits``, ``level``, ``status``,
    ``generation``, ``survivors``, ``reports``, ``stale``, ``window`` (text), ``color`` (by status)."""
    keys = ("x", "prefix_bits", "level", "status", "generation", "survivors", "reports", "stale", "window",
            "color")  # fmt: skip
    cols: Columns = {k: [] for k in keys}
    for p in sorted(panes, key=lambda p: (int(p["window_end"]), int(p["window_start"]))):
        step = trie_step(p)
        status = str(step.get("status", "unknown"))
        cols["x"].append(int(p["window_end"]))
        cols["prefix_bits"].append(_num(step.get("prefix_bits")))
        cols["level"].append(_num(step.get("level", p.get("grp"))))
        cols["status"].append(status)
        cols["generation"].append(_num(step.get("generation")))
        cols["survivors"].append(_num(step.get("survivors")))
        cols["reports"].append(_num(step.get("reports_at_level")))
        cols["stale"].append(_num(step.get("stale_reports")))
        cols["window"].append(shape.format_window(int(p["window_start"]), int(p["window_end"])))
        cols["color"].append(TRIE_COLORS.get(status, "#999999"))
    return cols


def trie_table_html(pane: Row | None, rows: Iterable[Row]) -> str:
    """The surviving prefixes of one trie window (``#hh-trie-table``, best first, one ``tr[data-item]`` per
    stored prefix) under a line naming the window's step; "" without a trie window."""
    if pane is None:
        return ""
    step = trie_step(pane)
    window = shape.format_window(int(pane["window_start"]), int(pane["window_end"]))
    stored, survivors = pane.get("stored_items"), step.get("survivors")
    text = (
        f"trie, newest window {window}: generation {step.get('generation')}, level {step.get('level')} "
        f"({step.get('status')}), {step.get('prefix_bits')} prefix bits, {step.get('reports_at_level')} "
        f"reports at the level, {step.get('stale_reports')} stale (another level: counted, not used); "
        f"{survivors} prefix(es) survive, the {stored} best stored"
    )
    cols = hh_table_columns(rows)
    texts = cols["value"]
    body = "".join(
        f"<tr data-item='{int(cols['item'][i])}'><td>{int(cols['rank'][i])}</td>{_string_cell(texts[i])}"
        f"<td>{_item_tag(cols['item'][i]) if texts.count(texts[i]) > 1 else ''}</td>"
        f"<td class='estimate'>{markup.fmt(cols['estimate'][i])}</td><td>{markup.fmt(cols['std'][i])}</td>"
        f"<td>{markup.fmt(cols['ci_low'][i])}</td><td>{markup.fmt(cols['ci_high'][i])}</td></tr>"
        for i in range(len(cols["item"]))
    )
    note = (
        "a prefix is shown by its complete bytes (trailing zero bytes dropped; the bits of a last, partial "
        "byte are not shown, so two prefixes may print alike: then told apart by their item); estimate: "
        "the prefix's frequency among the level's reports, 95% interval estimate +- 1.96 std"
    )
    return (
        markup.CSS + _CSS + f"<b class='ldp-h' data-status='{shape.html_text(step.get('status'))}'>"
        f"{shape.html_text(text)}</b><div class='ldp-scroll'><table class='ldp' id='hh-trie-table' "
        f"data-window-end='{int(pane['window_end'])}' data-level='{int(pane.get('grp') or 0)}'>"
        "<tr><th>rank</th><th class='name'>prefix</th><th></th><th>estimate</th><th>std</th><th>95% low</th>"
        f"<th>95% high</th></tr>{body}</table></div><span class='hh-note'>{shape.html_text(note)}</span>"
    )


def _window_option(pane: Row, step: Mapping[str, Any] | None) -> tuple[str, str]:
    """A window selector option: ``start:end`` and the window, with its trie step in trie mode."""
    text = shape.format_window(int(pane["window_start"]), int(pane["window_end"]))
    if step:
        what = "verification" if step.get("status") == "verify" else str(step.get("status"))
        text += f" (trie {what}, level {step.get('level')})"
    return f"{int(pane['window_start'])}:{int(pane['window_end'])}", text


# -- the panel --------------------------------------------------------------------------------------------
class HeavyHittersPanel:
    """The panel's Bokeh models (built once per session) and its refresh from the store's rows."""

    def __init__(self) -> None:
        self.window_select = named(
            Select(title="heavy hitters of window", options=[(LATEST, "newest window")], value=LATEST,
                   width=460, visible=False),
            "hh_window_select",
        )  # fmt: skip
        self.table = named(Div(text="", visible=False, sizing_mode="stretch_width"), "hh_table")
        self._build_series()
        self._build_trie()
        self.layout = column(self.window_select, self.table, self.plot, self.trie_plot, self.trie_table,
                             sizing_mode="stretch_width")  # fmt: skip
        self._last: dict[str, str] = {}

    def _build_series(self) -> None:
        self.plot = _time_figure(
            "hh_series_plot",
            "the table's top strings across windows (x: window end), estimate with 95% band; a gap: not "
            "published in that window", 300, visible=False,
        )  # fmt: skip
        self.sources: list[ColumnDataSource] = []
        self.legend_items: list[LegendItem] = []
        empty = hh_series([], [0], [])[0]
        for i in range(SERIES_SLOTS):
            src = named(ColumnDataSource(dict(empty)), f"hh_series_source_{i}")
            color = Category10_10[i % 10]
            band = self.plot.varea(x="x", y1="lower", y2="upper", source=src, fill_color=color,
                                   fill_alpha=0.15)  # fmt: skip
            line = self.plot.line(x="x", y="estimate", source=src, color=color, line_width=2)
            dots = self.plot.scatter(x="x", y="estimate", source=src, color=color, size=6)
            self.sources.append(src)
            self.legend_items.append(LegendItem(label=value(f"string {i}"), renderers=[line, dots, band],
                                                visible=False))  # fmt: skip
        _hover(self.plot, ("string", "@name"), ("estimate", "@estimate{0.0000}"),
               ("95% interval", "[@lower{0.0000}, @upper{0.0000}]"))  # fmt: skip
        self.plot.add_layout(legend(self.legend_items), "right")
        self.plot.yaxis.axis_label = "estimated frequency"
        self.plot.xaxis.axis_label = "window end (UTC)"

    def _build_trie(self) -> None:
        self.trie_source = named(ColumnDataSource(trie_growth_columns([])), "hh_trie_source")
        self.trie_plot = _time_figure(
            "hh_trie_plot",
            "trie: prefix bits scored per window (a round climbs the levels, verifies, then starts again)",
            240, visible=False,
        )  # fmt: skip
        self.trie_plot.step(x="x", y="prefix_bits", source=self.trie_source, mode="center", color="#bbbbbb")
        self.trie_plot.scatter(x="x", y="prefix_bits", source=self.trie_source, color="color", size=9,
                               legend_field="status")  # fmt: skip
        _hover(self.trie_plot, ("window", "@window"), ("generation", "@generation"), ("level", "@level"),
               ("step", "@status"), ("prefix bits", "@prefix_bits"), ("survivors", "@survivors"),
               ("reports at the level", "@reports"), ("stale reports", "@stale"))  # fmt: skip
        self.trie_plot.legend.location = "top_left"
        self.trie_plot.yaxis.axis_label = "prefix bits"
        self.trie_plot.xaxis.axis_label = "window end (UTC)"
        self.trie_table = named(Div(text="", visible=False, sizing_mode="stretch_width"), "hh_trie_table")

    @property
    def models(self) -> tuple[Any, ...]:
        return (self.window_select, self.table, self.plot)

    def show(self, visible: bool, trie: bool = False) -> None:
        for model in self.models:
            if model.visible != visible:
                model.visible = visible
        for model in (self.trie_plot, self.trie_table):
            if model.visible != (visible and trie):
                model.visible = visible and trie

    def _set_data(self, key: str, source: ColumnDataSource, data: Columns) -> None:
        text = repr(sorted((k, [None if isinstance(v, float) and v != v else v for v in vals])
                           for k, vals in data.items()))  # fmt: skip
        if self._last.get(key) != text:
            self._last[key] = text
            source.data = data

    @staticmethod
    def _set_text(div: Div, text: str) -> None:
        if div.text != text:
            div.text = text

    def refresh(self, reader: Any, task_id: str, since_end: int) -> None:
        """Re-renders the panel from the store (the windows' newest panes of both outputs, then the current
        rows of the shown windows) and shows it, with the trie view when the task has trie panes."""
        windows = hh_windows(reader.output_panes(task_id, HH_OUTPUT, since_end))
        trie = hh_windows(reader.output_panes(task_id, TRIE_OUTPUT, since_end), any_group=True)
        steps = {_window_key(p): trie_step(p) for p in trie}
        publishing = [p for p in windows if not trie or _status(steps, p) == "verify"]
        pane = self._choose_window(windows, steps, publishing)
        rows = [r for r in reader.output_rows(task_id, HH_OUTPUT, since_end) if int(r.get("grp") or 0) == 0]
        cols = hh_table_columns([r for r in rows if pane is not None and _window_key(r) == _window_key(pane)])
        self._set_text(self.table, _table_text(cols, pane, steps, bool(trie)))
        self._refresh_series(rows, cols, [int(p["window_end"]) for p in publishing])
        self.show(True, bool(trie))
        if trie:
            self._refresh_trie(reader, task_id, trie)

    def _choose_window(self, windows: list[Row], steps: Mapping[tuple[int, int], Mapping[str, Any]],
                       publishing: list[Row]) -> Row | None:  # fmt: skip
        """The window selector's options (the windows, with their trie step in trie mode) and the pane of
        the selected window (:func:`_chosen`)."""
        options = [(LATEST, "newest verification window" if steps else "newest window")]
        options += [_window_option(p, steps.get(_window_key(p))) for p in windows]
        if [tuple(o) for o in self.window_select.options] != options:
            self.window_select.options = options
        if self.window_select.value not in {v for v, _ in options}:
            self.window_select.value = LATEST
        return _chosen(windows, publishing, self.window_select.value)

    def _refresh_trie(self, reader: Any, task_id: str, trie: list[Row]) -> None:
        """The trie view: every window's step, and the surviving prefixes of the newest one."""
        self._set_data("trie", self.trie_source, trie_growth_columns(trie))
        newest = trie[0]
        prefixes = [
            r for r in reader.output_rows(task_id, TRIE_OUTPUT, int(newest["window_end"]))
            if _window_key(r) == _window_key(newest) and int(r["grp"]) == int(newest["grp"])
        ]  # fmt: skip
        self._set_text(self.trie_table, trie_table_html(newest, prefixes))

    def _refresh_series(self, rows: list[Row], cols: Columns, ends: list[int]) -> None:
        """The table's first :data:`SERIES_SLOTS` strings across the windows."""
        items = cols["item"][:SERIES_SLOTS]
        series = hh_series(rows, items, ends)
        for slot in range(SERIES_SLOTS):
            shown = slot < len(items)
            data = series[items[slot]] if shown else hh_series([], [0], [])[0]
            self._set_data(f"slot{slot}", self.sources[slot], data)
            item = self.legend_items[slot]
            if shown:
                label = string_label(cols["value"][slot])
                if item.label != value(label):
                    item.label = value(label)
            item.visible = shown
            for renderer in item.renderers:
                renderer.visible = shown


def _status(steps: Mapping[tuple[int, int], Mapping[str, Any]], pane: Row) -> Any:
    return steps.get(_window_key(pane), {}).get("status")


def _table_text(cols: Columns, pane: Row | None, steps: Mapping[tuple[int, int], Mapping[str, Any]],
                trie: bool) -> str:  # fmt: skip
    """The strings table of the chosen window, or what a trie-mode page says instead (a search window,
    no verification window yet)."""
    step = steps.get(_window_key(pane)) if pane is not None else None
    if pane is not None and step and step.get("status") != "verify":
        return _search_window_html(pane, step)
    if pane is None and trie:
        return markup.CSS + ("<span class='ldp-h'>no verification window yet: the trie's first round is "
                             "still searching (see the trie view below)</span>")  # fmt: skip
    extra = shape.parse_json(pane.get("extra_json")) if pane is not None else None
    return hh_table_html(cols, pane, extra if isinstance(extra, Mapping) else {})


def _search_window_html(pane: Row, step: Mapping[str, Any]) -> str:
    """The table's text for a trie window that publishes no strings (a search step, or no reports)."""
    window = shape.format_window(int(pane["window_start"]), int(pane["window_end"]))
    text = (
        f"window {window} is a trie {step.get('status')} step (level {step.get('level')}, "
        f"{step.get('prefix_bits')} prefix bits): it publishes no strings; its surviving prefixes are in the "
        "trie view below, the strings come with the round's verification window"
    )
    return markup.CSS + f"<span class='ldp-h' id='hh-search-window'>{shape.html_text(text)}</span>"


def _chosen(windows: Sequence[Row], publishing: Sequence[Row], choice: str) -> Row | None:
    """The pane of the selected window; ``latest``: the newest window that publishes strings (all of them
    in one-window mode, the verification windows in trie mode); None when there is none."""
    if choice != LATEST:
        for p in windows:
            if f"{int(p['window_start'])}:{int(p['window_end'])}" == choice:
                return p
    return publishing[0] if publishing else None
