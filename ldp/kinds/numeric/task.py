"""The numeric kind's task: the mean and quantiles of bounded numeric attributes (``ldp.numeric``).

Task (``docs/numeric.md``)::

    {"task_id": "latency-1", "kind": "numeric", "mechanism": "hybrid", "epsilon": 1.0,
     "attributes": [{"name": "latency_ms", "low": 0, "high": 500}],
     "quantiles": [0.5, 0.9, 0.99], "params": {}}

``"kind": "numeric"`` is required (``auto`` also names a frequency mechanism). ``mechanism``: one of
``ldp.numeric.MECHANISMS`` or ``auto``; ``params``: the mechanism's (``moments``; Square Wave's ``bins``,
...). Quantiles are estimated by ``square-wave`` only (the others publish the mean). With ``m > 1``
attributes (names unique) each user reports ``k`` of them at ``epsilon / k`` (Wang et al.'s sample-k-of-m,
:class:`ldp.numeric.multi.MultiNumeric`; optional ``"k"``, default ``ldp.numeric.multi.default_k``), and
each window pane gives one row per attribute. ``"budget"`` (repeated collection, ``memo-one-bit-mean``
only; ``client_ids`` false) declares the per-user budget of the memoized counter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from ldp.longitudinal.budget import BudgetPolicy, parse_budget
from ldp.numeric import MECHANISMS, make_numeric_mechanism, resolve_auto
from ldp.numeric.memo import MEMO_NAME, MemoizedOneBitMean
from ldp.numeric.multi import MAX_ATTRIBUTES, MultiNumeric, default_k
from ldp.task.base import Task
from ldp.task.fields import BUDGET, HASH_WITHOUT_G, NO_RESOLUTION, Field, TaskKind, declare

__all__ = [
    "NumericAttribute",
    "NumericTask",
    "NUMERIC_TASK_KIND",
    "NUMERIC_FIELDS",
    "DEFAULT_QUANTILES",
    "MAX_BOUND",
]

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
#: Largest |low|, |high| of an attribute (values are doubles on the wire; the bounds stay well inside).
MAX_BOUND = 1e15
#: the task's mechanisms: the fresh ones, the memoized counter (repeated collection) and ``auto`` (which
#: resolves among the fresh ones only, ``ldp.numeric.AUTO_CANDIDATES``)
_MECHANISMS: tuple[str, ...] = (*MECHANISMS, MEMO_NAME, "auto")
_MEMO_PARAMS = ("buckets", "flip")
_KEYS = ("attributes", "k", "quantiles", "budget")


@dataclasses.dataclass(frozen=True)
class NumericAttribute:
    """A bounded attribute: clients clip their value into ``[low, high]``."""

    name: str
    low: float
    high: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class NumericTask(Task):
    """The mean (and with ``square-wave`` the quantiles) of one or more bounded attributes per user
    (``m > 1``: each user reports ``k`` of them, sample-k-of-m)."""

    kind: ClassVar[str] = "numeric"
    attributes: tuple[NumericAttribute, ...]
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    #: attributes per report as written in the task (None: ``default_k(epsilon, m)``; see :attr:`per_report`)
    k: int | None = None
    #: the per-user budget of repeated collection (``memo-one-bit-mean`` only; ``None``: none declared)
    budget: BudgetPolicy | None = None
    #: the task file states ``quantiles`` (then ``auto`` picks a mechanism that estimates them; unstated,
    #: the defaults apply to ``square-wave`` and ``auto`` keeps its mean-only resolution)
    quantiles_stated: bool = False

    @property
    def resolved_mechanism(self) -> str:
        """The mechanism name clients and aggregator build (``ldp.numeric.resolve_auto``): the task's,
        except that ``auto`` with stated quantiles is the schema version's quantile candidate (plain
        ``auto`` resolves per attribute epsilon when the mechanism is built)."""
        if self.mechanism != "auto":
            return self.mechanism
        return resolve_auto(self.epsilon, quantiles=self.quantiles_stated and bool(self.quantiles),
                            schema_version=self.schema_version)

    @property
    def is_memoized(self) -> bool:
        """True for the memoized counter (``ldp.numeric.memo``), reported window after window."""
        return self.mechanism == MEMO_NAME

    @property
    def is_multi(self) -> bool:
        """More than one attribute: sample-k-of-m reports (:class:`~ldp.numeric.multi.MultiNumeric`)."""
        return len(self.attributes) > 1

    @property
    def per_report(self) -> int:
        """Attributes each report carries: ``k``, by default ``default_k(epsilon, m)``."""
        return default_k(self.epsilon, len(self.attributes)) if self.k is None else self.k

    def make_mechanism(self, attribute: int = 0) -> Any:
        """The task's mechanism: for several attributes a :class:`~ldp.numeric.multi.MultiNumeric` (each
        attribute at ``epsilon / k``); else a :class:`~ldp.numeric.NumericMechanism`, or for
        ``memo-one-bit-mean`` a :class:`~ldp.numeric.memo.MemoizedOneBitMean` (params ``buckets``,
        ``flip``)."""
        params = dict(self.params)
        if self.is_multi:
            bounds = [(b.low, b.high) for b in self.attributes]
            names = [b.name for b in self.attributes]
            return MultiNumeric(self.resolved_mechanism, self.epsilon, bounds, names=names, k=self.per_report,
                                **params)
        a = self.attributes[attribute]
        if self.is_memoized:
            unknown = sorted(set(params) - set(_MEMO_PARAMS))
            if unknown:
                raise ValueError(
                    f"unknown parameter(s) {unknown} for {MEMO_NAME}; allowed: {list(_MEMO_PARAMS)}"
                )
            return MemoizedOneBitMean(self.epsilon, a.low, a.high, **params)  # type: ignore[arg-type]
        return make_numeric_mechanism(self.resolved_mechanism, self.epsilon, a.low, a.high, **params)

    def budget_figures(self, windows: int | None = None) -> dict[str, object] | None:
        """What a user spends under the budget (None without one), in the shape of
        ``ldp.task.budget.budget_summary``: ``policy``, ``guarantees``, ``per_period`` (one full period of
        reports) and ``after_windows`` (``windows`` reports), each :func:`ldp.numeric.memo.memoized_cost`
        with its ``values`` figures also as ``basic`` / ``tight``, and ``lifetime_keys`` (the grid points
        ``total_epsilon`` pays for)."""
        if self.budget is None:
            return None
        from ldp.numeric.memo import memoized_cost

        mech = self.make_mechanism()
        out: dict[str, object] = {"policy": {**self.budget.to_dict(), "client_ids": False},
                                  "enforced_by": "clients", "guarantees": mech.guarantees()}
        for name, k in (("per_period", self.budget.reports_per_period), ("after_windows", windows)):
            if k is not None:
                cost = memoized_cost(mech, int(k), delta=self.budget.delta)
                out[name] = {**cost, "basic": cost["values"]["basic"], "tight": cost["values"]["tight"]}
        if self.budget.total_epsilon is not None:
            out["lifetime_keys"] = int(math.floor(self.budget.total_epsilon / mech.epsilon_inf * (1 + 1e-12)))
        return out

    def to_dict(self) -> dict[str, object]:
        out = self._common_dict()
        out["attributes"] = [dataclasses.asdict(a) for a in self.attributes]
        if self.k is not None:
            out["k"] = self.k
        if self.quantiles_stated:
            out["quantiles"] = list(self.quantiles)
        if self.budget is not None:
            out["budget"] = self.budget.to_dict()
        return out


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_attributes(raw: object, problems: list[str]) -> tuple[NumericAttribute, ...]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ATTRIBUTES:
        problems.append(f"attributes must be a list of 1 to {MAX_ATTRIBUTES} {{name, low, high}} objects")
        return ()
    out: list[NumericAttribute] = []
    seen: set[str] = set()
    for i, a in enumerate(raw):
        where = f"attributes[{i}]"
        if not isinstance(a, Mapping):
            problems.append(f"{where} must be an object with name, low and high")
            continue
        ok = True
        extra = set(a) - {"name", "low", "high"}
        if extra:
            problems.append(f"{where}: unknown key(s) {sorted(extra)}")
            ok = False
        name, low, high = a.get("name"), a.get("low"), a.get("high")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.name must be a non-empty string, got {name!r}")
            ok = False
        elif name in seen:
            problems.append(f"{where}.name {name!r} is repeated")
            ok = False
        else:
            seen.add(name)
        for key, v in (("low", low), ("high", high)):
            if not (_num(v) and abs(v) <= MAX_BOUND):  # type: ignore[arg-type]
                problems.append(f"{where}.{key} must be a number in [-1e15, 1e15], got {v!r}")
                ok = False
        if ok and not low < high:  # type: ignore[operator]
            problems.append(f"{where}: low must be below high, got [{low}, {high}]")
            ok = False
        if ok:
            out.append(NumericAttribute(str(name), float(low), float(high)))  # type: ignore[arg-type]
    return tuple(out) if len(out) == len(raw) else ()


def _check_k(raw: object, m: int, problems: list[str]) -> int | None:
    """The optional ``k`` (attributes per report): an integer in ``[1, m]``."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_ATTRIBUTES:
        problems.append(f"k must be an integer in [1, {MAX_ATTRIBUTES}], got {raw!r}")
        return None
    if m and raw > m:
        problems.append(f"k must be at most the number of attributes ({m}), got {raw}")
        return None
    return int(raw)


