"""Per-message acknowledgement across a kill -9 of the primary MM and of a worker process.

Two workers share a queue on a replicated partition: one in a process of its own
(``queue_worker.py``, which journals what it received and which acknowledgements the broker
confirmed), one in the test. Mid-run the partition's primary MM is killed, then the worker process.
The test's own books judge: no message is received again after its acknowledgement was confirmed,
every acknowledged produce is processed (confirmed) by someone, and what the dead worker held
unconfirmed comes again, flagged, to the surviving one.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from failover_workload import until

from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:crashwork"
WORKER = Path(__file__).with_name("queue_worker.py")


class Worker:
    """The in-process worker: (value, delivery count, when) received, value -> when confirmed."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.received: list[tuple[str, int, float]] = []
        self.ack_sent: set[str] = set()
        self.confirmed: dict[str, float] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                m = await self.consumer.receive(timeout=0.3)
            except TimeoutError:
                continue
            assert isinstance(m, Message)
            value = m.value.decode()
            self.received.append((value, m.delivery_count, time.time()))
            await asyncio.sleep(0.004)
            fut = self.consumer.ack(m)
            self.ack_sent.add(value)
            if fut is not None:
                fut.add_done_callback(lambda f, v=value: self._confirmed(v, f))

    def _confirmed(self, value: str, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.confirmed.setdefault(value, time.time())


def read_journal(path: Path) -> tuple[list[tuple[str, int, float]], set[str], dict[str, float]]:
    """The worker's journal: what it received, sent acknowledgements for, and had confirmed."""
    received: list[tuple[str, int, float]] = []
    ack_sent: set[str] = set()
    confirmed: dict[str, float] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts[0] == "R" and len(parts) == 4:
            received.append((parts[1], int(parts[2]), float(parts[3])))
        elif parts[0] == "A" and len(parts) == 2:
            ack_sent.add(parts[1])
        elif parts[0] == "C" and len(parts) == 3:
            confirmed.setdefault(parts[1], float(parts[2]))
    return received, ack_sent, confirmed


async def _produce(producer: Producer, values: list[str], acked: set[str]) -> None:
    """Send concurrently (the client batches them); remember what the broker acknowledged."""
    for i in range(0, len(values), 100):
        chunk = values[i : i + 100]
        results = await asyncio.gather(
            *(producer.send(QUEUE, v.encode()) for v in chunk), return_exceptions=True
        )
        acked.update(
            v for v, r in zip(chunk, results, strict=True) if not isinstance(r, ClientError | ConnectionError)
        )


async def test_kill_9_of_the_primary_and_of_a_worker_loses_and_repeats_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "cluster", mms=3, replicas=2, fixed=1, on_demand_per_mm=0) as cluster:
        fixed = cluster.table()["local-fixed-0"]
        journal = tmp_path / "worker.journal"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), cluster.bootstrap, QUEUE, str(journal), "--delay", "0.008"
        )
        try:
            await until(lambda: journal.exists() and journal.read_text().startswith("S "), 30, "the worker")
            mine = Worker(await Consumer.connect(cluster.bootstrap, QUEUE, window=20, auto_ack=False))
            stop = asyncio.Event()
            working = asyncio.create_task(mine.run(stop))
            producer = await Producer.connect(
                cluster.bootstrap, partition_type="fixed", partition=fixed.name, linger_ms=5
            )
            values = [f"w{i}" for i in range(3000)]
            acked: set[str] = set()
            await _produce(producer, values[:1500], acked)

            def confirmed_by_worker() -> int:
                return len(read_journal(journal)[2])

            await until(
                lambda: confirmed_by_worker() >= 100 and len(mine.confirmed) >= 100, 30, "work to start"
            )
            cluster.kill_mm(fixed.primary or "", signal.SIGKILL)  # both workers hold messages now
            await until(lambda: cluster.table()[fixed.name].epoch > fixed.epoch, 20, "the failover")
            await _produce(producer, values[1500:], acked)
            before = confirmed_by_worker()

            def killed_while_processing() -> bool:
                # kill -9 between a message's receipt and its acknowledgement (the journal's last
                # line): the worker holds it, besides the window its client buffered. Killed at a
                # fixed moment instead, it once held nothing (at load average 30-46: idle between messages).
                if confirmed_by_worker() < before + 50:
                    return False
                lines = journal.read_text().splitlines()
                if not lines or not lines[-1].startswith("R "):
                    return False
                proc.send_signal(signal.SIGKILL)
                return True

            await until(killed_while_processing, 30, "the worker to go on, then to hold a message")
            await proc.wait()

            def all_processed() -> bool:  # an acknowledgement sent but not confirmed may be kept
                return acked <= mine.ack_sent | read_journal(journal)[1]

            await until(all_processed, 90, "every acknowledged produce to be processed")
            await asyncio.sleep(1.5)  # a late redelivery, if any, would come now
            stop.set()
            await working
            await producer.close()
            await mine.consumer.close()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    theirs_received, theirs_ack_sent, theirs_confirmed = read_journal(journal)
    confirmed = dict(theirs_confirmed)
    for v, t in mine.confirmed.items():
        confirmed[v] = min(t, confirmed.get(v, t))
    deliveries: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for who, received in (("worker", theirs_received), ("test", mine.received)):
        for v, count, t in received:
            deliveries[v].append((t, count, who))
    assert len(acked) >= 2900, len(acked)
    # No acknowledged produce lost: each was processed (its acknowledgement sent; one the broker
    # never confirmed is either kept or the message is redelivered, and then processed again).
    assert acked <= mine.ack_sent | theirs_ack_sent
    # No message is received after its acknowledgement was confirmed (a 50 ms margin for clocks
    # read in two processes).
    again = [
        (v, confirmed[v], d)
        for v, ds in deliveries.items()
        if v in confirmed
        for d in ds
        if d[0] > confirmed[v] + 0.05
    ]
    assert not again, f"{len(again)} acknowledged messages delivered again: {again[:3]}"
    unflagged_twice = [v for v, ds in deliveries.items() if sum(1 for d in ds if d[1] == 1) > 1]
    assert not unflagged_twice, f"delivered twice as a first delivery: {unflagged_twice[:5]}"
    # What the killed worker held without acknowledging it came again, flagged, to the other one.
    held = {v for v, _, _ in theirs_received} - theirs_ack_sent
    assert held, "the worker held nothing when it was killed"
    redelivered_to_mine = {v for v, count, _ in mine.received if count > 1}
    assert held <= redelivered_to_mine, held - redelivered_to_mine
    print(
        {"acked": len(acked), "worker": len(theirs_confirmed), "test": len(mine.confirmed), "held": len(held)}
    )
