"""The Beam sink of the latest-state store (:mod:`store`): every pane, the final flag and the counts.

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
(:meth:`store.Store.mark_final`) -- the trustworthy final flag, never guessed from pane flags. A
bounded (batch) job's final watermark fires every timer, so its windows end final; the global window is
final only when the job's input ends. The store is opened lazily at the first write (one connection per
worker process and URL), never pickled.

Reliability. Every write (pane, final mark, counts) is retried with exponential backoff, reconnecting
between tries, for up to ``retry_s`` seconds (``--store_retry_s``, default :data:`DEFAULT_RETRY_S`): longer
than a database restart or a lock held by a reader; the writes are idempotent, so a retried pane changes
nothing it already wrote. A pane that still cannot be written is never dropped silently: the sink records
every pane it is given (``start``), written (``ok``) or not (``failed``, with the reason) in a status
directory of the job (:func:`store_status_dir`, in ``--output``), which the job reads when it ends
(:func:`read_store_status`; Beam counters are not reliable on every runner) and fails with one line; once
a write failed, the DoFn records its later panes as failed without waiting again. A store that is gone
(:class:`store.StoreLost`: the SQLite file deleted or replaced, the run missing) fails at once.
Without a status directory (a remote ``--output``) the failed write raises, failing the bundle.

Runs. :func:`open_job_store` records the job's run in ``ldp_runs`` (refusing a second live run of the
task unless asked for) and keeps its heartbeat; :meth:`JobStore.finish` ends it.

Restarts. A job restarted after a kill re-reads its inputs and recomputes each window; the store stores
its panes after the killed run's and replaces the window's rows whole (:meth:`store.Store.
write_flat_pane`), and a pane of a window another run made final is not written
(:class:`store.WindowFinal`: counted ``store_panes_after_final``, recorded in the status directory as
``pane_after_final``, summed into :attr:`StoreStatus.panes_after_final`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.coders import BooleanCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as bw
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Duration, Timestamp

from ldp.aggregate import ResultRow, WindowInfo
from ldp.task import Task, WindowConfig
from store import (
    DEFAULT_MAX_ITEMS,
    HEARTBEAT_S,
    RunConflict,
    Store,
    StoreError,
    StoreLost,
    WindowFinal,
    call_with_retry,
    is_transient,
    now_ms,
    open_store,
    parse_store_url,
    redact_url,
    run_conflict_message,
    window_ms,
)
from transforms.counts import COUNTER_NAMESPACE, SumCounts
from transforms.display import item, task_display, task_id_display, window_display
from transforms.progress import window_label

__all__ = [
    "PANES",
    "PaneRows",
    "RunConflict",
    "StoreError",
    "StoreLost",
    "WriteToStore",
    "task_summary",
    "register_task",
    "check_store_flags",
    "check_live_runs",
    "open_job_store",
    "JobStore",
    "StoreStatus",
    "store_status_dir",
    "read_store_status",
    "DEFAULT_RETRY_S",
]

_LOG = logging.getLogger(__name__)

#: The name of ``Aggregate``'s output of whole panes.
PANES = "panes"

#: One window and pane of one task: ``(task_id, window, rows)`` (every output's rows of the pane).
PaneRows = tuple[str, WindowInfo, Sequence[ResultRow]]

#: Seconds a store write is retried before the job fails (``--store_retry_s``).
DEFAULT_RETRY_S = 60.0

#: The status directory's name inside ``--output``.
STATUS_DIR = ".store_status"


def store_status_dir(output: str | None) -> str | None:
    """Where the sink records each pane's fate: ``OUTPUT/.store_status`` (None for a remote output)."""
    if not output or "://" in output:
        return None
    return os.path.join(output, STATUS_DIR)


