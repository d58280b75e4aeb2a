"""Simulate the clients of any collection task: their values, their LDP reports, written or published.

Frequency tasks (one value per user) and range-query tasks (one record of several attributes per user)
alike; the task file's kind decides. Batch mode writes Avro report logs and the ground truth::

    python -m pipelines.simulate --task TASK.json --users 1000000 --dataset zipf:1.1 --seed 7 \\
        --output DIR --files 4 --start 2026-01-01T00:00:00Z --duration 3600

-> ``DIR/reports-00000-of-00004.avro`` ... (one report per user in ``schemas/report.avsc``; event times
spread uniformly over the duration, user ``i`` has the ``i``-th smallest, each file one time slice; a
shuffled task's (``anonymity.shuffled``) rounded down to ``anonymity.time_precision_s``, as its clients
send them) and
``DIR/truth.json`` (the aggregator never reads it):

* frequency task: ``{"kind": "frequency", "n_users", "frequencies": [...], ...}`` (the empirical value
  distribution);
* range task: ``{"kind": "range", "n_users", "attributes", "group_sizes", "records_file", ...}`` plus
  ``DIR/truth_records.npy``, the raw records (``(n_users, d)``, the smallest unsigned type holding the
  domains; :func:`load_truth_records`).

Streaming mode publishes to a Pub/Sub topic instead (``PUBSUB_EMULATOR_HOST`` is honoured); the
aggregation jobs read it with ``--input_topic`` / ``--input_subscription``::

    python -m pipelines.simulate --task TASK.json --users 100000 --output_topic projects/P/topics/T \\
        --rate 5000

Each message is an Avro object container of up to ``--message_size`` reports stamped with the current
time (attribute ``event_time`` = milliseconds).

``--dataset``: frequency tasks ``zipf[:EXPONENT]`` (default), ``uniform`` or ``csv:PATH:COLUMN`` (the
column holds integers in [0, d), or the task's value labels when it has some: ``"labels"`` or
``"labels_file"``); range tasks ``gaussian[:RHO]`` (default), ``laplace[:RHO]``, ``uniform`` or
``csv:PATH`` (the header names the attributes). ``--assignment`` (range tasks): ``random`` (default)
draws each user's group uniformly (what independent clients do), ``balanced`` deals equal-size groups (the
papers' simulations), ``user_id`` hashes the user index with the task's ``group_salt``. Frequency tasks
with ``n_groups > 1`` assign at random.

``--inject_bad K`` adds K records of every kind of bad report (``bad-records.avro``: another task, an
unknown schema version, a group out of range, missing or out-of-domain payloads, a field the oracle does not
use; ``bad-records-other-schema.avro``: wrong payload types, no task id, bad event times) and one
undecodable ``garbage.avro`` (one undecodable message when publishing), so the dead-letter path can be
demonstrated; ``truth.json["bad_records"]`` counts them by the reason the aggregator must give.

Generation is vectorized (values from :mod:`ldp.datasets` / :mod:`ldp.datasets.multi`, reports from the
oracle's or mechanism's ``encode``, Avro blocks encoded with numpy by :mod:`transforms.avro_fast`), with
one ``numpy.random.SeedSequence`` (``--seed``) spawning independent generators for values, groups,
reports, event times and bad records: 1,000,000 users in about 1-2 s.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastavro
import numpy as np

import schemas
from ldp.kinds import KINDS, kind_of
from ldp.populations import RECORDS_FILE, Chunk, Population
from ldp.task import Task, TaskError, load_task
from pipelines.cli import fail, job_parser, parse_job_args, prepare_output
from transforms.avro_fast import write_reports
from transforms.records import (
    declared_payload,
    encode_report_container,
    reports_to_records,
    write_report_file,
)

__all__ = [
    "ASSIGNMENTS",
    "DEFAULT_START",
    "Chunk",
    "Population",
    "RECORDS_FILE",
    "bad_records",
    "bad_records_other_schema",
    "bad_report_variants",
    "client_times",
    "load_truth_records",
    "make_population",
    "parse_iso8601_ms",
    "publish",
    "run",
    "simulate_files",
    "write_bad_files",
]

_LOG = logging.getLogger(__name__)

DEFAULT_START = "2026-01-01T00:00:00Z"
ASSIGNMENTS = ("random", "balanced", "user_id")
BLOCK_RECORDS = 1 << 15  # reports per Avro block


def parse_iso8601_ms(text: str) -> int:
    """ISO-8601 time (``Z`` or offset; naive means UTC) -> milliseconds since the epoch."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(round(t.timestamp() * 1000))


