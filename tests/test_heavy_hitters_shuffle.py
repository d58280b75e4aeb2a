"""The heavy_hitters kind's shuffled mode: one bound per level (ldp.shuffle.levels) checked against the exact
curve of a toy two-level PEM (every split of the other users' values, both directions), the level
parameters against the real encoder's output distributions, the signed per-level counts of a batch, the
claims, the task's central target; and (integration) reports through the shuffler into the job."""

from __future__ import annotations

import io
import itertools
import json
import math
import sys
from collections import Counter
from pathlib import Path

import fastavro
import numpy as np
import pytest

import schemas
from ldp.anonymity import shuffle_accounting
from ldp.shuffle import accountant as acc
from ldp.shuffle import lower_bounds as lb
from ldp.shuffle import provenance as pv
from ldp.shuffle.levels import (
    accounted_per_group,
    central_epsilon_levels,
    level_counts,
    levelled_delta_curve,
)
from ldp.shuffle.randomizers import LevelAccounting, LevelledRandomizer
from ldp.shuffle.variation import variation_parameters
from ldp.task import TaskError, parse_task

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier (about 10 s); the pipeline test is integration

EPS = np.array([0.0, 0.1, 0.2, 0.4, 0.7, 1.0])
BASE = {"task_id": "words", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0, "max_length": 6}
SHUFFLED = {"shuffled": True, "time_precision_s": 600, "min_reports": 1000}

# -------------------------------------------------------------------------------------------- the toy PEM
# Values are the 2-bit strings 0..3. Level 0 reports the first bit by GRR on 2 prefixes; level 1 the whole
# value by GF(2)-affine OLH with one output bit: the public seed is (S, c), S in {0,1}^2 and c in {0,1}
# (8 functions, every one equally likely), y = <S, v> xor c kept w.p. e/(e + 1). Outputs are (seed, y).


def _grr_prefix_channel(eps0: float) -> np.ndarray:
    e = math.exp(eps0)
    keep = e / (e + 1.0)
    return np.array([[keep, 1 - keep] if v >> 1 == 0 else [1 - keep, keep] for v in range(4)])


def _gf2_channel(eps0: float) -> np.ndarray:
    e = math.exp(eps0)
    keep = e / (e + 1.0)
    out = np.zeros((4, 16))
    for v in range(4):
        for s, c, y in itertools.product(range(4), range(2), range(2)):
            bucket = (bin(s & v).count("1") & 1) ^ c
            out[v, (s * 2 + c) * 2 + y] = (keep if y == bucket else 1 - keep) / 8.0
    return out


def _toy(share0: float = 0.5) -> LevelledRandomizer:
    def levels(eps0: float) -> tuple[LevelAccounting, ...]:
        return (LevelAccounting("toy level 0 (grr k = 2)", share0, "grr", 2),
                LevelAccounting("toy level 1 (gf2 olh g = 2)", 1.0 - share0, "olh", 2))

    return LevelledRandomizer("toy pem", levels)


def _worst(channel: np.ndarray, n: int) -> np.ndarray:
    """The exact curve of ``n`` shuffled reports of ``channel``, worst over every pair of values."""
    pairs = itertools.combinations(range(channel.shape[0]), 2)
    return np.max([lb.histogram_delta(channel, n, EPS, a, b) for a, b in pairs], axis=0)


def _multisets(channel: np.ndarray, values: list[int]) -> Counter:
    """The law of the multiset of the reports of users holding ``values`` (every output tuple summed)."""
    law: Counter = Counter()
    for outs in itertools.product(range(channel.shape[1]), repeat=len(values)):
        law[tuple(sorted(outs))] += float(np.prod([channel[v, o] for v, o in zip(values, outs)]))
    return law


def _joint_delta(eps: float, world0: Counter, world1: Counter) -> float:
    keys = set(world0) | set(world1)
    e = math.exp(eps)
    return max(sum(max(a.get(k, 0.0) - e * b.get(k, 0.0), 0.0) for k in keys)
               for a, b in ((world0, world1), (world1, world0)))


