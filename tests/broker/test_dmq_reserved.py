"""Redelivery, _DMQ routing (max redeliveries, TTL) and reserved names."""

from __future__ import annotations

import asyncio

import pytest

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster


async def test_unacked_queue_messages_are_redelivered_to_another_consumer(cluster: LocalCluster) -> None:
    async with await Producer.connect(cluster.bootstrap) as p:
        await p.send("queue:redeliver", b"r1")
    c1 = await Consumer.connect(cluster.bootstrap, "queue:redeliver", auto_ack=False)
    m = await c1.receive(timeout=10)
    assert isinstance(m, Message) and not m.redelivered
    await c1.close()  # goes away without acking
    c2 = await Consumer.connect(cluster.bootstrap, "queue:redeliver")
    m2 = await c2.receive(timeout=10)
    assert isinstance(m2, Message) and m2.value == b"r1" and m2.redelivered and m2.id == m.id
    await c2.close()


async def test_max_redeliveries_moves_to_dmq_with_origin_and_reason(cluster: LocalCluster) -> None:
    dmq = await Consumer.connect(cluster.bootstrap, "queue:_DMQ")
    async with await Producer.connect(cluster.bootstrap) as p:
        await p.send("queue:poison", b"poison")
    received = 0
    for _ in range(5):  # the cluster runs with --max-redeliveries 2: at most 3 deliveries, then DMQ
        c = await Consumer.connect(cluster.bootstrap, "queue:poison", auto_ack=False)
        try:
            m = await c.receive(timeout=2)
        except TimeoutError:
            await c.close()
            break
        assert isinstance(m, Message)
        received += 1
        c.nack(m)
        await c.close()
    assert 1 <= received <= 3
    dead = await dmq.receive(timeout=10)
    assert isinstance(dead, Message)
    assert dead.value == b"poison" and dead.destination == "queue:_DMQ"
    assert dead.attributes["orig"] == "queue:poison"
    assert "redeliveries" in dead.attributes["reason"]
    await dmq.close()


async def test_expired_queue_message_goes_to_dmq(cluster: LocalCluster) -> None:
    dmq = await Consumer.connect(cluster.bootstrap, "queue:_DMQ")
    async with await Producer.connect(cluster.bootstrap) as p:
        await p.send("queue:perishable", b"milk", ttl_ms=100)
        await p.send("queue:perishable", b"salt")
    await asyncio.sleep(0.3)
    c = await Consumer.connect(cluster.bootstrap, "queue:perishable")
    m = await c.receive(timeout=10)
    assert isinstance(m, Message) and m.value == b"salt"
    dead = await dmq.receive(timeout=10)
    assert isinstance(dead, Message) and dead.value == b"milk"
    assert dead.attributes["orig"] == "queue:perishable" and dead.attributes["reason"] == "expired"
    await c.close()
    await dmq.close()


@pytest.mark.parametrize("dest", ["queue:_DMQ", "topic:_LOG", "_ADMIN", "queue:_mine", "_x"])
async def test_clients_cannot_produce_to_reserved_names(cluster: LocalCluster, dest: str) -> None:
    async with await Producer.connect(cluster.bootstrap) as p:
        with pytest.raises(ClientError) as err:
            await p.send(dest, b"nope")
        assert err.value.code == ErrorCode.RESERVED_NAME
        # the same producer keeps working
        ack = await p.send("topic:fine", b"ok")
        assert ack.offset >= 0


async def test_cannot_subscribe_to_reserved_admin(cluster: LocalCluster) -> None:
    with pytest.raises(ClientError) as err:
        await Consumer.connect(cluster.bootstrap, "queue:_ADMIN")
    assert err.value.code == ErrorCode.RESERVED_NAME
