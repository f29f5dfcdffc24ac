"""Frames queued in one turn of the event loop leave together: every frame arrives, in order, and
a close right after sending still delivers what was sent before it."""

from __future__ import annotations

import asyncio
import struct

import msgpack
import pytest

from hybridmq.protocol.connection import Connection, ConnectionClosed


async def _read_frames(reader: asyncio.StreamReader) -> list[dict[str, object]]:
    """Every frame until EOF, decoded with our own reading of the wire format (4-byte length + msgpack)."""
    frames = []
    while True:
        head = await reader.read(4)
        if not head:
            return frames
        head += await reader.readexactly(4 - len(head))
        (length,) = struct.unpack(">I", head)
        frames.append(msgpack.unpackb(await reader.readexactly(length), raw=False))


async def _pair() -> tuple[Connection, asyncio.Future[list[dict[str, object]]], asyncio.Server]:
    """A Connection to a loopback server that collects every frame it receives until EOF."""
    received: asyncio.Future[list[dict[str, object]]] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.set_result(await _read_frames(reader))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return Connection(reader, writer, name="test"), received, server


async def test_frames_of_one_turn_arrive_in_order_and_a_close_sends_them_first() -> None:
    conn, peer, server = await _pair()
    for i in range(500):
        conn.send_nowait({"t": 11, "i": i, "b": b"x" * 100})
    assert conn.write_buffer_size >= 500 * 100, "queued frames count as buffered for back pressure"
    conn.close()  # in the same turn: nothing was written yet
    frames = await asyncio.wait_for(peer, 10)
    assert [f["i"] for f in frames] == list(range(500))
    with pytest.raises(ConnectionClosed):
        conn.send_nowait({"t": 11})
    server.close()


async def test_frames_sent_across_turns_and_drained_past_the_high_water_mark() -> None:
    conn, peer, server = await _pair()
    big = b"y" * (1 << 20)
    for i in range(12):  # 12 MiB: past the high water mark, so ``send`` waits for the socket
        await conn.send({"t": 11, "i": i, "b": big})
        if i % 3 == 0:
            await asyncio.sleep(0)
    conn.send_nowait({"t": 11, "i": "last"})
    await asyncio.sleep(0.05)  # written by the loop, not by a close
    conn.close()
    frames = await asyncio.wait_for(peer, 10)
    assert [f["i"] for f in frames] == [*range(12), "last"]
    assert all(f["b"] == big for f in frames[:-1])
    server.close()
