"""MSW, Multiplied Square Wave (Yang et al., VLDB 2021, Section 3.4).

Users are split uniformly into ``d`` groups, one per attribute; a user of group ``a`` reports its value of
attribute ``a`` with Square Wave (Li et al., SIGMOD 2020; :mod:`ldp.square_wave`) at the full epsilon. The
aggregator estimates each attribute's distribution by EM with the EMS smoothing step, and answers a lambda-D
query with the product of the lambda 1-D range answers, which assumes the attributes are independent: MSW is
accurate on weakly correlated data only. There is no closed-form variance for the EM estimates:
``answer_std`` is a parametric bootstrap (:meth:`MSWModel.answer_std`; models saved without the Square Wave
configuration return None).

Wire. Each report carries Square Wave's integer grid message (:class:`ldp.square_wave.SquareWaveGrid`;
``docs/wire_format.md`` section 7's exact sliding-window sampler), never a computed double: MSW tasks are
report schema version 3 (:attr:`MSWMechanism.schema_version`); version 2, which sent floating-point
reals, is retired (``float_reals_retired``). The EM matrix is that of the discrete distribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp.rangequery.base import RangeMechanism, RangeModel, register_model
from ldp.rangequery.queries import AnswerPostprocessing, RangeQuery, clip_option
from ldp.square_wave import SquareWaveGrid

__all__ = ["MSWMechanism", "MSWModel"]

_SW_OPTIONS = ("input_mode", "em_resolution", "output_bins", "smoothing", "tol", "max_iter")
#: Replicas of the bootstrap behind :meth:`MSWModel.answer_std` (one batched EM run per attribute).
MSW_STD_REPLICAS = 24


class MSWMechanism(RangeMechanism):
    """MSW: one Square Wave group per attribute; lambda-D answers are products of 1-D answers.

    Options (passed to :class:`ldp.square_wave.SquareWaveGrid` of every attribute): ``input_mode``
    (``"uniform"`` default or ``"center"``), ``em_resolution`` (EM sub-bins per value, default
    ``ceil(256 / c)``), ``output_bins``, ``smoothing`` (EMS, default True), ``tol`` (default 1e-8, on the
    per-report log-likelihood improvement), ``max_iter`` (default 10000).
    """

    name = "msw"
    #: report schema version of MSW tasks: 3, the integer grid wire (version 2's float reals are retired)
    schema_version = 3
    OPTIONS = frozenset((*_SW_OPTIONS, "clip"))

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        self.clip = clip_option(options)
        sw_opts = {k: options[k] for k in _SW_OPTIONS if k in options}
        self._sw = tuple(SquareWaveGrid(self.epsilon, c, **sw_opts) for c in self.domain_sizes)

    @property
    def n_groups(self) -> int:
        return self.n_attributes

    def group_label(self, group: int) -> str:
        return f"attr{self._check_group(group)}"

    def group_oracle(self, group: int) -> SquareWaveGrid:
        return self._sw[self._check_group(group)]

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        return np.asarray(records)[:, self._check_group(group)]

    def finalize(self, accumulators: Mapping[int, Any]) -> MSWModel:
        dists: list[np.ndarray] = [np.full(sw.d, 1.0 / sw.d) for sw in self._sw]  # no reports: uniform
        n_total = 0
        n_attr = [0] * len(self._sw)
        batches: dict[tuple, list[int]] = {}
        for a, sw in enumerate(self._sw):
            acc = accumulators.get(a)
            if acc is not None and acc.n > 0:
                n_total += int(acc.n)
                n_attr[a] = int(acc.n)
                batches.setdefault(sw.config_key(), []).append(a)
        for attrs in batches.values():  # attributes with the same domain share one batched EM run
            ests = self._sw[attrs[0]].estimate_many([accumulators[a] for a in attrs])
            for a, est in zip(attrs, ests):
                dists[a] = est.distribution
        sw_options = {k: self.options[k] for k in _SW_OPTIONS if k in self.options}
        model = MSWModel(
            self.domain_sizes,
            n_total,
            dists,
            epsilon=self.epsilon,
            sw_options=sw_options,
            n_per_attribute=n_attr,
        )
        model.clip = self.clip
        return model


@register_model("msw")
class MSWModel(AnswerPostprocessing, RangeModel):
    """Per-attribute estimated distributions; a query's answer is the product of its 1-D range sums."""

    def __init__(
        self,
        domain_sizes: Sequence[int],
        n_users: int,
        distributions: Sequence[np.ndarray],
        *,
        epsilon: float | None = None,
        sw_options: Mapping[str, Any] | None = None,
        n_per_attribute: Sequence[int] | None = None,
    ) -> None:
        super().__init__(domain_sizes, n_users)
        self.epsilon = None if epsilon is None else float(epsilon)
        self.sw_options = dict(sw_options or {})
        self.n_per_attribute = None if n_per_attribute is None else [int(x) for x in n_per_attribute]
        self._boot: dict[int, np.ndarray | None] = {}
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

    def _replica_cumsums(self, a: int) -> np.ndarray | None:
        """``(B, c + 1)`` cumulative sums of ``B`` bootstrap replicas of attribute ``a``'s distribution, or
        None (no configuration, or no reports for ``a``)."""
        if a in self._boot:
            return self._boot[a]
        from ldp.intervals import data_seed
        from ldp.square_wave import SquareWaveGrid, em_estimate_batch

        out = None
        n = None if self.n_per_attribute is None else self.n_per_attribute[a]
        if self.epsilon is not None and n:
            sw = SquareWaveGrid(self.epsilon, self.domain_sizes[a], **self.sw_options)
            mat = sw.matrix()
            sub = np.repeat(self.distributions[a] / sw.em_resolution, sw.em_resolution)
            pi = np.maximum(mat @ sub, 0.0)
            pi /= pi.sum()
            rng = np.random.default_rng(data_seed(self.distributions[a], n, a))
            counts = rng.multinomial(n, pi, size=MSW_STD_REPLICAS)
            f, _, _ = em_estimate_batch(
                counts, mat, smoothing=sw.smoothing, tol=sw.tol, max_iter=sw.max_iter
            )
            dist = f.reshape(MSW_STD_REPLICAS, sw.d, sw.em_resolution).sum(axis=2)
            out = np.concatenate([np.zeros((MSW_STD_REPLICAS, 1)), np.cumsum(dist, axis=1)], axis=1)
        self._boot[a] = out
        return out

    def _raw_answer_std(self, queries: list[RangeQuery]) -> np.ndarray | None:
        """Parametric bootstrap: per queried attribute, :data:`MSW_STD_REPLICAS` histograms of its reports'
        output bins drawn (multinomial, the attribute's report count) from the Square Wave output
        distribution the estimated input distribution implies, each re-estimated by the same EM(S); a
        query's replica answers are the products of its attributes' replica range sums (the attributes'
        groups are independent), and the std is their standard deviation. It describes the noise of the
        EM(S) answers, not the smoothing bias or MSW's independence assumption (coverage measured in
        ``experiments/coverage.py``). Cost: one batched EM run of the replicas per queried attribute,
        once per model. None for models saved without the Square Wave configuration."""
        if self.epsilon is None or self.n_per_attribute is None:
            return None
        out = np.full(len(queries), np.nan)
        for i, q in enumerate(queries):
            prod = np.ones(MSW_STD_REPLICAS)
            for a, lo, hi in q.intervals:
                cum = self._replica_cumsums(a)
                if cum is None:
                    prod = None
                    break
                prod = prod * (cum[:, hi + 1] - cum[:, lo])
            if prod is not None:
                out[i] = float(np.std(prod, ddof=1))
            else:
                out[i] = np.inf
        return out

    def std_method(self, lam: int) -> str:
        return "bootstrap-em-noise-only" if lam > 1 else "bootstrap-em"

    def _payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"distributions": [f.tolist() for f in self.distributions]}
        if self.epsilon is not None and self.n_per_attribute is not None:
            out["epsilon"] = self.epsilon
            out["sw_options"] = self.sw_options
            out["n_per_attribute"] = self.n_per_attribute
        return out

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> MSWModel:
        return cls(
            d["domain_sizes"],
            d["n_users"],
            d["distributions"],
            epsilon=d.get("epsilon"),
            sw_options=d.get("sw_options"),
            n_per_attribute=d.get("n_per_attribute"),
        )._restore_options(d)
