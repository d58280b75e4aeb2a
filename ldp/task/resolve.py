"""What a task's oracles resolve to (``auto``, a range method's per-group ``auto`` oracles, a central
target's local epsilon), recorded under ``resolved`` and checked on every load.

``auto`` chooses only among the frozen candidates of the task's ``schema_version``
(``ldp.oracles.AUTO_CANDIDATES``): a mechanism added to the registry never changes what an existing task
means. Each kind says what its oracles resolve to (:meth:`ldp.task.Task.oracle_resolution`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import ldp.oracles as _oracles
from ldp.anonymity import shuffle_accounting
from ldp.task.base import Problems, Task

__all__ = ["task_resolution", "check_resolved"]


def task_resolution(task: Task) -> dict[str, object] | None:
    """What a task's oracles resolve to (``None`` for kinds without frequency oracles: batch queries,
    sparse vectors): ``auto_candidates``, the frozen ``auto`` candidates of its ``schema_version``
    (``ldp.oracles.AUTO_CANDIDATES``), and ``oracles``, the ``ldp.rangequery.registry.oracle_spec`` of its
    oracle (frequency: one entry, every group's) or of each group's oracle, group 0 first (range: the
    per-group ``auto`` choices); with a central target (``anonymity.central_epsilon``) also
    ``local_epsilon``: the task's epsilon, the target, ``delta``, ``expected_reports`` and the
    ``accounting`` (:func:`ldp.anonymity.shuffle_accounting`)."""
    resolution = task.oracle_resolution()
    if resolution is None:
        return None
    cand_version, oracles = resolution
    out: dict[str, object] = {
        "auto_candidates": list(_oracles.auto_candidates(cand_version)),
        "oracles": oracles,
    }
    target = None if task.central_target is None else task.central_target.central_epsilon
    if task.shuffled and target is not None and task.anonymity is not None:
        accounting, _ = shuffle_accounting(task)
        out["local_epsilon"] = {
            "epsilon": task.epsilon,
            "central_epsilon": target,
            "delta": task.anonymity.delta,
            "expected_reports": task.expected_reports,
            "accounting": accounting,
        }
    return out


def check_resolved(raw: object, task: Task, problems: Problems) -> dict[str, object] | None:
    """A recorded ``resolved`` block (:func:`resolve_task`) must be what this release resolves."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not (
        {"auto_candidates", "oracles"} <= set(raw) <= {"auto_candidates", "oracles", "local_epsilon"}
    ):
        problems.append(
            "resolved must be an object with auto_candidates, oracles and (with a central target) "
            "local_epsilon (ldp.task.resolve_task)"
        )
        return None
    now = task_resolution(task)
    if now is None:
        problems.append(f"resolved applies to frequency and range tasks, not {task.kind} tasks")
        return None
    rec = {"auto_candidates": raw["auto_candidates"], "oracles": raw["oracles"]}
    if "local_epsilon" in raw:
        rec["local_epsilon"] = raw["local_epsilon"]
    if rec.get("local_epsilon") != now.get("local_epsilon"):
        problems.append(
            f"resolved.local_epsilon: the task records {rec.get('local_epsilon')!r} but it resolves to "
            f"{now.get('local_epsilon')!r} (the epsilon chosen for the central target must be the one "
            "clients use: resolve the task again with ldp.task.resolve_task, or make a new task)"
        )
    if rec["auto_candidates"] != now["auto_candidates"]:
        problems.append(
            f"resolved.auto_candidates {rec['auto_candidates']!r} are not schema version "
            f"{task.schema_version}'s {now['auto_candidates']!r}"
        )
    mine, theirs = now["oracles"], rec["oracles"]
    assert isinstance(mine, list)
    if not isinstance(theirs, list) or len(theirs) != len(mine):
        n = len(theirs) if isinstance(theirs, list) else type(theirs).__name__
        problems.append(f"resolved.oracles records {n} oracle(s), the task has {len(mine)}")
        return None
    bad = [i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b]
    for i in bad[:3]:
        problems.append(
            f"resolved.oracles[{i}]: the task records {theirs[i]!r} but this release resolves {mine[i]!r} "
            "(clients and the aggregator would encode and decode differently: name the oracle explicitly "
            "or make a new task)"
        )
    if len(bad) > 3:
        problems.append(f"resolved.oracles: ... and {len(bad) - 3} more group(s) resolve differently")
    return None if bad or len(problems) else json.loads(json.dumps(rec))
