"""Throughput of the validate step with and without client ids, and of the over-budget check.

Decodes an in-memory Avro container of ``--n`` OLH reports (``d = 1024``, eps = 1, written with the numpy
encoder) column-wise and validates it against the task, batch by batch, as the pipeline's ``Validate``
does (``wire.validate.TaskReportValidator``), for:

* ``plain``: reports without ``client_id``, a task without a budget;
* ``ids``: every report with a 32-byte ``client_id`` (``--clients`` distinct clients), a task whose
  budget counts reports per client (``"client_ids": true``): the validator also keeps each report's id;
* ``budget``: ``ids`` plus the numpy work of the over-budget step for the same batches
  (``transforms.budget``: shard split and ``check_batch`` against the shard's state), without Beam.

Prints reports per CPU second of this process (best of ``--repeat``; CPU time, not wall time, because the
machine is shared). Run on this tree, and (``plain``) on a checkout of the commit
before the client-id change to see the cost of the change to tasks without ids::

    nice -n 10 .venv/bin/python -m bench.budget_validate --n 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import io
import time

import fastavro
import numpy as np

import schemas
from ldp.kinds.frequency.aggregate import FrequencyAggregator
from ldp.task import parse_task
from wire.decode import iter_report_batches
from wire.encode import write_reports
from wire.validate import TaskReportValidator, decode_params


def _container(task, n: int, clients: int | None, seed: int) -> bytes:
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    oracle = task.make_oracle()
    reps = oracle.encode(rng.integers(0, task.domain_size, n), rng=rng)
    et = np.sort(rng.integers(1_800_000_000_000, 1_800_000_000_000 + 3_600_000, n))
    ids = None
    if clients:
        pool = rng.integers(0, 256, (clients, 32), dtype=np.uint8)
        ids = pool[rng.integers(0, clients, n)]
    buf = io.BytesIO()
    w = fastavro.write.Writer(buf, schemas.report_schema(), sync_interval=1 << 20)
    kw = {} if ids is None else {"client_ids": ids}
    write_reports(buf, w, task.task_id, reps, et, 0, task.schema_version, "null", 1 << 15, **kw)
    w.flush()
    return buf.getvalue()


def _run(task, data: bytes, budget: bool) -> float:
    agg = FrequencyAggregator(task)
    params = decode_params(agg)
    v = TaskReportValidator(agg)
    state: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    t0 = time.process_time()
    n = 0
    for batch in iter_report_batches(io.BytesIO(data), 1 << 15, **params):
        tb = v.validate(batch, "bench", granule_ms=60_000, at_ms=0)
        n += tb.n_read
        if budget:
            from transforms.budget import check_batch, shard_of
            from wire.decode import client_id_keys

            limit = int(task.budget.reports_per_period)
            period_ms = int(task.budget.period_s * 1000)
            for part in tb.parts:
                keys = client_id_keys(part.client_ids)
                shard = shard_of(keys, 32)
                period = part.event_ms // period_ms
                combo = period * 32 + shard
                uniq, inv = np.unique(combo, return_inverse=True)
                order = np.argsort(inv.reshape(-1), kind="stable")
                bounds = np.flatnonzero(np.diff(inv.reshape(-1)[order])) + 1
                for rows in np.split(order, bounds):
                    key = (int(shard[rows[0]]), int(period[rows[0]]))
                    k0, c0 = state.get(key, (np.zeros(0, "V65"), np.zeros(0, np.int64)))
                    _, _, k1, c1 = check_batch(k0, c0, keys[rows], part.event_ms[rows], limit)
                    state[key] = (k1, c1)
    return n / (time.process_time() - t0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="plain,ids,budget")
    ns = ap.parse_args(argv)
    base = {"task_id": "bench", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024}
    for case in ns.cases.split(","):
        if case == "plain":
            task = parse_task(base)
            data = _container(task, ns.n, None, 1)
        else:
            budget = {"reports_per_period": 24, "period_s": 86400, "client_ids": True}
            task = parse_task({**base, "budget": budget})
            data = _container(task, ns.n, ns.clients, 1)
        best = max(_run(task, data, case == "budget") for _ in range(ns.repeat))
        print(f"{case:7s} n={ns.n} reports/s={best:,.0f} ({len(data) / ns.n:.1f} bytes/report)", flush=True)


if __name__ == "__main__":
    main()
