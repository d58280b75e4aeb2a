"""The browser demo: the collector serving the TypeScript client's page, reports encoded in a real browser.

The fast tests run the collector with ``--demo_page`` in a thread of this process (content types, the task,
path traversal refused). The end-to-end test (``browser`` marker, integration tier) builds the client (``npm
run build``, unless ``dist/`` is newer than its sources), runs ``python -m pipelines.browser_demo`` (the
streaming job on Prism over the collector's directory with ``--require_done_marker`` and ``--store sqlite``,
the collector with the page, the dashboard), and in headless Chromium picks values on the page, sends them,
sends 3,000 simulated browser clients and one refused report; then it checks every hop's counts, the store's
windows against the core's estimate of the collector's files, and the dashboard page against the store.

Skipped with the reason without chromium / chromedriver / selenium (``LDP_REQUIRE_BROWSER=1``: fail),
without node / npm (``LDP_REQUIRE_NODE=1``) or without the Prism binary (``LDP_REQUIRE_PRISM=1``).
"""

from __future__ import annotations

import functools
import http.client
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from test_collect import Server

from ldp.reports import Reports
from ldp.task import load_task, resolve_task
from pipelines import collect
from pipelines.browser_demo import BROWSER_LABELS, TASK_ID, collector_metrics, store_summary
from wire.validate import ReportValidator

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"


# ---- the page, served by the collector -------------------------------------------------------------------
@pytest.fixture
def demo_dir(tmp_path: Path) -> Path:
    """A built-package stand-in: ``demo/index.html``, ``dist/demo/demo.js``, ``dist/src/index.js``, a
    declaration file, a hidden script, a link out of ``dist`` and a secret next to the package."""
    root = tmp_path / "pkg"
    (root / "demo").mkdir(parents=True)
    (root / "demo" / "index.html").write_text("<!doctype html><title>demo</title>\n")
    (root / "dist" / "demo").mkdir(parents=True)
    (root / "dist" / "demo" / "demo.js").write_text("import './../src/index.js';\n")
    (root / "dist" / "src").mkdir()
    (root / "dist" / "src" / "index.js").write_text("export const x = 1;\n")
    (root / "dist" / "src" / "index.d.ts").write_text("export declare const x: number;\n")
    (root / "dist" / ".hidden.js").write_text("hidden\n")
    (root / "package.js").write_text("outside dist\n")
    (tmp_path / "secret.js").write_text("secret\n")
    (root / "dist" / "link.js").symlink_to(tmp_path / "secret.js")
    return root


def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=b"" if method == "POST" else None)  # the path is sent as given
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.fixture
def demo_server(
    demo_dir: Path, frequency_task_file, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Server, Any]]:
    """The collector of a GRR task (d = 8, labelled) with ``demo_dir`` as its demo page, in a thread."""
    task_path = frequency_task_file(mechanism="grr", epsilon=2.0, domain_size=8, labels=list(BROWSER_LABELS))
    task = load_task(task_path)
    demo = collect.DemoPage(demo_dir, json.dumps(resolve_task(task)))
    with monkeypatch.context() as patch:
        patch.setattr(collect, "serve", functools.partial(collect.serve, demo=demo))  # what Server calls
        server = Server(task_path, tmp_path / "out")  # returns once the server listens
    try:
        yield server, task
    finally:
        server.stop()


def test_demo_page_scripts_and_task_are_served_with_their_content_types(demo_server):
    server, task = demo_server
    status, headers, body = _get(server.port, "/")
    assert status == 200 and body.startswith(b"<!doctype html>")
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in headers["content-security-policy"]
    for path in ("/dist/demo/demo.js", "/dist/src/index.js"):
        status, headers, body = _get(server.port, path)
        assert (status, headers["content-type"]) == (200, "text/javascript; charset=utf-8"), path
    status, headers, body = _get(server.port, "/v1/task")
    assert status == 200 and headers["content-type"] == "application/json"
    served = json.loads(body)
    assert served == resolve_task(task) and served["labels"] == list(BROWSER_LABELS)
    assert served["resolved"]["oracles"][0]["mechanism"] == "grr"
    # the page's GETs are not report requests: the counts stay at zero
    assert server.metrics()["received"] == 0


