"""Batched replica fetches: one REPLICA_FETCH_BATCH per (backup MM, primary MM) carries the fetch of
every partition this MM copies from that primary, as Kafka's replica fetcher does.

Each partition keeps its own :class:`~hybridmq.broker.replication.BackupFetcher` (truncation,
snapshot catch-up, epoch handling are unchanged); its ``fetch`` goes to the :class:`FetchBatcher` of
its primary MM, which queues it and sends everything queued as one frame. The primary answers the
partitions that have something (``replication/fetch_batch.py``); the others are queued again for
the next frame. After an answer the batcher waits briefly (``gather_s``) for the answered fetchers
to come back, so that one frame per primary stays the rule and a thousand idle partitions cost one
long poll, not a thousand.

Frame (pipelined on the peer connection, like the other REPLICA_* frames)::

    REPLICA_FETCH_BATCH  c, rid (replica id), w (max_wait_ms), mb (max bytes in all),
                         ps: [[partition, epoch, fetch_offset, max_bytes, known_high_watermark], ...]
                      -> OK {r, ps: [[partition, epoch, error, high_watermark, log_start_offset,
                                      log_end_offset, records, incarnation or None], ...]}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.replication import FetchRequest, FetchResponse

log = logging.getLogger(__name__)

BATCH_MAX_BYTES = 8 * 1024 * 1024  # per frame, within the peers' maximum frame size


class PeerRequests(Protocol):
    """How a batcher reaches a primary MM (``replica_transport.PeerLinks``; a fake in unit tests)."""

    async def request_frame(self, peer: str, frame: dict[str, Any], timeout: float) -> dict[str, Any]: ...  # noqa: ASYNC109


def encode_request(request: FetchRequest, known_high_watermark: int) -> list[Any]:
    return [request.partition, request.epoch, request.fetch_offset, request.max_bytes, known_high_watermark]


def decode_request(item: list[Any], replica_id: str, max_wait_ms: int) -> tuple[FetchRequest, int]:
    partition, epoch, offset, max_bytes, known_hw = item
    request = FetchRequest(str(partition), replica_id, int(epoch), int(offset), int(max_bytes), max_wait_ms)
    return request, int(known_hw)


def encode_response(response: FetchResponse, incarnation: str | None) -> list[Any]:
    return [
        response.partition,
        response.epoch,
        int(response.error),
        response.high_watermark,
        response.log_start_offset,
        response.log_end_offset,
        response.records,
        incarnation,
    ]


def decode_response(item: list[Any]) -> tuple[FetchResponse, str | None]:
    partition, epoch, error, hw, start, end, records, incarnation = item
    response = FetchResponse(
        str(partition), int(epoch), ErrorCode(error), int(hw), int(start), int(end), bytes(records)
    )
    return response, None if incarnation is None else str(incarnation)


_Pending = tuple[FetchRequest, "asyncio.Future[tuple[FetchResponse, str | None]]"]


class FetchBatcher:
    """The fetches of this MM's backups from one primary MM (see the module docstring)."""

    def __init__(
        self,
        links: PeerRequests,
        peer: str,
        *,
        timeout_s: float = 3.0,
        max_bytes: int = BATCH_MAX_BYTES,
        gather_s: float = 0.02,
    ) -> None:
        self.links = links
        self.peer = peer
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.gather_s = gather_s
        self.frames = 0  # batches sent (stats, tests)
        self._unsent: dict[str, _Pending] = {}
        self._returning: set[str] = set()  # answered, their fetcher not back yet
        self._known_hw: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def fetch(self, request: FetchRequest) -> tuple[FetchResponse, str | None]:
        """The primary's answer to ``request`` and the partition's incarnation there."""
        future: asyncio.Future[tuple[FetchResponse, str | None]] = asyncio.get_running_loop().create_future()
        old = self._unsent.pop(request.partition, None)
        if old is not None and not old[1].done():
            old[1].cancel()  # one fetch per partition at a time: the newer request wins
        self._unsent[request.partition] = (request, future)
        self._returning.discard(request.partition)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"fetch-batcher-{self.peer}")
        self._wake.set()
        try:
            return await future
        finally:
            if not future.done():
                future.cancel()
            pending = self._unsent.get(request.partition)
            if pending is not None and pending[1] is future:
                del self._unsent[request.partition]

    def forget(self, partition: str) -> None:
        """``partition`` no longer fetches from this primary."""
        self._known_hw.pop(partition, None)
        self._returning.discard(partition)

    def close(self) -> None:
        for task in [self._task, *self._sending]:
            if task is not None:
                task.cancel()
        for _, future in self._unsent.values():
            future.cancel()
        self._unsent.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            # Let the fetchers just answered come back, so that they ride in this frame.
            deadline = loop.time() + self.gather_s
            while self._returning and (left := deadline - loop.time()) > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._wake.wait()
                self._wake.clear()
            self._returning.clear()
            if not self._unsent:
                continue
            batch, self._unsent = self._unsent, {}
            task = asyncio.create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: dict[str, _Pending]) -> None:
        first = next(iter(batch.values()))[0]
        max_wait_ms = max(request.max_wait_ms for request, _ in batch.values())
        frame = {
            "t": FrameType.REPLICA_FETCH_BATCH,
            "rid": first.replica_id,
            "w": max_wait_ms,
            "mb": self.max_bytes,
            "ps": [encode_request(req, self._known_hw.get(name, -1)) for name, (req, _) in batch.items()],
        }
        self.frames += 1
        try:
            reply = await self.links.request_frame(self.peer, frame, self.timeout_s + max_wait_ms / 1000.0)
            answers = [decode_response(item) for item in reply.get("ps") or ()]
        except Exception as exc:  # whatever went wrong, no fetcher may wait for an answer for ever
            for _, future in batch.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"{self.peer}: batched fetch failed: {exc!r}"))
            return
        answered: set[str] = set()
        for response, incarnation in answers:
            pending = batch.get(response.partition)
            if pending is None or pending[1].done():
                continue
            answered.add(response.partition)
            if response.error is ErrorCode.NONE:
                self._known_hw[response.partition] = response.high_watermark
            self._returning.add(response.partition)
            pending[1].set_result((response, incarnation))
        # Left out (nothing new for them, or over the byte budget): first in the next frame.
        again = {name: p for name, p in batch.items() if name not in answered and not p[1].done()}
        if again:
            self._unsent = again | {k: v for k, v in self._unsent.items() if k not in again}
            self._wake.set()
        elif answered:
            self._wake.set()
