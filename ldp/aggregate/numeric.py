"""The ``numeric`` kind of task: the mean and quantiles of a bounded numeric attribute (``ldp.numeric``).

Task (``docs/numeric.md``)::

    {"task_id": "latency-1", "kind": "numeric", "mechanism": "hybrid", "epsilon": 1.0,
     "attributes": [{"name": "latency_ms", "low": 0, "high": 500}],
     "quantiles": [0.5, 0.9, 0.99], "params": {}}

``"kind": "numeric"`` is required (``auto`` also names a frequency mechanism). ``mechanism``: one of
``ldp.numeric.MECHANISMS`` or ``auto``; ``params``: the mechanism's (``moments``; Square Wave's ``bins``,
...). Quantiles are estimated by ``square-wave`` only (the others publish the mean). With ``m > 1``
attributes (names unique) each user reports ``k`` of them at ``epsilon / k`` (Wang et al.'s sample-k-of-m,
:class:`ldp.numeric.multi.MultiNumeric`; optional ``"k"``, default ``ldp.numeric.multi.default_k``), and
each window pane gives one row per attribute.

This module is the whole kind: the task section (:data:`NUMERIC_TASK_KIND`), the aggregator
(:class:`NumericAggregator`: one group, the mechanism's exact integer accumulator), the result row
(:class:`NumericEstimateRow`, ``schemas/numeric_estimate.avsc``), its store form (:func:`flatten_numeric`:
store output ``numeric``, group = attribute index, item 0 the mean and item ``1 + i`` quantile ``i``), the
simulator's population (datasets ``normal[:MEAN:STD]``, ``lognormal[:MU:SIGMA]``, ``uniform``,
``csv:PATH:COLUMN``) and :func:`numeric_kind`, its registry entry (``ldp.kinds``).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ldp import task as _task
from ldp.aggregate import OutputSpec, ResultRow, WindowInfo, pane_header
from ldp.longitudinal.budget import BudgetPolicy, parse_budget
from ldp.numeric import MECHANISMS, NumericAccumulator, NumericMechanism, make_numeric_mechanism
from ldp.numeric.memo import MEMO_NAME, MemoAccumulator, MemoizedOneBitMean
from ldp.numeric.multi import MAX_ATTRIBUTES, MultiAccumulator, MultiNumeric, default_k
from ldp.reports import Reports

__all__ = [
    "NumericAttribute",
    "NumericTask",
    "NumericEstimateRow",
    "NumericAggregator",
    "NUMERIC_ESTIMATES",
    "NUMERIC_TASK_KIND",
    "DEFAULT_QUANTILES",
    "flatten_numeric",
    "sample_values",
    "sample_columns",
    "numeric_kind",
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
class NumericTask(_task.Task):
    """The mean (and with ``square-wave`` the quantiles) of one or more bounded attributes per user
    (``m > 1``: each user reports ``k`` of them, sample-k-of-m)."""

    kind = "numeric"
    attributes: tuple[NumericAttribute, ...]
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    #: attributes per report as written in the task (None: ``default_k(epsilon, m)``; see :attr:`per_report`)
    k: int | None = None
    #: the per-user budget of repeated collection (``memo-one-bit-mean`` only; ``None``: none declared)
    budget: BudgetPolicy | None = None

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
            return MultiNumeric(self.mechanism, self.epsilon, bounds, names=names, k=self.per_report,
                                **params)
        a = self.attributes[attribute]
        if self.is_memoized:
            unknown = sorted(set(params) - set(_MEMO_PARAMS))
            if unknown:
                raise ValueError(
                    f"unknown parameter(s) {unknown} for {MEMO_NAME}; allowed: {list(_MEMO_PARAMS)}"
                )
            return MemoizedOneBitMean(self.epsilon, a.low, a.high, **params)  # type: ignore[arg-type]
        return make_numeric_mechanism(self.mechanism, self.epsilon, a.low, a.high, **params)

    def budget_figures(self, windows: int | None = None) -> dict[str, object] | None:
        """What a user spends under the budget (None without one), in the shape of
        ``ldp.task.budget_summary``: ``policy``, ``guarantees``, ``per_period`` (one full period of
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
        k=k,
        n_groups=1,
        **{**common, "params": dict(common["params"])},  # type: ignore[arg-type,dict-item]
    )
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


def _f(*types: str, **kw: Any) -> _task.Field:
    return _task.Field(tuple(types), **kw)


