"""Length-prefixed msgpack framing over asyncio streams (see ``hybridmq.api.frames``)."""

from hybridmq.protocol.codec import ProtocolError, decode_body, encode_frame, read_frame
from hybridmq.protocol.connection import Connection, RemoteError, open_connection

__all__ = [
    "Connection",
    "ProtocolError",
    "RemoteError",
    "decode_body",
    "encode_frame",
    "open_connection",
    "read_frame",
]
