"""The dashboard in a real headless browser (Debian's Chromium through Selenium), on SQLite and PostgreSQL.

``pytest -m browser``. Without chromium / chromedriver / selenium the tests skip with the reason, unless
``LDP_REQUIRE_BROWSER=1`` (CI), where they fail. The browser gets no network: every host but 127.0.0.1 goes
to a proxy address that refuses connections, and the test checks that every resource the page loaded came
from the dashboard's own server (BokehJS included).

What "the page shows X" means here: the data BokehJS holds in the page's document for the named source (what
the plot draws), read in the browser, and the rendered text of the top-k table; both are compared with the
store's own read API (``store.Store.current``), not with the dashboard's reader.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldp.selection import simultaneous_intervals
from pipelines.dashboard_app import shape
from pipelines.dashboard_app.browser import (
    DashboardProcess,
    browser_missing,
    headless_chromium,
    model_text,
    page_sources,
    plotted,
    record_topk_changes,
    seen_ms,
    shadow_text,
    table_cells,
    wait_until,
)
from pipelines.dashboard_app.simulated import LABELS, SimulatedStream, open_writer

pytestmark = [pytest.mark.integration, pytest.mark.browser]

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


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])]
)
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
    from store import open_store

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
        record_topk_changes(browser)

        writer = open_writer(store_url)
        try:
            writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, stream.summary())
            latencies = []
            for index in (0, 1):
                # the window's panes (the last one's rows are what the page must show), then its final flag
                stream.write_window(writer, index, now_ms=int(time.time() * 1000), final=False)
                written_ms = int(time.time() * 1000)  # the last pane's transaction has committed
                top = _store_top(store_url, stream.task_id, stream.window(index), TOP_K)
                assert len(top) == TOP_K
                wait_until(
                    lambda top=top: _shows(browser, top),
                    SHOW_TIMEOUT_S,
                    message=lambda index=index: (
                        f"window {index}'s top values on the page: {_page_top(browser)}"
                    ),
                )
                last_pane = max(int(r["pane_index"]) for r in top)
                shown_ms = seen_ms(browser)[(*stream.window(index), last_pane)]
                latencies.append((shown_ms - written_ms) / 1000)
                # the rendered table names the store's top values, largest first, with their intervals
                text = shadow_text(browser, "ldp-topk-table")
                names = [LABELS[int(r["item"])] for r in top]
                positions = [text.find(f" {name} ") for name in names]
                assert all(p >= 0 for p in positions) and positions == sorted(positions), text
                # the intervals drawn for the selected values are simultaneous over the domain
                lo, hi = simultaneous_intervals(
                    [top[0]["unbiased"]], [top[0]["unbiased_std"]], stream.domain_size,
                    published=[top[0]["estimate"]],
                )  # fmt: skip
                assert f"{lo[0]:.4f}" in text and f"{hi[0]:.4f}" in text
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


# -- end to end: a streaming job on the DirectRunner reading the Pub/Sub emulator writes the store ----------
#: The emulator fixture's project (tests/conftest.py reads the module's PROJECT).
PROJECT = "ldp-dashboard"
#: Event-time window of the streaming job, seconds: long enough that the page shows a window while it is
#: still the newest one, short enough that two close within the test.
LIVE_WINDOW_S = 6
LIVE_LABELS = [f"item-{chr(ord('a') + i)}" for i in range(16)]


def _one_window_of_reports() -> tuple[int, int]:
    """``(start, end)`` (epoch ms) of the event-time window to send reports in: the current one, or the next
    one when fewer than 2 s of the current one remain (fixed windows are aligned to multiples of their
    size)."""
    size = LIVE_WINDOW_S * 1000
    now = int(time.time() * 1000)
    start = now - now % size
    if start + size - now < 2000:
        start += size
    return start, start + size


class _Publisher:
    """Every 0.2 s: inside ``real_ms`` (until 0.3 s before its end), 200 GRR reports of a skewed population
    (event time = now, in the ``event_time`` attribute the job reads with ``--timestamp_attribute``);
    otherwise an undecodable message (a dead letter: the watermark moves on, no estimate is made). The test
    thus decides which windows get estimates: the job is seen running (its counts) before any report is
    sent, and one window's reports are sent, then none until the page has shown that window, whatever the
    machine's load."""

    def __init__(self, topic: str, task: Any) -> None:
        import threading

        from google.cloud import pubsub_v1

        self.pub = pubsub_v1.PublisherClient()
        self.topic = topic
        self.oracle = task.make_oracle()
        self.task_id = task.task_id
        self.stop = threading.Event()
        self.real_ms = (0, 0)  # reports are sent while start <= now < end - 300 ms
        self.error: BaseException | None = None
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import numpy as np

        from wire.records import encode_report_container, reports_to_records

        rng = np.random.default_rng(np.random.SeedSequence(2026_12_01_10))
        probs = 0.6 ** np.arange(16)
        probs /= probs.sum()
        try:
            while not self.stop.is_set():
                now = int(time.time() * 1000)
                if not self.real_ms[0] <= now < self.real_ms[1] - 300:
                    self.pub.publish(self.topic, b"garbage, not Avro").result(timeout=30)
                    self.stop.wait(0.2)
                    continue
                values = rng.choice(16, size=200, p=probs)
                reports = self.oracle.encode(values, rng=rng)
                body = encode_report_container(
                    reports_to_records(self.task_id, reports, np.full(200, now), 0)
                )
                self.pub.publish(self.topic, body, event_time=str(now)).result(timeout=30)
                self.sent += 200
                self.stop.wait(0.2)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _page_window(driver: Any) -> tuple[tuple[int, int], list[int], list[float]] | None:
    data = (page_sources(driver, ["topk_source"]) or {}).get("topk_source")
    if not data or not data.get("item"):
        return None
    window = (int(data["window_start"][0]), int(data["window_end"][0]))
    return window, [int(i) for i in data["item"]], [float(e) for e in data["estimate"]]


