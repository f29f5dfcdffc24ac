"""Transactions per second with 1, 2 and 3 participating MMs, next to plain sends of the same messages.

Starts ``hybridmq local`` (1 CM, 3 MMs, 3 fixed partitions with 2 replicas each, one primary per
MM, fsync group commit) as real subprocesses. ``--sessions`` transacted sessions (default 4) each
commit transactions of ``--per-tx`` messages (default 10, 100 bytes) one after the other, the
messages spread round robin over partitions led by 1, 2 or 3 MMs (1: one-phase commit, 2 and 3:
two-phase). The plain baseline, in the same run: as many producers each send the same units of
messages to the 3 partitions and await every acknowledgement before the next unit.

Appends one JSON line to ``bench/results/transactions.jsonl`` and ends with
``tx_per_s_1=… tx_per_s_3=… ratio_vs_plain=…`` (ratio: 3-MM transactions per second over plain
units per second).

    .venv/bin/python bench/transactions.py [--seconds 8] [--sessions 4] [--per-tx 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from hybridmq.client import Producer, Session
from hybridmq.local.runner import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results" / "transactions.jsonl"


def one_per_mm(cluster: LocalCluster) -> list[str]:
    by_mm: dict[str, str] = {}
    for name, a in sorted(cluster.table().items()):
        by_mm.setdefault(a.primary or "", name)
    return sorted(by_mm.values())


async def transactions(bootstrap: str, partitions: list[str], args: argparse.Namespace) -> float:
    """Transactions per second over ``partitions`` (``args.sessions`` sessions for ``args.seconds``)."""
    value = b"x" * args.size
    done = 0
    stop = time.monotonic() + args.seconds

    async def one_session() -> None:
        nonlocal done
        async with await Session.connect(bootstrap, transacted=True) as session:
            while time.monotonic() < stop:
                for i in range(args.per_tx):
                    await session.send("topic:txbench", value, partition=partitions[i % len(partitions)])
                await session.commit()
                done += 1

    start = time.monotonic()
    await asyncio.gather(*(one_session() for _ in range(args.sessions)))
    return done / (time.monotonic() - start)


async def plain(bootstrap: str, partitions: list[str], args: argparse.Namespace) -> float:
    """Units of ``args.per_tx`` acknowledged sends per second, the same spread and concurrency."""
    value = b"x" * args.size
    done = 0
    stop = time.monotonic() + args.seconds

    async def one_client() -> None:
        nonlocal done
        producers = [
            await Producer.connect(bootstrap, partition_type="fixed", partition=p, linger_ms=0)
            for p in partitions
        ]
        while time.monotonic() < stop:
            await asyncio.gather(
                *(producers[i % len(producers)].send("topic:txbench", value) for i in range(args.per_tx))
            )
            done += 1
        for p in producers:
            await p.close()

    start = time.monotonic()
    await asyncio.gather(*(one_client() for _ in range(args.sessions)))
    return done / (time.monotonic() - start)


async def measure(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, float]:
    spread = one_per_mm(cluster)
    if len(spread) < 3:
        raise SystemExit(f"need primaries on 3 MMs, got {cluster.table()}")
    out: dict[str, float] = {}
    for k in (1, 2, 3):
        out[f"tx_per_s_{k}"] = await transactions(cluster.bootstrap, spread[:k], args)
    out["plain_units_per_s"] = await plain(cluster.bootstrap, spread, args)
    out["ratio_vs_plain"] = out["tx_per_s_3"] / out["plain_units_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--per-tx", type=int, default=10)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as d,
        LocalCluster(Path(d), mms=3, replicas=2, fixed=3, on_demand_per_mm=0) as cluster,
    ):
        cluster.wait_in_sync()
        result = asyncio.run(measure(cluster, args))
    record = {
        "bench": "transactions",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "sessions": args.sessions,
        "per_tx": args.per_tx,
        "size": args.size,
        "seconds": args.seconds,
        **{k: round(v, 3) for k, v in result.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record))
    print(
        f"tx_per_s_1={result['tx_per_s_1']:.1f} tx_per_s_3={result['tx_per_s_3']:.1f} "
        f"ratio_vs_plain={result['ratio_vs_plain']:.2f}"
    )


if __name__ == "__main__":
    main()
