"""A Prometheus endpoint for a running Beam job, fed from the job's Beam metrics (``--metrics_port``).

A job started with ``--metrics_port PORT`` serves ``http://127.0.0.1:PORT/metrics`` (0: a free port,
printed) from :class:`MetricsEndpoint`: while the pipeline runs, a thread polls its ``PipelineResult``'s
``metrics()`` every :data:`POLL_INTERVAL_S` seconds; when the job ends, the endpoint takes the job's final
counts, the very numbers of ``OUT/counts.json``, and says so (``ldp_job_final_counts 1``). The
endpoint listens on 127.0.0.1 only; ``--metrics_linger SECONDS`` keeps it up that long after the end, so
a scraper sees the final counts of a job that ends.

Every series carries ``pipeline`` (the command: ``frequency``, ``numeric``, ``shuffle``, ...) and
``task_id``; ``reason`` (a reason code of the job's registry, :func:`job_reasons`), ``output`` (a kind
of result row) and ``state`` (a Beam pipeline state) are the only other labels. No label holds a client,
an address or a reported value. Reason labels are there from the first scrape, at zero.

The metric names and their Beam counters are :data:`JOB_COUNTERS` (every aggregation job),
:data:`SHUFFLE_COUNTERS` (the shuffler) and :data:`DISTRIBUTIONS`; docs/metrics.md lists them.
The FnApiRunner (what the DirectRunner runs batch jobs and watched directories on) reports metrics only
once the pipeline has finished, so there the counters stay at zero until the end; the
BundleBasedDirectRunner (Pub/Sub) and Prism report them while the job runs.

The shuffler (or any other job built on Beam) serves its own with :func:`start_job_metrics` before
``p.run()`` and :meth:`MetricsEndpoint.watch` after it, or :func:`serve_job_metrics` in one call, then
:meth:`MetricsEndpoint.finish` with its final counts.

This module imports neither Beam nor numpy at import time (the jobs' parsers stay light).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import start_http_server

__all__ = [
    "CounterSpec",
    "DistributionSpec",
    "JOB_COUNTERS",
    "SHUFFLE_COUNTERS",
    "DISTRIBUTIONS",
    "PIPELINE_STATES",
    "DEFAULT_HOST",
    "POLL_INTERVAL_S",
    "JobMetrics",
    "MetricsEndpoint",
    "job_reasons",
    "start_job_metrics",
    "serve_job_metrics",
    "beam_snapshot",
]

_LOG = logging.getLogger(__name__)

#: The only address the endpoint listens on.
DEFAULT_HOST = "127.0.0.1"
#: Seconds between two polls of the running job's metrics.
POLL_INTERVAL_S = 2.0


@dataclasses.dataclass(frozen=True)
class CounterSpec:
    """A Prometheus counter (``metric`` + ``_total``) fed by one Beam counter of the ``ldp`` namespace,
    named as in the job's counts (``read``, ``accepted``, ``rejected``: ``reports_read``, ...)."""

    metric: str
    counter: str
    help: str


@dataclasses.dataclass(frozen=True)
class DistributionSpec:
    """A Prometheus summary (``metric``: ``_count`` and ``_sum``, in seconds) and a gauge
    (``metric`` + ``_max``) fed by one Beam distribution of milliseconds."""

    metric: str
    distribution: str
    help: str


#: Every aggregation job's counters.
JOB_COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("ldp_job_reports_read", "read", "Reports read (read = accepted + rejected)."),
    CounterSpec("ldp_job_reports_accepted", "accepted", "Reports that passed every check."),
    CounterSpec("ldp_job_reports_rejected", "rejected", "Reports refused (dead-lettered); by reason: "
                "ldp_job_reports_rejected_by_reason_total."),
    CounterSpec("ldp_job_reports_late", "late_dropped", "Accepted reports that arrived after their window "
                "closed (dropped from the estimates, still in accepted)."),
    CounterSpec("ldp_job_lost_records", "lost_records", "Records lost in inputs that are not records."),
    CounterSpec("ldp_job_lost_blocks", "lost_blocks", "Avro blocks lost in inputs that are not records."),
    CounterSpec("ldp_job_lost_bytes", "lost_bytes", "Bytes of inputs that are not records."),
    CounterSpec("ldp_job_panes", "finalized_panes", "Result panes finalized (windows x firings)."),
    CounterSpec("ldp_job_empty_panes", "empty_panes", "Panes that fired without reports (no rows)."),
    CounterSpec("ldp_job_store_panes", "store_panes", "Panes written to the latest-state store (--store)."),
    CounterSpec("ldp_job_store_write_errors", "store_failed_panes", "Panes the store could not take after "
                "every retry (--store_retry_s); the job fails with exit status 1."),
)

