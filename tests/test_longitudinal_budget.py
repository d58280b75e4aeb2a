"""Budget policy parsing and the client-side ledger."""

from __future__ import annotations

import pytest

from ldp.longitudinal.budget import BudgetExceeded, BudgetLedger, BudgetPolicy, LedgerState, parse_budget

DAY = 86400.0


def test_parse_budget_defaults_and_round_trip():
    pol = parse_budget({"epsilon_per_report": 0.5, "reports_per_period": 3, "period_s": DAY})
    assert pol.composition == "basic" and pol.delta == 1e-9 and pol.total_epsilon is None
    assert parse_budget(pol.to_dict()) == pol
    assert pol.period_index(0.0) == 0 and pol.period_index(DAY - 1e-6) == 0 and pol.period_index(DAY) == 1
    assert BudgetPolicy(1.0, total_epsilon=3.5).max_reports() == 3


def test_parse_budget_lists_every_problem():
    with pytest.raises(ValueError) as err:
        parse_budget({"epsilon_per_report": -1, "reports_per_period": 0, "composition": "advanced",
                      "delta": 0.5, "colour": 1})
    msg = str(err.value)
    for part in ("unknown key 'colour'", "epsilon_per_report must be", "reports_per_period must be",
                 "go together", "composition must be one of", "delta must be"):
        assert part in msg, part
    with pytest.raises(ValueError, match="at least one limit"):
        parse_budget({"epsilon_per_report": 1.0})
    with pytest.raises(ValueError, match="below epsilon_per_report"):
        parse_budget({"epsilon_per_report": 1.0, "total_epsilon": 0.5})
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_budget([1])
    with pytest.raises(ValueError, match="period_s must be"):
        BudgetPolicy(1.0, reports_per_period=2, period_s=float("nan"))
    with pytest.raises(ValueError, match="client_ids: true needs reports_per_period"):
        parse_budget({"epsilon_per_report": 1.0, "total_epsilon": 3.0, "client_ids": True})
    with pytest.raises(ValueError, match="client_ids must be true or false"):
        parse_budget({"epsilon_per_report": 1.0, "total_epsilon": 3.0, "client_ids": 1})
    pol = parse_budget({"epsilon_per_report": 1.0, "reports_per_period": 2, "period_s": 60,
                        "client_ids": True})
    assert pol.client_ids and parse_budget(pol.to_dict()) == pol


def test_ledger_refuses_past_the_period_limit_and_opens_the_next_period():
    led = BudgetLedger(parse_budget({"epsilon_per_report": 1.0, "reports_per_period": 2, "period_s": DAY}))
    led.charge(10.0)
    led.charge(20.0)
    before = led.state.to_dict()
    with pytest.raises(BudgetExceeded, match="reports_per_period = 2") as err:
        led.authorize(30.0)
    assert err.value.limit == "reports_per_period" and "no report produced" in str(err.value)
    assert led.state.to_dict() == before  # a refusal changes nothing
    led.charge(DAY + 1.0)  # the next UTC day
    assert led.state.period == 1 and led.state.period_reports == 1 and led.spent() == 3.0
    with pytest.raises(ValueError, match="clock moved back"):
        led.authorize(5.0)


def test_ledger_total_cap_basic_and_memoized():
    led = BudgetLedger(BudgetPolicy(0.4, total_epsilon=1.0))
    led.charge(1.0)
    led.charge(2.0)
    with pytest.raises(BudgetExceeded, match="total_epsilon = 1") as err:
        led.authorize(3.0)
    assert err.value.limit == "total_epsilon" and err.value.spent == pytest.approx(0.8)
    # memoized: a repeated key costs nothing, a new one costs e_inf
    mem = BudgetLedger(BudgetPolicy(0.5, total_epsilon=2.0, composition="memoized"), epsilon_per_key=1.0)
    for t in range(10):
        c = mem.charge(float(t), "a")
        assert c.cost == (1.0 if t == 0 else 0.0)
    mem.charge(11.0, "b")
    assert mem.spent() == 2.0 and mem.state.reports == 11
    with pytest.raises(BudgetExceeded, match="2 permanent response"):
        mem.authorize(12.0, "c")
    mem.charge(12.0, "a")  # old values stay reportable
    with pytest.raises(ValueError, match="epsilon_per_key"):
        BudgetLedger(BudgetPolicy(0.5, total_epsilon=2.0, composition="memoized"))
    with pytest.raises(ValueError, match="tight_epsilon"):
        BudgetLedger(BudgetPolicy(0.5, total_epsilon=2.0, composition="pld"))


def test_ledger_state_round_trip_and_validation():
    led = BudgetLedger(BudgetPolicy(0.5, reports_per_period=5, period_s=60.0, total_epsilon=9.0,
                                    composition="memoized"), epsilon_per_key=1.0)
    led.charge(61.0, "k1")
    s = LedgerState.from_dict(led.state.to_dict())
    assert s == led.state
    for bad in ({"reports": -1}, {"period_reports": 3, "reports": 1}, {"keys": [1]}, {"x": 1}):
        with pytest.raises(ValueError):
            LedgerState.from_dict(bad)
