"""Prints a job's results from its output directory as a terminal table: ``ldp-beam show OUT/``.

    python -m pipelines.show OUT/ [--top K] [--window latest|all|START] [--flag_rule bonferroni|bh] [--json]

Reads the JSON Lines result rows a job wrote (``OUT/estimates-*.jsonl``: frequency and sparse tasks;
``OUT/answers-*.jsonl``: range and batch-query tasks; docs/architecture.md, sections 3-4) and the job's
counts (``OUT/counts.json``, or a streaming job's ``OUT/counts/counts-*.jsonl`` summed), and prints, for
the newest window (or the one chosen): per group (frequency, sparse) or for the task's queries (range,
batch) the window, the pane (timing, index, final or not), the number of reports, and a table of the
top-K values (frequency: largest estimates; sparse: largest means) or the first K query answers, each with
its estimate, std and a 95% interval; then read / accepted / rejected with the top rejection reasons.
``--json`` prints the same selection as one JSON object. The frequency top-K is a selection by the
estimates, so its intervals are simultaneous over the whole domain (valid whichever values are shown)
and its ``> 0`` flags follow a stated multiple-comparison rule (``--flag_rule``, :mod:`ldp.selection`);
the other tables show the row's own interval (``ci_low``, ``ci_high``).

What is kind-specific (which fields make a row of the kind, its tables and their columns) is the kind's
show piece, a :class:`ShowSpec` registered here by kind name (:func:`register_show`; the built-in kinds'
are :mod:`pipelines.show_kinds`). A registered kind (``ldp.kinds``) without one is printed generically:
per window, the latest pane's rows, each as a table of its fields in its row class's order
(:func:`generic_spec`). This module loads, selects windows and panes, sums counts and escapes text for
every kind. It never imports Apache Beam (the registry imports the task model, hence numpy, when the
rows are read; ``--help`` imports neither). Every string taken from
the files (labels, attribute names, task ids) is printed with control and format characters escaped, so
a label cannot move the cursor or change the terminal's colours. Errors (not a job's output directory, no
result rows, an unknown window, a malformed row) are one line with exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import sys
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pipelines.cli import OUTPUT_MARKER, fail, job_parser, parse_job_args

__all__ = [
    "ShowSpec",
    "TableText",
    "collect",
    "display_width",
    "format_table",
    "render",
    "run",
    "safe_text",
    "show_spec",
    "show_specs",
    "generic_spec",
    "register_show",
    "unregister_show",
]

#: Result files of every job, by the prefix of its output rows (``OutputSpec.prefix``, subdir ``""``).
RESULT_PREFIXES = ("estimates", "answers")
#: Commands (``simulate.py``, ``ldp-beam simulate``) whose output directories hold reports, not results.
REPORT_WRITERS = ("simulate", "simulate_range", "shuffle", "clients")
#: Rejection reasons listed by name; the rest are summed as "N more".
TOP_REASONS = 5
#: Longest label or query text shown in a table cell (``--json`` keeps it whole).
MAX_CELL_CHARS = 40
#: ``--flag_rule`` choices: ``ldp.selection.RULES`` (spelt out so ``--help`` imports no numpy; a test
#: keeps them equal).
FLAG_RULES = ("bonferroni", "bh")
DEFAULT_FLAG_RULE = "bonferroni"

_ESCAPED_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def safe_text(value: object, limit: int | None = None) -> str:
    """``value`` as text that cannot drive a terminal: control, format (bidirectional overrides,
    zero-width), surrogate, private-use, unassigned and line/paragraph-separator characters become
    ``\\xNN`` / ``\\uNNNN`` escapes, and backslashes are doubled so an escape cannot be forged. ``limit``:
    at most that many characters of the result, ending in an ellipsis when cut (never inside an escape)."""
    out: list[str] = []
    for ch in str(value):
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in _ESCAPED_CATEGORIES:
            code = ord(ch)
            if code < 0x100:
                out.append(f"\\x{code:02x}")
            else:
                out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    if limit is not None and sum(map(len, out)) > limit:
        kept, used = [], 0
        for piece in out:  # cut between characters, never inside an escape
            if used + len(piece) > limit - 1:
                break
            kept.append(piece)
            used += len(piece)
        out = [*kept, "\u2026"]
    return "".join(out)


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: wide (East Asian) characters two, combining marks none."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Plain-text lines of an aligned table: the header, a rule, then the rows; column ``i`` is
    right-aligned when ``right[i]``. The cells must already be safe text (:func:`safe_text`)."""
    widths = [display_width(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], display_width(cell))

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            pad = " " * (widths[i] - display_width(cell))
            parts.append(pad + cell if right[i] else cell + pad)
        return "  ".join(parts).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


