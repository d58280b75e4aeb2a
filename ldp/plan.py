"""What a collection will cost and deliver, before it runs (``ldp-beam plan``; ``docs/planning.md``).

:func:`plan_task` takes a parsed task, the users expected per window and the number of windows, and
returns one JSON-able dict:

* ``mechanism`` / ``eps0``: what the task's mechanism resolves to (``auto``, and under a central target
  the local epsilon the task model chose for it) and the epsilon of one report;
* ``errors``: the predicted standard deviation of each published statistic (per value, per query, per
  coordinate, per mean and quantile) and its 95% interval half-width, from the kind's own prediction
  (the ``plan`` piece of its registry entry, ``ldp/kinds/<kind>/plan.py``);
* ``detection`` (frequency): the smallest frequency flagged above 0 under the multiple-comparison rule of
  :mod:`ldp.selection`;
* ``privacy``: the local epsilon, and for a shuffled task the central epsilon of one batch and composed
  over the windows (:mod:`ldp.shuffle`, the same bounds as ``ldp-beam privacy``); a central-DP kind's
  figures from its entry's ``central_privacy``;
* ``cost``: the memory and time of one window on the DirectRunner, from the accumulator's exact size and
  the per-report and per-value costs in :data:`COSTS` (measured by ``python -m bench.plan_costs``).

:func:`with_target` rewrites a task file's JSON for a central target given on the command line. Nothing
here imports Beam, the store, the wire package or the command line.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

import numpy as np

from ldp.selection import ALPHA, DEFAULT_RULE, RULES, rule_text, simultaneous_z

__all__ = [
    "LEVEL",
    "COSTS",
    "PlanError",
    "plan_task",
    "with_target",
    "z95",
    "error_entry",
    "smallest_flagged",
    "window_cost",
    "nbytes",
    "expected_vs_observed",
]

#: Level of every interval half-width in a plan.
LEVEL = 0.95
#: Power at which :func:`smallest_flagged` also states the frequency (besides the 50% point).
POWER = 0.8

#: Measured costs, microseconds unless named otherwise. ``add_us_per_report`` (the aggregator's
#: ``validate`` and ``add`` per report, by mechanism for the frequency oracles at d = 1024, eps = 1, else by
#: kind at its example task; OUE and SUE: ``unary_us_per_report_per_value`` times d, their reports being
#: d bits) and ``finalize_us_per_value`` (one frequency finalize: estimate, Norm-Sub, intervals, per
#: value) are from ``python -m bench.plan_costs --json bench/results/plan_costs.json``, measured on the
#: shared 2-core machine at a load average of 30-40 (other jobs running), so they are upper figures;
#: ``runner_us_per_report`` (the DirectRunner's reading, decoding, batching and combining per report,
#: beyond the aggregator) is ``bench/results/pipeline_n1e6_d1024.json``'s pipeline minus core seconds per
#: report at n = 1e6 (load about 1); ``fixed_s`` a window's fixed cost and ``runner_bytes`` the
#: DirectRunner's working set beyond the accumulators (one process, batches of 8,192 reports) are
#: round figures from the same runs. ``finalize_s_per_window`` replaces the per-value finalize for a
#: mechanism whose finalize is a search of its own: ``pem`` is the heavy-hitters job's 1e6-report window
#: (folding, sketch search, verification; ``docs/heavy_hitters.md``, shared machine), an upper figure for
#: smaller windows.
COSTS: dict[str, Any] = {
    "source": "bench/results/plan_costs.json (python -m bench.plan_costs), "
              "bench/results/pipeline_n1e6_d1024.json (runner overhead)",
    "runner_us_per_report": 1.74,
    "fixed_s": 0.05,
    "runner_bytes": 200 * 2**20,
    "finalize_us_per_value": 10.0,
    "add_us_per_report": {
        "grr": 0.11, "olh": 0.16, "blh": 0.29, "hr": 0.05, "ss": 3.9,
        "range": 0.08, "sparse": 0.25, "numeric": 0.04, "batch_queries": 0.01,
    },
    "add_us_per_report_default": 1.0,
    "unary_us_per_report_per_value": 0.0013,
    "finalize_s_per_window": {"pem": 23.8},
}


class PlanError(ValueError):
    """A plan that cannot be made (one line: what is wrong and what to give instead)."""


def z95() -> float:
    """The two-sided normal quantile of :data:`LEVEL` (1.96)."""
    return NormalDist().inv_cdf(0.5 + LEVEL / 2.0)


def error_entry(statistic: str, std: float, unit: str, **extra: Any) -> dict[str, Any]:
    """One predicted error: the statistic, its std, its 95% half-width (normal) and the unit."""
    out: dict[str, Any] = {"statistic": statistic, "std": float(std), "half_width_95": float(z95() * std),
                           "unit": unit}
    out.update(extra)
    return out


def smallest_flagged(base: float, slope: float, d: int, rule: str = DEFAULT_RULE,
                     alpha: float = ALPHA, *, null_law: tuple[int, float, float] | None = None
                     ) -> dict[str, Any]:
    """The smallest true frequency a value needs to be flagged above 0 over a domain of ``d`` values.

    The estimate of a value of frequency ``f`` is normal with variance ``base + slope f`` (the oracle's
    Eq. 4 at the planned ``n``). Without ``null_law``, Bonferroni flags it when the estimate reaches
    ``z_d std`` with the plug-in std (``z_d`` :func:`ldp.selection.simultaneous_z`), so it is flagged with
    probability 1/2 at the ``f`` solving ``f = z_d sqrt(base + slope f)``, and with probability
    :data:`POWER` at ``f = (z_d + z_power) sqrt(...)``.

    ``null_law = (n, p, q)``: a value's support count among ``n`` reports is Binomial(``n``, ``q``) at
    frequency 0 and has mean ``n (q + f (p - q))``, and the flag is the exact binomial test of the rows'
    ``p_zero`` (:func:`ldp.selection.binomial_p_values`): it fires at the smallest count ``c`` with
    ``2 P[S >= c] <= alpha / d``, so ``f_c = ((c - 1/2) / n - q) / (p - q)``, the frequency whose mean
    count sits at the cut (the median of a binomial is within one of its mean), and with probability
    :data:`POWER` at the ``f`` solving ``f = f_c + z_power sqrt(base + slope f)``.

    Benjamini-Hochberg flags at least what Bonferroni flags (at one true value it is Bonferroni), so the
    figures are upper bounds under ``bh``.
    """
    if rule not in RULES:
        raise PlanError(f"unknown multiple-comparison rule {rule!r}; one of {', '.join(RULES)}")
    z = simultaneous_z(int(d), alpha)
    zp = NormalDist().inv_cdf(POWER)

    def root(c: float) -> float:  # f^2 = c (base + slope f)
        return 0.5 * (c * slope + math.sqrt((c * slope) ** 2 + 4.0 * c * base))

    if null_law is None:
        f_c, f80 = root(z * z), root((z + zp) ** 2)
    else:
        from scipy.stats import binom

        n, p, q = int(null_law[0]), float(null_law[1]), float(null_law[2])
        cut = float(binom.isf(alpha / (2.0 * int(d)), n, q)) + 1.0  # the smallest c: 2 P[S >= c] <= alpha/d
        f_c = ((cut - 0.5) / n - q) / (p - q)
        # f = f_c + zp sqrt(base + slope f): (f - f_c)^2 = zp^2 (base + slope f), the root above f_c
        b = 2.0 * f_c + zp * zp * slope
        f80 = 0.5 * (b + math.sqrt(max(b * b - 4.0 * (f_c * f_c - zp * zp * base), 0.0)))
    return {
        "rule": rule,
        "rule_text": rule_text(rule, int(d), alpha),
        "z": z,
        "test": "exact binomial" if null_law is not None else "normal",
        "frequency_flagged_half_the_time": min(max(f_c, 0.0), 1.0),
        f"frequency_flagged_{round(100 * POWER)}pct": min(f80, 1.0),
        "bound": "exact" if rule == "bonferroni" else "upper bound (BH flags at least what Bonferroni does)",
    }


def nbytes(obj: Any, _depth: int = 0) -> int:
    """Bytes held by an accumulator: numpy arrays' buffers, walked through tuples, lists, dicts and
    attributes (3 levels deep); other objects count 0."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if _depth > 3 or obj is None or isinstance(obj, (int, float, str, bytes, bool)):
        return 0
    if isinstance(obj, Mapping):
        return sum(nbytes(v, _depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v, _depth + 1) for v in obj)
    fields = getattr(obj, "__dict__", None)
    if fields is None:
        slots = getattr(type(obj), "__slots__", ())
        fields = {s: getattr(obj, s, None) for s in slots}
    return sum(nbytes(v, _depth + 1) for v in fields.values())


