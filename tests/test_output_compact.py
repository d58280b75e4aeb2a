"""Compact output of large domains: the JSON Lines row holds the largest values, the Avro file every value.

Covers ``ldp.rows.top_values`` / ``estimate_json``, the writer's record form and sinks
(``transforms.io.result_sinks``, ``VectorRecordEncoder``), ``ldp-beam show`` and the store on a compact
row, and one DirectRunner run of ``WriteResults`` (integration).
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import fastavro
import numpy as np
import pytest

import schemas
from ldp.aggregate import WindowInfo, json_record, json_safe, make_aggregator
from ldp.kinds.frequency.aggregate import (
    DEFAULT_JSONL_MAX_VALUES,
    ESTIMATES,
    PER_VALUE_FIELDS,
    EstimateRow,
    estimate_json,
)
from ldp.oracles import SupportAccumulator
from ldp.rows import top_values
from ldp.task import parse_task
from store import DEFAULT_MAX_ITEMS, flatten_rows

WINDOW = WindowInfo(1_764_000_000_000, 1_764_000_600_000, "ON_TIME", 0, True)


def _row(d: int, seed_sequence: np.random.SeedSequence, *, labels: bool = False) -> EstimateRow:
    """The estimate row of one pane (OUE, 20,000 reports from a seeded Zipf population) at domain ``d``."""
    spec: dict = {"task_id": "compact", "mechanism": "oue", "epsilon": 1.0, "domain_size": d}
    if labels:
        spec["labels"] = [f"v{i}" for i in range(d)]
    agg = make_aggregator(parse_task(spec))
    o = agg.oracle
    rng = np.random.default_rng(seed_sequence)
    n = 20_000
    hist = np.bincount(rng.zipf(1.5, n) % d, minlength=d)
    counts = rng.binomial(hist, o.p) + rng.binomial(n - hist, o.q)
    (row,) = agg.finalize({0: SupportAccumulator(counts.astype(np.int64), n)}, WINDOW)
    return row


def _reference_top(values, k: int) -> np.ndarray:
    """The rule by a full stable sort: largest first, non-finite last, ties by index; in index order."""
    key = -np.asarray(values, dtype=np.float64)
    key[~np.isfinite(key)] = np.inf
    n = key.size
    return np.arange(n) if n <= k else np.sort(np.argsort(key, kind="stable")[:k])


def test_top_values_is_the_stores_rule(rng):
    for _ in range(200):
        n, k = int(rng.integers(1, 80)), int(rng.integers(0, 90))
        x = rng.integers(-3, 4, n).astype(np.float64)  # few distinct values: many ties
        x[rng.random(n) < 0.2] = np.nan
        x[rng.random(n) < 0.1] = rng.choice([np.inf, -np.inf])
        assert np.array_equal(top_values(x, k), _reference_top(x, k))
    assert top_values([1.0, None, 3.0, 3.0, 0.5], 2).tolist() == [2, 3]  # None ranks last, ties by index
    assert DEFAULT_JSONL_MAX_VALUES == DEFAULT_MAX_ITEMS == 4096  # the text form keeps what the store keeps


def test_small_domain_row_is_written_whole(seed_sequence):
    rec = _row(64, seed_sequence)._asdict()
    assert estimate_json(rec, 16 * 4) == json_record(rec)
    assert estimate_json(rec, 0) == json_record(rec)
    with pytest.raises(ValueError, match="max_values must be >= 0"):
        estimate_json(rec, -1)


@pytest.mark.parametrize("packed", [False, True], ids=["lists", "numpy"])
def test_compact_json_round_trips(seed_sequence, packed):
    d, k = 5000, 100
    row = _row(d, seed_sequence, labels=True)
    rec = row._asdict()
    pack = packed and "labels"  # the record form: vectors as numpy arrays, labels a list
    given = {n: (np.asarray(v) if pack and isinstance(v, list) and n != pack else v) for n, v in rec.items()}
    line = json.loads(json.dumps(estimate_json(given, k), allow_nan=False))
    idx = line["values"]
    assert idx == top_values(row.frequencies, k).tolist() and len(idx) == k
    for name in PER_VALUE_FIELDS:  # every kept value equal to what the estimate held, at its index
        assert line[name] == json_safe([rec[name][i] for i in idx]), name
    assert min(line["frequencies"]) >= max(np.delete(np.asarray(row.frequencies), idx))
    for name in set(rec) - set(PER_VALUE_FIELDS) - {"window_start", "window_end"}:
        assert line[name] == rec[name], name
    assert line["domain_size"] == d and line["window_start"] == "2025-11-24T16:00:00.000Z"


def _write(spec, records, max_values: int) -> tuple[list[dict], list[dict]]:
    """Records through the writer's sinks (in memory): ``(JSON Lines rows, Avro records read back)``."""
    from transforms.io import result_sinks

    to_record, sinks = result_sinks(spec, max_values)
    out = {}
    for suffix, sink in sinks.items():
        buf = io.BytesIO()
        buf.close = lambda: None  # the text sink closes its file handle on flush; keep the bytes
        sink.open(buf)
        for r in records:
            sink.write(to_record(r))
        sink.flush()
        out[suffix] = buf.getvalue()
    lines = [json.loads(x) for x in out[".jsonl"].decode().splitlines() if x.strip()]
    return lines, list(fastavro.reader(io.BytesIO(out[".avro"])))


def _same(a, b) -> bool:
    if isinstance(b, list):
        return np.array_equal(np.asarray(a, dtype=object if b and isinstance(b[0], str) else None),
                              np.asarray(b, dtype=object if b and isinstance(b[0], str) else None),
                              equal_nan=not (b and isinstance(b[0], str)))  # fmt: skip
    return a == b


