"""Generates the wire-format conformance vectors (``schemas/vectors/v1/*.json``; ``docs/wire_format.md``).

    python tools/vectors/generate.py            # (re)writes schemas/vectors/v1/
    python tools/vectors/generate.py --check    # exit status 1 when the committed files differ

Three kinds of file, all deterministic (explicit seeds):

* ``encode_<mechanism>.json``: per parameter set, the task, the client parameters (``wire_params``) and
  vectors ``(value, seed_u64, random bytes hex) -> report`` (JSON form; ``hash`` is ``h(value)`` for OLH,
  BLH) from :func:`wire.vectors.encode_bytes`;
  ``random`` holds exactly the bytes the report consumes.
* ``aggregate_<mechanism>.json``: a list of JSON reports -> the accepted count, support counts and
  estimates of the project's oracle (``wire.validate.ReportValidator``, ``oracle.add``, ``estimate``).
* ``memo_<mechanism>.json`` (memoized mechanisms): per parameter set, the task, ``memo_wire_params`` and
  vectors ``(secret hex, value, instantaneous random bytes hex) -> report`` with the memoization key and
  permanent response (:func:`wire.vectors.memo_report_bytes`).
* ``dead_letters.json``: refused reports -> the dead-letter reason (the JSON-form mapping
  :func:`wire.json_form.report_from_json`, then ``ReportValidator``).
* ``encode_numeric_<mechanism>.json``, ``aggregate_numeric_<mechanism>.json``, ``dead_letters_numeric.json``:
  the numeric mechanisms' grid wire (report schema version 3, :func:`wire.vectors.numeric_encode_bytes`):
  exact integer messages, so the reports are compared exactly; the dead letters include off-grid values.
* ``encode_sparse_<mechanism>.json``, ``aggregate_sparse_<mechanism>.json``, ``dead_letters_sparse.json``:
  the sparse-vector mechanisms (:func:`wire.vectors.sparse_encode_bytes`; input entries, public seed and
  the hash of each entry, random bytes -> report; reports -> exact per-item sums and the estimates).
* ``encode_pem.json``, ``dead_letters_pem.json``: heavy hitters (:func:`wire.vectors.pem_encode_bytes`;
  input bytes, public seed, random bytes -> level, ``H(b)`` and report; inputs a client refuses).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ldp.aggregate import make_aggregator  # noqa: E402
from ldp.kinds.sparse.aggregate import SparseAggregator  # noqa: E402
from ldp.numeric.mechanisms import make_numeric_mechanism  # noqa: E402
from ldp.reports import Reports  # noqa: E402
from ldp.sparse.accumulate import TableAccumulator, table_sums  # noqa: E402
from ldp.sparse.vectors import SparseVectors  # noqa: E402
from ldp.task import parse_task  # noqa: E402
from wire.json_form import WireFormatError, report_from_json, reports_to_json  # noqa: E402
from wire.validate import ReportValidator, TaskReportValidator  # noqa: E402
from wire.vectors import (  # noqa: E402
    MEMO_BYTE_MECHANISMS,
    WIRE_VECTORS_VERSION,
    bytes_needed,
    encode_bytes,
    memo_report_bytes,
    memo_wire_params,
    numeric_encode_bytes,
    numeric_wire_params,
    pem_encode_bytes,
    pem_wire_params,
    sparse_encode_bytes,
    sparse_hash_one,
    sparse_wire_params,
    wire_params,
)

OUT_DIR = ROOT / "schemas" / "vectors" / f"v{WIRE_VECTORS_VERSION}"
EVENT_MS = 1767225600000  # 2026-01-01T00:00:00Z
#: tolerance of every float in the aggregate vectors: |got - want| <= TOL * max(1, |want|)
TOLERANCE = 1e-12
#: encode vectors per parameter set (plus the candidate with the most rejection redraws)
VECTORS_PER_CASE = 8

#: parameter sets per mechanism: extra task keys beyond task_id and mechanism
CASES: dict[str, list[dict[str, Any]]] = {
    "grr": [{"epsilon": 1.0, "domain_size": 4}, {"epsilon": 0.5, "domain_size": 10},
            {"epsilon": 4.0, "domain_size": 100}],
    "olh": [{"epsilon": 1.0, "domain_size": 16}, {"epsilon": 2.0, "domain_size": 1000},
            {"epsilon": 4.0, "domain_size": 64, "hash": {"g": 8}}],
    "blh": [{"epsilon": 1.0, "domain_size": 8}, {"epsilon": 0.5, "domain_size": 1000}],
    "oue": [{"epsilon": 1.0, "domain_size": 8}, {"epsilon": 4.0, "domain_size": 20}],
    "sue": [{"epsilon": 1.0, "domain_size": 8}, {"epsilon": 2.0, "domain_size": 13}],
    "hr": [{"epsilon": 1.0, "domain_size": 7}, {"epsilon": 2.0, "domain_size": 16}],
    "ss": [{"epsilon": 1.0, "domain_size": 8}, {"epsilon": 0.5, "domain_size": 16},
           {"epsilon": 1.0, "domain_size": 100}],
}
#: seeds every OLH / BLH case includes: 0, 2**64 - 1 (signed -1) and 2**63 (signed minimum)
EDGE_SEEDS = (0, (1 << 64) - 1, 1 << 63)
#: memoized mechanisms' parameter sets (``epsilon`` is ``epsilon_inf``); the last of each has
#: ``epsilon_1 = epsilon``: no instantaneous stage, the report is the permanent response
MEMO_CASES: dict[str, list[dict[str, Any]]] = {
    "memo-grr": [{"epsilon": 2.0, "domain_size": 10}, {"epsilon": 1.0, "domain_size": 4,
                 "params": {"epsilon_1": 0.8}},
                 {"epsilon": 2.0, "domain_size": 6, "params": {"epsilon_1": 2.0}}],
    "rappor": [{"epsilon": 2.0, "domain_size": 10}, {"epsilon": 4.0, "domain_size": 13,
               "params": {"epsilon_1": 1.0, "permanent": "oue"}},
               {"epsilon": 1.0, "domain_size": 8, "params": {"epsilon_1": 1.0}}],
    "memo-olh": [{"epsilon": 2.0, "domain_size": 100}, {"epsilon": 4.0, "domain_size": 64,
                 "params": {"epsilon_1": 2.0, "g": 8}}, {"epsilon": 1.0, "domain_size": 16,
                 "params": {"epsilon_1": 1.0}}],
    "loloha": [{"epsilon": 2.0, "domain_size": 100}, {"epsilon": 1.0, "domain_size": 32,
               "params": {"epsilon_1": 0.5, "g": 2}}, {"epsilon": 2.0, "domain_size": 16,
               "params": {"epsilon_1": 2.0}}],
}
#: memo vectors per parameter set: VALUES_PER_SECRET values for each of SECRETS_PER_CASE secrets
SECRETS_PER_CASE, VALUES_PER_SECRET = 3, 3


#: numeric mechanisms' parameter sets (``make_numeric_mechanism`` arguments beyond the name)
NUMERIC_CASES: dict[str, list[dict[str, Any]]] = {
    "duchi": [{"epsilon": 1.0, "low": 0.0, "high": 1.0}, {"epsilon": 0.5, "low": -5.0, "high": 20.0,
              "moments": 2}],
    "piecewise": [{"epsilon": 1.0, "low": 0.0, "high": 1.0}, {"epsilon": 4.0, "low": 10.0, "high": 100.0,
                  "moments": 2}],
    "hybrid": [{"epsilon": 2.0, "low": 0.0, "high": 1.0}, {"epsilon": 0.5, "low": 0.0, "high": 1.0}],
    "laplace": [{"epsilon": 1.0, "low": 0.0, "high": 1.0}, {"epsilon": 0.1, "low": -1.0, "high": 1.0,
                "moments": 2}],
    "one-bit-mean": [{"epsilon": 1.0, "low": 0.0, "high": 1.0}, {"epsilon": 2.0, "low": 0.0, "high": 50.0,
                     "moments": 2}],
    "square-wave": [{"epsilon": 1.0, "low": 0.0, "high": 1.0, "bins": 16},
                    {"epsilon": 3.0, "low": -2.0, "high": 2.0, "bins": 16}],
}
#: random bytes per numeric report (Laplace's geometric runs read about ``2 / eps`` words; the rest at most 5)
NUMERIC_RANDOM_BYTES = 8 * 256


def _numeric_reports(doc_reports: list[dict[str, Any]]) -> Reports:
    """JSON-form numeric reports as :class:`Reports` (``reals`` of one double, ``values``)."""
    reals = [r["reals"][0] for r in doc_reports] if doc_reports[0]["reals"] is not None else None
    vals = [r["value"] for r in doc_reports] if doc_reports[0]["value"] is not None else None
    return Reports(reals=None if reals is None else np.array(reals, dtype=np.float64),
                   values=None if vals is None else np.array(vals, dtype=np.int64))


def _numeric_values(mech: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    span = mech.high - mech.low
    x = rng.uniform(mech.low - 0.1 * span, mech.high + 0.1 * span, size=n)  # some outside: clipped
    x[:3] = (mech.low, mech.high, 0.5 * (mech.low + mech.high))
    return x


def _numeric_encode_case(name: str, index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    mech = make_numeric_mechanism(name, **extra)
    n = 12
    x = _numeric_values(mech, n, rng)
    raw = rng.integers(0, 256, size=(n, NUMERIC_RANDOM_BYTES), dtype=np.uint8)
    reports, used = numeric_encode_bytes(mech, x, raw)
    task_id = f"wire-{name}-{index}"
    records = reports_to_json(task_id, reports, EVENT_MS + 1000 * np.arange(n), schema_version=3)
    vectors = [{"value": float(x[i]), "random": raw[i, : used[i]].tobytes().hex(),
                "event_time": EVENT_MS + 1000 * i, "report": records[i]} for i in range(n)]
    return {"mechanism": {"name": name, **extra}, "params": numeric_wire_params(mech), "vectors": vectors}


def _numeric_aggregate_case(name: str, index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    mech = make_numeric_mechanism(name, **extra)
    n = 40
    x = _numeric_values(mech, n, rng)
    raw = rng.integers(0, 256, size=(n, NUMERIC_RANDOM_BYTES), dtype=np.uint8)
    reports, _ = numeric_encode_bytes(mech, x, raw)
    records = reports_to_json(f"wire-{name}-{index}", reports, EVENT_MS + 1000 * np.arange(n),
                              schema_version=3)
    acc = mech.add(mech.create_accumulator(), _numeric_reports(records))
    est = mech.estimate(acc, distribution=False)
    return {"mechanism": {"name": name, **extra}, "reports": records, "n": int(est.n),
            "totals_fixed_point": [str(t) for t in acc.total], "mean": est.mean, "mean_std": est.mean_std,
            "variance": est.variance}


def _numeric_dead_letter_cases() -> list[dict[str, Any]]:
    """Numeric reports refused by the mechanism's ``validate`` (``reason``; null: accepted)."""
    out: list[dict[str, Any]] = []

    def case(what: str, name: str, extra: dict[str, Any], reals: Any, value: Any) -> None:
        mech = make_numeric_mechanism(name, **extra)
        rep = Reports(reals=None if reals is None else np.asarray(reals),
                      values=None if value is None else np.asarray(value))
        _, reasons = mech.validate(rep)
        out.append({"what": what, "mechanism": {"name": name, **extra},
                    "reals": None if reals is None else [float(r) for r in reals],
                    "values": value, "reason": reasons[0]})

    case("duchi message 1", "duchi", {"epsilon": 1.0}, [1.0], None)
    case("duchi message 0", "duchi", {"epsilon": 1.0}, [0.0], None)
    c = make_numeric_mechanism("duchi", epsilon=1.0).c
    case("duchi the retired float form +C", "duchi", {"epsilon": 1.0}, [c], None)
    case("duchi message 2", "duchi", {"epsilon": 1.0}, [2.0], None)
    case("duchi no reals", "duchi", {"epsilon": 1.0}, None, [0])
    case("duchi two moments without a slot", "duchi", {"epsilon": 1.0, "moments": 2}, [1.0], None)
    case("duchi slot 2", "duchi", {"epsilon": 1.0, "moments": 2}, [1.0], [2])
    pm = make_numeric_mechanism("piecewise", epsilon=1.0)
    top = float(pm.grid.cells - 1)
    case("piecewise last cell", "piecewise", {"epsilon": 1.0}, [top], None)
    case("piecewise one past the last cell", "piecewise", {"epsilon": 1.0}, [top + 1.0], None)
    case("piecewise off the grid (half a cell)", "piecewise", {"epsilon": 1.0}, [100.5], None)
    case("piecewise off the grid (one ulp above 1)", "piecewise", {"epsilon": 1.0}, [1.0 + 2.0**-52], None)
    case("piecewise negative zero", "piecewise", {"epsilon": 1.0}, [-0.0], None)
    case("piecewise the retired float form 0.9 C", "piecewise", {"epsilon": 1.0}, [0.9 * pm.c], None)
    case("piecewise infinity", "piecewise", {"epsilon": 1.0}, [float("inf")], None)
    hy = make_numeric_mechanism("hybrid", epsilon=2.0)
    case("hybrid Duchi message +C", "hybrid", {"epsilon": 2.0}, [float(hy.message_range()[1])], None)
    case("hybrid beyond its messages", "hybrid", {"epsilon": 2.0}, [float(hy.message_range()[1] + 1)], None)
    case("hybrid negative message", "hybrid", {"epsilon": 2.0}, [-1.0], None)
    lap = make_numeric_mechanism("laplace", epsilon=1.0)
    lo, hi = lap.message_range()
    case("laplace negative message inside the tail bound", "laplace", {"epsilon": 1.0}, [-70000.0], None)
    case("laplace far tail", "laplace", {"epsilon": 1.0}, [float(hi + 1)], None)
    case("laplace far negative tail", "laplace", {"epsilon": 1.0}, [float(lo - 1)], None)
    case("laplace off the grid", "laplace", {"epsilon": 1.0}, [0.25], None)
    case("one-bit-mean bit 1", "one-bit-mean", {"epsilon": 1.0}, None, [1])
    case("one-bit-mean value 2", "one-bit-mean", {"epsilon": 1.0}, None, [2])
    case("one-bit-mean two moments value 4", "one-bit-mean", {"epsilon": 1.0, "moments": 2}, None, [4])
    sw = make_numeric_mechanism("square-wave", epsilon=1.0)
    case("square-wave first cell", "square-wave", {"epsilon": 1.0}, [0.0], None)
    case("square-wave the retired float form -b", "square-wave", {"epsilon": 1.0}, [-sw.sw.b], None)
    case("square-wave beyond its cells", "square-wave", {"epsilon": 1.0}, [float(sw.grid.cells)], None)
    return out


