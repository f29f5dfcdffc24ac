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

from collections.abc import Iterable

from hybridmq.api.ranges import RangeSet
from hybridmq.client.message import Message


class OffsetRuns:
    """A set of offsets (``RangeSet``: sorted, disjoint, merged runs) of at most ``capacity`` runs."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._runs = RangeSet()

    def __contains__(self, offset: int) -> bool:
        return offset in self._runs

    def __len__(self) -> int:
        """The number of runs."""
        return len(self._runs)

    def add(self, offset: int) -> None:
        self._runs.add(offset, offset)
        self._bound()

    def discard(self, offset: int) -> None:
        self._runs.remove(offset, offset)
        self._bound()

    def _bound(self) -> None:
        excess = len(self._runs) - self.capacity
        if excess > 0:  # forget the lowest runs, an eighth at a time (not one list shift per add)
            self._runs.drop_first(max(excess, self.capacity // 8))

    def runs(self) -> list[tuple[int, int]]:
        return list(self._runs)


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
