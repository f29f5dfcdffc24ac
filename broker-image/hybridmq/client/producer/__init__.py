"""Asyncio producer: a session, an accumulator, a sender, the on-demand move, large-message streams.

    async with await Producer.connect("127.0.0.1:7000", partition_type="fixed", key="k") as p:
        ack = await p.send("queue:orders", b"hello")        # Ack(partition, offset)

The parts, each in its module:

* the session (``client/session.py``): the CM connection, its keepalive and CM failover. When the
  CM dies the producer keeps its partition, producer id, producer epoch and sequences; every batch
  in flight is resent in sequence order on the next connection (the MM stores a resend once), and
  ``send`` / ``try_send`` keep buffering meanwhile;
* the accumulator (``accumulator.py``): records gather per (destination, ttl) into batches of
  ``batch_bytes`` or ``linger_ms``; a batch is ONE PRODUCE frame whose records blob the brokers
  never decode, with one future for all its records;
* the sender (``sender.py``): many batches in flight, retries of transient refusals until
  ``delivery_timeout``; a batch the brokers never answer fails there too (``DeliveryTimeout``);
* the on-demand move (``move.py``): an on-demand producer whose partition stops taking writes
  moves to another one exactly once and in order;
* streams (``stream.py``): ``send_stream`` sends a very large message as a sequence of chunks.

``max_pending_bytes`` bounds buffered + unacknowledged bytes: beyond it ``is_blocked`` is true,
``try_send`` returns False and ``send`` waits. Because the MM withholds acknowledgements while a
consumer lags too far behind, a slow consumer throttles its producers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Iterable
from typing import Any, Unpack

from hybridmq.api.assignment import PartitionType
from hybridmq.api.frames import FrameType
from hybridmq.client.connection import ClientError
from hybridmq.client.message import Ack
from hybridmq.client.producer.accumulator import FRAME_MARGIN, MAX_RECORD_BYTES, Accumulator, RecordTooLarge
from hybridmq.client.producer.move import OnDemandMove
from hybridmq.client.producer.sender import FIXED_RETRIABLE, RETRIABLE, DeliveryTimeout, Sender
from hybridmq.client.producer.stream import send_stream
from hybridmq.client.send_log import SendLog, SendLogTarget
from hybridmq.client.session import (
    ClientClosedError,
    Session,
    SessionArgs,
    SessionClient,
    SessionOptions,
)
from hybridmq.protocol import Connection, RemoteError

__all__ = ["MAX_RECORD_BYTES", "DeliveryTimeout", "Producer", "RecordTooLarge"]

_new_ack = tuple.__new__  # Ack's own __new__ is one Python call more per record


class Producer(SessionClient):
    def __init__(
        self,
        session: Session,
        reply: dict[str, Any],
        *,
        movable: bool,
        linger_ms: float,
        batch_bytes: int,
        max_pending_bytes: int,
        delivery_timeout: float,
        send_log: SendLogTarget,
    ) -> None:
        self.session = session
        self.max_pending_bytes = max_pending_bytes
        self.send_log = SendLog.open(send_log)  # acked producer_id,sequence lines (client/send_log.py)
        self._sender = Sender(
            session,
            reply["partition"],
            reply["producer_id"],
            int(reply.get("pid", -1)),
            delivery_timeout,
            self.send_log,
            FIXED_RETRIABLE if reply.get("ptype") == PartitionType.FIXED else RETRIABLE,
        )
        sender = self._sender
        self._acc = Accumulator(linger_ms / 1000.0, batch_bytes, sender.send_batch, lambda: sender.idle)
        self._acc.frame_bytes = session.max_frame - FRAME_MARGIN
        self._move = OnDemandMove(sender) if movable else None
        self.error: BaseException | None = None
        session.attach(self)

    @classmethod
    async def connect(
        cls,
        bootstrap: str | list[str] | None = None,
        *,
        partition_type: str | PartitionType = PartitionType.ON_DEMAND,
        key: str | bytes | None = None,
        partition: str | None = None,
        linger_ms: float = 2.0,
        batch_bytes: int = 256 * 1024,
        max_pending_bytes: int = 8 * 1024 * 1024,
        delivery_timeout: float = 30.0,
        send_log: SendLogTarget = None,
        **session_args: Unpack[SessionArgs],
    ) -> Producer:
        """Open a producer on a partition of ``partition_type`` (``key`` picks a fixed one, or name
        the ``partition``); ``session_args`` are the session's (``SessionArgs``: credentials, CM
        distribution, failover and keepalive)."""
        session = await Session.open(SessionOptions(bootstrap, **session_args))
        ptype = PartitionType(partition_type)
        open_frame = {"t": FrameType.OPEN_PRODUCER, "ptype": str(ptype), "key": key, "partition": partition}
        try:
            reply = await _request(session.conn, open_frame)
        except BaseException:
            session.close()
            raise
        return cls(
            session,
            reply,
            movable=partition is None and ptype == PartitionType.ON_DEMAND,
            linger_ms=linger_ms,
            batch_bytes=batch_bytes,
            max_pending_bytes=max_pending_bytes,
            delivery_timeout=delivery_timeout,
            send_log=send_log,
        )

    def _describe(self) -> str:
        sender: Sender | None = getattr(self, "_sender", None)  # (None: ``__init__`` failed)
        return f"Producer ({sender.partition if sender else '?'})"

    # -- what the session tells ------------------------------------------------------------------
    def on_frame(self, frame: dict[str, Any]) -> None:
        if frame.get("t") == FrameType.ERROR and frame.get("fatal"):
            self.error = ClientError(int(frame.get("code", 0)), str(frame.get("msg")))

    def lost(self) -> None:
        if self.session.ended:
            self._sender.fail_parked()

    async def restore(self, conn: Connection) -> None:
        """The partition, producer id, epoch and sequences live on: nothing to reopen."""

    def restored(self) -> None:
        self._acc.frame_bytes = self.session.max_frame - FRAME_MARGIN  # (another CM may take less)
        self._sender.resend_parked()

    # -- identity and session --------------------------------------------------------------------
    @property
    def partition(self) -> str:
        return self._sender.partition

    @property
    def producer_id(self) -> str:
        return self._sender.producer_id

    @property
    def pid(self) -> int:
        return self._sender.pid

    @property
    def resent(self) -> int:
        return self._sender.resent

    # -- flow control ----------------------------------------------------------------------------
    @property
    def is_blocked(self) -> bool:
        return self._acc.buffered + self._sender.inflight >= self.max_pending_bytes

    async def wait_unblocked(self) -> None:
        released = self._sender.released
        while self.is_blocked:
            released.clear()
            await released.wait()

    # -- sending ---------------------------------------------------------------------------------
    def _check_open(self) -> None:
        """Raise when the session ended (a closed connection being replaced keeps buffering)."""
        if self.session.closing:
            raise ClientClosedError("the producer is closed")
        if self.session.ended:
            raise self.error or self.session.error or ConnectionError("producer connection closed")

    def try_send(
        self,
        dest: str,
        value: bytes,
        key: bytes | str | None = None,
        headers: dict[str, Any] | None = None,
        ttl_ms: int = 0,
    ) -> bool:
        """Queue a record without waiting; False (nothing queued) when the producer is blocked."""
        if self._acc.buffered + self._sender.inflight >= self.max_pending_bytes:
            return False
        if self.session.conn.closed:
            self._check_open()
        self._acc.append(dest, value, key, headers, ttl_ms)
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
        # The per-record path of an application that awaits each send: no task, no future of its
        # own, no property look-ups.
        if self._acc.buffered + self._sender.inflight >= self.max_pending_bytes:
            await self.wait_unblocked()
        if self.session.conn.closed:
            self._check_open()
        batch, index = self._acc.append(dest, value, key, headers, ttl_ms)
        # A batch acknowledged by (or found stored in) the partition it left in a move names that one.
        try:
            partition, base = await batch.future
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not batch.future.cancelled() or task is None or task.cancelling():
                raise  # this send itself was cancelled
            # Another send of the same batch was cancelled, and with it the batch's shared future.
            partition, base = await asyncio.shield(self._sender.outcome(batch.future))
        return _new_ack(Ack, (partition, base + index if base >= 0 else -1))

    async def flush(self) -> None:
        """Send everything buffered and wait until it is acknowledged (raises the first error)."""
        self._acc.drain()
        conn = self.session.conn
        if not conn.closed:
            await conn.drain()
        # A batch whose (shared) future a cancelled send cancelled still counts: its outcome does.
        # Shielded: cancelling flush (or close) must not cancel the batches' futures under the sends.
        waits = [self._sender.outcome(r) if r.cancelled() else r for r in self._sender.outstanding]
        first: BaseException | None = None
        while waits:
            results = await asyncio.shield(asyncio.gather(*waits, return_exceptions=True))
            errors = (r for r in results if isinstance(r, BaseException))
            first = first or next((e for e in errors if not isinstance(e, asyncio.CancelledError)), None)
            waits = [self._sender.outcome(w) for w in waits if w.cancelled()]
        if first is not None:
            raise first

    async def send_stream(
        self,
        dest: str,
        chunks: AsyncIterable[bytes] | Iterable[bytes],
        key: bytes | str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> Ack:
        """Send one very large message from an (async) iterable of byte chunks (``stream.py``);
        returns the Ack of the final chunk, whose offset identifies the message."""
        await self.flush()
        last = await send_stream(self._sender, self.wait_unblocked, dest, chunks, key, headers)
        await self.flush()
        partition, offset = await last
        return Ack(partition, offset)

    async def close(self) -> None:
        """Send what is buffered, wait for its acknowledgements, end the session."""
        try:
            if not self.session.ended:
                await self.flush()
        finally:
            self.session.close()
            if self.send_log is not None:
                self.send_log.close()

    def abort(self) -> None:
        """End at once, as a killed process would: nothing more is sent, nothing resent."""
        self.session.close()
        if self.send_log is not None:
            self.send_log.close()


async def _request(conn: Connection, frame: dict[str, Any]) -> dict[str, Any]:
    try:
        reply: dict[str, Any] = await conn.request(frame)
    except RemoteError as exc:
        raise ClientError(exc.code, exc.msg) from None
    return reply
