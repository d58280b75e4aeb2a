"""The privacy guarantees of a task: local, and central when its reports are shuffled (``ldp-beam privacy``).

    python -m pipelines.privacy --task TASK.json --users 1000000 [--windows 12] [--delta 1e-9] [--json OUT]

Prints the local guarantee of one report (``epsilon_1`` / ``epsilon_inf`` for the memoized mechanisms) and
over ``--windows`` windows; for a task with an ``anonymity`` section (``"shuffled": true``) the central
guarantee of one shuffled batch of ``--users`` reports and its composition over the windows, tight (PLD)
beside basic, each with the method that gives it (``ldp.shuffle.accountant``, ``docs/shuffle_accounting.md``).
A user hides only among the reports of its own batch (one bucket of ``anonymity.time_precision_s``), and a
window's guarantee is the worst of its batches', so ``--users`` is the number of reports of one batch
(default: the task's expected batch size, ``expected_reports`` spread over the window's buckets,
``ldp.task.Task.expected_batch_reports``); a user is in at most one batch per window, so the composition
over ``--windows`` windows composes one batch's figure per window. The guarantee is only as good as that
number: give the smallest ``n`` of the shuffler's manifest (``OUT/batches.jsonl``). A task without the
section prints "no central guarantee (reports are not shuffled)". ``--json OUT`` also writes the figures
(``local_epsilon``, ``central_epsilon`` per batch, ``central_delta``, ``windows``,
``central_epsilon_composed``, ``method``, ...). A heavy-hitters task is accounted per level
(:mod:`ldp.shuffle.levels`): ``levels`` lists each level's reports (the batch split by the level shares)
and figure, and the batch's figure is the largest.

Runs no pipeline and imports no Beam. Errors are one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from pipelines.cli import fail, job_parser, parse_job_args, write_json_or_fail

__all__ = ["parser", "run", "privacy_report", "format_report"]

NOT_SHUFFLED = "no central guarantee (reports are not shuffled)"

#: the accountant's method names (``ldp.shuffle.central_epsilon_report``), described
_PER_WINDOW_METHOD = {
    "general": "min(FMT numerical clone-pair bound, FMT closed form, eps0): any eps0-LDP randomizer "
    "(Feldman, McMillan, Talwar, FOCS 2021)",
    "grr_blanket": "privacy-blanket bound for GRR on [k] (Balle et al.; Koskela et al.), below the general "
    "bound",
    "binary_rr_exact": "exact central epsilon of shuffled binary randomized response (worst split of the "
    "other users' bits)",
    "fmt_closed_form": "FMT closed form",
    "variation_ratio": "three-count variation-ratio pair for the randomizer's (p, beta, q) (the "
    "decomposition of Wang et al., VLDB 2024, with the remainder counted); with the general beta it is "
    "Feldman, McMillan and Talwar's stronger-clone pair, valid for any eps0-LDP randomizer",
}


def _describe(method: str) -> str:
    """The accountant's method name (with any note it carries) and what it is."""
    base = method.split(" ", 1)[0]
    return f"{method}: {_PER_WINDOW_METHOD[base]}" if base in _PER_WINDOW_METHOD else method
_TIGHT_METHOD = (
    "dp-accounting PLD composition of each window's dominating pair (pessimistic connect-the-dots), read "
    "at the total delta"
)
_BASIC_METHOD = "basic composition: sum of each window's epsilon at delta / windows"


def parser() -> argparse.ArgumentParser:
    p = job_parser(
        "The privacy guarantees of a task: the local one and, when its reports are shuffled (an anonymity "
        "section), the central one per window and over --windows windows.",
        beam_options=False,
    )
    p.add_argument("--task", required=True, help="collection task JSON file")
    p.add_argument(
        "--users",
        type=int,
        help="reports shuffled together in one batch (one bucket; one per reporting user); default: the "
        "task's anonymity.expected_reports spread over the window's buckets",
    )
    p.add_argument(
        "--windows", type=int, default=1, help="windows a user reports in (one report, one batch each)"
    )
    p.add_argument(
        "--delta", type=float, help="total delta of the central guarantee (default: anonymity.delta)"
    )
    p.add_argument("--json", metavar="OUT", help="also write the figures to this JSON file")
    return p


def _local(task: Any, windows: int) -> dict[str, Any]:
    """The local guarantee of one report and over ``windows`` windows (one report per window)."""
    from ldp.kinds.frequency.task import FrequencyTask

    eps = float(task.epsilon)
    if isinstance(task, FrequencyTask) and task.is_memoized:
        g = task.make_oracle().guarantees()  # type: ignore[attr-defined]
        keys = int(g["max_memo_keys"])
        return {
            "epsilon": float(g["epsilon_1"]),
            "epsilon_1": float(g["epsilon_1"]),
            "epsilon_inf": float(g["epsilon_inf"]),
            "composed_constant_value": float(g["epsilon_inf"]),
            "composed_changing_value": min(windows, keys) * float(g["epsilon_inf"]),
            "method": "memoization: one report is epsilon_1-LDP; any number of reports of one value "
            "epsilon_inf-LDP (post-processing of the permanent response); a value changing every window "
            f"min(windows, {keys}) * epsilon_inf",
        }
    return {
        "epsilon": eps,
        "composed": windows * eps,
        "method": "each report is epsilon-LDP; basic composition over windows (fresh reports)",
    }