def _page_equals_store(driver: Any, url: str, task_id: str, after_end: int) -> dict[str, Any] | None:
    """When the page shows a window ending after ``after_end`` whose top-k equals the store's current rows
    for it: that window, and the newest write time of those rows; else None."""
    shown = _page_window(driver)
    if shown is None or shown[0][1] <= after_end:
        return None
    window, items, estimates = shown
    top = _store_top(url, task_id, window, TOP_K)
    if [int(r["item"]) for r in top] != items or [float(r["estimate"]) for r in top] != estimates:
        return None
    # the rendered table names the same values, largest first (read in the same poll: the page moves on)
    text = shadow_text(driver, "ldp-topk-table")
    positions = [text.find(f" {LIVE_LABELS[int(r['item'])]} ") for r in top]
    if not (all(p >= 0 for p in positions) and positions == sorted(positions)):
        return None
    if _page_window(driver) != shown:
        return None
    return {
        "window": window,
        "pane": max(int(r["pane_index"]) for r in top),
        "written_ms": max(int(r["written_ms"]) for r in top),
        "rows": top,
    }


def _emulator_available() -> bool:
    from pipelines.pubsub_emulator import PubSubEmulator

    return PubSubEmulator.available()


def _job_has_store_flag() -> bool:
    """Whether the aggregation jobs take ``--store`` (helper STORE wires it into pipelines/job.py)."""
    import argparse
    import inspect

    from pipelines import job

    parser = argparse.ArgumentParser()
    job.add_job_flags(parser)
    flag = any("--store" in a.option_strings for a in parser._actions)
    return flag and "WriteToStore" in inspect.getsource(job)


