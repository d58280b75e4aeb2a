"""A Kafka broker for the tests (``tools/kafka/broker.sh``), started and stopped by PID, and helpers that
read a topic or a spool back.

The ``kafka_broker`` fixture (module scope) starts one broker in a temporary run directory; a test module
imports it (``from kafka_helpers import kafka_broker``) and carries the ``kafka`` marker, which skips it
with the reason when :func:`kafka_missing` says the broker cannot run here, or fails it under
``LDP_REQUIRE_KAFKA=1`` (CI).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BROKER_SCRIPT = REPO / "tools" / "kafka" / "broker.sh"


def kafka_jars_dir() -> Path:
    version = os.environ.get("LDP_KAFKA_VERSION", "4.1.1")
    return REPO / ".cache" / "kafka" / f"kafka-{version}" / "lib"


def kafka_missing() -> str | None:
    """Why a broker cannot start here (None: it can)."""
    if shutil.which("java") is None:
        return "java not found on PATH (the Kafka broker is a JVM)"
    if not (kafka_jars_dir() / ".complete").is_file():
        return f"no Kafka jars in {kafka_jars_dir()}: run `bash tools/kafka/broker.sh fetch`"
    try:
        import kafka  # noqa: F401
    except ImportError:
        return "the kafka-python package is not installed (pip install -e '.[kafka]')"
    return None


@dataclass
class Broker:
    """One broker of ``tools/kafka/broker.sh`` in ``run_dir``."""

    run_dir: Path
    bootstrap: str = ""

    @property
    def pid(self) -> int:
        return int((self.run_dir / "broker.pid").read_text())

    def _script(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {**os.environ, "LDP_KAFKA_RUN_DIR": str(self.run_dir)}
        return subprocess.run(["bash", str(BROKER_SCRIPT), command], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip

    def start(self) -> Broker:
        done = self._script("start")
        if done.returncode != 0:
            raise RuntimeError(f"tools/kafka/broker.sh start failed: {done.stderr[-2000:]}")
        self.bootstrap = done.stdout.strip().splitlines()[-1]
        return self

    def stop(self) -> None:
        self._script("stop", timeout=120)

    def restart(self) -> Broker:
        """Starts the broker again on the same run directory, address and data (after a stop or a kill)."""
        done = self._script("restart")
        if done.returncode != 0:
            raise RuntimeError(f"tools/kafka/broker.sh restart failed: {done.stderr[-2000:]}")
        return self

    def url(self, topic: str, **query: str) -> str:
        tail = "&".join(f"{k}={v}" for k, v in query.items())
        return f"kafka://{self.bootstrap}/{topic}" + (f"?{tail}" if tail else "")


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = Broker(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker.start()
    finally:
        broker.stop()


def read_topic(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0
) -> list[tuple[int, int, bytes]]:
    """``(partition, offset, value)`` of the first ``expected`` messages of ``topic`` (all partitions),
    by a consumer of no group."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=[bootstrap], enable_auto_commit=False, group_id=None)
    try:
        parts = consumer.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for tp, recs in consumer.poll(timeout_ms=500).items():
                out += [(tp.partition, r.offset, r.value) for r in recs]
        return sorted(out)
    finally:
        consumer.close()


def spool_messages(spool: str | os.PathLike[str], topic: str) -> dict[tuple[int, int], str]:
    """``{(partition, offset): sha256 of the file}`` of every marked message file of ``topic`` in a
    spool; an unmarked file, a leftover ``.tmp`` or a name that parses twice fails the test."""
    out: dict[tuple[int, int], str] = {}
    for path in glob.glob(os.path.join(spool, f"{topic}-*.avro")):
        assert os.path.exists(path + ".done"), f"{path} has no .done marker"
        _, part, off = os.path.basename(path)[: -len(".avro")].rsplit("-", 2)
        key = (int(part), int(off))
        assert key not in out
        with open(path, "rb") as fh:
            out[key] = hashlib.sha256(fh.read()).hexdigest()
    assert not glob.glob(os.path.join(spool, "*.tmp")), "unfinished .tmp files left in the spool"
    return out


def bridge_until(url: str, spool: Path, group: str, read: int, timeout_s: float) -> Any:
    """Runs a :class:`transforms.kafka.Bridge` in this process until it has read ``read`` messages (or
    ``timeout_s`` passed); its :class:`~transforms.kafka.BridgeStats`."""
    import time

    from transforms.kafka import Bridge, parse_kafka_url

    bridge = Bridge(parse_kafka_url(url), str(spool), group, poll_ms=100)
    deadline = time.monotonic() + timeout_s
    return bridge.run(lambda: bridge.stats.read >= read or time.monotonic() > deadline)
