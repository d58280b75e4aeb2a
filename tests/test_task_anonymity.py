"""The task's ``anonymity`` section (ldp.task + ldp.anonymity): what a shuffled task may not do, and the
optional central target that chooses the local epsilon (``"epsilon": "auto"``), recorded by resolve_task
and checked on every load."""

from __future__ import annotations

import json

import jsonschema
import pytest

import ldp.oracles
import ldp.shuffle
import schemas
from ldp import task as T
from ldp.anonymity import AnonymitySettings, shuffle_accounting
from ldp.kinds.frequency.task import MEMO_MECHANISMS

OLH = {"task_id": "s", "mechanism": "olh", "domain_size": 1024}
TARGET = {"central_epsilon": 1.0, "expected_reports": 1_000_000}
ATTRS = [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 16}]


def _refused(obj: dict, pattern: str) -> str:
    with pytest.raises(T.TaskError, match=pattern) as ei:
        T.parse_task(obj)
    return ei.value.one_line()


def _schema_ok(obj: dict) -> bool:
    return jsonschema.Draft202012Validator(schemas.task_schema()).is_valid(obj)


def test_the_section_is_part_of_the_task_and_round_trips():
    t = T.parse_task({**OLH, "epsilon": 2.0, "anonymity": {"time_precision_s": 600, "min_reports": 50}})
    assert t.anonymity == AnonymitySettings(time_precision_s=600, min_reports=50)
    assert t.shuffled and t.central_target is None and t.expected_reports is None
    assert t.to_dict()["anonymity"] == AnonymitySettings(time_precision_s=600, min_reports=50).to_json()
    assert T.parse_task(t.to_dict()) == t
    assert _schema_ok(t.to_dict())
    plain = T.parse_task({**OLH, "epsilon": 2.0})
    assert plain.anonymity is None and not plain.shuffled and "anonymity" not in plain.to_dict()


def test_section_problems_are_listed_with_the_rest():
    msg = _refused(
        {**OLH, "epsilon": -1, "anonymity": {"delta": 1, "colour": "red", "expected_reports": 1.5}}, "epsilon"
    )
    for part in ("epsilon must be", "unknown key 'colour'", "anonymity.delta", "anonymity.expected_reports"):
        assert part in msg, msg
    _refused({**OLH, "epsilon": 1.0, "anonymity": [1]}, "anonymity must be an object")
    _refused(
        {"task_id": "b", "kind": "batch_queries", "mechanism": "identity", "epsilon": 1.0,
         "attributes": ATTRS[:1], "delta": 1e-6, "anonymity": {}},
        "key 'anonymity' belongs to",
    )  # fmt: skip


def test_shuffled_tasks_refuse_what_would_identify_a_sender_or_move_a_report():
    budget = {"reports_per_period": 1, "period_s": 3600}
    _refused(
        {**OLH, "epsilon": 1.0, "budget": {**budget, "client_ids": True}, "anonymity": {}},
        "budget.client_ids makes every report carry the client's pseudonymous id",
    )
    for mech in MEMO_MECHANISMS:
        memo = {**OLH, "mechanism": mech, "epsilon": 2.0, "anonymity": {}}
        _refused(memo, f"mechanism '{mech}' is memoized")
    _refused({**OLH, "epsilon": 1.0, "window": {"size_s": 900}, "anonymity": {}}, r"window.size_s \(900 s\)")
    _refused(
        {**OLH, "epsilon": 1.0, "window": {"size_s": 7200, "period_s": 1800}, "anonymity": {}},
        r"window.period_s \(1800 s\)",
    )
    # what the section allows: a budget the clients enforce, windows that are multiples of the precision
    T.parse_task({**OLH, "epsilon": 1.0, "budget": budget, "anonymity": {}})
    T.parse_task({**OLH, "epsilon": 1.0, "window": {"size_s": 7200, "period_s": 3600}, "anonymity": {}})
    # "shuffled": false keeps the section inert
    inert = {"shuffled": False}
    T.parse_task({**OLH, "epsilon": 1.0, "window": {"size_s": 900}, "anonymity": inert})
    T.parse_task({**OLH, "mechanism": "memo-grr", "epsilon": 2.0, "anonymity": inert})


