"""The store form of sparse-vector mean rows: one pane per row, one number per estimated coordinate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatPane, extra_fields, get, vector_pane

__all__ = ["flatten_sparse"]


def flatten_sparse(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Sparse-vector mean rows: one pane per row, one number per estimated coordinate."""
    panes = []
    names = ("mechanism", "epsilon", "domain_size", "sparsity", "privacy", "linf_bound_95", "ci_method")
    for row in rows:
        method = "/".join(str(x) for x in (get(row, "mechanism"), get(row, "privacy")) if x)
        panes.append(
            vector_pane(
                row,
                "sparse",
                list(row.mean),
                list(row.items),
                None,
                max_items,
                method or None,
                extra_fields(row, names),
            )
        )
    return panes
