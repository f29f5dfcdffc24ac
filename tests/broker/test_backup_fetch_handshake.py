"""A backup whose connection to its primary ends during the handshake (the primary closed it before
answering: restarting, overloaded, a network cut) tries again, like after any lost connection. Before,
the handshake's ConnectionClosed was not a transport error to the backup's fetch loop, which ended
for good: the primary's in-sync set stayed below minInSync and every write to the partition was
refused (NOT_ENOUGH_REPLICAS after the append) until the producers' delivery timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from relay import Relay

from hybridmq.client import Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:handshake"


async def test_backup_fetches_again_after_a_cut_handshake(tmp_path: Path) -> None:
    # One fixed partition on 2 MMs (minInSync 2); each MM is reached through a relay.
    cluster = LocalCluster(tmp_path / "run", mms=2, replicas=2, fixed=1, on_demand_per_mm=0)
    relays = {}
    for mm in cluster.mm_names:
        advertised = cluster.mm_ports[mm]
        cluster.mm_ports[mm] = cluster.ports.reserve()
        relays[mm] = Relay(advertised, cluster.mm_ports[mm])
    try:
        with cluster:
            cluster.wait_in_sync(60)
            async with await Producer.connect(
                cluster.bootstrap, partition_type="fixed", key="k", delivery_timeout=40
            ) as producer:
                await producer.send(DEST, b"before", key="k")
                primary = cluster.table()[producer.partition].primary
                assert primary is not None
                relay = relays[primary]
                # The backup's fetch connection ends, and so does every new one at once, for 3 s.
                relay.refusing = True
                relay.cut()
                await asyncio.sleep(3)
                relay.refusing = False
                started = time.monotonic()
                for n in range(10):
                    await asyncio.wait_for(producer.send(DEST, f"after-{n}".encode(), key="k"), 60)
                took = time.monotonic() - started
            assert took < 30, f"acknowledged again only after {took:.1f} s"
            table = cluster.table()[producer.partition]
            assert set(table.in_sync) == set(table.replicas), table
    finally:
        for r in relays.values():
            r.close()