@pytest.mark.skipif(not _job_has_store_flag(), reason="the aggregation jobs have no --store flag yet")
@pytest.mark.skipif(not _emulator_available(), reason="Pub/Sub emulator binary not installed")
@pytest.mark.pubsub
def test_streaming_job_on_emulator_store_and_page_live(
    emulator, browser: Any, store_url: str, tmp_path: Path, record_property
):
    """A streaming frequency job (DirectRunner, Pub/Sub emulator) writes the store with ``--store``; the page
    shows its first closed window's top values (equal to the store's rows) and then the next window's,
    without reloading."""
    import signal
    import subprocess
    import sys
    import uuid

    from google.cloud import pubsub_v1

    from ldp.task import parse_task

    suffix = uuid.uuid4().hex[:8]
    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = pub.topic_path(PROJECT, f"reports-{suffix}")
    subscription = sub.subscription_path(PROJECT, f"aggregator-{suffix}")
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    task = parse_task(
        {"task_id": "live-freq", "mechanism": "grr", "epsilon": 2.0, "domain_size": 16, "labels": LIVE_LABELS}
    )
    task.save(tmp_path / "task.json")
    # 30 s allowed lateness: on a loaded machine the DirectRunner pulls late and would drop the reports as
    # late (its Pub/Sub watermark is the wall clock of the pull); late ones then come as LATE panes
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"), "--streaming",
        "--input_subscription", subscription, "--output", str(tmp_path / "out"), "--store", store_url,
        "--window_size", str(LIVE_WINDOW_S), "--allowed_lateness", "30",
        "--counts_window", str(LIVE_WINDOW_S), "--dead_letter_window", str(LIVE_WINDOW_S),
        "--streaming_duration", "400",
        "--timestamp_attribute", "event_time",
    ]  # fmt: skip
    log_path = tmp_path / "job.log"
    publisher = _Publisher(topic, task)
    with (
        open(log_path, "wb") as log,
        DashboardProcess(store_url, "--refresh", "0.5", "--top_k", str(TOP_K)) as dash,
    ):
        job = subprocess.Popen(
            cmd,
            env=emulator.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(Path(__file__).resolve().parents[1]),
        )
        try:
            assert dash.url is not None
            browser.get_log("browser")
            browser.get(dash.url)
            wait_until(
                lambda: "waiting for the first pane" in (model_text(browser, "status") or ""),
                60,
                message=lambda: f"the waiting state; status {model_text(browser, 'status')!r}",
            )
            browser.execute_script("window.__ldp_same_page = 'yes';")
            record_topk_changes(browser)
            publisher.thread.start()

            def job_alive() -> str:
                if job.poll() is not None:
                    raise AssertionError(
                        f"the job exited ({job.returncode}):\n{log_path.read_text()[-3000:]}"
                    )
                if publisher.error is not None:
                    raise AssertionError(f"publishing failed: {publisher.error!r}")
                return f"the page to show a window equal to the store; page {_page_window(browser)}"

            # the job is running when its first counts window (dead letters only) is on the page
            wait_until(
                lambda: (
                    job_alive()
                    and (page_sources(browser, ["counts_source"]) or {}).get("counts_source", {}).get("x")
                ),
                180,
                interval=0.2,
                message=lambda: f"the job's first counts on the page\n{log_path.read_text()[-2000:]}",
            )
            publisher.real_ms = _one_window_of_reports()
            first_end = publisher.real_ms[1]
            first = wait_until(
                lambda: job_alive() and _page_equals_store(browser, store_url, task.task_id, 0),
                180,
                interval=0.1,
                message=job_alive,
            )
            from store import open_store

            store = open_store(store_url, create=False, shared=False)
            try:
                windows = store.windows(task.task_id, 100)
            finally:
                store.close()
            # the page's window is the store's first window with estimates, the one the reports were sent in
            assert [(w["window_start"], w["window_end"]) for w in windows] == [first["window"]], windows
            assert first["window"][1] == first_end
            publisher.real_ms = _one_window_of_reports()
            second_end = publisher.real_ms[1]
            second = wait_until(
                lambda: (
                    job_alive() and _page_equals_store(browser, store_url, task.task_id, first["window"][1])
                ),
                120,
                interval=0.1,
                message=job_alive,
            )
            assert second["window"][0] >= first["window"][1]
            assert second["window"][1] == second_end
            assert browser.execute_script("return window.__ldp_same_page;") == "yes"  # no reload
            assert _local_resources_only(browser, dash.url.rstrip("/")) == []
            seen = seen_ms(browser)  # when the page first showed each (window, pane), by the browser's clock
            for p in (first, second):
                p["seen_ms"] = seen[(*p["window"], p["pane"])]
            browser.get("about:blank")
        finally:
            publisher.stop.set()
            publisher.thread.join(30)
            if job.poll() is None:
                job.send_signal(signal.SIGINT)  # our own child, by PID
                try:
                    job.wait(60)
                except subprocess.TimeoutExpired:
                    job.kill()
                    job.wait(30)
    # store write -> page: the page saw the rows at seen_ms; the job wrote them at written_ms (same clock)
    latencies = [(p["seen_ms"] - p["written_ms"]) / 1000 for p in (first, second)]
    record_property("job_store_page_latency_s", latencies)
    to_store = [(p["written_ms"] - p["window"][1]) / 1000 for p in (first, second)]
    record_property("window_end_to_store_s", to_store)
    print(
        "job's store write -> page shows it: "
        + ", ".join(f"{x:.2f} s" for x in latencies)
        + " (refresh 0.5 s); window end -> store: "
        + ", ".join(f"{x:.2f} s" for x in to_store)
    )


