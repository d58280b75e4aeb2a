"""The numeric kind's simulated population: values from ``normal[:MEAN:STD]``, ``lognormal[:MU:SIGMA]``,
``uniform[:LOW:HIGH]`` or ``csv:PATH:COLUMN`` (one spec, or one per attribute joined by ``;``), encoded by
the task's mechanism."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp.kinds.numeric.aggregate import _Validator
from ldp.kinds.numeric.task import NumericTask
from ldp.kinds.population import Chunk
from ldp.numeric.multi import MultiNumeric

__all__ = ["sample_values", "sample_columns", "numeric_population", "numeric_template"]


def sample_values(
    dataset: str, n: int | None, rng: np.random.Generator, *, bounds: tuple[float, float] | None = None
) -> np.ndarray:
    """Values of a dataset spec: ``normal[:MEAN:STD]`` (default 0:1), ``lognormal[:MU:SIGMA]`` (default
    0:1), ``uniform[:LOW:HIGH]`` (default: the attribute's ``bounds``, else 0:1) or ``csv:PATH:COLUMN``
    (every row's number; ``n`` None: all of them, else the first ``n``).

    Raises:
        ValueError: an unknown or malformed spec, a missing column, a value that is not a number.
    """
    name, _, rest = dataset.partition(":")
    if name == "csv":
        vals = _csv_column(dataset, rest)
        if n is not None:
            if len(vals) < n:
                raise ValueError(f"dataset {dataset!r}: {len(vals)} rows, {n} users asked for")
            vals = vals[:n]
        return vals
    if n is None:
        raise ValueError(f"dataset {dataset!r} needs a number of users (only csv: data defines its own)")
    a, b = _model_parameters(dataset, name, rest, bounds)
    if name == "normal":
        if b < 0:
            raise ValueError(f"dataset {dataset!r}: the std must be >= 0")
        return rng.normal(a, b, n)
    if name == "lognormal":
        if b < 0:
            raise ValueError(f"dataset {dataset!r}: sigma must be >= 0")
        return rng.lognormal(a, b, n)
    if not a < b:
        raise ValueError(f"dataset {dataset!r}: uniform needs LOW < HIGH")
    return rng.uniform(a, b, n)


def _csv_column(dataset: str, rest: str) -> np.ndarray:
    """Every row's number in the ``PATH:COLUMN`` of a ``csv:`` spec (ValueError naming the problem)."""
    path, sep, column = rest.rpartition(":")
    if not sep or not path or not column:
        raise ValueError(f"dataset {dataset!r}: expected csv:PATH:COLUMN")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if column not in (reader.fieldnames or ()):
                raise ValueError(f"dataset {dataset!r}: no column {column!r} (has {reader.fieldnames})")
            raw = [row[column] for row in reader]
    except OSError as exc:
        raise ValueError(f"dataset {dataset!r}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        vals = np.array([float(v) for v in raw], dtype=np.float64)
    except ValueError:
        why = f"column {column!r} holds a value that is not a number"
        raise ValueError(f"dataset {dataset!r}: {why}") from None
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"dataset {dataset!r}: column {column!r} holds a non-finite value")
    return vals


def _model_parameters(
    dataset: str, name: str, rest: str, bounds: tuple[float, float] | None
) -> tuple[float, float]:
    """The two parameters of a ``normal`` / ``lognormal`` / ``uniform`` spec (its defaults when it gives
    none; ``uniform``'s are the attribute's ``bounds`` when known)."""
    defaults = {"normal": (0.0, 1.0), "lognormal": (0.0, 1.0), "uniform": (0.0, 1.0)}
    if name not in defaults:
        raise ValueError(
            f"unknown numeric dataset {dataset!r}: normal, lognormal, uniform or csv:PATH:COLUMN"
        )
    try:
        default = bounds if name == "uniform" and bounds is not None else defaults[name]
        args = [float(x) for x in rest.split(":")] if rest else [float(x) for x in default]
    except ValueError:
        raise ValueError(f"dataset {dataset!r}: parameters must be numbers") from None
    if len(args) != 2 or not all(math.isfinite(x) for x in args):
        raise ValueError(f"dataset {dataset!r}: give two finite parameters ({name}:A:B) or none")
    return args[0], args[1]


def sample_columns(
    dataset: str,
    m: int,
    n: int | None,
    rng: np.random.Generator,
    *,
    bounds: Sequence[tuple[float, float]] | None = None,
) -> np.ndarray:
    """``(n, m)`` values of ``m`` attributes: ``dataset`` is one spec of :func:`sample_values` (each
    column drawn from it independently; a ``csv:`` spec gives every column the same values) or ``m``
    specs joined by ``;``, one per attribute.

    Raises:
        ValueError: a bad spec, a number of specs other than 1 or ``m``, columns of different lengths.
    """
    specs = dataset.split(";")
    if len(specs) == 1:
        specs = specs * m
    if len(specs) != m:
        raise ValueError(f"dataset {dataset!r}: {len(specs)} specs for {m} attributes (give 1 or {m}, "
                         "joined by ';')")
    if bounds is not None and len(bounds) != m:
        raise ValueError(f"{len(bounds)} bounds for {m} attributes")
    cols = [
        sample_values(spec, n, rng, bounds=None if bounds is None else bounds[i])
        for i, spec in enumerate(specs)
    ]
    lengths = sorted({len(c) for c in cols})
    if len(lengths) > 1:
        raise ValueError(f"dataset {dataset!r}: the attributes' columns have different lengths {lengths}")
    return np.column_stack(cols)


class _NumericPopulation:
    """Clients of a numeric task: one value each (one per attribute), encoded by the task's mechanism."""

    def __init__(
        self, task: NumericTask, users: int | None, dataset: str, ss: np.random.SeedSequence
    ) -> None:
        self.task, self.dataset = task, dataset
        r_val, r_enc, self.time_rng, self.bad_rng = (np.random.default_rng(s) for s in ss.spawn(4))
        if task.is_multi:
            bounds = [(a.low, a.high) for a in task.attributes]
            self.values = sample_columns(dataset, len(task.attributes), users, r_val, bounds=bounds)
        else:
            a = task.attributes[0]
            self.values = sample_values(dataset, users, r_val, bounds=(a.low, a.high))
        self.n_users = len(self.values)
        if self.n_users < 1:
            raise ValueError(f"dataset {dataset!r} has no values")
        self.mech = task.make_mechanism()
        self.reports = self.mech.encode(self.values, rng=r_enc)

    def chunks(self, bounds: np.ndarray) -> Iterator[tuple[int, Any]]:
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo < hi:
                yield k, Chunk(slice(lo, hi), self.reports.take(slice(lo, hi)), 0)

    def _truth_of(self, j: int, x: np.ndarray) -> dict[str, Any]:
        a = self.task.attributes[j]
        clipped = np.clip(x, a.low, a.high)
        return {
            "attribute": a.name,
            "mean": float(np.mean(clipped)),
            "quantiles": {f"{q:g}": float(np.quantile(clipped, q)) for q in self.task.quantiles},
        }

    def truth(self) -> dict[str, Any]:
        """The clipped values' mean and quantiles (several attributes: ``attributes``, one entry each,
        and ``k``)."""
        if not self.task.is_multi:
            return {"mechanism": self.mech.name, **self._truth_of(0, self.values)}
        return {
            "mechanism": self.mech.name,
            "k": self.mech.k,
            "attributes": [self._truth_of(j, self.values[:, j]) for j in range(self.values.shape[1])],
        }

    def write_truth_files(self, out: Path) -> dict[str, Any]:
        return {}


def numeric_population(
    task: Any,
    users: int | None,
    dataset: str,
    ss: np.random.SeedSequence,
    *,
    batch_size: int,
    assignment: str,
) -> _NumericPopulation:
    return _NumericPopulation(task, users, dataset, ss)


def numeric_template(task: Any) -> tuple[Any, int, Any]:
    """The mechanism's validator and reports of the attributes' lower bounds (bad-record variants)."""
    mech = task.make_mechanism()
    if isinstance(mech, MultiNumeric):
        lows = np.array([a.low for a in task.attributes])
        return _Validator(mech), 0, lambda k, rng: mech.encode(np.tile(lows, (k, 1)), rng=rng)
    return _Validator(mech), 0, lambda k, rng: mech.encode(np.full(k, mech.low), rng=rng)
