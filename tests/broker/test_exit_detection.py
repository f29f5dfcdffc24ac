"""A primary MM whose process ends is failed over at once, not a lease later.

A process that exited can neither write nor acknowledge, so its exit is certain evidence of the
loss: the local controller watches the processes it started and fails the MM over the moment one
ends. A frozen process (SIGSTOP) has not exited, and only its lease decides it. The lease here is
30 s, so a failover within seconds can only come from the exit. The signals are sent from outside
the runner, as a user's ``kill`` would be.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:exit-detection"
PARTITION = "local-fixed-0"
LEASE_S = 30.0


async def test_a_killed_primary_fails_over_long_before_its_lease_ends(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=3, replicas=2, fixed=1, on_demand_per_mm=0, lease_s=LEASE_S)
    with cluster:
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", partition=PARTITION, linger_ms=0, delivery_timeout=60
        )
        try:
            await producer.send(DEST, b"before")
            before = cluster.table()[PARTITION]
            victim = before.primary
            assert victim is not None
            pid = cluster.pid(victim)

            os.kill(pid, signal.SIGSTOP)  # frozen, not dead: the lease decides, and it is 30 s
            await asyncio.sleep(3.0)
            frozen = cluster.table()[PARTITION]
            assert (frozen.epoch, frozen.primary) == (before.epoch, victim)

            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            await producer.send(DEST, b"after")  # acknowledged by the new primary
            took = time.monotonic() - killed
            after = cluster.table()[PARTITION]
            assert after.epoch == before.epoch + 1 and after.primary not in (None, victim)
            assert took < LEASE_S / 2, f"the produce after the kill waited {took:.1f} s"
            assert any(e["message"] == f"{victim}: process exited" for e in cluster.state()["events"])
        finally:
            await producer.close()

        consumer = await Consumer.connect(cluster.bootstrap, DEST)
        try:
            got = []
            for _ in range(2):
                message = await consumer.receive(timeout=30)
                assert isinstance(message, Message)
                got.append(bytes(message.value))
                consumer.ack(message)
            assert got == [b"before", b"after"]
        finally:
            await consumer.close()
