"""How ``ldp-beam show`` (:mod:`pipelines.show`) reads and prints the result rows of each built-in kind.

Each constant is a :class:`pipelines.show.ShowSpec`, registered by its kind's name
(:func:`pipelines.show.register_show`, from :data:`BUILT_IN` when this module is imported; a kind
without one is printed generically): the fields a row must have, how to recognise a row by its fields,
the tables of one window, and the lines of one table. Stdlib only,
like the command, but for the frequency top-K, whose simultaneous intervals and flags come from
:mod:`ldp.selection` (numpy, imported when a frequency row is shown).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipelines.show import (
    MAX_CELL_CHARS,
    ShowSpec,
    TableText,
    as_int,
    fmt,
    latest_panes,
    number,
    number_at,
    pane_of,
    query_text,
    register_show,
    safe_text,
    top_indices,
)

__all__ = ["FREQUENCY", "SPARSE", "NUMERIC", "RANGE", "BATCH_QUERIES", "HEAVY_HITTERS", "frequency_table"]

Row = dict[str, Any]


def _same_lengths(of: str) -> Any:
    """A row check: every per-value list (``std``, ``items``, ``values``, intervals, labels) holds as many
    entries as the row's ``of`` field."""

    def check(row: Row) -> None:
        n = len(row[of])
        for name in ("std", "items", "values", "ci_low", "ci_high", "labels", "unbiased", "unbiased_std",
                     "p_zero"):
            value = row.get(name)
            if value is not None and (not isinstance(value, list) or len(value) != n):
                raise KeyError(f"{name!r} does not hold {n} entries")

    return check


# ---------------------------------------------------------------------------------------------- frequency


def _selection_columns(row: Row, d: int, rule: str) -> tuple[list[Any], list[Any], list[Any]] | None:
    """Per held value: the simultaneous interval's ends and the discovery flag (:mod:`ldp.selection`,
    over the task's whole domain ``d``), from the row's ``unbiased`` and ``unbiased_std``; the flag from
    the row's exact p-values ``p_zero`` when it has them (the normal p-values otherwise). None for a row
    without the estimates (an older row: nothing valid after selection can be made from the published
    numbers)."""
    unbiased, ustd = row.get("unbiased"), row.get("unbiased_std")
    n = len(row["frequencies"])
    if not (isinstance(unbiased, list) and isinstance(ustd, list) and len(unbiased) == len(ustd) == n):
        return None
    import numpy as np

    from ldp import selection

    def vec(values: list[Any]) -> Any:
        return np.array([x if number(x) is not None else np.nan for x in values], dtype=np.float64)

    u, s, pub = vec(unbiased), vec(ustd), vec(row["frequencies"])
    lo, hi = selection.simultaneous_intervals(u, s, d, published=pub)
    p_zero = row.get("p_zero")
    if isinstance(p_zero, list) and len(p_zero) == n:
        flag = selection.flag_p_values(vec(p_zero), d, rule) & (u > 0)
    else:
        flag = selection.discoveries(u, s, d, rule)
    ok = np.isfinite(u) & np.isfinite(s)
    return (
        [number(x) for x in lo.tolist()],
        [number(x) for x in hi.tolist()],
        [bool(f) if k else None for f, k in zip(flag.tolist(), ok.tolist(), strict=True)],
    )


