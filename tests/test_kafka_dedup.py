"""A request retried after a Kafka timeout is spooled once: the collector's ``ldp-request`` header
(:class:`pipelines.collect_topic.TopicWriter`, a fake producer) and the bridge's dedup on it
(:class:`transforms.kafka.Bridge`, the fake consumer of ``tests/test_kafka.py``): repeats across and within
batches, another body, no header, a kill between the journal and the rename, a repeat as a partition's
last message, the window and a torn journal."""

from __future__ import annotations

import logging
import time

import pytest

from pipelines.collect_topic import TopicWriter
from pipelines.collector import IdempotencyKeys
from tests.test_kafka import FakeConsumer, _run_bridge
from transforms import kafka
from transforms.kafka import DEDUP_WINDOW_S, Spool, request_id

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier: in-process, no broker

KEY = IdempotencyKeys.digest("retry-key-0001")
BODY = IdempotencyKeys.digest(b'[{"value": 3}]')
RID = f"{KEY.hex()}:{BODY.hex()}"
OTHER_BODY = KEY.hex() + ":" + IdempotencyKeys.digest(b'[{"value": 4}]').hex()
OTHER_KEY = f"{IdempotencyKeys.digest('retry-key-0002').hex()}:{BODY.hex()}"


def keyed(value: bytes, rid: str = RID) -> tuple[bytes, list[tuple[str, bytes]]]:
    return value, [("event_time", b"1"), ("ldp-request", rid.encode())]


def _spooled(tmp_path) -> dict[tuple[int, int], bytes]:
    return {k: p.read_bytes() for k, p in Spool(tmp_path, "t").files().items()}


def _journal(tmp_path) -> list[list[str]]:
    """The journal's request lines (not its ``TIME done`` records)."""
    lines = (tmp_path / ".requests-t").read_text().splitlines()
    return [line.split() for line in lines if not line.endswith(" done")]


def test_a_repeat_in_a_later_batch_is_dropped_counted_and_committed_past(tmp_path, caplog):
    data = {0: [keyed(b"a"), b"plain", keyed(b"a")]}
    consumer = FakeConsumer(Spool(tmp_path, "t"), data)
    with caplog.at_level(logging.INFO, logger="transforms.kafka"):
        bridge = _run_bridge(tmp_path, consumer, polls=3)  # batches of 2: [a, plain], [a again]
    s = bridge.stats
    assert (s.read, s.messages, s.duplicates, s.key_conflicts) == (3, 2, 1, 0)
    assert s.read == s.messages + s.duplicates
    assert _spooled(tmp_path) == {(0, 0): b"a", (0, 1): b"plain"}
    assert consumer.commits == [{0: 2}, {0: 3}]
    assert [line[1:] for line in _journal(tmp_path)] == [["0", "0", RID]]  # the unkeyed one has no line
    logged = [r for r in caplog.records if "duplicate" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.INFO
    assert "0:2 (first 0:0)" in logged[0].getMessage()
    assert "read 3 messages: 2 spooled" in logged[0].getMessage()


def test_a_repeat_within_one_batch_and_across_partitions_counts(tmp_path, caplog):
    data = {0: [keyed(b"a"), keyed(b"a"), keyed(b"b", OTHER_KEY)], 1: [keyed(b"a")]}
    consumer = FakeConsumer(Spool(tmp_path, "t"), data)
    with caplog.at_level(logging.INFO, logger="transforms.kafka"):
        bridge = _run_bridge(tmp_path, consumer, polls=1, max_batch=10)
    assert (bridge.stats.read, bridge.stats.messages, bridge.stats.duplicates) == (4, 2, 2)
    assert _spooled(tmp_path) == {(0, 0): b"a", (0, 2): b"b"}
    assert consumer.commits == [{0: 3, 1: 1}]
    (line,) = [r.getMessage() for r in caplog.records if "duplicate" in r.getMessage()]  # once per batch
    assert "2 duplicate request(s)" in line and "0:1 (first 0:0)" in line and "1:0 (first 0:0)" in line


def test_the_same_key_with_another_body_is_kept_with_a_warning(tmp_path, caplog):
    data = {0: [keyed(b"a"), keyed(b"c", OTHER_BODY), keyed(b"c", OTHER_BODY)]}
    with caplog.at_level(logging.INFO, logger="transforms.kafka"):
        bridge = _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data), polls=2)
    assert (bridge.stats.messages, bridge.stats.key_conflicts, bridge.stats.duplicates) == (2, 1, 1)
    assert _spooled(tmp_path) == {(0, 0): b"a", (0, 1): b"c"}
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "another body" in warned[0].getMessage()
    assert "0:1 (first 0:0)" in warned[0].getMessage()


def test_messages_without_a_usable_header_are_spooled_as_before(tmp_path):
    data = {0: [b"x", b"x", (b"y", [("ldp-request", b"not an id\n1 0 0 ab:cd")]), (b"y", None)]}
    bridge = _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data), polls=3)
    assert (bridge.stats.messages, bridge.stats.duplicates, bridge.stats.bad_request_ids) == (4, 0, 1)
    assert len(_spooled(tmp_path)) == 4
    assert not (tmp_path / ".requests-t").exists()
    assert request_id([("ldp-request", RID.upper().encode())]) is False  # digests are lower-case hex
    assert request_id([("other", b"x")]) is None and request_id(None) is None


