"""The aggregator of sparse-vector tasks (:class:`ldp.aggregate.Aggregator` protocol), Beam-free.

One group per task. Reports travel in the shared :class:`~ldp.reports.Reports` batch (and so in the v2
Avro report, whose fields mirror it):

=====================  =========================================================================
mechanism              fields
=====================  =========================================================================
svme, kfold, sampling  ``seeds`` uint64 ``(n,)``; ``reals`` float64 ``(n, b)``: the integer bin
                       *codes* (value = code x scale), exact as doubles
harmony, pckv          ``values`` int64 ``(n,)``: the sampled item / perturbed key; ``reals``
                       float64 ``(n, 1)``: the bit (+1 or -1)
gaussian               ``reals`` float64 ``(n, d)``: the dense noisy vector
=====================  =========================================================================

:func:`to_reports` / :func:`from_reports` convert between these and the mechanisms' own report types.
Validation (:class:`SparseValidator`) dead-letters with a reason: wrong fields, wrong number of bins,
non-integer codes, codes out of range, Duchi bits other than +-1, item ids outside the domain.

Accumulator: the mechanism's fixed-size one: the whole-vector Walsh table (SVME, k-fold, sampling with
gf2-affine hashes, d <= 2**27; a dense count vector for Harmony / PCKV) or, given ``items``, the
known-query-set sums. Finalize: one :class:`SparseEstimateRow` per window and pane with ``n_reports``,
``items``, ``mean``, ``std`` (same order) and ``linf_bound_95``, the L-inf error the closed-form variance
predicts at 95% over those items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from ldp.aggregate import OutputSpec, ResultRow, TaskAggregator, WindowInfo
from ldp.payload import PayloadField, PayloadSpec, Refusal, missing_fields, refuse
from ldp.reports import Reports
from ldp.rows import pane_header
from ldp.sparse.accumulate import SVME
from ldp.sparse.baselines import PCKV, DenseReports, Gaussian, Harmony, ItemReports, KFold, Sampling
from ldp.sparse.encode import SparseReports

__all__ = [
    "SparseEstimateRow",
    "SparseAggregator",
    "SparseValidator",
    "SPARSE_ESTIMATES",
    "to_reports",
    "from_reports",
    "encode_population",
]


class SparseEstimateRow(NamedTuple):
    """The estimates of one sparse task, window and pane, not clipped to [-1, 1].

    ``ci_low`` / ``ci_high`` are 95% intervals for the true means of the published numbers
    (:meth:`ldp.sparse.accumulate.SparseEstimate.interval`): ``ci_method`` ``normal`` when the means are
    unbiased (``mean +- 1.96 std``); ``normal+clip_shrinkage`` when SVME's bin clip can bind (the paper
    rule beyond event level), the normal interval of the shrunk mean widened by the shrinkage bound
    ``q`` (``ldp.sparse.params.clip_shrinkage``), with ``linf_bound_95`` including ``q``; none (null) for
    PCKV's biased ``original`` estimator, which has no such bound. ``ci_includes_zero`` flags coordinates
    at noise level."""

    task_id: str
    schema_version: int
    group: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    is_last_pane: bool
    n_reports: int
    mechanism: str
    epsilon: float
    domain_size: int
    sparsity: int
    privacy: str
    items: list[int]
    mean: list[float]
    std: list[float]
    linf_bound_95: float
    ci_low: list[float] | None = None
    ci_high: list[float] | None = None
    ci_method: str | None = None
    ci_includes_zero: list[bool] | None = None
    #: the row type (``schemas/sparse_estimate.avsc``): readers dispatch on it (``ldp.kinds.row_kind``)
    row_schema: str | None = "sparse_estimate"
    output = "estimates"


#: rows go to ``OUT/estimates-*`` (Avro schema ``schemas/sparse_estimate.avsc``)
SPARSE_ESTIMATES = OutputSpec("estimates", "sparse_estimate", "", "estimates", None)


def _kind(mech) -> str:
    if isinstance(mech, (SVME, KFold, Sampling)):
        return "seeded"
    if isinstance(mech, (Harmony, PCKV)):
        return "item"
    if isinstance(mech, Gaussian):
        return "dense"
    raise ValueError(f"not a sparse mechanism: {mech!r}")


def to_reports(mech, native) -> Reports:
    """A mechanism's own reports -> the shared :class:`~ldp.reports.Reports` batch."""
    kind = _kind(mech)
    if kind == "seeded":
        return Reports(seeds=native.seeds, reals=native.codes.astype(np.float64))
    if kind == "item":
        return Reports(values=native.items.astype(np.int64), reals=native.bits.astype(np.float64)[:, None])
    return Reports(reals=np.asarray(native.values, dtype=np.float64))


