"""The variation-ratio parameters ``(p, beta, q)`` of per-report randomizers beyond the named frequency
oracles: any randomizer with a finite output set given by its transition matrix, the numeric mechanisms'
integer-grid samplers, and a range task's per-report randomizer (its groups' oracles); and
:class:`Randomizer`, how a task hands such a randomizer to the accountant.

For a randomizer with output distributions ``mu_x``: ``p`` bounds ``mu_x / mu_x'`` for the pair in
question, ``beta`` is their total variation and ``q`` bounds ``max(mu_x, mu_x') / mu_z`` for every other
user's ``mu_z``. The three-count pair of :mod:`ldp.shuffle.variation` is valid for a pair whose total
variation is exactly ``beta`` with any ``p`` at least its ratio (the decomposition only needs ``p mu_x' >=
mu_x``); charging every pair the largest ``beta`` of the randomizer relies on the pair's divergence
growing with ``beta``, which is checked on a grid (``tests/test_shuffle_randomizers.py``), not proved,
as for OLH's per-seed ``beta`` (docs/shuffle_accounting.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from ldp.shuffle.variation import VariationParameters, variation_parameters

__all__ = [
    "Randomizer",
    "channel_parameters",
    "grid_parameters",
    "worst_parameters",
    "oracle_parameters",
    "range_randomizer",
    "numeric_randomizer",
]


class Randomizer(str):
    """A per-report randomizer for the accountant (``mechanism=`` of ``ldp.shuffle.accountant``): a string
    (its name, what reports and JSON show, e.g. ``"range hdg (worst group: olh, g = 8)"``) that carries
    ``parameters(eps0)``, its ``(p, beta, q)`` when it runs at local epsilon ``eps0`` (the inverse asks at
    many)."""

    parameters: Callable[[float], VariationParameters]

    def __new__(cls, name: str, parameters: Callable[[float], VariationParameters]) -> Randomizer:
        out = super().__new__(cls, name)
        out.parameters = parameters
        return out

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as its name: the parameters are a closure
        return str, (str(self),)


def channel_parameters(matrix: np.ndarray) -> VariationParameters:
    """``(p, beta, q)`` of the randomizer whose row ``x`` is the output distribution of input ``x``:
    ``p = q`` the largest ratio of two rows' probabilities of one output (outputs no input produces are
    dropped), ``beta`` the largest total variation between two rows. Raises ``ValueError`` for a matrix
    that is not row-stochastic or gives some output probability 0 under one input and not another (no
    finite epsilon: not an LDP randomizer)."""
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] < 2 or (m < 0).any() or not np.allclose(m.sum(axis=1), 1.0, atol=1e-9):
        raise ValueError("a randomizer's matrix has at least two rows of probabilities summing to 1")
    m = m[:, m.max(axis=0) > 0]
    lowest = m.min(axis=0)
    if (lowest <= 0).any():
        raise ValueError("some output has probability 0 under one input and not another: not eps-LDP")
    ratio = float((m.max(axis=0) / lowest).max())
    beta = 0.0
    for i in range(m.shape[0] - 1):  # row i against every later row, one vectorized pass each
        beta = max(beta, float(0.5 * np.abs(m[i + 1:] - m[i]).sum(axis=1).max()))
    return VariationParameters(ratio, beta, ratio)


def grid_parameters(sampler: Any) -> VariationParameters:
    """``(p, beta, q)`` of a numeric mechanism's integer-grid sampler (``ldp.numeric.grid``), exactly from
    its integers: ``p = q`` its likelihood-ratio bound; ``beta`` the total variation of its two extreme
    inputs (``j = 0`` and ``N``), the largest of any pair: TwoPoint ``N d / S``; SlidingWindow ``min(N s, w)
    (h - l) / S`` (the windows' symmetric difference); BlockGeometric ``(1 - rho) / (1 + rho)`` (a shift by
    one block of a unimodal law moves half its total variation, ``P[Z = 0]``)."""
    from ldp.numeric.grid import BlockGeometric, SlidingWindow, TwoPoint

    ratio = float(sampler.ratio())
    if isinstance(sampler, TwoPoint):
        beta = Fraction(sampler.n_steps * sampler.slope, sampler.total)
    elif isinstance(sampler, SlidingWindow):
        moved = min(sampler.n_steps * sampler.step, sampler.width)
        beta = Fraction(moved * (sampler.high - sampler.low), sampler.total)
    elif isinstance(sampler, BlockGeometric):
        beta = (1 - sampler.rho) / (1 + sampler.rho)
    else:
        raise ValueError(f"no grid parameters for {type(sampler).__name__}")
    return VariationParameters(ratio, float(beta), ratio)


def worst_parameters(params: list[VariationParameters]) -> VariationParameters:
    """One ``(p, beta, q)`` covering a uniform random choice among randomizers (a range task's groups):
    the mixture's pair ratio, total variation (an average) and blanket ratio are at most the largest."""
    if not params:
        raise ValueError("no randomizer to cover")
    return VariationParameters(max(x.p for x in params), max(x.beta for x in params),
                               max(x.q for x in params))


def oracle_parameters(oracle: Any) -> VariationParameters:
    """``(p, beta, q)`` of a frequency oracle (``ldp.oracles``) by its own name and parameters, else the
    general ones of an ``epsilon``-LDP randomizer."""
    from ldp.shuffle.accountant import accounting_for_oracle

    name, size = accounting_for_oracle(oracle)
    eps = float(oracle.epsilon)
    if name == "ss":
        return variation_parameters("ss", eps, size, int(oracle.k))
    return variation_parameters(name, eps, size)


def range_randomizer(task: Any) -> Randomizer:
    """A range task's per-report randomizer: a group drawn uniformly at random, the record projected and
    reported with the group's oracle at the full epsilon (``ldp.rangequery``); covered by the worst of its
    groups' parameters (:func:`worst_parameters`). Groups keyed on user ids are not a random draw per
    report: such a task's reports are accounted as for any randomizer (``general``)."""
    import dataclasses

    def groups_at(eps0: float) -> list[VariationParameters]:
        mech = dataclasses.replace(task, epsilon=float(eps0)).make_mechanism()
        return [oracle_parameters(mech.group_oracle(g)) for g in range(mech.n_groups)]

    here = task.make_mechanism()
    names = sorted({_oracle_label(here.group_oracle(g)) for g in range(here.n_groups)})
    label = f"range {task.mechanism} ({here.n_groups} groups: {', '.join(names)})"
    return Randomizer(label, lambda eps0: worst_parameters(groups_at(eps0)))


def _oracle_label(oracle: Any) -> str:
    from ldp.shuffle.accountant import accounting_for_oracle

    name, size = accounting_for_oracle(oracle)
    return name if size is None else f"{name} {size}"


def numeric_randomizer(task: Any) -> Randomizer | None:
    """A numeric task's per-report randomizer when each report carries one attribute (one attribute, or
    ``k = 1`` of several drawn at random): its mechanism's grid sampler (:func:`grid_parameters`); None for
    several attributes per report or a mechanism without a grid (memoized)."""
    import dataclasses

    if getattr(task, "is_memoized", False) or (task.is_multi and task.per_report != 1):
        return None

    def sampler_at(eps0: float) -> Any:
        probe = dataclasses.replace(task, epsilon=float(eps0))
        mech = probe.make_mechanism(0) if not task.is_multi else probe.make_mechanism().mechs[0]
        grid = getattr(mech, "grid", None)
        if grid is None:
            raise ValueError(f"numeric mechanism {task.mechanism!r} has no grid sampler")
        return grid

    try:
        sampler_at(task.epsilon)
    except (ValueError, AttributeError):
        return None
    name = f"numeric {task.resolved_mechanism} grid"
    return Randomizer(name, lambda eps0: grid_parameters(sampler_at(eps0)))


def is_finite_ratio(params: VariationParameters) -> bool:
    """Whether the parameters describe an LDP randomizer (finite ratios, ``beta`` in ``[0, 1)``)."""
    return math.isfinite(params.p) and math.isfinite(params.q) and 0 <= params.beta < 1 and params.p > 1
