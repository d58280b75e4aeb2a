"""The shuffler's Beam steps: validated reports -> anonymous, permuted batches per time bucket.

Steps (:class:`Shuffle`), on the validate step's output of :class:`transforms.aggregate.ValidateFn`
(``(task_id, GroupReports)`` per group and event-time granule; the granule is the time precision, so
every element lies in one bucket):

``Bucket``   :class:`KeyByBucket`: ``(bucket_start_ms, GroupReports(group, reports))``. Only the group and
             the payload fields of the task's mechanism survive (no client id, event time, source); the
             bucket is the event time rounded down to ``anonymity.time_precision_s``.
``Group``    batch: ``GroupByKey`` on the bucket start. Streaming: :class:`HoldBucketsFn`, a stateful DoFn
             keyed by bucket in the global window, holds a bucket's reports until the watermark passes
             its end plus the allowed lateness (an event-time timer), emits them once, and withholds
             and counts whatever of that bucket arrives later (``late_dropped``). Either way: one
             element per bucket, and no report is dropped by the runner uncounted.
``Emit``     :class:`EmitBatchFn`: a bucket with at least ``min_reports`` reports is permuted
             (:func:`ldp.anonymity.secure_permutation`, or the test-only seeded permutation) and written
             as one Avro report file ``OUT/batches/batch-<task>-<start>-<end>-pane00000.avro`` whose
             records carry the bucket start as ``event_time`` and whose file metadata says how many
             reports were shuffled together (:data:`META_N`) and over which bucket; a shorter bucket is
             withheld: counted (``shuffle_withheld``, ``shuffle_withheld_buckets``) and recorded as one
             ``short_bucket`` dead letter (its size and bucket only).

Dead letters of the shuffler hold no report content: :func:`scrub_dead_letter` drops the record fields,
the task id and event times, and keeps the reason, the source, a fixed description and a size.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import fastavro
import numpy as np
from apache_beam.coders import BooleanCoder, PickleCoder
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms import window as bw
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

import schemas
from ldp.anonymity import AnonymitySettings, secure_permutation, seeded_permutation
from transforms.aggregate import GroupReports
from transforms.counts import COUNTER_NAMESPACE
from transforms.display import item, task_id_display
from transforms.records import make_dead_letter, reports_to_records

__all__ = [
    "META_PREFIX",
    "META_N",
    "BATCH_SUBDIR",
    "SHORT_BUCKET_REASON",
    "KeyByBucket",
    "HoldBucketsFn",
    "EmitBatchFn",
    "Shuffle",
    "ScrubDeadLetters",
    "scrub_dead_letter",
    "batch_metadata",
    "batch_manifest",
    "compact_utc",
]

#: Prefix of the shuffler's keys in the Avro file metadata of a batch.
META_PREFIX = "ldp.shuffle."
#: Metadata key: the number of reports shuffled together in the file.
META_N = META_PREFIX + "n"
#: Sub-directory of the output holding the batches.
BATCH_SUBDIR = "batches"
#: Dead-letter reason of a bucket withheld because it closed with fewer than ``min_reports`` reports.
SHORT_BUCKET_REASON = "short_bucket"


def compact_utc(ms: int) -> str:
    """Milliseconds since the epoch -> ``YYYYMMDDTHHMMSSZ`` (file names)."""
    t = _dt.datetime.fromtimestamp(int(ms) / 1000, tz=_dt.timezone.utc)
    return t.strftime("%Y%m%dT%H%M%SZ")


def _iso(ms: int) -> str:
    t = _dt.datetime.fromtimestamp(int(ms) / 1000, tz=_dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_SHA256 = re.compile(r", sha256 [0-9a-f]{64}")


def scrub_dead_letter(dead: dict[str, object]) -> dict[str, object]:
    """A dead letter without report content: ``raw_record``, ``raw_bytes`` and ``task_id`` are null; the
    reason, the source (file and offset, or subscription) and the time stay; the detail keeps the
    reason's fixed description (late batches: only their size; undecodable inputs: no hash) plus the size
    of the dropped record's fields."""
    out = dict(dead)
    raw = out.get("raw_record")
    detail = out.get("detail")
    if out.get("reason") == "late":  # the late step's detail names the batch's fine event time
        n = str(detail).split(" ", 1)[0] if detail else "?"
        detail = f"{n} accepted report(s) arrived after their bucket closed; withheld"
    if isinstance(detail, str):  # an undecodable input's hash would fingerprint its content
        detail = _SHA256.sub("", detail)
    if isinstance(raw, str):
        detail = f"{detail or out.get('reason')}; record of {len(raw)} characters as JSON, not kept"
    out.update(raw_record=None, raw_bytes=None, task_id=None, detail=detail)
    return out


