"""The live local path (docs/live.md): the runner plan of every job (transforms.runners.plan_runner), the
watched directory's lagged watermark, progress lines, the latency summary, and (integration) a directory-
streaming job on Prism that writes panes while it runs and whose final panes equal the core's estimates.

The Prism test needs the binary of ``tools/prism/get_prism.sh`` (``LDP_PRISM_BIN`` or ``.cache/prism/prism``);
without it the test is skipped with the reason, or fails under ``LDP_REQUIRE_PRISM=1`` (CI).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import time

import fastavro
import numpy as np
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions, PrismRunnerOptions
from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker
from apache_beam.transforms.periodicsequence import ImpulseSeqGenRestrictionProvider
from apache_beam.utils.timestamp import Timestamp

from ldp.reports import Reports
from ldp.task import WindowConfig, parse_task
from pipelines.cli import setup_logging
from pipelines.live import ChildJob, FileFeeder, Pane, PaneWatcher, latency_summary
from simulator import parse_iso8601_ms
from transforms import progress as progress_mod
from transforms.runners import (
    PRISM_ENV,
    DirectRunnerWithoutPrism,
    LaggedTicks,
    RunnerLimitation,
    default_watermark_lag,
    find_prism_binary,
    plan_runner,
)
from wire.validate import ReportValidator

WINDOW = WindowConfig(size_s=10.0, allowed_lateness_s=0.0, early_firing_s=2.0)


def _opts(*args: str) -> PipelineOptions:
    return PipelineOptions(list(args))


# --------------------------------------------------------------------------------------------------------
# the runner plan
# --------------------------------------------------------------------------------------------------------


def test_direct_runner_never_tries_prism_and_directory_streaming_needs_a_duration():
    plan = plan_runner(_opts(), WINDOW, streaming=False, files=True)
    assert isinstance(plan.runner, DirectRunnerWithoutPrism) and plan.paced and plan.name == "direct"
    assert plan.window == WINDOW  # batch: WindowReports drops early firings itself (effective_window)
    for spelling in ("--runner=DirectRunner", "--runner=direct", "--runner=SwitchingDirectRunner"):
        assert plan_runner(_opts(spelling), WINDOW, streaming=False, files=True).name == "direct"
    with pytest.raises(RunnerLimitation, match=r"--streaming_duration.*--runner=PrismRunner"):
        plan_runner(_opts(), WINDOW, streaming=True, files=True)
    bounded = plan_runner(_opts(), WINDOW, streaming=True, files=True, streaming_duration_s=5)
    assert bounded.window.early_firing_s is None  # the FnApiRunner has no processing-time triggers
    pubsub = plan_runner(_opts(), WINDOW, streaming=True, files=False)  # BundleBasedDirectRunner: live
    assert pubsub.window == WINDOW and isinstance(pubsub.runner, DirectRunnerWithoutPrism)


def test_prism_gets_the_local_binary_or_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv(PRISM_ENV, str(tmp_path / "missing-prism"))
    assert find_prism_binary() is None
    with pytest.raises(RunnerLimitation, match=r"needs the Prism binary.*get_prism\.sh"):
        plan_runner(_opts("--runner=PrismRunner"), WINDOW, streaming=True, files=True)
    fake = tmp_path / "prism"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(PRISM_ENV, str(fake))
    opts = _opts("--runner=PrismRunner")
    plan = plan_runner(opts, WINDOW, streaming=True, files=True)  # no --streaming_duration needed
    assert plan.runner is None and not plan.paced and plan.name == "prism"
    assert opts.view_as(PrismRunnerOptions).prism_location == str(fake)  # never the GitHub download
    given = _opts("--runner=PrismRunner", "--prism_location=/opt/prism")
    plan_runner(given, WINDOW, streaming=False, files=True)
    assert given.view_as(PrismRunnerOptions).prism_location == "/opt/prism"


def test_prism_refuses_pub_sub_io_and_raises_lateness_past_the_early_firing_period(tmp_path, monkeypatch):
    fake = tmp_path / "prism"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(PRISM_ENV, str(fake))
    prism = ("--runner=PrismRunner",)
    with pytest.raises(RunnerLimitation, match="Pub/Sub input does not run on Prism"):
        plan_runner(_opts(*prism), WINDOW, streaming=True, files=False)
    with pytest.raises(RunnerLimitation, match="--output_topic does not run on Prism"):
        plan_runner(_opts(*prism), WINDOW, streaming=True, files=True, output_topic="projects/p/topics/t")
    # the early-firing timer crash of Prism 2.77: lateness >= period + 2 s
    assert plan_runner(_opts(*prism), WINDOW, streaming=True, files=True).window.allowed_lateness_s == 4.0
    late = WindowConfig(size_s=10.0, allowed_lateness_s=30.0, early_firing_s=2.0)
    assert plan_runner(_opts(*prism), late, streaming=True, files=True).window == late
    no_early = WindowConfig(size_s=10.0)
    assert plan_runner(_opts(*prism), no_early, streaming=True, files=True).window == no_early


def test_a_cluster_runner_runs_unpaced_without_adaptation():
    opts = _opts("--runner=FlinkRunner")
    plan = plan_runner(opts, WINDOW, streaming=True, files=True)
    assert plan.runner is None and not plan.paced and plan.window == WINDOW and plan.name == "flink"


# --------------------------------------------------------------------------------------------------------
# the watched directory's watermark
# --------------------------------------------------------------------------------------------------------


def _drive_ticks(fn: LaggedTicks, start_s: float, n: int, interval: float = 1.0):
    provider = ImpulseSeqGenRestrictionProvider()
    element = (Timestamp.of(start_s), Timestamp.of(start_s + n * interval), interval)
    restriction = provider.initial_restriction(element)
    tracker = RestrictionTrackerView(ThreadsafeRestrictionTracker(provider.create_tracker(restriction)))
    estimator = ManualWatermarkEstimator(None)
    return list(fn.process(element, tracker, estimator)), estimator, restriction


def test_lagged_ticks_hold_the_watermark_behind_the_ticks():
    start = float(int(time.time()) - 100)  # ticks in the past: all are due, nothing waits
    plain, plain_wm, restriction = _drive_ticks(LaggedTicks(0.0), start, 5)
    assert restriction == OffsetRange(0, 5)
    lagged, lagged_wm, _ = _drive_ticks(LaggedTicks(3.0), start, 5)
    assert [t.value for t in lagged] == [t.value for t in plain]  # the element is still the tick's time
    assert [t.timestamp for t in plain] == [Timestamp.of(start + k) for k in range(5)]
    assert [t.timestamp for t in lagged] == [Timestamp.of(start + k - 3.0) for k in range(5)]
    assert plain_wm.current_watermark() == Timestamp.of(start + 4)
    assert lagged_wm.current_watermark() == Timestamp.of(start + 1)
    assert default_watermark_lag(1.0) == 3.0 and default_watermark_lag(10.0) == 21.0
    with pytest.raises(ValueError, match="watermark lag"):
        LaggedTicks(-1.0)


# --------------------------------------------------------------------------------------------------------
# progress lines and logging
# --------------------------------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_progress_lines_are_rate_limited_and_count_panes_once(caplog):
    clock = _Clock()
    p = progress_mod.Progress(interval_s=10.0, clock=clock)
    caplog.set_level(logging.INFO, logger="transforms.progress")
    p.add_input(500)
    p.add_input(500, files=1)
    assert p.lines == 0  # not yet 10 s
    clock.t += 10.0
    p.add_input(1000, files=1)
    assert p.lines == 1
    line = caplog.records[-1].getMessage()
    assert line.startswith("progress: 2 file(s), 2,000 reports read (200/s over the last 10 s, 200/s overall")
    w0, w1 = 1_796_117_370_000, 1_796_117_380_000
    for pane, timing in ((0, "EARLY"), (1, "EARLY"), (2, "ON_TIME"), (3, "LATE")):
        p.add_row(w0, w1, pane, timing)
        p.add_row(w0, w1, pane, timing)  # the row of a second group (or output) of the same pane
    assert (p.panes, p.windows_closed) == (4, 1)
    clock.t += 5.0
    assert p.maybe_log() is None
    line = p.maybe_log(force=True)
    assert "4 pane(s) written, 1 window(s) closed" in line
    assert "(last: 2026-12-01T09:29:30Z..09:29:40Z LATE)" in line
    assert "(0/s over the last 5 s, 133/s overall)" in line
    off = progress_mod.Progress(interval_s=0.0, clock=clock)
    clock.t += 100.0
    off.add_input(10, files=1)
    assert off.lines == 0 and off.files == 1


def test_log_level_info_shows_beams_launch_lines_only():
    setup_logging("INFO")
    assert logging.getLogger("apache_beam.runners.dataflow.internal.apiclient").isEnabledFor(logging.INFO)
    assert logging.getLogger("apache_beam.runners.portability.portable_runner").isEnabledFor(logging.INFO)
    assert not logging.getLogger("apache_beam.runners.portability.fn_api_runner").isEnabledFor(logging.INFO)
    assert logging.getLogger("transforms.progress").isEnabledFor(logging.INFO)
    setup_logging("WARNING")
    assert not logging.getLogger("apache_beam.runners.dataflow").isEnabledFor(logging.INFO)
    assert not logging.getLogger("transforms.progress").isEnabledFor(logging.INFO)
    setup_logging("INFO")


# --------------------------------------------------------------------------------------------------------
# the latency summary and the file feeder
# --------------------------------------------------------------------------------------------------------


def _pane(end_s: int, index: int, timing: str, n: int, seen: float) -> Pane:
    return Pane((end_s - 10) * 1000, end_s * 1000, index, timing, n, seen, f"p{end_s}-{index}")


def test_latency_summary_takes_the_on_time_and_the_complete_pane():
    panes = [
        _pane(100, 0, "EARLY", 10, 96.0), _pane(100, 1, "EARLY", 20, 98.0), _pane(100, 2, "EARLY", 25, 101.0),
        _pane(100, 3, "ON_TIME", 25, 102.5),
        _pane(110, 0, "EARLY", 5, 108.0), _pane(110, 1, "LATE", 9, 114.0),  # on-time pane empty: LATE
    ]  # fmt: skip
    s = latency_summary(panes, [100_000, 110_000, 120_000])
    assert (s["windows"], s["with_on_time_pane"], s["missing"]) == (3, 2, 1)
    rows = {r["window_end_ms"]: r for r in s["per_window"]}
    assert rows[100_000]["on_time_latency_s"] == 2.5 and rows[100_000]["complete_latency_s"] == 1.0
    assert rows[100_000]["early_before_end"] == 2 and rows[100_000]["n_reports"] == 25
    assert rows[110_000]["on_time_timing"] == "LATE" and rows[110_000]["on_time_latency_s"] == 4.0
    assert s["on_time_latency_s_median"] == 3.25 and s["on_time_latency_s_max"] == 4.0
    assert s["complete_latency_s_max"] == 4.0


def test_file_feeder_writes_whole_files_with_event_time_now(tmp_path):
    task = parse_task({"task_id": "feed", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})
    before = int(time.time() * 1000)
    feeder = FileFeeder(task, tmp_path / "in", rate=1000, duration_s=0.3, file_interval_s=0.1, seed=1).start()
    assert feeder.finished.wait(30)
    assert feeder.error is None and feeder.files == 3 and feeder.sent == 300
    files = sorted(glob.glob(str(tmp_path / "in" / "*")))
    assert [os.path.basename(f) for f in files] == [f"part-{k:06d}.avro" for k in range(3)]  # no .part left
    validator = ReportValidator(task)
    for f in files:
        with open(f, "rb") as fh:
            batch = validator.validate(list(fastavro.reader(fh)))
        assert len(batch.reports) == 100 and not batch.dead_letters
        assert before <= batch.event_ms.min() <= batch.event_ms.max() <= int(time.time() * 1000)


# --------------------------------------------------------------------------------------------------------
# integration: directory streaming on Prism, live
# --------------------------------------------------------------------------------------------------------


def _prism_or_skip() -> str:
    found = find_prism_binary()
    if found is None:
        if os.environ.get("LDP_REQUIRE_PRISM") == "1":
            pytest.fail("LDP_REQUIRE_PRISM=1 but no Prism binary: run bash tools/prism/get_prism.sh")
        pytest.skip("no Prism binary (bash tools/prism/get_prism.sh builds it; docs/live.md)")
    return found


def _core_windows(task, directory, window_ms):
    """The core's estimate of the reports of every window (by event time) of the files in ``directory``."""
    oracle = task.make_oracle()
    v = ReportValidator(task)
    batches = []
    for f in sorted(glob.glob(os.path.join(directory, "part-*.avro"))):
        with open(f, "rb") as fh:
            batches.append(v.validate(list(fastavro.reader(fh))))
    reports = Reports.concat([b.reports for b in batches])
    starts = (np.concatenate([b.event_ms for b in batches]) // window_ms) * window_ms
    return {int(s): oracle.estimate_reports(reports.take(starts == s)) for s in np.unique(starts)}


def _most_complete_panes(out_dir):
    best: dict[int, dict] = {}
    for f in glob.glob(os.path.join(out_dir, "estimates-*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                ws = parse_iso8601_ms(r["window_start"])
                if ws not in best or r["n_reports"] > best[ws]["n_reports"]:
                    best[ws] = r
    return best


@pytest.mark.integration
@pytest.mark.prism
def test_directory_streaming_on_prism_is_live_and_equals_core(tmp_path):
    """``--streaming --input DIR --runner=PrismRunner`` with no ``--streaming_duration``: while a feeder
    writes a file a second for 16 s (event time = now, 4 s windows, early panes every 1 s, accumulating),
    panes appear before the feeding ends; once it has ended, the most complete pane of every window holds
    exactly the reports with event times in it and equals the core's estimate of them, bit for bit. The
    job is then stopped by its PID (it would run until interrupted)."""
    _prism_or_skip()
    task = parse_task({"task_id": "live-prism", "mechanism": "olh", "epsilon": 1.0, "domain_size": 32})
    (tmp_path / "task.json").write_text(task.to_json())
    incoming, out = tmp_path / "incoming", tmp_path / "out"
    incoming.mkdir()
    cmd = [
        sys.executable, "-m", "pipelines.frequency", "--task", str(tmp_path / "task.json"), "--streaming",
        "--input", str(incoming / "*.avro"), "--watch_interval", "1", "--output", str(out),
        "--window_size", "4", "--early_firing", "1", "--allowed_lateness", "10", "--accumulating",
        "--counts_window", "4", "--runner=PrismRunner", "--progress_interval", "5",
    ]  # fmt: skip
    job = ChildJob(cmd, tmp_path / "job.log")
    watcher = PaneWatcher(out).start()
    feeder = None
    try:
        deadline = time.time() + 120
        while not (out / ".ldp-beam-output.json").exists() and job.running() and time.time() < deadline:
            time.sleep(0.2)
        assert job.running(), job.tail()
        feeder = FileFeeder(task, incoming, rate=500, duration_s=16, file_interval_s=1.0, seed=11).start()
        assert feeder.finished.wait(120) and feeder.error is None, feeder.error
        seen_while_feeding = len(watcher.panes)
        assert seen_while_feeding > 0, f"no pane while the job ran:\n{job.tail()}"
        core = _core_windows(task, incoming, 4000)
        deadline = time.time() + 90  # the last windows close a watermark lag (3 s) after their end
        while time.time() < deadline and job.running():
            best = _most_complete_panes(out)
            if {ws: r["n_reports"] for ws, r in best.items()} == {ws: e.n for ws, e in core.items()}:
                break
            time.sleep(0.5)
        assert job.running(), f"the job stopped by itself:\n{job.tail()}"
    finally:
        if feeder is not None:
            feeder.stop()
        job.stop()
        watcher.stop()
    best = _most_complete_panes(out)
    assert sorted(best) == sorted(core), job.tail()
    for ws, est in core.items():
        rec = best[ws]
        assert rec["n_reports"] == est.n
        assert rec["frequencies"] == est.frequencies.tolist() and rec["std"] == est.std.tolist()
    assert sum(e.n for e in core.values()) == feeder.sent == 16 * 500
    timings = {p.pane_timing for p in watcher.panes}
    assert "EARLY" in timings and "ON_TIME" in timings, timings
    log = (tmp_path / "job.log").read_text()
    assert "INFO transforms.progress: progress: " in log and " file(s), " in log, log[-3000:]


def test_streaming_on_job_server_runners_keeps_the_state_stream_open():
    """Beam's default --job_server_timeout (300 s) is the deadline of a portable job's state stream: a
    streaming job on Prism or Flink would die after five minutes (seen in a 10-minute soak)."""
    from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

    from transforms.runners import STREAMING_JOB_SERVER_TIMEOUT_S, keep_job_state_stream_open

    for runner in ("prism", "flink", "portable"):
        opts = PipelineOptions([f"--runner={runner.title()}Runner"])
        keep_job_state_stream_open(opts, runner)
        assert opts.view_as(PortableOptions).job_server_timeout == STREAMING_JOB_SERVER_TIMEOUT_S
    given = PipelineOptions(["--runner=PrismRunner", "--job_server_timeout=50"])
    keep_job_state_stream_open(given, "prism")
    assert given.view_as(PortableOptions).job_server_timeout == 50
    direct = PipelineOptions([])
    keep_job_state_stream_open(direct, "direct")
    assert direct.view_as(PortableOptions).job_server_timeout == 300