class _StatusLog:
    """Appends one JSON line per event to a file of its own in the status directory (one per DoFn
    instance and process, opened at the first event)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._fh: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "_fh": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def record(self, kind: str, key: Sequence[Any], state: str, error: str | None = None) -> None:
        if self.directory is None:
            return
        line = json.dumps({"kind": kind, "key": list(key), "state": state, "error": error, "ms": now_ms()})
        with self._lock:
            if self._fh is None:
                os.makedirs(self.directory, exist_ok=True)
                name = f"{os.getpid()}-{uuid.uuid4().hex}.jsonl"
                self._fh = open(os.path.join(self.directory, name), "a", encoding="utf-8")  # noqa: SIM115
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


@dataclasses.dataclass
class StoreStatus:
    """What the sink did, from the status directory (:func:`read_store_status`).

    ``panes``: panes the sink was given; ``panes_written``: those written; ``failed_panes``: the others
    (a write that failed, or one still in progress or being retried when the job ended);
    ``failed_finals`` / ``failed_counts``: windows not marked final, count rows not written;
    ``panes_after_final``: panes not written because another run had made their window final (a job
    restarted on the same store re-read its inputs; those windows keep the figures they were final with);
    ``in_flight``: writes begun and neither written nor failed yet; ``gave_up``: writes that failed for
    good (a job can stop early on these); ``error``: the first failure."""

    panes: int = 0
    panes_written: int = 0
    panes_after_final: int = 0
    failed_panes: int = 0
    failed_finals: int = 0
    failed_counts: int = 0
    in_flight: int = 0
    gave_up: int = 0
    error: str | None = None

    @property
    def failed(self) -> bool:
        return bool(self.failed_panes or self.failed_finals or self.failed_counts)

    def line(self) -> str:
        """``store write failed: REASON; N of M panes written[; ...]; rerun with --overwrite``."""
        parts = [f"store write failed: {self.error or 'unknown error'}",
                 f"{self.panes_written} of {self.panes} panes written"]  # fmt: skip
        if self.failed_finals:
            parts.append(f"{self.failed_finals} window(s) not marked final")
        if self.failed_counts:
            parts.append(f"{self.failed_counts} count row(s) not written")
        return "; ".join([*parts, "rerun with --overwrite"])


def read_store_status(directory: str | None) -> StoreStatus:
    """Sums the status directory: a pane (final mark, count row) counts as written when any attempt of it
    wrote it (a retried bundle writes it again), as failed when it was given to the sink and never
    written; the first failure's reason (by time) is the error."""
    out = StoreStatus()
    if directory is None or not os.path.isdir(directory):
        return out
    seen: dict[tuple[str, str], bool] = {}
    errors: list[tuple[int, str]] = []
    pending: dict[tuple[str, str], str] = {}
    gave_up: set[tuple[str, str]] = set()
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as fh:
            for raw in fh:
                try:
                    ev = json.loads(raw)
                except ValueError:  # a line cut by a killed worker
                    continue
                key = (str(ev.get("kind")), json.dumps(ev.get("key")))
                ok = ev.get("state") == "ok"
                seen[key] = seen.get(key, False) or ok
                if ev.get("state") == "failed":
                    errors.append((int(ev.get("ms") or 0), str(ev.get("error") or "unknown error")))
                    gave_up.add(key)
                elif ev.get("state") == "retrying":
                    pending[key] = str(ev.get("error") or "")
    out.gave_up = sum(1 for k in gave_up if not seen.get(k))
    out.in_flight = sum(1 for k, ok in seen.items() if not ok and k not in gave_up)
    for (kind, _key), ok in seen.items():
        if kind == "pane":
            out.panes += 1
            out.panes_written += int(ok)
            out.failed_panes += int(not ok)
        elif kind == "pane_after_final":
            out.panes_after_final += 1
        elif kind == "final":
            out.failed_finals += int(not ok)
        elif kind == "counts":
            out.failed_counts += int(not ok)
    if errors:
        out.error = min(errors)[1]
    elif out.failed:
        unwritten = [pending.get(k, "") for k, ok in seen.items() if not ok]
        last = next((e for e in unwritten if e), None)
        out.error = "the job ended before the store took every write" + (f" ({last})" if last else "")
    return out


