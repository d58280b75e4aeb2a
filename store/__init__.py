"""The latest-state store of estimates (Beam-free): SQLite by default, PostgreSQL for real.

``open_store(url)`` -> :class:`Store` with a write API (used by the Beam sink ``transforms.store``) and a
read API (used by the dashboard, ``pipelines.dashboard``). One current row per published number (task,
output, window, group, value or query), replaced atomically per pane, with the pane history, pane
latencies, a final flag set when the watermark passes the window's end plus the allowed lateness, and the
report counts and dead-letter reasons per window. See docs/store.md (URLs, tables, idempotency, the final
flag, the cap on stored numbers, reading it, BigQuery).

Modules: :mod:`store.schema` (tables and upserts, one SQL subset for SQLite and PostgreSQL) and
:mod:`store.store` (backends, write and read API). The result rows are flattened into store rows by the
kinds' flatteners (``flatten_rows``, ``FlatPane``, ``FlatItem``: re-exported here, as the write API takes
them). The store imports ``ldp`` only; nothing in ``ldp`` imports it.
"""

from ldp.kinds import flatten_rows, row_output
from ldp.rows import DEFAULT_MAX_ITEMS, FlatItem, FlatPane, window_ms
from store.schema import SCHEMA_VERSION
from store.store import (
    HEARTBEAT_S,
    STALE_RUN_S,
    RunConflict,
    Store,
    StoreError,
    StoreLost,
    StoreUnavailable,
    WindowFinal,
    call_with_retry,
    is_transient,
    now_ms,
    open_store,
    parse_store_url,
    redact_url,
    run_conflict_message,
)

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "HEARTBEAT_S",
    "STALE_RUN_S",
    "RunConflict",
    "StoreLost",
    "StoreUnavailable",
    "WindowFinal",
    "call_with_retry",
    "is_transient",
    "SCHEMA_VERSION",
    "FlatItem",
    "FlatPane",
    "Store",
    "StoreError",
    "flatten_rows",
    "now_ms",
    "open_store",
    "parse_store_url",
    "redact_url",
    "run_conflict_message",
    "row_output",
    "window_ms",
]
