"""One partition hosted by this MM as primary: produce (with group commit), delivery, cursors.

Produce: requests queue per partition; one worker takes everything queued, appends each batch to the
log (offsets assigned here), awaits ONE commit for all of them (group-commit flush, then the high
watermark of the partition's ``PartitionPrimary``: ``min_in_sync`` copies) and only then sends the
PRODUCE_ACKs. Every append first passes ``PartitionPrimary.check_append``, the one place that checks
the request's epoch (older: STALE_EPOCH, newer: NOT_PRIMARY), the lease (NOT_PRIMARY), the in-sync
count (NOT_ENOUGH_REPLICAS) and a new idempotent producer's first sequence. A partition with one
replica is a primary with no backups: the same path, committed once flushed. The broker's own
records (``_DMQ`` moves, committed transactions, cursors, delivery counts, reader cursors) go through
the same ``_append`` / ``append_control`` and its fencing (not stepped down, lease valid), without the
in-sync count: a fenced or superseded primary writes nothing at all.

Flow control toward producers: while the backlog (log end minus the lowest cursor of any queue or
subscription) exceeds ``max_backlog`` records the worker stops appending, so produce acks stop,
producers' in-flight windows fill up and ``Producer.try_send`` returns False. Memory stays bounded:
the data is on disk, in flight are only the producers' windows.

Delivery: ``pump`` walks each DeliveryState from its position, skipping batches of other
destinations and acknowledged records, and sends DELIVER frames while the consumer links have credit:
each a run of records of one stored batch, as many as the link's window has room for (the whole
batch when it fits, so topics keep getting whole batches; a queue's batch is shared out among its
consumers). Queues redeliver what a departed consumer left unacknowledged or a NACK gave back, record
by record; a record past ``max_redeliveries`` or its expiry, or rejected by a consumer, is moved to
``queue:_DMQ`` alone with its original destination and the reason.

Cursors and delivery counts are control records in the partition log itself, so they recover and
replicate with the data, and both are committed (flushed and, replicated, covered by the high
watermark: ``control_waiter``) by one group-commit task, the control committer:

* an acknowledgement is settled at once (the window refills) and *answered* (ACK with a correlation
  id) only once the CursorCommit + AckRanges records holding it are committed: an answered
  acknowledgement survives a failover, its records are never delivered again;
* a delivery to a queue or durable subscription is sent only once the records that count it are
  committed (DeliveredThrough for a first delivery, Redelivery with the attempt for a later one): a
  new primary knows every record that was handed out, flags its next delivery ``rd`` > 0 and never
  reuses an attempt number, so a late ACK of a hand-out before the failover (ACK ``rd``) cannot
  acknowledge the new one. A round that cannot be committed sends nothing and withdraws its
  deliveries uncounted (no round is even appended while the lease is known lost): a lease that
  lapses for a while costs a delivery count only to what was sent. A committed round's delivery
  that was given back meanwhile (its consumer left) is not sent and withdrawn uncounted too (in
  memory only: a new primary still counts it once).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from hybridmq.api.frames import (
    DMQ_DESTINATION,
    BatchFlag,
    ErrorCode,
    FrameType,
    error_frame,
    is_reserved,
)
from hybridmq.broker.destinations.batch_payload import (
    StoredBatch,
    check_records,
    pack_payload,
    slice_records,
    split_spans,
)
from hybridmq.broker.destinations.delivery import ConsumerLink, DeliveryState, pop_redelivery
from hybridmq.broker.destinations.matching import make_matcher
from hybridmq.broker.flow import BacklogGate
from hybridmq.broker.log.control import (
    AckRanges,
    ControlRecord,
    CursorCommit,
    DeliveredThrough,
    ReaderCursor,
    Redelivery,
    TxDecision,
    TxEnd,
    TxPrepare,
    decode_control,
    encode_control,
)
from hybridmq.broker.log.errors import (
    LogError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    StaleEpochError,
)
from hybridmq.broker.mm.attached import AttachedProducers
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import (
    FencedEpochError,
    NotEnoughReplicasError,
    NotPrimaryError,
    PartitionPrimary,
    ReplicationError,
)
from hybridmq.broker.transactions.participant import TxParticipant
from hybridmq.protocol.connection import ConnectionClosed

log = logging.getLogger(__name__)

# How a refused append is answered: every one is retriable but a stale epoch.
_REFUSED: tuple[tuple[type[Exception], ErrorCode], ...] = (
    (FencedEpochError, ErrorCode.STALE_EPOCH),
    (StaleEpochError, ErrorCode.STALE_EPOCH),
    (NotPrimaryError, ErrorCode.NOT_PRIMARY),
    (NotEnoughReplicasError, ErrorCode.NOT_ENOUGH_REPLICAS),
    (OutOfOrderSequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE),
    (ProducerFencedError, ErrorCode.PRODUCER_FENCED),
)


class _NotWritable(Exception):
    """A produce to a partition that takes no writes (draining): PARTITION_NOT_WRITABLE."""


def _never() -> bool:
    return False


class PartitionHost:
    def __init__(
        self,
        name: str,
        storage: PartitionStorage,
        leader: PartitionPrimary,
        *,
        max_backlog: int = 1_000_000,
        max_redeliveries: int = 5,
        wake: Any = None,
        catching_up: Callable[[], bool] = _never,
        commit_timeout_s: float = 5.0,
        only_destination: str | None = None,
        retain_bytes: int | None = None,
    ) -> None:
        self.name = name
        self.storage = storage
        self.leader = leader
        self.serving = True
        self.writable = True
        # The lease is only waiting for this MM to apply the controller's newest table.
        self._catching_up = catching_up
        self.commit_timeout_s = commit_timeout_s
        # The MM's internal log: one destination, retention by size (``internal_log.py``).
        self.only_destination = only_destination
        self.retain_bytes = retain_bytes
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
        self.retention_interval = 5.0
        # Waiting for the control committer: deliveries (sent once their records are committed),
        # Redelivery records, and acknowledgements to answer.
        self._outbox: list[Outgoing] = []
        self._redeliveries: list[ControlRecord] = []
        self._ack_replies: list[tuple[Any, dict[str, Any]]] = []
        self._committing: list[tuple[Any, dict[str, Any]]] = []  # replies of the round in progress
        self._control_ready = asyncio.Event()
        self._end_at_last_check = 0  # the log end the space checker saw last round
        self.producers = AttachedProducers()
        # Named reader cursors (stream readers' committed offsets) and the end of the last
        # application data batch (control records and internal ``_`` destinations after it, e.g.
        # the MM's own ``topic:_LOG`` events, are nothing a reader must be held for).
        self.readers: dict[str, int] = {}
        self.data_end = 0
        # Where the records of recently split batches start (base -> ``record_spans``): a queue's
        # batch is handed out in window-sized runs, found once.
        self._spans: dict[int, list[int]] = {}
        self.tx = TxParticipant(self)

    @property
    def epoch(self) -> int:
        return self.leader.epoch

    # -- lifecycle -------------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild queue and durable cursors from the control records and data in the log."""
        snaps: dict[str, list[Any]] = {}  # key -> [lw, ack ranges, delivered through, {offset: count}]
        moved: list[tuple[str, int, int]] = []  # (state key, first, last) moved from here to _DMQ
        for batch in self.storage.scan(0):
            if batch.control:
                self.storage.note_control(batch.base, batch.n)
                for rec in decode_control(batch.blob):
                    if isinstance(rec, CursorCommit):
                        snaps.setdefault(rec.subscription, [0, (), 0, {}])[0] = rec.offset
                    elif isinstance(rec, AckRanges):
                        snaps.setdefault(rec.subscription, [0, (), 0, {}])[1] = rec.ranges
                    elif isinstance(rec, DeliveredThrough):
                        snap = snaps.setdefault(rec.subscription, [0, (), 0, {}])
                        snap[2] = max(snap[2], rec.offset)
                    elif isinstance(rec, Redelivery):
                        counts = snaps.setdefault(rec.subscription, [0, (), 0, {}])[3]
                        for offset in range(rec.offset, rec.offset + rec.count):
                            counts[offset] = max(counts.get(offset, 0), rec.attempt)
                    elif isinstance(rec, ReaderCursor):
                        self.readers[rec.reader] = rec.offset
                    elif isinstance(rec, TxPrepare | TxDecision | TxEnd):
                        self.tx.observe(rec, batch.base)
                continue
            self.tx.observe_data(batch.extra)
            origin = self._moved_from(batch)
            if origin is not None:
                moved.append(origin)
            if not is_reserved(batch.dest):
                self.data_end = batch.next_offset
            if batch.dest.startswith("queue:") and ("q:" + batch.dest) not in self.states:
                self._queue_state(batch.dest, batch.base)
        for key, (lw, ranges, through, counts) in snaps.items():
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
            state.restore(lw, ranges, through, counts.items())
        # A move to _DMQ is its own batch, the acknowledgement at its origin a later cursor record:
        # a primary lost between the two left records that are in _DMQ yet unacknowledged, which
        # this one would move (or deliver) once more. The move itself says what it settled.
        for key, first, last in moved:
            state = self.states.get(key)
            if state is None and key.startswith("q:"):
                state = self._queue_state(key[2:], 0)
            if state is not None:
                state.mark_acked(first, last)
        self.tx.recovered()
        self.storage.visible_end = self.storage.end_offset
        log.info(
            "partition %s recovered: end=%d states=%d", self.name, self.storage.end_offset, len(self.states)
        )

    def _moved_from(self, batch: StoredBatch) -> tuple[str, int, int] | None:
        """``(state key, first, last)`` of the records a ``_DMQ`` batch of this log moved here
        (``_to_dmq``), or None for any other batch."""
        if not batch.flags & BatchFlag.DMQ or batch.dest != DMQ_DESTINATION or not batch.extra:
            return None
        partition, _, first = str(batch.extra.get("from") or "").rpartition(":")
        orig = str(batch.extra.get("orig") or "")
        if partition != self.name or not first.isdigit():
            return None
        key = str(batch.extra.get("sub") or ("q:" + orig if orig.startswith("queue:") else ""))
        return (key, int(first), int(first) + batch.n - 1) if key else None

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._produce_worker()))
        self._tasks.append(asyncio.create_task(self._control_committer()))
        self._tasks.append(asyncio.create_task(self._space_checker()))
        self._tasks.append(asyncio.create_task(self._retention()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.refuse_ack_replies(ErrorCode.MM_UNAVAILABLE, f"{self.name} is stopping")
        self.write_cursors()  # nothing when the primary was closed first (the replicated ones)
        try:
            await self.storage.aclose()
        except Exception:
            log.exception("closing %s", self.name)

    async def halt(self) -> None:
        """Stop serving (tasks cancelled, queued produces refused) but leave the log open: the
        backup role that follows a demotion keeps using it."""
        self.serving = False
        # Let a produce worker that is failing its pending acknowledgements send them first.
        for _ in range(3):
            await asyncio.sleep(0)
        for _ in range(10):  # cancel again if a task swallowed it (3.11 wait_for races)
            pending = [t for t in self._tasks if not t.done()]
            if not pending:
                break
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=0.5)
        self._tasks.clear()
        moved = f"{self.name} moved to another primary"
        self.refuse_ack_replies(ErrorCode.NOT_PRIMARY, moved)
        queued = list(self._produce_q)
        self._produce_q.clear()
        for conn, frame in queued:
            _send(conn, error_frame(ErrorCode.NOT_PRIMARY, moved, frame.get("c")))

    # -- produce ---------------------------------------------------------------------------------
    def enqueue_produce(self, conn: Any, frame: dict[str, Any]) -> None:
        self._produce_q.append((conn, frame))
        self._produce_ready.set()

    def append_internal(
        self,
        dest: str,
        count: int,
        blob: bytes,
        flags: int = 0,
        extra: dict[str, Any] | None = None,
        expiry: int = 0,
    ) -> None:
        """Append a batch the broker itself produces (_DMQ moves, _LOG events, committed
        transactions); the produce worker flushes it (and lets replication commit it) before
        consumers can see it. ``CommitError`` (NOT_PRIMARY), nothing appended, while this primary
        may not write."""
        self._append(dest, count, blob, flags, expiry, extra)
        self._produce_ready.set()

    def _may_write(self) -> None:
        """The fencing every append to this log passes (``PartitionPrimary.ensure_writable``), as a
        ``CommitError``: not stepped down (demoted, closed) and the lease valid. A superseded
        primary learns of its successor only once its lease is back (the lease waits for the newest
        table), so until then a record it wrote could be one a new primary never has."""
        try:
            self.leader.ensure_writable()
        except NotPrimaryError as exc:
            raise CommitError(ErrorCode.NOT_PRIMARY, str(exc)) from None

    async def _lease_settled(self) -> None:
        """``_may_write``, giving a table update in flight (the lease waits for this MM to apply
        it) ~0.2 s to land first."""
        for _ in range(10):
            if self.leader.writable or not self._catching_up():
                break
            await asyncio.sleep(0.02)
        self._may_write()

    def _append(
        self,
        dest: str,
        count: int,
        blob: bytes,
        flags: int = 0,
        expiry: int = 0,
        extra: dict[str, Any] | None = None,
        *,
        request: dict[str, Any] | None = None,
    ) -> tuple[int, int, bool]:
        """Every data batch this host writes, through ``PartitionPrimary.append``; ``(base, last,
        duplicate)``.

        A produce ``request`` passes every rule of ``PartitionPrimary.check_append`` (its epoch,
        the lease, ``minInSync``, a new producer's first sequence) and the partition taking
        writes; the broker's own batches pass the fencing alone: like cursors, they only need the
        in-sync replicas, and a draining partition still moves records to ``_DMQ``."""
        producer_id = base_sequence = -1
        epoch: int | None = None
        if request is not None:
            pid = request.get("pid")
            producer_id = int(pid) if pid is not None else -1
            base_sequence = int(request.get("seq", -1))
            epoch = int(request.get("e", self.epoch))
            if not self.writable:
                self.leader.check_append(epoch, producer_id, base_sequence)  # its refusal first
                raise _NotWritable(f"{self.name} takes no writes")
        now = int(time.time() * 1000)
        try:
            result = self.leader.append(
                pack_payload(dest, flags, expiry, extra, blob),
                count,
                epoch=epoch,
                producer_id=producer_id,
                producer_epoch=int((request or {}).get("pep", 0)),
                base_sequence=base_sequence,
                timestamp=now,
            )
        except NotPrimaryError as exc:
            if request is not None:
                raise  # a producer's: answered NOT_PRIMARY by ``_append_one``
            raise CommitError(ErrorCode.NOT_PRIMARY, str(exc)) from None
        self.storage.appended(result, dest, count, blob, flags, expiry, extra, now)
        base, last, dup = result.base_offset, result.last_offset, result.duplicate
        if not dup:
            if not is_reserved(dest):
                self.data_end = last + 1
            if dest.startswith("queue:") and ("q:" + dest) not in self.states:
                self._queue_state(dest, base)
        return base, last, dup

    def append_control(self, records: list[ControlRecord]) -> None:
        """Append control records (cursors, delivery counts, reader cursors), fenced like every
        append (``CommitError`` while this primary may not write); committed by the next flush."""
        payload, count = encode_control(records)
        self._may_write()
        result = self.leader.append(
            payload, count, epoch=None, control=True, timestamp=int(time.time() * 1000)
        )
        self.storage.note_control(result.base_offset, count)

    def wake_consumers(self) -> None:
        """Records became visible or were given back: let the dispatcher hand them out."""
        self._wake()

    def reader_lag(self) -> int:
        """Data records the furthest-behind named reader has not committed (0 without readers)."""
        return max((max(0, self.data_end - offset) for offset in self.readers.values()), default=0)

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
            stored = any(reply["t"] == FrameType.PRODUCE_ACK for _, reply in acks)
            try:
                end = self.storage.end_offset
                await self.storage.flush(end)
                # ``minInSync`` is for acknowledging producers; the broker's own batches (``_DMQ``
                # moves, ``_LOG`` events) only need the in-sync replicas, as cursors do.
                await self.commit(end, min_in_sync=stored)
            except Exception as exc:
                # A failed commit has a retriable ``frame_code`` (NOT_PRIMARY, MM_UNAVAILABLE): the
                # producers resend and the sequence numbers drop duplicates. A refused produce
                # keeps its own answer.
                code = exc.frame_code if isinstance(exc, CommitError) else None
                if code is None:
                    log.exception("flush failed on %s", self.name)
                acks = [
                    (c, error_frame(code or ErrorCode.INTERNAL, f"not acknowledged: {exc}", f.get("r")))
                    if f["t"] == FrameType.PRODUCE_ACK
                    else (c, f)
                    for c, f in acks
                ]
            for conn, reply in acks:
                # A transport may close before ``conn.closed`` says so: that must not end the worker.
                _send(conn, reply)
            self._wake()

    async def commit(self, end: int, *, min_in_sync: bool = True) -> None:
        """Return once every record below ``end`` is flushed and covered by the high watermark
        (``min_in_sync=False``: on every in-sync replica, however few: enough for control records,
        since only an in-sync replica is ever promoted) while the lease still holds.

        Covered by the high watermark, the records are visible to consumers whatever the in-sync
        count (Kafka's rule): only an acknowledgement also needs ``minInSync`` copies. Whoever
        commits makes everything below ``end`` visible, so that a record whose own commit failed
        (too few in sync, lease lapsed) shows once a later commit covers it."""
        try:
            async with asyncio.timeout(self.commit_timeout_s):
                await self.leader.wait_committed(end, min_in_sync=False)
            self.storage.visible_end = max(self.storage.visible_end, end)
            if min_in_sync:
                await self.leader.wait_for_hw(end)  # at once: raises while too few are in sync
        except NotPrimaryError as exc:
            raise CommitError(ErrorCode.NOT_PRIMARY, str(exc)) from None
        except (ReplicationError, TimeoutError) as exc:
            raise CommitError(ErrorCode.MM_UNAVAILABLE, f"not replicated: {exc!r}") from None
        await self._lease_settled()  # the lease must still hold when the acknowledgements go out

    def _append_one(self, frame: dict[str, Any]) -> dict[str, Any]:
        corr = frame.get("c")
        if self.only_destination is not None and frame.get("d") != self.only_destination:
            return error_frame(
                ErrorCode.INVALID_REQUEST, f"{self.name} only takes {self.only_destination}", corr
            )
        try:
            dest = str(frame["d"])
            count = int(frame["n"])
            blob = frame["b"]
            if count < 1 or not isinstance(blob, bytes):
                raise ValueError("bad count or blob")
            flags = int(frame.get("f", 0))
            if dest.startswith("queue:") and not flags & BatchFlag.CHUNK:
                check_records(blob, count)  # a queue hands its records out one by one
            base, last, dup = self._append(
                dest, count, blob, flags, int(frame.get("x", 0)), frame.get("xa"), request=frame
            )
        except _NotWritable as exc:
            return error_frame(ErrorCode.PARTITION_NOT_WRITABLE, str(exc), corr)
        except (KeyError, ValueError, TypeError) as exc:
            return error_frame(ErrorCode.INVALID_REQUEST, f"bad produce: {exc}", corr)
        except (ReplicationError, LogError) as exc:
            code = next((c for kind, c in _REFUSED if isinstance(exc, kind)), None)
            if code is None:
                return error_frame(ErrorCode.INTERNAL, f"log error: {exc}", corr)
            return error_frame(code, f"{self.name}: {exc}", corr)
        pid = frame.get("pid")
        if pid is not None:
            self.producers.seen([int(pid)])
        if dup:
            return {"t": FrameType.PRODUCE_ACK, "r": corr, "p": self.name, "o": base, "l": last, "dup": True}
        self.appended_records += count
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
        matcher = make_matcher(pattern, mode, link.allow)
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
                state.dirty = True  # committed at once: it starts here, also after a failover
                self._control_ready.set()
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

    def ack(
        self,
        link: ConsumerLink,
        start: int,
        nack: bool = False,
        attempt: int | None = None,
        reply: tuple[Any, dict[str, Any]] | None = None,
        first: int | None = None,
        last: int | None = None,
        requeue: bool = True,
    ) -> bool:
        """Settle records ``[first, last]`` (default: all left) of the delivery at ``start`` handed
        to ``link`` (at delivery ``attempt``); with ``nack`` give them back for redelivery, or
        without ``requeue`` move them to ``_DMQ``.

        ``reply`` (connection, ACK frame) is answered once the acknowledgement is committed; False
        (nothing answered) when the records are not outstanding on ``link`` at that attempt."""
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
        if self.blocked:
            self._check_space()
        if done and reply is not None:
            self._ack_replies.append(reply)
            self._control_ready.set()
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

    # -- delivery --------------------------------------------------------------------------------
    def pump(self) -> bool:
        """Deliver what the links have credit for; True if anything was sent."""
        sent = False
        now = int(time.time() * 1000)
        # A fenced primary cannot commit the records that count a delivery to a queue or durable
        # subscription: handed out now, it would only be given back, counted, round after round,
        # until ``max_redeliveries`` moved it to _DMQ without any consumer having seen it.
        fenced = not self.leader.writable
        for state in list(self.states.values()):
            if not state.links:
                self._pass_others(state)
                continue
            if fenced and state.persistent:
                self._control_ready.set()  # its failed round waits for the lease, then wakes us
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
                    "e": self.epoch,  # a consumer drops it once revoked by a failover
                    "xa": batch.extra,
                    "ts": batch.timestamp,
                }
                if state.persistent:  # sent once the records counting it are committed
                    if attempt > 1:
                        self._redeliveries.append(Redelivery(state.key, first, attempt, count))
                    self._outbox.append((state, link, frame))
                    self._control_ready.set()
                else:
                    _send(link.conn, frame)
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
            self.append_internal(DMQ_DESTINATION, count, blob, batch.flags | BatchFlag.DMQ, extra)
        except CommitError:
            return False
        state.mark_acked(first, last)
        log.info("moved %s:%d..%d (%s) to _DMQ: %s", self.name, first, last, batch.dest, reason)
        return True

    # -- cursors and delivery counts ----------------------------------------------------------------
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

    def write_cursors(self, everything: bool = False) -> None:
        """Append the changed (or all) cursors as control records (committed by the next flush);
        while this primary may not write, nothing: they stay changed for a later round."""
        if not self.leader.writable:
            return
        records = self.cursor_records(everything)
        if records:
            self.append_control(records)

    async def _retention(self) -> None:
        """Delete whole segments below every cursor (after re-writing all cursors above them).

        Named reader cursors hold it too; their latest records sit at or above their offsets (a
        commit is appended at the log end), so they survive without a re-write."""
        while True:
            await asyncio.sleep(self.retention_interval)
            if not self.serving or not self.leader.writable:
                continue  # fenced: its cursors cannot be re-written, so nothing goes
            if self.retain_bytes is not None:
                self._trim_quietly()
                continue
            held = [s.lw() for s in self.states.values()] + list(self.readers.values()) + self.tx.retained()
            safe = min([*held, self.storage.visible_end])
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

    def trim(self) -> int:
        """Delete the oldest whole segments beyond ``retain_bytes``; the new log start. A log of
        events is not a queue to be drained: its retention is by size, not below the cursors."""
        plog = self.storage.log
        segments = plog.segments
        excess = sum(s.size for s in segments) - (self.retain_bytes or 0)
        cut = None
        for older, newer in itertools.pairwise(segments):
            if excess <= 0:
                break
            excess -= older.size
            cut = newer.base_offset
        return plog.delete_before(cut) if cut is not None else plog.log_start_offset

    def _trim_quietly(self) -> None:
        try:
            self.trim()
        except Exception:
            log.exception("retention failed on %s", self.name)

    async def commit_control(self, end: int) -> None:
        """Flush up to ``end`` and wait until it is on every in-sync replica: what control records
        (cursors, delivery counts, reader cursors) need, since any of those may be promoted - not
        ``minInSync`` copies, so consumers keep being served while a partition is short a copy."""
        await self.storage.flush(end)
        await self.commit(end, min_in_sync=False)

    async def _control_committer(self) -> None:
        """Group commit of cursors and delivery counts: append one control batch for everything
        changed since the last round, commit it, then send the deliveries and answer the acks."""
        while True:
            await self._control_ready.wait()
            self._control_ready.clear()
            outbox, self._outbox = self._outbox, []
            replies, self._ack_replies = self._ack_replies, []
            self._committing = replies
            try:
                # Fenced (lease lapsed, stepped down): nothing to append, the round fails.
                await self._lease_settled()
                self.write_cursors()
                await self.commit_control(self.storage.end_offset)
            except Exception as exc:
                code = exc.frame_code if isinstance(exc, CommitError) else None
                if code is None:
                    log.exception("committing cursors failed on %s", self.name)
                # Never sent: back to be handed out again, uncounted (a consumer never had them).
                # So is what was handed out while the round ran: sent by the next round, it would
                # overtake these, and a topic's subscriber reads in offset order.
                later, self._outbox = self._outbox, []
                self._forget_redeliveries(later)
                for state, link, frame in outbox + later:
                    state.withdraw(frame["o"], int(frame["n"]), link, int(frame.get("rd", 0)) + 1)
                self._committing = []
                _refuse(replies, code or ErrorCode.INTERNAL, f"not committed: {exc}")
                await asyncio.sleep(0.05)
                await self._until_writable()  # fenced: ``pump`` waits too
                self._wake()
                continue
            self._committing = []
            deliveries = []
            for state, link, f in outbox:
                if _outstanding(state, link, f):
                    deliveries.append((link.conn, f))
                else:
                    # Given back while its round waited (its consumer left, its stream was given
                    # back by a failed round): never sent, so it does not count either.
                    state.withdraw(f["o"], int(f["n"]), link, int(f.get("rd", 0)) + 1)
            for conn, frame in deliveries + [
                (conn, {"t": FrameType.OK, "r": f.get("c")}) for conn, f in replies
            ]:
                _send(conn, frame)
            self._wake()

    def _forget_redeliveries(self, withdrawn: list[Outgoing]) -> None:
        """The delivery counts of withdrawn hand-outs not written yet are not written at all."""
        gone = {(state.key, f["o"], int(f.get("rd", 0)) + 1) for state, _, f in withdrawn}
        self._redeliveries = [
            r
            for r in self._redeliveries
            if not isinstance(r, Redelivery) or (r.subscription, r.offset, r.attempt) not in gone
        ]

    async def _until_writable(self) -> None:
        """Wait for the lease to be valid again (or the host to stop). Polled: validity is a
        deadline on the clock and a table version, not an event anyone sets."""
        for _ in itertools.count():
            if not self.serving or self.leader.writable:
                return
            await asyncio.sleep(0.05)

    def refuse_ack_replies(self, code: ErrorCode, why: str) -> None:
        """Answer every acknowledgement waiting for a commit with an error (it may not be kept)."""
        waiting = self._committing + self._ack_replies
        self._committing, self._ack_replies = [], []
        _refuse(waiting, code, why)

    async def _space_checker(self) -> None:
        """Reopen appends once consumers brought the backlog back under the limit; commit cursors
        that moved without an acknowledgement (at most every 0.2 s)."""
        while True:
            await asyncio.sleep(0.2)
            # Records appended a round ago and still not visible: their commit failed (too few in
            # sync, lease lapsed) and no producer is left to resend; a control round commits them.
            stuck = self.storage.visible_end < self._end_at_last_check
            self._end_at_last_check = self.storage.end_offset
            if stuck or any(s.dirty for s in self.states.values() if s.persistent):
                self._control_ready.set()  # cursors moved without an ack (skips, _DMQ moves)
            if self.blocked:
                self._check_space()
                if not self.blocked:
                    self._produce_ready.set()


