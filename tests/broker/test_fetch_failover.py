"""Fetch by offset on a replicated cluster across a primary failover: the log matches the send log."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from hybridmq.client import Fetcher, Producer
from hybridmq.local.runner import LocalCluster
from reading import read_batches


async def test_fetch_after_failover_matches_the_send_log(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", mms=3, replicas=2) as cluster:
        send_log = tmp_path / "p.csv"
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", key="fo", linger_ms=1, send_log=send_log
        )
        partition = producer.partition
        primary = cluster.table()[partition].primary
        assert primary is not None
        sends = [producer.send("queue:fo", f"m{i}".encode()) for i in range(300)]
        await asyncio.gather(*sends)
        cluster.kill_mm(primary, signal.SIGKILL)
        more = [producer.send("queue:fo", f"n{i}".encode()) for i in range(300)]
        results = await asyncio.gather(*more, return_exceptions=True)
        await producer.close()
        acked = {tuple(line.split(",")) for line in send_log.read_text().splitlines()}
        assert len(acked) == 300 + sum(not isinstance(r, BaseException) for r in results)

        fetcher = await Fetcher.connect(cluster.bootstrap, retry_s=30)
        try:
            meta = {p.name: p for p in await fetcher.partitions()}[partition]
            assert meta.primary != primary
            stored: list[tuple[str, str]] = []
            async for b, skip in read_batches(fetcher, meta):
                if not b.control and b.destination == "queue:fo":
                    stored += [(str(b.producer), str(b.sequence(i))) for i in range(skip, len(b.records))]
            assert len(stored) == len(set(stored))  # no duplicate (producer, sequence)
            assert acked <= set(stored)  # every acknowledged message is there
        finally:
            await fetcher.close()
