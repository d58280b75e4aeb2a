"""The (eps, delta) matrix mechanism: calibrations, the error formula against Monte Carlo, Laplace variant."""

import math

import numpy as np
import pytest

from ldp.matrix import workloads as wl
from ldp.matrix._threads import blas_limit
from ldp.matrix.bounds import NotSupportedError, expected_error, per_query_error
from ldp.matrix.mechanism import (
    CALIBRATIONS,
    GaussianMatrixMechanism,
    LaplaceMatrixMechanism,
    analytic_gaussian_calibration,
    dwork_roth_calibration,
    gaussian_delta,
    paper_calibration,
)
from ldp.matrix.strategies import Strategy, haar, hierarchical, identity

SEED = np.random.SeedSequence(20260902)

@pytest.fixture(autouse=True)
def _one_blas_thread():
    """Small products thrash with two BLAS threads on the shared 2-core machine."""
    with blas_limit():
        yield


def _rng(k):
    return np.random.default_rng(SEED.spawn(k + 1)[k])


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-6), (0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-9)])
def test_calibrations(eps, delta):
    c = analytic_gaussian_calibration(eps, delta)
    # exact privacy profile: delta(c) <= delta, and 0.1% less noise would break it
    assert gaussian_delta(c, eps) <= delta
    assert gaussian_delta(c * 0.999, eps) > delta
    assert c < paper_calibration(eps, delta)
    assert paper_calibration(eps, delta) == pytest.approx(math.sqrt(2 * math.log(2 / delta)) / eps)
    if eps < 1:
        assert c < dwork_roth_calibration(eps, delta) < paper_calibration(eps, delta)
    else:
        with pytest.raises(ValueError, match="epsilon < 1"):
            dwork_roth_calibration(eps, delta)


def test_bad_privacy_parameters_and_inputs():
    with pytest.raises(ValueError):
        paper_calibration(0.0, 1e-5)
    with pytest.raises(ValueError):
        analytic_gaussian_calibration(1.0, 1.5)
    with pytest.raises(ValueError, match="unknown calibration"):
        GaussianMatrixMechanism(identity(4), 1.0, 1e-5, calibration="nope")
    mech = GaussianMatrixMechanism(identity(4), 1.0, 1e-5)
    with pytest.raises(ValueError, match="4 cell counts"):
        mech.measure(np.zeros(5), rng=_rng(0))
    with pytest.raises(ValueError, match="non-finite"):
        mech.measure(np.array([0, 1, np.nan, 2]), rng=_rng(0))
    total = Strategy("total", np.ones((1, 4)))
    with pytest.raises(NotSupportedError):
        GaussianMatrixMechanism(total, 1.0, 1e-5).query_variance(np.eye(4))
    assert set(CALIBRATIONS) == {"analytic", "paper", "dwork_roth"}


def test_sigma_and_replace_neighbours():
    h = hierarchical(16, 2)
    mech = GaussianMatrixMechanism(h, 1.0, 1e-5, calibration="paper")
    assert mech.sigma == pytest.approx(paper_calibration(1.0, 1e-5) * math.sqrt(5))
    rep = GaussianMatrixMechanism(h, 1.0, 1e-5, calibration="paper", neighbours="replace")
    # cells in different halves share only the root: |A(e_u - e_v)|^2 = 2 (levels - 1) = 8
    assert rep.sensitivity == pytest.approx(math.sqrt(8))
    three = GaussianMatrixMechanism(h, 1.0, 1e-5, calibration="paper", max_contributions=3)
    assert three.sigma == pytest.approx(3 * mech.sigma)
    with pytest.raises(ValueError, match="max_contributions"):
        GaussianMatrixMechanism(h, 1.0, 1e-5, max_contributions=0)


