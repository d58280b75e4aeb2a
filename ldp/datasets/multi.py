"""Multi-attribute populations for range-query simulations (Yang et al., VLDB 2021, Section 6.1).

A dataset spec is a short string:

* ``gaussian`` or ``gaussian:RHO``: d attributes from a multivariate normal with unit variances and
  correlation ``RHO`` between every two attributes (default :data:`DEFAULT_RHO`), each discretized to
  ``[0, c)`` by equal-width bins over ``[-SPREAD, SPREAD]`` standard deviations (values outside go to the
  end bins; :data:`DEFAULT_SPREAD` = 3);
* ``laplace`` or ``laplace:RHO``: the same with a multivariate (symmetric) Laplace distribution, drawn as
  ``sqrt(W) * Z`` with ``W ~ Exp(1)`` and ``Z ~ N(0, Sigma)``: Laplace marginals with unit variance and
  the same correlation matrix ``Sigma``, heavier tails and a sharper peak than the Gaussian;
* ``uniform``: independent uniform attributes;
* ``csv:PATH``: a user's own records: a CSV file whose header row names the attributes (every task
  attribute must be a column; other columns are ignored), one user per row, integer values in each
  attribute's domain. Rows are used in file order (the first ``n``).

All sampling takes an explicit ``rng`` (``numpy.random.default_rng`` normalises it).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "DEFAULT_RHO",
    "DEFAULT_SPREAD",
    "MultiDataset",
    "parse_multi_dataset",
    "correlation_matrix",
    "gaussian_records",
    "laplace_records",
    "uniform_records",
    "read_csv_records",
    "sample_records",
]

DEFAULT_RHO = 0.5
DEFAULT_SPREAD = 3.0

#: The domain size of every attribute, or one per attribute.
Sizes = int | Sequence[int]
#: A generator, a seed or None (``numpy.random.default_rng`` normalises it).
Rng = np.random.Generator | int | None


@dataclass(frozen=True)
class MultiDataset:
    """A parsed dataset spec: ``kind`` in gaussian/laplace/uniform/csv, ``rho`` or ``path``."""

    kind: str
    rho: float = DEFAULT_RHO
    path: str | None = None


def parse_multi_dataset(spec: str) -> MultiDataset:
    """Parses ``gaussian[:RHO]``, ``laplace[:RHO]``, ``uniform`` or ``csv:PATH`` (ValueError otherwise)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"dataset spec must be a non-empty string, got {spec!r}")
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind == "csv":
        if not arg:
            raise ValueError("csv dataset needs a path: csv:PATH")
        return MultiDataset("csv", path=arg)
    if kind in ("gaussian", "normal", "laplace"):
        rho = DEFAULT_RHO
        if arg:
            try:
                rho = float(arg)
            except ValueError:
                raise ValueError(f"bad correlation in dataset spec {spec!r}") from None
        return MultiDataset("laplace" if kind == "laplace" else "gaussian", rho=rho)
    if kind == "uniform":
        if arg:
            raise ValueError(f"uniform takes no parameter: {spec!r}")
        return MultiDataset("uniform")
    raise ValueError(f"unknown dataset {spec!r}; use gaussian[:RHO], laplace[:RHO], uniform or csv:PATH")


def correlation_matrix(d: int, rho: float) -> np.ndarray:
    """Equicorrelation matrix: 1 on the diagonal, ``rho`` elsewhere (positive definite iff
    ``-1/(d-1) < rho < 1``; ``rho = 1`` is allowed and gives identical attributes)."""
    if d < 1:
        raise ValueError("d must be >= 1")
    if not (d == 1 or -1.0 / (d - 1) < rho <= 1.0):
        raise ValueError(f"correlation rho={rho} is not valid for d={d} (need -1/(d-1) < rho <= 1)")
    return np.full((d, d), float(rho)) + (1.0 - float(rho)) * np.eye(d)


