"""One client session: the connection to a CM, its keepalive, and reconnection when it is lost.

A ``Session`` (as nats.py's ``Client``) owns everything about being connected: the CM is chosen by
the distribution (``client/directory.py``: bootstrap order, round-robin over the broker table, or
the directory's next CM), a PING every ``keepalive_s`` that gets no answer within
``keepalive_timeout_s`` closes a connection to a hung CM, and a lost connection is replaced at once
through the same distribution (the lost CM is tried last), retrying with back-off for
``give_up_after_s``. ``Producer`` and ``Consumer`` are built on it and only say what their state on
a new connection is (``Owner.restore``: a consumer subscribes again) and what to do meanwhile.

``reconnect=False`` makes a session that ends with its first connection (tools that must notice a
lost CM themselves).

A session whose reader task is cancelled does not reconnect either: that is the event loop shutting
down (``asyncio.run`` cancels the tasks left when the program's coroutine returns, then closes the
loop), not a lost CM. A reconnection started then would outlive the loop ("Task was destroyed but it
is pending!"). ``close()`` is still the way to end a session; an owner that was never closed leaves
one ``ResourceWarning`` (``unclosed``) when it is collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypedDict

from hybridmq.api.frames import DEFAULT_MAX_FRAME, ErrorCode, FrameType
from hybridmq.client.connection import ClientError, connect
from hybridmq.client.directory import make_strategy
from hybridmq.client.distribution import Strategy
from hybridmq.client.transport import Transport
from hybridmq.protocol import Connection
from hybridmq.protocol.tls import SslOption

log = logging.getLogger(__name__)


class ClientClosedError(ConnectionError):
    """The producer, consumer, fetcher or session was closed (``close()``, ``abort()`` or the end
    of its ``async with`` block): it cannot be used any more."""


def unclosed(
    obj: object, what: str, block: str = "async with", warn: Callable[..., None] = warnings.warn
) -> None:
    """The one line a client object that was never closed leaves when it is collected (a
    ``ResourceWarning``, shown with ``-W always::ResourceWarning`` or ``-X dev``, as aiohttp's
    "Unclosed client session")."""
    warn(f"Unclosed {what}: close() it or use '{block}'", ResourceWarning, source=obj)


class Owner(Protocol):
    """What a session tells the producer or consumer built on it."""

    def on_frame(self, frame: dict[str, Any]) -> None:
        """A frame that answers no request (deliveries, revocations, fatal errors)."""

    def lost(self) -> None:
        """The connection ended; a replacement is being opened unless ``Session.ended``."""

    async def restore(self, conn: Connection) -> None:
        """Recreate the owner's state on a new connection (raise to try another CM)."""

    def restored(self) -> None:
        """The new connection is in use."""


class SessionArgs(TypedDict, total=False):
    """The session's keyword arguments of ``Producer.connect`` / ``Consumer.connect``."""

    user: str | None  # else env HYBRIDMQ_USER (and HYBRIDMQ_PASSWORD)
    password: str | None
    client_id: str | None
    app: str | None  # the application the directory counts this client for
    distribution: str | None  # bootstrap | round-robin | centralized (client/directory.py)
    strategy: Strategy | None  # a distribution strategy of one's own
    reconnect: bool  # CM failover (default True)
    give_up_after_s: float  # how long a lost session tries to reconnect
    keepalive_s: float | None  # PING interval (None: no keepalive)
    keepalive_timeout_s: float  # no PONG within it: the CM is lost
    ssl: SslOption  # TLS to the CMs: a context, a CA file or True (else env HYBRIDMQ_TLS_CA)
    server_hostname: str | None  # the name the CMs' certificate carries (else the address's host)


@dataclass
class SessionOptions:
    bootstrap: str | list[str] | None = None
    distribution: str | None = None
    strategy: Strategy | None = None
    app: str | None = None
    user: str | None = None
    password: str | None = None
    client_id: str | None = None
    reconnect: bool = True
    give_up_after_s: float = 30.0
    keepalive_s: float | None = 1.0
    keepalive_timeout_s: float = 3.0
    ssl: SslOption | Transport = None
    server_hostname: str | None = None


