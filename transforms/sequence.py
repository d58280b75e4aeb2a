"""The ordered finalize step: windows finalized one after the other, in order of window start, through a
task's :class:`~ldp.aggregate.WindowSequence` (the heavy_hitters kind's trie mode).

:class:`FinalizeInOrder` replaces ``Aggregate/Finalize`` when the aggregator's ``window_sequence()`` gives a
sequence (:func:`window_sequence_of`). Its steps:

``WithWindow``  ``(task_id, GroupAccumulators)`` of a window and pane -> ``(task_id, (WindowInfo, accs))``,
                its timestamp kept (the window's last instant);
``Global``      re-windowed to the global window, so one stateful key per task sees every window;
``InOrder``     :class:`SequenceFn`: buffers each window's panes (state ``panes``) and sets an event-time
                timer at the earliest buffered window's end (its last millisecond). When the timer fires
                at T, the windows ending by T are finalized in order of window start: their panes merged
                (discarding panes) or the latest kept (accumulating), ``sequence.step(state, accs, info)``
                called with the state the previous window left (state ``sequence``), the publication
                written to the job's directory (:func:`wire.publication.write_publication`; the
                aggregator's ``publish_dir``, None: no file), the rows emitted; then the timer moves to
                the next buffered window. A pane timed ``LATE``, or of a window that ends by a timer
                that has already fired, comes after its window was stepped: it is counted
                (``ldp/sequence_late_panes``), logged and dropped. A sequence resumed from an earlier
                run's publication (its ``initial_state()``; :func:`resumed_closed`) counts a window
                ending by that publication's ``window_end`` as late too, so a replay cannot fork the
                state. Counters ``ldp/sequence_windows``
                plus the finalize step's own (``finalized_panes``, ``<output>_rows``, ``empty_panes``,
                ``finalize_ms``);
``Rewindow_*``  each output back in its window (:class:`RowWindows`, read from the row's pane header or
                the pane's ``WindowInfo``; allowed lateness: below), so the writers and the store see the
                same windows as after ``FinalizeFn``: one pane per window.

Why the order holds: a window's on-time pane carries the timestamp of the window's last instant, and the
watermark at this step cannot pass the timestamp of an element not yet delivered, so when the timer of a
window fires every earlier window's on-time pane is in the buffer. A publication write that fails raises:
the bundle fails and is retried (the write is idempotent: a retried step writes the same file).

Runners: Prism and the FnApiRunner hold this step's output watermark at its pending timers, so the rows
are on time downstream. The BundleBasedDirectRunner (the DirectRunner's streaming mode: Pub/Sub, a
``TestStream``) holds none: its rows come after their window's end, so ``Rewindow_*`` gives them an
allowed lateness (:class:`FinalizeInOrder`) and the writers keep them; but what a timer emits once the
watermark has jumped to the end of time (a ``--streaming_duration`` deadline) is dropped by the writers'
grouping there (the publication is still written).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms import window as bw
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Duration, Timestamp

from ldp.aggregate import Aggregator, GroupAccumulators, ResultRow, WindowInfo, merge_all
from ldp.task import WindowConfig
from transforms.aggregate import window_info
from transforms.counts import COUNTER_NAMESPACE
from transforms.display import item, task_display
from transforms.progress import window_label
from wire.publication import write_publication

__all__ = [
    "REWINDOW_SLACK_S", "FinalizeInOrder", "RowWindows", "SequenceFn", "due_ms", "resumed_closed",
    "window_sequence_of",
]

_LOG = logging.getLogger(__name__)


def window_sequence_of(aggregator: Aggregator) -> Any | None:
    """The aggregator's :class:`~ldp.aggregate.WindowSequence`, None for one whose windows are finalized
    each on its own (also an aggregator without the method)."""
    method = getattr(aggregator, "window_sequence", None)
    return None if method is None else method()


def resumed_closed(sequence: Any) -> int | None:
    """Where a resumed sequence starts: the step time (:func:`due_ms`) of the window its state was left
    by, its ``resumed_window_end`` (None: a sequence started afresh, or resumed from the global window),
    so a window ending by then counts as late, as if this run had stepped it."""
    end = getattr(sequence, "resumed_window_end", None)
    return None if end is None else due_ms(end)


def due_ms(end_ms: int | None) -> int:
    """The millisecond at which a window is stepped: its last one (the global window: its last instant)."""
    if end_ms is None:
        return int(bw.GlobalWindow().max_timestamp().micros) // 1000
    return int(end_ms) - 1


def _with_window(
    element: tuple[str, GroupAccumulators],
    window=beam.DoFn.WindowParam,  # noqa: B008 - Beam's parameter idiom
    pane=beam.DoFn.PaneInfoParam,  # noqa: B008
) -> Iterator[tuple[str, tuple[WindowInfo, GroupAccumulators]]]:
    task_id, accs = element
    yield task_id, (window_info(window, pane), accs)


class SequenceFn(beam.DoFn):
    """Keyed by task id, in the global window: ``(WindowInfo, GroupAccumulators)`` panes -> the rows of
    each window's sequence step, on the tagged outputs named by their ``output`` plus ``panes`` (see the
    module docstring). ``accumulating``: a later pane holds the earlier ones (else they are merged)."""

    PANES = BagStateSpec("panes", PickleCoder())
    STATE = ReadModifyWriteStateSpec("sequence", PickleCoder())
    TIMER = TimerSpec("window_end", TimeDomain.WATERMARK)

    def __init__(self, aggregator: Aggregator, *, accumulating: bool, publish_dir: str | None = None) -> None:
        self.aggregator = aggregator
        self.accumulating = bool(accumulating)
        self.publish_dir = publish_dir
        self._sequence: Any = None
        self.windows = Metrics.counter(COUNTER_NAMESPACE, "sequence_windows")
        self.late = Metrics.counter(COUNTER_NAMESPACE, "sequence_late_panes")
        self.empty = Metrics.counter(COUNTER_NAMESPACE, "empty_panes")
        self.panes = Metrics.counter(COUNTER_NAMESPACE, "finalized_panes")
        self.rows = {o.name: Metrics.counter(COUNTER_NAMESPACE, f"{o.name}_rows") for o in aggregator.outputs}
        self.finalize_ms = Metrics.distribution(COUNTER_NAMESPACE, "finalize_ms")

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            "accumulating": item(self.accumulating, "Accumulating panes"),
            "publish_dir": item(self.publish_dir, "Publication directory"),
        }

    def setup(self) -> None:
        self._sequence = window_sequence_of(self.aggregator)
        if self._sequence is None:
            raise ValueError(f"task {self.aggregator.task.task_id!r} has no window sequence")

    def _read(self, state) -> dict[str, Any]:
        st = state.read()
        if st is None:
            st = {"sequence": self._sequence.initial_state(), "closed": resumed_closed(self._sequence),
                  "timer": None}  # fmt: skip
        return st

    def process(
        self,
        element: tuple[str, tuple[WindowInfo, GroupAccumulators]],
        panes=beam.DoFn.StateParam(PANES),  # noqa: B008 - Beam's state idiom
        state=beam.DoFn.StateParam(STATE),  # noqa: B008
        timer=beam.DoFn.TimerParam(TIMER),  # noqa: B008
    ) -> None:
        if self._sequence is None:
            self.setup()
        task_id, (info, accs) = element
        st = self._read(state)
        due = due_ms(info.end_ms)
        if info.pane_timing == "LATE" or (st["closed"] is not None and due <= st["closed"]):
            self.late.inc()
            _LOG.warning(
                "sequence %s: %s pane %d (%s, %d reports) came after the window was stepped; dropped",
                task_id, window_label(info.start_ms, info.end_ms), info.pane_index, info.pane_timing,
                accs.n_reports,
            )  # fmt: skip
            return
        panes.add((info, accs))
        if st["timer"] is None or due < st["timer"]:
            timer.set(Timestamp(micros=due * 1000))
            st["timer"] = due
        state.write(st)

    @on_timer(TIMER)
    def on_window_end(
        self,
        key=beam.DoFn.KeyParam,  # noqa: B008
        fired=beam.DoFn.TimestampParam,  # noqa: B008
        panes=beam.DoFn.StateParam(PANES),  # noqa: B008
        state=beam.DoFn.StateParam(STATE),  # noqa: B008
        timer=beam.DoFn.TimerParam(TIMER),  # noqa: B008
    ) -> Iterator[Any]:
        if self._sequence is None:
            self.setup()
        t = int(fired.micros) // 1000
        st = self._read(state)
        buffered = list(panes.read())
        ready = [p for p in buffered if due_ms(p[0].end_ms) <= t]
        pending = [p for p in buffered if due_ms(p[0].end_ms) > t]
        panes.clear()
        for p in pending:
            panes.add(p)
        st["closed"] = t if st["closed"] is None else max(st["closed"], t)
        for info, accs in self._windows(ready):
            yield from self._step(key, st, info, accs)
        st["timer"] = min((due_ms(p[0].end_ms) for p in pending), default=None)
        if st["timer"] is not None:
            timer.set(Timestamp(micros=st["timer"] * 1000))
        state.write(st)

    def _windows(
        self, ready: Iterable[tuple[WindowInfo, GroupAccumulators]]
    ) -> list[tuple[WindowInfo, GroupAccumulators]]:
        """One ``(info, accs)`` per window, in order of window start: the window's panes merged
        (discarding) or its latest (accumulating); ``info`` of the latest pane, as the window's last."""
        by_window: dict[tuple[int | None, int | None], list[tuple[WindowInfo, GroupAccumulators]]] = {}
        for info, accs in ready:
            by_window.setdefault((info.start_ms, info.end_ms), []).append((info, accs))
        out = []
        for key in sorted(by_window, key=lambda k: (k[0] is not None, k[0] or 0, k[1] or 0)):
            parts = by_window[key]
            parts.sort(key=lambda p: p[0].pane_index)
            info = parts[-1][0]._replace(is_last_pane=True)
            if self.accumulating or len(parts) == 1:
                accs = parts[-1][1]
            else:
                accs = merge_all(self.aggregator, [a for _, a in parts])
            out.append((info, accs))
        return out

    def _step(
        self, task_id: str, st: dict[str, Any], info: WindowInfo, accs: GroupAccumulators
    ) -> Iterator[TaggedOutput]:
        if accs.n_reports == 0:
            self.empty.inc()
            return
        present = {g: a for g, a in sorted(accs.accs.items()) if accs.counts.get(g, 0) > 0}
        t0 = time.perf_counter()
        new_state, rows, publication = self._sequence.step(st["sequence"], present, info)
        path = None
        if publication is not None and self.publish_dir:
            try:
                path = write_publication(self.publish_dir, publication)
            except (OSError, ValueError) as e:
                label = window_label(info.start_ms, info.end_ms)
                _LOG.error("sequence %s: cannot publish %s: %s", task_id, label, e)
                raise
        st["sequence"] = new_state
        ms = int((time.perf_counter() - t0) * 1000)
        self.windows.inc()
        self.panes.inc()
        self.finalize_ms.update(ms)
        _LOG.info(
            "stepped %s %s pane %d (%s): %d reports in %d group(s), %d row(s), %d ms%s",
            task_id, window_label(info.start_ms, info.end_ms), info.pane_index, info.pane_timing,
            accs.n_reports, len(present), len(rows), ms, f", published {path}" if path else "",
        )  # fmt: skip
        at = Timestamp(micros=due_ms(info.end_ms) * 1000 + 999)  # the window's last instant
        for row in rows:
            self.rows[row.output].inc()
            yield TaggedOutput(row.output, bw.TimestampedValue(row, at))
        yield TaggedOutput("panes", bw.TimestampedValue((task_id, info, tuple(rows)), at))


