"""Killing a CM under load: its clients move to another CM within 2 s; no acked loss, no duplicate."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator

import pytest

from hybridmq.client import Consumer, Producer
from hybridmq.client.directory import make_strategy
from hybridmq.client.message import Ack, Message
from hybridmq.local.runner import LocalCluster

TOPIC = "topic:fo.load"
PRODUCERS = 3
PER_PRODUCER = 1500


@pytest.fixture(scope="module")
def cms3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("cmfo"), mms=2, cms=3, fixed_per_mm=1, on_demand_per_mm=1)
    with c:
        yield c


async def produce(p: Producer, i: int, acks: list[Ack], stop_at: int) -> None:
    futs = []
    for j in range(stop_at):
        futs.append(asyncio.ensure_future(p.send(TOPIC, f"{i}-{j}".encode(), key=f"p{i}")))
        if j % 25 == 24:
            await asyncio.sleep(0.02)
    acks.extend(await asyncio.gather(*futs))


async def collect(
    c: Consumer,
    out: list[str],
    expected: int,
    timeout_s: float,
    slow: bool,
    how: list[tuple[str, int, bool, int]] | None = None,
) -> None:
    """Receive into ``out`` (values); ``how``: each message's partition, offset, redelivered flag
    and the client's reconnection count when it came (what a failure report needs)."""
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        try:
            m = await c.receive(timeout=0.5)
        except TimeoutError:
            continue
        assert isinstance(m, Message)
        out.append(m.value.decode())
        if how is not None:
            how.append((m.partition, m.offset, m.redelivered, c.reconnects))
        if slow and len(out) % 50 == 0:
            await asyncio.sleep(0.03)  # lags behind: deliveries in flight when its CM dies


async def wait_moved(client: Producer | Consumer, dead: str, t0: float) -> float:
    while client.node == dead or client.reconnects == 0:
        await asyncio.sleep(0.005)
        assert time.monotonic() - t0 < 10, "client never reconnected"
    return time.monotonic() - t0


async def test_kill_cm_under_load(cms3: LocalCluster) -> None:
    # one de-centralized strategy for the process: clients go round-robin over the 3 CMs
    rr = make_strategy(cms3.bootstraps, "round-robin")
    consumers = [
        await Consumer.connect(cms3.bootstraps, TOPIC, durable=f"fo-{k}", strategy=rr) for k in range(3)
    ]
    producers = [
        await Producer.connect(cms3.bootstraps, strategy=rr, partition_type="fixed", key=f"p{i}")
        for i in range(PRODUCERS)
    ]
    clients: list[Producer | Consumer] = [*consumers, *producers]
    victim = consumers[0].node
    on_victim = [c for c in clients if c.node == victim]
    assert {type(c) for c in on_victim} == {Producer, Consumer}
    total = PRODUCERS * PER_PRODUCER
    received: list[list[str]] = [[] for _ in consumers]
    how: list[list[tuple[str, int, bool, int]]] = [[] for _ in consumers]
    readers = [
        asyncio.ensure_future(collect(c, out, total, 60, slow=k == 0, how=how[k]))
        for k, (c, out) in enumerate(zip(consumers, received, strict=True))
    ]
    acks: list[Ack] = []
    writers = [asyncio.ensure_future(produce(p, i, acks, PER_PRODUCER)) for i, p in enumerate(producers)]
    await asyncio.sleep(0.6)
    cms3.kill_cm(victim)
    t0 = time.monotonic()
    moved = await asyncio.gather(*(wait_moved(c, victim, t0) for c in on_victim))
    print(f"CM {victim} killed: {len(on_victim)} clients moved in {[round(m, 3) for m in moved]} s")
    assert max(moved) < 2.0
    await asyncio.gather(*writers)
    await asyncio.gather(*readers)
    assert len(acks) == total  # every send acknowledged
    expected = sorted(f"{i}-{j}" for i in range(PRODUCERS) for j in range(PER_PRODUCER))
    for k, got in enumerate(received):
        if len(got) != len(set(got)):
            # (partition, offset, redelivered, reconnections) of each copy: a repeat at the same
            # offset is a redelivery the client should have dropped; at another, a stored duplicate.
            copies: dict[str, list[tuple[str, int, bool, int]]] = {}
            for value, seen in zip(got, how[k], strict=True):
                copies.setdefault(value, []).append(seen)
            repeated = {v: c for v, c in copies.items() if len(c) > 1}
            on = "its CM was killed" if consumers[k] in on_victim else "its CM stayed"
            raise AssertionError(
                f"consumer {k} ({on}) got {len(repeated)} messages more than once; the first: "
                f"{dict(list(repeated.items())[:5])}"
            )
        assert sorted(got) == expected, f"lost {len(set(expected) - set(got))}"
        for i in range(PRODUCERS):  # per-producer order holds across the failover
            mine = [int(v.split("-")[1]) for v in got if v.startswith(f"{i}-")]
            assert mine == sorted(mine)
    dropped = [c.duplicates_dropped for c in consumers]
    resent = [p.resent for p in producers]
    print(f"duplicates dropped by the consumers: {dropped}; batches resent by the producers: {resent}")
    for p in producers:
        await p.close()
    for c in consumers:
        await c.close()
    assert all(c.node != victim for c in clients)