# ------------------------------------------------------------------------------------------------ reading


class ShowError(Exception):
    """A problem with the output directory or the choice of window: one line, exit status 2."""


#: The text of one table: header, cells, which columns are right-aligned, and the line above it.
TableText = tuple[list[str], list[list[str]], list[bool], str]

#: Fields every result row has (the pane header's), with their JSON types.
_COMMON: dict[str, tuple[type, ...]] = {"pane_index": (int,), "pane_timing": (str,)}


@dataclasses.dataclass(frozen=True)
class ShowSpec:
    """How ``show`` reads and prints the result rows of one kind: the kind's show piece, registered by its
    name (:func:`register_show`; the built-in ones are in :mod:`pipelines.show_kinds`).

    Attributes:
        fields: fields every row of the kind must have, with their JSON types (``type(None)`` where the
            schema is nullable).
        matches: ``(row) -> bool``: the row is one of this kind's, by its fields (the first registered kind
            that matches is taken, unless ``OUT/counts.json`` names the kind).
        tables: ``(rows of one window, top, batch) -> [table]``; a table is a dict with ``group`` (or None),
            the pane (:func:`pane_of`), ``n_reports``, ``about`` (shown as ``key value, ...``), ``shown``,
            ``of``, ``rows`` and optionally ``held``, ``mixed_panes``, ``empty_groups``; ``batch``: the job
            ran in batch mode (one pane per window).
        text: ``(table) -> (header, cells, right, what)``: the table's cells (safe text) and the line above.
        check: ``(row) -> None``, raising ``KeyError(reason)`` for a row that cannot be shown (beyond
            ``fields``).
    """

    fields: Mapping[str, tuple[type, ...]]
    matches: Callable[[dict[str, Any]], bool]
    tables: Callable[[Sequence[dict[str, Any]], int, bool], list[dict[str, Any]]]
    text: Callable[[dict[str, Any]], TableText]
    check: Callable[[dict[str, Any]], None] | None = None
    #: keyword options ``tables`` takes beyond ``(rows, top, batch)``: ``"rule"`` (the multiple-comparison
    #: rule of a view that selects values by their estimates, ``--flag_rule``)
    options: frozenset[str] = frozenset()


#: The show pieces registered by kind name (:func:`register_show`); a registered kind without one is
#: printed by :func:`generic_spec`.
SHOW_SPECS: dict[str, ShowSpec] = {}


def register_show(kind: str, spec: ShowSpec, *, replace: bool = False) -> None:
    """Registers the richer printer of kind ``kind`` (ValueError: one is registered and not ``replace``)."""
    if kind in SHOW_SPECS and not replace and SHOW_SPECS[kind] is not spec:
        raise ValueError(f"a show piece for the {kind!r} kind is registered")
    SHOW_SPECS[kind] = spec


def unregister_show(kind: str) -> None:
    """Removes the show piece of ``kind`` (its rows are then printed generically)."""
    SHOW_SPECS.pop(kind, None)


def show_specs() -> dict[str, ShowSpec]:
    """Each registered kind's :class:`ShowSpec`, in registration order: its registered show piece, else
    :func:`generic_spec`."""
    from ldp import kinds
    from pipelines import show_kinds  # noqa: F401  (registers the built-in kinds' pieces)

    return {name: SHOW_SPECS.get(name) or generic_spec(k) for name, k in kinds.KINDS.items()}


def show_spec(kind: str) -> ShowSpec:
    """The :class:`ShowSpec` of the registered kind ``kind``. Raises :class:`ShowError` (one line) when the
    kind is not registered."""
    spec = show_specs().get(kind)
    if spec is None:
        raise ShowError(f"results of a {safe_text(kind)} task, a kind that is not registered (ldp.kinds)")
    return spec


