"""The variation-ratio parameters ``(p, beta, q)`` of per-report randomizers beyond the named frequency
oracles: any randomizer with a finite output set given by its transition matrix, the numeric mechanisms'
integer-grid samplers (Hybrid's mixture and ``k`` of ``m`` attributes per report included, from the
extreme inputs' output classes), and a range task's per-report randomizer (its groups' oracles); and
:class:`Randomizer`, how a task hands such a randomizer to the accountant.

For a randomizer with output distributions ``mu_x``: ``p`` bounds ``mu_x / mu_x'`` for the pair in
question, ``beta`` is their total variation and ``q`` bounds ``max(mu_x, mu_x') / mu_z`` for every other
user's ``mu_z``. The three-count pair of :mod:`ldp.shuffle.variation` is valid for a pair whose total
variation is exactly ``beta`` with any ``p`` at least its ratio (the decomposition only needs ``p mu_x' >=
mu_x``); charging every pair the largest ``beta`` of the randomizer relies on the pair's divergence
growing with ``beta``, which is checked on a grid (``tests/test_shuffle_randomizers.py``), not proved,
as for OLH's per-seed ``beta`` (docs/shuffle_accounting.md).

:class:`LevelledRandomizer` describes reports that fall into visible groups drawn independently of the
value (a heavy-hitters task's levels, :func:`heavy_hitters_randomizer`): each group has its own randomizer,
and a batch is accounted per group at that group's report count (``ldp.shuffle.accountant``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from scipy import special

from ldp.shuffle.variation import VariationParameters, variation_parameters

__all__ = [
    "Randomizer",
    "channel_parameters",
    "grid_parameters",
    "worst_parameters",
    "oracle_parameters",
    "range_randomizer",
    "numeric_randomizer",
    "extreme_pair",
    "product_parameters",
    "LevelAccounting",
    "LevelledRandomizer",
    "heavy_hitters_randomizer",
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


def extreme_pair(mechanism: Any) -> list[tuple[Fraction, Fraction]]:
    """The output law of a numeric mechanism's two extreme grid inputs (``j = 0`` and ``N``), grouped by
    likelihood ratio: ``(P[class | 0], P[class | N])`` per class, exactly. Every pair of inputs is a
    post-processing of this pair (docs/shuffle_accounting.md), so products of it are the worst case.

    TwoPoint (Duchi, one-bit-mean) and BlockGeometric (Laplace) are binary randomized response at their
    ratio; a SlidingWindow (Piecewise, Square Wave) has its two windows' symmetric difference (``min(N s,
    w)`` cells each side) and the rest (ratio 1); Hybrid is the coin's mixture of its Piecewise and Duchi
    classes (disjoint messages)."""
    from ldp.numeric.grid import BlockGeometric, SlidingWindow, TwoPoint

    parts = getattr(mechanism, "_pm", None), getattr(mechanism, "_duchi", None)
    if parts[0] is not None and parts[1] is not None:  # Hybrid: the coin is exactly T_alpha / 2^62
        alpha = Fraction(int(mechanism.alpha_threshold), 1 << 62)
        mixed = [(alpha * a, alpha * b) for a, b in extreme_pair(parts[0])]
        mixed += [((1 - alpha) * a, (1 - alpha) * b) for a, b in extreme_pair(parts[1])]
        return _merge_classes(mixed)
    grid = getattr(mechanism, "grid", mechanism)
    if isinstance(grid, TwoPoint):
        low = Fraction(grid.base, grid.total)
        return _merge_classes([(1 - low, low), (low, 1 - low)])
    if isinstance(grid, BlockGeometric):
        rho = grid.rho
        return _merge_classes([(1 / (1 + rho), rho / (1 + rho)), (rho / (1 + rho), 1 / (1 + rho))])
    if isinstance(grid, SlidingWindow):
        moved = min(grid.n_steps * grid.step, grid.width)
        hi, lo = Fraction(moved * grid.high, grid.total), Fraction(moved * grid.low, grid.total)
        return _merge_classes([(hi, lo), (lo, hi), (1 - hi - lo, 1 - hi - lo)])
    raise ValueError(f"no grid sampler for {type(mechanism).__name__}")


def _merge_classes(classes: list[tuple[Fraction, Fraction]]) -> list[tuple[Fraction, Fraction]]:
    """Outputs with one likelihood ratio merged (a sufficient statistic: products keep their divergence);
    empty classes dropped."""
    merged: dict[Fraction, tuple[Fraction, Fraction]] = {}
    for a, b in classes:
        if a == 0 and b == 0:
            continue
        if a == 0 or b == 0:
            raise ValueError("an output with probability 0 under one extreme input: not eps-LDP")
        old = merged.get(a / b, (Fraction(0), Fraction(0)))
        merged[a / b] = (old[0] + a, old[1] + b)
    return list(merged.values())


def _compositions(k: int, parts: int) -> np.ndarray:
    """Every vector of ``parts`` non-negative integers summing to ``k`` (one per row)."""
    if parts == 1:
        return np.array([[k]], dtype=np.int64)
    rows = [np.column_stack([np.full(len(rest), first), rest])
            for first in range(k, -1, -1) for rest in [_compositions(k - first, parts - 1)]]
    return np.concatenate(rows)


def product_parameters(classes: list[tuple[Fraction, Fraction]], k: int = 1) -> VariationParameters:
    """``(p, beta, q)`` of ``k`` independent reports of the pair ``classes`` (:func:`extreme_pair`): ``p = q``
    the largest class ratio to the power ``k``; ``beta`` the total variation of the ``k``-fold products,
    summed over every composition of ``k`` into the classes (multinomial weights, in logs), plus a
    relative allowance of ``1e-12`` for rounding, so never below the exact value (``k = 1``: exact in
    rationals)."""
    if k < 1 or not classes:
        raise ValueError(f"a product of k >= 1 reports of a non-empty pair, got k = {k}")
    ratio = max(max(a / b, b / a) for a, b in classes)
    if k == 1:  # exact in rationals
        exact = float(sum((max(a - b, Fraction(0)) for a, b in classes), Fraction(0)))
        return VariationParameters(float(ratio), exact, float(ratio))
    counts = _compositions(int(k), len(classes))
    log_p = np.log(np.array([float(a) for a, _ in classes]))
    log_q = np.log(np.array([float(b) for _, b in classes]))
    multinom = special.gammaln(k + 1.0) - special.gammaln(counts + 1.0).sum(axis=1)
    world0, world1 = np.exp(multinom + counts @ log_p), np.exp(multinom + counts @ log_q)
    beta = float(np.maximum(world0 - world1, 0.0).sum()) + 1e-12 * float((world0 + world1).sum())
    top = float(ratio) ** k
    return VariationParameters(top, min(beta, (top - 1.0) / (top + 1.0)), top)


def numeric_randomizer(task: Any) -> Randomizer | None:
    """A numeric task's per-report randomizer on its grid: one attribute, or ``k`` of ``m`` attributes
    drawn at random, each reported at ``epsilon / k``. The attribute choice does not depend on the values
    and every pair of inputs is dominated by the pair differing on every attribute at its extremes, so the
    parameters are those of ``k`` independent extreme pairs (:func:`extreme_pair`,
    :func:`product_parameters`; Hybrid's mixture included). None for a memoized mechanism (reports
    linkable across windows) or one without a grid sampler."""
    import dataclasses

    if getattr(task, "is_memoized", False):
        return None

    def parameters_at(eps0: float) -> VariationParameters:
        probe = dataclasses.replace(task, epsilon=float(eps0))
        if not probe.is_multi:
            return product_parameters(extreme_pair(probe.make_mechanism(0)), 1)
        return product_parameters(extreme_pair(probe.make_mechanism().mechs[0]), probe.per_report)

    try:
        parameters_at(task.epsilon)
    except (ValueError, AttributeError):
        return None
    name = f"numeric {task.resolved_mechanism} grid"
    if task.is_multi:
        k = task.per_report
        name += f" ({k} of {len(task.attributes)} attributes per report, each at eps0/{k})"
    return Randomizer(name, parameters_at)


def is_finite_ratio(params: VariationParameters) -> bool:
    """Whether the parameters describe an LDP randomizer (finite ratios, ``beta`` in ``[0, 1)``)."""
    return math.isfinite(params.p) and math.isfinite(params.q) and 0 <= params.beta < 1 and params.p > 1


#: a group's planned report count is its binomial mean less this many standard deviations
PLANNED_SD = 4.0


class LevelAccounting(NamedTuple):
    """One group of a :class:`LevelledRandomizer`: its label, the share of a batch's reports it is planned
    to hold, and its randomizer as the accountant names it (``mechanism``, ``domain_size``: ``("olh", g)``,
    ``("grr", k)``)."""

    label: str
    share: float
    mechanism: str
    domain_size: int | None


class LevelledRandomizer(str):
    """Reports in visible groups (levels) whose group does not depend on the value: a string (its name) that
    carries ``levels(eps0)``, each group's :class:`LevelAccounting` when the task runs at local epsilon
    ``eps0`` (a group's randomizer may change with it: OLH's ``g``).

    Only reports of one group can stand in for one another, so a batch is accounted per group at the
    number of its reports in that group, and the batch's figure is the largest (docs/shuffle_accounting.md,
    "Heavy hitters: one bound per level"). Planned figures split a batch of ``n`` by the shares
    (:meth:`planned_counts`)."""

    levels: Callable[[float], tuple[LevelAccounting, ...]]

    def __new__(cls, name: str, levels: Callable[[float], tuple[LevelAccounting, ...]]) -> LevelledRandomizer:
        out = super().__new__(cls, name)
        out.levels = levels
        return out

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as its name: the levels are a closure
        return str, (str(self),)

    def planned_counts(self, n: int, eps0: float) -> dict[int, int]:
        """The reports per group planned in a batch of ``n``: the count a group with share ``s`` reaches but
        with probability about ``3e-5`` (each report's group is an independent draw: ``Bin(n, s)``, planned
        at its mean less :data:`PLANNED_SD` standard deviations, ``floor(n s - 4 sqrt(n s (1 - s)))``), at
        least 1; a share of 1 (every report in the group) plans all ``n``. A batch's figure is computed
        from its real counts; planning below the mean keeps a central target met by nearly every batch."""
        out = {}
        for j, lv in enumerate(self.levels(eps0)):
            s = min(max(float(lv.share), 0.0), 1.0)
            out[j] = max(1, math.floor(n * s - PLANNED_SD * math.sqrt(n * s * (1.0 - s)) + 1e-9))
        return out


def _level_accounting(level: Any, share: float) -> LevelAccounting:
    """A PEM level (``ldp.heavy_hitters.pem.Level``) as the accountant names it: GRR on its ``2**bits``
    prefixes, or OLH over its ``g`` buckets (the sketch levels, the ``gf2`` verification level and the
    ``olh`` search's Mersenne hash: given the public seed, randomized response over ``[g]`` applied to a
    bucket that is a function of the value)."""
    kind = "verification" if level.verify else f"{level.bits} bits"
    if level.oracle == "grr":
        return LevelAccounting(f"level {level.index} ({kind}, grr k = {level.g})", share, "grr", int(level.g))
    return LevelAccounting(f"level {level.index} ({kind}, olh g = {level.g})", share, "olh", int(level.g))


def heavy_hitters_randomizer(task: Any) -> LevelledRandomizer:
    """A heavy-hitters task's per-report randomizer: a level (one-window mode: drawn by the level weights;
    trie mode: the level the window collects, every report of a batch at it) and the level's oracle. The
    level and the public seed do not depend on the value and travel in the report, so each level is its
    own group (:class:`LevelledRandomizer`). Planned shares: the level weights (one-window), or the whole
    batch at every level (trie: whichever level a window collects)."""
    import dataclasses

    trie = getattr(task, "mode", "one_window") == "trie"

    def levels_at(eps0: float) -> tuple[LevelAccounting, ...]:
        pem = dataclasses.replace(task, epsilon=float(eps0)).make_mechanism()
        shares = [1.0] * len(pem.levels) if trie else [float(w) for w in pem.weights]
        return tuple(_level_accounting(lv, w) for lv, w in zip(pem.levels, shares))

    here = levels_at(float(task.epsilon))
    kinds = sorted({f"{lv.mechanism} {lv.domain_size}" for lv in here})
    mode = "trie: one level per window" if trie else "one level per report"
    name = f"heavy_hitters pem ({len(here)} levels: {', '.join(kinds)}; {mode})"
    return LevelledRandomizer(name, levels_at)