def test_sinks_write_every_value_to_avro_and_the_top_to_json_lines(seed_sequence):
    small, big = _row(16, seed_sequence), _row(3000, seed_sequence, labels=True)
    rows = [small, big, small._replace(group=1)]
    lines, back = _write(ESTIMATES, rows, 200)
    assert [len(x["frequencies"]) for x in lines] == [16, 200, 16]
    assert "values" not in lines[0] and lines[1]["values"] == top_values(big.frequencies, 200).tolist()
    assert lines[0] == json_record(small._asdict())
    assert len(back) == 3
    for row, rec in zip(rows, back):  # the Avro file reads back as the rows, exactly
        for name, value in row._asdict().items():
            if name not in ("window_start", "window_end"):
                assert _same(rec[name], value), name
    lines, _ = _write(ESTIMATES, [big], 0)
    assert lines == [json_record(big._asdict())]


def test_vector_encoder_writes_what_fastavro_writes(seed_sequence):
    from transforms.io import VectorRecordEncoder, pack_record, vector_fields

    parsed = schemas.parsed_schema("estimate")
    enc = VectorRecordEncoder(parsed)
    rec = _row(2048, seed_sequence)._asdict()
    rec["std"][3] = math.nan
    rec["frequencies"][5] = -math.inf
    nulls = {"unbiased": None, "ci_low": None, "labels": None}
    variants = [rec, {**rec, **nulls}, {**rec, "ci_includes_zero": []}]
    for r in variants:
        packed = pack_record(r, vector_fields("estimate"))
        assert isinstance(packed["frequencies"], np.ndarray) or r["frequencies"] == []
        want = io.BytesIO()
        fastavro.schemaless_writer(want, parsed, r)
        assert enc.encode(packed) == want.getvalue()


def test_show_and_store_read_a_compact_row(tmp_path: Path, seed_sequence, capsys):
    from pipelines import show, show_kinds

    row = _row(6000, seed_sequence)
    line = estimate_json(row._asdict(), 50)
    out = tmp_path / "out"
    out.mkdir()
    (out / "estimates-pane00000-00000-of-00001.jsonl").write_text(json.dumps(line, allow_nan=False) + "\n")
    counts = {"read": 20000, "accepted": 20000, "rejected": 0}
    (out / "counts.json").write_text(json.dumps({"counts": counts}))
    kind, rows = show.load_rows(str(out))
    assert kind == "frequency" and rows == [line]
    table = show_kinds.frequency_table(rows[0], 5)
    best = int(np.argmax(row.frequencies))
    assert table["of"] == 6000 and table["held"] == 50 and table["rows"][0]["value"] == best
    assert table["rows"][0]["estimate"] == row.frequencies[best]
    assert show.run([str(out), "--top", "60"]) == 0
    text = capsys.readouterr().out
    assert "top 50 of 6000 values" in text and "every value: the pane's .avro file" in text
    (pane,) = flatten_rows([row], max_items=50)  # the store keeps the same values of the full row
    assert [it.item for it in pane.items] == line["values"] and pane.n_items == 6000


@pytest.mark.integration
def test_write_results_on_the_direct_runner(tmp_path: Path, seed_sequence):
    import apache_beam as beam

    from transforms.io import WriteResults

    row = _row(5000, seed_sequence)
    with beam.Pipeline(runner="DirectRunner") as p:
        _ = p | beam.Create([row]) | WriteResults(str(tmp_path), ESTIMATES, jsonl_max_values=300)
    (jsonl,) = tmp_path.glob("estimates-*.jsonl")
    (avro,) = tmp_path.glob("estimates-*.avro")
    assert jsonl.name.replace(".jsonl", ".avro") == avro.name
    (line,) = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert line == json.loads(json.dumps(estimate_json(row._asdict(), 300), allow_nan=False))
    with open(avro, "rb") as fh:
        (rec,) = list(fastavro.reader(fh))
    assert rec["frequencies"] == row.frequencies and rec["ci_includes_zero"] == row.ci_includes_zero


def test_jsonl_max_values_flag(capsys):
    from pipelines import frequency
    from transforms.io import result_sinks

    base = ["--task", "t.json", "--input", "x/*.avro", "--output", "out"]
    assert frequency.parser().parse_args(base).jsonl_max_values == DEFAULT_JSONL_MAX_VALUES
    assert frequency.parser().parse_args([*base, "--jsonl_max_values", "0"]).jsonl_max_values == 0
    for bad in ("-1", "many"):
        with pytest.raises(SystemExit) as exc:
            frequency.parser().parse_args([*base, "--jsonl_max_values", bad])
        assert exc.value.code == 2
        assert "--jsonl_max_values: must be an integer >= 0 (0: every value)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="jsonl_max_values must be an integer >= 0"):
        result_sinks(ESTIMATES, -3)


def test_pubsub_message_of_a_large_domain_is_the_compact_row(seed_sequence):
    """The job's Pub/Sub message is the JSON Lines form: a whole row at d = 2^18 (about 38 MB) would exceed
    Pub/Sub's 10 MB message limit."""
    from pipelines.frequency import _to_pubsub

    row = _row(2**18, seed_sequence)
    message = _to_pubsub(row)
    assert len(message) < 10_000_000
    got = json.loads(message)
    assert got == json.loads(json.dumps(estimate_json(row._asdict(), DEFAULT_JSONL_MAX_VALUES)))
    assert len(got["values"]) == DEFAULT_JSONL_MAX_VALUES
