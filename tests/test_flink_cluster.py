"""The frequency and range jobs on a real multi-process Flink session cluster, and a worker lost mid-stream.

``tools/flink/cluster.sh start`` (run by the module fixture, in a run directory of its own under pytest's
tmp) starts a JobManager and two TaskManagers (4 slots each) as separate JVMs from Flink 1.19.0 jars
(tools/flink/cluster-pom.xml), the Beam job server submitting to it, a Python SDK worker pool (the
EXTERNAL environment) and the expansion service of the watch's checkpointed Java ticks; the jobs run
through ``cluster.sh args`` (``--runner=PortableRunner --job_endpoint=... --watch_ticks=flink ...``) at
``--parallelism=4``. Streaming jobs are checkpointed every second (the cluster's configuration: RocksDB
state on local disk, checkpoints to RUN_DIR/checkpoints, fixed-delay restarts); a watch ends by a drain
after ``--streaming_duration`` (transforms/flink_ticks.py).

* batch, frequency and range: the estimate / answers equal the core's on the same reports exactly, and
  every record is accounted for (read = accepted + rejected, dead letters with their reasons);
* directory streaming, frequency and range: files dropped in while the job runs; the most complete pane
  of every window equals the core's over exactly the reports with event times in it;
* failover (``pytest -m failover``): a checkpointed directory-streaming job; once a checkpoint has
  completed and part of the files were read, TaskManager 1 is killed with SIGKILL; the job restarts
  from the checkpoint on the surviving TaskManager, the rest of the files are dropped in, and every
  window's final estimate equals the core's: no report lost or counted twice.

The parts (java, mvn, the job-server jar, the cluster's jars) come from ``bash tools/flink/cluster.sh
fetch``; without them the tests skip with the reason, and fail instead with ``LDP_REQUIRE_FLINK=1`` (CI).
``LDP_SKIP_FLINK=1`` skips them on purpose. A hung job would block the test: the hang guard dumps the
stacks and exits after :data:`HANG_TIMEOUT_S`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

import simulator  # noqa: E402
from ldp.rangequery.queries import RangeQuery, random_queries  # noqa: E402
from pipelines import frequency, range_queries  # noqa: E402
from wire.records import now_ms  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import process_running  # noqa: E402
from flink_helpers import dead_letter_reasons, hang_guard, olh_task  # noqa: E402
from test_pipeline_frequency import (  # noqa: E402
    _core_reports,
    _drop_in,
    _estimates,
    assert_windows_equal_core,
)
from test_pipeline_range_queries import _core_model, _jsonl, _write_queries  # noqa: E402
from test_pipeline_range_queries import _core_reports as _range_core_reports  # noqa: E402
from test_pipeline_range_queries import _task as _range_task  # noqa: E402

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SH = REPO / "tools" / "flink" / "cluster.sh"
CACHED_JAR = REPO / ".cache" / "flink" / "job-server.jar"
CLUSTER_LIB = REPO / ".cache" / "flink" / "cluster-1.19.0" / "lib"
HANG_TIMEOUT_S = 420
SEEDS = np.random.SeedSequence(2026_12_01_12).spawn(8)
PARALLELISM = "--parallelism=4"
# The checkpoint interval Beam's Flink runner must know (transforms.flink_options) and the watch's clock,
# the Java ticks of --watch_ticks=flink (a Flink source checkpointed natively; the drain ends the job),
# come with cluster.sh args. On top: bundles finished at each checkpoint; idle Impulse sources (the job's
# Create steps) shut down after 5 s (Flink 1.19 checkpoints a job with finished tasks).
FAILOVER_FLAGS = (
    "--finish_bundle_before_checkpointing",
    "--shutdown_sources_after_idle_ms=5000",
)


def _seed(i: int) -> int:
    return int(SEEDS[i].generate_state(1)[0])


def cluster_parts_missing() -> str | None:
    """Why the cluster cannot be started here (None: it can)."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    jar = Path(os.environ.get("LDP_FLINK_JOB_SERVER_JAR") or CACHED_JAR)
    if not jar.is_file():
        return f"no Flink job-server jar at {jar}"
    if not (CLUSTER_LIB / ".complete").is_file():
        return f"no Flink cluster jars in {CLUSTER_LIB}"
    return None


