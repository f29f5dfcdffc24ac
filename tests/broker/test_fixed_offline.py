"""A fixed partition with no live in-sync replica is offline, not gone: its producer waits for it.

One MM holds the only copy of a fixed partition. Killed, the partition has no primary ("waiting
for one to return": the CM refuses its writes as not writable); started again, the same MM is its
primary at a new epoch with the same data. A fixed producer sending meanwhile is acknowledged once
the partition is back, within its delivery timeout, and nothing is lost or duplicated (before: the
producer failed at once with PARTITION_NOT_WRITABLE; seen on kind when a loaded machine starved the
MMs of a cluster that had just lost a node).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.api.assignment import PartitionType
from hybridmq.client import Consumer, Producer
from hybridmq.client.message import Message
from hybridmq.local.runner import LocalCluster

DEST = "queue:fixed.offline"


async def read_back(cluster: LocalCluster, count: int) -> list[str]:
    """What a queue consumer gets: ``count`` messages, acknowledged."""
    got: list[str] = []
    async with await Consumer.connect(cluster.bootstrap, DEST) as consumer:
        while len(got) < count:
            msg = await consumer.receive(timeout=30)
            assert isinstance(msg, Message)
            got.append(msg.value.decode())
            consumer.ack(msg)
    return got


@pytest.fixture
def single_copy(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, mms=1, cms=1, replicas=1, fixed=1, on_demand_per_mm=0) as cluster:
        yield cluster


async def test_fixed_producer_waits_for_its_offline_partition(single_copy: LocalCluster) -> None:
    cluster = single_copy
    (fixed,) = cluster.partitions(PartitionType.FIXED)
    async with await Producer.connect(
        cluster.bootstrap, partition_type="fixed", key="k", delivery_timeout=90.0
    ) as producer:
        for i in range(20):
            await producer.send(DEST, f"m-{i}".encode(), key="k")
        cluster.kill_mm("mm-0")
        # Offline: the controller took the primary away (no in-sync replica is alive).
        offline = lambda: cluster.table()[fixed.name].primary is None  # noqa: E731
        await asyncio.to_thread(cluster.wait_until, offline, 60, "the partition offline")
        pending = asyncio.ensure_future(producer.send(DEST, b"m-20", key="k"))
        await asyncio.sleep(2.0)  # the CM refuses it meanwhile: the partition takes no writes
        assert not pending.done() or pending.exception() is None, pending.exception()
        await asyncio.to_thread(cluster.start_mm, "mm-0")
        await asyncio.wait_for(pending, 80)
        for i in range(21, 40):
            await producer.send(DEST, f"m-{i}".encode(), key="k")
    got = await read_back(cluster, 40)
    assert got == [f"m-{i}" for i in range(40)]


@pytest.fixture
def single_mm_on_demand(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, mms=1, cms=1, replicas=1, fixed=0, on_demand_per_mm=1) as cluster:
        yield cluster


async def test_on_demand_producer_waits_for_a_writable_partition(single_mm_on_demand: LocalCluster) -> None:
    """The on-demand move finds no writable on-demand partition while the only MM is down: it asks
    again until one exists (its delivery timeout), instead of failing with UNKNOWN_PARTITION."""
    cluster = single_mm_on_demand
    async with await Producer.connect(cluster.bootstrap, delivery_timeout=90.0) as producer:
        for i in range(20):
            await producer.send(DEST, f"m-{i}".encode())
        cluster.kill_mm("mm-0")
        gone = lambda: all(p.primary is None or not p.writable for p in cluster.table().values())  # noqa: E731
        await asyncio.to_thread(cluster.wait_until, gone, 60, "no writable on-demand partition")
        pending = asyncio.ensure_future(producer.send(DEST, b"m-20"))
        await asyncio.sleep(2.0)
        assert not pending.done() or pending.exception() is None, pending.exception()
        await asyncio.to_thread(cluster.start_mm, "mm-0")
        await asyncio.wait_for(pending, 80)
        for i in range(21, 40):
            await producer.send(DEST, f"m-{i}".encode())
    got = await read_back(cluster, 40)
    assert sorted(got, key=lambda v: int(v[2:])) == [f"m-{i}" for i in range(40)]
