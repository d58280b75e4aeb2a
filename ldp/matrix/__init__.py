"""Batch linear queries with the (eps, delta) matrix mechanism (Li & Miklau, "Efficient Batch Query
Answering Under Differential Privacy").  Beam-free.

Modules: ``workloads`` (Gram matrices in closed form), ``strategies`` (identity, H_b, Haar),
``lsa`` (Level Selection Algorithm), ``opt`` (certified convex optimum), ``bounds`` (SVD bound,
expected errors), ``mechanism`` (Gaussian / Laplace matrix mechanism, floating point: simulation),
``discrete`` (integer strategies and the exact discrete Gaussian matrix mechanism: releases),
``separation``, ``gls``.
The mechanism here is *central* DP (a trusted aggregator sees exact counts), except ``gls`` (GLS over LDP
level estimates: LDP, post-processing only); see docs/matrix_mechanism.md.
"""

from ldp.matrix.bounds import NotSupportedError, error_ratio, expected_error, per_query_error, svdb
from ldp.matrix.discrete import DiscreteGaussianMatrixMechanism, integer_strategy
from ldp.matrix.gls import GLS, LevelGroup, groups_from_lsa, oracle_block_variances
from ldp.matrix.lsa import lsa
from ldp.matrix.mechanism import CALIBRATIONS, GaussianMatrixMechanism, LaplaceMatrixMechanism
from ldp.matrix.opt import gram_root, opt
from ldp.matrix.separation import marginal_parts, separate
from ldp.matrix.strategies import Strategy, haar, hierarchical, identity, make_strategy
from ldp.matrix.workloads import Workload, allrange, parse_workload

__all__ = [
    "CALIBRATIONS",
    "DiscreteGaussianMatrixMechanism",
    "GLS",
    "LevelGroup",
    "GaussianMatrixMechanism",
    "LaplaceMatrixMechanism",
    "NotSupportedError",
    "Strategy",
    "Workload",
    "allrange",
    "error_ratio",
    "gram_root",
    "groups_from_lsa",
    "expected_error",
    "haar",
    "hierarchical",
    "identity",
    "integer_strategy",
    "lsa",
    "make_strategy",
    "marginal_parts",
    "opt",
    "oracle_block_variances",
    "parse_workload",
    "per_query_error",
    "separate",
    "svdb",
]
