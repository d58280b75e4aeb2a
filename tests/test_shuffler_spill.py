"""The shuffler's spill files and memory-bounded permutation (``transforms.shuffle``), without a pipeline.

* units of consecutive labels never exceed the bound (unless one label alone does), and cover every report;
* the external permutation (many units) is uniform: chi-square over the 6 orders of 3 reports, each report
  in its own unit most of the time;
* a bucket permuted in many units and written with the column encoder reads back (fastavro) as the same
  multiset of records, groups with different payload fields included, in an order unrelated to the input's.
"""

from __future__ import annotations

import io
from collections import Counter

import fastavro
import numpy as np
import pytest

from ldp.anonymity import AnonymitySettings
from ldp.reports import Reports
from transforms.aggregate import GroupReports
from transforms.shuffle import (
    META_N,
    SPILL_LABELS,
    EmitBatchFn,
    SpillFn,
    plan_units,
    unit_rows,
    write_batch,
)

T0 = 1_767_225_600_000
SETTINGS = AnonymitySettings(time_precision_s=600, min_reports=2)


def _chunks(tmp_path, parts: list[tuple[int, Reports, str]]):
    fn = SpillFn(str(tmp_path / "spill"))
    return [ref for g, r, src in parts for _, ref in fn.process((T0, GroupReports(g, r, source=src)))]


def test_units_are_bounded_and_cover_every_report(tmp_path):
    rng = np.random.default_rng(1)
    refs = _chunks(
        tmp_path, [(0, Reports(values=rng.integers(0, 9, n)), f"f{n}") for n in (5000, 3000, 2000)]
    )
    units = plan_units(refs, 1000)
    assert units[0][0] == 0 and units[-1][1] == SPILL_LABELS
    assert all(a[1] == b[0] for a, b in zip(units, units[1:]))  # consecutive, no gap
    sizes = []
    for k0, k1 in units:
        size = sum(int(np.sum((r.labels() >= k0) & (r.labels() < k1))) for r in refs)
        single = k1 - k0 == 1
        assert size <= 1000 or single
        sizes.append(size)
    assert sum(sizes) == 10_000 and len(units) >= 10
    assert plan_units(refs, 10_000) == [(0, SPILL_LABELS)]  # within the bound: one unit, one permutation
    assert unit_rows(refs, 8 * 34) == 8  # 8 bytes of values + 2 of label, 24 of permutation per report


@pytest.mark.statistical
@pytest.mark.integration  # 6,000 spill files: about 15 s
def test_the_external_permutation_is_uniform_on_three_reports(tmp_path):
    """6,000 permutations of three reports, each in its own unit but for label collisions (memory
    bound of one report): every order is expected 1,000 times. Chi-square with 5 degrees of freedom;
    P(chi2_5 > 36) < 1e-6, so a uniform permutation fails this test in fewer than 1e-6 of runs."""
    fn = EmitBatchFn("t", 2, SETTINGS, str(tmp_path), memory_bytes=1)
    counts: Counter = Counter()
    for _ in range(6000):
        refs = _chunks(tmp_path, [(0, Reports(values=np.arange(3)), "a")])
        order = np.concatenate([r.values for _, r in fn.permuted(T0, refs)])
        counts[tuple(order.tolist())] += 1
        refs[0].delete()
    assert len(counts) == 6
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 36.0, counts


def test_a_bucket_in_many_units_reads_back_as_the_same_records(tmp_path):
    rng = np.random.default_rng(2)
    n0, n1 = 30_000, 20_000
    olh = Reports(values=rng.integers(0, 64, n0), seeds=rng.integers(0, 2**63, n0).astype(np.uint64))
    grr = Reports(values=rng.integers(0, 64, n1))
    half = n0 // 2
    refs = _chunks(
        tmp_path, [(0, olh.take(slice(0, half)), "a"), (1, grr, "b"), (0, olh.take(slice(half, None)), "c")]
    )
    fn = EmitBatchFn("t", 2, SETTINGS, str(tmp_path), memory_bytes=200_000)  # about 4,500 reports a unit
    assert len(plan_units(refs, unit_rows(refs, fn.memory_bytes))) >= 10
    buf = io.BytesIO()
    meta = {META_N: str(n0 + n1)}
    written = write_batch(buf, fn.permuted(T0, refs), task_id="t", schema_version=2, start_ms=T0,
                          end_ms=T0 + 600_000, n=n0 + n1, meta=meta)  # fmt: skip
    buf.seek(0)
    reader = fastavro.reader(buf)
    recs = list(reader)
    assert written.n == len(recs) == n0 + n1 and reader.metadata[META_N] == str(n0 + n1)
    got = Counter((r["group"], r["value"], r["seed"]) for r in recs)
    want = Counter(zip([0] * n0, olh.values.tolist(), olh.seeds.view(np.int64).tolist()))
    want.update(zip([1] * n1, grr.values.tolist(), [None] * n1))
    assert got == want
    assert {r["event_time"].timestamp() * 1000 for r in recs} == {T0}
    # the order is unrelated to the input's: Spearman's rho of the OLH reports' positions, sd 1/sqrt(n-1)
    # (about 0.0058 at n = 30,000); |rho| < 5 sd fails a uniform permutation with probability ~6e-7
    rank = {s: i for i, s in enumerate(olh.seeds.view(np.int64).tolist())}
    pos = np.array([rank[r["seed"]] for r in recs if r["group"] == 0], dtype=np.float64)
    rho = np.corrcoef(pos, np.arange(len(pos)))[0, 1]
    assert abs(rho) < 5 / np.sqrt(len(pos) - 1), rho
    with pytest.raises(ValueError, match="announced"):
        write_batch(io.BytesIO(), iter([(1, grr)]), task_id="t", schema_version=2, start_ms=T0,
                    end_ms=T0 + 600_000, n=n1 + 1, meta=meta)  # fmt: skip
