"""Stateful simulated clients for streaming runs of repeated collection.

``N`` simulated users report window after window for one task with a budget (a frequency task, or a
numeric task of the memoized counter ``memo-one-bit-mean``, ``docs/numeric.md``): each has a secret,
a budget ledger (the client refuses past its budget) and a pseudonymous client id
(:func:`ldp.reports.client_pseudonym`); their values drift; every window each user with something to
report (probability ``--active``) sends one report, or, when the task hides participation, a dummy one
(the task's absent value) when it has nothing to report. Reports go to a watched directory (one Avro file
per window plus its ``.done`` marker, the watched-directory contract of ``docs/pipelines.md``) or to a
Pub/Sub topic (one or more messages per window, attribute ``event_time``)::

    python -m pipelines.clients --task TASK.json --users 200 --windows 12 --window_s 60 \
        --output DIR [--state_dir STATES] [--misconfigured 2] [--seed 1]
    python -m pipelines.clients --task TASK.json --users 100000 --windows 30 --window_s 60 \
        --output_topic projects/P/topics/T --pace

Two client backends:

* ``--state_dir DIR``: one :class:`ldp.longitudinal.client.Client` state file per user (secret from the
  OS CSPRNG, file mode 0600, written atomically per report): exactly the on-device path, one user at a
  time (per-report Python and a file write + fsync per report: for up to a few thousand users);
* in memory (no ``--state_dir``): the same rules vectorized over all users (secrets from the OS CSPRNG
  held in memory, memoized responses through :meth:`ldp.longitudinal.memo.MemoizedOracle.simulate`, the
  ledger's rules on numpy arrays): for 10^5-10^6 users. ``tests/test_clients.py`` checks that both give
  the same refusals.

``--misconfigured K`` makes the first K users ignore their budget: they send ``--misconfigured_reports``
reports every window without a ledger (the aggregator's per-client count dead-letters their excess as
``over_budget``). The simulated population (values, drift, activity, event times) comes from one
``numpy.random.SeedSequence(--seed)``; what a real client draws comes from the OS CSPRNG, as on a device:
the secrets, and the perturbation noise of every report (a :func:`ldp.csprng.secure_rng` generator).
``--noise_seed S`` (tests only) draws the noise from a seeded PCG64 instead, so a run's reports repeat.
For a shuffled task (``anonymity.shuffled``) the clients round every event time down to
``anonymity.time_precision_s``, send no client id, and make at most one report per user per aggregation
window (:class:`ldp.longitudinal.client.ShuffledCollection`; a second one is refused and counted as
``refused``).
The truth of every window (histogram of the values of active users, dummies, refusals) is written to
``OUT/clients-truth.json``.

A numeric task's users hold numbers drawn from ``--dataset`` (the simulator's specs, ``normal[:MEAN:STD]``,
``lognormal[:MU:SIGMA]``, ``uniform[:LOW:HIGH]``, ``csv:PATH:COLUMN``; default uniform on the attribute's
bounds); drift redraws a value from it; the truth holds the mean of the (clipped) values each window's
accepted reports were made from. Its ledgers charge one ``epsilon_inf`` per grid point a user's values
round to (``ldp.numeric.memo``), as the memo analysis (``memoized_cost``) counts them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fastavro
import numpy as np

import schemas
from ldp.csprng import secure_rng
from ldp.longitudinal.budget import BudgetExceeded, BudgetPolicy
from ldp.longitudinal.memo import MemoizedOracle
from ldp.reports import CLIENT_ID_BYTES, Reports, client_pseudonym
from ldp.task import Task, TaskError, load_task
from pipelines.cli import check_pubsub_path, fail, job_parser, parse_job_args
from wire.client import make_client_encoder
from wire.encode import write_reports
from wire.records import encode_report_container, reports_to_records

__all__ = [
    "WindowBatch", "ClientPopulation", "CollectorRefused", "post_reports", "post_window", "write_window",
    "publish_window", "parser", "run",
]  # fmt: skip

_SLACK = 1e-12


@dataclasses.dataclass
class WindowBatch:
    """The reports of one window and what they were made from.

    Attributes:
        window: the window's index; ``start_ms`` / ``end_ms`` its bounds.
        reports, event_ms, groups: the reports (one row each), their event times and groups.
        client_ids: uint8 ``(n, 32)``, each report's pseudonymous client id; None for a shuffled task
            (its reports carry no id, and their ``event_time`` is rounded to ``anonymity.time_precision_s``).
        truth: ``histogram`` (values of the users with something to report; numeric tasks: ``mean``, the
            clipped mean of ``values``), ``active``, ``dummies``, ``refused`` (reports the clients'
            ledgers refused), ``misconfigured_reports``, ``reports``.
        users, values: the user and the value of each report (not written anywhere; for tests).
    """

    window: int
    start_ms: int
    end_ms: int
    reports: Reports
    event_ms: np.ndarray
    groups: np.ndarray
    client_ids: np.ndarray | None
    truth: dict[str, Any]
    users: np.ndarray | None = None
    values: np.ndarray | None = None


def _zipf_probabilities(d: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, d + 1, dtype=np.float64) ** s
    return w / w.sum()


def _client_inputs(task: Task) -> str | None:
    """What a device of the task encodes (``categorical``, ``real``, ...; None: no device reports)."""
    try:
        return make_client_encoder(task).inputs
    except ValueError:
        return None


def _memoized(oracle: Any) -> bool:
    """A memoized frequency oracle or the numeric memoized counter (``memoized = True``)."""
    return isinstance(oracle, MemoizedOracle) or bool(getattr(oracle, "memoized", False))


def _policy(task: Task) -> BudgetPolicy:
    policy = getattr(task, "budget", None)
    if policy is None:
        raise ValueError(f"task {task.task_id!r} has no budget: stateful clients need one")
    return policy


# ------------------------------------------------------------------------------------------------------------
# client backends
# ------------------------------------------------------------------------------------------------------------
class _FileClients:
    """One ``ldp.longitudinal.client.Client`` state file per user (the on-device path)."""

    def __init__(self, task: Task, users: int, state_dir: Path) -> None:
        from ldp.longitudinal.client import Client, ShuffledCollection

        encoder = make_client_encoder(task)
        self.task, self.oracle, self.policy = task, encoder.mechanism, _policy(task)
        self._value = encoder.value_type
        self.shuffled = ShuffledCollection.of_task(task)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.clients = []
        ids = np.zeros((users, CLIENT_ID_BYTES), dtype=np.uint8)
        self._secrets: list[bytes] = []
        for u in range(users):
            path = state_dir / f"user-{u:07d}.json"
            client = Client.load(path) if path.exists() else Client.create(path)
            self.clients.append(client)
            secret = _secret_of(client)
            self._secrets.append(secret)
            ids[u] = np.frombuffer(client_pseudonym(secret, task.task_id), dtype=np.uint8)
        self.client_ids = ids

    def report(
        self, users: np.ndarray, values: np.ndarray, times_ms: np.ndarray, rng: np.random.Generator
    ) -> tuple[Reports, np.ndarray]:
        """Reports of ``users`` (one each) through their clients; ``(reports of the accepted, accepted)``."""
        out: list[Reports] = []
        ok = np.zeros(len(users), dtype=bool)
        for i, (u, v, t) in enumerate(zip(users.tolist(), values.tolist(), times_ms.tolist())):
            try:
                rep = self.clients[u].report(
                    self.task.task_id, self.oracle, self.policy, self._value(v), now_s=t / 1000, rng=rng,
                    shuffled=self.shuffled,
                )
            except BudgetExceeded:  # also WindowReportRefused: a shuffled task's second report in a window
                continue
            out.append(rep)
            ok[i] = True
        return Reports.concat(out), ok

    def unchecked(self, users: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> Reports:
        """Reports that bypass the ledger (a misconfigured client)."""
        if _memoized(self.oracle):
            reps = [
                self.oracle.client_report(self._secrets[u], self.task.task_id, self._value(v), rng=rng)[0]
                for u, v in zip(users.tolist(), values.tolist())
            ]
            return Reports.concat(reps)
        return self.oracle.encode(values, rng=rng)

    def spent(self) -> np.ndarray:
        return np.array([c.spent(self.task.task_id, self.oracle, self.policy) for c in self.clients])


def _secret_of(client: Any) -> bytes:
    """The client's secret, to derive its pseudonym: ``client.secret_for_pseudonym()`` when the Client
    offers it, else the ``secret`` field of its state file (the documented format of
    ``ldp.longitudinal.client``). The simulator runs where the state files are, as a device app does."""
    getter = getattr(client, "pseudonym_secret", None)
    if callable(getter):
        return getter()
    doc = json.loads(Path(client.path).read_text(encoding="utf-8"))
    return bytes.fromhex(doc["secret"])


class _MemoryClients:
    """Every user's client in numpy arrays: the ledger's rules (``ldp.longitudinal.budget.BudgetLedger``)
    vectorized, memoized responses through ``MemoizedOracle.simulate`` (per-user 64-bit keys drawn from
    the OS CSPRNG stand in for the HMAC secrets)."""

    def __init__(self, task: Task, users: int) -> None:
        from ldp.longitudinal.client import ShuffledCollection

        encoder = make_client_encoder(task)
        self.task, self.oracle, self.policy = task, encoder.mechanism, _policy(task)
        self.shuffled = ShuffledCollection.of_task(task)
        secrets = np.frombuffer(os.urandom(32 * users), dtype=np.uint8).reshape(users, 32)
        self.user_keys = secrets[:, :8].copy().view(np.uint64).reshape(-1)
        self.client_ids = np.stack(
            [np.frombuffer(client_pseudonym(s.tobytes(), task.task_id), dtype=np.uint8) for s in secrets]
        ) if users else np.zeros((0, CLIENT_ID_BYTES), dtype=np.uint8)
        self.reports = np.zeros(users, dtype=np.int64)
        self.period = np.full(users, np.iinfo(np.int64).min, dtype=np.int64)
        self.period_reports = np.zeros(users, dtype=np.int64)
        self.last_ms = np.full(users, -1, dtype=np.int64)
        self.memo = _memoized(self.oracle)
        self.keys = np.zeros(0, dtype=np.int64)  # sorted codes user * max_keys + memo key already charged
        self.n_keys = np.zeros(users, dtype=np.int64)
        # memo keys lie in [0, max_keys): values (or buckets) of [0, d), or the counter's grid points
        self.max_keys = encoder.memo_keys
        self._tight = None
        if self.policy.composition == "pld":
            from ldp.longitudinal.accounting import tight_epsilon_fn  # dp_accounting: a second to import

            self._tight = tight_epsilon_fn(self.oracle, self.policy.delta)

    def _spent(self, reports: np.ndarray, n_keys: np.ndarray) -> np.ndarray:
        pol = self.policy
        if pol.composition == "basic":
            return reports * pol.epsilon_per_report
        if pol.composition == "memoized":
            return n_keys * float(self.oracle.epsilon_inf)
        assert self._tight is not None
        uniq, inv = np.unique(reports, return_inverse=True)
        vals = np.array([0.0 if k == 0 else self._tight(int(k)) for k in uniq.tolist()])
        return vals[inv.reshape(-1)]

    def report(
        self, users: np.ndarray, values: np.ndarray, times_ms: np.ndarray, rng: np.random.Generator
    ) -> tuple[Reports, np.ndarray]:
        pol = self.policy
        if len(np.unique(users)) != len(users):
            raise ValueError("one report per user per call")
        if np.any(times_ms < self.last_ms[users]):
            raise ValueError("report times must not go back (the ledger refuses a clock moved back)")
        ok = np.ones(len(users), dtype=bool)
        if self.shuffled is not None:  # Client.report's rule: one report per user per window
            last = self.last_ms[users]
            ok &= ~((last >= 0) & self.shuffled.same_window(last, times_ms))
        new_period = self.period[users].copy()
        new_pr = self.period_reports[users].copy()
        if pol.period_s is not None:
            per = np.floor(times_ms / 1000 / pol.period_s).astype(np.int64)  # BudgetPolicy.period_index
            moved = per != new_period
            new_pr[moved] = 0
            new_period = per
            new_pr += 1
            ok &= new_pr <= pol.reports_per_period
        new_keys = self.n_keys[users].copy()
        is_new = np.zeros(len(users), dtype=bool)
        codes = np.zeros(len(users), dtype=np.int64)
        if self.memo:
            mk = self.oracle.simulate_memo_keys(values, self.user_keys[users], task_id=self.task.task_id)
            codes = users.astype(np.int64) * self.max_keys + mk
            pos = np.searchsorted(self.keys, codes)
            found = pos < len(self.keys)
            found[found] = self.keys[pos[found]] == codes[found]
            is_new = ~found
            new_keys = new_keys + is_new
        if pol.total_epsilon is not None:
            after = self._spent(self.reports[users] + 1, new_keys)
            ok &= after <= pol.total_epsilon * (1 + _SLACK)
        acc = users[ok]
        self.reports[acc] += 1
        self.period[acc] = new_period[ok]
        self.period_reports[acc] = new_pr[ok]
        self.last_ms[acc] = times_ms[ok]
        if self.memo:
            self.n_keys[acc] = new_keys[ok]
            self.keys = np.union1d(self.keys, codes[ok & is_new])
            reps = self.oracle.simulate(values[ok], self.user_keys[acc], rng=rng, task_id=self.task.task_id)
        else:
            reps = self.oracle.encode(values[ok], rng=rng)
        return reps, ok

    def unchecked(self, users: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> Reports:
        if self.memo:
            return self.oracle.simulate(values, self.user_keys[users], rng=rng, task_id=self.task.task_id)
        return self.oracle.encode(values, rng=rng)

    def spent(self) -> np.ndarray:
        return self._spent(self.reports, self.n_keys)


# ------------------------------------------------------------------------------------------------------------
# the population
# ------------------------------------------------------------------------------------------------------------
def _check_population(
    task: Task, users: int, *, drift: float, active: float, dataset: str | None, misconfigured: int,
    misconfigured_reports: int,
) -> bool:  # fmt: skip
    """Refuses a population the clients cannot simulate (ValueError); True for a numeric task."""
    inputs = _client_inputs(task)
    numeric = inputs == "real"
    if numeric and not getattr(task, "is_memoized", False):
        raise ValueError(f"numeric task {task.task_id!r}: repeated-collection clients need the memoized "
                         f"counter memo-one-bit-mean, not {task.mechanism}")
    if inputs not in ("categorical", "real"):
        raise ValueError(f"task {task.task_id!r} is a {task.kind} task; clients simulate frequency tasks "
                         "and the numeric memoized counter")
    if dataset is not None and not numeric:
        raise ValueError("dataset is for numeric tasks (frequency values follow zipf)")
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    if not (0 <= drift <= 1 and 0 <= active <= 1):
        raise ValueError("drift and active are probabilities in [0, 1]")
    if not 0 <= misconfigured <= users or misconfigured_reports < 1:
        raise ValueError("misconfigured must be in [0, users] and misconfigured_reports >= 1")
    return numeric


class ClientPopulation:
    """``users`` simulated users of a task with a budget (see the module docstring).

    Args:
        task: the parsed task (a budget is required): a frequency task, or a numeric task of
            ``memo-one-bit-mean``.
        users: number of users.
        state_dir: one state file per user there (None: the in-memory backend).
        seed: entropy of the simulation's SeedSequence.
        zipf: exponent of the values' Zipf distribution over ``[0, domain_size)`` (frequency tasks).
        dataset: a numeric task's values (``ldp.kinds.numeric.population.sample_values`` specs; default
            uniform on the attribute's bounds).
        drift: probability that a user's value is redrawn before each window.
        active: probability that a user has something to report in a window.
        misconfigured: the first this many users ignore their budget ...
        misconfigured_reports: ... and send this many reports every window.
        noise_seed: None (real clients): perturbation noise from the OS CSPRNG
            (:func:`ldp.csprng.secure_rng`); an int (tests): from ``default_rng(SeedSequence(noise_seed))``.
    """

    def __init__(
        self,
        task: Task,
        users: int,
        *,
        state_dir: str | Path | None = None,
        seed: int = 0,
        zipf: float = 1.1,
        drift: float = 0.1,
        active: float = 1.0,
        misconfigured: int = 0,
        misconfigured_reports: int = 3,
        noise_seed: int | None = None,
        dataset: str | None = None,
    ) -> None:
        self.numeric = _check_population(
            task, users, drift=drift, active=active, dataset=dataset, misconfigured=misconfigured,
            misconfigured_reports=misconfigured_reports,
        )  # fmt: skip
        self.task = task
        self.users = users
        self.hide = bool(getattr(task, "hide_participation", False))
        # the dummy value of tasks that hide participation (frequency tasks only)
        self.absent = None if self.numeric else int(task.domain_size)  # type: ignore[attr-defined]
        self.backend: _FileClients | _MemoryClients = (
            _MemoryClients(task, users) if state_dir is None else _FileClients(task, users, Path(state_dir))
        )
        ss = np.random.SeedSequence(seed)
        self._value_rng, self._time_rng = (np.random.default_rng(s) for s in ss.spawn(2))
        self._noise_rng: np.random.Generator = (
            secure_rng() if noise_seed is None else np.random.default_rng(np.random.SeedSequence(noise_seed))
        )
        self._set_value_model(zipf, dataset)
        self.values = self._draw(users)
        self.drift, self.active = drift, active
        self.misconfigured, self.misconfigured_reports = misconfigured, misconfigured_reports
        from ldp.longitudinal.client import ShuffledCollection  # dp_accounting: not at --help

        #: a shuffled task's rule (times rounded to the precision, one report per window), else None
        self.shuffled = ShuffledCollection.of_task(task)

    def _set_value_model(self, zipf: float, dataset: str | None) -> None:
        """Where values come from: a numeric task's dataset (a CSV column's rows pooled), else Zipf."""
        task = self.task
        if self.numeric:
            a = task.attributes[0]  # type: ignore[attr-defined]
            self.dataset = dataset or f"uniform:{a.low!r}:{a.high!r}"
            self._pool = None
            if self.dataset.startswith("csv:"):  # a column's rows: users and redraws pick among them
                from ldp.kinds.numeric.population import sample_values

                self._pool = sample_values(self.dataset, None, self._value_rng)
        else:
            self._probs = _zipf_probabilities(task.domain_size, zipf)  # type: ignore[attr-defined]

    @property
    def client_ids(self) -> np.ndarray:
        return self.backend.client_ids

    def _draw(self, k: int) -> np.ndarray:
        """``k`` fresh values: Zipf over the domain, or a numeric task's dataset."""
        rng = self._value_rng
        if not self.numeric:
            return rng.choice(self.task.domain_size, size=k, p=self._probs)  # type: ignore[attr-defined]
        if self._pool is not None:
            return rng.choice(self._pool, size=k)
        from ldp.kinds.numeric.population import sample_values

        return sample_values(self.dataset, k, rng)

    def window(self, k: int, start_ms: int, end_ms: int) -> WindowBatch:
        """The reports of window ``k`` (event times uniform in ``[start_ms, end_ms)``)."""
        n, rng = self.users, self._value_rng
        change = rng.random(n) < self.drift
        self.values[change] = self._draw(int(change.sum()))
        active = rng.random(n) < self.active
        hist = None if self.numeric else np.bincount(self.values[active], minlength=self.task.domain_size)
        times = np.sort(self._time_rng.integers(start_ms, end_ms, size=n))
        order = self._time_rng.permutation(n)  # who reports when within the window
        times_u = np.empty(n, dtype=np.int64)
        times_u[order] = times
        if self.shuffled is not None:
            times_u = self.shuffled.round_ms(times_u)
        well = np.arange(self.misconfigured, n)
        send = well if self.hide else well[active[well]]
        vals = self.values[send].copy()
        if self.hide:
            vals[~active[send]] = self.absent
        reps, ok = self.backend.report(send, vals, times_u[send], self._noise_rng)
        users_ok = send[ok]
        parts, ev, who = [reps], [times_u[users_ok]], [users_ok]
        bad = np.arange(self.misconfigured)
        bad = bad if self.hide else bad[active[bad]]
        mv = self.values[bad].copy()
        if self.hide:
            mv[~active[bad]] = self.absent
        mis = 0
        for j in range(self.misconfigured_reports if len(bad) else 0):
            parts.append(self.backend.unchecked(bad, mv, self._noise_rng))
            t_bad = np.minimum(times_u[bad] + j, end_ms - 1)
            ev.append(t_bad if self.shuffled is None else self.shuffled.round_ms(t_bad))
            who.append(bad)
            mis += len(bad)
        reports = Reports.concat([p for p in parts if len(p)])
        event_ms = np.concatenate(ev).astype(np.int64)
        users_all = np.concatenate(who).astype(np.int64)
        values_all = np.concatenate([vals[ok], *([mv] * (len(who) - 1))])
        groups = users_all % self.task.n_groups
        truth: dict[str, Any] = {
            "window": k,
            "start_ms": start_ms,
            "end_ms": end_ms,
            "active": int(active.sum()),
            "dummies": int((~active[send]).sum()) if self.hide else 0,
            "refused": int((~ok).sum()),
            "misconfigured_reports": mis,
            "reports": int(len(reports)),
        }
        if self.numeric:
            a = self.task.attributes[0]  # type: ignore[attr-defined]
            clipped = np.clip(values_all, a.low, a.high)
            truth["mean"] = float(clipped.mean()) if len(clipped) else None
        else:
            truth["histogram"] = hist.tolist()  # type: ignore[union-attr]
        ids = None if self.shuffled is not None else self.client_ids[users_all]
        return WindowBatch(k, start_ms, end_ms, reports, event_ms, groups, ids, truth, users_all, values_all)

    def spent(self) -> np.ndarray:
        """Each user's spent epsilon under the policy's rule (the ledgers)."""
        return self.backend.spent()


