"""The MM port admits only CMs and MMs that present the cluster secret.

Raw sockets speak the wire format by hand (4-byte length + msgpack map); what an MM stored is read
back through a CM (``Fetcher``), not through the connection under test.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from hybridmq.client import Fetcher
from hybridmq.local.runner import LocalCluster

HELLO, HELLO_OK, ERROR, PRODUCE, PRODUCE_ACK = 1, 2, 3, 11, 12
AUTH_FAILED = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("peer-auth"), mms=1, fixed_per_mm=1, on_demand_per_mm=0) as c:
        yield c


def _send(sock: socket.socket, frame: dict[str, Any]) -> None:
    body = msgpack.packb(frame, use_bin_type=True)
    sock.sendall(struct.pack(">I", len(body)) + body)


def _recv(sock: socket.socket) -> dict[str, Any] | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">I", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    frame: dict[str, Any] = msgpack.unpackb(body, raw=False)
    return frame


async def _stored(cluster: LocalCluster, dest: str) -> list[bytes]:
    """The values stored for ``dest`` in the MM's partition, read through the CM."""
    values: list[bytes] = []
    async with await Fetcher.connect(cluster.bootstrap) as fetcher:
        offset = 0
        while True:
            result = await fetcher.fetch("fixed-0-0", offset)
            values += [r[0] for b in result.batches if b.destination == dest for r in b.records]
            if result.next_offset >= result.end_offset:
                return values
            offset = result.next_offset


def _hello_then_produce(cluster: LocalCluster, dest: str, **hello: Any) -> list[dict[str, Any]]:
    """HELLO, then a PRODUCE without waiting for the answer; every frame the MM sent back."""
    produce = {
        "t": PRODUCE,
        "c": 1,
        "p": "fixed-0-0",
        "d": dest,
        "n": 1,
        "b": msgpack.packb([[b"forged", None, None, 0]]),
        "f": 0,
        "x": 0,
        "e": 0,
    }
    with socket.create_connection(("127.0.0.1", cluster.mm_ports["mm-0"]), timeout=10) as sock:
        _send(sock, {"t": HELLO, "v": 1, "id": "intruder", "user": "cm", **hello})
        _send(sock, produce)
        frames = []
        try:
            while (frame := _recv(sock)) is not None:
                frames.append(frame)
                if frame["t"] in (ERROR, PRODUCE_ACK):
                    break
        except ConnectionResetError:
            pass
        return frames


@pytest.mark.parametrize(
    "hello",
    [
        {"role": "cm"},  # no secret at all
        {"role": "cm", "password": "wrong-secret-of-the-same-size-as-a-real-one-xx"},
        {"role": "mm", "password": ""},
        {"role": "client"},  # a client must go through a CM
    ],
    ids=["cm-without-secret", "cm-wrong-secret", "mm-empty-secret", "client-role"],
)
async def test_unauthenticated_peer_is_refused_and_stores_nothing(
    cluster: LocalCluster, hello: dict[str, Any]
) -> None:
    dest = f"queue:stolen-{hello['role']}-{len(hello.get('password') or '')}"
    frames = _hello_then_produce(cluster, dest, **hello)
    assert frames and frames[0]["t"] == ERROR and frames[0]["fatal"] is True
    assert frames[0]["code"] == AUTH_FAILED
    assert not any(f["t"] in (HELLO_OK, PRODUCE_ACK) for f in frames)
    assert await _stored(cluster, dest) == []


def test_client_role_is_refused_even_with_the_secret(cluster: LocalCluster) -> None:
    frames = _hello_then_produce(
        cluster, "queue:stolen-client", role="client", password=cluster.cluster_secret
    )
    assert frames[0]["t"] == ERROR and "clients connect to a CM" in frames[0]["msg"]


async def test_a_cm_with_the_secret_is_served(cluster: LocalCluster) -> None:
    frames = _hello_then_produce(cluster, "queue:legit", role="cm", password=cluster.cluster_secret)
    assert [f["t"] for f in frames] == [HELLO_OK, PRODUCE_ACK]
    assert await _stored(cluster, "queue:legit") == [b"forged"]


def test_the_secret_is_not_on_any_command_line(cluster: LocalCluster) -> None:
    for name in ("mm-0", "cm-0"):
        cmdline = Path(f"/proc/{cluster.pid(name)}/cmdline").read_bytes()
        assert cluster.cluster_secret.encode() not in cmdline
    assert cluster.secret_file.stat().st_mode & 0o777 == 0o600


def test_an_mm_without_a_secret_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDMQ_CLUSTER_SECRET")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybridmq.cli.main",
            "mm",
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "no cluster secret" in proc.stderr and "HYBRIDMQ_CLUSTER_SECRET" in proc.stderr
