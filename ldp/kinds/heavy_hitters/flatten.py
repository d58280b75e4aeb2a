"""The store form of heavy-hitters rows: one pane per row (group 0), one item per published string.

A string's item is a stable id (:func:`string_item`: 52 bits of a hash of the string, so the same string
has the same item in every window and a chart follows it across windows; 52 bits stay exact as a
JavaScript number); its label is the string as the row prints it, with its estimate and interval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ldp.rows import FlatItem, FlatPane, get, num

__all__ = ["flatten_heavy_hitters", "string_item"]

_EXTRA = ("mechanism", "epsilon", "max_length", "top_k", "search", "rule", "alpha", "tested", "threshold_z")
ITEM_BITS = 52


def string_item(value: str) -> int:
    """The store item of a published string: the top 52 bits of its BLAKE2b-64 hash."""
    digest = hashlib.blake2b(value.encode("utf-8", errors="surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - ITEM_BITS)


def flatten_heavy_hitters(
    rows: Sequence[Any], max_items: int, labels: Sequence[str] | None
) -> list[FlatPane]:
    """Store form: per row, the first ``max_items`` strings (they come in descending order of estimate);
    ``ci_includes_zero`` from the row's interval; ``extra`` holds the task's parameters, the number tested
    and the level statistics. Two strings of one row with the same item (probability about ``k^2 / 2^53``)
    take the next free one."""
    panes = []
    for row in rows:
        hitters = list(get(row, "heavy_hitters") or [])
        taken: set[int] = set()
        items = []
        for h in hitters[:max_items]:
            item = string_item(str(h["value"]))
            while item in taken:
                item = (item + 1) % (1 << ITEM_BITS)
            taken.add(item)
            items.append(_item(item, h))
        extra = {k: get(row, k) for k in _EXTRA if get(row, k) is not None}
        extra["levels"] = list(get(row, "levels") or [])
        n = int(row.n_reports)
        panes.append(FlatPane("heavy_hitters", 0, get(row, "mechanism"), n, len(hitters), items, extra))
    return panes


def _item(item: int, h: dict[str, Any]) -> FlatItem:
    lo, hi = num(h["ci_low"]), num(h["ci_high"])
    zero = None if lo is None or hi is None else int(lo <= 0.0 <= hi)
    return FlatItem(item, str(h["value"]), num(h["estimate"]), num(h["std"]), lo, hi, None, None, zero, None)
