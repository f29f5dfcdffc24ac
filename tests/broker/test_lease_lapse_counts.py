"""A primary whose lease lapses for a while does not count deliveries it never sent (real processes).

`hybridmq local` (1 MM, 1 replica) runs the local controller in its own process. Stopping that
process (SIGSTOP) stops the MM's heartbeats: the MM's lease lapses and it cannot commit anything,
while the controller, continued, forgives its own stall and fails nothing over. A slow consumer
keeps acknowledging a big backlog meanwhile, so the MM keeps trying to hand records out. The
checker is the test's own bookkeeping: what the consumer received (each message carries a unique
value) and what ``queue:_DMQ`` holds at the end. A record may reach ``_DMQ`` only after it was
delivered more than ``--max-redeliveries`` (5) times; every other one reaches the consumer.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_workload import end_process

from hybridmq.client import Consumer, Message, Producer

QUEUE = "queue:lapse"
MAX_REDELIVERIES = 5  # `hybridmq local`'s MMs run with the default
BACKLOG = 3000


@pytest.fixture
def local_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`hybridmq local` with its controller, as its own process; (process, bootstrap)."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "hybridmq.cli.main", "local"),
            *("--mms", "1", "--replicas", "1", "--fixed", "1", "--on-demand-per-mm", "0"),
            *("--port", "0", "--dir", str(tmp_path / "local")),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        output = b""
        assert proc.stdout is not None
        while b"CMs at" not in output:
            line = proc.stdout.readline()  # the line comes once every broker listens and is linked
            assert line, f"hybridmq local ended before it served: {output.decode(errors='replace')}"
            output += line
        found = re.search(rb"CMs at (\S+)", output)
        assert found is not None
        yield proc, found.group(1).decode()
    finally:
        end_process(proc)  # it stops its brokers


async def test_lease_lapse_does_not_count_deliveries_never_sent(
    local_process: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, bootstrap = local_process
    async with await Producer.connect(bootstrap, partition_type="fixed", linger_ms=5) as producer:
        acks = [producer.send(QUEUE, f"m{i}".encode()) for i in range(BACKLOG)]
        await asyncio.gather(*acks)

    received: Counter[bytes] = Counter()
    consumer = await Consumer.connect(bootstrap, QUEUE, auto_ack=False, window=50)

    async def consume(stop: asyncio.Event) -> None:
        while not stop.is_set() and len(received) < BACKLOG:
            try:
                msg = await consumer.receive(timeout=0.5)
            except TimeoutError:
                continue
            assert isinstance(msg, Message)
            received[msg.value] += 1
            await asyncio.sleep(0.003)  # a slow consumer: the backlog stays
            consumer.ack(msg)

    stop = asyncio.Event()
    consuming = asyncio.create_task(consume(stop))
    await asyncio.sleep(1.0)
    assert 0 < len(received) < BACKLOG, f"received {len(received)} before the lapse"
    proc.send_signal(signal.SIGSTOP)  # no heartbeat is answered: the MM's lease lapses
    try:
        await asyncio.sleep(4.0)
    finally:
        proc.send_signal(signal.SIGCONT)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    dead: dict[bytes, str] = {}
    dmq = await Consumer.connect(bootstrap, "queue:_DMQ")
    while len(received) + len(dead) < BACKLOG and loop.time() < deadline:
        try:
            gone = await dmq.receive(timeout=0.5)
        except TimeoutError:
            continue
        assert isinstance(gone, Message)
        dead[gone.value] = str(gone.attributes.get("reason"))
    stop.set()
    await consuming
    await consumer.close()
    await dmq.close()

    early = {v: (received[v], why) for v, why in dead.items() if received[v] <= MAX_REDELIVERIES}
    assert not early, (
        f"{len(early)} records reached _DMQ after fewer than {MAX_REDELIVERIES + 1} deliveries "
        f"(received {len(received)} of {BACKLOG}): {sorted(early.items())[:5]}"
    )
    missing = BACKLOG - len(set(received) | set(dead))
    assert missing == 0, f"{missing} records neither received nor in _DMQ"
