"""Sparse offset index of one segment: batch base offset -> file position.

An entry is added when at least ``interval_bytes`` have been written since the previous entry, so
a lookup lands at most ``interval_bytes`` (plus one batch) before the wanted batch. The index is
held in memory; it is written to ``<base>.index`` when its segment is sealed (rolled or closed) and
rebuilt from the segment's batch headers when that file is missing or does not match.

File format: ``b"HMQI"``, a version byte, then pairs of big-endian int64 ``(offset, position)``.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

_MAGIC = b"HMQI\x01"


class OffsetIndex:
    def __init__(self, base_offset: int, interval_bytes: int) -> None:
        self.base_offset = base_offset
        self.interval_bytes = interval_bytes
        self._offsets = array("q")
        self._positions = array("q")
        self._last_indexed_position = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def maybe_add(self, offset: int, position: int) -> None:
        """Record the batch that starts at ``position`` if enough bytes passed since the last entry."""
        if position - self._last_indexed_position >= self.interval_bytes:
            self._offsets.append(offset)
            self._positions.append(position)
            self._last_indexed_position = position

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``; the segment start if none."""
        i = bisect_right(self._offsets, offset)
        if i == 0:
            return self.base_offset, 0
        return self._offsets[i - 1], self._positions[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for batches starting at or after ``offset``."""
        i = bisect_right(self._offsets, offset - 1)
        del self._offsets[i:]
        del self._positions[i:]
        self._last_indexed_position = self._positions[-1] if self._positions else 0

    def clear(self) -> None:
        self.truncate_to(self.base_offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def write(self, path: Path) -> None:
        pairs = array("q")
        for offset, position in zip(self._offsets, self._positions, strict=True):
            pairs.append(offset)
            pairs.append(position)
        if sys.byteorder == "little":
            pairs.byteswap()
        tmp = path.with_suffix(".index.tmp")
        tmp.write_bytes(_MAGIC + pairs.tobytes())
        os.replace(tmp, path)

    def load(self, path: Path, segment_size: int) -> bool:
        """Load ``path``; return False (and stay empty) when it is missing or inconsistent."""
        try:
            data = path.read_bytes()
        except OSError:
            return False
        body = data[len(_MAGIC) :]
        if not data.startswith(_MAGIC) or len(body) % 16:
            return False
        pairs = array("q")
        pairs.frombytes(body)
        if sys.byteorder == "little":
            pairs.byteswap()
        offsets = pairs[0::2]
        positions = pairs[1::2]
        previous_offset, previous_position = self.base_offset - 1, -1
        for offset, position in zip(offsets, positions, strict=True):
            if offset <= previous_offset or position <= previous_position or position >= segment_size:
                return False
            previous_offset, previous_position = offset, position
        self._offsets = offsets
        self._positions = positions
        self._last_indexed_position = positions[-1] if positions else 0
        return True
