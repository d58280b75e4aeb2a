"""Several numeric attributes: Wang et al.'s sample-k-of-m scheme (ICDE 2019, Sec. IV, Algorithm 4).

Each user samples ``k`` of the ``m`` attributes uniformly without replacement (independently of its values)
and reports each sampled attribute with the one-attribute mechanism at ``eps / k``; by composition the
report is eps-LDP, and the choice of attributes reveals nothing. On the wire (``schemas/report.avsc``):
``items`` holds the ``k`` sampled attribute indices (sorted ascending) and ``reals`` the ``k`` outputs in
the same order; for ``one-bit-mean`` the ``k`` bits travel in ``value`` instead, bit ``i`` (``value >> i &
1``) belonging to ``items[i]``. :attr:`MultiNumeric.payload` declares these fields.

The aggregator keeps one accumulator per attribute over the users who reported it (about ``n k / m``
each) and estimates each attribute's mean from those (the paper scales by ``m / k`` and averages over all
``n``; the per-attribute average used here is also unbiased and avoids the noise of the random count).
Its std is the one-attribute mechanism's over those reports. With ``square-wave`` each attribute also gets
its distribution and quantiles.
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
from ldp.payload import PayloadField, PayloadSpec, Refusal, WireSpec, refuse
from ldp.reports import Reports

__all__ = ["default_k", "MultiNumeric", "MultiAccumulator", "MAX_ATTRIBUTES"]

#: Most attributes of one report (``one-bit-mean`` packs its ``k`` bits into one 64-bit ``value``).
MAX_ATTRIBUTES = 32


def default_k(epsilon: float, m: int) -> int:
    """The paper's ``k = max(1, min(m, floor(eps / 2.5)))``."""
    return max(1, min(int(m), int(math.floor(float(epsilon) / 2.5))))


@dataclasses.dataclass
class MultiAccumulator:
    """One :class:`~ldp.numeric.mechanisms.NumericAccumulator` per attribute."""

    attributes: list[NumericAccumulator]

    @property
    def n(self) -> list[int]:
        """First-moment reports per attribute."""
        return [int(a.n[0]) for a in self.attributes]