class Session:
    def __init__(self, options: SessionOptions, conn: Connection, hello: dict[str, Any]) -> None:
        self.options = options
        self.conn = conn
        self.node = str(hello.get("node", ""))
        self.id = str(hello.get("session", ""))  # the CM's session id (subscription keys start with it)
        self.max_frame = _max_frame(hello)
        self.reconnects = 0
        self.error: BaseException | None = None
        self.closing = False
        self._owner: Owner | None = None
        self._runner: asyncio.Task[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._use(conn)

    @classmethod
    async def open(cls, options: SessionOptions) -> Session:
        """Connect to a CM; it reconnects once ``attach`` named its owner."""
        options.ssl = Transport.of(options.ssl, options.server_hostname)  # files read once
        if options.strategy is None:
            options.strategy = make_strategy(
                options.bootstrap,
                options.distribution,
                app=options.app,
                user=options.user,
                password=options.password,
                ssl=options.ssl,
            )
        conn, hello = await cls._connect(options)
        return cls(options, conn, hello)

    @staticmethod
    async def _connect(options: SessionOptions) -> tuple[Connection, dict[str, Any]]:
        return await connect(
            options.bootstrap,
            user=options.user,
            password=options.password,
            client_id=options.client_id,
            app=options.app,
            strategy=options.strategy,
            timeout=max(2.0, options.keepalive_timeout_s),
            ssl=options.ssl,
        )

    def attach(self, owner: Owner) -> None:
        """Hand frames and connection changes to ``owner``; start the keepalive."""
        self._owner = owner
        if self.options.keepalive_s:
            self._keepalive = asyncio.create_task(self._ping(self.options.keepalive_s))

    def _use(self, conn: Connection) -> None:
        self.conn = conn
        conn.on_close.append(lambda: self._lost(conn))
        self._runner = asyncio.create_task(conn.run(self._on_frame))

    def _on_frame(self, frame: dict[str, Any]) -> None:
        if self._owner is not None:
            self._owner.on_frame(frame)

    @property
    def reconnecting(self) -> bool:
        return self._reconnect_task is not None

    @property
    def ended(self) -> bool:
        """No connection now and none coming: closed, aborted, or reconnecting gave up."""
        return self.conn.closed and self._reconnect_task is None

    def _lost(self, conn: Connection) -> None:
        if conn is not self.conn or self._owner is None:
            return
        if self._reader_cancelled():
            # Not a lost CM: the event loop is shutting down (``asyncio.run`` cancels the tasks
            # left when its coroutine returns, and closes the loop once they are done). A
            # reconnection started now would not be among them and would outlive the loop as
            # "Task was destroyed but it is pending!". The session ends here, not closed by its owner.
            if self._keepalive is not None:
                with contextlib.suppress(RuntimeError):  # (the loop is closed already)
                    self._keepalive.cancel()
        elif not self.closing and self.options.reconnect and self._reconnect_task is None:
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect(conn))
        self._owner.lost()

    def _reader_cancelled(self) -> bool:
        """The connection was closed by the cancellation of its reader task (or with no loop
        running): there is nothing to reconnect on."""
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return True  # no running event loop
        return task is not None and task is self._runner and task.cancelling() > 0

    async def _reconnect(self, lost: Connection) -> None:
        assert self._owner is not None
        restored = False
        try:
            restored = await self._reconnect_until_given_up(lost)
        except asyncio.CancelledError:
            if self._reconnect_task is asyncio.current_task():
                self._reconnect_task = None  # (the event loop is shutting down)
            raise
        except Exception:
            log.exception("reconnecting failed")
        if restored:
            return  # (``_restore`` handed over; a loss since then started its own reconnection)
        if self._reconnect_task is asyncio.current_task():
            self._reconnect_task = None
        self._owner.lost()  # ended: the owner fails what waits for a connection

    async def _reconnect_until_given_up(self, lost: Connection) -> bool:
        peer = lost.peer
        if self.options.strategy is not None and isinstance(peer, tuple) and len(peer) >= 2:
            with contextlib.suppress(Exception):
                await self.options.strategy.failed(f"{peer[0]}:{peer[1]}")  # try it last
        deadline = time.monotonic() + self.options.give_up_after_s
        delay = 0.02
        while not self.closing:
            try:
                conn, hello = await self._connect(self.options)
            except ClientError as exc:
                if exc.code != ErrorCode.AUTH_BUSY:
                    self.error = exc  # refused for good (credentials): no point retrying
                    return False
                why: BaseException = exc
            except Exception as exc:  # unreachable, or gone during the handshake: try again
                why = exc
            else:
                if await self._restore(conn, hello):
                    return True
                why = ConnectionError(f"could not restore the session on {hello.get('node')}")
            if time.monotonic() > deadline:
                log.warning("giving up reconnecting: %s", why)
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        return False

    async def _restore(self, conn: Connection, hello: dict[str, Any]) -> bool:
        assert self._owner is not None
        runner = asyncio.create_task(conn.run(self._on_frame))
        try:
            await self._owner.restore(conn)
        except Exception as exc:  # refused, or the connection went away meanwhile
            log.warning("restoring the session on %s failed: %s", hello.get("node"), exc)
            conn.close()
            runner.cancel()
            return False
        except BaseException:  # cancelled (closed, or the event loop is shutting down)
            conn.close()
            runner.cancel()
            raise
        if self.closing:
            conn.close()
            runner.cancel()
            return False
        self.conn, self._runner = conn, runner
        conn.on_close.append(lambda: self._lost(conn))
        self.reconnects += 1
        self.node = str(hello.get("node", ""))
        self.id = str(hello.get("session", ""))
        self.max_frame = _max_frame(hello)
        self._reconnect_task = None
        self._owner.restored()
        if conn.closed:  # lost again while restoring
            self._lost(conn)
        return True

    async def _ping(self, interval_s: float) -> None:
        """PING the current connection every ``interval_s``; close it when no PONG in time."""
        timeout_s = self.options.keepalive_timeout_s
        while not self.closing:
            await asyncio.sleep(interval_s)
            conn = self.conn
            if conn.closed:
                continue
            try:
                async with asyncio.timeout(timeout_s):
                    await conn.request({"t": FrameType.PING}, timeout=None)
            except TimeoutError:
                if conn is self.conn and not self.closing:
                    log.warning("CM %s did not answer a PING in %.1fs: failing over", conn.name, timeout_s)
                    conn.close()
            except Exception:
                continue  # closed meanwhile: the failover is already under way

    def close(self) -> None:
        """End the session: no reconnection; what waits for a connection fails."""
        if self.closing:
            return
        self.closing = True
        for task in (self._reconnect_task, self._keepalive):
            if task is not None:
                task.cancel()
        self._reconnect_task = None
        lost_before = self.conn.closed
        self.conn.close()
        if self._runner is not None:
            self._runner.cancel()
        if lost_before and self._owner is not None:
            self._owner.lost()  # (closed while reconnecting: no close callback tells the owner)


