"""Wrong-password HELLOs, run as its own process beside a legitimate client.

``python password_flood.py HOST:PORT --user U --seconds S --workers W`` keeps W connections at a time
sending a HELLO with a fresh wrong password for U, reading the answer and closing, for S seconds.
Frames are built here by hand (4-byte big-endian length + msgpack), independently of the broker's
codec. The last stdout line is JSON: how many HELLOs were answered with what (``HELLO_OK``, the
error code of an ``ERROR``, ``no_answer``, ``connect_failed``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import time
from collections import Counter

import msgpack

HELLO, HELLO_OK, ERROR = 1, 2, 3  # frame types of the wire protocol


async def answer(reader: asyncio.StreamReader) -> str:
    try:
        (size,) = struct.unpack(">I", await reader.readexactly(4))
        reply = msgpack.unpackb(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return "no_answer"
    if reply.get("t") == ERROR:
        return f"error_{reply.get('code')}"
    return "hello_ok" if reply.get("t") == HELLO_OK else f"frame_{reply.get('t')}"


async def one(host: str, port: int, user: str, n: int) -> str:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    except (OSError, TimeoutError):
        return "connect_failed"
    try:
        body = msgpack.packb(
            {
                "t": HELLO,
                "v": 1,
                "id": f"guess-{n}",
                "role": "client",
                "user": user,
                "password": f"guess-{n}",
            }
        )
        writer.write(struct.pack(">I", len(body)) + body)
        await writer.drain()
        return await asyncio.wait_for(answer(reader), 30)
    except (OSError, TimeoutError):
        return "no_answer"
    finally:
        writer.close()


async def flood(address: str, user: str, seconds: float, workers: int) -> Counter[str]:
    host, _, port = address.rpartition(":")
    answers: Counter[str] = Counter()
    end = time.monotonic() + seconds
    sent = iter(range(1 << 62))

    async def worker() -> None:
        while time.monotonic() < end:
            answers[await one(host, int(port), user, next(sent))] += 1

    await asyncio.gather(*(worker() for _ in range(workers)))
    return answers


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("--user", default="alice")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=32)
    args = p.parse_args()
    os.nice(10)  # the flood's own CPU is not the broker's doing
    print(json.dumps(asyncio.run(flood(args.address, args.user, args.seconds, args.workers))), flush=True)


if __name__ == "__main__":
    main()
