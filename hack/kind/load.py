"""The kind demo's producer: numbered messages to one queue, each awaited, its acknowledgement time logged.

    python load.py PARTITION_TYPE        (in the broker image, from the demo's load Job)

Environment: HYBRIDMQ_BOOTSTRAP, HYBRIDMQ_TLS_CA (the CMs' CA), MESSAGES, PAUSE (seconds of pause
every 50 messages: the rate), STOP_FILE (optional: the producer stops early once this file exists,
checked at each pause; the demo's roll runs until the roll is done).

Prints ``acked <n> <unix ms> <send ms>`` for every acknowledgement (its time, and how long the send
waited for it), so that the demo can tell when each producer was acknowledged again after a failure
and how long a send stalled during a roll (the node's clock is the host's: kind nodes are
containers); the producer's send log (``<producer id>,<sequence>`` per acknowledged message, which
the demo gives the audit: every one of them must be stored); and ``sent <n>`` at the end.

The delivery timeout is two minutes (Kafka's default): a message waits out a failover that needs a
standby operator to take over (its peering lifetime) instead of failing the producer. Connecting is
retried for as long (a producer's first handshake can outwait its 3 s on a loaded machine, or the
Service's endpoints can lag behind the CMs' readiness), each failure printed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from hybridmq.client import Producer

DELIVERY_TIMEOUT_S = 120.0


async def connect(partition_type: str, key: str) -> Producer:
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while True:
        try:
            return await Producer.connect(
                os.environ["HYBRIDMQ_BOOTSTRAP"],
                partition_type=partition_type,
                key=key,
                ssl=os.environ.get("HYBRIDMQ_TLS_CA") or None,
                delivery_timeout=DELIVERY_TIMEOUT_S,
                send_log=sys.stdout,  # `<producer id>,<sequence>` per acknowledged message: the audit's input
            )
        except ConnectionError as exc:  # unreachable or silent; a refusal (ClientError) is not retried
            if time.monotonic() > deadline:
                raise
            print(f"connect failed ({exc}); retrying in 1 s", flush=True)
            await asyncio.sleep(1.0)


async def produce(partition_type: str) -> int:
    messages = int(os.environ["MESSAGES"])
    pause = float(os.environ["PAUSE"])
    stop_file = os.environ.get("STOP_FILE")
    key = f"demo-{partition_type}"
    async with await connect(partition_type, key) as producer:
        for n in range(1, messages + 1):
            began = time.perf_counter()
            await producer.send("queue:demo", f"{key}-{n}".encode(), key=key)
            waited_ms = (time.perf_counter() - began) * 1000
            print(f"acked {n} {time.time_ns() // 1_000_000} {waited_ms:.1f}", flush=True)
            if n % 50 == 0:
                if stop_file and os.path.exists(stop_file):  # noqa: ASYNC240 - once per 50 sends
                    return n
                await asyncio.sleep(pause)
    return messages


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in ("fixed", "on-demand"):
        sys.exit("usage: load.py fixed|on-demand")
    sent = asyncio.run(produce(sys.argv[1]))
    print(f"sent {sent}", flush=True)


if __name__ == "__main__":
    main()
