"""The aggregator of batch-query tasks: the Gaussian matrix mechanism at a trusted aggregator (central DP).

**This is not local DP.** The records are the users' *raw* cell values (the trusted aggregator sees
them); privacy comes only from the Gaussian noise added once per window and pane at finalize. The input
records use the Avro layout of ``schemas/report.avsc`` with ``items`` = the record's coordinates, one
integer per attribute of the task's public domain (``group`` 0). One record per user: the caller must
guarantee it (deduplicate upstream, e.g. by user id); with up to ``max_contributions`` records per user
the sensitivity is scaled by that bound (``ldp.matrix.mechanism.GaussianMatrixMechanism``), and a user
with more records than the bound breaks the guarantee. The job cannot check this, because records carry
no user id.

* validation (:class:`CellValidator`): ``items`` holds one integer per attribute, each inside its
  domain; anything else is dead-lettered with the reason;
* accumulate: a fixed-size ``int64`` count per cell of the public domain (``np.bincount``; exact merges);
* finalize: the noise is drawn once (``y = A x + z``, ``z ~ N(0, sigma^2 I)``, ``sigma`` from the
  task's calibration), ``x_hat = A^+ y``, and one :class:`BatchAnswerRow` per workload query with its
  answer (a count) and its std ``sigma * sqrt(w (A^T A)^+ w^T)`` (``schemas/batch_answer.avsc``).

Noise: the OS CSPRNG (:class:`OsNormal`, ``os.urandom`` through the inverse normal CDF) unless a
``noise_seed`` is given, which only tests and simulations may do (the output then says
``noise_source: "seeded"``: such answers are NOT private, anyone with the seed can remove the noise).

Workload files (:func:`load_workload`, JSON)::

    {"type": "allrange"}                      # every range (box) of the domain; optional "shape": [64]
    {"type": "prefix"}                        # 1-D: [0, j] for every j
    {"type": "identity"}                      # every single cell
    {"type": "ranges", "ranges": [{"age": [0, 9]}, {"age": [10, 19], "income": [0, 3]}]}

Explicit ranges use the range-query file format (``ldp.rangequery.queries``): inclusive bounds, attributes
left out span their whole domain. The strategy is optimised for the workload's Gram (lsa / opt), once
per aggregator.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy import special

from ldp.aggregate import OutputSpec, ResultRow, WindowInfo
from ldp.intervals import normal_interval
from ldp.matrix.mechanism import GaussianMatrixMechanism
from ldp.matrix.strategies import Strategy, make_strategy
from ldp.matrix.workloads import Workload, all_ranges_1d, allrange, prefix, range_set, range_set_matrix
from ldp.rangequery.queries import parse_queries
from ldp.reports import Reports
from ldp.task import BatchTask

__all__ = [
    "PRIVACY_MODEL",
    "BatchAnswerRow",
    "BATCH_ANSWERS",
    "BatchWorkload",
    "CellValidator",
    "BatchAggregator",
    "OsNormal",
    "load_workload",
    "parse_workload_spec",
    "noise_rng",
    "MAX_QUERIES",
]

#: What every answer row says about its privacy model.
PRIVACY_MODEL = "central-dp (trusted aggregator, raw records)"
#: Largest workload (queries) a job answers.
MAX_QUERIES = 1_000_000
_WORKLOAD_TYPES = ("allrange", "prefix", "identity", "ranges")


class BatchAnswerRow(NamedTuple):
    """One workload query's answer in one window and pane (the fields of ``schemas/batch_answer.avsc``).

    The answer is the exact count plus Gaussian noise of standard deviation ``std`` (unbiased, unclipped),
    so ``ci_low`` / ``ci_high`` = ``answer -+ 1.96 std`` is an exact 95% interval (``ci_method``
    ``gaussian-exact``)."""

    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    query_index: int
    query: dict[str, list[int]]
    answer: float
    std: float
    strategy: str
    epsilon: float
    delta: float
    calibration: str
    max_contributions: int
    noise_sigma: float
    noise_source: str
    privacy_model: str
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str | None = None
    output = "answers"


BATCH_ANSWERS = OutputSpec("answers", "batch_answer", "", "answers", None)


# ------------------------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchWorkload:
    """The queries of a batch job: boxes ``[lo, hi)`` (half-open, shape (m, k)) and their Gram.

    ``workload`` is the ``ldp.matrix`` workload the strategy is chosen for (closed-form Gram for
    AllRange / Prefix).
    """

    kind: str
    lo: np.ndarray
    hi: np.ndarray
    workload: Workload = field(repr=False)

    @property
    def n_queries(self) -> int:
        return int(self.lo.shape[0])

    def matrix(self, start: int = 0, stop: int | None = None):
        """The sparse 0/1 rows ``W[start:stop]`` (CSR)."""
        return range_set_matrix(self.workload.dims, self.lo[start:stop], self.hi[start:stop])


def _allrange_boxes(dims: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Every box, in the row order of ``ldp.matrix.workloads.allrange_matrix`` (Kronecker, row-major)."""
    per = [all_ranges_1d(d) for d in dims]
    grids = np.meshgrid(*[np.arange(a.size) for a, _ in per], indexing="ij")
    idx = [g.ravel() for g in grids]
    lo = np.stack([per[t][0][idx[t]] for t in range(len(dims))], axis=1)
    hi = np.stack([per[t][1][idx[t]] for t in range(len(dims))], axis=1)
    return lo.astype(np.int64), hi.astype(np.int64)


