"""Delivery state of one subscription or queue in one partition, and the consumer links it feeds.

The storage and replication unit is a stored batch (what one producer batch became in the log); the
delivery and acknowledgement unit is the record. A delivery is a run of consecutive records of one
stored batch (a whole batch when it fits the consumer's window, as topics mostly get it), keyed by
its first offset; a consumer acknowledges or gives back any records of it, one by one or all at
once, so competing consumers of a queue share the records of one batch and a poison message is
rejected alone.

* ``ConsumerLink``: one consumer subscription as seen by an MM (a CM connection + the CM-wide
  subscription key). Its window (records and bytes in flight, unacknowledged) is the credit of the
  end-to-end flow control: a delivery never takes more than what is left of it (a consumer holding
  nothing still gets one record bigger than its byte window), the consumer's acks refill it.
* ``DeliveryState``: cursor of one topic subscription (one link at most; durable ones survive
  without a link) or of one queue (any number of competing links, round robin). ``lw`` (low
  watermark) is at or below the first offset that is not yet acknowledged; with ``acked``
  (acknowledged records above ``lw``) it is what gets persisted as a control record.

Delivery counts are per record: ``deliveries`` holds those handed out more than once;
``delivered_through`` is the end of the furthest record ever handed out, so after a failover every
unacknowledged record below it counts as delivered once (more when a ``Redelivery`` record says so).
A delivery only groups records with the same count. The host writes both ahead of the deliveries
they cover, so a count never goes back behind a delivery that was sent and an acknowledgement
names the attempt it acknowledges (``settle(..., attempt=)``). A delivery whose records could not
be committed was never sent: ``withdraw`` gives it back *uncounted* (``unsent`` holds first
deliveries withdrawn below the mark), so a primary that cannot commit for a while (its lease
lapsed) does not run a backlog's counts up to ``_DMQ`` without anyone getting it.

Streams (very large messages, one CHUNK batch per chunk) are one unit: the chunks of a stream go to
the consumer that got its first chunk; acknowledging a chunk before the final one frees the window
but is only *provisional* (``OpenStream.settled``), the cursor stays at the stream's first chunk
until the final chunk is acknowledged, and giving any chunk back gives the whole stream back, so it
is redelivered from its first chunk.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from hybridmq.api.ranges import RangeSet
from hybridmq.broker.destinations.batch_payload import split_spans
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

    def fits(self, sizes: list[int]) -> int:
        """How many of the records of ``sizes`` (bytes each, in order) fit the window left."""
        room = self.window - self.inflight
        left = self.window_bytes - self.inflight_bytes
        n = 0
        for size in sizes[: max(room, 0)]:
            if size > left and (n or self.inflight_bytes):  # one record may exceed an empty window
                break
            left -= size
            n += 1
        return n


@dataclass(eq=False)
class Pending:
    """One delivery: records ``start`` .. ``start + count - 1`` of one batch handed to ``link``;
    ``left`` the ones neither acknowledged nor given back yet."""

    start: int
    count: int
    size: int  # bytes of the records still left
    link: ConsumerLink
    blob: bytes  # what was delivered: the records blob (or a CHUNK's bytes)
    attempt: int = 1  # delivery count of this hand-out
    stream: str | None = None  # stream id of a CHUNK batch
    fin: bool = False  # the final chunk of its stream
    left: RangeSet = field(default_factory=RangeSet)
    _sizes: list[int] | None = None

    def take(self, first: int, last: int) -> tuple[int, int] | None:
        """Remove ``[first, last]`` from what is left: (records, bytes), None if not all left."""
        whole = first == self.start and last == self.start + self.count - 1 and len(self.left) == 1
        if not self.left.remove(first, last):
            return None
        if whole or not self.left:
            size, self.size = self.size, 0
            return last - first + 1, size
        if self._sizes is None:  # records are sized only when a delivery is split
            spans = split_spans(self.blob, self.count)
            self._sizes = [b - a for a, b in itertools.pairwise(spans)]
        size = sum(self._sizes[first - self.start : last - self.start + 1])
        self.size -= size
        return last - first + 1, size


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
    pending: dict[int, Pending] = field(default_factory=dict)  # first offset -> delivery
    redeliver: list[tuple[int, int]] = field(default_factory=list)  # heap of (first, last) given back
    deliveries: dict[int, int] = field(default_factory=dict)  # offset -> times delivered (> 1)
    acked: RangeSet = field(default_factory=RangeSet)  # acknowledged records above the cursor
    # Records handed out and neither acknowledged nor given back: what ``left`` of every pending
    # delivery holds. A delivery is keyed by its first offset, and that key stays while any of its
    # records is out, also when its first record was given back alone.
    outstanding: RangeSet = field(default_factory=RangeSet)
    streams: dict[str, OpenStream] = field(default_factory=dict)
    delivered_through: int = 0
    unsent: RangeSet = field(default_factory=RangeSet)  # below ``delivered_through``, never sent
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
            low = min(low, self.redeliver[0][0])
        for stream in self.streams.values():
            low = min(low, stream.start)
        return low

    def times_delivered(self, offset: int) -> int:
        """How often the record at ``offset`` has been handed out (at least once below the mark)."""
        if offset in self.deliveries:
            return self.deliveries[offset]
        return 1 if offset < self.delivered_through and offset not in self.unsent else 0

    def same_count_until(self, first: int, last: int) -> int:
        """The last offset of the run from ``first`` (up to ``last``) of equal delivery counts."""
        through = self.delivered_through
        if not self.deliveries and not self.unsent:
            return last if first >= through else min(last, through - 1)
        count = self.times_delivered(first)
        end = first
        while end < last and self.times_delivered(end + 1) == count:
            end += 1
        return end

    def stream_owner(self, stream: str | None) -> ConsumerLink | None:
        """The live consumer link reading ``stream``, if one is."""
        s = self.streams.get(stream) if stream is not None else None
        return s.link if s is not None and s.link in self.links else None

    def links_with_credit(self) -> list[ConsumerLink]:
        """Links that may take more, in round-robin order (the next one first)."""
        n = len(self.links)
        ordered = [self.links[(self.rr + i) % n] for i in range(n)]
        return [link for link in ordered if link.has_credit()]

    def picked(self, link: ConsumerLink) -> None:
        """``link`` got a delivery: the next round starts after it."""
        if link in self.links:
            self.rr = (self.links.index(link) + 1) % len(self.links)

    def record_delivery(
        self,
        first: int,
        count: int,
        size: int,
        link: ConsumerLink,
        blob: bytes,
        stream: str | None = None,
        fin: bool = False,
    ) -> int:
        """Hand records ``first`` .. ``first + count - 1`` (all with the same delivery count) to
        ``link``; returns their delivery count (1 = first time)."""
        times = self.times_delivered(first) + 1
        last = first + count - 1
        if times > 1:
            for offset in range(first, last + 1):
                self.deliveries[offset] = times
        elif self.unsent and first < self.delivered_through:
            # a run of count 0: inside one withdrawn interval, or reaching past the mark
            self.unsent.remove(first, min(last, self.delivered_through - 1))
        self.pending[first] = Pending(
            first, count, size, link, blob, times, stream, fin, RangeSet([(first, last)])
        )
        self.outstanding.add(first, last)
        self.delivered_through = max(self.delivered_through, last + 1)
        self.delivery_dirty = True
        if stream is not None and stream not in self.streams:
            self.streams[stream] = OpenStream(link, first)
        link.inflight += count
        link.inflight_bytes += size
        return times

    def _runs(
        self, start: int, first: int | None, last: int | None, link: ConsumerLink | None, attempt: int | None
    ) -> list[tuple[int, int]] | None:
        """The runs ``[first, last]`` names in the delivery at ``start`` (default: all it has left),
        None if it is not outstanding (on that link, at that attempt)."""
        p = self.pending.get(start)
        if p is None or (link is not None and p.link is not link):
            return None
        if attempt is not None and p.attempt != attempt:
            return None  # an acknowledgement of an earlier hand-out (before a failover)
        if first is None or last is None:
            return list(p.left)
        return [(first, last)] if p.left.covers(first, last) else None

    def _take(self, start: int, first: int, last: int) -> Pending:
        """Take ``[first, last]`` (outstanding: checked by ``_runs``) out of the delivery at ``start``."""
        p = self.pending[start]
        records, size = p.take(first, last) or (0, 0)
        if records:
            self.outstanding.remove(first, last)
        p.link.inflight -= records
        p.link.inflight_bytes -= size
        if not p.left:
            del self.pending[start]
        return p

    def settle(
        self,
        start: int,
        link: ConsumerLink | None = None,
        attempt: int | None = None,
        first: int | None = None,
        last: int | None = None,
    ) -> bool:
        """Acknowledge records ``[first, last]`` (default: all left) of the delivery at ``start``;
        False if they are not all outstanding there (for that link, at that attempt)."""
        runs = self._runs(start, first, last, link, attempt)
        if runs is None:
            return False
        for f, e in runs:
            p = self._take(start, f, e)
            stream = self.streams.get(p.stream) if p.stream is not None else None
            if stream is not None and not p.fin:
                stream.settled.append((f, e))  # provisional until the final chunk
                continue
            if stream is not None:
                del self.streams[p.stream]  # type: ignore[arg-type]
                for b, end in stream.settled:
                    self.mark_acked(b, end)
            self.mark_acked(f, e)
        return True

    def mark_acked(self, first: int, last: int) -> None:
        if self.deliveries:
            for offset in range(first, last + 1):
                self.deliveries.pop(offset, None)
        self.acked.add(first, last)
        self.dirty = True
        if len(self.acked) > 64:
            self.acked.drop_below(self.lw())
        if self.unsent:
            self.unsent.drop_below(self.lw())

    def give_back(
        self,
        start: int,
        first: int | None = None,
        last: int | None = None,
        link: ConsumerLink | None = None,
        attempt: int | None = None,
    ) -> bool:
        """Records ``[first, last]`` (default: all left) of the delivery at ``start`` go back to be
        redelivered (a chunk: its whole stream); False if they are not outstanding."""
        runs = self._runs(start, first, last, link, attempt)
        if runs is None:
            return False
        for f, e in runs:
            p = self._take(start, f, e)
            heapq.heappush(self.redeliver, (f, e))
            if p.stream is not None:
                self._give_back_stream(p.stream)
        return True

    def withdraw(self, start: int, count: int, link: ConsumerLink, attempt: int) -> None:
        """The delivery of ``count`` records at ``start`` (hand-out ``attempt``) was never sent
        (its delivery records could not be committed): back to be handed out again, its count
        undone (what a given-back chunk drags along of its stream was sent, and stays counted)."""
        p = self.pending.get(start)
        if p is not None and p.link is link and p.attempt == attempt:
            self.give_back(start, link=link, attempt=attempt)
        last = start + count - 1
        if self.times_delivered(start) != attempt:
            return  # acknowledged or handed out again meanwhile
        if attempt > 1:
            for offset in range(start, last + 1):
                if attempt > 2:
                    self.deliveries[offset] = attempt - 1
                else:
                    self.deliveries.pop(offset, None)  # once, as below the mark
        else:
            self.unsent.add(start, last)
        self.delivery_dirty = True

    def reject(
        self, start: int, first: int | None, last: int | None, link: ConsumerLink, attempt: int | None
    ) -> list[tuple[int, int]] | None:
        """Records a consumer refuses for good: no longer outstanding (the host moves them to
        ``_DMQ``); their runs, None if not outstanding (or a chunk: streams are given back)."""
        p = self.pending.get(start)
        runs = self._runs(start, first, last, link, attempt)
        if p is None or p.stream is not None or runs is None:
            return None
        for f, e in runs:
            self._take(start, f, e)
        return runs

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
        for b, e in stream.settled:
            heapq.heappush(self.redeliver, (b, e))
        for b in [b for b, p in self.pending.items() if p.stream == sid]:
            self.give_back(b)

    def detach(self, link: ConsumerLink) -> None:
        if link in self.links:
            self.links.remove(link)
        for start in [b for b, p in self.pending.items() if p.link is link]:
            self.give_back(start)
        for sid in [sid for sid, s in self.streams.items() if s.link is link]:
            self._give_back_stream(sid)

    def snapshot(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """``(lw, acked ranges reaching lw or above)``: what a CursorCommit + AckRanges control
        record holds."""
        low = self.lw()
        return low, self.acked.to_tuple(low)

    def restore(self, lw: int, ranges: Any, delivered_through: int = 0, counts: Any = ()) -> None:
        """Back to a recovered cursor, delivery mark and ``(offset, count)`` redelivery counts."""
        self.next_offset = int(lw)
        self.acked = RangeSet((int(b), int(e)) for b, e in ranges)
        self.delivered_through = max(self.delivered_through, int(delivered_through))
        self.unsent = RangeSet()
        self.deliveries = {
            int(o): int(n) for o, n in counts if int(o) >= self.next_offset and int(o) not in self.acked
        }


def pop_redelivery(state: DeliveryState) -> tuple[int, int] | None:
    """The next run given back that is neither acknowledged nor handed out again meanwhile (the
    records of a run are checked one by one: what is out again is skipped, the rest stays due).

    A record that is the key of a delivery still out (its first record, given back alone while the
    consumer holds the others) waits until that delivery is settled: a delivery is named by its
    first offset, so it cannot go out again under the same name before."""
    waiting: list[tuple[int, int]] = []
    try:
        while state.redeliver:
            first, last = heapq.heappop(state.redeliver)
            first = _next_due(state, first)
            if first > last:
                continue
            if first in state.pending:
                waiting.append((first, first))
                if first < last:
                    heapq.heappush(state.redeliver, (first + 1, last))
                continue
            end = min(state.acked.missing_until(first, last), state.outstanding.missing_until(first, last))
            if end < last:
                heapq.heappush(state.redeliver, (end + 1, last))
            return first, end
        return None
    finally:
        for run in waiting:
            heapq.heappush(state.redeliver, run)


def _next_due(state: DeliveryState, offset: int) -> int:
    """The first offset at or after ``offset`` neither acknowledged nor outstanding."""
    while True:
        due = state.outstanding.next_missing(state.acked.next_missing(offset))
        if due == offset:
            return due
        offset = due
