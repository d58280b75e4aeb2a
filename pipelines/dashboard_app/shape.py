"""Pure functions from store rows (``dict``\\ s keyed by the store's column names) to what the page draws.

No Bokeh and no database here, so every rule the page follows has a fast unit test
(tests/test_dashboard.py):

* the *current window* is the one with the latest end (ties: the latest start) among the windows the store
  holds; a batch job's whole-run window is window_start = window_end = 0;
* the top-k is the k largest *published* estimates of that window (ties: the smaller value index first).
  Picking the largest of ``d`` noisy numbers is a selection, so each is drawn with its *simultaneous* 95%
  interval over the whole domain and flagged "above 0" under a multiple-comparison rule over the domain
  (:mod:`ldp.selection`: Bonferroni by default, the rule named in the legend), both from the store's
  unbiased estimate and its std; the flag from the exact p-values of frequency 0 (``p_zero`` in the
  items' ``extra_json``) when every item of the window has one; a value without them is drawn without
  whiskers and is not judged (the store's per-value interval is valid only for a value chosen in
  advance, not for a selected one);
* query answers (the task's own queries, first k by index) keep their own 95% intervals; a numeric
  figure is judged against 0 only when 0 lies inside the attribute's range (:func:`zero_inside`);
* the latency of a pane is ``written_ms - window_end`` (seconds on the page): how long after its window
  closed in event time the pane reached the store; EARLY panes are written before the window ends, so their
  latency is negative;
* series are the current rows of chosen values (or queries) across windows, x = window end;
* every text the dashboard did not write itself (value labels, attribute names, task ids, query texts, run
  ids, dead-letter reasons, methods, summary keys and values) reaches HTML only through :func:`html_text`.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "ABOVE_ZERO",
    "NOISE_CI",
    "NOT_ABOVE_ZERO",
    "NO_CI",
    "NO_ZERO_TEST",
    "PER_VALUE",
    "SIGNAL",
    "flag_text",
    "TIMING_COLORS",
    "answers_columns",
    "backfill_bound_s",
    "effective_panes",
    "freshness",
    "is_partial",
    "late_candidates",
    "pane_key",
    "run_state",
    "split_panes",
    "stale_bound_s",
    "unchanged_panes",
    "window_config",
    "budget_entries",
    "budget_items",
    "composition_pairs",
    "counts_columns",
    "counts_vs_windows",
    "figure_label",
    "numeric_name",
    "trust_model",
    "current_window",
    "domain_size",
    "format_ms",
    "format_window",
    "guarantee_rows",
    "html_text",
    "labels_from_summary",
    "latest_counts",
    "latency_columns",
    "latest_pane_latency",
    "latency_summary",
    "noise_level",
    "noise_text",
    "parse_json",
    "query_text",
    "reasons_columns",
    "series_columns",
    "spent_rows",
    "top_k",
    "value_name",
    "windows_columns",
    "zero_inside",
]

#: Colours of the pane timings (and of panes whose timing is unknown).
TIMING_COLORS = {"EARLY": "#e69f00", "ON_TIME": "#009e73", "LATE": "#d55e00", "UNKNOWN": "#999999"}
#: Bar colours of the top-k: a flagged value (above 0 under the rule), one not flagged, one without interval.
SIGNAL_COLOR = "#1f77b4"
NOISE_COLOR = "#bbbbbb"
NO_CI_COLOR = "#7f9fbf"
#: The top-k's ``noise`` column (also the legend of the top-k plot), followed by the rule in brackets
#: (:func:`flag_text`): the value's true frequency is shown above 0 over the whole domain, or it is not.
ABOVE_ZERO = "above 0"
NOT_ABOVE_ZERO = "not shown above 0"
#: A top-k row without the unbiased estimate in the store: nothing valid after selection can be drawn.
NO_CI = "no interval valid after selection in the store"
#: Query answers (first k by index, not selected by value; numeric figures where 0 lies inside the
#: attribute's range): the per-answer 95% interval excludes 0 / contains 0.
SIGNAL = "95% interval excludes 0"
NOISE_CI = "95% interval includes 0"
#: The sparse top-k's intervals: the rows' own, per coordinate.
PER_VALUE = "per-value, not adjusted for the selection"
#: A numeric figure of an attribute whose range does not hold 0 inside it: no test against 0 is shown.
NO_ZERO_TEST = "0 not inside the range: not tested"

Row = Mapping[str, Any]
Columns = dict[str, list[Any]]

NAN = float("nan")


def html_text(value: Any) -> str:
    """``value`` as text for an HTML context (element content or a quoted attribute): ``& < > " '``
    escaped, so a store's label such as ``<img src=x onerror=...>`` is shown, never parsed. The one
    escaping function of the page: every ``Div`` text and every option of a widget that renders its labels
    as HTML (the series ``MultiChoice``: Choices.js sets ``innerHTML``) goes through it."""
    return html.escape("" if value is None else str(value), quote=True)


def parse_json(text: str | None) -> Any:
    """``json.loads(text)``, or None for a missing or malformed text (a dashboard shows what it can)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _num(value: Any) -> float:
    """A float for the page: None (SQL NULL) becomes NaN, which Bokeh draws as a gap."""
    if value is None:
        return NAN
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN


def labels_from_summary(summary: Mapping[str, Any] | None) -> dict[int, str]:
    """Value labels from a task summary: ``labels`` as a list (index -> name) or an object whose keys are
    value indexes (either way round: ``{"0": "red"}`` or ``{"red": 0}``); ``{}`` when there are none."""
    if not summary:
        return {}
    raw = summary.get("labels")
    if raw is None and isinstance(summary.get("task"), Mapping):
        raw = summary["task"].get("labels")
    out: dict[int, str] = {}
    if isinstance(raw, list):
        for i, name in enumerate(raw):
            if name is not None:
                out[i] = str(name)
    elif isinstance(raw, Mapping):
        for key, val in raw.items():
            if isinstance(key, str) and key.lstrip("-").isdigit():
                out[int(key)] = str(val)
            elif isinstance(val, int) and not isinstance(val, bool):
                out[val] = str(key)
    return out


def value_name(item: int, label: str | None, labels: Mapping[int, str] | None = None) -> str:
    """What the page calls a value: the row's label, else the task's label for it, else ``value N``."""
    if label:
        return str(label)
    if labels and item in labels:
        return labels[item]
    return f"value {item}"


def flag_text(flag: bool | None, rule_text: str) -> str:
    """The ``noise`` column of a top-k value: :data:`ABOVE_ZERO` or :data:`NOT_ABOVE_ZERO` with the rule
    (``above 0 (Bonferroni over d = 1,024 at 5%)``), :data:`NO_CI` when the store has no unbiased estimate."""
    if flag is None:
        return NO_CI
    return f"{ABOVE_ZERO if flag else NOT_ABOVE_ZERO} ({rule_text})"


