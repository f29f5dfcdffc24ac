"""The wire format for stand-in brokers in tests, written here from the protocol's description (a
4-byte big-endian length, then a msgpack map), not taken from the code under test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgpack


def frame_sender(writer: asyncio.StreamWriter) -> Callable[[dict[str, Any]], None]:
    def send(frame: dict[str, Any]) -> None:
        body = msgpack.packb(frame, use_bin_type=True)
        writer.write(len(body).to_bytes(4, "big") + body)

    return send


async def frames(reader: asyncio.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """Each frame the peer sends, until it closes the connection."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            length = int.from_bytes(await reader.readexactly(4), "big")
            yield msgpack.unpackb(await reader.readexactly(length), raw=False)
