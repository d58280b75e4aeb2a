"""What a job read, accepted and refused: Beam counters and, for streaming jobs, per-window count lines.

Counter names (namespace ``ldp``): ``reports_read``, ``reports_accepted``, ``reports_rejected`` and
``rejected_<reason>`` (the validate step and the sources), ``<output>_rows`` per kind of result row,
``finalized_panes`` / ``empty_panes`` and the distribution ``finalize_ms`` (the finalize step),
``lost_bytes`` / ``lost_blocks`` / ``lost_records``: what the parts of inputs that are not records cost
(the sources; see :data:`wire.decode.LOSS_REASONS`), and ``late_dropped`` / ``late_batches``:
accepted reports that arrived after their window closed (:mod:`transforms.lateness`; they stay in
``accepted``: ``read = accepted + rejected`` and ``accepted = reports in estimates + late_dropped``), and
the distribution ``pane_latency_ms`` (streaming: from a window's end to its on-time or late pane,
:class:`PaneLatency`). :mod:`transforms.prometheus` serves them to Prometheus (``--metrics_port``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.runners.runner import PipelineResult
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw
from apache_beam.utils.timestamp import Timestamp

from transforms.display import item, task_id_display

__all__ = [
    "COUNTER_NAMESPACE",
    "Counts",
    "SumCounts",
    "WindowedCounts",
    "AtProcessingTime",
    "PaneLatency",
    "job_counts",
    "job_distribution",
    "format_counts",
]

COUNTER_NAMESPACE = "ldp"

#: ``read``, ``accepted``, ``rejected``, ``rejected_<reason>`` (and ``window_*_ms`` once windowed).
Counts = dict[str, int]


class SumCounts(beam.CombineFn):
    """Adds count dicts key by key."""

    def create_accumulator(self) -> Counts:
        return {}

    def add_input(self, acc: Counts, counts: Counts) -> Counts:
        for k, v in counts.items():
            acc[k] = acc.get(k, 0) + int(v)
        return acc

    def merge_accumulators(self, accs: Iterable[Counts]) -> Counts:
        out: Counts = {}
        for a in accs:
            self.add_input(out, a)
        return out

    def extract_output(self, acc: Counts) -> Counts:
        return {"read": 0, "accepted": 0, "rejected": 0, **acc}


class _WithWindow(beam.DoFn):
    def process(self, counts: Counts, window=beam.DoFn.WindowParam):
        out = dict(counts)
        if hasattr(window, "start"):
            out["window_start_ms"] = int(window.start.micros // 1000)
            out["window_end_ms"] = int(window.end.micros // 1000)
        yield out


class AtProcessingTime(beam.DoFn):
    """Re-timestamps an element to the later of its timestamp and the wall clock (never earlier), so it is
    not late data for the windows downstream: a count or dead letter about a late batch (e.g. a Pub/Sub
    message whose time attribute is old) would otherwise be dropped by its own window."""

    def process(self, element, timestamp=beam.DoFn.TimestampParam):  # noqa: B008 - Beam's param idiom
        yield bw.TimestampedValue(element, max(timestamp, Timestamp.now()))


# Allowed lateness of the processing-time windows of counts and dead letters. Their elements are never
# late themselves (stamped at arrival), but the file sink's own grouping steps downstream inherit the
# window: on the portable Flink runner a window's written-file record can reach the sink's second
# grouping after the watermark has passed the window's end (Python stages answer asynchronously), and
# with no allowed lateness it is dropped there -- the file stays a temp file, the window's counts are
# lost (seen on the session cluster at load average 5+). With lateness it is moved in a late firing;
# counts windows accumulate, so a late pane is the complete window (closed_window_counts takes the
# copy with the most reports read).
FILE_WRITE_SLACK_S = 600


class WindowedCounts(beam.PTransform):
    """Per-batch count dicts -> one summed dict per fixed window of ``window_s`` of the time they were
    counted: the later of the batch's timestamp and the wall clock (:class:`AtProcessingTime`), so the
    counts of a late batch land in the current window instead of being dropped with their old one.

    The streaming job's record of what it read, accepted and refused (see ``transforms.runners`` for why
    the counters alone are not enough on the DirectRunner). A window closes when the watermark passes its
    end; a source whose watermark runs ahead of the wall clock (future event times) could still make a
    window late -- the wall clock of the worker is the reference.
    """

    def __init__(self, window_s: float, *, task_id: str | None = None) -> None:
        super().__init__()
        self.window_s = window_s
        self.task_id = task_id

    def display_data(self) -> dict[str, object]:
        return {**task_id_display(self.task_id), "window_s": item(float(self.window_s), "Counts window (s)")}

    def expand(self, counts):
        return (
            counts
            | "AtProcessingTime" >> beam.ParDo(AtProcessingTime())
            | "Window"
            >> beam.WindowInto(
                bw.FixedWindows(self.window_s),
                accumulation_mode=tr.AccumulationMode.ACCUMULATING,
                allowed_lateness=FILE_WRITE_SLACK_S,
            )
            | "Sum" >> beam.CombineGlobally(SumCounts()).without_defaults()
            | "AddWindow" >> beam.ParDo(_WithWindow())
        )


class PaneLatency(beam.DoFn):
    """Finalized panes ``(task_id, WindowInfo, rows)`` (``Aggregate``'s ``panes`` output) -> nothing;
    records the distribution ``pane_latency_ms``: the wall clock at finalize minus the window's end, for
    the on-time and late panes of bounded windows (early panes come before the end; a global window has
    none). Meant for streaming jobs: a batch job's windows ended long before it ran."""

    def __init__(self) -> None:
        self.latency = Metrics.distribution(COUNTER_NAMESPACE, "pane_latency_ms")

    def process(self, pane) -> Iterable[None]:
        info = pane[1]
        if info.end_ms is not None and info.pane_timing in ("ON_TIME", "LATE"):
            self.latency.update(max(0, int(time.time() * 1000) - int(info.end_ms)))
        return ()


_SHORT = {"reports_read": "read", "reports_accepted": "accepted", "reports_rejected": "rejected"}


def job_counts(result: PipelineResult) -> Counts:
    """Counter totals of a finished (or cancelled) job: ``read``, ``accepted``, ``rejected``,
    ``rejected_<reason>`` and the other counters of the namespace (committed values where the runner has
    them, else attempted)."""
    out: Counts = {"read": 0, "accepted": 0, "rejected": 0}
    res = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))
    for c in res["counters"]:
        name = c.key.metric.name
        val = int((c.committed if c.committed is not None else c.attempted) or 0)
        key = _SHORT.get(name, name)
        out[key] = out.get(key, 0) + val
    return out


