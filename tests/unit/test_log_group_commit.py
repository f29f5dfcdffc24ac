"""Group commit: durability waits, fsync batching, modes, failures and truncation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hybridmq.broker.log import LogConfig, LogError, LogTruncatedError, PartitionLog
from hybridmq.broker.log import segment as segment_module


async def test_flush_until_makes_appends_durable(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(fsync="group"))
    result = log.append(b"x" * 100, 10, 0)
    assert log.durable_offset == 0
    await log.flush_until(result.end_offset)
    assert log.durable_offset >= 10
    await log.flush_until(5)  # already durable: returns at once
    await log.aclose()


async def test_one_fsync_covers_many_concurrent_producers(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(fsync="group", segment_bytes=64 * 1024))

    async def producer(i: int) -> int:
        last = 0
        for _ in range(20):
            result = log.append(b"y" * 200, 5, 0)
            await log.flush_until(result.end_offset)
            assert log.durable_offset >= result.end_offset
            last = result.end_offset
        return last

    ends = await asyncio.gather(*(producer(i) for i in range(50)))
    assert max(ends) == log.log_end_offset == 50 * 20 * 5
    syncs = log.committer().syncs
    assert 1 <= syncs < 1000 / 2  # 1000 acknowledged appends, far fewer fsyncs
    assert len(log.segments) > 1  # rolled during the run; the recovery point moved
    assert (tmp_path / "p" / "recovery-point").read_text().strip() != "0"
    await log.aclose()


async def test_background_flush_without_waiters(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(fsync="group", group_commit_max_delay_ms=1))
    log.committer()
    log.append(b"z", 1, 0)
    for _ in range(100):
        if log.durable_offset == 1:
            break
        await asyncio.sleep(0.01)
    assert log.durable_offset == 1
    log.append(b"z" * 10, 1, 0)
    await log.aclose()


async def test_max_bytes_triggers_a_flush(tmp_path: Path) -> None:
    log = PartitionLog.open(
        tmp_path / "p",
        LogConfig(fsync="group", group_commit_max_delay_ms=60_000, group_commit_max_bytes=1000),
    )
    log.committer()
    log.append(b"z" * 2000, 1, 0)
    for _ in range(100):
        if log.durable_offset == 1:
            break
        await asyncio.sleep(0.01)
    assert log.durable_offset == 1
    await log.aclose()


async def test_always_and_never_modes(tmp_path: Path) -> None:
    always = PartitionLog.open(tmp_path / "a", LogConfig(fsync="always"))
    always.append(b"x", 1, 0)
    assert always.durable_offset == 1
    never = PartitionLog.open(tmp_path / "n", LogConfig(fsync="never"))
    never.append(b"x", 1, 0)
    assert never.durable_offset == 1
    await never.flush_until(1)
    always.close()
    never.close()


async def test_truncation_fails_waiters_of_removed_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(fsync="group"))
    first = log.append(b"a", 1, 0)
    await log.flush_until(first.end_offset)
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()
    real_fsync = segment_module._fdatasync

    def slow_fsync(fd: int) -> None:
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(timeout=5)
        real_fsync(fd)

    monkeypatch.setattr(segment_module, "_fdatasync", slow_fsync)
    second = log.append(b"b", 1, 0)
    waiter = asyncio.create_task(log.flush_until(second.end_offset))
    later = log.append(b"c", 1, 0)
    late_waiter = asyncio.create_task(log.flush_until(later.end_offset))
    await asyncio.sleep(0.05)
    log.truncate_to(2)
    gate.set()
    await waiter
    with pytest.raises(LogTruncatedError):
        await late_waiter
    # The in-flight fsync started before the truncation must not mark new data durable.
    assert log.durable_offset <= 2
    third = log.append(b"d", 1, 0)
    await log.flush_until(third.end_offset)
    assert log.durable_offset == 3
    await log.aclose()


async def test_fsync_failure_is_reported_to_waiters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(fsync="group"))

    def broken(fd: int) -> None:
        raise OSError(5, "EIO")

    monkeypatch.setattr(segment_module, "_fdatasync", broken)
    result = log.append(b"a", 1, 0)
    with pytest.raises(LogError):
        await log.flush_until(result.end_offset)
    with pytest.raises(LogError):
        await log.flush_until(result.end_offset)
    assert log.durable_offset == 0


async def test_appends_during_a_round_are_synced_later_without_waiters(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(fsync="group", group_commit_max_delay_ms=5))
    first = log.append(b"a", 1, 0)
    waiter = asyncio.create_task(log.flush_until(first.end_offset))
    await asyncio.sleep(0)  # the round has started
    log.append(b"b", 1, 0)  # nobody waits for this one
    await waiter
    for _ in range(200):
        if log.durable_offset == 2:
            break
        await asyncio.sleep(0.005)
    assert log.durable_offset == 2
    await log.aclose()
