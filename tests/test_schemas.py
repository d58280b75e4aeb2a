"""Tests of the package's Avro schemas (schemas/*.avsc)."""

from __future__ import annotations

import io

import fastavro
import pytest

import schemas


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_schema_parses_with_namespace(name):
    raw = schemas.load_schema(name)
    assert raw["namespace"] == schemas.NAMESPACE == f"org.ldpbeam.v{schemas.SCHEMA_VERSION}"
    parsed = schemas.parsed_schema(name)
    assert parsed["name"].startswith(schemas.NAMESPACE + ".")
    assert schemas.load_schema(name) is not raw  # fresh copies, the cache is not handed out for mutation


def test_every_shipped_schema_parses():
    names = schemas.available_schemas()
    assert set(schemas.SCHEMA_NAMES) <= set(names)
    for name in names:  # schemas added by later jobs are checked too
        assert schemas.parsed_schema(name)["type"] == "record"


def test_unknown_schema_name():
    with pytest.raises(ValueError, match="unknown schema"):
        schemas.load_schema("nope")


def test_report_schema_covers_every_payload_field():
    names = [f["name"] for f in schemas.load_schema("report")["fields"]]
    assert names[:4] == ["task_id", "schema_version", "event_time", "group"]
    assert set(names[4:]) == {"value", "seed", "bits", "items", "reals"}
    et = next(f for f in schemas.load_schema("report")["fields"] if f["name"] == "event_time")
    assert et["type"]["logicalType"] == "timestamp-millis"


def test_report_roundtrip_and_validation():
    rec = {
        "task_id": "t",
        "schema_version": 1,
        "event_time": 1_700_000_000_123,
        "group": 3,
        "value": 2,
        "seed": -(1 << 63),
        "bits": b"\x01\x02",
        "items": [1, 2],
        "reals": [0.25],
    }
    schemas.validate_record("report", rec)
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), [rec])
    back = list(fastavro.reader(io.BytesIO(buf.getvalue())))[0]
    assert back["seed"] == -(1 << 63) and back["bits"] == b"\x01\x02" and back["reals"] == [0.25]
    assert int(back["event_time"].timestamp() * 1000) == 1_700_000_000_123
    with pytest.raises(ValueError, match="does not match"):
        schemas.validate_record("report", {**rec, "seed": 1 << 63})  # not a signed 64-bit long


def test_estimate_and_dead_letter_records_validate():
    est = {
        "task_id": "t",
        "schema_version": 1,
        "group": 0,
        "window_start": None,
        "window_end": None,
        "pane_timing": "ON_TIME",
        "pane_index": 0,
        "is_last_pane": True,
        "n_reports": 10,
        "mechanism": "olh",
        "epsilon": 1.0,
        "domain_size": 2,
        "postprocess": "base",
        "frequencies": [0.5, 0.5],
        "std": [0.1, 0.1],
    }
    schemas.validate_record("estimate", est)
    dl = {
        "reason": "undecodable",
        "detail": None,
        "source": "f.avro",
        "task_id": None,
        "raw_record": None,
        "raw_bytes": b"\x00",
        "dead_letter_time": 0,
    }
    schemas.validate_record("dead_letter", dl)
    with pytest.raises(ValueError):
        schemas.validate_record("dead_letter", {**dl, "reason": None})