def parse_workload_spec(obj: object, task: BatchTask) -> BatchWorkload:
    """A workload object (see the module docstring) for a task's domain.

    Raises:
        ValueError: naming the problem (unknown type or key, a shape that is not the domain's, a bad query).
    """
    dims = task.domain_sizes
    if not isinstance(obj, Mapping):
        raise ValueError(f"a workload must be a JSON object with a 'type', got {type(obj).__name__}")
    kind = obj.get("type")
    if kind not in _WORKLOAD_TYPES:
        raise ValueError(f"workload type must be one of {', '.join(_WORKLOAD_TYPES)}, got {kind!r}")
    known = {"type", "shape", "ranges"} if kind == "ranges" else {"type", "shape"}
    extra = sorted(set(obj) - known)
    if extra:
        raise ValueError(f"unknown workload key(s) {extra} for type {kind!r} (known: {sorted(known)})")
    shape = obj.get("shape")
    if shape is not None and (not isinstance(shape, list) or tuple(shape) != dims):
        raise ValueError(f"workload shape {shape!r} is not the task's domain {list(dims)}")
    if kind == "allrange":
        m = math.prod(d * (d + 1) // 2 for d in dims)
        if m > MAX_QUERIES:
            raise ValueError(f"AllRange over {list(dims)} has {m} queries; at most {MAX_QUERIES}")
        lo, hi = _allrange_boxes(dims)
        return BatchWorkload(kind, lo, hi, allrange(dims))
    if kind == "prefix":
        if len(dims) != 1:
            raise ValueError(f"a prefix workload needs a 1-D domain, got {list(dims)}")
        n = dims[0]
        lo = np.zeros((n, 1), dtype=np.int64)
        hi = np.arange(1, n + 1, dtype=np.int64)[:, None]
        return BatchWorkload(kind, lo, hi, prefix(n))
    if kind == "identity":
        coords = np.indices(dims).reshape(len(dims), -1).T.astype(np.int64)
        return BatchWorkload(kind, coords, coords + 1, range_set(dims, coords, coords + 1, name="identity"))
    raw = obj.get("ranges")
    if not isinstance(raw, list) or not raw:
        raise ValueError("a 'ranges' workload needs a non-empty list 'ranges' of {attribute: [lo, hi]}")
    if len(raw) > MAX_QUERIES:
        raise ValueError(f"{len(raw)} ranges; at most {MAX_QUERIES}")
    queries = parse_queries(raw, task.attribute_names, dims)
    lo = np.zeros((len(queries), len(dims)), dtype=np.int64)
    hi = np.tile(np.asarray(dims, dtype=np.int64), (len(queries), 1))
    for i, q in enumerate(queries):
        for a, lo_a, hi_a in q.intervals:
            lo[i, a], hi[i, a] = lo_a, hi_a + 1
    return BatchWorkload(kind, lo, hi, range_set(dims, lo, hi))


def load_workload(path: str | Path, task: BatchTask) -> BatchWorkload:
    """Reads a workload file for a task.

    Raises:
        ValueError: naming the file and the problem.
    """
    import json

    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the workload file: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    try:
        return parse_workload_spec(obj, task)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------------------------------------
# noise
# ------------------------------------------------------------------------------------------------------------


class OsNormal:
    """Gaussian draws from the OS CSPRNG: 53-bit uniforms from ``os.urandom`` through the inverse normal
    CDF (``scipy.special.ndtri``). Has the ``normal(loc, scale, size)`` method the matrix mechanism calls."""

    name = "os_csprng"

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: int = 1) -> np.ndarray:
        n = int(size)
        bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
        u = (bits.astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1), never 0 or 1
        return loc + scale * special.ndtri(u)


