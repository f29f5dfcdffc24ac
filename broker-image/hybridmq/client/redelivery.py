"""What a consumer handed to its application, to drop the redeliveries a CM failover causes.

After a consumer's CM died and it subscribed again elsewhere, a durable subscription resumes from
its cursor and a queue hands out again what the lost connection held: everything not acknowledged
comes again, also what the application already got. Those repeats are dropped by their exact
offsets: per partition the runs of consecutive offsets handed out (one run while a subscription is
fed in order). A high mark would be smaller but wrong: a delivery can come behind a later one (given
back by a NACK, or withdrawn by a primary whose commit failed), and a mark drops it unseen, which
loses it. What the application gives back (``discard``) is no longer handed out: its redelivery must
reach it. Bounded by ``capacity`` runs per partition; the lowest are forgotten first, an eighth of
them at a time (a repeat of a forgotten one is handed out again: a duplicate, never a loss).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from hybridmq.client.message import Message


class OffsetRuns:
    """A set of offsets kept as sorted, disjoint, non-adjacent runs ``[start, end]``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._starts: list[int] = []
        self._ends: list[int] = []

    def __contains__(self, offset: int) -> bool:
        i = bisect_right(self._starts, offset) - 1
        return i >= 0 and offset <= self._ends[i]

    def __len__(self) -> int:
        """The number of runs."""
        return len(self._starts)

    def add(self, offset: int) -> None:
        starts, ends = self._starts, self._ends
        if ends and ends[-1] == offset - 1:  # the common case: the next offset in order
            ends[-1] = offset
            return
        i = bisect_right(starts, offset) - 1
        if i >= 0 and offset <= ends[i]:
            return
        joins_left = i >= 0 and ends[i] == offset - 1
        joins_right = i + 1 < len(starts) and starts[i + 1] == offset + 1
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif joins_left:
            ends[i] = offset
        elif joins_right:
            starts[i + 1] = offset
        else:
            starts.insert(i + 1, offset)
            ends.insert(i + 1, offset)
            self._bound()

    def discard(self, offset: int) -> None:
        i = bisect_right(self._starts, offset) - 1
        if i < 0 or offset > self._ends[i]:
            return
        start, end = self._starts[i], self._ends[i]
        if start == end:
            del self._starts[i], self._ends[i]
        elif offset == start:
            self._starts[i] = offset + 1
        elif offset == end:
            self._ends[i] = offset - 1
        else:
            self._ends[i] = offset - 1
            self._starts.insert(i + 1, offset + 1)
            self._ends.insert(i + 1, end)
            self._bound()

    def _bound(self) -> None:
        excess = len(self._starts) - self.capacity
        if excess > 0:  # forget the lowest runs, an eighth at a time (not one list shift per add)
            drop = max(excess, self.capacity // 8)
            del self._starts[:drop], self._ends[:drop]

    def runs(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))


class HandedOut:
    """Per partition the offsets handed to the application and not given back."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._by_partition: dict[str, OffsetRuns] = {}

    def _runs(self, partition: str) -> OffsetRuns:
        runs = self._by_partition.get(partition)
        if runs is None:
            runs = self._by_partition[partition] = OffsetRuns(self.capacity)
        return runs

    def add(self, partition: str, offset: int) -> None:
        self._runs(partition).add(offset)

    def add_batch(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self._runs(m.partition).add(m.offset)

    def discard(self, partition: str, offset: int) -> None:
        """The application gave the message back: a redelivery of it is for the application."""
        runs = self._by_partition.get(partition)
        if runs is not None:
            runs.discard(offset)

    def __contains__(self, item: tuple[str, int]) -> bool:
        runs = self._by_partition.get(item[0])
        return runs is not None and item[1] in runs
