"""The on-device client of repeated collection: a per-user secret, a budget ledger per task, a state file.

A :class:`Client` holds a 256-bit secret drawn from the OS CSPRNG (:func:`secrets.token_bytes`) and never
sent, printed or logged (its ``repr`` hides it). Memoized mechanisms derive each permanent response from
``HMAC-SHA256(secret, task || key)`` (:func:`ldp.longitudinal.memo.memo_words_hmac`), so the memos are
recomputed, never stored, and a lost state file means a new secret: fresh permanent responses, which spend
budget again (the ledger's record is lost with it; the aggregator's per-client-id count is the backstop).
The fresh noise of each report (the instantaneous stage, or a fresh oracle's perturbation) comes from the
OS CSPRNG too: ``rng=None``, the default of :meth:`Client.report`, is :func:`ldp.csprng.secure_rng`.

:meth:`Client.report` is the only way a report leaves: it reloads the state file under an exclusive lock
(several processes of one app stay consistent; the clock is read once the lock is held), asks the task's
:class:`~ldp.longitudinal.budget.BudgetLedger` (which raises :class:`~ldp.longitudinal.budget.BudgetExceeded`
naming the limit, producing no report), draws the report, writes the charged state atomically and only
then returns the report: a crash between the two never un-spends a report.

State file format, version 1 (JSON, UTF-8; written to a temporary file in the same directory with mode
0600, fsynced, then renamed over the old one; refused on load when group or others can read it)::

    {
      "format": "ldp-longitudinal-client",   # fixed
      "version": 1,                          # STATE_VERSION; other versions are refused, never guessed
      "secret": "<64 hex digits>",           # the 256-bit secret: as sensitive as the user's raw values
      "created_s": 1764547200.0,             # when the secret was drawn (seconds since the epoch)
      "tasks": {                             # one entry per task id the client has reported for
        "fruit-2026-12": {
          "mechanism": {"mechanism": "loloha", "epsilon": 1.0, "domain_size": 64, ...},
                                             # the oracle's parameters at the first report; a later report
                                             # with other parameters under the same task id is refused
          "policy": {...},                   # the BudgetPolicy's JSON block, same rule
          "ledger": {                        # LedgerState
            "reports": 12, "period": 20423, "period_reports": 3,
            "keys": ["<32 hex digits>", ...], # keyed digests (HMAC) of the memoization keys charged
            "last_time_s": 1764551000.0
          }
        }
      }
    }

The ``keys`` are HMAC tags of the memoization keys (values, or LOLOHA buckets), not the values; but anyone
holding the file holds the secret and can test candidate values against them, so the file must be protected
like the raw data (mode 0600, app-private storage, excluded from cloud backups).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ldp.longitudinal.accounting import policy_problems, tight_epsilon_fn
from ldp.longitudinal.budget import (
    BudgetExceeded,
    BudgetLedger,
    BudgetPolicy,
    Charge,
    LedgerState,
    parse_budget,
)
from ldp.longitudinal.memo import MemoizedOracle, memo_tag
from ldp.oracles import FrequencyOracle, Reports, check_values

__all__ = [
    "Client",
    "StateFileError",
    "ShuffledCollection",
    "WindowReportRefused",
    "STATE_VERSION",
    "STATE_FORMAT",
    "SECRET_BYTES",
]

STATE_FORMAT = "ldp-longitudinal-client"
STATE_VERSION = 1
SUPPORTED_STATE_VERSIONS = (1,)
SECRET_BYTES = 32


class StateFileError(ValueError):
    """A state file that cannot be used (missing, malformed, another version, readable by others)."""


class WindowReportRefused(BudgetExceeded):
    """A second report in one aggregation window of a shuffled task; no report was produced (``limit``:
    ``"one_report_per_window"``)."""


@dataclasses.dataclass(frozen=True)
class ShuffledCollection:
    """What a client of a shuffled task (``anonymity.shuffled``) must keep: event times rounded down to
    ``precision_s``, and at most one report per aggregation window (the shuffle accounting counts each
    report as one user of its window).

    Attributes:
        precision_s: ``anonymity.time_precision_s``.
        window_s: the task's window size (``window.size_s``); None: one global window, so one report in all.
        period_s: the sliding period (``window.period_s``); None: fixed windows. Windows start at multiples
            of the period (of the size for fixed windows) since the epoch, as Beam's windows do.
    """

    precision_s: int
    window_s: float | None = None
    period_s: float | None = None

    @classmethod
    def of_task(cls, task: Any) -> ShuffledCollection | None:
        """The rule of a parsed task (``task.anonymity``, ``task.window``); None when it is not shuffled."""
        settings = getattr(task, "anonymity", None)
        if settings is None or not settings.shuffled:
            return None
        window = getattr(task, "window", None)
        return cls(
            int(settings.time_precision_s),
            None if window is None else window.size_s,
            None if window is None else window.period_s,
        )

    def round_ms(self, t_ms: Any) -> np.ndarray:
        """Times (int64 milliseconds) rounded down to the precision (floor)."""
        a = np.asarray(t_ms, dtype=np.int64)
        return a - np.mod(a, np.int64(self.precision_s * 1000))

    def round_s(self, t_s: float) -> float:
        """One time in seconds rounded down to the precision."""
        return float(math.floor(float(t_s) / self.precision_s) * self.precision_s)

    def same_window(self, earlier_ms: Any, later_ms: Any) -> np.ndarray:
        """Whether an aggregation window holds both times (int64 milliseconds, ``earlier <= later``;
        arrays broadcast)."""
        a = np.asarray(earlier_ms, dtype=np.int64)
        b = np.asarray(later_ms, dtype=np.int64)
        if self.window_s is None:
            return np.ones(np.broadcast(a, b).shape, dtype=bool)
        size = np.int64(round(self.window_s * 1000))
        step = size if self.period_s is None else np.int64(round(self.period_s * 1000))
        # the latest window start at or before ``a``; a window from there holds ``b`` iff it ends after it
        return (a - np.mod(a, step)) + size > b


_TIGHT: dict[tuple[str, float], Any] = {}


def _memoized(oracle: Any) -> bool:
    """A memoized mechanism: a :class:`~ldp.longitudinal.memo.MemoizedOracle`, or one that says so
    (``memoized = True``: the numeric counter ``ldp.numeric.memo.MemoizedOneBitMean``, whose value is a
    number). Both offer ``epsilon_inf``, ``client_memo_key`` and ``client_report``."""
    return isinstance(oracle, MemoizedOracle) or bool(getattr(oracle, "memoized", False))


def _tight_fn(oracle: FrequencyOracle, delta: float):
    """``tight_epsilon_fn`` cached per oracle parameters and delta (its figures are cached per k), so a
    ``"pld"`` ledger composes each report count once per process."""
    key = (json.dumps(_fingerprint(oracle), sort_keys=True), float(delta))
    if key not in _TIGHT:
        _TIGHT[key] = tight_epsilon_fn(oracle, delta)
    return _TIGHT[key]


def _fingerprint(oracle: FrequencyOracle) -> dict[str, Any]:
    """The parameters that must not change under one task id (JSON-safe)."""
    out: dict[str, Any] = {}
    for k, v in oracle.describe().items():
        if isinstance(v, (np.floating, float)):
            out[k] = float(v)
        elif isinstance(v, (np.integer, int)) and not isinstance(v, bool):
            out[k] = int(v)
        elif isinstance(v, (str, bool)) or v is None:
            out[k] = v
    return out


def _same_fingerprint(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, float) or isinstance(y, float):
            if not (isinstance(x, (int, float)) and isinstance(y, (int, float))):
                return False
            if not (x == y or (math.isinf(x) and math.isinf(y)) or math.isclose(x, y, rel_tol=1e-12)):
                return False
        elif x != y:
            return False
    return True


class Client:
    """One user's client (see the module docstring). Build with :meth:`create` or :meth:`load`.

    Attributes:
        path: the state file.
        created_s: when the secret was drawn.
    """

    def __init__(self, path: str | Path, secret: bytes, created_s: float, tasks: dict[str, dict]) -> None:
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"secret must be {SECRET_BYTES} bytes")
        self.path = Path(path)
        self.__secret = bytes(secret)
        self.created_s = float(created_s)
        self._tasks = tasks

    def __repr__(self) -> str:  # never the secret
        return f"Client(path={str(self.path)!r}, tasks={sorted(self._tasks)})"

    __str__ = __repr__

    def __getstate__(self) -> dict:
        raise TypeError("a Client holds a secret and is not picklable; reload it from its state file")

    # -- creation and persistence --------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, *, overwrite: bool = False) -> Client:
        """A new client with a fresh secret (OS CSPRNG), saved to ``path`` (mode 0600).

        Raises:
            FileExistsError: ``path`` exists and ``overwrite`` is False (a new secret would re-spend budget).
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists: load it (Client.load) instead of drawing a new secret, "
                                  "which would re-randomize every permanent response and spend the budget "
                                  "again")
        client = cls(path, secrets.token_bytes(SECRET_BYTES), time.time(), {})
        with client._locked():
            client._save()
        return client

    @classmethod
    def load(cls, path: str | Path) -> Client:
        """Reads a state file (see the module docstring for the checks)."""
        path = Path(path)
        secret, created, tasks = _read_state(path)
        return cls(path, secret, created, tasks)

    def _document(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "secret": self.__secret.hex(),
                "created_s": self.created_s, "tasks": self._tasks}

    def _save(self) -> None:
        _write_atomic(self.path, json.dumps(self._document(), indent=1, sort_keys=True).encode("utf-8"))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _reload(self) -> None:
        secret, created, tasks = _read_state(self.path)
        if secret != self.__secret:
            raise StateFileError(f"{self.path}: the secret changed under this client (another create?)")
        self.created_s, self._tasks = created, tasks

    def client_id(self, task_id: str) -> bytes:
        """The pseudonymous client id of this user in one task's reports (``client_id`` of
        ``schemas/report.avsc``): :func:`ldp.reports.client_pseudonym` of the secret, 32 bytes; unlinkable
        across tasks without the secret."""
        from ldp.reports import client_pseudonym

        return client_pseudonym(self.__secret, task_id)

    # -- what the client knows ------------------------------------------------------------------------------
    def tasks(self) -> list[str]:
        """Task ids with state."""
        return sorted(self._tasks)

    def ledger_state(self, task_id: str) -> LedgerState | None:
        """The ledger state of a task (None before its first report)."""
        entry = self._tasks.get(task_id)
        return None if entry is None else LedgerState.from_dict(entry["ledger"])

    def spent(self, task_id: str, oracle: FrequencyOracle, policy: BudgetPolicy) -> float:
        """Epsilon spent on a task under its policy's rule."""
        return self._ledger(task_id, oracle, policy).spent()

    def _ledger(self, task_id: str, oracle: FrequencyOracle, policy: BudgetPolicy) -> BudgetLedger:
        entry = self._tasks.get(task_id)
        state = None if entry is None else LedgerState.from_dict(entry["ledger"])
        per_key = oracle.epsilon_inf if _memoized(oracle) else None
        tight = _tight_fn(oracle, policy.delta) if policy.composition == "pld" else None
        return BudgetLedger(policy, epsilon_per_key=per_key, tight_epsilon=tight, state=state)

    def _check_task(self, task_id: str, oracle: FrequencyOracle, policy: BudgetPolicy) -> None:
        if not isinstance(task_id, str) or not task_id:
            raise ValueError("task_id must be a non-empty string")
        problems = policy_problems(policy, oracle)
        if problems:
            raise ValueError(f"task {task_id!r}: " + "; ".join(problems))
        entry = self._tasks.get(task_id)
        if entry is None:
            return
        if not _same_fingerprint(entry["mechanism"], _fingerprint(oracle)):
            raise ValueError(
                f"task {task_id!r} was reported with mechanism {entry['mechanism']} and is now asked with "
                f"{_fingerprint(oracle)}: changing parameters needs a new task id (the permanent responses "
                "and the budget belong to the first ones)"
            )
        if parse_budget(entry["policy"]) != policy:
            raise ValueError(f"task {task_id!r} was reported under budget {entry['policy']} and is now asked "
                             f"under {policy.to_dict()}: a new budget needs a new task id")

    # -- reporting -------------------------------------------------------------------------------------
    def report(self, task_id: str, oracle: FrequencyOracle, policy: BudgetPolicy, value: int, *,
               now_s: float | None = None, rng: np.random.Generator | int | None = None,
               shuffled: ShuffledCollection | None = None) -> Reports:
        """One report of ``value`` for a task, within its budget.

        Args:
            task_id: the task's id (separates the permanent responses and the budgets of tasks).
            oracle: the task's oracle: a :class:`~ldp.longitudinal.memo.MemoizedOracle` (permanent response
                from the secret, fresh instantaneous noise) or a fresh :class:`~ldp.oracles.FrequencyOracle`.
            policy: the task's budget (:func:`~ldp.longitudinal.accounting.policy_problems` must be empty).
            value: the user's current value.
            now_s: the report's time (default: the clock, read once the state file's lock is held, so
                concurrent processes of one client charge their reports in the order they take the lock).
            rng: ``None`` on devices: noise from the OS CSPRNG (:func:`ldp.csprng.secure_rng`); a seed
                or Generator in tests and simulations only.
            shuffled: the task's :class:`ShuffledCollection` (``ShuffledCollection.of_task(task)``) when
                its reports go through the shuffler: the time is rounded down to the precision before
                anything uses it (the ledger and the state file keep only the rounded time; the report's
                ``event_time`` must be ``shuffled.round_ms(now)``), and a second report in an aggregation
                window that already holds one is refused.

        Returns:
            A batch of one report in the oracle's wire format.

        Raises:
            BudgetExceeded: past ``reports_per_period`` or ``total_epsilon``; no report is produced and the
                state is unchanged.
            WindowReportRefused: (a ``BudgetExceeded``) a shuffled task's second report in one window.
            ValueError: a bad value, a policy that does not fit the oracle, or a task id reused with other
                parameters.
        """
        with self._locked():
            # the clock is read under the lock: a process that waited for the lock must not charge a time
            # older than the last report another process wrote while it waited
            t = time.time() if now_s is None else float(now_s)
            self._reload()
            self._check_task(task_id, oracle, policy)
            ledger = self._ledger(task_id, oracle, policy)
            if shuffled is not None:
                t = shuffled.round_s(t)
                _refuse_second_in_window(task_id, ledger, shuffled, t)
            if _memoized(oracle):  # authorize first: a refused report is never drawn
                key = oracle.client_memo_key(self.__secret, task_id, value)
                charge: Charge = ledger.authorize(t, memo_tag(self.__secret, task_id, key))
                rep, _ = oracle.client_report(self.__secret, task_id, value, rng=rng)
            else:
                check_values(np.asarray([value]), oracle.d)
                charge = ledger.authorize(t)
                rep = oracle.encode_one(value, rng=rng)
            self._save_charge(task_id, oracle, policy, charge)
            ledger.commit(charge)
        return rep

    def _save_charge(
        self, task_id: str, oracle: FrequencyOracle, policy: BudgetPolicy, charge: Charge
    ) -> None:
        """Writes the task's entry with the charged ledger to the state file; on failure the entry in
        memory is put back as it was (nothing charged)."""
        before = self._tasks.get(task_id)
        self._tasks[task_id] = {"mechanism": _fingerprint(oracle), "policy": policy.to_dict(),
                                "ledger": charge.state.to_dict()}
        try:
            self._save()
        except BaseException:
            if before is None:
                self._tasks.pop(task_id, None)
            else:
                self._tasks[task_id] = before
            raise