#: The shuffler's counters (pipelines/shuffle.py, transforms/shuffle.py).
SHUFFLE_COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("ldp_job_reports_forwarded", "shuffle_forwarded", "Reports forwarded in shuffled batches."),
    CounterSpec("ldp_job_batches", "shuffle_batches", "Shuffled batches published."),
    CounterSpec("ldp_job_reports_withheld", "shuffle_withheld", "Reports withheld in buckets below the "
                "release threshold (min_reports)."),
    CounterSpec("ldp_job_short_buckets", "shuffle_withheld_buckets", "Buckets withheld for holding fewer "
                "reports than min_reports."),
    CounterSpec("ldp_job_reports_late", "late_dropped", "Reports that arrived after their bucket closed."),
)

#: Beam distributions (milliseconds) exported as summaries in seconds.
DISTRIBUTIONS: tuple[DistributionSpec, ...] = (
    DistributionSpec("ldp_job_pane_latency_seconds", "pane_latency_ms", "Streaming: wall-clock time from a "
                     "window's end to its on-time or late pane being finalized."),
    DistributionSpec("ldp_job_finalize_seconds", "finalize_ms", "Time to finalize one pane (estimates)."),
    DistributionSpec("ldp_job_store_write_seconds", "store_pane_write_ms", "Time to write one pane to the "
                     "store."),
)

#: Beam's pipeline states (``apache_beam.runners.runner.PipelineState``) plus STARTING (before p.run()).
PIPELINE_STATES = ("STARTING", "RUNNING", "DONE", "FAILED", "CANCELLED", "CANCELLING", "DRAINING", "DRAINED",
                   "STOPPED", "UPDATED", "PENDING", "UNKNOWN")


