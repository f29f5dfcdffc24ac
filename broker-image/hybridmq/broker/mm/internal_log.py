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

from collections.abc import Callable
from pathlib import Path

from hybridmq.api.frames import LOG_DESTINATION
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log_events import log_partition
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

INTERNAL_LOG_DIR = "_log"
SEGMENT_BYTES = 1024 * 1024
RETAIN_BYTES = 16 * 1024 * 1024
CACHE_BYTES = 1024 * 1024


def open_internal_log(
    mm: str,
    data_dir: Path,
    max_frame: int,
    retention_interval: float,
    wake: Callable[[], None] | None,
) -> PartitionHost:
    """The internal log's host: a partition with this MM as its only replica (epoch 0, no lease: it
    describes this MM alone), taking ``topic:_LOG`` only, trimmed by size."""
    storage = PartitionStorage.open(
        data_dir / INTERNAL_LOG_DIR,
        LogConfig(fsync="never", segment_bytes=SEGMENT_BYTES, max_batch_bytes=max_frame + 1024),
        cache_bytes=CACHE_BYTES,
    )
    name = log_partition(mm)
    leader = PartitionPrimary(
        storage.log, partition=name, replica_id=mm, epoch=0, replicas=(mm,), min_in_sync=1
    )
    host = PartitionHost(
        name,
        storage,
        leader,
        max_backlog=0,
        wake=wake,
        only_destination=LOG_DESTINATION,
        retain_bytes=RETAIN_BYTES,
    )
    host.retention_interval = retention_interval
    host.recover()
    host.start()
    return host
