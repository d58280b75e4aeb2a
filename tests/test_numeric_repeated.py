"""Repeated collection of a numeric counter (``memo-one-bit-mean``, ldp.numeric.memo) through the product:
the task's budget, the stateful simulated clients (pipelines.clients, both backends), their ledgers, the
numeric job's per-window privacy accounting and the store.

Tolerances. A window's mean from memoized reports is unbiased for the clipped mean of the values its
reports were made from, with variance ``mech.mean_variance(values)`` (the bit's noise plus the rounding's,
closed form). The windows share the users' alpha and bits, so their errors are correlated; each window is
checked on its own at 4 standard deviations (two-sided normal tail 6.3e-5, so below 2e-3 for 30 windows
by the union bound; n = 2000 reports a window makes the normal approximation close).
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest

from ldp.numeric.memo import MemoizedOneBitMean, memoized_cost
from ldp.task import TaskError, budget_summary, parse_task
from pipelines.clients import ClientPopulation, iter_windows, write_window

WINDOW_MS = 10_000
START_MS = 1_796_083_200_000  # 2026-12-01T00:00:00Z


def _task(total: float | None = 9.0, **params: object):
    budget = {} if total is None else {"total_epsilon": total}
    return parse_task({
        "task_id": "counter-1", "kind": "numeric", "mechanism": "memo-one-bit-mean", "epsilon": 1.0,
        "attributes": [{"name": "minutes", "low": 0, "high": 120}], "params": {"buckets": 8, **params},
        "budget": budget or {"reports_per_period": 1, "period_s": 10},
    })  # fmt: skip


@functools.cache
def _values_cost(epsilon: float, buckets: int, reports: int, keys: int) -> float:
    """The memo analysis' spent figure about the values (cached: each call composes PLDs)."""
    return memoized_cost(MemoizedOneBitMean(epsilon, 0.0, 1.0, buckets=buckets), reports, keys=keys)[
        "values"]["basic"]


def _ledger_keys(pop: ClientPopulation, batches, mech: MemoizedOneBitMean) -> dict[int, set[int]]:
    """Each user's distinct grid points over its accepted reports, recomputed from the values."""
    keys: dict[int, set[int]] = {}
    for b in batches:
        pts = mech.simulate_points(b.values, pop.backend.user_keys[b.users], task_id=pop.task.task_id)
        for u, j in zip(b.users.tolist(), pts.tolist()):
            keys.setdefault(u, set()).add(j)
    return keys


def test_the_task_section_names_the_counter_and_auto_is_unaffected():
    task = _task()
    assert task.is_memoized and isinstance(task.make_mechanism(), MemoizedOneBitMean)
    assert task.budget.composition == "memoized" and task.budget.epsilon_per_report == 1.0
    assert parse_task(task.to_dict()) == task
    auto = parse_task({**task.to_dict(), "mechanism": "auto", "params": {}, "budget": None})
    assert auto.make_mechanism().name in ("one-bit-mean", "hybrid")  # the frozen fresh candidates
    figures = budget_summary(task, 30)
    assert figures["after_windows"]["basic"] == memoized_cost(task.make_mechanism(), 30)["values"]["basic"]
    flipped = _task(flip=0.1)  # a flip lowers the one-report loss: epsilon_per_report defaults to it
    assert flipped.budget.epsilon_per_report == pytest.approx(flipped.make_mechanism().epsilon_1)
    assert flipped.budget.epsilon_per_report < 1.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mechanism": "hybrid", "params": {}}, "budget only with mechanism memo-one-bit-mean"),
        ({"budget": {"total_epsilon": 5, "client_ids": True}}, "client_ids must be false"),
        ({"budget": {"total_epsilon": 5, "composition": "basic"}}, "must be 'memoized'"),
        ({"budget": {"total_epsilon": 5, "epsilon_per_report": 0.5}}, "must equal"),
        ({"params": {"buckets": 8, "bins": 3}}, "unknown parameter(s) ['bins']"),
    ],
)
def test_bad_budgets_are_refused_with_the_reason(change, message):
    obj = {**_task().to_dict(), **change}
    with pytest.raises(TaskError) as ei:
        parse_task(obj)
    assert message in ei.value.one_line()


