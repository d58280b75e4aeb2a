"""What a collection will cost and deliver, before it starts (``ldp-beam plan``; ``docs/planning.md``).

    ldp-beam plan TASK.json --users 1000000 [--windows 24] [--central_epsilon 1 --delta 1e-9]
        [--flag_rule bonferroni|bh] [--json OUT]

For the task and ``--users`` reports per window it prints (and ``--json`` writes) the mechanism ``auto``
resolves to and eps0 (with ``--central_epsilon``: the task planned under that central target, ``"epsilon":
"auto"``, the reports shuffled, ``--delta`` its delta), the predicted std and 95% half-width of each
published statistic, the smallest frequency flagged above 0 under ``--flag_rule`` (frequency tasks), the
central epsilon per shuffled batch and composed over ``--windows``, and a window's memory and time
(:mod:`ldp.plan`). Runs no pipeline and imports no Beam. Errors are one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.cli import fail, job_parser, parse_job_args, write_json_or_fail

__all__ = ["parser", "run", "make_plan", "format_plan", "observed_from_output"]

#: ``--flag_rule`` choices (``ldp.selection.RULES``, spelt out so ``--help`` imports no numpy).
FLAG_RULES = ("bonferroni", "bh")


def parser() -> argparse.ArgumentParser:
    p = job_parser(
        "Plan a collection before it starts: the mechanism and eps0 the task resolves to, the predicted "
        "error of each statistic, the smallest flagged frequency, the central epsilon when shuffled, and "
        "a window's memory and time.",
        beam_options=False,
    )
    p.add_argument("task", metavar="TASK", help="collection task JSON file")
    p.add_argument("--users", type=int, required=True, help="reports expected per window (one per user)")
    p.add_argument("--windows", type=int, default=1, help="windows a user reports in (for the composition)")
    p.add_argument("--central_epsilon", type=float,
                   help="plan under this central target: the reports shuffled, epsilon 'auto'")
    p.add_argument("--delta", type=float,
                   help="delta of the central target (default: the task's anonymity.delta, else 1e-9)")
    p.add_argument("--flag_rule", choices=FLAG_RULES, default="bonferroni",
                   help="multiple-comparison rule of the flags (ldp.selection)")
    p.add_argument("--json", metavar="OUT", help="also write the plan to this JSON file")
    return p


def _check_flags(ns: argparse.Namespace) -> None:
    if ns.users < 2:
        fail(f"--users must be >= 2, got {ns.users}")
    if ns.windows < 1:
        fail(f"--windows must be >= 1, got {ns.windows}")
    target = ns.central_epsilon
    if target is not None and not (math.isfinite(target) and 0 < target <= 50):
        fail(f"--central_epsilon must be a number in (0, 50], got {ns.central_epsilon}")
    if ns.delta is not None and not (math.isfinite(ns.delta) and 0 < ns.delta <= 1e-3):
        fail(f"--delta must be a number in (0, 1e-3], got {ns.delta}")


def make_plan(path: str, users: int, windows: int = 1, central_epsilon: float | None = None,
              delta: float | None = None, rule: str = "bonferroni") -> dict[str, Any]:
    """The plan of the task file ``path`` (:func:`ldp.plan.plan_task`; ``central_epsilon`` / ``delta`` as
    :func:`ldp.plan.with_target`). Raises ``ValueError`` with a one-line message."""
    from ldp.plan import plan_task, with_target
    from ldp.task import TaskError, parse_task

    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read task file: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: a task must be a JSON object")
    try:
        task = parse_task(with_target(obj, users, central_epsilon, delta), source=str(p), base_dir=p.parent)
    except TaskError as exc:
        raise ValueError(exc.one_line()) from None
    return plan_task(task, users, windows, rule=rule)


def _pane_rows(jsonl: str) -> list[dict[str, Any]]:
    """The rows of one pane's JSON Lines file; from its Avro twin when a row there holds only its
    largest values (``--jsonl_max_values``), since the spread needs every value."""
    with open(jsonl, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    avro = jsonl[: -len(".jsonl")] + ".avro"
    if any("values" in r for r in rows) and os.path.exists(avro):
        import fastavro

        with open(avro, "rb") as fh:
            rows = list(fastavro.reader(fh))
    return rows


def observed_from_output(task: Any, output: str, spec: Any) -> dict[str, Any] | None:
    """:func:`ldp.plan.expected_vs_observed` over the rows of ``spec`` a job wrote under ``output`` (the
    job's summary carries it as ``expected_vs_observed``); None for a kind without the check or without
    rows. Never raises for unreadable files (the figures are informative)."""
    from ldp.plan import expected_vs_observed

    if expected_vs_observed(task, []) is None:  # the kind has no such check: read nothing
        return None
    base = os.path.join(output, spec.subdir) if spec.subdir else output
    rows: list[dict[str, Any]] = []
    try:
        for path in sorted(glob.glob(os.path.join(base, f"{spec.prefix}-*.jsonl"))):
            rows.extend(_pane_rows(path))
    except (OSError, ValueError) as exc:
        return {"error": f"rows unreadable: {exc}"}
    return expected_vs_observed(task, rows) if rows else None


def _g(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)


def _bytes(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


def _privacy_lines(pr: dict[str, Any], windows: int) -> list[str]:
    if pr["model"].startswith("central"):
        return [f"privacy: {pr['model']}: epsilon {_g(pr.get('central_epsilon'))} per window, "
                f"{_g(pr.get('central_epsilon_composed'))} over {windows} window(s)"]
    out = [f"privacy: local epsilon {_g(pr['local_epsilon'])} per report, "
           f"{_g(pr['local_epsilon_composed'])} over {windows} window(s) (basic)"]
    if pr.get("shuffled"):
        out.append(f"  shuffled, {pr['batch_reports']:,} reports per batch, delta {pr['delta']:g}: "
                   f"central epsilon {_g(pr.get('central_epsilon_per_batch'))} per batch "
                   f"({pr.get('method', '-')}), "
                   f"{_g(pr.get('central_epsilon_composed'))} over {windows} window(s) (PLD)")
        if pr.get("note"):
            out.append(f"  note: {pr['note']}")
    return out


def _trie_lines(trie: dict[str, Any] | None) -> list[str]:
    """A trie-mode task's schedule: one level per window, a round of ``windows_per_round`` windows."""
    if not trie:
        return []
    levels = ", ".join(f"{lv['bits']} bits{' (verification)' if lv.get('verify') else ''}"
                       for lv in trie["levels"])
    return [f"trie mode: {trie['windows_per_round']} windows a round ({levels}), each with all "
            f"{trie['levels'][0]['users']:,} users of its window; {trie['rounds']} full round(s) in "
            "the windows planned"]


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as the lines ``ldp-beam plan`` prints."""
    lines = [f"task {plan['task_id']} ({plan['kind']}, {plan['mechanism']}): {plan['users']:,} users per "
             f"window, {plan['windows']} window(s)",
             f"mechanism: {plan['chosen_mechanism']}, eps0 = {_g(plan['eps0'])}"]
    lines.append("predicted error (std, 95% half-width):")
    for e in plan["errors"]:
        extra = "".join(f", {k} {_g(e[k])}" for k in ("std_max", "std_worst", "simultaneous_half_width_95")
                        if k in e)
        lines.append(f"  {e['statistic']}: std {_g(e['std'])}, +-{_g(e['half_width_95'])} ({e['unit']})"
                     f"{extra}")
    det = plan.get("detection")
    if det is not None:
        lines.append(f"smallest flagged frequency ({det['rule_text']}): "
                     f"{_g(det['frequency_flagged_half_the_time'])} (flagged half the time), "
                     f"{_g(det['frequency_flagged_80pct'])} (80% of the time)")
    lines += _privacy_lines(plan["privacy"], plan["windows"])
    lines += _trie_lines(plan.get("trie"))
    c = plan["cost"]
    lines.append(f"one window: accumulators {_bytes(c['accumulator_bytes'])}, memory about "
                 f"{_bytes(c['memory_bytes'])}, about {c['seconds']:.3g} s ({c['runner']})")
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command: prints the plan (and writes ``--json``); returns it."""
    ns, _ = parse_job_args(parser(), argv, beam=False)
    _check_flags(ns)
    try:
        plan = make_plan(ns.task, ns.users, ns.windows, ns.central_epsilon, ns.delta, ns.flag_rule)
    except ValueError as exc:
        fail(str(exc))
    print(format_plan(plan))
    if ns.json:
        write_json_or_fail("--json", ns.json, plan)
    return plan


if __name__ == "__main__":
    run()
