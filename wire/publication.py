"""Publication files: what a multi-window task tells its clients after each window it finalizes.

A publication is a JSON object with at least ``task_id`` (str), ``generation`` (int >= 1: the windows
finalized so far), ``level`` (int >= 0: the level the next window's clients report at) and
``window_end`` (int milliseconds, or null), plus the kind's own keys. A publication directory holds:

* ``generation-<G:06d>.json``: generation G, written once (a temporary file, fsync, link to its name, so a
  reader never sees half a file and a second writer never replaces the first); writing the same content
  again is a no-op, a different content for an existing generation raises :class:`PublicationConflict`;
* ``latest.json``: the newest generation, replaced atomically (temporary file, fsync, rename), and only
  by a newer generation, so an older or repeated write never moves it back.

:func:`write_publication` writes both; :func:`read_latest` is what a client (or the simulator) reads:
None before the first publication, a :class:`ValueError` with a one-line reason for a file that is not a
publication or belongs to another task. The files are canonical JSON (sorted keys, no NaN), UTF-8.
One writer per task is assumed (the pipeline's ordered finalize step has one key per task); a retried
write of the same generation is safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wire.durable import fsync_dir

__all__ = [
    "LATEST",
    "MAX_PUBLICATION_BYTES",
    "PublicationConflict",
    "check_publication",
    "generation_path",
    "read_generation",
    "read_latest",
    "write_publication",
]

#: The file holding the newest generation.
LATEST = "latest.json"
#: A publication file larger than this is refused unread (a trie publishes at most a few hundred prefixes).
MAX_PUBLICATION_BYTES = 8 * 1024 * 1024


class PublicationConflict(ValueError):
    """A generation already written with a different content."""


def generation_path(directory: str | os.PathLike, generation: int) -> Path:
    """The file of one generation in a publication directory."""
    return Path(directory) / f"generation-{int(generation):06d}.json"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_publication(payload: Any) -> dict[str, Any]:
    """``payload`` when it is a publication (the four common keys with their types), else a one-line
    :class:`ValueError` naming the first problem."""
    if not isinstance(payload, dict):
        raise ValueError(f"a publication is a JSON object, not {type(payload).__name__}")
    if not isinstance(payload.get("task_id"), str) or not payload["task_id"]:
        raise ValueError("a publication needs a non-empty string task_id")
    if not _is_int(payload.get("generation")) or payload["generation"] < 1:
        raise ValueError(f"a publication's generation is an integer >= 1, not {payload.get('generation')!r}")
    if not _is_int(payload.get("level")) or payload["level"] < 0:
        raise ValueError(f"a publication's level is an integer >= 0, not {payload.get('level')!r}")
    end = payload.get("window_end")
    if "window_end" not in payload or not (end is None or _is_int(end)):
        raise ValueError(f"a publication's window_end is integer ms or null, not {end!r}")
    return payload


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays (duck-typed: ``wire`` needs no numpy import for this) as plain JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _canonical(payload: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The payload as plain JSON values (checked) and its canonical bytes."""
    try:
        text = json.dumps(payload, sort_keys=True, allow_nan=False, ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError) as e:
        raise ValueError(f"a publication must be plain JSON: {e}") from None
    plain = check_publication(json.loads(text))
    return plain, (text + "\n").encode("utf-8")


def _temporary(directory: Path, name: str, data: bytes) -> str:
    """``data`` in a new fsynced hidden temporary file next to ``name``; returns its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _read_bytes(path: Path) -> bytes:
    size = path.stat().st_size
    if size > MAX_PUBLICATION_BYTES:
        raise ValueError(f"{path}: {size} bytes, more than a publication's {MAX_PUBLICATION_BYTES}")
    return path.read_bytes()


def _parse(path: Path, data: bytes, task_id: str | None) -> dict[str, Any]:
    try:
        payload = json.loads(data.decode("utf-8"))
        check_publication(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        reason = " ".join(str(e).split())
        raise ValueError(f"{path}: not a publication: {reason}") from None
    if task_id is not None and payload["task_id"] != task_id:
        raise ValueError(f"{path}: a publication of task {payload['task_id']!r}, not of task {task_id!r}")
    return payload


def _write_generation(directory: Path, generation: int, data: bytes) -> Path:
    """Generation file, created once: linked from a complete temporary file, so an existing one is never
    replaced; an existing one with other bytes raises :class:`PublicationConflict`."""
    path = generation_path(directory, generation)
    tmp = _temporary(directory, path.name, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        if _read_bytes(path) != data:
            raise PublicationConflict(
                f"{path}: generation {generation} is already published with a different content"
            ) from None
    finally:
        os.unlink(tmp)
    return path


def _replace_latest(directory: Path, payload: dict[str, Any], data: bytes) -> None:
    """``latest.json`` := ``data`` unless the current one is as new or newer (of the same task)."""
    latest = directory / LATEST
    if latest.exists():
        current = _parse(latest, _read_bytes(latest), payload["task_id"])
        if current["generation"] >= payload["generation"]:
            return
    tmp = _temporary(directory, LATEST, data)
    try:
        os.replace(tmp, latest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_publication(directory: str | os.PathLike, payload: Mapping[str, Any]) -> str:
    """Writes ``payload`` as its generation's file in ``directory`` (created if missing), then makes it
    ``latest.json`` if it is newer than the current one; returns the generation file's path.

    Raises :class:`ValueError` (one line) for a payload that is not a publication or a directory holding
    another task's ``latest.json``, :class:`PublicationConflict` for a generation already written with
    another content, :class:`OSError` when the directory cannot be written.
    """
    plain, data = _canonical(payload)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    latest = d / LATEST
    if latest.exists():  # another task's directory: refused before anything is written
        _parse(latest, _read_bytes(latest), plain["task_id"])
    path = _write_generation(d, plain["generation"], data)
    _replace_latest(d, plain, data)
    fsync_dir(d)
    return str(path)


def read_generation(directory: str | os.PathLike, generation: int, task_id: str | None = None
                    ) -> dict[str, Any] | None:
    """One generation's publication, None when it was not written; :class:`ValueError` (one line) for a
    malformed file or, with ``task_id``, another task's."""
    path = generation_path(directory, generation)
    if not path.exists():
        return None
    return _parse(path, _read_bytes(path), task_id)


def read_latest(directory: str | os.PathLike, task_id: str | None = None) -> dict[str, Any] | None:
    """The newest publication in ``directory``: None when there is none yet (no directory or no
    ``latest.json``); :class:`ValueError` (one line) for a malformed file or, with ``task_id``, a file of
    another task."""
    path = Path(directory) / LATEST
    try:
        data = _read_bytes(path)
    except FileNotFoundError:
        return None
    return _parse(path, data, task_id)
