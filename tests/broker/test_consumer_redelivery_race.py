"""A consumer whose CM went away never hands the application a message twice, even when the
redelivery reaches the new connection before the answer to its SUBSCRIBE.

A stand-in CM on a real socket (its own framing, written here from the wire format: a 4-byte
big-endian length, then a msgpack map). On the first connection it delivers ten records of one
partition (the window of four the consumer asked for); the application takes them and waits in
``receive`` for more; the CM closes the connection. On the second connection it delivers ten
records from the same offset, flagged as a redelivery, and only then answers the SUBSCRIBE (a real
CM registers the subscription with the MMs first, whose redeliveries can overtake its answer). The
application must get the six it did not have, once each, and never the four again.

Seen as 25 values delivered twice in `test_kill_cm_under_load` at load average 19.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgpack
from standin_wire import frame_sender, frames

from hybridmq.client import Consumer, Message

HELLO, HELLO_OK, OK, SUBSCRIBE, UNSUBSCRIBE, DELIVER, ACK, PING, PONG = 1, 2, 4, 20, 21, 22, 23, 50, 51
DEST = "queue:race"
RECORDS = [[b"m-%d" % i, None, None, 0] for i in range(10)]


class RedeliveringCM:
    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.first: asyncio.StreamWriter | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        nth = self.connections
        if nth == 1:
            self.first = writer

        send = frame_sender(writer)

        def deliver(sub: int, redelivery: int, count: int) -> None:
            blob = msgpack.packb(RECORDS[:count], use_bin_type=True)
            send(
                {
                    "t": DELIVER,
                    "s": sub,
                    "p": "p-0",
                    "d": DEST,
                    "o": 100,
                    "n": count,
                    "b": blob,
                    "f": 0,
                    "rd": redelivery,
                    "e": 1,
                }
            )

        async for frame in frames(reader):
            kind = frame["t"]
            if kind == HELLO:
                send({"t": HELLO_OK, "v": frame["v"], "session": f"s-{nth}", "node": f"cm-{nth}"})
            elif kind == SUBSCRIBE and nth == 1:
                send({"t": OK, "r": frame["c"]})
                deliver(int(frame["s"]), 0, 4)
            elif kind == SUBSCRIBE:
                deliver(int(frame["s"]), 1, 10)  # the redelivery overtakes the answer (written at once)
                await asyncio.sleep(0.3)
                send({"t": OK, "r": frame["c"]})
            elif kind == PING:
                send({"t": PONG, "r": frame["c"]})
            elif (kind == ACK and frame.get("c") is not None) or kind == UNSUBSCRIBE:
                send({"t": OK, "r": frame["c"]})
        writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_a_redelivery_before_the_subscribe_answer_is_not_handed_out_again() -> None:
    cm = RedeliveringCM()
    address = await cm.start()
    consumer = await Consumer.connect(address, DEST, durable="race", auto_ack=False)
    try:
        got: list[Message] = []
        for _ in range(4):
            message = await consumer.receive(timeout=10)
            assert isinstance(message, Message)
            got.append(message)
        waiting = asyncio.create_task(consumer.receive(timeout=10))  # the application waits for more
        await asyncio.sleep(0.2)
        assert cm.first is not None
        cm.first.close()  # the CM goes away
        message = await waiting
        assert isinstance(message, Message)
        got.append(message)
        for _ in range(5):
            message = await consumer.receive(timeout=10)
            assert isinstance(message, Message)
            got.append(message)
        for _ in range(100):  # the session is restored once the SUBSCRIBE is answered
            if consumer.reconnects == 1:
                break
            await asyncio.sleep(0.05)
        assert consumer.reconnects == 1
        with contextlib.suppress(TimeoutError):
            extra = await consumer.receive(timeout=1.0)
            got.append(extra)  # type: ignore[arg-type]
        assert [m.value for m in got] == [r[0] for r in RECORDS], [(m.value, m.redelivered) for m in got]
        assert [m.redelivered for m in got[4:]] == [True] * 6  # they came again: flagged
    finally:
        await consumer.close()
        cm.close()