def test_a_kill_between_the_journal_and_the_rename_spools_the_message_once_on_restart(tmp_path, monkeypatch):
    data = {0: [keyed(b"a"), b"b"]}
    append = Spool._append_journal

    def append_then_die(self, requests, now):
        append(self, requests, now)
        raise SystemExit("killed after the journal's fsync, before the rename")

    monkeypatch.setattr(Spool, "_append_journal", append_then_die)
    with pytest.raises(SystemExit):
        _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data), polls=1)
    assert _spooled(tmp_path) == {} and len(_journal(tmp_path)) == 1  # a journal line without its file
    monkeypatch.undo()
    consumer = FakeConsumer(Spool(tmp_path, "t"), data)
    bridge = _run_bridge(tmp_path, consumer, polls=2)
    assert (bridge.stats.messages, bridge.stats.duplicates) == (2, 0)
    assert _spooled(tmp_path) == {(0, 0): b"a", (0, 1): b"b"}
    assert [line[1:] for line in _journal(tmp_path)] == [["0", "0", RID]]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("commit_lost", [False, True], ids=["committed", "commit-lost"])
def test_a_repeat_as_the_last_message_then_a_kill_resumes_without_loop_or_skip(tmp_path, commit_lost):
    data = {0: [keyed(b"a"), keyed(b"a")]}  # the repeat is the partition's last message
    first = FakeConsumer(Spool(tmp_path, "t"), data)
    _run_bridge(tmp_path, first, polls=2)
    assert first.committed_offsets == {0: 2} and _spooled(tmp_path) == {(0, 0): b"a"}
    data[0].append(b"next")  # the producer goes on while the bridge is down (killed: no cleanup)
    second = FakeConsumer(Spool(tmp_path, "t"), data, committed={} if commit_lost else {0: 2})
    bridge = _run_bridge(tmp_path, second, polls=3)
    # with the commit: starts after the repeat; without it: reads the repeat once more and drops it again
    assert (bridge.stats.read, bridge.stats.duplicates) == ((2, 1) if commit_lost else (1, 0))
    assert bridge.stats.messages == 1 and second.committed_offsets == {0: 3}
    assert _spooled(tmp_path) == {(0, 0): b"a", (0, 2): b"next"}
    third = FakeConsumer(Spool(tmp_path, "t"), data, committed=second.committed_offsets)
    assert _run_bridge(tmp_path, third, polls=2).stats.read == 0 and third.pos == {0: 3}


def test_the_window_forgets_old_requests_so_a_very_late_repeat_is_spooled(tmp_path):
    spool = Spool(tmp_path, "t")
    spool.write([(0, 0, b"a")], [(0, 0, RID)])
    old = time.time() - DEDUP_WINDOW_S - 60
    (tmp_path / ".requests-t").write_text(f"{old:.3f} 0 0 {RID}\n")
    data = {0: [keyed(b"a"), keyed(b"a")]}
    bridge = _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data, committed={0: 1}), polls=2)
    assert (bridge.stats.messages, bridge.stats.duplicates) == (1, 0)  # 8 days late: spooled again
    assert sorted(_spooled(tmp_path)) == [(0, 0), (0, 1)]
    assert [line[1:] for line in _journal(tmp_path)] == [["0", "1", RID]]  # the old line compacted away
    fresh = Spool(tmp_path, "t", dedup_window_s=60)
    fresh.recover()
    assert fresh.seen(RID, time.time()) == (0, 1)
    assert fresh.seen(RID, time.time() + 61) is None  # the window runs while the bridge does too
    with pytest.raises(ValueError, match="dedup window"):
        Spool(tmp_path, "t", dedup_window_s=0)


