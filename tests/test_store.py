"""The latest-state store (store): schema, idempotent pane writes, older panes, atomicity, the final flag,
counts and dead-letter reasons, row flattening of every result-row type, the read API and URLs.

Every test of :class:`TestStore` runs twice: on SQLite (a file in the test's tmp dir) and, marked
``postgres``, on a throw-away PostgreSQL 15 server (the session fixture ``postgres_url`` of conftest; a fresh
database per test).
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import NamedTuple

import numpy as np
import pytest

from ldp.kinds.batch_queries.aggregate import BatchAnswerRow
from ldp.kinds.frequency.aggregate import EstimateRow
from ldp.kinds.range.aggregate import AnswerRow, ModelRow
from ldp.kinds.sparse.aggregate import SparseEstimateRow
from ldp.rows import FlatItem, FlatPane
from store import (
    DEFAULT_MAX_ITEMS,
    SCHEMA_VERSION,
    Store,
    StoreError,
    flatten_rows,
    open_store,
    parse_store_url,
)

_DB_SEQ = itertools.count()


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])]
)
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/estimates.db"
    import psycopg

    base = request.getfixturevalue("postgres_url")
    name = f"ldp_test_{next(_DB_SEQ)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return base.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def store(store_url: str):
    s = open_store(store_url, shared=False)
    yield s
    s.close()


def _est(freqs, *, group=0, pane=0, timing="ON_TIME", start=0, end=60_000, n=1000, method="norm-sub"):
    freqs = [float(f) for f in freqs]
    return EstimateRow(
        task_id="t",
        schema_version=1,
        group=group,
        window_start=start,
        window_end=end,
        pane_timing=timing,
        pane_index=pane,
        is_last_pane=False,
        n_reports=n,
        mechanism="olh",
        epsilon=1.0,
        domain_size=len(freqs),
        postprocess=method,
        frequencies=freqs,
        std=[0.01] * len(freqs),
    )


class BarsEstimateRow(NamedTuple):
    """An estimate row with the error-bar fields helper BARS appends (the store reads them by name)."""

    task_id: str
    group: int
    n_reports: int
    mechanism: str
    epsilon: float
    domain_size: int
    postprocess: str
    frequencies: list[float]
    std: list[float]
    ci_low: list[float]
    ci_high: list[float]
    ci_method: str
    unbiased: list[float]
    unbiased_std: list[float]
    ci_includes_zero: list[bool]
    labels: list[str] | None
    row_schema: str = "estimate"
    output = "estimates"


def _tables(s: Store, task: str = "t") -> dict[str, list[dict]]:
    b = s._b
    out = {}
    for table, order in (
        ("ldp_current", "output, window_start, grp, item"),
        ("ldp_history", "output, window_start, grp, item, pane_index"),
        ("ldp_panes", "output, window_start, grp, pane_index"),
        ("ldp_windows", "window_start"),
        ("ldp_counts", "window_start"),
    ):
        out[table] = b.query(f"SELECT * FROM {table} WHERE task_id = ? ORDER BY {order}", (task,))
    return out


class TestStore:
    def test_create_schema_is_idempotent_and_checks_the_version(self, store: Store, store_url: str):
        store.create_schema()
        store.create_schema()
        got = store._b.query("SELECT value FROM ldp_meta WHERE key = 'schema_version'")
        assert got == [{"value": SCHEMA_VERSION}]
        with store._b.transaction() as cur:
            cur.execute("UPDATE ldp_meta SET value = '99' WHERE key = 'schema_version'")
        with pytest.raises(StoreError, match="schema version '99'"):
            open_store(store_url, shared=False)

    def test_rewriting_a_pane_changes_nothing(self, store: Store):
        rows = [_est(np.linspace(0, 1, 16), group=0), _est(np.linspace(1, 0, 16), group=1)]
        assert store.write_pane("t", 0, 60_000, 0, "EARLY", rows, written_ms=1_000) == 32
        store.write_counts("t", 0, 60_000, {"read": 40, "accepted": 32, "rejected": 8}, written_ms=1_000)
        before = _tables(store)
        # a retried bundle: the same pane again, later
        store.write_pane("t", 0, 60_000, 0, "EARLY", rows, written_ms=5_000)
        store.write_counts("t", 0, 60_000, {"read": 40, "accepted": 32, "rejected": 8}, written_ms=1_000)
        assert _tables(store) == before
        assert len(before["ldp_current"]) == 32 and len(before["ldp_history"]) == 32
        assert {r["written_ms"] for r in before["ldp_current"]} == {1_000}

    def test_an_older_pane_never_replaces_a_newer_one(self, store: Store):
        new, old = _est([0.5, 0.3, 0.2], pane=2, n=300), _est([0.9, 0.05, 0.05], pane=1, n=200)
        store.write_pane("t", 0, 60_000, 2, "LATE", [new], written_ms=3_000)
        store.write_pane("t", 0, 60_000, 1, "ON_TIME", [old], written_ms=4_000)  # arrives after
        cur = store.current("t", 0, 60_000)
        assert [r["estimate"] for r in cur] == [0.5, 0.3, 0.2]
        assert {r["pane_index"] for r in cur} == {2} and {r["n_reports"] for r in cur} == {300}
        (w,) = store.windows("t")
        assert (w["last_pane_index"], w["last_pane_timing"], w["n_reports"]) == (2, "LATE", 300)
        assert (w["first_written_ms"], w["last_written_ms"]) == (3_000, 3_000)
        hist = store.history("t", 0, 60_000)
        assert sorted({r["pane_index"] for r in hist}) == [1, 2]  # the history keeps every pane
        assert [r["estimate"] for r in hist if r["pane_index"] == 1] == [0.9, 0.05, 0.05]

    def test_a_newer_pane_replaces_every_number_and_drops_stale_top_items(self, store: Store):
        rng = np.random.default_rng(np.random.SeedSequence(2026_12_01, spawn_key=(10,)))
        d, cap = 200, 10
        first, second = rng.random(d), rng.random(d)
        store.write_pane("t", 0, 60_000, 0, "EARLY", [_est(first)], max_items=cap)
        store.write_pane("t", 0, 60_000, 1, "ON_TIME", [_est(second)], max_items=cap)
        cur = store.current("t", 0, 60_000)
        want = sorted(np.argsort(-second, kind="stable")[:cap].tolist())
        assert [r["item"] for r in cur] == want
        assert [r["estimate"] for r in cur] == [float(second[i]) for i in want]
        assert {r["pane_index"] for r in cur} == {1}
        panes = store.panes("t", 0, 60_000)
        assert [(p["n_items"], p["stored_items"]) for p in panes] == [(d, cap), (d, cap)]

    def test_a_failed_write_leaves_nothing_of_its_pane(self, store: Store):
        store.write_pane("t", 0, 60_000, 0, "EARLY", [_est([0.2, 0.8])], written_ms=1_000)
        before = _tables(store)
        good = FlatItem(0, None, 0.4, 0.1, None, None, None, None, None, None)
        bad = good._replace(item=1, estimate=object())  # cannot be bound: the database refuses it
        flat = [FlatPane("estimates", 0, "base", 10, 2, [good, bad], {})]
        with pytest.raises(Exception):  # noqa: B017 - sqlite3 / psycopg raise their own types
            store.write_flat_pane("t", 0, 60_000, 1, "ON_TIME", flat, written_ms=2_000)
        assert _tables(store) == before
        # the store is usable afterwards
        store.write_pane("t", 0, 60_000, 1, "ON_TIME", [_est([0.3, 0.7])], written_ms=2_000)
        assert [r["estimate"] for r in store.current("t", 0, 60_000)] == [0.3, 0.7]

    def test_a_reader_never_sees_half_a_pane(self, store: Store, store_url: str):
        d, n_panes = 300, 25
        reader = open_store(store_url, shared=False, create=False)
        seen: list[tuple[int, set[int], set[float]]] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                rows = reader.current("t", 0, 60_000)
                if rows:
                    seen.append((len(rows), {r["pane_index"] for r in rows}, {r["n_reports"] for r in rows}))

        thread = threading.Thread(target=read)
        thread.start()
        try:
            for pane in range(n_panes):
                store.write_pane(
                    "t", 0, 60_000, pane, "EARLY", [_est(np.full(d, pane / n_panes), pane=pane, n=pane + 1)]
                )
        finally:
            done.set()
            thread.join()
            reader.close()
        assert seen, "the reader read nothing"
        for count, panes, ns in seen:
            assert count == d and len(panes) == 1 and ns == {next(iter(panes)) + 1}

    def test_final_flag(self, store: Store):
        assert not store.mark_final("t", 0, 60_000)  # no pane written: nothing to mark
        store.write_pane("t", 0, 60_000, 0, "EARLY", [_est([0.5, 0.5])], written_ms=1_000)
        store.write_pane("t", 0, 60_000, 1, "ON_TIME", [_est([0.6, 0.4])], written_ms=2_000)
        assert {r["is_final"] for r in store.current("t", 0, 60_000)} == {0}
        assert store.mark_final("t", 0, 60_000, final_ms=9_000)
        assert not store.mark_final("t", 0, 60_000, final_ms=9_999)  # idempotent: the first time is kept
        (w,) = store.windows("t")
        assert (w["is_final"], w["final_ms"]) == (1, 9_000)
        assert {r["is_final"] for r in store.current("t", 0, 60_000)} == {1}
        assert [(p["pane_index"], p["is_final"]) for p in store.panes("t", 0, 60_000)] == [(0, 0), (1, 1)]
        assert {(r["pane_index"], r["is_final"]) for r in store.history("t", 0, 60_000)} == {(0, 0), (1, 1)}
        assert store.windows("t", final_only=True) == [w]
        # a final window stays final (a retried write of its last pane cannot unset it)
        store.write_pane("t", 0, 60_000, 1, "ON_TIME", [_est([0.6, 0.4])], written_ms=3_000)
        assert {r["is_final"] for r in store.current("t", 0, 60_000)} == {1}
        assert store.windows("t")[0]["is_final"] == 1

    def test_counts_and_dead_letter_reasons(self, store: Store):
        counts = {
            "read": 110,
            "accepted": 100,
            "rejected": 10,
            "rejected_wrong_task": 7,
            "rejected_out_of_domain": 3,
            "rejected_missing_field": 0,
            "lost_records": 4,
            "lost_bytes": 999,
            "late_dropped": 5,
            "window_start_ms": 0,
            "window_end_ms": 60_000,
        }
        store.write_counts("t", 0, 60_000, counts, written_ms=7)
        store.write_counts("t", 60_000, 120_000, {"read": 1, "accepted": 1, "rejected": 0}, written_ms=8)
        got = store.counts("t")
        assert got[0] == {
            "window_start": 0,
            "window_end": 60_000,
            "read": 110,
            "accepted": 100,
            "rejected": 10,
            "lost": 4,
            "late_dropped": 5,
            "written_ms": 7,
            "reasons": {"wrong_task": 7, "out_of_domain": 3, "late": 5},
            "run_id": "",
        }
        assert got[1]["reasons"] == {} and got[1]["late_dropped"] == 0
        assert [c["window_start"] for c in store.counts("t", limit=1)] == [60_000]
        store.write_counts("t", 0, 60_000, {**counts, "read": 111, "rejected": 11}, written_ms=9)  # replaces
        assert (store.counts("t")[0]["read"], store.counts("t")[0]["rejected"]) == (111, 11)

    def test_estimate_rows_flatten_one_row_per_group_and_value(self, store: Store):
        rows = [_est([0.1, 0.2, 0.7], group=0, n=10), _est([0.3, 0.3, 0.4], group=1, n=20)]
        store.write_pane("t", 0, 60_000, 0, "ON_TIME", rows)
        cur = store.current("t", 0, 60_000)
        assert [(r["output"], r["grp"], r["item"], r["estimate"]) for r in cur] == [
            ("estimates", g, i, v) for g, row in enumerate(rows) for i, v in enumerate(row.frequencies)
        ]
        assert {(r["grp"], r["n_reports"], r["method"], r["std"]) for r in cur} == {
            (0, 10, "norm-sub", 0.01),
            (1, 20, "norm-sub", 0.01),
        }
        assert all(r[k] is None for r in cur for k in ("ci_low", "ci_high", "unbiased", "label"))
        assert store.windows("t")[0]["n_reports"] == 30  # the groups' reports
        extra = store.panes("t", 0, 60_000)[0]["extra"]
        assert extra == {"mechanism": "olh", "epsilon": 1.0, "domain_size": 3}

    def test_error_bar_fields_and_labels_are_stored(self, store: Store):
        row = BarsEstimateRow(
            task_id="t",
            group=0,
            n_reports=50,
            mechanism="oue",
            epsilon=2.0,
            domain_size=3,
            postprocess="norm-sub",
            frequencies=[0.0, 0.25, 0.75],
            std=[0.01, 0.02, 0.03],
            ci_low=[0.0, 0.2, 0.7],
            ci_high=[0.05, 0.3, 0.8],
            ci_method="clipped",
            unbiased=[-0.01, 0.26, 0.75],
            unbiased_std=[0.04, 0.05, 0.06],
            ci_includes_zero=[True, False, False],
            labels=["a", "b", "c"],
        )
        store.write_pane("t", None, None, 0, "ON_TIME", [row])  # the global window: 0/0
        cur = store.current("t", 0, 0)
        cols = (
            "item",
            "label",
            "estimate",
            "std",
            "ci_low",
            "ci_high",
            "unbiased",
            "unbiased_std",
            "ci_includes_zero",
        )
        assert [tuple(r[c] for c in cols) for r in cur] == [
            (0, "a", 0.0, 0.01, 0.0, 0.05, -0.01, 0.04, 1),
            (1, "b", 0.25, 0.02, 0.2, 0.3, 0.26, 0.05, 0),
            (2, "c", 0.75, 0.03, 0.7, 0.8, 0.75, 0.06, 0),
        ]
        assert store.panes("t", 0, 0)[0]["extra"]["ci_method"] == "clipped"
        # task labels are used when the rows carry none
        store.write_pane("u", 0, 10, 0, "ON_TIME", [_est([0.5, 0.5])], labels=["x", "y"])
        assert [r["label"] for r in store.current("u", 0, 10)] == ["x", "y"]

    def test_non_finite_numbers_are_null(self, store: Store):
        store.write_pane("t", 0, 10, 0, "ON_TIME", [_est([math.nan, math.inf, 0.5])])
        assert [r["estimate"] for r in store.current("t", 0, 10)] == [None, None, 0.5]

    def test_range_answer_rows_flatten_one_row_per_query(self, store: Store):
        rows = [
            AnswerRow(
                "t", 1, 0, 60_000, "ON_TIME", 0, q, {"age": [0, 3 + q]}, 0.1 * (q + 1), 0.02, "hdg", 500, 1
            )
            for q in (1, 0, 2)
        ]
        model = ModelRow("t", 1, 0, 60_000, "ON_TIME", 0, "hdg", 500, 1, "{}", "{}")
        assert store.write_pane("t", 0, 60_000, 0, "ON_TIME", [*rows, model]) == 3
        cur = store.current("t", 0, 60_000)
        assert [
            (r["output"], r["grp"], r["item"], r["estimate"], r["std"], r["method"], r["n_reports"])
            for r in cur
        ] == [("answers", 0, q, 0.1 * (q + 1), 0.02, "hdg", 500) for q in range(3)]
        assert [r["extra"]["query"] for r in cur] == [{"age": [0, 3 + q]} for q in range(3)]
        assert all(r["ci_low"] is None for r in cur)  # no interval until the rows carry one
        assert store.windows("t")[0]["n_reports"] == 500

    def test_sparse_rows_flatten_one_row_per_coordinate(self, store: Store):
        row = SparseEstimateRow(
            task_id="t",
            schema_version=1,
            group=0,
            window_start=0,
            window_end=10,
            pane_timing="ON_TIME",
            pane_index=0,
            is_last_pane=True,
            n_reports=70,
            mechanism="svme",
            epsilon=1.0,
            domain_size=1000,
            sparsity=4,
            privacy="ldp",
            items=[5, 17, 900],
            mean=[0.1, 0.4, 0.2],
            std=[0.01, 0.02, 0.03],
            linf_bound_95=0.09,
        )
        store.write_pane("t", 0, 10, 0, "ON_TIME", [row])
        cur = store.current("t", 0, 10)
        assert [(r["output"], r["item"], r["estimate"], r["std"], r["method"]) for r in cur] == [
            ("sparse", 5, 0.1, 0.01, "svme/ldp"),
            ("sparse", 17, 0.4, 0.02, "svme/ldp"),
            ("sparse", 900, 0.2, 0.03, "svme/ldp"),
        ]
        assert store.panes("t", 0, 10)[0]["extra"]["linf_bound_95"] == 0.09

    def test_batch_answer_rows_flatten_one_row_per_query_with_the_rows_own_interval(self, store: Store):
        def row(q: int, **ci: object) -> BatchAnswerRow:
            return BatchAnswerRow(
                "t",
                1,
                0,
                10,
                "ON_TIME",
                0,
                q,
                {"x": [0, q]},
                10.0 * q,
                2.0,
                "hierarchical",
                1.0,
                1e-6,
                "analytic",
                1,
                2.0,
                "os",
                "central",
                **ci,
            )

        # bounds that no recomputation from (answer, std) gives: the store must publish the row's own
        rows = [
            row(0, ci_low=-3.25, ci_high=4.5, ci_method="gaussian-exact"),
            row(1, ci_low=7.0, ci_high=12.75, ci_method="gaussian-exact"),
            row(2),  # no interval: NULL bounds, no ci_includes_zero, never answer +- z std
        ]
        store.write_pane("t", 0, 10, 0, "ON_TIME", rows)
        cur = store.current("t", 0, 10)
        assert [(r["output"], r["item"], r["estimate"], r["method"], r["n_reports"]) for r in cur] == [
            ("batch", 0, 0.0, "hierarchical", None),
            ("batch", 1, 10.0, "hierarchical", None),
            ("batch", 2, 20.0, "hierarchical", None),
        ]
        assert [(r["std"], r["ci_low"], r["ci_high"], r["ci_includes_zero"]) for r in cur] == [
            (2.0, -3.25, 4.5, 1),
            (2.0, 7.0, 12.75, 0),
            (2.0, None, None, None),
        ]
        (fp,) = flatten_rows(rows)
        assert [(i.ci_low, i.ci_high, i.ci_includes_zero) for i in fp.items] == [
            (-3.25, 4.5, 1),
            (7.0, 12.75, 0),
            (None, None, None),
        ]

    def test_read_api_windows_top_k_series_and_latencies(self, store: Store):
        for w in range(5):
            start, end = w * 60_000, (w + 1) * 60_000
            rows = [_est([0.1 * w, 0.5, 0.4 - 0.1 * w + 0.1], start=start, end=end, group=g) for g in (0, 1)]
            store.write_pane("t", start, end, 0, "ON_TIME", rows, written_ms=end + 1_500 + w)
        store.write_pane("t", 240_000, 300_000, 1, "LATE", [_est([0.2, 0.2, 0.6])], written_ms=310_000)
        wins = store.windows("t", limit=3)
        assert [w["window_start"] for w in wins] == [240_000, 180_000, 120_000]
        top = store.current("t", 0, 60_000, top_k=2)
        assert [(r["grp"], r["item"]) for r in top] == [(0, 1), (0, 2), (1, 1), (1, 2)]
        assert [r["item"] for r in store.current("t", 0, 60_000, grp=1, top_k=1)] == [1]
        series = store.series("t", [0, 2], last_windows=3)
        assert [(r["window_start"], r["item"]) for r in series] == [
            (s, i) for s in (120_000, 180_000, 240_000) for i in (0, 2)
        ]
        assert series[-1]["estimate"] == 0.6 and series[-1]["pane_index"] == 1
        lat = store.pane_latencies("t", last_windows=2)
        assert [(p["window_start"], p["pane_index"], p["latency_ms"]) for p in lat] == [
            (180_000, 0, 1_503),
            (240_000, 0, 1_504),
            (240_000, 1, 10_000),
        ]
        assert store.series("t", []) == []

    def test_tasks(self, store: Store):
        assert store.tasks() == [] and store.task("t") is None
        store.write_task(
            "t",
            kind="frequency",
            mechanism="olh",
            epsilon=1.0,
            task_json='{"task_id": "t"}',
            summary={"window": {"size_s": 60.0}, "x": math.nan},
            updated_ms=5,
        )
        store.write_task("a", kind="range", mechanism="hdg", epsilon=2.0, task_json=None)
        assert [t["task_id"] for t in store.tasks()] == ["a", "t"]
        assert store.task("t") == {
            "task_id": "t",
            "kind": "frequency",
            "mechanism": "olh",
            "epsilon": 1.0,
            "updated_ms": 5,
            "task": {"task_id": "t"},
            "summary": {"window": {"size_s": 60.0}, "x": None},
        }


# ------------------------------------------------------------------------------------------------------------
# without a database
# ------------------------------------------------------------------------------------------------------------


def test_the_cap_keeps_the_largest_estimates_ties_by_index():
    (fp,) = flatten_rows([_est([0.1, 0.3, 0.3, math.nan, 0.2, 0.3])], max_items=3)
    assert (fp.n_items, [i.item for i in fp.items]) == (6, [1, 2, 5])
    (fp,) = flatten_rows([_est(np.zeros(DEFAULT_MAX_ITEMS))])
    assert len(fp.items) == DEFAULT_MAX_ITEMS
    with pytest.raises(ValueError, match="max_items"):
        flatten_rows([_est([0.5])], max_items=0)


class _BareAnswer(NamedTuple):
    """An answer row of a later schema: a noise-level flag of its own, no interval."""

    query_index: int
    query: dict[str, list[int]]
    answer: float
    std: float
    strategy: str
    ci_includes_zero: bool | None
    row_schema: str = "batch_answer"


def test_an_answer_row_without_bounds_stores_nulls_and_keeps_its_own_zero_flag():
    rows = [
        _BareAnswer(0, {"x": [0, 1]}, 1.0, 2.0, "identity", True),
        _BareAnswer(1, {}, 50.0, 2.0, "identity", None),
    ]
    (fp,) = flatten_rows(rows)
    assert fp.output == "batch"
    assert [(i.ci_low, i.ci_high, i.ci_includes_zero) for i in fp.items] == [
        (None, None, 1),
        (None, None, None),
    ]


def test_rows_whose_vectors_disagree_are_refused():
    row = _est([0.5, 0.5])._replace(std=[0.1])
    with pytest.raises(ValueError, match="std has 1 entries, expected 2"):
        flatten_rows([row])


def test_urls(tmp_path):
    assert parse_store_url("sqlite:///out/e.db") == ("sqlite", "out/e.db")
    assert parse_store_url("sqlite:////abs/e.db") == ("sqlite", "/abs/e.db")
    assert parse_store_url("out/e.db") == ("sqlite", "out/e.db")
    assert parse_store_url("postgresql://u@127.0.0.1:5/db")[0] == "postgresql"
    assert parse_store_url("postgres://u@h/db")[0] == "postgresql"
    for bad, msg in (
        ("", "empty"),
        ("sqlite://", "sqlite:///PATH"),
        ("mysql://u:secret@h/db", "unsupported"),
    ):
        with pytest.raises(StoreError, match=msg) as info:
            parse_store_url(bad)
        assert "secret" not in str(info.value)
    # a store in a directory that does not exist yet is created with it
    s = open_store(f"sqlite:///{tmp_path}/a/b/e.db", shared=False)
    assert s.dialect == "sqlite" and (tmp_path / "a" / "b" / "e.db").is_file()
    s.close()
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot be opened"):
        open_store(str(tmp_path / "file" / "e.db"), shared=False)


def test_an_unreachable_server_is_a_one_line_error():
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreError) as info:
        open_store(f"postgresql://ldp:hunter2@127.0.0.1:{port}/db", shared=False)
    text = str(info.value)
    assert "unreachable" in text and "\n" not in text and "hunter2" not in text and "***" in text
