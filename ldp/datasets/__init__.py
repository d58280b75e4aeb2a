"""Synthetic and user-supplied populations for simulations: 1-D values here, multi-attribute records in
:mod:`ldp.datasets.multi`, k-sparse vectors in :mod:`ldp.datasets.sparse`.

A dataset spec is a short string:

* ``zipf`` or ``zipf:S``: value ``v`` in ``[0, d)`` with probability proportional to ``(v + 1)^-S``
  (default exponent :data:`DEFAULT_ZIPF_EXPONENT`), so value 0 is the most frequent;
* ``uniform``: every value equally likely;
* ``csv:PATH:COLUMN``: a CSV file with a header row; COLUMN names the column holding one integer in
  ``[0, d)`` per user. The population is the file's rows in order (``n`` must not exceed the row count;
  the first ``n`` rows are used). With value ``labels`` (a task's, ``ldp.task``), a cell may hold a label
  instead: label ``i`` is value ``i`` (a cell that is a label is always read as one; other cells must be
  integers in ``[0, d)``); unknown categories are an error naming them.

Sampling is batched numpy with an explicit generator (``rng`` is normalised by
``numpy.random.default_rng``), so a million users take a fraction of a second and runs reproduce.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "DEFAULT_ZIPF_EXPONENT",
    "Population",
    "parse_dataset",
    "population_probabilities",
    "sample_population",
    "iter_population",
    "read_csv_column",
]

DEFAULT_ZIPF_EXPONENT = 1.1


@dataclasses.dataclass(frozen=True)
class Population:
    """A parsed dataset spec.

    Attributes:
        kind: ``zipf``, ``uniform`` or ``csv``.
        exponent: Zipf exponent (``zipf`` only).
        path: CSV path (``csv`` only).
        column: CSV column name (``csv`` only).
    """

    kind: str
    exponent: float | None = None
    path: str | None = None
    column: str | None = None


def parse_dataset(spec: str) -> Population:
    """Parses a dataset spec (see the module docstring).

    Raises:
        ValueError: unknown kind, bad exponent, or a malformed ``csv:`` spec.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"dataset spec must be a non-empty string, got {spec!r}")
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    if kind == "uniform":
        if rest:
            raise ValueError(f"'uniform' takes no parameter, got {spec!r}")
        return Population("uniform")
    if kind == "zipf":
        try:
            s = float(rest) if rest else DEFAULT_ZIPF_EXPONENT
        except ValueError:
            raise ValueError(f"zipf exponent must be a number, got {rest!r} in {spec!r}") from None
        if not np.isfinite(s) or s < 0:
            raise ValueError(f"zipf exponent must be >= 0, got {s}")
        return Population("zipf", exponent=s)
    if kind == "csv":
        path, sep, column = rest.rpartition(":")
        if not sep or not path or not column:
            raise ValueError(f"csv dataset must be 'csv:PATH:COLUMN', got {spec!r}")
        return Population("csv", path=path, column=column)
    raise ValueError(f"unknown dataset {spec!r}; use zipf[:EXPONENT], uniform or csv:PATH:COLUMN")


def population_probabilities(pop: Population, d: int) -> np.ndarray:
    """The value distribution of a synthetic population, float64 ``(d,)`` summing to 1."""
    if pop.kind == "uniform":
        return np.full(d, 1.0 / d)
    if pop.kind == "zipf":
        w = np.arange(1, d + 1, dtype=np.float64) ** -float(pop.exponent)
        return w / w.sum()
    raise ValueError(f"{pop.kind!r} populations have no closed-form distribution")


