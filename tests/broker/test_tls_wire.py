"""What crosses the wire: loopback relays between the client and the CM and between the CM and the
MM record every byte of a produce and a consume. With TLS no payload, password or cluster secret
shows in them; without it (the control, so that the check can fail) all of them do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from relay import Relay

from hybridmq.client import Consumer, Producer
from hybridmq.local.runner import LocalCluster

PAYLOAD = b"PAYLOAD-7d1c0c2e-visible-only-in-clear"
PASSWORD = "pw-3f9a1b-visible-only-in-clear"


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
            yield cluster, to_cm, to_mm, f"127.0.0.1:{to_cm.port}"
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
