"""A partition's incarnation: a random id born with its data, so readers can tell a re-created one.

An on-demand partition's name comes back after garbage collection, and a fixed partition whose
every copy was lost starts again empty under its old name: offsets alone cannot tell a reader that
the records it had not read yet are gone. The primary creates the id with the partition's directory
(file ``incarnation``); backups adopt the primary's from its replication answers, so a failover keeps
it. FETCH_META reports it to readers (the Spark source remembers it in its checkpoints).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

FILE = "incarnation"


def read(directory: Path) -> str | None:
    try:
        text = (directory / FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def ensure(directory: Path) -> str:
    """The directory's incarnation, created (random) if it has none yet."""
    return read(directory) or write(directory, uuid.uuid4().hex)


def write(directory: Path, incarnation: str, *, create: bool = True) -> str:
    """Store ``incarnation`` durably (a crash leaves the old file or the new one, never half).
    ``create=False``: the directory must exist (FileNotFoundError: the copy was deleted)."""
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{FILE}.tmp"  # the log loader removes a leftover *.tmp
    with tmp.open("w") as f:
        f.write(incarnation)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / FILE)
    return incarnation
