"""The project's frequency pipeline, batch and streaming, on Apache Flink through Beam's portable FlinkRunner.

Each test starts the Beam Flink job server (a Java process running an embedded Flink mini-cluster,
``--flink_master=[local]``) from a jar, and runs the Python SDK harness in this process
(``--environment_type=LOOPBACK``). The jar comes from ``LDP_FLINK_JOB_SERVER_JAR`` or from the cache that
``bash tools/flink/get_job_server.sh`` fills (``.cache/flink/job-server.jar``); without a jar, or
without ``java``, the tests are skipped with the reason. ``LDP_SKIP_FLINK=1`` skips them on purpose.
See docs/flink.md.

* batch: ``pipelines.frequency`` over simulated Avro report files with bad records of every kind; the
  estimate equals the core's on the same reports exactly, and the Beam counters and dead letters account
  for every record;
* streaming: ``pipelines.frequency --streaming --input 'DIR/*.avro'`` (the directory-watch source:
  ``PeriodicImpulse`` ticks -> match -> first sighting per path -> read) with 2 s event-time windows,
  early firings, allowed lateness and accumulating panes; the watch is bounded, so every window closes
  and the job ends by itself. Flink may emit more than one pane per window (docs/flink.md), so the
  assertions are on the most complete pane of each window, which must equal the core exactly.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

beam = pytest.importorskip("apache_beam")

import simulator  # noqa: E402
from pipelines import frequency  # noqa: E402
from wire.records import now_ms  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flink_helpers import dead_letter_reasons, hang_guard, olh_task  # noqa: E402
from test_pipeline_frequency import (  # noqa: E402
    _core_reports,
    _drop_in,
    _estimates,
    _ms_iso,
    assert_windows_equal_core,
)

REPO = Path(__file__).resolve().parents[1]
CACHED_JAR = REPO / ".cache" / "flink" / "job-server.jar"
# A Flink run that hangs would block CI forever (``frequency.run`` waits for the job): after this many
# seconds the test process dumps every thread's stack and exits. A run takes 15-35 s here.
HANG_TIMEOUT_S = 300


def _job_server_jar() -> str:
    """Returns the job-server jar to use, or skips the calling test with the reason.

    With ``LDP_REQUIRE_FLINK=1`` (CI, after ``get_job_server.sh``) a missing jar or ``java`` fails instead.
    """
    if os.environ.get("LDP_SKIP_FLINK") == "1":
        pytest.skip("LDP_SKIP_FLINK=1")
    unavailable = pytest.fail if os.environ.get("LDP_REQUIRE_FLINK") == "1" else pytest.skip
    configured = os.environ.get("LDP_FLINK_JOB_SERVER_JAR")
    jar = Path(configured) if configured else CACHED_JAR
    if not jar.is_file():
        source = "LDP_FLINK_JOB_SERVER_JAR" if configured else "the cache"
        unavailable(
            f"no Flink job-server jar at {jar} (from {source}): run `bash tools/flink/get_job_server.sh` "
            "or set LDP_FLINK_JOB_SERVER_JAR (docs/flink.md)"
        )
    if shutil.which("java") is None:
        unavailable("the Flink job server needs `java` on PATH")
    return str(jar.resolve())


@pytest.fixture(scope="module")
def job_server_jar() -> str:
    return _job_server_jar()


def _flink_args(jar: str, *extra: str) -> list[str]:
    return [
        "--runner=FlinkRunner",
        "--flink_master=[local]",
        f"--flink_job_server_jar={jar}",
        "--environment_type=LOOPBACK",
        *extra,
    ]


@pytest.mark.integration
@pytest.mark.flink
def test_frequency_batch_pipeline_on_flink(job_server_jar: str, tmp_path: Path) -> None:
    """20,000 OLH reports in 2 Avro files plus every kind of bad record (and an undecodable file)."""
    task = olh_task("flink-batch")
    (tmp_path / "task.json").write_text(task.to_json())
    truth = simulator.simulate_files(
        task, 20_000, "zipf", tmp_path / "in", seed=5, files=2, start_ms=1_767_225_600_000,
        duration_s=600.0, inject_bad=1,
    )  # fmt: skip
    out = tmp_path / "out"
    args = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro")]
    args += ["--output", str(out), *_flink_args(job_server_jar, "--parallelism=2")]
    started = time.monotonic()
    with hang_guard(HANG_TIMEOUT_S):
        summary = frequency.run(args)
    elapsed = time.monotonic() - started
    assert "DONE" in summary["state"]

    bad = truth["bad_records"]
    c = summary["counts"]  # Beam counters (committed) read back from the Flink job
    assert c["read"] == 20_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    assert c["accepted"] == 20_000 and c["rejected"] == sum(bad.values())
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    assert dead_letter_reasons(out) == sorted(r for r, k in bad.items() for _ in range(k))

    (est,) = _estimates(out)  # one global window, one group
    oracle = task.make_oracle()
    reports, _ = _core_reports(task, tmp_path / "in")
    core = oracle.estimate_reports(reports)
    assert est["n_reports"] == core.n == 20_000 and est["window_start"] is None
    assert est["frequencies"] == core.frequencies.tolist() and est["std"] == core.std.tolist()
    print(f"flink batch frequency pipeline: {elapsed:.1f} s")


@pytest.mark.integration
@pytest.mark.flink
def test_frequency_directory_streaming_on_flink(job_server_jar: str, tmp_path: Path) -> None:
    """Directory-watch streaming on Flink; two of the three report files appear while the job runs.

    Reports of two user groups have event times over 6 s from now (2 s windows). The job watches for
    20 s after it starts (the ticks are rebased to the job's start, so the Flink start-up does not count).
    The first report file and the bad files are there from the start; the other two are dropped in
    once the job demonstrably runs (its first 2 s count window was written), so their reports are
    behind the watermark by then and the 60 s allowed lateness keeps them (late panes). With early
    firings every second and accumulating panes, the most complete pane of each window must hold
    exactly its reports and equal the core.
    """
    task = olh_task("flink-stream", n_groups=2)
    (tmp_path / "task.json").write_text(task.to_json())
    stage, watched, out = tmp_path / "stage", tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    truth = simulator.simulate_files(
        task, 20_000, "zipf", stage, seed=6, files=3, start_ms=(now_ms() // 2000) * 2000, duration_s=6.0,
        inject_bad=1,
    )  # fmt: skip
    staged = sorted(glob.glob(str(stage / "reports-*.avro")))
    ahead_ms = (now_ms() // 2000) * 2000 + 60_000
    # 2,000 more reports with event times a minute ahead: their windows stay open while the job runs,
    # so early panes fire for them (every second of processing time) before the on-time pane at the end.
    simulator.simulate_files(
        task, 2_000, "uniform", tmp_path / "ahead", seed=7, files=1, start_ms=ahead_ms, duration_s=2.0,
    )  # fmt: skip
    (ahead,) = glob.glob(str(tmp_path / "ahead" / "reports-*.avro"))
    os.replace(ahead, stage / "reports-ahead.avro")
    for f in [staged[0], stage / "reports-ahead.avro", *glob.glob(str(stage / "bad-*.avro"))]:
        _drop_in(f, watched)
    _drop_in(stage / "garbage.avro", watched)
    running_at: list[float] = []

    def later() -> None:
        deadline = time.monotonic() + 120
        while not glob.glob(str(out / "counts" / "counts-*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)
        running_at.append(time.monotonic() - started)
        for f in staged[1:]:
            _drop_in(f, watched)
            time.sleep(1.0)

    mover = threading.Thread(target=later, daemon=True)
    args = ["--task", str(tmp_path / "task.json"), "--streaming", "--input", str(watched / "*.avro")]
    args += ["--output", str(out), "--watch_interval", "1", "--streaming_duration", "20"]
    args += ["--window_size", "2", "--early_firing", "1", "--allowed_lateness", "60", "--accumulating"]
    args += ["--counts_window", "2", "--dead_letter_window", "5"]
    args += _flink_args(job_server_jar, "--parallelism=2")
    started = time.monotonic()
    mover.start()
    with hang_guard(HANG_TIMEOUT_S):
        summary = frequency.run(args)
    elapsed = time.monotonic() - started
    mover.join()
    assert "DONE" in summary["state"]  # the watch ended, every window closed, the job finished

    bad = truth["bad_records"]
    c = summary["counts"]  # the closed count windows of OUT/counts/
    assert c["read"] == 22_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    assert c["accepted"] == 22_000
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    assert dead_letter_reasons(out) == sorted(r for r, k in bad.items() for _ in range(k))
    assert_windows_equal_core(task, stage, out, 2000, 22_000)
    rows = _estimates(out)
    early = {(r["group"], r["window_start"]) for r in rows if r["pane_timing"] == "EARLY"}
    # The windows a minute ahead stay open while the job runs, so they must have had early panes (other
    # windows may too, if their reports reach the trigger before the watermark does). Checked only when
    # the runner carries pane info through (it did in every run here; docs/flink.md has a setup where
    # it did not, then every pane reads ON_TIME with index 0).
    if any(r["pane_timing"] != "ON_TIME" or r["pane_index"] > 0 for r in rows):
        assert any(_ms_iso(ws) >= ahead_ms for _, ws in early), early
    panes = sorted((r["window_start"][11:19], r["group"], r["pane_timing"], r["n_reports"]) for r in rows)
    print(f"flink directory streaming: {elapsed:.1f} s, first count window at {running_at[0]:.1f} s; {panes}")


def test_missing_jar_is_a_clean_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LDP_SKIP_FLINK", raising=False)
    monkeypatch.delenv("LDP_REQUIRE_FLINK", raising=False)
    monkeypatch.setenv("LDP_FLINK_JOB_SERVER_JAR", str(tmp_path / "absent.jar"))
    with pytest.raises(pytest.skip.Exception, match="get_job_server.sh"):
        _job_server_jar()
    monkeypatch.setenv("LDP_REQUIRE_FLINK", "1")
    with pytest.raises(pytest.fail.Exception, match="get_job_server.sh"):
        _job_server_jar()
