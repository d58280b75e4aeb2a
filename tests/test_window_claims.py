"""Central claims from the real anonymity set: a window's figure is the worst of its batches', each batch
counted at its own n and only when its provenance verified; the planner plans per batch."""

from __future__ import annotations

import numpy as np
import pytest

from ldp.aggregate import iso_ms
from ldp.anonymity import batch_reports, shuffle_accounting
from ldp.shuffle import central_epsilon, central_epsilon_binary_rr_exact, central_epsilon_report
from ldp.task import TaskError, parse_task
from pipelines.privacy import privacy_report
from pipelines.window_privacy import window_privacy

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
GRR2 = {"task_id": "bin", "mechanism": "grr", "epsilon": 2.0, "domain_size": 2, "window": {"size_s": 3600}}
ANON = {"shuffled": True, "time_precision_s": 600, "min_reports": 500, "delta": 1e-6}
WINDOW = (iso_ms(T0), iso_ms(T0 + 3_600_000))


def _batch(start_ms: int, n: int, *, verified: bool = True, reason: str | None = None, **extra) -> dict:
    out = {"task_id": "bin", "bucket_start_ms": start_ms, "bucket_end_ms": start_ms + 600_000,
           "bucket_start": iso_ms(start_ms), "bucket_end": iso_ms(start_ms + 600_000), "n": n,
           "declared_n": n, "time_precision_s": 600, "min_reports": 500, "file": f"b{start_ms}",
           "path": f"b{start_ms}", "verified": verified, "provenance": reason}  # fmt: skip
    out.update(extra)
    return out


def _six(sizes=(1052, 944, 1010, 980, 1030, 984), **kw) -> list[dict]:
    return [_batch(T0 + i * 600_000, n, **kw) for i, n in enumerate(sizes)]


def test_six_batches_claim_at_least_the_exact_figure_of_the_smallest():
    """The issue's case: binary GRR, eps0 = 2, delta 1e-6, six 600 s batches of 944-1,052 in a 3600 s
    window (6,000 users). Summing them gave 0.1155; each batch's exact figure is 0.314-0.335."""
    task = parse_task({**GRR2, "anonymity": ANON})
    batches = _six()
    assert sum(b["n"] for b in batches) == 6000
    out = window_privacy(task, [WINDOW], batches, [], accepted={WINDOW: 6000}, key_given=True)
    (w,) = out["windows"]
    exact_smallest = central_epsilon_binary_rr_exact(2.0, 944, 1e-6)
    assert w["central_epsilon"] >= exact_smallest > 0.33
    assert w["central_epsilon"] > 2.5 * central_epsilon_binary_rr_exact(2.0, 6000, 1e-6)  # not the sum's
    assert w["n"] == 944 and w["reports_in_batches"] == 6000 and w["batches"] == 6
    assert w["method"].startswith("the worst of the window's 6 batch(es), at n=944")
    # every batch listed with its own figure, each at least its exact one, the window's the largest
    assert [b["n"] for b in w["per_batch"]] == sorted(b["n"] for b in batches)
    for b in w["per_batch"]:
        assert b["verified"] and b["central_epsilon"] >= central_epsilon_binary_rr_exact(2.0, b["n"], 1e-6)
        assert b["central_epsilon"] <= w["central_epsilon"]
    assert w["central_epsilon"] == max(b["central_epsilon"] for b in w["per_batch"])
    assert out["provenance"] == {"key_given": True, "batches_verified": 6, "batches_unverified": 0,
                                 "reports_in_unverified_batches": 0, "unverified_reasons": {}}  # fmt: skip


def test_an_olh_window_claim_names_the_variation_ratio_pair_and_is_tighter():
    """OLH at eps0 = 4 (g = 64, a power of two for the gf2-affine family): the window's claim comes from
    OLH's own variation-ratio pair, below the general bound's figure at the same n."""
    olh = {**GRR2, "task_id": "bin", "mechanism": "olh", "epsilon": 4.0, "domain_size": 1024}
    task = parse_task({**olh, "anonymity": ANON})
    assert shuffle_accounting(task) == ("olh", 64)
    out = window_privacy(task, [WINDOW], _six(), [], accepted={WINDOW: 6000}, key_given=True)
    (w,) = out["windows"]
    own = central_epsilon_report(4.0, 944, 1e-6, "olh", 64)
    assert out["accounting"] == "olh" and w["central_epsilon"] == pytest.approx(own.epsilon)
    assert "variation_ratio (olh, g = 64" in w["method"] and own.method in w["method"]
    assert w["central_epsilon"] < 0.9 * central_epsilon(4.0, 944, 1e-6)


