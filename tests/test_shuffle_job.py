"""The shuffler job (pipelines.shuffle): simulate -> shuffle -> read the batches back -> aggregate them.

* the batch files carry no identifying field (client ids are dropped) and no fine time (every event time
  is its bucket's start), and say in their metadata and in OUT/batches.jsonl how many reports they hold;
* the multiset of forwarded reports is the input's valid reports minus the withheld bucket, the order is
  permuted (two stated statistical checks), the short bucket is withheld and counted, and
  read = forwarded + withheld + dead_lettered, with dead letters that hold no report content;
* ``pipelines.frequency`` gives exactly the same estimates on the shuffled batches as on the same reports
  unshuffled (per window of the precision's size);
* the streaming job over a watched directory forwards the same reports (integration tier).
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import re
from collections import Counter

import fastavro
import numpy as np
import pytest

import schemas
import simulator
from ldp.anonymity import AnonymitySettings
from ldp.reports import Reports
from ldp.shuffle.provenance import new_key_file, verify_batch
from ldp.task import parse_task
from pipelines import frequency, shuffle
from transforms.shuffle import (
    META_N,
    SPILL_LABELS,
    ChunkRef,
    EmitBatchFn,
    batch_metadata,
    scrub_dead_letter,
    spill_chunk,
)
from wire.records import write_report_file
from wire.validate import ReportValidator

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PRECISION_S = 600
MIN_REPORTS = 300
USERS = 3000  # over 1800 s: three full buckets of about 1000 reports
SHORT = 40  # one more bucket, an hour later, that closes short
TASK = {"task_id": "shuffled-olh", "mechanism": "olh", "epsilon": 2.0, "domain_size": 32}
ANONYMITY = {"shuffled": True, "time_precision_s": PRECISION_S, "min_reports": MIN_REPORTS}


def _ms(t: dt.datetime | int) -> int:
    return t if isinstance(t, int) else round(t.timestamp() * 1000)


def _read(path) -> list[dict]:
    with open(path, "rb") as fh:
        return list(fastavro.reader(fh))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One shuffler run over: 3000 valid reports (one file's reports carrying client ids), the simulator's
    bad records and undecodable file, and a short bucket of 40 reports."""
    base = tmp_path_factory.mktemp("shuffle")
    task = parse_task(TASK)
    (base / "plain.json").write_text(task.to_json())
    (base / "task.json").write_text(json.dumps({**TASK, "anonymity": ANONYMITY}))
    truth = simulator.simulate_files(
        task, USERS, "zipf", base / "in", seed=11, files=3, start_ms=T0, duration_s=1800.0, inject_bad=1
    )
    simulator.simulate_files(task, SHORT, "zipf", base / "short", seed=12, files=1, start_ms=T0 + 3_600_000,
                            duration_s=60.0)  # fmt: skip
    os.rename(base / "short" / "reports-00000-of-00001.avro", base / "in" / "short.avro")
    ided = base / "in" / "reports-00000-of-00003.avro"  # its reports get pseudonymous client ids
    recs = _read(ided)
    rng = np.random.default_rng(13)
    for r in recs:
        r["client_id"] = rng.bytes(32)
    with open(ided, "wb") as fh:
        write_report_file(fh, recs)
    new_key_file(base / "shuffle.key")
    summary = shuffle.run(
        [
            "--task",
            str(base / "task.json"),
            "--input",
            str(base / "in" / "*.avro"),
            "--output",
            str(base / "out"),
            "--shuffle_key",
            str(base / "shuffle.key"),
        ]
    )
    return {"base": base, "task": task, "truth": truth, "summary": summary, "ided": len(recs)}


def _batches(out) -> dict[str, tuple[dict, list[dict]]]:
    res = {}
    for f in sorted(glob.glob(str(out / "batches" / "*.avro"))):
        with open(f, "rb") as fh:
            reader = fastavro.reader(fh)
            res[os.path.basename(f)] = (dict(reader.metadata), list(reader), reader.writer_schema)
    return res


