"""Durability of a partition log: what is on disk, fsync rounds (group commit), the recovery point.

``durable_offset`` is the end (exclusive) of the prefix known to be on disk. With ``fsync="group"``
call ``await flush_until(result.end_offset)`` before acknowledging a produce: every acknowledged
record survives ``kill -9`` and a power cut. ``fsync="always"`` fsyncs in ``append``;
``fsync="never"`` treats the OS page cache as durable (survives ``kill -9`` only).

An fsync round is the group committer's ``Syncable`` protocol: ``begin_sync`` (loop thread)
snapshots what must be synced, ``run_sync`` (worker thread) does the fsyncs, ``end_sync`` (loop
thread) publishes the new durable offset. Segments removed while a round runs (truncation,
retention) are unlinked at once but their descriptors are closed only when the round ends;
``sync_lock`` is held by a running round (the log's ``close`` waits on it).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .checkpoint import fsync_dir, read_recovery_point, write_recovery_point
from .config import LogConfig
from .group_commit import GroupCommitter
from .segment import Segment


class LogView(Protocol):
    """What durability reads of the log it serves."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def active_segment(self) -> Segment: ...

    @property
    def segments(self) -> list[Segment]: ...

    @property
    def closed(self) -> bool: ...


@dataclass(slots=True)
class SyncPlan:
    target: int
    segments: list[Segment]
    sealed: list[Segment]
    generation: int
    recovery_point: int | None
    sync_dir: bool
    unsynced_bytes: int
    done: bool = field(default=False)


class Durability:
    """The unsynced part of one log and the fsync rounds that make it durable."""

    def __init__(self, log: LogView, path: Path, config: LogConfig, *, durable: int, dir_dirty: bool) -> None:
        self._log = log
        self.path = path
        self.config = config
        self._durable = durable
        self._unsynced_bytes = 0
        self._unsynced_sealed: list[Segment] = []
        self._dir_dirty = dir_dirty
        self._generation = 0  # bumped by truncations: a round planned before one publishes nothing
        self.sync_lock = threading.Lock()  # held by a running fsync round; close() waits on it
        self._rp_lock = threading.Lock()  # orders recovery-point writes against truncations
        self._sync_running = False
        self._deferred_close: list[Segment] = []
        self._committer: GroupCommitter | None = None
        self.fsync_rounds = 0  # rounds that fsynced segment data (metrics: what --fsync does)

    # -- state -------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def durable_offset(self) -> int:
        return self._log.log_end_offset if self.config.fsync == "never" else self._durable

    @property
    def sync_running(self) -> bool:
        return self._sync_running

    def is_unsynced(self, segment: Segment) -> bool:
        """A sealed segment still waiting for its fsync (its descriptor must stay open)."""
        return segment in self._unsynced_sealed

    def write_recovery_point(self, offset: int) -> None:
        write_recovery_point(self.path, offset, fsync=self.config.fsync != "never")

    # -- what the log tells it ---------------------------------------------------------------------

    def after_write(self, length: int) -> None:
        """``length`` bytes were appended: fsync now, or let the group committer know."""
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

    def rolled(self, sealed: Segment) -> None:
        """``sealed`` stopped being the active segment; a new segment file exists."""
        if self.config.fsync != "never":
            self._unsynced_sealed.append(sealed)
        self._dir_dirty = True

    def segments_removed(self) -> None:
        """Segment files were deleted (retention): the directory must be fsynced."""
        self._dir_dirty = True

    def drop(self, segment: Segment) -> None:
        """Delete a segment's files; close it now or, during an fsync round, when the round ends."""
        if segment in self._unsynced_sealed:
            self._unsynced_sealed.remove(segment)
        segment.unlink()
        if self._sync_running:
            self._deferred_close.append(segment)
        else:
            segment.close()

    def begin_truncation(self) -> None:
        """Records are about to be removed: a running round must not publish its target."""
        self._generation += 1

    def truncated(self, active: Segment, new_end: int) -> None:
        """The log now ends at ``new_end`` inside ``active`` (which is active again)."""
        if active in self._unsynced_sealed:
            self._unsynced_sealed.remove(active)
        with self._rp_lock:
            self.write_recovery_point(min(read_recovery_point(self.path), active.base_offset))
        self._durable = min(self._durable, new_end)
        self._dir_dirty = True

    def reset(self, offset: int) -> None:
        """The log was emptied to restart at ``offset``."""
        self._unsynced_sealed = []
        with self._rp_lock:
            self.write_recovery_point(offset)
        self._durable = min(self._durable, offset)
        self._dir_dirty = True

    def notify_truncated(self, new_end: int) -> None:
        """Fail the waiters for offsets the truncation removed."""
        if self._committer is not None:
            self._committer.on_truncate(new_end)

    # -- flushing ----------------------------------------------------------------------------------

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

    async def close_committer(self) -> None:
        """Wait for a running group commit."""
        if self._committer is not None:
            await self._committer.close()

    def forget_committer(self) -> None:
        self._committer = None

    # -- one fsync round (the group committer's Syncable protocol) ---------------------------------

    def begin_sync(self) -> SyncPlan | None:
        log = self._log
        leo = log.log_end_offset
        if log.closed or (self._durable >= leo and not self._unsynced_sealed and not self._dir_dirty):
            return None
        sealed = list(self._unsynced_sealed)
        active = log.active_segment
        plan = SyncPlan(
            target=leo,
            segments=[*sealed, active],
            sealed=sealed,
            generation=self._generation,
            recovery_point=active.base_offset if sealed else None,
            sync_dir=self._dir_dirty,
            unsynced_bytes=self._unsynced_bytes,
        )
        self._unsynced_sealed = []
        self._dir_dirty = False
        self._unsynced_bytes = 0
        self._sync_running = True
        return plan

    def run_sync(self, plan: SyncPlan) -> None:
        """The fsyncs themselves (safe to run in a worker thread)."""
        with self.sync_lock:
            for segment in plan.segments:
                segment.fsync()
            if plan.segments:
                self.fsync_rounds += 1
            if plan.sync_dir:
                fsync_dir(self.path)
            if plan.recovery_point is not None:
                with self._rp_lock:
                    if plan.generation == self._generation:
                        self.write_recovery_point(plan.recovery_point)
            plan.done = True

    def end_sync(self, plan: SyncPlan) -> None:
        if plan.generation == self._generation and plan.target > self._durable:
            self._durable = min(plan.target, self._log.log_end_offset)
        self.finish_sync()

    def abort_sync(self, plan: SyncPlan) -> None:
        live = self._log.segments
        self._unsynced_sealed[:0] = [s for s in plan.sealed if s in live]
        self._dir_dirty = self._dir_dirty or plan.sync_dir
        self._unsynced_bytes += plan.unsynced_bytes
        self.finish_sync()

    def finish_sync(self) -> None:
        """The round is over: close the segments dropped while it ran."""
        self._sync_running = False
        for segment in self._deferred_close:
            segment.close()
        self._deferred_close = []
