"""The verification level's publication test: exact binomial p-values of ``f = 0`` at few reports."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from ldp.heavy_hitters import PEM, encode_strings
from ldp.heavy_hitters.search import exact_p_values, level_estimates, level_support
from ldp.selection import flag_p_values, p_values

pytestmark: list = []  # fast tier; the Monte Carlo test carries `statistical`

REPORTS = 300  # a verification level this small is where the normal tail is too light
CANDIDATES = 40_000
CUT = 2e-4  # a p-value cut near the Benjamini-Hochberg threshold of a few discoveries among 2048


def _null_estimates(seed: int):
    """Estimates of CANDIDATES random 4-byte strings that none of REPORTS verification users holds."""
    pem = PEM(4.0, 4, top_k=8)
    lv = pem.levels[-1]
    assert lv.verify and lv.sketch is None
    rng = np.random.default_rng(seed)
    users = encode_strings([b"u" + bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(REPORTS)], 4)
    reports = pem.encode(users, rng=rng, level=lv.index)
    cands = encode_strings([b"c" + bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(CANDIDATES)],
                           4).words()
    support = level_support(lv, np.asarray(reports.seed), np.asarray(reports.y), None, cands)
    f, std = level_estimates(support, REPORTS, REPORTS, lv)
    return lv, support, f, std


def test_exact_p_values_are_the_binomial_tail_of_the_support_count():
    lv, support, f, _ = _null_estimates(0)
    assert lv.q == pytest.approx(1 / lv.g)
    want = np.where(f > 0, np.minimum(1.0, 2 * binom.sf(support - 1, REPORTS, lv.q)), 1.0)
    np.testing.assert_allclose(exact_p_values(f, REPORTS, lv), want, rtol=1e-12)


@pytest.mark.statistical
def test_exact_p_values_hold_their_level_where_the_normal_ones_do_not():
    """Over 2 x 40,000 null candidates, P[p <= CUT] is at most CUT for the exact p-values: the expected
    count is at most 16, and 16 + 4 sd (sd = 4) = 32 bounds it. The normal approximation's count is
    reported beside it and must exceed the exact one (its tail at q = 1/64, 300 reports is too light)."""
    exact = normal = 0
    for seed in (1, 2):
        lv, _, f, std = _null_estimates(seed)
        exact += int(np.sum(exact_p_values(f, REPORTS, lv) <= CUT))
        null_sd = np.sqrt(lv.q * (1 - lv.q) / (REPORTS * (lv.p - lv.q) ** 2))
        normal += int(np.sum(p_values(f, np.full(f.size, null_sd)) <= CUT))
    bound = 2 * CANDIDATES * CUT
    assert exact <= bound + 4 * np.sqrt(bound), (exact, normal)
    assert normal > exact, (exact, normal)


def test_flag_p_values_applies_both_rules_over_the_whole_domain():
    p = np.array([1e-6, 0.004, 0.02, 0.5])
    assert flag_p_values(p, 10, "bonferroni", 0.05).tolist() == [True, True, False, False]
    assert flag_p_values(p, 10, "bh", 0.05).tolist() == [True, True, False, False]
    assert flag_p_values(p, 4, "bh", 0.05).tolist() == [True, True, True, False]
    with pytest.raises(ValueError, match="unknown multiple-comparison rule"):
        flag_p_values(p, 4, "holm")
    with pytest.raises(ValueError, match="4 p-values given for a domain of 3"):
        flag_p_values(p, 3)
