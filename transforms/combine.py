"""Combining report batches with the core accumulators, and finalizing estimates per window.

:class:`OracleCombineFn` is a thin adapter over ``oracle.create_accumulator / add / merge``: its inputs
are :class:`~ldp.reports.Reports` *batches* (never single reports) and its accumulator is the oracle's
fixed-size :class:`~ldp.oracles.SupportAccumulator`, so shard merges are exact integer additions and the
pipeline's numbers equal the in-memory core's. :class:`FinalizeEstimates` runs once per key, window and
pane: ``oracle.estimate`` followed by ``ldp.postprocess.postprocess``.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow

import schemas
from ldp.task import CollectionTask

__all__ = [
    "OracleCombineFn",
    "FinalizeEstimates",
    "estimate_record",
    "postprocess_estimate",
    "record_to_json",
]


class OracleCombineFn(beam.CombineFn):
    """``CombineFn`` over Reports batches backed by the task's frequency oracle.

    The oracle is rebuilt lazily from the (small, picklable) task on each worker.
    """

    def __init__(self, task: CollectionTask) -> None:
        super().__init__()
        self.task = task
        self._oracle = None

    @property
    def oracle(self) -> Any:
        if self._oracle is None:
            self._oracle = self.task.make_oracle()
        return self._oracle

    def __getstate__(self) -> dict[str, Any]:
        return {"task": self.task, "_oracle": None}

    def create_accumulator(self) -> Any:
        return self.oracle.create_accumulator()

    def add_input(self, accumulator: Any, reports: Any) -> Any:
        return self.oracle.add(accumulator, reports)

    def add_inputs(self, accumulator: Any, elements: Iterable[Any]) -> Any:
        for reports in elements:
            accumulator = self.oracle.add(accumulator, reports)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        # The DirectRunner passes an empty iterable on empty panes: merge([]) is an empty accumulator.
        return self.oracle.merge(list(accumulators))

    def extract_output(self, accumulator: Any) -> Any:
        return accumulator

    def compact(self, accumulator: Any) -> Any:
        return accumulator


def postprocess_estimate(oracle: Any, acc: Any, method: str) -> tuple[Any, np.ndarray]:
    """``oracle.estimate(acc)`` then ``ldp.postprocess.postprocess``; returns ``(estimate, frequencies)``."""
    from ldp.postprocess import postprocess

    est = oracle.estimate(acc)
    if method == "base":
        return est, np.asarray(est.frequencies, dtype=np.float64)
    opts: dict[str, Any] = {}
    if method == "mle-apx":
        opts = {"p": oracle.p, "q": oracle.q}
    freqs = postprocess(est.frequencies, method, variance=est.variance, n=est.n, **opts)
    return est, np.asarray(freqs, dtype=np.float64)


def _ms(ts: Any) -> int:
    return int(ts.micros // 1000)


def estimate_record(
    task: CollectionTask,
    oracle: Any,
    group: int,
    acc: Any,
    method: str,
    window: Any = None,
    pane: Any = None,
) -> dict[str, Any]:
    """An estimate record (``schemas/estimate.avsc``) for one key, window and pane."""
    est, freqs = postprocess_estimate(oracle, acc, method)
    if window is None or isinstance(window, GlobalWindow):
        start = end = None
    else:
        start, end = _ms(window.start), _ms(window.end)
    timing = "UNKNOWN"
    index, last = 0, True
    if pane is not None:
        timing = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}.get(int(pane.timing), "UNKNOWN")
        index, last = int(pane.index), bool(pane.is_last)
    return {
        "task_id": task.task_id,
        "schema_version": schemas.SCHEMA_VERSION,
        "group": int(group),
        "window_start": start,
        "window_end": end,
        "pane_timing": timing,
        "pane_index": index,
        "is_last_pane": last,
        "n_reports": int(est.n),
        "mechanism": oracle.name,
        "epsilon": float(oracle.epsilon),
        "domain_size": int(oracle.d),
        "postprocess": method,
        "frequencies": freqs.tolist(),
        "std": np.asarray(est.std, dtype=np.float64).tolist(),
    }


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return (
        _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def record_to_json(rec: dict[str, Any]) -> dict[str, Any]:
    """The JSON Lines form of an estimate record: window bounds as ISO-8601 UTC strings (null: global).

    Non-finite floats (none occur for n > 0) are written as null so every line is strict JSON.
    """
    out = dict(rec)
    out["window_start"] = _iso(rec["window_start"])
    out["window_end"] = _iso(rec["window_end"])
    for k in ("frequencies", "std"):
        out[k] = [x if math.isfinite(x) else None for x in rec[k]]
    return out


class FinalizeEstimates(beam.DoFn):
    """``((task_id, group), accumulator)`` -> estimate record, once per window and pane.

    Panes without reports (``n == 0``; e.g. an early firing with no new data in discarding mode) produce
    no record, only the counter ``ldp/empty_panes``.
    """

    def __init__(self, task: CollectionTask, method: str) -> None:
        self.task = task
        self.method = method
        self._oracle = None
        self.empty = beam.metrics.Metrics.counter("ldp", "empty_panes")
        self.panes = beam.metrics.Metrics.counter("ldp", "estimate_panes")

    def setup(self) -> None:
        self._oracle = self.task.make_oracle()

    def process(self, element, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        (_task_id, group), acc = element
        if self._oracle is None:
            self.setup()
        if acc.n == 0:
            self.empty.inc()
            return
        self.panes.inc()
        yield estimate_record(self.task, self._oracle, group, acc, self.method, window, pane)