#: sparse-vector mechanisms' parameter sets (task keys beyond task_id, kind and mechanism)
SPARSE_CASES: dict[str, list[dict[str, Any]]] = {
    "svme": [
        {"epsilon": 1.0, "domain_size": 64, "sparsity": 16, "privacy": "event"},  # Laplace, b = 4
        {"epsilon": 1.0, "domain_size": 16, "sparsity": 4},  # Duchi, b = 1
        {"epsilon": 2.0, "domain_size": 32, "sparsity": 4, "privacy": "event", "values": "binary"},
        {"epsilon": 1.0, "domain_size": 64, "sparsity": 16, "privacy": "event",
         "params": {"hash_family": "mix64"}},
        {"epsilon": 0.5, "domain_size": 40, "sparsity": 9, "privacy": "event",
         "params": {"hash_family": "blake2b"}},
    ],
    "kfold": [{"epsilon": 1.0, "domain_size": 16, "sparsity": 4, "privacy": "event"},
              {"epsilon": 2.0, "domain_size": 32, "sparsity": 3, "params": {"hash_family": "mix64"}}],
    "sampling": [{"epsilon": 1.0, "domain_size": 16, "sparsity": 4},
                 {"epsilon": 0.5, "domain_size": 100, "sparsity": 2, "params": {"hash_family": "blake2b"}}],
    "gaussian": [{"epsilon": 0.5, "domain_size": 8, "sparsity": 2},
                 {"epsilon": 2.0, "domain_size": 5, "sparsity": 2, "params": {"calibration": "analytic"}}],
    "harmony": [{"epsilon": 1.0, "domain_size": 16, "sparsity": 4},
                {"epsilon": 4.0, "domain_size": 200, "sparsity": 3, "values": "binary"}],
    "pckv": [{"epsilon": 1.0, "domain_size": 16, "sparsity": 4},
             {"epsilon": 2.0, "domain_size": 50, "sparsity": 2, "values": "binary"}],
}
#: mechanisms whose reports carry a public seed
SEEDED_SPARSE = ("svme", "kfold", "sampling")
#: tolerance of the Gaussian reals in other languages (the only ones through ``log``): one float32 ulp,
#: ``|got - want| <= SPARSE_REAL_TOLERANCE * max(1, |want|)``; Python reproduces them exactly
SPARSE_REAL_TOLERANCE = 2.0**-22


