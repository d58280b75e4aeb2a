"""The declared payload of a mechanism's reports and the reason codes of its refusals (Beam-free).

Every oracle the report validator sees (:class:`ldp.aggregate.ValidationOracle`) declares

* ``payload``: a :class:`PayloadSpec`, one :class:`PayloadField` per report field it uses: the field's
  wire type, its length, the bounds of its entries and the reason code of each kind of violation. The
  report validator of the wire layer checks presence, type and length from it; the
  simulator's bad reports and ``tests/test_payload_seam.py`` derive their
  violations (:meth:`PayloadSpec.violations`) from it.
* ``validate(reports) -> (ok, reasons)``: the domain checks on the numpy batch; ``reasons`` holds a
  :class:`Refusal` per refused report (None where accepted).

Beside its payload each mechanism class declares ``wire``, a :class:`WireSpec`: what a client encodes
(``inputs``), the byte procedure other clients reproduce (``procedure``, a section of the wire spec) with
its conformance vector set (``vectors``) and the clients that implement it, or, when it has none, the
stated ``reason``. :func:`declared_wire` reads it; the wire layer derives its lists from it.

A :class:`Refusal` is a reason code from :data:`ORACLE_REASONS` plus a detail string. It is a ``str``
(the detail) carrying ``code``, so a reader of the detail text needs nothing else; the validator reads
only ``code`` and never parses the text.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

__all__ = [
    "ORACLE_REASONS",
    "WIRE_FIELDS",
    "WIRE_DTYPES",
    "Refusal",
    "refuse",
    "missing_fields",
    "PayloadField",
    "PayloadSpec",
    "Violation",
    "WIRE_INPUTS",
    "WIRE_PROCEDURES",
    "WireSpec",
    "declared_wire",
]

#: The closed set of reason codes an oracle's ``validate`` (and the validator's payload checks) give:
#: a field the mechanism uses is absent; a hash seed of the wrong type; a payload of the wrong type or
#: shape (or a value the mechanism never outputs); an entry outside the mechanism's output domain.
ORACLE_REASONS: tuple[str, ...] = ("missing_field", "invalid_seed", "invalid_payload", "out_of_domain")

#: Report field (:class:`ldp.reports.Reports`) -> its Avro field in ``schemas/report.avsc``.
WIRE_FIELDS: dict[str, str] = {
    "values": "value", "seeds": "seed", "bits": "bits", "items": "items", "reals": "reals"
}

#: Report field -> the numpy type of its entries (the wire type fixes it: ``seed`` is the uint64 seed's
#: int64 bit pattern, ``bits`` a packed little-endian bit vector).
WIRE_DTYPES: dict[str, str] = {
    "values": "int64", "seeds": "uint64", "bits": "uint8", "items": "int64", "reals": "float64"
}


class Refusal(str):
    """Why one report is refused: the detail text (the string itself) and ``code``, one of
    :data:`ORACLE_REASONS`."""

    code: str

    def __new__(cls, code: str, detail: str) -> Refusal:
        if code not in ORACLE_REASONS:
            raise ValueError(f"unknown reason code {code!r}; an oracle gives one of {list(ORACLE_REASONS)}")
        out = super().__new__(cls, detail)
        out.code = code
        return out

    @property
    def detail(self) -> str:
        return str(self)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return Refusal, (self.code, str(self))

    def __repr__(self) -> str:
        return f"Refusal({self.code!r}, {str(self)!r})"


def refuse(reasons: np.ndarray, bad: np.ndarray, code: str, detail: str) -> None:
    """Sets ``Refusal(code, detail)`` on the rows of ``bad`` (a bool mask) that have no reason yet."""
    reasons[np.asarray(bad, dtype=bool) & np.equal(reasons, None)] = Refusal(code, detail)


def missing_fields(names: tuple[str, ...], reports: object, who: str) -> Refusal | None:
    """A ``missing_field`` refusal naming the fields of ``names`` that ``reports`` lacks (None: all
    present)."""
    missing = [f for f in names if getattr(reports, f) is None]
    if not missing:
        return None
    return Refusal("missing_field", f"missing field(s) {', '.join(missing)} for {who}")


@dataclasses.dataclass(frozen=True)
class PayloadField:
    """One report field a mechanism uses.

    Attributes:
        name: the report field (a key of :data:`WIRE_FIELDS`).
        dtype: the numpy type of its entries (:data:`WIRE_DTYPES` of ``name``).
        length: None: one scalar per report (``reals``: an array of exactly one double on the wire);
            an int: exactly that many entries per report, a ``(n, length)`` array (``bits``: bytes);
            ``(min_len, max_len)``: a variable length (declarable; the validator refuses to check it).
        low, high: inclusive bounds of every entry (None: unbounded); for ``bits``, of the index of every
            set bit (the padding bits above ``high`` must be zero).
        invalid: reason code of a wrong type or length (``invalid_seed`` for seeds).
        outside: reason code of an entry outside ``[low, high]``.
    """

    name: str
    dtype: str
    length: int | tuple[int, int] | None = None
    low: float | None = None
    high: float | None = None
    invalid: str = "invalid_payload"
    outside: str = "out_of_domain"

    def __post_init__(self) -> None:
        if self.name not in WIRE_FIELDS:
            raise ValueError(f"unknown report field {self.name!r}; choose one of {list(WIRE_FIELDS)}")
        if self.dtype != WIRE_DTYPES[self.name]:
            want = WIRE_DTYPES[self.name]
            raise ValueError(f"report field {self.name} has dtype {want}, not {self.dtype!r}")
        n = self.length
        if isinstance(n, tuple):
            if len(n) != 2 or not 0 <= n[0] <= n[1]:
                raise ValueError(f"{self.name}: length must be (min_len, max_len), got {n!r}")
        elif n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"{self.name}: length must be a positive integer, got {n!r}")
        if self.name == "bits" and not isinstance(n, int):
            raise ValueError("bits: a packed bit vector has a fixed length in bytes")
        for code in (self.invalid, self.outside):
            if code not in ORACLE_REASONS:
                raise ValueError(f"{self.name}: unknown reason code {code!r}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"{self.name}: low {self.low} above high {self.high}")

    @property
    def wire(self) -> str:
        """The Avro field of the report schema."""
        return WIRE_FIELDS[self.name]

    @property
    def width(self) -> int | None:
        """Entries per report of a fixed-length field (None: a scalar)."""
        if isinstance(self.length, tuple):
            raise ValueError(f"{self.name} has a variable length {self.length}")
        return self.length

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None


class Violation(NamedTuple):
    """A payload the spec refuses: the reason code, what is wrong, and the Avro field and value (as a
    ``fastavro`` record holds it) that commit it."""

    code: str
    what: str
    wire: str
    value: object
    #: the value fits the report schema's type (False: only another writer schema carries it)
    schema_valid: bool = True


@dataclasses.dataclass(frozen=True)
class PayloadSpec:
    """The payload of a mechanism's reports: its fields, in the order the validator checks them."""

    fields: tuple[PayloadField, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"a report field is declared twice: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        """The report fields used (the mechanism's ``report_fields``)."""
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> PayloadField | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def unused(self) -> tuple[str, ...]:
        """Report fields the mechanism does not use (a report carrying one is refused)."""
        return tuple(f for f in WIRE_FIELDS if f not in self.names)

    def violations(self) -> Iterator[Violation]:
        """Each violation the spec implies: every field absent (``missing_field``); a field of the wrong
        type (its ``invalid`` code; ``schema_valid`` False) or, of fixed length, one entry too long; a
        non-finite double (``invalid``); an entry one step beyond ``low`` and ``high`` (``outside``; a set
        padding bit for ``bits``); and a field the mechanism does not use (``invalid_payload``)."""
        for f in self.fields:
            yield Violation("missing_field", f"{f.wire} absent", f.wire, None)
        for f in self.fields:
            n = 1 if f.length is None else f.width
            yield from _field_violations(f, n)
        example = {"values": 1, "seeds": 1, "bits": b"\x01", "items": [0], "reals": [0.5]}
        for name in self.unused:
            wire = WIRE_FIELDS[name]
            yield Violation("invalid_payload", f"{wire} not used", wire, example[name])


def _field_violations(f: PayloadField, n: int) -> Iterator[Violation]:
    wrong_type = {"bits": "bits", "reals": ["x"] * n, "items": [0.5] * n}.get(f.name, "three")
    yield Violation(f.invalid, f"{f.wire} of the wrong type", f.wire, wrong_type, False)
    if f.name == "bits":
        yield Violation(f.invalid, f"bits of {n + 1} bytes", f.wire, bytes(n + 1))
        if f.high is not None and f.high + 1 < 8 * n:
            top = int(f.high) + 1
            raw = bytearray(n)
            raw[top // 8] |= 1 << (top % 8)
            yield Violation(f.outside, f"bit {top} set", f.wire, bytes(raw))
        return
    if f.length is not None:
        yield Violation(f.invalid, f"{f.wire} of {n + 1} entries", f.wire, [_inside(f)] * (n + 1))
    if f.dtype == "float64":
        yield Violation(f.invalid, f"{f.wire} not finite", f.wire, [math.inf] * n)
    for edge, step in ((f.low, -1), (f.high, 1)):
        if edge is None:
            continue
        if f.dtype == "float64":
            beyond = float(edge) + step * max(1.0, abs(float(edge)) * 1e-3)
        else:
            beyond = int(edge) + step
            if not -(1 << 63) <= beyond < (1 << 63):
                continue
        value = [beyond] * n if f.length is not None or f.dtype == "float64" else beyond
        yield Violation(f.outside, f"{f.wire} = {beyond!r}", f.wire, value)


def _inside(f: PayloadField) -> object:
    """An entry within the field's bounds."""
    lo = f.low if f.low is not None else (f.high if f.high is not None else 0)
    return float(lo) if f.dtype == "float64" else int(lo)


#: What a client encodes: one value of ``[0, d)``, one bounded real (or one per attribute), a sparse vector,
#: a record of attribute values, a string of bytes (heavy hitters).
WIRE_INPUTS: tuple[str, ...] = ("categorical", "real", "sparse", "records", "strings")
#: The byte procedures of ``docs/wire_format.md``: frequency oracles (section 3), memoized mechanisms (6),
#: numeric mechanisms on the integer grid (7), sparse vectors (8), heavy hitters (10).
WIRE_PROCEDURES: tuple[str, ...] = ("frequency", "memo", "numeric", "sparse", "heavy_hitters")


@dataclasses.dataclass(frozen=True)
class WireSpec:
    """How a mechanism's reports are made on a device, declared beside its payload.

    Attributes:
        inputs: what a client encodes (:data:`WIRE_INPUTS`).
        procedure: the byte procedure other clients reproduce byte for byte (:data:`WIRE_PROCEDURES`), or
            None when there is none.
        vectors: the conformance vector file of the procedure (its stem in ``schemas/vectors/v<N>/``,
            e.g. ``encode_grr``); required with ``procedure``.
        clients: the client implementations besides the Python reference (``typescript``).
        reason: why there is no procedure and no vectors; required without ``procedure``.
    """

    inputs: str
    procedure: str | None = None
    vectors: str | None = None
    clients: tuple[str, ...] = ()
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "clients", tuple(self.clients))
        if self.inputs not in WIRE_INPUTS:
            raise ValueError(f"unknown wire inputs {self.inputs!r}; choose one of {list(WIRE_INPUTS)}")
        if self.procedure is None:
            if not self.reason.strip():
                raise ValueError("a mechanism without a byte procedure states the reason")
            if self.vectors is not None or self.clients:
                raise ValueError("vectors and clients need a byte procedure")
            return
        if self.procedure not in WIRE_PROCEDURES:
            known = list(WIRE_PROCEDURES)
            raise ValueError(f"unknown byte procedure {self.procedure!r}; choose one of {known}")
        if not self.vectors:
            raise ValueError(f"byte procedure {self.procedure!r} without its conformance vectors")
        if self.reason:
            raise ValueError("a mechanism with a byte procedure needs no reason")


def declared_wire(mechanism: object) -> WireSpec | None:
    """The :class:`WireSpec` a mechanism (class or instance) declares, None when it declares none.

    A spec with a byte procedure names one mechanism's vectors, so it counts only on the class that
    declares it; a stated reason without one (``procedure`` None) covers the subclasses too."""
    cls = mechanism if isinstance(mechanism, type) else type(mechanism)
    own = vars(cls).get("wire")
    if isinstance(own, WireSpec):
        return own
    inherited = getattr(cls, "wire", None)
    if isinstance(inherited, WireSpec) and inherited.procedure is None:
        return inherited
    return None
