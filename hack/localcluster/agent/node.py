"""The Node object and its heartbeats: registration, node status and the lease in kube-node-lease."""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from localcluster.agent.kube import JSON, ApiError, Kube

log = logging.getLogger("localcluster.agent.node")

KUBELET_VERSION = "v1.35.4"
LEASE_DURATION_SECONDS = 40
STATUS_INTERVAL = 10.0


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def capacity() -> dict[str, str]:
    """What the node advertises. Deliberately generous (at least 16 CPUs, 64Gi) so that charts with
    realistic resource requests schedule on a small machine; nothing enforces limits anyway."""
    cpus = max(os.cpu_count() or 1, 16)
    memory_ki = max(psutil.virtual_memory().total // 1024, 64 * 1024 * 1024)
    return {
        "cpu": str(cpus),
        "memory": f"{memory_ki}Ki",
        "pods": "250",
        "ephemeral-storage": f"{max(psutil.disk_usage('/').total // 1024, 100 * 1024 * 1024)}Ki",
    }


class NodeHeartbeat(threading.Thread):
    """Registers the Node, then renews its lease every `interval` seconds and posts node status.

    While the file `pause_flag` exists, nothing is renewed: the node lifecycle controller then marks
    the node NotReady after kube-controller-manager's --node-monitor-grace-period.
    """

    def __init__(
        self, kube: Kube, node_name: str, interval: float, pause_flag: Path, kubelet_port: int = 0
    ) -> None:
        super().__init__(name="node-heartbeat", daemon=True)
        self.kube = kube
        self.node_name = node_name
        self.interval = interval
        self.pause_flag = pause_flag
        self.kubelet_port = kubelet_port
        self.stopping = threading.Event()
        self.capacity = capacity()
        self._node_uid = ""
        self._last_status = 0.0

    # --------------------------------------------------------------------------- registration
    def register(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64",
                    "node.localcluster.io/agent": "true",
                },
            },
            "spec": {},
        }
        try:
            created = self.kube.post("/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
            created = self.kube.get(f"/api/v1/nodes/{self.node_name}")
        self._node_uid = created["metadata"]["uid"]
        self.post_status()
        self.renew_lease()

    def node_status(self) -> JSON:
        now = now_rfc3339()

        def condition(kind: str, status: str, reason: str, message: str) -> JSON:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        conditions = [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "agent has sufficient memory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "agent has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "agent has sufficient PID"),
            condition("Ready", "True", "KubeletReady", "localcluster node agent is posting ready status"),
        ]
        return {
            "capacity": self.capacity,
            "allocatable": self.capacity,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.node_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": {
                "machineID": "localcluster",
                "systemUUID": "localcluster",
                "bootID": str(int(psutil.boot_time())),
                "kernelVersion": platform.release(),
                "osImage": "localcluster node agent",
                "containerRuntimeVersion": "localcluster://0.1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def post_status(self) -> None:
        previous = self.kube.get(f"/api/v1/nodes/{self.node_name}")
        status = self.node_status()
        # keep lastTransitionTime for conditions whose status did not change
        old = {c["type"]: c for c in previous.get("status", {}).get("conditions", [])}
        for cond in status["conditions"]:
            before = old.get(cond["type"])
            if before and before.get("status") == cond["status"]:
                cond["lastTransitionTime"] = before.get("lastTransitionTime", cond["lastTransitionTime"])
        self.kube.merge_patch(f"/api/v1/nodes/{self.node_name}/status", {"status": status})
        self._last_status = time.monotonic()

    def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node_name}"
        spec = {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": now_micro(),
        }
        try:
            self.kube.merge_patch(path, {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.node_name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self._node_uid}
                    ],
                },
                "spec": spec,
            }
            self.kube.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)

    # ------------------------------------------------------------------------------------ loop
    @property
    def paused(self) -> bool:
        return self.pause_flag.exists()

    def run(self) -> None:
        was_paused = False
        while not self.stopping.wait(self.interval):
            if self.paused:
                if not was_paused:
                    log.warning("heartbeats paused (%s exists)", self.pause_flag)
                was_paused = True
                continue
            try:
                self.renew_lease()
                if was_paused or time.monotonic() - self._last_status >= STATUS_INTERVAL:
                    self.post_status()
                if was_paused:
                    log.warning("heartbeats resumed")
                was_paused = False
            except Exception:
                log.exception("heartbeat failed")
