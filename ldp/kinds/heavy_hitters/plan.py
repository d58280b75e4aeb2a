"""The heavy_hitters kind's plan (:mod:`ldp.plan`): each level's reports, the published estimates' std,
the smallest frequency found, and a window's memory.

Level ``j`` holds ``users * w_j`` reports (the core's level weights). A published estimate comes from the
verification level's ``n_v`` reports: OLH's variance at frequency ``f``,
``[f p (1 - p) + (1 - f) q (1 - q)] / (n_v (p - q)^2)`` plus the sampling of the level's users
(:func:`ldp.heavy_hitters.search.level_estimates`). A string is found when it survives every search level
and passes the rule: a search level keeping ``C`` of the ``S`` candidates it scores cuts near
``z_j = Phi^-1(1 - C / S)`` null standard deviations (its sketch's OLH noise, without the bucket's other
values), the rule at the smallest frequency it flags among the ``C`` tested
(:func:`ldp.plan.smallest_flagged`).
The figures ignore the other values sharing a hashed bucket (``docs/heavy_hitters.md``), so they are a
lower bound on the frequency needed.

In ``trie`` mode every user of a window reports at that window's level: level ``j`` holds all ``users``
of its window (no sampling term: the estimates are frequencies among them), and a round, from level 0 to
the published heavy hitters, takes one window per level (``trie``: the schedule, the users per level and
the windows per round).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from ldp.heavy_hitters.sketch import walsh_dtype
from ldp.heavy_hitters.strings import total_bits
from ldp.plan import POWER, error_entry, smallest_flagged

__all__ = ["predict"]


def _noise(lv: Any, n: int) -> float:
    """The null standard deviation of one estimate from ``n`` reports of level ``lv``."""
    return math.sqrt(lv.q * (1 - lv.q) / (max(n, 1) * (lv.p - lv.q) ** 2))


def _search_cut(pem: Any, reports: list[int]) -> float:
    """The largest frequency a search level's cut asks for (``z_j`` null sd at its reports)."""
    need = 0.0
    byte_bits = 8 * pem.max_length
    for lv, n in zip(pem.levels[:-1], reports):
        scored = 2 ** min(lv.bits, byte_bits) if lv.index == 0 else pem.candidates * 2 ** (
            min(lv.bits, byte_bits) - lv.parent_bits)
        if lv.bits == total_bits(pem.max_length):
            scored *= 2  # the lengths a string's trailing zero bytes allow
        if scored > pem.candidates:
            z = NormalDist().inv_cdf(1.0 - pem.candidates / scored)
            need = max(need, z * _noise(lv, n))
    return need


def predict(task: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan of a heavy_hitters task (module docstring; :func:`ldp.plan.plan_task` adds the rest)."""
    pem = task.make_mechanism()
    trie = getattr(task, "mode", "one_window") == "trie"
    if trie:  # every user of a window at its one level
        reports = [max(int(users), 1)] * len(pem.levels)
    else:
        reports = [max(int(users * w), 1) for w in pem.weights]
    verify, n_v = pem.levels[-1], reports[-1]
    den = n_v * (verify.p - verify.q) ** 2
    base = verify.q * (1 - verify.q) / den
    # f (1 - f) (n - n_v) / ((n - 1) n_v), to first order; none in trie mode (n = n_v)
    sampling = 0.0 if trie or users <= 1 else (users - n_v) / ((users - 1) * n_v)
    slope = (verify.p * (1 - verify.p) - verify.q * (1 - verify.q)) / den + sampling
    std0, std1 = math.sqrt(base), math.sqrt(base + max(slope, 0.0) * 0.01)
    errors = [error_entry("frequency of a published string (f = 0)", std0, "fraction of users",
                          std_f_1pct=std1, reports_per_level=reports,
                          note="the verification level's exact OLH estimate")]
    cut = _search_cut(pem, reports[:-1])
    zp = NormalDist().inv_cdf(POWER)

    def detection(rule: str) -> dict[str, Any]:
        published = smallest_flagged(base, slope, pem.candidates, rule, pem.alpha or 0.05,
                                     null_law=(n_v, verify.p, verify.q))  # the exact test it publishes by
        sd = max(_noise(lv, n) for lv, n in zip(pem.levels[:-1], reports[:-1]))
        return {**published, "frequency_kept_by_every_search_level_half_the_time": cut,
                f"frequency_kept_by_every_search_level_{round(100 * POWER)}pct": cut + zp * sd,
                "candidates": pem.candidates, "levels": [lv.bits for lv in pem.levels]}

    dense = sum(lv.sketch.rows * lv.sketch.m * walsh_dtype(n, lv.g).itemsize
                for lv, n in zip(pem.levels, reports) if lv.sketch is not None)
    kept = sum(n for lv, n in zip(pem.levels, reports) if lv.sketch is None) * 10  # seed and y per report
    biggest = max((lv.sketch.rows * lv.sketch.m for lv in pem.levels if lv.sketch is not None), default=0)
    out: dict[str, Any] = {
        "mechanism": pem.name,
        "mechanism_params": {"search": pem.search, "candidates": pem.candidates, "rule": pem.rule,
                             "levels": [lv.bits for lv in pem.levels],
                             "weights": np.round(pem.weights, 4).tolist()},
        "eps0": float(pem.epsilon),
        "errors": errors,
        "detection": detection,
        "cost": {"accumulator_bytes": int(dense + kept), "cost_key": "pem",
                 "values": pem.candidates * len(pem.levels), "extra_bytes": 16 * biggest},
    }
    if task.shuffled:
        out["central_epsilon_per_level"] = _central_per_level(task, users)
    if trie:
        out["mechanism_params"]["mode"] = "trie"
        out["trie"] = _trie_plan(pem, int(users), int(windows))
    return out


def _central_per_level(task: Any, users: int) -> list[dict[str, Any]]:
    """A shuffled task's central epsilon per level at one batch's planned split (ldp.shuffle.levels; the
    plan's privacy section gives the largest)."""
    from ldp.anonymity import batch_reports, shuffle_accounting
    from ldp.shuffle.levels import central_epsilon_levels

    settings = task.anonymity
    n = batch_reports(int(users), task.window.size_s, settings.time_precision_s)
    accounting, _ = shuffle_accounting(task)
    counts = accounting.planned_counts(n, float(task.epsilon))
    return central_epsilon_levels(float(task.epsilon), counts, settings.delta, accounting)


def _trie_plan(pem: Any, users: int, windows: int) -> dict[str, Any]:
    """The trie mode's schedule: per level its bits and the users of its one window; the windows a round
    takes (one per level) and the rounds ``windows`` windows complete."""
    per_round = len(pem.levels)
    return {
        "windows_per_round": per_round,
        "rounds": windows // per_round,
        "levels": [{"level": lv.index, "bits": lv.bits, "verify": lv.verify, "users": users}
                   for lv in pem.levels],
        "note": "each window's users all report at the level the previous window published; the heavy "
                "hitters are published once a round, by its verification window",
    }
