"""A batch the brokers never answer fails at the producer's delivery timeout instead of hanging.

A stand-in CM on a real socket (its own framing, written here from the wire format: a 4-byte
big-endian length, then a msgpack map) accepts the session and the producer and answers PINGs,
but swallows every PRODUCE. The producer's ``send`` must fail with ``DeliveryTimeout``, ``close``
must return, and the next batch must start a new producer epoch (the failed one may be stored).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from standin_wire import frame_sender, frames

from hybridmq.client import DeliveryTimeout, Producer

HELLO, HELLO_OK, OK, OPEN_PRODUCER, PRODUCE, PING, PONG = 1, 2, 4, 10, 11, 50, 51
DELIVERY_TIMEOUT_S = 12.0  # above the 10 s any single request is given for its answer


class SilentCM:
    """Answers the handshake, OPEN_PRODUCER and PING; keeps every PRODUCE it gets, unanswered."""

    def __init__(self) -> None:
        self.produces: list[dict[str, Any]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        send = frame_sender(writer)

        async for frame in frames(reader):
            kind = frame["t"]
            if kind == HELLO:
                send({"t": HELLO_OK, "v": frame["v"], "session": "s-1", "node": "silent-cm"})
            elif kind == OPEN_PRODUCER:
                send(
                    {
                        "t": OK,
                        "r": frame["c"],
                        "partition": "p-0",
                        "ptype": "fixed",
                        "producer_id": "prod-1",
                        "pid": 7,
                    }
                )
            elif kind == PING:
                send({"t": PONG, "r": frame["c"]})
            elif kind == PRODUCE:
                self.produces.append(frame)
        writer.close()


@pytest.fixture
async def silent_cm() -> Any:
    cm = SilentCM()
    address = await cm.start()
    yield cm, address
    cm.close()


async def test_an_unanswered_batch_fails_at_the_delivery_timeout(silent_cm: tuple[SilentCM, str]) -> None:
    cm, address = silent_cm
    producer = await Producer.connect(
        address, partition_type="fixed", linger_ms=0, delivery_timeout=DELIVERY_TIMEOUT_S
    )
    started = time.monotonic()
    with pytest.raises(DeliveryTimeout):
        await asyncio.wait_for(producer.send("queue:q", b"lost"), DELIVERY_TIMEOUT_S + 30)
    took = time.monotonic() - started
    assert DELIVERY_TIMEOUT_S - 0.5 <= took < DELIVERY_TIMEOUT_S + 5, took
    assert len(cm.produces) == 1, "a batch without an answer is not resent: the CM link is up"

    # The next batch: a new producer epoch, sequence 0 (the failed one may or may not be stored).
    second = asyncio.ensure_future(producer.send("queue:q", b"next"))
    for _ in range(500):
        if len(cm.produces) == 2:
            break
        await asyncio.sleep(0.01)
    first, then = cm.produces
    assert (then["pid"], then["pep"], then["seq"]) == (first["pid"], first["pep"] + 1, 0), (first, then)

    # close() waits for the second batch's answer, up to its deadline, and reports its failure.
    closing = time.monotonic()
    with pytest.raises(DeliveryTimeout):
        await asyncio.wait_for(producer.close(), DELIVERY_TIMEOUT_S + 30)
    assert time.monotonic() - closing < DELIVERY_TIMEOUT_S + 5
    with pytest.raises(DeliveryTimeout):
        await second
