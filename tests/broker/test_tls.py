"""TLS on the brokers' listeners: clients verify the CM, brokers link with mutual TLS, a revoked or
foreign certificate is refused, rotated certificates are taken up without dropping connections.

The cluster runs with a CA made here; the checks speak TLS through the standard library's ``ssl``
and the wire format by hand (4-byte length + msgpack map), not through the code under test.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import msgpack
import pytest
from cryptography import x509

from hybridmq import pki
from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster

HELLO, HELLO_OK = 1, 2


@pytest.fixture(scope="module")
def ca() -> pki.Issued:
    return pki.new_ca("test cluster CA")


def _broker_files(ca: pki.Issued, revoked: tuple[int, ...] = ()) -> dict[str, str]:
    broker = pki.issue(ca, "broker", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    return {
        "tls.crt": broker.cert,
        "tls.key": broker.key,
        "ca.crt": ca.cert,
        "ca.crl": pki.revocation_list(ca, revoked),
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, ca: pki.Issued) -> Iterator[LocalCluster]:
    """1 CM + 2 MMs, every partition on both (replication over mutual TLS)."""
    d = tmp_path_factory.mktemp("tls")
    tls_dir = pki.write_tls_dir(d / "certs", _broker_files(ca))
    with LocalCluster(d / "run", mms=2, replicas=2, tls=tls_dir) as c:
        yield c


def _frame(frame: dict[str, Any]) -> bytes:
    body = msgpack.packb(frame, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def _read_frame(sock: ssl.SSLSocket) -> dict[str, Any] | None:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    frame: dict[str, Any] = msgpack.unpackb(data[4:], raw=False)
    return frame


def _hello_over_tls(port: int, ctx: ssl.SSLContext, hello: dict[str, Any]) -> dict[str, Any] | None:
    """HELLO over TLS with ``ctx``; the answer, or None when the server refused the connection."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as sock,
        ):
            sock.sendall(_frame(hello))
            return _read_frame(sock)
    except (ssl.SSLError, ConnectionError):
        return None


def _peer_context(ca: pki.Issued, cert: pki.Issued | None, tmp: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=ca.cert)
    if cert is not None:
        (tmp / "peer.crt").write_text(cert.cert)
        (tmp / "peer.key").write_text(cert.key)
        ctx.load_cert_chain(tmp / "peer.crt", tmp / "peer.key")
    return ctx


def _mm_hello(cluster: LocalCluster) -> dict[str, Any]:
    return {
        "t": HELLO,
        "v": 1,
        "id": "test-peer",
        "role": "cm",
        "user": "cm",
        "password": cluster.cluster_secret,
    }


async def test_client_with_the_ca_produces_and_consumes(cluster: LocalCluster) -> None:
    async with await Producer.connect(cluster.bootstrap, ssl=str(cluster.ca_file)) as producer:
        acks = [await producer.send("queue:tls", f"m{i}".encode()) for i in range(20)]
    assert len({(a.partition, a.offset) for a in acks}) == 20
    async with await Consumer.connect(cluster.bootstrap, "queue:tls", ssl=cluster.client_ssl()) as consumer:
        got = sorted([(await consumer.receive(timeout=20)).value for _ in range(20)])  # type: ignore[union-attr]
    assert got == sorted(f"m{i}".encode() for i in range(20))


async def test_client_without_the_ca_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    # The system's CAs do not know the cluster's CA; plain TCP is not spoken at all.
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await Producer.connect(cluster.bootstrap, ssl=True, reconnect=False)
    other = pki.new_ca("another CA")
    (tmp_path / "other.crt").write_text(other.cert)
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await Producer.connect(cluster.bootstrap, ssl=str(tmp_path / "other.crt"), reconnect=False)
    with pytest.raises(ConnectionError):
        await Producer.connect(cluster.bootstrap, ssl=None, reconnect=False)


def test_mm_requires_a_certificate_of_the_cluster_ca(
    cluster: LocalCluster, ca: pki.Issued, tmp_path: Path
) -> None:
    port = cluster.mm_ports["mm-0"]
    good = pki.issue(ca, "a peer")
    answer = _hello_over_tls(port, _peer_context(ca, good, tmp_path), _mm_hello(cluster))
    assert answer is not None and answer["t"] == HELLO_OK  # the control: the same HELLO is accepted
    assert _hello_over_tls(port, _peer_context(ca, None, tmp_path), _mm_hello(cluster)) is None
    foreign = pki.issue(pki.new_ca("rogue CA"), "a rogue peer")
    assert _hello_over_tls(port, _peer_context(ca, foreign, tmp_path), _mm_hello(cluster)) is None


def test_revoked_certificate_is_refused(cluster: LocalCluster, ca: pki.Issued, tmp_path: Path) -> None:
    port = cluster.mm_ports["mm-1"]
    peer = pki.issue(ca, "a peer to revoke")
    ctx = _peer_context(ca, peer, tmp_path)
    answer = _hello_over_tls(port, ctx, _mm_hello(cluster))
    assert answer is not None and answer["t"] == HELLO_OK
    assert cluster.tls_dir is not None
    pki.write_tls_dir(cluster.tls_dir, {"ca.crl": pki.revocation_list(ca, [pki.serial_of(peer.cert)])})
    deadline = time.monotonic() + 15
    while _hello_over_tls(port, ctx, _mm_hello(cluster)) is not None:
        assert time.monotonic() < deadline, "the revoked certificate is still accepted"
        time.sleep(0.2)


def _served_serial(port: int, ca_file: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as sock,
    ):
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


async def test_rotation_keeps_connections_and_serves_the_new_certificate(
    cluster: LocalCluster, ca: pki.Issued
) -> None:
    assert cluster.tls_dir is not None and cluster.ca_file is not None
    before = _served_serial(cluster.cm_port, cluster.ca_file)
    async with await Producer.connect(cluster.bootstrap, ssl=str(cluster.ca_file)) as producer:
        await producer.send("queue:rotate", b"before")
        files = _broker_files(ca)
        new_serial = pki.serial_of(files["tls.crt"])
        pki.write_tls_dir(cluster.tls_dir, files)
        deadline = time.monotonic() + 15
        # Off the event loop: the producer's keepalive must keep running meanwhile.
        serial = partial(_served_serial, cluster.cm_port, cluster.ca_file)
        while (served := await asyncio.to_thread(serial)) != new_serial:
            assert time.monotonic() < deadline, f"still serving {served}, not the new {new_serial}"
            await asyncio.sleep(0.2)
        assert served != before
        await producer.send("queue:rotate", b"after")
        assert producer.session.reconnects == 0  # the open connection was never dropped
    cluster.wait_linked()  # the brokers' own links, re-established with the new files, still work


def test_a_missing_ca_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.crt"
    argv = ["produce", "queue:x", "-m", "hi", "--bootstrap", "127.0.0.1:1", "--tls-ca", str(missing)]
    out = subprocess.run(
        [sys.executable, "-m", "hybridmq.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == f"hybridmq produce: TLS: TLS CA file '{tmp_path / 'nowhere.crt'}' does not exist"
    )
