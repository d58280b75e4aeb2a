"""Privacy accounting across windows, with Google's ``dp-accounting`` (privacy loss distributions).

A user who reports in ``k`` windows spends, through **fresh** reports of an ``eps``-LDP oracle, at most
``k * eps`` (basic composition, exact for pure epsilon: ``k`` worst-case outputs in a row realize it) and, at
a small ``delta``, the tight figure of the ``k``-fold composition of the report's privacy loss distribution
(PLD). The PLD of one report is the distribution of ``ln(P[Y = y | v] / P[Y = y | v'])`` for the worst pair
of values; every oracle here is symmetric (all pairs of values look alike), so one pair is the dominating
pair, and ``dp_accounting.pld`` composes it exactly up to its pessimistic discretization. The interval is
:func:`interval_for` the elementary piece composed (one report, one permanent response, one RAPPOR bit):
``max(1e-4, 1e-3 * its worst-case loss)``, so a ``k``-fold figure is an upper bound within ``k + 1``
intervals of the exact one, about 0.1% of the basic figure ``k * eps`` (``(k + 1) 1e-4`` for pieces with
``eps <= 0.1``); the support stays at about 2,000 points per piece, so 30 windows at eps = 4 compose in
well under a second.

Per-report PLDs (:func:`report_pld`):

* GRR on ``[d]``: ``from_randomized_response(noise = d / (e^eps + d - 1), d)`` (keep w.p. ``1 - noise``, else
  uniform on ``[d]``: the true value w.p. ``e^eps / (e^eps + d - 1)``).
* OLH / BLH (``g`` buckets, seed public): the two values collide w.p. ``1/g`` (loss 0); otherwise the report
  is GRR on ``[g]``. Built exactly with ``from_two_probability_mass_functions`` over the outcomes
  {collide, bucket of v, bucket of v', another bucket}.
* OUE / SUE (unary): the two values differ in two bits: the pair of Bernoulli products
  ``Bern(p) x Bern(q)`` against ``Bern(q) x Bern(p)``.
* any other ``eps``-LDP oracle: binary randomized response at ``eps``, which dominates every ``eps``-LDP
  mechanism (``from_privacy_parameters(eps, 0)``).

**Memoized** reports (:mod:`ldp.longitudinal.memo`) need two relations, because memoization protects values
and patterns differently:

* *constant value* (and, more generally, two histories with the same pattern of memoization keys): the
  reports are a post-processing of the permanent responses, one per distinct key. ``m`` keys compose ``m``
  permanent PLDs (GRR on ``[d]`` or ``[g]`` at ``epsilon_inf``, or the unary pair at ``epsilon_inf``); one key
  (a constant value, any number of reports) costs exactly ``epsilon_inf``: no growth with the windows.
* *any two histories* (the pattern of changes included): given the earlier reports, the next one is a
  mixture of instantaneous randomizations of the memos, so it is dominated (joint convexity of the
  hockey-stick divergence) by the instantaneous stage's worst pair: GRR at ``epsilon_instantaneous`` on
  ``[d]`` or ``[g]``, or for unary memos ``d`` independent bit flips (two memos may differ in every bit).
  ``k`` reports compose ``k`` of those; without an instantaneous stage the figure is infinite.

:func:`budget_summary` puts both next to the basic figures for a policy and a number of windows; the pipeline
and the dashboard show it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from dp_accounting.pld import common as _pld_common
from dp_accounting.pld import privacy_loss_distribution as _pld

from ldp.longitudinal.budget import DEFAULT_DELTA, BudgetPolicy
from ldp.longitudinal.memo import RAPPOR, MemoizedOracle, _MemoLocalHashing
from ldp.oracles import BLH, GRR, OLH, OUE, SUE, FrequencyOracle, _UnaryEncoding

__all__ = [
    "DISCRETIZATION",
    "RELATIVE_DISCRETIZATION",
    "interval_for",
    "report_pld",
    "permanent_pld",
    "instantaneous_pld",
    "composed_epsilon",
    "grr_pld",
    "binary_rr_pld",
    "tight_epsilon_fn",
    "fresh_epsilon",
    "memoized_epsilon",
    "values_epsilon",
    "any_history_epsilon",
    "budget_summary",
    "policy_problems",
    "pld_reports_allowed",
]

#: smallest discretization interval of the PLDs (pessimistic: the figures are upper bounds)
DISCRETIZATION = 1e-4
#: the interval relative to the worst-case loss of the piece composed (see :func:`interval_for`)
RELATIVE_DISCRETIZATION = 1e-3


def interval_for(epsilon: float) -> float:
    """Discretization interval of a piece whose worst-case loss is ``epsilon``: ``max(1e-4, 1e-3 eps)``;
    the ``k``-fold figure then overshoots the exact one by at most ``k`` intervals, 0.1% of ``k eps``."""
    return max(DISCRETIZATION, RELATIVE_DISCRETIZATION * float(epsilon))
_PLD = Any  # dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution


def grr_pld(epsilon: float, size: int, interval: float = DISCRETIZATION) -> _PLD:
    """PLD of GRR on ``[size]`` at ``epsilon`` (``dp_accounting`` randomized response)."""
    if math.isinf(epsilon):
        raise ValueError("an identity channel (infinite epsilon) has no finite privacy loss distribution")
    noise = size / (math.exp(epsilon) + size - 1)
    return _pld.from_randomized_response(noise, size, value_discretization_interval=interval)


def binary_rr_pld(epsilon: float, interval: float = DISCRETIZATION) -> _PLD:
    """PLD of binary randomized response at ``epsilon``: dominates every ``epsilon``-LDP mechanism."""
    params = _pld_common.DifferentialPrivacyParameters(epsilon, 0.0)
    return _pld.from_privacy_parameters(params, value_discretization_interval=interval)


def _pmf_pld(pmf1: dict[str, float], pmf2: dict[str, float], interval: float) -> _PLD:
    lo = {k: math.log(v) for k, v in pmf2.items() if v > 0}
    up = {k: math.log(v) for k, v in pmf1.items() if v > 0}
    return _pld.from_two_probability_mass_functions(lo, up, value_discretization_interval=interval)


def _local_hashing_pld(p: float, q: float, g: int, interval: float) -> _PLD:
    """``(seed, y)`` with GRR on ``[g]`` (``p`` keep, ``q`` each other bucket) of a universal hash: the two
    values collide w.p. ``1/g``."""
    miss = 1 - 1 / g
    pmf1 = {"collide": 1 / g, "h1": miss * p, "h2": miss * q, "other": miss * (g - 2) * q}
    pmf2 = {"collide": 1 / g, "h1": miss * q, "h2": miss * p, "other": miss * (g - 2) * q}
    return _pmf_pld(pmf1, pmf2, interval)


def _unary_pld(p: float, q: float, interval: float) -> _PLD:
    """Two values' one-hot vectors differ in two bits: ``Bern(p) x Bern(q)`` against ``Bern(q) x Bern(p)``."""
    pmf1 = {"11": p * q, "10": p * (1 - q), "01": (1 - p) * q, "00": (1 - p) * (1 - q)}
    pmf2 = {"11": q * p, "10": q * (1 - p), "01": (1 - q) * p, "00": (1 - q) * (1 - p)}
    return _pmf_pld(pmf1, pmf2, interval)


