"""Installing HybridMQ the way a user does: `helm install` of helm/hybridmq, then a BrokerCluster.

The operator runs from the chart's Deployment through the node agent (its image maps to the repo's
venv); the CRDs come with the chart. Waits are bounded and fail with what was seen (including the
tail of a crashing container's log), never with a bare timeout.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from hybridmq.api.resources import (
    GROUP,
    VERSION,
    AuthSpec,
    BrokerCluster,
    BrokerClusterSpec,
    ConnectionManagersSpec,
    FixedPartitionsSpec,
    MessageManagersSpec,
    ObjectMeta,
    OnDemandPartitionsSpec,
    PartitionsSpec,
)
from hybridmq_demo.cluster import DemoCluster
from hybridmq_demo.state import DemoState, PodRow
from hybridmq_demo.waiting import StepFailed, wait_until

CHART = Path(__file__).resolve().parents[2] / "helm" / "hybridmq"
RELEASE = "hybridmq"
NAMESPACE = "hybridmq"
OPERATOR_PREFIX = f"{RELEASE}-operator"
CRASH_RESTARTS = 3


@dataclass(frozen=True)
class Topology:
    """The sample BrokerCluster."""

    name: str = "demo"
    cms: int = 1
    mms: int = 3
    fixed: int = 3
    fixed_replicas: int = 2
    on_demand_per_mm: int = 1
    # Short, so the demo shows the drained on-demand partition collected; the default is 5 minutes
    # (time for a stopped stream reader to come back to a partition it has not read).
    retention_after_drain_s: int = 3

    @property
    def pods(self) -> int:
        return self.cms + self.mms

    @property
    def partitions(self) -> int:
        return self.fixed + self.mms * self.on_demand_per_mm


def brokercluster_manifest(topology: Topology, namespace: str = NAMESPACE) -> dict[str, Any]:
    bc = BrokerCluster(
        metadata=ObjectMeta(name=topology.name, namespace=namespace),
        spec=BrokerClusterSpec(
            auth=AuthSpec(enabled=True),  # clients are BrokerUsers (demo_user)
            connection_managers=ConnectionManagersSpec(replicas=topology.cms),
            message_managers=MessageManagersSpec(replicas=topology.mms),
            partitions=PartitionsSpec(
                fixed=FixedPartitionsSpec(
                    count=topology.fixed,
                    replicas=topology.fixed_replicas,
                    min_in_sync=min(2, topology.fixed_replicas),
                ),
                on_demand=OnDemandPartitionsSpec(
                    per_message_manager=topology.on_demand_per_mm,
                    retention_after_drain_seconds=topology.retention_after_drain_s,
                ),
            ),
        ),
    )
    manifest = bc.model_dump(mode="json", exclude_none=True)
    manifest["metadata"] = {"name": topology.name, "namespace": namespace}
    manifest.pop("status", None)
    return manifest


def _crash_check(cluster: DemoCluster, pod: PodRow) -> None:
    if pod.restarts >= CRASH_RESTARTS or pod.reason in ("ErrImagePull", "CreateContainerError"):
        container = "operator" if pod.name.startswith(OPERATOR_PREFIX) else pod.role
        tail = cluster.container_log_tail(NAMESPACE, pod.name, container)
        raise StepFailed(
            f"pod {pod.name} is crashing ({pod.reason or 'restarts'}, restarts={pod.restarts})"
            + (f"; its log ends: {tail[:400]}" if tail else "")
        )


class Installer:
    def __init__(self, cluster: DemoCluster, state: DemoState, topology: Topology) -> None:
        self.cluster = cluster
        self.state = state
        self.topology = topology
        self.custom = client.CustomObjectsApi(cluster.api_client())

    # --------------------------------------------------------------------------------- chart
    def helm_install(self, timeout: float = 120) -> None:
        self.state.set_progress("helm install (CRDs, RBAC, operator Deployment)")
        out = self.cluster.run(
            "helm",
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--set",
            "operator.logLevel=verbose",
            timeout=timeout,
        )
        status = next((line for line in out.splitlines() if line.startswith("STATUS:")), "STATUS: ?")
        self.state.emit(f"helm install {RELEASE} {CHART.relative_to(CHART.parents[1])}: {status}")

    def wait_operator(self, timeout: float = 120) -> None:
        def check() -> tuple[bool, str]:
            pods = [p for p in self.state.all_pods() if p.name.startswith(OPERATOR_PREFIX)]
            if not pods:
                return False, "no operator pod yet"
            pod = pods[0]
            _crash_check(self.cluster, pod)
            return pod.ready, f"{pod.name} {pod.phase} ready={pod.ready} restarts={pod.restarts}"

        wait_until(self.state, "operator pod Ready", check, timeout)

    # ---------------------------------------------------------------------------- BrokerCluster
    def apply_brokercluster(self) -> None:
        manifest = brokercluster_manifest(self.topology)
        self.cluster.run("kubectl", "apply", "-f", "-", input=json.dumps(manifest))
        t = self.topology
        self.state.emit(
            f"kubectl apply BrokerCluster {t.name}: {t.cms} CM, {t.mms} MM, {t.fixed} fixed partitions x"
            f" {t.fixed_replicas} replicas, {t.on_demand_per_mm} on-demand per MM"
        )

    def read_brokercluster(self) -> BrokerCluster | None:
        try:
            obj = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, BrokerCluster.PLURAL, self.topology.name, _request_timeout=5
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return BrokerCluster.model_validate(obj)

    def trust_cluster_ca(self, out_dir: Path) -> Path:
        """What a client in the cluster does: take the CA certificate from ``<c>-cluster-ca-cert``
        and verify the CMs with it, for the client Service's name (the broker table gives pod IPs).
        Set for this process and its children (the producers, consumers and the audit)."""
        name = f"{self.topology.name}-cluster-ca-cert"
        secret = client.CoreV1Api(self.cluster.api_client()).read_namespaced_secret(name, NAMESPACE)
        ca_file = out_dir / "ca.crt"
        ca_file.write_bytes(base64.b64decode((secret.data or {})["ca.crt"]))
        os.environ["HYBRIDMQ_TLS_CA"] = str(ca_file)
        os.environ["HYBRIDMQ_TLS_SERVER_NAME"] = f"{self.topology.name}.{NAMESPACE}.svc"
        return ca_file

    def demo_user(self, destination: str, timeout: float = 60) -> str:
        """The demo's clients log in as a BrokerUser that may produce and consume ``destination``
        only: created here, its generated password read from ``<user>-credentials`` and set for
        this process's clients (``HYBRIDMQ_USER``/``HYBRIDMQ_PASSWORD``)."""
        name = "demo-app"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "BrokerUser",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "cluster": self.topology.name,
                "acls": [{"destination": destination, "operations": ["produce", "consume"]}],
            },
        }
        custom = client.CustomObjectsApi(self.cluster.api_client())
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "brokerusers", body)

        def admitted() -> tuple[bool, str]:
            obj = cast(
                dict[str, Any],
                custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "brokerusers", name),
            )
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            ready = conds.get("Ready") or {}
            return ready.get("status") == "True", f"BrokerUser {name}: {ready.get('reason', 'no status yet')}"

        wait_until(self.state, f"BrokerUser {name} admitted", admitted, timeout)
        secret = client.CoreV1Api(self.cluster.api_client()).read_namespaced_secret(
            f"{name}-credentials", NAMESPACE
        )
        os.environ["HYBRIDMQ_USER"] = name
        os.environ["HYBRIDMQ_PASSWORD"] = base64.b64decode((secret.data or {})["password"]).decode()
        return name

    def cm_addresses(self) -> list[str]:
        bc = self.read_brokercluster()
        if bc is None or bc.status is None:
            return []
        return [b.address for b in bc.status.brokers if str(b.role) == "cm" and b.ready]

    def wait_brokercluster(self, timeout: float = 180) -> list[str]:
        """Wait for broker pods Ready, Partitions Active and CMs in the broker table; their addresses."""
        t = self.topology
        addresses: list[str] = []

        def check() -> tuple[bool, str]:
            nonlocal addresses
            brokers = [p for p in self.state.all_pods() if p.role in ("cm", "mm")]
            for pod in brokers:
                _crash_check(self.cluster, pod)
            ready = sum(1 for p in brokers if p.ready and not p.deleting)
            parts = self.state.all_partitions()
            active = [p for p in parts if p.state == "Active" and p.primary]
            fixed = sum(1 for p in active if p.type == "fixed")
            on_demand = sum(1 for p in active if p.type == "on-demand")
            addresses = self.cm_addresses()
            done = ready >= t.pods and fixed >= t.fixed and on_demand >= t.mms * t.on_demand_per_mm
            done = done and len(addresses) >= t.cms
            return done, (
                f"broker pods Ready {ready}/{t.pods}, fixed partitions Active {fixed}/{t.fixed},"
                f" on-demand Active {on_demand}/{t.mms * t.on_demand_per_mm},"
                f" CMs in the broker table {len(addresses)}/{t.cms}"
            )

        wait_until(self.state, f"BrokerCluster {t.name} ready", check, timeout)
        return addresses
