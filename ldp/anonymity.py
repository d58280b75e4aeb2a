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

The section's optional **central target** (:class:`CentralTarget`: ``central_epsilon`` at the section's
``delta``, ``expected_reports`` per window) is planned per shuffled batch: :func:`target_reports`,
:func:`batch_target_reports`, :func:`epsilon_for_target` (``epsilon: "auto"``), :func:`meets_target` and
:func:`check_shuffled_task` (what a shuffled task must not do); :func:`shuffle_accounting` names the bound
that covers a task's reports (``ldp.shuffle``).
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
    "CentralTarget",
    "TARGET_KEYS",
    "check_section",
    "target_reports",
    "batch_target_reports",
    "shuffle_accounting",
    "meets_target",
    "largest_local_epsilon",
    "largest_epsilon_for_task",
    "TargetChoice",
    "choose_for_target",
    "epsilon_for_target",
    "check_shuffled_task",
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


# ------------------------------------------------------------------------------------------------------------
# the central target of a shuffled task: its keys, the batch size it is planned at, the local epsilon
# ------------------------------------------------------------------------------------------------------------

#: The central target's keys of the ``anonymity`` section (the rest are :class:`AnonymitySettings`').
TARGET_KEYS = ("central_epsilon", "expected_reports")
#: Local epsilons chosen for a central target are rounded down to a multiple of this.
EPSILON_STEP = 1e-3


def _is_json_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclasses.dataclass(frozen=True)
class CentralTarget:
    """The central target of a task's ``anonymity`` section (both keys optional).

    Attributes:
        central_epsilon: the central epsilon, at ``anonymity.delta``, every shuffled batch must meet
            (None: no target; the local ``epsilon`` is then given as a number).
        expected_reports: the reports expected per aggregation window (range tasks: default
            ``expected_users``); the target is met at the batch size it implies
            (``Task.expected_batch_reports``); the guarantee achieved is reported from the ``n`` of
            each batch actually shuffled (the privacy report).
    """

    central_epsilon: float | None = None
    expected_reports: int | None = None

    def to_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {}
        if self.central_epsilon is not None:
            out["central_epsilon"] = self.central_epsilon
        if self.expected_reports is not None:
            out["expected_reports"] = self.expected_reports
        return out



def check_section(raw: object, problems: list[str]) -> tuple[AnonymitySettings | None, CentralTarget | None]:
    """The ``anonymity`` section: ``ldp.anonymity``'s keys (:func:`ldp.anonymity.check_anonymity`) and the
    central target's (``central_epsilon``, ``expected_reports``). ``(None, None)`` without a section or
    with problems."""
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        problems.append(f"anonymity must be an object, got {type(raw).__name__}")
        return None, None
    n = len(problems)
    known = tuple(f.name for f in dataclasses.fields(AnonymitySettings))
    for k in raw:
        if k not in known and k not in TARGET_KEYS:
            problems.append(f"anonymity: unknown key {k!r} (known: {', '.join((*known, *TARGET_KEYS))})")
    settings, _ = check_anonymity({k: v for k, v in raw.items() if k in known}, problems)
    eps = raw.get("central_epsilon")
    if "central_epsilon" in raw and not (_is_number(eps) and 0 < eps <= 50):
        problems.append(f"anonymity.central_epsilon must be a number in (0, 50], got {eps!r}")
    reports = raw.get("expected_reports")
    if "expected_reports" in raw and not (_is_json_int(reports) and reports >= 2):
        problems.append(f"anonymity.expected_reports must be an integer >= 2, got {reports!r}")
    if len(problems) > n or settings is None:
        return None, None
    if "central_epsilon" not in raw and "expected_reports" not in raw:
        return settings, None
    return settings, CentralTarget(
        central_epsilon=None if eps is None else float(eps),
        expected_reports=None if reports is None else int(reports),
    )


