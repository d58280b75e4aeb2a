"""Shuffled reports in visible groups: one bound per group, the batch's figure the largest.

A heavy-hitters report is ``(level, seed, y)`` (:mod:`ldp.heavy_hitters.pem`): the level and the public
seed do not depend on the value, and ``y`` is randomized response over the level's ``g`` buckets (or
GRR over a first level's prefixes). A :class:`~ldp.shuffle.randomizers.LevelledRandomizer` names each
level's randomizer; this module accounts a batch of them:

* **Per level.** Condition on which reports are at which level (independent of every value, so the
  condition costs nothing and holds whatever the adversary knows of it). The target's level ``j`` is then
  known, its report is one of the batch's ``n_j`` reports at level ``j``, and the reports at the other
  levels have the same law in both neighbouring worlds (they are independent of the target's value):
  the view is the level-``j`` multiset times an identical factor, whose hockey-stick divergence is the
  level-``j`` multiset's. That is ``n_j`` shuffled reports of the level's randomizer, accounted by
  :func:`ldp.shuffle.central_epsilon_report` at ``n_j`` (its ``(p, beta, q)``: OLH with ``g`` buckets for a
  seeded hash, GRR on ``k`` prefixes).
* **The batch.** The target may be at any level, so the batch's ``(eps, delta)`` is the largest level
  figure at ``delta``, from the counts the shuffler really batched (``group_counts``: a signed batch lists
  its reports per group, ``ldp.shuffle.provenance``); a plan gives each level the count its share of a
  batch reaches but with probability about 3e-5, the binomial mean less 4 sd
  (:meth:`~ldp.shuffle.randomizers.LevelledRandomizer.planned_counts`). The smallest level binds (the
  verification level, 0.6 of a search level's share by default).
* **Its curve** (:func:`levelled_delta_curve`) is the largest of the levels' curves, so the inverse
  (:func:`levelled_local_epsilon`) asks every level to meet the target at its own count.
* **Windows** (:func:`levelled_composition`): a user's level may differ from window to window. When every
  level has the same randomizer, the level with the fewest reports dominates the others (its pair's
  curve falls with ``n``) and its pair is composed; otherwise basic composition of each window's largest
  level figure at ``delta / W``.

Beam-free (numpy / scipy through the accountant).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp.shuffle.randomizers import LevelAccounting, LevelledRandomizer

__all__ = [
    "accounted_per_group",
    "level_counts",
    "central_epsilon_levels",
    "levelled_report",
    "levelled_delta_curve",
    "levelled_local_epsilon",
    "levelled_composition",
]


def accounted_per_group(task: Any) -> bool:
    """Whether a task's shuffled reports are accounted per group (its randomizer is levelled), so the
    shuffler lists each batch's reports per group and a claim needs them."""
    from ldp.shuffle.accountant import accounting_for_task

    try:
        return isinstance(accounting_for_task(task)[0], LevelledRandomizer)
    except (ValueError, ArithmeticError):
        return False


def level_counts(randomizer: LevelledRandomizer, eps0: float, n: int,
                 group_counts: Mapping[int, int] | Sequence[int] | None = None) -> dict[int, int]:
    """The reports per level of a batch: ``group_counts`` (a mapping group -> reports, or a list indexed by
    group) as the shuffler batched them, else the plan's split of ``n``. Groups without reports are left
    out. Raises ``ValueError`` for a group the randomizer does not have or a negative count."""
    levels = randomizer.levels(eps0)
    if group_counts is None:
        return randomizer.planned_counts(n, eps0)
    items = group_counts.items() if isinstance(group_counts, Mapping) else enumerate(group_counts)
    out: dict[int, int] = {}
    for g, c in items:
        if isinstance(c, bool) or int(c) != c or c < 0:
            raise ValueError(f"group {g}: a report count must be an integer >= 0, got {c!r}")
        if not 0 <= int(g) < len(levels):
            raise ValueError(f"group {g} is not a level of {randomizer} ({len(levels)} levels)")
        if c:
            out[int(g)] = out.get(int(g), 0) + int(c)
    if not out:
        raise ValueError("the batch has no reports at any level")
    return out


def central_epsilon_levels(eps0: float, counts: Mapping[int, int], delta: float,
                           randomizer: LevelledRandomizer) -> list[dict[str, Any]]:
    """Each level's figure: ``level``, ``label``, ``mechanism``, ``domain_size``, ``n`` (its reports),
    ``central_epsilon`` and ``method`` (:func:`ldp.shuffle.central_epsilon_report` at ``n``)."""
    from ldp.shuffle.accountant import central_epsilon_report

    levels = randomizer.levels(eps0)
    rows = []
    for j in sorted(counts):
        lv = levels[j]
        rep = central_epsilon_report(eps0, counts[j], delta, lv.mechanism, lv.domain_size)
        rows.append({"level": j, "label": lv.label, "mechanism": lv.mechanism, "domain_size": lv.domain_size,
                     "n": int(counts[j]), "central_epsilon": float(rep.epsilon), "method": rep.method})
    return rows