def _per_value_text(flag: bool | None) -> str:
    if flag is None:
        return "no interval in the store"
    return f"{SIGNAL if flag else NOISE_CI} ({PER_VALUE})"


def noise_text(row: Row) -> str:
    """The ``noise`` column of a query answer: :data:`SIGNAL` when its 95% interval excludes 0,
    :data:`NOISE_CI` when it contains 0, :data:`NO_CI` without an interval."""
    flag = noise_level(row)
    if flag is None:
        return NO_CI
    return NOISE_CI if flag else SIGNAL


def noise_level(row: Row) -> bool | None:
    """Whether a query answer's ``[ci_low, ci_high]`` contains 0; None when it has no interval. (Answers
    are the task's own queries, first k by index, never selected by their values: the per-answer interval
    is the one to judge by.)"""
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if lo is None or hi is None:
        return None
    return float(lo) <= 0.0 <= float(hi)


def domain_size(task_json: str | None) -> int | None:
    """The ``domain_size`` of a stored task (None when it has none or cannot be read)."""
    task = parse_json(task_json)
    d = task.get("domain_size") if isinstance(task, Mapping) else None
    return int(d) if isinstance(d, int) and not isinstance(d, bool) and d > 0 else None


def zero_inside(task_json: str | None, index: int = 0) -> bool:
    """Whether 0 lies strictly inside the range ``[low, high]`` of attribute ``index`` of a stored numeric
    task: only then does "the mean (or a quantile) is not 0" say anything. For an attribute such as a
    latency in [0, 5000] ms every figure is at least 0 by construction, so no test against 0 is shown
    (False also when the task cannot be read)."""
    task = parse_json(task_json)
    try:
        low, high = float(task["attributes"][index]["low"]), float(task["attributes"][index]["high"])
    except (TypeError, KeyError, IndexError, ValueError):
        return False
    return low < 0.0 < high


def _window_key(row: Row) -> tuple[int, int]:
    return (int(row.get("window_end") or 0), int(row.get("window_start") or 0))


def current_window(windows: Iterable[Row]) -> tuple[int, int] | None:
    """``(window_start, window_end)`` of the window with the latest end (ties: latest start), or None."""
    best: tuple[int, int] | None = None
    for row in windows:
        key = _window_key(row)
        if best is None or key > best:
            best = key
    return None if best is None else (best[1], best[0])


def format_ms(ms: int | float | None) -> str:
    """``2026-12-01 09:15:00`` (UTC) for an epoch-millisecond time; ``-`` for None."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    dt = datetime.fromtimestamp(float(ms) / 1000.0, tz=timezone.utc)
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    frac = int(ms) % 1000
    return f"{text}.{frac:03d}" if frac else text


def format_window(start: int, end: int) -> str:
    """``[09:00:00, 09:01:00) UTC`` for a window; ``whole run`` for the global window (0, 0)."""
    if start == 0 and end == 0:
        return "whole run (global window)"
    s, e = format_ms(start), format_ms(end)
    if s[:10] == e[:10]:
        return f"[{s}, {e[11:]}) UTC"
    return f"[{s}, {e}) UTC"


def _domain_view(rows: Sequence[Row], domain_size: int | None, rule: str) -> tuple[dict[int, Any], str]:
    """Per item of one window's rows: ``(sim_low, sim_high, flag)`` over the domain (:mod:`ldp.selection`:
    simultaneous 95% interval of the unbiased estimate, widened to the published one, and the flag under
    ``rule``: from the items' exact ``p_zero`` when each has one, else the normal p-values), None for an
    item without a stored unbiased estimate; and the rule's text. ``domain_size``: the task's ``d`` (the
    store may hold only the largest values); default: the rows' count."""
    import numpy as np

    from ldp import selection

    d = max(int(domain_size or 0), len(rows), 1)
    u = np.array([_num(r.get("unbiased")) for r in rows], dtype=np.float64)
    sd = np.array([_num(r.get("unbiased_std")) for r in rows], dtype=np.float64)
    pub = np.array([_num(r.get("estimate")) for r in rows], dtype=np.float64)
    lo, hi = selection.simultaneous_intervals(u, sd, d, published=pub)
    p_zero = [_p_zero(r) for r in rows]
    if rows and all(p is not None for p in p_zero):
        flag = selection.flag_p_values(np.array(p_zero, dtype=np.float64), d, rule) & (u > 0)
    else:
        flag = selection.discoveries(u, sd, d, rule)
    ok = np.isfinite(u) & np.isfinite(sd)
    out: dict[int, Any] = {}
    for i, r in enumerate(rows):
        out[int(r["item"])] = (float(lo[i]), float(hi[i]), bool(flag[i])) if ok[i] else None
    return out, selection.rule_text(rule, d)


def _p_zero(row: Row) -> float | None:
    """The exact p-value of frequency 0 an item carries in its ``extra_json`` (frequency rows), or None."""
    extra = parse_json(row.get("extra_json"))
    p = extra.get("p_zero") if isinstance(extra, dict) else None
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        return None
    return float(p)


def top_k(
    rows: Iterable[Row],
    k: int,
    labels: Mapping[int, str] | None = None,
    *,
    domain_size: int | None = None,
    rule: str = "bonferroni",
    simultaneous: bool = True,
) -> Columns:
    """The ``k`` largest published estimates among ``rows`` (one window, group and output: every stored
    value of it), as columns: ``item``, ``name`` (unique display name), ``estimate``, ``ci_low``,
    ``ci_high`` (the *simultaneous* 95% interval over the domain, valid after the selection; NaN without a
    stored unbiased estimate: the store's per-value interval is never shown for a selected value),
    ``above_zero`` (1 flagged under ``rule`` over the domain, 0 not, -1 unknown), ``noise``
    (:func:`flag_text`), ``color``, ``std``, ``method``, ``rank`` (1-based), ``window_start`` /
    ``window_end`` / ``pane_index`` (of the row: what the page shows). ``domain_size``: the task's ``d``.
    ``simultaneous`` False (sparse means, whose rows carry no unbiased estimate): the rows' own per-value
    intervals, labelled :data:`PER_VALUE` (not adjusted for the selection)."""
    every = [r for r in rows if not math.isnan(_num(r.get("estimate")))]
    ordered = sorted(every, key=lambda r: (-_num(r.get("estimate")), int(r["item"])))[: max(int(k), 0)]
    view: dict[int, Any] = {}
    rule_name = ""
    if ordered and simultaneous:
        view, rule_name = _domain_view(every, domain_size, rule)
    elif ordered:
        view = _per_value_view(every)
    return _top_k_columns(ordered, view, labels, rule_name, simultaneous)


