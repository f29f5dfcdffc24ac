"""No false failovers under CPU pressure, broker-only (``hybridmq local`` with its controller).

3 MMs with fixed partitions of 2 copies (``minInSync`` 2) and the shipped detection settings (the
1 s heartbeat lease, and the controller's watch on process exits). One producer per partition
awaits each send, under steady load; after ``--settle-s`` seconds, busy-loop processes take
``--hogs-per-core`` times the machine's cores for ``--pressure-s`` seconds; then ``--settle-s``
more. Nothing is faulted, so every epoch change is a false failover.

Reports:

* ``false_failovers``: partition epochs bumped during the run, plus the controller's
  ``MessageManagerLost`` events (an MM declared lost without a loss).
* ``max_ack_gap_s``: the longest time any producer waited between two acknowledgements (the
  pressure slows everything down; a failover would show as a gap of a lease or more).
* ``lost``: acknowledged messages that a consumer of the destination does not get afterwards
  (read back by this script's own consumer, against its own record of acknowledgements).

Appends one JSON line to ``bench/results/pressure.jsonl``; the output ends with
``false_failovers=… max_ack_gap_s=… lost=… acked=…``.

    .venv/bin/python bench/pressure.py [--pressure-s 60] [--hogs-per-core 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _results

from hybridmq.broker.runtime import install_uvloop
from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:pressure-bench"
HOG = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass"


class AckRecord:
    """One producer's acknowledged values and the longest wait between two acknowledgements."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.acked: list[bytes] = []
        self.max_gap_s = 0.0
        self.max_gap_at = 0.0

    async def run(self, producer: Producer, stop: asyncio.Event, started: float) -> None:
        last = time.monotonic()
        i = 0
        while not stop.is_set():
            value = b"%s-%d" % (self.name.encode(), i)
            await producer.send(DEST, value)
            now = time.monotonic()
            self.acked.append(value)
            if now - last > self.max_gap_s:
                self.max_gap_s, self.max_gap_at = now - last, now - started
            last = now
            i += 1


def start_hogs(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", HOG, str(seconds)]) for _ in range(count)]


async def read_back(bootstrap: str, expected: set[bytes], quiet_s: float = 10.0) -> set[bytes]:
    """What a consumer gets of the destination, until it has ``expected`` or gets nothing for
    ``quiet_s`` seconds."""
    got: set[bytes] = set()
    consumer = await Consumer.connect(bootstrap, DEST)
    try:
        while not expected <= got:
            try:
                message = await consumer.receive(timeout=quiet_s)
            except TimeoutError:
                break
            assert isinstance(message, Message)
            got.add(bytes(message.value))
            consumer.ack(message)
    finally:
        await consumer.close()
    return got


async def run(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, float | int]:
    partitions = sorted(a.name for a in cluster.partitions())
    epochs_before = {n: cluster.table()[n].epoch for n in partitions}
    since = time.time()  # the controller's events carry wall-clock times
    producers = [
        await Producer.connect(
            cluster.bootstrap, partition_type="fixed", partition=n, linger_ms=0, delivery_timeout=120
        )
        for n in partitions
    ]
    records = [AckRecord(n) for n in partitions]
    stop = asyncio.Event()
    started = time.monotonic()
    tasks = [asyncio.create_task(r.run(p, stop, started)) for r, p in zip(records, producers, strict=True)]
    await asyncio.sleep(args.settle_s)
    cores = os.cpu_count() or 1
    before = sum(len(r.acked) for r in records)
    hogs = start_hogs(args.hogs_per_core * cores, args.pressure_s)
    print(f"{len(hogs)} busy loops on {cores} cores for {args.pressure_s:.0f} s", flush=True)
    await asyncio.sleep(args.pressure_s)
    for h in hogs:
        h.wait()
    under = sum(len(r.acked) for r in records) - before
    await asyncio.sleep(args.settle_s)
    stop.set()
    await asyncio.gather(*tasks)
    for p in producers:
        await p.close()

    epochs_after = {n: cluster.table()[n].epoch for n in partitions}
    bumped = sum(epochs_after[n] - epochs_before[n] for n in partitions)
    events = cluster.state()["events"]
    lost_events = [e for e in events if e["time"] >= since and e["reason"] == "MessageManagerLost"]
    for e in lost_events:
        print(f"lost without a loss: {e['message']}", flush=True)
    acked = {v for r in records for v in r.acked}
    got = await read_back(cluster.bootstrap, acked)
    worst = max(records, key=lambda r: r.max_gap_s)
    print(
        f"longest ack gap {worst.max_gap_s:.3f} s ({worst.name}, {worst.max_gap_at:.1f} s into the run); "
        f"{under} acknowledged under pressure",
        flush=True,
    )
    return {
        "partitions": len(partitions),
        "hogs": len(hogs),
        "epochs_bumped": bumped,
        "mms_lost": len(lost_events),
        "false_failovers": bumped + len(lost_events),
        "max_ack_gap_s": round(worst.max_gap_s, 3),
        "acked": len(acked),
        "acked_under_pressure": under,
        "lost": len(acked - got),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pressure-s", type=float, default=60.0, help="how long the busy loops run")
    ap.add_argument("--hogs-per-core", type=int, default=2, help="busy-loop processes per core")
    ap.add_argument("--settle-s", type=float, default=5.0, help="steady load before and after")
    ap.add_argument("--partitions", type=int, default=3, help="fixed partitions (one producer each)")
    args = ap.parse_args()
    install_uvloop()
    load_before = _results.load_average()
    with tempfile.TemporaryDirectory(prefix="hmq-pressure-") as tmp:
        cluster = LocalCluster(Path(tmp), mms=3, replicas=2, fixed=args.partitions, on_demand_per_mm=0)
        with cluster:
            figures = asyncio.run(run(cluster, args))
    _results.append(
        "pressure",
        {**figures, "pressure_s": args.pressure_s, "settle_s": args.settle_s, "lease_s": 1.0},
        {
            "false_failovers": figures["false_failovers"],
            "max_ack_gap_s": f"{figures['max_ack_gap_s']:.3f}",
            "lost": figures["lost"],
            "acked": figures["acked"],
        },
        load_before,
    )


if __name__ == "__main__":
    main()
