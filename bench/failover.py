"""Failover time and the cost of replication, broker-only (``hybridmq local`` with its controller).

1. Failover: 3 MMs, fixed partitions with ``--replicas`` copies (default 2, ``minInSync`` 2), a 1 s
   heartbeat lease. Each trial kills (SIGKILL) the current primary of ``local-fixed-0`` right after an
   acknowledged produce, then measures the time until the next produce on that same partition is
   acknowledged (detection by lease expiry + planner + new table pushed + promotion + the producer's
   resend). The killed MM is restarted and the cluster settles (every replica in sync) before the
   next trial.
2. Replication cost: the ``bench/throughput.py`` workload (one producer, one consumer, 100-byte
   messages) against the same kind of cluster with 1 replica and with 2; ``replicated_ratio`` =
   throughput(2) / throughput(1).

Appends one JSON line to ``bench/results/failover.jsonl``; the output ends with
``trials=… p50_s=… p99_s=… replicated_ratio=…``.

    .venv/bin/python bench/failover.py [--trials 20] [--messages 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _results
from throughput import run as throughput_run  # the bench/throughput.py workload

from hybridmq.broker.runtime import install_uvloop
from hybridmq.client import Producer
from hybridmq.local.runner import LocalCluster

PARTITION = "local-fixed-0"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def failover_trials(cluster: LocalCluster, trials: int) -> list[float]:
    producer = await Producer.connect(
        cluster.bootstrap, partition_type="fixed", partition=PARTITION, linger_ms=0, delivery_timeout=30
    )
    times: list[float] = []
    try:
        for i in range(trials):
            for j in range(20):  # some traffic, and an acknowledged produce right before the kill
                await producer.send("queue:failover-bench", b"before-%d-%d" % (i, j))
            victim = cluster.table()[PARTITION].primary
            assert victim is not None
            killed = time.monotonic()
            cluster.kill_mm(victim, signal.SIGKILL)
            await producer.send("queue:failover-bench", b"after-%d" % i)
            took = time.monotonic() - killed
            times.append(took)
            after = cluster.table()[PARTITION]
            print(
                f"trial {i + 1}: {victim} -> {after.primary} (epoch {after.epoch}) in {took:.3f}s", flush=True
            )
            cluster.start_mm(victim)
            await asyncio.to_thread(cluster.wait_in_sync, 60.0)
    finally:
        await producer.close()
    return times


def throughput(replicas: int, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory(prefix=f"hmq-failover-r{replicas}-") as tmp:
        cluster = LocalCluster(
            Path(tmp),
            mms=2,
            replicas=replicas,
            fixed=0,
            on_demand_per_mm=1,
            fsync=args.fsync,
            mm_args=["--max-backlog", str(args.max_backlog)],
        )
        with cluster:
            result = asyncio.run(
                throughput_run(
                    cluster.bootstrap,
                    args.messages,
                    100,
                    args.linger_ms,
                    args.batch_bytes,
                    args.window,
                    args.pending_bytes,
                )
            )
    print(f"throughput with {replicas} replica(s): {result['msgs_per_s']:.0f} msgs/s", flush=True)
    return result["msgs_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--replicas", type=int, default=2, help="copies of the fixed partitions in the trials")
    ap.add_argument("--lease-s", type=float, default=1.0)
    ap.add_argument("--messages", type=int, default=200_000, help="per throughput run")
    ap.add_argument("--linger-ms", type=float, default=2.0)
    ap.add_argument("--batch-bytes", type=int, default=64 * 1024)
    ap.add_argument("--window", type=int, default=4_000)
    ap.add_argument("--pending-bytes", type=int, default=500_000)
    ap.add_argument("--max-backlog", type=int, default=5_000)
    ap.add_argument("--fsync", default="group", choices=["group", "always", "never"])
    args = ap.parse_args()
    install_uvloop()
    load_before = _results.load_average()

    with tempfile.TemporaryDirectory(prefix="hmq-failover-") as tmp:
        cluster = LocalCluster(
            Path(tmp), mms=3, replicas=args.replicas, fixed=1, on_demand_per_mm=0, lease_s=args.lease_s
        )
        with cluster:
            times = asyncio.run(failover_trials(cluster, args.trials))
    single = throughput(1, args)
    double = throughput(2, args)
    ratio = double / single
    _results.append(
        "failover",
        {
            "trials": len(times),
            "replicas": args.replicas,
            "lease_s": args.lease_s,
            "p50_s": round(percentile(times, 0.5), 3),
            "p99_s": round(percentile(times, 0.99), 3),
            "max_s": round(max(times), 3),
            "failover_s": [round(t, 3) for t in times],
            "throughput_1_replica": round(single),
            "throughput_2_replicas": round(double),
            "replicated_ratio": round(ratio, 3),
            "messages": args.messages,
            "fsync": args.fsync,
        },
        {
            "trials": len(times),
            "p50_s": f"{percentile(times, 0.5):.3f}",
            "p99_s": f"{percentile(times, 0.99):.3f}",
            "replicated_ratio": f"{ratio:.2f}",
        },
        load_before,
    )


if __name__ == "__main__":
    main()
