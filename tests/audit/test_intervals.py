"""Coverage of the published intervals after selection: the frequency top-k view.

The README's apps example (OLH, eps 1, d = 1,024, Norm-Sub, 200,000 users of the project's ``zipf:1.5``
dataset), 20 seeds. Rows come from the task's own aggregator (``FrequencyAggregator.finalize``, what the job
writes) and are shown through ``pipelines.show_kinds.frequency_table``, the function ``ldp-beam show`` and
the dashboard use, so the audit checks the intervals and flags as published: the top 20 values' intervals
(simultaneous over the domain at 95%) and the "above zero" flags (Bonferroni over the domain at 5%).

Bars, each a rate the view states: over all seeds, a top-20 interval misses the truth at most as often as
a 5% per-interval rate allows (binomial upper bound at 1e-6 over 400 intervals: 45 misses); a seed has
some top-20 interval missing in at most as many seeds as a 5% familywise rate allows (1e-6 bound over 20
seeds: 8); a value of true frequency 0 is flagged in at most as many seeds as the flags' 5% familywise rate
allows (8).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldp.aggregate import GLOBAL_WINDOW
from ldp.datasets import iter_population
from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import parse_task

pytestmark = [pytest.mark.integration, pytest.mark.statistical]

APPS = {"task_id": "apps-2026-12", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024,
        "postprocess": "norm-sub"}
USERS, SEEDS, TOP = 200_000, 20, 20


def _bound(trials: int, rate: float) -> int:
    """The count a rate of ``rate`` exceeds with probability below 1e-6 over ``trials``."""
    return int(stats.binom.isf(1e-6, trials, rate))


def _one_seed(seed: int) -> tuple[np.ndarray, list[dict]]:
    from pipelines.show_kinds import frequency_table

    task = parse_task(APPS)
    rng = np.random.default_rng([seed, 27])
    values = np.concatenate(list(iter_population("zipf:1.5", USERS, task.domain_size, rng=rng)))
    truth = np.bincount(values, minlength=task.domain_size) / USERS
    agg = FrequencyAggregator(task)
    acc = agg.add(0, agg.create_accumulator(0), task.make_oracle().encode(values, rng=rng))
    (row,) = agg.finalize({0: acc}, GLOBAL_WINDOW)
    return truth, frequency_table(row._asdict(), TOP)["rows"]


def test_top_k_intervals_and_flags_hold_after_selection():
    misses = seeds_missing = seeds_false_flag = 0
    for seed in range(SEEDS):
        truth, entries = _one_seed(seed)
        assert len(entries) == TOP
        miss = [e for e in entries if not e["ci_low"] <= truth[e["value"]] <= e["ci_high"]]
        misses += len(miss)
        seeds_missing += bool(miss)
        seeds_false_flag += any(e["above_zero"] and truth[e["value"]] == 0 for e in entries)
    assert misses <= _bound(SEEDS * TOP, 0.05), misses
    assert seeds_missing <= _bound(SEEDS, 0.05), seeds_missing
    assert seeds_false_flag <= _bound(SEEDS, 0.05), seeds_false_flag
