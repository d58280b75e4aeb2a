"""``ldp-beam simulate --follow`` (simulator.stream): pacing, done markers, stopping, flag errors, and a
live run stopped by SIGTERM; the simulator package imports without Beam."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import fastavro
import numpy as np
import pytest

import simulator.stream as F
from ldp.task import parse_task
from pipelines import simulate

REPO = Path(__file__).resolve().parents[1]
WALL0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _task(**kw):
    return parse_task({"task_id": "follow", "mechanism": "grr", "epsilon": 1.0, "domain_size": 16, **kw})


class FakeClock:
    """Monotonic and wall time that move only when the code sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def time(self) -> float:
        return WALL0 + self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _record_writes(monkeypatch, clock, after=None):
    """Wraps write_done_file: records the clock at each write; ``after(k)`` runs after write k."""
    at: list[float] = []
    original = F.write_done_file

    def wrapper(*args, **kwargs):
        path = original(*args, **kwargs)
        at.append(clock.t)
        if after is not None:
            after(len(at))
        return path

    monkeypatch.setattr(F, "write_done_file", wrapper)
    return at


def _read_ms(path: Path) -> np.ndarray:
    with open(path, "rb") as fh:
        return np.array([int(round(r["event_time"].timestamp() * 1000)) for r in fastavro.reader(fh)])


def _avro(out: Path) -> list[Path]:
    return sorted(out.glob("*.avro"))


def test_files_are_due_at_the_rate_with_markers_and_wall_clock_event_times(tmp_path, monkeypatch):
    clock = FakeClock()
    at = _record_writes(monkeypatch, clock)
    plan = F.FollowPlan(rate=100.0, file_reports=50, duration_s=2.0)
    summary = F.follow(_task(), tmp_path, plan, seed=1, clock=clock)
    assert (summary.files, summary.reports, summary.reason) == (4, 200, "duration")
    assert at == pytest.approx([0.5, 1.0, 1.5, 2.0], abs=1e-6)  # file j when its last report is due
    files = _avro(tmp_path)
    assert [p.name for p in files] == [f"reports-20260101T000000Z-{j:06d}.avro" for j in range(4)]
    assert all(Path(str(p) + F.DONE_SUFFIX).is_file() for p in files)
    assert not list(tmp_path.glob(".*.part"))  # no temporary file is left
    spans = [WALL0 * 1000, *(WALL0 * 1000 + 1000 * np.array(at))]
    for j, p in enumerate(files):
        ms = _read_ms(p)
        assert len(ms) == 50 and np.all(np.diff(ms) >= 0)
        assert spans[j] <= ms.min() and ms.max() < spans[j + 1]  # the wall-clock span since the last file


def test_a_stop_while_waiting_writes_no_partial_file(tmp_path, monkeypatch):
    clock = FakeClock()
    stop = F.Stop(clock)
    original_sleep = clock.sleep

    def sleep(seconds):
        original_sleep(seconds)
        if clock.t >= 1.2:
            stop.request("SIGTERM")

    monkeypatch.setattr(clock, "sleep", sleep)
    plan = F.FollowPlan(rate=100.0, file_reports=50)
    summary = F.follow(_task(), tmp_path, plan, seed=2, stop=stop, clock=clock)
    assert (summary.files, summary.reports, summary.reason) == (2, 100, "SIGTERM")
    assert clock.t == pytest.approx(1.2, abs=0.06)  # woke within one poll slice of the request
    assert len(_avro(tmp_path)) == 2 and len(list(tmp_path.glob("*.done"))) == 2


def test_a_stop_while_writing_finishes_that_file_with_its_marker(tmp_path, monkeypatch):
    clock = FakeClock()
    stop = F.Stop(clock)
    _record_writes(monkeypatch, clock, after=lambda k: stop.request("SIGINT") if k == 3 else None)
    plan = F.FollowPlan(rate=1000.0, file_reports=10)
    summary = F.follow(_task(), tmp_path, plan, seed=3, stop=stop, clock=clock)
    assert (summary.files, summary.reports, summary.reason) == (3, 30, "SIGINT")
    assert all(Path(str(p) + ".done").is_file() for p in _avro(tmp_path))