# -- hostile store texts: shown as text, never run -----------------------------------------------------------
_INJECTED_JS = """
const found = [];
function walk(root) {
  for (const el of root.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    if (tag === 'img' && el.getAttribute('src') === 'x') { found.push('img src=x'); }
    if (tag === 'svg' && el.hasAttribute('onload')) { found.push('svg onload'); }
    if (tag === 'script' && (el.textContent || '').includes('__xss')) { found.push('script __xss'); }
    if (el.classList && el.classList.contains('ldp-injected')) { found.push('i.ldp-injected'); }
    for (const attr of el.getAttributeNames()) {
      const handler = attr.startsWith('on') && (el.getAttribute(attr) || '').includes('__xss');
      if (handler) { found.push(tag + ' ' + attr); }
    }
    if (el.shadowRoot) { walk(el.shadowRoot); }
  }
}
walk(document);
return {xss: typeof window.__xss === 'undefined' ? null : String(window.__xss), found: found};
"""


def _injected(driver: Any) -> dict[str, Any]:
    """``window.__xss`` (None when unset) and the injected elements found in the page and its shadow roots."""
    return driver.execute_script(_INJECTED_JS)


def test_hostile_texts_render_as_text_and_never_run(browser: Any, store_url: str):
    """Task ids, value labels (the store rows' and the summary's), range attribute names, methods,
    dead-letter reasons and summary keys that are HTML or script (``simulated.HOSTILE_TEXTS``): the page
    shows them as text in the status line, the selectors, the top-k table, the series box (Choices.js) and
    the tables, and none of them executes (``window.__xss`` stays unset) or adds an element."""
    from pipelines.dashboard_app.simulated import HOSTILE_TEXTS, write_hostile_tasks

    writer = open_writer(store_url)
    try:
        ids = write_hostile_tasks(writer, int(time.time() * 1000))
    finally:
        writer.close()
    labels = [f"{t} #{i}" for i, t in enumerate(HOSTILE_TEXTS)]
    with DashboardProcess(store_url, "--refresh", "0.5", "--task", ids["frequency"]) as dash:
        assert dash.url is not None
        browser.get_log("browser")
        browser.get(dash.url)
        wait_until(
            lambda: "data-state='live'" in (model_text(browser, "status") or ""),
            60,
            message=lambda: f"the live state; status {model_text(browser, 'status')!r}\n{dash.output}",
        )
        wait_until(
            lambda: all(label in shadow_text(browser, "ldp-series-items") for label in labels[:2]),
            30,
            message=lambda: f"the series box; it shows {shadow_text(browser, 'ldp-series-items')!r}",
        )
        # open the series box's drop-down, so Choices.js renders every choice
        browser.execute_script(
            """
            function find(root) {
              const hit = root.querySelector('.choices__inner');
              if (hit) { return hit; }
              for (const el of root.querySelectorAll('*')) {
                if (el.shadowRoot) { const h = find(el.shadowRoot); if (h) { return h; } }
              }
              return null;
            }
            const box = find(document);
            if (box) { box.dispatchEvent(new MouseEvent('mousedown', {bubbles: true})); box.click(); }
            """
        )
        time.sleep(1.0)  # lets an onerror / onload handler fire if one was injected (not a timed assertion)
        assert _injected(browser) == {"xss": None, "found": []}
        table = shadow_text(browser, "ldp-topk-table")
        assert all(label in table for label in labels), table  # row labels and summary labels, as text
        series = shadow_text(browser, "ldp-series-items")
        assert all(label in series for label in labels), series
        assert ids["frequency"] in shadow_text(browser, "ldp-status")
        assert ids["frequency"] in shadow_text(browser, "ldp-task-select")
        assert HOSTILE_TEXTS[0] in shadow_text(browser, "ldp-budget")  # a summary key, as text
        assert HOSTILE_TEXTS[3] in shadow_text(browser, "ldp-reasons-table")  # a dead-letter reason
        assert f"run {HOSTILE_TEXTS[3]} live" in shadow_text(browser, "ldp-freshness")  # the run id

        # the range task: hostile attribute names in the query texts
        browser.execute_script(
            "Bokeh.documents[0].get_model_by_name('task_select').value = arguments[0];", ids["range"]
        )
        query = f"#1: {HOSTILE_TEXTS[1]} in [1, 4], age in [0, 9]"
        wait_until(
            lambda: query in shadow_text(browser, "ldp-topk-table"),
            60,
            message=lambda: f"the range task's queries; table {shadow_text(browser, 'ldp-topk-table')!r}",
        )
        wait_until(
            lambda: query in shadow_text(browser, "ldp-series-items"),
            30,
            message=lambda: f"the queries in the series box: {shadow_text(browser, 'ldp-series-items')!r}",
        )
        assert ids["range"] in shadow_text(browser, "ldp-status")
        time.sleep(1.0)
        assert _injected(browser) == {"xss": None, "found": []}
        severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == [], severe
        browser.get("about:blank")