@pytest.mark.parametrize("reason", ["no_key", "no_tag", "bad_tag", "n_mismatch", "bad_tag_version"])
def test_one_unverified_batch_leaves_its_window_without_a_central_claim(reason):
    task = parse_task({**GRR2, "anonymity": ANON})
    batches = _six()
    batches[2] = {**batches[2], "verified": False, "provenance": reason}
    out = window_privacy(task, [WINDOW], batches, [])
    (w,) = out["windows"]
    assert w["central_epsilon"] is None and w["preconditions"]["authenticated"] is False
    assert f"not authenticated ({reason} 1)" in w["why_no_central"]
    bad = [b for b in w["per_batch"] if not b["verified"]]
    assert len(bad) == 1 and bad[0]["central_epsilon"] is None and bad[0]["provenance"] == reason
    assert reason in bad[0]["why_no_central"]
    # the verified batches keep their own figures: their users did hide among their batch
    assert all(b["central_epsilon"] is not None for b in w["per_batch"] if b["verified"])
    assert out["provenance"]["unverified_reasons"] == {reason: 1}
    assert out["provenance"]["reports_in_unverified_batches"] == batches[2]["n"]
    assert w["batches_unverified"] == 1


def test_entries_without_a_verdict_never_verify():
    task = parse_task({**GRR2, "anonymity": ANON})
    raw = [{k: v for k, v in b.items() if k not in ("verified", "provenance")} for b in _six()]
    (w,) = window_privacy(task, [WINDOW], raw, [])["windows"]
    assert w["central_epsilon"] is None and "unverified 6" in w["why_no_central"]


def test_forged_header_n_is_not_what_the_figure_uses():
    """600 records whose header says 100,000: the entry's n is the body's count; an unverified batch
    gets nothing, and even a verified entry is figured at its records (exact at 600: 0.442)."""
    task = parse_task({**GRR2, "epsilon": 2.0, "window": {"size_s": 600}, "anonymity": ANON})
    win = (iso_ms(T0), iso_ms(T0 + 600_000))
    forged = _batch(T0, 600, verified=False, reason="n_mismatch", declared_n=100_000)
    (w,) = window_privacy(task, [win], [forged], [])["windows"]
    assert w["central_epsilon"] is None and w["per_batch"][0]["declared_n"] == 100_000
    (ok,) = window_privacy(task, [win], [_batch(T0, 600)], [])["windows"]
    assert ok["central_epsilon"] >= central_epsilon_binary_rr_exact(2.0, 600, 1e-6) > 0.44


def test_budget_spent_after_the_smallest_batch_bounds_the_others_by_it():
    task = parse_task({**GRR2, "anonymity": ANON})
    (w,) = window_privacy(task, [WINDOW], _six(), [], budget_s=0.0)["windows"]
    # the first figure is always computed once the deadline is checked before it: none at budget 0
    assert w["central_epsilon"] is None and "--users 944" in w["why_no_central"]


def test_batch_below_min_reports_and_plain_files():
    task = parse_task({**GRR2, "anonymity": ANON})
    batches = _six((1052, 400, 1010, 980, 1030, 984))
    (w,) = window_privacy(task, [WINDOW], batches, [])["windows"]
    assert w["central_epsilon"] is None and "min_reports" in w["why_no_central"]
    (w,) = window_privacy(task, [WINDOW], _six(), ["/in/plain.avro"])["windows"]
    assert w["central_epsilon"] is None and "without the shuffler's metadata" in w["why_no_central"]
    assert all(b["central_epsilon"] is None for b in w["per_batch"])


# -- planning per batch -------------------------------------------------------------------------------------
OLH = {"task_id": "apps", "mechanism": "olh", "domain_size": 1024}
DAILY_TARGET = {"central_epsilon": 1.0, "expected_reports": 1_000_000, "delta": 1e-9}


