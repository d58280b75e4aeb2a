"""Kafka as a report source and sink, through a spool directory the streaming jobs watch.

A streaming job given ``--input_topic kafka://HOST:PORT/TOPIC`` starts a *bridge*: a Kafka consumer
(kafka-python) in a child process that writes every message of the topic, an Avro container of reports
as ``ldp-beam simulate --output_topic`` and the collector send them, as one file of a spool directory,
``TOPIC-PPPPP-OOOOOOOOOOOOOOOOOOOO.avro`` (partition, offset), and then its ``PATH.done`` marker. The job
reads the spool as a watched directory with ``--require_done_marker``, so the watched-directory path's
checks, dead letters, event time from the report and restart behaviour apply unchanged (docs/kafka.md).

Exactly once into the spool: a message's file is written to ``NAME.tmp``, fsynced, renamed, marked done
and the directory fsynced before the consumer group's offset is committed past it. On start the bridge
deletes ``.tmp`` leftovers, adds the marker of a renamed file that lacks one, and resumes every partition
at the larger of the offset after its last spool file and the group's committed offset: a bridge killed
at any point (SIGKILL included) and started again neither loses nor repeats a message.

Retries spooled once: a message whose ``ldp-request`` header (``KEYHEX:BODYHEX``, the digests of an
Idempotency-Key and of its request's body, set by ``ldp-beam collect --output_topic``) was spooled within
the dedup window (7 days) is dropped, counted and committed past. The ids spooled are journaled in
``.requests-TOPIC`` (``TIME PARTITION OFFSET ID``), appended and fsynced before the batch's files are
renamed (then ``TIME done``), read back and compacted on start. The same key with another body is
spooled (a key conflict, not a retry); a message without the header is spooled as it is.

The URL: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?group=GROUP&spool=DIR]``. ``group`` defaults to
``ldp-beam-<task id>``; ``spool`` to ``~/.cache/ldp-beam/kafka-spool/<bootstrap>/<topic>/<group>``
(``LDP_KAFKA_SPOOL_ROOT`` replaces the root). A job started again with the same spool re-reads it whole,
as a job started again on a watched directory does (with ``--store`` the re-read is idempotent).

``python -m transforms.kafka --input_topic URL`` runs a bridge alone (SIGTERM or SIGINT stop it after the
batch being written). :class:`KafkaPublisher` is the producer side (acknowledged by every in-sync replica).
Nothing here imports Beam.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from wire.durable import fsync_dir

_LOG = logging.getLogger(__name__)
# kafka-python logs every reconnect and slow poll at WARNING; the bridge and the checks report what matters
# ("Topic ... not found in cluster metadata" while a topic is created on first use, too)
if logging.getLogger("kafka").level == logging.NOTSET:
    logging.getLogger("kafka").setLevel(logging.ERROR)
if logging.getLogger("kafka.cluster").level == logging.NOTSET:
    logging.getLogger("kafka.cluster").setLevel(logging.CRITICAL)

SCHEME = "kafka://"
#: Kafka's legal topic names (and never "." or "..").
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST_RE = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")
_GROUP_RE = re.compile(r"[A-Za-z0-9._-]{1,200}")
_QUERY_KEYS = ("group", "spool", "dedup_window_s")
#: Messages read from the broker per batch, and the longest wait of one poll.
MAX_BATCH = 500
POLL_MS = 500
#: Seconds between looks for partitions added to the topic.
PARTITION_REFRESH_S = 5.0
#: The header naming the request a message came from (``KEYHEX:BODYHEX``, set by the collector).
REQUEST_HEADER = "ldp-request"
_REQUEST_RE = re.compile(r"[0-9a-f]{16,128}:[0-9a-f]{16,128}")
#: How long the bridge remembers a spooled request: a repeat within it is dropped (7 days).
DEDUP_WINDOW_S = 7 * 86_400.0
#: Duplicates named per log line (the rest are counted).
_LOG_ITEMS = 10


class KafkaSourceError(ValueError):
    """A Kafka URL, flag combination or broker the job cannot use (one line)."""


def is_kafka_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SCHEME)


@dataclasses.dataclass(frozen=True)
class KafkaTopic:
    """A parsed ``kafka://`` URL."""

    url: str
    bootstrap: tuple[str, ...]
    topic: str
    group: str | None = None
    spool: str | None = None
    dedup_window_s: float | None = None  # the bridge's dedup window (None: DEDUP_WINDOW_S)

    def group_for(self, task_id: str | None) -> str:
        if self.group:
            return self.group
        suffix = re.sub(r"[^A-Za-z0-9._-]", "_", task_id or "bridge")[:150]
        return f"ldp-beam-{suffix}"

    def spool_for(self, task_id: str | None) -> str:
        if self.spool:
            return os.path.abspath(os.path.expanduser(self.spool))
        root = os.environ.get("LDP_KAFKA_SPOOL_ROOT") or os.path.join(
            os.path.expanduser("~"), ".cache", "ldp-beam", "kafka-spool"
        )
        servers = "_".join(b.replace(":", "-").strip("[]") for b in self.bootstrap)
        return os.path.join(root, servers, self.topic, self.group_for(task_id))


