"""Durability helpers shared by every writer that promises a file survives a crash (Beam-free).

A file is durable once its bytes are fsynced and the directory entry that names it is fsynced too; a rename
is durable once the directory holding both names is fsynced (POSIX).
"""

from __future__ import annotations

import os

__all__ = ["fsync_dir"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsyncs the directory ``path`` (its entries: files created, renamed or removed in it)."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