def test_users_bound_the_stream_across_population_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(F, "SEGMENT_REPORTS", 40)  # segments of 45 users (whole files), then the 10 left
    clock = FakeClock()
    plan = F.FollowPlan(rate=1000.0, file_reports=15, users=100)
    summary = F.follow(_task(n_groups=3), tmp_path, plan, seed=4, clock=clock)
    assert (summary.files, summary.reports, summary.reason) == (7, 100, "users")
    sizes = []
    for p in _avro(tmp_path):
        with open(p, "rb") as fh:
            recs = list(fastavro.reader(fh))
        sizes.append(len(recs))
        assert {r["task_id"] for r in recs} == {"follow"} and {r["group"] for r in recs} <= {0, 1, 2}
    assert sizes == [15] * 6 + [10]
    assert clock.t == pytest.approx(0.1, abs=1e-6)  # 100 reports at 1000/s


def test_seeded_streams_repeat_and_shuffled_tasks_round_event_times(tmp_path):
    plan = F.FollowPlan(rate=50.0, file_reports=25, users=50)
    for name in ("a", "b"):
        F.follow(_task(), tmp_path / name, plan, seed=9, clock=FakeClock())
    read = [[fastavro.reader(open(p, "rb")) for p in _avro(tmp_path / n)] for n in ("a", "b")]
    a, b = ([r["value"] for rd in rs for r in rd] for rs in read)
    assert a == b and len(a) == 50
    shuffled = _task(anonymity={"shuffled": True, "time_precision_s": 60})
    F.follow(shuffled, tmp_path / "s", plan, seed=9, clock=FakeClock())
    for p in _avro(tmp_path / "s"):
        assert np.all(_read_ms(p) % 60_000 == 0)


def test_spread_and_plan_checks():
    assert F.spread_ms(1000, 1100, 4).tolist() == [1000, 1025, 1050, 1075]
    assert F.spread_ms(1000, 1000, 3).tolist() == [1000, 1000, 1000]
    plan = F.FollowPlan(rate=200.0, file_reports=50, duration_s=1.0)
    assert plan.file_seconds == 0.25 and plan.in_time(200) and not plan.in_time(250)
    for kwargs, match in [
        ({"rate": 0.0, "file_reports": 1}, "rate must be"),
        ({"rate": float("nan"), "file_reports": 1}, "rate must be"),
        ({"rate": 10.0, "file_reports": 0}, "file_reports must be"),
        ({"rate": 10.0, "file_reports": 1, "users": 0}, "users must be"),
        ({"rate": 10.0, "file_reports": 50, "duration_s": 2.0}, "shorter than one file's span"),
    ]:
        with pytest.raises(ValueError, match=match):
            F.FollowPlan(**kwargs)


