"""One framed, pipelined connection: send frames, issue requests with correlation ids, dispatch.

``Connection.run(handler)`` reads frames until the peer goes away. Frames carrying ``r`` resolve the
matching pending request (an ERROR with ``r`` fails it with ``RemoteError``; ADMIN_PART frames are
collected until ``of`` parts arrived). Every other frame goes to ``handler``. A protocol error sends
a fatal ERROR to the peer and closes this connection only.

Reading a frame that is already buffered does not give the event loop back, so a peer that pipelines
thousands of small frames would be served alone until its buffer ran dry (another client's request
waited a second and more). ``run`` yields after ``FRAMES_PER_TURN`` frames: every connection gets a
turn.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl as _ssl
from collections.abc import Awaitable, Callable
from typing import Any

from hybridmq.api.frames import DEFAULT_MAX_FRAME, ErrorCode, FrameType, error_frame
from hybridmq.api.requests import Request
from hybridmq.protocol.codec import (
    UNTYPED,
    Decoded,
    Frame,
    FrameDecoder,
    InvalidFrame,
    ProtocolError,
    encode_body,
    read_body,
    read_frame,
)

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[None] | None]  # given a ``Decoded`` frame
HIGH_WATER = 4 * 1024 * 1024
FRAMES_PER_TURN = 32  # frames handled from one connection before the other connections get a turn


class RemoteError(Exception):
    """The peer answered a request (or the handshake) with an ERROR frame."""

    def __init__(self, code: int, msg: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{ErrorCode(code).name if code in ErrorCode._value2member_map_ else code}: {msg}")
        self.code = code
        self.msg = msg
        self.details = details or {}  # the whole ERROR frame (e.g. start/hw of OFFSET_OUT_OF_RANGE)


class ConnectionClosed(Exception):
    pass


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_frame: int = DEFAULT_MAX_FRAME,
        name: str = "",
        decoder: FrameDecoder = UNTYPED,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.max_frame = max_frame
        self.name = name
        self._corr = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._parts: dict[int, list[Any]] = {}
        self.closed = False
        self.decoder = decoder  # which request types arrive as typed Structs (a server's)
        self.on_close: list[Callable[[], None]] = []
        self.peer = writer.get_extra_info("peername")
        self.handler: Handler = lambda frame: None

    # -- sending -------------------------------------------------------------------------------
    def send_nowait(self, frame: Frame | Request) -> None:
        if self.closed:
            raise ConnectionClosed(self.name)
        body = encode_body(frame)
        try:
            self.writer.write(len(body).to_bytes(4, "big") + body)
        except RuntimeError as exc:  # the transport closed before ``run`` noticed (uvloop)
            raise ConnectionClosed(f"{self.name}: {exc}") from None

    async def send(self, frame: Frame | Request) -> None:
        self.send_nowait(frame)
        await self.drain()

    async def drain(self) -> None:
        transport = self.writer.transport
        if transport.get_write_buffer_size() > HIGH_WATER:
            try:
                await self.writer.drain()
            except (OSError, RuntimeError) as exc:  # OSError: ConnectionError, ssl.SSLError
                raise ConnectionClosed(str(exc)) from None

    @property
    def write_buffer_size(self) -> int:
        return int(self.writer.transport.get_write_buffer_size())

    def request_nowait(self, frame: Frame | Request) -> asyncio.Future[Any]:
        corr = next(self._corr)
        if isinstance(frame, Request):
            frame.c = corr
        else:
            frame["c"] = corr
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        try:
            self.send_nowait(frame)
        except Exception:
            self._pending.pop(corr, None)
            raise
        return fut

    async def request(self, frame: Frame | Request, timeout: float | None = 30.0) -> Any:  # noqa: ASYNC109
        fut = self.request_nowait(frame)
        await self.drain()
        async with asyncio.timeout(timeout):
            return await fut

    def reply(self, request: Decoded, frame: Frame) -> None:
        frame["r"] = correlation(request)
        if not self.closed:
            self.send_nowait(frame)

    def reply_error(self, request: Decoded, code: ErrorCode, msg: str) -> None:
        if not self.closed:
            self.send_nowait(error_frame(code, msg, reply_to=correlation(request)))

    # -- receiving ------------------------------------------------------------------------------
    async def recv(self) -> Frame | None:
        return await read_frame(self.reader, self.max_frame)

    def _resolve(self, frame: Frame) -> None:
        corr = frame["r"]
        if frame["t"] == FrameType.ADMIN_PART:
            parts = self._parts.setdefault(corr, [])
            parts.append(frame.get("data"))
            if len(parts) < int(frame.get("of", 1)):
                return
            frame = {"t": FrameType.OK, "parts": self._parts.pop(corr)}
        fut = self._pending.pop(corr, None)
        if fut is None or fut.done():
            return
        if frame["t"] == FrameType.ERROR:
            fut.set_exception(RemoteError(int(frame.get("code", 0)), str(frame.get("msg", "")), frame))
        else:
            fut.set_result(frame)

    async def run(self, handler: Handler | None = None) -> None:
        """Dispatch frames until EOF or a protocol error; then close."""
        if handler is not None:
            self.handler = handler
        try:
            handled = 0
            while True:
                handled += 1
                if handled % FRAMES_PER_TURN == 0:
                    await asyncio.sleep(0)
                body = await read_body(self.reader, self.max_frame)
                if body is None:
                    break
                frame = self.decoder.decode(body)
                if type(frame) is dict and "r" in frame:  # replies are never typed
                    self._resolve(frame)
                    continue
                result = self.handler(frame)
                if result is not None:
                    await result
        except ProtocolError as exc:
            log.warning("%s: protocol error from %s: %s", self.name, self.peer, exc)
            try:
                self.send_nowait(error_frame(exc.code, str(exc), fatal=True))
                async with asyncio.timeout(1.0):
                    await self.writer.drain()
            except Exception:
                pass
        except _ssl.SSLError as exc:
            # A TLS error (a damaged record; the peer's data after our close_notify) ends this
            # connection like any other loss: raised past here, it ended the caller's loop (a CM's
            # link to an MM stopped reconnecting for good).
            if not self.closed:
                log.warning("%s: TLS error from %s: %s", self.name, self.peer, exc)
        except (OSError, asyncio.IncompleteReadError, ConnectionClosed):
            pass
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        err = ConnectionClosed(self.name)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        try:
            self.writer.close()
        except Exception:
            pass
        for cb in self.on_close:
            try:
                cb()
            except Exception:
                log.exception("on_close callback failed")


def correlation(request: Decoded) -> Any:
    """The correlation id an answer to ``request`` carries (None: none wanted)."""
    if isinstance(request, Request):
        return request.c
    if isinstance(request, InvalidFrame):
        return request.frame.get("c")
    return request.get("c")


async def open_connection(
    host: str,
    port: int,
    hello: Frame,
    max_frame: int = DEFAULT_MAX_FRAME,
    name: str = "",
    *,
    ssl: _ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> tuple[Connection, Frame]:
    """Connect (over TLS with ``ssl``; ``server_hostname`` is the name the server's certificate must
    carry when it is not ``host``) and handshake; returns the connection and the HELLO_OK frame
    (raises RemoteError)."""
    reader, writer = await asyncio.open_connection(
        host,
        port,
        limit=2 * 1024 * 1024,
        ssl=ssl,
        server_hostname=(server_hostname or host) if ssl is not None else None,
    )
    conn = Connection(reader, writer, max_frame=max_frame, name=name)
    conn.send_nowait(hello)
    reply = await read_frame(reader, max_frame)
    if reply is None:
        conn.close()
        raise ConnectionClosed("server closed during handshake")
    if reply["t"] == FrameType.ERROR:
        conn.close()
        raise RemoteError(int(reply.get("code", 0)), str(reply.get("msg", "")))
    return conn, reply
