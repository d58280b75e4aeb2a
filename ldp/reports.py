"""Batches of LDP reports as numpy arrays (one row per report).

A :class:`Reports` batch is what a client encoder emits and what the aggregator accumulates. Each
mechanism uses the fields it needs and leaves the others ``None``:

=========  ==========================  =========================================================
field      dtype / shape               used by
=========  ==========================  =========================================================
values     int64 ``(n,)``              GRR, OLH, BLH (perturbed bucket), HR (output index)
seeds      uint64 ``(n,)``             OLH, BLH (the per-report hash seed)
bits       uint8 ``(n, ceil(d / 8))``  OUE, SUE (bit vector, ``np.packbits(..., bitorder="little")``)
items      unsigned int ``(n, k)``     Subset Selection (the reported subset, sorted ascending)
reals      float64 ``(n,)``            numeric mechanisms (Square Wave)
=========  ==========================  =========================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["Reports"]

_FIELDS = ("values", "seeds", "bits", "items", "reals")


@dataclasses.dataclass
class Reports:
    """A batch of reports; see the module docstring for the fields."""

    values: np.ndarray | None = None
    seeds: np.ndarray | None = None
    bits: np.ndarray | None = None
    items: np.ndarray | None = None
    reals: np.ndarray | None = None

    def __post_init__(self) -> None:
        lengths = {f: len(getattr(self, f)) for f in _FIELDS if getattr(self, f) is not None}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"Reports fields have different lengths: {lengths}")

    def fields(self) -> tuple[str, ...]:
        """Names of the fields that are set."""
        return tuple(f for f in _FIELDS if getattr(self, f) is not None)

    def __len__(self) -> int:
        for f in _FIELDS:
            arr = getattr(self, f)
            if arr is not None:
                return len(arr)
        return 0

    def take(self, index: np.ndarray | slice) -> Reports:
        """Rows selected by an index array, boolean mask or slice."""
        return Reports(**{f: (None if (a := getattr(self, f)) is None else a[index]) for f in _FIELDS})

    @staticmethod
    def concat(batches: Sequence[Reports]) -> Reports:
        """Concatenates batches that set the same fields."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return Reports()
        names = batches[0].fields()
        for b in batches[1:]:
            if b.fields() != names:
                raise ValueError(f"cannot concatenate reports with fields {names} and {b.fields()}")
        return Reports(**{f: np.concatenate([getattr(b, f) for b in batches]) for f in names})
