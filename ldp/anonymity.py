"""Anonymous collection settings of a task (the ``anonymity`` section) and the shuffler's numpy helpers.

A task collected through the shuffler (docs/shuffler.md) carries::

    "anonymity": {"shuffled": true, "delta": 1e-9, "time_precision_s": 3600, "min_reports": 1000,
                  "short_bucket": "withhold"}

Every key is optional; :class:`AnonymitySettings` documents each one with its default and bounds.
:func:`check_anonymity` appends every problem of a section to a list (the task checker's style) and
:func:`parse_anonymity` raises :class:`AnonymityError` listing all of them. :func:`window_problems`
cross-checks the settings against the task's aggregation window.

Helpers (vectorized, no Beam): :func:`round_event_ms` (event times, in milliseconds as in
``schemas/report.avsc``, rounded down to the precision), :func:`is_rounded` (the validator's
``fine_time`` check), :func:`secure_permutation` (a permutation drawn from the operating system's
CSPRNG) and :func:`seeded_permutation` (reproducible, for tests only).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "DAY_S",
    "MAX_TIME_PRECISION_S",
    "MAX_DELTA",
    "SHORT_BUCKET_POLICIES",
    "AnonymityError",
    "AnonymitySettings",
    "check_anonymity",
    "parse_anonymity",
    "window_problems",
    "batch_reports",
    "round_event_ms",
    "is_rounded",
    "bucket_start_ms",
    "secure_permutation",
    "seeded_permutation",
]

DAY_S = 86_400
#: Largest time precision: 366 days.
MAX_TIME_PRECISION_S = 366 * DAY_S
#: Largest delta the section accepts.
MAX_DELTA = 1e-3
#: What happens to a bucket that closes with fewer than ``min_reports`` reports.
SHORT_BUCKET_POLICIES = ("withhold",)

_KEYS = ("shuffled", "delta", "time_precision_s", "min_reports", "short_bucket")


class AnonymityError(ValueError):
    """An ``anonymity`` section with problems; ``problems`` lists all of them."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclasses.dataclass(frozen=True)
class AnonymitySettings:
    """The ``anonymity`` section of a task, validated.

    Attributes:
        shuffled: the reports reach the aggregator only through the shuffler (default True: the section
            exists to say so; False keeps the section inert).
        delta: the delta of the central (eps, delta) guarantee the accountant reports, in ``(0, 1e-3]``
            (default ``1e-9``).
        time_precision_s: event times are rounded down to a multiple of this many seconds since the epoch
            (UTC), and the shuffler batches reports per interval of this length (the *bucket*). A
            positive integer that divides a day (1, 2, ..., 3600, ..., 43200, 86400) or is a whole
            number of days up to 366 (multi-day buckets are aligned on the epoch, 1970-01-01, a
            Thursday). Default 3600.
        min_reports: a bucket is forwarded only when it holds at least this many reports (>= 2;
            default 1000): the ``n`` of the amplification bound.
        short_bucket: what happens to a bucket that closes short. ``"withhold"`` (the default and the
            only policy): its reports are dropped and counted as withheld, never forwarded.
    """

    shuffled: bool = True
    delta: float = 1e-9
    time_precision_s: int = 3600
    min_reports: int = 1000
    short_bucket: str = "withhold"

    def __post_init__(self) -> None:
        problems = _problems(dataclasses.asdict(self))
        if problems:
            raise AnonymityError(problems)

    @property
    def precision_ms(self) -> int:
        """The time precision in milliseconds."""
        return int(self.time_precision_s) * 1000

    def round_ms(self, event_ms: np.ndarray) -> np.ndarray:
        """Event times rounded down to the precision (:func:`round_event_ms`)."""
        return round_event_ms(event_ms, self.time_precision_s)

    def is_rounded(self, event_ms: np.ndarray) -> np.ndarray:
        """Which event times are multiples of the precision (:func:`is_rounded`)."""
        return is_rounded(event_ms, self.time_precision_s)

    def to_json(self) -> dict[str, Any]:
        """The section as a JSON object (every key, defaults included)."""
        return dataclasses.asdict(self)


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _problems(obj: Mapping[str, object]) -> list[str]:
    """Every problem of the section's values (keys already known)."""
    out: list[str] = []
    if "shuffled" in obj and not isinstance(obj["shuffled"], bool):
        out.append(f"anonymity.shuffled must be true or false, got {obj['shuffled']!r}")
    if "delta" in obj:
        d = obj["delta"]
        ok = isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(float(d))
        if not (ok and 0 < float(d) <= MAX_DELTA):
            out.append(f"anonymity.delta must be a number in (0, {MAX_DELTA:g}], got {d!r}")
    if "time_precision_s" in obj:
        p = obj["time_precision_s"]
        if not _is_int(p) or not 0 < int(p) <= MAX_TIME_PRECISION_S:
            out.append(
                f"anonymity.time_precision_s must be a positive integer number of seconds up to "
                f"{MAX_TIME_PRECISION_S} (366 days), got {p!r}"
            )
        elif DAY_S % int(p) and int(p) % DAY_S:
            out.append(
                f"anonymity.time_precision_s must divide a day ({DAY_S} s) or be a whole number of days, "
                f"got {p}"
            )
    if "min_reports" in obj:
        m = obj["min_reports"]
        if not _is_int(m) or int(m) < 2:
            out.append(f"anonymity.min_reports must be an integer >= 2, got {m!r}")
    if "short_bucket" in obj and obj["short_bucket"] not in SHORT_BUCKET_POLICIES:
        out.append(
            f"anonymity.short_bucket must be one of {', '.join(SHORT_BUCKET_POLICIES)}, "
            f"got {obj['short_bucket']!r}"
        )
    return out