def from_reports(mech, reports: Reports):
    """The shared batch -> the mechanism's own reports (validate first)."""
    kind = _kind(mech)
    if kind == "seeded":
        return SparseReports(reports.seeds, np.rint(reports.reals).astype(np.int64))
    if kind == "item":
        return ItemReports(reports.values.astype(np.uint64), np.rint(reports.reals[:, 0]).astype(np.int8))
    return DenseReports(np.asarray(reports.reals, dtype=np.float64))


class SparseValidator:
    """The payload checks of a sparse task's reports (:class:`ldp.aggregate.ValidationOracle`)."""

    def __init__(self, mech) -> None:
        self.mech = mech
        self.name = getattr(mech, "name", "sparse")
        kind = _kind(mech)
        self.report_fields = {"seeded": ("seeds", "reals"), "item": ("values", "reals"), "dense": ("reals",)}[
            kind
        ]
        self._kind = kind
        #: doubles per report in ``reals`` (the Avro decoders read ``(n, reals_len)`` arrays)
        self.reals_len = int(self._width())
        #: item-report mechanisms: ``values`` lie in [0, d) (PCKV: d plus its dummy keys); else the domain
        upper = mech.dp if isinstance(mech, PCKV) else getattr(mech, "d", None)
        self.d = int(mech.params.domain_size if upper is None else upper)

    def bad_reals(self) -> tuple[str, list[float]]:
        """A ``reals`` payload of the right length this validator refuses, and the dead-letter reason
        (simulated bad reports)."""
        if isinstance(self.mech, SVME):
            return "out_of_domain", [float(self.mech.params.max_code + 1)] * self.reals_len
        if self._kind == "dense":
            return "invalid_payload", [float("inf")] * self.reals_len
        return "invalid_payload", [3.0] * self.reals_len  # bits other than +-1

    @property
    def payload(self) -> PayloadSpec:
        """The declared report fields (:mod:`ldp.payload`): seeded reports carry ``reals`` bin codes in
        ``[-max_code, max_code]`` (SVME) or bits in ``[-1, 1]`` (the other seeded mechanisms, and SVME
        with Duchi noise), item reports an item id and one bit, dense reports ``d`` finite doubles."""
        w = self.reals_len
        if self._kind == "dense":
            return PayloadSpec((PayloadField("reals", "float64", length=w),))
        if isinstance(self.mech, SVME) and self.mech.params.noise != "duchi":
            top = float(self.mech.params.max_code)
            reals = PayloadField("reals", "float64", length=w, low=-top, high=top)
        else:
            reals = PayloadField("reals", "float64", length=w, low=-1.0, high=1.0, outside="invalid_payload")
        if self._kind == "item":
            return PayloadSpec((PayloadField("values", "int64", low=0, high=self.d - 1), reals))
        return PayloadSpec((PayloadField("seeds", "uint64", invalid="invalid_seed"), reals))

    def _width(self) -> int:
        if self._kind == "item":
            return 1
        if self._kind == "dense":
            return int(self.mech.d)
        if isinstance(self.mech, SVME):
            return int(self.mech.params.bins)
        return int(self.mech.k) if isinstance(self.mech, KFold) else 1

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        missing = missing_fields(self.report_fields, reports, f"mechanism {self.name}")
        if missing is not None:
            reasons[:] = missing
            return np.zeros(n, dtype=bool), reasons
        reals = np.asarray(reports.reals, dtype=np.float64)
        width = self.reals_len
        if reals.ndim != 2 or reals.shape[1] != width:
            got = reals.shape[1] if reals.ndim == 2 else "a scalar"
            reasons[:] = Refusal(
                "invalid_payload", f"reals must hold {width} number(s) per report, got {got}"
            )
            return np.zeros(n, dtype=bool), reasons
        finite = np.all(np.isfinite(reals), axis=1)
        refuse(reasons, ~finite, "invalid_payload", "non-finite payload")
        if self._kind == "dense":
            return np.equal(reasons, None), reasons
        integral = finite & np.all(reals == np.rint(np.where(np.isfinite(reals), reals, 0)), axis=1)
        refuse(reasons, finite & ~integral, "invalid_payload", "bin codes and bits must be integers")
        ok = np.equal(reasons, None)
        if self._kind == "seeded":
            sub = SparseReports(reports.seeds[ok], np.rint(reals[ok]).astype(np.int64))
            if isinstance(self.mech, SVME):
                ok_sub, rs = self.mech.validate(sub)
            else:
                ok_sub = np.all(np.abs(sub.codes) == 1, axis=1)
                rs = np.full(len(ok_sub), None, dtype=object)
                refuse(rs, ~ok_sub, "invalid_payload", "bits must be +1 or -1")
            idx = np.flatnonzero(ok)
            reasons[idx[~ok_sub]] = rs[~ok_sub]
        else:
            bits_ok = np.abs(reals[:, 0]) == 1
            refuse(reasons, ok & ~bits_ok, "invalid_payload", "bits must be +1 or -1")
            vals = np.asarray(reports.values)
            upper = self.mech.dp if isinstance(self.mech, PCKV) else self.mech.d
            refuse(reasons, (vals < 0) | (vals >= upper), "out_of_domain", f"item id outside [0, {upper})")
        return np.equal(reasons, None), reasons


