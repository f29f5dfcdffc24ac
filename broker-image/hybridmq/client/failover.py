"""CM failover for producers and consumers: reconnect elsewhere, recreate the session, lose nothing.

When the connection to a CM drops (the CM died), :class:`FailoverProducer` and
:class:`FailoverConsumer` reconnect at once through the distribution strategy
(``connect_with_failover``: the next CM, bounded retries and back-off) and recreate their session:

* the producer keeps its partition, producer id, producer epoch and sequence numbers; every batch that
  was in flight (sent, not acknowledged) is resent in sequence order on the new connection. The MM
  stores a resend of an already stored ``(pid, epoch, sequence)`` once and acknowledges it again
  (``dup``), so nothing is lost and nothing is stored twice. ``send`` / ``try_send`` keep buffering
  while the new connection is being opened;
* the consumer subscribes again with the same destination, match mode and durable name. A durable
  subscription resumes from its cursor on the MM (everything not acknowledged is delivered again);
  the consumer drops what it already handed to the application - per partition the highest offset
  handed out (topics: a subscription is fed in offset order), or the last ``seen_ids`` message ids
  (queues) - and acknowledges those drops, so the application sees each message once.

A CM that hangs without closing its sockets (stopped, partitioned) is found by the keepalive: a PING
every ``keepalive_s`` that is not answered within ``keepalive_timeout_s`` closes the connection,
which starts the failover (``keepalive_s=None`` turns it off).

``reconnects`` counts the new sessions and ``node`` names the CM in use. A non-durable topic
subscription cannot resume its position (its cursor died with the session); use a durable one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from hybridmq.api.assignment import PartitionType
from hybridmq.api.frames import BatchFlag, FrameType
from hybridmq.client.connection import ClientError, connect
from hybridmq.client.consumer import Consumer, StreamMessage
from hybridmq.client.directory import make_strategy
from hybridmq.client.distribution import Strategy
from hybridmq.client.message import Message
from hybridmq.client.producer import Producer
from hybridmq.protocol import Connection, RemoteError
from hybridmq.protocol.connection import ConnectionClosed

log = logging.getLogger(__name__)


class _Reconnector:
    """The connect parameters of a client, to open the replacement session."""

    def __init__(
        self,
        bootstrap: str | list[str] | None,
        strategy: Strategy | None,
        user: str | None,
        password: str | None,
        client_id: str | None,
        app: str | None,
        give_up_after_s: float,
        connect_timeout_s: float = 2.0,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.bootstrap = bootstrap
        self.strategy = strategy
        self.user = user
        self.password = password
        self.client_id = client_id
        self.app = app
        self.give_up_after_s = give_up_after_s

    async def connect(self) -> tuple[Connection, dict[str, Any]]:
        return await connect(
            self.bootstrap,
            user=self.user,
            password=self.password,
            client_id=self.client_id,
            app=self.app,
            strategy=self.strategy,
            timeout=self.connect_timeout_s,
        )

    async def reconnect(self, closing: Any, lost: Connection) -> tuple[Connection, dict[str, Any]] | None:
        """Try until connected or ``give_up_after_s``; None when giving up or closing."""
        peer = lost.peer
        if self.strategy is not None and isinstance(peer, tuple) and len(peer) >= 2:
            with contextlib.suppress(Exception):
                await self.strategy.failed(f"{peer[0]}:{peer[1]}")  # don't pick the lost CM first
        deadline = time.monotonic() + self.give_up_after_s
        delay = 0.02
        while not closing():
            try:
                return await self.connect()
            except ClientError:
                raise
            except (OSError, ConnectionError, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    log.warning("giving up reconnecting: %s", exc)
                    return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        return None


async def keepalive(
    current: Callable[[], Connection], closing: Callable[[], bool], interval_s: float, timeout_s: float
) -> None:
    """PING the current connection every ``interval_s``; close it when no PONG in ``timeout_s``."""
    while not closing():
        await asyncio.sleep(interval_s)
        conn = current()
        if conn.closed:
            continue
        try:
            await asyncio.wait_for(conn.request({"t": FrameType.PING}, timeout=None), timeout_s)
        except TimeoutError:
            if conn is current() and not closing():
                log.warning("CM %s did not answer a PING in %.1fs: failing over", conn.name, timeout_s)
                conn.close()
        except Exception:
            continue  # closed meanwhile: the failover is already under way


async def _first_connection(
    bootstrap: str | list[str] | None,
    strategy: Strategy | None,
    distribution: str | None,
    app: str | None,
    user: str | None,
    password: str | None,
    client_id: str | None,
    give_up_after_s: float,
    keepalive_timeout_s: float,
) -> tuple[_Reconnector, Connection, dict[str, Any], asyncio.Task[None]]:
    """The reconnector a failover client keeps, and its first connection (already running)."""
    if strategy is None:
        strategy = make_strategy(bootstrap, distribution, app=app, user=user, password=password)
    rc = _Reconnector(
        bootstrap, strategy, user, password, client_id, app, give_up_after_s, max(2.0, keepalive_timeout_s)
    )
    conn, hello = await rc.connect()
    return rc, conn, hello, asyncio.create_task(conn.run())


class FailoverProducer(Producer):
    _reconnector: _Reconnector
    _closing: bool
    _parked: list[tuple[dict[str, Any], asyncio.Future[int], int]]
    _reconnect_task: asyncio.Task[None] | None
    _keepalive: asyncio.Task[None] | None
    reconnects: int
    resent: int
    node: str

    @classmethod
    async def open(
        cls,
        bootstrap: str | list[str] | None = None,
        *,
        distribution: str | None = None,
        strategy: Strategy | None = None,
        app: str | None = None,
        user: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        give_up_after_s: float = 30.0,
        keepalive_s: float | None = 1.0,
        keepalive_timeout_s: float = 3.0,
        **options: Any,
    ) -> FailoverProducer:
        """Like ``Producer.connect`` (same ``options``), with CM failover."""
        rc, conn, hello, runner = await _first_connection(
            bootstrap,
            strategy,
            distribution,
            app,
            user,
            password,
            client_id,
            give_up_after_s,
            keepalive_timeout_s,
        )
        reply_ptype = str(PartitionType(options.pop("partition_type", PartitionType.ON_DEMAND)))
        named = options.pop("partition", None)
        try:
            reply = await conn.request(
                {
                    "t": FrameType.OPEN_PRODUCER,
                    "ptype": reply_ptype,
                    "key": options.pop("key", None),
                    "partition": named,
                }
            )
        except RemoteError as exc:
            conn.close()
            raise ClientError(exc.code, exc.msg) from None
        options.setdefault("linger_ms", 2.0)
        options.setdefault("batch_bytes", 256 * 1024)
        options.setdefault("max_pending_bytes", 8 * 1024 * 1024)
        producer = cls(
            conn, runner, reply["partition"], reply["producer_id"], int(reply.get("pid", -1)), **options
        )
        # an on-demand producer follows its partition's moves (Producer._move)
        producer._movable = named is None and reply_ptype == str(PartitionType.ON_DEMAND)
        producer._reconnector = rc
        producer._closing = False
        producer._parked = []
        producer._reconnect_task = None
        producer.reconnects = 0
        producer.resent = 0
        producer.node = str(hello.get("node", ""))
        conn.on_close.append(producer._lost)
        producer._keepalive = None
        if keepalive_s:
            producer._keepalive = asyncio.create_task(
                keepalive(lambda: producer.conn, lambda: producer._closing, keepalive_s, keepalive_timeout_s)
            )
        return producer

    def _buffers_while_disconnected(self) -> bool:
        return not self._closing and self._reconnect_task is not None

    def _lost(self) -> None:
        if self._closing or self._reconnect_task is not None:
            return
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            result = await self._reconnector.reconnect(lambda: self._closing, self.conn)
        except ClientError as exc:
            result, self.error = None, exc
        if result is None:
            self._reconnect_task = None
            self._fail_parked()
            return
        conn, hello = result
        self.conn = conn
        conn.handler = self._on_frame
        self._runner = asyncio.create_task(conn.run())
        self.reconnects += 1
        self.node = str(hello.get("node", ""))
        self._reconnect_task = None
        conn.on_close.append(self._lost)
        parked, self._parked = self._parked, []
        self.resent += len(parked)
        deadline = asyncio.get_running_loop().time() + self.delivery_timeout
        for frame, result_fut, size in sorted(parked, key=lambda p: (p[0]["pep"], p[0]["seq"])):
            self._attempt(frame, result_fut, size, deadline, 0.05)

    def _fail_parked(self) -> None:
        parked, self._parked = self._parked, []
        for frame, result, size in parked:
            super()._finish(frame, result, size, self.error or ConnectionError("no CM reachable"))

    def _finish(
        self,
        frame: dict[str, Any],
        result: asyncio.Future[int],
        size: int,
        exc: BaseException | None,
        reply: asyncio.Future[Any] | None = None,
    ) -> None:
        """A batch failed because the connection went away: park it for the replacement session
        (same pid, producer epoch and sequence) instead of giving up on it."""
        if (
            exc is not None
            and not self._closing
            and not result.done()
            and (isinstance(exc, ConnectionClosed) or self.conn.closed)
        ):
            self._parked.append((frame, result, size))
            self._lost()
            return
        super()._finish(frame, result, size, exc, reply)

    async def flush(self) -> None:
        for k in list(self._open):
            self._dispatch(k)
        if not self.conn.closed:
            await self.conn.drain()
        pending = list(self._outstanding)
        if pending:
            await asyncio.gather(*pending)

    async def close(self) -> None:
        try:
            await self.flush()
        finally:
            self._closing = True
            for task in (self._reconnect_task, self._keepalive):
                if task is not None:
                    task.cancel()
            self.conn.close()
            self._runner.cancel()


class SeenIds:
    """The last ``capacity`` message ids (queues: redeliveries may come in any order)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[tuple[str, int], None] = OrderedDict()

    def __contains__(self, item: tuple[str, int]) -> bool:
        return item in self._ids

    def add(self, item: tuple[str, int]) -> None:
        self._ids[item] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)