_NUMERIC_FIELDS: dict[str, _task.Field] = {
    "attributes": _f(
        "array",
        min_items=1,
        max_items=MAX_ATTRIBUTES,
        items=_f(
            "object",
            properties={
                "name": _f("string", min_length=1),
                "low": _f("number", minimum=-MAX_BOUND, maximum=MAX_BOUND),
                "high": _f("number", minimum=-MAX_BOUND, maximum=MAX_BOUND),
            },
            required=("name", "low", "high"),
        ),
        description="the attributes (names unique) and their bounds [low, high] (low < high); clients clip "
        "into them; more than one: each user reports k of them (sample-k-of-m)",
    ),
    "k": _f(
        "integer",
        "null",
        minimum=1,
        maximum=MAX_ATTRIBUTES,
        default=None,
        description="attributes per report, at most their number (default: ldp.numeric.multi.default_k: "
        "max(1, min(m, floor(epsilon / 2.5))))",
    ),
    "quantiles": _f(
        "array",
        "null",
        unique_items=True,
        items=_f("number", exclusive_minimum=0, exclusive_maximum=1),
        default=list(DEFAULT_QUANTILES),
        description="quantiles to estimate (square-wave only)",
    ),
    "budget": dataclasses.replace(
        _task._FREQUENCY_FIELDS["budget"],
        description="the per-user budget of repeated collection (memo-one-bit-mean only; "
        "ldp.longitudinal.budget.parse_budget; client_ids false)",
    ),
    "epsilon": _f("number", minimum=1e-3, maximum=50),
    "schema_version": _f(
        "integer",
        enum=(3,),
        default=3,
        description="3: integer grid messages (docs/wire_format.md, section 7); version 2 sent "
        "floating-point reals that leak the input (float_reals_retired): make a new task",
    ),
    "n_groups": _f("integer", enum=(1,)),
    "hash": dataclasses.replace(
        _task.COMMON_FIELDS["hash"],
        properties={**(_task.COMMON_FIELDS["hash"].properties or {}), "g": _f("null")},
        description="no OLH here: hash.g must be null",
    ),
    "resolved": _f("null", description="nothing resolves in this kind"),
}

#: The kind's task section (``ldp.task.TASK_KINDS["numeric"]`` once registered).
NUMERIC_TASK_KIND = _task.TaskKind(
    "numeric",
    lambda: _MECHANISMS,
    _KEYS,
    _build,
    fields=_NUMERIC_FIELDS,
    required=("kind", "attributes"),
)


# ------------------------------------------------------------------------------------------------------------
# rows and the aggregator
# ------------------------------------------------------------------------------------------------------------


class NumericEstimateRow(NamedTuple):
    """One attribute's estimates in one window and pane (the fields of ``schemas/numeric_estimate.avsc``).

    ``mean`` is unbiased and not clipped; ``mean_ci_*`` its normal 95% interval and ``mean_bound_*`` the
    interval valid at every n (both intersected with ``[low, high]``); ``quantiles`` a list of
    ``{q, value, ci_low, ci_high}`` (Square Wave; empty otherwise); ``variance*`` None without a second
    moment (``ldp.numeric.estimates.NumericEstimate``). In a task of several attributes ``n_reports``
    counts the reports that carried this attribute and ``epsilon`` is its share, ``epsilon / k``."""

    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    is_last_pane: bool
    mechanism: str
    attribute: str
    epsilon: float
    low: float
    high: float
    n_reports: int
    mean: float
    mean_std: float
    mean_ci_low: float
    mean_ci_high: float
    mean_bound_low: float
    mean_bound_high: float
    quantiles: list[dict[str, float]]
    variance: float | None = None
    variance_std: float | None = None
    variance_ci_low: float | None = None
    variance_ci_high: float | None = None
    ci_method: str = "normal"
    #: the attribute's index in the task's ``attributes`` (the store's group)
    attribute_index: int = 0
    output = "estimates"


NUMERIC_ESTIMATES = OutputSpec("estimates", "numeric_estimate", "", "estimates", None)


class _Validator:
    """The report checks of the task's mechanism (``name``, ``report_fields``, ``payload``, ``validate``)."""

    def __init__(self, mech: NumericMechanism | MultiNumeric) -> None:
        self.mech = mech
        self.name = mech.name
        self.report_fields = tuple(mech.report_fields)
        self.payload = mech.payload

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        return self.mech.validate(reports)


