"""MSW, Multiplied Square Wave (Yang et al., VLDB 2021, Section 3.4).

Users are split uniformly into ``d`` groups, one per attribute; a user of group ``a`` reports its value of
attribute ``a`` with Square Wave (Li et al., SIGMOD 2020; :mod:`ldp.square_wave`) at the full epsilon. The
aggregator estimates each attribute's distribution by EM with the EMS smoothing step, and answers a lambda-D
query with the product of the lambda 1-D range answers, which assumes the attributes are independent: MSW is
accurate on weakly correlated data only. There is no closed-form variance for the EM estimates, so
``answer_std`` returns None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp.rangequery.base import RangeMechanism, RangeModel, register_model
from ldp.rangequery.queries import AnswerPostprocessing, RangeQuery, clip_option
from ldp.square_wave import SquareWave

__all__ = ["MSWMechanism", "MSWModel"]

_SW_OPTIONS = ("input_mode", "em_resolution", "output_bins", "smoothing", "tol", "max_iter")


class MSWMechanism(RangeMechanism):
    """MSW: one Square Wave group per attribute; lambda-D answers are products of 1-D answers.

    Options (passed to :class:`ldp.square_wave.SquareWave` of every attribute): ``input_mode``
    (``"uniform"`` default or ``"center"``), ``em_resolution`` (EM sub-bins per value, default
    ``ceil(256 / c)``), ``output_bins``, ``smoothing`` (EMS, default True), ``tol`` (default 1e-8, on the
    per-report log-likelihood improvement), ``max_iter`` (default 10000).
    """

    name = "msw"
    OPTIONS = frozenset((*_SW_OPTIONS, "clip"))

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        self.clip = clip_option(options)
        sw_opts = {k: options[k] for k in _SW_OPTIONS if k in options}
        self._sw = tuple(SquareWave(self.epsilon, c, **sw_opts) for c in self.domain_sizes)

    @property
    def n_groups(self) -> int:
        return self.n_attributes

    def group_label(self, group: int) -> str:
        return f"attr{self._check_group(group)}"

    def group_oracle(self, group: int) -> SquareWave:
        return self._sw[self._check_group(group)]

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        return np.asarray(records)[:, self._check_group(group)]

    def finalize(self, accumulators: Mapping[int, Any]) -> MSWModel:
        dists: list[np.ndarray] = [np.full(sw.d, 1.0 / sw.d) for sw in self._sw]  # no reports: uniform
        n_total = 0
        batches: dict[tuple, list[int]] = {}
        for a, sw in enumerate(self._sw):
            acc = accumulators.get(a)
            if acc is not None and acc.n > 0:
                n_total += int(acc.n)
                batches.setdefault(sw.config_key(), []).append(a)
        for attrs in batches.values():  # attributes with the same domain share one batched EM run
            ests = self._sw[attrs[0]].estimate_many([accumulators[a] for a in attrs])
            for a, est in zip(attrs, ests):
                dists[a] = est.distribution
        model = MSWModel(self.domain_sizes, n_total, dists)
        model.clip = self.clip
        return model


@register_model("msw")
class MSWModel(AnswerPostprocessing, RangeModel):
    """Per-attribute estimated distributions; a query's answer is the product of its 1-D range sums."""

    def __init__(
        self, domain_sizes: Sequence[int], n_users: int, distributions: Sequence[np.ndarray]
    ) -> None:
        super().__init__(domain_sizes, n_users)
        if len(distributions) != self.n_attributes:
            raise ValueError("one distribution per attribute is required")
        self.distributions = [np.asarray(f, dtype=np.float64) for f in distributions]
        for a, f in enumerate(self.distributions):
            if f.shape != (self.domain_sizes[a],):
                raise ValueError(f"distribution of attribute {a} must have shape ({self.domain_sizes[a]},)")
        self._cum = [np.concatenate([[0.0], np.cumsum(f)]) for f in self.distributions]

    def _raw_answer(self, queries: list[RangeQuery]) -> np.ndarray:
        out = np.ones(len(queries))
        for i, q in enumerate(queries):
            for a, lo, hi in q.intervals:
                out[i] *= self._cum[a][hi + 1] - self._cum[a][lo]
        return out

    def _payload(self) -> dict[str, Any]:
        return {"distributions": [f.tolist() for f in self.distributions]}

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> MSWModel:
        return cls(d["domain_sizes"], d["n_users"], d["distributions"])._restore_options(d)
