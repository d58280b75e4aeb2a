"""The latest-state store: :func:`open_store` and :class:`Store` (write API for the sink, read API for the
dashboard) over SQLite (standard-library ``sqlite3``, WAL mode) or PostgreSQL (psycopg 3).

Write API (each call is ONE transaction, so a reader never sees half of it):

* :meth:`Store.write_task` -- the task and the job's summary (``ldp_tasks``);
* :meth:`Store.write_pane` -- the result rows of one task, window and pane: ``ldp_current`` (a pane replaces
  an older or equal pane's rows, never a newer one's), ``ldp_history``, ``ldp_panes``, ``ldp_windows``;
* :meth:`Store.mark_final` -- the window is final (the watermark passed its end plus the allowed lateness);
* :meth:`Store.write_counts` -- read / accepted / rejected / lost / late_dropped and dead-letter reasons of a
  counts window of one run (``ldp_counts``);
* :meth:`Store.begin_run`, :meth:`Store.heartbeat`, :meth:`Store.end_run` -- the job's run (``ldp_runs``):
  a second live run of a task is refused unless asked for.

Every write is idempotent: writing the same pane (a retried bundle) again changes nothing, not even the
time it was first written; an older pane arriving after a newer one goes to the history only. So a write
that failed can be retried as a whole: :func:`call_with_retry` does, with exponential backoff, for
:func:`is_transient` errors (a server restarting, a locked SQLite file), reconnecting between tries.

Read API (plain dicts, JSON-able; times in epoch milliseconds; the global window is 0/0):

* :meth:`Store.tasks`, :meth:`Store.task` -- what tasks the store holds;
* :meth:`Store.windows` -- the latest windows of a task (latest first);
* :meth:`Store.current` -- the current rows of a window (optionally the top k per output and group);
* :meth:`Store.series` -- chosen items across the latest windows (oldest first);
* :meth:`Store.counts` -- counts per counts window (oldest first);
* :meth:`Store.pane_latencies` -- one entry per pane: when it was first written, latency from window end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ldp.kinds import flatten_rows
from ldp.rows import DEFAULT_MAX_ITEMS, FlatPane, window_ms
from store import schema

__all__ = [
    "StoreError",
    "StoreLost",
    "StoreUnavailable",
    "RunConflict",
    "WindowFinal",
    "Store",
    "open_store",
    "parse_store_url",
    "redact_url",
    "now_ms",
    "is_transient",
    "call_with_retry",
    "run_conflict_message",
    "process_identity",
    "process_gone",
    "HEARTBEAT_S",
    "STALE_RUN_S",
]

_LOG = logging.getLogger(__name__)

#: Seconds between a live run's heartbeats (``ldp_runs.heartbeat_ms``).
HEARTBEAT_S = 10.0
#: A live run whose heartbeat is older than this many seconds counts as dead (its launcher is gone).
STALE_RUN_S = 90.0


class StoreError(RuntimeError):
    """A store that cannot be opened or used (a bad URL, an unreachable server, a schema mismatch); the
    message is one line."""


class StoreUnavailable(StoreError):
    """The store cannot be reached now (a server down or restarting): worth retrying."""


class StoreLost(StoreError):
    """The store the job opened is gone: its SQLite file was deleted or replaced, or it no longer holds the
    job's run. Never retried (a new empty file is not the store)."""


class WindowFinal(StoreError):
    """A pane of one run for a window that another run already made final: nothing of it is written."""


class RunConflict(StoreError):
    """Another live run of the same task writes to the store."""