# ------------------------------------------------------------------------------------------------------------
# sinks
# ------------------------------------------------------------------------------------------------------------
def write_window(
    batch: WindowBatch, task: Task, directory: str | Path, *, codec: str = "null"
) -> Path:
    """Writes one window's reports as ``DIR/reports-wNNNNN.avro`` then its ``.done`` marker."""
    from transforms.io import DONE_SUFFIX  # the watch's marker (transforms.io imports Beam: not at --help)

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"reports-w{batch.window:05d}.avro"
    tmp = d / f".{path.name}.tmp"
    with open(tmp, "wb") as fh:
        writer = fastavro.write.Writer(fh, schemas.report_schema(), codec=codec, sync_interval=1 << 20)
        write_reports(
            fh, writer, task.task_id, batch.reports, batch.event_ms, batch.groups, task.schema_version,
            codec, 1 << 15, client_ids=batch.client_ids,
        )  # fmt: skip
        writer.flush()
    os.replace(tmp, path)
    Path(str(path) + DONE_SUFFIX).touch()
    return path


def publish_window(
    batch: WindowBatch, task: Task, publisher: Any, topic: str, *, message_size: int = 500
) -> list[Any]:
    """Publishes one window's reports in messages of at most ``message_size`` reports (attribute
    ``event_time``: the latest event time of the message); returns the publish futures."""
    futures = []
    n = len(batch.event_ms)
    for lo in range(0, n, message_size):
        hi = min(n, lo + message_size)
        recs = reports_to_records(
            task.task_id, batch.reports.take(slice(lo, hi)), batch.event_ms[lo:hi], batch.groups[lo:hi],
            schema_version=task.schema_version,
            client_ids=None if batch.client_ids is None else batch.client_ids[lo:hi],
        )  # fmt: skip
        when = str(int(batch.event_ms[lo:hi].max()))
        futures.append(publisher.publish(topic, encode_report_container(recs), event_time=when))
    return futures