def frequency_table(row: Row, top: int, rule: str = "bonferroni") -> dict[str, Any]:
    """One group's table: its ``top`` largest estimates, each with the simultaneous 95% interval over the
    domain (``ci_low``, ``ci_high``: valid after the selection), the discovery flag under ``rule``
    (``above_zero``) and the row's own per-value interval (``per_value_ci_low`` / ``_high``: valid only
    for a value chosen in advance)."""
    from ldp import selection

    freq = row["frequencies"]
    labels = row.get("labels")
    index = row.get("values")  # a row of a large domain holds its largest values only, these
    d = as_int(row.get("domain_size")) if isinstance(index, list) else len(freq)
    d = max(d, len(freq), 1)
    chosen = _selection_columns(row, d, rule)
    entries = []
    for rank, v in enumerate(top_indices(freq, top), 1):
        entries.append({
            "rank": rank,
            "value": index[v] if isinstance(index, list) else v,
            "label": labels[v] if isinstance(labels, list) else None,
            "estimate": number(freq[v]),
            "std": number_at(row["std"], v),
            "ci_low": None if chosen is None else chosen[0][v],
            "ci_high": None if chosen is None else chosen[1][v],
            "above_zero": None if chosen is None else chosen[2][v],
            "per_value_ci_low": number_at(row.get("ci_low"), v),
            "per_value_ci_high": number_at(row.get("ci_high"), v),
        })
    return {
        "group": row["group"],
        **pane_of(row),
        "n_reports": row["n_reports"],
        "about": {k: row.get(k) for k in ("mechanism", "epsilon", "domain_size", "postprocess", "ci_method")},
        "interval": (
            f"simultaneous 95% over all {d:,} values (Bonferroni, z = {selection.simultaneous_z(d):.3g})"
            if chosen is not None else "none: the row has no unbiased estimates"
        ),
        "flag_rule": selection.rule_text(rule, d),
        "flag_p_values": "exact binomial" if isinstance(row.get("p_zero"), list) else "normal",
        "shown": len(entries),
        "of": d,
        "held": len(freq),
        "rows": entries,
    }  # fmt: skip


def _frequency_tables(
    rows: Sequence[Row], top: int, batch: bool, rule: str = "bonferroni"
) -> list[dict[str, Any]]:
    return [frequency_table(r, top, rule) for r in latest_panes(rows, "group").values()]


def _yes(flag: bool | None) -> str:
    return "n/a" if flag is None else ("yes" if flag else "-")


def _frequency_text(t: dict[str, Any]) -> TableText:
    has_labels = any(e["label"] is not None for e in t["rows"])
    label = ["label"] if has_labels else []
    header = ["rank", "value", *label, "estimate", "std", "sim. 95% low", "sim. 95% high", "> 0"]
    cells = [
        [str(e["rank"]), str(e["value"]), *([safe_text(e["label"], MAX_CELL_CHARS)] if label else []),
         fmt(e["estimate"]), fmt(e["std"]), fmt(e["ci_low"]), fmt(e["ci_high"]), _yes(e["above_zero"])]
        for e in t["rows"]
    ]  # fmt: skip
    right = [True, True, *([False] if label else []), True, True, True, True, False]
    what = (
        f"top {t['shown']} of {t['of']} values by estimate; intervals: {t['interval']}, valid for any "
        f"selection; > 0: the true frequency is above 0 ({t['flag_rule']}, {t['flag_p_values']} p-values)"
    )
    return header, cells, right, what


FREQUENCY = ShowSpec(
    fields={"group": (int,), "n_reports": (int,), "frequencies": (list,), "std": (list,)},
    matches=lambda row: "frequencies" in row,
    tables=_frequency_tables,
    text=_frequency_text,
    check=_same_lengths("frequencies"),
    options=frozenset({"rule"}),
)


# ---------------------------------------------------------------------------------------------- sparse


def _sparse_table(row: Row, top: int) -> dict[str, Any]:
    mean, items = row["mean"], row["items"]
    entries = []
    for rank, i in enumerate(top_indices(mean, top), 1):
        entries.append({
            "rank": rank,
            "item": items[i],
            "mean": number(mean[i]),
            "std": number_at(row["std"], i),
            "ci_low": number_at(row.get("ci_low"), i),
            "ci_high": number_at(row.get("ci_high"), i),
        })
    keys = ("mechanism", "epsilon", "domain_size", "sparsity", "privacy", "linf_bound_95", "ci_method")
    return {
        "group": row["group"],
        **pane_of(row),
        "n_reports": row["n_reports"],
        "about": {k: row.get(k) for k in keys},
        "shown": len(entries),
        "of": len(mean),
        "rows": entries,
    }


