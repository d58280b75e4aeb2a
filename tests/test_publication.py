"""wire.publication: generation files written once, latest.json replaced atomically and only forwards,
malformed or foreign files refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from wire.publication import (
    LATEST,
    PublicationConflict,
    generation_path,
    read_generation,
    read_latest,
    write_publication,
)

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier: files in a temporary directory


def _pub(generation: int, level: int = 1, task_id: str = "hh", **extra) -> dict:
    return {"task_id": task_id, "generation": generation, "level": level, "window_end": 60_000 * generation,
            **extra}


def test_nothing_published_yet(tmp_path: Path) -> None:
    assert read_latest(tmp_path / "missing") is None
    assert read_latest(tmp_path) is None
    assert read_generation(tmp_path, 1) is None


def test_write_then_read_latest(tmp_path: Path) -> None:
    d = tmp_path / "a" / "b"  # created
    path = write_publication(d, _pub(1, prefixes=[{"value": "ab\n<x>", "hex": "6162"}]))
    assert Path(path) == generation_path(d, 1) and Path(path).name == "generation-000001.json"
    got = read_latest(d, task_id="hh")
    assert got == _pub(1, prefixes=[{"value": "ab\n<x>", "hex": "6162"}])
    assert read_generation(d, 1) == got
    # no temporary file left behind
    assert sorted(p.name for p in d.iterdir()) == ["generation-000001.json", LATEST]


def test_latest_is_replaced_atomically_by_rename(tmp_path: Path) -> None:
    write_publication(tmp_path, _pub(1))
    inode = (tmp_path / LATEST).stat().st_ino
    write_publication(tmp_path, _pub(2, level=2))
    # a new file renamed over the old one (readers holding the old one keep a whole file)
    assert (tmp_path / LATEST).stat().st_ino != inode
    assert read_latest(tmp_path)["generation"] == 2
    assert read_generation(tmp_path, 1)["level"] == 1


def test_rewriting_the_same_generation_is_a_no_op(tmp_path: Path) -> None:
    write_publication(tmp_path, _pub(1))
    before = generation_path(tmp_path, 1).stat()
    # same content, another key order and numpy scalars: the same canonical bytes
    again = {"window_end": np.int64(60_000), "level": np.int64(1), "generation": 1, "task_id": "hh"}
    write_publication(tmp_path, again)
    after = generation_path(tmp_path, 1).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert read_latest(tmp_path) == _pub(1)


def test_a_different_content_for_an_existing_generation_is_refused(tmp_path: Path) -> None:
    write_publication(tmp_path, _pub(1))
    with pytest.raises(PublicationConflict, match="generation 1 is already published") as e:
        write_publication(tmp_path, _pub(1, level=2))
    assert "\n" not in str(e.value)
    assert read_generation(tmp_path, 1)["level"] == 1 and read_latest(tmp_path)["level"] == 1


def test_an_older_generation_never_replaces_latest(tmp_path: Path) -> None:
    write_publication(tmp_path, _pub(3, level=0))
    write_publication(tmp_path, _pub(2, level=2))  # written late (a retry): its file only
    assert read_latest(tmp_path)["generation"] == 3
    assert read_generation(tmp_path, 2)["level"] == 2


def test_latest_restored_after_a_crash_between_the_two_files(tmp_path: Path) -> None:
    write_publication(tmp_path, _pub(1))
    generation_path(tmp_path, 2).write_text(json.dumps(_pub(2), sort_keys=True, ensure_ascii=False) + "\n")
    write_publication(tmp_path, _pub(2))  # the retry finds its own generation file, then moves latest
    assert read_latest(tmp_path)["generation"] == 2


@pytest.mark.parametrize(
    "payload, match",
    [
        ([1, 2], "a JSON object"),
        ({"generation": 1, "level": 0, "window_end": None}, "task_id"),
        (_pub(0), "generation is an integer >= 1"),
        ({**_pub(1), "generation": True}, "generation is an integer"),
        ({**_pub(1), "level": -1}, "level is an integer >= 0"),
        ({**_pub(1), "window_end": "soon"}, "window_end"),
        ({"task_id": "hh", "generation": 1, "level": 0}, "window_end"),
        ({**_pub(1), "std": float("nan")}, "plain JSON"),
        ({**_pub(1), "x": object()}, "plain JSON"),
    ],
)
def test_a_payload_that_is_not_a_publication_is_refused(tmp_path: Path, payload, match: str) -> None:
    with pytest.raises(ValueError, match=match) as e:
        write_publication(tmp_path, payload)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content, match",
    [
        (b"{not json", "not a publication"),
        (b"\xff\xfe", "not a publication"),
        (b'["a list"]', "a JSON object"),
        (b'{"task_id": "hh", "generation": "1", "level": 0, "window_end": null}', "generation"),
        (b'{"task_id": "hh",\n "generation": 1}', "level"),
    ],
)
def test_a_malformed_latest_is_a_one_line_error(tmp_path: Path, content: bytes, match: str) -> None:
    (tmp_path / LATEST).write_bytes(content)
    with pytest.raises(ValueError, match=match) as e:
        read_latest(tmp_path)
    assert "\n" not in str(e.value) and str(tmp_path / LATEST) in str(e.value)
    with pytest.raises(ValueError, match="not a publication"):
        write_publication(tmp_path, _pub(1))  # nothing written over a file it cannot read


def test_another_tasks_file_is_refused(tmp_path: Path) -> None:
    write_publication(tmp_path, _pub(1, task_id="other\ntask"))
    with pytest.raises(ValueError, match="of task 'other\\\\ntask', not of task 'hh'") as e:
        read_latest(tmp_path, task_id="hh")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not of task 'hh'"):
        write_publication(tmp_path, _pub(2))
    assert read_generation(tmp_path, 2) is None
    assert read_latest(tmp_path)["task_id"] == "other\ntask"


def test_an_oversized_file_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wire.publication as pub

    write_publication(tmp_path, _pub(1, note="x" * 100))
    monkeypatch.setattr(pub, "MAX_PUBLICATION_BYTES", 64)
    with pytest.raises(ValueError, match="more than a publication's 64"):
        read_latest(tmp_path)


def test_an_unwritable_directory_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        write_publication(blocker / "sub", _pub(1))
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(OSError):
            write_publication(ro, _pub(1))
