"""Expected against observed error: ``ldp.plan.expected_vs_observed`` per result row, the job's summary
entry (``OUT/counts.json``, the store's run summary) and the dashboard's table and flags.

The observed spread is the RMS of a row's unbiased estimates below 0; for values of frequency 0 it
estimates the std itself (the half-normal's second moment is the normal's), so a row of ``m`` such
estimates has a ratio within about ``1 / sqrt(2 m)`` of 1 (7% at m = 100); the flag rule's margin is
1.25 + 3 / sqrt(2 m)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from ldp.kinds.frequency.plan import frequency_std
from ldp.plan import expected_vs_observed
from ldp.task import parse_task
from pipelines.dashboard_app import markup, shape

TASK = {"task_id": "obs", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024}
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _row(unbiased, n, start=None, pane=0, group=0):
    return {"window_start": start, "window_end": None if start is None else start + 60_000,
            "pane_index": pane, "group": group, "n_reports": n, "unbiased": list(map(float, unbiased))}


@pytest.mark.statistical
def test_noise_at_the_planned_level_passes_and_inflated_noise_is_flagged():
    task = parse_task(TASK)
    n = 50_000
    sd = frequency_std(task.make_oracle(), n)
    rng = np.random.default_rng(5)
    planned = rng.normal(0.0, sd, 1024)
    doubled = rng.normal(0.0, 2.0 * sd, 1024)
    check = expected_vs_observed(task, [_row(planned, n, T0), _row(doubled, n, T0 + 60_000)])
    ok, bad = check["windows"]
    # about 512 estimates below 0 each: a Monte Carlo error of the ratio about 3%
    assert ok["negatives"] > 400 and abs(ok["ratio"] - 1.0) < 0.15 and ok["flag"] is None and ok["judged"]
    assert ok["predicted_std"] == pytest.approx(sd)
    assert bad["ratio"] > 1.7 and bad["flag"] == "above plan"
    shrunk = expected_vs_observed(task, [_row(rng.normal(0, 0.3 * sd, 1024), n)])["windows"][0]
    assert shrunk["flag"] == "below plan"
    ten_below = np.r_[np.full(1014, 0.01), -np.full(10, 5 * sd)]
    few = expected_vs_observed(task, [_row(ten_below, n)])["windows"][0]
    assert few["negatives"] == 10 and not few["judged"] and few["flag"] is None
    assert "1.25 + 3 / sqrt(2 m)" in check["rule"]


def test_kinds_without_the_check_give_none():
    numeric = parse_task({"task_id": "n", "kind": "numeric", "mechanism": "hybrid", "epsilon": 1.0,
                          "attributes": [{"name": "x", "low": 0, "high": 1}]})
    assert expected_vs_observed(numeric, [{"n_reports": 10}]) is None


def test_the_dashboard_shows_both_and_flags_a_window_far_off_its_plan():
    rows = [
        {"window_start": 1000, "window_end": 2000, "pane_index": 0, "group": 0, "n_reports": 5000,
         "predicted_std": 0.01, "observed_std": 0.03, "ratio": 3.0, "negatives": 400, "judged": True,
         "flag": "above plan"},
        {"window_start": 1000, "window_end": 2000, "pane_index": 1, "group": 0, "n_reports": 9000,
         "predicted_std": 0.008, "observed_std": 0.024, "ratio": 3.0, "negatives": 420, "judged": True,
         "flag": "above plan"},
        {"window_start": 2000, "window_end": 3000, "pane_index": 0, "group": 0, "n_reports": 9000,
         "predicted_std": 0.008, "observed_std": 0.0081, "ratio": 1.01, "negatives": 450, "judged": True,
         "flag": None},
    ]
    summary = {"run": {"expected_vs_observed": {"rule": "observed <b>rule</b>", "windows": rows}}}
    got, older, rule = shape.plan_check_rows(summary)
    assert older == 0 and rule == "observed <b>rule</b>"
    assert [(r["window"], r["n"], r["flag"]) for r in got] == [("2000 - 3000", 9000, None),
                                                                ("1000 - 2000", 9000, "above plan")]
    html = markup.plan_check_html(summary)
    assert "id='plan-check'" in html and "observed &lt;b&gt;rule&lt;/b&gt;" in html and "<b>rule" not in html
    assert html.count("class='flagged'") == 1 and "above plan" in html and "as planned" in html
    assert "0.008" in html and "0.0081" in html and "3.000" in html
    assert markup.plan_check_html({}) == "" and shape.plan_check_rows(None) == ([], 0, None)
    assert "id='plan-check'" in markup.budget_html(summary, [], [], "the store")


def _run_job(tmp_path, name, copies):
    """A frequency job over ``20000 / copies`` simulated users whose report files are read ``copies``
    times (duplicated reports: the counts' noise grows by sqrt(copies) at the same n)."""
    import simulator
    from pipelines import frequency

    task = parse_task({**TASK, "task_id": name})
    (tmp_path / f"{name}.json").write_text(task.to_json())
    src = tmp_path / f"{name}-in"
    simulator.simulate_files(task, 20_000 // copies, "zipf", src, seed=9, files=1, start_ms=T0,
                             duration_s=60.0)
    originals = sorted(src.glob("reports-*.avro"))
    for i in range(1, copies):
        for f in originals:
            shutil.copy(f, f.with_name(f"reports-copy{i}-{f.name[len('reports-'):]}"))
    out = tmp_path / f"{name}-out"
    frequency.run(["--task", str(tmp_path / f"{name}.json"), "--input", str(src / "reports-*.avro"),
                   "--output", str(out)])
    return json.loads((out / "counts.json").read_text())["expected_vs_observed"]


@pytest.mark.integration
@pytest.mark.statistical
def test_the_job_writes_the_plan_beside_each_windows_spread(tmp_path):
    """20,000 reports, d = 1024, OLH at eps 1: hundreds of zipf tail values of frequency near 0 give the
    spread (ratio within 15% of 1 here; the rule's margin is 25%+); the same n made of four copies of
    5,000 users' reports has twice the noise and is flagged."""
    (ok,) = _run_job(tmp_path, "honest", 1)["windows"]
    assert ok["n_reports"] == 20_000 and ok["judged"] and ok["flag"] is None, ok
    assert abs(ok["ratio"] - 1.0) < 0.15 and ok["predicted_std"] == pytest.approx(
        math.sqrt(parse_task(TASK).make_oracle().variance(20_000)))
    (dup,) = _run_job(tmp_path, "copied", 4)["windows"]
    assert dup["n_reports"] == 20_000 and dup["flag"] == "above plan" and dup["ratio"] > 1.6, dup