class NumericAggregator:
    """:class:`ldp.aggregate.Aggregator` of a :class:`NumericTask`: one group; its accumulator is the
    mechanism's (exact integer sums, so merges are exact; several attributes: one per attribute,
    :class:`~ldp.numeric.multi.MultiAccumulator`); finalize is ``mech.estimate``, one row per attribute
    with reports.

    Args:
        task: the parsed task.
        replicas: bootstrap replicas of Square Wave's quantile intervals (``ldp.numeric.estimates``).
    """

    outputs = (NUMERIC_ESTIMATES,)
    uniform_oracle = True

    def __init__(self, task: NumericTask, *, replicas: int | None = None) -> None:
        if getattr(task, "kind", None) != NumericTask.kind:
            raise ValueError(f"task {task.task_id!r} is a {task.kind} task, not a numeric task")
        self.task = task
        self.replicas = replicas
        self._mech: NumericMechanism | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mech": None}

    @property
    def mech(self) -> NumericMechanism:
        if self._mech is None:
            self._mech = self.task.make_mechanism()
        return self._mech

    def validation_oracle(self, group: int) -> _Validator:
        return _Validator(self.mech)

    def create_accumulator(self, group: int) -> NumericAccumulator:
        return self.mech.create_accumulator()

    def add(self, group: int, acc: NumericAccumulator, reports: Reports) -> NumericAccumulator:
        return self.mech.add(acc, reports)

    def merge(self, group: int, accs: Sequence[NumericAccumulator]) -> NumericAccumulator:
        return self.mech.merge(list(accs))

    def finalize(self, accs: Mapping[int, Any], window: WindowInfo) -> list[ResultRow]:
        acc = accs.get(0)
        if acc is None:
            return []
        opts: dict[str, Any] = {} if self.replicas is None else {"replicas": self.replicas}
        if isinstance(acc, MultiAccumulator):
            multi: MultiNumeric = self.mech  # type: ignore[assignment]
            return [
                numeric_row(self.task, window, multi.estimate_attribute(acc, j, quantiles=self.task.quantiles,
                                                                         **opts), a, j)
                for j, (a, n) in enumerate(zip(self.task.attributes, acc.n)) if n > 0
            ]
        if (acc.n if isinstance(acc, MemoAccumulator) else acc.n[0]) == 0:
            return []
        a = self.task.attributes[0]
        est = self.mech.estimate(acc, attribute=a.name, quantiles=self.task.quantiles, **opts)
        return [numeric_row(self.task, window, est, a)]


def numeric_row(
    task: NumericTask, window: WindowInfo, est: Any, attribute: NumericAttribute, index: int = 0
) -> NumericEstimateRow:
    """The row of one :class:`~ldp.numeric.estimates.NumericEstimate` (``index``: the attribute's)."""
    return NumericEstimateRow(
        **pane_header(task, window, mechanism=est.mechanism),  # type: ignore[arg-type]
        attribute=attribute.name,
        epsilon=float(est.epsilon),
        low=attribute.low,
        high=attribute.high,
        n_reports=int(est.n),
        mean=float(est.mean),
        mean_std=float(est.mean_std),
        mean_ci_low=float(est.mean_ci_low),
        mean_ci_high=float(est.mean_ci_high),
        mean_bound_low=float(est.mean_bound_low),
        mean_bound_high=float(est.mean_bound_high),
        quantiles=[q.to_dict() for q in est.quantiles],
        variance=est.variance,
        variance_std=est.variance_std,
        variance_ci_low=est.variance_ci_low,
        variance_ci_high=est.variance_ci_high,
        attribute_index=int(index),
    )


