"""Tests of ldp.rangequery.queries: query representation, parsing, exact answers, the query generator."""

import numpy as np
import pytest

from ldp.rangequery.queries import (
    RangeQuery,
    parse_queries,
    queries_to_json,
    random_queries,
    true_answers,
    validate_queries,
)

NAMES = ["age", "income", "zip"]
SIZES = [10, 8, 5]


def test_range_query_validation():
    q = RangeQuery(((0, 1, 3), (2, 0, 0)))
    assert q.attributes == (0, 2) and q.dimension == 2
    assert q.volume(SIZES) == pytest.approx(3 / 10 * 1 / 5)
    with pytest.raises(ValueError, match="sorted"):
        RangeQuery(((2, 0, 1), (0, 0, 1)))
    with pytest.raises(ValueError, match="sorted"):
        RangeQuery(((1, 0, 1), (1, 2, 3)))
    with pytest.raises(ValueError, match="invalid interval"):
        RangeQuery(((0, 3, 1),))
    with pytest.raises(ValueError, match="at least one"):
        RangeQuery(())
    assert RangeQuery.from_mapping({2: (0, 1), 0: (4, 4)}).intervals == ((0, 4, 4), (2, 0, 1))


def test_parse_queries_roundtrip():
    obj = [{"income": [2, 5], "age": [0, 9]}, {"zip": [4, 4]}]
    qs = parse_queries(obj, NAMES, SIZES)
    assert qs[0].intervals == ((0, 0, 9), (1, 2, 5))
    assert qs[1].intervals == ((2, 4, 4),)
    assert parse_queries(queries_to_json(qs, NAMES), NAMES, SIZES) == qs


@pytest.mark.parametrize(
    "bad, pattern",
    [
        ({"height": [0, 1]}, r"query 1 .*unknown attribute 'height'"),
        ({"age": [5, 2]}, r"query 1 .*lo > hi for 'age'"),
        ({"zip": [0, 5]}, r"query 1 .*outside the domain \[0, 4\]"),
        ({"zip": [-1, 2]}, r"query 1 .*outside the domain"),
        ({"age": [1]}, r"query 1 .*must be \[lo, hi\]"),
        ({"age": [1.5, 2]}, r"query 1 .*must be \[lo, hi\]"),
        ({}, r"query 1 .*constrains no attribute"),
        ("age", r"query 1 .*must be an object"),
    ],
)
def test_parse_queries_errors_name_the_query(bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_queries([{"age": [0, 1]}, bad], NAMES, SIZES)


def test_validate_queries_against_domain():
    validate_queries([RangeQuery(((0, 0, 9),))], SIZES)
    with pytest.raises(ValueError, match="query 0 .*outside"):
        validate_queries([RangeQuery(((1, 0, 8),))], SIZES)
    with pytest.raises(ValueError, match="attribute index 3"):
        validate_queries([RangeQuery(((3, 0, 0),))], SIZES)


def test_true_answers_hand_made():
    rec = np.array([[0, 0, 0], [1, 2, 3], [5, 7, 4], [9, 7, 4]])
    qs = [
        RangeQuery(((0, 0, 1),)),  # rows 0, 1
        RangeQuery(((0, 1, 9), (1, 7, 7))),  # rows 2, 3
        RangeQuery(((0, 0, 9), (1, 0, 7), (2, 0, 4))),  # all
        RangeQuery(((2, 1, 2),)),  # none
    ]
    np.testing.assert_allclose(true_answers(rec, qs), [0.5, 0.5, 1.0, 0.0])


def test_random_queries_shape_and_volume():
    sizes = [64, 64, 32, 16]
    qs = random_queries(sizes, 300, 3, 0.5, rng=np.random.SeedSequence(7).spawn(1)[0].entropy)
    assert len(qs) == 300
    validate_queries(qs, sizes)
    for q in qs:
        assert q.dimension == 3
        # each interval covers round(c * 0.5^(1/3)) values, so the volume is 0.5 up to rounding
        assert q.volume(sizes) == pytest.approx(0.5, rel=0.1)
    used = {a for q in qs for a in q.attributes}
    assert used == {0, 1, 2, 3}
    assert random_queries(sizes, 5, 2, 0.2, rng=3) == random_queries(sizes, 5, 2, 0.2, rng=3)
    with pytest.raises(ValueError):
        random_queries(sizes, 5, 5, 0.5, rng=0)
    with pytest.raises(ValueError):
        random_queries(sizes, 5, 2, 0.0, rng=0)


def test_random_queries_omega_is_per_attribute():
    sizes = [64, 64, 64, 64]
    qs = random_queries(sizes, 50, 4, omega=0.5, rng=1)
    assert all(hi - lo + 1 == 32 for q in qs for _, lo, hi in q.intervals)
    assert all(q.volume(sizes) == pytest.approx(0.5**4) for q in qs)
    tot = random_queries(sizes, 50, 4, 0.5, rng=1)  # total volume: c * 0.5^(1/4) = 54 values each
    assert all(hi - lo + 1 == 54 for q in tot for _, lo, hi in q.intervals)
    with pytest.raises(ValueError, match="exactly one of volume"):
        random_queries(sizes, 5, 2, 0.5, omega=0.5, rng=0)
    with pytest.raises(ValueError, match="exactly one of volume"):
        random_queries(sizes, 5, 2, rng=0)
    with pytest.raises(ValueError, match="omega must be in"):
        random_queries(sizes, 5, 2, omega=1.5, rng=0)
