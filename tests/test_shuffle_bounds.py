"""The mechanism-specific shuffle bounds (ldp.shuffle.variation) against exact privacy curves
(ldp.shuffle.lower_bounds): never below the exhaustive worst case at small n, never below the two-count
lower bound at large n and close to it, fast.

The exact references share nothing with the bound's evaluation: the exhaustive curve is a dynamic program
over users on the shuffled histogram, maximized over every split of the other users' values and both
directions; the two-count curve is a direct sum over both counts. Everything is deterministic. Each test
prints its figures (``pytest -s`` shows them).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from ldp.shuffle import accountant as acc
from ldp.shuffle import lower_bounds as lb
from ldp.shuffle.variation import (
    central_epsilon_variation,
    variation_delta,
    variation_parameters,
)

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier; the slowest enumerations are integration

EPS_GRID = np.array([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8])


def _check_curve(name: str, exact: np.ndarray, bound: np.ndarray) -> None:
    print(f"{name}: exact {np.array2string(exact, precision=5)}")
    print(f"{' ' * len(name)}  bound {np.array2string(bound, precision=5)}")
    assert (bound >= exact - 1e-12).all(), (exact, bound)


def _check_reported(channel: np.ndarray, n: int, eps0: float, delta: float, mechanism: str,
                    size: int) -> None:
    """The accountant's reported figure is at or above the exact epsilon at ``delta`` (from below)."""
    exact_eps = lb.epsilon_at(lambda e: lb.histogram_delta(channel, n, e), delta, eps0, tol=1e-5)
    rep = acc.central_epsilon_report(eps0, n, delta, mechanism, size)
    print(f"{mechanism} {size} n={n} eps0={eps0} delta={delta:g}: exact {exact_eps:.5f}, reported "
          f"{rep.epsilon:.5f} ({rep.method})")
    assert rep.epsilon >= exact_eps


@pytest.mark.parametrize(("k", "n"), [(3, 30), (4, 16)])
def test_grr_small_n_exhaustive(k: int, n: int) -> None:
    for eps0 in (0.5, 1.0, 2.0):
        exact = lb.histogram_delta(lb.grr_channel(eps0, k), n, EPS_GRID)
        bound = variation_delta(EPS_GRID, n, variation_parameters("grr", eps0, k))
        _check_curve(f"grr k={k} n={n} eps0={eps0}", exact, bound)
    _check_reported(lb.grr_channel(1.0, k), n, 1.0, 0.05, "grr", k)


@pytest.mark.integration  # about 10 s: 6,435 histograms of 8 outputs, 1,716 splits
def test_grr_k8_exhaustive() -> None:
    n = 8
    for eps0 in (0.5, 1.0, 2.0):
        exact = lb.histogram_delta(lb.grr_channel(eps0, 8), n, EPS_GRID)
        bound = variation_delta(EPS_GRID, n, variation_parameters("grr", eps0, 8))
        _check_curve(f"grr k=8 n={n} eps0={eps0}", exact, bound)
    _check_reported(lb.grr_channel(1.0, 8), n, 1.0, 0.05, "grr", 8)


@pytest.mark.parametrize(("d", "g", "n"), [(3, 2, 8), (3, 3, 6), (4, 3, 4)])
def test_olh_small_n_exhaustive(d: int, g: int, n: int) -> None:
    # the complete hash family's pairs have total variation (1 - 1/g) beta_g, below the beta_g the bound
    # uses: this also exercises the bound's growth with beta
    for eps0 in (0.5, 1.0, 2.0):
        exact = lb.histogram_delta(lb.olh_channel(eps0, d, g), n, EPS_GRID)
        bound = variation_delta(EPS_GRID, n, variation_parameters("olh", eps0, g))
        _check_curve(f"olh d={d} g={g} n={n} eps0={eps0}", exact, bound)
    _check_reported(lb.olh_channel(1.0, d, g), n, 1.0, 0.05, "olh", g)


def test_two_count_pair_is_not_an_upper_bound() -> None:
    # why the third count: GRR on 4 values, n = 5, the target holds 0 or 1 and the others 2; the whole
    # histogram has more divergence than the two counts of 0 and 1 (the published variation-ratio pair)
    full = float(lb.histogram_delta(lb.grr_channel(2.0, 4), 5, [0.5])[0])
    two = float(lb.two_count_delta([0.5], 2.0, 5, 4)[0])
    bound = float(variation_delta([0.5], 5, variation_parameters("grr", 2.0, 4))[0])
    print(f"n=5 k=4 eps0=2 eps=0.5: two counts {two:.5f} < histogram worst case {full:.5f} "
          f"<= bound {bound:.5f}")
    assert two < full - 1e-4 and full <= bound


