"""Very large messages: one message sent as a sequence of CHUNK batches, never whole in memory.

Each chunk becomes one CHUNK batch (keep chunks well under the frame limit, e.g. 1 MiB) carrying
the stream id, its sequence number and whether it is the last; at most ``max_pending_bytes`` of
the stream are in flight. The consumer gets a ``StreamMessage`` and reads the chunks as they come.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from hybridmq.api.frames import BatchFlag
from hybridmq.client.producer.accumulator import BatchResult
from hybridmq.client.producer.sender import Sender

_stream_ids = itertools.count(1)
CHUNK_OVERHEAD = 64  # bytes counted per chunk beyond its payload (flow control)


async def _each(chunks: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield bytes(chunk)
    else:
        for chunk in chunks:
            yield bytes(chunk)


async def send_stream(
    sender: Sender,
    wait_unblocked: Callable[[], Awaitable[None]],
    dest: str,
    chunks: AsyncIterable[bytes] | Iterable[bytes],
    key: bytes | str | None,
    headers: dict[str, Any] | None,
) -> asyncio.Future[BatchResult]:
    """Send the chunks (the last one flagged ``fin``); returns the last chunk's result."""
    sid = f"{sender.producer_id}/{next(_stream_ids)}"
    seq = 0

    async def produce(chunk: bytes, fin: bool) -> asyncio.Future[BatchResult]:
        nonlocal seq
        await wait_unblocked()
        fut: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()
        extra = {"sid": sid, "seq": seq, "fin": fin, "key": key, "h": headers if seq == 0 else None}
        sender.submit(dest, 1, chunk, BatchFlag.CHUNK, 0, extra, fut, len(chunk) + CHUNK_OVERHEAD)
        if not sender.session.conn.closed:
            await sender.session.conn.drain()
        seq += 1
        return fut

    pending: bytes | None = None
    async for chunk in _each(chunks):
        if pending is not None:
            await produce(pending, False)
        pending = chunk
    return await produce(pending or b"", True)
