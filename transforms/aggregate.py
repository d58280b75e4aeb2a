"""The one aggregation stack every kind of task runs on: validate -> window -> combine -> finalize.

:class:`Aggregate` turns record batches (from a source in :mod:`transforms.io`) into the typed result
rows of the task's :class:`~ldp.aggregate.Aggregator`, plus dead letters and per-batch counts:

``Validate``  :class:`ValidateFn`: record batches -> ``(task_id, GroupReports)`` timestamped by event time,
              and dead letters; counters ``ldp/reports_read``, ``reports_accepted``, ``reports_rejected``,
              ``rejected_<reason>``;
``Window``    :class:`WindowReports`: event-time windows, triggers, lateness, accumulation mode;
``Combine``   ``CombinePerKey`` (key: the task id) of :class:`TaskCombineFn`, whose accumulator is the
              tuple of the task's per-group accumulators (:class:`ldp.aggregate.GroupAccumulators`), so one
              pane of one window holds every group: no second grouping, no guessing at the latest pane;
``Finalize``  :class:`FinalizeFn`: ``aggregator.finalize`` once per window and pane -> result rows, one
              tagged output per :class:`~ldp.aggregate.OutputSpec` (``estimates``; ``answers``, ``models``);
              for an aggregator whose ``window_sequence()`` gives a sequence, ``FinalizeInOrder``
              (:mod:`transforms.sequence`) instead: one step per window, in order of window start.

The labels are stable (runner UIs, update-compatible streaming jobs). Because accumulators are exact
integer statistics and the same ``ldp.aggregate`` functions drive them here and in memory, the pipeline's
rows equal ``ldp.aggregate.finalize_window`` over the same reports, bit for bit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.windowed_value import PaneInfo

from ldp.aggregate import (
    Aggregator,
    GroupAccumulators,
    ResultRow,
    WindowInfo,
    accumulate,
    finalize_window,
    merge_all,
)
from ldp.reports import Reports
from ldp.task import WindowConfig
from transforms.counts import COUNTER_NAMESPACE
from transforms.display import item, task_display, task_id_display, window_display
from transforms.lateness import DropLateReports, drops_late_data
from transforms.progress import window_label
from transforms.runners import effective_window, whole_seconds
from wire.records import REASONS, window_granule_ms
from wire.validate import RecordBatch, TaskReportValidator

__all__ = [
    "GroupReports",
    "KeyedReports",
    "ValidateFn",
    "WindowReports",
    "TaskCombineFn",
    "FinalizeFn",
    "Aggregate",
    "window_info",
]


_LOG = logging.getLogger(__name__)


class GroupReports(NamedTuple):
    """A batch of one group's accepted reports (all in one window granule). When the task counts reports
    per client (``transforms.budget``) the validate step also sets each report's event time and client id
    and the batch's source; the budget step drops them."""

    group: int
    reports: Reports
    event_ms: np.ndarray | None = None
    client_ids: np.ndarray | None = None
    source: str | None = None


#: The element after ``Validate``: ``(task_id, GroupReports)``, timestamped by event time.
KeyedReports = tuple[str, GroupReports]