# -- switching tasks: every table cell and every plotted point is the selected task's, from the store -------
def _expected_windows(store: Any, task_id: str) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The windows table's cells and the windows plot's bars of ``task_id``, from the store's own API."""
    windows = store.windows(task_id, 100)
    latency = {(p["window_start"], p["window_end"], p["pane_index"]): p["latency_ms"] / 1000
               for p in store.pane_latencies(task_id, 100)}  # fmt: skip
    accepted = {(c["window_start"], c["window_end"]): c["accepted"] for c in store.counts(task_id)}
    cells = []
    for w in windows:
        key = (w["window_start"], w["window_end"])
        cells.append([
            shape.format_window(*key), str(w["n_reports"]), str(w["last_pane_index"]), w["last_pane_timing"],
            "final" if w["is_final"] else "open", f"{latency[(*key, w['last_pane_index'])]:.2f}",
            f"{accepted[key]:,}" if key in accepted else "-", shape.format_ms(w["last_written_ms"]),
        ])  # fmt: skip
    bars = [{"glyph": "VBar", "x": [(w["window_start"] + w["window_end"]) / 2 for w in windows],
             "top": [w["n_reports"] for w in windows]}]  # fmt: skip
    return cells, bars


def _expected_counts(store: Any, task_id: str) -> list[dict[str, Any]]:
    """The counts plot: accepted, rejected and late-dropped stacked, read as a dot, per counts window."""
    counts = store.counts(task_id)
    x = [(c["window_start"] + c["window_end"]) / 2 for c in counts]
    levels = [0] * len(counts)
    out = []
    for key in ("accepted", "rejected", "late_dropped"):
        top = [lv + c[key] for lv, c in zip(levels, counts, strict=True)]
        out.append({"glyph": "VBar", "x": x, "bottom": levels, "top": top})
        levels = top
    out.append({"glyph": "Scatter", "x": x, "y": [c["read"] for c in counts]})
    return out