def test_auto_epsilon_is_the_largest_meeting_the_target_under_the_mechanisms_own_bound():
    t = T.parse_task({**OLH, "epsilon": "auto", "anonymity": TARGET})
    acc, g = shuffle_accounting(t)
    assert acc == "olh" and g == t.make_oracle().g  # OLH's own bound, at the g of the chosen epsilon
    general = ldp.shuffle.local_epsilon_for_central(1.0, 1e-9, 1_000_000, "general")
    assert t.epsilon > general + 0.02  # 9.551 against 9.523 on the general bound
    assert round(t.epsilon * 1000) == t.epsilon * 1000  # rounded down to 0.001
    assert ldp.shuffle.central_epsilon(t.epsilon, 1_000_000, 1e-9, "olh", g) <= 1.0
    assert ldp.shuffle.central_epsilon(t.epsilon + 0.002, 1_000_000, 1e-9, "olh", g) > 1.0  # the largest
    # a number is accepted when it meets the target, refused (naming the largest) when it does not
    assert T.parse_task({**OLH, "epsilon": t.epsilon, "anonymity": TARGET}).epsilon == t.epsilon
    assert T.parse_task({**OLH, "epsilon": 2.0, "anonymity": TARGET}).epsilon == 2.0
    msg = _refused({**OLH, "epsilon": t.epsilon + 0.01, "anonymity": TARGET}, "does not meet")
    assert f"the largest local epsilon that does is {t.epsilon:g}" in msg and "(olh bound)" in msg
    # fewer expected reports, smaller epsilon
    small = T.parse_task({**OLH, "epsilon": "auto", "anonymity": {**TARGET, "expected_reports": 10_000}})
    assert 1.0 < small.epsilon < t.epsilon


def test_every_frequency_oracle_is_accounted_by_its_own_bound():
    for mech, want in (("grr", ("grr", 1024)), ("olh", ("olh", 8)), ("blh", ("blh", None)),
                       ("oue", ("oue", None)), ("sue", ("sue", None)), ("hr", ("hr", None)),
                       ("ss", ("ss", 1024))):
        t = T.parse_task({**OLH, "mechanism": mech, "epsilon": 2.0, "anonymity": {}})
        assert shuffle_accounting(t) == want, mech
    with_g = T.parse_task({**OLH, "epsilon": 2.0, "hash": {"g": 4}, "anonymity": {}})
    assert shuffle_accounting(with_g) == ("olh", 4)
    memo = T.parse_task({**OLH, "mechanism": "memo-grr", "epsilon": 2.0})
    assert shuffle_accounting(memo) == ("general", None)


def test_auto_picks_the_mechanism_and_epsilon_of_the_smallest_predicted_variance():
    """Under a central target ``auto`` chooses among the frozen candidates by their variance at each one's
    largest epsilon under its own bound, and the task records the candidate chosen."""
    from ldp.anonymity import choose_for_target

    small = {**TARGET, "expected_reports": 10_000}
    base = T.parse_task({**OLH, "mechanism": "auto", "epsilon": 1.0, "anonymity": small})
    choice = choose_for_target(base, 1.0, 1e-9, 10_000)
    rows = {r["mechanism"]: r for r in choice.table}
    assert set(rows) == set(ldp.oracles.auto_candidates(2))
    usable = [r for r in choice.table if r["variance"] is not None]
    assert min(usable, key=lambda r: r["variance"])["mechanism"] == choice.mechanism
    chosen = rows[choice.mechanism]
    assert chosen["status"] == "chosen" and choice.epsilon == chosen["epsilon"]
    for r in usable:  # each candidate's epsilon meets the target under its own bound
        eps = ldp.shuffle.central_epsilon(r["epsilon"], 10_000, 1e-9, r["accounting"], r["domain_size"])
        assert eps <= 1.0, r
    t = T.parse_task({**OLH, "mechanism": "auto", "epsilon": "auto", "anonymity": small})
    assert (t.mechanism, t.epsilon) == (choice.mechanism, choice.epsilon)
    assert T.parse_task(t.to_dict()) == t  # the choice is part of the task: it means the same thing forever
    # on the general bound every candidate gets the same epsilon: the tight bounds move the choice's epsilon
    general = choose_for_target(base, 1.0, 1e-9, 10_000, bound="general")
    assert len({r["epsilon"] for r in general.table if r["variance"] is not None}) == 1
    assert choice.epsilon > general.epsilon
    # and they choose differently: GRR at 5.751 on its own bound, SS at 4.94 when all share the general one
    assert (choice.mechanism, choice.epsilon) == ("grr", 5.751) and general.mechanism == "ss"


