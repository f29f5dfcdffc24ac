"""The kind demo's producer: numbered messages to one queue, each awaited, its acknowledgement time logged.

    python load.py PARTITION_TYPE        (in the broker image, from the demo's load Job)

Environment: HYBRIDMQ_BOOTSTRAP, HYBRIDMQ_TLS_CA (the CMs' CA), MESSAGES, PAUSE (seconds of pause
every 50 messages: the rate). Prints ``acked <n> <unix ms>`` for every acknowledgement, so that the
demo can tell when each producer was acknowledged again after a failure (the node's clock is the
host's: kind nodes are containers), and ``sent <n>`` at the end.

The delivery timeout is two minutes (Kafka's default): a message waits out a failover that needs a
standby operator to take over (its peering lifetime) instead of failing the producer.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from hybridmq.client import Producer

DELIVERY_TIMEOUT_S = 120.0


async def produce(partition_type: str) -> int:
    messages = int(os.environ["MESSAGES"])
    pause = float(os.environ["PAUSE"])
    key = f"demo-{partition_type}"
    async with await Producer.connect(
        os.environ["HYBRIDMQ_BOOTSTRAP"],
        partition_type=partition_type,
        key=key,
        ssl=os.environ.get("HYBRIDMQ_TLS_CA") or None,
        delivery_timeout=DELIVERY_TIMEOUT_S,
    ) as producer:
        for n in range(1, messages + 1):
            await producer.send("queue:demo", f"{key}-{n}".encode(), key=key)
            print(f"acked {n} {time.time_ns() // 1_000_000}", flush=True)
            if n % 50 == 0:
                await asyncio.sleep(pause)
    return messages


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in ("fixed", "on-demand"):
        sys.exit("usage: load.py fixed|on-demand")
    sent = asyncio.run(produce(sys.argv[1]))
    print(f"sent {sent}", flush=True)


if __name__ == "__main__":
    main()
