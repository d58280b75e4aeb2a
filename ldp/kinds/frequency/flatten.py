"""The store form of frequency estimate rows: one pane per row (group), one number per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatPane, extra_fields, get, vector_pane

__all__ = ["flatten_estimates"]


def flatten_estimates(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Frequency estimate rows: one pane per row (group), one number per value."""
    panes = []
    for row in rows:
        freqs = list(row.frequencies)
        extra = extra_fields(row, ("mechanism", "epsilon", "domain_size", "ci_method"))
        row_labels = get(row, "labels") or labels
        method = get(row, "postprocess")
        panes.append(
            vector_pane(row, "estimates", freqs, range(len(freqs)), row_labels, max_items, method, extra)
        )
    return panes