#: The columns of :func:`top_k`.
_TOP_K_COLUMNS = (
    "rank",
    "item",
    "name",
    "estimate",
    "ci_low",
    "ci_high",
    "above_zero",
    "noise",
    "color",
    "std",
    "method",
    "window_start",
    "window_end",
    "pane_index",
)


def _per_value_view(rows: list[Row]) -> dict[int, Any]:
    """Per item, the row's own interval and whether it excludes 0 (None without an interval)."""
    view: dict[int, Any] = {}
    for r in rows:
        lo, hi = _num(r.get("ci_low")), _num(r.get("ci_high"))
        view[int(r["item"])] = None if lo != lo or hi != hi else (lo, hi, not lo <= 0.0 <= hi)
    return view


def _top_k_columns(
    ordered: list[Row],
    view: Mapping[int, Any],
    labels: Mapping[int, str] | None,
    rule_name: str,
    simultaneous: bool,
) -> Columns:
    """The columns of the selected rows, in order, with their intervals and flags from ``view``."""
    cols: Columns = {key: [] for key in _TOP_K_COLUMNS}
    names = [value_name(int(r["item"]), r.get("label"), labels) for r in ordered]
    for rank, (row, name) in enumerate(zip(ordered, names, strict=True), start=1):
        item = int(row["item"])
        if names.count(name) > 1:
            name = f"{name} (#{item})"
        shown = view.get(item)
        flag = None if shown is None else shown[2]
        cols["rank"].append(rank)
        cols["item"].append(item)
        cols["name"].append(name)
        cols["estimate"].append(_num(row.get("estimate")))
        cols["ci_low"].append(NAN if shown is None else shown[0])
        cols["ci_high"].append(NAN if shown is None else shown[1])
        cols["above_zero"].append(-1 if flag is None else int(flag))
        cols["noise"].append(flag_text(flag, rule_name) if simultaneous else _per_value_text(flag))
        cols["color"].append(NO_CI_COLOR if flag is None else (SIGNAL_COLOR if flag else NOISE_COLOR))
        cols["std"].append(_num(row.get("std")))
        cols["method"].append(str(row.get("method") or ""))
        _row_origin(cols, row)
    return cols


def series_columns(
    rows: Iterable[Row], items: Sequence[int], *, domain_size: int | None = None
) -> dict[int, Columns]:
    """Per chosen item, its rows across windows sorted by window end: ``x`` (window end, ms), ``estimate``,
    ``lower`` / ``upper`` (the 95% interval; NaN where absent), ``timing``, ``final`` (0/1). With
    ``domain_size`` (frequency values, first chosen from the top-k: a selection) the band is the
    simultaneous one over the domain (:mod:`ldp.selection`) from the row's unbiased estimate and std, NaN
    without them; else the row's own interval."""
    from ldp import selection

    z = None if domain_size is None else selection.simultaneous_z(max(int(domain_size), 1))
    wanted = {int(i) for i in items}
    out: dict[int, Columns] = {
        i: {"x": [], "window_start": [], "estimate": [], "lower": [], "upper": [], "timing": [], "final": []}
        for i in items
    }
    for row in sorted(rows, key=_window_key):
        item = int(row["item"])
        if item not in wanted:
            continue
        cols = out[item]
        cols["x"].append(int(row["window_end"]))
        cols["window_start"].append(int(row["window_start"]))
        est = _num(row.get("estimate"))
        cols["estimate"].append(est)
        if z is None:
            cols["lower"].append(_num(row.get("ci_low")))
            cols["upper"].append(_num(row.get("ci_high")))
        else:  # selection.simultaneous_intervals for one value (nan without an unbiased estimate)
            u, sd = _num(row.get("unbiased")), _num(row.get("unbiased_std"))
            cols["lower"].append(min(min(max(u - z * sd, 0.0), 1.0), est) if u == u and sd == sd else NAN)
            cols["upper"].append(max(max(min(u + z * sd, 1.0), 0.0), est) if u == u and sd == sd else NAN)
        cols["timing"].append(str(row.get("pane_timing") or "UNKNOWN"))
        cols["final"].append(int(bool(row.get("is_final"))))
    return out


def windows_columns(
    windows: Iterable[Row],
    latencies: Mapping[tuple[int, int], float] | None = None,
    effective: Mapping[tuple[int, int], Row] | None = None,
) -> Columns:
    """The windows, newest first, for the windows table and the n_reports bars: ``window_start``,
    ``window_end``, ``window`` (text), ``n_reports``, ``pane_index`` (last), ``timing`` (last),
    ``final`` (``final`` / ``open``), ``color`` (by timing), ``line`` (black when final), ``width`` (ms, for
    bars), ``latency_s`` (of the last pane, from ``latencies`` keyed by window). ``effective`` (by window:
    :func:`effective_panes`) names the pane that is the window's state when its last pane changed nothing."""
    cols: Columns = {
        key: []
        for key in (
            "window_start",
            "window_end",
            "x",
            "window",
            "n_reports",
            "pane_index",
            "timing",
            "final",
            "color",
            "line",
            "width",
            "latency_s",
            "last_written",
        )
    }
    for row in sorted(windows, key=_window_key, reverse=True):
        start, end = int(row["window_start"]), int(row["window_end"])
        shown = (effective or {}).get((start, end))
        pane_index = row.get("last_pane_index") if shown is None else shown.get("pane_index")
        timing = row.get("last_pane_timing") if shown is None else shown.get("pane_timing")
        timing = str(timing or "UNKNOWN")
        cols["window_start"].append(start)
        cols["window_end"].append(end)
        cols["x"].append((start + end) / 2.0)
        cols["window"].append(format_window(start, end))
        cols["n_reports"].append(int(row.get("n_reports") or 0))
        cols["pane_index"].append(int(pane_index or 0))
        cols["timing"].append(timing)
        cols["final"].append("final" if row.get("is_final") else "open")
        cols["color"].append(TIMING_COLORS.get(timing, TIMING_COLORS["UNKNOWN"]))
        cols["line"].append("black" if row.get("is_final") else cols["color"][-1])
        cols["width"].append(max(end - start, 1) * 0.9)
        lat = (latencies or {}).get((start, end))
        cols["latency_s"].append(NAN if lat is None else float(lat))
        cols["last_written"].append(format_ms(row.get("last_written_ms")))
    return cols


