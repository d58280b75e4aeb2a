"""ldp.anonymity: the task's anonymity section (every problem listed at once), the time rounding helpers and
the permutations."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from ldp.anonymity import (
    DAY_S,
    AnonymityError,
    AnonymitySettings,
    bucket_start_ms,
    check_anonymity,
    is_rounded,
    parse_anonymity,
    round_event_ms,
    secure_permutation,
    seeded_permutation,
    window_problems,
)


def test_defaults_and_a_full_section():
    s = parse_anonymity({})
    assert s == AnonymitySettings()
    assert (s.shuffled, s.delta, s.time_precision_s, s.min_reports, s.short_bucket) == (
        True, 1e-9, 3600, 1000, "withhold"
    )  # fmt: skip
    section = {"shuffled": True, "delta": 1e-6, "time_precision_s": 600, "min_reports": 50,
               "short_bucket": "withhold"}  # fmt: skip
    s = parse_anonymity(section)
    assert s.precision_ms == 600_000 and s.min_reports == 50 and s.delta == 1e-6
    assert s.to_json() == section
    assert parse_anonymity(s.to_json()) == s


@pytest.mark.parametrize(
    "p", [1, 2, 60, 600, 900, 3600, 7200, 43200, DAY_S, 2 * DAY_S, 7 * DAY_S, 366 * DAY_S]
)
def test_precisions_that_divide_a_day_or_are_whole_days(p):
    assert parse_anonymity({"time_precision_s": p}).time_precision_s == p


@pytest.mark.parametrize("p", [7, 1000, 5000, 90000, DAY_S + 1, 367 * DAY_S, 0, -60, 60.0, "60", True, None])
def test_other_precisions_are_refused(p):
    with pytest.raises(AnonymityError, match="time_precision_s"):
        parse_anonymity({"time_precision_s": p})


def test_every_problem_is_listed_at_once():
    bad = {"shuffled": "yes", "delta": 0.01, "time_precision_s": 7, "min_reports": 1, "short_bucket": "drop",
           "epsilon": 1}  # fmt: skip
    with pytest.raises(AnonymityError) as ei:
        parse_anonymity(bad)
    text = str(ei.value)
    assert len(ei.value.problems) == 6, ei.value.problems
    for key in (
        "shuffled",
        "delta",
        "time_precision_s",
        "min_reports",
        "short_bucket",
        "unknown key 'epsilon'",
    ):
        assert key in text


def test_check_appends_to_the_task_checkers_list():
    problems = ["an earlier problem"]
    settings, out = check_anonymity({"delta": 0, "min_reports": 2.5}, problems)
    assert settings is None and out is problems and len(problems) == 3
    assert check_anonymity(None) == (None, [])
    assert check_anonymity([1, 2])[1] == ["anonymity must be an object, got list"]
    settings, out = check_anonymity({"delta": 1e-3, "min_reports": 2})
    assert out == [] and settings == AnonymitySettings(delta=1e-3, min_reports=2)


@pytest.mark.parametrize("delta", [0, -1e-9, 2e-3, float("nan"), float("inf"), True, "1e-9"])
def test_delta_bounds(delta):
    with pytest.raises(AnonymityError, match="delta"):
        parse_anonymity({"delta": delta})


def test_no_section_and_direct_construction():
    with pytest.raises(AnonymityError, match="no anonymity section"):
        parse_anonymity(None)
    with pytest.raises(AnonymityError, match="min_reports"):
        AnonymitySettings(min_reports=1)


def test_window_must_be_a_multiple_of_the_precision():
    s = AnonymitySettings(time_precision_s=600)
    assert window_problems(s, None) == []
    assert window_problems(s, 3600.0, 1200.0) == []
    probs = window_problems(s, 900.0, 300.0)
    assert len(probs) == 2 and "window.size_s" in probs[0] and "window.period_s" in probs[1]


def test_rounding_is_a_floor_to_the_precision():
    t = np.array([0, 1, 599_999, 600_000, 600_001, -1, -600_000, -600_001, 1_767_225_659_123], dtype=np.int64)
    r = round_event_ms(t, 600)
    assert r.tolist() == [0, 0, 0, 600_000, 600_000, -600_000, -600_000, -1_200_000, 1_767_225_600_000]
    assert is_rounded(r, 600).all()
    assert is_rounded(t, 600).tolist() == [True, False, False, True, False, False, True, False, False]
    assert [bucket_start_ms(int(x), 600) for x in t] == r.tolist()
    s = AnonymitySettings(time_precision_s=600)
    assert np.array_equal(s.round_ms(t), r) and np.array_equal(s.is_rounded(t), is_rounded(t, 600))


def test_day_precision_aligns_on_utc_midnight():
    noon = 1_767_268_800_000  # 2026-01-01T12:00:00Z
    assert round_event_ms(np.array([noon]), DAY_S)[0] == 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_secure_permutation_is_a_permutation_and_leaves_numpy_alone():
    state = np.random.get_state()[1].copy()
    for n in (0, 1, 2, 5, 1000):
        p = secure_permutation(n)
        assert p.dtype == np.int64 and np.array_equal(np.sort(p), np.arange(n))
    assert np.array_equal(np.random.get_state()[1], state)  # the global generator was not used


def test_secure_permutation_draws_from_os_urandom(monkeypatch):
    calls = []
    real = os.urandom

    def recording(k):
        calls.append(k)
        return real(k)

    monkeypatch.setattr(os, "urandom", recording)
    secure_permutation(10)
    assert calls == [80]  # a 64-bit key per index; no tie, so no second draw


def test_secure_permutation_draws_wider_keys_after_a_tie(monkeypatch):
    """Equal 64-bit keys (forced here: the first draw is all zeros) are not left to the sort's order:
    the permutation is drawn again with 128-bit keys."""
    calls = []
    real = os.urandom

    def tied_first(k):
        calls.append(k)
        return bytes(k) if len(calls) == 1 else real(k)

    monkeypatch.setattr(os, "urandom", tied_first)
    p = secure_permutation(1000)
    assert calls == [8000, 16000]
    assert np.array_equal(np.sort(p), np.arange(1000)) and not np.array_equal(p, np.arange(1000))


@pytest.mark.statistical
def test_secure_permutation_is_uniform_on_three_items():
    # 6000 permutations of 3 items: each of the 6 orders has expected count 1000. Pearson's statistic has
    # 5 degrees of freedom; P(chi2_5 > 36) < 1e-6, so a uniform permutation fails this test < 1e-6 of runs.
    counts = dict.fromkeys(itertools.permutations(range(3)), 0)
    for _ in range(6000):
        counts[tuple(secure_permutation(3).tolist())] += 1
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 36.0, counts


def test_seeded_permutation_is_reproducible():
    a, b = seeded_permutation(100, 7), seeded_permutation(100, 7)
    assert np.array_equal(a, b) and np.array_equal(np.sort(a), np.arange(100))
    assert not np.array_equal(a, seeded_permutation(100, 8))
