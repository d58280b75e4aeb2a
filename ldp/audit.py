"""Empirical eps-LDP audit helpers: cells of what a client sends, and a lower bound on the privacy loss.

An audit draws many reports from a mechanism at two inputs ``a`` and ``b``, sorts them into cells, and asks
whether some cell's probability ratio is provably above ``e^eps``. Two ways to form cells:

- ``float_bit_cells``: the bit pattern of each value as an IEEE-754 double: sign, binary exponent and the
  number of trailing zero bits of the 52-bit fraction. Floating-point arithmetic leaves its inputs in these
  (a value computed as ``z - 1`` with ``z`` in ``[2, 3)`` never has its last bit set), so this finds tells the
  values themselves hide.
- ``quantile_cells``: value bins whose edges are quantiles of the pooled sample (label-blind), or of a
  separate ``reference`` sample when given.

``max_log_ratio_lower_bound`` turns per-cell counts into a one-sided lower confidence bound on
``max over cells and both directions of log(P[cell | a] / P[cell | b])`` from Clopper-Pearson bounds:
every one of the ``4 K`` one-sided binomial bounds (lower and upper, for each sample, for each of the
``K`` cells) is taken at level ``alpha / (4 K)``, so by the union bound all hold at once with probability
at least ``1 - alpha`` and the returned figure is below the true maximum log ratio with that probability. An
eps-LDP mechanism therefore yields a figure above ``eps`` with probability at most ``alpha``.

Everything here is numpy/scipy, vectorized, and free of Beam.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "cell_counts",
    "clopper_pearson",
    "float_bit_cells",
    "log_ratio_audit",
    "max_log_ratio_lower_bound",
    "quantile_cells",
]

_FRACTION_BITS = 52
_FRACTION_MASK = np.uint64((1 << _FRACTION_BITS) - 1)


def float_bit_cells(x: np.ndarray) -> np.ndarray:
    """Cell id of each value from its float64 bits: ``(sign and biased exponent) * 64 + trailing zero bits``.

    The trailing-zero count is that of the 52-bit fraction (52 when the fraction is zero). Integer arrays
    are converted exactly (``|x| < 2^53`` required, else ``ValueError``), so an integer wire is audited as the
    double it would equal. Returns an ``int64`` array of the input's shape.
    """
    arr = np.asarray(x)
    if arr.dtype.kind in "iu":
        if arr.size and int(np.max(np.abs(arr.astype(np.int64)))) >= 1 << 53:
            raise ValueError("float_bit_cells: integer values at or above 2^53 have no exact float64 form")
        arr = arr.astype(np.float64)
    elif arr.dtype.kind == "f":
        arr = arr.astype(np.float64, copy=False)
    else:
        raise TypeError(f"float_bit_cells: expected a numeric array, got dtype {arr.dtype}")
    bits = np.ascontiguousarray(arr).view(np.uint64)
    sign_exp = (bits >> np.uint64(_FRACTION_BITS)).astype(np.int64)  # 12 bits: sign and biased exponent
    frac = bits & _FRACTION_MASK
    low = frac & (~frac + np.uint64(1))  # lowest set bit (0 when frac == 0)
    # low is a power of two below 2^52, exact in float64, so log2 is exact.
    tz = np.where(frac == 0, _FRACTION_BITS, np.log2(np.maximum(low, 1).astype(np.float64))).astype(np.int64)
    return sign_exp * 64 + tz


def quantile_cells(
    x_a: np.ndarray, x_b: np.ndarray, n_cells: int, *, reference: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Value cells for two samples: bins between quantiles of the pooled sample (or of ``reference``).

    Edges are the ``n_cells - 1`` inner quantiles with duplicates removed (a discrete output gives fewer,
    coarser cells, never empty ones by construction), and a value equal to an edge goes to the cell above
    it. Returns the cell index (``0 .. n_edges``) of every value of ``x_a`` and of ``x_b``.
    """
    if n_cells < 2:
        raise ValueError(f"quantile_cells: n_cells must be at least 2, got {n_cells}")
    a = np.asarray(x_a, dtype=np.float64).ravel()
    b = np.asarray(x_b, dtype=np.float64).ravel()
    ref = np.concatenate([a, b]) if reference is None else np.asarray(reference, dtype=np.float64).ravel()
    if ref.size == 0:
        raise ValueError("quantile_cells: no values to take quantiles of")
    edges = np.unique(np.quantile(ref, np.arange(1, n_cells) / n_cells))
    return np.searchsorted(edges, a, side="right"), np.searchsorted(edges, b, side="right")


