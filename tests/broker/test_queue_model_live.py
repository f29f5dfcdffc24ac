"""The queue model's rules against real processes: random programs of produce (some with a TTL
that runs out), consumers with random windows connecting and closing, receive, ack, nack,
nack-without-requeue, and a kill -9 of the partition's primary MM (3 MMs, 2 replicas, the local
controller fails over). Hypothesis draws the programs; the run is bounded (a few programs of a
dozen steps; ``HYBRIDMQ_MODEL_EXAMPLES`` raises it for ``make adversarial``).

The checker is the test's own bookkeeping of what the application saw, not the broker's code:

* every message produced ends acknowledged or in ``queue:_DMQ``, exactly once, never both;
* a message whose acknowledgement was confirmed never comes back; one whose rejection was
  confirmed is in ``_DMQ``;
* a redelivery is flagged (``redelivered`` iff ``delivery_count`` > 1) and no message is handed out
  unflagged twice or more than ``1 + max_redeliveries`` times.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

MAX_REDELIVERIES = 2
EXAMPLES = max(2, int(os.environ.get("HYBRIDMQ_MODEL_EXAMPLES", "30")) // 10)
_runs = itertools.count()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("queue-model"),
        mms=3,
        replicas=2,
        fixed=1,
        on_demand_per_mm=0,
        mm_args=["--max-redeliveries", str(MAX_REDELIVERIES)],
    ) as c:
        yield c


@dataclass
class Seen:
    body: bytes
    redelivered: bool
    count: int


@dataclass
class Program:
    queue: str
    produced: set[bytes] = field(default_factory=set)
    confirmed_acks: set[bytes] = field(default_factory=set)
    confirmed_rejects: set[bytes] = field(default_factory=set)
    seen: list[Seen] = field(default_factory=list)
    consumers: list[Consumer] = field(default_factory=list)
    held: dict[int, list[Message]] = field(default_factory=dict)  # id(consumer) -> unsettled

    def check_delivery(self, message: Message) -> None:
        body = message.value
        assert body in self.produced, f"{body!r} was never produced"
        assert body not in self.confirmed_acks, f"{body!r} came back after its ack was confirmed"
        assert body not in self.confirmed_rejects, f"{body!r} came back after its rejection"
        assert message.redelivered == (message.delivery_count > 1), message
        assert message.delivery_count <= 1 + MAX_REDELIVERIES, message
        unflagged = [s for s in self.seen if s.body == body and not s.redelivered]
        assert not (unflagged and not message.redelivered), f"{body!r} delivered unflagged twice"
        self.seen.append(Seen(body, message.redelivered, message.delivery_count))


OPS = st.one_of(
    st.tuples(st.just("produce"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("connect"), st.integers(1, 5)),
    st.tuples(st.just("close"), st.integers(0, 3)),
    st.tuples(st.just("receive"), st.integers(0, 3)),
    st.tuples(st.sampled_from(["ack", "nack", "reject"]), st.integers(0, 3), st.integers(0, 9)),
    st.tuples(st.just("kill-primary")),
)


async def _settle(fut: asyncio.Future[Any] | None) -> bool:
    """Whether the broker confirmed an acknowledgement (or rejection)."""
    if fut is None:
        return False
    try:
        await asyncio.wait_for(fut, 10)
    except Exception:
        return False
    return True


async def _run(cluster: LocalCluster, ops: list[tuple[Any, ...]]) -> None:
    prog = Program(f"queue:model-{next(_runs)}")
    bodies = itertools.count()
    producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", key="model")
    killed: str | None = None
    try:
        for op in ops:
            kind = op[0]
            live = prog.consumers
            if kind == "produce":
                _, n, short_ttl = op
                sent = [f"{prog.queue}/{next(bodies)}".encode() for _ in range(n)]
                await asyncio.gather(
                    *(producer.send(prog.queue, b, ttl_ms=1 if short_ttl else 0) for b in sent)
                )
                prog.produced.update(sent)
            elif kind == "connect" and len(live) < 2:
                c = await Consumer.connect(cluster.bootstrap, prog.queue, auto_ack=False, window=op[1])
                live.append(c)
                prog.held[id(c)] = []
            elif kind == "close" and live:
                c = live.pop(op[1] % len(live))
                prog.held.pop(id(c))
                await c.close()
            elif kind == "receive" and live:
                c = live[op[1] % len(live)]
                with contextlib.suppress(TimeoutError):
                    for m in await c.receive_batch(timeout=0.5):
                        assert isinstance(m, Message)
                        prog.check_delivery(m)
                        prog.held[id(c)].append(m)
            elif kind in ("ack", "nack", "reject") and live:
                c = live[op[1] % len(live)]
                held = prog.held[id(c)]
                if not held:
                    continue
                m = held.pop(op[2] % len(held))
                if kind == "ack":
                    if await _settle(c.ack(m)):
                        prog.confirmed_acks.add(m.value)
                elif kind == "reject":
                    if await _settle(c.nack(m, requeue=False)):
                        prog.confirmed_rejects.add(m.value)
                else:
                    c.nack(m)
            elif kind == "kill-primary" and killed is None:
                killed = cluster.table()["local-fixed-0"].primary or ""
                cluster.kill_mm(killed, signal.SIGKILL)
                cluster.wait_until(
                    lambda gone=killed: cluster.table()["local-fixed-0"].primary not in (None, gone),
                    what="a new primary",
                )
        for c in prog.consumers:
            await c.close()
        await _drain_and_check(cluster, prog)
    finally:
        await producer.close()
        if killed:
            cluster.start_mm(killed)
            cluster.wait_in_sync()


async def _drain_and_check(cluster: LocalCluster, prog: Program) -> None:
    drain = await Consumer.connect(cluster.bootstrap, prog.queue, auto_ack=False, window=1000)
    try:
        while True:
            try:
                got = await drain.receive_batch(timeout=2.0)
            except TimeoutError:
                break
            for m in got:
                assert isinstance(m, Message)
                prog.check_delivery(m)
                assert await _settle(drain.ack(m)), f"the drain's ack of {m.value!r} was refused"
                prog.confirmed_acks.add(m.value)
    finally:
        await drain.close()
    dead: list[bytes] = []
    dmq = await Consumer.connect(cluster.bootstrap, "queue:_DMQ", auto_ack=True, window=1000)
    try:
        while True:
            try:
                got = await dmq.receive_batch(timeout=2.0)
            except TimeoutError:
                break
            dead.extend(
                m.value for m in got if isinstance(m, Message) and m.value.startswith(prog.queue.encode())
            )
    finally:
        await dmq.close()
    assert len(dead) == len(set(dead)), f"in _DMQ twice: {sorted(dead)}"
    assert not prog.confirmed_acks & set(dead), f"acknowledged and in _DMQ: {prog.confirmed_acks & set(dead)}"
    lost = prog.produced - prog.confirmed_acks - set(dead)
    assert not lost, f"neither acknowledged nor in _DMQ: {sorted(lost)}"
    assert prog.confirmed_rejects <= set(dead), f"rejected, not in _DMQ: {prog.confirmed_rejects - set(dead)}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=4, max_size=14))
def test_random_queue_programs_lose_nothing_on_real_brokers(
    live: LocalCluster, ops: list[tuple[Any, ...]]
) -> None:
    asyncio.run(_run(live, ops))


def test_nack_of_the_first_message_of_a_delivery_comes_back(live: LocalCluster, tmp_path: Path) -> None:
    """Five messages sent together reach one consumer in one delivery; it nacks the first and
    acknowledges the other four: the first comes back, flagged, count 2."""

    async def run() -> None:
        queue = "queue:nack-first"
        producer = await Producer.connect(live.bootstrap, partition_type="fixed", key="model", linger_ms=50)
        consumer = await Consumer.connect(live.bootstrap, queue, auto_ack=False, window=5)
        try:
            await asyncio.gather(*(producer.send(queue, f"m{i}".encode()) for i in range(5)))
            got: list[Message] = []
            while len(got) < 5:
                got.extend(m for m in await consumer.receive_batch(timeout=10) if isinstance(m, Message))
            assert len({m.batch_base for m in got}) == 1, "the five came in one delivery"
            first = min(got, key=lambda m: m.offset)
            consumer.nack(first)
            for m in got:
                if m is not first:
                    assert await _settle(consumer.ack(m))
            again = await consumer.receive(timeout=10)
            assert isinstance(again, Message)
            assert (again.value, again.redelivered, again.delivery_count) == (first.value, True, 2)
            assert await _settle(consumer.ack(again))
        finally:
            await consumer.close()
            await producer.close()

    asyncio.run(run())
