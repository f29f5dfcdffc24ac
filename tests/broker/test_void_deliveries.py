"""Deliveries an MM gave back are never handed out late: no acknowledged message comes back, and
every repeat is flagged, when an MM's connections to the CM end (real processes).

One consumer of a queue acknowledges each message at once; another holds each batch for a while
before acknowledging it, so its client always queues deliveries it has not handed out yet. When
the connection from an MM ends, the MM gives back what it delivered on it and hands it out again,
flagged, possibly to the other consumer, which acknowledges it; a copy the slow consumer still
queued and handed out later would be a repeat after the acknowledgement, unflagged. Two ways for
that connection to end:

* a primary-balancing move: the CM drops its link to the MM that gives up a primary, while that MM
  keeps leading another partition at the same epoch (no failover to revoke its deliveries by);
* a frozen (SIGSTOP) MM leading an on-demand partition, continued after its partition failed over.

The checker is the test's own bookkeeping: every delivery the consumers received (position,
``redelivered``, when) and when the broker confirmed each acknowledgement.
"""

from __future__ import annotations

import asyncio
import signal

from acking_consumers import AckingConsumer, first_confirmed, per_message

from hybridmq.client import ClientError, Consumer, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:void"


class Load:
    """Producers writing to the queue (fixed: one per partition; else one on-demand producer that
    moves when its partition drains) and the two consumers, until ``finish``."""

    def __init__(self, ackers: list[AckingConsumer], producers: list[Producer]) -> None:
        self.ackers = ackers
        self.producers = producers
        self.partitions: list[str] = []  # of each acknowledged send
        self.stop_producing, self.stop_consuming = asyncio.Event(), asyncio.Event()
        self.tasks = [asyncio.create_task(a.run(self.stop_consuming)) for a in ackers]
        self.producing = [asyncio.create_task(self._produce(p, i)) for i, p in enumerate(producers)]

    @classmethod
    async def start(cls, bootstrap: str, partitions: list[str] | None = None) -> Load:
        ackers = [
            AckingConsumer("quick", await Consumer.connect(bootstrap, QUEUE, auto_ack=False), 0.0),
            AckingConsumer(
                "holding", await Consumer.connect(bootstrap, QUEUE, auto_ack=False, window=50), 3.0
            ),
        ]
        if partitions is None:
            producers = [await Producer.connect(bootstrap, linger_ms=1, delivery_timeout=120)]
        else:
            producers = [
                await Producer.connect(
                    bootstrap, partition_type="fixed", partition=p, linger_ms=1, delivery_timeout=120
                )
                for p in partitions
            ]
        return cls(ackers, producers)

    async def _produce(self, producer: Producer, i: int) -> None:
        n = 0
        while not self.stop_producing.is_set():
            try:
                ack = await producer.send(QUEUE, f"{i}:{n}".encode())
                self.partitions.append(ack.partition)
            except ClientError:
                pass
            n += 1
            await asyncio.sleep(0.01)

    async def finish(self) -> dict[str, int]:
        self.stop_producing.set()
        await asyncio.gather(*self.producing)
        for p in self.producers:
            await p.close()
        await asyncio.sleep(12.0)  # the holding consumer works through what it has
        self.stop_consuming.set()
        await asyncio.gather(*self.tasks)
        for a in self.ackers:
            await a.consumer.close()
        return check(self.ackers)


def check(ackers: list[AckingConsumer]) -> dict[str, int]:
    confirmed = first_confirmed(ackers)
    deliveries = per_message(ackers)
    after_ack = {
        k: d for k, d in deliveries.items() if k in confirmed and any(r.when > confirmed[k] for r, _ in d)
    }
    unflagged = {k: d for k, d in deliveries.items() if sum(1 for r, _ in d if not r.redelivered) > 1}
    assert len(deliveries) >= 20, f"only {len(deliveries)} messages delivered"
    assert not after_ack, (
        f"{len(after_ack)} acknowledged messages delivered again: {list(after_ack.items())[:3]}"
    )
    assert not unflagged, (
        f"{len(unflagged)} messages repeated without the flag: {list(unflagged.items())[:3]}"
    )
    return {"messages": len(deliveries), "redelivered": sum(len(d) - 1 for d in deliveries.values())}


async def test_deliveries_given_back_by_a_balancing_move_are_not_handed_out_late(
    two_fixed: LocalCluster,
) -> None:
    cluster = two_fixed
    await asyncio.to_thread(cluster.wait_in_sync)
    names = sorted(a.name for a in cluster.partitions())
    load = await Load.start(cluster.bootstrap, names)
    try:
        await asyncio.sleep(2.0)
        cluster.kill_mm("mm-1")  # its partition fails over to mm-0, which then leads both
        await asyncio.to_thread(
            cluster.wait_until, lambda: {a.primary for a in cluster.partitions()} == {"mm-0"}, 60, "failover"
        )
        cluster.start_mm("mm-1")
        # Once mm-1 is in sync again the balancer hands one primary back to it: the CM drops its
        # link to mm-0, which keeps leading the other partition at the same epoch.
        await asyncio.to_thread(
            cluster.wait_until,
            lambda: {a.primary for a in cluster.partitions()} == {"mm-0", "mm-1"},
            90,
            "the balancing move",
        )
        await asyncio.sleep(3.0)
    finally:
        figures = await load.finish()
    assert figures["redelivered"] > 0, "nothing was given back: the test did not test"


async def test_frozen_on_demand_primary_never_redelivers_acknowledged_messages(
    on_demand: LocalCluster,
) -> None:
    cluster = on_demand
    await asyncio.to_thread(cluster.wait_in_sync)
    load = await Load.start(cluster.bootstrap)
    try:
        for _ in range(3):
            await asyncio.sleep(2.0)
            current = load.partitions[-1] if load.partitions else cluster.partitions()[0].name
            victim = cluster.table()[current].primary or "mm-0"
            cluster.kill_mm(victim, signal.SIGSTOP)
            await asyncio.sleep(2.5)  # past the 1 s lease: the partition fails over and drains
            cluster.kill_mm(victim, signal.SIGCONT)
            await asyncio.to_thread(cluster.wait_in_sync, 90)
        await asyncio.sleep(2.0)
    finally:
        await load.finish()
