"""A partition short of ``minInSync`` copies refuses produces, but what the broker writes itself
(a rejected message moved to ``queue:_DMQ``) reaches its consumers once it is on every in-sync
replica, as cursors do: Kafka's rule that consumers see up to the high watermark whatever the
in-sync count, and only the producers' acknowledgements wait for ``minInSync``.

The partition is made short of copies the way the operator does it: the in-sync set is the primary
alone (the backup fell behind, the shrink was committed) while ``minInSync`` is 2.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
from host_wire import Wire, decoded, until

from hybridmq.api.frames import DMQ_DESTINATION, ErrorCode, FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

QUEUE = "queue:orders"


def _records(value: bytes) -> bytes:
    """One record as the wire carries it: ``[value, key, headers, timestamp_ms]``."""
    return bytes(msgpack.packb([[value, None, {}, 0]], use_bin_type=True))


def _produce(seq: int, value: bytes) -> dict[str, Any]:
    return decoded({"t": FrameType.PRODUCE, "c": seq, "p": "p0", "d": QUEUE, "n": 1, "b": _records(value)})


async def test_a_dmq_move_is_delivered_while_short_of_min_in_sync(tmp_path: Path) -> None:
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    leader = PartitionPrimary(
        storage.log, partition="p", replica_id="mm-0", epoch=0, replicas=("mm-0",), min_in_sync=1
    )
    host = PartitionHost("p", storage, leader)
    host.start()
    producer, consumer, dmq_reader = Wire(), Wire(), Wire()
    try:
        host.enqueue_produce(producer, _produce(1, b"m0"))
        await until(lambda: producer.frames, "the produce answer")
        assert producer.frames[0]["t"] == FrameType.PRODUCE_ACK, producer.frames

        link = ConsumerLink(consumer, "c1", window=1, window_bytes=1 << 20)
        host.attach(link, QUEUE, "exact", None)
        host.pump()
        await until(lambda: consumer.of_type(FrameType.DELIVER), "the delivery")
        delivered = consumer.of_type(FrameType.DELIVER)[0]

        leader.update_assignment(min_in_sync=2)  # one copy in sync, two required
        host.enqueue_produce(producer, _produce(2, b"m1"))
        await until(lambda: len(producer.frames) == 2, "the second produce answer")
        refused = producer.frames[1]
        assert refused["t"] == FrameType.ERROR, "a produce short of minInSync is refused"
        assert refused["code"] == ErrorCode.NOT_ENOUGH_REPLICAS, refused

        reply = (consumer, decoded({"t": FrameType.NACK, "c": 7, "s": "sub", "o": int(delivered["o"])}))
        assert host.ack(link, int(delivered["o"]), nack=True, attempt=1, requeue=False, reply=reply)
        await until(lambda: consumer.of_type(FrameType.OK), "the rejection's answer")

        reader = ConsumerLink(dmq_reader, "c2", window=10, window_bytes=1 << 20)
        host.attach(reader, DMQ_DESTINATION, "exact", None)
        for _ in range(100):
            host.pump()
            if dmq_reader.of_type(FrameType.DELIVER):
                break
            await asyncio.sleep(0.02)
        moved = dmq_reader.of_type(FrameType.DELIVER)
        assert moved, "the message rejected to _DMQ never reached its consumer"
        assert moved[0]["xa"]["orig"] == QUEUE
    finally:
        await host.stop()
        storage.close()
