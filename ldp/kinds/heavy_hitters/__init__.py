"""The heavy_hitters kind: the frequent strings of a population, found without a domain listed in advance
(PEM, :mod:`ldp.heavy_hitters`; ``docs/heavy_hitters.md``).

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/heavy_hitters_estimate.avsc``),
store form (:mod:`.flatten`: store output ``heavy_hitters``, group 0, one item per published string) and
simulated population (:mod:`.population`); :data:`KIND` is its registry entry.
"""

from __future__ import annotations

from ldp.kinds import Kind, RowKind, ref
from ldp.kinds.heavy_hitters.task import HEAVY_HITTERS_TASK_KIND

__all__ = ["KIND"]

_HERE = "ldp.kinds.heavy_hitters."

KIND = Kind(
    "heavy_hitters",
    HEAVY_HITTERS_TASK_KIND,
    aggregator=ref(_HERE + "aggregate:HeavyHittersAggregator"),
    rows=(
        RowKind(
            ref(_HERE + "aggregate:HeavyHittersRow"),
            "heavy_hitters_estimate",
            "heavy_hitters",
            ref(_HERE + "flatten:flatten_heavy_hitters"),
        ),
    ),
    population=ref(_HERE + "population:heavy_hitters_population"),
    default_dataset="zipf-strings",
    datasets="zipf-strings[:S[:M]] (Zipf(S) over M random strings of max_length bytes; default 1.1:100000), "
    "csv:PATH:COLUMN (one string per row)",
    users_from_dataset=("csv:",),
    bad_template=ref(_HERE + "population:heavy_hitters_template"),
    description="open-domain heavy hitters: the frequent strings, found by PEM (batch or streaming)",
    mechanism_registries={"heavy_hitters": ref(_HERE + "aggregate:MECHANISMS")},
    example={
        "task_id": "h",
        "kind": "heavy_hitters",
        "mechanism": "pem",
        "epsilon": 4.0,
        "max_length": 3,
    },
    plan=ref(_HERE + "plan:predict"),
    shuffle_allowed=True,
)