class _Writer:
    """The store writes of one DoFn: lazily opened (never a new empty SQLite file), each call retried for
    ``retry_s`` seconds (:func:`store.call_with_retry`), every write's fate recorded
    (:class:`_StatusLog`); after one failure the later writes are recorded as failed at once."""

    def __init__(self, url: str, run_id: str | None, retry_s: float, status_dir: str | None) -> None:
        self.url = url
        self.run_id = run_id
        self.retry_s = float(retry_s)
        self.status = _StatusLog(status_dir)
        self._store: Store | None = None
        self._failed: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None  # a connection is never pickled; one per worker process, opened when used
        return state

    def _open(self) -> Store:
        if self._store is None:
            if self.run_id is None:  # no job's run (tests, tools): the sink creates the store itself
                store = open_store(self.url)
            else:  # the job created it: a missing file or run means the store was lost
                store = open_store(self.url, create=False, must_exist=True)
                store.check_run(self.run_id)
            store.set_wait_s(min(30.0, max(0.5, self.retry_s / 4)))
            self._store = store
        return self._store

    def call(self, kind: str, key: Sequence[Any], what: str, fn: Callable[[Store], Any]) -> Any:
        """``fn(store)`` with retries; None when it failed (recorded, and raised without a status dir)."""
        self.status.record(kind, key, "start")
        if self._failed is not None:
            self.status.record(kind, key, "failed", f"not tried after an earlier failure: {self._failed}")
            return None

        def once() -> Any:
            try:
                return fn(self._open())
            except Exception as exc:
                if is_transient(exc) and self._store is not None:
                    self._store.reset()  # the next try reconnects
                raise

        def told(attempt: int, exc: BaseException, wait: float) -> None:
            reason = _one_line(exc)
            if attempt == 1:
                self.status.record(kind, key, "retrying", reason)
            _LOG.warning("store: %s failed (try %d): %s; retrying in %.1f s (for up to %g s)",
                         what, attempt, reason, wait, self.retry_s)  # fmt: skip

        try:
            out = call_with_retry(once, self.retry_s, what=what, on_retry=told)
        except Exception as exc:  # noqa: BLE001 - every failure is recorded; the job fails at its end
            reason = _one_line(exc)
            self._failed = reason
            self.status.record(kind, key, "failed", reason)
            _LOG.error("store: %s failed for good: %s", what, reason)
            if self.status.directory is None:
                raise
            return None
        self.status.record(kind, key, "ok")
        return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    first = text.splitlines()[0].strip()
    return first if isinstance(exc, StoreError) else f"{type(exc).__name__}: {first}"


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

    def __init__(
        self, url: str, lateness_s: float, max_items: int, labels: Sequence[str] | None, writer: _Writer
    ) -> None:
        self.url = url
        self.lateness_s = float(lateness_s)
        self.max_items = int(max_items)
        self.labels = None if labels is None else list(labels)
        self.writer = writer
        self.panes = Metrics.counter(COUNTER_NAMESPACE, "store_panes")
        self.rows = Metrics.counter(COUNTER_NAMESPACE, "store_rows")
        self.finals = Metrics.counter(COUNTER_NAMESPACE, "store_final_windows")
        self.write_ms = Metrics.distribution(COUNTER_NAMESPACE, "store_pane_write_ms")
        self.failed = Metrics.counter(COUNTER_NAMESPACE, "store_failed_panes")
        self.after_final = Metrics.counter(COUNTER_NAMESPACE, "store_panes_after_final")

    def display_data(self) -> dict[str, Any]:
        return {
            "store": item(redact_url(self.url), "Store"),
            "max_items": item(self.max_items, "Numbers per window, output and group"),
            "lateness_s": item(self.lateness_s, "Allowed lateness (s)"),
        }

    def teardown(self) -> None:
        self.writer.status.close()

    def process(
        self,
        element: tuple[tuple[str, int, int], PaneRows],
        armed=beam.DoFn.StateParam(ARMED),  # noqa: B008 - Beam's state idiom
        final=beam.DoFn.TimerParam(FINAL),  # noqa: B008
    ):
        key, (task_id, info, rows) = element
        t0 = now_ms()

        def write(store: Store) -> int | WindowFinal:
            try:
                return store.write_pane(
                    task_id, info.start_ms, info.end_ms, info.pane_index, info.pane_timing, rows,
                    max_items=self.max_items, labels=self.labels, run_id=self.writer.run_id,
                )  # fmt: skip
            except WindowFinal as closed:  # an earlier run's final window: it keeps its figures
                return closed

        label = f"pane {info.pane_index} of {task_id} {window_label(info.start_ms, info.end_ms)}"
        n = self.writer.call("pane", (*key, int(info.pane_index)), label, write)
        if isinstance(n, WindowFinal):
            self.after_final.inc()
            self.writer.status.record("pane_after_final", (*key, int(info.pane_index)), "ok", str(n))
            _LOG.warning("store: %s", n)
        elif n is None:
            self.failed.inc()
        else:
            self.write_ms.update(now_ms() - t0)
            self.panes.inc()
            self.rows.inc(n)
        if not armed.read():
            final.set(_gc_timestamp(info.end_ms, self.lateness_s))
            armed.write(True)
        return []

    @on_timer(FINAL)
    def on_final(self, key=beam.DoFn.KeyParam):  # noqa: B008
        task_id, start, end = key
        done = self.writer.call(
            "final",
            key,
            f"final mark of {task_id} {window_label(start, end)}",
            lambda store: store.mark_final(task_id, start, end),
        )
        if done:
            self.finals.inc()
            _LOG.info("store: %s %s is final", task_id, window_label(start, end))
        return []