def _settings_display(settings: AnonymitySettings) -> dict[str, Any]:
    return {
        "time_precision_s": item(int(settings.time_precision_s), "Bucket (s)"),
        "min_reports": item(int(settings.min_reports), "Reports per bucket at least"),
        "delta": item(float(settings.delta), "Central delta"),
    }


class ScrubDeadLetters(beam.PTransform):
    """Dead-letter dicts -> the same without report content (:func:`scrub_dead_letter`)."""

    def __init__(self, *, task_id: str | None = None) -> None:
        super().__init__()
        self.task_id = task_id

    def display_data(self) -> dict[str, Any]:
        return task_id_display(self.task_id)

    def expand(self, dead):
        return dead | "Scrub" >> beam.Map(scrub_dead_letter)


class KeyByBucket(beam.DoFn):
    """``(task_id, GroupReports)`` timestamped by event time -> ``(bucket_start_ms, GroupReports(group,
    reports))``: every other field (event times, client ids, source) is dropped."""

    def __init__(self, settings: AnonymitySettings) -> None:
        self.precision_ms = settings.precision_ms

    def display_data(self) -> dict[str, Any]:
        return {"precision_ms": item(self.precision_ms, "Bucket (ms)")}

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam) -> Iterator[Any]:  # noqa: B008
        _task_id, gr = element
        ts_ms = int(timestamp.micros // 1000)  # the latest event time of the batch (one bucket)
        yield (ts_ms - ts_ms % self.precision_ms, GroupReports(int(gr.group), gr.reports))


class EmitBatchFn(beam.DoFn):
    """``(bucket_start_ms, [GroupReports, ...])`` -> one permuted Avro batch file (main output: its
    manifest entry) or a withheld bucket (``counts`` and ``dead_letter``); see the module docstring.

    ``test_seed``: permute with :func:`ldp.anonymity.seeded_permutation` keyed by the seed, the bucket and
    the pane (reproducible; tests only), instead of the OS CSPRNG.
    """

    def __init__(
        self,
        task_id: str,
        schema_version: int,
        settings: AnonymitySettings,
        output_dir: str,
        test_seed: int | None = None,
    ) -> None:
        self.task_id = task_id
        self.schema_version = schema_version
        self.settings = settings
        self.dir = FileSystems.join(output_dir, BATCH_SUBDIR)
        self.test_seed = test_seed
        self.forwarded = Metrics.counter(COUNTER_NAMESPACE, "shuffle_forwarded")
        self.batches = Metrics.counter(COUNTER_NAMESPACE, "shuffle_batches")
        self.withheld = Metrics.counter(COUNTER_NAMESPACE, "shuffle_withheld")
        self.withheld_buckets = Metrics.counter(COUNTER_NAMESPACE, "shuffle_withheld_buckets")

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            **_settings_display(self.settings),
            "path": item(self.dir, "Batch directory"),
            "test_seed": item(self.test_seed, "Test seed (not private)"),
        }

    def _permutation(self, n: int, start_ms: int, pane: int) -> np.ndarray:
        if self.test_seed is None:
            return secure_permutation(n)
        return seeded_permutation(n, [int(self.test_seed), int(start_ms), int(pane)])  # type: ignore[arg-type]

    def records(self, start_ms: int, parts: Sequence[GroupReports]) -> list[dict[str, object]]:
        """The bucket's reports as report records with the bucket start as event time (not permuted)."""
        out: list[dict[str, object]] = []
        for part in parts:
            n = len(part.reports)
            if n:
                out += reports_to_records(
                    self.task_id, part.reports, np.full(n, start_ms, dtype=np.int64), int(part.group),
                    schema_version=self.schema_version,
                )  # fmt: skip
        return out

    def process(
        self,
        element: tuple[int, Iterable[GroupReports]],
        pane=beam.DoFn.PaneInfoParam,  # noqa: B008 - Beam's param idiom
    ) -> Iterator[Any]:
        start, parts = element
        parts = list(parts)
        start = int(start)
        end = start + self.settings.precision_ms
        index = int(getattr(pane, "index", 0) or 0)
        n = sum(len(p.reports) for p in parts)
        if n < self.settings.min_reports:
            self.withheld.inc(n)
            self.withheld_buckets.inc()
            yield TaggedOutput("counts", {"shuffle_withheld": n, "shuffle_withheld_buckets": 1})
            detail = (
                f"bucket [{_iso(start)}, {_iso(end)}) pane {index} closed with {n} report(s), fewer than "
                f"anonymity.min_reports = {self.settings.min_reports}: withheld"
            )
            dead = make_dead_letter(SHORT_BUCKET_REASON, "shuffler", detail=detail)
            yield TaggedOutput("dead_letter", dead)
            return
        records = self.records(start, parts)
        perm = self._permutation(n, start, index)
        shuffled = [records[i] for i in perm.tolist()]
        name = f"batch-{self.task_id}-{compact_utc(start)}-{compact_utc(end)}-pane{index:05d}.avro"
        meta = {
            META_N: str(n),
            META_PREFIX + "task_id": self.task_id,
            META_PREFIX + "bucket_start_ms": str(start),
            META_PREFIX + "bucket_end_ms": str(end),
            META_PREFIX + "time_precision_s": str(self.settings.time_precision_s),
            META_PREFIX + "min_reports": str(self.settings.min_reports),
            META_PREFIX + "pane": str(index),
        }
        path = FileSystems.join(self.dir, name)
        tmp = FileSystems.join(self.dir, f".tmp-{uuid.uuid4().hex}-{name}.part")
        with FileSystems.create(tmp) as fh:  # a failed write raises: the bundle fails and is retried
            fastavro.writer(fh, schemas.report_schema(), shuffled, metadata=meta, sync_interval=1 << 20)
        if FileSystems.exists(path):  # a retried bundle: its earlier copy is replaced
            FileSystems.delete([path])
        FileSystems.rename([tmp], [path])
        self.forwarded.inc(n)
        self.batches.inc()
        yield TaggedOutput("counts", {"shuffle_forwarded": n, "shuffle_batches": 1})
        yield manifest_entry(name, meta)


