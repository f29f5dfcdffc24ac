"""Fetch by offset (FETCH / FETCH_META through the CM, ``hybridmq.client.Fetcher``), send logs."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.api.frames import BatchFlag, ErrorCode
from hybridmq.client import ClientError, Fetcher, OffsetOutOfRangeError, Producer
from hybridmq.client.fetcher import FetchedBatch
from hybridmq.local.runner import LocalCluster


async def read_all(
    fetcher: Fetcher, partition: str, start: int, end: int, max_bytes: int = 1 << 20, **kw: bool
) -> list[FetchedBatch]:
    out: list[FetchedBatch] = []
    offset = start
    while offset < end:
        result = await fetcher.fetch(partition, offset, max_offset=end, max_bytes=max_bytes, **kw)
        if not result.batches:
            break
        out.extend(result.batches)
        offset = result.next_offset
    return out


async def test_fetch_returns_what_was_acked_with_send_log_ids(cluster: LocalCluster, tmp_path: Path) -> None:
    log_path = tmp_path / "sends" / "p1.csv"
    producer = await Producer.connect(
        cluster.bootstrap, partition_type="fixed", key="fetch-1", linger_ms=1, send_log=log_path
    )
    acks = []
    for i in range(40):
        acks.append(await producer.send("queue:fetched", f"v{i}".encode(), key=f"k{i}", headers={"i": i}))
    pending = [producer.send("topic:fetched", f"t{i}".encode()) for i in range(60)]
    acks += await asyncio.gather(*pending)
    partition = producer.partition
    await producer.close()

    fetcher = await Fetcher.connect(cluster.bootstrap)
    try:
        metas = {p.name: p for p in await fetcher.partitions()}
        assert {p.type for p in metas.values()} == {"fixed", "on-demand"}
        meta = metas[partition]
        assert meta.start_offset == 0 and meta.end_offset >= acks[-1].offset + 1
        assert meta.log_end_offset >= meta.end_offset and meta.primary

        batches = await read_all(fetcher, partition, meta.start_offset, meta.end_offset, max_bytes=200)
        offsets = [b.base_offset for b in batches]
        assert offsets == sorted(offsets) and batches[0].base_offset == 0
        for prev, nxt in itertools.pairwise(batches):
            assert prev.next_offset == nxt.base_offset  # contiguous, stubs included
        mine = {}
        for b in batches:
            if b.control:
                assert not b.records
                continue
            for i, record in enumerate(b.records):
                mine[b.base_offset + i] = (b.destination, b.producer, b.sequence(i), record)
        sent = [line.split(",") for line in log_path.read_text().splitlines()]
        assert len(sent) == 100
        for n, ack in enumerate(acks):
            dest, prod, seq, (value, key, headers, ts) = mine[ack.offset]
            assert [prod, str(seq)] == sent[n]
            if n < 40:
                assert (dest, value, key, headers) == ("queue:fetched", f"v{n}".encode(), f"k{n}", {"i": n})
            else:
                assert (dest, value) == ("topic:fetched", f"t{n - 40}".encode())
            assert ts > 1_700_000_000_000
        assert sorted(int(s) for _, s in sent) == list(range(100))

        # exclusive end and high watermark caps, an empty reply at the end
        capped = await fetcher.fetch(partition, acks[0].offset, max_offset=acks[0].offset + 1)
        assert len(capped.batches) == 1 and capped.end_offset == meta.end_offset
        empty = await fetcher.fetch(partition, meta.end_offset + 1000)
        assert empty.batches == [] and empty.next_offset == meta.end_offset + 1000

        # internal destinations are stubs unless asked for
        for b in batches:
            assert b.control or not str(b.destination).split(":", 1)[-1].startswith("_")

        with pytest.raises(ClientError) as err:
            await fetcher.fetch("no-such-partition", 0)
        assert err.value.code == ErrorCode.UNKNOWN_PARTITION
    finally:
        await fetcher.close()


async def test_acl_hides_batches_the_reader_may_not_consume(secure_cluster: LocalCluster) -> None:
    producer = await Producer.connect(
        secure_cluster.bootstrap, partition_type="fixed", key="acl", user="alice", password="alice-secret"
    )
    a = await producer.send("topic:orders.eu", b"visible")
    b = await producer.send("queue:secret", b"hidden")
    partition = producer.partition
    await producer.close()
    with pytest.raises(ClientError) as err:
        await Fetcher.connect(secure_cluster.bootstrap, user="bob", password="wrong")
    assert err.value.code == ErrorCode.AUTH_FAILED
    fetcher = await Fetcher.connect(secure_cluster.bootstrap, user="bob", password="bob-secret")
    try:
        end = {p.name: p for p in await fetcher.partitions()}[partition].end_offset
        batches = {x.base_offset: x for x in await read_all(fetcher, partition, 0, end)}
        assert batches[a.offset].records[0][0] == b"visible"
        assert batches[b.offset].control and batches[b.offset].skipped == "acl"
        assert batches[b.offset].records == []
    finally:
        await fetcher.close()


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path_factory.mktemp("retention"),
        mms=1,
        mm_args=["--segment-bytes", "2048", "--retention-interval", "0.2"],
    )
    with c:
        yield c


async def test_offset_below_the_log_start_is_out_of_range(small_segments: LocalCluster) -> None:
    producer = await Producer.connect(
        small_segments.bootstrap, partition_type="fixed", key="ret", linger_ms=0
    )
    for i in range(60):
        await producer.send("topic:unread", b"x" * 200 + str(i).encode())
    partition = producer.partition
    await producer.close()
    fetcher = await Fetcher.connect(small_segments.bootstrap)
    try:
        for _ in range(100):  # retention runs every 0.2 s; nobody reads topic:unread
            meta = {p.name: p for p in await fetcher.partitions()}[partition]
            if meta.start_offset > 0:
                break
            await asyncio.sleep(0.1)
        assert meta.start_offset > 0
        with pytest.raises(OffsetOutOfRangeError) as err:
            await fetcher.fetch(partition, 0)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert err.value.start_offset >= meta.start_offset and err.value.end_offset >= meta.end_offset
        result = await fetcher.fetch(partition, err.value.end_offset)  # the high watermark: no error
        assert result.batches == [] and result.start_offset >= err.value.start_offset
    finally:
        await fetcher.close()


async def test_chunks_of_a_large_message_come_back_one_record_each(cluster: LocalCluster) -> None:
    producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", key="chunks")
    ack = await producer.send_stream("queue:big", [b"a" * 1000, b"b" * 1000, b"c" * 10], key="big")
    partition = producer.partition
    await producer.close()
    fetcher = await Fetcher.connect(cluster.bootstrap)
    try:
        batches = await read_all(fetcher, partition, ack.offset - 2, ack.offset + 1)
        chunks = [b for b in batches if b.flags & BatchFlag.CHUNK and ack.offset - 2 <= b.base_offset]
        assert [b.records[0][0] for b in chunks] == [b"a" * 1000, b"b" * 1000, b"c" * 10]
        assert {b.records[0][1] for b in chunks} == {"big"} and chunks[-1].attributes["fin"]  # type: ignore[index]
        assert [b.sequence(0) for b in chunks] == [0, 1, 2]
    finally:
        await fetcher.close()
