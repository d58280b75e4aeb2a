"""ldp.shuffle.provenance: a batch signed and verified; every forged field refused with its reason."""

from __future__ import annotations

import io
import os
import stat

import fastavro
import pytest

import schemas
from ldp.shuffle import provenance as pv

TASK = "apps"
START, END = 1_700_000_000_000, 1_700_000_600_000


def _records(n: int, value0: int = 0) -> list[dict[str, object]]:
    return [
        {
            "task_id": TASK,
            "schema_version": 2,
            "event_time": START,
            "group": 0,
            "value": (value0 + i) % 7,
            "seed": None,
            "bits": None,
            "items": None,
            "reals": None,
            "client_id": None,
        }
        for i in range(n)
    ]


def _unsigned(
    n: int = 50, *, task: str = TASK, declared_n: int | None = None, block: int = 0, **extra
) -> bytes:
    meta = {
        pv.META_N: str(n if declared_n is None else declared_n),
        pv.META_TASK_ID: task,
        pv.META_BUCKET_START: str(START),
        pv.META_BUCKET_END: str(END),
        "ldp.shuffle.time_precision_s": "600",
        **extra,
    }
    buf = io.BytesIO()
    # block > 0 writes several blocks (sync_interval in bytes), so reordering blocks can be tested
    fastavro.writer(buf, schemas.report_schema(), _records(n), metadata=meta, sync_interval=block or 1 << 20)
    return buf.getvalue()


KEY = b"k" * 32


@pytest.fixture
def signed() -> bytes:
    return pv.sign_container(_unsigned(), KEY)


def _reheader(data: bytes, **changes: str | None) -> bytes:
    """The same body under a header with metadata changed (None: removed); the tag is kept as it was."""
    c = pv.read_container(data)
    meta = dict(c.metadata)
    for k, v in changes.items():
        name = pv._PREFIX + k
        if v is None:
            meta.pop(name, None)
        else:
            meta[name] = v.encode()
    return pv.encode_header(meta, c.sync) + data[c.header_len :]


def _verify(data: bytes, key: bytes | None = KEY, task: str = TASK) -> pv.Verdict:
    return pv.verify_batch(data, key, task_id=task)


def test_round_trip_and_fastavro_reads_the_signed_file(signed: bytes) -> None:
    v = _verify(signed)
    assert v == pv.Verdict(True, None, 50, 50, START, END)
    reader = fastavro.reader(io.BytesIO(signed))
    assert len(list(reader)) == 50
    assert reader.metadata[pv.META_TAG_VERSION] == "1"
    c = pv.read_container(signed)
    expected = pv.sign(
        KEY,
        task_id=TASK,
        bucket_start_ms=START,
        bucket_end_ms=END,
        n=50,
        body_sha256=c.body_sha256,
        sync=c.sync,
    )
    assert c.text(pv.META_TAG) == expected


def test_message_is_the_agreed_bytes() -> None:
    msg = pv.batch_message(
        task_id="t", bucket_start_ms=1, bucket_end_ms=2, n=3, body_sha256="ab", sync=bytes(range(16))
    )
    assert msg == (
        b'ldp-beam/shuffle-batch/v1\n{"body_sha256":"ab","bucket_end_ms":2,"bucket_start_ms":1,"n":3,'
        b'"sync":"000102030405060708090a0b0c0d0e0f","task_id":"t"}'
    )
    with pytest.raises(TypeError):
        pv.batch_message(task_id="t", bucket_start_ms=1.0, bucket_end_ms=2, n=3, body_sha256="ab", sync="00")


def test_a_signed_file_under_another_key_is_bad_tag(signed: bytes) -> None:
    assert _verify(signed, key=b"x" * 32).reason == "bad_tag"


def test_forged_n_with_the_same_records_is_n_mismatch(signed: bytes) -> None:
    v = _verify(_reheader(signed, n="100000"))
    assert (v.verified, v.reason, v.n_records, v.declared_n) == (False, "n_mismatch", 50, 100000)


def test_forged_task_is_bad_tag_and_another_task_is_wrong_task(signed: bytes) -> None:
    assert _verify(_reheader(signed, task_id="other")).reason == "wrong_task"
    other = pv.sign_container(_unsigned(task="other"), KEY)
    assert _verify(_reheader(other, task_id=TASK)).reason == "bad_tag"  # relabelled for this job's task
    assert _verify(other).reason == "wrong_task"


@pytest.mark.parametrize(
    "changes",
    [
        {"bucket_start_ms": str(START - 600_000)},  # a longer bucket
        {"bucket_end_ms": str(END + 3_000_000)},
        {"bucket_start_ms": str(END), "bucket_end_ms": str(END + 600_000)},  # the next bucket's label
    ],
)
def test_forged_bucket_is_bad_tag(signed: bytes, changes: dict[str, str]) -> None:
    assert _verify(_reheader(signed, **changes)).reason == "bad_tag"