def test_the_whole_view_of_a_two_level_batch_is_within_the_levelled_bound() -> None:
    """Two users at each level, the target at level 1: the law of both levels' multisets, every value of
    the others and every pair of target values; its divergence is the level's own (the other level's
    multiset is the same in both worlds) and never above the bound at the batch's level counts."""
    eps0 = 1.0
    toy = _toy()
    grr, gf2 = _grr_prefix_channel(eps0), _gf2_channel(eps0)
    bound = levelled_delta_curve(EPS, eps0, 4, toy, group_counts={0: 2, 1: 2})
    pairs = itertools.combinations_with_replacement(range(4), 2)
    level0 = {tuple(u): _multisets(grr, list(u)) for u in pairs}
    for other, (a, b) in itertools.product(range(4), itertools.combinations(range(4), 2)):
        one_a, one_b = _multisets(gf2, [other, a]), _multisets(gf2, [other, b])
        alone = [_joint_delta(x, one_a, one_b) for x in EPS]
        for law0 in list(level0.values())[:3]:
            joint_a = Counter({(k0, k1): p0 * p1 for k0, p0 in law0.items() for k1, p1 in one_a.items()})
            joint_b = Counter({(k0, k1): p0 * p1 for k0, p0 in law0.items() for k1, p1 in one_b.items()})
            joint = np.array([_joint_delta(x, joint_a, joint_b) for x in EPS])
            assert np.allclose(joint, alone, atol=1e-12)
            assert (bound >= joint - 1e-12).all(), (other, a, b, joint, bound)


@pytest.mark.parametrize(("n0", "n1"), [(6, 3), (2, 4)])
def test_the_levelled_bound_is_never_below_each_levels_exact_curve(n0: int, n1: int) -> None:
    """Every split of the other users' values at the target's level, every pair of target values, both
    directions: each level's exact curve at its own count is below the levelled curve, and the reported
    figure is at or above the exact epsilon of the worst level."""
    toy = _toy()
    for eps0 in (0.5, 1.0, 2.0):
        exact = np.maximum(_worst(_grr_prefix_channel(eps0), n0), _worst(_gf2_channel(eps0), n1))
        bound = levelled_delta_curve(EPS, eps0, n0 + n1, toy, group_counts={0: n0, 1: n1})
        assert (bound >= exact - 1e-12).all(), (eps0, exact, bound)
    delta = 0.05
    channels = {0: (_grr_prefix_channel(1.0), n0), 1: (_gf2_channel(1.0), n1)}
    exact_eps = max(lb.epsilon_at(lambda e, c=c, m=m: _worst_at(c, m, e), delta, 1.0, tol=1e-5)
                    for c, m in channels.values())
    rep = acc.central_epsilon_report(1.0, n0 + n1, delta, toy, group_counts={0: n0, 1: n1})
    assert rep.epsilon >= exact_eps and rep.method.startswith("per_level")


def _worst_at(channel: np.ndarray, n: int, eps: np.ndarray) -> np.ndarray:
    pairs = itertools.combinations(range(channel.shape[0]), 2)
    return np.max([lb.histogram_delta(channel, n, eps, a, b) for a, b in pairs], axis=0)


def test_a_batch_figure_is_its_worst_level_and_counts_are_checked() -> None:
    toy = _toy(0.8)
    rows = central_epsilon_levels(2.0, {0: 800, 1: 200}, 1e-6, toy)
    assert [r["n"] for r in rows] == [800, 200]
    rep = acc.central_epsilon_report(2.0, 1000, 1e-6, toy, group_counts=[800, 200])
    assert rep.epsilon == max(r["central_epsilon"] for r in rows)
    assert rep.epsilon == acc.central_epsilon_report(2.0, 200, 1e-6, "olh", 2).epsilon
    assert level_counts(toy, 2.0, 1000) == {0: 749, 1: 149}  # the plan: Bin(1000, share) less 4 sd
    assert level_counts(toy, 2.0, 1000, {0: 0, 1: 1000}) == {1: 1000}  # an empty level protects nobody
    with pytest.raises(ValueError, match="not a level"):
        level_counts(toy, 2.0, 10, {2: 10})
    with pytest.raises(ValueError, match="no reports"):
        level_counts(toy, 2.0, 10, {0: 0})
    # the inverse: every level meets the target at its planned count, the smallest binds
    eps0 = acc.local_epsilon_for_central(0.5, 1e-6, 10_000, toy)
    smallest = acc.central_epsilon(eps0, 10_000, 1e-6, toy)
    assert smallest <= 0.5 + 1e-6 and acc.central_epsilon(eps0 + 0.05, 10_000, 1e-6, toy) > 0.5


