"""The aggregator of batch-query tasks: the matrix mechanism at a trusted aggregator (central DP), with
exact discrete Gaussian noise.

**This is not local DP.** The records are the users' *raw* cell values (the trusted aggregator sees
them); privacy comes only from the noise added once per window and pane at finalize. The input
records use the Avro layout of ``schemas/report.avsc`` with ``items`` = the record's coordinates, one
integer per attribute of the task's public domain (``group`` 0). One record per user: the caller must
guarantee it (deduplicate upstream, e.g. by user id); with up to ``max_contributions`` records per user
the sensitivity is scaled by that bound, and a user with more records than the bound breaks the
guarantee. The job cannot check this, because records carry no user id.

* validation (:class:`CellValidator`): ``items`` holds one integer per attribute, each inside its
  domain; anything else is dead-lettered with the reason (the dead letter keeps no record:
  :attr:`BatchAggregator.raw_records`);
* accumulate: a fixed-size ``int64`` count per cell of the public domain (``np.bincount``; exact merges);
* finalize: one release per window and pane through
  :class:`ldp.matrix.discrete.DiscreteGaussianMatrixMechanism`: integer measurements ``m = B x + z``
  with ``z_i ~ N_Z(0, sigma^2 / c_i)`` sampled exactly (:mod:`ldp.dgauss`), then ``x_hat`` by least
  squares and one :class:`BatchAnswerRow` per workload query with its answer (a count) and its exact std
  (``schemas/batch_answer.avsc``). Everything after ``m`` is floating-point post-processing of integers.

Noise randomness (:meth:`BatchAggregator.noise_stream`): a SHAKE-256 PRF keyed by the aggregator's
secret noise key and :func:`noise_context` (task, workload, measurement, window, pane index, a digest of
the exact counts), so a retried or rerun pane over the same counts republishes the identical release
and different counts get independent noise. ``noise_seed`` derives a public key from the seed: tests
and simulations only (``noise_source: "seeded ..."``: such answers are NOT private).

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

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ldp.aggregate import OutputSpec, ResultRow, TaskAggregator, WindowInfo
from ldp.dgauss import OsRandom, PrfStream, RandomSource
from ldp.intervals import normal_interval
from ldp.kinds.batch_queries.task import BatchTask
from ldp.matrix.discrete import DiscreteGaussianMatrixMechanism, check_calibration
from ldp.matrix.strategies import Strategy, make_strategy
from ldp.matrix.workloads import Workload, all_ranges_1d, allrange, prefix, range_set, range_set_matrix
from ldp.payload import PayloadField, PayloadSpec, Refusal
from ldp.rangequery.queries import parse_queries
from ldp.reports import Reports
from ldp.rows import pane_header

__all__ = [
    "PRIVACY_MODEL",
    "BatchAnswerRow",
    "BATCH_ANSWERS",
    "BatchWorkload",
    "CellValidator",
    "BatchAggregator",
    "load_workload",
    "parse_workload_spec",
    "noise_context",
    "counts_digest",
    "seed_key",
    "MAX_QUERIES",
]

#: What every answer row says about its privacy model.
PRIVACY_MODEL = "central-dp (trusted aggregator, raw records)"
#: Largest workload (queries) a job answers.
MAX_QUERIES = 1_000_000
_WORKLOAD_TYPES = ("allrange", "prefix", "identity", "ranges")


class BatchAnswerRow(NamedTuple):
    """One workload query's answer in one window and pane (the fields of ``schemas/batch_answer.avsc``).

    The answer is the exact count plus a linear combination of discrete Gaussian noise of standard
    deviation ``std`` (exact; unbiased, unclipped); ``ci_low`` / ``ci_high`` = ``answer -+ 1.96 std`` is
    the normal 95% interval (``ci_method`` ``normal``)."""

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
    is_last_pane: bool = True
    mechanism: str | None = None
    #: the row type (``schemas/batch_answer.avsc``): readers dispatch on it (``ldp.kinds.row_kind``)
    row_schema: str | None = "batch_answer"
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


def seed_key(seed: int) -> bytes:
    """The (public, NOT secret) PRF key of a test-only ``noise_seed``."""
    return hashlib.sha256(b"ldp-batch-noise-seed-v1" + int(seed).to_bytes(16, "big")).digest()


def counts_digest(counts: np.ndarray) -> bytes:
    """SHA-256 of the exact cell counts (int64, little-endian)."""
    return hashlib.sha256(np.ascontiguousarray(counts, dtype="<i8").tobytes()).digest()


def noise_context(
    task: BatchTask, workload: BatchWorkload, mech: DiscreteGaussianMatrixMechanism, window: WindowInfo,
    counts: np.ndarray,
) -> bytes:  # fmt: skip
    """What one pane's noise stream is keyed on: the task, the workload, the exact measurement (B, c,
    sigma^2), the window, the pane index and the exact counts. The same inputs give the same release; any
    change gives independent noise (a new release)."""
    h = hashlib.sha256(b"ldp-batch-noise-context-v1")
    for part in (
        json.dumps(task.to_dict(), sort_keys=True).encode(),
        workload.kind.encode(),
        np.ascontiguousarray(workload.lo, dtype="<i8").tobytes(),
        np.ascontiguousarray(workload.hi, dtype="<i8").tobytes(),
        mech.digest(),
        json.dumps([window.start_ms, window.end_ms, int(window.pane_index)]).encode(),
        counts_digest(counts),
    ):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


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
        #: ``items``: one coordinate per attribute, below the largest domain (each attribute's own bound
        #: is checked by :meth:`validate`)
        self.payload = PayloadSpec((PayloadField("items", "int64", length=self.k, low=0, high=self.d - 1),))

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        items = reports.items
        if items is None:
            reasons[:] = Refusal("missing_field", "missing field(s) items for a batch-query record")
            return np.zeros(n, dtype=bool), reasons
        items = np.asarray(items)
        if items.ndim != 2 or items.shape[1] != self.k:
            why = f"items must hold {self.k} coordinate(s), one per attribute"
            reasons[:] = Refusal("invalid_payload", why)
            return np.zeros(n, dtype=bool), reasons
        vals = items.astype(np.int64, copy=False)
        bad = (vals < 0) | (vals >= self.dims)
        for t in range(self.k - 1, -1, -1):  # name the first bad attribute of each record
            why = f"value of attribute {self.names[t]!r} outside [0, {int(self.dims[t]) - 1}]"
            reasons[bad[:, t]] = Refusal("out_of_domain", why)
        return ~bad.any(axis=1), reasons


# ------------------------------------------------------------------------------------------------------------
# aggregator
# ------------------------------------------------------------------------------------------------------------


class BatchAggregator(TaskAggregator):
    """:class:`ldp.aggregate.Aggregator` of a :class:`~ldp.kinds.batch_queries.task.BatchTask` answering
    ``workload``.

    Args:
        task: the parsed batch task.
        workload: the queries (:func:`load_workload` / :func:`parse_workload_spec`).
        noise_key: the trusted aggregator's secret noise key (``ldp.dgauss.load_or_create_key``): each
            pane's noise is the PRF stream of the key and :func:`noise_context`, so a retry or a rerun over
            the same counts republishes the same release.
        noise_seed: tests and simulation only: the key is derived from the seed (public), the answers are
            not private.
        With neither, each pane draws from the OS CSPRNG (a rerun is then a new release).

    Strategy and mechanism are built lazily (an LSA / OPT solve and one SVD) and not pickled.
    """

    kind = "batch_queries"
    outputs = (BATCH_ANSWERS,)
    uniform_oracle = True
    #: The records are raw values (central DP): dead letters keep no record, exact counts are not published.
    raw_records = True

    def __init__(
        self,
        task: BatchTask,
        workload: BatchWorkload,
        *,
        noise_key: bytes | None = None,
        noise_seed: int | None = None,
    ) -> None:
        super().__init__(task)
        if workload.workload.dims != task.domain_sizes:
            raise ValueError(f"the workload's domain {workload.workload.dims} is not the task's")
        if task.mechanism in ("lsa", "opt") and np.any(np.diag(workload.workload.gram) <= 0):
            raise ValueError(
                f"strategy {task.mechanism!r} needs every cell covered by some query; this workload leaves "
                "cells untouched (use identity, h2 or haar, or queries that cover the domain)"
            )
        check_calibration(task.calibration, task.epsilon, task.delta)  # before any record is read
        if noise_seed is not None and not (isinstance(noise_seed, int) and noise_seed >= 0):
            raise ValueError(f"noise_seed must be a non-negative integer, got {noise_seed!r}")
        if noise_seed is not None and noise_key is not None:
            raise ValueError("give a noise key or a noise seed, not both")
        if noise_key is not None and (not isinstance(noise_key, bytes) or len(noise_key) < 16):
            raise ValueError("a noise key must be at least 16 bytes")
        self.workload = workload
        self.noise_seed = noise_seed
        self.noise_key = noise_key
        self.dims = task.domain_sizes
        self.n = task.n_cells

    @property
    def strategy(self) -> Strategy:
        return self.mechanism.strategy

    def build_mechanism(self) -> DiscreteGaussianMatrixMechanism:
        """The task's strategy optimised for the workload, calibrated to the task's budget."""
        t = self.task
        strategy = make_strategy(t.mechanism, self.workload.workload, **dict(t.params))
        return DiscreteGaussianMatrixMechanism(
            strategy, t.epsilon, t.delta, calibration=t.calibration, max_contributions=t.max_contributions
        )

    @property
    def noise_source_name(self) -> str:
        """The ``noise_source`` of every row."""
        if self.noise_seed is not None:
            return "seeded (simulation only, not private)"
        if self.noise_key is not None:
            return "discrete_gaussian/keyed_prf"
        return "discrete_gaussian/os_csprng (unkeyed: a rerun is a new release)"

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

    def noise_stream(self, window: WindowInfo, counts: np.ndarray) -> RandomSource:
        """The noise source of one window and pane over these exact counts (see the class docstring)."""
        key = self.noise_key if self.noise_seed is None else seed_key(self.noise_seed)
        if key is None:
            return OsRandom()
        return PrfStream(key, noise_context(self.task, self.workload, self.mechanism, window, counts))

    def answer_counts(self, counts: np.ndarray, src: RandomSource) -> tuple[np.ndarray, np.ndarray]:
        """Noisy answers and std of every workload query from exact cell counts (one release).

        The same steps as ``DiscreteGaussianMatrixMechanism.answer`` (measure in integers, estimate,
        ``W x_hat``, ``query_variance``), over row chunks of the sparse W so memory stays bounded.
        """
        mech = self.mechanism
        xh = mech.estimate(mech.measure(np.asarray(counts, dtype=np.int64), src))
        m = self.workload.n_queries
        width = self.n if mech.uniform_rows else max(self.n, mech.a.shape[0])  # the sandwich is (chunk, p)
        step = max(1, (1 << 22) // max(width, 1))
        ans = np.empty(m)
        var = np.empty(m)
        for s in range(0, m, step):
            w = self.workload.matrix(s, s + step)
            ans[s : s + step] = np.asarray(w @ xh).ravel()
            var[s : s + step] = mech.query_variance(w)
        return ans, np.sqrt(var)

    def finalize(self, accs: Mapping[int, np.ndarray], window: WindowInfo) -> list[ResultRow]:
        """One release for the window and pane, then one :class:`BatchAnswerRow` per query."""
        counts = self.merge(0, list(accs.values()))
        ans, std = self.answer_counts(counts, self.noise_stream(window, counts))
        ci_lo, ci_hi = normal_interval(ans, std)
        mech = self.mechanism
        t = self.task
        names = t.attribute_names
        source = self.noise_source_name
        lo, hi = self.workload.lo, self.workload.hi
        header = pane_header(t, window, row_schema="batch_answer")
        return [
            BatchAnswerRow(
                **header,  # type: ignore[arg-type]
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
                ci_method="normal",
            )
            for i in range(len(ans))
        ]
