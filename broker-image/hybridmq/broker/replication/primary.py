"""The primary side of one partition: appends, backup fetches, in-sync set, high watermark, fencing.

Lifecycle (the MM server drives it from its ``AssignmentSource``)::

    primary = PartitionPrimary(log, partition="orders-0", replica_id="mm-0", epoch=7,
                               replicas=("mm-0", "mm-1"), in_sync=("mm-0", "mm-1"), min_in_sync=2,
                               lease_valid=renewer.is_valid, alter_in_sync=report_in_sync)
    result = await primary.produce(payload, count, epoch=request_epoch, producer_id=pid,
                                   base_sequence=seq)          # acknowledged: min_in_sync copies
    response = await primary.handle_fetch(fetch_request)        # a backup's FetchRequest
    response = primary.handle_end_offset_for_epoch(request)     # a backup truncating
    snapshot = primary.handle_snapshot(request)                 # a new backup catching up
    primary.update_assignment(replicas=..., in_sync=..., min_in_sync=...)  # operator's decisions
    primary.step_down("saw newer epoch 8")                      # stop accepting writes for good
    primary.tick()                                              # every ~lag_time/4: in-sync rule

Rules:

* Fencing: a produce or fetch whose epoch is older than ours is refused with
  ``FencedEpochError`` / ``ErrorCode.STALE_EPOCH``; a newer epoch means this primary is stale: it
  steps down and answers ``NOT_PRIMARY``. Once stepped down no write is accepted again; while
  ``lease_valid()`` is false none is accepted either (``NOT_PRIMARY``: the producers resend), and
  pending acknowledgements fail with ``NotPrimaryError`` in both cases. A lapsed lease fences, it
  does not step down: once renewed (the MM has applied the current table, so this epoch is still
  the newest) the same primary takes writes again.
* A produce is refused (``NotEnoughReplicasError``) while fewer than ``min_in_sync`` replicas
  (primary included; never capped at the replica count) are in sync, and acknowledged only once the
  high watermark covers it: ``HW = min(primary's durable offset, each in-sync backup's fetch
  offset)``, never decreasing within the epoch.
* The in-sync set follows :mod:`.isr`. Changes are *proposed*; they take effect once committed:
  by ``alter_in_sync(new_set) -> bool`` if given (the MM reports it; the operator commits it into
  ``Partition.status.inSync``) and/or by ``update_assignment(in_sync=...)``; without a committer
  they commit at once. Until then the HW is computed over the union of the committed and the
  proposed sets (a backup being removed still holds the HW back; Kafka's "maximal ISR"), so an
  acknowledged record is on every replica the operator may promote.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from hybridmq.broker.log import AppendResult, PartitionLog
from hybridmq.broker.log.epoch_cache import UNDEFINED_EPOCH
from hybridmq.broker.log.errors import OutOfOrderSequenceError

from .errors import (
    ErrorCode,
    FencedEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotPrimaryError,
    ReplicationError,
)
from .isr import ReplicaState, can_join, is_lagging
from .messages import (
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    FetchRequest,
    FetchResponse,
    Snapshot,
    SnapshotRequest,
)

LOG = logging.getLogger(__name__)

AlterInSync = Callable[[frozenset[str]], Awaitable[bool]]


class PartitionPrimary:
    def __init__(
        self,
        log: PartitionLog,
        *,
        partition: str,
        replica_id: str,
        epoch: int,
        replicas: Sequence[str],
        in_sync: Iterable[str] | None = None,
        high_watermark: int = -1,
        min_in_sync: int = 2,
        lag_time_ms: float = 10_000,
        lease_valid: Callable[[], bool] | None = None,
        alter_in_sync: AlterInSync | None = None,
        state_provider: Callable[[], bytes | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.partition = partition
        self.replica_id = replica_id
        self.epoch = epoch
        self._clock = clock
        self._lag_time = lag_time_ms / 1000.0
        self._lease_valid = lease_valid
        self._alter_in_sync = alter_in_sync
        self._state_provider = state_provider
        self._replicas: tuple[str, ...] = tuple(replicas)
        self._min_in_sync = min_in_sync
        self._stepped_down: str | None = None
        self._fenced = False  # the lease lapsed: writes refused until it is renewed
        self._states: dict[str, ReplicaState] = {}
        self._hw_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._data_event = asyncio.Event()
        self._data_listeners: set[asyncio.Event] = set()
        self._alter_task: asyncio.Task[None] | None = None
        log.begin_epoch(epoch)  # StaleEpochError if the log has seen a newer epoch
        self.epoch_start_offset = log.end_offset_for_epoch(epoch)[1]
        if self.epoch_start_offset < 0:
            self.epoch_start_offset = log.log_end_offset
        now = clock()
        members = set(in_sync if in_sync is not None else self._replicas) & set(self._replicas)
        members.add(replica_id)
        self._in_sync = frozenset(members)
        self._proposed: frozenset[str] | None = None
        for replica in self._replicas:
            if replica != replica_id:
                # Members get a full lag time of grace to fetch from the new primary.
                self._states[replica] = ReplicaState(
                    replica, last_caught_up_time=now if replica in members else float("-inf")
                )
        # A promoted backup starts from the high watermark it had learnt (Kafka's new leader keeps
        # its follower HW): what readers were told is committed stays readable through the move,
        # instead of the end going back to the log start until every in-sync backup has fetched.
        self._hw = max(min(log.log_start_offset, log.log_end_offset), min(high_watermark, log.durable_offset))
        log.add_append_listener(self._on_append)
        self._update_hw()

    # -- state -------------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def in_sync(self) -> frozenset[str]:
        """The committed in-sync set."""
        return self._in_sync

    @property
    def proposed_in_sync(self) -> frozenset[str] | None:
        """An in-sync set waiting to be committed (report it to the operator), or None."""
        return self._proposed

    @property
    def replicas(self) -> tuple[str, ...]:
        return self._replicas

    @property
    def min_in_sync(self) -> int:
        # Never capped at the replica count: a partition left with fewer copies than it must keep
        # refuses writes (retriable) instead of acknowledging them with too few copies.
        return max(1, self._min_in_sync)

    @property
    def writable(self) -> bool:
        return self._stepped_down is None and (self._lease_valid is None or self._lease_valid())

    def replica_state(self, replica_id: str) -> ReplicaState | None:
        return self._states.get(replica_id)

    def report(self) -> dict[str, object]:
        """What the MM reports about this partition (lease annotation, /admin, metrics)."""
        return {
            "role": "primary",
            "epoch": self.epoch,
            "log_start_offset": self.log.log_start_offset,
            "log_end_offset": self.log.log_end_offset,
            "high_watermark": self._hw,
            "in_sync": sorted(self._in_sync),
            "proposed_in_sync": sorted(self._proposed) if self._proposed is not None else None,
            "replica_offsets": {r: s.fetch_offset for r, s in self._states.items()},
            "writable": self.writable,
        }

    # -- fencing -----------------------------------------------------------------------------------

    def check_epoch(self, epoch: int) -> None:
        if epoch < self.epoch:
            raise FencedEpochError(f"{self.partition}: epoch {epoch} is older than {self.epoch}")
        if epoch > self.epoch:
            self.step_down(f"saw newer epoch {epoch}")
            raise NotPrimaryError(f"{self.partition}: epoch {epoch} is newer than {self.epoch}")

    def ensure_writable(self) -> None:
        if self._stepped_down is not None:
            raise NotPrimaryError(f"{self.partition}: stepped down ({self._stepped_down})")
        if self._lease_valid is not None and not self._lease_valid():
            # Fenced, not stepped down: the lease only comes back once the MM has applied the
            # current table, so a renewed lease at this same epoch means nobody else was promoted
            # (a newer epoch replaces this object); the partition must take writes again then.
            if not self._fenced:
                LOG.info("%s: primary at epoch %d fenced: lease lost", self.partition, self.epoch)
                self._fenced = True
            self._fail_waiters("lease lost")
            raise NotPrimaryError(f"{self.partition}: lease lost (writes fenced until it is renewed)")
        if self._fenced:
            LOG.info("%s: primary at epoch %d: lease renewed, writes accepted", self.partition, self.epoch)
            self._fenced = False

    def step_down(self, reason: str) -> None:
        """Stop accepting writes for good and fail every pending acknowledgement (idempotent)."""
        if self._stepped_down is not None:
            return
        LOG.info("%s: primary at epoch %d steps down: %s", self.partition, self.epoch, reason)
        self._stepped_down = reason
        self._fail_waiters(f"stepped down ({reason})")
        self._wake_fetches()

    def _fail_waiters(self, why: str) -> None:
        """Fail every pending acknowledgement: none may go out (the producers resend)."""
        waiters, self._hw_waiters = self._hw_waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(NotPrimaryError(f"{self.partition}: {why}"))

    def close(self) -> None:
        """Detach from the log (the primary object is not used again)."""
        self.step_down("closed")
        self.log.remove_append_listener(self._on_append)
        if self._alter_task is not None:
            self._alter_task.cancel()

    # -- producing ---------------------------------------------------------------------------------

    def check_append(self, epoch: int, producer_id: int = -1, base_sequence: int = -1) -> None:
        """Every rule a producer's write must pass before it is appended (:meth:`append`): the
        request's epoch, this primary's lease, ``min_in_sync`` replicas in sync, and an idempotent
        producer the log has never stored starting at its first batch."""
        self.check_epoch(epoch)
        self.ensure_writable()
        if len(self._in_sync) < self.min_in_sync:
            raise NotEnoughReplicasError(
                f"{self.partition}: not enough replicas: {len(self._in_sync)} in sync, "
                f"minInSync {self.min_in_sync} (retriable)"
            )
        if producer_id >= 0 and base_sequence > 0 and self.log.producer_state.get(producer_id) is None:
            # Resends after a failover may arrive out of order: a later batch taken as the start
            # would make the first one look like an old duplicate, and it would be dropped.
            raise OutOfOrderSequenceError(producer_id, 0, base_sequence)

    def append(
        self,
        payload: bytes | bytearray | memoryview,
        count: int,
        *,
        epoch: int | None,
        producer_id: int = -1,
        producer_epoch: int = 0,
        base_sequence: int = -1,
        timestamp: int | None = None,
        control: bool = False,
    ) -> AppendResult:
        """The one way a batch enters this primary's log; does not wait (see :meth:`produce`, and
        the MM's group commit: many appends, then one :meth:`wait_committed`).

        A producer's write names the ``epoch`` it was routed with and passes every rule of
        :meth:`check_append`. The broker's own writes (``epoch=None``: cursors, delivery counts,
        ``_DMQ`` moves, committed transactions) pass the fencing alone: they only need the in-sync
        replicas, and a partition short of ``min_in_sync`` still records its consumers' progress."""
        if epoch is None:
            self.ensure_writable()
        else:
            self.check_append(epoch, producer_id, base_sequence)
        return self.log.append(
            payload,
            count,
            self.epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            timestamp=timestamp,
            control=control,
        )

    async def produce(
        self,
        payload: bytes | bytearray | memoryview,
        count: int,
        *,
        epoch: int,
        producer_id: int = -1,
        producer_epoch: int = 0,
        base_sequence: int = -1,
        timestamp: int | None = None,
        control: bool = False,
    ) -> AppendResult:
        """Append and return once ``min_in_sync`` copies (this one fsynced) hold the batch.

        A duplicate (idempotent resend) is acknowledged with the original offsets once those are
        committed. Raises a ReplicationError (or a LogError for sequence problems). Bound the wait
        with ``asyncio.timeout``: a batch whose wait was cancelled stays in the log and may still
        be committed; the producer resends it and the resend is recognised as a duplicate.
        """
        result = self.append(
            payload,
            count,
            epoch=epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            timestamp=timestamp,
            control=control,
        )
        if result.duplicate and result.base_offset < 0:
            return result
        await self.wait_committed(result.end_offset)
        return result

    async def wait_committed(self, end_offset: int, *, min_in_sync: bool = True) -> None:
        """Local durability (group commit), then :meth:`wait_for_hw`."""
        await self.log.flush_until(end_offset)
        self._update_hw()
        await self.wait_for_hw(end_offset, min_in_sync=min_in_sync)

    async def wait_for_hw(self, offset: int, *, min_in_sync: bool = True) -> None:
        """Return once the high watermark is >= ``offset`` with ``min_in_sync`` replicas in sync
        (``min_in_sync=False``: on every in-sync replica, however few; enough for control records,
        since only an in-sync replica is ever promoted)."""
        if self._hw < offset:
            if self._stepped_down is not None:
                raise NotPrimaryError(f"{self.partition}: stepped down ({self._stepped_down})")
            if not self.writable:  # fenced: backups are refused, the HW cannot move
                raise NotPrimaryError(f"{self.partition}: lease lost")
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._hw_waiters, (offset, next(self._seq), future))
            await future
        if min_in_sync and len(self._in_sync) < self.min_in_sync:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.partition}: stored, but only {len(self._in_sync)} replicas in sync"
            )

    # -- backups -----------------------------------------------------------------------------------

    def _fetch_error(self, request_epoch: int, replica_id: str) -> ErrorCode:
        if request_epoch < self.epoch:
            return ErrorCode.STALE_EPOCH
        if request_epoch > self.epoch:
            self.step_down(f"replica {replica_id} is at newer epoch {request_epoch}")
            return ErrorCode.NOT_PRIMARY
        if not self.writable:  # stepped down, or fenced until the lease is renewed
            return ErrorCode.NOT_PRIMARY
        if replica_id not in self._states:
            return ErrorCode.UNKNOWN_REPLICA
        return ErrorCode.NONE

    async def handle_fetch(self, request: FetchRequest) -> FetchResponse:
        """Serve a backup's fetch: record its progress, apply the in-sync rule, return batches."""
        refused = self.record_fetch(request)
        if refused is not None:
            return refused
        if request.fetch_offset >= self.log.log_end_offset and request.max_wait_ms > 0:
            self._data_event.clear()
            try:
                async with asyncio.timeout(request.max_wait_ms / 1000.0):
                    await self._data_event.wait()
            except TimeoutError:
                pass
        return self.read_fetch(request)

    def record_fetch(self, request: FetchRequest) -> FetchResponse | None:
        """The first half of :meth:`handle_fetch` (a batched fetch calls the halves itself): the
        error response for a refused fetch, else None after recording the backup's progress (in-sync
        rule, high watermark)."""
        log = self.log
        error = self._fetch_error(request.epoch, request.replica_id)
        if error is ErrorCode.NONE and not (
            log.log_start_offset <= request.fetch_offset <= log.log_end_offset
        ):
            error = ErrorCode.OFFSET_OUT_OF_RANGE
        if error is not ErrorCode.NONE:
            return FetchResponse(
                request.partition, self.epoch, error, self._hw, log.log_start_offset, log.log_end_offset
            )
        state = self._states[request.replica_id]
        now = self._clock()
        state.on_fetch(request.fetch_offset, now, log.log_end_offset)
        self._maintain_in_sync(now)
        self._update_hw()
        return None

    def has_news(self, request: FetchRequest) -> bool:
        """Whether :meth:`read_fetch` has batches for ``request``, or must say this primary stepped
        down: what ends a long poll."""
        return self._stepped_down is not None or request.fetch_offset < self.log.log_end_offset

    def read_fetch(self, request: FetchRequest, max_bytes: int | None = None) -> FetchResponse:
        """The second half of :meth:`handle_fetch`, after :meth:`record_fetch` accepted it: the
        batches from ``fetch_offset`` on (at most ``max_bytes``, default the request's, but at least
        one batch), or ``NOT_PRIMARY`` if this primary stepped down meanwhile."""
        log = self.log
        if self._stepped_down is not None:
            return FetchResponse(
                request.partition,
                self.epoch,
                ErrorCode.NOT_PRIMARY,
                self._hw,
                log.log_start_offset,
                log.log_end_offset,
            )
        records = b""
        if request.fetch_offset < log.log_end_offset:
            records = log.read(request.fetch_offset, request.max_bytes if max_bytes is None else max_bytes)
        return FetchResponse(
            request.partition,
            self.epoch,
            ErrorCode.NONE,
            self._hw,
            log.log_start_offset,
            log.log_end_offset,
            records,
        )

    def add_data_listener(self, event: asyncio.Event) -> None:
        """Set ``event`` when batches are appended or this primary steps down (a batched long poll
        over many partitions waits on one event)."""
        self._data_listeners.add(event)

    def remove_data_listener(self, event: asyncio.Event) -> None:
        self._data_listeners.discard(event)

    def handle_end_offset_for_epoch(self, request: EpochEndOffsetRequest) -> EpochEndOffsetResponse:
        log = self.log
        error = self._fetch_error(request.epoch, request.replica_id)
        if error is not ErrorCode.NONE:
            return EpochEndOffsetResponse(
                request.partition, self.epoch, error, log_start_offset=log.log_start_offset
            )
        leader_epoch, end_offset = log.end_offset_for_epoch(request.leader_epoch)
        if leader_epoch == UNDEFINED_EPOCH:
            end_offset = -1
        return EpochEndOffsetResponse(
            request.partition,
            self.epoch,
            ErrorCode.NONE,
            leader_epoch,
            end_offset,
            log.log_start_offset,
            log.log_end_offset,
        )

    def handle_snapshot(self, request: SnapshotRequest) -> Snapshot:
        """Externalize the state a new backup needs (messages + sequence-number table)."""
        log = self.log
        error = self._fetch_error(request.epoch, request.replica_id)
        if error is not ErrorCode.NONE:
            return Snapshot(request.partition, self.epoch, error)
        app_state = self._state_provider() if self._state_provider is not None else None
        return Snapshot(
            request.partition,
            self.epoch,
            ErrorCode.NONE,
            log_start_offset=log.log_start_offset,
            snapshot_offset=log.log_end_offset,
            high_watermark=self._hw,
            producer_state=log.producer_snapshot(),
            app_state=app_state,
        )

    # -- in-sync set and high watermark --------------------------------------------------------------

    async def run_maintenance(self, interval: float | None = None) -> None:
        """Call :meth:`tick` every ``interval`` seconds (default: a quarter of the lag time) until
        the primary steps down. Run it as a task next to the primary."""
        period = interval if interval is not None else max(self._lag_time / 4, 0.01)
        while self._stepped_down is None:
            self.tick()
            await asyncio.sleep(period)

    def tick(self) -> None:
        """Apply the lag-time rule without waiting for a fetch (call it periodically)."""
        self._maintain_in_sync(self._clock())
        self._update_hw()

    def _maintain_in_sync(self, now: float) -> None:
        current = self._proposed if self._proposed is not None else self._in_sync
        desired = set(current)
        for replica, state in self._states.items():
            if replica in desired:
                if is_lagging(state, now, self._lag_time):
                    desired.discard(replica)
            elif can_join(state, now, self._lag_time, self._hw, self.epoch_start_offset):
                desired.add(replica)
        desired.add(self.replica_id)
        if desired != current:
            self._propose(frozenset(desired))

    def _propose(self, members: frozenset[str]) -> None:
        LOG.info("%s: in-sync set %s -> %s", self.partition, sorted(self._in_sync), sorted(members))
        if self._alter_in_sync is None:
            self._commit(members)
            return
        self._proposed = members
        if self._alter_task is None or self._alter_task.done():
            self._alter_task = asyncio.get_running_loop().create_task(self._run_alter())

    async def _run_alter(self) -> None:
        assert self._alter_in_sync is not None
        while self._proposed is not None and self._stepped_down is None:
            proposal = self._proposed
            try:
                ok = await self._alter_in_sync(proposal)
            except Exception:
                LOG.exception("%s: alter_in_sync failed", self.partition)
                ok = False
            if ok and self._proposed == proposal:
                self._commit(proposal)
                return
            if not ok:
                await asyncio.sleep(0.1)

    def _commit(self, members: frozenset[str]) -> None:
        self._in_sync = members | {self.replica_id}
        self._proposed = None
        self._update_hw()

    def update_assignment(
        self,
        *,
        replicas: Sequence[str] | None = None,
        in_sync: Iterable[str] | None = None,
        min_in_sync: int | None = None,
    ) -> None:
        """Apply the operator's latest decisions for this partition at the same epoch."""
        if replicas is not None:
            self._replicas = tuple(replicas)
            now = self._clock()
            for replica in self._replicas:
                if replica != self.replica_id and replica not in self._states:
                    self._states[replica] = ReplicaState(replica)
            for replica in list(self._states):
                if replica not in self._replicas:
                    del self._states[replica]
            members = set(self._replicas) | {self.replica_id}
            self._in_sync = self._in_sync & members
            if self._proposed is not None:
                # A replica the operator dropped is never promoted: a pending proposal that still
                # names it must not hold the HW back (it has no fetch state any more) nor keep the
                # operator's in-sync set from being committed below.
                self._proposed = self._proposed & members
            self._maintain_in_sync(now)
        if min_in_sync is not None:
            self._min_in_sync = min_in_sync
        if in_sync is not None:
            committed = frozenset(in_sync) & (set(self._replicas) | {self.replica_id})
            if self._proposed is None or committed == self._proposed | {self.replica_id}:
                self._commit(committed)
        self._update_hw()

    def _update_hw(self) -> None:
        members = self._in_sync if self._proposed is None else self._in_sync | self._proposed
        hw = self.log.durable_offset
        for replica in members:
            if replica == self.replica_id:
                continue
            state = self._states.get(replica)
            hw = min(hw, state.fetch_offset if state is not None else -1)
        if hw > self._hw:
            self._hw = hw
            waiters = self._hw_waiters
            while waiters and waiters[0][0] <= hw:
                future = heapq.heappop(waiters)[2]
                if not future.done():
                    future.set_result(None)

    def _on_append(self) -> None:
        self._wake_fetches()

    def _wake_fetches(self) -> None:
        self._data_event.set()
        for event in self._data_listeners:
            event.set()


__all__ = ["AlterInSync", "PartitionPrimary", "ReplicationError"]
