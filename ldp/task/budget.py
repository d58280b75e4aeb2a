"""The per-user budget of repeated collection: the ``budget`` section's checks and the figures of a task
with a budget (``ldp.longitudinal``)."""

from __future__ import annotations

from collections.abc import Mapping

import ldp.oracles as _oracles
from ldp.longitudinal import memo as _memo
from ldp.longitudinal.budget import BudgetPolicy, parse_budget
from ldp.task.base import Problems, Task
from ldp.task.checks import whole_ms

__all__ = ["check_budget", "budget_summary"]


def check_budget(
    raw: object, oracle: _oracles.FrequencyOracle, problems: Problems
) -> tuple[BudgetPolicy | None, bool]:
    """The ``budget`` block (``ldp.longitudinal.budget.parse_budget`` plus ``client_ids``; see the module
    docstring): every problem listed, the policy checked against the task's oracle."""
    if not isinstance(raw, Mapping):
        problems.append(f"budget must be an object, got {type(raw).__name__}")
        return None, False
    block = dict(raw)
    ids = block.pop("client_ids", False)
    if not isinstance(ids, bool):
        problems.append(f"budget.client_ids must be true or false, got {ids!r}")
        ids = False
    memoized = isinstance(oracle, _memo.MemoizedOracle)
    per_report = float(oracle.epsilon_1 if memoized else oracle.epsilon)
    block.setdefault("epsilon_per_report", per_report)
    block.setdefault("composition", "memoized" if memoized else "basic")
    n = len(problems)
    try:
        policy = parse_budget(block)
    except ValueError as exc:
        text = str(exc).removeprefix("budget: ")
        problems.extend(f"budget: {p}" for p in text.split("; "))
        return None, False
    from ldp.longitudinal.accounting import policy_problems  # dp-accounting: loaded for budgets only

    problems.extend(policy_problems(policy, oracle))
    if ids:
        if policy.period_s is None:
            problems.append(
                "budget.client_ids needs reports_per_period and period_s: the aggregator counts reports per "
                "client and period (a lifetime cap is enforced by the clients only)"
            )
        elif not whole_ms(policy.period_s):
            problems.append(f"budget.period_s must be a whole number of milliseconds, got {policy.period_s}")
    return (policy if len(problems) == n else None), ids


def budget_summary(task: Task, windows: int | None = None) -> dict[str, object] | None:
    """The privacy figures of a task with a budget, for the job's summary, the store and the dashboard
    (None without a budget): ``policy`` (with ``client_ids``), the mechanism's ``guarantees`` (``epsilon``;
    ``epsilon_1`` / ``epsilon_inf`` of a memoized mechanism), and the accountant's basic next to tight
    composition (``ldp.longitudinal.accounting.budget_summary``) after ``per_period`` reports (one full
    budget period: ``reports_per_period`` windows), after ``windows`` reports when given, and at the
    lifetime cap (``lifetime``, when the policy bounds the number of reports)."""
    policy = getattr(task, "budget", None)
    if policy is None:
        return None
    own = getattr(task, "budget_figures", None)  # a kind with its own accounting (numeric: the memo counter)
    if callable(own):
        return own(windows)
    from ldp.longitudinal.accounting import budget_summary as _summary

    oracle = task.make_oracle()
    out: dict[str, object] = {
        "policy": {**policy.to_dict(), "client_ids": bool(getattr(task, "budget_client_ids", False))},
        "enforced_by": "clients and aggregator (per client id and period)"
        if task.requires_client_ids
        else "clients",
    }
    first = None
    for name, k in (
        ("per_period", policy.reports_per_period),
        ("after_windows", windows),
    ):
        if k is not None:
            fig = _summary(policy, oracle, int(k))
            out[name] = fig
            first = first or fig
    life = _summary(policy, oracle, 1)
    allowed = life.get("reports_allowed", {}).get("lifetime")
    if allowed is not None and 0 < int(allowed) <= 1_000_000:
        out["lifetime"] = _summary(policy, oracle, int(allowed))
    out["guarantees"] = (first or life).get("guarantees")
    return out
