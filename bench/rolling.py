"""Planned stops without a stall: every MM stopped gracefully (SIGTERM) one after the other, under
load, against a kill -9 of a primary in the same run (the baseline).

3 MMs heartbeating to the local controller (``hybridmq local``, 1 s lease), fixed partitions with 2
replicas (``minInSync`` 2), one producer per partition sending at a steady rate (``--rate`` messages
a second each, every send awaited on its own). Phases:

1. before: steady load (``--before`` seconds);
2. roll: each MM gets SIGTERM (graceful handoff: its primaries move to in-sync backups at epoch + 1,
   its backups once a replacement caught up, then it exits), is started again and the cluster
   settles (every replica in sync, primaries balanced back onto it) before the next one;
3. kill: the primary of the first partition is killed (SIGKILL), started again, the cluster settles.

A message's stall is the time from its send to its acknowledgement. Then a consumer reads the queue
and a reader of its own reads every partition's log by offset (fetch API), and the run checks, with
its own bookkeeping: every send was acknowledged (``failed_sends``), every acknowledged message is
stored (``lost``: neither consumed nor in any log; ``unconsumed``: the consumer gave up first), no
message is stored twice and each producer's messages are in order within their partition.
``failovers_while_reading`` counts the controller's failovers while the consumer read and ``dmq``
the records moved to ``queue:_DMQ``: each lease lapse meanwhile makes the new primary count every
outstanding record as delivered once more, until it reaches the maximum redeliveries and goes to
``_DMQ`` (it stays in its partition's log, so it is not ``lost``).

Appends one JSON line to ``bench/results/rolling.jsonl``; the last line of the output is
``failed_sends=… lost=… max_stall_ms=… p99_ms_during=… p99_ms_before=… max_stall_ms_kill=…
unconsumed=… failovers_while_reading=… dmq=…``.

``--operator``: the roll done by the operator on the local Kubernetes cluster, triggered by the
restart annotation (``rolling_operator.py``); same figures, no kill phase.

``--kind``: the same roll on a kind cluster, images built from our Dockerfiles, the chart installed,
the producers in a Job on the cluster (``rolling_kind.py``: the kind demo with ``FAILURE=roll``);
``max_stall_ms`` is the MMs' part of the roll, ``max_stall_ms_cms`` the CMs' part.

    .venv/bin/python bench/rolling.py [--partitions 3] [--rate 100] [--before 3] [--operator | --kind]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import signal
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import _results  # bench/, the script's directory

from hybridmq.broker.runtime import install_uvloop
from hybridmq.client import ClientError, Consumer, Fetcher, Message, Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:rolling"
DMQ = "queue:_DMQ"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Sent:
    at: float
    acked_at: float | None = None
    position: tuple[str, int] | None = None


@dataclass
class SteadyProducer:
    """Sends ``<name>:<seq>`` every 1/rate s, each send awaited on its own task."""

    name: str
    producer: Producer
    rate: float
    sent: dict[int, Sent] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()
        seq, start = 0, loop.time()

        async def one(n: int) -> None:
            record = self.sent[n] = Sent(loop.time())
            try:
                ack = await self.producer.send(DEST, f"{self.name}:{n}".encode())
            except (ClientError, ConnectionError) as exc:
                self.failed.append(f"{n}: {exc}")
                return
            record.acked_at = loop.time()
            record.position = (ack.partition, ack.offset)

        while not stop.is_set():
            task = asyncio.create_task(one(seq))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            seq += 1
            await asyncio.sleep(max(0.0, start + seq / self.rate - loop.time()))
        if tasks:
            await asyncio.wait(tasks, timeout=60)

    def stalls_ms(self, since: float, until: float) -> list[float]:
        """Send-to-acknowledgement times of the messages sent in [since, until) (unacknowledged
        ones count until ``until``... or now)."""
        now = asyncio.get_running_loop().time()
        return [
            ((s.acked_at if s.acked_at is not None else now) - s.at) * 1000
            for s in self.sent.values()
            if since <= s.at < until
        ]


async def steady_producers(bootstrap: str, partitions: list[str], rate: float) -> list[SteadyProducer]:
    """One steady producer per fixed partition, each send on its own (no linger)."""
    return [
        SteadyProducer(
            f"p{i}",
            await Producer.connect(
                bootstrap, partition_type="fixed", partition=name, linger_ms=0, delivery_timeout=60
            ),
            rate,
        )
        for i, name in enumerate(partitions)
    ]


async def steady_load(
    bootstrap: str, partitions: list[str], rate: float, before: float
) -> tuple[list[SteadyProducer], asyncio.Event, list[asyncio.Task[None]], float]:
    """Steady producers running for ``before`` seconds: (producers, stop, their tasks, start)."""
    producers = await steady_producers(bootstrap, partitions, rate)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(p.run(stop)) for p in producers]
    t0 = asyncio.get_running_loop().time()
    await asyncio.sleep(before)
    return producers, stop, tasks, t0


async def consume_all(bootstrap: str, want: set[str], idle: float) -> dict[tuple[str, int], str]:
    """Read the queue until every wanted message came, or nothing came for ``idle`` seconds (a
    loaded machine reads slowly: a fixed deadline would report slowness as loss)."""
    stored: dict[tuple[str, int], str] = {}
    consumer = await Consumer.connect(bootstrap, DEST)
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle and not want <= set(stored.values()):
            try:
                msg = await consumer.receive(timeout=0.5)
            except TimeoutError:
                continue
            if isinstance(msg, Message):
                stored[(msg.partition, msg.offset)] = msg.value.decode()
                last = time.monotonic()
    finally:
        await consumer.close()
    return stored


async def read_logs(bootstrap: str) -> tuple[dict[tuple[str, int], str], int]:
    """Every message of the destination as the partitions' logs hold it (fetch API, by offset):
    what a consumer that stalled behind a starved machine did not get is still there; and how
    many of its records were moved to ``queue:_DMQ`` (maximum redeliveries: failovers while the
    consumer read count each outstanding record as delivered once more)."""
    out: dict[tuple[str, int], str] = {}
    dmq = 0
    fetcher = await Fetcher.connect(bootstrap, retry_s=60)
    try:
        for meta in await fetcher.partitions():
            offset = meta.start_offset
            while offset < meta.end_offset:
                result = await fetcher.fetch(meta.name, offset, max_offset=meta.end_offset, internal=True)
                for b in result.batches:
                    if not b.control and b.destination == DMQ:
                        dmq += len(b.records)
                    if b.control or b.destination != DEST:
                        continue
                    for i, record in enumerate(b.records):
                        out[(meta.name, b.base_offset + i)] = bytes(record[0]).decode()
                offset = result.next_offset
    finally:
        await fetcher.close()
    return out, dmq


def verdict(
    producers: list[SteadyProducer], stored: dict[tuple[str, int], str], logs: dict[tuple[str, int], str]
) -> dict[str, int]:
    acked = {f"{p.name}:{n}" for p in producers for n, s in p.sent.items() if s.acked_at is not None}
    values = set(stored.values())
    in_logs = set(logs.values())
    stored = {**logs, **stored}  # order and duplicates over everything stored
    positions: dict[str, int] = defaultdict(int)
    for v in stored.values():
        positions[v] += 1
    by_partition: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), v in stored.items():
        name, _, seq = v.rpartition(":")
        by_partition[(partition, name)].append((offset, int(seq)))
    out_of_order = 0
    for items in by_partition.values():
        seqs = [s for _, s in sorted(items)]
        out_of_order += sum(1 for a, b in itertools.pairwise(seqs) if b < a)
    return {
        "acked": len(acked),
        "failed_sends": sum(
            len(p.failed) + sum(1 for s in p.sent.values() if s.acked_at is None) for p in producers
        ),
        "lost": len(acked - in_logs - values),  # acknowledged, and neither consumed nor in any log
        "unconsumed": len(acked - values),  # the consumer gave up first (a starved machine)
        "duplicates": sum(1 for n in positions.values() if n > 1),
        "out_of_order": out_of_order,
    }


def balanced(cluster: LocalCluster) -> bool:
    led = dict.fromkeys(cluster.mm_names, 0)
    for a in cluster.table().values():
        if a.primary is not None:
            led[a.primary] += 1
    return max(led.values()) - min(led.values()) <= 1


async def settle(cluster: LocalCluster) -> None:
    """Every replica in sync and the primaries balanced again (what a roll waits for)."""
    await asyncio.to_thread(cluster.wait_in_sync, 60)
    await asyncio.to_thread(cluster.wait_until, lambda: balanced(cluster), 60, "primaries balanced")
    await asyncio.to_thread(cluster.wait_in_sync, 60)


async def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="hmq-rolling-") as tmp:
        cluster = LocalCluster(
            Path(tmp), mms=3, replicas=2, fixed=args.partitions, on_demand_per_mm=0, log_level="WARNING"
        )
        with cluster:
            await settle(cluster)
            names = sorted(cluster.table())
            producers, stop, tasks, t0 = await steady_load(cluster.bootstrap, names, args.rate, args.before)
            loop = asyncio.get_running_loop()
            roll_start = loop.time()
            handoff_s: list[float] = []
            for mm in cluster.mm_names:
                began = time.monotonic()
                await asyncio.to_thread(cluster.kill_mm, mm, signal.SIGTERM)  # returns once it exited
                handoff_s.append(time.monotonic() - began)
                await asyncio.to_thread(cluster.start_mm, mm)
                await settle(cluster)
                await asyncio.sleep(1.0)
            roll_end = loop.time()
            victim = cluster.table()[names[0]].primary
            assert victim is not None
            cluster.kill_mm(victim, signal.SIGKILL)
            await asyncio.sleep(3.0)
            kill_end = loop.time()
            await asyncio.to_thread(cluster.start_mm, victim)
            await settle(cluster)
            stop.set()
            await asyncio.gather(*tasks)
            want = {f"{p.name}:{n}" for p in producers for n, s in p.sent.items() if s.acked_at is not None}
            failovers_before = len(cluster.state().get("failovers", []))
            stored = await consume_all(cluster.bootstrap, want, 30)
            failovers_reading = len(cluster.state().get("failovers", [])) - failovers_before
            logs, dmq = await read_logs(cluster.bootstrap)
            for p in producers:
                await p.producer.close()
            handoffs = len(cluster.state().get("handoffs", []))
        before = [x for p in producers for x in p.stalls_ms(t0 + 0.5, roll_start)]
        # Sent up to half a second before the kill (the roll had settled a second earlier): a message
        # sent just before the kill waits for its failover and belongs to the kill's figure.
        during = [x for p in producers for x in p.stalls_ms(roll_start, roll_end - 0.5)]
        kill = [x for p in producers for x in p.stalls_ms(roll_end - 0.5, kill_end)]
        result: dict[str, object] = {
            **verdict(producers, stored, logs),
            "max_stall_ms": round(max(during, default=0.0), 1),
            "p99_ms_during": round(percentile(during, 0.99), 1),
            "p99_ms_before": round(percentile(before, 0.99), 1),
            "max_stall_ms_kill": round(max(kill, default=0.0), 1),
            "handoffs": handoffs,
            "failovers_while_reading": failovers_reading,
            "dmq": dmq,
            "sigterm_to_exit_s": [round(x, 3) for x in handoff_s],
        }
        return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=3, help="fixed partitions (2 replicas each)")
    parser.add_argument("--rate", type=float, default=100.0, help="messages a second per producer")
    parser.add_argument("--before", type=float, default=3.0, help="seconds of steady load before the roll")
    parser.add_argument(
        "--operator",
        action="store_true",
        help="the roll done by the operator on the local Kubernetes cluster (restart annotation)",
    )
    parser.add_argument(
        "--kind",
        action="store_true",
        help="the roll done by the operator on a kind cluster (hack/kind-demo.sh FAILURE=roll)",
    )
    args = parser.parse_args()
    install_uvloop()
    load_before = _results.load_average()
    if args.kind:
        from rolling_kind import run_kind

        result = run_kind(args)
    elif args.operator:
        from rolling_operator import run_operator

        result = run_operator(args)
    else:
        result = asyncio.run(run(args))
    keys = (
        "failed_sends",
        "lost",
        "max_stall_ms",
        "p99_ms_during",
        "p99_ms_before",
        "max_stall_ms_kill",
        "max_stall_ms_cms",
        "unconsumed",
        "failovers_while_reading",
        "dmq",
    )
    figures = {"host": platform.node(), "partitions": args.partitions, "rate": args.rate, **result}
    _results.append("rolling", figures, {k: figures[k] for k in keys if k in figures}, load_before)


if __name__ == "__main__":
    main()
