"""Tests of ldp.datasets.multi: correlated synthetic populations and the csv loader."""

import numpy as np
import pytest

from ldp.datasets.multi import (
    correlation_matrix,
    gaussian_records,
    laplace_records,
    parse_multi_dataset,
    read_csv_records,
    sample_records,
    uniform_records,
)

SEED = np.random.SeedSequence(77)
_SEEDS = iter(SEED.spawn(16))


def rng():
    return np.random.default_rng(next(_SEEDS))


def test_parse_specs():
    assert parse_multi_dataset("gaussian").kind == "gaussian"
    assert parse_multi_dataset("gaussian:0.8").rho == 0.8
    assert parse_multi_dataset("laplace:0.2").kind == "laplace"
    assert parse_multi_dataset("csv:/tmp/x.csv").path == "/tmp/x.csv"
    for bad in ("", "zipf", "gaussian:abc", "csv:", "uniform:3"):
        with pytest.raises(ValueError):
            parse_multi_dataset(bad)
    with pytest.raises(ValueError, match="not valid"):
        correlation_matrix(4, -0.5)


@pytest.mark.parametrize("gen", [gaussian_records, laplace_records])
def test_correlated_sets_shape_domain_and_correlation(gen):
    n, d, c = 100_000, 4, 64
    x = gen(n, d, c, rho=0.7, rng=rng())
    assert x.shape == (n, d) and x.dtype == np.int64
    assert x.min() >= 0 and x.max() <= c - 1
    corr = np.corrcoef(x.T.astype(float))
    off = corr[~np.eye(d, dtype=bool)]
    # discretization and clipping at +-3 sd shrink correlations only slightly; SE of a correlation at this n
    # is ~(1 - rho^2)/sqrt(n) ~ 0.002, the tolerance covers the discretization bias
    assert np.all(np.abs(off - 0.7) < 0.05)
    y = gen(n, d, c, rho=0.0, rng=rng())
    assert np.all(np.abs(np.corrcoef(y.T.astype(float))[~np.eye(d, dtype=bool)]) < 0.02)
    np.testing.assert_array_equal(gen(100, d, c, rho=0.5, rng=5), gen(100, d, c, rho=0.5, rng=5))


def test_laplace_has_heavier_peak_than_gaussian():
    n, c = 200_000, 64
    g = gaussian_records(n, 1, c, rho=0.0, rng=rng())[:, 0]
    lap = laplace_records(n, 1, c, rho=0.0, rng=rng())[:, 0]
    center = slice(c // 2 - 2, c // 2 + 2)
    # the unit-variance Laplace puts more mass in the 4 central bins (|x| < 0.1875 sd) than the normal:
    # about 0.23 vs 0.15 of the users
    assert np.bincount(lap, minlength=c)[center].sum() > 1.2 * np.bincount(g, minlength=c)[center].sum()


def test_uniform_and_mixed_domains():
    x = uniform_records(50_000, 3, [4, 10, 7], rng=rng())
    assert x.max(axis=0).tolist() == [3, 9, 6] and x.min() == 0
    counts = np.bincount(x[:, 1], minlength=10)
    # each count ~ Binomial(50000, 0.1): sd ~ 67; 5 sd
    assert np.all(np.abs(counts - 5000) < 5 * 67)
    y = sample_records("gaussian:0.3", 1000, [16, 100], rng=rng())
    assert y.shape == (1000, 2) and y[:, 1].max() < 100


def test_csv_loader(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("id,age,income\n1,3,10\n2,0,99\n\n3,7,5\n")
    x = read_csv_records(p, ["income", "age"], [100, 8])
    np.testing.assert_array_equal(x, [[10, 3], [99, 0], [5, 7]])
    np.testing.assert_array_equal(
        sample_records(f"csv:{p}", 2, [8, 100], attribute_names=["age", "income"]), [[3, 10], [0, 99]]
    )
    with pytest.raises(ValueError, match="lacks attribute column"):
        read_csv_records(p, ["age", "height"], [8, 8])
    with pytest.raises(ValueError, match=r"line 3: income=99 outside the domain \[0, 49\]"):
        read_csv_records(p, ["age", "income"], [8, 50])
    with pytest.raises(ValueError, match="fewer than the 5"):
        read_csv_records(p, ["age"], [8], n=5)
    with pytest.raises(ValueError, match="no such file"):
        read_csv_records(tmp_path / "nope.csv", ["age"], [8])
    bad = tmp_path / "b.csv"
    bad.write_text("age\n1.5\n")
    with pytest.raises(ValueError, match="line 2: age='1.5' is not an integer"):
        read_csv_records(bad, ["age"], [8])
    empty = tmp_path / "e.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="header row"):
        read_csv_records(empty, ["age"], [8])
    with pytest.raises(ValueError, match="attribute names"):
        sample_records(f"csv:{p}", 2, [8])
