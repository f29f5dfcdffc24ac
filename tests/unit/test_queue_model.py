"""Queue delivery and acknowledgement against a reference model (hypothesis state machine).

The real partition host (log, delivery state, control records, ``_DMQ`` moves) is driven by random
sequences of: produce batches (some already past their TTL), consumers with random windows that
connect and disconnect, deliveries, ack / nack / nack-without-requeue of single records or of what
is left of a delivery, and primary moves (the host stops and a new one recovers the same log at
the next epoch, as a promoted backup does; consumers attach again). The model is written here from
the documented semantics only, it shares no code with the host:

* every message ends acknowledged once or in ``queue:_DMQ`` once, never both and never neither;
* a redelivery is flagged: its delivery count rises by exactly one on the same primary, and by at
  least one across a primary move (a count is committed before its delivery goes out);
* nothing whose acknowledgement was answered OK is delivered again; nothing past its TTL is
  delivered at all; no message is delivered more than ``1 + max_redeliveries`` times;
* an ack or nack of a record the model says is outstanding on that consumer is taken (and one
  of a delivery made by a primary that moved on is refused).

``HYBRIDMQ_MODEL_EXAMPLES`` sets the number of examples (``make adversarial`` runs more).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import msgpack
from host_wire import Wire, decoded, until
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hybridmq.api.frames import FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

QUEUE = "queue:model"
DMQ = "queue:_DMQ"
EXAMPLES = int(os.environ.get("HYBRIDMQ_MODEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("HYBRIDMQ_MODEL_STEPS", "30"))


@dataclass
class Held:
    """One record the model says a consumer holds: where it was delivered and at which attempt."""

    body: bytes
    start: int  # the delivery's first offset (its name on the wire)
    offset: int
    attempt: int  # 1 = first hand-out
    generation: int  # which primary handed it out


@dataclass
class Consumer:
    wire: Wire
    link: ConsumerLink
    window: int
    seen: int = 0  # deliveries of ``wire`` already read by the model
    held: list[Held] = field(default_factory=list)


class QueueModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = TemporaryDirectory()
        self.path = Path(self.tmp.name) / "p"
        self.generation = 0
        self.max_redeliveries = 2
        self.host: PartitionHost | None = None
        self.storage: PartitionStorage | None = None
        self.producer = Wire()
        self.consumers: dict[int, Consumer] = {}
        self.names = itertools.count()
        self.bodies = itertools.count()
        # the model
        self.produced: list[bytes] = []
        self.expired: set[bytes] = set()
        self.acked: set[bytes] = set()  # acknowledgement answered OK
        self.rejected: set[bytes] = set()  # nack without requeue answered OK
        self.last_attempt: dict[bytes, tuple[int, int]] = {}  # body -> (attempt, generation)
        self.replies = Wire()
        self.corr = itertools.count(1)

    # -- plumbing ---------------------------------------------------------------------------------
    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def open_host(self) -> None:
        self.storage = PartitionStorage.open(self.path, LogConfig(fsync="never"))
        leader = PartitionPrimary(
            self.storage.log,
            partition="p",
            replica_id="mm-0",
            epoch=self.generation,
            replicas=("mm-0",),
            min_in_sync=1,
        )
        self.host = PartitionHost("p", self.storage, leader, max_redeliveries=self.max_redeliveries)

        async def start(host: PartitionHost) -> None:
            host.recover()
            host.start()

        self.run(start(self.host))

    def close_host(self) -> None:
        assert self.host is not None and self.storage is not None
        self.run(self.host.stop())
        self.storage.close()

    async def _settle(self, rounds: int = 3) -> None:
        """Pump until the host has sent what it will send (no new frame for ``rounds`` rounds of
        3 ms; what comes later is read at the next step)."""
        quiet = 0
        before = -1
        while quiet < rounds:
            assert self.host is not None
            self.host.pump()
            await asyncio.sleep(0.003)
            sent = sum(len(c.wire.frames) for c in self.consumers.values()) + len(self.replies.frames)
            quiet = quiet + 1 if sent == before else 0
            before = sent

    def settle(self, rounds: int = 3) -> None:
        self.run(self._settle(rounds))

    def attach(self, consumer: Consumer) -> None:
        assert self.host is not None
        self.host.attach(consumer.link, QUEUE, "exact", None)

    # -- rules ------------------------------------------------------------------------------------
    @rule(n=st.integers(1, 5), expired=st.booleans(), max_redeliveries=st.integers(0, 3))
    def produce(self, n: int, expired: bool, max_redeliveries: int) -> None:
        if self.host is None:  # the first step also picks the redelivery limit
            self.max_redeliveries = max_redeliveries
            self.open_host()
        assert self.host is not None
        bodies = [f"m{next(self.bodies)}".encode() for _ in range(n)]
        frame: dict[str, Any] = {"t": FrameType.PRODUCE, "c": len(self.produced), "p": "p0", "d": QUEUE}
        frame["n"] = n
        frame["b"] = msgpack.packb(bodies)
        if expired:
            frame["x"] = int(time.time() * 1000) - 60_000
        before = len(self.producer.frames)
        self.host.enqueue_produce(self.producer, decoded(frame))

        self.run(until(lambda: len(self.producer.frames) > before, "the produce ack"))
        assert self.producer.frames[-1]["t"] == FrameType.PRODUCE_ACK, self.producer.frames[-1]
        self.produced.extend(bodies)
        if expired:
            self.expired.update(bodies)
        self.settle()
        self.read_deliveries()

    @precondition(lambda self: self.host is not None and len(self.consumers) < 3)
    @rule(window=st.integers(1, 6))
    def connect(self, window: int) -> None:
        wire = Wire()
        consumer = Consumer(wire, ConsumerLink(wire, f"c{next(self.names)}", window, 1 << 20), window)
        self.consumers[id(consumer)] = consumer
        self.attach(consumer)
        self.settle()
        self.read_deliveries()

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        consumer = data.draw(st.sampled_from(list(self.consumers.values())))
        assert self.host is not None
        consumer.wire.closed = True
        self.host.detach(consumer.link)
        del self.consumers[id(consumer)]
        self.settle()
        self.read_deliveries()

    @precondition(lambda self: any(c.held for c in self.consumers.values()))
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "reject", "ack-rest", "nack-rest"]))
    def settle_records(self, data: st.DataObject, how: str) -> None:
        consumer = data.draw(st.sampled_from([c for c in self.consumers.values() if c.held]))
        held = data.draw(st.sampled_from(consumer.held))
        assert self.host is not None
        if how.endswith("-rest"):  # what is left of the whole delivery, in one frame
            records = [h for h in consumer.held if h.start == held.start and h.attempt == held.attempt]
            first = last = None
        else:
            records = [held]
            first = last = held.offset
        corr = next(self.corr)
        nack = how != "ack" and how != "ack-rest"
        requeue = how != "reject"
        ack = {"t": FrameType.NACK if nack else FrameType.ACK, "c": corr, "s": "sub", "o": held.start}
        reply = (self.replies, decoded(ack)) if not (nack and requeue) else None
        taken = self.host.ack(consumer.link, held.start, nack, held.attempt, reply, first, last, requeue)
        current = held.generation == self.generation
        assert taken == current, (
            f"{how} of {held} on generation {self.generation}: taken={taken}, the model says "
            f"{'outstanding' if current else 'handed out by a primary that moved on'}"
        )
        for h in records:
            consumer.held.remove(h)
        if taken and reply is not None:
            self.run(asyncio.wait_for(self._answer(corr), 5))
            answer = self.replies.frames[-1]
            assert answer["t"] == FrameType.OK, answer
            (self.acked if how.startswith("ack") else self.rejected).update(h.body for h in records)
        self.settle()
        self.read_deliveries()

    async def _answer(self, corr: int) -> None:
        while not any(f.get("r") == corr for f in self.replies.frames):
            self.host.pump() if self.host is not None else None
            await asyncio.sleep(0.002)

    @precondition(lambda self: self.host is not None)
    @rule()
    def primary_moves(self) -> None:
        """The host stops; a new one at the next epoch recovers the log; consumers attach again
        (what a CM does for its subscriptions after a failover)."""
        self.close_host()
        self.generation += 1
        for consumer in self.consumers.values():
            consumer.wire = Wire()
            consumer.link = ConsumerLink(consumer.wire, consumer.link.key, consumer.window, 1 << 20)
            consumer.seen = 0
            # what it held stays with it (its acks are now refused: a delivery of an older primary)
        self.open_host()
        for consumer in self.consumers.values():
            self.attach(consumer)
        self.settle()
        self.read_deliveries()

    # -- the checker ------------------------------------------------------------------------------
    def read_deliveries(self) -> None:
        for consumer in self.consumers.values():
            frames = consumer.wire.deliveries()
            for frame in frames[consumer.seen :]:
                self.check_delivery(consumer, frame)
            consumer.seen = len(frames)

    def check_delivery(self, consumer: Consumer, frame: dict[str, Any]) -> None:
        assert frame["d"] == QUEUE
        bodies = msgpack.unpackb(frame["b"])
        assert len(bodies) == frame["n"]
        attempt = int(frame["rd"]) + 1
        for i, body in enumerate(bodies):
            assert body not in self.acked, f"{body!r} was acknowledged (answered OK) and came back"
            assert body not in self.rejected, f"{body!r} was rejected (answered OK) and came back"
            assert body not in self.expired, f"{body!r} was past its TTL and was delivered"
            assert attempt <= 1 + self.max_redeliveries, (
                f"{body!r} delivered {attempt} times (limit: 1 + {self.max_redeliveries})"
            )
            before = self.last_attempt.get(body)
            if before is None:
                assert attempt == 1 or self.generation > 0, f"{body!r} first seen at attempt {attempt}"
            elif before[1] == self.generation:
                assert attempt == before[0] + 1, f"{body!r} attempt {attempt} after {before[0]}"
            else:
                assert attempt > before[0], f"{body!r} attempt {attempt} after {before[0]} (moved)"
            for c in self.consumers.values():
                assert all(h.body != body or h.generation < self.generation for h in c.held), (
                    f"{body!r} delivered while another consumer holds it"
                )
            self.last_attempt[body] = (attempt, self.generation)
            consumer.held.append(Held(body, int(frame["o"]), int(frame["o"]) + i, attempt, self.generation))

    @invariant()
    def windows_hold(self) -> None:
        for consumer in self.consumers.values():
            current = [h for h in consumer.held if h.generation == self.generation]
            assert len(current) <= consumer.window, f"{len(current)} held, window {consumer.window}"

    def teardown(self) -> None:
        try:
            if self.host is not None:
                self.drain_and_check()
        finally:
            if self.host is not None:
                self.close_host()
            self.loop.close()
            self.tmp.cleanup()

    def drain_and_check(self) -> None:
        """Every consumer leaves; one with a large window acknowledges everything; then ``_DMQ``
        is read. Each message produced is acknowledged once or in ``_DMQ`` once."""
        assert self.host is not None
        for consumer in list(self.consumers.values()):
            consumer.wire.closed = True
            self.host.detach(consumer.link)
        self.consumers.clear()
        drained = self.read_all(QUEUE)
        self.acked.update(drained)
        dead = self.read_all(DMQ)
        assert len(dead) == len(set(dead)), f"a message is in _DMQ twice: {sorted(dead)}"
        both = self.acked & set(dead)
        assert not both, f"acknowledged and in _DMQ: {sorted(both)}"
        lost = set(self.produced) - self.acked - set(dead)
        assert not lost, f"neither acknowledged nor in _DMQ: {sorted(lost)}"
        assert self.rejected <= set(dead), f"rejected but not in _DMQ: {self.rejected - set(dead)}"
        assert self.expired <= set(dead), f"past TTL but not in _DMQ: {self.expired - set(dead)}"

    def read_all(self, dest: str) -> list[bytes]:
        """Bodies a consumer acknowledging everything gets from ``dest`` until nothing comes."""
        assert self.host is not None
        wire = Wire()
        link = ConsumerLink(wire, f"drain-{dest}", 1000, 1 << 24)
        self.host.attach(link, dest, "exact", None)
        got: list[bytes] = []
        seen = 0
        for _ in range(100):
            self.settle(rounds=30)  # the last word: nothing more for ~0.1 s
            frames = wire.deliveries()[seen:]
            seen += len(frames)
            if not frames:
                break
            for frame in frames:
                if dest == QUEUE:
                    for body in msgpack.unpackb(frame["b"]):
                        assert body not in self.acked, f"{body!r} came back after its ack"
                got.extend(msgpack.unpackb(frame["b"]))
                assert self.host.ack(link, int(frame["o"]), attempt=int(frame["rd"]) + 1)
        wire.closed = True
        self.host.detach(link)
        return got


TestQueueModel = QueueModel.TestCase
TestQueueModel.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