def _input_order(run) -> list[tuple[int, int, int]]:
    """The valid input reports of the three full buckets, in input order: (event ms, value, seed)."""
    v = ReportValidator(run["task"])
    out = []
    for f in sorted(glob.glob(str(run["base"] / "in" / "reports-*.avro"))):
        vb = v.validate(_read(f))
        out += zip(vb.event_ms.tolist(), vb.reports.values.tolist(), vb.reports.seeds.view(np.int64).tolist())
    return out


def test_batches_carry_no_identifying_field_and_no_fine_time(run):
    batches = _batches(run["base"] / "out")
    assert len(batches) == 3
    fields = {f["name"] for f in schemas.report_schema()["fields"]}
    for meta, recs, writer_schema in batches.values():
        assert {f["name"] for f in writer_schema["fields"]} == fields  # the report schema, nothing more
        start = int(meta["ldp.shuffle.bucket_start_ms"])
        assert int(meta["ldp.shuffle.bucket_end_ms"]) == start + PRECISION_S * 1000
        assert meta["ldp.shuffle.time_precision_s"] == str(PRECISION_S)
        assert int(meta[META_N]) == len(recs) >= MIN_REPORTS
        assert all(r["client_id"] is None for r in recs)  # the pseudonyms are gone
        assert {_ms(r["event_time"]) for r in recs} == {start}  # only the bucket's start
        assert start % (PRECISION_S * 1000) == 0
        assert all(r["bits"] is None and r["items"] is None and r["reals"] is None for r in recs)
        assert {r["task_id"] for r in recs} == {TASK["task_id"]}
    manifest = [json.loads(x) for x in (run["base"] / "out" / "batches.jsonl").read_text().splitlines()]
    assert [m["file"] for m in manifest] == [f"batches/{n}" for n in batches]
    assert [m["n"] for m in manifest] == [len(b[1]) for b in batches.values()]
    assert all(m["task_id"] == TASK["task_id"] and m["time_precision_s"] == PRECISION_S for m in manifest)
    assert manifest[0]["bucket_start"] == "2026-01-01T00:00:00.000Z"
    assert manifest[0]["bucket_end"] == "2026-01-01T00:10:00.000Z"
    assert run["ided"] > 900  # a third of the reports carried client ids in the input


def test_forwarded_multiset_equals_the_input_minus_withheld(run):
    want = Counter((t - t % (PRECISION_S * 1000), v, s) for t, v, s in _input_order(run))
    got = Counter(
        (_ms(r["event_time"]), r["value"], r["seed"]) for _, recs, _ in _batches(run["base"] / "out").values()
        for r in recs
    )  # fmt: skip
    assert sum(want.values()) == USERS and got == want


def test_the_order_is_permuted(run):
    """Each batch against its reports' input order (seeds are 64-bit random, so they identify reports).

    Under a uniform permutation of n reports: (1) Spearman's rank correlation between input and output
    positions has mean 0 and standard deviation 1/sqrt(n - 1) (about 0.032 at n = 1000); |rho| < 5 sd
    fails with probability about 6e-7 per batch. (2) The number of output neighbours that were input
    neighbours in the same order is about Poisson(1); P(more than 10) < 1e-7. Unshuffled, the batch keeps
    each file's run of about 330 reports in order: hundreds of such neighbours."""
    order = _input_order(run)
    for _name, (meta, recs, _) in _batches(run["base"] / "out").items():
        start = int(meta["ldp.shuffle.bucket_start_ms"])
        seeds = [s for t, _, s in order if t - t % (PRECISION_S * 1000) == start]
        rank = {s: i for i, s in enumerate(seeds)}
        pos = np.array([rank[r["seed"]] for r in recs], dtype=np.float64)
        n = len(pos)
        rho = np.corrcoef(pos, np.arange(n))[0, 1]  # ranks both: Pearson on ranks is Spearman
        assert abs(rho) < 5 / np.sqrt(n - 1), rho
        successions = int(np.sum(np.diff(pos) == 1))
        assert successions <= 10, successions


