"""Frame codec: 4-byte big-endian length + msgpack map body (msgspec encodes and decodes it).

``read_frame`` checks the announced length against ``max_frame`` before it reads the body, so an
oversized frame never gets buffered. Anything that is not a msgpack map with an integer ``t`` raises
``ProtocolError``; callers answer with a fatal ERROR frame and close only that connection.

A ``FrameDecoder`` given typed requests (``hybridmq.api.requests``) decodes a frame of those types
straight into its Struct, validating it in the same step; every other frame becomes a dict. A frame
of a typed type whose fields are wrong becomes an ``InvalidFrame``, which the connection's
dispatcher answers ``INVALID_REQUEST`` (the connection reads on).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import msgspec

from hybridmq.api.frames import LENGTH_PREFIX_BYTES, ErrorCode
from hybridmq.api.requests import Request

Frame = dict[str, Any]
_LEN = struct.Struct(">I")
_ENCODER = msgspec.msgpack.Encoder()


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""

    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.code = code


@dataclass(frozen=True, slots=True)
class InvalidFrame:
    """A frame of a typed request type whose fields are missing or of the wrong type."""

    frame: Frame  # as a dict, for its ``t`` and ``c``
    reason: str


Decoded = Frame | Request | InvalidFrame


def encode_body(frame: Frame | Request) -> bytes:
    return _ENCODER.encode(frame)


def encode_frame(frame: Frame | Request) -> bytes:
    body = _ENCODER.encode(frame)
    return _LEN.pack(len(body)) + body


_DICT = msgspec.msgpack.Decoder(Frame)


def decode_body(body: bytes) -> Frame:
    """A frame body as a dict (``ProtocolError`` when it is not a map with an integer ``t``)."""
    try:
        frame = _DICT.decode(body)
    except (msgspec.MsgspecError, RecursionError) as exc:  # a hostile depth of nesting: the latter
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"malformed frame body: {exc}") from None
    t = frame.get("t")
    if not isinstance(t, int) or isinstance(t, bool):
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "frame body must be a map with an integer 't'")
    return frame


class FrameDecoder:
    """Decodes frame bodies: the ``typed`` request types into their Structs, the rest into dicts."""

    def __init__(self, typed: Sequence[type[Request]] = ()) -> None:
        self._typed_types = frozenset(int(t.TYPE) for t in typed)
        self._typed = msgspec.msgpack.Decoder(Union[tuple(typed)]) if typed else None  # noqa: UP007

    def decode(self, body: bytes) -> Decoded:
        if self._typed is not None:
            try:
                return self._typed.decode(body)
            except msgspec.ValidationError as exc:
                frame = decode_body(body)
                if frame["t"] in self._typed_types:
                    return InvalidFrame(frame, str(exc))
                return frame  # a type that is not typed (the tag did not match)
            except (msgspec.DecodeError, RecursionError):
                pass  # malformed msgpack, or nested too deep: the dict decoder says so
        return decode_body(body)


UNTYPED = FrameDecoder()


async def read_frame(reader: asyncio.StreamReader, max_frame: int) -> Frame | None:
    """Read one frame as a dict; ``None`` on a clean end of stream between frames."""
    body = await read_body(reader, max_frame)
    return None if body is None else decode_body(body)


async def read_body(reader: asyncio.StreamReader, max_frame: int) -> bytes | None:
    """Read one frame's body; ``None`` on a clean end of stream between frames."""
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
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "truncated frame body") from None
