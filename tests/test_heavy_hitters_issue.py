"""ldp.heavy_hitters at the issue's point: Zipf(1.1) over 100,000 random 6-byte strings, n = 1e6, eps = 4."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ldp.heavy_hitters import PEM, StringBatch

pytestmark = [pytest.mark.integration, pytest.mark.statistical]


def _population(n: int, rng: np.random.Generator) -> tuple[StringBatch, dict[bytes, float]]:
    raw = np.unique(rng.integers(0, 256, size=(100_000, 6), dtype=np.uint8), axis=0)
    weights = np.arange(1, raw.shape[0] + 1, dtype=np.float64) ** -1.1
    counts = rng.multinomial(n, weights / weights.sum())
    rows = rng.permutation(np.repeat(np.arange(raw.shape[0]), counts))
    truth = {bytes(raw[i]): counts[i] / n for i in np.flatnonzero(counts)}
    return StringBatch(raw[rows], np.full(rows.size, 6, dtype=np.int64), 6), truth


def test_recall_precision_coverage_and_time_at_the_issue_point():
    # One seed. Measured over 10 seeds (docs/heavy_hitters.md): recall 0.84 on average (the issue asks
    # 0.9; the docs say why the layout stops short), precision ~1, coverage ~0.95. A seed's recall has a
    # standard deviation of about 0.05 (46 strings, each found with probability 0.5 to 1), so 0.7 is the
    # bar here (about 3 sd below the mean); precision and coverage 0.85 (a seed reports ~40 strings).
    n = 1_000_000
    batch, truth = _population(n, np.random.default_rng(2024))
    pem = PEM(4.0, 6, top_k=64, expected_n=n)
    reports = pem.encode(batch, rng=np.random.default_rng(7))
    t0 = time.perf_counter()
    result = pem.estimate(pem.add(pem.create_accumulator(), reports))
    seconds = time.perf_counter() - t0
    heavy = {v for v, f in truth.items() if f >= 0.002}
    reported = [h.value for h in result.hitters]
    recall = len(heavy & set(reported)) / len(heavy)
    precision = sum(truth.get(v, 0.0) >= 0.001 for v in reported) / len(reported)
    coverage = np.mean([h.ci_low <= truth.get(h.value, 0.0) <= h.ci_high for h in result.hitters])
    assert recall >= 0.7, recall
    assert precision >= 0.85, precision
    assert coverage >= 0.85, coverage
    assert seconds < 60, seconds
