"""Sources and sinks: Avro report files, Pub/Sub messages, estimate and dead-letter outputs.

Reports travel as *record batches*: ``(source, [record, ...])`` pairs, where a record is the dict
``fastavro`` decodes from ``schemas/report.avsc``. A file yields one batch per group of Avro blocks
(about ``batch_size`` records); a Pub/Sub message body is one Avro object container (one or many
reports) and yields one batch. Files come from a glob matched once (:class:`ReadReportFiles`, batch) or
from a directory watched for new files (:class:`WatchReportFiles`, streaming). Inputs that cannot be
decoded become dead letters with reason ``undecodable`` and count as one read, one rejected record.
"""

from __future__ import annotations

import io
import json
import os
import time
from typing import Any

import apache_beam as beam
import fastavro
from apache_beam.coders import BooleanCoder
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics import Metrics
from apache_beam.transforms.periodicsequence import ImpulseSeqGenDoFn, ImpulseSeqGenRestrictionProvider
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Duration, Timestamp

import schemas
from transforms.avro_fast import iter_report_batches
from transforms.combine import record_to_json
from transforms.records import fast_decode_params, make_dead_letter

__all__ = [
    "COUNTER_NAMESPACE",
    "ReadReportFiles",
    "WatchReportFiles",
    "Ticks",
    "DecodeReportMessages",
    "AvroRecordSink",
    "WriteEstimates",
    "WriteDeadLetters",
    "WriteCounts",
]

COUNTER_NAMESPACE = "ldp"


UNDECODABLE_COUNTS = {"read": 1, "accepted": 0, "rejected": 1, "rejected_undecodable": 1}


def count_undecodable(read, rejected, undecodable) -> beam.pvalue.TaggedOutput:
    """Increments the counters for one undecodable input; returns the matching ``counts`` output."""
    read.inc()
    rejected.inc()
    undecodable.inc()
    return beam.pvalue.TaggedOutput("counts", dict(UNDECODABLE_COUNTS))


def _fast_params(task: Any) -> dict[str, Any]:
    if task is None:
        return {}
    return {"task_id": task.task_id, **fast_decode_params(task.make_oracle())}


class _ReportSourceFn(beam.DoFn):
    """Common state of the DoFns that turn bytes into report batches: the task's fast-decode parameters
    (built in ``setup``) and the read / rejected / undecodable counters."""

    def __init__(self, task: Any = None) -> None:
        self.task = task
        self._params: dict[str, Any] | None = None
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.undecodable = Metrics.counter(COUNTER_NAMESPACE, "rejected_undecodable")

    def setup(self) -> None:
        self._params = _fast_params(self.task)


class _ReadAvroBatches(_ReportSourceFn):
    """ReadableFile -> (path, batch) pairs; undecodable content -> dead letter.

    A batch is a :class:`~transforms.avro_fast.ColumnBatch` (blocks decoded column-wise) or a list of
    record dicts (blocks ``fastavro`` decoded); the validator takes either.
    """

    def __init__(self, batch_size: int, task: Any = None) -> None:
        super().__init__(task)
        self.batch_size = batch_size

    def process(self, readable_file):
        if self._params is None:
            self.setup()
        path = readable_file.metadata.path
        n_done = 0
        try:
            with readable_file.open() as fh:
                for batch in iter_report_batches(fh, self.batch_size, **self._params):
                    n_done += len(batch)
                    yield (path, batch)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a dead letter, never a crash
            yield count_undecodable(self.read, self.rejected, self.undecodable)
            try:
                with readable_file.open() as fh:
                    head = fh.read(64 * 1024)
            except Exception:  # noqa: BLE001
                head = b""
            yield beam.pvalue.TaggedOutput(
                "dead_letter",
                make_dead_letter(
                    "undecodable",
                    path,
                    detail=f"not a readable Avro report file after {n_done} records: "
                    f"{type(exc).__name__}: {exc}",
                    raw_bytes=head,
                ),
            )


class ReadReportFiles(beam.PTransform):
    """Avro report files matching a glob -> record batches (main) and dead letters (``dead_letter``).

    Files are matched, spread over workers (Reshuffle) and read block-wise; each output element is
    ``(path, records)`` with about ``batch_size`` records.
    """

    def __init__(self, file_pattern: str, batch_size: int = 1 << 15, task: Any = None) -> None:
        super().__init__()
        self.file_pattern = file_pattern
        self.batch_size = batch_size
        self.task = task

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self.file_pattern)
            | "Spread" >> beam.Reshuffle()
            | "Open" >> fileio.ReadMatches()
            | "ReadBlocks"
            >> beam.ParDo(_ReadAvroBatches(self.batch_size, self.task)).with_outputs(
                "dead_letter", "counts", main="records"
            )
        )


class _FirstSightingOnly(beam.DoFn):
    """``(path, FileMetadata)`` -> the metadata, the first time a path is seen (per-path keyed state).

    The state is one boolean per file ever matched; a file that is rewritten under the same name is
    not read again.
    """

    SEEN = ReadModifyWriteStateSpec("seen", BooleanCoder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):  # noqa: B008 - Beam's state idiom
        _path, metadata = element
        if seen.read():
            return
        seen.write(True)
        yield metadata


