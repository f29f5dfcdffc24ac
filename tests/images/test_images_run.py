"""Both images, built from the repository's Dockerfiles, run in real containers as the chart runs them:
UID 10001, read-only root filesystem, /tmp and the MM data directory as the only writable places."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest
from docker_harness import BROKER_IMAGE, OPERATOR_IMAGE, Docker

from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

# The first test builds the images (cold: base image and both builds, several minutes on 2 cores).
pytestmark = pytest.mark.timeout(2400)

AS_IN_CHART = ("--read-only", "--user", "10001:10001", "--tmpfs", "/tmp")


@pytest.mark.parametrize("image", [OPERATOR_IMAGE, BROKER_IMAGE])
def test_image_runs_as_uid_10001_by_default(docker: Docker, image: str) -> None:
    proc = docker.container("--rm", "--network", "none", "--entrypoint", "id", image)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["uid=10001(hybridmq)", "gid=10001(hybridmq)"], proc.stdout


def test_broker_image_help(docker: Docker) -> None:
    proc = docker.container("--rm", "--network", "none", *AS_IN_CHART, BROKER_IMAGE, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: hybridmq"), proc.stdout
    for role in ("cm", "mm", "produce", "consume"):
        assert role in proc.stdout


def test_operator_image_without_cluster_exits_with_clear_error(docker: Docker) -> None:
    started = time.monotonic()
    proc = docker.container("--rm", "--network", "none", *AS_IN_CHART, OPERATOR_IMAGE, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert time.monotonic() - started < 60
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "no Kubernetes cluster configured" in proc.stderr.strip().splitlines()[-1]


def _effective_caps(status: str) -> int:
    return int(next(line for line in status.splitlines() if line.startswith("CapEff:")).split()[1], 16)


def test_privileged_container_and_exec(docker: Docker) -> None:
    """What kind's node containers need: `docker run --privileged` and `docker exec --privileged` work
    even where the host withholds capabilities."""
    name = f"privileged-{docker.session}"
    started = docker.container(
        "--detach", "--name", name, "--network", "none", "--privileged", "--user", "0",
        "--entrypoint", "sleep", BROKER_IMAGE, "300",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        inside = docker.run("exec", "--privileged", name, "cat", "/proc/self/status")
        assert inside.returncode == 0, inside.stderr
        assert _effective_caps(inside.stdout) >> 21 & 1, "CAP_SYS_ADMIN missing from a privileged exec"
        top = docker.run("exec", name, "cat", "/proc/1/status")
        assert top.returncode == 0, top.stderr
        assert _effective_caps(top.stdout) >> 21 & 1, "CAP_SYS_ADMIN missing from a privileged container"
    finally:
        docker.run("rm", "--force", name)


def _cm_linked(http_port: int, mm: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/admin", timeout=2) as reply:
            return bool(json.loads(reply.read())["mm_links"].get(mm))
    except (OSError, ValueError, KeyError):
        return False


async def test_broker_containers_serve_produce_and_consume(docker: Docker, tmp_path: Path) -> None:
    # The ports, assignment file and secret of a 1 CM + 1 MM cluster on loopback; the brokers
    # themselves run in containers on the host network, read-only, as UID 10001.
    layout = LocalCluster(tmp_path / "cluster", mms=1)
    data = tmp_path / "mm-0-data"
    data.mkdir()
    os.chown(data, 10001, 10001)
    os.chmod(layout.assignments, 0o644)
    secret = {"HYBRIDMQ_CLUSTER_SECRET": layout.cluster_secret}
    common = (
        "--detach", "--network", "host", *AS_IN_CHART, "--env", "HYBRIDMQ_CLUSTER_SECRET",
        "--volume", f"{layout.assignments}:/etc/hybridmq/assignments.json:ro",
    )  # fmt: skip
    mm = docker.container(
        *common, "--name", f"mm-{docker.session}", "--volume", f"{data}:/var/lib/hybridmq/data",
        BROKER_IMAGE, "mm", "--name", "mm-0", "--bind", f"127.0.0.1:{layout.mm_ports['mm-0']}",
        "--http-bind", f"127.0.0.1:{layout.mm_http['mm-0']}",
        "--assignments", "/etc/hybridmq/assignments.json", "--data-dir", "/var/lib/hybridmq/data",
        env=secret,
    )  # fmt: skip
    assert mm.returncode == 0, mm.stderr
    cm = docker.container(
        *common, "--name", f"cm-{docker.session}",
        BROKER_IMAGE, "cm", "--name", "cm-0", "--bind", f"127.0.0.1:{layout.cm_port}",
        "--http-bind", f"127.0.0.1:{layout.cm_http}", "--assignments", "/etc/hybridmq/assignments.json",
        env=secret,
    )  # fmt: skip
    assert cm.returncode == 0, cm.stderr

    deadline = time.monotonic() + 90
    while not _cm_linked(layout.cm_http, "mm-0"):
        if time.monotonic() > deadline:
            logs = [docker.run("logs", f"{name}-{docker.session}").stderr[-2000:] for name in ("mm", "cm")]
            pytest.fail(f"the CM container never linked to the MM container:\n{logs[0]}\n{logs[1]}")
        await asyncio.sleep(0.2)

    sent = [f"container-{i}".encode() for i in range(200)]
    consumer = await Consumer.connect(layout.bootstrap, "queue:smoke")
    async with await Producer.connect(layout.bootstrap, linger_ms=0) as producer:
        acks = [await producer.send("queue:smoke", value) for value in sent]
    received: list[bytes] = []
    while len(received) < len(sent):
        message = await consumer.receive(timeout=30)
        assert isinstance(message, Message)
        received.append(message.value)
    await consumer.close()
    assert received == sent
    assert len({(a.partition, a.offset) for a in acks}) == len(sent)

    # The MM wrote its log where the chart mounts its volume, as UID 10001 (its root is read-only).
    written = [p for p in data.rglob("*") if p.is_file()]
    assert written and all(p.stat().st_uid == 10001 for p in written)