def test_forged_sync_is_bad_tag(signed: bytes) -> None:
    c = pv.read_container(signed)
    sync = bytes(b ^ 0xFF for b in c.sync)
    body = signed[c.header_len :].replace(c.sync, sync)
    assert _verify(pv.encode_header(c.metadata, sync) + body).reason == "bad_tag"


def _body_with(records: list[dict[str, object]], sync: bytes) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), records, sync_marker=sync, sync_interval=1 << 20)
    return buf.getvalue()[pv.read_container(buf.getvalue()).header_len :]


@pytest.mark.parametrize("n_forged", [49, 51, 5000])
def test_records_added_or_removed_with_n_updated_is_bad_tag(signed: bytes, n_forged: int) -> None:
    c = pv.read_container(signed)
    body = _body_with(_records(n_forged), c.sync)
    forged = pv.encode_header({**c.metadata, pv.META_N: str(n_forged).encode()}, c.sync) + body
    v = _verify(forged)
    assert (v.reason, v.n_records) == ("bad_tag", n_forged)


def test_records_added_without_n_updated_is_n_mismatch(signed: bytes) -> None:
    c = pv.read_container(signed)
    extra = _body_with(_records(10), c.sync)
    v = _verify(signed + extra)  # one more block with the right sync marker
    assert (v.reason, v.n_records, v.declared_n) == ("n_mismatch", 60, 50)


def test_a_record_changed_in_place_is_bad_tag(signed: bytes) -> None:
    c = pv.read_container(signed)
    body = _body_with(_records(50, value0=1), c.sync)  # same count, same sizes, other values
    assert len(body) == len(signed) - c.header_len
    assert _verify(signed[: c.header_len] + body).reason == "bad_tag"


def test_blocks_reordered_is_bad_tag() -> None:
    data = pv.sign_container(_unsigned(200, block=512), KEY)
    c = pv.read_container(data)
    assert c.blocks >= 3
    parts = data[c.header_len :].split(c.sync)[:-1]  # each block's count, size and data
    assert len(parts) == c.blocks
    body = b"".join(p + c.sync for p in [parts[1], parts[0], *parts[2:]])
    v = _verify(data[: c.header_len] + body)
    assert (v.reason, v.n_records) == ("bad_tag", 200)


def test_plain_client_file_is_not_a_batch() -> None:
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), _records(30))
    v = _verify(buf.getvalue())
    assert (v.verified, v.reason, v.n_records) == (False, "not_a_batch", 30)


def test_plain_file_with_the_shufflers_header_keys_is_no_tag_or_bad_tag() -> None:
    plain = _unsigned(600)  # the right n, task and bucket, written by anyone
    assert _verify(plain).reason == "no_tag"
    assert _verify(_unsigned(600, declared_n=100_000)).reason == "n_mismatch"
    forged_tag = {pv.META_TAG: "0" * 64, pv.META_TAG_VERSION: "1"}
    assert _verify(_unsigned(600, **forged_tag)).reason == "bad_tag"
    assert _verify(_unsigned(600, **{**forged_tag, pv.META_TAG_VERSION: "2"})).reason == "bad_tag_version"


def test_no_key_never_verifies(signed: bytes) -> None:
    assert _verify(signed, key=None).reason == "no_key"


@pytest.mark.parametrize("cut", [0, 3, 10, 60, -17, -16, -1])
def test_truncated_file_is_malformed(signed: bytes, cut: int) -> None:
    v = _verify(signed[:cut])
    assert (v.verified, v.reason) == (False, "malformed")


def test_trailing_garbage_and_oversized_lengths_are_malformed(signed: bytes) -> None:
    assert _verify(signed + b"\x00").reason == "malformed"  # a block of 0 records without its sync
    c = pv.read_container(signed)
    huge = pv._zigzag(1 << 62)  # a block claiming 2^62 bytes: refused, never allocated
    forged = signed[: c.header_len] + pv._zigzag(1) + huge + b"x" * 40
    with pytest.raises(pv.ProvenanceError) as exc:
        pv.read_container(forged)
    assert exc.value.reason == "malformed"
    neg = signed[: c.header_len] + pv._zigzag(-5) + pv._zigzag(3) + b"abc" + c.sync
    assert _verify(neg).reason == "malformed"
    meta_bomb = pv.MAGIC + pv._zigzag(1 << 40) + b"\x02a"
    assert _verify(meta_bomb).reason == "malformed"
    assert _verify(b"\xff" * 20).reason == "malformed"


