"""The client closes cleanly (real CM and MM processes).

* ``async with`` closes a ``Producer``, ``Consumer``, ``Fetcher`` and ``Session`` (and ``with`` a
  blocking wrapper): afterwards the CM no longer has its session, the object says ``closed`` and
  using it raises ``ClientClosedError``.
* A program that ends without closing its clients leaves one ``ResourceWarning`` per object (shown
  with ``-W always::ResourceWarning``; nothing by default), not "Task was destroyed but it is
  pending!" for every session's reconnection: ``asyncio.run`` cancels the sessions' reader tasks
  when the program's coroutine returns, and a cancelled reader is not a lost CM.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybridmq.client import (
    BlockingConsumer,
    BlockingProducer,
    ClientClosedError,
    Consumer,
    Fetcher,
    Message,
    Producer,
    Session,
    admin,
)
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:close.q"
UNCLOSED = re.compile(r"ResourceWarning: Unclosed (\w+)")

UNCLOSED_ASYNC = """
import asyncio
import sys

from hybridmq.client import Consumer, Fetcher, Producer, Session


async def main(bootstrap: str) -> None:
    producer = await Producer.connect(bootstrap, partition_type="fixed", key="k")
    consumer = await Consumer.connect(bootstrap, "queue:close.unclosed")
    await producer.send("queue:close.unclosed", b"hello")
    message = await consumer.receive(timeout=10)
    assert message.value == b"hello", message
    fetcher = await Fetcher.connect(bootstrap)
    assert await fetcher.partitions()
    session = await Session.connect(bootstrap, transacted=True)
    await session.send("queue:close.unclosed.tx", b"tx")
    await session.commit()
    print("done", flush=True)  # and the program ends without closing any of them


asyncio.run(main(sys.argv[1]))
"""

UNCLOSED_BLOCKING = """
import sys

from hybridmq.client import BlockingConsumer, BlockingProducer

