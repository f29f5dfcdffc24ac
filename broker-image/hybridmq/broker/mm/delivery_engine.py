"""The delivery engine of one partition: queues and subscriptions, hand-out, redelivery, ``_DMQ``.

``pump`` walks each DeliveryState from its position, skipping batches of other destinations and
acknowledged records, and hands out DELIVER frames while the consumer links have credit: each a run
of records of one stored batch, as many as the link's window has room for (the whole batch when it
fits, so topics keep getting whole batches; a queue's batch is shared out among its consumers).
Queues redeliver what a departed consumer left unacknowledged or a NACK gave back, record by record;
a record past ``max_redeliveries`` or its expiry, or rejected by a consumer, is moved to
``queue:_DMQ`` alone with its original destination and the reason.

The engine reads the partition's visible batches (``PartitionStorage.batch_at``) and writes nothing
to the log itself. What it needs of its partition is handed to it: the epoch and whether the
primary may write (both change under it), the fenced ``append_internal`` for ``_DMQ`` moves, and
``round_needed`` to ask the partition's control committer for a round. Deliveries to queues and
durable subscriptions wait in the outbox for that round, which takes them (``take_outbox``), writes
what counts them (``cursor_records``) and sends them once committed, or ``withdraw``s them.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from hybridmq.api.frames import DMQ_DESTINATION, BatchFlag, FrameType
from hybridmq.broker.destinations.batch_payload import StoredBatch, slice_records, split_spans
from hybridmq.broker.destinations.delivery import ConsumerLink, DeliveryState, pop_redelivery
from hybridmq.broker.destinations.matching import make_matcher
from hybridmq.broker.log.control import AckRanges, ControlRecord, CursorCommit, DeliveredThrough, Redelivery
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.protocol.connection import ConnectionClosed

log = logging.getLogger(__name__)

Outgoing = tuple[DeliveryState, ConsumerLink, dict[str, Any]]  # a delivery waiting for its round


class AppendInternal(Protocol):
    """The partition's fenced append of a batch the broker produces (``CommitError`` when fenced)."""

    def __call__(
        self, dest: str, count: int, blob: bytes, flags: int = 0, extra: dict[str, Any] | None = None
    ) -> None: ...