class _WriteCountsFn(beam.DoFn):
    """Count dicts -> ``ldp_counts`` rows (``window_start_ms`` / ``window_end_ms`` keys; none: 0/0)."""

    def __init__(self, url: str, task_id: str, writer: _Writer) -> None:
        self.url = url
        self.task_id = task_id
        self.writer = writer

    def display_data(self) -> dict[str, Any]:
        return {**task_id_display(self.task_id), "store": item(redact_url(self.url), "Store")}

    def teardown(self) -> None:
        self.writer.status.close()

    def process(self, counts: dict[str, int]):
        start, end = counts.get("window_start_ms"), counts.get("window_end_ms")
        self.writer.call(
            "counts",
            (self.task_id, start, end),
            f"counts of {self.task_id} {window_label(start, end)}",
            lambda store: store.write_counts(
                self.task_id, start, end, counts, run_id=self.writer.run_id
            ),
        )
        return []


class WriteToStore(beam.PTransform):
    """``{"panes": PaneRows, "counts": count dicts}`` -> the store at ``url`` (see the module docstring).

    Args:
        url: the store (``store.open_store``; checked by the job before the pipeline is built).
        task: the job's task (its id names the counts; its labels name values the rows do not label).
        window: the job's effective window config (its allowed lateness times the final flag).
        streaming: the counts are per-window dicts (streaming) or per-batch dicts to sum (batch).
        max_items: numbers stored per window, output and group (``--store_max_items``).
        run_id: the job's run (``ldp_runs``; it must exist in the store: a store without it is lost), or
            None (no run: tests, tools).
        retry_s: seconds a failing write is retried (``--store_retry_s``).
        status_dir: where every write's fate is recorded (:func:`store_status_dir`); None: a write that
            still fails after ``retry_s`` raises.
    """

    def __init__(
        self,
        url: str,
        task: Task,
        window: WindowConfig,
        *,
        streaming: bool,
        max_items: int = DEFAULT_MAX_ITEMS,
        run_id: str | None = None,
        retry_s: float = DEFAULT_RETRY_S,
        status_dir: str | None = None,
    ) -> None:
        super().__init__()
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.run_id = run_id
        self.retry_s = float(retry_s)
        self.status_dir = status_dir
        self.url = url
        self.task = task
        self.window = window
        self.streaming = streaming
        self.max_items = max_items

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.task),
            **window_display(self.window),
            "store": item(redact_url(self.url), "Store"),
            "max_items": item(self.max_items, "Numbers per window, output and group"),
            "run_id": item(self.run_id, "Run"),
            "retry_s": item(self.retry_s, "Retry failing writes for (s)"),
            "status_dir": item(self.status_dir, "Write status directory"),
        }

    def expand(self, inputs: dict[str, beam.PCollection]) -> dict[str, beam.PCollection]:
        labels = getattr(self.task, "labels", None)
        lateness = self.window.allowed_lateness_s if self.window.size_s is not None else 0.0
        written = (
            inputs["panes"]
            | "KeyByWindow" >> beam.Map(_key_pane).with_output_types(tuple[tuple[str, int, int], Any])
            | "GlobalWindow" >> beam.WindowInto(bw.GlobalWindows())
            | "WritePanes"
            >> beam.ParDo(_WritePanesFn(self.url, lateness, self.max_items, labels, self._writer()))
        )
        counts = inputs.get("counts")
        out = {"panes": written}
        if counts is not None:
            if not self.streaming:
                counts = counts | "SumCounts" >> beam.CombineGlobally(SumCounts())
            out["counts"] = counts | "WriteCounts" >> beam.ParDo(
                _WriteCountsFn(self.url, self.task.task_id, self._writer())
            )
        return out

    def _writer(self) -> _Writer:
        return _Writer(self.url, self.run_id, self.retry_s, self.status_dir)


