"""Tests of the simulator (pipelines.simulate, every kind of task) and the populations (ldp.datasets)."""

from __future__ import annotations

import glob
import io
import json

import fastavro
import numpy as np
import pytest

import simulator
from ldp import datasets as D
from ldp.rangequery.registry import METHODS as RANGE_METHODS
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
    truth = simulator.simulate_files(
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
    again = simulator.simulate_files(
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


@pytest.mark.statistical
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


def test_help_lists_the_shared_flags(capsys):
    with pytest.raises(SystemExit) as exc:
        simulate.run(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--task", "--users", "--seed", "--dataset", "--output", "--output_topic", "--log_level"):
        assert flag in text
    assert "(default: 4)" in text  # defaults are shown
    assert "--pubsub_topic" not in text  # the old name is gone (a hint points to --output_topic)


def test_cli_csv_run_and_bad_files(tmp_path, frequency_task_file):
    task = frequency_task_file(domain_size=64)
    (tmp_path / "d.csv").write_text("v\n" + "\n".join(str(i % 64) for i in range(640)) + "\n")
    argv = ["--task", str(task), "--users", "640", "--dataset", f"csv:{tmp_path / 'd.csv'}:v", "--seed", "1"]
    truth = simulate.run([*argv, "--output", str(tmp_path / "o"), "--files", "2", "--inject_bad", "2"])
    assert truth["kind"] == "frequency" and truth["frequencies"] == [1 / 64] * 64
    assert truth["bad_records"]["undecodable"] == 1
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        ".ldp-beam-output.json",
        "bad-records-other-schema.avro",
        "bad-records.avro",
        "garbage.avro",
        "reports-00000-of-00002.avro",
        "reports-00001-of-00002.avro",
        "truth.json",
    ]


def _range_task(**kw):
    obj = {
        "task_id": "sim-range",
        "mechanism": "hdg",
        "epsilon": 1.0,
        "expected_users": 6000,
        "attributes": [{"name": n, "domain_size": 8} for n in ("a", "b", "c")],
        **kw,
    }
    return parse_task(obj)


def test_range_task_files_truth_records_and_reproducibility(tmp_path):
    task = _range_task()
    t0 = 1_767_225_600_000
    kw = dict(seed=5, files=3, start_ms=t0, duration_s=60.0, assignment="balanced")
    truth = simulator.simulate_files(task, 6000, "gaussian:0.5", tmp_path / "a", **kw)
    assert truth["kind"] == "range" and truth["n_users"] == 6000 and truth["dataset"] == "gaussian:0.5"
    sizes = truth["group_sizes"]
    assert len(sizes) == task.n_groups and sum(sizes) == 6000 and max(sizes) - min(sizes) <= 1  # balanced
    files = sorted(glob.glob(str(tmp_path / "a" / "reports-*.avro")))
    recs = [_read(f) for f in files]
    assert [len(r) for r in recs] == [2000, 2000, 2000]
    groups = np.array([r["group"] for rs in recs for r in rs])
    assert np.bincount(groups, minlength=task.n_groups).tolist() == sizes
    times = np.array([int(r["event_time"].timestamp() * 1000) for rs in recs for r in rs])
    assert times.min() >= t0 and times.max() < t0 + 60_000
    # each file is one time slice: file k's times all precede file k+1's
    per_file = [np.array([int(r["event_time"].timestamp() * 1000) for r in rs]) for rs in recs]
    assert all(a.max() <= b.min() for a, b in zip(per_file, per_file[1:]))
    truth2, records = simulator.load_truth_records(tmp_path / "a")
    assert truth2 == truth and records.shape == (6000, 3) and records.max() < 8
    again = simulator.simulate_files(task, 6000, "gaussian:0.5", tmp_path / "b", **kw)  # the alias
    assert again == truth
    assert [_read(f) for f in sorted(glob.glob(str(tmp_path / "b" / "reports-*.avro")))] == recs
    assert np.array_equal(simulator.load_truth_records(tmp_path / "b")[1], records)


def test_range_task_through_the_one_cli(tmp_path, range_task_file):
    task = range_task_file(expected_users=3000)
    out = tmp_path / "rin"
    truth = simulate.run(
        ["--task", str(task), "--users", "3000", "--seed", "2", "--output", str(out), "--inject_bad", "1"]
    )
    assert truth["kind"] == "range" and truth["dataset"] == "gaussian"  # the kind's default dataset
    assert set(truth["bad_records"]) >= {"wrong_task", "invalid_group", "missing_field", "undecodable"}
    assert (out / "truth_records.npy").is_file() and (out / "bad-records-other-schema.avro").is_file()
    assert sum(len(_read(f)) for f in glob.glob(str(out / "reports-*.avro"))) == 3000


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        (["--assignment", "balanced"], "applies to range tasks"),
        (["--dataset", "gauss"], "dataset"),
        (["--start", "yesterday"], "ISO-8601"),
        (["--users", "0"], "--users must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, frequency_task_file, capsys, extra, pattern):
    argv = ["--task", str(frequency_task_file()), "--users", "100", "--output", str(tmp_path / "o"), *extra]
    with pytest.raises(SystemExit) as exc:
        simulate.run(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err and pattern in err, err


def test_invalid_task_missing_destination_and_unknown_flags(tmp_path, write_json, capsys):
    bad = write_json("bad.json", {"task_id": "rq demo!", "mechanism": "zzz", "epsilon": 0})
    with pytest.raises(SystemExit, match="2"):
        simulate.run(["--task", str(bad), "--users", "10", "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "task_id" in err and "mechanism" in err  # every problem
    good = write_json("t.json", {"task_id": "t", "mechanism": "grr", "epsilon": 1, "domain_size": 4})
    with pytest.raises(SystemExit, match="2"):
        simulate.run(["--task", str(good), "--users", "10"])
    assert "one of the arguments --output --output_topic is required" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        base = ["--task", str(good), "--users", "9", "--output", str(tmp_path / "o")]
        simulate.run([*base, "--pubsub_topic", "projects/p/topics/t"])
    assert "did you mean --output_topic?" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing was written


def test_non_empty_output_is_refused_unless_overwrite(tmp_path, frequency_task_file, capsys):
    argv = ["--task", str(frequency_task_file()), "--users", "200", "--seed", "3"]
    argv += ["--output", str(tmp_path / "o")]
    simulate.run([*argv, "--files", "4"])
    with pytest.raises(SystemExit, match="2"):
        simulate.run([*argv, "--files", "2"])
    assert "is not empty" in capsys.readouterr().err
    simulate.run([*argv, "--files", "2", "--overwrite"])
    assert sorted(p.name for p in (tmp_path / "o").glob("reports-*.avro")) == [
        "reports-00000-of-00002.avro",
        "reports-00001-of-00002.avro",
    ]  # no file of the first run is left to mix in
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="2"):
        simulate.run([*argv[:-1], str(tmp_path / "mine"), "--overwrite"])
    assert "not written by an ldp-beam job" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


class _FakeFuture:
    def result(self, timeout=None):
        return "id"


class _FakePublisher:
    """Stands in for ``pubsub_v1.PublisherClient``: keeps the published messages."""

    messages: list = []

    def __init__(self):
        type(self).messages = []

    def get_topic(self, request):
        return request

    def publish(self, topic, data, **attrs):
        type(self).messages.append((topic, data, attrs))
        return _FakeFuture()


class _Clock:
    def __init__(self):
        self.t = 1_767_225_600.0

    def time(self):
        return self.t

    def sleep(self, s):
        self.t += s


@pytest.mark.parametrize("kind", ["frequency", "range"])
def test_publish_any_task_kind_in_paced_messages(monkeypatch, kind):
    from google.cloud import pubsub_v1

    monkeypatch.setattr(pubsub_v1, "PublisherClient", _FakePublisher)
    task = _task(n_groups=2) if kind == "frequency" else _range_task()
    clock = _Clock()
    truth = simulate.publish(
        task, 2500, None, "projects/p/topics/t", seed=4, rate=1000.0, message_size=400, clock=clock,
        inject_bad=1,
    )  # fmt: skip
    msgs = _FakePublisher.messages
    report_msgs = msgs[: len(msgs) - len(simulator.bad_records(task, 1, 0)) - 1]  # then the bad ones
    decoded = [list(fastavro.reader(io.BytesIO(data))) for _, data, _ in report_msgs]
    assert [len(m) for m in decoded] == [400] * 6 + [100]  # messages of at most --message_size reports
    assert all(r["task_id"] == task.task_id for m in decoded for r in m)
    stamps = [int(a["event_time"]) for _, _, a in report_msgs]
    # paced at --rate: message j (users 400 j ...) is sent 0.4 j s after the first
    assert [s - stamps[0] for s in stamps] == [400 * j for j in range(7)]
    assert all(r["event_time"].timestamp() * 1000 == s for m, s in zip(decoded, stamps) for r in m)
    assert msgs[-1][1] == b"not avro" and truth["messages"] == len(msgs) and truth["kind"] == kind
    if kind == "range":
        groups = np.array([r["group"] for m in decoded for r in m])
        assert np.bincount(groups, minlength=task.n_groups).tolist() == truth["group_sizes"]


@pytest.mark.parametrize("mech", sorted(RANGE_METHODS))
def test_every_range_method_simulates_with_bad_records(tmp_path, mech):
    task = _range_task(mechanism=mech, attributes=[{"name": n, "domain_size": 8} for n in ("a", "b")])
    truth = simulator.simulate_files(task, 500, "uniform", tmp_path, seed=1, files=2, inject_bad=1)
    assert sum(truth["group_sizes"]) == 500 and truth["bad_records"]["undecodable"] == 1
    assert sum(len(_read(f)) for f in glob.glob(str(tmp_path / "reports-*.avro"))) == 500
    expected = sum(len(rs) for rs in simulator.bad_records(task, 1, 0).values())
    assert len(_read(tmp_path / "bad-records.avro")) == expected
