"""transforms.sequence: the ordered finalize step. A toy window sequence (state: the running report count
and the window starts seen) is stepped once per window, in order of window start whatever the arrival
order, in batch and streaming; its rows reach the outputs in their windows, late panes are counted and
dropped, the publications are written (and a failed write fails the job)."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate
from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import WindowConfig, parse_task
from transforms.aggregate import Aggregate
from transforms.counts import COUNTER_NAMESPACE
from transforms.io import DecodeReportMessages, WriteResults
from transforms.runners import DirectRunnerWithoutPrism
from transforms.sequence import FinalizeInOrder, SequenceFn, due_ms, resumed_closed, window_sequence_of
from wire.publication import read_latest
from wire.records import encode_report_container, reports_to_records

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier (in-process pipelines) but the Prism test

SEEDS = np.random.SeedSequence(2026_12_07_30)
TASK = parse_task({"task_id": "t-seq", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})


class ToySequence:
    """State: (running report count, window starts stepped so far); publishes both."""

    def __init__(self, agg: FrequencyAggregator) -> None:
        self.agg = agg

    def initial_state(self) -> tuple[int, tuple]:
        return 0, ()

    def step(self, state, accs, window: WindowInfo):
        count, starts = state
        rows = self.agg.finalize(dict(accs), window)
        count += sum(r.n_reports for r in rows)
        starts = (*starts, window.start_ms)
        publication = {"task_id": self.agg.task.task_id, "generation": len(starts), "level": len(starts) % 3,
                       "window_end": window.end_ms, "running": count, "starts": list(starts)}  # fmt: skip
        return (count, starts), rows, publication


class ToyAggregator(FrequencyAggregator):
    def __init__(self, task, publish_dir: str | None = None) -> None:
        super().__init__(task)
        self.publish_dir = publish_dir

    def window_sequence(self) -> ToySequence:
        return ToySequence(self)


def _message(rng: np.random.Generator, n: int, event_s: float) -> bytes:
    reports = TASK.make_oracle().encode(rng.integers(0, 8, n), rng=rng)
    recs = reports_to_records(TASK.task_id, reports, np.full(n, int(event_s * 1000)), 0)
    return encode_report_container(recs)


def _pipeline(*, streaming: bool = False) -> TestPipeline:
    """The DirectRunner as the jobs run it: no Prism attempt first, each bundle's counters kept."""
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = streaming
    return TestPipeline(runner=DirectRunnerWithoutPrism(), options=opts)


def _counter(result, name: str) -> int:
    res = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE).with_name(name))
    return sum(int(c.committed if c.committed is not None else c.attempted or 0) for c in res["counters"])


def _publications(d: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(d.glob("generation-*.json"))]


