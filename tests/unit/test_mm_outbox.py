"""Deliveries wait in the MM's outbox until the control records counting them are committed. A
delivery given back while it waited (a failed round gave its whole stream back) must not be sent:
a consumer reading a streamed message would get a chunk after a gap. And a failed round must not
let what was handed out while it ran overtake its own deliveries: a topic's subscriber reads in
offset order (and a consumer that failed over drops what it already handed to its application).

The round that fails is made deterministic with a control commit that blocks and then fails, as a
replication commit does when a backup froze (the in-sync replicas never confirm in time).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import pytest
from host_wire import Wire, decoded, partition_host, until

from hybridmq.api.frames import BatchFlag, ErrorCode, FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.partition import PartitionHost

QUEUE = "queue:streams"
CHUNKS = 4


class ControlRounds:
    """Control commits that succeed, except one that blocks until released and then fails."""

    def __init__(self) -> None:
        self.block_next = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, end: int) -> None:
        if not self.block_next:
            return
        self.block_next = False
        self.entered.set()
        await self.release.wait()
        raise CommitError(ErrorCode.MM_UNAVAILABLE, "not replicated: the backup froze")


def _contiguous(deliveries: list[dict[str, Any]]) -> list[int]:
    """The chunk sequence numbers as a consumer reassembling in order would see them; raises on a
    chunk that arrives after a gap (independent of the client library's own check)."""
    seen = -1
    order = []
    for f in deliveries:
        seq = int(f["xa"]["seq"])
        assert seq <= seen + 1, f"chunk {seq} arrived after chunk {seen}: a gap in the stream {order}"
        seen = max(seen, seq)
        order.append(seq)
    return order


def _host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PartitionHost, ControlRounds]:
    """A started partition host without backups whose control rounds ``ControlRounds`` decides."""
    host = partition_host(tmp_path)
    rounds = ControlRounds()
    monkeypatch.setattr(host, "commit_control", rounds)
    host.start()
    return host, rounds


async def test_a_chunk_given_back_while_its_round_waits_is_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, rounds = _host(tmp_path, monkeypatch)
    producer = Wire()
    try:
        for seq in range(CHUNKS):
            host.enqueue_produce(
                producer,
                decoded(
                    {
                        "t": FrameType.PRODUCE,
                        "c": seq,
                        "p": "p0",
                        "d": QUEUE,
                        "n": 1,
                        "b": bytes([seq]) * 1000,
                        "f": int(BatchFlag.CHUNK),
                        "xa": {"sid": "s1", "seq": seq, "fin": seq == CHUNKS - 1},
                    }
                ),
            )
        await until(lambda: len(producer.frames) == CHUNKS, "produce acks")
        assert all(f["t"] == FrameType.PRODUCE_ACK for f in producer.frames)
        bases = [int(f["o"]) for f in producer.frames]

        consumer = Wire()
        link = ConsumerLink(consumer, "c1", window=2, window_bytes=1 << 20)
        host.attach(link, QUEUE, "exact", None)
        host.pump()  # chunks 0 and 1 (the window)
        await until(lambda: len(consumer.deliveries()) == 2, "first two chunks")

        rounds.block_next = True
        assert host.ack(link, bases[0], attempt=1)  # chunk 0 read: chunk 2 goes out next
        host.pump()
        await until(rounds.entered.is_set, "the round of chunk 2 waits")
        assert host.ack(link, bases[1], attempt=1)  # chunk 1 read: chunk 3 waits for the next round
        host.pump()
        rounds.release.set()  # the round of chunk 2 fails: the whole stream is given back
        for _ in range(50):
            host.pump()
            await asyncio.sleep(0.02)
            for f in consumer.deliveries()[len(consumer.deliveries()) - 2 :]:
                if f["o"] in host.states["q:" + QUEUE].pending:
                    host.ack(link, f["o"], attempt=int(f["rd"]) + 1)

        order = _contiguous(consumer.deliveries())
        assert order[-1] == CHUNKS - 1, f"the stream was not delivered to its end: {order}"
        redelivered = [f for f in consumer.deliveries() if int(f["rd"]) > 0]
        assert redelivered and int(redelivered[0]["xa"]["seq"]) == 0, "given back: again from chunk 0"
    finally:
        await host.stop()
        host.storage.close()


async def test_a_failed_round_keeps_a_topic_in_offset_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, rounds = _host(tmp_path, monkeypatch)
    producer = Wire()
    consumer = Wire()
    link = ConsumerLink(consumer, "c1", window=100, window_bytes=1 << 20)

    async def produce(value: int) -> None:
        frame = decoded(
            {
                "t": FrameType.PRODUCE,
                "c": value,
                "p": "p0",
                "d": "topic:t",
                "n": 1,
                "b": msgpack.packb([[value]]),
            }
        )
        host.enqueue_produce(producer, frame)
        await until(lambda: any(f.get("r") == value for f in producer.frames), f"produce ack {value}")

    try:
        host.attach(link, "topic:t", "exact", "sub")
        await produce(0)
        rounds.block_next = True
        host.pump()  # record 0 waits in a round that will fail
        await until(rounds.entered.is_set, "the round of record 0 waits")
        await produce(1)
        host.pump()  # record 1 is handed out while that round runs
        rounds.release.set()
        for _ in range(30):
            host.pump()
            await asyncio.sleep(0.02)
        values = [msgpack.unpackb(f["b"])[0][0] for f in consumer.deliveries()]
        assert values == [0, 1], f"a topic's deliveries came out of offset order (or not at all): {values}"
    finally:
        await host.stop()
        host.storage.close()
