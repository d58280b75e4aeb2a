"""The oracle seam (``ldp.payload``): every mechanism of every registered kind declares its payload, the
validator accepts its own encoder's reports and refuses each violation the declaration implies with the
declared reason code, on record dicts and on column-decoded batches alike; the simulator's bad records
come from the same declaration."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from ldp import kinds
from ldp.aggregate import make_aggregator
from ldp.payload import ORACLE_REASONS, PayloadField, PayloadSpec, Refusal
from ldp.reports import Reports
from ldp.task import parse_task
from wire.decode import iter_report_batches
from wire.records import REASONS, reports_to_records, write_report_file
from wire.validate import ReportValidator, declared_payload, fast_decode_params

T0 = 1_764_000_000_000  # event time of every test report (ms)

#: (kind, mechanism) of every mechanism every registered kind offers
CASES = [(name, m) for name, kind in sorted(kinds.KINDS.items()) for m in kind.task.mechanisms()]


def _task(kind: str, mechanism: str):
    return parse_task({**kinds.KINDS[kind].example, "mechanism": mechanism, "task_id": f"{kind}-{mechanism}"})


def _group_oracles(task) -> list[object]:
    """The validation oracle of every group (the aggregator's; a kind whose aggregator needs job
    parameters, batch queries, gives the bad-record template's)."""
    try:
        agg = make_aggregator(task)
    except TypeError:
        return [kinds.kind_of(task).bad_template(task)[0]]
    return [agg.validation_oracle(g) for g in range(task.n_groups)]


def _columns(task, oracle, records: list[dict]) -> list[object]:
    """The records written as an Avro container and decoded as the job decodes them."""
    buf = io.BytesIO()
    write_report_file(buf, records)
    buf.seek(0)
    return list(iter_report_batches(buf, task_id=task.task_id, **fast_decode_params(oracle)))


def _reasons(validator: ReportValidator, batches: list[object]) -> list[str]:
    return [d["reason"] for b in batches for d in validator.validate(b, "t", at_ms=0).dead_letters]


def test_oracle_reason_codes_are_dead_letter_reasons():
    assert set(ORACLE_REASONS) <= set(REASONS)
    r = Refusal("out_of_domain", "value outside [0, 4)")
    assert r == "value outside [0, 4)" and r.code == "out_of_domain"
    back = pickle.loads(pickle.dumps(r))
    assert back.code == "out_of_domain" and back == r
    with pytest.raises(ValueError, match="unknown reason code"):
        Refusal("outside", "value outside [0, 4)")
    with pytest.raises(ValueError, match="dtype"):
        PayloadField("values", "float64")
    with pytest.raises(ValueError, match="twice"):
        PayloadSpec((PayloadField("values", "int64"), PayloadField("values", "int64")))


@pytest.mark.parametrize(("kind", "mechanism"), CASES)
def test_every_group_declares_its_payload(kind, mechanism):
    task = _task(kind, mechanism)
    for oracle in _group_oracles(task):
        spec = declared_payload(oracle)
        assert spec.fields, oracle
        if hasattr(oracle, "report_fields"):
            assert spec.names == tuple(oracle.report_fields), oracle
        ReportValidator(task, oracle=oracle)  # the validator takes the declaration as it is


@pytest.mark.parametrize(("kind", "mechanism"), CASES)
def test_validator_accepts_own_reports_and_refuses_each_declared_violation(kind, mechanism, rng):
    task = _task(kind, mechanism)
    oracle, group, encode = kinds.kind_of(task).bad_template(task)
    good = reports_to_records(
        task.task_id, encode(3, rng), np.full(3, T0), group, schema_version=task.schema_version
    )
    v = ReportValidator(task, oracle=oracle)
    assert v.validate(good, "t", at_ms=0).n_accepted == 3
    assert sum(v.validate(b, "t", at_ms=0).n_accepted for b in _columns(task, oracle, good)) == 3
    spec = declared_payload(oracle)
    violations = list(spec.violations())
    assert {x.wire for x in violations if x.code == "missing_field"} == {f.wire for f in spec.fields}
    for f in spec.fields:
        assert any(x.wire == f.wire and x.code == f.invalid for x in violations), f
        if f.bounded:
            assert any(x.wire == f.wire and x.code == f.outside for x in violations), f
    for x in violations:
        bad = [{**good[0], x.wire: x.value}]
        assert _reasons(v, [bad]) == [x.code], x
        if x.schema_valid:
            assert _reasons(v, _columns(task, oracle, bad)) == [x.code], x


@pytest.mark.parametrize(("kind", "mechanism"), CASES)
def test_simulated_bad_records_get_the_reason_they_are_filed_under(kind, mechanism):
    from simulator import bad_records

    task = _task(kind, mechanism)
    oracle, _, _ = kinds.kind_of(task).bad_template(task)
    v = ReportValidator(task, oracle=oracle)
    for reason, records in bad_records(task, 1, T0, seed=1).items():
        assert set(_reasons(v, [records])) == {reason}, reason


class _Undeclared:
    name = "undeclared"

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        return np.ones(len(reports), bool), np.full(len(reports), None, dtype=object)


class _Prose(_Undeclared):
    name = "prose"
    payload = PayloadSpec((PayloadField("values", "int64", low=0, high=3),))

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(len(reports), bool), np.full(len(reports), "value outside [0, 4)", dtype=object)


def test_an_oracle_without_a_declaration_or_reason_codes_is_an_error():
    task = _task("frequency", "grr")
    with pytest.raises(TypeError, match="declares no payload"):
        ReportValidator(task, oracle=_Undeclared())
    v = ReportValidator(task, oracle=_Prose())
    rec = reports_to_records(task.task_id, Reports(values=np.array([1])), np.array([T0]))
    with pytest.raises(TypeError, match="not a Refusal"):
        v.validate(rec, "t", at_ms=0)