def test_what_auto_epsilon_and_the_target_need():
    _refused({**OLH, "epsilon": "auto"}, 'epsilon "auto" needs an anonymity section')
    _refused({**OLH, "epsilon": "auto", "anonymity": {}}, 'epsilon "auto" needs anonymity.central_epsilon')
    no_n = {**OLH, "epsilon": 1.0, "anonymity": {"central_epsilon": 1.0}}
    _refused(no_n, "needs anonymity.expected_reports")
    _refused(
        {**OLH, "epsilon": 1.0, "anonymity": {**TARGET, "shuffled": False}}, "applies to shuffled tasks only"
    )
    _refused(
        {**OLH, "epsilon": 1.0, "anonymity": {**TARGET, "expected_reports": 999}},
        r"anonymity.expected_reports \(999\) is below anonymity.min_reports \(1000\)",
    )
    _refused(
        {"task_id": "b", "kind": "batch_queries", "mechanism": "identity", "epsilon": "auto",
         "attributes": ATTRS[:1], "delta": 1e-6},
        r"epsilon must be a number in \(0, 50\], got 'auto'",
    )  # fmt: skip
    assert _schema_ok({**OLH, "epsilon": "auto", "anonymity": TARGET})
    assert not _schema_ok({**OLH, "epsilon": "AUTO", "anonymity": TARGET})


def test_range_tasks_default_the_expected_reports_to_the_expected_users():
    r = {"task_id": "r", "mechanism": "hdg", "attributes": ATTRS, "expected_users": 1_000_000}
    t = T.parse_task({**r, "epsilon": "auto", "anonymity": {"central_epsilon": 1.0}})
    assert t.expected_reports == 1_000_000 and shuffle_accounting(t)[0] != "olh"
    assert T.parse_task(t.to_dict()) == t
    _refused(
        {**r, "expected_users": 500, "epsilon": 1.0, "anonymity": {"central_epsilon": 1.0}},
        r"expected_users \(500\) is below anonymity.min_reports",
    )


def test_resolve_task_records_the_chosen_epsilon_and_every_load_checks(tmp_path, monkeypatch):
    out = T.resolve_task({**OLH, "epsilon": "auto", "anonymity": TARGET})
    eps = out["epsilon"]
    assert isinstance(eps, float)
    assert out["resolved"]["local_epsilon"] == {
        "epsilon": eps,
        "central_epsilon": 1.0,
        "delta": 1e-9,
        "expected_reports": 1_000_000,
        "accounting": "olh",
    }
    assert _schema_ok(out)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(out))
    t = T.load_task(path)
    assert t.epsilon == eps and T.resolve_task(t) == out == t.to_dict()
    # the record must be the task's: another epsilon, target or accounting is refused
    smaller = {**out, "epsilon": 2.0}
    _refused(smaller, rf"resolved.local_epsilon: the task records .*'epsilon': {eps}")
    le = out["resolved"]["local_epsilon"]
    for key, value in (("central_epsilon", 2.0), ("expected_reports", 10), ("accounting", "grr")):
        bad = {**out, "resolved": {**out["resolved"], "local_epsilon": {**le, key: value}}}
        _refused(bad, "resolved.local_epsilon")
    no_record = {**out, "resolved": {k: v for k, v in out["resolved"].items() if k != "local_epsilon"}}
    _refused(no_record, "resolved.local_epsilon: the task records None")
    # a release whose accountant no longer certifies the recorded epsilon refuses the task
    monkeypatch.setattr(ldp.shuffle, "delta_curve", lambda *a, **k: [1.0])
    monkeypatch.setattr(ldp.shuffle, "central_epsilon_fmt_closed_form", lambda *a, **k: float("inf"))
    monkeypatch.setattr(ldp.shuffle, "central_epsilon", lambda *a, **k: float("inf"))
    monkeypatch.setattr(ldp.shuffle, "local_epsilon_for_central", lambda t, *a, **k: t)
    _refused(out, f"epsilon {eps:g} does not meet anonymity.central_epsilon 1 .* is 1 ")


def test_the_shuffler_takes_the_whole_task(tmp_path):
    from pipelines.shuffle import load_shuffled_task

    path = tmp_path / "t.json"
    path.write_text(json.dumps(T.resolve_task({**OLH, "epsilon": "auto", "anonymity": TARGET})))
    task, settings = load_shuffled_task(str(path))
    assert settings == task.anonymity and task.central_target == T.CentralTarget(1.0, 1_000_000)
