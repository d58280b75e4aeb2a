"""The store form of heavy-hitters rows: one pane per row (group 0), one item per published string; a
trie-mode row (its ``trie`` record) adds a pane of store output ``heavy_hitters_trie``, group = the level
scored, one item per published prefix (:func:`flatten_trie`).

A string's item is a stable id (:func:`string_item`: 52 bits of a hash of the string, so the same string
has the same item in every window and a chart follows it across windows; 52 bits stay exact as a
JavaScript number); its label is the string as the row prints it, with its estimate and interval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ldp.heavy_hitters.pem import Z95
from ldp.rows import FlatItem, FlatPane, get, num

__all__ = ["flatten_heavy_hitters", "flatten_trie", "string_item", "TRIE_OUTPUT"]

#: the store output of a trie-mode window's published prefixes
TRIE_OUTPUT = "heavy_hitters_trie"
_TRIE_EXTRA = (
    "generation", "level", "status", "prefix_bits", "reports_at_level", "stale_reports", "survivors",
)

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
        n = int(get(row, "n_reports"))
        panes.append(FlatPane("heavy_hitters", 0, get(row, "mechanism"), n, len(hitters), items, extra))
        trie = get(row, "trie")
        if trie is not None:
            panes.append(flatten_trie(trie, get(row, "mechanism"), max_items))
    return panes


def flatten_trie(trie: dict[str, Any], mechanism: str | None, max_items: int) -> FlatPane:
    """The ``heavy_hitters_trie`` pane of a row's ``trie`` record: group = the level scored, one item per
    published prefix (its item a stable id of its bits, :func:`string_item` of its ``hex`` (a level fixes
    the length); its label its text), the estimate with a 95% interval; ``extra`` the step's counts."""
    prefixes = list(trie.get("prefixes") or [])
    taken: set[int] = set()
    items = []
    for pr in prefixes[:max_items]:
        item = string_item(str(pr["hex"]))
        while item in taken:
            item = (item + 1) % (1 << ITEM_BITS)
        taken.add(item)
        est, std = num(pr["estimate"]), num(pr["std"])
        lo = hi = None
        if est is not None and std is not None:
            lo, hi = est - Z95 * std, est + Z95 * std
        items.append(_item(item, {"value": pr["value"], "estimate": est, "std": std, "ci_low": lo,
                                  "ci_high": hi}))
    extra = {k: trie.get(k) for k in _TRIE_EXTRA}
    level, reports = int(trie["level"]), int(trie["reports_at_level"])
    return FlatPane(TRIE_OUTPUT, level, mechanism, reports, len(prefixes), items, extra)


def _item(item: int, h: dict[str, Any]) -> FlatItem:
    lo, hi = num(h["ci_low"]), num(h["ci_high"])
    zero = None if lo is None or hi is None else int(lo <= 0.0 <= hi)
    return FlatItem(item, str(h["value"]), num(h["estimate"]), num(h["std"]), lo, hi, None, None, zero, None)
