"""Versioned Avro schemas of the aggregator's inputs and outputs.

The ``.avsc`` files in this package are package data (``setup.py`` ships them to remote workers):

* ``report.avsc``: one LDP report (task id, schema version, event time, group / grid key and the
  mechanism's payload in the fields of :class:`ldp.reports.Reports`);
* ``estimate.avsc``: the estimates of one task, group and window;
* ``dead_letter.avsc``: a refused report or undecodable input with the reason;
* ``range_answer.avsc`` / ``range_model.avsc``: the range-query job's answers and window models;
* ``task.schema.json``: the JSON Schema of the collection-task file (:func:`task_schema`), generated from
  the declarations of ``ldp.task`` (``python -m ldp.task --schema``); ``ldp.task.parse_task`` accepts
  exactly what it accepts, plus the checks listed in ``ldp.task.SEMANTIC_CHECKS``.

The Avro schemas live in the namespace ``org.ldpbeam.v<SCHEMA_VERSION>``. A breaking change of the
report wire format, of a schema or of what a payload means, is a new ``SCHEMA_VERSION`` and a new
namespace; readers refuse reports whose ``schema_version`` is not in :data:`SUPPORTED_SCHEMA_VERSIONS`
(they are dead-lettered as ``wrong_schema_version``, never guessed at or mixed with current ones).

Versions:

* 1: the first wire format (OLH hashed with the GF(p) linear family, Subset Selection items in the
  order the client drew them).
* 2 (current): OLH reports of tasks with ``hash.family`` ``"gf2-affine"`` (the default; ``"linear-gf"``
  stays possible for old tasks), Subset Selection items sorted. The fields are those of version 1, but a
  version 1 report decoded under version 2 rules would be counted wrongly, so version 1 reports are
  refused (``wrong_schema_version``). Tasks must say ``"schema_version": 2`` or leave it out.
* 3: the numeric kind's integer grid wire (``docs/wire_format.md``, section 7): ``reals`` carries integer
  messages drawn by exact samplers, never a computed double. Numeric tasks are version 3 (the default of
  their kind); a version 2 numeric task (floating-point reals) is refused (``float_reals_retired``), and
  version 2 reports of a version 3 task are ``wrong_schema_version``. Range tasks of the ``msw`` method
  are version 3 too (integer Square Wave messages); other range methods and other kinds stay at version 2.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import fastavro

__all__ = [
    "SCHEMA_VERSION",
    "SUPPORTED_SCHEMA_VERSIONS",
    "TASK_SCHEMA_FILE",
    "task_schema",
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

SCHEMA_VERSION = 2
#: Report schema versions the aggregator accepts (``ldp.task.SUPPORTED_SCHEMA_VERSIONS`` mirrors it).
SUPPORTED_SCHEMA_VERSIONS = (2, 3)
NAMESPACE = f"org.ldpbeam.v{SCHEMA_VERSION}"
SCHEMA_NAMES = ("report", "estimate", "dead_letter")
TASK_SCHEMA_FILE = "task.schema.json"


def available_schemas() -> tuple[str, ...]:
    """Names of every ``.avsc`` file shipped in this package (the core three plus those of later jobs)."""
    return tuple(
        sorted(
            p.name[: -len(".avsc")] for p in resources.files(__name__).iterdir() if p.name.endswith(".avsc")
        )
    )


def load_schema(name: str) -> dict[str, Any]:
    """The JSON of schema ``name`` (one of :func:`available_schemas`, e.g. :data:`SCHEMA_NAMES`, or the rows'
    schema a registered kind ships in its own package, ``ldp.kinds.RowKind.avro``) as a fresh dict."""
    if isinstance(name, str) and name not in available_schemas():
        from ldp.kinds import declared_avro  # a registered kind's rows, their schema in its own package

        declared = declared_avro(name)
        if declared is not None:
            return declared
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


def task_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the collection-task file, as a fresh dict."""
    text = resources.files(__name__).joinpath(TASK_SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)
