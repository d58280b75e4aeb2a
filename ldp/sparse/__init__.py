"""k-sparse vector mean estimation under LDP (Zhou et al., S&P 2022) and its baselines.

* :mod:`ldp.sparse.params`: neighbouring relations, b / eta / Delta rules, discretisation;
* :mod:`ldp.sparse.hashes`: per-report bin and sign hashes (gf2-affine, mix64, blake2b);
* :mod:`ldp.sparse.encode`: the O(k + b) client;
* :mod:`ldp.sparse.accumulate`: query-set and whole-vector accumulators, estimates with std;
* :mod:`ldp.sparse.baselines`: k-fold, sampling, Gaussian (classical and analytic), Harmony, PCKV-GRR;
* :mod:`ldp.sparse.mechanisms`: one factory by task name (svme, kfold, sampling, gaussian, harmony, pckv).
"""

from ldp.sparse.accumulate import SVME, QueryAccumulator, SparseEstimate, TableAccumulator
from ldp.sparse.encode import EncodeStats, SparseReports, encode
from ldp.sparse.mechanisms import SPARSE_MECHANISMS, make_sparse_mechanism
from ldp.sparse.params import SparseParams, choose_params, neighbour_L
from ldp.sparse.vectors import SparseVectors

__all__ = [
    "SVME",
    "QueryAccumulator",
    "TableAccumulator",
    "SparseEstimate",
    "SparseReports",
    "EncodeStats",
    "encode",
    "SparseParams",
    "choose_params",
    "neighbour_L",
    "SparseVectors",
    "SPARSE_MECHANISMS",
    "make_sparse_mechanism",
]
