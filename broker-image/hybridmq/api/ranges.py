"""Sets of offsets kept as sorted, disjoint, merged ``[first, last]`` intervals.

Queues acknowledge messages one by one and out of order (competing consumers), so what is
acknowledged above a queue's cursor, and what of one delivery is still outstanding, are sets of
offsets. Acknowledgements mostly arrive in runs, so intervals keep them small: a slow consumer
holding five messages while others acknowledge thousands past them makes three intervals. The
broker keeps its cursors in them and a consumer what it handed to its application
(``hybridmq.client.redelivery``): here, so that both use one implementation (stdlib only).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator


class RangeSet:
    __slots__ = ("_firsts", "_lasts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        for first, last in ranges:
            self.add(first, last)

    def __bool__(self) -> bool:
        return bool(self._firsts)

    def __len__(self) -> int:
        """The number of intervals (not of offsets)."""
        return len(self._firsts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._firsts, self._lasts, strict=True))

    def count(self) -> int:
        """The number of offsets in the set."""
        return sum(last - first + 1 for first, last in self)

    def first(self) -> int:
        return self._firsts[0]

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self._firsts, offset) - 1
        return i >= 0 and self._lasts[i] >= offset

    def covers(self, first: int, last: int) -> bool:
        """Every offset of ``[first, last]`` is in the set."""
        i = bisect.bisect_right(self._firsts, first) - 1
        return i >= 0 and self._lasts[i] >= last

    def add(self, first: int, last: int) -> None:
        """Add ``[first, last]``, merging it with the intervals it touches or overlaps."""
        firsts, lasts = self._firsts, self._lasts
        if firsts and firsts[-1] <= first <= lasts[-1] + 1:  # the common case: in order, at the end
            lasts[-1] = max(lasts[-1], last)
            return
        lo = bisect.bisect_left(lasts, first - 1)  # first interval that could touch
        hi = bisect.bisect_right(firsts, last + 1)  # past the last one that could
        if lo < hi:
            first = min(first, firsts[lo])
            last = max(last, lasts[hi - 1])
        firsts[lo:hi] = [first]
        lasts[lo:hi] = [last]

    def remove(self, first: int, last: int) -> bool:
        """Remove ``[first, last]`` if the set holds all of it (else change nothing, False)."""
        i = bisect.bisect_right(self._firsts, first) - 1
        if i < 0 or self._lasts[i] < last:
            return False
        f, e = self._firsts[i], self._lasts[i]
        pieces = [(a, b) for a, b in ((f, first - 1), (last + 1, e)) if a <= b]
        self._firsts[i : i + 1] = [a for a, _ in pieces]
        self._lasts[i : i + 1] = [b for _, b in pieces]
        return True

    def next_missing(self, offset: int) -> int:
        """The first offset at or after ``offset`` that is not in the set."""
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i >= 0 and self._lasts[i] >= offset:
            return self._lasts[i] + 1
        return offset

    def missing_until(self, offset: int, limit: int) -> int:
        """The last offset of the run ``offset..limit`` holding none of the set (``offset`` is
        not in it)."""
        i = bisect.bisect_right(self._firsts, offset)
        if i < len(self._firsts) and self._firsts[i] <= limit:
            return self._firsts[i] - 1
        return limit

    def drop_first(self, n: int) -> None:
        """Forget the ``n`` lowest intervals."""
        del self._firsts[:n]
        del self._lasts[:n]

    def drop_below(self, low: int) -> None:
        """Forget the intervals that end below ``low``."""
        i = bisect.bisect_left(self._lasts, low)
        if i:
            del self._firsts[:i]
            del self._lasts[:i]

    def to_tuple(self, low: int = 0) -> tuple[tuple[int, int], ...]:
        return tuple((f, e) for f, e in self if e >= low)
