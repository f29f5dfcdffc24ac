"""A primary moving off an MM leaves that MM's other partitions' deliveries alone (real processes).

A consumer holds messages of an on-demand partition on mm-0, unacknowledged. Then a fixed
partition's primary moves onto mm-0 and off it again (mm-1 is killed, its fixed partition fails over
to mm-0; mm-1 returns and the controller balances one primary back to it: no fault on mm-0).
The held messages' partition never moved, so their deliveries are still good: the consumer's
acknowledgements must be confirmed and none of the messages may come again. The checker is the
test's own record of what the application received.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_workload import until

from hybridmq.api.assignment import PartitionType
from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:held"
COUNT = 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """2 MMs, 1 CM, two fixed partitions and one on-demand partition per MM, 2 replicas each."""
    with LocalCluster(tmp_path, mms=2, cms=1, replicas=2, fixed=2, on_demand_per_mm=1) as c:
        yield c


def _primary_of(cluster: LocalCluster, partition: str) -> str | None:
    return cluster.table()[partition].primary


def _fixed_primaries(cluster: LocalCluster) -> list[str | None]:
    return sorted(p.primary or "" for p in cluster.partitions(PartitionType.FIXED))


async def test_acks_of_an_unmoved_partition_survive_a_primary_move_off_its_mm(cluster: LocalCluster) -> None:
    held = next(p for p in cluster.partitions(PartitionType.ON_DEMAND) if p.primary == "mm-0")
    moving = next(p for p in cluster.partitions(PartitionType.FIXED) if p.primary == "mm-1")

    producer = await Producer.connect(
        cluster.bootstrap, partition_type=PartitionType.ON_DEMAND, partition=held.name
    )
    for i in range(COUNT):
        await producer.send(QUEUE, f"m{i}".encode())
    await producer.close()

    consumer = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False, window=COUNT)
    in_hand: list[Message] = []
    while len(in_hand) < COUNT:
        m = await consumer.receive(timeout=20)
        assert isinstance(m, Message)
        in_hand.append(m)
    assert {m.partition for m in in_hand} == {held.name}

    # The fixed partition led by mm-1 moves to mm-0, then (mm-1 back and in sync) off mm-0 again.
    cluster.kill_mm("mm-1", signal.SIGKILL)
    await until(lambda: _primary_of(cluster, moving.name) == "mm-0", 30, "the failover to mm-0")
    cluster.start_mm("mm-1")
    await until(lambda: _fixed_primaries(cluster) == ["mm-0", "mm-1"], 60, "a primary balanced back to mm-1")
    assert _primary_of(cluster, held.name) == "mm-0", "the held messages' partition did not move"
    await asyncio.sleep(1.0)  # every CM has the new table

    confirmations = [consumer.ack(m) for m in in_hand]
    assert all(c is not None for c in confirmations), "every held message was still outstanding"
    outcomes = await asyncio.wait_for(asyncio.gather(*confirmations, return_exceptions=True), 20)
    pairs = zip(in_hand, outcomes, strict=True)
    refused = [(m.offset, repr(o)) for m, o in pairs if isinstance(o, BaseException)]
    assert not refused, f"{len(refused)} acknowledgements refused: {refused[:3]}"

    again: list[tuple[str, int]] = []
    try:
        while True:
            m = await consumer.receive(timeout=3.0)
            assert isinstance(m, Message)
            again.append((m.partition, m.offset))
    except TimeoutError:
        pass
    assert not again, f"acknowledged messages delivered again: {again[:5]}"
    await consumer.close()
