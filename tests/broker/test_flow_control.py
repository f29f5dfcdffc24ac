"""A slow consumer throttles its producers end to end; broker memory stays bounded."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import psutil
import pytest

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster


async def test_slow_consumer_throttles_producer_and_memory_stays_bounded(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0, mm_args=["--max-backlog", "20000"]
    )
    with cluster:
        procs = [psutil.Process(cluster.pid(n)) for n in ("cm-0", "mm-0")]
        consumer = await Consumer.connect(cluster.bootstrap, "queue:slow", window=100, window_bytes=64 << 10)
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", max_pending_bytes=1 << 20, linger_ms=1
        )
        value = b"v" * 1000
        sent = 0
        blocked_once = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        peak_rss = 0
        # The consumer does not read: the producer must end up blocked well before it sent 200 MB.
        while loop.time() < deadline:
            if producer.try_send("queue:slow", value):
                sent += 1
                if sent % 200 == 0:
                    await asyncio.sleep(0)
                continue
            assert producer.is_blocked
            await asyncio.sleep(0.5)
            if not producer.try_send("queue:slow", value):
                blocked_once = True
                break
            sent += 1
        assert blocked_once, f"producer never blocked after {sent} messages"
        assert sent < 60_000
        peak_rss = max(p.memory_info().rss for p in procs)
        assert peak_rss < 200 * 1024 * 1024

        # The consumer catches up: the producer is released.
        got = 0
        while got < sent:
            m = await consumer.receive(timeout=10)
            assert isinstance(m, Message)
            got += 1
            if got > 30_000:
                break
        await asyncio.wait_for(producer.wait_unblocked(), 10)
        assert producer.try_send("queue:slow", value)
        await producer.close()
        await consumer.close()


async def test_a_producer_held_past_its_delivery_timeout_fails_and_nothing_is_stored(tmp_path: Path) -> None:
    """Nobody consumes: past ``--max-backlog`` the partition takes no more, a held batch is refused
    (BACKLOG_FULL) and resent until the producer's delivery timeout, then fails; the consumer that
    comes later gets every acknowledged message and never the failed one."""
    cluster = LocalCluster(
        tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0, mm_args=["--max-backlog", "20"]
    )
    with cluster:
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", linger_ms=0, delivery_timeout=8.0
        )
        acked: list[bytes] = []
        for i in range(21):  # one past the limit: the backlog is over it once the last is stored
            value = b"kept-%d" % i
            await producer.send("queue:full", value)
            acked.append(value)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(ClientError) as refused:
            await asyncio.wait_for(producer.send("queue:full", b"refused"), 60)
        assert refused.value.code == ErrorCode.BACKLOG_FULL, refused.value
        assert 8.0 <= loop.time() - began < 30, loop.time() - began
        await producer.close()

        consumer = await Consumer.connect(cluster.bootstrap, "queue:full")
        got: list[bytes] = []
        with contextlib.suppress(TimeoutError):
            while True:
                m = await consumer.receive(timeout=3)
                if isinstance(m, Message):
                    got.append(m.value)
        await consumer.close()
        assert got == acked, got
