"""Tests of Weighted Update (Algorithms 1 and 2, ldp.rangequery.weighted_update) on hand-made cases."""

from itertools import combinations

import numpy as np
import pytest

from ldp.rangequery.weighted_update import block_sums, lambda_d_answers, response_matrices

SEED = np.random.SeedSequence(20210401)


def test_block_sums_hand_made():
    m = np.arange(16, dtype=float).reshape(4, 4)
    np.testing.assert_allclose(
        block_sums(m, 2, 2), [[0 + 1 + 4 + 5, 2 + 3 + 6 + 7], [8 + 9 + 12 + 13, 10 + 11 + 14 + 15]]
    )
    np.testing.assert_allclose(block_sums(m, 4, 1)[:, 0], m.sum(axis=1))
    np.testing.assert_allclose(block_sums(m[None], 1, 2)[0], [[m[:, :2].sum(), m[:, 2:].sum()]])


def _grids_of(truth, g1, g2):
    c = truth.shape[0]
    fj = truth.sum(axis=1).reshape(g1, c // g1).sum(axis=1)
    fk = truth.sum(axis=0).reshape(g1, c // g1).sum(axis=1)
    return fj, fk, block_sums(truth, g2, g2)


def test_response_matrix_marginals_match_grids_after_convergence():
    rng = np.random.default_rng(SEED.spawn(1)[0])
    c, g1, g2 = 16, 8, 4
    truth = rng.random((c, c)) ** 3
    truth /= truth.sum()
    fj, fk, fjk = _grids_of(truth, g1, g2)
    init = np.full((1, c, c), 1.0 / c**2)
    m, sweeps = response_matrices(init, fj[None], fk[None], fjk[None], threshold=1e-12, max_iter=5000)
    assert sweeps[0] < 5000
    # consistent constraints: IPF converges to a matrix satisfying all three grids
    np.testing.assert_allclose(block_sums(m[0], g1, 1)[:, 0], fj, atol=1e-9)
    np.testing.assert_allclose(block_sums(m[0], 1, g1)[0], fk, atol=1e-9)
    np.testing.assert_allclose(block_sums(m[0], g2, g2), fjk, atol=1e-9)
    assert m.min() >= 0 and m.sum() == pytest.approx(1.0)


def test_response_matrix_recovers_product_distribution_and_keeps_zeros():
    # independent attributes with piecewise-constant marginals at the 1-D granularity: exact recovery
    c, g1, g2 = 8, 8, 2
    pj = np.array([1, 2, 3, 4, 4, 3, 2, 1], float)
    pk = np.array([5, 1, 1, 1, 1, 1, 1, 5], float)
    truth = np.outer(pj / pj.sum(), pk / pk.sum())
    fj, fk, fjk = _grids_of(truth, g1, g2)
    init = np.full((c, c), 1.0 / 36)
    init[6:, :] = 0.0  # padding rows: start (and stay) at zero
    init[:, 6:] = 0.0
    m, _ = response_matrices(init[None], fj[None], fk[None], fjk[None], threshold=1e-12)
    assert np.all(m[0, 6:, :] == 0) and np.all(m[0, :, 6:] == 0)
    init2 = np.full((1, c, c), 1.0 / c**2)
    m2, _ = response_matrices(init2, fj[None], fk[None], fjk[None], threshold=1e-13, max_iter=5000)
    np.testing.assert_allclose(m2[0], truth, atol=1e-9)


def test_response_matrix_batch_equals_single():
    rng = np.random.default_rng(SEED.spawn(2)[1])
    c, g1, g2 = 8, 4, 2
    cases = []
    for _ in range(3):
        t = rng.random((c, c))
        cases.append(_grids_of(t / t.sum(), g1, g2))
    init = np.full((3, c, c), 1.0 / c**2)
    mb, _ = response_matrices(init, *[np.stack(x) for x in zip(*cases)], threshold=1e-10)
    for i, (fj, fk, fjk) in enumerate(cases):
        ms, _ = response_matrices(init[:1], fj[None], fk[None], fjk[None], threshold=1e-10)
        np.testing.assert_allclose(mb[i], ms[0], atol=1e-9)


def _pair_answers_of(p, lam):
    """2-D answers of a distribution p over the 2^lam in/out cells (bit t = attribute t inside)."""
    e = np.arange(1 << lam)
    cols = []
    for a, b in combinations(range(lam), 2):
        mask = ((e >> a) & 1).astype(bool) & ((e >> b) & 1).astype(bool)
        cols.append(p[mask].sum())
    return np.array(cols)


@pytest.mark.parametrize("lam", [3, 4, 5])
def test_lambda_d_reproduces_given_2d_answers(lam):
    rng = np.random.default_rng(SEED.spawn(lam + 3)[lam + 2])
    p = rng.random((6, 1 << lam))
    p /= p.sum(axis=1, keepdims=True)
    pairs = np.array([_pair_answers_of(row, lam) for row in p])
    ans, z = lambda_d_answers(pairs, lam, threshold=1e-13, max_iter=20000, return_vectors=True)
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.array([_pair_answers_of(row, lam) for row in z]), pairs, atol=1e-7)
    assert np.all((ans >= 0) & (ans <= 1))


def test_lambda_d_two_attributes_and_symmetric_fixed_point():
    # lambda = 2: the single constraint is the answer itself
    assert lambda_d_answers(np.array([[0.3]]), 2, threshold=1e-12)[0] == pytest.approx(0.3)
    # lambda = 3, the three 2-D answers all equal f: by symmetry the fixed point (the maximum-entropy z with
    # sum 1) is z_111 = w^3 / Z, z_110 = z_101 = z_011 = w / Z and 1 / Z for the four entries with at most one
    # bit set, so Z = w^3 + 3w + 4, and
    # (w^3 + w) / Z = f fixes w. Solved here by bisection.
    f = 0.64
    lo, hi = 1.0, 100.0
    for _ in range(200):
        w = (lo + hi) / 2
        if (w**3 + w) / (w**3 + 3 * w + 4) < f:
            lo = w
        else:
            hi = w
    expected = w**3 / (w**3 + 3 * w + 4)
    ans = lambda_d_answers(np.full((1, 3), f), 3, threshold=1e-14, max_iter=50000)
    assert ans[0] == pytest.approx(expected, abs=1e-6)


def test_lambda_d_input_checks():
    with pytest.raises(ValueError):
        lambda_d_answers(np.zeros((2, 3)), 1, threshold=1e-6)
    with pytest.raises(ValueError):
        lambda_d_answers(np.zeros((2, 4)), 3, threshold=1e-6)
    # clipped to [0, 1]; a zero pair answer forces the answer to zero
    assert lambda_d_answers(np.array([[0.0, 0.5, 1.2]]), 3, threshold=1e-9)[0] == pytest.approx(0.0, abs=1e-9)
