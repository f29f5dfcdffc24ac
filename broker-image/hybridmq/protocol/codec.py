"""Frame codec: 4-byte big-endian length + msgpack map body.

``read_frame`` checks the announced length against ``max_frame`` before it reads the body, so an
oversized frame never gets buffered. Anything that is not a msgpack map with an integer ``t`` raises
``ProtocolError``; callers answer with a fatal ERROR frame and close only that connection.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack

from hybridmq.api.frames import LENGTH_PREFIX_BYTES, ErrorCode

Frame = dict[str, Any]
_LEN = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""

    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.code = code


def encode_frame(frame: Frame) -> bytes:
    body = msgpack.packb(frame, use_bin_type=True)
    return _LEN.pack(len(body)) + body


def decode_body(body: bytes) -> Frame:
    try:
        frame = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for bad input
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"malformed frame body: {exc}") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("t"), int):
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "frame body must be a map with an integer 't'")
    return frame


async def read_frame(reader: asyncio.StreamReader, max_frame: int) -> Frame | None:
    """Read one frame; ``None`` on a clean end of stream between frames."""
    try:
        header = await reader.readexactly(LENGTH_PREFIX_BYTES)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "truncated frame header") from None
    (length,) = _LEN.unpack(header)
    if length > max_frame:
        raise ProtocolError(ErrorCode.FRAME_TOO_LARGE, f"frame of {length} bytes exceeds {max_frame}")
    if length == 0:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "empty frame")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "truncated frame body") from None
    return decode_body(body)
