"""A ``LocalCluster`` keeps its ports against the other programs of a shared machine.

Another program picking a free port is offered any port nobody holds. Held by nobody between the
moment the cluster picked it and the moment the broker binds it (seconds on a loaded machine, and
again from a kill to the restart), the port could be served by someone else: the broker then failed
to bind and the CM never linked ("cm-0 did not connect to every MM"). The squatter
(``localcluster.testing.squat``) binds the cluster's port numbers the way a free-port pick does and
serves whatever it got.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster
from localcluster.testing import let_go, squat


async def roundtrip(cluster: LocalCluster, dest: str, count: int) -> list[bytes]:
    producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", key="k", linger_ms=0)
    for i in range(count):
        await producer.send(dest, b"m%d" % i)
    await producer.close()
    consumer = await Consumer.connect(cluster.bootstrap, dest)
    got = []
    for _ in range(count):
        m = await consumer.receive(timeout=30)
        assert isinstance(m, Message)
        got.append(bytes(m.value))
    await consumer.close()
    return got


async def test_ports_picked_for_a_cluster_are_not_served_by_another_program(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0)
    ports = [cluster.cm_port, cluster.cm_http, cluster.mm_ports["mm-0"], cluster.mm_http["mm-0"]]
    squatter, took = squat(ports)  # between the pick and the brokers' start
    try:
        with cluster:  # starts, links and serves as if nobody had tried
            assert await roundtrip(cluster, "queue:ports", 5) == [b"m%d" % i for i in range(5)]
    except Exception as exc:
        raise AssertionError(f"the cluster did not serve; another program had taken {took}: {exc!r}") from exc
    finally:
        let_go(squatter)
    assert took == []


async def test_a_killed_mms_port_waits_for_its_restart(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0)
    with cluster:
        assert await roundtrip(cluster, "queue:before", 3) == [b"m0", b"m1", b"m2"]
        cluster.kill_mm("mm-0", signal.SIGKILL)
        squatter, took = squat([cluster.mm_ports["mm-0"], cluster.mm_http["mm-0"]])
        try:
            cluster.start_mm("mm-0")
            cluster.wait_linked()
            assert await roundtrip(cluster, "queue:after", 3) == [b"m0", b"m1", b"m2"]
        except Exception as exc:
            raise AssertionError(f"the MM did not come back; another program took {took}: {exc!r}") from exc
        finally:
            let_go(squatter)
        assert took == []


def test_hybridmq_local_on_a_port_another_program_serves_says_so(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    with busy:
        done = subprocess.run(
            [sys.executable, "-m", "hybridmq.cli.main", "local", "--dir", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert f"port 127.0.0.1:{port} is already in use by another program" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
