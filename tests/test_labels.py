"""Value labels end to end: a task with a labels file, a csv: dataset of string categories, the simulator,
the frequency job's rows (labels and error bars in JSON and Avro) and the demo's table."""

from __future__ import annotations

import glob
import json

import fastavro
import pytest

from ldp.datasets import read_csv_column, sample_population
from pipelines import demo, frequency, simulate

FRUIT = ["apple", "pear", "fig", "plum"]


def test_csv_categories_are_mapped_through_the_labels(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("id,fruit\n1,apple\n2, fig \n3,3\n4,pear\n", encoding="utf-8")
    assert read_csv_column(p, "fruit", 4, labels=FRUIT).tolist() == [0, 2, 3, 1]
    assert sample_population(f"csv:{p}:fruit", 2, 4, labels=FRUIT).tolist() == [0, 2]
    p.write_text("fruit\napple\nkiwi\nkiwi\nlime\n7\n", encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        read_csv_column(p, "fruit", 4, labels=FRUIT)
    msg = str(ei.value)
    assert "3 categories that are not task labels" in msg
    assert "'kiwi' (2 row(s), first row 3)" in msg and "'lime' (1 row(s), first row 5)" in msg
    assert "'7' (1 row(s), first row 6)" in msg
    with pytest.raises(ValueError, match="'apple' is not an integer"):  # without labels: integers only
        read_csv_column(p, "fruit", 4)


def _task(tmp_path, **kw):
    (tmp_path / "fruit.txt").write_text("\n".join(FRUIT) + "\n", encoding="utf-8")
    obj = {"task_id": "fruit", "mechanism": "oue", "epsilon": 2.0, "domain_size": 4,
           "labels_file": "fruit.txt", "postprocess": "norm-sub", **kw}
    (tmp_path / "task.json").write_text(json.dumps(obj), encoding="utf-8")
    return tmp_path / "task.json"


def test_simulated_string_categories_reach_the_estimate_rows_with_labels_and_intervals(tmp_path, capsys):
    task = _task(tmp_path)
    rows = ["fruit"] + ["apple"] * 500 + ["pear"] * 300 + ["fig"] * 200
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = f"csv:{tmp_path / 'd.csv'}:fruit"
    truth = simulate.run(["--task", str(task), "--users", "1000", "--dataset", data,
                          "--seed", "3", "--output", str(tmp_path / "in")])
    assert truth["frequencies"] == [0.5, 0.3, 0.2, 0.0]
    frequency.run(["--task", str(task), "--input", str(tmp_path / "in" / "*.avro"),
                   "--output", str(tmp_path / "out")])
    (jf,) = glob.glob(str(tmp_path / "out" / "estimates-*.jsonl"))
    (est,) = [json.loads(line) for line in open(jf, encoding="utf-8")]
    assert est["labels"] == FRUIT and est["ci_method"] == "simulated-inversion"
    assert all(lo <= f <= hi for lo, f, hi in zip(est["ci_low"], est["frequencies"], est["ci_high"]))
    assert len(est["unbiased"]) == len(est["unbiased_std"]) == len(est["ci_includes_zero"]) == 4
    (af,) = glob.glob(str(tmp_path / "out" / "estimates-*.avro"))
    with open(af, "rb") as fh:
        (rec,) = list(fastavro.reader(fh))
    assert rec["labels"] == FRUIT and rec["ci_low"] == est["ci_low"] and rec["ci_method"] == est["ci_method"]
    # unknown categories: one line naming them
    (tmp_path / "bad.csv").write_text("fruit\napple\nkiwi\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        simulate.run(["--task", str(task), "--users", "2", "--dataset", f"csv:{tmp_path / 'bad.csv'}:fruit",
                      "--output", str(tmp_path / "in2")])
    err = capsys.readouterr().err
    assert "'kiwi' (1 row(s), first row 3)" in err


def test_demo_prints_labels_noise_flags_and_the_published_interval(tmp_path, capsys):
    (tmp_path / "l.json").write_text(json.dumps([f"v{i}" for i in range(16)]), encoding="utf-8")
    out = demo.run(["--users", "3000", "--domain_size", "16", "--labels_file", str(tmp_path / "l.json"),
                    "--top", "16", "--seed", "1"])
    text = capsys.readouterr().out
    assert "v0 " in text and "v15" in text and "95% interval (simulated-inversion)" in text
    assert out["ci_method"] == "simulated-inversion" and 0.0 <= out["coverage_published"] <= 1.0
    (tmp_path / "short.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        demo.run(["--users", "10", "--domain_size", "16", "--labels_file", str(tmp_path / "short.txt")])
    assert "has 2 entries but domain_size is 16" in capsys.readouterr().err
