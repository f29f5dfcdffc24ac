"""One partition hosted by this MM as primary: produce (with group commit), delivery, cursors.

Produce: requests queue per partition; one worker takes everything queued, appends each batch to the
log (offsets assigned here), awaits ONE group-commit flush for all of them and only then sends the
PRODUCE_ACKs (an acknowledged record is on disk). The epoch in each request must equal the
partition's current epoch (older: STALE_EPOCH; this MM not primary: NOT_PRIMARY).

Flow control toward producers: while the backlog (log end minus the lowest cursor of any queue or
subscription) exceeds ``max_backlog`` records the worker stops appending, so produce acks stop,
producers' in-flight windows fill up and ``Producer.try_send`` returns False. Memory stays bounded:
the data is on disk, in flight are only the producers' windows.

Delivery: ``pump`` walks each DeliveryState from its position, skipping batches of other
destinations, and sends DELIVER frames while the consumer links have credit. Queues redeliver what a
departed consumer left unacknowledged; after ``max_redeliveries`` or past its expiry a queue batch is
moved to ``queue:_DMQ`` with its original destination and the reason.

Cursors (lw + acked batches above it) of queues and durable subscriptions are written as control
records into the partition log itself (every ``cursor_interval`` seconds when changed), so they are
recovered with the log and will replicate with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from hybridmq.api.frames import DMQ_DESTINATION, BatchFlag, ErrorCode, FrameType, error_frame
from hybridmq.broker.destinations.batch_payload import StoredBatch
from hybridmq.broker.destinations.delivery import ConsumerLink, DeliveryState, pop_redelivery
from hybridmq.broker.destinations.matching import make_matcher
from hybridmq.broker.flow import BacklogGate
from hybridmq.broker.log.control import AckRanges, ControlRecord, CursorCommit, decode_control
from hybridmq.broker.log.errors import (
    LogError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    StaleEpochError,
)
from hybridmq.broker.mm.storage import PartitionStorage

log = logging.getLogger(__name__)


class PartitionHost:
    def __init__(
        self,
        name: str,
        storage: PartitionStorage,
        epoch: int,
        *,
        max_backlog: int = 1_000_000,
        max_redeliveries: int = 5,
        wake: Any = None,
    ) -> None:
        self.name = name
        self.storage = storage
        self.epoch = epoch
        self.primary = True
        self.writable = True
        self.max_backlog = max_backlog
        self.max_redeliveries = max_redeliveries
        self.states: dict[str, DeliveryState] = {}
        self.queue_patterns: list[tuple[ConsumerLink, Any]] = []
        self._produce_q: deque[tuple[Any, dict[str, Any]]] = deque()
        self._produce_ready = asyncio.Event()
        self.gate = BacklogGate(max_backlog)
        self._wake = wake or (lambda: None)
        self._tasks: list[asyncio.Task[None]] = []
        self.appended_records = 0
        # Replication (issue 4) plugs in here: awaited after the local flush, before any ack is sent
        # and before the records become visible to consumers (the high watermark).
        self.commit_waiter: Callable[[int], Awaitable[None]] | None = None
        self.retention_interval = 5.0

    # -- lifecycle -------------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild queue and durable cursors from the control records and data in the log."""
        snaps: dict[str, list[Any]] = {}
        for batch in self.storage.scan(0):
            if batch.control:
                self.storage.note_control(batch.base, batch.n)
                for rec in decode_control(batch.blob):
                    if isinstance(rec, CursorCommit):
                        snaps.setdefault(rec.subscription, [0, ()])[0] = rec.offset
                    elif isinstance(rec, AckRanges):
                        snaps.setdefault(rec.subscription, [0, ()])[1] = rec.ranges
            elif batch.dest.startswith("queue:") and ("q:" + batch.dest) not in self.states:
                self._queue_state(batch.dest, batch.base)
        for key, (lw, ranges) in snaps.items():
            state = self.states.get(key)
            if state is None:
                if key.startswith("q:"):
                    state = self._queue_state(key[2:], 0)
                elif key.startswith("d:"):
                    _, _, pattern = key[2:].partition("|")
                    mode, _, pat = pattern.partition("|")
                    state = DeliveryState(key, make_matcher(pat, mode), 0, False, True)
                    self.states[key] = state
                else:
                    continue
            state.restore(lw, ranges)
        self.storage.visible_end = self.storage.end_offset
        log.info(
            "partition %s recovered: end=%d states=%d", self.name, self.storage.end_offset, len(self.states)
        )

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._produce_worker()))
        self._tasks.append(asyncio.create_task(self._cursor_writer()))
        self._tasks.append(asyncio.create_task(self._retention()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.write_cursors()
        try:
            await self.storage.aclose()
        except Exception:
            log.exception("closing %s", self.name)

    # -- produce ---------------------------------------------------------------------------------
    def enqueue_produce(self, conn: Any, frame: dict[str, Any]) -> None:
        self._produce_q.append((conn, frame))
        self._produce_ready.set()

    def append_internal(
        self, dest: str, count: int, blob: bytes, flags: int = 0, extra: dict[str, Any] | None = None
    ) -> None:
        """Append a batch the broker itself produces (_DMQ moves, _LOG events); the produce worker
        flushes it (and lets replication commit it) before consumers can see it."""
        self.storage.append(dest, count, blob, self.epoch, flags, 0, extra)
        if dest.startswith("queue:") and ("q:" + dest) not in self.states:
            self._queue_state(dest, self.storage.end_offset - count)
        self._produce_ready.set()

    def backlog(self) -> int:
        if not self.states:
            return 0
        return self.storage.end_offset - min(s.lw() for s in self.states.values())

    @property
    def blocked(self) -> bool:
        return self.gate.blocked

    def _check_space(self) -> None:
        self.gate.update(self.backlog())

    async def _produce_worker(self) -> None:
        while True:
            await self._produce_ready.wait()
            self._check_space()
            await self.gate.wait()
            batch = list(self._produce_q)
            self._produce_q.clear()
            self._produce_ready.clear()
            acks: list[tuple[Any, dict[str, Any]]] = []
            for conn, frame in batch:
                acks.append((conn, self._append_one(frame)))
            try:
                end = self.storage.end_offset
                await self.storage.flush(end)
                if self.commit_waiter is not None:
                    await self.commit_waiter(end)
                self.storage.visible_end = max(self.storage.visible_end, end)
            except Exception as exc:
                # Replication (issue 4) fails a commit with a retriable ``frame_code`` (NOT_PRIMARY,
                # MM_UNAVAILABLE): the producers resend and the sequence numbers drop duplicates.
                code = getattr(exc, "frame_code", None)
                if code is None:
                    log.exception("flush failed on %s", self.name)
                acks = [
                    (c, error_frame(code or ErrorCode.INTERNAL, f"not acknowledged: {exc}", f.get("r")))
                    for c, f in acks
                ]
            for conn, reply in acks:
                if not conn.closed:
                    conn.send_nowait(reply)
            self._wake()

    def _append_one(self, frame: dict[str, Any]) -> dict[str, Any]:
        corr = frame.get("c")
        epoch = int(frame.get("e", self.epoch))
        if epoch < self.epoch:
            return error_frame(ErrorCode.STALE_EPOCH, f"epoch {epoch} < {self.epoch} on {self.name}", corr)
        if epoch > self.epoch or not self.primary:
            return error_frame(ErrorCode.NOT_PRIMARY, f"not primary of {self.name} at epoch {epoch}", corr)
        if not self.writable:
            return error_frame(ErrorCode.PARTITION_NOT_WRITABLE, f"{self.name} takes no writes", corr)
        try:
            dest = str(frame["d"])
            count = int(frame["n"])
            blob = frame["b"]
            if count < 1 or not isinstance(blob, bytes):
                raise ValueError("bad count or blob")
            pid = frame.get("pid")
            base, last, dup = self.storage.append(
                dest,
                count,
                blob,
                self.epoch,
                int(frame.get("f", 0)),
                int(frame.get("x", 0)),
                frame.get("xa"),
                producer_id=int(pid) if pid is not None else -1,
                base_sequence=int(frame.get("seq", -1)),
                producer_epoch=int(frame.get("pep", 0)),
            )
        except (KeyError, ValueError, TypeError) as exc:
            return error_frame(ErrorCode.INVALID_REQUEST, f"bad produce: {exc}", corr)
        except StaleEpochError as exc:
            return error_frame(ErrorCode.STALE_EPOCH, str(exc), corr)
        except OutOfOrderSequenceError as exc:
            return error_frame(ErrorCode.OUT_OF_ORDER_SEQUENCE, str(exc), corr)
        except ProducerFencedError as exc:
            return error_frame(ErrorCode.PRODUCER_FENCED, str(exc), corr)
        except LogError as exc:
            return error_frame(ErrorCode.INTERNAL, f"log error: {exc}", corr)
        if dup:
            return {"t": FrameType.PRODUCE_ACK, "r": corr, "p": self.name, "o": base, "l": last, "dup": True}
        self.appended_records += count
        if dest.startswith("queue:") and ("q:" + dest) not in self.states:
            self._queue_state(dest, base)
        return {"t": FrameType.PRODUCE_ACK, "r": corr, "p": self.name, "o": base, "l": last}

    # -- subscriptions ---------------------------------------------------------------------------
    def _queue_state(self, dest: str, start: int) -> DeliveryState:
        state = DeliveryState("q:" + dest, make_matcher(dest), start, True, False)
        self.states[state.key] = state
        for link, matcher in self.queue_patterns:
            if matcher(dest):
                state.links.append(link)
                link.states.append(state)
        return state

    def attach(self, link: ConsumerLink, pattern: str, mode: str, durable: str | None) -> None:
        matcher = make_matcher(pattern, mode)
        if pattern.startswith("queue:"):
            self.queue_patterns.append((link, matcher))
            if mode == "exact" and ("q:" + pattern) not in self.states:
                self._queue_state(pattern, self.storage.end_offset)
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
                state.dirty = True
                self.states[key] = state
            else:
                state = existing
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
            state.detach(link)
            if not state.persistent:
                self.states.pop(state.key, None)
            elif not state.is_queue:
                # durable subscription: rewind to its cursor for the next consumer
                state.next_offset = state.lw()
                state.redeliver.clear()
        link.states = [s for s in link.states if self.states.get(s.key) is not s]

    def ack(self, link: ConsumerLink, base: int, nack: bool = False) -> None:
        for state in link.states:
            if base in state.pending and state.pending[base].link is link:
                if nack:
                    state.give_back(base)
                else:
                    state.settle(base, link)
                break
        if self.blocked:
            self._check_space()

    # -- delivery --------------------------------------------------------------------------------
    def pump(self) -> bool:
        """Deliver what the links have credit for; True if anything was sent."""
        sent = False
        now = int(time.time() * 1000)
        for state in list(self.states.values()):
            if not state.links:
                continue
            while True:
                link = state.pick_link()
                if link is None:
                    break
                batch = self._next_for(state, now)
                if batch is None:
                    break
                rd = state.record_delivery(batch.base, batch.n, batch.size, link)
                link.conn.send_nowait(
                    {
                        "t": FrameType.DELIVER,
                        "s": link.key,
                        "p": self.name,
                        "d": batch.dest,
                        "o": batch.base,
                        "n": batch.n,
                        "b": batch.blob,
                        "f": batch.flags,
                        "rd": rd,
                        "xa": batch.extra,
                        "ts": batch.timestamp,
                    }
                )
                sent = True
        return sent

    def _next_for(self, state: DeliveryState, now: int) -> StoredBatch | None:
        while True:
            base = pop_redelivery(state) if state.redeliver else None
            if base is not None:
                batch = self.storage.batch_at(base)
                if batch is None or batch.base != base:
                    state.mark_acked(base, base)
                    continue
                if state.deliveries.get(base, 0) > self.max_redeliveries:
                    self._to_dmq(state, batch, f"maximum redeliveries ({self.max_redeliveries}) exceeded")
                    continue
                return batch
            batch = self.storage.batch_at(state.next_offset)
            if batch is None:
                return None
            state.next_offset = batch.next_offset
            if batch.control or batch.base in state.acked or not state.matcher(batch.dest):
                if not state.pending and not state.redeliver:
                    state.dirty = state.dirty or state.persistent
                continue
            if batch.expiry and batch.expiry < now:
                if state.is_queue:
                    self._to_dmq(state, batch, "expired")
                continue
            return batch

    def _to_dmq(self, state: DeliveryState, batch: StoredBatch, reason: str) -> None:
        state.deliveries.pop(batch.base, None)
        state.mark_acked(batch.base, batch.next_offset - 1)
        if batch.dest == DMQ_DESTINATION:
            return
        extra = dict(batch.extra or {})
        extra.update({"orig": batch.dest, "reason": reason, "from": f"{self.name}:{batch.base}"})
        self.append_internal(DMQ_DESTINATION, batch.n, batch.blob, batch.flags | BatchFlag.DMQ, extra)
        log.info("moved %s:%d (%s) to _DMQ: %s", self.name, batch.base, batch.dest, reason)

    # -- cursors ---------------------------------------------------------------------------------
    def write_cursors(self, everything: bool = False) -> None:
        """Append the changed (or all) cursors as CursorCommit + AckRanges control records."""
        records: list[ControlRecord] = []
        for key, state in self.states.items():
            if state.persistent and (state.dirty or everything):
                state.dirty = False
                lw, ranges = state.snapshot()
                records.append(CursorCommit(key, lw))
                records.append(AckRanges(key, ranges))
        if records:
            self.storage.append_control(records, self.epoch)

    async def _retention(self) -> None:
        """Delete whole segments below every cursor (after re-writing all cursors above them)."""
        while True:
            await asyncio.sleep(self.retention_interval)
            if not self.primary:
                continue
            safe = min([s.lw() for s in self.states.values()] + [self.storage.visible_end])
            if safe <= self.storage.start_offset:
                continue
            try:
                self.write_cursors(everything=True)
                await self.storage.flush()
                start = self.storage.log.delete_before(safe)
            except Exception:
                log.exception("retention failed on %s", self.name)
                continue
            if start > 0:
                log.debug("retention on %s: log starts at %d", self.name, start)

    async def _cursor_writer(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            self.write_cursors()
            if self.blocked:
                self._check_space()
                if not self.blocked:
                    self._produce_ready.set()
