"""A client session moves on past a CM that hangs up during the handshake (real CM processes).

A CM that is shutting down (or a port taken over by something else) may accept the connection and
close it before answering HELLO. That is a connection failure like any other: the next CM of the
bootstrap list is tried, when connecting and when a lost session reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:handshake"


@pytest.fixture
def two_cms(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, mms=1, cms=2) as c:
        yield c


async def _hanging_up() -> tuple[asyncio.Server, str]:
    """A listener that reads the HELLO and closes the connection without an answer."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.read(4096)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_cm_hanging_up_in_the_handshake_is_skipped(two_cms: LocalCluster) -> None:
    cm0, cm1 = two_cms.bootstraps.split(",")
    server, hangs_up = await _hanging_up()
    try:
        async with await Producer.connect(f"{hangs_up},{cm1}", partition_type="fixed", key="a") as p:
            assert p.node == "cm-1"
            await p.send(QUEUE, b"first")
        p = await Producer.connect(f"{cm0},{hangs_up},{cm1}", partition_type="fixed", key="a")
        assert p.node == "cm-0"
        two_cms.kill_cm("cm-0")
        await asyncio.wait_for(p.send(QUEUE, b"second"), 30)  # on the next CM that answers
        assert (p.node, p.reconnects) == ("cm-1", 1)
        await p.close()
    finally:
        server.close()
    consumer = await Consumer.connect(cm1, QUEUE)
    got = [await consumer.receive(timeout=10) for _ in range(2)]
    assert [m.value for m in got if isinstance(m, Message)] == [b"first", b"second"]
    await consumer.close()


async def test_awaited_sends_cost_no_task_of_their_own(cluster: LocalCluster) -> None:
    """1,000 sends awaited at once: the producer adds (almost) no tasks to the application's 1,000,
    and every send gets its own offset."""
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed", key="cost") as p:
        before = len(asyncio.all_tasks())
        sends = [asyncio.create_task(p.send("topic:cost", b"%d" % i)) for i in range(1000)]
        await asyncio.sleep(0)  # every send has appended its record and waits for its batch
        added = len(asyncio.all_tasks()) - before - len(sends)
        acks = await asyncio.gather(*sends)
    assert added <= 2, added
    offsets = sorted(a.offset for a in acks)
    assert offsets == list(range(offsets[0], offsets[0] + 1000)), offsets[:5]


@pytest.mark.parametrize("linger_ms", [0, 200])
async def test_a_cancelled_send_cancels_only_itself(cluster: LocalCluster, linger_ms: int) -> None:
    """Three sends share one batch; the middle one's task is cancelled (an application's timeout).
    The other two still get their acknowledgements, flush and close do not raise, and the batch,
    the cancelled send's record with it, is stored once."""
    queue = f"queue:cancel-one-{linger_ms}"
    async with await Producer.connect(
        cluster.bootstrap, partition_type="fixed", key="cancel", linger_ms=linger_ms
    ) as p:
        sends = [asyncio.create_task(p.send(queue, b"%d" % i)) for i in range(3)]
        await asyncio.sleep(0)  # each send appended its record to the open batch and waits for it
        sends[1].cancel()
        first, last = await sends[0], await sends[2]
        assert sends[1].cancelled()
        assert (last.partition, last.offset) == (first.partition, first.offset + 2), (first, last)
        await p.flush()
    consumer = await Consumer.connect(cluster.bootstrap, queue)
    got = []
    with contextlib.suppress(TimeoutError):
        while len(got) < 4:
            m = await consumer.receive(timeout=3)
            if isinstance(m, Message):
                got.append(m.value)
    await consumer.close()
    assert got == [b"0", b"1", b"2"], got
