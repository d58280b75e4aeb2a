"""The tables of the latest-state store (one SQL dialect subset that SQLite >= 3.35 and PostgreSQL 15 run).

Types: TEXT, BIGINT, INTEGER, DOUBLE PRECISION, SMALLINT for booleans (0/1). Times are epoch milliseconds
(BIGINT); the global window is stored as ``window_start = window_end = 0``. Every statement is written with
``?`` placeholders; the PostgreSQL backend turns them into psycopg's ``%s`` (no statement holds a literal
``?`` or ``%``). See docs/store.md for what each table means.
"""

from __future__ import annotations

__all__ = [
    "SCHEMA_VERSION",
    "ROW_COLUMNS",
    "ROW_TYPES",
    "PANE_COLUMNS",
    "TABLES",
    "DDL",
    "upsert_current_sql",
    "upsert_history_sql",
    "upsert_pane_sql",
    "upsert_window_sql",
    "upsert_counts_sql",
    "upsert_task_sql",
    "MIGRATIONS",
]

#: ``ldp_meta`` row ``schema_version``.
SCHEMA_VERSION = "3"

_KEY = "task_id TEXT NOT NULL, output TEXT NOT NULL, window_start BIGINT NOT NULL, window_end BIGINT NOT NULL"

#: The columns of ``ldp_current`` and ``ldp_history`` (in this order, the order of flattened rows).
ROW_COLUMNS: tuple[str, ...] = (
    "task_id",
    "output",
    "window_start",
    "window_end",
    "grp",
    "item",
    "label",
    "estimate",
    "std",
    "ci_low",
    "ci_high",
    "unbiased",
    "unbiased_std",
    "ci_includes_zero",
    "method",
    "n_reports",
    "pane_index",
    "pane_timing",
    "is_final",
    "written_ms",
    "extra_json",
)

#: The PostgreSQL type of each of :data:`ROW_COLUMNS` (bulk writes pass one array per column).
ROW_TYPES: tuple[str, ...] = (
    "text", "text", "bigint", "bigint", "bigint", "bigint", "text", "double precision", "double precision",
    "double precision", "double precision", "double precision", "double precision", "smallint", "text",
    "bigint", "integer", "text", "smallint", "bigint", "text",
)  # fmt: skip

_ROW_DEF = (
    _KEY + ", grp BIGINT NOT NULL, item BIGINT NOT NULL, label TEXT NULL, estimate DOUBLE PRECISION NULL, "
    "std DOUBLE PRECISION NULL, ci_low DOUBLE PRECISION NULL, ci_high DOUBLE PRECISION NULL, "
    "unbiased DOUBLE PRECISION NULL, unbiased_std DOUBLE PRECISION NULL, ci_includes_zero SMALLINT NULL, "
    "method TEXT NULL, n_reports BIGINT NULL, pane_index INTEGER NOT NULL, pane_timing TEXT NOT NULL, "
    "is_final SMALLINT NOT NULL, written_ms BIGINT NOT NULL, extra_json TEXT NULL"
)

#: The columns of ``ldp_panes``.
PANE_COLUMNS: tuple[str, ...] = (
    "task_id",
    "output",
    "window_start",
    "window_end",
    "grp",
    "pane_index",
    "pane_timing",
    "is_final",
    "n_reports",
    "written_ms",
    "n_items",
    "stored_items",
    "extra_json",
    "run_id",
)