def _require_parts() -> None:
    if os.environ.get("LDP_SKIP_FLINK") == "1":
        pytest.skip("LDP_SKIP_FLINK=1")
    why = cluster_parts_missing()
    if why:
        msg = f"{why}: run `bash tools/flink/cluster.sh fetch` (docs/flink.md)"
        (pytest.fail if os.environ.get("LDP_REQUIRE_FLINK") == "1" else pytest.skip)(msg)


class Cluster:
    """A running ``tools/flink/cluster.sh`` cluster (its run dir, endpoints and pipeline flags)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.env = {**os.environ, "LDP_FLINK_RUN_DIR": str(run_dir), "LDP_FLINK_CHECKPOINT_MS": "1000"}
        jar = os.environ.get("LDP_FLINK_JOB_SERVER_JAR")
        if jar:
            self.env["LDP_FLINK_JOB_SERVER_JAR"] = jar

    def sh(self, *args: str, timeout: float = 240) -> str:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SH), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"cluster.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        return proc.stdout

    def start(self) -> Cluster:
        self.args = self.sh("start").strip().splitlines()[-1].split()
        conf = dict(
            line.split("=", 1)
            for line in (self.run_dir / "cluster.env").read_text().splitlines()
            if "=" in line
        )
        self.rest = f"http://{conf['LDP_FLINK_MASTER']}"
        self.prometheus = conf["LDP_FLINK_PROMETHEUS"].split(",")
        return self

    def stop(self) -> None:
        self.sh("stop", timeout=120)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.rest + path, timeout=10) as resp:
            return json.load(resp)

    def pid(self, name: str) -> int:
        return int((self.run_dir / f"{name}.pid").read_text())

    def running_job(self) -> str | None:
        jobs = [j for j in self.get("/jobs/overview")["jobs"] if j["state"] == "RUNNING"]
        return jobs[0]["jid"] if jobs else None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    _require_parts()
    c = Cluster(tmp_path_factory.mktemp("flink-cluster") / "run")
    try:
        c.start()
    except Exception:
        with contextlib.suppress(Exception):
            c.stop()
        raise
    try:
        yield c
    finally:
        c.stop()


class _Scraper:
    """Scrapes the cluster's Prometheus endpoints (Flink's reporter, tools/flink/prometheus) every
    ``interval`` s while a job runs, and keeps for each metric the largest sum over its samples (the job's
    subtasks on both TaskManagers) seen in one scrape."""

    def __init__(self, endpoints: list[str], prefix: str, interval: float = 0.5) -> None:
        self.endpoints, self.prefix, self.interval = endpoints, prefix, interval
        self.peak: dict[str, float] = {}
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        while not self._stop.is_set():
            sums: dict[str, float] = {}
            for ep in self.endpoints:
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"http://{ep}/metrics", timeout=5) as resp:
                        text = resp.read().decode()
                    for fam in text_string_to_metric_families(text):
                        for smp in fam.samples:
                            if smp.name.startswith(self.prefix):
                                sums[smp.name] = sums.get(smp.name, 0.0) + smp.value
            for k, v in sums.items():
                self.peak[k] = max(self.peak.get(k, 0.0), v)
            self.scrapes += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> _Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _wait_for(pred, timeout: float, what: str, interval: float = 0.2) -> float:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - t0


# ------------------------------------------------------------------------------------------------------------
# the cluster itself
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.flink
def test_flink_cluster_processes_and_ports(cluster: Cluster) -> None:
    """Separate JVMs for the JobManager and the two TaskManagers, 8 slots, Flink 1.19.0; the cluster's
    own sockets (RPC, blob, REST, data), the worker pool and the ticks' expansion service listen on
    127.0.0.1 only."""
    names = ("jobmanager", "taskmanager-1", "taskmanager-2", "job-server", "worker-pool", "ticks-expansion")
    pids = {n: cluster.pid(n) for n in names}
    assert len(set(pids.values())) == 6
    for name, pid in pids.items():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline, name
        if name == "jobmanager":
            assert b"org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint" in cmdline
        if name.startswith("taskmanager"):
            assert b"org.apache.flink.runtime.taskexecutor.TaskManagerRunner" in cmdline
        if name == "ticks-expansion":
            assert b"org.ldpbeam.flink.LoopbackExpansionService" in cmdline
            assert b"--experiments=use_deprecated_read" in cmdline
    overview = cluster.get("/overview")
    assert overview["flink-version"] == "1.19.0"
    assert overview["taskmanagers"] == 2 and overview["slots-total"] == 8
    tms = sorted(t["id"] for t in cluster.get("/taskmanagers")["taskmanagers"])
    assert tms == ["tm-1", "tm-2"]
    listening = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines()
    for name in ("jobmanager", "taskmanager-1", "taskmanager-2", "worker-pool", "ticks-expansion"):
        mine = [line.split()[3] for line in listening if f"pid={pids[name]}," in line]
        assert mine, name
        assert all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for a in mine), (name, mine)
    # each Flink process serves its Prometheus endpoint (tools/flink/prometheus) among those loopback sockets
    for name, ep in zip(("jobmanager", "taskmanager-1", "taskmanager-2"), cluster.prometheus):
        port = ep.rsplit(":", 1)[1]
        ours = [line.split()[3] for line in listening if f"pid={pids[name]}," in line]
        assert any(a.endswith(f":{port}") for a in ours), (name, ep, ours)
        with urllib.request.urlopen(f"http://{ep}/metrics", timeout=10) as resp:
            assert b"flink_" in resp.read()


# ------------------------------------------------------------------------------------------------------------
# batch
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.flink
def test_frequency_batch_on_flink_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """20,000 OLH reports in 4 files plus every kind of bad record, at parallelism 4."""
    task = olh_task("cluster-batch")
    (tmp_path / "task.json").write_text(task.to_json())
    truth = simulator.simulate_files(
        task, 20_000, "zipf", tmp_path / "in", seed=_seed(0), files=4, start_ms=1_767_225_600_000,
        duration_s=600.0, inject_bad=1,
    )  # fmt: skip
    out = tmp_path / "out"
    args = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro")]
    args += ["--output", str(out), *cluster.args, PARALLELISM]
    with hang_guard(HANG_TIMEOUT_S):
        summary = frequency.run(args)
    assert "DONE" in summary["state"]
    bad = truth["bad_records"]
    c = summary["counts"]
    assert c["read"] == 20_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    assert {k[len("rejected_") :]: v for k, v in c.items() if k.startswith("rejected_") and v} == bad
    assert dead_letter_reasons(out) == sorted(r for r, k in bad.items() for _ in range(k))
    (est,) = _estimates(out)
    reports, _ = _core_reports(task, tmp_path / "in")
    core = task.make_oracle().estimate_reports(reports)
    assert est["n_reports"] == core.n == 20_000
    assert est["frequencies"] == core.frequencies.tolist() and est["std"] == core.std.tolist()


@pytest.mark.flink
def test_range_batch_on_flink_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """HDG over 3 attributes (20,000 users, bad records): every answer and std equals the core's."""
    task = _range_task(tmp_path, "hdg", 20_000, task_id="cluster-range")
    truth = simulator.simulate_files(
        task, 20_000, "gaussian:0.5", tmp_path / "in", seed=_seed(1), files=4, start_ms=1_767_225_600_000,
        duration_s=600.0, inject_bad=1,
    )  # fmt: skip
    queries = random_queries(task.domain_sizes, 12, 2, 0.4, rng=np.random.default_rng(SEEDS[2]))
    queries.append(RangeQuery.from_mapping({0: (2, 9), 1: (0, 15), 2: (3, 3)}))
    _write_queries(tmp_path, queries)
    args = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro")]
    args += [
        "--queries",
        str(tmp_path / "q.json"),
        "--output",
        str(tmp_path / "out"),
        *cluster.args,
        PARALLELISM,
    ]
    with hang_guard(HANG_TIMEOUT_S):
        summary = range_queries.run(args)
    assert "DONE" in summary["state"]
    bad = truth["bad_records"]
    c = summary["counts"]
    assert c["read"] == 20_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    assert c["accepted"] == 20_000
    mech = task.make_mechanism()
    _, _, per_group = _range_core_reports(mech, tmp_path / "in")
    model = _core_model(mech, per_group)
    rows = _jsonl(tmp_path / "out" / "answers-*.jsonl")
    assert [r["query_index"] for r in rows] == list(range(len(queries)))
    assert [r["answer"] for r in rows] == model.answer(queries).tolist()
    assert [r["std"] for r in rows] == [
        None if np.isnan(s) else s for s in model.answer_std(queries).tolist()
    ]