def noise_rng(seed: int, window: WindowInfo) -> np.random.Generator:
    """The seeded generator of one window and pane (tests and simulation only): a ``SeedSequence`` of the
    seed, the window start and the pane index, so windows and panes get independent draws."""
    start = window.start_ms
    key = (0, 0) if start is None else (1, int(start) & ((1 << 63) - 1))
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(*key, int(window.pane_index))))


# ------------------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------------------


class CellValidator:
    """Validation view of a batch task's records: ``items`` = one coordinate per attribute, in domain."""

    name = "cells"
    report_fields = ("items",)

    def __init__(self, task: BatchTask) -> None:
        self.names = task.attribute_names
        self.dims = np.asarray(task.domain_sizes, dtype=np.int64)
        self.k = len(self.names)
        self.d = int(self.dims.max())  # a coordinate value outside every attribute's domain

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        items = reports.items
        if items is None:
            reasons[:] = "missing field(s) items for a batch-query record"
            return np.zeros(n, dtype=bool), reasons
        items = np.asarray(items)
        if items.ndim != 2 or items.shape[1] != self.k:
            reasons[:] = f"items must hold {self.k} coordinate(s), one per attribute"
            return np.zeros(n, dtype=bool), reasons
        vals = items.astype(np.int64, copy=False)
        bad = (vals < 0) | (vals >= self.dims)
        for t in range(self.k - 1, -1, -1):  # name the first bad attribute of each record
            reasons[bad[:, t]] = f"value of attribute {self.names[t]!r} outside [0, {int(self.dims[t]) - 1}]"
        return ~bad.any(axis=1), reasons


# ------------------------------------------------------------------------------------------------------------
# aggregator
# ------------------------------------------------------------------------------------------------------------


