"""ldp.heavy_hitters.sketch: the fast fold and scoring give exactly what the reference code gives.

The references below are the straightforward forms: term by term in Python (tiny cases), and the
earlier vectorized fold (a ``reports x g`` table of indices and signs summed by a weighted histogram),
kept here, as are the earlier scoring (each candidate formed as words and hashed whole) and verification
count (popcounts per report and candidate); the library's versions must give bit-identical Walsh arrays,
scores, counts and heavy hitters.
"""

from __future__ import annotations

import numpy as np
import pytest

import ldp.heavy_hitters.pem as pem_module
import ldp.heavy_hitters.search as search_module
import ldp.heavy_hitters.sketch_search as sketch_search_module
from ldp.heavy_hitters import PEM
from ldp.heavy_hitters import sketch as sketch_module
from ldp.heavy_hitters.sketch import (
    SketchAccumulator,
    SketchSpec,
    full_hash,
    full_matrices,
    full_support,
    walsh_add,
    walsh_dtype,
)

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier


def reference_walsh_add(acc: SketchAccumulator, seeds: np.ndarray, y: np.ndarray) -> None:
    """``W[row, S^T z] += (-1)**(z . (c xor y))`` for every report and ``z``, one report at a time."""
    spec = acc.spec
    s, c = spec.matrices(seeds)
    rows = spec.row_of(seeds)
    v = c ^ y
    for i in range(seeds.size):
        for z in range(spec.g):
            u, sign = 0, 0
            for bit in range(spec.t):
                if z >> bit & 1:
                    u ^= int(s[i, bit])
                    sign ^= int(v[i]) >> bit & 1
            acc.walsh[rows[i], u] += 1 - 2 * sign
    acc.counts += np.bincount(rows, minlength=spec.rows)


def previous_walsh_add(acc: SketchAccumulator, seeds: np.ndarray, y: np.ndarray) -> None:
    """The earlier fold: per block of reports, the ``(reports, g)`` indices and signs built column by
    column (Gray order), then one weighted ``bincount`` over ``rows x m``."""
    spec = acc.spec
    g, m = spec.g, spec.m
    for s0 in range(0, seeds.size, 1 << 15):
        sd, yy = seeds[s0 : s0 + (1 << 15)], y[s0 : s0 + (1 << 15)]
        s, c = spec.matrices(sd)
        row = spec.row_of(sd)
        v = c ^ yy
        freq = np.zeros((sd.size, g), dtype=np.uint64)
        sign = np.zeros((sd.size, g), dtype=np.uint8)
        for z in range(1, g):
            low = (z & -z).bit_length() - 1
            prev = z & (z - 1)
            freq[:, z] = freq[:, prev] ^ s[:, low]
            sign[:, z] = sign[:, prev] ^ ((v >> np.uint64(low)) & np.uint64(1)).astype(np.uint8)
        index = (row[:, None] * m + freq.astype(np.int64)).ravel()
        weight = 1.0 - 2.0 * sign.ravel()
        total = np.bincount(index, weights=weight, minlength=spec.rows * m)
        acc.walsh += np.rint(total).astype(np.int64).reshape(spec.rows, m)
        acc.counts += np.bincount(row, minlength=spec.rows)


