"""The MM's view of a partition log: stored batches read back parsed, the visible end, group commit.

A thin adapter over ``hybridmq.broker.log.PartitionLog`` (owned by the log package): it turns raw
batches into ``StoredBatch`` tuples and keeps a byte-bounded cache of the most recent batches so
that live consumers are fed from memory, not from disk. It writes nothing itself: every batch
enters a primary's log through ``PartitionPrimary.append`` (fencing, epoch, in-sync count), and
the partition host tells the storage what was appended (``appended``, ``note_control``).
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

from hybridmq.broker.destinations.batch_payload import StoredBatch, unpack_payload
from hybridmq.broker.log.batch import iter_batches
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log.partition_log import AppendResult, PartitionLog

READ_BYTES = 1024 * 1024


class PartitionStorage:
    def __init__(self, log: PartitionLog, cache_bytes: int) -> None:
        self.log = log
        self.cache_bytes = cache_bytes
        self._bases: list[int] = []
        self._cache: list[StoredBatch] = []
        self._cached_bytes = 0
        self._readahead: list[StoredBatch] = []
        self._readahead_bases: list[int] = []
        # End of what consumers may see: flushed (and, with replication, committed) records only.
        self.visible_end = 0
        # Control batches (cursor snapshots) by base offset, with running record counts: the
        # backlog counts user messages only, and offsets count control records too.
        self._control_bases: list[int] = []
        self._control_totals: list[int] = []

    @classmethod
    def open(cls, path: Path, config: LogConfig, cache_bytes: int = 16 * 1024 * 1024) -> PartitionStorage:
        return cls(PartitionLog.open(path, config), cache_bytes)

    @property
    def high_watermark(self) -> int:
        """What readers (consumers, FETCH, the backlog) see the log end as: the visible end, never
        past the log's end (a truncation after a failover can take the end below it)."""
        return min(self.visible_end, self.end_offset)

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    def appended(
        self,
        result: AppendResult,
        dest: str,
        count: int,
        blob: bytes,
        flags: int,
        expiry: int,
        extra: dict[str, Any] | None,
        timestamp: int,
    ) -> None:
        """A data batch the partition's primary appended (``PartitionPrimary.append``, the one way
        into a primary's log): kept in the cache for live consumers (a resend stored before is not)."""
        if not result.duplicate:
            self._remember(
                StoredBatch(result.base_offset, count, dest, flags, expiry, extra, blob, False, timestamp)
            )

    def note_control(self, base: int, count: int) -> None:
        """Remember a control batch (appended here, or found by recovery), in offset order."""
        if self._control_bases and base <= self._control_bases[-1]:
            return  # seen already (recovery after appends)
        total = self._control_totals[-1] if self._control_totals else 0
        self._control_bases.append(base)
        self._control_totals.append(total + count)

    def control_records_between(self, start: int, end: int) -> int:
        """Control records of the batches whose base lies in ``[start, end)``."""
        bases, totals = self._control_bases, self._control_totals
        lo = bisect.bisect_left(bases, start)
        hi = bisect.bisect_left(bases, end)
        if hi <= lo:
            return 0
        return totals[hi - 1] - (totals[lo - 1] if lo > 0 else 0)

    async def flush(self, offset: int | None = None) -> None:
        await self.log.flush_until(self.end_offset if offset is None else offset)

    def _remember(self, batch: StoredBatch) -> None:
        self._bases.append(batch.base)
        self._cache.append(batch)
        self._cached_bytes += batch.size
        while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
            old = self._cache.pop(0)
            self._bases.pop(0)
            self._cached_bytes -= old.size

    def batch_at(self, offset: int) -> StoredBatch | None:
        """The first visible batch whose records reach past ``offset`` (None at the visible end);
        control batches may be passed over (the cache holds data batches only)."""
        batch = self._batch_reaching_past(offset) if offset < self.visible_end else None
        # The batch after a control record may be appended but not committed yet: not visible.
        return batch if batch is not None and batch.next_offset <= self.visible_end else None

    def _batch_reaching_past(self, offset: int) -> StoredBatch | None:
        bases = self._bases
        if bases and offset >= bases[0]:
            i = bisect.bisect_right(bases, offset) - 1
            if i >= 0:
                b = self._cache[i]
                if b.next_offset > offset:
                    return b
                if i + 1 < len(bases):
                    return self._cache[i + 1]
        ra = self._readahead
        if not (ra and ra[0].base <= offset < ra[-1].next_offset):
            # Found by bisection: a consumer reading a backlog of small batches asks for each of
            # the ~10,000 a read holds (a scan from the start was quadratic: seconds of a blocked
            # event loop on a new primary, whose cache is empty, and the lease lapsed).
            ra = self._readahead = self.read(offset, READ_BYTES)
            self._readahead_bases = [b.base for b in ra]
        i = bisect.bisect_right(self._readahead_bases, offset) - 1
        for batch in ra[max(i, 0) : max(i, 0) + 2]:
            if batch.next_offset > offset:
                return batch
        return None

    def read(self, offset: int, max_bytes: int) -> list[StoredBatch]:
        raw = self.log.read(max(offset, self.start_offset), max_bytes)
        return list(parse_batches(raw))

    def scan(self, from_offset: int = 0) -> Any:
        """Iterate every batch from ``from_offset`` to the end (recovery)."""
        offset = max(from_offset, self.start_offset)
        end = self.end_offset
        while offset < end:
            batches = self.read(offset, 4 * READ_BYTES)
            if not batches:
                break
            yield from batches
            offset = batches[-1].next_offset

    def close(self) -> None:
        self.log.close()

    async def aclose(self) -> None:
        await self.log.aclose()


def parse_batches(raw: bytes | memoryview) -> Any:
    for header, payload in iter_batches(raw):
        if header.is_control:
            yield StoredBatch(
                header.base_offset,
                header.record_count,
                "",
                0,
                0,
                None,
                bytes(payload),
                True,
                header.max_timestamp,
            )
        else:
            dest, flags, expiry, extra, blob = unpack_payload(payload)
            yield StoredBatch(
                header.base_offset,
                header.record_count,
                dest,
                flags,
                expiry,
                extra,
                blob,
                False,
                header.max_timestamp,
            )
