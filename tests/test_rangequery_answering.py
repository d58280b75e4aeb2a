"""Answering shared by every range model: full-domain predicates are dropped, answers clipped to [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest

from ldp.datasets.multi import sample_records
from ldp.rangequery.queries import RangeQuery, drop_full_domain, random_queries, true_answers
from ldp.rangequery.registry import METHODS, make_mechanism, model_from_dict
from ldp.rangequery.weighted_update import lambda_d_answers

SS = np.random.SeedSequence(20260701)
SEEDS = SS.spawn(8)


def _rng(i: int) -> np.random.Generator:
    """A fresh generator on child ``i`` of SS (a fresh SeedSequence each call: the oracles spawn children
    from the generator's seed sequence, so reusing one object would not repeat the same draws)."""
    return np.random.default_rng(np.random.SeedSequence(SS.entropy, spawn_key=SEEDS[i].spawn_key))
SIZES = [16, 16, 12, 16]  # one non-power-of-two domain on purpose
N = 20_000


@pytest.fixture(scope="module")
def records():
    return sample_records("gaussian:0.8", N, SIZES, rng=_rng(0))


def _with_full(queries, sizes, extra):
    """Each query plus full-domain intervals on up to ``extra`` attributes it does not constrain."""
    out = []
    for q in queries:
        ivs = {a: (lo, hi) for a, lo, hi in q.intervals}
        free = [a for a in range(len(sizes)) if a not in ivs][:extra]
        for a in free:
            ivs[a] = (0, sizes[a] - 1)
        out.append(RangeQuery.from_mapping(ivs))
    return out


def test_drop_full_domain():
    q = RangeQuery(((0, 0, 15), (1, 2, 5), (2, 0, 11)))
    assert drop_full_domain([q], SIZES) == [RangeQuery(((1, 2, 5),))]
    assert drop_full_domain([RangeQuery(((0, 0, 15), (2, 0, 11)))], SIZES) == [None]
    kept = RangeQuery(((0, 1, 15), (2, 0, 10)))
    assert drop_full_domain([kept], SIZES)[0] is kept


def test_weighted_update_is_biased_by_full_domain_attributes():
    """Why the predicates are dropped: Algorithm 2 on exact pairwise answers of a query whose third
    attribute is unconstrained (pairs (0,1) = 0.2, (0,2) = 0.3, (1,2) = 0.15; truth = the (0,1) answer would
    need f(0,2) = f(0), f(1,2) = f(1)) does not return an answer consistent with them."""
    ans = lambda_d_answers(np.array([[0.2, 0.3, 0.15]]), 3, threshold=1e-12)
    assert abs(ans[0] - 0.15) > 0.05  # the bias the issue measured (0.087)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("lam", [1, 2, 3])
def test_full_domain_attributes_leave_answers_unchanged(records, method, lam):
    mech = make_mechanism(method, 1.0, SIZES, N)
    model = mech.fit(records, rng=_rng(1))
    queries = random_queries(SIZES, 30, lam, 0.3, rng=_rng(2))
    base = model.answer(queries)
    for extra in range(1, len(SIZES) - lam + 1):
        ext = _with_full(queries, SIZES, extra)
        assert all(e.dimension == lam + extra for e in ext)
        np.testing.assert_allclose(model.answer(ext), base, rtol=0, atol=1e-9)
        np.testing.assert_allclose(model.answer(ext, clip=False), model.answer(queries, clip=False),
                                   rtol=0, atol=1e-9)
        s0, s1 = model.answer_std(queries), model.answer_std(ext)
        assert (s0 is None) == (s1 is None)
        if s0 is not None:
            np.testing.assert_allclose(s1, s0, rtol=0, atol=1e-12)  # NaN where neither has a formula
    # a query made only of full-domain intervals covers everyone
    assert model.answer([RangeQuery(tuple((a, 0, c - 1) for a, c in enumerate(SIZES)))])[0] == 1.0


@pytest.mark.parametrize("method", ["lhio", "hio"])
def test_clipping(records, method):
    """LHIO / HIO answers leave [0, 1] at small eps; clipping keeps them inside and never increases the
    absolute error of any answer (the truth is a fraction)."""
    queries = random_queries(SIZES, 200, 2, 0.1, rng=_rng(3))
    truth = true_answers(records, queries)
    mech = make_mechanism(method, 0.2, SIZES, N)
    model = mech.fit(records, rng=_rng(4))
    raw = model.answer(queries, clip=False)
    assert ((raw < 0) | (raw > 1)).any(), "expected raw answers outside [0, 1] at eps = 0.2, n = 2e4"
    clipped = model.answer(queries)
    assert clipped.min() >= 0 and clipped.max() <= 1
    np.testing.assert_array_equal(clipped, np.clip(raw, 0, 1))
    assert np.all(np.abs(clipped - truth) <= np.abs(raw - truth))
    # the option turns it off for good, and survives the JSON round trip
    off = make_mechanism(method, 0.2, SIZES, N, clip=False).fit(records, rng=_rng(4))
    np.testing.assert_array_equal(off.answer(queries), raw)
    again = model_from_dict(off.to_dict())
    assert again.clip is False
    np.testing.assert_allclose(again.answer(queries), raw, rtol=0, atol=1e-12)
    assert model_from_dict(model.to_dict()).clip is True


@pytest.mark.parametrize("method", METHODS)
def test_clip_option_validated(method):
    with pytest.raises(ValueError, match="clip must be true or false"):
        make_mechanism(method, 1.0, SIZES, N, clip="yes")