def _sparse_text(t: dict[str, Any]) -> TableText:
    header = ["rank", "item", "mean", "std", "95% low", "95% high"]
    cells = [[str(e["rank"]), safe_text(e["item"]), fmt(e["mean"]), fmt(e["std"]), fmt(e["ci_low"]),
              fmt(e["ci_high"])] for e in t["rows"]]
    return header, cells, [True] * 6, f"top {t['shown']} of {t['of']} coordinates by mean"


SPARSE = ShowSpec(
    fields={"group": (int,), "n_reports": (int,), "items": (list,), "mean": (list,), "std": (list,)},
    matches=lambda row: "mean" in row and "items" in row,
    tables=lambda rows, top, batch: [_sparse_table(r, top) for r in latest_panes(rows, "group").values()],
    text=_sparse_text,
    check=_same_lengths("mean"),
)


# ---------------------------------------------------------------------------------------------- numeric


def _numeric_table(row: Row) -> dict[str, Any]:
    entries = [{
        "statistic": "mean",
        "value": number(row["mean"]),
        "std": number(row.get("mean_std")),
        "ci_low": number(row.get("mean_ci_low")),
        "ci_high": number(row.get("mean_ci_high")),
    }]
    quantiles = row.get("quantiles")
    for q in quantiles if isinstance(quantiles, list) else []:
        if isinstance(q, dict):
            entries.append({
                "statistic": f"q{safe_text(q.get('q'))}",
                "value": number(q.get("value")),
                "std": None,
                "ci_low": number(q.get("ci_low")),
                "ci_high": number(q.get("ci_high")),
            })
    keys = ("attribute", "attribute_index", "mechanism", "epsilon", "low", "high", "ci_method")
    return {
        "group": None,
        **pane_of(row),
        "n_reports": row["n_reports"],
        "about": {k: row.get(k) for k in keys},
        "shown": len(entries),
        "of": len(entries),
        "rows": entries,
    }


def _numeric_tables(rows: Sequence[Row], top: int, batch: bool) -> list[dict[str, Any]]:
    latest = latest_panes(rows, "attribute").values()  # names are unique within a task
    return [_numeric_table(r) for r in sorted(latest, key=lambda r: r.get("attribute_index") or 0)]


def _numeric_text(t: dict[str, Any]) -> TableText:
    header = ["statistic", "estimate", "std", "95% low", "95% high"]
    cells = [[e["statistic"], fmt(e["value"]), fmt(e["std"]), fmt(e["ci_low"]), fmt(e["ci_high"])]
             for e in t["rows"]]
    return header, cells, [False, True, True, True, True], "mean and quantiles of the clipped values"


NUMERIC = ShowSpec(
    fields={"attribute": (str,), "n_reports": (int,), "mean": (int, float, type(None)),
            "mean_std": (int, float, type(None))},
    matches=lambda row: "attribute" in row and "mean_std" in row,
    tables=_numeric_tables,
    text=_numeric_text,
)  # fmt: skip


# ---------------------------------------------------------------------------------- range and batch queries


def _answers_tables(keys: tuple[str, ...]) -> Any:
    """The one table of a window of query answers: its first ``top`` queries, ``about`` from ``keys``."""

    def tables(rows: Sequence[Row], top: int, batch: bool) -> list[dict[str, Any]]:
        latest = latest_panes(rows, "query_index")
        chosen = list(latest.values())[:top]
        first = chosen[0]
        entries = [{
            "query_index": r["query_index"],
            "query": r["query"],
            "answer": number(r["answer"]),
            "std": number(r.get("std")),
            "ci_low": number(r.get("ci_low")),
            "ci_high": number(r.get("ci_high")),
        } for r in chosen]
        panes = {(r["pane_index"], r["pane_timing"]) for r in chosen}
        return [{
            "group": None,
            **pane_of(first, batch),
            "mixed_panes": len(panes) > 1,
            "n_reports": first.get("n_reports"),
            "about": {k: first.get(k) for k in keys},
            "empty_groups": first.get("empty_groups"),
            "shown": len(entries),
            "of": len(latest),
            "rows": entries,
        }]

    return tables