def make_population(
    task: Task,
    users: int | None,
    dataset: str | None = None,
    *,
    seed: int | np.random.SeedSequence | None = None,
    batch_size: int = 1 << 18,
    assignment: str = "random",
) -> Population:
    """The simulated clients of ``task`` (any registered kind: its ``population``, ``ldp.kinds``).
    ``dataset`` None: the kind's default (zipf for frequency tasks, gaussian for range tasks, ...).
    ``seed``: the run's SeedSequence entropy (None: OS). ``users`` None: only for datasets that define
    their users (the kind's ``users_from_dataset``, e.g. sparse ``csv:`` data)."""
    kind = kind_of(task)
    if kind.population is None:
        raise ValueError(f"task {task.task_id!r}: no simulator for {task.kind!r} tasks")
    dataset = dataset or kind.default_dataset
    assert dataset is not None
    if users is None and not (kind.users_from_dataset and dataset.startswith(kind.users_from_dataset)):
        raise ValueError(f"a {task.kind} task needs a number of users (--users)")
    if users is not None and users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    if assignment not in kind.assignments:
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")
        allowed = ", ".join(kind.assignments)
        raise ValueError(f"assignment {assignment!r} applies to range tasks ({task.kind} tasks: {allowed})")
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return kind.population(task, users, dataset, ss, batch_size=batch_size, assignment=assignment)


def load_truth_records(directory: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    """``(truth dict, records int64 array (n, d))`` of a range task's simulation directory."""
    d = Path(directory)
    truth = json.loads((d / "truth.json").read_text(encoding="utf-8"))
    if "records_file" not in truth:
        raise ValueError(f"{d}: not a range-task simulation (truth.json has no records_file)")
    return truth, np.load(d / truth["records_file"]).astype(np.int64)


# ------------------------------------------------------------------------------------------------------------
# writing files, publishing
# ------------------------------------------------------------------------------------------------------------


def _event_times(rng: np.random.Generator, n: int, start_ms: int, duration_s: float) -> np.ndarray:
    return np.sort(start_ms + np.floor(rng.random(n) * duration_s * 1000).astype(np.int64))


def client_times(task: Task, event_ms: np.ndarray) -> np.ndarray:
    """The event times a client of ``task`` puts in its reports: a shuffled task's
    (``anonymity.shuffled``) rounded down to ``anonymity.time_precision_s``, any other's unchanged."""
    settings = getattr(task, "anonymity", None)
    if settings is None or not settings.shuffled:
        return event_ms
    return settings.round_ms(event_ms)


def _base_truth(task: Task, pop: Population, dataset: str | None, seed: Any) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "kind": task.kind,
        "n_users": int(pop.n_users),
        "dataset": getattr(pop, "dataset", dataset),
        "seed": seed if not isinstance(seed, np.random.SeedSequence) else None,
    }


def simulate_files(
    task: Task,
    users: int,
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
) -> dict[str, Any]:
    """Writes ``files`` Avro report logs and the ground truth of ``users`` simulated clients of ``task``
    (any kind) under ``output``; returns the truth dict (also ``output/truth.json``)."""
    if files < 1:
        raise ValueError(f"files must be >= 1, got {files}")
    if duration_s < 0:
        raise ValueError(f"duration must be >= 0 seconds, got {duration_s}")
    if inject_bad < 0:
        raise ValueError(f"inject_bad must be >= 0, got {inject_bad}")
    pop = make_population(task, users, dataset, seed=seed, batch_size=batch_size, assignment=assignment)
    users = pop.n_users
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    start_ms = parse_iso8601_ms(DEFAULT_START) if start_ms is None else int(start_ms)
    times = client_times(task, _event_times(pop.time_rng, users, start_ms, duration_s))
    bounds = np.linspace(0, users, files + 1).astype(np.int64)
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
    truth = {**_base_truth(task, pop, dataset, seed), **pop.truth(), **pop.write_truth_files(out)}
    truth.update({"start_ms": start_ms, "duration_s": float(duration_s), "files": files})
    if inject_bad:
        truth["bad_records"] = write_bad_files(task, out, inject_bad, start_ms, seed=pop.bad_rng)
    (out / "truth.json").write_text(json.dumps(truth) + "\n", encoding="utf-8")
    return truth


