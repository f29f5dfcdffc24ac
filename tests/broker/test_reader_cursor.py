"""Named reader cursors (READER_COMMIT): replicated with the data, refused when malformed, and
holding log retention until the reader has read."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from failover_workload import until

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Fetcher, Producer
from hybridmq.local.runner import LocalCluster
from reading import read_batches


def _reported(cluster: LocalCluster, partition: str) -> dict[str, int]:
    primary = cluster.table()[partition].primary or ""
    return dict(cluster.state()["reports"].get(primary, {}).get("partitions", {}).get(partition, {}))


async def _data_end(fetcher: Fetcher, partition: str) -> int:
    """Offset after the last application data batch (internal ``_`` ones come as control stubs)."""
    meta = (await fetcher.partitions([partition]))[0]
    end = 0
    async for b, _ in read_batches(fetcher, meta):
        if not b.control:
            end = max(end, b.next_offset)
    return end


async def test_reader_cursor_survives_a_failover_and_bad_commits_are_refused(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=3, replicas=2, fixed=1, on_demand_per_mm=0, log_level="INFO")
    with cluster:
        partition = "local-fixed-0"
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", partition=partition)
        fetcher = await Fetcher.connect(cluster.bootstrap, retry_s=30)
        try:
            for i in range(30):
                await producer.send("queue:cursor", f"a{i}".encode())
            cursor = await _data_end(fetcher, partition)
            await fetcher.commit_reader("nightly", partition, cursor)
            for i in range(12):
                await producer.send("queue:cursor", f"b{i}".encode())

            # Malformed commits get a clear error and change nothing.
            bad: list[tuple[str, str, int, ErrorCode]] = [
                ("", partition, 1, ErrorCode.INVALID_REQUEST),
                ("x" * 300, partition, 1, ErrorCode.INVALID_REQUEST),
                ("nightly", partition, -5, ErrorCode.INVALID_REQUEST),
                ("nightly", partition, 10**9, ErrorCode.OFFSET_OUT_OF_RANGE),
                ("nightly", "no-such-partition", 0, ErrorCode.UNKNOWN_PARTITION),
            ]
            for reader, name, offset, code in bad:
                with pytest.raises(ClientError) as err:
                    await fetcher.commit_reader(reader, name, offset)
                assert err.value.code == code, (reader[:10], name, offset, err.value)

            # Offsets from the cursor to the end of the data (control records in between count).
            lag = await _data_end(fetcher, partition) - cursor
            assert lag >= 12
            await until(
                lambda: _reported(cluster, partition).get("readerLag") == lag, 10, f"lag {lag} reported"
            )
            # The cursor is a replicated control record: the new primary knows it after a failover.
            before = cluster.table()[partition]
            assert before.primary is not None
            cluster.kill_mm(before.primary, signal.SIGKILL)
            await until(lambda: cluster.table()[partition].epoch > before.epoch, 10, "the failover")
            await until(
                lambda: _reported(cluster, partition).get("epoch") == cluster.table()[partition].epoch,
                10,
                "a report from the new primary",
            )
            lag = await _data_end(fetcher, partition) - cursor
            await until(lambda: _reported(cluster, partition).get("readerLag") == lag, 10, f"lag {lag} kept")
            await fetcher.commit_reader("nightly", partition, await _data_end(fetcher, partition))
            await until(lambda: _reported(cluster, partition).get("readerLag") == 0, 10, "the lag gone")
        finally:
            await asyncio.gather(producer.close(), fetcher.close(), return_exceptions=True)


async def test_log_retention_keeps_what_a_named_reader_has_not_read(retention_cluster: LocalCluster) -> None:
    cluster = retention_cluster
    partition = "fixed-0-0"
    fetcher = await Fetcher.connect(cluster.bootstrap, retry_s=30)
    try:
        await fetcher.commit_reader("slow-job", partition, 0)  # registered before any data
        # A topic nobody subscribes to: only the named reader holds its segments.
        async with await Producer.connect(cluster.bootstrap, partition_type="fixed") as p:
            for i in range(2000):
                p.try_send("topic:ret", i.to_bytes(4, "big") + b"r" * 500)
                if i % 100 == 0:
                    await p.flush()
        await asyncio.sleep(3.0)  # ten retention rounds
        meta = (await fetcher.partitions([partition]))[0]
        assert meta.start_offset == 0, f"segments deleted under the reader: log starts at {meta.start_offset}"
        values = []
        async for b, skip in read_batches(fetcher, meta, 0):
            if not b.control:
                values += [int.from_bytes(bytes(r[0])[:4], "big") for r in b.records[skip:]]
        assert values == list(range(2000))
        # Read: the reader commits the end, and retention deletes the segments again.
        await fetcher.commit_reader("slow-job", partition, meta.end_offset)
        for _ in range(50):
            await asyncio.sleep(0.2)
            if (await fetcher.partitions([partition]))[0].start_offset > 0:
                break
        assert (await fetcher.partitions([partition]))[0].start_offset > 0, "retention never resumed"
    finally:
        await fetcher.close()
