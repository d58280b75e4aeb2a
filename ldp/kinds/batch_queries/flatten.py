"""The store form of batch-query answer rows (central DP): one pane of one number per query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatPane, answers_pane, extra_fields, get

__all__ = ["flatten_batch"]


def flatten_batch(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Batch-query answer rows (central DP): one pane of one number per query."""
    first = min(rows, key=lambda r: int(r.query_index))
    names = (
        "epsilon", "delta", "calibration", "max_contributions", "noise_sigma", "noise_source", "privacy_model"
    )  # fmt: skip
    return [answers_pane("batch", rows, max_items, get(first, "strategy"), extra_fields(first, names))]