class DeliveryEngine:
    def __init__(
        self,
        name: str,
        storage: PartitionStorage,
        *,
        epoch: Callable[[], int],
        writable: Callable[[], bool],
        append_internal: AppendInternal,
        round_needed: Callable[[], None],
        max_redeliveries: int = 5,
    ) -> None:
        self.name = name
        self.storage = storage
        self._epoch = epoch
        self._writable = writable
        self._append_internal = append_internal
        self._round_needed = round_needed
        self.max_redeliveries = max_redeliveries
        self.states: dict[str, DeliveryState] = {}
        self.queue_patterns: list[tuple[ConsumerLink, Any]] = []
        # Waiting for the control committer: deliveries (sent once their records are committed)
        # and the Redelivery records counting them.
        self._outbox: list[Outgoing] = []
        self._redeliveries: list[ControlRecord] = []
        # Where the records of recently split batches start (base -> ``record_spans``): a queue's
        # batch is handed out in window-sized runs, found once.
        self._spans: dict[int, list[int]] = {}

    # -- queues and subscriptions --------------------------------------------------------------------
    def queue_state(self, dest: str, start: int) -> DeliveryState:
        """A new queue's state, starting at ``start``, with the consumers whose pattern matches it."""
        state = DeliveryState("q:" + dest, make_matcher(dest), start, True, False)
        self.states[state.key] = state
        for link, matcher in self.queue_patterns:
            if matcher(dest):
                state.links.append(link)
                link.states.append(state)
        return state

    def attach(self, link: ConsumerLink, pattern: str, mode: str, durable: str | None) -> None:
        matcher = make_matcher(pattern, mode, link.allow)
        if pattern.startswith("queue:"):
            self.queue_patterns.append((link, matcher))
            if mode == "exact" and ("q:" + pattern) not in self.states:
                self.queue_state(pattern, self.storage.end_offset)
            for state in self.states.values():
                if state.is_queue and matcher(state.key[2:]) and link not in state.links:
                    state.links.append(link)
                    link.states.append(state)
            return
        if durable:
            key = f"d:{durable}|{mode}|{pattern}"
            existing = self.states.get(key)
            if existing is None:
                state = DeliveryState(key, matcher, self.storage.end_offset, False, True)
                state.dirty = True  # committed at once: it starts here, also after a failover
                self._round_needed()
                self.states[key] = state
            else:
                state = existing
                state.matcher = matcher  # the attaching subscriber's grants, not a recovered pattern
            for old in list(state.links):
                state.detach(old)
        else:
            state = DeliveryState("s:" + link.key, matcher, self.storage.end_offset, False, False)
            self.states[state.key] = state
        state.links.append(link)
        link.states.append(state)

    def detach(self, link: ConsumerLink) -> None:
        self.queue_patterns = [(lk, m) for lk, m in self.queue_patterns if lk is not link]
        for state in [s for s in link.states if self.states.get(s.key) is s]:
            attached = link in state.links  # not when a new subscriber of a durable replaced it
            state.detach(link)
            if not state.persistent:
                self.states.pop(state.key, None)
            elif not state.is_queue and attached:
                # durable subscription left alone: rewind to its cursor for the next consumer
                state.next_offset = state.lw()
                state.redeliver.clear()
        link.states = [s for s in link.states if self.states.get(s.key) is not s]

    def settle(
        self,
        link: ConsumerLink,
        start: int,
        nack: bool = False,
        attempt: int | None = None,
        first: int | None = None,
        last: int | None = None,
        requeue: bool = True,
    ) -> bool:
        """Settle records ``[first, last]`` (default: all left) of the delivery at ``start`` handed
        to ``link`` (at delivery ``attempt``); with ``nack`` give them back for redelivery, or
        without ``requeue`` move them to ``_DMQ``. False when the records are not outstanding on
        ``link`` at that attempt."""
        done = False
        # The link reaches every partition of this MM: only this partition's states count (an
        # offset means nothing in another partition).
        for state in [s for s in link.states if self.states.get(s.key) is s]:
            p = state.pending.get(start)
            if p is not None and p.link is link:
                if nack and not requeue and state.is_queue and p.stream is None:
                    runs = state.reject(start, first, last, link, attempt)
                    for f, e in runs or ():
                        self._reject(state, f, e)
                    done = runs is not None
                elif nack:
                    done = state.give_back(start, first, last, link, attempt)
                else:
                    done = state.settle(start, link, attempt, first, last)
                break
            if nack and p is None and state.give_back_stream_of(start, link):
                done = True
                break
        return done

    def _reject(self, state: DeliveryState, first: int, last: int) -> None:
        """Records a consumer rejected without requeue go to ``_DMQ`` (they are not outstanding)."""
        while first <= last:
            batch = self.storage.batch_at(first)
            if batch is None or batch.base > first:  # deleted meanwhile: nothing to move
                state.mark_acked(first, last)
                return
            end = min(last, batch.next_offset - 1)
            if not self._to_dmq(state, batch, first, end, "rejected by a consumer"):
                # Fenced: given back instead (the rejection's answer fails with the round).
                heapq.heappush(state.redeliver, (first, last))
                return
            first = end + 1

    # -- hand-out ----------------------------------------------------------------------------------
    def pump(self) -> bool:
        """Deliver what the links have credit for; True if anything was sent."""
        sent = False
        now = int(time.time() * 1000)
        # A fenced primary cannot commit the records that count a delivery to a queue or durable
        # subscription: handed out now, it would only be given back, counted, round after round,
        # until ``max_redeliveries`` moved it to _DMQ without any consumer having seen it.
        fenced = not self._writable()
        for state in list(self.states.values()):
            if not state.links:
                self._pass_others(state)
                continue
            if fenced and state.persistent:
                self._round_needed()  # its failed round waits for the lease, then wakes us
                continue
            while True:
                links = state.links_with_credit()
                if not links:
                    break
                taken = self._next_for(state, now)
                if taken is None:
                    break
                batch, first, last, again = taken
                stream = (batch.extra or {}).get("sid") if batch.flags & BatchFlag.CHUNK else None
                owner = state.stream_owner(stream)
                if owner is not None:
                    links = [owner]  # a stream's chunks all go to one consumer
                fitted = self._fit(links, batch, first, last, [owner] if owner is not None else state.links)
                if fitted is None:  # no link has room for the next record: it waits
                    _put_back(state, first, last, again)
                    break
                link, end, blob, size = fitted
                if end < last:  # the rest of the run goes to the next link with room
                    if again:
                        heapq.heappush(state.redeliver, (end + 1, last))
                    else:
                        state.next_offset = end + 1
                state.picked(link)
                fin = bool((batch.extra or {}).get("fin")) if stream is not None else False
                count = end - first + 1
                attempt = state.record_delivery(first, count, size, link, blob, stream, fin)
                frame = {
                    "t": FrameType.DELIVER,
                    "s": link.key,
                    "p": self.name,
                    "d": batch.dest,
                    "o": first,
                    "n": count,
                    "b": blob,
                    "f": batch.flags,
                    "rd": attempt - 1,
                    "e": self._epoch(),  # a consumer drops it once revoked by a failover
                    "xa": batch.extra,
                    "ts": batch.timestamp,
                }
                if state.persistent:  # sent once the records counting it are committed
                    if attempt > 1:
                        self._redeliveries.append(Redelivery(state.key, first, attempt, count))
                    self._outbox.append((state, link, frame))
                    self._round_needed()
                else:
                    send(link.conn, frame)
                sent = True
        return sent

    def _pass_others(self, state: DeliveryState) -> None:
        """A queue or durable subscription nobody consumes moves its cursor past records that are
        not its own (other destinations', control records), as it would while consumed: only its
        own records are its backlog (``max_backlog`` holds producers by it) and hold retention. Not
        committed on its own (retention writes every cursor before it deletes anything)."""
        while state.next_offset < self.storage.visible_end:
            batch = self.storage.batch_at(state.next_offset)
            if batch is None or (not batch.control and state.matcher(batch.dest)):
                return
            state.next_offset = batch.next_offset

    def _fit(
        self,
        links: list[ConsumerLink],
        batch: StoredBatch,
        first: int,
        last: int,
        everyone: list[ConsumerLink],
    ) -> tuple[ConsumerLink, int, bytes, int] | None:
        """The first of ``links`` with room for records of ``first`` .. ``last``: (link, last
        offset it takes, the records blob, its records' bytes), None to wait for room.

        The run goes whole to a link with room for all of it; while one of ``everyone`` could
        take it whole once its window refills, it waits for that (a whole batch goes as it was
        stored, without looking into it: what topics get). Only a run bigger than every window
        is split, into the records a link has room for (a queue's consumers share it)."""
        chunk = bool(batch.flags & BatchFlag.CHUNK)
        spans: list[int] | None = None
        if first == batch.base and last == batch.next_offset - 1:
            size = len(batch.blob) if chunk else len(batch.blob) - _array_header_len(batch.blob)
        else:
            spans = self._record_spans(batch)
            size = spans[last - batch.base + 1] - spans[first - batch.base]
        count = last - first + 1
        for link in links:
            if count <= link.window - link.inflight and size <= link.window_bytes - link.inflight_bytes:
                blob = batch.blob if spans is None else self._slice(batch, spans, first, last)
                return link, last, blob, size
        if any(count <= link.window and size <= link.window_bytes for link in everyone):
            return None
        spans = spans or (None if chunk else self._record_spans(batch))
        if spans is None or spans[0] == 0:  # one record bigger than the window, or a batch whose
            # records cannot be located: whole, to a consumer holding nothing
            empty = next((lk for lk in links if lk.fits([size])), None)
            return None if empty is None else (empty, last, batch.blob, size)
        i, j = first - batch.base, last - batch.base + 1
        sizes = [b - a for a, b in itertools.pairwise(spans[i : j + 1])]
        for link in links:
            n = link.fits(sizes)
            if n:
                return link, first + n - 1, self._slice(batch, spans, first, first + n - 1), sum(sizes[:n])
        return None

    def _slice(self, batch: StoredBatch, spans: list[int], first: int, last: int) -> bytes:
        return slice_records(batch.blob, spans, first - batch.base, last - batch.base + 1)

    def _record_spans(self, batch: StoredBatch) -> list[int]:
        spans = self._spans.get(batch.base)
        if spans is None:
            if len(self._spans) >= 256:
                self._spans.clear()
            spans = self._spans[batch.base] = split_spans(batch.blob, batch.n)
        return spans

    def _next_for(self, state: DeliveryState, now: int) -> tuple[StoredBatch, int, int, bool] | None:
        """The next run of records to hand out (one batch, one delivery count), and whether it
        was given back before (taken from the heap)."""
        while True:
            run = pop_redelivery(state) if state.redeliver else None
            if run is not None:
                first, last = run
                batch = self.storage.batch_at(first)
                if batch is None and self.storage.start_offset <= first < self.storage.end_offset:
                    # Not visible (yet): it waits; taken for deleted it would be acknowledged unseen.
                    heapq.heappush(state.redeliver, run)
                    return None
                if batch is None or batch.base > first:  # deleted meanwhile
                    gone = last if batch is None else min(last, batch.base - 1)
                    state.mark_acked(first, gone)
                    if gone < last:
                        heapq.heappush(state.redeliver, (gone + 1, last))
                    continue
                if last >= batch.next_offset:
                    heapq.heappush(state.redeliver, (batch.next_offset, last))
                    last = batch.next_offset - 1
                again = True
            else:
                batch = self.storage.batch_at(state.next_offset)
                if batch is None:
                    return None
                first = max(state.next_offset, batch.base)
                state.next_offset = batch.next_offset
                if batch.control or not state.matcher(batch.dest):
                    if not state.pending and not state.redeliver:
                        state.dirty = state.dirty or state.persistent
                    continue
                first = state.acked.next_missing(first)
                if first >= batch.next_offset:
                    continue
                last = state.acked.missing_until(first, batch.next_offset - 1)
                state.next_offset = last + 1
                again = False
            end = state.same_count_until(first, last)
            if end < last:  # records delivered a different number of times: a run of their own
                if again:
                    heapq.heappush(state.redeliver, (end + 1, last))
                else:
                    state.next_offset = end + 1
                last = end
            reason = None
            if batch.expiry and batch.expiry < now:
                if not state.is_queue:
                    if again and state.persistent:
                        state.mark_acked(first, last)
                    continue
                reason = "expired"
            elif state.times_delivered(first) > self.max_redeliveries:
                reason = f"maximum redeliveries ({self.max_redeliveries}) exceeded"
            if reason is None:
                return batch, first, last, again
            if not self._to_dmq(state, batch, first, last, reason):
                _put_back(state, first, last, again)  # fenced: moved once the lease is back
                return None

    def _to_dmq(self, state: DeliveryState, batch: StoredBatch, first: int, last: int, reason: str) -> bool:
        """Move records ``first`` .. ``last`` of ``batch`` (alone: not the rest of their batch) to
        ``_DMQ`` with their origin and the reason; they count as acknowledged here. False (nothing
        moved, nothing acknowledged) while this primary may not write."""
        if batch.dest == DMQ_DESTINATION:
            state.mark_acked(first, last)
            return True
        extra = dict(batch.extra or {})
        extra.update({"orig": batch.dest, "reason": reason, "from": f"{self.name}:{first}"})
        if state.key != "q:" + batch.dest:  # a durable subscription's: recovery must find it
            extra["sub"] = state.key
        if batch.flags & BatchFlag.CHUNK or (first == batch.base and last == batch.next_offset - 1):
            blob = batch.blob
        else:
            blob = slice_records(
                batch.blob, self._record_spans(batch), first - batch.base, last - batch.base + 1
            )
        count = last - first + 1
        try:
            self._append_internal(DMQ_DESTINATION, count, blob, batch.flags | BatchFlag.DMQ, extra)
        except CommitError:
            return False
        state.mark_acked(first, last)
        log.info("moved %s:%d..%d (%s) to _DMQ: %s", self.name, first, last, batch.dest, reason)
        return True

    # -- what the control committer writes and sends -------------------------------------------
    def cursor_records(self, everything: bool = False) -> list[ControlRecord]:
        """The changed (or all) cursors and delivery marks as control records."""
        records: list[ControlRecord] = []
        for key, state in self.states.items():
            if not state.persistent:
                continue
            if state.dirty or everything:
                state.dirty = False
                lw, ranges = state.snapshot()
                records.append(CursorCommit(key, lw))
                records.append(AckRanges(key, ranges))
            if state.delivery_dirty or everything:
                state.delivery_dirty = False
                records.append(DeliveredThrough(key, state.delivered_through))
        records.extend(self._redeliveries)
        self._redeliveries = []
        return records

    def take_outbox(self) -> list[Outgoing]:
        """The deliveries waiting for a round, taken by the control committer."""
        outbox, self._outbox = self._outbox, []
        return outbox

    def withdraw(self, outgoing: list[Outgoing]) -> None:
        """Hand-outs never sent: back to be handed out again, uncounted (their delivery counts not
        written yet are not written at all)."""
        gone = {(state.key, f["o"], int(f.get("rd", 0)) + 1) for state, _, f in outgoing}
        self._redeliveries = [
            r
            for r in self._redeliveries
            if not isinstance(r, Redelivery) or (r.subscription, r.offset, r.attempt) not in gone
        ]
        for state, link, frame in outgoing:
            state.withdraw(frame["o"], int(frame["n"]), link, int(frame.get("rd", 0)) + 1)


def _put_back(state: DeliveryState, first: int, last: int, again: bool) -> None:
    """Records ``first`` .. ``last`` taken by ``_next_for`` but not handed out: next time again."""
    if again:
        heapq.heappush(state.redeliver, (first, last))
    else:
        state.next_offset = first


def outstanding(state: DeliveryState, link: ConsumerLink, frame: dict[str, Any]) -> bool:
    """The delivery ``frame`` is still the one handed to ``link`` (not given back since)."""
    p = state.pending.get(frame["o"])
    return p is not None and p.link is link and p.attempt == int(frame.get("rd", 0)) + 1


def _array_header_len(blob: bytes) -> int:
    """Bytes of the msgpack array header a records blob starts with."""
    lead = blob[0] if blob else 0x90
    return 1 if lead <= 0x9F else 3 if lead == 0xDC else 5


def send(conn: Any, frame: dict[str, Any]) -> None:
    """Send unless the connection is gone (its consumer's deliveries are given back on close)."""
    if not conn.closed:
        try:
            conn.send_nowait(frame)
        except ConnectionClosed:
            pass