def _check_quantiles(raw: object, problems: list[str]) -> tuple[float, ...]:
    if raw is None:
        return DEFAULT_QUANTILES
    if not isinstance(raw, list) or not all(_num(q) and 0 < q < 1 for q in raw):
        problems.append(f"quantiles must be a list of numbers in (0, 1), got {raw!r}")
        return ()
    if len(set(raw)) != len(raw):
        problems.append(f"quantiles must be distinct, got {raw!r}")
    return tuple(float(q) for q in raw)


def _check_budget(raw: object, mech: Any, problems: list[str]) -> BudgetPolicy | None:
    """The ``budget`` block of a numeric task: only for the memoized counter, ``composition`` memoized and
    ``epsilon_per_report`` its ``epsilon_1`` by default, checked against the mechanism
    (``ldp.longitudinal.accounting.policy_problems``); every problem prefixed ``budget: ``."""
    if not isinstance(raw, Mapping):
        problems.append(f"budget: must be an object, got {type(raw).__name__}")
        return None
    if not getattr(mech, "memoized", False):
        problems.append(f"budget: a numeric task takes a budget only with mechanism {MEMO_NAME} (repeated "
                        f"collection), not {mech.name}")
        return None
    block = dict(raw)
    if block.pop("client_ids", False) is not False:
        problems.append("budget: client_ids must be false in a numeric task (its clients enforce the budget)")
        return None
    block.setdefault("epsilon_per_report", mech.epsilon_1)
    block.setdefault("composition", "memoized")
    try:
        policy = parse_budget(block)
    except ValueError as exc:
        problems.extend(f"budget: {p}" for p in str(exc).removeprefix("budget: ").split("; "))
        return None
    from ldp.longitudinal.accounting import policy_problems  # dp_accounting: loaded for budgets only

    found = [f"budget: {p}" for p in policy_problems(policy, mech)]
    problems.extend(found)
    return None if found else policy