def test_batch_reports_spreads_a_window_over_its_buckets():
    assert batch_reports(1_000_000, 86_400, 3600) == 41_666
    assert batch_reports(6000, 3600, 600) == 1000
    assert batch_reports(5000, None, 3600) == 5000  # the global window: the number is per batch
    assert batch_reports(5000, 3600, 3600) == 5000


def test_daily_target_with_hourly_buckets_plans_per_batch():
    """The documented target (1 at delta 1e-9, 1e6 reports a day): planned at the window's total, eps0 =
    8.842 earns no amplification in an hourly batch of ~41,667; planned per batch it meets the target."""
    task = parse_task({**OLH, "epsilon": "auto", "window": {"size_s": 86_400}, "anonymity": DAILY_TARGET})
    assert task.expected_batch_reports == 41_666
    assert shuffle_accounting(task) == ("olh", task.make_oracle().g)  # planned on OLH's own bound
    assert central_epsilon(task.epsilon, 41_666, 1e-9, *shuffle_accounting(task)) <= 1.0 + 1e-9
    assert central_epsilon(task.epsilon, 41_666, 1e-9) > 1.0  # the general bound would not certify it
    assert task.epsilon < 8.0
    with pytest.raises(TaskError, match="reports per shuffled batch"):
        parse_task({**OLH, "epsilon": 8.842, "window": {"size_s": 86_400}, "anonymity": DAILY_TARGET})
    report = privacy_report(task, None)
    assert report["users"] == 41_666 and report["central_epsilon"] <= 1.0 + 1e-9
    assert report["target"]["expected_batch_reports"] == 41_666 and report["target"]["met_at_users"]


def test_target_whose_batches_would_be_withheld_is_refused():
    anon = {**DAILY_TARGET, "expected_reports": 20_000, "min_reports": 1000}
    with pytest.raises(TaskError, match="833 reports per 3600 s batch, below anonymity.min_reports"):
        parse_task({**OLH, "epsilon": "auto", "window": {"size_s": 86_400}, "anonymity": anon})


def test_the_privacy_command_composes_batch_figures_over_windows():
    task = parse_task({**GRR2, "anonymity": {**ANON, "min_reports": 500}})
    r = privacy_report(task, 944, windows=24)
    one = central_epsilon_report(2.0, 944, 1e-6, "grr", 2).epsilon
    assert r["central_epsilon"] == pytest.approx(one)
    assert one < r["central_epsilon_composed"] <= r["central_epsilon_composed_basic"]
    assert np.isfinite(r["central_epsilon_composed"])


# -- through whole job runs (DirectRunner, seconds each: the integration tier) ------------------------------
FREQ = {
    "task_id": "prov",
    "mechanism": "grr",
    "epsilon": 2.0,
    "domain_size": 4,
    "window": {"size_s": 600},
    "anonymity": {"shuffled": True, "time_precision_s": 600, "min_reports": 100, "delta": 1e-6},
}


def _batch_bytes(task, start_ms: int, n: int, *, key: bytes | None, seed: int, task_id: str = "prov",
                 meta_bucket: int | None = None, **meta_extra) -> bytes:  # fmt: skip
    """A batch file of ``n`` reports at ``start_ms``: its header says bucket ``meta_bucket`` (default the
    same) and task ``task_id``; signed under ``key`` when given."""
    import io

    import fastavro

    import schemas
    from ldp.shuffle import provenance as pv
    from wire.records import reports_to_records

    rng = np.random.default_rng(seed)
    reps = task.make_oracle().encode(rng.integers(0, 4, n), rng=rng)
    recs = reports_to_records(task.task_id, reps, np.full(n, start_ms, dtype=np.int64))
    b = start_ms if meta_bucket is None else meta_bucket
    meta = {pv.META_N: str(n), pv.META_TASK_ID: task_id, pv.META_BUCKET_START: str(b),
            pv.META_BUCKET_END: str(b + 600_000), "ldp.shuffle.time_precision_s": "600",
            "ldp.shuffle.min_reports": "100", **meta_extra}  # fmt: skip
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), recs, metadata=meta)
    return buf.getvalue() if key is None else pv.sign_container(buf.getvalue(), key)


