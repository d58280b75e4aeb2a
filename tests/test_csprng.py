"""Tests of ldp/csprng.py: the numpy Generator over the OS CSPRNG that real clients draw their noise from.

Statistical checks use z = 5 with the standard error stated at each assertion (a false failure has
probability below 6e-7 per check); chi-square checks use the 1 - 1e-6 quantile.
"""

from __future__ import annotations

import copy
import os
import pickle

import numpy as np
import pytest
from scipy import stats

from ldp.csprng import OSRandomBits, SecureGenerator, client_rng, secure_rng

Z = 5.0


def test_it_is_a_numpy_generator_and_default_rng_keeps_it():
    g = secure_rng()
    assert isinstance(g, np.random.Generator) and isinstance(g.bit_generator, OSRandomBits)
    assert np.random.default_rng(g) is g and client_rng(g) is g
    assert isinstance(client_rng(None), SecureGenerator)
    seeded = client_rng(7)
    assert not isinstance(seeded, SecureGenerator)
    assert seeded.random() == np.random.default_rng(7).random()  # simulations keep their seeded PCG64


@pytest.mark.statistical
def test_random_is_uniform_on_the_unit_interval():
    g = secure_rng()
    n = 1_000_000
    x = g.random(n)
    assert x.dtype == np.float64 and x.shape == (n,) and x.min() >= 0.0 and x.max() < 1.0
    # mean of U[0, 1): 1/2, standard error sqrt(1/12 / n)
    assert abs(x.mean() - 0.5) < Z * np.sqrt(1 / 12 / n)
    # variance: 1/12; the standard error of the sample variance of U[0, 1) is sqrt((1/80 - 1/144) / n)
    assert abs(x.var() - 1 / 12) < Z * np.sqrt((1 / 80 - 1 / 144) / n)
    counts = np.bincount((x * 64).astype(np.int64), minlength=64)
    assert stats.chisquare(counts).statistic < stats.chi2.ppf(1 - 1e-6, 63)
    assert isinstance(g.random(), float)
    f = g.random((3, 4), dtype=np.float32)
    assert f.dtype == np.float32 and f.shape == (3, 4) and isinstance(g.random(dtype=np.float32), np.float32)
    out = np.empty(5)
    assert g.random(5, out=out) is out and np.all((out >= 0) & (out < 1))  # numpy's ``out`` path
    with pytest.raises(TypeError):
        g.random(3, dtype=np.int64)


@pytest.mark.parametrize("low, high", [(0, 7), (0, 5), (-3, 3), (10, 11 + 2**31)])
@pytest.mark.statistical
def test_integers_are_uniform_and_in_range(low, high):
    g = secure_rng()
    n = 400_000
    x = g.integers(low, high, size=n)
    assert x.dtype == np.int64 and x.min() >= low and x.max() < high
    if high - low <= 16:
        counts = np.bincount(x - low, minlength=high - low)
        assert stats.chisquare(counts).statistic < stats.chi2.ppf(1 - 1e-6, high - low - 1)
    else:
        # mean of the uniform on [low, high): (low + high - 1) / 2, standard error sqrt(((k^2 - 1) / 12) / n)
        k = high - low
        assert abs(x.mean() - (low + high - 1) / 2) < Z * np.sqrt((k * k - 1) / 12 / n)


def test_integers_bounds_dtypes_and_errors_follow_numpy():
    g = secure_rng()
    full = g.integers(0, 2**64, size=100_000, dtype=np.uint64)
    assert full.dtype == np.uint64
    # the top bit of a uniform 64-bit word is set half the time: standard error sqrt(1/4 / n)
    assert abs((full >> np.uint64(63)).mean() - 0.5) < Z * np.sqrt(0.25 / len(full))
    s = g.integers(-(2**63), 2**63 - 1, size=1000, endpoint=True)
    assert s.dtype == np.int64 and (s < 0).any() and (s > 0).any()
    small = g.integers(-128, 127, size=10_000, dtype=np.int8, endpoint=True)
    assert small.dtype == np.int8 and small.min() == -128 and small.max() == 127  # 256 values, 10^4 draws
    assert np.all(g.integers(4, 5, size=10) == 4)
    assert set(g.integers(2, 4, size=200, endpoint=True).tolist()) == {2, 3, 4}
    one = g.integers(10)
    assert isinstance(one, np.int64) and 0 <= one < 10
    assert g.integers(3, size=(2, 5)).shape == (2, 5)
    arr = g.integers(np.array([0, 10]), np.array([1, 12]), size=2)  # array bounds: numpy's own method
    assert arr[0] == 0 and 10 <= arr[1] < 12
    bad = (((5, 5), {}), ((0, 300), {"dtype": np.uint8}), ((0,), {}), ((-1, 3), {"dtype": np.uint32}))
    for args, kwargs in bad:
        with pytest.raises(ValueError) as ours:
            g.integers(*args, **kwargs)
        with pytest.raises(ValueError) as theirs:
            np.random.default_rng(0).integers(*args, **kwargs)
        assert str(ours.value) == str(theirs.value)