def latency_columns(panes: Iterable[Row]) -> Columns:
    """One entry per pane: ``x`` (window end, ms), ``latency_s`` (``(written_ms - window_end) / 1000``),
    ``timing``, ``pane_index``, ``color``; the global window (end 0) has no latency and is left out."""
    cols: Columns = {key: [] for key in ("x", "window_start", "latency_s", "timing", "pane_index", "color")}
    for row in sorted(panes, key=lambda r: (*_window_key(r), int(r.get("pane_index") or 0))):
        end = int(row["window_end"])
        if end == 0 and int(row.get("window_start") or 0) == 0:
            continue
        timing = str(row.get("pane_timing") or "UNKNOWN")
        cols["x"].append(end)
        cols["window_start"].append(int(row["window_start"]))
        cols["latency_s"].append((int(row["written_ms"]) - end) / 1000.0)
        cols["timing"].append(timing)
        cols["pane_index"].append(int(row.get("pane_index") or 0))
        cols["color"].append(TIMING_COLORS.get(timing, TIMING_COLORS["UNKNOWN"]))
    return cols


def latest_pane_latency(panes: Iterable[Row]) -> dict[tuple[int, int], float]:
    """Per window ``(start, end)``: the latency in seconds of its latest pane (highest pane index)."""
    best: dict[tuple[int, int], tuple[int, float]] = {}
    for row in panes:
        start, end = int(row["window_start"]), int(row["window_end"])
        if start == 0 and end == 0:
            continue
        idx = int(row.get("pane_index") or 0)
        lat = (int(row["written_ms"]) - end) / 1000.0
        if (start, end) not in best or idx >= best[(start, end)][0]:
            best[(start, end)] = (idx, lat)
    return {key: val for key, (_, val) in best.items()}


def latency_summary(latencies_s: Sequence[float], timings: Sequence[str] | None = None) -> dict[str, Any]:
    """``n``, ``median_s`` and ``max_s`` of the latencies of the panes written after their window closed
    (ON_TIME and LATE; with ``timings`` None, of all given); None figures when there are none."""
    values = [
        float(v)
        for i, v in enumerate(latencies_s)
        if not math.isnan(float(v)) and (timings is None or timings[i] in ("ON_TIME", "LATE"))
    ]
    if not values:
        return {"n": 0, "median_s": None, "max_s": None}
    values.sort()
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0
    return {"n": len(values), "median_s": median, "max_s": values[-1]}


def counts_columns(counts: Iterable[Row], global_span: tuple[int, int] | None = None) -> Columns:
    """Per counts window, oldest first: ``x`` (window middle, ms), ``width``, ``window``, ``read``,
    ``accepted``, ``rejected``, ``late_dropped``, ``lost``, ``dead_letters`` (sum of the reasons). The whole
    run's counts of a batch job (window 0/0) are drawn over ``global_span`` (the estimated windows) when
    given."""
    keys = (
        "x",
        "width",
        "window_start",
        "window_end",
        "window",
        "read",
        "accepted",
        "rejected",
        "late_dropped",
        "lost",
        "dead_letters",
    )
    cols: Columns = {key: [] for key in keys}
    for row in sorted(counts, key=_window_key):
        start, end = int(row["window_start"]), int(row["window_end"])
        reasons = parse_json(row.get("reasons_json"))
        lo, hi = (start, end)
        if start == end == 0 and global_span is not None:
            lo, hi = global_span  # a batch run's counts: drawn across the windows it estimated
        cols["x"].append((lo + hi) / 2.0)
        cols["width"].append(max(hi - lo, 1) * 0.9)
        cols["window_start"].append(start)
        cols["window_end"].append(end)
        cols["window"].append(format_window(start, end))
        for key in ("read", "accepted", "rejected", "late_dropped", "lost"):
            cols[key].append(int(row.get(key) or 0))
        total = sum(int(v) for v in reasons.values()) if isinstance(reasons, Mapping) else 0
        cols["dead_letters"].append(total)
    return cols


def latest_counts(counts: Iterable[Row]) -> list[Row]:
    """One counts row per counts window: a store that keeps counts per run (``ldp_counts.run_id``) may hold
    one per run that counted the window (a rerun, a restart); the newest written is the one shown."""
    best: dict[tuple[int, int], Row] = {}
    for row in counts:
        key = _window_key(row)
        if key not in best or int(row.get("written_ms") or 0) > int(best[key].get("written_ms") or 0):
            best[key] = row
    return sorted(best.values(), key=_window_key, reverse=True)


def reasons_columns(counts: Iterable[Row], max_windows: int = 10) -> Columns:
    """The dead-letter reasons of the newest ``max_windows`` counts windows, one row per (window, reason),
    newest window first, reasons by count; plus one ``all shown windows`` total per reason at the top."""
    cols: Columns = {"window": [], "reason": [], "count": []}
    rows = sorted(counts, key=_window_key, reverse=True)[:max_windows]
    totals: dict[str, int] = {}
    per_window: list[tuple[str, list[tuple[str, int]]]] = []
    for row in rows:
        reasons = parse_json(row.get("reasons_json"))
        if not isinstance(reasons, Mapping) or not reasons:
            continue
        items = sorted(((str(k), int(v)) for k, v in reasons.items()), key=lambda kv: (-kv[1], kv[0]))
        per_window.append((format_window(int(row["window_start"]), int(row["window_end"])), items))
        for reason, n in items:
            totals[reason] = totals.get(reason, 0) + n
    for reason, n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
        cols["window"].append("all shown windows")
        cols["reason"].append(reason)
        cols["count"].append(n)
    for window, items in per_window:
        for reason, n in items:
            cols["window"].append(window)
            cols["reason"].append(reason)
            cols["count"].append(n)
    return cols


def _row_origin(cols: Columns, row: Row) -> None:
    """Appends the row's window and pane (which pane of which window the page shows)."""
    cols["window_start"].append(int(row.get("window_start") or 0))
    cols["window_end"].append(int(row.get("window_end") or 0))
    cols["pane_index"].append(int(row.get("pane_index") or 0))


def answers_columns(
    rows: Iterable[Row], k: int, *, test_zero: bool = True, names: Mapping[int, str] | None = None
) -> Columns:
    """The first ``k`` queries (by query index) of one window of a range or batch task (or a numeric
    task's figures), as the columns of :func:`top_k` with ``name`` the query's text (from ``extra_json``)
    prefixed by its index, or ``names[item]`` when given (a numeric task's ``delay: mean``), and the
    answer's own 95% interval. ``test_zero`` False (a numeric attribute whose range does not hold 0
    inside, :func:`zero_inside`): no answer is judged against 0 (:data:`NO_ZERO_TEST`)."""
    ordered = sorted(rows, key=lambda r: int(r["item"]))[: max(int(k), 0)]
    cols = top_k([], 0)
    for rank, row in enumerate(ordered, start=1):
        item = int(row["item"])
        flag = noise_level(row) if test_zero else None
        cols["rank"].append(rank)
        cols["item"].append(item)
        name = (names or {}).get(item)
        cols["name"].append(name or f"#{item}: {query_text(parse_json(row.get('extra_json')), item)}")
        cols["estimate"].append(_num(row.get("estimate")))
        cols["ci_low"].append(_num(row.get("ci_low")))
        cols["ci_high"].append(_num(row.get("ci_high")))
        cols["above_zero"].append(-1 if flag is None else int(not flag))
        cols["noise"].append(noise_text(row) if test_zero else NO_ZERO_TEST)
        cols["color"].append(NO_CI_COLOR if flag is None else (NOISE_COLOR if flag else SIGNAL_COLOR))
        cols["std"].append(_num(row.get("std")))
        cols["method"].append(str(row.get("method") or ""))
        _row_origin(cols, row)
    return cols


