"""The numeric kind: the mean and quantiles of bounded numeric attributes (``docs/numeric.md``); the
mechanisms live in :mod:`ldp.numeric`.

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/numeric_estimate.avsc``), store
form (:mod:`.flatten`: store output ``numeric``, group = attribute index, item 0 the mean and item ``1 + i``
quantile ``i``) and simulated population (:mod:`.population`); :data:`KIND` is its registry entry.
"""

from __future__ import annotations

from ldp.kinds import Kind, RowKind, ref
from ldp.kinds.numeric.task import NUMERIC_TASK_KIND

__all__ = ["KIND", "numeric_mechanisms"]

_HERE = "ldp.kinds.numeric."
_PACKAGE = "ldp.kinds.numeric"

def numeric_mechanisms() -> dict[str, type]:
    """The numeric mechanisms by name, with the memoized one-bit mean (:mod:`ldp.numeric`)."""
    from ldp.numeric.mechanisms import MECHANISMS
    from ldp.numeric.memo import MEMO_NAME, MemoizedOneBitMean

    return {**MECHANISMS, MEMO_NAME: MemoizedOneBitMean}


KIND = Kind(
    "numeric",
    NUMERIC_TASK_KIND,
    aggregator=ref(_HERE + "aggregate:NumericAggregator"),
    rows=(
        RowKind(
            ref(_HERE + "aggregate:NumericEstimateRow"),
            "numeric_estimate",
            "numeric",
            ref(_HERE + "flatten:flatten_numeric"),
        ),
    ),
    population=ref(_HERE + "population:numeric_population"),
    default_dataset="normal",
    datasets="normal[:MEAN:STD], lognormal[:MU:SIGMA], uniform[:LOW:HIGH] (default: the attribute's "
    "bounds), csv:PATH:COLUMN (several attributes: one spec, or one per attribute joined by ';')",
    users_from_dataset=("csv:",),
    bad_template=ref(_HERE + "population:numeric_template"),
    description="the mean and quantiles of bounded numeric attributes over reports",
    mechanism_registries={"numeric": ref(_PACKAGE + ":numeric_mechanisms")},
    example={
        "task_id": "n",
        "kind": "numeric",
        "mechanism": "hybrid",
        "epsilon": 1.0,
        "attributes": [{"name": "x", "low": 0.0, "high": 10.0}],
    },
    plan=ref(_HERE + "plan:predict"),
)
