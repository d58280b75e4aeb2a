"""Numeric telemetry under LDP (Beam-free): mechanisms on a bounded attribute, fixed-size mergeable
accumulators, per-window estimates (mean with intervals, variance, histogram, quantiles), Wang et al.'s
sample-k-of-m scheme for several attributes and memoized 1BitMean for repeated collection.
``docs/numeric.md`` describes them."""

from ldp.numeric.estimates import DEFAULT_QUANTILES, NumericEstimate, QuantileEstimate, estimate
from ldp.numeric.mechanisms import (
    AUTO_CANDIDATES,
    AUTO_QUANTILE_CANDIDATES,
    MECHANISMS,
    QUANTILE_MECHANISMS,
    NumericAccumulator,
    NumericMechanism,
    choose_numeric_mechanism,
    make_numeric_mechanism,
    resolve_auto,
)

__all__ = [
    "AUTO_CANDIDATES",
    "AUTO_QUANTILE_CANDIDATES",
    "DEFAULT_QUANTILES",
    "MECHANISMS",
    "QUANTILE_MECHANISMS",
    "NumericAccumulator",
    "NumericEstimate",
    "NumericMechanism",
    "QuantileEstimate",
    "choose_numeric_mechanism",
    "estimate",
    "make_numeric_mechanism",
    "resolve_auto",
]