def query_text(extra: Mapping[str, Any] | None, item: int) -> str:
    """A range query's text from a row's ``extra_json`` (``{"query": {"age": [lo, hi], ...}}`` or the query
    object itself): ``age in [20, 29], income in [0, 3]``; ``query N`` when there is none."""
    if not isinstance(extra, Mapping):
        return f"query {item}"
    query = extra.get("query", extra)
    if isinstance(query, Mapping) and query:
        parts = []
        for attr, rng in query.items():
            if isinstance(rng, Sequence) and not isinstance(rng, str) and len(rng) == 2:
                parts.append(f"{attr} in [{rng[0]}, {rng[1]}]")
            else:
                parts.append(f"{attr}: {rng}")
        return ", ".join(parts)
    if isinstance(query, str) and query:
        return query
    return f"query {item}"


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        for key, val in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), val, out)
    elif isinstance(value, float):
        out.append((prefix, f"{value:.6g}"))
    elif isinstance(value, list) and len(value) > 8:
        out.append((prefix, f"[{len(value)} values]"))
    else:
        out.append((prefix, json.dumps(value) if not isinstance(value, str) else value))


#: Summary keys (any depth, case-insensitive substrings) that hold privacy budget or accounting figures.
BUDGET_WORDS = ("budget", "accounting", "accountant", "composition", "epsilon_spent", "privacy_loss")