def window_cost(users: int, accumulator_bytes: int, cost_key: str, values: int,
                extra_bytes: int = 0) -> dict[str, Any]:
    """Memory and time of one window: accumulators plus the finalize working set plus the runner's,
    and ``users`` reports at the runner's and the mechanism's per-report costs plus ``values`` values
    finalized (:data:`COSTS`)."""
    if cost_key in ("oue", "sue"):
        add = COSTS["unary_us_per_report_per_value"] * values
    else:
        add = COSTS["add_us_per_report"].get(cost_key, COSTS["add_us_per_report_default"])
    per_report = COSTS["runner_us_per_report"] + add
    finalize_s = COSTS["finalize_s_per_window"].get(cost_key, COSTS["finalize_us_per_value"] * values * 1e-6)
    seconds = COSTS["fixed_s"] + users * per_report * 1e-6 + finalize_s
    memory = accumulator_bytes + extra_bytes + COSTS["runner_bytes"]
    return {
        "accumulator_bytes": int(accumulator_bytes),
        "memory_bytes": int(memory),
        "seconds": float(seconds),
        "us_per_report": float(per_report),
        "finalize_s": float(finalize_s),
        "runner": "DirectRunner, one process",
        "source": COSTS["source"],
    }


def with_target(obj: Mapping[str, Any], users: int, central_epsilon: float | None,
                delta: float | None) -> dict[str, Any]:
    """A task file's JSON with a central target from the command line: ``anonymity`` shuffled, with
    ``central_epsilon`` (and ``delta``), ``expected_reports`` = ``users`` and ``"epsilon": "auto"`` (the
    task model picks the local epsilon, and ``auto`` the mechanism, for the target). Only ``delta``: the
    task's section with that delta. Neither: the task unchanged. A recorded ``resolved`` block is dropped
    (it records the task's own resolution)."""
    out = copy.deepcopy(dict(obj))
    if central_epsilon is None and delta is None:
        return out
    section = dict(out.get("anonymity") or {})
    if central_epsilon is None and not section.get("shuffled"):
        raise PlanError("--delta applies to a shuffled task (give --central_epsilon for a central target)")
    if delta is not None:
        section["delta"] = delta
    if central_epsilon is not None:
        section.update(shuffled=True, central_epsilon=central_epsilon, expected_reports=int(users))
        out["epsilon"] = "auto"
    out["anonymity"] = section
    out.pop("resolved", None)
    return out


