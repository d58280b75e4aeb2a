"""Sources and sinks: Avro report files, Pub/Sub messages; result rows, dead letters and counts.

Reports travel as *record batches* (:class:`~wire.validate.RecordBatch`): ``(source, records)``,
where ``records`` is a column-wise :class:`~wire.decode.ColumnBatch` or a list of the dicts
``fastavro`` decodes from ``schemas/report.avsc``. A file yields one batch per group of Avro blocks
(about ``batch_size`` records); a Pub/Sub message body is one Avro object container (one or many
reports) and yields one batch. Files come from a glob matched once (:class:`ReadReportFiles`, batch) or
from a directory watched for new, complete files (:class:`WatchReportFiles`, streaming). Every part of an
input that is not records (a non-Avro file, a truncated or corrupt block, a bad sync marker, an oversized
message, ...: :data:`wire.decode.LOSS_REASONS`) becomes one dead letter with its reason and
counts as one read, one rejected input, plus the ``lost_bytes`` / ``lost_blocks`` / ``lost_records`` it
cost. Dead letters never hold input bytes (docs/pipelines.md, the dead-letter privacy contract).

Every kind of result row is written by :class:`WriteResults` from its :class:`~ldp.aggregate.OutputSpec`:
JSON Lines and Avro, one file per window *and pane* (``OUT/<subdir>/<prefix>-<start>-<end>-paneNNNNN-
SSSSS-of-NNNNN.jsonl``; no window part for the global window), so no pane ever replaces another. The Avro
file holds every value; a JSON Lines row of a spec with ``top_json`` (frequency estimates) holds at most
``jsonl_max_values`` of them (``--jsonl_max_values``, docs/pipelines.md). Long vectors reach the sinks as
numpy arrays (:func:`pack_record`), which the Avro sink writes in one piece (:class:`VectorRecordEncoder`).
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
from apache_beam.coders import BooleanCoder, FloatCoder, TupleCoder, VarIntCoder
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PBegin, PCollection, TaggedOutput
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Duration, Timestamp

import schemas
from ldp.aggregate import Aggregator, OutputSpec, Record, ResultRow, json_record
from ldp.kinds.frequency.aggregate import DEFAULT_JSONL_MAX_VALUES
from ldp.kinds.range.aggregate import read_model_records  # re-exported: model files are read without Beam
from transforms.counts import COUNTER_NAMESPACE, FILE_WRITE_SLACK_S, AtProcessingTime
from transforms.display import item, task_display, task_id_display
from transforms.flink_ticks import FlinkTicks
from transforms.progress import progress
from transforms.runners import LaggedTicks, default_watermark_lag, pane_file_naming
from wire.decode import Loss, iter_report_batches
from wire.records import make_dead_letter
from wire.validate import RecordBatch, decode_params

__all__ = [
    "COUNTER_NAMESPACE",
    "ReadReportFiles",
    "WatchReportFiles",
    "Ticks",
    "DecodeReportMessages",
    "AvroRecordSink",
    "WriteResults",
    "WriteDeadLetters",
    "WriteCounts",
    "read_model_records",
    "shuffled_batches",
]

_LOG = logging.getLogger(__name__)


UNDECODABLE_COUNTS = {"read": 1, "accepted": 0, "rejected": 1, "rejected_undecodable": 1}

#: Pub/Sub messages larger than this are dead-lettered unread (Pub/Sub's own limit is 10 MB).
MAX_MESSAGE_BYTES = 10_000_000


def loss_counts(loss: Loss) -> dict[str, int]:
    """The counts of one lost part of an input: one read and rejected input with the loss's reason, and
    the bytes, blocks and declared records lost (``lost_bytes``, ``lost_blocks``, ``lost_records``)."""
    return {
        "read": 1,
        "accepted": 0,
        "rejected": 1,
        f"rejected_{loss.reason}": 1,
        "lost_bytes": int(loss.lost_bytes),
        "lost_blocks": int(loss.lost_blocks),
        "lost_records": int(loss.lost_records),
    }


def loss_detail(loss: Loss) -> str:
    """A loss as one line: what was lost and why (never input bytes)."""
    return (
        f"{loss.detail}; lost {loss.lost_bytes} bytes, {loss.lost_blocks} block(s), "
        f"{loss.lost_records} declared record(s) from byte {loss.offset}"
    )


class _ReportSourceFn(beam.DoFn):
    """Common state of the DoFns that turn bytes into report batches: the task's fast-decode parameters
    (built in ``setup`` from its aggregator; none: fastavro decodes everything) and the read / rejected /
    lost counters."""

    def __init__(self, aggregator: Aggregator | None = None) -> None:
        self.aggregator = aggregator
        self._params: dict[str, object] | None = None
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.lost = {
            k: Metrics.counter(COUNTER_NAMESPACE, k) for k in ("lost_bytes", "lost_blocks", "lost_records")
        }

    def setup(self) -> None:
        self._params = decode_params(self.aggregator)

    def display_data(self) -> dict[str, Any]:
        return task_display(self.aggregator)

    def loss_outputs(self, source: str, loss: Loss, identity: str = "") -> list[TaggedOutput]:
        """Counts one lost part of an input; its ``counts`` and ``dead_letter`` outputs. ``identity``
        (size and hash of a wholly undecodable input) goes into the detail; the input's bytes never do."""
        counts = loss_counts(loss)
        self.read.inc()
        self.rejected.inc()
        Metrics.counter(COUNTER_NAMESPACE, f"rejected_{loss.reason}").inc()
        for k, c in self.lost.items():
            if counts[k]:
                c.inc(counts[k])
        where = source if loss.reason == "undecodable" else f"{source}@{loss.offset}"
        dead = make_dead_letter(loss.reason, where, detail=identity + loss_detail(loss))
        return [TaggedOutput("counts", counts), TaggedOutput("dead_letter", dead)]


