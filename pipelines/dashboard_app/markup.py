"""The dashboard's HTML: every table and text line the page shows in a Bokeh ``Div``.

Each function takes what :mod:`pipelines.dashboard_app.shape` computed and returns markup; every text that
came from the store goes through :func:`~pipelines.dashboard_app.shape.html_text`, and every stored number
through :func:`fmt` (which escapes a stored value that is not a number). The tables are plain HTML built on
the server from the current columns: the browser shows exactly what the server sent, with no client-side
table state to fall behind (docs/dashboard.md, "How it stays live").
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.dashboard_app import shape

__all__ = [
    "CSS",
    "budget_html",
    "counts_note",
    "fmt",
    "guarantees_html",
    "latency_text",
    "numeric_html",
    "reasons_html",
    "state_markup",
    "topk_html",
    "windows_html",
]

CSS = """
<style>
.ldp-h { font-family: sans-serif; }
table.ldp { border-collapse: collapse; font: 12px sans-serif; }
table.ldp th, table.ldp td { border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }
table.ldp td.name, table.ldp th.name { text-align: left; }
table.ldp tr.noise td { color: #888; }
table.ldp td.worst, table.ldp th.worst { color: #b00020; font-weight: bold; }
div.ldp-scroll { max-height: 230px; overflow-y: auto; }
p.ldp-headline { font: 14px sans-serif; margin: 4px 0; }
</style>
"""
#: The status and freshness lines' styles (each Div renders in its own shadow root).
STATE_CSS = """<style>
span.ldp-state { font: 13px sans-serif; }
span.ldp-state[data-state=error], span.ldp-state[data-state=stale], span.ldp-state[data-state=failed],
span.ldp-state[data-partial='1'] { color: #b00020; font-weight: bold; }
span.ldp-state[data-state=waiting] { color: #a06000; }
</style>"""
#: The figure the numeric plot draws at most (the table lists every stored one).
QUANTILE_SLOTS = 8


def fmt(value: object, digits: int = 4, spec: str | None = None) -> str:
    """A stored number as HTML text: ``-`` for None or NaN, ``spec`` (default ``.{digits}f``) for a
    number, anything else (a store holding what the project did not write) escaped as text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return format(value, f".{digits}f" if spec is None else spec)
    return shape.html_text(value)


def state_markup(state: str, text: str, partial: bool | None = None) -> str:
    """A status or freshness line: ``text`` escaped in a span carrying ``data-state`` (and
    ``data-partial`` when given)."""
    extra = "" if partial is None else f" data-partial='{int(partial)}'"
    return (STATE_CSS + f"<span class='ldp-state' data-state='{shape.html_text(state)}'{extra}>"
            f"{shape.html_text(text)}</span>")


# -- the current window's values ------------------------------------------------------------------------
def topk_html(
    top: Mapping[str, list[Any]], first: Mapping[str, Any] | None, noun: str, *, simultaneous: bool
) -> str:
    """The top-k as an HTML table (``id='topk-table'``; one ``tr`` per value with ``data-item`` and
    ``data-above-zero``: 1 flagged, 0 not, -1 not judged); ``noun`` heads the name column (``value``,
    ``query``, ``figure``)."""
    if not top["item"]:
        return CSS + "<span class='ldp-h'>no rows in the current window yet</span>"
    low, high = ("sim. 95% low", "sim. 95% high") if simultaneous else ("95% low", "95% high")
    head = (
        f"<tr><th>rank</th><th class='name'>{shape.html_text(noun)}</th>"
        f"<th>index</th><th>estimate</th><th>{low}</th><th>{high}</th><th "
        "class='name'>vs 0</th></tr>"
    )
    body = []
    for i in range(len(top["item"])):
        above = int(top["above_zero"][i])
        body.append(
            f"<tr class='{'value' if above == 1 else 'noise'}' data-item='{shape.html_text(top['item'][i])}' "
            f"data-above-zero='{above}'>"
            f"<td>{top['rank'][i]}</td><td class='name'>{shape.html_text(str(top['name'][i]))}</td>"
            f"<td>{shape.html_text(top['item'][i])}</td><td class='estimate'>{fmt(top['estimate'][i])}</td>"
            f"<td>{fmt(top['ci_low'][i])}</td><td>{fmt(top['ci_high'][i])}</td>"
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
        CSS + f"<table class='ldp' id='topk-table' data-method='{method}'>{head}{''.join(body)}</table>"
        f"<span class='ldp-h' style='font-size:11px'>method: {method}; {note}</span>"
    )


def numeric_html(
    attribute: str,
    rows: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any] | None,
    partial: bool,
    clipped: bool,
) -> str:
    """The newest window's numeric figures as an HTML table (``id='numeric-table'``, one ``tr`` per stored
    number with ``data-item``, named ``attribute: statistic``; ``data-partial='1'`` on the table while the
    window's pane is EARLY)."""
    name = shape.html_text(attribute)
    if not rows or current is None:
        return CSS + f"<span class='ldp-h'>no numeric rows of {name} yet</span>"
    what = shape.html_text(shape.format_window(int(current["window_start"]), int(current["window_end"])))
    head = (
        f"<b class='ldp-h'>{'PARTIAL (EARLY pane, window still open): ' if partial else ''}"
        f"{name}, window {what}, n_reports {shape.html_text(rows[0].get('n_reports'))}</b>"
    )
    body = "".join(
        f"<tr data-item='{int(r['item'])}'><td class='name'>"
        f"{shape.html_text(shape.numeric_name(attribute, int(r['item']), r.get('label')))}</td>"
        f"<td class='estimate'>{fmt(r.get('estimate'))}</td><td>{fmt(r.get('std'))}</td>"
        f"<td>{fmt(r.get('ci_low'))}</td><td>{fmt(r.get('ci_high'))}</td></tr>"
        for r in sorted(rows, key=lambda r: int(r["item"]))
    )
    more = (
        f"<span class='ldp-h' style='font-size:11px'>the plot draws the first {QUANTILE_SLOTS} "
        "quantiles</span>"
        if clipped
        else ""
    )
    return (
        CSS + head + f"<table class='ldp' id='numeric-table' data-partial='{int(partial)}'>"
        "<tr><th class='name'>figure</th><th>estimate</th><th>std</th><th>95% low</th><th>95% high</th></tr>"
        f"{body}</table>{more}"
    )


# -- windows, counts, latency ---------------------------------------------------------------------------
_WINDOW_COLUMNS = (
    ("window", "window (event time, UTC)", "name"),
    ("n_reports", "n_reports", ""),
    ("pane_index", "latest pane", ""),
    ("timing", "timing", "name"),
    ("final", "final", "name"),
    ("latency_s", "latency of latest pane (s)", ""),
    ("counted", "accepted on arrival (counts window, same bounds)", ""),
    ("last_written", "written (UTC)", "name"),
)


def _window_cell(key: str, value: Any) -> str:
    if key == "latency_s":
        return fmt(value, 2)
    if key == "counted":
        return fmt(value, spec=",.0f")
    return shape.html_text(value)


def windows_html(cols: Mapping[str, list[Any]]) -> str:
    """The windows table (``id='windows-table'``): one ``tr[data-window-start][data-window-end]`` per
    window of :func:`shape.windows_columns`, newest first."""
    if not cols["window"]:
        return CSS + "<span class='ldp-h'>no windows yet</span>"
    head = "".join(f"<th class='{css}'>{title}</th>" for _, title, css in _WINDOW_COLUMNS)
    body = []
    for i in range(len(cols["window"])):
        cells = "".join(
            f"<td class='{css}'>{_window_cell(key, cols[key][i])}</td>" for key, _, css in _WINDOW_COLUMNS
        )
        body.append(
            f"<tr data-window-start='{int(cols['window_start'][i])}' "
            f"data-window-end='{int(cols['window_end'][i])}'>{cells}</tr>"
        )
    return (
        CSS + "<div class='ldp-scroll'><table class='ldp' id='windows-table'>"
        f"<tr>{head}</tr>{''.join(body)}</table></div>"
    )


def reasons_html(cols: Mapping[str, list[Any]]) -> str:
    """The dead-letter reasons (``id='reasons-table'``), one ``tr`` per (window, reason) of
    :func:`shape.reasons_columns`: totals over the shown windows first, then per window."""
    if not cols["reason"]:
        return CSS + "<span class='ldp-h'>no dead letters in the shown counts windows</span>"
    body = "".join(
        f"<tr><td class='name'>{shape.html_text(w)}</td><td class='name'>{shape.html_text(r)}</td>"
        f"<td>{fmt(n, spec=',')}</td></tr>"
        for w, r, n in zip(cols["window"], cols["reason"], cols["count"], strict=True)
    )
    return (
        CSS + "<div class='ldp-scroll'><table class='ldp' id='reasons-table'><tr><th class='name'>counts "
        "window (arrival time, UTC)</th><th class='name'>dead-letter reason</th><th>count</th></tr>"
        f"{body}</table></div>"
    )


def counts_note(comparison: Mapping[str, Any]) -> str:
    """The line under the counts plot (``data-agree`` 1 or 0): how its windows relate to the estimate
    windows (:func:`shape.counts_vs_windows`), and the difference of the totals, named, when there is one."""
    if not comparison["counts_windows"]:
        return ""
    text = (
        "counts windows are cut by arrival time (the job's clock when a batch was counted), estimate "
        "windows by event time"
    )
    if comparison["same_bounds"]:
        text += "; both have the same boundaries"
    else:
        text += (
            f"; counts windows of {comparison['counts_size_s']:g} s, estimate windows of "
            f"{comparison['windows_size_s']:g} s"
        )
    accepted, n_reports = comparison["accepted"], comparison["n_reports"]
    over = (
        f"the {comparison['shared']} window(s) both hold"
        if comparison["same_bounds"]
        else "the shown windows"
    )
    text += f". Over {over}: accepted {accepted:,} (counts), n_reports {n_reports:,} (windows)"

    if accepted != n_reports:
        text += (
            f", a difference of {accepted - n_reports:+,}: a report that arrives after its event-time "
            "window ended is counted in a later counts window, and a window's latest pane may not yet "
            "hold every report counted"
        )
    agree = int(accepted == n_reports and comparison["same_bounds"])
    return f"<span class='ldp-h' data-agree='{agree}' style='font-size:12px'>{shape.html_text(text)}</span>"


def latency_text(summ: Mapping[str, Any], n_same: int, n_back: int, backfill_s: float, batch: bool) -> str:
    """The line under the latency plot: the live panes' figures and what was left out, and why."""
    if batch:
        return (
            "<span class='ldp-h' data-latency='batch'>latency not shown: a batch run (its panes are written "
            "when it processes old reports, so written_ms - window_end is not a live latency)</span>"
        )
    text = (
        "window end to pane in the store, live panes written after their window closed (ON_TIME, LATE): "
        f"n = {fmt(summ['n'], spec=',')}, median {fmt(summ['median_s'], 2)} s, max {fmt(summ['max_s'], 2)} s"
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


# -- privacy --------------------------------------------------------------------------------------------
def _yes_no(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _verified_text(r: Mapping[str, Any]) -> str:
    """``verified / batches`` of a window, with the reason codes of those that did not verify (escaped)."""
    if r.get("batches_verified") is None or r.get("batches") is None:
        return "-"
    text = f"{r['batches_verified']} / {r['batches']}"
    if r.get("unverified"):
        text += " (" + ", ".join(f"{code} {n}" for code, n in r["unverified"].items()) + ")"
    return shape.html_text(text)


def guarantees_html(summary: Mapping[str, Any]) -> str:
    """The central and the local guarantee of each (newest) window and the ``n`` the central one rests on
    (``shape.guarantee_rows``), under one line stating the trust model (``shape.trust_model``); a reason
    shared by every window is said there once, a column of reasons only appears when windows differ;
    "" when the summary has none."""
    rows, older = shape.guarantee_rows(summary)
    if not rows:
        return ""
    model, per_row = shape.trust_model(rows)
    reason_head = "<th class='name'>method (or why no central guarantee)</th>" if per_row else ""
    cells = []
    for r in rows:
        reason = f"<td class='name'>{shape.html_text(r['method'] or r['why'] or '')}</td>" if per_row else ""
        cells.append(
            f"<tr><td class='name'>{shape.html_text(r['window'])}</td><td>{fmt(r['n'], spec=',')}</td>"
            f"<td>{fmt(r['central_epsilon'], 4)}</td><td>{fmt(r['central_delta'], spec='g')}</td>"
            f"<td>{fmt(r['local_epsilon'], 4)}</td><td>{_yes_no(r['through_shuffler'])}</td>"
            f"<td>{_yes_no(r['times_rounded'])}</td><td>{_yes_no(r['no_client_ids'])}</td>"
            f"<td>{_verified_text(r)}</td>{reason}</tr>"
        )
    more = f"<span class='ldp-h'>({older} older window(s) not shown)</span>" if older else ""
    return (
        f"<p class='ldp-headline' id='trust-model'>trust model: {shape.html_text(model)}</p>"
        "<table class='ldp' id='privacy-guarantees'><tr><th class='name'>window</th>"
        "<th>n shuffled together (smallest batch)</th><th>central epsilon (worst batch)</th>"
        "<th>central delta</th><th>local epsilon</th>"
        "<th>through a shuffler</th><th>times rounded</th><th>no client ids</th>"
        f"<th>batches verified (reasons not)</th>{reason_head}</tr>"
        f"{''.join(cells)}</table>{more}"
    )


def plan_check_html(summary: Mapping[str, Any]) -> str:
    """Expected against observed error of each (newest) window (``shape.plan_check_rows``): the plan's
    std at the window's n beside the observed spread, a window far off the plan flagged (the rule is
    stated above the table); "" when the summary has none."""
    rows, older, rule = shape.plan_check_rows(summary)
    if not rows:
        return ""
    cells = "".join(
        f"<tr class='{'flagged' if r['flag'] in ('above plan', 'below plan') else ''}'>"
        f"<td class='name'>{shape.html_text(r['window'])}</td><td>{fmt(r['group'], spec='d')}</td>"
        f"<td>{fmt(r['n'], spec=',')}</td><td>{fmt(r['predicted'], spec='.4g')}</td>"
        f"<td>{fmt(r['observed'], spec='.4g')}</td><td>{fmt(r['ratio'], 3)}</td>"
        f"<td>{fmt(r['negatives'], spec=',')}</td>"
        f"<td class='name'>{shape.html_text(r['flag'] or 'as planned')}</td></tr>"
        for r in rows
    )
    more = f"<span class='ldp-h'>({older} older row(s) not shown)</span>" if older else ""
    return (
        "<p class='ldp-headline' id='plan-rule'>expected vs observed error: "
        f"{shape.html_text(rule or '')}</p>"
        "<table class='ldp' id='plan-check'><tr><th class='name'>window</th><th>group</th><th>n</th>"
        "<th>predicted std (plan)</th><th>observed std</th><th>observed / predicted</th>"
        f"<th>estimates below 0</th><th class='name'>verdict</th></tr>{cells}</table>{more}"
    )


def _spent_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """The privacy loss spent: the guaranteed (worst-case, any history) figures first, then the figures
    for the history named in the row; each row labelled (``data-key``: the summary's key path)."""
    if not rows:
        return ""
    cells = "".join(
        f"<tr data-key='{shape.html_text(r['figure'])}'>"
        f"<td class='name'>{shape.html_text(shape.figure_label(r['figure']))}</td>"
        f"<td>{'-' if r['windows'] is None else shape.html_text(r['windows'])}</td>"
        f"<td class='worst'>{fmt(r['worst_tight'], 4)}</td><td class='worst'>{fmt(r['worst_basic'], 4)}</td>"
        f"<td>{fmt(r['tight'], 4)}</td><td>{fmt(r['basic'], 4)}</td></tr>"
        for r in rows
    )
    return (
        "<table class='ldp' id='budget-spent'><tr><th class='name'>privacy loss spent</th>"
        "<th>reports</th><th class='worst'>guaranteed (any history): tight</th>"
        "<th class='worst'>guaranteed: basic</th><th>this history: tight (accountant)</th>"
        "<th>this history: basic composition</th></tr>"
        f"{cells}</table>"
    )


def _budget_headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line leading with the guaranteed figure of the first row (a budget's ``per_period`` when it has
    one): the worst case over any history where the summary gives it, the row's own figure otherwise."""
    if not rows:
        return ""
    r = rows[0]
    label = shape.html_text(shape.figure_label(r["figure"]))
    if r["worst_tight"] is not None:
        text = (
            f"<b>at most {fmt(r['worst_tight'], 4)}</b> guaranteed ({label}, over any history of values "
            f"and reports); {fmt(r['tight'], 4)} in the best case the summary reports"
        )
    else:
        text = f"<b>at most {fmt(r['tight'], 4)}</b> ({label}; the summary gives no other history)"
    return f"<p class='ldp-headline' id='budget-headline'>privacy loss of a user: {text}</p>"


def budget_html(
    summary: Mapping[str, Any],
    spent: Sequence[Mapping[str, Any]],
    items: Sequence[tuple[str, str]],
    origin: str,
) -> str:
    """The privacy budget and accounting panel: where the figures come from, the headline (the guaranteed
    figure first), the trust model and per-window guarantees, the spent table and, folded, every figure."""
    body = "".join(
        f"<tr data-key='{shape.html_text(k)}'><td class='name'>{shape.html_text(shape.figure_label(k))}</td>"
        f"<td>{shape.html_text(v)}</td></tr>"
        for k, v in items
    )
    return (
        CSS + "<b class='ldp-h'>privacy budget and accounting</b> "
        f"<span class='ldp-h' id='budget-origin'>(from {shape.html_text(origin)})</span>"
        f"{_budget_headline(spent)}{guarantees_html(summary)}{plan_check_html(summary)}{_spent_html(spent)}"
        "<details><summary class='ldp-h'>all figures</summary><table class='ldp' id='budget-table'>"
        f"<tr><th class='name'>figure</th><th>value</th></tr>{body}</table></details>"
    )
