"""The store form of heavy-hitters rows: one pane per row (group 0), one item per published string
(label: the string as the row prints it), with its estimate and interval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatItem, FlatPane, get, num

__all__ = ["flatten_heavy_hitters"]

_EXTRA = ("mechanism", "epsilon", "max_length", "top_k", "search", "rule", "alpha", "tested", "threshold_z")


def flatten_heavy_hitters(
    rows: Sequence[Any], max_items: int, labels: Sequence[str] | None
) -> list[FlatPane]:
    """Store form: per row, the first ``max_items`` strings (they come in descending order of estimate),
    item ``i`` the ``i``-th; ``ci_includes_zero`` from the row's interval. ``extra`` holds the task's
    parameters, the number tested and the level statistics."""
    panes = []
    for row in rows:
        hitters = list(get(row, "heavy_hitters") or [])
        items = [_item(i, h) for i, h in enumerate(hitters[:max_items])]
        extra = {k: get(row, k) for k in _EXTRA if get(row, k) is not None}
        extra["levels"] = list(get(row, "levels") or [])
        n = int(row.n_reports)
        panes.append(FlatPane("heavy_hitters", 0, get(row, "mechanism"), n, len(hitters), items, extra))
    return panes


def _item(i: int, h: dict[str, Any]) -> FlatItem:
    lo, hi = num(h["ci_low"]), num(h["ci_high"])
    zero = None if lo is None or hi is None else int(lo <= 0.0 <= hi)
    return FlatItem(i, str(h["value"]), num(h["estimate"]), num(h["std"]), lo, hi, None, None, zero, None)
