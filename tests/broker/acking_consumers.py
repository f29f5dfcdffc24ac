"""Queue and durable consumers that acknowledge what they receive, and the bookkeeping the delivery
tests check: every delivery the application got (position, ``redelivered``, ``delivery_count``,
when, value) and when the broker confirmed each message's acknowledgement."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from hybridmq.client import Consumer, Message

Position = tuple[str, int]  # (partition, offset)


@dataclass(frozen=True)
class Received:
    partition: str
    offset: int
    redelivered: bool
    delivery_count: int
    when: float
    value: bytes


@dataclass
class AckingConsumer:
    """Receives delivery by delivery, "processes" it for ``hold_s``, acknowledges each message."""

    name: str
    consumer: Consumer
    hold_s: float = 0.002
    received: list[Received] = field(default_factory=list)
    confirmed: dict[Position, float] = field(default_factory=dict)  # -> when it was confirmed
    # (holding, release): hold the next delivery unacknowledged until the test releases it
    pause_once: tuple[asyncio.Event, asyncio.Event] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                batch = await self.consumer.receive_batch(timeout=0.5)
            except TimeoutError:
                continue
            except ConnectionError:
                return
            now = loop.time()
            for m in batch:
                assert isinstance(m, Message)
                self.received.append(
                    Received(m.partition, m.offset, m.redelivered, m.delivery_count, now, m.value)
                )
            await asyncio.sleep(self.hold_s)
            if self.pause_once is not None:
                (holding, release), self.pause_once = self.pause_once, None
                holding.set()
                await release.wait()
            for m in batch:
                assert isinstance(m, Message)
                confirmation = self.consumer.ack(m)
                if confirmation is None:
                    continue
                confirmation.add_done_callback(
                    lambda f, key=(m.partition, m.offset): (
                        None
                        if f.cancelled() or f.exception() is not None
                        else self.confirmed.setdefault(key, loop.time())
                    )
                )


def first_confirmed(consumers: list[AckingConsumer]) -> dict[Position, float]:
    """When each message's acknowledgement was first confirmed, over all the consumers."""
    confirmed: dict[Position, float] = {}
    for c in consumers:
        for key, t in c.confirmed.items():
            confirmed[key] = min(t, confirmed.get(key, t))
    return confirmed


def per_message(consumers: list[AckingConsumer]) -> dict[Position, list[tuple[Received, str]]]:
    """Every delivery of each message, with the name of the consumer that got it."""
    deliveries: dict[Position, list[tuple[Received, str]]] = defaultdict(list)
    for c in consumers:
        for r in c.received:
            deliveries[(r.partition, r.offset)].append((r, c.name))
    return deliveries
