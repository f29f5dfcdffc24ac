"""The delivery engine on its own, driven as the partition host drives it, against a small model.

No partition host, no event loop: the test is the engine's control committer. It pumps, takes the
outbox and either commits the round (sends what is still outstanding, withdraws the rest) or fails
it (withdraws everything), fences and unfences the primary, and plays consumers that acknowledge,
give back and reject records. The model (what was produced, acknowledged, rejected, the attempt
each message was last *sent* with) checks every delivery that reaches a consumer:

* a message acknowledged or rejected never comes again, nor does one another consumer holds;
* a delivery is sent at most ``1 + max_redeliveries`` times, each time with a higher attempt
  number than the last one sent;
* a consumer never holds more than its window;
* at the end, with the consumers still attached and acknowledging what they get, every message
  produced is acknowledged once or in ``_DMQ`` once: nothing stays with a consumer that never got it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import msgpack
from host_wire import Wire, store
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hybridmq.api.frames import DMQ_DESTINATION, ErrorCode
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.commit_error import CommitError
from hybridmq.broker.mm.delivery_engine import DeliveryEngine, outstanding
from hybridmq.broker.mm.storage import PartitionStorage

QUEUE = "queue:jobs"
MAX_REDELIVERIES = 2


@dataclass
class Held:
    body: bytes
    start: int  # the delivery's first offset
    offset: int
    attempt: int


@dataclass
class Consumer:
    link: ConsumerLink
    window: int
    held: list[Held] = field(default_factory=list)


class EngineModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = TemporaryDirectory()
        self.storage = PartitionStorage.open(Path(self.tmp.name) / "p", LogConfig(fsync="never"))
        self.writable = True
        self.rounds_asked = 0
        self.engine = DeliveryEngine(
            "p",
            self.storage,
            epoch=lambda: 0,
            writable=lambda: self.writable,
            append_internal=self.append_internal,
            round_needed=self.round_needed,
            max_redeliveries=MAX_REDELIVERIES,
        )
        self.engine.queue_state(QUEUE, 0)
        self.consumers: dict[str, Consumer] = {}
        self.names = itertools.count()
        self.bodies = itertools.count()
        self.produced: list[bytes] = []
        self.acked: set[bytes] = set()
        self.rejected: set[bytes] = set()
        self.sent_attempt: dict[bytes, int] = {}

    # -- what the partition host gives the engine ---------------------------------------------------
    def append_internal(
        self, dest: str, count: int, blob: bytes, flags: int = 0, extra: dict[str, Any] | None = None
    ) -> None:
        if not self.writable:
            raise CommitError(ErrorCode.NOT_PRIMARY, "fenced")
        base = store(self.storage, dest, count, blob, flags=flags, extra=extra)
        if ("q:" + dest) not in self.engine.states:  # as the host does for a queue's first batch
            self.engine.queue_state(dest, base)
        self.storage.visible_end = self.storage.end_offset  # committed at once here

    def round_needed(self) -> None:
        self.rounds_asked += 1

    # -- rules -----------------------------------------------------------------------------------------
    @rule(n=st.integers(1, 4))
    def produce(self, n: int) -> None:
        bodies = [f"m{next(self.bodies)}".encode() for _ in range(n)]
        store(self.storage, QUEUE, n, msgpack.packb(bodies))
        self.storage.visible_end = self.storage.end_offset
        self.produced.extend(bodies)

    @precondition(lambda self: len(self.consumers) < 3)
    @rule(window=st.integers(1, 5))
    def connect(self, window: int) -> None:
        key = f"c{next(self.names)}"
        consumer = Consumer(ConsumerLink(Wire(), key, window, 1 << 20), window)
        self.consumers[key] = consumer
        self.engine.attach(consumer.link, QUEUE, "exact", None)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.consumers)))
        self.engine.detach(self.consumers.pop(key).link)

    @rule()
    def pump(self) -> None:
        self.engine.pump()

    @rule(commits=st.booleans())
    def control_round(self, commits: bool) -> None:
        """The control committer's round: committed (send what is still outstanding) or failed
        (nothing sent, everything handed out meanwhile withdrawn uncounted)."""
        outbox = self.engine.take_outbox()
        self.engine.cursor_records()  # what the round writes
        if not commits or not self.writable:
            self.engine.withdraw(outbox + self.engine.take_outbox())
            return
        self.engine.withdraw([o for o in outbox if not outstanding(*o)])
        for state, link, frame in outbox:
            if outstanding(state, link, frame):
                self.receive(self.consumers[link.key], frame)

    @rule()
    def fence_or_unfence(self) -> None:
        self.writable = not self.writable

    @precondition(lambda self: any(c.held for c in self.consumers.values()))
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "reject"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        consumer = data.draw(st.sampled_from([c for c in self.consumers.values() if c.held]))
        held = data.draw(st.sampled_from(consumer.held))
        nack = how != "ack"
        taken = self.engine.settle(
            consumer.link, held.start, nack, held.attempt, held.offset, held.offset, requeue=how != "reject"
        )
        assert taken, f"{how} of {held}: refused, but the consumer holds it"
        consumer.held.remove(held)
        if how == "ack":
            self.acked.add(held.body)
        elif how == "reject" and self.writable:
            self.rejected.add(held.body)  # fenced: given back instead, to be moved later

    # -- the checker ------------------------------------------------------------------------------------
    def receive(self, consumer: Consumer, frame: dict[str, Any]) -> None:
        attempt = int(frame["rd"]) + 1
        for i, body in enumerate(msgpack.unpackb(frame["b"])):
            assert body not in self.acked, f"{body!r} was acknowledged and came back"
            assert body not in self.rejected, f"{body!r} was rejected and came back"
            assert attempt <= 1 + MAX_REDELIVERIES, f"{body!r} sent {attempt} times"
            # Never reused (a late ACK of an earlier hand-out must not settle this one). Not always
            # the next one: a hand-out counted before its consumer left, in a round that committed,
            # counts although it was never sent.
            assert attempt > self.sent_attempt.get(body, 0), (
                f"{body!r} sent with attempt {attempt} after {self.sent_attempt.get(body, 0)}"
            )
            for other in self.consumers.values():
                assert all(h.body != body for h in other.held), (
                    f"{body!r} sent while {other.link.key} holds it"
                )
            self.sent_attempt[body] = attempt
            consumer.held.append(Held(body, int(frame["o"]), int(frame["o"]) + i, attempt))

    @invariant()
    def windows_hold(self) -> None:
        for consumer in self.consumers.values():
            assert len(consumer.held) <= consumer.window, (
                f"{len(consumer.held)} held, window {consumer.window}"
            )

    def teardown(self) -> None:
        try:
            self.drain_and_check()
        finally:
            self.storage.close()
            self.tmp.cleanup()

    def drain_and_check(self) -> None:
        """The lease is back; the consumers attached now (one, if none is) acknowledge everything
        they get, without leaving: what a failed round withdrew must come to them again. Then
        ``_DMQ`` is read. Each message produced is acknowledged once or in ``_DMQ`` once."""
        self.writable = True
        if not self.consumers:
            self.connect(1000)
        for _ in range(500):
            self.engine.pump()
            self.control_round(commits=True)
            held = [(c, h) for c in self.consumers.values() for h in c.held]
            if not held:
                break
            for consumer, h in held:
                assert self.engine.settle(consumer.link, h.start, False, h.attempt, h.offset, h.offset)
                consumer.held.remove(h)
                self.acked.add(h.body)
        dead = self.read_all(DMQ_DESTINATION, "dmq")
        assert len(dead) == len(set(dead)), f"a message is in _DMQ twice: {sorted(dead)}"
        assert not self.acked & set(dead), f"acknowledged and in _DMQ: {sorted(self.acked & set(dead))}"
        lost = set(self.produced) - self.acked - set(dead)
        assert not lost, f"neither acknowledged nor in _DMQ, with consumers attached: {sorted(lost)}"
        assert self.rejected <= set(dead), f"rejected but not in _DMQ: {self.rejected - set(dead)}"

    def read_all(self, dest: str, key: str) -> list[bytes]:
        """Bodies a consumer acknowledging everything gets from ``dest`` until nothing comes."""
        link = ConsumerLink(Wire(), key, 1000, 1 << 24)
        self.engine.attach(link, dest, "exact", None)
        got: list[bytes] = []
        for _ in range(200):
            self.engine.pump()
            outbox = self.engine.take_outbox()
            self.engine.cursor_records()
            if not outbox:
                break
            self.engine.withdraw([o for o in outbox if not outstanding(*o)])  # of consumers gone
            for state, lk, frame in outbox:
                if not outstanding(state, lk, frame):
                    continue
                got.extend(msgpack.unpackb(frame["b"]))
                assert self.engine.settle(lk, int(frame["o"]), attempt=int(frame["rd"]) + 1)
        self.engine.detach(link)
        return got


EngineModel.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_delivery_engine = EngineModel.TestCase
