"""The sparse kind: the mean of k-sparse vectors (``docs/sparse_vectors.md``); the mechanisms live in
:mod:`ldp.sparse`.

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/sparse_estimate.avsc``), store
form (:mod:`.flatten`) and simulated population (:mod:`.population`); :data:`KIND` is its registry entry.
"""

from __future__ import annotations

from ldp.kinds import Kind, RowKind, ref
from ldp.kinds.sparse.task import SPARSE_TASK_KIND

__all__ = ["KIND"]

_HERE = "ldp.kinds.sparse."

KIND = Kind(
    "sparse",
    SPARSE_TASK_KIND,
    aggregator=ref(_HERE + "aggregate:SparseAggregator"),
    rows=(
        RowKind(
            ref(_HERE + "aggregate:SparseEstimateRow"),
            "sparse_estimate",
            "sparse",
            ref(_HERE + "flatten:flatten_sparse"),
        ),
    ),
    population=ref(_HERE + "population:sparse_population"),
    default_dataset="supersparse",
    datasets="supersparse, zipf-sparse[:S], csv:PATH (header user_id,item,value)",
    users_from_dataset=("csv:",),
    bad_template=ref(_HERE + "population:sparse_template"),
    command="sparse-mean",
    description="k-sparse vector mean estimation over reports (SVME and its baselines)",
    mechanism_registries={"sparse": ref("ldp.sparse.mechanisms:SPARSE_MECHANISM_CLASSES")},
    example={"task_id": "s", "mechanism": "svme", "epsilon": 1.0, "domain_size": 1000, "sparsity": 4},
    plan=ref(_HERE + "plan:predict"),
)
