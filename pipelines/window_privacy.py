"""The privacy guarantees of each window an aggregation job wrote: local always, central when shuffled.

The job (:mod:`pipelines.job`) calls :func:`window_privacy` after a run; the result is the summary's
``privacy_accounting`` entry (so also ``OUT/counts.json``, the store's run summary and the dashboard's
privacy panel). For every window of results it gives:

* ``local_epsilon``: each report is ``epsilon``-LDP (``local.method`` says so);
* ``per_batch``: one entry per shuffled batch whose bucket lies in the window: its bucket, ``n`` (the
  records its body holds, counted from its Avro blocks, never the header's word; ``declared_n`` is the
  header's), whether its provenance tag verified under the job's ``--shuffle_key`` (``verified``;
  ``provenance``: the reason code when not, ``ldp.shuffle.provenance.REASONS``), and its own
  ``central_epsilon`` (:func:`ldp.shuffle.central_epsilon_report` at its ``n``, the task's accounting
  :func:`ldp.anonymity.shuffle_accounting`) or None with ``why_no_central``;
* ``central_epsilon`` at ``central_delta`` (``anonymity.delta``): the **worst** of its batches' figures,
  ``max_b eps(n_b)``, with ``n`` the smallest batch and ``reports_in_batches`` their sum; or None with
  ``why_no_central``;
* ``preconditions``: which of the shuffle model's preconditions hold, each checked from what the job
  has (below).

**Why per batch.** The shuffler permutes each bucket on its own and each batch stays recognisable
downstream (its own file, one event time), so a user hides only among the reports of its own batch: its
central guarantee is its batch's, at that batch's ``n``. A figure at the window's total (the sum over its
batches) would hold only if the window's reports had been shuffled together, which they were not. A
window's published figure is therefore the largest of its batches' figures (every user of the window has
at least that guarantee), and the batches' figures are listed. A user reports at most once per window
(assumed: the reports carry no id; the clients of a shuffled task enforce it,
:class:`ldp.longitudinal.client.ShuffledCollection`), so it is in at most one batch per window, and its
reports in several windows compose one batch figure per window (``python -m pipelines.privacy --windows W
--users N``, ``N`` the smallest batch).

**Provenance.** A batch earns a figure only when its tag verifies
(:func:`ldp.shuffle.provenance.verify_batch`): the job was given the shuffler's key, the tag is the HMAC of
the batch's body, ``n``, task and bucket under it, and the header's ``n`` equals the records in the body.
Any other batch (no key, no tag, a forged field, records added or removed, a plain file given the
shuffler's header keys) keeps the local guarantee only, is counted in ``provenance.unverified_reasons``
(by reason code), and its window gets no central figure.

A window is claimed a central guarantee only when all of these hold (else ``central_epsilon`` is None):

* ``through_shuffler``: every file the job read carries the shuffler's metadata for this task (a plain
  file's reports could be in any window), the window has at least one batch, and no batch's bucket
  straddles the window's bounds;
* ``authenticated``: every batch of the window verified (above);
* ``times_rounded``: the task is shuffled, so the job's validator refused every report whose time is not
  a multiple of ``anonymity.time_precision_s`` (``fine_time`` dead letters, counted), and every batch was
  rounded to a multiple of that precision;
* ``no_client_ids``: the task's budget has no ``client_ids`` and the reports came through the shuffler,
  which re-encodes only the group and the payload;
* ``min_reports``: every batch of the window holds at least ``anonymity.min_reports`` reports;
* ``accepted_within_n``: the window's accepted reports (``n_reports`` of its result rows) are at most the
  records of its batches (None when the rows do not say).

A batch's own figure needs a shuffled task, file input with no plain file or other task's batch, its tag
verified, its times rounded to the task's precision and at least ``min_reports`` records. Input that did
not come through a shuffler (plain report files, Pub/Sub) gets no central claim.

Repeated collection of the numeric memoized counter (``memo-one-bit-mean``, ``ldp.numeric.memo``): the
entry's ``repeated_collection`` is :func:`ldp.numeric.memo.memoized_cost` after as many reports as windows
with results (one report per user per window, assumed: the reports carry no id), with ``spent_at_most``,
its ``values`` figure capped by the budget's ``total_epsilon`` (the clients' ledgers refuse past it), and
each window's row has ``repeated_collection``, the figures after the windows up to it
(:func:`ldp.numeric.memo.memoized_window_costs`). ``local.epsilon`` is then the one-report ``epsilon_1``.
Beam-free.
"""