# ----------------------------------------------------------------------------------- the real encoder


def test_each_levels_accounting_covers_the_encoders_output_distributions() -> None:
    """At every level of a real task (sketch levels, the verification level; the olh search's GRR first
    level and Mersenne-hash levels), for random public seeds and pairs of values, the report's law has
    ratio at most e^eps and total variation at most the beta its accounting charges."""
    rng = np.random.default_rng(5)
    for params in ({}, {"search": "olh", "first_bits": 1}):
        task = parse_task({**BASE, "epsilon": 1.0, "max_length": 2, "params": params})
        accounting, _ = shuffle_accounting(task)
        assert isinstance(accounting, LevelledRandomizer)
        pem, levels = task.make_mechanism(), accounting.levels(1.0)
        assert len(levels) == len(pem.levels)
        if params:
            assert (levels[0].mechanism, levels[0].domain_size) == ("grr", 2)
        for j, lv in enumerate(levels):
            beta = variation_parameters(lv.mechanism, 1.0, lv.domain_size).beta
            for _ in range(20):
                seed = int(rng.integers(0, 2**63))
                a, b = (bytes(rng.integers(0, 256, size=2).astype(np.uint8)) for _ in range(2))
                pa, pb = pem.output_distribution(a, j, seed), pem.output_distribution(b, j, seed)
                assert np.max(np.maximum(pa / pb, pb / pa)) <= math.exp(1.0) * (1 + 1e-9)
                assert 0.5 * np.abs(pa - pb).sum() <= beta + 1e-12


def test_a_trie_task_plans_every_level_at_the_whole_batch() -> None:
    one = shuffle_accounting(parse_task({**BASE, "anonymity": SHUFFLED}))[0]
    trie = shuffle_accounting(parse_task({**BASE, "mode": "trie", "anonymity": SHUFFLED}))[0]
    assert sorted(one.planned_counts(36_000, 4.0).values()) == [5717, 9660, 9660, 9660]  # mean - 4 sd
    assert set(trie.planned_counts(36_000, 4.0).values()) == {36_000}
    assert "trie" in trie and accounted_per_group(parse_task({**BASE, "anonymity": SHUFFLED}))
    assert not accounted_per_group(parse_task({"task_id": "f", "mechanism": "olh", "epsilon": 1.0,
                                               "domain_size": 8, "anonymity": SHUFFLED}))


# ----------------------------------------------------------------------------------------------- the task


def test_a_central_target_picks_the_largest_epsilon_every_level_meets() -> None:
    obj = {**BASE, "mechanism": "auto", "epsilon": "auto", "expected_users": 1_000_000,
           "anonymity": {**SHUFFLED, "central_epsilon": 1.0, "time_precision_s": 3600}}
    task = parse_task(obj)
    assert task.mechanism == "auto" and 4 < task.epsilon < 20  # not a frequency oracle's candidate
    accounting, _ = shuffle_accounting(task)
    n = task.expected_batch_reports
    assert acc.central_epsilon(task.epsilon, n, 1e-9, accounting) <= 1.0
    assert acc.central_epsilon(task.epsilon + 0.05, n, 1e-9, accounting) > 1.0
    assert parse_task(task.to_dict()) == task
    with pytest.raises(TaskError, match="does not meet anonymity.central_epsilon"):
        parse_task({**obj, "epsilon": round(task.epsilon + 0.1, 3)})
    with pytest.raises(TaskError, match="needs an anonymity section"):
        parse_task({**BASE, "epsilon": "auto"})


