"""A consumer never hands its application a delivery the broker has taken back (real processes).

A slow consumer holds a window of deliveries its application has not asked for yet. When those
deliveries become void - the partition fails over (its primary frozen with SIGSTOP past its lease)
or the consumer's CM dies - the broker hands the batches out again, flagged, to whichever consumer
has credit. Handed to the slow consumer's application afterwards, the old copies would be repeats
without ``redelivered``. The checker is the test's own record of what each application received and
when: per message, every delivery after the first one must say it is a redelivery.
"""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_workload import until

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:revoked"
COUNT = 40

Received = tuple[str, int, bool, float]  # partition, offset, redelivered, when


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 MMs, 2 CMs, one fixed partition with 2 replicas."""
    with LocalCluster(tmp_path, mms=3, cms=2, replicas=2, fixed=1, on_demand_per_mm=0) as c:
        yield c


async def _produce(cluster: LocalCluster, partition: str) -> None:
    producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", partition=partition)
    for i in range(COUNT):
        await producer.send(QUEUE, f"m{i}".encode())  # one message a batch: one delivery each
    await producer.close()


async def _drain(consumer: Consumer, into: list[Received], quiet_s: float) -> None:
    """Receive and acknowledge until nothing came for ``quiet_s`` (or the connection ended)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            batch = await consumer.receive_batch(timeout=quiet_s)
        except (TimeoutError, ConnectionError):
            return
        for m in batch:
            assert isinstance(m, Message)
            into.append((m.partition, m.offset, m.redelivered, loop.time()))
            consumer.ack(m)


def unflagged_repeats(*received: list[Received]) -> list[tuple[tuple[str, int], list[Received]]]:
    per_message: dict[tuple[str, int], list[Received]] = defaultdict(list)
    for r in received:
        for d in r:
            per_message[(d[0], d[1])].append(d)
    bad = []
    for key, ds in per_message.items():
        ds.sort(key=lambda d: d[3])
        if any(not d[2] for d in ds[1:]):
            bad.append((key, ds))
    return bad


async def _slow_consumer(address: str) -> tuple[Consumer, list[Received]]:
    """A consumer whose client holds deliveries: its application takes one message and pauses."""
    slow = await Consumer.connect(address, QUEUE, auto_ack=False, window=COUNT)
    first = await slow.receive(timeout=20)
    assert isinstance(first, Message)
    received = [(first.partition, first.offset, first.redelivered, asyncio.get_running_loop().time())]
    await asyncio.sleep(1.0)  # the rest of its window arrives in its client
    return slow, received


async def test_deliveries_revoked_by_a_failover_are_not_handed_out(cluster: LocalCluster) -> None:
    fixed = cluster.table()["local-fixed-0"]
    await _produce(cluster, fixed.name)
    slow, slow_got = await _slow_consumer(cluster.bootstrap)
    fast = await Consumer.connect(cluster.bootstrap, QUEUE, auto_ack=False)  # nothing left for it
    fast_got: list[Received] = []
    victim = fixed.primary or ""
    cluster.kill_mm(victim, signal.SIGSTOP)
    try:
        await until(lambda: cluster.table()[fixed.name].epoch > fixed.epoch, 20, "the failover")
        await _drain(fast, fast_got, quiet_s=3.0)  # the new primary shares the batches out again
    finally:
        cluster.kill_mm(victim, signal.SIGCONT)
    await _drain(slow, slow_got, quiet_s=3.0)  # now the slow application goes on
    assert fast_got and all(r[2] for r in fast_got), "the new primary's deliveries are all repeats"
    bad = unflagged_repeats(slow_got, fast_got)
    assert not bad, f"{len(bad)} messages delivered again without the redelivered flag: {bad[:3]}"
    assert len({r[1] for r in slow_got + fast_got}) == COUNT, "every message was received"
    await slow.close()
    await fast.close()


async def test_deliveries_of_a_closed_connection_are_not_handed_out(cluster: LocalCluster) -> None:
    fixed = cluster.table()["local-fixed-0"]
    await _produce(cluster, fixed.name)
    cm0, cm1 = cluster.bootstraps.split(",")
    slow, slow_got = await _slow_consumer(cm0)
    cluster.kill_cm("cm-0", signal.SIGKILL)
    fast = await Consumer.connect(cm1, QUEUE, auto_ack=False)
    fast_got: list[Received] = []
    await _drain(fast, fast_got, quiet_s=3.0)
    await _drain(slow, slow_got, quiet_s=1.0)  # its connection is gone: nothing more to hand out
    assert len({r[1] for r in fast_got}) == COUNT, "every batch came again through the other CM"
    bad = unflagged_repeats(slow_got, fast_got)
    assert not bad, f"{len(bad)} messages delivered again without the redelivered flag: {bad[:3]}"
    await fast.close()
    await slow.close()


async def test_a_reconnected_consumer_hands_out_nothing_its_lost_connection_delivered(
    cluster: LocalCluster,
) -> None:
    """The slow consumer's CM dies and it fails over to the other CM: the deliveries its client
    still held came through the dead connection, were given back and go to the others again."""
    fixed = cluster.table()["local-fixed-0"]
    await _produce(cluster, fixed.name)
    cm0, cm1 = cluster.bootstraps.split(",")
    slow, slow_got = await _slow_consumer(f"{cm0},{cm1}")
    fast = await Consumer.connect(cm1, QUEUE, auto_ack=False)  # nothing left for it, yet
    cluster.kill_cm("cm-0", signal.SIGKILL)
    await until(lambda: slow.reconnects >= 1, 20, "the consumer's failover to the other CM")
    fast_got: list[Received] = []
    await _drain(fast, fast_got, quiet_s=3.0)
    await _drain(slow, slow_got, quiet_s=1.0)  # its application goes on after the failover
    assert slow.reconnects == 1 and slow.node == "cm-1", (slow.reconnects, slow.node)
    assert len({r[1] for r in slow_got + fast_got}) == COUNT, "every message was received"
    bad = unflagged_repeats(slow_got, fast_got)
    assert not bad, f"{len(bad)} messages delivered again without the redelivered flag: {bad[:3]}"
    await fast.close()
    await slow.close()