def levelled_report(eps0: float, n: int, delta: float, randomizer: LevelledRandomizer,
                    group_counts: Mapping[int, int] | Sequence[int] | None = None) -> tuple[float, str]:
    """The batch's figure, the largest level's, and a method naming the binding level and every level's
    figure (``n`` the batch's reports; ``group_counts`` as :func:`level_counts`)."""
    counts = level_counts(randomizer, eps0, n, group_counts)
    rows = central_epsilon_levels(eps0, counts, delta, randomizer)
    worst = max(rows, key=lambda r: r["central_epsilon"])
    split = "reports per level as batched" if group_counts is not None else "planned counts: mean less 4 sd"
    listed = "; ".join(f"{r['level']}: {r['central_epsilon']:.5g} at n = {r['n']}" for r in rows)
    return worst["central_epsilon"], (
        f"per_level (the largest of {len(rows)} level(s), {split}; {listed}): {worst['label']} binds, "
        f"{worst['method']}")


def levelled_delta_curve(eps: Sequence[float] | np.ndarray, eps0: float, n: int,
                         randomizer: LevelledRandomizer,
                         group_counts: Mapping[int, int] | Sequence[int] | None = None) -> np.ndarray:
    """``delta(eps)``: the largest of the levels' curves (``ldp.shuffle.delta_curve`` at each level's
    count)."""
    from ldp.shuffle.accountant import delta_curve

    levels = randomizer.levels(eps0)
    counts = level_counts(randomizer, eps0, n, group_counts)
    grid = np.asarray(eps, dtype=float)
    curves = [delta_curve(grid, eps0, c, levels[j].mechanism, levels[j].domain_size)
              for j, c in counts.items()]
    return np.max(curves, axis=0)


def _level_meets(eps0: float, target: float, delta: float, n: int, lv: LevelAccounting) -> bool:
    from ldp.shuffle.accountant import central_epsilon_fmt_closed_form, delta_curve

    if central_epsilon_fmt_closed_form(eps0, n, delta) <= target:
        return True
    return float(delta_curve([target], eps0, n, lv.mechanism, lv.domain_size)[0]) <= delta


def levelled_local_epsilon(target: float, delta: float, n: int, randomizer: LevelledRandomizer,
                           eps0_max: float = 30.0) -> float:
    """The largest ``eps0`` (bisection, from below) at which every level, rebuilt at ``eps0`` and given its
    planned share of ``n``, meets ``(target, delta)``; at least ``target``. A local epsilon the task cannot
    be built at (``ValueError``) does not meet it."""
    from ldp.shuffle.accountant import _largest_meeting

    def meets(eps0: float) -> bool:
        if eps0 <= target:
            return True
        try:
            levels = randomizer.levels(eps0)
            counts = randomizer.planned_counts(n, eps0)
        except (ValueError, ArithmeticError):
            return False
        return all(_level_meets(eps0, target, delta, counts[j], lv) for j, lv in enumerate(levels))

    return _largest_meeting(meets, float(target), float(eps0_max))


def levelled_composition(eps0: float, ns: Sequence[int], delta: float,
                         randomizer: LevelledRandomizer) -> dict[str, Any]:
    """:func:`ldp.shuffle.compose_windows` for a levelled randomizer (called by it, after its checks), ``ns``
    the batch reports per window (split by the levels' shares): one randomizer for every level -> its
    composition at each window's smallest level count; otherwise basic composition of each window's
    largest level figure at ``delta / W`` (``tight`` equals ``basic`` then)."""
    from ldp.shuffle.accountant import compose_windows

    levels = randomizer.levels(eps0)
    kinds = {(lv.mechanism, lv.domain_size) for lv in levels}
    smallest = [min(randomizer.planned_counts(int(x), eps0).values()) for x in ns]
    if len(kinds) == 1:
        ((mech, k),) = kinds
        out = compose_windows(eps0, smallest, delta, mechanism=mech, domain_size=k, min_reports=1)
        out["method"] = f"per_level: every level is {mech} {k}; the smallest level count binds"
    else:
        w = len(ns)
        per_window = [levelled_report(eps0, int(x), delta / w, randomizer)[0] for x in ns]
        basic = float(sum(per_window))
        out = {"windows": w, "delta": delta, "eps0": eps0, "reports": list(smallest),
               "per_window": per_window, "basic": basic, "tight": basic, "local_basic": w * eps0,
               "pairs": ["per_level_basic"] * w,
               "method": "per_level: levels of different randomizers, basic composition of each window's "
               "largest level figure"}
    out["mechanism"] = str(randomizer)
    if not math.isfinite(out["tight"]):
        raise ValueError("no finite composed figure")
    return out
