"""Closing the client, against a fake CM (no broker processes).

A session whose reader task is cancelled - the event loop shutting down: ``asyncio.run`` cancels
the tasks left when the program's coroutine returns - does not reconnect (a reconnection started
then outlived the loop: "Task was destroyed but it is pending!"); a CM that goes away is still
reconnected to. A client that was never closed leaves one ``ResourceWarning`` when collected, a
closed one none. tests/broker/test_client_close.py runs the same against real CM and MM processes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from hybridmq.api.frames import FrameType
from hybridmq.client import ClientClosedError, Consumer, Producer
from hybridmq.protocol.codec import encode_frame, read_frame


class FakeCM:
    """Answers HELLO, PING, OPEN_PRODUCER, SUBSCRIBE and UNSUBSCRIBE; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.answer_pings = True  # False: a hung CM (a PING waits for its PONG until cancelled)
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def start(self) -> FakeCM:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def drop_all(self) -> None:
        """The CM goes away: every connection is closed."""
        for writer in self.writers:
            writer.close()
        self.writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while (frame := await read_frame(reader, 1 << 20)) is not None:
                t = frame.get("t")
                if t == FrameType.HELLO:
                    answer: dict[str, Any] = {"t": FrameType.HELLO_OK, "node": "fake", "session": "s"}
                elif t == FrameType.PING:
                    if not self.answer_pings:
                        continue
                    answer = {"t": FrameType.PONG, "r": frame["c"]}
                elif t == FrameType.OPEN_PRODUCER:
                    answer = {"t": FrameType.OK, "r": frame["c"], "partition": "p-0", "producer_id": "7"}
                else:
                    answer = {"t": FrameType.OK, "r": frame["c"]}
                writer.write(encode_frame(answer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def fake_cm() -> AsyncIterator[FakeCM]:
    cm = await FakeCM().start()
    yield cm
    cm.drop_all()
    await cm.close()


@pytest.fixture
def fake_cm_thread() -> Iterator[FakeCM]:
    """A fake CM on a loop of its own (for tests that run ``asyncio.run`` themselves)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    cm = asyncio.run_coroutine_threadsafe(FakeCM().start(), loop).result(5)
    yield cm

    async def stop() -> None:
        cm.drop_all()
        await cm.close()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


async def test_a_cancelled_reader_does_not_reconnect(fake_cm: FakeCM) -> None:
    cm = fake_cm
    producer = await Producer.connect(cm.address, partition_type="fixed", key="k", keepalive_s=None)
    runner = producer.session._runner
    assert runner is not None
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    await asyncio.sleep(0.1)
    assert not producer.session.reconnecting and producer.session.ended
    assert cm.connections == 1
    producer.abort()


async def test_a_lost_cm_is_still_reconnected_to(fake_cm: FakeCM) -> None:
    cm = fake_cm
    producer = await Producer.connect(cm.address, partition_type="fixed", key="k", keepalive_s=None)
    cm.drop_all()
    for _ in range(100):
        if producer.reconnects:
            break
        await asyncio.sleep(0.02)
    assert producer.reconnects == 1 and cm.connections == 2
    await producer.close()
    assert producer.closed
    with pytest.raises(ClientClosedError, match="the producer is closed"):
        await producer.send("queue:q", b"x")


async def test_closing_while_reconnecting_wakes_a_waiting_receive(fake_cm: FakeCM) -> None:
    cm = fake_cm
    consumer = await Consumer.connect(cm.address, "queue:q", keepalive_s=None, give_up_after_s=60)
    await cm.close()  # no CM to reconnect to
    cm.drop_all()
    receiving = asyncio.create_task(consumer.receive())
    for _ in range(100):
        if consumer.reconnecting:
            break
        await asyncio.sleep(0.02)
    assert consumer.reconnecting
    await consumer.close()
    with pytest.raises(ClientClosedError):
        await asyncio.wait_for(receiving, 2)


def test_asyncio_run_leaves_no_pending_task_and_one_warning_per_unclosed_client(
    fake_cm_thread: FakeCM, caplog: pytest.LogCaptureFixture
) -> None:
    """The program's coroutine returns with a producer and a consumer open (and one of each closed)."""

    async def main() -> None:
        address = fake_cm_thread.address
        await Producer.connect(address, partition_type="fixed", key="k")
        await Consumer.connect(address, "queue:q")
        await (await Producer.connect(address, partition_type="fixed", key="k")).close()
        await (await Consumer.connect(address, "queue:q")).close()

    caplog.set_level(logging.ERROR, logger="asyncio")
    gc.collect()  # what earlier tests of this worker left unclosed warns now, not below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(main())
        gc.collect()  # pending tasks of a closed loop say "Task was destroyed" when collected
    assert not [r for r in caplog.records if "destroyed" in r.getMessage()], caplog.text
    unclosed = sorted(str(w.message) for w in caught if issubclass(w.category, ResourceWarning))
    assert [w.split(" (")[0] for w in unclosed] == ["Unclosed Consumer", "Unclosed Producer"], unclosed
    assert fake_cm_thread.connections == 4  # no reconnection at shutdown


@pytest.mark.parametrize("ticks", range(8))
async def test_the_keepalive_ends_when_cancelled_as_its_ping_fails(fake_cm: FakeCM, ticks: int) -> None:
    """The event loop shutting down cancels every task once (``asyncio.run``, pytest-asyncio): a
    keepalive whose PING failed in the same few loop iterations - the CM went away as the program
    ended - must still end, not go on pinging a dead connection for ever."""
    cm = fake_cm
    cm.answer_pings = False
    consumer = await Consumer.connect(
        cm.address, "queue:q", keepalive_s=0.01, keepalive_timeout_s=30, reconnect=False
    )
    keepalive = consumer.session._keepalive
    assert keepalive is not None
    await asyncio.sleep(0.1)  # a PING is in flight, unanswered
    cm.drop_all()
    for _ in range(ticks):
        await asyncio.sleep(0)
    keepalive.cancel()
    done, _ = await asyncio.wait([keepalive], timeout=2)
    assert done, f"the keepalive ignored its cancellation {ticks} loop iterations after the CM went away"
    consumer.abort()
