"""Value labels of a task: inline ``labels`` or a ``labels_file`` (one per line, or a JSON list).

Label ``i`` names value ``i``: exactly ``domain_size`` unique, non-empty strings of at most
:data:`MAX_LABEL_CHARS` characters without control characters or surrounding whitespace, for a domain of
at most :data:`MAX_LABELS` values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from ldp.task.base import Problems, TaskError
from ldp.task.checks import is_int

__all__ = ["MAX_LABELS", "MAX_LABEL_CHARS", "MAX_LABELS_FILE_BYTES", "check_labels", "labels_from_file",
           "read_labels_file"]

#: Largest domain that may carry value labels (the labels travel with the task to every worker and row).
MAX_LABELS = 1 << 16
#: Longest label (characters).
MAX_LABEL_CHARS = 256
#: Largest labels file read (bytes).
MAX_LABELS_FILE_BYTES = 8 << 20
#: Per-label problems listed before the rest are counted ("... and N more").
MAX_LABEL_PROBLEMS = 10

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_labels(
    raw: object,
    d: object,
    problems: Problems,
    where: str = "labels",
    item: Callable[[int], str] | None = None,
) -> tuple[str, ...] | None:
    """Value labels: a list of ``domain_size`` unique, non-empty strings (see the module docstring).

    ``where`` names the source in messages (``labels`` or the labels file), ``item(i)`` one entry of it.
    Per-label problems beyond :data:`MAX_LABEL_PROBLEMS` are counted, not listed.
    """
    item = item or (lambda i: f"{where}[{i}]")
    if not isinstance(raw, list):
        problems.append(f"{where} must be a list of strings, got {type(raw).__name__}")
        return None
    if len(raw) > MAX_LABELS:
        problems.append(f"{where} has {len(raw)} entries; a labelled domain has at most {MAX_LABELS} values")
        return None
    ok = True
    if is_int(d) and d > MAX_LABELS:
        problems.append(f"labels need domain_size <= {MAX_LABELS}, got {d}")
        ok = False
    elif is_int(d) and len(raw) != d:
        problems.append(f"{where} has {len(raw)} entries but domain_size is {d} (one label per value)")
        ok = False
    found: Problems = []
    first: dict[str, int] = {}
    for i, lab in enumerate(raw):
        if not isinstance(lab, str):
            found.append(f"{item(i)} must be a string, got {type(lab).__name__} {lab!r}")
        elif not lab.strip():
            found.append(f"{item(i)} is empty")
        elif len(lab) > MAX_LABEL_CHARS:
            found.append(f"{item(i)} has {len(lab)} characters (at most {MAX_LABEL_CHARS})")
        elif _CONTROL_RE.search(lab):
            found.append(f"{item(i)} {lab!r} holds a control character")
        elif lab != lab.strip():
            found.append(f"{item(i)} {lab!r} has leading or trailing whitespace")
        elif lab in first:
            found.append(f"{item(i)} {lab!r} repeats {item(first[lab])} (labels must be unique)")
        else:
            first[lab] = i
    problems.extend(found[:MAX_LABEL_PROBLEMS])
    if len(found) > MAX_LABEL_PROBLEMS:
        problems.append(f"{where}: ... and {len(found) - MAX_LABEL_PROBLEMS} more label problem(s)")
    return tuple(raw) if ok and not found else None


def labels_from_file(raw: object, d: object, base_dir: Path, problems: Problems) -> tuple[str, ...] | None:
    """The labels of a ``labels_file``: one per line (UTF-8, trailing empty lines ignored) or a JSON list."""
    if not isinstance(raw, str) or not raw.strip():
        problems.append(f"labels_file must be a non-empty path string, got {raw!r}")
        return None
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    where = f"labels_file {raw!r}"
    try:
        size = path.stat().st_size
        if size > MAX_LABELS_FILE_BYTES:
            problems.append(f"{where} is {size} bytes; at most {MAX_LABELS_FILE_BYTES} are read")
            return None
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        problems.append(f"{where}: cannot read {str(path)!r}: {exc.strerror or exc}")
        return None
    except UnicodeDecodeError as exc:
        problems.append(f"{where} is not UTF-8 text: {exc.reason} at byte {exc.start}")
        return None
    text = text.removeprefix("\ufeff")
    if text.lstrip().startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(
                f"{where}: not a valid JSON list: {exc.msg} at line {exc.lineno} column {exc.colno}"
            )
            return None
        return check_labels(parsed, d, problems, where)
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return check_labels(lines, d, problems, where, lambda i: f"{where} line {i + 1}")


def read_labels_file(path: str | Path, domain_size: int | None = None) -> tuple[str, ...]:
    """Value labels from a file in the ``labels_file`` format (one per line, or a JSON list), checked like a
    task's (``domain_size`` None: any count up to :data:`MAX_LABELS`).

    Raises:
        TaskError: listing every problem.
    """
    p = Path(path)
    problems: Problems = []
    labels = labels_from_file(str(p.resolve()), domain_size, Path("."), problems)
    if problems or labels is None:
        raise TaskError(problems or ["no labels"], str(p))
    return labels