def report_pld(oracle: FrequencyOracle, interval: float | None = None) -> _PLD:
    """PLD of one fresh report of ``oracle`` for its worst pair of values (module docstring). For a
    memoized oracle: one report from a fresh user (the ``epsilon_1`` distribution). ``interval`` defaults
    to :func:`interval_for` the report's epsilon."""
    memo = isinstance(oracle, MemoizedOracle)
    h = interval_for(oracle.epsilon_1 if memo else oracle.epsilon) if interval is None else interval
    if memo:
        if isinstance(oracle, RAPPOR):
            return _unary_pld(oracle.p, oracle.q, h)
        if isinstance(oracle, _MemoLocalHashing):
            q_other = oracle.perm_q * oracle.inst_p + (1 - oracle.perm_q) * oracle.inst_q
            return _local_hashing_pld(oracle.p, q_other, oracle.g, h)
        return grr_pld(oracle.epsilon_1, oracle.d, h)
    if type(oracle) is GRR:
        return grr_pld(oracle.epsilon, oracle.d, h)
    if type(oracle) in (OLH, BLH):
        return _local_hashing_pld(oracle.p, (1 - oracle.p) / (oracle.g - 1), oracle.g, h)
    if type(oracle) in (OUE, SUE) or isinstance(oracle, _UnaryEncoding):
        return _unary_pld(oracle.p, oracle.q, h)
    return binary_rr_pld(oracle.epsilon, h)