producer = BlockingProducer(sys.argv[1], partition_type="fixed", key="k")
consumer = BlockingConsumer(sys.argv[1], "queue:close.unclosed.blocking")
producer.send("queue:close.unclosed.blocking", b"hello")
assert consumer.receive(timeout=10).value == b"hello"
print("done", flush=True)  # and the program ends without closing them
"""


def _run(program: Path, bootstrap: str, *python_args: str) -> str:
    """Run ``program`` with the project's interpreter; its stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE")}
    done = subprocess.run(
        [sys.executable, *python_args, str(program), bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done
    return done.stderr


def _warning_lines(stderr: str) -> list[str]:
    """The warning lines (not the source line or the tracemalloc hint printed under each)."""
    return [
        line
        for line in stderr.splitlines()
        if "Warning:" in line and not line.startswith("ResourceWarning: Enable tracemalloc")
    ]


@pytest.mark.parametrize(
    ("source", "objects"),
    [
        (UNCLOSED_ASYNC, ["Producer", "Consumer", "Fetcher", "Session"]),
        (UNCLOSED_BLOCKING, ["BlockingProducer", "BlockingConsumer"]),
    ],
    ids=["asyncio", "blocking"],
)
def test_a_program_that_does_not_close_its_clients_ends_quietly(
    cluster: LocalCluster, tmp_path: Path, source: str, objects: list[str]
) -> None:
    program = tmp_path / "unclosed.py"
    program.write_text(source)

    stderr = _run(program, cluster.bootstrap, "-W", "always::ResourceWarning")
    assert "Task was destroyed" not in stderr, stderr
    assert "Traceback" not in stderr, stderr
    warnings = _warning_lines(stderr)
    named = sorted(m.group(1) for line in warnings if (m := UNCLOSED.search(line)))
    assert named == sorted(objects), stderr  # one line per object ...
    assert len(warnings) == len(objects), stderr  # ... and no unclosed socket, transport or loop

    stderr = _run(program, cluster.bootstrap)  # the default filters ignore ResourceWarning
    assert stderr == "", stderr


async def _client_ids(cluster: LocalCluster) -> set[str]:
    return {s["client"] for s in await admin(cluster.bootstrap, "sessions") if s}


async def _gone(cluster: LocalCluster, client_id: str) -> None:
    """Wait until the CM no longer has the session of ``client_id``."""
    deadline = time.monotonic() + 5
    while client_id in await _client_ids(cluster):
        assert time.monotonic() < deadline, f"the CM still has the session of {client_id}"
        await asyncio.sleep(0.05)


async def test_async_with_producer(cluster: LocalCluster) -> None:
    async with await Producer.connect(
        cluster.bootstrap, partition_type="fixed", key="k", client_id="close-producer"
    ) as producer:
        assert not producer.closed
        assert "close-producer" in await _client_ids(cluster)
        ack = await producer.send(QUEUE, b"one")
        assert ack.offset >= 0
    assert producer.closed and producer.conn.closed
    await _gone(cluster, "close-producer")
    with pytest.raises(ClientClosedError, match="the producer is closed"):
        await producer.send(QUEUE, b"two")
    with pytest.raises(ClientClosedError):
        producer.try_send(QUEUE, b"two")
    with pytest.raises(ClientClosedError):
        async with producer:
            pass
    await producer.close()  # a second close does nothing

    with pytest.raises(RuntimeError, match="in the block"):  # closed when the block raises, too
        async with await Producer.connect(cluster.bootstrap, client_id="close-producer-2") as producer:
            raise RuntimeError("in the block")
    assert producer.closed
    await _gone(cluster, "close-producer-2")


async def test_async_with_consumer(cluster: LocalCluster) -> None:
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed", key="k") as producer:
        await producer.send(QUEUE + ".c", b"one")
    connecting = Consumer.connect(cluster.bootstrap, QUEUE + ".c", client_id="close-consumer")
    async with await connecting as consumer:
        assert not consumer.closed
        message = await consumer.receive(timeout=10)
        assert isinstance(message, Message) and message.value == b"one"
    assert consumer.closed and consumer.conn.closed
    await _gone(cluster, "close-consumer")
    with pytest.raises(ClientClosedError, match="the consumer is closed"):
        await consumer.receive(timeout=1)
    assert [m async for m in consumer] == []  # iterating a closed consumer ends at once
    with pytest.raises(ClientClosedError):
        async with consumer:
            pass


async def test_async_with_fetcher(cluster: LocalCluster) -> None:
    async with await Fetcher.connect(cluster.bootstrap, client_id="close-fetcher") as fetcher:
        assert not fetcher.closed
        partitions = await fetcher.partitions()
        assert partitions
    assert fetcher.closed and fetcher.conn.closed
    await _gone(cluster, "close-fetcher")
    with pytest.raises(ClientClosedError, match="the fetcher is closed"):
        await fetcher.fetch(partitions[0].name, 0)
    with pytest.raises(ClientClosedError):
        async with fetcher:
            pass


async def test_async_with_session(cluster: LocalCluster) -> None:
    connecting = Session.connect(cluster.bootstrap, transacted=True, client_id="close-session")
    async with await connecting as session:
        assert not session.closed
        consumer = await session.consumer(QUEUE + ".tx")
        await session.send(QUEUE + ".tx", b"one")
        await session.commit()
    assert session.closed and consumer.closed and consumer.conn.closed
    await _gone(cluster, "close-session")
    with pytest.raises(ClientClosedError, match="the session is closed"):
        await session.send(QUEUE + ".tx", b"two")
    with pytest.raises(ClientClosedError):
        await session.consumer(QUEUE + ".tx")
    with pytest.raises(ClientClosedError):
        async with session:
            pass


def test_with_blocking_wrappers(cluster: LocalCluster) -> None:
    dest = QUEUE + ".blocking"
    bootstrap = cluster.bootstrap
    with BlockingProducer(bootstrap, partition_type="fixed", key="k", client_id="close-bp") as producer:
        producer.send(dest, b"one")
    with BlockingConsumer(bootstrap, dest, client_id="close-bc") as consumer:
        message = consumer.receive(timeout=10)
        assert isinstance(message, Message) and message.value == b"one"
    assert producer.closed and consumer.closed
    for client_id in ("close-bp", "close-bc"):
        asyncio.run(_gone(cluster, client_id))
    with pytest.raises(ClientClosedError, match="the producer is closed"):
        producer.send(dest, b"two")
    with pytest.raises(ClientClosedError, match="the consumer is closed"):
        consumer.receive(timeout=1)
    producer.close()  # a second close does nothing
