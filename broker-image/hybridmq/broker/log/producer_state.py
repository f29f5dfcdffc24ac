"""Idempotent-producer state: for each producer id, its producer epoch and its last few batches.

The state is derived from batch headers only (``producer_id``, ``producer_epoch``,
``base_sequence``, ``record_count``), so it is rebuilt from the log on recovery and is identical on
every replica. Snapshots (``<offset>.snapshot``, msgpack) are written when a segment rolls, so that
recovery only rescans the segments after the latest snapshot.

Rules of :meth:`ProducerStateManager.check` (a batch of ``count`` records from ``producer_id`` with
``producer_epoch`` and ``base_sequence``):

* ``producer_id < 0``: not idempotent, always :class:`SequenceOk`.
* unknown producer id: :class:`SequenceOk` (any starting sequence is accepted).
* ``producer_epoch`` older than the known one: :class:`ProducerFenced`.
* newer ``producer_epoch``: the sequence must restart at 0, else :class:`OutOfOrderSequence`.
* same epoch: a batch equal to one of the last ``window`` batches is a :class:`DuplicateSequence`
  (with that batch's offsets, so the resend can be acknowledged as the original was); the next
  sequence (last + 1) is :class:`SequenceOk`; an older sequence is a :class:`DuplicateSequence`
  with unknown offsets (-1); anything else is :class:`OutOfOrderSequence`.

Sequence numbers are int32 and do not wrap here: a producer starts a new producer epoch before 2**31.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from .batch import BatchHeader

_SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1


@dataclass(frozen=True, slots=True)
class SequenceOk:
    pass


@dataclass(frozen=True, slots=True)
class DuplicateSequence:
    """The batch was already appended; ``base_offset``/``last_offset`` are -1 if no longer known."""

    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class OutOfOrderSequence:
    expected: int
    got: int


@dataclass(frozen=True, slots=True)
class ProducerFenced:
    current_epoch: int


SequenceCheck = SequenceOk | DuplicateSequence | OutOfOrderSequence | ProducerFenced
SEQUENCE_OK = SequenceOk()


@dataclass(slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


class ProducerStateManager:
    def __init__(self, window: int = 5) -> None:
        self.window = window
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def check(self, producer_id: int, producer_epoch: int, base_sequence: int, count: int) -> SequenceCheck:
        if producer_id < 0:
            return SEQUENCE_OK
        entry = self.producers.get(producer_id)
        if entry is None:
            return SEQUENCE_OK
        if producer_epoch < entry.producer_epoch:
            return ProducerFenced(entry.producer_epoch)
        if producer_epoch > entry.producer_epoch:
            return SEQUENCE_OK if base_sequence == 0 else OutOfOrderSequence(0, base_sequence)
        last_sequence = base_sequence + count - 1
        for batch in entry.batches:
            if batch.first_sequence == base_sequence and batch.last_sequence == last_sequence:
                return DuplicateSequence(batch.base_offset, batch.last_offset)
        expected = entry.last_sequence + 1
        if base_sequence == expected:
            return SEQUENCE_OK
        if base_sequence < expected:
            return DuplicateSequence(-1, -1)
        return OutOfOrderSequence(expected, base_sequence)

    def update(self, header: BatchHeader) -> None:
        """Record an appended batch (no checks: the primary already checked it)."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        self.record(
            producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.base_sequence + header.record_count - 1,
            header.base_offset,
            header.base_offset + header.record_count - 1,
        )

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        first_sequence: int,
        last_sequence: int,
        base_offset: int,
        last_offset: int,
    ) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch != entry.producer_epoch:
            entry = ProducerEntry(producer_id, producer_epoch, deque(maxlen=self.window))
            self.producers[producer_id] = entry
        entry.batches.append(BatchMetadata(first_sequence, last_sequence, base_offset, last_offset))

    def clear(self) -> None:
        self.producers.clear()

    # -- snapshots ---------------------------------------------------------------------------------

    def to_bytes(self, offset: int) -> bytes:
        """Serialize the state as of log offset ``offset`` (msgpack)."""
        producers = [
            [
                entry.producer_id,
                entry.producer_epoch,
                [[b.first_sequence, b.last_sequence, b.base_offset, b.last_offset] for b in entry.batches],
            ]
            for entry in self.producers.values()
        ]
        return msgpack.packb([_SNAPSHOT_VERSION, offset, producers])

    def load_bytes(self, data: bytes) -> int:
        """Replace the state with a serialized one; return the offset it was taken at."""
        decoded: Any = msgpack.unpackb(data)
        version, offset, producers = decoded
        if version != _SNAPSHOT_VERSION:
            raise ValueError(f"unknown producer snapshot version {version}")
        self.producers.clear()
        for producer_id, producer_epoch, batches in producers:
            for first_sequence, last_sequence, base_offset, last_offset in batches:
                self.record(
                    producer_id, producer_epoch, first_sequence, last_sequence, base_offset, last_offset
                )
            if not batches:
                self.producers[producer_id] = ProducerEntry(
                    producer_id, producer_epoch, deque(maxlen=self.window)
                )
        return int(offset)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{_SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the producer snapshots in ``directory``, ascending."""
    offsets = []
    for name in os.listdir(directory):
        if name.endswith(_SNAPSHOT_SUFFIX):
            try:
                offsets.append(int(name[: -len(_SNAPSHOT_SUFFIX)]))
            except ValueError:
                continue
    return sorted(offsets)


def write_snapshot(directory: Path, state: ProducerStateManager, offset: int) -> None:
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(state.to_bytes(offset))
    os.replace(tmp, path)


def load_latest_snapshot(directory: Path, state: ProducerStateManager, max_offset: int) -> int | None:
    """Load the newest readable snapshot taken at or before ``max_offset``; return its offset."""
    for offset in reversed(list_snapshots(directory)):
        if offset > max_offset:
            continue
        try:
            return state.load_bytes(snapshot_path(directory, offset).read_bytes())
        except (OSError, ValueError, msgpack.UnpackException, TypeError):
            continue
    state.clear()
    return None


def delete_snapshots(directory: Path, *, above: int | None = None, below: int | None = None) -> None:
    """Delete snapshots with offset > ``above`` and/or offset < ``below``."""
    for offset in list_snapshots(directory):
        if (above is not None and offset > above) or (below is not None and offset < below):
            try:
                snapshot_path(directory, offset).unlink()
            except FileNotFoundError:
                pass
