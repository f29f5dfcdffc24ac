"""What the MM stores as the opaque payload of a log batch.

``[dest, flags, expiry_ms, extra, blob]`` packed with msgpack: ``dest`` the canonical destination,
``flags`` ``BatchFlag`` bits, ``expiry_ms`` absolute expiry (0 = never), ``extra`` a small map
(chunk info, DMQ origin) or nil, ``blob`` the producer's records blob (a msgpack array of records,
or a CHUNK's raw bytes). The MM never decodes a record; to hand a queue's records out one by one it
only finds where each record's bytes start (``record_spans``) and re-frames a run of them
(``slice_records``).
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


def record_spans(blob: bytes) -> list[int]:
    """Byte positions in a records blob: where each record starts, then the end of the last one
    (records are skipped, never decoded)."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(blob), 1))
    unpacker.feed(blob)
    n = unpacker.read_array_header()
    spans = [unpacker.tell()]
    skip, tell, append = unpacker.skip, unpacker.tell, spans.append
    for _ in range(n):
        skip()
        append(tell())
    return spans


def split_spans(blob: bytes, n: int) -> list[int]:
    """``record_spans`` of a stored batch of ``n`` records; one whose records cannot be located
    (its array header was right, a record is not) is one unit: ``[0, size, size, ...]``, all its
    bytes on its first record (a real records blob starts after a header, never at 0)."""
    try:
        spans = record_spans(blob)
    except Exception:
        spans = []
    return spans if len(spans) == n + 1 else [0, *([len(blob)] * n)]


def slice_records(blob: bytes, spans: list[int], i: int, j: int) -> bytes:
    """A records blob of records ``i`` to ``j - 1`` of ``blob`` (whole: the blob itself)."""
    if i == 0 and j == len(spans) - 1:
        return blob
    header = msgpack.Packer().pack_array_header(j - i)
    return header + blob[spans[i] : spans[j]]


def pack_payload(dest: str, flags: int, expiry: int, extra: dict[str, Any] | None, blob: bytes) -> bytes:
    return msgpack.packb([dest, flags, expiry, extra, blob], use_bin_type=True)


def unpack_payload(payload: bytes | memoryview) -> tuple[str, int, int, dict[str, Any] | None, bytes]:
    dest, flags, expiry, extra, blob = msgpack.unpackb(payload, raw=False)
    return dest, flags, expiry, extra, blob


def check_records(blob: bytes, count: int) -> None:
    """The records blob is an array of ``count`` records (ValueError, a clear INVALID_REQUEST, if
    not). Only its header is read: a blob whose records cannot be located later is handed out
    whole (``split_spans``)."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(blob[:5])
    try:
        held = unpacker.read_array_header()
    except Exception:
        raise ValueError("records blob is not a msgpack array of records") from None
    if held != count:
        raise ValueError(f"records blob holds {held} records, the batch says {count}")
