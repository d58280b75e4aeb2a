"""Sources and sinks: Avro report files, Pub/Sub messages, estimate and dead-letter outputs.

Reports travel as *record batches*: ``(source, [record, ...])`` pairs, where a record is the dict
``fastavro`` decodes from ``schemas/report.avsc``. A file yields one batch per group of Avro blocks
(about ``batch_size`` records); a Pub/Sub message body is one Avro object container (one or many
reports) and yields one batch. Inputs that cannot be decoded become dead letters with reason
``undecodable`` and count as one read, one rejected record.
"""

from __future__ import annotations

import json
import os
from typing import Any

import apache_beam as beam
import fastavro
from apache_beam.io import fileio
from apache_beam.metrics import Metrics

import schemas
from transforms.combine import record_to_json
from transforms.records import decode_container, iter_record_batches, make_dead_letter

__all__ = [
    "COUNTER_NAMESPACE",
    "ReadReportFiles",
    "DecodeReportMessages",
    "AvroRecordSink",
    "WriteEstimates",
    "WriteDeadLetters",
]

COUNTER_NAMESPACE = "ldp"


def count_undecodable(read, rejected, undecodable) -> None:
    read.inc()
    rejected.inc()
    undecodable.inc()


class _ReadAvroBatches(beam.DoFn):
    """ReadableFile -> (path, records) batches; undecodable content -> dead letter."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.undecodable = Metrics.counter(COUNTER_NAMESPACE, "rejected_undecodable")

    def process(self, readable_file):
        path = readable_file.metadata.path
        n_done = 0
        try:
            with readable_file.open() as fh:
                for batch in iter_record_batches(fh, self.batch_size):
                    n_done += len(batch)
                    yield (path, batch)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a dead letter, never a crash
            count_undecodable(self.read, self.rejected, self.undecodable)
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
                    detail=f"not a readable Avro report file after {n_done} records: {type(exc).__name__}: {exc}",
                    raw_bytes=head,
                ),
            )


class ReadReportFiles(beam.PTransform):
    """Avro report files matching a glob -> record batches (main) and dead letters (``dead_letter``).

    Files are matched, spread over workers (Reshuffle) and read block-wise; each output element is
    ``(path, records)`` with about ``batch_size`` records.
    """

    def __init__(self, file_pattern: str, batch_size: int = 1 << 15) -> None:
        super().__init__()
        self.file_pattern = file_pattern
        self.batch_size = batch_size

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self.file_pattern)
            | "Spread" >> beam.Reshuffle()
            | "Open" >> fileio.ReadMatches()
            | "ReadBlocks"
            >> beam.ParDo(_ReadAvroBatches(self.batch_size)).with_outputs("dead_letter", main="records")
        )


class _DecodeMessage(beam.DoFn):
    def __init__(self, source: str) -> None:
        self.source = source
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.undecodable = Metrics.counter(COUNTER_NAMESPACE, "rejected_undecodable")

    def process(self, message):
        data = getattr(message, "data", message)
        try:
            records = decode_container(bytes(data))
        except Exception as exc:  # noqa: BLE001
            count_undecodable(self.read, self.rejected, self.undecodable)
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
        if records:
            yield (self.source, records)


class DecodeReportMessages(beam.PTransform):
    """Message bodies (bytes or ``PubsubMessage``) -> record batches (main) and dead letters."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def expand(self, messages):
        return messages | "Decode" >> beam.ParDo(_DecodeMessage(self.source)).with_outputs(
            "dead_letter", main="records"
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

    One file of each kind per window and pane (the ``fileio`` naming carries window and pane).
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
