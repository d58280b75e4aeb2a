"""Every adaptation to a Beam runner's limits (apache-beam 2.77), in one place.

* **FnApiRunner** (what the DirectRunner runs a job without Pub/Sub on, and the PortableRunner with
  ``--job_endpoint=embed``; :func:`runs_on_fnapi_runner`):
  - it re-runs a deferred splittable DoFn at once, ignoring the delay it asks for, so the directory
    watch's ticks are paced by sleeping (:class:`PacedTicks`); unpaced, a watch spins a core and the
    job's metrics overflow Python's recursion limit when they are read;
  - it has no processing-time triggers and runs a streaming job stage by stage, so windows are emitted
    only when a directory watch ends: early firings are dropped and a watch duration is required
    (:func:`adapt_directory_streaming`).
* **Batch runners** cannot drive processing-time triggers and a bounded job's panes are final anyway:
  early firings apply to streaming only (:func:`effective_window`).
* **Runner API translation**: ``AfterProcessingTime(2.5)`` fails to translate; processing-time delays
  are whole seconds >= 1 (:func:`whole_seconds`).
* **fileio**: ``default_file_naming`` leaves the pane out of file names, so a later pane of a window would
  replace an earlier file; :func:`pane_file_naming` names files by window *and* pane.
* **DirectRunner streaming counters**: its state sampler keeps only the first bundle's counter updates,
  so streaming jobs also write per-window count lines (``transforms.counts.WindowedCounts``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import apache_beam as beam
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions
from apache_beam.transforms import window as bw
from apache_beam.transforms.periodicsequence import ImpulseSeqGenDoFn, ImpulseSeqGenRestrictionProvider
from apache_beam.utils.timestamp import Timestamp

from ldp.task import WindowConfig

__all__ = [
    "RunnerLimitation",
    "runs_on_fnapi_runner",
    "adapt_directory_streaming",
    "effective_window",
    "whole_seconds",
    "PacedTicks",
    "pane_file_naming",
]

_LOG = logging.getLogger(__name__)


class RunnerLimitation(ValueError):
    """A job the chosen runner cannot run as asked (the message says what to change)."""


def runs_on_fnapi_runner(options: PipelineOptions) -> bool:
    """True when the job will run on Beam's in-process FnApiRunner: the DirectRunner (the default runner,
    in any of its spellings and running modes) or the PortableRunner with ``--job_endpoint=embed``."""
    runner = options.view_as(StandardOptions).runner
    name = "direct" if runner is None else runner if isinstance(runner, str) else type(runner).__name__
    name = name.lower().removesuffix("runner")
    if name in ("direct", "switchingdirect"):
        return True
    return name == "portable" and options.view_as(PortableOptions).job_endpoint == "embed"


def adapt_directory_streaming(
    window: WindowConfig, streaming_duration_s: float, output_topic: str | None = None
) -> WindowConfig:
    """Adapts a directory-streaming job to the FnApiRunner (see the module docstring).

    Raises:
        RunnerLimitation: no watch duration, or a Pub/Sub sink (its runner cannot run the watch).
    """
    if streaming_duration_s <= 0:
        raise RunnerLimitation(
            "streaming from --input on the DirectRunner (FnApiRunner) emits results only when the watch "
            "ends: give --streaming_duration SECONDS (or run on Flink, see docs/flink.md)"
        )
    if output_topic:
        raise RunnerLimitation(
            "--output_topic with streaming from --input is not supported on the DirectRunner (its Pub/Sub "
            "sink needs the runner that cannot run the directory watch)"
        )
    if window.early_firing_s is not None:
        _LOG.warning(
            "directory streaming on the DirectRunner (FnApiRunner) has no processing-time triggers; "
            "ignoring early firings"
        )
        window = dataclasses.replace(window, early_firing_s=None)
    return window


def effective_window(window: WindowConfig, streaming: bool) -> WindowConfig:
    """``window`` without early firings for a bounded (batch) job."""
    if window.early_firing_s is not None and not streaming:
        return dataclasses.replace(window, early_firing_s=None)
    return window


def whole_seconds(x: float) -> int:
    """A processing-time delay as whole seconds >= 1 (the runner API takes no fractions)."""
    return max(1, int(round(x)))


_WATERMARK_PROVIDER = ManualWatermarkEstimator.default_provider()


class PacedTicks(ImpulseSeqGenDoFn):
    """``PeriodicImpulse``'s tick generator, sleeping until the next tick is due before deferring (for the
    FnApiRunner; other runners honour the delay a deferred residual asks for)."""

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        restriction_tracker=beam.DoFn.RestrictionParam(ImpulseSeqGenRestrictionProvider()),  # noqa: B008
        watermark_estimator=beam.DoFn.WatermarkEstimatorParam(_WATERMARK_PROVIDER),  # noqa: B008
    ):
        start, _stop, interval = element
        start_s = start.micros / 1e6 if isinstance(start, Timestamp) else float(start)
        due = start_s + interval * restriction_tracker.current_restriction().start
        wait = due - time.time()
        if wait > 0:
            time.sleep(min(wait, interval))
        yield from ImpulseSeqGenDoFn.process(self, element, restriction_tracker, watermark_estimator)


def pane_file_naming(prefix: str, suffix: str) -> Callable[..., str]:
    """``PREFIX-<start>-<end>-paneNNNNN-SSSSS-of-NNNNN<suffix>`` (no window part for the global window);
    the ``destination`` of ``fileio.WriteToFiles`` carries the pane (``paneNNNNN``)."""

    def _inner(window, pane, shard_index, total_shards, compression, destination) -> str:
        parts = [prefix]
        if window is not None and not isinstance(window, bw.GlobalWindow):
            parts += [window.start.to_utc_datetime().isoformat(), window.end.to_utc_datetime().isoformat()]
        parts.append(str(destination))
        parts.append(f"{int(shard_index or 0):05d}-of-{int(total_shards or 1):05d}")
        return "-".join(parts) + suffix + (f".{compression}" if compression else "")

    return _inner