def job_reasons(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Every reason code an aggregation job can count a rejection under: the validator's and the
    sources' (``wire.records.REASONS``, which holds ``wire.decode.LOSS_REASONS`` and the
    budget's), plus ``extra``."""
    from wire.decode import LOSS_REASONS
    from wire.records import REASONS

    return tuple(dict.fromkeys((*REASONS, *LOSS_REASONS, *extra)))


class JobMetrics:
    """The job's numbers as Prometheus metric families (a custom collector: the values are Beam's
    totals, set from a snapshot, never incremented here). Thread-safe.

    While the job runs, :meth:`observe` keeps each counter at the largest value seen (a poll that fails
    or comes back empty never makes a counter go down); :meth:`finish` sets the job's final counts as
    they are (``OUT/counts.json``)."""

    def __init__(
        self,
        *,
        pipeline: str,
        task_id: str,
        reasons: Sequence[str] = (),
        outputs: Sequence[str] = (),
        counters: Sequence[CounterSpec] = JOB_COUNTERS,
        distributions: Sequence[DistributionSpec] = DISTRIBUTIONS,
    ) -> None:
        self.labels = {"pipeline": str(pipeline), "task_id": str(task_id)}
        self.reasons = tuple(dict.fromkeys(reasons))
        self.outputs = tuple(dict.fromkeys(outputs))
        self.counters = tuple(counters)
        self.distributions = tuple(distributions)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._dists: dict[str, tuple[int, int, int]] = {}
        self._state = "STARTING"
        self._final = False
        self._polls = self._poll_errors = 0
        self._updated = time.time()

    # ------------------------------------------------------------------ updates

    def observe(
        self,
        counts: Mapping[str, int],
        distributions: Mapping[str, Mapping[str, int]] | None = None,
        *,
        state: str | None = None,
    ) -> None:
        """A snapshot of the running job (counter totals by their short names, distributions as
        ``{"count", "sum", "max"}``); ignored once :meth:`finish` has run."""
        with self._lock:
            if self._final:
                return
            for k, v in counts.items():
                self._counts[k] = max(self._counts.get(k, 0), int(v))
            for k, d in (distributions or {}).items():
                old = self._dists.get(k, (0, 0, 0))
                if int(d["count"]) >= old[0]:
                    self._dists[k] = (int(d["count"]), int(d["sum"]), int(d["max"]))
            if state is not None:
                self._state = _state_name(state)
            self._polls += 1
            self._updated = time.time()

    def poll_failed(self) -> None:
        with self._lock:
            self._poll_errors += 1

    def finish(
        self,
        counts: Mapping[str, int],
        distributions: Mapping[str, Mapping[str, int]] | None = None,
        *,
        state: str,
    ) -> None:
        """The job's final counts: they replace every counter (one ``counts`` does not name is 0), and
        ``ldp_job_final_counts`` turns to 1."""
        with self._lock:
            self._counts = {k: int(v) for k, v in counts.items()}
            for k, d in (distributions or {}).items():
                self._dists[k] = (int(d["count"]), int(d["sum"]), int(d["max"]))
            self._state = _state_name(state)
            self._final = True
            self._updated = time.time()

    @property
    def final(self) -> bool:
        return self._final

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # ------------------------------------------------------------------ the collector

    def describe(self) -> list[Metric]:
        return []  # values change with every poll; the registry must not call collect() at register time

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts, dists = dict(self._counts), dict(self._dists)
            state, final, polls, errors, updated = (self._state, self._final, self._polls, self._poll_errors,
                                                    self._updated)
        names, values = list(self.labels), list(self.labels.values())
        seen: set[str] = set()
        for spec in self.counters:
            if spec.metric in seen:
                continue
            seen.add(spec.metric)
            fam = CounterMetricFamily(spec.metric, spec.help, labels=names)
            fam.add_metric(values, counts.get(spec.counter, 0))
            yield fam
        reasons = dict.fromkeys(self.reasons)
        seen_reasons = sorted(k[len("rejected_"):] for k in counts if k.startswith("rejected_"))
        reasons.update(dict.fromkeys(seen_reasons))
        fam = CounterMetricFamily("ldp_job_reports_rejected_by_reason", "Reports refused, by reason code "
                                  "(every code the job can emit, from zero).", labels=[*names, "reason"])
        for r in reasons:
            fam.add_metric([*values, r], counts.get(f"rejected_{r}", 0))
        yield fam
        if self.outputs:
            fam = CounterMetricFamily("ldp_job_rows", "Result rows written, by kind of row.",
                                      labels=[*names, "output"])
            for o in self.outputs:
                fam.add_metric([*values, o], counts.get(f"{o}_rows", 0))
            yield fam
        for spec in self.distributions:
            n, total_ms, max_ms = dists.get(spec.distribution, (0, 0, 0))
            fam = SummaryMetricFamily(spec.metric, spec.help, labels=names)
            fam.add_metric(values, count_value=n, sum_value=total_ms / 1000.0)
            yield fam
            g = GaugeMetricFamily(f"{spec.metric}_max", f"Largest value so far. {spec.help}", labels=names)
            g.add_metric(values, max_ms / 1000.0)
            yield g
        fam = GaugeMetricFamily("ldp_job_state", "1 for the job's current Beam pipeline state.",
                                labels=[*names, "state"])
        for s in dict.fromkeys((*PIPELINE_STATES, state)):
            fam.add_metric([*values, s], 1.0 if s == state else 0.0)
        yield fam
        g = GaugeMetricFamily("ldp_job_final_counts", "1 once the counters are the job's final counts "
                              "(those of OUT/counts.json); 0 while they are polled from the running job.",
                              labels=names)
        g.add_metric(values, 1.0 if final else 0.0)
        yield g
        fam = CounterMetricFamily("ldp_job_metrics_polls", "Polls of the running job's Beam metrics.",
                                  labels=names)
        fam.add_metric(values, polls)
        yield fam
        fam = CounterMetricFamily("ldp_job_metrics_poll_errors", "Polls of the job's Beam metrics that "
                                  "failed.", labels=names)
        fam.add_metric(values, errors)
        yield fam
        g = GaugeMetricFamily("ldp_job_metrics_updated_timestamp_seconds", "When the values were last set "
                              "(Unix time).", labels=names)
        g.add_metric(values, updated)
        yield g


def _report_count(key: str) -> bool:
    """A key the job's summary counts own (``read``, ``accepted``, ``rejected``, ``rejected_<reason>``,
    ``late_dropped``, ``lost_*``)."""
    return key in ("read", "accepted", "rejected", "late_dropped") or key.startswith(("rejected_", "lost_"))


def _state_name(state: object) -> str:
    text = str(state)
    return text.rsplit(".", 1)[-1].upper() or "UNKNOWN"


def beam_snapshot(
    result: Any, distributions: Iterable[str]
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The ``ldp`` counters (short names, :func:`transforms.counts.job_counts`) and the named
    distributions of a running or finished job."""
    from transforms.counts import job_counts, job_distribution

    counts = job_counts(result)
    dists = {}
    for name in distributions:
        d = job_distribution(result, name)
        if d is not None:
            dists[name] = d
    return counts, dists


class MetricsEndpoint:
    """The HTTP endpoint of one job's :class:`JobMetrics` on ``host:port`` (0: a free port), with its
    own registry (nothing of the process's default registry is served)."""

    def __init__(self, metrics: JobMetrics, port: int, host: str = DEFAULT_HOST) -> None:
        if not 0 <= int(port) <= 65535:
            raise ValueError(f"port must be 0..65535, got {port}")
        self.metrics, self.host, self.port = metrics, host, int(port)
        self._httpd: Any = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> MetricsEndpoint:
        """Listens (raises ``OSError`` when the port is taken)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.metrics)  # type: ignore[arg-type]
        self._httpd, _thread = start_http_server(self.port, addr=self.host, registry=registry)
        self.port = int(self._httpd.server_port)
        return self

    def poll(self, result: Any) -> None:
        """One snapshot of ``result``'s Beam metrics and state into the metrics (errors counted)."""
        try:
            counts, dists = beam_snapshot(result, [d.distribution for d in self.metrics.distributions])
            state = getattr(result, "state", None)
        except Exception as exc:  # noqa: BLE001 - a runner whose metrics are not ready yet; try again later
            _LOG.debug("metrics poll failed: %s", exc)
            self.metrics.poll_failed()
            return
        self.metrics.observe(counts, dists, state=None if state is None else str(state))

    def watch(self, result: Any, interval_s: float = POLL_INTERVAL_S) -> None:
        """Polls ``result`` every ``interval_s`` seconds in a daemon thread until :meth:`stop_watching`,
        :meth:`finish` or :meth:`stop`. A result that has already ended (the FnApiRunner's ``run()``
        returns once the pipeline has finished) is not polled: its final metrics come with
        :meth:`finish` (and its ``metrics()`` must not be built from two threads at once)."""
        if self._watcher is not None:
            return
        state = str(getattr(result, "state", "")).rsplit(".", 1)[-1]
        if state in ("DONE", "FAILED", "CANCELLED", "DRAINED", "STOPPED", "UPDATED"):
            return

        def loop() -> None:
            while not self._stop.is_set():
                self.poll(result)
                self._stop.wait(interval_s)

        self._watcher = threading.Thread(target=loop, name="ldp-metrics-poll", daemon=True)
        self._watcher.start()

    def stop_watching(self) -> None:
        """Stops the polls (the job has ended: its result is read by the job's own thread from now on)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(30)

    def finish(self, counts: Mapping[str, int], *, state: str, result: Any = None) -> None:
        """The job ended: stops polling; its counters become ``counts`` (the job's summary counts, those of
        ``OUT/counts.json``: reports read, accepted, rejected and by reason, late, lost) and, for every
        other counter (panes, rows, the store's) and the distributions, ``result``'s final Beam
        metrics."""
        self.stop_watching()
        dists: dict[str, dict[str, int]] = {}
        merged: dict[str, int] = {}
        if result is not None:
            try:
                names = [d.distribution for d in self.metrics.distributions]
                beam_counts, dists = beam_snapshot(result, names)
                merged.update({k: v for k, v in beam_counts.items() if not _report_count(k)})
            except Exception as exc:  # noqa: BLE001 - the final counts below still hold
                _LOG.warning("the job's final Beam metrics are unavailable: %s", exc)
        merged.update({k: int(v) for k, v in counts.items()})
        self.metrics.finish(merged, dists, state=state)

    def linger(self, seconds: float) -> None:
        """Keeps serving for ``seconds`` (the final counts of a job that has ended)."""
        if seconds > 0 and self._httpd is not None:
            _LOG.info("metrics: serving the final counts at %s for %g s (--metrics_linger)", self.url,
                      seconds)
            time.sleep(seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> MetricsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_job_metrics(
    port: int,
    *,
    pipeline: str,
    task_id: str,
    reasons: Sequence[str] | None = None,
    outputs: Sequence[str] = (),
    counters: Sequence[CounterSpec] = JOB_COUNTERS,
    distributions: Sequence[DistributionSpec] = DISTRIBUTIONS,
    host: str = DEFAULT_HOST,
) -> MetricsEndpoint:
    """A started endpoint for a job about to run (``reasons`` default: :func:`job_reasons`)."""
    metrics = JobMetrics(
        pipeline=pipeline, task_id=task_id, reasons=job_reasons() if reasons is None else reasons,
        outputs=outputs, counters=counters, distributions=distributions,
    )
    return MetricsEndpoint(metrics, port, host).start()


def serve_job_metrics(result: Any, port: int, **kwargs: Any) -> MetricsEndpoint:
    """:func:`start_job_metrics` then :meth:`MetricsEndpoint.watch` of a running job's ``result``, in one
    call (for a job whose ``p.run()`` returns while the pipeline runs)."""
    endpoint = start_job_metrics(port, **kwargs)
    endpoint.watch(result)
    return endpoint
