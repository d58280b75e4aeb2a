"""Release thresholds counted in distinct senders: the collector lists each file's authenticated senders as
keyed digests (``ldp.collector.senders``), the shuffler unions them over a bucket's input files and
withholds a bucket with fewer than ``min_reports`` distinct senders; the digests never reach a batch.

One shuffler run over files written by the collector's own writer (``RollingAvroWriter`` with senders):

* bucket 0: one sender fills it through 12 requests (600 reports): withheld, ``few_senders``;
* bucket 1: 150 senders, one request each: published;
* bucket 2: the same 60 senders post into two files (per-file counts 60 + 60 would pass 100): withheld;
* bucket 3: files without the list (a collector without authentication): ``min_reports`` counts reports.
"""

from __future__ import annotations

import json
import os
import stat

import fastavro
import numpy as np
import pytest

from ldp.shuffle.provenance import new_key_file
from ldp.task import parse_task
from pipelines import shuffle
from pipelines.collector import SENDERS_KEY, SENDERS_LIST_KEY, SENDERS_SECRET, RollingAvroWriter
from wire.records import reports_to_records

pytestmark = [pytest.mark.integration]  # a whole shuffler run: seconds

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PRECISION_MS = 600_000
MIN_REPORTS = 100
ANONYMITY = {"shuffled": True, "time_precision_s": PRECISION_MS // 1000, "min_reports": MIN_REPORTS}
TASK = {"task_id": "senders", "mechanism": "grr", "epsilon": 1.0, "domain_size": 8, "anonymity": ANONYMITY}


def _post(writer: RollingAvroWriter, rng: np.random.Generator, bucket: int, n: int, sender: bytes | None):
    task = parse_task(TASK)
    reps = task.make_oracle().encode(rng.integers(0, 8, n), rng=rng)
    recs = reports_to_records("senders", reps, np.full(n, T0 + bucket * PRECISION_MS))
    writer.commit_sync(writer.append(recs, sender=sender))


def _meta(path) -> dict[str, str]:
    with open(path, "rb") as fh:
        return dict(fastavro.reader(fh).metadata)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("senders")
    (base / "task.json").write_text(json.dumps(TASK))
    rng = np.random.default_rng(np.random.SeedSequence(2026_12_08_3))
    inp = base / "in"
    w = RollingAvroWriter(inp, permute=True, senders=True)
    one = b"sender-one-token"
    for _ in range(12):  # bucket 0: one sender, many requests
        _post(w, rng, 0, 50, one)
    w.roll()
    for k in range(150):  # bucket 1: many senders
        _post(w, rng, 1, 2, b"many-%03d" % k)
    w.roll()
    for _ in range(2):  # bucket 2: 60 senders in each of two files, the same 60
        for k in range(60):
            _post(w, rng, 2, 2, b"twice-%03d" % k)
        w.roll()
    w.close()
    plain = base / "plain"  # bucket 3: a collector without authentication
    w = RollingAvroWriter(plain, permute=True, senders=False)
    for _ in range(3):
        _post(w, rng, 3, 50, None)
    w.roll()
    w.close()
    for f in plain.glob("collect-*.avro"):
        os.link(f, inp / ("plain-" + f.name))
    key = base / "shuffle.key"
    new_key_file(str(key))
    out = base / "out"
    summary = shuffle.run(["--task", str(base / "task.json"), "--input", str(inp / "*.avro"),
                           "--output", str(out), "--shuffle_key", str(key)])  # fmt: skip
    return base, summary


def test_the_collector_lists_keyed_digests_of_its_senders(run):
    base, _ = run
    secret = base / "in" / SENDERS_SECRET
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600 and len(secret.read_bytes()) == 32
    files = sorted((base / "in").glob("collect-*.avro"))
    assert len(files) == 4
    for f in files:
        meta = _meta(f)
        listing = meta[SENDERS_LIST_KEY]
        digests = [listing[i : i + 16] for i in range(0, len(listing), 16)]
        assert digests == sorted(set(digests)) and len(digests) == int(meta[SENDERS_KEY])
        raw = f.read_bytes()
        assert b"sender-one" not in raw and b"many-0" not in raw and b"twice-0" not in raw  # no sender id
    assert sorted(int(_meta(f)[SENDERS_KEY]) for f in files) == [1, 60, 60, 150]
    for f in (base / "plain").glob("collect-*.avro"):
        assert SENDERS_LIST_KEY not in _meta(f)


def test_one_sender_or_the_same_senders_in_two_files_are_withheld_many_senders_pass(run):
    base, summary = run
    c = summary["counts"]
    assert summary["balanced"] is True
    assert c["withheld_few_senders"] == 600 + 240 and c["withheld_few_senders_buckets"] == 2
    assert c["withheld_short"] == 0 and c["dead_lettered"] == 0
    assert c["forwarded"] == 300 + 150 and c["batches"] == 2  # many senders; reports counted (no list)
    assert c["read"] == c["forwarded"] + c["withheld"]
    batch_files = (base / "out" / "batches").glob("*.avro")
    starts = sorted(int(_meta(f)["ldp.shuffle.bucket_start_ms"]) for f in batch_files)
    assert starts == [T0 + PRECISION_MS, T0 + 3 * PRECISION_MS]
    dead = []
    for f in (base / "out" / "dead_letter").glob("*.avro"):
        with open(f, "rb") as fh:
            dead += list(fastavro.reader(fh))
    few = [d for d in dead if d["reason"] == "few_senders"]
    assert len(few) == 2 and all(d["raw_record"] is None and d["task_id"] is None for d in few)
    details = sorted(d["detail"] for d in few)
    assert "600 report(s) from 1 distinct sender(s)" in details[0] + details[1]
    assert "240 report(s) from 60 distinct sender(s)" in details[0] + details[1]


def test_the_digests_never_reach_the_batches(run):
    base, _ = run
    digests = set()
    for f in (base / "in").glob("collect-*.avro"):
        listing = _meta(f)[SENDERS_LIST_KEY]
        digests |= {listing[i : i + 16] for i in range(0, len(listing), 16)}
    assert len(digests) == 1 + 150 + 60
    for f in (base / "out" / "batches").glob("*.avro"):
        meta = _meta(f)
        assert not any(k.startswith("ldp.collector.") for k in meta), sorted(meta)
        raw = f.read_bytes()
        assert not any(d.encode() in raw or bytes.fromhex(d) in raw for d in digests)
    for name in ("batches.jsonl", "counts.json"):
        text = (base / "out" / name).read_text()
        assert not any(d in text for d in digests)
    for f in (base / "out" / "dead_letter").glob("*.avro"):
        raw = f.read_bytes()
        assert not any(d.encode() in raw for d in digests)