def _row_bounds(row: ResultRow) -> tuple[int | None, int | None]:
    return row.window_start, row.window_end


def _pane_bounds(pane: tuple[str, WindowInfo, tuple[ResultRow, ...]]) -> tuple[int | None, int | None]:
    return pane[1].start_ms, pane[1].end_ms


class RowWindows(bw.NonMergingWindowFn):
    """Each element in the window its ``bounds(element)`` names, ``(start_ms, end_ms)``: the rows of the
    ordered finalize step back in the event-time windows they were finalized for."""

    def __init__(self, bounds: Callable[[Any], tuple[int | None, int | None]]) -> None:
        self.bounds = bounds

    def assign(self, context: bw.WindowFn.AssignContext) -> list[bw.IntervalWindow]:
        start, end = self.bounds(context.element)
        if start is None or end is None:
            raise ValueError("an element of the global window in event-time windows")
        return [bw.IntervalWindow(Timestamp(micros=int(start) * 1000), Timestamp(micros=int(end) * 1000))]

    def get_window_coder(self):
        from apache_beam.coders import coders

        return coders.IntervalWindowCoder()

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.bounds is other.bounds

    def __hash__(self) -> int:
        return hash((type(self), self.bounds))


#: How long after a window's end (beyond the task's allowed lateness) the writers still take its rows.
REWINDOW_SLACK_S = 60.0