def read_csv_column(
    path: str | Path, column: str, d: int, *, labels: Sequence[str] | None = None
) -> np.ndarray:
    """Reads one integer column of a CSV file with a header row; every value must be in ``[0, d)``.

    With ``labels``, cells that are labels are mapped to their index (see the module docstring).

    Raises:
        ValueError: missing column, non-integer cell or value outside the domain (with the row number);
            with labels, every unknown category (with its count and first row).
    """
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}: empty CSV file (a header row is required)") from None
        header = [h.strip() for h in header]
        if column not in header:
            raise ValueError(f"{path}: no column {column!r}; columns are {header}")
        j = header.index(column)
        cells = [row[j].strip() if j < len(row) else "" for row in reader]
    if labels is not None:
        return _map_labels(path, column, cells, labels, d)
    try:
        vals = np.array([int(c) for c in cells], dtype=np.int64)
    except ValueError:
        bad = next(i for i, c in enumerate(cells) if not c.lstrip("-").isdigit())
        raise ValueError(
            f"{path}: row {bad + 2}, column {column!r}: {cells[bad]!r} is not an integer"
        ) from None
    out = (vals < 0) | (vals >= d)
    if out.any():
        i = int(np.argmax(out))
        raise ValueError(f"{path}: row {i + 2}, column {column!r}: value {vals[i]} outside [0, {d})")
    return vals


def _map_labels(path: str | Path, column: str, cells: list[str], labels: Sequence[str], d: int) -> np.ndarray:
    """Cells -> values: a label's index, else an integer in ``[0, d)``; every unknown category listed.
    One dictionary look-up per distinct category (``numpy.unique``), not per row."""
    index = {lab: i for i, lab in enumerate(labels)}
    uniq, inv, counts = np.unique(np.array(cells, dtype=str), return_inverse=True, return_counts=True)
    code = np.empty(len(uniq), dtype=np.int64)
    bad: list[int] = []
    for u, c in enumerate(uniq.tolist()):
        v = index.get(c)
        if v is None and c.lstrip("-").isdigit() and 0 <= int(c) < d:
            v = int(c)
        if v is None:
            bad.append(u)
            v = -1
        code[u] = v
    if bad:
        first = {u: int(np.argmax(inv == u)) + 2 for u in bad[:20]}
        names = uniq.tolist()
        shown = "; ".join(f"{names[u]!r} ({int(counts[u])} row(s), first row {first[u]})" for u in bad[:20])
        more = f"; and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise ValueError(
            f"{path}: column {column!r} holds {len(bad)} categor{'y' if len(bad) == 1 else 'ies'} that are "
            f"not task labels (nor integers in [0, {d})): {shown}{more}"
        )
    return code[inv.reshape(-1)] if len(cells) else np.zeros(0, dtype=np.int64)


def iter_population(
    spec: str | Population,
    n: int,
    d: int,
    *,
    batch_size: int = 1 << 18,
    rng: np.random.Generator | int | None = None,
    labels: Sequence[str] | None = None,
) -> Iterator[np.ndarray]:
    """Yields the values of ``n`` users in int64 batches of at most ``batch_size``.

    Synthetic values are drawn i.i.d. from :func:`population_probabilities` by inverse-CDF lookup
    (one ``searchsorted`` per batch). ``labels``: the value labels a ``csv:`` column may hold.
    """
    pop = parse_dataset(spec) if isinstance(spec, str) else spec
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"domain size must be an integer >= 2, got {d!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(rng)
    if pop.kind == "csv":
        vals = read_csv_column(pop.path, pop.column, d, labels=labels)
        if n > len(vals):
            raise ValueError(f"{pop.path}: asked for {n} users but the file has {len(vals)} rows")
        for start in range(0, n, batch_size):
            yield vals[start : min(n, start + batch_size)]
        return
    cdf = np.cumsum(population_probabilities(pop, d))
    cdf[-1] = 1.0
    for start in range(0, n, batch_size):
        m = min(batch_size, n - start)
        yield np.minimum(np.searchsorted(cdf, rng.random(m), side="right"), d - 1).astype(np.int64)


def sample_population(
    spec: str | Population,
    n: int,
    d: int,
    *,
    rng: np.random.Generator | int | None = None,
    labels: Sequence[str] | None = None,
) -> np.ndarray:
    """All ``n`` values at once (see :func:`iter_population`)."""
    batches = list(iter_population(spec, n, d, rng=rng, labels=labels))
    return np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