def _sparse_task(mechanism: str, index: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": f"wire-{mechanism}-{index}", "kind": "sparse", "mechanism": mechanism, **extra}


def sparse_aggregator(task: Any) -> SparseAggregator:
    """The aggregator of a sparse vector task over every item (the whole-vector table where it exists)."""
    try:
        return SparseAggregator(task)
    except ValueError:
        return SparseAggregator(task, items=np.arange(task.domain_size))


def _sparse_inputs(task: Any, n: int, rng: np.random.Generator, skew: bool = False) -> list[dict[str, list]]:
    """``n`` input vectors as ``{"items": [...], "values": [...]}`` in a shuffled order: from 0 to k + 2
    entries (some clients truncated), some zero values, real values partly outside [-1, 1] (clipped); the
    first has k + 2 non-zeros (truncated), the second none (a pure-noise report)."""
    d, k = task.domain_size, task.sparsity
    out = []
    for i in range(n):
        m = {0: min(d, k + 2), 1: 0}.get(i, min(d, int(rng.integers(0, k + 3))))
        pool = max(m, d // 3) if skew else d
        items = rng.choice(pool, size=m, replace=False).astype(int).tolist()
        zero = rng.random(m) < (0.1 if i else 0.0)
        if task.values == "binary":
            vals = np.where(zero, 0.0, 1.0).tolist()
        else:
            vals = rng.uniform(-1.3, 1.3, size=m)
            vals[zero] = 0.0
            vals = vals.tolist()
        out.append({"items": items, "values": vals})
    return out


def _as_vectors(inputs: list[dict[str, list]]) -> SparseVectors:
    counts = [len(x["items"]) for x in inputs]
    items = [i for x in inputs for i in x["items"]]
    vals = [v for x in inputs for v in x["values"]]
    return SparseVectors(np.concatenate(([0], np.cumsum(counts))), np.array(items, dtype=np.uint64),
                         np.array(vals, dtype=np.float64))


def _sparse_width(params: dict[str, Any]) -> int:
    """Random bytes a report gets (far more than any report of the vectors consumes)."""
    return 8 * (2 * params["k"] + 8 * params.get("bins", 1) + 4 * params["d"] + 64)


def _sparse_encode_case(mechanism: str, index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    task_json = _sparse_task(mechanism, index, extra)
    task = parse_task(task_json)
    mech = task.make_mechanism()
    params = sparse_wire_params(mech)
    n = 8
    inputs = _sparse_inputs(task, n, rng)
    raw = rng.integers(0, 256, size=(n, _sparse_width(params)), dtype=np.uint8)
    seeds = None
    if mechanism in SEEDED_SPARSE:
        seeds = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
        seeds[: len(EDGE_SEEDS)] = np.array(EDGE_SEEDS, dtype=np.uint64)
    reports, used = sparse_encode_bytes(mech, _as_vectors(inputs), raw, seeds)
    records = reports_to_json(task.task_id, reports, EVENT_MS + 1000 * np.arange(n))
    bins = params.get("bins", 1)
    vectors = []
    for i in range(n):
        hashes = None
        if seeds is not None:
            hashes = [list(sparse_hash_one(params["family"], int(seeds[i]), x, bins, task.domain_size))
                      for x in inputs[i]["items"]]
        vectors.append({
            "input": inputs[i],
            "seed_u64": None if seeds is None else str(int(seeds[i])),
            "hashes": hashes,
            "random": raw[i, : used[i]].tobytes().hex(),
            "event_time": EVENT_MS + 1000 * i,
            "report": records[i],
        })
    return {"task": task_json, "params": params, "vectors": vectors}


def sparse_accumulator_doc(agg: SparseAggregator, acc: Any) -> dict[str, Any]:
    """The language-neutral content of a sparse accumulator and its estimate: ``n``, the exact per-item
    sums (``sum_i s_i(x) code_i[h_i(x)]``; Harmony and PCKV ``n1 - n2``, the Gaussian's float sums),
    SVME's ``sumsq``, PCKV's ``pos`` (``n1``), then ``mean`` and ``variance`` per item."""
    mech = agg.mechanism
    est = agg.estimate(acc)
    if hasattr(mech, "raw_sums"):
        _, sums = mech.raw_sums(acc)
    elif isinstance(acc, TableAccumulator):
        _, sums = table_sums(acc, 1, mech.d)
    else:
        sums = acc.sums
    out: dict[str, Any] = {"n": int(acc.n), "items": [int(x) for x in est.items]}
    if mech.name == "gaussian":
        out["sums"] = np.asarray(sums, dtype=np.float64).tolist()
    else:
        out["sums"] = [int(x) for x in sums]
    if mech.name == "svme":
        out["sumsq"] = int(acc.sumsq)
        out["mean_norm2"] = est.mean_norm2
    if mech.name == "pckv":
        out["pos"] = [int(x) for x in acc.pos]
    out["mean"] = np.asarray(est.mean, dtype=np.float64).tolist()
    out["variance"] = np.asarray(est.variance, dtype=np.float64).tolist()
    return out


def _refusals(
    cases: list[tuple[str, dict[str, Any], dict[str, Any]]], validator: Callable[[Any], ReportValidator]
) -> list[dict[str, Any]]:
    """Each ``(what, task, JSON report)`` case with the stage that refuses it (``json``: the JSON form,
    ``validator``: the aggregator's checks) and the dead-letter reason (None: accepted)."""
    out = []
    for what, task_json, report in cases:
        task = parse_task(task_json)
        stage, reason = "validator", None
        try:
            rec = report_from_json(report)
        except WireFormatError as exc:
            stage, reason = "json", exc.reason
        else:
            batch = validator(task).validate([rec])
            if batch.dead_letters:
                reason = batch.dead_letters[0]["reason"]
        out.append({"what": what, "task": task_json, "report": report, "stage": stage, "reason": reason})
    return out


def sparse_validator(task: Any) -> ReportValidator:
    return ReportValidator(task, sparse_aggregator(task).validation_oracle(0))


def _sparse_aggregate_case(
    mechanism: str, index: int, extra: dict[str, Any], rng: np.random.Generator
) -> dict:
    task_json = _sparse_task(mechanism, index, extra)
    task = parse_task(task_json)
    mech = task.make_mechanism()
    params = sparse_wire_params(mech)
    n = 30
    inputs = _sparse_inputs(task, n, rng, skew=True)
    raw = rng.integers(0, 256, size=(n, _sparse_width(params)), dtype=np.uint8)
    seeds = None
    if mechanism in SEEDED_SPARSE:
        seeds = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
    reports, _ = sparse_encode_bytes(mech, _as_vectors(inputs), raw, seeds)
    records = reports_to_json(task.task_id, reports, EVENT_MS + 1000 * np.arange(n))
    batch = sparse_validator(task).validate([report_from_json(r) for r in records])
    if batch.dead_letters:
        raise RuntimeError(f"{task.task_id}: a generated report was refused: {batch.dead_letters[0]}")
    agg = sparse_aggregator(task)
    acc = agg.add(0, agg.create_accumulator(0), batch.reports)
    return {"task": task_json, "reports": records, **sparse_accumulator_doc(agg, acc)}


def _sparse_dead_letter_cases() -> list[dict[str, Any]]:
    """Refused (and a few accepted) sparse reports, each a small change of a valid report."""
    lap = _sparse_task("svme", 0, SPARSE_CASES["svme"][0])
    duchi = _sparse_task("svme", 1, SPARSE_CASES["svme"][1])
    kfold = _sparse_task("kfold", 0, SPARSE_CASES["kfold"][0])
    harmony = _sparse_task("harmony", 0, SPARSE_CASES["harmony"][0])
    pckv = _sparse_task("pckv", 0, SPARSE_CASES["pckv"][0])
    gauss = _sparse_task("gaussian", 0, SPARSE_CASES["gaussian"][0])
    top = sparse_wire_params(parse_task(lap).make_mechanism())["max_code"]

    def base(task: dict[str, Any], **payload: Any) -> dict[str, Any]:
        rec = {"task_id": task["task_id"], "schema_version": 2, "event_time": EVENT_MS, "group": 0,
               "value": None, "seed": None, "bits": None, "items": None, "reals": None, "client_id": None}
        rec.update(payload)
        return rec

    seed = "-6406931151052310911"
    s = base(lap, seed=seed, reals=[3.0, -1.0, 0.0, float(top)])
    u = base(duchi, seed=seed, reals=[1.0])
    f = base(kfold, seed=seed, reals=[1.0, -1.0, -1.0, 1.0])
    h = base(harmony, value=15, reals=[-1.0])
    p = base(pckv, value=16 + 3, reals=[1.0])
    g = base(gauss, reals=[0.5, -3.25, 12.0, 0.0, 1e300, -7.5, 2.0, 0.125])
    cases: list[tuple[str, dict[str, Any], object]] = [
        ("a valid SVME report (codes up to max_code)", lap, s),
        ("SVME codes written as JSON integers", lap, {**s, "reals": [3, -1, 0, top]}),
        ("SVME code max_code + 1", lap, {**s, "reals": [0.0, 0.0, 0.0, float(top + 1)]}),
        ("SVME code -(max_code + 1)", lap, {**s, "reals": [float(-top - 1), 0.0, 0.0, 0.0]}),
        ("SVME code not an integer", lap, {**s, "reals": [0.5, 0.0, 0.0, 0.0]}),
        ("SVME: 3 codes for 4 bins", lap, {**s, "reals": [0.0, 0.0, 0.0]}),
        ("SVME: reals absent", lap, {**s, "reals": None}),
        ("SVME: seed absent", lap, {**s, "seed": None}),
        ("SVME: seed a JSON number", lap, {**s, "seed": 5}),
        ("SVME: a value (unused payload)", lap, {**s, "value": 1}),
        ("SVME: a code that is a string", lap, {**s, "reals": ["1", 0.0, 0.0, 0.0]}),
        ("a valid SVME Duchi report", duchi, u),
        ("SVME Duchi bin 0", duchi, {**u, "reals": [0.0]}),
        ("SVME Duchi bin 3", duchi, {**u, "reals": [3.0]}),
        ("a valid k-fold report (k bits)", kfold, f),
        ("k-fold bit 2", kfold, {**f, "reals": [1.0, 2.0, -1.0, 1.0]}),
        ("k-fold: k - 1 bits", kfold, {**f, "reals": [1.0, -1.0, 1.0]}),
        ("a valid Harmony report", harmony, h),
        ("Harmony item = d", harmony, {**h, "value": 16}),
        ("Harmony item negative", harmony, {**h, "value": -1}),
        ("Harmony bit 0.5", harmony, {**h, "reals": [0.5]}),
        ("Harmony with a seed (unused payload)", harmony, {**h, "seed": seed}),
        ("Harmony: value absent", harmony, {**h, "value": None}),
        ("a valid PCKV report (a dummy key d + k - 1)", pckv, p),
        ("PCKV key d + k", pckv, {**p, "value": 16 + 4}),
        ("PCKV bit 0", pckv, {**p, "reals": [0.0]}),
        ("a valid Gaussian report (d doubles, any finite values)", gauss, g),
        ("Gaussian: d - 1 doubles", gauss, {**g, "reals": g["reals"][:-1]}),
        ("Gaussian: d + 1 doubles", gauss, {**g, "reals": [*g["reals"], 0.0]}),
    ]
    return _refusals(cases, sparse_validator)


#: heavy-hitters (PEM) parameter sets: task keys beyond task_id, kind and mechanism
PEM_CASES: list[dict[str, Any]] = [
    {"epsilon": 4.0, "max_length": 6},
    {"epsilon": 1.0, "max_length": 3},
    {"epsilon": 2.0, "max_length": 9, "params": {"sketch_seed": 7}},
    {"epsilon": 0.5, "max_length": 1},
]
#: inputs every PEM case encodes (when they fit in max_length): the empty string, a NUL byte after
#: "ab" (told from "ab" only by the length trailer), multi-byte UTF-8, and a byte that is not UTF-8
PEM_INPUTS: tuple[bytes, ...] = (b"", b"a", b"ab", b"ab\x00", "\u00e9".encode(), "\u65e5\u672c".encode(),
                                  b"\xff\x00", b"zz")


def _pem_task(index: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": f"wire-pem-{index}", "kind": "heavy_hitters", "mechanism": "pem", **extra}


def _pem_input(value: bytes) -> dict[str, Any]:
    try:
        text: str | None = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"value_hex": value.hex(), "value_text": text}


def _pem_values(b: int, n: int, rng: np.random.Generator) -> list[bytes]:
    fixed = [v for v in PEM_INPUTS if len(v) <= b]
    fixed.append(bytes(rng.integers(0x61, 0x7B, size=b, dtype=np.uint8)))  # a value of max_length bytes
    rand = [bytes(rng.integers(0, 256, size=int(rng.integers(0, b + 1)), dtype=np.uint8))
            for _ in range(n - len(fixed))]
    return fixed + rand


def _pem_encode_case(index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    task_json = _pem_task(index, extra)
    task = parse_task(task_json)
    pem = task.make_mechanism()
    n = 96
    values = _pem_values(pem.max_length, n, rng)
    raw = [rng.integers(0, 256, size=8 * 48, dtype=np.uint8).tobytes() for _ in range(n)]
    seeds = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
    seeds[1 : 1 + len(EDGE_SEEDS)] = np.array(EDGE_SEEDS, dtype=np.uint64)
    reports, used, hashes = pem_encode_bytes(pem, values, raw, seeds)
    pick = list(range(len([v for v in PEM_INPUTS if len(v) <= pem.max_length]) + 1))
    for j in range(len(pem.levels)):  # at least two reports of every level
        pick += [i for i in np.flatnonzero(reports.level == j).tolist() if i not in pick][:2]
    most = int(np.argmax(used))
    if most not in pick:
        pick.append(most)
    vectors = []
    for k, i in enumerate(pick):
        et = EVENT_MS + 1000 * k
        rec = reports_to_json(task.task_id, Reports(values=reports.y[i : i + 1].astype(np.int64),
                                                    seeds=reports.seed[i : i + 1]), et)[0]
        rec["group"] = int(reports.level[i])
        vectors.append({
            **_pem_input(values[i]), "seed_u64": str(int(seeds[i])), "level": int(reports.level[i]),
            "hash": hashes[i], "random": raw[i][: used[i]].hex(), "event_time": et, "report": rec,
        })
    too_long = [bytes(pem.max_length + 1), ("\u00e9" * pem.max_length).encode()]
    refused = [{**_pem_input(v), "reason": "longer than max_length"} for v in too_long]
    return {"task": task_json, "params": pem_wire_params(pem), "vectors": vectors, "refused_inputs": refused}


def _pem_validator(task: Any) -> TaskReportValidator:
    return TaskReportValidator(make_aggregator(task))


def _pem_dead_letter_cases() -> list[dict[str, Any]]:
    """Refused (and accepted) heavy-hitters reports, each a small change of a valid report."""
    task = _pem_task(0, PEM_CASES[0])
    levels = parse_task(task).make_mechanism().levels
    g, top = levels[0].g, len(levels) - 1
    r = {"task_id": task["task_id"], "schema_version": 2, "event_time": EVENT_MS, "group": 0,
         "value": g - 1, "seed": "-6406931151052310911", "bits": None, "items": None, "reals": None,
         "client_id": None}
    cases: list[tuple[str, dict[str, Any], object]] = [
        ("a valid report of level 0 (value g - 1)", task, r),
        ("a valid report of the verification level", task, {**r, "group": top}),
        ("group = the number of levels", task, {**r, "group": top + 1}),
        ("group negative", task, {**r, "group": -1}),
        ("value = g", task, {**r, "value": g}),
        ("value negative", task, {**r, "value": -1}),
        ("value not an integer", task, {**r, "value": 1.5}),
        ("value absent", task, {**r, "value": None}),
        ("seed absent", task, {**r, "seed": None}),
        ("seed a JSON number", task, {**r, "seed": 5}),
        ("seed 2**63", task, {**r, "seed": "9223372036854775808"}),
        ("bits present (unused payload)", task, {**r, "bits": _b64(b"\x01")}),
        ("items present (unused payload)", task, {**r, "items": [1]}),
    ]
    return _refusals(cases, _pem_validator)


def _task(mechanism: str, index: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": f"wire-{mechanism}-{index}", "mechanism": mechanism, **extra}


def _encode_case(mechanism: str, index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    task_json = _task(mechanism, index, extra)
    task = parse_task(task_json)
    oracle = task.make_oracle()
    d = oracle.d
    n = 64
    values = rng.integers(0, d, size=n)
    values[:2] = (0, d - 1)
    width = bytes_needed(oracle) + 8 * 64
    raw = rng.integers(0, 256, size=(n, width), dtype=np.uint8)
    seeds = None
    if mechanism in ("olh", "blh"):
        seeds = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
        seeds[: len(EDGE_SEEDS)] = np.array(EDGE_SEEDS, dtype=np.uint64)
    reports, used = encode_bytes(oracle, values, raw, seeds)
    pick = list(range(VECTORS_PER_CASE))
    most = int(np.argmax(used))
    if most not in pick:
        pick.append(most)
    records = reports_to_json(task.task_id, reports.take(np.array(pick)),
                              EVENT_MS + 1000 * np.arange(len(pick)))
    hashed = None if seeds is None else oracle.hash.hash(seeds, values)
    vectors = []
    for j, i in enumerate(pick):
        vectors.append({
            "value": int(values[i]),
            "seed_u64": None if seeds is None else str(int(seeds[i])),
            "hash": None if hashed is None else int(hashed[i]),
            "random": raw[i, : used[i]].tobytes().hex(),
            "event_time": EVENT_MS + 1000 * j,
            "report": records[j],
        })
    return {"task": task_json, "params": wire_params(oracle), "vectors": vectors}


def _memo_case(mechanism: str, index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    task_json = _task(mechanism, index, extra)
    task = parse_task(task_json)
    oracle = task.make_oracle()
    d = oracle.d
    vectors = []
    for s in range(SECRETS_PER_CASE):
        secret = rng.integers(0, 256, size=32, dtype=np.uint8).tobytes()
        values = rng.choice(d, size=VALUES_PER_SECRET, replace=False)
        if s == 0:
            values[:2] = (0, d - 1)
        for v in values.tolist():
            raw = rng.integers(0, 256, size=8 * (d + 64), dtype=np.uint8).tobytes()
            reports, used, info = memo_report_bytes(oracle, secret, task.task_id, v, raw)
            et = EVENT_MS + 1000 * len(vectors)
            vectors.append({
                "secret": secret.hex(), "value": int(v), "memo_key": info["memo_key"],
                "permanent": info["permanent"], "seed_u64": info.get("seed_u64"), "hash": info.get("hash"),
                "random": raw[:used].hex(), "event_time": et,
                "report": reports_to_json(task.task_id, reports, et)[0],
            })
    return {"task": task_json, "params": memo_wire_params(oracle), "vectors": vectors}


def _aggregate_case(mechanism: str, index: int, extra: dict[str, Any], rng: np.random.Generator) -> dict:
    task_json = _task(mechanism, index, extra)
    task = parse_task(task_json)
    oracle = task.make_oracle()
    d = oracle.d
    n = 40
    values = rng.integers(0, max(2, d // 3), size=n)  # skewed: the low third of the domain
    raw = rng.integers(0, 256, size=(n, bytes_needed(oracle) + 8 * 64), dtype=np.uint8)
    seeds = None
    if mechanism in ("olh", "blh"):
        seeds = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
    reports, _ = encode_bytes(oracle, values, raw, seeds)
    records = reports_to_json(task.task_id, reports, EVENT_MS + 1000 * np.arange(n))
    batch = ReportValidator(task).validate([report_from_json(r) for r in records])
    if batch.dead_letters:
        raise RuntimeError(f"{task.task_id}: a generated report was refused: {batch.dead_letters[0]}")
    acc = oracle.add(oracle.create_accumulator(), batch.reports)
    est = oracle.estimate(acc)
    return {
        "task": task_json,
        "reports": records,
        "n": int(est.n),
        "support_counts": [int(round(c)) for c in est.support_counts.tolist()],
        "frequencies": est.frequencies.tolist(),
        "variance": est.variance.tolist(),
        "variance_with_f": est.variance_with_f.tolist(),
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _dead_letter_cases() -> list[dict[str, Any]]:
    """Refused (and two accepted) reports of a few tasks, each a small change of a valid report."""
    grr = {"task_id": "wire-dl-grr", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4, "n_groups": 2}
    olh = {"task_id": "wire-dl-olh", "mechanism": "olh", "epsilon": 1.0, "domain_size": 16}
    oue = {"task_id": "wire-dl-oue", "mechanism": "oue", "epsilon": 1.0, "domain_size": 12}
    ss = {"task_id": "wire-dl-ss", "mechanism": "ss", "epsilon": 1.0, "domain_size": 8}
    hr = {"task_id": "wire-dl-hr", "mechanism": "hr", "epsilon": 1.0, "domain_size": 7}
    ids = {"task_id": "wire-dl-ids", "mechanism": "grr", "epsilon": 1.0, "domain_size": 4,
           "budget": {"reports_per_period": 1, "period_s": 86400, "client_ids": True}}

    def base(task: dict[str, Any], **payload: Any) -> dict[str, Any]:
        rec = {"task_id": task["task_id"], "schema_version": 2, "event_time": EVENT_MS, "group": 0,
               "value": None, "seed": None, "bits": None, "items": None, "reals": None, "client_id": None}
        rec.update(payload)
        return rec

    def drop(rec: dict[str, Any], key: str) -> dict[str, Any]:
        return {k: v for k, v in rec.items() if k != key}

    g = base(grr, value=2)
    o = base(olh, value=1, seed="-6406931151052310911")
    u = base(oue, bits=_b64(bytes([0b00000101, 0b00000001])))
    s = base(ss, items=[1, 5])
    h = base(hr, value=3)
    cid = _b64(bytes(range(32)))
    cases: list[tuple[str, dict[str, Any], object]] = [
        ("a valid GRR report", grr, g),
        ("a valid GRR report, group 1, members left out", grr,
         drop(drop({**g, "group": 1}, "bits"), "client_id")),
        ("not a JSON object", grr, [g]),
        ("schema version 1", grr, {**g, "schema_version": 1}),
        ("schema_version null", grr, {**g, "schema_version": None}),
        ("task_id absent", grr, drop(g, "task_id")),
        ("another task", grr, {**g, "task_id": "other"}),
        ("event_time absent", grr, drop(g, "event_time")),
        ("event_time negative", grr, {**g, "event_time": -1}),
        ("event_time in 2200", grr, {**g, "event_time": 7258118400000}),
        ("event_time a string", grr, {**g, "event_time": "2026-01-01T00:00:00Z"}),
        ("group = n_groups", grr, {**g, "group": 2}),
        ("group negative", grr, {**g, "group": -1}),
        ("group null", grr, {**g, "group": None}),
        ("value null", grr, {**g, "value": None}),
        ("value not an integer", grr, {**g, "value": 1.5}),
        ("value a boolean", grr, {**g, "value": True}),
        ("value = d", grr, {**g, "value": 4}),
        ("value negative", grr, {**g, "value": -1}),
        ("a payload member the mechanism does not use", grr, {**g, "items": [1]}),
        ("an unknown member", grr, {**g, "extra": 1}),
        ("client_id of 65 bytes", grr, {**g, "client_id": _b64(bytes(65))}),
        ("client_id empty", grr, {**g, "client_id": ""}),
        ("client_id not base64", grr, {**g, "client_id": "not base64!"}),
        ("client_id absent where the budget counts clients", ids, {**g, "task_id": ids["task_id"]}),
        ("client_id present where the budget counts clients", ids,
         {**g, "task_id": ids["task_id"], "client_id": cid}),
        ("a valid OLH report", olh, o),
        ("seed absent", olh, drop(o, "seed")),
        ("seed a JSON number", olh, {**o, "seed": 12345}),
        ("seed with a leading zero", olh, {**o, "seed": "012345"}),
        ("seed -0", olh, {**o, "seed": "-0"}),
        ("seed 2**63", olh, {**o, "seed": "9223372036854775808"}),
        ("seed -(2**63) - 1", olh, {**o, "seed": "-9223372036854775809"}),
        ("bucket = g", olh, {**o, "value": 4}),
        ("a valid OUE report", oue, u),
        ("bits of the wrong length", oue, {**u, "bits": _b64(bytes(3))}),
        ("bits padding set (bit 12 of d = 12)", oue, {**u, "bits": _b64(bytes([0, 0b00010000]))}),
        ("bits not padded base64", oue, {**u, "bits": "AAA"}),
        ("bits in the URL-safe alphabet", oue, {**u, "bits": "_-8="}),
        ("a valid SS report", ss, s),
        ("items not sorted", ss, {**s, "items": [5, 1]}),
        ("items repeated", ss, {**s, "items": [3, 3]}),
        ("items: too few", ss, {**s, "items": [3]}),
        ("item = d", ss, {**s, "items": [1, 8]}),
        ("items not integers", ss, {**s, "items": [1.0, 5.0]}),
        ("a valid HR report", hr, h),
        ("HR output = K", hr, {**h, "value": 8}),
    ]
    return _refusals(cases, ReportValidator)


def build_vectors() -> dict[str, Any]:
    """File name -> JSON document of every conformance vector file."""
    files: dict[str, Any] = {}
    head = {"vectors_version": WIRE_VECTORS_VERSION, "schema_version": 2}
    for k, (mechanism, cases) in enumerate(CASES.items()):
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(1, k)))
        files[f"encode_{mechanism}.json"] = {
            **head, "mechanism": mechanism,
            "cases": [_encode_case(mechanism, i, c, rng) for i, c in enumerate(cases)],
        }
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(2, k)))
        files[f"aggregate_{mechanism}.json"] = {
            **head, "mechanism": mechanism, "tolerance": TOLERANCE,
            "cases": [_aggregate_case(mechanism, i, c, rng) for i, c in enumerate(cases)],
        }
    for k, mechanism in enumerate(MEMO_BYTE_MECHANISMS):
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(3, k)))
        files[f"memo_{mechanism}.json"] = {
            **head, "mechanism": mechanism,
            "cases": [_memo_case(mechanism, i, c, rng) for i, c in enumerate(MEMO_CASES[mechanism])],
        }
    files["dead_letters.json"] = {**head, "cases": _dead_letter_cases()}
    for k, (name, cases) in enumerate(NUMERIC_CASES.items()):
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(4, k)))
        files[f"encode_numeric_{name}.json"] = {
            **head, "schema_version": 3, "mechanism": name,
            "cases": [_numeric_encode_case(name, i, c, rng) for i, c in enumerate(cases)],
        }
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(5, k)))
        files[f"aggregate_numeric_{name}.json"] = {
            **head, "schema_version": 3, "mechanism": name, "tolerance": TOLERANCE,
            "cases": [_numeric_aggregate_case(name, i, c, rng) for i, c in enumerate(cases)],
        }
    files["dead_letters_numeric.json"] = {**head, "schema_version": 3, "cases": _numeric_dead_letter_cases()}
    for k, (name, cases) in enumerate(SPARSE_CASES.items()):
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(6, k)))
        files[f"encode_sparse_{name}.json"] = {
            **head, "mechanism": name,
            **({"real_tolerance": SPARSE_REAL_TOLERANCE} if name == "gaussian" else {}),
            "cases": [_sparse_encode_case(name, i, c, rng) for i, c in enumerate(cases)],
        }
        rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(7, k)))
        files[f"aggregate_sparse_{name}.json"] = {
            **head, "mechanism": name, "tolerance": TOLERANCE,
            "cases": [_sparse_aggregate_case(name, i, c, rng) for i, c in enumerate(cases)],
        }
    files["dead_letters_sparse.json"] = {**head, "cases": _sparse_dead_letter_cases()}
    rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(8, 0)))
    files["encode_pem.json"] = {
        **head, "mechanism": "pem", "cases": [_pem_encode_case(i, c, rng) for i, c in enumerate(PEM_CASES)],
    }
    files["dead_letters_pem.json"] = {**head, "cases": _pem_dead_letter_cases()}
    return files