def _privacy(task: Any, kind: Any, users: int, windows: int) -> dict[str, Any]:
    """The plan's privacy section (module docstring)."""
    if not kind.ldp_reports:
        if kind.central_privacy is None:
            return {"model": "central DP", "central_epsilon": None}
        return {"model": "central DP (raw records at a trusted aggregator)",
                **dict(kind.central_privacy(task, windows))}
    out: dict[str, Any] = {"model": "local DP", "local_epsilon": float(task.epsilon),
                           "local_epsilon_composed": float(task.epsilon) * windows,
                           "shuffled": bool(task.shuffled)}
    if not task.shuffled:
        return out
    from ldp.anonymity import batch_reports, shuffle_accounting
    from ldp.shuffle import ShuffleAccountingError, central_epsilon_report, compose_windows

    settings = task.anonymity
    n = batch_reports(int(users), task.window.size_s, settings.time_precision_s)
    accounting, k = shuffle_accounting(task)
    out.update(model="shuffled local DP", delta=settings.delta, batch_reports=n, accounting=accounting)
    if n < settings.min_reports:
        out["central_epsilon_per_batch"] = None
        out["note"] = (f"{n} reports per batch is below anonymity.min_reports ({settings.min_reports}): "
                       "the shuffler withholds such batches")
        return out
    try:
        one = central_epsilon_report(float(task.epsilon), n, settings.delta, accounting, k)
        comp = compose_windows(float(task.epsilon), n, settings.delta, windows=windows, mechanism=accounting,
                               domain_size=k)
    except ShuffleAccountingError as exc:
        out["note"] = str(exc)
        return out
    out.update(central_epsilon_per_batch=float(one.epsilon), method=one.method,
               central_epsilon_composed=float(comp["tight"]),
               central_epsilon_composed_basic=float(comp["basic"]), windows=windows)
    if task.central_target is not None and task.central_target.central_epsilon is not None:
        out["target"] = task.central_target.to_dict()
    return out


