"""Glue between the MM server and ``hybridmq.broker.replication``: one role per partition replica.

For every partition whose ``replicas`` name this MM, as its ``AssignmentSource`` says:

* **primary** at epoch E: the log is wrapped in a ``PartitionPrimary`` (fencing, in-sync set, high
  watermark, the lease) and served by a ``PartitionHost``: a produce is appended only once
  ``PartitionPrimary.check_append`` passed, and acknowledged only once the high watermark covers it
  and the lease is still valid. A partition with one replica is a primary without backups. Backup
  fetches arriving as REPLICA_* frames are answered by the ``PartitionPrimary``. In-sync changes are
  proposed to the controller when there is one (``Liveness.commits_in_sync``: report through the
  lease, then wait for the new table).
* **backup**: a ``BackupFetcher`` pulls from the primary MM over ``TcpPrimaryTransport``
  (truncation on an epoch change, snapshot + tail catch-up); the fetches of all partitions from
  one primary MM travel together, one REPLICA_FETCH_BATCH at a time (``mm/replica_batch.py``).
  No host: consumers never read a backup.
* Role changes: promotion stops the fetcher and opens a host on the same log; demotion fails every
  pending acknowledgement (NOT_PRIMARY), halts the host and starts a fetcher, which truncates the
  uncommitted tail. A partition no longer in the table is closed and its data deleted.

``report()`` is the ``MMReport`` (``hybridmq.api.lease_report``) the liveness channel carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hybridmq.api.assignment import PartitionAssignment
from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log.errors import StaleEpochError
from hybridmq.broker.mm import incarnation
from hybridmq.broker.mm.config import MMConfig
from hybridmq.broker.mm.hosted import HostedPartitions, Subscriptions
from hybridmq.broker.mm.liveness import Liveness
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.replica_batch import FetchBatcher, decode_request, encode_response
from hybridmq.broker.mm.replica_transport import PeerLinks, TcpPrimaryTransport
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import (
    BackupFetcher,
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    FetchRequest,
    FetchResponse,
    PartitionPrimary,
    Snapshot,
    SnapshotRequest,
    from_wire,
    to_wire,
)
from hybridmq.broker.replication.fetch_batch import BatchItem, serve_batch
from hybridmq.broker.routing.held_requests import HeldRequests
from hybridmq.protocol import Connection
from hybridmq.protocol.connection import ConnectionClosed

log = logging.getLogger(__name__)

# A reconcile round is cancelled (and started again) when one partition's step takes this long: the
# bound catches a step that hangs, not a long round (hundreds of replacement backups after a
# failover take longer than this on a busy MM, and each one done is progress).
STEP_BOUND_S = 10.0

# Backups promoted side by side in one round (each mostly waits: its fetcher to stop, its log read
# back in a worker thread).
PROMOTIONS_AT_ONCE = 16
# New backup copies whose logs are created side by side (file creation and fsyncs in worker
# threads). 16 at once competed for the disk with the new primaries' fsyncs, which producers'
# acknowledgements wait for: their first acks after a failover came about 1 s later.
OPENS_AT_ONCE = 4


def batched_fetch_enabled() -> bool:
    """``HYBRIDMQ_REPLICA_FETCH=single``: one REPLICA_FETCH per partition (the unbatched path, kept
    to compare against)."""
    return os.environ.get("HYBRIDMQ_REPLICA_FETCH", "batch") != "single"


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel and reap ``tasks``, cancelling again if one swallowed it (Python 3.11's ``wait_for``
    can lose a cancellation that races with the awaited event)."""
    for _ in range(10):
        pending = [t for t in tasks if not t.done()]
        if not pending:
            break
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=0.5)
    tasks.clear()


def visible_backlog(host: PartitionHost) -> int:
    """User messages consumers still have to get: up to the visible end, without the control
    records (cursor snapshots) in between, which take offsets but are no messages."""
    if not host.states:
        return 0
    end = host.storage.high_watermark
    low = min(s.lw() for s in host.states.values())
    return max(0, end - low - host.storage.control_records_between(low, end))