@pytest.mark.parametrize(
    "path",
    [
        "/dist/../package.js",  # out of dist
        "/dist/%2e%2e/package.js",  # the same, escaped
        "/dist/..%2fpackage.js",
        "/dist/src/..%2f..%2f..%2fsecret.js",
        "/dist/%2e%2e%2f%2e%2e%2fsecret.js",
        "/dist//etc/passwd.js",  # an empty part: never an absolute path
        "/dist/%2fetc%2fpasswd.js",
        "/dist/src/index.d.ts",  # not a script
        "/dist/.hidden.js",
        "/dist/link.js",  # a link out of dist
        "/dist/src/missing.js",
        "/dist/src%5c..%5c..%5cpackage.js",  # backslashes
        "/dist/src/index.js%00.js",
        "/package.js",
        "/demo/index.html",  # only at /
    ],
)
def test_demo_paths_outside_the_scripts_are_refused(demo_server, path):
    server, _ = demo_server
    status, headers, body = _get(server.port, path)
    assert status == 404 and headers["content-type"] == "application/json", (path, status)
    assert json.loads(body)["error"] == "not_found"
    assert b"secret" not in body and b"outside" not in body


def test_demo_endpoints_take_get_only_and_exist_only_with_demo_page(demo_server, olh_task_path, tmp_path):
    server, _ = demo_server
    for path in ("/", "/v1/task", "/dist/src/index.js"):
        status, _, body = _get(server.port, path, method="POST")
        assert status == 405 and json.loads(body)["error"] == "method_not_allowed", path
    plain = Server(olh_task_path, tmp_path / "plain")
    try:
        for path in ("/", "/v1/task", "/dist/src/index.js"):
            status, _, body = _get(plain.port, path)
            assert status == 404 and json.loads(body)["error"] == "not_found", path
    finally:
        plain.stop()


@pytest.fixture
def olh_task_path(frequency_task_file) -> Path:
    return frequency_task_file("olh.json")


def test_demo_page_needs_the_built_client_and_a_frequency_task(tmp_path, range_task_file, capsys):
    with pytest.raises(ValueError, match=r"no .*demo\.js .*npm ci && npm run build"):
        collect.DemoPage(tmp_path, "{}")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        collect.run(
            ["--task", str(range_task_file()), "--output_dir", str(out), "--demo_page", str(tmp_path)]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "error: --demo_page needs a frequency task (the TypeScript client's oracles), not range"
    )
    assert len(err.splitlines()) == 1


# ---- end to end in headless Chromium -------------------------------------------------------------------
WINDOW_S = 12
LATENESS_S = 6
N_SIMULATED = 3000
BATCH = 100  # the collector's --max_batch by default
PICKS = ("green", "blue", "green")