_WATERMARK_PROVIDER = ManualWatermarkEstimator.default_provider()


class _PacedTicks(ImpulseSeqGenDoFn):
    """``PeriodicImpulse``'s tick generator, sleeping until the next tick is due before deferring.

    The DirectRunner's FnApiRunner re-runs a deferred residual at once, ignoring the delay it asks for:
    unpaced, a watch spins a core and the job's metrics (thousands of bundles) overflow Python's
    recursion limit when they are read. Used on the DirectRunner only; other runners honour the delay.
    """

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        restriction_tracker=beam.DoFn.RestrictionParam(ImpulseSeqGenRestrictionProvider()),  # noqa: B008
        watermark_estimator=beam.DoFn.WatermarkEstimatorParam(_WATERMARK_PROVIDER),  # noqa: B008
    ):
        start, _stop, interval = element
        start_s = start.micros / 1e6 if isinstance(start, Timestamp) else float(start)
        due = start_s + interval * restriction_tracker.current_restriction().start
        wait = due - time.time()
        if wait > 0:
            time.sleep(min(wait, interval))
        yield from ImpulseSeqGenDoFn.process(self, element, restriction_tracker, watermark_estimator)


class Ticks(beam.PTransform):
    """Ticks every ``interval_s`` seconds of processing time from the moment the job starts running, for
    ``duration_s`` seconds (None: forever); each tick is its own time as a timestamped element.

    ``PeriodicImpulse`` with its start rebased to the job's start (so runner start-up does not eat into
    the duration); ``paced`` selects :class:`_PacedTicks` (for the DirectRunner).
    """

    def __init__(self, interval_s: float, duration_s: float | None = None, paced: bool = False) -> None:
        super().__init__()
        self.interval_s = float(interval_s)
        self.duration_s = duration_s
        self.paced = paced

    def expand(self, pbegin):
        interval, duration = self.interval_s, self.duration_s

        def bounds(_):
            now = Timestamp.now()
            stop = MAX_TIMESTAMP if duration is None else now + Duration.of(duration)
            return (now, stop, interval)

        gen = _PacedTicks() if self.paced else ImpulseSeqGenDoFn()
        return (
            pbegin
            | "Impulse" >> beam.Impulse()
            | "Bounds" >> beam.Map(bounds)
            | "Generate" >> beam.ParDo(gen)
        )


class WatchReportFiles(beam.PTransform):
    """Report files appearing under a glob, each read once -> record batches and dead letters (streaming).

    :class:`Ticks` (``PeriodicImpulse``'s generator) tick every ``interval_s`` seconds from the moment the
    job starts running (runner start-up does not eat into ``duration_s``); each tick matches the glob
    (``fileio.MatchAll``), a stateful DoFn keyed by path lets through the paths never seen before, and
    those files are read block-wise exactly like :class:`ReadReportFiles`. Outputs are those of
    :class:`ReadReportFiles`; a batch carries the time of the tick that found its file (the source's
    watermark follows the ticks, i.e. the wall clock), and the validator re-timestamps reports by their
    event time.

    ``paced``: sleep until each tick is due (:class:`_PacedTicks`; set it on the DirectRunner).
    ``duration_s`` None watches forever; otherwise the ticks stop after ``duration_s`` seconds, the
    watermark then moves to the end of time, every window closes and the job finishes by itself.

    Files must appear *atomically* under a name the glob matches (write them elsewhere or under a
    non-matching name, then rename): a file is read once, when a tick first sees it.

    Built from ``PeriodicImpulse`` rather than ``fileio.MatchContinuously``: in apache-beam 2.77 the
    latter is a splittable ``Watch`` DoFn that the Python DirectRunner does not run (the FnApiRunner
    ends the job at once; the streaming BundleBasedDirectRunner rejects it).
    """

    def __init__(
        self,
        file_pattern: str,
        interval_s: float = 10.0,
        batch_size: int = 1 << 15,
        task: Any = None,
        duration_s: float | None = None,
        paced: bool = False,
    ) -> None:
        super().__init__()
        if not interval_s > 0:
            raise ValueError(f"watch interval must be positive, got {interval_s}")
        if duration_s is not None and not duration_s > 0:
            raise ValueError(f"watch duration must be positive, got {duration_s}")
        self.file_pattern = file_pattern
        self.interval_s = float(interval_s)
        self.batch_size = batch_size
        self.task = task
        self.duration_s = duration_s
        self.paced = paced

    def expand(self, pbegin):
        pattern = self.file_pattern
        return (
            pbegin
            | "Ticks" >> Ticks(self.interval_s, self.duration_s, self.paced)
            | "Pattern" >> beam.Map(lambda _tick: pattern)
            | "Match" >> fileio.MatchAll(fileio.EmptyMatchTreatment.ALLOW)
            | "KeyByPath" >> beam.Map(lambda m: (m.path, m)).with_output_types(tuple[str, FileMetadata])
            | "NewFiles" >> beam.ParDo(_FirstSightingOnly())
            | "Open" >> fileio.ReadMatches()
            | "ReadBlocks"
            >> beam.ParDo(_ReadAvroBatches(self.batch_size, self.task)).with_outputs(
                "dead_letter", "counts", main="records"
            )
        )


