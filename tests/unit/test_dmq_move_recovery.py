"""A record moved to ``queue:_DMQ`` is settled at its origin even when the primary that moved it was
lost before the cursor saying so was committed.

The move is one batch in the partition's log and the acknowledgement at its origin a later cursor
record. A kill -9 between the two (seen under load in the live queue model: the expired message was
in ``_DMQ`` twice) left a new primary that found the record unacknowledged and moved it again. The
log is written here as that primary left it: the message, its move, no cursor. A new primary then
reads it back, as on a promotion, and a consumer of the queue and one of ``_DMQ`` attach.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
from host_wire import Wire, store

from hybridmq.api.frames import DMQ_DESTINATION, BatchFlag, FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

QUEUE = "queue:perishable"


def _records(*values: bytes) -> bytes:
    return bytes(msgpack.packb([[v, None, {}, 0] for v in values], use_bin_type=True))


async def _deliveries_after_promotion(tmp_path: Path, moved_from: str) -> tuple[list[bytes], list[bytes]]:
    """Values the queue's consumer and the _DMQ reader get from a primary promoted over a log that
    holds an expired message m0, a live one m1, and the move of m0 to _DMQ named ``moved_from``."""
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    store(storage, QUEUE, 1, _records(b"m0"), expiry=1)  # expired long ago
    store(storage, QUEUE, 1, _records(b"m1"))
    extra = {"orig": QUEUE, "reason": "expired", "from": moved_from}
    store(storage, DMQ_DESTINATION, 1, _records(b"m0"), flags=BatchFlag.DMQ, extra=extra)
    leader = PartitionPrimary(
        storage.log, partition="p", replica_id="mm-1", epoch=1, replicas=("mm-1",), min_in_sync=1
    )
    host = PartitionHost("p", storage, leader)
    host.recover()
    host.start()
    consumer, dmq = Wire(), Wire()
    try:
        host.attach(ConsumerLink(consumer, "c1", window=10, window_bytes=1 << 20), QUEUE, "exact", None)
        host.attach(ConsumerLink(dmq, "c2", window=10, window_bytes=1 << 20), DMQ_DESTINATION, "exact", None)
        for _ in range(100):  # until m1 is out and _DMQ holds what it will hold
            host.pump()
            if consumer.of_type(FrameType.DELIVER) and len(dmq.of_type(FrameType.DELIVER)) >= 1:
                await asyncio.sleep(0.2)
                host.pump()
                break
            await asyncio.sleep(0.02)
    finally:
        await host.stop()
        storage.close()

    def values(wire: Wire) -> list[bytes]:
        return [r[0] for f in wire.of_type(FrameType.DELIVER) for r in msgpack.unpackb(f["b"], raw=False)]

    return values(consumer), values(dmq)


async def test_a_move_to_dmq_whose_cursor_was_lost_is_not_moved_again(tmp_path: Path) -> None:
    to_consumer, to_dmq = await _deliveries_after_promotion(tmp_path, moved_from="p:0")
    assert to_consumer == [b"m1"]
    assert to_dmq == [b"m0"], "the expired message is in _DMQ once"


async def test_another_partitions_move_settles_nothing_here(tmp_path: Path) -> None:
    """The move names where it came from: one from a partition of another name (a copy of its
    batch) settles nothing in this one, whose m0 expires here and moves on its own."""
    to_consumer, to_dmq = await _deliveries_after_promotion(tmp_path, moved_from="other:0")
    assert to_consumer == [b"m1"]
    assert to_dmq == [b"m0", b"m0"]
