"""Replication of partition logs from a primary MM to its backups (pull, Kafka-style), transport
agnostic: the MM server supplies the network, this package the rules.

* :class:`PartitionPrimary` (``primary.py``) — on the primary: fencing by epoch, produce with
  ``min_in_sync`` acknowledgement (``await primary.produce(...)``), serving backup fetches
  (``handle_fetch``, ``handle_end_offset_for_epoch``, ``handle_snapshot``), the in-sync set with a
  lag-time rule (``isr.py``), the high watermark (``high_watermark``; consumers read with
  ``log.read(offset, n, max_offset=primary.high_watermark)``), ``step_down`` on lease loss.
* :class:`BackupFetcher` (``backup.py``) — on a backup: the fetch loop (truncate on epoch change,
  snapshot catch-up, fetch + ``append_raw``) over an injected :class:`PrimaryTransport`.
* ``fetch_batch.serve_batch`` — on the primary: one batched fetch for many partitions (each with
  ``handle_fetch``'s rules, through ``record_fetch`` / ``read_fetch``), long-polling until any
  partition has news; the MM sends one per (backup MM, primary MM).
* Messages (``messages.py``): ``FetchRequest``/``FetchResponse``, ``EpochEndOffsetRequest``/
  ``EpochEndOffsetResponse``, ``SnapshotRequest``/``Snapshot``; ``to_wire``/``from_wire`` turn them
  into msgpack-friendly dicts. Errors (``errors.py``) carry an ``ErrorCode``.
* :class:`LocalTransport` (``transport.py``) — in-process transport for tests and single-process
  clusters.

Wiring in an MM (per partition, from the ``PartitionAssignment``):

* primary at epoch E: ``PartitionPrimary(log, partition=..., replica_id=me, epoch=E,
  replicas=a.replicas, in_sync=a.in_sync, min_in_sync=a.min_in_sync, lease_valid=...,
  alter_in_sync=...)``; every produce passes ``check_append`` (epoch, lease, in-sync count, a new
  producer's first sequence) before it is appended and is acknowledged after ``wait_committed``
  (``produce`` does both); replica fetch frames -> ``handle_*``; the
  next assignment -> ``update_assignment`` (same epoch) or ``close`` (role or epoch changed);
  call ``tick()`` every ~``lag_time_ms / 4``; report ``report()`` in the lease annotation.
* backup at epoch E: ``BackupFetcher(log, ..., epoch=E, transport=<client of the primary>)`` and
  ``asyncio.create_task(fetcher.run())``; a later assignment -> ``fetcher.update(epoch=..,
  transport=..)``; promotion -> ``await fetcher.stop()`` then a ``PartitionPrimary`` at the new
  epoch on the same log.
"""

from .backup import CATCHUP_MARKER, BackupFetcher, FetcherState, OnSnapshot, PrimaryTransport
from .errors import (
    ErrorCode,
    FencedEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotPrimaryError,
    OffsetOutOfRangeReplicationError,
    ReplicationError,
    ReplicationTimeoutError,
    UnknownEpochError,
    UnknownReplicaError,
    error_for,
)
from .isr import ReplicaState, can_join, is_lagging
from .messages import (
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    FetchRequest,
    FetchResponse,
    Snapshot,
    SnapshotRequest,
    from_wire,
    to_wire,
)
from .primary import AlterInSync, PartitionPrimary
from .transport import LocalTransport

__all__ = [
    "CATCHUP_MARKER",
    "AlterInSync",
    "BackupFetcher",
    "EpochEndOffsetRequest",
    "EpochEndOffsetResponse",
    "ErrorCode",
    "FencedEpochError",
    "FetchRequest",
    "FetchResponse",
    "FetcherState",
    "LocalTransport",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotPrimaryError",
    "OffsetOutOfRangeReplicationError",
    "OnSnapshot",
    "PartitionPrimary",
    "PrimaryTransport",
    "ReplicaState",
    "ReplicationError",
    "ReplicationTimeoutError",
    "Snapshot",
    "SnapshotRequest",
    "UnknownEpochError",
    "UnknownReplicaError",
    "can_join",
    "error_for",
    "from_wire",
    "is_lagging",
    "to_wire",
]
