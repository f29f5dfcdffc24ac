"""The CM relays an MM's answer to the client under its correlation id, and a client that went away
(or an MM request that was cancelled) raises nothing in the event loop's callbacks.

Seen in a CM's log at the end of a CM-failover test: the client's transport had closed before the
connection noticed, the relay raised ConnectionClosed in a callback, and a refused ACK whose client
was gone left "Future exception was never retrieved"."""

from __future__ import annotations

import asyncio
from typing import Any

from hybridmq.api.frames import ErrorCode
from hybridmq.broker.cm.server import ConnectionManager
from hybridmq.broker.cm.session import Session
from hybridmq.protocol import RemoteError


class ClientConn:
    """What the relay uses of the client's connection."""

    def __init__(self, closed: bool = False, transport_gone: bool = False) -> None:
        self.closed = closed
        self.transport_gone = transport_gone
        self.sent: list[dict[str, Any]] = []

    def send_nowait(self, frame: dict[str, Any]) -> None:
        if self.transport_gone:
            from hybridmq.protocol.connection import ConnectionClosed

            raise ConnectionClosed("cm: the handler is closed")
        self.sent.append(frame)


def _session(conn: ClientConn) -> Session:
    return Session(id="s", user="u", client_id="c", conn=conn)  # type: ignore[arg-type]


async def test_answers_refusals_and_cancellations_reach_the_client_under_its_id() -> None:
    loop = asyncio.get_running_loop()
    conn = ClientConn()
    ok, refused, cancelled = loop.create_future(), loop.create_future(), loop.create_future()
    ok.set_result({"t": 1, "o": 7})
    refused.set_exception(RemoteError(ErrorCode.STALE_DELIVERY, "not outstanding"))
    cancelled.cancel()
    for corr, fut in ((1, ok), (2, refused), (3, cancelled)):
        ConnectionManager._relay(_session(conn), corr, fut)
    assert conn.sent[0] == {"t": 1, "o": 7, "r": 1}
    assert conn.sent[1]["r"] == 2 and conn.sent[1]["code"] == ErrorCode.STALE_DELIVERY
    assert conn.sent[2]["r"] == 3 and conn.sent[2]["code"] == ErrorCode.MM_UNAVAILABLE


async def test_a_client_that_went_away_gets_nothing_and_nothing_raises() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    for conn in (ClientConn(closed=True), ClientConn(transport_gone=True)):
        fut: asyncio.Future[Any] = loop.create_future()
        fut.add_done_callback(lambda f, conn=conn: ConnectionManager._relay(_session(conn), 9, f))
        fut.set_exception(RemoteError(ErrorCode.STALE_DELIVERY, "not outstanding"))
        await asyncio.sleep(0)
        del fut
        assert conn.sent == []
    import gc

    gc.collect()
    await asyncio.sleep(0)
    assert errors == []
