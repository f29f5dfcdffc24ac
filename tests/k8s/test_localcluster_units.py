"""Pure parts of the local cluster's node agent (no cluster needed)."""

from __future__ import annotations

import subprocess
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from localcluster.agent import images, quantity
from localcluster.agent.agent import Agent
from localcluster.agent.container import _is_within
from localcluster.agent.env import PodContext, expand, field_value, resource_value
from localcluster.agent.hosts import PodView, render
from localcluster.agent.ipam import IPAllocator, pick_pod_cidr
from localcluster.agent.pods import AgentConfig
from localcluster.agent.probes import Prober
from localcluster.agent.status import phase
from localcluster.agent.volumes import Mount, mount_script


@pytest.mark.parametrize(
    ("image", "mapped"),
    [
        ("ghcr.io/hybridmq/broker:0.1.0", True),
        ("hybridmq/operator:dev", True),
        ("localhost:5000/hybridmq/broker@sha256:abcd", True),
        ("ghcr.io/hybridmq/broker", True),
        ("docker.io/library/nginx:1.27", False),
        ("ghcr.io/nothybridmq/broker:1", False),
        ("localhost:5000/nginx", False),
    ],
)
def test_image_table_matches_repository_suffix(image: str, mapped: bool) -> None:
    assert (images.resolve(image) is not None) is mapped


def test_image_default_commands_use_the_project_environment() -> None:
    broker = images.resolve("ghcr.io/hybridmq/broker:dev")
    operator = images.resolve("ghcr.io/hybridmq/operator:dev")
    assert broker is not None and operator is not None
    assert broker.command == ("hybridmq",) and operator.command == ("hybridmq-operator",)
    assert Path(broker.path[0], "python").exists()
    assert images.repository("localhost:5000/a/b:1@sha256:00") == "localhost:5000/a/b"


def test_quantities() -> None:
    assert quantity.parse("500m") == Decimal("0.5")
    assert quantity.parse("1Ki") == 1024
    assert quantity.parse("1.5G") == Decimal("1.5e9")
    assert quantity.divide_ceil("256Mi", "1Mi") == 256
    assert quantity.divide_ceil("500m") == 1
    assert quantity.divide_ceil("1500m", "1") == 2