# ------------------------------------------------------------------------------------------------------------
# directory streaming
# ------------------------------------------------------------------------------------------------------------


def _stream_args(watched: Path, out: Path, duration: float, window_s: int = 2) -> list[str]:
    return [
        "--streaming", "--input", str(watched / "*.avro"), "--output", str(out), "--watch_interval", "1",
        "--streaming_duration", str(duration), "--window_size", str(window_s), "--allowed_lateness", "600",
        "--accumulating", "--counts_window", str(window_s), "--dead_letter_window", "5",
    ]  # fmt: skip


def _count_lines(out: Path) -> dict[tuple[int, int], list[dict[str, int]]]:
    """The closed count windows of OUT/counts/, by window (a window written twice appears twice)."""
    per: dict[tuple[int, int], list[dict[str, int]]] = {}
    for f in glob.glob(str(out / "counts" / "counts-*.jsonl")):
        with open(f) as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    key = (r.pop("window_start_ms", 0), r.pop("window_end_ms", 0))
                    per.setdefault(key, []).append(r)
    return per


def _unique_counts(out: Path) -> dict[str, int]:
    """Sum over count windows, each window once: a window's count line written again after a restart
    from a checkpoint (the file sink is at-least-once) must be identical to its first writing."""
    total: dict[str, int] = {}
    for key, lines in _count_lines(out).items():
        assert all(x == lines[0] for x in lines), (key, lines)
        for k, v in lines[0].items():
            total[k] = total.get(k, 0) + int(v)
    return total