def target_reports(
    obj: Mapping[str, object],
    expected_key: str | None,
    settings: AnonymitySettings,
    target: CentralTarget | None,
    problems: list[str],
) -> int | None:
    """The reports expected per shuffled window (``expected_reports``; else the kind's ``expected_key``,
    range: ``expected_users``), checked against the section: at least ``min_reports``, and given when there
    is a central target."""
    n = None if target is None else target.expected_reports
    where = "anonymity.expected_reports"
    if n is None and expected_key is not None and _is_json_int(obj.get(expected_key)):
        n, where = int(obj[expected_key]), expected_key  # type: ignore[call-overload]
    has_target = target is not None and target.central_epsilon is not None
    if has_target and not settings.shuffled:
        problems.append(
            "anonymity.central_epsilon applies to shuffled tasks only (anonymity.shuffled is false)"
        )
    if has_target and n is None:
        problems.append(
            "anonymity.central_epsilon needs anonymity.expected_reports: the reports shuffled together per "
            "window, at which the local epsilon meets the target"
        )
    if n is not None and n < settings.min_reports and (has_target or where != expected_key):
        problems.append(
            f"{where} ({n}) is below anonymity.min_reports ({settings.min_reports}): the shuffler would "
            "withhold every batch"
        )
    return n


def round_down_epsilon(eps: float, floor: float) -> float:
    """``eps`` rounded down to a multiple of :data:`EPSILON_STEP`, never below ``floor``."""
    down = math.floor(eps / EPSILON_STEP + 1e-9) * EPSILON_STEP
    down = float(f"{down:.6f}")  # the multiple itself, without binary noise
    return down if floor <= down <= eps else eps


def shuffle_accounting(task: Any) -> tuple[str, int | None]:
    """How the shuffled reports of ``task`` are accounted: the ``mechanism`` and ``domain_size`` of
    ``ldp.shuffle.accountant`` for its randomizer (:func:`ldp.shuffle.accounting_for_task`): a frequency
    task's oracle by its own parameters (``("grr", k)``, ``("olh", g)``, ``("oue", None)``, ...), a range
    task's per-report randomizer (its groups' oracles), else ``("general", None)``, the bound for any
    eps0-LDP randomizer."""
    from ldp.shuffle import accounting_for_task

    return accounting_for_task(task)


def meets_target(eps0: float, target: float, delta: float, n: int, accounting: str, k: int | None) -> bool:
    """Whether ``n`` shuffled ``eps0``-LDP reports meet ``(target, delta)``, by the accountant's public
    functions: the tests of its inverse (``ldp.shuffle.local_epsilon_for_central``: a dominating pair's
    ``delta(target)`` within ``delta``, or the closed form's epsilon within the target), then the central
    epsilon it reports (which also covers figures without a curve, e.g. exact binary randomized response)."""
    from ldp.shuffle import central_epsilon

    return _meets_fast(eps0, target, delta, n, accounting, k) or \
        central_epsilon(eps0, n, delta, accounting, k) <= target


def _meets_fast(eps0: float, target: float, delta: float, n: int, accounting: str, k: int | None) -> bool:
    """The curve tests of :func:`meets_target` alone (no epsilon search); an accounting the accountant
    cannot evaluate at ``eps0`` (an SS subset size it cannot build there) does not meet it."""
    from ldp.shuffle import central_epsilon_fmt_closed_form, delta_curve
    from ldp.shuffle.randomizers import LevelledRandomizer

    if eps0 <= target:
        return True
    # a levelled randomizer's reports hide per level, never among the whole batch: its curve only
    levelled = isinstance(accounting, LevelledRandomizer)
    if not levelled and central_epsilon_fmt_closed_form(eps0, n, delta) <= target:
        return True
    try:
        return float(delta_curve([target], eps0, n, accounting, k)[0]) <= delta
    except ValueError:
        return False


def largest_local_epsilon(target: float, delta: float, n: int, accounting: str, k: int | None) -> float:
    """The largest local epsilon meeting ``(target, delta)`` at ``n`` for a randomizer whose accounting does
    not change with its epsilon, rounded down to 0.001."""
    from ldp.shuffle import local_epsilon_for_central

    return round_down_epsilon(local_epsilon_for_central(target, delta, n, accounting, k), target)


#: the largest local epsilon a central target's search considers
MAX_PLANNED_EPSILON = 30.0


def _accounting_at(task: Any, eps0: float) -> tuple[str, int | None] | None:
    """The accounting of ``task`` at another epsilon (its oracle may change with it: OLH's ``g``), None
    when its randomizer cannot be built there."""
    try:
        return shuffle_accounting(dataclasses.replace(task, epsilon=float(eps0)))
    except (ValueError, ArithmeticError):
        return None