def manifest_entry(name: str, meta: dict[str, str]) -> dict[str, object]:
    """One line of ``OUT/batches.jsonl`` from a batch file's name and metadata."""
    start = int(meta[META_PREFIX + "bucket_start_ms"])
    end = int(meta[META_PREFIX + "bucket_end_ms"])
    return {
        "file": f"{BATCH_SUBDIR}/{name}",
        "task_id": meta[META_PREFIX + "task_id"],
        "bucket_start": _iso(start),
        "bucket_end": _iso(end),
        "bucket_start_ms": start,
        "bucket_end_ms": end,
        "pane": int(meta.get(META_PREFIX + "pane", "0")),
        "time_precision_s": int(meta[META_PREFIX + "time_precision_s"]),
        "n": int(meta[META_N]),
    }


class HoldBucketsFn(beam.DoFn):
    """Streaming: ``(bucket_start_ms, GroupReports)`` keyed by bucket, in the global window ->
    ``(bucket_start_ms, [GroupReports, ...])`` once per bucket, when the watermark passes the bucket's
    end plus ``allowed_lateness_s`` (an event-time timer); a batch of a bucket that was already emitted is
    withheld and counted (``late_dropped``, one ``late`` dead letter with its size). Nothing is ever late
    for the runner (the global window), so no report is dropped uncounted; a bucket first seen after its close
    time is emitted at the next watermark advance. State per bucket: its reports until it closes, then
    one boolean."""

    REPORTS = BagStateSpec("reports", PickleCoder())
    CLOSED = ReadModifyWriteStateSpec("closed", BooleanCoder())
    CLOSE = TimerSpec("close", TimeDomain.WATERMARK)

    def __init__(self, settings: AnonymitySettings, allowed_lateness_s: float) -> None:
        self.precision_ms = settings.precision_ms
        self.lateness_ms = int(round(allowed_lateness_s * 1000))
        self.late = Metrics.counter(COUNTER_NAMESPACE, "late_dropped")

    def display_data(self) -> dict[str, Any]:
        return {
            "precision_ms": item(self.precision_ms, "Bucket (ms)"),
            "allowed_lateness_ms": item(self.lateness_ms, "Allowed lateness (ms)"),
        }

    def process(
        self,
        element: tuple[int, GroupReports],
        reports=beam.DoFn.StateParam(REPORTS),  # noqa: B008 - Beam's state idiom
        closed=beam.DoFn.StateParam(CLOSED),  # noqa: B008
        timer=beam.DoFn.TimerParam(CLOSE),  # noqa: B008
    ) -> Iterator[Any]:
        start, gr = element
        if closed.read():
            n = len(gr.reports)
            self.late.inc(n)
            yield TaggedOutput("counts", {"late_dropped": n})
            detail = f"{n} accepted report(s) arrived after their bucket closed; withheld"
            yield TaggedOutput("dead_letter", make_dead_letter("late", "shuffler", detail=detail))
            return
        reports.add(gr)
        timer.set(Timestamp(micros=(int(start) + self.precision_ms + self.lateness_ms) * 1000))

    @on_timer(CLOSE)
    def close(
        self,
        key=beam.DoFn.KeyParam,  # noqa: B008
        reports=beam.DoFn.StateParam(REPORTS),  # noqa: B008
        closed=beam.DoFn.StateParam(CLOSED),  # noqa: B008
    ) -> Iterator[Any]:
        parts = list(reports.read())
        reports.clear()
        closed.write(True)
        if parts:
            yield (int(key), parts)