def publish(
    task: Task,
    users: int,
    dataset: str | None,
    topic: str,
    *,
    seed: int | None = None,
    rate: float = 1000.0,
    message_size: int = 500,
    inject_bad: int = 0,
    assignment: str = "random",
    clock: Any = time,
    heartbeat: Any = None,
) -> dict[str, Any]:
    """Publishes the reports of ``users`` simulated clients of ``task`` (any kind) to ``topic`` at about
    ``rate`` reports/s, event time = publish time; returns the truth dict.

    Creates the topic when it does not exist (useful with the emulator). Afterwards, while the callable
    ``heartbeat()`` returns true, publishes an empty report container every second: it carries no report
    but lets a DirectRunner streaming job, whose Pub/Sub watermark moves only when a pull returns, close
    its last windows.
    """
    if rate <= 0 or message_size < 1:
        raise ValueError("rate must be > 0 and message_size >= 1")
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    pop = make_population(task, users, dataset, seed=seed, assignment=assignment)
    users = pop.n_users
    publisher = pubsub_v1.PublisherClient()
    try:
        publisher.get_topic(request={"topic": topic})
    except gexc.NotFound:
        publisher.create_topic(request={"name": topic})
    step = max(1, min(message_size, int(rate)))
    bounds = np.append(np.arange(0, users, step, dtype=np.int64), users)
    futures = []
    t0 = clock.time()
    pending: list[dict[str, Any]] = []
    current = 0

    def send(recs: list[dict[str, Any]], when_ms: int) -> None:
        futures.append(publisher.publish(topic, encode_report_container(recs), event_time=str(when_ms)))

    now = int(clock.time() * 1000)
    for k, chunk in pop.chunks(bounds):
        if k != current:  # block ``current`` is complete: publish it as one message
            send(pending, now)
            pending, current = [], k
        if not pending:  # pace the first chunk of every message
            delay = t0 + int(bounds[k]) / rate - clock.time()
            if delay > 0:
                clock.sleep(delay)
            now = int(clock.time() * 1000)
        n = len(chunk.reports)
        pending += reports_to_records(
            task.task_id, chunk.reports, client_times(task, np.full(n, now, dtype=np.int64)), chunk.groups,
            schema_version=task.schema_version,
        )
    if pending:
        send(pending, now)
    if inject_bad:
        now = int(clock.time() * 1000)
        for recs in bad_records(task, inject_bad, now, seed=pop.bad_rng).values():
            send(recs, now)
        futures.append(publisher.publish(topic, b"not avro", event_time=str(now)))
    for f in futures:
        f.result(timeout=60)
    while heartbeat is not None and heartbeat():
        empty = encode_report_container([])
        publisher.publish(topic, empty, event_time=str(int(clock.time() * 1000))).result()
        clock.sleep(1.0)
    return {**_base_truth(task, pop, dataset, seed), **pop.truth(), "messages": len(futures)}


# ------------------------------------------------------------------------------------------------------------
# bad reports (the dead-letter demonstration)
# ------------------------------------------------------------------------------------------------------------


def _sample_group(task: Task) -> tuple[Any, int, Any]:
    """``(oracle, group, encode(k, rng) -> Reports)`` of one group of the task, for bad-record templates
    (the kind's ``bad_template``, ``ldp.kinds``)."""
    kind = kind_of(task)
    if kind.bad_template is None:
        raise ValueError(f"task {task.task_id!r}: {task.kind} tasks have no bad-record template")
    return kind.bad_template(task)


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
    oracle, group, encode = _sample_group(task)
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
    oracle, _, _ = _sample_group(task)
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
    (out / "garbage.avro").write_bytes(b"this is not an Avro container\x00\xff" * 8)
    for src in (recs, other):
        for reason, rs in src.items():
            counts[reason] = counts.get(reason, 0) + len(rs)
    counts["undecodable"] = 1
    return counts


