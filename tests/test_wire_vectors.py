"""Wire-format conformance vectors (``schemas/vectors/v1``) and the byte-driven reference encoders.

* The committed vector files are exactly what ``tools/vectors/generate.py`` produces.
* The Python core reproduces every vector: encode (bytes -> report, every byte consumed), aggregate
  (reports -> support counts exactly, estimates within the files' stated tolerance 1e-12 relative),
  dead letters (report -> reason).
* The byte-driven encoders are distributed as the oracles: thresholds within 2**-53 of ``p`` and ``q``;
  unbiased under the project's estimator (|error| < 5 standard deviations of Eq. 4 per value: a false
  failure rate of about 6e-7 per value); the eps-LDP audit of ``tests/test_oracles.py`` (one-sided
  Clopper-Pearson bounds at level 1e-6 per output, fail only when the ratio most favourable to the
  mechanism exceeds e^eps) at eps 0.5, 1 and 4; and a two-sample chi-square test against the oracle's
  own encoder (fail at p-value < 1e-6).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import schemas
from ldp.aggregate import make_aggregator
from ldp.heavy_hitters.pem import PEM
from ldp.heavy_hitters.strings import encode_strings
from ldp.kinds.sparse.aggregate import to_reports
from ldp.longitudinal.memo import make_memo_oracle, memo_words_hmac
from ldp.numeric.mechanisms import make_numeric_mechanism
from ldp.oracles import OLH, make_oracle
from ldp.reports import Reports
from ldp.sparse import SparseVectors
from ldp.sparse.hashes import SPARSE_HASHES, bins_signs, item_bits
from ldp.task import parse_task
from tests.test_oracles import _worst_ratio
from wire.client import client_params_document
from wire.client import main as vectors_main
from wire.json_form import REPORT_JSON_FIELDS, report_from_json, report_to_json, reports_to_json
from wire.records import REASONS, reports_to_records
from wire.validate import ReportValidator, TaskReportValidator
from wire.vectors import (
    BYTE_MECHANISMS,
    MEMO_BYTE_MECHANISMS,
    NUMERIC_BYTE_MECHANISMS,
    SPARSE_BYTE_MECHANISMS,
    WordStream,
    bernoulli_threshold,
    bytes_needed,
    encode_bytes,
    gf2_hash_one,
    memo_prf_words,
    memo_report_bytes,
    memo_wire_params,
    numeric_encode_bytes,
    numeric_wire_params,
    pem_bucket_one,
    pem_encode_bytes,
    pem_value_words,
    pem_wire_params,
    sparse_encode_bytes,
    sparse_hash_one,
    sparse_item_bits,
    sparse_wire_params,
    wire_params,
)

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "schemas" / "vectors" / "v1"
SEED = np.random.SeedSequence(20261201)


def _generator():
    spec = importlib.util.spec_from_file_location("wire_vectors_generate", ROOT / "tools/vectors/generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(name: str) -> dict:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(SEED.entropy, spawn_key=key))


# ------------------------------------------------------------------------------------------------
# the committed vectors
# ------------------------------------------------------------------------------------------------
def test_committed_vectors_are_the_generators_output():
    gen = _generator()
    files = gen.build_vectors()
    committed = sorted(p.name for p in VECTORS.glob("*.json"))
    assert committed == sorted(files)
    for name, doc in files.items():
        assert (VECTORS / name).read_text(encoding="utf-8") == gen.render(doc), (
            f"{name} differs from tools/vectors/generate.py's output; regenerate it"
        )


@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_encode_vectors_reproduce(mechanism):
    doc = _load(f"encode_{mechanism}.json")
    assert doc["vectors_version"] == 1 and doc["schema_version"] == schemas.SCHEMA_VERSION
    assert len(doc["cases"]) >= 2
    for case in doc["cases"]:
        task = parse_task(case["task"])
        oracle = task.make_oracle()
        assert wire_params(oracle) == case["params"]
        for vec in case["vectors"]:
            raw = bytes.fromhex(vec["random"])
            seeds = None if vec["seed_u64"] is None else np.array([int(vec["seed_u64"])], dtype=np.uint64)
            reports, used = encode_bytes(oracle, [vec["value"]], [raw], seeds)
            assert int(used[0]) == len(raw)  # every byte of the vector consumed, no more
            got = reports_to_json(task.task_id, reports, vec["event_time"])[0]
            assert got == vec["report"]
            if seeds is not None:
                h = int(oracle.hash.hash(seeds, np.array([vec["value"]]))[0])
                assert h == vec["hash"] == gf2_hash_one(int(vec["seed_u64"]), vec["value"], oracle.hash.m,
                                                        oracle.hash.k)
            if len(raw) >= 8:  # one byte fewer is refused, never padded
                with pytest.raises(ValueError, match="exhausted"):
                    encode_bytes(oracle, [vec["value"]], [raw[:-8]], seeds)


@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_aggregate_vectors_reproduce(mechanism):
    doc = _load(f"aggregate_{mechanism}.json")
    tol = doc["tolerance"]
    assert tol == 1e-12
    for case in doc["cases"]:
        task = parse_task(case["task"])
        oracle = task.make_oracle()
        batch = ReportValidator(task).validate([report_from_json(r) for r in case["reports"]])
        assert not batch.dead_letters
        est = oracle.estimate(oracle.add(oracle.create_accumulator(), batch.reports))
        assert est.n == case["n"] == len(case["reports"])
        assert est.support_counts.tolist() == case["support_counts"]
        for key in ("frequencies", "variance", "variance_with_f"):
            want = np.array(case[key])
            assert np.all(np.abs(getattr(est, key) - want) <= tol * np.maximum(1.0, np.abs(want))), key


def test_dead_letter_vectors_reproduce():
    doc = _load("dead_letters.json")
    seen = set()
    for case in doc["cases"]:
        task = parse_task(case["task"])
        if case["stage"] == "json":
            with pytest.raises(ValueError) as err:
                report_from_json(case["report"])
            assert err.value.reason == case["reason"], case["what"]
        else:
            batch = ReportValidator(task).validate([report_from_json(case["report"])])
            got = batch.dead_letters[0]["reason"] if batch.dead_letters else None
            assert got == case["reason"], case["what"]
            assert batch.n_accepted == (case["reason"] is None)
        seen.add(case["reason"])
    # every reason one report can earn on its own (the rest: decoding, budget state)
    single = {"not_a_record", "wrong_schema_version", "wrong_task", "missing_field", "invalid_event_time",
              "invalid_group", "invalid_seed", "invalid_payload", "out_of_domain", "invalid_client_id",
              "missing_client_id"}
    assert single <= seen and single <= set(REASONS)
    assert None in seen


# ------------------------------------------------------------------------------------------------
# the JSON form
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_json_form_maps_one_to_one_onto_avro_records(mechanism):
    oracle = make_oracle(mechanism, 1.0, 12)
    rng = _rng(1, BYTE_MECHANISMS.index(mechanism))
    reports = oracle.encode(rng.integers(0, 12, size=50), rng=rng)
    ids = rng.integers(0, 256, size=(50, 32), dtype=np.uint8)
    records = reports_to_records("t", reports, 1767225600000 + np.arange(50), 0, client_ids=ids)
    as_json = [report_to_json(r) for r in records]
    assert as_json == [
        {**j, "client_id": report_to_json(r)["client_id"]}
        for j, r in zip(reports_to_json("t", reports, 1767225600000 + np.arange(50)), records)
    ]
    for rec, js in zip(records, as_json):
        assert tuple(js) == REPORT_JSON_FIELDS
        assert json.loads(json.dumps(js)) == js  # plain JSON, no big numbers
        if js["seed"] is not None:
            assert isinstance(js["seed"], str) and -(2**63) <= int(js["seed"]) < 2**63
        back = report_from_json(json.loads(json.dumps(js)))
        assert back == rec
        schemas.validate_record("report", back)


def test_json_form_reals_integers_become_doubles():
    rec = report_from_json({"task_id": "t", "schema_version": 2, "event_time": 0, "reals": [1, 2.5]})
    assert rec["reals"] == [1.0, 2.5] and all(type(x) is float for x in rec["reals"])


# ------------------------------------------------------------------------------------------------
# the byte-level primitives
# ------------------------------------------------------------------------------------------------
def test_word_stream_reads_little_endian_words_and_rejects_exactly():
    ws = WordStream([bytes(range(8)) + bytes([0xFF] * 8) + (5).to_bytes(8, "little")])
    assert int(ws.take(np.array([0]))[0]) == 0x0706050403020100
    # m = 6: mask 7; 0xff..ff & 7 = 7 >= 6 is redrawn, then 5 is accepted
    assert ws.uniform(6, np.array([0])).tolist() == [5]
    assert ws.consumed_bytes.tolist() == [24]
    assert ws.uniform(1, np.array([0])).tolist() == [0]  # m = 1 consumes nothing
    assert ws.consumed_bytes.tolist() == [24]


def test_bernoulli_threshold_is_the_53_bit_comparison():
    assert bernoulli_threshold(0.5) == 1 << 52
    for p in (1e-3, 0.25, 1 / 3, 0.7310585786300049, 1 - 2**-40):
        t = bernoulli_threshold(p)
        # u < T  <=>  u * 2**-53 < p, for u = T - 1 and u = T
        assert (t - 1) * 2.0**-53 < p <= t * 2.0**-53
        assert abs(t / 2**53 - p) < 2**-53
    with pytest.raises(ValueError):
        bernoulli_threshold(1.0)


# ------------------------------------------------------------------------------------------------
# the byte-driven encoders are distributed as the oracles
# ------------------------------------------------------------------------------------------------
def _byte_encode(oracle, values: np.ndarray, rng: np.random.Generator, chunk: int = 25_000):
    """Byte-driven reports of ``values`` from seeded random bytes, in chunks (48 spare words a report)."""
    width = bytes_needed(oracle) + 8 * 48
    parts = []
    for start in range(0, len(values), chunk):
        v = values[start : start + chunk]
        raw = rng.integers(0, 256, size=(len(v), width), dtype=np.uint8)
        seeds = rng.integers(0, 2**64 - 1, size=len(v), dtype=np.uint64, endpoint=True) \
            if isinstance(oracle, OLH) else None
        parts.append(encode_bytes(oracle, v, raw, seeds)[0])
    from ldp.reports import Reports

    return Reports.concat(parts)


def _wire_keys(oracle, reports, v1: int, v2: int) -> np.ndarray:
    """One integer per report naming its wire output (OLH: which of v1, v2 it supports and whether they
    collide, a function of the output), as in tests/test_oracles.py."""
    if reports.bits is not None:
        bits = np.unpackbits(reports.bits, axis=1, count=oracle.d, bitorder="little").astype(np.int64)
        return bits @ (1 << np.arange(oracle.d))
    if reports.items is not None:
        return reports.items.astype(np.int64) @ (oracle.d ** np.arange(reports.items.shape[1]))
    if reports.seeds is not None:
        h1 = oracle.hash.hash(reports.seeds, np.full(len(reports), v1))
        h2 = oracle.hash.hash(reports.seeds, np.full(len(reports), v2))
        return 4 * (h1 == h2) + 2 * (reports.values == h1) + (reports.values == h2)
    return reports.values



@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_thresholds_realize_the_oracles_probabilities(mechanism):
    for eps, d in ((0.5, 6), (1.0, 16), (4.0, 100)):
        oracle = make_oracle(mechanism, eps, d)
        params = wire_params(oracle)
        assert abs(params["T_p"] / 2**53 - oracle.p) < 2**-53
        if "T_q" in params:
            assert abs(params["T_q"] / 2**53 - oracle.q) < 2**-53


@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
@pytest.mark.statistical
def test_byte_driven_estimates_are_unbiased(mechanism):
    d, n = 8, 200_000
    oracle = make_oracle(mechanism, 1.0, d)
    rng = _rng(2, BYTE_MECHANISMS.index(mechanism))
    w = 1.0 / np.arange(1, d + 1) ** 1.2
    w[-2:] = 0.0
    values = rng.choice(d, size=n, p=w / w.sum())
    est = oracle.estimate_reports(_byte_encode(oracle, values, rng))
    f = np.bincount(values, minlength=d) / n
    z = (est.frequencies - f) / np.sqrt(oracle.variance(n, f))
    assert np.all(np.abs(z) < 5), z


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_byte_driven_outputs_pass_the_epsilon_ldp_audit(mechanism, eps):
    d, n = 6, 100_000
    oracle = make_oracle(mechanism, eps, d)
    rng = _rng(3, BYTE_MECHANISMS.index(mechanism), int(eps * 2))
    k1 = _wire_keys(oracle, _byte_encode(oracle, np.zeros(n, dtype=np.int64), rng), 0, d - 1)
    k2 = _wire_keys(oracle, _byte_encode(oracle, np.full(n, d - 1), rng), 0, d - 1)
    assert _worst_ratio(k1, k2) <= math.exp(eps)


@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
def test_byte_driven_outputs_match_the_oracles_encoder(mechanism):
    """Two-sample chi-square on the wire keys of one input: byte-driven against ``oracle.encode``."""
    d, n = 6, 100_000
    oracle = make_oracle(mechanism, 1.0, d)
    rng = _rng(4, BYTE_MECHANISMS.index(mechanism))
    v = np.full(n, 2)
    a = _wire_keys(oracle, _byte_encode(oracle, v, rng), 2, 3)
    b = _wire_keys(oracle, oracle.encode(v, rng=rng), 2, 3)
    keys = np.union1d(a, b)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (a, b)])
    table = table[:, table.sum(axis=0) >= 10]  # cells with enough mass for the chi-square approximation
    assert stats.chi2_contingency(table)[1] > 1e-6


def test_gf2_hash_one_matches_the_vectorized_family():
    rng = _rng(5)
    for d, g in ((16, 4), (1000, 8), (2**20, 2)):
        h = OLH(1.0, d, g=g).hash
        seeds = rng.integers(0, 2**64 - 1, size=50, dtype=np.uint64, endpoint=True)
        vals = rng.integers(0, d, size=50)
        want = h.hash(seeds, vals).tolist()
        assert [gf2_hash_one(int(s), int(v), h.m, h.k) for s, v in zip(seeds, vals)] == want


def test_encode_bytes_refuses_bad_calls():
    oracle = make_oracle("olh", 1.0, 16)
    with pytest.raises(ValueError, match="seeds"):
        encode_bytes(oracle, [1], [bytes(16)])
    with pytest.raises(ValueError, match="no seeds"):
        encode_bytes(make_oracle("grr", 1.0, 4), [1], [bytes(16)], np.zeros(1, dtype=np.uint64))
    with pytest.raises(ValueError, match="random byte strings"):
        encode_bytes(make_oracle("grr", 1.0, 4), [1, 2], [bytes(16)])
    with pytest.raises(ValueError, match="outside the domain"):
        encode_bytes(make_oracle("grr", 1.0, 4), [4], [bytes(16)])


# ------------------------------------------------------------------------------------------------
# memoized mechanisms: permanent response from the secret, instantaneous step from the bytes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", MEMO_BYTE_MECHANISMS)
def test_memo_vectors_reproduce(mechanism):
    doc = _load(f"memo_{mechanism}.json")
    assert doc["vectors_version"] == 1 and doc["schema_version"] == schemas.SCHEMA_VERSION
    assert len(doc["cases"]) >= 2
    for case in doc["cases"]:
        task = parse_task(case["task"])
        oracle = task.make_oracle()
        assert memo_wire_params(oracle) == case["params"]
        for vec in case["vectors"]:
            raw, secret = bytes.fromhex(vec["random"]), bytes.fromhex(vec["secret"])
            reports, used, info = memo_report_bytes(oracle, secret, task.task_id, vec["value"], raw)
            assert used == len(raw)
            assert reports_to_json(task.task_id, reports, vec["event_time"])[0] == vec["report"]
            assert info["memo_key"] == vec["memo_key"] and info["permanent"] == vec["permanent"]
            if len(raw) >= 8:
                with pytest.raises(ValueError, match="exhausted"):
                    memo_report_bytes(oracle, secret, task.task_id, vec["value"], raw[:-8])


@pytest.mark.parametrize("mechanism", MEMO_BYTE_MECHANISMS)
def test_memo_reference_is_memo_py_exactly(mechanism):
    """The permanent step is byte-exact with ldp.longitudinal.memo (same HMAC words, same maps), and
    without an instantaneous stage (epsilon_1 = epsilon) the whole report is ``client_report``'s."""
    rng = _rng(40, MEMO_BYTE_MECHANISMS.index(mechanism))
    for eps_1 in (None, 2.0):
        oracle = make_memo_oracle(mechanism, 2.0, 12, **({} if eps_1 is None else {"epsilon_1": eps_1}))
        for _ in range(5):
            secret = rng.integers(0, 256, size=32, dtype=np.uint8).tobytes()
            want_words = memo_words_hmac(secret, "t", "memo", 7, 6).tolist()
            assert memo_prf_words(secret, "t", "memo", 7, 6) == want_words
            for v in range(oracle.d):
                raw = rng.integers(0, 256, size=8 * 64, dtype=np.uint8).tobytes()
                reports, _, info = memo_report_bytes(oracle, secret, "t", v, raw)
                key = oracle.client_memo_key(secret, "t", v)
                seeds = None
                if oracle.uses_seed:
                    seeds = oracle.seeds_from_words(memo_words_hmac(secret, "t", "seed", 0, 1)[None, :])
                    assert int(seeds[0]) == int(info["seed_u64"])
                words = memo_words_hmac(secret, "t", "memo", key, oracle.words_per_memo)[None, :]
                memo = oracle.memo_from_words(np.array([key]), words, seeds)[0]
                assert info["memo_key"] == key and np.asarray(memo).astype(int).tolist() == info["permanent"]
                if eps_1 is not None:
                    want, _ = oracle.client_report(secret, "t", v, rng=1)
                    assert reports_to_json("t", reports, 0) == reports_to_json("t", want, 0)


