"""The Kafka source's pieces without a broker: the URL, the spool's durable writes and recovery, the
bridge's order of write and commit and its resume position (a fake consumer), and the job's refusals."""

from __future__ import annotations

import argparse
from collections import namedtuple
from pathlib import Path

import pytest

from transforms.kafka import (
    Bridge,
    KafkaSourceError,
    KafkaTopic,
    Spool,
    is_kafka_url,
    open_kafka_source,
    parse_kafka_url,
)

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier: in-process, no broker

Record = namedtuple("Record", "offset value headers", defaults=(None,))


def test_urls_parse_with_their_options():
    t = parse_kafka_url("kafka://127.0.0.1:9092,broker-2.example:9093/ldp.reports_1?group=g1&spool=/tmp/s")
    assert t.bootstrap == ("127.0.0.1:9092", "broker-2.example:9093")
    assert (t.topic, t.group, t.spool) == ("ldp.reports_1", "g1", "/tmp/s")
    assert t.group_for("task") == "g1" and t.spool_for("task") == "/tmp/s"
    plain = parse_kafka_url("kafka://[::1]:9092/t")
    assert plain.group_for("my task/1") == "ldp-beam-my_task_1"
    assert is_kafka_url("kafka://h:1/t")
    assert not is_kafka_url("projects/p/topics/t") and not is_kafka_url(None)


def test_the_default_spool_is_per_broker_topic_and_group(monkeypatch, tmp_path):
    monkeypatch.setenv("LDP_KAFKA_SPOOL_ROOT", str(tmp_path))
    t = parse_kafka_url("kafka://h:9092/reports")
    assert t.spool_for("task-1") == str(tmp_path / "h-9092" / "reports" / "ldp-beam-task-1")


@pytest.mark.parametrize(
    ("url", "pattern"),
    [
        ("projects/p/topics/t", "not a Kafka URL"),
        ("kafka:///t", "names no broker"),
        ("kafka://host/t", "is not HOST:PORT"),
        ("kafka://host:0/t", "is not HOST:PORT"),
        ("kafka://host:70000/t", "is not HOST:PORT"),
        ("kafka://h:1/", "is not a Kafka topic name"),
        ("kafka://h:1/a/b", "is not a Kafka topic name"),
        ("kafka://h:1/..", "is not a Kafka topic name"),
        ("kafka://h:1/t?colour=red", "unknown option"),
        ("kafka://h:1/t?group=", "give group= once"),
        ("kafka://h:1/t?group=a&group=b", "give group= once"),
        ("kafka://h:1/t?group=a%20b", "must be 1 to 200"),
        ("kafka://h:1/t#x", "no #fragment"),
    ],
)
def test_bad_urls_are_one_line_errors(url, pattern):
    with pytest.raises(KafkaSourceError, match=pattern) as info:
        parse_kafka_url(url)
    assert "\n" not in str(info.value)


def test_a_spool_write_is_complete_and_marked(tmp_path):
    spool = Spool(tmp_path, "t")
    assert spool.recover() == {}
    spool.write([(0, 7, b"abc"), (2, 0, None)])
    files = spool.files()
    assert sorted(files) == [(0, 7), (2, 0)]
    assert files[(0, 7)].read_bytes() == b"abc" and files[(2, 0)].read_bytes() == b""
    assert all(Path(f"{p}.done").exists() for p in files.values())
    assert spool.pattern == str(tmp_path / "t-*.avro")
    assert not list(tmp_path.glob("*.tmp"))


def test_recovery_drops_unfinished_files_and_marks_renamed_ones(tmp_path):
    spool = Spool(tmp_path, "t")
    spool.write([(0, 0, b"a"), (0, 1, b"b")])
    (tmp_path / (spool.name(0, 2) + ".tmp")).write_bytes(b"half")  # killed before its rename
    (tmp_path / spool.name(0, 3)).write_bytes(b"d")  # killed after its rename, before its marker
    (tmp_path / (spool.name(1, 9) + ".tmp")).write_bytes(b"x")
    (tmp_path / "other-00000-00000000000000000005.avro").write_bytes(b"o")  # another topic: untouched
    assert spool.recover() == {0: 4}
    assert not list(tmp_path.glob("t-*.tmp"))
    assert (tmp_path / (spool.name(0, 3) + ".done")).exists()
    assert not (tmp_path / "other-00000-00000000000000000005.avro.done").exists()


def test_a_spool_belongs_to_one_kafka_cluster(tmp_path):
    spool = Spool(tmp_path, "t")
    spool.check_cluster(None)  # a broker that does not say: nothing recorded, nothing refused
    spool.check_cluster("c0", record=False)  # the job's check before its bridge starts: no record
    assert not (tmp_path / ".cluster-t").exists()
    spool.check_cluster("cluster-a")
    spool.check_cluster("cluster-a")
    Spool(tmp_path, "other").check_cluster("cluster-b")  # another topic's record
    with pytest.raises(KafkaSourceError, match="cluster 'cluster-a', but the broker is cluster 'c2'"):
        spool.check_cluster("c2")