def parse_kafka_url(url: str) -> KafkaTopic:
    """``kafka://HOST:PORT[,HOST:PORT]/TOPIC[?group=G&spool=DIR&dedup_window_s=S]``;
    :class:`KafkaSourceError` names the first problem."""
    if not is_kafka_url(url):
        raise KafkaSourceError(f"{url!r} is not a Kafka URL: give kafka://HOST:PORT/TOPIC")
    parts = urllib.parse.urlsplit(url)
    if parts.fragment:
        raise KafkaSourceError(f"{url!r}: a Kafka URL has no #fragment")
    servers = tuple(s for s in parts.netloc.split(",") if s)
    if not servers:
        raise KafkaSourceError(f"{url!r} names no broker: give kafka://HOST:PORT/TOPIC")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not _HOST_RE.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
            raise KafkaSourceError(f"{url!r}: broker {server!r} is not HOST:PORT (port 1 to 65535)")
    topic = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not _TOPIC_RE.fullmatch(topic) or topic in (".", ".."):
        raise KafkaSourceError(
            f"{url!r}: topic {topic!r} is not a Kafka topic name (1 to 249 letters, digits, '.', '_', '-')"
        )
    try:
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise KafkaSourceError(f"{url!r}: the query does not parse ({exc})") from None
    unknown = sorted(set(query) - set(_QUERY_KEYS))
    if unknown:
        known = ", ".join(_QUERY_KEYS)
        raise KafkaSourceError(f"{url!r}: unknown option(s) {', '.join(unknown)} (known: {known})")
    opts: dict[str, str] = {}
    for key, values in query.items():
        if len(values) != 1 or not values[0]:
            raise KafkaSourceError(f"{url!r}: give {key}= once, with a value")
        opts[key] = values[0]
    if "group" in opts and not _GROUP_RE.fullmatch(opts["group"]):
        raise KafkaSourceError(
            f"{url!r}: group {opts['group']!r} must be 1 to 200 letters, digits, '.', '_', '-'"
        )
    window = None
    if "dedup_window_s" in opts:
        try:
            window = float(opts["dedup_window_s"])
        except ValueError:
            window = float("nan")
        if not 0 < window < float("inf"):
            raise KafkaSourceError(
                f"{url!r}: dedup_window_s {opts['dedup_window_s']!r} must be a number of seconds > 0"
            )
    return KafkaTopic(url, servers, topic, opts.get("group"), opts.get("spool"), window)


# ------------------------------------------------------------------------------------------------------------
# the spool directory
# ------------------------------------------------------------------------------------------------------------


