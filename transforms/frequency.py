"""The frequency-estimation composites: validate -> key -> window -> combine -> finalize.

Stable labels (visible in runner UIs and used by update-compatible streaming jobs):

``Validate``  record batches -> timestamped ``((task_id, group), Reports)`` and dead letters; counters
``ldp/reports_read``, ``ldp/reports_accepted``, ``ldp/reports_rejected`` and ``ldp/rejected_<reason>``;
``Window``    event-time windows, triggers, lateness, accumulation mode;
``Combine``   :class:`~transforms.combine.OracleCombineFn` per key and window;
``Finalize``  :class:`~transforms.combine.FinalizeEstimates` per key, window and pane.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw
from apache_beam.utils.timestamp import Duration

from ldp.task import CollectionTask, WindowConfig
from transforms.combine import FinalizeEstimates, OracleCombineFn
from transforms.io import COUNTER_NAMESPACE
from transforms.records import REASONS, ReportValidator, split_by_group_and_granule, window_granule_ms

__all__ = [
    "ValidateReports",
    "WindowReports",
    "EstimateFrequencies",
    "FrequencyAggregation",
    "job_counts",
    "SumCounts",
    "WindowedCounts",
    "format_counts",
]


class _ValidateFn(beam.DoFn):
    def __init__(self, task: CollectionTask, granule_ms: int | None) -> None:
        self.task = task
        self.granule_ms = granule_ms
        self._validator = None
        self.read = Metrics.counter(COUNTER_NAMESPACE, "reports_read")
        self.accepted = Metrics.counter(COUNTER_NAMESPACE, "reports_accepted")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        self.per_reason = {r: Metrics.counter(COUNTER_NAMESPACE, f"rejected_{r}") for r in REASONS}

    def setup(self) -> None:
        self._validator = ReportValidator(self.task)

    def process(self, element):
        source, records = element
        if self._validator is None:
            self.setup()
        vb = self._validator.validate(records, source)
        self.read.inc(vb.n_read)
        self.accepted.inc(vb.n_accepted)
        self.rejected.inc(len(vb.dead_letters))
        for reason, c in vb.reason_counts.items():
            self.per_reason[reason].inc(c)
        for dl in vb.dead_letters:
            yield beam.pvalue.TaggedOutput("dead_letter", dl)
        counts = {"read": vb.n_read, "accepted": vb.n_accepted, "rejected": len(vb.dead_letters)}
        counts.update({f"rejected_{k}": v for k, v in vb.reason_counts.items()})
        yield beam.pvalue.TaggedOutput("counts", counts)
        for group, ts_ms, rows in split_by_group_and_granule(vb.groups, vb.event_ms, self.granule_ms):
            yield bw.TimestampedValue(((self.task.task_id, group), vb.reports.take(rows)), ts_ms / 1000.0)


class ValidateReports(beam.PTransform):
    """Record batches -> ``((task_id, group), Reports)`` timestamped by event time, plus dead letters.

    Each output batch holds reports of one group whose event times fall into one window granule
    (:func:`~transforms.records.window_granule_ms`), so assigning the batch to windows by its timestamp
    is exact for every report in it.
    """

    def __init__(self, task: CollectionTask, window: WindowConfig) -> None:
        super().__init__()
        self.task = task
        self.granule_ms = window_granule_ms(window.size_s, window.period_s)

    def expand(self, batches):
        return batches | "Check" >> beam.ParDo(_ValidateFn(self.task, self.granule_ms)).with_outputs(
            "dead_letter", "counts", main="reports"
        )


def _whole_seconds(x: float) -> int:
    """Processing-time delays go into the runner API as integer milliseconds of an integer second count
    (``AfterProcessingTime(2.5)`` fails to translate), so early firings are rounded to whole seconds >= 1."""
    return max(1, int(round(x)))


class WindowReports(beam.PTransform):
    """Event-time windows from a :class:`~ldp.task.WindowConfig`.

    * ``size_s`` None: one global window (with ``early_firing_s``: repeated processing-time panes);
    * ``period_s`` None: fixed windows, else sliding windows;
    * ``early_firing_s``: early panes every so many (whole) seconds of processing time, then the on-time pane,
      then one late pane per late batch within ``allowed_lateness_s``;
    * ``accumulating``: panes are cumulative.
    """

    def __init__(self, window: WindowConfig) -> None:
        super().__init__()
        self.window = window

    def expand(self, pcoll):
        w = self.window
        options = pcoll.pipeline.options if pcoll.pipeline is not None else None
        streaming = options is None or bool(options.view_as(StandardOptions).streaming)
        if w.early_firing_s is not None and not streaming:
            # Processing-time (early) panes only exist in streaming; a bounded job's panes are final anyway,
            # and batch runners cannot drive processing-time triggers.
            w = dataclasses.replace(w, early_firing_s=None)
        mode = tr.AccumulationMode.ACCUMULATING if w.accumulating else tr.AccumulationMode.DISCARDING
        if w.size_s is None:
            if w.early_firing_s is None:
                return pcoll | "Global" >> beam.WindowInto(bw.GlobalWindows())
            return pcoll | "Global" >> beam.WindowInto(
                bw.GlobalWindows(),
                trigger=tr.Repeatedly(tr.AfterProcessingTime(_whole_seconds(w.early_firing_s))),
                accumulation_mode=mode,
            )
        fn = bw.FixedWindows(w.size_s) if w.period_s is None else bw.SlidingWindows(w.size_s, w.period_s)
        early = (
            tr.AfterProcessingTime(_whole_seconds(w.early_firing_s)) if w.early_firing_s is not None else None
        )
        trigger = tr.AfterWatermark(early=early, late=tr.AfterCount(1) if w.allowed_lateness_s > 0 else None)
        return pcoll | "Windows" >> beam.WindowInto(
            fn,
            trigger=trigger,
            accumulation_mode=mode,
            allowed_lateness=Duration(seconds=w.allowed_lateness_s),
        )


class EstimateFrequencies(beam.PTransform):
    """Keyed Reports batches -> windowed estimate records (``Window``, ``Combine``, ``Finalize``)."""

    def __init__(self, task: CollectionTask, window: WindowConfig, postprocess: str) -> None:
        super().__init__()
        self.task = task
        self.window = window
        self.postprocess = postprocess

    def expand(self, keyed):
        return (
            keyed
            | "Window" >> WindowReports(self.window)
            | "Combine" >> beam.CombinePerKey(OracleCombineFn(self.task))
            | "Finalize" >> beam.ParDo(FinalizeEstimates(self.task, self.postprocess))
        )


@dataclasses.dataclass
class _Outputs:
    estimates: Any
    dead_letter: Any


class FrequencyAggregation(beam.PTransform):
    """Record batches -> ``{"estimates", "dead_letter", "counts"}`` (validate, window, combine, finalize).

    ``counts`` holds one dict per input batch (``read``, ``accepted``, ``rejected``, ``rejected_<reason>``)
    at the batch's input timestamp; see :class:`WindowedCounts`.
    """

    def __init__(
        self, task: CollectionTask, window: WindowConfig | None = None, postprocess: str | None = None
    ):
        super().__init__()
        self.task = task
        self.window = task.window if window is None else window
        self.postprocess = task.postprocess if postprocess is None else postprocess

    def expand(self, batches):
        v = batches | "Validate" >> ValidateReports(self.task, self.window)
        est = v.reports | "Estimate" >> EstimateFrequencies(self.task, self.window, self.postprocess)
        return {"estimates": est, "dead_letter": v.dead_letter, "counts": v.counts}


class SumCounts(beam.CombineFn):
    """Adds count dicts key by key."""

    def create_accumulator(self) -> dict[str, int]:
        return {}

    def add_input(self, acc: dict[str, int], counts: dict[str, int]) -> dict[str, int]:
        for k, v in counts.items():
            acc[k] = acc.get(k, 0) + int(v)
        return acc

    def merge_accumulators(self, accs) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in accs:
            self.add_input(out, a)
        return out

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return {"read": 0, "accepted": 0, "rejected": 0, **acc}


class _WithWindow(beam.DoFn):
    def process(self, counts, window=beam.DoFn.WindowParam):
        out = dict(counts)
        if hasattr(window, "start"):
            out["window_start_ms"] = int(window.start.micros // 1000)
            out["window_end_ms"] = int(window.end.micros // 1000)
        yield out


class WindowedCounts(beam.PTransform):
    """Per-batch count dicts -> one summed dict per fixed window of ``window_s`` (input timestamps).

    The streaming job's record of what it read, accepted and refused: Beam counters are the primary
    record, but the Python DirectRunner's streaming mode keeps only the first bundle's counter updates
    (its state sampler caches the first bundle's metrics container), so streaming jobs also write these.
    """

    def __init__(self, window_s: float) -> None:
        super().__init__()
        self.window_s = window_s

    def expand(self, counts):
        return (
            counts
            | "Window" >> beam.WindowInto(bw.FixedWindows(self.window_s))
            | "Sum" >> beam.CombineGlobally(SumCounts()).without_defaults()
            | "AddWindow" >> beam.ParDo(_WithWindow())
        )


def job_counts(result: Any) -> dict[str, int]:
    """Counter totals of a finished (or cancelled) job: ``read``, ``accepted``, ``rejected`` and
    ``rejected_<reason>`` (committed values where the runner has them, else attempted)."""
    out: dict[str, int] = {"read": 0, "accepted": 0, "rejected": 0}
    res = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))
    for c in res["counters"]:
        name = c.key.metric.name
        val = c.committed if c.committed is not None else c.attempted
        val = int(val or 0)
        key = {"reports_read": "read", "reports_accepted": "accepted", "reports_rejected": "rejected"}.get(
            name, name
        )
        out[key] = out.get(key, 0) + val
    return out


def format_counts(counts: dict[str, int]) -> str:
    """``read=N accepted=A rejected=R`` plus the non-zero reasons."""
    reasons = ", ".join(
        f"{k[len('rejected_') :]}={v}" for k, v in sorted(counts.items()) if k.startswith("rejected_") and v
    )
    text = f"reports read={counts['read']} accepted={counts['accepted']} rejected={counts['rejected']}"
    return text + (f" ({reasons})" if reasons else "")