def _expected_topk(store: Any, task_id: str, d: int) -> tuple[list[Any], list[list[str]]]:
    """The top-k plot's bars and whisker ends and the top-k table's cells, from ``Store.current``."""
    window = store.windows(task_id, 1)[0]
    top = store.current(task_id, window["window_start"], window["window_end"], output="estimates", grp=0,
                        top_k=TOP_K)  # fmt: skip
    lo, hi = simultaneous_intervals([r["unbiased"] for r in top], [r["unbiased_std"] for r in top], d,
                                    published=[r["estimate"] for r in top])  # fmt: skip
    names = [LABELS[r["item"]] for r in top]
    plot = [{"glyph": "VBar", "x": names, "top": [r["estimate"] for r in top]},
            {"glyph": "Scatter", "x": names, "y": list(hi)}, {"glyph": "Scatter", "x": names, "y": list(lo)}]
    shown = enumerate(zip(names, top, lo, hi, strict=True), start=1)
    cells = [[str(rank), name, str(r["item"]), f"{r['estimate']:.4f}", f"{a:.4f}", f"{b:.4f}"]
             for rank, (name, r, a, b) in shown]  # fmt: skip
    return plot, cells


def _expected_series(store: Any, task_id: str, d: int, items: list[int]) -> list[dict[str, Any]]:
    """The series plot: for each chosen item, its band, line and dots across every window, from
    ``Store.series``."""
    rows = store.series(task_id, items, last_windows=60)
    out = []
    for item in items:
        mine = [r for r in rows if r["item"] == item]
        lo, hi = simultaneous_intervals([r["unbiased"] for r in mine], [r["unbiased_std"] for r in mine], d,
                                        published=[r["estimate"] for r in mine])  # fmt: skip
        x, y = [r["window_end"] for r in mine], [r["estimate"] for r in mine]
        out += [{"glyph": "VArea", "x": x, "y1": list(lo), "y2": list(hi)}, {"glyph": "Line", "x": x, "y": y},
                {"glyph": "Scatter", "x": x, "y": y}]  # fmt: skip
    return out


def _expected_latency(store: Any, task_id: str) -> list[dict[str, Any]]:
    panes = store.pane_latencies(task_id, 100)
    return [{"glyph": "Scatter", "x": [p["window_end"] for p in panes],
             "y": [p["latency_ms"] / 1000 for p in panes]}]  # fmt: skip


