"""Read queries of the dashboard against the latest-state store's tables (SQLite or PostgreSQL).

The dashboard only reads: SQLite is opened read-only (``mode=ro``), PostgreSQL in autocommit mode so no
transaction stays open between polls. A store whose tables do not exist yet (the job has not written its
first pane) is *not ready*, not an error: :meth:`StoreReader.ready` says so and the page waits.
Rows come back as ``dict``\\ s keyed by column name (see /work/notes/store_contract.md).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["StoreError", "StoreReader", "StoreURL", "parse_store_url"]

#: The tables the page reads (all must exist before the page leaves its waiting state).
TABLES = ("ldp_tasks", "ldp_current", "ldp_panes", "ldp_windows", "ldp_counts")

ROW_COLUMNS = (
    "task_id, output, window_start, window_end, grp, item, label, estimate, std, ci_low, ci_high, "
    "unbiased, unbiased_std, ci_includes_zero, method, n_reports, pane_index, pane_timing, is_final, "
    "written_ms, extra_json"
)


class StoreError(Exception):
    """A store that cannot be read: a bad URL, an unreachable server, a missing directory."""


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``kind`` is ``sqlite`` (``target`` a file path) or ``postgresql`` (``target``
    the URL psycopg takes)."""

    kind: str
    target: str
    url: str


def parse_store_url(url: str) -> StoreURL:
    """The store's own URL rules (``store.parse_store_url``): ``sqlite:///PATH`` (the rest after the three
    slashes: ``sqlite:///out/e.db`` relative, ``sqlite:////abs/e.db`` absolute), a plain file path (SQLite),
    or ``postgresql://...`` / ``postgres://...``; anything else is a :class:`StoreError` naming the forms."""
    from store import StoreError as _LdpStoreError
    from store import parse_store_url as _parse

    try:
        kind, target = _parse(url)
    except _LdpStoreError as exc:
        raise StoreError(str(exc)) from None
    return StoreURL(kind, target, url.strip())


