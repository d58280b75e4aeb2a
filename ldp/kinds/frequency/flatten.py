"""The store form of frequency estimate rows: one pane per row (group), one number per value.

A row's exact p-value of frequency 0 (``p_zero``, ``schemas/estimate.avsc``) travels with its item in the
item's ``extra_json`` (``{"p_zero": p}``), so a view of the store flags from it (``ldp.selection``); items
of rows without it (older rows, the memoized mechanisms) have no ``extra_json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatItem, FlatPane, extra_fields, get, json_text, num, vector_pane

__all__ = ["flatten_estimates"]


def flatten_estimates(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Frequency estimate rows: one pane per row (group), one number per value."""
    panes = []
    for row in rows:
        freqs = list(row.frequencies)
        extra = extra_fields(row, ("mechanism", "epsilon", "domain_size", "ci_method"))
        row_labels = get(row, "labels") or labels
        method = get(row, "postprocess")
        pane = vector_pane(row, "estimates", freqs, range(len(freqs)), row_labels, max_items, method, extra)
        panes.append(_with_p_zero(pane, get(row, "p_zero"), len(freqs)))
    return panes


def _with_p_zero(pane: FlatPane, p_zero: Sequence[float] | None, n: int) -> FlatPane:
    """The pane with each item's ``p_zero`` in its ``extra_json`` (unchanged without a full vector)."""
    if p_zero is None or len(p_zero) != n:
        return pane
    items: list[FlatItem] = []
    for it in pane.items:
        p = num(p_zero[it.item])
        items.append(it if p is None else it._replace(extra_json=json_text({"p_zero": p})))
    return pane._replace(items=items)
