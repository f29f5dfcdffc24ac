"""A slow consumer throttles its producers end to end; broker memory stays bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil

from hybridmq.client import Consumer, Message, Producer
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
