"""Asyncio consumer: one subscription per consumer, batches in, messages out.

The CM relays DELIVER frames from every MM, each a run of records of one stored batch (a queue
shares a batch's records out among its consumers); the consumer unpacks them and yields
``Message``s. Acknowledgement is per message: with ``auto_ack`` (default) a delivery is
acknowledged when the application asks for the message after its last one (i.e. it processed them);
with ``auto_ack=False`` call ``ack(msg)`` for each message, or ``nack(msg)`` to give it back for
redelivery (``requeue=False``: reject it, a queue moves it to ``queue:_DMQ``). Un-acknowledged
queue messages are redelivered, to any consumer, when this one goes away. ``window``/
``window_bytes`` are the credit (unacknowledged records/bytes) the MMs may push before they wait for
acks - the end-to-end flow control; the consumer never holds more than its window.

Acknowledgements are confirmed: the MM answers an ACK once it is committed (replicated with the
partition), and a confirmed acknowledgement is never undone, not even by a failover: its batch is not
delivered again. ``ack()`` returns that confirmation as a future, ``await commit()`` waits for all of
them. An acknowledgement that was not confirmed (the primary failed first, or it was for a delivery
that the broker has since handed out again) leaves the batch to be redelivered. A redelivery has
``redelivered`` = True and ``delivery_count`` > 1; a first delivery never has.

A very large message arrives as a ``StreamMessage``: iterate ``chunks()`` before asking for the
next message; each chunk is acknowledged as it is consumed, so it never sits whole in memory. Chunks
are reassembled only in their sequence: a repeat of a chunk already handed out (a redelivery after a
failover restarts the stream at its first chunk) is checked against it and skipped, a gap raises
``StreamError`` (the stream is given back), so the bytes are exactly those that were sent.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Unpack

from hybridmq.api.frames import BatchFlag, ErrorCode, FrameType
from hybridmq.client.connection import ClientError
from hybridmq.client.message import Message, unpack_records
from hybridmq.client.redelivery import HandedOut
from hybridmq.client.session import (
    ClientClosedError,
    Session,
    SessionArgs,
    SessionClient,
    SessionOptions,
)
from hybridmq.protocol import Connection, RemoteError
from hybridmq.protocol.connection import ConnectionClosed

_sub_ids = itertools.count(1)


class StreamError(Exception):
    """A stream could not be reassembled from a contiguous chunk sequence (nothing was spliced)."""


class StreamMessage:
    """A very large message: metadata now, the bytes through ``chunks()``."""

    def __init__(self, consumer: Consumer, first: dict[str, Any]) -> None:
        xa = first.get("xa") or {}
        self.destination: str = first["d"]
        self.partition: str = first["p"]
        self.offset: int = first["o"]
        self.key = xa.get("key")
        self.headers = xa.get("h")
        self.stream_id: str = xa.get("sid", "")
        self.attributes = xa
        self.delivery_count: int = int(first.get("rd", 0)) + 1
        self.redelivered = self.delivery_count > 1
        self._consumer = consumer
        self._first: dict[str, Any] | None = first
        self.done = bool(xa.get("fin"))

    @property
    def id(self) -> str:
        return f"{self.partition}:{self.offset}"

    async def chunks(self) -> AsyncIterator[bytes]:
        """The chunks in their sequence; a chunk delivered again is verified and skipped."""
        frame = self._first
        self._first = None
        seen: list[tuple[int, int]] = []  # per chunk handed out: (offset, crc32)
        while frame is not None:
            xa = frame.get("xa") or {}
            seq = int(xa.get("seq", 0))
            if seq == len(seen):
                seen.append((frame["o"], zlib.crc32(frame["b"])))
                yield frame["b"]
                self._consumer._send_ack(frame)
                if xa.get("fin"):
                    self.done = True
                    return
            elif seq < len(seen) and seen[seq] == (frame["o"], zlib.crc32(frame["b"])):
                self._consumer._send_ack(frame)  # the same stored chunk once more: skip it
            else:
                self._consumer._refuse_stream(frame)
                what = "differs from the one handed out" if seq < len(seen) else "arrived out of sequence"
                raise StreamError(
                    f"stream {self.stream_id!r} on {self.partition}: chunk {seq} (offset {frame['o']}) "
                    f"{what} after {len(seen)} chunks; the stream was given back, nothing was spliced"
                )
            try:
                frame = await self._consumer._next_chunk(self.stream_id)
            except StreamError:
                self._consumer._refuse_stream(frame)  # e.g. its producer died before the end
                raise


class Consumer(SessionClient):
    def __init__(self, session: Session, subscribe: dict[str, Any], auto_ack: bool, seen_ids: int) -> None:
        self.session = session
        self.sub = int(subscribe["s"])
        self.auto_ack = auto_ack
        self._subscribe = subscribe
        self._frames: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._stash: deque[dict[str, Any]] = deque()
        self._current: deque[Message] = deque()
        self._current_frame: dict[str, Any] | None = None
        # auto_ack=False: (partition, offset, rd) of messages not acknowledged -> their delivery's
        # start and the partition epoch it came at (the CM sends the ACK where it came from)
        self._unacked: dict[tuple[str, int, int], tuple[int, int | None]] = {}
        self._acks: set[asyncio.Future[Any]] = set()  # acknowledgements not confirmed yet
        # ack() calls of this loop iteration, per delivery (partition, start, rd, epoch): (offset,
        # future); sent together, one ACK per run of consecutive messages
        self._ack_runs: dict[tuple[str, int, int, int | None], list[tuple[int, asyncio.Future[Any]]]] = {}
        self._refused_acks = 0
        self._refused_streams: set[str] = set()
        self.chunk_timeout_s = 300.0  # a stream being read that gets no next chunk: StreamError
        self.acks_confirmed = 0
        self.acks_refused = 0
        self.error: BaseException | None = None
        self._revoked: dict[str, int] = {}  # partition -> epoch its older deliveries are void below
        # What the application got; once a connection was lost its redeliveries are dropped (and acked).
        self._handed = HandedOut(seen_ids)
        self._drop_handed = False
        self.duplicates_dropped = 0
        session.attach(self)

    @classmethod
    async def connect(
        cls,
        bootstrap: str | list[str] | None,
        destination: str,
        *,
        match: str = "exact",
        durable: str | None = None,
        window: int = 20000,
        window_bytes: int = 8 * 1024 * 1024,
        auto_ack: bool = True,
        seen_ids: int = 100_000,
        **session_args: Unpack[SessionArgs],
    ) -> Consumer:
        """Subscribe to ``destination``; ``session_args`` are the session's (``SessionArgs``). On
        a new connection after a CM failover the consumer subscribes again - a durable
        subscription resumes from its cursor - and drops (and acknowledges) what it already
        handed to the application."""
        session = await Session.open(SessionOptions(bootstrap, **session_args))
        subscribe = {
            "t": FrameType.SUBSCRIBE,
            "s": next(_sub_ids),
            "d": destination,
            "m": match,
            "dn": durable,
            "w": window,
            "wb": window_bytes,
        }
        consumer = cls(session, subscribe, auto_ack, seen_ids)
        try:
            await session.conn.request(dict(subscribe))
        except RemoteError as exc:
            session.close()
            raise ClientError(exc.code, exc.msg) from None
        except BaseException:
            session.close()
            raise
        return consumer

    # -- what the session tells ------------------------------------------------------------------
    def lost(self) -> None:
        """The connection ended. What it delivered and the application did not get yet was given
        back with it (redelivered, flagged): handed out now it would be an unflagged repeat.

        From now on what the application already got is dropped when it comes again: the
        redeliveries can reach the next connection before the answer to its SUBSCRIBE (the CM
        registers the subscription with the MMs first), while the application waits in
        ``receive``."""
        self._drop_handed = True
        while not self._frames.empty():
            self._frames.get_nowait()
        self._stash.clear()
        self._drop_current()
        self._frames.put_nowait(None)  # wakes a waiting receive: it waits on, or raises if ended

    async def restore(self, conn: Connection) -> None:
        await conn.request(dict(self._subscribe), timeout=10)

    def restored(self) -> None:
        self._drop_handed = True

    def _describe(self) -> str:
        subscribe = getattr(self, "_subscribe", None) or {}  # (None: ``__init__`` failed)
        return f"Consumer ({subscribe.get('d', '?')})"

    def on_frame(self, frame: dict[str, Any]) -> None:
        t = frame.get("t")
        if t == FrameType.DELIVER:
            if not self._is_revoked(frame):
                self._frames.put_nowait(frame)
        elif t == FrameType.REVOKE and frame.get("lost") is not None:
            self._void(str(frame.get("p", "")), int(frame["lost"]))
        elif t == FrameType.REVOKE:
            self._revoke(str(frame.get("p", "")), int(frame.get("e", 0)))
        elif t == FrameType.ERROR:
            self.error = ClientError(int(frame.get("code", 0)), str(frame.get("msg")))

    def _is_revoked(self, frame: dict[str, Any] | None) -> bool:
        if frame is None or frame.get("e") is None:
            return False
        return int(frame["e"]) < self._revoked.get(str(frame.get("p", "")), 0)

    def _revoke(self, partition: str, epoch: int) -> None:
        """The partition failed over to ``epoch``: its new primary hands every unacknowledged
        batch out again (flagged), so older deliveries not handed to the application yet are
        dropped; handed out later they would be unflagged repeats."""
        if epoch <= self._revoked.get(partition, 0):
            return
        self._revoked[partition] = epoch
        self._drop_queued(self._is_revoked)

    def _void(self, partition: str, epoch: int) -> None:
        """The connection that brought the partition's deliveries up to ``epoch`` ended: its MM
        gave them back and hands them out again, flagged (at the same epoch when the partition did
        not move). What is queued of them is dropped; later deliveries are not affected."""

        def void(frame: dict[str, Any] | None) -> bool:
            return (
                frame is not None
                and frame.get("p") == partition
                and (frame.get("e") is None or int(frame["e"]) <= epoch)
            )

        self._drop_queued(void)

    def _drop_queued(self, void: Callable[[dict[str, Any] | None], bool]) -> None:
        """Drop the deliveries ``void`` names that were not handed to the application yet."""
        queued: list[dict[str, Any] | None] = []
        while not self._frames.empty():
            queued.append(self._frames.get_nowait())
        for frame in queued:
            if not void(frame):
                self._frames.put_nowait(frame)
        self._stash = deque(f for f in self._stash if not void(f))
        if void(self._current_frame):
            self._drop_current()  # the rest of a void delivery: it comes again

    def _drop_current(self) -> None:
        """Forget the messages of the current delivery not handed to the application yet."""
        current = self._current_frame
        if current is None or not self._current:
            return
        rd = int(current.get("rd", 0))
        for m in self._current:
            self._unacked.pop((m.partition, m.offset, rd), None)
        self._current.clear()
        self._current_frame = None

    # -- acks ------------------------------------------------------------------------------------
    def _send_ack(
        self,
        frame: dict[str, Any],
        nack: bool = False,
        records: tuple[int, int] | None = None,
        requeue: bool = True,
        track: bool = True,
    ) -> asyncio.Future[Any] | None:
        """ACK (or NACK) the delivery ``frame`` (p, o, rd, e): ``records`` ``(first, last)`` of it,
        or all it has left; the future is its confirmation (``track``: ``commit`` waits for it)."""
        conn = self.session.conn
        if conn.closed:
            return None  # redelivered after the failover, then dropped as handed out and acked
        ack = {
            "t": FrameType.NACK if nack else FrameType.ACK,
            "s": self.sub,
            "p": frame["p"],
            "o": frame["o"],
            "rd": int(frame.get("rd", 0)),
        }
        if frame.get("e") is not None:
            ack["e"] = int(frame["e"])  # the CM sends it to the MM that delivered at this epoch
        if records is not None:
            ack["a"] = list(records)
        if not requeue:
            ack["rq"] = False
        try:
            fut = _refusal_as_client_error(conn.request_nowait(ack))
        except ConnectionClosed:
            return None
        if track and (not nack or not requeue):
            self._acks.add(fut)
            fut.add_done_callback(self._ack_done)
        else:
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        return fut

    def _ack_done(self, fut: asyncio.Future[Any]) -> None:
        self._acks.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            self._refused_acks += 1
            self.acks_refused += 1
        else:
            self.acks_confirmed += 1

    def ack(self, message: Message) -> asyncio.Future[Any] | None:
        """Acknowledge one message (``auto_ack=False``).

        Returns its confirmation (a future: done once the acknowledgement is committed; failed
        when it was not, then the message is redelivered, or when its primary died before
        answering: then it comes again unless the acknowledgement had reached the backup that took
        over, which keeps it); None when it is not outstanding. The
        acknowledgements of one loop iteration go out together, one ACK per run of consecutive
        messages of a delivery."""
        k = (message.partition, message.offset, message.delivery_count - 1)
        delivery = self._unacked.get(k)
        if delivery is None or self.session.conn.closed:
            return None  # closed: redelivered after the failover, then dropped as handed out and acked
        del self._unacked[k]
        start, epoch = delivery
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._acks.add(fut)
        fut.add_done_callback(self._ack_done)
        if not self._ack_runs:
            asyncio.get_running_loop().call_soon(self._flush_acks)
        self._ack_runs.setdefault((k[0], start, k[2], epoch), []).append((k[1], fut))
        return fut

    def _flush_acks(self) -> None:
        runs, self._ack_runs = self._ack_runs, {}
        for delivery, acked in runs.items():
            acked.sort(key=lambda item: item[0])
            run = [acked[0]]
            for item in acked[1:]:
                if item[0] != run[-1][0] + 1:
                    self._send_run(delivery, run)
                    run = []
                run.append(item)
            self._send_run(delivery, run)

    def _send_run(
        self, delivery: tuple[str, int, int, int | None], run: list[tuple[int, asyncio.Future[Any]]]
    ) -> None:
        """One ACK for consecutive messages of ``delivery`` (partition, start, rd, epoch); its
        answer confirms (or fails) each one's future."""
        futs = [fut for _, fut in run]
        partition, start, rd, epoch = delivery
        sent = self._send_ack(
            {"p": partition, "o": start, "rd": rd, "e": epoch}, records=(run[0][0], run[-1][0]), track=False
        )

        def answered(answer: asyncio.Future[Any] | None) -> None:
            failed = answer is None or answer.cancelled() or answer.exception() is not None
            for fut in futs:
                if fut.done():
                    continue
                if failed:
                    fut.set_exception(
                        (answer.exception() if answer is not None and not answer.cancelled() else None)
                        or ConnectionError("the acknowledgement could not be sent")
                    )
                else:
                    fut.set_result(answer.result())  # type: ignore[union-attr]

        if sent is None:
            answered(None)
        else:
            sent.add_done_callback(answered)

    def nack(self, message: Message, requeue: bool = True) -> asyncio.Future[Any] | None:
        """Give one message back (``auto_ack=False``): redelivered, to any consumer, flagged; with
        ``requeue=False`` rejected for good: a queue moves it to ``queue:_DMQ`` (a topic's durable
        subscription redelivers it). A rejection's future is confirmed like an acknowledgement."""
        k = (message.partition, message.offset, message.delivery_count - 1)
        self._handed.discard(message.partition, message.offset)  # its redelivery is for the application
        delivery = self._unacked.pop(k, None)
        if delivery is None:
            return None
        start, epoch = delivery
        return self._send_ack(
            {"p": k[0], "o": start, "rd": k[2], "e": epoch}, nack=True, records=(k[1], k[1]), requeue=requeue
        )

    def settled(self, message: Message) -> None:
        """``message`` was acknowledged or given back by other means (a transaction's commit or
        rollback, ``client/tx_session.py``): nothing to send for it here."""
        self._unacked.pop((message.partition, message.offset, message.delivery_count - 1), None)

    async def commit(self) -> None:
        """Wait until every acknowledgement sent so far is confirmed (auto_ack: the delivery whose
        messages were all received is acknowledged first). Raises ``ClientError`` when some were
        not (their messages are redelivered, flagged)."""
        if self.auto_ack and not self._current:
            self._finish_current()
        self._flush_acks()
        if self._acks:
            await asyncio.wait(list(self._acks))
        refused, self._refused_acks = self._refused_acks, 0
        if refused:
            raise ClientError(
                ErrorCode.STALE_DELIVERY,
                f"{refused} acknowledgements were not committed; their messages are redelivered",
            )

    def _refuse_stream(self, frame: dict[str, Any]) -> None:
        """Give a stream that cannot be reassembled back (the broker restarts it at chunk 0)."""
        self._refused_streams.add(str((frame.get("xa") or {}).get("sid", "")))
        self._send_ack(frame, nack=True)

    # -- receiving -------------------------------------------------------------------------------
    async def _next_frame(self, timeout: float | None) -> dict[str, Any]:  # noqa: ASYNC109
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stash:
                return self._stash.popleft()
            if self.session.ended:
                raise self._ended_error()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            async with asyncio.timeout(left):
                frame = await self._frames.get()
            if frame is not None:
                return frame
            # None: a connection ended (checked above); a replacement may be on its way

    def _ended_error(self) -> BaseException:
        if self.session.closing:
            return ClientClosedError("the consumer is closed")
        return self.error or self.session.error or ConnectionError("consumer connection closed")

    async def _next_chunk(self, sid: str) -> dict[str, Any]:
        while True:
            try:
                async with asyncio.timeout(self.chunk_timeout_s):
                    frame = await self._frames.get()
            except TimeoutError:
                raise StreamError(
                    f"stream {sid!r}: no chunk for {self.chunk_timeout_s:.0f} s (given to another "
                    "consumer after a failover, or its producer stopped)"
                ) from None
            if frame is None:
                raise self._ended_error()  # the stream's deliveries ended with their connection
            if (frame.get("xa") or {}).get("sid") == sid:
                return frame
            self._stash.append(frame)

    def _finish_current(self) -> None:
        frame = self._current_frame
        if frame is not None and self.auto_ack:
            self._send_ack(frame)
        self._current_frame = None

    def _expand(self, frame: dict[str, Any]) -> None:
        p, base, dest, rd = frame["p"], frame["o"], frame["d"], int(frame.get("rd", 0))
        xa = frame.get("xa") or {}
        records = unpack_records(frame["b"])
        self._current.extend(
            Message(dest, r[0], r[1], r[2], r[3], p, base + i, rd > 0, xa, base, rd + 1)
            for i, r in enumerate(records)
        )
        self._current_frame = frame
        if self._drop_handed:
            fresh = [m for m in self._current if (p, m.offset) not in self._handed]
            self.duplicates_dropped += len(self._current) - len(fresh)
            if not fresh:
                self._current.clear()
                self._send_ack(frame)  # all handed out before the reconnection
                self._current_frame = None
                return
            if len(fresh) < len(self._current):
                if not self.auto_ack:  # the application will not ack these again: done here
                    for m in self._current:
                        if (p, m.offset) in self._handed:
                            self._send_ack(frame, records=(m.offset, m.offset))
                self._current = deque(fresh)
        if not self.auto_ack:
            epoch = frame.get("e")
            delivery = (base, None if epoch is None else int(epoch))
            self._unacked.update(((p, m.offset, rd), delivery) for m in self._current)

    async def receive(self, timeout: float | None = None) -> Message | StreamMessage:  # noqa: ASYNC109
        """The next message (raises TimeoutError after ``timeout`` seconds)."""
        if self.session.closing:
            raise ClientClosedError("the consumer is closed")
        while not self._current:
            self._finish_current()
            frame = await self._next_frame(timeout)
            assert frame is not None
            if frame.get("f", 0) & BatchFlag.CHUNK:
                xa = frame.get("xa") or {}
                sid = str(xa.get("sid", ""))
                if int(xa.get("seq", 0)) == 0:
                    self._refused_streams.discard(sid)
                elif sid in self._refused_streams:
                    self._send_ack(frame, nack=True)  # the rest of a stream given back
                    continue
                self._handed.add(str(frame["p"]), int(frame["o"]))
                return StreamMessage(self, frame)
            self._expand(frame)
        msg = self._current.popleft()
        self._handed.add(msg.partition, msg.offset)
        return msg

    async def receive_batch(self, timeout: float | None = None) -> list[Message | StreamMessage]:  # noqa: ASYNC109
        """All remaining messages of the current (or next) delivered batch."""
        first = await self.receive(timeout)
        if isinstance(first, StreamMessage):
            return [first]
        out: list[Message | StreamMessage] = [first]
        if self._current:
            self._handed.add_batch(self._current)
            out.extend(self._current)
            self._current.clear()
        return out

    def __aiter__(self) -> AsyncIterator[Message | StreamMessage]:
        return self

    async def __anext__(self) -> Message | StreamMessage:
        try:
            return await self.receive()
        except ConnectionError:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """Acknowledge what was received (``auto_ack``), unsubscribe and end the session."""
        conn = self.session.conn
        if not conn.closed and not self.session.closing:
            if not self._current:
                self._finish_current()
            self._flush_acks()  # before the UNSUBSCRIBE gives back what they acknowledge
            try:
                async with asyncio.timeout(5):
                    await conn.request({"t": FrameType.UNSUBSCRIBE, "s": self.sub})
            except Exception:
                pass
        self.session.close()

    def abort(self) -> None:
        """End at once, as a killed process would: no unsubscribe, nothing more acknowledged."""
        self.session.close()


def _refusal_as_client_error(answer: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """The confirmation a user awaits: a broker's refusal raises ``ClientError`` (the client's
    public error, as ``commit`` raises), not the wire layer's ``RemoteError``."""
    confirmed: asyncio.Future[Any] = answer.get_loop().create_future()

    def settle(done: asyncio.Future[Any]) -> None:
        if confirmed.done():
            return
        if done.cancelled():
            confirmed.cancel()
        elif isinstance(exc := done.exception(), RemoteError):
            confirmed.set_exception(ClientError(exc.code, exc.msg))
        elif exc is not None:
            confirmed.set_exception(exc)
        else:
            confirmed.set_result(done.result())

    answer.add_done_callback(settle)
    return confirmed
