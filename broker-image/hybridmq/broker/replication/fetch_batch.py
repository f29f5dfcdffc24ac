"""The primary's side of a batched fetch: one request from a backup MM for every partition it copies
from this MM (Kafka's replica fetcher), instead of one long poll per partition.

Each partition keeps the rules of :meth:`PartitionPrimary.handle_fetch` (epoch fencing, offset range,
progress recorded for the in-sync rule and the high watermark, ``NOT_PRIMARY`` after a step-down):
:func:`serve_batch` calls its two halves, ``record_fetch`` for every partition and ``read_fetch``
for those it answers. The batch long-polls until any partition has batches (or an error, or a
high watermark the backup has not seen) and then answers only those, within ``max_bytes`` in all
(a partition left out is asked again in the next batch); when the wait ends with nothing new it
answers every partition, as the single fetches did, so that every backup hears from its primary
once per ``max_wait_ms``.

A high watermark the backup has not seen is news that can wait ``HW_LINGER_MS`` for batches to ride
with: each write's commit moves the high watermark once its backups fetched past it, and answering
that alone cost a round trip per write (a quarter of a replicated queue's frames at a hundred
messages a second, where a delivery mark and an acknowledgement's cursor follow each message). The
backup's high watermark is what a promoted backup starts from; a promotion is followed at once by
the in-sync backups' fetches (or has none, and the whole durable log counts), so a lag of that
much moves a new primary's readable end by a fetch, not a lease (Kafka's followers learn it with
their next fetch too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import ErrorCode
from .messages import FetchRequest, FetchResponse
from .primary import PartitionPrimary

HW_LINGER_MS = 50  # how long a high watermark alone waits for batches to carry it


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One partition of a batched fetch; ``primary`` None: this MM does not lead it."""

    primary: PartitionPrimary | None
    request: FetchRequest
    known_high_watermark: int = -1  # what the backup last heard: a newer one is news to send


async def serve_batch(
    items: Sequence[BatchItem], *, max_wait_ms: int, max_bytes: int, hw_linger_ms: int = HW_LINGER_MS
) -> list[FetchResponse]:
    """The responses to send for ``items`` (a subset, see the module docstring)."""
    refused: list[FetchResponse] = []
    live: list[BatchItem] = []
    for item in items:
        if item.primary is None:
            refused.append(FetchResponse(item.request.partition, -1, ErrorCode.NOT_PRIMARY))
            continue
        response = item.primary.record_fetch(item.request)
        if response is None:
            live.append(item)
        else:
            refused.append(response)
    news = [item for item in live if _has_news(item)]
    if any(_has_data(item) for item in news):
        wait_ms = 0
    elif news:  # only high watermarks: they wait a little for batches to ride with
        wait_ms = min(hw_linger_ms, max_wait_ms)
    else:
        wait_ms = max_wait_ms
    if not refused and live and wait_ms > 0:
        event = asyncio.Event()
        primaries = {id(item.primary): item.primary for item in live if item.primary is not None}
        for primary in primaries.values():
            primary.add_data_listener(event)
        try:
            async with asyncio.timeout(wait_ms / 1000.0):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            for primary in primaries.values():
                primary.remove_data_listener(event)
        news = [item for item in live if _has_news(item)]
        if not news:
            news = live  # the wait ended with nothing new: every partition hears from its primary
    return refused + _read(news, max_bytes)


def _has_news(item: BatchItem) -> bool:
    primary = item.primary
    assert primary is not None
    return primary.has_news(item.request) or primary.high_watermark != item.known_high_watermark


def _has_data(item: BatchItem) -> bool:
    """Batches to send, or a step-down to tell (what ends a wait at once)."""
    assert item.primary is not None
    return item.primary.has_news(item.request)


def _read(items: Sequence[BatchItem], max_bytes: int) -> list[FetchResponse]:
    """Read the answered partitions within ``max_bytes`` in all (the first one with data gets at
    least one whole batch, so that a backup always progresses)."""
    out: list[FetchResponse] = []
    used = 0
    for item in items:
        primary = item.primary
        assert primary is not None
        has_data = primary.has_news(item.request)
        if has_data and used >= max_bytes:
            continue  # asked again in the next batch
        budget = min(item.request.max_bytes, max(max_bytes - used, 1))
        response = primary.read_fetch(item.request, budget)
        used += len(response.records)
        out.append(response)
    return out