def _answers_text(t: dict[str, Any]) -> TableText:
    header = ["query", "range", "answer", "std", "95% low", "95% high"]
    cells = [[str(e["query_index"]), query_text(e["query"]), fmt(e["answer"]), fmt(e["std"]),
              fmt(e["ci_low"]), fmt(e["ci_high"])] for e in t["rows"]]
    return header, cells, [True, False, True, True, True, True], f"first {t['shown']} of {t['of']} queries"


def _batch_text(t: dict[str, Any]) -> TableText:
    header, cells, right, what = _answers_text(t)
    what += " (noisy counts of raw records: CENTRAL DP, trusted aggregator)"
    source = str(t["about"].get("noise_source") or "")
    if "seeded" in source:
        what += "; SEEDED NOISE: a simulation, not private"
    return header, cells, right, what


_ANSWER_FIELDS = {"query_index": (int,), "query": (dict,), "answer": (int, float, type(None))}

RANGE = ShowSpec(
    fields=_ANSWER_FIELDS,
    matches=lambda row: "method" in row and "query" in row and "strategy" not in row,
    tables=_answers_tables(("method", "ci_method")),
    text=_answers_text,
)
BATCH_QUERIES = ShowSpec(
    fields=_ANSWER_FIELDS,
    matches=lambda row: "strategy" in row and "query" in row,
    tables=_answers_tables(
        ("strategy", "epsilon", "delta", "noise_sigma", "noise_source", "privacy_model", "ci_method")
    ),
    text=_batch_text,
)

# ------------------------------------------------------------------------------------------- heavy hitters


def _heavy_hitters_tables(rows: Sequence[Row], top: int, batch: bool) -> list[dict[str, Any]]:
    (row,) = latest_panes(rows, "task_id").values()
    hitters = [h for h in row["heavy_hitters"] if isinstance(h, dict)]
    entries = [{
        "rank": rank,
        "value": h.get("value"),
        "estimate": number(h.get("estimate")),
        "std": number(h.get("std")),
        "ci_low": number(h.get("ci_low")),
        "ci_high": number(h.get("ci_high")),
    } for rank, h in enumerate(hitters[:top], 1)]
    keys = ("mechanism", "epsilon", "max_length", "search", "rule", "alpha", "tested")
    return [{
        "group": None,
        **pane_of(row, batch),
        "n_reports": row["n_reports"],
        "about": {k: row.get(k) for k in keys},
        "shown": len(entries),
        "of": len(hitters),
        "rows": entries,
    }]


def _string_text(value: object) -> str:
    """A published string as its row prints it (already escaped: ``\\xNN``, ``\\\\``), else (a value no
    heavy-hitters row could hold) made safe by :func:`safe_text`."""
    from ldp.heavy_hitters.strings import is_escaped_text

    return str(value) if is_escaped_text(value) else safe_text(value)


def _heavy_hitters_text(t: dict[str, Any]) -> TableText:
    header = ["rank", "value", "frequency", "std", "95% low", "95% high"]
    cells = [[str(e["rank"]), _string_text(e["value"]), fmt(e["estimate"]), fmt(e["std"]), fmt(e["ci_low"]),
              fmt(e["ci_high"])] for e in t["rows"]]
    what = f"top {t['shown']} of {t['of']} published strings by estimated frequency"
    return header, cells, [True, False, True, True, True, True], what


HEAVY_HITTERS = ShowSpec(
    fields={"n_reports": (int,), "heavy_hitters": (list,), "levels": (list,)},
    matches=lambda row: "heavy_hitters" in row and "levels" in row,
    tables=_heavy_hitters_tables,
    text=_heavy_hitters_text,
)


#: The built-in kinds' show pieces, by kind name (:func:`pipelines.show.show_specs`).
BUILT_IN: dict[str, ShowSpec] = {
    "frequency": FREQUENCY,
    "range": RANGE,
    "batch_queries": BATCH_QUERIES,
    "sparse": SPARSE,
    "numeric": NUMERIC,
    "heavy_hitters": HEAVY_HITTERS,
}

for _name, _spec in BUILT_IN.items():
    register_show(_name, _spec)