class ValidateFn(beam.DoFn):
    """``RecordBatch`` -> ``(task_id, GroupReports)`` timestamped by event time (main), dead-letter dicts
    (``dead_letter``) and one count dict per batch (``counts``)."""

    def __init__(self, aggregator: Aggregator, granule_ms: int | None, *, rounded_times: bool = True) -> None:
        self.aggregator = aggregator
        self.granule_ms = granule_ms
        self.rounded_times = rounded_times  # False: no fine_time check (the shuffler's input)
        self._validator: TaskReportValidator | None = None
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.accepted = Metrics.counter(COUNTER_NAMESPACE, "reports_accepted")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.record_decoded = Metrics.counter(COUNTER_NAMESPACE, "reports_decoded_one_by_one")
        self.per_reason = {r: Metrics.counter(COUNTER_NAMESPACE, f"rejected_{r}") for r in REASONS}

    def setup(self) -> None:
        self._validator = TaskReportValidator(self.aggregator, rounded_times=self.rounded_times)

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            "granule_ms": item(self.granule_ms, "Event-time granule (ms)"),
            "rounded_times": item(self.rounded_times, "Report times rounded"),
        }

    def process(self, element: RecordBatch) -> Iterator[bw.TimestampedValue | TaggedOutput]:
        if self._validator is None:
            self.setup()
        source, records = element
        tb = self._validator.validate(records, source, granule_ms=self.granule_ms)
        self.read.inc(tb.n_read)
        self.accepted.inc(tb.n_accepted)
        self.rejected.inc(len(tb.dead_letters))
        self.record_decoded.inc(tb.n_record_decoded)
        for reason, c in tb.reason_counts.items():
            self.per_reason[reason].inc(c)
        for dl in tb.dead_letters:
            yield TaggedOutput("dead_letter", dl)
        yield TaggedOutput("counts", tb.counts())
        task_id = self.aggregator.task.task_id
        for part in tb.parts:
            gr = GroupReports(part.group, part.reports)
            if part.client_ids is not None:  # the budget step follows (transforms.budget)
                gr = GroupReports(part.group, part.reports, part.event_ms, part.client_ids, source)
            yield bw.TimestampedValue((task_id, gr), part.timestamp_ms / 1000)


class WindowReports(beam.PTransform):
    """Event-time windows from a :class:`~ldp.task.WindowConfig`.

    * ``size_s`` None: one global window (with ``early_firing_s``: repeated processing-time panes);
    * ``period_s`` None: fixed windows, else sliding windows;
    * ``early_firing_s``: early panes every so many (whole) seconds of processing time, then the on-time pane,
      then one late pane per late batch within ``allowed_lateness_s`` (streaming only, see
      :func:`transforms.runners.effective_window`);
    * ``accumulating``: panes are cumulative.
    """

    def __init__(self, window: WindowConfig, *, task_id: str | None = None) -> None:
        super().__init__()
        self.window = window
        self.task_id = task_id

    def display_data(self) -> dict[str, Any]:
        return {**task_id_display(self.task_id), **window_display(self.window)}

    def expand(self, pcoll: PCollection) -> PCollection:
        options = pcoll.pipeline.options if pcoll.pipeline is not None else None
        streaming = options is None or bool(options.view_as(StandardOptions).streaming)
        w = effective_window(self.window, streaming)
        mode = tr.AccumulationMode.ACCUMULATING if w.accumulating else tr.AccumulationMode.DISCARDING
        early = tr.AfterProcessingTime(whole_seconds(w.early_firing_s)) if w.early_firing_s else None
        if w.size_s is None:
            if early is None:
                return pcoll | "Global" >> beam.WindowInto(bw.GlobalWindows())
            return pcoll | "Global" >> beam.WindowInto(
                bw.GlobalWindows(), trigger=tr.Repeatedly(early), accumulation_mode=mode
            )
        fn = bw.FixedWindows(w.size_s) if w.period_s is None else bw.SlidingWindows(w.size_s, w.period_s)
        trigger = tr.AfterWatermark(early=early, late=tr.AfterCount(1) if w.allowed_lateness_s > 0 else None)
        return pcoll | "Windows" >> beam.WindowInto(
            fn,
            trigger=trigger,
            accumulation_mode=mode,
            allowed_lateness=Duration(seconds=w.allowed_lateness_s),
        )


