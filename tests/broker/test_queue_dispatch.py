"""Queues share work per message: competing consumers, exact prefetch windows, per-message
acknowledgement, rejection and redelivery (real CM and MM processes).

Each test keeps its own books of what each consumer received and acknowledged (message ids and
values), and judges by them alone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import msgpack
import pytest

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.client import BlockingConsumer, Consumer, Message, Producer
from hybridmq.client.connection import connect
from hybridmq.local.runner import LocalCluster
from hybridmq.protocol import RemoteError


@pytest.fixture(scope="module")
def one_mm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """1 CM + 1 MM, as a new user's ``hybridmq local --mms 1``; three redeliveries at most."""
    c = LocalCluster(tmp_path_factory.mktemp("dispatch"), mms=1, mm_args=["--max-redeliveries", "3"])
    with c:
        yield c


class Books:
    """What one consumer received and acknowledged, and the most it ever held unacknowledged."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.received: list[bytes] = []
        self.holding: set[str] = set()
        self.max_holding = 0

    def got(self, m: Message) -> None:
        self.received.append(m.value)
        self.holding.add(m.id)
        self.max_holding = max(self.max_holding, len(self.holding))

    def acked(self, m: Message) -> None:
        self.holding.discard(m.id)


async def _work(c: Consumer, books: Books, delay_s: float, stop: asyncio.Event, got: asyncio.Event) -> None:
    """Receive the next message (or several at once: the consumer's whole prefetched window) and
    acknowledge each once "processed"."""
    while not stop.is_set():
        try:
            batch = await c.receive_batch(timeout=0.2)
        except TimeoutError:
            continue
        for m in batch:
            assert isinstance(m, Message)
            books.got(m)
        got.set()
        for m in batch:
            assert isinstance(m, Message)
            if delay_s:
                await asyncio.sleep(delay_s)
            c.ack(m)
            books.acked(m)


async def test_competing_consumers_share_batched_sends_within_their_windows(one_mm: LocalCluster) -> None:
    """Sent concurrently, the 200 messages travel in a few large batches; the fast consumer still
    gets most of them and neither ever holds more than its window of 5."""
    queue = "queue:jobs"
    slow_c = await Consumer.connect(one_mm.bootstrap, queue, window=5, auto_ack=False)
    fast_c = await Consumer.connect(one_mm.bootstrap, queue, window=5, auto_ack=False)
    slow, fast = Books(5), Books(5)
    stop, got = asyncio.Event(), asyncio.Event()
    workers = [
        # 0.25 s per message: the slow one stays slow beside a fast one starved by a loaded machine.
        asyncio.create_task(_work(slow_c, slow, 0.25, stop, got)),
        asyncio.create_task(_work(fast_c, fast, 0.0, stop, got)),
    ]
    sent = [f"job-{i}".encode() for i in range(200)]
    async with await Producer.connect(one_mm.bootstrap, linger_ms=20) as p:
        acks = await asyncio.gather(*(p.send(queue, v) for v in sent))
    assert len({(a.partition, a.offset) for a in acks}) == 200
    deadline = time.monotonic() + 60
    while len(slow.received) + len(fast.received) < 200 and time.monotonic() < deadline:
        got.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(got.wait(), 1)
    await asyncio.sleep(0.3)  # nothing more may come
    stop.set()
    await asyncio.gather(*workers)
    await slow_c.commit()
    await fast_c.commit()
    await slow_c.close()
    await fast_c.close()
    assert sorted(slow.received + fast.received) == sorted(sent)  # each once, none lost
    assert len(fast.received) >= 140, (len(slow.received), len(fast.received))
    assert slow.max_holding <= 5 and fast.max_holding <= 5, (slow.max_holding, fast.max_holding)


async def _dmq_messages(bootstrap: str, want: int, quiet_s: float = 1.5) -> list[Message]:
    """What ``queue:_DMQ`` holds: ``want`` messages, then ``quiet_s`` seconds more for extras."""
    got: list[Message] = []
    async with await Consumer.connect(bootstrap, "queue:_DMQ") as dmq:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                m = await dmq.receive(timeout=quiet_s if len(got) >= want else 1)
            except TimeoutError:
                if len(got) >= want:
                    break
                continue
            assert isinstance(m, Message)
            got.append(m)
    return got


async def test_poison_message_alone_goes_to_dmq_after_the_redeliveries(one_mm: LocalCluster) -> None:
    """1,000 messages in large batches; one of them fails every time it is processed. It is
    delivered 1 + 3 (``--max-redeliveries``) times and then alone reaches ``queue:_DMQ``; the other
    999 are each processed once, never redelivered, in the order they were sent."""
    queue = "queue:poisoned"
    sent = [f"m-{i}".encode() for i in range(1000)]
    poison = sent[517]
    async with await Producer.connect(one_mm.bootstrap, linger_ms=20) as p:
        await asyncio.gather(*(p.send(queue, v) for v in sent))
    processed: list[bytes] = []
    poison_counts: list[int] = []
    flagged: list[bytes] = []
    async with await Consumer.connect(one_mm.bootstrap, queue, window=50, auto_ack=False) as c:
        while True:
            try:
                m = await c.receive(timeout=3)
            except TimeoutError:
                break
            assert isinstance(m, Message)
            if m.value == poison:
                poison_counts.append(m.delivery_count)
                c.nack(m)  # processing failed: give it back
                continue
            if m.redelivered:
                flagged.append(m.value)
            processed.append(m.value)
            c.ack(m)
        await c.commit()
    assert poison_counts == [1, 2, 3, 4]
    # 999, each once, in the order they were sent (one producer, one consumer)
    assert processed == [v for v in sent if v != poison]
    assert not flagged
    dead = await _dmq_messages(one_mm.bootstrap, 1)
    assert [m.value for m in dead] == [poison]
    assert dead[0].attributes["orig"] == queue
    assert "redeliveries" in dead[0].attributes["reason"]


async def test_rejected_message_goes_to_dmq_alone_and_the_rest_of_its_delivery_is_redelivered(
    one_mm: LocalCluster,
) -> None:
    """One delivery of five: the consumer acknowledges two, rejects one (``requeue=False``) and
    goes away holding two; exactly those two come again, flagged, to another consumer."""
    queue = "queue:reject"
    sent = [f"r-{i}".encode() for i in range(5)]
    async with await Producer.connect(one_mm.bootstrap, linger_ms=50) as p:
        await asyncio.gather(*(p.send(queue, v) for v in sent))
    first = await Consumer.connect(one_mm.bootstrap, queue, window=5, auto_ack=False)
    got = await first.receive_batch(timeout=10)
    while len(got) < 5:
        got += await first.receive_batch(timeout=10)
    msgs = {m.value: m for m in got if isinstance(m, Message)}
    assert sorted(msgs) == sent
    for v in (b"r-0", b"r-3"):
        confirmed = first.ack(msgs[v])
        assert confirmed is not None
        await confirmed
    rejected = first.nack(msgs[b"r-2"], requeue=False)
    assert rejected is not None
    await rejected
    await first.close()  # holding r-1 and r-4
    again: list[Message] = []
    async with await Consumer.connect(one_mm.bootstrap, queue, auto_ack=False) as second:
        with pytest.raises(TimeoutError):
            while True:
                m = await second.receive(timeout=2)
                assert isinstance(m, Message)
                again.append(m)
                second.ack(m)
        await second.commit()
    assert sorted(m.value for m in again) == [b"r-1", b"r-4"]
    assert all(m.redelivered and m.delivery_count == 2 for m in again)
    dead = await _dmq_messages(one_mm.bootstrap, 1)
    assert [(m.value, m.attributes["orig"], m.attributes["reason"]) for m in dead] == [
        (b"r-2", queue, "rejected by a consumer")
    ]


async def test_bad_records_and_bad_acknowledgements_are_refused_clearly_and_lose_nothing(
    one_mm: LocalCluster,
) -> None:
    """A queue hands out records one by one, so a PRODUCE whose blob does not hold the records it
    announces is refused (nothing stored); an ACK naming records outside its delivery is refused
    and the message stays outstanding."""
    queue = "queue:badinput"
    conn, _ = await connect(one_mm.bootstrap)
    runner = asyncio.create_task(conn.run())
    try:
        opened = await conn.request({"t": FrameType.OPEN_PRODUCER, "ptype": "fixed", "key": "bad"})
        frame = {"t": FrameType.PRODUCE, "p": opened["partition"], "d": queue, "f": 0, "x": 0}
        good = msgpack.packb([[b"ok", None, None, 0]])
        for blob, n in ((b"\xc1\xc1", 1), (good, 2), (msgpack.packb({"k": 1}), 1)):
            with pytest.raises(RemoteError) as refused:
                await conn.request({**frame, "n": n, "b": blob})
            assert refused.value.code == ErrorCode.INVALID_REQUEST and "records" in refused.value.msg
        await conn.request({**frame, "n": 1, "b": good})
    finally:
        conn.close()
        runner.cancel()

    async with await Consumer.connect(one_mm.bootstrap, queue, auto_ack=False) as c:
        m = await c.receive(timeout=10)
        assert isinstance(m, Message) and m.value == b"ok"
        ack = {"t": FrameType.ACK, "s": c.sub, "p": m.partition, "o": m.batch_base, "rd": 0}
        with pytest.raises(RemoteError) as bad:
            await c.session.conn.request({**ack, "a": "all"})
        assert bad.value.code == ErrorCode.INVALID_REQUEST
        with pytest.raises(RemoteError) as outside:
            await c.session.conn.request({**ack, "a": [m.offset + 1, m.offset + 1]})
        assert outside.value.code == ErrorCode.STALE_DELIVERY
        confirmed = c.ack(m)  # still outstanding: acknowledged now
        assert confirmed is not None
        await confirmed
    async with await Consumer.connect(one_mm.bootstrap, queue) as again:
        with pytest.raises(TimeoutError):
            await again.receive(timeout=1.5)


async def test_blocking_consumer_acknowledges_and_rejects_per_message(one_mm: LocalCluster) -> None:
    """The synchronous client: of one delivered batch, one message is acknowledged and one rejected;
    only the rejected one reaches ``queue:_DMQ``, nothing comes back to the queue."""
    queue = "queue:blocking"
    async with await Producer.connect(one_mm.bootstrap, linger_ms=50) as p:
        await asyncio.gather(p.send(queue, b"good"), p.send(queue, b"bad"))
    with BlockingConsumer(one_mm.bootstrap, queue, auto_ack=False) as c:
        got = {}
        for _ in range(2):
            m = c.receive(timeout=10)
            assert isinstance(m, Message)
            got[m.value] = m
        assert got[b"good"].batch_base == got[b"bad"].batch_base  # one delivery
        c.ack(got[b"good"])
        c.nack(got[b"bad"], requeue=False)
        c.commit()  # both committed
    async with await Consumer.connect(one_mm.bootstrap, queue) as again:
        with pytest.raises(TimeoutError):
            await again.receive(timeout=1.5)
    dead = await _dmq_messages(one_mm.bootstrap, 1)
    assert [(m.value, m.attributes["orig"]) for m in dead] == [(b"bad", queue)]
