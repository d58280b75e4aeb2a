"""``wire.client.make_client_encoder``: a task's client side, chosen by its mechanisms' wire specs."""

from __future__ import annotations

import numpy as np
import pytest

from ldp.task import parse_task
from wire.client import (
    CategoricalEncoder,
    RealEncoder,
    RecordEncoder,
    SparseEncoder,
    client_params_document,
    make_client_encoder,
)
from wire.vectors import memo_wire_params, numeric_wire_params, wire_params

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier

FREQ = {"task_id": "f", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16}
NUM = {"task_id": "n", "kind": "numeric", "mechanism": "piecewise", "epsilon": 1.0,
       "attributes": [{"name": "x", "low": 0.0, "high": 10.0}]}


def test_frequency_task_encodes_categories_with_its_oracle() -> None:
    enc = make_client_encoder(parse_task(FREQ))
    assert isinstance(enc, CategoricalEncoder) and enc.value_type is int and not enc.memoized
    assert enc.memo_keys == 17
    assert enc.wire_params() == wire_params(enc.mechanism)
    reports = enc.encode(np.arange(8) % 16, rng=np.random.default_rng(1))
    assert len(reports) == 8 and reports.seeds is not None


def test_memoized_frequency_task_reads_the_memo_procedure() -> None:
    enc = make_client_encoder(parse_task({**FREQ, "mechanism": "memo-grr"}))
    assert enc.memoized and enc.wire_params() == memo_wire_params(enc.mechanism)


def test_numeric_task_encodes_reals() -> None:
    enc = make_client_encoder(parse_task(NUM))
    assert isinstance(enc, RealEncoder) and enc.value_type is float and enc.memo_keys == 0
    assert enc.wire_params() == numeric_wire_params(enc.mechanism)
    assert client_params_document(parse_task(NUM))["params"]["mechanism"] == "piecewise"


def test_several_attributes_have_no_byte_procedure_and_say_why() -> None:
    task = parse_task({**NUM, "attributes": [{"name": "x", "low": 0.0, "high": 1.0},
                                             {"name": "y", "low": 0.0, "high": 1.0}]})
    with pytest.raises(ValueError, match="no client byte procedure .*several attributes"):
        make_client_encoder(task).wire_params()


def test_sparse_and_range_tasks_get_their_encoders() -> None:
    sparse = parse_task({"task_id": "s", "kind": "sparse", "mechanism": "svme", "epsilon": 1.0,
                         "domain_size": 1000, "sparsity": 4})
    assert isinstance(make_client_encoder(sparse), SparseEncoder)
    rng_task = parse_task({"task_id": "r", "mechanism": "hdg", "epsilon": 1.0, "expected_users": 1000,
                           "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 8}]})
    enc = make_client_encoder(rng_task)
    assert isinstance(enc, RecordEncoder)
    with pytest.raises(ValueError, match="no client byte procedure"):
        enc.wire_params()


def test_central_dp_task_has_no_device_client() -> None:
    task = parse_task({"task_id": "b", "kind": "batch_queries", "mechanism": "identity",
                       "epsilon": 1.0, "delta": 1e-6,
                       "attributes": [{"name": "a", "domain_size": 4}]})
    with pytest.raises(ValueError, match="no device client"):
        make_client_encoder(task)
