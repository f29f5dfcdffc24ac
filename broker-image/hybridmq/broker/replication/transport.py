"""An in-process :class:`~.backup.PrimaryTransport`: calls a :class:`~.primary.PartitionPrimary`
directly. For tests and for replicas of one process; ``connected = False`` simulates a network cut
(calls raise ``ConnectionError``), ``delay`` adds latency."""

from __future__ import annotations

import asyncio

from .messages import (
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    FetchRequest,
    FetchResponse,
    Snapshot,
    SnapshotRequest,
)
from .primary import PartitionPrimary


class LocalTransport:
    def __init__(self, primary: PartitionPrimary, *, delay: float = 0.0) -> None:
        self.primary = primary
        self.connected = True
        self.delay = delay

    async def _gate(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if not self.connected:
            raise ConnectionError("primary unreachable")

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        await self._gate()
        return await self.primary.handle_fetch(request)

    async def end_offset_for_epoch(self, request: EpochEndOffsetRequest) -> EpochEndOffsetResponse:
        await self._gate()
        return self.primary.handle_end_offset_for_epoch(request)

    async def snapshot(self, request: SnapshotRequest) -> Snapshot:
        await self._gate()
        return self.primary.handle_snapshot(request)
