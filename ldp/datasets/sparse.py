"""Synthetic and user-supplied populations of sparse vectors (for simulations and the reproduction).

Dataset specs (``--dataset``):

* ``supersparse``: the paper's headline generator (the released code's ``supersparse``): per user
  ``k - 1`` draws ``x ~ Poisson(k / 2)``, value ``clip(N(1, 0.3), -1, 1)`` negated when ``x % 3 == 0``,
  repeated draws of one item keep the last value, then item 0 is set to ``+1``. About 22.9 non-zeros
  per user at ``k = 64``. Ids at or beyond ``d`` (only possible for ``d`` near ``k``) wrap modulo ``d``.
* ``zipf-sparse`` or ``zipf-sparse:S``: the code's ``synthesis`` generator (k- and L-sweeps): per
  user ``k`` draws from a Zipf law of exponent ``S`` (default 1.4) on ``[0, d)`` (item 0 most
  frequent), repeated draws collapse, value ``+1``, negated when ``x % 3 == 0``. (The text describes
  N(1, 0.3) values; the code that produced the figures uses +-1.)
* ``csv:PATH``: a CSV file with header ``user_id,item,value``, one row per non-zero coordinate; every
  distinct user id is one client (in order of first appearance). Rows with a bad item, a non-finite
  value or a repeated (user, item) pair are rejected with the line number and the reason.

All generators are vectorised numpy over an explicit ``numpy.random.Generator``.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from ldp.sparse.vectors import SparseVectors

__all__ = [
    "SPARSE_DATASETS",
    "supersparse",
    "zipf_sparse",
    "load_sparse_csv",
    "sample_sparse",
    "parse_sparse_dataset",
    "DEFAULT_SPARSE_ZIPF",
]

SPARSE_DATASETS = ("supersparse", "zipf-sparse", "csv:PATH")
DEFAULT_SPARSE_ZIPF = 1.4


def _dedupe_last(users: np.ndarray, items: np.ndarray, values: np.ndarray, n: int) -> SparseVectors:
    """COO with possible repeated (user, item): keep the last occurrence of each pair."""
    span = int(items.max()) + 1 if items.size else 1
    if n * span < 1 << 62:
        order = np.argsort(users * span + items, kind="stable")  # stable: later draws stay later
    else:
        order = np.lexsort((np.arange(users.size), items, users))
    u, it = users[order], items[order]
    last = np.ones(order.size, dtype=bool)
    last[:-1] = (u[1:] != u[:-1]) | (it[1:] != it[:-1])
    keep = order[last]
    keep.sort()
    return SparseVectors.from_coo(users[keep], items[keep], values[keep], n)


def supersparse(n: int, d: int, k: int, rng: np.random.Generator) -> SparseVectors:
    """The ``supersparse`` generator (see the module docstring)."""
    n, d, k = int(n), int(d), int(k)
    if n < 0 or d < 1 or k < 1:
        raise ValueError("need n >= 0, d >= 1, k >= 1")
    m = k - 1
    idx = rng.poisson(k / 2.0, size=(n, m)).astype(np.int64) % d
    val = np.clip(rng.normal(1.0, 0.3, size=(n, m)), -1.0, 1.0)
    val = np.where(idx % 3 == 0, -val, val)
    users = np.repeat(np.arange(n, dtype=np.int64), m)
    # item 0 := +1 last, so it wins over any earlier draw of item 0
    users = np.concatenate((users, np.arange(n, dtype=np.int64)))
    items = np.concatenate((idx.ravel(), np.zeros(n, dtype=np.int64)))
    values = np.concatenate((val.ravel(), np.ones(n)))
    order = np.argsort(users, kind="stable")
    return _dedupe_last(users[order], items[order], values[order], n)


def zipf_sparse(
    n: int, d: int, k: int, rng: np.random.Generator, exponent: float = DEFAULT_SPARSE_ZIPF
) -> SparseVectors:
    """The ``zipf-sparse`` generator (see the module docstring)."""
    n, d, k = int(n), int(d), int(k)
    if n < 0 or d < 1 or k < 1:
        raise ValueError("need n >= 0, d >= 1, k >= 1")
    if not exponent > 0:
        raise ValueError(f"Zipf exponent must be positive, got {exponent}")
    if d > 1 << 27:
        raise ValueError("zipf-sparse supports d <= 2**27 (it tabulates the CDF)")
    w = np.arange(1, d + 1, dtype=np.float64) ** (-float(exponent))
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    idx = np.minimum(np.searchsorted(cdf, rng.random((n, k)), side="right"), d - 1).astype(np.int64)
    users = np.repeat(np.arange(n, dtype=np.int64), k)
    items = idx.ravel()
    values = np.where(items % 3 == 0, -1.0, 1.0)
    return _dedupe_last(users, items, values, n)


def load_sparse_csv(path: str | Path, d: int | None = None) -> tuple[SparseVectors, list]:
    """Reads ``user_id,item,value`` rows.

    Args:
        path: the CSV file (header required).
        d: the item universe; items must lie in ``[0, d)`` (``None``: no upper bound below 2**63).

    Returns:
        ``(vectors, user_ids)``: one client per distinct ``user_id`` in order of first appearance.

    Raises:
        ValueError: missing header columns, or the first bad row (line number and reason).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such CSV file: {path}")
    user_index: dict[str, int] = {}
    users: list[int] = []
    items: list[int] = []
    values: list[float] = []
    seen: set[tuple[int, int]] = set()
    upper = (1 << 63) if d is None else int(d)
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["user_id", "item", "value"]:
            raise ValueError(f"{path}: the header must be 'user_id,item,value', got {header}")
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != 3:
                raise ValueError(f"{path}:{line}: expected 3 fields, got {len(row)}")
            uid, item_s, val_s = (c.strip() for c in row)
            try:
                item = int(item_s)
            except ValueError:
                raise ValueError(f"{path}:{line}: item {item_s!r} is not an integer") from None
            if not 0 <= item < upper:
                raise ValueError(f"{path}:{line}: item {item} outside [0, {upper})")
            try:
                val = float(val_s)
            except ValueError:
                raise ValueError(f"{path}:{line}: value {val_s!r} is not a number") from None
            if not math.isfinite(val):
                raise ValueError(f"{path}:{line}: value {val_s!r} is not finite")
            u = user_index.setdefault(uid, len(user_index))
            if (u, item) in seen:
                raise ValueError(f"{path}:{line}: user {uid!r} has item {item} more than once")
            seen.add((u, item))
            users.append(u)
            items.append(item)
            values.append(val)
    vec = SparseVectors.from_coo(
        np.array(users, dtype=np.int64), np.array(items, dtype=np.uint64), np.array(values), len(user_index)
    )
    return vec, list(user_index)


