"""The store form of numeric estimate rows: one pane per row (group: the attribute's index), item 0 the
mean and item ``1 + i`` quantile ``i``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatItem, FlatPane

__all__ = ["flatten_numeric"]


def flatten_numeric(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[Any]:
    """Store form: one pane per row (group: the attribute's index, ``attribute_index``, 0 in rows
    without it), item 0 the mean (label ``mean``) and item ``1 + i`` quantile ``i`` (label ``q0.5``),
    each with its interval. ``ci_includes_zero`` is set only for an attribute whose range has 0 strictly
    inside (elsewhere "is it 0?" says nothing about the data: a positive attribute's mean is never 0), else
    null, as the dashboard shows it."""
    def item(i: int, label: str, est: float, std: float | None, lo: float, hi: float,
             tested: bool) -> FlatItem:
        zero = int(lo <= 0.0 <= hi) if tested else None
        return FlatItem(i, label, est, std, lo, hi, None, None, zero, None)

    panes = []
    for row in rows:
        tested = float(row.low) < 0.0 < float(row.high)
        items = [item(0, "mean", row.mean, row.mean_std, row.mean_ci_low, row.mean_ci_high, tested)]
        for i, q in enumerate(row.quantiles):
            items.append(item(1 + i, f"q{q['q']:g}", q["value"], None, q["ci_low"], q["ci_high"], tested))
        extra = {
            k: getattr(row, k) for k in ("attribute", "mechanism", "epsilon", "low", "high", "ci_method")
        }
        panes.append(
            FlatPane("numeric", int(getattr(row, "attribute_index", 0) or 0), row.mechanism,
                     int(row.n_reports), len(items), items[:max_items], extra)
        )
    return panes
