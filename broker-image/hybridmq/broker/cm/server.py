"""The Connection Manager process.

Per client connection (a *session*, id from ``IdGenerator``): the HELLO is authenticated against the
``CredentialStore`` through the ``AuthGate`` (bounded PBKDF2 work; a failure answers a fatal AUTH_FAILED
to that client only, after a short delay; a full gate a fatal, retriable AUTH_BUSY), then frames are
handled without decoding any record:

* OPEN_PRODUCER picks the producer's partition: ``fixed`` = crc32(key) over the writable fixed
  partitions (or the one named), ``on-demand`` = round robin over writable on-demand partitions.
* PRODUCE is checked (reserved ``_`` names, produce ACL) and forwarded to the partition's primary MM
  with the partition epoch; the MM's PRODUCE_ACK goes back under the client's correlation id.
* SUBSCRIBE (consume ACL) is sent to every MM under a CM-wide key ``<session>/<sub>`` with the
  user's consume grants (``acl``), which the MMs apply to every destination a wildcard matches; a
  wildcard that cannot match any granted destination is refused (``auth/subscription_scope.py``); the MMs push
  DELIVER frames which are relayed to the client; ACK/NACK go to the MM that delivered them.
* ADMIN answers composite replies (one part per MM for ``mm-stats``); DIRECTORY the broker and
  application tables of the whole cluster and, with ``next``, the CM an application should use
  (``cm/directory.py``); MARKER appends a takeover marker to every partition (``cm/markers.py``).

Back-pressure: the CM stops reading a client while the MM link it forwards to has a full write
buffer; deliveries are bounded by the consumer windows the MMs enforce.

Following the assignment table (whatever the ``AssignmentSource``: a file, the local controller,
Kubernetes):

* An MM whose address changed (a restarted pod keeps its name, not its IP) gets a new link (it
  replays the subscriptions; requests pending on the old one fail and are resent).
* Produce requests forwarded to an MM that is no longer the primary of their partition would wait
  for ever if that MM is frozen (SIGSTOP, a long GC pause, a half-open network): the client only
  resends after an error. So when a new table moves a partition's primary away from an MM, the
  requests about that partition still pending on the MM's link fail at once (MM_UNAVAILABLE, which
  the producer resends, now to the new primary at the new epoch; the sequence numbers drop what
  was stored twice). The link itself stays: closing it would give back every delivery the MM made
  on it, also of its partitions that did not move, and their consumers' acknowledgements would be
  refused (the records delivered again although acknowledged).
* Deliveries made by the old primary are void once a partition moves to a new epoch: the new
  primary hands every unacknowledged batch out again, flagged, possibly to another consumer. A
  consumer may still hold old deliveries it has not handed to its application yet; handed out after
  the flagged repeat, they would be unflagged repeats. So every consumer session gets a REVOKE
  (partition, new epoch) as soon as this CM learns of the epoch, from the table or from the first
  delivery at that epoch it relays (whichever comes first, so a REVOKE always precedes the new
  primary's deliveries on a session); the client drops older ones.
* Deliveries are void too when the connection to their MM ends (the MM died or was cut off): the
  MM gives back what it delivered on it, also of partitions that keep their epoch, and hands it
  out again, flagged, possibly to another consumer.
  So every consumer session gets REVOKE (partition, ``lost`` = the epoch they came at) for each
  partition that MM delivered, before anything from a new connection is relayed; the client drops
  what it still queues of them.
* An ACK/NACK names the epoch of its delivery; the CM sends it to the MM that delivered at that
  epoch, which may be a new primary its table does not name yet (otherwise the acknowledgement
  would go to the old primary, be refused, and hold the consumer's window until it left).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import zlib
from dataclasses import dataclass
from functools import partial
from typing import Any

from hybridmq.api.assignment import BrokerRole, PartitionType
from hybridmq.api.frames import (
    DMQ_DESTINATION,
    LOG_DESTINATION,
    PROTOCOL_VERSION,
    ErrorCode,
    FrameType,
    canonical,
    error_frame,
    is_reserved,
)
from hybridmq.api.requests import Ack, Produce
from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.auth import AclTable, CredentialStore, cluster_secret
from hybridmq.broker.auth.kube_users import KubeUsersSecret
from hybridmq.broker.auth.reload import AuthFiles, revoked
from hybridmq.broker.auth.subscription_scope import may_reach
from hybridmq.broker.auth.throttle import AuthBusy, AuthGate
from hybridmq.broker.cm import fetch_route
from hybridmq.broker.cm.directory import (
    Directory,
    NoCMAvailable,
    count_sessions,
    http_peer_fetcher,
    load_registrations,
)
from hybridmq.broker.cm.markers import publish_marker
from hybridmq.broker.cm.mm_links import MMLink
from hybridmq.broker.cm.session import Session, SubEntry
from hybridmq.broker.destinations.matching import MATCH_KINDS, make_matcher
from hybridmq.broker.dispatch import REQUESTS, Dispatcher, Entry, Mode
from hybridmq.broker.ids import IdGenerator
from hybridmq.broker.log_events import LogEventBuffer, log_partition, log_partition_owner
from hybridmq.broker.routing import Routes, Unroutable
from hybridmq.broker.routing.held_requests import HeldRequests
from hybridmq.broker.transactions.coordinator import TxManager
from hybridmq.broker.transactions.resolver import resolve_forever
from hybridmq.protocol import Connection, ProtocolError, RemoteError, read_frame
from hybridmq.protocol.connection import HIGH_WATER, ConnectionClosed
from hybridmq.protocol.tls import BrokerTls

log = logging.getLogger(__name__)
CONSUMABLE_RESERVED = (DMQ_DESTINATION, LOG_DESTINATION)
MAX_PATTERN = 256
# A HELLO is a handful of short fields: a peer that has not authenticated gets no max_frame-sized buffer.
MAX_HELLO = 64 * 1024
# The refusals after which a produce goes to the primary of a newer epoch (``_redirect``), and how
# long it waits for the table to name one before it goes where the table points (about the
# producer's first two back-offs: a refusal with no failover behind it costs no more than before).
REDIRECTED = frozenset({ErrorCode.NOT_PRIMARY, ErrorCode.STALE_EPOCH})
REDIRECT_WAIT_S = 0.2


@dataclass
class CMConfig:
    name: str
    host: str = "127.0.0.1"
    port: int = 7000
    max_frame: int = 16 * 1024 * 1024
    cluster_secret: str | None = None  # required: presented to every MM (auth/cluster_secret.py)
    directory_config: str | None = None  # static application registrations (cm/directory.py)
    auth_concurrency: int = 1  # PBKDF2 verifications at a time (auth/throttle.py)
    auth_max_waiting: int = 64  # HELLOs waiting for one; more are refused with AUTH_BUSY
    auth_failure_delay_s: float = 0.5  # before answering AUTH_FAILED
    tls_dir: str | None = None  # certificates (protocol/tls.py): TLS for clients, mutual TLS to MMs
    # A second client listener (a pod's 127.0.0.1, for kubectl port-forward); given up with a warning
    # when the address is taken (pods sharing the host's network: the loopback is not theirs).
    local_bind: tuple[str, int] | None = None
    credentials_path: str | None = None  # re-read when it changes (auth/reload.py), as acl_path
    acl_path: str | None = None
    auth_reload_s: float = 1.0
    users_secret: str | None = None  # <c>-users, from BrokerUsers (auth/kube_users.py)
    namespace: str | None = None  # of users_secret


class ConnectionManager:
    def __init__(
        self,
        config: CMConfig,
        source: AssignmentSource,
        credentials: CredentialStore | None = None,
        acl: AclTable | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.credentials = credentials or CredentialStore()
        self.auth = AuthGate(
            self.credentials, config.auth_concurrency, config.auth_max_waiting, config.auth_failure_delay_s
        )
        self.acl = acl or AclTable()
        self.ids = IdGenerator(config.name)
        self.tls = BrokerTls(config.tls_dir) if config.tls_dir else None
        self.links: dict[str, MMLink] = {}
        self.routes = Routes(source, self.links)  # every request about a partition goes by it
        self._retired: set[asyncio.Task[None]] = set()  # links to an MM's old address, stopping
        self._primaries: dict[str, str | None] = {}  # partition -> primary MM, as last seen
        self._epochs: dict[str, int] = {}  # partition -> newest epoch seen (table or delivery)
        # partition -> (epoch, MM) of the newest epoch whose deliveries this CM relayed: acks go
        # where their delivery came from, also before this CM's table names that primary
        self._deliverers: dict[str, tuple[int, str]] = {}
        self.sessions: dict[str, Session] = {}
        self.subs: dict[str, SubEntry] = {}
        self._rr = itertools.count()
        self._server: asyncio.base_events.Server | None = None
        self._local_server: asyncio.base_events.Server | None = None
        self._log_events: LogEventBuffer | None = None
        self._log_task: asyncio.Task[None] | None = None
        self._auth_task: asyncio.Task[None] | None = None
        self.auth_reloads = 0
        self.ready = False
        self.produced_batches = 0
        # Produces whose partition has no primary this CM reaches (its MM lost, the table not yet
        # naming another, the link not up): forwarded the moment it does (``_forward_held``).
        self.held: HeldRequests[Session] = HeldRequests(ErrorCode.MM_UNAVAILABLE)
        # Produces the primary they went to refused as no longer its own (a handoff demoted it, or
        # its table is ahead of this CM's): forwarded the moment the table names the partition at a
        # newer epoch (``_forward_held``), not after the producer's back-off. With no newer epoch
        # within REDIRECT_WAIT_S (a lease lapse that ends without a failover, an MM that does not
        # know the partition yet) each goes once more where the table points, as the producer's
        # resend would; a refusal then is the producer's to handle.
        self.redirects: HeldRequests[Session] = HeldRequests(
            ErrorCode.NOT_PRIMARY, REDIRECT_WAIT_S, on_expiry=partial(self._forward, resent=True)
        )
        self.delivered_batches = 0
        self.tx = TxManager(self)  # transacted sessions: this CM is their transaction manager
        self._dispatch = Dispatcher(self._dispatch_table(), lambda session: session.conn)
        self._tx_task: asyncio.Task[None] | None = None
        self.directory_service = Directory(
            config.name,
            source.brokers,
            self._app_counts,
            http_peer_fetcher(tls=self.tls),
            load_registrations(config.directory_config),
        )

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self.config.cluster_secret = cluster_secret.require(self.config.cluster_secret)
        await self.source.start()
        table = self.source.partitions()
        self._primaries = {n: a.primary for n, a in table.items()}
        self._epochs = {n: a.epoch for n, a in table.items()}
        self.source.subscribe(self._on_table)
        self._sync_links()
        self._server = await self._listen(self.config.host, self.config.port)
        if self.config.local_bind is not None:
            host, port = self.config.local_bind
            try:
                self._local_server = await self._listen(host, port)
            except OSError as exc:
                log.warning("cm %s: no second listener on %s:%d (%s)", self.config.name, host, port, exc)
        self._log_events = LogEventBuffer(self.config.name, "cm").install()
        self._log_task = asyncio.create_task(self._publish_log_events(self._log_events))
        if self.config.users_secret:
            secret = KubeUsersSecret(self.config.namespace or "default", self.config.users_secret)
            # Nobody is admitted before the first read (an empty table, authentication on).
            self.apply_auth(CredentialStore({}), AclTable({}))
            first = await asyncio.get_running_loop().run_in_executor(None, secret.poll)
            if first is not None:
                self.apply_auth(*first)
            self._auth_task = asyncio.create_task(self._follow_auth(secret))
        elif self.config.credentials_path or self.config.acl_path:
            files = AuthFiles(self.config.credentials_path, self.config.acl_path)
            self._auth_task = asyncio.create_task(self._follow_auth(files))
        self._tx_task = asyncio.create_task(resolve_forever(self, self.tx))
        self.ready = True
        log.info("cm %s listening on %s:%d", self.config.name, self.config.host, self.config.port)

    async def _listen(self, host: str, port: int) -> asyncio.base_events.Server:
        return await asyncio.start_server(
            self._serve,
            host,
            port,
            limit=2 * 1024 * 1024,
            ssl=self.tls.server(peer_cert=False) if self.tls is not None else None,
        )

    async def stop(self) -> None:
        self.ready = False
        for server in (self._server, self._local_server):
            if server is not None:
                server.close()
        self.held.refuse_all(f"{self.config.name} is stopping")
        self.redirects.refuse_all(f"{self.config.name} is stopping")
        for s in list(self.sessions.values()):
            s.conn.close()
        for link in self.links.values():
            await link.stop()
        await self.source.stop()
        if self._log_task is not None:
            self._log_task.cancel()
        for task in (self._auth_task, self._tx_task):
            if task is not None:
                task.cancel()
        if self._log_events is not None:
            self._log_events.remove()

    async def _follow_auth(self, files: AuthFiles | KubeUsersSecret) -> None:
        """Take up changed users and ACLs; end the sessions of users removed or given another
        password (an ACL change applies to the next request of every session)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.auth_reload_s)
            try:
                tables = await loop.run_in_executor(None, files.poll)  # plain passwords get hashed
            except Exception:
                log.exception("reloading users and ACLs")
                continue
            if tables is not None:
                self.apply_auth(*tables)

    def apply_auth(self, credentials: CredentialStore, acl: AclTable) -> None:
        gone = revoked(self.credentials, credentials)
        self.credentials = self.auth.store = credentials
        self.acl = acl
        self.auth_reloads += 1
        ended = [s for s in list(self.sessions.values()) if s.user in gone]
        for session in ended:
            try:
                session.conn.send_nowait(
                    error_frame(ErrorCode.AUTH_FAILED, f"user {session.user!r} was revoked", fatal=True)
                )
            except ConnectionClosed:
                pass
            session.conn.close()
        log.info("users and ACLs reloaded; %d sessions of revoked users ended", len(ended))

    async def _publish_log_events(self, events: LogEventBuffer) -> None:
        """Forward this CM's log events to ``topic:_LOG`` in the internal log partition of one MM
        (never a user partition); CMs spread over the MMs by name."""
        while True:
            await asyncio.sleep(0.5)
            events.summarizer.tick()
            live = self.routes.live()
            taken = events.take_blob() if live else None
            if taken is None:
                continue
            mm = live[zlib.crc32(self.config.name.encode()) % len(live)]
            route = self.routes.to(mm, 0)
            if route is None:
                continue
            conn = route.conn
            fut = conn.request_nowait(
                {
                    "t": FrameType.PRODUCE,
                    "p": log_partition(mm),
                    "d": LOG_DESTINATION,
                    "n": taken[0],
                    "b": taken[1],
                    "f": 0,
                    "x": 0,
                    "e": 0,
                }
            )
            fut.add_done_callback(lambda f: f.exception())

    def _on_table(self) -> None:
        self._sync_links()
        table = self.source.partitions()
        moved: dict[str, list[str]] = {}  # former primary -> the partitions that moved off it
        for name, old in self._primaries.items():
            a = table.get(name)
            # Left the table (a drained on-demand partition deleted): its MM stops serving it too.
            if old is not None and (a is None or old != a.primary):
                moved.setdefault(old, []).append(name)
        for name, a in table.items():
            self._new_epoch(name, a.epoch)
        self._primaries = {n: a.primary for n, a in table.items()}
        self._forward_held()
        for mm, partitions in sorted(moved.items()):
            link = self.links.get(mm)
            if link is None:
                continue
            # Only these partitions' requests: the link and the deliveries of the MM's other
            # partitions stay good (closing it gave every one of them back).
            why = f"the primary of {', '.join(partitions)} moved off {mm}"
            failed = link.fail_partitions(partitions, why)
            if failed:
                log.info("%s is no longer primary of %s: %d requests failed over", mm, partitions, failed)

    def _new_epoch(self, partition: str, epoch: int) -> None:
        """Revoke the older epochs' deliveries of ``partition`` on every consumer session."""
        known = self._epochs.get(partition)
        self._epochs[partition] = max(epoch, known if known is not None else epoch)
        if known is None or epoch <= known:
            return
        revoke = {"t": FrameType.REVOKE, "p": partition, "e": epoch}
        for session in list(self.sessions.values()):
            if session.subs and not session.conn.closed:
                try:
                    session.conn.send_nowait(dict(revoke))
                except ConnectionClosed:
                    pass

    def _link_lost(self, link: MMLink) -> None:
        """The connection to ``link``'s MM ended: the MM gave back every delivery it made on it,
        also of partitions that did not move (no new epoch to revoke them by), and hands them out
        again, flagged. Copies a consumer still queues would be handed out late, as unflagged
        repeats: every consumer session is told to drop them (REVOKE with ``lost``, the epoch
        they came at), before anything from a new connection is relayed."""
        lost = [(p, epoch) for p, (epoch, mm) in self._deliverers.items() if mm == link.name]
        for session in list(self.sessions.values()):
            if not session.subs or session.conn.closed:
                continue
            for partition, epoch in lost:
                try:
                    session.conn.send_nowait({"t": FrameType.REVOKE, "p": partition, "lost": epoch})
                except ConnectionClosed:
                    break

    def _sync_links(self) -> None:
        for b in self.source.brokers().values():
            link = self.links.get(b.name)
            if b.role != BrokerRole.MM or link is None or link.address == b.address:
                continue
            log.info("mm %s moved from %s to %s: relinking", b.name, link.address, b.address)
            del self.links[b.name]
            task = asyncio.get_running_loop().create_task(link.stop())
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)
        for b in self.source.brokers().values():
            if b.role == BrokerRole.MM and b.name not in self.links:
                link = MMLink(
                    b.name,
                    b.address,
                    self.config.name,
                    self.config.cluster_secret,
                    self.config.max_frame,
                    self._on_mm_frame,
                    self._replay_subscriptions,
                    self.tls,
                    self._link_lost,
                )
                self.links[b.name] = link
                link.start()

    async def _replay_subscriptions(self, link: MMLink) -> None:
        assert link.conn is not None
        self._forward_held()  # the link is up: what waited for its MM goes now
        for entry in list(self.subs.values()):
            fut = link.conn.request_nowait(dict(entry.mm_frame))
            fut.add_done_callback(lambda f: f.exception())

    # -- MM -> CM --------------------------------------------------------------------------------
    def _on_mm_frame(self, link: MMLink, frame: dict[str, Any]) -> None:
        if frame["t"] != FrameType.DELIVER:
            return
        epoch = frame.get("e")
        if epoch is not None:
            partition = str(frame.get("p", ""))
            self._new_epoch(partition, int(epoch))
            known = self._deliverers.get(partition)
            if known is None or int(epoch) >= known[0]:
                self._deliverers[partition] = (int(epoch), link.name)
        entry = self.subs.get(frame.get("s", ""))
        if entry is None or entry.session.conn.closed:
            return
        if not self.acl.allowed(entry.session.user, "consume", frame.get("d", "")):
            # Never acknowledged on the owner's behalf: it stays pending on this subscription and
            # goes back to its destination when the subscription ends. (MMs that apply the
            # subscription's grants never send one.)
            log.warning("dropped a delivery of %s denied to %r", frame.get("d"), entry.session.user)
            return
        frame["s"] = entry.client_sub
        self.delivered_batches += 1
        try:
            entry.session.conn.send_nowait(frame)
        except ConnectionClosed:
            pass

    # -- client connections ----------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(
            reader, writer, self.config.max_frame, name=f"cm:{self.config.name}", decoder=REQUESTS
        )
        try:
            async with asyncio.timeout(10):
                hello = await read_frame(reader, min(MAX_HELLO, self.config.max_frame))
        except (ProtocolError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
            code = exc.code if isinstance(exc, ProtocolError) else ErrorCode.PROTOCOL_ERROR
            log.warning("protocol error from %s during the handshake: %s", conn.peer, exc)
            await self._refuse(conn, code, f"handshake failed: {exc}")
            return
        if hello is None:
            conn.close()
            return
        if hello.get("t") != FrameType.HELLO:
            await self._refuse(conn, ErrorCode.NOT_AUTHENTICATED, "the first frame must be HELLO")
            return
        if hello.get("v") != PROTOCOL_VERSION:
            await self._refuse(
                conn, ErrorCode.UNSUPPORTED_VERSION, f"protocol version {hello.get('v')!r} unsupported"
            )
            return
        user = str(hello.get("user") or "anonymous")
        try:
            ok = await self.auth.authenticate(hello.get("user"), hello.get("password"))
        except AuthBusy:
            log.warning("authentication busy: refused user %r from %s", user, conn.peer)
            await self._refuse(conn, ErrorCode.AUTH_BUSY, "too many authentications in progress, retry later")
            return
        if not ok:
            log.warning("authentication failed for user %r from %s", user, conn.peer)
            await self._refuse(conn, ErrorCode.AUTH_FAILED, f"authentication failed for user {user!r}")
            return
        session = Session(
            self.ids.next(), user, str(hello.get("id", "")), conn, str(hello.get("app") or user)
        )
        self.sessions[session.id] = session
        self.directory_service.arrived(session.app)
        conn.send_nowait(
            {
                "t": FrameType.HELLO_OK,
                "v": PROTOCOL_VERSION,
                "session": session.id,
                "node": self.config.name,
                "max_frame": self.config.max_frame,
            }
        )
        conn.on_close.append(lambda: self._session_closed(session))
        await conn.run(partial(self._dispatch, session))

    async def _refuse(self, conn: Connection, code: ErrorCode, msg: str) -> None:
        try:
            conn.send_nowait(error_frame(code, msg, fatal=True))
            async with asyncio.timeout(1):
                await conn.writer.drain()
        except Exception:
            pass
        conn.close()

    def _session_closed(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        for key in session.subs.values():
            self.subs.pop(key, None)
            for conn in self.routes.open_conns():
                conn.send_nowait({"t": FrameType.UNSUBSCRIBE, "c": 0, "s": key})

    def _dispatch_table(self) -> dict[int, Entry[Session]]:
        """How each client frame is handled (``broker/dispatch.py`` says what the modes mean)."""
        inline, awaited, spawned = Mode.INLINE, Mode.AWAITED, Mode.SPAWNED
        return {
            FrameType.PRODUCE: Entry(self._produce, inline),  # returns a drain when the MM link is full
            FrameType.ACK: Entry(self._ack, inline),
            FrameType.NACK: Entry(self._ack, inline),
            FrameType.OPEN_PRODUCER: Entry(self._open_producer, inline),
            FrameType.PING: Entry(self._ping, inline),
            FrameType.SUBSCRIBE: Entry(self._subscribe, awaited),
            FrameType.UNSUBSCRIBE: Entry(self._unsubscribe, awaited),
            FrameType.ADMIN: Entry(self._admin, awaited),
            FrameType.DIRECTORY: Entry(self._directory_request, awaited),
            FrameType.MARKER: Entry(self._marker, awaited),
            FrameType.FETCH: Entry(partial(fetch_route.fetch, self), awaited),  # read by offset
            FrameType.FETCH_META: Entry(partial(fetch_route.fetch_meta, self), awaited),
            FrameType.READER_COMMIT: Entry(partial(fetch_route.reader_commit, self), awaited),
            FrameType.TX_COMMIT: Entry(self.tx.commit, spawned),  # waits on every partition's MM
            FrameType.TX_RESOLVE: Entry(self.tx.resolve, spawned),
        }

    @staticmethod
    def _ping(session: Session, frame: dict[str, Any]) -> None:
        session.conn.reply(frame, {"t": FrameType.PONG})

    # -- produce ---------------------------------------------------------------------------------
    def _open_producer(self, session: Session, frame: dict[str, Any]) -> None:
        ptype = PartitionType(frame.get("ptype") or PartitionType.ON_DEMAND)
        partitions = self.source.partitions()
        name = frame.get("partition")
        if name:
            if name not in partitions:
                session.conn.reply_error(frame, ErrorCode.UNKNOWN_PARTITION, f"no partition {name!r}")
                return
        else:
            candidates = self.source.writable(ptype)
            if not candidates:
                session.conn.reply_error(frame, ErrorCode.UNKNOWN_PARTITION, f"no writable {ptype} partition")
                return
            if ptype == PartitionType.FIXED:
                key = frame.get("key")
                key_bytes = key if isinstance(key, bytes) else str(key or session.id).encode()
                name = candidates[zlib.crc32(key_bytes) % len(candidates)].name
            else:
                live = [a for a in candidates if self.routes.up(a.primary)] or candidates
                name = live[next(self._rr) % len(live)].name
        producer_id = self.ids.next()
        session.producers[producer_id] = name
        session.conn.reply(
            frame,
            {
                "t": FrameType.OK,
                "partition": name,
                # a fixed partition's producers wait out its failover (PARTITION_NOT_WRITABLE)
                "ptype": str(partitions[name].type if name in partitions else ptype),
                "producer_id": producer_id,
                "pid": secrets.randbits(62),
            },
        )

    def _produce(self, session: Session, frame: Produce) -> Any:
        raw = frame.destination
        if not raw or len(raw) > MAX_PATTERN:
            session.conn.reply_error(
                frame,
                ErrorCode.INVALID_DESTINATION,
                f"destination must be a string of 1..{MAX_PATTERN} chars",
            )
            return None
        dest = canonical(raw)
        if is_reserved(dest):
            session.conn.reply_error(
                frame, ErrorCode.RESERVED_NAME, f"destination {raw!r} is reserved (names starting with '_')"
            )
            return None
        if not self.acl.allowed(session.user, "produce", dest):
            session.conn.reply_error(
                frame, ErrorCode.ACL_DENIED, f"user {session.user!r} may not produce to {dest!r}"
            )
            return None
        frame.destination = dest
        conn = self._forward(session, frame, resent=False)
        if conn is not None and conn.write_buffer_size > HIGH_WATER:
            return conn.drain()
        return None

    def _forward(self, session: Session, frame: Produce, *, resent: bool) -> Connection | None:
        """Send a checked PRODUCE to its partition's primary, stamped with the table's epoch (the
        connection it went on), or hold it while no primary is reachable, or refuse it."""
        corr = frame.c
        partition = frame.partition
        a = self.source.partitions().get(partition)
        if a is not None and not a.writable:
            session.conn.reply_error(frame, ErrorCode.PARTITION_NOT_WRITABLE, f"{a.name} takes no writes")
            return None
        try:
            route = self.routes.primary(partition)
        except Unroutable as exc:
            if exc.code == ErrorCode.MM_UNAVAILABLE and self.held.hold(partition, session, frame):
                return None
            session.conn.reply_error(frame, exc.code, exc.msg)
            return None
        frame.epoch = route.epoch
        try:
            fut = route.link.request(partition, frame)  # the link's correlation id replaces the client's
        except ConnectionClosed:  # the MM went away a moment ago: the producer resends
            frame.c = corr  # the link numbered it before the send failed
            session.conn.reply_error(frame, ErrorCode.MM_UNAVAILABLE, f"primary of {partition} unavailable")
            return None
        fut.add_done_callback(partial(self._produced, session, corr, frame, resent))
        self.produced_batches += 1
        return route.conn

    def _produced(
        self, session: Session, corr: Any, frame: Produce, resent: bool, fut: asyncio.Future[Any]
    ) -> None:
        exc = _failure(fut)
        if exc is not None and not resent and not session.conn.closed:
            # Forwarded once more (the MM stores a resend once, by its producer id and sequence):
            if not isinstance(exc, RemoteError):
                # the link lost, or the partition's primary moved off its MM, before the answer
                # came: to the primary the table names now or once it names one;
                frame.c = corr
                self._forward(session, frame, resent=True)
                return
            if exc.code in REDIRECTED:
                # refused as not (or no longer) that MM's: to the primary of a newer epoch.
                frame.c = corr
                if self._redirect(session, frame):
                    return
        self._relay(session, corr, fut)

    def _redirect(self, session: Session, frame: Produce) -> bool:
        """Forward a produce refused by the primary of the epoch it went at to the primary of a
        newer one, now or once the table names it; False when it cannot be held."""
        partition = frame.partition
        a = self.source.partitions().get(partition)
        if a is None or frame.epoch is None or a.epoch > frame.epoch:
            self._forward(session, frame, resent=True)
            return True
        return self.redirects.hold(partition, session, frame)

    @staticmethod
    def _relay(session: Session, corr: Any, fut: asyncio.Future[Any]) -> None:
        """The MM's answer to a request relayed to the client under its correlation id."""
        exc = _failure(fut)
        if session.conn.closed:  # (the exception is retrieved all the same: no "never retrieved")
            return
        if exc is None:
            reply = fut.result()
            reply["r"] = corr
        elif isinstance(exc, RemoteError):
            reply = error_frame(ErrorCode(exc.code), exc.msg, corr)
        else:
            reply = error_frame(ErrorCode.MM_UNAVAILABLE, f"lost the MM: {exc}", corr)
        try:
            session.conn.send_nowait(reply)
        except ConnectionClosed:  # the client went away while its transport closed: no one to tell
            pass

    def _forward_held(self) -> None:
        """Forward the held produces of each partition whose primary this CM reaches now, and the
        redirected ones routed at an epoch older than the table's."""
        forward = partial(self._forward, resent=True)
        # The redirected first: they went to the old primary before any of the same producer's
        # batches that wait for a reachable primary (a later sequence would overtake them).
        table = self.source.partitions()
        for partition in self.redirects.partitions():
            a = table.get(partition)  # gone from the table: forwarded, and refused as unknown
            self.redirects.release(partition, forward, None if a is None else a.epoch - 1)
        for partition in self.held.partitions():
            try:
                self.routes.primary(partition)
            except Unroutable:
                continue
            self.held.release(partition, forward)

    # -- consume ---------------------------------------------------------------------------------
    async def _subscribe(self, session: Session, frame: dict[str, Any]) -> None:
        sub = int(frame["s"])
        mode = str(frame.get("m", "exact"))
        raw = frame.get("d")
        if mode not in MATCH_KINDS or not isinstance(raw, str) or not raw:
            session.conn.reply_error(frame, ErrorCode.INVALID_DESTINATION, f"bad destination {raw!r}/{mode}")
            return
        dest = canonical(raw)
        if len(dest) > MAX_PATTERN:
            session.conn.reply_error(
                frame, ErrorCode.INVALID_DESTINATION, f"pattern longer than {MAX_PATTERN}"
            )
            return
        try:
            make_matcher(dest, mode)
        except Exception as exc:
            session.conn.reply_error(frame, ErrorCode.INVALID_DESTINATION, f"bad pattern: {exc}")
            return
        if mode == "exact" and is_reserved(dest) and dest not in CONSUMABLE_RESERVED:
            session.conn.reply_error(frame, ErrorCode.RESERVED_NAME, f"destination {raw!r} is reserved")
            return
        grants = self.acl.grants(session.user, "consume")
        if mode == "exact" and not self.acl.allowed(session.user, "consume", dest):
            session.conn.reply_error(
                frame, ErrorCode.ACL_DENIED, f"user {session.user!r} may not consume from {dest!r}"
            )
            return
        if grants is not None and not may_reach(dest, mode, grants):
            session.conn.reply_error(
                frame,
                ErrorCode.ACL_DENIED,
                f"user {session.user!r} may not consume from any destination the {mode} '{dest}' matches",
            )
            return
        key = f"{session.id}/{sub}"
        mm_frame = {
            "t": FrameType.SUBSCRIBE,
            "s": key,
            "d": dest,
            "m": mode,
            "dn": frame.get("dn"),
            "w": int(frame.get("w", 10000)),
            "wb": int(frame.get("wb", 8 << 20)),
            # The MMs match only destinations inside these grants, so nothing denied is delivered.
            "acl": None if grants is None else list(grants),
        }
        self.subs[key] = SubEntry(session, sub, mm_frame)
        session.subs[sub] = key
        futs = [conn.request(dict(mm_frame), timeout=10) for conn in self.routes.open_conns()]
        results = await asyncio.gather(*futs, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            log.warning("subscribe %s: %d MMs failed: %s", key, len(errors), errors[0])
        session.conn.reply(frame, {"t": FrameType.OK, "key": key})

    async def _unsubscribe(self, session: Session, frame: dict[str, Any]) -> None:
        key = session.subs.pop(int(frame["s"]), None)
        if key is not None:
            self.subs.pop(key, None)
            futs = [
                conn.request({"t": FrameType.UNSUBSCRIBE, "s": key}, timeout=10)
                for conn in self.routes.open_conns()
            ]
            await asyncio.gather(*futs, return_exceptions=True)
        session.conn.reply(frame, {"t": FrameType.OK})

    def _ack_target(self, partition: str, epoch: int | None) -> tuple[str | None, int]:
        """(MM, epoch) an ACK/NACK of a delivery made at ``epoch`` goes to: the MM that delivered
        at that epoch, though this CM's table may not name it yet (a new primary's first
        deliveries can come before the table does); else the primary in the table (a client
        that does not say the epoch: the table's). An older epoch's delivery is void: the MM
        refuses its acknowledgement and the records come again, flagged."""
        a = self.source.partitions().get(partition)
        if a is None:
            return log_partition_owner(partition), 0  # an MM's internal log: epoch 0
        if epoch is None:
            return a.primary, a.epoch
        if int(epoch) <= a.epoch:
            return a.primary, int(epoch)
        seen = self._deliverers.get(partition)
        return (seen[1] if seen is not None and seen[0] == int(epoch) else None), int(epoch)

    def _ack(self, session: Session, frame: Ack) -> None:
        """ACK/NACK to the MM that delivered it; one with a correlation id gets the MM's answer
        relayed."""
        corr = frame.c
        key = session.subs.get(frame.subscription) if isinstance(frame.subscription, int) else None
        target, epoch = self._ack_target(frame.partition, frame.epoch)
        route = self.routes.to(target, epoch)
        if key is None or route is None:
            if corr is not None:
                session.conn.reply_error(frame, ErrorCode.STALE_DELIVERY, "no subscription or primary for it")
            return
        frame.subscription = key
        frame.epoch = epoch
        if corr is None:
            route.conn.send_nowait(frame)
            return
        try:
            fut = route.link.request(frame.partition, frame)
        except ConnectionClosed:
            session.conn.send_nowait(error_frame(ErrorCode.MM_UNAVAILABLE, "the primary went away", corr))
            return
        fut.add_done_callback(partial(self._relay, session, corr))

    # -- admin / directory -----------------------------------------------------------------------
    def _app_counts(self) -> dict[str, int]:
        return count_sessions([s.app for s in self.sessions.values()])

    def directory(self) -> dict[str, Any]:
        return {
            "applications": self.directory_service.counts(),
            "brokers": self.directory_service.broker_table(),
            "partitions": [p.model_dump(mode="json") for p in self.source.partitions().values()],
        }

    async def _directory_request(self, session: Session, frame: dict[str, Any]) -> None:
        """DIRECTORY: the cluster-wide tables; with ``next`` = app, also the CM it should use."""
        await self.directory_service.refresh()
        reply: dict[str, Any] = {"t": FrameType.OK}
        app = frame.get("next")
        if app is not None:
            try:
                chosen = await self.directory_service.next_cm(str(app))
            except NoCMAvailable as exc:
                session.conn.reply_error(frame, ErrorCode.MM_UNAVAILABLE, str(exc))
                return
            reply["next"] = chosen.model_dump(mode="json")
        reply.update(self.directory())
        session.conn.reply(frame, reply)

    async def _marker(self, session: Session, frame: dict[str, Any]) -> None:
        """MARKER: append a takeover marker to every writable partition (cm/markers.py)."""
        dest = canonical(str(frame["d"]))
        if is_reserved(dest) or not dest.startswith("topic:"):
            session.conn.reply_error(frame, ErrorCode.INVALID_DESTINATION, f"markers go to topics: {dest!r}")
            return
        if not self.acl.allowed(session.user, "produce", dest):
            session.conn.reply_error(frame, ErrorCode.ACL_DENIED, f"user {session.user!r} may not produce")
            return
        value = frame.get("v") or b""
        ok, failed = await publish_marker(
            self.source, self.routes, dest, str(frame["id"]), value if isinstance(value, bytes) else b""
        )
        session.conn.reply(frame, {"t": FrameType.OK, "partitions": ok, "failed": failed})

    def stats(self) -> dict[str, Any]:
        return {
            "node": self.config.name,
            "role": "cm",
            "sessions": len(self.sessions),
            "subscriptions": len(self.subs),
            "produced_batches": self.produced_batches,
            "produces": self.held.stats(),  # held while no primary is reachable
            "redirects": self.redirects.stats(),  # refused by an old primary, held for the new one
            "delivered_batches": self.delivered_batches,
            "mm_links": {n: self.routes.up(n) for n in self.links},
            "applications": self._app_counts(),
            "auth_reloads": self.auth_reloads,
        }

    async def _admin(self, session: Session, frame: dict[str, Any]) -> None:
        cmd = frame.get("cmd")
        parts: list[Any]
        if cmd == "stats":
            parts = [self.stats()]
        elif cmd == "directory":
            parts = [self.directory()]
        elif cmd == "sessions":
            parts = [
                {"id": s.id, "user": s.user, "client": s.client_id, "subs": len(s.subs)}
                for s in self.sessions.values()
            ] or [None]
        elif cmd == "mm-stats":
            futs = [
                conn.request({"t": FrameType.ADMIN, "cmd": "stats"}, timeout=10)
                for conn in self.routes.open_conns()
            ]
            results = await asyncio.gather(*futs, return_exceptions=True)
            parts = [r["parts"][0] if isinstance(r, dict) else {"error": str(r)} for r in results] or [None]
        else:
            session.conn.reply_error(frame, ErrorCode.INVALID_REQUEST, f"unknown admin command {cmd!r}")
            return
        for i, part in enumerate(parts):
            session.conn.reply(frame, {"t": FrameType.ADMIN_PART, "i": i, "of": len(parts), "data": part})


def _failure(fut: asyncio.Future[Any]) -> BaseException | None:
    """What a finished request failed with (a cancelled one: ``CancelledError``), None if answered;
    retrieved either way, so that no "exception was never retrieved" is logged."""
    return asyncio.CancelledError() if fut.cancelled() else fut.exception()