def check_store_flags(url: str | None, max_items: int, retry_s: float = DEFAULT_RETRY_S) -> None:
    """The ``--store`` URL's form, ``--store_max_items`` and ``--store_retry_s`` (nothing is opened;
    None: no store).

    Raises:
        StoreError: a URL of no supported form, ``max_items`` < 1, a negative or non-finite ``retry_s``.
    """
    if url is None:
        return
    parse_store_url(url)
    if not (isinstance(max_items, int) and max_items >= 1):
        raise StoreError(f"--store_max_items must be an integer >= 1, got {max_items!r}")
    if not (isinstance(retry_s, (int, float)) and 0 <= retry_s < float("inf")):
        raise StoreError(f"--store_retry_s must be a finite number of seconds >= 0, got {retry_s!r}")


def check_live_runs(url: str | None, task_id: str, allow_concurrent: bool) -> None:
    """Before the output directory is cleared: refuses a store that already has a live run of the task
    (an existing store only; one that cannot be read now is checked again by :func:`open_job_store`).

    Raises:
        RunConflict: another live run of the task.
    """
    if url is None or allow_concurrent:
        return
    dialect, target = parse_store_url(url)
    if dialect == "sqlite" and not os.path.isfile(target):
        return
    try:
        store = open_store(url, create=False, shared=False, must_exist=True)
    except StoreError:
        return
    try:
        live = store.live_runs(task_id)
    except Exception:  # noqa: BLE001 - an older layout, an empty or foreign file: open_job_store reports it
        live = []
    finally:
        store.close()
    if live:
        raise RunConflict(run_conflict_message(task_id, live[0]))


class _Heartbeat(threading.Thread):
    """Updates the run's ``heartbeat_ms`` every :data:`store.HEARTBEAT_S` seconds on a private
    connection (a slow store never blocks the job's writes); failures are logged, never raised."""

    def __init__(self, url: str, run_id: str, every_s: float = HEARTBEAT_S) -> None:
        super().__init__(name="ldp-store-heartbeat", daemon=True)
        self.url = url
        self.run_id = run_id
        self.every_s = every_s
        self.stopped = threading.Event()

    def run(self) -> None:
        store: Store | None = None
        failing = False
        while not self.stopped.wait(self.every_s):
            try:
                if store is None:
                    store = open_store(self.url, create=False, shared=False, must_exist=True)
                store.heartbeat(self.run_id)
                failing = False
            except Exception as exc:  # noqa: BLE001 - the sink reports write failures; this only logs
                if not failing:
                    _LOG.warning("store: heartbeat of run %s failed: %s", self.run_id, _one_line(exc))
                failing = True
                if store is not None:
                    store.reset()
        if store is not None:
            store.close()


