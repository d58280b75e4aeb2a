"""Dead-letter files (transforms.io.WriteDeadLetters): every dead letter reaches ``OUT/dead_letter/``.

In streaming, dead letters are windowed into fixed windows so files close. A dead letter whose element
timestamp is already behind the watermark (a late Pub/Sub message refused by validation keeps the message's
old timestamp) must not be dropped with its closed window: ``read = accepted + rejected`` promises that
nothing is lost. The tests read the Avro files back and count the records exactly.
"""

from __future__ import annotations

import glob
import os

import apache_beam as beam
import fastavro
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import WindowConfig, parse_task
from transforms.aggregate import Aggregate
from transforms.io import DecodeReportMessages, WriteDeadLetters
from transforms.lateness import LATE_REASON
from wire.records import encode_report_container, make_dead_letter, reports_to_records

SEEDS = np.random.SeedSequence(2026_12_01_13)
TASK = parse_task({"task_id": "t-dead", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4})


def _streaming() -> PipelineOptions:
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    return opts


def _written(out_dir: str) -> list[dict]:
    paths = sorted(glob.glob(os.path.join(out_dir, "dead_letter", "dead_letter-*.avro")))
    recs: list[dict] = []
    for path in paths:
        with open(path, "rb") as fh:
            recs.extend(fastavro.reader(fh))
    return recs


def _dead(i: int, at_s: int) -> dict:
    return make_dead_letter("wrong_task", "stream", detail=f"letter {i}", at_ms=at_s * 1000)


def test_streaming_dead_letters_behind_the_watermark_are_still_written(tmp_path):
    """Two dead letters on time for [0,60); the watermark then passes 1000 s, so [0,60) is closed; three
    more carrying old timestamps (5 s, 30 s, 59 s) arrive. All five are in the files, each exactly once."""
    on_time = [_dead(0, 1), _dead(1, 2)]
    late = [_dead(2, 5), _dead(3, 30), _dead(4, 59)]
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(d, d["dead_letter_time"] / 1000) for d in on_time])
        .advance_watermark_to(1000)
        .add_elements([TimestampedValue(d, d["dead_letter_time"] / 1000) for d in late])
        .advance_watermark_to_infinity()
    )
    with TestPipeline(options=_streaming()) as p:
        _ = p | stream | WriteDeadLetters(str(tmp_path), streaming=True, window_s=60)
    got = _written(str(tmp_path))
    assert len(got) == 5
    assert sorted(r["detail"] for r in got) == [f"letter {i}" for i in range(5)]


def _message(rng: np.random.Generator, n: int, event_s: float, bad: int) -> bytes:
    reports = TASK.make_oracle().encode(rng.integers(0, 4, n), rng=rng)
    recs = reports_to_records(TASK.task_id, reports, np.full(n, int(event_s * 1000)), 0)
    for r in recs[:bad]:
        r["task_id"] = "another-task"  # refused by validation: wrong_task
    return encode_report_container(recs)


def test_a_late_message_refused_by_validation_keeps_every_dead_letter(tmp_path):
    """The job's path (pipelines/job.py): messages decoded, validated and aggregated in windows of 10 s;
    the dead letters of decoding and of validation flattened and written. A message at 3 s with 4 refused
    reports is on time. After the watermark passed 500 s, a message stamped 7 s arrives with 6 refused
    reports (its 3 valid ones are late: one ``late`` dead letter for the batch), and one stamped 8 s whose
    body is not Avro (one dead letter). 4 + 6 + 1 + 1 dead letters are written."""
    rng = np.random.default_rng(SEEDS)
    first, late = _message(rng, 10, 3, bad=4), _message(rng, 9, 7, bad=6)
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue(first, 3)])
        .advance_watermark_to(500)
        .add_elements([TimestampedValue(late, 7), TimestampedValue(b"not an avro container", 8)])
        .advance_watermark_to_infinity()
    )
    agg = FrequencyAggregator(TASK)
    with TestPipeline(options=_streaming()) as p:
        dec = p | stream | DecodeReportMessages("stream", agg)
        out = dec.records | Aggregate(agg, WindowConfig(size_s=10))
        dead = (dec.dead_letter, out["dead_letter"]) | beam.Flatten()
        _ = dead | WriteDeadLetters(str(tmp_path), streaming=True, window_s=10)
    got = _written(str(tmp_path))
    reasons = sorted(r["reason"] for r in got)
    assert len(got) == 12, reasons
    assert reasons.count("wrong_task") == 10 and reasons.count(LATE_REASON) == 1, reasons
    assert len(set(reasons) - {"wrong_task", LATE_REASON}) == 1, reasons
    assert all(r["raw_bytes"] is None for r in got)


def test_batch_dead_letters_are_written_in_the_global_window(tmp_path):
    letters = [_dead(i, i) for i in range(4)]
    with TestPipeline() as p:
        _ = p | beam.Create(letters) | WriteDeadLetters(str(tmp_path))
    got = _written(str(tmp_path))
    assert sorted(r["detail"] for r in got) == [f"letter {i}" for i in range(4)]


def test_processing_time_windows_before_the_file_sinks_allow_lateness():
    """The file sink's grouping steps inherit these windows; a written-file record reaching the second
    one after the watermark passed the window's end must not be dropped (transforms.counts
    FILE_WRITE_SLACK_S). Counts windows accumulate, so a late pane is the whole window."""
    from apache_beam.transforms.trigger import AccumulationMode

    from transforms.counts import FILE_WRITE_SLACK_S, WindowedCounts

    p = beam.Pipeline()
    counts = p | "C" >> beam.Create([{"read": 1}]) | WindowedCounts(2.0)
    ws = counts.windowing
    assert ws.allowed_lateness == FILE_WRITE_SLACK_S and FILE_WRITE_SLACK_S >= 60
    assert ws.accumulation_mode == AccumulationMode.ACCUMULATING
