"""Batch and streaming pipelines on Apache Flink through Beam's portable FlinkRunner.

Each test starts the Beam Flink job server (a Java process running an embedded Flink mini-cluster,
``--flink_master=[local]``) from a jar, and runs the Python SDK harness in this process
(``--environment_type=LOOPBACK``). The jar comes from ``LDP_FLINK_JOB_SERVER_JAR`` or from the cache that
``bash tools/flink/get_job_server.sh`` fills (``.cache/flink/job-server.jar``); without a jar, or
without ``java``, the tests are skipped with the reason. ``LDP_SKIP_FLINK=1`` skips them on purpose.
See docs/flink.md.

The tests are self-contained: a generic histogram ``CombineFn`` stands in for the frequency oracles'
accumulators. Everything is deterministic (fixed inputs, exact counts), so the expected outputs are exact.
"""

from __future__ import annotations

import glob
import json
import math
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

beam = pytest.importorskip("apache_beam")

from apache_beam.metrics import Metrics  # noqa: E402
from apache_beam.metrics.metric import MetricsFilter  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.runner import PipelineState  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.transforms import window  # noqa: E402
from apache_beam.transforms.periodicsequence import PeriodicImpulse  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHED_JAR = REPO / ".cache" / "flink" / "job-server.jar"
DOMAIN = 8
# Longest a pipeline may take before the test cancels it and fails (a run takes about 10-20 s here).
PIPELINE_TIMEOUT_MS = 150_000


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


def _flink_options(jar: str, *extra: str) -> PipelineOptions:
    return PipelineOptions(
        [
            "--runner=FlinkRunner",
            "--flink_master=[local]",
            f"--flink_job_server_jar={jar}",
            "--environment_type=LOOPBACK",
            *extra,
        ]
    )


def _run(pipeline: beam.Pipeline) -> Any:
    """Runs ``pipeline`` to completion, cancelling it (and failing) if it outlives the timeout."""
    result = pipeline.run()
    state = result.wait_until_finish(duration=PIPELINE_TIMEOUT_MS)
    if state != PipelineState.DONE:
        try:
            result.cancel()
        finally:
            pytest.fail(f"Flink pipeline ended in state {state} (timeout {PIPELINE_TIMEOUT_MS} ms)")
    return result


class HistogramCombineFn(beam.CombineFn):
    """Counts values in ``[0, domain_size)``; a mergeable accumulator like the oracles' count vectors."""

    def __init__(self, domain_size: int) -> None:
        self.domain_size = domain_size

    def create_accumulator(self) -> list[int]:
        return [0] * self.domain_size

    def add_input(self, acc: list[int], value: int) -> list[int]:
        acc[value] += 1
        return acc

    def merge_accumulators(self, accs: Iterable[list[int]]) -> list[int]:
        # Beam may call this with an empty iterable (empty panes): return a fresh accumulator then.
        merged = self.create_accumulator()
        for acc in accs:
            merged = [a + b for a, b in zip(merged, acc)]
        return merged

    def extract_output(self, acc: list[int]) -> list[int]:
        return list(acc)


class Validate(beam.DoFn):
    """Routes in-domain ``(task, value)`` records to the main output and others to ``dead``."""

    DEAD = "dead"

    def __init__(self, domain_size: int) -> None:
        self.domain_size = domain_size
        self.accepted = Metrics.counter("flink_test", "accepted")
        self.rejected = Metrics.counter("flink_test", "rejected")

    def process(self, record: dict) -> Iterator[Any]:
        value = record.get("value")
        if isinstance(value, int) and 0 <= value < self.domain_size:
            self.accepted.inc()
            yield record["task"], value
        else:
            self.rejected.inc()
            yield beam.pvalue.TaggedOutput(self.DEAD, json.dumps(record, sort_keys=True))


