"""Tests of the simulator (pipelines.simulate) and the populations (ldp.datasets)."""

from __future__ import annotations

import glob
import json
import subprocess
import sys

import fastavro
import numpy as np
import pytest

from ldp import datasets as D
from ldp.task import parse_task
from pipelines import simulate

SEEDS = np.random.SeedSequence(7_2026)


def _task(**kw):
    return parse_task({"task_id": "sim", "mechanism": "olh", "epsilon": 1.0, "domain_size": 64, **kw})


def _read(path):
    with open(path, "rb") as fh:
        return list(fastavro.reader(fh))


def test_simulate_files_layout_truth_and_reproducibility(tmp_path):
    t0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    truth = simulate.simulate_files(
        _task(n_groups=3),
        5000,
        "zipf:1.3",
        tmp_path / "a",
        seed=11,
        files=3,
        start_ms=t0,
        duration_s=600,
        batch_size=1234,
    )
    files = sorted(glob.glob(str(tmp_path / "a" / "reports-*.avro")))
    assert len(files) == 3
    recs = [_read(f) for f in files]
    assert sum(map(len, recs)) == 5000
    assert truth["n_users"] == 5000 and abs(sum(truth["frequencies"]) - 1) < 1e-12
    assert json.loads((tmp_path / "a" / "truth.json").read_text()) == truth
    times = np.array([int(r["event_time"].timestamp() * 1000) for rs in recs for r in rs])
    assert times.min() >= t0 and times.max() < t0 + 600_000 and np.all(np.diff(times) >= 0)  # sorted slices
    groups = {r["group"] for rs in recs for r in rs}
    assert groups == {0, 1, 2}
    assert all(
        r["task_id"] == "sim" and r["value"] is not None and r["bits"] is None for rs in recs for r in rs
    )
    again = simulate.simulate_files(
        _task(n_groups=3),
        5000,
        "zipf:1.3",
        tmp_path / "b",
        seed=11,
        files=3,
        start_ms=t0,
        duration_s=600,
        batch_size=1234,
    )
    assert again == truth
    assert [_read(f) for f in sorted(glob.glob(str(tmp_path / "b" / "reports-*.avro")))] == recs


def test_zipf_population_matches_its_distribution():
    # Each empirical frequency of n draws has standard error sqrt(p(1-p)/n); allow 5 of them.
    n, d = 200_000, 32
    pop = D.parse_dataset("zipf:1.5")
    probs = D.population_probabilities(pop, d)
    vals = D.sample_population(pop, n, d, rng=np.random.default_rng(SEEDS.spawn(1)[0]))
    emp = np.bincount(vals, minlength=d) / n
    assert np.all(np.abs(emp - probs) < 5 * np.sqrt(probs * (1 - probs) / n))
    assert probs[0] > probs[1] > probs[-1]
    uni = D.sample_population("uniform", n, d, rng=np.random.default_rng(SEEDS.spawn(2)[1]))
    assert np.all(np.abs(np.bincount(uni, minlength=d) / n - 1 / d) < 5 * np.sqrt((1 / d) * (1 - 1 / d) / n))


def test_dataset_specs_and_csv(tmp_path):
    assert D.parse_dataset("zipf").exponent == D.DEFAULT_ZIPF_EXPONENT
    for bad in ("zipf:x", "zipf:-1", "gauss", "csv:onlypath", "uniform:3", ""):
        with pytest.raises(ValueError):
            D.parse_dataset(bad)
    p = tmp_path / "u.csv"
    p.write_text("user,fruit\n1,3\n2,0\n3,3\n")
    assert D.sample_population(f"csv:{p}:fruit", 3, 4).tolist() == [3, 0, 3]
    assert [b.tolist() for b in D.iter_population(f"csv:{p}:fruit", 3, 4, batch_size=2)] == [[3, 0], [3]]
    with pytest.raises(ValueError, match="no column"):
        D.sample_population(f"csv:{p}:apple", 3, 4)
    with pytest.raises(ValueError, match="outside"):
        D.sample_population(f"csv:{p}:fruit", 3, 3)
    with pytest.raises(ValueError, match="rows"):
        D.sample_population(f"csv:{p}:fruit", 4, 4)
    p.write_text("fruit\n1\nbanana\n")
    with pytest.raises(ValueError, match="row 3"):
        D.sample_population(f"csv:{p}:fruit", 2, 4)


def test_cli_help_and_csv_run(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.simulate", "--help"], capture_output=True, text=True, check=True
    )
    assert "--dataset" in out.stdout and "--pubsub_topic" in out.stdout
    (tmp_path / "task.json").write_text(_task().to_json())
    (tmp_path / "d.csv").write_text("v\n" + "\n".join(str(i % 64) for i in range(640)) + "\n")
    truth = simulate.run(
        [
            "--task",
            str(tmp_path / "task.json"),
            "--users",
            "640",
            "--dataset",
            f"csv:{tmp_path / 'd.csv'}:v",
            "--seed",
            "1",
            "--output",
            str(tmp_path / "o"),
            "--files",
            "2",
            "--inject_bad",
            "2",
        ]
    )
    assert truth["frequencies"] == [1 / 64] * 64
    assert truth["bad_records"]["undecodable"] == 1
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "bad-records-other-schema.avro",
        "bad-records.avro",
        "garbage.avro",
        "reports-00000-of-00002.avro",
        "reports-00001-of-00002.avro",
        "truth.json",
    ]