class SessionClient:
    """What a producer or consumer tells about its session, and its life cycle: ``async with``
    closes it, ``closed`` says whether it was, and one never closed leaves one ``ResourceWarning``."""

    session: Session

    async def close(self) -> None:
        raise NotImplementedError

    def _describe(self) -> str:
        """What it is, for the unclosed warning (``Producer (fixed-0-1)``)."""
        return type(self).__name__

    async def __aenter__(self) -> Self:
        """``async with await X.connect(...) as x``: connected already; closed at the end."""
        if self.closed:
            raise ClientClosedError(f"the {type(self).__name__.lower()} is closed")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """``close()`` or ``abort()`` was called."""
        return self.session.closing

    def __del__(self, _unclosed: Callable[[object, str], None] = unclosed) -> None:
        session: Session | None = getattr(self, "session", None)  # (None: ``__init__`` failed)
        if session is not None and not session.closing:
            _unclosed(self, self._describe())

    @property
    def conn(self) -> Connection:
        """The current connection (closed while reconnecting)."""
        return self.session.conn

    @property
    def node(self) -> str:
        """The CM in use."""
        return self.session.node

    @property
    def reconnects(self) -> int:
        return self.session.reconnects

    @property
    def reconnecting(self) -> bool:
        return self.session.reconnecting


def _max_frame(hello: dict[str, Any]) -> int:
    """The largest frame the CM takes, as its HELLO_OK says (older CMs: the protocol default)."""
    announced = hello.get("max_frame")
    return int(announced) if isinstance(announced, int) and announced > 0 else DEFAULT_MAX_FRAME
