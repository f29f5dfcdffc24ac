"""HTTP endpoints of CM and MM, and the ``hybridmq produce`` / ``consume`` commands."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

from hybridmq.local.runner import LocalCluster


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.status, r.read().decode()


def test_health_ready_metrics_admin(cluster: LocalCluster) -> None:
    for port in (cluster.cm_http, *cluster.mm_http.values()):
        assert _get(port, "/healthz") == (200, "ok\n")
        assert _get(port, "/readyz")[0] == 200
        status, text = _get(port, "/metrics")
        assert status == 200 and "hybridmq_" in text
        assert json.loads(_get(port, "/admin")[1])["role"] in ("cm", "mm")


def test_cli_produce_then_consume(cluster: LocalCluster) -> None:
    cli = [sys.executable, "-m", "hybridmq.cli.main"]
    out = subprocess.run(
        [
            *cli,
            "produce",
            "queue:cli",
            "-m",
            "hello from the shell",
            "-n",
            "3",
            "--bootstrap",
            cluster.bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "sent 3" in out.stdout
    out = subprocess.run(
        [*cli, "consume", "queue:cli", "-n", "3", "--timeout", "10", "--bootstrap", cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [x["value"] for x in lines] == ["hello from the shell"] * 3


def test_blocking_client(cluster: LocalCluster) -> None:
    from hybridmq.client import BlockingConsumer, BlockingProducer, Message

    with BlockingConsumer(cluster.bootstrap, "queue:blocking") as c, BlockingProducer(cluster.bootstrap) as p:
        ack = p.send("queue:blocking", b"sync")
        assert ack.partition == p.partition
        m = c.receive(timeout=10)
        assert isinstance(m, Message) and m.value == b"sync" and m.offset == ack.offset


async def test_round_robin_distribution_from_the_directory(cluster: LocalCluster) -> None:
    """Connection distribution: the client caches the broker table (DIRECTORY) and moves on past a dead CM."""
    from hybridmq.client import Producer
    from hybridmq.client.connection import directory_fetcher
    from hybridmq.client.distribution import RoundRobin

    dead = "127.0.0.1:1"  # nothing listens there

    async def table() -> list:  # type: ignore[type-arg]
        entries = await directory_fetcher(cluster.bootstrap)()
        return [*entries, entries[0].model_copy(update={"address": dead, "name": "cm-dead"})]

    strategy = RoundRobin(table)
    for _ in range(3):
        async with await Producer.connect(strategy=strategy) as p:
            assert (await p.send("topic:rr", b"x")).offset >= 0
    assert dead in strategy.table
