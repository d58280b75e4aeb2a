"""Checkpointed watch ticks on Flink, and ending such a watch by draining the Flink job.

A watched directory (:class:`transforms.io.WatchReportFiles`) needs a clock: a tick every watch interval,
and a watermark that follows the wall clock ``watermark_lag`` behind. Everywhere else the clock is
``PeriodicImpulse`` (:class:`transforms.io.Ticks`), a splittable DoFn. The portable Flink runner never
checkpoints a running splittable-DoFn bundle (apache/beam#20979), so a checkpointed Flink job watching a
directory completes no checkpoint while the watch runs and cannot fail over (docs/flink.md, "Failover").

``--watch_ticks=flink`` takes the clock from Java instead: :class:`FlinkTicks` is the cross-language
transform ``beam:external:ldp:lagged_ticks:v1`` (``tools/flink/ticks``, Java), Beam's unbounded
``GenerateSequence`` at one element per interval, timestamped and watermarked ``lag`` behind the wall
clock. Its expansion service (``tools/flink/cluster.sh`` starts one on 127.0.0.1) runs with the
``use_deprecated_read`` experiment, so it expands to a primitive ``Read``, which the Flink runner turns into
a Flink source of its own: the counter's position is in every checkpoint, restored after a failure, and
no SDK harness runs it. Everything after the ticks is the Python watch as before.

An unbounded source never finishes, so a watch with a duration ends by a **drain**:
:func:`run_draining` waits until the Flink job runs, sleeps the duration, then asks Flink's REST API to
stop the job with a savepoint and ``drain`` (the sources end, the watermark moves to the end of time, every
window fires its final pane, the job finishes). The duration starts when the Flink job first runs and is
not restarted by a failover. Without a duration the job runs until it is stopped
(``flink stop --drain JOB`` or ``POST /jobs/JOB/stop {"drain": true}``).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

import apache_beam as beam
from apache_beam.transforms.external import ExternalTransform, ImplicitSchemaPayloadBuilder

from transforms.display import task_id_display

__all__ = [
    "TICKS_URN",
    "FlinkRest",
    "FlinkRestError",
    "FlinkTicks",
    "run_draining",
]

TICKS_URN = "beam:external:ldp:lagged_ticks:v1"
_ENDED = ("FINISHED", "FAILED", "CANCELED")  # Flink job states with nothing left to drain
_LOG = logging.getLogger(__name__)


class FlinkTicks(beam.PTransform):
    """A tick (an integer counter) every ``interval_s`` seconds, timestamped and watermarked ``lag_s``
    behind the wall clock, from the Java source behind ``expansion_service`` (HOST:PORT of an expansion
    service with ``tools/flink/ticks`` on its class path and ``--experiments=use_deprecated_read``).
    Runs on the Flink runner only (the runner must translate a primitive ``Read``)."""

    def __init__(
        self, interval_s: float, lag_s: float, expansion_service: str, *, task_id: str | None = None
    ) -> None:
        super().__init__()
        period_ms, lag_ms = round(float(interval_s) * 1000), round(float(lag_s) * 1000)
        if period_ms < 1:
            raise ValueError(f"tick interval must be at least 1 ms, got {interval_s} s")
        if lag_ms < 0:
            raise ValueError(f"watermark lag must be >= 0 seconds, got {lag_s}")
        if not expansion_service or ":" not in expansion_service:
            raise ValueError(f"the ticks' expansion service must be HOST:PORT, got {expansion_service!r}")
        self.period_ms, self.lag_ms = period_ms, lag_ms
        self.expansion_service = expansion_service
        self.task_id = task_id

    def expand(self, pbegin):
        payload = ImplicitSchemaPayloadBuilder({"period_ms": self.period_ms, "lag_ms": self.lag_ms})
        return pbegin | "JavaTicks" >> ExternalTransform(TICKS_URN, payload, self.expansion_service)

    def display_data(self) -> dict[str, Any]:
        return {
            **task_id_display(self.task_id),
            "period_ms": self.period_ms,
            "lag_ms": self.lag_ms,
            "expansion_service": self.expansion_service,
        }


class FlinkRestError(RuntimeError):
    """Flink's REST API refused a request, or the job did not reach the state waited for."""


