"""An affinity member that crashed processes nothing more, even when the cancellation is swallowed.

On Python 3.11 ``asyncio.wait_for`` returns a result that completed together with the cancellation
instead of raising ``CancelledError``. The member's consumers receive through ``wait_for``, so a
cancel alone could leave its processing loop running after ``crash()``: it went on processing and
acknowledging the keys an heir was adopting. The fake consumer here swallows every cancellation
that way, which is the worst case.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from hybridmq.client import affinity_group
from hybridmq.client.affinity_group import AffinityMember
from hybridmq.client.message import Message

TOPIC = "topic:t"


class SwallowingConsumer:
    """Hands out a message whenever it is cancelled, as a 3.11 ``wait_for`` racing a frame does."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.acked: list[int] = []
        self.aborted = False
        self.swallow = True
        self._n = 0

    async def receive(self, timeout: float | None = None) -> Message:  # noqa: ASYNC109
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if not self.swallow:
                raise
            # swallowed: the message that arrived meanwhile is returned instead
        self._n += 1
        return Message(self.topic, b"x", b"k", None, 0, "p0", self._n)

    def ack(self, msg: Message) -> None:
        self.acked.append(msg.offset)

    def abort(self) -> None:
        self.aborted = True

    async def close(self) -> None:
        self.aborted = True


class QuietProducer:
    def try_send(self, *args: Any, **kwargs: Any) -> None:
        pass

    def abort(self) -> None:
        pass


async def test_nothing_is_processed_after_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    consumers: list[SwallowingConsumer] = []

    async def connect_consumer(bootstrap: Any, topic: str, **options: Any) -> SwallowingConsumer:
        consumers.append(SwallowingConsumer(topic))
        return consumers[-1]

    async def connect_producer(bootstrap: Any, **options: Any) -> QuietProducer:
        return QuietProducer()

    monkeypatch.setattr(affinity_group.Consumer, "connect", connect_consumer)
    monkeypatch.setattr(affinity_group.Producer, "connect", connect_producer)
    processed: list[float] = []
    five = asyncio.Event()

    def handle(m: Message) -> None:
        processed.append(time.monotonic())
        if len(processed) >= 5:
            five.set()

    member = AffinityMember(None, TOPIC, "g", "m-a", ["m-a"], handle, lease_s=60)
    await member.start()
    await asyncio.wait_for(five.wait(), 10)
    started = time.monotonic()
    try:
        await member.crash()
        crashed_at = time.monotonic()
        count, acked = len(processed), [len(c.acked) for c in consumers]
        await asyncio.sleep(0.2)  # a loop still running would process (and acknowledge) more now
        after = len(processed), [len(c.acked) for c in consumers]
    finally:
        for c in consumers:
            c.swallow = False  # so that a loop left running ends with the test
        await member.crash()

    assert crashed_at - started < 1.0, "crash() waited for a loop that ignored its cancellation"
    assert after[0] == count, "processed after crash()"
    assert after[1] == acked, "acknowledged after crash()"
    assert all(c.aborted for c in consumers)