class BatchAggregator:
    """:class:`ldp.aggregate.Aggregator` of a :class:`~ldp.task.BatchTask` answering ``workload``.

    Args:
        task: the parsed batch task.
        workload: the queries (:func:`load_workload` / :func:`parse_workload_spec`).
        noise_seed: None (default) draws from the OS CSPRNG; an integer seeds numpy's generator per
            window and pane (:func:`noise_rng`) -- tests and simulation only, the answers are not private.

    Strategy and mechanism are built lazily (an LSA / OPT solve and one SVD) and not pickled.
    """

    outputs = (BATCH_ANSWERS,)
    uniform_oracle = True

    def __init__(self, task: BatchTask, workload: BatchWorkload, *, noise_seed: int | None = None) -> None:
        if task.kind != "batch_queries":
            raise ValueError(f"task {task.task_id!r} is a {task.kind} task, not a batch_queries task")
        if workload.workload.dims != task.domain_sizes:
            raise ValueError(f"the workload's domain {workload.workload.dims} is not the task's")
        if task.mechanism in ("lsa", "opt") and np.any(np.diag(workload.workload.gram) <= 0):
            raise ValueError(
                f"strategy {task.mechanism!r} needs every cell covered by some query; this workload leaves "
                "cells untouched (use identity, h2 or haar, or queries that cover the domain)"
            )
        if noise_seed is not None and not (isinstance(noise_seed, int) and noise_seed >= 0):
            raise ValueError(f"noise_seed must be a non-negative integer, got {noise_seed!r}")
        self.task = task
        self.workload = workload
        self.noise_seed = noise_seed
        self.dims = task.domain_sizes
        self.n = task.n_cells
        self._mech: GaussianMatrixMechanism | None = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_mech": None}

    @property
    def strategy(self) -> Strategy:
        return self.mechanism.strategy

    @property
    def mechanism(self) -> GaussianMatrixMechanism:
        if self._mech is None:
            t = self.task
            strategy = make_strategy(t.mechanism, self.workload.workload, **dict(t.params))
            self._mech = GaussianMatrixMechanism(
                strategy, t.epsilon, t.delta, calibration=t.calibration, max_contributions=t.max_contributions
            )
        return self._mech

    # ---- protocol ----------------------------------------------------------------------------------------
    def validation_oracle(self, group: int) -> CellValidator:
        return CellValidator(self.task)

    def create_accumulator(self, group: int) -> np.ndarray:
        return np.zeros(self.n, dtype=np.int64)

    def cells(self, reports: Reports) -> np.ndarray:
        """Row-major cell index of each (validated) record."""
        items = np.asarray(reports.items, dtype=np.int64).reshape(len(reports), len(self.dims))
        return np.ravel_multi_index(tuple(items.T), self.dims)

    def add(self, group: int, acc: np.ndarray, reports: Reports) -> np.ndarray:
        if len(reports):
            acc += np.bincount(self.cells(reports), minlength=self.n).astype(np.int64)
        return acc

    def merge(self, group: int, accs: Sequence[np.ndarray]) -> np.ndarray:
        out = np.array(accs[0], dtype=np.int64, copy=True)
        for a in accs[1:]:
            out += a
        return out

    def rng(self, window: WindowInfo):
        """The noise source of one window and pane."""
        return OsNormal() if self.noise_seed is None else noise_rng(self.noise_seed, window)

    def answer_counts(self, counts: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
        """Noisy answers and std of every workload query from exact cell counts (one noise draw).

        The same steps as ``GaussianMatrixMechanism.answer`` (measure, estimate, ``W x_hat``,
        ``query_variance``), over row chunks of the sparse W so memory stays bounded.
        """
        mech = self.mechanism
        y = mech.measure(np.asarray(counts, dtype=float), rng=rng)
        xh = mech.estimate(y)
        m = self.workload.n_queries
        step = max(1, (1 << 22) // max(self.n, 1))
        ans = np.empty(m)
        var = np.empty(m)
        for s in range(0, m, step):
            w = self.workload.matrix(s, s + step)
            ans[s : s + step] = np.asarray(w @ xh).ravel()
            var[s : s + step] = mech.query_variance(w)
        return ans, np.sqrt(var)

    def finalize(self, accs: Mapping[int, np.ndarray], window: WindowInfo) -> list[ResultRow]:
        """One noise draw for the window and pane, then one :class:`BatchAnswerRow` per query."""
        counts = self.merge(0, list(accs.values()))
        ans, std = self.answer_counts(counts, self.rng(window))
        ci_lo, ci_hi = normal_interval(ans, std)
        mech = self.mechanism
        t = self.task
        names = t.attribute_names
        source = "os_csprng" if self.noise_seed is None else "seeded (simulation only, not private)"
        lo, hi = self.workload.lo, self.workload.hi
        return [
            BatchAnswerRow(
                task_id=t.task_id,
                schema_version=t.schema_version,
                window_start=window.start_ms,
                window_end=window.end_ms,
                pane_timing=window.pane_timing,
                pane_index=int(window.pane_index),
                query_index=i,
                query={names[a]: [int(lo[i, a]), int(hi[i, a]) - 1] for a in range(len(names))},
                answer=float(ans[i]),
                std=float(std[i]),
                strategy=t.mechanism,
                epsilon=float(t.epsilon),
                delta=float(t.delta),
                calibration=t.calibration,
                max_contributions=int(t.max_contributions),
                noise_sigma=float(mech.sigma),
                noise_source=source,
                privacy_model=PRIVACY_MODEL,
                ci_low=float(ci_lo[i]),
                ci_high=float(ci_hi[i]),
                ci_method="gaussian-exact",
            )
            for i in range(len(ans))
        ]
