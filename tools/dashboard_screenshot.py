"""Screenshot of the live dashboard taken by headless Chromium (docs/dashboard.png).

    .venv/bin/python tools/dashboard_screenshot.py [--store URL] [--output docs/dashboard.png]

With ``--store`` the dashboard shows that store (e.g. one a streaming job wrote with ``--store``). Without it
a store is filled in a temporary directory from a simulated streaming run (pipelines.dashboard_app.simulated:
windows of one minute ending now, 3,000 reports each, estimated by the numpy core; an EARLY and an ON_TIME
pane per window and a LATE one every fourth window; the newest window not final yet). The script starts
``python -m pipelines.dashboard`` on a free port, opens it in headless Chromium with no network, waits
until the page shows the store's newest window, and saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipelines.dashboard_app.browser import (  # noqa: E402
    DashboardProcess,
    browser_missing,
    headless_chromium,
    model_text,
    page_sources,
    wait_until,
)
from pipelines.dashboard_app.simulated import SimulatedStream, open_writer  # noqa: E402

_PAGE_HEIGHT_JS = """
let h = 0;
function walk(root) {
  for (const el of root.querySelectorAll('*')) {
    if (el.classList && el.classList.contains('ldp-latency-summary')) {
      h = Math.max(h, el.getBoundingClientRect().bottom + window.scrollY);
    }
    if (el.shadowRoot) { walk(el.shadowRoot); }
  }
}
walk(document);
return h || Math.max(document.body.scrollHeight, document.documentElement.scrollHeight);
"""


def simulated_store(url: str, windows: int = 15) -> str:
    """Fills ``url`` with ``windows`` simulated one-minute windows ending now; returns the task id."""
    now = int(time.time() * 1000)
    end = now - now % 60_000
    stream = SimulatedStream(start_ms=end - windows * 60_000, users_per_window=3000)
    summary = stream.summary()
    try:  # the accounting figures the longitudinal helpers put in a task summary, when that code is present
        from ldp.longitudinal.accounting import budget_summary
        from ldp.longitudinal.budget import parse_budget
        from ldp.oracles import make_oracle

        policy = parse_budget(
            {"epsilon_per_report": stream.epsilon, "reports_per_period": 1440, "period_s": 86_400}
        )
        summary["budget"] = budget_summary(
            policy, make_oracle("grr", stream.epsilon, stream.domain_size), windows
        )
    except Exception as exc:  # noqa: BLE001 - a screenshot without budget figures is still useful
        print(f"(no budget figures: {type(exc).__name__}: {exc})", file=sys.stderr)
    writer = open_writer(url)
    try:
        writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, summary)
        for index in range(windows):
            stream.write_window(writer, index, final=index < windows - 1)
    finally:
        writer.close()
    return stream.task_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store to show (default: a simulated streaming run in a temp dir)")
    parser.add_argument("--output", default=str(REPO / "docs" / "dashboard.png"), help="PNG to write")
    parser.add_argument("--width", type=int, default=1400, help="browser width in pixels")
    parser.add_argument("--task", help="task id to show")
    args = parser.parse_args(argv)
    reason = browser_missing()
    if reason:
        print(f"dashboard_screenshot: error: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ldp-dash-") as tmp:
        url = args.store or f"sqlite:///{tmp}/estimates.db"
        task = args.task or (None if args.store else simulated_store(url))
        extra = ["--task", task] if task else []
        with DashboardProcess(url, *extra) as dash:
            driver = headless_chromium(args.width, 1000)
            try:
                assert dash.url is not None
                driver.get(dash.url)
                wait_until(
                    lambda: "data-state='live'" in (model_text(driver, "status") or ""),
                    60,
                    message=lambda: f"the page's first window; status {model_text(driver, 'status')!r}",
                )
                wait_until(
                    lambda: (page_sources(driver, ["topk_source"]) or {}).get("topk_source"),
                    30,
                    message="the top-k data",
                )
                time.sleep(1.5)  # let the canvases finish drawing
                for _ in range(5):  # grow the window until the whole page fits (the layout reflows)
                    height = int(driver.execute_script(_PAGE_HEIGHT_JS)) + 20
                    inner = int(driver.execute_script("return window.innerHeight;"))
                    if abs(height - inner) < 10:
                        break
                    outer = driver.get_window_size()["height"]
                    driver.set_window_size(args.width, height + outer - inner)
                    time.sleep(1.0)
                Path(args.output).parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(args.output)
            finally:
                driver.quit()
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
