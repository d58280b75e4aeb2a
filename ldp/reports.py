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
import hashlib
import hmac
from collections.abc import Sequence

import numpy as np

__all__ = ["Reports", "client_pseudonym", "CLIENT_ID_DOMAIN", "CLIENT_ID_BYTES"]

#: Domain separation of the client-id PRF (the memoized responses use another label of the same secret).
CLIENT_ID_DOMAIN = b"ldp-client-id/v1"
#: Length of :func:`client_pseudonym` (the report schema allows 1 to 64 bytes).
CLIENT_ID_BYTES = 32


def client_pseudonym(secret: bytes, task_id: str) -> bytes:
    """The pseudonymous client id a client puts in its reports of one task (``client_id`` of
    ``schemas/report.avsc``): ``HMAC-SHA256(secret, CLIENT_ID_DOMAIN || 0x00 || task_id)``, 32 bytes.

    The secret never leaves the client; without it the id cannot be recomputed or linked to the user's
    ids of other tasks. It lets the aggregator count a client's reports per budget period
    (``transforms.budget``); it does not hide *that* one client sent several reports of a task.
    """
    if not isinstance(secret, (bytes, bytearray)) or len(secret) < 16:
        raise ValueError("secret must be at least 16 bytes")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("task_id must be a non-empty string")
    msg = CLIENT_ID_DOMAIN + b"\x00" + task_id.encode("utf-8")
    return hmac.new(bytes(secret), msg, hashlib.sha256).digest()

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
