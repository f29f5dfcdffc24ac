"""The sender: numbers batches, sends them pipelined, retries, and resends after a reconnection.

Many PRODUCE frames are in flight at once (correlation ids). Each carries the producer id, producer
epoch and sequence, so a resend is stored once by the MM. A batch refused for a transient reason
(its MM is down or restarting, the partition moved to a new primary, a stale epoch; a fixed
partition waiting for its new primary, ``PARTITION_NOT_WRITABLE``) is resent as it is until
``delivery_timeout`` seconds passed; per-producer order holds because a later batch is
refused (out of order) until the earlier one is stored. A batch refused because an on-demand
partition stopped taking writes goes to the on-demand move (``move.py``). A batch whose connection
was lost waits for the session's next connection and is resent there, in sequence order.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.client.connection import ClientError
from hybridmq.client.message import pack_records
from hybridmq.client.producer.accumulator import Batch, BatchResult
from hybridmq.client.send_log import SendLog
from hybridmq.client.session import Session
from hybridmq.protocol import RemoteError
from hybridmq.protocol.connection import ConnectionClosed

# An on-demand partition that drains after a failover (or was deleted) takes no more writes.
MOVED = frozenset({ErrorCode.PARTITION_NOT_WRITABLE, ErrorCode.UNKNOWN_PARTITION})
# Errors after which a batch is resent as it is (same pid, producer epoch and sequence).
RETRIABLE = frozenset(
    {
        ErrorCode.MM_UNAVAILABLE,
        ErrorCode.NOT_PRIMARY,
        ErrorCode.STALE_EPOCH,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.BACKLOG_FULL,
    }
)
# A fixed partition keeps its identity for ever: refusing writes is only a failover in progress
# (no primary yet), so its producers resend too.
FIXED_RETRIABLE = RETRIABLE | {ErrorCode.PARTITION_NOT_WRITABLE}
FIRST_RETRY_S = 0.05
MAX_RETRY_S = 0.5
OVERDUE_CHECK_S = 0.5  # how often in-flight requests are checked against their deadline
# A request sent just before (or, with ``delivery_timeout=0``, at) its batch's deadline still gets
# this long for its answer before it counts as lost.
MIN_ANSWER_WAIT_S = 10.0

Frame = dict[str, Any]
Result = asyncio.Future[BatchResult]
# A batch not numbered yet: dest, count, blob, flags, expiry, extra, result, size, deadline
Unnumbered = tuple[str, int, bytes, int, int, dict[str, Any] | None, Result, int, float]
# A refused batch waiting for the on-demand move: its frame, result, size, deadline
Refused = tuple[Frame, Result, int, float]


class Sender:
    def __init__(
        self,
        session: Session,
        partition: str,
        producer_id: str,
        pid: int,
        delivery_timeout: float,
        send_log: SendLog | None,
        retriable: frozenset[ErrorCode] = RETRIABLE,
    ) -> None:
        self.session = session
        self.retriable = retriable  # FIXED_RETRIABLE on a fixed partition
        self.partition = partition
        self.producer_id = producer_id
        self.pid = pid  # idempotence: (pid, sequence) lets the MM store a resent batch once
        self.pepoch = 0  # producer epoch: bumped (sequence back to 0) after a failed batch
        self.seq = 0
        self.pid_gen: dict[int, int] = {pid: 0}  # pid -> move generation (resend order)
        self.delivery_timeout = delivery_timeout
        self.send_log = send_log
        self.inflight = 0  # bytes sent, not acknowledged
        self.outstanding: set[Result] = set()
        self.chains: dict[Result, str] = {}  # unfinished batch -> partition it was last sent to
        self.held: list[Unnumbered] | None = None  # new batches held back while a move is under way
        self.released = asyncio.Event()  # set whenever in-flight bytes went down (flow control)
        self.resent = 0  # batches resent on a new connection
        self.on_refused: Callable[[Refused], bool] = lambda refused: False  # the move takes it?
        self._reconnect_parked: list[tuple[Frame, Result, int]] = []
        # Refused as out of order (an earlier batch is being resent): go again once a batch is
        # acknowledged. Result -> (frame, size, deadline, next delay).
        self._after_ack: dict[Result, tuple[Frame, int, float, float]] = {}
        # Requests in flight -> when they count as lost: one the brokers never answer fails at its
        # batch's deadline (Kafka's delivery timeout), so ``send``, ``flush`` and ``close`` cannot
        # wait for ever.
        self._in_flight: dict[asyncio.Future[Any], float] = {}
        self._overdue_check: asyncio.TimerHandle | None = None
        # A batch's result is one future shared by its records' sends: when the task of one of them
        # is cancelled, asyncio cancels that future. The batch goes on; its real outcome is kept here
        # for the other sends (``outcome``) and ``flush``.
        self._outcomes: weakref.WeakKeyDictionary[Result, Result] = weakref.WeakKeyDictionary()

    @property
    def idle(self) -> bool:
        return not self.outstanding

    def send_batch(self, batch: Batch) -> None:
        blob = pack_records(batch.records)
        self.submit(batch.dest, len(batch.records), blob, 0, batch.expiry, None, batch.future, batch.size)

    def submit(
        self,
        dest: str,
        count: int,
        blob: bytes,
        flags: int,
        expiry: int,
        extra: dict[str, Any] | None,
        result: Result,
        size: int,
    ) -> None:
        self.inflight += size
        self.outstanding.add(result)
        # Avoid "exception never retrieved" for fire-and-forget sends.
        result.add_done_callback(_retrieve)
        deadline = asyncio.get_running_loop().time() + self.delivery_timeout
        item = (dest, count, blob, flags, expiry, extra, result, size, deadline)
        if self.held is not None:  # a move is under way: numbered on the new partition later
            self.held.append(item)
            return
        self.start(item)

    def start(self, item: Unnumbered) -> None:
        """Number a batch (next sequence of the current producer id) and send it."""
        dest, count, blob, flags, expiry, extra, result, size, deadline = item
        frame = {
            "t": FrameType.PRODUCE,
            "p": self.partition,
            "d": dest,
            "n": count,
            "b": blob,
            "f": flags,
            "x": expiry,
            "xa": extra,
            "pid": self.pid,
            "pep": self.pepoch,
            "seq": self.seq,
        }
        self.seq += count
        self.attempt(frame, result, size, deadline, FIRST_RETRY_S)

    def release_held(self) -> None:
        """Send the batches held back during a move, on the (new) partition, in their order."""
        held, self.held = self.held, None
        for item in held or ():
            self.start(item)

    def attempt(self, frame: Frame, result: Result, size: int, deadline: float, delay: float) -> None:
        """Send (or resend, with the same producer id, epoch and sequence) one batch."""
        loop = asyncio.get_running_loop()
        self.chains[result] = frame["p"]
        try:
            fut = self.session.conn.request_nowait(dict(frame))
        except Exception as exc:
            self.finish(frame, result, size, exc)
            return
        self._in_flight[fut] = max(deadline, loop.time() + MIN_ANSWER_WAIT_S)
        if self._overdue_check is None:
            self._overdue_check = loop.call_later(OVERDUE_CHECK_S, self._fail_overdue)

        def done(f: asyncio.Future[Any]) -> None:
            self._in_flight.pop(f, None)
            exc = f.exception()
            if isinstance(exc, RemoteError) and not self.session.conn.closed:
                if exc.code in MOVED and loop.time() < deadline:
                    self.chains.pop(result, None)
                    if self.on_refused((frame, result, size, deadline)):
                        return
                    self.chains[result] = frame["p"]
                if (
                    exc.code == ErrorCode.OUT_OF_ORDER_SEQUENCE
                    and len(self.outstanding) > 1
                    and loop.time() + MAX_RETRY_S < deadline
                ):
                    # An earlier batch is not stored yet (it waits for its own resend): on a timer
                    # whose back-off doubles, each later batch would wait longer than the one
                    # before, and a steady producer would never catch up after a failover.
                    self._after_ack[result] = (frame, size, deadline, delay)
                    loop.call_later(MAX_RETRY_S, self._resend_waiting, result)
                    return
                if exc.code in self.retriable and loop.time() + delay < deadline:
                    # e.g. the MM restarted or the partition moved to a new primary: resend; the
                    # MM drops what it already stored, and later batches wait their turn.
                    retry = min(delay * 2, MAX_RETRY_S)
                    loop.call_later(delay, self.attempt, frame, result, size, deadline, retry)
                    return
            self.finish(frame, result, size, exc, None if exc is not None else f.result())

        fut.add_done_callback(done)

    def finish(
        self,
        frame: Frame,
        result: Result,
        size: int,
        exc: BaseException | None,
        reply: dict[str, Any] | None = None,
    ) -> None:
        """The batch is acknowledged (``reply``) or given up (``exc``) - or, when its connection
        was lost and the session is opening another one, parked to be resent there."""
        if exc is not None and not _settled(result) and self._lost_with_connection(exc):
            self._reconnect_parked.append((frame, result, size))
            return
        self.inflight -= size
        self.outstanding.discard(result)
        self.chains.pop(result, None)
        self.released.set()
        if exc is not None and frame["pep"] == self.pepoch and frame.get("pid") == self.pid:
            # Given up on a batch that may not be stored: later batches start a new producer epoch.
            self.pepoch += 1
            self.seq = 0
        if exc is None and self.send_log is not None:
            self.send_log.acked(frame)
        if exc is None and self._after_ack:
            for waiting in sorted(self._after_ack, key=lambda r: _order(self._after_ack[r][0])):
                self._resend_waiting(waiting)
        if result.cancelled():
            result = self.outcome(result)
        if result.done():
            return
        if exc is None:
            result.set_result((str(frame["p"]), int(reply["o"]) if reply is not None else -1))
        elif isinstance(exc, RemoteError):
            result.set_exception(ClientError(exc.code, exc.msg))
        else:
            result.set_exception(self.session.error or exc)

    def outcome(self, result: Result) -> Result:
        """What a batch whose (shared) result was cancelled really came to: a future resolved when
        the batch is acknowledged or given up (``finish`` resolves it: a cancelled result is always
        cancelled before its batch finishes)."""
        later = self._outcomes.get(result)
        if later is None:
            later = self._outcomes[result] = asyncio.get_running_loop().create_future()
            later.add_done_callback(_retrieve)
        return later

    def _fail_overdue(self) -> None:
        """Fail each request still unanswered at its batch's deadline, then check again later
        while any is in flight. Its batch fails with ``DeliveryTimeout``: it may or may not be
        stored, as with any failed batch (the next batch starts a new producer epoch)."""
        self._overdue_check = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for fut, deadline in list(self._in_flight.items()):
            if now >= deadline and not fut.done():
                why = f"no answer from the brokers within {self.delivery_timeout:g}s"
                fut.set_exception(DeliveryTimeout(why))
        if self._in_flight:
            self._overdue_check = loop.call_later(OVERDUE_CHECK_S, self._fail_overdue)

    def _resend_waiting(self, result: Result) -> None:
        """Resend a batch refused as out of order (after an acknowledgement, or its fallback timer)."""
        entry = self._after_ack.pop(result, None)
        if entry is None or _settled(result):
            return
        frame, size, deadline, delay = entry
        self.attempt(frame, result, size, deadline, delay)

    def _lost_with_connection(self, exc: BaseException) -> bool:
        session = self.session
        if session.closing or session.ended:
            return False
        return isinstance(exc, ConnectionClosed) or session.conn.closed

    def resend_parked(self) -> None:
        """On the session's new connection: resend what the lost one left, in sequence order."""
        parked, self._reconnect_parked = self._reconnect_parked, []
        self.resent += len(parked)
        deadline = asyncio.get_running_loop().time() + self.delivery_timeout
        for frame, result, size in sorted(parked, key=lambda p: (p[0]["pep"], p[0]["seq"])):
            self.attempt(frame, result, size, deadline, FIRST_RETRY_S)

    def fail_parked(self) -> None:
        """The session ended: what waits for a connection fails."""
        parked, self._reconnect_parked = self._reconnect_parked, []
        error = self.session.error or ConnectionError("no CM reachable")
        for frame, result, size in parked:
            self.finish(frame, result, size, error)


class DeliveryTimeout(TimeoutError):
    """A batch got no answer within the producer's ``delivery_timeout``."""


def _order(frame: Frame) -> tuple[int, int]:
    return int(frame["pep"]), int(frame["seq"])


def _settled(result: Result) -> bool:
    """Acknowledged or given up. A cancelled result is not: another send of its batch may still be
    waiting for the batch's outcome (``Sender.outcome``)."""
    return result.done() and not result.cancelled()


def _retrieve(result: Result) -> None:
    if not result.cancelled():
        result.exception()