def test_every_other_method_draws_through_the_csprng_bit_source():
    """Methods not vectorized here (normal, permutation, choice, ...) run numpy's code over the
    ``OSRandomBits`` callbacks."""
    g = secure_rng()
    n = 100_000
    z = g.standard_normal(n)
    # N(0, 1): mean standard error sqrt(1/n); variance standard error sqrt(2/n)
    assert abs(z.mean()) < Z * np.sqrt(1 / n) and abs(z.var() - 1) < Z * np.sqrt(2 / n)
    assert sorted(g.permutation(50).tolist()) == list(range(50))
    assert set(g.choice(4, size=1000).tolist()) == {0, 1, 2, 3}
    raw = g.bit_generator.random_raw(4)
    assert raw.dtype == np.uint64 and raw.shape == (4,) and isinstance(g.bit_generator.random_raw(), int)
    assert len(g.bytes(33)) == 33


def test_copies_and_children_are_new_independent_generators():
    g = secure_rng()
    others = [pickle.loads(pickle.dumps(g)), copy.deepcopy(g), *g.spawn(2)]
    assert all(isinstance(o, SecureGenerator) and o.bit_generator is not g.bit_generator for o in others)
    words = [o.integers(0, 2**64, size=4, dtype=np.uint64).tobytes() for o in [g, *others]]
    assert len(set(words)) == len(words)  # 256 random bits each: equal by chance with probability 2^-256


def test_a_forked_child_never_repeats_the_parents_buffered_words():
    """The per-word path buffers a block of os.urandom; a fork discards it in the child."""
    g = secure_rng()
    g.standard_normal(3)  # fills the block
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the next words it draws, through the buffered path
        try:
            words = [g.bit_generator._next_uint64(None) for _ in range(8)]
            os.write(w, np.asarray(words, np.uint64).tobytes())
        finally:
            os._exit(0)
    os.close(w)
    child = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    parent = np.asarray([g.bit_generator._next_uint64(None) for _ in range(8)], np.uint64).tobytes()
    assert len(child) == 64 and child != parent  # equal by chance with probability 2^-512


def test_real_client_encode_paths_draw_from_the_csprng(monkeypatch, tmp_path):
    """``rng=None`` on every encode path a real client uses never builds a generator seeded from OS
    entropy (``numpy.random.default_rng()``): the noise comes from a ``SecureGenerator``."""
    from ldp.longitudinal.client import Client
    from ldp.longitudinal.memo import MemoOLH
    from ldp.oracles import GRR, OLH, OUE
    from ldp.square_wave import SquareWave
    from ldp.task import parse_task

    real_default_rng = np.random.default_rng

    def strict_default_rng(seed=None):
        assert seed is not None, "a real client's noise from numpy's PCG64 seeded by OS entropy"
        return real_default_rng(seed)

    drawn = []
    real_random = SecureGenerator.random
    monkeypatch.setattr(np.random, "default_rng", strict_default_rng)
    monkeypatch.setattr(
        SecureGenerator, "random", lambda self, *a, **k: drawn.append(1) or real_random(self, *a, **k)
    )
    values = np.arange(100) % 8
    for oracle in (GRR(1.0, 8), OLH(1.0, 8), OUE(1.0, 8)):
        assert len(oracle.encode(values)) == 100 and len(oracle.encode_one(3)) == 1
    SquareWave(1.0, 8).encode(values)
    memo = MemoOLH(2.0, 8, epsilon_1=1.0)
    memo.encode(values)
    memo.client_report(b"k" * 32, "t", 3)
    task = parse_task({"task_id": "t", "mechanism": "memo-grr", "epsilon": 1.0, "domain_size": 8,
                       "budget": {"reports_per_period": 5, "period_s": 60}})
    client = Client.create(tmp_path / "state.json")
    assert len(client.report("t", task.make_oracle(), task.budget, 2)) == 1
    rtask = parse_task({"task_id": "r", "kind": "range", "mechanism": "hdg", "epsilon": 1.0,
                        "attributes": [{"name": "a", "domain_size": 8}, {"name": "b", "domain_size": 8}],
                        "expected_users": 1000})
    mech = rtask.make_mechanism()
    mech.encode_one([1, 2])
    mech.encode(np.stack([values, values[::-1]], axis=1))
    assert len(drawn) >= 10


@pytest.mark.statistical
def test_grr_through_the_csprng_keeps_the_value_with_probability_p():
    from ldp.oracles import GRR

    oracle = GRR(1.0, 8)
    n = 200_000
    y = np.asarray(oracle.encode(np.zeros(n, dtype=np.int64)).values)
    p = np.e / (np.e + 7)
    # the fraction of kept values is Binomial(n, p) / n: standard error sqrt(p (1 - p) / n)
    assert abs((y == 0).mean() - p) < Z * np.sqrt(p * (1 - p) / n)
    # the others are uniform over the 7 other values
    counts = np.bincount(y[y != 0], minlength=8)[1:]
    assert stats.chisquare(counts).statistic < stats.chi2.ppf(1 - 1e-6, 6)
