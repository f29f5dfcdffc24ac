"""Delivery state of one subscription or queue in one partition, and the consumer links it feeds.

The delivery unit is a stored batch (what one producer batch became in the log): CM and MM never
split batches, consumers acknowledge a batch by its base offset once they processed its records.

* ``ConsumerLink``: one consumer subscription as seen by an MM (a CM connection + the CM-wide
  subscription key). Its window (records and bytes in flight, unacknowledged) is the credit of the
  end-to-end flow control: the MM stops delivering when it is used up, the consumer's acks refill it.
* ``DeliveryState``: cursor of one topic subscription (one link at most; durable ones survive
  without a link) or of one queue (any number of competing links, round robin). ``lw`` (low
  watermark) is the first offset that is not yet acknowledged; with ``acked`` (acknowledged batches
  above ``lw``) it is what gets persisted as a control record.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from hybridmq.broker.destinations.matching import Matcher


@dataclass(eq=False)
class ConsumerLink:
    conn: Any  # hybridmq.broker.protocol.Connection (kept loose to avoid an import cycle)
    key: str
    window: int
    window_bytes: int
    inflight: int = 0
    inflight_bytes: int = 0
    states: list[DeliveryState] = field(default_factory=list)
    allow: tuple[str, ...] | None = None  # the subscriber's consume grants (None: no ACLs)

    def has_credit(self) -> bool:
        return (
            self.inflight < self.window and self.inflight_bytes < self.window_bytes and not self.conn.closed
        )


@dataclass
class Pending:
    count: int
    size: int
    link: ConsumerLink


@dataclass(eq=False)
class DeliveryState:
    key: str  # "q:<queue>" | "d:<durable name>" | "s:<sub key>"
    matcher: Matcher
    next_offset: int
    is_queue: bool
    durable: bool
    links: list[ConsumerLink] = field(default_factory=list)
    pending: dict[int, Pending] = field(default_factory=dict)
    redeliver: list[int] = field(default_factory=list)  # heap of base offsets
    deliveries: dict[int, int] = field(default_factory=dict)  # base -> times delivered
    acked: dict[int, int] = field(default_factory=dict)  # base -> last offset of acked batches
    rr: int = 0
    dirty: bool = False

    @property
    def persistent(self) -> bool:
        return self.is_queue or self.durable

    def lw(self) -> int:
        low = self.next_offset
        if self.pending:
            low = min(low, min(self.pending))
        if self.redeliver:
            low = min(low, self.redeliver[0])
        return low

    def pick_link(self) -> ConsumerLink | None:
        n = len(self.links)
        for i in range(n):
            link = self.links[(self.rr + i) % n]
            if link.has_credit():
                self.rr = (self.rr + i + 1) % n
                return link
        return None

    def record_delivery(self, base: int, count: int, size: int, link: ConsumerLink) -> int:
        times = self.deliveries.get(base, 0) + 1
        self.deliveries[base] = times
        self.pending[base] = Pending(count, size, link)
        link.inflight += count
        link.inflight_bytes += size
        return times - 1

    def settle(self, base: int, link: ConsumerLink | None = None) -> bool:
        """Acknowledge ``base``; returns False if it was not pending (for that link)."""
        p = self.pending.get(base)
        if p is None or (link is not None and p.link is not link):
            return False
        del self.pending[base]
        p.link.inflight -= p.count
        p.link.inflight_bytes -= p.size
        self.deliveries.pop(base, None)
        self.mark_acked(base, base + p.count - 1)
        return True

    def mark_acked(self, base: int, last: int) -> None:
        self.acked[base] = last
        self.dirty = True
        if len(self.acked) > 64:
            low = self.lw()
            self.acked = {b: e for b, e in self.acked.items() if b >= low}

    def give_back(self, base: int) -> None:
        p = self.pending.pop(base, None)
        if p is None:
            return
        p.link.inflight -= p.count
        p.link.inflight_bytes -= p.size
        heapq.heappush(self.redeliver, base)

    def detach(self, link: ConsumerLink) -> None:
        if link in self.links:
            self.links.remove(link)
        for base in [b for b, p in self.pending.items() if p.link is link]:
            self.give_back(base)

    def snapshot(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """``(lw, acked ranges above lw)``: what a CursorCommit + AckRanges control record holds."""
        low = self.lw()
        return low, tuple(sorted((b, e) for b, e in self.acked.items() if b >= low))

    def restore(self, lw: int, ranges: Any) -> None:
        self.next_offset = int(lw)
        self.acked = {int(b): int(e) for b, e in ranges}


def pop_redelivery(state: DeliveryState) -> int | None:
    while state.redeliver:
        base = heapq.heappop(state.redeliver)
        if base not in state.pending and base not in state.acked:
            return base
    return None
