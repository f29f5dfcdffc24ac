"""A consumer gives back one record of a delivery of several and acknowledges the others: the one
given back is redelivered, flagged, whichever record of the delivery it is (the first one too:
a delivery is keyed by its first offset, and that key must not hide the record given back)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from host_wire import Wire, decoded, until

from hybridmq.api.frames import FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

QUEUE = "queue:nacks"


def _records(blob: bytes) -> list[bytes]:
    return list(msgpack.unpackb(blob))


@pytest.mark.parametrize("nacked", [0, 2, 4])
async def test_one_record_given_back_of_a_delivery_of_five_comes_back(tmp_path: Path, nacked: int) -> None:
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    leader = PartitionPrimary(
        storage.log, partition="p", replica_id="mm-0", epoch=0, replicas=("mm-0",), min_in_sync=1
    )
    host = PartitionHost("p", storage, leader)
    host.start()
    producer, consumer = Wire(), Wire()
    try:
        bodies = [f"m{i}".encode() for i in range(5)]
        host.enqueue_produce(
            producer,
            decoded(
                {"t": FrameType.PRODUCE, "c": 1, "p": "p0", "d": QUEUE, "n": 5, "b": msgpack.packb(bodies)}
            ),
        )
        await until(lambda: producer.frames, "the produce ack")
        assert producer.frames[0]["t"] == FrameType.PRODUCE_ACK, producer.frames
        link = ConsumerLink(consumer, "c1", window=5, window_bytes=1 << 20)
        host.attach(link, QUEUE, "exact", None)
        host.pump()
        await until(lambda: consumer.deliveries(), "the delivery of five")
        (first,) = consumer.deliveries()
        assert first["n"] == 5 and first["rd"] == 0
        base = int(first["o"])

        target = base + nacked
        # the MM pumps after every acknowledgement it takes (as its server does: ``mm.wake()``)
        assert host.ack(link, base, nack=True, attempt=1, first=target, last=target)
        host.pump()
        for offset in range(base, base + 5):
            if offset != target:
                assert host.ack(link, base, attempt=1, first=offset, last=offset)
                host.pump()
        await until(lambda: len(consumer.deliveries()) == 2, f"record {nacked} given back to come again")
        again = consumer.deliveries()[1]
        assert (again["o"], again["n"], again["rd"]) == (target, 1, 1), again
        assert _records(again["b"]) == [bodies[nacked]]
        assert host.ack(link, target, attempt=2)
        host.pump()
        state = host.states["q:" + QUEUE]
        await until(lambda: not state.pending and state.lw() >= base + 5, "everything acknowledged")
        assert len(consumer.deliveries()) == 2, "nothing else was delivered"
    finally:
        await host.stop()
        storage.close()