@pytest.mark.flink
def test_frequency_directory_streaming_on_flink_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """Two user groups, 2 s windows; one report file and the bad files at the start, two more dropped in
    once the job runs (their reports are late and counted through the 600 s allowed lateness)."""
    task = olh_task("cluster-stream", n_groups=2)
    (tmp_path / "task.json").write_text(task.to_json())
    stage, watched, out = tmp_path / "stage", tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    truth = simulator.simulate_files(
        task, 12_000, "zipf", stage, seed=_seed(3), files=3, start_ms=(now_ms() // 2000) * 2000,
        duration_s=6.0, inject_bad=1,
    )  # fmt: skip
    staged = sorted(glob.glob(str(stage / "reports-*.avro")))
    for f in [staged[0], *glob.glob(str(stage / "bad-*.avro")), stage / "garbage.avro"]:
        _drop_in(f, watched)

    def later() -> None:
        with contextlib.suppress(AssertionError):
            _wait_for(
                lambda: glob.glob(str(out / "counts" / "counts-*.jsonl")), 240, "the first count window"
            )
        for f in staged[1:]:
            _drop_in(f, watched)
            time.sleep(1.0)

    mover = threading.Thread(target=later, daemon=True)
    mover.start()
    args = [
        "--task",
        str(tmp_path / "task.json"),
        *_stream_args(watched, out, 45),  # the first count window can take 20 s under load
        *cluster.args,
        PARALLELISM,
    ]
    # the Beam counters of the job, as Flink's Prometheus reporter serves them while the job runs
    op = "flink_taskmanager_job_task_operator_ldp_"
    with hang_guard(HANG_TIMEOUT_S), _Scraper(cluster.prometheus, op) as sc:
        summary = frequency.run(args)
    mover.join()
    assert "DONE" in summary["state"]
    bad = truth["bad_records"]
    c = _unique_counts(out)
    assert c["read"] == 12_000 + sum(bad.values()) == c["accepted"] + c["rejected"]
    # Every file is read within the first seconds of the 45 s run. Flink publishes a bundle's Beam counters
    # when the runner reports them, and the scrapes of two runs each missed one of the 15 rejected records
    # (once in reports_read, once in reports_rejected): the endpoint serves the job's counters as they
    # stand, never above the job's totals, and counts.json is the final word (docs/metrics.md).
    assert sc.scrapes > 10
    for name in ("read", "accepted", "rejected"):
        assert sc.peak.get(op + "reports_" + name, 0.0) <= c[name], (name, sc.peak)
    assert c["accepted"] <= sc.peak.get(op + "reports_read", 0.0), sc.peak
    assert c.get("late_dropped", 0) == 0
    assert dead_letter_reasons(out) == sorted(r for r, k in bad.items() for _ in range(k))
    assert_windows_equal_core(task, stage, out, 2000, 12_000)


@pytest.mark.flink
def test_range_directory_streaming_on_flink_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """HDG, 2 s windows, a second report file dropped in while the job runs: the most complete pane of
    every window answers exactly as ``mechanism.finalize`` over the reports with event times in it."""
    task = _range_task(tmp_path, "hdg", 10_000, task_id="cluster-range-stream")
    stage, watched, out = tmp_path / "stage", tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    simulator.simulate_files(
        task, 10_000, "gaussian:0.5", stage, seed=_seed(4), files=2, start_ms=(now_ms() // 2000) * 2000,
        duration_s=6.0,
    )  # fmt: skip
    queries = random_queries(task.domain_sizes, 8, 2, 0.5, rng=np.random.default_rng(SEEDS[5]))
    _write_queries(tmp_path, queries)
    staged = sorted(glob.glob(str(stage / "reports-*.avro")))
    _drop_in(staged[0], watched)

    def later() -> None:
        with contextlib.suppress(AssertionError):
            _wait_for(
                lambda: glob.glob(str(out / "counts" / "counts-*.jsonl")), 240, "the first count window"
            )
        _drop_in(staged[1], watched)

    mover = threading.Thread(target=later, daemon=True)
    mover.start()
    args = ["--task", str(tmp_path / "task.json"), "--queries", str(tmp_path / "q.json")]
    args += [*_stream_args(watched, out, 40), *cluster.args, PARALLELISM]  # see the frequency test
    with hang_guard(HANG_TIMEOUT_S):
        summary = range_queries.run(args)
    mover.join()
    assert "DONE" in summary["state"]
    c = _unique_counts(out)
    assert c["read"] == c["accepted"] == 10_000
    mech = task.make_mechanism()
    groups, times, per_group = _range_core_reports(mech, stage)
    rows = _jsonl(out / "answers-*.jsonl")
    best: dict[str, int] = {}
    for r in rows:  # the most complete pane per window (accumulating panes)
        best[r["window_start"]] = max(best.get(r["window_start"], 0), r["n_reports"])
    want = sorted({int(s) for s in (times // 2000) * 2000})
    assert sorted(_iso_ms(ws) for ws in best) == want
    total = 0
    for ws, n in best.items():
        lo = _iso_ms(ws)
        in_window = (times >= lo) & (times < lo + 2000)
        keep = {g: np.flatnonzero(in_window[groups == g]) for g in per_group}
        model = _core_model(mech, per_group, keep)
        got = [r for r in rows if r["window_start"] == ws and r["n_reports"] == n]
        got = sorted({r["query_index"]: r for r in got}.values(), key=lambda r: r["query_index"])
        assert n == model.n_users
        assert [r["answer"] for r in got] == model.answer(queries).tolist()
        total += n
    assert total == 10_000


def _iso_ms(iso: str) -> int:
    import datetime as dt

    return int(round(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000))


# ------------------------------------------------------------------------------------------------------------
# failover
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.failover
@pytest.mark.flink
def test_failover_taskmanager_killed_mid_stream(cluster: Cluster, tmp_path: Path) -> None:
    """A checkpointed directory-streaming job loses TaskManager 1 (SIGKILL) mid-stream and recovers.

    12 report files of 2,000 reports (event times over 24 s, 4 s windows): 4 at the start, 4 once the
    job has completed a checkpoint and written its first count window, then the kill -- files read since
    the last checkpoint are read again after the restore, and the state they had added is rolled back with
    it -- and the last 4 once the job runs again on TaskManager 2. Every window's most complete pane must
    equal the core's over exactly its reports: a report lost, or counted twice, breaks that."""
    task = olh_task("cluster-failover")
    (tmp_path / "task.json").write_text(task.to_json())
    stage, watched, out = tmp_path / "stage", tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    n = 24_000
    simulator.simulate_files(
        task, n, "zipf", stage, seed=_seed(6), files=12, start_ms=(now_ms() // 4000) * 4000, duration_s=24.0
    )  # fmt: skip
    staged = sorted(glob.glob(str(stage / "reports-*.avro")))
    for f in staged[:4]:
        _drop_in(f, watched)
    log: dict[str, Any] = {}

    def chaos() -> None:
        try:
            log["job"] = jid = _wait_until_job(cluster)
            _wait_for(
                lambda: _completed_checkpoints(cluster, jid) >= 1, 100, "a checkpoint while the watch runs"
            )
            _wait_for(
                lambda: glob.glob(str(out / "counts" / "counts-*.jsonl")), 240, "the first count window"
            )
            for f in staged[4:8]:
                _drop_in(f, watched)
            time.sleep(1.5)  # some of these are being read when the worker dies
            log["checkpoints_before_kill"] = _completed_checkpoints(cluster, jid)
            log["tm1_slots_used"] = _slots_used(cluster, "tm-1")
            log["killed_at"] = _kill_taskmanager(cluster, jid, 1)
            _wait_for(lambda: _all_tasks_running(cluster, jid), 240, "the restarted job's tasks to run")
            log["recovered_s"] = time.time() - log["killed_at"]
            for f in staged[8:]:
                _drop_in(f, watched)
                time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            log["error"] = repr(exc)
            for f in staged[4:]:
                _drop_in(f, watched)

    th = threading.Thread(target=chaos, daemon=True)
    th.start()
    args = ["--task", str(tmp_path / "task.json"), *_stream_args(watched, out, 150, window_s=4)]
    args += [*cluster.args, PARALLELISM, *FAILOVER_FLAGS]
    try:
        with hang_guard(HANG_TIMEOUT_S):
            summary = frequency.run(args)
        th.join()
    finally:
        with contextlib.suppress(Exception):  # the cluster whole again for any later test
            cluster.sh("start-tm", "1")
    assert "error" not in log, log
    assert log["tm1_slots_used"] > 0, log  # the killed TaskManager was running part of the job
    assert log["checkpoints_before_kill"] >= 1
    assert "DONE" in summary["state"]
    jid = log["job"]
    history = cluster.get(f"/jobs/{jid}/exceptions")["exceptionHistory"]["entries"]
    assert history, "no failure recorded for the job"
    assert _restarts(cluster, jid) >= 1
    checkpoints = cluster.get(f"/jobs/{jid}/checkpoints")
    assert checkpoints["counts"]["restored"] >= 1, checkpoints["counts"]  # restarted from a checkpoint
    c = _unique_counts(out)
    assert c["read"] == c["accepted"] == n and c["rejected"] == 0
    assert c.get("late_dropped", 0) == 0
    assert_windows_equal_core(task, stage, out, 4000, n)
    print(f"failover: {log}, restored checkpoint {checkpoints['latest']['restored']}")


def _wait_until_job(cluster: Cluster) -> str:
    found: list[str] = []

    def running() -> bool:
        jid = cluster.running_job()
        if jid:
            found.append(jid)
        return bool(jid)

    _wait_for(running, 240, "the job to run", interval=0.5)
    return found[-1]


def _completed_checkpoints(cluster: Cluster, jid: str) -> int:
    return int(cluster.get(f"/jobs/{jid}/checkpoints")["counts"]["completed"])


def _slots_used(cluster: Cluster, tm: str) -> int:
    info = cluster.get(f"/taskmanagers/{tm}")
    return int(info["slotsNumber"]) - int(info["freeSlots"])


def _restarts(cluster: Cluster, jid: str) -> int:
    """At least how many times the job restarted: Flink's ``numRestarts`` gauge, which the REST metric
    store samples (under load it has read 0 for minutes after a restart), or 1 when the job's own status
    history says it entered RESTARTING (:func:`_last_restart_ms`)."""
    metrics = cluster.get(f"/jobs/{jid}/metrics?get=numRestarts")
    counted = int(float(metrics[0]["value"])) if metrics else 0
    return max(counted, int(_last_restart_ms(cluster, jid) > 0))


def _last_restart_ms(cluster: Cluster, jid: str) -> int:
    """When the job last entered RESTARTING (ms since the epoch; 0: never), from ``timestamps`` of
    ``GET /jobs/:id``, read straight from the execution graph."""
    return int(cluster.get(f"/jobs/{jid}").get("timestamps", {}).get("RESTARTING", 0))


def _kill_taskmanager(cluster: Cluster, jid: str, i: int) -> float:
    """SIGKILLs TaskManager ``i``, waits until it is gone (a zombie left for PID 1 counts as gone) and the
    job has restarted after the kill; returns the time of the kill."""
    pid = cluster.pid(f"taskmanager-{i}")
    before = _restarts(cluster, jid)
    killed = time.time()
    os.kill(pid, 9)
    _wait_for(lambda: not process_running(pid), 30, f"TaskManager {i} (pid {pid}) to die")
    _wait_for(
        lambda: _last_restart_ms(cluster, jid) >= killed * 1000 - 1 or _restarts(cluster, jid) > before,
        120,
        "the job to restart",
    )
    return killed


def _all_tasks_running(cluster: Cluster, jid: str) -> bool:
    job = cluster.get(f"/jobs/{jid}")
    return job["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in job["vertices"])


def test_missing_parts_skip_or_fail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LDP_SKIP_FLINK", raising=False)
    monkeypatch.delenv("LDP_REQUIRE_FLINK", raising=False)
    monkeypatch.setenv("LDP_FLINK_JOB_SERVER_JAR", str(tmp_path / "absent.jar"))
    with pytest.raises(pytest.skip.Exception, match="cluster.sh fetch"):
        _require_parts()
    monkeypatch.setenv("LDP_REQUIRE_FLINK", "1")
    with pytest.raises(pytest.fail.Exception, match="absent.jar"):
        _require_parts()


def test_closed_window_counts_count_a_rewritten_window_once(tmp_path: Path) -> None:
    """After a restore from a checkpoint the at-least-once file sink writes a count window again: the
    summary counts it once (the copy with the most reports read), rows without a window each time."""
    from pipelines import job

    counts_dir = tmp_path / "counts"
    counts_dir.mkdir()
    w1 = {"window_start_ms": 0, "window_end_ms": 4000, "read": 5, "accepted": 4, "rejected": 1}
    w2 = {"window_start_ms": 4000, "window_end_ms": 8000, "read": 3, "accepted": 3, "rejected": 0}
    (counts_dir / "counts-a.jsonl").write_text(json.dumps(w1) + "\n" + json.dumps(w2) + "\n")
    (counts_dir / "counts-b.jsonl").write_text(json.dumps(w1) + "\n")  # written again after a restore
    plain = {"read": 2, "accepted": 2, "rejected": 0}
    (counts_dir / "counts-c.jsonl").write_text(json.dumps(plain) + "\n" + json.dumps(plain) + "\n")
    assert job.closed_window_counts(str(tmp_path)) == {"read": 12, "accepted": 11, "rejected": 1}
