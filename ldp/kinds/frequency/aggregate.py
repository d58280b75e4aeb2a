"""The aggregator of frequency tasks: one frequency oracle shared by every user group.

* validation: the oracle's ``report_fields`` / ``validate`` (the same for every group);
* accumulate: the oracle's fixed-size :class:`~ldp.oracles.SupportAccumulator` (exact integer sums);
* finalize: per group with reports, ``oracle.estimate`` then ``ldp.postprocess.postprocess`` (the task's
  method or the job's), then ``ldp.intervals.frequency_intervals`` (an interval valid for the published
  numbers, ``docs/intervals.md``, and the exact p-values of ``f_v = 0`` the flags use), one
  :class:`EstimateRow` (``schemas/estimate.avsc``) per group.

Output: the Avro file of a pane holds every value; its JSON Lines row holds at most
``--jsonl_max_values`` of them (:func:`estimate_json`, default :data:`DEFAULT_JSONL_MAX_VALUES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ldp.aggregate import OutputSpec, Record, ResultRow, TaskAggregator, WindowInfo, json_record
from ldp.intervals import frequency_intervals
from ldp.kinds.frequency.task import FrequencyTask
from ldp.oracles import FrequencyEstimate, FrequencyOracle, SupportAccumulator
from ldp.postprocess import postprocess
from ldp.rows import pane_header, top_values
from ldp.task import POSTPROCESS_METHODS

__all__ = [
    "EstimateRow",
    "FrequencyAggregator",
    "postprocess_estimate",
    "ESTIMATES",
    "DEFAULT_JSONL_MAX_VALUES",
    "PER_VALUE_FIELDS",
    "estimate_json",
]


class EstimateRow(NamedTuple):
    """The estimates of one task, group, window and pane (the fields of ``schemas/estimate.avsc``).

    ``frequencies`` are the published (post-processed, method ``postprocess``) numbers; ``std`` the
    standard deviation of their estimator (of the unbiased estimate for ``base``; a spread, not an error
    bar, for the other methods); ``ci_low`` / ``ci_high`` a 95% interval for each true frequency that is
    valid for the published numbers and contains them, made as ``ci_method`` says; ``unbiased`` /
    ``unbiased_std`` the base estimate and its closed-form standard deviation; ``ci_includes_zero`` flags
    values at noise level (not flagged above 0 by Bonferroni over the domain, ``ldp.selection``);
    ``labels`` the task's value labels (None: none); ``p_zero`` the exact two-sided p-value of
    ``f_v = 0`` from the support count's Binomial(n, q) null law (``ldp.intervals.zero_p_values``; None
    for a mechanism without an exact null law, e.g. the memoized ones). The fields after ``std`` have
    defaults (rows written before them).
    """

    task_id: str
    schema_version: int
    group: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    is_last_pane: bool
    n_reports: int
    mechanism: str
    epsilon: float
    domain_size: int
    postprocess: str
    frequencies: list[float]
    std: list[float]
    unbiased: list[float] | None = None
    unbiased_std: list[float] | None = None
    ci_low: list[float] | None = None
    ci_high: list[float] | None = None
    ci_method: str | None = None
    ci_includes_zero: list[bool] | None = None
    labels: list[str] | None = None
    #: the row type (``schemas/estimate.avsc``): readers dispatch on it (``ldp.kinds.row_kind``)
    row_schema: str | None = "estimate"
    p_zero: list[float] | None = None
    output = "estimates"


#: The fields of an estimate row that hold one entry per value of the domain.
PER_VALUE_FIELDS = (
    "frequencies", "std", "unbiased", "unbiased_std", "ci_low", "ci_high", "ci_includes_zero", "labels",
    "p_zero",
)  # fmt: skip

#: Values per estimate row in JSON Lines unless told otherwise (``--jsonl_max_values``; the store's
#: default cap, ``ldp.rows.DEFAULT_MAX_ITEMS``, is the same number).
DEFAULT_JSONL_MAX_VALUES = 4096


def estimate_json(rec: Record, max_values: int) -> Record:
    """The JSON Lines form of an estimate record holding at most ``max_values`` values (0: every value).

    A row of a domain that fits is written whole (:func:`ldp.aggregate.json_record`). A larger one holds
    the ``max_values`` largest published estimates (:func:`top_values`): every per-value field
    (:data:`PER_VALUE_FIELDS`) restricted to them, in index order, and ``values``, their indices; the other
    fields as they are. The pane's Avro file holds every value. ``rec``'s vectors may be lists or numpy
    arrays."""
    if max_values < 0:
        raise ValueError(f"max_values must be >= 0 (0: every value), got {max_values}")
    freqs = rec["frequencies"]
    if max_values == 0 or len(freqs) <= max_values:  # type: ignore[arg-type]
        return json_record({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in rec.items()})
    out = dict(rec)
    keep = top_values(freqs, max_values)  # type: ignore[arg-type]
    idx = keep.tolist()
    for name in PER_VALUE_FIELDS:
        v = rec.get(name)
        if v is None:
            continue
        if isinstance(v, np.ndarray):
            out[name] = v[keep].tolist()
        else:
            out[name] = [v[i] for i in idx]  # type: ignore[index]
    out["values"] = idx
    return json_record(out)


ESTIMATES = OutputSpec("estimates", "estimate", "", "estimates", None, estimate_json)


def postprocess_estimate(
    oracle: FrequencyOracle, acc: SupportAccumulator, method: str
) -> tuple[FrequencyEstimate, np.ndarray]:
    """``oracle.estimate(acc)`` then ``ldp.postprocess.postprocess``; returns ``(estimate, frequencies)``."""
    est = oracle.estimate(acc)
    if method == "base":
        return est, np.asarray(est.frequencies, dtype=np.float64)
    opts: dict[str, float] = {}
    if method == "mle-apx":
        opts = {"p": oracle.p, "q": oracle.q}
    freqs = postprocess(est.frequencies, method, variance=est.variance, n=est.n, **opts)
    return est, np.asarray(freqs, dtype=np.float64)


class FrequencyAggregator(TaskAggregator):
    """:class:`ldp.aggregate.Aggregator` of a :class:`~ldp.kinds.frequency.task.FrequencyTask`.

    Args:
        task: the parsed task.
        postprocess: post-processing method (default: the task's).

    The oracle is built lazily and not pickled (workers rebuild it from the small task).
    """

    kind = "frequency"
    outputs = (ESTIMATES,)
    uniform_oracle = True

    def __init__(self, task: FrequencyTask, postprocess: str | None = None) -> None:
        super().__init__(task)
        method = task.postprocess if postprocess is None else postprocess
        if method not in POSTPROCESS_METHODS:
            raise ValueError(
                f"unknown post-processing method {method!r}; one of {', '.join(POSTPROCESS_METHODS)}"
            )
        self.method = method

    def build_mechanism(self) -> FrequencyOracle:
        return self.task.make_oracle()

    @property
    def oracle(self) -> FrequencyOracle:
        """The task's frequency oracle (:attr:`mechanism`)."""
        return self.mechanism

    def validation_oracle(self, group: int) -> FrequencyOracle:
        return self.oracle

    def finalize(self, accs: Mapping[int, SupportAccumulator], window: WindowInfo) -> list[ResultRow]:
        """One :class:`EstimateRow` per group with reports, in group order."""
        o = self.oracle
        header = pane_header(self.task, window, mechanism=o.name, row_schema="estimate")
        rows: list[ResultRow] = []
        for group, acc in sorted(accs.items()):
            if acc.n == 0:
                continue
            est, freqs = postprocess_estimate(o, acc, self.method)
            iv = frequency_intervals(o, est, self.method, freqs)
            labels = getattr(self.task, "labels", None)
            rows.append(
                EstimateRow(
                    **header,  # type: ignore[arg-type]
                    group=int(group),
                    n_reports=int(est.n),
                    epsilon=float(o.epsilon),
                    domain_size=int(o.d),
                    postprocess=self.method,
                    frequencies=freqs.tolist(),
                    std=iv.std.tolist(),
                    unbiased=iv.unbiased.tolist(),
                    unbiased_std=iv.unbiased_std.tolist(),
                    ci_low=iv.ci_low.tolist(),
                    ci_high=iv.ci_high.tolist(),
                    ci_method=iv.ci_method,
                    ci_includes_zero=iv.ci_includes_zero.tolist(),
                    labels=None if labels is None else list(labels),
                    p_zero=None if iv.p_zero is None else iv.p_zero.tolist(),
                )
            )
        return rows
