"""Affinity consumer groups: instances with their own durable queues, leases, takeover.

Every member of group ``G`` on topic ``T`` holds the durable subscription ``G.<member>`` on ``T``, so
every member's queue receives every message; a member *processes* the messages whose session key
(the record key) it owns and acknowledges the others unprocessed. Keys are spread over the declared
members by rendezvous hashing (``affinity.Ownership``).

Membership lease: each member publishes a heartbeat to ``topic:G.members`` every ``heartbeat_s`` and
follows everyone's heartbeats; a member whose last heartbeat is older than ``lease_s`` is declared
dead (for good: a restarted instance joins under a new member name). Heartbeats go through the
brokers like any message, so the lease works whichever CM each member uses and survives a CM
failover (members' ``Producer`` / ``Consumer`` sessions reconnect). Every survivor computes the same
adopter for a dead member (rendezvous hash over the live members), and the adopter takes over with
the marker protocol, driven by ``affinity.Takeover``:

1. stop reading its own queue;
2. open the dead member's durable subscription (the MM hands a durable subscription to its newest
   subscriber, so any straggler of the dead instance is cut off);
3. publish a marker (``MARKER`` request: the CM writes it to every partition; the reply names them);
4. process the dead queue up to the marker in every one of those partitions (adopted keys only),
   then close it;
5. resume its own queue, skipping adopted keys up to the marker; past it, carry on with the union.

The application's ``handler`` is called once per processed message, and the message is acknowledged
right after it returns (with no await in between, so a cancelled instance never leaves a processed
message unacknowledged behind it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hybridmq.api.frames import FrameType
from hybridmq.client.affinity import MARKER_HEADER, Action, AffinityMessage, Ownership, Takeover
from hybridmq.client.consumer import Consumer, StreamMessage
from hybridmq.client.message import Message
from hybridmq.client.producer import Producer

log = logging.getLogger(__name__)

Handler = Callable[[Message], Awaitable[None] | None]


@dataclass
class Leases:
    """Membership leases: who heartbeated when, and who is declared dead (pure, clock injected)."""

    members: tuple[str, ...]
    lease_s: float
    started: float
    last: dict[str, float] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)

    def beat(self, member: str, now: float) -> None:
        if member in self.members and member not in self.dead:
            self.last[member] = max(self.last.get(member, now), now)

    def expire(self, now: float) -> list[str]:
        """Newly dead members (their lease lapsed), in a deterministic order."""
        newly = [
            m
            for m in self.members
            if m not in self.dead and now - self.last.get(m, self.started) > self.lease_s
        ]
        self.dead.extend(newly)
        return newly

    @property
    def alive(self) -> tuple[str, ...]:
        return tuple(m for m in self.members if m not in self.dead)


def adopter(dead: str, alive: Iterable[str]) -> str:
    """The survivor that adopts ``dead``'s queue: the same answer on every survivor."""
    candidates = [m for m in alive if m != dead]
    if not candidates:
        raise ValueError("no survivor to adopt the queue")
    return max(candidates, key=lambda m: hashlib.blake2b(f"{dead}\0{m}".encode(), digest_size=8).digest())


def key_of(msg: Message) -> str | None:
    key = msg.key
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return None if key is None else str(key)


def as_affinity(msg: Message) -> AffinityMessage:
    marker = (msg.headers or {}).get(MARKER_HEADER)
    return AffinityMessage(msg.partition, key_of(msg), str(marker) if marker is not None else None)


