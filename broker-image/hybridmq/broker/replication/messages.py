"""Transport-agnostic requests and responses between a backup and its primary.

Plain frozen dataclasses of ints, strings and bytes. ``to_wire(message)`` gives a dict that msgpack
can encode; ``from_wire(cls, dict)`` rebuilds it. The MM server maps them onto its frames.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from hybridmq.api.frames import ErrorCode


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A backup asks for the batches from ``fetch_offset`` (its log end offset) on.

    ``fetch_offset`` also tells the primary how far the backup's copy goes. The primary waits up to
    ``max_wait_ms`` for new data when there is none (long poll).
    """

    partition: str
    replica_id: str
    epoch: int
    fetch_offset: int
    max_bytes: int = 1 << 20
    max_wait_ms: int = 500


@dataclass(frozen=True, slots=True)
class FetchResponse:
    partition: str
    epoch: int  # the primary's epoch
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: bytes = b""  # whole raw batches, as PartitionLog.read returns them


@dataclass(frozen=True, slots=True)
class EpochEndOffsetRequest:
    """``leader_epoch``: the requester's latest epoch; ``epoch``: its view of the partition epoch."""

    partition: str
    replica_id: str
    epoch: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EpochEndOffsetResponse:
    partition: str
    epoch: int
    error: ErrorCode
    leader_epoch: int = -1  # the primary's largest epoch <= the requested one (-1: undefined)
    end_offset: int = -1  # where that epoch ends in the primary's log
    log_start_offset: int = -1
    log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    partition: str
    replica_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A primary's externalized state for a new or far-behind backup.

    The backup restarts its log at ``log_start_offset`` and fetches the tail from there.
    ``producer_state`` is the producer sequence-number table as of ``snapshot_offset`` (the
    primary's log end when taken): batches below it do not update the backup's table again, later
    ones continue it. ``app_state`` is opaque state from the primary's ``state_provider`` (e.g.
    destination cursors), handed to the backup's ``on_snapshot``.
    """

    partition: str
    epoch: int
    error: ErrorCode
    log_start_offset: int = -1
    snapshot_offset: int = -1
    high_watermark: int = -1
    producer_state: bytes = b""
    app_state: bytes | None = None


M = TypeVar("M")


def to_wire(message: Any) -> dict[str, Any]:
    """A msgpack-friendly dict of a message (error codes as integers)."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        out[field.name] = value.value if isinstance(value, ErrorCode) else value
    return out


def from_wire(cls: type[M], data: dict[str, Any]) -> M:
    """Rebuild a message of type ``cls`` from :func:`to_wire` output (unknown keys are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {k: v for k, v in data.items() if k in names}
    if "error" in kwargs:
        kwargs["error"] = ErrorCode(kwargs["error"])
    return cls(**kwargs)