def _refuse_second_in_window(
    task_id: str, ledger: BudgetLedger, shuffled: ShuffledCollection, t: float
) -> None:
    """Raises :class:`WindowReportRefused` when the ledger's last report (at or before the rounded time
    ``t``) falls in the same aggregation window as ``t``."""
    last = ledger.state.last_time_s
    if last is not None and t >= last and bool(shuffled.same_window(round(last * 1000), round(t * 1000))):
        raise WindowReportRefused(
            f"task {task_id!r} is collected through the shuffler: one report per user per "
            f"window, and this client already reported in the window holding t = {t:g} s "
            f"(its last report at t = {last:g} s, rounded to {shuffled.precision_s} s); "
            "no report produced",
            limit="one_report_per_window", spent=ledger.spent(), requested=0.0,
        )


# ------------------------------------------------------------------------------------------------
# File helpers
# ------------------------------------------------------------------------------------------------
def _write_atomic(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically: a 0600 temporary file in the same directory, fsync, rename,
    fsync of the directory."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read_state(path: Path) -> tuple[bytes, float, dict[str, dict]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StateFileError(f"{path}: no state file (Client.create makes one)") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise StateFileError(
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} lets group or others access the client's secret; "
            "refusing to use it (chmod 600 it if it was not exposed, otherwise create a new client)"
        )
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateFileError(f"{path}: not a JSON state file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        raise StateFileError(f"{path}: not an {STATE_FORMAT} state file")
    version = doc.get("version")
    if version not in SUPPORTED_STATE_VERSIONS:
        raise StateFileError(f"{path}: state file version {version!r} is not supported (this code reads "
                             f"version(s) {', '.join(map(str, SUPPORTED_STATE_VERSIONS))})")
    known = {"format", "version", "secret", "created_s", "tasks"}
    if set(doc) - known:
        raise StateFileError(f"{path}: unknown keys {sorted(set(doc) - known)}")
    try:
        secret = bytes.fromhex(doc.get("secret", ""))
    except (TypeError, ValueError):
        raise StateFileError(f"{path}: the secret is not hex") from None
    if len(secret) != SECRET_BYTES:
        raise StateFileError(f"{path}: the secret must be {SECRET_BYTES} bytes")
    created = doc.get("created_s")
    if not isinstance(created, (int, float)) or isinstance(created, bool) or not math.isfinite(created):
        raise StateFileError(f"{path}: created_s must be a number")
    tasks = doc.get("tasks")
    if not isinstance(tasks, dict):
        raise StateFileError(f"{path}: tasks must be an object")
    for tid, entry in tasks.items():
        if not isinstance(entry, dict) or set(entry) != {"mechanism", "policy", "ledger"}:
            raise StateFileError(f"{path}: task {tid!r} must have exactly mechanism, policy and ledger")
        try:
            parse_budget(entry["policy"])
            LedgerState.from_dict(entry["ledger"])
        except ValueError as exc:
            raise StateFileError(f"{path}: task {tid!r}: {exc}") from None
        if not isinstance(entry["mechanism"], dict):
            raise StateFileError(f"{path}: task {tid!r}: mechanism must be an object")
    return secret, float(created), tasks
