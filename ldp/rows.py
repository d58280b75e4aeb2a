"""What every result row shares: the pane header, and the store form of rows (one row per number).

Every result row type starts with the :data:`PANE_HEADER` fields (:func:`pane_header` fills them), its Avro
schema too; ``row_schema`` names the row's Avro record, so a reader dispatches on it (``ldp.kinds``).

The store keeps one row per published number: a kind's flattener (``ldp.kinds.<kind>.flatten``) turns the
rows of one pane into :class:`FlatPane`\\ s of :class:`FlatItem`\\ s with the helpers here
(:func:`vector_pane` for a vector of numbers per row, :func:`answers_pane` for one number per query row);
``ldp.kinds.flatten_rows`` dispatches a pane's rows to their kinds' flatteners. The error-bar fields
(``ci_low``, ``ci_high``, ``ci_method``, ``unbiased``, ``unbiased_std``, ``ci_includes_zero``, ``labels``,
``group_reports``) are read with defaults: a row without them stores NULL there. The intervals stored are
the rows' own (``ldp/intervals.py``); the store never computes one.

Large domains: at most ``max_items`` numbers per (window, output, group) are stored; beyond that, the
``max_items`` largest published estimates (:func:`top_values`; ties: the lower index first).
:class:`FlatPane` says how many there were (``n_items``) and how many are stored (``stored_items``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ldp.aggregate import WindowInfo
    from ldp.task import Task

__all__ = [
    "PANE_HEADER",
    "PANE_HEADER_TYPES",
    "pane_header",
    "row_schema_of",
    "DEFAULT_MAX_ITEMS",
    "FlatItem",
    "FlatPane",
    "window_ms",
    "top_values",
    "vector_pane",
    "answers_pane",
    "extra_fields",
    "get",
    "num",
    "json_text",
]

#: The fields every result row and its Avro schema carry: which task, window and pane it belongs to.
#: ``is_last_pane``: the window's final pane (no later pane replaces it); ``mechanism``: the task's;
#: ``row_schema``: the Avro record name of the row type (``"estimate"``, ``"numeric_estimate"``, ...), which
#: readers dispatch on (an Avro default of null: files written before it still read).
PANE_HEADER: tuple[str, ...] = (
    "task_id",
    "schema_version",
    "window_start",
    "window_end",
    "pane_timing",
    "pane_index",
    "is_last_pane",
    "mechanism",
    "row_schema",
)
#: The Avro type of each :data:`PANE_HEADER` field (a nullable field's non-null branch: older files read the
#: header's added fields as null), the one declaration every row schema is checked against
#: (``tests/test_kinds.py``).
PANE_HEADER_TYPES: dict[str, object] = {
    "task_id": "string",
    "schema_version": "int",
    "window_start": {"type": "long", "logicalType": "timestamp-millis"},
    "window_end": {"type": "long", "logicalType": "timestamp-millis"},
    "pane_timing": "string",
    "pane_index": "long",
    "is_last_pane": "boolean",
    "mechanism": "string",
    "row_schema": "string",
}


def row_schema_of(row: object) -> str | None:
    """The ``row_schema`` a row carries (an attribute, or a key of a record read from a file), else None."""
    value = row.get("row_schema") if isinstance(row, dict) else getattr(row, "row_schema", None)
    return value if isinstance(value, str) and value else None


def pane_header(
    task: Task, window: WindowInfo, mechanism: str | None = None, *, row_schema: str
) -> dict[str, object]:
    """The :data:`PANE_HEADER` fields of a ``row_schema`` row of ``task`` in ``window`` (``mechanism``:
    default the task's)."""
    return {
        "row_schema": row_schema,
        "task_id": task.task_id,
        "schema_version": int(task.schema_version),
        "window_start": window.start_ms,
        "window_end": window.end_ms,
        "pane_timing": str(window.pane_timing),
        "pane_index": int(window.pane_index),
        "is_last_pane": bool(window.is_last_pane),
        "mechanism": task.mechanism if mechanism is None else mechanism,
    }


#: Numbers stored per (window, output, group) unless told otherwise (``--store_max_items``).
DEFAULT_MAX_ITEMS = 4096


class FlatItem(NamedTuple):
    """One published number of a pane (the value columns of ``ldp_current``)."""

    item: int
    label: str | None
    estimate: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None
    unbiased: float | None
    unbiased_std: float | None
    ci_includes_zero: int | None
    extra_json: str | None


class FlatPane(NamedTuple):
    """The numbers of one (output, group) of a pane.

    Attributes:
        output: ``estimates``, ``answers``, ``sparse`` or ``batch``.
        grp: the user group (0 for answers and batch answers).
        method: the post-processing / answering method of the numbers.
        n_reports: the reports behind them (None where the row has no count, e.g. batch answers).
        n_items: how many numbers the row has.
        items: the stored ones (all of them up to the cap, else the top ``max_items`` by estimate).
        extra: per-pane facts for ``ldp_panes.extra_json`` (mechanism, epsilon, CI method, ...).
    """

    output: str
    grp: int
    method: str | None
    n_reports: int | None
    n_items: int
    items: list[FlatItem]
    extra: dict[str, Any]


def window_ms(value: int | None) -> int:
    """A row's window bound in the store (the global window's None bounds are 0)."""
    return 0 if value is None else int(value)


def num(x: Any) -> float | None:
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def get(row: Any, name: str, default: Any = None) -> Any:
    return getattr(row, name, default)


def vec(row: Any, name: str, n: int) -> list[Any] | None:
    v = get(row, name)
    if v is None:
        return None
    v = list(v)
    if len(v) != n:
        raise ValueError(f"{type(row).__name__}.{name} has {len(v)} entries, expected {n}")
    return v


def json_text(obj: Any) -> str:
    from ldp.aggregate import json_safe  # ldp.aggregate's annotations name this module's types

    return json.dumps(json_safe(obj), allow_nan=False, sort_keys=True)


def top_values(estimates: Sequence[float | None] | np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest estimates in index order (all of them when there are at most ``k``).
    Non-finite ones (NaN, infinities, None) rank last; ties go to the lower index. The store keeps the
    same values, and the JSON Lines form of an estimate row."""
    arr = np.asarray(estimates, dtype=np.float64)  # None -> NaN
    n = arr.shape[0]
    if n <= k:
        return np.arange(n)
    key = -arr
    key[~np.isfinite(key)] = np.inf
    if k <= 0:
        return np.arange(0)
    kth = np.partition(key, k - 1)[k - 1]  # the k-th smallest key: the smallest estimate kept
    above = np.flatnonzero(key < kth)
    ties = np.flatnonzero(key == kth)[: k - above.size]  # the lower indices first
    return np.sort(np.concatenate([above, ties]))


def vector_pane(
    row: Any,
    output: str,
    values: Sequence[float],
    item_ids: Sequence[int],
    labels: Sequence[str] | None,
    max_items: int,
    method: str | None,
    extra: dict[str, Any],
) -> FlatPane:
    n = len(values)
    std = vec(row, "std", n)
    lo, hi = vec(row, "ci_low", n), vec(row, "ci_high", n)
    unb, unb_std = vec(row, "unbiased", n), vec(row, "unbiased_std", n)
    zero = vec(row, "ci_includes_zero", n)
    if labels is not None and len(labels) != n:
        labels = None  # labels of another domain (e.g. a sparse row's coordinates): not these numbers'
    items = []
    for i in top_values(values, max_items).tolist():
        items.append(
            FlatItem(
                item=int(item_ids[i]),
                label=None if labels is None or labels[i] is None else str(labels[i]),
                estimate=num(values[i]),
                std=None if std is None else num(std[i]),
                ci_low=None if lo is None else num(lo[i]),
                ci_high=None if hi is None else num(hi[i]),
                unbiased=None if unb is None else num(unb[i]),
                unbiased_std=None if unb_std is None else num(unb_std[i]),
                ci_includes_zero=None if zero is None or zero[i] is None else int(bool(zero[i])),
                extra_json=None,
            )
        )
    n_reports = get(row, "n_reports")
    return FlatPane(
        output,
        int(get(row, "group", 0) or 0),
        method,
        None if n_reports is None else int(n_reports),
        n,
        items,
        extra,
    )


def answer_item(row: Any) -> FlatItem:
    # The row's own interval (ldp/intervals.py) is stored as it is: the store never computes a second one
    # that could disagree with the published row. A row without one stores NULL bounds.
    est, std = num(row.answer), num(get(row, "std"))
    lo, hi = num(get(row, "ci_low")), num(get(row, "ci_high"))
    zero = get(row, "ci_includes_zero")
    if zero is None and lo is not None and hi is not None:
        zero = lo <= 0.0 <= hi
    extra: dict[str, Any] = {"query": get(row, "query")}
    if get(row, "ci_method") is not None:
        extra["ci_method"] = row.ci_method
    return FlatItem(
        item=int(row.query_index),
        label=None,
        estimate=est,
        std=std,
        ci_low=lo,
        ci_high=hi,
        unbiased=num(get(row, "unbiased")),
        unbiased_std=num(get(row, "unbiased_std")),
        ci_includes_zero=None if zero is None else int(bool(zero)),
        extra_json=json_text(extra),
    )


def extra_fields(row: Any, names: Sequence[str]) -> dict[str, Any]:
    return {k: get(row, k) for k in names if get(row, k) is not None}


def answers_pane(
    output: str, rows: Sequence[Any], max_items: int, method: str | None, extra: dict[str, Any]
) -> FlatPane:
    rs = sorted(rows, key=lambda r: int(r.query_index))
    items = [answer_item(r) for r in rs]
    n_reports = get(rs[0], "n_reports")
    n = len(items)
    if n > max_items:
        keep = set(top_values([i.estimate for i in items], max_items).tolist())
        items = [it for j, it in enumerate(items) if j in keep]
    return FlatPane(output, 0, method, None if n_reports is None else int(n_reports), n, items, extra)
