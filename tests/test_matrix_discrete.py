"""The discrete Gaussian matrix mechanism (ldp.matrix.discrete): integer forms of the strategies, exact
sensitivity, calibration and its refusals, exact variances, integer measurements."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ldp import dgauss
from ldp.matrix.discrete import DiscreteGaussianMatrixMechanism, check_calibration, integer_strategy
from ldp.matrix.mechanism import paper_calibration, paper_max_epsilon
from ldp.matrix.strategies import Strategy, make_strategy
from ldp.matrix.workloads import allrange

CASES = [
    ("identity", (16,), "exact"),
    ("h2", (16,), "exact"),
    ("haar", (16,), "exact"),
    ("haar", (6, 5), "exact"),
    ("h2", (6, 5), "weighted"),
    ("lsa", (32,), "weighted"),
    ("opt", (16,), "quantised"),
]


@pytest.mark.parametrize(("name", "dims", "kind"), CASES)
def test_integer_forms(name, dims, kind):
    """Exact and weighted forms are the strategy itself (A = diag(sqrt c) B to rounding of sqrt) with
    the same sensitivity; a quantised one is B = round(s A), |B/s - A| <= 1/(2s) entrywise."""
    st = make_strategy(name, allrange(dims))
    ist = integer_strategy(st)
    assert ist.kind == kind and ist.b.dtype == np.int64 and np.all(ist.c >= 1)
    if kind == "quantised":
        assert np.max(np.abs(ist.b / ist.scale - st.matrix)) <= 0.5 / ist.scale
        assert np.abs(ist.b).max() <= 2**16
    else:
        np.testing.assert_allclose(ist.matrix, st.matrix, rtol=1e-12, atol=1e-12)
        assert ist.sensitivity2 == round(st.sensitivity() ** 2)
    # S is the exact integer max_j sum_i c_i B_ij^2
    cols = [sum(int(c) * int(v) ** 2 for c, v in zip(ist.c, col)) for col in ist.b.T]
    assert ist.sensitivity2 == max(cols)


@pytest.mark.parametrize(("name", "dims", "kind"), CASES)
def test_mechanism_calibration_and_variance(name, dims, kind):
    """rho = k^2 S / (2 sigma^2) meets the (eps, delta) target; sigma^2 is a dyadic rational at or above
    the calibration's; the per-query variance is the exact sandwich W A^+ diag(v) A^+T W^T."""
    wl = allrange(dims)
    st = make_strategy(name, wl)
    mech = DiscreteGaussianMatrixMechanism(st, 0.5, 1e-6, max_contributions=2)
    target = dgauss.zcdp_rho(0.5, 1e-6)
    assert mech.rho <= Fraction(target) and float(mech.rho) >= target * (1 - 1e-9)
    assert mech.sigma2.denominator & (mech.sigma2.denominator - 1) == 0  # a power of two
    assert dgauss.zcdp_delta(float(mech.rho), 0.5) <= 1e-6
    w = wl.matrix()
    lmat = np.linalg.pinv(mech.a / mech.istrategy.scale)
    cov = (lmat * mech.row_variance) @ lmat.T
    np.testing.assert_allclose(mech.query_variance(w), np.einsum("ij,jk,ik->i", w, cov, w), rtol=1e-8)
    assert mech.expected_total_error(wl.gram) == pytest.approx(np.trace(wl.gram @ cov), rel=1e-8)
    assert np.all(mech.row_variance <= float(mech.sigma2) / mech.istrategy.scale**2)  # c_i Var <= sigma^2


def test_measure_is_exact_integers():
    st = make_strategy("h2", allrange((8,)))
    mech = DiscreteGaussianMatrixMechanism(st, 1.0, 1e-6)
    x = np.array([3, 0, 1, 4, 1, 5, 9, 2])
    m1 = mech.measure(x, dgauss.PrfStream(b"k" * 32, b"a"))
    m2 = mech.measure(x + np.eye(8, dtype=np.int64)[2], dgauss.PrfStream(b"k" * 32, b"a"))
    assert m1.dtype == np.int64
    np.testing.assert_array_equal(m2 - m1, mech.istrategy.b[:, 2])  # the same stream: only B e_2 moves
    with pytest.raises(ValueError, match="integer counts"):
        mech.measure(x + 0.5, dgauss.OsRandom())


def test_calibrations_refuse_where_they_stop_being_valid():
    """The paper's constant: valid up to eps 9.73 at delta 1e-6 for the continuous Gaussian (exact
    profile), up to 6.73 under the discrete Gaussian's zCDP accounting; beyond, a ValueError names the
    bound. 'analytic' is valid for every epsilon."""
    assert paper_max_epsilon(1e-6) == pytest.approx(9.7328, abs=1e-3)
    paper_calibration(9.7, 1e-6)
    with pytest.raises(ValueError, match=r"epsilon <= 9\.733"):
        paper_calibration(16.0, 1e-6)
    check_calibration("paper", 6.7, 1e-6)
    for eps in (6.8, 9.7, 16.0):
        with pytest.raises(ValueError, match=r"calibration 'paper' is not .* epsilon <= 6\.7"):
            check_calibration("paper", eps, 1e-6)
    with pytest.raises(ValueError, match="epsilon < 1"):
        check_calibration("dwork_roth", 1.5, 1e-6)
    for eps in (0.01, 1.0, 16.0, 100.0):
        assert check_calibration("analytic", eps, 1e-6) > 0
    st = Strategy("identity", np.eye(4))
    with pytest.raises(ValueError, match="epsilon <= 6"):
        DiscreteGaussianMatrixMechanism(st, 16.0, 1e-6, calibration="paper")
    with pytest.raises(ValueError, match="unknown calibration"):
        check_calibration("magic", 1.0, 1e-6)