def test_short_bucket_is_withheld_and_the_counts_balance(run):
    c = run["summary"]["counts"]
    bad = run["truth"]["bad_records"]
    assert c["read"] == USERS + SHORT + sum(bad.values())
    assert c["forwarded"] == USERS and c["batches"] == 3
    assert c["withheld"] == c["withheld_short"] == SHORT and c["withheld_buckets"] == 1
    assert c["withheld_late"] == 0
    assert c["dead_lettered"] == sum(bad.values())
    assert {k[len("dead_lettered_") :]: v for k, v in c.items() if k.startswith("dead_lettered_")} == bad
    assert c["read"] == c["forwarded"] + c["withheld"] + c["dead_lettered"]
    assert run["summary"]["balanced"] is True
    saved = json.loads((run["base"] / "out" / "counts.json").read_text())
    assert saved["counts"] == c and saved["anonymity"]["min_reports"] == MIN_REPORTS


def test_dead_letters_hold_no_report_content(run):
    dead = [r for f in glob.glob(str(run["base"] / "out" / "dead_letter" / "*.avro")) for r in _read(f)]
    reasons = Counter(r["reason"] for r in dead)
    assert reasons == Counter({**run["truth"]["bad_records"], "short_bucket": 1})
    for r in dead:
        assert r["raw_record"] is None and r["raw_bytes"] is None and r["task_id"] is None
        assert "sha256" not in (r["detail"] or "")
    (short,) = [r for r in dead if r["reason"] == "short_bucket"]
    assert f"with {SHORT} report(s), fewer than anonymity.min_reports = {MIN_REPORTS}" in short["detail"]
    assert "[2026-01-01T01:00:00.000Z, 2026-01-01T01:10:00.000Z)" in short["detail"]


def test_every_batch_is_signed_and_a_changed_byte_or_key_fails(run):
    """Each batch verifies under the run's key (the tag covers the body's digest, n, task, bucket and sync
    marker); the same bytes under another key, or with one record byte changed, do not."""
    from ldp.shuffle.provenance import load_key

    key = load_key(run["base"] / "shuffle.key")
    other = bytes(64)
    manifest = [json.loads(x) for x in (run["base"] / "out" / "batches.jsonl").read_text().splitlines()]
    assert all(m["signed"] for m in manifest)
    for f in sorted(glob.glob(str(run["base"] / "out" / "batches" / "*.avro"))):
        data = open(f, "rb").read()
        v = verify_batch(data, key, task_id=TASK["task_id"])
        assert v.verified and v.reason is None and v.n_records == v.declared_n >= MIN_REPORTS, v
        assert verify_batch(data, other, task_id=TASK["task_id"]).reason == "bad_tag"
        flipped = bytearray(data)
        flipped[-40] ^= 1  # inside the last block's records
        assert verify_batch(bytes(flipped), key, task_id=TASK["task_id"]).reason == "bad_tag"


def test_the_key_is_required_and_must_be_private(tmp_path, capsys):
    (tmp_path / "task.json").write_text(json.dumps({**TASK, "anonymity": ANONYMITY}))
    simulator.simulate_files(parse_task(TASK), 20, "zipf", tmp_path / "in", seed=1, files=1, start_ms=T0,
                            duration_s=60.0)  # fmt: skip
    args = ["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"),
            "--output", str(tmp_path / "o")]  # fmt: skip
    _fails(capsys, args, r"--shuffle_key FILE is required.*new-key FILE")
    loose = tmp_path / "loose.key"
    loose.write_text("ab" * 32)
    os.chmod(loose, 0o644)
    _fails(capsys, [*args, "--shuffle_key", str(loose)], r"--shuffle_key: .*key_mode.*chmod 600")
    short = tmp_path / "short.key"
    short.write_text("abc")
    os.chmod(short, 0o600)
    _fails(capsys, [*args, "--shuffle_key", str(short)], r"--shuffle_key: .*key_short")
    _fails(capsys, [*args, "--shuffle_key", str(tmp_path / "none.key")], r"--shuffle_key: .*key_missing")
    assert not os.path.exists(tmp_path / "o" / "batches")


