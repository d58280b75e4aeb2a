"""Participation hiding (Cobalt-style) for frequency tasks: every client reports every window.

A client that reports only when something happened reveals *that* it happened by sending at all. A task
with ``"hide_participation": true`` (:class:`ldp.kinds.frequency.task.FrequencyTask`) closes that channel:
every client sends one report every window, and a client with nothing to report sends the **dummy value**
``absent = domain_size``, randomized like any other. The oracle's domain is ``domain_size + 1``, so the
dummy is just one more value of the same eps-LDP mechanism: a report reveals no more about participation
than about any value (the eps-LDP ratio bound holds between "absent" and every value).

The estimator accounts for the dummies by estimating the absent value like the others. Over the ``n``
reports of a window (one per client):

* ``frequencies[v]`` (``v < domain_size``): the unbiased estimate of the fraction of *all* clients of the
  window that held ``v`` (the oracle's estimator over ``domain_size + 1`` values; its closed-form
  variance is the oracle's), so ``n * frequencies[v]`` estimates the number of clients with ``v``;
* ``frequencies[absent]``: the fraction with nothing to report; ``1 - frequencies[absent]`` estimates the
  participating fraction (unbiased, same variance as any value's estimate);
* the distribution *among participating clients* is the ratio ``frequencies[v] / (1 - frequencies[absent])``
  (:func:`split_absent`): consistent, with a bias of order ``1 / n`` and no closed-form interval here;
  publish the unbiased fractions with their error bars and use the ratio for display only.

Post-processing (Norm-Sub and the others) runs over all ``domain_size + 1`` values, whose true fractions
sum to one, so the simplex constraints stay right. The estimate rows carry the dummy value last (label
:data:`ldp.kinds.frequency.task.ABSENT_LABEL` when the task has labels).

Cost: participation hiding multiplies the reports per window by ``1 / (participating fraction)`` and so the
variance of each count ``n * frequencies[v]`` grows with ``n``: the price of not revealing presence. Every
dummy report spends budget like a real one (the ledger charges it), so a per-period budget must allow one
report per window.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ParticipationEstimate", "split_absent"]


class ParticipationEstimate(NamedTuple):
    """A window's estimates with the dummy value split off.

    Attributes:
        all_clients: ``(domain_size,)``: estimated fraction of all the window's clients holding each value.
        absent: estimated fraction of clients with nothing to report.
        present: ``1 - absent``, the estimated participating fraction.
        counts: ``n * all_clients``, estimated clients per value (None without ``n``).
        among_present: ``all_clients / present`` (ratio estimate; NaN when ``present <= 0``).
    """

    all_clients: np.ndarray
    absent: float
    present: float
    counts: np.ndarray | None
    among_present: np.ndarray


def split_absent(frequencies: np.ndarray, n: int | None = None) -> ParticipationEstimate:
    """Splits the estimates over ``domain_size + 1`` values (the dummy last) of a task that hides
    participation; ``n``: the window's number of reports."""
    f = np.asarray(frequencies, dtype=np.float64)
    if f.ndim != 1 or len(f) < 2:
        raise ValueError(f"need the estimates of domain_size + 1 >= 2 values, got shape {f.shape}")
    values, absent = f[:-1], float(f[-1])
    present = 1.0 - absent
    ratio = values / present if present > 0 else np.full(len(values), np.nan)
    counts = None if n is None else values * float(n)
    return ParticipationEstimate(values, absent, present, counts, ratio)
