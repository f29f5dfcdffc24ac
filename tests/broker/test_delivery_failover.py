"""Acknowledged messages stay acknowledged and redeliveries are flagged across a kill -9 of the
primary MM; a streamed message read across the kill is byte-identical (real processes).

The checker is the test's own bookkeeping: every message the application received (consumer,
position, ``redelivered``, ``delivery_count``, when), and when the broker confirmed each message's
acknowledgement. It asserts what a consumer relies on:

* a message is never received again once its acknowledgement was confirmed;
* at most one delivery of a message is unflagged (``redelivered`` False, ``delivery_count`` 1);
  every other one says it is a redelivery;
* no acknowledged produce is missing (queue: across the competing consumers; durable topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from acking_consumers import AckingConsumer, first_confirmed, per_message
from failover_workload import ProducerLoad, stop_all, until

from hybridmq.client import BlockingConsumer, BlockingProducer, Consumer, Message, Producer
from hybridmq.client.consumer import StreamError, StreamMessage
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:dlv"
TOPIC = "topic:dlv"


def check_deliveries(consumers: list[AckingConsumer]) -> dict[str, int]:
    """The two delivery guarantees over the consumers of one destination; returns figures."""
    confirmed = first_confirmed(consumers)
    again_after_ack: list[object] = []
    unflagged_twice: list[object] = []
    inconsistent: list[object] = []
    for key, deliveries in per_message(consumers).items():
        acked_at = confirmed.get(key)
        if acked_at is not None:
            late = [d for d in deliveries if d[0].when > acked_at]
            if late:
                again_after_ack.append((key, acked_at, late))
        if sum(1 for r, _ in deliveries if not r.redelivered) > 1:
            unflagged_twice.append((key, deliveries))
        inconsistent.extend((key, r) for r, _ in deliveries if r.redelivered != (r.delivery_count > 1))
    assert not again_after_ack, (
        f"{len(again_after_ack)} acknowledged messages delivered again: {again_after_ack[:3]}"
    )
    assert not unflagged_twice, (
        f"{len(unflagged_twice)} messages delivered twice without the redelivered flag: {unflagged_twice[:3]}"
    )
    assert not inconsistent, f"redelivered disagrees with delivery_count: {inconsistent[:3]}"
    return {
        "messages": len(per_message(consumers)),
        "redelivered": sum(1 for c in consumers for r in c.received if r.redelivered),
        "confirmed": len(confirmed),
    }


async def test_acked_messages_never_come_back_and_redeliveries_are_flagged(
    replicated: LocalCluster,
) -> None:
    cluster = replicated
    fixed = cluster.table()["local-fixed-0"]
    victim = fixed.primary or ""

    async def acking(name: str, dest: str, durable: str | None = None) -> AckingConsumer:
        c = await Consumer.connect(
            cluster.bootstrap, dest, durable=durable, auto_ack=False, window=200, window_bytes=1 << 20
        )
        return AckingConsumer(name, c)

    queue_consumers = [await acking("q1", QUEUE), await acking("q2", QUEUE)]
    topic_consumer = await acking("d1", TOPIC, durable="audit")
    consumers = [*queue_consumers, topic_consumer]
    loads = {
        dest: ProducerLoad(
            dest,
            await Producer.connect(
                cluster.bootstrap, partition_type="fixed", partition=fixed.name, linger_ms=1
            ),
        )
        for dest in (QUEUE, TOPIC)
    }
    stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
    consuming = [asyncio.create_task(c.run(stop_consuming)) for c in consumers]
    producing = [asyncio.create_task(load.run(dest, stop_producing)) for dest, load in loads.items()]

    await asyncio.sleep(2.0)
    # The kill comes while a queue and the topic consumer each hold a batch unacknowledged.
    release = asyncio.Event()
    held = [asyncio.Event(), asyncio.Event()]
    queue_consumers[0].pause_once = (held[0], release)
    topic_consumer.pause_once = (held[1], release)
    await asyncio.wait_for(asyncio.gather(*(h.wait() for h in held)), 20)
    cluster.kill_mm(victim, signal.SIGKILL)
    release.set()
    await until(lambda: cluster.table()[fixed.name].epoch > fixed.epoch, 15, "the failover")
    await asyncio.sleep(3.0)
    await stop_all(stop_producing, producing)

    def everything_received() -> bool:
        for dest, group in ((QUEUE, queue_consumers), (TOPIC, [topic_consumer])):
            got = {r.value for c in group for r in c.received}
            if not {f"{dest}:{seq}".encode() for seq in loads[dest].acked} <= got:
                return False
        return True

    await until(everything_received, 40, "every acknowledged produce to be consumed")
    await asyncio.sleep(1.0)  # late redeliveries, if any, would show up now
    await stop_all(stop_consuming, consuming)

    figures = {}
    for dest, group in ((QUEUE, queue_consumers), (TOPIC, [topic_consumer])):
        load = loads[dest]
        assert not load.failed, (len(load.failed), load.failed[:1], load.failed[-1:], len(load.acked))
        figures[dest] = check_deliveries(group)
        assert figures[dest]["confirmed"] > 50, figures
        assert figures[dest]["redelivered"] > 0, f"the kill redelivered nothing: {figures}"
    print(figures)
    for load in loads.values():
        await load.producer.close()
    for c in consumers:
        await c.consumer.close()


CHUNK = 1 << 20
CHUNKS = 8


def stream_chunks(digest: hashlib._Hash) -> Iterator[bytes]:
    for i in range(CHUNKS):
        chunk = hashlib.sha256(i.to_bytes(4, "big")).digest() * (CHUNK // 32)
        digest.update(chunk)
        yield chunk


async def test_stream_read_across_a_kill_is_byte_identical(replicated: LocalCluster) -> None:
    cluster = replicated
    fixed = cluster.table()["local-fixed-0"]
    victim = fixed.primary or ""
    # A small window: the primary hands out a couple of chunks ahead of the reader.
    consumer = await Consumer.connect(cluster.bootstrap, "queue:blobs", window_bytes=2 * CHUNK + 1)
    producer = await Producer.connect(
        cluster.bootstrap, partition_type="fixed", partition=fixed.name, max_pending_bytes=16 << 20
    )
    sent = hashlib.sha256()
    ack = await producer.send_stream("queue:blobs", stream_chunks(sent), key=b"big")
    assert ack.partition == fixed.name

    completed: list[tuple[str, int, bool]] = []  # (sha256, size, redelivered) of every full read
    refused: list[str] = []
    killed = False
    deadline = asyncio.get_running_loop().time() + 60
    while not any(sha == sent.hexdigest() for sha, _, _ in completed):
        assert asyncio.get_running_loop().time() < deadline, (completed, refused)
        msg = await consumer.receive(timeout=30)
        assert isinstance(msg, StreamMessage), msg
        got = hashlib.sha256()
        size = 0
        try:
            async for chunk in msg.chunks():
                got.update(chunk)
                size += len(chunk)
                if not killed and size == 3 * CHUNK:
                    killed = True
                    cluster.kill_mm(victim, signal.SIGKILL)
                    await until(lambda: cluster.table()[fixed.name].epoch > fixed.epoch, 15, "failover")
                await asyncio.sleep(0.1)
        except StreamError as exc:  # refused with a clear error: acceptable, never corrupt
            refused.append(str(exc))
            continue
        completed.append((got.hexdigest(), size, msg.redelivered))
        assert got.hexdigest() == sent.hexdigest(), (
            f"a stream completed with other bytes than were sent ({size} bytes): {completed}, {refused}"
        )
    assert killed
    assert completed[-1][1] == CHUNK * CHUNKS
    print({"completed": completed, "refused": refused})
    await producer.close()
    await consumer.close()


async def test_stream_of_a_crashed_consumer_restarts_at_its_first_chunk(tmp_path: Path) -> None:
    """A queue consumer dies after three chunks: the next one gets the whole stream from chunk 0,
    flagged as a redelivery, byte-identical."""
    with LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        first = await Consumer.connect(cluster.bootstrap, "queue:crash", window_bytes=2 * CHUNK + 1)
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed")
        sent = hashlib.sha256()
        await producer.send_stream("queue:crash", stream_chunks(sent))
        msg = await first.receive(timeout=30)
        assert isinstance(msg, StreamMessage) and not msg.redelivered
        read = 0
        async for _ in msg.chunks():
            read += 1
            if read == 3:
                break
        await asyncio.sleep(0.5)  # the acknowledgements of those chunks reach the broker
        first.abort()  # the consumer dies: no unsubscribe, the rest never acknowledged

        second = await Consumer.connect(cluster.bootstrap, "queue:crash")
        again = await second.receive(timeout=30)
        assert isinstance(again, StreamMessage)
        assert again.redelivered and again.delivery_count == 2, (again.redelivered, again.delivery_count)
        got = hashlib.sha256()
        async for chunk in again.chunks():
            got.update(chunk)
        assert got.hexdigest() == sent.hexdigest()
        await producer.close()
        await second.close()


async def test_stream_abandoned_by_its_producer_ends_in_dmq(tmp_path: Path) -> None:
    """A stream whose final chunk never comes is refused by the reader (StreamError after the
    chunk timeout), given back, and after the maximum redeliveries moved to _DMQ; the queue goes on."""
    with LocalCluster(
        tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0, mm_args=["--max-redeliveries", "1"]
    ) as cluster:
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed")

        def dies_after_two() -> Iterator[bytes]:
            yield b"a" * 1000
            yield b"b" * 1000
            yield b"c" * 1000
            raise RuntimeError("the producing application died")

        try:
            await producer.send_stream("queue:orphan", dies_after_two())
        except RuntimeError:
            pass
        await producer.flush()
        await producer.send("queue:orphan", b"after the stream")
        consumer = await Consumer.connect(cluster.bootstrap, "queue:orphan")
        consumer.chunk_timeout_s = 1.0
        refused, others = 0, []
        while True:  # until nothing more comes: the stream went to _DMQ
            try:
                msg = await consumer.receive(timeout=5)
            except TimeoutError:
                break
            if isinstance(msg, Message):
                others.append(msg.value)
                continue
            with contextlib.suppress(StreamError):
                async for _ in msg.chunks():
                    pass
                raise AssertionError("a stream without its final chunk completed")
            assert msg.redelivered == (refused > 0)
            refused += 1
        assert others == [b"after the stream"]
        assert refused == 2, refused  # first delivery + one redelivery, then _DMQ
        dmq = await Consumer.connect(cluster.bootstrap, "queue:_DMQ")
        moved = await dmq.receive(timeout=30)
        assert isinstance(moved, StreamMessage) and moved.attributes.get("orig") == "queue:orphan"
        await producer.close()
        await consumer.close()
        await dmq.close()


def test_blocking_consumer_commit_waits_for_the_broker(cluster: LocalCluster) -> None:
    with BlockingProducer(cluster.bootstrap, partition_type="fixed") as producer:
        producer.send("queue:blocking-commit", b"one")
    with BlockingConsumer(cluster.bootstrap, "queue:blocking-commit", auto_ack=False) as consumer:
        msg = consumer.receive(timeout=30)
        assert isinstance(msg, Message) and msg.value == b"one" and msg.delivery_count == 1
        consumer.ack(msg)
        consumer.commit()  # raises when the acknowledgement was not committed
    # committed: a new consumer of the queue gets nothing
    with BlockingConsumer(cluster.bootstrap, "queue:blocking-commit") as again, pytest.raises(TimeoutError):
        again.receive(timeout=1.0)