# ------------------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------------------


def _parser():
    p = job_parser(__doc__.splitlines()[0], beam_options=False)
    p.add_argument("--task", required=True, help="collection task JSON file (any kind)")
    p.add_argument(
        "--users",
        type=int,
        help="number of simulated users (one report each); may be omitted for sparse csv: data (its clients)",
    )
    p.add_argument(
        "--dataset",
        help="population, by kind of task (the first is the default): "
        + "; ".join(f"{k.name}: {k.datasets}" for k in KINDS.values() if k.population is not None),
    )
    p.add_argument("--seed", type=int, help="entropy of the simulation's SeedSequence (default: OS entropy)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", help="directory for the Avro report files and truth.json")
    where.add_argument("--output_topic", help="publish to this Pub/Sub topic (projects/P/topics/T) instead")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier simulation in --output")
    p.add_argument("--files", type=int, default=4, help="number of Avro files")
    p.add_argument("--start", default=DEFAULT_START, help="first event time, ISO-8601")
    p.add_argument("--duration", type=float, default=3600.0, help="event times spread over this many seconds")
    p.add_argument("--assignment", choices=ASSIGNMENTS, default="random", help="range tasks: user groups")
    p.add_argument("--codec", default="null", choices=["null", "deflate"], help="Avro block codec")
    p.add_argument("--batch_size", type=int, default=1 << 18, help="frequency tasks: users per numpy batch")
    p.add_argument("--inject_bad", type=int, default=0, help="add K bad records of every kind (dead letters)")
    p.add_argument("--rate", type=float, default=1000.0, help="--output_topic: reports per second")
    p.add_argument("--message_size", type=int, default=500, help="--output_topic: max reports per message")
    return p


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; returns the truth dict."""
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    try:
        task = load_task(ns.task)
    except TaskError as exc:
        fail(exc.one_line())
    kind = kind_of(task)
    own = kind.users_from_dataset
    if ns.users is None and not (own and (ns.dataset or "").startswith(own)):
        fail(f"--users is required (a {task.kind} task may omit it only for {', '.join(own) or 'no'} data)")
    if ns.users is not None and ns.users < 1:
        fail(f"--users must be >= 1, got {ns.users}")
    try:
        start_ms = parse_iso8601_ms(ns.start)
    except ValueError:
        fail(f"--start {ns.start!r} is not an ISO-8601 time (e.g. {DEFAULT_START})")
    t0 = time.perf_counter()
    try:
        if ns.output_topic:
            truth = publish(
                task, ns.users, ns.dataset, ns.output_topic, seed=ns.seed, rate=ns.rate,
                message_size=ns.message_size, inject_bad=ns.inject_bad, assignment=ns.assignment,
            )  # fmt: skip
            print(
                f"published {truth['n_users']:,} {task.kind} reports ({task.mechanism}) in "
                f"{truth['messages']} messages to {ns.output_topic} in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
            return truth
        prepare_output(ns.output, ns.overwrite)
        truth = simulate_files(
            task, ns.users, ns.dataset, ns.output, seed=ns.seed, files=ns.files, start_ms=start_ms,
            duration_s=ns.duration, codec=ns.codec, batch_size=ns.batch_size, inject_bad=ns.inject_bad,
            assignment=ns.assignment,
        )  # fmt: skip
    except ValueError as exc:  # a bad dataset spec, CSV or parameter: one line, no traceback
        fail(str(exc))
    groups = f", {truth['n_groups']} groups" if "n_groups" in truth else ""
    print(
        f"wrote {truth['n_users']:,} {task.kind} reports ({truth['mechanism']}{groups}) in {ns.files} "
        f"file(s) to {ns.output} (truth in {Path(ns.output) / 'truth.json'}) in "
        f"{time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return truth


if __name__ == "__main__":
    run()