def _build(obj: Mapping[str, object], common: dict[str, object], problems: list[str]) -> NumericTask | None:
    if obj.get("kind") != NumericTask.kind:
        problems.append('numeric tasks must say "kind": "numeric"')
    if "attributes" not in obj:
        problems.append("missing 'attributes' (required by numeric tasks)")
    attributes = _check_attributes(obj.get("attributes"), problems) if "attributes" in obj else ()
    k = _check_k(obj.get("k"), len(attributes), problems)
    if len(attributes) > 1 and obj.get("mechanism") == MEMO_NAME:
        problems.append(f"{MEMO_NAME} counts one attribute; got {len(attributes)}")
    quantiles = _check_quantiles(obj.get("quantiles"), problems)
    n_groups = obj.get("n_groups", 1)
    if not (isinstance(n_groups, int) and not isinstance(n_groups, bool) and n_groups == 1):
        problems.append(f"numeric tasks have one group, got n_groups {obj['n_groups']!r}")
    if problems:
        return None
    task = NumericTask(
        attributes=attributes,
        quantiles=quantiles,
        quantiles_stated="quantiles" in obj,
        k=k,
        n_groups=1,
        **{**common, "params": dict(common["params"])},  # type: ignore[arg-type,dict-item]
    )
    try:
        _ = task.resolved_mechanism
    except ValueError as exc:  # auto with quantiles where the schema version has no candidate for them
        problems.append(str(exc))
        return None
    try:
        mech = task.make_mechanism()
    except (TypeError, ValueError) as exc:
        problems.append(f"mechanism parameters rejected by ldp.numeric: {exc}")
        return None
    if obj.get("budget") is not None:
        policy = _check_budget(obj["budget"], mech, problems)
        if policy is None:
            return None
        task = dataclasses.replace(task, budget=policy)
    return task


