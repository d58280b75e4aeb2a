"""Late reports: dropped against the watermark the same way on every runner, and counted.

Beam drops an element of an event-time window once the watermark has passed the window's end plus the
allowed lateness (the window's *garbage-collection time*, GC) -- or not: the streaming DirectRunner and
Flink drop it without a word, the FnApiRunner keeps it. :class:`DropLateReports` applies that one rule
itself, before the windowing, and accounts for what it drops. A Python DoFn cannot read the watermark, so
it learns it from event-time timers:

``Key``     each batch of reports is keyed by ``(task_id, shard)`` in the global window (nothing here is late
            itself) and tagged with its **last** window (its only window for fixed windows; the one that
            closes last for sliding ones). One shard by default (:data:`DEFAULT_SHARDS`): the batches --
            not the reports: one element per file block or message and group -- of a task pass one key;
            more shards spread them, but each learns the watermark only from its own timers;
``Close``   :class:`DropLateFn`, a stateful DoFn with one event-time timer per key. Its state: the GC times
            of the windows it has let batches through for (*armed*), a probe at the latest event time it
            let through, and ``closed``: the latest timer time that has fired -- the watermark is past it.
            The timer is always at the earliest armed GC time or probe; when it fires at T, ``closed``
            becomes T and the timer moves on to the next armed time, or to the next window's GC time on
            the window grid (a chain that keeps ``closed`` following the watermark while no reports come,
            for ten windows beyond the latest report seen). A batch whose window's GC time is at or before
            ``closed`` arrived after its window closed: it is dropped, counted as ``late_dropped``
            (reports; counter ``ldp/late_dropped`` and a count dict ``{"late_dropped": n}``, so it reaches
            the job summary, the ``OUT/counts`` lines and the store's ``ldp_counts``) and dead-lettered with
            reason ``late`` (one dead letter per dropped batch: group, size, event time, window; no report
            fields). Both are timestamped at the later of the batch's event time and the wall clock, so
            they are not late data themselves (``transforms.counts.AtProcessingTime``). Every other batch
            goes on unchanged, with its event-time timestamp, and arms its window.

Why the aggregation downstream then drops nothing: a pending timer holds this step's output watermark at
its time, and the timer is never later than the GC time of a window that was let through, so the
watermark the windowing sees cannot pass that GC time before the timer fires here -- after which the
window's batches are dropped here. (In-band watermarks on Flink, watermark holds on the DirectRunner.)

The FnApiRunner (a watched directory on the DirectRunner) is the exception: it never drops late data and
it may fire this step's timers at the watch's final watermark before the last pending batches reach it,
so jobs there run without this step (``Aggregate(..., drop_late=False)``, set by ``pipelines.job`` for
the paced watch): nothing is dropped, everything read is in the estimates, ``late_dropped`` is 0.

Accounting: late reports passed validation, so they stay in ``accepted`` and ``read = accepted + rejected``
holds as before; of the accepted reports, ``late_dropped`` are in no estimate:

    ``read = accepted + rejected``  and  ``accepted = in_estimates + late_dropped``

where ``in_estimates`` is the number of accepted reports in at least one window's panes (fixed windows,
discarding panes: the sum of the panes' ``n_reports``).

Limits (documented, not silent in the counts): with **sliding** windows a report is dropped only when its
last window has closed (then all of its windows have); one that misses its earliest windows but still
counts in later ones is in the estimates of those, not in ``late_dropped``. What this step cannot know is
how far the watermark is past ``closed``: a batch for a window that no batch armed before, arriving after
the watermark passed that window's GC time but before any timer at or after it fired -- possible at the
very start of a job (no timer fired yet), or after more than ten windows without any report -- is let
through and judged by the runner downstream (kept by the FnApiRunner, dropped uncounted by Beam on the
others). The global window is never late, and bounded (batch) jobs have no late data: the step runs in
streaming jobs with event-time windows only. State per shard: a few integers per open window.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms import window as bw
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from ldp.task import WindowConfig
from transforms.counts import COUNTER_NAMESPACE
from transforms.display import item, task_id_display, window_display
from wire.records import make_dead_letter

__all__ = [
    "LATE_REASON",
    "DEFAULT_SHARDS",
    "CHAIN_WINDOWS",
    "DropLateFn",
    "DropLateReports",
    "drops_late_data",
    "last_window",
]

#: Dead-letter reason of a batch of reports that arrived after its window closed.
LATE_REASON = "late"

#: Keys per task of the lateness step. One: every timer of the task informs every decision (each key
#: learns the watermark only from its own timers, so a key that has seen nothing knows nothing).
DEFAULT_SHARDS = 1

#: How many windows beyond the latest report the timer chain follows the watermark.
CHAIN_WINDOWS = 10


def drops_late_data(window: WindowConfig, streaming: bool) -> bool:
    """Whether a job has late data to drop: streaming with event-time windows."""
    return streaming and window.size_s is not None


def _window_fn(window: WindowConfig) -> bw.WindowFn:
    if window.period_s is None:
        return bw.FixedWindows(window.size_s)
    return bw.SlidingWindows(window.size_s, window.period_s)


def last_window(fn: bw.WindowFn, timestamp: Timestamp) -> bw.IntervalWindow:
    """The window of ``fn`` containing ``timestamp`` that ends last."""
    windows = fn.assign(bw.WindowFn.AssignContext(timestamp))
    return max(windows, key=lambda w: (w.end, w.start))


class _Grid:
    """The GC times of a window config in whole milliseconds: ``end - 1 ms + lateness`` of every window.

    Milliseconds because runners keep timers to the millisecond (the FnApiRunner fires a timer set at
    ``...999`` microseconds as ``...000``); 1 ms before Beam's own ``end - 1 us + lateness``, so a window is
    closed here no later than Beam closes it (the hold of a timer is then never past Beam's GC time)."""

    def __init__(self, window: WindowConfig) -> None:
        self.size = int(round(window.size_s * 1e3))
        self.spacing = self.size if window.period_s is None else int(round(window.period_s * 1e3))
        self.offset = self.size % self.spacing  # window ends are offset + k * spacing
        self.lateness = int(round(window.allowed_lateness_s * 1e3))

    def gc(self, end_ms: int) -> int:
        return end_ms - 1 + self.lateness

    def next_gc(self, t: int) -> int:
        """The first GC time on the grid after ``t``."""
        end = t + 1 - self.lateness  # gc(end) > t  <=>  end > t + 1 - lateness
        k = (end - self.offset) // self.spacing + 1
        return self.gc(self.offset + k * self.spacing)

    @property
    def horizon(self) -> int:
        """How far past the latest report the chain runs: GC delay plus :data:`CHAIN_WINDOWS` windows."""
        return self.size + self.lateness + CHAIN_WINDOWS * self.spacing


class _KeyByShard(beam.DoFn):
    def __init__(self, window: WindowConfig, shards: int) -> None:
        self.window = window
        self.shards = shards
        self._fn: bw.WindowFn | None = None

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam) -> Iterator[Any]:  # noqa: B008
        if self._fn is None:
            self._fn = _window_fn(self.window)
        task_id, reports = element
        win = last_window(self._fn, timestamp)
        # a deterministic shard: a retried bundle sends the batch to the same key
        shard = (
            zlib.crc32(f"{int(reports.group)}:{len(reports.reports)}:{timestamp.micros}".encode())
            % self.shards
        )
        yield (task_id, shard), (reports, int(timestamp.micros), int(win.start.micros), int(win.end.micros))


