"""ldp.heavy_hitters: string layout, the prefix hash, the eps-LDP wire, PEM's estimates and hostile input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp.heavy_hitters import PEM, HHReports, StringBatch, encode_strings, total_bits
from ldp.heavy_hitters.mersenne import (
    PRIME,
    extension_hash,
    level_keys,
    mulmod,
    own_hash,
    parent_hash,
    reduce,
)
from ldp.heavy_hitters.search import level_estimates, level_support
from ldp.heavy_hitters.sketch import (
    SketchAccumulator,
    SketchSpec,
    bucket_counts,
    full_hash,
    full_matrices,
    full_support,
    fwht,
    gf2_hash,
    score,
    walsh_add,
)
from ldp.heavy_hitters.strings import bit_field, half_words, mask_prefix

pytestmark: list = []  # markers per test: the statistical ones carry `statistical`


# ---------------------------------------------------------------- strings


def test_terminator_convention_separates_trailing_zero_bytes():
    batch = encode_strings(["ab", "ab\0", "", "ab\0\0"], 4)
    words = batch.words()
    assert len({tuple(w) for w in words.tolist()}) == 4
    back, valid = StringBatch.from_words(words, 4)
    assert back.values() == [b"ab", b"ab\0", b"", b"ab\0\0"] and valid.all()
    # every prefix shorter than the bytes is shared: only the length trailer differs
    assert (mask_prefix(words[:1], 32) == mask_prefix(words[1:2], 32)).all()


@pytest.mark.parametrize("b", [1, 6, 7, 8, 16, 33])
def test_exactly_b_bytes_and_non_utf8_round_trip(b):
    rng = np.random.default_rng(b)
    raw = [bytes(rng.integers(0, 256, size=k, dtype=np.uint8)) for k in (0, 1, b)]
    raw += [b"\xff" * b, b"\x80\x00"[:b]]
    batch = encode_strings(raw, b)
    words = batch.words()
    assert words.shape == (len(raw), (total_bits(b) + 63) // 64)
    back, valid = StringBatch.from_words(words, b)
    assert back.values() == raw and valid.all()


def test_too_long_values_refused_with_a_reason_or_truncated():
    with pytest.raises(ValueError, match="value 1 has 7 bytes, more than max_length 6"):
        encode_strings(["ok", "toolong"], 6)
    with pytest.raises(ValueError, match="not str or bytes"):
        encode_strings([3], 6)
    with pytest.raises(ValueError, match="max_length"):
        encode_strings(["a"], 0)
    cut = encode_strings(["héllo wörld", b"\xff" * 9], 6, truncate=True).values()
    assert cut == ["héllo".encode()[:6], b"\xff" * 6]
    assert encode_strings(["aé"], 2, truncate=True).values() == [b"a"]  # never half a character


def test_bit_fields_and_half_words_read_the_layout():
    words = encode_strings([b"\x12\x34\x56\x78\x9a\xbc\xde\xf0\x11"], 9).words()
    assert int(bit_field(words, 0, 16)[0]) == 0x1234
    assert int(bit_field(words, 52, 8)[0]) == 0xEF
    assert int(bit_field(words, 60, 8)[0]) == 0x01  # crosses the first word's end: 0xf0 then 0x11
    assert half_words(words, 40).tolist() == [[0x12345678, 0x9A000000]]


# ---------------------------------------------------------------- the hash


def test_mulmod_matches_integer_arithmetic():
    rng = np.random.default_rng(3)
    a = rng.integers(0, PRIME, 5000, dtype=np.uint64)
    x = rng.integers(0, 2**32, 5000, dtype=np.uint64)
    a[:2], x[:2] = PRIME - 1, 2**32 - 1
    got = reduce(mulmod(a, x))
    assert got.tolist() == [(int(u) * int(v)) % PRIME for u, v in zip(a, x)]


def test_client_hash_equals_the_aggregator_split():
    rng = np.random.default_rng(4)
    seeds = rng.integers(0, 2**63, 300, dtype=np.uint64)
    words = encode_strings([bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(300)], 16).words()
    for parent_bits, ext_bits in ((0, 5), (40, 9), (100, 32)):
        keys = level_keys(seeds, (parent_bits + 31) // 32)
        parts = half_words(words, parent_bits)
        ext = bit_field(words, parent_bits, ext_bits)
        mine = own_hash(keys, parts, ext, 56)
        hp = parent_hash(keys, parts, 56)
        he = extension_hash(keys, ext, 56)
        assert (mine == (np.diagonal(hp) + np.diagonal(he)) % 56).all()


@pytest.mark.statistical
def test_hash_collisions_are_one_in_g():
    # Two prefixes differing in one bit of the parent part (or of the extension): over 200,000 seeds the
    # collision count is Binomial(200000, 1/g); 5 standard deviations is the tolerance.
    seeds = np.random.default_rng(5).integers(0, 2**63, 200_000, dtype=np.uint64)
    g, n = 56, seeds.size
    keys = level_keys(seeds, 1)
    for parts, ext in (([[7], [7 ^ 1 << 20]], [3, 3]), ([[7], [7]], [3, 2])):
        h0 = own_hash(keys, np.full((n, 1), parts[0][0], np.uint64), np.full(n, ext[0], np.uint64), g)
        h1 = own_hash(keys, np.full((n, 1), parts[1][0], np.uint64), np.full(n, ext[1], np.uint64), g)
        hits = int(np.count_nonzero(h0 == h1))
        assert abs(hits - n / g) <= 5 * math.sqrt(n / g * (1 - 1 / g))


# ---------------------------------------------------------------- eps-LDP on the wire


@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0])
def test_exact_output_distribution_ratio_is_at_most_e_eps(eps):
    pem = PEM(eps, 4, first_bits=6, step_bits=8)
    rng = np.random.default_rng(6)
    for lv in pem.levels:
        for seed in rng.integers(0, 2**63, 40, dtype=np.uint64).tolist():
            a = pem.output_distribution("ab", lv.index, seed)
            b = pem.output_distribution(b"\xff\x00\x01", lv.index, seed)
            assert a.sum() == pytest.approx(1.0) and b.sum() == pytest.approx(1.0)
            assert np.max(a / b) <= math.exp(eps) * (1 + 1e-12)
            assert np.max(b / a) <= math.exp(eps) * (1 + 1e-12)


@pytest.mark.statistical
def test_encoder_follows_the_exact_distribution():
    # 60,000 reports of one value: each report's y equals its bucket with probability p (binomial,
    # tolerance 5 standard deviations), levels follow the weights (each count within 5 sd of n w_j), and
    # a wrong bucket is uniform over the other g - 1 (its offset from the bucket: chi-square over g - 1
    # cells below the 1e-6 quantile, about g - 1 + 5 sqrt(2 (g - 1)) + 15).
    eps, n = 2.0, 60_000
    pem = PEM(eps, 6, first_bits=12, step_bits=13)
    reports = pem.encode(["secret"] * n, rng=7)
    words = encode_strings(["secret"], 6).words()
    for lv in pem.levels:
        m = reports.level == lv.index
        k = int(m.sum())
        share = n * pem.weights[lv.index]
        assert abs(k - share) <= 5 * math.sqrt(share)
        bucket = pem._buckets(lv, np.repeat(words, k, axis=0), reports.seed[m])
        same = reports.y[m] == bucket
        assert abs(same.mean() - lv.p) <= 5 * math.sqrt(lv.p * (1 - lv.p) / k)
        off = ((reports.y[m][~same] + np.uint64(lv.g) - bucket[~same]) % np.uint64(lv.g)).astype(np.int64)
        cells = np.bincount(off, minlength=lv.g)[1:]
        expected = cells.sum() / (lv.g - 1)
        chi2 = float(((cells - expected) ** 2 / expected).sum())
        assert chi2 <= lv.g - 1 + 5 * math.sqrt(2 * (lv.g - 1)) + 15


def test_grr_first_level_when_its_domain_is_small():
    pem = PEM(8.0, 2, first_bits=8, step_bits=4, search="olh")
    assert pem.levels[0].oracle == "grr" and pem.levels[0].g == 256
    assert all(lv.oracle == "olh" for lv in pem.levels[1:])
    dist_a = pem.output_distribution("a", 0, 1)
    dist_b = pem.output_distribution("b", 0, 1)
    assert np.max(dist_a / dist_b) == pytest.approx(math.exp(8.0))


# ---------------------------------------------------------------- estimates


@pytest.mark.statistical
@pytest.mark.parametrize("search", ["olh", "sketch"])
def test_fixed_candidate_is_unbiased_with_the_closed_form_variance(search):
    # 300 runs over one fixed population of 20,000 users (12% hold "target"); each run re-draws levels,
    # seeds and noise and estimates "target" at the verification level (Mersenne OLH or GF(2) OLH). The
    # mean must be within 4 standard errors (sd / sqrt(300)) of 0.12, and the sample variance within the
    # chi-square(299) range [0.72, 1.32] times the closed form's mean (both bounds beyond the 1e-4 quantiles).
    n, runs, f = 20_000, 300, 0.12
    values = ["target"] * int(f * n) + [f"u{i}" for i in range(n - int(f * n))]
    pem = PEM(3.0, 6, first_bits=10, step_bits=20, search=search)
    lv = pem.levels[-1]
    cand = encode_strings(["target"], 6).words()
    rng = np.random.default_rng(8)
    est, var = [], []
    for _ in range(runs):
        rep = pem.encode(values, rng=rng)
        m = rep.level == lv.index
        s = level_support(lv, rep.seed[m], rep.y[m], None, cand)
        e, sd = level_estimates(s, int(m.sum()), n, lv)
        est.append(e[0])
        var.append(sd[0] ** 2)
    est = np.asarray(est)
    assert abs(est.mean() - f) <= 4 * math.sqrt(np.mean(var) / runs)
    assert 0.72 <= est.var(ddof=1) / np.mean(var) <= 1.32


def _population(rng, n=60_000):
    heavy = {b"alpha": 0.2, b"": 0.1, b"\xff\xfe\xfd\xfc\xfb\xfa": 0.08, "zürich".encode()[:6]: 0.06}
    values = [v for v, f in heavy.items() for _ in range(int(f * n))]
    values += [bytes(rng.integers(0, 256, 6, dtype=np.uint8)) for _ in range(n - len(values))]
    return values, heavy


def test_finds_heavy_values_including_empty_and_full_length_ones():
    rng = np.random.default_rng(9)
    values, heavy = _population(rng)
    pem = PEM(4.0, 6, top_k=10, candidates=16, first_bits=10, step_bits=6)
    out = pem.estimate(pem.add(pem.create_accumulator(), pem.encode(values, rng=10)))
    found = {h.value: h for h in out.hitters}
    assert set(heavy) <= set(found)
    assert [h.estimate for h in out.hitters] == sorted((h.estimate for h in out.hitters), reverse=True)
    for v, f in heavy.items():
        assert found[v].ci_low <= f <= found[v].ci_high or abs(found[v].estimate - f) < 4 * found[v].std
    assert out.levels[-1].verify and sum(s.reports for s in out.levels) == len(values)


def test_merge_equals_one_accumulator():
    rng = np.random.default_rng(11)
    values, _ = _population(rng, 20_000)
    pem = PEM(4.0, 6, top_k=5, candidates=8, first_bits=10, step_bits=6)
    rep = pem.encode(values, rng=12)
    parts = [HHReports(rep.level[s], rep.seed[s], rep.y[s]) for s in (slice(0, 7000), slice(7000, None))]
    one = pem.estimate(pem.add(pem.create_accumulator(), rep))
    accs = [pem.add(pem.create_accumulator(), p) for p in parts]
    assert pem.estimate(pem.merge(accs)) == one


def test_all_users_one_value():
    pem = PEM(2.0, 6, top_k=3, candidates=8, first_bits=10, step_bits=6)
    out = pem.estimate(pem.add(pem.create_accumulator(), pem.encode(["same"] * 30_000, rng=13)))
    assert out.hitters[0].value == b"same"
    assert out.hitters[0].ci_low <= 1.0 <= out.hitters[0].ci_high or out.hitters[0].estimate > 0.9


@pytest.mark.parametrize("n", [0, 1, 3])
def test_fewer_users_than_levels(n):
    pem = PEM(4.0, 6)
    assert len(pem.levels) > n
    out = pem.estimate(pem.add(pem.create_accumulator(), pem.encode(["x"] * n, rng=14)))
    assert out.n == n and out.hitters == () and out.levels[-1].reports == 0


def test_malformed_reports_are_refused():
    pem = PEM(4.0, 6, first_bits=12, step_bits=12)
    g = pem.levels[1].g
    level = np.array([0, 1, 99, 1], np.uint8)
    bad = HHReports(level, np.zeros(4, np.uint64), np.array([0, g, 0, g - 1], np.uint64))
    assert pem.validate(bad).tolist() == [True, False, False, True]
    acc = pem.add(pem.create_accumulator(), bad)
    assert acc.n == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"top_k": 0}, "top_k"),
        ({"candidates": 0}, "candidates"),
        ({"first_bits": 40}, "first_bits"),
        ({"step_bits": 33}, "step_bits"),
        ({"alpha": 1.5}, "alpha"),
        ({"level_weights": [1, 2]}, "level_weights"),
        ({"expected_n": 0, "search": "olh"}, "expected_n"),
        ({"search": "trie"}, "search"),
        ({"rule": "holm"}, "rule"),
        ({"first_bits": 23}, "first_bits"),
    ],
)
def test_bad_parameters_are_one_line_errors(kwargs, message):
    args = {"epsilon": 4.0, "max_length": 6, **kwargs}
    with pytest.raises(ValueError, match=message):
        PEM(args.pop("epsilon"), args.pop("max_length"), **args)


def test_olh_auto_layout_covers_every_bit_and_scales_with_n():
    small = PEM(4.0, 6, expected_n=10_000, search="olh")
    large = PEM(4.0, 6, expected_n=10_000_000, search="olh")
    for pem in (small, large):
        assert pem.levels[-2].bits == total_bits(6) and pem.levels[-1].verify
        assert all(b.bits > a.bits for a, b in zip(pem.levels[:-2], pem.levels[1:-1]))
    assert small.candidates < large.candidates


# ---------------------------------------------------------------- the sketch levels


def test_walsh_sketch_support_equals_brute_force():
    spec = SketchSpec(bits=30, d=6, rows=3, t=3, epsilon=2.0, key_seed=5)
    rng = np.random.default_rng(20)
    seeds = rng.integers(0, 2**63, 700, dtype=np.uint64)
    y = rng.integers(0, spec.g, 700).astype(np.uint64)
    acc = SketchAccumulator(spec)
    walsh_add(acc, seeds[:300], y[:300])
    other = SketchAccumulator(spec)
    walsh_add(other, seeds[300:], y[300:])
    acc.merge(other)  # a sketch merges by addition
    s, c = spec.matrices(seeds)
    row = spec.row_of(seeds)
    brute = np.zeros((3, spec.m))
    for b in range(spec.m):
        h = gf2_hash(s, c, np.full(seeds.size, b, np.uint64))
        brute[:, b] = np.bincount(row[h == y], minlength=3)
    assert np.array_equal(fwht(acc.walsh) // spec.g, brute.astype(np.int64))
    assert acc.counts.tolist() == np.bincount(row, minlength=3).tolist()


def test_verification_hash_support_equals_own_hash():
    rng = np.random.default_rng(21)
    seeds = rng.integers(0, 2**63, 400, dtype=np.uint64)
    words = encode_strings([bytes(rng.integers(0, 256, 9, dtype=np.uint8)) for _ in range(400)], 9).words()
    s, c = full_matrices(seeds, 5, total_bits(9))
    mine = full_hash(s, c, words)
    cands = words[:7]
    want = [int(np.count_nonzero(full_hash(s, c, np.repeat(w[None], 400, axis=0)) == mine)) for w in cands]
    assert full_support(s, c, mine, cands).tolist() == want


@pytest.mark.statistical
@pytest.mark.parametrize("bits, d, rows", [(12, 12, 1), (30, 8, 3)])
def test_sketch_estimate_is_unbiased_at_the_closed_form_variance(bits, d, rows):
    # 300 runs over one population of 20,000 users (10% hold "target", the rest distinct), re-drawing
    # seeds, noise and (hashed level) the row keys. Closed form: c^2 [q(1-q) + f(p(1-p) - q(1-q))] /
    # (n (p-q)^2) + c^2 V / k (sketch module docstring), V from the population. The mean must be within
    # 4 standard errors of 0.1, the sample variance within [0.72, 1.32] times the closed form.
    n, runs, f = 20_000, 300, 0.1
    values = ["target"] * int(f * n) + [f"u{i}" for i in range(n - int(f * n))]
    words = encode_strings(values, 6).words()
    target = words[:1]
    rng = np.random.default_rng(22)
    est = []
    for run in range(runs):
        spec = SketchSpec(bits=bits, d=d, rows=rows, t=3, epsilon=2.0, key_seed=run)
        seeds = rng.integers(0, 2**63, n, dtype=np.uint64)
        s, c = spec.matrices(seeds)
        h = gf2_hash(s, c, spec.buckets(words, spec.row_of(seeds)))
        keep = rng.random(n) < spec.p
        y = np.where(keep, h, (h + rng.integers(1, spec.g, n).astype(np.uint64)) % np.uint64(spec.g))
        acc = SketchAccumulator(spec)
        walsh_add(acc, seeds, y)
        est.append(score(spec, bucket_counts(acc), n, target)[0])
    p, q, m = spec.p, spec.q, spec.m
    cc = 1.0 if spec.direct else m / (m - 1)
    var = cc**2 * (q * (1 - q) + f * (p * (1 - p) - q * (1 - q))) / (n * (p - q) ** 2)
    if not spec.direct:
        var += cc**2 * (n - int(f * n)) * (1 / n) ** 2 * (1 - 1 / m) / m / rows
    est = np.asarray(est)
    assert abs(est.mean() - f) <= 4 * math.sqrt(var / runs)
    assert 0.72 <= est.var(ddof=1) / var <= 1.32


def test_sketch_layout_and_verification_oracle():
    pem = PEM(4.0, 6)
    assert [lv.bits for lv in pem.levels] == [22, 35, 51, 51]
    assert pem.levels[0].sketch.direct and not pem.levels[1].sketch.direct
    assert pem.levels[-1].oracle == "gf2" and pem.levels[-1].verify and pem.levels[-1].g == 64
    with pytest.raises(ValueError, match="verify=True"):
        PEM(4.0, 6, verify=False)