def flatten_numeric(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[Any]:
    """Store form: one pane per row (group: the attribute's index, ``attribute_index``, 0 in rows
    without it), item 0 the mean (label ``mean``) and item ``1 + i`` quantile ``i`` (label ``q0.5``),
    each with its interval. ``ci_includes_zero`` is set only for an attribute whose range has 0 strictly
    inside (elsewhere "is it 0?" says nothing about the data: a positive attribute's mean is never 0), else
    null, as the dashboard shows it."""
    from ldp.store.flatten import FlatItem, FlatPane

    def item(i: int, label: str, est: float, std: float | None, lo: float, hi: float,
             tested: bool) -> FlatItem:
        zero = int(lo <= 0.0 <= hi) if tested else None
        return FlatItem(i, label, est, std, lo, hi, None, None, zero, None)

    panes = []
    for row in rows:
        tested = float(row.low) < 0.0 < float(row.high)
        items = [item(0, "mean", row.mean, row.mean_std, row.mean_ci_low, row.mean_ci_high, tested)]
        for i, q in enumerate(row.quantiles):
            items.append(item(1 + i, f"q{q['q']:g}", q["value"], None, q["ci_low"], q["ci_high"], tested))
        extra = {
            k: getattr(row, k) for k in ("attribute", "mechanism", "epsilon", "low", "high", "ci_method")
        }
        panes.append(
            FlatPane("numeric", int(getattr(row, "attribute_index", 0) or 0), row.mechanism,
                     int(row.n_reports), len(items), items[:max_items], extra)
        )
    return panes


# ------------------------------------------------------------------------------------------------------------
# the simulator's population
# ------------------------------------------------------------------------------------------------------------


def sample_values(
    dataset: str, n: int | None, rng: np.random.Generator, *, bounds: tuple[float, float] | None = None
) -> np.ndarray:
    """Values of a dataset spec: ``normal[:MEAN:STD]`` (default 0:1), ``lognormal[:MU:SIGMA]`` (default
    0:1), ``uniform[:LOW:HIGH]`` (default: the attribute's ``bounds``, else 0:1) or ``csv:PATH:COLUMN``
    (every row's number; ``n`` None: all of them, else the first ``n``).

    Raises:
        ValueError: an unknown or malformed spec, a missing column, a value that is not a number.
    """
    name, _, rest = dataset.partition(":")
    if name == "csv":
        path, sep, column = rest.rpartition(":")
        if not sep or not path or not column:
            raise ValueError(f"dataset {dataset!r}: expected csv:PATH:COLUMN")
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                if column not in (reader.fieldnames or ()):
                    raise ValueError(f"dataset {dataset!r}: no column {column!r} (has {reader.fieldnames})")
                raw = [row[column] for row in reader]
        except OSError as exc:
            raise ValueError(f"dataset {dataset!r}: cannot read {path}: {exc.strerror or exc}") from None
        try:
            vals = np.array([float(v) for v in raw], dtype=np.float64)
        except ValueError:
            raise ValueError(
                f"dataset {dataset!r}: column {column!r} holds a value that is not a number"
            ) from None
        if not np.all(np.isfinite(vals)):
            raise ValueError(f"dataset {dataset!r}: column {column!r} holds a non-finite value")
        if n is not None:
            if len(vals) < n:
                raise ValueError(f"dataset {dataset!r}: {len(vals)} rows, {n} users asked for")
            vals = vals[:n]
        return vals
    if n is None:
        raise ValueError(f"dataset {dataset!r} needs a number of users (only csv: data defines its own)")
    defaults = {"normal": (0.0, 1.0), "lognormal": (0.0, 1.0), "uniform": (0.0, 1.0)}
    if name not in defaults:
        raise ValueError(
            f"unknown numeric dataset {dataset!r}: normal, lognormal, uniform or csv:PATH:COLUMN"
        )
    try:
        default = bounds if name == "uniform" and bounds is not None else defaults[name]
        args = [float(x) for x in rest.split(":")] if rest else [float(x) for x in default]
    except ValueError:
        raise ValueError(f"dataset {dataset!r}: parameters must be numbers") from None
    if len(args) != 2 or not all(math.isfinite(x) for x in args):
        raise ValueError(f"dataset {dataset!r}: give two finite parameters ({name}:A:B) or none")
    a, b = args
    if name == "normal":
        if b < 0:
            raise ValueError(f"dataset {dataset!r}: the std must be >= 0")
        return rng.normal(a, b, n)
    if name == "lognormal":
        if b < 0:
            raise ValueError(f"dataset {dataset!r}: sigma must be >= 0")
        return rng.lognormal(a, b, n)
    if not a < b:
        raise ValueError(f"dataset {dataset!r}: uniform needs LOW < HIGH")
    return rng.uniform(a, b, n)


def sample_columns(
    dataset: str,
    m: int,
    n: int | None,
    rng: np.random.Generator,
    *,
    bounds: Sequence[tuple[float, float]] | None = None,
) -> np.ndarray:
    """``(n, m)`` values of ``m`` attributes: ``dataset`` is one spec of :func:`sample_values` (each
    column drawn from it independently; a ``csv:`` spec gives every column the same values) or ``m``
    specs joined by ``;``, one per attribute.

    Raises:
        ValueError: a bad spec, a number of specs other than 1 or ``m``, columns of different lengths.
    """
    specs = dataset.split(";")
    if len(specs) == 1:
        specs = specs * m
    if len(specs) != m:
        raise ValueError(f"dataset {dataset!r}: {len(specs)} specs for {m} attributes (give 1 or {m}, "
                         "joined by ';')")
    if bounds is not None and len(bounds) != m:
        raise ValueError(f"{len(bounds)} bounds for {m} attributes")
    cols = [
        sample_values(spec, n, rng, bounds=None if bounds is None else bounds[i])
        for i, spec in enumerate(specs)
    ]
    lengths = sorted({len(c) for c in cols})
    if len(lengths) > 1:
        raise ValueError(f"dataset {dataset!r}: the attributes' columns have different lengths {lengths}")
    return np.column_stack(cols)


class _NumericPopulation:
    """Clients of a numeric task: one value each (one per attribute), encoded by the task's mechanism."""

    def __init__(
        self, task: NumericTask, users: int | None, dataset: str, ss: np.random.SeedSequence
    ) -> None:
        self.task, self.dataset = task, dataset
        r_val, r_enc, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in ss.spawn(4))
        if task.is_multi:
            bounds = [(a.low, a.high) for a in task.attributes]
            self.values = sample_columns(dataset, len(task.attributes), users, r_val, bounds=bounds)
        else:
            a = task.attributes[0]
            self.values = sample_values(dataset, users, r_val, bounds=(a.low, a.high))
        self.n_users = len(self.values)
        if self.n_users < 1:
            raise ValueError(f"dataset {dataset!r} has no values")
        self.mech = task.make_mechanism()
        self.reports = self.mech.encode(self.values, rng=r_enc)

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Any]]:
        from ldp.populations import Chunk

        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo < hi:
                yield k, Chunk(slice(lo, hi), self.reports.take(slice(lo, hi)), 0)

    def _truth_of(self, j: int, x: np.ndarray) -> dict[str, Any]:
        a = self.task.attributes[j]
        clipped = np.clip(x, a.low, a.high)
        return {
            "attribute": a.name,
            "mean": float(np.mean(clipped)),
            "quantiles": {f"{q:g}": float(np.quantile(clipped, q)) for q in self.task.quantiles},
        }

    def truth(self) -> dict[str, Any]:
        """The clipped values' mean and quantiles (several attributes: ``attributes``, one entry each,
        and ``k``)."""
        if not self.task.is_multi:
            return {"mechanism": self.mech.name, **self._truth_of(0, self.values)}
        return {
            "mechanism": self.mech.name,
            "k": self.mech.k,
            "attributes": [self._truth_of(j, self.values[:, j]) for j in range(self.values.shape[1])],
        }

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


