"""The shuffler's Beam steps: validated reports -> anonymous, permuted batches per time bucket.

Steps (:class:`Shuffle`), on the validate step's output (:class:`SourcedValidateFn`: the aggregation
jobs' :class:`transforms.aggregate.ValidateFn` that also names each batch's source file):

``Bucket``   :class:`KeyByBucket`: ``(bucket_start_ms, GroupReports(group, reports, source=...))``. Only
             the group, the payload fields of the task's mechanism and the input's name survive (no client
             id, no event time); the bucket is the event time rounded down to ``time_precision_s``.
``Spill``    :class:`SpillFn`: each batch's columns go to one spill file (``OUT/state/spill/``), its rows
             given i.i.d. labels in ``[0, SPILL_LABELS)`` from ``os.urandom`` and stored sorted by label;
             only a small :class:`ChunkRef` travels on. Reports of a bucket published by an earlier run
             are dropped here: counted ``already_published`` when their input is one the batch was made
             from (a restart re-reads its inputs), else withheld as late.
``Group``    batch: ``GroupByKey`` on the bucket start. Streaming: :class:`HoldBucketsFn`, a stateful DoFn
             keyed by bucket in the global window, holds a bucket's chunk references until the watermark
             passes its end plus the allowed lateness (an event-time timer), emits them once, and
             withholds and counts whatever of that bucket arrives later (``late_dropped``).
``Emit``     :class:`EmitBatchFn`: a bucket with at least ``min_reports`` reports is permuted and
             published as one Avro report file ``OUT/batches/batch-<task>-<start>-<end>-pane00000.avro``
             (:func:`publish_batch`); a shorter bucket is withheld and counted (``shuffle_withheld``,
             ``shuffle_withheld_buckets``, one ``short_bucket`` dead letter with its size and bucket).

**The permutation, in bounded memory.** The labels split a bucket into *units* of consecutive labels,
each at most ``memory_bytes`` of columns (:func:`plan_units`); a unit is loaded from the spill files
(the rows of its labels are contiguous in each file), permuted with :func:`ldp.anonymity.secure_permutation`
and encoded with the column encoder (:func:`wire.encode.encode_report_block`); units are written
in label order. This is a uniform permutation of the bucket: the labels are i.i.d. and independent of
the input order, so given the unit sizes every assignment of the reports to units with those sizes is
equally likely, and each unit's order is uniform and independent, so each of the ``n!`` orders has
probability ``prod(n_u!) / n! * prod(1 / n_u!) = 1 / n!`` whatever the sizes. A bucket within the bound is
one unit: one permutation of all of it. Reports of several groups (range tasks) are written group by group
within a unit, each group uniformly permuted: every record carries its group, so this order tells nothing
that a uniform order of the unit does not (both are the multiset plus independent randomness).

**Publication never unpublishes** (:func:`publish_batch`): the file is written under a temporary name
in the batch directory and fsynced, its ledger entry (``OUT/state/published/<name>.json``: its inputs
and their report counts, n, sha256, run) is written atomically, and the file is linked to its final,
deterministic name (task, bucket, pane) with ``os.link``, which never replaces an existing file; the
directory is fsynced. A published batch is never deleted or rewritten: a rerun over the same inputs
finds it (:func:`published_buckets`) and skips its reports.

**Provenance.** With a key (``--shuffle_key``), each batch carries ``ldp.shuffle.tag``, the HMAC-SHA256 of
its body digest, sync marker, task, bucket and n (:mod:`ldp.shuffle.provenance`); the header is written
with a placeholder, the body after it while hashing, then the tag in place of the placeholder. A task
accounted per group (``group_counts``: a heavy-hitters task's levels, :mod:`ldp.shuffle.levels`) also gets
its reports per group, ``ldp.shuffle.group_n``, signed with the rest.

Dead letters of the shuffler hold no report content: :func:`scrub_dead_letter` drops the record fields,
the task id and event times, and keeps the reason, the source, a fixed description and a size.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import io
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import fastavro
import fastavro.write
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
from ldp.reports import Reports
from transforms.aggregate import GroupReports, ValidateFn
from transforms.counts import COUNTER_NAMESPACE
from transforms.display import item, task_id_display
from wire.decode import zigzag_varint_bytes
from wire.durable import fsync_dir
from wire.encode import encode_report_block
from wire.records import make_dead_letter, reports_to_records

__all__ = [
    "META_PREFIX",
    "META_N",
    "META_GROUP_N",
    "META_TAG",
    "META_TAG_VERSION",
    "BATCH_SUBDIR",
    "STATE_SUBDIR",
    "SHORT_BUCKET_REASON",
    "FEW_SENDERS_REASON",
    "SENDERS_LIST_KEY",
    "input_senders",
    "SPILL_LABELS",
    "DEFAULT_MEMORY_MB",
    "ChunkRef",
    "SourcedValidateFn",
    "KeyByBucket",
    "SpillFn",
    "HoldBucketsFn",
    "EmitBatchFn",
    "Shuffle",
    "ScrubDeadLetters",
    "scrub_dead_letter",
    "spill_chunk",
    "plan_units",
    "write_batch",
    "publish_batch",
    "published_buckets",
    "batch_name",
    "batch_metadata",
    "batch_manifest",
    "write_manifest",
    "compact_utc",
]

_LOG = logging.getLogger(__name__)

#: Prefix of the shuffler's keys in the Avro file metadata of a batch.
META_PREFIX = "ldp.shuffle."
#: Metadata key: the number of reports shuffled together in the file.
META_N = META_PREFIX + "n"
#: Metadata keys of the provenance tag (hex HMAC-SHA256) and its format version.
META_TAG = META_PREFIX + "tag"
META_TAG_VERSION = META_PREFIX + "tag_version"
#: Metadata key: the batch's reports per group (``[[group, reports], ...]``), for tasks accounted per group.
META_GROUP_N = META_PREFIX + "group_n"
#: Sub-directory of the output holding the batches.
BATCH_SUBDIR = "batches"
#: Sub-directory of the output holding the shuffler's own state (never for the analyst): ``shuffler.json``,
#: ``lock``, ``published/`` (one ledger entry per batch) and ``spill/`` (transient columns).
STATE_SUBDIR = "state"
#: Dead-letter reason of a bucket withheld because it closed with fewer than ``min_reports`` reports.
SHORT_BUCKET_REASON = "short_bucket"
#: Dead-letter reason of a bucket withheld because its reports came from fewer than ``min_reports``
#: distinct authenticated senders (every input file of it lists its senders, :data:`SENDERS_LIST_KEY`).
FEW_SENDERS_REASON = "few_senders"
#: The collector's Avro metadata key listing a file's senders as keyed digests (16 hex characters each;
#: ``pipelines.collector.SENDERS_LIST_KEY``). Read here, never written to a batch.
SENDERS_LIST_KEY = "ldp.collector.senders"
SENDER_DIGEST_HEX = 16
#: Number of spill labels: a bucket is loaded in units of consecutive labels.
SPILL_LABELS = 4096
#: Default bound (MiB) on the columns of one unit held in memory while it is permuted and encoded.
DEFAULT_MEMORY_MB = 256
#: Records per Avro block of a batch.
BLOCK_RECORDS = 1 << 15
_MAGIC = b"Obj\x01"
_TAG_PLACEHOLDER = b"0" * 64


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


# ------------------------------------------------------------------------------------- spill files


@dataclasses.dataclass(frozen=True)
class ChunkRef:
    """One spill file: ``n`` reports of ``group`` read from ``source``, columns stored one after the other
    (``layout``: name, dtype, row shape, byte offset), rows sorted by their random label (column
    ``label``). ``senders``: the source file's senders as the collector listed them
    (:func:`input_senders`), None when it lists none."""

    path: str
    n: int
    group: int
    source: str
    layout: tuple[tuple[str, str, tuple[int, ...], int], ...]
    senders: str | None = None

    def columns(self, lo: int = 0, hi: int | None = None, *, mmap: bool = False) -> dict[str, np.ndarray]:
        """Rows ``[lo, hi)`` of every column (memory-mapped views with ``mmap``, else read)."""
        hi = self.n if hi is None else hi
        out: dict[str, np.ndarray] = {}
        with open(self.path, "rb") as fh:
            for name, dt, shape, offset in self.layout:
                dtype = np.dtype(dt)
                row = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
                if mmap:
                    if hi <= lo:
                        out[name] = np.empty((0, *shape), dtype=dtype)
                        continue
                    mm = np.memmap(
                        fh, dtype=dtype, mode="r", offset=offset + lo * row, shape=(hi - lo, *shape)
                    )
                    out[name] = np.asarray(mm)
                else:
                    fh.seek(offset + lo * row)
                    arr = np.fromfile(fh, dtype=dtype, count=(hi - lo) * int(np.prod(shape, dtype=np.int64)))
                    out[name] = arr.reshape((hi - lo, *shape))
        return out

    def labels(self) -> np.ndarray:
        """The sorted label column, memory-mapped."""
        return self.columns(mmap=True)["label"]

    def reports(self, lo: int = 0, hi: int | None = None) -> Reports:
        """Rows ``[lo, hi)`` as :class:`~ldp.reports.Reports` (copied out of the file)."""
        cols = self.columns(lo, hi)
        cols.pop("label")
        return Reports(**cols)

    def row_bytes(self) -> int:
        return sum(
            np.dtype(dt).itemsize * int(np.prod(shape, dtype=np.int64)) for _, dt, shape, _ in self.layout
        )

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def spill_chunk(
    directory: str, group: int, reports: Reports, source: str, labels: np.ndarray, senders: str | None = None
) -> ChunkRef:
    """Writes ``reports`` (their rows sorted by ``labels``, stably) to a new file in ``directory``."""
    n = len(reports)
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} reports")
    order = np.argsort(labels, kind="stable")
    cols = [("label", np.asarray(labels, dtype=np.uint16)[order])]
    cols += [(f, np.ascontiguousarray(getattr(reports, f)[order])) for f in reports.fields()]
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{uuid.uuid4().hex}.cols")
    layout = []
    offset = 0
    with open(path, "wb") as fh:  # transient: a crash re-reads the inputs, so no fsync
        for name, arr in cols:
            arr.tofile(fh)
            layout.append((name, arr.dtype.str, tuple(int(s) for s in arr.shape[1:]), offset))
            offset += arr.nbytes
    return ChunkRef(path, n, int(group), str(source), tuple(layout), senders)


def input_senders(source: str) -> str | None:
    """The senders an input file's collector listed (:data:`SENDERS_LIST_KEY`: sorted digests, 16 hex
    characters each), or None: not a readable file (Pub/Sub), no list, or a list that is not one."""
    try:
        with FileSystems.open(source) as fh:
            value = fastavro.reader(fh).metadata.get(SENDERS_LIST_KEY)
    except Exception:  # noqa: BLE001 - not a file, or not Avro: its reports are counted, not its senders
        return None
    if value is None:
        return None
    if len(value) % SENDER_DIGEST_HEX or re.fullmatch(r"[0-9a-f]*", value) is None:
        _LOG.warning("%s: %s is not a list of sender digests; its reports are counted instead",
                     source, SENDERS_LIST_KEY)  # fmt: skip
        return None
    return value


def distinct_senders(refs: Sequence[ChunkRef]) -> int | None:
    """Distinct senders of a bucket: the union of its input files' digests; None when any of its chunks
    comes from an input that lists none (then ``min_reports`` counts reports)."""
    if not refs or any(r.senders is None for r in refs):
        return None
    seen: set[str] = set()
    for listing in {r.senders for r in refs}:
        seen.update(listing[i : i + SENDER_DIGEST_HEX] for i in range(0, len(listing), SENDER_DIGEST_HEX))
    return len(seen)


def unit_rows(refs: Sequence[ChunkRef], memory_bytes: int) -> int:
    """Reports per unit under ``memory_bytes``: a unit's columns and the permutation's keys (16 bytes)
    and index (8) per report (the unit is encoded block by block, never copied whole in its new order)."""
    row = max((r.row_bytes() for r in refs), default=16)
    return max(1, int(memory_bytes) // (row + 24))


def plan_units(refs: Sequence[ChunkRef], max_rows: int) -> list[tuple[int, int]]:
    """Consecutive label ranges ``[k0, k1)`` of at most ``max_rows`` reports each (a label holding more
    is one unit by itself)."""
    total = sum(r.n for r in refs)
    if total <= max_rows:
        return [(0, SPILL_LABELS)]
    counts = np.zeros(SPILL_LABELS, dtype=np.int64)
    for r in refs:
        counts += np.bincount(r.labels(), minlength=SPILL_LABELS)[:SPILL_LABELS]
    units: list[tuple[int, int]] = []
    k0, acc = 0, 0
    for k in range(SPILL_LABELS):
        c = int(counts[k])
        if acc and acc + c > max_rows:
            units.append((k0, k))
            k0, acc = k, 0
        acc += c
    units.append((k0, SPILL_LABELS))
    return units


def unit_reports(refs: Sequence[ChunkRef], k0: int, k1: int) -> dict[int, Reports]:
    """The reports of labels ``[k0, k1)`` of every chunk, per group (not permuted)."""
    whole = k0 == 0 and k1 == SPILL_LABELS
    parts: dict[int, list[Reports]] = {}
    for r in refs:
        if whole:
            rep = r.reports()
        else:
            lab = r.labels()
            lo, hi = (int(x) for x in np.searchsorted(lab, [k0, k1]))
            del lab
            if hi <= lo:
                continue
            rep = r.reports(lo, hi)
        parts.setdefault(r.group, []).append(rep)
    return {g: Reports.concat(p) for g, p in sorted(parts.items())}


# ------------------------------------------------------------------------------------- batch files


def _header(meta: dict[str, bytes], sync: bytes) -> tuple[bytes, int | None]:
    """An Avro container header (one metadata block, keys sorted) and the offset of the tag's value
    (None without :data:`META_TAG`)."""
    out = bytearray(_MAGIC)
    tag_at = None
    out += zigzag_varint_bytes(len(meta))
    for k in sorted(meta):
        kb, vb = k.encode("utf-8"), meta[k]
        out += zigzag_varint_bytes(len(kb)) + kb + zigzag_varint_bytes(len(vb))
        if k == META_TAG:
            tag_at = len(out)
        out += vb
    out += b"\x00" + sync
    return bytes(out), tag_at


@dataclasses.dataclass
class WrittenBatch:
    n: int
    body_sha256: str
    tag: str | None


def _encode(task_id: str, schema_version: int, start_ms: int, group: int, reports: Reports) -> bytes:
    n = len(reports)
    times = np.full(n, start_ms, dtype=np.int64)
    data = encode_report_block(task_id, reports, times, group, schema_version)
    if data is not None:
        return data
    buf = io.BytesIO()  # bits / items: fastavro, record by record
    parsed = _parsed_report_schema()
    for rec in reports_to_records(task_id, reports, times, group, schema_version=schema_version):
        fastavro.write.schemaless_writer(buf, parsed, rec)
    return buf.getvalue()


_PARSED: list[Any] = []


def _parsed_report_schema() -> Any:
    if not _PARSED:
        _PARSED.append(fastavro.parse_schema(schemas.report_schema()))
    return _PARSED[0]


def _announced_group_counts(meta: dict[str, str], n: int, written: dict[int, int]
                            ) -> tuple[tuple[int, int], ...] | None:
    """The group counts ``meta`` announces (:data:`META_GROUP_N`, None without), checked against the
    reports ``written`` per group.

    Raises:
        ValueError: the announced counts differ from the written ones.
    """
    from ldp.shuffle import provenance

    if META_GROUP_N not in meta:
        return None
    group_n = provenance.parse_group_counts(meta[META_GROUP_N], n)
    if dict(group_n) != {g: c for g, c in written.items() if c}:
        raise ValueError(f"group counts {meta[META_GROUP_N]} announced, {sorted(written.items())} written")
    return group_n


def write_batch(
    fh: Any,
    parts: Iterable[tuple[int, Reports]],
    *,
    task_id: str,
    schema_version: int,
    start_ms: int,
    end_ms: int,
    n: int,
    meta: dict[str, str],
    key: bytes | None = None,
) -> WrittenBatch:
    """Writes one batch file to the seekable binary ``fh``: the header (``meta``; with ``key`` the tag),
    then ``parts`` (``(group, reports)`` in output order) as blocks of at most :data:`BLOCK_RECORDS`.
    Group counts in ``meta`` (:data:`META_GROUP_N`) are signed with the batch's facts.

    Raises:
        ValueError: ``parts`` hold a number of reports other than ``n``, or per group other than ``meta``'s
            group counts.
    """
    sync = os.urandom(16)
    m = {k: v.encode("utf-8") for k, v in meta.items()}
    m["avro.schema"] = json.dumps(schemas.report_schema()).encode("utf-8")
    m["avro.codec"] = b"null"
    if key is not None:
        m[META_TAG] = _TAG_PLACEHOLDER
        m[META_TAG_VERSION] = b"1"
    header, tag_at = _header(m, sync)
    base = fh.tell()
    fh.write(header)
    digest = hashlib.sha256()
    written = 0
    per_group: dict[int, int] = {}
    for group, reports in parts:
        per_group[int(group)] = per_group.get(int(group), 0) + len(reports)
        for lo in range(0, len(reports), BLOCK_RECORDS):
            block = reports.take(slice(lo, lo + BLOCK_RECORDS))
            data = _encode(task_id, schema_version, start_ms, group, block)
            piece = zigzag_varint_bytes(len(block)) + zigzag_varint_bytes(len(data))
            for b in (piece, data, sync):
                digest.update(b)
                fh.write(b)
            written += len(block)
    if written != n:
        raise ValueError(f"batch of {n} reports announced, {written} written")
    from ldp.shuffle import provenance

    group_n = _announced_group_counts(meta, int(n), per_group)
    body = digest.hexdigest()
    tag = None
    if key is not None:
        tag = provenance.sign(
            key, task_id=task_id, bucket_start_ms=int(start_ms), bucket_end_ms=int(end_ms), n=int(n),
            body_sha256=body, sync=sync, group_n=group_n,
        )  # fmt: skip
        end = fh.tell()
        fh.seek(base + tag_at)
        fh.write(tag.encode("ascii"))
        fh.seek(end)
    return WrittenBatch(n, body, tag)


def batch_name(task_id: str, start_ms: int, end_ms: int, pane: int = 0) -> str:
    """The deterministic file name of a bucket's batch."""
    return f"batch-{task_id}-{compact_utc(start_ms)}-{compact_utc(end_ms)}-pane{pane:05d}.avro"