class CollectorRefused(Exception):
    """The collector refused a request for a reason a retry does not change (a 4xx answer), or kept
    answering 5xx / not answering until the retries ran out; ``status`` 0: no answer."""

    def __init__(self, status: int, answer: dict[str, Any]) -> None:
        super().__init__(f"collector answered {status}: {answer.get('error')}: {answer.get('detail')}")
        self.status = status
        self.answer = answer


def post_reports(
    url: str,
    body: bytes,
    content_type: str = "application/avro",
    *,
    key: str | None = None,
    token: str | None = None,
    retries: int = 8,
    backoff_s: float = 0.1,
    max_backoff_s: float = 10.0,
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """POSTs one request of reports to the collector (``http://HOST:PORT/v1/reports``) and returns its 200
    answer. Every attempt carries the same ``Idempotency-Key`` (``key``, default 128 random bits), so a
    retry after a lost answer is not written twice. Retried with exponential backoff and full jitter (or
    the answer's ``Retry-After``) on no answer, 429 and 5xx, at most ``retries`` times; any other refusal
    raises :class:`CollectorRefused` at once. ``token``: the collector's client token (``Authorization``)."""
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    key = key or os.urandom(16).hex()
    headers = {"Content-Type": content_type, "Idempotency-Key": key}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn_type = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    status, answer = 0, {"error": "no_answer", "detail": "no answer"}
    for attempt in range(retries + 1):
        wait = None
        try:
            conn = conn_type(u.hostname, u.port, timeout=timeout_s)
            try:
                conn.request("POST", u.path or "/v1/reports", body=body, headers=headers)
                resp = conn.getresponse()
                status, raw = resp.status, resp.read()
                retry_after = resp.getheader("Retry-After")
            finally:
                conn.close()
            try:
                answer = json.loads(raw or b"{}")
            except ValueError:
                answer = {"error": "bad_answer", "detail": raw[:200].decode("utf-8", "replace")}
            if status == 200:
                return answer
            if status != 429 and status < 500:
                raise CollectorRefused(status, answer)
            if retry_after is not None and retry_after.isdigit():
                wait = float(retry_after)
        except (OSError, http.client.HTTPException) as exc:
            status, answer = 0, {"error": "no_answer", "detail": str(exc)}
        if attempt == retries:
            break
        cap = min(max_backoff_s, backoff_s * 2**attempt)
        time.sleep(wait if wait is not None else cap * (0.5 + 0.5 * secure_rng().random()))
    raise CollectorRefused(status, answer)


def post_window(
    batch: WindowBatch, task: Task, url: str, *, request_size: int = 100, token: str | None = None,
    **retry: Any,
) -> int:
    """Posts one window's reports to the collector as Avro containers of at most ``request_size`` reports
    (keep it at or below the collector's ``--max_batch``), each with its own idempotency key and retries
    (:func:`post_reports`). A shuffled task's event times are rounded down to ``time_precision_s`` here
    too. Returns the reports acknowledged."""
    from ldp.anonymity import round_event_ms

    event_ms = batch.event_ms
    if getattr(task, "shuffled", False):
        event_ms = round_event_ms(event_ms, task.anonymity.time_precision_s)
    n, done = len(event_ms), 0
    for lo in range(0, n, request_size):
        hi = min(n, lo + request_size)
        recs = reports_to_records(
            task.task_id, batch.reports.take(slice(lo, hi)), event_ms[lo:hi], batch.groups[lo:hi],
            schema_version=task.schema_version,
            client_ids=None if batch.client_ids is None else batch.client_ids[lo:hi],
        )  # fmt: skip
        done += int(post_reports(url, encode_report_container(recs), token=token, **retry)["accepted"])
    return done


def iter_windows(pop: ClientPopulation, windows: int, start_ms: int, window_ms: int) -> Iterator[WindowBatch]:
    for k in range(windows):
        yield pop.window(k, start_ms + k * window_ms, start_ms + (k + 1) * window_ms)


# ------------------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = job_parser(__doc__.split("\n")[0], beam_options=False)
    p.add_argument("--task", required=True, help="task JSON file with a budget (frequency, or numeric with "
                   "memo-one-bit-mean)")
    p.add_argument("--users", type=int, default=1000, help="number of simulated users")
    p.add_argument("--windows", type=int, default=10, help="number of windows to report in")
    p.add_argument("--window_s", type=float, default=60.0, help="seconds per window (event time)")
    p.add_argument("--start", help="start of the first window, ISO 8601 (default: now, whole window)")
    p.add_argument("--state_dir", help="one client state file per user here (default: clients in memory)")
    p.add_argument("--output", help="watched directory to write one report file per window to")
    p.add_argument("--output_topic", help="Pub/Sub topic projects/P/topics/T to publish to")
    p.add_argument("--collector", metavar="URL", help="the HTTP collector to post to "
                   "(http://HOST:PORT/v1/reports; retried with backoff, one idempotency key a request)")
    p.add_argument("--token", help="the collector's client token (--collector with authentication)")
    p.add_argument("--message_size", type=int, default=500, help="reports per Pub/Sub message")
    p.add_argument("--pace", action="store_true", help="emit each window when its end passes on the clock")
    p.add_argument("--seed", type=int, default=0, help="entropy of the simulation's numpy SeedSequence")
    p.add_argument("--noise_seed", type=int, help="tests only: perturbation noise from a seeded PCG64 "
                   "(default: the OS CSPRNG, as real clients)")
    p.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the values (frequency tasks)")
    p.add_argument("--dataset", help="a numeric task's values: normal[:MEAN:STD], lognormal[:MU:SIGMA], "
                   "uniform[:LOW:HIGH] or csv:PATH:COLUMN (default: uniform on the attribute's bounds)")
    p.add_argument("--drift", type=float, default=0.1, help="probability a value is redrawn per window")
    p.add_argument("--active", type=float, default=1.0, help="probability a user has something to report")
    p.add_argument("--misconfigured", type=int, default=0, help="users that ignore their budget")
    p.add_argument("--misconfigured_reports", type=int, default=3, help="their reports per window")
    return p


def _load_clients_task(path: str) -> Task:
    """The task at ``path``, one the clients simulate and with a budget (else one line, exit 2)."""
    try:
        task = load_task(path)
    except TaskError as exc:
        fail(exc.one_line())
    if _client_inputs(task) not in ("categorical", "real"):
        fail(f"{path}: task {task.task_id!r} is a {task.kind} task; the clients simulate frequency tasks "
             "and numeric tasks of memo-one-bit-mean")
    if getattr(task, "budget", None) is None:
        fail(f"{path}: task {task.task_id!r} has no budget block; stateful clients need one")
    return task


def _window_grid(ns: argparse.Namespace) -> tuple[int, int]:
    """Checks the output and window flags; returns (start of the first window, window length) in ms."""
    from simulator import parse_iso8601_ms  # (the simulator's populations: not for --help)

    if sum(x is not None for x in (ns.output, ns.output_topic, ns.collector)) != 1:
        fail("give exactly one of --output DIR, --output_topic TOPIC and --collector URL")
    check_pubsub_path(ns.output_topic, "topic", flag="--output_topic")
    w = ns.window_s
    if not (math.isfinite(w) and w > 0) or abs(w * 1000 - round(w * 1000)) > 1e-6:
        fail(f"--window_s must be a positive whole number of milliseconds, got {ns.window_s}")
    if ns.windows < 1 or ns.users < 1:
        fail("--windows and --users must be >= 1")
    window_ms = int(round(ns.window_s * 1000))
    if not ns.start:
        return int(time.time() * 1000) // window_ms * window_ms, window_ms
    try:
        return parse_iso8601_ms(ns.start), window_ms
    except ValueError as exc:
        fail(f"--start: {exc}")


def _population_of_flags(task: Task, ns: argparse.Namespace) -> ClientPopulation:
    try:
        return ClientPopulation(
            task, ns.users, state_dir=ns.state_dir, seed=ns.seed, zipf=ns.zipf, drift=ns.drift,
            active=ns.active, misconfigured=ns.misconfigured, misconfigured_reports=ns.misconfigured_reports,
            noise_seed=ns.noise_seed, dataset=ns.dataset,
        )  # fmt: skip
    except ValueError as exc:
        fail(str(exc))


def _pubsub_publisher(topic: str) -> Any:
    """A Pub/Sub publisher for ``topic``, creating the topic when it does not exist."""
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    try:
        publisher.get_topic(request={"topic": topic})
    except gexc.NotFound:
        publisher.create_topic(request={"name": topic})
    return publisher


def _send_window(batch: WindowBatch, task: Task, ns: argparse.Namespace, publisher: Any) -> None:
    """Sends one window's reports where the flags say (after waiting for its end with --pace)."""
    if ns.pace:
        delay = batch.end_ms / 1000 - time.time()
        if delay > 0:
            time.sleep(delay)
    if publisher is not None:
        for f in publish_window(batch, task, publisher, ns.output_topic, message_size=ns.message_size):
            f.result(timeout=60)
    elif ns.collector is not None:
        try:
            post_window(batch, task, ns.collector, request_size=min(ns.message_size, 100), token=ns.token)
        except (CollectorRefused, ValueError) as exc:
            fail(f"--collector: {exc}")
    else:
        write_window(batch, task, ns.output)


def _write_summary(
    task: Task, ns: argparse.Namespace, pop: ClientPopulation, truths: list[dict[str, Any]]
) -> dict[str, Any]:
    """The run's summary: written to ``OUT/clients-truth.json`` (with --output), one line printed."""
    spent = pop.spent()
    summary = {
        "task_id": task.task_id,
        "users": ns.users,
        "windows": truths,
        "refused": sum(t["refused"] for t in truths),
        "misconfigured_reports": sum(t["misconfigured_reports"] for t in truths),
        "spent_epsilon": {"max": float(spent.max()), "mean": float(spent.mean())},
    }
    if ns.output:
        Path(ns.output, "clients-truth.json").write_text(json.dumps(summary) + "\n", encoding="utf-8")
    print(
        f"clients: {ns.users} users, {ns.windows} windows, {sum(t['reports'] for t in truths)} reports "
        f"({summary['refused']} refused by the clients' budgets, {summary['misconfigured_reports']} from "
        f"misconfigured clients); spent epsilon max {summary['spent_epsilon']['max']:.4g}",
        flush=True,
    )
    return summary


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the clients; returns (and writes to ``OUT/clients-truth.json``) the summary."""
    ns, _ = parse_job_args(parser(), argv, beam=False)
    task = _load_clients_task(ns.task)
    start_ms, window_ms = _window_grid(ns)
    pop = _population_of_flags(task, ns)
    publisher = _pubsub_publisher(ns.output_topic) if ns.output_topic else None
    truths = []
    for batch in iter_windows(pop, ns.windows, start_ms, window_ms):
        _send_window(batch, task, ns, publisher)
        truths.append(batch.truth)
    return _write_summary(task, ns, pop, truths)


if __name__ == "__main__":
    run()
