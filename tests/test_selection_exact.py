"""The frequency kind's discovery flags at small n: exact binomial p-values of ``f = 0`` in the rows.

The Monte Carlo tests run null windows through the real aggregator (:class:`FrequencyAggregator`): every
user holds value 0, so the other ``d - 1`` values have frequency 0 and any flag among them is a false one.
A window "fails" when it flags any of them; Bonferroni at ``alpha`` promises a failure rate (the
family-wise error) of at most ``alpha``.

Tolerance: the failing windows among ``W`` independent ones are Binomial(``W``, ``pi``). Under the claim
``pi <= alpha`` their count exceeds ``binom.ppf(1 - 1e-3, W, alpha)`` with probability at most 1e-3, so
:func:`test_exact_flags_hold_the_family_wise_error` fails by chance with probability at most 1e-3 per case
(the seeds are fixed, so a run is reproducible). :func:`test_normal_flags_exceed_alpha_at_small_n` asserts
the converse: the normal flags' count is above that bound, i.e. "FWER <= alpha" is rejected at level 1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from ldp.aggregate import WindowInfo
from ldp.intervals import EXACT_NULL_MECHANISMS, null_support_q, zero_p_values
from ldp.kinds.frequency.aggregate import PER_VALUE_FIELDS, EstimateRow, FrequencyAggregator, estimate_json
from ldp.selection import ALPHA, binomial_p_values, discoveries, flag_p_values
from ldp.task import parse_task

pytestmark: list = []  # fast tier; the Monte Carlo tests carry `statistical`

WINDOWS = 400


def _aggregator(mechanism: str, eps: float, d: int) -> FrequencyAggregator:
    task = parse_task({"task_id": "t", "mechanism": mechanism, "epsilon": eps, "domain_size": d})
    return FrequencyAggregator(task)


def _null_rows(mechanism: str, eps: float, d: int, n: int, windows: int, seed: int) -> list[EstimateRow]:
    """One estimate row per window of ``n`` reports of value 0, through the aggregator's finalize."""
    agg = _aggregator(mechanism, eps, d)
    o = agg.oracle
    reports = o.encode(np.zeros(n * windows, dtype=np.int64), rng=np.random.default_rng(seed))
    rows = []
    for w in range(windows):
        acc = o.add(o.create_accumulator(), reports.take(slice(w * n, (w + 1) * n)))
        (row,) = agg.finalize({0: acc}, WindowInfo())
        rows.append(row)
    return rows


def _failures(rows: list[EstimateRow], exact: bool) -> int:
    """Windows with a false flag among values 1..d-1 (Bonferroni over the domain at ALPHA)."""
    bad = 0
    for row in rows:
        u, d = np.asarray(row.unbiased), row.domain_size
        if exact:
            flag = flag_p_values(np.asarray(row.p_zero), d) & (u > 0)
        else:
            flag = discoveries(u, np.asarray(row.unbiased_std), d)
        bad += bool(flag[1:].any())
    return bad


def _bound(windows: int) -> int:
    return int(binom.ppf(1 - 1e-3, windows, ALPHA))


@pytest.mark.statistical
def test_normal_flags_exceed_alpha_at_small_n():
    # BLH eps 4, d = 1024, n = 500: about 11% of the null windows carry a normal false flag (Eq. 4's std
    # shrinks with the estimate when 1 - p - q < 0, on top of the light tail); the exact p-values, 3%.
    rows = _null_rows("blh", 4.0, 1024, 500, 1000, seed=1)
    assert _failures(rows, exact=False) > _bound(1000)
    assert _failures(rows, exact=True) <= _bound(1000)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("mechanism", "eps", "d", "n"),
    [
        ("grr", 4.0, 1024, 1000),
        ("grr", 1.0, 64, 500),
        ("olh", 4.0, 1024, 1000),
        ("olh", 1.0, 256, 2000),
        ("blh", 1.0, 256, 500),
        ("oue", 1.0, 64, 500),
        ("sue", 4.0, 256, 1000),
        ("ss", 4.0, 256, 1000),
        ("hr", 4.0, 1024, 500),
    ],
)
def test_exact_flags_hold_the_family_wise_error(mechanism, eps, d, n):
    rows = _null_rows(mechanism, eps, d, n, WINDOWS, seed=7)
    assert _failures(rows, exact=True) <= _bound(WINDOWS)
    for row in rows[:20]:  # the row's own flag is the exact Bonferroni one
        want = flag_p_values(np.asarray(row.p_zero), d) & (np.asarray(row.unbiased) > 0)
        np.testing.assert_array_equal(~np.asarray(row.ci_includes_zero), want)


def test_every_auto_candidate_has_an_exact_null_law():
    for name in ("grr", "olh", "blh", "oue", "sue", "hr", "ss"):
        agg = _aggregator(name, 2.0, 32)
        assert null_support_q(agg.oracle) == pytest.approx(agg.oracle.q)
    assert set(EXACT_NULL_MECHANISMS) == {"grr", "olh", "blh", "oue", "sue", "hr", "ss"}


def test_memoized_rows_keep_the_normal_flag():
    agg = _aggregator("memo-grr", 2.0, 16)
    o = agg.oracle
    assert null_support_q(o) is None
    values = np.repeat(np.arange(4), 100)
    reports = o.encode(values, rng=np.random.default_rng(3))
    (row,) = agg.finalize({0: o.add(o.create_accumulator(), reports)}, WindowInfo())
    assert row.p_zero is None
    normal = discoveries(np.asarray(row.unbiased), np.asarray(row.unbiased_std), 16)
    np.testing.assert_array_equal(~np.asarray(row.ci_includes_zero), normal)