async def test_hung_cm_is_left_by_keepalive(cms3: LocalCluster) -> None:
    """A stopped CM (SIGSTOP: sockets stay open) is detected by the keepalive PING and left."""
    rr = make_strategy(cms3.bootstraps, "round-robin")
    opts = {"strategy": rr, "keepalive_s": 0.3, "keepalive_timeout_s": 1.0}
    consumer = await Consumer.connect(cms3.bootstraps, "topic:fo.hung", durable="hung", **opts)  # type: ignore[arg-type]
    producer = await Producer.connect(cms3.bootstraps, partition_type="fixed", key="h", **opts)
    victim = consumer.node
    got: list[str] = []
    reader = asyncio.ensure_future(collect(consumer, got, 400, 30, slow=False))
    writer = asyncio.ensure_future(produce_n(producer, 400))
    await asyncio.sleep(0.5)
    cms3.kill_cm(victim, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        moved = await wait_moved(consumer, victim, t0)
        print(f"CM {victim} stopped: consumer moved after {moved:.2f} s")
        assert moved < 5.0  # 0.3 s PING period + 1 s PING timeout + reconnect, on a loaded box
        await writer
        await reader
    finally:
        cms3.kill_cm(victim, signal.SIGCONT)
    assert sorted(got) == sorted(f"h-{j}" for j in range(400)) and len(got) == len(set(got))
    await producer.close()
    await consumer.close()


async def produce_n(p: Producer, n: int) -> None:
    futs = []
    for j in range(n):
        futs.append(asyncio.ensure_future(p.send("topic:fo.hung", f"h-{j}".encode(), key="h")))
        await asyncio.sleep(0.005)
    await asyncio.gather(*futs)


@pytest.mark.parametrize("dest", ["topic:fo.nack", "queue:fo.nack"])
async def test_a_message_given_back_after_a_failover_comes_again(cms3: LocalCluster, dest: str) -> None:
    """After its CM died the consumer drops the repeats of what it had handed out; a message the
    application gives back after that (NACK) must come again, not be taken for such a repeat."""
    rr = make_strategy(cms3.bootstraps, "round-robin")
    durable = "nackback" if dest.startswith("topic:") else None
    consumer = await Consumer.connect(cms3.bootstraps, dest, durable=durable, auto_ack=False, strategy=rr)
    producer = await Producer.connect(cms3.bootstraps, strategy=rr, partition_type="fixed", key="n")
    sent = [f"n-{j}" for j in range(20)]
    await asyncio.gather(*(producer.send(dest, v.encode(), key="n") for v in sent))
    before = [await consumer.receive(timeout=10) for _ in range(5)]
    for m in before:
        consumer.ack(m)
    await consumer.commit()
    victim = consumer.node
    cms3.kill_cm(victim)
    try:
        await wait_moved(consumer, victim, time.monotonic())
        handed: list[tuple[str, bool]] = []  # (value, flagged redelivered) as the application got them
        nacked: str | None = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            values = [v for v, _ in handed]
            if nacked is not None and values.count(nacked) == 2 and set(values) >= set(sent[5:]):
                break
            try:
                m = await consumer.receive(timeout=0.5)
            except TimeoutError:
                continue
            assert isinstance(m, Message)
            handed.append((m.value.decode(), m.redelivered))
            if nacked is None:
                nacked = m.value.decode()
                consumer.nack(m)
            else:
                consumer.ack(m)
        await consumer.commit()
    finally:
        cms3.start_cm(victim)
    values = [v for v, _ in handed]
    assert nacked is not None and values.count(nacked) == 2, f"what was given back never came again: {handed}"
    assert (nacked, True) in handed  # its second coming is flagged
    assert sorted(set(values)) == sorted(sent[5:])
    assert len(values) == len(sent) - 5 + 1  # nothing else twice
    await producer.close()
    await consumer.close()
