"""PartitionPrimary: fencing, in-sync rule, high watermark, min_in_sync acknowledgement, lease."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hybridmq.broker.log import LogConfig, PartitionLog, StaleEpochError
from hybridmq.broker.replication import (
    EpochEndOffsetRequest,
    ErrorCode,
    FencedEpochError,
    FetchRequest,
    FetchResponse,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotPrimaryError,
    PartitionPrimary,
    Snapshot,
    SnapshotRequest,
    from_wire,
    to_wire,
)

CFG = LogConfig(fsync="group", segment_bytes=64 * 1024)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_primary(tmp_path: Path, clock: Clock, **kw: object) -> PartitionPrimary:
    log = PartitionLog.open(tmp_path / "primary", CFG)
    options: dict[str, object] = dict(
        partition="p0", replica_id="a", epoch=1, replicas=("a", "b", "c"), min_in_sync=2, lag_time_ms=10_000
    )
    options.update(kw)
    return PartitionPrimary(log, clock=clock, **options)  # type: ignore[arg-type]


async def fetch(primary: PartitionPrimary, replica: str, offset: int, epoch: int = 1) -> FetchResponse:
    return await primary.handle_fetch(FetchRequest("p0", replica, epoch, offset, 1 << 20, 0))


async def test_ack_waits_for_min_in_sync_copies(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, replicas=("a", "b"))
    backup = PartitionLog.open(tmp_path / "b", CFG)
    task = asyncio.create_task(primary.produce(b"x" * 100, 10, epoch=1))
    # The group commit's fsync runs in a thread: wait for it, however slow the machine.
    for _ in range(1000):
        if primary.log.durable_offset == 10:
            break
        await asyncio.sleep(0.01)
    assert not task.done()  # locally durable, but b does not have it yet
    assert primary.log.durable_offset == 10 and primary.high_watermark == 0
    response = await fetch(primary, "b", 0)
    backup.append_raw(response.records)
    assert not task.done()  # b fetched it, but only its next fetch says it holds it
    await fetch(primary, "b", backup.log_end_offset)
    result = await asyncio.wait_for(task, 1)
    assert (result.base_offset, result.last_offset) == (0, 9)
    assert primary.high_watermark == 10


async def test_high_watermark_is_min_over_in_sync_replicas(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock)
    for _ in range(3):
        primary.append(b"y", 5, epoch=1)
    await primary.log.flush_until(15)
    await fetch(primary, "b", 15)
    assert primary.high_watermark == 0  # c has not fetched: it holds the HW back
    await fetch(primary, "c", 5)
    assert primary.high_watermark == 5
    await fetch(primary, "c", 10)
    assert primary.high_watermark == 10
    # c stops fetching; after the lag time it leaves the in-sync set and the HW moves on.
    clock.now += 11
    await fetch(primary, "b", 15)
    assert primary.in_sync == {"a", "b"}
    assert primary.high_watermark == 15


async def test_lagging_replica_leaves_and_caught_up_one_rejoins(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, replicas=("a", "b"), min_in_sync=2)
    assert primary.in_sync == {"a", "b"}
    clock.now += 11
    primary.tick()
    assert primary.in_sync == {"a"}
    with pytest.raises(NotEnoughReplicasError):
        primary.append(b"z", 1, epoch=1)
    # b comes back and catches up: it joins again.
    await fetch(primary, "b", 0)
    assert primary.in_sync == {"a", "b"}
    result = primary.append(b"z", 1, epoch=1)
    await primary.log.flush_until(result.end_offset)
    await fetch(primary, "b", 0)
    # A fetch that lags behind the log end, repeatedly, without ever reaching it keeps b caught
    # up only while it reaches the previous log end.
    await fetch(primary, "b", 1)
    assert primary.in_sync == {"a", "b"}


async def test_behind_replica_does_not_join_until_caught_up(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, replicas=("a", "b"), in_sync=("a",), min_in_sync=1)
    for _ in range(10):
        result = primary.append(b"w" * 10, 10, epoch=1)
    await primary.log.flush_until(result.end_offset)
    primary.tick()
    assert primary.high_watermark == 100
    response = await primary.handle_fetch(FetchRequest("p0", "b", 1, 0, 200, 0))
    assert len(response.records) < 300  # partial fetch
    assert primary.in_sync == {"a"}
    await fetch(primary, "b", 30)
    assert primary.in_sync == {"a"}
    await fetch(primary, "b", 100)
    assert primary.in_sync == {"a", "b"}


async def test_epoch_fencing(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, epoch=5)
    with pytest.raises(FencedEpochError):
        primary.append(b"old", 1, epoch=4)
    response = await fetch(primary, "b", 0, epoch=4)
    assert response.error is ErrorCode.STALE_EPOCH and response.records == b""
    assert primary.handle_snapshot(SnapshotRequest("p0", "b", 3)).error is ErrorCode.STALE_EPOCH
    assert await fetch(primary, "zz", 0, epoch=5) == FetchResponse(
        "p0", 5, ErrorCode.UNKNOWN_REPLICA, 0, 0, 0
    )
    # A newer epoch means a newer primary exists: this one steps down.
    with pytest.raises(NotPrimaryError):
        primary.append(b"new", 1, epoch=6)
    assert not primary.writable
    with pytest.raises(NotPrimaryError):
        primary.append(b"x", 1, epoch=5)
    # A log that saw a newer epoch cannot be primary for an older one.
    primary.log.append(b"e9", 1, 9)
    with pytest.raises(StaleEpochError):
        PartitionPrimary(primary.log, partition="p0", replica_id="a", epoch=8, replicas=("a",))


async def test_lease_loss_stops_writes_and_fails_pending_acks(tmp_path: Path) -> None:
    clock = Clock()
    lease = {"valid": True}
    primary = make_primary(tmp_path, clock, replicas=("a", "b"), lease_valid=lambda: lease["valid"])
    pending = asyncio.create_task(primary.produce(b"p", 1, epoch=1))
    await asyncio.sleep(0.02)
    lease["valid"] = False
    with pytest.raises(NotPrimaryError):
        primary.append(b"q", 1, epoch=1)
    with pytest.raises(NotPrimaryError):
        await pending
    response = await fetch(primary, "b", 0)
    assert response.error is ErrorCode.NOT_PRIMARY
    # Renewed at the same epoch (nobody else was promoted): writes are taken again.
    lease["valid"] = True
    again = asyncio.create_task(primary.produce(b"r", 1, epoch=1))
    await asyncio.sleep(0.02)
    response = await fetch(primary, "b", primary.log.log_end_offset)
    assert response.error is ErrorCode.NONE
    result = await asyncio.wait_for(again, 5)
    assert primary.high_watermark >= result.end_offset


async def test_in_sync_changes_wait_for_commit(tmp_path: Path) -> None:
    clock = Clock()
    proposals: list[frozenset[str]] = []
    approve = asyncio.Event()

    async def alter(members: frozenset[str]) -> bool:
        proposals.append(members)
        await approve.wait()
        return True

    primary = make_primary(tmp_path, clock, replicas=("a", "b"), min_in_sync=1, alter_in_sync=alter)
    result = primary.append(b"r", 3, epoch=1)
    await primary.log.flush_until(result.end_offset)
    clock.now += 11
    primary.tick()
    await asyncio.sleep(0)
    assert proposals == [frozenset({"a"})]
    assert primary.proposed_in_sync == {"a"} and primary.in_sync == {"a", "b"}
    assert primary.high_watermark == 0  # b still counts until the shrink is committed
    approve.set()
    await asyncio.sleep(0.01)
    assert primary.in_sync == {"a"} and primary.proposed_in_sync is None
    assert primary.high_watermark == 3
    # The operator's assignment can also commit (or override) the set.
    primary.update_assignment(in_sync=("a", "b"))
    assert primary.in_sync == {"a", "b"}


async def test_min_in_sync_is_never_capped_by_the_replica_count(tmp_path: Path) -> None:
    clock = Clock()
    # A partition left with one copy while minInSync is 2 refuses writes (retriable), stores nothing.
    primary = make_primary(tmp_path, clock, replicas=("a",), min_in_sync=2)
    assert primary.min_in_sync == 2
    with pytest.raises(NotEnoughReplicasError) as refused:
        await asyncio.wait_for(primary.produce(b"solo", 2, epoch=1), 1)
    assert refused.value.retriable and primary.log.log_end_offset == 0


async def test_single_replica_with_min_in_sync_one_acks_alone(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, replicas=("a",), min_in_sync=1)
    result = await asyncio.wait_for(primary.produce(b"solo", 2, epoch=1), 1)
    assert result.end_offset == 2 and primary.high_watermark == 2


async def test_not_enough_replicas_after_append(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, replicas=("a", "b"), min_in_sync=2)
    task = asyncio.create_task(primary.produce(b"s", 1, epoch=1))
    await asyncio.sleep(0.02)
    clock.now += 11
    primary.tick()  # b leaves: the HW reaches the record with a single copy
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        await task


async def test_idempotent_resend_is_acknowledged_with_original_offsets(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, replicas=("a",), min_in_sync=1)
    first = await primary.produce(b"m", 4, epoch=1, producer_id=3, base_sequence=0)
    again = await primary.produce(b"m", 4, epoch=1, producer_id=3, base_sequence=0)
    assert again.duplicate and again[:2] == first[:2]
    assert primary.log.log_end_offset == 4


async def test_end_offset_for_epoch_and_long_poll(tmp_path: Path) -> None:
    clock = Clock()
    primary = make_primary(tmp_path, clock, epoch=3)
    response = primary.handle_end_offset_for_epoch(EpochEndOffsetRequest("p0", "b", 3, 3))
    assert (response.error, response.leader_epoch, response.end_offset) == (ErrorCode.NONE, 3, 0)
    waiting = asyncio.create_task(primary.handle_fetch(FetchRequest("p0", "b", 3, 0, 1 << 20, 5000)))
    await asyncio.sleep(0.02)
    assert not waiting.done()
    primary.append(b"wake", 1, epoch=3)
    response2 = await asyncio.wait_for(waiting, 1)
    assert response2.error is ErrorCode.NONE and response2.records


def test_messages_round_trip_through_wire_dicts() -> None:
    import msgpack

    for message in (
        FetchRequest("p", "b", 1, 5),
        FetchResponse("p", 1, ErrorCode.STALE_EPOCH, 3, 0, 9, b"\x00raw"),
        Snapshot("p", 2, ErrorCode.NONE, 10, 20, 15, b"state", None),
    ):
        wire = msgpack.unpackb(msgpack.packb(to_wire(message)))
        assert from_wire(type(message), wire) == message


async def test_replica_removed_while_its_join_is_pending_does_not_hold_the_high_watermark(
    tmp_path: Path,
) -> None:
    """A replacement caught up (its join is proposed, not committed yet) and the controller then
    drops the replica it replaces (a handoff or a scale-down): the dropped one is in the pending
    proposal but no longer a replica; acknowledgements must not wait for it."""
    clock = Clock()
    never = asyncio.Event()

    async def alter(members: frozenset[str]) -> bool:
        await never.wait()  # the controller answers with a new table instead
        return False

    primary = make_primary(
        tmp_path, clock, replicas=("a", "b"), in_sync=("a", "b"), min_in_sync=2, alter_in_sync=alter
    )
    primary.update_assignment(replicas=("a", "b", "c"))  # the replacement starts out of sync
    first = primary.append(b"r", 3, epoch=1)
    await primary.log.flush_until(first.end_offset)
    for replica in ("b", "c"):
        await fetch(primary, replica, 0)
        await fetch(primary, replica, 3)
    assert primary.proposed_in_sync == {"a", "b", "c"}  # c joins: waiting for the controller
    primary.update_assignment(replicas=("a", "c"), in_sync=("a", "c"))  # b leaves
    task = asyncio.create_task(primary.produce(b"s", 2, epoch=1))
    await asyncio.sleep(0.05)
    await fetch(primary, "c", 3)
    await fetch(primary, "c", 5)
    result = await asyncio.wait_for(task, 1)
    assert result.end_offset == 5 and primary.high_watermark == 5
    assert primary.in_sync == {"a", "c"}


async def test_the_brokers_own_writes_pass_the_fencing_but_not_the_in_sync_count(tmp_path: Path) -> None:
    """Cursors and delivery counts (``epoch=None``) are written while too few replicas are in sync
    (a consumer's progress must not stop with the producers'), but never by a fenced primary."""
    clock = Clock()
    lease = {"valid": True}
    primary = make_primary(tmp_path, clock, replicas=("a", "b"), lease_valid=lambda: lease["valid"])
    clock.now += 11
    primary.tick()
    assert primary.in_sync == {"a"}  # b left: short of min_in_sync 2
    with pytest.raises(NotEnoughReplicasError):
        primary.append(b"data", 1, epoch=1)
    own = primary.append(b"cursor", 1, epoch=None, control=True)
    assert (own.base_offset, primary.log.log_end_offset) == (0, 1)
    lease["valid"] = False  # fenced: nothing at all is written
    with pytest.raises(NotPrimaryError):
        primary.append(b"cursor", 1, epoch=None, control=True)
    lease["valid"] = True
    primary.step_down("saw newer epoch 2")
    with pytest.raises(NotPrimaryError):
        primary.append(b"cursor", 1, epoch=None, control=True)
    assert primary.log.log_end_offset == 1
