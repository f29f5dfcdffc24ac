"""The Message Manager process: partition logs, produce, delivery to CMs.

CMs connect with ``HELLO role=cm``, backups with ``role=mm``, both presenting the cluster secret
(``auth/cluster_secret.py``; an MM without one refuses to start, clients are refused). Every
partition whose ``replicas`` name this MM in its ``AssignmentSource`` goes through the
``ReplicaManager`` (``replica_manager.py``): primary (a ``PartitionHost``) or backup (a fetcher), a
single replica being a primary without backups. REPLICA_* frames from backups go to the replica
manager. What differs between Kubernetes, the local controller and static assignments is only the
``AssignmentSource`` and the ``Liveness`` (``liveness.py``) handed to the constructor; the
composition root of each process picks them (``hybridmq.cli.compose``). One dispatcher task runs
``pump`` on every hosted partition whenever something changed (new data, an ack, a subscription).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from pathlib import Path
from typing import Any

from hybridmq.api.assignment import BrokerRole
from hybridmq.api.frames import LOG_DESTINATION, PROTOCOL_VERSION, ErrorCode, FrameType, error_frame
from hybridmq.api.requests import Produce
from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.auth import cluster_secret
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.dispatch import REQUESTS, Dispatcher, Entry, Mode
from hybridmq.broker.log_events import LogEventBuffer
from hybridmq.broker.mm import acks, fetch_handler, reader_commit
from hybridmq.broker.mm.config import MMConfig
from hybridmq.broker.mm.handoff import hand_off
from hybridmq.broker.mm.hosted import Subscriptions
from hybridmq.broker.mm.internal_log import open_internal_log
from hybridmq.broker.mm.liveness import Liveness, NoLease
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.readiness import CatchUp
from hybridmq.broker.mm.replica_manager import ReplicaManager
from hybridmq.broker.mm.replica_transport import REPLICA_FRAMES
from hybridmq.broker.routing.held_requests import HeldRequests
from hybridmq.broker.transactions import mm_handler as tx_handler
from hybridmq.broker.transactions.mm_handler import TX_FRAMES
from hybridmq.protocol import Connection, ProtocolError, read_frame
from hybridmq.protocol.tls import BrokerTls

log = logging.getLogger(__name__)
PEER_ROLES = frozenset({BrokerRole.CM, BrokerRole.MM})


class MessageManager:
    def __init__(
        self,
        config: MMConfig,
        source: AssignmentSource,
        liveness: Liveness | None = None,
        *,
        lag_time_ms: float = 3000,
        commit_timeout_s: float = 5.0,
        fetch_max_wait_ms: int = 500,
    ) -> None:
        self.config = config
        self.source = source
        self.liveness: Liveness = liveness if liveness is not None else NoLease()
        self.promotion_waits: HeldRequests[Connection] = HeldRequests(
            ErrorCode.NOT_PRIMARY
        )  # for partitions taken over
        self.subscriptions = Subscriptions()  # the CMs' consumer links, changed here alone
        self.replica_manager = ReplicaManager(
            config,
            source,
            self.liveness,
            wake=self.wake,
            promotion_waits=self.promotion_waits,
            subscriptions=self.subscriptions,
            lag_time_ms=lag_time_ms,
            commit_timeout_s=commit_timeout_s,
            fetch_max_wait_ms=fetch_max_wait_ms,
        )
        self.hosted = self.replica_manager.hosted  # the partitions this MM is primary of
        self._dispatch = Dispatcher(self._dispatch_table(), lambda conn: conn)
        self.conns: set[Connection] = set()
        self._wake = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._log_events: LogEventBuffer | None = None
        self.log_host: PartitionHost | None = None
        self.listening = False
        self.catch_up = CatchUp(config.name)
        # Only brokers connect to an MM: with TLS each must present a certificate of the cluster CA.
        self.tls = BrokerTls(config.tls_dir) if config.tls_dir else None
        if self.tls is not None:
            self.replica_manager.links.tls = self.tls

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def ready(self) -> bool:
        """The readiness probe: listening, and caught up since its start (``readiness``)."""
        return self.listening and self.catch_up.ready(self.source.partitions(), self.source.synced())

    @property
    def data_dir(self) -> Path:
        return self.config.data_dir

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self.config.cluster_secret = cluster_secret.require(self.config.cluster_secret)
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        await self.source.start()
        self.source.subscribe(self.replica_manager.changed)
        self._tasks.append(asyncio.create_task(self._dispatcher()))
        self.log_host = open_internal_log(
            self.config.name,
            self.config.data_dir,
            self.config.max_frame,
            self.config.retention_interval,
            self.wake,
        )
        self.hosted.add(self.log_host)  # consumers of topic:_LOG read it like any host
        self._log_events = LogEventBuffer(self.config.name, "mm").install()
        self._tasks.append(asyncio.create_task(self._publish_log_events(self._log_events, self.log_host)))
        self._server = await asyncio.start_server(
            self._serve,
            self.config.host,
            self.config.port,
            limit=2 * 1024 * 1024,
            ssl=self.tls.server(peer_cert=True) if self.tls is not None else None,
        )
        self.listening = True
        log.info("mm %s listening on %s:%d", self.config.name, self.config.host, self.config.port)
        # Partitions open in the background (recovering a long log must not keep the port shut): a
        # produce that comes first gets NOT_PRIMARY and is resent; a subscription is kept and
        # attached to each partition as it opens.
        self.replica_manager.start()
        # After the source: a primary accepts writes only once its lease is valid.
        await self.liveness.start(self)

    async def hand_off(self, timeout_s: float) -> str:
        """Before ``stop`` on a planned stop (SIGTERM): move this MM's replicas away (handoff.py)."""
        return await hand_off(self, timeout_s)

    async def stop(self) -> None:
        await self.liveness.stop()  # first: nothing is acknowledged once another may be promoted
        await self.replica_manager.stop()
        self.promotion_waits.refuse_all(f"{self.config.name} is stopping")
        self.listening = False
        if self._server:
            self._server.close()
        for c in list(self.conns):
            c.close()
        for t in self._tasks:
            t.cancel()
        for host in self.hosted:
            await host.stop()
        await self.source.stop()
        if self._log_events is not None:
            self._log_events.remove()

    async def _publish_log_events(self, events: LogEventBuffer, host: PartitionHost) -> None:
        """Append this MM's log events (summaries first) to ``topic:_LOG`` in its internal log."""
        while True:
            await asyncio.sleep(0.5)
            events.summarizer.tick()
            taken = events.take_blob()
            if taken is None:
                continue
            try:
                host.append_internal(LOG_DESTINATION, taken[0], taken[1])
            except Exception:
                continue

    # -- what the lease carries (``liveness.LeaseHolder``) ----------------------------------------
    def report(self) -> dict[str, Any]:
        return self.replica_manager.report()

    def held(self) -> set[str]:
        return set(self.replica_manager.replicas) | self.hosted.names()

    def settled(self) -> bool:
        return self.replica_manager.settled()

    async def resync(self) -> None:
        await self.source.refresh()
        self.replica_manager.changed()
        await self.replica_manager.wait_settled(5.0)

    def wake(self) -> None:
        self._wake.set()

    async def _dispatcher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for host in self.hosted:
                try:
                    host.pump()
                except Exception:
                    log.exception("delivery failed on %s", host.name)
            for conn in list(self.conns):
                try:
                    await conn.drain()
                except Exception:
                    pass

    # -- connections -----------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(
            reader, writer, self.config.max_frame, name=f"mm:{self.config.name}", decoder=REQUESTS
        )
        try:
            async with asyncio.timeout(10):
                hello = await read_frame(reader, self.config.max_frame)
        except (ProtocolError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
            code = exc.code if isinstance(exc, ProtocolError) else ErrorCode.PROTOCOL_ERROR
            log.warning("protocol error from %s during the handshake: %s", conn.peer, exc)
            try:
                conn.send_nowait(error_frame(code, f"handshake failed: {exc}", fatal=True))
            except Exception:
                pass
            conn.close()
            return
        err = self._check_hello(hello)
        if err is not None:
            if hello is not None:  # not a bare TCP probe: someone tried and failed
                log.warning("refused a connection from %s: %s", conn.peer, err[1])
            conn.send_nowait(error_frame(err[0], err[1], fatal=True))
            await asyncio.sleep(0)
            conn.close()
            return
        conn.send_nowait(
            {
                "t": FrameType.HELLO_OK,
                "v": PROTOCOL_VERSION,
                "session": "",
                "node": self.config.name,
                "max_frame": self.config.max_frame,
            }
        )
        self.conns.add(conn)
        conn.on_close.append(lambda: self._closed(conn))
        await conn.run(partial(self._dispatch, conn))

    def _check_hello(self, hello: dict[str, Any] | None) -> tuple[ErrorCode, str] | None:
        if hello is None or hello.get("t") != FrameType.HELLO:
            return ErrorCode.PROTOCOL_ERROR, "expected HELLO"
        if hello.get("v") != PROTOCOL_VERSION:
            return ErrorCode.UNSUPPORTED_VERSION, f"protocol version {hello.get('v')} unsupported"
        if hello.get("role") not in PEER_ROLES:
            return ErrorCode.AUTH_FAILED, "the MM port serves CMs and MMs only: clients connect to a CM"
        if not cluster_secret.matches(self.config.cluster_secret or "", hello.get("password")):
            return ErrorCode.AUTH_FAILED, "peer authentication failed: wrong or missing cluster secret"
        return None

    def _taking_over(self, name: str, host: PartitionHost | None, frame: Produce) -> bool:
        """A produce routed (epoch ``e``) to this MM before it serves ``name`` at that epoch, while
        its table names it primary at ``e`` (the promotion is under way) or does not know ``e``
        yet (the table is on the way): held until the promotion is done (``HeldRequests``)."""
        epoch = frame.epoch
        if epoch is None or (host is not None and host.epoch >= epoch):
            return False
        a = self.source.partitions().get(name)
        if a is None:
            return False
        return a.epoch < epoch or (a.epoch == epoch and a.primary == self.config.name)

    def _closed(self, conn: Connection) -> None:
        self.conns.discard(conn)
        for link in self.subscriptions.drop(conn):
            for host in self.hosted:
                host.detach(link)
        self.wake()

    def _dispatch_table(self) -> dict[int, Entry[Connection]]:
        """How each frame from a CM or a peer MM is handled (``broker/dispatch.py``: the modes)."""
        inline, spawned = Mode.INLINE, Mode.SPAWNED
        table: dict[int, Entry[Connection]] = {
            FrameType.PRODUCE: Entry(self._produce, inline),  # queued for the partition's group commit
            FrameType.ACK: Entry(partial(acks.handle, self), inline),
            FrameType.NACK: Entry(partial(acks.handle, self), inline),
            FrameType.SUBSCRIBE: Entry(self._subscribe, inline),
            FrameType.UNSUBSCRIBE: Entry(self._unsubscribe, inline),
            FrameType.PING: Entry(self._ping, inline),
            FrameType.FETCH: Entry(partial(fetch_handler.handle_fetch, self), inline),  # read by offset
            FrameType.FETCH_META: Entry(partial(fetch_handler.handle_meta, self), inline),
            FrameType.ADMIN: Entry(self._admin, inline),
            # These wait for replication: the link keeps reading produces meanwhile.
            FrameType.READER_COMMIT: Entry(partial(reader_commit.handle, self), spawned),
        }
        for t in TX_FRAMES:
            table[t] = Entry(partial(tx_handler.handle, self), spawned)
        for t in REPLICA_FRAMES:  # served from the replica manager's own tasks
            table[t] = Entry(self.replica_manager.handle, inline)
        return table

    def _produce(self, conn: Connection, frame: Produce) -> None:
        name = frame.partition
        host = self.hosted.get(name)
        if self._taking_over(name, host, frame) and self.promotion_waits.hold(name, conn, frame):
            return
        if host is None:
            conn.reply_error(frame, ErrorCode.NOT_PRIMARY, f"{self.config.name} hosts no {name}")
            return
        host.enqueue_produce(conn, frame)

    def _unsubscribe(self, conn: Connection, frame: dict[str, Any]) -> None:
        link = self.subscriptions.pop(conn, str(frame["s"]))
        if link is not None:
            for host in self.hosted:
                host.detach(link)
        conn.reply(frame, {"t": FrameType.OK})
        self.wake()

    @staticmethod
    def _ping(conn: Connection, frame: dict[str, Any]) -> None:
        conn.reply(frame, {"t": FrameType.PONG})

    def _admin(self, conn: Connection, frame: dict[str, Any]) -> None:
        conn.reply(frame, {"t": FrameType.ADMIN_PART, "i": 0, "of": 1, "data": self.stats()})

    def _subscribe(self, conn: Connection, frame: dict[str, Any]) -> None:
        key = str(frame["s"])
        pattern = str(frame["d"])
        mode = str(frame.get("m", "exact"))
        durable = frame.get("dn")
        link = ConsumerLink(conn, key, int(frame.get("w", 10000)), int(frame.get("wb", 8 << 20)))
        allow = frame.get("acl")  # the CM narrows a wildcard to its user's consume grants
        link.allow = None if allow is None else tuple(str(g) for g in allow)
        link.subscriptions = [(pattern, mode, durable)]
        old = self.subscriptions.put(conn, key, link)
        for host in self.hosted:
            if old is not None:
                host.detach(old)
            host.attach(link, pattern, mode, durable)
        conn.reply(frame, {"t": FrameType.OK})
        self.wake()

    def stats(self) -> dict[str, Any]:
        return {
            "node": self.config.name,
            "role": "mm",
            "partitions": {
                name: {
                    "epoch": h.epoch,
                    "end_offset": h.storage.end_offset,
                    "fsyncs": h.storage.log.fsync_rounds,
                    "backlog": h.backlog(),
                    "blocked": h.blocked,
                    "states": {
                        k: {"lw": s.lw(), "links": len(s.links), "pending": len(s.pending)}
                        for k, s in h.states.items()
                    },
                }
                for name, h in self.hosted.items()
                if h is not self.log_host
            },
            "internal_log": self._internal_log_stats(),
            "replicas": self.replica_manager.stats(),
            # A failover's takeover here: backups promoted (the last round: how many, how long)
            # and the produces that waited for them.
            "promotions": {
                "total": self.replica_manager.promotions_total,
                "last_round": self.replica_manager.last_promotions[0],
                "last_round_seconds": self.replica_manager.last_promotions[1],
                "produces": self.promotion_waits.stats(),
            },
            "lease_valid": self.liveness.valid(),
            "lease": self.liveness.stats(),
        }

    def _internal_log_stats(self) -> dict[str, Any] | None:
        """The internal ``topic:_LOG`` partition, apart from the user partitions."""
        if self.log_host is None or self._log_events is None:
            return None
        return {
            "partition": self.log_host.name,
            "start_offset": self.log_host.storage.start_offset,
            "end_offset": self.log_host.storage.end_offset,
            "events_dropped": self._log_events.dropped,
            "log_records_suppressed": self._log_events.summarizer.suppressed_total,
        }
