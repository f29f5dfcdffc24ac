"""BackupFetcher against in-memory primaries: replication, failover with truncation, fencing,
snapshot catch-up for new backups, and joining the in-sync set only when caught up."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from hybridmq.broker.log import LogConfig, PartitionLog
from hybridmq.broker.replication import (
    CATCHUP_MARKER,
    BackupFetcher,
    FetcherState,
    FetchRequest,
    FetchResponse,
    LocalTransport,
    PartitionPrimary,
    Snapshot,
)

CFG = LogConfig(fsync="group", segment_bytes=16 * 1024)


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def headers(log: PartitionLog) -> list[tuple[int, int, int]]:
    return [(h.base_offset, h.record_count, h.epoch) for h in log.iter_batch_headers()]


def contents(log: PartitionLog) -> list[tuple[int, bytes]]:
    return [(h.base_offset, bytes(p)) for h, p in log.iter_batches()]


class Cluster:
    """Logs of replicas a, b, c in one process, fetchers started on demand."""

    def __init__(self, tmp_path: Path) -> None:
        self.logs = {r: PartitionLog.open(tmp_path / r, CFG) for r in "abc"}
        self.fetchers: dict[str, BackupFetcher] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.primaries: list[tuple[PartitionPrimary, asyncio.Task[None]]] = []

    def primary(self, replica: str, epoch: int, replicas: str = "abc", **kw: object) -> PartitionPrimary:
        primary = PartitionPrimary(
            self.logs[replica],
            partition="p0",
            replica_id=replica,
            epoch=epoch,
            replicas=tuple(replicas),
            lag_time_ms=kw.pop("lag_time_ms", 1000),  # type: ignore[arg-type]
            **kw,  # type: ignore[arg-type]
        )
        self.primaries.append((primary, asyncio.create_task(primary.run_maintenance(0.02))))
        return primary

    def follow(self, replica: str, transport: LocalTransport, epoch: int, **kw: object) -> BackupFetcher:
        fetcher = BackupFetcher(
            self.logs[replica],
            partition="p0",
            replica_id=replica,
            epoch=epoch,
            transport=transport,
            max_wait_ms=20,
            retry_backoff_ms=5,
            **kw,  # type: ignore[arg-type]
        )
        self.fetchers[replica] = fetcher
        self.tasks[replica] = asyncio.create_task(fetcher.run())
        return fetcher

    async def stop(self, replica: str) -> None:
        await self.fetchers[replica].stop()
        await asyncio.wait_for(self.tasks.pop(replica), 2)

    async def close(self) -> None:
        for replica in list(self.tasks):
            await self.stop(replica)
        for primary, task in self.primaries:
            primary.close()
            await task
        for log in self.logs.values():
            await log.aclose()


@pytest.mark.parametrize("sync_before_fetch", [False, True])
async def test_backups_replicate_and_acks_need_two_copies(tmp_path: Path, sync_before_fetch: bool) -> None:
    cluster = Cluster(tmp_path)
    primary = cluster.primary("a", 1, min_in_sync=2)
    transport = LocalTransport(primary)
    cluster.follow("b", transport, 1, sync_before_fetch=sync_before_fetch)
    cluster.follow("c", transport, 1, sync_before_fetch=sync_before_fetch)

    async def producer(pid: int) -> list[int]:
        acked = []
        for seq in range(0, 100, 5):
            result = await primary.produce(
                f"{pid}:{seq}".encode() * 20, 5, epoch=1, producer_id=pid, base_sequence=seq
            )
            # Acknowledged: every in-sync replica holds it.
            for replica in primary.in_sync - {"a"}:
                assert cluster.logs[replica].log_end_offset >= result.end_offset
                if sync_before_fetch:
                    assert cluster.logs[replica].durable_offset >= result.end_offset
            acked.append(result.base_offset)
        return acked

    results = await asyncio.wait_for(asyncio.gather(*(producer(p) for p in range(4))), 20)
    assert sum(len(r) for r in results) == 80
    await eventually(lambda: all(cluster.logs[r].log_end_offset == 400 for r in "bc"))
    assert headers(cluster.logs["b"]) == headers(cluster.logs["a"]) == headers(cluster.logs["c"])
    assert contents(cluster.logs["c"]) == contents(cluster.logs["a"])
    await eventually(lambda: cluster.fetchers["b"].high_watermark == 400)
    assert cluster.fetchers["b"].caught_up
    await cluster.close()


async def test_failover_truncates_divergent_tails_and_keeps_acknowledged_records(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    logs = cluster.logs
    a = cluster.primary("a", 1, min_in_sync=2)
    to_a = LocalTransport(a)
    cluster.follow("b", to_a, 1)
    cluster.follow("c", to_a, 1)
    acked: list[tuple[int, bytes]] = []
    for i in range(20):
        payload = f"acked-{i}".encode()
        result = await asyncio.wait_for(a.produce(payload, 2, epoch=1, producer_id=7, base_sequence=2 * i), 5)
        acked.append((result.base_offset, payload))
    # c is cut off; b still fetches a few more; then a writes a tail nobody gets and dies.
    to_a.connected = False
    await cluster.stop("c")
    to_a.connected = True
    for i in range(20, 25):
        a.append(f"b-has-{i}".encode(), 2, epoch=1, producer_id=7, base_sequence=2 * i)
    await eventually(lambda: logs["b"].log_end_offset == 50)
    await cluster.stop("b")
    for i in range(25, 30):
        a.append(f"only-a-{i}".encode(), 2, epoch=1, producer_id=7, base_sequence=2 * i)
    a.close()
    assert (
        logs["a"].log_end_offset == 60 and logs["b"].log_end_offset == 50 and logs["c"].log_end_offset <= 50
    )

    # The operator promotes b (longest in-sync log) at epoch 2.
    b = cluster.primary("b", 2, min_in_sync=2)
    to_b = LocalTransport(b)
    cluster.follow("c", to_b, 2)
    cluster.follow("a", to_b, 2)  # the old primary returns as a backup
    # The producer resends its unacknowledged batches: those b already has are duplicates.
    for i in range(20, 30):
        payload = (f"b-has-{i}" if i < 25 else f"resent-{i}").encode()
        result = await asyncio.wait_for(b.produce(payload, 2, epoch=2, producer_id=7, base_sequence=2 * i), 5)
        assert result.duplicate == (i < 25)
        assert result.base_offset == 2 * i
    await eventually(
        lambda: logs["a"].log_end_offset == logs["c"].log_end_offset == logs["b"].log_end_offset == 60
    )
    for replica in "abc":
        assert contents(logs[replica]) == contents(logs["b"])
        assert headers(logs[replica]) == headers(logs["b"])
    got = dict(contents(logs["a"]))
    for base, payload in acked:
        assert got[base] == payload
    assert not any(p.startswith(b"only-a") for p in got.values())  # a's unreplicated tail is gone
    assert logs["a"].epoch_entries == logs["b"].epoch_entries
    await cluster.close()


async def test_stale_backup_is_fenced_until_it_learns_the_new_epoch(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    primary = cluster.primary("a", 3, replicas="ab", in_sync="a", min_in_sync=1)
    transport = LocalTransport(primary)
    fetcher = cluster.follow("b", transport, 2)  # an old assignment
    await eventually(lambda: fetcher.state is FetcherState.FENCED)
    await primary.produce(b"x", 1, epoch=3)
    await asyncio.sleep(0.05)
    assert cluster.logs["b"].log_end_offset == 0
    fetcher.update(epoch=3)
    await eventually(lambda: cluster.logs["b"].log_end_offset == 1)
    await cluster.close()


async def test_backup_survives_a_network_cut(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    primary = cluster.primary("a", 1, replicas="ab", min_in_sync=1, lag_time_ms=200)
    transport = LocalTransport(primary)
    fetcher = cluster.follow("b", transport, 1)
    transport.connected = False
    # b holds acknowledgements back until the lag time passes and it leaves the in-sync set.
    for _ in range(10):
        await asyncio.wait_for(primary.produce(b"y" * 50, 3, epoch=1), 2)
    assert primary.in_sync == {"a"}
    assert cluster.logs["b"].log_end_offset == 0 and fetcher.last_error
    transport.connected = True
    await eventually(lambda: cluster.logs["b"].log_end_offset == 30)
    await eventually(lambda: primary.in_sync == {"a", "b"})
    await cluster.close()


async def test_new_backup_catches_up_from_snapshot_and_then_joins(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    logs = cluster.logs
    snapshots: list[Snapshot] = []
    primary = cluster.primary(
        "a", 1, replicas="ab", in_sync="a", min_in_sync=1, state_provider=lambda: b"cursors@" + b"1234"
    )
    # Producer 1 writes early; its batches are then removed by retention. Producer 2 writes later.
    for seq in range(0, 200, 2):
        await primary.produce(b"early" * 40, 2, epoch=1, producer_id=1, base_sequence=seq)
    logs["a"].delete_before(logs["a"].log_end_offset)
    assert logs["a"].log_start_offset == 200
    for seq in range(0, 100, 2):
        await primary.produce(b"late" * 40, 2, epoch=1, producer_id=2, base_sequence=seq)

    def remember(snapshot: Snapshot) -> None:
        snapshots.append(snapshot)

    fetcher = cluster.follow("b", LocalTransport(primary), 1, on_snapshot=remember)
    await eventually(lambda: logs["b"].log_end_offset == logs["a"].log_end_offset)
    assert fetcher.snapshots == 1 and snapshots[0].app_state == b"cursors@1234"
    assert logs["b"].log_start_offset == 200
    assert contents(logs["b"]) == contents(logs["a"])
    assert not (logs["b"].path / CATCHUP_MARKER).exists()
    await eventually(lambda: primary.in_sync == {"a", "b"})
    # The sequence-number table came with the snapshot: after a promotion b recognises resends of
    # producer 1 (whose batches it never stored) and of producer 2 (whose batches it fetched).
    await cluster.stop("b")
    primary.close()
    b = cluster.primary("b", 2, replicas="ab", in_sync="b", min_in_sync=1)
    assert (await b.produce(b"early" * 40, 2, epoch=2, producer_id=1, base_sequence=198)).duplicate
    assert (await b.produce(b"late" * 40, 2, epoch=2, producer_id=2, base_sequence=98)).duplicate
    assert not (await b.produce(b"new", 2, epoch=2, producer_id=2, base_sequence=100)).duplicate
    await cluster.close()


async def test_returning_backup_far_behind_retention_resyncs(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    logs = cluster.logs
    primary = cluster.primary("a", 1, replicas="ab", min_in_sync=1)
    transport = LocalTransport(primary)
    cluster.follow("b", transport, 1)
    for _ in range(20):
        await primary.produce(b"1" * 500, 1, epoch=1)
    await eventually(lambda: logs["b"].log_end_offset == 20)
    await cluster.stop("b")
    for _ in range(100):
        await primary.produce(b"2" * 500, 1, epoch=1)
    logs["a"].delete_before(100)
    assert logs["a"].log_start_offset > 20
    fetcher = cluster.follow("b", transport, 1)
    await eventually(lambda: logs["b"].log_end_offset == 120)
    assert fetcher.snapshots == 1
    assert contents(logs["b"]) == contents(logs["a"])
    await cluster.close()


async def test_interrupted_catch_up_starts_over(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    logs = cluster.logs
    primary = cluster.primary("a", 1, replicas="ab", min_in_sync=1)
    for _ in range(60):
        await primary.produce(b"3" * 500, 1, epoch=1)
    logs["a"].delete_before(40)
    (logs["b"].path / CATCHUP_MARKER).write_text("999\n")  # as if a catch-up had been cut short
    logs["b"].append(b"junk", 1, 0)
    fetcher = cluster.follow("b", LocalTransport(primary), 1)
    await eventually(lambda: logs["b"].log_end_offset == 60)
    assert fetcher.snapshots == 1
    assert contents(logs["b"]) == contents(logs["a"])
    await cluster.close()


@pytest.mark.parametrize("delay", [0.0, 0.002])
async def test_three_replicas_under_load_with_slow_transport(tmp_path: Path, delay: float) -> None:
    cluster = Cluster(tmp_path)
    primary = cluster.primary("a", 1, min_in_sync=2)
    transport = LocalTransport(primary, delay=delay)
    cluster.follow("b", transport, 1)
    cluster.follow("c", transport, 1)

    async def producer(pid: int) -> None:
        for seq in range(0, 300, 10):
            await primary.produce(b"L" * 1000, 10, epoch=1, producer_id=pid, base_sequence=seq)

    await asyncio.wait_for(asyncio.gather(*(producer(p) for p in range(5))), 30)
    await eventually(lambda: all(cluster.logs[r].log_end_offset == 1500 for r in "bc"))
    assert len(cluster.logs["a"].segments) > 3  # rolled while replicating
    for replica in "bc":
        assert headers(cluster.logs[replica]) == headers(cluster.logs["a"])
    await cluster.close()


async def test_a_promoted_backup_keeps_the_committed_end_readers_were_told(tmp_path: Path) -> None:
    """A handoff (the old primary stays an in-sync backup): the new primary's high watermark, the
    committed end that fetches and ``partitions()`` report, starts where the backup had learnt it
    was, not at the log start until the old primary has fetched from it."""
    cluster = Cluster(tmp_path)
    a = cluster.primary("a", 1, replicas="ab", min_in_sync=2)
    b_follows_a = cluster.follow("b", LocalTransport(a), 1)
    for i in range(10):
        await asyncio.wait_for(a.produce(b"r" * 50, 3, epoch=1, producer_id=1, base_sequence=3 * i), 5)
    await eventually(lambda: b_follows_a.high_watermark == 30)
    told = a.high_watermark
    assert told == 30
    known = b_follows_a.high_watermark
    await cluster.stop("b")
    await cluster.logs["b"].flush_until(cluster.logs["b"].log_end_offset)
    b = cluster.primary("b", 2, replicas="ab", in_sync=("a", "b"), min_in_sync=2, high_watermark=known)
    assert b.high_watermark == told  # a has not fetched from b yet
    # Never past what is durable here, whatever the backup was told.
    c_log = cluster.logs["c"]
    c = PartitionPrimary(c_log, partition="p0", replica_id="c", epoch=2, replicas=("c",), high_watermark=99)
    assert c.high_watermark == 0
    c.close()
    await cluster.close()


class FaultyTransport(LocalTransport):
    """A LocalTransport whose next fetches fail the way no transport error does: an unexpected
    exception, or the awaited request cancelled by someone other than the fetcher's owner."""

    def __init__(self, primary: PartitionPrimary) -> None:
        super().__init__(primary)
        self.faults: list[str] = []

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "unexpected":
            raise KeyError("a bug in the transport")
        if fault == "cancelled":
            request_future: asyncio.Future[FetchResponse] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(request_future.cancel)  # replaced by a newer fetch
            return await request_future
        return await super().fetch(request)


@pytest.mark.parametrize("fault", ["unexpected", "cancelled"])
async def test_a_backup_keeps_fetching_after_a_fault_no_transport_error_covers(
    tmp_path: Path, fault: str
) -> None:
    """A fetch loop that ended on such a fault left the in-sync set waiting for the backup: every
    produce of the partition then waited for an acknowledgement that never came."""
    cluster = Cluster(tmp_path)
    # A long lag time: on a loaded machine the backup must not drop out of the in-sync set while
    # it waits out its back-off (that would refuse the produce, not show the fault).
    primary = cluster.primary("a", 1, replicas="ab", min_in_sync=2, lag_time_ms=60_000)
    transport = FaultyTransport(primary)
    fetcher = cluster.follow("b", transport, 1)
    await eventually(lambda: fetcher.state is FetcherState.FETCHING)
    transport.faults = [fault, fault]
    result = await asyncio.wait_for(primary.produce(b"x" * 10, 1, epoch=1), 20)
    assert cluster.logs["b"].log_end_offset >= result.end_offset  # acknowledged: both copies hold it
    assert not cluster.tasks["b"].done()
    assert fetcher.last_error is not None
    await cluster.close()