@pytest.mark.parametrize("mechanism", MEMO_BYTE_MECHANISMS)
@pytest.mark.statistical
def test_memo_instantaneous_step_matches_memo_py_in_distribution(mechanism):
    """memo.py draws the instantaneous noise with numpy's Generator (another consumption of the words), so
    the byte procedure matches it in distribution only: two-sample chi-square on the reports of one fixed
    memo, 20,000 each, fail at p-value < 1e-6."""
    n = 20_000
    rng = _rng(41, MEMO_BYTE_MECHANISMS.index(mechanism))
    oracle = make_memo_oracle(mechanism, 2.0, 6)
    secret = bytes(range(32))
    raw = rng.integers(0, 256, size=(n, 8 * 64), dtype=np.uint8)
    got = []
    info: dict = {}
    for i in range(n):
        rep, _, info = memo_report_bytes(oracle, secret, "t", 3, raw[i].tobytes())
        got.append(int(rep.bits[0] @ (256 ** np.arange(rep.bits.shape[1]))) if rep.bits is not None
                   else int(rep.values[0]))
    memo = np.array([info["permanent"]] * n)
    seeds = None if "seed_u64" not in info else np.full(n, int(info["seed_u64"]), dtype=np.uint64)
    want = oracle.instantaneous(memo, _rng(42), seeds)
    if want.bits is not None:
        want_keys = want.bits.astype(np.int64) @ (256 ** np.arange(want.bits.shape[1]))
    else:
        want_keys = want.values
    keys = np.union1d(got, want_keys)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (got, want_keys)])
    table = table[:, table.sum(axis=0) >= 10]
    assert table.shape[1] > 1 and stats.chi2_contingency(table)[1] > 1e-6


