"""`hybridmq produce` survives the death of its CM: it goes on through another CM, loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from hybridmq.local.runner import LocalCluster

QUEUE = "queue:cli.failover"
LINES = 400


@pytest.fixture(scope="module")
def cms2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("clifo"), mms=2, cms=2, fixed_per_mm=1, on_demand_per_mm=1)
    with c:
        yield c


def connected_cm(cluster: LocalCluster, pid: int, timeout_s: float = 30) -> str:
    """The CM the process holds a connection to (by the CM ports, seen from the outside)."""
    by_port = {port: name for name, port in cluster.cm_ports.items()}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.raddr and conn.status == psutil.CONN_ESTABLISHED and conn.raddr.port in by_port:
                return by_port[conn.raddr.port]
        time.sleep(0.1)
    raise AssertionError("the producer connected to no CM")


def test_cli_producer_moves_to_another_cm(cms2: LocalCluster) -> None:
    cli = [sys.executable, "-m", "hybridmq.cli.main"]
    producer = subprocess.Popen(
        [*cli, "produce", QUEUE, "--bootstrap", cms2.bootstraps, "--partition-type", "fixed", "--key", "k"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert producer.stdin is not None
    try:
        for i in range(LINES // 2):
            producer.stdin.write(f"m-{i}\n")
        producer.stdin.flush()
        victim = connected_cm(cms2, producer.pid)
        time.sleep(1.0)  # the first half goes out through the victim
        cms2.kill_cm(victim)
        rest = "".join(f"m-{i}\n" for i in range(LINES // 2, LINES))
        _, err = producer.communicate(rest, timeout=120)
    finally:
        if producer.poll() is None:
            producer.kill()
    assert producer.returncode == 0, err[-3000:]
    assert f"sent {LINES}" in err
    survivor = next(name for name in cms2.cm_names if name != victim)
    bootstrap = f"127.0.0.1:{cms2.cm_ports[survivor]}"
    consumed = subprocess.run(
        [*cli, "consume", QUEUE, "--bootstrap", bootstrap, "-n", str(LINES), "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert consumed.returncode == 0, consumed.stderr[-3000:]
    values = [json.loads(line)["value"] for line in consumed.stdout.splitlines() if line.strip()]
    assert sorted(set(values), key=lambda v: int(v[2:])) == [f"m-{i}" for i in range(LINES)]
