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
the data is on disk, in flight are only the producers' windows. A produce held behind the closed
gate for ``gate_hold_s`` is refused with BACKLOG_FULL (nothing stored; the producer resends until
its delivery timeout): no request waits unanswered for longer, so a producer that gives up never
finds its batch stored after all.

Delivery: the partition's ``DeliveryEngine`` (``delivery_engine.py``) hands out its records to
queues and subscriptions, redelivers and moves records to ``_DMQ``; this host feeds it (appends,
recovery), commits what it counts and sends what it handed out.

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
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from hybridmq.api.frames import (
    BatchFlag,
    ErrorCode,
    FrameType,
    error_frame,
    is_reserved,
)
from hybridmq.api.requests import Ack, Produce
from hybridmq.broker.destinations.batch_payload import (
    check_records,
    pack_payload,
)
from hybridmq.broker.destinations.delivery import ConsumerLink, DeliveryState
from hybridmq.broker.flow import BacklogGate
from hybridmq.broker.log.control import (
    ControlRecord,
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
from hybridmq.broker.mm.cursor_recovery import recover_cursors
from hybridmq.broker.mm.delivery_engine import DeliveryEngine, outstanding, send
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import (
    FencedEpochError,
    NotEnoughReplicasError,
    NotPrimaryError,
    PartitionPrimary,
    ReplicationError,
)
from hybridmq.broker.transactions.participant import TxParticipant

log = logging.getLogger(__name__)

# A produce waits this long behind a closed backlog gate, then is refused (BACKLOG_FULL, retriable).
GATE_HOLD_S = 5.0
GATE_CHECK_S = 0.5  # how often the worker looks at the held produces while the gate is closed

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


@contextlib.contextmanager
def _as_commit_error() -> Iterator[None]:
    """A primary that may not write (stepped down, lease lost) as ``CommitError`` (NOT_PRIMARY):
    how the broker's own writes fail, so that their callers retry once the lease is back."""
    try:
        yield
    except NotPrimaryError as exc:
        raise CommitError(ErrorCode.NOT_PRIMARY, str(exc)) from None


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
        gate_hold_s: float = GATE_HOLD_S,
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
        self._produce_q: deque[tuple[Any, Produce, float]] = deque()  # (conn, frame, arrived)
        self._produce_ready = asyncio.Event()
        self.gate = BacklogGate(max_backlog)
        self.gate_hold_s = gate_hold_s
        self._wake = wake or (lambda: None)
        self._tasks: list[asyncio.Task[None]] = []
        self.appended_records = 0
        self.retention_interval = 5.0
        # Acknowledgements waiting for the control committer to be answered (the deliveries
        # waiting for it are the engine's outbox).
        self._ack_replies: list[tuple[Any, Ack]] = []
        self._committing: list[tuple[Any, Ack]] = []  # replies of the round in progress
        self._control_ready = asyncio.Event()
        self._end_at_last_check = 0  # the log end the space checker saw last round
        self.producers = AttachedProducers()
        # Named reader cursors (stream readers' committed offsets) and the end of the last
        # application data batch (control records and internal ``_`` destinations after it, e.g.
        # the MM's own ``topic:_LOG`` events, are nothing a reader must be held for).
        self.readers: dict[str, int] = {}
        self.data_end = 0
        self.delivery = DeliveryEngine(
            name,
            storage,
            epoch=lambda: self.leader.epoch,
            writable=lambda: self.leader.writable,
            append_internal=self.append_internal,
            round_needed=self._control_ready.set,
            max_redeliveries=max_redeliveries,
        )
        self.tx = TxParticipant(self)

    @property
    def epoch(self) -> int:
        return self.leader.epoch

    @property
    def states(self) -> dict[str, DeliveryState]:
        """Every queue's and subscription's delivery state, by key (the engine's)."""
        return self.delivery.states

    # -- lifecycle -------------------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild queue and durable cursors, delivery counts, reader cursors and open transactions
        from the log (``cursor_recovery``); everything in it becomes visible."""
        self.data_end = recover_cursors(self.name, self.storage, self.delivery, self.tx, self.readers)
        log.info(
            "partition %s recovered: end=%d states=%d", self.name, self.storage.end_offset, len(self.states)
        )

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
        self._refuse_queued_produces(ErrorCode.MM_UNAVAILABLE, f"{self.name} is stopping")
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
        self._refuse_queued_produces(ErrorCode.NOT_PRIMARY, moved)

    def _refuse_queued_produces(self, code: ErrorCode, why: str) -> None:
        """Answer the produces no worker took (the host stops serving): the producers resend."""
        queued = list(self._produce_q)
        self._produce_q.clear()
        for conn, frame, _ in queued:
            send(conn, error_frame(code, why, frame.c))

    # -- produce ---------------------------------------------------------------------------------
    def enqueue_produce(self, conn: Any, frame: Produce) -> None:
        self._produce_q.append((conn, frame, time.monotonic()))
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
        with _as_commit_error():
            self.leader.ensure_writable()

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
        request: Produce | None = None,
    ) -> tuple[int, int, bool]:
        """Every data batch this host writes, through ``PartitionPrimary.append``; ``(base, last,
        duplicate)``.

        A produce ``request`` passes every rule of ``PartitionPrimary.check_append`` (its epoch,
        the lease, ``minInSync``, a new producer's first sequence) and the partition taking
        writes; the broker's own batches pass the fencing alone: like cursors, they only need the
        in-sync replicas, and a draining partition still moves records to ``_DMQ``."""
        producer_id = base_sequence = -1
        producer_epoch = 0
        epoch: int | None = None
        if request is not None:
            producer_id = request.pid if request.pid is not None else -1
            producer_epoch = request.producer_epoch
            base_sequence = request.sequence
            epoch = request.epoch if request.epoch is not None else self.epoch
            if not self.writable:
                self.leader.check_append(epoch, producer_id, base_sequence)  # its refusal first
                raise _NotWritable(f"{self.name} takes no writes")
        now = int(time.time() * 1000)
        # A producer's refusal is answered by ``_append_one``; the broker's own is a CommitError.
        with _as_commit_error() if request is None else contextlib.nullcontext():
            result = self.leader.append(
                pack_payload(dest, flags, expiry, extra, blob),
                count,
                epoch=epoch,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                timestamp=now,
            )
        self.storage.appended(result, dest, count, blob, flags, expiry, extra, now)
        base, last, dup = result.base_offset, result.last_offset, result.duplicate
        if not dup:
            if not is_reserved(dest):
                self.data_end = last + 1
            if dest.startswith("queue:") and ("q:" + dest) not in self.states:
                self.delivery.queue_state(dest, base)
        return base, last, dup

    def append_control(self, records: list[ControlRecord]) -> None:
        """Append control records (cursors, delivery counts, reader cursors), fenced like every
        append (``CommitError`` while this primary may not write); committed by the next flush."""
        payload, count = encode_control(records)
        with _as_commit_error():
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
            while self.gate.blocked:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(GATE_CHECK_S):
                        await self.gate.wait()
                self._refuse_held_since(time.monotonic() - self.gate_hold_s)
            batch = list(self._produce_q)
            self._produce_q.clear()
            self._produce_ready.clear()
            acks: list[tuple[Any, dict[str, Any]]] = []
            for conn, frame, _ in batch:
                acks.append((conn, self._append_one(frame)))
            stored = any(reply["t"] == FrameType.PRODUCE_ACK for _, reply in acks)
            try:
                end = self.storage.end_offset
                await self.storage.flush(end)
                # ``minInSync`` is for acknowledging producers; the broker's own batches (``_DMQ``
                # moves, ``_LOG`` events) only need the in-sync replicas, as cursors do.
                await self.commit(end, min_in_sync=stored)
            except asyncio.CancelledError:
                # Halted or stopped mid-commit (demoted, the partition deleted): every request taken
                # is still answered, refused answers as they are. Nothing else would answer them:
                # the CM's link stays up, and its producer would wait for ever.
                _answer(_not_acknowledged(acks, ErrorCode.NOT_PRIMARY, f"{self.name} stopped serving"))
                raise
            except Exception as exc:
                # A failed commit has a retriable ``frame_code`` (NOT_PRIMARY, MM_UNAVAILABLE): the
                # producers resend and the sequence numbers drop duplicates. A refused produce
                # keeps its own answer.
                code = exc.frame_code if isinstance(exc, CommitError) else None
                if code is None:
                    log.exception("flush failed on %s", self.name)
                acks = _not_acknowledged(acks, code or ErrorCode.INTERNAL, f"not acknowledged: {exc}")
            _answer(acks)
            self._wake()

    def _refuse_held_since(self, arrived_before: float) -> None:
        """Refuse the produces that have waited behind the closed gate since ``arrived_before``
        (the queue is in arrival order)."""
        queue = self._produce_q
        why = f"{self.name}: backlog over {self.max_backlog} records for {self.gate_hold_s:g}s: not stored"
        while queue and queue[0][2] <= arrived_before:
            conn, frame, _ = queue.popleft()
            send(conn, error_frame(ErrorCode.BACKLOG_FULL, why, frame.c))

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

    def _append_one(self, frame: Produce) -> dict[str, Any]:
        corr = frame.c
        if self.only_destination is not None and frame.destination != self.only_destination:
            return error_frame(
                ErrorCode.INVALID_REQUEST, f"{self.name} only takes {self.only_destination}", corr
            )
        dest, count, blob, flags = frame.destination, frame.count, frame.records, frame.flags
        try:
            if count < 1:
                raise ValueError(f"bad count {count}")
            if dest.startswith("queue:") and not flags & BatchFlag.CHUNK:
                check_records(blob, count)  # a queue hands its records out one by one
            expiry = int(frame.expiry)
            base, last, dup = self._append(dest, count, blob, flags, expiry, frame.extra, request=frame)
        except _NotWritable as exc:
            return error_frame(ErrorCode.PARTITION_NOT_WRITABLE, str(exc), corr)
        except (KeyError, ValueError, TypeError, OverflowError) as exc:
            return error_frame(ErrorCode.INVALID_REQUEST, f"bad produce: {exc}", corr)
        except (ReplicationError, LogError) as exc:
            code = next((c for kind, c in _REFUSED if isinstance(exc, kind)), None)
            if code is None:
                return error_frame(ErrorCode.INTERNAL, f"log error: {exc}", corr)
            return error_frame(code, f"{self.name}: {exc}", corr)
        if frame.pid is not None:
            self.producers.seen([frame.pid])
        if dup:
            return {"t": FrameType.PRODUCE_ACK, "r": corr, "p": self.name, "o": base, "l": last, "dup": True}
        self.appended_records += count
        return {"t": FrameType.PRODUCE_ACK, "r": corr, "p": self.name, "o": base, "l": last}

    # -- subscriptions ---------------------------------------------------------------------------
    def attach(self, link: ConsumerLink, pattern: str, mode: str, durable: str | None) -> None:
        self.delivery.attach(link, pattern, mode, durable)

    def detach(self, link: ConsumerLink) -> None:
        self.delivery.detach(link)

    def pump(self) -> bool:
        """Deliver what the links have credit for; True if anything was sent."""
        return self.delivery.pump()

    def ack(
        self,
        link: ConsumerLink,
        start: int,
        nack: bool = False,
        attempt: int | None = None,
        reply: tuple[Any, Ack] | None = None,
        first: int | None = None,
        last: int | None = None,
        requeue: bool = True,
    ) -> bool:
        """Settle, give back or reject records of a delivery (``DeliveryEngine.settle``).

        ``reply`` (connection, ACK frame) is answered once the acknowledgement is committed; False
        (nothing answered) when the records are not outstanding on ``link`` at that attempt."""
        done = self.delivery.settle(link, start, nack, attempt, first, last, requeue)
        if self.blocked:
            self._check_space()
        if done and reply is not None:
            self._ack_replies.append(reply)
            self._control_ready.set()
        return done

    def write_cursors(self, everything: bool = False) -> None:
        """Append the changed (or all) cursors as control records (committed by the next flush);
        while this primary may not write, nothing: they stay changed for a later round."""
        if not self.leader.writable:
            return
        records = self.delivery.cursor_records(everything)
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
            outbox = self.delivery.take_outbox()
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
                self.delivery.withdraw(outbox + self.delivery.take_outbox())
                self._committing = []
                _refuse(replies, code or ErrorCode.INTERNAL, f"not committed: {exc}")
                await asyncio.sleep(0.05)
                await self._until_writable()  # fenced: ``pump`` waits too
                self._wake()
                continue
            self._committing = []
            # Given back while its round waited (its consumer left, its stream was given back by a
            # failed round): never sent, so it does not count either.
            self.delivery.withdraw([o for o in outbox if not outstanding(*o)])
            deliveries = [(link.conn, f) for state, link, f in outbox if outstanding(state, link, f)]
            for conn, frame in deliveries + [(conn, {"t": FrameType.OK, "r": f.c}) for conn, f in replies]:
                send(conn, frame)
            self._wake()

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


def _refuse(replies: list[tuple[Any, Ack]], code: ErrorCode, why: str) -> None:
    for conn, frame in replies:
        send(conn, error_frame(code, why, frame.c))


def _not_acknowledged(
    acks: list[tuple[Any, dict[str, Any]]], code: ErrorCode, why: str
) -> list[tuple[Any, dict[str, Any]]]:
    """The answers with each acknowledgement turned into the error ``code`` (a refusal stays)."""
    return [
        (c, error_frame(code, why, f.get("r")) if f["t"] == FrameType.PRODUCE_ACK else f) for c, f in acks
    ]


def _answer(acks: list[tuple[Any, dict[str, Any]]]) -> None:
    for conn, reply in acks:
        # A transport may close before ``conn.closed`` says so: that must not end the worker.
        send(conn, reply)
