"""The oracle seam to the end: every registered mechanism declares its wire spec beside its payload, and
the lists of the wire layer, the TypeScript client and ``oracle_spec`` are derived from the registries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ldp.oracles
from ldp.longitudinal.memo import MEMO_MECHANISMS
from ldp.oracles import GRR, MECHANISMS, make_oracle
from ldp.payload import PayloadField, WireSpec, declared_wire
from ldp.rangequery.registry import oracle_spec
from wire import vectors
from wire.registry import byte_mechanisms, client_mechanisms, registered_mechanisms, wire_problems

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "schemas" / "vectors" / f"v{vectors.WIRE_VECTORS_VERSION}"
TS_SRC = ROOT / "clients" / "typescript" / "src"


def test_every_registered_mechanism_has_vectors_or_a_stated_reason() -> None:
    assert wire_problems(VECTORS) == []
    regs = {r.registry for r in registered_mechanisms()}
    assert {"frequency", "memo", "numeric", "sparse", "range"} <= regs


class _Unspecified(GRR):
    """A registered oracle that declares no wire spec of its own (GRR's vectors are not its)."""

    name = "tmp-unspecified"


class _Explained(GRR):
    name = "tmp-explained"
    wire = WireSpec("categorical", reason="a test mechanism: no device ever runs it")


def test_a_registered_mechanism_without_vectors_or_reason_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ldp.oracles.MECHANISMS, "tmp-unspecified", _Unspecified)
    monkeypatch.setitem(ldp.oracles.MECHANISMS, "tmp-explained", _Explained)
    problems = wire_problems(VECTORS)
    assert len(problems) == 1 and "'tmp-unspecified'" in problems[0]
    assert "declares no wire spec" in problems[0]
    assert "tmp-explained" not in vectors.BYTE_MECHANISMS


def test_borrowed_vectors_or_a_missing_file_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    class Borrowed(GRR):
        name = "tmp-borrowed"
        wire = WireSpec("categorical", "frequency", "encode_grr")

    class Missing(GRR):
        name = "tmp-missing"
        wire = WireSpec("categorical", "frequency", "encode_tmp-missing")

    monkeypatch.setitem(ldp.oracles.MECHANISMS, "tmp-borrowed", Borrowed)
    monkeypatch.setitem(ldp.oracles.MECHANISMS, "tmp-missing", Missing)
    problems = wire_problems(VECTORS)
    assert any("'tmp-borrowed'" in p and "not its own" in p for p in problems)
    assert any("'tmp-missing'" in p and "no vector file" in p for p in problems)
    assert len(problems) == 2


def test_wire_spec_refuses_half_declarations() -> None:
    with pytest.raises(ValueError, match="states the reason"):
        WireSpec("categorical")
    with pytest.raises(ValueError, match="without its conformance vectors"):
        WireSpec("categorical", "frequency")
    with pytest.raises(ValueError, match="unknown wire inputs"):
        WireSpec("bytes", reason="x")
    with pytest.raises(ValueError, match="unknown byte procedure"):
        WireSpec("categorical", "morse", "encode_x")
    with pytest.raises(ValueError, match="need a byte procedure"):
        WireSpec("categorical", vectors="encode_x", reason="x")


def test_vectors_only_count_on_the_class_that_declares_them() -> None:
    assert declared_wire(_Unspecified) is None
    assert declared_wire(_Explained).reason  # type: ignore[union-attr]
    assert declared_wire(make_oracle("blh", 1.0, 8)).vectors == "encode_blh"  # type: ignore[union-attr]


def test_byte_lists_are_the_registries() -> None:
    assert vectors.BYTE_MECHANISMS == tuple(MECHANISMS)
    assert vectors.MEMO_BYTE_MECHANISMS == tuple(MEMO_MECHANISMS)
    assert vectors.BYTE_MECHANISMS == byte_mechanisms("frequency", MECHANISMS)
    for name in vectors.BYTE_MECHANISMS:
        assert (VECTORS / f"encode_{name}.json").is_file()
    for name in vectors.NUMERIC_BYTE_MECHANISMS:
        assert (VECTORS / f"encode_numeric_{name}.json").is_file()


def _ts_list(path: Path, const: str) -> tuple[str, ...]:
    m = re.search(rf"export const {const} = \[([^\]]*)\] as const;", path.read_text(encoding="utf-8"))
    assert m is not None, f"{path.name} has no `export const {const} = [...] as const`"
    return tuple(re.findall(r'"([^"]+)"', m.group(1)))


def test_typescript_lists_are_the_registrys() -> None:
    """The TypeScript client's mechanism lists name exactly the mechanisms whose wire spec lists the
    ``typescript`` client, in registry order."""
    assert _ts_list(TS_SRC / "oracles.ts", "MECHANISMS") == client_mechanisms("typescript", MECHANISMS)
    assert _ts_list(TS_SRC / "memo.ts", "MEMO_MECHANISMS") == client_mechanisms("typescript", MEMO_MECHANISMS)


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_oracle_spec_is_the_oracles_own(name: str) -> None:
    oracle = make_oracle(name, 1.0, 64)
    spec = oracle_spec(oracle)
    assert spec == oracle.spec()
    assert list(spec)[:2] == ["mechanism", "domain_size"] and spec["mechanism"] == name
    assert spec["domain_size"] == 64
    if name in ("olh", "blh"):
        assert spec["family"] == oracle.family.name and spec["g"] == oracle.g
    if name == "ss":
        assert spec["k"] == oracle.k


def test_payload_fields_still_declared_beside_the_wire_spec() -> None:
    for r in registered_mechanisms():
        if r.registry in ("frequency", "memo"):
            fields = r.cls(1.0, 16).payload.fields
            assert fields and all(isinstance(f, PayloadField) for f in fields)