def _relabel(data: bytes, **changes: str) -> bytes:
    from ldp.shuffle import provenance as pv

    c = pv.read_container(data)
    meta = {**c.metadata, **{f"ldp.shuffle.{k}": v.encode() for k, v in changes.items()}}
    return pv.encode_header(meta, c.sync) + data[c.header_len :]


def _reblock(data: bytes, task, n: int, start_ms: int, seed: int) -> bytes:
    """The same header (tag included) over a body of ``n`` other records, header n updated."""
    from ldp.shuffle import provenance as pv

    c = pv.read_container(data)
    other = pv.read_container(fresh := _batch_bytes(task, start_ms, n, key=None, seed=seed))
    body = fresh[other.header_len :].replace(other.sync, c.sync)
    meta = {**c.metadata, pv.META_N: str(n).encode()}
    return pv.encode_header(meta, c.sync) + body


def _job(tmp_path, name: str, files: dict[str, bytes], *extra: str) -> dict:
    from pipelines import frequency

    d = tmp_path / name
    d.mkdir()
    for fname, data in files.items():
        (d / fname).write_bytes(data)
    (tmp_path / "task.json").write_text(__import__("json").dumps(FREQ))
    return frequency.run(["--task", str(tmp_path / "task.json"), "--input", str(d / "*.avro"),
                          "--output", str(tmp_path / f"out-{name}"), *extra])  # fmt: skip


@pytest.mark.integration
def test_forged_batches_earn_no_central_claim_through_a_job(tmp_path):
    from ldp.shuffle import provenance as pv
    from ldp.shuffle.provenance import new_key_file

    task = parse_task(FREQ)
    key_file = tmp_path / "shuffle.key"
    new_key_file(key_file)
    key = key_file.read_bytes().rstrip(b"\n")
    w = [T0 + i * 600_000 for i in range(9)]
    good = _batch_bytes(task, w[0], 500, key=key, seed=1)
    files = {
        "0-genuine.avro": good,
        "1-n.avro": _relabel(_batch_bytes(task, w[1], 500, key=key, seed=2), n="5000"),
        # signed for the bucket before, relabelled into this one (its records' times are this one's)
        "2-bucket.avro": _relabel(
            _batch_bytes(task, w[2], 500, key=key, seed=3, meta_bucket=w[1]),
            bucket_start_ms=str(w[2]),
            bucket_end_ms=str(w[2] + 600_000),
        ),  # fmt: skip
        "3-added.avro": _reblock(_batch_bytes(task, w[3], 500, key=key, seed=4), task, 520, w[3], 40),
        "4-removed.avro": _reblock(_batch_bytes(task, w[4], 500, key=key, seed=5), task, 480, w[4], 41),
        "5-plain-with-keys.avro": _batch_bytes(task, w[5], 500, key=None, seed=6),
        "6-600-says-100000.avro": _batch_bytes(task, w[6], 600, key=None, seed=7, **{pv.META_N: "100000"}),
        "7-forged-tag.avro": _batch_bytes(
            task, w[7], 500, key=None, seed=8, **{"ldp.shuffle.tag": "0" * 64, "ldp.shuffle.tag_version": "1"}
        ),  # fmt: skip
        "8-other-key.avro": _batch_bytes(task, w[8], 500, key=b"x" * 32, seed=9),
    }
    summary = _job(tmp_path, "forged", files, "--shuffle_key", str(key_file))
    acc = summary["privacy_accounting"]
    by_start = {iso_ms(x): i for i, x in enumerate(w)}
    expect = {1: "n_mismatch", 2: "bad_tag", 3: "bad_tag", 4: "bad_tag", 5: "no_tag", 6: "n_mismatch",
              7: "bad_tag", 8: "bad_tag"}  # fmt: skip
    seen = {}
    for row in acc["windows"]:
        i = by_start[row["window_start"]]
        (b,) = row["per_batch"]
        seen[i] = b["provenance"]
        if i == 0:
            assert b["verified"] and row["central_epsilon"] is not None
            assert row["central_epsilon"] == central_epsilon_report(2.0, 500, 1e-6, "grr", 4).epsilon
        else:
            assert row["central_epsilon"] is None and b["central_epsilon"] is None, i
            assert expect[i] in row["why_no_central"]
    assert seen == {0: None, **expect}
    assert acc["provenance"]["unverified_reasons"] == {"bad_tag": 5, "n_mismatch": 2, "no_tag": 1}
    assert acc["provenance"]["batches_verified"] == 1 and acc["provenance"]["key_given"] is True
    # the records counted from each body, not the header's word
    six = next(r for r in acc["windows"] if by_start[r["window_start"]] == 6)["per_batch"][0]
    assert (six["n"], six["declared_n"]) == (600, 100_000)
    assert summary["counts"]["accepted"] == sum(r["accepted"] for r in acc["windows"])
    stored = __import__("json").loads((tmp_path / "out-forged" / "counts.json").read_text())
    assert stored["privacy_accounting"]["provenance"] == acc["provenance"]


