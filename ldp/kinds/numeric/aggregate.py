"""The numeric kind's aggregator and rows: one group; its accumulator is the mechanism's (exact integer
sums); finalize gives one :class:`NumericEstimateRow` (``schemas/numeric_estimate.avsc``) per attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ldp.aggregate import OutputSpec, ResultRow, TaskAggregator, WindowInfo
from ldp.kinds.numeric.task import NumericAttribute, NumericTask
from ldp.numeric import NumericMechanism
from ldp.numeric.memo import MemoAccumulator
from ldp.numeric.multi import MultiAccumulator, MultiNumeric
from ldp.reports import Reports
from ldp.rows import pane_header

__all__ = ["NumericEstimateRow", "NumericAggregator", "NUMERIC_ESTIMATES", "numeric_row"]


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
    #: the row type (``schemas/numeric_estimate.avsc``): readers dispatch on it (``ldp.kinds.row_kind``)
    row_schema: str | None = "numeric_estimate"
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


class NumericAggregator(TaskAggregator):
    """:class:`ldp.aggregate.Aggregator` of a :class:`NumericTask`: one group; its accumulator is the
    mechanism's (exact integer sums, so merges are exact; several attributes: one per attribute,
    :class:`~ldp.numeric.multi.MultiAccumulator`); finalize is ``mech.estimate``, one row per attribute
    with reports.

    Args:
        task: the parsed task.
        replicas: bootstrap replicas of Square Wave's quantile intervals (``ldp.numeric.estimates``).
    """

    kind = NumericTask.kind
    outputs = (NUMERIC_ESTIMATES,)
    uniform_oracle = True

    def __init__(self, task: NumericTask, *, replicas: int | None = None) -> None:
        super().__init__(task)
        self.replicas = replicas

    def validation_oracle(self, group: int) -> _Validator:
        return _Validator(self.mechanism)

    def finalize(self, accs: Mapping[int, Any], window: WindowInfo) -> list[ResultRow]:
        acc = accs.get(0)
        if acc is None:
            return []
        opts: dict[str, Any] = {} if self.replicas is None else {"replicas": self.replicas}
        if isinstance(acc, MultiAccumulator):
            multi: MultiNumeric = self.mechanism  # type: ignore[assignment]
            return [
                numeric_row(self.task, window, multi.estimate_attribute(acc, j, quantiles=self.task.quantiles,
                                                                         **opts), a, j)
                for j, (a, n) in enumerate(zip(self.task.attributes, acc.n)) if n > 0
            ]
        if (acc.n if isinstance(acc, MemoAccumulator) else acc.n[0]) == 0:
            return []
        a = self.task.attributes[0]
        est = self.mechanism.estimate(acc, attribute=a.name, quantiles=self.task.quantiles, **opts)
        return [numeric_row(self.task, window, est, a)]


def numeric_row(
    task: NumericTask, window: WindowInfo, est: Any, attribute: NumericAttribute, index: int = 0
) -> NumericEstimateRow:
    """The row of one :class:`~ldp.numeric.estimates.NumericEstimate` (``index``: the attribute's)."""
    return NumericEstimateRow(
        **pane_header(task, window, mechanism=est.mechanism, row_schema="numeric_estimate"),  # type: ignore[arg-type]
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
