"""A tiny run of ``experiments.heavy_hitters`` without peers (the full run: its results/*.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.heavy_hitters import score
from experiments import heavy_hitters as X

pytestmark = [pytest.mark.integration]


def test_smoke_run_scores_our_pem_against_the_population(tmp_path):
    out, png = tmp_path / "hh.json", tmp_path / "hh.png"
    args = ["--json", str(out), "--plot", str(png), "--epsilons", "8", "--ns", "20000", "--zipfs", "1.5",
            "--lengths", "2", "--seeds", "1", "--strings", "300", "--top_k", "64"]  # fmt: skip
    X.main(args)
    r = json.loads(out.read_text())
    assert r["complete"] and r["setup"]["epsilons"] == [8.0] and "--lengths 2" in r["setup"]["command"]
    (rec,) = r["records"]
    assert (rec["library"], rec["method"], rec["n"], rec["bytes"], rec["truth"]) == (
        "ldp-beam", "pem", 20000, 2, "population"
    )
    # Zipf(1.5) over 300 two-byte strings: about 30 at >= 0.2%, most found at eps 8 with 20,000 users
    assert 10 <= rec["heavy"] <= 60 and rec["reported"] <= 64
    assert rec["recall"] >= 0.7 and rec["precision"] >= 0.9
    recall, precision = rec["recall"], rec["precision"]
    assert rec["f1"] == pytest.approx(2 * recall * precision / (recall + precision))
    assert rec["encode_s_per_million"] > 0 and rec["estimate_s_per_million"] > 0
    assert png.stat().st_size > 10_000


def test_peer_answers_are_scored_against_the_subsample():
    raw = np.array([[1, 2]] * 6 + [[3, 4]] * 3 + [[5, 6]], dtype=np.uint8)
    truth = X._truth_of(raw)
    assert truth == {b"\x01\x02": 0.6, b"\x03\x04": 0.3, b"\x05\x06": 0.1}
    row = score(X._PeerResult([b"\x01\x02", b"\x09\x09"]), truth, heavy=0.25, useful=0.2)
    assert (row["recall"], row["precision"], row["reported"], row["heavy"]) == (0.5, 0.5, 2, 2)


@pytest.mark.parametrize(
    "bad",
    [["--epsilons", "0"], ["--ns", "x"], ["--peer_methods", "RAPPOR"], ["--seeds", "0"], ["--bogus", "1"]],
)
def test_a_wrong_flag_exits_2(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        X.main(["--json", str(tmp_path / "x.json"), *bad])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
