"""Leader-epoch cache: for each partition epoch, the first offset written in it (Kafka's design).

A backup that learns of a new epoch asks the new primary for ``end_offset_for_epoch(its latest
epoch)`` and truncates its log there, dropping whatever the old primary wrote that the new one never
had. The cache is persisted (``leader-epoch-checkpoint``, a small text file replaced atomically)
before the first batch of a new epoch is written, and trimmed with the log on truncation and
retention.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .checkpoint import write_atomic
from .errors import StaleEpochError

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = "0"


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, path: Path | None, *, fsync: bool = True) -> None:
        self._path = path
        self._fsync = fsync
        self._entries: list[EpochEntry] = []
        if path is not None and path.exists():
            self._entries = _parse(path.read_text())

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._entries[0].epoch if self._entries else UNDEFINED_EPOCH

    def check(self, epoch: int) -> None:
        """Raise StaleEpochError when ``epoch`` is older than the latest epoch."""
        if self._entries and epoch < self._entries[-1].epoch:
            raise StaleEpochError(epoch, self._entries[-1].epoch)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that ``epoch`` starts at ``start_offset`` (a no-op for the current epoch)."""
        self.check(epoch)
        if self._entries and self._entries[-1].epoch == epoch:
            return
        if self._entries and start_offset < self._entries[-1].start_offset:
            raise ValueError(f"epoch {epoch} cannot start at {start_offset}, before the previous epoch")
        self._entries.append(EpochEntry(epoch, start_offset))
        self._persist()

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch', end)``: the largest known epoch <= ``epoch`` and the offset where it ended.

        ``end`` is the start offset of the next larger epoch, or ``log_end_offset`` for the latest
        epoch. ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)`` when ``epoch`` is newer than any known epoch
        or undefined. If ``epoch`` is older than every known epoch the answer is ``(epoch, start of
        the earliest epoch)``.
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._entries[-1].epoch:
            return epoch, log_end_offset
        floor: EpochEntry | None = None
        for entry in self._entries:
            if entry.epoch > epoch:
                return (epoch if floor is None else floor.epoch), entry.start_offset
            floor = entry
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the record at ``offset`` (UNDEFINED_EPOCH before the first known epoch)."""
        epoch = UNDEFINED_EPOCH
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            epoch = entry.epoch
        return epoch

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget what lies before ``start_offset`` (retention), keeping the epoch that covers it."""
        kept: list[EpochEntry] = []
        for i, entry in enumerate(self._entries):
            following = self._entries[i + 1] if i + 1 < len(self._entries) else None
            if following is not None and following.start_offset <= start_offset:
                continue
            kept.append(EpochEntry(entry.epoch, max(entry.start_offset, start_offset)))
        if kept != self._entries:
            self._entries = kept
            self._persist()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._persist()

    def _persist(self) -> None:
        if self._path is None:
            return
        lines = [_VERSION, str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_atomic(self._path, ("\n".join(lines) + "\n").encode(), fsync=self._fsync)


def _parse(text: str) -> list[EpochEntry]:
    lines = text.split("\n")
    if len(lines) < 2 or lines[0] != _VERSION:
        raise ValueError("unreadable leader-epoch checkpoint")
    count = int(lines[1])
    entries = []
    for line in lines[2 : 2 + count]:
        epoch, start = line.split()
        entries.append(EpochEntry(int(epoch), int(start)))
    if len(entries) != count:
        raise ValueError("truncated leader-epoch checkpoint")
    return entries