# ------------------------------------------------------------------------------------------------
# numeric mechanisms (docs/wire_format.md, section 7)
# ------------------------------------------------------------------------------------------------
def _numeric(case_mech: dict):
    extra = {k: v for k, v in case_mech.items() if k != "name"}
    return make_numeric_mechanism(case_mech["name"], **extra)


@pytest.mark.parametrize("mechanism", NUMERIC_BYTE_MECHANISMS)
def test_numeric_encode_vectors_reproduce(mechanism):
    """The grid wire is exact: the same bytes give the same report, bit for bit (schema version 3)."""
    doc = _load(f"encode_numeric_{mechanism}.json")
    assert doc["schema_version"] == 3
    for case in doc["cases"]:
        mech = _numeric(case["mechanism"])
        assert numeric_wire_params(mech) == case["params"]
        for vec in case["vectors"]:
            raw = bytes.fromhex(vec["random"])
            reports, used = numeric_encode_bytes(mech, [vec["value"]], [raw])
            assert int(used[0]) == len(raw)  # every byte consumed, no more
            got = reports_to_json(vec["report"]["task_id"], reports, vec["event_time"], schema_version=3)[0]
            assert got == vec["report"]
            rec = report_from_json(vec["report"])
            if rec["reals"] is not None:
                assert all(float(x).is_integer() for x in rec["reals"])  # an integer message, nothing else
            rep = Reports(reals=None if rec["reals"] is None else np.array(rec["reals"], dtype=np.float64),
                          values=None if rec["value"] is None else np.array([rec["value"]]))
            assert mech.validate(rep)[0].all()


