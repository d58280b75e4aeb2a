"""Versioned Avro schemas of the aggregator's inputs and outputs.

The ``.avsc`` files in this package are package data (``setup.py`` ships them to remote workers):

* ``report.avsc``: one LDP report (task id, schema version, event time, group / grid key and the
  mechanism's payload in the fields of :class:`ldp.reports.Reports`);
* ``estimate.avsc``: the estimates of one task, group and window;
* ``dead_letter.avsc``: a refused report or undecodable input with the reason.

All three live in the Avro namespace ``org.ldpbeam.v1``. A breaking change of a schema means a new
``SCHEMA_VERSION`` and a new namespace; readers refuse reports whose ``schema_version`` they do not
know (they are dead-lettered, not guessed at).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import fastavro

__all__ = [
    "SCHEMA_VERSION",
    "NAMESPACE",
    "SCHEMA_NAMES",
    "load_schema",
    "available_schemas",
    "parsed_schema",
    "report_schema",
    "estimate_schema",
    "dead_letter_schema",
    "validate_record",
]

SCHEMA_VERSION = 1
NAMESPACE = "org.ldpbeam.v1"
SCHEMA_NAMES = ("report", "estimate", "dead_letter")


def available_schemas() -> tuple[str, ...]:
    """Names of every ``.avsc`` file shipped in this package (the core three plus those of later jobs)."""
    return tuple(
        sorted(
            p.name[: -len(".avsc")] for p in resources.files(__name__).iterdir() if p.name.endswith(".avsc")
        )
    )


def load_schema(name: str) -> dict[str, Any]:
    """The JSON of schema ``name`` (one of :func:`available_schemas`, e.g. :data:`SCHEMA_NAMES`) as a fresh
    dict."""
    if not isinstance(name, str) or name not in available_schemas():
        raise ValueError(f"unknown schema {name!r}; expected one of {available_schemas()}")
    text = resources.files(__name__).joinpath(f"{name}.avsc").read_text(encoding="utf-8")
    return json.loads(text)


@functools.cache
def parsed_schema(name: str) -> dict[str, Any]:
    """Schema ``name`` parsed (and so checked) by ``fastavro.parse_schema``; cached.

    The returned object is shared: do not mutate it.
    """
    return fastavro.parse_schema(load_schema(name))


def report_schema() -> dict[str, Any]:
    """Parsed report schema."""
    return parsed_schema("report")


def estimate_schema() -> dict[str, Any]:
    """Parsed estimate schema."""
    return parsed_schema("estimate")


def dead_letter_schema() -> dict[str, Any]:
    """Parsed dead-letter schema."""
    return parsed_schema("dead_letter")


def validate_record(name: str, record: dict[str, Any]) -> None:
    """Raises ``ValueError`` when ``record`` does not conform to schema ``name``."""
    from fastavro.validation import validate

    try:
        validate(record, parsed_schema(name), raise_errors=True)
    except Exception as exc:  # fastavro raises its own ValidationError
        raise ValueError(f"record does not match schema {name!r}: {exc}") from exc
