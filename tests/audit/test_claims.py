"""Every central-DP claim surface against an independent reference, on adversarial inputs.

One binary GRR task (eps0 = 2, delta 1e-6, 600 s shuffler buckets, 3600 s windows, the default
``min_reports``) collected through the real shuffler (``ldp-beam shuffle --shuffle_key``), then one
frequency job (``--shuffle_key``, ``--store``) over its batches plus what an attacker adds:

* window 0: six batches of 1,000 to 1,300 reports (several batches per window);
* window 1: a batch whose header ``n`` is rewritten to 100,000 after signing (a forged header), beside an
  honest batch;
* window 2: one request's worth of reports (the collector's default ``max_batch``) alone in its bucket (one
  sender filling a bucket): the shuffler must withhold it;
* window 3: a plain client file given the shuffler's header keys (never shuffled, never signed).

The reference is recomputed here from the files alone: each batch's records are counted with fastavro and
``ldp.shuffle.central_epsilon_report`` is called at that batch's own ``n``; a window whose reports are not all
in honest batches has no central reference (the local eps0 only). Each surface (``counts.json``'s
``privacy_accounting``, the store's run summary, the dashboard's privacy table rows, ``ldp-beam privacy`` at
the smallest batch) must claim no central figure where there is no reference, and never a figure below the
reference where there is one.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np
import pytest

from ldp.aggregate import iso_ms
from ldp.shuffle import central_epsilon_report
from ldp.task import parse_task

pytestmark = [pytest.mark.integration]

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR, BUCKET = 3_600_000, 600_000
EPS0, DELTA = 2.0, 1e-6
TASK = {
    "task_id": "audit-claims",
    "mechanism": "grr",
    "epsilon": EPS0,
    "domain_size": 2,
    "window": {"size_s": 3600},
    "anonymity": {"shuffled": True, "time_precision_s": 600, "delta": DELTA},
}
SIX = (1000, 1070, 1130, 1190, 1240, 1300)


def _client_file(path: Path, task, start_ms: int, n: int, seed: int, metadata: dict | None = None) -> None:
    import fastavro

    import schemas
    from wire.records import reports_to_records

    rng = np.random.default_rng(seed)
    reps = task.make_oracle().encode(rng.integers(0, 2, n), rng=rng)
    recs = reports_to_records(task.task_id, reps, np.full(n, start_ms, dtype=np.int64))
    with open(path, "wb") as fh:
        fastavro.writer(fh, schemas.report_schema(), recs, metadata=metadata or {})


def _records(path: str) -> int:
    import fastavro

    with open(path, "rb") as fh:
        return sum(1 for _ in fastavro.reader(fh))


def _meta(path: str) -> dict[str, str]:
    import fastavro

    with open(path, "rb") as fh:
        meta = fastavro.reader(fh).metadata
    return {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in meta.items()}


def _reference(n: int) -> float:
    return central_epsilon_report(EPS0, n, DELTA, "grr", 2).epsilon


def _window_of(ms: int) -> int:
    return (ms - T0) // HOUR


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Builds the inputs, runs the shuffler and the job once; returns what the checks need."""
    import subprocess
    import sys

    from ldp.shuffle import provenance as pv
    from tests.conftest import venv_env

    tmp = tmp_path_factory.mktemp("claims")
    task_file = tmp / "task.json"
    task_file.write_text(json.dumps(TASK))
    task = parse_task(TASK)
    key = tmp / "shuffle.key"
    pv.new_key_file(key)
    clients = tmp / "clients"
    clients.mkdir()
    from pipelines.collector import DEFAULT_MAX_BATCH

    plan = [(T0 + i * BUCKET, n) for i, n in enumerate(SIX)]
    plan += [(T0 + HOUR, 1200), (T0 + HOUR + BUCKET, 1100)]
    plan += [(T0 + 2 * HOUR, DEFAULT_MAX_BATCH)]
    for i, (start, n) in enumerate(plan):
        _client_file(clients / f"c{i:02d}.avro", task, start, n, seed=i)

    def cli(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", *args]
        return subprocess.run(cmd, cwd=str(tmp), env=venv_env(), capture_output=True, text=True, timeout=600)

    shuffled = tmp / "shuffled"
    res = cli("pipelines.shuffle", "--task", str(task_file), "--input", str(clients / "*.avro"),
              "--output", str(shuffled), "--shuffle_key", str(key))
    assert res.returncode == 0, res.stderr[-3000:]
    batches = sorted(glob.glob(str(shuffled / "batches" / "*.avro")))
    job_in = tmp / "job_in"
    job_in.mkdir()
    truth: dict[str, dict] = {}
    for b in batches:
        meta = _meta(b)
        start = int(meta[pv.META_BUCKET_START])
        dst = job_in / f"batch-{start}.avro"
        data = Path(b).read_bytes()
        honest = True
        if start == T0 + HOUR:  # forge the header's n after signing
            c = pv.read_container(data)
            data = pv.encode_header({**c.metadata, pv.META_N: b"100000"}, c.sync) + data[c.header_len :]
            honest = False
        dst.write_bytes(data)
        truth[str(dst)] = {"start": start, "honest": honest}
    plain = job_in / "plain.avro"
    plain_meta = {pv.META_N: "1000", pv.META_TASK_ID: TASK["task_id"],
                  pv.META_BUCKET_START: str(T0 + 3 * HOUR), pv.META_BUCKET_END: str(T0 + 3 * HOUR + BUCKET)}
    _client_file(plain, task, T0 + 3 * HOUR, 1000, seed=99, metadata=plain_meta)
    truth[str(plain)] = {"start": T0 + 3 * HOUR, "honest": False}
    for info, path in ((v, k) for k, v in truth.items()):
        info["n"] = _records(path)
    out, db = tmp / "out", tmp / "store.db"
    res = cli("pipelines.frequency", "--task", str(task_file), "--input", str(job_in / "*.avro"), "--output",
              str(out), "--shuffle_key", str(key), "--store", f"sqlite:///{db}")
    assert res.returncode == 0, res.stderr[-3000:]
    honest_in = tmp / "honest_in"  # the honest batches alone: a job that must make its claims
    honest_in.mkdir()
    for path, info in truth.items():
        if info["honest"]:
            (honest_in / Path(path).name).write_bytes(Path(path).read_bytes())
    res = cli("pipelines.frequency", "--task", str(task_file), "--input", str(honest_in / "*.avro"),
              "--output", str(tmp / "honest_out"), "--shuffle_key", str(key))
    assert res.returncode == 0, res.stderr[-3000:]
    return {"tmp": tmp, "task_file": task_file, "truth": truth, "out": out, "db": db, "batches": batches,
            "cli": cli}


def _references(truth: dict[str, dict]) -> dict[int, float | None]:
    """Window index -> the largest honest batch figure, or None when any of its batches is not honest."""
    by_window: dict[int, list[dict]] = {}
    for info in truth.values():
        by_window.setdefault(_window_of(info["start"]), []).append(info)
    return {
        w: (max(_reference(b["n"]) for b in bs) if all(b["honest"] for b in bs) else None)
        for w, bs in by_window.items()
    }


def _claims_from_entry(entry: dict) -> dict[int, float | None]:
    out = {}
    for w in entry["windows"]:
        start = w.get("window_start")
        ms = start if isinstance(start, int) else None
        if ms is None:
            import datetime as dt

            ms = int(dt.datetime.fromisoformat(str(start).replace("Z", "+00:00")).timestamp() * 1000)
        out[_window_of(ms)] = w.get("central_epsilon")
    return out


def _check(claims: dict[int, float | None], refs: dict[int, float | None], surface: str) -> None:
    problems = []
    for w, claim in claims.items():
        ref = refs.get(w)
        if claim is None:
            continue
        if ref is None:
            problems.append(f"window {w}: claims {claim:.4f} with no honest batch set (local eps0 only)")
        elif claim < ref - 1e-12:
            problems.append(f"window {w}: claims {claim:.4f} below the reference {ref:.4f}")
    assert not problems, f"{surface}: " + "; ".join(problems)


def test_one_request_cannot_fill_a_bucket(run):
    """The shuffler withholds the bucket holding one request's worth of reports (default max_batch below
    the default min_reports), so it is in no batch."""
    from ldp.shuffle import provenance as pv
    from pipelines.collector import DEFAULT_MAX_BATCH

    assert DEFAULT_MAX_BATCH < parse_task(TASK).anonymity.min_reports
    starts = {int(_meta(b)[pv.META_BUCKET_START]) for b in run["batches"]}
    assert T0 + 2 * HOUR not in starts
    assert len(starts) == len(SIX) + 2


def test_counts_json_never_claims_below_the_reference(run):
    entry = json.loads((run["out"] / "counts.json").read_text())["privacy_accounting"]
    refs = _references(run["truth"])
    claims = _claims_from_entry(entry)
    _check(claims, refs, "counts.json")


def test_honest_batches_alone_claim_at_least_the_smallest_batch(run):
    """The six honest batches of window 0 without the attacker's files: a central claim at least the
    figure of the smallest batch (issue 27's done-when), never the sum's."""
    entry = json.loads((run["tmp"] / "honest_out" / "counts.json").read_text())["privacy_accounting"]
    claims = _claims_from_entry(entry)
    honest = {k: v for k, v in run["truth"].items() if v["honest"]}
    _check(claims, _references(honest), "counts.json (honest)")
    why = [w.get("why_no_central") for w in entry["windows"]]
    assert claims.get(0) is not None, f"window 0 (six honest batches) makes no central claim: {why}"
    assert claims[0] >= _reference(min(SIX)) - 1e-12
    assert claims[0] > _reference(sum(SIX))


def test_store_run_summary_never_claims_below_the_reference(run):
    from store import open_store

    store = open_store(f"sqlite:///{run['db']}", create=False)
    (meta,) = store.runs(TASK["task_id"])
    summary = store.run(meta["run_id"])["summary"]
    _check(_claims_from_entry(summary["privacy_accounting"]), _references(run["truth"]), "store run summary")


def test_dashboard_privacy_table_never_claims_below_the_reference(run):
    from pipelines.dashboard_app.shape import guarantee_rows
    from store import open_store

    store = open_store(f"sqlite:///{run['db']}", create=False)
    (meta,) = store.runs(TASK["task_id"])
    rows, _ = guarantee_rows(store.run(meta["run_id"])["summary"], limit=100)
    claims = {}
    for r in rows:
        start = r["window"].split(" - ")[0]
        import datetime as dt

        ms = int(dt.datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() * 1000)
        claims[_window_of(ms)] = r["central_epsilon"]
    _check(claims, _references(run["truth"]), "dashboard privacy table")
    assert iso_ms(T0)  # the table's windows are the job's


def test_privacy_command_at_the_smallest_batch_is_not_below_the_reference(run):
    honest = [i["n"] for i in run["truth"].values() if i["honest"]]
    n_min = min(honest)
    out = run["tmp"] / "privacy.json"
    args = ("--task", str(run["task_file"]), "--users", str(n_min), "--json", str(out))
    res = run["cli"]("pipelines.privacy", *args)
    assert res.returncode == 0, res.stderr[-2000:]
    fig = json.loads(out.read_text())
    assert fig["central_epsilon"] >= _reference(n_min) - 1e-12
    assert os.path.exists(out)
