"""A store filled window by window from a simulated population: the dashboard's test and screenshot data.

Each window's estimates are computed by the numpy core (``ldp.oracles``: a population drawn from a Zipf
law, its reports encoded and estimated), published unpost-processed (method ``base``) so the 95% interval
``estimate +- 1.96 std`` describes the published number; panes (EARLY, ON_TIME, LATE), final flags, counts
and dead-letter reasons follow the store contract (/work/notes/store_contract.md). The rows are written with
plain SQL against the contract's tables (SQLite or PostgreSQL), in one transaction per pane, the way the
job's sink replaces a window's rows atomically.

This is test and demo tooling, not the job's writer (``--store`` on the aggregation jobs is).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SimulatedStream", "SqlWriter", "open_writer"]

DDL = (
    "CREATE TABLE IF NOT EXISTS ldp_meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS ldp_tasks (task_id TEXT PRIMARY KEY, kind TEXT, mechanism TEXT, "
    "epsilon DOUBLE PRECISION, task_json TEXT, summary_json TEXT, updated_ms BIGINT)",
    "CREATE TABLE IF NOT EXISTS ldp_current (task_id TEXT, output TEXT, window_start BIGINT, "
    "window_end BIGINT, "
    "grp BIGINT, item BIGINT, label TEXT, estimate DOUBLE PRECISION, std DOUBLE PRECISION, "
    "ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, unbiased DOUBLE PRECISION, unbiased_std "
    "DOUBLE PRECISION, "
    "ci_includes_zero SMALLINT, method TEXT, n_reports BIGINT, pane_index INTEGER, pane_timing TEXT, "
    "is_final SMALLINT, written_ms BIGINT, extra_json TEXT, "
    "PRIMARY KEY (task_id, output, window_start, window_end, grp, item))",
    "CREATE TABLE IF NOT EXISTS ldp_history (task_id TEXT, output TEXT, window_start BIGINT, "
    "window_end BIGINT, "
    "grp BIGINT, item BIGINT, label TEXT, estimate DOUBLE PRECISION, std DOUBLE PRECISION, "
    "ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, unbiased DOUBLE PRECISION, unbiased_std "
    "DOUBLE PRECISION, "
    "ci_includes_zero SMALLINT, method TEXT, n_reports BIGINT, pane_index INTEGER, pane_timing TEXT, "
    "is_final SMALLINT, written_ms BIGINT, extra_json TEXT, "
    "PRIMARY KEY (task_id, output, window_start, window_end, grp, item, pane_index))",
    "CREATE TABLE IF NOT EXISTS ldp_panes (task_id TEXT, output TEXT, window_start BIGINT, "
    "window_end BIGINT, "
    "grp BIGINT, pane_index INTEGER, pane_timing TEXT, is_final SMALLINT, n_reports BIGINT, "
    "written_ms BIGINT, "
    "PRIMARY KEY (task_id, output, window_start, window_end, grp, pane_index))",
    "CREATE TABLE IF NOT EXISTS ldp_windows (task_id TEXT, window_start BIGINT, window_end BIGINT, "
    "last_pane_index INTEGER, last_pane_timing TEXT, is_final SMALLINT, n_reports BIGINT, "
    "first_written_ms BIGINT, last_written_ms BIGINT, final_ms BIGINT, "
    "PRIMARY KEY (task_id, window_start, window_end))",
    "CREATE TABLE IF NOT EXISTS ldp_counts (task_id TEXT, window_start BIGINT, window_end BIGINT, "
    "read BIGINT, "
    "accepted BIGINT, rejected BIGINT, lost BIGINT, late_dropped BIGINT, reasons_json TEXT, "
    "written_ms BIGINT, "
    "PRIMARY KEY (task_id, window_start, window_end))",
)

CURRENT_COLUMNS = (
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


def open_writer(url: str) -> Any:
    """A writer for ``url``: the project's store (``ldp.store.open_store``) when it is installed, else
    :class:`SqlWriter` (plain SQL against the contract's tables). Both take the calls of
    :class:`SqlWriter`."""
    try:
        from ldp.store import open_store
    except ImportError:
        return SqlWriter(url)
    return _LdpStoreWriter(open_store(url, shared=False))


class _LdpStoreWriter:
    """The :class:`SqlWriter` calls on an ``ldp.store.Store`` (the job's own writer)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def close(self) -> None:
        self.store.close()

    def write_task(
        self,
        task_id: str,
        kind: str,
        mechanism: str,
        epsilon: float,
        summary: Mapping[str, Any],
        written_ms: int | None = None,
    ) -> None:
        self.store.write_task(
            task_id,
            kind=kind,
            mechanism=mechanism,
            epsilon=epsilon,
            task_json=json.dumps({"task_id": task_id}),
            summary=summary,
            updated_ms=written_ms,
        )

    def write_pane(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        task_id: str,
        output: str,
        window: tuple[int, int],
        grp: int,
        pane_index: int,
        timing: str,
        n_reports: int,
        written_ms: int,
        method: str = "base",
    ) -> None:
        from ldp.store import FlatItem, FlatPane

        flat = [FlatItem(**{f: it.get(f) for f in FlatItem._fields}) for it in items]
        pane = FlatPane(
            output=output,
            grp=grp,
            method=method,
            n_reports=n_reports,
            n_items=len(flat),
            items=flat,
            extra={},
        )
        self.store.write_flat_pane(
            task_id, window[0], window[1], pane_index, timing, [pane], written_ms=written_ms
        )

    def mark_final(self, task_id: str, window: tuple[int, int], final_ms: int) -> None:
        self.store.mark_final(task_id, window[0], window[1], final_ms=final_ms)

    def write_counts(
        self,
        task_id: str,
        window: tuple[int, int],
        *,
        read: int,
        accepted: int,
        rejected: int,
        late_dropped: int,
        reasons: Mapping[str, int],
        written_ms: int,
        lost: int = 0,
    ) -> None:
        counts = {
            "read": read,
            "accepted": accepted,
            "rejected": rejected,
            "late_dropped": late_dropped,
            "lost_records": lost,
            **{f"rejected_{k}": int(v) for k, v in reasons.items()},
        }
        self.store.write_counts(task_id, window[0], window[1], counts, written_ms=written_ms)


class SqlWriter:
    """Plain-SQL writes of the contract's rows (one transaction per call), for a tree without
    ``ldp.store``."""

    def __init__(self, url: str) -> None:
        from pipelines.dashboard_app.reader import parse_store_url

        parsed = parse_store_url(url)
        if parsed.kind == "sqlite":
            self.conn: Any = sqlite3.connect(parsed.target, timeout=30.0, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
        else:
            import psycopg

            self.conn = psycopg.connect(parsed.target, autocommit=True)
        self.kind = parsed.kind
        for stmt in DDL:
            self._exec(stmt)
        self._exec(
            "INSERT INTO ldp_meta (key, value) VALUES ('schema_version', '1') ON CONFLICT (key) DO NOTHING"
        )

    def close(self) -> None:
        self.conn.close()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(sql.replace("?", "%s") if self.kind == "postgresql" else sql, tuple(params))

    def _begin(self) -> None:
        self._exec("BEGIN")

    def _commit(self) -> None:
        self._exec("COMMIT")

    def write_task(
        self,
        task_id: str,
        kind: str,
        mechanism: str,
        epsilon: float,
        summary: Mapping[str, Any],
        written_ms: int | None = None,
    ) -> None:
        now = int(time.time() * 1000) if written_ms is None else written_ms
        self._exec(
            "INSERT INTO ldp_tasks (task_id, kind, mechanism, epsilon, task_json, summary_json, updated_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET kind = excluded.kind, "
            "mechanism = excluded.mechanism, epsilon = excluded.epsilon, task_json = excluded.task_json, "
            "summary_json = excluded.summary_json, updated_ms = excluded.updated_ms",
            (
                task_id,
                kind,
                mechanism,
                float(epsilon),
                json.dumps({"task_id": task_id}),
                json.dumps(summary),
                now,
            ),
        )

    def write_pane(
        self,
        rows: Sequence[Mapping[str, Any]],
        *,
        task_id: str,
        output: str,
        window: tuple[int, int],
        grp: int,
        pane_index: int,
        timing: str,
        n_reports: int,
        written_ms: int,
        method: str = "base",
    ) -> None:
        """One pane of one window and group: its current rows replaced, its history and pane rows added and
        the window's row updated, in one transaction."""
        start, end = window
        self._begin()
        try:
            marks = ", ".join("?" for _ in CURRENT_COLUMNS)
            updates = ", ".join(f"{c} = excluded.{c}" for c in CURRENT_COLUMNS[6:])
            for row in rows:
                values = {
                    "task_id": task_id,
                    "output": output,
                    "window_start": start,
                    "window_end": end,
                    "grp": grp,
                    "label": None,
                    "std": None,
                    "ci_low": None,
                    "ci_high": None,
                    "unbiased": None,
                    "unbiased_std": None,
                    "ci_includes_zero": None,
                    "method": method,
                    "n_reports": n_reports,
                    "pane_index": pane_index,
                    "pane_timing": timing,
                    "is_final": 0,
                    "written_ms": written_ms,
                    "extra_json": None,
                    **row,
                }
                params = [values[c] for c in CURRENT_COLUMNS]
                self._exec(
                    f"INSERT INTO ldp_current ({', '.join(CURRENT_COLUMNS)}) VALUES ({marks}) ON CONFLICT "
                    "(task_id, output, window_start, window_end, grp, item) DO UPDATE SET "
                    f"{updates} WHERE excluded.pane_index >= ldp_current.pane_index",
                    params,
                )
                self._exec(
                    f"INSERT INTO ldp_history ({', '.join(CURRENT_COLUMNS)}) VALUES ({marks}) ON CONFLICT "
                    "(task_id, output, window_start, window_end, grp, item, pane_index) DO NOTHING",
                    params,
                )
            self._exec(
                "INSERT INTO ldp_panes (task_id, output, window_start, window_end, grp, pane_index, "
                "pane_timing, "
                "is_final, n_reports, written_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT "
                "(task_id, output, window_start, window_end, grp, pane_index) DO NOTHING",
                (task_id, output, start, end, grp, pane_index, timing, n_reports, written_ms),
            )
            self._exec(
                "INSERT INTO ldp_windows (task_id, window_start, window_end, last_pane_index, "
                "last_pane_timing, "
                "is_final, n_reports, first_written_ms, last_written_ms, final_ms) VALUES (?, ?, ?, "
                "?, ?, 0, ?, ?, ?, "
                "NULL) ON CONFLICT (task_id, window_start, window_end) DO UPDATE SET "
                "last_pane_index = excluded.last_pane_index, last_pane_timing = excluded.last_pane_timing, "
                "n_reports = excluded.n_reports, last_written_ms = excluded.last_written_ms "
                "WHERE excluded.last_pane_index >= ldp_windows.last_pane_index",
                (task_id, start, end, pane_index, timing, n_reports, written_ms, written_ms),
            )
            self._commit()
        except BaseException:
            self._exec("ROLLBACK")
            raise

    def mark_final(self, task_id: str, window: tuple[int, int], final_ms: int) -> None:
        """The watermark passed the window's end plus allowed lateness: its rows are final."""
        start, end = window
        self._begin()
        self._exec(
            "UPDATE ldp_windows SET is_final = 1, final_ms = ? WHERE task_id = ? AND window_start = ? "
            "AND window_end = ?",
            (final_ms, task_id, start, end),
        )
        self._exec(
            "UPDATE ldp_current SET is_final = 1 WHERE task_id = ? AND window_start = ? AND window_end = ?",
            (task_id, start, end),
        )
        self._commit()

    def write_counts(
        self,
        task_id: str,
        window: tuple[int, int],
        *,
        read: int,
        accepted: int,
        rejected: int,
        late_dropped: int,
        reasons: Mapping[str, int],
        written_ms: int,
        lost: int = 0,
    ) -> None:
        start, end = window
        self._exec(
            "INSERT INTO ldp_counts (task_id, window_start, window_end, read, accepted, rejected, lost, "
            "late_dropped, reasons_json, written_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT "
            "(task_id, window_start, window_end) DO UPDATE SET read = excluded.read, accepted = "
            "excluded.accepted, "
            "rejected = excluded.rejected, lost = excluded.lost, late_dropped = excluded.late_dropped, "
            "reasons_json = excluded.reasons_json, written_ms = excluded.written_ms",
            (
                task_id,
                start,
                end,
                read,
                accepted,
                rejected,
                lost,
                late_dropped,
                json.dumps(dict(reasons)),
                written_ms,
            ),
        )


#: Labels of the simulated browser task (value i is LABELS[i]).
LABELS = (
    "chrome",
    "safari",
    "firefox",
    "edge",
    "opera",
    "samsung",
    "brave",
    "vivaldi",
    "yandex",
    "uc",
    "duckduckgo",
    "whale",
    "qq",
    "sogou",
    "maxthon",
    "seamonkey",
    "palemoon",
    "waterfox",
    "falkon",
    "midori",
    "konqueror",
    "epiphany",
    "lynx",
    "w3m",
    "links",
    "dillo",
    "netsurf",
    "otter",
    "basilisk",
    "k-meleon",
    "qutebrowser",
    "surf",
)


@dataclass
class SimulatedStream:
    """Windows of a simulated frequency task: GRR at ``epsilon`` over ``len(LABELS)`` browser names, a Zipf
    population (``exponent``) of ``users_per_window`` reports per window, seeded from ``seed``."""

    task_id: str = "browsers"
    epsilon: float = 2.0
    window_s: int = 60
    users_per_window: int = 3000
    exponent: float = 1.3
    seed: int = 2026
    start_ms: int = 1_795_000_000_000
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(np.random.SeedSequence(self.seed))

    @property
    def domain_size(self) -> int:
        return len(LABELS)

    def summary(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "kind": "frequency",
            "mechanism": "grr",
            "epsilon": self.epsilon,
            "domain_size": self.domain_size,
            "labels": list(LABELS),
            "postprocess": "base",
            "window": {"size_s": self.window_s, "allowed_lateness_s": self.window_s},
        }

    def window(self, index: int) -> tuple[int, int]:
        start = self.start_ms + index * self.window_s * 1000
        return start, start + self.window_s * 1000

    def estimate_rows(self, n: int) -> list[dict[str, Any]]:
        """The rows of one pane: ``n`` reports drawn, encoded and estimated by the core."""
        from ldp.datasets import sample_population
        from ldp.oracles import make_oracle

        d = self.domain_size
        oracle = make_oracle("grr", self.epsilon, d)
        values = sample_population(f"zipf:{self.exponent}", n, d, rng=self._rng)
        est = oracle.estimate_reports(oracle.encode(values, rng=self._rng))
        std = np.sqrt(np.asarray(est.variance, dtype=np.float64))
        freqs = np.asarray(est.frequencies, dtype=np.float64)
        lo, hi = freqs - 1.96 * std, freqs + 1.96 * std
        rows = []
        for i in range(d):
            rows.append(
                {
                    "item": i,
                    "label": LABELS[i],
                    "estimate": float(freqs[i]),
                    "std": float(std[i]),
                    "ci_low": float(lo[i]),
                    "ci_high": float(hi[i]),
                    "unbiased": float(freqs[i]),
                    "unbiased_std": float(std[i]),
                    "ci_includes_zero": int(lo[i] <= 0.0 <= hi[i]),
                    "method": "base",
                }
            )
        return rows

    def panes(self, index: int) -> Iterator[tuple[str, int, float]]:
        """The panes of window ``index``: ``(timing, n_reports, written offset s after the window end)``."""
        n = self.users_per_window
        yield "EARLY", n // 2, -self.window_s / 2
        yield "ON_TIME", n, 1.5 + (index % 3) * 0.4
        if index % 4 == 1:
            yield "LATE", n + n // 50, 12.0

    def write_window(self, store: Any, index: int, *, now_ms: int | None = None, final: bool = True) -> None:
        """Writes every pane of window ``index`` (at their simulated times unless ``now_ms`` is given),
        its counts, and its final flag."""
        window = self.window(index)
        n_last = self.users_per_window
        for pane_index, (timing, n, offset) in enumerate(self.panes(index)):
            written = now_ms if now_ms is not None else int(window[1] + offset * 1000)
            store.write_pane(
                self.estimate_rows(n),
                task_id=self.task_id,
                output="estimates",
                window=window,
                grp=0,
                pane_index=pane_index,
                timing=timing,
                n_reports=n,
                written_ms=written,
            )
            n_last = n
        rejected = 7 + (index * 5) % 11
        reasons = {"value_out_of_domain": rejected - 3, "wrong_task_id": 2, "bad_report": 1}
        late = 4 if index % 4 == 1 else 0
        store.write_counts(
            self.task_id,
            window,
            read=n_last + rejected + late,
            accepted=n_last,
            rejected=rejected,
            late_dropped=late,
            reasons=reasons,
            written_ms=now_ms if now_ms is not None else window[1] + 2000,
        )
        if final:
            store.mark_final(self.task_id, window, now_ms if now_ms is not None else window[1] + 61_000)
