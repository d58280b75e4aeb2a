"""Late reports (transforms.lateness): dropped against the watermark the same way on the streaming
DirectRunner and the FnApiRunner, counted as ``late_dropped`` and dead-lettered with reason ``late``, with
the accounting identity ``read = accepted + rejected`` and ``accepted = in_estimates + late_dropped``."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window as bw
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import WindowConfig, parse_task
from transforms.aggregate import Aggregate
from transforms.counts import SumCounts
from transforms.io import DecodeReportMessages
from transforms.lateness import LATE_REASON, drops_late_data, last_window
from wire.records import encode_report_container, reports_to_records

SEEDS = np.random.SeedSequence(2026_12_01_12)
TASK = parse_task({"task_id": "t-late", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8})


def _message(rng, n, event_s, bad=0):
    oracle = TASK.make_oracle()
    reports = oracle.encode(rng.integers(0, 8, n), rng=rng)
    recs = reports_to_records(TASK.task_id, reports, np.full(n, int(event_s * 1000)), 0)
    for r in recs[:bad]:
        r["task_id"] = "another-task"  # refused by validation: wrong_task
    return encode_report_container(recs)


def _options(runner: str | None = None) -> PipelineOptions:
    opts = PipelineOptions() if runner is None else PipelineOptions(runner=runner)
    opts.view_as(StandardOptions).streaming = True
    return opts


def _totals(dicts):
    acc = SumCounts().create_accumulator()
    for d in dicts:
        SumCounts().add_input(acc, d)
    return SumCounts().extract_output(acc)


def _check_counts(want):
    def check(dicts):
        got = _totals(dicts)
        keys = ("read", "accepted", "rejected", "rejected_wrong_task", "late_dropped")
        assert {k: got.get(k, 0) for k in keys} == want, got

    return check


def _check_dead(n_late_batches):
    def check(dead):
        late = [d for d in dead if d["reason"] == LATE_REASON]
        assert len(late) == n_late_batches, dead
        for d in late:
            assert d["task_id"] == TASK.task_id and d["raw_record"] is None and d["raw_bytes"] is None
            assert "arrived after window" in d["detail"] and "allowed lateness of 20 s" in d["detail"]

    return check


def _pane_key(row):
    return (row.window_start, row.pane_timing, row.n_reports)


def _check_identity(want):
    """Count dicts and ``{"in_estimates": n}`` per pane: the numbers, and read = accepted + rejected,
    accepted = in_estimates + late_dropped."""

    def check(dicts):
        got = _totals(dicts)
        keys = ("read", "accepted", "rejected", "rejected_wrong_task", "late_dropped", "in_estimates")
        assert {k: got.get(k, 0) for k in keys} == want, got
        assert got["read"] == got["accepted"] + got["rejected"]
        assert got["accepted"] == got["in_estimates"] + got["late_dropped"]

    return check


def test_late_reports_are_dropped_counted_and_dead_lettered():
    """Window [0,10) with 20 s of allowed lateness: 50 on-time reports (+3 refused), 7 late ones within the
    lateness (a late pane); once the watermark is past 30 s, 9 more for [0,10) are dropped, counted and
    dead-lettered; 30 reports of [10,20) are on time; after 60 s, 4 reports for [20,30) -- a window no
    report was seen for, closed at 50 s -- are dropped too. accepted 100 = 87 in estimates + 13 late."""
    rng = np.random.default_rng(SEEDS.spawn(1)[0])
    a, b, late, too_late, unseen = (
        _message(rng, 53, 1, bad=3),
        _message(rng, 30, 12),
        _message(rng, 7, 5),
        _message(rng, 9, 6),
        _message(rng, 4, 25),
    )
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(a, 1), TimestampedValue(b, 12)])
        .advance_watermark_to(15)
        .add_elements([TimestampedValue(late, 5)])
        .advance_watermark_to(40)
        .add_elements([TimestampedValue(too_late, 6)])
        .advance_watermark_to(61)
        .add_elements([TimestampedValue(unseen, 25)])
        .advance_watermark_to_infinity()
    )
    w = WindowConfig(size_s=10, allowed_lateness_s=20)
    agg = FrequencyAggregator(TASK)
    with TestPipeline(options=_options()) as p:
        dec = p | stream | DecodeReportMessages("stream", agg)
        out = dec.records | Aggregate(agg, w)
        panes = out["estimates"] | beam.Map(_pane_key)
        assert_that(panes, equal_to([(0, "ON_TIME", 50), (0, "LATE", 7), (10_000, "ON_TIME", 30)]))
        in_estimates = (
            out["estimates"]
            | "InEstimates" >> beam.Map(lambda r: {"in_estimates": r.n_reports})
            | "GlobalEstimates" >> beam.WindowInto(bw.GlobalWindows())
        )
        counts = (dec.counts, out["counts"]) | "AllCounts" >> beam.Flatten()
        counts = counts | "GlobalCounts" >> beam.WindowInto(bw.GlobalWindows())
        want = {"read": 103, "accepted": 100, "rejected": 3, "rejected_wrong_task": 3, "late_dropped": 13,
                "in_estimates": 87}  # fmt: skip
        assert_that((counts, in_estimates) | beam.Flatten(), _check_identity(want), label="identity")
        dead = (dec.dead_letter, out["dead_letter"]) | "AllDead" >> beam.Flatten()
        assert_that(dead | "GlobalDead" >> beam.WindowInto(bw.GlobalWindows()), _check_dead(2), label="dead")


def test_sliding_windows_drop_a_report_only_when_its_last_window_closed():
    """Sliding windows of 10 s every 5 s, no lateness. After the watermark reaches 11 s, a report at 7 s
    has lost [0,10) but [5,15) is open: it counts there (not late_dropped); after 16 s a report at 8 s has
    both windows closed: dropped and counted."""
    rng = np.random.default_rng(SEEDS.spawn(2)[1])
    first, partly, fully = _message(rng, 20, 7), _message(rng, 4, 7), _message(rng, 6, 8)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(first, 7)])
        .advance_watermark_to(11)
        .add_elements([TimestampedValue(partly, 7)])
        .advance_watermark_to(16)
        .add_elements([TimestampedValue(fully, 8)])
        .advance_watermark_to_infinity()
    )
    w = WindowConfig(size_s=10, period_s=5, allowed_lateness_s=0)
    agg = FrequencyAggregator(TASK)
    with TestPipeline(options=_options()) as p:
        dec = p | stream | DecodeReportMessages("stream", agg)
        out = dec.records | Aggregate(agg, w)
        assert_that(
            out["estimates"] | beam.Map(_pane_key), equal_to([(0, "ON_TIME", 20), (5_000, "ON_TIME", 24)])
        )
        counts = (dec.counts, out["counts"]) | "AllCounts" >> beam.Flatten()
        assert_that(
            counts | "Global" >> beam.WindowInto(bw.GlobalWindows()),
            _check_counts(
                {"read": 30, "accepted": 30, "rejected": 0, "rejected_wrong_task": 0, "late_dropped": 6}
            ),
            label="counts",
        )


def test_last_window_and_when_late_data_is_dropped():
    ts = Timestamp(seconds=7)
    assert last_window(bw.FixedWindows(10), ts) == bw.IntervalWindow(0, 10)
    assert last_window(bw.SlidingWindows(10, 5), ts) == bw.IntervalWindow(5, 15)
    assert last_window(bw.SlidingWindows(10, 5), Timestamp(seconds=5)) == bw.IntervalWindow(5, 15)
    assert drops_late_data(WindowConfig(size_s=60), streaming=True)
    assert not drops_late_data(WindowConfig(size_s=60), streaming=False)  # a bounded job has no late data
    assert not drops_late_data(WindowConfig(), streaming=True)  # the global window is never late