def parse_sparse_dataset(spec: str) -> tuple[str, object]:
    """``(kind, argument)`` of a dataset spec; a clear error listing the kinds otherwise."""
    spec = str(spec)
    if spec == "supersparse":
        return "supersparse", None
    if spec == "zipf-sparse" or spec.startswith("zipf-sparse:"):
        s = spec.partition(":")[2]
        try:
            exp = float(s) if s else DEFAULT_SPARSE_ZIPF
        except ValueError:
            raise ValueError(f"bad Zipf exponent in {spec!r}") from None
        if not exp > 0:
            raise ValueError(f"Zipf exponent must be positive in {spec!r}")
        return "zipf-sparse", exp
    if spec.startswith("csv:") and len(spec) > 4:
        return "csv", spec[4:]
    raise ValueError(f"unknown sparse dataset {spec!r}; known: {', '.join(SPARSE_DATASETS)}")


def sample_sparse(spec: str, n: int | None, d: int, k: int, rng: np.random.Generator) -> SparseVectors:
    """Draws (or loads) a population from a spec. For ``csv:`` data ``n`` may be None or the file's
    client count."""
    kind, arg = parse_sparse_dataset(spec)
    if kind == "csv":
        vec, _ = load_sparse_csv(arg, d)
        if n is not None and n != vec.n:
            raise ValueError(f"{arg} holds {vec.n} clients, but {n} were asked for")
        return vec
    if n is None:
        raise ValueError(f"dataset {spec!r} needs a number of users")
    if kind == "supersparse":
        return supersparse(n, d, k, rng)
    return zipf_sparse(n, d, k, rng, arg)
