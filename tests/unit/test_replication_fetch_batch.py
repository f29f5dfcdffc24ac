"""The primary's side of a batched fetch (many partitions in one request): each partition keeps the
single fetch's rules, the batch long-polls until any partition has news and answers only those."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from hybridmq.broker.log import LogConfig, PartitionLog
from hybridmq.broker.replication import ErrorCode, FetchRequest, PartitionPrimary
from hybridmq.broker.replication.fetch_batch import BatchItem, serve_batch

CFG = LogConfig(fsync="group", segment_bytes=64 * 1024)


def primaries(tmp_path: Path, n: int) -> list[PartitionPrimary]:
    return [
        PartitionPrimary(
            PartitionLog.open(tmp_path / f"p{i}", CFG),
            partition=f"p{i}",
            replica_id="a",
            epoch=3,
            replicas=("a", "b"),
            min_in_sync=1,
        )
        for i in range(n)
    ]


def items(ps: list[PartitionPrimary], offsets: list[int], epoch: int = 3, hw: int = 0) -> list[BatchItem]:
    return [
        BatchItem(p, FetchRequest(p.partition, "b", epoch, offset, 1 << 20, 2000), hw)
        for p, offset in zip(ps, offsets, strict=True)
    ]


async def test_long_polls_until_one_partition_has_data_and_answers_only_it(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 50)
    started = time.monotonic()
    serving = asyncio.create_task(serve_batch(items(ps, [0] * 50), max_wait_ms=20_000, max_bytes=1 << 20))
    await asyncio.sleep(0.3)
    assert not serving.done(), "answered before any partition had data"
    ps[17].append(b"x" * 100, 4, epoch=3)
    responses = await asyncio.wait_for(serving, 10)
    assert time.monotonic() - started < 10
    assert [r.partition for r in responses] == ["p17"]
    assert responses[0].error is ErrorCode.NONE and responses[0].records
    assert responses[0].log_end_offset == 4


async def test_every_partition_answered_when_the_wait_ends_with_nothing(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 5)
    responses = await serve_batch(items(ps, [0] * 5), max_wait_ms=50, max_bytes=1 << 20)
    assert sorted(r.partition for r in responses) == [f"p{i}" for i in range(5)]
    assert all(r.error is ErrorCode.NONE and r.records == b"" for r in responses)


async def test_per_partition_fencing_and_progress(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 3)
    ps[0].append(b"y", 5, epoch=3)
    await ps[0].log.flush_until(5)
    batch = [
        BatchItem(ps[0], FetchRequest("p0", "b", 3, 5, 1 << 20, 2000), -1),  # caught up: HW moves to 5
        BatchItem(ps[1], FetchRequest("p1", "b", 2, 0, 1 << 20, 2000), 0),  # an older epoch
        BatchItem(None, FetchRequest("p9", "b", 3, 0, 1 << 20, 2000), 0),  # not led here
        BatchItem(ps[2], FetchRequest("p2", "b", 3, 7, 1 << 20, 2000), 0),  # past the log end
    ]
    responses = {r.partition: r for r in await serve_batch(batch, max_wait_ms=2000, max_bytes=1 << 20)}
    assert responses["p1"].error is ErrorCode.STALE_EPOCH
    assert responses["p9"].error is ErrorCode.NOT_PRIMARY
    assert responses["p2"].error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert responses["p0"].error is ErrorCode.NONE and responses["p0"].high_watermark == 5
    assert ps[0].high_watermark == 5  # the backup's progress counted, as for a single fetch


async def test_a_newer_epoch_steps_the_primary_down(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 2)
    responses = await serve_batch(items(ps, [0, 0], epoch=4), max_wait_ms=2000, max_bytes=1 << 20)
    assert {r.error for r in responses} == {ErrorCode.NOT_PRIMARY}
    assert not ps[0].writable and not ps[1].writable


async def test_byte_budget_leaves_partitions_for_the_next_batch(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 4)
    for p in ps:
        p.append(b"z" * 4000, 1, epoch=3)
    responses = await serve_batch(items(ps, [0] * 4), max_wait_ms=2000, max_bytes=6000)
    with_data = [r for r in responses if r.records]
    assert 1 <= len(with_data) < 4, [len(r.records) for r in responses]
    assert sum(len(r.records) for r in with_data) < 6000 + 4100


async def test_a_step_down_ends_the_wait(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 3)
    serving = asyncio.create_task(serve_batch(items(ps, [0] * 3), max_wait_ms=20_000, max_bytes=1 << 20))
    await asyncio.sleep(0.2)
    ps[1].step_down("test")
    responses = await asyncio.wait_for(serving, 10)
    assert [(r.partition, r.error) for r in responses] == [("p1", ErrorCode.NOT_PRIMARY)]


async def test_a_high_watermark_alone_waits_briefly_for_batches_to_carry_it(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 2)
    ps[0].append(b"y", 5, epoch=3)
    await ps[0].log.flush_until(5)
    # The backup fetched past offset 5 (so the high watermark moves to 5) but last heard -1.
    caught_up = [BatchItem(ps[0], FetchRequest("p0", "b", 3, 5, 1 << 20, 2000), -1)]
    started = time.monotonic()
    responses = await serve_batch(caught_up, max_wait_ms=2000, max_bytes=1 << 20, hw_linger_ms=300)
    waited = time.monotonic() - started
    assert [(r.partition, r.high_watermark, r.records) for r in responses] == [("p0", 5, b"")]
    assert 0.25 <= waited < 1.5, f"answered a high watermark alone after {waited:.3f} s"

    # Batches appended during the linger end it at once and carry the high watermark along.
    again = [BatchItem(ps[0], FetchRequest("p0", "b", 3, 5, 1 << 20, 2000), 4)]
    serving = asyncio.create_task(serve_batch(again, max_wait_ms=2000, max_bytes=1 << 20, hw_linger_ms=5000))
    await asyncio.sleep(0.1)
    assert not serving.done()
    ps[0].append(b"z", 1, epoch=3)
    responses = await asyncio.wait_for(serving, 2)
    assert responses[0].high_watermark == 5 and responses[0].records and responses[0].log_end_offset == 6


async def test_a_high_watermark_the_backup_already_knows_is_no_news(tmp_path: Path) -> None:
    ps = primaries(tmp_path, 1)
    ps[0].append(b"y", 5, epoch=3)
    await ps[0].log.flush_until(5)
    known = [BatchItem(ps[0], FetchRequest("p0", "b", 3, 5, 1 << 20, 2000), 5)]
    started = time.monotonic()
    responses = await serve_batch(known, max_wait_ms=600, max_bytes=1 << 20, hw_linger_ms=10)
    assert time.monotonic() - started >= 0.55, "answered before the long poll's end with nothing new"
    assert responses[0].high_watermark == 5 and responses[0].records == b""
