"""``ldp-beam simulate``: simulated clients of any collection task, written as files, followed live, or
published to Pub/Sub.

The task file's kind decides the population (frequency, range, sparse, batch queries, numeric, ...). The
machinery is the Beam-free package :mod:`simulator`; this module is its command line and the Pub/Sub
publisher. Three modes:

Files (``--output DIR``): Avro report logs and the ground truth::

    ldp-beam simulate --task TASK.json --users 1000000 --dataset zipf:1.1 --seed 7 \\
        --output DIR --files 4 --start 2026-01-01T00:00:00Z --duration 3600

-> ``DIR/reports-00000-of-00004.avro`` ... (one report per user in ``schemas/report.avsc``; event times
spread uniformly over ``--duration`` seconds from ``--start``, user ``i`` has the ``i``-th smallest, each
file one time slice; a shuffled task's (``anonymity.shuffled``) rounded down to
``anonymity.time_precision_s``, as its clients send them) and ``DIR/truth.json`` (the aggregator never
reads it): the empirical value distribution of a frequency task, the group sizes of a range task plus
``DIR/truth_records.npy`` (the raw records, :func:`simulator.load_truth_records`), and so on per kind.

Follow (``--output DIR --follow``): a live stream into a watched directory, ``--rate`` reports per second,
``--file_reports`` per file (default: one file a second), event times = wall clock, each file complete
before its ``PATH.done`` marker; it ends after ``--duration`` seconds, after ``--users`` reports, or on
Ctrl-C / SIGTERM (after the file being written), with a one-line summary (:mod:`simulator.stream`)::

    ldp-beam simulate --task TASK.json --output incoming/ --follow --rate 2000 --duration 60

Pub/Sub (``--output_topic``; ``PUBSUB_EMULATOR_HOST`` is honoured): messages of up to ``--message_size``
reports at ``--rate`` reports per second, stamped with the current time (attribute ``event_time`` =
milliseconds); the jobs read them with ``--input_topic`` / ``--input_subscription``::

    ldp-beam simulate --task TASK.json --users 100000 --output_topic projects/P/topics/T --rate 5000

Kafka (``--output_topic kafka://HOST:PORT/TOPIC``): the same messages, each acknowledged by the broker
(``acks=all``) before the command ends (:class:`transforms.kafka.KafkaPublisher`; docs/kafka.md).

``--dataset``: frequency tasks ``zipf[:EXPONENT]`` (default), ``uniform`` or ``csv:PATH:COLUMN`` (the
column holds integers in [0, d), or the task's value labels when it has some: ``"labels"`` or
``"labels_file"``); range tasks ``gaussian[:RHO]`` (default), ``laplace[:RHO]``, ``uniform`` or
``csv:PATH`` (the header names the attributes); the other kinds as ``--help`` lists. ``--assignment``
(range tasks): ``random`` (default) draws each user's group uniformly (what independent clients do),
``balanced`` deals equal-size groups (the papers' simulations), ``user_id`` hashes the user index with the
task's ``group_salt``. Frequency tasks with ``n_groups > 1`` assign at random.

``--inject_bad K`` (files and Pub/Sub) adds K records of every kind of bad report (``bad-records.avro``:
another task, an unknown schema version, a group out of range, missing or out-of-domain payloads, a field
the oracle does not use; ``bad-records-other-schema.avro``: wrong payload types, no task id, bad event
times) and one undecodable ``garbage.avro`` (one undecodable message when publishing), so the dead-letter
path can be demonstrated; ``truth.json["bad_records"]`` counts them by the reason the aggregator must give.

``--trie DIR`` (files and ``--follow``): the clients of a trie-mode heavy_hitters task (``"mode": "trie"``)
report each file at the level of the newest publication in ``DIR`` (the job's ``--trie_dir``,
:func:`wire.client.published_level`), read when the file is made: with ``--follow`` when it is written,
so each file follows the publication of the window before it; level 0 before the first publication (and
without ``--trie``). ``truth.json["trie_levels"]`` lists each file's level.

Generation is vectorized (the kinds' populations, Avro blocks encoded with numpy by ``wire.encode``), with
one ``numpy.random.SeedSequence`` (``--seed``) spawning independent generators for values, groups,
reports, event times and bad records: 1,000,000 users in about 1-2 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp.kinds import KINDS
from ldp.task import Task, TaskError, load_task
from pipelines.cli import fail, job_parser, parse_job_args, prepare_output
from simulator import (
    ASSIGNMENTS,
    DEFAULT_START,
    FollowPlan,
    Stop,
    bad_records,
    client_times,
    follow,
    make_population,
    parse_iso8601_ms,
    simulate_files,
    stop_on_signals,
)
from simulator.population import base_truth, dataset_defines_users
from wire.records import encode_report_container, reports_to_records

__all__ = ["publish", "run"]

#: Defaults of the flags whose meaning depends on the mode (None in the parser, so a flag given where it
#: does not apply is refused).
FILES_DEFAULTS = {"files": 4, "start": DEFAULT_START, "duration": 3600.0}
TOPIC_DEFAULTS = {"rate": 1000.0, "message_size": 500}
FOLLOW_DEFAULTS = {"rate": 1000.0}
#: Flags (dest) each mode takes beyond the common ones.
MODE_FLAGS = {
    "files": ("files", "start", "duration", "overwrite", "inject_bad", "trie"),
    "follow": ("rate", "file_reports", "duration", "trie"),
    "topic": ("rate", "message_size", "inject_bad"),
}
DESCRIPTION = (
    "Simulates the clients of any collection task: Avro report files and the truth (--output), a live "
    "stream of report files for a watched directory (--output --follow), or Pub/Sub messages "
    "(--output_topic)."
)
_MODE_NAMES = {"files": "--output without --follow", "follow": "--follow", "topic": "--output_topic"}


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
    if topic.startswith("kafka://"):  # a Kafka topic: every message acknowledged by the broker
        return _publish_kafka(task, users, dataset, topic, seed=seed, rate=rate, message_size=message_size,
                              inject_bad=inject_bad, assignment=assignment, clock=clock)  # fmt: skip
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    pop = make_population(task, users, dataset, seed=seed, assignment=assignment)
    publisher = pubsub_v1.PublisherClient()
    try:
        publisher.get_topic(request={"topic": topic})
    except gexc.NotFound:
        publisher.create_topic(request={"name": topic})

    def send(data: bytes, when_ms: int) -> None:
        futures.append(publisher.publish(topic, data, event_time=str(when_ms)))

    futures: list[Any] = []
    _publish_population(task, pop, send, rate=rate, message_size=message_size, clock=clock)
    if inject_bad:
        now = int(clock.time() * 1000)
        for recs in bad_records(task, inject_bad, now, seed=pop.bad_rng).values():
            send(encode_report_container(recs), now)
        send(b"not avro", now)
    for f in futures:
        f.result(timeout=60)
    while heartbeat is not None and heartbeat():
        empty = encode_report_container([])
        publisher.publish(topic, empty, event_time=str(int(clock.time() * 1000))).result()
        clock.sleep(1.0)
    return {**base_truth(task, pop, dataset, seed), **pop.truth(), "messages": len(futures)}


def _publish_kafka(
    task: Task, users: int, dataset: str | None, url: str, *, seed: int | None, rate: float,
    message_size: int, inject_bad: int, assignment: str, clock: Any,
) -> dict[str, Any]:
    """:func:`publish` to ``kafka://HOST:PORT/TOPIC`` (:class:`transforms.kafka.KafkaPublisher`); returns
    once the broker acknowledged every message."""
    from transforms.kafka import KafkaPublisher

    pop = make_population(task, users, dataset, seed=seed, assignment=assignment)
    with KafkaPublisher(url) as kafka:
        _publish_population(task, pop, kafka.send, rate=rate, message_size=message_size, clock=clock)
        if inject_bad:
            now = int(clock.time() * 1000)
            for recs in bad_records(task, inject_bad, now, seed=pop.bad_rng).values():
                kafka.send(encode_report_container(recs), now)
            kafka.send(b"not avro", now)
    return {**base_truth(task, pop, dataset, seed), **pop.truth(), "messages": kafka.sent}


def _publish_population(
    task: Task, pop: Any, send: Any, *, rate: float, message_size: int, clock: Any
) -> None:
    """Sends ``pop``'s reports as messages of up to ``message_size`` reports, message ``j`` when its first
    report is due at ``rate`` reports/s, every report stamped with the time its message was made."""
    step = max(1, min(message_size, int(rate)))
    bounds = np.append(np.arange(0, pop.n_users, step, dtype=np.int64), pop.n_users)
    t0 = clock.time()
    pending: list[dict[str, Any]] = []
    current = 0
    now = int(clock.time() * 1000)
    for k, chunk in pop.chunks(bounds):
        if k != current:  # block ``current`` is complete: publish it as one message
            send(encode_report_container(pending), now)
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
        send(encode_report_container(pending), now)


# ------------------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = job_parser(DESCRIPTION, beam_options=False)
    p.add_argument("--task", required=True, help="collection task JSON file (any kind)")
    p.add_argument(
        "--users",
        type=int,
        help="number of simulated users (one report each); may be omitted for sparse csv: data (its clients) "
        "and with --follow (then the stream runs until --duration or Ctrl-C)",
    )
    p.add_argument(
        "--dataset",
        help="population, by kind of task (the first is the default): "
        + "; ".join(f"{k.name}: {k.datasets}" for k in KINDS.values() if k.population is not None),
    )
    p.add_argument("--seed", type=int, help="entropy of the simulation's SeedSequence (default: OS entropy)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", help="directory for the Avro report files (and truth.json)")
    where.add_argument(
        "--output_topic",
        help="publish to this Pub/Sub topic (projects/P/topics/T) or Kafka topic (kafka://HOST:PORT/TOPIC) "
        "instead",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="with --output: write a live stream of report files (each with a .done marker) at --rate until "
        "--duration, --users or Ctrl-C / SIGTERM",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an earlier simulation in --output")
    p.add_argument("--files", type=int, help="number of Avro files (default: 4)")
    p.add_argument("--start", help=f"first event time, ISO-8601 (default: {DEFAULT_START})")
    p.add_argument(
        "--duration",
        type=float,
        help="files: event times spread over this many seconds (default: 3600); --follow: stop after this "
        "many seconds (default: until interrupted)",
    )
    p.add_argument("--assignment", choices=ASSIGNMENTS, default="random", help="range tasks: user groups")
    p.add_argument("--codec", default="null", choices=["null", "deflate"], help="Avro block codec")
    p.add_argument("--batch_size", type=int, default=1 << 18, help="frequency tasks: users per numpy batch")
    p.add_argument("--inject_bad", type=int, help="add K bad records of every kind (dead letters)")
    p.add_argument("--rate", type=float, help="--output_topic, --follow: reports per second (default: 1000)")
    p.add_argument(
        "--file_reports", type=int, help="--follow: reports per file (default: --rate, one file a second)"
    )
    p.add_argument("--message_size", type=int, help="--output_topic: max reports per message (default: 500)")
    p.add_argument(
        "--trie",
        metavar="DIR",
        help="trie-mode heavy_hitters tasks, --output (with or without --follow): the job's publication "
        "directory (its --trie_dir); each file's clients report at the level of its newest publication, "
        "read when the file is made (level 0 before the first)",
    )
    return p


def _mode(ns: argparse.Namespace) -> str:
    """The mode the flags ask for; a flag of another mode, or --follow without --output, is refused."""
    if ns.follow and ns.output_topic:
        fail("--follow writes files into a watched directory: use it with --output, not --output_topic")
    mode = "follow" if ns.follow else ("topic" if ns.output_topic else "files")
    for dest in sorted({d for flags in MODE_FLAGS.values() for d in flags} - set(MODE_FLAGS[mode])):
        value = getattr(ns, dest)
        if value is not None and value is not False:
            fail(f"--{dest} does not apply to {_MODE_NAMES[mode]}")
    defaults = {"files": FILES_DEFAULTS, "topic": TOPIC_DEFAULTS, "follow": FOLLOW_DEFAULTS}[mode]
    for dest, value in defaults.items():
        if getattr(ns, dest) is None:
            setattr(ns, dest, value)
    if ns.inject_bad is None:
        ns.inject_bad = 0
    return mode


def _load(ns: argparse.Namespace, mode: str) -> Task:
    """The task, and the checks of --users that need it."""
    try:
        task = load_task(ns.task)
    except TaskError as exc:
        fail(exc.one_line())
    if ns.users is None and mode != "follow" and not dataset_defines_users(task, ns.dataset):
        own = KINDS[task.kind].users_from_dataset
        fail(f"--users is required (a {task.kind} task may omit it only for {own or 'no'} data)")
    if ns.users is not None and ns.users < 1:
        fail(f"--users must be >= 1, got {ns.users}")
    if ns.trie is not None and getattr(task, "mode", None) != "trie":
        fail(f"--trie applies to trie-mode heavy_hitters tasks (\"mode\": \"trie\"); task {task.task_id!r} "
             "is not one")
    if ns.trie is not None and Path(ns.trie).exists() and not Path(ns.trie).is_dir():
        fail(f"--trie {ns.trie!r} exists and is not a directory")
    return task


def _run_topic(ns: argparse.Namespace, task: Task, t0: float) -> dict[str, Any]:
    if ns.output_topic.startswith("kafka://"):  # a bad URL or no broker: one line, before any report
        from transforms.kafka import KafkaSourceError, check_broker, parse_kafka_url

        try:
            check_broker(parse_kafka_url(ns.output_topic))
        except KafkaSourceError as exc:
            fail(f"--output_topic: {exc}")
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


def _run_files(ns: argparse.Namespace, task: Task, t0: float) -> dict[str, Any]:
    try:
        start_ms = parse_iso8601_ms(ns.start)
    except ValueError:
        fail(f"--start {ns.start!r} is not an ISO-8601 time (e.g. {DEFAULT_START})")
    prepare_output(ns.output, ns.overwrite)
    truth = simulate_files(
        task, ns.users, ns.dataset, ns.output, seed=ns.seed, files=ns.files, start_ms=start_ms,
        duration_s=ns.duration, codec=ns.codec, batch_size=ns.batch_size, inject_bad=ns.inject_bad,
        assignment=ns.assignment, trie_dir=ns.trie,
    )  # fmt: skip
    groups = f", {truth['n_groups']} groups" if "n_groups" in truth else ""
    if "trie_levels" in truth:
        groups += f", trie level(s) {sorted(set(truth['trie_levels']) - {None})}"
    print(
        f"wrote {truth['n_users']:,} {task.kind} reports ({truth['mechanism']}{groups}) in {ns.files} "
        f"file(s) to {ns.output} (truth in {Path(ns.output) / 'truth.json'}) in "
        f"{time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return truth


def _run_follow(ns: argparse.Namespace, task: Task) -> dict[str, Any]:
    rate = ns.rate
    file_reports = ns.file_reports if ns.file_reports is not None else max(1, round(rate))
    plan = FollowPlan(rate, file_reports, duration_s=ns.duration, users=ns.users)  # ValueError: one line
    if Path(ns.output).exists() and not Path(ns.output).is_dir():
        fail(f"--output {ns.output!r} exists and is not a directory")
    print(
        f"follow: writing {file_reports:,} reports per file at {rate:g} reports/s into {ns.output} "
        f"({'for ' + format(ns.duration, 'g') + ' s' if ns.duration else 'until Ctrl-C or SIGTERM'})",
        file=sys.stderr,
    )
    with stop_on_signals(Stop()) as stop:
        summary = follow(
            task, ns.output, plan, dataset=ns.dataset, seed=ns.seed, assignment=ns.assignment,
            codec=ns.codec, stop=stop, trie_dir=ns.trie,
        )  # fmt: skip
    print(summary.line(task), file=sys.stderr)
    return {"task_id": task.task_id, "kind": task.kind, **dataclasses.asdict(summary)}


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; returns the truth dict (``--follow``: what the stream wrote)."""
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    mode = _mode(ns)
    task = _load(ns, mode)
    t0 = time.perf_counter()
    try:
        if mode == "topic":
            return _run_topic(ns, task, t0)
        if mode == "follow":
            return _run_follow(ns, task)
        return _run_files(ns, task, t0)
    except (ValueError, FileExistsError) as exc:  # a bad dataset spec, CSV or parameter: one line
        fail(str(exc))


if __name__ == "__main__":
    run()
