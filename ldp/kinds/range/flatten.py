"""The store form of range answer rows: one pane (group 0) of one number per query (``extra_json``
holds the query). Model rows are not stored (the model files keep them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatPane, answers_pane, extra_fields, get

__all__ = ["flatten_answers"]


def flatten_answers(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Range answer rows: one pane (group 0) of one number per query; ``extra_json`` holds the query."""
    first = min(rows, key=lambda r: int(r.query_index))
    method = get(first, "mechanism") or get(first, "method")  # rows written before the pane header: method
    return [
        answers_pane(
            "answers", rows, max_items, method, extra_fields(first, ("model_format_version", "group_reports"))
        )
    ]