def test_privacy_and_plan_give_each_level_and_the_largest() -> None:
    from ldp.plan import plan_task
    from pipelines.privacy import format_report, privacy_report

    task = parse_task({**BASE, "anonymity": SHUFFLED})
    report = privacy_report(task, 36_000)
    assert [lv["n"] for lv in report["levels"]] == [9660, 9660, 9660, 5717]
    assert report["central_epsilon"] == max(lv["central_epsilon"] for lv in report["levels"])
    assert report["central_epsilon"] == pytest.approx(report["levels"][-1]["central_epsilon"])
    text = format_report(report)
    assert "level 3 (verification, olh g = 64): 5,717 reports, epsilon = " in text
    plan = plan_task(task, 36_000)
    per_level = plan["central_epsilon_per_level"]
    assert plan["privacy"]["central_epsilon_per_batch"] == max(r["central_epsilon"] for r in per_level)


# ------------------------------------------------------------------------------------ signed level counts


def _batch(group_n: str | None, n: int = 30) -> bytes:
    meta = {pv.META_N: str(n), pv.META_TASK_ID: "words", pv.META_BUCKET_START: "0",
            pv.META_BUCKET_END: "600000", **({} if group_n is None else {pv.META_GROUP_N: group_n})}
    recs = [{"task_id": "words", "schema_version": 2, "event_time": 0, "group": i % 3, "value": 1,
             "seed": i, "bits": None, "items": None, "reals": None, "client_id": None} for i in range(n)]
    buf = io.BytesIO()
    fastavro.writer(buf, schemas.report_schema(), recs, metadata=meta)
    return buf.getvalue()


def _with_meta(data: bytes, **changes: str | None) -> bytes:
    c = pv.read_container(data)
    meta = dict(c.metadata)
    for k, v in changes.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v.encode()
    return pv.encode_header(meta, c.sync) + data[c.header_len:]


def test_level_counts_are_signed_with_the_batch() -> None:
    key = b"k" * 32
    counts = pv.format_group_counts({0: 10, 1: 10, 2: 10})
    signed = pv.sign_container(_batch(counts), key)
    ok = pv.verify_batch(signed, key, task_id="words")
    assert ok.verified and ok.group_n == ((0, 10), (1, 10), (2, 10))
    for changed in ({pv.META_GROUP_N: "[[0,20],[2,10]]"}, {pv.META_GROUP_N: None}):
        assert pv.verify_batch(_with_meta(signed, **changed), key, task_id="words").reason == "bad_tag"
    plain = pv.sign_container(_batch(None), key)
    added = _with_meta(plain, **{pv.META_GROUP_N: counts})
    assert pv.verify_batch(added, key, task_id="words").reason == "bad_tag"
    for bad in ("[[0,10],[1,10]]", "[[1,10],[0,20]]", "[[0,0],[1,30]]", "nope", '{"0": 30}'):
        assert pv.verify_batch(_with_meta(signed, **{pv.META_GROUP_N: bad}), key,
                               task_id="words").reason == "malformed", bad
    with pytest.raises(pv.ProvenanceError, match="malformed"):
        pv.sign_container(_batch("[[0,29]]"), key)


def test_a_claim_needs_the_batchs_level_counts() -> None:
    from pipelines.window_privacy import window_privacy

    task = parse_task({**BASE, "anonymity": SHUFFLED})
    batch = {"task_id": "words", "bucket_start": "2026-01-01T00:00:00Z", "bucket_end": "2026-01-01T00:10:00Z",
             "bucket_start_ms": 1_767_225_600_000, "bucket_end_ms": 1_767_226_200_000, "n": 3600,
             "time_precision_s": 600, "verified": True, "file": "b.avro"}
    levels = [[0, 1000], [1, 1000], [2, 1000], [3, 600]]
    window = [("2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z")]
    out = window_privacy(task, window, [{**batch, "group_n": levels}], [], key_given=True)
    (row,) = out["windows"]
    accounting, _ = shuffle_accounting(task)
    want = acc.central_epsilon_report(4.0, 3600, 1e-9, accounting, group_counts=dict(levels))
    assert row["central_epsilon"] == pytest.approx(want.epsilon)
    assert row["per_batch"][0]["group_n"] == levels and "verification" in row["method"]
    out = window_privacy(task, window, [batch], [], key_given=True)
    assert out["windows"][0]["central_epsilon"] is None
    assert "reports per level" in out["windows"][0]["why_no_central"]


