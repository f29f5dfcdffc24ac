"""A produce held behind a partition's closed backlog gate is refused after a bounded wait.

While a queue's backlog is over ``max_backlog`` the partition stops appending (flow control). A
produce that waits there longer than the host's ``gate_hold_s`` is answered BACKLOG_FULL with
nothing stored: the producer resends until its delivery timeout, and one that gives up never finds
its batch stored after all. Once the consumer catches up, the resend is stored.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgpack
from host_wire import Wire, decoded, until

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

QUEUE = "queue:gated"
HOLD_S = 0.3


def _produce(corr: int) -> dict[str, Any]:
    records = msgpack.packb([[b"m%d" % corr, None, {}, 0]], use_bin_type=True)
    return decoded({"t": FrameType.PRODUCE, "c": corr, "p": "p0", "d": QUEUE, "n": 1, "b": records})


async def test_a_produce_held_by_a_full_backlog_is_refused_then_stored_once_consumed(tmp_path: Path) -> None:
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    leader = PartitionPrimary(
        storage.log, partition="p", replica_id="mm-0", epoch=0, replicas=("mm-0",), min_in_sync=1
    )
    host = PartitionHost("p", storage, leader, max_backlog=2, gate_hold_s=HOLD_S)
    host.start()
    producer, consumer = Wire(), Wire()

    def answer(corr: int) -> dict[str, Any]:
        return next((f for f in producer.frames if f.get("r") == corr), {})

    try:
        for corr in (1, 2, 3):
            host.enqueue_produce(producer, _produce(corr))
            await until(lambda c=corr: answer(c), f"produce {corr} answered")
            assert answer(corr)["t"] == FrameType.PRODUCE_ACK
        stored = storage.end_offset  # three records, nobody consumed them: over the limit of 2

        held_at = time.monotonic()
        host.enqueue_produce(producer, _produce(4))
        await until(lambda: answer(4), "the held produce answered", timeout_s=10)
        waited = time.monotonic() - held_at
        refused = answer(4)
        assert refused["t"] == FrameType.ERROR, refused
        assert refused["code"] == ErrorCode.BACKLOG_FULL, refused
        assert HOLD_S <= waited < HOLD_S + 2, waited
        assert storage.end_offset == stored, "a refused produce was stored"

        # The consumer takes and acknowledges everything: the gate opens, the resend is stored.
        link = ConsumerLink(consumer, "c1", window=10, window_bytes=1 << 20)
        host.attach(link, QUEUE, "exact", None)
        host.pump()
        await until(lambda: sum(int(d["n"]) for d in consumer.deliveries()) == 3, "three deliveries")
        for d in consumer.deliveries():
            assert host.ack(link, int(d["o"]), attempt=int(d.get("rd", 0)) + 1)
        await until(lambda: not host.blocked, "the gate open again", timeout_s=10)
        host.enqueue_produce(producer, _produce(5))
        await until(lambda: answer(5), "the resend answered")
        assert answer(5)["t"] == FrameType.PRODUCE_ACK, answer(5)
    finally:
        await host.stop()
        storage.close()
