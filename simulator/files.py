"""Report files of a simulated population: Avro logs with event times spread over a span, and the truth.

:func:`simulate_files` writes ``reports-KKKKK-of-NNNNN.avro`` (user ``i`` has the ``i``-th smallest event
time, each file one time slice), ``truth.json`` and the kind's truth files, and optionally the bad-record
files of :mod:`simulator.bad`. Avro blocks are encoded with numpy (``wire.encode.write_reports``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
import numpy as np

import schemas
from ldp.task import Task
from simulator.bad import write_bad_files
from simulator.population import (
    DEFAULT_START,
    TrieLevels,
    base_truth,
    client_times,
    event_times,
    make_population,
    parse_iso8601_ms,
)
from wire.encode import write_reports

__all__ = ["BLOCK_RECORDS", "simulate_files"]

BLOCK_RECORDS = 1 << 15  # reports per Avro block


def simulate_files(
    task: Task,
    users: int | None,
    dataset: str | None,
    output: str | Path,
    *,
    seed: int | None = None,
    files: int = 4,
    start_ms: int | None = None,
    duration_s: float = 3600.0,
    codec: str = "null",
    batch_size: int = 1 << 18,
    inject_bad: int = 0,
    assignment: str = "random",
    trie_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Writes ``files`` Avro report logs and the ground truth of ``users`` simulated clients of ``task``
    (any kind) under ``output``; returns the truth dict (also ``output/truth.json``). A trie-mode task's
    clients report each file at the level published in ``trie_dir`` when the file's first block is
    encoded (level 0 without one; :class:`~simulator.population.TrieLevels`); ``truth["trie_levels"]``
    lists each file's level."""
    if files < 1:
        raise ValueError(f"files must be >= 1, got {files}")
    if duration_s < 0:
        raise ValueError(f"duration must be >= 0 seconds, got {duration_s}")
    if inject_bad < 0:
        raise ValueError(f"inject_bad must be >= 0, got {inject_bad}")
    trie = trie_dir is not None or getattr(task, "mode", None) == "trie"
    levels = TrieLevels(task, trie_dir) if trie else None
    pop = make_population(task, users, dataset, seed=seed, batch_size=batch_size, assignment=assignment)
    if levels is not None:
        pop.level_of = levels  # type: ignore[attr-defined]  # the heavy_hitters population's hook
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    start_ms = parse_iso8601_ms(DEFAULT_START) if start_ms is None else int(start_ms)
    times = client_times(task, event_times(pop.time_rng, pop.n_users, start_ms, duration_s))
    bounds = np.linspace(0, pop.n_users, files + 1).astype(np.int64)
    handles = [open(out / f"reports-{k:05d}-of-{files:05d}.avro", "wb") for k in range(files)]
    try:
        schema = schemas.report_schema()
        writers = [fastavro.write.Writer(fh, schema, codec=codec, sync_interval=1 << 20) for fh in handles]
        for k, chunk in pop.chunks(bounds):
            write_reports(
                handles[k], writers[k], task.task_id, chunk.reports, times[chunk.users], chunk.groups,
                task.schema_version, codec, BLOCK_RECORDS,
            )  # fmt: skip
        for w in writers:
            w.flush()
    finally:
        for fh in handles:
            fh.close()
    truth = {**base_truth(task, pop, dataset, seed), **pop.truth(), **pop.write_truth_files(out)}
    truth.update({"start_ms": start_ms, "duration_s": float(duration_s), "files": files})
    if levels is not None:
        truth["trie_levels"] = [levels.blocks.get(k) for k in range(files)]
    if inject_bad:
        truth["bad_records"] = write_bad_files(task, out, inject_bad, start_ms, seed=pop.bad_rng)
    (out / "truth.json").write_text(json.dumps(truth) + "\n", encoding="utf-8")
    return truth
