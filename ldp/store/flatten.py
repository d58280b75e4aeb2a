"""Result rows -> store rows: one row per published number.

* ``EstimateRow`` (frequency estimates): one row per (group, value), output ``estimates``;
* ``AnswerRow`` (range answers): one row per query, output ``answers`` (``extra_json`` holds the query);
* ``SparseEstimateRow`` (k-sparse vector means): one row per coordinate, output ``sparse``;
* ``BatchAnswerRow`` (batch queries, central DP): one row per query, output ``batch``;
* ``ModelRow`` (range models): not stored (no published number; the model files keep them).

Each kind's registry entry (``ldp.kinds``) names its row types, their store output and their flattener
(the functions here for the built-in kinds); a row of a type no kind declares is an error, never dropped.
Rows of other classes with the same fields (older rows, tests' rows) are recognised by their fields.
The error-bar fields (``ci_low``, ``ci_high``, ``ci_method``,
``unbiased``, ``unbiased_std``, ``ci_includes_zero``, ``labels``, ``group_reports``) are read with
defaults: a row without them stores NULL there. The intervals stored are the rows' own (ldp/intervals.py);
the store never computes one (a row without bounds stores NULL ones).

Large domains: at most ``max_items`` numbers per (window, output, group) are stored; beyond that, the
``max_items`` largest published estimates (ties: the lower index first). :class:`FlatPane` says how many
there were (``n_items``) and how many are stored (``stored_items``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "FlatItem",
    "FlatPane",
    "flatten_rows",
    "flatten_estimates",
    "flatten_sparse",
    "flatten_answers",
    "flatten_batch",
    "row_output",
    "window_ms",
]

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


def _num(x: Any) -> float | None:
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _get(row: Any, name: str, default: Any = None) -> Any:
    return getattr(row, name, default)


def _vec(row: Any, name: str, n: int) -> list[Any] | None:
    v = _get(row, name)
    if v is None:
        return None
    v = list(v)
    if len(v) != n:
        raise ValueError(f"{type(row).__name__}.{name} has {len(v)} entries, expected {n}")
    return v


def _json(obj: Any) -> str:
    from ldp.aggregate import json_safe

    return json.dumps(json_safe(obj), allow_nan=False, sort_keys=True)


def row_output(row: Any) -> str | None:
    """The store output of a result row (None: its kind declares it is not stored, as range models).

    Raises:
        ValueError: no registered kind has this row type (``ldp.kinds``): its rows would be lost.
    """
    from ldp.kinds import row_kind

    return row_kind(row).store_output


def _top(estimates: Sequence[float | None], max_items: int) -> np.ndarray:
    """Indices of the numbers stored: all when they fit, else the ``max_items`` largest (non-finite and
    None last, ties by index), in index order: the values the JSON Lines form keeps too."""
    from ldp.aggregate.frequency import top_values

    return top_values(estimates, max_items)


def _vector_pane(
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
    std = _vec(row, "std", n)
    lo, hi = _vec(row, "ci_low", n), _vec(row, "ci_high", n)
    unb, unb_std = _vec(row, "unbiased", n), _vec(row, "unbiased_std", n)
    zero = _vec(row, "ci_includes_zero", n)
    if labels is not None and len(labels) != n:
        labels = None  # labels of another domain (e.g. a sparse row's coordinates): not these numbers'
    items = []
    for i in _top(values, max_items).tolist():
        items.append(
            FlatItem(
                item=int(item_ids[i]),
                label=None if labels is None or labels[i] is None else str(labels[i]),
                estimate=_num(values[i]),
                std=None if std is None else _num(std[i]),
                ci_low=None if lo is None else _num(lo[i]),
                ci_high=None if hi is None else _num(hi[i]),
                unbiased=None if unb is None else _num(unb[i]),
                unbiased_std=None if unb_std is None else _num(unb_std[i]),
                ci_includes_zero=None if zero is None or zero[i] is None else int(bool(zero[i])),
                extra_json=None,
            )
        )
    n_reports = _get(row, "n_reports")
    return FlatPane(
        output,
        int(_get(row, "group", 0) or 0),
        method,
        None if n_reports is None else int(n_reports),
        n,
        items,
        extra,
    )


def _answer_item(row: Any) -> FlatItem:
    # The row's own interval (ldp/intervals.py) is stored as it is: the store never computes a second one
    # that could disagree with the published row. A row without one stores NULL bounds.
    est, std = _num(row.answer), _num(_get(row, "std"))
    lo, hi = _num(_get(row, "ci_low")), _num(_get(row, "ci_high"))
    zero = _get(row, "ci_includes_zero")
    if zero is None and lo is not None and hi is not None:
        zero = lo <= 0.0 <= hi
    extra: dict[str, Any] = {"query": _get(row, "query")}
    if _get(row, "ci_method") is not None:
        extra["ci_method"] = row.ci_method
    return FlatItem(
        item=int(row.query_index),
        label=None,
        estimate=est,
        std=std,
        ci_low=lo,
        ci_high=hi,
        unbiased=_num(_get(row, "unbiased")),
        unbiased_std=_num(_get(row, "unbiased_std")),
        ci_includes_zero=None if zero is None else int(bool(zero)),
        extra_json=_json(extra),
    )


def _extra(row: Any, names: Sequence[str]) -> dict[str, Any]:
    return {k: _get(row, k) for k in names if _get(row, k) is not None}


def flatten_estimates(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Frequency estimate rows: one pane per row (group), one number per value."""
    panes = []
    for row in rows:
        freqs = list(row.frequencies)
        extra = _extra(row, ("mechanism", "epsilon", "domain_size", "ci_method"))
        row_labels = _get(row, "labels") or labels
        method = _get(row, "postprocess")
        panes.append(
            _vector_pane(row, "estimates", freqs, range(len(freqs)), row_labels, max_items, method, extra)
        )
    return panes


