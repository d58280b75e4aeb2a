"""Provenance of shuffled batches: an HMAC-SHA256 tag over an Avro container file's body and its batch facts.

The shuffler signs every batch it publishes under a key that the aggregation jobs are also given
(``--shuffle_key FILE``); a job makes a central (shuffled) privacy claim for a batch only when
:func:`verify_batch` says it verifies. Beam-free and numpy-free.

**The key** is the content of a regular file with no group or other permission bits, minus one trailing
newline, at least :data:`MIN_KEY_BYTES` bytes (hex text is used as bytes). :func:`new_key_file` (command
line: ``python -m ldp.shuffle.provenance new-key FILE``) writes 64 hex characters from ``os.urandom(32)``
with mode 0600 and never overwrites a file.

**What is signed.** The *body* of the container, every byte after the header (the data blocks, each
followed by the sync marker), by its SHA-256, together with the header's sync marker, the task id, the
bucket's start and end (ms since the epoch), ``n`` (the number of records: the sum of the blocks' record
counts) and the format version::

    message = b"ldp-beam/shuffle-batch/v1\\n" + json.dumps({"body_sha256": ..., "bucket_end_ms": ...,
              "bucket_start_ms": ..., "n": ..., "sync": ..., "task_id": ...},
              sort_keys=True, separators=(",", ":")).encode()
    tag = HMAC-SHA256(key, message).hexdigest()

A batch whose reports are accounted per group (a heavy-hitters task's levels, :mod:`ldp.shuffle.levels`)
also carries its reports per group, :data:`META_GROUP_N` (``[[group, reports], ...]``, groups ascending,
every count positive, summing to ``n``); the message then has ``"group_n"`` with the same list, so the
counts cannot be changed, added or removed without breaking the tag.

The tag travels in the file's metadata (:data:`META_TAG`, :data:`META_TAG_VERSION` = ``"1"``) beside the
shuffler's ``ldp.shuffle.n``, ``ldp.shuffle.task_id``, ``ldp.shuffle.bucket_start_ms`` and
``ldp.shuffle.bucket_end_ms``. The header is not hashed as bytes: every header fact that matters is in the
message, so a writer builds the body first and then writes the header with the tag in front of it
(:func:`signed_container`, :func:`sign_container`).

**Verification** (:func:`verify_batch`) parses the header and walks every block with each length checked
against the bytes present (a declared size never drives an allocation), recounts ``n`` from the block
counts, and checks, in this order: the file parses (``malformed``), it carries the shuffler's metadata
(``not_a_batch``), its task is the job's (``wrong_task``), its declared ``n`` equals the records in its body
(``n_mismatch``), its group counts, if any, are positive and sum to ``n`` (``malformed``), the job was given
a key (``no_key``), a tag is present (``no_tag``) in a known version
(``bad_tag_version``), and the tag is the HMAC of the message rebuilt from the header's facts and the
body's digest, compared in constant time (``bad_tag``). The first failing check names the verdict's
reason. A verified batch's record count is the one the job must then read from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import hmac
import json
import mmap
import os
import stat
import sys
from collections.abc import Mapping, Sequence

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MESSAGE_PREFIX",
    "META_BUCKET_END",
    "META_BUCKET_START",
    "META_GROUP_N",
    "META_N",
    "META_TAG",
    "META_TAG_VERSION",
    "META_TASK_ID",
    "MIN_KEY_BYTES",
    "REASONS",
    "Container",
    "ProvenanceError",
    "Verdict",
    "batch_message",
    "encode_header",
    "format_group_counts",
    "parse_group_counts",
    "load_key",
    "new_key_file",
    "read_container",
    "sign",
    "sign_container",
    "signed_container",
    "verify_batch",
    "verify_file",
]

#: Avro object container magic.
MAGIC = b"Obj\x01"
SYNC_SIZE = 16
#: Version of the signed message (the value of :data:`META_TAG_VERSION`).
FORMAT_VERSION = "1"
MESSAGE_PREFIX = b"ldp-beam/shuffle-batch/v1\n"
MIN_KEY_BYTES = 32

_PREFIX = "ldp.shuffle."
META_N = _PREFIX + "n"
META_TASK_ID = _PREFIX + "task_id"
META_BUCKET_START = _PREFIX + "bucket_start_ms"
META_BUCKET_END = _PREFIX + "bucket_end_ms"
META_TAG = _PREFIX + "tag"
META_TAG_VERSION = _PREFIX + "tag_version"
#: Metadata key of a batch's reports per group (signed with the batch's facts when present).
META_GROUP_N = _PREFIX + "group_n"

#: Every reason a batch may fail verification, with what it means (for docs, counts and dashboards).
REASONS: dict[str, str] = {
    "malformed": "the file is not a well-formed Avro container (truncated, bad lengths or sync markers)",
    "not_a_batch": "the file carries no shuffler metadata (a plain client file)",
    "wrong_task": "the batch names another task than the job's",
    "n_mismatch": "the batch's declared n differs from the records in its body",
    "no_key": "the job was given no --shuffle_key, so no batch can be authenticated",
    "no_tag": "the batch carries no provenance tag",
    "bad_tag_version": "the batch's tag is of an unknown format version",
    "bad_tag": "the tag is not the HMAC of the batch under the job's key (forged or altered)",
}


class ProvenanceError(ValueError):
    """A key file or a container that cannot be used; ``reason`` is a short code (``key_mode``...)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# ---------------------------------------------------------------------------------------------------- keys