class FinalizeInOrder(beam.PTransform):
    """``(task_id, GroupAccumulators)`` per window and pane -> ``{<output name>: rows, ..., "panes": ...}``,
    the windows finalized in order of start through the aggregator's window sequence (module docstring).
    ``window``: the job's effective windowing (accumulation mode; the global window: the rows stay there).
    The rows go back to their windows with an allowed lateness of the window size, the task's lateness
    and :data:`REWINDOW_SLACK_S`: a runner that holds no watermark for a timer (the BundleBasedDirectRunner)
    emits them after their window's end, and the writers must not drop them."""

    def __init__(
        self, aggregator: Aggregator, window: WindowConfig, *, publish_dir: str | None = None
    ) -> None:
        super().__init__()
        self.aggregator = aggregator
        self.window = window
        self.publish_dir = publish_dir

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            "publish_dir": item(self.publish_dir, "Publication directory"),
        }

    def expand(self, combined: PCollection) -> dict[str, PCollection]:
        names = [o.name for o in self.aggregator.outputs]
        w = self.window
        fn = SequenceFn(self.aggregator, accumulating=w.accumulating, publish_dir=self.publish_dir)
        stepped = (
            combined
            | "WithWindow" >> beam.FlatMap(_with_window).with_output_types(tuple[str, Any])  # a str key
            | "Global" >> beam.WindowInto(bw.GlobalWindows())
            | "InOrder" >> beam.ParDo(fn).with_outputs(*names, "panes")
        )
        if w.size_s is None:
            return {name: stepped[name] for name in [*names, "panes"]}
        lateness = Duration(seconds=float(w.size_s) + float(w.allowed_lateness_s) + REWINDOW_SLACK_S)
        out: dict[str, PCollection] = {}
        for name in [*names, "panes"]:
            windows = RowWindows(_pane_bounds if name == "panes" else _row_bounds)
            rewindow = beam.WindowInto(windows, allowed_lateness=lateness)
            out[name] = stepped[name] | f"Rewindow_{name}" >> rewindow
        return out
