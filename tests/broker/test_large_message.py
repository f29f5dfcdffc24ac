"""A 1 GiB message streams producer -> CM -> MM -> CM -> consumer; CM and MM RSS stay < 200 MB."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path

import psutil

from hybridmq.client import Consumer, Producer
from hybridmq.client.consumer import StreamMessage
from hybridmq.local.runner import LocalCluster

CHUNK = 1 << 20
TOTAL = 1 << 30  # 1 GiB


def generated_chunks(digest: hashlib._Hash) -> Iterator[bytes]:
    """1 GiB of generated data (no file): each chunk differs by its index."""
    base = bytes(range(256)) * (CHUNK // 256)
    for i in range(TOTAL // CHUNK):
        chunk = i.to_bytes(8, "big") + base[8:]
        digest.update(chunk)
        yield chunk


async def test_one_gib_message_end_to_end_with_bounded_broker_memory(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0)
    with cluster:
        procs = {n: psutil.Process(cluster.pid(n)) for n in ("cm-0", "mm-0")}
        peak = dict.fromkeys(procs, 0)
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                for n, p in procs.items():
                    peak[n] = max(peak[n], p.memory_info().rss)
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        consumer = await Consumer.connect(cluster.bootstrap, "queue:blobs", window_bytes=8 << 20)
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", max_pending_bytes=8 << 20
        )
        sent_digest = hashlib.sha256()
        send_task = asyncio.create_task(
            producer.send_stream("queue:blobs", generated_chunks(sent_digest), key=b"big")
        )

        msg = await consumer.receive(timeout=60)
        assert isinstance(msg, StreamMessage) and msg.key == b"big"
        got_digest = hashlib.sha256()
        size = 0
        async for chunk in msg.chunks():
            got_digest.update(chunk)
            size += len(chunk)
        ack = await send_task
        stop.set()
        await sampler
        assert size == TOTAL
        assert got_digest.hexdigest() == sent_digest.hexdigest()
        assert ack.partition == msg.partition
        for n, rss in peak.items():
            assert rss < 200 * 1024 * 1024, f"{n} peaked at {rss / 2**20:.0f} MiB"
        print({n: f"{rss / 2**20:.0f} MiB" for n, rss in peak.items()})
        await producer.close()
        await consumer.close()