def atomic_write(path: str, data: bytes) -> None:
    """``data`` to ``path`` through a temporary name in the same directory: fsync, rename, fsync the
    directory."""
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, f".tmp-{uuid.uuid4().hex}-{os.path.basename(path)}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(d)


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def publish_batch(output_dir: str, name: str, write: Any, ledger: dict[str, object]) -> bool:
    """Publishes ``OUT/batches/<name>`` once: ``write(fh)`` fills a temporary file in the batch directory
    (fsynced), the ledger entry (``ledger`` plus the file's sha256) is written atomically to
    ``OUT/state/published/<name>.json``, and the file is linked to its name (``os.link`` never replaces a
    file), then the directory is fsynced. Returns False, writing nothing, when ``name`` exists."""
    batch_dir = os.path.join(output_dir, BATCH_SUBDIR)
    final = os.path.join(batch_dir, name)
    if os.path.exists(final):
        return False
    os.makedirs(batch_dir, exist_ok=True)
    tmp = os.path.join(batch_dir, f".tmp-{uuid.uuid4().hex}-{name}.part")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        entry = {**ledger, "file": f"{BATCH_SUBDIR}/{name}", "sha256": _sha256_file(tmp)}
        pub = os.path.join(output_dir, STATE_SUBDIR, "published")
        os.makedirs(pub, exist_ok=True)
        atomic_write(os.path.join(pub, name + ".json"), json.dumps(entry, sort_keys=True).encode("utf-8"))
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        fsync_dir(batch_dir)
        return True
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def ledger_entry(output_dir: str, name: str) -> dict[str, Any] | None:
    """The ledger entry of a published batch (None if there is none)."""
    path = os.path.join(output_dir, STATE_SUBDIR, "published", name + ".json")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