def _row_in_its_window(row, window=beam.DoFn.WindowParam):  # noqa: B008 - Beam's parameter idiom
    return (row.window_start, row.pane_timing, row.n_reports, int(window.start.micros // 1000))


def _run(p: beam.Pipeline, source, agg, w: WindowConfig, want_rows: list) -> dict:
    dec = p | source | DecodeReportMessages("mem", agg)
    out = dec.records | Aggregate(agg, w)
    assert_that(out["estimates"] | beam.Map(_row_in_its_window), equal_to(want_rows), label="rows")
    panes = out["panes"] | beam.Map(lambda pane: (pane[1].start_ms, len(pane[2])))
    assert_that(panes, equal_to([(r[0], 1) for r in want_rows]), label="panes")
    return out


def test_window_sequence_of_an_aggregator_without_the_method_is_none() -> None:
    assert window_sequence_of(object()) is None
    assert window_sequence_of(FrequencyAggregator(TASK)) is None
    assert isinstance(window_sequence_of(ToyAggregator(TASK)), ToySequence)
    assert due_ms(10_000) == 9_999 and due_ms(None) > 10**15


def test_batch_windows_are_stepped_in_order_of_start(tmp_path: Path) -> None:
    rng = np.random.default_rng(SEEDS.spawn(1)[0])
    # created out of order: the third window first
    msgs = [_message(rng, 12, 25), _message(rng, 10, 3), _message(rng, 7, 14), _message(rng, 5, 8)]
    agg = ToyAggregator(TASK, publish_dir=str(tmp_path / "pub"))
    p = _pipeline()
    want = [(0, "ON_TIME", 15, 0), (10_000, "ON_TIME", 7, 10_000), (20_000, "ON_TIME", 12, 20_000)]
    dec = p | beam.Create(msgs) | DecodeReportMessages("mem", agg)
    out = dec.records | Aggregate(agg, WindowConfig(size_s=10))
    rows = out["estimates"] | beam.Map(lambda r: (r.window_start, r.n_reports))
    assert_that(rows, equal_to([(w[0], w[2]) for w in want]))
    result = p.run()
    result.wait_until_finish()
    pubs = _publications(tmp_path / "pub")
    assert [q["starts"] for q in pubs] == [[0], [0, 10_000], [0, 10_000, 20_000]]
    assert [q["running"] for q in pubs] == [15, 22, 34]  # the state carried over
    assert read_latest(tmp_path / "pub", task_id=TASK.task_id)["generation"] == 3
    assert _counter(result, "sequence_windows") == 3 and _counter(result, "sequence_late_panes") == 0


class ResumedSequence(ToySequence):
    """A ToySequence restarted after windows [-10, 0) s and [0, 10) s: their state and the latter's end."""

    resumed_window_end = 10_000

    def initial_state(self) -> tuple[int, tuple]:
        return 100, (-10_000, 0)


class ResumedAggregator(ToyAggregator):
    def window_sequence(self) -> ResumedSequence:
        return ResumedSequence(self)


def test_a_resumed_sequence_counts_the_windows_it_already_stepped_as_late(tmp_path: Path) -> None:
    rng = np.random.default_rng(SEEDS.spawn(6)[5])
    msgs = [_message(rng, 12, 25), _message(rng, 10, 3), _message(rng, 7, 14), _message(rng, 5, 9.999)]
    agg = ResumedAggregator(TASK, publish_dir=str(tmp_path / "pub"))
    assert resumed_closed(ResumedSequence(agg)) == 9_999 and resumed_closed(ToySequence(agg)) is None
    p = _pipeline()
    _run(p, beam.Create(msgs), agg, WindowConfig(size_s=10),
         [(10_000, "ON_TIME", 7, 10_000), (20_000, "ON_TIME", 12, 20_000)])  # fmt: skip
    result = p.run()
    result.wait_until_finish()
    pubs = _publications(tmp_path / "pub")  # generations 3 and 4 follow the resumed state's 2
    got = [(q["generation"], q["running"], q["starts"][-1]) for q in pubs]
    assert got == [(3, 107, 10_000), (4, 119, 20_000)]
    assert _counter(result, "sequence_late_panes") == 1 and _counter(result, "sequence_windows") == 2


def _newest_first(tmp_path: Path, pipeline: beam.Pipeline, stream_end_s: float | None) -> None:
    """Window panes reach the step newest first, all before the watermark moves: still stepped 0, 10, 20.
    ``stream_end_s``: the watermark stops there before the end of time."""
    rng = np.random.default_rng(SEEDS.spawn(2)[1])
    agg = ToyAggregator(TASK, publish_dir=str(tmp_path))
    oracle, panes = TASK.make_oracle(), []
    for start_s, n in ((20, 4), (0, 9), (10, 6)):
        accs = accumulate(agg, GroupAccumulators(), 0, oracle.encode(rng.integers(0, 8, n), rng=rng))
        panes.append(TimestampedValue((TASK.task_id, accs), start_s + 9.999))
    stream = TestStream().advance_watermark_to(0).add_elements(panes)
    if stream_end_s is not None:
        stream = stream.advance_watermark_to(stream_end_s)
    with pipeline as p:
        windowed = p | stream.advance_watermark_to_infinity() | beam.WindowInto(beam.window.FixedWindows(10))
        out = windowed | FinalizeInOrder(agg, WindowConfig(size_s=10), publish_dir=str(tmp_path))
        rows = out["estimates"] | beam.Map(_row_in_its_window)
        want = [(0, "UNKNOWN", 9, 0), (10_000, "UNKNOWN", 6, 10_000), (20_000, "UNKNOWN", 4, 20_000)]
        assert_that(rows, equal_to(want))
    pubs = _publications(tmp_path)
    assert [q["starts"] for q in pubs] == [[0], [0, 10_000], [0, 10_000, 20_000]]
    assert [(q["running"], q["window_end"], q["level"]) for q in pubs] == [(9, 10_000, 1), (15, 20_000, 2),
                                                                          (19, 30_000, 0)]


def test_streaming_steps_in_order_of_start_whatever_the_arrival_order(tmp_path: Path) -> None:
    # the streaming DirectRunner holds no watermark for a user timer, so what a timer emits once the
    # watermark is at the end of time is dropped by a later grouping: the stream stops at 100 s first
    _newest_first(tmp_path, _pipeline(streaming=True), 100)


@pytest.mark.integration
@pytest.mark.prism
def test_prism_steps_in_order_of_start_even_at_the_end_of_time(tmp_path: Path) -> None:
    from transforms.runners import find_prism_binary

    prism = find_prism_binary()
    if prism is None:
        pytest.skip("no Prism binary (bash tools/prism/get_prism.sh builds it; docs/live.md)")
    # Prism holds the step's output watermark at its pending timers: the watermark may jump to the end
    options = PipelineOptions(["--runner=PrismRunner", f"--prism_location={prism}", "--streaming"])
    _newest_first(tmp_path, beam.Pipeline(options=options), None)


def test_streaming_late_panes_are_counted_and_dropped(tmp_path: Path) -> None:
    """[0,10) with 20 s of lateness: its on-time pane is stepped; 7 reports arriving after it make a late
    pane, counted and dropped (the state does not see them); [10,20) is stepped next."""
    rng = np.random.default_rng(SEEDS.spawn(3)[2])
    on_time, later, late = _message(rng, 50, 1), _message(rng, 30, 12), _message(rng, 7, 5)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(on_time, 1), TimestampedValue(later, 12)])
        .advance_watermark_to(15)
        .add_elements([TimestampedValue(late, 5)])
        .advance_watermark_to(60)
        .advance_watermark_to_infinity()
    )
    agg = ToyAggregator(TASK, publish_dir=str(tmp_path / "pub"))
    p = _pipeline(streaming=True)
    out = _run(p, stream, agg, WindowConfig(size_s=10, allowed_lateness_s=20),
               [(0, "ON_TIME", 50, 0), (10_000, "ON_TIME", 30, 10_000)])  # fmt: skip
    out["estimates"] | WriteResults(str(tmp_path / "out"), agg.outputs[0])
    result = p.run()
    result.wait_until_finish()
    # this runner's timers hold no watermark: the rows come after their window's end, the writers keep them
    files = sorted(f.name[:49] for f in (tmp_path / "out").glob("estimates-*.jsonl"))
    assert files == ["estimates-1970-01-01T00:00:00-1970-01-01T00:00:10", "estimates-1970-01-01T00:00:10-"
                     "1970-01-01T00:00:20"], files  # fmt: skip
    assert _counter(result, "sequence_late_panes") == 1 and _counter(result, "sequence_windows") == 2
    assert [q["running"] for q in _publications(tmp_path / "pub")] == [50, 80]