class FailoverConsumer(Consumer):
    _reconnector: _Reconnector
    _closing: bool
    _subscribe_frame: dict[str, Any]
    _reconnect_task: asyncio.Task[None] | None
    _keepalive: asyncio.Task[None] | None
    _high: dict[str, int]
    _seen: SeenIds
    _by_offset: bool
    reconnects: int
    node: str
    duplicates_dropped: int

    @classmethod
    async def open(
        cls,
        bootstrap: str | list[str] | None,
        destination: str,
        *,
        match: str = "exact",
        durable: str | None = None,
        window: int = 20000,
        window_bytes: int = 8 * 1024 * 1024,
        auto_ack: bool = True,
        distribution: str | None = None,
        strategy: Strategy | None = None,
        app: str | None = None,
        user: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        give_up_after_s: float = 30.0,
        seen_ids: int = 100_000,
        keepalive_s: float | None = 1.0,
        keepalive_timeout_s: float = 3.0,
    ) -> FailoverConsumer:
        """Like ``Consumer.connect``, with CM failover and redelivery de-duplication."""
        rc, conn, hello, runner = await _first_connection(
            bootstrap,
            strategy,
            distribution,
            app,
            user,
            password,
            client_id,
            give_up_after_s,
            keepalive_timeout_s,
        )
        consumer = cls(conn, runner, 0, auto_ack)
        consumer._reconnector = rc
        consumer._closing = False
        consumer._reconnect_task = None
        consumer._high = {}
        consumer._seen = SeenIds(seen_ids)
        consumer._by_offset = not destination.startswith("queue:")
        consumer.reconnects = 0
        consumer.duplicates_dropped = 0
        consumer.node = str(hello.get("node", ""))
        from hybridmq.client.consumer import _sub_ids

        consumer.sub = next(_sub_ids)
        consumer._subscribe_frame = {
            "t": FrameType.SUBSCRIBE,
            "s": consumer.sub,
            "d": destination,
            "m": match,
            "dn": durable,
            "w": window,
            "wb": window_bytes,
        }
        try:
            await conn.request(dict(consumer._subscribe_frame))
        except RemoteError as exc:
            conn.close()
            raise ClientError(exc.code, exc.msg) from None
        conn.on_close.append(consumer._lost)
        consumer._keepalive = None
        if keepalive_s:
            consumer._keepalive = asyncio.create_task(
                keepalive(lambda: consumer.conn, lambda: consumer._closing, keepalive_s, keepalive_timeout_s)
            )
        return consumer

    def _lost(self) -> None:
        if self._closing or self._reconnect_task is not None:
            return
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            while not self._closing:
                try:
                    result = await self._reconnector.reconnect(lambda: self._closing, self.conn)
                except ClientError as exc:
                    self.error, result = exc, None
                if result is None:
                    self._frames.put_nowait(None)
                    return
                conn, hello = result
                runner = asyncio.create_task(conn.run(self._on_frame))
                try:
                    await conn.request(dict(self._subscribe_frame), timeout=10)
                except (RemoteError, ConnectionError, TimeoutError) as exc:
                    log.warning("re-subscribing on %s failed: %s", hello.get("node"), exc)
                    conn.close()
                    runner.cancel()
                    continue
                self.conn, self._runner = conn, runner
                self.reconnects += 1
                self.node = str(hello.get("node", ""))
                conn.on_close.append(lambda: self._frames.put_nowait(None))
                conn.on_close.append(self._lost)
                self._frames.put_nowait({"t": "_reconnected"})
                return
        finally:
            self._reconnect_task = None

    @property
    def reconnecting(self) -> bool:
        return self._reconnect_task is not None

    async def _next_frame(self, timeout: float | None) -> dict[str, Any] | None:  # noqa: ASYNC109
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stash:
                return self._stash.popleft()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            frame = await asyncio.wait_for(self._frames.get(), left)
            if frame is None:
                if self._closing or (self._reconnect_task is None and self.conn.closed):
                    raise self.error or ConnectionError("consumer connection closed")
                continue  # the old connection's end: the replacement is on its way
            if frame.get("t") == "_reconnected":
                continue
            return frame

    def _expand(self, frame: dict[str, Any]) -> None:
        super()._expand(frame)
        if frame.get("f", 0) & BatchFlag.CHUNK:
            return
        p = frame["p"]
        fresh = [m for m in self._current if not self._is_duplicate(p, m.offset)]
        dropped = len(self._current) - len(fresh)
        if not dropped:
            return
        self.duplicates_dropped += dropped
        self._current.clear()
        self._current.extend(fresh)
        if not self.auto_ack:
            k = (p, frame["o"], int(frame.get("rd", 0)))
            if fresh:
                self._unacked[k] = len(fresh)
            else:
                self._unacked.pop(k, None)
                self._send_ack(frame)

    def _is_duplicate(self, partition: str, offset: int) -> bool:
        if self._by_offset:
            return offset <= self._high.get(partition, -1)
        return (partition, offset) in self._seen

    async def receive(self, timeout: float | None = None) -> Message | StreamMessage:  # noqa: ASYNC109
        msg = await super().receive(timeout)
        if self._by_offset:
            if msg.offset > self._high.get(msg.partition, -1):
                self._high[msg.partition] = msg.offset
        else:
            self._seen.add((msg.partition, msg.offset))
        return msg

    async def receive_batch(self, timeout: float | None = None) -> list[Message | StreamMessage]:  # noqa: ASYNC109
        first = await self.receive(timeout)
        if isinstance(first, StreamMessage):
            return [first]
        out: list[Message | StreamMessage] = [first]
        while self._current:
            out.append(await self.receive(0))
        return out

    def _send_ack(self, frame: dict[str, Any], nack: bool = False) -> asyncio.Future[Any] | None:
        try:
            return super()._send_ack(frame, nack)
        except ConnectionClosed:
            return None  # redelivered after the failover, then dropped as a duplicate and acknowledged

    async def close(self) -> None:
        self._closing = True
        for task in (self._reconnect_task, self._keepalive):
            if task is not None:
                task.cancel()
        await super().close()
