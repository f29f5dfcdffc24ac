"""What the MM stores as the opaque payload of a log batch.

``[dest, flags, expiry_ms, extra, blob]`` packed with msgpack: ``dest`` the canonical destination,
``flags`` ``BatchFlag`` bits, ``expiry_ms`` absolute expiry (0 = never), ``extra`` a small map
(chunk info, DMQ origin) or nil, ``blob`` the producer's records blob, never decoded here.
Control batches (cursor snapshots) are a msgpack map instead; see ``hybridmq.broker.mm.cursors``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack


class StoredBatch(NamedTuple):
    base: int
    n: int
    dest: str
    flags: int
    expiry: int
    extra: dict[str, Any] | None
    blob: bytes
    control: bool
    timestamp: int

    @property
    def next_offset(self) -> int:
        return self.base + self.n

    @property
    def size(self) -> int:
        return len(self.blob) + 64


def pack_payload(dest: str, flags: int, expiry: int, extra: dict[str, Any] | None, blob: bytes) -> bytes:
    return msgpack.packb([dest, flags, expiry, extra, blob], use_bin_type=True)


def unpack_payload(payload: bytes | memoryview) -> tuple[str, int, int, dict[str, Any] | None, bytes]:
    dest, flags, expiry, extra, blob = msgpack.unpackb(payload, raw=False)
    return dest, flags, expiry, extra, blob
