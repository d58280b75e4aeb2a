"""The dashboard's heavy-hitters panel (pipelines.dashboard_app.heavy_hitters): per window the published
strings, best first, with estimate and 95% interval; the top strings across windows; the trie view of a
trie-mode task; every string escaped.

The fast tests build the Bokeh document over stores written by ``store`` from the aggregator's own rows
(``simulated.write_heavy_hitters_windows``: small tasks, under a second each) or from rows holding hostile
strings, without a browser; the trie test runs on PostgreSQL too (``postgres`` marker). The browser test
(integration) loads the hostile store in headless Chromium and checks that nothing ran and every string is
on the page as text.
"""

from __future__ import annotations

import math
import os
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from bokeh.document import Document
from test_dashboard_xss import _check_document

from ldp.heavy_hitters.strings import escape_bytes
from ldp.kinds.heavy_hitters.aggregate import HeavyHittersRow
from pipelines.dashboard_app import markup, shape
from pipelines.dashboard_app.app import Dashboard
from pipelines.dashboard_app.heavy_hitters import LATEST, hh_table_columns, string_label
from pipelines.dashboard_app.simulated import (
    HOSTILE_TEXTS,
    heavy_hitters_task,
    open_writer,
    write_heavy_hitters_windows,
    write_hostile_tasks,
)
from store import open_store

START = 1_795_000_000_000
#: A small task: 2-byte strings (the simulated words cut at a character boundary, so the 4-byte emoji
#: becomes the empty string), a first level of 10 bits: a window finalizes in well under a second.
SMALL = {"max_length": 2, "truncate": True, "params": {"first_bits": 10}}
#: Published strings that are markup, quotes, a byte that is not UTF-8 (printed ``\xfe``), a backslash
#: text that looks like an escape, the empty string and spaces: each as the row prints it.
#: users per simulated window: enough for the exact verification test to publish the emoji's empty string
USERS = 3000

HOSTILE_STRINGS = [
    escape_bytes(v.encode() if isinstance(v, str) else v)
    for v in ("<script>alert(1)</script>", '"&\'', b"\xfe<b>x</b>", "\\x3cscript\\x3e", HOSTILE_TEXTS[0],
              HOSTILE_TEXTS[3], "", "  a b  ")  # fmt: skip
]


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file, or a new database on the session's throw-away PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/trie.db"
    import psycopg

    base = request.getfixturevalue("postgres_url")
    name = f"dash_hh_{os.getpid()}_{abs(hash(request.node.nodeid)) % 10**8}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return base.rsplit("/", 1)[0] + "/" + name


def _write(url: str, task_id: str, windows: int, **task: Any) -> list[Any]:
    store = open_store(url, shared=False)
    try:
        obj = {**heavy_hitters_task(task_id), **SMALL, **task}
        return write_heavy_hitters_windows(store, obj, START, windows, users_per_window=USERS)
    finally:
        store.close()


def _stored(url: str, task_id: str, output: str = "heavy_hitters") -> list[dict[str, Any]]:
    store = open_store(url, shared=False)
    try:
        rows = []
        for w in store.windows(task_id):
            rows += store.current(task_id, w["window_start"], w["window_end"], output=output)
        return sorted(rows, key=lambda r: r["window_end"])
    finally:
        store.close()