class _DecodeMessage(_ReportSourceFn):
    """Pub/Sub message (an Avro container of reports) -> (source, batch); undecodable -> dead letter."""

    def __init__(self, source: str, task: Any = None) -> None:
        super().__init__(task)
        self.source = source

    def process(self, message):
        if self._params is None:
            self.setup()
        data = getattr(message, "data", message)
        try:
            batches = list(iter_report_batches(io.BytesIO(bytes(data)), 1 << 30, **self._params))
        except Exception as exc:  # noqa: BLE001
            yield count_undecodable(self.read, self.rejected, self.undecodable)
            yield beam.pvalue.TaggedOutput(
                "dead_letter",
                make_dead_letter(
                    "undecodable",
                    self.source,
                    detail=f"message is not an Avro report container: {type(exc).__name__}: {exc}",
                    raw_bytes=bytes(data) if isinstance(data, (bytes, bytearray)) else repr(data).encode(),
                ),
            )
            return
        for batch in batches:
            if len(batch):
                yield (self.source, batch)


class DecodeReportMessages(beam.PTransform):
    """Message bodies (bytes or ``PubsubMessage``) -> record batches (main) and dead letters."""

    def __init__(self, source: str, task: Any = None) -> None:
        super().__init__()
        self.source = source
        self.task = task

    def expand(self, messages):
        return messages | "Decode" >> beam.ParDo(_DecodeMessage(self.source, self.task)).with_outputs(
            "dead_letter", "counts", main="records"
        )


class AvroRecordSink(fileio.FileSink):
    """``fileio`` sink writing dicts as an Avro object container with one of the package schemas."""

    def __init__(self, schema_name: str = "estimate") -> None:
        self.schema_name = schema_name
        self._writer = None

    def open(self, fh) -> None:
        self._writer = fastavro.write.Writer(fh, schemas.parsed_schema(self.schema_name))

    def write(self, record) -> None:
        self._writer.write(record)

    def flush(self) -> None:
        self._writer.flush()


def _avro_sink_fn(schema_name: str):
    return lambda _destination: AvroRecordSink(schema_name)


class _JsonLine(beam.DoFn):
    def process(self, rec):
        yield json.dumps(record_to_json(rec), allow_nan=False)


class WriteEstimates(beam.PTransform):
    """Estimate records -> ``OUT/estimates-*.jsonl`` (JSON Lines) and ``OUT/estimates-*.avro``.

    ``fileio`` names the files by window and shard, not pane (Beam 2.77): a later pane of a window
    replaces the earlier file or is written as the next shard (Flink); every record carries its pane.
    """

    def __init__(self, output_dir: str, shards: int = 1) -> None:
        super().__init__()
        self.output_dir = output_dir
        self.shards = shards

    def expand(self, estimates):
        jsonl = (
            estimates
            | "ToJson" >> beam.ParDo(_JsonLine())
            | "WriteJson"
            >> fileio.WriteToFiles(
                path=self.output_dir,
                file_naming=fileio.default_file_naming("estimates", ".jsonl"),
                shards=self.shards,
            )
        )
        avro = estimates | "WriteAvro" >> fileio.WriteToFiles(
            path=self.output_dir,
            file_naming=fileio.default_file_naming("estimates", ".avro"),
            sink=_avro_sink_fn("estimate"),
            shards=self.shards,
        )
        return {"jsonl": jsonl, "avro": avro}


class WriteCounts(beam.PTransform):
    """Windowed count dicts -> ``OUT/counts/counts-*.jsonl`` (one line per window)."""

    def __init__(self, output_dir: str) -> None:
        super().__init__()
        self.output_dir = os.path.join(output_dir, "counts")

    def expand(self, counts):
        return (
            counts
            | "ToJson" >> beam.Map(lambda c: json.dumps(c, sort_keys=True))
            | "WriteJson"
            >> fileio.WriteToFiles(
                path=self.output_dir, file_naming=fileio.default_file_naming("counts", ".jsonl"), shards=1
            )
        )


class WriteDeadLetters(beam.PTransform):
    """Dead-letter records -> ``OUT/dead_letter/dead_letter-*.avro``.

    In streaming, dead letters are grouped into fixed processing windows of ``window_s`` so files close.
    """

    def __init__(self, output_dir: str, streaming: bool = False, window_s: float = 60.0) -> None:
        super().__init__()
        self.output_dir = os.path.join(output_dir, "dead_letter")
        self.streaming = streaming
        self.window_s = window_s

    def expand(self, dead):
        if self.streaming:
            dead = dead | "Window" >> beam.WindowInto(beam.window.FixedWindows(self.window_s))
        return dead | "WriteAvro" >> fileio.WriteToFiles(
            path=self.output_dir,
            file_naming=fileio.default_file_naming("dead_letter", ".avro"),
            sink=_avro_sink_fn("dead_letter"),
            shards=1,
        )