def _correlated_normal(n: int, d: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """(n, d) standard normals with equicorrelation rho (one shared factor: no Cholesky needed)."""
    correlation_matrix(d, rho)  # validates rho
    if rho >= 0:
        shared = rng.standard_normal((n, 1))
        own = rng.standard_normal((n, d))
        return np.sqrt(rho) * shared + np.sqrt(1.0 - rho) * own
    chol = np.linalg.cholesky(correlation_matrix(d, rho))
    return rng.standard_normal((n, d)) @ chol.T


def _discretize(x: np.ndarray, c: int | Sequence[int], spread: float) -> np.ndarray:
    d = x.shape[1]
    sizes = np.broadcast_to(np.asarray(c, dtype=np.int64), (d,))
    if np.any(sizes < 1):
        raise ValueError("domain sizes must be >= 1")
    if spread <= 0:
        raise ValueError("spread must be positive")
    u = (x + spread) / (2.0 * spread)
    return np.clip(np.floor(u * sizes).astype(np.int64), 0, sizes - 1)


def gaussian_records(n: int, d: int, c: Sizes, *, rho: float = DEFAULT_RHO, spread: float = DEFAULT_SPREAD,
                     rng: Rng = None) -> np.ndarray:  # fmt: skip
    """Correlated multivariate-normal records discretized to ``[0, c)`` (int64, shape (n, d))."""
    return _elliptical_records(n, d, c, rho, spread, rng, laplace=False)


def laplace_records(n: int, d: int, c: Sizes, *, rho: float = DEFAULT_RHO, spread: float = DEFAULT_SPREAD,
                    rng: Rng = None) -> np.ndarray:  # fmt: skip
    """Correlated multivariate-Laplace records (``sqrt(W) Z``, ``W ~ Exp(1)``) discretized to ``[0, c)``."""
    return _elliptical_records(n, d, c, rho, spread, rng, laplace=True)


def _elliptical_records(
    n: int, d: int, c: Sizes, rho: float, spread: float, rng: Rng, *, laplace: bool
) -> np.ndarray:
    """Equicorrelated normals ``Z`` (``laplace``: scaled by ``sqrt(W)``, ``W ~ Exp(1)``), discretized."""
    rng = np.random.default_rng(rng)
    z = _correlated_normal(int(n), int(d), rho, rng)
    if laplace:
        z = np.sqrt(rng.standard_exponential((int(n), 1))) * z
    return _discretize(z, c, spread)


def uniform_records(n: int, d: int, c: Sizes, *, rng: Rng = None) -> np.ndarray:
    """Independent uniform records over ``[0, c_t)`` (int64, shape (n, d))."""
    rng = np.random.default_rng(rng)
    sizes = np.broadcast_to(np.asarray(c, dtype=np.int64), (int(d),))
    return (rng.random((int(n), int(d))) * sizes).astype(np.int64)


def read_csv_records(
    path: str | Path, attribute_names: Sequence[str], domain_sizes: Sequence[int], *, n: int | None = None
) -> np.ndarray:
    """Reads records from a CSV file with a header row naming the attributes.

    Args:
        path: CSV file.
        attribute_names: the task's attributes, in order; each must be a header column.
        domain_sizes: domain size of each attribute; every value must be an integer in ``[0, c)``.
        n: number of rows to use (the first ``n``; default all). More than the file has is an error.

    Returns:
        int64 array (rows, d) in ``attribute_names`` order.

    Raises:
        ValueError: missing file or header, missing column, non-integer or out-of-domain value (with the
            line number), too few rows.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"csv dataset: no such file {str(p)!r}")
    names = list(attribute_names)
    if len(names) != len(domain_sizes):
        raise ValueError("attribute_names and domain_sizes differ in length")
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ValueError(
                f"csv dataset {str(p)!r} is empty (a header row naming the attributes is required)"
            )
        header = [h.strip() for h in header]
        missing = [a for a in names if a not in header]
        if missing:
            raise ValueError(f"csv dataset {str(p)!r}: header {header} lacks attribute column(s) {missing}")
        cols = [header.index(a) for a in names]
        rows: list[list[int]] = []
        for line_no, row in enumerate(reader, start=2):
            if n is not None and len(rows) >= n:
                break
            if not row or all(not x.strip() for x in row):
                continue
            vals = []
            for a, ci, c in zip(names, cols, domain_sizes):
                raw = row[ci].strip() if ci < len(row) else ""
                try:
                    v = int(raw)
                except ValueError:
                    raise ValueError(
                        f"csv dataset {str(p)!r} line {line_no}: {a}={raw!r} is not an integer"
                    ) from None
                if not 0 <= v < c:
                    raise ValueError(
                        f"csv dataset {str(p)!r} line {line_no}: {a}={v} outside the domain [0, {c - 1}]"
                    )
                vals.append(v)
            rows.append(vals)
    if n is not None and len(rows) < n:
        raise ValueError(f"csv dataset {str(p)!r} has {len(rows)} records, fewer than the {n} requested")
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(names))


def sample_records(
    spec: str | MultiDataset,
    n: int,
    domain_sizes: Sequence[int],
    *,
    attribute_names: Sequence[str] | None = None,
    spread: float = DEFAULT_SPREAD,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Draws ``n`` records for the given domains from a dataset spec (see the module docstring).

    ``attribute_names`` is required for ``csv:PATH`` (the columns to read) and ignored otherwise.
    """
    ds = parse_multi_dataset(spec) if isinstance(spec, str) else spec
    d = len(domain_sizes)
    if n < 0:
        raise ValueError("n must be >= 0")
    if ds.kind == "csv":
        if attribute_names is None:
            raise ValueError("csv datasets need the attribute names")
        return read_csv_records(ds.path, attribute_names, domain_sizes, n=n)
    if ds.kind == "gaussian":
        return gaussian_records(n, d, domain_sizes, rho=ds.rho, spread=spread, rng=rng)
    if ds.kind == "laplace":
        return laplace_records(n, d, domain_sizes, rho=ds.rho, spread=spread, rng=rng)
    return uniform_records(n, d, domain_sizes, rng=rng)