# ---------------------------------------------------------------------------------------- the pipeline


@pytest.mark.integration  # the experiment end to end at a small n: a few seconds
def test_the_experiment_records_the_claim_and_equal_shuffled_and_unshuffled_rows(tmp_path: Path) -> None:
    from experiments.heavy_hitters_shuffled import main, summary_table

    out = main(["--json", str(tmp_path / "r.json"), "--n", "5000", "--seeds", "1", "--strings", "50",
                "--bytes", "2", "--central_epsilon", "2"])
    arms = {r["arm"]: r for r in out["records"]}
    assert set(arms) == {"shuffled", "ldp_eps0", "ldp_target"} and arms["ldp_eps0"]["identical"]
    shuffled = arms["shuffled"]
    assert sum(lv["n"] for lv in shuffled["levels"]) == 5000 and out["eps0"] > 2
    assert shuffled["central_epsilon"] == max(lv["central_epsilon"] for lv in shuffled["levels"])
    assert json.loads((tmp_path / "r.json").read_text())["complete"]
    assert len(summary_table(out)) == 5

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.mark.integration  # the shuffler and the heavy-hitters job on the DirectRunner: about 30 s
def test_reports_through_the_shuffler_into_the_job_keep_the_heavy_hitters_and_earn_a_claim(
    tmp_path: Path, monkeypatch
) -> None:
    """Zipf(1.5) over 200 3-byte strings, 30,000 users over two 10-minute buckets, eps 4: the job over the
    signed batches finds the strings at >= 5% (each >= 12 null sd above the cuts at 3,000 reports a
    level, see tests/test_heavy_hitters_pipeline.py) and claims, per batch, the largest level figure at
    the batch's signed level counts."""
    from ldp.shuffle.provenance import new_key_file
    from pipelines import cli, shuffle
    from simulator import simulate_files

    task_obj = {**BASE, "max_length": 3, "top_k": 10, "window": {"size_s": 1200},
                "anonymity": {**SHUFFLED, "min_reports": 5000}}
    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(task_obj), encoding="utf-8")
    task = parse_task(task_obj)
    truth = simulate_files(task, 30_000, "zipf-strings:1.5:200", tmp_path / "in", seed=4, files=2,
                           start_ms=T0, duration_s=1200.0)
    new_key_file(tmp_path / "shuffle.key")
    key = ["--shuffle_key", str(tmp_path / "shuffle.key")]
    s = shuffle.run(["--task", str(task_file), "--input", str(tmp_path / "in" / "*.avro"), "--output",
                     str(tmp_path / "sh"), *key])
    assert s["balanced"] and s["batches"] == 2 and s["counts"]["forwarded"] == 30_000
    manifest = [json.loads(x) for x in (tmp_path / "sh" / "batches.jsonl").read_text().splitlines()]
    assert all(sum(c for _, c in e["group_n"]) == e["n"] for e in manifest)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    batches = str(tmp_path / "sh" / "batches" / "*.avro")
    assert cli.main(["heavy-hitters", "--task", str(task_file), "--input", batches, "--output",
                     str(tmp_path / "out"), *key]) == 0
    summary = json.loads((tmp_path / "out" / "counts.json").read_text())
    privacy = summary["privacy_accounting"]
    (window,) = privacy["windows"]
    accounting, _ = shuffle_accounting(task)
    figures = [acc.central_epsilon_report(4.0, b["n"], task.anonymity.delta, accounting,
                                          group_counts=dict(map(tuple, b["group_n"]))).epsilon
               for b in window["per_batch"]]
    assert len(figures) == 2 and all(b["verified"] for b in window["per_batch"])
    assert window["central_epsilon"] == pytest.approx(max(figures)) and 0 < max(figures) < 4.0
    (row,) = [json.loads(x) for f in sorted((tmp_path / "out").glob("estimates-*.jsonl"))
              for x in f.read_text().splitlines() if x.strip()]
    published = {h["value"] for h in row["heavy_hitters"]}
    frequent = [t["value"] for t in truth["heavy_hitters"] if t["frequency"] >= 0.05]
    assert frequent and set(frequent) <= published, (frequent, published)
