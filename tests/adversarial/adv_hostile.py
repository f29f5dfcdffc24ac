"""Hostile clients, run as their own process beside a legitimate client (``test_hostile.py``).

Raw sockets and msgpack only (no project code: a hostile client would not use our library). Flood
windows are wall-clock slots shared with the test: window ``i`` is ``[start + i*w, start + (i+1)*w)``
and the odd ones are floods, so quiet and flood windows alternate under the same machine load.

Attacks (picked at random, seeded): random bytes; truncated frames; oversized frames; half-open
connections held open; frames before HELLO; forged peer HELLOs to MM ports (``role=cm`` with no or a
wrong cluster secret) followed by PRODUCE; wrong passwords; an authenticated user producing where
its ACL forbids; that user subscribing with glob/regex patterns that reach another user's queues.
Every record it tries to write carries ``HOSTILE|``; the test then looks for that mark everywhere.
Writes a JSON report: what each attack got (e.g. a forged PRODUCE acknowledged, a leaked delivery).

    python adv_hostile.py --config hostile.json --out report.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import struct
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack

MARK = b"HOSTILE|"
HELLO, HELLO_OK, ERROR, OK, PRODUCE, PRODUCE_ACK, SUBSCRIBE, DELIVER = 1, 2, 3, 4, 11, 12, 20, 22


def frame(body: dict[str, Any]) -> bytes:
    data = msgpack.packb(body, use_bin_type=True)
    return struct.pack(">I", len(data)) + data


def records(tag: str) -> bytes:
    return msgpack.packb([[MARK + tag.encode(), None, None, int(time.time() * 1000)]], use_bin_type=True)


async def read_frame(reader: asyncio.StreamReader, wait_s: float) -> dict[str, Any] | None:
    try:
        header = await asyncio.wait_for(reader.readexactly(4), wait_s)
        (length,) = struct.unpack(">I", header)
        if length > 64 << 20:
            return None
        body = msgpack.unpackb(await asyncio.wait_for(reader.readexactly(length), wait_s), raw=False)
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError, msgpack.UnpackException):
        return None
    return body if isinstance(body, dict) else None


class Hostile:
    def __init__(self, cfg: dict[str, Any], rng: random.Random) -> None:
        self.cfg = cfg
        self.rng = rng
        self.stats: Counter[str] = Counter()
        self.held: list[asyncio.StreamWriter] = []
        self.leaks: list[str] = []
        self.until = 0.0  # wall-clock end of the current flood window

    async def _open(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)

    def _target(self) -> int:
        return int(self.rng.choice([self.cfg["cm_port"], *self.cfg["mm_ports"]]))

    async def _hello(
        self, port: int, **fields: Any
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        reader, writer = await self._open(port)
        writer.write(frame({"t": HELLO, "v": 1, "id": f"h-{self.rng.randrange(1 << 30)}", **fields}))
        await writer.drain()
        reply = await read_frame(reader, 5)
        return reader, writer, bool(reply and reply.get("t") == HELLO_OK)

    async def _produce(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict[str, Any]
    ) -> bool:
        """True when the broker acknowledged the write (it must not)."""
        writer.write(frame({"t": PRODUCE, "c": 1, "n": 1, "f": 0, "x": 0, **body}))
        await writer.drain()
        for _ in range(5):
            reply = await read_frame(reader, 3)
            if reply is None:
                return False
            if reply.get("r") == 1:
                return bool(reply.get("t") == PRODUCE_ACK)
        return False

    # -- attacks -----------------------------------------------------------------------------------
    async def random_bytes(self) -> None:
        _, writer = await self._open(self._target())
        writer.write(self.rng.randbytes(self.rng.randrange(1, 4096)))
        await writer.drain()
        writer.close()

    async def truncated(self) -> None:
        _, writer = await self._open(self._target())
        body = frame({"t": HELLO, "v": 1, "id": "trunc", "user": "x" * 200})
        writer.write(body[: self.rng.randrange(1, len(body) - 1)])
        await writer.drain()
        writer.close()

    async def oversized(self) -> None:
        reader, writer = await self._open(self._target())
        writer.write(struct.pack(">I", self.rng.choice([(64 << 20) + 1, 0x7FFFFFFF, 0xFFFFFFFF])) + b"\x81")
        await writer.drain()
        reply = await read_frame(reader, 3)
        self.stats[
            "oversized_error_reply" if reply and reply.get("t") == ERROR else "oversized_no_reply"
        ] += 1
        writer.close()

    async def half_open(self) -> None:
        _, writer = await self._open(self._target())
        writer.write(b"\x00\x00")  # half a length prefix, then silence
        await writer.drain()
        self.held.append(writer)
        if len(self.held) > 150:
            self.held.pop(0).close()

    async def pre_hello(self) -> None:
        reader, writer = await self._open(self.cfg["cm_port"])
        accepted = await self._produce(
            reader,
            writer,
            {"p": self.cfg["partitions"][0][0], "d": "queue:alice.work", "b": records("pre-hello")},
        )
        self.stats["pre_hello_accepted" if accepted else "pre_hello_refused"] += 1
        writer.close()

    async def forged_peer(self) -> None:
        port = int(self.rng.choice(self.cfg["mm_ports"]))
        secret = self.rng.choice([None, "", "wrong-secret", "cm"])
        fields: dict[str, Any] = {"role": "cm", "user": "cm"}
        if secret is not None:
            fields["password"] = secret
        reader, writer, ok = await self._hello(port, **fields)
        if ok:
            name, epoch = self.rng.choice(self.cfg["partitions"])
            accepted = await self._produce(
                reader, writer, {"p": name, "e": epoch, "d": "queue:alice.work", "b": records("forged-peer")}
            )
            self.stats["forged_peer_produce_acked" if accepted else "forged_peer_produce_refused"] += 1
        self.stats["forged_peer_hello_ok" if ok else "forged_peer_hello_refused"] += 1
        writer.close()

    async def bad_password(self) -> None:
        reader, writer, ok = await self._hello(
            self.cfg["cm_port"], role="client", user="alice", password=f"guess-{self.rng.randrange(1000)}"
        )
        self.stats["bad_password_hello_ok" if ok else "bad_password_refused"] += 1
        if ok:
            accepted = await self._produce(
                reader, writer, {"p": None, "d": "queue:alice.work", "b": records("bad-pw")}
            )
            self.stats["bad_password_produce_acked" if accepted else "bad_password_produce_refused"] += 1
        writer.close()

    async def _as_bob(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        reader, writer, ok = await self._hello(self.cfg["cm_port"], role="client", **self.cfg["bob"])
        if ok:
            return reader, writer
        self.stats["bob_hello_refused"] += 1
        writer.close()
        return None

    async def unauthorized_produce(self) -> None:
        if (bob := await self._as_bob()) is None:
            return
        reader, writer = bob
        writer.write(frame({"t": 10, "c": 7, "ptype": "on-demand"}))  # OPEN_PRODUCER: bob may open one
        await writer.drain()
        opened = await read_frame(reader, 5)
        partition = (opened or {}).get("partition")
        dest = self.rng.choice(
            ["queue:alice.work", "queue:alice.other", "topic:alice.t", "queue:_DMQ", "topic:_LOG"]
        )
        accepted = await self._produce(
            reader, writer, {"p": partition, "d": dest, "b": records("unauthorized")}
        )
        self.stats["unauthorized_produce_acked" if accepted else "unauthorized_produce_refused"] += 1
        writer.close()

    async def acl_probe(self) -> None:
        if (bob := await self._as_bob()) is None:
            return
        reader, writer = bob
        match, pattern = self.rng.choice(PROBES)
        writer.write(
            frame(
                {
                    "t": SUBSCRIBE,
                    "c": 1,
                    "s": 1,
                    "d": pattern,
                    "m": match,
                    "dn": None,
                    "w": 100,
                    "wb": 1 << 20,
                }
            )
        )
        await writer.drain()
        # Watch for leaks for 1 s, or less when the flood window ends sooner (short windows).
        deadline = time.monotonic() + min(1.0, max(0.2, self.until - time.time()))
        subscribed = False
        while time.monotonic() < deadline:
            reply = await read_frame(reader, max(0.05, deadline - time.monotonic()))
            if reply is None:
                break
            if reply.get("r") == 1:
                subscribed = reply.get("t") == OK
                if not subscribed:
                    break
            if reply.get("t") == DELIVER and not str(reply.get("d", "")).startswith("queue:bob."):
                self.leaks.append(
                    f"{match} {pattern!r} delivered {reply.get('d')} {reply.get('p')}:{reply.get('o')}"
                )
        self.stats[f"acl_probe_{'subscribed' if subscribed else 'refused'}"] += 1
        if subscribed:
            self.stats[f"acl_probe_subscribed {match} {pattern}"] += 1
        writer.close()

    async def one(self) -> None:
        chosen = self.cfg.get("attacks")
        attack = self.rng.choice([a for a in ATTACKS if not chosen or a.__name__ in chosen])
        try:
            await attack(self)
            self.stats[attack.__name__] += 1
        except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            self.stats[f"{attack.__name__}_connection_error"] += 1

    async def flood(self, until: float, workers: int, pause_s: float) -> None:
        self.until = until

        async def worker() -> None:
            while time.time() < until:
                await self.one()
                await asyncio.sleep(pause_s)

        await asyncio.gather(*(worker() for _ in range(workers)))
        for writer in self.held:
            writer.close()
        self.held.clear()


ATTACKS = [
    Hostile.random_bytes,
    Hostile.truncated,
    Hostile.oversized,
    Hostile.half_open,
    Hostile.pre_hello,
    Hostile.forged_peer,
    Hostile.bad_password,
    Hostile.unauthorized_produce,
    Hostile.acl_probe,
]
PROBES = [  # bob may consume queue:bob.*: the first ones reach queue:alice.*, the last ones must still work
    ("regex", r"queue:alice\..*"),
    ("regex", r"queue:(bob|alice)\..*"),
    ("regex", r"queue:bob.*|alice.*"),
    ("regex", r"queue:bob\..*|alice\..*"),
    ("regex", r"queue:bob.(x)?|.*"),
    ("regex", r"queue:bob..*"),
    ("regex", r"queue:.*"),
    ("glob", "queue:*"),
    ("glob", "queue:[ab]*"),
    ("glob", "queue:*.work"),
    ("glob", "queue:bob.*"),
    ("exact", "queue:alice.work"),
]


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    hostile = Hostile(cfg, random.Random(cfg["seed"]))
    start, width = float(cfg["start"]), float(cfg["window_s"])
    for i in range(int(cfg["windows"])):
        end = start + (i + 1) * width
        if i % 2 == 1:
            await hostile.flood(end, int(cfg.get("workers", 6)), float(cfg.get("pause_s", 0.01)))
        await asyncio.sleep(max(0.0, end - time.time()))
    return {"stats": dict(hostile.stats), "leaks": hostile.leaks}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    report = asyncio.run(main(json.loads(Path(a.config).read_text())))
    Path(a.out).write_text(json.dumps(report, indent=1))
