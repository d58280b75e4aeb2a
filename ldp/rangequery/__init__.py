"""Multi-dimensional range queries under LDP (Yang et al., VLDB 2021): TDG, HDG and the baselines.

Entry points: :func:`make_mechanism` (by method name), :class:`RangeQuery` and :func:`parse_queries`, the
:class:`RangeMechanism` / :class:`RangeModel` interface (``ldp.rangequery.base``) and
:func:`model_from_dict` to reload a finalized model.
"""

from ldp.rangequery.base import RangeMechanism, RangeModel
from ldp.rangequery.queries import RangeQuery, parse_queries, random_queries, true_answers
from ldp.rangequery.registry import METHODS, make_mechanism, model_from_dict

__all__ = [
    "METHODS",
    "RangeMechanism",
    "RangeModel",
    "RangeQuery",
    "make_mechanism",
    "model_from_dict",
    "parse_queries",
    "random_queries",
    "true_answers",
]
