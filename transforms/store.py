"""The Beam sink of the latest-state store (:mod:`ldp.store`): every pane, the final flag and the counts.

:class:`WriteToStore` takes ``{"panes": ..., "counts": ...}``:

* ``panes`` -- :data:`PaneRows` ``(task_id, WindowInfo, rows)``, one element per window and pane holding
  every result row of the pane (``transforms.aggregate.Aggregate``'s ``panes`` output), so one pane is
  written in ONE transaction and a reader never sees half of it;
* ``counts`` -- streaming: the per-window count dicts of ``transforms.counts.WindowedCounts`` (with
  ``window_start_ms`` / ``window_end_ms``); batch: the per-batch count dicts, summed here into one row for
  the whole run (window 0/0).

Panes go through a stateful DoFn in the global window keyed by ``(task, window)``: it writes each pane
(idempotent: a retried bundle changes nothing; an older pane never replaces a newer one) and sets an
event-time timer at the window's end plus the allowed lateness (the window's garbage-collection time, the
moment no pane can follow). When the watermark passes it the window is marked final
(:meth:`ldp.store.Store.mark_final`) -- the trustworthy final flag, never guessed from pane flags. A
bounded (batch) job's final watermark fires every timer, so its windows end final; the global window is
final only when the job's input ends. The store is opened lazily in ``setup()`` (one connection per
worker process and URL), never pickled.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.coders import BooleanCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as bw
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Duration, Timestamp

from ldp.aggregate import ResultRow, WindowInfo
from ldp.store import (
    DEFAULT_MAX_ITEMS,
    Store,
    StoreError,
    now_ms,
    open_store,
    parse_store_url,
    redact_url,
    window_ms,
)
from ldp.task import Task, WindowConfig
from transforms.counts import COUNTER_NAMESPACE, SumCounts

__all__ = [
    "PANES",
    "PaneRows",
    "StoreError",
    "WriteToStore",
    "task_summary",
    "register_task",
    "check_store_flags",
    "open_job_store",
]

_LOG = logging.getLogger(__name__)

#: The name of ``Aggregate``'s output of whole panes.
PANES = "panes"

#: One window and pane of one task: ``(task_id, window, rows)`` (every output's rows of the pane).
PaneRows = tuple[str, WindowInfo, Sequence[ResultRow]]


def task_summary(task: Task, window: WindowConfig, **extra: Any) -> dict[str, Any]:
    """The ``ldp_tasks.summary_json`` of a job: the window config, post-processing method, groups, value
    labels (when the task has them) and ``extra`` (e.g. the run's counts, accounting figures)."""
    out: dict[str, Any] = {
        "window": window.to_dict(),
        "postprocess": getattr(task, "postprocess", None),
        "n_groups": task.n_groups,
    }
    labels = getattr(task, "labels", None)
    if labels is not None:
        out["labels"] = list(labels)
    out.update(extra)
    return out


def register_task(store: Store, task: Task, window: WindowConfig, **extra: Any) -> None:
    """Writes the task's ``ldp_tasks`` row (task JSON and :func:`task_summary`)."""
    store.write_task(
        task.task_id,
        kind=task.kind,
        mechanism=task.mechanism,
        epsilon=float(task.epsilon),
        task_json=task.to_json(indent=None),
        summary=task_summary(task, window, **extra),
    )


def _gc_timestamp(end_ms: int | None, lateness_s: float) -> Timestamp:
    """When a window can have no more panes: its last instant plus the allowed lateness (the global
    window: its own end, reached when a bounded input ends)."""
    if end_ms is None:
        return bw.GlobalWindow().max_timestamp()
    return Timestamp(micros=int(end_ms) * 1000 - 1) + Duration(micros=int(round(lateness_s * 1e6)))


def _key_pane(pane: PaneRows) -> tuple[tuple[str, int, int], PaneRows]:
    task_id, info, _rows = pane
    return (task_id, window_ms(info.start_ms), window_ms(info.end_ms)), pane


class _WritePanesFn(beam.DoFn):
    """Keyed by ``(task_id, window_start, window_end)`` in the global window: writes each pane, sets the
    final timer once, and marks the window final when it fires."""

    ARMED = ReadModifyWriteStateSpec("armed", BooleanCoder())
    FINAL = TimerSpec("final", TimeDomain.WATERMARK)

    def __init__(self, url: str, lateness_s: float, max_items: int, labels: Sequence[str] | None) -> None:
        self.url = url
        self.lateness_s = float(lateness_s)
        self.max_items = int(max_items)
        self.labels = None if labels is None else list(labels)
        self._store: Store | None = None
        self.panes = Metrics.counter(COUNTER_NAMESPACE, "store_panes")
        self.rows = Metrics.counter(COUNTER_NAMESPACE, "store_rows")
        self.finals = Metrics.counter(COUNTER_NAMESPACE, "store_final_windows")
        self.write_ms = Metrics.distribution(COUNTER_NAMESPACE, "store_pane_write_ms")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None  # a connection is never pickled; setup() opens one per worker process
        return state

    def setup(self) -> None:
        self._store = open_store(self.url)

    def process(
        self,
        element: tuple[tuple[str, int, int], PaneRows],
        armed=beam.DoFn.StateParam(ARMED),  # noqa: B008 - Beam's state idiom
        final=beam.DoFn.TimerParam(FINAL),  # noqa: B008
    ):
        if self._store is None:
            self.setup()
        _key, (task_id, info, rows) = element
        t0 = now_ms()
        n = self._store.write_pane(
            task_id,
            info.start_ms,
            info.end_ms,
            info.pane_index,
            info.pane_timing,
            rows,
            max_items=self.max_items,
            labels=self.labels,
        )
        self.write_ms.update(now_ms() - t0)
        self.panes.inc()
        self.rows.inc(n)
        if not armed.read():
            final.set(_gc_timestamp(info.end_ms, self.lateness_s))
            armed.write(True)
        return []

    @on_timer(FINAL)
    def on_final(self, key=beam.DoFn.KeyParam):  # noqa: B008
        if self._store is None:
            self.setup()
        task_id, start, end = key
        if self._store.mark_final(task_id, start, end):
            self.finals.inc()
            _LOG.info("store: window [%d, %d) of %s is final", start, end, task_id)
        return []


class _WriteCountsFn(beam.DoFn):
    """Count dicts -> ``ldp_counts`` rows (``window_start_ms`` / ``window_end_ms`` keys; none: 0/0)."""

    def __init__(self, url: str, task_id: str) -> None:
        self.url = url
        self.task_id = task_id
        self._store: Store | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None
        return state

    def setup(self) -> None:
        self._store = open_store(self.url)

    def process(self, counts: dict[str, int]):
        if self._store is None:
            self.setup()
        self._store.write_counts(
            self.task_id, counts.get("window_start_ms"), counts.get("window_end_ms"), counts
        )
        return []


class WriteToStore(beam.PTransform):
    """``{"panes": PaneRows, "counts": count dicts}`` -> the store at ``url`` (see the module docstring).

    Args:
        url: the store (``ldp.store.open_store``; checked by the job before the pipeline is built).
        task: the job's task (its id names the counts; its labels name values the rows do not label).
        window: the job's effective window config (its allowed lateness times the final flag).
        streaming: the counts are per-window dicts (streaming) or per-batch dicts to sum (batch).
        max_items: numbers stored per window, output and group (``--store_max_items``).
    """

    def __init__(
        self,
        url: str,
        task: Task,
        window: WindowConfig,
        *,
        streaming: bool,
        max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        super().__init__()
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.url = url
        self.task = task
        self.window = window
        self.streaming = streaming
        self.max_items = max_items

    def expand(self, inputs: dict[str, beam.PCollection]) -> dict[str, beam.PCollection]:
        labels = getattr(self.task, "labels", None)
        lateness = self.window.allowed_lateness_s if self.window.size_s is not None else 0.0
        written = (
            inputs["panes"]
            | "KeyByWindow" >> beam.Map(_key_pane).with_output_types(tuple[tuple[str, int, int], Any])
            | "GlobalWindow" >> beam.WindowInto(bw.GlobalWindows())
            | "WritePanes" >> beam.ParDo(_WritePanesFn(self.url, lateness, self.max_items, labels))
        )
        counts = inputs.get("counts")
        out = {"panes": written}
        if counts is not None:
            if not self.streaming:
                counts = counts | "SumCounts" >> beam.CombineGlobally(SumCounts())
            out["counts"] = counts | "WriteCounts" >> beam.ParDo(_WriteCountsFn(self.url, self.task.task_id))
        return out


def check_store_flags(url: str | None, max_items: int) -> None:
    """The ``--store`` URL's form and ``--store_max_items`` (nothing is opened; None: no store).

    Raises:
        StoreError: a URL of no supported form, or ``max_items`` < 1 (one line).
    """
    if url is None:
        return
    parse_store_url(url)
    if not (isinstance(max_items, int) and max_items >= 1):
        raise StoreError(f"--store_max_items must be an integer >= 1, got {max_items!r}")


def open_job_store(url: str | None, task: Task, window: WindowConfig) -> Store | None:
    """Opens the job's store (creating its tables) and writes the task's row; None without ``--store``.

    Raises:
        StoreError: the file cannot be created, the server is unreachable, another schema version.
    """
    if url is None:
        return None
    store = open_store(url)
    register_task(store, task, window)
    _LOG.info("store: %s (%s)", redact_url(url), store.dialect)
    return store
