"""One producer process of ``bench/scale.py``: a fixed-partition producer per partition named on
stdin (one name a line), each sending one message every ``--interval`` seconds and recording when
each send was acknowledged.

Runs until SIGTERM, then writes ``{partition: [ack times]}`` as JSON to ``--out`` (before closing
its producers); the times are ``time.monotonic()``, which is the same clock for every process of the
machine, so the parent compares them with its own. ``ready`` is printed once every partition has
had one acknowledgement. Acknowledged payloads are ``<partition>:<n>`` with ``n`` counting up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from hybridmq.client import ClientError, Producer


async def _one(
    bootstrap: str, name: str, interval: float, acks: list[float], first: asyncio.Event, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        try:
            producer = await Producer.connect(bootstrap, partition_type="fixed", partition=name)
            break
        except (ClientError, ConnectionError, OSError):
            await asyncio.sleep(0.5)
    else:
        return
    n = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await producer.send("queue:scale", f"{name}:{n}".encode())
            except (ClientError, ConnectionError):
                await asyncio.sleep(0.02)
                continue
            acks.append(time.monotonic())
            first.set()
            n += 1
            left = interval - (time.monotonic() - started)
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        await stop.wait()
                except TimeoutError:
                    pass
    finally:
        await producer.close()


async def main_async(args: argparse.Namespace, names: list[str]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    acks: dict[str, list[float]] = {n: [] for n in names}
    firsts = {n: asyncio.Event() for n in names}
    tasks = []
    for i, name in enumerate(names):
        tasks.append(
            asyncio.create_task(_one(args.bootstrap, name, args.interval, acks[name], firsts[name], stop))
        )
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # spread the connects
    # Ready once every partition had an ack; a stop before that ends the wait too.
    all_acked = asyncio.ensure_future(asyncio.gather(*(e.wait() for e in firsts.values())))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({all_acked, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if all_acked.done():
        print("ready", flush=True)
    await stopped
    all_acked.cancel()
    # Written before the producers close: a close that waits on an unacknowledged send must not
    # cost the acknowledgements recorded so far (the parent kills a process that takes too long).
    Path(args.out).write_text(json.dumps(acks))  # noqa: ASYNC240 - nothing else runs by now
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    names = [line.strip() for line in sys.stdin if line.strip()]
    asyncio.run(main_async(args, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
