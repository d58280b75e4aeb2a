"""The frequency kind: one value in ``[0, domain_size)`` per user, estimated by a frequency oracle.

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/estimate.avsc``), store form
(:mod:`.flatten`) and simulated population (:mod:`.population`); :data:`KIND` is its registry entry.
"""

from __future__ import annotations

from ldp.kinds import Kind, RowKind, ref
from ldp.kinds.frequency.task import FREQUENCY_TASK_KIND

__all__ = ["KIND"]

_HERE = "ldp.kinds.frequency."

KIND = Kind(
    "frequency",
    FREQUENCY_TASK_KIND,
    aggregator=ref(_HERE + "aggregate:FrequencyAggregator"),
    rows=(
        RowKind(
            ref(_HERE + "aggregate:EstimateRow"),
            "estimate",
            "estimates",
            ref(_HERE + "flatten:flatten_estimates"),
        ),
    ),
    population=ref(_HERE + "population:frequency_population"),
    default_dataset="zipf",
    datasets="zipf[:EXPONENT], uniform, csv:PATH:COLUMN",
    bad_template=ref(_HERE + "population:frequency_template"),
    description="frequency estimation over reports (batch or streaming)",
    mechanism_registries={
        "frequency": ref("ldp.oracles:MECHANISMS"),
        "memo": ref("ldp.longitudinal.memo:MEMO_MECHANISMS"),
    },
    shuffle_allowed=True,
    typescript_client=True,
    example={"task_id": "f", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4},
    plan=ref(_HERE + "plan:predict"),
)