Outgoing = tuple[DeliveryState, ConsumerLink, dict[str, Any]]  # a delivery waiting for its round


def _put_back(state: DeliveryState, first: int, last: int, again: bool) -> None:
    """Records ``first`` .. ``last`` taken by ``_next_for`` but not handed out: next time again."""
    if again:
        heapq.heappush(state.redeliver, (first, last))
    else:
        state.next_offset = first


def _outstanding(state: DeliveryState, link: ConsumerLink, frame: dict[str, Any]) -> bool:
    """The delivery ``frame`` is still the one handed to ``link`` (not given back since)."""
    p = state.pending.get(frame["o"])
    return p is not None and p.link is link and p.attempt == int(frame.get("rd", 0)) + 1


def _array_header_len(blob: bytes) -> int:
    """Bytes of the msgpack array header a records blob starts with."""
    lead = blob[0] if blob else 0x90
    return 1 if lead <= 0x9F else 3 if lead == 0xDC else 5


def _refuse(replies: list[tuple[Any, dict[str, Any]]], code: ErrorCode, why: str) -> None:
    for conn, frame in replies:
        _send(conn, error_frame(code, why, frame.get("c")))


def _send(conn: Any, frame: dict[str, Any]) -> None:
    """Send unless the connection is gone (its consumer's deliveries are given back on close)."""
    if not conn.closed:
        try:
            conn.send_nowait(frame)
        except ConnectionClosed:
            pass
