"""Bringing segments back after a restart.

* :func:`recover_segment` validates every batch of a segment that may hold unsynced data (the
  segments at and after the recovery point): magic, length, offset continuity and CRC. It stops at
  the first bad batch and truncates the file there (a torn or corrupt tail), rebuilding the sparse
  index on the way.
* :func:`load_trusted_segment` opens a segment below the recovery point (fsynced and sealed before
  the crash): it loads the index file, or rebuilds it from the batch headers, without CRC checks.

Both call ``on_batch(header)`` for each batch when asked, so the owner can rebuild producer state and
the leader-epoch cache in the same pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .batch import HEADER_SIZE, BatchHeader, compute_crc, parse_header
from .errors import CorruptBatchError
from .segment import Segment

_CHUNK = 1024 * 1024

BatchCallback = Callable[[BatchHeader], None]


def recover_segment(segment: Segment, *, max_batch_bytes: int, on_batch: BatchCallback | None = None) -> int:
    """Validate ``segment`` from its start, truncate any bad tail; return the bytes truncated."""
    segment.index.clear()
    size = segment.size
    position = 0
    expected = segment.base_offset
    buf = b""
    buf_start = 0
    while size - position >= HEADER_SIZE:
        rel = position - buf_start
        if rel + HEADER_SIZE > len(buf):
            buf = os.pread(segment.fd, min(_CHUNK, size - position), position)
            buf_start, rel = position, 0
        try:
            header = parse_header(buf, rel)
        except CorruptBatchError:
            break
        length = header.length
        if (
            header.base_offset != expected
            or length > max_batch_bytes + HEADER_SIZE
            or position + length > size
        ):
            break
        if rel + length > len(buf):
            buf = os.pread(segment.fd, max(_CHUNK, length), position)
            buf_start, rel = position, 0
            if len(buf) < length:
                break
        if compute_crc(memoryview(buf)[rel : rel + length]) != header.crc:
            break
        segment.index.maybe_add(header.base_offset, position)
        if on_batch is not None:
            on_batch(header)
        expected = header.base_offset + header.record_count
        position += length
    truncated = size - position
    segment.truncate(position, expected)
    return truncated


def load_trusted_segment(
    segment: Segment, *, max_batch_bytes: int, on_batch: BatchCallback | None = None
) -> None:
    """Open a sealed segment known to be intact; fall back to full recovery if it is not."""
    try:
        if on_batch is None and segment.index.load(segment.index_path, segment.size):
            last = segment.last_header()
            segment.next_offset = segment.base_offset if last is None else last[1].next_offset
            if last is not None and last[0] + last[1].length == segment.size:
                return
        segment.index.clear()
        expected = segment.base_offset
        end = 0
        for position, header in segment.iter_headers(0):
            if header.base_offset != expected or position + header.length > segment.size:
                raise CorruptBatchError("inconsistent sealed segment")
            segment.index.maybe_add(header.base_offset, position)
            if on_batch is not None:
                on_batch(header)
            expected = header.next_offset
            end = position + header.length
        if end != segment.size:
            raise CorruptBatchError("sealed segment ends inside a batch")
        segment.next_offset = expected
    except CorruptBatchError:
        recover_segment(segment, max_batch_bytes=max_batch_bytes, on_batch=None)
