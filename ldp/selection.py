"""Top-k views that stay honest after selection: multiple-comparison flags and simultaneous intervals.

A top-k view picks the largest of ``d`` noisy estimates and then shows them. Per-value 95% intervals and
per-value tests are not valid for values picked *because* they came out large (the winner's curse), and
``d`` tests at 5% flag about ``0.05 d`` values of true frequency 0. Everything here is stated over the
whole domain, so it holds whichever values a view shows (Beam-free, numpy-vectorized; ``docs/intervals.md``):

Simultaneous intervals (:func:`simultaneous_intervals`)
    ``u_v +- z_d s_v`` with ``z_d = Phi^-1(1 - alpha / (2 d))`` (Bonferroni over the domain), ``u`` the
    unbiased estimates and ``s`` their closed-form standard deviations, intersected with [0, 1] (the range
    of every frequency) and widened to contain the published number. By the Bonferroni (union) bound all
    ``d`` intervals cover their truths together with probability at least ``1 - alpha`` (normal
    approximation of each estimate), so any selection of them, the top k included, does too. The
    interval is about the true frequency and rests on the unbiased estimate, so it holds for every
    post-processing method.

Discovery flags (:func:`discoveries`): a value is *flagged* (its true frequency is shown to be above 0)
when it is rejected by the rule, with the two-sided normal p-value ``p_v = 2 (1 - Phi(u_v / s_v))`` for
``u_v > 0`` and ``p_v = 1`` otherwise (a negative estimate is never evidence of a positive frequency):

* ``bonferroni`` (default): ``p_v <= alpha / d``; the family-wise error rate over the domain is at most
  ``alpha`` (Bonferroni 1936). Equivalent to: the simultaneous interval lies above 0, so a flag and its
  interval never disagree.
* ``bh``: the Benjamini-Hochberg step-up procedure at false-discovery rate ``alpha`` over the ``d`` values
  (Benjamini & Hochberg 1995, independent or positively dependent p-values): sort the p-values, find the
  largest ``r`` with ``p_(r) <= r alpha / d``, flag those ``r`` values. More flags than Bonferroni; the
  expected share of false ones among them is at most ``alpha``. A flagged value's simultaneous interval
  may still reach 0.

Exact p-values (:func:`binomial_p_values`): when a value's support count ``S`` (the reports supporting it,
among ``n``) is exactly Binomial(``n``, ``q``) under ``f_v = 0`` (each report of a user not holding ``v``
supports it with probability ``q``, independently), ``p_v = min(1, 2 P[S >= s_v])`` for ``s_v > n q`` and 1
otherwise (doubled to keep the two-sided convention of :func:`p_values`). The normal p-value misstates the
error when ``n q`` is small: with the null std its tail is too light (at ``alpha / d = 0.05 / 1024`` the
exact per-value false-flag probability is 109 times the nominal one for GRR, ``d = 1024``, eps 4, at ``n =
1000``; 7.6 times for OLH), and with the std at the estimate (Eq. 4, what the rows carry) it is too liberal
where ``1 - p - q < 0`` (BLH eps 4, ``d = 1024``, ``n = 500``: a false flag in 11% of null windows against
the promised 5%) and too strict elsewhere. :func:`flag_p_values` applies either rule
to given p-values; the frequency rows carry the exact ones (``p_zero``) for the mechanisms whose null law
is exact (:func:`ldp.intervals.null_support_q`), and views flag from them, from the normal p-values of
``unbiased`` / ``unbiased_std`` for rows without them.

Either rule is computed over the whole domain ``d``: a view that holds only the largest values (a large
domain's JSON Lines row or store rows) passes ``d`` and the values it has; the values it lacks count as
``p = 1``, which can only remove flags (BH is monotone in each p-value), never add one.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = [
    "ALPHA",
    "DEFAULT_RULE",
    "binomial_p_values",
    "RULES",
    "discoveries",
    "flag_p_values",
    "p_values",
    "rule_text",
    "simultaneous_intervals",
    "simultaneous_z",
]

#: Error rate of every flag and simultaneous interval (family-wise for Bonferroni, FDR for BH).
ALPHA = 0.05
#: The multiple-comparison rules, by the name shown next to the flags.
RULES = ("bonferroni", "bh")
DEFAULT_RULE = "bonferroni"


def _check(d: int, alpha: float) -> None:
    if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
        raise ValueError(f"domain size d must be a positive integer, got {d!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def simultaneous_z(d: int, alpha: float = ALPHA) -> float:
    """``Phi^-1(1 - alpha / (2 d))``: the half-width, in standard deviations, of ``d`` two-sided intervals
    that cover together with probability at least ``1 - alpha`` (Bonferroni); 1.96 for ``d = 1``, 4.07 for
    ``d = 1024`` at ``alpha = 0.05``."""
    _check(d, alpha)
    return NormalDist().inv_cdf(1.0 - alpha / (2.0 * int(d)))


def simultaneous_intervals(
    unbiased: np.ndarray,
    std: np.ndarray,
    d: int,
    *,
    published: np.ndarray | None = None,
    alpha: float = ALPHA,
    bounds: tuple[float, float] = (0.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """Intervals for the true values that hold together over all ``d`` values of the domain (module
    docstring): ``unbiased +- simultaneous_z(d) std`` intersected with ``bounds`` and widened to contain
    ``published``. NaN where the std or the estimate is not a finite number."""
    u = np.asarray(unbiased, dtype=np.float64)
    s = np.asarray(std, dtype=np.float64)
    half = simultaneous_z(d, alpha) * s
    lo = np.clip(u - half, bounds[0], bounds[1])
    hi = np.clip(u + half, bounds[0], bounds[1])
    if published is not None:
        pub = np.asarray(published, dtype=np.float64)
        lo, hi = np.fmin(lo, pub), np.fmax(hi, pub)
    bad = ~(np.isfinite(u) & np.isfinite(s))
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def p_values(unbiased: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The two-sided normal p-value of ``f_v = 0`` for a positive estimate, 1 for a non-positive one (and
    for a missing estimate or std). Exact in the tails (``erfc``), so ``alpha / d`` for large ``d`` is
    resolved."""
    u = np.asarray(unbiased, dtype=np.float64)
    s = np.asarray(std, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = np.where((u > 0) & (s > 0) & np.isfinite(u) & np.isfinite(s), u / s, 0.0)
    zs = np.where((u > 0) & (s == 0), np.inf, zs)  # an exact positive estimate
    # 2 (1 - Phi(z)) = erfc(z / sqrt 2): erfc keeps the far tail that 1 - Phi would round to 0.
    # Imported at first use: scipy.special costs 0.2 s of start-up in the light commands (show).
    from scipy.special import erfc

    return np.minimum(erfc(zs / math.sqrt(2.0)), 1.0)


def binomial_p_values(counts: np.ndarray, n: int, q: float) -> np.ndarray:
    """The exact two-sided p-values of ``f_v = 0`` from support counts whose null law is Binomial(``n``,
    ``q``): ``min(1, 2 P[S >= s])`` where ``s > n q``, 1 elsewhere (an estimate at or below 0 is never
    evidence of a positive frequency) and for a missing count. Counts are rounded to integers (support
    counts computed through a transform carry float rounding).

    Raises:
        ValueError: ``n`` below 1 or ``q`` outside (0, 1).
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the number of reports n must be a positive integer, got {n!r}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"the null support probability q must be in (0, 1), got {q}")
    c = np.asarray(counts, dtype=np.float64)
    ok = np.isfinite(c)
    s = np.rint(np.where(ok, c, 0.0))
    # Imported at first use, as in p_values (scipy.stats costs start-up time in the light commands).
    from scipy.stats import binom

    test = ok & (s > int(n) * q)
    out = np.ones(c.shape, dtype=np.float64)
    # counts take few distinct values (about 10 sqrt(n q) of them): one tail per distinct count
    levels, where = np.unique(s[test], return_inverse=True)
    out[test] = np.minimum(1.0, 2.0 * binom.sf(levels - 1.0, int(n), q))[where]  # 2 P[S >= s]
    return out


def _check_rule(d: int, alpha: float, rule: str, given: int, what: str) -> None:
    _check(d, alpha)
    if rule not in RULES:
        raise ValueError(f"unknown multiple-comparison rule {rule!r}; one of {', '.join(RULES)}")
    if given > d:
        raise ValueError(f"{given} {what} given for a domain of {d}")


def discoveries(
    unbiased: np.ndarray,
    std: np.ndarray,
    d: int,
    rule: str = DEFAULT_RULE,
    alpha: float = ALPHA,
) -> np.ndarray:
    """Which values are flagged as above 0 under ``rule`` over a domain of ``d`` values (module
    docstring). ``unbiased`` and ``std`` may hold fewer than ``d`` values (the ones a view has); the others
    count as ``p = 1``.

    Raises:
        ValueError: an unknown rule, ``d`` smaller than the number of values given, a bad ``alpha``.
    """
    u = np.asarray(unbiased, dtype=np.float64)
    _check_rule(d, alpha, rule, u.size, "values")
    if rule == "bonferroni":
        s = np.asarray(std, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            flag = (u > 0) & np.isfinite(s) & (u >= simultaneous_z(d, alpha) * s)
        return np.asarray(flag, dtype=bool)
    return flag_p_values(p_values(u, std), d, rule, alpha) & (u > 0)


def flag_p_values(p: np.ndarray, d: int, rule: str = DEFAULT_RULE, alpha: float = ALPHA) -> np.ndarray:
    """Which of the given p-values of ``f_v = 0`` are flagged under ``rule`` over ``d`` values (the values
    not given count as ``p = 1``): ``bonferroni`` flags ``p_v <= alpha / d``, ``bh`` the Benjamini-Hochberg
    step-up set. For p-values computed otherwise than :func:`p_values` (e.g. an exact binomial tail).

    Raises:
        ValueError: an unknown rule, ``d`` smaller than the number of p-values, a bad ``alpha``.
    """
    p = np.asarray(p, dtype=np.float64)
    _check_rule(d, alpha, rule, p.size, "p-values")
    if rule == "bonferroni":
        return np.asarray(p <= alpha / float(d), dtype=bool)
    order = np.argsort(p, kind="stable")
    ok = p[order] <= alpha * np.arange(1, p.size + 1) / float(d)
    r = int(np.flatnonzero(ok)[-1]) + 1 if ok.any() else 0
    flag = np.zeros(p.size, dtype=bool)
    flag[order[:r]] = True
    return flag


def rule_text(rule: str, d: int, alpha: float = ALPHA) -> str:
    """The rule as a view names it: ``Bonferroni over d = 1024 at 5%`` / ``Benjamini-Hochberg FDR 5% over
    d = 1024``."""
    pct = f"{100 * alpha:g}%"
    if rule == "bonferroni":
        return f"Bonferroni over d = {d:,} at {pct}"
    if rule == "bh":
        return f"Benjamini-Hochberg FDR {pct} over d = {d:,}"
    raise ValueError(f"unknown multiple-comparison rule {rule!r}; one of {', '.join(RULES)}")
