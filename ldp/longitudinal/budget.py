"""Per-user privacy budgets of repeated collection: the policy a task declares and the client's ledger.

A collection that runs window after window asks the same users again and again. The **budget policy**
(:class:`BudgetPolicy`) is the part of a task that says how much each user may spend:

* ``epsilon_per_report``: the privacy loss of one report (for a fresh mechanism its epsilon; for a memoized
  one its one-report figure ``e_1``, see :mod:`ldp.longitudinal.memo`);
* ``reports_per_period`` and ``period_s``: at most that many reports per user in each period of
  ``period_s`` seconds. Periods are fixed and aligned to the Unix epoch: the period of a report made at
  time ``t`` (seconds since the epoch, UTC) is ``floor(t / period_s)``; ``period_s = 86400`` is the UTC day.
  The aggregator counts per pseudonymous client id with the same rule (:meth:`BudgetPolicy.period_index`);
* ``total_epsilon``: a cap on the privacy loss spent over the policy's whole lifetime (the task's life);
* ``composition``: the rule that turns reports into spent epsilon (:data:`COMPOSITION_RULES`):

  - ``"basic"``: every report costs ``epsilon_per_report``; ``k`` reports spend ``k * epsilon_per_report``.
    Valid for any mechanism and any change of the user's values.
  - ``"memoized"``: every *new* memoized permanent response costs ``epsilon_per_key`` (the mechanism's
    ``e_inf``, given to the ledger by the mechanism); further reports derived from an existing permanent
    response cost nothing more. A user who holds one value forever spends ``e_inf`` once. This is the
    accounting of RAPPOR and LOLOHA; it protects the *values* a user held, with the times at which the
    memoization key changed treated as public (``docs/longitudinal.md``, "What changing values cost"):
    the pattern of changes is protected only by the instantaneous randomization of each report.
  - ``"pld"``: like ``"basic"`` but the spent figure is the tight epsilon at ``delta`` of ``k`` composed
    reports, from the privacy-loss-distribution accountant of ``dp-accounting``
    (:mod:`ldp.longitudinal.accounting`); the ledger then enforces an ``(epsilon, delta)`` cap.
* ``delta``: the delta of the tight figures (``"pld"`` enforcement and every tight figure reported by
  :func:`ldp.longitudinal.accounting.budget_summary`); default ``1e-9``.
* ``client_ids``: whether reports carry the client's pseudonymous id of the task
  (:meth:`ldp.longitudinal.client.Client.client_id`) so that the aggregator can count reports per client and
  period and dead-letter the excess (needs ``reports_per_period``); default false.

At least one limit (``reports_per_period`` or ``total_epsilon``) must be set: a policy without one
bounds nothing. :func:`parse_budget` reads the JSON block of a task and lists every problem at once.

The **ledger** (:class:`BudgetLedger`) runs on the client, in front of the encoder: a report is produced only
after :meth:`BudgetLedger.authorize` accepted it, and a refused report raises :class:`BudgetExceeded`
naming the limit, with no report produced. The aggregator can only count what it sees (reports per client
id and period, dead-lettering the excess as ``over_budget``): that is a defence against misconfigured
clients, not a privacy guarantee; the guarantee is the client's refusal here.

JSON form of the policy (the ``"budget"`` block of a task; keys not listed are an error)::

    "budget": {
      "epsilon_per_report": 0.5,      # required, > 0
      "reports_per_period": 24,       # optional integer >= 1 (with period_s)
      "period_s": 86400,              # optional seconds > 0 (with reports_per_period)
      "total_epsilon": 30.0,          # optional cap over the policy's lifetime, >= epsilon_per_report
      "composition": "basic",         # optional: "basic" (default), "memoized" or "pld"
      "delta": 1e-9,                  # optional, in (0, 1e-3]; default 1e-9
      "client_ids": false             # optional: reports carry a per-task pseudonymous client id
    }
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "BudgetPolicy",
    "BudgetExceeded",
    "BudgetLedger",
    "LedgerState",
    "Charge",
    "parse_budget",
    "COMPOSITION_RULES",
    "DEFAULT_DELTA",
    "MAX_DELTA",
    "BUDGET_KEYS",
]

#: the composition rules a policy may name (see the module docstring)
COMPOSITION_RULES: tuple[str, ...] = ("basic", "memoized", "pld")
#: delta of the tight figures when a policy names none
DEFAULT_DELTA = 1e-9
#: largest delta a policy may state (a delta is a probability of an unbounded loss: keep it tiny)
MAX_DELTA = 1e-3
#: largest epsilon a policy may name anywhere (as ``ldp.oracles.MAX_EPSILON``)
_MAX_EPS = 100.0
#: largest total cap (a lifetime budget beyond this bounds nothing meaningful)
_MAX_TOTAL = 1e6
#: relative slack when comparing spent epsilon with the cap (float sums of equal charges)
_CAP_SLACK = 1e-12
#: the keys of the JSON block
BUDGET_KEYS: tuple[str, ...] = (
    "epsilon_per_report",
    "reports_per_period",
    "period_s",
    "total_epsilon",
    "composition",
    "delta",
    "client_ids",
)


class BudgetExceeded(RuntimeError):
    """A report refused by the client's budget; no report was produced.

    Attributes:
        limit: the limit that refused it: ``"reports_per_period"`` or ``"total_epsilon"``.
        spent: epsilon spent before the refused report.
        requested: epsilon the refused report would have added.
    """

    def __init__(self, message: str, *, limit: str, spent: float, requested: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.spent = spent
        self.requested = requested


@dataclasses.dataclass(frozen=True)
class BudgetPolicy:
    """A task's per-user budget (see the module docstring for every field). Build with :func:`parse_budget`
    from JSON, or directly (the constructor runs the same checks and raises ``ValueError``)."""

    epsilon_per_report: float
    reports_per_period: int | None = None
    period_s: float | None = None
    total_epsilon: float | None = None
    composition: str = "basic"
    delta: float = DEFAULT_DELTA
    client_ids: bool = False

    def __post_init__(self) -> None:
        problems = _problems(dataclasses.asdict(self))
        if problems:
            raise ValueError("budget: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """The JSON block (every key, defaults included)."""
        return dataclasses.asdict(self)

    def period_index(self, t_s: float) -> int | None:
        """The period of a report made at ``t_s`` seconds since the epoch: ``floor(t_s / period_s)``;
        None when the policy has no periods."""
        if self.period_s is None:
            return None
        if not math.isfinite(t_s):
            raise ValueError(f"report time must be a finite number of seconds, got {t_s!r}")
        return math.floor(t_s / self.period_s)

    def max_reports(self) -> int | None:
        """The largest number of reports the lifetime cap allows under ``basic`` composition (None: no
        cap). Under ``memoized`` the cap bounds new permanent responses instead, under ``pld`` the tight
        figure (see :class:`BudgetLedger`)."""
        if self.total_epsilon is None:
            return None
        return int(math.floor(self.total_epsilon / self.epsilon_per_report * (1 + _CAP_SLACK)))


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def _is_int(x: object) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, float) and math.isfinite(x) and x == int(x)


def _problems(raw: Mapping[str, Any]) -> list[str]:
    """Every problem of a budget block (empty when it is valid)."""
    out: list[str] = []
    for k in raw:
        if k not in BUDGET_KEYS:
            out.append(f"unknown key {k!r} (known: {', '.join(BUDGET_KEYS)})")
    eps = raw.get("epsilon_per_report")
    if eps is None:
        out.append("epsilon_per_report is required")
    elif not _is_num(eps) or not 0 < float(eps) <= _MAX_EPS:
        out.append(f"epsilon_per_report must be a number in (0, {_MAX_EPS:g}], got {eps!r}")
        eps = None
    rpp, per = raw.get("reports_per_period"), raw.get("period_s")
    if rpp is not None and not (_is_int(rpp) and 1 <= int(rpp) <= 1 << 40):
        out.append(f"reports_per_period must be an integer >= 1, got {rpp!r}")
    if per is not None and not (_is_num(per) and float(per) > 0):
        out.append(f"period_s must be a positive number of seconds, got {per!r}")
    if (rpp is None) != (per is None):
        out.append("reports_per_period and period_s go together: give both or neither")
    total = raw.get("total_epsilon")
    if total is not None:
        if not _is_num(total) or not 0 < float(total) <= _MAX_TOTAL:
            out.append(f"total_epsilon must be a number in (0, {_MAX_TOTAL:g}], got {total!r}")
        elif eps is not None and float(total) < float(eps) * (1 - _CAP_SLACK):
            out.append(f"total_epsilon ({total}) is below epsilon_per_report ({eps}): "
                       "no report could be sent")
    if rpp is None and per is None and total is None:
        out.append("a budget needs at least one limit: reports_per_period with period_s, or total_epsilon")
    comp = raw.get("composition", "basic")
    if comp not in COMPOSITION_RULES:
        out.append(f"composition must be one of {', '.join(COMPOSITION_RULES)}, got {comp!r}")
    delta = raw.get("delta", DEFAULT_DELTA)
    if not _is_num(delta) or not 0 < float(delta) <= MAX_DELTA:
        out.append(f"delta must be a number in (0, {MAX_DELTA:g}], got {delta!r}")
    ids = raw.get("client_ids", False)
    if not isinstance(ids, bool):
        out.append(f"client_ids must be true or false, got {ids!r}")
    elif ids and rpp is None:
        out.append("client_ids: true needs reports_per_period (the aggregator counts reports per client "
                   "and period)")
    return out


def parse_budget(raw: Mapping[str, Any]) -> BudgetPolicy:
    """The :class:`BudgetPolicy` of a task's ``"budget"`` JSON block.

    Raises:
        ValueError: naming every problem of the block at once (``"budget: a; b; c"``).
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"budget: must be a JSON object, got {type(raw).__name__}")
    problems = _problems(raw)
    if problems:
        raise ValueError("budget: " + "; ".join(problems))
    rpp, per, total = raw.get("reports_per_period"), raw.get("period_s"), raw.get("total_epsilon")
    return BudgetPolicy(
        epsilon_per_report=float(raw["epsilon_per_report"]),
        reports_per_period=None if rpp is None else int(rpp),
        period_s=None if per is None else float(per),
        total_epsilon=None if total is None else float(total),
        composition=str(raw.get("composition", "basic")),
        delta=float(raw.get("delta", DEFAULT_DELTA)),
        client_ids=bool(raw.get("client_ids", False)),
    )


