"""A JMS-style session: with ``transacted=True`` everything produced and consumed through it since
the last commit takes effect together, or not at all.

    session = await Session.connect("127.0.0.1:7000", transacted=True)
    orders = await session.consumer("queue:orders")
    msg = await session.receive(orders)
    await session.send("topic:audit", msg.value)
    await session.send("queue:billing", msg.value, partition="local-fixed-2")
    await session.commit()        # or: await session.rollback()

The session keeps the transaction's sends (each to a partition: ``partition=``, else the fixed
partition its ``key`` - default the destination - maps to) and the messages it received, and hands
the whole transaction to its CM at ``commit()`` (TX_COMMIT; the CM runs the one- or two-phase
commit, ``docs/transactions.md``). Received messages stay locked to their consumer until then:
``rollback()`` gives them back (redelivered, flagged, to any consumer) and drops the sends.

* ``commit()`` returns once the transaction is committed (on the primary and a backup of every
  partition involved). ``TransactionRolledBack``: nothing of it took effect; the session must be
  ``rollback()``-ed before it is used again (``transact()`` does that and runs the work again).
* A commit whose CM was lost is resolved after reconnecting (TX_RESOLVE): committed, or rolled
  back and raised as such.
* Non-transacted, ``send`` takes effect at once (a transaction of one) and ``receive`` acknowledges.

A transaction's consumers connect to the session's CM with a window of one message (the CM
names the message's delivery to its MM when it commits).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Unpack

from hybridmq.api.frames import ErrorCode, FrameType, canonical
from hybridmq.client.connection import ClientError
from hybridmq.client.consumer import Consumer
from hybridmq.client.message import Message, now_ms, pack_records
from hybridmq.client.session import ClientClosedError, SessionArgs, SessionOptions, unclosed
from hybridmq.client.session import Session as Connection_
from hybridmq.protocol import Connection, RemoteError
from hybridmq.protocol.connection import ConnectionClosed

T = TypeVar("T")
MAX_RECORDS = 10_000  # what the CM takes in one transaction


class TransactionRolledBack(ClientError):
    """Nothing of the transaction took effect: ``rollback()``, then do the work again."""

    def __init__(self, msg: str) -> None:
        super().__init__(ErrorCode.TX_ROLLED_BACK, msg)


class Session:
    def __init__(self, conn: Connection_, transacted: bool, max_records: int) -> None:
        self._conn = conn
        self.transacted = transacted
        self.max_records = max_records
        self._sends: list[tuple[str, str, int, list[Any]]] = []  # partition, dest, expiry, record
        self._received: list[tuple[Consumer, Message]] = []
        self._partitions: dict[str, str] = {}  # key -> fixed partition
        self._consumers: list[Consumer] = []
        self._failed: str | None = None
        self._committing = False
        self.committed = 0
        self.rolled_back = 0
        conn.attach(self)

    @classmethod
    async def connect(
        cls,
        bootstrap: str | list[str] | None,
        *,
        transacted: bool = False,
        max_records: int = MAX_RECORDS,
        **session_args: Unpack[SessionArgs],
    ) -> Session:
        if not 1 <= max_records <= MAX_RECORDS:
            raise ValueError(f"max_records must be 1..{MAX_RECORDS}, not {max_records}")
        conn = await Connection_.open(SessionOptions(bootstrap, **session_args))
        return cls(conn, transacted, max_records)

    # -- the connection's owner (client/session.py) -------------------------------------------------
    def on_frame(self, frame: dict[str, Any]) -> None:
        pass

    def lost(self) -> None:
        pass

    async def restore(self, conn: Connection) -> None:
        pass

    def restored(self) -> None:
        pass

    # -- consuming ---------------------------------------------------------------------------------
    async def consumer(self, destination: str, durable: str | None = None) -> Consumer:
        """A consumer of ``destination`` (a queue, or a topic: a subscription of its own, or the
        ``durable`` one) on this session's CM, one message at a time."""
        if self._conn.closing:
            raise ClientClosedError("the session is closed")
        options = self._conn.options
        peer = self._conn.conn.peer
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else options.bootstrap
        consumer = await Consumer.connect(
            address,
            destination,
            durable=durable,
            window=1,
            auto_ack=False,
            reconnect=False,
            distribution="bootstrap",
            user=options.user,
            password=options.password,
            ssl=options.ssl,  # type: ignore[arg-type]  # (a Transport: taken as it is)
            server_hostname=options.server_hostname,
        )
        self._consumers.append(consumer)
        return consumer

    async def receive(self, consumer: Consumer, timeout: float | None = None) -> Message:  # noqa: ASYNC109
        """The next message of ``consumer``: part of the transaction (non-transacted:
        acknowledged before it is returned)."""
        self._check_usable()
        if self.transacted and self._size() >= self.max_records:
            raise self._limit()
        msg = await consumer.receive(timeout)
        if not isinstance(msg, Message):
            raise ClientError(ErrorCode.INVALID_REQUEST, "streams cannot be consumed in a session")
        if self.transacted:
            self._received.append((consumer, msg))
        else:
            confirmed = consumer.ack(msg)
            if confirmed is not None:
                await confirmed
        return msg

    # -- producing ---------------------------------------------------------------------------------
    async def send(
        self,
        destination: str,
        value: bytes,
        *,
        partition: str | None = None,
        key: str | None = None,
        headers: dict[str, Any] | None = None,
        ttl_ms: int | None = None,
    ) -> None:
        """Part of the transaction (non-transacted: committed before it returns)."""
        self._check_usable()
        if not isinstance(value, bytes):
            raise TypeError(f"value must be bytes, not {type(value).__name__}")
        if self.transacted and self._size() >= self.max_records:
            raise self._limit()
        dest = canonical(destination)
        if partition is None:
            partition = await self._partition_for(key if key is not None else dest)
        expiry = now_ms() + ttl_ms if ttl_ms else 0
        record = [value, key.encode() if key is not None else None, headers, now_ms()]
        self._sends.append((partition, dest, expiry, record))
        if not self.transacted:
            await self._commit()

    async def _partition_for(self, key: str) -> str:
        name = self._partitions.get(key)
        if name is None:
            try:
                reply = await self._request({"t": FrameType.OPEN_PRODUCER, "ptype": "fixed", "key": key})
            except RemoteError as exc:
                raise ClientError(exc.code, exc.msg) from None
            name = self._partitions[key] = str(reply["partition"])
        return name

    # -- the transaction ---------------------------------------------------------------------------
    async def commit(self) -> None:
        if not self.transacted:
            raise ClientError(ErrorCode.INVALID_REQUEST, "commit() on a non-transacted session")
        self._check_usable()
        await self._commit()

    async def rollback(self) -> None:
        """Drop the sends; give the received messages back (redelivered to any consumer)."""
        if not self.transacted:
            raise ClientError(ErrorCode.INVALID_REQUEST, "rollback() on a non-transacted session")
        received, self._received, self._sends, self._failed = self._received, [], [], None
        if received:
            self.rolled_back += 1
        for consumer, msg in received:
            consumer.nack(msg)  # (a consumer that is gone gave them back already)

    async def transact(self, work: Callable[[Session], Awaitable[T]], attempts: int = 5) -> T:
        """Run ``work(self)`` and commit; a rolled back transaction is rolled back here and run
        again, up to ``attempts`` times."""
        for attempt in range(1, attempts + 1):
            try:
                result = await work(self)
                await self.commit()
                return result
            except TransactionRolledBack:
                await self.rollback()
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _size(self) -> int:
        return len(self._sends) + len(self._received)

    def _limit(self) -> ClientError:
        return ClientError(
            ErrorCode.INVALID_REQUEST,
            f"a transaction holds at most {self.max_records} messages (sent and received): commit first",
        )

    def _check_usable(self) -> None:
        if self._conn.closing:
            raise ClientClosedError("the session is closed")
        if self._failed is not None:
            raise ClientError(
                ErrorCode.TX_ROLLED_BACK,
                f"the last commit failed ({self._failed}): call rollback() before using the session again",
            )
        if self._committing:
            raise ClientError(ErrorCode.INVALID_REQUEST, "a commit of this session is in progress")

    def _frame(self, txid: str) -> dict[str, Any]:
        batches: list[list[Any]] = []
        for partition, dest, expiry, record in self._sends:  # consecutive sends alike: one batch
            last = batches[-1] if batches else None
            if last is not None and (last[0], last[1], last[5]) == (partition, dest, expiry):
                last[3].append(record)
            else:
                batches.append([partition, dest, 0, [record], 0, expiry])
        for b in batches:
            b[2], b[3] = len(b[3]), pack_records(b[3])
        holds = [
            [f"{c.session.id}/{c.sub}", m.partition, m.batch_base, m.offset, m.delivery_count - 1]
            for c, m in self._received
        ]
        return {"t": FrameType.TX_COMMIT, "x": txid, "b": batches, "k": holds}

    async def _commit(self) -> None:
        if not self._sends and not self._received:
            return
        txid = uuid.uuid4().hex
        frame = self._frame(txid)
        participants = sorted({b[0] for b in frame["b"]} | {k[1] for k in frame["k"]})
        self._committing = True
        try:
            committed = await self._outcome(txid, frame, participants)
        except ClientError:
            if not self.transacted:  # nothing kept: the send failed, the session goes on
                self._sends, self._failed = [], None
            raise
        finally:
            self._committing = False
        if committed:
            for consumer, msg in self._received:
                consumer.settled(msg)  # acknowledged by the commit
            self._sends, self._received = [], []
            self.committed += 1
            return
        raise self._rolled_back(f"transaction {txid} was rolled back: nothing of it took effect")

    def _rolled_back(self, why: str) -> ClientError:
        if not self.transacted:
            self._sends = []
            return ClientError(ErrorCode.TX_ROLLED_BACK, why)
        self._failed = why
        return TransactionRolledBack(why)

    async def _outcome(self, txid: str, frame: dict[str, Any], participants: list[str]) -> bool:
        """Commit; after a lost CM (or an outcome not known yet) ask until it is known."""
        try:
            await self._request(frame)
            return True
        except RemoteError as exc:
            if exc.code == ErrorCode.TX_ROLLED_BACK:
                raise self._rolled_back(exc.msg) from None
            if exc.code != ErrorCode.TX_IN_DOUBT:  # refused before anything took effect
                if not self.transacted:
                    raise ClientError(exc.code, exc.msg) from None
                raise self._rolled_back(f"commit refused: {exc}") from None
        except (ConnectionError, ConnectionClosed, TimeoutError):
            pass
        deadline = time.monotonic() + self._conn.options.give_up_after_s
        while True:
            try:
                reply = await self._request({"t": FrameType.TX_RESOLVE, "x": txid, "ps": participants})
                return bool(reply["committed"])
            except (RemoteError, ConnectionError, ConnectionClosed, TimeoutError) as exc:
                if self._conn.closing or time.monotonic() > deadline:
                    self._failed = f"outcome of {txid} unknown: {exc}"
                    raise ClientError(ErrorCode.TX_IN_DOUBT, self._failed) from None
            await asyncio.sleep(0.2)

    async def _request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """A request on the current connection, waiting for a reconnection first if needed."""
        if self._conn.closing:
            raise ClientClosedError("the session is closed")
        for _ in range(600):
            if not self._conn.conn.closed or self._conn.ended:
                break
            await asyncio.sleep(0.05)
        if self._conn.conn.closed:
            raise ConnectionError("the session's connection is closed")
        reply: dict[str, Any] = await self._conn.conn.request(dict(frame), timeout=60)
        return reply

    async def close(self) -> None:
        """Close the session's consumers (what they received in an open transaction is given
        back) and its connection."""
        try:
            for consumer in self._consumers:
                await consumer.close()
        finally:
            self._conn.close()

    @property
    def closed(self) -> bool:
        """``close()`` was called."""
        return self._conn.closing

    async def __aenter__(self) -> Session:
        """``async with await Session.connect(...) as s``: connected already; closed at the end
        (an open transaction is not committed: what it received is given back)."""
        if self.closed:
            raise ClientClosedError("the session is closed")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __del__(self, _unclosed: Callable[[object, str], None] = unclosed) -> None:
        conn: Connection_ | None = getattr(self, "_conn", None)  # (None: ``__init__`` failed)
        if conn is not None and not conn.closing:
            _unclosed(self, "Session (transacted)" if getattr(self, "transacted", False) else "Session")
