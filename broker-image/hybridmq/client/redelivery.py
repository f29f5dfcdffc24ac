"""What a consumer handed to its application, to drop the redeliveries a CM failover causes.

After a consumer's CM died and it subscribed again elsewhere, a durable subscription resumes from
its cursor: everything not acknowledged comes again, also what the application already got. Per
partition the highest offset handed out is enough for topics (a subscription is fed in offset
order); queues are redelivered in any order, so the last ``capacity`` message ids are kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from hybridmq.client.message import Message


class SeenIds:
    """The last ``capacity`` message ids (queues: redeliveries may come in any order)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[tuple[str, int], None] = OrderedDict()

    def __contains__(self, item: tuple[str, int]) -> bool:
        return item in self._ids

    def add(self, item: tuple[str, int]) -> None:
        self._ids[item] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)


class HandedOut:
    def __init__(self, by_offset: bool, capacity: int) -> None:
        self.by_offset = by_offset
        self._high: dict[str, int] = {}
        self._seen = SeenIds(capacity)

    def add(self, partition: str, offset: int) -> None:
        if self.by_offset:
            if offset > self._high.get(partition, -1):
                self._high[partition] = offset
        else:
            self._seen.add((partition, offset))

    def add_batch(self, messages: Sequence[Message]) -> None:
        """Messages of one delivered batch, in offset order."""
        if self.by_offset:
            self.add(messages[-1].partition, messages[-1].offset)
        else:
            for m in messages:
                self._seen.add((m.partition, m.offset))

    def __contains__(self, item: tuple[str, int]) -> bool:
        if self.by_offset:
            return item[1] <= self._high.get(item[0], -1)
        return item in self._seen
