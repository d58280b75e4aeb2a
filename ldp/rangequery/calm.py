"""CALM baseline for range queries (Zhang et al., CCS 2018, as used by Yang et al., VLDB 2021, Sec. 3.1).

CALM collects all C(d, 2) pairwise marginals at full resolution: users are split into C(d, 2) groups, and a
user of group (j, k) reports its value pair ``(v_j, v_k)`` (one of ``c_j x c_k`` values) with the oracle of
option ``oracle`` (default ``"auto"``, see :mod:`ldp.rangequery.grids`; ``"olh"`` is the paper's) at the full
epsilon. The noisy marginals go through CALM's post-processing, Norm-Sub and
the overall consistency across marginals sharing an attribute with variance-optimal weights, alternated
and ending with Norm-Sub (:mod:`ldp.rangequery.consistency`, shared with TDG/HDG). A 2-D range query is
answered by summing the marginal's entries inside the query (one 2-D prefix sum per pair), and a lambda-D
query by Weighted Update over its C(lambda, 2) 2-D answers (Algorithm 2 of Yang et al.; CALM itself uses
maximum entropy, which the paper replaces by this faster equivalent).

In this code base CALM is exactly TDG with ``g2`` equal to the (padded) domain size: every cell is one
value, so no query ever covers a cell partially.

Option ``norm_sub`` (default True, CALM's post-processing) set to False keeps only the overall consistency
step (no Norm-Sub): on ``64 x 64`` marginals estimated from ``n / C(d, 2)`` users Norm-Sub keeps mostly the
largest noise spikes and makes the answers close to the uniform guess, which this variant shows
(``docs/range_baselines.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ldp.rangequery.base import register_model
from ldp.rangequery.consistency import Table, make_consistent
from ldp.rangequery.grids import TDGMechanism, TDGModel

__all__ = ["CALMMechanism", "CALMModel"]


class CALMMechanism(TDGMechanism):
    """Pairwise full-resolution marginals with consistency.

    Options: ``oracle`` (see :mod:`ldp.rangequery.grids`), ``norm_sub`` (default True; False = the
    consistency step only), ``max_post_rounds`` (default 10), ``wu_threshold`` (default 1/n),
    ``wu_max_iter``, ``clip``, ``group_salt``.
    """

    name = "calm"
    OPTIONS = frozenset(
        {"oracle", "max_report_bits", "norm_sub", "max_post_rounds", "wu_threshold", "wu_max_iter", "clip"}
    )

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        norm_sub = options.get("norm_sub", True)
        if not isinstance(norm_sub, bool):
            raise ValueError(f"option norm_sub must be true or false, got {norm_sub!r}")
        self.norm_sub = norm_sub

    def postprocessed_tables(self, accumulators: Mapping[int, Any]) -> tuple[list[Table], int, int]:
        if self.norm_sub:
            return super().postprocessed_tables(accumulators)
        tables, total = self._tables(accumulators)
        make_consistent(tables, self.n_attributes)
        return tables, total, 0

    def _granularities(self, options: Mapping[str, Any]) -> tuple[int, int]:
        c = max(self.padded_sizes)
        return c, c

    def finalize(self, accumulators: Mapping[int, Any]) -> CALMModel:
        m = super().finalize(accumulators)
        info = dict(m.info)
        info.pop("g2", None)
        info["norm_sub"] = self.norm_sub
        return CALMModel(
            m.domain_sizes,
            m.n_users,
            pairs=m.pairs,
            grids=m.grids,
            var0=m.var0,
            info=info,
            wu_threshold=m.wu_threshold,
            wu_max_iter=m.wu_max_iter,
            clip=m.clip,
            epsilon=m.epsilon,
            oracles=m.oracle_specs,
            counts=m.counts,
        )


@register_model("calm")
class CALMModel(TDGModel):
    """CALM's model: full-resolution pairwise marginals (answers by summation)."""

    def __init__(self, domain_sizes: Sequence[int], n_users: int, **kw: Any) -> None:
        super().__init__(domain_sizes, n_users, **kw)