def test_binomial_p_values_are_the_doubled_upper_tail():
    n, q = 1000, 1 / 64  # n q = 15.625
    counts = np.array([0.0, 10.0, 15.4, 16.0, 30.0, 45.0, np.nan])
    got = binomial_p_values(counts, n, q)
    s = np.rint(counts[:6])
    tail = np.array([sum(binom.pmf(k, n, q) for k in range(int(c), n + 1)) for c in s])
    want = np.where(s > n * q, np.minimum(1.0, 2 * tail), 1.0)
    np.testing.assert_allclose(got[:6], want, rtol=1e-9)
    assert got[6] == 1.0 and got[0] == 1.0 and got[2] == 1.0  # at or below n q, and a missing count
    assert got[5] < 2e-4
    for bad_n, bad_q in ((0, 0.5), (10, 0.0), (10, 1.0), (True, 0.5)):
        with pytest.raises(ValueError):
            binomial_p_values(counts, bad_n, bad_q)


def test_rows_carry_p_zero_into_json_lines_and_the_estimate():
    agg = _aggregator("olh", 4.0, 64)
    o = agg.oracle
    reports = o.encode(np.repeat(np.arange(3), 300), rng=np.random.default_rng(5))
    acc = o.add(o.create_accumulator(), reports)
    (row,) = agg.finalize({0: acc}, WindowInfo())
    want = zero_p_values(o, o.estimate(acc))
    np.testing.assert_allclose(row.p_zero, want)
    assert max(row.p_zero[:3]) < 1e-10 and "p_zero" in PER_VALUE_FIELDS
    small = estimate_json(row._asdict(), 8)
    assert len(small["p_zero"]) == 8 and small["p_zero"][:3] == row.p_zero[:3]


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])]
)
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh store: a SQLite file, or a new database of the session's throw-away PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    import psycopg

    base = request.getfixturevalue("postgres_url")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS ldp_test_p_zero")
        conn.execute("CREATE DATABASE ldp_test_p_zero")
    return base.rsplit("/", 1)[0] + "/ldp_test_p_zero"


def test_p_zero_reaches_the_store_and_the_dashboard_flags_from_it(store_url):
    from pipelines.dashboard_app import shape
    from pipelines.dashboard_app.reader import StoreReader
    from store.store import open_store

    agg = _aggregator("grr", 4.0, 64)
    o = agg.oracle
    reports = o.encode(np.repeat(np.arange(4), [120, 40, 8, 0]), rng=np.random.default_rng(11))
    (row,) = agg.finalize({0: o.add(o.create_accumulator(), reports)}, WindowInfo(0, 60_000))
    url = store_url
    store = open_store(url, shared=False)
    try:
        store.write_pane("t", 0, 60_000, 0, "ON_TIME", [row])
        stored = {r["item"]: r["extra"]["p_zero"] for r in store.current("t", 0, 60_000)}
    finally:
        store.close()
    assert stored == pytest.approx(dict(enumerate(row.p_zero)), rel=1e-12)
    reader = StoreReader(url)
    try:
        rows = reader.window_rows("t", "estimates", 0, 0, 60_000)
    finally:
        reader.close()
    top = shape.top_k(rows, 64, domain_size=64)
    want = flag_p_values(np.asarray(row.p_zero), 64) & (np.asarray(row.unbiased) > 0)
    got = dict(zip(top["item"], top["above_zero"], strict=True))
    assert {v: bool(a) for v, a in got.items()} == {v: bool(want[v]) for v in got}
    assert got[0] == 1 and got[2] == 1 and sum(got.values()) <= 4  # value 2: 8 of 168 reports
    # a store row without p_zero (an older row) is flagged from the normal p-values
    old = [{k: v for k, v in r.items() if k != "extra_json"} for r in rows]
    normal = discoveries(np.asarray(row.unbiased), np.asarray(row.unbiased_std), 64)
    cols = shape.top_k(old, 64, domain_size=64)
    got_old = dict(zip(cols["item"], cols["above_zero"], strict=True))
    assert {v: bool(a) for v, a in got_old.items()} == {v: bool(normal[v]) for v in got_old}
    assert got_old[2] == 0  # the Eq. 4 std at the estimate leaves it unflagged: the two rules differ here


def test_show_flags_a_row_from_its_p_zero():
    from pipelines.show_kinds import frequency_table

    agg = _aggregator("grr", 4.0, 64)
    o = agg.oracle
    reports = o.encode(np.repeat(np.arange(4), [120, 40, 8, 0]), rng=np.random.default_rng(11))
    (row,) = agg.finalize({0: o.add(o.create_accumulator(), reports)}, WindowInfo())
    rec = row._asdict()
    table = frequency_table(rec, 5)
    flags = {e["value"]: e["above_zero"] for e in table["rows"]}
    assert flags[2] is True and table["flag_p_values"] == "exact binomial"  # 8 of 168 reports
    rec.pop("p_zero")
    old = frequency_table(rec, 5)
    assert {e["value"]: e["above_zero"] for e in old["rows"]}[2] is False
    assert old["flag_p_values"] == "normal"
