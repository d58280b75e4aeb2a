"""Cells of what a client sends: partitions of the report space, each a function of the whole message.

An eps-LDP mechanism stays eps-LDP under any function of its output, so every partition below (a *view*)
must show, in each of its cells, a probability ratio between two inputs of at most ``e^eps``. The views of
one report (``Reports`` fields, as the collector and the Avro files carry them, docs/wire_format.md):

* ``value``: the exact integer (quantile cells when it takes more than :data:`MAX_EXACT` values);
* ``seed``: its top 6 bits (a public seed must not depend on the input);
* ``bits``, ``items``: the exact payload (one cell per distinct row) up to :data:`MAX_JOINT` distinct rows,
  else one two-cell view per bit position / per item value (is it in the report's set?); rows too wide
  for a mixed-radix key are keyed by a 64-bit hash (a collision merges cells: still a function of the
  message);
* ``reals``: per coordinate (the first :data:`MAX_REAL_COORDS`), the float's bit cells
  (``ldp.audit.float_bit_cells``: sign, binary exponent, trailing zero bits) and its value cells (exact when
  it takes at most :data:`MAX_EXACT` values, else :data:`QUANTILE_CELLS` quantiles of the pooled outputs,
  ``ldp.audit.quantile_cells``);
* ``decoded``: what a seeded payload means for the input pair (``clients.Segment.decode``);
* ``joint``: the discrete parts and a coarse cell of each real coordinate together (up to
  :data:`MAX_JOINT` cells), so a leak spread over two fields is one cell;
* ``group`` (range tasks): the number of reports per group.

:func:`audit` counts every cell of every view of every segment and takes one Clopper-Pearson lower bound of
the largest log ratio (``ldp.audit.max_log_ratio_lower_bound`` per view, its share of the error rate in
proportion to its cells: one Bonferroni over all those cells at once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ldp.audit import cell_counts, float_bit_cells, max_log_ratio_lower_bound, quantile_cells

from .clients import Segment

__all__ = ["AuditResult", "audit", "views"]

#: a scalar field with at most this many distinct values (both inputs pooled) gets one cell per value
MAX_EXACT = 512
#: a row field (bits, items, decoded, joint) with at most this many distinct rows gets one cell per row
MAX_JOINT = 4096
#: value cells of a real coordinate with more distinct values than MAX_EXACT
QUANTILE_CELLS = 50
#: real coordinates audited per report (Gaussian sparse reports carry d of them)
MAX_REAL_COORDS = 16
#: cells of each real coordinate inside the joint view
JOINT_REAL_CELLS = 8

View = tuple[str, np.ndarray, np.ndarray]


def _rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Cell ids of the rows of ``a`` and ``b`` (one id per distinct row over both)."""
    pooled = np.concatenate([a, b])
    if pooled.ndim == 2 and pooled.dtype.kind in "iu" and pooled.size:
        # integer rows of small range: one mixed-radix key per row (a 1-D unique is much faster)
        lo = pooled.min(axis=0)
        span = (pooled.max(axis=0) - lo).astype(object) + 1
        if int(np.prod(span)) < 1 << 62:
            mult = np.cumprod([1, *span[:-1]]).astype(np.int64)
            pooled = (pooled.astype(np.int64) - lo.astype(np.int64)) @ mult
        else:  # wide rows: a 64-bit multiplicative hash of the row; a collision only merges two cells,
            # which is still a function of the message
            mult = np.random.default_rng(0x5EED).integers(1, 2**63, size=pooled.shape[1], dtype=np.uint64) | 1
            with np.errstate(over="ignore"):
                pooled = (pooled.astype(np.uint64) * mult).sum(axis=1, dtype=np.uint64)
    if pooled.ndim == 1:
        _, inv = np.unique(pooled, return_inverse=True)
    else:
        _, inv = np.unique(pooled.reshape(len(pooled), -1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return inv[: len(a)], inv[len(a) :], int(inv.max()) + 1 if inv.size else 0


def _scalar(name: str, a: np.ndarray, b: np.ndarray, quantiles: int = QUANTILE_CELLS) -> View:
    ca, cb, k = _rows(a, b)
    if k <= MAX_EXACT:
        return (name, ca, cb)
    qa, qb = quantile_cells(a, b, quantiles)
    return (f"{name} (quantiles)", qa, qb)


def _row_views(name: str, a: np.ndarray, b: np.ndarray) -> list[View]:
    ca, cb, k = _rows(a, b)
    if k <= MAX_JOINT:
        return [(name, ca, cb)]
    return [_scalar(f"{name}[{j}]", a[:, j], b[:, j]) for j in range(min(a.shape[1], 64))]


def _coarse(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ca, cb, k = _rows(a, b)
    if k <= JOINT_REAL_CELLS:
        return ca, cb
    return quantile_cells(a, b, JOINT_REAL_CELLS)


def views(seg: Segment) -> list[View]:
    """Every view of one segment's reports (module docstring): ``(name, counts_a, counts_b)``, the counts of
    the view's cells (aligned) among the reports of input ``a`` and of input ``b``."""
    a, b = seg.a, seg.b
    if len(a) + len(b) == 0:
        return []
    out: list[View] = []
    counted: list[View] = []
    joint_a: list[np.ndarray] = []
    joint_b: list[np.ndarray] = []

    def add_joint(x: np.ndarray, y: np.ndarray) -> None:
        joint_a.append(np.asarray(x, dtype=np.int64).reshape(len(a), -1))
        joint_b.append(np.asarray(y, dtype=np.int64).reshape(len(b), -1))

    if a.values is not None:
        v = _scalar("value", np.asarray(a.values, np.int64), np.asarray(b.values, np.int64))
        out.append(v)
        add_joint(v[1], v[2])
    if a.seeds is not None:
        if seg.decode is None:
            raise AssertionError(f"{seg.label or 'reports'}: a seeded payload without a decoder")
        sa = (np.asarray(a.seeds, np.uint64) >> np.uint64(58)).astype(np.int64)
        sb = (np.asarray(b.seeds, np.uint64) >> np.uint64(58)).astype(np.int64)
        out.append(("seed (top 6 bits)", sa, sb))
    if seg.decode is not None:
        da, db = seg.decode(a), seg.decode(b)
        out.extend(_row_views("decoded", da, db))
        ca, cb, _ = _rows(da, db)
        add_joint(ca, cb)
    for field in ("bits", "items"):
        fa = getattr(a, field)
        if fa is None:
            continue
        fa, fb = np.asarray(fa), np.asarray(getattr(b, field))
        if fa.ndim == 1:
            fa, fb = fa[:, None], fb[:, None]
        if field == "bits":
            fa = np.unpackbits(fa.astype(np.uint8), axis=1, bitorder="little")
            fb = np.unpackbits(fb.astype(np.uint8), axis=1, bitorder="little")
        fa, fb = fa.astype(np.int64), fb.astype(np.int64)
        ca, cb, k = _rows(fa, fb)
        if k <= MAX_JOINT:
            out.append((field, ca, cb))
            add_joint(ca, cb)
        elif field == "bits":  # one two-cell view per bit position, counted directly
            ones_a, ones_b = fa.sum(axis=0), fb.sum(axis=0)
            for j in range(fa.shape[1]):
                counted.append((f"bits[{j}]", np.array([len(a) - ones_a[j], ones_a[j]]),
                                np.array([len(b) - ones_b[j], ones_b[j]])))
        elif all(np.all(np.diff(np.sort(f, axis=1), axis=1) > 0) for f in (fa, fb)):
            # a set of distinct items: one two-cell view per item value (is it in the set?)
            keys, inv = np.unique(np.concatenate([fa.ravel(), fb.ravel()]), return_inverse=True)
            in_a = np.bincount(inv[: fa.size], minlength=keys.size)
            in_b = np.bincount(inv[fa.size :], minlength=keys.size)
            for j, v in enumerate(keys.tolist()):
                counted.append((f"items contain {v}", np.array([len(a) - in_a[j], in_a[j]]),
                                np.array([len(b) - in_b[j], in_b[j]])))
        else:
            out.extend(_scalar(f"{field}[{j}]", fa[:, j], fb[:, j]) for j in range(min(fa.shape[1], 64)))
    if a.reals is not None:
        ra = np.asarray(a.reals, dtype=np.float64).reshape(len(a), -1)
        rb = np.asarray(b.reals, dtype=np.float64).reshape(len(b), -1)
        coords = min(ra.shape[1], MAX_REAL_COORDS)
        for j in range(coords):
            out.append((f"reals[{j}] bits", float_bit_cells(ra[:, j]), float_bit_cells(rb[:, j])))
            out.append(_scalar(f"reals[{j}] value", ra[:, j], rb[:, j]))
            if ra.shape[1] <= 4:
                add_joint(*_coarse(ra[:, j], rb[:, j]))
    if len(joint_a) >= 2:
        ca, cb, k = _rows(np.concatenate(joint_a, axis=1), np.concatenate(joint_b, axis=1))
        if k <= MAX_JOINT:
            out.append(("joint", ca, cb))
    counted.extend((name, *cell_counts(x, y)) for name, x, y in out)
    prefix = f"{seg.label}: " if seg.label else ""
    return [(prefix + name, np.asarray(x), np.asarray(y)) for name, x, y in counted]


@dataclasses.dataclass
class AuditResult:
    """One audit: the lower bound of the largest log ratio over all cells (``bound``), the number of cells
    (``cells``), the view holding it (``worst_view``, its bound ``worst``) and every view's bound."""

    bound: float
    cells: int
    worst_view: str
    worst: float
    per_view: dict[str, float]


def audit(segments: Sequence[Segment], n_a: int, n_b: int, *, alpha: float = 1e-6) -> AuditResult:
    """Counts every view's cells over all segments (``n_a`` / ``n_b`` reports of each input in all) and
    bounds the largest log ratio at confidence ``1 - alpha`` (Bonferroni over all cells)."""
    counted: list[tuple[str, np.ndarray, np.ndarray]] = []
    if len(segments) > 1:
        sizes_a = np.array([len(s.a) for s in segments])
        counted.append(("group", sizes_a, np.array([len(s.b) for s in segments])))
    for seg in segments:
        counted.extend(views(seg))
    total = sum(c[1].size for c in counted)
    # One Bonferroni over all cells of all views: each view is bounded at alpha * (its cells / all cells),
    # so every one-sided Clopper-Pearson bound is taken at alpha / (4 * all cells) (ldp.audit's rule).
    per_view = {
        name: max_log_ratio_lower_bound(ca, cb, n_a, n_b, alpha=alpha * ca.size / total)
        for name, ca, cb in counted
    }
    bound = max(per_view.values())
    worst_view = max(per_view, key=per_view.__getitem__)
    return AuditResult(bound, int(total), worst_view, per_view[worst_view], per_view)