def test_non_integer_metadata_is_malformed(signed: bytes) -> None:
    assert _verify(_reheader(signed, n="5e1")).reason == "malformed"
    assert _verify(_reheader(signed, bucket_end_ms=str(START))).reason == "malformed"


def test_tag_covers_the_body_digest_the_container_reports(signed: bytes) -> None:
    import hashlib

    c = pv.read_container(signed)
    assert c.body_sha256 == hashlib.sha256(signed[c.header_len :]).hexdigest()


def test_signed_container_refuses_a_wrong_n() -> None:
    data = _unsigned(20)
    c = pv.read_container(data)
    body = data[c.header_len :]
    with pytest.raises(pv.ProvenanceError, match="n_mismatch"):
        pv.signed_container(
            {}, c.sync, body, KEY, task_id=TASK, bucket_start_ms=START, bucket_end_ms=END, n=21
        )
    whole = pv.signed_container(
        {"avro.schema": c.metadata["avro.schema"]},
        c.sync,
        body,
        KEY,
        task_id=TASK,
        bucket_start_ms=START,
        bucket_end_ms=END,
        n=20,
    )
    assert _verify(whole).verified
    assert len(list(fastavro.reader(io.BytesIO(whole)))) == 20


def test_sign_container_refuses_a_plain_file() -> None:
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), _records(3))
    with pytest.raises(pv.ProvenanceError) as exc:
        pv.sign_container(buf.getvalue(), KEY)
    assert exc.value.reason == "not_a_batch"


def test_verify_file(tmp_path, signed: bytes) -> None:
    path = tmp_path / "b.avro"
    path.write_bytes(signed)
    assert pv.verify_file(path, KEY, task_id=TASK).verified
    (tmp_path / "empty.avro").write_bytes(b"")
    assert pv.verify_file(tmp_path / "empty.avro", KEY, task_id=TASK).reason == "malformed"
    assert pv.verify_file(tmp_path / "missing.avro", KEY, task_id=TASK).reason == "malformed"


# ------------------------------------------------------------------------------------------------ keys


def test_new_key_file_mode_content_and_no_overwrite(tmp_path) -> None:
    path = tmp_path / "shuffle.key"
    old = os.umask(0)
    try:
        pv.new_key_file(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert len(text) == 65 and text.endswith("\n") and int(text, 16) >= 0
    key = pv.load_key(path)
    assert key == text[:-1].encode()
    with pytest.raises(pv.ProvenanceError) as exc:
        pv.new_key_file(path)
    assert exc.value.reason == "key_exists"
    assert pv.load_key(path) == key
    other = tmp_path / "other.key"
    pv.new_key_file(other)
    assert pv.load_key(other) != key


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_key_readable_by_others_is_refused(tmp_path, mode: int) -> None:
    path = tmp_path / "k"
    path.write_bytes(KEY)
    path.chmod(mode)
    with pytest.raises(pv.ProvenanceError) as exc:
        pv.load_key(path)
    assert exc.value.reason == "key_mode"
    assert "chmod 600" in str(exc.value)


def test_key_short_missing_symlink_directory(tmp_path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"a" * 31 + b"\n")
    short.chmod(0o600)
    with pytest.raises(pv.ProvenanceError, match="key_short"):
        pv.load_key(short)
    ok = tmp_path / "ok"
    ok.write_bytes(b"a" * 32 + b"\n")
    ok.chmod(0o400)
    assert pv.load_key(ok) == b"a" * 32
    with pytest.raises(pv.ProvenanceError, match="key_missing"):
        pv.load_key(tmp_path / "nope")
    link = tmp_path / "link"
    link.symlink_to(ok)
    with pytest.raises(pv.ProvenanceError, match="key_not_regular"):
        pv.load_key(link)
    with pytest.raises(pv.ProvenanceError, match="key_not_regular"):
        pv.load_key(tmp_path)


def test_main_new_key_and_verify(tmp_path, capsys, signed: bytes) -> None:
    key = tmp_path / "k"
    assert pv.main(["new-key", str(key)]) == 0
    assert pv.main(["new-key", str(key)]) == 2
    assert "key_exists" in capsys.readouterr().err
    batch = tmp_path / "b.avro"
    batch.write_bytes(pv.sign_container(_unsigned(), pv.load_key(key)))
    assert pv.main(["verify", "--key", str(key), "--task_id", TASK, str(batch)]) == 0
    batch.write_bytes(signed)  # signed under another key
    assert pv.main(["verify", "--key", str(key), "--task_id", TASK, str(batch)]) == 1
    assert "bad_tag" in capsys.readouterr().out
    key.chmod(0o644)
    assert pv.main(["verify", "--key", str(key), "--task_id", TASK, str(batch)]) == 2