@pytest.mark.parametrize("eps0", [1.0, 4.0])
def test_grr_large_n_against_two_count_lower_bound(eps0: float) -> None:
    n, delta, k = 1_000_000, 1e-9, 1024
    lower = lb.two_count_lower_bound(eps0, n, delta, k)
    start = time.perf_counter()
    rep = acc.central_epsilon_report(eps0, n, delta, "grr", k)
    took = time.perf_counter() - start
    print(f"grr k={k} eps0={eps0} n=1e6 delta=1e-9: lower {lower:.6f}, reported {rep.epsilon:.6f} "
          f"({rep.method}), ratio {rep.epsilon / lower:.4f}, {took:.3f} s")
    assert lower <= rep.epsilon <= 1.25 * lower
    assert rep.method.startswith("variation_ratio")
    assert took < 1.0


def test_olh_and_general_figures() -> None:
    n, delta = 1_000_000, 1e-9
    start = time.perf_counter()
    olh = acc.central_epsilon_report(4.0, n, delta, "olh", 56)
    took = time.perf_counter() - start
    print(f"olh g=56 eps0=4: {olh.epsilon:.5f} ({olh.method}), {took:.3f} s")
    assert olh.epsilon <= 0.040 and took < 1.0
    # any eps0-LDP randomizer: below FMT's numerical figure
    for eps0 in (1.0, 8.0):
        general = acc.central_epsilon_report(eps0, n, delta)
        fmt = acc.central_epsilon_fmt_numerical(eps0, n, delta)
        print(f"general eps0={eps0}: {general.epsilon:.5f} ({general.method}), FMT {fmt:.5f}")
        assert general.epsilon < fmt


def test_every_mechanism_named_and_below_general() -> None:
    n, delta = 100_000, 1e-8
    general = acc.central_epsilon(2.0, n, delta)
    for mech, size in (("olh", 8), ("blh", None), ("oue", None), ("sue", None), ("hr", None), ("ss", 64),
                       ("grr", 64)):
        rep = acc.central_epsilon_report(2.0, n, delta, mech, size)
        print(f"{mech}: {rep.epsilon:.5f} ({rep.method})")
        assert rep.epsilon <= general
        assert rep.method.split(" ")[0] in ("variation_ratio", "grr_blanket", "general")


def _direct(eps0: float, n: int, beta: float, grid: np.ndarray) -> np.ndarray:
    """The three-count pair's curve summed over every count of labels ``t`` and of A/B labels ``S``, no
    blocks: world 0 puts ``P(t) Bin(t, ab)(S) Bin(S, 1/2)(a) (1 + beta)(t - S c + a c) / t`` on ``(t, S, a)``
    (world 1: ``a`` and ``S - a`` swapped)."""
    from scipy import stats

    p = q = math.exp(eps0)
    alpha, c = beta / (p - 1.0), 1.0 - 1.0 / p
    rho, ab = (1.0 + beta) / q, 2.0 * alpha * p / (1.0 + beta)
    out = np.zeros(len(grid))
    for t in range(1, n + 1):
        s = np.arange(t + 1)[:, None]
        a = np.arange(t + 1)[None, :]
        mass = stats.binom.pmf(t - 1, n - 1, rho) * stats.binom.pmf(s, t, ab) * stats.binom.pmf(a, s, 0.5)
        w0 = mass * (1.0 + beta) * (t - s * c + a * c) / t
        w1 = mass * (1.0 + beta) * (t - s * c + (s - a) * c) / t
        out += np.array([np.maximum(w0 - math.exp(e) * w1, 0.0).sum() for e in grid])
    return out


def test_pair_grows_with_beta() -> None:
    # a pair whose total variation is below the mechanism's beta (an OLH seed family whose collision rate
    # is not exactly 1/g) is covered when the pair's curve grows with beta: checked on a grid, unblocked
    # (the blocks' corners move with beta, so the blocked curve need not be monotone; it is above the
    # unblocked one, test below)
    for eps0 in (0.5, 2.0, 6.0):
        for n in (20, 120):
            top = math.tanh(eps0 / 2.0)
            grid = EPS_GRID * eps0
            curves = np.array([_direct(eps0, n, b, grid) for b in np.linspace(0.05, 1.0, 10) * top])
            assert (np.diff(curves, axis=0) >= -1e-13).all(), (eps0, n)