class AffinityMember:
    def __init__(
        self,
        bootstrap: str | list[str] | None,
        topic: str,
        group: str,
        member: str,
        members: Iterable[str],
        handler: Handler,
        *,
        lease_s: float = 2.0,
        heartbeat_s: float = 0.3,
        takeover_timeout_s: float = 60.0,
        **connect_options: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic if topic.startswith("topic:") else f"topic:{topic}"
        self.group = group
        self.member = member
        self.ownership = Ownership(tuple(members))
        self.handler = handler
        self.leases = Leases(self.ownership.members, lease_s, time.monotonic())
        self.heartbeat_s = heartbeat_s
        self.takeover_timeout_s = takeover_timeout_s
        self.options = connect_options
        self.takeovers: list[dict[str, Any]] = []
        self.processed = 0
        self._pending: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._own: Consumer | None = None
        self._hb_in: Consumer | None = None
        self._hb_out: Producer | None = None
        self._clients: list[Consumer | Producer] = []
        self._stopped = False

    def durable(self, member: str) -> str:
        return f"{self.group}.{member}"

    @property
    def members_topic(self) -> str:
        return f"topic:{self.group}.members"

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> AffinityMember:
        self._own = await self._consumer(self.topic, self.durable(self.member))
        self._hb_in = await self._consumer(self.members_topic, None)
        self._hb_out = await Producer.connect(self.bootstrap, **self.options)
        self._clients += [self._own, self._hb_in, self._hb_out]
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._heartbeats()),
            loop.create_task(self._membership()),
            loop.create_task(self._process()),
        ]
        return self

    async def _consumer(self, topic: str, durable: str | None) -> Consumer:
        return await Consumer.connect(
            self.bootstrap, topic, durable=durable, auto_ack=False, window=2000, **self.options
        )

    async def stop(self) -> None:
        """Leave: stop working and close every connection (the lease then lapses)."""
        await self.crash()

    async def crash(self) -> None:
        """Stop dead, as a killed process would: no more processing, heartbeats or acks.

        The loops also check ``_stopped``: on Python 3.11 ``wait_for`` (inside ``receive``) returns
        a message that arrived together with the cancellation instead of raising it, so a cancel
        alone can leave a loop running; it then processed and acknowledged the adopted keys behind
        the heir's back."""
        self._stopped = True
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            # Before the abort: the acknowledgements of what was processed go out on the next turn
            # of the loop, and an abort drops them (the messages would come again to the heir).
            await asyncio.wait(self._tasks, timeout=5.0)  # bounded: never hang here
        for c in self._clients:
            c.abort()

    # -- membership ------------------------------------------------------------------------------
    async def _heartbeats(self) -> None:
        assert self._hb_out is not None
        while not self._stopped:
            self._hb_out.try_send(self.members_topic, self.member.encode(), key=self.member)
            await asyncio.sleep(self.heartbeat_s)

    async def _membership(self) -> None:
        assert self._hb_in is not None
        while not self._stopped:
            try:
                msg = await self._hb_in.receive(timeout=self.heartbeat_s)
            except TimeoutError:
                msg = None
            now = time.monotonic()
            if isinstance(msg, Message):
                self.leases.beat(msg.value.decode("utf-8", "replace"), now)
                self._hb_in.ack(msg)
            for dead in self.leases.expire(now):
                heir = adopter(dead, self.leases.alive)
                log.info("%s: member %s declared dead; %s adopts its queue", self.member, dead, heir)
                if heir == self.member:
                    self._pending.put_nowait(dead)
                else:
                    self.ownership = self.ownership.adopt(dead, heir)

    # -- processing ------------------------------------------------------------------------------
    def _owns(self, key: str | None) -> bool:
        return self.ownership.owner(key) == self.member

    async def _handle(self, consumer: Consumer, msg: Message, action: Action) -> None:
        if self._stopped:
            raise asyncio.CancelledError  # stopped: a message received meanwhile is not ours any more
        if action is Action.PROCESS:
            result = self.handler(msg)
            if inspect.isawaitable(result):
                await result
            self.processed += 1
        consumer.ack(msg)

    async def _process(self) -> None:
        assert self._own is not None
        while not self._stopped:
            if not self._pending.empty():
                await self._takeover(self._pending.get_nowait())
                continue
            try:
                msg = await self._own.receive(timeout=0.1)
            except TimeoutError:
                continue
            if isinstance(msg, StreamMessage):
                continue  # affinity messages are small; very large ones are not supported here
            a = as_affinity(msg)
            action = Action.MARKER if a.marker_id else (Action.PROCESS if self._owns(a.key) else Action.SKIP)
            await self._handle(self._own, msg, action)

    async def _publish_marker(self, marker_id: str) -> frozenset[str]:
        assert self._own is not None
        for _ in range(50):
            try:
                reply = await self._own.conn.request(
                    {"t": FrameType.MARKER, "d": self.topic, "id": marker_id}, timeout=10
                )
            except (ConnectionError, TimeoutError):
                await asyncio.sleep(0.1)  # our CM died: the consumer is reconnecting
                continue
            if reply.get("failed"):
                log.warning("marker %s not written to %s", marker_id, reply["failed"])
            return frozenset(reply["partitions"])
        raise ConnectionError("could not publish the takeover marker")

    async def _takeover(self, dead: str) -> None:
        assert self._own is not None
        started = time.monotonic()
        before = self.ownership
        # 1. own queue stopped (not read until step 5); 2. open the dead queue
        dead_queue = await self._consumer(self.topic, self.durable(dead))
        try:
            # 3. the marker, after which every partition's stream carries it
            marker_id = f"{self.group}/{dead}/{self.member}/{uuid.uuid4().hex[:8]}"
            partitions = await self._publish_marker(marker_id)
            if not partitions:
                raise RuntimeError("the marker reached no partition")
            tk = Takeover(
                marker_id,
                owns=lambda k: before.owner(k) == self.member,
                adopted=lambda k: before.owner(k) == dead,
                marker_partitions=partitions,
            )
            deadline = started + self.takeover_timeout_s
            # 4. the dead queue up to the marker
            drained = 0
            while not tk.dead_queue_done:
                msg = await dead_queue.receive(timeout=max(0.1, deadline - time.monotonic()))
                if isinstance(msg, Message):
                    action = tk.on_dead_queue(as_affinity(msg))
                    drained += action is Action.PROCESS
                    await self._handle(dead_queue, msg, action)
        finally:
            with contextlib.suppress(Exception):
                await dead_queue.close()
        # 5. our own queue: adopted keys skipped up to the marker
        while not tk.finished:
            msg = await self._own.receive(timeout=max(0.1, deadline - time.monotonic()))
            if isinstance(msg, Message):
                await self._handle(self._own, msg, tk.on_own_queue(as_affinity(msg)))
        # 6. carry on with the union of the keys
        self.ownership = self.ownership.adopt(dead, self.member)
        self.takeovers.append(
            {
                "dead": dead,
                "marker": marker_id,
                "partitions": sorted(partitions),
                "drained": drained,
                "seconds": round(time.monotonic() - started, 3),
            }
        )
        log.info("%s took over %s's queue: %s", self.member, dead, self.takeovers[-1])