@pytest.mark.parametrize("mechanism", NUMERIC_BYTE_MECHANISMS)
def test_numeric_aggregate_vectors_reproduce(mechanism):
    doc = _load(f"aggregate_numeric_{mechanism}.json")
    tol = doc["tolerance"]
    gen = _generator()
    for case in doc["cases"]:
        mech = _numeric(case["mechanism"])
        acc = mech.add(mech.create_accumulator(), gen._numeric_reports(case["reports"]))
        assert [str(t) for t in acc.total] == case["totals_fixed_point"]
        est = mech.estimate(acc, distribution=False)
        assert est.n == case["n"]
        for key in ("mean", "mean_std", "variance"):
            got, want = getattr(est, key), case[key]
            if want is None:
                assert got is None
            else:
                assert abs(got - want) <= tol * max(1.0, abs(want)), key


def test_numeric_dead_letter_vectors_reproduce():
    cases = _load("dead_letters_numeric.json")["cases"]
    assert {c["reason"] for c in cases} >= {None, "reals_out_of_range", "reals_off_grid", "bad_slot",
                                             "missing_reals", "missing_values", "value_not_a_bit"}
    for c in cases:
        mech = _numeric(c["mechanism"])
        rep = Reports(reals=None if c["reals"] is None else np.array(c["reals"], dtype=np.float64),
                      values=None if c["values"] is None else np.array(c["values"]))
        ok, reasons = mech.validate(rep)
        assert reasons[0] == c["reason"], c["what"]
        assert bool(ok[0]) == (c["reason"] is None)


#: (mechanism, epsilon, moments) of the distribution tests
_NUMERIC_GRID = [(m, 1.0, 1) for m in NUMERIC_BYTE_MECHANISMS] + [
    ("duchi", 1.0, 2), ("piecewise", 2.0, 2), ("one-bit-mean", 1.0, 2), ("hybrid", 0.3, 1),
    ("laplace", 1.0, 2)]


def _numeric_keys(mech, reports) -> np.ndarray:
    """One integer per report naming a cell of its output (a post-processing, so eps-LDP carries over):
    the decoded output in 32 equal cells of the output range (Laplace: of ``[-1 - 8 / eps, 1 + 8 / eps]``,
    tails into the end cells), Hybrid's two Duchi messages apart, times the ``values`` field (bit, slot)."""
    key = np.zeros(len(reports), dtype=np.int64)
    if reports.reals is not None:
        m = np.asarray(reports.reals).astype(np.int64)
        y = mech.output_of(m)
        lo, hi = mech.output_range
        if mech.name == "laplace":
            lo, hi = -1.0 - 8.0 / mech.epsilon, 1.0 + 8.0 / mech.epsilon
        key = np.clip(((y - lo) / (hi - lo) * 32).astype(np.int64), 0, 31)
        if mech.name == "hybrid":
            key = np.where(m >= mech._pm.grid.cells, 32 + m - mech._pm.grid.cells, key)
    if reports.values is not None:
        key = key * 4 + reports.values
    return key


def _numeric_byte_encode(mech, x: np.ndarray, rng: np.random.Generator) -> Reports:
    raw = rng.integers(0, 256, size=(len(x), 8 * 64), dtype=np.uint8)  # Laplace's runs: about 2 / eps words
    return numeric_encode_bytes(mech, x, raw)[0]


@pytest.mark.parametrize(("mechanism", "eps", "moments"), _NUMERIC_GRID)
def test_numeric_byte_outputs_match_the_mechanisms_encoder(mechanism, eps, moments):
    """Two-sample chi-square (byte-driven against ``mechanism.encode``) on the output cells of three
    inputs (low end, interior, high end); fail at p-value < 1e-6, and the two samples' means agree within
    5 standard deviations of their difference (Var[y | t] from the closed form, 2 / n per sample)."""
    mech = make_numeric_mechanism(mechanism, eps, 0.0, 10.0, moments=moments)
    rng = _rng(6, NUMERIC_BYTE_MECHANISMS.index(mechanism), moments, int(eps * 10))
    n = 40_000
    for x0 in (0.0, 3.7, 10.0):
        x = np.full(n, x0)
        a = _numeric_byte_encode(mech, x, rng)
        b = mech.encode(x, rng=rng)
        ka, kb = _numeric_keys(mech, a), _numeric_keys(mech, b)
        keys = np.union1d(ka, kb)
        table = np.stack([np.bincount(np.searchsorted(keys, k), minlength=len(keys)) for k in (ka, kb)])
        table = table[:, table.sum(axis=0) >= 10]
        if table.shape[1] > 1:
            assert stats.chi2_contingency(table)[1] > 1e-6, x0
        if moments == 1:
            ya, yb = mech.decode(a)[0], mech.decode(b)[0]
            t = 2.0 * x0 / 10.0 - 1.0
            sd = math.sqrt(2.0 * float(mech.variance(t)) / n)
            assert abs(ya.mean() - yb.mean()) < 5 * sd + 1e-12, x0
            assert abs(ya.mean() - t) < 5 * sd / math.sqrt(2.0) + 1e-12, x0  # unbiased


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("mechanism", NUMERIC_BYTE_MECHANISMS)
def test_numeric_byte_outputs_pass_the_epsilon_ldp_audit(mechanism, eps):
    """The Clopper-Pearson audit (level 1e-6 per cell) on the output cells of the two extreme inputs."""
    mech = make_numeric_mechanism(mechanism, eps, 0.0, 1.0)
    rng = _rng(7, NUMERIC_BYTE_MECHANISMS.index(mechanism), int(eps * 2))
    n = 100_000
    k1 = _numeric_keys(mech, _numeric_byte_encode(mech, np.zeros(n), rng))
    k2 = _numeric_keys(mech, _numeric_byte_encode(mech, np.ones(n), rng))
    assert _worst_ratio(k1, k2) <= math.exp(eps)


