"""Screenshots of the dashboard's panels, taken by headless Chromium (docs/img/dashboard/*.png).

    .venv/bin/python -m pipelines.dashboard_app.screenshots [--out docs/img/dashboard] [--width 1300]

Fills a store in a temporary directory with a simulated streaming frequency task (one-minute windows ending
now, an EARLY and an ON_TIME pane per window, a LATE one every fourth, the newest window not final; its
summary holds the budget figures ``ldp.task.budget_summary`` gives a memoized task), a numeric task
(windows of the aggregator's own rows over simulated delays) and two heavy-hitters tasks (the aggregator's
rows over simulated words, one-window and trie mode), starts ``python -m pipelines.dashboard`` on a
free port, opens it with no network, and saves one PNG per panel (the panel's element cropped from a
full-page screenshot) for each task. Exit status 2 with one line when no browser can run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipelines.dashboard_app.browser import (
    DashboardProcess,
    browser_missing,
    element_rect,
    fit_page,
    headless_chromium,
    model_text,
    wait_until,
)
from pipelines.dashboard_app.simulated import SimulatedStream, open_writer

__all__ = [
    "FREQUENCY_PANELS",
    "HH_PANELS",
    "NUMERIC_PANELS",
    "TRIE_PANELS",
    "frequency_store",
    "heavy_hitters_store",
    "main",
    "numeric_store",
]

REPO = Path(__file__).resolve().parents[2]
#: Panels of the frequency task: (CSS class without ``ldp-``, file name).
FREQUENCY_PANELS = (
    ("status", "status"),
    ("budget", "budget"),
    ("topk-plot", "topk_plot"),
    ("topk-table", "topk_table"),
    ("series-plot", "series_plot"),
    ("windows-plot", "windows_plot"),
    ("windows-table", "windows_table"),
    ("counts-plot", "counts_plot"),
    ("counts-note", "counts_note"),
    ("reasons-table", "reasons_table"),
    ("latency-plot", "latency_plot"),
)
NUMERIC_PANELS = (("numeric-plot", "numeric_plot"), ("numeric-table", "numeric_table"))
HH_PANELS = (("hh-table", "hh_table"), ("hh-series-plot", "hh_series_plot"))
TRIE_PANELS = (("hh-trie-plot", "hh_trie_plot"), ("hh-trie-table", "hh_trie_table"))

_SELECT_JS = "Bokeh.documents[0].get_model_by_name('task_select').value = arguments[0];"


def frequency_store(url: str, windows: int = 12) -> str:
    """Writes the simulated frequency task (``windows`` one-minute windows ending now); returns its id."""
    from ldp.task import budget_summary, parse_task

    now = int(time.time() * 1000)
    end = now - now % 60_000
    stream = SimulatedStream(task_id="browsers", start_ms=end - windows * 60_000, users_per_window=3000)
    summary = stream.summary()
    memo = parse_task({"task_id": "browsers", "mechanism": "memo-olh", "epsilon": stream.epsilon,
                       "domain_size": stream.domain_size, "window": {"size_s": 60},
                       "budget": {"reports_per_period": 24, "period_s": 86_400}})  # fmt: skip
    summary["budget"] = budget_summary(memo)
    writer = open_writer(url)
    try:
        writer.write_task(stream.task_id, "frequency", "grr", stream.epsilon, summary)
        for index in range(windows):
            stream.write_window(writer, index, final=index < windows - 1)
    finally:
        writer.close()
    return stream.task_id


def numeric_store(url: str, windows: int = 8, seed: int = 2026) -> str:
    """Writes a numeric task (square wave over ``delay_ms`` in [0, 500], quantiles 0.5 / 0.9 / 0.99) with
    ``windows`` one-minute windows of the aggregator's own rows; returns its id."""
    import numpy as np

    from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window, make_aggregator
    from ldp.task import parse_task
    from store import open_store

    task_obj = {"task_id": "delays", "kind": "numeric", "mechanism": "square-wave", "epsilon": 1.0,
                "params": {"bins": 64}, "attributes": [{"name": "delay_ms", "low": 0, "high": 500}],
                "quantiles": [0.5, 0.9, 0.99]}  # fmt: skip
    task = parse_task(task_obj)
    agg, mech = make_aggregator(task, replicas=4), task.make_mechanism()
    rng = np.random.default_rng(seed)
    now = int(time.time() * 1000)
    start = now - now % 60_000 - windows * 60_000
    store = open_store(url, shared=False)
    try:
        store.write_task("delays", kind="numeric", mechanism="square-wave", epsilon=1.0,
                         task_json=json.dumps(task_obj))  # fmt: skip
        for w in range(windows):
            reports = mech.encode(rng.lognormal(4.0 + 0.05 * w, 0.7, 4000), rng=rng)
            acc = accumulate(agg, GroupAccumulators(), 0, reports)
            ws, we = start + w * 60_000, start + (w + 1) * 60_000
            (row,) = finalize_window(agg, acc, WindowInfo(ws, we, "ON_TIME", 0, True))
            store.write_pane("delays", ws, we, 0, "ON_TIME", [row], written_ms=we + 1500)
            store.mark_final("delays", ws, we, final_ms=we + 61_000)
    finally:
        store.close()
    return "delays"


