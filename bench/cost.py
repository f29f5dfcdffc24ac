"""CPU per message of every broker process and of the client, from a quiet queue to a busy one.

For each replica count (``--replicas``, default 1 and 2) a cluster of 1 CM and 3 MMs (``hybridmq
local`` with its controller, one fixed partition with that many copies, ``minInSync`` = copies) and,
in this process, one producer and one consumer of one queue. At each rate (``--rates``, default
100, 1,000, 10,000 and 100,000 msg/s) the producer sends paced ``await send()`` calls (one task
per message, started every 10 ms, at most 2,000 awaiting their acknowledgement) for ``--seconds``
seconds, while the consumer receives and acknowledges each message; the figures are the CPU time
(user + system, from /proc through psutil) each broker process and this process used while the
messages were sent and consumed, over the messages consumed. A rate the cluster cannot reach is
reported with the rate it reached.

``--baseline-src DIR`` runs the same measurement with the brokers of another checkout (e.g.
``git worktree add /tmp/before <commit>``) right after each of this tree's, and adds the ratios.

Appends one JSON line to ``bench/results/cost.jsonl``; prints the curve and ends with
``cpu_ms_per_msg_100=… cpu_ms_per_msg_10k=…`` (the brokers' CPU per message at 100 and 10,000
msg/s with the largest replica count measured; ``…_old`` from the baseline).

    .venv/bin/python bench/cost.py [--rates 100,1000,10000,100000] [--replicas 1,2] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _results
from throughput import brokers_from

from hybridmq.broker.runtime import install_uvloop
from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster

PARTITION = "local-fixed-0"
TICK_S = 0.01
MAX_IN_FLIGHT = 2_000  # sends awaiting their acknowledgement; a rate past it is not reached


async def one_rate(
    bootstrap: str, dest: str, rate: int, seconds: float, procs: dict[str, psutil.Process]
) -> dict[str, Any]:
    producer = await Producer.connect(
        bootstrap, partition_type="fixed", partition=PARTITION, linger_ms=0, delivery_timeout=60
    )
    consumer = await Consumer.connect(bootstrap, dest)
    consumed = 0
    sent = 0
    caught_up = asyncio.Event()
    value = b"x" * 100

    async def consume() -> None:
        nonlocal consumed
        while True:
            await consumer.receive()
            consumed += 1
            if consumed >= sent and done_sending:
                caught_up.set()

    await producer.send(dest, b"warm-up")  # connections and routes in place before measuring
    await consumer.receive(timeout=30)
    done_sending = False
    reader = asyncio.create_task(consume())
    before = _results.cpu_seconds(procs)
    client_before = time.process_time()
    started = time.monotonic()
    in_flight: set[asyncio.Task[Any]] = set()
    per_tick = rate * TICK_S
    owed = 0.0
    tick = started
    while time.monotonic() - started < seconds:
        owed += per_tick
        while owed >= 1 and len(in_flight) < MAX_IN_FLIGHT:
            owed -= 1
            task = asyncio.create_task(producer.send(dest, value))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1
        owed = min(owed, per_tick)  # what could not be started is not owed later as a burst
        tick += TICK_S
        await asyncio.sleep(max(0.0, tick - time.monotonic()))
    if in_flight:
        await asyncio.gather(*in_flight)
    done_sending = True
    if consumed < sent:
        async with asyncio.timeout(60):
            await caught_up.wait()
    reader.cancel()
    took = time.monotonic() - started
    after = _results.cpu_seconds(procs)
    client_s = time.process_time() - client_before
    await producer.close()
    await consumer.close()
    per_process = {n: (after[n] - before[n]) / max(1, consumed) * 1e3 for n in procs}
    return {
        "rate": rate,
        "reached": round(consumed / took),
        "consumed": consumed,
        "broker_cpu_ms_per_msg": round(sum(per_process.values()), 4),
        "cpu_ms_per_msg": {n: round(v, 4) for n, v in per_process.items()},
        "client_cpu_us_per_msg": round(client_s / max(1, consumed) * 1e6, 1),
    }


def measure(replicas: int, args: argparse.Namespace, src: Path | None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="hmq-cost-") as tmp:
        cluster = LocalCluster(Path(tmp), mms=3, replicas=replicas, fixed=1, on_demand_per_mm=0)
        with brokers_from(src):
            cluster.start()
        try:
            procs = {n: psutil.Process(p.pid) for n, p in cluster.procs.items()}
            rows = []
            for rate in args.rates:
                row = asyncio.run(
                    one_rate(cluster.bootstrap, f"queue:cost-{rate}", rate, args.seconds, procs)
                )
                row["replicas"] = replicas
                row["brokers"] = "baseline" if src is not None else "this tree"
                rows.append(row)
                print(
                    f"{row['brokers']:>9}  replicas={replicas} rate={rate:>6} reached={row['reached']:>6}  "
                    f"brokers {row['broker_cpu_ms_per_msg']:.3f} ms/msg "
                    f"({', '.join(f'{n} {v:.3f}' for n, v in row['cpu_ms_per_msg'].items())})  "
                    f"client {row['client_cpu_us_per_msg']:.0f} us/msg",
                    flush=True,
                )
            return rows
        finally:
            cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--rates", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000, 10_000, 100_000]
    )
    ap.add_argument("--replicas", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    ap.add_argument("--seconds", type=float, default=5.0, help="sending time at each rate")
    ap.add_argument("--baseline-src", type=Path, help="a checkout whose brokers to measure too")
    args = ap.parse_args()
    if args.baseline_src is not None and not (args.baseline_src / "broker-image" / "hybridmq").is_dir():
        ap.error(
            f"--baseline-src {args.baseline_src}: no broker-image/hybridmq there (give a checkout's root)"
        )
    install_uvloop()
    load_before = _results.load_average()
    print(f"load average {load_before} on {psutil.cpu_count()} cores before measuring", flush=True)
    rows: list[dict[str, Any]] = []
    for replicas in args.replicas:
        rows += measure(replicas, args, None)
        if args.baseline_src is not None:
            rows += measure(replicas, args, args.baseline_src.resolve())

    def at(rate: int, brokers: str) -> str:
        top = max(args.replicas)
        found = [r for r in rows if r["rate"] == rate and r["replicas"] == top and r["brokers"] == brokers]
        return f"{found[0]['broker_cpu_ms_per_msg']:.3f}" if found else "n/a"

    summary = {"cpu_ms_per_msg_100": at(100, "this tree"), "cpu_ms_per_msg_10k": at(10_000, "this tree")}
    if args.baseline_src is not None:
        summary |= {
            "cpu_ms_per_msg_100_old": at(100, "baseline"),
            "cpu_ms_per_msg_10k_old": at(10_000, "baseline"),
        }
    _results.append(
        "cost",
        {
            "rows": rows,
            "seconds": args.seconds,
            **({"baseline_src": str(args.baseline_src)} if args.baseline_src else {}),
        },
        summary,
        load_before,
        echo=False,
    )


if __name__ == "__main__":
    main()