def test_a_running_bridge_forgets_requests_older_than_the_window(tmp_path, monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(kafka.time, "time", lambda: clock[0])
    spool = Spool(tmp_path, "t", dedup_window_s=100)
    spool.recover()
    spool.write([(0, 0, b"a")], [(0, 0, RID)])
    clock[0] += 60  # half the window later: the journal is compacted, the first id still in it
    spool.write([(0, 1, b"b")], [(0, 1, OTHER_KEY)])
    assert set(spool.requests) == {RID, OTHER_KEY} and len(_journal(tmp_path)) == 2
    clock[0] += 60  # RID is 120 s old: forgotten in memory and in the journal at the next write
    spool.write([(0, 2, b"c")], [(0, 2, OTHER_BODY)])
    assert set(spool.requests) == {OTHER_KEY, OTHER_BODY}
    assert [line[3] for line in _journal(tmp_path)] == [OTHER_KEY, OTHER_BODY]
    assert spool.seen(RID, clock[0]) is None and spool.other_body(RID, clock[0]) == (0, 2)


def test_a_torn_journal_line_is_ignored_and_pruned_files_keep_their_lines(tmp_path):
    spool = Spool(tmp_path, "t")
    spool.write([(0, 0, b"a"), (0, 1, b"b")], [(0, 0, RID), (0, 1, OTHER_KEY)])
    (tmp_path / spool.name(0, 0)).unlink()  # pruned (below the partition's last file): still remembered
    with open(tmp_path / ".requests-t", "a") as fh:
        fh.write(f"{time.time():.3f} 0 7 {RID[:20]}")  # torn by a crash mid-append
    again = Spool(tmp_path, "t")
    assert again.recover() == {0: 2}
    assert set(again.requests) == {RID, OTHER_KEY}
    assert [line[1:3] for line in _journal(tmp_path)] == [["0", "0"], ["0", "1"]]  # compacted, torn line gone


def test_pruning_a_partitions_files_keeps_their_ids(tmp_path):
    """Every file of a partition deleted (its windows final, the job stopped): a later repeat of one of
    its requests is still dropped; only the last batch's lines can be a kill's leftovers."""
    data = {0: [keyed(b"a")], 1: [keyed(b"o", OTHER_KEY)]}
    _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data), polls=1)
    data[1].append(b"next")
    _run_bridge(tmp_path, FakeConsumer(Spool(tmp_path, "t"), data, committed={0: 1, 1: 1}), polls=2)
    for path in tmp_path.glob("t-00000-*"):  # partition 0 pruned whole
        path.unlink()
    data[0].append(keyed(b"a"))  # the retry, after the pruning
    consumer = FakeConsumer(Spool(tmp_path, "t"), data, committed={0: 1, 1: 2})
    bridge = _run_bridge(tmp_path, consumer, polls=2)
    assert (bridge.stats.read, bridge.stats.messages, bridge.stats.duplicates) == (1, 0, 1)
    assert RID in {line[3] for line in _journal(tmp_path)}


def test_a_batch_renamed_but_not_recorded_finished_keeps_its_ids(tmp_path):
    """A kill after the renames but before the ``TIME done`` record: the batch's files exist, so its
    lines stay; only missing files of an unfinished batch are taken for a kill's leftovers."""
    Spool(tmp_path, "t").write([(0, 0, b"a"), (0, 1, b"b")], [(0, 0, RID), (0, 1, OTHER_KEY)])
    journal = tmp_path / ".requests-t"
    kept = [line for line in journal.read_text().splitlines() if not line.endswith(" done")]
    journal.write_text("".join(line + "\n" for line in kept))
    again = Spool(tmp_path, "t")
    assert again.recover() == {0: 2} and set(again.requests) == {RID, OTHER_KEY}
    assert journal.read_text().splitlines()[-1].endswith(" done")  # rewritten: every batch finished


def test_the_bridge_command_refuses_a_bad_window(capsys):
    for value in ("0", "-5", "nan", "inf"):
        with pytest.raises(SystemExit) as info:
            kafka.main(["--input_topic", "kafka://h:1/t", "--dedup_window_s", value])
        assert info.value.code == 2
        assert "--dedup_window_s must be" in capsys.readouterr().err


def test_a_jobs_bridge_takes_its_window_from_the_url(capsys):
    """``dedup_window_s=`` in the URL reaches the bridge a job starts (its child gets the URL); a bad one
    is refused in one line, and a flag that disagrees with it too."""
    assert kafka.parse_kafka_url("kafka://h:1/t?dedup_window_s=3600").dedup_window_s == 3600.0
    assert kafka.parse_kafka_url("kafka://h:1/t").dedup_window_s is None
    for value in ("0", "-1", "abc", "inf", "nan"):
        with pytest.raises(kafka.KafkaSourceError, match="dedup_window_s .* must be a number of seconds > 0"):
            kafka.parse_kafka_url(f"kafka://h:1/t?dedup_window_s={value}")
    with pytest.raises(SystemExit) as info:
        kafka.main(["--input_topic", "kafka://h:1/t?dedup_window_s=60", "--dedup_window_s", "120"])
    assert info.value.code == 2
    assert "differ: give one" in capsys.readouterr().err


class FakeProducer:
    config = {"api_version": (2, 8)}

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, topic, **kw):
        self.sent.append(kw)
        return self

    def get(self, timeout):
        return None


def test_the_topic_writer_names_a_keyed_request_by_its_digests(monkeypatch):
    producer = FakeProducer()
    monkeypatch.setattr(TopicWriter, "_make_producer", lambda self: producer)
    writer = TopicWriter("kafka://127.0.0.1:1/t")
    for key in (KEY, None):
        t = writer.append(data=b"\x02", count=1, key=key, body=BODY)
        writer.commit_sync(t)
    keyed_headers, plain_headers = (dict(kw["headers"]) for kw in producer.sent)
    assert keyed_headers["ldp-request"] == RID.encode("ascii")
    assert request_id(producer.sent[0]["headers"]) == RID  # what the bridge reads back
    assert b"retry-key-0001" not in b"".join(keyed_headers.values())  # never the key itself
    assert "ldp-request" not in plain_headers and "event_time" in plain_headers
    assert writer.written_messages == 2