class FakeConsumer:
    """Partitions of records (a value, or ``(value, headers)``), a committed offset per partition; each
    commit checks that the file of every committed offset is already in the spool (with its marker), or,
    for a message the bridge dropped as a repeat, that its ``ldp-request`` is in the spool's journal."""

    def __init__(self, spool: Spool, data: dict[int, list], committed: dict[int, int] | None = None):
        self.spool = spool
        self.data = data
        self.committed_offsets = dict(committed or {})
        self.pos: dict[int, int] = {}
        self.commits: list[dict[int, int]] = []
        self.closed = False

    def partitions_for_topic(self, topic):
        return set(self.data)

    def assign(self, tps):
        self.tps = list(tps)

    def committed(self, tp):
        return self.committed_offsets.get(tp.partition)

    def seek(self, tp, offset):
        self.pos[tp.partition] = offset

    def seek_to_beginning(self, *tps):
        for tp in tps:
            self.pos[tp.partition] = 0

    def poll(self, timeout_ms, max_records):
        out = {}
        for tp in self.tps:
            start = self.pos[tp.partition]
            recs = [Record(o, *(v if isinstance(v, tuple) else (v,)))
                    for o, v in enumerate(self.data[tp.partition]) if o >= start][:max_records]  # fmt: skip
            if recs:
                out[tp] = recs
                self.pos[tp.partition] = recs[-1].offset + 1
        return out

    def commit(self, offsets):
        files = self.spool.files()
        journal = self.spool.journal.read_text() if self.spool.journal.exists() else ""
        for tp, om in offsets.items():
            for off in range(om.offset):
                if off >= self.committed_offsets.get(tp.partition, 0):
                    path = files.get((tp.partition, off))
                    if path is None:  # dropped as a repeat: the first copy is journaled
                        value = self.data[tp.partition][off]
                        rid = dict(value[1])["ldp-request"].decode()
                        assert f" {rid}\n" in journal
                        continue
                    assert Path(f"{path}.done").exists()
            self.committed_offsets[tp.partition] = om.offset
        self.commits.append({tp.partition: om.offset for tp, om in offsets.items()})

    def close(self, autocommit=True):
        self.closed = True


def _run_bridge(tmp_path, consumer, polls: int, **options) -> Bridge:
    topic = KafkaTopic("kafka://h:1/t", ("h:1",), "t")
    options.setdefault("max_batch", 2)
    bridge = Bridge(topic, str(tmp_path), "g", consumer_factory=lambda **kw: consumer, **options)
    count = [0]

    def stop() -> bool:
        count[0] += 1
        return count[0] > polls

    bridge.run(stop)
    return bridge


def test_the_bridge_commits_only_written_messages_and_resumes_past_its_files(tmp_path):
    data = {0: [b"a0", b"a1", b"a2"], 1: [b"b0"]}
    first = FakeConsumer(Spool(tmp_path, "t"), data)
    bridge = _run_bridge(tmp_path, first, polls=1)  # one batch of at most 2 per partition
    assert bridge.stats.messages == 3 and first.commits == [{0: 2, 1: 1}] and first.closed
    # killed after writing a2's file but before committing: the restart resumes past the file, not at
    # the committed offset, so a2 is neither lost nor written twice
    Spool(tmp_path, "t").write([(0, 2, b"a2")])
    second = FakeConsumer(Spool(tmp_path, "t"), data, committed={0: 2, 1: 1})
    bridge = _run_bridge(tmp_path, second, polls=3)
    assert bridge.stats.messages == 0 and second.pos == {0: 3, 1: 1}
    files = Spool(tmp_path, "t").files()
    assert {k: p.read_bytes() for k, p in files.items()} == {(0, 0): b"a0", (0, 1): b"a1", (0, 2): b"a2",
                                                           (1, 0): b"b0"}  # fmt: skip


def test_the_bridge_publishes_its_counts_in_the_spool(tmp_path):
    """``bridge-stats-TOPIC.json``: what the job's summary and an operator read (read = spooled +
    duplicates), replaced whole after every batch; not a message file of the watched glob."""
    import fnmatch
    import json

    from transforms.kafka import BridgeProcess, BridgeStats

    data = {0: [b"a0", b"a1", b"a2"], 1: [b"b0"]}
    bridge = _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data), polls=3)
    doc = json.loads((tmp_path / "bridge-stats-t.json").read_text())
    assert (doc["topic"], doc["group"], doc["read"], doc["messages"]) == ("t", "g", 4, 4)
    assert doc["duplicates"] == 0
    assert doc["batches"] == bridge.stats.batches == 2 and doc["bytes"] == 8
    assert BridgeStats.from_doc(doc) == bridge.stats
    spool = Spool(tmp_path, "t")
    assert not fnmatch.fnmatch(str(spool.stats_path), spool.pattern)  # not a message file the job reads
    proc = BridgeProcess(KafkaTopic("kafka://h:1/t", ("h:1",), "t"), str(tmp_path), "g")
    assert proc.stats() == doc
    (tmp_path / "bridge-stats-t.json").write_text("{torn")
    assert proc.stats() is None


def test_a_committed_offset_ahead_of_the_spool_is_where_reading_starts(tmp_path):
    data = {0: [b"a0", b"a1", b"a2"]}
    consumer = FakeConsumer(Spool(tmp_path, "t"), data, committed={0: 2})
    _run_bridge(tmp_path, consumer, polls=2)
    assert sorted(Spool(tmp_path, "t").files()) == [(0, 2)]


def _ns(**kw) -> argparse.Namespace:
    base = dict(input=None, input_subscription=None, input_topic=None, timestamp_attribute=None,
                require_done_marker=False)  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_the_job_refuses_kafka_without_streaming_or_with_another_source():
    assert open_kafka_source(_ns(input_topic="projects/p/topics/t"), True, "t") is None
    with pytest.raises(KafkaSourceError, match="needs --streaming"):
        open_kafka_source(_ns(input_topic="kafka://h:1/t"), False, "t")
    with pytest.raises(KafkaSourceError, match="cannot be combined with --input"):
        open_kafka_source(_ns(input_topic="kafka://h:1/t", input="x/*.avro"), True, "t")
    with pytest.raises(KafkaSourceError, match="is not HOST:PORT"):
        open_kafka_source(_ns(input_topic="kafka://h/t"), True, "t")
