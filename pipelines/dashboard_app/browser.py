"""Drive the dashboard in a real headless browser: the dashboard's browser tests and its screenshot script.

* :class:`DashboardProcess` starts ``python -m pipelines.dashboard --port 0`` in a subprocess, reads the URL
  it prints and stops it by PID;
* :func:`headless_chromium` opens Debian's Chromium through Selenium and ``chromedriver`` (both paths
  overridable with ``LDP_CHROMIUM`` / ``LDP_CHROMEDRIVER``), headless, with no network access beyond the
  dashboard's own address (a proxy that refuses everything else);
* :func:`page_sources` reads what the page holds, from BokehJS's document in the browser (the data the
  plots draw), and :func:`shadow_text` the text of a Bokeh ``Div`` (rendered in a shadow root).

Selenium is a test dependency; this module imports it only when a browser is opened.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DashboardProcess",
    "browser_missing",
    "element_rect",
    "fit_page",
    "headless_chromium",
    "model_text",
    "page_sources",
    "plotted",
    "table_cells",
    "record_topk_changes",
    "seen_ms",
    "shadow_text",
    "wait_until",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LDP_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LDP_CHROMEDRIVER", "/usr/bin/chromedriver")


def browser_missing() -> str | None:
    """Why no headless browser can run here (the reason, for a skip), or None when one can."""
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromedriver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"no {what} at {path} (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    return None


class DashboardProcess:
    """``python -m pipelines.dashboard --store URL --port 0 ARGS...`` in a subprocess.

    ``start()`` waits for the ``dashboard: URL`` line (``url``); ``stop()`` ends the process by its PID
    (SIGINT, then SIGKILL after a grace period). Its output is kept in ``output`` for failure messages.
    """

    def __init__(self, store_url: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "pipelines.dashboard",
            "--store",
            store_url,
            "--port",
            "0",
            "--address",
            "127.0.0.1",
            *args,
        ]
        self.env = dict(os.environ if env is None else env)
        self.env["PYTHONPATH"] = str(REPO_ROOT) + (
            os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else ""
        )
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def start(self, timeout: float = 60.0) -> DashboardProcess:
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=str(REPO_ROOT),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        found = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                match = re.match(r"dashboard: (http://\S+)", line)
                if match and self.url is None:
                    self.url = match.group(1)
                    found.set()
            found.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        if not found.wait(timeout) or self.url is None:
            self.stop()
            raise RuntimeError(f"the dashboard did not start within {timeout:g} s:\n{self.output}")
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        self.proc = None

    def __enter__(self) -> DashboardProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def headless_chromium(width: int = 1400, height: int = 1000) -> Any:
    """A Selenium Chrome driver on Debian's Chromium, headless; every host but 127.0.0.1 / localhost goes to a
    proxy address that refuses connections, so nothing is fetched from the network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=127.0.0.1;localhost",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = Service(executable_path=CHROMEDRIVER)
    return webdriver.Chrome(options=opts, service=service)


_SOURCES_JS = """
const doc = (window.Bokeh && Bokeh.documents && Bokeh.documents[0]) || null;
if (!doc) { return null; }
const out = {};
for (const name of arguments[0]) {
  const m = doc.get_model_by_name(name);
  if (m == null) { out[name] = null; continue; }
  const data = {};
  for (const [k, v] of (m.data instanceof Map ? m.data.entries() : Object.entries(m.data))) {
    data[k] = Array.from(v);
  }
  out[name] = data;
}
return out;
"""


def page_sources(driver: Any, names: Sequence[str]) -> dict[str, dict[str, list[Any]] | None] | None:
    """The data of the named ``ColumnDataSource``\\ s as BokehJS holds them in the page (None before the
    document exists; a name the page lacks maps to None)."""
    return driver.execute_script(_SOURCES_JS, list(names))


_PLOTTED_JS = """
const doc = (window.Bokeh && Bokeh.documents && Bokeh.documents[0]) || null;
const plot = doc && doc.get_model_by_name(arguments[0]);
if (!plot) { return null; }
function resolve(spec, source) {
  if (spec == null || typeof spec !== 'object') { return null; }
  if ('field' in spec) {
    const col = source.get_column(spec.field);
    return col == null ? null : Array.from(col);
  }
  if ('expr' in spec) { return Array.from(spec.expr.v_compute(source)); }
  return null;
}
const out = [];
for (const r of plot.renderers) {
  const g = r.glyph;
  if (!g || !r.data_source || !r.visible || r.data_source.get_length() === 0) { continue; }
  const item = {glyph: g.type, alpha: g.fill_alpha === undefined ? null : g.fill_alpha};
  for (const attr of ['x', 'y', 'top', 'bottom', 'y1', 'y2']) {
    if (attr in g) { item[attr] = resolve(g[attr], r.data_source); }
  }
  out.push(item);
}
return out;
"""


def plotted(driver: Any, plot: str) -> list[dict[str, Any]] | None:
    """What the named plot draws, read from BokehJS in the page: one entry per visible glyph renderer with
    data, its ``glyph`` type and each coordinate (``x``, ``y``, ``top``, ``bottom``, ``y1``, ``y2``)
    resolved against the renderer's own data source (a stacked bar's ``top`` and ``bottom`` computed by
    its stack expression). None before the page's document exists."""
    return driver.execute_script(_PLOTTED_JS, plot)


