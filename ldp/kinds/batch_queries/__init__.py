"""The batch-query kind (**central DP**): a batch of linear queries answered by the Gaussian matrix
mechanism over raw records at a trusted aggregator.

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/batch_answer.avsc``), store
form (:mod:`.flatten`) and simulated population (:mod:`.population`); :data:`KIND` is its registry entry.
"""

from __future__ import annotations

from typing import Any

from ldp.kinds import Kind, RowKind, ref
from ldp.kinds.batch_queries.task import BATCH_TASK_KIND

__all__ = ["KIND"]

_HERE = "ldp.kinds.batch_queries."


def _example_aggregator(task: Any) -> Any:
    """A batch task's aggregator of the identity workload, its noise seeded (answers not private)."""
    from ldp.kinds.batch_queries.aggregate import BatchAggregator, parse_workload_spec

    return BatchAggregator(task, parse_workload_spec({"type": "identity"}, task), noise_seed=0)


def _central_privacy(task: Any, windows: int) -> dict[str, Any]:
    """A batch task's central-DP figures: one Gaussian matrix-mechanism release per window, composed by
    basic composition."""
    return {
        "central_epsilon": task.epsilon,
        "central_delta": task.delta * windows if windows > 1 else task.delta,
        "central_epsilon_composed": task.epsilon * windows,
        "central_epsilon_composed_basic": task.epsilon * windows,
        "method": {
            "local": "none: the aggregator sees raw records (central DP)",
            "central": "Gaussian matrix mechanism, one release per window (central DP)",
            "composed": "basic composition: windows * epsilon at windows * delta",
        },
    }


KIND = Kind(
    "batch_queries",
    BATCH_TASK_KIND,
    aggregator=ref(_HERE + "aggregate:BatchAggregator"),
    rows=(
        RowKind(
            ref(_HERE + "aggregate:BatchAnswerRow"),
            "batch_answer",
            "batch",
            ref(_HERE + "flatten:flatten_batch"),
        ),
    ),
    population=ref(_HERE + "population:batch_population"),
    default_dataset="gaussian",
    datasets="gaussian[:RHO], laplace[:RHO], uniform, csv:PATH",
    bad_template=ref(_HERE + "population:batch_template"),
    command="batch-queries",
    description="batch linear queries, Gaussian matrix mechanism (CENTRAL DP: a trusted aggregator, raw "
    "records)",
    ldp_reports=False,
    central_privacy=_central_privacy,
    example_aggregator=_example_aggregator,
    example={
        "task_id": "b",
        "kind": "batch_queries",
        "mechanism": "identity",
        "epsilon": 0.5,
        "attributes": [{"name": "a", "domain_size": 16}],
        "delta": 1e-6,
    },
    plan=ref(_HERE + "plan:predict"),
)
