"""The partition log: segments, offsets, epochs, producer state, durability.

Files in the partition directory::

    00000000000000000000.log        segment, named by the offset of its first record
    00000000000000000000.index      sparse offset index of a sealed segment (rebuildable)
    00000000000000001000.snapshot   producer state as of offset 1000 (written at each roll)
    leader-epoch-checkpoint         epoch -> start offset
    recovery-point                  every segment below this base offset was fsynced and sealed

Threading: a ``PartitionLog`` is used from one thread (the event loop's). Only the fsync of group
commit runs in a worker thread. Segments removed while it runs (truncation, retention) are
unlinked at once but their descriptors are closed only when the fsync round ends; ``close`` waits
for a running round (``aclose`` does so without blocking the loop).

Durability: ``durable_offset`` is the end (exclusive) of the prefix known to be on disk. With
``fsync="group"`` call ``await flush_until(result.end_offset)`` before acknowledging a produce:
every acknowledged record survives ``kill -9`` and a power cut. ``fsync="always"`` fsyncs in
``append``; ``fsync="never"`` treats the OS page cache as durable (survives ``kill -9`` only).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
from .checkpoint import fsync_dir, write_atomic
from .config import LogConfig
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
from .producer_state import (
    DuplicateSequence,
    OutOfOrderSequence,
    ProducerFenced,
    ProducerStateManager,
    SequenceCheck,
    SequenceOk,
    delete_snapshots,
    list_snapshots,
    load_latest_snapshot,
    write_snapshot,
)
from .recovery import load_trusted_segment, recover_segment
from .segment import Segment, list_segment_bases

EPOCH_FILE = "leader-epoch-checkpoint"
RECOVERY_POINT_FILE = "recovery-point"


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


class RecoveryReport(NamedTuple):
    segments_scanned: int
    bytes_truncated: int
    segments_deleted: int


class BatchTooLargeError(LogError):
    """A batch exceeds ``LogConfig.max_batch_bytes``."""


@dataclass(slots=True)
class _SyncPlan:
    target: int
    segments: list[Segment]
    sealed: list[Segment]
    generation: int
    recovery_point: int | None
    sync_dir: bool
    unsynced_bytes: int
    done: bool = field(default=False)


class PartitionLog:
    """A segmented append-only log of record batches. Open it with :meth:`open`."""

    def __init__(self, path: Path, config: LogConfig) -> None:
        self.path = path
        self.config = config
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._leo = 0
        self._durable = 0
        self._unsynced_bytes = 0
        self._unsynced_sealed: list[Segment] = []
        self._dir_dirty = False
        self._generation = 0
        self._sync_lock = threading.Lock()  # held by a running fsync round; close() waits on it
        self._rp_lock = threading.Lock()  # orders recovery-point writes against truncations
        self._sync_running = False
        self._deferred_close: list[Segment] = []
        self._open_sealed: OrderedDict[Segment, None] = OrderedDict()  # LRU of sealed segments' fds
        self._closed = False
        self._epochs = LeaderEpochCache(None)
        self._latest_epoch = -1
        self._producers = ProducerStateManager(config.producer_window)
        self._committer: GroupCommitter | None = None
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
        self.path.mkdir(parents=True, exist_ok=True)
        for name in os.listdir(self.path):
            if name.endswith(".tmp"):
                (self.path / name).unlink()
        fsync = self.config.fsync != "never"
        try:
            self._epochs = LeaderEpochCache(self.path / EPOCH_FILE, fsync=fsync)
        except (ValueError, OSError):
            (self.path / EPOCH_FILE).unlink()
            self._epochs = LeaderEpochCache(self.path / EPOCH_FILE, fsync=fsync)
        bases = list_segment_bases(self.path)
        if not bases:
            self._segments = [Segment(self.path, 0, self.config.index_interval_bytes)]
            self._bases = [0]
            self._epochs.clear()
            self._dir_dirty = True
            self._write_recovery_point(0)
            return
        recovery_point = self._read_recovery_point()
        # Producer state: the newest snapshot, then the batches after it (checked below in case the
        # crash took records the snapshot had seen).
        snapshot_offset = load_latest_snapshot(self.path, self._producers, 1 << 62)
        replay_from = bases[0] if snapshot_offset is None else snapshot_offset

        def on_batch(header: BatchHeader) -> None:
            if header.base_offset >= replay_from:
                self._producers.update(header)
            if header.epoch > self._epochs.latest_epoch:
                self._epochs.assign(header.epoch, header.base_offset)

        scanned = truncated = deleted = 0
        segments: list[Segment] = []
        for i, base in enumerate(bases):
            segment = Segment(self.path, base, self.config.index_interval_bytes)
            if segments and segments[-1].next_offset != base:
                # A gap: an earlier segment lost its tail, so later ones cannot be kept.
                for base_to_drop in bases[i:]:
                    Segment(self.path, base_to_drop, self.config.index_interval_bytes).delete()
                    deleted += 1
                segment.close()
                break
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            callback = on_batch if (next_base is None or next_base > replay_from) else None
            if next_base is not None and next_base <= recovery_point:
                load_trusted_segment(segment, max_batch_bytes=self.config.max_batch_bytes, on_batch=callback)
            else:
                scanned += 1
                truncated += recover_segment(
                    segment, max_batch_bytes=self.config.max_batch_bytes, on_batch=callback
                )
            segments.append(segment)
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self._durable = self._leo
        self._epochs.truncate_from_end(self._leo)
        self._epochs.truncate_from_start(self.log_start_offset)
        self._latest_epoch = self._epochs.latest_epoch
        if snapshot_offset is not None and snapshot_offset > self._leo:
            self._rebuild_producer_state(self._leo)  # the snapshot saw records the crash took
        delete_snapshots(self.path, above=self._leo)
        # What survived is durable from now on (after kill -9 it may still be only in the page
        # cache). The active segment will take new, unsynced data: scan it after the next crash.
        if self.config.fsync != "never":
            for segment in segments:
                if segment.base_offset >= recovery_point or segment is segments[-1]:
                    segment.fsync()
            fsync_dir(self.path)
        self._write_recovery_point(self.active_segment.base_offset)
        for segment in segments[:-1]:
            segment.release()  # reopened on demand
        self.recovery = RecoveryReport(scanned, truncated, deleted)

    def _read_recovery_point(self) -> int:
        try:
            return int((self.path / RECOVERY_POINT_FILE).read_text().strip())
        except (OSError, ValueError):
            return 0

    def _write_recovery_point(self, offset: int) -> None:
        write_atomic(
            self.path / RECOVERY_POINT_FILE, f"{offset}\n".encode(), fsync=self.config.fsync != "never"
        )

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
        return self._leo if self.config.fsync == "never" else self._durable

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
            if header.base_offset >= replay_from:
                self._producers.update(header)
        last = headers[-1][1]
        segment.next_offset = last.next_offset
        self._leo = last.next_offset
        self._after_write(len(chunk))

    def _after_write(self, length: int) -> None:
        self._unsynced_bytes += length
        mode = self.config.fsync
        if mode == "always":
            self.flush()
        elif mode == "group":
            committer = self._committer
            if committer is None or committer.loop.is_closed():
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    committer = None  # no event loop: synced by flush() or close()
                else:
                    committer = self.committer()  # background syncs after max_delay_ms
            if committer is not None:
                committer.notify_append(self._unsynced_bytes)
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
        if self.config.fsync != "never":
            self._unsynced_sealed.append(old)
        self._touch(old)
        self._dir_dirty = True
        return segment

    def _touch(self, segment: Segment) -> None:
        """Note a use of a sealed segment; close the descriptors of the least recently used ones."""
        lru = self._open_sealed
        lru[segment] = None
        lru.move_to_end(segment)
        if len(lru) <= self.config.max_open_sealed_segments or self._sync_running:
            return
        for candidate in list(lru):
            if len(lru) <= self.config.max_open_sealed_segments:
                break
            if candidate is segment or candidate in self._unsynced_sealed:
                continue
            candidate.release()
            del lru[candidate]

    def roll(self) -> None:
        """Start a new segment now (if the active one holds data)."""
        if self._segments[-1].size:
            self._roll()

    # -- durability --------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far, blocking the caller."""
        plan = self.begin_sync()
        if plan is None:
            return
        try:
            self.run_sync(plan)
        except BaseException:
            self.abort_sync(plan)
            raise
        self.end_sync(plan)

    async def flush_until(self, offset: int) -> None:
        """Return once every record below ``offset`` is durable (see the module docstring)."""
        if offset <= self.durable_offset:
            return
        if self.config.fsync != "group":
            self.flush()
            return
        await self.committer().flush_until(offset)

    def committer(self) -> GroupCommitter:
        """The group committer, bound to the running event loop on first use."""
        if self._committer is None or self._committer.loop.is_closed():
            self._committer = GroupCommitter(
                self,
                max_delay_ms=self.config.group_commit_max_delay_ms,
                max_bytes=self.config.group_commit_max_bytes,
            )
        return self._committer

    def begin_sync(self) -> _SyncPlan | None:
        if self._closed or (self._durable >= self._leo and not self._unsynced_sealed and not self._dir_dirty):
            return None
        sealed = list(self._unsynced_sealed)
        plan = _SyncPlan(
            target=self._leo,
            segments=[*sealed, self._segments[-1]],
            sealed=sealed,
            generation=self._generation,
            recovery_point=self._segments[-1].base_offset if sealed else None,
            sync_dir=self._dir_dirty,
            unsynced_bytes=self._unsynced_bytes,
        )
        self._unsynced_sealed = []
        self._dir_dirty = False
        self._unsynced_bytes = 0
        self._sync_running = True
        return plan

    def run_sync(self, plan: _SyncPlan) -> None:
        """The fsyncs themselves (safe to run in a worker thread)."""
        with self._sync_lock:
            for segment in plan.segments:
                segment.fsync()
            if plan.sync_dir:
                fsync_dir(self.path)
            if plan.recovery_point is not None:
                with self._rp_lock:
                    if plan.generation == self._generation:
                        self._write_recovery_point(plan.recovery_point)
            plan.done = True

    def end_sync(self, plan: _SyncPlan) -> None:
        if plan.generation == self._generation and plan.target > self._durable:
            self._durable = min(plan.target, self._leo)
        self._finish_sync()

    def abort_sync(self, plan: _SyncPlan) -> None:
        self._unsynced_sealed[:0] = [s for s in plan.sealed if s in self._segments]
        self._dir_dirty = self._dir_dirty or plan.sync_dir
        self._unsynced_bytes += plan.unsynced_bytes
        self._finish_sync()

    def _finish_sync(self) -> None:
        self._sync_running = False
        for segment in self._deferred_close:
            segment.close()
        self._deferred_close = []

    def _drop_segment(self, segment: Segment) -> None:
        """Delete a segment's files; close it now or, during an fsync round, when the round ends."""
        if segment in self._unsynced_sealed:
            self._unsynced_sealed.remove(segment)
        self._open_sealed.pop(segment, None)
        segment.unlink()
        if self._sync_running:
            self._deferred_close.append(segment)
        else:
            segment.close()

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
        for segment in list(self._segments):
            if segment.next_offset <= start or segment.base_offset >= stop:
                continue
            if segment is not self._segments[-1]:
                self._touch(segment)
            position = segment.find_position(start)[0] if segment.base_offset < start else 0
            for _, header in segment.iter_headers(position):
                if header.base_offset >= stop:
                    return
                yield header

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
        self._generation += 1
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._bases.pop()
            self._drop_segment(self._segments.pop())
        segment = self._segments[-1]
        self._open_sealed.pop(segment, None)  # active again
        position, header = segment.find_position(offset)
        new_end = offset if header is None else header.base_offset
        segment.truncate(position, new_end)
        if segment in self._unsynced_sealed:
            self._unsynced_sealed.remove(segment)
        segment.index_path.unlink(missing_ok=True)
        with self._rp_lock:
            self._write_recovery_point(min(self._read_recovery_point(), segment.base_offset))
        self._leo = new_end
        self._durable = min(self._durable, new_end)
        self._dir_dirty = True
        self._epochs.truncate_from_end(new_end)
        self._latest_epoch = self._epochs.latest_epoch
        self._rebuild_producer_state(new_end)
        if self._committer is not None:
            self._committer.on_truncate(new_end)
        return new_end

    def _rebuild_producer_state(self, end: int) -> None:
        delete_snapshots(self.path, above=end)
        snapshot = load_latest_snapshot(self.path, self._producers, end)
        start = self.log_start_offset if snapshot is None else snapshot
        for header in self.iter_batch_headers(start, end):
            if header.base_offset >= start:
                self._producers.update(header)

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
        self._dir_dirty = True
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
        self._generation += 1
        for segment in self._segments:
            self._drop_segment(segment)
        self._unsynced_sealed = []
        with self._rp_lock:
            self._write_recovery_point(offset)
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
        self._durable = min(self._durable, offset)
        self._dir_dirty = True
        if self._committer is not None:
            self._committer.on_truncate(offset)

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
        with self._sync_lock:  # a round started by the committer may still be running
            self._closed = True
            self._finish_sync()
            for segment in self._segments:
                segment.seal()
                segment.close()
            self._open_sealed.clear()
            if self.config.fsync == "never":
                self._write_recovery_point(self._segments[-1].base_offset)
        self._committer = None

    async def aclose(self) -> None:
        """Wait for a running group commit, then :meth:`close`."""
        if self._committer is not None:
            await self._committer.close()
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
