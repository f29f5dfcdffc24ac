"""A delivery whose count was committed but that was never sent (its consumer left while the round
counting it waited for the backup) does not count: the next consumer gets the messages as first
deliveries (real processes).

The backup is stopped (SIGSTOP), so the primary's round of delivery records waits until the
controller drops the backup from the in-sync set; the first consumer leaves meanwhile. The checker:
what the first consumer got (nothing) and the ``redelivered`` / ``delivery_count`` the second one
sees.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:unsent"


async def test_deliveries_never_sent_are_not_counted(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=2, replicas=2, fixed=1, on_demand_per_mm=0) as cluster:
        await asyncio.to_thread(cluster.wait_in_sync)
        fixed = cluster.table()["local-fixed-0"]
        backup = next(r for r in fixed.replicas if r != fixed.primary)
        async with await Producer.connect(
            cluster.bootstrap, partition_type="fixed", partition=fixed.name
        ) as producer:
            await asyncio.gather(*(producer.send(QUEUE, f"m{i}".encode()) for i in range(5)))
        first = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False, window=1)
        m0 = await first.receive(timeout=30)
        assert isinstance(m0, Message) and m0.value == b"m0"
        cluster.kill_mm(backup, signal.SIGSTOP)
        try:
            # The acknowledgement frees the window: m1 is handed out in a round that waits for the
            # stopped backup; the consumer leaves before it could be sent.
            first.ack(m0)
            try:
                early = await first.receive(timeout=0.5)
            except TimeoutError:
                early = None
            assert early is None, "delivered before the backup was dropped: not this case"
            first.abort()
            # The backup leaves the in-sync set (3 s lag), the waiting round commits, nothing is sent.
            await asyncio.to_thread(
                cluster.wait_until,
                lambda: backup not in cluster.table()[fixed.name].in_sync,
                30,
                "the stopped backup out of the in-sync set",
            )
            await asyncio.sleep(1.0)
        finally:
            cluster.kill_mm(backup, signal.SIGCONT)
        second = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False)
        got: list[tuple[bytes, bool, int]] = []
        try:
            while len(got) < 4:
                msg = await second.receive(timeout=30)
                assert isinstance(msg, Message)
                got.append((msg.value, msg.redelivered, msg.delivery_count))
                second.ack(msg)
        finally:
            await second.close()
        assert sorted(v for v, _, _ in got) == [f"m{i}".encode() for i in range(1, 5)]
        assert all((rd, count) == (False, 1) for _, rd, count in got), got