NUMERIC_FIELDS: dict[str, Field] = {
    "attributes": declare(
        "array",
        min_items=1,
        max_items=MAX_ATTRIBUTES,
        items=declare(
            "object",
            properties={
                "name": declare("string", min_length=1),
                "low": declare("number", minimum=-MAX_BOUND, maximum=MAX_BOUND),
                "high": declare("number", minimum=-MAX_BOUND, maximum=MAX_BOUND),
            },
            required=("name", "low", "high"),
        ),
        description="the attributes (names unique) and their bounds [low, high] (low < high); clients clip "
        "into them; more than one: each user reports k of them (sample-k-of-m)",
    ),
    "k": declare(
        "integer",
        "null",
        minimum=1,
        maximum=MAX_ATTRIBUTES,
        default=None,
        description="attributes per report, at most their number (default: ldp.numeric.multi.default_k: "
        "max(1, min(m, floor(epsilon / 2.5))))",
    ),
    "quantiles": declare(
        "array",
        "null",
        unique_items=True,
        items=declare("number", exclusive_minimum=0, exclusive_maximum=1),
        default=list(DEFAULT_QUANTILES),
        description="quantiles to estimate (square-wave only)",
    ),
    "budget": dataclasses.replace(
        BUDGET,
        description="the per-user budget of repeated collection (memo-one-bit-mean only; "
        "ldp.longitudinal.budget.parse_budget; client_ids false)",
    ),
    "epsilon": declare("number", minimum=1e-3, maximum=50),
    "schema_version": declare(
        "integer",
        enum=(3,),
        default=3,
        description="3: integer grid messages (docs/wire_format.md, section 7); version 2 sent "
        "floating-point reals that leak the input (float_reals_retired): make a new task",
    ),
    "n_groups": declare("integer", enum=(1,)),
    "hash": HASH_WITHOUT_G,
    "resolved": NO_RESOLUTION,
}

#: The kind's task section (registered with the kind, ``ldp.kinds.numeric``).
NUMERIC_TASK_KIND = TaskKind(
    "numeric",
    lambda: _MECHANISMS,
    _KEYS,
    _build,
    fields=NUMERIC_FIELDS,
    required=("kind", "attributes"),
)