def _counts_ddl(name: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {name} (task_id TEXT NOT NULL, run_id TEXT NOT NULL, "
        "window_start BIGINT NOT NULL, window_end BIGINT NOT NULL, read BIGINT NOT NULL, "
        "accepted BIGINT NOT NULL, rejected BIGINT NOT NULL, lost BIGINT NOT NULL, "
        "late_dropped BIGINT NOT NULL, reasons_json TEXT, written_ms BIGINT NOT NULL, "
        "PRIMARY KEY (task_id, run_id, window_start, window_end))"
    )


#: ``ldp_runs`` as schema version 2 made it (version 3 adds ``proc``).
_RUNS_V2 = (
    "CREATE TABLE IF NOT EXISTS ldp_runs (run_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, "
    "status TEXT NOT NULL, started_ms BIGINT NOT NULL, heartbeat_ms BIGINT NOT NULL, "
    "ended_ms BIGINT NULL, host TEXT NULL, pid BIGINT NULL, streaming SMALLINT NULL, output TEXT NULL, "
    "panes_written BIGINT NULL, failed_panes BIGINT NULL, error TEXT NULL, summary_json TEXT NULL)"
)

#: Table name -> CREATE TABLE statement (IF NOT EXISTS: ``create_schema`` is idempotent).
TABLES: dict[str, str] = {
    "ldp_meta": "CREATE TABLE IF NOT EXISTS ldp_meta (key TEXT PRIMARY KEY, value TEXT)",
    "ldp_tasks": (
        "CREATE TABLE IF NOT EXISTS ldp_tasks (task_id TEXT PRIMARY KEY, kind TEXT, mechanism TEXT, "
        "epsilon DOUBLE PRECISION, task_json TEXT, summary_json TEXT, updated_ms BIGINT)"
    ),
    "ldp_current": (
        f"CREATE TABLE IF NOT EXISTS ldp_current ({_ROW_DEF}, "
        "PRIMARY KEY (task_id, output, window_start, window_end, grp, item))"
    ),
    "ldp_history": (
        f"CREATE TABLE IF NOT EXISTS ldp_history ({_ROW_DEF}, "
        "PRIMARY KEY (task_id, output, window_start, window_end, grp, item, pane_index))"
    ),
    "ldp_panes": (
        f"CREATE TABLE IF NOT EXISTS ldp_panes ({_KEY}, grp BIGINT NOT NULL, pane_index INTEGER NOT NULL, "
        "pane_timing TEXT NOT NULL, is_final SMALLINT NOT NULL, n_reports BIGINT NULL, "
        "written_ms BIGINT NOT NULL, n_items BIGINT NULL, stored_items BIGINT NULL, extra_json TEXT NULL, "
        "run_id TEXT NULL, PRIMARY KEY (task_id, output, window_start, window_end, grp, pane_index))"
    ),
    "ldp_windows": (
        "CREATE TABLE IF NOT EXISTS ldp_windows (task_id TEXT NOT NULL, window_start BIGINT NOT NULL, "
        "window_end BIGINT NOT NULL, last_pane_index INTEGER NOT NULL, last_pane_timing TEXT NOT NULL, "
        "is_final SMALLINT NOT NULL, n_reports BIGINT NULL, first_written_ms BIGINT NOT NULL, "
        "last_written_ms BIGINT NOT NULL, final_ms BIGINT NULL, run_id TEXT NULL, "
        "PRIMARY KEY (task_id, window_start, window_end))"
    ),
    "ldp_counts": _counts_ddl("ldp_counts"),
    "ldp_runs": _RUNS_V2[:-1] + ", proc TEXT NULL)",
}

#: Everything ``create_schema`` runs (tables, then the indexes the read API uses).
DDL: tuple[str, ...] = (
    *TABLES.values(),
    "CREATE INDEX IF NOT EXISTS ldp_windows_by_end ON ldp_windows (task_id, window_end)",
    "CREATE INDEX IF NOT EXISTS ldp_panes_by_written ON ldp_panes (task_id, written_ms)",
    "CREATE INDEX IF NOT EXISTS ldp_runs_by_task ON ldp_runs (task_id, status)",
)

#: ``from version -> statements`` that bring a store of that schema version to the next one, in one
#: transaction. 1 -> 2: runs (``ldp_runs``), the run of each pane and window, counts per run (the key of
#: ``ldp_counts`` gains ``run_id``: the table is copied; rows of version 1 get ``run_id = ''``).
MIGRATIONS: dict[str, tuple[str, ...]] = {
    "1": (
        "ALTER TABLE ldp_panes ADD COLUMN run_id TEXT NULL",
        "ALTER TABLE ldp_windows ADD COLUMN run_id TEXT NULL",
        _counts_ddl("ldp_counts_v2"),
        "INSERT INTO ldp_counts_v2 (task_id, run_id, window_start, window_end, read, accepted, rejected, "
        "lost, late_dropped, reasons_json, written_ms) SELECT task_id, '', window_start, window_end, read, "
        "accepted, rejected, lost, late_dropped, reasons_json, written_ms FROM ldp_counts",
        "DROP TABLE ldp_counts",
        "ALTER TABLE ldp_counts_v2 RENAME TO ldp_counts",
        "UPDATE ldp_meta SET value = '2' WHERE key = 'schema_version'",
    ),
    # 2 -> 3: ``ldp_runs.proc``, the launching process's identity (a killed run is seen dead at once)
    "2": (
        _RUNS_V2,  # a store migrated from version 1 in the same transaction has no ldp_runs yet
        "ALTER TABLE ldp_runs ADD COLUMN proc TEXT NULL",
        "UPDATE ldp_meta SET value = '3' WHERE key = 'schema_version'",
    ),
}


def _placeholders(n: int) -> str:
    return ", ".join("?" * n)


def upsert_current_sql() -> str:
    """One current row per published number: a pane replaces an older or equal pane's row (same values on
    a retried bundle), never a newer one; ``written_ms`` is when the pane was *first* written."""
    cols = ", ".join(ROW_COLUMNS)
    keys = ("task_id", "output", "window_start", "window_end", "grp", "item")
    sets = [f"{c} = excluded.{c}" for c in ROW_COLUMNS if c not in keys and c != "written_ms"]
    sets.append(
        "written_ms = CASE WHEN excluded.pane_index > ldp_current.pane_index THEN excluded.written_ms "
        "ELSE ldp_current.written_ms END"
    )
    # is_final never goes back from 1 to 0 (a window marked final stays final)
    sets = [
        s
        if not s.startswith("is_final")
        else "is_final = CASE WHEN ldp_current.is_final = 1 THEN 1 ELSE excluded.is_final END"
        for s in sets
    ]
    return (
        f"INSERT INTO ldp_current ({cols}) VALUES ({_placeholders(len(ROW_COLUMNS))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(sets)} "
        "WHERE excluded.pane_index >= ldp_current.pane_index"
    )


def upsert_history_sql() -> str:
    """Every pane ever written: a retried pane rewrites its own rows (same values), first ``written_ms``
    kept."""
    cols = ", ".join(ROW_COLUMNS)
    keys = ("task_id", "output", "window_start", "window_end", "grp", "item", "pane_index")
    sets = [
        f"{c} = excluded.{c}" for c in ROW_COLUMNS if c not in keys and c not in ("written_ms", "is_final")
    ]
    return (
        f"INSERT INTO ldp_history ({cols}) VALUES ({_placeholders(len(ROW_COLUMNS))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(sets)}"
    )


def upsert_pane_sql() -> str:
    cols = ", ".join(PANE_COLUMNS)
    keys = ("task_id", "output", "window_start", "window_end", "grp", "pane_index")
    sets = [
        f"{c} = excluded.{c}" for c in PANE_COLUMNS if c not in keys and c not in ("written_ms", "is_final")
    ]
    return (
        f"INSERT INTO ldp_panes ({cols}) VALUES ({_placeholders(len(PANE_COLUMNS))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(sets)}"
    )


def upsert_window_sql() -> str:
    """A window's latest pane: index, timing, report count and last write move forward only; the first
    write time and the final flag are kept."""
    newer = "excluded.last_pane_index > ldp_windows.last_pane_index"
    return (
        "INSERT INTO ldp_windows (task_id, window_start, window_end, last_pane_index, last_pane_timing, "
        "is_final, n_reports, first_written_ms, last_written_ms, final_ms, run_id) "
        "VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, ?) "
        "ON CONFLICT (task_id, window_start, window_end) DO UPDATE SET "
        f"run_id = CASE WHEN {newer} THEN excluded.run_id ELSE ldp_windows.run_id END, "
        f"last_pane_timing = CASE WHEN {newer} THEN excluded.last_pane_timing "
        "ELSE ldp_windows.last_pane_timing END, "
        f"n_reports = CASE WHEN {newer} THEN excluded.n_reports ELSE ldp_windows.n_reports END, "
        f"last_written_ms = CASE WHEN {newer} THEN excluded.last_written_ms "
        "ELSE ldp_windows.last_written_ms END, "
        # every SET expression reads the row as it was before the update (both engines)
        f"last_pane_index = CASE WHEN {newer} THEN excluded.last_pane_index "
        "ELSE ldp_windows.last_pane_index END"
    )


def upsert_counts_sql() -> str:
    return (
        "INSERT INTO ldp_counts (task_id, run_id, window_start, window_end, read, accepted, rejected, lost, "
        "late_dropped, reasons_json, written_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (task_id, run_id, window_start, window_end) DO UPDATE SET read = excluded.read, "
        "accepted = excluded.accepted, rejected = excluded.rejected, lost = excluded.lost, "
        "late_dropped = excluded.late_dropped, reasons_json = excluded.reasons_json, "
        "written_ms = excluded.written_ms"
    )


def upsert_task_sql() -> str:
    return (
        "INSERT INTO ldp_tasks (task_id, kind, mechanism, epsilon, task_json, summary_json, updated_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET kind = excluded.kind, "
        "mechanism = excluded.mechanism, epsilon = excluded.epsilon, task_json = excluded.task_json, "
        "summary_json = excluded.summary_json, updated_ms = excluded.updated_ms"
    )
