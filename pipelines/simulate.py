"""Simulate a population of clients that perturb their values and send LDP reports.

Batch mode writes Avro report logs and the ground truth::

    python -m pipelines.simulate --task TASK.json --users 1000000 --dataset zipf:1.1 --seed 7 \
        --output DIR [--files 4] [--start 2026-01-01T00:00:00Z --duration 3600]

-> ``DIR/reports-00000-of-00004.avro`` ... (event times spread uniformly over the duration, each file one
time slice, sorted by event time) and ``DIR/truth.json`` = ``{"n_users": N, "frequencies": [...]}``
(the empirical value distribution; the aggregator never reads it).

Streaming mode publishes to Pub/Sub instead (``PUBSUB_EMULATOR_HOST`` is honoured)::

    python -m pipelines.simulate --task TASK.json --users 100000 \
        --pubsub_topic projects/P/topics/T --rate 5000

Each message is an Avro object container of up to ``--message_size`` reports stamped with the current
time (attribute ``event_time`` = milliseconds). ``--inject_bad K`` adds K records of every kind of bad
report (and one undecodable file / message) so the dead-letter path can be demonstrated.

Generation is vectorized: values from :mod:`ldp.datasets`, reports from ``oracle.encode``, with one
``numpy.random.SeedSequence`` (``--seed``) spawning independent generators for values, reports, times.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastavro
import numpy as np

import schemas
from ldp.datasets import iter_population
from ldp.task import CollectionTask
from pipelines.common import bad_report_variants, load_task_or_exit, parse_iso8601_ms
from transforms.avro_fast import write_reports
from transforms.records import encode_report_container, reports_to_records, write_report_file

__all__ = ["run", "simulate_files", "bad_records", "publish"]

DEFAULT_START = "2026-01-01T00:00:00Z"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.simulate", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, help="collection task JSON file")
    p.add_argument("--users", type=int, required=True, help="number of simulated users (one report each)")
    p.add_argument(
        "--dataset", default="zipf", help="zipf[:EXPONENT] (default 1.1), uniform or csv:PATH:COLUMN"
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the simulation (default: OS entropy)")
    p.add_argument("--output", help="directory for the Avro report files and truth.json (batch mode)")
    p.add_argument("--files", type=int, default=4, help="number of Avro files (default 4)")
    p.add_argument(
        "--start", default=DEFAULT_START, help=f"first event time, ISO-8601 (default {DEFAULT_START})"
    )
    p.add_argument("--duration", type=float, default=3600.0, help="event times spread over this many seconds")
    p.add_argument("--codec", default="null", choices=["null", "deflate"], help="Avro block codec")
    p.add_argument("--batch_size", type=int, default=1 << 18, help="users generated per numpy batch")
    p.add_argument(
        "--inject_bad", type=int, default=0, help="add K bad records of every kind (dead-letter demo)"
    )
    p.add_argument(
        "--pubsub_topic", help="publish to this topic (projects/P/topics/T) instead of writing files"
    )
    p.add_argument("--rate", type=float, default=1000.0, help="reports per second when publishing")
    p.add_argument("--message_size", type=int, default=500, help="max reports per Pub/Sub message")
    return p


def _event_times(rng: np.random.Generator, n: int, start_ms: int, duration_s: float) -> np.ndarray:
    return np.sort(start_ms + np.floor(rng.random(n) * duration_s * 1000).astype(np.int64))


def simulate_files(
    task: CollectionTask,
    users: int,
    dataset: str,
    output: str | Path,
    *,
    seed: int | None = None,
    files: int = 4,
    start_ms: int | None = None,
    duration_s: float = 3600.0,
    codec: str = "null",
    batch_size: int = 1 << 18,
    inject_bad: int = 0,
) -> dict[str, Any]:
    """Writes ``files`` Avro report logs and ``truth.json`` under ``output``; returns the truth dict."""
    if users < 1 or files < 1:
        raise ValueError("--users and --files must be >= 1")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    oracle = task.make_oracle()
    d = oracle.d
    ss = np.random.SeedSequence(seed)
    r_val, r_enc, r_time, r_grp = (np.random.default_rng(s) for s in ss.spawn(4))
    start_ms = parse_iso8601_ms(DEFAULT_START) if start_ms is None else start_ms
    times = _event_times(r_time, users, start_ms, duration_s)
    counts = np.zeros(d, dtype=np.int64)
    bounds = np.linspace(0, users, files + 1).astype(np.int64)
    writers, handles = [], []
    for k in range(files):
        fh = open(out / f"reports-{k:05d}-of-{files:05d}.avro", "wb")
        handles.append(fh)
        writers.append(fastavro.write.Writer(fh, schemas.report_schema(), codec=codec, sync_interval=1 << 20))
    try:
        done = 0
        for values in iter_population(dataset, users, d, batch_size=batch_size, rng=r_val):
            m = len(values)
            counts += np.bincount(values, minlength=d)
            reports = oracle.encode(values, rng=r_enc)
            groups = r_grp.integers(0, task.n_groups, m) if task.n_groups > 1 else np.zeros(m, np.int64)
            # users [done, done + m) go to the files whose slices they overlap
            for k in range(files):
                lo, hi = max(bounds[k], done), min(bounds[k + 1], done + m)
                if lo < hi:
                    rows = slice(lo - done, hi - done)
                    write_reports(
                        handles[k], writers[k], task.task_id, reports.take(rows), times[lo:hi], groups[rows],
                        task.schema_version, codec,
                    )
            done += m
        for w in writers:
            w.flush()
    finally:
        for fh in handles:
            fh.close()
    truth = {
        "task_id": task.task_id,
        "mechanism": oracle.name,
        "n_users": int(users),
        "dataset": dataset,
        "seed": seed,
        "frequencies": (counts / users).tolist(),
    }
    if inject_bad:
        truth["bad_records"] = write_bad_files(task, out, inject_bad, start_ms, seed=ss.spawn(1)[0])
    (out / "truth.json").write_text(json.dumps(truth) + "\n", encoding="utf-8")
    return truth


def bad_records(
    task: CollectionTask, k: int, start_ms: int, *, seed: Any = None
) -> dict[str, list[dict[str, Any]]]:
    """``k`` records of every kind of bad report that the report schema can carry, by expected reason.

    Records that need a different writer schema (wrong types, absent fields) are in
    :func:`bad_records_other_schema`.
    """
    oracle = task.make_oracle()
    rng = np.random.default_rng(seed)
    good = reports_to_records(
        task.task_id, oracle.encode(rng.integers(0, oracle.d, k), rng=rng), np.full(k, start_ms), 0
    )
    return bad_report_variants(
        good, task_id=task.task_id, schema_version=task.schema_version, n_groups=task.n_groups, oracle=oracle
    )


def bad_records_other_schema(
    task: CollectionTask, k: int, start_ms: int
) -> tuple[dict, dict[str, list[dict]]]:
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
    out = {
        "missing_field": [{**base, "task_id": None} for _ in range(k)],
        "invalid_event_time": [{**base, "event_time": "yesterday"} for _ in range(k)],
    }
    oracle = task.make_oracle()
    if "seeds" in oracle.report_fields:
        out["invalid_seed"] = [{**base, "seed": "0xdeadbeef"} for _ in range(k)]
    if "values" in oracle.report_fields:
        out["invalid_payload"] = [{**base, "value": "three"} for _ in range(k)]
    return schema, out


def write_bad_files(
    task: CollectionTask, out: Path, k: int, start_ms: int, *, seed: Any = None
) -> dict[str, int]:
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
    (out / "garbage.avro").write_bytes(b"this is not an Avro container\x00\xff" * 8)
    for src in (recs, other):
        for reason, rs in src.items():
            counts[reason] = counts.get(reason, 0) + len(rs)
    counts["undecodable"] = 1
    return counts


def publish(
    task: CollectionTask,
    users: int,
    dataset: str,
    topic: str,
    *,
    seed: int | None = None,
    rate: float = 1000.0,
    message_size: int = 500,
    inject_bad: int = 0,
    clock: Any = time,
    heartbeat: Any = None,
) -> dict[str, Any]:
    """Publishes ``users`` reports to ``topic`` at about ``rate`` reports/s, event time = publish time.

    Creates the topic when it does not exist (useful with the emulator). Afterwards, while the callable
    ``heartbeat()`` returns true, publishes an empty report container every second: it carries no report
    but lets a DirectRunner streaming job, whose Pub/Sub watermark moves only when a pull returns, close
    its last windows. Returns the truth dict.
    """
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    try:
        publisher.get_topic(request={"topic": topic})
    except gexc.NotFound:
        publisher.create_topic(request={"name": topic})
    oracle = task.make_oracle()
    ss = np.random.SeedSequence(seed)
    r_val, r_enc, r_grp = (np.random.default_rng(s) for s in ss.spawn(3))
    values = np.concatenate(list(iter_population(dataset, users, oracle.d, rng=r_val)))
    reports = oracle.encode(values, rng=r_enc)
    groups = r_grp.integers(0, task.n_groups, users) if task.n_groups > 1 else np.zeros(users, np.int64)
    futures = []
    t0 = clock.time()
    step = max(1, min(message_size, int(rate)))
    for lo in range(0, users, step):
        hi = min(users, lo + step)
        due = t0 + lo / rate
        delay = due - clock.time()
        if delay > 0:
            clock.sleep(delay)
        now = int(clock.time() * 1000)
        recs = reports_to_records(
            task.task_id, reports.take(slice(lo, hi)), np.full(hi - lo, now), groups[lo:hi]
        )
        futures.append(publisher.publish(topic, encode_report_container(recs), event_time=str(now)))
    if inject_bad:
        now = int(clock.time() * 1000)
        for recs in bad_records(task, inject_bad, now, seed=ss.spawn(1)[0]).values():
            futures.append(publisher.publish(topic, encode_report_container(recs), event_time=str(now)))
        futures.append(publisher.publish(topic, b"not avro", event_time=str(now)))
    for f in futures:
        f.result(timeout=60)
    while heartbeat is not None and heartbeat():
        publisher.publish(
            topic, encode_report_container([]), event_time=str(int(clock.time() * 1000))
        ).result()
        clock.sleep(1.0)
    counts = np.bincount(values, minlength=oracle.d)
    return {
        "task_id": task.task_id,
        "mechanism": oracle.name,
        "n_users": int(users),
        "dataset": dataset,
        "seed": seed,
        "frequencies": (counts / users).tolist(),
        "messages": len(futures),
    }


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; returns the truth dict."""
    ns = _parser().parse_args(argv)
    task = load_task_or_exit(ns.task)
    t0 = time.perf_counter()
    if ns.pubsub_topic:
        truth = publish(
            task,
            ns.users,
            ns.dataset,
            ns.pubsub_topic,
            seed=ns.seed,
            rate=ns.rate,
            message_size=ns.message_size,
            inject_bad=ns.inject_bad,
        )
        print(
            f"published {ns.users} reports in {truth['messages']} messages to {ns.pubsub_topic} "
            f"in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        return truth
    if not ns.output:
        raise SystemExit("error: --output DIR is required without --pubsub_topic")
    truth = simulate_files(
        task,
        ns.users,
        ns.dataset,
        ns.output,
        seed=ns.seed,
        files=ns.files,
        start_ms=parse_iso8601_ms(ns.start),
        duration_s=ns.duration,
        codec=ns.codec,
        batch_size=ns.batch_size,
        inject_bad=ns.inject_bad,
    )
    print(
        f"wrote {ns.users} {truth['mechanism']} reports in {ns.files} file(s) to {os.fspath(ns.output)} "
        f"in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return truth


if __name__ == "__main__":
    run()