def _identity(size: int, digest: str) -> str:
    return f"input of {size} bytes, sha256 {digest}: "


class _ReadAvroBatches(_ReportSourceFn):
    """ReadableFile -> (path, batch) pairs; parts that are not records -> counted losses and dead letters.

    A batch is a :class:`~wire.decode.ColumnBatch` (blocks decoded column-wise) or a list of
    record dicts (blocks ``fastavro`` decoded); the validator takes either. Errors of the file system
    (``OSError``) are not data: they fail the bundle and the runner retries it.
    """

    def __init__(self, batch_size: int, aggregator: Aggregator | None = None) -> None:
        super().__init__(aggregator)
        self.batch_size = batch_size

    def display_data(self) -> dict[str, Any]:
        return {**super().display_data(), "batch_size": item(self.batch_size, "Records per batch")}

    def process(self, readable_file: fileio.ReadableFile):
        if self._params is None:
            self.setup()
        path = readable_file.metadata.path
        losses: list[Loss] = []
        with readable_file.open() as fh:
            for batch in iter_report_batches(fh, self.batch_size, losses=losses, **self._params):
                progress().add_input(len(batch))
                yield RecordBatch(path, batch)
                while losses:
                    yield from self._loss(readable_file, path, losses.pop(0))
        for loss in losses:
            yield from self._loss(readable_file, path, loss)
        progress().add_input(0, files=1)

    def _loss(self, readable_file: fileio.ReadableFile, path: str, loss: Loss) -> list[TaggedOutput]:
        identity = ""
        if loss.reason == "undecodable":  # name, size and hash of a file that is not a report container
            h = hashlib.sha256()
            size = 0
            with readable_file.open() as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
                    size += len(chunk)
            identity = _identity(size, h.hexdigest())
        return self.loss_outputs(path, loss, identity)


class ReadReportFiles(beam.PTransform):
    """Avro report files matching a glob -> record batches (main) and dead letters (``dead_letter``).

    Files are matched, spread over workers (Reshuffle) and read block-wise; each output element is
    ``(path, records)`` with about ``batch_size`` records.
    """

    def __init__(
        self, file_pattern: str, batch_size: int = 1 << 15, aggregator: Aggregator | None = None
    ) -> None:
        super().__init__()
        self.file_pattern = file_pattern
        self.batch_size = batch_size
        self.aggregator = aggregator

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            "file_pattern": item(self.file_pattern, "Report files"),
            "batch_size": item(self.batch_size, "Records per batch"),
        }

    def expand(self, pbegin: PBegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self.file_pattern)
            | "Spread" >> beam.Reshuffle()
            | "Open" >> fileio.ReadMatches()
            | "ReadBlocks"
            >> beam.ParDo(_ReadAvroBatches(self.batch_size, self.aggregator)).with_outputs(
                "dead_letter", "counts", main="records"
            )
        )


#: The marker a writer may create next to a finished report file (``f.avro`` -> ``f.avro.done``).
DONE_SUFFIX = ".done"