# ------------------------------------------------------------------------------------------------
# Client-side ledger
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class LedgerState:
    """What the ledger remembers between reports (persisted in the client's state file).

    Attributes:
        reports: reports made over the policy's lifetime.
        period: index of the period of the last report (None before the first, or without periods).
        period_reports: reports made in ``period``.
        keys: the memoization keys already charged (``"memoized"`` composition), as opaque tags
            (the client stores keyed digests, never values).
        last_time_s: time of the last report; a report dated before it is refused (a clock moved back
            would otherwise open a fresh period).
    """

    reports: int = 0
    period: int | None = None
    period_reports: int = 0
    keys: list[str] = dataclasses.field(default_factory=list)
    last_time_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reports": self.reports,
            "period": self.period,
            "period_reports": self.period_reports,
            "keys": list(self.keys),
            "last_time_s": self.last_time_s,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LedgerState:
        """Reads :meth:`to_dict` output; ValueError on anything malformed."""
        if not isinstance(raw, Mapping):
            raise ValueError("ledger state must be an object")
        known = {"reports", "period", "period_reports", "keys", "last_time_s"}
        extra = set(raw) - known
        if extra:
            raise ValueError(f"ledger state has unknown keys {sorted(extra)}")
        reports, period, pr = raw.get("reports", 0), raw.get("period"), raw.get("period_reports", 0)
        keys, last = raw.get("keys", []), raw.get("last_time_s")
        if not (_is_int(reports) and int(reports) >= 0):
            raise ValueError(f"ledger state: reports must be an integer >= 0, got {reports!r}")
        if period is not None and not _is_int(period):
            raise ValueError(f"ledger state: period must be an integer or null, got {period!r}")
        if not (_is_int(pr) and 0 <= int(pr) <= int(reports)):
            raise ValueError(f"ledger state: period_reports must be an integer in [0, reports], got {pr!r}")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError("ledger state: keys must be a list of strings")
        if last is not None and not _is_num(last):
            raise ValueError(f"ledger state: last_time_s must be a number or null, got {last!r}")
        return cls(int(reports), None if period is None else int(period), int(pr), list(keys),
                   None if last is None else float(last))


