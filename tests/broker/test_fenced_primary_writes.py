"""A primary whose lease lapsed writes nothing to its log: not a produce, and not one of the
broker's own records either (cursors re-written by log retention, a rejected message moved to
``queue:_DMQ``) - any of those could be a record of a primary already replaced (real processes).

The local controller stalls (an API server too slow to answer Lease renewals): the primary's lease
lapses while nobody fails it over. Meanwhile log retention runs every 0.3 s and a consumer rejects a
message. The checker is the size of the partition's segment files on the primary's disk, read while
its own ``/admin`` says the lease is lapsed, and what the consumers get once the lease is back: the
rejected message reaches ``queue:_DMQ`` (nothing is lost), the others the queue's consumer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from failover_workload import FencedPrimary

from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster
from receiving import receive_n

QUEUE = "queue:fenced"
STALL_S = 5.0  # the 1 s lease lapses about 1 s in: ~4 s fenced


async def _receive(consumer: Consumer) -> Message:
    return (await receive_n(consumer, 1, timeout=30))[0]


async def _confirmed(answer: asyncio.Future[object]) -> bool:
    """Whether a rejection was taken (a refused one comes back: the message is redelivered)."""
    try:
        await answer
    except ClientError:
        return False
    return True


async def test_fenced_primary_never_grows_its_log(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        mms=2,
        replicas=2,
        fixed=1,
        on_demand_per_mm=0,
        mm_args=["--retention-interval", "0.3"],
    )
    with cluster:
        await asyncio.to_thread(cluster.wait_in_sync)
        fixed = cluster.table()["local-fixed-0"]
        primary = str(fixed.primary)
        async with await Producer.connect(
            cluster.bootstrap, partition_type="fixed", partition=fixed.name
        ) as producer:
            await asyncio.gather(*(producer.send(QUEUE, f"m{i}".encode()) for i in range(10)))
        consumer = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False, window=1)
        try:
            for _ in range(3):  # acknowledged: the queue's cursor is above the log start
                done = consumer.ack(await _receive(consumer))
                assert done is not None
                await done
            rejected = await _receive(consumer)  # held until the lease has lapsed
            assert rejected.value == b"m3"

            async with FencedPrimary(cluster, primary, fixed.name, STALL_S) as fence:
                before = fence.log_bytes()
                answer = consumer.nack(rejected, requeue=False)
                assert answer is not None
                await asyncio.sleep(1.5)  # five retention rounds
                during = fence.log_bytes()
                still_fenced = fence.fenced()
            assert still_fenced, "the lease came back before the log was measured: no test"
            assert during == before, f"the fenced primary wrote {during - before} bytes to its log"

            # Nothing is lost: the rejection was refused while fenced (the message comes back and
            # is rejected again) or taken; either way it ends in _DMQ, and the rest is consumed.
            rejected_for_good = await _confirmed(answer)
            got: list[bytes] = []
            while len(got) < 6 or not rejected_for_good:
                msg = await _receive(consumer)
                if msg.value == b"m3":
                    again = consumer.nack(msg, requeue=False)
                    assert again is not None
                    rejected_for_good = await _confirmed(again)
                    continue
                got.append(msg.value)
                done = consumer.ack(msg)
                assert done is not None
                await done
            assert sorted(got) == [f"m{i}".encode() for i in range(4, 10)]
            async with await Consumer.connect(cluster.bootstrap, "queue:_DMQ") as dmq:
                moved = await _receive(dmq)
                assert moved.value == b"m3" and moved.attributes.get("orig") == QUEUE
                try:
                    extra = await dmq.receive(timeout=2)
                except TimeoutError:
                    extra = None
                assert extra is None, f"moved to _DMQ twice: {extra}"
        finally:
            await consumer.close()