def dangling_links(pattern: str) -> list[tuple[str, str]]:
    """``(path, target)`` of the symbolic links a local glob matches whose target does not exist, sorted.
    Beam's file matching skips them without a word; the jobs name them (an error in batch, a warning in
    the watch). Patterns of other file systems (``gs://...``) have none."""
    if "://" in pattern:
        return []
    out = []
    for path in sorted(glob.glob(pattern)):
        if os.path.islink(path) and not os.path.exists(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            out.append((path, target))
    return out


def shuffled_batches(
    pattern: str, key: bytes | None = None, task_id: str | None = None
) -> tuple[list[dict[str, object]], list[str]]:
    """What the shuffler says about the report files ``pattern`` matches, authenticated: ``(batches, plain)``.

    Each file is read whole and checked by :func:`ldp.shuffle.provenance.verify_batch` under ``key`` (the
    job's ``--shuffle_key``; None: none given) for the job's ``task_id``: its header is parsed, every
    block walked with each length bounds-checked, its records counted from the blocks and its tag
    verified. A file with the shuffler's metadata becomes one entry
    (:func:`transforms.shuffle.manifest_entry` plus ``path`` and ``min_reports``) whose ``n`` is the
    number of records its body holds (never the header's word; ``declared_n`` keeps that), with
    ``verified`` and ``provenance`` (None, or the reason code it did not verify: ``no_key``, ``no_tag``,
    ``bad_tag``, ``n_mismatch``, ``wrong_task``...); any other file (no such metadata, or not a
    well-formed container) is listed in ``plain``. The files, not ``OUT/batches.jsonl``, are read because
    they are the very files the job reads: a manifest could describe other files than the glob matches.
    ``.done`` markers are skipped."""
    from ldp.shuffle.provenance import verify_batch, verify_file
    from transforms.shuffle import META_N, META_PREFIX, manifest_entry

    batches: list[dict[str, object]] = []
    plain: list[str] = []
    paths = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    for path in paths:
        if path.endswith(DONE_SUFFIX):
            continue
        if "://" in path:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
                verdict = verify_batch(fh.read(), key, task_id=task_id or "")
        else:
            verdict = verify_file(path, key, task_id=task_id or "")
        raw = verdict.metadata
        meta = {k: v.decode("utf-8", errors="replace") for k, v in raw.items() if k.startswith(META_PREFIX)}
        if verdict.reason in ("malformed", "not_a_batch") or META_N not in meta:
            plain.append(path)  # not a batch the shuffler wrote: the job dead-letters what it cannot read
            continue
        try:
            entry = manifest_entry(os.path.basename(path), meta)
            entry.update(min_reports=int(meta.get(META_PREFIX + "min_reports", "0")))
        except (ValueError, KeyError):
            plain.append(path)  # the shuffler's keys, but not values it writes
            continue
        entry.update(
            path=path,
            n=verdict.n_records,
            declared_n=verdict.declared_n,
            verified=verdict.verified,
            provenance=verdict.reason,
        )
        batches.append(entry)
    return batches, plain


class _WarnDanglingLinks(beam.DoFn):
    """Passes the watch's pattern through; logs a warning naming every dangling symbolic link it matches
    (once per link and worker) and counts them (``ldp/dangling_links``)."""

    def setup(self) -> None:
        self._warned: set[str] = set()
        self._counter = Metrics.counter(COUNTER_NAMESPACE, "dangling_links")

    def process(self, pattern: str):
        for path, target in dangling_links(pattern):
            if path not in self._warned:
                self._warned.add(path)
                self._counter.inc()
                _LOG.warning(
                    "watched --input %r matches the dangling symbolic link %r -> %r: its target does not "
                    "exist, it is not read", pattern, path, target,
                )  # fmt: skip
        yield pattern

# (size, mtime, read, time of the newest tick that saw the file: seconds, -inf when unknown)
_FILE_STATE = TupleCoder([VarIntCoder(), FloatCoder(), BooleanCoder(), FloatCoder()])


class _ReadCompleteFiles(_ReadAvroBatches):
    """``(path, FileMetadata)`` of every tick's match -> the file's report batches, once, when complete;
    a file that changes after it was read -> one counted ``changed_after_read`` loss (never read twice).

    Complete means (the watched-directory contract, docs/pipelines.md): a ``PATH.done`` marker exists,
    or the file's size and modification time are the same as at the previous tick (or the file has not
    been modified for one watch interval when first seen); with ``require_done`` only the marker counts,
    so a writer that pauses mid-file is never read at the pause. A file read because of its marker is
    described by a fresh look-up of its size and time (the writer may have finished it after the tick's
    match), so the tick after the read does not see a change. Per-path keyed state holds the last (size,
    mtime) seen, whether the file was read, and the time of the tick that saw it: a match from an older
    tick arriving after a newer one (parallel ticks, e.g. the Flink ticks' source at parallelism > 1, race
    through the shuffle) is stale and ignored, so an out-of-date size never passes for a change.
    """

    FILE = ReadModifyWriteStateSpec("file", _FILE_STATE)

    def __init__(
        self, batch_size: int, aggregator: Aggregator | None, interval_s: float, require_done: bool = False
    ) -> None:
        super().__init__(batch_size, aggregator)
        self.interval_s = interval_s
        self.require_done = require_done

    def process(
        self,
        element,
        file=beam.DoFn.StateParam(FILE),  # noqa: B008 - Beam's state idiom
        ts=beam.DoFn.TimestampParam,
    ):
        path, metadata = element
        size = int(metadata.size_in_bytes)
        mtime = float(getattr(metadata, "last_updated_in_seconds", 0.0) or 0.0)
        seen = ts.micros / 1e6 if isinstance(ts, Timestamp) else float("-inf")
        prev = file.read()
        if prev is not None and seen < prev[3]:  # an older tick's view, overtaken by a newer one's
            return
        if prev is not None and prev[2]:  # read already
            if (prev[0], prev[1]) != (size, mtime):
                file.write((size, mtime, True, seen))
                detail = f"file changed after it was read ({prev[0]} -> {size} bytes); it is not read again"
                loss = Loss("changed_after_read", detail, prev[0], max(size - prev[0], 0))
                yield from self.loss_outputs(path, loss)
            return
        if self.require_done:
            complete = done = FileSystems.exists(path + DONE_SUFFIX)
        else:
            stable = prev is not None and (prev[0], prev[1]) == (size, mtime)
            old = mtime > 0 and time.time() - mtime >= self.interval_s
            done = not (stable or old) and FileSystems.exists(path + DONE_SUFFIX)
            complete = stable or old or done
        if not complete:
            file.write((size, mtime, False, seen))
            return
        if done:  # finished by its writer, maybe after this tick's match: its size and time now
            metadata = _current_metadata(path, metadata)
            size = int(metadata.size_in_bytes)
            mtime = float(getattr(metadata, "last_updated_in_seconds", 0.0) or 0.0)
        file.write((size, mtime, True, seen))
        yield from super().process(fileio.ReadableFile(metadata))


def _current_metadata(path: str, metadata: FileMetadata) -> FileMetadata:
    """``path``'s metadata looked up now (``metadata`` when the file system cannot say)."""
    matched = FileSystems.match([path])[0].metadata_list
    return next((m for m in matched if m.path == path), metadata)


class Ticks(beam.PTransform):
    """Ticks every ``interval_s`` seconds of processing time from the moment the job starts running, for
    ``duration_s`` seconds (None: forever); each tick is its own time as a timestamped element.

    ``PeriodicImpulse`` with its start rebased to the job's start (so runner start-up does not eat into
    the duration), generated by :class:`transforms.runners.LaggedTicks`: ticks and watermark
    ``watermark_lag_s`` behind the ticks' times; ``paced`` sleeps until each tick is due (the FnApiRunner).
    """

    def __init__(
        self,
        interval_s: float,
        duration_s: float | None = None,
        paced: bool = False,
        watermark_lag_s: float = 0.0,
        *,
        task_id: str | None = None,
    ) -> None:
        super().__init__()
        self.interval_s = float(interval_s)
        self.duration_s = duration_s
        self.paced = paced
        self.watermark_lag_s = float(watermark_lag_s)
        self.task_id = task_id

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            "interval_s": item(self.interval_s, "Tick interval (s)"),
            "duration_s": item(self.duration_s, "Duration (s)"),
            "paced": item(bool(self.paced), "Paced"),
            "watermark_lag_s": item(self.watermark_lag_s, "Watermark lag (s)"),
        }

    def expand(self, pbegin):
        interval, duration = self.interval_s, self.duration_s

        def bounds(_):
            now = Timestamp.now()
            stop = MAX_TIMESTAMP if duration is None else now + Duration.of(duration)
            return (now, stop, interval)

        gen = LaggedTicks(self.watermark_lag_s, paced=self.paced)
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
    :class:`ReadReportFiles`; a batch carries the time of the tick that found its file minus
    ``watermark_lag_s`` (the source's watermark follows the ticks, i.e. the wall clock, that far behind:
    default :func:`transforms.runners.default_watermark_lag`, two intervals plus 1 s, so the files written
    before a window's end are read before it closes), and the validator re-timestamps reports by their
    event time.

    ``paced``: sleep until each tick is due (:class:`transforms.runners.LaggedTicks`; the FnApiRunner).
    ``ticks_expansion_service``: take the ticks from the checkpointed Java source of
    :class:`transforms.flink_ticks.FlinkTicks` (Flink only; ``duration_s`` is then the driver's to enforce
    by draining the job, :func:`transforms.flink_ticks.run_draining`).
    ``duration_s`` None watches forever; otherwise the ticks stop after ``duration_s`` seconds, the
    watermark then moves to the end of time, every window closes and the job finishes by itself.

    A file is read once, when it is complete: a ``PATH.done`` marker exists, or its size and
    modification time did not change between two ticks (or for one interval before it was first seen);
    with ``require_done_marker`` only the marker counts (a writer that pauses mid-file is never read at
    the pause; a file without a marker is never read). A file that changes after it was read is counted
    and dead-lettered (``changed_after_read``), not read again. Writing elsewhere and renaming into the
    directory remains the safest way to publish.

    Which files were read is Beam state, lost with a killed job: a job started again reads every file of
    the directory again. With ``--store`` that re-read is idempotent (the new run's panes replace the
    killed run's windows whole; docs/store.md, "Restarts").

    Built from ``PeriodicImpulse`` rather than ``fileio.MatchContinuously``: in apache-beam 2.77 the
    latter is a splittable ``Watch`` DoFn that the Python DirectRunner does not run (the FnApiRunner
    ends the job at once; the streaming BundleBasedDirectRunner rejects it).
    """

    def __init__(
        self,
        file_pattern: str,
        interval_s: float = 10.0,
        batch_size: int = 1 << 15,
        aggregator: Aggregator | None = None,
        duration_s: float | None = None,
        paced: bool = False,
        watermark_lag_s: float | None = None,
        ticks_expansion_service: str | None = None,
        require_done_marker: bool = False,
    ) -> None:
        super().__init__()
        if not interval_s > 0:
            raise ValueError(f"watch interval must be positive, got {interval_s}")
        lag = default_watermark_lag(interval_s) if watermark_lag_s is None else float(watermark_lag_s)
        if not lag >= 0:
            raise ValueError(f"watermark lag must be >= 0 seconds, got {watermark_lag_s}")
        if duration_s is not None and not duration_s > 0:
            raise ValueError(f"watch duration must be positive, got {duration_s}")
        self.file_pattern = file_pattern
        self.interval_s = float(interval_s)
        self.batch_size = batch_size
        self.aggregator = aggregator
        self.duration_s = duration_s
        self.paced = paced
        self.watermark_lag_s = lag
        self.ticks_expansion_service = ticks_expansion_service
        self.require_done_marker = bool(require_done_marker)

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            "file_pattern": item(self.file_pattern, "Watched report files"),
            "interval_s": item(self.interval_s, "Watch interval (s)"),
            "duration_s": item(self.duration_s, "Duration (s)"),
            "batch_size": item(self.batch_size, "Records per batch"),
            "require_done_marker": item(self.require_done_marker, "Only files with a .done marker"),
            "ticks_expansion_service": item(self.ticks_expansion_service, "Flink ticks' expansion service"),
        }

    def expand(self, pbegin):
        pattern = self.file_pattern
        task_id = None if self.aggregator is None else self.aggregator.task.task_id
        if self.ticks_expansion_service:  # Flink: checkpointed Java ticks; the job is drained at the end
            ticks = FlinkTicks(
                self.interval_s, self.watermark_lag_s, self.ticks_expansion_service, task_id=task_id
            )
        else:
            ticks = Ticks(self.interval_s, self.duration_s, self.paced, self.watermark_lag_s, task_id=task_id)
        read = _ReadCompleteFiles(self.batch_size, self.aggregator, self.interval_s, self.require_done_marker)
        return (
            pbegin
            | "Ticks" >> ticks  # tick (a timestamp or a counter), timestamped watermark_lag behind the clock
            | "Pattern" >> beam.Map(lambda _tick: pattern)
            | "DanglingLinks" >> beam.ParDo(_WarnDanglingLinks())
            | "Match" >> fileio.MatchAll(fileio.EmptyMatchTreatment.ALLOW)
            | "KeyByPath" >> beam.Map(lambda m: (m.path, m)).with_output_types(tuple[str, FileMetadata])
            | "ReadBlocks" >> beam.ParDo(read).with_outputs("dead_letter", "counts", main="records")
        )


class _DecodeMessage(_ReportSourceFn):
    """Pub/Sub message (an Avro container of reports) -> (source, batch); every part that is not records,
    an oversized message or a bad timestamp attribute -> counted loss and dead letter (the message is
    consumed and acked like any other: nothing stalls the pull).

    ``timestamp_attribute``: the attribute holding the message time (integer milliseconds or RFC 3339);
    a message without it, or with a value that does not parse, is dead-lettered
    (``invalid_timestamp_attribute``)."""

    def __init__(
        self, source: str, aggregator: Aggregator | None = None, timestamp_attribute: str | None = None
    ) -> None:
        super().__init__(aggregator)
        self.source = source
        self.timestamp_attribute = timestamp_attribute

    def display_data(self) -> dict[str, Any]:
        return {
            **super().display_data(),
            "source": item(self.source, "Messages from"),
            "timestamp_attribute": item(self.timestamp_attribute, "Timestamp attribute"),
        }

    def process(self, message: bytes | beam.io.PubsubMessage):
        if self._params is None:
            self.setup()
        data = getattr(message, "data", message)
        data = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else b""
        identity = _identity(len(data), hashlib.sha256(data).hexdigest())
        if len(data) > MAX_MESSAGE_BYTES:
            loss = Loss("oversized_message", f"message over {MAX_MESSAGE_BYTES} bytes", 0, len(data))
            yield from self.loss_outputs(self.source, loss, identity)
            return
        ts = None
        if self.timestamp_attribute:
            attrs = getattr(message, "attributes", None) or {}
            ts, why = parse_timestamp_attribute(attrs.get(self.timestamp_attribute))
            if ts is None:
                detail = f"attribute {self.timestamp_attribute!r} {why}"
                loss = Loss("invalid_timestamp_attribute", detail, 0, len(data))
                yield from self.loss_outputs(self.source, loss, identity)
                return
        losses: list[Loss] = []
        batches = list(iter_report_batches(io.BytesIO(data), 1 << 30, losses=losses, **self._params))
        progress().add_input(sum(len(b) for b in batches), messages=1)
        for batch in batches:
            if len(batch):
                rb = RecordBatch(self.source, batch)
                yield rb if ts is None else beam.window.TimestampedValue(rb, ts)
        for loss in losses:
            yield from self.loss_outputs(self.source, loss, identity if loss.reason == "undecodable" else "")


def parse_timestamp_attribute(value: object) -> tuple[Timestamp | None, str]:
    """A message-time attribute (integer milliseconds since the epoch, or RFC 3339) -> (timestamp, "") or
    (None, why)."""
    if value is None:
        return None, "is missing"
    text = str(value).strip()
    try:
        if text.lstrip("-").isdigit():
            ms = int(text)
            if not 0 <= ms < 7258118400000:  # [1970, 2200)
                return None, f"is outside [1970, 2200): {text[:64]!r}"
            return Timestamp(micros=ms * 1000), ""
        return Timestamp.from_rfc3339(text), ""
    except (ValueError, OverflowError, TypeError) as exc:
        return None, f"does not parse as milliseconds or RFC 3339 ({text[:64]!r}: {str(exc)[:100]})"


class DecodeReportMessages(beam.PTransform):
    """Message bodies (bytes or ``PubsubMessage``) -> record batches (main) and dead letters."""

    def __init__(
        self, source: str, aggregator: Aggregator | None = None, timestamp_attribute: str | None = None
    ) -> None:
        super().__init__()
        self.source = source
        self.aggregator = aggregator
        self.timestamp_attribute = timestamp_attribute

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            "source": item(self.source, "Messages from"),
            "timestamp_attribute": item(self.timestamp_attribute, "Timestamp attribute"),
        }

    def expand(self, messages: PCollection):
        fn = _DecodeMessage(self.source, self.aggregator, self.timestamp_attribute)
        return messages | "Decode" >> beam.ParDo(fn).with_outputs(
            "dead_letter", "counts", main="records"
        )


#: Vectors (array-of-double / array-of-boolean fields) at least this long travel from the rows to the
#: sinks as numpy arrays: Beam pickles them whole and the Avro sink writes their bytes in one piece.
PACK_MIN_VALUES = 1024


def _zigzag(n: int) -> bytes:
    """Avro's ``long``: zig-zag, then a base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _vector_field(ftype: object) -> tuple[str, int | None, int | None] | None:
    """``(items, index of the array branch, index of the null branch)`` of a field whose type is an array
    of doubles or booleans, plain (no branches) or in a two-branch union with null; None for any other."""
    branches = ftype if isinstance(ftype, list) else [ftype]
    arrays = [i for i, b in enumerate(branches) if isinstance(b, dict) and b.get("type") == "array"]
    nulls = [i for i, b in enumerate(branches) if b == "null"]
    if len(arrays) != 1 or len(branches) - len(arrays) - len(nulls) != 0 or len(nulls) > 1:
        return None
    items = branches[arrays[0]]["items"]  # type: ignore[index]
    if items not in ("double", "boolean"):
        return None
    if not isinstance(ftype, list):
        return str(items), None, None
    return str(items), arrays[0], nulls[0] if nulls else None


class VectorRecordEncoder:
    """The Avro binary encoding of records of one record schema whose vector fields (arrays of doubles or
    booleans, nullable or not: :func:`_vector_field`) may hold numpy arrays.

    Such an array is written as what ``fastavro`` writes for the same values (one block: the count, the
    little-endian doubles or one byte per boolean, the end marker), built in one numpy call instead of
    one call per value; every other field is written by ``fastavro`` with its own type."""

    def __init__(self, parsed_schema: dict[str, Any]) -> None:
        self.fields: list[tuple[str, tuple[str, int | None, int | None] | None, Any]] = []
        for f in parsed_schema["fields"]:
            vec = _vector_field(f["type"])
            self.fields.append((f["name"], vec, None if vec else fastavro.parse_schema(f["type"])))

    @staticmethod
    def handles(parsed_schema: dict[str, Any]) -> bool:
        """Whether every field of ``parsed_schema`` is a vector or a type ``fastavro`` parses alone (no
        reference to a named type of the record)."""
        try:
            VectorRecordEncoder(parsed_schema)
        except Exception:  # noqa: BLE001 - any field fastavro cannot parse on its own
            return False
        return True

    def encode(self, record: Record) -> bytes:
        buf = io.BytesIO()
        for name, vec, schema in self.fields:
            value = record.get(name)
            if vec is None:
                fastavro.schemaless_writer(buf, schema, value)
                continue
            items, branch, null = vec
            if value is None:
                if null is None:
                    raise ValueError(f"field {name!r} is not nullable")
                buf.write(_zigzag(null))
                continue
            if branch is not None:
                buf.write(_zigzag(branch))
            arr = np.asarray(value, dtype=np.float64 if items == "double" else np.bool_)
            if arr.ndim != 1:
                raise ValueError(f"field {name!r} is not a vector (shape {arr.shape})")
            if arr.size:
                buf.write(_zigzag(int(arr.size)))
                buf.write(arr.astype("<f8" if items == "double" else np.uint8, copy=False).tobytes())
            buf.write(b"\x00")
        return buf.getvalue()


class _EncodedBlock:
    """One record already encoded, in the shape ``fastavro``'s ``Writer.write_block`` takes."""

    def __init__(self, data: bytes) -> None:
        self.num_records = 1
        self.bytes_ = io.BytesIO(data)


class AvroRecordSink(fileio.FileSink):
    """``fileio`` sink writing dicts as an Avro object container with one of the package schemas.

    A record holding numpy vectors (:func:`pack_record`) is encoded by :class:`VectorRecordEncoder` and
    written as a block of its own; any other goes through ``fastavro``'s writer. The file is an ordinary
    container either way (null codec)."""

    def __init__(self, schema_name: str) -> None:
        self.schema_name = schema_name
        self._writer = None
        self._encoder: VectorRecordEncoder | None = None

    def open(self, fh) -> None:
        parsed = schemas.parsed_schema(self.schema_name)
        self._writer = fastavro.write.Writer(fh, parsed)
        self._encoder = VectorRecordEncoder(parsed) if VectorRecordEncoder.handles(parsed) else None

    def write(self, record: Record) -> None:
        if any(isinstance(v, np.ndarray) for v in record.values()):
            if self._encoder is not None:
                self._writer.write_block(_EncodedBlock(self._encoder.encode(record)))
                return
            record = unpack_record(record)
        self._writer.write(record)

    def flush(self) -> None:
        self._writer.flush()


class _JsonLinesSink(fileio.TextSink):
    """``fileio`` sink writing records as strict JSON lines (``to_json`` first)."""

    def __init__(self, to_json: Callable[[Record], Record]) -> None:
        super().__init__()
        self.to_json = to_json

    def write(self, record: Record) -> None:
        super().write(json.dumps(self.to_json(record), allow_nan=False))


def _pane_destination(rec: Record) -> str:
    return f"pane{int(rec['pane_index']):05d}"


def vector_fields(schema_name: str) -> dict[str, str]:
    """``{field: "double" | "boolean"}`` of the vector fields of a package schema (:func:`_vector_field`)."""
    out = {}
    for f in schemas.parsed_schema(schema_name)["fields"]:
        vec = _vector_field(f["type"])
        if vec is not None:
            out[f["name"]] = vec[0]
    return out


def pack_record(rec: Record, vectors: dict[str, str]) -> Record:
    """``rec`` with each of its ``vectors`` (:func:`vector_fields`) of at least :data:`PACK_MIN_VALUES`
    entries as a float64 / bool numpy array (a vector with an entry of another type stays a list)."""
    out = dict(rec)
    for name, items in vectors.items():
        v = rec.get(name)
        if isinstance(v, list) and len(v) >= PACK_MIN_VALUES:
            want = np.float64 if items == "double" else np.bool_
            arr = np.asarray(v)
            if arr.dtype == want or (items == "double" and arr.dtype.kind in "iu"):
                out[name] = arr.astype(want, copy=False)
    return out


def unpack_record(rec: Record) -> Record:
    """``rec`` with its numpy arrays as lists (the record :func:`pack_record` was given)."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in rec.items()}


def _as_record(row: ResultRow) -> Record:
    rec = row._asdict()
    progress().add_row(
        rec.get("window_start"), rec.get("window_end"), rec.get("pane_index", 0), rec.get("pane_timing", "")
    )
    return rec


def result_sinks(
    spec: OutputSpec, jsonl_max_values: int = DEFAULT_JSONL_MAX_VALUES
) -> tuple[Callable[[ResultRow], Record], dict[str, fileio.FileSink]]:
    """What :class:`WriteResults` writes one kind of row with: ``(to_record, {".jsonl": sink, ".avro":
    sink})``. ``to_record`` makes a row's record (vectors packed, :func:`pack_record`); the JSON Lines sink
    writes ``spec.top_json(record, jsonl_max_values)`` for a spec that has it, else the whole record.

    Raises:
        ValueError: ``jsonl_max_values`` < 0.
    """
    if not isinstance(jsonl_max_values, int) or jsonl_max_values < 0:
        raise ValueError(
            f"jsonl_max_values must be an integer >= 0 (0: every value), got {jsonl_max_values!r}"
        )
    vectors = vector_fields(spec.schema)
    top_json, whole = spec.top_json, spec.to_json or json_record

    def to_record(row: ResultRow) -> Record:
        return pack_record(_as_record(row), vectors)

    def to_json(rec: Record) -> Record:
        if top_json is not None:
            return top_json(rec, jsonl_max_values)
        return whole(unpack_record(rec))

    return to_record, {".jsonl": _JsonLinesSink(to_json), ".avro": AvroRecordSink(spec.schema)}


class WriteResults(beam.PTransform):
    """Result rows of one :class:`~ldp.aggregate.OutputSpec` -> JSON Lines and Avro files per window and
    pane under ``OUT/<spec.subdir>/`` (see the module docstring)."""

    def __init__(
        self,
        output_dir: str,
        spec: OutputSpec,
        *,
        task_id: str | None = None,
        jsonl_max_values: int = DEFAULT_JSONL_MAX_VALUES,
    ) -> None:
        super().__init__()
        self.path = os.path.join(output_dir, spec.subdir) if spec.subdir else output_dir
        self.spec = spec
        self.task_id = task_id
        self.jsonl_max_values = jsonl_max_values
        result_sinks(spec, jsonl_max_values)  # a bad value fails here, before the pipeline runs

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            "output": item(self.spec.name, "Result output"),
            "path": item(self.path, "Directory"),
            "prefix": item(self.spec.prefix, "File prefix"),
            "schema": item(self.spec.schema, "Avro schema"),
            "jsonl_max_values": item(self.jsonl_max_values, "Values per JSON Lines row (0: all)"),
        }

    def expand(self, rows: PCollection) -> dict[str, PCollection]:
        spec, max_values = self.spec, self.jsonl_max_values
        to_record, _ = result_sinks(spec, max_values)
        records = rows | "ToRecord" >> beam.Map(to_record)
        jsonl = records | "WriteJson" >> fileio.WriteToFiles(
            path=self.path,
            file_naming=pane_file_naming(spec.prefix, ".jsonl"),
            destination=_pane_destination,
            sink=lambda _dest: result_sinks(spec, max_values)[1][".jsonl"],
            shards=1,
        )
        avro = records | "WriteAvro" >> fileio.WriteToFiles(
            path=self.path,
            file_naming=pane_file_naming(spec.prefix, ".avro"),
            destination=_pane_destination,
            sink=lambda _dest: result_sinks(spec, max_values)[1][".avro"],
            shards=1,
        )
        return {"jsonl": jsonl, "avro": avro}


class WriteCounts(beam.PTransform):
    """Windowed count dicts -> ``OUT/counts/counts-*.jsonl`` (one line per window)."""

    def __init__(self, output_dir: str, *, task_id: str | None = None) -> None:
        super().__init__()
        self.output_dir = os.path.join(output_dir, "counts")
        self.task_id = task_id

    def display_data(self) -> dict[str, Any]:
        return {**task_id_display(self.task_id), "path": item(self.output_dir, "Directory")}

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

    In streaming, dead letters are grouped into fixed windows of ``window_s`` so files close. The windows
    follow arrival, not the elements' timestamps: each dead letter is first re-timestamped to the later of
    its timestamp and the wall clock (:class:`~transforms.counts.AtProcessingTime`, as the count windows
    do), so one whose timestamp is behind the watermark (e.g. a late Pub/Sub message refused by
    validation, which keeps the message's old time) lands in an open window instead of being dropped with
    its closed one: every dead letter is written. Batch jobs write them as they come (no re-windowing).
    """

    def __init__(
        self, output_dir: str, streaming: bool = False, window_s: float = 60.0, *, task_id: str | None = None
    ) -> None:
        super().__init__()
        self.output_dir = os.path.join(output_dir, "dead_letter")
        self.streaming = streaming
        self.window_s = window_s
        self.task_id = task_id

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            "path": item(self.output_dir, "Directory"),
            "streaming": item(bool(self.streaming), "Streaming"),
            "window_s": item(float(self.window_s) if self.streaming else None, "File window (s)"),
        }

    def expand(self, dead):
        if self.streaming:
            dead = (
                dead
                | "AtProcessingTime" >> beam.ParDo(AtProcessingTime())
                | "Window"
                >> beam.WindowInto(  # lateness: see transforms.counts.FILE_WRITE_SLACK_S
                    beam.window.FixedWindows(self.window_s), allowed_lateness=FILE_WRITE_SLACK_S
                )
            )
        return dead | "WriteAvro" >> fileio.WriteToFiles(
            path=self.output_dir,
            file_naming=fileio.default_file_naming("dead_letter", ".avro"),
            sink=lambda _dest: AvroRecordSink("dead_letter"),
            shards=1,
        )
