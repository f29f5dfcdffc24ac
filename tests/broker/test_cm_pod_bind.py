"""Two CMs run from the operator's pod template on one host network (the local cluster's node agent
gives every pod its own loopback address but no network namespace of its own) both serve: each
binds its pod IP, not every address (real processes, real sockets).

The test renders the CM StatefulSet with the operator's builder, expands ``$(HYBRIDMQ_POD_IP)`` as
a kubelet does (two pod IPs, the port a free one chosen now instead of the template's 7400), and
starts ``hybridmq cm`` with that environment twice. The checker: the kernel's socket table (psutil)
shows each process listening on its own pod IP, both still run, and each pod IP answers.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.auth import cluster_secret
from hybridmq_operator import names
from hybridmq_operator.resources import build_cm_statefulset
from hybridmq_operator.settings import ClusterSettings


def _cm_env(pod_ip: str, port: int) -> dict[str, str]:
    """The CM container's plain environment values, expanded as the kubelet expands them."""
    body: dict[str, Any] = {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "bind", "namespace": "ns1", "uid": "uid-1", "generation": 1},
        "spec": {"tls": {"enabled": False}},
    }
    sts = build_cm_statefulset(ClusterSettings.from_body(body))
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {"HYBRIDMQ_POD_IP": pod_ip}
    for e in container["env"]:
        if "value" in e:
            value = e["value"].replace("$(HYBRIDMQ_POD_IP)", pod_ip)
            env[e["name"]] = value.replace(f":{names.CM_CLIENT_PORT}", f":{port}")
    return env


def _free_port(hosts: list[str]) -> int:
    """A port nothing listens on at any of ``hosts`` (nor on every address) right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if all(_connects(h, port) is False for h in hosts):
            return port
    raise RuntimeError("no free port")


def _listening(pid: int) -> set[tuple[str, int]]:
    """The addresses process ``pid`` listens on (TCP)."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_two_cms_from_the_pod_template_share_a_host_network(tmp_path: Path) -> None:
    net = random.randrange(80, 250)
    pod_ips = [f"127.{net}.0.{i}" for i in (11, 12)]
    port = _free_port(pod_ips)
    assignments = tmp_path / "assignments.json"
    assignments.write_text(StaticAssignmentSource([], []).to_json())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, ip in enumerate(pod_ips):
            env = {
                **os.environ,
                **_cm_env(ip, port),
                "HYBRIDMQ_NAME": f"bind-cm-{i}",
                "HYBRIDMQ_ASSIGNMENTS": str(assignments),
                cluster_secret.ENV: "s3cret-for-the-test",
            }
            env.pop("HYBRIDMQ_ASSIGNMENT_SOURCE", None)  # no API server here: the static table
            env.pop("HYBRIDMQ_CONFIG", None)
            env.pop("HYBRIDMQ_HTTP_BIND", None)
            log = open(tmp_path / f"cm-{i}.log", "wb")  # noqa: SIM115 - handed to the child
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "hybridmq.cli.main", "cm", "--log-level", "INFO"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
            deadline = time.monotonic() + 60
            while not _listening(procs[-1].pid):
                assert procs[-1].poll() is None, (tmp_path / f"cm-{i}.log").read_text()
                assert time.monotonic() < deadline, f"cm-{i} listens on nothing"
                time.sleep(0.1)
            time.sleep(0.5)  # every listener it opens is open
            got = _listening(procs[-1].pid)
            assert (ip, port) in got, f"cm-{i} does not listen on {ip}:{port} but on {got}"
            assert ("0.0.0.0", port) not in got, f"cm-{i} takes {port} on every address: {got}"
        time.sleep(1.0)
        for i, proc in enumerate(procs):
            assert proc.poll() is None, f"cm-{i} exited: {(tmp_path / f'cm-{i}.log').read_text()}"
        assert all(_connects(ip, port) for ip in pod_ips)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