def _estimates(out):
    rows = []
    for f in sorted(glob.glob(os.path.join(out, "estimates-*.jsonl"))):
        with open(f) as fh:
            rows += [json.loads(line) for line in fh]
    return sorted(rows, key=lambda r: (r["group"], r["window_start"] or ""))


def test_frequency_estimates_on_shuffled_batches_equal_the_unshuffled(run):
    base = run["base"]
    common = ["--task", str(base / "plain.json"), "--window_size", str(PRECISION_S)]
    frequency.run([*common, "--input", str(base / "in" / "reports-*.avro"), "--output", str(base / "f_raw")])
    s = frequency.run([*common, "--input", str(base / "out" / "batches" / "*.avro"), "--output",
                       str(base / "f_shuf")])  # fmt: skip
    assert s["counts"]["read"] == s["counts"]["accepted"] == USERS
    raw, shuf = _estimates(base / "f_raw"), _estimates(base / "f_shuf")
    assert len(raw) == 3 and [r["n_reports"] for r in raw] == [r["n_reports"] for r in shuf]
    assert raw == shuf  # every field of every row, exactly


def test_emit_batch_min_reports_boundary_and_seeded_permutation(tmp_path):
    task = parse_task(TASK)
    settings = AnonymitySettings(time_precision_s=PRECISION_S, min_reports=5)
    rng = np.random.default_rng(5)
    spill = str(tmp_path / "spill")

    def part(n: int, source: str = "in.avro") -> ChunkRef:
        reports = Reports(values=rng.integers(0, 8, n), seeds=rng.integers(0, 2**63, n).astype(np.uint64))
        return spill_chunk(spill, 0, reports, source, rng.integers(0, SPILL_LABELS, n).astype(np.uint16))

    fn = EmitBatchFn(task.task_id, 2, settings, str(tmp_path), run_id="r1", test_seed=3)
    withheld = [part(2), part(2)]
    out = list(fn.process((T0, withheld)))  # 4 < 5: withheld
    assert [o.tag for o in out] == ["counts", "dead_letter"]
    assert out[0].value == {"shuffle_withheld": 4, "shuffle_withheld_buckets": 1}
    assert not os.path.exists(tmp_path / "batches") or not os.listdir(tmp_path / "batches")
    assert not any(os.path.exists(r.path) for r in withheld)  # spill files removed
    parts = [part(3), part(2, "other.avro")]
    want = sorted(s for r in parts for s in r.reports().seeds.view(np.int64).tolist())
    first = list(fn.process((T0, parts)))  # exactly 5: forwarded
    assert first[0].value == {"shuffle_forwarded": 5, "shuffle_batches": 1}
    entry = first[1]
    assert entry["n"] == 5 and entry["bucket_start_ms"] == T0 and entry["pane"] == 0
    path = tmp_path / entry["file"]
    a = _read(path)
    assert batch_metadata(str(path))[META_N] == "5" and sorted(r["seed"] for r in a) == want
    stat = os.stat(path)
    ledger = json.loads((tmp_path / "state" / "published" / (path.name + ".json")).read_text())
    assert ledger["sources"] == {"in.avro": 3, "other.avro": 2} and ledger["n"] == 5
    # a retried bundle of the same run: the same outcome, the file not written again
    again = list(fn.process((T0, [part(3), part(2, "other.avro")])))
    assert again[0].value == {"shuffle_forwarded": 5, "shuffle_batches": 1}
    # another run reaching the same bucket: counted as already published, never rewritten
    later = EmitBatchFn(task.task_id, 2, settings, str(tmp_path), run_id="r2", test_seed=3)
    assert [o.value for o in later.process((T0, [part(6)]))] == [{"already_published": 6}]
    now = os.stat(path)
    assert (now.st_ino, now.st_mtime_ns, now.st_size) == (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    assert _read(path) == a and os.listdir(tmp_path / "batches") == [os.path.basename(path)]
    with pytest.raises(ValueError, match="not a shuffled batch"):
        batch_metadata(str(run_file(tmp_path)))


def run_file(tmp_path):
    p = tmp_path / "plain.avro"
    with open(p, "wb") as fh:
        write_report_file(fh, [])
    return p


def test_scrub_keeps_reason_and_size_only():
    dead = {"reason": "wrong_task", "detail": "report is not for task 't'", "source": "f.avro",
            "task_id": "other", "raw_record": '{"client_id": "abcd"}', "raw_bytes": None,
            "dead_letter_time": 0}  # fmt: skip
    s = scrub_dead_letter(dead)
    assert s["raw_record"] is None and s["task_id"] is None
    assert s["detail"] == "report is not for task 't'; record of 21 characters as JSON, not kept"
    late = scrub_dead_letter(
        {
            **dead,
            "reason": "late",
            "raw_record": None,
            "detail": "12 accepted report(s) of group 0, event time 2026-01-01T00:03:01.123Z",
        }
    )
    assert late["detail"] == "12 accepted report(s) arrived after their bucket closed; withheld"
    undecodable = scrub_dead_letter(
        {
            **dead,
            "reason": "undecodable",
            "raw_record": None,
            "detail": "input of 9 bytes, sha256 " + "ab" * 32 + ": bad magic",
        }
    )
    assert undecodable["detail"] == "input of 9 bytes: bad magic"


def _fails(capsys, argv, pattern):
    with pytest.raises(SystemExit) as ei:
        shuffle.run(argv)
    assert ei.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and re.search(pattern, err[0]), err


def test_tasks_the_shuffler_refuses(tmp_path, capsys):
    args = ["--input", str(tmp_path / "*.avro"), "--output", str(tmp_path / "o")]
    cases = [
        (TASK, "no anonymity section"),
        ({**TASK, "anonymity": {**ANONYMITY, "shuffled": False}}, "anonymity.shuffled is false"),
        ({**TASK, "anonymity": {"time_precision_s": 7, "min_reports": 1}}, "time_precision_s.*min_reports"),
        ({**TASK, "window": {"size_s": 900}, "anonymity": ANONYMITY}, "window.size_s .* multiple"),
        ({**TASK, "epsilon": -1, "anonymity": {"delta": 1}}, "epsilon.*anonymity.delta"),
    ]
    for i, (obj, pattern) in enumerate(cases):
        (tmp_path / f"t{i}.json").write_text(json.dumps(obj))
        _fails(capsys, ["--task", str(tmp_path / f"t{i}.json"), *args], pattern)


@pytest.mark.integration
@pytest.mark.prism
def test_streaming_from_a_watched_directory_forwards_the_same_batches(run):
    """The streaming job (on Prism; refused on the DirectRunner) over the same files: every bucket is
    emitted once, with the batch job's reports; the short bucket is withheld."""
    base = run["base"]
    flags = ["--streaming", "--watch_interval", "1", "--streaming_duration", "8", "--runner=PrismRunner"]
    inp = ["--input", str(base / "in" / "*.avro")]
    key = ["--shuffle_key", str(base / "shuffle.key")]
    s = shuffle.run(["--task", str(base / "task.json"), *flags, *inp, "--output", str(base / "stream"), *key])
    c = s["counts"]
    assert c["read"] == run["summary"]["counts"]["read"] and s["balanced"] is True
    assert (c["forwarded"], c["withheld_short"], c["withheld_late"]) == (USERS, SHORT, 0)

    def multiset(out):
        return Counter(
            (_ms(r["event_time"]), r["seed"]) for _, recs, _ in _batches(out).values() for r in recs
        )

    assert multiset(base / "stream") == multiset(base / "out")


@pytest.mark.integration
def test_cli_subprocess_shuffle_command_is_registered(run_cli):
    out = run_cli("shuffle", "--help", module="pipelines.cli")
    assert out.returncode == 0, out.stderr
    for flag in ("--task", "--input", "--input_subscription", "--allowed_lateness", "--test_shuffle_seed"):
        assert flag in out.stdout
    listing = run_cli("--help", module="pipelines.cli")
    assert "shuffle" in listing.stdout and "trust domain" in listing.stdout