def _report_header(task: Any, users: int | None, windows: int, local: dict[str, Any]) -> dict[str, Any]:
    """The figures every report carries; the central ones are None until a shuffled task fills them."""
    return {
        "task_id": task.task_id,
        "kind": task.kind,
        "mechanism": task.mechanism,
        "local_epsilon": local["epsilon"],
        "local": local,
        "windows": windows,
        "shuffled": bool(task.shuffled),
        "users": users,
        "central_epsilon": None,
        "central_delta": None,
        "central_epsilon_composed": None,
        "central_epsilon_composed_basic": None,
        "method": {"local": local["method"], "central": NOT_SHUFFLED},
    }


def _central_dp_figures(task: Any, kind: Any, windows: int) -> dict[str, Any]:
    """A trusted-aggregator kind's own figures (no local guarantee: it sees raw records)."""
    if kind.central_privacy is None:
        raise ValueError(
            f"a {task.kind} task is central DP (raw records) and its kind declares no central_privacy "
            "figures (ldp.kinds.Kind.central_privacy)"
        )
    return {"local_epsilon": None, "local": None, **kind.central_privacy(task, windows)}


def _batch_reports_and_delta(task: Any, users: int | None, delta: float | None) -> tuple[int, float]:
    """The reports of one shuffled batch and the total delta, checked against the task's anonymity section."""
    settings = task.anonymity
    n = users if users is not None else task.expected_batch_reports
    if n is None:
        raise ValueError("--users is required: the task gives no anonymity.expected_reports")
    if n < 1:
        raise ValueError(f"--users must be >= 1, got {n}")
    if n < settings.min_reports:
        raise ValueError(
            f"--users {n} is below the task's anonymity.min_reports ({settings.min_reports}): the shuffler "
            "withholds such a batch, nothing is released"
        )
    d = settings.delta if delta is None else float(delta)
    if not (math.isfinite(d) and 0 < d < 1):
        raise ValueError(f"--delta must be in (0, 1), got {d}")
    return n, d


def _shuffled_figures(task: Any, n: int, d: float, windows: int) -> tuple[dict[str, Any], str]:
    """One batch's central epsilon and its composition over ``windows``, with the accountant's method."""
    from ldp.anonymity import shuffle_accounting
    from ldp.shuffle import ShuffleAccountingError, central_epsilon_report, compose_windows

    accounting, k = shuffle_accounting(task)
    eps0 = float(task.epsilon)
    try:
        one, how = central_epsilon_report(eps0, n, d, accounting, k)
        comp = compose_windows(eps0, n, d, windows=windows, mechanism=accounting, domain_size=k)
    except ShuffleAccountingError as exc:
        raise ValueError(str(exc)) from None
    figures: dict[str, Any] = {
        "users": n,
        "accounting": accounting,
        "domain_size": k,
        "central_epsilon": float(one),
        "central_delta": d,
        "central_epsilon_composed": float(comp["tight"]),
        "central_epsilon_composed_basic": float(comp["basic"]),
        "per_window_epsilon_at_delta_over_windows": float(comp["per_window"][0]),
        "anonymity": task.anonymity.to_json(),
    }
    from ldp.shuffle.randomizers import LevelledRandomizer

    if isinstance(accounting, LevelledRandomizer):
        from ldp.shuffle.levels import central_epsilon_levels

        counts = accounting.planned_counts(n, eps0)
        figures["levels"] = central_epsilon_levels(eps0, counts, d, accounting)
        figures["composed_method"] = comp.get("method")
    return figures, how


def _target_check(task: Any, central_epsilon: float, d: float) -> dict[str, Any] | None:
    """The task's central target and whether this batch size meets it (None when the delta differs)."""
    target = None if task.central_target is None else task.central_target.central_epsilon
    if target is None:
        return None
    settings = task.anonymity
    met = central_epsilon <= target + 1e-6 + 1e-5 * target
    return {
        "central_epsilon": target,
        "delta": settings.delta,
        "expected_reports": task.expected_reports,
        "expected_batch_reports": task.expected_batch_reports,
        "met_at_users": bool(met) if d == settings.delta else None,
    }


