"""A producer on one fixed partition, in a thread of its own, recording when each produce is acked.

Used by ``bench/operator_failover.py`` with the real broker (``HYBRIDMQ_TEST_BROKER=real``) to time
an operator failover to the first acknowledged produce on the same partition.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time

from hybridmq.client import ClientError, Producer


class ProduceProbe:
    def __init__(self, bootstrap: str, partition: str, *, senders: int = 4) -> None:
        self.bootstrap = bootstrap
        self.partition = partition
        self.senders = senders
        self.acks: list[float] = []  # time.monotonic() of each ack, increasing
        self.errors = 0
        self.seen_partitions: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="produce-probe", daemon=True)

    def start(self, timeout: float = 30) -> ProduceProbe:
        self.thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"nothing acknowledged on {self.partition} in {timeout}s: {self.failure}")
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(15)

    def first_ack_after(self, t: float, timeout: float = 30) -> float:
        """``time.monotonic()`` of the first ack later than ``t`` (waits up to ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                i = bisect.bisect_right(self.acks, t)
                if i < len(self.acks):
                    return self.acks[i]
            time.sleep(0.005)
        raise TimeoutError(f"no ack on {self.partition} after t={t:.3f} within {timeout}s")

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported by start()/first_ack_after timeouts
            self.failure = exc

    async def _run(self) -> None:
        producer = await Producer.connect(self.bootstrap, partition_type="fixed", partition=self.partition)
        try:
            await asyncio.gather(*(self._send_loop(producer, i) for i in range(self.senders)))
        finally:
            await producer.close()

    async def _send_loop(self, producer: Producer, index: int) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                ack = await producer.send("queue:bench-failover", f"{index}:{n}".encode())
            except (ClientError, ConnectionError):
                self.errors += 1
                await asyncio.sleep(0.01)
                continue
            with self._lock:
                self.acks.append(time.monotonic())
                self.seen_partitions.add(ack.partition)
            self._ready.set()
            n += 1
            await asyncio.sleep(0.01)