@pytest.mark.parametrize(("mech", "size", "eps0", "n"), [("grr", 16, 1.5, 300), ("olh", 4, 3.0, 200),
                                                        ("general", None, 0.7, 250)])
def test_blocking_is_above_the_unblocked_sum(mech: str, size: int | None, eps0: float, n: int) -> None:
    params = variation_parameters(mech, eps0, size)
    grid = np.array([0.0, 0.05, 0.2, 0.4]) * eps0
    direct = _direct(eps0, n, params.beta, grid)
    blocked = variation_delta(grid, n, params)
    print(f"{mech} eps0={eps0} n={n}: direct {direct}, blocked {blocked}")
    assert (blocked >= direct - 1e-13).all()
    # the charge at the blocks' corners costs little where delta is not tiny (more far in the tails)
    big = direct > 1e-4
    assert (blocked[big] <= 1.25 * direct[big]).all()  # at most 1.13x measured (olh, n = 200)


def test_inverse_and_composition_use_the_tighter_pairs() -> None:
    n, delta = 1_000_000, 1e-9
    start = time.perf_counter()
    eps0 = acc.local_epsilon_for_central(1.0, delta, n, "olh", 56)
    took = time.perf_counter() - start
    print(f"olh g=56: largest eps0 for central 1 at n=1e6: {eps0:.4f} ({took:.2f} s)")
    assert acc.central_epsilon(eps0, n, delta, "olh", 56) <= 1.0 + 1e-4
    assert acc.central_epsilon(eps0 + 0.05, n, delta, "olh", 56) > 1.0
    comp = acc.compose_windows(4.0, n, delta, windows=12, mechanism="grr", domain_size=1024)
    print(f"grr k=1024 eps0=4, 12 windows: tight {comp['tight']:.5f}, basic {comp['basic']:.5f}, "
          f"pair {comp['pairs'][0]}")
    assert comp["pairs"][0] == "variation_ratio" and comp["tight"] <= comp["basic"]
    assert comp["per_window"][0] == pytest.approx(
        central_epsilon_variation(4.0, n, delta / 12, "grr", 1024), rel=1e-12)


def test_accounting_for_oracle() -> None:
    from ldp.oracles import make_oracle

    cases = [("grr", 64, {}, ("grr", 64)), ("olh", 1024, {"g": 64}, ("olh", 64)),
             ("blh", 64, {}, ("blh", None)), ("oue", 64, {}, ("oue", None)), ("sue", 64, {}, ("sue", None)),
             ("hr", 64, {}, ("hr", None)), ("ss", 64, {}, ("ss", 64)),
             ("ss", 64, {"k": 30}, ("general", None))]
    for name, d, params, want in cases:
        oracle = make_oracle(name, 2.0, d, **params)
        assert acc.accounting_for_oracle(oracle) == want, name
        mech, size = want
        assert acc.central_epsilon(2.0, 100_000, 1e-8, mech, size) <= acc.central_epsilon(2.0, 100_000, 1e-8)


@pytest.mark.parametrize(("n", "mech", "size"), [(100_000, "grr", 1024), (1_000_000, "general", None),
                                                 (10_000, "oue", None), (1_000_000, "olh", 56)])
def test_inverse_then_rounding_down_still_meets(n: int, mech: str, size: int | None) -> None:
    # the planner rounds the inverse's eps0 down to 0.001 and checks it against the curve: the figure must
    # not rise as eps0 falls (the fixed block grid); on a grid below the answer it never does
    x = acc.local_epsilon_for_central(1.0, 1e-9, n, mech, size)
    below = np.floor(x * 1000.0) / 1000.0 - np.arange(0, 0.05, 0.001)
    curve = [float(acc.delta_curve([1.0], e, n, mech, size)[0]) for e in below]
    print(f"{mech} n={n}: inverse {x:.5f}, delta(1) from {curve[0]:.3g} at {below[0]:.3f} down")
    assert all(c <= 1e-9 for c in curve) and (np.diff(curve) <= 0).all()