def privacy_report(
    task: Any, users: int | None, windows: int = 1, delta: float | None = None
) -> dict[str, Any]:
    """The figures :func:`run` prints, as a dict. Raises ``ValueError`` (the message is one line) when the
    inputs admit no figure: too few reports, a bad delta, a window count below 1."""
    from ldp.kinds import kind_of

    if windows < 1:
        raise ValueError(f"--windows must be >= 1, got {windows}")
    local = _local(task, windows)
    out = _report_header(task, users, windows, local)
    kind = kind_of(task)
    if not kind.ldp_reports:  # central DP at a trusted aggregator: not LDP, nothing shuffled
        out.update(_central_dp_figures(task, kind, windows))
        return out
    if not task.shuffled:
        return out
    n, d = _batch_reports_and_delta(task, users, delta)
    figures, how = _shuffled_figures(task, n, d, windows)
    out.update(figures)
    out["method"] = {
        "local": local["method"],
        "central": _describe(how),
        "composed": _TIGHT_METHOD,
        "composed_basic": _BASIC_METHOD,
    }
    levelled = figures.pop("composed_method", None)
    if levelled:  # a levelled randomizer: which level's pair is composed, or basic composition
        same = "basic composition" not in levelled
        out["method"]["composed"] = f"{levelled}; {_TIGHT_METHOD}" if same else levelled
    target = _target_check(task, figures["central_epsilon"], d)
    if target is not None:
        out["target"] = target
    return out


def _g(x: float) -> str:
    return f"{x:.5g}"


def format_report(r: dict[str, Any]) -> str:
    """The report as the lines :func:`run` prints."""
    w = r["windows"]
    lines = [f"task {r['task_id']} ({r['kind']}, {r['mechanism']})"]
    loc = r["local"]
    if loc is None:
        lines.append("local: none (central DP: the aggregator sees raw records)")
    elif "epsilon_inf" in loc:
        lines.append(
            f"local: epsilon_1 = {_g(loc['epsilon_1'])} (one report), epsilon_inf = {_g(loc['epsilon_inf'])} "
            f"(any number of reports of one value); over {w} window(s): {_g(loc['composed_constant_value'])} "
            f"(constant value) to {_g(loc['composed_changing_value'])} (a value changing every window)"
        )
    else:
        lines.append(
            f"local: epsilon = {_g(loc['epsilon'])} per report; over {w} window(s): {_g(loc['composed'])} "
            "(basic composition)"
        )
    lines.append(f"  method: {r['method']['local']}")
    if r["central_epsilon"] is None:
        lines.append(f"central: {NOT_SHUFFLED}")
        return "\n".join(lines)
    if not r["shuffled"]:
        lines.append(
            f"central: epsilon = {_g(r['central_epsilon'])}, delta = {r['central_delta']:g} per window; "
            f"over {w} window(s): {_g(r['central_epsilon_composed'])} ({r['method']['composed']})"
        )
        lines.append(f"  method: {r['method']['central']}")
        return "\n".join(lines)
    a = r["anonymity"]
    lines.append(
        f"central (shuffled, {r['users']:,} reports per batch, time precision {a['time_precision_s']} s, "
        f"min_reports {a['min_reports']}, accounting {r['accounting']}):"
    )
    lines.append(
        f"  one batch (and a window, the worst of its batches): epsilon = {_g(r['central_epsilon'])} at "
        f"delta = {r['central_delta']:g}"
    )
    lines.append(f"    method: {r['method']['central']}")
    for lv in r.get("levels") or ():
        lines.append(f"    {lv['label']}: {lv['n']:,} reports, epsilon = {_g(lv['central_epsilon'])}")
    lines.append(
        f"  {w} window(s): epsilon = {_g(r['central_epsilon_composed'])} (tight) / "
        f"{_g(r['central_epsilon_composed_basic'])} (basic) at total delta = {r['central_delta']:g}"
    )
    lines.append(f"    tight: {r['method']['composed']}")
    lines.append(f"    basic: {r['method']['composed_basic']}")
    t = r.get("target")
    if t is not None:
        met = t["met_at_users"]
        verdict = "" if met is None else (" (met)" if met else " (NOT met at this n)")
        lines.append(
            f"  target: central epsilon {_g(t['central_epsilon'])} at delta {t['delta']:g} with "
            f"{t['expected_reports']:,} expected reports per window, "
            f"{t['expected_batch_reports']:,} per batch{verdict}"
        )
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command: prints the report (and writes ``--json``); returns the report."""
    ns, _ = parse_job_args(parser(), argv, beam=False)
    from ldp.task import TaskError, load_task

    try:
        task = load_task(ns.task)
    except TaskError as exc:
        fail(exc.one_line())
    try:
        report = privacy_report(task, ns.users, ns.windows, ns.delta)
    except ValueError as exc:
        fail(str(exc))
    print(format_report(report))
    if ns.json:
        write_json_or_fail("--json", ns.json, report)
    return report


if __name__ == "__main__":
    run()