def permanent_pld(oracle: MemoizedOracle, interval: float | None = None) -> _PLD:
    """PLD of one permanent response (the cost of one memoization key), at ``epsilon_inf``."""
    h = interval_for(oracle.epsilon_inf) if interval is None else interval
    if isinstance(oracle, RAPPOR):
        return _unary_pld(oracle.perm_p, oracle.perm_q, h)
    size = oracle.g if isinstance(oracle, _MemoLocalHashing) else oracle.d
    return grr_pld(oracle.epsilon_inf, size, h)


def instantaneous_pld(oracle: MemoizedOracle, interval: float | None = None) -> _PLD | None:
    """PLD dominating one report *given the earlier ones* for any two histories (module docstring); None
    when there is no instantaneous stage (the loss is then unbounded). The elementary piece is the
    instantaneous GRR, or for RAPPOR one bit's flip (``d`` of them per report)."""
    if oracle.inst_p >= 1.0:
        return None
    if isinstance(oracle, RAPPOR):
        bit = math.log(oracle.inst_p / oracle.inst_q)
        return binary_rr_pld(bit, interval_for(bit) if interval is None else interval).self_compose(oracle.d)
    size = oracle.g if isinstance(oracle, _MemoLocalHashing) else oracle.d
    eps = oracle.epsilon_instantaneous
    return grr_pld(eps, size, interval_for(eps) if interval is None else interval)


