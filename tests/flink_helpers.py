"""Helpers shared by the Flink test modules (tests/test_flink_runner.py: the embedded mini-cluster;
tests/test_flink_cluster.py: the multi-process session cluster)."""

from __future__ import annotations

import contextlib
import faulthandler
import glob
from collections.abc import Iterator
from pathlib import Path

import fastavro

from ldp.task import ParsedTask, parse_task


@contextlib.contextmanager
def hang_guard(timeout_s: float) -> Iterator[None]:
    """A hung Flink job would block the test run: dump every thread's stack and exit after ``timeout_s``."""
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def dead_letter_reasons(out: Path) -> list[str]:
    """The sorted ``reason`` of every dead letter under ``OUT/dead_letter/``."""
    reasons = []
    for f in glob.glob(str(out / "dead_letter" / "*.avro")):
        with open(f, "rb") as fh:
            reasons += [r["reason"] for r in fastavro.reader(fh)]
    return sorted(reasons)


def olh_task(task_id: str, n_groups: int = 1) -> ParsedTask:
    """The OLH frequency task (epsilon 1, d = 64) the Flink tests run."""
    return parse_task(
        {"task_id": task_id, "mechanism": "olh", "epsilon": 1.0, "domain_size": 64, "n_groups": n_groups}
    )
