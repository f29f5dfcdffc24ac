"""The record-batch format: a fixed binary header followed by an opaque payload.

Layout (big-endian, ``HEADER_SIZE`` = 57 bytes)::

    off  size  field
      0     8  base_offset      offset of the first record (offsets count records, not batches)
      8     4  length           total batch size in bytes, header included
     12     1  magic            format version (``MAGIC``)
     13     4  crc              CRC32 of bytes [0:13] then [17:length] (everything but itself)
     17     4  epoch            partition (leader) epoch of the primary that assigned the offsets
     21     2  attributes       bit 0: control batch; other bits reserved (0)
     23     4  record_count     number of records in the payload (>= 1)
     27     8  first_timestamp  ms since the epoch
     35     8  max_timestamp    ms since the epoch
     43     8  producer_id      -1 when the producer is not idempotent
     51     2  producer_epoch   -1 when the producer is not idempotent
     53     4  base_sequence    sequence number of the first record, -1 when not idempotent
     57     .  payload          opaque bytes (the log never interprets them)

A batch holds offsets ``base_offset .. base_offset + record_count - 1``. The CRC covers the base
offset too, so a corrupted offset is caught like any other corruption.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from .errors import CorruptBatchError

MAGIC = 1
HEADER = struct.Struct(">qiBIihiqqqhi")
HEADER_SIZE = HEADER.size
_CRC = struct.Struct(">I")
_CRC_POS = 13
_CRC_END = 17
_PREFIX = struct.Struct(">qiB")  # base_offset, length, magic

ATTR_CONTROL = 0x1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

assert HEADER_SIZE == 57


class BatchHeader(NamedTuple):
    """The decoded header of one batch. Field order is the on-disk order."""

    base_offset: int
    length: int
    magic: int
    crc: int
    epoch: int
    attributes: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def payload_size(self) -> int:
        return self.length - HEADER_SIZE

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return self.base_sequence + self.record_count - 1


def encode_header(
    payload: bytes | bytearray | memoryview,
    *,
    base_offset: int,
    record_count: int,
    epoch: int,
    attributes: int = 0,
    first_timestamp: int = 0,
    max_timestamp: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytearray:
    """Return the header for ``payload``, CRC included. The batch is ``header + payload``."""
    if record_count < 1:
        raise ValueError("a batch holds at least one record")
    header = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        header,
        0,
        base_offset,
        HEADER_SIZE + len(payload),
        MAGIC,
        0,
        epoch,
        attributes,
        record_count,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    )
    view = memoryview(header)
    crc = zlib.crc32(payload, zlib.crc32(view[_CRC_END:], zlib.crc32(view[:_CRC_POS])))
    _CRC.pack_into(header, _CRC_POS, crc)
    return header


def encode_batch(payload: bytes | bytearray | memoryview, **fields: int) -> bytes:
    """Return a whole batch (header + payload) as bytes. Fields as for :func:`encode_header`."""
    return bytes(encode_header(payload, **fields)) + bytes(payload)


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """The CRC that a whole ``batch`` (header + payload) should carry."""
    view = memoryview(batch)
    return zlib.crc32(view[_CRC_END:], zlib.crc32(view[:_CRC_POS]))


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at ``buf[pos:]`` (no CRC check). Raises CorruptBatchError if malformed."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError("truncated batch header")
    header = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptBatchError(f"unknown batch magic {header.magic}")
    if header.length < HEADER_SIZE or header.record_count < 1:
        raise CorruptBatchError(f"bad batch length {header.length} or count {header.record_count}")
    return header


def verify_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the batch at ``buf[pos:]`` and check its length and CRC; return its header."""
    header = parse_header(buf, pos)
    end = pos + header.length
    if end > len(buf):
        raise CorruptBatchError("truncated batch")
    if compute_crc(memoryview(buf)[pos:end]) != header.crc:
        raise CorruptBatchError(f"CRC mismatch in batch at offset {header.base_offset}")
    return header


def iter_headers(buf: bytes | bytearray | memoryview, *, verify: bool = False) -> Iterator[BatchHeader]:
    """Yield the header of each whole batch in ``buf`` (as returned by ``PartitionLog.read``).

    Raises CorruptBatchError on a malformed or (with ``verify``) corrupted batch, including a partial
    batch at the end.
    """
    pos = 0
    size = len(buf)
    while pos < size:
        header = verify_batch(buf, pos) if verify else parse_header(buf, pos)
        if pos + header.length > size:
            raise CorruptBatchError("truncated batch")
        yield header
        pos += header.length


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, payload)`` for each whole batch in ``buf``; payloads are zero-copy views."""
    view = memoryview(buf)
    pos = 0
    for header in iter_headers(view):
        yield header, view[pos + HEADER_SIZE : pos + header.length]
        pos += header.length


def whole_batches_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """Length of the longest prefix of ``buf[pos:]`` made of whole batches (headers not verified)."""
    size = len(buf)
    end = pos
    while size - end >= HEADER_SIZE:
        length = _PREFIX.unpack_from(buf, end)[1]
        if length < HEADER_SIZE or end + length > size:
            break
        end += length
    return end - pos