def job_distribution(result: PipelineResult, name: str) -> dict[str, int] | None:
    """``{"count", "sum", "max"}`` of a distribution metric of the namespace, or None."""
    try:
        res = result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE).with_name(name))
    except Exception:  # noqa: BLE001 - metrics are informative only
        return None
    for d in res["distributions"]:
        v = d.committed or d.attempted
        if v is not None and v.count:
            return {"count": int(v.count), "sum": int(v.sum), "max": int(v.max)}
    return None


def format_counts(counts: Counts) -> str:
    """``reports read=N accepted=A rejected=R`` plus the non-zero reasons."""
    reasons = ", ".join(
        f"{k[len('rejected_') :]}={v}" for k, v in sorted(counts.items()) if k.startswith("rejected_") and v
    )
    text = f"reports read={counts['read']} accepted={counts['accepted']} rejected={counts['rejected']}"
    text += f" ({reasons})" if reasons else ""
    if counts.get("late_dropped"):
        text += f"; late_dropped={counts['late_dropped']} (accepted, arrived after their window closed)"
    lost = [(k[len("lost_") :], counts.get(k, 0)) for k in ("lost_records", "lost_blocks", "lost_bytes")]
    if any(v for _, v in lost):
        text += "; lost " + ", ".join(f"{name}={v}" for name, v in lost)
    return text