def test_a_failed_publication_fails_the_job(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rng = np.random.default_rng(SEEDS.spawn(4)[3])
    agg = ToyAggregator(TASK, publish_dir=str(blocker / "pub"))
    with pytest.raises(Exception, match="pub"):  # noqa: B017 - Beam wraps the OSError of the write
        with _pipeline() as p:
            dec = p | beam.Create([_message(rng, 5, 1)]) | DecodeReportMessages("mem", agg)
            _ = dec.records | Aggregate(agg, WindowConfig(size_s=10))


def test_panes_of_a_window_merged_when_discarding_latest_when_accumulating() -> None:
    rng = np.random.default_rng(SEEDS.spawn(5)[4])
    agg = ToyAggregator(TASK)
    oracle = TASK.make_oracle()

    def pane(index: int, timing: str, n: int, start: int = 0) -> tuple[WindowInfo, GroupAccumulators]:
        accs = accumulate(agg, GroupAccumulators(), 0, oracle.encode(rng.integers(0, 8, n), rng=rng))
        return WindowInfo(start, start + 10_000, timing, index, timing == "ON_TIME"), accs

    parts = [pane(1, "ON_TIME", 4), pane(0, "EARLY", 3), pane(0, "ON_TIME", 2, start=10_000)]
    merged = SequenceFn(agg, accumulating=False)._windows(parts)
    assert [(i.start_ms, i.pane_index, i.is_last_pane, a.n_reports) for i, a in merged] == [
        (0, 1, True, 7), (10_000, 0, True, 2)]  # fmt: skip
    latest = SequenceFn(agg, accumulating=True)._windows(parts)
    assert [(i.start_ms, a.n_reports) for i, a in latest] == [(0, 4), (10_000, 2)]


# --------------------------------------------------------------------------------------------------------
# the heavy_hitters job's --trie_dir (ldp.kinds.heavy_hitters.job_aggregator)
# --------------------------------------------------------------------------------------------------------

HH = {"task_id": "hh", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0, "max_length": 3}


def test_trie_dir_is_the_aggregators_publish_dir_and_is_created(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ldp.kinds.heavy_hitters import job_aggregator

    trie = parse_task({**HH, "mode": "trie"})
    agg = job_aggregator(SimpleNamespace(trie_dir=str(tmp_path / "a" / "pub"), overwrite=False), trie)
    assert agg.publish_dir == str(tmp_path / "a" / "pub") and (tmp_path / "a" / "pub").is_dir()
    assert window_sequence_of(agg) is not None
    plain = job_aggregator(SimpleNamespace(trie_dir=None, overwrite=False), trie)
    assert getattr(plain, "publish_dir", None) is None  # trie mode without files: the store only
    assert window_sequence_of(job_aggregator(SimpleNamespace(trie_dir=None), parse_task(HH))) is None


def test_trie_dir_errors_are_one_line(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ldp.kinds.heavy_hitters import job_aggregator

    trie, one = parse_task({**HH, "mode": "trie"}), parse_task(HH)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    pub = tmp_path / "pub"
    pub.mkdir()
    (pub / "latest.json").write_text("{}")
    (pub / "generation-000001.json").write_text("{}")
    (pub / "notes.txt").write_text("kept")
    cases = [
        (one, tmp_path / "p1", {}, "needs a task in trie mode"),
        (trie, blocker / "sub\nname", {}, "cannot be created: Not a directory"),
        (trie, pub, {}, "cannot resume the trie: .*latest.json' is not a publication: no integer generation"),
        (trie, pub, {"overwrite": True, "trie_start": "resume"}, "latest.json' is not a publication"),
        (trie, pub, {"trie_start": "later"}, "--trie_start is one of resume, fresh, not 'later'"),
    ]
    for task, path, flags, match in cases:
        with pytest.raises(ValueError, match=match) as e:
            job_aggregator(SimpleNamespace(trie_dir=str(path), **{"overwrite": False, **flags}), task)
        assert "\n" not in str(e.value), e.value
    with pytest.raises(ValueError, match="--trie_start fresh needs --trie_dir"):
        job_aggregator(SimpleNamespace(trie_dir=None, trie_start="fresh"), trie)
    job_aggregator(SimpleNamespace(trie_dir=str(pub), overwrite=True), trie)  # removes the publications only
    assert sorted(p.name for p in pub.iterdir()) == ["notes.txt"]
