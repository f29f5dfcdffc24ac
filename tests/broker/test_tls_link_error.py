"""A TLS error on the CM's link to an MM (here one damaged record: the relay between them flips a
byte of the MM's reply) ends that link like any lost connection: the CM connects to the MM again
and the producer's next messages are acknowledged. Before, the link's reader raised ssl.SSLError
past the link's loop, which stopped for good: the CM never reached that MM again and every
producer of its partitions ran into its delivery timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from relay import Relay

from hybridmq.client import Producer
from hybridmq.local.runner import LocalCluster

DEST = "queue:damaged"


async def test_cm_reconnects_to_the_mm_after_a_tls_error(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "run", mms=1, tls=True)
    # The assignment table names the MM at its original port, where the relay listens.
    advertised = cluster.mm_ports["mm-0"]
    cluster.mm_ports["mm-0"] = cluster.ports.reserve()
    to_mm = Relay(advertised, cluster.mm_ports["mm-0"])
    try:
        with cluster:
            async with await Producer.connect(
                cluster.bootstrap, ssl=cluster.client_ssl(), delivery_timeout=30
            ) as producer:
                await producer.send(DEST, b"before")
                links = to_mm.connections
                to_mm.corrupt_next_reply()
                started = time.monotonic()
                acked = 0
                for n in range(20):  # the first reply after the damage ends the link
                    await asyncio.wait_for(producer.send(DEST, f"after-{n}".encode()), 45)
                    acked += 1
                took = time.monotonic() - started
            assert acked == 20
            assert to_mm.connections > links, "the CM never connected to the MM again"
            assert took < 30, f"acknowledged again only after {took:.1f} s"
    finally:
        to_mm.close()