def cell_counts(cells_a: np.ndarray, cells_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts of the cells seen in either sample, aligned on their union: ``(counts_a, counts_b)``."""
    ca = np.asarray(cells_a).ravel()
    cb = np.asarray(cells_b).ravel()
    keys, inverse = np.unique(np.concatenate([ca, cb]), return_inverse=True)
    counts_a = np.bincount(inverse[: ca.size], minlength=keys.size)
    counts_b = np.bincount(inverse[ca.size :], minlength=keys.size)
    return counts_a, counts_b


def clopper_pearson(k: np.ndarray, n: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper-Pearson bounds at ``level`` each: ``(lower, upper)`` with ``P[p < lower] <= level``
    and ``P[p > upper] <= level`` for ``k ~ Binomial(n, p)``."""
    from scipy.special import betaincinv

    k = np.asarray(k, dtype=np.float64)
    if n <= 0:
        raise ValueError(f"clopper_pearson: n must be positive, got {n}")
    if np.any((k < 0) | (k > n)):
        raise ValueError("clopper_pearson: counts must lie in [0, n]")
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.where(k > 0, betaincinv(np.maximum(k, 1.0), n - k + 1.0, level), 0.0)
        upper = np.where(k < n, betaincinv(k + 1.0, np.maximum(n - k, 1.0), 1.0 - level), 1.0)
    return lower, upper


def max_log_ratio_lower_bound(
    counts_a: np.ndarray, counts_b: np.ndarray, n_a: int, n_b: int, *, alpha: float = 1e-6
) -> float:
    """Lower confidence bound (level ``1 - alpha``, Bonferroni over cells inside) on the largest log ratio.

    ``counts_a[i]`` / ``counts_b[i]`` are the numbers of the ``n_a`` / ``n_b`` reports at inputs ``a`` / ``b``
    falling in cell ``i``. The bound is ``max_i max(log L_a,i - log U_b,i, log L_b,i - log U_a,i)`` with
    every one of the ``4 K`` one-sided Clopper-Pearson bounds at ``alpha / (4 K)``. Returns ``-inf`` when no
    cell has a positive lower bound (too few reports to say anything).
    """
    ca = np.asarray(counts_a, dtype=np.int64).ravel()
    cb = np.asarray(counts_b, dtype=np.int64).ravel()
    if ca.shape != cb.shape:
        raise ValueError(f"max_log_ratio_lower_bound: counts differ in shape: {ca.shape} vs {cb.shape}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"max_log_ratio_lower_bound: alpha must be in (0, 1), got {alpha}")
    if ca.sum() > n_a or cb.sum() > n_b:
        raise ValueError("max_log_ratio_lower_bound: counts add up to more than n")
    if ca.size == 0:
        return float("-inf")
    level = alpha / (4.0 * ca.size)
    lo_a, up_a = clopper_pearson(ca, int(n_a), level)
    lo_b, up_b = clopper_pearson(cb, int(n_b), level)
    with np.errstate(divide="ignore"):
        ab = np.log(lo_a) - np.log(up_b)
        ba = np.log(lo_b) - np.log(up_a)
    return float(max(np.max(ab), np.max(ba)))


def log_ratio_audit(
    x_a: np.ndarray, x_b: np.ndarray, *, n_quantile_cells: int = 50, alpha: float = 1e-6
) -> dict[str, float]:
    """Both audits of two samples of reports: ``{"bits": ..., "values": ...}``, each a lower bound from
    ``max_log_ratio_lower_bound`` (each at ``alpha``; the pair holds at ``2 alpha``)."""
    a = np.asarray(x_a).ravel()
    b = np.asarray(x_b).ravel()
    bits = cell_counts(float_bit_cells(a), float_bit_cells(b))
    values = cell_counts(*quantile_cells(a, b, n_quantile_cells))
    return {
        "bits": max_log_ratio_lower_bound(*bits, a.size, b.size, alpha=alpha),
        "values": max_log_ratio_lower_bound(*values, a.size, b.size, alpha=alpha),
    }