class _Rows(HTMLParser):
    """The cells' texts of every ``tr[data-item]`` of a table (what the browser shows), by item."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[tuple[str, list[str]]] = []
        self.in_row = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        item = dict(attrs).get("data-item")
        if tag == "tr":
            self.in_row = item is not None
            if self.in_row:
                self.rows.append((str(item), []))
        elif tag == "td" and self.in_row:
            self.rows[-1][1].append("")

    def handle_data(self, data: str) -> None:
        if self.in_row and self.rows[-1][1]:
            self.rows[-1][1][-1] += data


def _table_rows(text: str) -> list[tuple[str, str, str, str]]:
    """``(data-item, string, estimate, 95% low)`` of every row of ``#hh-table``, as the browser shows them
    (an HTML parser undoes the escaping)."""
    parser = _Rows()
    parser.feed(text)
    parser.close()
    return [(item, c[1].replace(" (the empty string)", ""), c[2], c[4]) for item, c in parser.rows]


def _best_first(hitters: list[dict[str, Any]]) -> list[str]:
    """The row's strings in the table's order: descending estimate, ties by the string."""
    return [h["value"] for h in sorted(hitters, key=lambda h: (-h["estimate"], h["value"]))]


def test_panel_lists_each_windows_strings_best_first_and_follows_them_across_windows(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/hh.db"
    rows = _write(url, "words", 3)
    dash = Dashboard(Document(), url, clock=lambda: START / 1000 + 400)
    assert dash.view_select.value == "heavy_hitters, group 0"
    assert dash.hh.table.visible and dash.hh.plot.visible and not dash.hh.trie_plot.visible
    assert dash.hh.window_select.value == LATEST
    # the generic top-k and series box name the strings too, quoted (the empty string is '""')
    assert set(dash.topk_source.data["name"]) == {string_label(h["value"]) for h in rows[-1].heavy_hitters}
    assert [v for v, _ in dash.hh.window_select.options] == [LATEST] + [
        f"{r.window_start}:{r.window_end}" for r in reversed(rows)
    ]
    stored = _stored(url, "words")
    for row in (rows[-1], rows[0]):  # the newest window (the default), then the oldest, chosen on the page
        if row is rows[0]:
            dash.hh.window_select.value = f"{row.window_start}:{row.window_end}"
        expected = [(str(i["item"]), i["label"], f"{i['estimate']:.4f}", f"{i['ci_low']:.4f}")
                    for i in sorted((s for s in stored if s["window_start"] == row.window_start),
                                    key=lambda s: (-s["estimate"], s["label"]))]  # fmt: skip
        got = _table_rows(dash.hh.table.text)
        assert got == expected and [g[1] for g in got] == _best_first(row.heavy_hitters)
        assert f"data-window-end='{row.window_end}'" in dash.hh.table.text
        assert f"of {row.tested} tested (rule bh at alpha 0.05; top_k 10)" in dash.hh.table.text
        assert "id='hh-levels'" in dash.hh.table.text
    # the series: the chosen window's top strings, one point per window, gaps where not published
    by_key = {(s["label"], s["window_end"]): s for s in stored}
    top = [h["value"] for h in rows[0].heavy_hitters][:8]
    for slot, value in enumerate(top):
        data = dash.hh.sources[slot].data
        assert data["x"] == [r.window_end for r in rows]
        for x, est, low in zip(data["x"], data["estimate"], data["lower"], strict=True):
            hit = by_key.get((value, x))
            assert (math.isnan(est) and math.isnan(low)) if hit is None else (est, low) == (hit["estimate"],
                                                                                           hit["ci_low"])
        assert dash.hh.legend_items[slot].label.value == string_label(value) == f'"{value}"'
    assert "" in top  # the emoji, cut to nothing by truncate: shown as the empty string
    assert "(the empty string)" in dash.hh.table.text
    assert not any(item.visible for item in dash.hh.legend_items[len(top):])
    # a new window: the page follows it at the next poll (the selector back on latest), no reload
    dash.hh.window_select.value = LATEST
    store = open_store(url, shared=False)
    try:
        obj = {**heavy_hitters_task("words"), **SMALL}
        (new,) = write_heavy_hitters_windows(store, obj, rows[-1].window_end, 1, users_per_window=USERS,
                                             seed=7)  # fmt: skip
    finally:
        store.close()
    dash.poll()
    assert f"data-window-end='{new.window_end}'" in dash.hh.table.text
    assert [g[1] for g in _table_rows(dash.hh.table.text)] == _best_first(new.heavy_hitters)
    assert dash.hh.sources[0].data["x"] == [r.window_end for r in [*rows, new]]


def test_panel_hides_for_other_outputs_and_shows_the_trie_view_of_a_trie_task(store_url: str):
    url = store_url
    rows = _write(url, "trie-words", 4, mode="trie")
    assert [r.trie["status"] for r in rows] == ["search", "search", "verify", "search"]
    writer = open_writer(url)
    try:  # a frequency task in the same store
        write_hostile_tasks(writer, START + 600_000)
    finally:
        writer.close()
    dash = Dashboard(Document(), url, task="trie-words", clock=lambda: START / 1000 + 400)
    assert dash.hh.trie_plot.visible and dash.hh.trie_table.visible
    growth = dash.hh.trie_source.data
    assert growth["x"] == [r.window_end for r in rows]
    assert growth["prefix_bits"] == [float(r.trie["prefix_bits"]) for r in rows]
    assert growth["status"] == ["search", "search", "verify", "search"]
    # the strings table: the newest verification window; the newest window is a search step
    verify = rows[2]
    assert f"data-window-end='{verify.window_end}'" in dash.hh.table.text
    assert [g[1] for g in _table_rows(dash.hh.table.text)] == _best_first(verify.heavy_hitters)
    assert dash.hh.sources[0].data["x"] == [verify.window_end]  # the series cover verification windows
    options = dict(dash.hh.window_select.options)
    assert options[f"{rows[3].window_start}:{rows[3].window_end}"].endswith("(trie search, level 0)")
    dash.hh.window_select.value = f"{rows[3].window_start}:{rows[3].window_end}"
    assert "id='hh-search-window'" in dash.hh.table.text and "publishes no strings" in dash.hh.table.text
    # the trie table: the newest window's surviving prefixes, best first
    prefixes = sorted((s for s in _stored(url, "trie-words", "heavy_hitters_trie")
                       if s["window_end"] == rows[3].window_end), key=lambda s: (-s["estimate"], s["label"]))
    trie = dash.hh.trie_table.text
    assert f"generation {rows[3].trie['generation']}, level 0 (search)" in trie
    assert trie.count("<tr data-item=") == len(prefixes) == len(rows[3].trie["prefixes"])
    first, second = (shape.html_text(p["label"]) for p in prefixes[:2])
    assert trie.index(f"<code>{first}</code>") < trie.index(f"<code>{second}</code>")
    dash.task_select.value = next(t for t in dash.task_select.options if t.startswith("freq"))
    assert not any(m.visible for m in (*dash.hh.models, dash.hh.trie_plot, dash.hh.trie_table))


def _hostile_store(url: str) -> list[dict[str, Any]]:
    """One trie-mode verification window whose published strings, and so its trie prefixes, are
    :data:`HOSTILE_STRINGS`, written through the store."""
    hitters = [{"value": v, "estimate": 0.2 - 0.02 * i, "std": 0.01, "ci_low": 0.18 - 0.02 * i,
                "ci_high": 0.22 - 0.02 * i} for i, v in enumerate(HOSTILE_STRINGS)]  # fmt: skip
    trie = {"generation": 3, "level": 2, "status": "verify", "prefix_bits": 262, "reports_at_level": 5000,
            "stale_reports": 0, "survivors": len(hitters),
            "prefixes": [{"value": h["value"], "hex": f"{i:066x}", "estimate": h["estimate"], "std": h["std"]}
                         for i, h in enumerate(hitters)]}  # fmt: skip
    row = HeavyHittersRow("hostile-hh", 2, START, START + 60_000, "ON_TIME", 0, True, "pem", 4.0, 32, 10,
                          "sketch", "bh", 0.05, 5000, hitters, [], 2048, 5.0, trie=trie)  # fmt: skip
    store = open_store(url, shared=False)
    try:
        store.write_task("hostile-hh", kind="heavy_hitters", mechanism="pem", epsilon=4.0, task_json="{}")
        store.write_pane("hostile-hh", START, START + 60_000, 0, "ON_TIME", [row], written_ms=START + 61_000)
    finally:
        store.close()
    return hitters


def test_hostile_strings_are_shown_as_text_in_every_part_of_the_panel(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/hostile.db"
    hitters = _hostile_store(url)
    doc = Document()
    dash = Dashboard(doc, url, clock=lambda: START / 1000 + 100)
    table = dash.hh.table.text
    assert [g[1] for g in _table_rows(table)] == HOSTILE_STRINGS  # the very texts, best first
    for value in HOSTILE_STRINGS:
        if value:
            assert f"<code>{shape.html_text(value)}</code>" in table
    assert "<script>" not in table and "<img" not in table and "<i class=ldp-injected>" not in table
    assert "\\xfe&lt;b&gt;x&lt;/b&gt;" in table  # the non-UTF-8 byte as printed, the markup escaped
    assert "\\\\x3cscript\\\\x3e" in table  # a backslash text stays literal, never decoded
    # legends and hover names (BokehJS draws them as text) carry the strings, quoted
    shown = [item.label.value for item in dash.hh.legend_items if item.visible]
    assert shown == [string_label(v) for v in HOSTILE_STRINGS]
    assert dash.hh.sources[0].data["name"] == [string_label(HOSTILE_STRINGS[0])]
    _check_document(doc, [v for v in HOSTILE_STRINGS if v.strip()])  # every Div, option and tooltip
    assert markup.fmt(hitters[0]["estimate"]) in table
    trie = dash.hh.trie_table.text  # the same strings as the trie's prefixes
    assert dash.hh.trie_table.visible and "<script>" not in trie and "<img" not in trie
    assert [g[1] for g in _table_rows(trie)] == HOSTILE_STRINGS


def test_table_columns_order_by_estimate_then_string():
    rows = [{"item": 1, "label": "b", "estimate": 0.1}, {"item": 2, "label": "a", "estimate": 0.1},
            {"item": 3, "label": "c", "estimate": 0.3}, {"item": 4, "label": "d", "estimate": None}]
    cols = hh_table_columns(rows)
    assert cols["value"] == ["c", "a", "b", "d"] and cols["rank"] == [1, 2, 3, 4]


@pytest.mark.integration
@pytest.mark.browser
def test_hostile_strings_render_as_text_in_the_browser_and_never_run(tmp_path: Path):
    from pipelines.dashboard_app.browser import (
        DashboardProcess,
        browser_missing,
        headless_chromium,
        model_text,
        shadow_text,
        wait_until,
    )
    from tests.test_dashboard_browser import _injected

    assert browser_missing() is None  # the browser marker skips (or fails) the test without one
    url = f"sqlite:///{tmp_path}/hostile.db"
    _hostile_store(url)
    driver = headless_chromium(1400, 1000)
    try:
        with DashboardProcess(url, "--refresh", "0.5") as dash:
            assert dash.url is not None
            driver.get(dash.url)
            wait_until(lambda: "id='hh-table'" in (model_text(driver, "hh_table") or ""), 60,
                       message=lambda: f"the heavy-hitters table\n{dash.output}")  # fmt: skip
            time.sleep(1.0)  # lets an onerror handler fire if one was injected (not a timed assertion)
            assert _injected(driver) == {"xss": None, "found": []}
            text = shadow_text(driver, "ldp-hh-table")
            # every string, as text (the helper's text collapses runs of spaces)
            assert all(" ".join(v.split()) in text for v in HOSTILE_STRINGS if v.strip()), text
            assert "(the empty string)" in text
            trie = shadow_text(driver, "ldp-hh-trie-table")
            assert all(" ".join(v.split()) in trie for v in HOSTILE_STRINGS if v.strip()), trie
    finally:
        driver.quit()