def published_buckets(output_dir: str, task_id: str) -> dict[int, dict[str, int] | None]:
    """Buckets of ``task_id`` with a published batch in ``OUT/batches/``: bucket start (ms) -> the inputs
    the batch was made from and their report counts (None when the batch has no ledger entry: every
    input is then taken as already published)."""
    out: dict[int, dict[str, int] | None] = {}
    pattern = os.path.join(output_dir, BATCH_SUBDIR, f"batch-{task_id}-*.avro")
    for path in sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path):
        name = os.path.basename(path.path)
        meta = batch_metadata(path.path)
        if meta.get(META_PREFIX + "task_id") != task_id:
            continue
        entry = ledger_entry(output_dir, name)
        start = int(meta[META_PREFIX + "bucket_start_ms"])
        out[start] = None if entry is None else {str(k): int(v) for k, v in entry["sources"].items()}
    return out


class SourcedValidateFn(ValidateFn):
    """:class:`transforms.aggregate.ValidateFn` whose report batches also carry their source (the input
    file or subscription): the shuffler's ledger records which inputs a batch was made from."""

    def process(self, element: Any) -> Iterator[Any]:
        source = str(element[0])
        for out in super().process(element):
            if isinstance(out, bw.TimestampedValue):
                task_id, gr = out.value
                yield bw.TimestampedValue((task_id, gr._replace(source=source)), out.timestamp)
            else:
                yield out


