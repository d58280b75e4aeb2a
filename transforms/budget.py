"""The aggregator's budget check: reports per pseudonymous client id and budget period, the excess
dead-lettered as ``over_budget`` (``docs/longitudinal_pipeline.md``).

A task whose budget says ``"client_ids": true`` (:attr:`ldp.task.Task.requires_client_ids`) has its clients
put a per-task pseudonym (HMAC-SHA256 of the client's secret and the task id) in every report. The
validate step then refuses reports without one (``missing_client_id``) and keeps, with every accepted
report, its client id and event time; this module counts them:

``Shard``   :class:`ShardByClientFn`: ``(task_id, GroupReports)`` -> ``((shard, period), BudgetPart)``,
            one element per shard and budget period present in the batch (numpy: the client ids are
            hashed to ``shards`` shards, the period is ``event_ms // period_ms``, aligned to the epoch as
            :meth:`ldp.longitudinal.budget.BudgetPolicy.period_index`);
``Count``   :class:`BudgetStateFn`, a stateful DoFn keyed by ``(shard, period)``: its state is the sorted
            array of the shard's client ids seen in the period and their accepted counts. A batch is
            checked with ``numpy.unique`` / ``searchsorted`` (earliest event time first within a batch,
            arrival order across batches): a client's reports beyond ``reports_per_period`` are dead
            letters ``over_budget``; the rest go on as ``(task_id, GroupReports)`` with their timestamps.
            A watermark timer at the period's end plus the allowed lateness releases the counts and
            marks the key closed; a report of a closed period is ``budget_period_closed`` (it would
            otherwise be counted again from zero).

Accounting: the validate step counted these reports as accepted; this step emits one count dict per
batch moving the refused ones from accepted to rejected (``accepted: -k, rejected: +k,
rejected_over_budget: +k``), and moves the Beam counters the same way, so ``read = accepted + rejected``
holds for the job. Cost: per batch, a few numpy passes over its rows and one pass over the shard's state
(the state of a shard grows with the number of distinct clients of the period divided by ``shards``);
no per-report Python except to build the dead letters of refused reports.

This is a defence against misconfigured or buggy clients, **not** a privacy guarantee: the privacy a user
gets is what their own client refused to send (:class:`ldp.longitudinal.budget.BudgetLedger`). A client
that lies about its id, or uses many, is not caught here.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator
from typing import NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Timestamp

from ldp.aggregate import Aggregator
from ldp.reports import Reports
from transforms.counts import COUNTER_NAMESPACE
from transforms.display import item, task_display
from wire.decode import MAX_CLIENT_ID_BYTES, client_id_keys
from wire.records import make_dead_letter, now_ms, reports_to_records, requires_client_ids

__all__ = [
    "DEFAULT_SHARDS",
    "BudgetPart",
    "budget_applies",
    "budget_period_ms",
    "budget_granule_ms",
    "shard_of",
    "check_batch",
    "ShardByClientFn",
    "BudgetStateFn",
    "EnforceBudget",
]

#: Shards of the per-client state (keys ``(shard, period)``): more shards, smaller state per element read.
DEFAULT_SHARDS = 32

_KEY_BYTES = 1 + MAX_CLIENT_ID_BYTES
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


class BudgetPart(NamedTuple):
    """Accepted reports of one group, shard and budget period with their client keys (the element of the
    keyed step). ``keys``: ``numpy.void`` keys of :func:`wire.decode.client_id_keys`."""

    group: int
    reports: Reports
    event_ms: np.ndarray
    keys: np.ndarray
    source: str


def budget_applies(task: object) -> bool:
    """True when the pipeline counts reports per client id and period for this task."""
    return requires_client_ids(task)


def budget_period_ms(task: object) -> int:
    """The budget period of a task that requires client ids, in whole milliseconds."""
    policy = getattr(task, "budget", None)
    period_s = getattr(policy, "period_s", None)
    if period_s is None or getattr(policy, "reports_per_period", None) is None:
        raise ValueError(f"task {getattr(task, 'task_id', '?')!r}: counting reports per client needs "
                         "budget.reports_per_period and budget.period_s")
    ms = int(round(float(period_s) * 1000))
    if ms <= 0 or abs(ms - float(period_s) * 1000) > 1e-6:
        raise ValueError(f"budget.period_s must be a whole number of milliseconds, got {period_s}")
    return ms


def _budget_display(task: object) -> dict[str, object]:
    policy = getattr(task, "budget", None)
    return {
        "reports_per_period": item(getattr(policy, "reports_per_period", None), "Reports per client, period"),
        "period_s": item(getattr(policy, "period_s", None), "Budget period (s)"),
    }


def budget_granule_ms(task: object, granule_ms: int | None) -> int | None:
    """The validate step's event-time granule when the budget applies: every part then lies in one window
    granule *and* one budget period (``gcd`` of the two; the period alone for a global window)."""
    if not budget_applies(task):
        return granule_ms
    period = budget_period_ms(task)
    return period if granule_ms is None else math.gcd(granule_ms, period)


def shard_of(keys: np.ndarray, shards: int) -> np.ndarray:
    """Shard in ``[0, shards)`` of each client key (a 64-bit mix of all the key's bytes; stable across
    processes and runs)."""
    raw = np.zeros((len(keys), 72), dtype=np.uint8)
    raw[:, :_KEY_BYTES] = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), _KEY_BYTES)
    words = raw.view("<u8")
    h = np.zeros(len(keys), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            h ^= words[:, j]
            h ^= h >> np.uint64(30)
            h *= _M1
            h ^= h >> np.uint64(27)
            h *= _M2
            h ^= h >> np.uint64(31)
    return (h % np.uint64(shards)).astype(np.int64)


def check_batch(
    state_keys: np.ndarray, state_counts: np.ndarray, keys: np.ndarray, event_ms: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One batch of one period against the per-client counts so far (all numpy).

    Args:
        state_keys: sorted unique client keys seen in the period; ``state_counts`` their accepted counts.
        keys, event_ms: the batch's client keys and event times.
        limit: reports per client and period.

    Returns:
        ``(accept, rank, new_keys, new_counts)``: a mask over the batch (within a batch the earliest
        event times of a client are accepted first), each report's 1-based position among its client's
        reports of the period, and the updated sorted state.
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, bool), np.zeros(0, np.int64), state_keys, state_counts
    order = np.argsort(event_ms, kind="stable")
    uniq, inv = np.unique(keys[order], return_inverse=True)
    inv = inv.reshape(-1)
    by_key = np.argsort(inv, kind="stable")
    sorted_inv = inv[by_key]
    starts = np.flatnonzero(np.r_[True, sorted_inv[1:] != sorted_inv[:-1]])
    sizes = np.diff(np.r_[starts, n])
    rank_sorted = np.arange(n) - np.repeat(starts, sizes)
    rank_in_batch = np.empty(n, dtype=np.int64)
    rank_in_batch[by_key] = rank_sorted
    pos = np.searchsorted(state_keys, uniq)
    found = pos < len(state_keys)
    found[found] = state_keys[pos[found]] == uniq[found]
    prev = np.zeros(len(uniq), dtype=np.int64)
    prev[found] = state_counts[pos[found]]
    rank_o = prev[inv] + rank_in_batch  # 0-based position among the client's reports of the period
    accept_o = rank_o < limit
    # sizes[j]: reports of uniq[j] in the batch (the groups of sorted_inv come in uniq order)
    total = prev + np.minimum(sizes, np.maximum(limit - prev, 0))
    counts = state_counts.copy()
    counts[pos[found]] = total[found]
    new_keys = np.insert(state_keys, pos[~found], uniq[~found])
    new_counts = np.insert(counts, pos[~found], total[~found])
    accept = np.empty(n, dtype=bool)
    accept[order] = accept_o
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rank_o + 1
    return accept, rank, new_keys, new_counts


def _key_bytes(keys: np.ndarray) -> list[bytes]:
    raw = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), _KEY_BYTES)
    return [row[1 : 1 + int(row[0])].tobytes() for row in raw]


def _iso(ms: int) -> str:
    from ldp.aggregate import iso_ms

    return iso_ms(ms)


class ShardByClientFn(beam.DoFn):
    """``(task_id, GroupReports)`` with client ids -> ``((shard, period), BudgetPart)`` per shard and
    period present (the input's timestamp is kept: every part lies in one window granule)."""

    def __init__(self, task: object, shards: int = DEFAULT_SHARDS) -> None:
        if not 1 <= shards <= 1 << 16:
            raise ValueError(f"shards must be in [1, 65536], got {shards}")
        self.period_ms = budget_period_ms(task)
        self.shards = int(shards)
        self.task_id = str(getattr(task, "task_id", ""))

    def display_data(self) -> dict[str, object]:
        return {
            "task_id": item(self.task_id, "Task"),
            "period_ms": item(self.period_ms, "Budget period (ms)"),
            "shards": item(self.shards, "Client-id shards"),
        }

    def process(self, element) -> Iterator[tuple[tuple[int, int], BudgetPart]]:
        _task_id, gr = element
        if gr.client_ids is None or gr.event_ms is None:
            raise AssertionError("budget step: reports without client ids (validate not in budget mode)")
        keys = client_id_keys(gr.client_ids)
        period = gr.event_ms // self.period_ms
        shard = shard_of(keys, self.shards)
        combo = period * self.shards + shard
        source = gr.source or ""
        if combo.min() == combo.max():
            yield (int(shard[0]), int(period[0])), BudgetPart(gr.group, gr.reports, gr.event_ms, keys, source)
            return
        uniq, inv = np.unique(combo, return_inverse=True)
        inv = inv.reshape(-1)
        order = np.argsort(inv, kind="stable")
        bounds = np.flatnonzero(np.diff(inv[order])) + 1
        for rows in np.split(order, bounds):
            r0 = rows[0]
            part = BudgetPart(gr.group, gr.reports.take(rows), gr.event_ms[rows], keys[rows], source)
            yield (int(shard[r0]), int(period[r0])), part


class BudgetStateFn(beam.DoFn):
    """Stateful (key ``(shard, period)``): accepts each client's first ``reports_per_period`` reports of
    the period, dead-letters the rest (see the module docstring). Main output ``(task_id, GroupReports)``;
    tagged ``dead_letter`` and ``counts``."""

    COUNTS = ReadModifyWriteStateSpec("client_counts", PickleCoder())
    CLOSED = ReadModifyWriteStateSpec("closed", PickleCoder())
    EXPIRY = TimerSpec("period_end", TimeDomain.WATERMARK)

    def __init__(self, aggregator: Aggregator, allowed_lateness_s: float = 0.0) -> None:
        task = aggregator.task
        self.task_id = task.task_id
        self.schema_version = task.schema_version
        self.period_ms = budget_period_ms(task)
        self.limit = int(task.budget.reports_per_period)  # type: ignore[attr-defined]
        self.lateness_ms = int(round(max(0.0, float(allowed_lateness_s)) * 1000))
        self._task = task
        self.accepted = Metrics.counter(COUNTER_NAMESPACE, "reports_accepted")
        self.rejected = Metrics.counter(COUNTER_NAMESPACE, "reports_rejected")
        reasons = ("over_budget", "budget_period_closed")
        self.per_reason = {r: Metrics.counter(COUNTER_NAMESPACE, f"rejected_{r}") for r in reasons}
        self.clients = Metrics.distribution(COUNTER_NAMESPACE, "budget_clients_per_shard")

    def display_data(self) -> dict[str, object]:
        return {
            **task_display(self._task),
            **_budget_display(self._task),
            "allowed_lateness_ms": item(self.lateness_ms, "Allowed lateness (ms)"),
        }

    def process(
        self,
        element: tuple[tuple[int, int], BudgetPart],
        counts=beam.DoFn.StateParam(COUNTS),  # noqa: B008 - Beam's state idiom
        closed=beam.DoFn.StateParam(CLOSED),  # noqa: B008
        expiry=beam.DoFn.TimerParam(EXPIRY),  # noqa: B008
    ) -> Iterator[object]:
        from transforms.aggregate import GroupReports

        (_shard, period), part = element
        n = len(part.keys)
        start = period * self.period_ms
        if closed.read():
            accept = np.zeros(n, dtype=bool)
            rank = np.zeros(n, dtype=np.int64)
            reason = "budget_period_closed"
        else:
            st = counts.read()
            keys0, counts0 = st if st is not None else (np.zeros(0, f"V{_KEY_BYTES}"), np.zeros(0, np.int64))
            accept, rank, keys1, counts1 = check_batch(keys0, counts0, part.keys, part.event_ms, self.limit)
            counts.write((keys1, counts1))
            self.clients.update(len(keys1))
            expiry.set(Timestamp(micros=(start + self.period_ms + self.lateness_ms) * 1000))
            reason = "over_budget"
        k = int(n - accept.sum())
        if k < n:
            kept = part.reports if k == 0 else part.reports.take(accept)
            yield self.task_id, GroupReports(part.group, kept)
        if k == 0:
            return
        self.accepted.dec(k)
        self.rejected.inc(k)
        self.per_reason[reason].inc(k)
        yield TaggedOutput("counts", {"read": 0, "accepted": -k, "rejected": k, f"rejected_{reason}": k})
        rows = np.flatnonzero(~accept)
        recs = reports_to_records(
            self.task_id,
            part.reports.take(rows),
            part.event_ms[rows],
            part.group,
            schema_version=self.schema_version,
            client_ids=_key_bytes(part.keys[rows]),
        )
        span = f"budget period {period} [{_iso(start)}, {_iso(start + self.period_ms)})"
        when = now_ms()
        for rec, r in zip(recs, rank[rows].tolist()):
            if reason == "over_budget":
                detail = (
                    f"report {r} of its client in {span}: the task allows {self.limit} per client and period "
                    "(a check against misconfigured clients, not a privacy guarantee)"
                )
            else:
                detail = (
                    f"report of {span}, which closed (the watermark passed its end plus the allowed "
                    "lateness) and whose per-client counts were released: it cannot be checked"
                )
            yield TaggedOutput("dead_letter", make_dead_letter(reason, part.source, detail=detail, record=rec,
                                                               at_ms=when))

    @on_timer(EXPIRY)
    def release(
        self,
        counts=beam.DoFn.StateParam(COUNTS),  # noqa: B008
        closed=beam.DoFn.StateParam(CLOSED),  # noqa: B008
    ) -> Iterator[object]:
        counts.clear()
        closed.write(True)
        return iter(())


class EnforceBudget(beam.PTransform):
    """``(task_id, GroupReports)`` with client ids -> ``{"reports", "dead_letter", "counts"}`` (the
    reports within each client's budget; see the module docstring)."""

    def __init__(self, aggregator: Aggregator, allowed_lateness_s: float = 0.0, shards: int = DEFAULT_SHARDS):
        super().__init__()
        self.aggregator = aggregator
        self.allowed_lateness_s = allowed_lateness_s
        self.shards = shards

    def display_data(self) -> dict[str, object]:
        return {
            **task_display(self.aggregator),
            **_budget_display(self.aggregator.task),
            "allowed_lateness_s": item(float(self.allowed_lateness_s), "Allowed lateness (s)"),
            "shards": item(self.shards, "Client-id shards"),
        }

    def expand(self, reports: PCollection):
        key_type = beam.typehints.KV[beam.typehints.Tuple[int, int], typing.Any]  # a deterministic key coder
        shard = beam.ParDo(ShardByClientFn(self.aggregator.task, self.shards)).with_output_types(key_type)
        keyed = reports | "Shard" >> shard
        count = beam.ParDo(BudgetStateFn(self.aggregator, self.allowed_lateness_s)).with_input_types(key_type)
        return keyed | "Count" >> count.with_outputs("dead_letter", "counts", main="reports")
