"""What unit tests of a partition host need around it: the connection a CM would hold to it, a poll
for what the host reaches through its own tasks, and batches written straight into a partition's
log as a primary stores them (a log to start from, or a record appended whose commit is under way)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridmq.api.frames import FrameType
from hybridmq.broker.destinations.batch_payload import pack_payload
from hybridmq.broker.dispatch import REQUESTS
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log.control import ControlRecord, encode_control
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary
from hybridmq.protocol.codec import encode_body


class Wire:
    """What a CM connection would carry to a client: every frame the host sends, in order."""

    def __init__(self) -> None:
        self.closed = False
        self.frames: list[dict[str, Any]] = []

    def send_nowait(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)

    def of_type(self, kind: FrameType) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("t") == kind]

    def deliveries(self) -> list[dict[str, Any]]:
        return self.of_type(FrameType.DELIVER)


def decoded(frame: dict[str, Any]) -> Any:
    """``frame`` as a broker's connection hands it to its handler: a typed request (PRODUCE, ACK,
    NACK) as its Struct, anything else as a dict, a malformed typed one as an ``InvalidFrame``."""
    return REQUESTS.decode(encode_body(frame))


async def until(predicate: Callable[[], object], what: str, timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` every 10 ms; fail with ``what`` after ``timeout_s``."""
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def partition_host(tmp_path: Path) -> PartitionHost:
    """A partition host without backups, not started (its storage closes with ``storage.close``)."""
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    leader = PartitionPrimary(
        storage.log, partition="p", replica_id="mm-0", epoch=0, replicas=("mm-0",), min_in_sync=1
    )
    return PartitionHost("p", storage, leader)


def store(
    storage: PartitionStorage,
    dest: str,
    count: int,
    blob: bytes,
    *,
    epoch: int = 0,
    flags: int = 0,
    expiry: int = 0,
    extra: dict[str, Any] | None = None,
) -> int:
    """Write a data batch into the log as a primary stores it, without a primary's checks; its base."""
    now = int(time.time() * 1000)
    result = storage.log.append(pack_payload(dest, flags, expiry, extra, blob), count, epoch, timestamp=now)
    storage.appended(result, dest, count, blob, flags, expiry, extra, now)
    return result.base_offset


def store_control(storage: PartitionStorage, records: list[ControlRecord], epoch: int = 0) -> int:
    """Write control records (cursors, delivery counts) into the log; the batch's base."""
    payload, count = encode_control(records)
    result = storage.log.append(payload, count, epoch, control=True, timestamp=int(time.time() * 1000))
    storage.note_control(result.base_offset, count)
    return result.base_offset
