"""Byte strings of at most ``B`` bytes as fixed-width bit strings, and their prefixes.

A batch of values is a :class:`StringBatch`: a ``uint8`` matrix ``(n, B)`` holding each value's bytes
followed by zero bytes, and an ``int64`` vector of lengths. ``str`` values are UTF-8 encoded; ``bytes``
are taken as they are (any byte, including ``0x00`` and invalid UTF-8).

**Bit layout.** A value is the bit string of ``L = 8 B + h`` bits, ``h = B.bit_length()``: its ``B``
padded bytes, most significant bit first, then its length in ``h`` bits (the *length trailer*). The
trailer is what tells ``"ab"`` from ``"ab\\0"``: both have the bytes ``61 62 00 ..`` and differ in the
last ``h`` bits. A prefix of ``l`` bits is the first ``l`` bits of that string (prefix granularity: bits),
so the prefixes of short lengths are ordinary byte prefixes and only the last level sees the length.

Bit strings are stored as ``uint64`` words, ``W = ceil(L / 64)`` per value, big-endian (bit 0 of the
string is the top bit of word 0); a prefix of ``l`` bits is the same words with every bit from ``l`` on
cleared, so two prefixes are equal exactly when their words are. With ``L <= 64`` a value is one integer.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterable

import numpy as np

__all__ = [
    "StringBatch", "encode_strings", "total_bits", "mask_prefix", "bit_field", "half_words", "escape_bytes",
    "unescape_text", "is_escaped_text", "UNPRINTABLE_CATEGORIES",
]

MAX_LENGTH_LIMIT = 1024


def total_bits(max_length: int) -> int:
    """``L = 8 B + B.bit_length()``: the bits of a value of at most ``B`` bytes with its length trailer."""
    return 8 * int(max_length) + int(max_length).bit_length()


def _check_max_length(max_length: int) -> int:
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
        raise ValueError(f"max_length must be an integer, got {max_length!r}")
    if not 1 <= int(max_length) <= MAX_LENGTH_LIMIT:
        raise ValueError(f"max_length must be in [1, {MAX_LENGTH_LIMIT}], got {max_length}")
    return int(max_length)


def _utf8_cut(data: bytes, limit: int) -> bytes:
    """The longest prefix of ``data`` of at most ``limit`` bytes that ends on a UTF-8 character boundary."""
    cut = limit
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut]


@dataclasses.dataclass(frozen=True)
class StringBatch:
    """``n`` values of at most ``max_length`` bytes: ``data`` ``uint8 (n, B)`` zero-padded, ``lengths``."""

    data: np.ndarray
    lengths: np.ndarray
    max_length: int

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def bits(self) -> int:
        return total_bits(self.max_length)

    def values(self) -> list[bytes]:
        """The values as ``bytes`` objects."""
        return [bytes(row[:k]) for row, k in zip(self.data, self.lengths.tolist())]

    def words(self) -> np.ndarray:
        """The bit strings as ``uint64`` words ``(n, W)`` (see the module docstring)."""
        n, b = self.data.shape
        width = total_bits(b)
        nbytes = 8 * ((width + 63) // 64)
        buf = np.zeros((n, nbytes), dtype=np.uint8)
        buf[:, :b] = self.data
        h = width - 8 * b
        # the trailer's h bits start right after the bytes: shift the length into the top of a 16-bit field
        trailer = (self.lengths.astype(np.uint64) << np.uint64(16 - h)).astype(np.uint16)
        buf[:, b] = (trailer >> 8).astype(np.uint8)
        if b + 1 < nbytes:
            buf[:, b + 1] = (trailer & 0xFF).astype(np.uint8)
        return buf.view(">u8").astype(np.uint64)

    @classmethod
    def from_words(cls, words: np.ndarray, max_length: int) -> tuple[StringBatch, np.ndarray]:
        """Decodes bit strings back to values; also returns which rows are values a client could send
        (length at most ``B`` and zero bytes after it). Invalid rows decode with length 0."""
        b = _check_max_length(max_length)
        words = np.atleast_2d(np.asarray(words, dtype=np.uint64))
        raw = words.astype(">u8").view(np.uint8).reshape(words.shape[0], -1)
        h = total_bits(b) - 8 * b
        field = raw[:, b].astype(np.uint16) << 8
        if raw.shape[1] > b + 1:
            field |= raw[:, b + 1].astype(np.uint16)
        lengths = (field >> np.uint16(16 - h)).astype(np.int64)
        data = raw[:, :b].copy()
        pad = np.arange(b)[None, :] >= lengths[:, None]
        valid = (lengths <= b) & ~np.any(pad & (data != 0), axis=1)
        lengths = np.where(valid, lengths, 0)
        data[~valid] = 0
        return cls(data, lengths, b), valid


def encode_strings(
    values: Iterable[str | bytes], max_length: int, *, truncate: bool = False
) -> StringBatch:
    """Encodes values (``str`` as UTF-8, or ``bytes``) into a :class:`StringBatch`.

    Args:
        values: the values; an empty string is a value like any other.
        max_length: ``B``, the largest number of bytes a value may have.
        truncate: cut a longer value to ``B`` bytes (a ``str`` at a UTF-8 character boundary) instead
            of refusing it.

    Raises:
        ValueError: a value longer than ``B`` bytes (without ``truncate``) or of another type; the
            message names the first such value's index and length.
    """
    b = _check_max_length(max_length)
    rows: list[bytes] = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            data = v.encode("utf-8", errors="surrogatepass")
        elif isinstance(v, (bytes, bytearray, memoryview)):
            data = bytes(v)
        else:
            raise ValueError(f"value {i} is a {type(v).__name__}, not str or bytes")
        if len(data) > b:
            if not truncate:
                raise ValueError(f"value {i} has {len(data)} bytes, more than max_length {b}")
            data = _utf8_cut(data, b) if isinstance(v, str) else data[:b]
        rows.append(data)
    n = len(rows)
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=n)
    joined = np.frombuffer(b"".join(r.ljust(b, b"\0") for r in rows), dtype=np.uint8)
    return StringBatch(joined.reshape(n, b).copy(), lengths, b)


def mask_prefix(words: np.ndarray, bits: int) -> np.ndarray:
    """The ``bits``-bit prefixes of bit strings ``(n, W)``: every bit from position ``bits`` on cleared."""
    words = np.asarray(words, dtype=np.uint64)
    out = words.copy()
    full, rest = divmod(int(bits), 64)
    if full < out.shape[1]:
        keep = np.uint64(0) if rest == 0 else np.uint64(((1 << rest) - 1) << (64 - rest))
        out[:, full] &= keep
        out[:, full + 1 :] = 0
    return out


def bit_field(words: np.ndarray, start: int, width: int) -> np.ndarray:
    """Bits ``[start, start + width)`` of each bit string as an unsigned integer (``width <= 32``)."""
    if not 0 <= width <= 32:
        raise ValueError(f"a bit field is at most 32 bits, got {width}")
    words = np.asarray(words, dtype=np.uint64)
    if width == 0:
        return np.zeros(words.shape[0], dtype=np.uint64)
    k, off = divmod(int(start), 64)
    hi = words[:, k]
    if off + width <= 64:
        return (hi >> np.uint64(64 - off - width)) & np.uint64((1 << width) - 1)
    spill = off + width - 64
    lo = words[:, k + 1] >> np.uint64(64 - spill)
    return ((hi << np.uint64(spill)) | lo) & np.uint64((1 << width) - 1)


def half_words(words: np.ndarray, bits: int) -> np.ndarray:
    """The ``bits``-bit prefixes as ``ceil(bits / 32)`` 32-bit pieces ``(n, K)`` (``uint64`` holding values
    below ``2**32``), the hash's input; bits past the prefix are zero."""
    k = (int(bits) + 31) // 32
    masked = mask_prefix(words, bits)
    out = np.empty((masked.shape[0], k), dtype=np.uint64)
    for i in range(k):
        w = masked[:, i // 2]
        out[:, i] = (w >> np.uint64(32)) if i % 2 == 0 else (w & np.uint64(0xFFFFFFFF))
    return out


#: Unicode categories that could drive a terminal or hide text: control, format (bidirectional overrides,
#: zero-width), surrogate, private use, unassigned, line and paragraph separators.
UNPRINTABLE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def escape_bytes(value: bytes) -> str:
    """A value as printable text: its UTF-8 characters, ``\\\\`` for a backslash, and ``\\xNN`` for each
    byte that is not valid UTF-8 or belongs to a character of :data:`UNPRINTABLE_CATEGORIES`.
    :func:`unescape_text` inverts it, so two values never print alike."""
    out: list[str] = []
    text = bytes(value).decode("utf-8", errors="surrogateescape")
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not valid UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif unicodedata.category(ch) in UNPRINTABLE_CATEGORIES:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def is_escaped_text(text: object) -> bool:
    """True when ``text`` is a string :func:`escape_bytes` could print: no character of
    :data:`UNPRINTABLE_CATEGORIES` and every backslash starting ``\\\\`` or ``\\xNN``."""
    if not isinstance(text, str) or any(unicodedata.category(ch) in UNPRINTABLE_CATEGORIES for ch in text):
        return False
    return "\\" not in _ESCAPE_RE.sub("", text)


_ESCAPE_RE = re.compile(r"\\(\\|x[0-9a-fA-F]{2})")


def unescape_text(text: str) -> bytes:
    """The bytes of a value printed by :func:`escape_bytes`.

    Raises:
        ValueError: a backslash that starts neither ``\\\\`` nor ``\\xNN``.
    """
    out = bytearray()
    pos = 0
    for m in _ESCAPE_RE.finditer(text):
        chunk = text[pos : m.start()]
        if "\\" in chunk:
            raise ValueError(f"a stray backslash at {pos + chunk.index(chr(92))} in {text!r}")
        out += chunk.encode("utf-8")
        esc = m.group(1)
        out += b"\\" if esc == "\\" else bytes([int(esc[1:], 16)])
        pos = m.end()
    rest = text[pos:]
    if "\\" in rest:
        raise ValueError(f"a stray backslash at {pos + rest.index(chr(92))} in {text!r}")
    return bytes(out + rest.encode("utf-8"))
