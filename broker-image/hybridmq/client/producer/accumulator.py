"""The record accumulator: records gather per (destination, ttl) into batches.

A batch is handed to the sender when it reaches ``batch_bytes``, after ``linger_ms``, or - when
nothing is in flight - at the end of the current event-loop iteration: waiting for more records
buys nothing when the connection is idle, and an application that awaits each ``send`` has all its
next records appended by then. Each batch has one future, resolved with ``(partition, base offset)``
when the batch is acknowledged: a record's offset is the base plus its index.

A batch also ends before a record that would take it past what one frame to the CM carries (the
``max_frame`` its HELLO_OK announced, less ``FRAME_MARGIN``), and a record that alone would is
refused at once (``RecordTooLarge``): the CM closes a session on an oversized frame, and a batch
resent after the reconnection would be refused again, for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import time as _time
from typing import Any

from hybridmq.api.frames import DEFAULT_MAX_FRAME, ErrorCode
from hybridmq.client.connection import ClientError

MAX_RECORD_BYTES = 8 * 1024 * 1024
RECORD_OVERHEAD = 16  # bytes counted per record beyond its value (flow control, batch size)
FRAME_MARGIN = 4096  # a PRODUCE frame's bytes beyond its records' values (names, ids, headers)


class RecordTooLarge(ClientError, ValueError):
    """A record that cannot travel in one batch: ``send_stream`` sends large messages in chunks."""

    def __init__(self, size: int, limit: int, what: str) -> None:
        super().__init__(
            ErrorCode.FRAME_TOO_LARGE,
            f"a message of {size} bytes exceeds {limit} bytes, {what}: send it with send_stream",
        )


BatchResult = tuple[str, int]  # (partition, base offset; -1 when not known)


class Batch:
    __slots__ = ("dest", "expiry", "future", "records", "size")

    def __init__(self, dest: str, expiry: int) -> None:
        self.dest = dest
        self.expiry = expiry
        self.records: list[tuple[Any, ...]] = []
        self.size = 0
        self.future: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()


class Accumulator:
    def __init__(
        self,
        linger_s: float,
        batch_bytes: int,
        dispatch: Callable[[Batch], None],
        idle: Callable[[], bool],
    ) -> None:
        self.linger_s = linger_s
        self.batch_bytes = batch_bytes
        self.frame_bytes = DEFAULT_MAX_FRAME - FRAME_MARGIN  # what one batch's records may take
        self.buffered = 0  # bytes in open batches
        self._dispatch = dispatch
        self._idle = idle
        self._open: dict[str | tuple[str, int], Batch] = {}
        self._timer: asyncio.Handle | None = None

    def append(
        self, dest: str, value: bytes, key: bytes | str | None, headers: dict[str, Any] | None, ttl_ms: int
    ) -> tuple[Batch, int]:
        """Add one record; returns its batch and index. The per-record hot path: keep it lean."""
        if value.__class__ is not bytes:
            value = value.encode() if isinstance(value, str) else bytes(value)
        size = len(value) + RECORD_OVERHEAD
        if size > MAX_RECORD_BYTES:
            raise RecordTooLarge(len(value), MAX_RECORD_BYTES, "the largest record of a batch")
        if size > self.frame_bytes:
            limit = self.frame_bytes + FRAME_MARGIN
            raise RecordTooLarge(len(value), limit, "the largest frame the CM takes (its max frame)")
        ts = int(_time() * 1000)
        k = (dest, ttl_ms) if ttl_ms else dest  # no tuple to build and hash for the usual case
        batch = self._open.get(k)
        if batch is not None and batch.size + size > self.frame_bytes:
            self._close(k)  # one frame each
            batch = None
        if batch is None:
            batch = Batch(dest, int(ts + ttl_ms) if ttl_ms else 0)
            self._open[k] = batch
            if self._timer is None:
                loop = asyncio.get_running_loop()
                if self._idle():
                    self._timer = loop.call_soon(self.drain)
                else:
                    self._timer = loop.call_later(self.linger_s, self.drain)
        records = batch.records
        index = len(records)
        records.append((value, key, headers, ts))
        batch.size += size
        self.buffered += size
        if batch.size >= self.batch_bytes:
            self._close(k)
        return batch, index

    def drain(self) -> None:
        """Hand every open batch to the sender now."""
        self._timer = None
        for k in list(self._open):
            self._close(k)

    def _close(self, k: str | tuple[str, int]) -> None:
        batch = self._open.pop(k)
        if not self._open and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.buffered -= batch.size
        self._dispatch(batch)
