"""The chaos run's load: producers, consumers and large streamed messages, each recording what it saw.

Only the public client library: ``Producer`` (it survives a CM loss), ``Consumer`` with manual
acks and ``reconnect=False`` (so that every delivery the broker makes is seen and recorded; a
reconnecting consumer drops repeats before the application sees them) that opens a new session
itself when its CM goes away, ``Fetcher`` for the final read of every partition.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from adv_checker import Delivery, History, LargeReceipt, Sent, Stored, payload_id

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Fetcher, Producer
from hybridmq.client.consumer import StreamMessage

MARK = b"adv|"
CHUNK = 256 * 1024
STALL_S = 30.0  # a streamed message whose next chunk takes longer than this has stalled
ACK_WAIT_S = 10.0  # an ACK not answered in this time counts as unconfirmed
LOST_CONNECTION = (ConnectionError, OSError, ClientError, asyncio.IncompleteReadError)


def encode(producer: str, n: int) -> bytes:
    return MARK + f"{producer}|{n}|".encode() + b"x" * 64


def decode(value: object) -> str | None:
    """The payload id of a workload message, None for anything else (chunks, other clients)."""
    if not isinstance(value, bytes) or not value.startswith(MARK):
        return None
    parts = value.split(b"|")
    return payload_id(parts[1].decode(), int(parts[2])) if len(parts) >= 3 else None


async def produce(
    h: History,
    name: str,
    bootstrap: str,
    dest: str,
    group: str,
    *,
    fixed: bool,
    rate: float,
    stop: asyncio.Event,
    window: int = 32,
) -> None:
    """Send ``rate`` messages a second in order; record every message and whether it was acked.

    A producer that fails for good is replaced by a new one under a new name (order is per
    producer), so the load goes on whatever happens.
    """
    generation = 0
    while not stop.is_set():
        me = f"{name}.{generation}"
        generation += 1
        try:
            p = await Producer.connect(
                bootstrap,
                partition_type="fixed" if fixed else "on-demand",
                key=name if fixed else None,
                delivery_timeout=60.0,
                give_up_after_s=60.0,
            )
        except LOST_CONNECTION:
            await asyncio.sleep(0.2)
            continue
        pending: set[asyncio.Task[None]] = set()
        failed = asyncio.Event()

        async def one(p: Producer, me: str, n: int, failed: asyncio.Event) -> None:
            try:
                await p.send(dest, encode(me, n))
            except Exception:
                h.sent.append(Sent(me, n, group, fixed, acked=False))
                failed.set()
                return
            h.sent.append(Sent(me, n, group, fixed, acked=True))

        n = 0
        start = time.monotonic()
        while not stop.is_set() and not failed.is_set():
            if len(pending) >= window or p.is_blocked:
                await asyncio.wait(pending, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
                pending = {t for t in pending if not t.done()}
                continue
            task = asyncio.create_task(one(p, me, n, failed))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(0)  # the send appends now: the order is the order of n
            n += 1
            ahead = start + n / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        if pending:
            await asyncio.wait(pending, timeout=90)
        try:
            await asyncio.wait_for(p.close(), 30)
        except Exception:
            pass


async def _reconnecting(
    open_consumer: Callable[[], Awaitable[Consumer]],
    session: Callable[[Consumer], Awaitable[None]],
    stop: asyncio.Event,
) -> None:
    """Run ``session`` on a fresh consumer (same subscription) each time the last one's CM went away."""
    while not stop.is_set():
        try:
            c = await open_consumer()
        except Exception:
            await asyncio.sleep(0.2)
            continue
        try:
            await session(c)
        except LOST_CONNECTION:
            await asyncio.sleep(0.1)
        finally:
            try:
                await asyncio.wait_for(c.close(), 5)
            except Exception:
                pass


async def consume(
    h: History,
    bootstrap: str,
    dest: str,
    group: str,
    stop: asyncio.Event,
    durable: str | None = None,
    hold_s: float = 0.0,
    window: int = 2000,
) -> None:
    """Receive batches, record each message with its partition, offset and redelivered flag, ack the
    batch (``hold_s`` later: a slow consumer keeps the queue's cursor low while others ack above it)
    and record when; reconnect (a new session, same subscription) when the connection ends."""

    async def session(c: Consumer) -> None:
        while not stop.is_set():
            try:
                batch = await c.receive_batch(timeout=0.5)
            except TimeoutError:
                continue
            received = time.monotonic()
            if hold_s:
                await asyncio.sleep(hold_s)
            confirmations = [c.ack(m) for m in batch]  # type: ignore[arg-type]  # small messages only here
            # an ACK is only sent on an open connection; a closed one drops it silently
            sent_at = None if c.conn.closed else time.monotonic()
            task = asyncio.create_task(record(batch, confirmations, received, sent_at))
            recording.add(task)
            task.add_done_callback(recording.discard)

    async def record(
        batch: list[Any],
        confirmations: list[asyncio.Future[Any] | None],
        received: float,
        sent_at: float | None,
    ) -> None:
        """Record the batch once each ACK was answered: acknowledged means the broker confirmed it
        (committed: it survives a failover), not only that the consumer sent it."""
        waiting = [f for f in confirmations if f is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=ACK_WAIT_S)
        for m, fut in zip(batch, confirmations, strict=True):
            confirmed = fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None
            pid = decode(getattr(m, "value", None))
            if pid is not None:
                h.deliveries.append(
                    Delivery(
                        group,
                        pid,
                        m.partition,
                        m.offset,
                        bool(m.redelivered),
                        received,
                        sent_at if confirmed else None,
                        ack_sent_at=sent_at,
                    )
                )

    recording: set[asyncio.Task[None]] = set()

    await _reconnecting(
        lambda: Consumer.connect(
            bootstrap, dest, durable=durable, auto_ack=False, window=window, reconnect=False
        ),
        session,
        stop,
    )
    if recording:
        await asyncio.wait(recording)


