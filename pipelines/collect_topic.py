"""The collector's Kafka output (``ldp-beam collect --output_topic kafka://HOST:PORT/TOPIC``): each accepted
request becomes one message, an Avro object container of its reports (``schemas/report.avsc``, codec null),
the format a streaming job reads from a topic (docs/kafka.md).

:class:`TopicWriter` stands in for :class:`~pipelines.collector.RollingAvroWriter` behind
:class:`~pipelines.collector.Collector`: :meth:`TopicWriter.append` prepares the message,
:meth:`TopicWriter.commit` / :meth:`TopicWriter.commit_sync` send it and wait for the broker's
acknowledgement (``acks=all``, the idempotent producer) for at most ``timeout_s``; only then is the request
answered 200. A send that fails or times out (the broker down, the topic not writable) raises
:class:`~pipelines.collector.WriteError`, which the collector answers with 503 and counts in
``write_errors``. There are no files, so nothing is rolled or adopted; idempotency keys are remembered in
memory only (for ``--idempotency_window_s``, not across restarts).

A timed-out send may still reach the topic, and a retry (the same key and body) is then sent again, after
a 503 or after a restart. So the message of a request that carried an ``Idempotency-Key`` has an
``ldp-request`` header, the hex of the key's digest, ``:``, the hex of the body's digest (never the key
itself), by which the job's bridge (:mod:`transforms.kafka`) spools a retry once within its dedup window:
end to end, a keyed request is counted once if its retries come within that window; a request without a
key has no header and is at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import fastavro

import schemas
from pipelines.collector import IdempotencyKeys, WriteError, _avro_long
from transforms.kafka import REQUEST_HEADER, KafkaTopic, parse_kafka_url
from wire.records import now_ms

__all__ = ["TopicWriter"]

_LOG = logging.getLogger(__name__)


class TopicTicket:
    """One request's message, sent by :meth:`TopicWriter.commit` (acknowledged when ``done``)."""

    def __init__(self, message: bytes, count: int, request: bytes | None = None) -> None:
        self.message = message
        self.count = count
        self.request = request  # the ldp-request header's value (None: the request had no key)
        self.done = False


class TopicWriter:
    """Report blocks -> one Kafka message each, acknowledged by the broker before the request is."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, keys: IdempotencyKeys | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError(f"the Kafka timeout must be > 0 s, got {timeout_s}")
        self.target: KafkaTopic = parse_kafka_url(url)
        self.timeout_s = float(timeout_s)
        self.keys = keys
        self.schema = schemas.report_schema()
        self._sync = os.urandom(16)
        buf = io.BytesIO()
        fastavro.write.Writer(buf, self.schema, codec="null", sync_marker=self._sync)
        self._header = buf.getvalue()
        self._lock = threading.Lock()
        self._api_version: Any = None
        self._producer: Any = self._make_producer()
        self._api_version = self._producer.config["api_version"]  # a later producer starts without probing
        self._broken = False  # the last send failed: the next one starts a new producer
        self.written_reports = 0  # acknowledged by the broker
        self.written_messages = 0
        self.written_files: list[str] = []  # no files: the collector's file counts stay 0
        self.open_reports = 0
        self.sync_seconds: list[float] = []  # send-to-acknowledgement times not yet read by the metrics

    def _make_producer(self) -> Any:
        from kafka import KafkaProducer

        ms = int(self.timeout_s * 1000)
        return KafkaProducer(
            bootstrap_servers=list(self.target.bootstrap), acks="all", enable_idempotence=True, linger_ms=2,
            delivery_timeout_ms=ms, request_timeout_ms=max(1000, ms - 10), max_block_ms=ms,
            reconnect_backoff_max_ms=1000, max_request_size=10 << 20, api_version=self._api_version,
        )  # fmt: skip

    def encode_block(self, records: Sequence[dict[str, Any]]) -> bytes:
        """The Avro binary encoding of ``records`` (one block's data); ``ValueError`` when one does not
        fit the report schema."""
        buf = io.BytesIO()
        for rec in records:
            fastavro.schemaless_writer(buf, self.schema, rec)
        return buf.getvalue()

    def append(self, records: Sequence[dict[str, Any]] | None = None, data: bytes | None = None,
               count: int | None = None, sender: bytes | None = None, key: bytes | None = None,
               body: bytes | None = None) -> TopicTicket | None:  # fmt: skip
        """The message of one block (``records``, or their encoding ``data`` of ``count`` records): the
        container header, then the block; with ``key`` (the Idempotency-Key's digest) and ``body`` (the
        request body's), its request id ``KEYHEX:BODYHEX``. Nothing is sent yet (see :meth:`commit`)."""
        if data is None:
            if not records:
                return None
            data, count = self.encode_block(records), len(records)
        assert count is not None and count > 0
        block = _avro_long(count) + _avro_long(len(data)) + data + self._sync
        request = None if key is None or body is None else f"{key.hex()}:{body.hex()}".encode("ascii")
        return TopicTicket(self._header + block, count, request)

    def _send(self, t: TopicTicket) -> None:
        """Sends ``t`` and waits for the broker's acknowledgement; :class:`WriteError` when it does not
        come within the timeout."""
        from kafka.errors import KafkaError

        t0 = time.perf_counter()
        try:
            stamp = now_ms()
            header = [("event_time", str(stamp).encode())]
            if t.request is not None:
                header.append((REQUEST_HEADER, t.request))
            future = self._current().send(
                self.target.topic, value=t.message, timestamp_ms=stamp, headers=header
            )
            future.get(timeout=self.timeout_s)
        except (KafkaError, OSError) as exc:
            self._broken = True
            raise WriteError(f"Kafka did not acknowledge a message to {self.target.url}: "
                             f"{type(exc).__name__}", True) from None  # fmt: skip
        self.sync_seconds.append(time.perf_counter() - t0)
        self.written_reports += t.count
        self.written_messages += 1
        t.done = True

    def _current(self) -> Any:
        """The producer; a new one after a failed send (a producer whose batches expired while the broker
        was away does not recover by itself)."""
        with self._lock:
            if self._broken:
                old, self._producer = self._producer, None
                with contextlib.suppress(Exception):
                    old.close(timeout=0)
                self._producer = self._make_producer()
                self._broken = False
                _LOG.info("a new Kafka producer for %s", self.target.url)
            return self._producer

    def commit_sync(self, t: TopicTicket) -> None:
        """Sends ``t`` and returns once the broker acknowledged it."""
        if not t.done:
            self._send(t)

    async def commit(self, t: TopicTicket) -> None:
        """:meth:`commit_sync` in a worker thread (requests in flight together share the producer's
        batches)."""
        if not t.done:
            await asyncio.get_running_loop().run_in_executor(None, self._send, t)

    # ---- the file writer's interface: nothing to roll, adopt or publish ------------------------------------
    def full(self) -> bool:
        return False

    def due(self) -> bool:
        return False

    def roll(self) -> None:
        return None

    async def roll_async(self) -> None:
        return None

    def close(self) -> None:
        """Flushes whatever is in flight (already answered) and closes the producer."""
        if self._producer is None:
            return
        try:
            self._producer.flush(timeout=self.timeout_s)
        finally:
            self._producer.close(timeout=self.timeout_s)
