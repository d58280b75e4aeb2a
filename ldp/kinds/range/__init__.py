"""The range kind: multi-dimensional range queries over a public product domain (local DP).

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`: answers, ``schemas/range_answer.avsc``,
and models, ``schemas/range_model.avsc``), store form (:mod:`.flatten`) and simulated population
(:mod:`.population`); :data:`KIND` is its registry entry.
"""

from __future__ import annotations

from typing import Any

from ldp.kinds import Kind, RowKind, ref
from ldp.kinds.range.task import RANGE_TASK_KIND

__all__ = ["KIND", "range_methods"]

_HERE = "ldp.kinds.range"


def _example_aggregator(task: Any) -> Any:
    """A range task's aggregator answering one query: the lower half of the first attribute."""
    from ldp.kinds.range.aggregate import RangeAggregator
    from ldp.rangequery.queries import parse_queries

    half = max(task.domain_sizes[0] // 2 - 1, 0)
    queries = parse_queries([{task.attribute_names[0]: [0, half]}], task.attribute_names, task.domain_sizes)
    return RangeAggregator(task, queries)


def range_methods() -> dict[str, type]:
    """The range methods by name, each imported (:mod:`ldp.rangequery.registry`)."""
    from ldp.rangequery.registry import METHODS, load_method

    return {method: load_method(method) for method in METHODS}


KIND = Kind(
    "range",
    RANGE_TASK_KIND,
    aggregator=ref(_HERE + ".aggregate:RangeAggregator"),
    rows=(
        RowKind(
            ref(_HERE + ".aggregate:ModelRow"),
            "range_model",
            None,
            not_stored="a window's model publishes no number (OUT/models keeps it)",
        ),
        RowKind(
            ref(_HERE + ".aggregate:AnswerRow"),
            "range_answer",
            "answers",
            ref(_HERE + ".flatten:flatten_answers"),
        ),
    ),
    population=ref(_HERE + ".population:range_population"),
    default_dataset="gaussian",
    datasets="gaussian[:RHO], laplace[:RHO], uniform, csv:PATH",
    assignments=("random", "balanced", "user_id"),
    bad_template=ref(_HERE + ".population:range_template"),
    command="range-queries",
    description="multi-dimensional range queries over reports",
    mechanism_registries={"range": ref(_HERE + ":range_methods")},
    shuffle_allowed=True,
    example_aggregator=_example_aggregator,
    example={
        "task_id": "r",
        "mechanism": "hdg",
        "epsilon": 1.0,
        "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 8}],
        "expected_users": 1000,
    },
    plan=ref(_HERE + ".plan:predict"),
)
