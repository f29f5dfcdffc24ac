"""Frame dispatch: the table decides which handler runs and whether the read loop waits for it;
a malformed frame or an unknown type is answered INVALID_REQUEST and the connection reads on."""

from __future__ import annotations

import asyncio
from typing import Any

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.dispatch import Dispatcher, Entry, Mode


class FakeConn:
    def __init__(self) -> None:
        self.errors: list[tuple[Any, ErrorCode, str]] = []

    def reply_error(self, frame: dict[str, Any], code: ErrorCode, msg: str) -> None:
        self.errors.append((frame.get("c"), code, msg))


async def test_inline_awaited_and_spawned() -> None:
    conn = FakeConn()
    order: list[str] = []
    release = asyncio.Event()

    def ping(c: FakeConn, frame: dict[str, Any]) -> None:
        order.append("ping")

    async def fetch(c: FakeConn, frame: dict[str, Any]) -> None:
        order.append("fetch")

    async def commit(c: FakeConn, frame: dict[str, Any]) -> None:
        await release.wait()
        order.append("commit")

    d: Dispatcher[FakeConn] = Dispatcher(
        {
            FrameType.PING: Entry(ping, Mode.INLINE),
            FrameType.FETCH: Entry(fetch, Mode.AWAITED),
            FrameType.TX_COMMIT: Entry(commit, Mode.SPAWNED),
        },
        lambda c: c,  # type: ignore[arg-type,return-value]  # answers errors like a Connection
    )
    assert d(conn, {"t": FrameType.PING}) is None and order == ["ping"]
    waited = d(conn, {"t": FrameType.FETCH})
    assert asyncio.iscoroutine(waited) and order == ["ping"]  # the read loop awaits it
    await waited
    assert order == ["ping", "fetch"]
    assert d(conn, {"t": FrameType.TX_COMMIT}) is None  # runs beside the loop
    assert len(d.tasks) == 1
    d(conn, {"t": FrameType.PING})
    assert order == ["ping", "fetch", "ping"]  # answered while the commit waits
    release.set()
    await asyncio.wait(set(d.tasks))
    assert order[-1] == "commit" and not d.tasks
    assert conn.errors == []


async def test_bad_frames_are_refused_and_the_loop_reads_on() -> None:
    conn = FakeConn()

    def needs_field(c: FakeConn, frame: dict[str, Any]) -> None:
        int(frame["o"])

    d: Dispatcher[FakeConn] = Dispatcher(
        {FrameType.FETCH: Entry(needs_field)},
        lambda c: c,  # type: ignore[arg-type,return-value]
    )
    assert d(conn, {"t": FrameType.FETCH, "c": 1}) is None  # KeyError
    assert d(conn, {"t": FrameType.FETCH, "c": 2, "o": "x"}) is None  # ValueError
    assert d(conn, {"t": 250, "c": 3}) is None  # no entry
    assert [(c, code) for c, code, _ in conn.errors] == [
        (1, ErrorCode.INVALID_REQUEST),
        (2, ErrorCode.INVALID_REQUEST),
        (3, ErrorCode.INVALID_REQUEST),
    ]
    assert "bad frame" in conn.errors[0][2] and "unexpected frame type 250" in conn.errors[2][2]