@dataclasses.dataclass
class JobStore:
    """The job's store and run: ``run_id``, the write retry bound, the sink's status directory, the
    heartbeat (started by :func:`open_job_store`); :meth:`finish` ends the run."""

    store: Store
    url: str
    run_id: str
    retry_s: float
    status_dir: str | None
    heartbeat: _Heartbeat | None = None

    def status(self, settle_s: float = 0.0) -> StoreStatus:
        """What the sink did (:func:`read_store_status`); ``settle_s``: wait up to that long for writes in
        flight (a cancelled streaming job's workers finish the write they are in) before counting them as
        failed."""
        deadline = time.monotonic() + settle_s
        st = read_store_status(self.status_dir)
        while st.in_flight and time.monotonic() < deadline:
            time.sleep(0.2)
            st = read_store_status(self.status_dir)
        return st

    def finish(self, task: Task, window: WindowConfig, summary: dict[str, Any], status: StoreStatus) -> None:
        """Ends the run (``ended``, or ``failed`` when a write failed) with the job's summary, and
        updates the task's row; tried for at most ``min(retry_s, 10)`` seconds, then only logged (the
        run's heartbeat stops, so it counts as dead later)."""
        if not status.failed and self.status_dir is not None:  # kept for the operator when a write failed
            shutil.rmtree(self.status_dir, ignore_errors=True)
        self._end(
            "failed" if status.failed else "ended",
            lambda: None if status.failed else register_task(self.store, task, window, run=summary),
            panes_written=status.panes_written, failed_panes=status.failed_panes, error=status.error,
            summary=summary,
        )  # fmt: skip

    def abort(self, error: str) -> None:
        """Ends the run as ``failed`` (the pipeline raised or was interrupted)."""
        st = self.status()
        self._end("failed", lambda: None, panes_written=st.panes_written, failed_panes=st.failed_panes,
                  error=error, summary=None)  # fmt: skip

    def _end(self, state: str, before: Callable[[], Any], **fields: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stopped.set()

        def once() -> None:
            try:
                before()
                self.store.end_run(self.run_id, state, **fields)
            except Exception as exc:
                if is_transient(exc):
                    self.store.reset()
                raise

        try:
            call_with_retry(once, min(self.retry_s, 10.0), what="store: recording the run's end")
        except Exception as exc:  # noqa: BLE001 - the job's own result is reported either way
            _LOG.warning("store: the end of run %s could not be recorded: %s", self.run_id, _one_line(exc))


def open_job_store(
    url: str | None,
    task: Task,
    window: WindowConfig,
    *,
    run_id: str | None = None,
    allow_concurrent: bool = False,
    retry_s: float = DEFAULT_RETRY_S,
    output: str | None = None,
    streaming: bool | None = None,
    heartbeat: bool = True,
) -> JobStore | None:
    """Opens the job's store (creating or migrating its tables), begins the run (``ldp_runs``; another
    live run of the task is refused unless ``allow_concurrent``), writes the task's row and starts the
    heartbeat; None without ``--store``. A fresh status directory is made in ``output``.

    Raises:
        StoreError: the file cannot be created, the server is unreachable, another schema version;
            :class:`store.RunConflict`: another live run.
    """
    if url is None:
        return None
    run_id = run_id or str(uuid.uuid4())
    store = open_store(url)  # an unreachable server or a bad file fails at once

    def begin() -> list[dict[str, Any]]:  # a server that fails from here on is retried like the sink's writes
        try:
            others = store.begin_run(run_id, task.task_id, allow_concurrent=allow_concurrent,
                                     streaming=streaming, output=output)  # fmt: skip
            register_task(store, task, window)
            return others
        except Exception as exc:
            if is_transient(exc):
                store.reset()
            raise

    try:
        others = call_with_retry(begin, retry_s, what="store: beginning the run")
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - sqlite3 / psycopg errors, reported in one line
        raise StoreError(f"store {redact_url(url)!r}: the run cannot begin: {_one_line(exc)}") from None
    for o in others:
        _LOG.warning("store: run %s of %s is live too (--store_allow_concurrent_runs)", o["run_id"],
                     task.task_id)  # fmt: skip
    status_dir = store_status_dir(output)
    if status_dir is not None:
        os.makedirs(status_dir, exist_ok=True)
        for name in os.listdir(status_dir):  # an earlier run's records (the output is re-used)
            os.remove(os.path.join(status_dir, name))
    beat = _Heartbeat(url, run_id) if heartbeat else None
    if beat is not None:
        beat.start()
    _LOG.info("store: %s (%s), run %s", redact_url(url), store.dialect, run_id)
    return JobStore(store, url, run_id, float(retry_s), status_dir, beat)