def load_key(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path``: a regular file, mode without group/other bits, at least 32 bytes after one
    trailing newline is stripped.

    Raises:
        ProvenanceError: ``key_missing``, ``key_not_regular``, ``key_mode``, ``key_short``.
    """
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise ProvenanceError("key_missing", f"{os.fspath(path)}: no such key file") from None
    except OSError as exc:  # a symlink under O_NOFOLLOW (ELOOP), a directory...
        raise ProvenanceError(
            "key_not_regular", f"{os.fspath(path)}: cannot open as a key file ({exc.strerror})"
        ) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProvenanceError("key_not_regular", f"{os.fspath(path)}: not a regular file")
        if st.st_mode & 0o077:
            raise ProvenanceError(
                "key_mode",
                f"{os.fspath(path)}: mode {stat.S_IMODE(st.st_mode):04o} lets others read it; chmod 600",
            )
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            if sum(map(len, chunks)) > 1 << 20:
                raise ProvenanceError("key_not_regular", f"{os.fspath(path)}: over 1 MiB, not a key file")
    finally:
        os.close(fd)
    key = b"".join(chunks)
    if key.endswith(b"\n"):
        key = key[:-1]
    if len(key) < MIN_KEY_BYTES:
        raise ProvenanceError(
            "key_short", f"{os.fspath(path)}: key of {len(key)} bytes, at least {MIN_KEY_BYTES} needed"
        )
    return key


def new_key_file(path: str | os.PathLike[str]) -> None:
    """Write a new key (64 hex characters from ``os.urandom(32)`` and a newline) to ``path`` with mode 0600.

    Raises:
        ProvenanceError: ``key_exists`` when ``path`` exists (never overwritten).
    """
    try:
        fd = os.open(
            os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600
        )
    except FileExistsError:
        raise ProvenanceError(
            "key_exists", f"{os.fspath(path)} exists; a key file is never overwritten"
        ) from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------ messages


def format_group_counts(counts: Mapping[int, int]) -> str:
    """A batch's reports per group as :data:`META_GROUP_N` holds them: ``[[group, reports], ...]``, groups
    ascending, groups without reports left out (compact JSON)."""
    pairs = [[int(g), int(c)] for g, c in sorted(counts.items()) if int(c) > 0]
    return json.dumps(pairs, separators=(",", ":"))


def parse_group_counts(raw: bytes | str, n: int) -> tuple[tuple[int, int], ...]:
    """:data:`META_GROUP_N`'s value, checked: a JSON list of ``[group, reports]`` pairs of integers,
    groups ascending and distinct in ``[0, 2^31)``, reports positive, summing to ``n``.

    Raises:
        ValueError: anything else (the message says what).
    """
    text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else str(raw)
    if len(text) > 1 << 20:
        raise ValueError("group counts over 1 MiB")
    try:
        pairs = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError("group counts are not JSON") from None

    def ok_int(x: object, lo: int) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and lo <= x < 1 << 62

    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and ok_int(p[0], 0) and p[0] < 1 << 31 and ok_int(p[1], 1)
        for p in pairs
    ):
        raise ValueError("group counts must be a list of [group, reports] pairs, reports >= 1")
    groups = [p[0] for p in pairs]
    if groups != sorted(set(groups)):
        raise ValueError("group counts must list each group once, ascending")
    if sum(p[1] for p in pairs) != n:
        raise ValueError(f"group counts sum to {sum(p[1] for p in pairs)}, not n = {n}")
    return tuple((int(g), int(c)) for g, c in pairs)


def batch_message(
    *,
    task_id: str,
    bucket_start_ms: int,
    bucket_end_ms: int,
    n: int,
    body_sha256: str,
    sync: str | bytes,
    group_n: Sequence[tuple[int, int]] | None = None,
) -> bytes:
    """The bytes the tag is the HMAC of (``sync`` as 16 bytes or their hex; ``group_n``: the batch's reports
    per group when it lists them, :data:`META_GROUP_N`)."""
    sync_hex = sync.hex() if isinstance(sync, (bytes, bytearray)) else str(sync)
    for name, value in (("bucket_start_ms", bucket_start_ms), ("bucket_end_ms", bucket_end_ms), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    facts = {
        "body_sha256": str(body_sha256),
        "bucket_end_ms": bucket_end_ms,
        "bucket_start_ms": bucket_start_ms,
        "n": n,
        "sync": sync_hex,
        "task_id": str(task_id),
    }
    if group_n is not None:
        facts["group_n"] = [[int(g), int(c)] for g, c in group_n]
    return MESSAGE_PREFIX + json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()


def sign(
    key: bytes,
    *,
    task_id: str,
    bucket_start_ms: int,
    bucket_end_ms: int,
    n: int,
    body_sha256: str,
    sync: str | bytes,
    group_n: Sequence[tuple[int, int]] | None = None,
) -> str:
    """The hex tag of a batch: HMAC-SHA256 of :func:`batch_message` under ``key``."""
    message = batch_message(
        task_id=task_id,
        bucket_start_ms=bucket_start_ms,
        bucket_end_ms=bucket_end_ms,
        n=n,
        body_sha256=body_sha256,
        sync=sync,
        group_n=group_n,
    )
    return hmac.new(key, message, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------------------------------------- containers


def _zigzag(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _read_long(data: bytes | memoryview | mmap.mmap, pos: int, end: int, what: str) -> tuple[int, int]:
    """One Avro long (zig-zag varint, at most 10 bytes) at ``pos``; bounds-checked against ``end``."""
    shift = 0
    acc = 0
    for i in range(10):
        if pos + i >= end:
            raise ProvenanceError("malformed", f"truncated {what} at byte {pos}")
        b = data[pos + i]
        acc |= (b & 0x7F) << shift
        if not b & 0x80:
            return (acc >> 1) ^ -(acc & 1), pos + i + 1
        shift += 7
    raise ProvenanceError("malformed", f"{what} at byte {pos}: varint longer than 10 bytes")


def _read_bytes(data: bytes | memoryview | mmap.mmap, pos: int, end: int, what: str) -> tuple[bytes, int]:
    size, pos = _read_long(data, pos, end, f"{what} length")
    if size < 0 or size > end - pos:
        raise ProvenanceError("malformed", f"{what} at byte {pos} declares {size} bytes, {end - pos} remain")
    return bytes(data[pos : pos + size]), pos + size


@dataclasses.dataclass(frozen=True)
class Container:
    """A parsed Avro container: header metadata, sync marker, where the body starts, and its walk."""

    metadata: dict[str, bytes]
    sync: bytes
    header_len: int
    body_sha256: str
    n_records: int
    blocks: int

    def text(self, key: str) -> str | None:
        """A metadata value as text (None when absent)."""
        value = self.metadata.get(key)
        return None if value is None else value.decode("utf-8", errors="replace")


def _parse_header(data: bytes | memoryview | mmap.mmap) -> tuple[dict[str, bytes], bytes, int]:
    end = len(data)
    if end < len(MAGIC) or bytes(data[: len(MAGIC)]) != MAGIC:
        raise ProvenanceError("malformed", "not an Avro container file (no Obj\\x01 magic)")
    pos = len(MAGIC)
    meta: dict[str, bytes] = {}
    while True:
        count, pos = _read_long(data, pos, end, "metadata block count")
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _read_long(data, pos, end, "metadata block size")
        if count > end - pos:  # every entry takes at least two bytes
            raise ProvenanceError(
                "malformed", f"metadata block declares {count} entries, {end - pos} bytes remain"
            )
        for _ in range(count):
            raw_key, pos = _read_bytes(data, pos, end, "metadata key")
            value, pos = _read_bytes(data, pos, end, "metadata value")
            try:
                name = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                raise ProvenanceError("malformed", "metadata key is not UTF-8") from None
            if name in meta:
                raise ProvenanceError("malformed", f"metadata key {name!r} appears twice")
            meta[name] = value
    if end - pos < SYNC_SIZE:
        raise ProvenanceError("malformed", "truncated header: no sync marker")
    sync = bytes(data[pos : pos + SYNC_SIZE])
    return meta, sync, pos + SYNC_SIZE


def read_container(data: bytes | memoryview | mmap.mmap) -> Container:
    """Parse the header and walk every data block (record count, byte size, sync marker), each length checked
    against the bytes present; the body's SHA-256 is over every byte after the header.

    Raises:
        ProvenanceError: ``malformed`` (truncated, a negative or oversized length, a wrong sync marker).
    """
    meta, sync, header_len = _parse_header(data)
    end = len(data)
    pos = header_len
    n_records = 0
    blocks = 0
    while pos < end:
        count, pos = _read_long(data, pos, end, "block record count")
        size, pos = _read_long(data, pos, end, "block size")
        if count < 0 or size < 0:
            raise ProvenanceError("malformed", f"block {blocks} declares a negative count or size")
        if size > end - pos or end - pos - size < SYNC_SIZE:
            raise ProvenanceError("malformed", f"block {blocks} declares {size} bytes, {end - pos} remain")
        pos += size
        if bytes(data[pos : pos + SYNC_SIZE]) != sync:
            raise ProvenanceError("malformed", f"block {blocks}: sync marker does not match the header's")
        pos += SYNC_SIZE
        n_records += count
        blocks += 1
    digest = hashlib.sha256(memoryview(data)[header_len:]).hexdigest()
    return Container(meta, sync, header_len, digest, n_records, blocks)


def encode_header(metadata: Mapping[str, bytes | str], sync: bytes) -> bytes:
    """An Avro container header: magic, the metadata map (one block, keys sorted), the sync marker."""
    if len(sync) != SYNC_SIZE:
        raise ValueError(f"sync marker of {len(sync)} bytes, {SYNC_SIZE} needed")
    out = bytearray(MAGIC)
    items = sorted(metadata.items())
    if items:
        out += _zigzag(len(items))
        for name, value in items:
            raw = value.encode() if isinstance(value, str) else bytes(value)
            k = name.encode()
            out += _zigzag(len(k)) + k + _zigzag(len(raw)) + raw
    out += _zigzag(0)
    out += sync
    return bytes(out)


def signed_container(
    metadata: Mapping[str, bytes | str],
    sync: bytes,
    body: bytes,
    key: bytes,
    *,
    task_id: str,
    bucket_start_ms: int,
    bucket_end_ms: int,
    n: int,
) -> bytes:
    """A whole signed batch file: the header (``metadata`` plus the shuffler's batch facts and the tag)
    followed by ``body`` (blocks written with ``sync``). ``n`` must equal the records in ``body``; group
    counts in ``metadata`` (:data:`META_GROUP_N`) are signed with the facts."""
    meta = dict(metadata)
    meta.update(
        {
            META_N: str(n),
            META_TASK_ID: task_id,
            META_BUCKET_START: str(bucket_start_ms),
            META_BUCKET_END: str(bucket_end_ms),
            META_TAG_VERSION: FORMAT_VERSION,
        }
    )
    meta.pop(META_TAG, None)
    probe = read_container(encode_header(meta, sync) + body)
    if probe.n_records != n:
        raise ProvenanceError("n_mismatch", f"n={n} but the body holds {probe.n_records} records")
    group_n = _group_facts(probe.metadata, n)
    meta[META_TAG] = sign(
        key,
        task_id=task_id,
        bucket_start_ms=bucket_start_ms,
        bucket_end_ms=bucket_end_ms,
        n=n,
        body_sha256=probe.body_sha256,
        sync=sync,
        group_n=group_n,
    )
    return encode_header(meta, sync) + body


def sign_container(data: bytes, key: bytes) -> bytes:
    """Sign an unsigned batch file written with the shuffler's metadata (``ldp.shuffle.task_id``, bucket,
    ``n``): the same file, header rewritten with the tag, body unchanged.

    Raises:
        ProvenanceError: ``malformed``, ``not_a_batch`` (metadata missing or not integers), ``n_mismatch``.
    """
    c = read_container(data)
    facts = _batch_facts(c)
    if facts is None:
        raise ProvenanceError("not_a_batch", "no complete shuffler metadata (task id, bucket, n) to sign")
    task_id, start, end, n = facts
    return signed_container(
        c.metadata,
        c.sync,
        bytes(memoryview(data)[c.header_len :]),
        key,
        task_id=task_id,
        bucket_start_ms=start,
        bucket_end_ms=end,
        n=n,
    )


def _int(value: bytes) -> int:
    text = value.decode("ascii")
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise ValueError(text)
    return int(text)


def _batch_facts(c: Container) -> tuple[str, int, int, int] | None:
    """``(task_id, bucket_start_ms, bucket_end_ms, n)`` from the header, None when any is absent.

    Raises:
        ProvenanceError: ``malformed`` when present but not integers / text.
    """
    if any(k not in c.metadata for k in (META_N, META_TASK_ID, META_BUCKET_START, META_BUCKET_END)):
        return None
    try:
        task_id = c.metadata[META_TASK_ID].decode("utf-8")
        start = _int(c.metadata[META_BUCKET_START])
        end = _int(c.metadata[META_BUCKET_END])
        n = _int(c.metadata[META_N])
    except (UnicodeDecodeError, ValueError):
        raise ProvenanceError("malformed", "the shuffler's metadata is not text / integers") from None
    if n < 0 or end <= start:
        raise ProvenanceError("malformed", f"n={n}, bucket [{start}, {end}): not a batch's facts")
    return task_id, start, end, n


def _group_facts(metadata: Mapping[str, bytes], n: int) -> tuple[tuple[int, int], ...] | None:
    """The header's group counts (None when it has none).

    Raises:
        ProvenanceError: ``malformed`` when present but not valid for ``n`` (:func:`parse_group_counts`).
    """
    raw = metadata.get(META_GROUP_N)
    if raw is None:
        return None
    try:
        return parse_group_counts(raw, n)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProvenanceError("malformed", f"{META_GROUP_N}: {exc}") from None


# ------------------------------------------------------------------------------------------- verification


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a batch verified; ``reason`` (a key of :data:`REASONS`) when not. ``n_records`` is counted
    from the body's blocks (0 when the file did not parse); ``declared_n`` and the bucket come from the header
    when present; ``metadata`` is the header's (not compared)."""

    verified: bool
    reason: str | None
    n_records: int
    declared_n: int | None
    bucket_start_ms: int | None
    bucket_end_ms: int | None
    detail: str = ""
    #: the container's header metadata (empty when it did not parse)
    metadata: Mapping[str, bytes] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    #: the batch's reports per group (:data:`META_GROUP_N`), signed when the batch verified; None without
    group_n: tuple[tuple[int, int], ...] | None = None


def verify_batch(data: bytes | memoryview | mmap.mmap, key: bytes | None, *, task_id: str) -> Verdict:
    """Verify one batch file's bytes for the job of ``task_id`` under ``key`` (None: no key given)."""
    try:
        c = read_container(data)
    except ProvenanceError as exc:
        return Verdict(False, "malformed", 0, None, None, None, exc.detail)

    def fail(reason: str, detail: str, facts: tuple[str, int, int, int] | None = None) -> Verdict:
        if facts is None:
            return Verdict(False, reason, c.n_records, None, None, None, detail, c.metadata)
        return Verdict(False, reason, c.n_records, facts[3], facts[1], facts[2], detail, c.metadata)

    try:
        facts = _batch_facts(c)
    except ProvenanceError as exc:
        return fail("malformed", exc.detail)
    if facts is None:
        return fail("not_a_batch", "no shuffler metadata (ldp.shuffle.n, task id, bucket)")
    batch_task, start, end, n = facts
    if batch_task != task_id:
        return fail("wrong_task", f"batch of task {batch_task!r}, job of {task_id!r}", facts)
    if n != c.n_records:
        return fail("n_mismatch", f"header says n={n}, body holds {c.n_records} records", facts)
    try:
        group_n = _group_facts(c.metadata, n)
    except ProvenanceError as exc:
        return fail("malformed", exc.detail, facts)
    if key is None:
        return fail("no_key", "no --shuffle_key given", facts)
    tag = c.metadata.get(META_TAG)
    if tag is None:
        return fail("no_tag", f"no {META_TAG} in the metadata", facts)
    if c.metadata.get(META_TAG_VERSION) != FORMAT_VERSION.encode():
        return fail("bad_tag_version", f"{META_TAG_VERSION}={c.text(META_TAG_VERSION)!r}", facts)
    expected = sign(
        key,
        task_id=batch_task,
        bucket_start_ms=start,
        bucket_end_ms=end,
        n=n,
        body_sha256=c.body_sha256,
        sync=c.sync,
        group_n=group_n,
    )
    if not hmac.compare_digest(expected.encode(), bytes(tag).strip().lower()):
        return fail("bad_tag", "HMAC mismatch", facts)
    return Verdict(True, None, c.n_records, n, start, end, "", c.metadata, group_n)


def verify_file(path: str | os.PathLike[str], key: bytes | None, *, task_id: str) -> Verdict:
    """:func:`verify_batch` on a file, memory-mapped (an empty or unreadable file is ``malformed``)."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return Verdict(False, "malformed", 0, None, None, None, "empty file")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return verify_batch(mm, key, task_id=task_id)
    except OSError as exc:
        return Verdict(False, "malformed", 0, None, None, None, f"unreadable: {exc.strerror}")


# -------------------------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``new-key FILE`` writes a key; ``verify --key FILE --task_id ID BATCH...`` prints each verdict."""
    parser = argparse.ArgumentParser(
        prog="python -m ldp.shuffle.provenance", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    nk = sub.add_parser("new-key", help="write a new key file (mode 0600, never overwrites)")
    nk.add_argument("file")
    vf = sub.add_parser("verify", help="verify batch files against a key")
    vf.add_argument("--key", required=True, help="the key file")
    vf.add_argument("--task_id", required=True)
    vf.add_argument("batches", nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "new-key":
            new_key_file(args.file)
            print(f"wrote a new key to {args.file} (mode 0600)")
            return 0
        key = load_key(args.key)
    except ProvenanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bad = 0
    for path in args.batches:
        v = verify_file(path, key, task_id=args.task_id)
        bad += not v.verified
        state = "verified" if v.verified else f"NOT verified ({v.reason}: {v.detail})"
        print(f"{path}: {state}; {v.n_records} records")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
