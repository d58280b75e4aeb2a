"""Tests of the numeric grid wire (ldp.numeric.grid and the mechanisms built on it): exact eps-LDP over every
pair of grid inputs and message (integer / Fraction arithmetic), exact unbiasedness, sampler laws, and the
floating-point attack on the wire (bit cells and value cells, Clopper-Pearson at 1e-6)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ldp.audit import cell_counts, float_bit_cells, max_log_ratio_lower_bound, quantile_cells
from ldp.numeric import make_numeric_mechanism
from ldp.numeric.grid import (
    BlockGeometric,
    SlidingWindow,
    TwoPoint,
    block_geometric_for,
    exp_lower,
    rng_uniform,
    round_to_grid,
    sliding_window_for,
    two_point_for,
)

ROOT = np.random.SeedSequence(2026_12_07)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(ROOT.entropy, spawn_key=key))


@pytest.mark.parametrize("x", [0.001, 0.5, 1.0, 2.0, 7.3, 50.0])
def test_exp_lower_is_a_tight_lower_bound(x):
    lo = exp_lower(x)
    # The partial sums of e^x's series only grow toward e^x; mpmath-free check at double precision.
    assert float(lo) <= math.exp(x) * (1 + 1e-15)
    assert float(lo) >= math.exp(x) * (1 - 1e-14)
    assert lo <= exp_lower(x + 1e-9)


def _max_ratio(rows: list[list[Fraction]]) -> Fraction:
    """max over inputs j, j' and message m of P[m | j] / P[m | j'] (exact); infinite if a message has
    probability 0 under one input only."""
    worst = Fraction(1)
    for m in range(len(rows[0])):
        col = [r[m] for r in rows]
        if min(col) == 0:
            if max(col) > 0:
                return Fraction(10**30)
            continue
        worst = max(worst, max(col) / min(col))
    return worst


def _small_grids(eps: float) -> dict[str, tuple[list[list[Fraction]], Fraction]]:
    """The mechanisms' samplers at small input grids (N = 6), as exact rows ``P[. | j]``."""
    big_l = exp_lower(eps)
    n = 6
    pm = sliding_window_for(big_l, math.exp(-eps / 2), n_steps=n, min_width=3)
    sw = sliding_window_for(big_l, 0.4, n_steps=n, min_width=3)
    duchi = two_point_for(big_l, n_steps=n)
    alpha = Fraction(round((1 - math.exp(-eps / 2)) * 2**62), 2**62)
    hybrid = [[alpha * p for p in pm.pmf(j)] + [(1 - alpha) * p for p in duchi.pmf(j)] for j in range(n + 1)]
    lap = block_geometric_for(big_l, n_steps=n)
    z = 4  # messages whose block index is within 4 of every input's: the ratio is the same further out
    lap_rows = [[lap.pmf_at(j, m) for m in range(-z * n, (z + 1) * n)] for j in range(n + 1)]
    return {
        "piecewise": ([pm.pmf(j) for j in range(n + 1)], big_l),
        "square-wave": ([sw.pmf(j) for j in range(n + 1)], big_l),
        "duchi": ([duchi.pmf(j) for j in range(n + 1)], big_l),
        "hybrid": (hybrid, big_l),
        "laplace": (lap_rows, big_l),
    }


@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0, 6.0])
def test_exact_ratio_over_every_pair_and_message(eps):
    for name, (rows, big_l) in _small_grids(eps).items():
        if name != "laplace":
            assert all(sum(r) == 1 for r in rows), name
        ratio = _max_ratio(rows)
        assert ratio <= big_l, (name, float(ratio), float(big_l))  # big_l <= e^eps (a series' partial sum)
        assert ratio > big_l * Fraction(999, 1000) or eps > 5, name  # and the budget is used


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 2.0, 4.0, 10.0, 30.0])
@pytest.mark.parametrize("name", ["duchi", "piecewise", "hybrid", "laplace", "one-bit-mean", "square-wave"])
def test_production_grids_respect_the_ratio_on_integers(name, eps):
    mech = make_numeric_mechanism(name, eps, 0.0, 1.0)
    big_l = exp_lower(eps)
    parts = [mech._pm.grid, mech._duchi.grid] if name == "hybrid" else [mech.grid]
    for g in parts:
        if isinstance(g, SlidingWindow):
            assert g.high * 1 <= big_l * g.low  # h / l <= L, integers
            assert g.total < 2**62
        elif isinstance(g, TwoPoint):
            assert (g.base + g.n_steps * g.slope) <= big_l * g.base
        else:
            assert isinstance(g, BlockGeometric)
            assert 2**62 <= big_l * g.threshold  # 1 / rho <= L


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_unbiased_exactly_on_small_grids(eps):
    big_l = exp_lower(eps)
    n = 5
    for win in (sliding_window_for(big_l, math.exp(-eps / 2), n_steps=n, min_width=2),
                sliding_window_for(big_l, 0.6, n_steps=n, min_width=2)):
        alpha, beta, (c0, c1, c2) = win.moments()
        for j in range(n + 1):
            p = win.pmf(j)
            mean = sum(m * q for m, q in enumerate(p))
            var = sum(m * m * q for m, q in enumerate(p)) - mean * mean
            assert mean == alpha + beta * j
            assert var == c0 + c1 * j + c2 * j * j
    duchi = two_point_for(big_l, n_steps=n)
    for j in range(n + 1):
        p1 = duchi.pmf(j)[1]
        assert duchi.c * (2 * p1 - 1) == Fraction(2 * j, n) - 1  # E[y | j] = t_j exactly


