"""Screenshot of the live dashboard taken by headless Chromium (docs/dashboard.png).

    .venv/bin/python tools/dashboard_screenshot.py [--store URL] [--output docs/dashboard.png]

With ``--store`` the dashboard shows that store (e.g. one a streaming job wrote with ``--store``). Without it
a store is filled in a temporary directory with the simulated streaming task of the panel screenshots
(``pipelines.dashboard_app.screenshots.frequency_store``: 15 windows of one minute ending now, 3,000 reports
each, estimated by the numpy core; an EARLY and an ON_TIME pane per window and a LATE one every fourth
window; the newest window not final yet; the budget figures of a memoized task). The script starts
``python -m pipelines.dashboard`` on a free port, opens it in headless Chromium with no network, waits
until the page shows the store's newest window, and saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipelines.dashboard_app.browser import (  # noqa: E402
    DashboardProcess,
    browser_missing,
    element_rect,
    fit_page,
    headless_chromium,
    model_text,
    page_sources,
    wait_until,
)
from pipelines.dashboard_app.screenshots import frequency_store  # noqa: E402


def _page_height(driver: Any) -> int:
    """The bottom of the page's last panel, the latency summary (else the document's scroll height)."""
    rect = element_rect(driver, "ldp-latency-summary")
    if rect:
        return int(rect[1] + rect[3])
    return int(driver.execute_script("return document.documentElement.scrollHeight;"))


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
        task = args.task or (None if args.store else frequency_store(url, windows=15))
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
                fit_page(driver, args.width, lambda: _page_height(driver))
                Path(args.output).parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(args.output)
            finally:
                driver.quit()
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