@pytest.mark.parametrize("name", ["h2", "haar", "identity"])
@pytest.mark.statistical
def test_error_formula_matches_monte_carlo(name):
    """Spec 7.2: AllRange(64) explicit W, T = 20,000 Gaussian draws.

    SSE_t = z_t^T S z_t with S = (W A^+)^T (W A^+) and z ~ N(0, sigma^2 I), so E[SSE] = sigma^2 tr(S) and
    Var[SSE] = 2 sigma^4 tr(S^2): the mean of T draws has relative standard error
    RSE = sqrt(2 tr(S^2) / T) / tr(S) (0.2-0.7% here); we require |mean / closed - 1| <= 5 RSE (z = 5).
    Per query, the empirical MSE of a Gaussian error over T draws has RSE sqrt(2/T) = 1.0%; over the
    2,080 queries we allow 6 RSE (6%, two-sided tail 2e-9 per query, 4e-6 for all of them).
    """
    n, t_draws = 64, 20000
    w = wl.allrange_matrix((n,))
    strat = {"h2": hierarchical(n, 2), "haar": haar(n), "identity": identity(n)}[name]
    mech = GaussianMatrixMechanism(strat, 1.0, 1e-6, calibration="analytic")
    rng = _rng(1)
    x = rng.integers(0, 1000, size=n).astype(float)
    a = strat.matrix
    # one batched draw of T measurements through the mechanism's own estimator
    y = (a @ x)[:, None] + rng.normal(0.0, mech.sigma, size=(a.shape[0], t_draws))
    err = mech.estimate(y) - x[:, None]  # (n, T) errors of x_hat
    gram = w.T @ w
    sse = np.einsum("it,it->t", gram @ err, err)
    closed = mech.noise_variance * (expected_error(gram, strat) / strat.sensitivity() ** 2)
    wa = w @ np.linalg.pinv(a)
    s = wa.T @ wa
    rse = math.sqrt(2 * np.trace(s @ s) / t_draws) / np.trace(s)
    assert abs(sse.mean() / closed - 1) <= 5 * rse
    assert mech.expected_total_error(gram) == pytest.approx(closed, rel=1e-9)
    # per query: empirical MSE = diag(W E W^T) with E the empirical second moment of the errors
    emp_cov = err @ err.T / t_draws
    per_query_mse = np.einsum("ij,jk,ik->i", w, emp_cov, w)
    predicted = mech.query_variance(w)
    np.testing.assert_allclose(predicted, per_query_error(w, strat) * mech.c**2, rtol=1e-9)
    assert np.max(np.abs(per_query_mse / predicted - 1)) <= 6 * math.sqrt(2 / t_draws)
    # unbiasedness of x_hat: mean error of each cell within 5 standard errors
    se = np.sqrt(np.diag(np.linalg.pinv(a.T @ a)) * mech.noise_variance / t_draws)
    assert np.all(np.abs(err.mean(1)) <= 5 * se)


def test_answer_shapes_and_std():
    rng = _rng(2)
    strat = haar(8)
    mech = GaussianMatrixMechanism(strat, 0.5, 1e-6)
    w = wl.allrange_matrix((8,))
    x = rng.integers(0, 50, size=8)
    ans, std = mech.answer(x, w, rng=rng)
    assert ans.shape == (36,) and std.shape == (36,)
    expect = mech.noise_variance * per_query_error(w, strat) / strat.sensitivity() ** 2
    np.testing.assert_allclose(std**2, expect)
    sparse_w = wl.range_set_matrix((8,), [0, 2], [8, 5])
    np.testing.assert_allclose(mech.query_variance(sparse_w), mech.query_variance(sparse_w.toarray()))


def test_laplace_variant_breaks_minimality():
    """[[1,1],[1,-1]] is column-uniform, yet under L1 it has twice the identity's error (Thm 3.1 fails)."""
    g = wl.allrange_gram(2)
    rot = Strategy("rot", np.array([[1.0, 1.0], [1.0, -1.0]]))
    lap_rot = LaplaceMatrixMechanism(rot, 1.0)
    lap_id = LaplaceMatrixMechanism(identity(2), 1.0)
    err_rot = lap_rot.noise_variance * np.trace(g @ np.linalg.inv(rot.gram()))
    err_id = lap_id.noise_variance * np.trace(g)
    assert err_rot == pytest.approx(2 * err_id)
    # merging duplicate rows a, a into sqrt(2) a keeps A^T A but lowers Delta_1 (Thm 3.2 fails under L1)
    dup = Strategy("dup", np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]]))
    merged = Strategy("merged", np.array([[math.sqrt(2), math.sqrt(2)], [1.0, 0.0]]))
    np.testing.assert_allclose(dup.gram(), merged.gram())
    assert merged.sensitivity_l1() < dup.sensitivity_l1()
    assert merged.sensitivity() == pytest.approx(dup.sensitivity())
    # its noise is Laplace with variance 2 b^2: check the sample variance (RSE sqrt(5/T) for Laplace)
    rng = _rng(3)
    t = 40000
    z = np.stack([lap_id.measure(np.zeros(2), rng=rng) for _ in range(t)])
    assert abs(z.var() / lap_id.noise_variance - 1) <= 5 * math.sqrt(5 / (2 * t))
