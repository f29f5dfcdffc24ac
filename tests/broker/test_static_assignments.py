"""A cluster on a static assignment file runs the same MM and CM as a replicated one.

* The MM's append rules are those of every primary: a producer the partition has never stored must
  start with its first batch (a later one would make the first look like an old duplicate), and a
  request at an older epoch is refused. Raw sockets speak the wire format by hand (4-byte length +
  msgpack map); what the MM stored is read back through the CM (``Fetcher``).
* The CM follows an MM to a new address when the file says it moved (as it does for a pod's new IP).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path
from typing import Any

import msgpack

from hybridmq.api.assignment import BrokerEntry
from hybridmq.client import Fetcher, Producer
from hybridmq.local.runner import LocalCluster

HELLO, HELLO_OK, ERROR, PRODUCE, PRODUCE_ACK = 1, 2, 3, 11, 12
STALE_EPOCH, OUT_OF_ORDER_SEQUENCE = 22, 25
PARTITION = "fixed-0-0"


def _send(sock: socket.socket, frame: dict[str, Any]) -> None:
    body = msgpack.packb(frame, use_bin_type=True)
    sock.sendall(struct.pack(">I", len(body)) + body)


def _recv(sock: socket.socket) -> dict[str, Any]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the MM closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">I", exactly(4))
    frame: dict[str, Any] = msgpack.unpackb(exactly(size), raw=False)
    return frame


def _produce(sock: socket.socket, c: int, value: bytes, **fields: Any) -> dict[str, Any]:
    frame = {"t": PRODUCE, "c": c, "p": PARTITION, "d": "topic:rules", "n": 1, "f": 0, "x": 0}
    frame["b"] = msgpack.packb([[value, None, None, 0]])
    frame.update(fields)
    _send(sock, frame)
    return _recv(sock)


async def _stored(cluster: LocalCluster) -> list[bytes]:
    values: list[bytes] = []
    async with await Fetcher.connect(cluster.bootstrap) as fetcher:
        offset = 0
        while True:
            result = await fetcher.fetch(PARTITION, offset)
            values += [r[0] for b in result.batches if b.destination == "topic:rules" for r in b.records]
            if result.next_offset >= result.end_offset:
                return values
            offset = result.next_offset


async def test_a_static_mm_checks_appends_like_any_primary(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        with socket.create_connection(("127.0.0.1", cluster.mm_ports["mm-0"]), timeout=10) as sock:
            _send(sock, {"t": HELLO, "v": 1, "id": "t", "role": "cm", "password": cluster.cluster_secret})
            assert _recv(sock)["t"] == HELLO_OK

            late = _produce(sock, 1, b"second batch first", e=0, pid=77, seq=3)
            assert (late["t"], late.get("code")) == (ERROR, OUT_OF_ORDER_SEQUENCE), late
            stale = _produce(sock, 2, b"old epoch", e=-1)
            assert (stale["t"], stale.get("code")) == (ERROR, STALE_EPOCH), stale
            first = _produce(sock, 3, b"first batch", e=0, pid=77, seq=0)
            assert first["t"] == PRODUCE_ACK and not first.get("dup"), first

        assert await _stored(cluster) == [b"first batch"]  # nothing of what was refused


def _move_mm(cluster: LocalCluster, name: str) -> None:
    """Give ``name`` a new port in the assignment file (as a restarted pod gets a new IP)."""
    cluster.mm_ports[name] = cluster.reserve_port()
    brokers = [
        BrokerEntry(
            name=b.name,
            role=b.role,
            address=f"127.0.0.1:{cluster.mm_ports[name]}" if b.name == name else b.address,
            http_address=b.http_address,
        )
        for b in cluster.source.brokers().values()
    ]
    cluster.source.update(brokers=brokers)
    fresh = cluster.assignments.with_suffix(".new")
    fresh.write_text(cluster.source.to_json())
    fresh.replace(cluster.assignments)


async def test_the_cm_follows_an_mm_to_its_new_address(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0) as cluster:
        async with await Producer.connect(cluster.bootstrap, partition=PARTITION) as producer:
            await asyncio.wait_for(producer.send("topic:moved", b"before"), 30)
        cluster.kill_mm("mm-0")
        _move_mm(cluster, "mm-0")
        cluster.start_mm("mm-0")  # listens on the new port only
        async with await Producer.connect(cluster.bootstrap, partition=PARTITION) as producer:
            ack = await asyncio.wait_for(producer.send("topic:moved", b"after"), 60)
        assert ack.partition == PARTITION and ack.offset > 0
