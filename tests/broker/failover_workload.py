"""Continuous produce + consume for the failover tests, and the checks every failover must pass.

Each producer sends ``<name>:<seq>`` values (seq increasing) and remembers which were acknowledged.
The consumer records every delivery as ``(partition, offset) -> value``. The checks:

* no acknowledged message lost: every acked value was consumed;
* per-producer order: within a partition, by offset, a producer's sequence numbers increase;
* no duplicates: no value is stored at two different ``(partition, offset)`` positions
  (redelivery of the same position after a failover is allowed: it is the same stored message).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Fetcher, Message, Producer
from hybridmq.local.runner import LocalCluster
from reading import read_batches


@dataclass
class ProducerLoad:
    name: str
    producer: Producer
    acked: dict[int, tuple[str, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    ack_times: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    partitions: set[str] = field(default_factory=set)
    sent: int = 0

    async def run(self, dest: str, stop: asyncio.Event, *, window: int = 20, pause: float = 0.004) -> None:
        loop = asyncio.get_running_loop()
        inflight: set[asyncio.Task[None]] = set()

        async def one(seq: int) -> None:
            try:
                ack = await self.producer.send(dest, f"{self.name}:{seq}".encode())
            except (ClientError, ConnectionError) as exc:
                self.failed.append(f"{seq}: {exc}")
                return
            self.acked[seq] = (ack.partition, ack.offset)
            self.partitions.add(ack.partition)
            self.ack_times.append(loop.time())

        while not stop.is_set():
            if len(inflight) < window:
                task = asyncio.create_task(one(self.sent))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                self.sent += 1
            await asyncio.sleep(pause)
        if inflight:
            await asyncio.wait(inflight, timeout=40)

    def acked_after(self, t: float) -> int:
        return sum(1 for x in self.ack_times if x > t)


@dataclass
class ConsumerLoad:
    consumer: Consumer
    stored: dict[tuple[str, int], str] = field(default_factory=dict)
    deliveries: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                msg = await self.consumer.receive(timeout=0.5)
            except TimeoutError:
                continue
            if not isinstance(msg, Message):
                continue
            self.deliveries += 1
            value = msg.value.decode()
            self.stored[(msg.partition, msg.offset)] = value

    def values(self) -> set[str]:
        return set(self.stored.values())


def check(
    producers: list[ProducerLoad], consumer: ConsumerLoad, ordered: set[str] | None = None
) -> dict[str, int]:
    """Assert the three failover guarantees; returns figures for the test's message. Order and
    uniqueness are checked for the producers named in ``ordered`` (default: all): an on-demand
    producer that moves to another partition resends its in-flight batches there as they fail, so
    their order across the move is not guaranteed, and a batch the lost primary stored without
    acknowledging it may also stay in the old (draining) partition: at-least-once across a move."""
    consumed = consumer.values()
    lost = [f"{p.name}:{s}" for p in producers for s in p.acked if f"{p.name}:{s}" not in consumed]
    if lost:
        acks = {f"{p.name}:{s}": a for p in producers for s, a in p.acked.items()}
        where = [(v, acks[v], consumer.stored.get(acks[v])) for v in lost[:5]]
        name, _, seq = lost[0].rpartition(":")
        near = {f"{name}:{i}" for i in range(int(seq) - 5, int(seq) + 15)}
        where.append(sorted((pos, v) for pos, v in consumer.stored.items() if v in near))  # type: ignore[arg-type]
        where.append([p.failed[:5] for p in producers])  # type: ignore[arg-type]
        raise AssertionError(
            f"{len(lost)} acknowledged messages lost, e.g. (value, ack, stored there): {where}"
        )

    # Every acknowledgement names the position the message really holds (a stale primary's
    # acknowledgement would name a position that the new primary's log gives to another message).
    wrong = [
        (f"{p.name}:{s}", a, consumer.stored.get(a))
        for p in producers
        for s, a in p.acked.items()
        if a[1] >= 0 and consumer.stored.get(a) != f"{p.name}:{s}"
    ]
    assert not wrong, f"{len(wrong)} acknowledgements name another message's position: {wrong[:5]}"

    positions: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for pos, value in consumer.stored.items():
        positions[value].append(pos)
    dups = {
        v: p
        for v, p in positions.items()
        if len(p) > 1 and (ordered is None or v.rpartition(":")[0] in ordered)
    }
    assert not dups, f"{len(dups)} messages stored twice, e.g. {list(dups.items())[:3]}"

    by_partition: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), value in consumer.stored.items():
        name, _, seq = value.rpartition(":")
        by_partition[(partition, name)].append((offset, int(seq)))
    for (partition, name), items in by_partition.items():
        if ordered is not None and name not in ordered:
            continue
        seqs = [s for _, s in sorted(items)]
        assert seqs == sorted(seqs), f"order broken for {name} on {partition}: {seqs[:50]}"
    return {
        "acked": sum(len(p.acked) for p in producers),
        "consumed": len(consumed),
        "redelivered": consumer.deliveries - len(consumer.stored),
    }


async def start_load(
    bootstrap: str, partition: str, dest: str
) -> tuple[ProducerLoad, ConsumerLoad, asyncio.Event, asyncio.Event, asyncio.Task[None], asyncio.Task[None]]:
    """A producer ``fx`` on fixed ``partition`` and a consumer of ``dest``, both running: (load,
    consumer, stop_producing, stop_consuming, consuming task, producing task)."""
    load = ProducerLoad("fx", await Producer.connect(bootstrap, partition_type="fixed", partition=partition))
    consumer = ConsumerLoad(await Consumer.connect(bootstrap, dest))
    stop_producing, stop_consuming = asyncio.Event(), asyncio.Event()
    consuming = asyncio.create_task(consumer.run(stop_consuming))
    producing = asyncio.create_task(load.run(dest, stop_producing))
    return load, consumer, stop_producing, stop_consuming, consuming, producing


async def wait_consumed(producers: list[ProducerLoad], consumer: ConsumerLoad, within: float = 30) -> None:
    """Give the consumer up to ``within`` seconds to get every acknowledged message."""
    want = {f"{p.name}:{s}" for p in producers for s in p.acked}
    for _ in range(int(within * 10)):
        if want <= consumer.values():
            return
        await asyncio.sleep(0.1)


async def until(predicate: Callable[[], bool], within: float, what: str) -> None:
    """Wait (without blocking the event loop) until ``predicate()``."""
    for _ in range(int(within * 20)):
        if await asyncio.to_thread(predicate):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def stall_controller(cluster: LocalCluster, seconds: float) -> None:
    """Block the local controller's event loop (an API server too slow to answer Lease renewals):
    no heartbeat is answered meanwhile, so every MM's lease lapses."""
    controller = cluster.controller
    assert controller is not None
    controller.call(lambda: time.sleep(seconds))