class Spool:
    """One topic's messages as files of a directory, each complete before its ``.done`` marker."""

    def __init__(
        self, directory: str | os.PathLike[str], topic: str, *, dedup_window_s: float = DEDUP_WINDOW_S
    ) -> None:
        if not dedup_window_s > 0:
            raise ValueError(f"the dedup window must be > 0 s, got {dedup_window_s}")
        self.dir = Path(directory)
        self.topic = topic
        self.dedup_window_s = float(dedup_window_s)
        #: ``{request id: (unix time, partition, offset)}`` of the keyed messages spooled in the window
        self.requests: dict[str, tuple[float, int, int]] = {}
        self._by_key: dict[str, str] = {}  # key digest -> its last request id
        self._journal_lines = 0
        self._compact_at = 0.0  # when the requests older than the window are next forgotten
        self._name_re = re.compile(rf"{re.escape(topic)}-(\d{{5}})-(\d{{20}})\.avro")

    @property
    def stats_path(self) -> Path:
        """``bridge-stats-TOPIC.json``: the running bridge's :class:`BridgeStats` (not a message file)."""
        return self.dir / f"bridge-stats-{self.topic}.json"

    @property
    def journal(self) -> Path:
        """``.requests-TOPIC``: one line ``TIME PARTITION OFFSET REQUEST`` per keyed message spooled."""
        return self.dir / f".requests-{self.topic}"

    def name(self, partition: int, offset: int) -> str:
        return f"{self.topic}-{partition:05d}-{offset:020d}.avro"

    @property
    def pattern(self) -> str:
        """The glob of this topic's message files (what the job watches)."""
        return str(self.dir / f"{self.topic}-*.avro")

    def files(self) -> dict[tuple[int, int], Path]:
        """``{(partition, offset): path}`` of the message files present (marked or not)."""
        out: dict[tuple[int, int], Path] = {}
        if not self.dir.is_dir():
            return out
        for entry in os.scandir(self.dir):
            m = self._name_re.fullmatch(entry.name)
            if m:
                out[(int(m.group(1)), int(m.group(2)))] = Path(entry.path)
        return out

    def recover(self) -> dict[int, int]:
        """Removes unfinished ``.tmp`` files, marks renamed files that lack their marker, and returns the
        next offset to read per partition (one past its last file)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".tmp") and self._name_re.fullmatch(entry.name[: -len(".tmp")]):
                os.unlink(entry.path)
        positions: dict[int, int] = {}
        files = self.files()
        for (partition, offset), path in files.items():
            positions[partition] = max(positions.get(partition, 0), offset + 1)
            marker = Path(f"{path}.done")
            if not marker.exists():  # renamed after its fsync: complete; only the marker is missing
                marker.touch()
        self._load_requests(set(files), positions)
        fsync_dir(self.dir)
        return positions

    def _load_requests(self, files: set[tuple[int, int]], positions: dict[int, int]) -> None:
        """Reads the journal back: torn lines and lines older than the window are dropped, and so are the
        lines of an unfinished batch (the newest lines, with no ``TIME done`` record after them: the
        bridge died between the journal and the rename) whose file is missing at or past its partition's
        last file: that message is read and spooled again. Any other missing file was pruned: its line
        stays, so pruning files (a partition's all) keeps their ids. Then the journal is rewritten
        compacted."""
        self.requests, self._by_key = {}, {}
        if not self.journal.exists():
            return
        now = time.time()
        lines: list[tuple[float, int, int, str]] = []
        done = float("-inf")
        for line in self.journal.read_text(encoding="ascii", errors="replace").splitlines():
            parts = line.split()
            try:
                if len(parts) == 2 and parts[1] == "done":
                    done = max(done, float(parts[0]))
                elif len(parts) == 4 and _REQUEST_RE.fullmatch(parts[3]):
                    lines.append((float(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
            except ValueError:
                continue  # a torn line
        last = max((t for t, _, _, _ in lines), default=done)
        for t, partition, offset, request in lines:
            if not now - t < self.dedup_window_s:
                continue
            unfinished = t == last > done and offset >= positions.get(partition, 0)
            if unfinished and (partition, offset) not in files:
                continue
            self._remember(request, t, partition, offset)
        self._rewrite_journal()
        self._compact_at = now + min(3600.0, self.dedup_window_s / 2)

    def _remember(self, request: str, t: float, partition: int, offset: int) -> None:
        self.requests[request] = (t, partition, offset)
        self._by_key[request.partition(":")[0]] = request

    def _rewrite_journal(self) -> None:
        """The journal as the requests in memory, every batch finished (tmp, fsync, rename, directory
        fsync)."""
        tmp = self.journal.with_name(self.journal.name + ".tmp")
        entries = sorted(self.requests.items(), key=lambda kv: kv[1])
        with open(tmp, "w", encoding="ascii") as fh:
            fh.writelines(f"{t:.3f} {p} {o} {r}\n" for r, (t, p, o) in entries)
            if entries:
                fh.write(f"{entries[-1][1][0]:.3f} done\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.journal)
        fsync_dir(self.dir)
        self._journal_lines = len(entries)

    def seen(self, request: str, now: float) -> tuple[int, int] | None:
        """``(partition, offset)`` of the message that spooled ``request`` within the window, else None."""
        hit = self.requests.get(request)
        if hit is None or not now - hit[0] < self.dedup_window_s:
            return None
        return hit[1], hit[2]

    def other_body(self, request: str, now: float) -> tuple[int, int] | None:
        """Where the same key was spooled with another body within the window (None: it was not)."""
        other = self._by_key.get(request.partition(":")[0])
        return None if other is None or other == request else self.seen(other, now)

    def check_cluster(self, cluster_id: str | None, *, record: bool = True) -> None:
        """Ties the spool to the Kafka cluster its offsets came from: the first call records
        ``cluster_id`` (unless ``record`` is false); a later one with another id (a new broker, whose
        offsets start again at 0) is a :class:`KafkaSourceError`, since resuming past the old files would
        skip the new messages."""
        if not cluster_id:
            return
        path = self.dir / f".cluster-{self.topic}"
        if path.exists():
            known = path.read_text(encoding="utf-8").strip()
            if known != cluster_id:
                raise KafkaSourceError(
                    f"spool {str(self.dir)!r} holds topic {self.topic!r} of Kafka cluster {known!r}, but the "
                    f"broker is cluster {cluster_id!r} (offsets start again): give a new spool= or empty it"
                )
            return
        if not record:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(cluster_id + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def write(
        self, messages: Sequence[tuple[int, int, bytes | None]], requests: Sequence[tuple[int, int, str]] = ()
    ) -> None:
        """Writes ``(partition, offset, value)`` messages durably: every file fsynced under a temporary name,
        the ``(partition, offset, request id)`` of the keyed ones appended to the journal and fsynced,
        the files renamed and marked done, the directory fsynced and the batch recorded finished in the
        journal (``TIME done``), before this returns."""
        if not messages:  # a batch of repeats only
            return
        staged: list[tuple[Path, Path]] = []
        for partition, offset, value in messages:
            final = self.dir / self.name(partition, offset)
            tmp = final.with_name(final.name + ".tmp")
            with open(tmp, "wb") as fh:
                fh.write(value or b"")
                fh.flush()
                os.fsync(fh.fileno())
            staged.append((tmp, final))
        now = time.time()
        if requests:
            self._append_journal(requests, now)
        for tmp, final in staged:
            os.replace(tmp, final)
        for _, final in staged:
            Path(f"{final}.done").touch()
        fsync_dir(self.dir)
        if requests:  # not fsynced: a lost record only makes the next start check this batch's files
            with open(self.journal, "a", encoding="ascii") as fh:
                fh.write(f"{now:.3f} done\n")
        for partition, offset, request in requests:
            self._remember(request, now, partition, offset)
        if self._journal_lines and (
            now >= self._compact_at or self._journal_lines > 2 * len(self.requests) + 10_000
        ):
            self._compact(now)

    def _append_journal(self, requests: Sequence[tuple[int, int, str]], now: float) -> None:
        new = not self.journal.exists()
        with open(self.journal, "a", encoding="ascii") as fh:
            fh.writelines(f"{now:.3f} {p} {o} {r}\n" for p, o, r in requests)
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            fsync_dir(self.dir)
        self._journal_lines += len(requests)

    def _compact(self, now: float) -> None:
        """Forgets the requests older than the window and rewrites the journal (every hour, or every
        half window when that is shorter, and when the journal holds twice the lines it needs)."""
        self.requests = {r: v for r, v in self.requests.items() if now - v[0] < self.dedup_window_s}
        self._by_key = {r.partition(":")[0]: r for r in self.requests}
        self._rewrite_journal()
        self._compact_at = now + min(3600.0, self.dedup_window_s / 2)


# ------------------------------------------------------------------------------------------------------------
# the bridge: topic -> spool
# ------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class BridgeStats:
    """What a bridge did: ``read`` = ``messages`` (spooled) + ``duplicates`` (dropped)."""

    read: int = 0
    messages: int = 0
    bytes: int = 0
    batches: int = 0
    duplicates: int = 0
    key_conflicts: int = 0
    bad_request_ids: int = 0
    commit_failures: int = 0

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> BridgeStats:
        """The counts of a published stats document (:meth:`Bridge.publish_stats`; other keys ignored)."""
        return cls(**{f.name: int(doc.get(f.name, 0)) for f in dataclasses.fields(cls)})

    def line(self) -> str:
        return (f"read {self.read} messages: {self.messages} spooled ({self.bytes} bytes) in {self.batches} "
                f"batches, {self.duplicates} duplicates dropped, {self.key_conflicts} key conflicts, "
                f"{self.bad_request_ids} unreadable {REQUEST_HEADER} headers; "
                f"{self.commit_failures} failed commits")  # fmt: skip


def request_id(headers: Iterable[tuple[str, bytes]] | None) -> str | bool | None:
    """A message's ``ldp-request`` header: the request id (``KEYHEX:BODYHEX``), None without the header,
    False when it is there but not such an id."""
    for name, value in headers or ():
        if name == REQUEST_HEADER:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else ""
            return text if _REQUEST_RE.fullmatch(text) else False
    return None


@dataclasses.dataclass
class _Batch:
    """One poll's messages after the dedup: what to spool and journal, and what was dropped or flagged."""

    keep: list[tuple[int, int, bytes | None]] = dataclasses.field(default_factory=list)
    requests: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)
    duplicates: list[tuple[tuple[int, int], tuple[int, int]]] = dataclasses.field(default_factory=list)
    conflicts: list[tuple[tuple[int, int], tuple[int, int]]] = dataclasses.field(default_factory=list)
    bad: int = 0


