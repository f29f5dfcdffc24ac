"""A flood of malformed connections, run as its own process beside a legitimate client.

``python flood_client.py HOST:PORT [HOST:PORT ...] --count N`` opens N connections to each address
(a few at a time) and sends each one, in turn, random bytes, a truncated frame (a length prefix
promising more than follows) or a well-formed frame that is not HELLO, then closes it. Frames are
built here by hand (4-byte big-endian length + msgpack), independently of the broker's codec. The
last stdout line is JSON: connections made per address and kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct

import msgpack

KINDS = ("random", "truncated", "pre_hello")


def payload(kind: str) -> bytes:
    if kind == "random":
        return os.urandom(64)
    if kind == "truncated":
        body = msgpack.packb({"t": "HELLO", "v": 1, "user": "x" * 50})
        return struct.pack(">I", len(body) + 100) + body  # 100 bytes short, then closed
    body = msgpack.packb({"t": "PRODUCE", "c": 1, "d": "topic:x", "n": 1, "b": b"\x90"})
    return struct.pack(">I", len(body)) + body


async def one(host: str, port: int, kind: str) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(payload(kind))
        await writer.drain()
        await asyncio.sleep(0.01)
    except OSError:
        pass
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


async def flood(addresses: list[str], count: int, concurrency: int) -> dict[str, dict[str, int]]:
    made = {a: dict.fromkeys(KINDS, 0) for a in addresses}
    limit = asyncio.Semaphore(concurrency)

    async def run(address: str, i: int) -> None:
        host, _, port = address.rpartition(":")
        kind = KINDS[i % len(KINDS)]
        async with limit:
            if await one(host, int(port), kind):
                made[address][kind] += 1

    await asyncio.gather(*(run(a, i) for i in range(count) for a in addresses))
    return made


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("addresses", nargs="+")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=20)
    args = p.parse_args()
    print(json.dumps(asyncio.run(flood(args.addresses, args.count, args.concurrency))), flush=True)


if __name__ == "__main__":
    main()
