"""Late reports: dropped against the watermark the same way on every runner, and counted (issue 12).

Beam drops an element of an event-time window once the watermark has passed the window's end plus the
allowed lateness -- or not: the streaming DirectRunner and Flink drop it without a word, the FnApiRunner
keeps it. :class:`DropLateReports` makes that one rule, applied before the windowing, and accounts for it:

``Key``     each batch of reports is keyed by ``(task_id, window_start, window_end)`` of the **last** window
            it belongs to (its only window for fixed windows; the one that closes last for sliding ones),
            in the global window, so nothing here is ever late itself;
``Close``   :class:`DropLateFn`, a stateful DoFn: the first batch of a key sets an event-time timer at
            that window's end plus the allowed lateness (its garbage-collection time, the moment Beam's
            own rule closes it); when the watermark passes it, the key is closed. A batch that arrives
            for a closed key is dropped: counted as ``late_dropped`` (reports; counter ``ldp/late_dropped``
            and a count dict ``{"late_dropped": n}``, so it reaches the job summary, the ``OUT/counts``
            lines and the store's ``ldp_counts``) and dead-lettered with reason ``late`` (one dead letter
            per dropped batch: its group, size, event time and window; no report fields). Both are
            timestamped at the later of the batch's event time and the wall clock, so they are not late
            data themselves (``transforms.counts.AtProcessingTime``). The other batches go on unchanged,
            with their event-time timestamps.

Accounting: late reports passed validation, so they stay in ``accepted`` and ``read = accepted + rejected``
holds as before; of the accepted reports, ``late_dropped`` are in no estimate:

    ``read = accepted + rejected``  and  ``accepted = in_estimates + late_dropped``

where ``in_estimates`` is the number of accepted reports in at least one window's panes (fixed windows:
the sum of the windows' final ``n_reports``). Because the batches that pass were let through before the
watermark passed the window's garbage-collection time, the aggregation downstream does not drop them
(in-band watermarks on Flink, pending-bundle watermark holds on the DirectRunner; the FnApiRunner never
drops). With **sliding** windows a report is dropped only when its last window has closed (then every
window of it has); one that misses its earliest windows but still counts in later ones is in the estimates
of those and not in ``late_dropped``. The global window is never late (nothing to drop), and bounded
(batch) jobs have no late data: the step runs in streaming jobs with event-time windows only.

State: one boolean and one timer per (task, window) ever seen, kept for the life of the job (a closed
window must stay closed); a few bytes per window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.coders import BooleanCoder
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms import window as bw
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Duration, Timestamp

from ldp.task import WindowConfig
from transforms.counts import COUNTER_NAMESPACE
from transforms.records import make_dead_letter

__all__ = ["LATE_REASON", "DropLateFn", "DropLateReports", "drops_late_data", "last_window"]

#: Dead-letter reason of a batch of reports that arrived after its window closed.
LATE_REASON = "late"


def drops_late_data(window: WindowConfig, streaming: bool) -> bool:
    """Whether a job has late data to drop: streaming with event-time windows."""
    return streaming and window.size_s is not None


def _ms(ts: Timestamp) -> int:
    return int(ts.micros // 1000)


def last_window(fn: bw.WindowFn, timestamp: Timestamp) -> bw.IntervalWindow:
    """The window of ``fn`` containing ``timestamp`` that ends last."""
    windows = fn.assign(bw.WindowFn.AssignContext(timestamp))
    return max(windows, key=lambda w: (w.end, w.start))


class _KeyByLastWindow(beam.DoFn):
    def __init__(self, window: WindowConfig) -> None:
        self.window = window
        self._fn: bw.WindowFn | None = None

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam) -> Iterator[Any]:  # noqa: B008
        if self._fn is None:
            w = self.window
            self._fn = (
                bw.FixedWindows(w.size_s) if w.period_s is None else bw.SlidingWindows(w.size_s, w.period_s)
            )
        task_id, reports = element
        win = last_window(self._fn, timestamp)
        yield (task_id, _ms(win.start), _ms(win.end)), (reports, int(timestamp.micros))


class DropLateFn(beam.DoFn):
    """Keyed by ``(task_id, window_start_ms, window_end_ms)``: lets batches through until the watermark
    passes the window's end plus ``allowed_lateness_s``, then drops, counts and dead-letters them (see the
    module docstring). Main output: ``(task_id, GroupReports)`` at its event timestamp; ``counts`` and
    ``dead_letter`` at the later of that and the wall clock."""

    CLOSED = ReadModifyWriteStateSpec("closed", BooleanCoder())
    ARMED = ReadModifyWriteStateSpec("armed", BooleanCoder())
    CLOSE = TimerSpec("close", TimeDomain.WATERMARK)

    def __init__(self, allowed_lateness_s: float) -> None:
        self.lateness_s = float(allowed_lateness_s)
        self.lateness = Duration(micros=int(round(self.lateness_s * 1e6)))
        self.late_reports = Metrics.counter(COUNTER_NAMESPACE, "late_dropped")
        self.late_batches = Metrics.counter(COUNTER_NAMESPACE, "late_batches")

    def process(
        self,
        element: Any,
        closed=beam.DoFn.StateParam(CLOSED),  # noqa: B008 - Beam's state idiom
        armed=beam.DoFn.StateParam(ARMED),  # noqa: B008
        close=beam.DoFn.TimerParam(CLOSE),  # noqa: B008
    ) -> Iterator[Any]:
        (task_id, start_ms, end_ms), (reports, event_us) = element
        if closed.read():
            n = len(reports.reports)
            self.late_reports.inc(n)
            self.late_batches.inc()
            at = max(Timestamp(micros=event_us), Timestamp.now())  # not late data itself
            yield TaggedOutput("counts", bw.TimestampedValue({"late_dropped": n}, at))
            start, end = (Timestamp(micros=t * 1000).to_rfc3339() for t in (start_ms, end_ms))
            detail = (
                f"{n} accepted report(s) of group {int(reports.group)}, event time "
                f"{Timestamp(micros=event_us).to_rfc3339()}, arrived after window [{start}, {end})"
                f" closed (the watermark passed its end plus the allowed lateness of {self.lateness_s:g} s); "
                "dropped from the estimates"
            )
            dead = make_dead_letter(LATE_REASON, getattr(reports, "source", None) or "late", detail=detail)
            dead["task_id"] = task_id
            yield TaggedOutput("dead_letter", bw.TimestampedValue(dead, at))
            return
        if not armed.read():
            close.set(Timestamp(micros=end_ms * 1000 - 1) + self.lateness)
            armed.write(True)
        yield bw.TimestampedValue((task_id, reports), Timestamp(micros=event_us))

    @on_timer(CLOSE)
    def on_close(self, closed=beam.DoFn.StateParam(CLOSED)) -> None:  # noqa: B008
        closed.write(True)


class DropLateReports(beam.PTransform):
    """``(task_id, GroupReports)`` timestamped by event time (the validate step's reports) ->
    ``reports`` (``(task_id, GroupReports)``, the batches on time), ``counts`` and ``dead_letter`` (the
    late ones); see the module docstring."""

    def __init__(self, window: WindowConfig) -> None:
        super().__init__()
        if window.size_s is None:
            raise ValueError("the global window has no late data (DropLateReports needs event-time windows)")
        self.window = window

    def expand(self, stamped: PCollection):
        return (
            stamped
            | "Global" >> beam.WindowInto(bw.GlobalWindows())
            | "KeyByWindow"
            >> beam.ParDo(_KeyByLastWindow(self.window)).with_output_types(tuple[tuple[str, int, int], Any])
            | "Close"
            >> beam.ParDo(DropLateFn(self.window.allowed_lateness_s)).with_outputs(
                "counts", "dead_letter", main="reports"
            )
        )