def _where(items: Sequence[tuple[tuple[int, int], tuple[int, int]]]) -> str:
    shown = ", ".join(f"{p}:{o} (first {fp}:{fo})" for (p, o), (fp, fo) in items[:_LOG_ITEMS])
    more = len(items) - _LOG_ITEMS
    return shown + (f" and {more} more" if more > 0 else "")


class Bridge:
    """Copies a topic's messages into a :class:`Spool`, committing the group's offsets only after the
    files are durable. ``consumer_factory`` (tests) builds the consumer from keyword arguments."""

    def __init__(
        self,
        source: KafkaTopic,
        spool_dir: str,
        group: str,
        *,
        poll_ms: int = POLL_MS,
        max_batch: int = MAX_BATCH,
        dedup_window_s: float = DEDUP_WINDOW_S,
        consumer_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.source = source
        self.spool = Spool(spool_dir, source.topic, dedup_window_s=dedup_window_s)
        self.group = group
        self.poll_ms = poll_ms
        self.max_batch = max_batch
        self._factory = consumer_factory
        self._positions: dict[int, int] = {}
        self._assigned: set[int] = set()
        self.stats = BridgeStats()

    def _consumer(self) -> Any:
        kwargs = dict(
            bootstrap_servers=list(self.source.bootstrap), group_id=self.group, enable_auto_commit=False,
            auto_offset_reset="earliest", client_id=f"ldp-beam-bridge-{self.group}",
        )  # fmt: skip
        if self._factory is not None:
            return self._factory(**kwargs)
        from kafka import KafkaConsumer

        return KafkaConsumer(**kwargs)

    def _assign(self, consumer: Any) -> None:
        """Assigns every partition of the topic (new ones too) and seeks each to where the spool or the
        group's committed offset says, whichever is further."""
        from kafka import TopicPartition

        found = consumer.partitions_for_topic(self.source.topic) or set()
        if not self._assigned:  # the first metadata answer names the cluster
            self.spool.check_cluster(cluster_id(consumer))
        if not found or set(found) == self._assigned:
            return
        tps = [TopicPartition(self.source.topic, p) for p in sorted(found)]
        consumer.assign(tps)
        for tp in tps:
            committed = consumer.committed(tp)
            start = max(self._positions.get(tp.partition, 0), committed or 0)
            if tp.partition in self._positions or committed is not None:
                consumer.seek(tp, start)
            else:  # nothing read yet by this spool or group: the earliest retained message
                consumer.seek_to_beginning(tp)
        _LOG.info("bridge %s: partitions %s of %s", self.group, sorted(found), self.source.topic)
        self._assigned = set(found)

    def _commit(self, consumer: Any, messages: Sequence[tuple[int, int, Any, Any]]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        offsets = {}
        for partition, offset, _, _ in messages:
            self._positions[partition] = max(self._positions.get(partition, 0), offset + 1)
            offsets[TopicPartition(self.source.topic, partition)] = OffsetAndMetadata(
                self._positions[partition], "", -1
            )
        try:
            consumer.commit(offsets)
        except Exception as exc:  # the spool is the record; the next batch commits again
            self.stats.commit_failures += 1
            _LOG.warning("bridge %s: offset commit failed (the spool has the messages): %s", self.group, exc)

    def run(self, stop: Callable[[], bool]) -> BridgeStats:
        """Copies until ``stop()`` is true (looked at between batches); the stats are published in the
        spool (:meth:`publish_stats`) at the start, after every batch and at the end."""
        self._positions = self.spool.recover()
        self.publish_stats()
        consumer = self._consumer()
        try:
            refreshed = 0.0
            while not stop():
                if time.monotonic() - refreshed > PARTITION_REFRESH_S or not self._assigned:
                    self._assign(consumer)
                    refreshed = time.monotonic()
                    if not self._assigned:
                        time.sleep(self.poll_ms / 1000)
                        continue
                batch = consumer.poll(timeout_ms=self.poll_ms, max_records=self.max_batch)
                messages = [(tp.partition, r.offset, r.value, request_id(getattr(r, "headers", None)))
                            for tp, recs in batch.items() for r in recs]  # fmt: skip
                if not messages:
                    continue
                written = self._dedup(messages)
                self.spool.write(written.keep, written.requests)
                self._commit(consumer, messages)  # past the dropped duplicates too
                self._count(len(messages), written)
                self.publish_stats()
        finally:
            consumer.close(autocommit=False)
            self.publish_stats()
        return self.stats

    def publish_stats(self) -> None:
        """Writes :attr:`stats` to the spool's ``bridge-stats-TOPIC.json`` (replaced whole), where the job
        and an operator read this bridge's counts: ``read`` = ``messages`` + ``duplicates``."""
        doc = {"topic": self.source.topic, "group": self.group, "pid": os.getpid(), "updated": time.time(),
               **dataclasses.asdict(self.stats)}  # fmt: skip
        path = self.spool.stats_path
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def _dedup(self, messages: Sequence[tuple[int, int, bytes | None, str | bool | None]]) -> _Batch:
        """The messages to spool, and the ``(partition, offset, request id)`` of the keyed ones: a request
        spooled within the window (or earlier in this batch) is dropped; the same key with another body
        is spooled and counted as a key conflict."""
        now = time.time()
        out = _Batch()
        batch: dict[str, tuple[int, int]] = {}
        keys: dict[str, tuple[int, int]] = {}
        for partition, offset, value, rid in messages:
            if isinstance(rid, str):
                first = batch.get(rid) or self.spool.seen(rid, now)
                if first is not None:
                    out.duplicates.append(((partition, offset), first))
                    continue
                key = rid.partition(":")[0]
                other = keys.get(key) or self.spool.other_body(rid, now)
                if other is not None:
                    out.conflicts.append(((partition, offset), other))
                batch[rid] = keys[key] = (partition, offset)
                out.requests.append((partition, offset, rid))
            elif rid is False:
                out.bad += 1
            out.keep.append((partition, offset, value))
        return out

    def _count(self, read: int, b: _Batch) -> None:
        """Adds a written batch to the stats and logs its duplicates and conflicts (once per batch)."""
        s = self.stats
        s.read += read
        s.messages += len(b.keep)
        s.bytes += sum(len(v or b"") for _, _, v in b.keep)
        s.batches += 1
        s.duplicates += len(b.duplicates)
        s.key_conflicts += len(b.conflicts)
        s.bad_request_ids += b.bad
        if b.duplicates:
            _LOG.info("bridge %s: %d duplicate request(s) dropped: %s; so far %s", self.group,
                      len(b.duplicates), _where(b.duplicates), s.line())  # fmt: skip
        if b.conflicts:
            _LOG.warning("bridge %s: %d message(s) reuse an Idempotency-Key with another body (spooled, not "
                         "a retry): %s", self.group, len(b.conflicts), _where(b.conflicts))  # fmt: skip
        if b.bad:
            _LOG.warning("bridge %s: %d message(s) with an unreadable %s header spooled without dedup",
                         self.group, b.bad, REQUEST_HEADER)  # fmt: skip


# ------------------------------------------------------------------------------------------------------------
# the job's side: --input_topic kafka://... becomes a watched spool
# ------------------------------------------------------------------------------------------------------------


def cluster_id(consumer: Any) -> str | None:
    """The Kafka cluster id a kafka-python consumer learned from its last metadata answer (None: unknown)."""
    client = getattr(consumer, "_client", None)
    value = getattr(getattr(client, "cluster", None), "cluster_id", None)
    return value if isinstance(value, str) and value else None


def check_broker(source: KafkaTopic, timeout_s: float = 15.0) -> str | None:
    """The cluster id of ``source``'s broker (None when it does not say); :class:`KafkaSourceError` unless
    a broker answers within ``timeout_s``."""
    try:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
    except ImportError:
        raise KafkaSourceError(
            f"{source.url}: the Kafka client is not installed (pip install 'ldp-beam[kafka]')"
        ) from None
    quiet = logging.getLogger("kafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the failure is this function's one line, not the library's traceback
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=list(source.bootstrap), bootstrap_timeout_ms=int(timeout_s * 1000)
        )
        try:
            consumer.topics()  # a metadata request: it carries the cluster id
            return cluster_id(consumer)
        finally:
            consumer.close()
    except KafkaError as exc:
        raise KafkaSourceError(f"{source.url}: no Kafka broker answers at {','.join(source.bootstrap)} "
                               f"({type(exc).__name__})") from None  # fmt: skip
    finally:
        quiet.setLevel(level)


class BridgeProcess:
    """A :class:`Bridge` in a child process (``python -m transforms.kafka``) that stops with the job: on
    :meth:`stop`, at the job's exit, or when its parent dies."""

    def __init__(self, source: KafkaTopic, spool_dir: str, group: str) -> None:
        self.source = source
        self.spool_dir = spool_dir
        self.group = group
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> str:
        return os.path.join(self.spool_dir, "bridge.log")

    def start(self) -> BridgeProcess:
        os.makedirs(self.spool_dir, exist_ok=True)
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        argv = [sys.executable, "-m", "transforms.kafka", "--input_topic", self.source.url, "--spool",
                self.spool_dir, "--group", self.group, "--parent_pid", str(os.getpid())]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=root)  # fmt: skip
        atexit.register(self.stop)
        _LOG.info("Kafka bridge (pid %d): %s -> %s (group %s; log %s)", self.proc.pid, self.source.url,
                  self.spool_dir, self.group, self.log_path)  # fmt: skip
        return self

    def stats(self) -> dict[str, Any] | None:
        """The bridge's last published :class:`BridgeStats` with its topic, group and pid (None: none yet,
        or the file does not parse)."""
        path = Spool(self.spool_dir, self.source.topic).stats_path
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (the bridge finishes the batch it is writing), SIGKILL after ``timeout_s``."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.terminate()
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def open_kafka_source(ns: argparse.Namespace, streaming: bool, task_id: str) -> BridgeProcess | None:
    """``--input_topic kafka://...``: the job's bridge (not started: :meth:`BridgeProcess.start` once the
    job's other checks passed), with the job's flags pointed at its spool (``--input`` = the spool's glob,
    ``--require_done_marker``), so the job runs as a watched directory. None for any other source;
    :class:`KafkaSourceError` for a URL, flag combination, broker or spool it cannot use."""
    url = getattr(ns, "input_topic", None)
    if not is_kafka_url(url):
        return None
    source = parse_kafka_url(url)
    if not streaming:
        raise KafkaSourceError("--input_topic kafka://... needs --streaming")
    flags = ("input", "input_subscription", "timestamp_attribute")
    others = [f"--{f}" for f in flags if getattr(ns, f, None)]
    if others:
        raise KafkaSourceError(f"--input_topic kafka://... cannot be combined with {', '.join(others)}")
    cluster = check_broker(source)
    spool = source.spool_for(task_id)
    Spool(spool, source.topic).check_cluster(cluster, record=False)  # a spool of an earlier broker
    bridge = BridgeProcess(source, spool, source.group_for(task_id))
    ns.input = Spool(spool, source.topic).pattern
    ns.input_topic = None
    ns.require_done_marker = True
    return bridge


# ------------------------------------------------------------------------------------------------------------
# the producer side
# ------------------------------------------------------------------------------------------------------------


class KafkaPublisher:
    """Sends message bodies to a topic; :meth:`flush` returns once the broker acknowledged every one
    (``acks=all``), raising the first send error."""

    def __init__(self, url: str, *, max_request_bytes: int = 10 << 20) -> None:
        self.target = parse_kafka_url(url)
        from kafka import KafkaProducer

        self._producer = KafkaProducer(
            bootstrap_servers=list(self.target.bootstrap), acks="all", linger_ms=5, retries=5,
            max_request_size=max_request_bytes,
        )  # fmt: skip
        self._pending: list[Any] = []
        self.sent = 0

    def send(self, data: bytes, when_ms: int) -> None:
        """One message, stamped ``when_ms`` (its Kafka timestamp and an ``event_time`` header)."""
        header = [("event_time", str(int(when_ms)).encode())]
        self._pending.append(
            self._producer.send(self.target.topic, value=data, timestamp_ms=int(when_ms), headers=header)
        )
        self.sent += 1

    def flush(self, timeout_s: float = 60.0) -> None:
        self._producer.flush(timeout=timeout_s)
        pending, self._pending = self._pending, []
        for future in pending:
            future.get(timeout=timeout_s)

    def close(self) -> None:
        self._producer.close()

    def __enter__(self) -> KafkaPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.flush()
        self.close()


# ------------------------------------------------------------------------------------------------------------
# command line: a bridge alone
# ------------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m transforms.kafka",
        description="Copy a Kafka topic's messages into a spool directory (one file and .done marker per "
        "message), committing offsets after each batch is durable; stops on SIGTERM/SIGINT.",
    )
    p.add_argument("--input_topic", required=True,
                   help="kafka://HOST:PORT/TOPIC[?group=G&spool=DIR&dedup_window_s=S]")  # fmt: skip
    p.add_argument("--spool", help="spool directory (default: the URL's spool=, else the cache's)")
    p.add_argument("--group", help="consumer group (default: the URL's group=, else ldp-beam-bridge)")
    p.add_argument("--parent_pid", type=int, help="stop when this process is no longer the parent")
    p.add_argument("--poll_ms", type=int, default=POLL_MS, help="longest wait of one poll, ms")
    p.add_argument("--max_batch", type=int, default=MAX_BATCH, help="messages per durable batch")
    p.add_argument("--dedup_window_s", type=float, default=None,
                   help=f"seconds a spooled {REQUEST_HEADER} is remembered; a repeat within it is dropped "
                   "(default: the URL's dedup_window_s, else 7 days; at least the collector's "
                   "--idempotency_window_s)")  # fmt: skip
    return p


