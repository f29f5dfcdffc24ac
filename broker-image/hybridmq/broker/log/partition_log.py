"""The partition log's front: append and read, truncation, retention, epochs (Kafka's UnifiedLog).

Opening and crash recovery are :mod:`.loader`'s job, fsync rounds and the durable offset
:mod:`.durability`'s; segments, the batch format, the epoch cache and producer state have their own
modules.

Threading: a ``PartitionLog`` is used from one thread (the event loop's). Only the fsync of group
commit runs in a worker thread (see :mod:`.durability`); ``close`` waits for a running round
(``aclose`` does so without blocking the loop).

Durability: ``durable_offset`` is the end (exclusive) of the prefix known to be on disk. With
``fsync="group"`` call ``await flush_until(result.end_offset)`` before acknowledging a produce.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from .batch import (
    ATTR_CONTROL,
    HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    encode_header,
    iter_batches,
    verify_batch,
    whole_batches_prefix,
)
from .checkpoint import write_recovery_point
from .config import LogConfig
from .durability import Durability
from .epoch_cache import EpochEntry, LeaderEpochCache
from .errors import (
    CorruptBatchError,
    InvalidOffsetError,
    LogClosedError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    StaleEpochError,
)
from .group_commit import GroupCommitter
from .loader import RecoveryReport, load_log, rebuild_producer_state
from .producer_state import (
    DuplicateSequence,
    OutOfOrderSequence,
    ProducerFenced,
    ProducerStateManager,
    SequenceCheck,
    SequenceOk,
    delete_snapshots,
    list_snapshots,
    write_snapshot,
)
from .segment import Segment, headers_between


class AppendResult(NamedTuple):
    """Offsets of an appended batch. ``duplicate`` marks an idempotent resend already in the log
    (offsets are -1 if the original is too old to be remembered)."""

    base_offset: int
    last_offset: int
    duplicate: bool = False

    @property
    def end_offset(self) -> int:
        """The offset after the batch: ``await log.flush_until(result.end_offset)``."""
        return self.last_offset + 1


class BatchTooLargeError(LogError):
    """A batch exceeds ``LogConfig.max_batch_bytes``."""


class PartitionLog:
    """A segmented append-only log of record batches. Open it with :meth:`open`."""

    def __init__(self, path: Path, config: LogConfig) -> None:
        self.path = path
        self.config = config
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._leo = 0
        self._durability = Durability(self, path, config, durable=0, dir_dirty=False)
        self._open_sealed: OrderedDict[Segment, None] = OrderedDict()  # LRU of sealed segments' fds
        self._closed = False
        self._epochs = LeaderEpochCache(None)
        self._latest_epoch = -1
        self._producers = ProducerStateManager(config.producer_window)
        self._listeners: list[Callable[[], None]] = []
        self._producer_replay_from = 0  # raw batches below this offset do not update producer state
        self.recovery = RecoveryReport(0, 0, 0)

    # -- opening -----------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], config: LogConfig | None = None) -> PartitionLog:
        """Open (creating if needed) the log in directory ``path`` and recover it after a crash."""
        log = cls(Path(path), config or LogConfig())
        log._open()
        return log

    def _open(self) -> None:
        loaded = load_log(self.path, self.config, self._producers)
        self._segments = loaded.segments
        self._bases = [segment.base_offset for segment in loaded.segments]
        self._leo = loaded.segments[-1].next_offset
        self._epochs = loaded.epochs
        self._latest_epoch = loaded.epochs.latest_epoch
        self._durability = Durability(
            self, self.path, self.config, durable=self._leo, dir_dirty=loaded.created
        )
        self.recovery = loaded.recovery

    # -- properties --------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._bases[0]

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._leo

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is on disk (in the page cache for ``fsync="never"``)."""
        return self._durability.durable_offset

    @property
    def fsync_rounds(self) -> int:
        """fsync rounds of segment data so far (one per append with ``fsync="always"``, one per
        group with ``"group"``, none with ``"never"`` until the log is closed)."""
        return self._durability.fsync_rounds

    @property
    def latest_epoch(self) -> int:
        return self._latest_epoch

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        return self._epochs.entries

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- appending ---------------------------------------------------------------------------------

    def check_sequence(
        self, producer_id: int, producer_epoch: int, base_sequence: int, count: int
    ) -> SequenceCheck:
        return self._producers.check(producer_id, producer_epoch, base_sequence, count)

    def append(
        self,
        payload: bytes | bytearray | memoryview,
        count: int,
        epoch: int,
        *,
        producer_id: int = -1,
        producer_epoch: int = 0,
        base_sequence: int = NO_SEQUENCE,
        timestamp: int | None = None,
        max_timestamp: int | None = None,
        control: bool = False,
    ) -> AppendResult:
        """Append one batch of ``count`` records (primary side: the log assigns the offsets).

        Raises StaleEpochError for an epoch older than the log's latest, OutOfOrderSequenceError /
        ProducerFencedError for a bad idempotent sequence; returns ``duplicate=True`` for a resend.
        """
        if self._closed:
            raise LogClosedError(str(self.path))
        if epoch != self._latest_epoch:
            self._epochs.check(epoch)
        if producer_id >= 0:
            check = self._producers.check(producer_id, producer_epoch, base_sequence, count)
            if check.__class__ is not SequenceOk:
                if isinstance(check, DuplicateSequence):
                    return AppendResult(check.base_offset, check.last_offset, True)
                if isinstance(check, OutOfOrderSequence):
                    raise OutOfOrderSequenceError(producer_id, check.expected, check.got)
                if isinstance(check, ProducerFenced):
                    raise ProducerFencedError(producer_id, producer_epoch, check.current_epoch)
        else:
            producer_epoch = NO_PRODUCER_EPOCH
        length = HEADER_SIZE + len(payload)
        if length > self.config.max_batch_bytes:
            raise BatchTooLargeError(f"batch of {length} bytes > max_batch_bytes")
        base = self._leo
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        header = encode_header(
            payload,
            base_offset=base,
            record_count=count,
            epoch=epoch,
            attributes=ATTR_CONTROL if control else 0,
            first_timestamp=timestamp,
            max_timestamp=timestamp if max_timestamp is None else max_timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        segment = self._segments[-1]
        if segment.size and segment.size + length > self.config.segment_bytes:
            segment = self._roll()
        if epoch > self._latest_epoch:
            self._epochs.assign(epoch, base)
            self._latest_epoch = epoch
        end = base + count
        segment.append_batch(header, payload, base, end)
        self._leo = end
        if producer_id >= 0:
            self._producers.record(
                producer_id, producer_epoch, base_sequence, base_sequence + count - 1, base, end - 1
            )
        self._after_write(length)
        return AppendResult(base, end - 1)

    def append_raw(self, batches: bytes | bytearray | memoryview) -> AppendResult | None:
        """Append whole batches byte for byte (backup side), as returned by the primary's ``read``.

        Every batch is checked first (magic, length, CRC, offsets continuing from the log end,
        epochs not going back); nothing is written if one fails (CorruptBatchError,
        InvalidOffsetError, StaleEpochError). Returns the offsets covered, None for empty input.
        """
        if self._closed:
            raise LogClosedError(str(self.path))
        view = memoryview(batches)
        size = len(view)
        if size == 0:
            return None
        headers: list[tuple[int, BatchHeader]] = []
        expected = self._leo
        epoch = self._latest_epoch
        pos = 0
        while pos < size:
            header = verify_batch(view, pos)
            if header.base_offset != expected:
                raise InvalidOffsetError(f"batch at offset {header.base_offset}, log end is {expected}")
            if header.length > self.config.max_batch_bytes:
                raise BatchTooLargeError(f"batch of {header.length} bytes > max_batch_bytes")
            if header.epoch < epoch:
                raise StaleEpochError(header.epoch, epoch)
            epoch = header.epoch
            headers.append((pos, header))
            expected = header.next_offset
            pos += header.length
        first = headers[0][1].base_offset
        # Write runs of batches that fit in the current segment, rolling in between.
        run_start = 0
        run_bytes = 0
        run_headers: list[tuple[int, BatchHeader]] = []
        for pos, header in headers:
            segment = self._segments[-1]
            if (
                segment.size + run_bytes
                and segment.size + run_bytes + header.length > self.config.segment_bytes
            ):
                self._write_run(view[run_start:pos], run_headers)
                run_start, run_bytes, run_headers = pos, 0, []
                if self._segments[-1].size:
                    self._roll()
            run_headers.append((pos - run_start, header))
            run_bytes += header.length
        self._write_run(view[run_start:size], run_headers)
        return AppendResult(first, expected - 1)

    def _write_run(self, chunk: memoryview, headers: list[tuple[int, BatchHeader]]) -> None:
        if not headers:
            return
        segment = self._segments[-1]
        start = segment.size
        for _rel, header in headers:
            if header.epoch > self._latest_epoch:
                self._epochs.assign(header.epoch, header.base_offset)
                self._latest_epoch = header.epoch
        segment.write((chunk,), len(chunk))
        replay_from = self._producer_replay_from
        for rel, header in headers:
            segment.index.maybe_add(header.base_offset, start + rel)
            segment.remember(start + rel, header)
            if header.base_offset >= replay_from:
                self._producers.update(header)
        last = headers[-1][1]
        segment.next_offset = last.next_offset
        self._leo = last.next_offset
        self._after_write(len(chunk))

    def _after_write(self, length: int) -> None:
        self._durability.after_write(length)
        for listener in self._listeners:
            listener()

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every append (e.g. to wake long-polling fetches)."""
        self._listeners.append(listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _roll(self) -> Segment:
        old = self._segments[-1]
        old.seal()
        write_snapshot(self.path, self._producers, self._leo)
        segment = Segment(self.path, self._leo, self.config.index_interval_bytes)
        segment.next_offset = self._leo
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._durability.rolled(old)
        self._touch(old)
        return segment

    def _touch(self, segment: Segment) -> None:
        """Note a use of a sealed segment; close the descriptors of the least recently used ones."""
        lru = self._open_sealed
        lru[segment] = None
        lru.move_to_end(segment)
        if len(lru) <= self.config.max_open_sealed_segments or self._durability.sync_running:
            return
        for candidate in list(lru):
            if len(lru) <= self.config.max_open_sealed_segments:
                break
            if candidate is segment or self._durability.is_unsynced(candidate):
                continue
            candidate.release()
            del lru[candidate]

    def roll(self) -> None:
        """Start a new segment now (if the active one holds data)."""
        if self._segments[-1].size:
            self._roll()

    # -- durability (see .durability) -------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far, blocking the caller."""
        self._durability.flush()

    async def flush_until(self, offset: int) -> None:
        """Return once every record below ``offset`` is durable (see the module docstring)."""
        await self._durability.flush_until(offset)

    def committer(self) -> GroupCommitter:
        """The group committer, bound to the running event loop on first use."""
        return self._durability.committer()

    def _drop_segment(self, segment: Segment) -> None:
        self._open_sealed.pop(segment, None)
        self._durability.drop(segment)

    # -- reading -----------------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> Segment:
        return self._segments[bisect_right(self._bases, offset) - 1]

    def read(self, from_offset: int, max_bytes: int, *, max_offset: int | None = None) -> bytes:
        """Whole raw batches starting with the one that holds ``from_offset``.

        At most ``max_bytes`` (but at least one whole batch, so that a reader always progresses),
        never batches starting at or after ``max_offset`` (e.g. the high watermark), and never past
        the end of one segment (call again from the next offset). Returns ``b""`` at the end.
        The first batch may start before ``from_offset``; readers skip records below it.
        """
        if self._closed:
            raise LogClosedError(str(self.path))
        limit = self._leo if max_offset is None else min(max_offset, self._leo)
        if from_offset >= limit:
            if from_offset > self._leo:
                raise OffsetOutOfRangeError(f"offset {from_offset} > log end {self._leo}")
            return b""
        if from_offset < self._bases[0]:
            raise OffsetOutOfRangeError(f"offset {from_offset} < log start {self._bases[0]}")
        segment = self._segment_for(from_offset)
        if segment is not self._segments[-1]:
            self._touch(segment)
        position, header = segment.find_position(from_offset)
        if header is None:
            return b""
        end = segment.size
        if limit < segment.next_offset:
            end = segment.find_position(limit)[0]
        want = min(max_bytes, end - position)
        if want < header.length:
            want = header.length
        data = segment.pread(want, position)
        cut = whole_batches_prefix(data)
        return data if cut == len(data) else data[:cut]

    def iter_batch_headers(
        self, from_offset: int | None = None, to_offset: int | None = None
    ) -> Iterator[BatchHeader]:
        """Headers of the batches from the one holding ``from_offset`` up to ``to_offset`` (excl.)."""
        start = self.log_start_offset if from_offset is None else max(from_offset, self.log_start_offset)
        stop = self._leo if to_offset is None else to_offset
        yield from headers_between(self._segments, start, stop, self._touch)

    def iter_batches(
        self, from_offset: int | None = None, max_bytes: int = 1 << 20
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Decoded ``(header, payload)`` pairs from ``from_offset`` to the log end (reads in chunks)."""
        offset = self.log_start_offset if from_offset is None else from_offset
        while offset < self._leo:
            data = self.read(offset, max_bytes)
            if not data:
                return
            for header, payload in iter_batches(data):
                yield header, payload
                offset = header.next_offset

    # -- truncation and retention ------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or after ``offset``; returns the new log end offset.

        The cut is at a batch boundary: if ``offset`` falls inside a batch, that whole batch goes
        too. Truncating below the log start empties the log at its start offset (use
        :meth:`reset_to` to restart it elsewhere).
        """
        if self._closed:
            raise LogClosedError(str(self.path))
        if offset >= self._leo:
            return self._leo
        offset = max(offset, self.log_start_offset)
        self._durability.begin_truncation()
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._bases.pop()
            self._drop_segment(self._segments.pop())
        segment = self._segments[-1]
        self._open_sealed.pop(segment, None)  # active again
        position, header = segment.find_position(offset)
        new_end = offset if header is None else header.base_offset
        segment.truncate(position, new_end)
        segment.index_path.unlink(missing_ok=True)
        self._durability.truncated(segment, new_end)
        self._leo = new_end
        self._epochs.truncate_from_end(new_end)
        self._latest_epoch = self._epochs.latest_epoch
        rebuild_producer_state(self.path, self._producers, self._segments, new_end, self._touch)
        self._durability.notify_truncated(new_end)
        return new_end

    def delete_before(self, offset: int) -> int:
        """Retention: delete the whole segments whose records all lie below ``offset``.

        If every record is below ``offset`` the active segment is rolled first so that it can go
        too (the log is then empty, starting at its end offset). Returns the new log start offset.
        """
        if self._closed:
            raise LogClosedError(str(self.path))
        offset = min(offset, self._leo)
        if offset >= self._leo and self._segments[-1].size:
            self._roll()
        doomed: list[Segment] = []
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            doomed.append(self._segments.pop(0))
            self._bases.pop(0)
        if not doomed:
            return self.log_start_offset
        for segment in doomed:
            self._drop_segment(segment)
        self._durability.segments_removed()
        self._epochs.truncate_from_start(self.log_start_offset)
        delete_snapshots(self.path, below=self.log_start_offset)
        return self.log_start_offset

    def reset_to(self, offset: int, *, producer_snapshot: bytes | None = None) -> None:
        """Empty the log and restart it at ``offset`` (a backup resyncing from a snapshot).

        ``producer_snapshot`` (from the primary's :meth:`producer_snapshot`, taken at its offset S
        >= ``offset``) becomes the producer state; raw batches below S, fetched afterwards, do not
        update it again (commands up to the snapshot's sequence numbers are ignored).
        """
        if self._closed:
            raise LogClosedError(str(self.path))
        self._durability.begin_truncation()
        for segment in self._segments:
            self._drop_segment(segment)
        self._durability.reset(offset)
        delete_snapshots(self.path, above=-1)
        self._epochs.clear()
        self._latest_epoch = -1
        self._producers.clear()
        self._producer_replay_from = offset
        if producer_snapshot is not None:
            self._producer_replay_from = max(offset, self._producers.load_bytes(producer_snapshot))
            write_snapshot(self.path, self._producers, self._producer_replay_from)
        segment = Segment(self.path, offset, self.config.index_interval_bytes)
        segment.next_offset = offset
        self._segments = [segment]
        self._bases = [offset]
        self._leo = offset
        self._durability.notify_truncated(offset)

    # -- epochs ------------------------------------------------------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch', end_offset)`` as in Kafka's OffsetsForLeaderEpoch (see LeaderEpochCache)."""
        return self._epochs.end_offset_for_epoch(epoch, self._leo)

    def epoch_for_offset(self, offset: int) -> int:
        return self._epochs.epoch_for_offset(offset)

    def begin_epoch(self, epoch: int) -> None:
        """Register ``epoch`` as starting at the log end (a replica becoming primary, Kafka style),
        so that ``end_offset_for_epoch`` answers for it before its first batch. StaleEpochError if
        the log already holds a newer epoch."""
        self._epochs.assign(epoch, self._leo)
        self._latest_epoch = self._epochs.latest_epoch

    def restore_epochs(self, entries: list[EpochEntry]) -> None:
        """Seed the epoch cache of an empty log (a backup restoring a primary's snapshot)."""
        if self._leo != self.log_start_offset:
            raise LogError("restore_epochs needs an empty log")
        self._epochs.clear()
        for entry in entries:
            self._epochs.assign(entry.epoch, max(entry.start_offset, self._leo))
        self._latest_epoch = self._epochs.latest_epoch

    def producer_snapshot(self) -> bytes:
        """The producer state as of the log end offset (for a backup's catch-up)."""
        return self._producers.to_bytes(self._leo)

    def restore_producer_snapshot(self, data: bytes) -> None:
        """Load a producer state into an empty log; it is persisted at the next roll."""
        if self._leo != self.log_start_offset:
            raise LogError("restore_producer_snapshot needs an empty log")
        self._producers.load_bytes(data)
        write_snapshot(self.path, self._producers, self._leo)

    # -- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        """fsync (unless ``fsync="never"``), persist indexes and the recovery point, close files."""
        if self._closed:
            return
        if self.config.fsync != "never":
            self.flush()
        with self._durability.sync_lock:  # a round started by the committer may still be running
            self._closed = True
            self._durability.finish_sync()
            for segment in self._segments:
                segment.seal()
                segment.close()
            self._open_sealed.clear()
            if self.config.fsync == "never":
                write_recovery_point(self.path, self._segments[-1].base_offset, fsync=False)
        self._durability.forget_committer()

    async def aclose(self) -> None:
        """Wait for a running group commit, then :meth:`close`."""
        await self._durability.close_committer()
        self.close()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionLog({str(self.path)!r}, start={self.log_start_offset}, end={self._leo})"


def snapshot_offsets(path: Path) -> list[int]:
    """Offsets of the producer snapshots stored for the log in ``path`` (for tests and tools)."""
    return list_snapshots(path)


__all__ = [
    "AppendResult",
    "BatchTooLargeError",
    "CorruptBatchError",
    "PartitionLog",
    "RecoveryReport",
    "snapshot_offsets",
]