@pytest.mark.integration
def test_without_a_key_or_with_another_tasks_batch_nothing_is_claimed(tmp_path):
    from ldp.shuffle.provenance import new_key_file

    task = parse_task(FREQ)
    key_file = tmp_path / "shuffle.key"
    new_key_file(key_file)
    key = key_file.read_bytes().rstrip(b"\n")
    good = _batch_bytes(task, T0, 500, key=key, seed=1)
    no_key = _job(tmp_path, "nokey", {"g.avro": good})["privacy_accounting"]
    assert no_key["provenance"]["unverified_reasons"] == {"no_key": 1}
    assert no_key["windows"][0]["central_epsilon"] is None
    other = _batch_bytes(task, T0 + 600_000, 500, key=key, seed=2, task_id="another")
    mixed = _job(tmp_path, "mixed", {"g.avro": good, "o.avro": other}, "--shuffle_key", str(key_file))
    acc = mixed["privacy_accounting"]
    assert acc["provenance"]["unverified_reasons"] == {"wrong_task": 1}
    assert all(r["central_epsilon"] is None for r in acc["windows"])


@pytest.mark.integration
def test_a_key_others_may_read_stops_the_job_before_it_runs(tmp_path):
    from ldp.shuffle.provenance import new_key_file

    key_file = tmp_path / "shuffle.key"
    new_key_file(key_file)
    key_file.chmod(0o644)
    task = parse_task(FREQ)
    with pytest.raises(SystemExit) as exc:
        _job(tmp_path, "k", {"g.avro": _batch_bytes(task, T0, 500, key=None, seed=1)},
             "--shuffle_key", str(key_file))  # fmt: skip
    assert exc.value.code == 2
    assert not (tmp_path / "out-k").exists()


@pytest.mark.integration
def test_range_job_accounting_counts_each_report_once(tmp_path):
    """Several queries: each answer row carries the window's total, which was summed once per query."""
    import json

    import simulator
    from ldp.rangequery.queries import random_queries
    from pipelines import range_queries

    obj = {"task_id": "rq", "mechanism": "hdg", "epsilon": 1.0, "expected_users": 3000,
           "attributes": [{"name": "a", "domain_size": 16}, {"name": "b", "domain_size": 16}]}  # fmt: skip
    (tmp_path / "task.json").write_text(json.dumps(obj))
    task = parse_task(obj)
    simulator.simulate_files(task, 3000, "uniform", tmp_path / "in", seed=3, files=2,
                                        start_ms=T0, duration_s=3600.0)  # fmt: skip
    qs = random_queries([16, 16], 7, 2, 0.3, rng=np.random.default_rng(0))
    (tmp_path / "q.json").write_text(json.dumps([q.to_json(("a", "b")) for q in qs]))
    s = range_queries.run(["--task", str(tmp_path / "task.json"), "--input", str(tmp_path / "in" / "*.avro"),
                           "--queries", str(tmp_path / "q.json"), "--output", str(tmp_path / "out"),
                           "--window_size", "1800"])  # fmt: skip
    windows = s["privacy_accounting"]["windows"]
    assert len(windows) == 2
    assert sum(w["accepted"] for w in windows) == s["counts"]["accepted"] == 3000
