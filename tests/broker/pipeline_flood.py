"""An authenticated client that pipelines small frames, run as its own process beside a legitimate one.

``python pipeline_flood.py HOST:PORT --seconds S`` says HELLO, then for S seconds writes bursts of
20,000 PINGs at once (4-byte big-endian length + msgpack, built here by hand) and reads whatever
comes back. The last stdout line is JSON: PINGs sent, PONGs received, and the rate the PONGs came
at (from the first PING to the last PONG), which says how long the CM takes to serve one burst.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import time

import msgpack

HELLO, PING, PONG = 1, 50, 51
BURST = 20_000


def frame(body: dict[str, object]) -> bytes:
    data = msgpack.packb(body, use_bin_type=True)
    return struct.pack(">I", len(data)) + data


async def flood(host: str, port: int, seconds: float) -> dict[str, int]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(frame({"t": HELLO, "v": 1, "id": "pipeline-flood", "role": "client"}))
    await writer.drain()
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    await reader.readexactly(length)  # HELLO_OK
    counts = {"pings": 0, "pongs": 0}
    started = time.monotonic()
    last_pong = started

    async def read_replies() -> None:
        nonlocal last_pong
        unpacker = msgpack.Unpacker(raw=False)
        buffer = b""
        while chunk := await reader.read(1 << 20):
            buffer += chunk
            at = 0  # an offset, not a slice per frame: reading must not be what limits the rate
            while len(buffer) - at >= 4:
                (n,) = struct.unpack_from(">I", buffer, at)
                if len(buffer) - at < 4 + n:
                    break
                unpacker.feed(buffer[at + 4 : at + 4 + n])
                at += 4 + n
                counts["pongs"] += sum(1 for f in unpacker if f.get("t") == PONG)
            buffer = buffer[at:]
            last_pong = time.monotonic()

    replies = asyncio.create_task(read_replies())
    end = time.monotonic() + seconds
    corr = 0
    while time.monotonic() < end:
        burst = b"".join(frame({"t": PING, "c": corr + i}) for i in range(1, BURST + 1))
        corr += BURST
        writer.write(burst)
        await writer.drain()
        counts["pings"] += BURST
    deadline = time.monotonic() + 10  # the replies to what was sent last are still coming
    while counts["pongs"] < counts["pings"] and time.monotonic() < deadline:  # noqa: ASYNC110 - polls a count
        await asyncio.sleep(0.05)
    writer.close()
    replies.cancel()
    return {**counts, "pongs_per_s": round(counts["pongs"] / max(last_pong - started, 1e-3))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    host, _, port = a.address.rpartition(":")
    print(json.dumps(asyncio.run(flood(host, int(port), a.seconds))), flush=True)


if __name__ == "__main__":
    main()
