"""The backup side of one partition: a fetch loop that copies the primary's log byte for byte.

::

    fetcher = BackupFetcher(log, partition="orders-0", replica_id="mm-1", epoch=7,
                            transport=transport_to_primary)
    task = asyncio.create_task(fetcher.run())
    ...
    fetcher.update(epoch=8, transport=transport_to_new_primary)   # assignment changed
    ...
    await fetcher.stop()

``transport`` is any object with the three async methods of :class:`PrimaryTransport` (the MM
server implements it over its connection to the primary; tests use :class:`LocalTransport`).
Transport exceptions (``OSError``, ``ConnectionError``, ``TimeoutError``, ``ReplicationError``)
are retried after ``retry_backoff_ms``.

The loop:

1. **Truncate** (at start and after every epoch change): ask the primary for the end of our
   latest epoch in its log (``end_offset_for_epoch``), walking down our epochs until we share one,
   and cut our log there: whatever an old primary wrote that the new one never had goes.
2. **Catch up from a snapshot** when our log ends before the primary's log start (new backup,
   or one away longer than retention): restart the log at the primary's log start with the
   primary's producer sequence table, hand ``app_state`` to ``on_snapshot``, then fetch
   the tail. A marker file in the log directory makes an interrupted catch-up start over.
3. **Fetch** from our log end, ``append_raw`` what comes (CRC and offset continuity checked: an
   offset that does not follow is an error), and repeat. Each fetch tells the
   primary our log end; the primary decides when we are in sync again.

A fetch with an older epoch than the primary's is refused (``STALE_EPOCH``): the fetcher then
waits for :meth:`update` with the new epoch. A primary at an older epoch answers ``NOT_PRIMARY``
for our newer epoch; we retry until the real primary is wired in by :meth:`update`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Protocol

from hybridmq.broker.log import (
    UNDEFINED_EPOCH,
    CorruptBatchError,
    InvalidOffsetError,
    PartitionLog,
    StaleEpochError,
)

from .errors import ErrorCode, ReplicationError, error_for
from .messages import (
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    FetchRequest,
    FetchResponse,
    Snapshot,
    SnapshotRequest,
)

LOG = logging.getLogger(__name__)
CATCHUP_MARKER = "catchup-in-progress"


class PrimaryTransport(Protocol):
    async def fetch(self, request: FetchRequest) -> FetchResponse: ...

    async def end_offset_for_epoch(self, request: EpochEndOffsetRequest) -> EpochEndOffsetResponse: ...

    async def snapshot(self, request: SnapshotRequest) -> Snapshot: ...


class FetcherState(StrEnum):
    TRUNCATING = "truncating"
    CATCHING_UP = "catching_up"
    FETCHING = "fetching"
    FENCED = "fenced"  # our epoch is old: waiting for update()
    STOPPED = "stopped"


OnSnapshot = Callable[[Snapshot], Awaitable[None] | None]


class BackupFetcher:
    def __init__(
        self,
        log: PartitionLog,
        *,
        partition: str,
        replica_id: str,
        epoch: int,
        transport: PrimaryTransport,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        retry_backoff_ms: float = 100,
        sync_before_fetch: bool = False,
        on_snapshot: OnSnapshot | None = None,
    ) -> None:
        self.log = log
        self.partition = partition
        self.replica_id = replica_id
        self.epoch = epoch
        self.transport = transport
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.sync_before_fetch = sync_before_fetch
        self.on_snapshot = on_snapshot
        self.state = FetcherState.TRUNCATING
        self.high_watermark = -1
        self.primary_log_end_offset = -1
        self.fetches = 0
        self.snapshots = 0
        self.last_error: str | None = None
        self._stopping = False
        self._catchup_until = 0
        self._wakeup = asyncio.Event()
        self._marker = log.path / CATCHUP_MARKER
        if self._marker.exists():
            self.state = FetcherState.CATCHING_UP

    @property
    def caught_up(self) -> bool:
        """Our log reached the primary's log end as of the last fetch response."""
        return (
            self.state is FetcherState.FETCHING
            and self.log.log_end_offset >= self.primary_log_end_offset >= 0
        )

    def update(self, *, epoch: int, transport: PrimaryTransport | None = None) -> None:
        """A new assignment: new epoch and/or new primary. Truncation runs before the next fetch."""
        if epoch < self.epoch:
            return
        if epoch > self.epoch or transport is not None:
            self.epoch = epoch
            if transport is not None:
                self.transport = transport
            if self.state is not FetcherState.CATCHING_UP:
                self.state = FetcherState.TRUNCATING
            self._wakeup.set()

    async def run(self) -> None:
        """Fetch until :meth:`stop`. Never raises for transport or protocol errors."""
        while not self._stopping:
            try:
                await self.step()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise  # stopped by its owner
                # A request of ours was cancelled by someone else (a batched fetch replaced by a
                # newer one, say): not a reason to stop copying the partition for good.
                self.last_error = "fetch cancelled"
                await self._sleep(self.retry_backoff)
            except (ReplicationError, OSError, TimeoutError, CorruptBatchError) as exc:
                self.last_error = repr(exc)
                LOG.debug("%s: fetch from primary failed: %r", self.partition, exc)
                await self._sleep(self.retry_backoff)
            except Exception as exc:
                # A backup whose fetch loop ended holds the in-sync set and every acknowledgement
                # of the partition back, without a word: say why, and go on fetching.
                self.last_error = repr(exc)
                LOG.exception("%s: fetch from primary failed unexpectedly", self.partition)
                await self._sleep(max(self.retry_backoff, 0.5))
        self.state = FetcherState.STOPPED

    async def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()

    async def step(self) -> None:
        """One round of the loop (exposed for deterministic tests)."""
        if self.state is FetcherState.FENCED:
            await self._sleep(None)
            return
        if self.state is FetcherState.CATCHING_UP:
            await self._catch_up()
        elif self.state is FetcherState.TRUNCATING:
            await self._truncate()
        else:
            await self._fetch()

    async def _sleep(self, seconds: float | None) -> None:
        self._wakeup.clear()
        try:
            async with asyncio.timeout(seconds):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def _handle_error(self, error: ErrorCode, log_start_offset: int) -> None:
        if error is ErrorCode.STALE_EPOCH:
            LOG.info(
                "%s: epoch %d fenced by the primary; waiting for a new assignment", self.partition, self.epoch
            )
            self.state = FetcherState.FENCED
            return
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= self.log.log_end_offset < log_start_offset:
                self.state = FetcherState.CATCHING_UP
            else:
                self.state = FetcherState.TRUNCATING
            return
        raise error_for(error, f"{self.partition}: primary answered {error.value}")

    async def _truncate(self) -> None:
        log = self.log
        leader_epoch = log.latest_epoch
        for _ in range(1000):
            response = await self.transport.end_offset_for_epoch(
                EpochEndOffsetRequest(self.partition, self.replica_id, self.epoch, leader_epoch)
            )
            if response.error is not ErrorCode.NONE:
                self._handle_error(response.error, response.log_start_offset)
                return
            if leader_epoch == UNDEFINED_EPOCH:
                target = log.log_end_offset  # no epochs here: nothing written in any epoch to check
                if log.log_end_offset > log.log_start_offset:
                    target = min(target, max(response.log_end_offset, 0))
                break
            if response.leader_epoch == UNDEFINED_EPOCH:
                target = log.log_start_offset  # the primary knows none of our epochs: start over
                break
            mine, my_end = log.end_offset_for_epoch(response.leader_epoch)
            if mine == response.leader_epoch or mine == UNDEFINED_EPOCH:
                target = min(response.end_offset, my_end) if mine != UNDEFINED_EPOCH else response.end_offset
                break
            leader_epoch = mine  # we never had the primary's epoch: ask about our previous one
        else:
            raise ReplicationError(f"{self.partition}: epoch negotiation did not converge")
        if target < log.log_end_offset:
            LOG.info(
                "%s: truncating %d -> %d for epoch %d", self.partition, log.log_end_offset, target, self.epoch
            )
            log.truncate_to(target)
        if log.log_end_offset < response.log_start_offset or (
            log.log_end_offset == log.log_start_offset and log.log_start_offset < response.log_start_offset
        ):
            self.state = FetcherState.CATCHING_UP
        else:
            self.state = FetcherState.FETCHING

    async def _catch_up(self) -> None:
        snapshot = await self.transport.snapshot(SnapshotRequest(self.partition, self.replica_id, self.epoch))
        if snapshot.error is not ErrorCode.NONE:
            if snapshot.error is ErrorCode.STALE_EPOCH:
                self.state = FetcherState.FENCED
                return
            raise error_for(snapshot.error, f"{self.partition}: snapshot refused: {snapshot.error.value}")
        LOG.info(
            "%s: catching up from a snapshot at %d (log start %d)",
            self.partition,
            snapshot.snapshot_offset,
            snapshot.log_start_offset,
        )
        self._marker.write_text(f"{snapshot.snapshot_offset}\n")
        self.log.reset_to(snapshot.log_start_offset, producer_snapshot=snapshot.producer_state)
        if self.on_snapshot is not None:
            result = self.on_snapshot(snapshot)
            if result is not None:
                await result
        self._catchup_until = snapshot.snapshot_offset
        self.high_watermark = min(snapshot.high_watermark, self.log.log_end_offset)
        self.snapshots += 1
        self.state = FetcherState.FETCHING

    async def _fetch(self) -> None:
        log = self.log
        if self.sync_before_fetch:
            await log.flush_until(log.log_end_offset)
        request = FetchRequest(
            self.partition, self.replica_id, self.epoch, log.log_end_offset, self.max_bytes, self.max_wait_ms
        )
        response = await self.transport.fetch(request)
        self.fetches += 1
        if response.error is not ErrorCode.NONE:
            self._handle_error(response.error, response.log_start_offset)
            return
        if response.epoch != self.epoch:
            # The primary runs an epoch we have not been told about: let the assignment catch up.
            raise error_for(ErrorCode.UNKNOWN_EPOCH, f"{self.partition}: primary at epoch {response.epoch}")
        if response.records:
            try:
                log.append_raw(response.records)
            except (InvalidOffsetError, StaleEpochError) as exc:
                LOG.warning("%s: fetched batches do not follow our log (%s); truncating", self.partition, exc)
                self.state = FetcherState.TRUNCATING
                return
        self.primary_log_end_offset = response.log_end_offset
        self.high_watermark = min(response.high_watermark, log.log_end_offset)
        if self._marker.exists() and log.log_end_offset >= self._catchup_until:
            self._marker.unlink()
