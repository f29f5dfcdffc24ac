"""The MM's internal log partition: the ``topic:_LOG`` events of this MM and of the CMs that send
theirs here, kept apart from every user partition.

``_log.<mm>`` (``log_partition``) lives in ``<data dir>/_log`` (a name no ``Partition`` resource
can have) and is not in the assignment table: it is not counted, planned, reported to the operator
or the local controller, and nothing else is ever written to it (a PRODUCE of any other destination
is refused). Consumers of ``topic:_LOG`` get its batches like any other hosted partition's, and the
fetch API reads it when the reader asks for internal destinations.

It is local and not replicated: the events describe one MM, so they need not outlive its volume, and
replicating them would spend a replicated write (and a backup's fsync) on every flush of
diagnostics - the very cost a flood of bad connections must not impose on the users' partitions.
For the same reason it is not fsynced (the page cache keeps it across a process crash) and its
retention is by size: the oldest segments go once it holds more than ``retain_bytes``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path
from typing import Any

from hybridmq.api.frames import LOG_DESTINATION, ErrorCode, error_frame
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log_events import log_partition
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage

log = logging.getLogger(__name__)

INTERNAL_LOG_DIR = "_log"
SEGMENT_BYTES = 1024 * 1024
RETAIN_BYTES = 16 * 1024 * 1024
CACHE_BYTES = 1024 * 1024


class InternalLogHost(PartitionHost):
    retain_bytes = RETAIN_BYTES

    def _append_one(self, frame: dict[str, Any]) -> dict[str, Any]:
        if frame.get("d") != LOG_DESTINATION:
            return error_frame(
                ErrorCode.INVALID_REQUEST, f"{self.name} only takes {LOG_DESTINATION}", frame.get("c")
            )
        return super()._append_one(frame)

    def trim(self) -> int:
        """Delete the oldest whole segments beyond ``retain_bytes``; the new log start."""
        plog = self.storage.log
        segments = plog.segments
        excess = sum(s.size for s in segments) - self.retain_bytes
        cut = None
        for older, newer in itertools.pairwise(segments):
            if excess <= 0:
                break
            excess -= older.size
            cut = newer.base_offset
        return plog.delete_before(cut) if cut is not None else plog.log_start_offset

    async def _retention(self) -> None:
        # By size, not below the cursors: a log of events is not a queue to be drained.
        while True:
            await asyncio.sleep(self.retention_interval)
            try:
                self.trim()
            except Exception:
                log.exception("retention failed on %s", self.name)


def open_internal_log(
    mm: str, data_dir: Path, max_frame: int, retention_interval: float, wake: Any
) -> InternalLogHost:
    storage = PartitionStorage.open(
        data_dir / INTERNAL_LOG_DIR,
        LogConfig(fsync="never", segment_bytes=SEGMENT_BYTES, max_batch_bytes=max_frame + 1024),
        cache_bytes=CACHE_BYTES,
    )
    host = InternalLogHost(log_partition(mm), storage, 0, max_backlog=0, wake=wake)
    host.retention_interval = retention_interval
    host.recover()
    host.start()
    return host
