"""Malformed, truncated and oversized frames against real CM and MM processes.

Each bad connection gets a fatal protocol ERROR frame and is closed; a healthy client on another
connection keeps producing and consuming throughout.
"""

from __future__ import annotations

import asyncio
import struct

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridmq.api.frames import PROTOCOL_VERSION, ErrorCode, FrameType
from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster
from hybridmq.protocol import read_frame


def _hello() -> bytes:
    body = msgpack.packb({"t": FrameType.HELLO, "v": PROTOCOL_VERSION, "id": "fuzz", "role": "client"})
    return struct.pack(">I", len(body)) + body


async def _bad_connection(port: int, payload: bytes, handshake: bool) -> dict | None:  # type: ignore[type-arg]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if handshake:
            writer.write(_hello())
            ok = await read_frame(reader, 1 << 20)
            assert ok is not None and ok["t"] == FrameType.HELLO_OK
        writer.write(payload)
        writer.write_eof()
        await writer.drain()
        frame = await asyncio.wait_for(read_frame(reader, 1 << 20), 10)
        # after the error the server closes the connection
        assert await asyncio.wait_for(reader.read(), 10) == b""
        return frame
    finally:
        writer.close()


BAD_PAYLOADS = {
    "oversized": struct.pack(">I", 2**31) + b"xx",
    "truncated_header": b"\x00\x00",
    "truncated_body": struct.pack(">I", 100) + b"\x81\xa1t",
    "not_msgpack": struct.pack(">I", 3) + b"\xc1\xc1\xc1",
    "not_a_map": struct.pack(">I", 2) + msgpack.packb([1]),
    "empty": struct.pack(">I", 0),
}


async def _check_bad(port: int, payload: bytes, handshake: bool) -> None:
    frame = await _bad_connection(port, payload, handshake)
    assert frame is not None and frame["t"] == FrameType.ERROR and frame["fatal"] is True
    assert frame["code"] in (ErrorCode.PROTOCOL_ERROR, ErrorCode.FRAME_TOO_LARGE, ErrorCode.NOT_AUTHENTICATED)


async def test_bad_frames_end_only_that_connection(cluster: LocalCluster) -> None:
    consumer = await Consumer.connect(cluster.bootstrap, "topic:survivor")
    producer = await Producer.connect(cluster.bootstrap)
    mm_port = cluster.mm_ports["mm-0"]
    for i, (name, payload) in enumerate(BAD_PAYLOADS.items()):
        await _check_bad(cluster.cm_port, payload, handshake=True)  # CM, after a good handshake
        await _check_bad(cluster.cm_port, payload, handshake=False)  # CM, instead of the handshake
        await _check_bad(mm_port, payload, handshake=False)  # MM
        await producer.send("topic:survivor", f"{name}-{i}".encode())
        m = await consumer.receive(timeout=10)
        assert isinstance(m, Message) and m.value == f"{name}-{i}".encode()
    frame = await _bad_connection(cluster.cm_port, BAD_PAYLOADS["oversized"], True)
    assert frame is not None and frame["code"] == ErrorCode.FRAME_TOO_LARGE
    await producer.close()
    await consumer.close()


@given(st.binary(min_size=1, max_size=200))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_garbage_after_handshake(cluster: LocalCluster, garbage: bytes) -> None:
    async def go() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", cluster.cm_port)
        writer.write(_hello())
        assert (await read_frame(reader, 1 << 20))["t"] == FrameType.HELLO_OK  # type: ignore[index]
        writer.write(garbage)
        writer.write_eof()
        # whatever comes back is well-formed frames, then the server closes
        while True:
            frame = await asyncio.wait_for(read_frame(reader, 1 << 20), 10)
            if frame is None:
                break
            assert frame["t"] in (FrameType.ERROR, FrameType.OK, FrameType.PRODUCE_ACK, FrameType.PONG)
        writer.close()
        # the CM still serves a real client
        async with await Producer.connect(cluster.bootstrap) as p:
            await p.send("topic:after-garbage", b"ok")

    asyncio.run(go())