def test_variable_expansion_follows_kubernetes_rules() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)", env) == "x-y"
    assert expand("$(UNDEFINED)", env) == "$(UNDEFINED)"
    assert expand("$$(A)", env) == "$(A)"


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "a"}},
        "spec": {
            "nodeName": "n",
            "containers": [{"name": "c", "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}}}],
        },
    }


def test_downward_api_fields_and_resources() -> None:
    ctx = PodContext(_pod(), "127.1.0.9", "127.0.0.1", {"cpu": "16", "memory": "1Gi"})
    assert field_value(ctx, "status.podIP") == "127.1.0.9"
    assert field_value(ctx, "metadata.labels['app']") == "a"
    assert field_value(ctx, "spec.nodeName") == "n"
    assert resource_value(ctx, {"resource": "limits.cpu", "divisor": "1m"}, "c") == "250"
    assert resource_value(ctx, {"resource": "requests.memory", "divisor": "1Mi"}, "c") == "64"


def _status(state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"state": state, "lastState": last or {}}


def test_pod_phase() -> None:
    running = _status({"running": {}})
    waiting = _status({"waiting": {"reason": "ContainerCreating"}})
    crashloop = _status({"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": {"exitCode": 1}})
    ok = _status({"terminated": {"exitCode": 0}})
    failed = _status({"terminated": {"exitCode": 2}})
    assert phase([waiting], [], "Always", False) == "Pending"
    assert phase([running, crashloop], [], "Always", False) == "Running"
    assert phase([crashloop], [], "Always", False) == "Running"
    assert phase([ok], [], "Never", False) == "Succeeded"
    assert phase([failed], [], "Never", False) == "Failed"
    assert phase([running], [_status({"running": {}})], "Always", False) == "Pending"
    assert phase([waiting], [], "Never", True) == "Failed"


def test_probe_thresholds() -> None:
    readiness = Prober("readiness", {"failureThreshold": 2, "successThreshold": 1, "periodSeconds": 1}, 0.0)
    assert readiness.result is False and readiness.due(0.0)
    assert readiness.record(True, "", 0.0) and readiness.result
    assert not readiness.record(False, "boom", 1.0) and readiness.result
    assert readiness.record(False, "boom", 2.0) and not readiness.result
    liveness = Prober("liveness", {"failureThreshold": 1}, 0.0)
    assert liveness.result and not liveness.failed
    liveness.record(False, "dead", 0.0)
    assert liveness.failed


def test_ip_allocation_is_unique_and_not_reused_at_once() -> None:
    ipam = IPAllocator()
    first, second = ipam.allocate(), ipam.allocate()
    assert first != second and first.startswith("127.1.")
    ipam.release(first)
    assert ipam.allocate() not in (first, second)
    assert pick_pod_cidr().startswith("127.")


def test_mount_script_and_hidden_paths() -> None:
    script = mount_script([Mount(Path("/src dir"), "/etc/app", True)], "/")
    assert "mount --bind '/src dir' \"$stage/0\"" in script
    assert "mount -o remount,bind,ro /etc/app" in script and script.endswith('exec "$@"')
    assert _is_within("/work/main/.venv/bin/python", "/work")
    assert not _is_within("/work/main/.venv/bin/python", "/data")
    assert not _is_within("/usr/bin/python", "/")


def test_a_mount_over_a_sources_parent_does_not_hide_later_sources(tmp_path: Path) -> None:
    """A pod mounting an emptyDir at /tmp while its other volumes live under /tmp (the cluster dir)."""
    cluster_dir = tmp_path / "cluster"
    token_src = cluster_dir / "pods" / "token"
    token_src.mkdir(parents=True)
    (token_src / "token").write_text("secret-token")
    empty = cluster_dir / "pods" / "tmp-volume"
    empty.mkdir()
    token_target = tmp_path.parent / f"{tmp_path.name}-sa"
    token_target.mkdir()
    mounts = [Mount(empty, str(tmp_path), False), Mount(token_src, str(token_target), True)]
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount_script(mounts, "/"), "sh"]
    result = subprocess.run(
        [*unshare, "sh", "-c", f"cat {token_target}/token; ls -A {tmp_path}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["secret-token"]  # the token is there; /tmp-like dir is empty
    assert (token_src / "token").read_text() == "secret-token"  # the host still sees its files


def test_hosts_file_names_pods_and_services(tmp_path: Path) -> None:
    def view(name: str, ip: str, **kw: Any) -> PodView:
        fields: dict[str, Any] = {
            "namespace": "ns",
            "name": name,
            "ip": ip,
            "labels": {},
            "hostname": "",
            "subdomain": "",
            "ready": True,
            "host_network": False,
            "hosts_file": tmp_path / name,
        }
        fields.update(kw)
        return PodView(**fields)

    mm0 = view("mm-0", "127.1.0.2", labels={"app": "mm"}, hostname="mm-0", subdomain="mm")
    client = view("client", "127.1.0.3")
    services = [{"metadata": {"name": "mm", "namespace": "ns"}, "spec": {"selector": {"app": "mm"}}}]
    text = render(client, [mm0, client], services)
    assert "127.1.0.3\tclient" in text
    assert "127.1.0.2\tmm-0.mm.ns.svc.cluster.local mm-0.mm.ns.svc mm-0.mm.ns mm-0.mm" in text
    assert "127.1.0.2\tmm.ns.svc.cluster.local mm.ns.svc mm.ns mm" in text


class RecordingKube:
    """The API as the node agent's pod workers call it, writes recorded (no cluster)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Any]] = []

    def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.writes.append(("PATCH", path, body))
        return {}

    def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        self.writes.append(("DELETE", path, body))
        return {}

    def post(self, path: str, body: Any) -> dict[str, Any]:
        self.writes.append(("POST", path, body))
        return {}

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        return {"items": []}


def _terminating_pod(uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "web-0",
            "uid": uid,
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 0,
        },
        "spec": {"nodeName": "node", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def test_a_terminated_pods_late_event_never_writes_over_its_successor(tmp_path: Path) -> None:
    """A StatefulSet's pod is terminated and its successor of the same name created; a watch event
    about the old pod that arrives after its worker ended must not run it again: that second run
    wrote the old pod's final phase (Failed) by name onto the successor, which the StatefulSet then
    deleted and replaced once more. Each status write names the pod's uid, so the API server
    refuses it on any other pod."""
    kube = RecordingKube()
    config = AgentConfig("node", tmp_path, "127.0.0.1", 6443, 0.1, 1.0)
    agent = Agent(kube, config, heartbeat_interval=10.0)  # type: ignore[arg-type]
    old = _terminating_pod("uid-old")
    agent._upsert(old)
    worker = agent.workers["uid-old"]
    worker.join(timeout=10)
    assert not worker.is_alive()
    first = list(kube.writes)
    status = [body for verb, path, body in first if verb == "PATCH" and path.endswith("/status")]
    assert status and all(body["metadata"]["uid"] == "uid-old" for body in status), first
    assert ("DELETE", "/api/v1/namespaces/ns/pods/web-0") in [(v, p) for v, p, _ in first], first

    agent._upsert(old)  # the late event
    time.sleep(0.5)
    assert "uid-old" not in agent.workers
    assert kube.writes == first, kube.writes[len(first) :]
