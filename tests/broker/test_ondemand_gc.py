"""On-demand GC never deletes data someone may still need (real CM + MMs + the local controller).

The MM holding on-demand partitions is killed while producers keep sending and an application
consumer drains the queue, so the taken-over partition's backlog reaches zero within a second. A
stream reader of our own (reads every partition by offset, like the Spark source) was paused
before the kill and resumes after the move: it must find every acknowledged message, none twice.

* the retention after drain keeps the emptied partition for a reader that comes back in time;
* a named reader cursor keeps it beyond the retention until that reader has read it, after which
  it is collected.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest
from failover_workload import ConsumerLoad, ProducerLoad, StreamReader, stop_all, until, wait_consumed

from hybridmq.api.assignment import PartitionState
from hybridmq.client import Consumer, Fetcher, Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:gc"


async def _kill_under_load(
    cluster: LocalCluster,
    reader: StreamReader,
    fetcher: Fetcher,
    commit_as: str | None,
) -> tuple[str, list[ProducerLoad], asyncio.Event, list[asyncio.Task[None]]]:
    """Producers + a draining consumer; the reader reads, pauses; the victim's MM is killed; the
    producers move. Returns the victim partition, the loads, and the consumer's stop/tasks."""
    loads = []
    for i in range(6):  # round robin over the 3 on-demand partitions: 2 producers on each
        p = await Producer.connect(cluster.bootstrap, partition_type="on-demand", linger_ms=1)
        loads.append(ProducerLoad(f"p{i}", p))
    victim_partition = loads[0].producer.partition
    victim = cluster.table()[victim_partition].primary
    assert victim is not None
    movers = [ld for ld in loads if ld.producer.partition == victim_partition]
    consumer = ConsumerLoad(await Consumer.connect(cluster.bootstrap, DEST))
    stop_consuming, stop_producing = asyncio.Event(), asyncio.Event()
    consuming = [asyncio.create_task(consumer.run(stop_consuming))]
    producing = [asyncio.create_task(ld.run(DEST, stop_producing, window=40, pause=0.002)) for ld in loads]
    await asyncio.sleep(1.5)
    await reader.catch_up(fetcher)  # the stream's last micro-batch before it is stopped
    if commit_as is not None:
        await reader.commit(fetcher, commit_as)
    await asyncio.sleep(0.5)
    # Killed with its backup in sync: a backup that a loaded machine left behind would leave the
    # partition without a copy to take over (its metadata MM_UNAVAILABLE for good).
    await asyncio.to_thread(cluster.wait_in_sync, 30)
    cluster.kill_mm(victim, signal.SIGKILL)
    await until(
        lambda: cluster.table()[victim_partition].state == PartitionState.DRAINING, 10, "the takeover"
    )
    await until(lambda: all(ld.producer.partition != victim_partition for ld in movers), 15, "the move")
    await asyncio.sleep(1.0)
    await stop_all(stop_producing, producing)
    for ld in loads:
        await ld.producer.close()
        assert not ld.failed, (ld.name, ld.failed[:3])
    await wait_consumed(loads, consumer)
    return victim_partition, loads, stop_consuming, consuming


def _report(cluster: LocalCluster, partition: str) -> dict[str, int]:
    """The partition's figures as its primary reports them to the controller."""
    state = cluster.state()
    primary = cluster.table()[partition].primary or ""
    return dict(state["reports"].get(primary, {}).get("partitions", {}).get(partition, {}))


async def test_paused_reader_finds_every_acked_message_after_the_move(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hybridmq.client")
    cluster = LocalCluster(
        tmp_path, mms=3, replicas=2, fixed=0, on_demand_per_mm=1, retention_after_drain=60, log_level="INFO"
    )
    with cluster:
        fetcher = await Fetcher.connect(cluster.bootstrap, retry_s=30)
        reader = StreamReader(DEST)
        victim, loads, stop, tasks = await _kill_under_load(cluster, reader, fetcher, None)
        await asyncio.sleep(3.0)  # the stream query is restarted a few seconds later
        await reader.catch_up(fetcher)
        await stop_all(stop, tasks)
        await fetcher.close()
        assert all(ld.acked for ld in loads)
        reader.check(loads)
        assert victim in cluster.table(), f"{victim} deleted within its retention"
        gone = [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()]
        assert not gone, f"a moving producer found its old partition deleted: {gone[:2]}"


async def test_named_reader_cursor_holds_a_drained_partition_until_read(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, mms=3, replicas=2, fixed=0, on_demand_per_mm=1, retention_after_drain=1, log_level="INFO"
    )
    with cluster:
        fetcher = await Fetcher.connect(cluster.bootstrap, retry_s=30)
        reader = StreamReader(DEST)
        victim, loads, stop, tasks = await _kill_under_load(cluster, reader, fetcher, "audit-job")
        # Drained for the application (backlog 0, producers gone), but the named reader is behind.
        await until(
            lambda: (
                _report(cluster, victim).get("backlog") == 0
                and _report(cluster, victim).get("producers") == 0
            ),
            40,
            "the producers to detach and the consumer to drain the old partition",
        )
        lag = _report(cluster, victim).get("readerLag", 0)
        assert lag > 0, f"no reader lag reported: {_report(cluster, victim)}"
        await asyncio.sleep(4.0)  # well past the 1 s retention
        assert victim in cluster.table(), (
            f"deleted while a reader was behind: {cluster.state()['events'][-6:]}"
        )
        await reader.catch_up(fetcher)
        await reader.commit(fetcher, "audit-job")
        await until(lambda: victim not in cluster.table(), 20, f"{victim} collected once read")
        await stop_all(stop, tasks)
        await fetcher.close()
        reader.check(loads)