def test_numeric_bytes_follow_the_documented_integer_procedure_and_refuse_short_input():
    """Piecewise from hand-made words: the rounding word, then U = uniform(S) read off the next word."""
    mech = make_numeric_mechanism("piecewise", 1.0)
    g = mech.grid
    mask = (1 << (g.total - 1).bit_length()) - 1
    u_words = [0, g.total - 1, 5 * g.low]  # first cell of the tail / last cell / cell 5
    for u in u_words:
        raw = (0).to_bytes(8, "little") + u.to_bytes(8, "little")  # j = floor(p) + [0 < frac]: x = 0 -> j = 0
        reports, used = numeric_encode_bytes(mech, [0.0], [raw])
        assert int(used[0]) == 16
        want = u // g.high if u < g.width * g.high else g.width + (u - g.width * g.high) // g.low
        assert reports.reals[0] == float(want) and u & mask == u
    over = (mask).to_bytes(8, "little")  # >= S: redrawn from the next word (masked rejection)
    reports, used = numeric_encode_bytes(mech, [0.0], [bytes(8) + over + (3).to_bytes(8, "little")])
    assert int(used[0]) == 24 and reports.reals[0] == 0.0
    with pytest.raises(ValueError, match="exhausted"):
        numeric_encode_bytes(mech, [0.25], [bytes(8)])


# ------------------------------------------------------------------------------------------------
# sparse vectors (docs/wire_format.md, section 8)
# ------------------------------------------------------------------------------------------------
def _vectors(inputs: list[dict]) -> SparseVectors:
    return _generator()._as_vectors(inputs)


def _floats_close(got, want, tol: float) -> bool:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= tol * np.maximum(1.0, np.abs(want))))


@pytest.mark.parametrize("mechanism", SPARSE_BYTE_MECHANISMS)
def test_sparse_encode_vectors_reproduce(mechanism):
    doc = _load(f"encode_sparse_{mechanism}.json")
    assert doc["vectors_version"] == 1 and doc["schema_version"] == schemas.SCHEMA_VERSION
    assert len(doc["cases"]) >= 2
    real_tol = doc.get("real_tolerance")
    for case in doc["cases"]:
        task = parse_task(case["task"])
        mech = task.make_mechanism()
        params = sparse_wire_params(mech)
        assert params == case["params"]
        for vec in case["vectors"]:
            raw = bytes.fromhex(vec["random"])
            seeds = None if vec["seed_u64"] is None else np.array([int(vec["seed_u64"])], dtype=np.uint64)
            vectors = _vectors([vec["input"]])
            reports, used = sparse_encode_bytes(mech, vectors, [raw], seeds)
            assert int(used[0]) == len(raw)  # every byte consumed, no more
            got = reports_to_json(task.task_id, reports, vec["event_time"])[0]
            want = vec["report"]
            if real_tol is None:
                assert got == want
            else:  # Gaussian reals pass through log: the file's tolerance (one float32 ulp)
                assert {k: v for k, v in got.items() if k != "reals"} == {
                    k: v for k, v in want.items() if k != "reals"}
                assert _floats_close(got["reals"], want["reals"], real_tol)
            if seeds is not None:
                b = params.get("bins", 1)
                items = np.array(vec["input"]["items"], dtype=np.uint64)
                h, sg = bins_signs(params["family"], np.repeat(seeds, len(items)), items, b, task.domain_size)
                assert [[int(x), int(y)] for x, y in zip(h, sg)] == vec["hashes"]
            if len(raw) >= 8:  # one word fewer is refused, never padded
                with pytest.raises(ValueError, match="exhausted"):
                    sparse_encode_bytes(mech, vectors, [raw[:-8]], seeds)


@pytest.mark.parametrize("mechanism", SPARSE_BYTE_MECHANISMS)
def test_sparse_aggregate_vectors_reproduce(mechanism):
    gen = _generator()
    doc = _load(f"aggregate_sparse_{mechanism}.json")
    tol = doc["tolerance"]
    assert tol == 1e-12
    for case in doc["cases"]:
        task = parse_task(case["task"])
        batch = gen.sparse_validator(task).validate([report_from_json(r) for r in case["reports"]])
        assert not batch.dead_letters and batch.n_accepted == case["n"] == len(case["reports"])
        agg = gen.sparse_aggregator(task)
        acc = agg.add(0, agg.create_accumulator(0), batch.reports)
        got = gen.sparse_accumulator_doc(agg, acc)
        for key in ("n", "items", "sumsq", "pos"):
            assert got.get(key) == case.get(key), key
        if mechanism == "gaussian":  # float sums of float32 reports
            assert _floats_close(got["sums"], case["sums"], tol)
        else:
            assert got["sums"] == case["sums"]  # exact integers
        for key in ("mean", "variance"):
            assert _floats_close(got[key], case[key], tol), key
        if case.get("mean_norm2") is not None:
            assert abs(got["mean_norm2"] - case["mean_norm2"]) <= tol * max(1.0, abs(case["mean_norm2"]))
        # the shards of the reports merge to the same accumulator
        half = len(case["reports"]) // 2
        parts = [agg.add(0, agg.create_accumulator(0), batch.reports.take(np.arange(lo, hi)))
                 for lo, hi in ((0, half), (half, len(case["reports"])))]
        assert gen.sparse_accumulator_doc(agg, agg.merge(0, parts))["sums"] == got["sums"] or \
            mechanism == "gaussian"