def _same(page: Any, expected: Any) -> bool:
    """``page`` (read in the browser) equals ``expected`` (from the store); floats to 1e-12 relative."""
    if isinstance(expected, dict):
        return isinstance(page, dict) and all(_same(page.get(k), v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(page, list) and len(page) == len(expected) and all(map(_same, page, expected))
    if isinstance(expected, float) or isinstance(page, float):
        return page == pytest.approx(expected, rel=1e-12, abs=1e-15)
    return page == expected


def _page_mismatch(driver: Any, url: str, task_id: str, d: int, first_view: bool) -> list[str]:
    """Every panel of the page that differs from the store's state of ``task_id`` (empty: all equal). The
    series cover the items chosen in the page; on a task's ``first_view`` those are the store's top 5."""
    from store import open_store

    chosen = driver.execute_script(
        "return Bokeh.documents[0].get_model_by_name('series_items').value.map(Number);"
    )
    store = open_store(url, create=False, shared=False)
    try:
        window = store.windows(task_id, 1)[0]
        top5 = [r["item"] for r in store.current(task_id, window["window_start"], window["window_end"],
                                                 output="estimates", grp=0, top_k=5)]  # fmt: skip
        win_cells, win_bars = _expected_windows(store, task_id)
        top_plot, top_cells = _expected_topk(store, task_id, d)
        expected = {
            "windows_table": (table_cells(driver, "windows-table"), win_cells),
            "windows_plot": (plotted(driver, "windows_plot"), win_bars),
            "counts_plot": (plotted(driver, "counts_plot"), _expected_counts(store, task_id)),
            "topk_plot": (plotted(driver, "topk_plot"), top_plot),
            "topk_table": ([row[:6] for row in table_cells(driver, "topk-table") or []], top_cells),
            "series_items": (chosen, top5 if first_view else chosen),
            "series_plot": (plotted(driver, "series_plot"), _expected_series(store, task_id, d, chosen)),
            "latency_plot": (plotted(driver, "latency_plot"), _expected_latency(store, task_id)),
        }
    finally:
        store.close()
    wrong = [f"{name}: page {page!r}\n  store {want!r}" for name, (page, want) in expected.items()
             if not _same(page, want)]  # fmt: skip
    if task_id not in (model_text(driver, "status") or ""):
        wrong.append(f"status names another task: {model_text(driver, 'status')!r}")
    return wrong


def test_switching_tasks_every_cell_and_point_is_the_selected_tasks(browser: Any, store_url: str):
    """Tasks ``a`` and ``b`` hold 3 windows each (the same row count in every table and plot), ``c`` 2:
    after each switch, every cell of the windows and top-k tables and every point of the windows, counts,
    top-k, series and latency plots equals the store's state of the selected task. Then, while ``b`` is
    shown, a new window arrives, and a LATE pane changes a window's figures without changing any row count:
    the page follows both, tables and plots alike."""
    streams = {t: SimulatedStream(task_id=t, users_per_window=2000, seed=s, start_ms=1_795_000_000_000 + o)
               for t, s, o in (("a", 1, 0), ("b", 2, 7_200_000), ("c", 3, 3_600_000))}  # fmt: skip
    d = streams["a"].domain_size
    writer = open_writer(store_url)
    try:
        for task_id, stream in streams.items():
            writer.write_task(task_id, "frequency", "grr", stream.epsilon, stream.summary())
            for index in range(2 if task_id == "c" else 3):
                stream.write_window(writer, index)
    finally:
        writer.close()
    mismatch: list[str] = []

    def shows(task_id: str, first_view: bool = False) -> bool:
        mismatch[:] = _page_mismatch(browser, store_url, task_id, d, first_view)
        return not mismatch

    with DashboardProcess(store_url, "--refresh", "0.5", "--top_k", str(TOP_K), "--task", "a") as dash:
        assert dash.url is not None
        browser.get_log("browser")
        browser.get(dash.url)
        wait_until(lambda: "data-state='live'" in (model_text(browser, "status") or ""), 60,
                   message=lambda: f"the live state; status {model_text(browser, 'status')!r}")  # fmt: skip
        browser.execute_script("window.__ldp_same_page = 'yes';")
        for task_id in ("a", "b", "c", "b"):
            browser.execute_script(
                "Bokeh.documents[0].get_model_by_name('task_select').value = arguments[0];", task_id
            )
            wait_until(lambda t=task_id: shows(t, first_view=True), SHOW_TIMEOUT_S,
                       message=lambda t=task_id: f"task {t}:\n" + "\n".join(mismatch))  # fmt: skip
        writer = open_writer(store_url)
        try:
            streams["b"].write_window(writer, 3, final=False)  # a new window: one more row everywhere
            wait_until(lambda: shows("b"), SHOW_TIMEOUT_S,
                       message=lambda: "b's new window:\n" + "\n".join(mismatch))  # fmt: skip
            window = streams["b"].window(3)
            n = 2500  # a LATE pane of that window: new figures, no new row anywhere
            writer.write_pane(streams["b"].estimate_rows(n), task_id="b", output="estimates", window=window,
                              grp=0, pane_index=2, timing="LATE", n_reports=n,
                              written_ms=window[1] + 9000)  # fmt: skip
            wait_until(lambda: shows("b"), SHOW_TIMEOUT_S,
                       message=lambda: "b's LATE pane:\n" + "\n".join(mismatch))  # fmt: skip
            assert table_cells(browser, "windows-table")[0][1:4] == [str(n), "2", "LATE"]
        finally:
            writer.close()
        assert browser.execute_script("return window.__ldp_same_page;") == "yes"  # no reload
        severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == [], severe
        browser.get("about:blank")