class KeyByBucket(beam.DoFn):
    """``(task_id, GroupReports)`` timestamped by event time -> ``(bucket_start_ms, GroupReports(group,
    reports, source=...))``: event times and client ids are dropped."""

    def __init__(self, settings: AnonymitySettings) -> None:
        self.precision_ms = settings.precision_ms

    def display_data(self) -> dict[str, Any]:
        return {"precision_ms": item(self.precision_ms, "Bucket (ms)")}

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam) -> Iterator[Any]:  # noqa: B008
        _task_id, gr = element
        ts_ms = int(timestamp.micros // 1000)  # the latest event time of the batch (one bucket)
        yield (ts_ms - ts_ms % self.precision_ms, GroupReports(int(gr.group), gr.reports, source=gr.source))


def _late(n: int, why: str) -> Iterator[Any]:
    yield TaggedOutput("counts", {"late_dropped": n})
    yield TaggedOutput(
        "dead_letter", make_dead_letter("late", "shuffler", detail=f"{n} accepted report(s) {why}")
    )


class SpillFn(beam.DoFn):
    """``(bucket_start_ms, GroupReports)`` -> ``(bucket_start_ms, ChunkRef)``: the reports go to a spill
    file with i.i.d. CSPRNG labels (:func:`spill_chunk`). ``published``: buckets an earlier run
    published (:func:`published_buckets`); their reports are counted ``already_published`` when they come
    from an input the batch was made from, else withheld as late."""

    def __init__(
        self,
        spill_dir: str,
        published: dict[int, dict[str, int] | None] | None = None,
        test_seed: int | None = None,
    ) -> None:
        self.spill_dir = spill_dir
        self.published = dict(published or {})
        self.test_seed = test_seed
        self.already = Metrics.counter(COUNTER_NAMESPACE, "already_published")
        self.late = Metrics.counter(COUNTER_NAMESPACE, "late_dropped")
        self._rng: np.random.Generator | None = None
        self._senders: dict[str, str | None] = {}

    def senders_of(self, source: str) -> str | None:
        """:func:`input_senders` of ``source``, read once per bundle-processing instance (a few sources)."""
        if source not in self._senders:
            if len(self._senders) >= 64:
                self._senders.clear()
            self._senders[source] = input_senders(source)
        return self._senders[source]

    def display_data(self) -> dict[str, Any]:
        return {
            "spill_dir": item(self.spill_dir, "Spill directory"),
            "published": item(len(self.published), "Buckets published earlier"),
        }

    def _labels(self, n: int) -> np.ndarray:
        if self.test_seed is None:
            raw = np.frombuffer(os.urandom(2 * n), dtype="<u2")
        else:  # TESTS ONLY: reproducible, not anonymous
            if self._rng is None:
                self._rng = np.random.default_rng([int(self.test_seed), 1])
            raw = self._rng.integers(0, 1 << 16, n, dtype=np.uint16)
        return raw & np.uint16(SPILL_LABELS - 1)

    def process(self, element: tuple[int, GroupReports]) -> Iterator[Any]:
        start, gr = element
        n = len(gr.reports)
        if not n:
            return
        start = int(start)
        if start in self.published:
            sources = self.published[start]
            if sources is None or str(gr.source) in sources:
                self.already.inc(n)
                yield TaggedOutput("counts", {"already_published": n})
            else:
                self.late.inc(n)
                yield from _late(n, "arrived for a bucket published by an earlier run; withheld")
            return
        d = os.path.join(self.spill_dir, str(start))
        src = str(gr.source)
        yield (start, spill_chunk(d, gr.group, gr.reports, src, self._labels(n), self.senders_of(src)))


class EmitBatchFn(beam.DoFn):
    """``(bucket_start_ms, [ChunkRef, ...])`` -> one published batch (main output: its manifest entry)
    or a withheld bucket (``counts`` and ``dead_letter``); see the module docstring.

    ``memory_bytes``: bound on a unit's columns; ``key``: the provenance key (None: unsigned batches);
    ``test_seed``: permute with a seeded numpy generator (reproducible; tests only) instead of the CSPRNG;
    ``group_counts``: write the batch's reports per group (:data:`META_GROUP_N`).
    """

    def __init__(
        self,
        task_id: str,
        schema_version: int,
        settings: AnonymitySettings,
        output_dir: str,
        *,
        run_id: str = "",
        memory_bytes: int = DEFAULT_MEMORY_MB << 20,
        key: bytes | None = None,
        test_seed: int | None = None,
        group_counts: bool = False,
    ) -> None:
        self.task_id = task_id
        self.schema_version = schema_version
        self.settings = settings
        self.output_dir = output_dir
        self.group_counts = bool(group_counts)
        self.dir = os.path.join(output_dir, BATCH_SUBDIR)
        self.run_id = run_id
        self.memory_bytes = int(memory_bytes)
        self.key = key
        self.test_seed = test_seed
        self.forwarded = Metrics.counter(COUNTER_NAMESPACE, "shuffle_forwarded")
        self.batches = Metrics.counter(COUNTER_NAMESPACE, "shuffle_batches")
        self.withheld = Metrics.counter(COUNTER_NAMESPACE, "shuffle_withheld")
        self.withheld_buckets = Metrics.counter(COUNTER_NAMESPACE, "shuffle_withheld_buckets")
        self.few = Metrics.counter(COUNTER_NAMESPACE, "shuffle_few_senders")
        self.few_buckets = Metrics.counter(COUNTER_NAMESPACE, "shuffle_few_senders_buckets")
        self.already = Metrics.counter(COUNTER_NAMESPACE, "already_published")

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            **_settings_display(self.settings),
            "path": item(self.dir, "Batch directory"),
            "memory_mb": item(self.memory_bytes >> 20, "Memory per unit (MiB)"),
            "signed": item(self.key is not None, "Batches signed"),
            "test_seed": item(self.test_seed, "Test seed (not private)"),
        }

    def _permutation(self, n: int, start_ms: int, unit: int, group: int) -> np.ndarray:
        if self.test_seed is None:
            return secure_permutation(n)
        return seeded_permutation(n, [int(self.test_seed), int(start_ms), unit, group])  # type: ignore[arg-type]

    def permuted(self, start_ms: int, refs: Sequence[ChunkRef]) -> Iterator[tuple[int, Reports]]:
        """The bucket's reports in output order, unit by unit, ``(group, reports)``."""
        units = plan_units(refs, unit_rows(refs, self.memory_bytes))
        for u, (k0, k1) in enumerate(units):
            for group, reports in unit_reports(refs, k0, k1).items():
                perm = self._permutation(len(reports), start_ms, u, group)
                for lo in range(0, len(perm), BLOCK_RECORDS):  # no permuted copy of the whole unit
                    yield group, reports.take(perm[lo : lo + BLOCK_RECORDS])

    def process(self, element: tuple[int, Iterable[ChunkRef]]) -> Iterator[Any]:
        start, chunks = element
        refs = sorted(chunks, key=lambda r: r.path)  # one order whatever the runner's
        start = int(start)
        end = start + self.settings.precision_ms
        n = sum(r.n for r in refs)
        try:
            yield from self._emit(start, end, n, refs)
        finally:
            for r in refs:
                r.delete()
            for d in {os.path.dirname(r.path) for r in refs}:
                try:
                    os.rmdir(d)
                except OSError:  # not empty: another bundle's chunks of the bucket (late ones)
                    pass

    def _emit(self, start: int, end: int, n: int, refs: list[ChunkRef]) -> Iterator[Any]:
        """A closed bucket's outputs: withheld (too few reports or senders) or published as a batch."""
        if n < self.settings.min_reports:
            yield from self._withhold_short(start, end, n)
            return
        senders = distinct_senders(refs)
        if senders is not None and senders < self.settings.min_reports:
            yield from self._withhold_few_senders(start, end, n, senders)
            return
        yield from self._publish_bucket(start, end, n, refs, senders)

    def _withhold_short(self, start: int, end: int, n: int) -> Iterator[Any]:
        """A bucket of fewer than ``min_reports`` reports: counted and dead-lettered, never published."""
        self.withheld.inc(n)
        self.withheld_buckets.inc()
        yield TaggedOutput("counts", {"shuffle_withheld": n, "shuffle_withheld_buckets": 1})
        detail = (
            f"bucket [{_iso(start)}, {_iso(end)}) pane 0 closed with {n} report(s), fewer than "
            f"anonymity.min_reports = {self.settings.min_reports}: withheld"
        )
        yield TaggedOutput("dead_letter", make_dead_letter(SHORT_BUCKET_REASON, "shuffler", detail=detail))

    def _withhold_few_senders(self, start: int, end: int, n: int, senders: int) -> Iterator[Any]:
        """A bucket from fewer than ``min_reports`` distinct senders: counted and dead-lettered."""
        self.few.inc(n)
        self.few_buckets.inc()
        yield TaggedOutput("counts", {"shuffle_few_senders": n, "shuffle_few_senders_buckets": 1})
        detail = (
            f"bucket [{_iso(start)}, {_iso(end)}) pane 0 closed with {n} report(s) from {senders} "
            f"distinct sender(s), fewer than anonymity.min_reports = {self.settings.min_reports}"
            ": withheld"
        )
        yield TaggedOutput("dead_letter", make_dead_letter(FEW_SENDERS_REASON, "shuffler", detail=detail))

    def _batch_meta(self, start: int, end: int, n: int, refs: Sequence[ChunkRef] = ()) -> dict[str, str]:
        """The Avro metadata of the bucket's batch file (with ``group_counts``, its reports per group)."""
        out = {
            META_N: str(n),
            META_PREFIX + "task_id": self.task_id,
            META_PREFIX + "bucket_start_ms": str(start),
            META_PREFIX + "bucket_end_ms": str(end),
            META_PREFIX + "time_precision_s": str(self.settings.time_precision_s),
            META_PREFIX + "min_reports": str(self.settings.min_reports),
            META_PREFIX + "pane": "0",
        }
        if self.group_counts:
            from ldp.shuffle.provenance import format_group_counts

            per_group: dict[int, int] = {}
            for r in refs:
                per_group[int(r.group)] = per_group.get(int(r.group), 0) + int(r.n)
            out[META_GROUP_N] = format_group_counts(per_group)
        return out

    def _publish_bucket(
        self, start: int, end: int, n: int, refs: list[ChunkRef], senders: int | None
    ) -> Iterator[Any]:
        """Writes the bucket's permuted batch once (a batch published before is never rewritten) and
        yields its counts and manifest line."""
        name = batch_name(self.task_id, start, end)
        meta = self._batch_meta(start, end, n, refs)
        sources: dict[str, int] = {}
        for r in refs:
            sources[r.source] = sources.get(r.source, 0) + r.n

        def write(fh: Any) -> None:
            write_batch(
                fh, self.permuted(start, refs), task_id=self.task_id, schema_version=self.schema_version,
                start_ms=start, end_ms=end, n=n, meta=meta, key=self.key,
            )  # fmt: skip

        t0 = time.perf_counter()
        ledger = {"task_id": self.task_id, "bucket_start_ms": start, "bucket_end_ms": end, "n": n,
                  "sources": sources, "run_id": self.run_id, "distinct_senders": senders}  # fmt: skip
        if not publish_batch(self.output_dir, name, write, ledger):
            prior = ledger_entry(self.output_dir, name) or {}
            if prior.get("run_id") != self.run_id or prior.get("sources") != sources:
                # published before (an earlier run, or a concurrent bundle): never rewritten
                self.already.inc(n)
                yield TaggedOutput("counts", {"already_published": n})
                return
            # a retried bundle of this run published it already: the same outcome, not written again
        _LOG.info(
            "published %s: %d report(s) from %d input(s) in %.2f s",
            name,
            n,
            len(sources),
            time.perf_counter() - t0,
        )
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
        "signed": META_TAG in meta,
        **({"group_n": json.loads(meta[META_GROUP_N])} if META_GROUP_N in meta else {}),
    }


