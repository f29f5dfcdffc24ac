"""Queue work sharing: N workers on one queue, each taking a fixed time per message.

    .venv/bin/python bench/queue_work.py [--workers 4] [--messages 2000] [--work-ms 5]
                                         [--window 10] [--slow 0] [--slow-factor 10]

Starts 1 CM + 1 MM as real subprocesses (``LocalCluster``), then in this process ``--workers``
consumers of one queue (each its own connection, ``auto_ack=False``, prefetch ``--window``): each
"processes" a message for ``--work-ms`` (``--slow`` of them ``--slow-factor`` times longer), then
acknowledges it. One producer sends every message at once (``asyncio.gather`` over the sends: the
client batches them, so the broker stores large batches). Measured:

* ``msgs_per_s``: messages / (first send -> last acknowledgement confirmed), against
  ``ideal_msgs_per_s``, what the workers' processing time allows;
* ``worker_share_min`` / ``worker_share_max``: the smallest and largest fraction of the messages
  one worker processed (equal workers: 1/N each at best);
* ``redelivered``: deliveries flagged as redeliveries (none expected: nobody fails).

Appends one JSON line to ``bench/results/queue_work.jsonl`` and ends with one key=value line.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import _results  # bench/, the script's directory

from hybridmq.broker.runtime import install_uvloop
from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

QUEUE = "queue:bench.work"


async def worker(
    consumer: Consumer, work_s: float, counts: list[int], index: int, state: dict[str, int]
) -> None:
    """Process (sleep) and acknowledge one message after the other until every one is done."""
    while state["done"] < state["messages"]:
        try:
            m = await consumer.receive(timeout=0.2)
        except TimeoutError:
            continue
        assert isinstance(m, Message)
        if m.redelivered:
            state["redelivered"] += 1
        await asyncio.sleep(work_s)
        consumer.ack(m)
        counts[index] += 1
        state["done"] += 1


async def run(bootstrap: str, args: argparse.Namespace) -> dict[str, float]:
    times = [args.work_ms / 1000 * (args.slow_factor if i < args.slow else 1) for i in range(args.workers)]
    consumers = [
        await Consumer.connect(bootstrap, QUEUE, window=args.window, auto_ack=False)
        for _ in range(args.workers)
    ]
    counts = [0] * args.workers
    state = {"done": 0, "messages": args.messages, "redelivered": 0}
    producer = await Producer.connect(bootstrap, linger_ms=args.linger_ms)
    start = time.monotonic()
    tasks = [
        asyncio.create_task(worker(c, t, counts, i, state))
        for i, (c, t) in enumerate(zip(consumers, times, strict=True))
    ]
    await asyncio.gather(*(producer.send(QUEUE, b"job-%d" % i) for i in range(args.messages)))
    async with asyncio.timeout(args.timeout):
        await asyncio.gather(*tasks)
    for c in consumers:
        await c.commit()  # every acknowledgement confirmed
    elapsed = time.monotonic() - start
    await producer.close()
    for c in consumers:
        await c.close()
    shares = [n / args.messages for n in counts]
    return {
        "msgs_per_s": args.messages / elapsed,
        "ideal_msgs_per_s": sum(1 / t for t in times),
        "worker_share_min": min(shares),
        "worker_share_max": max(shares),
        "redelivered": state["redelivered"],
        "elapsed_s": elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--messages", type=int, default=2_000)
    ap.add_argument("--work-ms", type=float, default=5.0, help="processing time per message")
    ap.add_argument("--window", type=int, default=10, help="each worker's prefetch (records)")
    ap.add_argument("--slow", type=int, default=0, help="how many workers are slower")
    ap.add_argument("--slow-factor", type=float, default=10.0, help="how much slower they are")
    ap.add_argument("--linger-ms", type=float, default=5.0, help="producer batching")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    install_uvloop()
    load_before = _results.load_average()  # other work on the box skews the numbers: record it
    with (
        tempfile.TemporaryDirectory(prefix="hmq-bench-") as tmp,
        LocalCluster(Path(tmp), mms=1, fixed_per_mm=1, on_demand_per_mm=1) as cluster,
    ):
        result = asyncio.run(run(cluster.bootstrap, args))
    _results.append(
        "queue_work",
        {
            "workers": args.workers,
            "messages": args.messages,
            "work_ms": args.work_ms,
            "window": args.window,
            "slow": args.slow,
            "slow_factor": args.slow_factor,
            "linger_ms": args.linger_ms,
            **{k: round(v, 3) for k, v in result.items()},
        },
        {
            k: f"{result[k]:.3f}"
            for k in ("msgs_per_s", "worker_share_min", "worker_share_max", "redelivered")
        },
        load_before,
    )


if __name__ == "__main__":
    main()