def _render(doc: Any, indent: str) -> str:
    if isinstance(doc, dict) and doc:
        inner = indent + " "
        items = [f"{inner}{json.dumps(k)}: {_render(v, inner)}" for k, v in sorted(doc.items())]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(doc, list) and any(isinstance(x, (dict, list)) for x in doc):
        inner = indent + " "
        return "[\n" + ",\n".join(inner + _render(x, inner) for x in doc) + "\n" + indent + "]"
    return json.dumps(doc, sort_keys=True)


def render(doc: Any) -> str:
    """The committed text of a vector file: sorted keys, one member per line, lists of numbers and
    strings on one line, a trailing newline."""
    return _render(doc, "") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=f"output directory (default {OUT_DIR})")
    args = ap.parse_args(argv)
    files = build_vectors()
    if args.check:
        bad = [name for name, doc in files.items() if not (args.out / name).is_file()
               or (args.out / name).read_text(encoding="utf-8") != render(doc)]
        stale = sorted({p.name for p in args.out.glob("*.json")} - set(files))
        for name in bad:
            print(f"differs from the generator: {args.out / name}", file=sys.stderr)
        for name in stale:
            print(f"not produced by the generator: {args.out / name}", file=sys.stderr)
        return 1 if bad or stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in files.items():
        (args.out / name).write_text(render(doc), encoding="utf-8")
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