def expected_vs_observed(task: Any, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The plan's predicted std beside each result row's observed spread, for a kind whose plan module
    (the module of its entry's ``plan``) defines ``expected_vs_observed(task, rows)`` (frequency: per
    window, pane and group); None for the other kinds."""
    import importlib

    from ldp.kinds import kind_of, resolve_ref

    piece = getattr(kind_of(task), "plan", None)
    if piece is None:
        return None
    module = importlib.import_module(resolve_ref(piece).__module__)
    check = getattr(module, "expected_vs_observed", None)
    return None if check is None else check(task, rows)


def plan_task(task: Any, users: int, windows: int = 1, *, rule: str = DEFAULT_RULE) -> dict[str, Any]:
    """The plan of ``task`` for ``users`` reports per window over ``windows`` windows (module docstring).

    Raises:
        PlanError: a bad number of users or windows, a kind without a ``plan`` piece, or a task its
            kind cannot predict (one line).
    """
    from ldp.kinds import kind_of

    if isinstance(users, bool) or not isinstance(users, (int, np.integer)) or users < 2:
        raise PlanError(f"users must be an integer >= 2, got {users!r}")
    if isinstance(windows, bool) or not isinstance(windows, (int, np.integer)) or windows < 1:
        raise PlanError(f"windows must be an integer >= 1, got {windows!r}")
    kind = kind_of(task)
    predict = getattr(kind, "plan", None)
    if predict is None:
        raise PlanError(f"the {task.kind} kind has no plan piece (ldp.kinds.Kind.plan)")
    try:
        predicted = dict(predict(task, int(users), int(windows)))
    except (ValueError, ArithmeticError) as exc:
        raise PlanError(f"cannot plan task {task.task_id!r}: {exc}") from None
    out: dict[str, Any] = {
        "task_id": task.task_id,
        "kind": task.kind,
        "users": int(users),
        "windows": int(windows),
        "mechanism": task.mechanism,
        "chosen_mechanism": predicted.pop("mechanism"),
        "eps0": predicted.pop("eps0"),
        "level": LEVEL,
        "errors": predicted.pop("errors"),
    }
    detection = predicted.pop("detection", None)
    if detection is not None:
        out["detection"] = detection(rule) if callable(detection) else detection
    out["privacy"] = _privacy(task, kind, int(users), int(windows))
    cost = predicted.pop("cost")
    out["cost"] = window_cost(int(users), **cost)
    out.update(predicted)
    return out