class Shuffle(beam.PTransform):
    """The validate step's ``(task_id, GroupReports)`` -> manifest entries (``batches``), ``counts`` and
    ``dead_letter`` (withheld buckets, late batches); see the module docstring. Batch: a ``GroupByKey``
    per bucket; ``streaming``: :class:`HoldBucketsFn` (one batch per bucket, at its end plus
    ``allowed_lateness_s``)."""

    def __init__(
        self,
        task_id: str,
        schema_version: int,
        settings: AnonymitySettings,
        output_dir: str,
        *,
        streaming: bool,
        allowed_lateness_s: float = 0.0,
        test_seed: int | None = None,
    ) -> None:
        super().__init__()
        self.task_id = task_id
        self.schema_version = schema_version
        self.settings = settings
        self.output_dir = output_dir
        self.streaming = streaming
        self.allowed_lateness_s = float(allowed_lateness_s)
        self.test_seed = test_seed

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            **_settings_display(self.settings),
            "path": item(self.output_dir, "Directory"),
            "streaming": item(bool(self.streaming), "Streaming"),
            "allowed_lateness_s": item(self.allowed_lateness_s, "Allowed lateness (s)"),
            "test_seed": item(self.test_seed, "Test seed (not private)"),
        }

    def expand(self, reports) -> dict[str, Any]:
        s = self.settings
        keyed = (
            reports
            | "Global" >> beam.WindowInto(bw.GlobalWindows())
            | "Bucket" >> beam.ParDo(KeyByBucket(s)).with_output_types(tuple[int, Any])
        )
        late: list[Any] = []
        if self.streaming:
            held = keyed | "Hold" >> beam.ParDo(HoldBucketsFn(s, self.allowed_lateness_s)).with_outputs(
                "counts", "dead_letter", main="buckets"
            )
            grouped, late = held.buckets, [held]
        else:
            grouped = keyed | "Group" >> beam.GroupByKey()
        fn = EmitBatchFn(self.task_id, self.schema_version, s, self.output_dir, self.test_seed)
        out = grouped | "Emit" >> beam.ParDo(fn).with_outputs("counts", "dead_letter", main="batches")
        if not late:
            return {"batches": out.batches, "counts": out.counts, "dead_letter": out.dead_letter}
        return {
            "batches": out.batches,
            "counts": (out.counts, late[0].counts) | "Counts" >> beam.Flatten(),
            "dead_letter": (out.dead_letter, late[0].dead_letter) | "DeadLetters" >> beam.Flatten(),
        }


def batch_metadata(path: str) -> dict[str, str]:
    """The shuffler's metadata (keys under :data:`META_PREFIX`) of one batch file (reads the header only).

    Raises:
        ValueError: the file is not a batch the shuffler wrote (no :data:`META_N`).
    """
    with FileSystems.open(path) as fh:
        reader = fastavro.reader(fh)
        meta = {k: v for k, v in reader.metadata.items() if k.startswith(META_PREFIX)}
    if META_N not in meta:
        raise ValueError(f"{path}: not a shuffled batch (no {META_N} in its Avro metadata)")
    return meta


def batch_manifest(output_dir: str) -> list[dict[str, object]]:
    """Manifest entries of every batch under ``OUT/batches/`` (from the files' own metadata), sorted by
    bucket and pane."""
    pattern = FileSystems.join(output_dir, BATCH_SUBDIR, "batch-*.avro")
    paths = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    entries = [manifest_entry(os.path.basename(p), batch_metadata(p)) for p in paths]
    return sorted(entries, key=lambda e: (e["task_id"], e["bucket_start_ms"], e["pane"], e["file"]))


def write_manifest(output_dir: str, entries: Sequence[dict[str, object]]) -> str:
    """Writes ``OUT/batches.jsonl`` (one JSON object per batch) and returns its path."""
    path = FileSystems.join(output_dir, "batches.jsonl")
    with FileSystems.create(path) as fh:
        for e in entries:
            fh.write((json.dumps(e, sort_keys=True) + "\n").encode("utf-8"))
    return path
