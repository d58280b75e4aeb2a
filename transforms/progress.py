"""Rate-limited progress lines of a running job (through :mod:`logging`, logger ``transforms.progress``).

The sources (:mod:`transforms.io`) count the files and messages they read and the reports in them; the
result writers count the panes written, by window and timing. At most every ``interval_s`` seconds
(``--progress_interval``, default 30 s; 0 turns the lines off) one INFO line sums it up::

    progress: 12 file(s), 1,204,000 reports read (40,133/s over the last 30 s, 38,800/s overall);
    9 pane(s) written, 3 window(s) closed (last: 2026-12-01T09:40:00Z..09:40:10Z ON_TIME)

The counts are per process: the whole job on the local runners (the DirectRunner, Prism and Flink with
``--environment_type=LOOPBACK`` run the workers in the launching process), one worker's share on a
cluster. They are progress, not the job's counts (those are the Beam counters and the count windows).

Every log line of a job names a window by :func:`window_label`: its UTC wall-clock bounds, or
``global window``.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

__all__ = ["DEFAULT_INTERVAL_S", "Progress", "configure", "progress", "window_label"]

_LOG = logging.getLogger(__name__)

#: Seconds between progress lines unless ``--progress_interval`` says otherwise.
DEFAULT_INTERVAL_S = 30.0
_MAX_PANES_REMEMBERED = 10_000


class Progress:
    """Counters of one process and the rate limit of their log line (thread-safe)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, clock=time.monotonic) -> None:
        self.interval_s = float(interval_s)
        self._clock = clock
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.files = self.messages = self.reports = 0
            self.panes = self.windows_closed = 0
            self.last_pane = ""
            self._windows_closed: set[tuple[object, object]] = set()
            self._panes_seen: dict[tuple[object, object, int], None] = {}
            self._t0 = self._last_t = self._clock()
            self._last_reports = 0
            self.lines = 0

    def add_input(self, reports: int, *, files: int = 0, messages: int = 0) -> None:
        """Counts ``reports`` read (and the files / messages they came in), then maybe logs."""
        with self._lock:
            self.reports += int(reports)
            self.files += files
            self.messages += messages
        self.maybe_log()

    def add_row(self, start: object, end: object, pane_index: int, timing: str) -> None:
        """Counts a result row written of pane ``pane_index`` of window ``[start, end)`` (the first row of
        a pane counts the pane; a non-EARLY pane closes its window), then maybe logs."""
        key = (start, end, int(pane_index))
        with self._lock:
            if key in self._panes_seen:
                return
            self._panes_seen[key] = None
            if len(self._panes_seen) > _MAX_PANES_REMEMBERED:
                self._panes_seen.pop(next(iter(self._panes_seen)))
            self.panes += 1
            self.last_pane = f"{window_label(start, end)} {timing}"
            if timing != "EARLY" and (start, end) not in self._windows_closed:
                self._windows_closed.add((start, end))
                if len(self._windows_closed) > _MAX_PANES_REMEMBERED:
                    self._windows_closed.pop()
                self.windows_closed += 1
        self.maybe_log()

    def maybe_log(self, force: bool = False) -> str | None:
        """Logs the line when ``interval_s`` has passed since the last one (or ``force``); returns it."""
        if self.interval_s <= 0 and not force:
            return None
        now = self._clock()
        with self._lock:
            if not force and now - self._last_t < self.interval_s:
                return None
            dt, total = now - self._last_t, now - self._t0
            recent = (self.reports - self._last_reports) / dt if dt > 0 else 0.0
            overall = self.reports / total if total > 0 else 0.0
            parts = []
            if self.files:
                parts.append(f"{self.files:,} file(s)")
            if self.messages:
                parts.append(f"{self.messages:,} message(s)")
            line = (
                f"progress: {', '.join(parts) + ', ' if parts else ''}{self.reports:,} reports read "
                f"({recent:,.0f}/s over the last {dt:.0f} s, {overall:,.0f}/s overall); "
                f"{self.panes:,} pane(s) written, {self.windows_closed:,} window(s) closed"
                + (f" (last: {self.last_pane})" if self.last_pane else "")
            )
            self._last_t, self._last_reports = now, self.reports
            self.lines += 1
        _LOG.info("%s", line)
        return line


def window_label(start: object, end: object) -> str:
    """A window as an operator reads it: ``2026-12-01T10:00:00Z..10:10:00Z`` (UTC, from its start to its
    exclusive end; the end's date only when it differs from the start's, milliseconds only when the bound
    is not a whole second), or ``global window``. The bounds are epoch milliseconds or ISO-8601 strings;
    None bounds, the store's 0, 0 and Beam's (before year 1 to after year 9999) are the global window;
    other bounds that are no date show as milliseconds."""
    if (start is None and end is None) or (start == 0 and end == 0):
        return "global window"
    try:
        a, b = _utc(start), _utc(end)
    except (TypeError, ValueError, OverflowError, OSError):
        numbers = isinstance(start, (int, float)) and isinstance(end, (int, float))
        if numbers and start < _MIN_MS and end > _MAX_MS:  # type: ignore[operator]
            return "global window"
        return f"[{start}, {end}) ms"
    left = _clock(a, a.strftime("%Y-%m-%dT"))
    right = _clock(b, "" if b.date() == a.date() else b.strftime("%Y-%m-%dT"))
    return f"{left}..{right}"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: Epoch milliseconds of 0001-01-01 and of the last millisecond of 9999 (the dates ``datetime`` holds).
_MIN_MS = (dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc) - _EPOCH) // dt.timedelta(milliseconds=1)
_MAX_MS = (dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc) - _EPOCH) // dt.timedelta(
    milliseconds=1
)


def _utc(t: object) -> dt.datetime:
    if isinstance(t, str):
        return dt.datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return _EPOCH + dt.timedelta(milliseconds=t)
    raise TypeError(f"not a window bound: {t!r}")


def _clock(t: dt.datetime, date: str) -> str:
    ms = t.microsecond // 1000
    return f"{date}{t:%H:%M:%S}{f'.{ms:03d}' if ms else ''}Z"


_PROGRESS = Progress()


def progress() -> Progress:
    """This process's :class:`Progress`."""
    return _PROGRESS


def configure(interval_s: float) -> Progress:
    """Sets the seconds between progress lines (0: none) and starts the counts afresh (a new job)."""
    _PROGRESS.interval_s = float(interval_s)
    _PROGRESS.reset()
    return _PROGRESS