def previous_full_support(s: np.ndarray, c: np.ndarray, y: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """The earlier verification count: ``H(x)`` of every (report, candidate) pair by popcounts, compared
    with ``y``."""
    total = np.zeros(cands.shape[0], dtype=np.int64)
    t = s.shape[1]
    block = max(1, (1 << 22) // max(1, cands.shape[0] * t))
    for s0 in range(0, y.size, block):
        sb = s[s0 : s0 + block]
        h = np.zeros((sb.shape[0], cands.shape[0]), dtype=np.uint64)
        for i in range(t):
            bits = np.bitwise_count(sb[:, i, None, :] & cands[None, :, :]).sum(axis=2, dtype=np.uint8)
            h |= (bits & np.uint8(1)).astype(np.uint64) << np.uint64(i)
        total += np.count_nonzero(h == (c ^ y)[s0 : s0 + block, None], axis=0)
    return total


def previous_score(spec: SketchSpec, table: np.ndarray, n_level: int, words: np.ndarray) -> np.ndarray:
    """The earlier scoring: each row's bucket of each whole candidate through the client's hash."""
    n = max(1, int(n_level))
    if spec.direct:
        return table[0, spec.buckets(words, np.zeros(words.shape[0], np.int64)).astype(np.int64)] / n
    total = np.zeros(words.shape[0], dtype=np.float64)
    for r in range(spec.rows):
        total += table[r, spec.buckets(words, np.full(words.shape[0], r)).astype(np.int64)]
    return spec.m / (spec.m - 1) * (total / n - 1.0 / spec.m)


def previous_shortlist(lv, table, nj, parents, keep, max_length):
    """The earlier shortlist: every candidate of a chunk of parents formed as words, then scored."""
    per = max(1, sketch_search_module.CHUNK >> max(0, min(lv.bits, 8 * max_length) - lv.parent_bits))
    best_w, best_f = None, np.zeros(0)
    for s in range(0, parents.shape[0], per):
        cands = sketch_search_module._expand(lv, parents[s : s + per], max_length)
        f = previous_score(lv.sketch, table, nj, cands)
        top = sketch_search_module._top(f, keep)
        words = cands[top] if best_w is None else np.concatenate([best_w, cands[top]])
        f = f[top] if best_w is None else np.concatenate([best_f, f[top]])
        top = sketch_search_module._top(f, keep)
        best_w, best_f = words[top], f[top]
    return best_w, best_f


def _reports(spec: SketchSpec, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**64, n, dtype=np.uint64), rng.integers(0, spec.g, n).astype(np.uint64)


@pytest.mark.parametrize("bits, d, rows, t", [(9, 9, 1, 1), (12, 12, 1, 4), (30, 8, 3, 3), (40, 10, 4, 6)])
def test_fold_equals_the_reference_term_by_term(bits, d, rows, t):
    spec = SketchSpec(bits=bits, d=d, rows=rows, t=t, epsilon=4.0, key_seed=3)
    seeds, y = _reports(spec, 150, bits + t)
    want = SketchAccumulator(spec)
    reference_walsh_add(want, seeds, y)
    got = SketchAccumulator(spec)
    walsh_add(got, seeds, y)
    assert got == want and got.walsh.any()


@pytest.mark.parametrize(
    "bits, d, rows, t", [(22, 22, 1, 10), (51, 20, 4, 10), (35, 20, 4, 6), (35, 20, 4, 3)]
)
def test_fold_equals_the_previous_fold_at_the_default_shapes(bits, d, rows, t):
    spec = SketchSpec(bits=bits, d=d, rows=rows, t=t, epsilon=8.0, key_seed=2)
    seeds, y = _reports(spec, 3000, t)
    want = SketchAccumulator(spec)
    previous_walsh_add(want, seeds, y)
    got = SketchAccumulator(spec)
    walsh_add(got, seeds, y)
    assert got == want


def test_fold_is_the_same_in_blocks_in_small_types_and_in_any_split(monkeypatch):
    spec = SketchSpec(bits=30, d=12, rows=4, t=10, epsilon=8.0, key_seed=1)
    seeds, y = _reports(spec, 700, 7)
    whole = SketchAccumulator(spec)
    previous_walsh_add(whole, seeds, y)
    monkeypatch.setattr(sketch_module, "FOLD_TERMS", 3 * spec.g + 5)  # blocks of 3 reports
    parts = SketchAccumulator(spec, walsh_dtype(seeds.size, spec.g))
    assert parts.walsh.dtype == np.int32
    walsh_add(parts, seeds[:1], y[:1])
    walsh_add(parts, seeds[1:1], y[1:1])  # no reports: nothing changes
    walsh_add(parts, seeds[1:400], y[1:400])
    rest = SketchAccumulator(spec, np.int32)
    walsh_add(rest, seeds[400:], y[400:])
    parts.merge(rest)
    assert np.array_equal(parts.walsh, whole.walsh) and np.array_equal(parts.counts, whole.counts)
    assert int(parts.counts.sum()) == seeds.size


@pytest.mark.parametrize("chunk", [1 << 21, 1 << 10])
def test_seeded_search_publishes_the_same_heavy_hitters_as_the_previous_code(chunk, monkeypatch):
    # A small layout (16, 24 and 35 bits, 64 kept) at eps 8 over a Zipf population of 4-byte strings;
    # chunk 2**10 scores 4 parents at a time, so the shortlist merges across chunks.
    monkeypatch.setattr(sketch_search_module, "CHUNK", chunk)
    rng = np.random.default_rng(11)
    pool = rng.integers(0, 256, size=(300, 4), dtype=np.uint8)
    weights = np.arange(1, 301, dtype=np.float64) ** -1.2
    values = [bytes(pool[i]) for i in rng.choice(300, size=4000, p=weights / weights.sum())]
    pem = PEM(8.0, 4, top_k=16, candidates=64, first_bits=16, step_bits=8)
    reports = pem.encode(values, rng=np.random.default_rng(12))
    fast_acc = pem.add(pem.create_accumulator(), reports)
    monkeypatch.setattr(pem_module, "walsh_add", previous_walsh_add)
    monkeypatch.setattr(sketch_search_module, "_shortlist", previous_shortlist)
    monkeypatch.setattr(search_module, "full_support", previous_full_support)
    slow_acc = pem.add(pem.create_accumulator(), reports)
    assert all(slow_acc.sketches[j] == sketch for j, sketch in fast_acc.sketches.items())
    fast, slow = pem.estimate(fast_acc), pem.estimate(slow_acc)
    assert len(fast.hitters) >= 8 and fast.hitters == slow.hitters and fast.levels == slow.levels


@pytest.mark.parametrize("bits, d, rows", [(22, 22, 1), (35, 20, 4), (51, 20, 4), (133, 20, 4)])
def test_row_buckets_are_each_rows_bucket_of_the_client(bits, d, rows):
    spec = SketchSpec(bits=bits, d=d, rows=rows, t=6, epsilon=4.0, key_seed=9)
    width = (bits + 8 + 63) // 64
    words = np.random.default_rng(bits).integers(0, 2**64, size=(500, width), dtype=np.uint64)
    got = spec.row_buckets(words)
    assert got.shape == (rows, 500) and got.dtype == np.int64
    for r in range(rows):
        assert np.array_equal(got[r], spec.buckets(words, np.full(500, r)).astype(np.int64))


@pytest.mark.parametrize(
    "bits, t, count", [(20, 1, 7), (51, 10, 130), (64, 6, 64), (133, 10, 300), (51, 3, 0)]
)
def test_verification_counts_equal_the_previous_pairwise_count(bits, t, count, monkeypatch):
    rng = np.random.default_rng(bits * t + count)
    width = (bits + 63) // 64
    cands = rng.integers(0, 2**64, size=(count, width), dtype=np.uint64)
    if bits % 64:
        cands[:, -1] &= np.uint64(((1 << (bits % 64)) - 1) << (64 - bits % 64))
    seeds = rng.integers(0, 2**64, 2000, dtype=np.uint64)
    s, c = full_matrices(seeds, t, bits)
    y = rng.integers(0, 1 << t, 2000).astype(np.uint64)
    if count:  # half the reports carry a candidate's own hash, so the counts are far from zero
        y[:1000] = full_hash(s[:1000], c[:1000], cands[rng.integers(0, count, 1000)])
    monkeypatch.setattr(sketch_module, "VERIFY_REPORTS", 333)
    got = full_support(s, c, y, cands)
    assert got.dtype == np.int64 and np.array_equal(got, previous_full_support(s, c, y, cands))
    assert count == 0 or got.sum() >= 1000