def _need(what: str, env: str, reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get(env) == "1":
        pytest.fail(f"{env}=1 but {reason}")
    pytest.skip(f"{what}: {reason}")


def _client_is_built() -> bool:
    """``dist/demo/demo.js`` exists and is newer than every TypeScript source, config and the lock file
    (an earlier test built it, e.g. ``npm test`` in tests/test_typescript_client.py): no second build."""
    built = PACKAGE / "dist" / "demo" / "demo.js"
    if not built.is_file():
        return False
    inputs = [*PACKAGE.glob("src/*.ts"), *PACKAGE.glob("demo/*.ts"), PACKAGE / "tsconfig.json",
              PACKAGE / "demo" / "tsconfig.json", PACKAGE / "package-lock.json"]
    return all(p.stat().st_mtime <= built.stat().st_mtime for p in inputs)


def _build_client() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    _need("node", "LDP_REQUIRE_NODE", None if node and npm else "node / npm not found on PATH")
    if _client_is_built():
        return
    steps = (
        [] if (PACKAGE / "node_modules" / "typescript").is_dir() else [[npm, "ci", "--no-audit", "--no-fund"]]
    )
    for cmd in [*steps, [npm, "run", "build"]]:
        proc = subprocess.run(cmd, cwd=PACKAGE, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _wait(predicate: Any, timeout: float, message: Any, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:g} s waiting for {message() if callable(message) else message}"
            )
        time.sleep(interval)


def _core_windows(task: Any, directory: Path) -> dict[tuple[int, int], Any]:
    """The core's estimate of the reports of the collector's files, per event-time window."""
    oracle = task.make_oracle()
    validator = ReportValidator(task)
    batches = []
    for f in sorted(directory.glob("collect-*.avro")):
        with open(f, "rb") as fh:
            batches.append(validator.validate(list(fastavro.reader(fh))))
    reports = Reports.concat([b.reports for b in batches])
    size = WINDOW_S * 1000
    starts = (np.concatenate([b.event_ms for b in batches]) // size) * size
    return {
        (int(s), int(s) + size): oracle.estimate_reports(reports.take(starts == s)) for s in np.unique(starts)
    }


def _stop_pids(pids: list[int]) -> None:
    """Kills the process groups of the demo's children left running (each leads its own group)."""
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.prism
@pytest.mark.node
def test_reports_encoded_in_the_browser_reach_the_store_and_the_dashboard(tmp_path, record_property):
    from pipelines.dashboard_app.browser import browser_missing, headless_chromium, model_text, page_sources
    from pipelines.live import ChildJob
    from transforms.runners import find_prism_binary

    _need("browser", "LDP_REQUIRE_BROWSER", browser_missing())
    _need(
        "Prism",
        "LDP_REQUIRE_PRISM",
        None if find_prism_binary() else "no Prism binary (tools/prism/get_prism.sh)",
    )
    t0 = time.monotonic()
    _build_client()
    work = tmp_path / "demo"
    demo = ChildJob(
        [sys.executable, "-m", "pipelines.browser_demo", "--workdir", str(work), "--port", "0",
         "--dashboard_port", "0", "--window_size", str(WINDOW_S), "--early_firing", "2",
         "--allowed_lateness", str(LATENESS_S), "--log_level", "INFO"],
        tmp_path / "demo.log",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    driver = None
    pids: list[int] = []
    try:

        def demo_line(pattern: str) -> re.Match[str] | None:
            """The demo's first log line matching ``pattern``; fails when the demo has exited."""
            if not demo.running():
                raise AssertionError(f"the demo exited ({demo.proc.returncode}):\n{_read_log(demo.log_path)}")
            return re.search(pattern, _read_log(demo.log_path))

        page_url = _wait(lambda: demo_line(r"page: (http://\S+/)"), 180, lambda: _read_log(demo.log_path))[1]
        dash_url = demo_line(r"dashboard \(pid \d+\): (http://\S+)")[1]
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", _read_log(demo.log_path))]
        assert len(pids) == 3, _read_log(demo.log_path)
        started_s = time.monotonic() - t0

        driver = headless_chromium(1200, 1000)
        driver.get(page_url)
        _wait(lambda: driver.execute_script("return window.ldpDemo && window.ldpDemo.ready"), 30,
              lambda: driver.find_element("id", "status").text)  # fmt: skip
        assert TASK_ID in driver.find_element("id", "task").text
        from selenium.webdriver.support.ui import Select

        options = [o.text for o in Select(driver.find_element("id", "value")).options]
        assert options == list(BROWSER_LABELS)

        # send inside one event-time window (windows are aligned to multiples of their size)
        def time_left_ms() -> int:
            now = int(time.time() * 1000)
            return WINDOW_S * 1000 - now % (WINDOW_S * 1000)

        _wait(lambda: time_left_ms() > 8000, WINDOW_S + 1, "a window with 8 s left")

        def tally() -> dict[str, Any]:
            return driver.execute_script("return window.ldpDemo.tally")

        for i, colour in enumerate(PICKS):
            Select(driver.find_element("id", "value")).select_by_visible_text(colour)
            driver.find_element("id", "send").click()
            _wait(lambda i=i: tally()["requests"] == i + 1 and not tally()["busy"], 30, tally)
        assert tally()["reportsAccepted"] == len(PICKS)
        last = json.loads(driver.find_element("id", "last").text)
        assert last["task_id"] == TASK_ID and 0 <= last["value"] < len(BROWSER_LABELS)
        for field, value in (("n", N_SIMULATED), ("batch", BATCH)):
            box = driver.find_element("id", field)
            box.clear()
            box.send_keys(str(value))
        driver.find_element("id", "simulate").click()
        n_requests = len(PICKS) + math.ceil(N_SIMULATED / BATCH)
        _wait(lambda: tally()["requests"] == n_requests and not tally()["busy"], 60, tally)
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == [], severe  # no script error, no failed load (favicon included)
        # one refused request: the last report with a value outside the domain (422, nothing written)
        answer = driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            const report = JSON.parse(document.getElementById('last').textContent);
            report.value = 99;
            fetch('/v1/reports', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                  body: JSON.stringify({reports: [report]})})
              .then(r => r.json().then(b => done([r.status, b]))).catch(e => done([0, String(e)]));
            """
        )
        assert answer[0] == 422 and answer[1]["error"] == "out_of_domain", answer
        sent = tally()
        n_accepted = len(PICKS) + N_SIMULATED
        assert (sent["requestsAccepted"], sent["requestsRefused"], sent["reportsAccepted"]) == (
            n_requests,
            0,
            n_accepted,
        ), sent
        assert sum(sent["truth"]) == n_accepted and sent["errors"] == []
        for colour in set(PICKS):
            assert sent["truth"][BROWSER_LABELS.index(colour)] >= PICKS.count(colour)

        # the collector: received = accepted + rejected; its closed files hold every accepted report
        metrics = collector_metrics(page_url)
        assert metrics["received"] == metrics["accepted"] + metrics["rejected"] == n_requests + 1
        assert (metrics["accepted"], metrics["rejected_by"]) == (n_requests, {"out_of_domain": 1})
        assert (metrics["reports_accepted"], metrics["reports_refused"]) == (n_accepted, 1)
        metrics = _wait(
            lambda: (m := collector_metrics(page_url))["reports_open"] == 0 and m, 30, "the files to close"
        )
        assert metrics["reports_written"] == n_accepted
        incoming = work / "incoming"
        markers = sorted(incoming.glob("collect-*.avro.done"))
        assert len(markers) == metrics["files_written"] >= 1
        assert sum(json.loads(m.read_text())["reports"] for m in markers) == n_accepted
        task = load_task(work / "task.json")
        core = _core_windows(task, incoming)
        assert sum(e.n for e in core.values()) == n_accepted

        # the job (Prism, the watched directory): every window final in the store, equal to the core
        store_url = f"sqlite:///{work / 'estimates.db'}"

        def stored() -> dict[str, Any] | None:
            demo_line("")  # the demo (and so every process it started) still runs
            s = store_summary(store_url)
            windows = {(w["window_start"], w["window_end"]): w for w in s["windows"]}
            done = (
                set(windows) == set(core)
                and all(w["is_final"] and w["n_reports"] == core[k].n for k, w in windows.items())
                and s["counts"].get("accepted") == n_accepted
            )
            return s if done else None

        summary = _wait(
            stored, 90, lambda: f"{store_summary(store_url)}\n{_read_log(work / 'job.log')[-3000:]}"
        )
        stored_s = time.monotonic() - t0
        counts = summary["counts"]
        assert counts["read"] == counts["accepted"] + counts["rejected"] == n_accepted, counts
        assert (counts["lost"], counts["late_dropped"]) == (0, 0), counts
        from store import open_store

        store = open_store(store_url, create=False, shared=False)
        try:
            rows = {k: store.current(TASK_ID, *k, output="estimates", grp=0) for k in core}
        finally:
            store.close()
        for k, est in core.items():
            assert [r["item"] for r in rows[k]] == list(range(len(BROWSER_LABELS)))
            assert [r["unbiased"] for r in rows[k]] == est.frequencies.tolist(), k
            assert all(r["n_reports"] == est.n and r["is_final"] for r in rows[k])
        # the pooled estimate (n-weighted over windows: the estimator is linear in the support counts)
        # against the true values the page sent: GRR's variance of f_v is
        # (q (1 - q) + f_v (p - q)(1 - p - q)) / (n (p - q)^2); 5 standard deviations per value
        e = math.exp(task.epsilon)
        d = len(BROWSER_LABELS)
        p, q = e / (e + d - 1), 1 / (e + d - 1)
        truth = np.array(sent["truth"], dtype=float) / n_accepted
        pooled = sum(est.n * est.frequencies for est in core.values()) / n_accepted
        sd = np.sqrt((q * (1 - q) + truth * (p - q) * (1 - p - q)) / (n_accepted * (p - q) ** 2))
        assert np.all(np.abs(pooled - truth) <= 5 * sd), (pooled, truth, sd)

        # the dashboard shows the latest window's estimates, equal to the store's, and that it is final
        latest = max(core, key=lambda k: k[1])
        want = sorted(rows[latest], key=lambda r: (-r["estimate"], r["item"]))
        driver.get(dash_url)

        def dashboard_shows() -> bool:
            data = (page_sources(driver, ["topk_source"]) or {}).get("topk_source") or {}
            if not data.get("item") or (int(data["window_start"][0]), int(data["window_end"][0])) != latest:
                return False
            shown = [(int(i), float(x)) for i, x in zip(data["item"], data["estimate"])]
            return shown == [(int(r["item"]), float(r["estimate"])) for r in want[: len(shown)]]

        _wait(dashboard_shows, 60, lambda: f"the dashboard's top-k: {page_sources(driver, ['topk_source'])}")
        _wait(
            lambda: "(final)" in (model_text(driver, "status") or ""),
            30,
            lambda: model_text(driver, "status"),
        )
        driver.get("about:blank")
    finally:
        if driver is not None:
            driver.quit()
        demo.stop(grace_s=60)
        _stop_pids(pids)
    log = _read_log(demo.log_path)
    final = json.loads(re.search(r"collector's final counts: (\{.*\})", log)[1])
    assert final["received"] == final["accepted"] + final["rejected"] == n_requests + 1
    assert final["reports_written"] == final["reports_accepted"] == n_accepted and final["reports_open"] == 0
    record_property("demo_started_s", round(started_s, 1))
    record_property("store_final_s", round(stored_s, 1))
    print(f"demo up {started_s:.1f} s; every window final in the store {stored_s:.1f} s after the start")


# ---- a page on another origin posts through the TypeScript client (CORS) -----------------------------------
_CROSS_PAGE = """<!doctype html><meta charset="utf-8"><title>cross-origin</title>
<script type="module">
import { Client, postReports } from "/dist/src/index.js";
window.result = null;
const task = %(task)s;
const client = Client.fromTask(task);
const values = [];
const posts = [];
for (let k = 0; k < %(requests)d; k++) {
  const reports = [];
  for (let i = 0; i < %(per)d; i++) {
    const v = (k + i) %% task.domain_size; values.push(v); reports.push(client.encode(v));
  }
  posts.push(postReports(%(url)s, reports, { retries: 2 }));
}
Promise.all(posts).then((a) => { window.result = { accepted: a.map((x) => x.accepted), values }; },
                        (e) => { window.result = { error: String(e) }; });
</script>"""


@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.node
def test_a_page_on_another_origin_posts_through_the_typescript_client(tmp_path, frequency_task_file):
    """The page is served from one port (a static server of the built client), the collector listens on
    another with ``--allow_origin`` naming the page's origin: the browser's preflight and the posts pass, and
    the collector's files hold exactly the page's reports. A collector without the origin gets none."""
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from pipelines.dashboard_app.browser import browser_missing, headless_chromium

    _need("chromium", "LDP_REQUIRE_BROWSER", browser_missing())
    _build_client()
    task_path = frequency_task_file()
    task = json.loads(task_path.read_text())
    site = tmp_path / "site"
    (site / "dist").mkdir(parents=True)
    shutil.copytree(PACKAGE / "dist" / "src", site / "dist" / "src")

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(site), **kw)

        def log_message(self, *a: Any) -> None:
            pass

    page_server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=page_server.serve_forever, daemon=True).start()
    page_origin = f"http://127.0.0.1:{page_server.server_address[1]}"
    import asyncio

    from pipelines.collector import Collector, RollingAvroWriter, make_checker

    got: dict[str, Any] = {}
    ready = threading.Event()

    def main(out: Path, origins: list[str], slot: str) -> None:
        async def go() -> None:
            got[slot + "stop"] = asyncio.Event()
            got[slot + "loop"] = asyncio.get_running_loop()
            coll = Collector(make_checker(load_task(task_path)), RollingAvroWriter(out))

            def on_ready(port: int) -> None:
                got[slot] = port
                ready.set()

            stop = got[slot + "stop"]
            await collect.serve(coll, "127.0.0.1", 0, stop=stop, ready=on_ready, origins=origins)

        asyncio.run(go())

    driver = None
    threads = []
    try:
        results = {}
        for slot, origins in (("yes", [page_origin]), ("no", ["http://elsewhere.test"])):
            ready.clear()
            th = threading.Thread(target=main, args=(tmp_path / slot, origins, slot), daemon=True)
            th.start()
            threads.append((slot, th))
            assert ready.wait(10)
            url = f"http://127.0.0.1:{got[slot]}/v1/reports"
            (site / f"{slot}.html").write_text(
                _CROSS_PAGE % {"task": json.dumps(task), "requests": 5, "per": 40, "url": json.dumps(url)}
            )
            if driver is None:
                driver = headless_chromium()
            driver.get(f"{page_origin}/{slot}.html")
            page = driver
            results[slot] = _wait(lambda p=page: p.execute_script("return window.result"), 60, "the posts")
        assert results["yes"].get("accepted") == [40] * 5, results["yes"]
        assert "error" in results["no"], results["no"]  # the browser blocks the post of a foreign page
    finally:
        if driver is not None:
            driver.quit()
        for slot, th in threads:
            got[slot + "loop"].call_soon_threadsafe(got[slot + "stop"].set)
            th.join(30)
        page_server.shutdown()
    stored = []
    for p in sorted((tmp_path / "yes").glob("collect-*.avro")):
        with open(p, "rb") as fh:
            stored += [r["value"] for r in fastavro.reader(fh)]
    assert len(stored) == 200 and not list((tmp_path / "no").glob("collect-*.avro"))
