"""One segment file of a partition log: ``<base offset, 20 digits>.log`` plus its sparse index.

A segment holds whole batches back to back, offsets ascending from ``base_offset``. Only the last
(active) segment of a log is written to; writes go straight to the OS (``os.writev``), so reads see
them at once, and ``fsync`` is left to the owner (group commit). The file descriptor stays open for
reads until the segment is closed or deleted.

The segment remembers where its last ``TAIL_BATCHES`` (or more) appended batches start: fetches by
backups and deliveries read at the tail, and finding a batch from the sparse index read and parsed
every header since the last index entry (about sixteen for each read of a quiet queue).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .batch import HEADER_SIZE, BatchHeader, parse_header
from .index import OffsetIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_SCAN_CHUNK = 64 * 1024
TAIL_BATCHES = 256  # the tail kept is between this and twice this many batches

_fdatasync = getattr(os, "fdatasync", os.fsync)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def list_segment_bases(directory: Path) -> list[int]:
    bases = []
    for name in os.listdir(directory):
        if name.endswith(LOG_SUFFIX):
            try:
                bases.append(int(name[: -len(LOG_SUFFIX)]))
            except ValueError:
                continue
    return sorted(bases)


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        self.index_path = directory / (segment_name(base_offset) + INDEX_SUFFIX)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.index = OffsetIndex(base_offset, index_interval_bytes)
        self.closed = False
        # The batches appended last, contiguous up to ``next_offset``: base offsets, and each
        # one's (position, header).
        self._tail_bases: list[int] = []
        self._tail: list[tuple[int, BatchHeader]] = []

    @property
    def fd(self) -> int:
        """The file descriptor, reopened on demand after :meth:`release`."""
        fd = self._fd
        if fd is None:
            if self.closed:
                raise OSError(f"segment {self.path} is closed")
            fd = self._fd = os.open(self.path, os.O_RDWR)
        return fd

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Close the descriptor for now (an idle sealed segment); the next use reopens it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"Segment({self.base_offset}..{self.next_offset}, {self.size} bytes)"

    # -- writing -----------------------------------------------------------------------------------

    def write(self, chunks: Sequence[bytes | bytearray | memoryview], length: int) -> None:
        """Write ``chunks`` (whole batches, ``length`` bytes in all) at the end of the file."""
        position = self.size
        try:
            written = os.pwritev(self.fd, chunks, position)
            while written < length:  # short writes are rare on regular files; finish the job
                flat = b"".join(bytes(c) for c in chunks)
                written += os.pwrite(self.fd, flat[written:], position + written)
        except BaseException:
            os.ftruncate(self.fd, position)
            raise
        self.size = position + length

    def append_batch(
        self, header: bytes | bytearray, payload: bytes | bytearray | memoryview, base: int, end: int
    ) -> None:
        """Append one batch (``header + payload``) holding offsets ``[base, end)``."""
        position = self.size
        self.index.maybe_add(base, position)
        self.write((header, payload), len(header) + len(payload))
        self.next_offset = end
        self.remember(position, parse_header(header))

    def remember(self, position: int, header: BatchHeader) -> None:
        """``header``'s batch was written at ``position``, right after the last one remembered."""
        self._tail_bases.append(header.base_offset)
        self._tail.append((position, header))
        if len(self._tail) > 2 * TAIL_BATCHES:
            del self._tail_bases[:TAIL_BATCHES]
            del self._tail[:TAIL_BATCHES]

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the file at ``position``, which starts the batch at ``next_offset`` (or is the end)."""
        os.ftruncate(self.fd, position)
        self.size = position
        self.next_offset = next_offset
        self.index.truncate_to(next_offset)
        cut = bisect_right(self._tail_bases, next_offset - 1)
        del self._tail_bases[cut:]
        del self._tail[cut:]

    def fsync(self) -> None:
        _fdatasync(self.fd)

    def seal(self) -> None:
        """Persist the index (done when the segment stops being the active one, and on close).
        The tail it remembered goes: a log keeps many sealed segments, and their reads are rare."""
        self.index.write(self.index_path)
        self._tail_bases.clear()
        self._tail.clear()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.release()

    def delete(self) -> None:
        self.close()
        self.unlink()

    def unlink(self) -> None:
        """Remove the files (an open descriptor stays usable until :meth:`close`)."""
        for path in (self.path, self.index_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # -- reading -----------------------------------------------------------------------------------

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def iter_headers(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` for each batch from ``position`` (headers only, no CRC)."""
        end = self.size if end is None else end
        buf = b""
        buf_start = position
        while position + HEADER_SIZE <= end:
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(self.fd, min(_SCAN_CHUNK, end - position), position)
                buf_start, rel = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = parse_header(buf, rel)
            yield position, header
            position += header.length

    def find_position(self, offset: int) -> tuple[int, BatchHeader | None]:
        """Position of the batch that holds ``offset``, with its header; ``(size, None)`` if none."""
        bases = self._tail_bases
        if bases and offset >= bases[0]:
            if offset >= self.next_offset:
                return self.size, None
            return self._tail[bisect_right(bases, offset) - 1]
        _, position = self.index.lookup(offset)
        for pos, header in self.iter_headers(position):
            if header.base_offset + header.record_count > offset:
                return pos, header
        return self.size, None

    def last_header(self) -> tuple[int, BatchHeader] | None:
        """The last batch, found from the last index entry (the segment must be consistent)."""
        entries = self.index.entries()
        start = entries[-1][1] if entries else 0
        last = None
        for item in self.iter_headers(start):
            last = item
        return last


#: Called for each sealed segment a reader uses (the log's LRU of open descriptors).
TouchFn = Callable[[Segment], None]


def headers_between(
    segments: Sequence[Segment], start: int, stop: int, touch: TouchFn | None = None
) -> Iterator[BatchHeader]:
    """Headers of the batches of ``segments`` (a log's, in order) from the one holding ``start`` up
    to ``stop`` (exclusive)."""
    for segment in list(segments):
        if segment.next_offset <= start or segment.base_offset >= stop:
            continue
        if touch is not None and segment is not segments[-1]:
            touch(segment)
        position = segment.find_position(start)[0] if segment.base_offset < start else 0
        for _, header in segment.iter_headers(position):
            if header.base_offset >= stop:
                return
            yield header