def largest_epsilon_for_task(task: Any, target: float, delta: float, n: int) -> float:
    """The largest local epsilon (rounded down to 0.001) at which ``task``'s randomizer, rebuilt at that
    epsilon, meets ``(target, delta)`` over ``n`` shuffled reports under its own bound
    (:func:`shuffle_accounting` at each epsilon tried: OLH's ``g`` grows with epsilon). Bisection on the
    curve tests (to 1e-4), then the figure is checked with :func:`meets_target` and stepped down until it
    meets; exact binary randomized response (GRR on two values) uses the accountant's exact inverse."""

    def meets(eps0: float) -> bool:
        acc = _accounting_at(task, eps0)
        return acc is not None and _meets_fast(eps0, target, delta, n, *acc)

    lo, hi = float(target), MAX_PLANNED_EPSILON
    if meets(hi):
        lo = hi
    while hi - lo > 1e-4:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    acc = _accounting_at(task, lo)
    if acc == ("grr", 2):  # exact binary RR, where computed, certifies more than the curves
        lo = max(lo, _exact_binary_inverse(target, delta, n))
    eps = round_down_epsilon(lo, target)
    for _ in range(100):
        acc = _accounting_at(task, eps)
        if eps <= target or (acc is not None and meets_target(eps, target, delta, n, *acc)):
            return eps
        eps = round_down_epsilon(eps - EPSILON_STEP, target)
    return float(target)


def _exact_binary_inverse(target: float, delta: float, n: int) -> float:
    from ldp.shuffle import local_epsilon_for_central

    return local_epsilon_for_central(target, delta, n, "grr", 2, eps0_max=MAX_PLANNED_EPSILON)


@dataclasses.dataclass(frozen=True)
class TargetChoice:
    """What ``epsilon: "auto"`` chooses for a central target (:func:`choose_for_target`).

    Attributes:
        mechanism: the task's mechanism (an ``auto`` frequency task: the candidate chosen).
        epsilon: its local epsilon, the largest meeting the target under its own bound (0.001 steps).
        accounting: the accountant's mechanism at that epsilon; domain_size: its domain size.
        table: per candidate ``mechanism``, ``epsilon``, ``accounting``, ``variance`` (``n * Var`` of one
            frequency estimate at that epsilon, the closed form; None for other kinds) and ``status``
            (``chosen``, ``higher variance`` or ``skipped: <reason>``).
    """

    mechanism: str
    epsilon: float
    accounting: str
    domain_size: int | None
    table: tuple[dict[str, Any], ...]


def _variance_of(task: Any) -> float | None:
    try:
        return float(task.make_oracle().variance(1))
    except (ValueError, ArithmeticError):
        return None


def _candidate_row(task: Any, name: str, target: float, delta: float, n: int, bound: str) -> dict[str, Any]:
    probe = dataclasses.replace(task, mechanism=name)
    if bound == "general":
        eps = largest_local_epsilon(target, delta, n, "general", None)
        acc: tuple[str, int | None] | None = ("general", None)
    else:
        eps = largest_epsilon_for_task(probe, target, delta, n)
        acc = _accounting_at(probe, eps)
    variance = _variance_of(dataclasses.replace(probe, epsilon=eps))
    if acc is None or (variance is None and task.mechanism == "auto" and task.kind == "frequency"):
        return {"mechanism": name, "epsilon": eps, "accounting": None, "variance": None,
                "status": f"skipped: {name} cannot be built at epsilon {eps:g}"}
    return {"mechanism": name, "epsilon": eps, "accounting": acc[0], "domain_size": acc[1],
            "variance": variance, "status": ""}