class FlinkRest:
    """The few calls of Flink's REST API (``http://HOST:PORT``) the drain needs."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        address = address.strip()
        if address.startswith("["):  # [local] / [auto]: an embedded mini-cluster, no REST endpoint
            raise FlinkRestError(f"--flink_master {address} has no REST endpoint to drain the job through")
        self.base = address if address.startswith("http") else f"http://{address}"
        self.base = self.base.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="GET" if data is None else "POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise FlinkRestError(f"Flink REST {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise FlinkRestError(f"Flink REST {self.base}{path} unreachable: {exc}") from None

    def job_for(self, beam_job_id: str) -> tuple[str, str] | None:
        """(Flink job id, state) of the Flink job a Beam job submission became (named by the prefix of
        the Beam job id before its last ``_``), the newest if several; None if there is none yet."""
        jobs = self._call("/jobs/overview").get("jobs", [])
        mine = [j for j in jobs if beam_job_id.startswith(f"{j.get('name', '')}_")]
        if not mine:
            return None
        j = max(mine, key=lambda j: j.get("start-time", 0))
        return str(j["jid"]), str(j["state"])

    def tasks_running(self, jid: str) -> bool:
        """Every task of the job deployed and running (or already finished, like idle Impulse sources):
        the SDK harnesses are up and the watch's ticks are flowing."""
        vertices = self._call(f"/jobs/{jid}").get("vertices", [])
        states = [str(v.get("status")) for v in vertices]
        return "RUNNING" in states and all(st in ("RUNNING", "FINISHED") for st in states)

    def drain(self, jid: str, savepoint_dir: str | None = None) -> str:
        """Stop-with-savepoint and drain; returns the trigger id."""
        body: dict[str, Any] = {"drain": True}
        if savepoint_dir:
            body["targetDirectory"] = savepoint_dir
        return str(self._call(f"/jobs/{jid}/stop", body)["request-id"])

    def savepoint_status(self, jid: str, trigger: str) -> tuple[str, str | None]:
        """("IN_PROGRESS" | "COMPLETED", failure or None)."""
        st = self._call(f"/jobs/{jid}/savepoints/{trigger}")
        failure = (st.get("operation") or {}).get("failure-cause")
        return str(st.get("status", {}).get("id", "?")), None if not failure else str(failure)[:500]


class _Result(Protocol):
    """The part of a Beam ``PipelineResult`` the drain uses."""

    def wait_until_finish(self, duration: int | None = None) -> Any: ...


def run_draining(
    result: _Result,
    beam_job_id: str,
    rest: FlinkRest,
    duration_s: float,
    *,
    savepoint_dir: str | None = None,
    start_timeout_s: float = 600.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> None:
    """Waits until the Flink job of ``beam_job_id`` runs (every task running: the SDK harnesses take a
    while to start), lets it run ``duration_s`` seconds, drains it (retried while the job restarts after a
    failure) and waits for the Beam job to finish.

    Raises:
        FlinkRestError: the job never ran within ``start_timeout_s``, or the drain failed.
    """
    t0 = clock()
    started = None
    while started is None:
        found = rest.job_for(beam_job_id)
        if found and found[1] == "RUNNING" and rest.tasks_running(found[0]):
            started = clock()
            _LOG.info("Flink job %s running; draining it after %.0f s", found[0], duration_s)
        elif found and found[1] in _ENDED:
            break  # nothing to drain: the Beam result says how it ended
        elif clock() - t0 > start_timeout_s:
            raise FlinkRestError(
                f"the Flink job of {beam_job_id} was not running after {start_timeout_s:.0f} s"
            )
        else:
            sleep(0.5)
    if started is not None:
        while clock() < started + duration_s:
            sleep(min(0.5, max(0.0, started + duration_s - clock())))
        _drain(rest, beam_job_id, savepoint_dir, sleep=sleep, clock=clock, timeout_s=start_timeout_s)
    result.wait_until_finish()


def _drain(
    rest: FlinkRest,
    beam_job_id: str,
    savepoint_dir: str | None,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    timeout_s: float,
) -> None:
    t0 = clock()
    last = ""
    while clock() - t0 < timeout_s:
        found = rest.job_for(beam_job_id)
        if found is None or found[1] in _ENDED:
            return
        jid, state = found
        if state != "RUNNING":  # restarting after a failure: drain once it runs again
            sleep(0.5)
            continue
        try:
            trigger = rest.drain(jid, savepoint_dir)
        except FlinkRestError as exc:
            last = str(exc)
            sleep(1.0)
            continue
        while clock() - t0 < timeout_s:
            status, failure = rest.savepoint_status(jid, trigger)
            if status == "COMPLETED" and failure is None:
                _LOG.info("Flink job %s drained", jid)
                return
            if status == "COMPLETED":  # e.g. a failover during the savepoint: try again
                last = failure or ""
                _LOG.warning("draining Flink job %s failed (%s); retrying", jid, last[:200])
                break
            sleep(0.5)
    raise FlinkRestError(
        f"could not drain the Flink job of {beam_job_id} in {timeout_s:.0f} s"
        + (f" (last error: {last[:300]})" if last else "")
        + "; a cluster without state.savepoints.dir needs --flink_savepoint_dir"
    )
