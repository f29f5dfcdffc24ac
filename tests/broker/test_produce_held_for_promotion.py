"""A produce that reaches an MM for a partition it is about to lead waits for the promotion instead
of being refused (real MM processes on a static assignment file; a raw socket plays the CM).

After an MM loss the CMs route to the new primary as soon as their table names it, which can be
before that MM has promoted its copy (or even seen the new table). Refused, the producer would
resend after its back-off; held, it is answered the moment the MM serves the partition. Held only
for that: a table that gives the partition to another MM at that epoch refuses it at once.
What is stored is read back through the CM (``Fetcher``), not from the MM under test.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path
from typing import Any

import msgpack

from hybridmq.api.assignment import PartitionAssignment
from hybridmq.client import Fetcher
from hybridmq.local.runner import LocalCluster

HELLO, HELLO_OK, ERROR, PRODUCE, PRODUCE_ACK = 1, 2, 3, 11, 12
NOT_PRIMARY = 21
QUIET_S = 1.5  # "not answered": nothing within this long


def _send(sock: socket.socket, frame: dict[str, Any]) -> None:
    body = msgpack.packb(frame, use_bin_type=True)
    sock.sendall(struct.pack(">I", len(body)) + body)


def _recv(sock: socket.socket, timeout: float) -> dict[str, Any] | None:
    """The next frame, or None when nothing came within ``timeout``."""
    sock.settimeout(timeout)
    try:
        header = sock.recv(4, socket.MSG_WAITALL)
    except TimeoutError:
        return None
    assert len(header) == 4, "the MM closed the connection"
    sock.settimeout(30)
    (size,) = struct.unpack(">I", header)
    frame: dict[str, Any] = msgpack.unpackb(sock.recv(size, socket.MSG_WAITALL), raw=False)
    return frame


def _as_cm(cluster: LocalCluster, mm: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", cluster.mm_ports[mm]), timeout=30)
    _send(sock, {"t": HELLO, "v": 1, "id": "test-cm", "role": "cm", "password": cluster.cluster_secret})
    reply = _recv(sock, 30)
    assert reply is not None and reply["t"] == HELLO_OK, reply
    return sock


def _produce(sock: socket.socket, c: int, partition: str, epoch: int, value: bytes) -> None:
    frame = {"t": PRODUCE, "c": c, "p": partition, "d": "topic:held", "n": 1, "f": 0, "x": 0, "e": epoch}
    frame["b"] = msgpack.packb([[value, None, None, 0]])
    frame.update(pid=4242, pep=0, seq=0)
    _send(sock, frame)


def _reassign(cluster: LocalCluster, partition: str, primary: str, epoch: int) -> None:
    """Rewrite the assignment file: ``partition`` led by ``primary`` at ``epoch`` (alone)."""
    table = cluster.source.partitions()
    moved = table[partition].model_copy(
        update={"epoch": epoch, "primary": primary, "replicas": (primary,), "in_sync": (primary,)}
    )
    cluster.source.update(partitions=[moved if p.name == partition else p for p in table.values()])
    fresh = cluster.assignments.with_suffix(".new")
    fresh.write_text(cluster.source.to_json())
    fresh.replace(cluster.assignments)


async def _stored(cluster: LocalCluster, partition: str, settle_s: float = 10.0) -> list[bytes]:
    """What ``partition`` holds, read through the CM (which follows the file a moment later than
    the MM did: an empty answer is asked again until ``settle_s``)."""
    deadline = time.monotonic() + settle_s
    async with await Fetcher.connect(cluster.bootstrap) as fetcher:
        while True:
            result = await fetcher.fetch(partition, 0)
            values = [r[0] for b in result.batches if b.destination == "topic:held" for r in b.records]
            if values or time.monotonic() > deadline:
                return values
            await asyncio.sleep(0.2)


def _led_by(cluster: LocalCluster, mm: str) -> PartitionAssignment:
    return next(p for p in cluster.partitions() if p.primary == mm)


def _held_until_reassigned(
    cluster: LocalCluster, sock: socket.socket, partition: PartitionAssignment, primary: str, value: bytes
) -> dict[str, Any]:
    """Send a produce routed at ``partition``'s next epoch; check it is not answered while the
    table is unchanged; then give the partition to ``primary`` at that epoch: the answer, which
    must come with the table (the file is polled every 0.5 s), not at the wait's bound."""
    _produce(sock, 1, partition.name, partition.epoch + 1, value)
    early = _recv(sock, QUIET_S)
    assert early is None, f"answered before the table changed: {early}"
    _reassign(cluster, partition.name, primary, partition.epoch + 1)
    changed = time.monotonic()
    reply = _recv(sock, 30)
    assert reply is not None, "no answer after the table changed"
    assert time.monotonic() - changed < 4.0
    return reply


async def test_a_produce_for_a_coming_promotion_is_held_then_stored(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=2, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        taken = _led_by(cluster, "mm-0")
        # Routed at the next epoch to mm-1, whose table still has mm-0 leading at this one.
        with _as_cm(cluster, "mm-1") as sock:
            reply = _held_until_reassigned(cluster, sock, taken, "mm-1", b"across the takeover")
            assert reply["t"] == PRODUCE_ACK, reply
        # What an operator sees of it (the MM's stats, which /metrics flattens).
        seen = cluster.mm_stats("mm-1")["promotions"]
        assert seen["produces"] == {"held": 0, "held_total": 1, "refused_total": 0}, seen
        assert await _stored(cluster, taken.name) == [b"across the takeover"]


async def test_a_held_produce_is_refused_when_the_table_names_another_primary(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=2, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        kept = _led_by(cluster, "mm-1")
        # mm-0 does not know the next epoch of mm-1's partition yet: it waits for its table.
        with _as_cm(cluster, "mm-0") as sock:
            reply = _held_until_reassigned(cluster, sock, kept, "mm-1", b"not for mm-0")
            assert (reply["t"], reply.get("code")) == (ERROR, NOT_PRIMARY), reply

            # A produce at an epoch mm-0's table already gives to mm-1 is refused at once.
            _produce(sock, 2, kept.name, kept.epoch + 1, b"not for mm-0 either")
            at_once = _recv(sock, 5)
            assert at_once is not None and at_once.get("code") == NOT_PRIMARY, at_once
        assert await _stored(cluster, kept.name, settle_s=0) == []


async def test_a_produce_for_a_promotion_that_never_comes_is_refused_after_the_wait(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=2, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        other = _led_by(cluster, "mm-1")
        with _as_cm(cluster, "mm-0") as sock:
            started = time.monotonic()
            _produce(sock, 1, other.name, other.epoch + 5, b"from a confused router")
            reply = await asyncio.to_thread(_recv, sock, 30)
            waited = time.monotonic() - started
            assert reply is not None and reply.get("code") == NOT_PRIMARY, reply
            assert 3.0 < waited < 20.0, waited  # held for the wait's bound, then refused
        assert await _stored(cluster, other.name, settle_s=0) == []
