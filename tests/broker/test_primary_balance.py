"""After restarts, primaries are balanced again: the returning MM gets primaries back through the
graceful handoff (in-sync copy first, then epoch + 1), while a producer keeps sending.

3 MMs with the local controller, 6 fixed partitions with 2 replicas. One MM is restarted twice
(SIGTERM, start again); within a minute each MM leads 2 partitions (max - min <= 1), and the
producer's own bookkeeping shows nothing lost, duplicated or out of order.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

from failover_workload import ConsumerLoad, ProducerLoad, check, stop_all, wait_consumed

from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:balance"


def led(cluster: LocalCluster) -> Counter[str]:
    counts = Counter(dict.fromkeys(cluster.mm_names, 0))
    counts.update(a.primary for a in cluster.table().values() if a.primary)
    return counts


async def test_primaries_are_balanced_again_after_restarting_one_mm_twice(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=3, replicas=2, fixed=6, on_demand_per_mm=0, log_level="INFO")
    with cluster:
        await asyncio.to_thread(cluster.wait_in_sync, 30)
        load = ProducerLoad(
            "b0", await Producer.connect(cluster.bootstrap, partition_type="fixed", partition="local-fixed-0")
        )
        consumer = ConsumerLoad(await Consumer.connect(cluster.bootstrap, DEST))
        stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
        consuming = asyncio.create_task(consumer.run(stop_consuming))
        producing = asyncio.create_task(load.run(DEST, stop_producing))
        victim = "mm-0"
        for _ in range(2):
            await asyncio.to_thread(cluster.kill_mm, victim, signal.SIGTERM)
            await asyncio.to_thread(cluster.start_mm, victim)
            await asyncio.to_thread(cluster.wait_in_sync, 60)
        restarted = time.monotonic()
        counts = led(cluster)
        while max(counts.values()) - min(counts.values()) > 1 and time.monotonic() - restarted < 60:
            await asyncio.sleep(0.5)
            counts = led(cluster)
        balanced_after = time.monotonic() - restarted
        await stop_all(stop_producing, [producing])
        await wait_consumed([load], consumer)
        await stop_all(stop_consuming, [consuming])

        assert max(counts.values()) - min(counts.values()) <= 1, (counts, cluster.state()["events"][-15:])
        assert counts[victim] >= 1 and balanced_after < 60
        assert all(len(a.replicas) == 2 for a in cluster.table().values()), cluster.table()
        assert not load.failed, load.failed[:3]
        figures = check([load], consumer)
        assert figures["acked"] > 100, figures
        await load.producer.close()
        await consumer.consumer.close()
