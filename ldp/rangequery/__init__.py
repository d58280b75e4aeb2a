"""Multi-dimensional range queries under LDP (Yang et al., VLDB 2021): TDG, HDG and the baselines.

Entry points: :func:`make_mechanism` (by method name), :class:`RangeQuery` and :func:`parse_queries`, the
:class:`RangeMechanism` / :class:`RangeModel` interface (``ldp.rangequery.base``) and
:func:`model_from_dict` to reload a finalized model.
"""

from ldp.rangequery.base import RangeMechanism, RangeModel, model_from_dict
from ldp.rangequery.queries import RangeQuery, parse_queries, random_queries, true_answers
from ldp.rangequery.registry import METHODS, RangeTask, make_mechanism, mechanism_from_task, parse_task

__all__ = [
    "METHODS",
    "RangeMechanism",
    "RangeModel",
    "RangeQuery",
    "RangeTask",
    "make_mechanism",
    "mechanism_from_task",
    "model_from_dict",
    "parse_queries",
    "parse_task",
    "random_queries",
    "true_answers",
]
