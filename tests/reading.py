"""What tests do with a ``Fetcher``, written once: read a partition by offset up to the committed end
``partitions()`` gave, and fail (naming both ends) instead of spinning when its primary serves
nothing below that end.

Importable from every test directory (``tests/`` is on the path through its conftest)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Fetcher
from hybridmq.client.fetcher import FetchedBatch, PartitionMeta


async def read_batches(
    fetcher: Fetcher,
    meta: PartitionMeta,
    start: int | None = None,
    *,
    stuck_s: float = 30.0,
    gone_ok: bool = False,
) -> AsyncIterator[tuple[FetchedBatch, int]]:
    """Each stored batch holding offsets ``[start, meta.end_offset)`` (``start`` defaults to the log
    start) with the index of its first record at or past ``start`` (a fetch returns whole batches).

    A primary that serves nothing at an offset below the end it reported for ``stuck_s`` seconds
    fails the read with ``AssertionError``, naming the partition, the offset and both ends (the one
    ``partitions()`` gave and the one the fetch gives now). ``gone_ok``: a partition deleted
    meanwhile (a drained on-demand partition collected) ends the read instead of raising."""
    loop = asyncio.get_running_loop()
    offset = meta.start_offset if start is None else start
    stuck_since: float | None = None
    while offset < meta.end_offset:
        try:
            result = await fetcher.fetch(meta.name, offset, max_offset=meta.end_offset)
        except ClientError as exc:
            if gone_ok and exc.code == ErrorCode.UNKNOWN_PARTITION:
                return
            raise
        if result.next_offset <= offset:
            stuck_since = loop.time() if stuck_since is None else stuck_since
            if loop.time() - stuck_since >= stuck_s:
                now = (await fetcher.partitions([meta.name]))[0]
                raise AssertionError(
                    f"{meta.name}: nothing served at {offset} for {stuck_s} s though partitions() said"
                    f" committed up to {meta.end_offset} (primary {meta.primary} at epoch {meta.epoch});"
                    f" the fetch says committed up to {result.end_offset}, log start"
                    f" {result.start_offset}; partitions() now says committed up to {now.end_offset},"
                    f" log end {now.log_end_offset}, primary {now.primary} at epoch {now.epoch}"
                )
            await asyncio.sleep(0.1)
            continue
        stuck_since = None
        for batch in result.batches:
            yield batch, max(0, offset - batch.base_offset)
        offset = result.next_offset


async def read_values(fetcher: Fetcher, meta: PartitionMeta, destination: str) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every record of ``destination`` below ``meta.end_offset``."""
    out: list[tuple[int, bytes]] = []
    async for batch, skip in read_batches(fetcher, meta):
        if batch.control or batch.destination != destination:
            continue
        out += [(batch.base_offset + i, bytes(batch.records[i][0])) for i in range(skip, len(batch.records))]
    return out