def large_body(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def chunked(body: bytes) -> Iterator[bytes]:
    for i in range(0, len(body), CHUNK):
        yield body[i : i + CHUNK]


async def produce_large(
    h: History, bootstrap: str, dest: str, rng: random.Random, stop: asyncio.Event, size: int, every_s: float
) -> None:
    """Stream a ``size``-byte message every ``every_s``; an acked one is recorded with its sha256."""
    n = 0
    while not stop.is_set():
        try:
            p = await Producer.connect(
                bootstrap, partition_type="fixed", key="large", delivery_timeout=60.0, give_up_after_s=60.0
            )
        except LOST_CONNECTION:
            await asyncio.sleep(0.2)
            continue
        try:
            while not stop.is_set():
                body = large_body(rng, size + rng.randrange(CHUNK))
                mid = f"large:{n}"
                n += 1
                try:
                    await asyncio.wait_for(p.send_stream(dest, chunked(body), headers={"id": mid}), 120)
                except Exception:
                    h.large_refused += 1
                    break
                h.large_sent[mid] = (hashlib.sha256(body).hexdigest(), len(body))
                await asyncio.sleep(every_s)
        finally:
            try:
                await asyncio.wait_for(p.close(), 30)
            except Exception:
                pass


async def consume_large(h: History, bootstrap: str, dest: str, stop: asyncio.Event) -> None:
    """Read every streamed message chunk by chunk; a read from the first chunk to the last is a
    receipt (sha256 of what the application got), one that starts later is counted as partial."""

    async def session(c: Consumer) -> None:
        while not stop.is_set():
            try:
                msg = await c.receive(timeout=0.5)
            except TimeoutError:
                continue
            if not isinstance(msg, StreamMessage):
                continue
            first = (msg.attributes or {}).get("seq", 0) == 0
            mid = (msg.headers or {}).get("id") if first else None
            digest, size = hashlib.sha256(), 0
            try:
                async with asyncio.timeout(STALL_S):
                    async for chunk in msg.chunks():
                        digest.update(chunk)
                        size += len(chunk)
                        await asyncio.sleep(
                            0.05
                        )  # a reader slower than the writer: mid-message at most faults
            except TimeoutError:
                h.large_stalled += 1  # the rest of the message never came: start a new session
                raise ConnectionError("stream stalled") from None
            if mid is None:
                h.large_partial += 1
            else:
                h.large_receipts.append(LargeReceipt(str(mid), digest.hexdigest(), size))

    await _reconnecting(
        lambda: Consumer.connect(bootstrap, dest, window=64, window_bytes=8 * CHUNK, reconnect=False),
        session,
        stop,
    )


async def read_everything(h: History, bootstraps: str) -> None:
    """Every record of every partition, by offset, as ``Stored`` positions of workload payloads.

    Through each CM in turn until one answers for every partition; when none does, the failure is
    recorded (``read_errors``) and the verdicts rest on the deliveries alone."""
    for address in bootstraps.split(","):
        try:
            await _read_through(h, address)
            return
        except (ClientError, ConnectionError, OSError, TimeoutError) as exc:
            h.read_errors.append(f"{address}: {exc}")


async def _read_through(h: History, address: str) -> None:
    f = await Fetcher.connect(address, retry_s=20.0)
    try:
        for meta in await f.partitions():
            offset = meta.start_offset
            while offset < meta.end_offset:
                try:
                    result = await f.fetch(meta.name, offset, max_offset=meta.end_offset)
                except ClientError as exc:
                    if exc.code == ErrorCode.UNKNOWN_PARTITION:
                        break  # deleted since the listing (a drained on-demand partition): all consumed
                    if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        # Retention deleted segments since the listing: they held only records
                        # every cursor had passed (delivered and acknowledged). Go on from the start.
                        start = await _log_start(f, meta.name)
                        if start > offset:
                            offset = start
                            continue
                    raise
                if not result.batches:
                    break
                for batch in result.batches:
                    for i, record in enumerate(batch.records):
                        pid = decode(record[0])
                        if pid is not None and batch.base_offset + i >= offset:
                            h.stored.append(Stored(pid, meta.name, batch.base_offset + i))
                offset = result.next_offset
    finally:
        await f.close()


async def _log_start(f: Fetcher, partition: str) -> int:
    for meta in await f.partitions():
        if meta.name == partition:
            return int(meta.start_offset)
    return -1