def _kind_of(row: dict[str, Any], specs: Mapping[str, ShowSpec]) -> str:
    """The kind of a row: the kind (among ``specs``, in order) whose rows have the ``row_schema`` the row
    names; a row written before that field, the first kind whose show piece recognises its fields."""
    from ldp import kinds

    named = row.get("row_schema")
    if isinstance(named, str):
        for name in specs:
            if any(rk.schema == named for rk in kinds.get(name).rows):
                return name
        raise KeyError(f"no registered kind shows rows of schema {safe_text(named)}")
    for name, spec in specs.items():
        if spec.matches(row):
            return name
    raise KeyError("none of the fields of an estimate or answer row (frequencies, mean, query)")


def _check_row(row: Any, kind: str | None, specs: Mapping[str, ShowSpec]) -> str:
    if not isinstance(row, dict):
        raise KeyError(f"a JSON {type(row).__name__}, not an object")
    this = _kind_of(row, specs)
    spec = specs[this]
    for name, types in {**_COMMON, **spec.fields}.items():
        if name not in row:
            raise KeyError(f"no {name!r} field")
        value = row[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise KeyError(f"{name!r} is a {type(value).__name__}")
    for name in ("window_start", "window_end"):
        if not isinstance(row.get(name), (str, type(None))):
            raise KeyError(f"{name!r} is not an ISO-8601 string or null")
    if spec.check is not None:
        spec.check(row)
    if kind is not None and this != kind:
        raise KeyError(f"a {this} row among {kind} rows")
    return this


def _summary_kind(out: str) -> str | None:
    """The kind of task ``OUT/counts.json`` names (None: no such file or field)."""
    try:
        with open(os.path.join(out, "counts.json"), encoding="utf-8") as fh:
            kind = json.load(fh, parse_constant=lambda _: None).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _row_specs(out: str) -> dict[str, ShowSpec]:
    """The kinds a row of ``out`` is matched against, in order: the kind ``OUT/counts.json`` names first
    (when registered), then every registered kind."""
    specs = show_specs()
    named = _summary_kind(out)
    if named is None or named not in specs:
        return specs
    return {named: specs[named], **specs}


def _result_files(out: str) -> list[str]:
    files: list[str] = []
    for prefix in RESULT_PREFIXES:
        files += glob.glob(os.path.join(glob.escape(out), f"{prefix}-*.jsonl"))
    return sorted(files)


def _marker_command(out: str) -> str | None:
    """The command named in ``OUT/.ldp-beam-output.json`` (``simulate.py``, ``ldp-beam frequency``)."""
    try:
        with open(os.path.join(out, OUTPUT_MARKER), encoding="utf-8") as fh:
            command = json.load(fh).get("command")
        return str(command[0]) if isinstance(command, list) and command else None
    except (OSError, ValueError, AttributeError):
        return None


def load_rows(out: str) -> tuple[str, list[dict[str, Any]]]:
    """``(kind, rows)`` of the job output ``out`` (every result line of every window and pane). Raises
    :class:`ShowError` for a directory that is not a job's output, one without result rows, or a
    malformed row (naming the file and line)."""
    if not os.path.exists(out):
        raise ShowError(f"'{safe_text(out)}' does not exist")
    if not os.path.isdir(out):
        raise ShowError(f"'{safe_text(out)}' is not a directory (give a job's --output directory)")
    files = _result_files(out)
    _check_job_output(out, files)
    kind, rows = _read_result_rows(files, _row_specs(out) if files else {})
    if kind is None:
        raise _no_rows_error(out)
    return kind, rows


def _check_job_output(out: str, files: list[str]) -> None:
    """Refuses a directory of report files, or one no job wrote (no marker, counts or result files)."""
    marked = any(os.path.exists(os.path.join(out, name)) for name in (OUTPUT_MARKER, "counts.json"))
    reports = glob.glob(os.path.join(glob.escape(out), "*.avro"))
    if not files and reports:
        names = sorted(os.path.basename(r) for r in reports)
        example = next((n for n in names if n.startswith("reports-")), names[0])
        raise ShowError(
            f"'{safe_text(out)}' holds report files (e.g. {safe_text(example)}), not a job's results: give "
            "the --output of frequency, range-queries, sparse-mean or batch-queries"
        )
    if not files and not marked:
        raise ShowError(
            f"'{safe_text(out)}' is not an ldp-beam job's output (no {OUTPUT_MARKER}, counts.json, "
            "estimates-*.jsonl or answers-*.jsonl)"
        )


def _read_result_rows(files: list[str], specs: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """Every row of the result files, checked against the row specs; the kind is None without a row."""
    kind: str | None = None
    rows: list[dict[str, Any]] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line, parse_constant=lambda _: None)  # NaN, Infinity: none
                        kind = _check_row(row, kind, specs)
                    except (ValueError, KeyError) as exc:
                        reason = exc.args[0] if isinstance(exc, KeyError) else f"not JSON ({exc})"
                        raise ShowError(
                            f"{safe_text(path)} line {lineno}: not a result row: {safe_text(reason)}"
                        ) from None
                    rows.append(row)
        except (OSError, UnicodeDecodeError) as exc:
            raise ShowError(f"cannot read {safe_text(path)}: {safe_text(exc)}") from None
    return kind, rows


def _no_rows_error(out: str) -> ShowError:
    """Why a job's output has no result row: a report writer made it, or the job has none yet."""
    if not os.path.exists(os.path.join(out, "counts.json")):
        made_by = _marker_command(out)
        name = os.path.splitext(made_by.split()[-1])[0] if made_by else ""
        if name in REPORT_WRITERS:
            return ShowError(
                f"'{safe_text(out)}' was written by {safe_text(made_by)}, not an aggregation job: give the "
                "--output of frequency, range-queries, sparse-mean or batch-queries"
            )
    counts = load_counts(out)
    ran = ""
    if counts is not None:
        ran = (f" (the job read {counts['read']:,} reports, accepted {counts['accepted']:,}, rejected "
               f"{counts['rejected']:,})")
    return ShowError(
        f"'{safe_text(out)}' has no result rows yet (no line in estimates-*.jsonl, answers-*.jsonl){ran}"
    )


def as_int(value: object) -> int:
    """``int(value)``, 0 when it is none."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def load_counts(out: str) -> dict[str, Any] | None:
    """The job's counts: ``OUT/counts.json`` (batch), else the sum of a streaming job's closed count
    windows (``OUT/counts/counts-*.jsonl``, a window written twice counted once), else None.
    ``{"source", "read", "accepted", "rejected", "reasons": [(reason, n), ...] largest first, "other":
    {late_dropped, lost_*}, "private": note or None, "task_id", "kind", "mechanism", "window"}``."""
    summary: dict[str, Any] = {}
    path = os.path.join(out, "counts.json")
    if os.path.isfile(path):
        summary = _read_counts_json(path)
        raw = summary["counts"]
        source = "counts.json"
    else:
        files = sorted(glob.glob(os.path.join(glob.escape(out), "counts", "counts-*.jsonl")))
        if not files:
            return None
        raw, windows = _sum_count_windows(files)
        source = f"counts/ (streaming: {windows} count window(s) summed)"
    return _counts_view(summary, raw, source)


def _read_counts_json(path: str) -> dict[str, Any]:
    """A batch job's ``counts.json`` (an object with a ``counts`` object), or :class:`ShowError`."""
    try:
        with open(path, encoding="utf-8") as fh:
            summary = json.load(fh, parse_constant=lambda _: None)
        raw = summary.get("counts") if isinstance(summary, dict) else None
        if not isinstance(raw, dict):
            raise ValueError("no 'counts' object")
    except (OSError, ValueError) as exc:
        raise ShowError(f"{safe_text(path)}: not a job's counts ({safe_text(exc)})") from None
    return summary


def _sum_count_windows(files: list[str]) -> tuple[dict[str, int], int]:
    """The counts of a streaming job's count files summed over windows (of a window written twice, the
    line that read the most), and the number of windows summed."""
    by_window: dict[tuple[object, object], dict[str, Any]] = {}
    loose: list[dict[str, Any]] = []
    for name in files:
        with open(name, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    raise ShowError(f"{safe_text(name)}: a line that is not JSON") from None
                if not isinstance(r, dict):
                    continue
                if "window_start_ms" in r and "window_end_ms" in r:
                    key = (r["window_start_ms"], r["window_end_ms"])
                    if key not in by_window or as_int(r.get("read")) > as_int(by_window[key].get("read")):
                        by_window[key] = r
                else:
                    loose.append(r)
    raw: dict[str, int] = {}
    for r in (*loose, *by_window.values()):
        for k, v in r.items():
            if not k.startswith("window_"):
                raw[k] = raw.get(k, 0) + as_int(v)
    return raw, len(by_window) + len(loose)


def _counts_view(summary: dict[str, Any], raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The dictionary :func:`load_counts` returns, from the summary (empty when streaming) and the counts."""
    reasons = sorted(
        ((k[len("rejected_") :], as_int(v)) for k, v in raw.items()
         if k.startswith("rejected_") and as_int(v)),
        key=lambda kv: (-kv[1], kv[0]),
    )
    other = {k: as_int(v) for k, v in raw.items()
             if (k == "late_dropped" or k.startswith("lost_")) and as_int(v)}
    return {
        "source": source,
        "read": as_int(raw.get("read")),
        "accepted": as_int(raw.get("accepted")),
        "rejected": as_int(raw.get("rejected")),
        "reasons": reasons,
        "other": other,
        "private": summary.get("counts_private"),
        "task_id": summary.get("task_id"),
        "kind": summary.get("kind"),
        "mechanism": summary.get("mechanism"),
        "window": summary.get("window") if isinstance(summary.get("window"), dict) else None,
        "streaming": summary.get("streaming") if summary else True,
        # the job ended DONE: its watermark passed every window, so no pane follows the last one written
        "windows_final": summary.get("windows_final") is True,
    }


# ------------------------------------------------------------------------------------------ selecting


WindowKey = tuple[str | None, str | None]


def _window_key(row: dict[str, Any]) -> WindowKey:
    return row.get("window_start"), row.get("window_end")


def _sort_key(key: WindowKey) -> tuple[str, str]:
    return key[0] or "", key[1] or ""


def parse_time_ms(text: str) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 time (``2026-01-01T00:05:00Z``, ``...00.000Z``, no zone:
    UTC) or of a plain integer of milliseconds; None when it is neither."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        if text.endswith(("Z", "z")):  # (fromisoformat takes a Z only from Python 3.11)
            text = text[:-1] + "+00:00"
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return round(t.timestamp() * 1000)


def _window_text(key: WindowKey) -> str:
    if key[0] is None and key[1] is None:
        return "global window"
    return f"[{safe_text(key[0])}, {safe_text(key[1])})"


def select_windows(keys: Sequence[WindowKey], choice: str) -> list[WindowKey]:
    """The windows ``--window`` names: ``latest`` (the one starting last), ``all`` (in order of start), or
    the one starting at ``START`` (``global`` for the global window). An unknown one: :class:`ShowError`
    listing the windows there are."""
    ordered = sorted(set(keys), key=_sort_key)
    if choice == "latest":
        return ordered[-1:]
    if choice == "all":
        return ordered
    if choice == "global":
        chosen = [k for k in ordered if k == (None, None)]
    else:
        want = parse_time_ms(choice)
        if want is None:
            example = safe_text(ordered[-1][0] or "2026-01-01T00:00:00Z")
            raise ShowError(
                f"--window '{safe_text(choice)}': give latest, all, global or a window start, e.g. {example}"
            )
        chosen = [k for k in ordered if k[0] is not None and parse_time_ms(k[0]) == want]
    if not chosen:
        shown = ", ".join(safe_text(k[0]) if k[0] else "global" for k in ordered[-5:])
        more = f" (the last 5 of {len(ordered)})" if len(ordered) > 5 else ""
        raise ShowError(f"--window '{safe_text(choice)}': no window starts then; windows: {shown}{more}")
    return chosen


def latest_panes(rows: Sequence[dict[str, Any]], key_field: str) -> dict[Any, dict[str, Any]]:
    """Per value of ``key_field`` (group, query or attribute), in its order, the row of the window's
    latest pane: a final pane (``is_last_pane``), else the highest ``pane_index``."""
    best: dict[Any, dict[str, Any]] = {}
    for r in rows:
        k = r[key_field]
        rank = (bool(r.get("is_last_pane")), r["pane_index"])
        if k not in best or rank > (bool(best[k].get("is_last_pane")), best[k]["pane_index"]):
            best[k] = r
    return dict(sorted(best.items()))


# ------------------------------------------------------------------------------------------ the content


def number(x: object) -> float | None:
    """``x`` as a float when it is a finite JSON number, else None."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def number_at(values: object, i: int) -> float | None:
    """:func:`number` of ``values[i]`` (None when ``values`` is no list or too short)."""
    return number(values[i]) if isinstance(values, list) and i < len(values) else None


def pane_of(row: dict[str, Any], batch: bool = False) -> dict[str, Any]:
    """The row's pane: index, timing and whether it is the window's final one (None: not known, as for
    the answer rows of a streaming job, which carry no ``is_last_pane``; a batch job fires one pane)."""
    timing = row["pane_timing"]
    last = row.get("is_last_pane")
    if isinstance(last, bool):
        final: bool | None = last
    elif timing == "EARLY":
        final = False
    else:
        final = True if batch else None
    return {"pane_index": row["pane_index"], "pane_timing": timing, "final": final}


def top_indices(values: list[Any], top: int) -> list[int]:
    """Indices of the ``top`` largest numbers of ``values`` (non-numbers last, ties by index)."""
    order = sorted(range(len(values)), key=lambda i: (-(number(values[i]) if number(values[i]) is not None
                                                          else -math.inf), i))
    return order[:top]


def collect(
    out: str, *, top: int = 10, window: str = "latest", rule: str = DEFAULT_FLAG_RULE
) -> dict[str, Any]:
    """What ``show`` prints, as a JSON-able dict: the output, kind, task, the chosen windows (each with
    one table per group, or one of query answers) and the counts. ``rule``: the multiple-comparison rule
    of the top-k flags (:mod:`ldp.selection`). Raises :class:`ShowError`."""
    kind, rows = load_rows(out)
    by_window: dict[WindowKey, list[dict[str, Any]]] = {}
    for r in rows:
        by_window.setdefault(_window_key(r), []).append(r)
    chosen = select_windows(list(by_window), window)
    counts = load_counts(out)
    batch = counts is not None and counts.get("streaming") is False
    spec = show_spec(kind)
    windows = []
    for key in chosen:
        wrows = by_window[key]
        opts = {"rule": rule} if "rule" in spec.options else {}
        tables = spec.tables(wrows, top, batch, **opts)
        if counts is not None and counts.get("windows_final"):  # the job ended DONE: latest panes are final
            for t in tables:
                if "final" in t:
                    t["final"] = True
        windows.append({
            "window_start": key[0],
            "window_end": key[1],
            "panes_written": len({r["pane_index"] for r in wrows}),
            "tables": tables,
        })
    task_ids = sorted({str(r.get("task_id")) for r in rows})
    job_window = (counts or {}).get("window") or {}
    return {
        "output": out,
        "kind": kind,
        "task_id": task_ids[0] if len(task_ids) == 1 else task_ids,
        "window_choice": window,
        "windows_total": len(by_window),
        "accumulating": job_window.get("accumulating"),
        "windows": windows,
        "counts": counts,
    }


# ------------------------------------------------------------------------------------------ any other kind


#: Fields a row is told apart by within a window (the generic view shows the latest pane per value of the
#: first one every row has).
_ROW_KEYS = ("group", "attribute_index", "query_index", "attribute")


def _row_fields(kind: Any) -> list[str]:
    """The fields of a kind's row classes beyond the pane header, in declaration order."""
    from ldp.rows import PANE_HEADER

    names: list[str] = []
    for rk in kind.rows:
        for name in getattr(rk.row_class, "_fields", ()):
            if name not in names and name not in PANE_HEADER:
                names.append(name)
    return names


def _cell_text(value: object, top: int) -> str:
    """A field's value as one safe cell: numbers to six digits, the first ``top`` entries of a list."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if number(value) is not None:
        return fmt(number(value))
    if isinstance(value, list):
        more = f", \u2026 ({len(value):,} in all)" if len(value) > top else ""
        return "[" + ", ".join(_cell_text(v, top) for v in value[:top]) + more + "]"
    if isinstance(value, dict):
        return safe_text(json.dumps(value, ensure_ascii=False, allow_nan=False), MAX_CELL_CHARS)
    return safe_text(value, MAX_CELL_CHARS)


def _generic_table(row: dict[str, Any], fields: Sequence[str], batch: bool, top: int) -> dict[str, Any]:
    from ldp.rows import PANE_HEADER

    names = [f for f in fields if f in row] + [f for f in row if f not in fields and f not in PANE_HEADER]
    group, n = row.get("group"), row.get("n_reports")
    return {
        "group": group if isinstance(group, int) and not isinstance(group, bool) else None,
        **pane_of(row, batch),
        "n_reports": n if isinstance(n, int) and not isinstance(n, bool) else None,
        "about": {"mechanism": row.get("mechanism")},
        "shown": len(names) - ("n_reports" in names),
        "of": len(names) - ("n_reports" in names),
        "list_items": top,
        "rows": [{"field": name, "value": row[name]} for name in names if name != "n_reports"],
    }


def _generic_text(t: dict[str, Any]) -> TableText:
    top = t["list_items"]
    cells = [[safe_text(e["field"], MAX_CELL_CHARS), _cell_text(e["value"], top)] for e in t["rows"]]
    return ["field", "value"], cells, [False, False], "the row's fields (lists: the first --top entries)"


def generic_spec(kind: Any) -> ShowSpec:
    """How ``show`` prints the rows of a registered kind (``ldp.kinds.Kind``) without a show piece of its
    own: per window, the latest pane's row of each group (attribute, query), every field of it in its row
    class's order. A row written without ``row_schema`` is taken as the kind's when it has every field of
    the kind's row classes."""
    fields = _row_fields(kind)

    def matches(row: dict[str, Any]) -> bool:
        return bool(fields) and all(f in row for f in fields)

    def tables(rows: Sequence[dict[str, Any]], top: int, batch: bool) -> list[dict[str, Any]]:
        key = next((k for k in _ROW_KEYS if all(isinstance(r.get(k), (int, str)) for r in rows)), None)
        if key is not None:
            chosen = list(latest_panes(rows, key).values())
        else:
            last = max((bool(r.get("is_last_pane")), r["pane_index"]) for r in rows)
            chosen = [r for r in rows if (bool(r.get("is_last_pane")), r["pane_index"]) == last]
        return [_generic_table(r, fields, batch, top) for r in chosen]

    return ShowSpec(fields={}, matches=matches, tables=tables, text=_generic_text)


# ------------------------------------------------------------------------------------------ rendering


def fmt(x: float | None) -> str:
    """A table cell's number: six significant digits, ``n/a`` for None."""
    return "n/a" if x is None else f"{x:.6g}"


def _about(about: dict[str, Any]) -> str:
    return ", ".join(f"{k} {safe_text(fmt(v) if isinstance(v, float) else v)}" for k, v in about.items()
                     if v is not None)


def query_text(query: dict[str, Any]) -> str:
    """A range query as safe text (``age=[2,5] income=[0,3]``), cut to :data:`MAX_CELL_CHARS`."""
    parts = []
    for name, bounds in query.items():
        if isinstance(bounds, list) and len(bounds) == 2:
            parts.append(f"{safe_text(name)}=[{safe_text(bounds[0])},{safe_text(bounds[1])}]")
        else:
            parts.append(f"{safe_text(name)}={safe_text(bounds)}")
    return safe_text(" ".join(parts), MAX_CELL_CHARS) if parts else "(everything)"


def _pane_text(t: dict[str, Any]) -> str:
    final = {True: "final", False: "not final", None: "final unless late panes follow"}[t["final"]]
    if t["pane_timing"] == "EARLY":
        final = "early (speculative), not final"
    return f"pane {t['pane_index']} {safe_text(t['pane_timing'])}, {final}"


def _table_lines(spec: ShowSpec, t: dict[str, Any]) -> list[str]:
    head = []
    if t["group"] is not None:
        head.append(f"group {t['group']}")
    head.append(_pane_text(t))
    if t.get("mixed_panes"):
        head.append("queries from different panes")
    if t["n_reports"] is not None:
        head.append(f"{t['n_reports']:,} reports")
    lines = ["  ".join(("", "; ".join(head))), "  " + _about(t["about"])]
    header, cells, right, what = spec.text(t)
    more = " (--top K for more)" if t["shown"] < t.get("held", t["of"]) else ""
    if t["shown"] < t["of"] and t["shown"] >= t.get("held", t["of"]):
        more = f" (the JSON Lines row holds the {t['held']:,} largest; every value: the pane's .avro file)"
    lines.append("  " + what + more)
    lines += ["    " + line for line in format_table(header, cells, right)]
    empty = t.get("empty_groups")
    if isinstance(empty, int) and empty > 0:
        lines.append(f"  {empty} group(s) without reports: their part of the model is a uniform guess")
    return lines


def _counts_lines(c: dict[str, Any]) -> list[str]:
    line = f"reports: read {c['read']:,}  accepted {c['accepted']:,}  rejected {c['rejected']:,}"
    if c["reasons"]:
        named = ", ".join(f"{safe_text(r)} {n:,}" for r, n in c["reasons"][:TOP_REASONS])
        rest = c["reasons"][TOP_REASONS:]
        if rest:
            named += f", and {sum(n for _, n in rest):,} more of {len(rest)} other reason(s)"
        line += f" ({named})"
    lines = [line]
    if c["other"]:
        lines.append("  " + ", ".join(f"{safe_text(k)} {v:,}" for k, v in sorted(c["other"].items())))
    if c["private"]:
        lines.append(f"  {safe_text(c['private'])}")
    lines.append(f"  from {c['source']}")
    return lines


def render(content: dict[str, Any]) -> str:
    """The text ``show`` prints for :func:`collect`'s ``content``."""
    kind = content["kind"]
    spec = show_spec(kind)
    task = content["task_id"]
    task_text = safe_text(task) if isinstance(task, str) else ", ".join(safe_text(t) for t in task)
    lines = [f"{safe_text(content['output'])}: {kind} task {task_text}, "
             f"{content['windows_total']} window(s) written"]
    for w in content["windows"]:
        key = (w["window_start"], w["window_end"])
        lines += ["", f"{_window_text(key)}: {w['panes_written']} pane(s) written"]
        if w["panes_written"] > 1 and content.get("accumulating") is False:
            lines.append("  (discarding panes: each pane holds only the reports that arrived for it)")
        for i, t in enumerate(w["tables"]):
            lines += ([""] if i else []) + _table_lines(spec, t)
    if content["counts"] is not None:
        lines += ["", *_counts_lines(content["counts"])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ command


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser(
        "Print a job's results from its output directory: the newest window's top values (or query "
        "answers) with std and 95% intervals, the pane, and the job's counts.",
        beam_options=False,
    )
    parser.add_argument("output", metavar="OUT", help="a job's --output directory")
    parser.add_argument(
        "--top", type=int, default=10,
        help="rows per table: the K largest estimates (frequency) or means (sparse), the first K queries",
    )
    parser.add_argument(
        "--window", default="latest",
        help="latest (the window starting last), all, global, or a window's start (ISO-8601, e.g. "
        "2026-01-01T00:05:00Z, or epoch milliseconds)",
    )
    parser.add_argument(
        "--flag_rule", choices=FLAG_RULES, default=DEFAULT_FLAG_RULE,
        help="multiple-comparison rule of the top values' '> 0' flags, over the whole domain: bonferroni "
        "(family-wise 5%%) or bh (Benjamini-Hochberg, false-discovery rate 5%%)",
    )
    parser.add_argument("--json", action="store_true", help="print the selection as one JSON object")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    ns, _ = parse_job_args(build_parser(), argv, beam=False)
    if ns.top < 1:
        fail(f"--top must be at least 1, got {ns.top}")
    try:
        content = collect(ns.output, top=ns.top, window=ns.window, rule=ns.flag_rule)
    except ShowError as exc:
        fail(str(exc))
    if ns.json:
        text = json.dumps(content, allow_nan=False, ensure_ascii=True)
    else:
        text = render(content)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left; nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