def numeric_population(
    task: Any,
    users: int | None,
    dataset: str,
    ss: np.random.SeedSequence,
    *,
    batch_size: int,
    assignment: str,
) -> _NumericPopulation:
    return _NumericPopulation(task, users, dataset, ss)


def numeric_template(task: Any) -> tuple[Any, int, Any]:
    """The mechanism's validator and reports of the attributes' lower bounds (bad-record variants)."""
    mech = task.make_mechanism()
    if isinstance(mech, MultiNumeric):
        lows = np.array([a.low for a in task.attributes])
        return _Validator(mech), 0, lambda k, rng: mech.encode(np.tile(lows, (k, 1)), rng=rng)
    return _Validator(mech), 0, lambda k, rng: mech.encode(np.full(k, mech.low), rng=rng)


def numeric_kind() -> Any:
    """The kind's registry entry (``ldp.kinds`` registers it)."""
    from ldp.kinds import Kind, RowKind

    return Kind(
        "numeric",
        NUMERIC_TASK_KIND,
        aggregator=NumericAggregator,
        rows=(RowKind(NumericEstimateRow, "numeric_estimate", "numeric", flatten_numeric),),
        population=numeric_population,
        default_dataset="normal",
        datasets="normal[:MEAN:STD], lognormal[:MU:SIGMA], uniform[:LOW:HIGH] (default: the attribute's "
        "bounds), csv:PATH:COLUMN "
        "(several attributes: one spec, or one per attribute joined by ';')",
        users_from_dataset=("csv:",),
        bad_template=numeric_template,
        description="the mean and quantiles of bounded numeric attributes",
        example={
            "task_id": "n",
            "kind": "numeric",
            "mechanism": "hybrid",
            "epsilon": 1.0,
            "attributes": [{"name": "x", "low": 0.0, "high": 10.0}],
        },
    )
