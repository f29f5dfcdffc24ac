"""Small-file durability helpers: atomic replace, directory fsync, the recovery-point file."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync a directory so that file creations, renames and deletions in it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (write a temp file, fsync it, rename, fsync dir)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


RECOVERY_POINT_FILE = "recovery-point"


def read_recovery_point(directory: Path) -> int:
    """Every segment of the log in ``directory`` below this base offset was fsynced and sealed."""
    try:
        return int((directory / RECOVERY_POINT_FILE).read_text().strip())
    except (OSError, ValueError):
        return 0


def write_recovery_point(directory: Path, offset: int, *, fsync: bool) -> None:
    write_atomic(directory / RECOVERY_POINT_FILE, f"{offset}\n".encode(), fsync=fsync)
