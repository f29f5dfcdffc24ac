"""The CM's connections to the Message Managers, one per MM, reconnecting for ever.

When a link (re)connects, ``on_connect`` is called so the CM can replay its active subscriptions:
an MM that restarted (kill -9 test) gets its consumers back without the clients noticing. When a
connection ends, ``on_lost`` is called once every frame it brought was handled: the MM gave back
every delivery it made on it (they come again, flagged), so the CM voids them at the clients.

Requests about one partition (produces, acknowledgements, transaction steps) are tracked by
partition: when the partition's primary moves away from this MM, ``fail_partitions`` fails the ones
still waiting, and the clients resend to the new primary. An MM that is frozen (SIGSTOP, a long
pause, a half-open network) would otherwise hold them for ever. The connection itself stays: the
deliveries the MM made of its other partitions remain good.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

from hybridmq.api.frames import PROTOCOL_VERSION, FrameType
from hybridmq.api.requests import Request
from hybridmq.protocol import Connection, open_connection
from hybridmq.protocol.connection import ConnectionClosed
from hybridmq.protocol.tls import BrokerTls

log = logging.getLogger(__name__)


class MMLink:
    def __init__(
        self,
        name: str,
        address: str,
        node: str,
        token: str | None,
        max_frame: int,
        on_frame: Callable[[MMLink, dict[str, Any]], None],
        on_connect: Callable[[MMLink], Awaitable[None]],
        tls: BrokerTls | None = None,
        on_lost: Callable[[MMLink], None] = lambda link: None,
    ) -> None:
        self.on_lost = on_lost
        self.tls = tls  # mutual TLS: the CM presents its certificate, checks the MM's
        self.name = name
        self.address = address
        self.node = node
        self.token = token
        self.max_frame = max_frame
        self.on_frame = on_frame
        self.on_connect = on_connect
        self.conn: Connection | None = None
        self.connected = asyncio.Event()
        self._waiting: dict[str, set[asyncio.Future[Any]]] = {}  # partition -> its pending requests
        self._task: asyncio.Task[None] | None = None

    def request(self, partition: str, frame: dict[str, Any] | Request) -> asyncio.Future[Any]:
        """Send a request about ``partition``; its answer's future (ConnectionClosed when the link
        is down, or when ``fail_partitions`` names the partition before the answer came)."""
        if self.conn is None:
            raise ConnectionClosed(f"cm->{self.name}")
        fut = self.conn.request_nowait(frame)
        waiting = self._waiting.setdefault(partition, set())
        waiting.add(fut)
        fut.add_done_callback(partial(self._answered, partition))
        return fut

    def _answered(self, partition: str, fut: asyncio.Future[Any]) -> None:
        waiting = self._waiting.get(partition)
        if waiting is not None:
            waiting.discard(fut)
            if not waiting:
                del self._waiting[partition]

    def fail_partitions(self, partitions: Iterable[str], why: str) -> int:
        """Fail the requests still waiting about ``partitions`` (their primary moved away from this
        MM); how many there were."""
        failed = 0
        for partition in partitions:
            for fut in list(self._waiting.pop(partition, ())):
                if not fut.done():
                    fut.set_exception(ConnectionClosed(why))
                    failed += 1
        return failed

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self.conn:
            self.conn.close()

    async def _run(self) -> None:
        host, _, port = self.address.rpartition(":")
        delay = 0.05
        while True:
            try:
                conn, _ = await open_connection(
                    host,
                    int(port),
                    {
                        "t": FrameType.HELLO,
                        "v": PROTOCOL_VERSION,
                        "id": self.node,
                        "role": "cm",
                        "user": "cm",
                        "password": self.token,
                    },
                    self.max_frame,
                    name=f"cm->{self.name}",
                    ssl=self.tls.client() if self.tls is not None else None,
                )
            except (OSError, asyncio.IncompleteReadError, Exception) as exc:
                log.debug("link to %s (%s) failed: %s", self.name, self.address, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
            delay = 0.05
            self.conn = conn
            log.info("connected to mm %s at %s", self.name, self.address)
            runner = asyncio.create_task(conn.run(lambda f: self.on_frame(self, f)))
            try:
                await self.on_connect(self)
            except Exception:
                log.exception("replaying subscriptions to %s", self.name)
            self.connected.set()
            await runner
            self.connected.clear()
            self.conn = None
            log.warning("lost mm %s", self.name)
            try:
                self.on_lost(self)
            except Exception:
                log.exception("voiding the deliveries of %s", self.name)
