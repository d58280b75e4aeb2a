"""Several numeric attributes: Wang et al.'s sample-k-of-m scheme (ICDE 2019, Sec. IV, Algorithm 4).

Each user samples ``k`` of the ``m`` attributes uniformly without replacement (independently of its values)
and reports each sampled attribute with the one-attribute mechanism at ``eps / k``; by composition the
report is eps-LDP, and the choice of attributes reveals nothing. On the wire: ``items`` ``(n, k)`` holds the
sampled attribute indices (sorted) and ``reals`` ``(n, k)`` (``values`` for ``one-bit-mean``) the outputs.

The aggregator keeps one accumulator per attribute over the users who reported it (about ``n k / m``
each) and estimates each attribute's mean from those (the paper scales by ``m / k`` and averages over all
``n``; the per-attribute average used here is also unbiased and avoids the noise of the random count).
Its std uses the sample variance of the reports, which includes the sampling of the users.
``default_k(eps, m) = max(1, min(m, floor(eps / 2.5)))`` is the paper's choice for PM and HM.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp.csprng import client_rng
from ldp.numeric.estimates import NumericEstimate, estimate
from ldp.numeric.mechanisms import NumericAccumulator, make_numeric_mechanism
from ldp.reports import Reports

__all__ = ["default_k", "MultiNumeric", "MultiAccumulator"]


def default_k(epsilon: float, m: int) -> int:
    """The paper's ``k = max(1, min(m, floor(eps / 2.5)))``."""
    return max(1, min(int(m), int(math.floor(float(epsilon) / 2.5))))


@dataclasses.dataclass
class MultiAccumulator:
    """One :class:`~ldp.numeric.mechanisms.NumericAccumulator` per attribute."""

    attributes: list[NumericAccumulator]


class MultiNumeric:
    """Sample-k-of-m over ``m`` bounded attributes.

    Args:
        name: the one-attribute mechanism (``duchi``, ``piecewise``, ``hybrid``, ``laplace``,
            ``one-bit-mean``, ``auto``: chosen at ``eps / k``).
        epsilon: the whole report's budget.
        bounds: ``[(low, high), ...]``, one pair per attribute.
        names: the attributes' names (default ``a0, a1, ...``).
        k: attributes per user (default :func:`default_k`).
    """

    def __init__(self, name: str, epsilon: float, bounds: Sequence[tuple[float, float]], *,
                 names: Sequence[str] | None = None, k: int | None = None) -> None:
        m = len(bounds)
        if m < 1:
            raise ValueError("need at least one attribute")
        if name == "square-wave":
            raise ValueError("sample-k-of-m estimates means: square-wave is not supported here")
        self.k = default_k(epsilon, m) if k is None else int(k)
        if not 1 <= self.k <= m:
            raise ValueError(f"k must be in [1, {m}], got {k!r}")
        self.epsilon = float(epsilon)
        self.names = [f"a{j}" for j in range(m)] if names is None else [str(s) for s in names]
        if len(self.names) != m:
            raise ValueError(f"{len(self.names)} names for {m} attributes")
        self.mechs = [make_numeric_mechanism(name, self.epsilon / self.k, lo, hi) for lo, hi in bounds]
        self.name = self.mechs[0].name
        self.field = "values" if self.name == "one-bit-mean" else "reals"
        self.report_fields = ("items", self.field)

    @property
    def m(self) -> int:
        return len(self.mechs)

    def encode(self, values: Any, *, rng: np.random.Generator | int | None = None) -> Reports:
        """``values`` ``(n, m)`` -> reports with ``items`` ``(n, k)`` and the outputs ``(n, k)``."""
        rng = client_rng(rng)
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.m:
            raise ValueError(f"values must have shape (n, {self.m}), got {x.shape}")
        n = x.shape[0]
        items = np.sort(np.argsort(rng.random((n, self.m)), axis=1)[:, : self.k], axis=1)
        out = np.empty((n, self.k), dtype=np.int64 if self.field == "values" else np.float64)
        for j, mech in enumerate(self.mechs):  # one vectorized call per attribute
            rows, cols = np.nonzero(items == j)
            if rows.size:
                out[rows, cols] = getattr(mech.encode(x[rows, j], rng=rng), self.field)
        return Reports(items=items.astype(np.uint32), **{self.field: out})

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, reasons)``: ``items`` must be ``k`` sorted distinct indices below ``m``; every output must
        pass its attribute's mechanism checks."""
        n = len(reports)
        ok = np.ones(n, dtype=bool)
        reasons = np.full(n, None, dtype=object)
        items, out = reports.items, getattr(reports, self.field)
        if items is None or out is None:
            ok[:] = False
            reasons[:] = "missing_items" if items is None else f"missing_{self.field}"
            return ok, reasons
        items, out = np.asarray(items), np.asarray(out)
        if items.shape != (n, self.k) or out.shape != (n, self.k) or items.dtype.kind not in "iu":
            ok[:] = False
            reasons[:] = "bad_shape"
            return ok, reasons
        it = items.astype(np.int64)
        bad = (it.min(axis=1) < 0) | (it.max(axis=1) >= self.m) | (np.diff(it, axis=1) <= 0).any(axis=1)
        reasons[bad] = "bad_items"
        ok &= ~bad
        for j, mech in enumerate(self.mechs):
            rows, cols = np.nonzero((it == j) & ok[:, None])
            if rows.size:
                sub_ok, sub_r = mech.validate(Reports(**{self.field: out[rows, cols]}))
                reasons[rows[~sub_ok]] = sub_r[~sub_ok]
                ok[rows[~sub_ok]] = False
        return ok, reasons

    def create_accumulator(self) -> MultiAccumulator:
        return MultiAccumulator([mech.create_accumulator() for mech in self.mechs])

    def add(self, acc: MultiAccumulator, reports: Reports) -> MultiAccumulator:
        """Adds a batch (mutates and returns ``acc``); invalid reports raise ValueError."""
        if len(reports) == 0:
            return acc
        ok, reasons = self.validate(reports)
        if not ok.all():
            raise ValueError(f"{int((~ok).sum())} reports are invalid (first: {reasons[~ok][0]})")
        it = np.asarray(reports.items, dtype=np.int64)
        out = np.asarray(getattr(reports, self.field))
        for j, mech in enumerate(self.mechs):
            sel = it == j
            if sel.any():
                mech.add(acc.attributes[j], Reports(**{self.field: out[sel]}))
        return acc

    def merge(self, accs: Sequence[MultiAccumulator]) -> MultiAccumulator:
        return MultiAccumulator([mech.merge([a.attributes[j] for a in accs])
                                 for j, mech in enumerate(self.mechs)])

    def estimate(self, acc: MultiAccumulator, **kwargs: Any) -> list[NumericEstimate]:
        """One estimate per attribute (an attribute without reports raises ValueError)."""
        return [estimate(mech, a, attribute=nm, quantiles=(), **kwargs)
                for mech, a, nm in zip(self.mechs, acc.attributes, self.names)]
