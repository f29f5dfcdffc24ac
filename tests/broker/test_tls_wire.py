"""What crosses the wire: loopback relays between the client and the CM and between the CM and the
MM record every byte of a produce and a consume. With TLS no payload, password or cluster secret
shows in them; without it (the control, so that the check can fail) all of them do."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster

PAYLOAD = b"PAYLOAD-7d1c0c2e-visible-only-in-clear"
PASSWORD = "pw-3f9a1b-visible-only-in-clear"


class Relay:
    """Accepts on ``port`` and copies both ways to ``target``, keeping a copy of every byte."""

    def __init__(self, port: int, target: int) -> None:
        self.target = target
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", port))
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                with self._lock:
                    self.seen += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def bytes(self) -> bytes:
        with self._lock:
            return bytes(self.seen)

    def close(self) -> None:
        self._server.close()
        for s in self._socks:
            s.close()


@pytest.fixture(params=[False, True], ids=["plain", "tls"])
def relayed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[LocalCluster, Relay, Relay, str]]:
    users = tmp_path / "users"
    users.mkdir()
    (users / "alice").write_text(PASSWORD)
    cluster = LocalCluster(tmp_path / "run", mms=1, credentials=users, tls=request.param)
    # The assignment table names the MM at its original port, where the relay listens; the MM
    # itself listens on another one.
    advertised = cluster.mm_ports["mm-0"]
    cluster.mm_ports["mm-0"] = cluster.ports.reserve()
    to_mm = Relay(advertised, cluster.mm_ports["mm-0"])
    to_cm = Relay(cluster.ports.reserve(), cluster.cm_port)
    try:
        with cluster:
            yield cluster, to_cm, to_mm, f"127.0.0.1:{to_cm._server.getsockname()[1]}"
    finally:
        to_cm.close()
        to_mm.close()


async def test_no_payload_or_password_in_clear(relayed: tuple[LocalCluster, Relay, Relay, str]) -> None:
    cluster, to_cm, to_mm, bootstrap = relayed
    ssl = cluster.client_ssl()
    async with await Producer.connect(bootstrap, user="alice", password=PASSWORD, ssl=ssl) as producer:
        for _ in range(10):
            await producer.send("queue:wire", PAYLOAD)
    async with await Consumer.connect(
        bootstrap, "queue:wire", user="alice", password=PASSWORD, ssl=ssl
    ) as consumer:
        for _ in range(10):
            assert (await consumer.receive(timeout=20)).value == PAYLOAD  # type: ignore[union-attr]
    client_side, broker_side = to_cm.bytes(), to_mm.bytes()
    assert len(client_side) > 10 * len(PAYLOAD) and len(broker_side) > 10 * len(
        PAYLOAD
    )  # it all went through
    secret = cluster.cluster_secret.encode()
    found = {
        "payload to/from the CM": PAYLOAD in client_side,
        "password": PASSWORD.encode() in client_side,
        "payload to/from the MM": PAYLOAD in broker_side,
        "cluster secret": secret in broker_side,
    }
    if cluster.ca_file is None:
        assert all(found.values()), found  # the control: the relays do see clear text
    else:
        assert not any(found.values()), found