def composed_epsilon(pld: _PLD, k: int, delta: float) -> float:
    """Epsilon at ``delta`` of the ``k``-fold composition of ``pld`` (0 for ``k = 0``)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k == 0:
        return 0.0
    return float((pld if k == 1 else pld.self_compose(int(k))).get_epsilon_for_delta(delta))


def _check_delta(delta: float) -> float:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


def fresh_epsilon(oracle: FrequencyOracle, k: int, delta: float = DEFAULT_DELTA) -> dict[str, float]:
    """``k`` fresh reports: ``{"basic": k * eps, "tight": PLD figure at delta (never above basic)}``."""
    delta = _check_delta(delta)
    eps = oracle.epsilon_1 if isinstance(oracle, MemoizedOracle) else oracle.epsilon
    basic = k * eps
    tight = min(basic, composed_epsilon(report_pld(oracle), k, delta))
    return {"basic": basic, "tight": tight}


def values_epsilon(oracle: MemoizedOracle, keys: int, delta: float = DEFAULT_DELTA) -> dict[str, float]:
    """The loss about the values of a memoized user whose reports used ``keys`` distinct memoization keys,
    the change pattern treated as public: ``basic = min(keys, max_memo_keys) * epsilon_inf`` and ``tight``,
    the PLD composition of that many permanent responses at ``delta``. ``keys = 1`` (a constant value)
    gives ``epsilon_inf`` whatever the number of reports."""
    delta = _check_delta(delta)
    if keys < 0:
        raise ValueError(f"keys must be >= 0, got {keys}")
    m = min(int(keys), oracle.max_memo_keys)
    basic = m * oracle.epsilon_inf
    return {"basic": basic, "tight": min(basic, composed_epsilon(permanent_pld(oracle), m, delta))}


def any_history_epsilon(
    oracle: MemoizedOracle, reports: int, delta: float = DEFAULT_DELTA
) -> dict[str, float]:
    """The loss of ``reports`` memoized reports for any two histories (the pattern of changes included):
    ``basic = reports * epsilon_instantaneous`` and ``tight``, the PLD composition of ``reports``
    instantaneous stages at ``delta``; infinite without an instantaneous stage."""
    delta = _check_delta(delta)
    if reports < 0:
        raise ValueError(f"reports must be >= 0, got {reports}")
    if reports == 0:
        return {"basic": 0.0, "tight": 0.0}
    if oracle.inst_p >= 1.0:
        return {"basic": math.inf, "tight": math.inf}
    basic = reports * oracle.epsilon_instantaneous
    inst = instantaneous_pld(oracle)
    assert inst is not None
    return {"basic": basic, "tight": min(basic, composed_epsilon(inst, reports, delta))}


def memoized_epsilon(oracle: MemoizedOracle, reports: int, keys: int = 1,
                     delta: float = DEFAULT_DELTA) -> dict[str, float]:
    """A memoized user after ``reports`` reports that used ``keys`` distinct memoization keys.

    Returns:
        ``basic`` / ``tight``: the loss about the values, change pattern public (:func:`values_epsilon`),
        each capped by the any-history figure, which bounds it too; ``keys = 1`` gives ``epsilon_inf`` for
        any number of reports.
        ``basic_any_history`` / ``tight_any_history``: any two histories, the pattern of changes too
        (:func:`any_history_epsilon`).
    """
    if reports < 0 or (reports == 0 and keys != 0) or (reports > 0 and not 1 <= keys <= reports):
        raise ValueError(f"need 1 <= keys <= reports (or both 0), got keys = {keys}, reports = {reports}")
    vals = values_epsilon(oracle, keys, delta)
    anyh = any_history_epsilon(oracle, reports, delta)
    return {"basic": min(vals["basic"], anyh["basic"]), "tight": min(vals["tight"], anyh["tight"]),
            "basic_any_history": anyh["basic"], "tight_any_history": anyh["tight"]}


def tight_epsilon_fn(oracle: FrequencyOracle, delta: float = DEFAULT_DELTA) -> Callable[[int], float]:
    """``k -> tight epsilon of k fresh reports`` (cached), for a ``"pld"`` :class:`~ldp.longitudinal.budget.
    BudgetLedger`."""
    pld = report_pld(oracle)
    delta = _check_delta(delta)
    eps = oracle.epsilon_1 if isinstance(oracle, MemoizedOracle) else oracle.epsilon

    @functools.lru_cache(maxsize=4096)
    def tight(k: int) -> float:
        return min(k * eps, composed_epsilon(pld, k, delta))

    return tight


def pld_reports_allowed(oracle: FrequencyOracle, total_epsilon: float, delta: float = DEFAULT_DELTA,
                        limit: int = 1 << 20) -> int:
    """The most fresh reports whose tight epsilon at ``delta`` stays within ``total_epsilon`` (binary search
    on the monotone composed figure; at most ``limit``)."""
    fn = tight_epsilon_fn(oracle, delta)
    cap = total_epsilon * (1 + 1e-12)
    if fn(1) > cap:
        return 0
    lo, hi = 1, 2
    while hi < limit and fn(hi) <= cap:
        lo, hi = hi, min(limit, 2 * hi)
    if fn(hi) <= cap:
        return hi
    while hi - lo > 1:  # fn(lo) <= cap < fn(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fn(mid) <= cap else (lo, mid)
    return lo


def policy_problems(policy: BudgetPolicy, oracle: FrequencyOracle) -> list[str]:
    """What is inconsistent between a budget policy and the task's oracle (empty when they agree).

    * fresh oracles: ``epsilon_per_report`` is the oracle's epsilon; composition ``basic`` or ``pld``
      (``memoized`` has nothing to memoize);
    * memoized oracles: ``epsilon_per_report`` is ``epsilon_1``; composition ``memoized`` (per-report rules
      would charge ``epsilon_1``, which does not compose across reports that share a memo: the valid
      per-report charge is ``epsilon_instantaneous``, see the module docstring).
    """
    out: list[str] = []
    # ``memoized``: the numeric memoized counter (``ldp.numeric.memo``) has the same guarantees' attributes
    memo = isinstance(oracle, MemoizedOracle) or bool(getattr(oracle, "memoized", False))
    eps = oracle.epsilon_1 if memo else oracle.epsilon
    what = "the mechanism's one-report epsilon_1" if memo else "the mechanism's epsilon"
    if not math.isclose(policy.epsilon_per_report, eps, rel_tol=1e-9, abs_tol=1e-12):
        out.append(f"budget.epsilon_per_report ({policy.epsilon_per_report:g}) must equal {what} "
                   f"({eps:.12g}) of {oracle.name}")
    if memo and policy.composition != "memoized":
        out.append(f"budget.composition must be 'memoized' for the memoized mechanism {oracle.name} "
                   f"(got {policy.composition!r})")
    if not memo and policy.composition == "memoized":
        out.append(f"budget.composition 'memoized' needs a memoized mechanism; {oracle.name} reports fresh "
                   "randomizations (use 'basic' or 'pld')")
    if memo and policy.total_epsilon is not None and policy.total_epsilon < oracle.epsilon_inf * (1 - 1e-12):
        out.append(f"budget.total_epsilon ({policy.total_epsilon:g}) is below the mechanism's epsilon_inf "
                   f"({oracle.epsilon_inf:g}): not even one permanent response fits")
    return out


def budget_summary(policy: BudgetPolicy, mechanism: FrequencyOracle, windows: int) -> dict[str, Any]:
    """What a user spends after reporting in ``windows`` windows (one report each) under ``policy``: the
    figures the pipeline's task summary, the estimates' metadata and the dashboard show.

    Keys: ``mechanism``, ``memoized``, ``windows``, ``delta``, the policy's fields (``policy``), the
    mechanism's guarantees (``guarantees``), ``reports_allowed`` (per period and over the lifetime, under
    the policy's rule), ``problems`` (:func:`policy_problems`) and the spent figures:

    * fresh: ``basic = windows * eps``, ``tight`` (PLD at delta);
    * memoized: ``constant_value`` {``basic``, ``tight``} = ``epsilon_inf`` whatever ``windows``;
      ``changing_values`` (a new key every window, at most ``max_memo_keys``: the worst case about values)
      and ``any_history`` (pattern included), each {``basic``, ``tight``};
    * ``fresh_equivalent``: the same number of fresh reports at ``epsilon_per_report`` (basic and tight), so
      the saving reads off directly.
    """
    if windows < 0 or isinstance(windows, bool) or int(windows) != windows:
        raise ValueError(f"windows must be an integer >= 0, got {windows!r}")
    k = int(windows)
    delta = policy.delta
    memo = isinstance(mechanism, MemoizedOracle)
    out: dict[str, Any] = {
        "mechanism": mechanism.name,
        "memoized": memo,
        "windows": k,
        "delta": delta,
        "policy": policy.to_dict(),
        "problems": policy_problems(policy, mechanism),
    }
    if memo:
        assert isinstance(mechanism, MemoizedOracle)
        out["guarantees"] = mechanism.guarantees()
        const = memoized_epsilon(mechanism, k, min(k, 1), delta)
        worst = memoized_epsilon(mechanism, k, k, delta)
        out["constant_value"] = {"basic": const["basic"], "tight": const["tight"]}
        out["changing_values"] = {"basic": worst["basic"], "tight": worst["tight"],
                                  "keys": min(k, mechanism.max_memo_keys)}
        out["any_history"] = {"basic": worst["basic_any_history"], "tight": worst["tight_any_history"]}
        out["basic"], out["tight"] = const["basic"], const["tight"]
    else:
        out["guarantees"] = {"epsilon": mechanism.epsilon}
        fresh = fresh_epsilon(mechanism, k, delta)
        out["basic"], out["tight"] = fresh["basic"], fresh["tight"]
        out["any_history"] = dict(fresh)
    e = policy.epsilon_per_report
    out["fresh_equivalent"] = {"basic": k * e,
                               "tight": min(k * e, composed_epsilon(binary_rr_pld(e), k, delta))}
    allowed: dict[str, Any] = {"per_period": policy.reports_per_period, "period_s": policy.period_s}
    if policy.total_epsilon is None:
        allowed["lifetime"] = None
    elif policy.composition == "memoized" and memo:
        allowed["lifetime"] = None  # unlimited reports; the cap bounds new permanent responses
        allowed["lifetime_keys"] = int(math.floor(policy.total_epsilon / mechanism.epsilon_inf * (1 + 1e-12)))
    elif policy.composition == "pld":
        allowed["lifetime"] = pld_reports_allowed(mechanism, policy.total_epsilon, delta)
    else:
        allowed["lifetime"] = policy.max_reports()
    out["reports_allowed"] = allowed
    return out