def check_anonymity(
    section: object, problems: list[str] | None = None
) -> tuple[AnonymitySettings | None, list[str]]:
    """Checks an ``anonymity`` section (a parsed JSON object; None: no section).

    Returns ``(settings, problems)``: the settings (None when there is no section or any problem) and
    every problem found (appended to ``problems`` when given, which is also the list returned).
    """
    out = [] if problems is None else problems
    if section is None:
        return None, out
    if not isinstance(section, Mapping):
        out.append(f"anonymity must be an object, got {type(section).__name__}")
        return None, out
    found = [f"anonymity: unknown key {k!r} (known: {', '.join(_KEYS)})" for k in section if k not in _KEYS]
    found += _problems(section)
    out.extend(found)
    if found:
        return None, out
    values = dict(section)
    for k in ("time_precision_s", "min_reports"):
        if k in values:
            values[k] = int(values[k])  # type: ignore[call-overload]
    if "delta" in values:
        values["delta"] = float(values["delta"])  # type: ignore[arg-type]
    return AnonymitySettings(**values), out  # type: ignore[arg-type]


def parse_anonymity(section: object) -> AnonymitySettings:
    """The settings of an ``anonymity`` section (a JSON object).

    Raises:
        AnonymityError: listing every problem (also when ``section`` is None: there is no section).
    """
    if section is None:
        raise AnonymityError(["the task has no anonymity section"])
    settings, problems = check_anonymity(section)
    if problems or settings is None:
        raise AnonymityError(problems or ["the anonymity section could not be parsed"])
    return settings


def window_problems(
    settings: AnonymitySettings, size_s: float | None, period_s: float | None = None
) -> list[str]:
    """Problems of the task's aggregation window (``window.size_s`` / ``period_s``) with the settings:
    rounding must keep every report in the windows it belonged to, so the window size (and period) must
    be whole multiples of the time precision. The global window (``size_s`` None) has none."""
    out: list[str] = []
    p_ms = settings.precision_ms
    for name, v in (("size_s", size_s), ("period_s", period_s)):
        if v is None:
            continue
        ms = round(float(v) * 1000)
        if ms <= 0 or ms % p_ms:
            out.append(
                f"window.{name} ({v:g} s) must be a whole multiple of anonymity.time_precision_s "
                f"({settings.time_precision_s} s): rounded event times would move reports between windows"
            )
    return out


def batch_reports(window_reports: int, window_size_s: float | None, precision_s: int) -> int:
    """The reports expected in one shuffled batch (one bucket of ``precision_s`` seconds) when
    ``window_reports`` are expected per aggregation window of ``window_size_s`` seconds, spread evenly:
    ``floor(window_reports * precision_s / window_size_s)``. A window no longer than a bucket, or the
    global window (``window_size_s`` None, whose number of buckets is unknown), counts ``window_reports``
    per batch. A user hides only among the reports of its own batch, so privacy is planned at this ``n``."""
    n = int(window_reports)
    if window_size_s is None or float(window_size_s) <= precision_s:
        return n
    return (n * int(precision_s) * 1000) // round(float(window_size_s) * 1000)


def round_event_ms(event_ms: np.ndarray, precision_s: int) -> np.ndarray:
    """Event times (int64 milliseconds since the epoch) rounded down to a multiple of ``precision_s``
    seconds (floor, also for times before the epoch)."""
    a = np.asarray(event_ms, dtype=np.int64)
    p = np.int64(int(precision_s) * 1000)
    return a - np.mod(a, p)


def is_rounded(event_ms: np.ndarray, precision_s: int) -> np.ndarray:
    """Boolean mask: which event times (int64 milliseconds) are multiples of ``precision_s`` seconds."""
    a = np.asarray(event_ms, dtype=np.int64)
    return np.mod(a, np.int64(int(precision_s) * 1000)) == 0


def bucket_start_ms(event_ms: int, precision_s: int) -> int:
    """The start (milliseconds) of the bucket holding one event time."""
    p = int(precision_s) * 1000
    return int(event_ms) - int(event_ms) % p


def secure_permutation(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` (int64) drawn from the operating system's CSPRNG.

    Each index gets a 64-bit key from ``os.urandom`` and the indices are sorted by key. When all keys
    differ, the order is uniform: the keys are i.i.d. and "all differ" is symmetric in the indices. When two
    keys are equal (probability below ``n**2 / 2**65``, 2.4e-7 at n = 3e6), the permutation is drawn again
    with 128-bit keys, equal with probability below ``n**2 / 2**129`` (ties then keep input order): the
    permutation is uniform up to that. No numpy generator state is involved.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n < 2:
        return np.arange(n, dtype=np.int64)
    keys = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    if not np.any(ranked[1:] == ranked[:-1]):
        return order.astype(np.int64, copy=False)
    wide = np.frombuffer(os.urandom(16 * n), dtype=np.uint64).reshape(n, 2)
    return np.lexsort((wide[:, 1], wide[:, 0])).astype(np.int64)


def seeded_permutation(n: int, seed: int) -> np.ndarray:
    """A reproducible permutation of ``range(n)`` from ``numpy.random.default_rng(seed)``. For tests
    only: anyone who knows the seed can undo it."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return np.random.default_rng(seed).permutation(n).astype(np.int64)
