"""Bad reports for the dead-letter demonstration: every kind of report the aggregator must refuse.

:func:`bad_records` spoils valid reports of one group (the kind's bad-record template) in every way the
report schema can carry, keyed by the reason the aggregator must give; :func:`bad_records_other_schema`
needs another writer schema (wrong types, absent fields); :func:`write_bad_files` writes both and an
undecodable file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastavro
import numpy as np

from ldp.task import Task
from simulator.population import sample_group
from wire.records import reports_to_records, write_report_file
from wire.validate import declared_payload

__all__ = [
    "GARBAGE",
    "bad_records",
    "bad_records_other_schema",
    "bad_report_variants",
    "write_bad_files",
]

#: The bytes of the undecodable ``garbage.avro``.
GARBAGE = b"this is not an Avro container\x00\xff" * 8


def bad_report_variants(
    good: Sequence[dict[str, Any]], *, task_id: str, schema_version: int, n_groups: int, oracle: Any
) -> dict[str, list[dict[str, Any]]]:
    """Every kind of bad report the report schema can carry, made from valid records ``good`` of one
    group, keyed by the dead-letter reason the aggregator must give.

    Kinds: another task, an unknown schema version, a group outside ``[0, n_groups)``, and each payload
    violation the oracle's declared payload implies (:meth:`ldp.payload.PayloadSpec.violations`: a field
    missing, too long, not finite, beyond its bounds, a field it does not use) that the report schema's
    types can carry.
    """
    out: dict[str, list[dict[str, Any]]] = {}

    def variant(reason: str, **changes: Any) -> None:
        out.setdefault(reason, []).extend({**r, **changes} for r in good)

    variant("wrong_task", task_id=task_id + "-other")
    variant("wrong_schema_version", schema_version=schema_version + 1)
    variant("invalid_group", group=n_groups)
    for v in declared_payload(oracle).violations():
        if v.schema_valid:
            variant(v.code, **{v.wire: v.value})
    return out


def bad_records(task: Task, k: int, start_ms: int, *, seed: Any = None) -> dict[str, list[dict[str, Any]]]:
    """``k`` records of every kind of bad report that the report schema can carry, by expected reason.

    Records that need a different writer schema (wrong types, absent fields) are in
    :func:`bad_records_other_schema`.
    """
    rng = np.random.default_rng(seed)
    oracle, group, encode = sample_group(task)
    good = reports_to_records(
        task.task_id, encode(k, rng), np.full(k, start_ms), group, schema_version=task.schema_version
    )
    return bad_report_variants(
        good, task_id=task.task_id, schema_version=task.schema_version, n_groups=task.n_groups, oracle=oracle
    )


def bad_records_other_schema(task: Task, k: int, start_ms: int) -> tuple[dict, dict[str, list[dict]]]:
    """A writer schema where payload types are wrong and ``task_id`` is optional, with records that
    exercise ``invalid_seed``, ``invalid_payload``, ``missing_field`` (absent) and ``invalid_event_time``."""
    schema = {
        "type": "record",
        "name": "Report",
        "namespace": "org.example.badclient",
        "fields": [
            {"name": "task_id", "type": ["null", "string"], "default": None},
            {"name": "schema_version", "type": "int"},
            {"name": "event_time", "type": ["null", "long", "string"], "default": None},
            {"name": "value", "type": ["null", "long", "string"], "default": None},
            {"name": "seed", "type": ["null", "long", "string"], "default": None},
        ],
    }
    base = {
        "task_id": task.task_id,
        "schema_version": task.schema_version,
        "event_time": start_ms,
        "value": 0,
        "seed": 12345,
    }
    oracle, _, _ = sample_group(task)
    fields = declared_payload(oracle).names
    if "values" not in fields and "seeds" in fields:  # a value would be refused first (a field not used)
        base["value"] = None
    out = {
        "missing_field": [{**base, "task_id": None} for _ in range(k)],
        "invalid_event_time": [{**base, "event_time": "yesterday"} for _ in range(k)],
    }
    if "seeds" in fields:
        out["invalid_seed"] = [{**base, "seed": "0xdeadbeef"} for _ in range(k)]
    if "values" in fields:
        out["invalid_payload"] = [{**base, "value": "three"} for _ in range(k)]
    return schema, out


def write_bad_files(task: Task, out: Path, k: int, start_ms: int, *, seed: Any = None) -> dict[str, int]:
    """Writes ``bad-records.avro``, ``bad-records-other-schema.avro`` and an undecodable ``garbage.avro``.

    Returns the number of bad records per expected reason (the garbage file counts as one
    ``undecodable``).
    """
    counts: dict[str, int] = {}
    recs = bad_records(task, k, start_ms, seed=seed)
    with open(out / "bad-records.avro", "wb") as fh:
        write_report_file(fh, [r for rs in recs.values() for r in rs])
    schema, other = bad_records_other_schema(task, k, start_ms)
    with open(out / "bad-records-other-schema.avro", "wb") as fh:
        fastavro.writer(fh, fastavro.parse_schema(schema), [r for rs in other.values() for r in rs])
    (out / "garbage.avro").write_bytes(GARBAGE)
    for src in (recs, other):
        for reason, rs in src.items():
            counts[reason] = counts.get(reason, 0) + len(rs)
    counts["undecodable"] = 1
    return counts
