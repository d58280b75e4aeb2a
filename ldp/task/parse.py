"""Parsing a task: :func:`parse_task` (an object), :func:`load_task` (a file), :func:`resolve_task`.

The common sections are checked here (:mod:`ldp.task.checks`), the ``anonymity`` section and its central
target by :mod:`ldp.anonymity`, and the kind's own keys by its section's checker, found by the mechanism
(or ``kind``) in :data:`ldp.task.fields.TASK_KINDS`, the sections the registry (:mod:`ldp.kinds`) fills.
Every problem is listed at once (:class:`~ldp.task.base.TaskError`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from ldp import anonymity as _anonymity
from ldp.anonymity import AnonymitySettings, CentralTarget
from ldp.task.base import AUTO_EPSILON, JsonObject, Problems, Task, TaskError
from ldp.task.checks import (
    check_description,
    check_epsilon,
    check_hash,
    check_keys,
    check_mechanism,
    check_params,
    check_postprocess,
    check_schema_version,
    check_task_id,
    check_window,
)
from ldp.task.fields import TaskKind
from ldp.task.resolve import check_resolved, task_resolution

__all__ = ["parse_task", "load_task", "resolve_task"]


def resolve_task(task: Task | JsonObject) -> dict[str, object]:
    """The task (parsed, or an object :func:`parse_task` accepts) as a JSON-ready dict with its resolution
    recorded under ``resolved`` (:func:`task_resolution`): write this when a task is made, so every
    client and aggregator that loads it checks it resolves the same oracles.

    Raises:
        TaskError: the object is not a valid task.
    """
    parsed = task if isinstance(task, Task) else parse_task(task)
    out = parsed.to_dict()
    res = task_resolution(parsed)
    if res is not None:
        out["resolved"] = res
    return out


def parse_task(
    obj: object, *, source: str = "task", kind: str | None = None, base_dir: str | Path | None = None
) -> Task:
    """Validates a task given as a dict (parsed JSON) and returns the parsed task.

    Args:
        obj: the task object.
        source: what to call it in error messages (a file name).
        kind: if given, the task must be of this kind (e.g. ``"range"`` for the range-query job).
        base_dir: the directory a relative ``labels_file`` is read from (default: the current directory;
            :func:`load_task` passes the task file's directory).

    Raises:
        TaskError: listing every problem found.
    """
    if not isinstance(obj, Mapping):
        raise TaskError([f"a task must be a JSON object, got {type(obj).__name__}"], source)
    problems: Problems = []
    mechanism, task_kind = check_mechanism(obj, problems)
    check_keys(obj, task_kind, problems)
    anonymous = task_kind is not None and "anonymity" in task_kind.keys
    common = _common_fields(obj, mechanism, task_kind, anonymous, problems)
    plan = _plan_anonymity(obj, common, task_kind, problems) if anonymous else _Plan()
    task = None
    if task_kind is not None and mechanism is not None:
        extra = {"base_dir": Path(base_dir or ".")} if task_kind.uses_base_dir else {}
        if plan.auto_epsilon and plan.n is not None and plan.goal is not None and not problems:
            _choose_for_target(obj, common, task_kind, plan, extra, problems)
        task = task_kind.build(obj, common, problems, **extra)
    if task is not None and plan.settings is not None:
        task = dataclasses.replace(task, anonymity=plan.settings, central_target=plan.target)
        _anonymity.check_shuffled_task(task, plan.n, problems)
    if task is not None and not problems and obj.get("resolved") is not None:
        resolved = check_resolved(obj["resolved"], task, problems)
        if resolved is not None:
            task = dataclasses.replace(task, resolved=resolved)
    if task is None or problems:
        raise TaskError(problems or ["the task could not be parsed"], source)
    if kind is not None and task.kind != kind:
        raise TaskError(
            [f"task {task.task_id!r} is a {task.kind} task ({task.mechanism!r}), not a {kind} task"],
            source,
        )
    return task


def _choose_for_target(
    obj: JsonObject,
    common: dict[str, object],
    task_kind: TaskKind,
    plan: _Plan,
    extra: dict[str, Path],
    problems: Problems,
) -> None:
    """``epsilon: "auto"``: the task built at the placeholder epsilon, then the mechanism and epsilon that
    meet the central target with the smallest predicted error (:func:`ldp.anonymity.epsilon_for_target`)
    written into ``common``. A task that cannot be built leaves ``common`` alone (the build reports why)."""
    base = task_kind.build(obj, dict(common), [], **extra)
    if base is None or plan.settings is None or plan.goal is None or plan.n is None:
        return
    base = dataclasses.replace(base, anonymity=plan.settings, central_target=plan.target)
    try:
        common["mechanism"], common["epsilon"] = _anonymity.epsilon_for_target(
            base, plan.settings, plan.goal, plan.n)
    except ValueError as exc:
        problems.append(f'epsilon "auto": {exc}')


def _common_fields(
    obj: JsonObject, mechanism: str | None, task_kind: TaskKind | None, anonymous: bool, problems: Problems
) -> dict[str, object]:
    """The common sections, checked (``epsilon`` may be ``"auto"`` for a kind that may be shuffled)."""
    return {
        "task_id": check_task_id(obj, problems),
        "mechanism": mechanism,
        "epsilon": check_epsilon(obj, problems, allow_auto=anonymous),
        "description": check_description(obj, problems),
        "schema_version": check_schema_version(obj, problems, task_kind),
        "postprocess": check_postprocess(obj, problems),
        "hash": check_hash(obj, mechanism, problems),
        "params": check_params(obj, problems),
        "window": check_window(obj.get("window"), problems),
    }


@dataclasses.dataclass
class _Plan:
    """The ``anonymity`` section of a task and its central target, as planned per shuffled batch."""

    settings: AnonymitySettings | None = None
    target: CentralTarget | None = None
    n: int | None = None
    auto_epsilon: bool = False

    @property
    def goal(self) -> float | None:
        return None if self.target is None else self.target.central_epsilon


def _plan_anonymity(
    obj: JsonObject, common: dict[str, object], task_kind: TaskKind | None, problems: Problems
) -> _Plan:
    """The section (:func:`ldp.anonymity.check_section`), the reports per shuffled batch its target is
    planned at, and whether ``epsilon: "auto"`` has a target to be chosen for."""
    plan = _Plan(auto_epsilon=obj.get("epsilon") == AUTO_EPSILON)
    if task_kind is not None:
        plan.settings, plan.target = _anonymity.check_section(obj.get("anonymity"), problems)
    if plan.settings is not None and task_kind is not None:
        key = task_kind.expected_reports_key
        n = _anonymity.target_reports(obj, key, plan.settings, plan.target, problems)
        size_s = common["window"].size_s  # type: ignore[union-attr]
        plan.n = _anonymity.batch_target_reports(n, size_s, plan.settings, plan.target, problems)
    if plan.auto_epsilon and plan.goal is None and "anonymity" not in obj:
        problems.append('epsilon "auto" needs an anonymity section with central_epsilon and expected_reports')
    elif plan.auto_epsilon and plan.goal is None and plan.settings is not None:
        problems.append('epsilon "auto" needs anonymity.central_epsilon (the target it is chosen for)')
    return plan


def load_task(path: str | Path, *, kind: str | None = None) -> Task:
    """Reads and validates a task JSON file (``kind``: as :func:`parse_task`).

    Raises:
        TaskError: the file cannot be read, is not JSON, or the task has problems (all listed).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskError([f"cannot read task file: {exc.strerror or exc}"], str(p)) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskError(
            [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"], str(p)
        ) from None
    return parse_task(obj, source=str(p), kind=kind, base_dir=p.parent)