@dataclasses.dataclass(frozen=True)
class Charge:
    """An authorized report, not yet committed: the state the ledger moves to when it is.

    Attributes:
        spent_before / spent_after: epsilon spent before and after the report under the policy's rule.
        cost: ``spent_after - spent_before`` (0 for a repeat of a memoized response).
        new_key: whether the report creates a new memoized permanent response.
        state: the ledger state after the report.
    """

    spent_before: float
    spent_after: float
    cost: float
    new_key: bool
    state: LedgerState


class BudgetLedger:
    """Client-side budget enforcement for one task (see the module docstring).

    Usage: ``charge = ledger.authorize(t_s, key)`` (raises :class:`BudgetExceeded`, changing nothing),
    then produce the report, persist ``charge.state`` and call ``ledger.commit(charge)``. The two steps let
    the client write the charged state to disk *before* the report leaves (a crash never un-spends).

    Args:
        policy: the task's policy.
        epsilon_per_key: what one new memoized permanent response costs (the mechanism's ``e_inf``);
            required for ``"memoized"`` composition, ignored otherwise.
        tight_epsilon: ``tight_epsilon(k) -> epsilon at policy.delta of k composed reports``; required for
            ``"pld"`` (normally ``ldp.longitudinal.accounting.tight_epsilon_fn(mechanism, delta)``).
        state: a saved :class:`LedgerState` (default: a fresh one).
    """

    def __init__(
        self,
        policy: BudgetPolicy,
        *,
        epsilon_per_key: float | None = None,
        tight_epsilon: Callable[[int], float] | None = None,
        state: LedgerState | None = None,
    ) -> None:
        if not isinstance(policy, BudgetPolicy):
            raise TypeError(f"policy must be a BudgetPolicy, got {type(policy).__name__}")
        self.policy = policy
        if policy.composition == "memoized":
            if epsilon_per_key is None or not _is_num(epsilon_per_key) or epsilon_per_key <= 0:
                raise ValueError("memoized composition needs epsilon_per_key (the mechanism's e_inf) > 0, "
                                 f"got {epsilon_per_key!r}")
        if policy.composition == "pld" and tight_epsilon is None:
            raise ValueError("pld composition needs tight_epsilon (see ldp.longitudinal.accounting)")
        self.epsilon_per_key = None if epsilon_per_key is None else float(epsilon_per_key)
        self._tight = tight_epsilon
        self.state = LedgerState() if state is None else state

    # -- spent epsilon under the policy's rule ------------------------------------------------------------
    def spent(self, state: LedgerState | None = None) -> float:
        """Epsilon spent in ``state`` (default: the current one) under the policy's composition rule."""
        s = self.state if state is None else state
        rule = self.policy.composition
        if rule == "basic":
            return s.reports * self.policy.epsilon_per_report
        if rule == "memoized":
            assert self.epsilon_per_key is not None
            return len(s.keys) * self.epsilon_per_key
        assert self._tight is not None
        return 0.0 if s.reports == 0 else float(self._tight(s.reports))

    def remaining(self) -> float | None:
        """Epsilon left under the lifetime cap (None without one)."""
        if self.policy.total_epsilon is None:
            return None
        return max(0.0, self.policy.total_epsilon - self.spent())

    # -- authorize / commit --------------------------------------------------------------------------------
    def authorize(self, t_s: float, key: str | None = None) -> Charge:
        """Checks one report made at ``t_s`` (seconds since the epoch) whose memoization key tag is ``key``
        (``"memoized"`` composition; ignored otherwise) against every limit.

        Raises:
            BudgetExceeded: the report would pass ``reports_per_period`` or ``total_epsilon``; nothing
                changed.
            ValueError: a time before the last report's (a clock moved back), or a missing key under
                ``"memoized"``.
        """
        pol, s = self.policy, self.state
        if not _is_num(t_s):
            raise ValueError(f"report time must be a finite number of seconds, got {t_s!r}")
        t_s = float(t_s)
        if s.last_time_s is not None and t_s < s.last_time_s:
            raise ValueError(
                f"report time {t_s} is before the last report's ({s.last_time_s}): the clock moved back; "
                "refusing rather than opening a new budget period"
            )
        new = LedgerState(s.reports + 1, s.period, s.period_reports, list(s.keys), t_s)
        if pol.period_s is not None:
            period = pol.period_index(t_s)
            if period != s.period:
                new.period, new.period_reports = period, 0
            new.period_reports += 1
            assert pol.reports_per_period is not None
            if new.period_reports > pol.reports_per_period:
                start = period * pol.period_s
                raise BudgetExceeded(
                    f"budget limit reports_per_period = {pol.reports_per_period} reached: "
                    f"{s.period_reports} report(s) already made in the current period of {pol.period_s:g} s "
                    f"(period {period}, from t = {start:g} s); the next period starts at t = "
                    f"{start + pol.period_s:g} s; no report produced",
                    limit="reports_per_period", spent=self.spent(), requested=0.0,
                )
        new_key = False
        if pol.composition == "memoized":
            if not key:
                raise ValueError("memoized composition: each report needs its memoization key tag")
            if key not in s.keys:
                new.keys.append(key)
                new_key = True
        before, after = self.spent(s), self.spent(new)
        if pol.total_epsilon is not None and after > pol.total_epsilon * (1 + _CAP_SLACK):
            if pol.composition == "basic":
                what = f"{s.reports} report(s) x {pol.epsilon_per_report:g}"
            elif pol.composition == "memoized":
                what = f"{len(s.keys)} permanent response(s) x {self.epsilon_per_key:g}"
            else:
                what = f"{s.reports} report(s), tight at delta = {pol.delta:g}"
            raise BudgetExceeded(
                f"budget limit total_epsilon = {pol.total_epsilon:g} reached: spent {before:.6g} "
                f"({what}, {pol.composition} composition); this report would bring it to {after:.6g}; "
                "no report produced",
                limit="total_epsilon", spent=before, requested=after - before,
            )
        return Charge(before, after, after - before, new_key, new)

    def commit(self, charge: Charge) -> None:
        """Moves to the state of an authorized charge (call once the charged state is persisted)."""
        self.state = charge.state

    def charge(self, t_s: float, key: str | None = None) -> Charge:
        """``authorize`` then ``commit`` (for callers without persistence, e.g. simulations)."""
        c = self.authorize(t_s, key)
        self.commit(c)
        return c