def now_ms() -> int:
    return int(time.time() * 1000)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def parse_store_url(url: str) -> tuple[str, str]:
    """``(dialect, target)``: ``("sqlite", PATH)`` or ``("postgresql", URL)``.

    * ``sqlite:///PATH`` -- the rest after the three slashes is the path: ``sqlite:///out/e.db`` is relative,
      ``sqlite:////abs/e.db`` absolute (the SQLAlchemy convention);
    * a plain path (no ``://``) -- SQLite;
    * ``postgresql://...`` or ``postgres://...`` -- PostgreSQL (a libpq URI).

    Raises:
        StoreError: an empty URL, another scheme, or ``sqlite://`` without a path.
    """
    if not isinstance(url, str) or not url.strip():
        raise StoreError("the store URL is empty")
    url = url.strip()
    if "://" not in url:
        return "sqlite", url
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise StoreError(f"store URL {url!r}: give sqlite:///PATH (e.g. sqlite:///out/estimates.db)")
        return "sqlite", url[len("sqlite:///") :]
    if scheme in ("postgresql", "postgres"):
        return "postgresql", url
    raise StoreError(
        f"store URL {redact_url(url)!r}: unsupported scheme {scheme!r} (use sqlite:///PATH, a file path or "
        "postgresql://USER@HOST:PORT/DB)"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def is_transient(exc: BaseException) -> bool:
    """Whether a failed store call may succeed when tried again: an unreachable or restarting server, a
    broken connection, a locked or busy SQLite database, an I/O error. Not: a deleted store
    (:class:`StoreLost`), a schema mismatch, a bad statement or a constraint violation (bugs)."""
    if isinstance(exc, StoreLost):
        return False
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return True
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a runtime dependency
        return False
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def call_with_retry(
    fn: Callable[[], Any],
    bound_s: float,
    *,
    what: str = "store write",
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    first_delay_s: float = 0.1,
    max_delay_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Calls ``fn()`` until it returns, retrying :func:`is_transient` errors with exponential backoff
    (``first_delay_s``, doubling, at most ``max_delay_s`` apart) for up to ``bound_s`` seconds after the
    first failure; then (or at once for any other error) re-raises the last error. ``fn`` must be
    idempotent (every write of :class:`Store` is). ``on_retry(attempt, error, delay_s)`` is told before
    each wait."""
    deadline = time.monotonic() + max(0.0, float(bound_s))
    delay = first_delay_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised when not transient
            left = deadline - time.monotonic()
            if not is_transient(exc) or left <= 0:
                raise
            wait = min(delay, max_delay_s, left)
            if on_retry is not None:
                on_retry(attempt, exc, wait)
            else:
                _LOG.warning(
                    "%s failed (try %d): %s; retrying in %.1f s", what, attempt, _first_line(exc), wait
                )
            sleep(wait)
            delay *= 2


def _proc_stat(pid: int) -> tuple[str, int]:
    """Process ``pid``'s state letter and start time in clock ticks since boot (``/proc/PID/stat`` fields
    3 and 22)."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
        stat = fh.read()
    fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 on, after the command name
    return fields[0], int(fields[19])


def _this_kernel() -> str:
    """This kernel boot and pid namespace: ``BOOT_ID/PIDNS`` (the scope in which a pid means a process)."""
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
        boot = fh.read().strip()
    return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"


def process_identity(pid: int | None = None) -> str | None:
    """``BOOT_ID/PIDNS/PID/START`` naming one process for as long as the machine runs (a pid alone may be
    reused), or None where ``/proc`` cannot tell (not Linux)."""
    pid = os.getpid() if pid is None else int(pid)
    try:
        return f"{_this_kernel()}/{pid}/{_proc_stat(pid)[1]}"
    except (OSError, ValueError, IndexError):
        return None


def process_gone(identity: str | None) -> bool:
    """Whether the process named by :func:`process_identity` has ended: True only when it ran under this
    kernel boot and pid namespace and no process with its pid and start time runs now (killed, even
    with SIGKILL; a zombie counts as ended); False when that cannot be told (another machine or
    container, no ``/proc``)."""
    if not identity:
        return False
    try:
        scope, pid, start = identity.rsplit("/", 2)
        if scope != _this_kernel():
            return False
    except (OSError, ValueError):
        return False
    try:
        state, started = _proc_stat(int(pid))
        return state in ("Z", "X") or started != int(start)  # ended, not yet reaped; or the pid reused
    except FileNotFoundError:
        return True
    except (OSError, ValueError, IndexError):
        return False


def run_conflict_message(task_id: str, other: Mapping[str, Any], stale_after_s: float = STALE_RUN_S) -> str:
    """The one line refusing a second live run of ``task_id`` (``other``: the live run's ``ldp_runs``
    row)."""
    age_s = max(0, now_ms() - int(other["heartbeat_ms"])) / 1000
    return (
        f"task {task_id!r} already has a live run {other['run_id']} on this store (host {other['host']}, "
        f"pid {other['pid']}, heartbeat {age_s:.0f} s ago); stop it, or wait until its heartbeat is "
        f"{stale_after_s:g} s old, or pass --store_allow_concurrent_runs"
    )


# ------------------------------------------------------------------------------------------------------------
# backends: one connection per process and URL, shared by the threads of the process under a lock
# ------------------------------------------------------------------------------------------------------------


class _Backend:
    dialect = ""

    def __init__(self) -> None:
        self.lock = threading.RLock()

    def sql(self, text: str) -> str:
        return text

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        raise NotImplementedError

    def query(self, text: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """After a failed call: the next call starts from a fresh connection when one is needed."""

    def set_wait_s(self, seconds: float) -> None:
        """How long one call waits for a lock held by another connection (SQLite's busy timeout)."""


class _SqliteCursor:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(text, tuple(params))

    def executemany(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(text, rows)

    def bulk(self, text: str, rows: Sequence[Sequence[Any]], types: Sequence[str]) -> None:
        """``text`` (an INSERT with one ``VALUES (?, ...)`` row) for every row."""
        self.conn.executemany(text, rows)

    def one(self, text: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return self.conn.execute(text, tuple(params)).fetchone()


class _SqliteBackend(_Backend):
    dialect = "sqlite"

    def __init__(self, path: str, must_exist: bool = False) -> None:
        super().__init__()
        self.path = path
        parent = os.path.dirname(os.path.abspath(path))
        if must_exist and not os.path.isfile(path):
            raise StoreLost(f"store file {path!r} does not exist (deleted while the job ran?)")
        try:
            os.makedirs(parent, exist_ok=True)
            # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT); must_exist: mode=rw
            # never creates a new, empty file in place of a deleted store
            target = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw" if must_exist else path
            self.conn = sqlite3.connect(
                target, timeout=30.0, isolation_level=None, check_same_thread=False, uri=must_exist
            )
            mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA busy_timeout=30000")
            st = os.stat(path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"store {path!r} cannot be opened: {_first_line(exc)}") from None
        #: the file this connection writes: a path that no longer names it is a lost store
        self.identity = (st.st_dev, st.st_ino)
        if str(mode).lower() != "wal":
            raise StoreError(f"store {path!r}: SQLite would not use WAL mode (got {mode!r}); is it on NFS?")

    def check_file(self) -> None:
        """Raises :class:`StoreLost` when the path no longer names the file this connection opened (it was
        deleted, or replaced by another file): writes would go to an unlinked file nobody reads."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreLost(f"store file {self.path!r} was deleted while the job ran") from None
        if (st.st_dev, st.st_ino) != self.identity:
            raise StoreLost(f"store file {self.path!r} was replaced by another file while the job ran")

    def set_wait_s(self, seconds: float) -> None:
        with self.lock:
            self.conn.execute(f"PRAGMA busy_timeout={max(1, int(seconds * 1000))}")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_SqliteCursor]:
        with self.lock:
            self.check_file()
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteCursor(self.conn)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # no transaction left after some I/O errors
                    self.conn.execute("ROLLBACK")
                raise
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
                raise

    def query(self, text: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.lock:
            cur = self.conn.execute(text, tuple(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def close(self) -> None:
        with self.lock:
            self.conn.close()


class _PgCursor:
    def __init__(self, cur: Any, backend: _PgBackend) -> None:
        self.cur = cur
        self.backend = backend

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        return self.cur.execute(self.backend.sql(text), tuple(params))

    def executemany(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            self.cur.executemany(self.backend.sql(text), rows)

    def bulk(self, text: str, rows: Sequence[Sequence[Any]], types: Sequence[str]) -> None:
        """``text`` (an INSERT with one ``VALUES (?, ...)`` row) for every row, as ONE statement: the
        VALUES row becomes ``SELECT * FROM unnest(?::type[], ...)`` with one array per column (one round
        trip whatever the number of rows)."""
        if not rows:
            return
        values = "VALUES (" + ", ".join("?" * len(types)) + ")"
        if values not in text:
            raise ValueError("bulk() needs an INSERT ... VALUES (?, ...) statement")
        unnest = "SELECT * FROM unnest(" + ", ".join(f"?::{t}[]" for t in types) + ")"
        columns = [list(col) for col in zip(*rows)]
        self.cur.execute(self.backend.sql(text.replace(values, unnest)), columns)

    def one(self, text: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        self.cur.execute(self.backend.sql(text), tuple(params))
        return self.cur.fetchone()


class _PgBackend(_Backend):
    dialect = "postgresql"

    def __init__(self, url: str, connect_timeout_s: float = 5.0) -> None:
        super().__init__()
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.conn = self._connect()

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:  # pragma: no cover - psycopg is a runtime dependency
            raise StoreError(
                "a postgresql:// store needs psycopg 3 (pip install 'psycopg[binary]')"
            ) from None
        try:
            return psycopg.connect(
                self.url, autocommit=True, connect_timeout=int(max(1, self.connect_timeout_s))
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"store {redact_url(self.url)!r} is unreachable: {_first_line(exc)}"
            ) from None

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _alive(self) -> None:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = None
            self.conn = self._connect()

    def reset(self) -> None:
        with self.lock:
            if self.conn is not None:
                with contextlib.suppress(Exception):
                    self.conn.close()
            self.conn = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_PgCursor]:
        with self.lock:
            self._alive()
            with self.conn.transaction(), self.conn.cursor() as cur:
                yield _PgCursor(cur, self)

    def query(self, text: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.lock:
            self._alive()
            with self.conn.cursor() as cur:
                cur.execute(self.sql(text), tuple(params))
                if cur.description is None:
                    return []
                names = [d.name for d in cur.description]
                return [dict(zip(names, r)) for r in cur.fetchall()]

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()


_BACKENDS: dict[tuple[int, str, str], _Backend] = {}
_BACKENDS_LOCK = threading.Lock()


def _backend(dialect: str, target: str, shared: bool, must_exist: bool) -> _Backend:
    key = (os.getpid(), dialect, os.path.abspath(target) if dialect == "sqlite" else target)
    with _BACKENDS_LOCK:
        b = _BACKENDS.get(key) if shared else None
        if b is None:
            b = _SqliteBackend(target, must_exist) if dialect == "sqlite" else _PgBackend(target)
            if shared:
                _BACKENDS[key] = b
        return b


def open_store(url: str, *, create: bool = True, shared: bool = True, must_exist: bool = False) -> Store:
    """Opens (and by default creates the tables of) the store at ``url`` (see :func:`parse_store_url`).

    ``shared``: reuse this process's connection to the same database (the threads of a Beam worker share
    one connection under a lock); ``shared=False`` opens a private one (tests, readers in threads).
    ``must_exist``: a missing SQLite file is :class:`StoreLost`, never created (the job's writers).

    Raises:
        StoreError: a bad URL, a file that cannot be created, an unreachable server
            (:class:`StoreUnavailable`), or a store written by another schema version (one line, password
            redacted).
    """
    dialect, target = parse_store_url(url)
    store = Store(_backend(dialect, target, shared, must_exist), url, owns=not shared)
    if create:
        store.create_schema()
    return store


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _flat_window_base(
    cur: Any, task_id: str, ws: int, we: int, run_pane: int, run_id: str | None
) -> tuple[int, int]:
    """The window's ``is_final`` flag and the pane-index base of a run's panes in it: 0 without
    ``run_id``, else one more than the highest pane index the other runs stored for the window (0 when
    they stored none). Raises :class:`WindowFinal` when another run made the window final."""
    got = cur.one(
        "SELECT is_final, run_id FROM ldp_windows WHERE task_id = ? AND window_start = ? AND "
        "window_end = ?",
        (task_id, ws, we),
    )
    final = int(got[0]) if got is not None else 0
    base = 0
    if run_id is not None:
        if final and got[1] != run_id:
            raise WindowFinal(
                f"window {ws}..{we} of {task_id} was made final by run {got[1]}; pane {run_pane} of "
                f"run {run_id} is not written"
            )
        prior = cur.one(
            "SELECT MAX(pane_index) FROM ldp_panes WHERE task_id = ? AND window_start = ? AND "
            "window_end = ? AND (run_id IS NULL OR run_id <> ?)",
            (task_id, ws, we, run_id),
        )
        base = 0 if prior is None or prior[0] is None else int(prior[0]) + 1
    return final, base


def _flat_item_rows(
    task_id: str, ws: int, we: int, fp: FlatPane, pane_index: int, pane_timing: str, final: int, written: int
) -> list[tuple[Any, ...]]:
    """The ``ldp_history`` / ``ldp_current`` rows of one output and group of a pane, one per item."""
    return [
        (
            task_id,
            fp.output,
            ws,
            we,
            fp.grp,
            it.item,
            it.label,
            it.estimate,
            it.std,
            it.ci_low,
            it.ci_high,
            it.unbiased,
            it.unbiased_std,
            it.ci_includes_zero,
            fp.method,
            fp.n_reports,
            pane_index,
            pane_timing,
            final,
            written,
            it.extra_json,
        )
        for it in fp.items
    ]


def _write_flat_output(
    cur: Any,
    task_id: str,
    ws: int,
    we: int,
    fp: FlatPane,
    *,
    pane_index: int,
    pane_timing: str,
    final: int,
    written: int,
    run_pane: int,
    base: int,
    run_id: str | None,
) -> int:
    """Writes one output and group of a pane: its rows to ``ldp_history``, to ``ldp_current`` unless a
    newer pane is there (removing the current rows of older panes it does not have), and its
    ``ldp_panes`` row; returns the number of item rows."""
    newest = cur.one(
        "SELECT MAX(pane_index) FROM ldp_panes WHERE task_id = ? AND output = ? AND "
        "window_start = ? AND window_end = ? AND grp = ?",
        (task_id, fp.output, ws, we, fp.grp),
    )
    newest_index = None if newest is None or newest[0] is None else int(newest[0])
    values = _flat_item_rows(task_id, ws, we, fp, pane_index, pane_timing, final, written)
    cur.bulk(schema.upsert_history_sql(), values, schema.ROW_TYPES)
    if newest_index is None or newest_index <= pane_index:
        cur.bulk(schema.upsert_current_sql(), values, schema.ROW_TYPES)
        if newest_index is not None and newest_index < pane_index:
            # numbers an older pane stored that this one does not have (a capped domain's
            # top items changed) are no longer current
            cur.execute(
                "DELETE FROM ldp_current WHERE task_id = ? AND output = ? AND window_start = ? "
                "AND window_end = ? AND grp = ? AND pane_index < ?",
                (task_id, fp.output, ws, we, fp.grp, pane_index),
            )
    cur.execute(
        schema.upsert_pane_sql(),
        (
            task_id,
            fp.output,
            ws,
            we,
            fp.grp,
            pane_index,
            pane_timing,
            final,
            fp.n_reports,
            written,
            fp.n_items,
            len(fp.items),
            json.dumps(
                {**fp.extra, "run_pane_index": run_pane} if base else fp.extra,
                sort_keys=True, default=str,
            ),
            run_id,
        ),
    )
    return len(values)


class Store:
    """A latest-state store (build it with :func:`open_store`). See the module docstring."""

    def __init__(self, backend: _Backend, url: str, owns: bool = False) -> None:
        self._b = backend
        self.url = url
        self._owns = owns

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._b.dialect

    def close(self) -> None:
        """Closes a private connection (a shared one stays open for the process's other users)."""
        if self._owns:
            self._b.close()

    def reset(self) -> None:
        """Drops a connection that failed (PostgreSQL): the next call reconnects."""
        self._b.reset()

    def set_wait_s(self, seconds: float) -> None:
        """SQLite: how long one call waits for another connection's lock (default 30 s)."""
        self._b.set_wait_s(seconds)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Creates the tables and indexes if missing (idempotent) and checks ``ldp_meta.schema_version``.

        Raises:
            StoreError: the database holds another schema version, or the DDL fails.
        """
        try:
            with self._b.transaction() as cur:
                cur.execute(schema.TABLES["ldp_meta"])
                got = cur.one("SELECT value FROM ldp_meta WHERE key = 'schema_version'")
                version = None if got is None else str(got[0])
                while version in schema.MIGRATIONS:  # an older layout: brought up to date in place
                    _LOG.warning(
                        "store %s: migrating schema version %s to the next", redact_url(self.url), version
                    )
                    for stmt in schema.MIGRATIONS[version]:
                        cur.execute(stmt)
                    version = str(cur.one("SELECT value FROM ldp_meta WHERE key = 'schema_version'")[0])
                if version is None or version == schema.SCHEMA_VERSION:
                    for stmt in schema.DDL:
                        cur.execute(stmt)
                    cur.execute(
                        "INSERT INTO ldp_meta (key, value) VALUES ('schema_version', ?) "
                        "ON CONFLICT (key) DO NOTHING",
                        (schema.SCHEMA_VERSION,),
                    )
                got = cur.one("SELECT value FROM ldp_meta WHERE key = 'schema_version'")
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - sqlite3 / psycopg errors, reported in one line
            raise StoreError(
                f"store {redact_url(self.url)!r}: cannot create the tables: {_first_line(exc)}"
            ) from None
        if got is None or str(got[0]) != schema.SCHEMA_VERSION:
            raise StoreError(
                f"store {redact_url(self.url)!r} holds schema version {got and got[0]!r}; this code writes "
                f"{schema.SCHEMA_VERSION!r}"
            )

    # -- write API ------------------------------------------------------------------------------------------

    def write_task(
        self,
        task_id: str,
        *,
        kind: str,
        mechanism: str,
        epsilon: float | None,
        task_json: str | None,
        summary: Mapping[str, Any] | None = None,
        updated_ms: int | None = None,
    ) -> None:
        """Creates or replaces the task's row (``summary``: the job's summary, stored as JSON)."""
        from ldp.aggregate import json_safe

        summary_json = None if summary is None else json.dumps(json_safe(dict(summary)), allow_nan=False)
        with self._b.transaction() as cur:
            cur.execute(
                schema.upsert_task_sql(),
                (
                    task_id,
                    kind,
                    mechanism,
                    epsilon,
                    task_json,
                    summary_json,
                    now_ms() if updated_ms is None else int(updated_ms),
                ),
            )

    def write_pane(
        self,
        task_id: str,
        window_start: int | None,
        window_end: int | None,
        pane_index: int,
        pane_timing: str,
        rows: Iterable[Any],
        *,
        max_items: int = DEFAULT_MAX_ITEMS,
        labels: Sequence[str] | None = None,
        written_ms: int | None = None,
        run_id: str | None = None,
    ) -> int:
        """Writes the result rows of one task, window and pane in one transaction; returns the number of
        store rows (published numbers) written.

        ``rows``: the pane's result rows (any registered kind's row types, :mod:`ldp.kinds`; model rows are
        skipped); at most ``max_items`` numbers per output and group are stored (the top ones by estimate
        beyond that). ``labels``: the task's value labels for rows that carry none. ``run_id``: the run
        writing it (``ldp_panes.run_id``, ``ldp_windows.run_id``).
        """
        flat = flatten_rows(rows, max_items=max_items, labels=labels)
        return self.write_flat_pane(
            task_id, window_start, window_end, pane_index, pane_timing, flat, written_ms=written_ms,
            run_id=run_id,
        )  # fmt: skip

    def write_flat_pane(
        self,
        task_id: str,
        window_start: int | None,
        window_end: int | None,
        pane_index: int,
        pane_timing: str,
        flat: Sequence[FlatPane],
        *,
        written_ms: int | None = None,
        run_id: str | None = None,
    ) -> int:
        """:meth:`write_pane` for rows already flattened (:func:`ldp.kinds.flatten_rows`).

        Across runs (``run_id`` given): a run's panes of a window are stored after every pane the other
        runs stored for it, at index ``B + pane_index`` where ``B`` is one more than the highest of theirs
        (the run's own index is kept in the pane's ``extra_json`` as ``run_pane_index``), and its first
        pane there removes their current rows of the window, every output and group: a restarted job that
        recomputes a window from its inputs replaces the killed run's figures whole, never adds to them.
        A window another run made final is closed: :class:`WindowFinal` is raised, nothing is written.
        """
        if not flat:
            return 0
        ws, we = window_ms(window_start), window_ms(window_end)
        run_pane = int(pane_index)
        written = now_ms() if written_ms is None else int(written_ms)
        by_output: dict[str, int] = {}
        for fp in flat:
            by_output[fp.output] = by_output.get(fp.output, 0) + int(fp.n_reports or 0)
        n_reports = max(by_output.values())
        n = 0
        with self._b.transaction() as cur:
            final, base = _flat_window_base(cur, task_id, ws, we, run_pane, run_id)
            pane_index = base + run_pane
            if base:  # the earlier runs' figures of the window: replaced whole, never mixed with this run's
                cur.execute(
                    "DELETE FROM ldp_current WHERE task_id = ? AND window_start = ? AND window_end = ? AND "
                    "pane_index < ?",
                    (task_id, ws, we, base),
                )
            for fp in flat:
                n += _write_flat_output(
                    cur, task_id, ws, we, fp, pane_index=pane_index, pane_timing=pane_timing, final=final,
                    written=written, run_pane=run_pane, base=base, run_id=run_id,
                )  # fmt: skip
            cur.execute(
                schema.upsert_window_sql(),
                (task_id, ws, we, pane_index, pane_timing, n_reports, written, written, run_id),
            )
        return n

    def mark_final(
        self, task_id: str, window_start: int | None, window_end: int | None, *, final_ms: int | None = None
    ) -> bool:
        """Marks a window final (its window row, its current rows and its last pane); True when it was not
        final before (idempotent: ``final_ms`` keeps the first call's time). A window without any pane
        written has no row and stays unknown (False)."""
        ws, we = window_ms(window_start), window_ms(window_end)
        at = now_ms() if final_ms is None else int(final_ms)
        key = (task_id, ws, we)
        with self._b.transaction() as cur:
            got = cur.one(
                "SELECT is_final, last_pane_index FROM ldp_windows WHERE task_id = ? AND window_start = ? "
                "AND window_end = ?",
                key,
            )
            if got is None or int(got[0]) == 1:
                return False
            last = int(got[1])
            cur.execute(
                "UPDATE ldp_windows SET is_final = 1, final_ms = ? WHERE task_id = ? AND window_start = ? "
                "AND window_end = ?",
                (at, *key),
            )
            where = "WHERE task_id = ? AND window_start = ? AND window_end = ?"
            cur.execute(f"UPDATE ldp_current SET is_final = 1 {where}", key)
            cur.execute(f"UPDATE ldp_panes SET is_final = 1 {where} AND pane_index = ?", (*key, last))
            cur.execute(f"UPDATE ldp_history SET is_final = 1 {where} AND pane_index = ?", (*key, last))
        return True

    def write_counts(
        self,
        task_id: str,
        window_start: int | None,
        window_end: int | None,
        counts: Mapping[str, int],
        *,
        written_ms: int | None = None,
        run_id: str | None = None,
    ) -> None:
        """Creates or replaces the counts of one counts window of one run (batch: the whole run, window
        0/0; ``run_id`` None is stored as ``''``, no run).

        ``counts``: ``read``, ``accepted``, ``rejected``, ``rejected_<reason>``, ``lost_records`` (stored as
        ``lost``), ``late_dropped``; ``reasons_json`` holds every ``rejected_<reason>`` and ``late`` (the
        late reports' dead letters) with a non-zero count.
        """
        c = {
            k: int(v)
            for k, v in counts.items()
            if isinstance(v, (int, float)) and not k.startswith("window_")
        }
        reasons = {k[len("rejected_") :]: v for k, v in sorted(c.items()) if k.startswith("rejected_") and v}
        if c.get("late_dropped"):
            reasons["late"] = c["late_dropped"]
        with self._b.transaction() as cur:
            cur.execute(
                schema.upsert_counts_sql(),
                (
                    task_id,
                    run_id or "",
                    window_ms(window_start),
                    window_ms(window_end),
                    c.get("read", 0),
                    c.get("accepted", 0),
                    c.get("rejected", 0),
                    c.get("lost_records", 0),
                    c.get("late_dropped", 0),
                    json.dumps(reasons, sort_keys=True),
                    now_ms() if written_ms is None else int(written_ms),
                ),
            )

    # -- runs -----------------------------------------------------------------------------------------------

    def begin_run(
        self,
        run_id: str,
        task_id: str,
        *,
        allow_concurrent: bool = False,
        stale_after_s: float = STALE_RUN_S,
        streaming: bool | None = None,
        output: str | None = None,
    ) -> list[dict[str, Any]]:
        """Records a new live run of ``task_id`` (``ldp_runs``), in one transaction with the check that no
        other run of the task is live: status ``live`` and a heartbeat newer than ``stale_after_s``, and
        a launching process that has not ended (``proc``, :func:`process_gone`: a run killed on this
        machine is dead at once, not after ``stale_after_s``). Runs that are not are marked ``dead``.
        Returns the other live runs (empty unless ``allow_concurrent``).

        Raises:
            RunConflict: another live run of the task, without ``allow_concurrent`` (one line).
        """
        now = now_ms()
        stale = now - int(stale_after_s * 1000)
        with self._b.transaction() as cur:
            cur.execute(
                "UPDATE ldp_runs SET status = 'dead' WHERE task_id = ? AND status = 'live' "
                "AND heartbeat_ms < ?",
                (task_id, stale),
            )
            others = []
            for r in cur.execute(
                "SELECT run_id, started_ms, heartbeat_ms, host, pid, proc FROM ldp_runs WHERE task_id = ? "
                "AND status = 'live' AND run_id <> ? ORDER BY started_ms",
                (task_id, run_id),
            ).fetchall():
                other = dict(zip(("run_id", "started_ms", "heartbeat_ms", "host", "pid", "proc"), r))
                if process_gone(other.pop("proc")):
                    _LOG.warning("store: run %s of %s was live, but its process (host %s, pid %s) has "
                                 "ended: marked dead", other["run_id"], task_id, other["host"], other["pid"])
                    cur.execute("UPDATE ldp_runs SET status = 'dead' WHERE run_id = ?", (other["run_id"],))
                else:
                    others.append(other)
            if others and not allow_concurrent:
                raise RunConflict(run_conflict_message(task_id, others[0], stale_after_s))
            cur.execute(
                "INSERT INTO ldp_runs (run_id, task_id, status, started_ms, heartbeat_ms, host, pid, "
                "streaming, output, proc) VALUES (?, ?, 'live', ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET status = 'live', heartbeat_ms = excluded.heartbeat_ms",
                (run_id, task_id, now, now, socket.gethostname(), os.getpid(),
                 None if streaming is None else int(bool(streaming)), output, process_identity()),
            )  # fmt: skip
        return others

    def live_runs(self, task_id: str, stale_after_s: float = STALE_RUN_S) -> list[dict[str, Any]]:
        """The task's runs with status ``live``, a heartbeat newer than ``stale_after_s`` and a launching
        process that has not ended (read only)."""
        stale = now_ms() - int(stale_after_s * 1000)
        rows = self._b.query(
            "SELECT run_id, started_ms, heartbeat_ms, host, pid, proc FROM ldp_runs WHERE task_id = ? AND "
            "status = 'live' AND heartbeat_ms >= ? ORDER BY started_ms",
            (task_id, stale),
        )
        return [{k: v for k, v in r.items() if k != "proc"} for r in rows if not process_gone(r["proc"])]

    def heartbeat(self, run_id: str) -> None:
        """The run is alive (``heartbeat_ms`` = now)."""
        with self._b.transaction() as cur:
            cur.execute("UPDATE ldp_runs SET heartbeat_ms = ? WHERE run_id = ?", (now_ms(), run_id))

    def end_run(
        self,
        run_id: str,
        status: str,
        *,
        panes_written: int | None = None,
        failed_panes: int | None = None,
        error: str | None = None,
        summary: Mapping[str, Any] | None = None,
    ) -> None:
        """The run ended: ``status`` ``ended`` or ``failed``, with its pane counts, error and summary."""
        from ldp.aggregate import json_safe

        if status not in ("ended", "failed"):
            raise ValueError(f"a run ends 'ended' or 'failed', not {status!r}")
        summary_json = None if summary is None else json.dumps(json_safe(dict(summary)), allow_nan=False)
        now = now_ms()
        with self._b.transaction() as cur:
            cur.execute(
                "UPDATE ldp_runs SET status = ?, ended_ms = ?, heartbeat_ms = ?, panes_written = ?, "
                "failed_panes = ?, error = ?, summary_json = ? WHERE run_id = ?",
                (status, now, now, panes_written, failed_panes, error, summary_json, run_id),
            )

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One ``ldp_runs`` row (``summary`` parsed), or None."""
        rows = self._b.query("SELECT * FROM ldp_runs WHERE run_id = ?", (run_id,))
        if not rows:
            return None
        r = rows[0]
        r["summary"] = _loads(r.pop("summary_json"))
        return r

    def runs(self, task_id: str) -> list[dict[str, Any]]:
        """Every run of a task, latest first (``ldp_runs`` columns without the summary)."""
        return self._b.query(
            "SELECT run_id, task_id, status, started_ms, heartbeat_ms, ended_ms, host, pid, streaming, "
            "output, panes_written, failed_panes, error FROM ldp_runs WHERE task_id = ? "
            "ORDER BY started_ms DESC",
            (task_id,),
        )

    def check_run(self, run_id: str) -> None:
        """Raises :class:`StoreLost` when the store does not hold the run (it was deleted or replaced after
        the run began: a writer must not fill a new, empty store)."""
        if not self._b.query("SELECT run_id FROM ldp_runs WHERE run_id = ?", (run_id,)):
            raise StoreLost(
                f"store {redact_url(self.url)!r} no longer holds run {run_id} (deleted or replaced while the "
                "job ran)"
            )

    # -- read API -------------------------------------------------------------------------------------------

    def tasks(self) -> list[dict[str, Any]]:
        """Every task: ``task_id``, ``kind``, ``mechanism``, ``epsilon``, ``task`` (the task JSON parsed),
        ``summary`` (parsed), ``updated_ms``; by task id."""
        rows = self._b.query(
            "SELECT task_id, kind, mechanism, epsilon, task_json, summary_json, updated_ms FROM ldp_tasks "
            "ORDER BY task_id"
        )
        return [self._task(r) for r in rows]

    def task(self, task_id: str) -> dict[str, Any] | None:
        """One task as in :meth:`tasks`, or None."""
        rows = self._b.query(
            "SELECT task_id, kind, mechanism, epsilon, task_json, summary_json, updated_ms FROM ldp_tasks "
            "WHERE task_id = ?",
            (task_id,),
        )
        return self._task(rows[0]) if rows else None

    @staticmethod
    def _task(r: dict[str, Any]) -> dict[str, Any]:
        out = {k: r[k] for k in ("task_id", "kind", "mechanism", "epsilon", "updated_ms")}
        out["task"] = _loads(r["task_json"])
        out["summary"] = _loads(r["summary_json"])
        return out

    def windows(self, task_id: str, limit: int = 50, *, final_only: bool = False) -> list[dict[str, Any]]:
        """The latest ``limit`` windows of a task, latest first (by window end, then start): the
        ``ldp_windows`` columns (``last_pane_index``, ``last_pane_timing``, ``is_final``, ``n_reports``,
        ``first_written_ms``, ``last_written_ms``, ``final_ms``, ``run_id``: the run of the latest pane)."""
        final = " AND is_final = 1" if final_only else ""
        return self._b.query(
            "SELECT task_id, window_start, window_end, last_pane_index, last_pane_timing, is_final, "
            "n_reports, first_written_ms, last_written_ms, final_ms, run_id FROM ldp_windows "
            f"WHERE task_id = ?{final} "
            "ORDER BY window_end DESC, window_start DESC LIMIT ?",
            (task_id, int(limit)),
        )

    def current(
        self,
        task_id: str,
        window_start: int | None,
        window_end: int | None,
        *,
        output: str | None = None,
        grp: int | None = None,
        top_k: int | None = None,
    ) -> list[dict[str, Any]]:
        """The current rows of one window (the ``ldp_current`` columns; ``extra`` = ``extra_json`` parsed),
        by output, group and item; with ``top_k``, the ``top_k`` largest estimates of each output and group,
        largest first."""
        where = "task_id = ? AND window_start = ? AND window_end = ?"
        params: list[Any] = [task_id, window_ms(window_start), window_ms(window_end)]
        if output is not None:
            where += " AND output = ?"
            params.append(output)
        if grp is not None:
            where += " AND grp = ?"
            params.append(int(grp))
        cols = ", ".join(schema.ROW_COLUMNS)
        if top_k is None:
            rows = self._b.query(
                f"SELECT {cols} FROM ldp_current WHERE {where} ORDER BY output, grp, item", params
            )
        else:  # the k largest of each (output, group): one LIMIT query per pair (a top-k sort, not a rank)
            pairs = self._b.query(
                f"SELECT DISTINCT output, grp FROM ldp_current WHERE {where} ORDER BY output, grp", params
            )
            rows = []
            for pair in pairs:
                rows += self._b.query(
                    f"SELECT {cols} FROM ldp_current WHERE {where} AND output = ? AND grp = ? ORDER BY "
                    "CASE WHEN estimate IS NULL THEN 1 ELSE 0 END, estimate DESC, item LIMIT ?",
                    [*params, pair["output"], pair["grp"], int(top_k)],
                )
        for r in rows:
            r["extra"] = _loads(r.pop("extra_json"))
        return rows

    def series(
        self,
        task_id: str,
        items: Sequence[int],
        *,
        output: str = "estimates",
        grp: int = 0,
        last_windows: int = 50,
    ) -> list[dict[str, Any]]:
        """The current rows of ``items`` (values, queries or coordinates) in the latest ``last_windows``
        windows, oldest window first, then by item (columns as :meth:`current`)."""
        items = [int(i) for i in items]
        if not items:
            return []
        cols = ", ".join(f"c.{c}" for c in schema.ROW_COLUMNS)
        rows = self._b.query(
            f"SELECT {cols} FROM ldp_current c JOIN (SELECT window_start, window_end FROM ldp_windows "
            "WHERE task_id = ? ORDER BY window_end DESC, window_start DESC LIMIT ?) w "
            "ON c.window_start = w.window_start AND c.window_end = w.window_end "
            "WHERE c.task_id = ? AND c.output = ? AND c.grp = ? "
            f"AND c.item IN ({', '.join('?' * len(items))}) "
            "ORDER BY c.window_end, c.window_start, c.item",
            [task_id, int(last_windows), task_id, output, int(grp), *items],
        )
        for r in rows:
            r["extra"] = _loads(r.pop("extra_json"))
        return rows

    def counts(self, task_id: str, limit: int = 100, *, run_id: str | None = None) -> list[dict[str, Any]]:
        """The latest ``limit`` counts windows of one run, oldest first: ``window_start``, ``window_end``,
        ``read``, ``accepted``, ``rejected``, ``lost``, ``late_dropped``, ``reasons`` (reason -> dead
        letters), ``written_ms``, ``run_id``. ``run_id`` None: the run that wrote counts last (counts are
        per run: two runs' counts are never summed)."""
        if run_id is None:
            last = self._b.query(
                "SELECT run_id FROM ldp_counts WHERE task_id = ? ORDER BY written_ms DESC LIMIT 1", (task_id,)
            )
            if not last:
                return []
            run_id = last[0]["run_id"]
        rows = self._b.query(
            "SELECT * FROM (SELECT window_start, window_end, read, accepted, rejected, lost, late_dropped, "
            "reasons_json, written_ms, run_id FROM ldp_counts WHERE task_id = ? AND run_id = ? "
            "ORDER BY window_end DESC, window_start DESC LIMIT ?) latest ORDER BY window_end, window_start",
            (task_id, run_id, int(limit)),
        )
        for r in rows:
            r["reasons"] = _loads(r.pop("reasons_json")) or {}
        return rows

    def pane_latencies(self, task_id: str, last_windows: int = 50) -> list[dict[str, Any]]:
        """One entry per pane of the latest ``last_windows`` windows, oldest first: ``window_start``,
        ``window_end``, ``pane_index``, ``pane_timing``, ``is_final``, ``written_ms`` (first write of any
        of its outputs and groups) and ``latency_ms`` = ``written_ms - window_end`` (None for the global
        window)."""
        rows = self._b.query(
            "SELECT p.window_start, p.window_end, p.pane_index, MAX(p.pane_timing) AS pane_timing, "
            "MAX(p.is_final) AS is_final, MIN(p.written_ms) AS written_ms FROM ldp_panes p JOIN "
            "(SELECT window_start, window_end FROM ldp_windows WHERE task_id = ? ORDER BY window_end DESC, "
            "window_start DESC LIMIT ?) w ON p.window_start = w.window_start AND p.window_end = w.window_end "
            "WHERE p.task_id = ? GROUP BY p.window_start, p.window_end, p.pane_index "
            "ORDER BY p.window_end, p.window_start, p.pane_index",
            (task_id, int(last_windows), task_id),
        )
        for r in rows:
            glob = r["window_start"] == 0 and r["window_end"] == 0
            r["latency_ms"] = None if glob else int(r["written_ms"]) - int(r["window_end"])
        return rows

    def panes(self, task_id: str, window_start: int | None, window_end: int | None) -> list[dict[str, Any]]:
        """The ``ldp_panes`` rows of one window (every output, group and pane; ``extra`` parsed)."""
        rows = self._b.query(
            f"SELECT {', '.join(schema.PANE_COLUMNS)} FROM ldp_panes WHERE task_id = ? AND window_start = ? "
            "AND window_end = ? ORDER BY output, grp, pane_index",
            (task_id, window_ms(window_start), window_ms(window_end)),
        )
        for r in rows:
            r["extra"] = _loads(r.pop("extra_json"))
        return rows

    def history(
        self, task_id: str, window_start: int | None, window_end: int | None, *, output: str | None = None
    ) -> list[dict[str, Any]]:
        """Every stored row of every pane of one window (``ldp_history``), by output, group, pane, item."""
        params: list[Any] = [task_id, window_ms(window_start), window_ms(window_end)]
        extra = ""
        if output is not None:
            extra = " AND output = ?"
            params.append(output)
        rows = self._b.query(
            f"SELECT {', '.join(schema.ROW_COLUMNS)} FROM ldp_history WHERE task_id = ? AND window_start = ? "
            f"AND window_end = ?{extra} ORDER BY output, grp, pane_index, item",
            params,
        )
        for r in rows:
            r["extra"] = _loads(r.pop("extra_json"))
        return rows
