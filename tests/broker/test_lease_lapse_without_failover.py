"""The liveness authority stalls (an API server too slow to answer Lease renewals): every MM's lease
lapses, the primaries fence their writes, and nobody fails over, because the authority forgives the
time it could not listen. Once the leases are renewed the same primaries, at the same epoch, take
writes again, and the consumer gets every acknowledged message: none was counted as handed out
while nothing could be sent (and so moved to ``_DMQ`` unseen)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

from failover_workload import (
    ProducerLoad,
    check,
    stall_controller,
    start_load,
    stop_all,
    until,
    wait_consumed,
)

from hybridmq.local.runner import LocalCluster

DEST = "queue:lease-lapse"
STALL_S = 2.5  # well past the 1 s lease and the 0.5 s heartbeat timeout


async def test_lapsed_lease_fences_then_resumes_without_losing_acks(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=3, replicas=2, fixed=1, on_demand_per_mm=0, log_level="INFO")
    with cluster:
        cluster.wait_in_sync()
        fixed = cluster.table()["local-fixed-0"]
        load, consumer, stop_producing, stop_consuming, consuming, task = await start_load(
            cluster.bootstrap, fixed.name, DEST
        )
        producing = [task]
        loop = asyncio.get_running_loop()
        try:
            await until(lambda: len(load.acked) > 50 and consumer.deliveries > 20, 30, "steady load")
            primary = str(fixed.primary)
            failures = cluster.mm_stats(primary)["lease"]["failures"]
            stall = threading.Thread(target=stall_controller, args=(cluster, STALL_S))
            stall.start()
            await asyncio.to_thread(stall.join)
            back_at = loop.time()
            # Two heartbeats in a row failed (0.5 s timeout each, 0.2 s apart): more than the 1 s
            # lease passed since the last successful one started, so the primary's lease lapsed.
            lapsed = cluster.mm_stats(primary)["lease"]["failures"] - failures
            assert lapsed >= 2, f"only {lapsed} heartbeats of {primary} failed during the stall"
            # Everything acknowledged before the stall reaches the consumer.
            before = ProducerLoad("fx", load.producer, acked=dict(load.acked))
            await wait_consumed([before], consumer, within=20)
            check([before], consumer)
            # The same primary takes writes again, at the same epoch.
            await until(lambda: load.acked_after(back_at + 0.5) > 20, 30, "acks once the lease is back")
            await asyncio.sleep(1.0)
            await stop_all(stop_producing, producing)
            await wait_consumed([load], consumer, within=30)
            now = cluster.table()[fixed.name]
            print(
                f"\nepoch {fixed.epoch}->{now.epoch} primary {fixed.primary}->{now.primary} "
                f"acked={len(load.acked)} failed={len(load.failed)} consumed={len(consumer.values())}"
            )
            figures = check([load], consumer)
            assert figures["acked"] > 100, figures
            assert (now.epoch, now.primary) == (fixed.epoch, fixed.primary), "failed over: not this case"
        finally:
            stop_producing.set()
            stop_consuming.set()
            await asyncio.wait([*producing, consuming], timeout=10)
            for client in (load.producer, consumer.consumer):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 5)