def _batch_records() -> list[dict]:
    # Two tasks, values cycling over the domain, and every 11th record out of domain (dead letter).
    records = []
    for i in range(600):
        value = (i * 5 + i // 7) % DOMAIN if i % 11 else DOMAIN + i % 3
        records.append({"task": f"t{i % 2}", "value": value})
    return records


def _read_jsonl(pattern: str) -> list[Any]:
    return [json.loads(line) for path in sorted(glob.glob(pattern)) for line in open(path) if line.strip()]


def test_batch_pipeline_on_flink(job_server_jar: str, tmp_path: Path) -> None:
    records = _batch_records()
    good = [(r["task"], r["value"]) for r in records if 0 <= r["value"] < DOMAIN]
    expected_hist = {task: [0] * DOMAIN for task in ("t0", "t1")}
    for task, value in good:
        expected_hist[task][value] += 1
    n_dead = len(records) - len(good)
    assert 0 < n_dead < len(records)

    pipeline = beam.Pipeline(options=_flink_options(job_server_jar, "--parallelism=2"))
    parsed = (
        pipeline
        | "Read" >> beam.Create(records, reshuffle=True)
        | "Validate" >> beam.ParDo(Validate(DOMAIN)).with_outputs(Validate.DEAD, main="ok")
    )
    hists = parsed.ok | "Histogram" >> beam.CombinePerKey(HistogramCombineFn(DOMAIN))
    (
        hists
        | "Format" >> beam.MapTuple(lambda task, hist: json.dumps({"task": task, "hist": hist}))
        | "Write" >> beam.io.WriteToText(str(tmp_path / "hist"), file_name_suffix=".jsonl")
    )
    parsed.dead | "WriteDead" >> beam.io.WriteToText(str(tmp_path / "dead"), file_name_suffix=".jsonl")
    total = parsed.ok | "Count" >> beam.combiners.Count.Globally()
    assert_that(total, equal_to([len(good)]), label="CheckTotal")
    started = time.monotonic()
    result = _run(pipeline)
    elapsed = time.monotonic() - started

    written = {row["task"]: row["hist"] for row in _read_jsonl(str(tmp_path / "hist*.jsonl"))}
    assert written == expected_hist
    dead = _read_jsonl(str(tmp_path / "dead*.jsonl"))
    assert sorted(map(json.dumps, dead)) == sorted(
        json.dumps(r) for r in records if not 0 <= r["value"] < DOMAIN
    )

    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace("flink_test"))["counters"]
    }
    assert counters == {"accepted": len(good), "rejected": n_dead}
    print(f"flink batch pipeline: {elapsed:.1f} s")


class ReadReportFile(beam.DoFn):
    """Reads the JSON Lines file a tick points to and emits its reports at their event times."""

    def __init__(self, paths: list[str], start: float, interval: float) -> None:
        self.paths = paths
        self.start = start
        self.interval = interval

    def process(self, tick: Any) -> Iterator[window.TimestampedValue]:
        index = round((float(tick) - self.start) / self.interval)
        with open(self.paths[index]) as f:
            for line in f:
                report = json.loads(line)
                yield window.TimestampedValue((report["task"], report["value"]), report["event_time"])


class WithWindowStart(beam.DoFn):
    def process(self, kv: tuple[str, list[int]], w: Any = beam.DoFn.WindowParam) -> Iterator[tuple]:
        yield kv[0], float(w.start), kv[1]


def test_streaming_pipeline_on_flink(job_server_jar: str, tmp_path: Path) -> None:
    # PeriodicImpulse ticks (a source the portable Flink runner runs in streaming mode) drive reads of
    # report files; the reports carry event times and are combined per task in fixed event-time windows.
    n_files, window_size, interval = 4, 10, 1.0
    now = time.time()
    # Event times lie ahead of every tick, so no report is behind the watermark (none can be late).
    base = math.ceil(now / window_size) * window_size + window_size
    paths = []
    hist: dict[tuple[str, float], list[int]] = {}
    for i in range(n_files):
        path = tmp_path / f"reports-{i}.jsonl"
        with open(path, "w") as f:
            for j in range(25 + 5 * i):
                task, value = f"t{j % 2}", (i + 3 * j) % DOMAIN
                event_time = base + window_size * i + (j % window_size)
                f.write(json.dumps({"task": task, "value": value, "event_time": event_time}) + "\n")
                hist.setdefault((task, float(base + window_size * i)), [0] * DOMAIN)[value] += 1
        paths.append(str(path))
    # Ticks start in the past (emitted at once) and run into the future (emitted in real time).
    start = now - 2.0
    stop = start + n_files * interval

    pipeline = beam.Pipeline(options=_flink_options(job_server_jar, "--parallelism=1", "--streaming"))
    out = (
        pipeline
        | "Ticks"
        >> PeriodicImpulse(
            start_timestamp=start, stop_timestamp=stop, fire_interval=interval, apply_windowing=False
        )
        | "ReadFiles" >> beam.ParDo(ReadReportFile(paths, start, interval))
        | "Window" >> beam.WindowInto(window.FixedWindows(window_size))
        | "Histogram" >> beam.CombinePerKey(HistogramCombineFn(DOMAIN))
        | "WindowStart" >> beam.ParDo(WithWindowStart())
    )
    assert_that(out, equal_to([(task, ws, h) for (task, ws), h in hist.items()]))
    started = time.monotonic()
    _run(pipeline)
    print(f"flink streaming pipeline: {time.monotonic() - started:.1f} s")


def test_missing_jar_is_a_clean_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LDP_SKIP_FLINK", raising=False)
    monkeypatch.delenv("LDP_REQUIRE_FLINK", raising=False)
    monkeypatch.setenv("LDP_FLINK_JOB_SERVER_JAR", str(tmp_path / "absent.jar"))
    with pytest.raises(pytest.skip.Exception, match="get_job_server.sh"):
        _job_server_jar()
    monkeypatch.setenv("LDP_REQUIRE_FLINK", "1")
    with pytest.raises(pytest.fail.Exception, match="get_job_server.sh"):
        _job_server_jar()