class MultiNumeric:
    """Sample-k-of-m over ``m`` bounded attributes.

    Args:
        name: the one-attribute mechanism (``duchi``, ``piecewise``, ``hybrid``, ``laplace``,
            ``one-bit-mean``, ``square-wave``, ``auto``: chosen at ``eps / k``).
        epsilon: the whole report's budget.
        bounds: ``[(low, high), ...]``, one pair per attribute.
        names: the attributes' names (default ``a0, a1, ...``).
        k: attributes per user (default :func:`default_k`).
        **params: the one-attribute mechanism's (Square Wave's ``bins``, ...); ``moments`` must be 1.

    Raises:
        ValueError: no or more than :data:`MAX_ATTRIBUTES` attributes, ``k`` outside ``[1, m]``, names
            not unique, ``moments`` 2, or what the one-attribute mechanism refuses (one line).
    """

    wire = WireSpec(
        "real", reason="no byte procedure yet for several attributes: the choice of the k attributes is not "
        "specified (docs/wire_format.md, section 7)"
    )

    def __init__(self, name: str, epsilon: float, bounds: Sequence[tuple[float, float]], *,
                 names: Sequence[str] | None = None, k: int | None = None, **params: Any) -> None:
        m = len(bounds)
        if not 1 <= m <= MAX_ATTRIBUTES:
            raise ValueError(f"need 1 to {MAX_ATTRIBUTES} attributes, got {m}")
        if params.get("moments", 1) != 1:
            raise ValueError("sample-k-of-m reports one moment per attribute: moments must be 1")
        self.k = default_k(epsilon, m) if k is None else int(k)
        if not 1 <= self.k <= m:
            raise ValueError(f"k must be in [1, {m}], got {k!r}")
        self.epsilon = float(epsilon)
        self.names = [f"a{j}" for j in range(m)] if names is None else [str(s) for s in names]
        if len(self.names) != m:
            raise ValueError(f"{len(self.names)} names for {m} attributes")
        if len(set(self.names)) != m:
            raise ValueError(f"attribute names must be unique, got {self.names}")
        self.mechs = [make_numeric_mechanism(name, self.epsilon / self.k, lo, hi, **params)
                      for lo, hi in bounds]
        self.name = self.mechs[0].name
        self.field = "values" if self.name == "one-bit-mean" else "reals"
        self.report_fields = ("items", self.field)
        self._shifts = np.arange(self.k, dtype=np.int64)

    @property
    def payload(self) -> PayloadSpec:
        """The declared report fields (:mod:`ldp.payload`): ``items`` exactly ``k`` indices in
        ``[0, m)`` (a wrong count is ``invalid_payload``, an index out of range ``out_of_domain``), and
        either ``reals`` exactly ``k`` doubles in the one-attribute wire range (``invalid_payload``
        outside) or, for ``one-bit-mean``, ``value`` the ``k`` bits (``0 .. 2^k - 1``)."""
        fields = [PayloadField("items", "int64", length=self.k, low=0, high=self.m - 1)]
        if self.field == "reals":
            lo, hi = self.mechs[0]._reals_bounds()
            fields.append(PayloadField("reals", "float64", length=self.k, low=lo, high=hi,
                                       outside="invalid_payload"))
        else:
            fields.append(PayloadField("values", "int64", low=0, high=(1 << self.k) - 1,
                                       outside="invalid_payload"))
        return PayloadSpec(tuple(fields))

    def _outputs(self, reports: Reports) -> np.ndarray:
        """The ``(n, k)`` outputs of well-formed reports (``one-bit-mean``: the bits unpacked)."""
        if self.field == "reals":
            return np.asarray(reports.reals)
        v = np.asarray(reports.values, dtype=np.int64)
        return (v[:, None] >> self._shifts[None, :]) & 1

    @property
    def m(self) -> int:
        return len(self.mechs)

    def encode(self, values: Any, *, rng: np.random.Generator | int | None = None) -> Reports:
        """``values`` ``(n, m)`` -> reports with ``items`` ``(n, k)`` and ``reals`` ``(n, k)`` (or, for
        ``one-bit-mean``, ``values`` ``(n,)``: the ``k`` bits)."""
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
        if self.field == "values":
            return Reports(items=items.astype(np.int64), values=(out << self._shifts[None, :]).sum(axis=1))
        return Reports(items=items.astype(np.int64), reals=out)

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, reasons)``, a :class:`~ldp.payload.Refusal` per refused report: ``missing_field``;
        ``invalid_payload`` for a wrong count of items or outputs (detail ``bad_shape``), indices not
        strictly increasing (``bad_items``) or an output its attribute's mechanism refuses (its detail);
        ``out_of_domain`` for an index outside ``[0, m)`` (``item_out_of_range``)."""
        n = len(reports)
        ok = np.ones(n, dtype=bool)
        reasons = np.full(n, None, dtype=object)
        missing = [f for f in self.report_fields if getattr(reports, f) is None]
        if missing:
            ok[:] = False
            reasons[:] = Refusal("missing_field", f"missing_{missing[0]}")
            return ok, reasons
        items = np.asarray(reports.items)
        raw = np.asarray(getattr(reports, self.field))
        want = (n,) if self.field == "values" else (n, self.k)
        if (items.shape != (n, self.k) or items.dtype.kind not in "iu" or raw.shape != want
                or (self.field == "values" and raw.dtype.kind not in "iu")):
            ok[:] = False
            reasons[:] = Refusal("invalid_payload", "bad_shape")
            return ok, reasons
        if self.field == "values":
            v = raw.astype(np.int64)
            bad = (v < 0) | (v >> self.k != 0)
            refuse(reasons, bad, "invalid_payload", "value_not_k_bits")
            ok &= ~bad
        it = items.astype(np.int64)
        outside = (it < 0).any(axis=1) | (it >= self.m).any(axis=1)
        refuse(reasons, outside & ok, "out_of_domain", "item_out_of_range")
        ok &= ~outside
        unsorted = (np.diff(it, axis=1) <= 0).any(axis=1)
        refuse(reasons, unsorted & ok, "invalid_payload", "bad_items")
        ok &= ~unsorted
        out = self._outputs(reports)
        for j, mech in enumerate(self.mechs):
            rows, cols = np.nonzero((it == j) & ok[:, None])
            if rows.size:
                sub_ok, sub_r = mech.validate(Reports(**{self.field: out[rows, cols]}))
                bad_rows = rows[~sub_ok]
                keep = np.equal(reasons[bad_rows], None)
                reasons[bad_rows[keep]] = sub_r[~sub_ok][keep]
                ok[bad_rows] = False
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
        out = self._outputs(reports)
        for j, mech in enumerate(self.mechs):
            sel = it == j
            if sel.any():
                mech.add(acc.attributes[j], Reports(**{self.field: out[sel]}))
        return acc

    def merge(self, accs: Sequence[MultiAccumulator]) -> MultiAccumulator:
        return MultiAccumulator([mech.merge([a.attributes[j] for a in accs])
                                 for j, mech in enumerate(self.mechs)])

    def estimate(self, acc: MultiAccumulator, *, quantiles: Sequence[float] = (),
                 **kwargs: Any) -> list[NumericEstimate]:
        """One estimate per attribute (an attribute without reports raises ValueError); ``quantiles``
        are estimated by ``square-wave`` only."""
        return [self.estimate_attribute(acc, j, quantiles=quantiles, **kwargs) for j in range(self.m)]

    def estimate_attribute(self, acc: MultiAccumulator, j: int, *, quantiles: Sequence[float] = (),
                           **kwargs: Any) -> NumericEstimate:
        """Attribute ``j``'s estimate from the users who reported it."""
        return estimate(self.mechs[j], acc.attributes[j], attribute=self.names[j], quantiles=quantiles,
                        **kwargs)