_CELLS_JS = """
const id = arguments[0];
function find(root) {
  const hit = root.getElementById ? root.getElementById(id) : root.querySelector('#' + id);
  if (hit) { return hit; }
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) { const h = find(el.shadowRoot); if (h) { return h; } }
  }
  return null;
}
const table = find(document);
if (!table) { return null; }
return Array.from(table.querySelectorAll('tr')).filter(tr => tr.querySelector('td'))
  .map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent));
"""


def table_cells(driver: Any, table_id: str) -> list[list[str]] | None:
    """The rendered text of every body cell of the HTML table ``#table_id`` (looked for in every open
    shadow root), row by row; None when the page has no such table."""
    return driver.execute_script(_CELLS_JS, table_id)


_TEXT_JS = """
const doc = (window.Bokeh && Bokeh.documents && Bokeh.documents[0]) || null;
if (!doc) { return null; }
const m = doc.get_model_by_name(arguments[0]);
return m == null ? null : m.text;
"""


def model_text(driver: Any, name: str) -> str | None:
    """The ``text`` of the named Bokeh model (a ``Div``) in the page's document."""
    return driver.execute_script(_TEXT_JS, name)


#: ``el``: the first element of CSS class ``arguments[0]``, looked for in the document and in every open
#: shadow root (Bokeh renders its widgets inside them), or null.
_FIND_CLASS_JS = """
const cls = arguments[0];
function find(root) {
  const hit = root.querySelector('.' + cls);
  if (hit) { return hit; }
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) { const h = find(el.shadowRoot); if (h) { return h; } }
  }
  return null;
}
const el = find(document);
"""

_TEXT_OF_JS = _FIND_CLASS_JS + """
if (!el) { return ''; }
const parts = [];
function collect(node) {
  if (node.shadowRoot) { collect(node.shadowRoot); }
  for (const c of node.childNodes) {
    if (c.nodeType === 3) { parts.push(c.textContent); continue; }
    const skip = c.nodeType === 1 && (c.tagName === 'STYLE' || c.tagName === 'SCRIPT');
    if (!skip && (c.nodeType === 1 || c.nodeType === 11)) { collect(c); }
  }
}
collect(el);
return parts.join(' ').replace(/\\s+/g, ' ').trim();
"""

_RECT_JS = _FIND_CLASS_JS + """
if (!el) { return null; }
const r = el.getBoundingClientRect();
return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height, window.devicePixelRatio];
"""


def shadow_text(driver: Any, css_class: str) -> str:
    """The rendered text of the element with CSS class ``css_class`` (a Bokeh widget renders inside a
    shadow root, so this looks into every open shadow root); ``""`` when the page has none."""
    return driver.execute_script(_TEXT_OF_JS, css_class)


def element_rect(driver: Any, css_class: str) -> list[float] | None:
    """``[x, y, width, height, device pixel ratio]`` of the element with CSS class ``css_class`` in page
    coordinates (CSS pixels; looked for in every open shadow root), or None when the page has none."""
    return driver.execute_script(_RECT_JS, css_class)


def fit_page(driver: Any, width: int, height: Callable[[], int] | None = None) -> None:
    """Grows the browser window until the page (``height()``, default the document's scroll height) fits
    in it, so that one screenshot holds all of it; the layout may reflow, so this tries five times."""
    for _ in range(5):
        if height is None:
            want = int(driver.execute_script("return document.documentElement.scrollHeight;")) + 20
        else:
            want = int(height()) + 20
        inner = int(driver.execute_script("return window.innerHeight;"))
        if abs(want - inner) < 10:
            return
        outer = driver.get_window_size()["height"]
        driver.set_window_size(width, want + outer - inner)
        time.sleep(1.0)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition",
) -> Any:
    """Polls ``predicate`` until it returns a truthy value (returned) or ``timeout`` seconds pass
    (``TimeoutError`` naming ``message``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {text}")
        time.sleep(interval)


_RECORDER_JS = """
window.__ldp_seen = window.__ldp_seen || {};
if (!window.__ldp_recorder) {
  window.__ldp_recorder = setInterval(() => {
    const doc = (window.Bokeh && Bokeh.documents && Bokeh.documents[0]) || null;
    const m = doc && doc.get_model_by_name('topk_source');
    if (!m) { return; }
    const d = m.data instanceof Map ? Object.fromEntries(m.data) : m.data;
    if (!d.window_end || d.window_end.length === 0) { return; }
    const key = `${d.window_start[0]}/${d.window_end[0]}/${Math.max(...Array.from(d.pane_index))}`;
    if (!(key in window.__ldp_seen)) { window.__ldp_seen[key] = Date.now(); }
  }, 20);
}
"""


def record_topk_changes(driver: Any) -> None:
    """Starts recording, in the page, when the top-k first shows each ``(window, pane)``: every 20 ms the
    browser's clock is noted for a new ``window_start/window_end/pane_index`` key (see :func:`seen_ms`)."""
    driver.execute_script(_RECORDER_JS)


def seen_ms(driver: Any) -> dict[tuple[int, int, int], int]:
    """``(window_start, window_end, pane_index) -> epoch ms`` when the page's top-k first showed it."""
    raw = driver.execute_script("return window.__ldp_seen || {};")
    out: dict[tuple[int, int, int], int] = {}
    for key, value in raw.items():
        ws, we, pane = (int(float(x)) for x in key.split("/"))
        out[(ws, we, pane)] = int(value)
    return out
