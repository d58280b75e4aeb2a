"""Tests of ldp.hashing: the named OLH hash families, their independence, and public seeds.

Tolerances: a count of N Bernoulli(P) events has SD sqrt(N P (1 - P)); we assert |count - N P| < 5 SD.
Chi-square uniformity tests fail below p = 1e-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldp.hashing import (
    DEFAULT_HASH_FAMILY,
    HASH_FAMILIES,
    GF2AffineHash,
    LinearHash,
    client_streams,
    hash_family,
    prime_power,
    public_seeds,
    random_seeds,
    seed_words,
    splitmix64,
)

ROOT = np.random.SeedSequence(20261201)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(ROOT.entropy, spawn_key=key))


def _seeds(n: int, *key: int) -> np.ndarray:
    return _rng(*key).integers(0, 2**63, size=n).astype(np.uint64)


def test_families_are_named_and_default_is_gf2():
    assert DEFAULT_HASH_FAMILY == "gf2-affine"
    assert set(HASH_FAMILIES) == {"gf2-affine", "linear-gf"}
    assert HASH_FAMILIES["gf2-affine"].three_wise_independent
    assert not HASH_FAMILIES["linear-gf"].three_wise_independent
    h = hash_family("gf2-affine").make(1000, 16)
    assert isinstance(h, GF2AffineHash) and (h.p, h.k, h.m, h.g, h.size) == (2, 4, 10, 16, 1024)
    assert "power of two" in hash_family("gf2-affine").check(12)
    assert hash_family("linear-gf").check(9) is None and "prime power" in hash_family("linear-gf").check(12)
    with pytest.raises(ValueError, match="unknown hash family"):
        hash_family("sha1")
    with pytest.raises(ValueError, match="power of two"):
        hash_family("gf2-affine").make(100, 6)


def test_gf2_is_the_binary_linear_hash():
    """Same function as the former LinearHash(d, 2, k): old power-of-two reports decode unchanged."""
    seeds = _seeds(5000, 1)
    vals = _rng(2).integers(0, 300, 5000)
    new, old = GF2AffineHash(300, 3), LinearHash(300, 2, 3)
    np.testing.assert_array_equal(new.hash(seeds, vals), old.hash(seeds, vals))


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("triple", [(0, 1, 2), (3, 5, 6), (7, 100, 1000), (1, 2, 3)])
def test_gf2_affine_is_three_wise_independent(k, triple):
    """(h(v1), h(v2), h(v3)) is uniform on [g]^3 for distinct values: chi-square over the g^3 cells, and
    the triple collision P[h(v1) = h(v2) = h(v3)] = 1/g^2 (3 5 6 has x1 xor x2 = x3: still independent)."""
    N = 120_000
    h = GF2AffineHash(1024, k)
    seeds = _seeds(N, 3, k, *triple)
    hs = [h.hash(seeds, np.full(N, v)) for v in triple]
    g = h.g
    cells = (hs[0] * g + hs[1]) * g + hs[2]
    assert stats.chisquare(np.bincount(cells, minlength=g**3)).pvalue > 1e-6
    coll = int(((hs[0] == hs[1]) & (hs[1] == hs[2])).sum())
    P = 1 / g**2
    assert abs(coll - N * P) < 5 * math.sqrt(N * P * (1 - P)), coll


def test_legacy_prime_family_is_not_three_wise_independent():
    """The defect this guards against: over GF(p), consecutive values hash in arithmetic progression, so the
    triple collision has probability 1/g, not 1/g^2 (g = 5: 0.2 vs 0.04)."""
    N = 50_000
    h = LinearHash(100, 5, 1)
    seeds = _seeds(N, 4)
    hs = [h.hash(seeds, np.full(N, v)) for v in (0, 1, 2)]
    coll = int(((hs[0] == hs[1]) & (hs[1] == hs[2])).sum())
    P = 1 / 5
    assert abs(coll - N * P) < 5 * math.sqrt(N * P * (1 - P)), coll


@pytest.mark.parametrize("p,k,d", [(2, 2, 1024), (3, 1, 100), (5, 1, 30), (2, 5, 40)])
def test_linear_hashes_are_universal(p, k, d):
    """P[h(v) = h(v')] = 1/g for v != v': over N seeds, the collision count is Binomial(N, 1/g)."""
    N = 200_000
    lh = LinearHash(d, p, k)
    seeds = _seeds(N, 5, p, k)
    g = p**k
    for v1, v2 in [(0, 1), (3, d - 1), (d // 2, d // 2 + p)]:
        coll = (lh.hash(seeds, np.full(N, v1)) == lh.hash(seeds, np.full(N, v2))).sum()
        sd = math.sqrt(N * (1 / g) * (1 - 1 / g))
        assert abs(coll - N / g) < 5 * sd, (p, k, v1, v2, coll)
    counts = np.bincount(lh.hash(seeds, np.full(N, 7 % d)), minlength=g)
    assert stats.chisquare(counts).pvalue > 1e-6


def test_prime_power_is_fast_and_right():
    assert prime_power(2) == (2, 1) and prime_power(1024) == (2, 10) and prime_power(243) == (3, 5)
    assert prime_power(12) is None and prime_power(1) is None and prime_power(0) is None
    assert prime_power(2_147_483_647) == (2_147_483_647, 1)  # a Mersenne prime: O(sqrt) trial division
    assert prime_power(2_147_483_647 * 2) is None


def test_splitmix_is_deterministic_and_known():
    # splitmix64 of 0 * GOLDEN + GOLDEN (first output of the stream seeded at 0) is a published value
    assert int(seed_words(np.array([0], dtype=np.uint64), 1)[0, 0]) == 0xE220A8397B1DCDAF
    x = np.arange(5, dtype=np.uint64)
    np.testing.assert_array_equal(splitmix64(x), splitmix64(x.copy()))


def test_public_seeds_from_os_csprng_and_dedicated_generators():
    a, b = public_seeds(1000), public_seeds(1000)
    assert a.dtype == np.uint64 and a.shape == (1000,)
    assert not np.isin(a, b).any()  # 2^-64 collision chance per pair
    assert public_seeds(0).shape == (0,)
    # the top bit is used (full 64-bit range): about half of 1000 seeds
    top = int((a >> np.uint64(63)).sum())
    assert abs(top - 500) < 5 * math.sqrt(250)
    np.testing.assert_array_equal(public_seeds(5, np.random.default_rng(3)), random_seeds(5, rng=3))
    with pytest.raises(ValueError):
        public_seeds(-1)


def test_client_streams_split_and_spawn():
    perturb, seeds = client_streams(None)
    assert seeds is None and isinstance(perturb, np.random.Generator)
    p1, s1 = client_streams(42)
    p2, s2 = client_streams(np.random.SeedSequence(42))
    assert p1.random() == p2.random() and s1.integers(2**62) == s2.integers(2**62)  # reproducible
    g = np.random.default_rng(5)
    p3, s3 = client_streams(g)
    assert p3 is g and g.bit_generator.seed_seq.n_children_spawned == 1
    expect = np.random.default_rng(np.random.SeedSequence(5).spawn(1)[0]).integers(2**62)
    assert s3.integers(2**62) == expect  # the first spawned child of the caller's SeedSequence