class LoopTurns:
    """Gives the other tasks a turn once a round has held the loop for ``slice_s``. A round walks
    every partition of the table, most of them unchanged (no await at all), and some hundreds
    changed after a failover: without turns they held the loop for seconds, and the MM's
    heartbeats with it (its lease lapsed in the middle of its promotions); with a turn after each
    partition, a round of 1,000 on a busy MM took 20 s (each turn waits for every ready task)."""

    def __init__(self, slice_s: float = 0.01) -> None:
        self.slice_s = slice_s
        self.since = time.monotonic()

    async def maybe(self) -> None:
        now = time.monotonic()
        if now - self.since >= self.slice_s:
            await asyncio.sleep(0)
            self.since = time.monotonic()


class Role(StrEnum):
    PRIMARY = "primary"
    BACKUP = "backup"
    NONE = "none"


@dataclass
class Replica:
    name: str
    role: Role = Role.NONE
    epoch: int = -1
    storage: PartitionStorage | None = None
    leader: PartitionPrimary | None = None
    host: PartitionHost | None = None
    fetcher: BackupFetcher | None = None
    primary_mm: str | None = None
    incarnation: str | None = None  # see ``mm/incarnation.py``: the primary's, adopted by backups
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ReplicaManager:
    def __init__(
        self,
        config: MMConfig,
        source: AssignmentSource,
        liveness: Liveness,
        *,
        wake: Callable[[], None],
        promotion_waits: HeldRequests[Connection],
        subscriptions: Subscriptions,
        lag_time_ms: float = 3000,
        commit_timeout_s: float = 5.0,
        fetch_max_wait_ms: int = 500,
    ) -> None:
        self.config = config
        self.source = source
        self.me = config.name
        self.liveness = liveness
        self.wake = wake
        self.promotion_waits = promotion_waits
        self.subscriptions = subscriptions
        # The partitions this MM is primary of: changed here alone (promotions, demotions).
        self.hosted = HostedPartitions(config.name)
        self.lag_time_ms = lag_time_ms
        self.commit_timeout_s = commit_timeout_s
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.replicas: dict[str, Replica] = {}
        self.links = PeerLinks(self.me, self._address_of, config.cluster_secret, config.max_frame)
        self.batch_fetch = batched_fetch_enabled()
        self.batchers: dict[str, FetchBatcher] = {}  # per primary MM
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self.step = "idle"  # what the reconciler is doing (stats)
        self.stopping = False  # asked to stop: the report requests a graceful handoff (handoff.py)
        self._budget: asyncio.Timeout | None = None  # the reconcile round's bound against hangs
        self.promotions_total = 0
        self.last_promotions: tuple[int, float] = (0, 0.0)  # the last round's: how many, seconds
        self._recovering = 0  # promotions reading their log back now

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._reconcile_loop())
        self.changed()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for r in list(self.replicas.values()):
            await self._stop_backup(r)
            if r.leader is not None:
                r.leader.close()
            elif r.storage is not None and not r.storage.log.closed:
                # A backup's log (a primary's host closes its own when the MM stops).
                try:
                    async with asyncio.timeout(5):
                        await asyncio.shield(r.storage.aclose())
                except (Exception, asyncio.CancelledError):
                    r.storage.close()
        for batcher in self.batchers.values():
            batcher.close()
        self.links.close()

    def changed(self) -> None:
        """The assignment table changed: reconcile (serialized, in the background)."""
        self._dirty.set()

    def settled(self) -> bool:
        """The replicas follow the latest table (no reconcile pending or running)."""
        return self.step == "idle" and not self._dirty.is_set()

    async def wait_settled(self, timeout_s: float) -> bool:
        for _ in range(max(1, int(timeout_s / 0.02))):
            if self.settled():
                return True
            await asyncio.sleep(0.02)
        return self.settled()

    async def _reconcile_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                async with asyncio.timeout(STEP_BOUND_S) as self._budget:
                    await self.reconcile()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the MM is stopping
                log.exception("reconciling replicas was cancelled at %s", self.step)
                self._dirty.set()
            except Exception:
                log.exception("reconciling replicas failed at %s", self.step)
                await asyncio.sleep(0.2)
                self._dirty.set()

    async def reconcile(self) -> None:
        table = self.source.partitions()
        started = time.monotonic()
        kept: list[PartitionAssignment] = []
        promoted: list[PartitionAssignment] = []
        rest: list[PartitionAssignment] = []
        for name, a in sorted(table.items()):
            (kept, promoted, rest)[self._urgency(name, a)].append(a)
        for a in kept:
            await self._apply(a)
            self._progressed()
        kept_s = time.monotonic() - started
        # Promotions wait on the loop (the backup's fetcher to stop, the log read back in a
        # thread): one after the other, a few hundred of them took seconds on a busy MM.
        slots = asyncio.Semaphore(PROMOTIONS_AT_ONCE)

        async def promote(a: PartitionAssignment) -> None:
            async with slots:
                await self._apply(a)
                self._progressed()

        async with asyncio.TaskGroup() as group:
            for a in promoted:
                group.create_task(promote(a))
        promoted_s = time.monotonic() - started
        if promoted:
            self.promotions_total += len(promoted)
            self.last_promotions = (len(promoted), promoted_s - kept_s)
            log.info("promoted %d backups in %.3f s", len(promoted), promoted_s - kept_s)
        await self._open_new_backups(rest)
        turn = LoopTurns()
        for a in rest:
            await self._apply(a)
            self._progressed()
            await turn.maybe()
        for name in [n for n in self.replicas if n not in table]:
            self.step = f"{name}: removed"
            await self._be_none(name, delete=True)
            self._progressed()
            await turn.maybe()
        self.step = "idle"
        self.wake()
        took = time.monotonic() - started
        if promoted or took > 1.0:
            log.info(
                "table applied in %.3f s: %d primaries updated in %.3f s, %d backups promoted by "
                "%.3f s, %d other partitions",
                took,
                len(kept),
                kept_s,
                len(promoted),
                promoted_s,
                len(rest),
            )

    async def _open_new_backups(self, assignments: list[PartitionAssignment]) -> None:
        """Create the logs of the new backup copies among ``assignments`` a few at a time (the
        replacements after a failover: hundreds). One after the other, each waited for its file
        creation in a worker thread and then for a turn of the busy loop: 24 s for 333 copies."""
        slots = asyncio.Semaphore(OPENS_AT_ONCE)

        async def open_one(name: str) -> None:
            async with slots:
                r = self.replicas.setdefault(name, Replica(name))
                if r.storage is None:
                    r.storage = await self._open_storage(r, primary=False)
                self._progressed()

        fresh = [
            a.name
            for a in assignments
            if a.primary != self.me
            and self.me in a.replicas
            and (a.name not in self.replicas or self.replicas[a.name].storage is None)
        ]
        async with asyncio.TaskGroup() as group:
            for name in fresh:
                group.create_task(open_one(name))

    def _progressed(self) -> None:
        """One partition of the round is done: the round's bound starts again (``STEP_BOUND_S``)."""
        budget = self._budget
        if budget is not None and not budget.expired() and not self._recovering:
            budget.reschedule(asyncio.get_running_loop().time() + STEP_BOUND_S)

    async def _apply(self, a: PartitionAssignment) -> None:
        """This MM's part in one partition of the table."""
        self.step = f"{a.name}: {a.primary}@{a.epoch}"
        if a.primary == self.me:
            await self._be_primary(a)
            return
        # Produces held for a promotion here that the table at this epoch gives to another MM.
        self.promotion_waits.refuse(a.name, f"{self.me} is not primary of {a.name}", a.epoch)
        if self.me in a.replicas:
            await self._be_backup(a)
        elif a.name in self.replicas:
            await self._be_none(a.name, delete=False)

    def _urgency(self, name: str, a: PartitionAssignment) -> int:
        """The order a round applies the table in: producers wait for the first two, nobody for
        the rest. 0: a primary here that keeps its epoch, whose replicas or in-sync set changed:
        after a backup MM was lost, its producers' acknowledgements wait for the lost copy until
        this update drops it, and it costs next to nothing, so it does not wait behind the
        promotions (a few ms each, hundreds of them after an MM was lost). 1: a backup copy here
        that the table made primary. 2: the rest, such as the replacement backups of a failover
        (new logs, fetchers to start), which nobody waits for. Start-up keeps the table's order:
        opening every primary first there let the MMs' leases lapse while they opened 1,000
        partitions."""
        r = self.replicas.get(name)
        if r is None or a.primary != self.me:
            return 2
        if r.role == Role.PRIMARY and r.epoch == a.epoch:
            return 0
        return 1 if r.role == Role.BACKUP else 2

    def _address_of(self, peer: str) -> str | None:
        entry = self.source.brokers().get(peer)
        return entry.address if entry is not None else None

    async def _open_storage(self, r: Replica, *, primary: bool) -> PartitionStorage:
        """Open (or create) this MM's copy of ``r``'s log in a worker thread: a new copy's files
        are created and fsynced, an old one is read back, and a failover opens hundreds of
        replacement copies. A primary's copy gets an incarnation if it has none; a backup's
        adopts its primary's with the first answer (``_adopt``)."""
        c = self.config
        directory = c.data_dir / r.name
        config = LogConfig(
            fsync=c.fsync,  # type: ignore[arg-type]
            group_commit_max_delay_ms=c.group_commit_ms,
            segment_bytes=c.segment_bytes,
            max_batch_bytes=c.max_frame + 1024,
        )

        def open_copy() -> tuple[str | None, PartitionStorage]:
            found = incarnation.ensure(directory) if primary else incarnation.read(directory)
            return found, PartitionStorage.open(directory, config, cache_bytes=c.cache_bytes)

        r.incarnation, storage = await asyncio.to_thread(open_copy)
        return storage

    # -- roles -----------------------------------------------------------------------------------
    async def _be_primary(self, a: PartitionAssignment) -> None:
        r = self.replicas.setdefault(a.name, Replica(a.name))
        if r.role == Role.PRIMARY and r.epoch == a.epoch and r.leader is not None and r.host is not None:
            r.leader.update_assignment(replicas=a.replicas, in_sync=a.in_sync, min_in_sync=a.min_in_sync)
            r.host.writable = a.writable
            return
        known_hw = r.fetcher.high_watermark if r.fetcher is not None else -1
        await self._stop_backup(r)
        await self._stop_primary(r)
        if r.storage is None:
            storage = await self._open_storage(r, primary=True)
        else:  # a fresh cache: a backup's log may have been truncated under the old one
            storage = PartitionStorage(r.storage.log, self.config.cache_bytes)
            if r.incarnation is None:  # a backup promoted before its primary ever answered it
                r.incarnation = await asyncio.to_thread(incarnation.ensure, self.config.data_dir / r.name)
        r.storage = storage
        alter = self._alter_in_sync(a.name, a.epoch) if self.liveness.commits_in_sync else None
        try:
            # The new epoch's start is written and fsynced (file and directory) before the first
            # write at it: off the loop, or each promotion held every other one (and every produce
            # and fetch of this MM) for that long. Nothing else writes this log meanwhile: the
            # fetcher is stopped and no host serves it yet. The primary's own registration of the
            # epoch below is then a no-op.
            await asyncio.to_thread(storage.log.begin_epoch, a.epoch)
            leader = PartitionPrimary(
                storage.log,
                partition=a.name,
                replica_id=self.me,
                epoch=a.epoch,
                replicas=a.replicas or (self.me,),
                in_sync=a.in_sync or (self.me,),
                high_watermark=known_hw,
                min_in_sync=a.min_in_sync,
                lag_time_ms=self.lag_time_ms,
                lease_valid=self.liveness.valid,
                alter_in_sync=alter,
            )
        except StaleEpochError:
            log.error("%s: the log has seen an epoch newer than %d; not serving it", a.name, a.epoch)
            r.role, r.epoch = Role.NONE, a.epoch
            self.promotion_waits.refuse(a.name, f"{a.name}: not served at epoch {a.epoch}")
            return
        c = self.config
        host = PartitionHost(
            a.name,
            storage,
            leader,
            max_backlog=c.max_backlog,
            max_redeliveries=c.max_redeliveries,
            wake=self.wake,
            catching_up=self.liveness.catching_up,
            commit_timeout_s=self.commit_timeout_s,
        )
        host.retention_interval = c.retention_interval
        try:
            await self._recover(host)
        except BaseException:
            leader.close()
            raise
        # A takeover has seen no write yet: every producer the log knows may still need it.
        host.producers.seen(storage.log.producer_state.producers)
        host.writable = a.writable
        host.start()
        r.tasks.append(asyncio.create_task(leader.run_maintenance(max(self.lag_time_ms / 4000, 0.05))))
        r.leader, r.host, r.role, r.epoch, r.primary_mm = leader, host, Role.PRIMARY, a.epoch, self.me
        self.hosted.add(host)
        self.promotion_waits.release(a.name, host.enqueue_produce)
        for link in self.subscriptions:
            for pattern, mode, durable in link.subscriptions:
                host.attach(link, pattern, mode, durable)
        log.info("%s: primary at epoch %d (replicas %s)", a.name, a.epoch, ",".join(a.replicas))

    async def _recover(self, host: PartitionHost) -> None:
        """Read the log back (cursors, delivery counts) off the event loop, so that the lease is
        renewed meanwhile: a blocked loop let it lapse, the failovers that followed made the MM
        read the log again, and so on (a failover storm). A long log takes seconds: that is
        progress, not a hang, so it does not count against the reconcile round's bound."""
        budget = self._budget
        if budget is not None and not budget.expired():  # expiring: its cancellation is on the way
            budget.reschedule(None)
        self._recovering += 1
        try:
            await asyncio.to_thread(host.recover)
        finally:
            self._recovering -= 1
            # Promotions run side by side: the bound comes back when the last read is done.
            if budget is not None and not budget.expired() and not self._recovering:
                budget.reschedule(asyncio.get_running_loop().time() + STEP_BOUND_S)

    async def _be_backup(self, a: PartitionAssignment) -> None:
        r = self.replicas.setdefault(a.name, Replica(a.name))
        if r.role == Role.PRIMARY:
            await self._stop_primary(r)
        if r.storage is None:
            r.storage = await self._open_storage(r, primary=False)
        if a.primary is None:
            await self._stop_backup(r)
            r.role, r.epoch = Role.BACKUP, a.epoch
            return
        batcher = None
        if self.batch_fetch:
            batcher = self.batchers.get(a.primary)
            if batcher is None:
                batcher = self.batchers[a.primary] = FetchBatcher(
                    self.links, a.primary, max_bytes=min(8 << 20, self.config.max_frame // 2)
                )
            if r.primary_mm is not None and r.primary_mm != a.primary and r.primary_mm in self.batchers:
                self.batchers[r.primary_mm].forget(a.name)
        transport = TcpPrimaryTransport(
            self.links, a.primary, on_incarnation=lambda i: self._adopt(r, i), batcher=batcher
        )
        if r.role == Role.BACKUP and r.fetcher is not None:
            if r.primary_mm != a.primary:
                r.fetcher.update(epoch=a.epoch, transport=transport)
            elif a.epoch != r.epoch:
                r.fetcher.update(epoch=a.epoch)
        else:
            r.fetcher = BackupFetcher(
                r.storage.log,
                partition=a.name,
                replica_id=self.me,
                epoch=a.epoch,
                transport=transport,
                max_wait_ms=self.fetch_max_wait_ms,
                retry_backoff_ms=50,
            )
            r.tasks.append(asyncio.create_task(r.fetcher.run()))
            log.info("%s: backup of %s at epoch %d", a.name, a.primary, a.epoch)
        r.role, r.epoch, r.primary_mm = Role.BACKUP, a.epoch, a.primary

    async def _adopt(self, r: Replica, primary_incarnation: str) -> None:
        """A backup holds the primary's data, so it takes the primary's incarnation: stored (in a
        worker thread, a fsync each for hundreds of new copies) before the records it came with."""
        if r.incarnation == primary_incarnation or self.replicas.get(r.name) is not r:
            return
        directory = self.config.data_dir / r.name
        try:
            await asyncio.to_thread(incarnation.write, directory, primary_incarnation, create=False)
        except FileNotFoundError:
            return  # the copy was removed meanwhile (its directory with it)
        if self.replicas.get(r.name) is r:
            r.incarnation = primary_incarnation

    def incarnation(self, name: str) -> str | None:
        r = self.replicas.get(name)
        return None if r is None else r.incarnation

    async def _be_none(self, name: str, *, delete: bool) -> None:
        r = self.replicas.pop(name, None)
        if r is None:
            return
        await self._stop_backup(r)
        await self._stop_primary(r)
        if r.storage is not None:
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(r.storage.aclose())
            except (Exception, asyncio.CancelledError):
                log.warning("closing %s did not finish cleanly; closing synchronously", name, exc_info=True)
                r.storage.close()
        if delete:
            shutil.rmtree(self.config.data_dir / name, ignore_errors=True)
        log.info("%s: no longer a replica here%s", name, " (data deleted)" if delete else "")

    async def _stop_primary(self, r: Replica) -> None:
        if r.leader is not None:
            r.leader.close()  # fails pending acknowledgements: the clients resend elsewhere
        if r.host is not None:
            host = r.host
            self.hosted.remove(host)
            for link in self.subscriptions:
                host.detach(link)
            await host.halt()
        await _cancel_all(r.tasks)
        r.leader, r.host = None, None
        if r.role == Role.PRIMARY:
            r.role = Role.NONE

    async def _stop_backup(self, r: Replica) -> None:
        if r.fetcher is not None:
            await r.fetcher.stop()
            await _cancel_all(r.tasks)
            r.fetcher = None
        if r.role == Role.BACKUP:
            r.role = Role.NONE

    # -- primary hooks -----------------------------------------------------------------------------
    def _alter_in_sync(self, name: str, epoch: int) -> Callable[[frozenset[str]], Awaitable[bool]]:
        async def alter(proposal: frozenset[str]) -> bool:
            self.liveness.trigger()
            for _ in range(100):  # ~2 s
                a = self.source.partitions().get(name)
                if a is None or a.epoch != epoch:
                    return False
                if frozenset(a.in_sync) == proposal:
                    return True
                await asyncio.sleep(0.02)
            return False

        return alter

    # -- replica requests from backups ---------------------------------------------------------------
    def handle(self, conn: Connection, frame: dict[str, Any]) -> None:
        task = asyncio.create_task(self._serve(conn, frame))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, conn: Connection, frame: dict[str, Any]) -> None:
        t = frame["t"]
        m = dict(frame.get("m") or {})
        r = self.replicas.get(str(m.get("partition", "")))
        leader = r.leader if r is not None and r.role == Role.PRIMARY else None
        reply: Any
        if t == FrameType.REPLICA_FETCH_BATCH:
            await self._serve_batch(conn, frame)
            return
        try:
            if t == FrameType.REPLICA_FETCH:
                fetch = from_wire(FetchRequest, m)
                reply = (
                    await leader.handle_fetch(fetch)
                    if leader is not None
                    else FetchResponse(fetch.partition, -1, ErrorCode.NOT_PRIMARY)
                )
            elif t == FrameType.REPLICA_EPOCH_END:
                req = from_wire(EpochEndOffsetRequest, m)
                reply = (
                    leader.handle_end_offset_for_epoch(req)
                    if leader is not None
                    else EpochEndOffsetResponse(req.partition, -1, ErrorCode.NOT_PRIMARY)
                )
            elif t == FrameType.REPLICA_SNAPSHOT:
                sreq = from_wire(SnapshotRequest, m)
                reply = (
                    leader.handle_snapshot(sreq)
                    if leader is not None
                    else Snapshot(sreq.partition, -1, ErrorCode.NOT_PRIMARY)
                )
            else:
                conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"unexpected frame type {t}")
                return
        except (KeyError, TypeError, ValueError) as exc:
            conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad replica request: {exc}")
            return
        wire = to_wire(reply)
        if leader is not None and r is not None and r.incarnation is not None:
            wire["incarnation"] = r.incarnation  # backups adopt it (``_adopt``)
        if not conn.closed:
            conn.reply(frame, {"t": FrameType.OK, "m": wire})

    async def _serve_batch(self, conn: Connection, frame: dict[str, Any]) -> None:
        """A backup MM's fetch for every partition it copies from this one (``mm/replica_batch.py``)."""
        try:
            replica_id, max_wait_ms = str(frame["rid"]), int(frame["w"])
            max_bytes = min(int(frame["mb"]), self.config.max_frame // 2)
            items: list[BatchItem] = []
            for entry in frame["ps"]:
                request, known_hw = decode_request(entry, replica_id, max_wait_ms)
                r = self.replicas.get(request.partition)
                leader = r.leader if r is not None and r.role == Role.PRIMARY else None
                items.append(BatchItem(leader, request, known_hw))
        except (KeyError, TypeError, ValueError) as exc:
            conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"bad replica request: {exc}")
            return
        responses = await serve_batch(items, max_wait_ms=max_wait_ms, max_bytes=max_bytes)
        out = []
        for response in responses:
            r = self.replicas.get(response.partition)
            known = response.error is ErrorCode.NONE and r is not None and r.role == Role.PRIMARY
            out.append(encode_response(response, r.incarnation if known and r is not None else None))
        # The backup may have given up meanwhile (its timeout closes the connection): nothing to do.
        with contextlib.suppress(ConnectionClosed):
            conn.reply(frame, {"t": FrameType.OK, "ps": out})

    # -- reporting -------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        partitions: dict[str, PartitionReport] = {}
        for name, r in self.replicas.items():
            if r.storage is None or r.storage.log.closed:
                continue
            leo = r.storage.log.log_end_offset
            if r.role == Role.PRIMARY and r.leader is not None and r.host is not None:
                leader = r.leader
                in_sync = leader.proposed_in_sync or leader.in_sync
                partitions[name] = PartitionReport(
                    role="primary",
                    epoch=r.epoch,
                    log_end_offset=leo,
                    committed_offset=max(leader.high_watermark, 0),
                    in_sync=sorted(in_sync),
                    backlog=visible_backlog(r.host),
                    producers=r.host.producers.count(),
                    reader_lag=r.host.reader_lag(),
                )
            else:
                partitions[name] = PartitionReport(role="backup", epoch=max(r.epoch, 0), log_end_offset=leo)
        return MMReport(partitions=partitions, stopping=self.stopping).compact()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"_reconciling": self.step}
        for name, r in self.replicas.items():
            entry: dict[str, Any] = {"role": r.role, "epoch": r.epoch}
            if r.leader is not None:
                entry.update(r.leader.report())
            if r.fetcher is not None:
                entry.update(
                    {
                        "fetcher": str(r.fetcher.state),
                        "high_watermark": r.fetcher.high_watermark,
                        "log_end_offset": r.fetcher.log.log_end_offset,
                        "primary": r.primary_mm,
                        "caught_up": r.fetcher.caught_up,
                        "fetches": r.fetcher.fetches,
                        "last_error": r.fetcher.last_error,
                        "tasks_running": sum(1 for t in r.tasks if not t.done()),
                    }
                )
            out[name] = entry
        return out
