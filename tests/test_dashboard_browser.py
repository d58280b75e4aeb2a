"""The dashboard in a real headless browser (Debian's Chromium through Selenium), on SQLite and PostgreSQL.

``pytest -m browser``. Without chromium / chromedriver / selenium the tests skip with the reason, unless
``LDP_REQUIRE_BROWSER=1`` (CI), where they fail. The browser gets no network: every host but 127.0.0.1 goes
to a proxy address that refuses connections, and the test checks that every resource the page loaded came
from the dashboard's own server (BokehJS included).

What "the page shows X" means here: the data BokehJS holds in the page's document for the named source (what
the plot draws), read in the browser, and the rendered text of the top-k table; both are compared with the
store's own read API (``ldp.store.Store.current``), not with the dashboard's reader.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.dashboard_app import shape
from pipelines.dashboard_app.browser import (
    DashboardProcess,
    browser_missing,
    headless_chromium,
    model_text,
    page_sources,
    shadow_text,
    wait_until,
)
from pipelines.dashboard_app.simulated import LABELS, SimulatedStream, open_writer

pytestmark = pytest.mark.browser

#: How long the page may take to show a write (a wait, not a timed assertion: the figure is reported).
SHOW_TIMEOUT_S = 60.0
TOP_K = 10


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = browser_missing()
    if reason is not None:
        if os.environ.get("LDP_REQUIRE_BROWSER") == "1":
            pytest.fail(f"LDP_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    driver = headless_chromium(1400, 1000)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file that does not exist yet, or a new empty PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/estimates.db"
    import psycopg

    base = request.getfixturevalue("postgres_url")
    name = f"dash_browser_{os.getpid()}_{abs(hash(request.node.nodeid)) % 10**8}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return base.rsplit("/", 1)[0] + "/" + name


def _store_top(url: str, task_id: str, window: tuple[int, int], k: int) -> list[dict[str, Any]]:
    from ldp.store import open_store

    store = open_store(url, create=False, shared=False)
    try:
        return store.current(task_id, *window, output="estimates", grp=0, top_k=k)
    finally:
        store.close()


def _page_top(driver: Any) -> tuple[list[int], list[float]] | None:
    data = (page_sources(driver, ["topk_source"]) or {}).get("topk_source")
    if not data:
        return None
    return [int(i) for i in data["item"]], [float(e) for e in data["estimate"]]


def _shows(driver: Any, rows: list[dict[str, Any]]) -> bool:
    return _page_top(driver) == ([int(r["item"]) for r in rows], [float(r["estimate"]) for r in rows])


def _local_resources_only(driver: Any, base: str) -> list[str]:
    """The resources the page loaded from anywhere but ``base`` (should be none)."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".concat(Array.from(document.scripts).map(s => s.src).filter(s => s))"
        ".concat(Array.from(document.querySelectorAll('link[href]')).map(l => l.href));"
    )
    return [n for n in names if not (n.startswith(base) or n.startswith(base.replace("http", "ws")))]


def test_page_shows_the_first_window_and_updates_without_reload(
    browser: Any, store_url: str, record_property
):
    now = int(time.time() * 1000)
    stream = SimulatedStream(users_per_window=3000, start_ms=now - now % 60_000 - 120_000)
    with DashboardProcess(store_url, "--refresh", "0.5", "--top_k", str(TOP_K)) as dash:
        assert dash.url is not None
        browser.get_log("browser")  # drop an earlier test's messages
        browser.get(dash.url)
        # nothing written yet: the page waits (no crash, no empty plot errors)
        wait_until(
            lambda: "waiting for the first pane" in (model_text(browser, "status") or ""),
            60,
            message=lambda: f"the waiting state; status {model_text(browser, 'status')!r}\n{dash.output}",
        )
        browser.execute_script("window.__ldp_same_page = 'yes';")  # gone if the page reloads

        writer = open_writer(store_url)
        try:
            writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
            latencies = []
            for index in (0, 1):
                # the window's panes (the last one's rows are what the page must show), then its final flag
                stream.write_window(writer, index, now_ms=int(time.time() * 1000), final=False)
                written = time.monotonic()
                top = _store_top(store_url, stream.task_id, stream.window(index), TOP_K)
                assert len(top) == TOP_K
                wait_until(
                    lambda top=top: _shows(browser, top),
                    SHOW_TIMEOUT_S,
                    message=lambda index=index: (
                        f"window {index}'s top values on the page: {_page_top(browser)}"
                    ),
                )
                latencies.append(time.monotonic() - written)
                # the rendered table names the store's top values, largest first, with their intervals
                text = shadow_text(browser, "ldp-topk-table")
                names = [LABELS[int(r["item"])] for r in top]
                positions = [text.find(f" {name} ") for name in names]
                assert all(p >= 0 for p in positions) and positions == sorted(positions), text
                assert f"{top[0]['ci_low']:.4f}" in text and f"{top[0]['ci_high']:.4f}" in text
                writer.mark_final(stream.task_id, stream.window(index), int(time.time() * 1000))
                wait_until(
                    lambda: "(final)" in (model_text(browser, "status") or ""),
                    SHOW_TIMEOUT_S,
                    message=lambda: f"the final flag; status {model_text(browser, 'status')!r}",
                )
                status = model_text(browser, "status") or ""
                assert "data-state='live'" in status
                assert shape.format_window(*stream.window(index)) in status
                assert browser.execute_script("return window.__ldp_same_page;") == "yes"  # no reload
        finally:
            writer.close()

        # the other panels follow the store too
        data = page_sources(browser, ["windows_source", "counts_source", "latency_source", "series_source_0"])
        assert data["windows_source"]["window_end"] == [stream.window(1)[1], stream.window(0)[1]]
        assert data["windows_source"]["final"] == ["final", "final"]
        assert data["counts_source"]["accepted"] == [3000, 3060]
        assert len(data["series_source_0"]["x"]) == 2
        assert _local_resources_only(browser, dash.url.rstrip("/")) == []
        severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == [], severe
        browser.get("about:blank")  # leave the page before its server stops
    record_property("page_update_latency_s", [round(x, 3) for x in latencies])
    print(f"store write -> page shows it: {', '.join(f'{x:.2f} s' for x in latencies)} (refresh 0.5 s)")