def choose_for_target(task: Any, target: float, delta: float, n: int, bound: str = "tight") -> TargetChoice:
    """``epsilon: "auto"`` under a central target: for each candidate (an ``auto`` frequency task: the
    frozen ``auto`` candidates of its ``schema_version``, ``ldp.oracles.auto_candidates``; otherwise the
    task's own mechanism) the largest local epsilon whose shuffled guarantee at ``n`` meets ``(target,
    delta)`` under that candidate's own bound (:func:`largest_epsilon_for_task`), then its closed-form
    variance at that epsilon; the smallest variance wins (ties: candidate order). ``bound="general"``
    plans every candidate on the bound for any eps0-LDP randomizer instead (what was done before the
    mechanism-specific bounds; for comparison)."""
    import ldp.oracles as _oracles

    if bound not in ("tight", "general"):
        raise ValueError(f"bound must be 'tight' or 'general', got {bound!r}")
    oracle_auto = task.mechanism == "auto" and task.kind == "frequency"
    names = _oracles.auto_candidates(task.schema_version) if oracle_auto else (task.mechanism,)
    rows = [_candidate_row(task, name, target, delta, n, bound) for name in names]
    usable = [r for r in rows if r["accounting"] is not None]
    if not usable:
        raise ValueError("no candidate can be built at the local epsilon the central target allows: "
                         + "; ".join(f"{r['mechanism']}: {r['status']}" for r in rows))
    best = min(usable, key=lambda r: math.inf if r["variance"] is None else r["variance"])
    for r in usable:
        r["status"] = "chosen" if r is best else "higher variance"
    return TargetChoice(best["mechanism"], best["epsilon"], best["accounting"], best["domain_size"],
                        tuple(rows))


def epsilon_for_target(task: Any, settings: AnonymitySettings, target: float, n: int) -> tuple[str, float]:
    """``epsilon: "auto"``: ``(mechanism, epsilon)`` of :func:`choose_for_target` for ``task`` (parsed at a
    placeholder epsilon). An ``auto`` frequency task gets the candidate chosen as its mechanism, so the task
    means the same thing on every release (its ``resolved`` block records the oracle as for any task)."""
    choice = choose_for_target(task, target, settings.delta, n)
    return choice.mechanism, choice.epsilon


def batch_target_reports(
    n: int | None,
    window_size_s: float | None,
    settings: AnonymitySettings,
    target: CentralTarget | None,
    problems: list[str],
) -> int | None:
    """The reports expected per shuffled batch (:func:`ldp.anonymity.batch_reports` of the window's
    ``n``): a user hides only among its own batch, so a central target is planned and checked there; with
    a target, at least ``min_reports`` (else the shuffler would withhold the batches it is planned for)."""
    if n is None:
        return n
    per_batch = batch_reports(n, window_size_s, settings.time_precision_s)
    has_target = target is not None and target.central_epsilon is not None
    if has_target and per_batch != n and per_batch < settings.min_reports:
        problems.append(
            f"anonymity.expected_reports ({n} per {window_size_s:g} s window) gives {per_batch} reports per "
            f"{settings.time_precision_s} s batch, below anonymity.min_reports ({settings.min_reports}): the "
            "shuffler would withhold the batches the target is planned for"
        )
    return per_batch


def check_shuffled_task(task: Any, n: int | None, problems: list[str]) -> None:
    """What a shuffled task must not do (its reports would identify a sender, or rounding would move them
    between windows), and its epsilon against the central target."""
    settings = task.anonymity
    if settings is None or not settings.shuffled:
        return
    problems.extend(window_problems(settings, task.window.size_s, task.window.period_s))
    if task.requires_client_ids:
        problems.append(
            "anonymity: budget.client_ids makes every report carry the client's pseudonymous id, which "
            "identifies its sender and which the shuffler removes: a shuffled task cannot have a "
            "server-enforced per-client budget (set budget.client_ids false: the clients enforce it)"
        )
    if task.is_memoized:
        problems.append(
            f"anonymity: mechanism {task.mechanism!r} is memoized: its reports are linkable across windows "
            "(memo-olh and loloha send the user's hash seed in every report, the others repeat the memoized "
            "response), so shuffling hides no sender and no amplification bound covers them: use a fresh "
            "mechanism"
        )
    target = None if task.central_target is None else task.central_target.central_epsilon
    if target is None or n is None or problems:
        return
    accounting, k = shuffle_accounting(task)
    if not meets_target(task.epsilon, target, settings.delta, n, accounting, k):
        best = largest_epsilon_for_task(task, target, settings.delta, n)
        problems.append(
            f"epsilon {task.epsilon:g} does not meet anonymity.central_epsilon {target:g} (delta "
            f"{settings.delta:g}) at {n} reports per shuffled batch ({accounting} bound): the largest local "
            f'epsilon that does is {best:g} (or write "epsilon": "auto")'
        )