class FencedPrimary:
    """A primary fenced while nobody fails it over: the controller stalls (``stall_controller``) for
    ``stall_s`` in a thread, and ``__aenter__`` returns once the primary's own ``/admin`` says its
    lease lapsed. The checker reads the partition's segment files on the primary's disk
    (``log_bytes``) while ``fenced()`` still holds; leaving waits for the stall to end."""

    def __init__(self, cluster: LocalCluster, primary: str, partition: str, stall_s: float) -> None:
        self.cluster, self.primary, self.stall_s = cluster, primary, stall_s
        self.segments = cluster.dir / primary / partition
        self._stall = threading.Thread(target=stall_controller, args=(cluster, stall_s))

    def fenced(self) -> bool:
        return not self.cluster.mm_stats(self.primary)["lease_valid"]

    def log_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.segments.glob("*.log"))

    async def __aenter__(self) -> FencedPrimary:
        self._stall.start()
        try:
            await asyncio.to_thread(self.cluster.wait_until, self.fenced, self.stall_s, "the lease to lapse")
        except BaseException:
            await asyncio.to_thread(self._stall.join)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._stall.join)


def end_process(proc: subprocess.Popen[bytes], within: float = 60) -> None:
    """Stop a broker process the test started itself (SIGTERM, SIGKILL if it takes too long)."""
    proc.send_signal(signal.SIGCONT)  # a stopped process would not act on the SIGTERM
    proc.terminate()
    try:
        proc.wait(within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def stop_all(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    stop.set()
    for t in tasks:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(t, 45)


class StreamReader:
    """A checker of its own for on-demand GC: reads every partition by offset (fetch API) from
    where it stopped, like a stream query whose positions are its checkpoint."""

    def __init__(self, dest: str) -> None:
        self.dest = dest
        self.positions: dict[str, int] = {}
        self.seen: dict[str, list[tuple[str, int]]] = defaultdict(list)  # value -> positions

    async def catch_up(self, fetcher: Fetcher, within: float = 30.0) -> None:
        """Read every partition up to the committed end ``partitions()`` gave; a partition whose
        primary serves nothing below that end for ``within`` seconds fails the check, naming it."""
        for meta in await fetcher.partitions():
            start = self.positions.get(meta.name, meta.start_offset)
            async for b, skip in read_batches(fetcher, meta, start, stuck_s=within, gone_ok=True):
                self.positions[meta.name] = b.next_offset
                if b.control or b.destination != self.dest:
                    continue
                for i in range(skip, len(b.records)):
                    self.seen[bytes(b.records[i][0]).decode()].append((meta.name, b.base_offset + i))
            self.positions.setdefault(meta.name, start)

    async def commit(self, fetcher: Fetcher, reader: str) -> None:
        for name, offset in sorted(self.positions.items()):
            try:
                await fetcher.commit_reader(reader, name, offset)
            except ClientError as exc:
                if exc.code != ErrorCode.UNKNOWN_PARTITION:
                    raise

    def check(self, loads: list[ProducerLoad]) -> None:
        acked = [f"{ld.name}:{s}" for ld in loads for s in ld.acked]
        missing = [v for v in acked if v not in self.seen]
        assert not missing, (
            f"{len(missing)} of {len(acked)} acknowledged messages never read, e.g. {missing[:5]}"
        )
        twice = {v: p for v, p in self.seen.items() if len(p) > 1}
        assert not twice, f"{len(twice)} messages stored twice, e.g. {list(twice.items())[:3]}"