class TaskCombineFn(beam.CombineFn):
    """``GroupReports`` of one task -> :class:`~ldp.aggregate.GroupAccumulators` (the tuple of per-group
    accumulators), a thin adapter over :func:`ldp.aggregate.accumulate` / :func:`~ldp.aggregate.merge_all`.
    Merging nothing (the DirectRunner does on empty panes) gives an empty one, which finalize skips."""

    def __init__(self, aggregator: Aggregator) -> None:
        super().__init__()
        self.aggregator = aggregator

    def display_data(self) -> dict[str, Any]:
        return task_display(self.aggregator)

    def create_accumulator(self) -> GroupAccumulators:
        return GroupAccumulators()

    def add_input(self, accumulator: GroupAccumulators, element: GroupReports) -> GroupAccumulators:
        return accumulate(self.aggregator, accumulator, element.group, element.reports)

    def add_inputs(
        self, accumulator: GroupAccumulators, elements: Iterable[GroupReports]
    ) -> GroupAccumulators:
        for e in elements:
            accumulator = accumulate(self.aggregator, accumulator, e.group, e.reports)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[GroupAccumulators]) -> GroupAccumulators:
        return merge_all(self.aggregator, accumulators)

    def extract_output(self, accumulator: GroupAccumulators) -> GroupAccumulators:
        return accumulator

    def compact(self, accumulator: GroupAccumulators) -> GroupAccumulators:
        return accumulator


_PANE_TIMING = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}


