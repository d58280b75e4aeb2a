"""The latest-state store: :func:`open_store` and :class:`Store` (write API for the sink, read API for the
dashboard) over SQLite (standard-library ``sqlite3``, WAL mode) or PostgreSQL (psycopg 3).

Write API (each call is ONE transaction, so a reader never sees half of it):

* :meth:`Store.write_task` -- the task and the job's summary (``ldp_tasks``);
* :meth:`Store.write_pane` -- the result rows of one task, window and pane: ``ldp_current`` (a pane replaces
  an older or equal pane's rows, never a newer one's), ``ldp_history``, ``ldp_panes``, ``ldp_windows``;
* :meth:`Store.mark_final` -- the window is final (the watermark passed its end plus the allowed lateness);
* :meth:`Store.write_counts` -- read / accepted / rejected / lost / late_dropped and dead-letter reasons of a
  counts window (``ldp_counts``).

Every write is idempotent: writing the same pane (a retried bundle) again changes nothing, not even the
time it was first written; an older pane arriving after a newer one goes to the history only.

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
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ldp.store import schema
from ldp.store.flatten import DEFAULT_MAX_ITEMS, FlatPane, flatten_rows, window_ms

__all__ = ["StoreError", "Store", "open_store", "parse_store_url", "redact_url", "now_ms"]


class StoreError(RuntimeError):
    """A store that cannot be opened or used (a bad URL, an unreachable server, a schema mismatch); the
    message is one line."""


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

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
            # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
            self.conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA busy_timeout=30000")
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"store {path!r} cannot be opened: {_first_line(exc)}") from None
        if str(mode).lower() != "wal":
            raise StoreError(f"store {path!r}: SQLite would not use WAL mode (got {mode!r}); is it on NFS?")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_SqliteCursor]:
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteCursor(self.conn)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

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
            raise StoreError(f"store {redact_url(self.url)!r} is unreachable: {_first_line(exc)}") from None

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _alive(self) -> None:
        if self.conn.closed or self.conn.broken:
            self.conn = self._connect()

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
            self.conn.close()


_BACKENDS: dict[tuple[int, str, str], _Backend] = {}
_BACKENDS_LOCK = threading.Lock()


def _backend(dialect: str, target: str, shared: bool) -> _Backend:
    key = (os.getpid(), dialect, os.path.abspath(target) if dialect == "sqlite" else target)
    with _BACKENDS_LOCK:
        b = _BACKENDS.get(key) if shared else None
        if b is None:
            b = _SqliteBackend(target) if dialect == "sqlite" else _PgBackend(target)
            if shared:
                _BACKENDS[key] = b
        return b


def open_store(url: str, *, create: bool = True, shared: bool = True) -> Store:
    """Opens (and by default creates the tables of) the store at ``url`` (see :func:`parse_store_url`).

    ``shared``: reuse this process's connection to the same database (the threads of a Beam worker share
    one connection under a lock); ``shared=False`` opens a private one (tests, readers in threads).

    Raises:
        StoreError: a bad URL, a file that cannot be created, an unreachable server, or a store written by
            another schema version (one line, password redacted).
    """
    dialect, target = parse_store_url(url)
    store = Store(_backend(dialect, target, shared), url, owns=not shared)
    if create:
        store.create_schema()
    return store


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


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
    ) -> int:
        """Writes the result rows of one task, window and pane in one transaction; returns the number of
        store rows (published numbers) written.

        ``rows``: the pane's result rows (any of the row types of :mod:`ldp.store.flatten`; model rows are
        skipped); at most ``max_items`` numbers per output and group are stored (the top ones by estimate
        beyond that). ``labels``: the task's value labels for rows that carry none.
        """
        flat = flatten_rows(rows, max_items=max_items, labels=labels)
        return self.write_flat_pane(
            task_id, window_start, window_end, pane_index, pane_timing, flat, written_ms=written_ms
        )

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
    ) -> int:
        """:meth:`write_pane` for rows already flattened (:func:`ldp.store.flatten.flatten_rows`)."""
        if not flat:
            return 0
        ws, we = window_ms(window_start), window_ms(window_end)
        pane_index = int(pane_index)
        written = now_ms() if written_ms is None else int(written_ms)
        by_output: dict[str, int] = {}
        for fp in flat:
            by_output[fp.output] = by_output.get(fp.output, 0) + int(fp.n_reports or 0)
        n_reports = max(by_output.values())
        n = 0
        with self._b.transaction() as cur:
            got = cur.one(
                "SELECT is_final FROM ldp_windows WHERE task_id = ? AND window_start = ? AND window_end = ?",
                (task_id, ws, we),
            )
            final = int(got[0]) if got is not None else 0
            for fp in flat:
                newest = cur.one(
                    "SELECT MAX(pane_index) FROM ldp_panes WHERE task_id = ? AND output = ? AND "
                    "window_start = ? AND window_end = ? AND grp = ?",
                    (task_id, fp.output, ws, we, fp.grp),
                )
                newest_index = None if newest is None or newest[0] is None else int(newest[0])
                values = [
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
                        json.dumps(fp.extra, sort_keys=True, default=str),
                    ),
                )
                n += len(values)
            cur.execute(
                schema.upsert_window_sql(),
                (task_id, ws, we, pane_index, pane_timing, n_reports, written, written),
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
    ) -> None:
        """Creates or replaces the counts of one counts window (batch: the whole run, window 0/0).

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
        ``first_written_ms``, ``last_written_ms``, ``final_ms``)."""
        final = " AND is_final = 1" if final_only else ""
        return self._b.query(
            "SELECT task_id, window_start, window_end, last_pane_index, last_pane_timing, is_final, "
            "n_reports, first_written_ms, last_written_ms, final_ms FROM ldp_windows "
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

    def counts(self, task_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The latest ``limit`` counts windows, oldest first: ``window_start``, ``window_end``, ``read``,
        ``accepted``, ``rejected``, ``lost``, ``late_dropped``, ``reasons`` (reason -> dead letters),
        ``written_ms``."""
        rows = self._b.query(
            "SELECT * FROM (SELECT window_start, window_end, read, accepted, rejected, lost, late_dropped, "
            "reasons_json, written_ms FROM ldp_counts WHERE task_id = ? ORDER BY window_end DESC, "
            "window_start DESC LIMIT ?) latest ORDER BY window_end, window_start",
            (task_id, int(limit)),
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
