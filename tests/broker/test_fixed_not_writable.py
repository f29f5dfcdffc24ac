"""A fixed partition without a primary refuses writes (``PARTITION_NOT_WRITABLE``) until one
returns: its producers wait that out and resend, stored once each (real processes).

One MM holds the only copy of the fixed partition; a kill -9 leaves the partition offline (no
in-sync replica to promote) until the MM comes back and takes it over at the next epoch. Sends made
meanwhile must all be acknowledged once it is back, and the partition must hold each exactly once,
in the order sent. The checker reads the partition by offset and compares with what the test sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.client import Fetcher, Producer
from hybridmq.local.runner import LocalCluster
from reading import read_values

QUEUE = "queue:offline"


@pytest.fixture
def single_copy(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, mms=1, replicas=1, fixed=1, on_demand_per_mm=0) as c:
        yield c


async def test_fixed_producer_resends_through_a_failover_without_primary(single_copy: LocalCluster) -> None:
    cluster = single_copy
    name = cluster.partitions()[0].name
    producer = await Producer.connect(
        cluster.bootstrap, partition_type="fixed", linger_ms=1, delivery_timeout=120
    )
    before = [await producer.send(QUEUE, f"v{i}".encode()) for i in range(20)]
    assert {a.partition for a in before} == {name}

    cluster.kill_mm("mm-0")
    await asyncio.to_thread(
        cluster.wait_until,
        lambda: cluster.table()[name].primary is None,
        60,
        f"{name} offline",
    )
    # The CM refuses these with PARTITION_NOT_WRITABLE while the partition has no primary.
    during = [asyncio.ensure_future(producer.send(QUEUE, f"v{i}".encode())) for i in range(20, 60)]
    await asyncio.sleep(1.5)
    assert not any(f.done() for f in during), [f.exception() for f in during if f.done()]
    cluster.start_mm("mm-0")
    acks = await asyncio.wait_for(asyncio.gather(*during, return_exceptions=True), 120)
    failed = [a for a in acks if isinstance(a, BaseException)]
    assert not failed, f"{len(failed)} of {len(acks)} sends failed: {failed[:3]}"
    await producer.close()

    async with await Fetcher.connect(cluster.bootstrap) as fetcher:
        (meta,) = [p for p in await fetcher.partitions() if p.name == name]
        stored = [value for _, value in await read_values(fetcher, meta, QUEUE)]
    assert stored == [f"v{i}".encode() for i in range(60)], stored
