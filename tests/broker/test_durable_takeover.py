"""A durable subscription taken over by a new consumer is not disturbed when the old one leaves.

The new subscriber of a durable name replaces the old one (its unacknowledged messages go to the new
one, flagged). When the old consumer then disconnects, its late departure must not rewind the
subscription under the new one: that handed the new consumer its own unacknowledged messages a
second time and skewed its window until deliveries stopped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from hybridmq.client import Consumer, Producer
from hybridmq.client.message import Message
from hybridmq.local.runner import LocalCluster

TOPIC = "topic:takeover"
DURABLE = "takeover-d1"


async def _drain(c: Consumer, seconds: float) -> list[Message]:
    got: list[Message] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while (left := end - loop.time()) > 0:
        try:
            m = await c.receive(timeout=left)
        except TimeoutError:
            break
        assert isinstance(m, Message)
        got.append(m)
    return got


async def test_the_old_consumer_leaving_does_not_rewind_the_new_one(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        old = await Consumer.connect(cluster.bootstrap, TOPIC, durable=DURABLE, auto_ack=False)
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed")
        try:
            for i in range(5):
                await producer.send(TOPIC, f"m{i}".encode())
            first = await _drain(old, 3.0)
            assert [m.value for m in first] == [f"m{i}".encode() for i in range(5)]

            new = await Consumer.connect(cluster.bootstrap, TOPIC, durable=DURABLE, auto_ack=False)
            taken = await _drain(new, 3.0)
            assert sorted(m.value for m in taken) == [f"m{i}".encode() for i in range(5)]
            assert all(m.redelivered for m in taken), "handed over unacknowledged: flagged"

            await old.close()  # the old consumer leaves late
            again = await _drain(new, 3.0)
            assert not again, f"the new consumer got {len(again)} of its own messages again"

            for m in taken:
                new.ack(m)
            await new.commit()
            await producer.send(TOPIC, b"after")
            later = await _drain(new, 3.0)
            assert [m.value for m in later] == [b"after"] and not later[0].redelivered
            await new.close()
        finally:
            await producer.close()