def flatten_sparse(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Sparse-vector mean rows: one pane per row, one number per estimated coordinate."""
    panes = []
    names = ("mechanism", "epsilon", "domain_size", "sparsity", "privacy", "linf_bound_95", "ci_method")
    for row in rows:
        method = "/".join(str(x) for x in (_get(row, "mechanism"), _get(row, "privacy")) if x)
        panes.append(
            _vector_pane(
                row,
                "sparse",
                list(row.mean),
                list(row.items),
                None,
                max_items,
                method or None,
                _extra(row, names),
            )
        )
    return panes


def _answers_pane(
    output: str, rows: Sequence[Any], max_items: int, method: str | None, extra: dict[str, Any]
) -> FlatPane:
    rs = sorted(rows, key=lambda r: int(r.query_index))
    items = [_answer_item(r) for r in rs]
    n_reports = _get(rs[0], "n_reports")
    n = len(items)
    if n > max_items:
        keep = set(_top([i.estimate for i in items], max_items).tolist())
        items = [it for j, it in enumerate(items) if j in keep]
    return FlatPane(output, 0, method, None if n_reports is None else int(n_reports), n, items, extra)


def flatten_answers(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Range answer rows: one pane (group 0) of one number per query; ``extra_json`` holds the query."""
    first = min(rows, key=lambda r: int(r.query_index))
    method = _get(first, "mechanism") or _get(first, "method")  # rows written before the pane header: method
    return [
        _answers_pane(
            "answers", rows, max_items, method, _extra(first, ("model_format_version", "group_reports"))
        )
    ]


def flatten_batch(rows: Sequence[Any], max_items: int, labels: Sequence[str] | None) -> list[FlatPane]:
    """Batch-query answer rows (central DP): one pane of one number per query."""
    first = min(rows, key=lambda r: int(r.query_index))
    names = (
        "epsilon", "delta", "calibration", "max_contributions", "noise_sigma", "noise_source", "privacy_model"
    )  # fmt: skip
    return [_answers_pane("batch", rows, max_items, _get(first, "strategy"), _extra(first, names))]


def flatten_rows(
    rows: Iterable[Any], max_items: int = DEFAULT_MAX_ITEMS, labels: Sequence[str] | None = None
) -> list[FlatPane]:
    """The store form of one pane's result rows: the panes of each row type's flattener (its kind's
    registry entry, ``ldp.kinds``), row types in the order they first appear.

    Args:
        rows: the result rows of one task, window and pane (any mix of outputs; rows their kind declares
            unstored, as range models, are skipped).
        max_items: the cap on numbers stored per (output, group) (see the module docstring).
        labels: value labels of the task, used when a row carries none (``labels[i]`` names value ``i``).

    Raises:
        ValueError: ``max_items`` < 1, a row whose vectors disagree in length, or a row of a type no
            registered kind declares (never dropped silently).
    """
    from ldp.kinds import row_kind

    if max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")
    by_kind: dict[Any, list[Any]] = {}
    for row in rows:
        rk = row_kind(row)
        if rk.store_output is not None:
            by_kind.setdefault(rk, []).append(row)
    panes: list[FlatPane] = []
    for rk, rs in by_kind.items():
        assert rk.flatten is not None  # checked at registration
        panes.extend(rk.flatten(rs, max_items, labels))
    return panes
