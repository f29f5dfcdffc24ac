"""Acknowledgements reach the MM that delivered the message, also when a CM's table lags behind a
failover (real processes).

The consumer's CM follows an assignment file that the test updates only seconds after the
controller promoted the new primary: meanwhile the new primary's deliveries reach that CM while
its table still names the killed one. The consumer acknowledges every message it gets and has a
window of 10: acknowledgements that went to the old primary would be refused, and the window would
stay full until the consumer left. The checker is the test's own bookkeeping: every message is
received, every acknowledgement is answered and none is confirmed twice. One whose confirmation was
refused (its primary died before answering) is either given again or committed after all: a fresh
consumer then gets it, and never one whose acknowledgement was confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_workload import end_process

from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.auth import cluster_secret
from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster, wait_port
from receiving import receive_until_quiet

QUEUE = "queue:routed"
MESSAGES = 300
QUIET_S = 5.0


async def _drain(bootstrap: str) -> list[int]:
    """The offsets a fresh consumer gets within a few seconds, each acknowledged and confirmed."""
    consumer = await Consumer.connect(bootstrap, QUEUE, auto_ack=False)

    async def acknowledged(msg: Message) -> None:
        confirmation = consumer.ack(msg)
        assert confirmation is not None
        await asyncio.wait_for(confirmation, 30)

    try:
        return [msg.offset for msg in await receive_until_quiet(consumer, 3.0, acknowledged)]
    finally:
        await consumer.close()


@pytest.fixture
def two_copies(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", mms=2, replicas=2, fixed=1, on_demand_per_mm=0) as c:
        yield c


def write_table(cluster: LocalCluster, path: Path) -> None:
    source = StaticAssignmentSource(list(cluster.table().values()), list(cluster.source.brokers().values()))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(source.to_json())
    tmp.replace(path)  # the CM never reads half a table


@pytest.fixture
def lagging_cm(two_copies: LocalCluster, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A CM of the test's own whose table is a file: (its address, that file)."""
    cluster = two_copies
    table = tmp_path / "lagging-table.json"
    write_table(cluster, table)
    port, http = cluster.reserve_port(), cluster.reserve_port()
    with open(tmp_path / "cm-lagging.log", "ab") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "hybridmq.cli.main", "cm", "--name", "cm-lagging"),
                *("--bind", f"127.0.0.1:{port}", "--http-bind", f"127.0.0.1:{http}"),
                *("--assignments", str(table), "--log-level", "WARNING"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, cluster_secret.FILE_ENV: str(cluster.secret_file)},
        )
    try:
        wait_port(port)
        yield f"127.0.0.1:{port}", table
    finally:
        end_process(proc)


async def test_acks_follow_the_delivery_to_a_primary_the_cm_table_does_not_name_yet(
    two_copies: LocalCluster, lagging_cm: tuple[str, Path]
) -> None:
    cluster = two_copies
    address, table = lagging_cm
    cluster.wait_in_sync()
    name = cluster.partitions()[0].name
    before = cluster.table()[name]
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed", linger_ms=2) as producer:
        await asyncio.gather(*(producer.send(QUEUE, f"m{i}".encode()) for i in range(MESSAGES)))

    received: Counter[int] = Counter()
    confirmed: Counter[int] = Counter()
    refused: Counter[int] = Counter()
    consumer = await Consumer.connect(address, QUEUE, auto_ack=False, window=10)

    def answered(offset: int, fut: asyncio.Future[object]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            refused[offset] += 1
        else:
            confirmed[offset] += 1

    async def consume() -> None:
        """Until every message came and every one received is confirmed, or nothing more came for
        QUIET_S once all had come (a message whose confirmation was refused may come again)."""
        idle_since = loop.time()
        while len(received) < MESSAGES or (
            set(received) - set(confirmed) and loop.time() - idle_since < QUIET_S
        ):
            try:
                msg = await consumer.receive(timeout=0.5)
            except TimeoutError:
                continue
            idle_since = loop.time()
            assert isinstance(msg, Message)
            received[msg.offset] += 1
            await asyncio.sleep(0.01)  # a steady consumer: the failover finds it acknowledging
            confirmation = consumer.ack(msg)
            if confirmation is not None:
                confirmation.add_done_callback(lambda f, o=msg.offset: answered(o, f))

    loop = asyncio.get_running_loop()
    consuming = asyncio.create_task(consume())
    try:
        deadline = loop.time() + 60
        while len(received) < 50 and loop.time() < deadline:  # noqa: ASYNC110 - polls a counter
            await asyncio.sleep(0.05)
        assert len(received) >= 50, f"only {len(received)} received before the failover"
        cluster.kill_mm(before.primary or "")
        await asyncio.to_thread(
            cluster.wait_until, lambda: cluster.table()[name].epoch > before.epoch, 60, "the failover"
        )
        await asyncio.sleep(5.0)  # the new primary delivers; the lagging CM still names the old one
        write_table(cluster, table)
        await asyncio.wait_for(asyncio.shield(consuming), 90)
    except TimeoutError:
        pass
    finally:
        consuming.cancel()
        await asyncio.gather(consuming, return_exceptions=True)
    with contextlib.suppress(ClientError):  # refused ones are counted above
        await asyncio.wait_for(consumer.commit(), 30)
    await consumer.close()

    assert len(received) == MESSAGES, (
        f"the consumer got {len(received)} of {MESSAGES} messages; {sum(refused.values())} "
        f"acknowledgements were refused (its window stayed full)"
    )
    twice = {o: n for o, n in confirmed.items() if n != 1}
    unsettled = sorted(set(received) - set(confirmed))
    unanswered = [o for o in unsettled if not refused[o]]
    assert not twice and not unanswered, (
        f"confirmed more than once: {twice}; never answered: {unanswered[:10]}"
    )
    # A refused confirmation whose message did not come again: the primary died after the cursor
    # record holding the acknowledgement reached the backup and before it answered; the new
    # primary restarts from what was committed, so the message is acknowledged and must not be
    # held any more. Anything still held goes to a fresh consumer, and is acknowledged there.
    held = await _drain(cluster.bootstrap)
    assert not set(held) - set(unsettled), f"held though confirmed: {sorted(set(held) - set(unsettled))[:10]}"
    print(f"refused and committed: {sorted(set(unsettled) - set(held))}; given again: {held}")
