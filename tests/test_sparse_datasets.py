"""Sparse-vector populations (ldp.datasets.sparse) and the reproduction / benchmark command lines."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp.datasets.sparse import load_sparse_csv, parse_sparse_dataset, sample_sparse, supersparse, zipf_sparse

ROOT = np.random.SeedSequence(20261203)
_children = iter(ROOT.spawn(32))


def rng() -> np.random.Generator:
    return np.random.default_rng(next(_children))


def test_supersparse_matches_the_reference_generator():
    n, d, k = 20_000, 100_000, 64
    v = supersparse(n, d, k, rng())
    assert v.n == n and np.all(v.nnz <= k)
    # spec: 22.9 non-zeros per user, ||v||^2 = 18.6, sum of squared means 14.85 at k = 64
    assert abs(v.nnz.mean() - 22.9) < 0.1
    assert abs(v.norms2().mean() - 18.6) < 0.2
    assert abs((v.mean_vector(d) ** 2).sum() - 14.85) < 0.3
    zero = v.items == 0
    assert zero.sum() == n and np.all(v.values[zero] == 1.0)  # every user: item 0 := +1
    assert np.array_equal(np.sort(v.user_index()[zero]), np.arange(n))
    neg = v.items % 3 == 0
    # values are clip(N(1, 0.3), -1, 1), negated on ids divisible by 3: a draw below 0 (P = 4.3e-4)
    # flips the sign, so allow 1e-3 of the entries on the "wrong" side
    assert (v.values[neg & (v.items > 0)] > 0).mean() < 1e-3 and (v.values[~neg] < 0).mean() < 1e-3


def test_zipf_sparse():
    n, d, k = 5000, 4096, 64
    v = zipf_sparse(n, d, k, rng())
    assert np.all(v.nnz <= k) and v.max_item() < d
    assert abs(v.nnz.mean() - 25.6) < 0.5  # spec: E[distinct] = 25.6 at k = 64, d = 4096
    assert set(np.unique(v.values)) <= {-1.0, 1.0}
    assert np.all((v.values < 0) == (v.items % 3 == 0))
    for u in range(20):  # distinct within a user
        row = v.items[v.indptr[u] : v.indptr[u + 1]]
        assert np.unique(row).size == row.size


def test_csv_loader(tmp_path):
    p = tmp_path / "data.csv"
    p.write_text("user_id,item,value\nalice,3,0.5\nbob,7,-1\nalice,9,1.0\ncarol,3,2.0\n")
    v, users = load_sparse_csv(p, 10)
    assert users == ["alice", "bob", "carol"] and v.n == 3
    assert list(v.nnz) == [2, 1, 1]
    assert math.isclose(v.mean_at(np.array([3], np.uint64))[0], (0.5 + 2.0) / 3)
    assert sample_sparse(f"csv:{p}", None, 10, 4, rng()).n == 3
    with pytest.raises(ValueError, match="holds 3 clients"):
        sample_sparse(f"csv:{p}", 5, 10, 4, rng())
    bad = {
        "user_id,item\n": "header",
        "user_id,item,value\na,x,1\n": "not an integer",
        "user_id,item,value\na,1,nan\n": "not finite",
        "user_id,item,value\na,1,1\na,1,0.5\n": "more than once",
        "user_id,item,value\na,11,1\n": "outside",
        "user_id,item,value\na,1\n": "3 fields",
    }
    for text, msg in bad.items():
        p.write_text(text)
        with pytest.raises(ValueError, match=msg):
            load_sparse_csv(p, 10)


def test_dataset_specs():
    assert parse_sparse_dataset("zipf-sparse:2") == ("zipf-sparse", 2.0)
    assert parse_sparse_dataset("supersparse") == ("supersparse", None)
    for bad in ("zipf", "zipf-sparse:-1", "csv:", "nope"):
        with pytest.raises(ValueError):
            parse_sparse_dataset(bad)


def test_reproduction_cli_small_run(tmp_path):
    from experiments import sparse_vectors as sv

    out = tmp_path / "r.json"
    recs = sv.main(
        [
            "--users",
            "3000",
            "--domain_size",
            "5000",
            "--sparsity",
            "16",
            "--epsilons",
            "1",
            "--privacy",
            "user,event",
            "--methods",
            "svme,kfold,sampling,gaussian,harmony,pckv",
            "--trials",
            "2",
            "--json",
            str(out),
            "--plot",
            str(tmp_path / "r.png"),
        ]
    )
    data = json.loads(out.read_text())
    assert len(recs) == 12 and len(data["records"]) == 12 and (tmp_path / "r.png").stat().st_size > 0
    for r in recs:
        for f in (
            "method",
            "privacy",
            "epsilon",
            "sparsity",
            "domain",
            "users",
            "linf",
            "mse",
            "bytes_per_report",
            "lb_rate",
            "linf_over_rate",
        ):
            assert f in r
        assert r["trials"] == 2 and len(r["mse_trials"]) == 2
    assert {x["privacy"] for x in data["ratios"]} == {"user", "event"}
    with pytest.raises(SystemExit):
        sv.main(["--domain", "100", "--json", str(out)])  # the project's flag is --domain_size
    with pytest.raises(SystemExit):
        sv.main(["--methods", "nope", "--json", str(out)])


def test_bench_cli_small_run(tmp_path):
    from bench import sparse as bs

    out = tmp_path / "b.json"
    recs = bs.main(
        [
            "--users",
            "2000",
            "--domain_size",
            "4096",
            "--sparsity",
            "16",
            "--repeat",
            "1",
            "--brute_reports",
            "50",
            "--json",
            str(out),
        ]
    )
    stages = {(r["privacy"], r["stage"]) for r in recs}
    for priv in ("user", "event"):
        for st in ("aggregate", "top128", "full_vector", "brute_force_full_vector"):
            assert (priv, st) in stages
    assert all(r["seconds"] > 0 for r in recs)
    assert json.loads(out.read_text())
    with pytest.raises(SystemExit):
        bs.main(["--bogus", "1"])