def budget_entries(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The budget and accounting entries of a task summary, wherever the job put them: top-level keys
    naming a budget, an accounting or a composition (:data:`BUDGET_WORDS`), and the same keys of the job's
    run summary (``summary["run"]``, written when a job ends; ``run.budget`` there)."""
    out: dict[str, Any] = {}
    if not isinstance(summary, Mapping):
        return out
    run = summary.get("run")
    for prefix, source in (("", summary), ("run.", run if isinstance(run, Mapping) else {})):
        for key, val in source.items():
            if any(word in str(key).lower() for word in BUDGET_WORDS):
                out[f"{prefix}{key}"] = val
    return out


#: The figure sets of ``ldp.task.budget_summary`` in the order the budget panel lists them.
FIGURE_SETS = ("per_period", "after_windows", "lifetime")


def spent_rows(entries: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The privacy loss a user has spent, one row per ``{"basic": x, "tight": y}`` pair in ``entries``
    (:func:`budget_entries`), the figure sets of a budget first (``per_period``, ``after_windows``,
    ``lifetime``): ``figure`` (key path), ``windows`` (reports behind it, when given), ``basic``,
    ``tight``, and beside them the worst case over any history of values and report pattern
    (``any_history``: ``worst_basic``, ``worst_tight``; None when the entry has none). A pair's own
    ``any_history`` is shown beside it, not again as a row of its own."""
    rows: list[dict[str, Any]] = []

    def walk(path: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            return
        basic, tight = value.get("basic"), value.get("tight")
        worst = value.get("any_history")
        has_worst = (
            isinstance(worst, Mapping) and _is_number(worst.get("basic")) and _is_number(worst.get("tight"))
        )
        if _is_number(basic) and _is_number(tight):
            windows = value.get("windows")
            rows.append(
                {
                    "figure": path,
                    "windows": int(windows) if _is_number(windows) else None,
                    "basic": float(basic),
                    "tight": float(tight),
                    "worst_basic": float(worst["basic"]) if has_worst else None,
                    "worst_tight": float(worst["tight"]) if has_worst else None,
                }
            )
        for key, val in value.items():
            if key == "any_history" and has_worst and _is_number(basic) and _is_number(tight):
                continue
            walk(f"{path}.{key}", val)

    for key, val in entries.items():
        if isinstance(val, Mapping):
            for name in FIGURE_SETS:  # a budget's figure sets first, in this order
                walk(f"{key}.{name}", val.get(name))
            rest = {k: v for k, v in val.items() if k not in FIGURE_SETS}
            walk(str(key), rest)
    return rows


def composition_pairs(summary: Mapping[str, Any] | None) -> list[tuple[str, float, float]]:
    """Every ``{"basic": x, "tight": y}`` pair (numbers) inside the summary's budget and accounting entries,
    as ``(key.path, basic, tight)``, in the summary's order: basic composition next to the tight figure
    (``"spent"`` names a pair at the top of an entry)."""
    out: list[tuple[str, float, float]] = []

    def walk(path: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            return
        basic, tight = value.get("basic"), value.get("tight")
        if _is_number(basic) and _is_number(tight):
            out.append((path, float(basic), float(tight)))
        for key, val in value.items():
            walk(f"{path}.{key}", val)

    for key, val in (summary or {}).items():
        if any(word in str(key).lower() for word in BUDGET_WORDS):
            walk(str(key), val)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def guarantee_rows(summary: Mapping[str, Any] | None, limit: int = 12) -> tuple[list[dict[str, Any]], int]:
    """The per-window privacy guarantees of a summary's ``privacy_accounting`` entry (the job's, top level
    or in its run summary ``run``; ``pipelines.window_privacy``): the newest ``limit`` windows, newest
    first, each ``window`` (start - end), ``n`` (its smallest batch: a user hides only among its own
    batch, and the window's ``central_epsilon`` is the worst of its batches'), ``central_delta``,
    ``method``, ``local_epsilon``, ``through_shuffler``, ``times_rounded``, ``no_client_ids``,
    ``batches`` and ``batches_verified`` (provenance tags that verified), ``unverified`` (reason code ->
    batches) and ``why`` (None when a central guarantee is shown); and how many older windows were left
    out. ``([], 0)`` without the entry."""
    if not isinstance(summary, Mapping):
        return [], 0
    entry = summary.get("privacy_accounting")
    run = summary.get("run")
    if not isinstance(entry, Mapping) and isinstance(run, Mapping):
        entry = run.get("privacy_accounting")
    windows = entry.get("windows") if isinstance(entry, Mapping) else None
    if not isinstance(windows, list):
        return [], 0
    rows: list[dict[str, Any]] = []
    for w in windows:
        if not isinstance(w, Mapping):
            continue
        pre = w.get("preconditions") if isinstance(w.get("preconditions"), Mapping) else {}
        start, end = w.get("window_start"), w.get("window_end")
        rows.append(
            {
                "window": "global" if start is None and end is None else f"{start} - {end}",
                "sort": str(start or ""),
                "n": int(w["n"]) if _is_number(w.get("n")) else None,
                "central_epsilon": _float_or_none(w.get("central_epsilon")),
                "central_delta": _float_or_none(w.get("central_delta")),
                "method": w.get("method"),
                "local_epsilon": _float_or_none(w.get("local_epsilon")),
                "through_shuffler": pre.get("through_shuffler"),
                "times_rounded": pre.get("times_rounded"),
                "no_client_ids": pre.get("no_client_ids"),
                "batches": int(w["batches"]) if _is_number(w.get("batches")) else None,
                "batches_verified": _verified_batches(w),
                "unverified": _unverified_reasons(w),
                "why": w.get("why_no_central"),
            }
        )
    rows.sort(key=lambda r: r["sort"], reverse=True)
    for r in rows:
        del r["sort"]
    return rows[:limit], max(0, len(rows) - limit)


def plan_check_rows(summary: Mapping[str, Any] | None,
                    limit: int = 12) -> tuple[list[dict[str, Any]], int, str | None]:
    """Expected against observed error (the summary's ``expected_vs_observed``, top level or in its run
    summary ``run``; :func:`ldp.plan.expected_vs_observed`): the newest ``limit`` rows (latest pane of
    each window and group), newest first, each ``window``, ``group``, ``n``, ``predicted``, ``observed``,
    ``ratio``, ``negatives`` and ``flag`` (None, ``above plan``, ``below plan`` or ``not judged``); how
    many older rows were left out; and the rule. ``([], 0, None)`` without the entry."""
    entry = summary.get("expected_vs_observed") if isinstance(summary, Mapping) else None
    run = summary.get("run") if isinstance(summary, Mapping) else None
    if not isinstance(entry, Mapping) and isinstance(run, Mapping):
        entry = run.get("expected_vs_observed")
    windows = entry.get("windows") if isinstance(entry, Mapping) else None
    if not isinstance(windows, list):
        return [], 0, None
    latest: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}
    for w in windows:
        if isinstance(w, Mapping):
            key = (w.get("window_start"), w.get("window_end"), w.get("group"))
            if key not in latest or (w.get("pane_index") or 0) >= (latest[key].get("pane_index") or 0):
                latest[key] = w
    rows = []
    for (start, end, group), w in latest.items():
        rows.append({
            "window": "global" if start is None and end is None else f"{start} - {end}",
            "sort": str(start or ""), "group": group,
            "n": int(w["n_reports"]) if _is_number(w.get("n_reports")) else None,
            "predicted": _float_or_none(w.get("predicted_std")),
            "observed": _float_or_none(w.get("observed_std")),
            "ratio": _float_or_none(w.get("ratio")),
            "negatives": int(w["negatives"]) if _is_number(w.get("negatives")) else None,
            "flag": w.get("flag") if w.get("judged") else "not judged",
        })
    rows.sort(key=lambda r: (r["sort"], -(r["group"] or 0)), reverse=True)
    for r in rows:
        del r["sort"]
    rule = entry.get("rule") if isinstance(entry, Mapping) else None
    return rows[:limit], max(0, len(rows) - limit), rule if isinstance(rule, str) else None


def _batch_list(w: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    batches = w.get("per_batch")
    return [b for b in batches if isinstance(b, Mapping)] if isinstance(batches, list) else []


def _verified_batches(w: Mapping[str, Any]) -> int | None:
    """How many of a window's batches verified (None: the summary lists no batches)."""
    batches = _batch_list(w)
    return sum(b.get("verified") is True for b in batches) if batches else None


def _unverified_reasons(w: Mapping[str, Any]) -> dict[str, int]:
    """Reason code -> how many of a window's batches did not verify for it."""
    out: dict[str, int] = {}
    for b in _batch_list(w):
        if b.get("verified") is not True:
            code = str(b.get("provenance") or "unverified")
            out[code] = out.get(code, 0) + 1
    return dict(sorted(out.items()))


def _float_or_none(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def budget_items(summary: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The privacy budget and accounting figures of a task summary, flattened to ``(key.path, text)``
    pairs: every top-level entry whose key names a budget, an accounting or a composition (the
    longitudinal accounting puts e.g. basic and tight composition figures there); ``[]`` when the summary
    has none."""
    if not summary:
        return []
    out: list[tuple[str, str]] = []
    for key, val in summary.items():
        if any(word in str(key).lower() for word in BUDGET_WORDS):
            _flatten(str(key), val, out)
    return out


# -- telling the truth: stale data, late panes that changed nothing, backfills, partial windows --------
#: A pane's identity: ``(output, grp, window_start, window_end, pane_index)``.
PaneKey = tuple[str, int, int, int, int]
#: The stale bound when the task's window size is unknown (or the window is global), seconds.
DEFAULT_STALE_S = 120.0
#: Beyond the window size plus the allowed lateness, this much more delay marks a pane as a backfill's.
BACKFILL_SLACK_S = 600.0


def pane_key(row: Row) -> PaneKey:
    return (
        str(row.get("output") or ""),
        int(row.get("grp") or 0),
        int(row.get("window_start") or 0),
        int(row.get("window_end") or 0),
        int(row.get("pane_index") or 0),
    )


def window_config(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task's window config from its summary (``window``; else the run summary's), ``{}`` if none."""
    if not isinstance(summary, Mapping):
        return {}
    for source in (summary, summary.get("run")):
        if isinstance(source, Mapping) and isinstance(source.get("window"), Mapping):
            return dict(source["window"])
    return {}


def run_state(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The job's run summary (``summary["run"]``, written when the job ended: ``state``, ``streaming``,
    ``run_id`` ...) or None while the job runs (or for a store written without one)."""
    run = summary.get("run") if isinstance(summary, Mapping) else None
    return dict(run) if isinstance(run, Mapping) else None


def stale_bound_s(summary: Mapping[str, Any] | None, override_s: float | None = None) -> float:
    """How old the newest pane may be before the page calls its data stale: ``override_s`` when given, else
    twice the window size (a streaming job writes a pane per window that has reports) plus its allowed
    lateness plus 30 s, else :data:`DEFAULT_STALE_S`."""
    if override_s is not None:
        return float(override_s)
    win = window_config(summary)
    size = win.get("size_s")
    if not _is_number(size) or float(size) <= 0:
        return DEFAULT_STALE_S
    lateness = win.get("allowed_lateness_s")
    return 2.0 * float(size) + (float(lateness) if _is_number(lateness) else 0.0) + 30.0


def _age_text(seconds: float) -> str:
    if seconds < 120:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} days"


#: A live run whose heartbeat is older than this is presumed dead (``store.STALE_RUN_S``).
RUN_STALE_S = 90.0


def freshness(
    newest_ms: int | None,
    now_ms: int,
    bound_s: float,
    run: Mapping[str, Any] | None = None,
    latest_run: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """``(state, text)`` of the freshness line: how long ago the newest pane was written (by the job's
    clock against the page server's: the same machine, or synchronised clocks) and, when the store records
    runs (``latest_run``: the task's latest ``ldp_runs`` row), the run and its heartbeat.

    States: ``none`` (no pane yet, no run), ``fresh``, ``stale`` (the newest pane is older than
    ``bound_s`` while the job should be writing, or a live run's heartbeat is older than
    :data:`RUN_STALE_S`, or the run is ``dead``), ``ended`` (the run ended, or the task's run summary
    ``run`` says the job ended: its final numbers), ``failed`` (the run failed)."""
    now = int(now_ms)
    pane = None if newest_ms is None else f"newest pane {_age_text((now - int(newest_ms)) / 1000.0)} ago"
    if newest_ms is not None:
        pane += f" ({format_ms(newest_ms)} UTC)"
    pane_age = None if newest_ms is None else (now - int(newest_ms)) / 1000.0
    if latest_run is not None:
        rid = str(latest_run.get("run_id") or "?")
        status = str(latest_run.get("status") or "?")
        beat = latest_run.get("heartbeat_ms")
        beat_age = None if beat is None else (now - int(beat)) / 1000.0
        what = pane or "no pane written yet"
        if status == "failed":
            error = latest_run.get("error")
            return "failed", f"{what}; run {rid} FAILED" + (f": {error}" if error else "")
        if status == "ended":
            return "ended", f"{what}; run {rid} ended: these are its final numbers"
        if status == "dead" or (beat_age is not None and beat_age > RUN_STALE_S):
            beat_text = "" if beat_age is None else f", its last heartbeat {_age_text(beat_age)} ago"
            return "stale", f"STALE: {what}; run {rid} is not alive{beat_text}: the job may have died"
        alive = f"run {rid} live" + ("" if beat_age is None else f" (heartbeat {_age_text(beat_age)} ago)")
        if pane_age is not None and pane_age > bound_s:
            return (
                "stale",
                f"STALE: {pane}, more than the {bound_s:g} s bound, while {alive}: no reports arriving?",
            )
        return "fresh", f"{what}; {alive}"
    if pane is None:
        return "none", "no pane written yet"
    if run is not None and run.get("state"):
        return "ended", f"{pane}; the job ended ({run['state']}): these are its final numbers"
    if pane_age is not None and pane_age > bound_s:
        return (
            "stale",
            f"STALE: {pane}, more than the {bound_s:g} s bound: the job may have stopped or have no input",
        )
    return "fresh", pane


def late_candidates(panes: Iterable[Row]) -> list[tuple[PaneKey, PaneKey]]:
    """``(late pane, previous pane)`` keys of every LATE pane with as many reports as the pane before it
    (same window, output and group): the panes that may have changed nothing."""
    by_slot: dict[tuple[str, int, int, int], list[Row]] = {}
    for row in panes:
        by_slot.setdefault(pane_key(row)[:4], []).append(row)
    out = []
    for rows in by_slot.values():
        rows.sort(key=lambda r: int(r.get("pane_index") or 0))
        for prev, row in zip(rows, rows[1:]):
            if str(row.get("pane_timing")) != "LATE":
                continue
            if row.get("n_reports") is not None and row.get("n_reports") == prev.get("n_reports"):
                out.append((pane_key(row), pane_key(prev)))
    return out


def unchanged_panes(
    candidates: Iterable[tuple[PaneKey, PaneKey]],
    numbers: Mapping[PaneKey, Sequence[Any]],
    accumulating: bool,
) -> set[PaneKey]:
    """The LATE panes among ``candidates`` (:func:`late_candidates`) that changed nothing: their stored
    numbers (``numbers``: the store's per-pane history rows) equal the previous pane's; when the store
    kept no history of either, an accumulating window's pane with the same report count (the same
    reports) counts as unchanged, a discarding window's does not (its reports are new ones)."""
    out: set[PaneKey] = set()
    for late, prev in candidates:
        a, b = numbers.get(late), numbers.get(prev)
        if a and b:
            if list(a) == list(b):
                out.add(late)
        elif accumulating:
            out.add(late)
    return out


def backfill_bound_s(summary: Mapping[str, Any] | None) -> float:
    """A pane written more than this long after its window's end is a backfill's (event times far older
    than processing times): a live job drops reports later than the allowed lateness, so window size plus
    allowed lateness plus :data:`BACKFILL_SLACK_S`."""
    win = window_config(summary)
    size, lateness = win.get("size_s"), win.get("allowed_lateness_s")
    return (
        (float(size) if _is_number(size) else 0.0)
        + (float(lateness) if _is_number(lateness) else 0.0)
        + BACKFILL_SLACK_S
    )


def split_panes(
    panes: Iterable[Row], unchanged: set[PaneKey], backfill_s: float, batch: bool = False
) -> tuple[list[Row], list[Row], list[Row]]:
    """``(live, no_change, backfill)``: the panes whose latency is a live job's (drawn and summarised),
    the LATE panes that changed nothing (:func:`unchanged_panes`), and a backfill's panes (written more
    than ``backfill_s`` after their window ended, or every pane of a batch run, ``batch``). The global
    window has no latency and is in none."""
    live: list[Row] = []
    same: list[Row] = []
    back: list[Row] = []
    for row in panes:
        start, end = int(row.get("window_start") or 0), int(row.get("window_end") or 0)
        if start == 0 and end == 0:
            continue
        if pane_key(row) in unchanged:
            same.append(row)
        elif batch or (int(row["written_ms"]) - end) / 1000.0 > backfill_s:
            back.append(row)
        else:
            live.append(row)
    return live, same, back


def effective_panes(panes: Iterable[Row], unchanged: set[PaneKey]) -> dict[tuple[int, int], Row]:
    """Per window ``(start, end)``: its latest pane that changed something (a LATE pane that changed
    nothing is not the window's state: the pane before it is)."""
    best: dict[tuple[int, int], Row] = {}
    for row in panes:
        if pane_key(row) in unchanged:
            continue
        key = (int(row["window_start"]), int(row["window_end"]))
        if key not in best or int(row.get("pane_index") or 0) >= int(best[key].get("pane_index") or 0):
            best[key] = row
    return best


def is_partial(timing: str | None, is_final: Any) -> bool:
    """Whether a window's shown numbers are partial: its latest pane is EARLY (the window is still open in
    event time; more reports will come) and the store has not marked it final."""
    return str(timing) == "EARLY" and not is_final


def numeric_columns(rows: Iterable[Row], items: Sequence[int]) -> dict[int, Columns]:
    """:func:`series_columns` of a numeric task's rows (output ``numeric``: item 0 the mean, item ``1 + i``
    quantile ``i``), plus ``partial`` (1 where the window's shown pane is EARLY and not final)."""
    out = series_columns(rows, items)
    for cols in out.values():
        cols["partial"] = [int(is_partial(t, f)) for t, f in zip(cols["timing"], cols["final"], strict=True)]
    return out


def numeric_attribute(task_json: str | None, index: int = 0) -> str:
    """The name of attribute ``index`` of a stored numeric task (``attributes[index].name``; the store files
    attribute ``i``'s rows under group ``i``), ``value`` when unreadable."""
    task = parse_json(task_json)
    try:
        name = task["attributes"][index]["name"]
    except (TypeError, KeyError, IndexError):
        return "value"
    return str(name)


def numeric_name(attribute: str, item: int, label: str | None) -> str:
    """The name of a numeric task's stored figure: ``attribute: statistic`` (``delay: mean``,
    ``delay: q0.9``), from the row's label (the job's ``mean`` / ``q0.9``); ``quantile N`` for an
    unlabelled item other than 0."""
    stat = str(label) if label else ("mean" if int(item) == 0 else f"quantile {int(item)}")
    return f"{attribute}: {stat}"


#: Human names of the keys of a budget summary (``ldp.task.budget_summary``; the job's run summary).
FIGURE_WORDS = {
    "budget": "budget",
    "accounting": "accounting",
    "policy": "policy",
    "guarantees": "guarantees",
    "per_period": "per period",
    "after_windows": "after the windows so far",
    "lifetime": "lifetime",
    "constant_value": "if the value never changes",
    "changing_values": "if the value changes at every report",
    "any_history": "any history (worst case)",
    "fresh_equivalent": "as if every report were fresh",
    "reports_allowed": "reports allowed",
    "epsilon_per_report": "epsilon per report",
    "reports_per_period": "reports per period",
    "period_s": "period (s)",
    "total_epsilon": "total epsilon",
    "enforced_by": "enforced by",
    "client_ids": "client ids",
    "max_memo_keys": "memoized keys at most",
    "epsilon_1": "epsilon of one report",
    "epsilon_inf": "epsilon of a memoized value",
    "epsilon_inf_any_changes": "epsilon over any changes",
    "epsilon_instantaneous": "epsilon of one instantaneous report",
    "basic": "basic composition",
    "tight": "tight (accountant)",
    "windows": "reports",
}


def figure_label(path: str) -> str:
    """A budget figure's key path as a label: ``run.budget.per_period.changing_values`` ->
    ``budget · per period · if the value changes at every report``. The run summary's ``run.`` prefix is
    dropped; a key without a name of its own is shown as the summary wrote it (consecutive such parts
    joined by ``.`` again, so a key holding a dot is not split)."""
    parts = str(path).split(".")
    if len(parts) > 1 and parts[0] == "run":
        parts = parts[1:]
    words: list[str] = []
    verbatim = False
    for part in parts:
        if part in FIGURE_WORDS:
            words.append(FIGURE_WORDS[part])
            verbatim = False
        elif verbatim:
            words[-1] += "." + part
        else:
            words.append(part)
            verbatim = True
    return " · ".join(words)


def trust_model(rows: Sequence[Mapping[str, Any]]) -> tuple[str, bool]:
    """One sentence stating the trust model of the windows of :func:`guarantee_rows`, and whether the
    windows differ (then the table keeps a column with each window's method or reason)."""
    central = [r for r in rows if r.get("central_epsilon") is not None]
    whys = {str(r.get("why") or "") for r in rows if r.get("central_epsilon") is None}
    methods = {str(r.get("method") or "") for r in central}
    if not central and len(whys) == 1:
        why = next(iter(whys))
        return "local differential privacy only, no central guarantee" + (f": {why}" if why else ""), False
    if len(central) == len(rows) and len(methods) == 1:
        method = next(iter(methods))
        return (
            "shuffled: each window has a central guarantee, resting on its smallest batch"
            + (f" ({method})" if method else ""),
            False,
        )
    return (
        f"mixed: {len(central)} window(s) with a central guarantee (shuffled), {len(rows) - len(central)} "
        "without; the last column says why",
        True,
    )


def counts_vs_windows(counts: Mapping[str, list[Any]], windows: Mapping[str, list[Any]]) -> dict[str, Any]:
    """How the counts panel (:func:`counts_columns`, cut by arrival time) relates to the windows
    (:func:`windows_columns`, by event time): ``counts_windows`` (how many), ``counts_size_s`` /
    ``windows_size_s`` (the most common length), ``same_bounds`` (same length and alignment, so a counts
    window and an estimate window with the same start cover the same span of clock time),
    ``accepted_by_window`` (the counts' accepted for each estimate window with the same bounds), and
    ``accepted`` / ``n_reports`` summed over the ``shared`` windows both hold (with other bounds: over
    every shown window of each)."""
    c_keys = [(int(s), int(e)) for s, e in zip(counts["window_start"], counts["window_end"], strict=True)]
    w_keys = [(int(s), int(e)) for s, e in zip(windows["window_start"], windows["window_end"], strict=True)]

    def size_ms(keys: list[tuple[int, int]]) -> int:
        sizes = [e - s for s, e in keys if e > s]
        return max(set(sizes), key=sizes.count) if sizes else 0

    c_size, w_size = size_ms(c_keys), size_ms(w_keys)
    same = bool(c_size) and c_size == w_size and len({s % c_size for s, _ in c_keys + w_keys}) == 1
    accepted = dict(zip(c_keys, (int(a) for a in counts["accepted"]), strict=True))
    n_reports = dict(zip(w_keys, (int(n) for n in windows["n_reports"]), strict=True))
    shared = [k for k in w_keys if k in accepted] if same else []
    return {
        "counts_windows": len(c_keys),
        "same_bounds": same,
        "counts_size_s": c_size / 1000.0,
        "windows_size_s": w_size / 1000.0,
        "accepted_by_window": {k: accepted[k] for k in shared},
        "shared": len(shared) if same else len(c_keys),
        "accepted": sum(accepted[k] for k in shared) if same else sum(accepted.values()),
        "n_reports": sum(n_reports[k] for k in shared) if same else sum(n_reports.values()),
    }
