"""Batches of users' sparse vectors in compressed sparse row (CSR) form.

A :class:`SparseVectors` holds ``n`` users: user ``i`` owns the entries ``indptr[i]:indptr[i + 1]`` of
``items`` (``uint64`` item ids, any value below ``2**63``) and ``values`` (``float64``). The dense
``d``-vector is never materialised by the client side; :meth:`SparseVectors.mean_at` and
:meth:`SparseVectors.mean_vector` give the true mean for evaluation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["SparseVectors", "MAX_ITEM_ID"]

#: item ids are unsigned integers below this bound (so they fit a signed 64-bit field too)
MAX_ITEM_ID = 1 << 63


@dataclasses.dataclass
class SparseVectors:
    """``n`` users' sparse vectors (CSR).

    Attributes:
        indptr: int64 ``(n + 1,)``, non-decreasing, ``indptr[0] == 0``.
        items: uint64 ``(nnz,)`` item ids, distinct within a user.
        values: float64 ``(nnz,)``.
    """

    indptr: np.ndarray
    items: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        self.indptr = np.asarray(self.indptr, dtype=np.int64)
        self.items = np.asarray(self.items)
        if self.items.dtype.kind == "i":
            if self.items.size and self.items.min() < 0:
                raise ValueError("item ids must be non-negative")
            self.items = self.items.astype(np.uint64)
        elif self.items.dtype.kind == "u":
            self.items = self.items.astype(np.uint64)
        elif self.items.size == 0:
            self.items = np.zeros(0, dtype=np.uint64)
        else:
            raise ValueError(f"item ids must be integers, got dtype {self.items.dtype}")
        self.values = np.asarray(self.values, dtype=np.float64)
        if self.indptr.ndim != 1 or self.indptr.size < 1 or self.indptr[0] != 0:
            raise ValueError("indptr must be a 1-D array starting at 0")
        if np.any(np.diff(self.indptr) < 0):
            raise ValueError("indptr must be non-decreasing")
        if self.items.shape != self.values.shape or self.items.ndim != 1:
            raise ValueError("items and values must be 1-D arrays of the same length")
        if self.indptr[-1] != self.items.size:
            raise ValueError(f"indptr[-1] = {self.indptr[-1]} but there are {self.items.size} entries")
        if self.items.size and self.items.max() >= np.uint64(MAX_ITEM_ID):
            raise ValueError("item ids must be below 2**63")
        if not np.all(np.isfinite(self.values)):
            raise ValueError("values must be finite")

    # -- constructors ------------------------------------------------------------------------------
    @classmethod
    def from_lists(cls, users: list[dict[int, float]] | list[list[int]]) -> SparseVectors:
        """From one ``{item: value}`` dict (or list of items with value 1) per user."""
        items: list[int] = []
        values: list[float] = []
        indptr = [0]
        for u in users:
            if isinstance(u, dict):
                items.extend(int(x) for x in u)
                values.extend(float(v) for v in u.values())
            else:
                items.extend(int(x) for x in u)
                values.extend(1.0 for _ in u)
            indptr.append(len(items))
        return cls(np.array(indptr), np.array(items, dtype=np.uint64), np.array(values))

    @classmethod
    def from_coo(cls, users: np.ndarray, items: np.ndarray, values: np.ndarray, n: int) -> SparseVectors:
        """From (user index in ``[0, n)``, item, value) triples in any order."""
        users = np.asarray(users, dtype=np.int64)
        if users.size and (users.min() < 0 or users.max() >= n):
            raise ValueError(f"user indices must lie in [0, {n})")
        if users.size and np.any(users[1:] < users[:-1]):
            order = np.argsort(users, kind="stable")
        else:
            order = slice(None)
        counts = np.bincount(users, minlength=n)
        indptr = np.concatenate(([0], np.cumsum(counts)))
        return cls(indptr, np.asarray(items)[order], np.asarray(values, dtype=np.float64)[order])

    # -- shape -------------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of users."""
        return int(self.indptr.size - 1)

    def __len__(self) -> int:
        return self.n

    @property
    def nnz(self) -> np.ndarray:
        """Entries per user, int64 ``(n,)``."""
        return np.diff(self.indptr)

    def user_index(self) -> np.ndarray:
        """The user of every entry, int64 ``(nnz,)``."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.nnz)

    def take(self, users: np.ndarray | slice) -> SparseVectors:
        """The sub-batch of the given users (index array or slice), in that order."""
        idx = np.arange(self.n)[users]
        counts = self.nnz[idx]
        starts = self.indptr[idx]
        indptr = np.concatenate(([0], np.cumsum(counts)))
        pos = np.repeat(starts - indptr[:-1], counts) + np.arange(int(indptr[-1]))
        return SparseVectors(indptr, self.items[pos], self.values[pos])

    # -- statistics --------------------------------------------------------------------------------
    def norms2(self) -> np.ndarray:
        """Squared L2 norm of every user's vector, float64 ``(n,)``."""
        return np.bincount(self.user_index(), weights=self.values**2, minlength=self.n)

    def max_item(self) -> int:
        """Largest item id (-1 when there are no entries)."""
        return int(self.items.max()) if self.items.size else -1

    def _sums_at(self, items: np.ndarray, weights: np.ndarray) -> np.ndarray:
        items = np.asarray(items, dtype=np.uint64)
        order = np.argsort(items, kind="stable")
        sorted_items = items[order]
        pos = np.searchsorted(sorted_items, self.items)
        pos_c = np.minimum(pos, max(items.size - 1, 0))
        hit = (pos < items.size) & (sorted_items[pos_c] == self.items) if items.size else np.zeros(0, bool)
        out = np.zeros(items.size)
        if items.size:
            np.add.at(out, order[pos_c[hit]], weights[hit])
        return out

    def mean_at(self, items: np.ndarray) -> np.ndarray:
        """True mean ``(1/n) sum_i v_{i,x}`` at the given item ids."""
        return self._sums_at(items, self.values) / max(self.n, 1)

    def mean_sq_at(self, items: np.ndarray) -> np.ndarray:
        """``(1/n) sum_i v_{i,x}^2`` at the given item ids (enters the closed-form variance)."""
        return self._sums_at(items, self.values**2) / max(self.n, 1)

    def mean_vector(self, d: int) -> np.ndarray:
        """The true mean as a dense length-``d`` vector (requires every item id below ``d``)."""
        if self.items.size and self.max_item() >= d:
            raise ValueError(f"item id {self.max_item()} is outside [0, {d})")
        return np.bincount(self.items.astype(np.int64), weights=self.values, minlength=d) / max(self.n, 1)
