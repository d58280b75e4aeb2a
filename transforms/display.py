"""Display data of the stack's transforms (Beam's ``display_data()``).

Runners show a step's display data beside the step (the Flink and Dataflow UIs, the portable job's
pipeline proto), as they do for Beam's own transforms: here the task a step works for (``task_id``,
``kind``, ``mechanism``, ``epsilon``), its window and the paths or topics it reads and writes. Every
public ``PTransform`` of ``transforms/`` names its task (``tests/test_display_data.py``).
"""

from __future__ import annotations

from typing import Any

from apache_beam.transforms.display import DisplayDataItem

from ldp.task import WindowConfig

__all__ = ["task_display", "task_id_display", "window_display", "window_text", "item"]


def item(value: Any, label: str) -> DisplayDataItem:
    """One labelled display item, left out when ``value`` is None."""
    return DisplayDataItem(value, label=label).drop_if_none()


def task_id_display(task_id: str | None) -> dict[str, DisplayDataItem]:
    """``task_id`` alone (transforms built from a task id, not a task)."""
    return {"task_id": item(task_id, "Task")}


def task_display(task_or_aggregator: Any) -> dict[str, DisplayDataItem]:
    """The task of a step: id, kind, mechanism and per-report epsilon (``task_or_aggregator``: a parsed
    task or an aggregator holding one as ``.task``; None gives nothing)."""
    task = getattr(task_or_aggregator, "task", task_or_aggregator)
    if task is None:
        return {}
    epsilon = getattr(task, "epsilon", None)
    return {
        "task_id": item(task.task_id, "Task"),
        "kind": item(getattr(task, "kind", None), "Kind of task"),
        "mechanism": item(getattr(task, "mechanism", None), "Mechanism"),
        "epsilon": item(None if epsilon is None else float(epsilon), "Epsilon per report"),
    }


def window_text(window: WindowConfig) -> str:
    """A window configuration in words: ``fixed 600 s``, ``sliding 600 s every 60 s``, ``global``, with
    any early panes, allowed lateness and accumulation."""
    if window.size_s is None:
        parts = ["global"]
    elif window.period_s is None:
        parts = [f"fixed {window.size_s:g} s"]
    else:
        parts = [f"sliding {window.size_s:g} s every {window.period_s:g} s"]
    if window.early_firing_s:
        parts.append(f"early panes every {window.early_firing_s:g} s")
    if window.allowed_lateness_s:
        parts.append(f"allowed lateness {window.allowed_lateness_s:g} s")
    if window.accumulating:
        parts.append("accumulating")
    return ", ".join(parts)


def window_display(window: WindowConfig | None) -> dict[str, DisplayDataItem]:
    """The step's event-time window (None gives nothing)."""
    return {} if window is None else {"window": item(window_text(window), "Window")}