from __future__ import annotations

import datetime as _dt
import glob
import json
import os
import time
from collections.abc import Sequence
from typing import Any

from ldp.aggregate import OutputSpec

__all__ = [
    "ONE_REPORT_PER_WINDOW",
    "job_privacy",
    "window_privacy",
    "accepted_per_window",
    "iso_to_ms",
    "add_shuffle_key_flag",
    "check_shuffle_key",
    "load_shuffle_key",
]

ONE_REPORT_PER_WINDOW = (
    "assumed, not checked (reports carry no id): each user reports at most once per window, so it is in "
    "at most one batch per window; the clients of a shuffled task enforce it "
    "(ldp.longitudinal.client.ShuffledCollection). A user's guarantee is its batch's; a window's is the "
    "worst of its batches'"
)
#: Seconds the accountant may take for one summary (see :func:`window_privacy`).
SUMMARY_BUDGET_S = 30.0
_LOCAL_METHOD = "each report is epsilon-LDP (the task's local randomizer)"


def iso_to_ms(text: str | None) -> int | None:
    """An ISO-8601 UTC time of a result row (``2026-01-01T00:00:00.000Z``) in milliseconds; None stays."""
    if text is None:
        return None
    t = _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return round(t.timestamp() * 1000)


def accepted_per_window(output: str, spec: OutputSpec, accumulating: bool) -> dict[tuple[Any, Any], int]:
    """The accepted reports per window (``(window_start, window_end)`` as in the rows) from the
    ``n_reports`` of ``spec``'s JSON Lines rows, each report counted once: rows with a ``group`` (one per
    group: frequency, sparse) are summed over the pane's distinct groups; rows without one describe the
    whole window (range answers: one row per query, each with the window's total; numeric: one per
    attribute, each with the reports that carried it), so a pane counts its largest. Then over the panes:
    summed (discarding) or the largest pane (accumulating). Windows whose rows have no ``n_reports`` are
    left out."""
    base = os.path.join(output, spec.subdir) if spec.subdir else output
    panes: dict[tuple[Any, Any], dict[int, dict[Any, int]]] = {}
    for path in glob.glob(os.path.join(base, f"{spec.prefix}-*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                r = json.loads(line)
                if not isinstance(r.get("n_reports"), int):
                    continue
                key = (r.get("window_start"), r.get("window_end"))
                by_group = panes.setdefault(key, {}).setdefault(int(r.get("pane_index", 0)), {})
                group = r.get("group")  # None: a row of the whole window (one of several queries...)
                by_group[group] = max(by_group.get(group, 0), int(r["n_reports"]))
    out: dict[tuple[Any, Any], int] = {}
    for key, by_pane in panes.items():
        per_pane = [sum(groups.values()) for groups in by_pane.values()]
        out[key] = max(per_pane) if accumulating else sum(per_pane)
    return out


def _local(task: Any) -> dict[str, Any]:
    if _memo_counter(task):
        g = task.make_mechanism().guarantees()
        return {"epsilon": float(g["epsilon_1"]), "epsilon_inf": float(g["epsilon_inf"]),
                "method": "memoized 1BitMean: one report is epsilon_1-LDP; any number of reports that round "
                f"to one grid point epsilon_inf-LDP; at most {g['max_memo_keys']} grid points per user"}
    from pipelines.privacy import _local as local_of

    loc = local_of(task, 1)
    return {"epsilon": loc["epsilon"], "method": loc["method"] if "epsilon_inf" in loc else _LOCAL_METHOD}


def _memo_counter(task: Any) -> bool:
    """A numeric task of the memoized counter (repeated collection)."""
    return getattr(task, "kind", None) == "numeric" and bool(getattr(task, "is_memoized", False))


def _repeated(task: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The memo analysis of the windows ``rows`` (in time order); adds each row's figures."""
    from ldp.numeric.memo import memoized_cost, memoized_window_costs

    mech = task.make_mechanism()
    budget = getattr(task, "budget", None)
    delta = budget.delta if budget is not None else None
    opts = {} if delta is None else {"delta": delta}
    for row, cost in zip(rows, memoized_window_costs(mech, len(rows), **opts)):
        row["repeated_collection"] = cost
    out: dict[str, Any] = memoized_cost(mech, len(rows), **opts)
    cap = None if budget is None else budget.total_epsilon
    out["total_epsilon"] = cap
    out["spent_at_most"] = out["values"]["basic"] if cap is None else min(out["values"]["basic"], cap)
    out["assumes"] = "one report per user per window (the reports carry no id)"
    return out


def window_privacy(
    task: Any,
    windows: Sequence[tuple[str | None, str | None]],
    batches: Sequence[dict[str, Any]],
    plain: Sequence[str],
    *,
    accepted: dict[tuple[Any, Any], int] | None = None,
    fine_time: int = 0,
    source: str = "files",
    budget_s: float = SUMMARY_BUDGET_S,
    key_given: bool = False,
) -> dict[str, Any]:
    """The ``privacy_accounting`` entry of a job's summary (see the module docstring).

    Args:
        task: the job's parsed task.
        windows: the ``(window_start, window_end)`` of every window with results (ISO strings as in the
            rows; None, None: the global window).
        batches, plain: :func:`transforms.io.shuffled_batches` of the job's ``--input`` (both empty for
            Pub/Sub). A batch counts as authenticated only when its entry says ``verified`` True.
        accepted: :func:`accepted_per_window` (None: unknown).
        fine_time: the job's ``rejected_fine_time`` count.
        source: ``"files"`` or ``"pubsub"``.
        budget_s: seconds the accountant may take in all (one figure per distinct ``n``: 10-25 ms for the
            general bound, up to 5 s for exact binary RR at n = 1e5). Windows are computed newest first,
            each from its smallest batch up; a window whose smallest batch was not reached gets no figure
            (``why_no_central`` says so), and a larger batch reached after the budget ran out is given its
            window's figure, an upper bound (a batch's figure never grows with ``n``).
        key_given: the job was given a ``--shuffle_key`` (reported in ``provenance``).
    """
    from ldp.anonymity import shuffle_accounting

    settings = getattr(task, "anonymity", None)
    shuffled = bool(getattr(task, "shuffled", False))
    local = _local(task)
    ids_in_budget = bool(getattr(getattr(task, "budget", None), "client_ids", False))
    own = [b for b in batches if b.get("task_id") == task.task_id]
    foreign = len(batches) - len(own)
    out = _summary_head(task, batches, plain, own, foreign, local, settings, source, fine_time, key_given)
    accounting: str | None = None
    k: int | None = None
    if shuffled:
        accounting, k = shuffle_accounting(task)
        out["accounting"] = accounting
    precision = None if settings is None else settings.time_precision_s
    all_shuffled = source == "files" and not plain and not foreign
    for ws, we in windows:
        out["windows"].append(_window_row(
            ws, we, own, accepted, shuffled=shuffled, all_shuffled=all_shuffled, ids_in_budget=ids_in_budget,
            precision=precision, settings=settings, local=local, source=source, plain=plain, foreign=foreign,
        ))  # fmt: skip
    cache: dict[Any, tuple[float, str]] = {}
    deadline = time.monotonic() + budget_s
    delta = None if settings is None else settings.delta
    for row in sorted(out["windows"], key=lambda r: str(r["window_start"] or ""), reverse=True):
        _figure_batches(row, task, settings, accounting, k, cache, deadline, budget_s)
        _claim_window(row, delta)
    _finish(task, out)
    return out


def _summary_head(
    task: Any,
    batches: Sequence[dict[str, Any]],
    plain: Sequence[str],
    own: Sequence[dict[str, Any]],
    foreign: int,
    local: dict[str, Any],
    settings: Any,
    source: str,
    fine_time: int,
    key_given: bool,
) -> dict[str, Any]:
    """The entry's job-wide part: input, provenance and settings; ``windows`` still empty."""
    unverified = [b for b in batches if b.get("verified") is not True]
    reasons: dict[str, int] = {}
    for b in unverified:
        code = str(b.get("provenance") or "unverified")
        reasons[code] = reasons.get(code, 0) + 1
    return {
        "shuffled_task": bool(getattr(task, "shuffled", False)),
        "local": local,
        "input": {
            "source": source,
            "shuffled_batches": len(own),
            "other_tasks_batches": foreign,
            "plain_files": len(plain),
        },
        "provenance": {
            "key_given": bool(key_given),
            "batches_verified": len(batches) - len(unverified),
            "batches_unverified": len(unverified),
            "reports_in_unverified_batches": sum(int(b.get("n", 0)) for b in unverified),
            "unverified_reasons": dict(sorted(reasons.items())),
        },
        "fine_time_rejected": int(fine_time),
        "one_report_per_user_per_window": ONE_REPORT_PER_WINDOW,
        "central_delta": None if settings is None else settings.delta,
        "accounting": None,
        "windows": [],
    }


def _window_row(
    ws: str | None,
    we: str | None,
    own: Sequence[dict[str, Any]],
    accepted: dict[tuple[Any, Any], int] | None,
    *,
    shuffled: bool,
    all_shuffled: bool,
    ids_in_budget: bool,
    precision: int | None,
    settings: Any,
    local: dict[str, Any],
    source: str,
    plain: Sequence[str],
    foreign: int,
) -> dict[str, Any]:
    """One window's row: its batches (smallest first), preconditions and why it gets no claim; no figures."""
    lo, hi = iso_to_ms(ws), iso_to_ms(we)
    inside, straddle = [], 0
    for b in own:
        s, e = int(b["bucket_start_ms"]), int(b["bucket_end_ms"])
        if (lo is None or s >= lo) and (hi is None or e <= hi):
            inside.append(b)
        elif (lo is None or e > lo) and (hi is None or s < hi):
            straddle += 1
    per_batch = [_batch_row(b, shuffled, all_shuffled, ids_in_budget, precision, settings)
                 for b in inside]  # fmt: skip
    per_batch.sort(key=lambda r: (r["n"], r["bucket_start_ms"]))  # smallest first: the window's figure
    total = sum(r["n"] for r in per_batch)
    acc = None if accepted is None else accepted.get((ws, we))
    through = all_shuffled and bool(inside) and straddle == 0
    pre = {
        "through_shuffler": through,
        "authenticated": bool(inside) and all(r["verified"] for r in per_batch),
        "times_rounded": shuffled and all(r["rounded"] for r in per_batch),
        "no_client_ids": through and not ids_in_budget,
        "min_reports": bool(inside) and all(r["min_reports"] for r in per_batch),
        "accepted_within_n": None if acc is None else acc <= total,
    }
    return {
        "window_start": ws,
        "window_end": we,
        "n": per_batch[0]["n"] if per_batch else None,
        "reports_in_batches": total if per_batch else None,
        "batches": len(inside),
        "batches_unverified": sum(not r["verified"] for r in per_batch),
        "accepted": acc,
        "local_epsilon": local["epsilon"],
        "central_epsilon": None,
        "central_delta": None,
        "method": None,
        "preconditions": pre,
        "why_no_central": _why_not(shuffled, source, plain, foreign, per_batch, straddle, pre),
        "per_batch": per_batch,
    }


def _figure_batches(
    row: dict[str, Any],
    task: Any,
    settings: Any,
    accounting: str | None,
    k: int | None,
    cache: dict[Any, tuple[float, str]],
    deadline: float,
    budget_s: float,
) -> None:
    """Gives each eligible batch of ``row`` its central figure (``cache``: figures per ``n``, shared by the
    windows); past ``deadline`` a batch gets the window's smallest batch's figure, or none. A task accounted
    per group (``ldp.shuffle.levels``: heavy-hitters levels) is figured from each batch's signed reports per
    group (``group_n``) and cached by them; a batch without them gets no figure."""
    from ldp.shuffle import ShuffleAccountingError, central_epsilon_report
    from ldp.shuffle.randomizers import LevelledRandomizer

    levelled = isinstance(accounting, LevelledRandomizer)

    delta = None if settings is None else settings.delta
    figures: list[tuple[float, str]] = []
    for b in row["per_batch"]:
        if b["why_no_central"] is not None or settings is None or accounting is None:
            continue
        n = b["n"]
        groups = None if b.get("group_n") is None else {int(g): int(c) for g, c in b["group_n"]}
        if levelled and groups is None:
            b["why_no_central"] = ("the batch does not list its reports per level (ldp.shuffle.group_n): "
                                   "the per-level bound needs them")
            continue
        slot = (n, tuple(sorted(groups.items()))) if levelled and groups is not None else n
        if slot not in cache and time.monotonic() > deadline:
            if figures and not levelled:  # a larger batch than one already figured: that figure bounds it
                eps0, how0 = figures[0]
                b.update(central_epsilon=eps0, central_delta=delta,
                         method=f"{how0} at the window's smallest batch n={row['n']}: an upper bound "
                         "(the summary's accountant time ran out)")  # fmt: skip
            else:
                b["why_no_central"] = (
                    f"not computed: the summary's {budget_s:g} s for the accountant ran out (newest "
                    f"windows first); python -m pipelines.privacy --task TASK --users {n} gives it"
                )
            continue
        try:
            if slot not in cache:
                rep = central_epsilon_report(float(task.epsilon), n, settings.delta, accounting, k,
                                             group_counts=groups)
                cache[slot] = (float(rep.epsilon), str(rep.method))
            eps, how = cache[slot]
            figures.append((eps, how))
            b.update(central_epsilon=eps, central_delta=delta, method=how)
        except (ShuffleAccountingError, ValueError) as exc:
            b["why_no_central"] = f"the accountant gives no figure: {exc}"


def _claim_window(row: dict[str, Any], delta: float | None) -> None:
    """Gives ``row`` the worst of its batches' figures, or says which batch has none."""
    if row["why_no_central"] is not None:
        return
    missing = [b for b in row["per_batch"] if b["central_epsilon"] is None]
    if missing:
        row["why_no_central"] = f"batch {missing[0]['bucket_start']}: {missing[0]['why_no_central']}"
        return
    worst = max(row["per_batch"], key=lambda b: b["central_epsilon"])
    row.update(
        central_epsilon=worst["central_epsilon"],
        central_delta=delta,
        method=f"the worst of the window's {len(row['per_batch'])} batch(es), at n={worst['n']}: "
        f"{worst['method']}",
    )


def _finish(task: Any, out: dict[str, Any]) -> None:
    """Drops the batches' working flags, adds the memo analysis and counts the windows with a claim."""
    for row in out["windows"]:
        for b in row["per_batch"]:
            del b["rounded"], b["min_reports"]
    if _memo_counter(task):
        ordered = sorted(out["windows"], key=lambda r: (iso_to_ms(r["window_start"]) or 0))
        out["repeated_collection"] = _repeated(task, ordered)
    claimed = [w for w in out["windows"] if w["central_epsilon"] is not None]
    out["windows_with_central"] = len(claimed)
    out["windows_without_central"] = len(out["windows"]) - len(claimed)


def _batch_row(
    b: dict[str, Any],
    shuffled: bool,
    all_shuffled: bool,
    ids_in_budget: bool,
    precision: int | None,
    settings: Any,
) -> dict[str, Any]:
    """One batch of a window: its facts, and why it gets no figure of its own (None: it gets one)."""
    n = int(b["n"])
    rounded = precision is not None and int(b["time_precision_s"]) % precision == 0
    enough = settings is not None and n >= settings.min_reports
    verified = b.get("verified") is True
    why = None
    if not shuffled or not all_shuffled:
        why = "the input is not shuffled batches of this task alone (see the window)"
    elif not verified:
        code = b.get("provenance") or "unverified"
        why = f"provenance not verified ({code}): local guarantee only"
    elif not rounded:
        why = "rounded to a precision finer than the task's"
    elif ids_in_budget:
        why = "the task's budget makes reports carry client ids"
    elif not enough:
        why = "fewer than anonymity.min_reports reports"
    return {
        "bucket_start": b.get("bucket_start"),
        "bucket_end": b.get("bucket_end"),
        "bucket_start_ms": int(b["bucket_start_ms"]),
        "bucket_end_ms": int(b["bucket_end_ms"]),
        "file": b.get("file"),
        "n": n,
        "declared_n": b.get("declared_n", b.get("n")),
        **({} if b.get("group_n") is None else {"group_n": b["group_n"]}),
        "verified": verified,
        "provenance": None if verified else str(b.get("provenance") or "unverified"),
        "central_epsilon": None,
        "central_delta": None,
        "method": None,
        "why_no_central": why,
        "rounded": rounded,
        "min_reports": enough,
    }


def _why_not(
    shuffled: bool,
    source: str,
    plain: Sequence[str],
    foreign: int,
    per_batch: Sequence[dict[str, Any]],
    straddle: int,
    pre: dict[str, Any],
) -> str | None:
    """Why a window gets no central claim (the first reason), None when it may get one."""
    if not shuffled:
        return "the task is not shuffled (no anonymity section with shuffled true)"
    if source != "files":
        return "reports read from Pub/Sub: the input carries no shuffler metadata"
    if plain:
        return f"{len(plain)} input file(s) without the shuffler's metadata: their reports were not shuffled"
    if foreign:
        return f"{foreign} input batch(es) of another task"
    if straddle:
        return f"{straddle} batch(es) straddle the window's bounds: its n is unknown"
    if not per_batch:
        return "no shuffled batch lies in this window"
    if not pre["authenticated"]:
        bad: dict[str, int] = {}
        for r in per_batch:
            if not r["verified"]:
                bad[r["provenance"]] = bad.get(r["provenance"], 0) + 1
        listed = ", ".join(f"{code} {n}" for code, n in sorted(bad.items()))
        return (
            f"{sum(bad.values())} batch(es) not authenticated ({listed}): their users keep the local "
            "guarantee only"
        )
    if not pre["times_rounded"]:
        return "a batch was rounded to a precision finer than the task's"
    if not pre["no_client_ids"]:
        return "the task's budget makes reports carry client ids"
    if not pre["min_reports"]:
        return "a batch holds fewer than anonymity.min_reports reports"
    if pre["accepted_within_n"] is False:
        return "the window accepted more reports than its batches hold"
    return None


def job_privacy(
    task: Any,
    input_pattern: str | None,
    written: Sequence[tuple[str | None, str | None, int]],
    counts: dict[str, Any],
    output: str,
    spec: OutputSpec,
    accumulating: bool,
    shuffle_key: str | None = None,
) -> dict[str, Any]:
    """:func:`window_privacy` of a finished job: the windows of ``spec`` it ``written`` (``(start, end,
    pane)``), its ``--input`` files verified under ``shuffle_key`` (the ``--shuffle_key`` file; None: no
    key, no batch verifies; Pub/Sub input: None pattern), its ``counts`` and result rows."""
    from transforms.io import shuffled_batches

    key = load_shuffle_key(shuffle_key)
    if input_pattern:
        batches, plain = shuffled_batches(input_pattern, key, task.task_id)
    else:
        batches, plain = [], []
    windows = sorted({(s, e) for s, e, _ in written}, key=lambda w: (w[0] or "", w[1] or ""))
    return window_privacy(
        task,
        windows,
        batches,
        plain,
        accepted=accepted_per_window(output, spec, accumulating),
        fine_time=int(counts.get("rejected_fine_time", 0)),
        source="files" if input_pattern else "pubsub",
        key_given=key is not None,
    )


SHUFFLE_KEY_HELP = (
    "the shuffler's key file (ldp.shuffle.provenance; mode 0600): shuffled batches whose provenance tag "
    "verifies under it earn a central (shuffled) privacy figure; without it every batch keeps the local "
    "guarantee only"
)


def add_shuffle_key_flag(parser: Any) -> None:
    """``--shuffle_key FILE`` on an aggregation job's parser."""
    parser.add_argument("--shuffle_key", metavar="FILE", help=SHUFFLE_KEY_HELP)


def load_shuffle_key(path: str | None) -> bytes | None:
    """The key of ``--shuffle_key`` (None without one). Raises ``ValueError`` (one line) for a key file
    that cannot be used: missing, not a regular file, readable by group or others, too short."""
    if not path:
        return None
    from ldp.shuffle.provenance import ProvenanceError, load_key

    try:
        return load_key(path)
    except ProvenanceError as exc:
        raise ValueError(f"--shuffle_key: {exc}") from None


def check_shuffle_key(ns: Any) -> None:
    """Refuses (one line, exit 2) a ``--shuffle_key`` that cannot be used, before the job runs."""
    try:
        load_shuffle_key(getattr(ns, "shuffle_key", None))
    except ValueError as exc:
        from pipelines.cli import fail

        fail(str(exc))
