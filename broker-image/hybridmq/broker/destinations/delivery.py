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

Delivery counts: ``deliveries`` counts the hand-outs of each outstanding batch; ``delivered_through``
is the end of the furthest batch ever handed out, so after a failover every unacknowledged batch below
it counts as delivered once (more when a ``Redelivery`` record says so). The host writes both ahead of
the deliveries they cover, so a count never goes back and an acknowledgement names the attempt it
acknowledges (``settle(..., attempt=)``).

Streams (very large messages, one CHUNK batch per chunk) are one unit: the chunks of a stream go to
the consumer that got its first chunk; acknowledging a chunk before the final one frees the window
but is only *provisional* (``OpenStream.settled``), the cursor stays at the stream's first chunk
until the final chunk is acknowledged, and giving any chunk back gives the whole stream back, so it
is redelivered from its first chunk.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from hybridmq.broker.destinations.matching import Matcher


@dataclass(eq=False)
class ConsumerLink:
    conn: Any  # hybridmq.protocol.Connection (kept loose to avoid an import cycle)
    key: str
    window: int
    window_bytes: int
    inflight: int = 0
    inflight_bytes: int = 0
    states: list[DeliveryState] = field(default_factory=list)
    allow: tuple[str, ...] | None = None  # the subscriber's consume grants (None: no ACLs)
    # (pattern, match mode, durable name): attached again to partitions the MM starts hosting later
    subscriptions: list[tuple[str, str, str | None]] = field(default_factory=list)

    def has_credit(self) -> bool:
        return (
            self.inflight < self.window and self.inflight_bytes < self.window_bytes and not self.conn.closed
        )


@dataclass
class Pending:
    count: int
    size: int
    link: ConsumerLink
    attempt: int = 1  # delivery count of this hand-out
    stream: str | None = None  # stream id of a CHUNK batch
    fin: bool = False  # the final chunk of its stream


@dataclass
class OpenStream:
    """A stream being handed to one consumer: its first chunk and the chunks it acknowledged."""

    link: ConsumerLink
    start: int
    settled: list[tuple[int, int]] = field(default_factory=list)  # (base, last) of acked chunks


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
    streams: dict[str, OpenStream] = field(default_factory=dict)
    delivered_through: int = 0
    rr: int = 0
    dirty: bool = False
    delivery_dirty: bool = False

    @property
    def persistent(self) -> bool:
        return self.is_queue or self.durable

    def lw(self) -> int:
        low = self.next_offset
        if self.pending:
            low = min(low, min(self.pending))
        if self.redeliver:
            low = min(low, self.redeliver[0])
        for stream in self.streams.values():
            low = min(low, stream.start)
        return low

    def times_delivered(self, base: int) -> int:
        """How often the batch at ``base`` has been handed out (at least once below the mark)."""
        return self.deliveries.get(base) or (1 if base < self.delivered_through else 0)

    def stream_owner(self, stream: str | None) -> ConsumerLink | None:
        """The live consumer link reading ``stream``, if one is."""
        s = self.streams.get(stream) if stream is not None else None
        return s.link if s is not None and s.link in self.links else None

    def pick_link(self) -> ConsumerLink | None:
        n = len(self.links)
        for i in range(n):
            link = self.links[(self.rr + i) % n]
            if link.has_credit():
                self.rr = (self.rr + i + 1) % n
                return link
        return None

    def record_delivery(
        self,
        base: int,
        count: int,
        size: int,
        link: ConsumerLink,
        stream: str | None = None,
        fin: bool = False,
    ) -> int:
        """Hand the batch at ``base`` to ``link``; returns its delivery count (1 = first time)."""
        times = self.times_delivered(base) + 1
        self.deliveries[base] = times
        self.pending[base] = Pending(count, size, link, times, stream, fin)
        self.delivered_through = max(self.delivered_through, base + count)
        self.delivery_dirty = True
        if stream is not None and stream not in self.streams:
            self.streams[stream] = OpenStream(link, base)
        link.inflight += count
        link.inflight_bytes += size
        return times

    def settle(self, base: int, link: ConsumerLink | None = None, attempt: int | None = None) -> bool:
        """Acknowledge ``base``; False if it was not pending (for that link, at that attempt)."""
        p = self.pending.get(base)
        if p is None or (link is not None and p.link is not link):
            return False
        if attempt is not None and p.attempt != attempt:
            return False  # an acknowledgement of an earlier hand-out (before a failover)
        del self.pending[base]
        p.link.inflight -= p.count
        p.link.inflight_bytes -= p.size
        last = base + p.count - 1
        stream = self.streams.get(p.stream) if p.stream is not None else None
        if stream is not None and not p.fin:
            stream.settled.append((base, last))  # provisional until the final chunk
            return True
        if stream is not None:
            del self.streams[p.stream]  # type: ignore[arg-type]
            for b, e in stream.settled:
                self.deliveries.pop(b, None)
                self.mark_acked(b, e)
        self.deliveries.pop(base, None)
        self.mark_acked(base, last)
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
        if p.stream is not None:
            self._give_back_stream(p.stream)

    def give_back_stream_of(self, base: int, link: ConsumerLink) -> bool:
        """A consumer gives up a stream it is reading, by a chunk it already acknowledged."""
        for sid, stream in self.streams.items():
            if stream.link is link and any(b == base for b, _ in stream.settled):
                self._give_back_stream(sid)
                return True
        return False

    def _give_back_stream(self, sid: str) -> None:
        """The whole stream goes back, to be redelivered from its first chunk."""
        stream = self.streams.pop(sid, None)
        if stream is None:
            return
        for b, _ in stream.settled:
            heapq.heappush(self.redeliver, b)
        for b in [b for b, p in self.pending.items() if p.stream == sid]:
            self.give_back(b)

    def detach(self, link: ConsumerLink) -> None:
        if link in self.links:
            self.links.remove(link)
        for base in [b for b, p in self.pending.items() if p.link is link]:
            self.give_back(base)
        for sid in [sid for sid, s in self.streams.items() if s.link is link]:
            self._give_back_stream(sid)

    def snapshot(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """``(lw, acked ranges above lw)``: what a CursorCommit + AckRanges control record holds."""
        low = self.lw()
        return low, tuple(sorted((b, e) for b, e in self.acked.items() if b >= low))

    def restore(self, lw: int, ranges: Any, delivered_through: int = 0, counts: Any = ()) -> None:
        """Back to a recovered cursor, delivery mark and ``(base, count)`` redelivery counts."""
        self.next_offset = int(lw)
        self.acked = {int(b): int(e) for b, e in ranges}
        self.delivered_through = max(self.delivered_through, int(delivered_through))
        self.deliveries = {
            int(b): int(n) for b, n in counts if int(b) >= self.next_offset and int(b) not in self.acked
        }


def pop_redelivery(state: DeliveryState) -> int | None:
    while state.redeliver:
        base = heapq.heappop(state.redeliver)
        if base not in state.pending and base not in state.acked:
            return base
    return None