def test_sparse_dead_letter_vectors_reproduce():
    gen = _generator()
    cases = _load("dead_letters_sparse.json")["cases"]
    for case in cases:
        task = parse_task(case["task"])
        if case["stage"] == "json":
            with pytest.raises(ValueError) as err:
                report_from_json(case["report"])
            assert err.value.reason == case["reason"], case["what"]
            continue
        batch = gen.sparse_validator(task).validate([report_from_json(case["report"])])
        got = batch.dead_letters[0]["reason"] if batch.dead_letters else None
        assert got == case["reason"], case["what"]
    assert {c["reason"] for c in cases} >= {None, "missing_field", "invalid_payload", "out_of_domain",
                                           "invalid_seed"}
    assert {c["task"]["mechanism"] for c in cases} == set(SPARSE_BYTE_MECHANISMS) - {"sampling"}


@pytest.mark.parametrize("family", SPARSE_HASHES)
def test_sparse_hash_one_matches_the_vectorized_families(family):
    rng = _rng(50, SPARSE_HASHES.index(family))
    for b, d in ((1, 2), (1, 16), (4, 64), (8, 1000), (16, 2**40 + 3)):
        seeds = rng.integers(0, 2**64 - 1, size=40, dtype=np.uint64, endpoint=True)
        seeds[:3] = (0, 2**64 - 1, 2**63)
        items = rng.integers(0, d, size=40).astype(np.uint64)
        h, sg = bins_signs(family, seeds, items, b, d)
        want = [(int(x), int(y)) for x, y in zip(h, sg)]
        assert [sparse_hash_one(family, int(s), int(x), b, d) for s, x in zip(seeds, items)] == want
    m = 13
    xs = np.arange(1 << m, dtype=np.uint64)
    assert [sparse_item_bits(int(x), m) for x in xs[:64]] == item_bits(xs[:64], m).tolist()
    assert len(set(item_bits(xs, m).tolist())) == 1 << m  # a bijection of [0, 2**m)


#: (mechanism, task keys) of the distribution tests: every noise and selection path
_SPARSE_GRID = [
    ("svme", {"domain_size": 32, "sparsity": 16, "privacy": "event"}),  # Laplace, b = 4
    ("svme", {"domain_size": 16, "sparsity": 4}),  # Duchi, b = 1
    ("svme", {"domain_size": 32, "sparsity": 4, "privacy": "event", "values": "binary"}),  # discrete
    ("kfold", {"domain_size": 16, "sparsity": 4, "privacy": "event"}),
    ("sampling", {"domain_size": 16, "sparsity": 3}),
    ("harmony", {"domain_size": 8, "sparsity": 3}),
    ("pckv", {"domain_size": 8, "sparsity": 3}),
    ("gaussian", {"domain_size": 6, "sparsity": 3}),
]


def _sparse_mech(name: str, keys: dict, eps: float = 1.0):
    task = parse_task({"task_id": "t", "kind": "sparse", "mechanism": name, "epsilon": eps, **keys})
    return task, task.make_mechanism()


def _sparse_byte_encode(mech, vectors: SparseVectors, rng: np.random.Generator, seeded: bool) -> Reports:
    params = sparse_wire_params(mech)
    width = 8 * (2 * params["k"] + 6 * params.get("bins", 1) + 4 * params["d"] + 48)
    raw = rng.integers(0, 256, size=(vectors.n, width), dtype=np.uint8)
    seeds = rng.integers(0, 2**64 - 1, size=vectors.n, dtype=np.uint64, endpoint=True) if seeded else None
    return sparse_encode_bytes(mech, vectors, raw, seeds)[0]


def _sparse_keys(mech, reports: Reports, x: int) -> np.ndarray:
    """One integer per report naming a cell of a function of its output (a post-processing): the
    signed code the server reads for item ``x`` (seeded), whether the item is ``x`` / a dummy and the
    bit (Harmony, PCKV), coordinate ``x`` in quarter-sigma cells (Gaussian)."""
    name = mech.name
    if name == "gaussian":
        return np.clip(np.floor(reports.reals[:, x] / mech.sigma * 4), -12, 12).astype(np.int64)
    if name in ("harmony", "pckv"):
        return 4 * (reports.values == x) + 2 * (reports.values >= mech.d) + (reports.reals[:, 0] > 0)
    b = reports.reals.shape[1] if name == "svme" else 1
    codes = reports.reals if name == "svme" else reports.reals.sum(axis=1, keepdims=True)
    fam = mech.params.hash_family if name == "svme" else mech.hash_family
    d = mech.params.domain_size if name == "svme" else mech.d
    h, sg = bins_signs(fam, reports.seeds, np.full(len(reports), x, dtype=np.uint64), b, d)
    return (sg * codes[np.arange(len(reports)), h]).astype(np.int64)


def _one_vector(n: int, entries: dict[int, float]) -> SparseVectors:
    items = np.array(list(entries), dtype=np.uint64)
    vals = np.array(list(entries.values()), dtype=np.float64)
    return SparseVectors(np.arange(n + 1) * len(items), np.tile(items, n), np.tile(vals, n))


def _chi2_p(a: np.ndarray, b: np.ndarray) -> float:
    keys = np.union1d(a, b)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (a, b)])
    table = table[:, table.sum(axis=0) >= 10]  # cells with enough mass for the chi-square approximation
    return 1.0 if table.shape[1] < 2 else float(stats.chi2_contingency(table)[1])


@pytest.mark.parametrize(("mechanism", "keys"), _SPARSE_GRID)
@pytest.mark.statistical
def test_sparse_byte_outputs_match_the_mechanisms_encoder(mechanism, keys):
    """Two-sample chi-square (byte-driven against ``mechanism.encode``, 20,000 reports each) on the output
    cells of one input with k + 1 non-zeros (so truncation runs) holding item 1; fail at p < 1e-6."""
    task, mech = _sparse_mech(mechanism, keys)
    rng = _rng(51, _SPARSE_GRID.index((mechanism, keys)))
    k, n = task.sparsity, 20_000
    binary = task.values == "binary"
    entries = {i: (1.0 if binary else [1.0, -0.4, 0.7, -1.0][(i - 1) % 4]) for i in range(1, k + 2)}
    vec = _one_vector(n, entries)
    a = _sparse_keys(mech, _sparse_byte_encode(mech, vec, rng, mechanism in ("svme", "kfold", "sampling")), 1)
    b = _sparse_keys(mech, to_reports(mech, mech.encode(vec, rng=rng)[0]), 1)
    assert _chi2_p(a, b) > 1e-6


