"""Asyncio producer: batching, pipelining, flow control, very large messages.

Records accumulate per (destination, ttl) until ``batch_bytes`` or ``linger_ms``; a batch becomes
ONE PRODUCE frame whose records blob the brokers never decode. Many batches are in flight at once
(correlation ids). ``max_pending_bytes`` bounds buffered + unacknowledged bytes: beyond it
``is_blocked`` is true, ``try_send`` returns False and ``send`` waits. Because the MM withholds
acknowledgements while a consumer lags too far behind, a slow consumer throttles its producers.

A batch refused for a transient reason (its MM is down or restarting, the partition moved to a
new primary, a stale epoch) is resent as it is - same producer id, producer epoch and sequence, so
the MM stores it once - until ``delivery_timeout`` seconds passed; per-producer order holds because
a later batch is refused (out of order) until the earlier one is stored. An on-demand producer
whose partition stops taking writes (it drains after its primary was lost) moves to another one
exactly once and in order (``_move``): it asks the old partition which refused batches it already
stores (FETCH_META ``pids``), completes those as acknowledged and resends only the rest.

``send_stream`` sends a very large message as a sequence of CHUNK batches (each ``chunk_bytes``),
at most ``max_pending_bytes`` of it in flight, so it never sits whole in memory; the consumer gets
a ``StreamMessage`` and reads the chunks as they come.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import AsyncIterable, Iterable
from time import time as _time
from typing import Any

from hybridmq.api.assignment import PartitionType
from hybridmq.api.frames import BatchFlag, ErrorCode, FrameType
from hybridmq.client.connection import ClientError, connect, raise_remote
from hybridmq.client.distribution import Strategy
from hybridmq.client.message import Ack, pack_records
from hybridmq.client.send_log import SendLog, SendLogTarget
from hybridmq.protocol import Connection, RemoteError

log = logging.getLogger(__name__)
_stream_ids = itertools.count(1)
MAX_RECORD_BYTES = 8 * 1024 * 1024
# Issue 4: an on-demand partition that drains after a failover (or was deleted) takes no more
# writes: an on-demand producer moves to the partition the CM assigns it now and resends there.
MOVED = frozenset({ErrorCode.PARTITION_NOT_WRITABLE, ErrorCode.UNKNOWN_PARTITION})
# Errors after which a batch is resent as it is (same pid, producer epoch and sequence).
RETRIABLE = frozenset(
    {
        ErrorCode.MM_UNAVAILABLE,
        ErrorCode.NOT_PRIMARY,
        ErrorCode.STALE_EPOCH,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


class _Batch:
    __slots__ = ("dest", "expiry", "future", "records", "size")

    def __init__(self, dest: str, expiry: int) -> None:
        self.dest = dest
        self.expiry = expiry
        self.records: list[tuple[Any, ...]] = []
        self.size = 0
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()


class Producer:
    def __init__(
        self,
        conn: Connection,
        runner: asyncio.Task[None],
        partition: str,
        producer_id: str,
        pid: int,
        *,
        linger_ms: float,
        batch_bytes: int,
        max_pending_bytes: int,
        delivery_timeout: float = 30.0,
        send_log: SendLogTarget = None,
    ) -> None:
        self.conn = conn
        self.partition = partition
        self.producer_id = producer_id
        self.pid = pid  # idempotence: (pid, sequence) lets the MM store a resent batch once
        self._seq = 0
        self._pepoch = 0  # producer epoch: bumped (sequence back to 0) after a failed batch
        self.linger = linger_ms / 1000.0
        self.batch_bytes = batch_bytes
        self.max_pending_bytes = max_pending_bytes
        self.delivery_timeout = delivery_timeout
        self._open: dict[tuple[str, int], _Batch] = {}
        self._buffered = 0
        self._inflight = 0
        self._unblocked = asyncio.Event()
        self._unblocked.set()
        self._timer: asyncio.TimerHandle | None = None
        self._outstanding: set[asyncio.Future[int]] = set()
        self._runner = runner
        # On-demand moves: the partition each unfinished batch was last sent to, the batches the old
        # partition refused (per old partition), new batches held back while a move is under way
        self._chains: dict[asyncio.Future[int], str] = {}
        self._move_parked: dict[str, list[tuple[dict[str, Any], asyncio.Future[int], int, float]]] = {}
        self._move_tasks: dict[str, asyncio.Task[None]] = {}
        self._holding: list[tuple[Any, ...]] | None = None
        self._pid_gen: dict[int, int] = {pid: 0}  # pid -> move generation (resend order)
        self._acked_on: weakref.WeakKeyDictionary[asyncio.Future[int], str] = weakref.WeakKeyDictionary()
        conn.handler = self._on_frame
        self.error: BaseException | None = None
        self.send_log = SendLog.open(send_log)  # acked producer_id,sequence lines (client/send_log.py)

    @classmethod
    async def connect(
        cls,
        bootstrap: str | list[str] | None = None,
        *,
        partition_type: str | PartitionType = PartitionType.ON_DEMAND,
        key: str | bytes | None = None,
        partition: str | None = None,
        user: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        strategy: Strategy | None = None,
        linger_ms: float = 2.0,
        batch_bytes: int = 256 * 1024,
        max_pending_bytes: int = 8 * 1024 * 1024,
        delivery_timeout: float = 30.0,
        send_log: SendLogTarget = None,
    ) -> Producer:
        conn, _ = await connect(
            bootstrap, user=user, password=password, client_id=client_id, strategy=strategy
        )
        runner = asyncio.create_task(conn.run())
        try:
            reply = await conn.request(
                {
                    "t": FrameType.OPEN_PRODUCER,
                    "ptype": str(PartitionType(partition_type)),
                    "key": key,
                    "partition": partition,
                }
            )
        except RemoteError as exc:
            conn.close()
            raise ClientError(exc.code, exc.msg) from None
        producer = cls(
            conn,
            runner,
            reply["partition"],
            reply["producer_id"],
            int(reply.get("pid", -1)),
            linger_ms=linger_ms,
            batch_bytes=batch_bytes,
            max_pending_bytes=max_pending_bytes,
            delivery_timeout=delivery_timeout,
            send_log=send_log,
        )
        producer._movable = partition is None and PartitionType(partition_type) == PartitionType.ON_DEMAND
        return producer

    async def __aenter__(self) -> Producer:
        return self

    def _buffers_while_disconnected(self) -> bool:
        """True when a lost connection is being replaced (``client/failover.py``): keep buffering."""
        return False

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _on_frame(self, frame: dict[str, Any]) -> None:
        if frame.get("t") == FrameType.ERROR and frame.get("fatal"):
            self.error = ClientError(int(frame.get("code", 0)), str(frame.get("msg")))

    # -- flow control ----------------------------------------------------------------------------
    @property
    def is_blocked(self) -> bool:
        return self._buffered + self._inflight >= self.max_pending_bytes

    async def wait_unblocked(self) -> None:
        while self.is_blocked:
            self._unblocked.clear()
            await self._unblocked.wait()

    def _update_blocked(self) -> None:
        if not self.is_blocked:
            self._unblocked.set()

    # -- sending ---------------------------------------------------------------------------------
    def _append(
        self, dest: str, value: bytes, key: bytes | str | None, headers: dict[str, Any] | None, ttl_ms: int
    ) -> tuple[_Batch, int]:
        # The per-record hot path of the whole pipeline: keep it lean.
        if self.conn.closed and not self._buffers_while_disconnected():
            raise self.error or ConnectionError("producer connection closed")
        if value.__class__ is not bytes:
            value = value.encode() if isinstance(value, str) else bytes(value)
        size = len(value) + 16
        if size > MAX_RECORD_BYTES:
            raise ValueError(
                f"record of {size} bytes > {MAX_RECORD_BYTES}: use send_stream for very large messages"
            )
        ts = int(_time() * 1000)
        k = (dest, ttl_ms)
        batch = self._open.get(k)
        if batch is None:
            batch = _Batch(dest, ts + ttl_ms if ttl_ms else 0)
            self._open[k] = batch
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self.linger, self._linger_expired)
        records = batch.records
        index = len(records)
        records.append((value, key, headers, ts))
        batch.size += size
        self._buffered += size
        if batch.size >= self.batch_bytes:
            self._dispatch(k)
        return batch, index

    def try_send(
        self,
        dest: str,
        value: bytes,
        key: bytes | str | None = None,
        headers: dict[str, Any] | None = None,
        ttl_ms: int = 0,
    ) -> bool:
        """Queue a record without waiting; False (nothing queued) when the producer is blocked."""
        if self.is_blocked:
            return False
        self._append(dest, value, key, headers, ttl_ms)
        return True

    async def send(
        self,
        dest: str,
        value: bytes,
        key: bytes | str | None = None,
        headers: dict[str, Any] | None = None,
        ttl_ms: int = 0,
    ) -> Ack:
        """Send one record; returns its ``Ack(partition, offset)`` once it is stored."""
        if self.is_blocked:
            await self.wait_unblocked()
        batch, index = self._append(dest, value, key, headers, ttl_ms)
        base = await batch.future
        # a batch acknowledged by (or found stored in) the partition it left in a move names that one
        partition = self._acked_on.get(batch.future, self.partition) if self._acked_on else self.partition
        return Ack(partition, base + index if base >= 0 else -1)

    def _linger_expired(self) -> None:
        self._timer = None
        for k in list(self._open):
            self._dispatch(k)

    def _dispatch(self, k: tuple[str, int]) -> None:
        batch = self._open.pop(k)
        if not self._open and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        blob = pack_records(batch.records)
        self._buffered -= batch.size
        self._send_blob(batch.dest, len(batch.records), blob, 0, batch.expiry, None, batch.future, batch.size)

    def _send_blob(
        self,
        dest: str,
        count: int,
        blob: bytes,
        flags: int,
        expiry: int,
        extra: dict[str, Any] | None,
        result: asyncio.Future[int],
        size: int,
    ) -> None:
        self._inflight += size
        self._outstanding.add(result)
        # Avoid "exception never retrieved" for fire-and-forget sends.
        result.add_done_callback(lambda r: r.cancelled() or r.exception())
        deadline = asyncio.get_running_loop().time() + self.delivery_timeout
        if self._holding is not None:  # a move is under way: numbered on the new partition later
            self._holding.append((dest, count, blob, flags, expiry, extra, result, size, deadline))
            return
        self._start(dest, count, blob, flags, expiry, extra, result, size, deadline)

    def _start(
        self,
        dest: str,
        count: int,
        blob: bytes,
        flags: int,
        expiry: int,
        extra: dict[str, Any] | None,
        result: asyncio.Future[int],
        size: int,
        deadline: float,
    ) -> None:
        frame = {
            "t": FrameType.PRODUCE,
            "p": self.partition,
            "d": dest,
            "n": count,
            "b": blob,
            "f": flags,
            "x": expiry,
            "xa": extra,
            "pid": self.pid,
            "pep": self._pepoch,
            "seq": self._seq,
        }
        self._seq += count
        self._attempt(frame, result, size, deadline, 0.05)

    def _attempt(
        self, frame: dict[str, Any], result: asyncio.Future[int], size: int, deadline: float, delay: float
    ) -> None:
        """Send (or resend, with the same producer id, epoch and sequence) one batch."""
        loop = asyncio.get_running_loop()
        self._chains[result] = frame["p"]
        try:
            fut = self.conn.request_nowait(dict(frame))
        except Exception as exc:
            self._finish(frame, result, size, self.error or exc)
            return

        def done(f: asyncio.Future[Any]) -> None:
            exc = f.exception()
            if (
                isinstance(exc, RemoteError)
                and exc.code in MOVED
                and self._movable
                and loop.time() < deadline
                and not self.conn.closed
            ):
                self._park_moved(frame, result, size, deadline)
                return
            if (
                isinstance(exc, RemoteError)
                and exc.code in RETRIABLE
                and loop.time() + delay < deadline
                and not self.conn.closed
            ):
                # e.g. the MM restarted or the partition moved to a new primary: resend; the MM
                # drops what it already stored (idempotence), and later batches wait their turn.
                loop.call_later(delay, self._attempt, frame, result, size, deadline, min(delay * 2, 0.5))
                return
            self._finish(frame, result, size, exc, f)

        fut.add_done_callback(done)

    _movable = False  # an on-demand producer that did not name its partition
    _move_lock: asyncio.Lock | None = None
    MOVE_WAIT_S = 3.0  # how long a move waits for the old partition's other in-flight batches
    STATE_WAIT_S = 10.0  # how long it asks the old partition (being taken over) what it stores

    def _park_moved(
        self, frame: dict[str, Any], result: asyncio.Future[int], size: int, deadline: float
    ) -> None:
        """Issue 4: the partition refused the batch (draining / deleted): hand it to the move task of
        that partition, which resends it elsewhere unless the old partition already stores it."""
        old = str(frame["p"])
        self._chains.pop(result, None)
        self._move_parked.setdefault(old, []).append((frame, result, size, deadline))
        if old not in self._move_tasks:
            self._move_tasks[old] = asyncio.get_running_loop().create_task(self._move(old))

    async def _move(self, old: str) -> None:
        """Move away from ``old`` (once for all the batches it refused): open a producer on another
        on-demand partition (new producer id and sequence space), wait (bounded) until the other
        batches in flight on ``old`` came back, ask ``old``'s current primary (the replica that
        took it over to drain it) which of them it stores - the producer-sequence table is
        replicated with the log - and complete those as acknowledged; resend only the rest, in
        their original order, then the batches held back meanwhile. Exactly once, order kept."""
        try:
            while self._move_parked.get(old):
                try:
                    await self._move_round(old)
                except Exception as exc:
                    self._release_held()
                    for frame, result, size, _ in self._move_parked.pop(old, []):
                        self._finish(frame, result, size, raise_remote(exc))
        finally:
            self._move_tasks.pop(old, None)

    async def _move_round(self, old: str) -> None:
        if self._move_lock is None:
            self._move_lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        async with self._move_lock:
            if old == self.partition:
                if self._holding is None:
                    self._holding = []
                await asyncio.sleep(0.02)  # bounded pace if the CM's view lags (moves again)
                reply = await self.conn.request(
                    {"t": FrameType.OPEN_PRODUCER, "ptype": str(PartitionType.ON_DEMAND)}
                )
                self.partition = reply["partition"]
                self.pid = int(reply.get("pid", -1))
                self._pid_gen[self.pid] = len(self._pid_gen)
                self._pepoch = 0
                self._seq = 0
                # The other batches in flight on the old partition come back refused (or acked)
                # shortly: gather them so that they are resolved and resent together, in order.
                for _ in range(int(self.MOVE_WAIT_S / 0.02)):
                    if old not in self._chains.values():
                        break
                    await asyncio.sleep(0.02)
            parked = self._move_parked.pop(old, [])
            if not parked:
                self._release_held()
                return
            stored = await self._stored_in(old, {int(item[0]["pid"]) for item in parked})
            gen = self._pid_gen
            parked.sort(key=lambda i: (gen.get(int(i[0]["pid"]), 0), i[0]["pep"], i[0]["seq"]))
            for frame, result, size, deadline in parked:
                state = stored.get(int(frame["pid"])) if stored is not None else None
                if (
                    state is not None
                    and int(frame["pep"]) == int(state[0])
                    and int(frame["seq"]) + int(frame["n"]) - 1 <= int(state[1])
                ):
                    # Stored by the lost primary, acknowledgement lost: it is acknowledged now.
                    offset = next((int(b[2]) for b in state[2] if int(b[0]) == int(frame["seq"])), -1)
                    reply_f = loop.create_future()
                    reply_f.set_result({"o": offset})
                    self._finish(frame, result, size, None, reply_f)
                    continue
                frame = dict(frame, p=self.partition, pid=self.pid, pep=self._pepoch, seq=self._seq)
                self._seq += int(frame["n"])
                self._attempt(frame, result, size, deadline, 0.05)
            self._release_held()

    async def _stored_in(self, partition: str, pids: set[int]) -> dict[int, list[Any]] | None:
        """What ``partition`` stores of these producer ids: ``{pid: [producer epoch, last sequence,
        [[first seq, last seq, base offset, last offset], ...]]}`` (FETCH_META ``pids``), asked of its
        current primary until it answers (a takeover is under way) or ``STATE_WAIT_S``; None when
        it cannot tell (the partition is gone, or no answer in time)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.STATE_WAIT_S
        why = ""
        while True:
            try:
                reply = await self.conn.request(
                    {"t": FrameType.FETCH_META, "p": [partition], "pids": sorted(pids)}, timeout=2.0
                )
                entries = reply.get("partitions") or []
                if not entries:
                    log.warning(
                        "producer %s: partition %s is gone; resending its refused batches without "
                        "knowing what it stored (one it stored unacknowledged may now be stored twice)",
                        self.producer_id,
                        partition,
                    )
                    return None
                entry = entries[0]
                if entry.get("err") is None and entry.get("producers") is not None:
                    return {int(k): v for k, v in dict(entry["producers"]).items()}
                why = str(entry.get("err"))
            except Exception as exc:
                why = repr(exc)
            if loop.time() >= until:
                log.warning(
                    "producer %s: no producer state from partition %s in %.0fs (%s); resending its "
                    "refused batches (one it stored unacknowledged may now be stored twice)",
                    self.producer_id,
                    partition,
                    self.STATE_WAIT_S,
                    why,
                )
                return None
            await asyncio.sleep(0.1)

    def _release_held(self) -> None:
        """Send the batches held back during a move, on the (new) partition, in their order."""
        held, self._holding = self._holding, None
        for args in held or ():
            self._start(*args)

    def _finish(
        self,
        frame: dict[str, Any],
        result: asyncio.Future[int],
        size: int,
        exc: BaseException | None,
        reply: asyncio.Future[Any] | None = None,
    ) -> None:
        self._inflight -= size
        self._outstanding.discard(result)
        self._chains.pop(result, None)
        self._update_blocked()
        if frame["p"] != self.partition and exc is None:
            self._acked_on[result] = str(frame["p"])
        if exc is not None and frame["pep"] == self._pepoch and frame.get("pid") == self.pid:
            # Given up on a batch that may not be stored: later batches start a new producer epoch.
            self._pepoch += 1
            self._seq = 0
        if exc is None and reply is not None and self.send_log is not None:
            self.send_log.acked(frame)
        if result.done():
            return
        if exc is None and reply is not None:
            result.set_result(int(reply.result()["o"]))
        elif isinstance(exc, RemoteError):
            result.set_exception(ClientError(exc.code, exc.msg))
        else:
            result.set_exception(self.error or exc or ConnectionError("send failed"))

    async def flush(self) -> None:
        """Send everything buffered and wait until it is acknowledged (raises the first error)."""
        for k in list(self._open):
            self._dispatch(k)
        await self.conn.drain()
        pending = list(self._outstanding)
        if pending:
            await asyncio.gather(*pending)

    async def send_stream(
        self,
        dest: str,
        chunks: AsyncIterable[bytes] | Iterable[bytes],
        key: bytes | str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> Ack:
        """Send one very large message from an (async) iterable of byte chunks.

        Each chunk becomes one CHUNK batch (keep chunks well under the frame limit, e.g. 1 MiB);
        returns the Ack of the final chunk, whose offset identifies the message.
        """
        await self.flush()
        sid = f"{self.producer_id}/{next(_stream_ids)}"
        seq = 0
        last: asyncio.Future[int] | None = None

        async def produce(chunk: bytes, fin: bool) -> asyncio.Future[int]:
            nonlocal seq
            await self.wait_unblocked()
            fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            extra = {"sid": sid, "seq": seq, "fin": fin, "key": key, "h": headers if seq == 0 else None}
            self._send_blob(dest, 1, chunk, BatchFlag.CHUNK, 0, extra, fut, len(chunk) + 64)
            await self.conn.drain()
            seq += 1
            return fut

        pending: bytes | None = None
        if isinstance(chunks, AsyncIterable):
            async for chunk in chunks:
                if pending is not None:
                    await produce(pending, False)
                pending = bytes(chunk)
        else:
            for chunk in chunks:
                if pending is not None:
                    await produce(pending, False)
                pending = bytes(chunk)
        last = await produce(pending or b"", True)
        await self.flush()
        return Ack(self.partition, await last)

    async def close(self) -> None:
        try:
            if not self.conn.closed:
                await self.flush()
        finally:
            self.conn.close()
            self._runner.cancel()
            if self.send_log is not None:
                self.send_log.close()