def _rfc3339(us: int) -> str:
    return Timestamp(micros=us).to_rfc3339()


class DropLateFn(beam.DoFn):
    """Keyed by ``(task_id, shard)``: lets batches through until the watermark is known to be past their
    window's end plus ``allowed_lateness_s``, then drops, counts and dead-letters them (see the module
    docstring). Main output: ``(task_id, GroupReports)`` at its event timestamp; ``counts`` and
    ``dead_letter`` at the later of that and the wall clock."""

    STATE = ReadModifyWriteStateSpec("watermark", PickleCoder())
    TIMER = TimerSpec("watermark", TimeDomain.WATERMARK)

    def __init__(self, window: WindowConfig) -> None:
        if window.size_s is None:
            raise ValueError("the global window has no late data")
        self.window = window
        self.grid = _Grid(window)
        self.late_reports = Metrics.counter(COUNTER_NAMESPACE, "late_dropped")
        self.late_batches = Metrics.counter(COUNTER_NAMESPACE, "late_batches")

    def display_data(self) -> dict[str, Any]:
        return window_display(self.window)

    @staticmethod
    def _read(state) -> dict[str, Any]:
        return state.read() or {"closed": None, "armed": [], "probe": None, "max_seen": None, "timer": None}

    @staticmethod
    def _rearm(st: dict[str, Any], timer) -> None:
        due = [*st["armed"][:1], *([st["probe"]] if st["probe"] is not None else [])]
        at = min(due) if due else None
        if at is not None and at != st["timer"]:
            timer.set(Timestamp(micros=at * 1000))
        st["timer"] = at

    def process(
        self,
        element: Any,
        state=beam.DoFn.StateParam(STATE),  # noqa: B008 - Beam's state idiom
        timer=beam.DoFn.TimerParam(TIMER),  # noqa: B008
    ) -> Iterator[Any]:
        (task_id, _shard), (reports, event_us, start_us, end_us) = element
        st = self._read(state)
        gc = self.grid.gc(end_us // 1000)
        event_ms = event_us // 1000
        if st["closed"] is not None and gc <= st["closed"]:
            n = len(reports.reports)
            self.late_reports.inc(n)
            self.late_batches.inc()
            at = max(Timestamp(micros=event_us), Timestamp.now())  # not late data itself
            yield TaggedOutput("counts", bw.TimestampedValue({"late_dropped": n}, at))
            detail = (
                f"{n} accepted report(s) of group {int(reports.group)}, event time {_rfc3339(event_us)}, "
                f"arrived after window [{_rfc3339(start_us)}, {_rfc3339(end_us)}) closed (the watermark "
                f"passed its end plus the allowed lateness of {self.window.allowed_lateness_s:g} s); "
                "dropped from the estimates"
            )
            dead = make_dead_letter(LATE_REASON, getattr(reports, "source", None) or "late", detail=detail)
            dead["task_id"] = task_id
            yield TaggedOutput("dead_letter", bw.TimestampedValue(dead, at))
            return
        i = bisect.bisect_left(st["armed"], gc)
        if i == len(st["armed"]) or st["armed"][i] != gc:
            st["armed"].insert(i, gc)
        if st["closed"] is None or event_ms > st["closed"]:
            st["probe"] = event_ms if st["probe"] is None else max(st["probe"], event_ms)
        st["max_seen"] = event_ms if st["max_seen"] is None else max(st["max_seen"], event_ms)
        self._rearm(st, timer)
        state.write(st)
        yield bw.TimestampedValue((task_id, reports), Timestamp(micros=event_us))

    @on_timer(TIMER)
    def on_watermark(
        self,
        fired=beam.DoFn.TimestampParam,  # noqa: B008
        state=beam.DoFn.StateParam(STATE),  # noqa: B008
        timer=beam.DoFn.TimerParam(TIMER),  # noqa: B008
    ) -> None:
        t = int(fired.micros) // 1000  # whole milliseconds, as the runners keep timers
        st = self._read(state)
        st["closed"] = t if st["closed"] is None else max(st["closed"], t)
        st["armed"] = [g for g in st["armed"] if g > t]
        if st["probe"] is not None and st["probe"] <= t:
            st["probe"] = None
        st["timer"] = None
        if not st["armed"] and st["max_seen"] is not None:
            nxt = self.grid.next_gc(t)  # keep following the watermark along the window grid
            if nxt <= st["max_seen"] + self.grid.horizon:
                st["armed"] = [nxt]
        self._rearm(st, timer)
        state.write(st)


class DropLateReports(beam.PTransform):
    """``(task_id, GroupReports)`` timestamped by event time (the validate step's reports) ->
    ``reports`` (the batches on time, unchanged), ``counts`` and ``dead_letter`` (the late ones); see the
    module docstring."""

    def __init__(
        self, window: WindowConfig, shards: int = DEFAULT_SHARDS, *, task_id: str | None = None
    ) -> None:
        super().__init__()
        if window.size_s is None:
            raise ValueError("the global window has no late data (DropLateReports needs event-time windows)")
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.window = window
        self.shards = shards
        self.task_id = task_id

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            **window_display(self.window),
            "shards": item(self.shards, "Shards per task"),
        }

    def expand(self, reports: PCollection):
        return (
            reports
            | "Global" >> beam.WindowInto(bw.GlobalWindows())
            | "KeyByShard"
            >> beam.ParDo(_KeyByShard(self.window, self.shards)).with_output_types(
                tuple[tuple[str, int], Any]
            )
            | "Close"
            >> beam.ParDo(DropLateFn(self.window)).with_outputs("counts", "dead_letter", main="reports")
        )