#: the grid without the clip-shrunk (biased) SVME Duchi round
_SPARSE_UNBIASED = [g for g in _SPARSE_GRID if g != ("svme", {"domain_size": 16, "sparsity": 4})]


@pytest.mark.parametrize(("mechanism", "keys"), _SPARSE_UNBIASED)
@pytest.mark.statistical
def test_sparse_byte_driven_estimates_are_unbiased(mechanism, keys):
    """Estimates from 20,000 byte-driven reports of a skewed population (at most k non-zeros each, no
    binding clip) lie within 5 of their own standard deviations of the true means, per item (a false
    failure rate of about 6e-7 per item)."""
    task, mech = _sparse_mech(mechanism, keys)
    rng = _rng(52, _SPARSE_GRID.index((mechanism, keys)))
    d, k, n = task.domain_size, task.sparsity, 20_000
    counts = rng.integers(0, k + 1, size=n)
    items = np.concatenate([rng.choice(max(k, d // 2), size=c, replace=False) for c in counts])
    vals = np.ones(items.size) if task.values == "binary" else rng.uniform(-1.0, 1.0, items.size)
    vec = SparseVectors(np.concatenate(([0], np.cumsum(counts))), items.astype(np.uint64), vals)
    reports = _sparse_byte_encode(mech, vec, rng, mechanism in ("svme", "kfold", "sampling"))
    agg = _generator().sparse_aggregator(task)
    est = agg.estimate(agg.add(0, agg.create_accumulator(0), reports))
    truth = vec.mean_at(np.arange(d, dtype=np.uint64))
    z = (est.mean - truth) / np.sqrt(est.variance)
    assert np.all(np.abs(z) < 5), z


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize(("mechanism", "keys"), _SPARSE_GRID)
@pytest.mark.statistical
def test_sparse_byte_outputs_pass_the_epsilon_ldp_audit(mechanism, keys, eps):
    """The Clopper-Pearson audit (level 1e-6 per cell) on the output cells of two neighbouring inputs:
    item 1 at +1 and at -1 (binary: 1 and absent), the other entries equal; 50,000 reports each."""
    task, mech = _sparse_mech(mechanism, keys, eps)
    rng = _rng(53, _SPARSE_GRID.index((mechanism, keys)), int(eps * 2))
    n = 50_000
    binary = task.values == "binary"
    v1 = _one_vector(n, {1: 1.0, 2: 1.0 if binary else 0.5})
    v2 = _one_vector(n, {2: 1.0} if binary else {1: -1.0, 2: 0.5})
    seeded = mechanism in ("svme", "kfold", "sampling")
    k1 = _sparse_keys(mech, _sparse_byte_encode(mech, v1, rng, seeded), 1)
    k2 = _sparse_keys(mech, _sparse_byte_encode(mech, v2, rng, seeded), 1)
    assert _worst_ratio(k1, k2) <= math.exp(eps)


def test_sparse_encode_bytes_refuses_bad_calls():
    _, svme = _sparse_mech("svme", {"domain_size": 16, "sparsity": 4})
    _, harmony = _sparse_mech("harmony", {"domain_size": 16, "sparsity": 4})
    one = _one_vector(1, {3: 0.5})
    with pytest.raises(ValueError, match="public seeds"):
        sparse_encode_bytes(svme, one, [bytes(64)])
    with pytest.raises(ValueError, match="no seeds"):
        sparse_encode_bytes(harmony, one, [bytes(64)], np.zeros(1, dtype=np.uint64))
    with pytest.raises(ValueError, match="outside"):
        sparse_encode_bytes(harmony, _one_vector(1, {16: 0.5}), [bytes(64)])
    with pytest.raises(ValueError, match="more than once"):
        sparse_encode_bytes(harmony, SparseVectors([0, 2], np.array([3, 3], dtype=np.uint64), [0.5, 0.5]),
                            [bytes(64)])
    _, binary = _sparse_mech("harmony", {"domain_size": 16, "sparsity": 4, "values": "binary"})
    with pytest.raises(ValueError, match="0 or 1"):
        sparse_encode_bytes(binary, one, [bytes(64)])


# ------------------------------------------------------------------------------------------------
# the task's client parameters (docs/wire_format.md, section 5)
# ------------------------------------------------------------------------------------------------
def test_client_parameters_are_the_vectors_params(tmp_path, capsys):
    names = [f"encode_{m}.json" for m in BYTE_MECHANISMS] + [f"memo_{m}.json" for m in MEMO_BYTE_MECHANISMS] \
        + [f"encode_sparse_{m}.json" for m in SPARSE_BYTE_MECHANISMS] + ["encode_pem.json"]
    for name in names:
        for case in _load(name)["cases"]:
            task = parse_task(case["task"])
            doc = client_params_document(task)
            assert doc == {"task_id": task.task_id, "vectors_version": 1, "params": case["params"]}, name
    path = tmp_path / "task.json"
    case = _load("memo_memo-grr.json")["cases"][0]
    path.write_text(json.dumps(case["task"]), encoding="utf-8")
    assert vectors_main([str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == case["params"]
    path.write_text(json.dumps({**case["task"], "epsilon": -1}), encoding="utf-8")
    assert vectors_main([str(path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


# ------------------------------------------------------------------------------------------------
# heavy hitters (docs/wire_format.md, section 10)
# ------------------------------------------------------------------------------------------------
def test_pem_encode_vectors_reproduce():
    doc = _load("encode_pem.json")
    assert doc["mechanism"] == "pem" and len(doc["cases"]) >= 4
    for case in doc["cases"]:
        task = parse_task(case["task"])
        pem = task.make_mechanism()
        assert pem_wire_params(pem) == case["params"]
        assert {v["level"] for v in case["vectors"]} == set(range(len(pem.levels)))
        for vec in case["vectors"]:
            value = bytes.fromhex(vec["value_hex"])
            if vec["value_text"] is not None:
                assert vec["value_text"].encode("utf-8") == value
            raw = bytes.fromhex(vec["random"])
            reports, used, hashes = pem_encode_bytes(pem, [value], [raw], np.array([int(vec["seed_u64"])],
                                                                                    dtype=np.uint64))
            assert int(used[0]) == len(raw)  # every byte consumed, no more
            assert (int(reports.level[0]), hashes[0]) == (vec["level"], vec["hash"])
            assert int(reports.y[0]) == vec["report"]["value"]
            rec = report_from_json(vec["report"])
            assert rec["group"] == vec["level"] and rec["seed"] % 2**64 == int(vec["seed_u64"])
            batch = TaskReportValidator(make_aggregator(task)).validate([rec])
            assert batch.n_accepted == 1
            with pytest.raises(ValueError, match="random bytes exhausted"):
                pem_encode_bytes(pem, [value], [raw[:-8]], np.array([1], dtype=np.uint64))
        for bad in case["refused_inputs"]:
            with pytest.raises(ValueError, match="more than max_length"):
                pem_value_words(bytes.fromhex(bad["value_hex"]), pem.max_length)


def test_pem_typescript_list_is_the_registrys():
    """``HH_MECHANISMS`` of the TypeScript client names the heavy-hitters mechanisms whose wire spec lists
    the ``typescript`` client (their vectors are reproduced by ``test/heavy_hitters.test.ts``)."""
    from ldp.kinds.heavy_hitters.aggregate import MECHANISMS as HH
    from wire.registry import client_mechanisms

    src = (ROOT / "clients/typescript/src/heavy_hitters.ts").read_text(encoding="utf-8")
    listed = src.split("export const HH_MECHANISMS = [", 1)[1].split("]", 1)[0]
    assert tuple(x.strip().strip('"') for x in listed.split(",")) == client_mechanisms("typescript", HH)


def test_pem_dead_letter_vectors_reproduce():
    seen = set()
    for case in _load("dead_letters_pem.json")["cases"]:
        task = parse_task(case["task"])
        if case["stage"] == "json":
            with pytest.raises(ValueError) as err:
                report_from_json(case["report"])
            assert err.value.reason == case["reason"], case["what"]
        else:
            batch = TaskReportValidator(make_aggregator(task)).validate([report_from_json(case["report"])])
            got = batch.dead_letters[0]["reason"] if batch.dead_letters else None
            assert got == case["reason"], case["what"]
        seen.add(case["reason"])
    want = {None, "invalid_group", "out_of_domain", "missing_field", "invalid_seed", "invalid_payload"}
    assert want <= seen


@pytest.mark.parametrize("layout", [(6, 4.0, {}), (3, 1.0, {}), (9, 2.0, {"sketch_seed": 7}), (1, 0.5, {}),
                                    (20, 3.0, {"first_bits": 9, "step_bits": 30})])
def test_pem_reference_buckets_are_the_cores(layout):
    """The pure-integer ``H(b)`` of every level (direct, hashed, full) equals the core client's."""
    b, eps, extra = layout
    pem = PEM(eps, b, **extra)
    params = pem_wire_params(pem)
    rng = _rng(50, b)
    values = [bytes(rng.integers(0, 256, size=int(rng.integers(0, b + 1)), dtype=np.uint8))
              for _ in range(200)]
    seeds = rng.integers(0, 2**64 - 1, size=200, dtype=np.uint64, endpoint=True)
    words = encode_strings(values, b).words()
    for lv, lp in zip(pem.levels, params["levels"]):
        core = pem._buckets(lv, words, seeds)
        ref = [pem_bucket_one(lp, int(s), pem_value_words(v, b), params["total_bits"])
               for v, s in zip(values, seeds)]
        assert core.tolist() == ref, lp


def test_pem_thresholds_realize_the_level_shares():
    pem = PEM(2.0, 9)
    params = pem_wire_params(pem)
    edges = np.cumsum(pem.weights)[:-1]
    assert len(params["T_level"]) == len(pem.levels) - 1
    for t, e in zip(params["T_level"], edges):
        assert abs(t / 2**53 - e) < 2**-53
    for lv, lp in zip(pem.levels, params["levels"]):
        assert abs(lp["T_p"] / 2**53 - lv.p) < 2**-53 and lp["g"] == lv.g == 2 ** lp["t"]
    with pytest.raises(ValueError, match="sketch search only"):
        pem_wire_params(PEM(2.0, 4, search="olh"))


def _pem_keys(pem: PEM, level, seeds, y, v1: bytes, v2: bytes) -> np.ndarray:
    """One integer per report: its level, and which of v1, v2 its ``y`` supports (and whether they
    collide)."""
    w1, w2 = encode_strings([v1], pem.max_length).words(), encode_strings([v2], pem.max_length).words()
    key = np.zeros(len(y), dtype=np.int64)
    for lv in pem.levels:
        m = np.flatnonzero(np.asarray(level) == lv.index)
        if m.size:
            h1 = pem._buckets(lv, np.repeat(w1, m.size, axis=0), seeds[m])
            h2 = pem._buckets(lv, np.repeat(w2, m.size, axis=0), seeds[m])
            yy = np.asarray(y, dtype=np.uint64)[m]
            key[m] = 8 * lv.index + 4 * (h1 == h2) + 2 * (yy == h1) + (yy == h2)
    return key


def _pem_byte_encode(pem: PEM, value: bytes, n: int, rng: np.random.Generator):
    raw = [rng.integers(0, 256, size=8 * 24, dtype=np.uint8).tobytes() for _ in range(n)]
    seeds = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    return pem_encode_bytes(pem, [value] * n, raw, seeds)[0]


@pytest.mark.statistical
@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_pem_byte_outputs_pass_the_epsilon_ldp_audit(eps):
    pem, n = PEM(eps, 3), 20_000
    rng = _rng(51, int(eps * 2))
    v1, v2 = b"ab", b"ab\x00"  # differ only in the length trailer
    r1, r2 = _pem_byte_encode(pem, v1, n, rng), _pem_byte_encode(pem, v2, n, rng)
    k1 = _pem_keys(pem, r1.level, r1.seed, r1.y, v1, v2)
    k2 = _pem_keys(pem, r2.level, r2.seed, r2.y, v1, v2)
    assert _worst_ratio(k1, k2) <= math.exp(eps)


@pytest.mark.statistical
def test_pem_byte_outputs_match_the_core_encoder():
    """Two-sample chi-square on (level, support of two values): byte-driven against ``PEM.encode``."""
    pem, n = PEM(2.0, 6), 20_000
    rng = _rng(52)
    v1, v2 = "word", "wore"
    a = _pem_byte_encode(pem, v1.encode(), n, rng)
    b = pem.encode([v1] * n, rng=rng)
    ka = _pem_keys(pem, a.level, a.seed, a.y, v1.encode(), v2.encode())
    kb = _pem_keys(pem, b.level, b.seed, b.y, v1.encode(), v2.encode())
    keys = np.union1d(ka, kb)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (ka, kb)])
    table = table[:, table.sum(axis=0) >= 10]
    assert stats.chi2_contingency(table)[1] > 1e-6