def heavy_hitters_store(url: str, windows: int = 6, trie: bool = False) -> str:
    """Writes a heavy-hitters task (``simulated.write_heavy_hitters_windows``: one-minute windows ending now
    of the aggregator's rows over drifting words; ``trie``: the trie mode); returns its id."""
    from pipelines.dashboard_app.simulated import heavy_hitters_task, write_heavy_hitters_windows
    from store import open_store

    task = heavy_hitters_task("new-words-trie" if trie else "new-words")
    if trie:
        task["mode"] = "trie"
    now = int(time.time() * 1000)
    store = open_store(url, shared=False)
    try:
        write_heavy_hitters_windows(store, task, now - now % 60_000 - windows * 60_000, windows)
    finally:
        store.close()
    return str(task["task_id"])


def _shoot(driver: Any, panels: tuple[tuple[str, str], ...], out: Path, width: int) -> list[Path]:
    """One PNG per panel, cropped from a full-page screenshot; returns the files written."""
    from PIL import Image

    fit_page(driver, width)
    time.sleep(1.5)  # let the canvases finish drawing
    full = out / "_page.png"
    driver.save_screenshot(str(full))
    written = []
    with Image.open(full) as page:
        for css, name in panels:
            rect = element_rect(driver, f"ldp-{css}")
            if not rect or rect[3] < 2:
                print(f"screenshots: panel {css} not on the page", file=sys.stderr)
                continue
            x, y, w, h, ratio = rect
            box = tuple(int(round(v * ratio)) for v in (x, y, x + w, y + h))
            path = out / f"{name}.png"
            page.crop(box).save(path, optimize=True)
            written.append(path)
    full.unlink()
    return written


def _show(driver: Any, task_id: str) -> None:
    """Selects ``task_id`` in the page and waits until the status line shows it live."""
    wait_until(lambda: driver.execute_script("return !!(window.Bokeh && Bokeh.documents[0]);"), 60,
               message="the page's document")  # fmt: skip
    driver.execute_script(_SELECT_JS, task_id)
    wait_until(
        lambda: task_id in (model_text(driver, "status") or "")
        and "data-state='live'" in (model_text(driver, "status") or ""),
        60,
        message=lambda: f"task {task_id} on the page; status {model_text(driver, 'status')!r}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "img" / "dashboard"), help="directory of PNGs")
    parser.add_argument("--width", type=int, default=1300, help="browser width in pixels")
    args = parser.parse_args(argv)
    reason = browser_missing()
    if reason:
        print(f"screenshots: error: {reason}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ldp-dash-") as tmp:
        url = f"sqlite:///{tmp}/estimates.db"
        freq, numeric = frequency_store(url), numeric_store(url)
        words, trie = heavy_hitters_store(url), heavy_hitters_store(url, windows=7, trie=True)
        with DashboardProcess(url, "--task", freq) as dash:
            driver = headless_chromium(args.width, 1000)
            try:
                assert dash.url is not None
                driver.get(dash.url)
                _show(driver, freq)
                written = _shoot(driver, FREQUENCY_PANELS, out, args.width)
                _show(driver, numeric)
                written += _shoot(driver, NUMERIC_PANELS, out, args.width)
                _show(driver, words)
                written += _shoot(driver, HH_PANELS, out, args.width)
                _show(driver, trie)
                written += _shoot(driver, TRIE_PANELS, out, args.width)
                driver.get("about:blank")
            finally:
                driver.quit()
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