def test_memory_ledgers_charge_the_grid_points_and_the_cap_refuses():
    """A cap of 3 points: every ledger equals eps times its distinct accepted points, at most 3."""
    task = _task(total=3.0)
    mech = task.make_mechanism()
    pop = ClientPopulation(task, 300, seed=5, drift=0.5, noise_seed=1)
    batches = list(iter_windows(pop, 12, START_MS, WINDOW_MS))
    keys = _ledger_keys(pop, batches, mech)
    spent = pop.spent()
    assert sum(b.truth["refused"] for b in batches) > 0
    for u in range(pop.users):
        k = len(keys.get(u, ()))
        assert spent[u] == k * 1.0 <= 3.0
        reports = sum(int((b.users == u).sum()) for b in batches)
        if k:
            assert spent[u] == _values_cost(1.0, 8, reports, k)


def test_file_clients_ledgers_and_reports_agree_with_the_memory_rule(tmp_path):
    """The on-device path (state files, HMAC bits): ledgers charge the points, reports repeat per point."""
    from ldp.longitudinal.client import Client

    task = _task(total=3.0)
    mech = task.make_mechanism()
    pop = ClientPopulation(task, 6, state_dir=tmp_path / "states", seed=2, drift=0.7, noise_seed=1)
    batches = list(iter_windows(pop, 8, START_MS, WINDOW_MS))
    spent = pop.spent()
    bits: dict[tuple[int, int], int] = {}
    for u, path in enumerate(sorted((tmp_path / "states").glob("user-*.json"))):
        secret = bytes.fromhex(json.loads(path.read_text())["secret"])
        points = set()
        for b in batches:
            for i in np.nonzero(b.users == u)[0].tolist():
                j = mech.client_memo_key(secret, task.task_id, float(b.values[i]))
                points.add(j)
                bit = int(b.reports.values[i])
                assert bits.setdefault((u, j), bit) == bit  # no flip: the memoized bit of the point
        ledger = Client.load(path).ledger_state(task.task_id)
        assert len(ledger.keys) == len(points) <= 3
        assert spent[u] == len(points) * 1.0


@pytest.mark.integration
def test_thirty_windows_of_a_memoized_counter_through_the_job(tmp_path):
    """30 windows from 2000 stateful clients, a batch numeric job with 10 s windows and a store: the
    spent budget the job states is the memo analysis' figure, every ledger agrees, the means are unbiased
    (4 SD of ``mean_variance`` per window, see the module docstring)."""
    from pipelines.numeric import run
    from store import open_store

    task = _task(total=9.0)  # the 9 grid points: the cap never binds, so every report is accepted
    mech = task.make_mechanism()
    task_file = tmp_path / "task.json"
    task.save(task_file)
    pop = ClientPopulation(task, 2000, seed=7, drift=0.3, noise_seed=3)
    batches = []
    for b in iter_windows(pop, 30, START_MS, WINDOW_MS):
        write_window(b, task, tmp_path / "in")
        batches.append(b)
    db = tmp_path / "store.db"
    summary = run(["--task", str(task_file), "--input", str(tmp_path / "in" / "*.avro"), "--output",
                   str(tmp_path / "out"), "--window_size", "10", "--store", f"sqlite:///{db}"])  # fmt: skip
    assert summary["counts"]["accepted"] == 30 * 2000
    rc = summary["privacy_accounting"]["repeated_collection"]
    expected = memoized_cost(mech, 30)
    assert rc["values"] == expected["values"] and rc["values"]["basic"] == 9.0
    assert rc["spent_at_most"] == 9.0 and rc["windows"] == 30
    windows = sorted(summary["privacy_accounting"]["windows"], key=lambda w: w["window_start"])
    assert [w["repeated_collection"]["values_basic"] for w in windows] == [min(k, 9) * 1.0
                                                                          for k in range(1, 31)]
    assert summary["privacy_accounting"]["local"]["epsilon"] == 1.0
    spent = pop.spent()
    keys = _ledger_keys(pop, batches, mech)
    assert spent.max() <= rc["spent_at_most"]
    for u in range(pop.users):
        assert spent[u] == _values_cost(1.0, 8, 30, len(keys[u]))
    rows = sorted(
        (json.loads(line) for p in (tmp_path / "out").glob("estimates-*.jsonl") for line in p.open()),
        key=lambda r: r["window_start"],
    )
    assert len(rows) == 30
    for row, b in zip(rows, batches):
        sd = math.sqrt(mech.mean_variance(b.values))
        assert abs(row["mean"] - b.truth["mean"]) <= 4.0 * sd, (row["window_start"], row["mean"], b.truth)
        assert row["mean_std"] >= 0.95 * sd  # the row's std is the conservative binomial one
    store = open_store(f"sqlite:///{db}", shared=False)
    try:
        (listed,) = store.runs(task.task_id)
        stored = store.run(listed["run_id"])
    finally:
        store.close()
    assert stored["summary"]["privacy_accounting"]["repeated_collection"]["spent_at_most"] == 9.0