def window_info(window: bw.BoundedWindow | None, pane: PaneInfo | None) -> WindowInfo:
    """The :class:`~ldp.aggregate.WindowInfo` of a Beam window and pane (global window: no bounds)."""
    start = end = None
    if window is not None and hasattr(window, "start") and not isinstance(window, bw.GlobalWindow):
        start, end = int(window.start.micros // 1000), int(window.end.micros // 1000)
    if pane is None:
        return WindowInfo(start, end)
    timing = _PANE_TIMING.get(int(pane.timing), "UNKNOWN")
    return WindowInfo(start, end, timing, int(pane.index), bool(pane.is_last))


class FinalizeFn(beam.DoFn):
    """``(task_id, GroupAccumulators)`` of one window and pane -> result rows, each on the tagged output
    named by its ``output``. A pane without reports yields nothing (counter ``ldp/empty_panes``)."""

    def __init__(self, aggregator: Aggregator) -> None:
        self.aggregator = aggregator
        self.empty = Metrics.counter(COUNTER_NAMESPACE, "empty_panes")
        self.panes = Metrics.counter(COUNTER_NAMESPACE, "finalized_panes")
        self.rows = {o.name: Metrics.counter(COUNTER_NAMESPACE, f"{o.name}_rows") for o in aggregator.outputs}
        self.finalize_ms = Metrics.distribution(COUNTER_NAMESPACE, "finalize_ms")

    def display_data(self) -> dict[str, Any]:
        outputs = ", ".join(o.name for o in self.aggregator.outputs)
        return {**task_display(self.aggregator), "outputs": item(outputs, "Result outputs")}

    def process(
        self,
        element: tuple[str, GroupAccumulators],
        window=beam.DoFn.WindowParam,
        pane=beam.DoFn.PaneInfoParam,
    ) -> Iterator[TaggedOutput]:
        _task_id, accs = element
        if accs.n_reports == 0:
            self.empty.inc()
            return
        t0 = time.perf_counter()
        info = window_info(window, pane)
        rows: list[ResultRow] = finalize_window(self.aggregator, accs, info)
        ms = int((time.perf_counter() - t0) * 1000)
        self.finalize_ms.update(ms)
        self.panes.inc()
        _LOG.info(
            "finalized %s %s pane %d (%s): %d reports in %d group(s), %d row(s), %d ms",
            _task_id,
            window_label(info.start_ms, info.end_ms),
            info.pane_index,
            info.pane_timing,
            accs.n_reports,
            len(accs.accs),
            len(rows),
            ms,
        )
        for row in rows:
            self.rows[row.output].inc()
            yield TaggedOutput(row.output, row)
        # the whole pane as one element, for the latest-state store (transforms.store: one transaction)
        yield TaggedOutput("panes", (_task_id, info, tuple(rows)))


class Aggregate(beam.PTransform):
    """Record batches -> ``{<output name>: rows, ..., "dead_letter": dicts, "counts": dicts}``.

    ``counts`` holds one dict per input batch (``read``, ``accepted``, ``rejected``, ``rejected_<reason>``)
    at the batch's input timestamp; see :class:`transforms.counts.WindowedCounts`.
    """

    def __init__(
        self, aggregator: Aggregator, window: WindowConfig | None = None, drop_late: bool = True
    ) -> None:
        super().__init__()
        self.aggregator = aggregator
        self.window = aggregator.task.window if window is None else window
        self.drop_late = drop_late  # streaming: late reports dropped and counted (transforms.lateness)

    def display_data(self) -> dict[str, Any]:
        return {
            **task_display(self.aggregator),
            **window_display(self.window),
            "groups": item(int(self.aggregator.task.n_groups), "User groups"),
            "drop_late": item(self.drop_late, "Late reports dropped"),
        }

    def expand(self, batches: PCollection) -> dict[str, PCollection]:
        agg = self.aggregator
        from transforms.budget import EnforceBudget, budget_applies, budget_granule_ms

        granule = budget_granule_ms(agg.task, window_granule_ms(self.window.size_s, self.window.period_s))
        # batches: RecordBatch = (source, records) with records a ColumnBatch or a list of record dicts
        v = batches | "Validate" >> beam.ParDo(ValidateFn(agg, granule)).with_outputs(
            "dead_letter", "counts", main="reports"
        )
        # v.reports: KeyedReports = (task_id, GroupReports(group, Reports)), timestamped by event time
        reports, dead, counts = v.reports, v.dead_letter, v.counts
        if budget_applies(agg.task):  # reports per client id and budget period; the excess: over_budget
            b = v.reports | "Budget" >> EnforceBudget(agg, self.window.allowed_lateness_s)
            reports = b.reports
            dead = (v.dead_letter, b.dead_letter) | "BudgetDeadLetters" >> beam.Flatten()
            counts = (v.counts, b.counts) | "BudgetCounts" >> beam.Flatten()
        options = batches.pipeline.options if batches.pipeline is not None else None
        streaming = options is None or bool(options.view_as(StandardOptions).streaming)
        if self.drop_late and drops_late_data(self.window, streaming):
            # late reports dropped and counted, on every runner
            late = reports | "DropLate" >> DropLateReports(self.window, task_id=agg.task.task_id)
            reports = late.reports
            dead = (dead, late.dead_letter) | "LateDeadLetters" >> beam.Flatten()
            counts = (counts, late.counts) | "LateCounts" >> beam.Flatten()
        windowed = reports | "Window" >> WindowReports(self.window, task_id=agg.task.task_id)
        # windowed: the same elements, assigned to event-time windows (trigger, lateness, accumulation)
        combined = windowed | "Combine" >> beam.CombinePerKey(TaskCombineFn(agg))
        # combined: (task_id, GroupAccumulators) once per window and pane, every group of the task in it
        names = [o.name for o in agg.outputs]
        from transforms.sequence import FinalizeInOrder, window_sequence_of

        if window_sequence_of(agg) is not None:  # windows that depend on each other: stepped in order
            w = effective_window(self.window, streaming)
            out = combined | "FinalizeInOrder" >> FinalizeInOrder(
                agg, w, publish_dir=getattr(agg, "publish_dir", None)
            )
        else:
            rows = combined | "Finalize" >> beam.ParDo(FinalizeFn(agg)).with_outputs(*names, "panes")
            out = {name: rows[name] for name in names}
            out["panes"] = rows.panes
        # out[name]: ResultRow NamedTuples (EstimateRow; AnswerRow, ModelRow) of the window and pane;
        # out["panes"]: (task_id, WindowInfo, every row of the pane), one per pane (transforms.store)
        out.update(dead_letter=dead, counts=counts)
        return out
