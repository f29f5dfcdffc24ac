"""A primary whose lease lapsed writes no transaction record either (real processes).

A transaction's commit stops at the participant right after its epoch was checked and before
anything was recorded (``HYBRIDMQ_TX_PAUSE=mm-before-prepare``, a test-only hook). Then the local
controller stalls (an API server too slow to answer Lease renewals): the primary's lease lapses
while nobody fails it over, and the commit goes on. Its prepare and decision records would be
records of a primary that may already be replaced, so none may reach the log. The checker is the
size of the partition's segment files on the primary's disk, read while its own ``/admin`` says
the lease is lapsed, and, once the lease is back, what a consumer gets: the message once if the
commit said it committed, nothing if it said it failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_workload import FencedPrimary, until

from hybridmq.client import ClientError, Consumer, Session
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:fenced-tx"
STALL_S = 5.0  # the 1 s lease lapses about 1 s in: ~4 s fenced


@pytest.fixture
def paused(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    """2 MMs, one fixed partition with 2 replicas; each MM pauses its first prepare."""
    pause_file = tmp_path / "paused"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HYBRIDMQ_TX_PAUSE", "mm-before-prepare")
        env.setenv("HYBRIDMQ_TX_PAUSE_FILE", str(pause_file))
        with LocalCluster(tmp_path / "c", mms=2, replicas=2, fixed=1, on_demand_per_mm=0) as cluster:
            cluster.wait_in_sync()
            yield cluster, pause_file


async def test_fenced_primary_records_no_transaction(paused: tuple[LocalCluster, Path]) -> None:
    cluster, pause_file = paused
    fixed = cluster.table()["local-fixed-0"]
    primary = str(fixed.primary)

    session = await Session.connect(cluster.bootstrap, transacted=True)
    await session.send(QUEUE, b"tx-1", partition=fixed.name)
    commit = asyncio.create_task(session.commit())
    await until(pause_file.exists, 30, "the prepare to pause")

    try:
        async with FencedPrimary(cluster, primary, fixed.name, STALL_S) as fence:
            before = fence.log_bytes()
            pause_file.unlink()  # the prepare goes on, fenced
            await asyncio.sleep(1.5)
            during = fence.log_bytes()
            still_fenced = fence.fenced()
    finally:
        pause_file.unlink(missing_ok=True)
    assert still_fenced, "the lease came back before the log was measured: no test"
    assert during == before, f"the fenced primary wrote {during - before} bytes of a transaction"

    try:
        await asyncio.wait_for(commit, 60)
        committed = True
    except ClientError:
        committed = False
    await session.close()

    got: list[bytes] = []
    async with await Consumer.connect(cluster.bootstrap, QUEUE) as consumer:
        try:
            while True:
                msg = await consumer.receive(timeout=3.0)
                got.append(msg.value)
        except TimeoutError:
            pass
    assert got == ([b"tx-1"] if committed else []), (committed, got)
