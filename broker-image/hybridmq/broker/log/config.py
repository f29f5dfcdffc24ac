"""Configuration of a partition log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FsyncMode = Literal["group", "always", "never"]


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Knobs of one partition log.

    ``fsync``:
      * ``"group"`` (default): appends go to the OS at once; a group-commit task fsyncs in a worker
        thread, one fsync covering every append since the previous one. An fsync starts as soon as
        someone awaits ``flush_until`` and none is running, when ``group_commit_max_bytes`` are
        unsynced, or ``group_commit_max_delay_ms`` after an unsynced append, whichever comes first.
      * ``"always"``: every append fsyncs before it returns (slow; simple).
      * ``"never"``: no fsync (tests, benchmarks of other parts); ``flush_until`` returns at once.
    """

    segment_bytes: int = 64 * 1024 * 1024
    index_interval_bytes: int = 4096
    max_batch_bytes: int = 16 * 1024 * 1024
    fsync: FsyncMode = "group"
    group_commit_max_delay_ms: float = 5.0
    group_commit_max_bytes: int = 4 * 1024 * 1024
    producer_window: int = 5
    max_open_sealed_segments: int = 16  # idle sealed segments beyond this get their fd closed

    def __post_init__(self) -> None:
        if self.segment_bytes < 1024:
            raise ValueError("segment_bytes must be at least 1024")
        if self.fsync not in ("group", "always", "never"):
            raise ValueError(f"unknown fsync mode {self.fsync!r}")
        if self.index_interval_bytes < 1 or self.max_batch_bytes < 1:
            raise ValueError("index_interval_bytes and max_batch_bytes must be positive")