class HoldBucketsFn(beam.DoFn):
    """Streaming: ``(bucket_start_ms, ChunkRef)`` keyed by bucket, in the global window ->
    ``(bucket_start_ms, [ChunkRef, ...])`` once per bucket, when the watermark passes the bucket's end
    plus ``allowed_lateness_s`` (an event-time timer); a chunk of a bucket already emitted is withheld,
    counted (``late_dropped``, one ``late`` dead letter with its size) and its spill file deleted. Nothing
    is ever late for the runner (the global window), so no report is dropped uncounted; a bucket first
    seen after its close time is emitted at the next watermark advance. State per bucket: its chunk
    references (not the reports) until it closes, then one boolean."""

    REPORTS = BagStateSpec("chunks", PickleCoder())
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
        element: tuple[int, ChunkRef],
        reports=beam.DoFn.StateParam(REPORTS),  # noqa: B008 - Beam's state idiom
        closed=beam.DoFn.StateParam(CLOSED),  # noqa: B008
        timer=beam.DoFn.TimerParam(CLOSE),  # noqa: B008
    ) -> Iterator[Any]:
        start, ref = element
        if closed.read():
            self.late.inc(ref.n)
            ref.delete()
            yield from _late(ref.n, "arrived after their bucket closed; withheld")
            return
        reports.add(ref)
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
    ``allowed_lateness_s``). ``published``: buckets published by an earlier run on the same output;
    ``group_counts``: each batch lists its reports per group (tasks accounted per group)."""

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
        run_id: str = "",
        memory_bytes: int = DEFAULT_MEMORY_MB << 20,
        key: bytes | None = None,
        published: dict[int, dict[str, int] | None] | None = None,
        group_counts: bool = False,
    ) -> None:
        super().__init__()
        self.group_counts = bool(group_counts)
        self.task_id = task_id
        self.schema_version = schema_version
        self.settings = settings
        self.output_dir = output_dir
        self.streaming = streaming
        self.allowed_lateness_s = float(allowed_lateness_s)
        self.test_seed = test_seed
        self.run_id = run_id
        self.memory_bytes = int(memory_bytes)
        self.key = key
        self.published = published or {}

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            **_settings_display(self.settings),
            "path": item(self.output_dir, "Directory"),
            "streaming": item(bool(self.streaming), "Streaming"),
            "allowed_lateness_s": item(self.allowed_lateness_s, "Allowed lateness (s)"),
            "memory_mb": item(self.memory_bytes >> 20, "Memory per unit (MiB)"),
            "signed": item(self.key is not None, "Batches signed"),
            "test_seed": item(self.test_seed, "Test seed (not private)"),
        }

    def expand(self, reports) -> dict[str, Any]:
        s = self.settings
        spill_dir = os.path.join(self.output_dir, STATE_SUBDIR, "spill")
        keyed = (
            reports
            | "Global" >> beam.WindowInto(bw.GlobalWindows())
            | "Bucket" >> beam.ParDo(KeyByBucket(s)).with_output_types(tuple[int, Any])
        )
        spilled = keyed | "Spill" >> beam.ParDo(
            SpillFn(spill_dir, self.published, self.test_seed)
        ).with_outputs("counts", "dead_letter", main="chunks")
        chunks = spilled.chunks | "KeyType" >> beam.Map(lambda kv: kv).with_output_types(tuple[int, Any])
        side = [spilled]
        if self.streaming:
            held = chunks | "Hold" >> beam.ParDo(HoldBucketsFn(s, self.allowed_lateness_s)).with_outputs(
                "counts", "dead_letter", main="buckets"
            )
            grouped = held.buckets
            side.append(held)
        else:
            grouped = chunks | "Group" >> beam.GroupByKey()
        fn = EmitBatchFn(
            self.task_id, self.schema_version, s, self.output_dir, run_id=self.run_id,
            memory_bytes=self.memory_bytes, key=self.key, test_seed=self.test_seed,
            group_counts=self.group_counts,
        )  # fmt: skip
        out = grouped | "Emit" >> beam.ParDo(fn).with_outputs("counts", "dead_letter", main="batches")
        return {
            "batches": out.batches,
            "counts": (out.counts, *(o.counts for o in side)) | "Counts" >> beam.Flatten(),
            "dead_letter": (out.dead_letter, *(o.dead_letter for o in side))
            | "DeadLetters" >> beam.Flatten(),
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
    """Writes ``OUT/batches.jsonl`` (one JSON object per batch) atomically and returns its path."""
    path = os.path.join(output_dir, "batches.jsonl")
    atomic_write(path, b"".join((json.dumps(e, sort_keys=True) + "\n").encode("utf-8") for e in entries))
    return path


def clear_spill(output_dir: str) -> int:
    """Removes what a killed run left: spill files and temporary batch files (never a published batch).
    Returns the number of files removed."""
    removed = 0
    spill = os.path.join(output_dir, STATE_SUBDIR, "spill")
    if os.path.isdir(spill):
        removed += sum(len(files) for _, _, files in os.walk(spill))
        shutil.rmtree(spill)
    batch_dir = os.path.join(output_dir, BATCH_SUBDIR)
    if os.path.isdir(batch_dir):
        for name in os.listdir(batch_dir):
            if name.startswith(".tmp-") and name.endswith(".part"):
                os.unlink(os.path.join(batch_dir, name))
                removed += 1
    return removed
