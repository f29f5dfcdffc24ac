"""A partition's incarnation, as readers see it through FETCH_META: kept by a failover, new when the
partition's data is replaced."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

from hybridmq.client import Fetcher, Producer
from hybridmq.local.runner import LocalCluster


async def incarnations(bootstrap: str) -> dict[str, str | None]:
    fetcher = await Fetcher.connect(bootstrap, retry_s=30)
    try:
        return {p.name: p.incarnation for p in await fetcher.partitions()}
    finally:
        await fetcher.close()


async def produce(bootstrap: str, count: int, key: str) -> str:
    producer = await Producer.connect(bootstrap, partition_type="fixed", key=key, linger_ms=1)
    try:
        await asyncio.gather(*(producer.send("queue:inc", f"m{i}".encode()) for i in range(count)))
        return producer.partition
    finally:
        await producer.close()


async def test_failover_keeps_the_incarnation(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", mms=2, replicas=2) as cluster:
        partition = await produce(cluster.bootstrap, 50, "inc")
        cluster.wait_in_sync()
        before = await incarnations(cluster.bootstrap)
        assert all(before.values()), before  # every partition has one
        assert len(set(before.values())) == len(before)  # and they differ
        old_primary = cluster.table()[partition].primary
        assert old_primary is not None
        cluster.kill_mm(old_primary, signal.SIGKILL)
        cluster.wait_until(
            lambda: cluster.table()[partition].primary not in (None, old_primary), 60, "a new primary"
        )
        after = await incarnations(cluster.bootstrap)
        assert after[partition] == before[partition]


async def test_replaced_data_gets_a_new_incarnation(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=1, fixed_per_mm=2, on_demand_per_mm=0) as cluster:
        partition = await produce(cluster.bootstrap, 20, "inc")
        before = await incarnations(cluster.bootstrap)
        cluster.kill_mm("mm-0", signal.SIGKILL)
        cluster.start_mm("mm-0")  # a restart alone keeps every incarnation
        assert await incarnations(cluster.bootstrap) == before
        cluster.kill_mm("mm-0", signal.SIGKILL)
        shutil.rmtree(tmp_path / "mm-0" / partition)  # its volume lost: the partition starts empty
        cluster.start_mm("mm-0")
        after = await incarnations(cluster.bootstrap)
        assert after[partition] is not None and after[partition] != before[partition]
        others = set(before) - {partition}
        assert others and {n: after[n] for n in others} == {n: before[n] for n in others}