def test_an_existing_file_name_is_never_replaced(tmp_path):
    task = _task()
    (batch,) = list(F.file_batches(task, F.FollowPlan(rate=10.0, file_reports=5, users=5), None, 1))
    times = np.zeros(5, dtype=np.int64)
    F.write_done_file(tmp_path, "x.avro", task, batch, times)
    before = (tmp_path / "x.avro").read_bytes()
    with pytest.raises(FileExistsError, match="another writer"):
        F.write_done_file(tmp_path, "x.avro", task, batch, times + 1)
    assert (tmp_path / "x.avro").read_bytes() == before and not list(tmp_path.glob(".*.part"))


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        (["--output_topic", "projects/p/topics/t"], "use it with --output"),
        (["--output", "{out}", "--files", "3"], "--files does not apply to --follow"),
        (["--output", "{out}", "--start", "2026-01-01T00:00:00Z"], "--start does not apply to --follow"),
        (["--output", "{out}", "--inject_bad", "1"], "--inject_bad does not apply to --follow"),
        (["--output", "{out}", "--overwrite"], "--overwrite does not apply to --follow"),
        (["--output", "{out}", "--message_size", "9"], "--message_size does not apply to --follow"),
        (["--output", "{out}", "--rate", "0"], "rate must be a positive number"),
        (["--output", "{out}", "--rate", "10", "--duration", "0.5"], "shorter than one file's span"),
        (["--output", "{out}", "--file_reports", "0"], "file_reports must be >= 1"),
        (["--output", "{out}", "--users", "0"], "--users must be >= 1"),
    ],
)
def test_wrong_follow_flags_are_one_line_errors(tmp_path, frequency_task_file, capsys, extra, pattern):
    argv = ["--task", str(frequency_task_file()), "--follow"]
    argv += [a.replace("{out}", str(tmp_path / "o")) for a in extra]
    with pytest.raises(SystemExit) as exc:
        simulate.run(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err and pattern in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        (["--output", "{out}", "--file_reports", "10"], "--file_reports does not apply to --output without"),
        (["--output", "{out}", "--rate", "10"], "--rate does not apply to --output without --follow"),
        (["--output_topic", "projects/p/topics/t", "--files", "2"], "--files does not apply to --output_"),
    ],
)
def test_flags_of_another_mode_are_one_line_errors(tmp_path, frequency_task_file, capsys, extra, pattern):
    argv = ["--task", str(frequency_task_file()), "--users", "10"]
    argv += [a.replace("{out}", str(tmp_path / "o")) for a in extra]
    with pytest.raises(SystemExit) as exc:
        simulate.run(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and pattern in err, err


def test_the_marker_is_the_watched_directory_sources_own():
    from transforms.io import DONE_SUFFIX

    assert F.DONE_SUFFIX == DONE_SUFFIX


@pytest.mark.integration
def test_simulator_imports_without_beam_or_pubsub():
    code = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("apache_beam", "google", "transforms", "pipelines"):
                    raise ImportError("blocked: " + name)

        sys.meta_path.insert(0, Block())
        import simulator, simulator.bad, simulator.files, simulator.stream, simulator.population
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("apache_beam", "transforms", "pipelines")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _start_follow(out: Path, task_file: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipelines.simulate", "--task", str(task_file), "--output", str(out)]
    return subprocess.Popen(
        [*cmd, "--follow", "--seed", "5", *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _check_stream(out: Path, per_file: int, t_start_ms: int, t_end_ms: int) -> int:
    """Every file has its marker and parses; returns the number of reports."""
    files = _avro(out)
    assert files and not list(out.glob(".*.part"))
    assert sorted(p.name for p in out.glob("*.done")) == sorted(p.name + ".done" for p in files)
    total = 0
    for p in files:
        ms = _read_ms(p)
        assert len(ms) == per_file and t_start_ms <= ms.min() and ms.max() <= t_end_ms
        total += len(ms)
    return total


@pytest.mark.integration
def test_follow_streams_files_until_sigterm_and_says_what_it_wrote(tmp_path, frequency_task_file):
    out = tmp_path / "incoming"
    t_start = int(time.time() * 1000)
    proc = _start_follow(out, frequency_task_file(), "--rate", "400", "--file_reports", "100")
    try:
        deadline = time.monotonic() + 60
        while len(list(out.glob("*.done"))) < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("follow: wrote ") and last.endswith("ended by SIGTERM"), err
    total = _check_stream(out, 100, t_start, int(time.time() * 1000))
    files = len(_avro(out))
    assert files >= 6 and f"wrote {files:,} files, {total:,} frequency reports" in last


@pytest.mark.integration
def test_follow_ends_by_itself_after_duration(tmp_path, frequency_task_file):
    out = tmp_path / "incoming"
    t_start = int(time.time() * 1000)
    pace = ["--rate", "200", "--file_reports", "100", "--duration", "2"]
    proc = _start_follow(out, frequency_task_file(), *pace)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert _check_stream(out, 100, t_start, int(time.time() * 1000)) == 400  # 2 s at 200/s
    assert err.strip().splitlines()[-1].endswith("ended by duration")