def main(argv: Iterable[str] | None = None) -> int:
    p = _parser()
    ns = p.parse_args(None if argv is None else list(argv))
    try:
        source = parse_kafka_url(ns.input_topic)
    except KafkaSourceError as exc:
        p.exit(2, f"error: --input_topic: {exc}\n")
    if ns.poll_ms < 1 or ns.max_batch < 1:
        p.exit(2, "error: --poll_ms and --max_batch must be >= 1\n")
    if ns.dedup_window_s is not None and not 0 < ns.dedup_window_s < float("inf"):
        p.exit(2, "error: --dedup_window_s must be a number of seconds > 0\n")
    if None not in (ns.dedup_window_s, source.dedup_window_s) and ns.dedup_window_s != source.dedup_window_s:
        p.exit(2, f"error: --dedup_window_s {ns.dedup_window_s} and the URL's dedup_window_s "
                  f"{source.dedup_window_s} differ: give one\n")  # fmt: skip
    window = ns.dedup_window_s or source.dedup_window_s or DEDUP_WINDOW_S
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def stop() -> bool:
        return bool(stopping) or (ns.parent_pid is not None and os.getppid() != ns.parent_pid)

    group = ns.group or source.group_for(None)
    spool = os.path.abspath(ns.spool) if ns.spool else source.spool_for(None)
    bridge = Bridge(source, spool, group, poll_ms=ns.poll_ms, max_batch=ns.max_batch,
                    dedup_window_s=window)  # fmt: skip
    _LOG.info("bridge %s -> %s (group %s)", source.url, spool, group)
    try:
        stats = bridge.run(stop)
    except KafkaSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"bridge stopped ({spool}): {stats.line()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
