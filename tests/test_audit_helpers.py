"""Tests of ldp.audit: float bit cells, quantile cells, and the Clopper-Pearson log-ratio lower bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from ldp.audit import (
    cell_counts,
    clopper_pearson,
    float_bit_cells,
    log_ratio_audit,
    max_log_ratio_lower_bound,
    quantile_cells,
)

pytestmark = [pytest.mark.filterwarnings("error::RuntimeWarning")]


def _cell(sign: int, biased_exp: int, tz: int) -> int:
    return ((sign << 11) | biased_exp) * 64 + tz


def test_float_bit_cells_known_values():
    x = np.array([1.0, 1.5, 1.0 + 2.0**-52, -1.0, 0.75, 0.0, 3.0 + 2.0**-51])
    got = float_bit_cells(x)
    want = [
        _cell(0, 1023, 52),
        _cell(0, 1023, 51),
        _cell(0, 1023, 0),
        _cell(1, 1023, 52),
        _cell(0, 1022, 51),
        _cell(0, 0, 52),
        _cell(0, 1024, 0),  # 3 + 2^-51 = 1.5 * 2 + ..., its last fraction bit is set
    ]
    assert got.tolist() == want


def test_float_bit_cells_integers_are_their_doubles():
    ints = np.array([0, 1, 3, -8, 1023, 2**52 + 1], dtype=np.int64)
    assert float_bit_cells(ints).tolist() == float_bit_cells(ints.astype(np.float64)).tolist()
    with pytest.raises(ValueError, match="2\\^53"):
        float_bit_cells(np.array([2**53], dtype=np.int64))
    with pytest.raises(TypeError):
        float_bit_cells(np.array(["a"]))


def test_float_bit_cells_separate_the_piecewise_tell():
    # z - 1 with z in [2, 3) is exact (Sterbenz) and lies on the 2^-51 grid: trailing zeros >= 1 always,
    # while 1 + U (U on the 2^-53 grid, ties rounded to even) has its last fraction bit set a quarter of
    # the time: 2,500 expected of 10,000, standard deviation 43.
    rng = np.random.default_rng(1)
    z = 2.0 + rng.random(10_000)
    a = float_bit_cells(z - 1.0)
    b = float_bit_cells(1.0 + rng.random(10_000))
    assert (a % 64 == 0).sum() == 0
    assert (b % 64 == 0).sum() > 2_000


def test_quantile_cells_pooled_and_ties():
    a = np.arange(100, dtype=float)
    b = np.arange(100, 200, dtype=float)
    ca, cb = quantile_cells(a, b, 4)
    assert ca.min() == 0 and cb.max() == 3
    assert np.bincount(np.concatenate([ca, cb])).tolist() == [50, 50, 50, 50]
    # Two output values: duplicate edges collapse, both values in their own cell.
    ca, cb = quantile_cells(np.zeros(10), np.ones(30), 10)
    assert len(set(ca.tolist())) == 1 and len(set(cb.tolist())) == 1
    assert set(ca.tolist()).isdisjoint(cb.tolist())
    with pytest.raises(ValueError):
        quantile_cells(a, b, 1)


def test_cell_counts_align_on_the_union():
    ca, cb = cell_counts(np.array([5, 5, 7]), np.array([7, 9]))
    assert ca.tolist() == [2, 1, 0] and cb.tolist() == [0, 1, 1]


def test_clopper_pearson_matches_beta_quantiles():
    k = np.array([0, 3, 50, 100])
    lo, up = clopper_pearson(k, 100, 0.01)
    assert lo[0] == 0.0 and up[-1] == 1.0
    assert lo[1] == pytest.approx(beta.ppf(0.01, 3, 98), rel=1e-10)
    assert up[1] == pytest.approx(beta.ppf(0.99, 4, 97), rel=1e-10)
    assert lo[2] == pytest.approx(beta.ppf(0.01, 50, 51), rel=1e-10)


def test_bound_is_infinite_only_for_disjoint_supports_and_bonferroni_widens():
    n = 10_000
    disjoint = max_log_ratio_lower_bound(np.array([n, 0]), np.array([0, n]), n, n)
    assert disjoint > 5  # large, finite: the upper bound of a zero count is positive
    one = max_log_ratio_lower_bound(np.array([6000]), np.array([4000]), n, n)
    # Adding empty-ish cells widens every interval (alpha / 4K) and lowers the bound.
    many = max_log_ratio_lower_bound(np.array([6000] + [0] * 99), np.array([4000] + [0] * 99), n, n)
    assert 0 < many < one < math.log(1.5)
    assert max_log_ratio_lower_bound(np.array([0]), np.array([0]), n, n) == float("-inf")
    with pytest.raises(ValueError):
        max_log_ratio_lower_bound(np.array([1, 2]), np.array([1]), n, n)
    with pytest.raises(ValueError):
        max_log_ratio_lower_bound(np.array([n + 1]), np.array([1]), n, n)


@pytest.mark.statistical
def test_bound_on_randomized_response_is_below_and_near_eps():
    # Binary randomized response at eps = 1: the true max log ratio is exactly 1. The bound holds with
    # probability >= 1 - 1e-6, so it must be <= 1 here; with 10^6 reports per input the two-sided
    # Clopper-Pearson widths at alpha/8 (z ~ 5.5) on p = 0.73 / 0.27 are ~ 5.5 * sqrt(p(1-p)/n) / p,
    # i.e. about 0.0033 and 0.0090 in log scale, so the bound must exceed 1 - 0.02.
    eps = 1.0
    p = math.exp(eps) / (1 + math.exp(eps))
    rng = np.random.default_rng(20240601)
    n = 1_000_000
    a = (rng.random(n) < p).astype(np.int64)
    b = (rng.random(n) < 1 - p).astype(np.int64)
    got = max_log_ratio_lower_bound(*cell_counts(a, b), n, n)
    assert 1 - 0.02 < got <= 1.0
    audit = log_ratio_audit(a.astype(float), b.astype(float), n_quantile_cells=10)
    assert audit["values"] <= 1.0 and audit["bits"] <= 1.0