class StoreReader:
    """Read access to one store. Opening checks what can be checked without the tables: the SQLite file's
    directory exists (the file itself may not exist yet), the PostgreSQL server answers.

    Raises:
        StoreError: the URL is malformed, the directory is missing, or the server refuses the connection.
    """

    def __init__(self, url: str) -> None:
        self.url = parse_store_url(url)
        self._conn: Any = None
        self._file_id: tuple[int, int] | None = None
        self.tables: set[str] = set()
        if self.url.kind == "sqlite":
            directory = os.path.dirname(os.path.abspath(self.url.target))
            if not os.path.isdir(directory):
                raise StoreError(f"store directory {directory} does not exist (store URL {url!r})")
            if os.path.isdir(self.url.target):
                raise StoreError(f"store path {self.url.target} is a directory, not a SQLite file")
        else:
            self._connect()

    # -- connection -------------------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._conn is not None:
            return self._conn
        if self.url.kind == "sqlite":
            path = os.path.abspath(self.url.target)
            if not os.path.exists(path):
                return None
            try:
                self._file_id = _file_id(path)
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0, check_same_thread=False)
                conn.row_factory = sqlite3.Row
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open SQLite store {path}: {exc}") from exc
        else:
            try:
                import psycopg
                from psycopg.rows import dict_row
            except ImportError as exc:  # pragma: no cover - psycopg is a dependency
                raise StoreError("a PostgreSQL store needs psycopg (pip install 'psycopg[binary]')") from exc
            try:
                conn = psycopg.connect(
                    self.url.target, autocommit=True, row_factory=dict_row, connect_timeout=5
                )
            except psycopg.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StoreError(
                    f"cannot connect to PostgreSQL store {_redact(self.url.target)}: {first}"
                ) from exc
        self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        conn = self._connect()
        if conn is None:
            return []
        if self.url.kind == "postgresql":
            sql = sql.replace("?", "%s")
        try:
            cur = conn.execute(sql, tuple(params))
            rows = cur.fetchall()
        except Exception as exc:
            # a dropped connection or a locked file: reconnect on the next poll
            self.close()
            raise StoreError(
                f"store query failed: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
            ) from exc
        return [dict(r) for r in rows]

    # -- queries ----------------------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether every table the page reads exists (the job has created the schema)."""
        if self.url.kind == "sqlite":
            if self._conn is not None and _file_id(os.path.abspath(self.url.target)) != self._file_id:
                self.close()  # the file was removed or replaced (a new run): read the new one
            if self._connect() is None:
                return False
            rows = self._query("SELECT name FROM sqlite_master WHERE type = 'table'")
            names = {r["name"] for r in rows}
        else:
            rows = self._query(
                "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = "
                "current_schema()"
            )
            names = {r["name"] for r in rows}
        self.tables = names
        return all(t in names for t in TABLES)

    def tasks(self) -> list[dict[str, Any]]:
        """Every task the store knows (``ldp_tasks`` rows, plus tasks that have windows but no task row),
        ordered by task id."""
        rows = self._query(
            "SELECT task_id, kind, mechanism, epsilon, task_json, summary_json, updated_ms FROM ldp_tasks"
        )
        known = {r["task_id"] for r in rows}
        for r in self._query("SELECT DISTINCT task_id FROM ldp_windows"):
            if r["task_id"] not in known:
                rows.append(
                    {
                        "task_id": r["task_id"],
                        "kind": None,
                        "mechanism": None,
                        "epsilon": None,
                        "task_json": None,
                        "summary_json": None,
                        "updated_ms": None,
                    }
                )
        return sorted(rows, key=lambda r: r["task_id"])

    def change_token(self, task_id: str) -> tuple[Any, ...]:
        """A cheap fingerprint of everything the page shows for ``task_id``: it changes whenever a pane is
        written (its current rows are written in the same transaction as its ``ldp_panes`` row), a window
        turns final, a counts row or the task's summary is written. It reads only the small tables
        (``ldp_panes``, ``ldp_windows``, ``ldp_counts``, ``ldp_tasks``: a row per pane, window or task),
        never the rows of every published number."""
        sql = (
            "SELECT "
            "(SELECT COUNT(*) FROM ldp_panes WHERE task_id = ?) AS panes, "
            "(SELECT MAX(written_ms) FROM ldp_panes WHERE task_id = ?) AS panes_ms, "
            "(SELECT COUNT(*) FROM ldp_windows WHERE task_id = ? AND is_final = 1) AS finals, "
            "(SELECT MAX(last_written_ms) FROM ldp_windows WHERE task_id = ?) AS windows_ms, "
            "(SELECT COUNT(*) FROM ldp_counts WHERE task_id = ?) AS counts_n, "
            "(SELECT MAX(written_ms) FROM ldp_counts WHERE task_id = ?) AS counts_ms, "
            "(SELECT MAX(updated_ms) FROM ldp_tasks WHERE task_id = ?) AS task_ms"
        )
        rows = self._query(sql, (task_id,) * 7)
        return tuple(rows[0].values()) if rows else ()

    def windows(self, task_id: str, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` windows of the task (``ldp_windows``), newest first."""
        return self._query(
            "SELECT task_id, window_start, window_end, last_pane_index, last_pane_timing, is_final, "
            "n_reports, "
            "first_written_ms, last_written_ms, final_ms FROM ldp_windows WHERE task_id = ? "
            "ORDER BY window_end DESC, window_start DESC LIMIT ?",
            (task_id, int(limit)),
        )

    def panes(self, task_id: str, since_end: int) -> list[dict[str, Any]]:
        """Every pane of the task's windows that end at or after ``since_end`` (``ldp_panes``)."""
        return self._query(
            "SELECT task_id, output, window_start, window_end, grp, pane_index, pane_timing, "
            "is_final, n_reports, "
            "written_ms FROM ldp_panes WHERE task_id = ? AND window_end >= ? "
            "ORDER BY window_end, window_start, pane_index",
            (task_id, int(since_end)),
        )

    def counts(self, task_id: str, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` counts windows of the task (``ldp_counts``), newest first."""
        return self._query(
            "SELECT task_id, window_start, window_end, read, accepted, rejected, lost, late_dropped, "
            "reasons_json, "
            "written_ms FROM ldp_counts WHERE task_id = ? ORDER BY window_end DESC, window_start "
            "DESC LIMIT ?",
            (task_id, int(limit)),
        )

    def latest_run(self, task_id: str) -> dict[str, Any] | None:
        """The task's latest run (``ldp_runs``: ``run_id``, ``status`` -- ``live``, ``ended``, ``failed``,
        ``dead`` --, ``started_ms``, ``heartbeat_ms``, ``ended_ms``, ``streaming``, ``error``), or None when
        the store records no runs (a store of an older schema, or written without a job)."""
        if "ldp_runs" not in self.tables:
            return None
        rows = self._query(
            "SELECT run_id, status, started_ms, heartbeat_ms, ended_ms, streaming, error FROM ldp_runs "
            "WHERE task_id = ? ORDER BY started_ms DESC LIMIT 1",
            (task_id,),
        )
        return rows[0] if rows else None

    def newest_pane_ms(self, task_id: str) -> int | None:
        """When the task's newest pane was written (``MAX(ldp_panes.written_ms)``, the job's clock)."""
        rows = self._query("SELECT MAX(written_ms) AS ms FROM ldp_panes WHERE task_id = ?", (task_id,))
        ms = rows[0]["ms"] if rows else None
        return None if ms is None else int(ms)

    def pane_numbers(
        self, task_id: str, keys: Sequence[tuple[str, int, int, int, int]]
    ) -> dict[tuple[str, int, int, int, int], list[tuple[Any, ...]]]:
        """The stored numbers of each pane ``(output, grp, window_start, window_end, pane_index)`` from the
        store's per-pane history (``ldp_history``), as ``(item, estimate, ci_low, ci_high)`` by item; a
        pane the history does not hold maps to ``[]``."""
        out: dict[tuple[str, int, int, int, int], list[tuple[Any, ...]]] = {}
        if "ldp_history" not in self.tables:
            return {key: [] for key in keys}
        for key in dict.fromkeys(keys):
            output, grp, start, end, pane = key
            rows = self._query(
                "SELECT item, estimate, ci_low, ci_high FROM ldp_history WHERE task_id = ? AND output = ? "
                "AND grp = ? AND window_start = ? AND window_end = ? AND pane_index = ? ORDER BY item",
                (task_id, output, int(grp), int(start), int(end), int(pane)),
            )
            out[key] = [(r["item"], r["estimate"], r["ci_low"], r["ci_high"]) for r in rows]
        return out

    def output_panes(self, task_id: str, output: str, since_end: int) -> list[dict[str, Any]]:
        """The newest pane of each window and group of one output, in windows ending at or after
        ``since_end`` (``ldp_panes``, with ``n_items``, ``stored_items`` and ``extra_json``), newest window
        first, then by group."""
        return self._query(
            "SELECT p.window_start, p.window_end, p.grp, p.pane_index, p.pane_timing, p.is_final, "
            "p.n_reports, p.written_ms, p.n_items, p.stored_items, p.extra_json FROM ldp_panes p "
            "WHERE p.task_id = ? AND p.output = ? AND p.window_end >= ? AND p.pane_index = "
            "(SELECT MAX(q.pane_index) FROM ldp_panes q WHERE q.task_id = p.task_id AND q.output = p.output "
            "AND q.grp = p.grp AND q.window_start = p.window_start AND q.window_end = p.window_end) "
            "ORDER BY p.window_end DESC, p.window_start DESC, p.grp",
            (task_id, output, int(since_end)),
        )

    def output_rows(self, task_id: str, output: str, since_end: int) -> list[dict[str, Any]]:
        """The current rows of every group and window of one output ending at or after ``since_end``."""
        return self._query(
            f"SELECT {ROW_COLUMNS} FROM ldp_current WHERE task_id = ? AND output = ? AND window_end >= ? "
            "ORDER BY window_end, window_start, grp, item",
            (task_id, output, int(since_end)),
        )

    def outputs(self, task_id: str) -> list[tuple[str, int]]:
        """The ``(output, grp)`` pairs the task has panes of, sorted."""
        rows = self._query("SELECT DISTINCT output, grp FROM ldp_panes WHERE task_id = ?", (task_id,))
        return sorted((str(r["output"]), int(r["grp"])) for r in rows)

    def window_rows(self, task_id: str, output: str, grp: int, start: int, end: int) -> list[dict[str, Any]]:
        """The current rows of one window, group and output (``ldp_current``)."""
        return self._query(
            f"SELECT {ROW_COLUMNS} FROM ldp_current WHERE task_id = ? AND output = ? AND grp = ? "
            "AND window_start = ? AND window_end = ? ORDER BY item",
            (task_id, output, int(grp), int(start), int(end)),
        )

    def item_rows(
        self, task_id: str, output: str, grp: int, items: Sequence[int], since_end: int
    ) -> list[dict[str, Any]]:
        """The current rows of the chosen items in every window ending at or after ``since_end``."""
        if not items:
            return []
        marks = ", ".join("?" for _ in items)
        return self._query(
            f"SELECT {ROW_COLUMNS} FROM ldp_current WHERE task_id = ? AND output = ? AND grp = ? "
            f"AND window_end >= ? AND item IN ({marks}) ORDER BY window_end, window_start, item",
            (task_id, output, int(grp), int(since_end), *[int(i) for i in items]),
        )


def _file_id(path: str) -> tuple[int, int] | None:
    """``(device, inode)`` of a file, None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _redact(url: str) -> str:
    """A store URL without its password (``postgresql://user:***@host/db``)."""
    from store import redact_url

    return redact_url(url)
