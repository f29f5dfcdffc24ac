"""A queue worker in a process of its own, for the tests that kill it.

    python queue_worker.py BOOTSTRAP QUEUE JOURNAL [--delay S] [--window N]

Receives, "processes" each message for ``--delay`` seconds, acknowledges it, and appends to
JOURNAL (one line each, flushed at once, so a kill -9 loses nothing written):
``R <value> <delivery_count> <time>`` when it got a message, ``A <value>`` when it sent its
acknowledgement and ``C <value> <time>`` when the broker confirmed it (wall-clock times, comparable
with the test's own).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import IO, Any

from hybridmq.client import Consumer, Message


def _write(journal: IO[str], line: str) -> None:
    journal.write(line + "\n")
    journal.flush()


async def main(args: argparse.Namespace, journal: IO[str]) -> None:
    consumer = await Consumer.connect(args.bootstrap, args.queue, window=args.window, auto_ack=False)
    _write(journal, f"S {time.time()}")  # subscribed

    def confirmed(value: str, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            _write(journal, f"C {value} {time.time()}")

    while True:
        try:
            m = await consumer.receive(timeout=1)
        except TimeoutError:
            continue
        assert isinstance(m, Message)
        value = m.value.decode()
        _write(journal, f"R {value} {m.delivery_count} {time.time()}")
        await asyncio.sleep(args.delay)
        fut = consumer.ack(m)
        _write(journal, f"A {value}")
        if fut is not None:
            fut.add_done_callback(lambda f, v=value: confirmed(v, f))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("queue")
    parser.add_argument("journal")
    parser.add_argument("--delay", type=float, default=0.005)
    parser.add_argument("--window", type=int, default=20)
    arguments = parser.parse_args()
    with open(arguments.journal, "a", encoding="utf-8") as out:
        asyncio.run(main(arguments, out))