@pytest.mark.statistical
def test_samplers_draw_their_exact_laws():
    # Each message's frequency over 200,000 draws is within 5 binomial SE of its exact probability
    # (about 70 cells per check: the chance that any exceeds 5 SE is below 1e-4).
    rng = _rng(1)
    n = 200_000
    big_l = exp_lower(1.0)
    win = sliding_window_for(big_l, 0.4, n_steps=8, min_width=4)
    pt = two_point_for(big_l, n_steps=8)
    for j in (0, 3, 8):
        for g in (win, pt):
            m = g.sample(np.full(n, j), rng_uniform(rng))
            p = np.array([float(x) for x in g.pmf(j)])
            f = np.bincount(m, minlength=p.size) / n
            assert np.all(np.abs(f - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12)
    lap = block_geometric_for(big_l, n_steps=8)
    m = lap.sample(np.full(n, 3), rng_uniform(rng))
    for k in range(-16, 24):
        p = float(lap.pmf_at(3, k))
        assert abs(np.mean(m == k) - p) <= 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.statistical
def test_rounding_is_unbiased():
    # E[t_j] = t: mean of 400,000 rounded draws within 5 SE (SE <= (2 / N) / 2 / sqrt(n)).
    rng = _rng(2)
    n, steps = 400_000, 16
    for t in (-1.0, -0.37, 0.0, 0.5, 0.99, 1.0):
        j = round_to_grid(np.full(n, t), steps, rng_uniform(rng))
        assert j.min() >= 0 and j.max() <= steps
        assert abs((2 * j / steps - 1).mean() - t) <= 5 * (1 / steps) / math.sqrt(n)


def _old_float_piecewise(t: float, n: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    """The retired float wire (schema version 2's Piecewise), reproduced to show the attack finds it."""
    c = 1.0 / math.tanh(eps / 4.0)
    left = 0.5 * (c + 1.0) * t - 0.5 * (c - 1.0)
    centre = rng.random(n) < 1.0 / (1.0 + math.exp(-eps / 2.0))
    w = rng.random(n)
    z = w * (c + 1.0)
    tail = np.where(z < left + c, z - c, z - c + (c - 1.0))
    return np.where(centre, left + w * (c - 1.0), tail)


def _attack(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Clopper-Pearson lower bounds (1e-6, Bonferroni over cells) of the max log ratio in bit cells
    (binary exponent, trailing zero bits) and in 50 value-quantile cells."""
    bits = cell_counts(float_bit_cells(a), float_bit_cells(b))
    vals = cell_counts(*quantile_cells(a, b, 50))
    return (max_log_ratio_lower_bound(*bits, a.size, b.size, alpha=1e-6),
            max_log_ratio_lower_bound(*vals, a.size, b.size, alpha=1e-6))


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["piecewise", "hybrid", "laplace", "square-wave", "duchi"])
def test_floating_point_attack_finds_nothing_on_the_grid_wire(name):
    # 200,000 reports per input at the attribute's bounds, eps = 2: the lower bound is below the true
    # ratio with probability 1 - 1e-6, and the true ratio is at most e^2, so a bound above 2 is a leak.
    eps, n = 2.0, 200_000
    mech = make_numeric_mechanism(name, eps, 10.0, 500.0)
    rng = _rng(3, ["piecewise", "hybrid", "laplace", "square-wave", "duchi"].index(name))
    a = mech.encode(np.full(n, 10.0), rng=rng).reals
    b = mech.encode(np.full(n, 500.0), rng=rng).reals
    bits, values = _attack(a, b)
    assert bits <= eps and values <= eps, (bits, values)


@pytest.mark.statistical
def test_the_attack_breaks_the_retired_float_wire():
    # Negative control: the same attack on the float Piecewise of schema version 2 (issue 27: 6.95).
    eps, n = 2.0, 200_000
    rng = _rng(4)
    bits, _ = _attack(_old_float_piecewise(-1.0, n, eps, rng), _old_float_piecewise(1.0, n, eps, rng))
    assert bits > 2 * eps, bits


# ------------------------------------------------------------------------------------------------
# schema version 3: the task and its reports
# ------------------------------------------------------------------------------------------------
_TASK = {"task_id": "lat-1", "kind": "numeric", "mechanism": "piecewise", "epsilon": 2.0,
         "attributes": [{"name": "latency_ms", "low": 0, "high": 500}]}


def test_numeric_tasks_are_version_3_and_version_2_is_retired():
    from ldp.task import TaskError, parse_task

    assert parse_task(_TASK).schema_version == 3
    assert parse_task({**_TASK, "schema_version": 3}).schema_version == 3
    for mech in ("piecewise", "hybrid", "laplace", "square-wave", "duchi", "auto", "one-bit-mean"):
        with pytest.raises(TaskError, match="float_reals_retired"):
            parse_task({**_TASK, "mechanism": mech, "schema_version": 2})
    freq = {"task_id": "f", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4}
    assert parse_task(freq).schema_version == 2
    with pytest.raises(TaskError, match="schema_version"):
        parse_task({**freq, "schema_version": 3})  # version 3 is the numeric wire only


def test_old_float_reports_and_off_grid_values_are_refused_with_reasons():
    from ldp.aggregate import make_aggregator
    from ldp.task import parse_task
    from wire.records import reports_to_records
    from wire.validate import TaskReportValidator

    task = parse_task(_TASK)
    mech = task.make_mechanism()
    good = mech.encode(np.linspace(0, 500, 6), rng=_rng(5))
    recs = reports_to_records(task.task_id, good, np.full(6, 1_700_000_000_000), schema_version=3)
    old = reports_to_records(task.task_id, good, np.full(6, 1_700_000_000_000), schema_version=2)
    forged = [dict(recs[0], reals=[v]) for v in (0.5, -0.0, float(mech.grid.cells), float("nan"), 1e300)]
    out = TaskReportValidator(make_aggregator(task)).validate(recs + old + forged)
    assert out.n_accepted == 6
    assert out.reason_counts == {"wrong_schema_version": 6, "invalid_payload": 5}
    details = [d["detail"] for d in out.dead_letters if d["reason"] == "invalid_payload"]
    # NaN is refused by the generic payload check (not a finite double) before the grid check
    assert details == ["reals_off_grid", "reals_off_grid", "reals_out_of_range",
                       "reals must hold one finite double", "reals_out_of_range"]


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["hybrid", "piecewise", "laplace", "square-wave"])
def test_multi_attribute_wire_has_no_float_tell(name):
    # Sample-k-of-m (m = 3, k = 2, eps = 4: each attribute at eps 2). Every message slot of 200,000 reports
    # per input (all attributes at their low bounds against all at their high bounds): the reports that
    # carry attribute 1 in the slot (items are sorted, so only attribute 1 appears in both slots), bit
    # cells and value cells, lower bound at most the share eps / k.
    from ldp.numeric.multi import MultiNumeric

    bounds = [(0.0, 10.0), (-5.0, 5.0), (100.0, 500.0)]
    mech = MultiNumeric(name, 4.0, bounds, k=2)
    n = 200_000
    rng = _rng(6, ["hybrid", "piecewise", "laplace", "square-wave"].index(name))
    lows, highs = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    ra = mech.encode(np.tile(lows, (n, 1)), rng=rng)
    rb = mech.encode(np.tile(highs, (n, 1)), rng=rng)
    assert mech.validate(ra)[0].all() and mech.validate(rb)[0].all()
    for slot in range(2):
        a = ra.reals[ra.items[:, slot] == 1, slot]
        b = rb.reals[rb.items[:, slot] == 1, slot]
        assert np.all(a == np.floor(a)) and np.all(b == np.floor(b))  # integer messages only
        bits, values = _attack(a, b)
        assert bits <= 2.0 and values <= 2.0, (slot, bits, values)
