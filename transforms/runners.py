"""Every adaptation to a Beam runner's limits (apache-beam 2.77), in one place; :func:`plan_runner` applies
them to a job (docs/live.md says which runner gives what latency).

* **DirectRunner** (the default runner). In 2.77 it first tries to run a job on Prism, downloading the
  Prism binary from GitHub, and falls back to its own runners when that fails (always, offline). The
  jobs run it as :class:`DirectRunnerWithoutPrism`: the same choice between the FnApiRunner and the
  streaming BundleBasedDirectRunner, never a download, and never Prism behind the adaptations below
  (use ``--runner=PrismRunner`` for that).
* **FnApiRunner** (what the DirectRunner runs a job without Pub/Sub on, and the PortableRunner with
  ``--job_endpoint=embed``; :func:`runs_on_fnapi_runner`):
  - it re-runs a deferred splittable DoFn at once, ignoring the delay it asks for, so the directory
    watch's ticks are paced by sleeping (:class:`PacedTicks`); unpaced, a watch spins a core and the
    job's metrics overflow Python's recursion limit when they are read;
  - it has no processing-time triggers and runs a streaming job stage by stage, so windows are emitted
    only when a directory watch ends: early firings are dropped and a watch duration is required
    (:func:`adapt_directory_streaming`); the live local path from a directory is Prism.
* **BundleBasedDirectRunner** (what the DirectRunner runs a Pub/Sub job on): live, with early panes; its
  Pub/Sub watermark is the wall clock of its last pull.
* **PrismRunner** (Beam's Go portable runner; ``bash tools/prism/get_prism.sh`` builds it): live
  directory streaming with early panes. :func:`plan_runner` gives it the locally built binary
  (``--prism_location``; never the GitHub download), refuses Pub/Sub (Python's Pub/Sub source is native to
  the DirectRunner and Dataflow), and works around a Prism 2.77 crash: a processing-time (early-firing)
  timer that fires after its window was garbage-collected panics Prism ("assignment to entry in nil
  map" in ``aggregateStageKind.buildProcessingTimeBundle``), which happens whenever the allowed lateness
  is shorter than the early-firing period, so the lateness is raised to the period plus 2 s.
* **Watched directories on every runner**: ``PeriodicImpulse``'s generator sets the watermark to the
  *next* tick's time while it waits, i.e. ahead of the wall clock, and a file is read a tick or two after
  it was written, so the reports of a window's last seconds arrived behind the watermark (late, or
  dropped without allowed lateness). :class:`LaggedTicks` holds the watch's watermark
  ``watermark_lag_s`` behind the ticks (default :func:`default_watermark_lag`: two watch intervals plus
  1 s, the longest a complete file waits to be read).
* **Batch runners** cannot drive processing-time triggers and a bounded job's panes are final anyway:
  early firings apply to streaming only (:func:`effective_window`).
* **Runner API translation**: ``AfterProcessingTime(2.5)`` fails to translate; processing-time delays
  are whole seconds >= 1 (:func:`whole_seconds`).
* **fileio**: ``default_file_naming`` leaves the pane out of file names, so a later pane of a window would
  replace an earlier file; :func:`pane_file_naming` names files by window *and* pane.
* **DirectRunner streaming counters**: the BundleBasedDirectRunner's worker threads keep one state
  sampler each, which caches its scoped states by step name with the metrics container of the step's
  *first* bundle; every later bundle counts into that container, already committed, and commits a new,
  empty one: the job's counters showed the first bundle alone (``read=50`` of 3,200).
  :func:`fresh_direct_metrics` gives each bundle its own sampler, so the counters are right while the
  job runs. Streaming jobs still count by count windows too (``transforms.counts.WindowedCounts``): the
  count files are the record every runner writes.
* **A Pub/Sub read with an end** (``--streaming_duration`` on the BundleBasedDirectRunner): Beam's
  Pub/Sub evaluator pulls forever and the only way out is ``cancel()``, which throws away every open
  window, the count windows with them (the job reported ``read=0`` after reading 40,000 reports).
  :func:`bound_pubsub_read` gives a subscription or topic a wall-clock deadline: from then on its
  evaluator (:class:`BoundedPubSubReadEvaluator`) stops pulling and releases its watermark hold, so the
  watermark reaches the end of time, every window fires its final pane, and the job ends ``DONE`` by
  itself. Messages published after the deadline stay in the subscription, unacknowledged, for the next
  run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import apache_beam as beam
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    PrismRunnerOptions,
    StandardOptions,
    TypeOptions,
)
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner, _DirectReadFromPubSub
from apache_beam.runners.direct.transform_evaluator import TransformEvaluatorRegistry, _PubSubReadEvaluator
from apache_beam.runners.direct.util import TransformResult
from apache_beam.runners.runner import PipelineRunner
from apache_beam.transforms import window as bw
from apache_beam.transforms.periodicsequence import ImpulseSeqGenDoFn, ImpulseSeqGenRestrictionProvider
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Duration, Timestamp

from ldp.task import WindowConfig

__all__ = [
    "RunnerLimitation",
    "RunnerPlan",
    "plan_runner",
    "runner_name",
    "runner_label",
    "runs_on_fnapi_runner",
    "adapt_directory_streaming",
    "adapt_prism_window",
    "find_prism_binary",
    "DirectRunnerWithoutPrism",
    "effective_window",
    "whole_seconds",
    "default_watermark_lag",
    "LaggedTicks",
    "PacedTicks",
    "pane_file_naming",
    "bound_pubsub_read",
    "unbound_pubsub_read",
    "BoundedPubSubReadEvaluator",
    "fresh_direct_metrics",
]

_LOG = logging.getLogger(__name__)

#: Where ``tools/prism/get_prism.sh`` leaves the binary (a link to the versioned build), in a source tree.
PRISM_CACHE_BINARY = Path(__file__).resolve().parent.parent / ".cache" / "prism" / "prism"
#: Environment variable naming a Prism binary (takes precedence over the cache).
PRISM_ENV = "LDP_PRISM_BIN"
_PRISM_HINT = "build it with `bash tools/prism/get_prism.sh` (docs/live.md) or pass --prism_location=BIN"


class RunnerLimitation(ValueError):
    """A job the chosen runner cannot run as asked (the message says what to change)."""


def runner_name(options: PipelineOptions) -> str:
    """The runner's short lower-case name: ``direct`` (also for no runner, the default), ``prism``,
    ``flink``, ``portable``, ``dataflow``, ... (``--runner`` without its module path and ``Runner``)."""
    runner = options.view_as(StandardOptions).runner
    name = "direct" if runner is None else runner if isinstance(runner, str) else type(runner).__name__
    name = name.rsplit(".", 1)[-1].lower().removesuffix("runner")
    return "direct" if name in ("switchingdirect", "") else name


def runner_label(options: PipelineOptions) -> str:
    """The runner as the operator named it, for log lines: ``--runner`` as typed (``FlinkRunner``,
    ``direct``, a module path), ``DirectRunner`` when none was given (Beam's default), and Beam's public
    name for a runner object (this module's :class:`DirectRunnerWithoutPrism` is the ``DirectRunner``)."""
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return "DirectRunner"
    if isinstance(runner, str):
        return runner
    if isinstance(runner, SwitchingDirectRunner):
        return "DirectRunner"
    return type(runner).__name__


def runs_on_fnapi_runner(options: PipelineOptions) -> bool:
    """True when the job will run on Beam's in-process FnApiRunner: the DirectRunner (the default runner,
    in any of its spellings and running modes) or the PortableRunner with ``--job_endpoint=embed``."""
    name = runner_name(options)
    if name == "direct":
        return True
    return name == "portable" and options.view_as(PortableOptions).job_endpoint == "embed"


class DirectRunnerWithoutPrism(SwitchingDirectRunner):
    """Beam's DirectRunner without its first attempt to run the job on Prism.

    apache-beam 2.77's ``SwitchingDirectRunner`` tries Prism first, downloading the binary from GitHub
    (a network call; offline it fails and the runner falls back), and only then chooses between the
    FnApiRunner and the BundleBasedDirectRunner. Its Prism check starts with ``allow_unsafe_triggers``
    (the flag only relaxes trigger checks while transforms are *built*, which they are by now), so the
    flag is set while the runner chooses: the rest of the choice is Beam's own."""

    def run_pipeline(self, pipeline, options):
        fresh_direct_metrics()
        types = pipeline.options.view_as(TypeOptions)
        saved = types.allow_unsafe_triggers
        types.allow_unsafe_triggers = True
        try:
            return super().run_pipeline(pipeline, options)
        finally:
            types.allow_unsafe_triggers = saved


def find_prism_binary() -> str | None:
    """The Prism binary to run: ``$LDP_PRISM_BIN``, else the one ``tools/prism/get_prism.sh`` built into
    ``.cache/prism/`` (None: neither exists)."""
    env = os.environ.get(PRISM_ENV)
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    if PRISM_CACHE_BINARY.is_file() and os.access(PRISM_CACHE_BINARY, os.X_OK):
        return str(PRISM_CACHE_BINARY.resolve())
    return None


@dataclasses.dataclass(frozen=True)
class RunnerPlan:
    """How a job runs: the runner object to give ``beam.Pipeline`` (None: Beam makes it from the
    options), the window after the runner's adaptations, whether the watch's ticks are paced by sleeping
    (the FnApiRunner), and the runner's short name."""

    runner: PipelineRunner | None
    window: WindowConfig
    paced: bool
    name: str


def plan_runner(
    options: PipelineOptions,
    window: WindowConfig,
    *,
    streaming: bool,
    files: bool,
    streaming_duration_s: float = 0.0,
    output_topic: str | None = None,
) -> RunnerPlan:
    """The runner adaptations of one job (see the module docstring). ``files``: the job reads ``--input``
    (watched when ``streaming``), else Pub/Sub. May set ``--prism_location`` in ``options``.

    Raises:
        RunnerLimitation: a job the runner cannot run (one line naming what to change).
    """
    name = runner_name(options)
    runner: PipelineRunner | None = None
    if name == "direct":
        runner = DirectRunnerWithoutPrism()
    elif name == "prism":
        prism = options.view_as(PrismRunnerOptions)
        if not prism.prism_location:
            found = find_prism_binary()
            if found is None:
                where = f"${PRISM_ENV} ({os.environ[PRISM_ENV]})" if os.environ.get(PRISM_ENV) else (
                    f"{PRISM_CACHE_BINARY}"
                )
                raise RunnerLimitation(
                    f"--runner=PrismRunner needs the Prism binary, not found at {where}: {_PRISM_HINT} "
                    "(Beam would otherwise download it from GitHub)"
                )
            prism.prism_location = found
        if streaming and not files:
            raise RunnerLimitation(
                "Pub/Sub input does not run on Prism (Python's Pub/Sub source is native to the DirectRunner "
                "and Dataflow): run it on the DirectRunner (the default), which emits panes live"
            )
        if output_topic:
            raise RunnerLimitation(
                "--output_topic does not run on Prism (Python's Pub/Sub sink is native to the DirectRunner "
                "and Dataflow): leave it out (the files and --store carry every pane) or use the DirectRunner"
            )
    paced = runs_on_fnapi_runner(options)
    if streaming and not paced:
        keep_job_state_stream_open(options, name)
    if streaming and files and paced:
        window = adapt_directory_streaming(window, streaming_duration_s, output_topic)
    if streaming and name == "prism":
        window = adapt_prism_window(window)
    return RunnerPlan(runner, window, paced, name)


#: Beam's default ``--job_server_timeout`` (seconds).
BEAM_JOB_SERVER_TIMEOUT_S = 300
#: ``--job_server_timeout`` of streaming jobs on job-server runners unless given: 30 days.
STREAMING_JOB_SERVER_TIMEOUT_S = 30 * 86400


def keep_job_state_stream_open(options: PipelineOptions, name: str) -> None:
    """Streaming jobs on job-server runners (Prism, Flink, the PortableRunner): Beam 2.77's PortableRunner
    opens the job's state stream with ``--job_server_timeout`` as its deadline (default 300 s), so a
    streaming job that runs longer dies with ``DEADLINE_EXCEEDED`` after five minutes (measured in a
    10-minute soak on Prism). Unless the timeout was changed from Beam's default, it is raised to
    :data:`STREAMING_JOB_SERVER_TIMEOUT_S` (it also bounds how long a submission waits for a job server
    that does not answer)."""
    if name not in ("prism", "flink", "portable"):
        return
    portable = options.view_as(PortableOptions)
    if portable.job_server_timeout == BEAM_JOB_SERVER_TIMEOUT_S:
        portable.job_server_timeout = STREAMING_JOB_SERVER_TIMEOUT_S
        _LOG.info(
            "streaming on %s: --job_server_timeout raised to %d s (Beam's default 300 s is the deadline of "
            "the job's state stream and would end the job after five minutes)",
            name,
            STREAMING_JOB_SERVER_TIMEOUT_S,
        )


def adapt_directory_streaming(
    window: WindowConfig, streaming_duration_s: float, output_topic: str | None = None
) -> WindowConfig:
    """Adapts a directory-streaming job to the FnApiRunner (see the module docstring).

    Raises:
        RunnerLimitation: no watch duration, a Pub/Sub sink (its runner cannot run the watch), or one
            global window whose only panes were early firings.
    """
    if streaming_duration_s <= 0:
        raise RunnerLimitation(
            "streaming from --input on the DirectRunner (FnApiRunner) emits results only when the watch "
            "ends: give --streaming_duration SECONDS, or run it live with --runner=PrismRunner "
            "(bash tools/prism/get_prism.sh; docs/live.md)"
        )
    if output_topic:
        raise RunnerLimitation(
            "--output_topic with streaming from --input is not supported on the DirectRunner (its Pub/Sub "
            "sink needs the runner that cannot run the directory watch)"
        )
    if window.early_firing_s is not None and window.size_s is None:
        raise RunnerLimitation(
            "a streaming job from --input on the DirectRunner has no early firings, so its one global "
            "window would never fire: give --window_size SECONDS, or run it live on --runner=PrismRunner"
        )
    if window.early_firing_s is not None:
        _LOG.warning(
            "directory streaming on the DirectRunner (FnApiRunner) has no processing-time triggers; "
            "ignoring early firings"
        )
        window = dataclasses.replace(window, early_firing_s=None)
    return window


#: Seconds of allowed lateness beyond the early-firing period that keep Prism's timers inside their window.
PRISM_LATENESS_MARGIN_S = 2.0


def adapt_prism_window(window: WindowConfig) -> WindowConfig:
    """Raises the allowed lateness of a windowed job with early firings to at least the early-firing period
    plus :data:`PRISM_LATENESS_MARGIN_S` on Prism (the timer crash of the module docstring), warning."""
    if window.size_s is None or window.early_firing_s is None:
        return window
    need = whole_seconds(window.early_firing_s) + PRISM_LATENESS_MARGIN_S
    if window.allowed_lateness_s >= need:
        return window
    _LOG.warning(
        "Prism 2.77 crashes when an early-firing timer outlives its window: allowed lateness raised from "
        "%g s to %g s (the early-firing period plus %g s; docs/live.md)",
        window.allowed_lateness_s, need, PRISM_LATENESS_MARGIN_S,
    )
    return dataclasses.replace(window, allowed_lateness_s=need)


def effective_window(window: WindowConfig, streaming: bool) -> WindowConfig:
    """``window`` without early firings for a bounded (batch) job."""
    if window.early_firing_s is not None and not streaming:
        return dataclasses.replace(window, early_firing_s=None)
    return window


def whole_seconds(x: float) -> int:
    """A processing-time delay as whole seconds >= 1 (the runner API takes no fractions)."""
    return max(1, int(round(x)))


_WATERMARK_PROVIDER = ManualWatermarkEstimator.default_provider()


def default_watermark_lag(watch_interval_s: float) -> float:
    """The default lag of a watched directory's watermark behind its ticks: two watch intervals (a complete
    file is read at the first or second tick after it was written) plus 1 s."""
    return 2.0 * float(watch_interval_s) + 1.0


class _LaggedEstimator:
    """A watermark estimator seen ``lag`` behind the one it wraps (what ``ImpulseSeqGenDoFn`` sets is the
    tick's time; what the runner gets is that minus ``lag``)."""

    def __init__(self, inner, lag: Duration) -> None:
        self.inner, self.lag = inner, lag

    def current_watermark(self):
        w = self.inner.current_watermark()
        return None if w is None else w + self.lag

    def set_watermark(self, ts) -> None:
        self.inner.set_watermark(ts - self.lag)


class LaggedTicks(ImpulseSeqGenDoFn):
    """``PeriodicImpulse``'s tick generator whose ticks (the element is still the tick's own time) and
    watermark run ``lag_s`` behind the ticks' times, so a window closes only when the files written before
    its end have been read (:func:`default_watermark_lag`). ``paced``: sleep until the next tick is due
    before deferring (for the FnApiRunner; other runners honour the delay a deferred residual asks for)."""

    def __init__(self, lag_s: float = 0.0, paced: bool = False) -> None:
        super().__init__()
        if not lag_s >= 0:
            raise ValueError(f"watermark lag must be >= 0 seconds, got {lag_s}")
        self.lag_s = float(lag_s)
        self.paced = paced

    def display_data(self) -> dict[str, object]:
        return {"watermark_lag_s": self.lag_s, "paced": bool(self.paced)}

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        restriction_tracker=beam.DoFn.RestrictionParam(ImpulseSeqGenRestrictionProvider()),  # noqa: B008
        watermark_estimator=beam.DoFn.WatermarkEstimatorParam(_WATERMARK_PROVIDER),  # noqa: B008
    ):
        start, _stop, interval = element
        if self.paced:
            start_s = start.micros / 1e6 if isinstance(start, Timestamp) else float(start)
            due = start_s + interval * restriction_tracker.current_restriction().start
            wait = due - time.time()
            if wait > 0:
                time.sleep(min(wait, interval))
        if not self.lag_s:
            yield from ImpulseSeqGenDoFn.process(self, element, restriction_tracker, watermark_estimator)
            return
        lag = Duration.of(self.lag_s)
        estimator = _LaggedEstimator(watermark_estimator, lag)
        for tick in ImpulseSeqGenDoFn.process(self, element, restriction_tracker, estimator):
            yield bw.TimestampedValue(tick.value, tick.timestamp - lag)


class PacedTicks(LaggedTicks):
    """:class:`LaggedTicks` paced by sleeping, without lag (for the FnApiRunner)."""

    def __init__(self, lag_s: float = 0.0) -> None:
        super().__init__(lag_s, paced=True)


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


#: Pub/Sub reads with an end on the DirectRunner: subscription or topic path -> wall-clock deadline (s).
_PUBSUB_DEADLINES: dict[str, float] = {}


def _deadline_of(source: object) -> float | None:
    path = getattr(source, "full_subscription", None) or getattr(source, "full_topic", None) or ""
    return _PUBSUB_DEADLINES.get(path)


class _PullUntil:
    """A subscriber client whose pulls wait no longer than the deadline (Beam's evaluator waits up to
    30 s for messages, which would hold a finished read that long); a pull that times out is empty."""

    def __init__(self, client: object, deadline: float) -> None:
        self._client, self._deadline = client, deadline

    def pull(self, **kwargs: object) -> object:
        from google.api_core.exceptions import DeadlineExceeded
        from google.pubsub_v1.types import PullResponse

        left = self._deadline - time.time()
        kwargs["timeout"] = max(0.5, min(float(kwargs.get("timeout") or 30.0), left))  # type: ignore[arg-type]
        try:
            return self._client.pull(**kwargs)  # type: ignore[attr-defined]
        except DeadlineExceeded:
            return PullResponse()

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


class BoundedPubSubReadEvaluator(_PubSubReadEvaluator):
    """The DirectRunner's Pub/Sub read, which ends at its source's deadline (:func:`bound_pubsub_read`):
    past it, no pull, no re-scheduling and no watermark hold, so the read is done and the watermark
    advances to the end of time; before it, no pull waits beyond it. A source without a deadline reads
    exactly as Beam's evaluator does."""

    @classmethod
    def _get_subscriber_client(cls, transform):  # noqa: ANN001, ANN206 - Beam's signature
        client = super()._get_subscriber_client(transform)
        deadline = _deadline_of(getattr(transform.transform, "_source", None))
        return client if deadline is None else _PullUntil(client, deadline)

    def finish_bundle(self) -> TransformResult:
        deadline = _deadline_of(self.source)
        if deadline is None or time.time() < deadline:
            return super().finish_bundle()
        return TransformResult(self, [], [], None, {None: MAX_TIMESTAMP})


def bound_pubsub_read(path: str, deadline: float) -> None:
    """Ends the DirectRunner's reads of the Pub/Sub subscription or topic ``path`` at ``deadline`` (epoch
    seconds): the job then finishes by itself with every window closed (see the module docstring)."""
    TransformEvaluatorRegistry._test_evaluators_overrides[_DirectReadFromPubSub] = BoundedPubSubReadEvaluator
    _PUBSUB_DEADLINES[path] = float(deadline)


def unbound_pubsub_read(path: str) -> None:
    """Forgets ``path``'s deadline (after its job ended)."""
    _PUBSUB_DEADLINES.pop(path, None)


def fresh_direct_metrics() -> None:
    """Gives every bundle of the BundleBasedDirectRunner a state sampler of its own, so its counter
    updates land in the metrics container that is committed (see the module docstring). Idempotent."""
    from apache_beam.runners.direct import executor
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory

    call = executor.TransformExecutor.call
    if getattr(call, "_ldp_fresh_metrics", False):
        return

    def call_with_fresh_sampler(self, state_sampler):  # noqa: ANN001, ANN202 - Beam's signature
        sampler = statesampler.StateSampler("", CounterFactory())
        statesampler.set_current_tracker(sampler)
        return call(self, sampler)

    call_with_fresh_sampler._ldp_fresh_metrics = True  # type: ignore[attr-defined]
    executor.TransformExecutor.call = call_with_fresh_sampler
