"""An acknowledgement settles the delivery of the partition it names, never another one's.

One consumer subscription reaches every partition of an MM. Two partitions of one MM each hand the
consumer a batch at the same offset; the consumer acknowledges only one of them and leaves. The other
one was never acknowledged: it must come again to the next consumer, and the acknowledged one must not.
(An ACK used to settle whichever of the consumer's deliveries on that MM had that offset first.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster
from receiving import receive_n

QUEUE = "queue:ackroute"
PARTITIONS = ("fixed-0-0", "fixed-0-1")


@pytest.mark.parametrize("acked", PARTITIONS)
async def test_an_ack_settles_only_its_own_partition(tmp_path: Path, acked: str) -> None:
    with LocalCluster(tmp_path, mms=1, fixed_per_mm=2, on_demand_per_mm=0) as cluster:
        for partition in PARTITIONS:
            producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", partition=partition)
            await producer.send(QUEUE, partition.encode())
            await producer.close()

        first = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False)
        got = await receive_n(first, 2)
        assert sorted(m.partition for m in got) == sorted(PARTITIONS)
        assert got[0].offset == got[1].offset, "the test needs the same offset in both partitions"
        confirmation = first.ack(next(m for m in got if m.partition == acked))
        assert confirmation is not None
        await confirmation
        await first.close()

        second = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False)
        again = await receive_n(second, 1)
        assert [m.partition for m in again] != [acked], f"the acknowledged message of {acked} came again"
        assert again[0].redelivered
        with pytest.raises(TimeoutError):
            extra = await second.receive(timeout=2)
            pytest.fail(f"one more delivery: {extra}")
        await second.close()
        await asyncio.sleep(0)