class SparseAggregator(TaskAggregator):
    """:class:`ldp.aggregate.Aggregator` of a :class:`~ldp.kinds.sparse.task.SparseTask`.

    Args:
        task: the parsed sparse task.
        items: the query set (item ids; ``None``: every coordinate, which needs the whole-vector table
            for seeded mechanisms, i.e. gf2-affine hashes and d <= 2**27).
    """

    kind = "sparse"
    outputs = (SPARSE_ESTIMATES,)
    uniform_oracle = True

    def __init__(self, task, items: Sequence[int] | np.ndarray | None = None) -> None:
        super().__init__(task)
        self.items = None if items is None else np.asarray(items, dtype=np.uint64)
        self.create_accumulator(0)  # refuse an impossible configuration now, not at the first report

    def validation_oracle(self, group: int) -> SparseValidator:
        return SparseValidator(self.mechanism)

    def create_accumulator(self, group: int):
        return self.mechanism.create_accumulator(self.items)

    def add(self, group: int, acc, reports: Reports):
        return self.mechanism.add(acc, from_reports(self.mechanism, reports))

    def merge(self, group: int, accs: Sequence):
        return self.mechanism.merge(list(accs))

    def estimate(self, acc):
        """The :class:`~ldp.sparse.accumulate.SparseEstimate` of one accumulator."""
        return self.mechanism.estimate(acc)

    def finalize(self, accs: Mapping[int, object], window: WindowInfo) -> list[ResultRow]:
        rows: list[ResultRow] = []
        t = self.task
        header = pane_header(t, window, row_schema="sparse_estimate")
        for group, acc in sorted(accs.items()):
            if acc.n == 0:
                continue
            est = self.estimate(acc)
            if getattr(self.mechanism, "estimator", "unbiased") != "unbiased":
                lo = hi = method = None
            else:
                lo, hi = est.interval(0.95)
                method = "normal" if est.unbiased else "normal+clip_shrinkage"
            rows.append(
                SparseEstimateRow(
                    **header,  # type: ignore[arg-type]
                    group=int(group),
                    n_reports=int(est.n),
                    epsilon=float(t.epsilon),
                    domain_size=int(t.domain_size),
                    sparsity=int(t.sparsity),
                    privacy=str(t.privacy),
                    items=[int(x) for x in est.items],
                    mean=np.asarray(est.mean, dtype=np.float64).tolist(),
                    std=np.asarray(est.std, dtype=np.float64).tolist(),
                    linf_bound_95=float(est.linf_bound(0.95)),
                    ci_low=None if lo is None else lo.tolist(),
                    ci_high=None if hi is None else hi.tolist(),
                    ci_method=method,
                    ci_includes_zero=None if lo is None else ((lo <= 0.0) & (hi >= 0.0)).tolist(),
                )
            )
        return rows


def encode_population(mech, vectors, *, rng=None, chunk: int = 50_000):
    """Encodes a population in chunks of ``chunk`` clients (what a simulator does); yields
    ``(Reports, EncodeStats)`` per chunk.

    ``rng``: ``None`` (OS entropy and CSPRNG seeds, as a real client), a Generator (used for every
    chunk), or an int / SeedSequence (one spawned child per chunk: reproducible for a given ``chunk``).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    starts = range(0, vectors.n, chunk)
    if rng is None or isinstance(rng, np.random.Generator):
        streams = [rng] * len(starts)
    else:
        ss = rng if isinstance(rng, np.random.SeedSequence) else np.random.SeedSequence(rng)
        streams = ss.spawn(len(starts))
    for lo, stream in zip(starts, streams):
        native, stats = mech.encode(vectors.take(slice(lo, lo + chunk)), rng=stream)
        yield to_reports(mech, native), stats
